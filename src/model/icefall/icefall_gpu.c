/* icefall_gpu.c — see icefall_gpu.h. One forward for every element type: the helpers below pick
 * the float32 ops (cuBLAS in true FP32, the float kernels) or the 16-bit ones (cuda_hgemm with its
 * epilogues: DoubleSwish, the GLU, the residual update that also writes the 16-bit copy of the
 * stream) by the model's dt. */
#include "model/icefall/icefall_gpu.h"

#include "core/alloc.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "model/icefall/icefall_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SUB_CH0 8 /* encoder_embed's conv channels */
#define SUB_CH1 32
#define SUB_CH2 128

#ifdef HARK_CUDA
#include "gpu/gpu_arch.h"
#include "gpu/weight_stage.h"
#include "hark.h"

#include <cuda_runtime_api.h>

/* views into the device blocks; while staging, offsets (floats into the block) */
typedef struct {
    const void *ffm_w1, *ffm_w2, *in_w, *out_w, *pos_w, *pw1_w, *pw2_w, *ff_w1, *ff_w2;
    const void *ffm_b1h, *ff_b1h, *in_bh, *pw1_bh; /* 16-bit biases (cuBLASLt's) */
    const float *ffm_b1, *ffm_b2, *in_b, *out_b, *bu, *bv, *pw1_b, *dw_w, *dw_b, *pw2_b, *ff_b1,
        *ff_b2;
    float eps;
} glayer_t;

struct icefall_gpu_model {
    const icefall_model_t *m;
    int device;
    ops_dtype_t dt;
    void *dmat, *dflt;
    size_t bytes;
    const void *conv1_w, *conv2_w, *embed_w;
    /* the joiner and decoder stay float32 in every type (a small part of the work, and greedy
     * search's argmax is where rounding would show) */
    const float *conv0_w, *conv0_b, *conv1_b, *conv2_b, *embed_b, *enc_proj_w, *enc_proj_b,
        *dec_proj_w, *dec_proj_b, *out_w, *out_b, *dec_emb, *dec_conv;
    glayer_t *layers;
};

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "icefall (gpu): %s: %s", what, cudaGetErrorString(e));
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    icefall_gpu_model_t *g;
    int glu; /* pointwise_conv1's (value, gate) rows interleaved for CUDA_EPI_GLU16 */
} fill_t;

/* offsets are kept in the pointer fields until the upload, then rebased */
#define OFF(x) ((const void *)(uintptr_t)(x))

static const void *put_mat(weight_stage_t *s, const float *src, size_t n)
{
    size_t at = weight_stage_take(&s->n_mat, n);
    if (!s->sizing)
        memcpy(s->mat + at, src, n * sizeof(float));
    return OFF(at);
}

static const float *put_flt(weight_stage_t *s, const float *src, size_t n)
{
    size_t at = weight_stage_take(&s->n_flt, n);
    if (!s->sizing)
        memcpy(s->flt + at, src, n * sizeof(float));
    return (const float *)OFF(at);
}

/* rows of an (2c, cols) matrix (or a 2c vector, cols 1) in the order 0, c, 1, c + 1, ... */
static size_t put_glu(weight_stage_t *s, int mat, const float *src, int c, int cols)
{
    size_t n = (size_t)2 * c * cols;
    size_t at = weight_stage_take(mat ? &s->n_mat : &s->n_flt, n);
    if (!s->sizing) {
        float *dst = (mat ? s->mat : s->flt) + at;
        for (int i = 0; i < c; i++) {
            memcpy(dst + (size_t)(2 * i) * cols, src + (size_t)i * cols, sizeof(float) * cols);
            memcpy(dst + (size_t)(2 * i + 1) * cols, src + (size_t)(c + i) * cols,
                   sizeof(float) * cols);
        }
    }
    return at;
}

static void fill(weight_stage_t *s, void *user)
{
    fill_t *f = user;
    icefall_gpu_model_t *g = f->g;
    const icefall_model_t *m = g->m;
    const icefall_config_t *c = &m->cfg;
    const size_t d = (size_t)c->d, ff = (size_t)c->ff, k = (size_t)c->kernel;
    const size_t J = (size_t)c->joiner_dim, D = (size_t)c->decoder_dim, V = (size_t)c->vocab;
    g->conv0_w = put_flt(s, m->conv0_w, SUB_CH0 * 9);
    g->conv0_b = put_flt(s, m->conv0_b, SUB_CH0);
    g->conv1_w = put_mat(s, m->conv1_w, (size_t)SUB_CH1 * SUB_CH0 * 9);
    g->conv1_b = put_flt(s, m->conv1_b, SUB_CH1);
    g->conv2_w = put_mat(s, m->conv2_w, (size_t)SUB_CH2 * SUB_CH1 * 9);
    g->conv2_b = put_flt(s, m->conv2_b, SUB_CH2);
    g->embed_w = put_mat(s, m->embed_w, d * SUB_CH2 * (size_t)m->w2);
    g->embed_b = put_flt(s, m->embed_b, d);
    for (int i = 0; i < c->n_layers; i++) {
        const icefall_layer_t *L = &m->layers[i];
        glayer_t *G = &g->layers[i];
        G->ffm_w1 = put_mat(s, L->ffm_w1, ff * d);
        G->ffm_b1h = put_mat(s, L->ffm_b1, ff);
        G->ffm_b1 = put_flt(s, L->ffm_b1, ff);
        G->ffm_w2 = put_mat(s, L->ffm_w2, d * ff);
        G->ffm_b2 = put_flt(s, L->ffm_b2, d);
        G->in_w = put_mat(s, L->in_w, 3 * d * d);
        G->in_bh = put_mat(s, L->in_b, 3 * d);
        G->in_b = put_flt(s, L->in_b, 3 * d);
        G->out_w = put_mat(s, L->out_w, d * d);
        G->out_b = put_flt(s, L->out_b, d);
        G->pos_w = put_mat(s, L->pos_w, d * d);
        G->bu = put_flt(s, L->bu, d);
        G->bv = put_flt(s, L->bv, d);
        if (f->glu) {
            G->pw1_w = OFF(put_glu(s, 1, L->pw1_w, (int)d, (int)d));
            G->pw1_bh = OFF(put_glu(s, 1, L->pw1_b, (int)d, 1));
            G->pw1_b = (const float *)OFF(put_glu(s, 0, L->pw1_b, (int)d, 1));
        } else {
            G->pw1_w = put_mat(s, L->pw1_w, 2 * d * d);
            G->pw1_bh = put_mat(s, L->pw1_b, 2 * d);
            G->pw1_b = put_flt(s, L->pw1_b, 2 * d);
        }
        G->dw_w = put_flt(s, L->dw_w, d * k);
        G->dw_b = put_flt(s, L->dw_b, d);
        G->pw2_w = put_mat(s, L->pw2_w, d * d);
        G->pw2_b = put_flt(s, L->pw2_b, d);
        G->ff_w1 = put_mat(s, L->ff_w1, ff * d);
        G->ff_b1h = put_mat(s, L->ff_b1, ff);
        G->ff_b1 = put_flt(s, L->ff_b1, ff);
        G->ff_w2 = put_mat(s, L->ff_w2, d * ff);
        G->ff_b2 = put_flt(s, L->ff_b2, d);
        G->eps = L->eps;
    }
    g->enc_proj_w = put_flt(s, m->enc_proj_w, J * d);
    g->enc_proj_b = put_flt(s, m->enc_proj_b, J);
    g->dec_proj_w = put_flt(s, m->dec_proj_w, J * D);
    g->dec_proj_b = put_flt(s, m->dec_proj_b, J);
    g->out_w = put_flt(s, m->out_w, V * J);
    g->out_b = put_flt(s, m->out_b, V);
    g->dec_emb = put_flt(s, m->dec_emb, V * D);
    g->dec_conv = put_flt(s, m->dec_conv, D * (size_t)c->dec_group_size * c->context_size);
}

static const void *rb_mat(const icefall_gpu_model_t *g, const void *off)
{
    return (const char *)g->dmat + (uintptr_t)off * ops_dtype_size(g->dt);
}

static const float *rb_flt(const icefall_gpu_model_t *g, const float *off)
{
    return (const float *)g->dflt + (uintptr_t)off;
}

static void rebase(icefall_gpu_model_t *g)
{
#define M_(x) x = rb_mat(g, x)
#define F_(x) x = rb_flt(g, x)
    M_(g->conv1_w);
    M_(g->conv2_w);
    M_(g->embed_w);
    F_(g->enc_proj_w);
    F_(g->dec_proj_w);
    F_(g->out_w);
    F_(g->conv0_w);
    F_(g->conv0_b);
    F_(g->conv1_b);
    F_(g->conv2_b);
    F_(g->embed_b);
    F_(g->enc_proj_b);
    F_(g->dec_proj_b);
    F_(g->out_b);
    F_(g->dec_emb);
    F_(g->dec_conv);
    for (int i = 0; i < g->m->cfg.n_layers; i++) {
        glayer_t *G = &g->layers[i];
        M_(G->ffm_w1);
        M_(G->ffm_w2);
        M_(G->in_w);
        M_(G->out_w);
        M_(G->pos_w);
        M_(G->pw1_w);
        M_(G->pw2_w);
        M_(G->ff_w1);
        M_(G->ff_w2);
        M_(G->ffm_b1h);
        M_(G->ff_b1h);
        M_(G->in_bh);
        M_(G->pw1_bh);
        F_(G->ffm_b1);
        F_(G->ffm_b2);
        F_(G->in_b);
        F_(G->out_b);
        F_(G->bu);
        F_(G->bv);
        F_(G->pw1_b);
        F_(G->dw_w);
        F_(G->dw_b);
        F_(G->pw2_b);
        F_(G->ff_b1);
        F_(G->ff_b2);
    }
#undef M_
#undef F_
}

int icefall_gpu_model_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                             icefall_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    const icefall_config_t *c = &m->cfg;
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): element type %d", (int)dt);
    if (c->encoder_type != ICEFALL_CONFORMER)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall (gpu): this engine runs the Conformer "
                       "(pruned_transducer_stateless3); a zipformer's encoder runs on the GPU "
                       "through icefall_zf_gpu.h");
    if (dt != OPS_F32 && (c->d % 8 || c->ff % 8 || c->kernel > 64 || c->d > 1024))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall (gpu): 16-bit needs encoder_dim (%d) and dim_feedforward (%d) "
                       "multiples of 8, encoder_dim <= 1024 and a kernel (%d) <= 64; use fp32",
                       c->d, c->ff, c->kernel);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    icefall_gpu_model_t *g = hark_calloc(1, sizeof *g);
    if (!g || !(g->layers = hark_calloc((size_t)c->n_layers, sizeof *g->layers))) {
        hark_free(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    fill_t fl = {g, dt != OPS_F32};
    int rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, NULL,
                                 "icefall (gpu)", err);
    if (rc) {
        icefall_gpu_model_destroy(g);
        return rc;
    }
    rebase(g);
    *out = g;
    return HARK_OK;
}

void icefall_gpu_model_destroy(icefall_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g->layers);
    hark_free(g);
}

size_t icefall_gpu_model_bytes(const icefall_gpu_model_t *g)
{
    return g ? g->bytes : 0;
}

int icefall_gpu_model_device(const icefall_gpu_model_t *g)
{
    return g ? g->device : -1;
}

/* ---- workers -------------------------------------------------------------------------------- */

struct icefall_gpu_worker {
    const icefall_gpu_model_t *g;
    const icefall_model_t *m;
    ops_dtype_t dt;
    int max_batch, max_t_in, max_tp, cap;
    cudaStream_t stream;
    ops_cuda_t *ops;
    parallel_t *search; /* modified beam search's threads (NULL: the caller's alone) */
    void *mem;
    size_t bytes;
    float *feats;       /* (B, T_in, F) the run's features */
    void *xin;          /* (B, T_in + 2, F + 2) dt: the first conv's input */
    void *a0, *a1, *a2; /* the subsampling convs' outputs, dt */
    void *conv_scratch; /* cuda_conv2d's */
    size_t conv_bytes;
    float *x;            /* (B·T', d) the residual stream; the encoder output at the end */
    void *xh;            /* (B·T', d) dt: its 16-bit copy (16-bit paths) */
    void *h;             /* (B·T', max(ff, 3d, 2d)) dt: FFN hidden, qkv, pw1 output */
    void *gl, *dw, *ctx; /* (B·T', d) dt: GLU output, depthwise output, attention context */
    float *pe;           /* (2 T'max - 1, d) relative positions, T'max - 1 down to 1 - T'max */
    void *pe_h;          /* the same, dt (16-bit paths) */
    void *pp;            /* (2 T'max - 1, d) dt: a layer's projected positions */
    void *att;           /* cuda_rel_attention's scratch */
    size_t att_bytes;
    float *ep;   /* (B·T', J) encoder_proj */
    int *d_lens; /* (2, B): feature frames, encoder frames */
    int *h_lens; /* pinned, as d_lens */
    /* greedy search */
    int *ctx_ids, *tokens, *times, *count; /* (B, cs), (B, cap) x 2, (B) */
    float *score;                          /* (B) */
    float *dec, *dp, *logits, *hid;        /* (B, D), (B, J), (B, V), (B, J) */
    int *h_tokens, *h_times, *h_count;     /* pinned copies */
    float *h_score;
    /* modified beam search: room for brows hypotheses, made on first use (beam_room) */
    void *bmem;
    int brows;
    int *b_up;                              /* one frame's upload: ctx, utt, off, hyp (packed) */
    float *b_dec, *b_dp, *b_hid, *b_logits; /* (R, D), (R, J) x 2, (R, V) */
    float *b_val;                           /* (R) the picks: (sets, beam) */
    int *b_idx;                             /* (R) */
    int *h_bup, *h_idx;                     /* pinned: the upload, the picks */
    float *h_val;
    int last_batch, last_tp, last_tmax;
};

static size_t al(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

void icefall_gpu_worker_destroy(icefall_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    ops_cuda_destroy(w->ops);
    parallel_destroy(w->search);
    cudaFree(w->mem);
    cudaFree(w->bmem);
    cudaFreeHost(w->h_bup);
    cudaFreeHost(w->h_lens);
    cudaFreeHost(w->h_tokens);
    cudaFreeHost(w->h_times);
    cudaFreeHost(w->h_count);
    cudaFreeHost(w->h_score);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

int icefall_gpu_worker_create(const icefall_gpu_model_t *g, int max_batch, double max_seconds,
                              icefall_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const icefall_model_t *m = g->m;
    const icefall_config_t *c = &m->cfg;
    if (max_batch < 1 || max_batch > 1024 || !(max_seconds > 0) || max_seconds > 3600)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall (gpu): max_batch %d (1..1024), max_seconds %g", max_batch,
                       max_seconds);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    icefall_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->m = m;
    w->dt = g->dt;
    w->max_batch = max_batch;
    w->max_t_in = icefall_num_frames(m, (size_t)(max_seconds * c->sample_rate));
    if (w->max_t_in < 7)
        w->max_t_in = 7;
    w->max_tp = icefall_frames_out(w->max_t_in);
    w->cap = w->max_tp;
    const size_t B = (size_t)max_batch, T = (size_t)w->max_t_in, F = (size_t)c->feature_dim;
    const size_t T1 = (T - 1) / 2, Tp = (size_t)w->max_tp, N = B * Tp, d = (size_t)c->d;
    const size_t P = 2 * Tp - 1, es = ops_dtype_size(w->dt), J = (size_t)c->joiner_dim;
    const size_t D = (size_t)c->decoder_dim, V = (size_t)c->vocab, cs = (size_t)c->context_size;
    size_t hid = (size_t)c->ff > 3 * d ? (size_t)c->ff : 3 * d;
    const int h16 = w->dt != OPS_F32;
    /* the convs' scratch: every output row of the largest conv, or what 256 MB holds */
    size_t conv_rows = B * T1,
           row1 = cuda_conv2d_scratch_bytes(1, SUB_CH0, SUB_CH1, 3, 3, m->w1, w->dt),
           row2 = cuda_conv2d_scratch_bytes(1, SUB_CH1, SUB_CH2, 3, 3, m->w2, w->dt);
    size_t row = row1 > row2 ? row1 : row2, budget = (size_t)256 << 20;
    if (conv_rows * row > budget)
        conv_rows = budget / row > 0 ? budget / row : 1;
    w->conv_bytes = conv_rows * row + 1024;
    /* the attention's scores: every utterance's, or what 1 GB holds */
    int group = max_batch;
    while (group > 1 && cuda_rel_attention_scratch_bytes(group, (int)Tp, c->nhead, c->d / c->nhead,
                                                         w->dt) > ((size_t)1 << 30))
        group = (group + 1) / 2;
    w->att_bytes =
        cuda_rel_attention_scratch_bytes(group, (int)Tp, c->nhead, c->d / c->nhead, w->dt);
    struct {
        void **p;
        size_t n;
    } parts[] = {
        {(void **)&w->feats, B * T * F * 4},
        {&w->xin, B * (T + 2) * (F + 2) * es},
        {&w->a0, B * T * SUB_CH0 * F * es},
        {&w->a1, B * T1 * SUB_CH1 * (size_t)m->w1 * es},
        {&w->a2, N * SUB_CH2 * (size_t)m->w2 * es},
        {&w->conv_scratch, w->conv_bytes},
        {(void **)&w->x, N * d * 4},
        {&w->xh, h16 ? N * d * es : 0},
        {&w->h, N * hid * es},
        {&w->gl, N * d * es},
        {&w->dw, N * d * es},
        {&w->ctx, N * d * es},
        {(void **)&w->pe, P * d * 4},
        {&w->pe_h, h16 ? P * d * es : 0},
        {&w->pp, P * d * es},
        {&w->att, w->att_bytes},
        {(void **)&w->ep, N * J * 4},
        {(void **)&w->d_lens, 2 * B * sizeof(int)},
        {(void **)&w->ctx_ids, B * cs * sizeof(int)},
        {(void **)&w->tokens, B * (size_t)w->cap * sizeof(int)},
        {(void **)&w->times, B * (size_t)w->cap * sizeof(int)},
        {(void **)&w->count, B * sizeof(int)},
        {(void **)&w->score, B * sizeof(float)},
        {(void **)&w->dec, B * D * 4},
        {(void **)&w->dp, B * J * 4},
        {(void **)&w->logits, B * V * 4},
        {(void **)&w->hid, B * J * 4},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        total += al(parts[i].n);
    int rc = HARK_OK;
    float *tab = NULL, *tmp = NULL;
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)))
        goto fail;
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "icefall (gpu): %.0f MB of device scratch for %d x %.1f s: %s",
                     (double)total / 1048576.0, max_batch, max_seconds, cudaGetErrorString(e));
        cudaGetLastError();
        goto fail;
    }
    w->bytes = total;
    char *p = w->mem;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = parts[i].n ? p : NULL;
        p += al(parts[i].n);
    }
    if ((e = cudaMallocHost((void **)&w->h_lens, 2 * B * sizeof(int))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_tokens, B * (size_t)w->cap * sizeof(int))) !=
            cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_times, B * (size_t)w->cap * sizeof(int))) !=
            cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_count, B * sizeof(int))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_score, B * sizeof(float))) != cudaSuccess) {
        rc = cuda_err(err, e, "pinned buffers");
        goto fail;
    }
    /* the relative positions of the longest input; shorter ones are its middle rows */
    tab = hark_malloc(sizeof(float) * P * d);
    tmp = hark_malloc(sizeof(float) * Tp * d);
    if (!tab || !tmp) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    icefall_rel_pos_table(tab, tmp, (int)Tp, (int)d);
    if ((e = cudaMemcpy(w->pe, tab, sizeof(float) * P * d, cudaMemcpyHostToDevice)) !=
        cudaSuccess) {
        rc = cuda_err(err, e, "positions");
        goto fail;
    }
    if (h16 && (rc = cuda_cast(w->pe_h, w->dt, w->pe, OPS_F32, P * d, w->stream, err)))
        goto fail;
    if ((e = cudaStreamSynchronize(w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "positions");
        goto fail;
    }
    hark_free(tab);
    hark_free(tmp);
    *out = w;
    return HARK_OK;
fail:
    hark_free(tab);
    hark_free(tmp);
    icefall_gpu_worker_destroy(w);
    return rc;
}

size_t icefall_gpu_worker_bytes(const icefall_gpu_worker_t *w)
{
    return w ? w->bytes : 0;
}

const char *icefall_gpu_path_name(const icefall_gpu_worker_t *w)
{
    return gpu_path_name((gpu_path_t)ops_cuda_path(w->ops));
}

int icefall_gpu_max_frames(const icefall_gpu_worker_t *w)
{
    return w->max_t_in;
}

float *icefall_gpu_feats(icefall_gpu_worker_t *w)
{
    return w->feats;
}

/* ---- the forward ---------------------------------------------------------------------------- */

typedef struct {
    icefall_gpu_worker_t *w;
    int n;           /* rows: batch · T' */
    const int *lens; /* (batch) encoder frames, on the device */
    hark_err_t *err;
} fwd_t;

/* out (n, cols) = act(a · wᵀ + b): float for the FP32 model, dt for the 16-bit ones */
static int lin(const fwd_t *F, void *out, const void *a, int lda, const void *w, const float *b,
               const void *bh, int rows, int cols, int k, cuda_act_t act)
{
    icefall_gpu_worker_t *W = F->w;
    if (W->dt == OPS_F32)
        return cuda_linear(out, a, w, OPS_F32, b, rows, k, cols, act, W->ops, F->err);
    cuda_epi_t e = {.mode = CUDA_EPI_F16,
                    .act = act,
                    .bias = b,
                    .bias_h = b ? bh : NULL,
                    .out = out,
                    .ldo = cols,
                    .alpha = 1.0f,
                    .dt = W->dt};
    return cuda_hgemm(&e, a, lda, w, rows, cols, k, W->ops, F->err);
}

/* x (n, d) += a · wᵀ + b; the 16-bit copy xh follows when `copy` */
static int resid(const fwd_t *F, const void *a, int lda, const void *w, const float *b, int k,
                 int copy)
{
    icefall_gpu_worker_t *W = F->w;
    const int d = W->m->cfg.d;
    if (W->dt == OPS_F32) {
        int rc = cuda_gemm(W->x, OPS_F32, a, w, OPS_F32, F->n, d, k, lda, k, d, 1, 1.0f, 1.0f, 1, 0,
                           0, 0, W->ops, F->err);
        return rc ? rc
                  : cuda_bias_act(W->x, OPS_F32, W->x, b, F->n, d, CUDA_ACT_NONE, W->stream,
                                  F->err);
    }
    cuda_row_norms_t nm = {.x_sel = 0, .h_out = W->xh};
    cuda_epi_t e = {.mode = CUDA_EPI_RESID32,
                    .bias = b,
                    .out = W->x,
                    .ldo = d,
                    .alpha = 1.0f,
                    .beta = 1.0f,
                    .norm = copy ? &nm : NULL,
                    .dt = W->dt};
    return cuda_hgemm(&e, a, lda, w, F->n, d, k, W->ops, F->err);
}

/* the encoder's input of the current stream: x (FP32 model) or its 16-bit copy */
static const void *xin_of(const icefall_gpu_worker_t *w)
{
    return w->dt == OPS_F32 ? (const void *)w->x : w->xh;
}

static int feed_forward(const fwd_t *F, const void *w1, const float *b1, const void *b1h,
                        const void *w2, const float *b2, int copy)
{
    icefall_gpu_worker_t *W = F->w;
    const icefall_config_t *c = &W->m->cfg;
    int rc = lin(F, W->h, xin_of(W), c->d, w1, b1, b1h, F->n, c->ff, c->d, CUDA_ACT_DSWISH);
    return rc ? rc : resid(F, W->h, c->ff, w2, b2, c->ff, copy);
}

static int attention(const fwd_t *F, const glayer_t *L, int tp, int batch)
{
    icefall_gpu_worker_t *W = F->w;
    const icefall_config_t *c = &W->m->cfg;
    const int d = c->d, H = c->nhead, dk = d / H, P = 2 * tp - 1;
    const size_t es = ops_dtype_size(W->dt);
    /* the middle 2 T' - 1 rows of the longest input's table */
    const size_t row0 = (size_t)(W->max_tp - tp) * d;
    const void *pe =
        W->dt == OPS_F32 ? (const void *)(W->pe + row0) : (const char *)W->pe_h + row0 * es;
    int rc = lin(F, W->h, xin_of(W), d, L->in_w, L->in_b, L->in_bh, F->n, 3 * d, d, CUDA_ACT_NONE);
    if (!rc)
        rc = lin(F, W->pp, pe, d, L->pos_w, NULL, NULL, P, d, d, CUDA_ACT_NONE);
    if (!rc)
        rc = cuda_rel_attention(W->ctx, d, W->dt, W->att, W->att_bytes, W->h, 3 * d, W->pp, d,
                                L->bu, L->bv, F->lens, c->chunk_size, c->left_chunks, batch, tp, H,
                                dk, 1.0f / sqrtf((float)dk), W->ops, F->err);
    return rc ? rc : resid(F, W->ctx, d, L->out_w, L->out_b, d, 1);
}

static int conv_module(const fwd_t *F, const glayer_t *L, int tp, int batch)
{
    icefall_gpu_worker_t *W = F->w;
    const icefall_config_t *c = &W->m->cfg;
    const int d = c->d, k = c->kernel, pad_left = c->causal ? k - 1 : (k - 1) / 2;
    int rc;
    if (W->dt == OPS_F32) {
        rc = cuda_linear(W->h, W->x, L->pw1_w, OPS_F32, L->pw1_b, F->n, d, 2 * d, CUDA_ACT_NONE,
                         W->ops, F->err);
        if (!rc)
            rc = cuda_glu(W->gl, OPS_F32, W->h, NULL, F->n, d, W->stream, F->err);
        if (!rc)
            rc = cuda_depthwise_conv_norm_act(
                W->dw, OPS_F32, W->gl, NULL, L->dw_w, L->dw_b, F->lens, batch, tp, d, k, pad_left,
                CUDA_NORM_NONE, NULL, NULL, NULL, NULL, 0.0f, CUDA_ACT_DSWISH, W->stream, F->err);
    } else {
        cuda_epi_t e = {.mode = CUDA_EPI_GLU16,
                        .bias = L->pw1_b,
                        .bias_h = L->pw1_bh,
                        .out = W->gl,
                        .ldo = d,
                        .alpha = 1.0f,
                        .dt = W->dt};
        rc = cuda_hgemm(&e, W->xh, d, L->pw1_w, F->n, 2 * d, d, W->ops, F->err);
        if (!rc)
            rc = cuda_dwconv_f16(W->dw, W->dt, W->gl, NULL, L->dw_w, L->dw_b, F->lens, batch, tp, d,
                                 k, pad_left, CUDA_NORM_NONE, NULL, NULL, NULL, NULL, 0.0f,
                                 CUDA_ACT_DSWISH, W->stream, F->err);
    }
    return rc ? rc : resid(F, W->dw, d, L->pw2_w, L->pw2_b, d, 1);
}

static int embed(const fwd_t *F, const float *d_feats, const float *pad, int batch, int t_in)
{
    icefall_gpu_worker_t *W = F->w;
    const icefall_gpu_model_t *g = W->g;
    const icefall_model_t *m = W->m;
    const int Fd = m->cfg.feature_dim, T1 = (t_in - 1) / 2, d = m->cfg.d;
    const int k2 = SUB_CH2 * m->w2;
    int rc = cuda_pad_frames(W->xin, W->dt, d_feats, pad ? W->d_lens : NULL, pad ? *pad : 0.0f,
                             batch, t_in, Fd, W->stream, F->err);
    if (!rc)
        rc = cuda_conv2d(W->a0, W->conv_scratch, W->conv_bytes, W->xin, g->conv0_w, NULL,
                         g->conv0_b, W->dt, batch, 1, t_in + 2, Fd + 2, SUB_CH0, 3, 3, 1,
                         CUDA_ACT_DSWISH, W->ops, F->err);
    if (!rc)
        rc = cuda_conv2d(W->a1, W->conv_scratch, W->conv_bytes, W->a0, NULL, g->conv1_w, g->conv1_b,
                         W->dt, batch, SUB_CH0, t_in, Fd, SUB_CH1, 3, 3, 2, CUDA_ACT_DSWISH, W->ops,
                         F->err);
    if (!rc)
        rc = cuda_conv2d(W->a2, W->conv_scratch, W->conv_bytes, W->a1, NULL, g->conv2_w, g->conv2_b,
                         W->dt, batch, SUB_CH1, T1, m->w1, SUB_CH2, 3, 3, 2, CUDA_ACT_DSWISH,
                         W->ops, F->err);
    if (rc)
        return rc;
    if (W->dt == OPS_F32) {
        rc = cuda_linear(W->x, W->a2, g->embed_w, OPS_F32, g->embed_b, F->n, k2, d, CUDA_ACT_NONE,
                         W->ops, F->err);
    } else {
        cuda_epi_t e = {.mode = CUDA_EPI_F32,
                        .bias = g->embed_b,
                        .out = W->x,
                        .ldo = d,
                        .alpha = 1.0f,
                        .dt = W->dt};
        rc = cuda_hgemm(&e, W->a2, k2, g->embed_w, F->n, d, k2, W->ops, F->err);
    }
    return rc ? rc
              : cuda_basic_norm(W->x, W->xh, W->dt, W->x, F->n, d, m->embed_eps, W->stream, F->err);
}

int icefall_gpu_encode(icefall_gpu_worker_t *w, const float *d_feats, const int *lens, int batch,
                       int t_in, const float *pad, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_config_t *c = &m->cfg;
    if (batch < 1 || batch > w->max_batch || t_in > w->max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "icefall (gpu): a batch of %d x %d frames past the worker's %d x %d", batch,
                       t_in, w->max_batch, w->max_t_in);
    for (int b = 0; b < batch; b++)
        if (lens[b] < 7 || lens[b] > t_in)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "icefall (gpu): row %d has %d valid frames of %d (at least 7)", b,
                           lens[b], t_in);
    cudaSetDevice(w->g->device);
    /* the previous run's copies out of h_lens are done once the stream is idle */
    cudaError_t e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "stream");
    const int tp = icefall_frames_out(t_in);
    int tmax = 0;
    for (int b = 0; b < batch; b++) {
        w->h_lens[b] = lens[b];
        w->h_lens[w->max_batch + b] = icefall_frames_out(lens[b]);
        tmax = w->h_lens[w->max_batch + b] > tmax ? w->h_lens[w->max_batch + b] : tmax;
    }
    if ((e = cudaMemcpyAsync(w->d_lens, w->h_lens, 2 * (size_t)w->max_batch * sizeof(int),
                             cudaMemcpyHostToDevice, w->stream)) != cudaSuccess)
        return cuda_err(err, e, "lengths");
    fwd_t F = {w, batch * tp, w->d_lens + w->max_batch, err};
    int rc = embed(&F, d_feats, pad, batch, t_in);
    for (int i = 0; i < c->n_layers && !rc; i++) {
        const glayer_t *L = &w->g->layers[i];
        rc = feed_forward(&F, L->ffm_w1, L->ffm_b1, L->ffm_b1h, L->ffm_w2, L->ffm_b2, 1);
        if (!rc)
            rc = attention(&F, L, tp, batch);
        if (!rc)
            rc = conv_module(&F, L, tp, batch);
        if (!rc)
            rc = feed_forward(&F, L->ff_w1, L->ff_b1, L->ff_b1h, L->ff_w2, L->ff_b2, 0);
        if (!rc)
            rc = cuda_basic_norm(w->x, w->xh, w->dt, w->x, F.n, c->d, L->eps, w->stream, err);
    }
    if (!rc) /* encoder_proj, float32 from the float32 stream */
        rc = cuda_linear(w->ep, w->x, w->g->enc_proj_w, OPS_F32, w->g->enc_proj_b, F.n, c->d,
                         c->joiner_dim, CUDA_ACT_NONE, w->ops, err);
    w->last_batch = rc ? 0 : batch;
    w->last_tp = tp;
    w->last_tmax = tmax;
    return rc;
}

/* dp (B, J) = dec · W_dpᵀ (its bias goes into the joiner's hidden layer) */
static int dec_proj(icefall_gpu_worker_t *w, int batch, hark_err_t *err)
{
    const icefall_config_t *c = &w->m->cfg;
    return cuda_gemm(w->dp, OPS_F32, w->dec, w->g->dec_proj_w, OPS_F32, batch, c->joiner_dim,
                     c->decoder_dim, c->decoder_dim, c->decoder_dim, c->joiner_dim, 1, 1.0f, 0.0f,
                     1, 0, 0, 0, w->ops, err);
}

/* logits (n, V) = joiner(ep[rows[r] or r][t] + dp[r]) without output_linear's bias (the search
 * kernels add it) */
static int joiner_logits(icefall_gpu_worker_t *w, float *logits, float *hid, const float *dp,
                         const int *rows, int t, int n, hark_err_t *err)
{
    const icefall_config_t *c = &w->m->cfg;
    const int J = c->joiner_dim, V = c->vocab;
    int rc = cuda_joiner_hidden(hid, OPS_F32, w->ep, (long long)w->last_tp * J, rows, dp,
                                w->g->dec_proj_b, t, n, J, w->stream, err);
    return rc ? rc
              : cuda_gemm(logits, OPS_F32, hid, w->g->out_w, OPS_F32, n, V, J, J, J, V, 1, 1.0f,
                          0.0f, 1, 0, 0, 0, w->ops, err);
}

int icefall_gpu_greedy(icefall_gpu_worker_t *w, hark_err_t *err)
{
    const icefall_config_t *c = &w->m->cfg;
    const int B = w->last_batch, V = c->vocab;
    if (B < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): greedy search before encode");
    cuda_greedy_t G = {.ctx = w->ctx_ids,
                       .tokens = w->tokens,
                       .times = w->times,
                       .count = w->count,
                       .score = w->score,
                       .cap = w->cap,
                       .emb = w->g->dec_emb,
                       .conv = w->g->dec_conv,
                       .bias = w->g->out_b,
                       .V = V,
                       .D = c->decoder_dim,
                       .cs = c->context_size,
                       .gs = c->dec_group_size,
                       .blank = c->blank_id,
                       .ldl = V};
    const int *lens = w->d_lens + w->max_batch;
    int rc = cuda_greedy_step(&G, w->dec, OPS_F32, NULL, NULL, -1, B, w->stream, err);
    if (!rc)
        rc = dec_proj(w, B, err);
    for (int t = 0; t < w->last_tmax && !rc; t++) {
        rc = joiner_logits(w, w->logits, w->hid, w->dp, NULL, t, B, err);
        if (!rc)
            rc = cuda_greedy_step(&G, w->dec, OPS_F32, w->logits, lens, t, B, w->stream, err);
        if (!rc)
            rc = dec_proj(w, B, err);
    }
    cudaError_t e;
    if (!rc && ((e = cudaMemcpyAsync(w->h_count, w->count, sizeof(int) * B, cudaMemcpyDeviceToHost,
                                     w->stream)) != cudaSuccess ||
                (e = cudaMemcpyAsync(w->h_score, w->score, sizeof(float) * B,
                                     cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess ||
                (e = cudaMemcpyAsync(w->h_tokens, w->tokens, sizeof(int) * B * (size_t)w->cap,
                                     cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess ||
                (e = cudaMemcpyAsync(w->h_times, w->times, sizeof(int) * B * (size_t)w->cap,
                                     cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess))
        rc = cuda_err(err, e, "results");
    return rc;
}

int icefall_gpu_sync(icefall_gpu_worker_t *w, hark_err_t *err)
{
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? HARK_OK : cuda_err(err, e, "run");
}

int icefall_gpu_read(icefall_gpu_worker_t *w, int b, int proj, float *host, int max_frames,
                     int *n_frames, hark_err_t *err)
{
    const icefall_config_t *c = &w->m->cfg;
    if (b < 0 || b >= w->last_batch)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): row %d of %d", b, w->last_batch);
    int n = w->h_lens[w->max_batch + b], width = proj ? c->joiner_dim : c->d;
    if (n > max_frames)
        return err_set(err, HARK_ERR_TOO_LARGE, "icefall (gpu): %d frames for room of %d", n,
                       max_frames);
    const float *src = (proj ? w->ep : w->x) + (size_t)b * w->last_tp * width;
    cudaError_t e =
        cudaMemcpy(host, src, sizeof(float) * (size_t)n * width, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return cuda_err(err, e, "read");
    *n_frames = n;
    return HARK_OK;
}

int icefall_gpu_results(icefall_gpu_worker_t *w, icefall_hyp_t *out, hark_err_t *err)
{
    const int B = w->last_batch;
    for (int b = 0; b < B; b++)
        memset(&out[b], 0, sizeof out[b]);
    for (int b = 0; b < B; b++) {
        int n = w->h_count[b];
        if (n > w->cap) { /* at most one symbol per frame: cannot happen */
            for (int i = 0; i < b; i++)
                icefall_hyp_free(&out[i]);
            return err_set(err, HARK_ERR_INTERNAL, "icefall (gpu): %d tokens in %d frames", n,
                           w->cap);
        }
        out[b].n = n;
        out[b].score = w->h_score[b];
        if (n && (!(out[b].tokens = hark_malloc(sizeof(int) * (size_t)n)) ||
                  !(out[b].times = hark_malloc(sizeof(int) * (size_t)n)))) {
            for (int i = 0; i <= b; i++)
                icefall_hyp_free(&out[i]);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
        if (n) {
            memcpy(out[b].tokens, w->h_tokens + (size_t)b * w->cap, sizeof(int) * (size_t)n);
            memcpy(out[b].times, w->h_times + (size_t)b * w->cap, sizeof(int) * (size_t)n);
        }
    }
    return HARK_OK;
}

/* device and pinned room for rows hypotheses (sets of up to max_batch utterances) */
static int beam_room(icefall_gpu_worker_t *w, int rows, hark_err_t *err)
{
    if (rows <= w->brows)
        return HARK_OK;
    const icefall_config_t *c = &w->m->cfg;
    const size_t R = (size_t)rows, S = (size_t)w->max_batch, cs = (size_t)c->context_size;
    const size_t D = (size_t)c->decoder_dim, J = (size_t)c->joiner_dim, V = (size_t)c->vocab;
    const size_t up = R * cs + R + S + 1 + R; /* 4-byte words */
    cudaFree(w->bmem);
    cudaFreeHost(w->h_bup);
    w->bmem = NULL;
    w->h_bup = NULL;
    w->brows = 0;
    size_t o_up = 0, o_dec = o_up + al(up * 4), o_dp = o_dec + al(R * D * 4);
    size_t o_hid = o_dp + al(R * J * 4), o_lg = o_hid + al(R * J * 4), o_val = o_lg + al(R * V * 4);
    size_t o_idx = o_val + al(R * 4), total = o_idx + al(R * 4);
    cudaError_t e = cudaMalloc(&w->bmem, total);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&w->h_bup, (up + 2 * R) * 4);
    if (e != cudaSuccess) {
        cudaFree(w->bmem);
        w->bmem = NULL;
        w->h_bup = NULL;
        return err_set(err, HARK_ERR_NOMEM,
                       "icefall (gpu): no room for %d beam search hypotheses: %s", rows,
                       cudaGetErrorString(e));
    }
    char *base = w->bmem;
    w->b_up = (int *)(base + o_up);
    w->b_dec = (float *)(base + o_dec);
    w->b_dp = (float *)(base + o_dp);
    w->b_hid = (float *)(base + o_hid);
    w->b_logits = (float *)(base + o_lg);
    w->b_val = (float *)(base + o_val);
    w->b_idx = (int *)(base + o_idx);
    w->h_val = (float *)(w->h_bup + up);
    w->h_idx = w->h_bup + up + R;
    w->brows = rows;
    return HARK_OK;
}

typedef struct {
    icefall_beam_t *hb;
    const int *act;
    const float *val;
    const int *idx;
    int beam, V, blank, t;
} take_job_t;

static void take_one(void *ctx, int s)
{
    const take_job_t *j = ctx;
    icefall_beam_t *b = &j->hb[j->act[s]];
    long long tot = (long long)b->na * j->V;
    int nk = tot < j->beam ? (int)tot : j->beam;
    icefall_beam_take(b, j->blank, j->val + (size_t)s * j->beam, j->idx + (size_t)s * j->beam, nk,
                      j->V, j->t);
}

/* one frame of every utterance with frames left: upload the hypotheses' contexts and scores,
 * decoder, joiner and top k on the device, the picks back; the merges on the search threads */
static int beam_frame(icefall_gpu_worker_t *w, icefall_beam_t *hb, int *act, int beam, int t,
                      int *done, hark_err_t *err)
{
    const icefall_config_t *c = &w->m->cfg;
    const int B = w->last_batch, cs = c->context_size, J = c->joiner_dim, V = c->vocab;
    const int D = c->decoder_dim;
    const int *lens = w->h_lens + w->max_batch;
    int S = 0, R = 0;
    for (int b = 0; b < B; b++)
        if (t < lens[b]) {
            act[S++] = b;
            R += hb[b].na;
        }
    *done = S == 0;
    if (!S)
        return HARK_OK;
    int *hc = w->h_bup, *hu = hc + (size_t)R * cs, *ho = hu + R;
    float *hh = (float *)(ho + S + 1);
    int r = 0;
    for (int s = 0; s < S; s++) {
        const icefall_beam_t *b = &hb[act[s]];
        ho[s] = r;
        for (int i = 0; i < b->na; i++, r++) {
            memcpy(hc + (size_t)r * cs, b->A[i].ys + b->A[i].n_ys - cs, sizeof(int) * (size_t)cs);
            hu[r] = act[s];
            hh[r] = b->A[i].log_prob;
        }
    }
    ho[S] = R;
    const size_t nup = (size_t)R * cs + R + S + 1 + R;
    int *dc = w->b_up, *du = dc + (size_t)R * cs, *doff = du + R;
    const float *dh = (const float *)(doff + S + 1);
    cudaError_t e = cudaMemcpyAsync(w->b_up, w->h_bup, nup * 4, cudaMemcpyHostToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "beam search upload");
    int rc = cuda_transducer_decoder(w->b_dec, OPS_F32, dc, R, w->g->dec_emb, w->g->dec_conv, D, cs,
                                     c->dec_group_size, w->stream, err);
    if (!rc)
        rc = cuda_gemm(w->b_dp, OPS_F32, w->b_dec, w->g->dec_proj_w, OPS_F32, R, J, D, D, D, J, 1,
                       1.0f, 0.0f, 1, 0, 0, 0, w->ops, err);
    if (!rc)
        rc = joiner_logits(w, w->b_logits, w->b_hid, w->b_dp, du, t, R, err);
    if (!rc)
        rc = cuda_beam_topk(w->b_val, w->b_idx, w->b_logits, V, w->g->out_b, dh, doff, S, beam, V,
                            beam, w->stream, err);
    if (rc)
        return rc;
    const size_t np = (size_t)S * beam;
    if ((e = cudaMemcpyAsync(w->h_val, w->b_val, np * 4, cudaMemcpyDeviceToHost, w->stream)) !=
            cudaSuccess ||
        (e = cudaMemcpyAsync(w->h_idx, w->b_idx, np * 4, cudaMemcpyDeviceToHost, w->stream)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(w->stream)) != cudaSuccess)
        return cuda_err(err, e, "beam search picks");
    for (int s = 0; s < S; s++) { /* a pick out of range: no finite score to rank (NaN) */
        const int na = hb[act[s]].na, nk = (long long)na * V < beam ? na * V : beam;
        for (int k = 0; k < nk; k++) {
            int x = w->h_idx[(size_t)s * beam + k];
            if (x < 0 || x >= na * V)
                return err_set(err, HARK_ERR_INTERNAL,
                               "icefall (gpu): beam search of utterance %d at frame %d: no "
                               "finite score (pick %d)",
                               act[s], t, x);
        }
    }
    take_job_t job = {hb, act, w->h_val, w->h_idx, beam, V, c->blank_id, t};
    parallel_for(w->search, S, take_one, &job);
    return HARK_OK;
}

int icefall_gpu_beam(icefall_gpu_worker_t *w, int beam, int nbest, icefall_result_t *res,
                     hark_err_t *err)
{
    const int B = w->last_batch;
    if (B < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): beam search before encode");
    if (beam < 1 || beam > ICEFALL_GPU_MAX_BEAM)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): beam %d (1..%d)", beam,
                       ICEFALL_GPU_MAX_BEAM);
    for (int b = 0; b < B; b++) {
        memset(&res[b].best, 0, sizeof res[b].best);
        res[b].nbest = NULL;
        res[b].n_nbest = 0;
    }
    cudaError_t e = cudaStreamSynchronize(w->stream); /* the encoder, and h_lens */
    if (e != cudaSuccess)
        return cuda_err(err, e, "encoder");
    const int *lens = w->h_lens + w->max_batch;
    icefall_beam_t *hb = hark_calloc((size_t)B, sizeof *hb);
    int *act = hark_malloc(sizeof(int) * (size_t)B);
    int rc =
        hb && act ? beam_room(w, B * beam, err) : err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int b = 0; b < B && !rc; b++) /* at most one token per frame */
        rc = icefall_beam_init_hyps(w->m, beam, lens[b] + w->m->cfg.context_size + 1, &hb[b], err);
    int done = 0;
    for (int t = 0; t < w->last_tmax && !rc && !done; t++)
        rc = beam_frame(w, hb, act, beam, t, &done, err);
    for (int b = 0; b < B && !rc; b++)
        rc = icefall_beam_result(&hb[b], &res[b].best, nbest ? &res[b].nbest : NULL,
                                 nbest ? &res[b].n_nbest : NULL, err);
    if (rc)
        for (int b = 0; b < B; b++)
            icefall_result_free(&res[b]);
    for (int b = 0; hb && b < B; b++)
        icefall_beam_free(&hb[b]);
    hark_free(hb);
    hark_free(act);
    return rc;
}

typedef struct {
    const icefall_model_t *m;
    const float *ep; /* (B, T', J) */
    const int *lens; /* (B) encoder frames */
    int tp;
    const icefall_fast_beam_opts_t *o;
    icefall_result_t *res;
    int *rc;
    hark_err_t *errs;
} fast_job_t;

static void fast_one(void *ctx, int b)
{
    fast_job_t *j = ctx;
    const size_t J = (size_t)j->m->cfg.joiner_dim;
    j->rc[b] = icefall_fast_beam_search(j->m, j->ep + (size_t)b * j->tp * J, j->lens[b], j->o,
                                        &j->res[b].best, &j->errs[b]);
}

int icefall_gpu_fast_beam(icefall_gpu_worker_t *w, const icefall_fast_beam_opts_t *o,
                          icefall_result_t *res, hark_err_t *err)
{
    const int B = w->last_batch, J = w->m->cfg.joiner_dim;
    if (B < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): fast beam search before encode");
    size_t n = (size_t)B * w->last_tp * J;
    float *ep = hark_malloc(sizeof(float) * n);
    int *rc = hark_calloc((size_t)B, sizeof *rc);
    hark_err_t *errs = hark_calloc((size_t)B, sizeof *errs);
    int r = HARK_OK;
    for (int b = 0; b < B; b++)
        memset(&res[b].best, 0, sizeof res[b].best);
    if (!ep || !rc || !errs) {
        r = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    cudaError_t e = cudaStreamSynchronize(w->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(ep, w->ep, sizeof(float) * n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        r = cuda_err(err, e, "encoder_proj");
        goto done;
    }
    fast_job_t job = {w->m, ep, w->h_lens + w->max_batch, w->last_tp, o, res, rc, errs};
    parallel_for(w->search, B, fast_one, &job);
    for (int b = 0; b < B && !r; b++)
        if (rc[b]) {
            *err = errs[b];
            r = rc[b];
        }
    if (r)
        for (int b = 0; b < B; b++)
            icefall_hyp_free(&res[b].best);
done:
    hark_free(ep);
    hark_free(rc);
    hark_free(errs);
    return r;
}

int icefall_gpu_set_search_threads(icefall_gpu_worker_t *w, int threads, hark_err_t *err)
{
    parallel_t *p = NULL;
    if (threads < 1 || threads > PARALLEL_MAX_THREADS)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall (gpu): search threads %d (1..%d)",
                       threads, PARALLEL_MAX_THREADS);
    int rc = threads > 1 ? parallel_create(threads, &p, err) : HARK_OK;
    if (rc)
        return rc;
    /* fast_beam_search's utterances run OpenBLAS's small GEMMs on these threads at once: its pool
     * would take them one at a time, so one thread per call, process-wide */
    if (threads > 1)
        ops_set_threads(1);
    parallel_destroy(w->search);
    w->search = p;
    return HARK_OK;
}

/* ---- end to end ----------------------------------------------------------------------------- */

int icefall_gpu_run(icefall_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                    const icefall_run_opts_t *o, icefall_result_t *res, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_config_t *c = &m->cfg;
    const int F = c->feature_dim;
    for (int b = 0; b < batch; b++)
        memset(&res[b], 0, sizeof res[b]);
    if (batch < 1 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "icefall (gpu): a batch of %d (the worker's %d)",
                       batch, w->max_batch);
    icefall_method_t method = o ? o->method : (icefall_method_t)c->method;
    int beam = o && o->beam_size > 0 ? o->beam_size : c->beam_size;
    int *lens = hark_calloc((size_t)batch, sizeof *lens);
    float *feats = NULL;
    icefall_hyp_t *hyps = hark_calloc((size_t)batch, sizeof *hyps);
    int rc = HARK_OK, t_in = 0;
    if (!lens || !hyps) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int b = 0; b < batch && !rc; b++) {
        rc = icefall_audio_frames(m, pcm[b], n[b], w->max_t_in,
                                  (double)w->max_t_in * 160.0 / c->sample_rate, &lens[b], err);
        t_in = lens[b] > t_in ? lens[b] : t_in;
    }
    if (rc)
        goto done;
    /* the features of every utterance at its own length, rows past it zero */
    if (!(feats = hark_calloc((size_t)batch * t_in * F, sizeof *feats))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int b = 0; b < batch && !rc; b++)
        rc = feat_compute(m->feat, pcm[b], n[b], feats + (size_t)b * t_in * F, err);
    if (rc)
        goto done;
    cudaSetDevice(w->g->device);
    cudaError_t e = cudaStreamSynchronize(w->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(w->feats, feats, sizeof(float) * (size_t)batch * t_in * F,
                            cudaMemcpyHostToDevice, w->stream);
    if (e != cudaSuccess) {
        rc = cuda_err(err, e, "features");
        goto done;
    }
    const float zero = 0.0f;
    if ((rc = icefall_gpu_encode(w, w->feats, lens, batch, t_in, &zero, err)))
        goto done;
    if (method == ICEFALL_GREEDY) {
        if ((rc = icefall_gpu_greedy(w, err)) || (rc = icefall_gpu_sync(w, err)) ||
            (rc = icefall_gpu_results(w, hyps, err)))
            goto done;
        for (int b = 0; b < batch; b++) {
            res[b].best = hyps[b];
            memset(&hyps[b], 0, sizeof hyps[b]);
        }
    } else if (method == ICEFALL_FAST_BEAM) {
        if ((rc = icefall_gpu_fast_beam(w, o && o->fast_beam.max_states > 0 ? &o->fast_beam : NULL,
                                        res, err)))
            goto done;
    } else if ((rc = icefall_gpu_beam(w, beam, 1, res, err))) {
        goto done;
    }
    for (int b = 0; b < batch && !rc; b++) {
        res[b].n_frames = icefall_frames_out(lens[b]);
        rc = icefall_text(m, &res[b].best, &res[b].text, err);
    }
done:
    hark_free(lens);
    hark_free(feats);
    for (int b = 0; hyps && b < batch; b++)
        icefall_hyp_free(&hyps[b]);
    hark_free(hyps);
    if (rc)
        for (int b = 0; b < batch; b++)
            icefall_result_free(&res[b]);
    return rc;
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "icefall: built without CUDA");
}

int icefall_gpu_model_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                             icefall_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void icefall_gpu_model_destroy(icefall_gpu_model_t *g) {}
size_t icefall_gpu_model_bytes(const icefall_gpu_model_t *g)
{
    return 0;
}
int icefall_gpu_model_device(const icefall_gpu_model_t *g)
{
    return -1;
}
int icefall_gpu_worker_create(const icefall_gpu_model_t *g, int max_batch, double max_seconds,
                              icefall_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void icefall_gpu_worker_destroy(icefall_gpu_worker_t *w) {}
size_t icefall_gpu_worker_bytes(const icefall_gpu_worker_t *w)
{
    return 0;
}
const char *icefall_gpu_path_name(const icefall_gpu_worker_t *w)
{
    return "cpu";
}
int icefall_gpu_max_frames(const icefall_gpu_worker_t *w)
{
    return 0;
}
float *icefall_gpu_feats(icefall_gpu_worker_t *w)
{
    return NULL;
}
int icefall_gpu_encode(icefall_gpu_worker_t *w, const float *d_feats, const int *lens, int batch,
                       int t_in, const float *pad, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_greedy(icefall_gpu_worker_t *w, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_sync(icefall_gpu_worker_t *w, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_read(icefall_gpu_worker_t *w, int b, int proj, float *host, int max_frames,
                     int *n_frames, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_results(icefall_gpu_worker_t *w, icefall_hyp_t *out, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_beam(icefall_gpu_worker_t *w, int beam, int nbest, icefall_result_t *res,
                     hark_err_t *err)
{
    return no_device(err);
}

int icefall_gpu_fast_beam(icefall_gpu_worker_t *w, const icefall_fast_beam_opts_t *o,
                          icefall_result_t *res, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_set_search_threads(icefall_gpu_worker_t *w, int threads, hark_err_t *err)
{
    return no_device(err);
}
int icefall_gpu_run(icefall_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                    const icefall_run_opts_t *o, icefall_result_t *res, hark_err_t *err)
{
    return no_device(err);
}

#endif

double icefall_gpu_macs(const icefall_model_t *m, int t_in)
{
    const icefall_config_t *c = &m->cfg;
    if (t_in < 7)
        return 0;
    const double T = t_in, T1 = (t_in - 1) / 2, Tp = icefall_frames_out(t_in), d = c->d, ff = c->ff,
                 k = c->kernel, F = c->feature_dim;
    double s = T * F * SUB_CH0 * 9.0 + T1 * m->w1 * SUB_CH1 * SUB_CH0 * 9.0 +
               Tp * m->w2 * SUB_CH2 * SUB_CH1 * 9.0 + Tp * SUB_CH2 * m->w2 * d;
    double layer = Tp * (2 * 2 * d * ff               /* two feed-forward modules */
                         + 3 * d * d + d * d          /* in_proj, out_proj */
                         + 2 * d * d + d * k + d * d) /* pointwise 1, depthwise, pointwise 2 */
                   + (2 * Tp - 1) * d * d             /* linear_pos */
                   + Tp * Tp * d * 2 + Tp * (2 * Tp - 1) * d; /* scores (ac, bd), context */
    return s + c->n_layers * layer + Tp * d * c->joiner_dim;
}
