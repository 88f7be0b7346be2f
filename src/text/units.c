/* units.c — WeNet unit lists (units.txt) and detokenization (BpeTokenizer / CharTokenizer).
 * Tests: tests/search/test_search.c
 */
#include "text/units.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct units {
    int n;
    char **tok; /* (n) NUL-terminated tokens, views into text */
    char *text; /* the file's bytes, tokens cut out in place */
};

#define SPM_SPACE "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's word mark */

void units_destroy(units_t *u)
{
    if (!u)
        return;
    hark_free(u->tok);
    hark_free(u->text);
    hark_free(u);
}

static int read_file(const char *path, char **out, size_t *len, hark_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = hark_malloc(cap);
    if (!buf) {
        fclose(f);
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = hark_realloc(buf, cap * 2);
            if (!nb) {
                hark_free(buf);
                fclose(f);
                return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        hark_free(buf);
        return err_set(err, HARK_ERR_IO, "%s: read error", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return HARK_OK;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

int units_load(const char *path, units_t **out, hark_err_t *err)
{
    if (!path || !out)
        return err_set(err, HARK_ERR_INVALID_ARG, "units_load: NULL argument");
    *out = NULL;
    units_t *u = hark_calloc(1, sizeof *u);
    if (!u)
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    size_t len = 0;
    int rc = read_file(path, &u->text, &len, err);
    if (rc)
        goto fail;
    if (memchr(u->text, 0, len)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: not a text file (contains NUL bytes)", path);
        goto fail;
    }
    int lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += u->text[i] == '\n';
    u->tok = hark_malloc((size_t)lines * sizeof(char *));
    if (!u->tok) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    char *p = u->text;
    for (int line = 1; *p; line++) {
        char *eol = strchr(p, '\n');
        char *next = eol ? eol + 1 : p + strlen(p);
        char *end = eol ? eol : next;
        if (end > p && end[-1] == '\r')
            end--;
        *end = 0;
        char *f[3];
        int nf = 0;
        for (char *q = p; *q && nf < 3;) {
            while (is_blank(*q))
                q++;
            if (!*q)
                break;
            f[nf++] = q;
            while (*q && !is_blank(*q))
                q++;
            if (*q)
                *q++ = 0;
        }
        if (nf == 0) { /* blank line */
            p = next;
            continue;
        }
        if (nf != 2) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s:%d: expected \"<token> <id>\", found %s", path,
                         line, nf == 1 ? "one field" : "more than two fields");
            goto fail;
        }
        char *ep;
        errno = 0;
        long id = strtol(f[1], &ep, 10);
        if (*ep || errno || ep == f[1]) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s:%d: id \"%s\" is not an integer", path, line,
                         f[1]);
            goto fail;
        }
        if (id != u->n) {
            rc = err_set(err, HARK_ERR_FORMAT,
                         "%s:%d: token \"%s\" has id %ld, expected %d (ids must be 0, 1, 2, ... "
                         "in line order)",
                         path, line, f[0], id, u->n);
            goto fail;
        }
        u->tok[u->n++] = f[0];
        p = next;
    }
    if (u->n == 0) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: no units", path);
        goto fail;
    }
    *out = u;
    return HARK_OK;
fail:
    units_destroy(u);
    return rc;
}

int units_count(const units_t *u)
{
    return u ? u->n : 0;
}

const char *units_token(const units_t *u, int id)
{
    return u && id >= 0 && id < u->n ? u->tok[id] : NULL;
}

int units_find(const units_t *u, const char *token)
{
    if (!u || !token)
        return -1;
    for (int i = 0; i < u->n; i++)
        if (strcmp(u->tok[i], token) == 0)
            return i;
    return -1;
}

units_style_t units_guess_style(const units_t *u)
{
    for (int i = 0; u && i < u->n; i++)
        if (strncmp(u->tok[i], SPM_SPACE, 3) == 0)
            return UNITS_STYLE_BPE;
    return UNITS_STYLE_CHAR;
}

int units_check_vocab(const units_t *u, int vocab, hark_err_t *err)
{
    if (!u)
        return err_set(err, HARK_ERR_INVALID_ARG, "units: NULL unit list");
    if (u->n != vocab)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "units: the unit list has %d units but the model outputs %d", u->n, vocab);
    return HARK_OK;
}

/* Byte length of a Python-whitespace code point starting at s (0 if none). str.strip() strips
 * what str.isspace() accepts: ASCII \t\n\v\f\r, \x1c-\x1f, space, and the Unicode spaces below. */
static size_t ws_len(const unsigned char *s, size_t avail)
{
    if (avail >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20)))
        return 1;
    if (avail >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
        return 2;
    if (avail >= 3) {
        unsigned cp = ((unsigned)(s[0] & 0x0f) << 12) | ((unsigned)(s[1] & 0x3f) << 6) |
                      (unsigned)(s[2] & 0x3f);
        if ((s[0] & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
             cp == 0x202f || cp == 0x205f || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* Length of a whitespace code point ending just before s + n (0 if none). */
static size_t ws_len_back(const unsigned char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (ws_len(s + n - k, k) == k)
            return k;
    return 0;
}

int units_detokenize(const units_t *u, units_style_t style, const int *ids, int n, char **text,
                     hark_err_t *err)
{
    if (!text)
        return err_set(err, HARK_ERR_INVALID_ARG, "units_detokenize: NULL output");
    *text = NULL;
    if (!u || n < 0 || (n > 0 && !ids))
        return err_set(err, HARK_ERR_INVALID_ARG, "units_detokenize: bad arguments (n=%d)", n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= u->n)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "units_detokenize: id %d at position %d is outside [0, %d)", ids[i], i,
                           u->n);
        total += strlen(u->tok[ids[i]]);
    }
    char *out = hark_malloc(total + 1);
    if (!out)
        return err_set(err, HARK_ERR_NOMEM, "units_detokenize: out of memory (%zu bytes)", total);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *s = u->tok[ids[i]];
        if (style == UNITS_STYLE_CHAR) {
            size_t l = strlen(s);
            memcpy(out + len, s, l);
            len += l;
            continue;
        }
        while (*s) {
            if (strncmp(s, SPM_SPACE, 3) == 0) {
                out[len++] = ' ';
                s += 3;
            } else {
                out[len++] = *s++;
            }
        }
    }
    size_t start = 0;
    if (style == UNITS_STYLE_BPE) {
        size_t k;
        while (len > 0 && (k = ws_len_back((const unsigned char *)out, len)) > 0)
            len -= k;
        while (start < len && (k = ws_len((const unsigned char *)out + start, len - start)) > 0)
            start += k;
    }
    memmove(out, out + start, len - start);
    out[len - start] = 0;
    *text = out;
    return HARK_OK;
}
