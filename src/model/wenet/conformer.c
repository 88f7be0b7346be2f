/* conformer.c — WeNet Conformer encoder + CTC head on the CPU (float32) over packed utterances.
 * Tests: tests/model/wenet/test_conformer.c
 *
 * Inside a forward the batch is packed: utterance b's encoder frames are rows
 * [off[b], off[b] + len[b]) of (N, D) buffers, N = Σ len. Row-wise ops (linears, norms, FFN) run
 * once over all N rows; the ops that mix frames (subsampling, attention, depthwise conv) run per
 * utterance on its own rows only, so padding can never leak into a valid frame.
 */
#include "model/wenet/conformer.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "hark.h"
#include "ops/ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define NORM_EPS 1e-5f
#define MAX_CONVS 3

typedef struct {
    const float *w; /* (out, in) */
    const float *b; /* (out) */
} lin_t;

typedef struct {
    const float *g, *b; /* (D) */
} norm_t;

typedef struct {
    norm_t norm_ff_macaron, norm_mha, norm_conv, norm_ff, norm_final;
    lin_t ffm1, ffm2;                     /* macaron FFN: (F, D), (D, F) */
    lin_t ff1, ff2;                       /* FFN: (F, D), (D, F) */
    lin_t q, k, v, o;                     /* (D, D) */
    const float *pos_w;                   /* linear_pos (D, D), no bias; rel_pos only */
    const float *pos_bias_u, *pos_bias_v; /* (H, dk); rel_pos only */
    lin_t pw1;                            /* pointwise_conv1 (2D, D) */
    const float *dw_w, *dw_b;             /* depthwise (D, K), (D) */
    norm_t cnn_norm;                      /* batch_norm or layer_norm affine (D) */
    const float *bn_mean, *bn_var;        /* (D); batch_norm only */
    lin_t pw2;                            /* pointwise_conv2 (D, D) */
    const float *causal_left;             /* (K-1, D) = glu(pw1.b) rows; causal only; owned */
} block_t;

typedef struct {
    const float *w, *b; /* (cout, cin, k, k), (cout) */
    int k, stride, cin, cout;
} conv_t;

struct conformer_model {
    wenet_config_t cfg;
    int d, h, dk, ffn, kernel, vocab, in_dim;
    const float *cmvn_mean, *cmvn_istd; /* (in_dim) or NULL */
    int n_conv;
    conv_t conv[MAX_CONVS];
    lin_t embed_lin; /* (D, cout·F') */
    int embed_in;    /* cout·F' */
    float xscale;
    const float *pe; /* (max_len, D); owned */
    block_t *blocks;
    norm_t after_norm;
    lin_t ctc; /* (V, D) */
    float *owned;
};

struct conformer_state {
    const conformer_model_t *m;
    int max_batch, max_frames, max_rows, max_t_out;
    float *mem;                                /* one block; the views below point into it */
    float *x, *hn, *a, *big, *q, *k, *v, *ctx; /* (max_rows, D) except big (max_rows, max(F, 2D)) */
    float *p;                                  /* (max_t_out, D) projected positions */
    float *att;                                /* attention scratch */
    float *feat;                               /* (max_frames, in_dim) one utterance's input */
    float *cbuf[MAX_CONVS];                    /* conv outputs (H_i, C, W_i) of one utterance */
    float *col;                                /* im2col scratch */
    int *ibuf;                                 /* lo, hi (max_rows) + off (max_batch + 1) + lens */
    int *lo, *hi, *off, *tl;
};

conformer_opts_t conformer_default_opts(void)
{
    conformer_opts_t o;
    memset(&o, 0, sizeof o);
    o.chunk_size = -1;
    o.left_chunks = -1;
    return o;
}

/* ---- geometry ------------------------------------------------------------------------------ */

static int conv_out(int n, int k, int s)
{
    return n < k ? 0 : (n - k) / s + 1;
}

static int setup_convs(const wenet_config_t *cfg, conv_t *conv)
{
    switch (cfg->subsample) {
    case SUBSAMPLE_CONV2D:
        conv[0] = (conv_t){NULL, NULL, 3, 2, 1, cfg->d_model};
        conv[1] = (conv_t){NULL, NULL, 3, 2, cfg->d_model, cfg->d_model};
        return 2;
    case SUBSAMPLE_CONV2D6:
        conv[0] = (conv_t){NULL, NULL, 3, 2, 1, cfg->d_model};
        conv[1] = (conv_t){NULL, NULL, 5, 3, cfg->d_model, cfg->d_model};
        return 2;
    case SUBSAMPLE_CONV2D8:
        for (int i = 0; i < 3; i++)
            conv[i] = (conv_t){NULL, NULL, 3, 2, i ? cfg->d_model : 1, cfg->d_model};
        return 3;
    }
    return 0;
}

int conformer_out_len(const conformer_model_t *m, int frames)
{
    for (int i = 0; i < m->n_conv; i++)
        frames = conv_out(frames, m->conv[i].k, m->conv[i].stride);
    return frames;
}

const wenet_config_t *conformer_config(const conformer_model_t *m)
{
    return &m->cfg;
}

/* ---- model --------------------------------------------------------------------------------- */

typedef struct {
    conformer_tensor_fn get;
    void *user;
    hark_err_t *err;
} loader_t;

/* Fetches tensor printf(fmt, ...) of the given shape (up to 4 dims, ndim given). */
static int want(loader_t *L, const float **dst, int ndim, int64_t d0, int64_t d1, int64_t d2,
                int64_t d3, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static int want(loader_t *L, const float **dst, int ndim, int64_t d0, int64_t d1, int64_t d2,
                int64_t d3, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[4] = {d0, d1, d2, d3};
    return L->get(L->user, name, ndim, shape, dst, L->err);
}

#define W1(dst, a, ...) want(L, dst, 1, a, 0, 0, 0, __VA_ARGS__)
#define W2(dst, a, b, ...) want(L, dst, 2, a, b, 0, 0, __VA_ARGS__)
#define W3(dst, a, b, c, ...) want(L, dst, 3, a, b, c, 0, __VA_ARGS__)
#define W4(dst, a, b, c, e, ...) want(L, dst, 4, a, b, c, e, __VA_ARGS__)
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != HARK_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

static int load_lin(loader_t *L, lin_t *l, int out, int in, const char *prefix)
{
    TRY(W2(&l->w, out, in, "%s.weight", prefix));
    TRY(W1(&l->b, out, "%s.bias", prefix));
    return HARK_OK;
}

static int load_norm(loader_t *L, norm_t *n, int d, const char *prefix)
{
    TRY(W1(&n->g, d, "%s.weight", prefix));
    TRY(W1(&n->b, d, "%s.bias", prefix));
    return HARK_OK;
}

static int load_block(loader_t *L, const conformer_model_t *m, block_t *bk, int i)
{
    const wenet_config_t *c = &m->cfg;
    int d = m->d, f = m->ffn;
    char p[160], q[200];
    snprintf(p, sizeof p, "encoder.encoders.%d", i);
#define SUB(name) (snprintf(q, sizeof q, "%s.%s", p, name), q)
    if (c->macaron) {
        TRY(load_norm(L, &bk->norm_ff_macaron, d, SUB("norm_ff_macaron")));
        TRY(load_lin(L, &bk->ffm1, f, d, SUB("feed_forward_macaron.w_1")));
        TRY(load_lin(L, &bk->ffm2, d, f, SUB("feed_forward_macaron.w_2")));
    }
    TRY(load_norm(L, &bk->norm_mha, d, SUB("norm_mha")));
    TRY(load_lin(L, &bk->q, d, d, SUB("self_attn.linear_q")));
    TRY(load_lin(L, &bk->k, d, d, SUB("self_attn.linear_k")));
    TRY(load_lin(L, &bk->v, d, d, SUB("self_attn.linear_v")));
    TRY(load_lin(L, &bk->o, d, d, SUB("self_attn.linear_out")));
    if (c->pos == POS_REL) {
        TRY(W2(&bk->pos_w, d, d, "%s.self_attn.linear_pos.weight", p));
        TRY(W2(&bk->pos_bias_u, m->h, m->dk, "%s.self_attn.pos_bias_u", p));
        TRY(W2(&bk->pos_bias_v, m->h, m->dk, "%s.self_attn.pos_bias_v", p));
    }
    if (c->use_cnn_module) {
        TRY(load_norm(L, &bk->norm_conv, d, SUB("norm_conv")));
        TRY(load_norm(L, &bk->norm_final, d, SUB("norm_final")));
        TRY(W3(&bk->pw1.w, 2 * d, d, 1, "%s.conv_module.pointwise_conv1.weight", p));
        TRY(W1(&bk->pw1.b, 2 * d, "%s.conv_module.pointwise_conv1.bias", p));
        TRY(W3(&bk->dw_w, d, 1, m->kernel, "%s.conv_module.depthwise_conv.weight", p));
        TRY(W1(&bk->dw_b, d, "%s.conv_module.depthwise_conv.bias", p));
        TRY(load_norm(L, &bk->cnn_norm, d, SUB("conv_module.norm")));
        if (c->cnn_norm == CNN_NORM_BATCH) {
            TRY(W1(&bk->bn_mean, d, "%s.conv_module.norm.running_mean", p));
            TRY(W1(&bk->bn_var, d, "%s.conv_module.norm.running_var", p));
        }
        TRY(W3(&bk->pw2.w, d, d, 1, "%s.conv_module.pointwise_conv2.weight", p));
        TRY(W1(&bk->pw2.b, d, "%s.conv_module.pointwise_conv2.bias", p));
    }
    TRY(load_norm(L, &bk->norm_ff, d, SUB("norm_ff")));
    TRY(load_lin(L, &bk->ff1, f, d, SUB("feed_forward.w_1")));
    TRY(load_lin(L, &bk->ff2, d, f, SUB("feed_forward.w_2")));
#undef SUB
    return HARK_OK;
}

static int check_config(const wenet_config_t *c, hark_err_t *err)
{
    if (c->d_model <= 0 || c->n_heads <= 0 || c->d_model % c->n_heads != 0 || c->d_model % 2)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer: d_model %d must be even and divisible by n_heads %d", c->d_model,
                       c->n_heads);
    if (c->input_dim <= 0 || c->ffn_dim <= 0 || c->n_blocks < 0 || c->max_len <= 0 ||
        c->vocab_size <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer: bad sizes (input_dim %d, ffn_dim %d, n_blocks %d, max_len %d, "
                       "vocab %d)",
                       c->input_dim, c->ffn_dim, c->n_blocks, c->max_len, c->vocab_size);
    if (c->subsample != SUBSAMPLE_CONV2D && c->subsample != SUBSAMPLE_CONV2D6 &&
        c->subsample != SUBSAMPLE_CONV2D8)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer: subsampling %d is not supported",
                       (int)c->subsample);
    if (c->pos != POS_REL && c->pos != POS_ABS)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer: positional encoding %d", (int)c->pos);
    if (c->activation != ACT_SWISH && c->activation != ACT_RELU && c->activation != ACT_GELU)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer: activation %d", (int)c->activation);
    if (c->use_cnn_module) {
        if (c->cnn_kernel <= 0 || (!c->causal && c->cnn_kernel % 2 == 0))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "conformer: cnn_module_kernel %d must be positive (and odd unless "
                           "causal)",
                           c->cnn_kernel);
        if (c->cnn_norm != CNN_NORM_BATCH && c->cnn_norm != CNN_NORM_LAYER)
            return err_set(err, HARK_ERR_UNSUPPORTED, "conformer: cnn_module_norm %d",
                           (int)c->cnn_norm);
    }
    return HARK_OK;
}

int conformer_model_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                           conformer_model_t **out, hark_err_t *err)
{
    *out = NULL;
    int rc = check_config(cfg, err);
    if (rc != HARK_OK)
        return rc;
    conformer_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "conformer: out of memory");
    m->cfg = *cfg;
    m->d = cfg->d_model;
    m->h = cfg->n_heads;
    m->dk = m->d / m->h;
    m->ffn = cfg->ffn_dim;
    m->kernel = cfg->use_cnn_module ? cfg->cnn_kernel : 0;
    m->vocab = cfg->vocab_size;
    m->in_dim = cfg->input_dim;
    m->xscale = (float)sqrt((double)m->d);
    m->n_conv = setup_convs(cfg, m->conv);
    m->blocks = hark_calloc(cfg->n_blocks > 0 ? (size_t)cfg->n_blocks : 1, sizeof *m->blocks);
    int left = cfg->use_cnn_module && cfg->causal ? m->kernel - 1 : 0;
    size_t owned = (size_t)cfg->max_len * m->d + (size_t)cfg->n_blocks * left * m->d;
    m->owned = hark_malloc(owned * sizeof(float));
    if (!m->blocks || !m->owned) {
        conformer_model_destroy(m);
        return err_set(err, HARK_ERR_NOMEM, "conformer: out of memory (%zu floats)", owned);
    }
    loader_t ld = {get, user, err}, *L = &ld;
    rc = HARK_OK;
    if (cfg->has_cmvn) {
        rc = W1(&m->cmvn_mean, m->in_dim, "encoder.global_cmvn.mean");
        if (rc == HARK_OK)
            rc = W1(&m->cmvn_istd, m->in_dim, "encoder.global_cmvn.istd");
    }
    int f = m->in_dim;
    for (int i = 0; i < m->n_conv && rc == HARK_OK; i++) {
        conv_t *cv = &m->conv[i];
        rc = W4(&cv->w, cv->cout, cv->cin, cv->k, cv->k, "encoder.embed.conv.%d.weight", 2 * i);
        if (rc == HARK_OK)
            rc = W1(&cv->b, cv->cout, "encoder.embed.conv.%d.bias", 2 * i);
        f = conv_out(f, cv->k, cv->stride);
    }
    if (rc == HARK_OK && f <= 0)
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "conformer: input_dim %d is too small for the "
                     "subsampling",
                     m->in_dim);
    m->embed_in = m->conv[m->n_conv - 1].cout * f;
    if (rc == HARK_OK)
        rc = load_lin(L, &m->embed_lin, m->d, m->embed_in,
                      cfg->subsample == SUBSAMPLE_CONV2D ? "encoder.embed.out.0"
                                                         : "encoder.embed.linear");
    for (int i = 0; i < cfg->n_blocks && rc == HARK_OK; i++)
        rc = load_block(L, m, &m->blocks[i], i);
    if (rc == HARK_OK && cfg->normalize_before)
        rc = load_norm(L, &m->after_norm, m->d, "encoder.after_norm");
    if (rc == HARK_OK)
        rc = load_lin(L, &m->ctc, m->vocab, m->d, "ctc.ctc_lo");
    if (rc != HARK_OK) {
        conformer_model_destroy(m);
        return rc;
    }
    /* derived tables: the sinusoid table (WeNet keeps it as a buffer; the converter drops it) and
     * the causal conv's left context, glu(pointwise_conv1(0)) = glu(bias) (README note 7) */
    float *pe = m->owned;
    pos_enc_table_ref(pe, cfg->max_len, m->d);
    m->pe = pe;
    float *lc = pe + (size_t)cfg->max_len * m->d;
    for (int i = 0; i < cfg->n_blocks && left > 0; i++) {
        float *rows = lc + (size_t)i * left * m->d;
        glu_ref(rows, m->blocks[i].pw1.b, 1, m->d);
        for (int r = 1; r < left; r++)
            memcpy(rows + (size_t)r * m->d, rows, (size_t)m->d * sizeof(float));
        m->blocks[i].causal_left = rows;
    }
    *out = m;
    return HARK_OK;
}

int conformer_model_create_st(const wenet_config_t *cfg, const safetensors_t *st,
                              conformer_model_t **out, hark_err_t *err)
{
    return conformer_model_create(cfg, st_get_f32, (void *)st, out, err);
}

void conformer_model_destroy(conformer_model_t *m)
{
    if (!m)
        return;
    hark_free(m->blocks);
    hark_free(m->owned);
    hark_free(m);
}

/* ---- state --------------------------------------------------------------------------------- */

int conformer_state_create(const conformer_model_t *m, int max_batch, int max_frames,
                           conformer_state_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_batch <= 0 || max_frames <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer: max_batch %d, max_frames %d",
                       max_batch, max_frames);
    conformer_state_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "conformer: out of memory");
    int d = m->d;
    int t_out = conformer_out_len(m, max_frames);
    if (t_out < 1)
        t_out = 1;
    s->m = m;
    s->max_batch = max_batch;
    s->max_frames = max_frames;
    s->max_t_out = t_out;
    s->max_rows = max_batch * t_out;
    size_t rows = (size_t)s->max_rows;
    size_t wide = (size_t)(m->ffn > 2 * d ? m->ffn : 2 * d);
    size_t n_att = attention_scratch_floats(t_out, m->dk);
    size_t sz[MAX_CONVS], n_col = 0, n_conv = 0;
    int hh = max_frames, ww = m->in_dim;
    for (int i = 0; i < m->n_conv; i++) {
        const conv_t *cv = &m->conv[i];
        hh = conv_out(hh, cv->k, cv->stride);
        ww = conv_out(ww, cv->k, cv->stride);
        sz[i] = (size_t)(hh > 0 ? hh : 1) * cv->cout * ww;
        size_t c = conv2d_col_floats(cv->cin, cv->cout, cv->k, cv->k, ww);
        n_col = c > n_col ? c : n_col;
        n_conv += sz[i];
    }
    size_t total = 7 * rows * d + rows * wide + (size_t)t_out * d + n_att +
                   (size_t)max_frames * m->in_dim + n_conv + n_col;
    s->mem = hark_malloc(total * sizeof(float));
    s->ibuf = hark_malloc((2 * rows + 2 * (size_t)max_batch + 1) * sizeof(int));
    if (!s->mem || !s->ibuf) {
        conformer_state_destroy(s);
        return err_set(err, HARK_ERR_NOMEM, "conformer: out of memory for scratch (%zu MiB)",
                       total * sizeof(float) >> 20);
    }
    float *p = s->mem;
#define TAKE(dst, n) (dst = p, p += (n))
    TAKE(s->x, rows * d);
    TAKE(s->hn, rows * d);
    TAKE(s->a, rows * d);
    TAKE(s->q, rows * d);
    TAKE(s->k, rows * d);
    TAKE(s->v, rows * d);
    TAKE(s->ctx, rows * d);
    TAKE(s->big, rows * wide);
    TAKE(s->p, (size_t)t_out * d);
    TAKE(s->att, n_att);
    TAKE(s->feat, (size_t)max_frames * m->in_dim);
    for (int i = 0; i < m->n_conv; i++)
        TAKE(s->cbuf[i], sz[i]);
    TAKE(s->col, n_col);
#undef TAKE
    HARK_ASSERT((size_t)(p - s->mem) == total);
    s->lo = s->ibuf;
    s->hi = s->lo + rows;
    s->off = s->hi + rows;
    s->tl = s->off + max_batch + 1;
    *out = s;
    return HARK_OK;
}

void conformer_state_destroy(conformer_state_t *s)
{
    if (!s)
        return;
    hark_free(s->mem);
    hark_free(s->ibuf);
    hark_free(s);
}

/* ---- forward ------------------------------------------------------------------------------- */

struct conformer_stream {
    const conformer_model_t *m;
    int cache_frames; /* WeNet required_cache_size: < 0 keep all, 0 none, > 0 the last n */
    int offset;       /* encoder frames emitted so far */
    int cache_t;      /* frames in the attention cache (same for every layer) */
    int cap;          /* rows per layer in kv, p, att: cache + one chunk */
    int fixed;        /* 1: cap was reserved up front and never grows (TOO_LARGE past it) */
    float *kv;        /* (L, 2, cap, D): K then V after linear_k/v, head h in columns h·dk */
    float *p;         /* (cap, D) projected positions of the keys */
    float *att;       /* attention_scratch_floats(cap, dk) */
    float *cnn;       /* (L, K-1, D) last pre-pointwise conv-module inputs; causal only */
    float *left;      /* (K-1, D) glu(pointwise_conv1(cnn cache)) of the current layer */
    float *left_g;    /* (K-1, 2D) */
};

typedef struct {
    conformer_state_t *s;
    const conformer_opts_t *o;
    int batch;
    conformer_stream_t *const *sts; /* streaming: (batch) the stream of each chunk; else NULL */
} fwd_t;

/* Hands each utterance's rows of a packed (N, cols) buffer to the debug hook. */
static void emit(const fwd_t *F, const char *name, int layer, const float *packed, int cols)
{
    if (!F->o->debug)
        return;
    char full[96];
    if (layer >= 0) {
        snprintf(full, sizeof full, "layer%d_%s", layer, name);
        name = full;
    }
    for (int b = 0; b < F->batch; b++) {
        conformer_stage_t st = {name,        layer, b,
                                F->s->tl[b], cols,  packed + (size_t)F->s->off[b] * cols};
        F->o->debug(F->o->debug_user, &st);
    }
}

static ops_act_t act_of(const wenet_config_t *c)
{
    return c->activation == ACT_RELU   ? OPS_ACT_RELU
           : c->activation == ACT_GELU ? OPS_ACT_GELU
                                       : OPS_ACT_SWISH;
}

/* Subsampling of utterance b into x rows [off[b], off[b] + tl[b]). */
static void subsample_one(const fwd_t *F, int b, const float *feats, int frames)
{
    conformer_state_t *s = F->s;
    const conformer_model_t *m = s->m;
    int fd = m->in_dim, t_out = s->tl[b];
    float *x = s->x + (size_t)s->off[b] * m->d;
    if (t_out <= 0)
        return;
    memcpy(s->feat, feats, (size_t)frames * fd * sizeof(float));
    if (m->cmvn_mean && !F->o->skip_cmvn)
        for (int t = 0; t < frames; t++)
            for (int i = 0; i < fd; i++)
                s->feat[(size_t)t * fd + i] =
                    (s->feat[(size_t)t * fd + i] - m->cmvn_mean[i]) * m->cmvn_istd[i];
    const float *in = s->feat;
    int hh = frames, ww = fd;
    for (int i = 0; i < m->n_conv; i++) {
        const conv_t *cv = &m->conv[i];
        conv2d_ref(s->cbuf[i], s->col, in, cv->w, cv->b, cv->cin, hh, ww, cv->cout, cv->k, cv->k,
                   cv->stride);
        hh = conv_out(hh, cv->k, cv->stride);
        ww = conv_out(ww, cv->k, cv->stride);
        relu_ref(s->cbuf[i], s->cbuf[i], (size_t)hh * cv->cout * ww);
        in = s->cbuf[i];
    }
    HARK_ASSERT(hh == t_out && m->conv[m->n_conv - 1].cout * ww == m->embed_in);
    if (F->o->debug) {
        conformer_stage_t st = {"embed_conv_out", -1, b, t_out, m->embed_in, in};
        F->o->debug(F->o->debug_user, &st);
    }
    linear_ref(x, in, m->embed_lin.w, m->embed_lin.b, t_out, m->embed_in, m->d);
    for (size_t i = 0; i < (size_t)t_out * m->d; i++)
        x[i] *= m->xscale;
    if (m->cfg.pos == POS_ABS) /* pe[offset : offset + t_out] */
        axpy_ref(x, m->pe + (size_t)(F->sts ? F->sts[b]->offset : 0) * m->d, 1.0f,
                 (size_t)t_out * m->d);
}

/* Pre-norm: returns the normalised copy in hn (and reports it); post-norm: returns x itself. */
static const float *pre_norm(const fwd_t *F, const norm_t *n, int layer, const char *name, int rows)
{
    conformer_state_t *s = F->s;
    if (!s->m->cfg.normalize_before)
        return s->x;
    layer_norm_ref(s->hn, s->x, n->g, n->b, rows, s->m->d, NORM_EPS);
    emit(F, name, layer, s->hn, s->m->d);
    return s->hn;
}

/* x += scale · a, then the post-norm when normalize_before is false. */
static void residual(const fwd_t *F, const float *a, float scale, const norm_t *n, int layer,
                     const char *name, int rows)
{
    conformer_state_t *s = F->s;
    axpy_ref(s->x, a, scale, (size_t)rows * s->m->d);
    if (!s->m->cfg.normalize_before) {
        layer_norm_ref(s->x, s->x, n->g, n->b, rows, s->m->d, NORM_EPS);
        emit(F, name, layer, s->x, s->m->d);
    }
}

/* linear_ref over a packed (N, in) buffer, one GEMM per utterance on its own rows: OpenBLAS's sgemm
 * rounds a row differently with the GEMM's row count and the row's place in it (its Haswell / Zen
 * kernels for almost every count), so one GEMM over all N rows would make an utterance's result
 * depend on what it was batched with. Per utterance it is the same in any batch. */
static void packed_linear(const fwd_t *F, float *y, const float *x, const lin_t *l, int in, int out)
{
    const conformer_state_t *s = F->s;
    for (int b = 0; b < F->batch; b++)
        if (s->tl[b] > 0)
            linear_ref(y + (size_t)s->off[b] * out, x + (size_t)s->off[b] * in, l->w, l->b,
                       s->tl[b], in, out);
}

/* a (rows, D) = w2(act(w1(h))) */
static void ffn(const fwd_t *F, float *a, const float *h, const lin_t *l1, const lin_t *l2,
                int rows)
{
    conformer_state_t *s = F->s;
    const conformer_model_t *m = s->m;
    packed_linear(F, s->big, h, l1, m->d, m->ffn);
    activation_ref(s->big, s->big, (size_t)rows * m->ffn, act_of(&m->cfg));
    packed_linear(F, a, s->big, l2, m->ffn, m->d);
}

/* Streaming attention of chunk b (its tl[b] rows of the packed q/k/v, at off[b]) over its
 * stream's cached keys + the chunk's own, no mask (WeNet forward_chunk); then the cache keeps its
 * last cache_frames keys. */
static void mhsa_chunk(const fwd_t *F, const block_t *bk, int layer, int b)
{
    conformer_state_t *s = F->s;
    conformer_stream_t *st = F->sts[b];
    const conformer_model_t *m = s->m;
    int d = m->d, rel = m->cfg.pos == POS_REL, ct = st->cache_t, rows = s->tl[b], tk = ct + rows;
    size_t r0 = (size_t)s->off[b] * d;
    float *kc = st->kv + (size_t)layer * 2 * st->cap * d, *vc = kc + (size_t)st->cap * d;
    memcpy(kc + (size_t)ct * d, s->k + r0, (size_t)rows * d * sizeof(float));
    memcpy(vc + (size_t)ct * d, s->v + r0, (size_t)rows * d * sizeof(float));
    if (rel) /* keys sit at absolute positions offset - ct ... offset + rows - 1 */
        linear_ref(st->p, m->pe + (size_t)(st->offset - ct) * d, bk->pos_w, NULL, tk, d, d);
    attention_ref(s->ctx + r0, st->att, s->q + r0, kc, vc, rel ? st->p : NULL,
                  rel ? bk->pos_bias_u : NULL, rel ? bk->pos_bias_v : NULL, NULL, NULL, rows, tk,
                  m->h, m->dk, 1.0f / sqrtf((float)m->dk));
    int keep = st->cache_frames < 0 ? tk : st->cache_frames < tk ? st->cache_frames : tk;
    memmove(kc, kc + (size_t)(tk - keep) * d, (size_t)keep * d * sizeof(float));
    memmove(vc, vc + (size_t)(tk - keep) * d, (size_t)keep * d * sizeof(float));
}

/* a (rows, D) = MHSA(h), per utterance over its own frames with the lo/hi key ranges. */
static void mhsa(const fwd_t *F, float *a, const float *h, const block_t *bk, int layer, int rows)
{
    conformer_state_t *s = F->s;
    const conformer_model_t *m = s->m;
    int d = m->d, rel = m->cfg.pos == POS_REL;
    packed_linear(F, s->q, h, &bk->q, d, d);
    packed_linear(F, s->k, h, &bk->k, d, d);
    packed_linear(F, s->v, h, &bk->v, d, d);
    if (F->sts) {
        for (int b = 0; b < F->batch; b++)
            if (s->tl[b] > 0)
                mhsa_chunk(F, bk, layer, b);
        packed_linear(F, a, s->ctx, &bk->o, d, d);
        return;
    }
    float scale = 1.0f / sqrtf((float)m->dk);
    for (int b = 0; b < F->batch; b++) {
        size_t r0 = (size_t)s->off[b] * d;
        if (s->tl[b] <= 0)
            continue;
        /* p = linear_pos(pe[0:tl]): the key's absolute position (offset 0); per utterance, not
         * once for the batch's longest, for packed_linear's reason */
        if (rel)
            linear_ref(s->p, m->pe, bk->pos_w, NULL, s->tl[b], d, d);
        attention_ref(s->ctx + r0, s->att, s->q + r0, s->k + r0, s->v + r0, rel ? s->p : NULL,
                      rel ? bk->pos_bias_u : NULL, rel ? bk->pos_bias_v : NULL, s->lo + s->off[b],
                      s->hi + s->off[b], s->tl[b], s->tl[b], m->h, m->dk, scale);
    }
    packed_linear(F, a, s->ctx, &bk->o, d, d);
}

/* a (rows, D) = conv module(h): pw1 → GLU → depthwise (per utterance) → norm → act → pw2. */
static void conv_module(const fwd_t *F, float *a, const float *h, const block_t *bk, int layer,
                        int rows)
{
    conformer_state_t *s = F->s;
    const conformer_model_t *m = s->m;
    int d = m->d, kk = m->kernel, causal = m->cfg.causal;
    float *g = s->big, *u = s->q, *dw = s->k;
    packed_linear(F, g, h, &bk->pw1, d, 2 * d);
    glu_ref(u, g, rows, d);
    int streamed = F->sts && causal && kk > 1;
    for (int b = 0; b < F->batch; b++) {
        size_t r0 = (size_t)s->off[b] * d;
        int n = s->tl[b];
        if (streamed && n > 0) {
            /* left context: the stream's cached pre-pointwise frames through pointwise_conv1 +
             * GLU (zeros at the start give glu(bias), like the full-context path); then the cache
             * takes the last K-1 frames of [cache | h] (WeNet's cnn_cache) */
            conformer_stream_t *st = F->sts[b];
            int lc = kk - 1;
            float *cache = st->cnn + (size_t)layer * lc * d;
            const float *hb = h + r0;
            linear_ref(st->left_g, cache, bk->pw1.w, bk->pw1.b, lc, d, 2 * d);
            glu_ref(st->left, st->left_g, lc, d);
            depthwise_conv1d_ref(dw + r0, u + r0, st->left, bk->dw_w, bk->dw_b, n, d, kk, lc, n);
            if (n >= lc) {
                memcpy(cache, hb + (size_t)(n - lc) * d, (size_t)lc * d * sizeof(float));
            } else {
                memmove(cache, cache + (size_t)n * d, (size_t)(lc - n) * d * sizeof(float));
                memcpy(cache + (size_t)(lc - n) * d, hb, (size_t)n * d * sizeof(float));
            }
            continue;
        }
        /* causal: K-1 left frames of glu(bias) (WeNet pads before pointwise_conv1); symmetric:
         * zeros on both sides (within each chunk when streaming, as WeNet). Frames past the
         * utterance's end read as zeros either way. */
        depthwise_conv1d_ref(dw + r0, u + r0, causal ? bk->causal_left : NULL, bk->dw_w, bk->dw_b,
                             n, d, kk, causal ? kk - 1 : (kk - 1) / 2, n);
    }
    if (m->cfg.cnn_norm == CNN_NORM_BATCH)
        batch_norm_ref(dw, dw, bk->cnn_norm.g, bk->cnn_norm.b, bk->bn_mean, bk->bn_var, rows, d,
                       NORM_EPS);
    else
        layer_norm_ref(dw, dw, bk->cnn_norm.g, bk->cnn_norm.b, rows, d, NORM_EPS);
    activation_ref(dw, dw, (size_t)rows * d, act_of(&m->cfg));
    packed_linear(F, a, dw, &bk->pw2, d, d);
}

static void block_forward(const fwd_t *F, const block_t *bk, int layer, int rows)
{
    conformer_state_t *s = F->s;
    const wenet_config_t *c = &s->m->cfg;
    int d = s->m->d;
    float ff_scale = c->macaron ? 0.5f : 1.0f;
    const float *h;
    if (c->macaron) {
        h = pre_norm(F, &bk->norm_ff_macaron, layer, "norm_ff_macaron_out", rows);
        ffn(F, s->a, h, &bk->ffm1, &bk->ffm2, rows);
        emit(F, "feed_forward_macaron_out", layer, s->a, d);
        residual(F, s->a, ff_scale, &bk->norm_ff_macaron, layer, "norm_ff_macaron_out", rows);
    }
    h = pre_norm(F, &bk->norm_mha, layer, "norm_mha_out", rows);
    mhsa(F, s->a, h, bk, layer, rows);
    emit(F, "self_attn_out", layer, s->a, d);
    residual(F, s->a, 1.0f, &bk->norm_mha, layer, "norm_mha_out", rows);
    if (c->use_cnn_module) {
        h = pre_norm(F, &bk->norm_conv, layer, "norm_conv_out", rows);
        conv_module(F, s->a, h, bk, layer, rows);
        emit(F, "conv_module_out", layer, s->a, d);
        residual(F, s->a, 1.0f, &bk->norm_conv, layer, "norm_conv_out", rows);
    }
    h = pre_norm(F, &bk->norm_ff, layer, "norm_ff_out", rows);
    ffn(F, s->a, h, &bk->ff1, &bk->ff2, rows);
    emit(F, "feed_forward_out", layer, s->a, d);
    residual(F, s->a, ff_scale, &bk->norm_ff, layer, "norm_ff_out", rows);
    if (c->use_cnn_module) {
        layer_norm_ref(s->x, s->x, bk->norm_final.g, bk->norm_final.b, rows, d, NORM_EPS);
        emit(F, "norm_final_out", layer, s->x, d);
    }
    emit(F, "out", layer, s->x, d);
}

/* Key range [lo, hi) of each encoder row: the padding mask and-ed with WeNet's chunk mask.
 * As WeNet's add_optional_chunk_mask: a dynamic-chunk model takes the requested chunk size, a
 * static-chunk model always uses its own, any other model always decodes with full context. */
static void build_masks(conformer_state_t *s, const conformer_opts_t *o, int batch)
{
    const wenet_config_t *c = &s->m->cfg;
    int cs = c->use_dynamic_chunk       ? o->chunk_size
             : c->static_chunk_size > 0 ? c->static_chunk_size
                                        : -1;
    int left = o->left_chunks;
    for (int b = 0; b < batch; b++) {
        int n = s->tl[b], *lo = s->lo + s->off[b], *hi = s->hi + s->off[b];
        for (int i = 0; i < n; i++) {
            if (cs <= 0) {
                lo[i] = 0, hi[i] = n;
                continue;
            }
            int ci = i / cs;
            lo[i] = left < 0 ? 0 : ((ci - left) * cs > 0 ? (ci - left) * cs : 0);
            hi[i] = (ci + 1) * cs < n ? (ci + 1) * cs : n;
        }
    }
}

int conformer_forward(conformer_state_t *s, const conformer_opts_t *opts, float *enc, int *enc_lens,
                      const float *feats, const int *lens, int batch, int t_max, hark_err_t *err)
{
    const conformer_model_t *m = s->m;
    conformer_opts_t dflt = conformer_default_opts();
    const conformer_opts_t *o = opts ? opts : &dflt;
    if (batch <= 0 || t_max <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer: batch %d, t_max %d", batch, t_max);
    if (batch > s->max_batch || t_max > s->max_frames)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "conformer: batch %d x %d frames exceeds the state's %d x %d", batch, t_max,
                       s->max_batch, s->max_frames);
    int t_out = conformer_out_len(m, t_max);
    if (t_out > m->cfg.max_len)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "conformer: %d input frames give %d encoder frames, more than the "
                       "positional table's %d",
                       t_max, t_out, m->cfg.max_len);
    s->off[0] = 0;
    for (int b = 0; b < batch; b++) {
        if (lens[b] < 0 || lens[b] > t_max)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "conformer: utterance %d has %d frames "
                           "(padded length %d)",
                           b, lens[b], t_max);
        s->tl[b] = conformer_out_len(m, lens[b]);
        s->off[b + 1] = s->off[b] + s->tl[b];
    }
    int rows = s->off[batch];
    ops_set_threads(o->n_threads);
    fwd_t F = {s, o, batch, NULL};
    for (int b = 0; b < batch; b++)
        subsample_one(&F, b, feats + (size_t)b * t_max * m->in_dim, lens[b]);
    emit(&F, "embed_out", -1, s->x, m->d);
    build_masks(s, o, batch);
    for (int i = 0; i < m->cfg.n_blocks; i++)
        block_forward(&F, &m->blocks[i], i, rows);
    if (m->cfg.normalize_before)
        layer_norm_ref(s->x, s->x, m->after_norm.g, m->after_norm.b, rows, m->d, NORM_EPS);
    emit(&F, "enc_out", -1, s->x, m->d);
    for (int b = 0; b < batch; b++) {
        float *dst = enc + (size_t)b * t_out * m->d;
        size_t n = (size_t)s->tl[b] * m->d;
        memcpy(dst, s->x + (size_t)s->off[b] * m->d, n * sizeof(float));
        memset(dst + n, 0, ((size_t)t_out * m->d - n) * sizeof(float));
        enc_lens[b] = s->tl[b];
    }
    return HARK_OK;
}

int conformer_ctc_log_probs(const conformer_model_t *m, const conformer_opts_t *opts, float *logp,
                            const float *enc, const int *enc_lens, int batch, int t_enc,
                            hark_err_t *err)
{
    if (batch <= 0 || t_enc < 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer ctc: batch %d, t_enc %d", batch,
                       t_enc);
    if (opts)
        ops_set_threads(opts->n_threads);
    int v = m->vocab;
    for (int b = 0; b < batch; b++) {
        int n = enc_lens[b];
        if (n < 0 || n > t_enc)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "conformer ctc: utterance %d has %d frames (padded %d)", b, n, t_enc);
        float *out = logp + (size_t)b * t_enc * v;
        linear_ref(out, enc + (size_t)b * t_enc * m->d, m->ctc.w, m->ctc.b, n, m->d, v);
        log_softmax_ref(out, out, n, v);
        memset(out + (size_t)n * v, 0, (size_t)(t_enc - n) * v * sizeof(float));
        if (opts && opts->debug) {
            conformer_stage_t st = {"ctc_logprobs", -1, b, n, v, out};
            opts->debug(opts->debug_user, &st);
        }
    }
    return HARK_OK;
}

/* ---- streaming ----------------------------------------------------------------------------- */

int conformer_stream_create(const conformer_model_t *m, int cache_frames, conformer_stream_t **out,
                            hark_err_t *err)
{
    *out = NULL;
    conformer_stream_t *st = hark_calloc(1, sizeof *st);
    if (!st)
        return err_set(err, HARK_ERR_NOMEM, "conformer stream: out of memory");
    st->m = m;
    st->cache_frames = cache_frames;
    int lc = m->cfg.use_cnn_module && m->cfg.causal && m->kernel > 1 ? m->kernel - 1 : 0;
    if (lc > 0) {
        st->cnn = hark_calloc((size_t)m->cfg.n_blocks * lc * m->d, sizeof(float));
        st->left = hark_malloc((size_t)lc * m->d * sizeof(float));
        st->left_g = hark_malloc((size_t)lc * 2 * m->d * sizeof(float));
        if ((m->cfg.n_blocks > 0 && !st->cnn) || !st->left || !st->left_g) {
            conformer_stream_destroy(st);
            return err_set(err, HARK_ERR_NOMEM, "conformer stream: out of memory");
        }
    }
    *out = st;
    return HARK_OK;
}

void conformer_stream_destroy(conformer_stream_t *st)
{
    if (!st)
        return;
    hark_free(st->kv);
    hark_free(st->p);
    hark_free(st->att);
    hark_free(st->cnn);
    hark_free(st->left);
    hark_free(st->left_g);
    hark_free(st);
}

void conformer_stream_reset(conformer_stream_t *st)
{
    const conformer_model_t *m = st->m;
    st->offset = 0;
    st->cache_t = 0;
    if (st->cnn)
        memset(st->cnn, 0, (size_t)m->cfg.n_blocks * (m->kernel - 1) * m->d * sizeof(float));
}

int conformer_stream_offset(const conformer_stream_t *st)
{
    return st->offset;
}

int conformer_stream_cache(const conformer_stream_t *st, int layer, const float **k,
                           const float **v, const float **cnn)
{
    const conformer_model_t *m = st->m;
    HARK_ASSERT(layer >= 0 && layer < m->cfg.n_blocks);
    *k = st->kv ? st->kv + (size_t)layer * 2 * st->cap * m->d : NULL;
    *v = st->kv ? *k + (size_t)st->cap * m->d : NULL;
    *cnn = st->cnn ? st->cnn + (size_t)layer * (m->kernel - 1) * m->d : NULL;
    return st->cache_t;
}

/* Room for `need` keys per layer; keeps the cached rows. */
static int stream_reserve(conformer_stream_t *st, int need)
{
    if (need <= st->cap)
        return HARK_OK;
    if (st->fixed)
        return HARK_ERR_TOO_LARGE;
    const conformer_model_t *m = st->m;
    int cap = st->cap * 2 > need ? st->cap * 2 : need;
    size_t d = (size_t)m->d, layers = (size_t)(m->cfg.n_blocks > 0 ? m->cfg.n_blocks : 1);
    float *kv = hark_malloc(layers * 2 * (size_t)cap * d * sizeof(float));
    float *p = hark_malloc((size_t)cap * d * sizeof(float));
    float *att = hark_malloc(attention_scratch_floats(cap, m->dk) * sizeof(float));
    if (!kv || !p || !att) {
        hark_free(kv), hark_free(p), hark_free(att);
        return HARK_ERR_NOMEM;
    }
    for (size_t i = 0; st->kv && i < layers * 2; i++)
        memcpy(kv + i * cap * d, st->kv + i * st->cap * d, (size_t)st->cache_t * d * sizeof(float));
    hark_free(st->kv), hark_free(st->p), hark_free(st->att);
    st->kv = kv, st->p = p, st->att = att, st->cap = cap;
    return HARK_OK;
}

int conformer_stream_reserve(conformer_stream_t *st, int frames, hark_err_t *err)
{
    if (frames < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer stream: reserve %d frames", frames);
    st->fixed = 0;
    if (stream_reserve(st, frames) != HARK_OK)
        return err_set(err, HARK_ERR_NOMEM, "conformer stream: out of memory for %d cached frames",
                       frames);
    st->fixed = 1;
    return HARK_OK;
}

void conformer_stream_set_cache(conformer_stream_t *st, int cache_frames)
{
    conformer_stream_reset(st);
    st->cache_frames = cache_frames;
}

int conformer_forward_chunks(conformer_state_t *s, conformer_stream_t *const *sts,
                             const conformer_opts_t *opts, float *enc, int *n_out,
                             const float *const *feats, const int *frames, int n, hark_err_t *err)
{
    const conformer_model_t *m = s->m;
    conformer_opts_t dflt = conformer_default_opts();
    const conformer_opts_t *o = opts ? opts : &dflt;
    if (n < 1 || n > s->max_batch)
        return err_set(err, n < 1 ? HARK_ERR_INVALID_ARG : HARK_ERR_TOO_LARGE,
                       "conformer chunks: %d streams (the state takes 1 .. %d)", n, s->max_batch);
    s->off[0] = 0;
    for (int b = 0; b < n; b++) {
        conformer_stream_t *st = sts[b];
        HARK_ASSERT(st->m == m);
        for (int c = 0; c < b; c++)
            HARK_ASSERT(sts[c] != st); /* one chunk per stream and step */
        n_out[b] = 0;
        if (frames[b] < 0 || frames[b] > s->max_frames)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "conformer chunk %d: %d frames (the state takes at most %d)", b,
                           frames[b], s->max_frames);
        int rows = conformer_out_len(m, frames[b]);
        if (rows > 0 && st->offset + rows > m->cfg.max_len)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "conformer chunk %d: stream reached %d encoder frames, past the "
                           "positional table's %d",
                           b, st->offset + rows, m->cfg.max_len);
        int rc = rows > 0 ? stream_reserve(st, st->cache_t + rows) : HARK_OK;
        if (rc == HARK_ERR_TOO_LARGE)
            return err_set(err, rc,
                           "conformer chunk %d: %d cached + %d new frames exceed the stream's "
                           "reserved %d",
                           b, st->cache_t, rows, st->cap);
        if (rc)
            return err_set(err, rc, "conformer chunk %d: out of memory for %d cached frames", b,
                           st->cache_t + rows);
        s->tl[b] = rows;
        s->off[b + 1] = s->off[b] + rows;
    }
    int total = s->off[n];
    if (total <= 0)
        return HARK_OK;
    ops_set_threads(o->n_threads);
    fwd_t F = {s, o, n, sts};
    for (int b = 0; b < n; b++)
        subsample_one(&F, b, feats[b], frames[b]);
    emit(&F, "embed_out", -1, s->x, m->d);
    for (int i = 0; i < m->cfg.n_blocks; i++)
        block_forward(&F, &m->blocks[i], i, total);
    if (m->cfg.normalize_before)
        layer_norm_ref(s->x, s->x, m->after_norm.g, m->after_norm.b, total, m->d, NORM_EPS);
    emit(&F, "enc_out", -1, s->x, m->d);
    memcpy(enc, s->x, (size_t)total * m->d * sizeof(float));
    for (int b = 0; b < n; b++) {
        conformer_stream_t *st = sts[b];
        int rows = s->tl[b], tk = st->cache_t + rows;
        if (rows <= 0)
            continue;
        st->cache_t = st->cache_frames < 0 ? tk : st->cache_frames < tk ? st->cache_frames : tk;
        st->offset += rows;
        n_out[b] = rows;
    }
    return HARK_OK;
}

int conformer_forward_chunk(conformer_state_t *s, conformer_stream_t *st,
                            const conformer_opts_t *opts, float *enc, int *n_out,
                            const float *feats, int frames, hark_err_t *err)
{
    return conformer_forward_chunks(s, &st, opts, enc, n_out, &feats, &frames, 1, err);
}
