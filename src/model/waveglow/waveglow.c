/* waveglow.c — WaveGlow and its denoiser on the CPU (waveglow.h): model.json, weights (mapped;
 * the upsampler and the dilated WN convolutions re-laid out per tap), the upsampler as one sgemm
 * per block of frames and an overlap-add, the reverse flows channel-major (1x1 convolutions and
 * every tap of a dilated one as sgemms), and the STFT denoiser through FFTW (DLE's conv1d with a
 * windowed Fourier basis is a windowed real DFT; its pinv-basis conv_transpose is the inverse
 * real DFT: pinv of [Re; Im] rows of the DFT equals irfft), overlap-added and divided by the
 * window's sum of squares.
 * Tests: tests/model/waveglow/test_waveglow.c */
#include "model/waveglow/waveglow.h"

#include "model/waveglow/waveglow_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <fftw3.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

#define MAX_FRAMES 100000
#define UP_BLOCK 16 /* mel frames per upsampler sgemm */

/* FFTW's planner is not thread-safe: plans are made under this lock. */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- model.json ----------------------------------------------------------------------------- */

static int json_int(const char *path, const cJSON *o, const char *key, long lo, long hi, int *out,
                    hark_err_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return err_set(err, HARK_ERR_FORMAT, "%s: %s must be an integer in [%ld, %ld]", path, key,
                       lo, hi);
    *out = (int)v->valuedouble;
    return HARK_OK;
}

static int json_num(const char *path, const cJSON *o, const char *key, double lo, double hi,
                    float *out, hark_err_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return err_set(err, HARK_ERR_FORMAT, "%s: %s must be a number in [%g, %g]", path, key, lo,
                       hi);
    *out = (float)v->valuedouble;
    return HARK_OK;
}

static int parse_config(const char *path, const cJSON *j, waveglow_config_t *c, hark_err_t *err)
{
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(j, "family");
    if (!cJSON_IsString(fam) || strcmp(fam->valuestring, "waveglow") != 0)
        return err_set(err, HARK_ERR_FORMAT, "%s: family must be \"waveglow\"", path);
    int ver, n_overlap;
    TRY(json_int(path, j, "format_version", 1, 1, &ver, err));
    TRY(json_int(path, j, "n_mel_channels", 1, 1024, &c->n_mels, err));
    TRY(json_int(path, j, "n_flows", 1, WAVEGLOW_MAX_FLOWS, &c->n_flows, err));
    TRY(json_int(path, j, "n_group", 2, 256, &c->n_group, err));
    TRY(json_int(path, j, "n_early_every", 1, 256, &c->n_early_every, err));
    TRY(json_int(path, j, "n_early_size", 0, 256, &c->n_early_size, err));
    const cJSON *wn = cJSON_GetObjectItemCaseSensitive(j, "WN_config");
    if (!cJSON_IsObject(wn))
        return err_set(err, HARK_ERR_FORMAT, "%s: WN_config must be an object", path);
    TRY(json_int(path, wn, "n_layers", 1, WAVEGLOW_MAX_LAYERS, &c->wn_layers, err));
    TRY(json_int(path, wn, "kernel_size", 1, 63, &c->wn_kernel, err));
    TRY(json_int(path, wn, "n_channels", 2, 8192, &c->wn_channels, err));
    TRY(json_int(path, j, "upsample_kernel", 1, 1 << 16, &c->up_kernel, err));
    TRY(json_int(path, j, "upsample_stride", 1, 1 << 16, &c->up_stride, err));
    TRY(json_int(path, j, "sampling_rate", 1000, 192000, &c->sample_rate, err));
    TRY(json_num(path, j, "sigma", 0, 10, &c->sigma, err));
    const cJSON *dn = cJSON_GetObjectItemCaseSensitive(j, "denoiser");
    if (!cJSON_IsObject(dn))
        return err_set(err, HARK_ERR_FORMAT, "%s: denoiser must be an object", path);
    TRY(json_num(path, dn, "strength", 0, 10, &c->denoiser_strength, err));
    TRY(json_int(path, dn, "filter_length", 4, 1 << 16, &c->filter_length, err));
    TRY(json_int(path, dn, "n_overlap", 1, 64, &n_overlap, err));
    TRY(json_int(path, dn, "win_length", 1, 1 << 16, &c->win_length, err));
    TRY(json_int(path, dn, "bias_frames", 1, 10000, &c->bias_frames, err));
    c->hop = c->filter_length / n_overlap;
    if (c->n_group % 2 || c->wn_kernel % 2 == 0 || c->up_kernel < c->up_stride ||
        c->up_stride % c->n_group)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: n_group %d, WN kernel %d, upsampler %d/%d: need an even group, an odd "
                       "kernel and a stride that is a multiple of the group",
                       path, c->n_group, c->wn_kernel, c->up_kernel, c->up_stride);
    if (c->filter_length % 2 || c->win_length != c->filter_length || c->hop < 1 ||
        c->filter_length % c->hop)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: denoiser STFT %d/%d/%d: only win_length = filter_length (even) and "
                       "a hop dividing it",
                       path, c->filter_length, c->hop, c->win_length);
    return HARK_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    safetensors_t *st;
    float *next;
    hark_err_t *err;
    int n_found;
} wload_t;

static int get(wload_t *L, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
               const float **data)
{
    TRY(st_get_f32_finite(L->st, name, ndim, d0, d1, d2, data, L->err));
    L->n_found++;
    return HARK_OK;
}

int waveglow_flow_channels(const waveglow_config_t *c, int k)
{
    int n = c->n_group;
    for (int i = 1; i <= k; i++)
        if (i % c->n_early_every == 0)
            n -= c->n_early_size;
    return n;
}

static int load_flow(wload_t *L, const waveglow_config_t *c, int k, flow_t *f)
{
    int C = c->wn_channels, K = c->wn_kernel, ch = f->ch = waveglow_flow_channels(c, k),
        half = ch / 2;
    int cond = c->n_mels * c->n_group;
    char name[128];
    const float *w;
    snprintf(name, sizeof name, "convinv.%d.conv.weight", k);
    TRY(get(L, name, 3, ch, ch, 1, &w)); /* kept for the record; the inverse is what runs */
    snprintf(name, sizeof name, "convinv.%d.W_inverse", k);
    TRY(get(L, name, 2, ch, ch, 0, &f->w_inv));
    snprintf(name, sizeof name, "WN.%d.start.weight", k);
    TRY(get(L, name, 3, C, half, 1, &f->start_w));
    snprintf(name, sizeof name, "WN.%d.start.bias", k);
    TRY(get(L, name, 1, C, 0, 0, &f->start_b));
    snprintf(name, sizeof name, "WN.%d.end.weight", k);
    TRY(get(L, name, 3, ch, C, 1, &f->end_w));
    snprintf(name, sizeof name, "WN.%d.end.bias", k);
    TRY(get(L, name, 1, ch, 0, 0, &f->end_b));
    for (int i = 0; i < c->wn_layers; i++) {
        snprintf(name, sizeof name, "WN.%d.in_layers.%d.weight", k, i);
        TRY(get(L, name, 3, 2 * C, C, K, &w));
        f->in_w[i] = L->next;
        L->next += (size_t)K * 2 * C * C;
        for (int o = 0; o < 2 * C; o++)
            for (int q = 0; q < C; q++)
                for (int t = 0; t < K; t++)
                    f->in_w[i][((size_t)t * 2 * C + o) * C + q] = w[((size_t)o * C + q) * K + t];
        snprintf(name, sizeof name, "WN.%d.in_layers.%d.bias", k, i);
        TRY(get(L, name, 1, 2 * C, 0, 0, &f->in_b[i]));
        snprintf(name, sizeof name, "WN.%d.cond_layers.%d.weight", k, i);
        TRY(get(L, name, 3, 2 * C, cond, 1, &f->cond_w[i]));
        snprintf(name, sizeof name, "WN.%d.cond_layers.%d.bias", k, i);
        TRY(get(L, name, 1, 2 * C, 0, 0, &f->cond_b[i]));
        int rs = i < c->wn_layers - 1 ? 2 * C : C;
        snprintf(name, sizeof name, "WN.%d.res_skip_layers.%d.weight", k, i);
        TRY(get(L, name, 3, rs, C, 1, &f->rs_w[i]));
        snprintf(name, sizeof name, "WN.%d.res_skip_layers.%d.bias", k, i);
        TRY(get(L, name, 1, rs, 0, 0, &f->rs_b[i]));
    }
    return HARK_OK;
}

static int load_weights(waveglow_model_t *m, wload_t *L)
{
    const waveglow_config_t *c = &m->cfg;
    const float *w;
    int nm = c->n_mels, K = c->up_kernel;
    TRY(get(L, "upsample.weight", 3, nm, nm, K, &w));
    TRY(get(L, "upsample.bias", 1, nm, 0, 0, &m->up_b));
    m->up_w = L->next;
    L->next += (size_t)K * nm * nm;
    for (int i = 0; i < nm; i++)
        for (int o = 0; o < nm; o++)
            for (int t = 0; t < K; t++)
                m->up_w[((size_t)t * nm + o) * nm + i] = w[((size_t)i * nm + o) * K + t];
    for (int k = 0; k < c->n_flows; k++)
        TRY(load_flow(L, c, k, &m->flow[k]));
    if ((size_t)L->n_found != st_count(L->st))
        return err_set(L->err, HARK_ERR_FORMAT,
                       "model.safetensors: %zu tensors, but this config has %d: the model.json "
                       "does not describe these weights",
                       st_count(L->st), L->n_found);
    return HARK_OK;
}

static int bias_spectrum(waveglow_model_t *m, hark_err_t *err);

int waveglow_load(const char *dir, int version, waveglow_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[1200];
    cJSON *j = NULL;
    TRY(family_open_model_json(dir, version, path, sizeof path, &j, err));
    waveglow_model_t *m = hark_calloc(1, sizeof *m);
    int rc = m ? parse_config(path, j, &m->cfg, err)
               : err_set(err, HARK_ERR_NOMEM, "out of memory loading %s", dir);
    cJSON_Delete(j);
    if (rc)
        goto fail;
    const waveglow_config_t *c = &m->cfg;
    if (waveglow_flow_channels(c, c->n_flows - 1) < 2 ||
        waveglow_flow_channels(c, c->n_flows - 1) % 2) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: the last flows would work on %d channels", path,
                     waveglow_flow_channels(c, c->n_flows - 1));
        goto fail;
    }
    size_t n = (size_t)c->up_kernel * c->n_mels * c->n_mels + (size_t)c->n_flows * c->wn_layers *
                                                                  c->wn_kernel * 2 *
                                                                  c->wn_channels * c->wn_channels;
    m->block = hark_malloc(sizeof(float) * n);
    m->window = hark_malloc(sizeof(float) * (size_t)c->filter_length);
    m->bias_spec = hark_calloc((size_t)c->filter_length / 2 + 1, sizeof(float));
    if (!m->block || !m->window || !m->bias_spec) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %s's weights", dir);
        goto fail;
    }
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    if ((rc = st_open(path, &m->st, err)))
        goto fail;
    wload_t L = {m->st, m->block, err, 0};
    if ((rc = load_weights(m, &L)))
        goto fail;
    /* scipy get_window('hann', N, fftbins=True): the periodic Hann window */
    for (int i = 0; i < c->filter_length; i++)
        m->window[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / c->filter_length));
    pthread_mutex_lock(&plan_lock);
    float *buf = fftwf_malloc(sizeof(float) * (size_t)c->filter_length);
    fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * ((size_t)c->filter_length / 2 + 1));
    if (buf && spec) {
        m->fwd = fftwf_plan_dft_r2c_1d(c->filter_length, buf, spec, FFTW_ESTIMATE);
        m->inv = fftwf_plan_dft_c2r_1d(c->filter_length, spec, buf, FFTW_ESTIMATE);
    }
    fftwf_free(buf);
    fftwf_free(spec);
    pthread_mutex_unlock(&plan_lock);
    if (!m->fwd || !m->inv) {
        rc = err_set(err, HARK_ERR_NOMEM, "waveglow: cannot plan the denoiser's FFT");
        goto fail;
    }
    if ((rc = bias_spectrum(m, err)))
        goto fail;
    *out = m;
    return HARK_OK;
fail:
    waveglow_destroy(m);
    return rc;
}

void waveglow_destroy(waveglow_model_t *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&plan_lock);
    if (m->fwd)
        fftwf_destroy_plan(m->fwd);
    if (m->inv)
        fftwf_destroy_plan(m->inv);
    pthread_mutex_unlock(&plan_lock);
    st_close(m->st);
    hark_free(m->block);
    hark_free(m->window);
    hark_free(m->bias_spec);
    hark_free(m);
}

const waveglow_config_t *waveglow_config(const waveglow_model_t *m)
{
    return &m->cfg;
}

size_t waveglow_samples(const waveglow_model_t *m, int n_frames)
{
    return (size_t)n_frames * (size_t)m->cfg.up_stride;
}

int waveglow_context_frames(const waveglow_model_t *m)
{
    const waveglow_config_t *c = &m->cfg;
    /* each flow's WN: dilated convs of dilation 2^i, half-width (k - 1) / 2 · 2^i groups */
    long groups = (long)c->n_flows * ((c->wn_kernel - 1) / 2) * ((1L << c->wn_layers) - 1);
    long samples = groups * c->n_group;
    return (int)((samples + c->up_stride - 1) / c->up_stride +
                 (c->up_kernel + c->up_stride - 1) / c->up_stride);
}

const float *waveglow_bias_spec(const waveglow_model_t *m)
{
    return m->bias_spec;
}

/* ---- the flows ------------------------------------------------------------------------------ */

uint64_t waveglow_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Standard normal values (Box-Muller over 53-bit uniforms; waveglow_impl.h). */
void waveglow_gaussian(uint64_t *s, float *z, size_t n)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((waveglow_splitmix64(s) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
        double u2 = (waveglow_splitmix64(s) >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        z[i] = (float)(r * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            z[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
    }
}

/* y (rows, len) = w (rows, cin) · x (cin, len) + b. */
static void conv1x1(float *y, const float *w, const float *b, const float *x, int rows, int cin,
                    int len)
{
    for (int o = 0; o < rows; o++)
        for (int t = 0; t < len; t++)
            y[(size_t)o * len + t] = b ? b[o] : 0.0f;
    matmul_ref(y, w, x, rows, len, cin, cin, len, len, 0, 1.0f, 1.0f);
}

typedef struct { /* one call's scratch for the WN of the widest flow */
    float *h;    /* (C, L) */
    float *hp;   /* (C, L + 2·pad_max) */
    float *a;    /* (2C, L) */
    float *acts; /* (C, L) */
    float *rs;   /* (2C, L) */
    float *skip; /* (C, L) */
} wn_scratch_t;

/* out (ch, L) = WN_k(x (ch/2, L), cond (n_mels · n_group, L)). */
static void wn_forward(const waveglow_model_t *m, const flow_t *f, float *out, const float *x,
                       const float *cond, int L, wn_scratch_t *s)
{
    const waveglow_config_t *c = &m->cfg;
    int C = c->wn_channels, K = c->wn_kernel, half = f->ch / 2, nc = c->n_mels * c->n_group;
    conv1x1(s->h, f->start_w, f->start_b, x, C, half, L);
    for (int i = 0; i < c->wn_layers; i++) {
        int d = 1 << i, pad = d * (K - 1) / 2, ld = L + 2 * pad;
        for (int q = 0; q < C; q++) {
            float *row = s->hp + (size_t)q * ld;
            memset(row, 0, sizeof(float) * (size_t)pad);
            memcpy(row + pad, s->h + (size_t)q * L, sizeof(float) * (size_t)L);
            memset(row + pad + L, 0, sizeof(float) * (size_t)pad);
        }
        /* in_layer(h) + cond_layer(spect): both biases, then the taps and the conditioning */
        for (int o = 0; o < 2 * C; o++) {
            float bsum = f->in_b[i][o];
            float *row = s->a + (size_t)o * L;
            for (int t = 0; t < L; t++)
                row[t] = bsum;
        }
        for (int tap = 0; tap < K; tap++)
            matmul_ref(s->a, f->in_w[i] + (size_t)tap * 2 * C * C, s->hp + (size_t)tap * d, 2 * C,
                       L, C, C, ld, L, 0, 1.0f, 1.0f);
        conv1x1(s->rs, f->cond_w[i], f->cond_b[i], cond, 2 * C, nc, L);
        for (size_t q = 0; q < (size_t)2 * C * L; q++)
            s->a[q] += s->rs[q];
        for (size_t q = 0; q < (size_t)C * L; q++) {
            float sg = 1.0f / (1.0f + expf(-s->a[(size_t)C * L + q]));
            s->acts[q] = tanhf(s->a[q]) * sg;
        }
        int last = i == c->wn_layers - 1, rsn = last ? C : 2 * C;
        conv1x1(s->rs, f->rs_w[i], f->rs_b[i], s->acts, rsn, C, L);
        const float *sk = last ? s->rs : s->rs + (size_t)C * L;
        if (!last)
            for (size_t q = 0; q < (size_t)C * L; q++)
                s->h[q] += s->rs[q];
        if (i == 0)
            memcpy(s->skip, sk, sizeof(float) * (size_t)C * L);
        else
            for (size_t q = 0; q < (size_t)C * L; q++)
                s->skip[q] = sk[q] + s->skip[q];
    }
    conv1x1(out, f->end_w, f->end_b, s->skip, f->ch, C, L);
}

#define STAGE(name, data, rows, cols)                                                              \
    do {                                                                                           \
        if (o->stage)                                                                              \
            o->stage(o->stage_user, name, data, rows, cols);                                       \
    } while (0)

/* up (n_mels, T · stride) = the upsampler's output, cut to T · stride samples. */
static int upsample(const waveglow_model_t *m, const float *mel, int T, float *up, hark_err_t *err)
{
    const waveglow_config_t *c = &m->cfg;
    int nm = c->n_mels, K = c->up_kernel, S = c->up_stride;
    size_t len = (size_t)T * S;
    float *z = hark_malloc(sizeof(float) * (size_t)K * nm * UP_BLOCK);
    float *xb = hark_malloc(sizeof(float) * (size_t)nm * UP_BLOCK);
    if (!z || !xb) {
        hark_free(z);
        hark_free(xb);
        return err_set(err, HARK_ERR_NOMEM, "waveglow: out of memory upsampling %d frames", T);
    }
    for (int o = 0; o < nm; o++)
        for (size_t p = 0; p < len; p++)
            up[(size_t)o * len + p] = 0.0f;
    for (int f0 = 0; f0 < T; f0 += UP_BLOCK) {
        int nb = T - f0 < UP_BLOCK ? T - f0 : UP_BLOCK;
        for (int i = 0; i < nm; i++)
            memcpy(xb + (size_t)i * nb, mel + (size_t)i * T + f0, sizeof(float) * (size_t)nb);
        matmul_ref(z, m->up_w, xb, K * nm, nb, nm, nm, nb, nb, 0, 1.0f, 0.0f);
        for (int tap = 0; tap < K; tap++)
            for (int o = 0; o < nm; o++) {
                const float *zr = z + ((size_t)tap * nm + o) * nb;
                float *row = up + (size_t)o * len;
                for (int s = 0; s < nb; s++) {
                    size_t p = (size_t)(f0 + s) * S + tap;
                    if (p < len)
                        row[p] += zr[s];
                }
            }
    }
    for (int o = 0; o < nm; o++)
        for (size_t p = 0; p < len; p++)
            up[(size_t)o * len + p] += m->up_b[o];
    hark_free(z);
    hark_free(xb);
    return HARK_OK;
}

int waveglow_infer(const waveglow_model_t *m, const float *mel, int T, const waveglow_opts_t *opts,
                   float *audio_out, hark_err_t *err)
{
    const waveglow_config_t *c = &m->cfg;
    waveglow_opts_t o0 = {.sigma = -1};
    const waveglow_opts_t *o = opts ? opts : &o0;
    if (T < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "waveglow: the mel has no frames");
    if (T > MAX_FRAMES)
        return err_set(err, HARK_ERR_TOO_LARGE, "waveglow: %d mel frames is over the limit of %d",
                       T, MAX_FRAMES);
    for (size_t i = 0; i < (size_t)c->n_mels * T; i++)
        if (!isfinite(mel[i]))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "waveglow: mel value %zu (bin %zu, frame %zu) is NaN or infinite", i,
                           i / (size_t)T, i % (size_t)T);
    float sigma = o->sigma >= 0 ? o->sigma : c->sigma;
    int nm = c->n_mels, G = c->n_group, C = c->wn_channels, nc = nm * G;
    size_t len = (size_t)T * c->up_stride;
    int L = (int)(len / (size_t)G);
    int pad_max = (1 << (c->wn_layers - 1)) * (c->wn_kernel - 1) / 2;
    uint64_t rng = o->seed;
    float *up = hark_malloc(sizeof(float) * (size_t)nm * len);
    float *cond = hark_malloc(sizeof(float) * (size_t)nc * L);
    float *audio = hark_malloc(sizeof(float) * (size_t)G * L);
    float *tmp = hark_malloc(sizeof(float) * (size_t)G * L);
    float *wo = hark_malloc(sizeof(float) * (size_t)G * L);
    wn_scratch_t s = {hark_malloc(sizeof(float) * (size_t)C * L),
                      hark_malloc(sizeof(float) * (size_t)C * (L + 2 * pad_max)),
                      hark_malloc(sizeof(float) * (size_t)2 * C * L),
                      hark_malloc(sizeof(float) * (size_t)C * L),
                      hark_malloc(sizeof(float) * (size_t)2 * C * L),
                      hark_malloc(sizeof(float) * (size_t)C * L)};
    int rc = HARK_OK;
    if (!up || !cond || !audio || !tmp || !wo || !s.h || !s.hp || !s.a || !s.acts || !s.rs ||
        !s.skip) {
        rc = err_set(err, HARK_ERR_NOMEM, "waveglow: out of memory for %d frames", T);
        goto done;
    }
    if ((rc = upsample(m, mel, T, up, err)))
        goto done;
    STAGE("upsampled", up, nm, (int)len);
    /* unfold(2, G, G) + permute: cond[mel · G + j][t] = up[mel][t · G + j] */
    for (int b = 0; b < nm; b++)
        for (int j = 0; j < G; j++)
            for (int t = 0; t < L; t++)
                cond[((size_t)b * G + j) * L + t] = up[(size_t)b * len + (size_t)t * G + j];
    /* audio starts as sigma · z with the last flow's channels */
    int ch = m->flow[c->n_flows - 1].ch, draw = 0;
    if (o->noise)
        o->noise(o->noise_user, draw++, audio, ch, L);
    else
        waveglow_gaussian(&rng, audio, (size_t)ch * L);
    for (size_t q = 0; q < (size_t)ch * L; q++)
        audio[q] *= sigma;
    for (int k = c->n_flows - 1; k >= 0; k--) {
        const flow_t *f = &m->flow[k];
        int half = f->ch / 2;
        char nm_buf[48];
        snprintf(nm_buf, sizeof nm_buf, "flow%d_wn_input", k);
        STAGE(nm_buf, audio, half, L);
        wn_forward(m, f, wo, audio, cond, L, &s);
        snprintf(nm_buf, sizeof nm_buf, "flow%d_wn_output", k);
        STAGE(nm_buf, wo, f->ch, L);
        /* audio_1 = (audio_1 - b) / exp(s), b = out[:half], s = out[half:] */
        for (size_t q = 0; q < (size_t)half * L; q++) {
            float *a1 = audio + (size_t)half * L;
            a1[q] = (a1[q] - wo[q]) / expf(wo[(size_t)half * L + q]);
        }
        conv1x1(tmp, f->w_inv, NULL, audio, f->ch, f->ch, L);
        snprintf(nm_buf, sizeof nm_buf, "flow%d_after_convinv", k);
        STAGE(nm_buf, tmp, f->ch, L);
        if (k % c->n_early_every == 0 && k > 0) { /* cat(sigma · z, audio) */
            int e = c->n_early_size;
            memcpy(audio + (size_t)e * L, tmp, sizeof(float) * (size_t)f->ch * L);
            if (o->noise)
                o->noise(o->noise_user, draw++, audio, e, L);
            else
                waveglow_gaussian(&rng, audio, (size_t)e * L);
            for (size_t q = 0; q < (size_t)e * L; q++)
                audio[q] *= sigma;
        } else
            memcpy(audio, tmp, sizeof(float) * (size_t)f->ch * L);
    }
    /* permute(0, 2, 1).view(B, -1): sample t · G + ch */
    for (int q = 0; q < G; q++)
        for (int t = 0; t < L; t++)
            audio_out[(size_t)t * G + q] = audio[(size_t)q * L + t];
done:
    hark_free(up);
    hark_free(cond);
    hark_free(audio);
    hark_free(tmp);
    hark_free(wo);
    hark_free(s.h);
    hark_free(s.hp);
    hark_free(s.a);
    hark_free(s.acts);
    hark_free(s.rs);
    hark_free(s.skip);
    return rc;
}

/* ---- the denoiser --------------------------------------------------------------------------- */

/* mag, phase (F, nb) of DLE's STFT.transform of x (n): reflect-pad filter_length/2 both sides,
 * frames every hop, the windowed real DFT; F = n / hop + 1. */
static int stft(const waveglow_model_t *m, const float *x, size_t n, float *mag, float *phase,
                int F, hark_err_t *err)
{
    const waveglow_config_t *c = &m->cfg;
    int N = c->filter_length, half = N / 2, nb = N / 2 + 1;
    float *buf = fftwf_malloc(sizeof(float) * (size_t)N);
    fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * (size_t)nb);
    if (!buf || !spec) {
        fftwf_free(buf);
        fftwf_free(spec);
        return err_set(err, HARK_ERR_NOMEM, "waveglow: out of memory for the STFT");
    }
    for (int f = 0; f < F; f++) {
        for (int j = 0; j < N; j++) {
            long p = (long)f * c->hop + j - half; /* index into x, reflected at both ends */
            if (p < 0)
                p = -p;
            if (p >= (long)n)
                p = 2 * ((long)n - 1) - p;
            buf[j] = x[p] * m->window[j];
        }
        fftwf_execute_dft_r2c(m->fwd, buf, spec);
        for (int k = 0; k < nb; k++) {
            float re = spec[k][0], im = spec[k][1];
            mag[(size_t)f * nb + k] = sqrtf(re * re + im * im);
            if (phase)
                phase[(size_t)f * nb + k] = atan2f(im, re);
        }
    }
    fftwf_free(buf);
    fftwf_free(spec);
    return HARK_OK;
}

static int bias_spectrum(waveglow_model_t *m, hark_err_t *err)
{
    const waveglow_config_t *c = &m->cfg;
    int T = c->bias_frames, nb = c->filter_length / 2 + 1;
    size_t n = waveglow_samples(m, T);
    if (n <= (size_t)c->filter_length / 2)
        return err_set(err, HARK_ERR_FORMAT, "waveglow: %d bias frames are too few", T);
    float *mel = hark_calloc((size_t)c->n_mels * T, sizeof(float));
    float *audio = hark_malloc(sizeof(float) * n);
    float *mag = hark_malloc(sizeof(float) * (size_t)nb); /* frame 0 only */
    int rc =
        mel && audio && mag ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "waveglow: out of memory");
    waveglow_opts_t o = {.sigma = 0.0f}; /* DLE: infer(zeros(1, 80, 88), sigma=0.0) */
    if (!rc)
        rc = waveglow_infer(m, mel, T, &o, audio, err);
    if (!rc)
        rc = stft(m, audio, n, mag, NULL, 1, err);
    if (!rc)
        memcpy(m->bias_spec, mag, sizeof(float) * (size_t)nb);
    hark_free(mel);
    hark_free(audio);
    hark_free(mag);
    return rc;
}

int waveglow_denoise(const waveglow_model_t *m, const float *audio, size_t n, float strength,
                     float *out, size_t *n_out, hark_err_t *err)
{
    const waveglow_config_t *c = &m->cfg;
    int N = c->filter_length, half = N / 2, nb = N / 2 + 1, hop = c->hop;
    *n_out = 0;
    if (n <= (size_t)half)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "waveglow: %zu samples is too short for the denoiser (needs > %d)", n, half);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(audio[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "waveglow: sample %zu is NaN or infinite", i);
    int F = (int)(n / (size_t)hop) + 1;
    size_t full = (size_t)(F - 1) * hop + N; /* the conv_transpose output */
    float *mag = hark_malloc(sizeof(float) * (size_t)F * nb);
    float *phase = hark_malloc(sizeof(float) * (size_t)F * nb);
    float *y = hark_calloc(full, sizeof(float));
    float *wss = hark_calloc(full, sizeof(float));
    float *buf = fftwf_malloc(sizeof(float) * (size_t)N);
    fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * (size_t)nb);
    int rc = HARK_OK;
    if (!mag || !phase || !y || !wss || !buf || !spec) {
        rc = err_set(err, HARK_ERR_NOMEM, "waveglow: out of memory denoising %zu samples", n);
        goto done;
    }
    if ((rc = stft(m, audio, n, mag, phase, F, err)))
        goto done;
    float scale = (float)N / (float)hop;
    for (int f = 0; f < F; f++) {
        for (int k = 0; k < nb; k++) {
            float mg = mag[(size_t)f * nb + k] - m->bias_spec[k] * strength;
            mg = mg > 0.0f ? mg : 0.0f;
            float ph = phase[(size_t)f * nb + k];
            spec[k][0] = mg * cosf(ph);
            spec[k][1] = mg * sinf(ph);
        }
        /* pinv(scale · basis) applied to [Re; Im] = irfft / scale; FFTW's c2r is unnormalised
         * and ignores the imaginary parts of bins 0 and N/2, as irfft does */
        fftwf_execute_dft_c2r(m->inv, spec, buf);
        float *yf = y + (size_t)f * hop;
        for (int j = 0; j < N; j++)
            yf[j] += buf[j] / (float)N / scale * m->window[j];
    }
    /* librosa window_sumsquare: hann² (float64) summed into float32 */
    for (int f = 0; f < F; f++)
        for (int j = 0; j < N; j++) {
            double w = 0.5 - 0.5 * cos(2.0 * M_PI * j / N);
            float *acc = &wss[(size_t)f * hop + j];
            *acc = (float)((double)*acc + w * w); /* numpy: float32 += float64 */
        }
    for (size_t p = 0; p < full; p++) {
        if (wss[p] > FLT_MIN)
            y[p] /= wss[p];
        y[p] *= scale;
    }
    *n_out = full - (size_t)N; /* trim filter_length / 2 at both ends */
    memmove(out, y + half, sizeof(float) * *n_out);
done:
    hark_free(mag);
    hark_free(phase);
    hark_free(y);
    hark_free(wss);
    fftwf_free(buf);
    fftwf_free(spec);
    return rc;
}
