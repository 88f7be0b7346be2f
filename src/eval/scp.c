/* scp.c — Kaldi-style "<id> <value>" list files (wav.scp, text) with look-up by id.
 * Tests: tests/eval/test_wer.c */
#include "eval/scp.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

void scp_free(scp_t *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) {
        hark_free(s->e[i].id);
        hark_free(s->e[i].value);
    }
    hark_free(s->e);
    hark_free(s->by_id);
    memset(s, 0, sizeof *s);
}

static int by_id_cmp(const void *a, const void *b, void *ctx)
{
    const scp_entry_t *e = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(e[x].id, e[y].id);
    return c ? c : (x > y) - (x < y);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int scp_load(const char *path, int need_value, scp_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    scp_t s = {0};
    int cap = 0, rc = HARK_OK, lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s:%d: NUL byte in line", path, lineno);
            goto done;
        }
        while (len > 0 && is_blank(line[len - 1]))
            line[--len] = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            continue;
        char *id = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        size_t idlen = (size_t)(p - id);
        while (*p == ' ' || *p == '\t')
            p++;
        if (need_value && !*p) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s:%d: '%.*s' has no value", path, lineno,
                         (int)(idlen < 200 ? idlen : 200), id);
            goto done;
        }
        if (s.n == cap) {
            int nc = cap ? 2 * cap : 64;
            scp_entry_t *ne = hark_realloc(s.e, sizeof *ne * (size_t)nc);
            if (!ne) {
                rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading %s", path);
                goto done;
            }
            s.e = ne;
            cap = nc;
        }
        scp_entry_t *e = &s.e[s.n];
        e->id = hark_malloc(idlen + 1);
        e->value = hark_strdup(p);
        e->line = lineno;
        if (!e->id || !e->value) {
            hark_free(e->id);
            hark_free(e->value);
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading %s", path);
            goto done;
        }
        memcpy(e->id, id, idlen);
        e->id[idlen] = 0;
        s.n++;
    }
    if (ferror(f)) {
        rc = err_set(err, HARK_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        goto done;
    }
    s.by_id = hark_malloc(sizeof(int) * (size_t)(s.n ? s.n : 1));
    if (!s.by_id) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading %s", path);
        goto done;
    }
    for (int i = 0; i < s.n; i++)
        s.by_id[i] = i;
    qsort_r(s.by_id, (size_t)s.n, sizeof(int), by_id_cmp, s.e);
    for (int i = 1; i < s.n; i++) {
        const scp_entry_t *a = &s.e[s.by_id[i - 1]], *b = &s.e[s.by_id[i]];
        if (!strcmp(a->id, b->id)) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s:%d: duplicate id '%.200s' (first on line %d)",
                         path, b->line, b->id, a->line);
            goto done;
        }
    }
done:
    free(line); /* from getline, not hark_malloc */
    fclose(f);
    if (rc)
        scp_free(&s);
    else
        *out = s;
    return rc;
}

const scp_entry_t *scp_find(const scp_t *s, const char *id)
{
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const scp_entry_t *e = &s->e[s->by_id[mid]];
        int c = strcmp(e->id, id);
        if (!c)
            return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

int scp_is_command(const char *value)
{
    size_t n = value ? strlen(value) : 0;
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    return n > 0 && value[n - 1] == '|';
}

int scp_run_command(const char *value, void **data, size_t *len, size_t max_bytes, hark_err_t *err)
{
    *data = NULL;
    *len = 0;
    size_t n = strlen(value);
    while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    if (n == 0 || value[n - 1] != '|')
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: not a \"command |\" entry", value);
    char *cmd = hark_malloc(n);
    if (!cmd)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    memcpy(cmd, value, n - 1);
    cmd[n - 1] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) {
        int rc = err_set(err, HARK_ERR_IO, "cannot run \"%.200s\": %s", cmd, strerror(errno));
        hark_free(cmd);
        return rc;
    }
    unsigned char *buf = NULL;
    size_t cap = 0, got = 0;
    int rc = HARK_OK;
    for (;;) {
        if (got == cap) {
            size_t c = cap ? 2 * cap : 1 << 16;
            unsigned char *b = hark_realloc(buf, c);
            if (!b) {
                rc = err_set(err, HARK_ERR_NOMEM, "out of memory for \"%.200s\"'s output", cmd);
                break;
            }
            buf = b;
            cap = c;
        }
        size_t k = fread(buf + got, 1, cap - got, p);
        got += k;
        if (got > max_bytes) {
            rc = err_set(err, HARK_ERR_TOO_LARGE, "\"%.200s\" writes more than %zu bytes", cmd,
                         max_bytes);
            break;
        }
        if (k == 0)
            break;
    }
    int st = pclose(p);
    if (rc == HARK_OK && st != 0)
        rc = err_set(err, HARK_ERR_IO, "\"%.200s\" failed (exit status %d)", cmd,
                     WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    hark_free(cmd);
    if (rc) {
        hark_free(buf);
        return rc;
    }
    *data = buf;
    *len = got;
    return HARK_OK;
}
