/* tacotron2.c — Tacotron 2 on the CPU (tacotron2.h): model.json, weights (mapped; convolution
 * weights re-laid out tap-major for conv1d_ref), the encoder, the batched decoder loop (packed
 * rows of the unfinished utterances: every GEMM runs over them at once, the attention per row
 * over its own memory) and the postnet.
 * Tests: tests/model/tacotron2/test_tacotron2.c */
#include "model/tacotron2/tacotron2.h"
#include "model/tacotron2/tacotron2_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "ops/conv1d.h"
#include "ops/ops.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

#define MAX_IDS 100000

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

static int parse_config(const char *path, const cJSON *j, tacotron2_config_t *c, hark_err_t *err)
{
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(j, "family");
    if (!cJSON_IsString(fam) || strcmp(fam->valuestring, "tacotron2") != 0)
        return err_set(err, HARK_ERR_FORMAT, "%s: family must be \"tacotron2\"", path);
    int ver, fps;
    TRY(json_int(path, j, "format_version", 1, 1, &ver, err));
    TRY(json_int(path, j, "n_mel_channels", 1, 1024, &c->n_mels, err));
    TRY(json_int(path, j, "n_symbols", 1, 1 << 16, &c->n_symbols, err));
    TRY(json_int(path, j, "symbols_embedding_dim", 1, 8192, &c->emb_dim, err));
    TRY(json_int(path, j, "encoder_kernel_size", 1, 63, &c->enc_kernel, err));
    TRY(json_int(path, j, "encoder_n_convolutions", 1, MAX_CONVS, &c->enc_convs, err));
    TRY(json_int(path, j, "encoder_embedding_dim", 2, 8192, &c->enc_dim, err));
    TRY(json_int(path, j, "attention_rnn_dim", 1, 8192, &c->att_rnn_dim, err));
    TRY(json_int(path, j, "attention_dim", 1, 8192, &c->att_dim, err));
    TRY(json_int(path, j, "attention_location_n_filters", 1, 1024, &c->loc_filters, err));
    TRY(json_int(path, j, "attention_location_kernel_size", 1, 255, &c->loc_kernel, err));
    TRY(json_int(path, j, "n_frames_per_step", 1, 1, &fps, err));
    TRY(json_int(path, j, "decoder_rnn_dim", 1, 8192, &c->dec_rnn_dim, err));
    TRY(json_int(path, j, "prenet_dim", 1, 8192, &c->prenet_dim, err));
    TRY(json_int(path, j, "max_decoder_steps", 1, 1 << 20, &c->max_decoder_steps, err));
    TRY(json_int(path, j, "postnet_embedding_dim", 1, 8192, &c->postnet_dim, err));
    TRY(json_int(path, j, "postnet_kernel_size", 1, 63, &c->postnet_kernel, err));
    TRY(json_int(path, j, "postnet_n_convolutions", 2, MAX_CONVS, &c->postnet_convs, err));
    TRY(json_int(path, j, "sampling_rate", 1000, 192000, &c->sample_rate, err));
    TRY(json_int(path, j, "hop_length", 1, 1 << 16, &c->hop, err));
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gate_threshold");
    if (!cJSON_IsNumber(g) || g->valuedouble < 0 || g->valuedouble > 1)
        return err_set(err, HARK_ERR_FORMAT, "%s: gate_threshold must be a number in [0, 1]", path);
    c->gate_threshold = (float)g->valuedouble;
    c->no_early_stopping =
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "decoder_no_early_stopping"));
    if (c->emb_dim != c->enc_dim || c->enc_dim % 2)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: symbols_embedding_dim (%d) must equal encoder_embedding_dim (%d), "
                       "which must be even",
                       path, c->emb_dim, c->enc_dim);
    if (c->enc_kernel % 2 == 0 || c->postnet_kernel % 2 == 0 || c->loc_kernel % 2 == 0)
        return err_set(err, HARK_ERR_UNSUPPORTED, "%s: only odd kernel sizes keep the length",
                       path);
    return HARK_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    safetensors_t *st;
    float *next; /* bump pointer into the model's block */
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

static int load_convbn(wload_t *L, const char *pre, convbn_t *c, int cin, int cout, int k)
{
    char name[128];
    const float *w;
    snprintf(name, sizeof name, "%s.0.conv.weight", pre);
    TRY(get(L, name, 3, cout, cin, k, &w));
    snprintf(name, sizeof name, "%s.0.conv.bias", pre);
    TRY(get(L, name, 1, cout, 0, 0, &c->b));
    const float **bn[4] = {&c->bn_g, &c->bn_b, &c->bn_m, &c->bn_v};
    static const char *const bn_names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.1.%s", pre, bn_names[i]);
        TRY(get(L, name, 1, cout, 0, 0, bn[i]));
    }
    for (int o = 0; o < cout; o++)
        if (c->bn_v[o] < 0)
            return err_set(L->err, HARK_ERR_FORMAT, "tensor %s: negative variance at %d", name, o);
    c->cin = cin;
    c->cout = cout;
    c->k = k;
    c->w = L->next;
    L->next += (size_t)cout * k * cin;
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++)
            for (int t = 0; t < k; t++)
                c->w[((size_t)o * k + t) * cin + i] = w[((size_t)o * cin + i) * k + t];
    return HARK_OK;
}

static int load_lstm(wload_t *L, const char *pre, const char *sfx, lstm_t *l, int in, int hid)
{
    char name[128];
    l->in = in;
    l->hid = hid;
    snprintf(name, sizeof name, "%s.weight_ih%s", pre, sfx);
    TRY(get(L, name, 2, 4 * hid, in, 0, &l->w_ih));
    snprintf(name, sizeof name, "%s.weight_hh%s", pre, sfx);
    TRY(get(L, name, 2, 4 * hid, hid, 0, &l->w_hh));
    snprintf(name, sizeof name, "%s.bias_ih%s", pre, sfx);
    TRY(get(L, name, 1, 4 * hid, 0, 0, &l->b_ih));
    snprintf(name, sizeof name, "%s.bias_hh%s", pre, sfx);
    TRY(get(L, name, 1, 4 * hid, 0, 0, &l->b_hh));
    return HARK_OK;
}

static size_t block_floats(const tacotron2_config_t *c)
{
    size_t n = (size_t)c->enc_convs * c->enc_dim * c->enc_dim * c->enc_kernel;
    n += (size_t)(c->n_mels + 1) * (c->dec_rnn_dim + c->enc_dim + 1);
    for (int i = 0; i < c->postnet_convs; i++) {
        int cin = i == 0 ? c->n_mels : c->postnet_dim;
        int cout = i == c->postnet_convs - 1 ? c->n_mels : c->postnet_dim;
        n += (size_t)cin * cout * c->postnet_kernel;
    }
    return n;
}

static int load_weights(tacotron2_model_t *m, wload_t *L)
{
    const tacotron2_config_t *c = &m->cfg;
    int e = c->enc_dim, h = e / 2;
    TRY(get(L, "embedding.weight", 2, c->n_symbols, c->emb_dim, 0, &m->emb));
    char pre[96];
    for (int i = 0; i < c->enc_convs; i++) {
        snprintf(pre, sizeof pre, "encoder.convolutions.%d", i);
        TRY(load_convbn(L, pre, &m->enc[i], e, e, c->enc_kernel));
    }
    TRY(load_lstm(L, "encoder.lstm", "_l0", &m->enc_fwd, e, h));
    TRY(load_lstm(L, "encoder.lstm", "_l0_reverse", &m->enc_bwd, e, h));
    TRY(get(L, "decoder.prenet.layers.0.linear_layer.weight", 2, c->prenet_dim, c->n_mels, 0,
            &m->prenet0));
    TRY(get(L, "decoder.prenet.layers.1.linear_layer.weight", 2, c->prenet_dim, c->prenet_dim, 0,
            &m->prenet1));
    TRY(load_lstm(L, "decoder.attention_rnn", "", &m->att_rnn, c->prenet_dim + e, c->att_rnn_dim));
    TRY(get(L, "decoder.attention_layer.query_layer.linear_layer.weight", 2, c->att_dim,
            c->att_rnn_dim, 0, &m->query_w));
    TRY(get(L, "decoder.attention_layer.memory_layer.linear_layer.weight", 2, c->att_dim, e, 0,
            &m->memory_w));
    TRY(get(L, "decoder.attention_layer.v.linear_layer.weight", 2, 1, c->att_dim, 0, &m->v_w));
    TRY(get(L, "decoder.attention_layer.location_layer.location_conv.conv.weight", 3,
            c->loc_filters, 2, c->loc_kernel, &m->loc_conv));
    TRY(get(L, "decoder.attention_layer.location_layer.location_dense.linear_layer.weight", 2,
            c->att_dim, c->loc_filters, 0, &m->loc_dense));
    TRY(load_lstm(L, "decoder.decoder_rnn", "", &m->dec_rnn, c->att_rnn_dim + e, c->dec_rnn_dim));
    const float *pw, *pb, *gw, *gb;
    int pin = c->dec_rnn_dim + e;
    TRY(get(L, "decoder.linear_projection.linear_layer.weight", 2, c->n_mels, pin, 0, &pw));
    TRY(get(L, "decoder.linear_projection.linear_layer.bias", 1, c->n_mels, 0, 0, &pb));
    TRY(get(L, "decoder.gate_layer.linear_layer.weight", 2, 1, pin, 0, &gw));
    TRY(get(L, "decoder.gate_layer.linear_layer.bias", 1, 1, 0, 0, &gb));
    m->proj_w = L->next; /* the mel projection and the gate as one (n_mels + 1)-row linear */
    L->next += (size_t)(c->n_mels + 1) * pin;
    memcpy(m->proj_w, pw, sizeof(float) * (size_t)c->n_mels * pin);
    memcpy(m->proj_w + (size_t)c->n_mels * pin, gw, sizeof(float) * (size_t)pin);
    m->proj_b = L->next;
    L->next += c->n_mels + 1;
    memcpy(m->proj_b, pb, sizeof(float) * (size_t)c->n_mels);
    m->proj_b[c->n_mels] = gb[0];
    for (int i = 0; i < c->postnet_convs; i++) {
        int cin = i == 0 ? c->n_mels : c->postnet_dim;
        int cout = i == c->postnet_convs - 1 ? c->n_mels : c->postnet_dim;
        snprintf(pre, sizeof pre, "postnet.convolutions.%d", i);
        TRY(load_convbn(L, pre, &m->post[i], cin, cout, c->postnet_kernel));
    }
    if ((size_t)L->n_found != st_count(L->st))
        return err_set(L->err, HARK_ERR_FORMAT,
                       "model.safetensors: %zu tensors, but this config has %d: the model.json "
                       "does not describe these weights",
                       st_count(L->st), L->n_found);
    return HARK_OK;
}

/* The encoder's weights in double (encode() says why). */
static int encoder_to_double(tacotron2_model_t *m, hark_err_t *err)
{
    const tacotron2_config_t *c = &m->cfg;
    int e = c->enc_dim, h = e / 2, K = c->enc_kernel;
    size_t conv = (size_t)K * e * e + 4 * (size_t)e, lstm = 4 * (size_t)h * (e + h + 2);
    size_t n = (size_t)c->enc_convs * conv + 2 * lstm + (size_t)c->att_dim * e;
    double *d = m->dblock = hark_malloc(sizeof(double) * n);
    m->dblock_n = n;
    if (!d)
        return err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for the encoder weights");
    for (int i = 0; i < c->enc_convs; i++) {
        const convbn_t *f = &m->enc[i];
        convd_t *g = &m->encd[i];
        g->w = d;
        d += (size_t)K * e * e;
        for (int o = 0; o < e; o++) /* convbn_t's w is (cout, k, cin); here (k, cout, cin) */
            for (int t = 0; t < K; t++)
                for (int q = 0; q < e; q++)
                    g->w[((size_t)t * e + o) * e + q] = f->w[((size_t)o * K + t) * e + q];
        g->b = d;
        g->scale = d + e;
        g->shift = d + 2 * e;
        d += 4 * (size_t)e;
        for (int o = 0; o < e; o++) {
            g->b[o] = f->b[o];
            g->scale[o] = (double)f->bn_g[o] / sqrt((double)f->bn_v[o] + 1e-5);
            g->shift[o] = (double)f->bn_b[o] - (double)f->bn_m[o] * g->scale[o];
        }
    }
    const lstm_t *src[2] = {&m->enc_fwd, &m->enc_bwd};
    lstmd_t *dst[2] = {&m->encd_fwd, &m->encd_bwd};
    for (int k = 0; k < 2; k++) {
        size_t G = 4 * (size_t)h;
        dst[k]->w_ih = d;
        d += G * e;
        dst[k]->w_hh = d;
        d += G * h;
        dst[k]->b_ih = d;
        d += G;
        dst[k]->b_hh = d;
        d += G;
        for (size_t q = 0; q < G * e; q++)
            dst[k]->w_ih[q] = src[k]->w_ih[q];
        for (size_t q = 0; q < G * h; q++)
            dst[k]->w_hh[q] = src[k]->w_hh[q];
        for (size_t q = 0; q < G; q++) {
            dst[k]->b_ih[q] = src[k]->b_ih[q];
            dst[k]->b_hh[q] = src[k]->b_hh[q];
        }
    }
    m->memory_wd = d;
    for (size_t q = 0; q < (size_t)c->att_dim * e; q++)
        m->memory_wd[q] = m->memory_w[q];
    return HARK_OK;
}

int tacotron2_load(const char *dir, int version, tacotron2_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[1200];
    cJSON *j = NULL;
    TRY(family_open_model_json(dir, version, path, sizeof path, &j, err));
    tacotron2_model_t *m = hark_calloc(1, sizeof *m);
    int rc = m ? parse_config(path, j, &m->cfg, err)
               : err_set(err, HARK_ERR_NOMEM, "out of memory loading %s", dir);
    cJSON_Delete(j);
    if (rc)
        goto fail;
    m->block = hark_malloc(sizeof(float) * block_floats(&m->cfg));
    if (!m->block) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %s's weights", dir);
        goto fail;
    }
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    if ((rc = st_open(path, &m->st, err)))
        goto fail;
    wload_t L = {m->st, m->block, err, 0};
    if ((rc = load_weights(m, &L)))
        goto fail;
    if ((rc = encoder_to_double(m, err)))
        goto fail;
    *out = m;
    return HARK_OK;
fail:
    tacotron2_destroy(m);
    return rc;
}

void tacotron2_destroy(tacotron2_model_t *m)
{
    if (!m)
        return;
    st_close(m->st);
    hark_free(m->block);
    hark_free(m->dblock);
    hark_free(m);
}

const tacotron2_config_t *tacotron2_config(const tacotron2_model_t *m)
{
    return &m->cfg;
}

void tacotron2_result_free(tacotron2_result_t *r)
{
    if (!r)
        return;
    hark_free(r->mel);
    hark_free(r->alignments);
    memset(r, 0, sizeof *r);
}

/* ---- building blocks ------------------------------------------------------------------------ */

static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* y (t, cout) = BN(conv(x (t, cin))) with "same" padding, then act (0 none, 1 relu, 2 tanh).
 * xp scratch ((t + k - 1) · cin). */
static void convbn_forward(float *y, float *xp, const float *x, const convbn_t *c, int t, int act)
{
    int pad = (c->k - 1) / 2;
    conv1d_pad_mask_ref(xp, x, NULL, 1, t, c->cin, c->cin, c->cin, pad, pad);
    conv1d_ref(y, 0.0f, xp, c->w, 1, t + 2 * pad, c->cin, c->cout, c->k, 1, 1);
    for (int s = 0; s < t; s++)
        for (int o = 0; o < c->cout; o++)
            y[(size_t)s * c->cout + o] += c->b[o];
    batch_norm_ref(y, y, c->bn_g, c->bn_b, c->bn_m, c->bn_v, t, c->cout, 1e-5f);
    size_t n = (size_t)t * c->cout;
    if (act == 1)
        relu_ref(y, y, n);
    else if (act == 2)
        for (size_t q = 0; q < n; q++)
            y[q] = tanhf(y[q]);
}

/* The LSTM cell update from the summed gate pre-activations g (4·hid: i, f, g, o). */
static void lstm_cell(float *h, float *cst, const float *g, int hid)
{
    for (int q = 0; q < hid; q++) {
        float i = sigmoidf(g[q]), f = sigmoidf(g[hid + q]), gg = tanhf(g[2 * hid + q]);
        float o = sigmoidf(g[3 * hid + q]);
        cst[q] = f * cst[q] + i * gg;
        h[q] = o * tanhf(cst[q]);
    }
}

/* Gates (n, 4·hid) = x (n, in) · W_ihᵀ + b_ih + (h (n, hid) · W_hhᵀ + b_hh); hg scratch (n, 4·hid).
 */
static void lstm_gates(float *g, float *hg, const lstm_t *l, const float *x, const float *h, int n)
{
    linear_ref(g, x, l->w_ih, l->b_ih, n, l->in, 4 * l->hid);
    linear_ref(hg, h, l->w_hh, l->b_hh, n, l->hid, 4 * l->hid);
    for (size_t q = 0; q < (size_t)n * 4 * l->hid; q++)
        g[q] += hg[q];
}

/* ---- the seeded prenet dropout -------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    return tacotron2_mix64(*s += TACOTRON2_GOLDEN);
}

/* Bernoulli(0.5) keep bits, 64 per draw, from the row's own stream. */
static void seeded_mask(uint64_t *state, uint8_t *keep, int n)
{
    for (int i = 0; i < n; i += 64) {
        uint64_t r = splitmix64(state);
        for (int b = 0; b < 64 && i + b < n; b++)
            keep[i + b] = (uint8_t)((r >> b) & 1);
    }
}

/* ---- inference ------------------------------------------------------------------------------ */

typedef struct {     /* one utterance's state across the decoder loop */
    int n;           /* symbols */
    float *memory;   /* (n, enc_dim) encoder output */
    float *pmem;     /* (n, att_dim) processed memory */
    float *w, *wcum; /* (n) attention weights, cumulative */
    float *frames;   /* (max_steps, n_mels) decoded mel frames, time-major */
    float *align;    /* (max_steps, n) */
    uint64_t rng;
    int steps, mel_length, done;
} row_t;

static void row_free(row_t *r)
{
    hark_free(r->memory);
    hark_free(r->pmem);
    hark_free(r->w);
    hark_free(r->wcum);
    hark_free(r->frames);
    hark_free(r->align);
}

#define STAGE(b, name, step, data, rows, cols)                                                     \
    do {                                                                                           \
        if (o->stage)                                                                              \
            o->stage(o->stage_user, b, name, step, data, rows, cols);                              \
    } while (0)

/* One direction of the encoder LSTM (double) over x (t, in): out (t, ld) columns [0, hid). */
static void lstm_dir_d(double *out, int ld, const lstmd_t *l, int in, int hid, const double *x,
                       int t, int reverse, double *xg, double *h, double *c)
{
    int G = 4 * hid;
    for (int s = 0; s < t; s++)
        memcpy(xg + (size_t)s * G, l->b_ih, sizeof(double) * (size_t)G);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, G, in, 1.0, x, in, l->w_ih, in, 1.0, xg,
                G);
    memset(h, 0, sizeof(double) * (size_t)hid);
    memset(c, 0, sizeof(double) * (size_t)hid);
    for (int s = 0; s < t; s++) {
        int p = reverse ? t - 1 - s : s;
        double *g = xg + (size_t)p * G;
        for (int q = 0; q < G; q++)
            g[q] += l->b_hh[q];
        cblas_dgemv(CblasRowMajor, CblasNoTrans, G, hid, 1.0, l->w_hh, hid, h, 1, 1.0, g, 1);
        for (int q = 0; q < hid; q++) {
            double i = 1.0 / (1.0 + exp(-g[q])), f = 1.0 / (1.0 + exp(-g[hid + q]));
            double gg = tanh(g[2 * hid + q]), o = 1.0 / (1.0 + exp(-g[3 * hid + q]));
            c[q] = f * c[q] + i * gg;
            h[q] = o * tanh(c[q]);
        }
        memcpy(out + (size_t)p * ld, h, sizeof(double) * (size_t)hid);
    }
}

/* Embedding, encoder and processed memory of row b. The encoder runs in double and its output
 * is rounded once: the location-sensitive attention amplifies differences in the memory about
 * a thousandfold over 40 steps (a 4e-7 change of the encoder output moves the attention
 * weights by 4e-4), so the float32 rounding of a different operation order than torch's would
 * by itself exceed the goldens' 1e-4; computed exactly, the memory is as close to the golden's
 * as torch's own rounding allows (docs/tts.md). It runs once per utterance: cheap. */
static int encode(const tacotron2_model_t *m, const int *ids, row_t *r, int b,
                  const tacotron2_opts_t *o, hark_err_t *err)
{
    const tacotron2_config_t *c = &m->cfg;
    int n = r->n, e = c->enc_dim, K = c->enc_kernel, pad = (K - 1) / 2, hid = e / 2;
    int A = c->att_dim;
    double *x = hark_malloc(sizeof(double) * (size_t)(n + 2 * pad) * e); /* padded input */
    double *y = hark_malloc(sizeof(double) * (size_t)n * (e > A ? e : A));
    double *xg = hark_malloc(sizeof(double) * (size_t)n * 4 * hid);
    double *hc = hark_malloc(sizeof(double) * (size_t)2 * hid);
    float *tmp = hark_malloc(sizeof(float) * (size_t)n * e);
    int rc = HARK_OK;
    if (!x || !y || !xg || !hc || !tmp) {
        rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory encoding %d symbols", n);
        goto done;
    }
    memset(x, 0, sizeof(double) * (size_t)(n + 2 * pad) * e);
    for (int s = 0; s < n; s++)
        for (int q = 0; q < e; q++)
            x[(size_t)(s + pad) * e + q] = m->emb[(size_t)ids[s] * c->emb_dim + q];
    if (o->stage) { /* the golden's embedded is (emb_dim, n) */
        for (int s = 0; s < n; s++)
            for (int q = 0; q < e; q++)
                tmp[(size_t)q * n + s] = (float)x[(size_t)(s + pad) * e + q];
        STAGE(b, "embedded", -1, tmp, e, n);
    }
    for (int i = 0; i < c->enc_convs; i++) {
        const convd_t *cv = &m->encd[i];
        for (int s = 0; s < n; s++)
            memcpy(y + (size_t)s * e, cv->b, sizeof(double) * (size_t)e);
        for (int tap = 0; tap < K; tap++)
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, e, e, 1.0, x + (size_t)tap * e,
                        e, cv->w + (size_t)tap * e * e, e, 1.0, y, e);
        for (int s = 0; s < n; s++) /* BatchNorm (eval) and ReLU, back into the padded x */
            for (int q = 0; q < e; q++) {
                double v = y[(size_t)s * e + q] * cv->scale[q] + cv->shift[q];
                x[(size_t)(s + pad) * e + q] = v > 0 ? v : 0;
            }
    }
    /* the BiLSTM reads the unpadded rows of x */
    lstm_dir_d(y, e, &m->encd_fwd, e, hid, x + (size_t)pad * e, n, 0, xg, hc, hc + hid);
    lstm_dir_d(y + hid, e, &m->encd_bwd, e, hid, x + (size_t)pad * e, n, 1, xg, hc, hc + hid);
    for (size_t q = 0; q < (size_t)n * e; q++)
        r->memory[q] = (float)y[q];
    if (o->memory)
        o->memory(o->memory_user, b, r->memory, n, e);
    STAGE(b, "encoder_out", -1, r->memory, n, e);
    /* processed memory of the (rounded) memory, in double as well */
    for (size_t q = 0; q < (size_t)n * e; q++)
        x[q] = r->memory[q];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, A, e, 1.0, x, e, m->memory_wd, e, 0.0,
                y, A);
    for (size_t q = 0; q < (size_t)n * A; q++)
        r->pmem[q] = (float)y[q];
    STAGE(b, "processed_memory", -1, r->pmem, n, A);
done:
    hark_free(x);
    hark_free(y);
    hark_free(xg);
    hark_free(hc);
    hark_free(tmp);
    return rc;
}

/* Location-sensitive attention of one row: from the query projection pq (att_dim) and the row's
 * weights, the new weights (r->w, r->wcum updated) and the context ctx (enc_dim).
 * scratch: loc (n, loc_filters), ploc (n, att_dim). */
static void attend(const tacotron2_model_t *m, row_t *r, const float *pq, float *ctx, float *loc,
                   float *ploc, float *energy)
{
    const tacotron2_config_t *c = &m->cfg;
    int n = r->n, K = c->loc_kernel, pad = (K - 1) / 2, F = c->loc_filters, A = c->att_dim;
    for (int s = 0; s < n; s++) /* conv1d(cat(w, wcum), no bias) */
        for (int f = 0; f < F; f++) {
            const float *w0 = m->loc_conv + (size_t)f * 2 * K, *w1 = w0 + K;
            float acc = 0;
            for (int k = 0; k < K; k++) {
                int p = s + k - pad;
                if (p >= 0 && p < n)
                    acc += w0[k] * r->w[p] + w1[k] * r->wcum[p];
            }
            loc[(size_t)s * F + f] = acc;
        }
    linear_ref(ploc, loc, m->loc_dense, NULL, n, F, A);
    float mx = -INFINITY;
    for (int s = 0; s < n; s++) {
        const float *pl = ploc + (size_t)s * A, *pm = r->pmem + (size_t)s * A;
        float acc = 0;
        for (int a = 0; a < A; a++)
            acc += m->v_w[a] * tanhf(pq[a] + pl[a] + pm[a]);
        energy[s] = acc;
        if (acc > mx)
            mx = acc;
    }
    float sum = 0;
    for (int s = 0; s < n; s++) {
        energy[s] = expf(energy[s] - mx);
        sum += energy[s];
    }
    int e = c->enc_dim;
    memset(ctx, 0, sizeof(float) * (size_t)e);
    for (int s = 0; s < n; s++) {
        float w = energy[s] / sum;
        r->w[s] = w;
        r->wcum[s] += w;
        axpy_ref(ctx, r->memory + (size_t)s * e, w, (size_t)e);
    }
}

/* Postnet of one row: frames (T, n_mels) time-major -> r->mel (n_mels, T) channel-major. */
static int postnet(const tacotron2_model_t *m, row_t *r, int b, const tacotron2_opts_t *o,
                   float *mel_out, hark_err_t *err)
{
    const tacotron2_config_t *c = &m->cfg;
    int T = r->steps, nm = c->n_mels, wide = c->postnet_dim > nm ? c->postnet_dim : nm;
    int pad = (c->postnet_kernel - 1) / 2;
    float *x = hark_malloc(sizeof(float) * (size_t)T * wide);
    float *y = hark_malloc(sizeof(float) * (size_t)T * wide);
    float *xp = hark_malloc(sizeof(float) * (size_t)(T + 2 * pad) * wide);
    float *cm = hark_malloc(sizeof(float) * (size_t)T * nm);
    if (!x || !y || !xp || !cm) {
        hark_free(x);
        hark_free(y);
        hark_free(xp);
        hark_free(cm);
        return err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for the postnet");
    }
#define CM(src, name)                                                                              \
    do {                                                                                           \
        for (int s_ = 0; s_ < T; s_++)                                                             \
            for (int q_ = 0; q_ < nm; q_++)                                                        \
                cm[(size_t)q_ * T + s_] = (src)[(size_t)s_ * nm + q_];                             \
        STAGE(b, name, -1, cm, nm, T);                                                             \
    } while (0)
    if (o->stage)
        CM(r->frames, "mel_decoder");
    memcpy(x, r->frames, sizeof(float) * (size_t)T * nm);
    for (int i = 0; i < c->postnet_convs; i++) {
        convbn_forward(y, xp, x, &m->post[i], T, i < c->postnet_convs - 1 ? 2 : 0);
        float *t = x;
        x = y;
        y = t;
    }
    if (o->stage)
        CM(x, "postnet_residual");
    for (size_t q = 0; q < (size_t)T * nm; q++)
        x[q] = r->frames[q] + x[q];
    for (int s = 0; s < T; s++)
        for (int q = 0; q < nm; q++)
            mel_out[(size_t)q * T + s] = x[(size_t)s * nm + q];
    STAGE(b, "mel_postnet", -1, mel_out, nm, T);
#undef CM
    hark_free(x);
    hark_free(y);
    hark_free(xp);
    hark_free(cm);
    return HARK_OK;
}

int tacotron2_infer(const tacotron2_model_t *m, const int *const *ids, const int *n_ids, int batch,
                    const tacotron2_opts_t *opts, tacotron2_result_t *res, hark_err_t *err)
{
    const tacotron2_config_t *c = &m->cfg;
    tacotron2_opts_t o0 = {0};
    const tacotron2_opts_t *o = opts ? opts : &o0;
    if (batch < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "tacotron2: an empty batch");
    memset(res, 0, sizeof *res * (size_t)batch);
    for (int b = 0; b < batch; b++) {
        if (n_ids[b] < 1)
            return err_set(err, HARK_ERR_INVALID_ARG, "tacotron2: row %d has no symbols", b);
        if (n_ids[b] > MAX_IDS)
            return err_set(err, HARK_ERR_TOO_LARGE, "tacotron2: row %d: %d symbols (max %d)", b,
                           n_ids[b], MAX_IDS);
        for (int s = 0; s < n_ids[b]; s++)
            if (ids[b][s] < 0 || ids[b][s] >= c->n_symbols)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "tacotron2: row %d: symbol id %d at %d is outside [0, %d)", b,
                               ids[b][s], s, c->n_symbols);
    }
    int max_steps = o->max_decoder_steps > 0 ? o->max_decoder_steps : c->max_decoder_steps;
    int early = o->early_stopping ? o->early_stopping > 0 : !c->no_early_stopping;
    int e = c->enc_dim, nm = c->n_mels, P = c->prenet_dim, AR = c->att_rnn_dim;
    int DR = c->dec_rnn_dim, A = c->att_dim, n_max = 0;
    for (int b = 0; b < batch; b++)
        n_max = n_ids[b] > n_max ? n_ids[b] : n_max;

    row_t *rows = hark_calloc((size_t)batch, sizeof *rows);
    /* packed per-row decoder state (B rows) and step scratch */
    size_t B = (size_t)batch, G = 4 * (size_t)(AR > DR ? AR : DR);
    float *prev = hark_calloc(B * nm, sizeof(float)); /* (B, n_mels) previous frame */
    float *p1 = hark_malloc(sizeof(float) * B * P);   /* (B, prenet) */
    float *xin = hark_malloc(sizeof(float) * B * (P + e > AR + e ? P + e : AR + e));
    float *ctx = hark_calloc(B * e, sizeof(float)); /* (B, enc_dim) attention context */
    float *h_att = hark_calloc(B * AR, sizeof(float)), *c_att = hark_calloc(B * AR, sizeof(float));
    float *h_dec = hark_calloc(B * DR, sizeof(float)), *c_dec = hark_calloc(B * DR, sizeof(float));
    float *gates = hark_malloc(sizeof(float) * B * G), *hg = hark_malloc(sizeof(float) * B * G);
    float *pq = hark_malloc(sizeof(float) * B * A);
    float *dcat = hark_malloc(sizeof(float) * B * (DR + e));
    float *proj = hark_malloc(sizeof(float) * B * (nm + 1));
    float *loc = hark_malloc(sizeof(float) * (size_t)n_max * c->loc_filters);
    float *ploc = hark_malloc(sizeof(float) * (size_t)n_max * A);
    float *energy = hark_malloc(sizeof(float) * (size_t)n_max);
    uint8_t *keep = hark_malloc((size_t)P);
    int *act = hark_malloc(sizeof(int) * B); /* packed row -> utterance */
    int rc = HARK_OK;
    if (!rows || !prev || !p1 || !xin || !ctx || !h_att || !c_att || !h_dec || !c_dec || !gates ||
        !hg || !pq || !dcat || !proj || !loc || !ploc || !energy || !keep || !act) {
        rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for a batch of %d", batch);
        goto done;
    }
    for (int b = 0; b < batch; b++) {
        row_t *r = &rows[b];
        r->n = n_ids[b];
        r->memory = hark_malloc(sizeof(float) * (size_t)r->n * e);
        r->pmem = hark_malloc(sizeof(float) * (size_t)r->n * A);
        r->w = hark_calloc((size_t)r->n, sizeof(float));
        r->wcum = hark_calloc((size_t)r->n, sizeof(float));
        r->frames = hark_malloc(sizeof(float) * (size_t)max_steps * nm);
        r->align = hark_malloc(sizeof(float) * (size_t)max_steps * r->n);
        r->rng = o->seeds ? o->seeds[b] : o->seed;
        r->mel_length = -1;
        if (!r->memory || !r->pmem || !r->w || !r->wcum || !r->frames || !r->align) {
            rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for %d decoder steps",
                         max_steps);
            goto done;
        }
        if ((rc = encode(m, ids[b], r, b, o, err)))
            goto done;
    }
    /* Rows are packed: packed row i is utterance act[i]; a finished row is removed by moving
     * the last packed row into its place, so the GEMMs run over the unfinished rows only. */
    int na = batch;
    for (int i = 0; i < batch; i++)
        act[i] = i;
    for (int step = 0; step < max_steps && na > 0; step++) {
        /* prenet, with its dropout (keep · 2) */
        for (int layer = 0; layer < 2; layer++) {
            if (layer == 0)
                linear_ref(p1, prev, m->prenet0, NULL, na, nm, P);
            else {
                memcpy(xin, p1, sizeof(float) * (size_t)na * P);
                linear_ref(p1, xin, m->prenet1, NULL, na, P, P);
            }
            for (int i = 0; i < na; i++) {
                row_t *r = &rows[act[i]];
                if (o->mask)
                    o->mask(o->mask_user, act[i], step, layer, keep, P);
                else
                    seeded_mask(&r->rng, keep, P);
                float *x = p1 + (size_t)i * P;
                for (int q = 0; q < P; q++)
                    x[q] = (x[q] > 0 ? x[q] : 0) * (float)keep[q] * 2.0f;
            }
        }
        /* attention LSTM over cat(prenet, context) */
        for (int i = 0; i < na; i++) {
            memcpy(xin + (size_t)i * (P + e), p1 + (size_t)i * P, sizeof(float) * (size_t)P);
            memcpy(xin + (size_t)i * (P + e) + P, ctx + (size_t)i * e, sizeof(float) * (size_t)e);
            STAGE(act[i], "prenet_out", step, p1 + (size_t)i * P, 1, P);
        }
        lstm_gates(gates, hg, &m->att_rnn, xin, h_att, na);
        for (int i = 0; i < na; i++) {
            lstm_cell(h_att + (size_t)i * AR, c_att + (size_t)i * AR, gates + (size_t)i * 4 * AR,
                      AR);
            STAGE(act[i], "attention_hidden", step, h_att + (size_t)i * AR, 1, AR);
            STAGE(act[i], "attention_cell", step, c_att + (size_t)i * AR, 1, AR);
        }
        /* attention */
        linear_ref(pq, h_att, m->query_w, NULL, na, AR, A);
        for (int i = 0; i < na; i++) {
            row_t *r = &rows[act[i]];
            attend(m, r, pq + (size_t)i * A, ctx + (size_t)i * e, loc, ploc, energy);
            memcpy(r->align + (size_t)step * r->n, r->w, sizeof(float) * (size_t)r->n);
            STAGE(act[i], "attention_weights", step, r->w, 1, r->n);
            STAGE(act[i], "attention_weights_cum", step, r->wcum, 1, r->n);
            STAGE(act[i], "attention_context", step, ctx + (size_t)i * e, 1, e);
        }
        /* decoder LSTM over cat(h_att, context) */
        for (int i = 0; i < na; i++) {
            memcpy(xin + (size_t)i * (AR + e), h_att + (size_t)i * AR, sizeof(float) * (size_t)AR);
            memcpy(xin + (size_t)i * (AR + e) + AR, ctx + (size_t)i * e, sizeof(float) * (size_t)e);
        }
        lstm_gates(gates, hg, &m->dec_rnn, xin, h_dec, na);
        for (int i = 0; i < na; i++) {
            lstm_cell(h_dec + (size_t)i * DR, c_dec + (size_t)i * DR, gates + (size_t)i * 4 * DR,
                      DR);
            STAGE(act[i], "decoder_hidden", step, h_dec + (size_t)i * DR, 1, DR);
            STAGE(act[i], "decoder_cell", step, c_dec + (size_t)i * DR, 1, DR);
            memcpy(dcat + (size_t)i * (DR + e), h_dec + (size_t)i * DR, sizeof(float) * (size_t)DR);
            memcpy(dcat + (size_t)i * (DR + e) + DR, ctx + (size_t)i * e,
                   sizeof(float) * (size_t)e);
        }
        /* mel frame and gate */
        linear_ref(proj, dcat, m->proj_w, m->proj_b, na, DR + e, nm + 1);
        for (int i = 0; i < na; i++) {
            row_t *r = &rows[act[i]];
            const float *fr = proj + (size_t)i * (nm + 1);
            memcpy(r->frames + (size_t)step * nm, fr, sizeof(float) * (size_t)nm);
            memcpy(prev + (size_t)i * nm, fr, sizeof(float) * (size_t)nm);
            r->steps = step + 1;
            STAGE(act[i], "mel_frame", step, fr, 1, nm);
            STAGE(act[i], "gate", step, fr + nm, 1, 1);
            if (r->mel_length < 0 && !(sigmoidf(fr[nm]) <= c->gate_threshold))
                r->mel_length = step; /* DLE: mel_lengths counts the steps before this one */
            r->done = early && r->mel_length >= 0;
        }
        /* finished rows leave the packed batch */
        for (int i = 0; i < na;) {
            if (!rows[act[i]].done) {
                i++;
                continue;
            }
            int last = na - 1;
            if (i != last) {
                act[i] = act[last];
#define MOVE(buf, w)                                                                               \
    memcpy((buf) + (size_t)i * (w), (buf) + (size_t)last * (w), sizeof(float) * (size_t)(w))
                MOVE(prev, nm);
                MOVE(ctx, e);
                MOVE(h_att, AR);
                MOVE(c_att, AR);
                MOVE(h_dec, DR);
                MOVE(c_dec, DR);
#undef MOVE
            }
            na--;
        }
    }
    for (int b = 0; b < batch && !rc; b++) {
        row_t *r = &rows[b];
        tacotron2_result_t *out = &res[b];
        if (r->mel_length < 0)
            r->mel_length = r->steps;
        out->mel = hark_malloc(sizeof(float) * (size_t)r->steps * nm);
        out->alignments = hark_malloc(sizeof(float) * (size_t)r->steps * r->n);
        if (!out->mel || !out->alignments) {
            rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for the results");
            break;
        }
        if ((rc = postnet(m, r, b, o, out->mel, err)))
            break;
        memcpy(out->alignments, r->align, sizeof(float) * (size_t)r->steps * r->n);
        out->n_frames = r->steps;
        out->mel_length = r->mel_length;
        out->n_ids = r->n;
    }
done:
    if (rc)
        for (int b = 0; b < batch; b++)
            tacotron2_result_free(&res[b]);
    if (rows)
        for (int b = 0; b < batch; b++)
            row_free(&rows[b]);
    hark_free(rows);
    hark_free(prev);
    hark_free(p1);
    hark_free(xin);
    hark_free(ctx);
    hark_free(h_att);
    hark_free(c_att);
    hark_free(h_dec);
    hark_free(c_dec);
    hark_free(gates);
    hark_free(hg);
    hark_free(pq);
    hark_free(dcat);
    hark_free(proj);
    hark_free(loc);
    hark_free(ploc);
    hark_free(energy);
    hark_free(keep);
    hark_free(act);
    return rc;
}
