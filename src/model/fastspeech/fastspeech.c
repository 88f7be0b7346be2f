/* fastspeech.c — DLE FastSpeech on the CPU (fastspeech.h): model.json, the weights (convs
 * re-laid out per tap), time-major activations, conv-1D as one sgemm per tap over a zero-padded
 * copy, the fused-QKV head-major split, ops' attention with DLE's key mask, post-LN blocks, the
 * duration predictor and the length regulator. DLE's padded batch is reproduced row by row by
 * running a row at its padded length (pad_to / pad_frames), padding masked as DLE masks it.
 * Tests: tests/model/fastspeech/test_fastspeech.c */
#include "model/fastspeech/fastspeech.h"
#include "model/fastspeech/fastspeech_impl.h"

#include "core/alloc.h"
#include "model/family.h"
#include "hark.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS FASTSPEECH_LN_EPS
#define MAXI(a, b) ((a) > (b) ? (a) : (b))

/* ---- model.json ----------------------------------------------------------------------------- */

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

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

static int parse_config(const char *path, const cJSON *j, fastspeech_config_t *c, hark_err_t *err)
{
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(j, "family");
    if (!cJSON_IsString(fam) || strcmp(fam->valuestring, "fastspeech") != 0)
        return err_set(err, HARK_ERR_FORMAT, "%s: family must be \"fastspeech\"", path);
    int ver;
    TRY(json_int(path, j, "format_version", 1, 1, &ver, err));
    TRY(json_int(path, j, "d_model", 2, 8192, &c->d_model, err));
    TRY(json_int(path, j, "d_k", 64, 64, &c->d_k, err));
    TRY(json_int(path, j, "d_v", 64, 64, &c->d_v, err));
    TRY(json_int(path, j, "enc_layers", 1, 64, &c->enc_layers, err));
    TRY(json_int(path, j, "enc_heads", 1, 64, &c->enc_heads, err));
    TRY(json_int(path, j, "enc_filter", 1, 1 << 16, &c->enc_filter, err));
    TRY(json_int(path, j, "dec_layers", 1, 64, &c->dec_layers, err));
    TRY(json_int(path, j, "dec_heads", 1, 64, &c->dec_heads, err));
    TRY(json_int(path, j, "dec_filter", 1, 1 << 16, &c->dec_filter, err));
    TRY(json_int(path, j, "conv_kernel", 1, 31, &c->conv_kernel, err));
    TRY(json_int(path, j, "conv_padding", 0, 15, &c->conv_padding, err));
    TRY(json_int(path, j, "dp_filter", 1, 1 << 16, &c->dp_filter, err));
    TRY(json_int(path, j, "dp_kernel", 3, 3, &c->dp_kernel, err));
    TRY(json_int(path, j, "n_mels", 1, 1024, &c->n_mels, err));
    TRY(json_int(path, j, "max_seq_len", 1, 1 << 20, &c->max_seq_len, err));
    TRY(json_int(path, j, "n_symbols", 2, 1 << 16, &c->n_symbols, err));
    TRY(json_int(path, j, "sample_rate", 1000, 192000, &c->sample_rate, err));
    TRY(json_int(path, j, "hop", 1, 1 << 16, &c->hop, err));
    if (2 * c->conv_padding != c->conv_kernel - 1)
        return err_set(err, HARK_ERR_UNSUPPORTED, "%s: conv_padding %d does not keep the length",
                       path, c->conv_padding);
    return HARK_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    safetensors_t *st;
    float *next;
    hark_err_t *err;
} wload_t;

static int get(wload_t *L, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
               const float **data)
{
    TRY(st_get_f32_finite(L->st, name, ndim, d0, d1, d2, data, L->err));
    return HARK_OK;
}

static int load_conv(wload_t *L, const char *pre, conv_t *c, int cin, int cout, int k, int pad)
{
    char name[160];
    const float *w;
    snprintf(name, sizeof name, "%s.weight", pre);
    TRY(get(L, name, 3, cout, cin, k, &w));
    snprintf(name, sizeof name, "%s.bias", pre);
    TRY(get(L, name, 1, cout, 0, 0, &c->b));
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    c->pad = pad;
    c->w = L->next;
    L->next += (size_t)k * cout * cin;
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++)
            for (int t = 0; t < k; t++)
                c->w[((size_t)t * cout + o) * cin + i] = w[((size_t)o * cin + i) * k + t];
    return HARK_OK;
}

static int load_side(wload_t *L, const fastspeech_config_t *c, const char *pre, int n_layers,
                     int heads, int filter, fft_layer_t *ls)
{
    int d = c->d_model;
    char name[160], p[140];
    for (int i = 0; i < n_layers; i++) {
        fft_layer_t *l = &ls[i];
        l->heads = heads;
        l->filter = filter;
#define G(field, suffix, nd, a, b_)                                                                \
    do {                                                                                           \
        snprintf(name, sizeof name, "%s.layer_stack.%d.%s", pre, i, suffix);                       \
        TRY(get(L, name, nd, a, b_, 0, &l->field));                                                \
    } while (0)
        G(qkv_w, "slf_attn.linear.weight", 2, heads * 192, d);
        G(qkv_b, "slf_attn.linear.bias", 1, heads * 192, 0);
        G(ln1_g, "slf_attn.layer_norm.weight", 1, d, 0);
        G(ln1_b, "slf_attn.layer_norm.bias", 1, d, 0);
        G(fc_w, "slf_attn.fc.weight", 2, d, heads * 64);
        G(fc_b, "slf_attn.fc.bias", 1, d, 0);
        G(ln2_g, "pos_ffn.layer_norm.weight", 1, d, 0);
        G(ln2_b, "pos_ffn.layer_norm.bias", 1, d, 0);
#undef G
        snprintf(p, sizeof p, "%s.layer_stack.%d.pos_ffn.w_1", pre, i);
        TRY(load_conv(L, p, &l->c1, d, filter, c->conv_kernel, c->conv_padding));
        snprintf(p, sizeof p, "%s.layer_stack.%d.pos_ffn.w_2", pre, i);
        TRY(load_conv(L, p, &l->c2, filter, d, c->conv_kernel, c->conv_padding));
    }
    return HARK_OK;
}

static int load_weights(fastspeech_model_t *m, wload_t *L)
{
    const fastspeech_config_t *c = &m->cfg;
    int d = c->d_model;
    const char *dp = "length_regulator.duration_predictor";
    char name[160];
    TRY(get(L, "word_emb.weight", 2, c->n_symbols, d, 0, &m->emb));
    TRY(get(L, "phoneme_side.position.weight", 2, c->max_seq_len + 1, d, 0, &m->pos_enc));
    TRY(get(L, "mel_side.position.weight", 2, c->max_seq_len + 1, d, 0, &m->pos_dec));
    TRY(load_side(L, c, "phoneme_side", c->enc_layers, c->enc_heads, c->enc_filter, m->enc));
    TRY(load_side(L, c, "mel_side", c->dec_layers, c->dec_heads, c->dec_filter, m->dec));
    snprintf(name, sizeof name, "%s.conv1d_1", dp);
    TRY(load_conv(L, name, &m->dp1, d, c->dp_filter, c->dp_kernel, 1));
    snprintf(name, sizeof name, "%s.conv1d_2", dp);
    TRY(load_conv(L, name, &m->dp2, c->dp_filter, c->dp_filter, c->dp_kernel, 1));
#define G(field, suffix, nd, a, b_)                                                                \
    do {                                                                                           \
        snprintf(name, sizeof name, "%s.%s", dp, suffix);                                          \
        TRY(get(L, name, nd, a, b_, 0, &m->field));                                                \
    } while (0)
    G(dp_ln1_g, "layer_norm_1.weight", 1, c->dp_filter, 0);
    G(dp_ln1_b, "layer_norm_1.bias", 1, c->dp_filter, 0);
    G(dp_ln2_g, "layer_norm_2.weight", 1, c->dp_filter, 0);
    G(dp_ln2_b, "layer_norm_2.bias", 1, c->dp_filter, 0);
    G(dp_w, "linear_layer.weight", 2, 1, c->dp_filter);
    G(dp_b, "linear_layer.bias", 1, 1, 0);
#undef G
    TRY(get(L, "mel_linear.weight", 2, c->n_mels, d, 0, &m->mel_w));
    TRY(get(L, "mel_linear.bias", 1, c->n_mels, 0, 0, &m->mel_b));
    size_t expect = 3 + 12 * (size_t)(c->enc_layers + c->dec_layers) + 10 + 2;
    if (st_count(L->st) != expect)
        return err_set(L->err, HARK_ERR_FORMAT,
                       "model.safetensors: %zu tensors, but this config has %zu: model.json does "
                       "not describe these weights",
                       st_count(L->st), expect);
    return HARK_OK;
}

int fastspeech_load(const char *dir, int version, fastspeech_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[1200];
    cJSON *j = NULL;
    TRY(family_open_model_json(dir, version, path, sizeof path, &j, err));
    fastspeech_model_t *m = hark_calloc(1, sizeof *m);
    int rc = m ? parse_config(path, j, &m->cfg, err)
               : err_set(err, HARK_ERR_NOMEM, "out of memory loading %s", dir);
    cJSON_Delete(j);
    if (rc)
        goto fail;
    const fastspeech_config_t *c = &m->cfg;
    size_t conv = 0;
    conv += (size_t)c->enc_layers * 2 * c->conv_kernel * c->enc_filter * c->d_model;
    conv += (size_t)c->dec_layers * 2 * c->conv_kernel * c->dec_filter * c->d_model;
    conv += (size_t)c->dp_kernel * c->dp_filter * ((size_t)c->d_model + c->dp_filter);
    m->block = hark_malloc(sizeof(float) * conv);
    m->enc = hark_calloc((size_t)c->enc_layers, sizeof *m->enc);
    m->dec = hark_calloc((size_t)c->dec_layers, sizeof *m->dec);
    if (!m->block || !m->enc || !m->dec) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %s's weights", dir);
        goto fail;
    }
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    wload_t L = {NULL, m->block, err};
    if ((rc = st_open(path, &L.st, err)))
        goto fail;
    m->st = L.st;
    if ((rc = load_weights(m, &L))) {
        err_prefix(err, rc, "%s: ", path);
        goto fail;
    }
    *out = m;
    return HARK_OK;
fail:
    fastspeech_destroy(m);
    return rc;
}

void fastspeech_destroy(fastspeech_model_t *m)
{
    if (!m)
        return;
    st_close(m->st);
    hark_free(m->block);
    hark_free(m->enc);
    hark_free(m->dec);
    hark_free(m);
}

const fastspeech_config_t *fastspeech_config(const fastspeech_model_t *m)
{
    return &m->cfg;
}

long fastspeech_round_durations(const float *dlog, int n, float alpha, float *dfl, int *rep)
{
    long total = 0;
    for (int r = 0; r < n; r++) {
        float f = fmaxf(expf(dlog[r]) - 1.0f, 0.0f);
        if (dfl)
            dfl[r] = f;
        rep[r] = (int)rintf(f * alpha); /* torch.round: half to even */
        total += rep[r];
    }
    return total;
}

/* ---- forward -------------------------------------------------------------------------------- */

typedef struct {
    float *x, *a, *b, *h, *qkv, *q, *k, *v, *ctx, *xp, *att;
} scratch_t;

/* y (t, cout) = b + Σ_tap xp[tap..tap+t) · w_tapᵀ; x (t, cin) copied into xp with zero rows. */
static void conv1d(float *y, float *xp, const float *x, const conv_t *c, int t)
{
    memset(xp, 0, sizeof(float) * (size_t)c->pad * c->cin);
    memcpy(xp + (size_t)c->pad * c->cin, x, sizeof(float) * (size_t)t * c->cin);
    memset(xp + (size_t)(c->pad + t) * c->cin, 0, sizeof(float) * (size_t)c->pad * c->cin);
    for (int r = 0; r < t; r++)
        memcpy(y + (size_t)r * c->cout, c->b, sizeof(float) * (size_t)c->cout);
    for (int tap = 0; tap < c->k; tap++)
        matmul_ref(y, xp + (size_t)tap * c->cin, c->w + (size_t)tap * c->cout * c->cin, t, c->cout,
                   c->cin, c->cin, c->cin, c->cout, 1, 1.0f, 1.0f);
}

static void zero_rows(float *x, int from, int t, int d)
{
    if (from < t)
        memset(x + (size_t)from * d, 0, sizeof(float) * (size_t)(t - from) * d);
}

static void stage_out(const fastspeech_opts_t *o, const char *name, const float *x, int r, int c)
{
    if (o->stage)
        o->stage(o->stage_user, name, x, r, c);
}

/* One post-LN FFT block in place on s->x (t, d), rows >= valid padding. */
static void fft_block(const fft_layer_t *l, scratch_t *s, int t, int valid, int d, int *hi,
                      const fastspeech_opts_t *o, const char *side, int idx)
{
    int H = l->heads, hd = H * 64;
    linear_ref(s->qkv, s->x, l->qkv_w, l->qkv_b, t, d, H * 192);
    for (int r = 0; r < t; r++)
        for (int h = 0; h < H; h++) {
            const float *src = s->qkv + (size_t)r * H * 192 + (size_t)h * 192;
            memcpy(s->q + (size_t)r * hd + h * 64, src, 64 * sizeof(float));
            memcpy(s->k + (size_t)r * hd + h * 64, src + 64, 64 * sizeof(float));
            memcpy(s->v + (size_t)r * hd + h * 64, src + 128, 64 * sizeof(float));
        }
    for (int r = 0; r < t; r++)
        hi[r] = valid;
    attention_ref(s->ctx, s->att, s->q, s->k, s->v, NULL, NULL, NULL, NULL, hi, t, t, H, 64,
                  0.125f);
    linear_ref(s->a, s->ctx, l->fc_w, l->fc_b, t, hd, d);
    for (size_t i = 0; i < (size_t)t * d; i++)
        s->a[i] += s->x[i];
    layer_norm_ref(s->a, s->a, l->ln1_g, l->ln1_b, t, d, LN_EPS);
    zero_rows(s->a, valid, t, d);
    char nm[48];
    snprintf(nm, sizeof nm, "%s_layer%d_attn_ln", side, idx);
    stage_out(o, nm, s->a, t, d);
    conv1d(s->h, s->xp, s->a, &l->c1, t);
    relu_ref(s->h, s->h, (size_t)t * l->filter);
    conv1d(s->x, s->xp, s->h, &l->c2, t);
    for (size_t i = 0; i < (size_t)t * d; i++)
        s->x[i] += s->a[i];
    layer_norm_ref(s->x, s->x, l->ln2_g, l->ln2_b, t, d, LN_EPS);
    zero_rows(s->x, valid, t, d);
    snprintf(nm, sizeof nm, "%s_layer%d_out", side, idx);
    stage_out(o, nm, s->x, t, d);
}

static int scratch_alloc(scratch_t *s, const fastspeech_config_t *c, int t)
{
    int d = c->d_model;
    int heads = MAXI(c->enc_heads, c->dec_heads);
    int f = MAXI(MAXI(c->enc_filter, c->dec_filter), c->dp_filter);
    size_t T = (size_t)t;
    s->x = hark_malloc(sizeof(float) * T * d);
    s->a = hark_malloc(sizeof(float) * T * MAXI(d, c->dp_filter));
    s->b = hark_malloc(sizeof(float) * T * MAXI(d, c->dp_filter));
    s->h = hark_malloc(sizeof(float) * T * f);
    s->qkv = hark_malloc(sizeof(float) * T * heads * 192);
    s->q = hark_malloc(sizeof(float) * T * heads * 64);
    s->k = hark_malloc(sizeof(float) * T * heads * 64);
    s->v = hark_malloc(sizeof(float) * T * heads * 64);
    s->ctx = hark_malloc(sizeof(float) * T * heads * 64);
    s->xp = hark_malloc(sizeof(float) * (T + 2 * 15) * MAXI(f, d));
    s->att = hark_malloc(sizeof(float) * attention_scratch_floats(t, 64));
    return s->x && s->a && s->b && s->h && s->qkv && s->q && s->k && s->v && s->ctx && s->xp &&
           s->att;
}

static void scratch_free(scratch_t *s)
{
    float **p[] = {&s->x, &s->a, &s->b,   &s->h,  &s->qkv, &s->q,
                   &s->k, &s->v, &s->ctx, &s->xp, &s->att};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        hark_free(*p[i]);
        *p[i] = NULL;
    }
}

int fastspeech_forward(const fastspeech_model_t *m, const int *ids, int n,
                       const fastspeech_opts_t *opts, float **mel, int *n_frames, hark_err_t *err)
{
    const fastspeech_config_t *c = &m->cfg;
    fastspeech_opts_t o = opts ? *opts : (fastspeech_opts_t){0};
    float alpha = o.alpha > 0 ? o.alpha : 1.0f;
    int d = c->d_model;
    *mel = NULL;
    *n_frames = 0;
    if (n < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech: no symbols to speak");
    if (n > c->max_seq_len)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "fastspeech: %d symbols is over the model's max_seq_len %d", n,
                       c->max_seq_len);
    for (int i = 0; i < n; i++)
        if (ids[i] < 1 || ids[i] >= c->n_symbols)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "fastspeech: symbol id %d at %d is out of range [1, %d)", ids[i], i,
                           c->n_symbols);
    if (!(alpha <= 100))
        return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech: alpha %g is out of range", alpha);
    int np = o.pad_to > n ? o.pad_to : n;
    if (np > c->max_seq_len)
        return err_set(err, HARK_ERR_TOO_LARGE, "fastspeech: pad_to %d is over max_seq_len", np);
    scratch_t s = {0};
    int *hi = NULL, *rep = NULL;
    float *dur = NULL, *out = NULL;
    int rc = HARK_OK;
    if (!scratch_alloc(&s, c, np) || !(hi = hark_malloc(sizeof(int) * (size_t)np)) ||
        !(rep = hark_malloc(sizeof(int) * (size_t)np)) ||
        !(dur = hark_malloc(sizeof(float) * 3 * (size_t)np))) {
        rc = err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory for %d symbols", n);
        goto done;
    }
    /* encoder */
    for (int r = 0; r < np; r++)
        memcpy(s.x + (size_t)r * d, m->emb + (size_t)(r < n ? ids[r] : 0) * d,
               sizeof(float) * (size_t)d);
    stage_out(&o, "emb", s.x, np, d);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < d; i++)
            s.x[(size_t)r * d + i] += m->pos_enc[(size_t)(r + 1) * d + i];
    stage_out(&o, "enc_add_pos_enc", s.x, np, d);
    for (int l = 0; l < c->enc_layers; l++)
        fft_block(&m->enc[l], &s, np, n, d, hi, &o, "enc", l);
    stage_out(&o, "encoder_out", s.x, np, d);
    /* duration predictor: conv, relu, LN, conv, relu, LN, linear, masked */
    int fd = c->dp_filter;
    conv1d(s.a, s.xp, s.x, &m->dp1, np);
    relu_ref(s.a, s.a, (size_t)np * fd);
    layer_norm_ref(s.a, s.a, m->dp_ln1_g, m->dp_ln1_b, np, fd, LN_EPS);
    conv1d(s.b, s.xp, s.a, &m->dp2, np);
    relu_ref(s.b, s.b, (size_t)np * fd);
    layer_norm_ref(s.b, s.b, m->dp_ln2_g, m->dp_ln2_b, np, fd, LN_EPS);
    float *dlog = dur, *dfl = dur + np, *drd = dur + 2 * np;
    linear_ref(dlog, s.b, m->dp_w, m->dp_b, np, fd, 1);
    for (int r = n; r < np; r++)
        dlog[r] = 0;
    long total = fastspeech_round_durations(dlog, np, alpha, dfl, rep);
    for (int r = 0; r < np; r++)
        drd[r] = (float)rep[r];
    stage_out(&o, "dur_log", dlog, 1, np);
    stage_out(&o, "dur_float", dfl, 1, np);
    stage_out(&o, "dur_rounded", drd, 1, np);
    int T = total > c->max_seq_len ? c->max_seq_len : (int)total;
    if (T == 0) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "fastspeech: every duration rounds to 0 (alpha %g): no frames to synthesise",
                     alpha);
        goto done;
    }
    int tp = o.pad_frames > T ? o.pad_frames : T;
    if (tp > c->max_seq_len)
        tp = c->max_seq_len;
    /* length regulator */
    float *lr = hark_malloc(sizeof(float) * (size_t)tp * d);
    if (!lr) {
        rc = err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory for %d frames", tp);
        goto done;
    }
    int f = 0;
    for (int r = 0; r < np && f < T; r++)
        for (int k = 0; k < rep[r] && f < T; k++, f++)
            memcpy(lr + (size_t)f * d, s.x + (size_t)r * d, sizeof(float) * (size_t)d);
    zero_rows(lr, T, tp, d);
    stage_out(&o, "length_regulated", lr, tp, d);
    scratch_free(&s);
    hark_free(hi);
    hi = NULL;
    if (!scratch_alloc(&s, c, tp) || !(hi = hark_malloc(sizeof(int) * (size_t)tp)) ||
        !(out = hark_malloc(sizeof(float) * (size_t)tp * c->n_mels))) {
        hark_free(lr);
        rc = err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory for %d frames", tp);
        goto done;
    }
    memcpy(s.x, lr, sizeof(float) * (size_t)tp * d);
    hark_free(lr);
    for (int r = 0; r < T; r++)
        for (int i = 0; i < d; i++)
            s.x[(size_t)r * d + i] += m->pos_dec[(size_t)(r + 1) * d + i];
    stage_out(&o, "mel_side_add_pos_enc", s.x, tp, d);
    for (int l = 0; l < c->dec_layers; l++)
        fft_block(&m->dec[l], &s, tp, T, d, hi, &o, "dec", l);
    stage_out(&o, "decoder_out", s.x, tp, d);
    linear_ref(out, s.x, m->mel_w, m->mel_b, tp, d, c->n_mels);
    stage_out(&o, "mel", out, tp, c->n_mels);
    *mel = out;
    *n_frames = tp;
    out = NULL;
done:
    scratch_free(&s);
    hark_free(hi);
    hark_free(rep);
    hark_free(dur);
    hark_free(out);
    return rc;
}
