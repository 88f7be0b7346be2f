/* wer.c — scoring normalisation, Kaldi-compatible edit-distance counts, word and character error
 * rates (docs/scoring.md). Tests: tests/eval/test_wer.c */
#include "eval/wer.h"

#include "core/alloc.h"
#include "hark.h"

#include <string.h>

/* A decoded code point; invalid UTF-8 bytes map to WER_RAW + byte so they stay distinct from
 * every valid code point and are written back unchanged. */
#define WER_RAW 0x110000u

/* Decodes one code point at s (s[0] != 0); returns its length in bytes. Rejects overlong forms,
 * surrogates and values past U+10FFFF (each such byte is returned raw). */
static int utf8_next(const unsigned char *s, uint32_t *cp)
{
    unsigned c = s[0];
    int len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = WER_RAW + c;
        return 1;
    }
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { /* also stops at the terminating NUL */
            *cp = WER_RAW + c;
            return 1;
        }
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = WER_RAW + c;
        return 1;
    }
    *cp = v;
    return len;
}

static size_t utf8_put(char *o, uint32_t cp)
{
    if (cp >= WER_RAW) {
        o[0] = (char)(cp - WER_RAW);
        return 1;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Classes of the normalisation rules (docs/scoring.md lists the code points). */
enum { C_WORD, C_SPACE, C_DROP, C_APOS, C_NUMSEP };

static int is_space(uint32_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static int char_class(uint32_t c)
{
    if (is_space(c))
        return C_SPACE;
    if (c == '-' || (c >= 0x2010 && c <= 0x2015) || c == 0x2212 || c == 0xFE58 || c == 0xFE63 ||
        c == 0xFF0D)
        return C_SPACE; /* hyphens, dashes, minus */
    if (c == '\'' || c == 0x2019 || c == 0x02BC)
        return C_APOS;
    if (c == '.' || c == ',')
        return C_NUMSEP;
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0))
        return C_DROP; /* control characters */
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
                   ? C_WORD
                   : C_DROP; /* the rest of ASCII is punctuation and symbols */
    if ((c >= 0xA1 && c <= 0xBF && c != 0xAA && c != 0xB2 && c != 0xB3 && c != 0xB5 && c != 0xB9 &&
         c != 0xBA && (c < 0xBC || c > 0xBE)) ||
        c == 0xD7 || c == 0xF7)
        return C_DROP; /* Latin-1 punctuation and symbols; ª ² ³ µ ¹ º ¼ ½ ¾ stay */
    if ((c >= 0x2016 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205E) ||
        (c >= 0x200B && c <= 0x200F) || c == 0xFEFF)
        return C_DROP; /* general punctuation (quotes, daggers, ellipsis, ...), zero-width */
    if ((c >= 0x3001 && c <= 0x3003) || (c >= 0x3008 && c <= 0x3011) ||
        (c >= 0x3014 && c <= 0x301F) || c == 0x30FB)
        return C_DROP; /* CJK punctuation: 、。〃 brackets 《》「」『』【】 ・ */
    if ((c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) ||
        (c >= 0xFF3B && c <= 0xFF40) || (c >= 0xFF5B && c <= 0xFF65))
        return C_DROP; /* full-width punctuation: ！，．：；？ ... */
    return C_WORD;
}

static int is_digit(uint32_t c)
{
    return c >= '0' && c <= '9';
}

int wer_normalize(const char *text, char **out, hark_err_t *err)
{
    *out = NULL;
    size_t n = strlen(text);
    /* every input code point produces at most its own bytes (an apostrophe ’ shrinks to '), a
     * dropped one nothing, a space one byte */
    uint32_t *cps = hark_malloc(sizeof(uint32_t) * (n + 1));
    char *o = hark_malloc(n + 1);
    if (!cps || !o) {
        hark_free(cps);
        hark_free(o);
        return err_set(err, HARK_ERR_NOMEM, "out of memory normalising %zu bytes", n);
    }
    size_t m = 0;
    for (const unsigned char *s = (const unsigned char *)text; *s;)
        s += utf8_next(s, &cps[m++]);
    size_t len = 0;
    int pending_space = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = cps[i];
        int cls = char_class(c);
        uint32_t prev = i ? cps[i - 1] : ' ', next = i + 1 < m ? cps[i + 1] : ' ';
        if (cls == C_APOS) {
            if (char_class(prev) == C_WORD && char_class(next) == C_WORD)
                c = '\'', cls = C_WORD;
        } else if (cls == C_NUMSEP) {
            if (is_digit(prev) && is_digit(next))
                cls = C_WORD;
        }
        if (cls == C_SPACE) {
            pending_space = len > 0;
        } else if (cls == C_WORD) {
            if (pending_space)
                o[len++] = ' ';
            pending_space = 0;
            if (c >= 'a' && c <= 'z')
                c -= 'a' - 'A';
            len += utf8_put(o + len, c);
        }
        /* C_DROP, and apostrophes / separators not inside a word: removed */
    }
    o[len] = 0;
    hark_free(cps);
    *out = o;
    return HARK_OK;
}

typedef struct {
    long ins, del, sub, cost;
} cell_t;

int wer_align(const uint32_t *ref, size_t nref, const uint32_t *hyp, size_t nhyp, wer_counts_t *out,
              hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    cell_t *e = hark_malloc(sizeof(cell_t) * 2 * (nref + 1));
    if (!e)
        return err_set(err, HARK_ERR_NOMEM, "out of memory aligning %zu x %zu", nref, nhyp);
    cell_t *prev = e, *cur = e + nref + 1;
    /* row 0: no hypothesis symbol used, every reference symbol deleted */
    for (size_t r = 0; r <= nref; r++)
        prev[r] = (cell_t){0, (long)r, 0, (long)r};
    for (size_t h = 1; h <= nhyp; h++) {
        cur[0] = prev[0];
        cur[0].ins++;
        cur[0].cost++;
        for (size_t r = 1; r <= nref; r++) {
            int diff = hyp[h - 1] != ref[r - 1];
            long ins = prev[r].cost + 1, del = cur[r - 1].cost + 1, sub = prev[r - 1].cost + diff;
            if (sub < ins && sub < del) {
                cur[r] = prev[r - 1];
                cur[r].sub += diff;
                cur[r].cost = sub;
            } else if (del < ins) {
                cur[r] = cur[r - 1];
                cur[r].del++;
                cur[r].cost = del;
            } else {
                cur[r] = prev[r];
                cur[r].ins++;
                cur[r].cost = ins;
            }
        }
        cell_t *t = prev;
        prev = cur;
        cur = t;
    }
    out->sub = prev[nref].sub;
    out->del = prev[nref].del;
    out->ins = prev[nref].ins;
    out->ref = (long)nref;
    hark_free(e);
    return HARK_OK;
}

/* ---- word level: words become ids through a small open-addressing table ------------------- */

typedef struct {
    const char *s;
    size_t len;
} word_t;

static size_t split_words(const char *text, word_t *w)
{
    size_t n = 0;
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        uint32_t c;
        int l = utf8_next(s, &c);
        if (is_space(c)) {
            s += l;
            continue;
        }
        const unsigned char *start = s;
        while (*s && (l = utf8_next(s, &c), !is_space(c)))
            s += l;
        if (w)
            w[n] = (word_t){(const char *)start, (size_t)(s - start)};
        n++;
    }
    return n;
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int wer_words(const char *ref, const char *hyp, wer_counts_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t nr = split_words(ref, NULL), nh = split_words(hyp, NULL), n = nr + nh;
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    word_t *w = hark_malloc(sizeof(word_t) * (n ? n : 1));
    uint32_t *ids = hark_malloc(sizeof(uint32_t) * (n ? n : 1));
    int32_t *slot = hark_malloc(sizeof(int32_t) * cap); /* index of the first word with that text */
    int rc = HARK_OK;
    if (!w || !ids || !slot) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory scoring %zu words", n);
        goto done;
    }
    split_words(ref, w);
    split_words(hyp, w + nr);
    memset(slot, 0xFF, sizeof(int32_t) * cap);
    for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)fnv1a(w[i].s, w[i].len) & (cap - 1);
        while (slot[k] >= 0 &&
               (w[slot[k]].len != w[i].len || memcmp(w[slot[k]].s, w[i].s, w[i].len) != 0))
            k = (k + 1) & (cap - 1);
        if (slot[k] < 0)
            slot[k] = (int32_t)i;
        ids[i] = (uint32_t)slot[k];
    }
    rc = wer_align(ids, nr, ids + nr, nh, out, err);
done:
    hark_free(w);
    hark_free(ids);
    hark_free(slot);
    return rc;
}

/* Code points of text without whitespace; *cps from hark_malloc. */
static int to_chars(const char *text, uint32_t **cps, size_t *n, hark_err_t *err)
{
    size_t len = strlen(text), m = 0;
    *cps = hark_malloc(sizeof(uint32_t) * (len ? len : 1));
    if (!*cps)
        return err_set(err, HARK_ERR_NOMEM, "out of memory scoring %zu bytes", len);
    for (const unsigned char *s = (const unsigned char *)text; *s;) {
        uint32_t c;
        s += utf8_next(s, &c);
        if (!is_space(c))
            (*cps)[m++] = c;
    }
    *n = m;
    return HARK_OK;
}

int wer_chars(const char *ref, const char *hyp, wer_counts_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    uint32_t *r = NULL, *h = NULL;
    size_t nr = 0, nh = 0;
    int rc = to_chars(ref, &r, &nr, err);
    if (!rc)
        rc = to_chars(hyp, &h, &nh, err);
    if (!rc)
        rc = wer_align(r, nr, h, nh, out, err);
    hark_free(r);
    hark_free(h);
    return rc;
}

void wer_add(wer_counts_t *acc, const wer_counts_t *c)
{
    acc->sub += c->sub;
    acc->del += c->del;
    acc->ins += c->ins;
    acc->ref += c->ref;
}

long wer_errors(const wer_counts_t *c)
{
    return c->sub + c->del + c->ins;
}

double wer_rate(const wer_counts_t *c)
{
    return (double)wer_errors(c) / (double)(c->ref > 0 ? c->ref : 1);
}
