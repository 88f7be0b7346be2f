/* pbtxt.c — protobuf text-format tokenizer + recursive-descent parser into a generic tree, and
 * scalar conversions. Tests: tests/server/test_model_config.c (the parser cases); fuzz:
 * tests/fuzz/fuzz_model_config.c */
#include "core/pbtxt.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PBTXT_MAX_DEPTH 64

/* ============================================================================================
 * Tokenizer
 * ========================================================================================== */
enum { T_EOF = 256, T_IDENT, T_NUMBER, T_STRING };

typedef struct {
    const char *p, *end, *path;
    int line;
    const char *line_start;
    arena_t *arena;
    hark_err_t *err;
    int depth;
    /* current token */
    int tok;
    const char *ts; /* raw text */
    size_t tl;
    int tline, tcol;
    char *sval; /* T_STRING: decoded bytes (arena) */
    size_t slen;
} lex_t;

static int lex_error(lex_t *lx, int line, int col, const char *fmt, const char *a, const char *b)
{
    char what[300];
    snprintf(what, sizeof what, fmt, a ? a : "", b ? b : "");
    return err_set(lx->err, HARK_ERR_FORMAT, "%s:%d:%d: %s", lx->path, line, col, what);
}

/* Printable excerpt of the current token for messages. */
static const char *tok_desc(lex_t *lx, char *buf, size_t cap)
{
    if (lx->tok == T_EOF)
        return "end of file";
    size_t n = lx->tl < 24 ? lx->tl : 24;
    size_t o = 0;
    buf[o++] = '\'';
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)lx->ts[i];
        if (c >= 0x20 && c < 0x7f) {
            buf[o++] = (char)c;
        } else {
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        }
    }
    if (n < lx->tl && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o++] = '\'';
    buf[o] = 0;
    return buf;
}

static int is_ident0(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}
static int is_ident(int c)
{
    return is_ident0(c) || is_digit(c);
}
static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decodes a quoted literal starting at lx->p (the quote). Escapes: \n \t \r \a \b \f \v \\ \' \"
 * \? \ooo (octal) \xHH \uHHHH \UHHHHHHHH. A raw newline ends the line: an error. */
static int lex_string(lex_t *lx)
{
    char q = *lx->p++;
    /* decoded text is never longer than the raw text (+4 for a short \u escape's UTF-8) */
    const char *s = lx->p;
    size_t cap = 1;
    while (s < lx->end && *s != q && *s != '\n') {
        if (*s == '\\' && s + 1 < lx->end)
            s++;
        s++;
        cap += 4;
    }
    char *o = arena_alloc(lx->arena, cap, 1);
    if (!o)
        return err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
    size_t n = 0;
    for (;;) {
        if (lx->p >= lx->end || *lx->p == '\n')
            return lex_error(lx, lx->tline, lx->tcol, "unterminated string%s%s", NULL, NULL);
        char c = *lx->p++;
        if (c == q)
            break;
        if (c != '\\') {
            o[n++] = c;
            continue;
        }
        if (lx->p >= lx->end)
            continue; /* reported as unterminated on the next turn */
        char e = *lx->p++;
        int v;
        switch (e) {
        case 'n':
            o[n++] = '\n';
            break;
        case 't':
            o[n++] = '\t';
            break;
        case 'r':
            o[n++] = '\r';
            break;
        case 'a':
            o[n++] = '\a';
            break;
        case 'b':
            o[n++] = '\b';
            break;
        case 'f':
            o[n++] = '\f';
            break;
        case 'v':
            o[n++] = '\v';
            break;
        case '\\':
        case '\'':
        case '"':
        case '?':
            o[n++] = e;
            break;
        case 'x':
        case 'X':
            v = 0;
            if (lx->p >= lx->end || hexval(*lx->p) < 0)
                return lex_error(lx, lx->tline, lx->tcol, "bad \\x escape in string%s%s", NULL,
                                 NULL);
            for (int k = 0; k < 2 && lx->p < lx->end && hexval(*lx->p) >= 0; k++)
                v = v * 16 + hexval(*lx->p++);
            o[n++] = (char)v;
            break;
        case 'u':
        case 'U': {
            int nd = e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                if (lx->p >= lx->end || hexval(*lx->p) < 0)
                    return lex_error(lx, lx->tline, lx->tcol, "bad \\%s escape in string%s",
                                     e == 'u' ? "u" : "U", NULL);
                cp = cp * 16 + (uint32_t)hexval(*lx->p++);
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return lex_error(lx, lx->tline, lx->tcol,
                                 "\\u escape is not a Unicode scalar value%s%s", NULL, NULL);
            n += put_utf8(o + n, cp);
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                v = e - '0';
                for (int k = 0; k < 2 && lx->p < lx->end && *lx->p >= '0' && *lx->p <= '7'; k++)
                    v = v * 8 + (*lx->p++ - '0');
                if (v > 255)
                    return lex_error(lx, lx->tline, lx->tcol, "octal escape above \\377%s%s", NULL,
                                     NULL);
                o[n++] = (char)v;
                break;
            }
            {
                char esc[3] = {'\\', e, 0};
                return lex_error(lx, lx->tline, lx->tcol, "unknown escape '%s' in string%s", esc,
                                 NULL);
            }
        }
    }
    o[n] = 0;
    lx->sval = o;
    lx->slen = n;
    return HARK_OK;
}

/* Checks that [s, s+n) is a well-formed number: integer (decimal, 0x hex, 0 octal) or float
 * (digits, '.', exponent, optional f/F suffix). */
static int number_ok(const char *s, size_t n)
{
    if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        if (n == 2)
            return 0;
        for (size_t i = 2; i < n; i++)
            if (hexval(s[i]) < 0)
                return 0;
        return 1;
    }
    size_t i = 0, digits = 0;
    int is_float = 0;
    while (i < n && is_digit(s[i]))
        i++, digits++;
    if (i < n && s[i] == '.') {
        is_float = 1;
        i++;
        while (i < n && is_digit(s[i]))
            i++, digits++;
    }
    if (!digits)
        return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        is_float = 1;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t ed = 0;
        while (i < n && is_digit(s[i]))
            i++, ed++;
        if (!ed)
            return 0;
    }
    if (i < n && (s[i] == 'f' || s[i] == 'F')) {
        is_float = 1;
        i++;
    }
    if (i != n)
        return 0;
    if (!is_float && n > 1 && s[0] == '0') /* octal */
        for (size_t k = 1; k < n; k++)
            if (s[k] > '7')
                return 0;
    return 1;
}

static int lex_next(lex_t *lx)
{
    for (;;) {
        while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r' ||
                                   *lx->p == '\n' || *lx->p == '\f' || *lx->p == '\v')) {
            if (*lx->p == '\n') {
                lx->line++;
                lx->line_start = lx->p + 1;
            }
            lx->p++;
        }
        if (lx->p < lx->end && *lx->p == '#') {
            while (lx->p < lx->end && *lx->p != '\n')
                lx->p++;
            continue;
        }
        break;
    }
    lx->ts = lx->p;
    lx->tline = lx->line;
    lx->tcol = (int)(lx->p - lx->line_start) + 1;
    if (lx->p >= lx->end) {
        lx->tok = T_EOF;
        lx->tl = 0;
        return HARK_OK;
    }
    int c = (unsigned char)*lx->p;
    if (is_ident0(c)) {
        while (lx->p < lx->end && is_ident(*lx->p))
            lx->p++;
        lx->tok = T_IDENT;
    } else if (is_digit(c) || (c == '.' && lx->p + 1 < lx->end && is_digit(lx->p[1]))) {
        while (lx->p < lx->end &&
               (is_ident(*lx->p) || *lx->p == '.' ||
                ((*lx->p == '+' || *lx->p == '-') && (lx->p[-1] == 'e' || lx->p[-1] == 'E') &&
                 !(lx->p - lx->ts > 1 && (lx->ts[1] == 'x' || lx->ts[1] == 'X')))))
            lx->p++;
        lx->tok = T_NUMBER;
        lx->tl = (size_t)(lx->p - lx->ts);
        if (!number_ok(lx->ts, lx->tl)) {
            char b[120];
            return lex_error(lx, lx->tline, lx->tcol, "malformed number %s%s",
                             tok_desc(lx, b, sizeof b), NULL);
        }
        return HARK_OK;
    } else if (c == '"' || c == '\'') {
        int rc = lex_string(lx);
        lx->tok = T_STRING;
        lx->tl = (size_t)(lx->p - lx->ts);
        return rc;
    } else if (strchr("{}[]<>:,;-", c)) {
        lx->p++;
        lx->tok = c;
    } else {
        lx->tok = c;
        lx->tl = 1;
        char b[120];
        return lex_error(lx, lx->tline, lx->tcol, "unexpected character %s%s",
                         tok_desc(lx, b, sizeof b), NULL);
    }
    lx->tl = (size_t)(lx->p - lx->ts);
    return HARK_OK;
}

/* ============================================================================================
 * Parser
 * ========================================================================================== */
static pbtxt_node_t *new_node(lex_t *lx, pbtxt_kind_t kind, const char *name, int line, int col)
{
    pbtxt_node_t *n = arena_calloc(lx->arena, 1, sizeof *n);
    if (!n) {
        err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
        return NULL;
    }
    n->kind = kind;
    n->name = name;
    n->line = n->vline = line;
    n->col = n->vcol = col;
    return n;
}

static int parse_fields(lex_t *lx, pbtxt_node_t *msg, int close, int open_line, int open_col);

/* A message body after its opening '{' or '<' (the current token). */
static int parse_message(lex_t *lx, pbtxt_node_t *n)
{
    if (++lx->depth > PBTXT_MAX_DEPTH)
        return lex_error(lx, lx->tline, lx->tcol, "messages nested more than 64 deep%s%s", NULL,
                         NULL);
    int close = lx->tok == '{' ? '}' : '>';
    int ol = lx->tline, oc = lx->tcol;
    int rc = lex_next(lx);
    if (rc == HARK_OK)
        rc = parse_fields(lx, n, close, ol, oc);
    if (rc == HARK_OK)
        rc = lex_next(lx); /* past the closing brace */
    lx->depth--;
    return rc;
}

/* A scalar at the current token: [-]number | [-]inf/nan | string+ | identifier. */
static int parse_scalar(lex_t *lx, pbtxt_node_t *n, const char *field)
{
    char b[120];
    if (lx->tok == '-') {
        int ml = lx->tline, mc = lx->tcol;
        int rc = lex_next(lx);
        if (rc)
            return rc;
        int ok = lx->tok == T_NUMBER;
        if (lx->tok == T_IDENT) {
            static const char *const fl[] = {"inf", "infinity", "nan"};
            for (int i = 0; i < 3 && !ok; i++)
                ok = lx->tl == strlen(fl[i]) && !strncasecmp(lx->ts, fl[i], lx->tl);
        }
        if (!ok)
            return lex_error(lx, ml, mc, "expected a number after '-' for field '%s'%s", field,
                             NULL);
        char *s = arena_alloc(lx->arena, lx->tl + 2, 1);
        if (!s)
            return err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
        s[0] = '-';
        memcpy(s + 1, lx->ts, lx->tl);
        s[lx->tl + 1] = 0;
        n->kind = PBTXT_NUMBER;
        n->str = s;
        n->len = lx->tl + 1;
        return lex_next(lx);
    }
    if (lx->tok == T_STRING) {
        n->kind = PBTXT_STRING;
        n->str = lx->sval;
        n->len = lx->slen;
        int rc = lex_next(lx);
        while (rc == HARK_OK && lx->tok == T_STRING) { /* "a" "b" concatenate */
            char *s = arena_alloc(lx->arena, n->len + lx->slen + 1, 1);
            if (!s)
                return err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
            memcpy(s, n->str, n->len);
            memcpy(s + n->len, lx->sval, lx->slen + 1);
            n->str = s;
            n->len += lx->slen;
            rc = lex_next(lx);
        }
        return rc;
    }
    if (lx->tok == T_NUMBER || lx->tok == T_IDENT) {
        n->kind = lx->tok == T_NUMBER ? PBTXT_NUMBER : PBTXT_IDENT;
        n->str = arena_strndup(lx->arena, lx->ts, lx->tl);
        if (!n->str)
            return err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
        n->len = lx->tl;
        return lex_next(lx);
    }
    return lex_error(lx, lx->tline, lx->tcol, "expected a value for field '%s', got %s", field,
                     tok_desc(lx, b, sizeof b));
}

static int parse_list(lex_t *lx, pbtxt_node_t *list)
{
    char b[120];
    int ol = lx->tline, oc = lx->tcol;
    int rc = lex_next(lx);
    if (rc)
        return rc;
    if (lx->tok == ']')
        return lex_next(lx);
    pbtxt_node_t **tail = &list->child;
    for (;;) {
        pbtxt_node_t *e = new_node(lx, PBTXT_IDENT, list->name, lx->tline, lx->tcol);
        if (!e)
            return HARK_ERR_NOMEM;
        if (lx->tok == '{' || lx->tok == '<') {
            e->kind = PBTXT_MESSAGE;
            rc = parse_message(lx, e);
        } else {
            rc = parse_scalar(lx, e, list->name);
        }
        if (rc)
            return rc;
        *tail = e;
        tail = &e->next;
        if (lx->tok == ',') {
            if ((rc = lex_next(lx)))
                return rc;
            continue;
        }
        if (lx->tok == ']')
            return lex_next(lx);
        if (lx->tok == T_EOF)
            return lex_error(lx, ol, oc, "'[' of field '%s' is never closed%s", list->name, NULL);
        return lex_error(lx, lx->tline, lx->tcol,
                         "expected ',' or ']' in the list of field '%s', "
                         "got %s",
                         list->name, tok_desc(lx, b, sizeof b));
    }
}

static int parse_fields(lex_t *lx, pbtxt_node_t *msg, int close, int open_line, int open_col)
{
    char b[120];
    pbtxt_node_t **tail = &msg->child;
    for (;;) {
        if (lx->tok == close || (close == 0 && lx->tok == T_EOF))
            return HARK_OK;
        if (lx->tok == T_EOF) {
            char cl[2] = {(char)close, 0};
            return lex_error(lx, open_line, open_col, "this block is never closed (missing '%s')%s",
                             cl, NULL);
        }
        if (lx->tok != T_IDENT)
            return lex_error(lx, lx->tline, lx->tcol, "expected a field name, got %s%s",
                             tok_desc(lx, b, sizeof b), NULL);
        const char *name = arena_strndup(lx->arena, lx->ts, lx->tl);
        pbtxt_node_t *n = name ? new_node(lx, PBTXT_IDENT, name, lx->tline, lx->tcol) : NULL;
        if (!n)
            return err_set(lx->err, HARK_ERR_NOMEM, "%s: out of memory", lx->path);
        int rc = lex_next(lx);
        int colon = 0;
        if (rc == HARK_OK && lx->tok == ':') {
            colon = 1;
            rc = lex_next(lx);
        }
        if (rc)
            return rc;
        n->vline = lx->tline;
        n->vcol = lx->tcol;
        if (lx->tok == '{' || lx->tok == '<') {
            n->kind = PBTXT_MESSAGE;
            rc = parse_message(lx, n);
        } else if (lx->tok == '[') {
            n->kind = PBTXT_LIST;
            rc = parse_list(lx, n);
        } else if (colon) {
            rc = parse_scalar(lx, n, name);
        } else {
            return lex_error(lx, lx->tline, lx->tcol,
                             "expected ':' or '{' after field name '%s', "
                             "got %s",
                             name, tok_desc(lx, b, sizeof b));
        }
        if (rc)
            return rc;
        *tail = n;
        tail = &n->next;
        if (lx->tok == ',' || lx->tok == ';')
            if ((rc = lex_next(lx)))
                return rc;
    }
}

int pbtxt_parse(const char *text, size_t len, const char *path, arena_t *arena, pbtxt_node_t **root,
                hark_err_t *err)
{
    lex_t lx = {.p = text,
                .end = text + len,
                .path = path ? path : "config.pbtxt",
                .line = 1,
                .line_start = text,
                .arena = arena,
                .err = err};
    *root = NULL;
    pbtxt_node_t *r = new_node(&lx, PBTXT_MESSAGE, "", 1, 1);
    if (!r)
        return HARK_ERR_NOMEM;
    int rc = lex_next(&lx);
    if (rc == HARK_OK)
        rc = parse_fields(&lx, r, 0, 1, 1);
    if (rc)
        return rc;
    *root = r;
    return HARK_OK;
}

/* ---- scalar conversions ------------------------------------------------------------------ */
int pbtxt_to_u64(const pbtxt_node_t *n, uint64_t *out)
{
    if (n->kind != PBTXT_NUMBER || n->str[0] == '-')
        return -1;
    const char *s = n->str;
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        base = 16, s += 2;
    else if (s[0] == '0' && s[1])
        base = 8;
    uint64_t v = 0;
    for (; *s; s++) {
        int d = hexval(*s);
        if (d < 0 || d >= base)
            return -1; /* floats, suffixes */
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return 0;
}

int pbtxt_to_i64(const pbtxt_node_t *n, int64_t *out)
{
    if (n->kind != PBTXT_NUMBER)
        return -1;
    pbtxt_node_t pos = *n;
    int neg = n->str[0] == '-';
    if (neg)
        pos.str = n->str + 1;
    uint64_t u;
    if (pbtxt_to_u64(&pos, &u))
        return -1;
    if (neg ? u > (uint64_t)INT64_MAX + 1 : u > (uint64_t)INT64_MAX)
        return -1;
    *out = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 0;
}

int pbtxt_to_double(const pbtxt_node_t *n, double *out)
{
    if (n->kind == PBTXT_IDENT || n->kind == PBTXT_NUMBER) {
        const char *s = n->str;
        int neg = s[0] == '-';
        const char *m = s + neg;
        if (!strcasecmp(m, "inf") || !strcasecmp(m, "infinity")) {
            *out = neg ? -INFINITY : INFINITY;
            return 0;
        }
        if (!strcasecmp(m, "nan")) {
            *out = NAN;
            return 0;
        }
    }
    if (n->kind != PBTXT_NUMBER)
        return -1;
    int64_t i;
    if (!pbtxt_to_i64(n, &i)) {
        *out = (double)i;
        return 0;
    }
    char buf[128];
    size_t l = n->len < sizeof buf - 1 ? n->len : sizeof buf - 1;
    memcpy(buf, n->str, l);
    buf[l] = 0;
    if (l && (buf[l - 1] == 'f' || buf[l - 1] == 'F'))
        buf[--l] = 0;
    if ((l > 2 && (buf[1] == 'x' || buf[1] == 'X')) || (l > 3 && (buf[2] == 'x' || buf[2] == 'X')))
        return -1; /* hex beyond int64 */
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + l)
        return -1;
    *out = v;
    return 0;
}

int pbtxt_to_bool(const pbtxt_node_t *n, int *out)
{
    if (n->kind == PBTXT_IDENT) {
        if (!strcmp(n->str, "true") || !strcmp(n->str, "True") || !strcmp(n->str, "t")) {
            *out = 1;
            return 0;
        }
        if (!strcmp(n->str, "false") || !strcmp(n->str, "False") || !strcmp(n->str, "f")) {
            *out = 0;
            return 0;
        }
        return -1;
    }
    uint64_t u;
    if (n->kind == PBTXT_NUMBER && !pbtxt_to_u64(n, &u) && u <= 1) {
        *out = (int)u;
        return 0;
    }
    return -1;
}
