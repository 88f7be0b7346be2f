/* synth_weights.c — name-seeded generated weights.  Tests: tests/model/wenet/test_conformer.c */
#include "model/synth_weights.h"

#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <string.h>

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int synth_weights_get(void *user, const char *name, int ndim, const int64_t *shape,
                      const float **data, hark_err_t *err)
{
    synth_weights_t *w = user;
    if (w->missing && !strcmp(name, w->missing))
        return err_set(err, HARK_ERR_NOT_FOUND, "tensor '%s' is missing", name);
    if (w->n == w->cap) {
        int nc = w->cap ? w->cap * 2 : 256;
        float **nb = hark_realloc(w->bufs, sizeof *nb * (size_t)nc);
        if (!nb)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        w->bufs = nb;
        w->cap = nc;
    }
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    float fan_in = ndim >= 2 ? (float)(n / (size_t)shape[0]) : 1.0f;
    float *p = hark_malloc((n ? n : 1) * sizeof(float));
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "out of memory for %s", name);
    unsigned seed = w->seed;
    for (const char *c = name; *c; c++)
        seed = seed * 31u + (unsigned char)*c;
    int is_norm_w = strstr(name, "norm") && ends_with(name, ".weight");
    int var = ends_with(name, "running_var") || ends_with(name, "cmvn.istd");
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        float r = (float)(seed >> 8) / (float)(1u << 23) - 1.0f; /* uniform in [-1, 1) */
        if (var)
            p[i] = 0.75f + 0.5f * (r + 1.0f) * 0.5f;
        else if (is_norm_w)
            p[i] = 1.0f + 0.1f * r;
        else if (ndim >= 2 && !strstr(name, "pos_bias"))
            p[i] = r * 1.7f / sqrtf(fan_in);
        else
            p[i] = 0.1f * r;
    }
    w->bufs[w->n++] = p;
    *data = p;
    return HARK_OK;
}

void synth_weights_free(synth_weights_t *w)
{
    for (int i = 0; i < w->n; i++)
        hark_free(w->bufs[i]);
    hark_free(w->bufs);
    w->bufs = NULL;
    w->n = w->cap = 0;
}
