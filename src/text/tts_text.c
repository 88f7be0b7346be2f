/* tts_text.c — DLE FastSpeech's English front end (tts_text.h): a growing string for each pass,
 * each regular expression of the original re-done as a scan with the same leftmost, greedy /
 * lazy match rules, and inflect's number_to_words re-done as the same string rewriting (its odd
 * spaces and commas included, since they survive as ',' symbols).
 * Tests: tests/text/test_tts_text.c */
#include "text/tts_text.h"

#include "core/alloc.h"
#include "hark.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- a growing string ----------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sb_t;

static void sb_putn(sb_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = hark_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(sb_t *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static void sb_putc(sb_t *b, char c)
{
    sb_putn(b, &c, 1);
}

static void sb_free(sb_t *b)
{
    hark_free(b->p);
    memset(b, 0, sizeof *b);
}

/* b's text (never NULL) */
static const char *sb_str(sb_t *b)
{
    if (!b->p)
        sb_putn(b, "", 0);
    return b->p ? b->p : "";
}

/* ---- character classes (Python's str semantics on ASCII) ------------------------------------ */

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_space(char c) /* re's \s / str.isspace on ASCII: \t..\r, \x1c..\x1f, space */
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static int is_word(char c) /* re's \w on ASCII */
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* ---- UTF-8 and ASCII transliteration (unidecode's readings for U+00A0..U+017F and common
 * punctuation; other non-ASCII characters are dropped) ------------------------------------- */

static const char *const LATIN[0x180 - 0xa0] = {
    " ",    "!",    "C/",   "PS", "$?", "Y=", "|",  "SS", "\"", "(c)", "a",  "<<", "!", "",
    "(r)",  "-",    "deg",  "+-", "2",  "3",  "'",  "u",  "P",  "*",   ",",  "1",  "o", ">>",
    " 1/4", " 1/2", " 3/4", "?",  "A",  "A",  "A",  "A",  "A",  "A",   "AE", "C",  "E", "E",
    "E",    "E",    "I",    "I",  "I",  "I",  "D",  "N",  "O",  "O",   "O",  "O",  "O", "x",
    "O",    "U",    "U",    "U",  "U",  "Y",  "Th", "ss", "a",  "a",   "a",  "a",  "a", "a",
    "ae",   "c",    "e",    "e",  "e",  "e",  "i",  "i",  "i",  "i",   "d",  "n",  "o", "o",
    "o",    "o",    "o",    "/",  "o",  "u",  "u",  "u",  "u",  "y",   "th", "y",  "A", "a",
    "A",    "a",    "A",    "a",  "C",  "c",  "C",  "c",  "C",  "c",   "C",  "c",  "D", "d",
    "D",    "d",    "E",    "e",  "E",  "e",  "E",  "e",  "E",  "e",   "E",  "e",  "G", "g",
    "G",    "g",    "G",    "g",  "G",  "g",  "H",  "h",  "H",  "h",   "I",  "i",  "I", "i",
    "I",    "i",    "I",    "i",  "I",  "i",  "IJ", "ij", "J",  "j",   "K",  "k",  "k", "L",
    "l",    "L",    "l",    "L",  "l",  "L",  "l",  "L",  "l",  "N",   "n",  "N",  "n", "N",
    "n",    "'n",   "ng",   "NG", "O",  "o",  "O",  "o",  "O",  "o",   "OE", "oe", "R", "r",
    "R",    "r",    "R",    "r",  "S",  "s",  "S",  "s",  "S",  "s",   "S",  "s",  "T", "t",
    "T",    "t",    "T",    "t",  "U",  "u",  "U",  "u",  "U",  "u",   "U",  "u",  "U", "u",
    "U",    "u",    "W",    "w",  "Y",  "y",  "Y",  "Z",  "z",  "Z",   "z",  "Z",  "z", "s",
};

static const char *punct(uint32_t cp)
{
    switch (cp) {
    case 0x2010:
    case 0x2011:
    case 0x2012:
    case 0x2013:
    case 0x2212:
        return "-";
    case 0x2014:
    case 0x2015:
        return "--";
    case 0x2018:
    case 0x2019:
    case 0x201b:
    case 0x2032:
        return "'";
    case 0x201a:
        return ",";
    case 0x201c:
    case 0x201d:
    case 0x201f:
        return "\"";
    case 0x201e:
        return ",,";
    case 0x2026:
        return "...";
    case 0x2022:
        return "*";
    case 0x2039:
        return "<";
    case 0x203a:
        return ">";
    case 0x20ac:
        return "EUR";
    case 0x2122:
        return "(tm)";
    case 0x2000:
    case 0x2001:
    case 0x2002:
    case 0x2003:
    case 0x2004:
    case 0x2005:
    case 0x2006:
    case 0x2007:
    case 0x2008:
    case 0x2009:
    case 0x200a:
    case 0x202f:
    case 0x205f:
    case 0x3000:
    case 0x200b:
        return " ";
    case 0x2028:
        return "\n";
    case 0x2029:
        return "\n\n";
    default:
        return "";
    }
}

/* next code point of s[*i..n), advancing *i; -1 on invalid UTF-8 */
static int64_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n)
        return -1;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
    for (int k = 1; k < len; k++) {
        if ((u[*i + k] & 0xc0) != 0x80)
            return -1;
        cp = cp << 6 | (u[*i + k] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *i += (size_t)len;
    return cp;
}

static const char *dle_unidecoder(uint32_t cp, char one[2]);

static int to_ascii(const char *s, size_t n, tts_text_variant_t v, sb_t *out, hark_err_t *err)
{
    for (size_t i = 0; i < n;) {
        size_t at = i;
        int64_t cp = utf8_next(s, n, &i);
        if (cp < 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "text: invalid UTF-8 at byte %zu", at);
        if (v == TTS_TEXT_DLE_TACOTRON2) {
            char one[2];
            if (cp < 0x7f)
                sb_putc(out, (char)cp);
            else
                sb_puts(out, dle_unidecoder((uint32_t)cp, one));
        } else if (cp < 0x80)
            sb_putc(out, (char)cp);
        else if (cp >= 0xa0 && cp < 0x180)
            sb_puts(out, LATIN[cp - 0xa0]);
        else if (cp == 0x85)
            sb_puts(out, "\n");
        else
            sb_puts(out, punct((uint32_t)cp));
    }
    return HARK_OK;
}

/* DLE Tacotron2's own `unidecoder` (tacotron2/text/unidecoder): characters below U+007F are
 * kept; any other is looked up in its replacement table (German umlauts as two letters, ü ->
 * ue), then in its homoglyph table; what neither has is dropped (the original warns). Here:
 * that behaviour for Latin-1, Latin Extended-A, General Punctuation, the currency signs and the
 * fullwidth forms (identical to the original over U+007F-U+017F, U+2000-U+20CF and
 * U+FF00-U+FFEF: tools/tts_text_reference.py --tacotron2 --sweep); other scripts (Latin
 * Extended-B, Greek, Cyrillic, mathematical letters, ...) are dropped (docs/tts.md). */
static const char *const DLE_LATIN1[0x100 - 0xa0] = {
    " ", "",  "c", "",  "",   "Y", "",   "",  "\"", "",  "",  "",  "",   "",  "",   "",
    "",  "",  "",  "",  "'",  "",  "",   "",  ",",  "",  "",  "",  "",   "",  "",   "",
    "A", "A", "A", "A", "Ae", "A", "AE", "C", "E",  "E", "E", "E", "I",  "I", "I",  "I",
    "D", "N", "O", "O", "O",  "O", "Oe", "x", "O",  "U", "U", "U", "Ue", "Y", "TH", "ss",
    "a", "a", "a", "a", "ae", "a", "ae", "c", "e",  "e", "e", "e", "i",  "i", "i",  "i",
    "d", "n", "o", "o", "o",  "o", "oe", "",  "o",  "u", "u", "u", "ue", "y", "th", "y",
};
/* U+0100..U+017F: the base letter of the characters the table's language lists have ('.':
 * none; '*': U+0132/U+0133, IJ and ij) */
static const char DLE_EXT_A[] = "AaAaAaCc....CcDd"
                                "DdEe..EeEeEe..Gg"
                                "..Gg....IiIi..Ii"
                                "Ii**..Kk...Ll..."
                                ".LlNnNnNn......."
                                "Oo......RrSs..Ss"
                                "SsTtTt..UuUu..Uu"
                                "UuUu.....ZzZzZzf";

static const char *dle_unidecoder(uint32_t cp, char one[2])
{
    if (cp >= 0xa0 && cp < 0x100)
        return DLE_LATIN1[cp - 0xa0];
    if (cp >= 0x100 && cp < 0x180) {
        char c = DLE_EXT_A[cp - 0x100];
        if (c == '*')
            return cp == 0x132 ? "IJ" : "ij";
        one[0] = c == '.' ? 0 : c;
        one[1] = 0;
        return one;
    }
    if (cp >= 0xff01 && cp <= 0xff5e) { /* fullwidth forms: mostly their ASCII homoglyph */
        switch (cp) {
        case 0xff02:
        case 0xff03:
        case 0xff0d:
        case 0xff3e:
        case 0xff5c:
        case 0xff5e:
            return "";
        case 0xff10:
            return "o"; /* the homoglyph table lists it under 'o', not '0' */
        case 0xff11:
        case 0xff29:
            return "l"; /* and these under 'l' */
        case 0xff3b:
            return "(";
        case 0xff3d:
            return ")";
        case 0xff40:
            return "'";
        default:
            one[0] = (char)(cp - 0xfee0);
            one[1] = 0;
            return one;
        }
    }
    if (cp >= 0x20a0 && cp <= 0x20bf) { /* currency signs: the replacement table's readings */
        static const char *const CUR[0x20c0 - 0x20a0] = {
            "CE", "C", "Cr", "F", "",  "m", "N",  "Pt", "Rs", "W", "",  "s", "E", "K", "T", "Dp",
            "S",  "P", "G",  "A", "S", "C", "tt", "S",  "T",  "R", "L", "",  "",  "P", "",  "B"};
        return CUR[cp - 0x20a0];
    }
    switch (cp) {
    case 0x203d:
        return "?!";
    case 0x2041:
    case 0x2044:
        return "/";
    case 0x204e:
        return "*";
    case 0x2053:
        return "~";
    case 0x205a:
        return ":";
    case 0xffe0:
        return "c";
    case 0xffe5:
        return "Y";
    case 0xffe6:
        return "W";
    case 0xffe8:
        return "l";
    case 0x1680:
    case 0x2000:
    case 0x2001:
    case 0x2002:
    case 0x2003:
    case 0x2004:
    case 0x2005:
    case 0x2006:
    case 0x2007:
    case 0x2008:
    case 0x2009:
    case 0x200a:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
        return " ";
    case 0x2b9:
    case 0x2bb:
    case 0x2bc:
    case 0x2bd:
    case 0x2be:
    case 0x2c8:
    case 0x2ca:
    case 0x2cb:
    case 0x2018:
    case 0x2019:
    case 0x201b:
    case 0x2032:
    case 0x2035:
    case 0xff07:
        return "'";
    case 0x2ba:
    case 0x2dd:
    case 0x201c:
    case 0x201d:
    case 0x201f:
        return "\"";
    case 0x201a:
    case 0xff0c:
        return ",";
    case 0x2d7:
    case 0x2010:
    case 0x2011:
    case 0x2012:
    case 0x2013:
    case 0x2043:
    case 0x2212:
        return "-";
    case 0x2024:
    case 0xff0e:
        return ".";
    case 0x2d0:
    case 0x2236:
    case 0xff1a:
        return ":";
    case 0x37e:
    case 0xff1b:
        return ";";
    case 0xff01:
        return "!";
    case 0xff1f:
        return "?";
    case 0x2039:
        return "<";
    case 0x203a:
        return ">";
    case 0xff08:
    case 0xff3b:
        return "(";
    case 0xff09:
    case 0xff3d:
        return ")";
    case 0x2dc:
    case 0x223c:
        return "~";
    default:
        return ""; /* U+007F, U+2014 (em dash), U+2026 (ellipsis), ...: dropped */
    }
}

/* ---- inflect's number_to_words ------------------------------------------------------------ */

static const char *const UNIT[10] = {"",     "one", "two",   "three", "four",
                                     "five", "six", "seven", "eight", "nine"};
static const char *const TEEN[10] = {"ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                     "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
static const char *const TEN[10] = {"",      "",      "twenty",  "thirty", "forty",
                                    "fifty", "sixty", "seventy", "eighty", "ninety"};
#define N_MILL 12
static const char *const MILL[N_MILL] = {
    " ",           " thousand",    " million",     " billion",
    " trillion",   " quadrillion", " quintillion", " sextillion",
    " septillion", " octillion",   " nonillion",   " decillion"};

static void tenfn(sb_t *b, int t, int u, int m)
{
    if (t != 1) {
        sb_puts(b, TEN[t]);
        if (t && u)
            sb_putc(b, '-');
        sb_puts(b, UNIT[u]);
    } else {
        sb_puts(b, TEEN[u]);
    }
    sb_puts(b, MILL[m]);
}

/* enword(num, group=0) for a digit string */
static int enword0(const char *d, size_t n, const char *andword, sb_t *b, hark_err_t *err)
{
    while (n > 1 && *d == '0')
        d++, n--;
    if (n == 1 && *d == '0') {
        sb_puts(b, "zero");
        return HARK_OK;
    }
    if (n == 1 && *d == '1') {
        sb_puts(b, "one");
        return HARK_OK;
    }
    size_t groups = n / 3, lead = n % 3;
    if (groups + (lead ? 1 : 0) > N_MILL)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "text: a number of %zu digits is too long to read (at most %d)", n,
                       3 * N_MILL);
    if (lead == 1) {
        sb_puts(b, UNIT[d[0] - '0']);
        sb_puts(b, MILL[groups]);
        sb_puts(b, ", ");
    } else if (lead == 2) {
        tenfn(b, d[0] - '0', d[1] - '0', (int)groups);
        sb_puts(b, ", ");
    }
    for (size_t g = 0; g < groups; g++) {
        const char *q = d + lead + 3 * g;
        int h = q[0] - '0', t = q[1] - '0', u = q[2] - '0', m = (int)(groups - 1 - g);
        if (h) {
            sb_puts(b, UNIT[h]);
            sb_puts(b, " hundred");
            if (t || u) {
                sb_putc(b, ' ');
                sb_puts(b, andword);
                sb_putc(b, ' ');
            }
            tenfn(b, t, u, 0);
            sb_puts(b, MILL[m]);
            sb_puts(b, ", ");
        } else if (t || u) {
            tenfn(b, t, u, 0);
            sb_puts(b, MILL[m]);
            sb_puts(b, ", ");
        }
    }
    return HARK_OK;
}

/* enword(num, group=2) with zero="oh" (the year reading) */
static void enword2_oh(const char *d, size_t n, sb_t *b)
{
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        int t = d[i] - '0', u = d[i + 1] - '0';
        if (t) {
            tenfn(b, t, u, 0);
            sb_puts(b, ", ");
        } else if (u) {
            sb_puts(b, " oh ");
            sb_puts(b, UNIT[u]);
            sb_puts(b, ", ");
        } else {
            sb_puts(b, " oh oh, ");
        }
    }
    if (i < n) { /* group1bsub */
        int u = d[i] - '0';
        if (u) {
            sb_puts(b, UNIT[u]);
            sb_puts(b, ", ");
        } else {
            sb_puts(b, " oh, ");
        }
    }
}

/* number_to_words' clean-up of one chunk: drop a final ", ", "\s+," -> ",", (group 0) the
 * ", (\S+)\s+\Z" -> " and \1" rule, whitespace runs -> " ", strip. */
static void chunk_tidy(const char *s, int group0, const char *andword, sb_t *out)
{
    size_t n = strlen(s);
    if (n >= 2 && s[n - 2] == ',' && s[n - 1] == ' ')
        n -= 2;
    sb_t a = {0};
    for (size_t i = 0; i < n;) { /* \s+, -> , */
        if (is_space(s[i])) {
            size_t j = i;
            while (j < n && is_space(s[j]))
                j++;
            if (j < n && s[j] == ',') {
                sb_putc(&a, ',');
                i = j + 1;
                continue;
            }
            sb_putn(&a, s + i, j - i);
            i = j;
            continue;
        }
        sb_putc(&a, s[i++]);
    }
    const char *t = sb_str(&a);
    size_t m = a.n;
    sb_t c = {0};
    int done = 0;
    if (group0 && m && is_space(t[m - 1])) {
        size_t e = m;
        while (e > 0 && is_space(t[e - 1]))
            e--;
        size_t st = e;
        while (st > 0 && !is_space(t[st - 1]))
            st--;
        if (e > st && st >= 2 && t[st - 1] == ' ' && t[st - 2] == ',') {
            sb_putn(&c, t, st - 2);
            sb_putc(&c, ' ');
            sb_puts(&c, andword);
            sb_putc(&c, ' ');
            sb_putn(&c, t + st, e - st);
            done = 1;
        }
    }
    if (!done)
        sb_putn(&c, t, m);
    t = sb_str(&c);
    m = c.n;
    size_t i = 0; /* collapse and strip */
    while (i < m && is_space(t[i]))
        i++;
    size_t e = m;
    while (e > i && is_space(t[e - 1]))
        e--;
    int sp = 0;
    for (; i < e; i++) {
        if (is_space(t[i])) {
            sp = 1;
            continue;
        }
        if (sp)
            sb_putc(out, ' ');
        sp = 0;
        sb_putc(out, t[i]);
    }
    out->oom |= a.oom | c.oom;
    sb_free(&a);
    sb_free(&c);
}

/* inflect's ordinal(): the last word's suffix */
static void ordinalize(sb_t *b)
{
    static const char *const from[] = {"ty",   "one",   "two",  "three",
                                       "five", "eight", "nine", "twelve"};
    static const char *const to[] = {"tieth", "first",  "second", "third",
                                     "fifth", "eighth", "ninth",  "twelfth"};
    const char *s = sb_str(b);
    /* the leftmost alternative that ends the text: at most one can */
    size_t best = b->n + 1;
    int which = -1;
    for (int k = 0; k < 8; k++) {
        size_t l = strlen(from[k]);
        if (b->n >= l && !strcmp(s + b->n - l, from[k]) && b->n - l < best) {
            best = b->n - l;
            which = k;
        }
    }
    if (which < 0) {
        sb_puts(b, "th");
        return;
    }
    b->n = best;
    b->p[b->n] = 0;
    sb_puts(b, to[which]);
}

int tts_number_words(const char *digits, const char *andword, char **out, hark_err_t *err)
{
    size_t n = strlen(digits);
    int ord = n >= 2 && (!strcmp(digits + n - 2, "st") || !strcmp(digits + n - 2, "nd") ||
                         !strcmp(digits + n - 2, "rd") || !strcmp(digits + n - 2, "th"));
    if (ord)
        n -= 2;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(digits[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "number words: '%s' is not a number", digits);
    if (!n)
        return err_set(err, HARK_ERR_INVALID_ARG, "number words: empty number");
    sb_t raw = {0}, b = {0};
    int rc = enword0(digits, n, andword, &raw, err);
    if (!rc) {
        chunk_tidy(sb_str(&raw), 1, andword, &b);
        if (ord && b.n) {
            /* split on ", ": only the last piece changes */
            ordinalize(&b);
        }
        sb_str(&b);
    }
    if (!rc && (b.oom || raw.oom))
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading a number");
    sb_free(&raw);
    if (rc) {
        sb_free(&b);
        return rc;
    }
    *out = b.p;
    return HARK_OK;
}

static int put_number_words(sb_t *o, const char *d, size_t n, const char *andword, hark_err_t *err)
{
    char buf[128];
    if (n + 3 > sizeof buf)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "text: a number of %zu digits is too long to read (at most %d)", n,
                       3 * N_MILL);
    memcpy(buf, d, n);
    buf[n] = 0;
    char *w = NULL;
    int rc = tts_number_words(buf, andword, &w, err);
    if (!rc)
        sb_puts(o, w);
    hark_free(w);
    return rc;
}

/* _expand_number on a digit run */
static int expand_number(sb_t *o, const char *d, size_t n, hark_err_t *err)
{
    while (n > 1 && *d == '0')
        d++, n--;
    long v = -1;
    if (n <= 4) {
        v = 0;
        for (size_t i = 0; i < n; i++)
            v = v * 10 + (d[i] - '0');
    }
    if (v > 1000 && v < 3000) {
        if (v == 2000) {
            sb_puts(o, "two thousand");
        } else if (v > 2000 && v < 2010) {
            sb_puts(o, "two thousand ");
            sb_puts(o, UNIT[v % 10]);
        } else if (v % 100 == 0) {
            int rc = put_number_words(o, d, n - 2, "and", err);
            if (rc)
                return rc;
            sb_puts(o, " hundred");
        } else {
            sb_t raw = {0}, t = {0};
            enword2_oh(d, n, &raw);
            chunk_tidy(sb_str(&raw), 0, "", &t);
            const char *s = sb_str(&t);
            for (size_t i = 0; i < t.n; i++) { /* ", ".join(split(", ")).replace(", ", " ") */
                if (s[i] == ',' && s[i + 1] == ' ') {
                    sb_putc(o, ' ');
                    i++;
                } else {
                    sb_putc(o, s[i]);
                }
            }
            o->oom |= raw.oom | t.oom;
            sb_free(&raw);
            sb_free(&t);
        }
        return HARK_OK;
    }
    return put_number_words(o, d, n, "", err);
}

/* ---- normalize_numbers --------------------------------------------------------------------- */

/* "[0-9][0-9,]+[0-9]" -> the match without commas */
static void remove_commas(const char *s, sb_t *o)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (is_digit(s[i])) {
            size_t j = i;
            while (j < n && (is_digit(s[j]) || s[j] == ','))
                j++;
            size_t last = j - 1;
            while (!is_digit(s[last]))
                last--;
            if (last >= i + 2) {
                for (size_t k = i; k <= last; k++)
                    if (s[k] != ',')
                        sb_putc(o, s[k]);
                i = last + 1;
                continue;
            }
        }
        sb_putc(o, s[i++]);
    }
}

/* digits of s[0..n) as an int's decimal form ("" -> "0", leading zeros gone), or -1 when int()
 * would raise */
static int py_int(const char *s, size_t n, char *buf, size_t cap)
{
    size_t i = 0;
    while (i + 1 < n && s[i] == '0')
        i++;
    if (n == 0) {
        buf[0] = '0';
        buf[1] = 0;
        return 0;
    }
    if (n - i + 1 > cap)
        return -2;
    for (size_t k = i; k < n; k++) {
        if (!is_digit(s[k]))
            return -1;
        buf[k - i] = s[k];
    }
    buf[n - i] = 0;
    return 0;
}

/* "\$([0-9.,]*[0-9]+)" -> _expand_dollars */
static int expand_dollars(const char *s, sb_t *o, hark_err_t *err)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (s[i] == '$') {
            size_t j = i + 1;
            while (j < n && (is_digit(s[j]) || s[j] == '.' || s[j] == ','))
                j++;
            size_t e = j;
            while (e > i + 1 && !is_digit(s[e - 1]))
                e--;
            if (e > i + 1) {
                const char *g = s + i + 1;
                size_t gn = e - i - 1, dots = 0, dot = 0;
                for (size_t k = 0; k < gn; k++)
                    if (g[k] == '.')
                        dots++, dot = dot ? dot : k + 1;
                if (dots > 1) {
                    sb_putn(o, g, gn);
                    sb_puts(o, " dollars");
                } else {
                    char dol[128], cen[128];
                    size_t dn = dots ? dot - 1 : gn;
                    int r1 = py_int(g, dn, dol, sizeof dol);
                    int r2 = dots ? py_int(g + dot, gn - dot, cen, sizeof cen)
                                  : py_int(g, 0, cen, sizeof cen);
                    if (r1 || r2)
                        return err_set(err, HARK_ERR_UNSUPPORTED,
                                       "text: cannot read the amount '$%.*s' (the original "
                                       "front end fails on it too)",
                                       (int)gn, g);
                    int d0 = !strcmp(dol, "0"), c0 = !strcmp(cen, "0");
                    const char *du = !strcmp(dol, "1") ? "dollar" : "dollars";
                    const char *cu = !strcmp(cen, "1") ? "cent" : "cents";
                    char tmp[400];
                    if (!d0 && !c0)
                        snprintf(tmp, sizeof tmp, "%s %s, %s %s", dol, du, cen, cu);
                    else if (!d0)
                        snprintf(tmp, sizeof tmp, "%s %s", dol, du);
                    else if (!c0)
                        snprintf(tmp, sizeof tmp, "%s %s", cen, cu);
                    else
                        snprintf(tmp, sizeof tmp, "zero dollars");
                    sb_puts(o, tmp);
                }
                i = e;
                continue;
            }
        }
        sb_putc(o, s[i++]);
    }
    return HARK_OK;
}

/* "([0-9]+\.[0-9]+)" -> '.' read as " point " */
static void expand_decimals(const char *s, sb_t *o)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (is_digit(s[i])) {
            size_t a = i;
            while (a < n && is_digit(s[a]))
                a++;
            if (a + 1 < n && s[a] == '.' && is_digit(s[a + 1])) {
                size_t b = a + 1;
                while (b < n && is_digit(s[b]))
                    b++;
                sb_putn(o, s + i, a - i);
                sb_puts(o, " point ");
                sb_putn(o, s + a + 1, b - a - 1);
                i = b;
                continue;
            }
            sb_putn(o, s + i, a - i);
            i = a;
            continue;
        }
        sb_putc(o, s[i++]);
    }
}

/* "[0-9]+(st|nd|rd|th)" -> ordinal words, then "[0-9]+" -> _expand_number */
static int expand_ordinals(const char *s, sb_t *o, hark_err_t *err)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (is_digit(s[i])) {
            size_t a = i;
            while (a < n && is_digit(s[a]))
                a++;
            if (a + 1 < n && (!strncmp(s + a, "st", 2) || !strncmp(s + a, "nd", 2) ||
                              !strncmp(s + a, "rd", 2) || !strncmp(s + a, "th", 2))) {
                int rc = put_number_words(o, s + i, a - i + 2, "and", err);
                if (rc)
                    return rc;
                i = a + 2;
                continue;
            }
            sb_putn(o, s + i, a - i);
            i = a;
            continue;
        }
        sb_putc(o, s[i++]);
    }
    return HARK_OK;
}

static int expand_numbers(const char *s, sb_t *o, hark_err_t *err)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (is_digit(s[i])) {
            size_t a = i;
            while (a < n && is_digit(s[a]))
                a++;
            int rc = expand_number(o, s + i, a - i, err);
            if (rc)
                return rc;
            i = a;
            continue;
        }
        sb_putc(o, s[i++]);
    }
    return HARK_OK;
}

/* ---- abbreviations and whitespace ----------------------------------------------------------- */

static const char *const ABBR[18][2] = {
    {"mrs", "misess"},   {"mr", "mister"},    {"dr", "doctor"},     {"st", "saint"},
    {"co", "company"},   {"jr", "junior"},    {"maj", "major"},     {"gen", "general"},
    {"drs", "doctors"},  {"rev", "reverend"}, {"lt", "lieutenant"}, {"hon", "honorable"},
    {"sgt", "sergeant"}, {"capt", "captain"}, {"esq", "esquire"},   {"ltd", "limited"},
    {"col", "colonel"},  {"ft", "fort"}};

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* "\b<abbr>\." (ignoring case) -> the word */
static void expand_abbr(const char *s, const char *abbr, const char *word, sb_t *o)
{
    size_t n = strlen(s), l = strlen(abbr);
    for (size_t i = 0; i < n;) {
        if ((i == 0 || !is_word(s[i - 1])) && i + l < n && s[i + l] == '.') {
            size_t k = 0;
            while (k < l && lower(s[i + k]) == abbr[k])
                k++;
            if (k == l) {
                sb_puts(o, word);
                i += l + 1;
                continue;
            }
        }
        sb_putc(o, s[i++]);
    }
}

/* ---- english_cleaners ----------------------------------------------------------------------- */

int tts_text_clean(const char *utf8, size_t len, char **out, hark_err_t *err)
{
    return tts_text_clean_variant(utf8, len, TTS_TEXT_FASTSPEECH, out, err);
}

int tts_text_clean_variant(const char *utf8, size_t len, tts_text_variant_t v, char **out,
                           hark_err_t *err)
{
    sb_t a = {0}, b = {0};
    int rc = to_ascii(utf8, len, v, &a, err);
    if (rc)
        goto done;
    sb_str(&a);
    for (size_t i = 0; i < a.n; i++)
        a.p[i] = lower(a.p[i]);
    remove_commas(sb_str(&a), &b); /* normalize_numbers; £ is "PS" by now */
    a.n = 0;
    if ((rc = expand_dollars(sb_str(&b), &a, err)))
        goto done;
    b.n = 0;
    expand_decimals(sb_str(&a), &b);
    a.n = 0;
    if ((rc = expand_ordinals(sb_str(&b), &a, err)))
        goto done;
    b.n = 0;
    if ((rc = expand_numbers(sb_str(&a), &b, err)))
        goto done;
    for (int k = 0; k < 18; k++) {
        a.n = 0;
        expand_abbr(sb_str(&b), ABBR[k][0], ABBR[k][1], &a);
        sb_t t = a;
        a = b;
        b = t;
    }
    a.n = 0; /* collapse_whitespace: runs -> one space, ends kept */
    const char *s = sb_str(&b);
    for (size_t i = 0; i < b.n;) {
        if (is_space(s[i])) {
            while (i < b.n && is_space(s[i]))
                i++;
            sb_putc(&a, ' ');
        } else {
            sb_putc(&a, s[i++]);
        }
    }
    sb_str(&a);
    if (a.oom || b.oom)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory cleaning text");
done:
    sb_free(&b);
    if (rc) {
        sb_free(&a);
        return rc;
    }
    *out = a.p;
    return HARK_OK;
}

/* ---- symbols -------------------------------------------------------------------------------- */

static const char *const ARPABET[84] = {
    "AA",  "AA0", "AA1", "AA2", "AE",  "AE0", "AE1", "AE2", "AH",  "AH0", "AH1", "AH2", "AO", "AO0",
    "AO1", "AO2", "AW",  "AW0", "AW1", "AW2", "AY",  "AY0", "AY1", "AY2", "B",   "CH",  "D",  "DH",
    "EH",  "EH0", "EH1", "EH2", "ER",  "ER0", "ER1", "ER2", "EY",  "EY0", "EY1", "EY2", "F",  "G",
    "HH",  "IH",  "IH0", "IH1", "IH2", "IY",  "IY0", "IY1", "IY2", "JH",  "K",   "L",   "M",  "N",
    "NG",  "OW",  "OW0", "OW1", "OW2", "OY",  "OY0", "OY1", "OY2", "P",   "R",   "S",   "SH", "T",
    "TH",  "UH",  "UH0", "UH1", "UH2", "UW",  "UW0", "UW1", "UW2", "V",   "W",   "Y",   "Z",  "ZH"};
static const char CHARS[] = "_-!'(),.:;? ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
#define N_CHARS 64

const char *tts_symbol(int id)
{
    static char one[N_CHARS][2];
    static char arp[84][8];
    if (id < 0 || id >= TTS_N_SYMBOLS)
        return NULL;
    if (id < N_CHARS) {
        one[id][0] = CHARS[id];
        return one[id];
    }
    snprintf(arp[id - N_CHARS], sizeof arp[0], "@%s", ARPABET[id - N_CHARS]);
    return arp[id - N_CHARS];
}

typedef struct {
    int *ids;
    int n, cap, oom;
} ids_t;

static void ids_push(ids_t *v, int id)
{
    if (v->oom)
        return;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        int *p = hark_realloc(v->ids, sizeof(int) * (size_t)cap);
        if (!p) {
            v->oom = 1;
            return;
        }
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
}

static void chars_to_ids(const char *s, ids_t *v)
{
    for (; *s; s++) {
        /* '_' is kept as id 0: the original means to drop '_' and '~' but tests them with
         * `is not`, an identity test that CPython 3.11 answers True for the characters of the
         * cleaned text, so '_' survives (tools/tts_text_reference.py shows it); '~' is no symbol */
        const char *p = *s ? strchr(CHARS, *s) : NULL;
        if (p)
            ids_push(v, (int)(p - CHARS));
    }
}

static int is_uspace(int64_t cp)
{
    return (cp < 0x80 && is_space((char)cp)) || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
           cp == 0x205f || cp == 0x3000;
}

/* str.split() of s[0..n) into '@'-symbols */
static void arpabet_to_ids(const char *s, size_t n, ids_t *v)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i, start = i;
        int64_t cp = utf8_next(s, n, &j);
        if (is_uspace(cp)) {
            i = j;
            continue;
        }
        size_t e = i;
        while (e < n) {
            size_t k = e;
            cp = utf8_next(s, n, &k);
            if (cp < 0 || is_uspace(cp))
                break;
            e = k;
        }
        if (e == start) { /* invalid byte: the caller checked UTF-8 already */
            i++;
            continue;
        }
        for (int a = 0; a < 84; a++)
            if (strlen(ARPABET[a]) == e - start && !memcmp(ARPABET[a], s + start, e - start)) {
                ids_push(v, N_CHARS + a);
                break;
            }
        i = e;
    }
}

int tts_text_to_ids(const char *utf8, tts_text_t *out, hark_err_t *err)
{
    return tts_text_to_ids_variant(utf8, TTS_TEXT_FASTSPEECH, out, err);
}

int tts_text_to_ids_variant(const char *utf8, tts_text_variant_t variant, tts_text_t *out,
                            hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t n = strlen(utf8);
    for (size_t i = 0; i < n;) { /* one check up front, so every error names the whole text */
        size_t at = i;
        if (utf8_next(utf8, n, &i) < 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "text: invalid UTF-8 at byte %zu", at);
    }
    ids_t v = {0};
    sb_t cleaned = {0};
    int rc = HARK_OK;
    const char *s = utf8;
    size_t len = n; /* the text still to read: s[0..len) */
    while (len) {
        /* (.*?)\{(.+?)\}(.*) without DOTALL: the first '{' (before any newline) that a '}' at
         * least two bytes on closes, with no newline between them */
        size_t open = 0, close = 0;
        int found = 0;
        for (size_t i = 0; i < len && s[i] != '\n' && !found; i++) {
            if (s[i] != '{')
                continue;
            for (size_t j = i + 1; j < len && s[j] != '\n'; j++)
                if (s[j] == '}' && j >= i + 2) {
                    open = i;
                    close = j;
                    found = 1;
                    break;
                }
        }
        size_t seg = found ? open : len;
        char *c = NULL;
        if ((rc = tts_text_clean_variant(s, seg, variant, &c, err)))
            break;
        chars_to_ids(c, &v);
        sb_puts(&cleaned, c);
        hark_free(c);
        if (!found)
            break;
        arpabet_to_ids(s + open + 1, close - open - 1, &v);
        /* group 3 (the rest) stops at the first newline: what follows is never read */
        s += close + 1;
        size_t e = 0;
        while (e < len - close - 1 && s[e] != '\n')
            e++;
        len = e;
    }
    if (!rc && (v.oom || cleaned.oom))
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading text");
    int speakable = 0;
    for (int i = 0; i < v.n && !speakable; i++)
        speakable = v.ids[i] >= TTS_FIRST_LETTER;
    if (!rc && !speakable)
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "text: nothing speakable is left after cleaning (no letters, digits or "
                     "ARPAbet phones)");
    if (rc) {
        hark_free(v.ids);
        sb_free(&cleaned);
        return rc;
    }
    out->ids = v.ids;
    out->n = v.n;
    sb_str(&cleaned);
    out->cleaned = cleaned.p;
    return HARK_OK;
}

void tts_text_free(tts_text_t *t)
{
    if (!t)
        return;
    hark_free(t->ids);
    hark_free(t->cleaned);
    memset(t, 0, sizeof *t);
}
