/* multipart.c — multipart/form-data parsing (RFC 7578 / RFC 2046 delimiters).
 * Tests: tests/net/test_multipart.c */
#include "net/multipart.h"

#include "hark.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

static const char *memfind(const char *h, size_t hl, const char *n, size_t nl)
{
    if (nl == 0 || hl < nl)
        return NULL;
    return memmem(h, hl, n, nl);
}

/* value of `key=` in a header parameter list (quoted-string with \-escapes, or a token) */
static int param(const char *s, size_t len, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl < len; i++) {
        if ((i == 0 || s[i - 1] == ';' || s[i - 1] == ' ' || s[i - 1] == '\t') &&
            strncasecmp(s + i, key, kl) == 0 && s[i + kl] == '=') {
            size_t j = i + kl + 1, o = 0;
            if (j < len && s[j] == '"') {
                for (j++; j < len && s[j] != '"'; j++) {
                    if (s[j] == '\\' && j + 1 < len)
                        j++;
                    if (o + 1 < cap)
                        out[o++] = s[j];
                }
                if (j >= len)
                    return -1; /* unterminated quote */
            } else {
                for (; j < len && s[j] != ';' && s[j] != ' ' && s[j] != '\t' && s[j] != '\r'; j++)
                    if (o + 1 < cap)
                        out[o++] = s[j];
            }
            out[o] = 0;
            return 0;
        }
    }
    return 1; /* absent */
}

int multipart_boundary(const char *ct, char *boundary, size_t cap, hark_err_t *err)
{
    if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "Content-Type must be multipart/form-data");
    char b[128];
    if (param(ct, strlen(ct), "boundary", b, sizeof b) != 0 || !b[0] || strlen(b) > 70)
        return err_set(err, HARK_ERR_INVALID_ARG, "multipart/form-data without a valid boundary");
    if (strlen(b) + 1 > cap)
        return err_set(err, HARK_ERR_INVALID_ARG, "boundary too long");
    strcpy(boundary, b);
    return HARK_OK;
}

static void header_value(const char *h, size_t hl, const char *name, const char **v, size_t *vl)
{
    *v = NULL;
    *vl = 0;
    size_t nl = strlen(name);
    for (size_t i = 0; i < hl;) {
        const char *eol = memfind(h + i, hl - i, "\r\n", 2);
        size_t ll = eol ? (size_t)(eol - (h + i)) : hl - i;
        if (ll > nl && strncasecmp(h + i, name, nl) == 0 && h[i + nl] == ':') {
            size_t s = i + nl + 1;
            while (s < i + ll && (h[s] == ' ' || h[s] == '\t'))
                s++;
            *v = h + s;
            *vl = i + ll - s;
            return;
        }
        i += ll + 2;
    }
}

int multipart_parse(const char *body, size_t len, const char *boundary, multipart_t *out,
                    hark_err_t *err)
{
    out->n = 0;
    char delim[80];
    size_t bl = strlen(boundary);
    if (bl == 0 || bl > 70)
        return err_set(err, HARK_ERR_INVALID_ARG, "bad boundary");
    delim[0] = delim[1] = '-';
    memcpy(delim + 2, boundary, bl);
    size_t dl = bl + 2;
    /* the first delimiter: at the start, or after a preamble line */
    const char *p = memfind(body, len, delim, dl);
    if (!p || (p != body && (p < body + 2 || p[-1] != '\n')))
        return err_set(err, HARK_ERR_FORMAT, "multipart body: no opening boundary");
    const char *end = body + len;
    for (;;) {
        p += dl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return HARK_OK;                          /* closing delimiter */
        while (p < end && (*p == ' ' || *p == '\t')) /* transport padding */
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return err_set(err, HARK_ERR_FORMAT, "multipart body: bad delimiter line");
        p += 2;
        const char *hend = memfind(p, (size_t)(end - p), "\r\n\r\n", 4);
        const char *hdr = p;
        size_t hl;
        if (hend) {
            hl = (size_t)(hend - p) + 2;
            p = hend + 4;
        } else if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') { /* a part with no headers */
            hl = 0;
            p += 2;
        } else {
            return err_set(err, HARK_ERR_FORMAT, "multipart body: unterminated part headers");
        }
        /* content runs to CRLF + delimiter */
        const char *q = p;
        const char *next = NULL;
        while ((q = memfind(q, (size_t)(end - q), delim, dl))) {
            if (q - p >= 2 && q[-2] == '\r' && q[-1] == '\n') {
                next = q;
                break;
            }
            if (q == p) { /* empty content directly followed... needs the CRLF too */
                q++;
                continue;
            }
            q++;
        }
        if (!next)
            return err_set(err, HARK_ERR_FORMAT, "multipart body: no closing boundary");
        if (out->n == MULTIPART_MAX_PARTS)
            return err_set(err, HARK_ERR_TOO_LARGE, "multipart body: more than %d parts",
                           MULTIPART_MAX_PARTS);
        multipart_part_t *pt = &out->parts[out->n];
        memset(pt, 0, sizeof *pt);
        const char *v;
        size_t vl;
        header_value(hdr, hl, "Content-Disposition", &v, &vl);
        if (!v || vl < 9 || strncasecmp(v, "form-data", 9) != 0 ||
            param(v, vl, "name", pt->name, sizeof pt->name) != 0)
            return err_set(err, HARK_ERR_FORMAT,
                           "multipart part %d: missing Content-Disposition: form-data; name=...",
                           out->n + 1);
        if (param(v, vl, "filename", pt->filename, sizeof pt->filename) < 0)
            return err_set(err, HARK_ERR_FORMAT, "multipart part %d: bad filename", out->n + 1);
        header_value(hdr, hl, "Content-Type", &v, &vl);
        if (v) {
            size_t c = vl < sizeof pt->content_type - 1 ? vl : sizeof pt->content_type - 1;
            memcpy(pt->content_type, v, c);
            pt->content_type[c] = 0;
        }
        pt->data = p;
        pt->len = (size_t)(next - 2 - p);
        out->n++;
        p = next;
    }
}

const multipart_part_t *multipart_get(const multipart_t *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->parts[i].name, name))
            return &m->parts[i];
    return NULL;
}
