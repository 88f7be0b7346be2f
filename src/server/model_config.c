/* model_config.c — protobuf text-format tokenizer + recursive-descent parser, the schema of
 * Triton's ModelConfig (fields hark reads, fields it ignores), validation and JSON output.
 * Tests: tests/server/test_model_config.c; fuzz: tests/fuzz/fuzz_model_config.c */
#include "server/model_config.h"

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
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

/* ============================================================================================
 * Schema of Triton's ModelConfig (common/protobuf/model_config.proto)
 * ========================================================================================== */
typedef enum {
    F_STRING,
    F_INT32,
    F_UINT32,
    F_INT64,
    F_UINT64,
    F_BOOL,
    F_ENUM,
    F_MSG,
    F_IGNORED
} ftype_t;

typedef struct field_s {
    const char *name;
    ftype_t type;
    int repeated;
    const void
        *sub; /* F_MSG: const field_t * (NULL-name terminated); F_ENUM: const char *const * */
} field_t;

static const char *const DATA_TYPES[] = {"TYPE_INVALID", "TYPE_BOOL",   "TYPE_UINT8", "TYPE_UINT16",
                                         "TYPE_UINT32",  "TYPE_UINT64", "TYPE_INT8",  "TYPE_INT16",
                                         "TYPE_INT32",   "TYPE_INT64",  "TYPE_FP16",  "TYPE_FP32",
                                         "TYPE_FP64",    "TYPE_STRING", "TYPE_BF16",  NULL};
static const char *const KSERVE_TYPES[] = {"INVALID", "BOOL", "UINT8", "UINT16", "UINT32",
                                           "UINT64",  "INT8", "INT16", "INT32",  "INT64",
                                           "FP16",    "FP32", "FP64",  "BYTES",  "BF16"};
static const size_t TYPE_SIZES[] = {0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2};
static const char *const KINDS[] = {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL", NULL};
static const char *const TIMEOUT_ACTIONS[] = {"REJECT", "DELAY", NULL};
static const char *const FORMATS[] = {"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW", NULL};

#define END                                                                                        \
    {                                                                                              \
        NULL, F_IGNORED, 0, NULL                                                                   \
    }
static const field_t F_RESHAPE[] = {{"shape", F_INT64, 1, NULL}, END};
static const field_t F_INPUT[] = {{"name", F_STRING, 0, NULL},
                                  {"data_type", F_ENUM, 0, DATA_TYPES},
                                  {"format", F_ENUM, 0, FORMATS},
                                  {"dims", F_INT64, 1, NULL},
                                  {"reshape", F_MSG, 0, F_RESHAPE},
                                  {"is_shape_tensor", F_IGNORED, 0, NULL},
                                  {"allow_ragged_batch", F_IGNORED, 0, NULL},
                                  {"optional", F_IGNORED, 0, NULL},
                                  {"is_non_linear_format_io", F_IGNORED, 0, NULL},
                                  END};
static const field_t F_OUTPUT[] = {{"name", F_STRING, 0, NULL},
                                   {"data_type", F_ENUM, 0, DATA_TYPES},
                                   {"dims", F_INT64, 1, NULL},
                                   {"reshape", F_MSG, 0, F_RESHAPE},
                                   {"label_filename", F_IGNORED, 0, NULL},
                                   {"is_shape_tensor", F_IGNORED, 0, NULL},
                                   {"is_non_linear_format_io", F_IGNORED, 0, NULL},
                                   END};
static const field_t F_QUEUE_POLICY[] = {{"timeout_action", F_ENUM, 0, TIMEOUT_ACTIONS},
                                         {"default_timeout_microseconds", F_UINT64, 0, NULL},
                                         {"allow_timeout_override", F_BOOL, 0, NULL},
                                         {"max_queue_size", F_UINT32, 0, NULL},
                                         END};
static const field_t F_DYNAMIC[] = {{"preferred_batch_size", F_INT32, 1, NULL},
                                    {"max_queue_delay_microseconds", F_UINT64, 0, NULL},
                                    {"preserve_ordering", F_BOOL, 0, NULL},
                                    {"priority_levels", F_UINT64, 0, NULL},
                                    {"default_priority_level", F_UINT64, 0, NULL},
                                    {"default_queue_policy", F_MSG, 0, F_QUEUE_POLICY},
                                    {"priority_queue_policy", F_IGNORED, 1, NULL},
                                    END};
static const field_t F_SEQUENCE[] = {{"max_sequence_idle_microseconds", F_UINT64, 0, NULL},
                                     {"control_input", F_IGNORED, 1, NULL},
                                     {"state", F_IGNORED, 1, NULL},
                                     {"direct", F_IGNORED, 0, NULL},
                                     {"oldest", F_IGNORED, 0, NULL},
                                     {"iterative_sequence", F_IGNORED, 0, NULL},
                                     END};
static const field_t F_INSTANCE[] = {
    {"name", F_STRING, 0, NULL},          {"kind", F_ENUM, 0, KINDS},
    {"count", F_INT32, 0, NULL},          {"gpus", F_INT32, 1, NULL},
    {"rate_limiter", F_IGNORED, 0, NULL}, {"secondary_devices", F_IGNORED, 1, NULL},
    {"profile", F_IGNORED, 1, NULL},      {"passive", F_IGNORED, 0, NULL},
    {"host_policy", F_IGNORED, 0, NULL},  END};
static const field_t F_PARAM_VALUE[] = {{"string_value", F_STRING, 0, NULL}, END};
static const field_t F_PARAM[] = {
    {"key", F_STRING, 0, NULL}, {"value", F_MSG, 0, F_PARAM_VALUE}, END};
static const field_t F_LATEST[] = {{"num_versions", F_UINT32, 0, NULL}, END};
static const field_t F_ALL[] = {END};
static const field_t F_SPECIFIC[] = {{"versions", F_INT64, 1, NULL}, END};
static const field_t F_VERSION_POLICY[] = {{"latest", F_MSG, 0, F_LATEST},
                                           {"all", F_MSG, 0, F_ALL},
                                           {"specific", F_MSG, 0, F_SPECIFIC},
                                           END};
static const field_t F_TRANSACTION[] = {{"decoupled", F_BOOL, 0, NULL}, END};
static const field_t F_CACHE[] = {{"enable", F_BOOL, 0, NULL}, END};
static const field_t F_CONFIG[] = {{"name", F_STRING, 0, NULL},
                                   {"platform", F_STRING, 0, NULL},
                                   {"backend", F_STRING, 0, NULL},
                                   {"runtime", F_IGNORED, 0, NULL},
                                   {"version_policy", F_MSG, 0, F_VERSION_POLICY},
                                   {"max_batch_size", F_INT32, 0, NULL},
                                   {"input", F_MSG, 1, F_INPUT},
                                   {"output", F_MSG, 1, F_OUTPUT},
                                   {"batch_input", F_IGNORED, 1, NULL},
                                   {"batch_output", F_IGNORED, 1, NULL},
                                   {"optimization", F_IGNORED, 0, NULL},
                                   {"dynamic_batching", F_MSG, 0, F_DYNAMIC},
                                   {"sequence_batching", F_MSG, 0, F_SEQUENCE},
                                   {"ensemble_scheduling", F_IGNORED, 0, NULL},
                                   {"instance_group", F_MSG, 1, F_INSTANCE},
                                   {"default_model_filename", F_IGNORED, 0, NULL},
                                   {"cc_model_filenames", F_IGNORED, 1, NULL},
                                   {"metric_tags", F_IGNORED, 1, NULL},
                                   {"parameters", F_MSG, 1, F_PARAM},
                                   {"model_warmup", F_IGNORED, 1, NULL},
                                   {"model_operations", F_IGNORED, 0, NULL},
                                   {"model_transaction_policy", F_MSG, 0, F_TRANSACTION},
                                   {"model_repository_agents", F_IGNORED, 0, NULL},
                                   {"response_cache", F_MSG, 0, F_CACHE},
                                   {"model_metrics", F_IGNORED, 0, NULL},
                                   END};
#undef END

/* ---- validation against the schema -------------------------------------------------------- */
#define MAX_NOTICES 64

typedef struct {
    const char *path;
    hark_err_t *err;
    const model_config_opts_t *opts;
    int n_noticed;
    char noticed[MAX_NOTICES][96];
} vctx_t;

static int verr(vctx_t *c, int status, const pbtxt_node_t *n, const char *field, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
static int verr(vctx_t *c, int status, const pbtxt_node_t *n, const char *field, const char *fmt,
                ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return err_set(c->err, status, "%s:%d:%d: field '%s': %s", c->path, n->line, n->col, field,
                   what);
}

static void notice(vctx_t *c, const pbtxt_node_t *n, const char *field)
{
    for (int i = 0; i < c->n_noticed; i++)
        if (!strcmp(c->noticed[i], field))
            return;
    if (c->n_noticed < MAX_NOTICES)
        snprintf(c->noticed[c->n_noticed++], sizeof c->noticed[0], "%s", field);
    char line[400];
    snprintf(line, sizeof line, "%s:%d: ignoring field '%s' (not used by hark)", c->path, n->line,
             field);
    if (c->opts && c->opts->notice)
        c->opts->notice(c->opts->user, line);
    else
        LOG_WARN("%s", line);
}

static const char *type_word(ftype_t t)
{
    switch (t) {
    case F_STRING:
        return "a quoted string";
    case F_INT32:
    case F_INT64:
        return "an integer";
    case F_UINT32:
    case F_UINT64:
        return "a non-negative integer";
    case F_BOOL:
        return "true or false";
    case F_ENUM:
        return "an enum value";
    case F_MSG:
        return "a message { ... }";
    case F_IGNORED:
        break;
    }
    return "a value";
}

static void value_desc(const pbtxt_node_t *v, char *buf, size_t cap)
{
    switch (v->kind) {
    case PBTXT_MESSAGE:
        snprintf(buf, cap, "a message");
        return;
    case PBTXT_LIST:
        snprintf(buf, cap, "a list");
        return;
    case PBTXT_STRING:
        snprintf(buf, cap, "a string");
        return;
    case PBTXT_NUMBER:
    case PBTXT_IDENT:
        snprintf(buf, cap, "'%.40s'", v->str);
        return;
    }
}

static int check_fields(vctx_t *c, const pbtxt_node_t *msg, const field_t *fields,
                        const char *prefix);

static int check_value(vctx_t *c, const pbtxt_node_t *node, const field_t *f, const char *full)
{
    pbtxt_node_t at = *node; /* messages point at the value, not the field name */
    at.line = node->vline;
    at.col = node->vcol;
    const pbtxt_node_t *v = &at;
    char got[64];
    value_desc(v, got, sizeof got);
    if (f->type == F_MSG) {
        if (v->kind != PBTXT_MESSAGE)
            return verr(c, HARK_ERR_FORMAT, v, full, "expected a message { ... }, got %s", got);
        return check_fields(c, node, f->sub, full);
    }
    if (v->kind == PBTXT_MESSAGE)
        return verr(c, HARK_ERR_FORMAT, v, full, "expected %s, got a message", type_word(f->type));
    int64_t i;
    uint64_t u;
    int b;
    int ok = 0;
    switch (f->type) {
    case F_STRING:
        ok = v->kind == PBTXT_STRING;
        break;
    case F_INT32:
        ok = !pbtxt_to_i64(v, &i) && i >= INT32_MIN && i <= INT32_MAX;
        break;
    case F_INT64:
        ok = !pbtxt_to_i64(v, &i);
        break;
    case F_UINT32:
        ok = !pbtxt_to_u64(v, &u) && u <= UINT32_MAX;
        break;
    case F_UINT64:
        ok = !pbtxt_to_u64(v, &u);
        break;
    case F_BOOL:
        ok = !pbtxt_to_bool(v, &b);
        break;
    case F_ENUM:
        if (v->kind == PBTXT_IDENT) {
            for (const char *const *e = f->sub; *e; e++)
                if (!strcmp(*e, v->str))
                    return HARK_OK;
            char list[200] = "";
            for (const char *const *e = f->sub; *e; e++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         e == f->sub ? "" : ", ", *e);
            return verr(c, HARK_ERR_FORMAT, v, full, "unknown value '%.40s' (one of %s)", v->str,
                        list);
        }
        break;
    case F_MSG:
    case F_IGNORED:
        ok = 1;
        break;
    }
    if (!ok) {
        if (v->kind == PBTXT_NUMBER && (f->type == F_UINT32 || f->type == F_UINT64) &&
            v->str[0] == '-')
            return verr(c, HARK_ERR_INVALID_ARG, v, full, "must be >= 0, got %.40s", v->str);
        return verr(c, HARK_ERR_FORMAT, v, full, "expected %s, got %s%s", type_word(f->type), got,
                    v->kind == PBTXT_NUMBER && f->type != F_STRING ? " (out of range)" : "");
    }
    return HARK_OK;
}

static int check_fields(vctx_t *c, const pbtxt_node_t *msg, const field_t *fields,
                        const char *prefix)
{
    for (const pbtxt_node_t *n = msg->child; n; n = n->next) {
        char full[160];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", n->name);
        const field_t *f = fields;
        while (f->name && strcmp(f->name, n->name))
            f++;
        if (!f->name)
            return err_set(c->err, HARK_ERR_FORMAT,
                           "%s:%d:%d: unknown field '%s' (not a field of Triton's %s)", c->path,
                           n->line, n->col, full, *prefix ? prefix : "ModelConfig");
        if (f->type == F_IGNORED) {
            notice(c, n, full);
            continue;
        }
        if (!f->repeated) {
            for (const pbtxt_node_t *p = msg->child; p != n; p = p->next)
                if (!strcmp(p->name, n->name))
                    return verr(c, HARK_ERR_FORMAT, n, full, "given twice (first at line %d)",
                                p->line);
            if (n->kind == PBTXT_LIST)
                return verr(c, HARK_ERR_FORMAT, n, full,
                            "is not a repeated field; a [ ... ] "
                            "list is not allowed");
        }
        int rc;
        if (n->kind == PBTXT_LIST) {
            for (const pbtxt_node_t *e = n->child; e; e = e->next)
                if ((rc = check_value(c, e, f, full)))
                    return rc;
        } else if ((rc = check_value(c, n, f, full))) {
            return rc;
        }
    }
    return HARK_OK;
}

/* ---- mapping the checked tree ------------------------------------------------------------ */
static const pbtxt_node_t *get(const pbtxt_node_t *msg, const char *name)
{
    for (const pbtxt_node_t *n = msg ? msg->child : NULL; n; n = n->next)
        if (!strcmp(n->name, name))
            return n;
    return NULL;
}

static int count_values(const pbtxt_node_t *msg, const char *name)
{
    int k = 0;
    for (const pbtxt_node_t *n = msg ? msg->child : NULL; n; n = n->next) {
        if (strcmp(n->name, name))
            continue;
        if (n->kind == PBTXT_LIST)
            for (const pbtxt_node_t *e = n->child; e; e = e->next)
                k++;
        else
            k++;
    }
    return k;
}

/* Collects the values of repeated field `name` into an array (arena). */
static int collect(arena_t *a, const pbtxt_node_t *msg, const char *name, const pbtxt_node_t ***out,
                   int *n)
{
    int k = count_values(msg, name);
    *n = k;
    *out = NULL;
    if (!k)
        return HARK_OK;
    const pbtxt_node_t **v = arena_alloc(a, (size_t)k * sizeof *v, 8);
    if (!v)
        return HARK_ERR_NOMEM;
    int i = 0;
    for (const pbtxt_node_t *f = msg->child; f; f = f->next) {
        if (strcmp(f->name, name))
            continue;
        if (f->kind == PBTXT_LIST)
            for (const pbtxt_node_t *e = f->child; e; e = e->next)
                v[i++] = e;
        else
            v[i++] = f;
    }
    *out = v;
    return HARK_OK;
}

static const char *get_str(const pbtxt_node_t *msg, const char *name)
{
    const pbtxt_node_t *n = get(msg, name);
    return n ? n->str : "";
}
static int64_t get_i64(const pbtxt_node_t *msg, const char *name, int64_t dflt)
{
    const pbtxt_node_t *n = get(msg, name);
    int64_t v = dflt;
    if (n)
        pbtxt_to_i64(n, &v);
    return v;
}
static uint64_t get_u64(const pbtxt_node_t *msg, const char *name, uint64_t dflt)
{
    const pbtxt_node_t *n = get(msg, name);
    uint64_t v = dflt;
    if (n)
        pbtxt_to_u64(n, &v);
    return v;
}
static int get_bool(const pbtxt_node_t *msg, const char *name)
{
    const pbtxt_node_t *n = get(msg, name);
    int v = 0;
    if (n)
        pbtxt_to_bool(n, &v);
    return v;
}
static int get_enum(const pbtxt_node_t *msg, const char *name, const char *const *values)
{
    const pbtxt_node_t *n = get(msg, name);
    if (!n)
        return 0;
    for (int i = 0; values[i]; i++)
        if (!strcmp(values[i], n->str))
            return i;
    return 0;
}

static char *dup_str(model_config_t *cfg, const char *s)
{
    return arena_strndup(&cfg->arena, s, strlen(s));
}

static int map_io(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root, const char *field,
                  model_io_t **out, int *n_out)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, field, &v, &n)))
        return rc;
    *n_out = n;
    *out = n ? arena_calloc(&cfg->arena, (size_t)n, sizeof **out) : NULL;
    if (n && !*out)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        model_io_t *io = &(*out)[i];
        char f[64];
        io->line = v[i]->line;
        io->name = dup_str(cfg, get_str(v[i], "name"));
        if (!io->name)
            return HARK_ERR_NOMEM;
        if (!io->name[0]) {
            snprintf(f, sizeof f, "%s.name", field);
            return verr(c, HARK_ERR_INVALID_ARG, v[i], f, "every %s needs a non-empty name", field);
        }
        for (int j = 0; j < i; j++)
            if (!strcmp((*out)[j].name, io->name)) {
                snprintf(f, sizeof f, "%s.name", field);
                return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "name"), f,
                            "'%s' is declared twice (first at line %d)", io->name, (*out)[j].line);
            }
        io->data_type = (model_data_type_t)get_enum(v[i], "data_type", DATA_TYPES);
        if (io->data_type == MODEL_TYPE_INVALID) {
            snprintf(f, sizeof f, "%s.data_type", field);
            const pbtxt_node_t *at = get(v[i], "data_type");
            return verr(c, HARK_ERR_INVALID_ARG, at ? at : v[i], f, "%s '%s' needs a data_type",
                        field, io->name);
        }
        const pbtxt_node_t **d;
        if ((rc = collect(&cfg->arena, v[i], "dims", &d, &io->ndims)))
            return rc;
        io->dims = io->ndims ? arena_alloc(&cfg->arena, (size_t)io->ndims * 8, 8) : NULL;
        if (io->ndims && !io->dims)
            return HARK_ERR_NOMEM;
        for (int k = 0; k < io->ndims; k++) {
            pbtxt_to_i64(d[k], &io->dims[k]);
            if (io->dims[k] < 1 && io->dims[k] != -1) {
                snprintf(f, sizeof f, "%s.dims", field);
                return verr(c, HARK_ERR_INVALID_ARG, d[k], f,
                            "%s '%s': dimension %" PRId64 " must be >= 1, or -1 for a variable "
                            "size",
                            field, io->name, io->dims[k]);
            }
        }
        if (get(v[i], "reshape")) {
            snprintf(f, sizeof f, "%s.reshape", field);
            notice(c, get(v[i], "reshape"), f);
        }
        if (get(v[i], "format")) {
            snprintf(f, sizeof f, "%s.format", field);
            notice(c, get(v[i], "format"), f);
        }
    }
    return HARK_OK;
}

static int map_dynamic(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *db)
{
    model_dynamic_batching_t *d = &cfg->dynamic_batching;
    d->present = 1;
    const pbtxt_node_t **v;
    int rc;
    if ((rc = collect(&cfg->arena, db, "preferred_batch_size", &v, &d->n_preferred)))
        return rc;
    d->preferred_batch_size =
        d->n_preferred ? arena_alloc(&cfg->arena, (size_t)d->n_preferred * 4, 4) : NULL;
    if (d->n_preferred && !d->preferred_batch_size)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < d->n_preferred; i++) {
        int64_t b;
        pbtxt_to_i64(v[i], &b);
        if (b < 1)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "dynamic_batching.preferred_batch_size",
                        "must be >= 1, got %" PRId64, b);
        if (b > cfg->max_batch_size)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "dynamic_batching.preferred_batch_size",
                        "%" PRId64 " exceeds max_batch_size %d", b, cfg->max_batch_size);
        d->preferred_batch_size[i] = (int32_t)b;
    }
    d->max_queue_delay_microseconds = get_u64(db, "max_queue_delay_microseconds", 0);
    d->preserve_ordering = get_bool(db, "preserve_ordering");
    d->priority_levels = get_u64(db, "priority_levels", 0);
    d->default_priority_level = get_u64(db, "default_priority_level", 0);
    /* as Triton: with priorities on, the default level must be one of them */
    const pbtxt_node_t *dp = get(db, "default_priority_level");
    if (d->priority_levels &&
        (d->default_priority_level < 1 || d->default_priority_level > d->priority_levels))
        return verr(c, HARK_ERR_INVALID_ARG, dp ? dp : db,
                    "dynamic_batching.default_priority_level",
                    "%" PRIu64 " is not a level in [1, priority_levels=%" PRIu64 "]",
                    d->default_priority_level, d->priority_levels);
    const pbtxt_node_t *qp = get(db, "default_queue_policy");
    if (qp) {
        model_queue_policy_t *q = &d->default_queue_policy;
        q->timeout_action = (model_timeout_action_t)get_enum(qp, "timeout_action", TIMEOUT_ACTIONS);
        q->default_timeout_microseconds = get_u64(qp, "default_timeout_microseconds", 0);
        q->allow_timeout_override = get_bool(qp, "allow_timeout_override");
        q->max_queue_size = (uint32_t)get_u64(qp, "max_queue_size", 0);
    }
    return HARK_OK;
}

static int map_instance_groups(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, "instance_group", &v, &n)))
        return rc;
    cfg->n_instance_groups = n ? n : 1;
    cfg->instance_groups =
        arena_calloc(&cfg->arena, (size_t)cfg->n_instance_groups, sizeof *cfg->instance_groups);
    if (!cfg->instance_groups)
        return HARK_ERR_NOMEM;
    if (!n) { /* Triton's default: one instance, on a GPU when there is one */
        cfg->instance_groups[0].count = 1;
        cfg->instance_groups[0].kind = MODEL_KIND_AUTO;
        return HARK_OK;
    }
    for (int i = 0; i < n; i++) {
        model_instance_group_t *g = &cfg->instance_groups[i];
        g->name = get(v[i], "name") ? dup_str(cfg, get_str(v[i], "name")) : NULL;
        int64_t count = get_i64(v[i], "count", 1);
        if (count < 0)
            return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "count"), "instance_group.count",
                        "must be >= 0, got %" PRId64, count);
        g->count = count ? (int)count : 1;
        g->kind = (model_kind_t)get_enum(v[i], "kind", KINDS);
        const pbtxt_node_t **gv;
        if ((rc = collect(&cfg->arena, v[i], "gpus", &gv, &g->n_gpus)))
            return rc;
        g->gpus = g->n_gpus ? arena_alloc(&cfg->arena, (size_t)g->n_gpus * 4, 4) : NULL;
        if (g->n_gpus && !g->gpus)
            return HARK_ERR_NOMEM;
        for (int k = 0; k < g->n_gpus; k++) {
            int64_t id;
            pbtxt_to_i64(gv[k], &id);
            if (id < 0)
                return verr(c, HARK_ERR_INVALID_ARG, gv[k], "instance_group.gpus",
                            "device id must be >= 0, got %" PRId64, id);
            g->gpus[k] = (int32_t)id;
        }
        if (g->n_gpus && g->kind == MODEL_KIND_CPU)
            return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "gpus"), "instance_group.gpus",
                        "a KIND_CPU group cannot list gpus");
    }
    return HARK_OK;
}

static int map_params(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, "parameters", &v, &n)))
        return rc;
    cfg->n_params = n;
    cfg->params = n ? arena_calloc(&cfg->arena, (size_t)n, sizeof *cfg->params) : NULL;
    if (n && !cfg->params)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const pbtxt_node_t *key = get(v[i], "key");
        if (!key || !key->len)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "parameters.key",
                        "every parameter needs a non-empty key");
        if (strlen(key->str) != key->len)
            return verr(c, HARK_ERR_INVALID_ARG, key, "parameters.key", "contains a NUL byte");
        for (int j = 0; j < i; j++)
            if (!strcmp(cfg->params[j].key, key->str))
                return verr(c, HARK_ERR_INVALID_ARG, key, "parameters.key",
                            "'%.60s' is given twice (first at line %d)", key->str, v[j]->line);
        cfg->params[i].key = dup_str(cfg, key->str);
        cfg->params[i].value = dup_str(cfg, get_str(get(v[i], "value"), "string_value"));
        if (!cfg->params[i].key || !cfg->params[i].value)
            return HARK_ERR_NOMEM;
    }
    return HARK_OK;
}

static int map_version_policy(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *vp)
{
    cfg->version_policy = MODEL_VERSIONS_LATEST;
    cfg->latest_num_versions = 1;
    if (!vp)
        return HARK_OK;
    int k = !!get(vp, "latest") + !!get(vp, "all") + !!get(vp, "specific");
    if (k > 1)
        return verr(c, HARK_ERR_FORMAT, vp, "version_policy",
                    "give only one of latest, all, specific");
    if (get(vp, "all")) {
        cfg->version_policy = MODEL_VERSIONS_ALL;
    } else if (get(vp, "specific")) {
        const pbtxt_node_t *sp = get(vp, "specific");
        const pbtxt_node_t **v;
        int rc;
        cfg->version_policy = MODEL_VERSIONS_SPECIFIC;
        if ((rc = collect(&cfg->arena, sp, "versions", &v, &cfg->n_specific_versions)))
            return rc;
        if (!cfg->n_specific_versions)
            return verr(c, HARK_ERR_INVALID_ARG, sp, "version_policy.specific.versions",
                        "list at least one version");
        cfg->specific_versions = arena_alloc(&cfg->arena, (size_t)cfg->n_specific_versions * 8, 8);
        if (!cfg->specific_versions)
            return HARK_ERR_NOMEM;
        for (int i = 0; i < cfg->n_specific_versions; i++) {
            pbtxt_to_i64(v[i], &cfg->specific_versions[i]);
            if (cfg->specific_versions[i] < 1)
                return verr(c, HARK_ERR_INVALID_ARG, v[i], "version_policy.specific.versions",
                            "must be >= 1, got %" PRId64, cfg->specific_versions[i]);
        }
    } else if (get(vp, "latest")) {
        const pbtxt_node_t *l = get(vp, "latest");
        uint64_t nv = get_u64(l, "num_versions", 0);
        if (nv < 1)
            return verr(c, HARK_ERR_INVALID_ARG,
                        get(l, "num_versions") ? get(l, "num_versions") : l,
                        "version_policy.latest.num_versions", "must be >= 1");
        cfg->latest_num_versions = (uint32_t)nv;
    }
    return HARK_OK;
}

static int map_config(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root,
                      const char *default_name)
{
    int rc;
    const pbtxt_node_t *mb = get(root, "max_batch_size");
    int64_t mbs = get_i64(root, "max_batch_size", 0);
    if (mbs < 0)
        return verr(c, HARK_ERR_INVALID_ARG, mb, "max_batch_size", "must be >= 0, got %" PRId64,
                    mbs);
    cfg->max_batch_size = (int)mbs;
    const char *name = get_str(root, "name");
    cfg->name = dup_str(cfg, name[0] ? name : default_name ? default_name : "");
    cfg->platform = dup_str(cfg, get_str(root, "platform"));
    cfg->backend = dup_str(cfg, get_str(root, "backend"));
    if (!cfg->name || !cfg->platform || !cfg->backend)
        return HARK_ERR_NOMEM;
    if ((rc = map_io(c, cfg, root, "input", &cfg->inputs, &cfg->n_inputs)) ||
        (rc = map_io(c, cfg, root, "output", &cfg->outputs, &cfg->n_outputs)))
        return rc;
    /* oneof scheduling_choice */
    const char *sched[] = {"dynamic_batching", "sequence_batching", "ensemble_scheduling"};
    const pbtxt_node_t *first = NULL;
    for (int i = 0; i < 3; i++) {
        const pbtxt_node_t *s = get(root, sched[i]);
        if (s && first)
            return verr(c, HARK_ERR_FORMAT, s, s->name,
                        "cannot be combined with '%s' (line %d): Triton's scheduling_choice is "
                        "one of dynamic_batching, sequence_batching, ensemble_scheduling",
                        first->name, first->line);
        if (s)
            first = s;
    }
    if (get(root, "dynamic_batching") && (rc = map_dynamic(c, cfg, get(root, "dynamic_batching"))))
        return rc;
    const pbtxt_node_t *sb = get(root, "sequence_batching");
    cfg->sequence_batching = sb != NULL;
    cfg->max_sequence_idle_microseconds = get_u64(sb, "max_sequence_idle_microseconds", 1000000);
    if ((rc = map_instance_groups(c, cfg, root)) || (rc = map_params(c, cfg, root)) ||
        (rc = map_version_policy(c, cfg, get(root, "version_policy"))))
        return rc;
    cfg->decoupled = get_bool(get(root, "model_transaction_policy"), "decoupled");
    cfg->response_cache = get_bool(get(root, "response_cache"), "enable");

    /* the hark model family */
    const char *fam = model_config_param(cfg, "family");
    if (!strcmp(cfg->backend, "hark")) {
        if (!fam || !fam[0]) {
            const pbtxt_node_t *b = get(root, "backend");
            return verr(c, HARK_ERR_INVALID_ARG, b, "backend",
                        "backend \"hark\" needs parameters { key: \"family\" value { "
                        "string_value: \"<name>\" } } naming the model family (hark inspect --help lists them)");
        }
        cfg->family = fam;
    } else if (!cfg->backend[0] && cfg->platform[0]) {
        cfg->family = cfg->platform;
    } else {
        cfg->family = NULL;
    }
    /* default instance group names, as Triton gives them */
    for (int i = 0; i < cfg->n_instance_groups; i++) {
        model_instance_group_t *g = &cfg->instance_groups[i];
        if (g->name && g->name[0])
            continue;
        char nm[300];
        snprintf(nm, sizeof nm, "%s_%d", cfg->name, i);
        if (!(g->name = dup_str(cfg, nm)))
            return HARK_ERR_NOMEM;
    }
    return HARK_OK;
}

static int parse_impl(const char *text, size_t len, const char *path, const char *default_name,
                      const model_config_opts_t *opts, model_config_t *cfg, hark_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!path)
        path = "config.pbtxt";
    arena_init(&cfg->arena, 16384);
    arena_t tree;
    arena_init(&tree, 16384);
    pbtxt_node_t *root;
    vctx_t *c = hark_calloc(1, sizeof *c); /* ~6 KiB of notice memory: keep it off the stack */
    int rc = c ? HARK_OK : HARK_ERR_NOMEM;
    if (rc == HARK_OK) {
        c->path = path;
        c->err = err;
        c->opts = opts;
        rc = pbtxt_parse(text, len, path, &tree, &root, err);
    }
    if (rc == HARK_OK)
        rc = check_fields(c, root, F_CONFIG, "");
    if (rc == HARK_OK)
        rc = map_config(c, cfg, root, default_name);
    if (rc == HARK_ERR_NOMEM && (!err || err->status != HARK_ERR_NOMEM))
        err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    hark_free(c);
    arena_free(&tree);
    if (rc) {
        arena_free(&cfg->arena);
        memset(cfg, 0, sizeof *cfg);
    }
    return rc;
}

int model_config_parse(const char *text, size_t len, const char *path,
                       const model_config_opts_t *opts, model_config_t *cfg, hark_err_t *err)
{
    return parse_impl(text, len, path, NULL, opts, cfg, err);
}

int model_config_load(const char *path, const model_config_opts_t *opts, model_config_t *cfg,
                      hark_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const size_t max = 16u << 20;
    char *buf = hark_malloc(max + 1);
    if (!buf) {
        fclose(f);
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        hark_free(buf);
        return bad ? err_set(err, HARK_ERR_IO, "%s: read error", path)
                   : err_set(err, HARK_ERR_TOO_LARGE, "%s: larger than 16 MiB", path);
    }
    /* the directory holding config.pbtxt names the model when the file does not */
    char dir[512] = "";
    const char *slash = strrchr(path, '/');
    if (slash) {
        const char *e = slash;
        while (e > path && e[-1] == '/')
            e--;
        const char *b = e;
        while (b > path && b[-1] != '/')
            b--;
        snprintf(dir, sizeof dir, "%.*s", (int)(e - b), b);
    }
    int rc = parse_impl(buf, n, path, dir[0] && strcmp(dir, ".") ? dir : NULL, opts, cfg, err);
    hark_free(buf);
    return rc;
}

void model_config_free(model_config_t *cfg)
{
    if (!cfg)
        return;
    arena_free(&cfg->arena);
    memset(cfg, 0, sizeof *cfg);
}

const char *model_config_param(const model_config_t *cfg, const char *key)
{
    for (int i = 0; i < cfg->n_params; i++)
        if (!strcmp(cfg->params[i].key, key))
            return cfg->params[i].value;
    return NULL;
}

static const model_io_t *find_io(const model_io_t *io, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(io[i].name, name))
            return &io[i];
    return NULL;
}
const model_io_t *model_config_input(const model_config_t *cfg, const char *name)
{
    return find_io(cfg->inputs, cfg->n_inputs, name);
}
const model_io_t *model_config_output(const model_config_t *cfg, const char *name)
{
    return find_io(cfg->outputs, cfg->n_outputs, name);
}

const char *model_data_type_name(model_data_type_t t)
{
    return (unsigned)t <= MODEL_TYPE_BF16 ? DATA_TYPES[t] : "TYPE_INVALID";
}
const char *model_data_type_kserve(model_data_type_t t)
{
    return (unsigned)t <= MODEL_TYPE_BF16 ? KSERVE_TYPES[t] : "INVALID";
}
size_t model_data_type_size(model_data_type_t t)
{
    return (unsigned)t <= MODEL_TYPE_BF16 ? TYPE_SIZES[t] : 0;
}

/* ============================================================================================
 * JSON (GET /v2/models/<m>/config)
 * ========================================================================================== */
static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

static cJSON *int32_array(const int32_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* cJSON builders return NULL on allocation failure; `ok` collects them. */
#define ADD(obj, key, item)                                                                        \
    do {                                                                                           \
        cJSON *it_ = (item);                                                                       \
        if (!it_ || !cJSON_AddItemToObject((obj), (key), it_)) {                                   \
            cJSON_Delete(it_);                                                                     \
            goto oom;                                                                              \
        }                                                                                          \
    } while (0)

static cJSON *io_json(const model_io_t *io, int is_input)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(io->name));
    ADD(o, "data_type", cJSON_CreateString(model_data_type_name(io->data_type)));
    if (is_input)
        ADD(o, "format", cJSON_CreateString("FORMAT_NONE"));
    ADD(o, "dims", int_array(io->dims, io->ndims));
    if (is_input) {
        ADD(o, "is_shape_tensor", cJSON_CreateFalse());
        ADD(o, "allow_ragged_batch", cJSON_CreateFalse());
        ADD(o, "optional", cJSON_CreateFalse());
    } else {
        ADD(o, "label_filename", cJSON_CreateString(""));
        ADD(o, "is_shape_tensor", cJSON_CreateFalse());
    }
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *config_json(const model_config_t *cfg)
{
    cJSON *o = cJSON_CreateObject(), *x, *y;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(cfg->name));
    ADD(o, "platform", cJSON_CreateString(cfg->platform));
    ADD(o, "backend", cJSON_CreateString(cfg->backend));
    ADD(o, "version_policy", x = cJSON_CreateObject());
    if (cfg->version_policy == MODEL_VERSIONS_ALL) {
        ADD(x, "all", cJSON_CreateObject());
    } else if (cfg->version_policy == MODEL_VERSIONS_SPECIFIC) {
        ADD(x, "specific", y = cJSON_CreateObject());
        ADD(y, "versions", int_array(cfg->specific_versions, cfg->n_specific_versions));
    } else {
        ADD(x, "latest", y = cJSON_CreateObject());
        ADD(y, "num_versions", cJSON_CreateNumber(cfg->latest_num_versions));
    }
    ADD(o, "max_batch_size", cJSON_CreateNumber(cfg->max_batch_size));
    ADD(o, "input", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_inputs; i++)
        if (!cJSON_AddItemToArray(x, io_json(&cfg->inputs[i], 1)))
            goto oom;
    ADD(o, "output", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_outputs; i++)
        if (!cJSON_AddItemToArray(x, io_json(&cfg->outputs[i], 0)))
            goto oom;
    ADD(o, "batch_input", cJSON_CreateArray());
    ADD(o, "batch_output", cJSON_CreateArray());
    if (cfg->dynamic_batching.present) {
        const model_dynamic_batching_t *d = &cfg->dynamic_batching;
        const model_queue_policy_t *q = &d->default_queue_policy;
        ADD(o, "dynamic_batching", x = cJSON_CreateObject());
        ADD(x, "preferred_batch_size", int32_array(d->preferred_batch_size, d->n_preferred));
        ADD(x, "max_queue_delay_microseconds",
            cJSON_CreateNumber((double)d->max_queue_delay_microseconds));
        ADD(x, "preserve_ordering", cJSON_CreateBool(d->preserve_ordering));
        ADD(x, "priority_levels", cJSON_CreateNumber((double)d->priority_levels));
        ADD(x, "default_priority_level", cJSON_CreateNumber((double)d->default_priority_level));
        ADD(x, "default_queue_policy", y = cJSON_CreateObject());
        ADD(y, "timeout_action", cJSON_CreateString(TIMEOUT_ACTIONS[q->timeout_action]));
        ADD(y, "default_timeout_microseconds",
            cJSON_CreateNumber((double)q->default_timeout_microseconds));
        ADD(y, "allow_timeout_override", cJSON_CreateBool(q->allow_timeout_override));
        ADD(y, "max_queue_size", cJSON_CreateNumber(q->max_queue_size));
        ADD(x, "priority_queue_policy", cJSON_CreateObject());
    }
    if (cfg->sequence_batching) {
        ADD(o, "sequence_batching", x = cJSON_CreateObject());
        ADD(x, "max_sequence_idle_microseconds",
            cJSON_CreateNumber((double)cfg->max_sequence_idle_microseconds));
        ADD(x, "control_input", cJSON_CreateArray());
        ADD(x, "state", cJSON_CreateArray());
        ADD(x, "iterative_sequence", cJSON_CreateFalse());
    }
    ADD(o, "instance_group", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_instance_groups; i++) {
        const model_instance_group_t *g = &cfg->instance_groups[i];
        y = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(x, y))
            goto oom_y;
        ADD(y, "name", cJSON_CreateString(g->name ? g->name : ""));
        ADD(y, "kind", cJSON_CreateString(KINDS[g->kind]));
        ADD(y, "count", cJSON_CreateNumber(g->count));
        ADD(y, "gpus", int32_array(g->gpus, g->n_gpus));
        ADD(y, "secondary_devices", cJSON_CreateArray());
        ADD(y, "profile", cJSON_CreateArray());
        ADD(y, "passive", cJSON_CreateFalse());
        ADD(y, "host_policy", cJSON_CreateString(""));
    }
    ADD(o, "default_model_filename", cJSON_CreateString(""));
    ADD(o, "cc_model_filenames", cJSON_CreateObject());
    ADD(o, "metric_tags", cJSON_CreateObject());
    ADD(o, "parameters", x = cJSON_CreateObject());
    for (int i = 0; i < cfg->n_params; i++) {
        ADD(x, cfg->params[i].key, y = cJSON_CreateObject());
        ADD(y, "string_value", cJSON_CreateString(cfg->params[i].value));
    }
    ADD(o, "model_warmup", cJSON_CreateArray());
    ADD(o, "model_transaction_policy", x = cJSON_CreateObject());
    ADD(x, "decoupled", cJSON_CreateBool(cfg->decoupled));
    ADD(o, "response_cache", x = cJSON_CreateObject());
    ADD(x, "enable", cJSON_CreateBool(cfg->response_cache));
    return o;
oom_y:
    cJSON_Delete(y);
oom:
    cJSON_Delete(o);
    return NULL;
}

char *model_config_to_json(const model_config_t *cfg)
{
    cJSON *o = config_json(cfg);
    if (!o)
        return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        return NULL;
    char *r = hark_strdup(s);
    cJSON_free(s);
    return r;
}
