/* conformer_gpu.c — WeNet Conformer encoder + CTC head on the GPU through the ops_cuda.h
 * launchers; the CPU reference is conformer.c. Tests: tests/model/wenet/test_conformer_gpu.c
 *
 * The batch stays padded: (batch, t_out, D) buffers, row-wise ops over all rows, the frame-mixing
 * ops (subsampling convs, attention, depthwise conv) confined to each utterance by its length.
 * Input rows past an utterance's end are zeroed first, so padding stays finite and can never
 * reach a valid frame.
 *
 * FP32: cuBLAS GEMMs with FP32 outputs, then one fused kernel per sub-module that adds bias +
 * residual and computes the next layer norm. FP16: every activation between GEMMs is half and
 * every GEMM runs through gemm_f16.cu with its epilogue fused (bias + activation, GLU, or the
 * update of the FP32 residual stream), attention is one flash-style kernel, the subsampling convs
 * are a CMVN-fused direct conv and implicit GEMMs over channel-last images (weights permuted once
 * at load); only the residual stream and the norms stay FP32. BF16 is the FP16 forward with
 * bfloat16 in place of half (the same kernels instantiated for it, its own weight copies, rounded
 * to nearest even at load). Either forward is recorded as a CUDA graph per (batch, frames,
 * buffers, options) the second time that shape is seen and replayed after that; the lengths reach
 * the graph through a pinned host buffer.
 */
#include "model/wenet/conformer_gpu.h"

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "gpu/gpu_arch.h"
#include "gpu/graph_cache.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NORM_EPS 1e-5f
#define MAX_CONVS 3
#define CONV_SCRATCH_BUDGET ((size_t)128 << 20) /* im2col block (bytes) */
#define GRAPH_SLOTS 64                          /* recorded forwards kept per state */
#define PROF_EVENTS 512                         /* stage marks per profiled forward */

typedef struct {
    const float *f32; /* device (out, in) float32, or NULL when not uploaded */
    const void *f16;  /* device (out, in) float16, or NULL */
    const void *bf16; /* device (out, in) bfloat16 (the f16 copy's layout), or NULL */
} mat_t;

typedef struct {
    const float *g, *b; /* (D) */
} dnorm_t;

typedef struct {
    dnorm_t norm_ff_macaron, norm_mha, norm_conv, norm_ff, norm_final;
    const float *pw1_b16; /* (2D) pointwise_conv1 bias with value/gate entries interleaved, for the
                             FP16 GLU epilogue (whose weight rows are interleaved the same way) */
    mat_t ffm1, ffm2, ff1, ff2; /* (F, D), (D, F) */
    const float *ffm1_b, *ffm2_b, *ff1_b, *ff2_b;
    const float *ffm2_bh, *ff2_bh; /* (D) the w2 biases times the FFN scale (FP16: cuBLASLt) */
    mat_t qkv, o, pos;             /* (3D, D) = [linear_q; linear_k; linear_v], (D, D), (D, D) */
    const float *qkv_b, *o_b;      /* (3D), (D) */
    mat_t qkv_bh;                  /* (3D) 16-bit only: the qkv bias for cuBLASLt (FP16, BF16) */
    mat_t ffm1_bh, ff1_bh;         /* (F) 16-bit only: the w1 biases for cuBLASLt */
    const float *pos_u, *pos_v;    /* (H, dk) */
    mat_t pw1, pw2;                /* (2D, D), (D, D) */
    const float *pw1_b, *pw2_b;    /* (2D), (D) */
    const float *dw_w, *dw_b;      /* (D, K), (D) */
    dnorm_t cnn_norm;              /* (D) */
    const float *bn_mean, *bn_var; /* (D); batch_norm only */
    const float *causal_left;      /* (K-1, D) glu(pw1 bias) rows; causal only */
} gblock_t;

typedef struct {
    int k, stride, cin, cout;
    mat_t w;        /* (cout, cin·k·k); f32 always (the direct kernel reads it); the 16-bit copies
                       are (cout, k·k·cin), the channel-last order of cuda_hconv2d */
    const float *b; /* (cout) */
} gconv_t;

struct conformer_gpu_model {
    wenet_config_t cfg;
    int d, h, dk, ffn, kernel, vocab, in_dim, precisions;
    const float *cmvn_mean, *cmvn_istd; /* (in_dim) or NULL */
    int n_conv;
    gconv_t conv[MAX_CONVS];
    mat_t embed; /* (D, embed_in), columns c·F' + f; 16-bit copies f·C + c (channel-last input) */
    const float *embed_b, *embed_bx; /* (D); embed_bx = xscale · embed_b (FP16) */
    int embed_in;
    float xscale;
    float *pe32; /* (max_len, D) */
    mat_t pe16;  /* (max_len, D) 16-bit copies of pe32 (f16, bf16; f32 NULL) */
    gblock_t *blocks;
    dnorm_t after_norm;
    mat_t ctc; /* (V, D) */
    const float *ctc_b;
    void *dev32, *dev16, *devbf16; /* the weight blocks (the 16-bit ones of the same layout) */
    size_t bytes;
};

struct conformer_gpu_state {
    const conformer_gpu_model_t *m;
    ops_dtype_t dt;
    int max_batch, max_frames, max_t_out, max_rows;
    cudaStream_t stream;
    ops_cuda_t *g;
    void *mem; /* one block; the views below point into it */
    size_t bytes;
    int *d_lens, *d_tl, *d_ctc_lens; /* (max_batch) */
    float *x, *a, *u;                /* (rows, D) float32: residual stream, sub-module out, GLU */
    void *hn;                        /* (rows, D) dt: the GEMMs' input */
    float *big32;                    /* (rows, max(F, 3D)) float32 GEMM outputs */
    void *big;                       /* (rows, max(F, D)) dt; = big32 for FP32 */
    float *p32;                      /* (max_t_out, D) projected positions */
    void *att;                       /* attention scratch */
    size_t att_bytes;
    void *in0;             /* (max_batch, max_frames, in_dim) dt; FP32 only */
    void *cbuf[MAX_CONVS]; /* (max_batch, H_i, C, W_i) FP32; (max_batch, H_i, W_i, C) FP16 */
    void *col;             /* conv2d im2col scratch; FP32 only */
    size_t col_bytes;
    void *s16a, *s16b;   /* (rows, D) half: attention context / GLU output, depthwise output */
    void *p16;           /* (max_t_out, D) half: projected positions */
    void *lse;           /* (rows, CUDA_LSE_TILES(V)) float4: CTC head partials (FP16) */
    int *h_lens;         /* pinned (2 · max_batch): lens, then encoder lens, read by the graphs */
    cudaEvent_t lens_ev; /* the last forward's reads of h_lens are done */
    int graphs;          /* record and replay CUDA graphs */
    conformer_ffn_mode_t ffn; /* GEMMS where the fused kernel does not fit */
    graph_cache_t *gc;        /* GRAPH_SLOTS forwards by (batch, t_max, chunk, left, skip_cmvn,
                               * feats, enc) */
    /* stage profile (conformer_gpu_profile): events between stages, summed per stage */
    int prof, n_ev;
    cudaEvent_t ev[PROF_EVENTS];
    int ev_stage[PROF_EVENTS];
    double prof_ms[CONFORMER_GPU_STAGES];
};

/* ---- geometry ------------------------------------------------------------------------------ */

static int conv_out(int n, int k, int s)
{
    return n < k ? 0 : (n - k) / s + 1;
}

int conformer_gpu_out_len(const conformer_gpu_model_t *m, int frames)
{
    for (int i = 0; i < m->n_conv; i++)
        frames = conv_out(frames, m->conv[i].k, m->conv[i].stride);
    return frames;
}

const wenet_config_t *conformer_gpu_config(const conformer_gpu_model_t *m)
{
    return &m->cfg;
}

size_t conformer_gpu_model_bytes(const conformer_gpu_model_t *m)
{
    return m->bytes;
}

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, "conformer (gpu): %s: %s", what, cudaGetErrorString(e));
}

/* ---- 16-bit conversions for the upload (round to nearest even) ----------------------------- */

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal, exact multiple of 2^-24 after rounding */
        float v;
        memcpy(&v, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(v * 16777216.0f));
    }
    uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* float32 -> bfloat16: the top 16 bits, rounded to nearest even (subnormals kept, overflow to
 * inf, NaN stays a quiet NaN); what __float2bfloat16_rn gives on the device */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* the 16-bit copies a model holds */
#define PREC16 (CONFORMER_GPU_FP16 | CONFORMER_GPU_BF16)

/* ---- model loading: two passes over the same code, the first sizes the blocks --------------- */

/* vector (f32); matrix (copies as asked); matrix, f32 always; vector in 16 bits only */
enum { K_VEC, K_MAT, K_MAT32, K_VEC16 };

/* element order of a matrix's 16-bit copies (the FP32 copy keeps the file's order) */
enum { PERM_NONE, PERM_GLU, PERM_CONV, PERM_EMBED };
typedef struct {
    int kind;
    size_t a, b, c, d; /* GLU: half rows, cols; CONV: cout, cin, kh, kw; EMBED: rows, C, F' */
} perm_t;

/* source index of destination element i */
static size_t perm_src(const perm_t *p, size_t i)
{
    switch (p->kind) {
    case PERM_GLU: { /* dst row 2j = src row j (value), 2j + 1 = src row j + half (gate) */
        size_t r = i / p->b, c = i % p->b;
        return ((r & 1) ? r / 2 + p->a : r / 2) * p->b + c;
    }
    case PERM_CONV: { /* dst (co, i, j, ci) from src (co, ci, i, j) */
        size_t per = p->b * p->c * p->d, co = i / per, rem = i % per;
        size_t ci = rem % p->b, ij = rem / p->b;
        return co * per + (ci * p->c + ij / p->d) * p->d + ij % p->d;
    }
    case PERM_EMBED: { /* dst (r, f·C + c) from src (r, c·F' + f) */
        size_t per = p->b * p->c, r = i / per, rem = i % per;
        return r * per + (rem % p->b) * p->c + rem / p->b;
    }
    default:
        return i;
    }
}

typedef struct {
    conformer_tensor_fn get;
    void *user;
    hark_err_t *err;
    int pass, prec;
    size_t n32, n16; /* elements placed so far (n16: in each 16-bit block) */
    float *h32;      /* host staging (pass 1) */
    uint16_t *h16, *hb16;
    float *d32; /* device blocks (pass 1) */
    uint16_t *d16, *db16;
    perm_t perm; /* for the next matrix's 16-bit copies */
} gload_t;

static int fetch(gload_t *L, const float **host, int ndim, int64_t d0, int64_t d1, int64_t d2,
                 int64_t d3, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static int fetch(gload_t *L, const float **host, int ndim, int64_t d0, int64_t d1, int64_t d2,
                 int64_t d3, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[4] = {d0, d1, d2, d3};
    return L->get(L->user, name, ndim, shape, host, L->err);
}

/* Places n floats of host data; align starts a new 256-byte aligned run (cont = 0 for the
 * second and third parts of a concatenated matrix). */
static void place(gload_t *L, const float *host, size_t n, int kind, int align, const float **p32,
                  mat_t *p16)
{
    if (align) {
        L->n32 = (L->n32 + 63) & ~(size_t)63;
        L->n16 = (L->n16 + 127) & ~(size_t)127;
    }
    int want32 =
        kind == K_VEC || kind == K_MAT32 || (kind == K_MAT && (L->prec & CONFORMER_GPU_FP32));
    int want16 = kind != K_VEC && (L->prec & PREC16);
    if (want32) {
        if (L->pass) {
            memcpy(L->h32 + L->n32, host, n * sizeof(float));
            if (p32)
                *p32 = L->d32 + L->n32;
        }
        L->n32 += n;
    }
    if (want16) {
        if (L->pass && (L->prec & CONFORMER_GPU_FP16)) {
            for (size_t i = 0; i < n; i++)
                L->h16[L->n16 + i] = f32_to_f16(host[perm_src(&L->perm, i)]);
            if (p16)
                p16->f16 = L->d16 + L->n16;
        }
        if (L->pass && (L->prec & CONFORMER_GPU_BF16)) {
            for (size_t i = 0; i < n; i++)
                L->hb16[L->n16 + i] = f32_to_bf16(host[perm_src(&L->perm, i)]);
            if (p16)
                p16->bf16 = L->db16 + L->n16;
        }
        L->n16 += n;
    }
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != HARK_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

/* fetch + place of one tensor; mat may be NULL for vectors */
static int put(gload_t *L, int kind, int align, const float **v32, mat_t *mat, int ndim, int64_t d0,
               int64_t d1, int64_t d2, int64_t d3, const char *fmt, ...)
    __attribute__((format(printf, 11, 12)));
static int put(gload_t *L, int kind, int align, const float **v32, mat_t *mat, int ndim, int64_t d0,
               int64_t d1, int64_t d2, int64_t d3, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const float *host = NULL;
    TRY(fetch(L, &host, ndim, d0, d1, d2, d3, "%s", name));
    size_t n = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1) * (ndim > 2 ? (size_t)d2 : 1) *
               (ndim > 3 ? (size_t)d3 : 1);
    place(L, host, n, kind, align, mat ? &mat->f32 : v32, mat);
    L->perm.kind = PERM_NONE;
    return HARK_OK;
}

#define VEC(dst, n, ...) put(L, K_VEC, 1, dst, NULL, 1, n, 0, 0, 0, __VA_ARGS__)
#define MAT(dst, o, i, ...) put(L, K_MAT, 1, NULL, dst, 2, o, i, 0, 0, __VA_ARGS__)

static int load_lin(gload_t *L, mat_t *w, const float **b, int out, int in, const char *prefix)
{
    TRY(MAT(w, out, in, "%s.weight", prefix));
    TRY(VEC(b, out, "%s.bias", prefix));
    return HARK_OK;
}

/* a (n) vector times `scale`, as an extra FP32 vector (16-bit models only; NULL otherwise) */
static int load_scaled(gload_t *L, const float **dst, int n, float scale, float *scratch,
                       const char *name)
{
    if (!(L->prec & PREC16))
        return HARK_OK;
    const float *host = NULL;
    TRY(fetch(L, &host, 1, n, 0, 0, 0, "%s", name));
    for (int i = 0; i < n; i++)
        scratch[i] = scale * host[i];
    place(L, scratch, (size_t)n, K_VEC, 1, dst, NULL);
    return HARK_OK;
}

static int load_norm(gload_t *L, dnorm_t *n, int d, const char *prefix)
{
    TRY(VEC(&n->g, d, "%s.weight", prefix));
    TRY(VEC(&n->b, d, "%s.bias", prefix));
    return HARK_OK;
}

static int load_block(gload_t *L, conformer_gpu_model_t *m, gblock_t *bk, int i, float *scratch)
{
    const wenet_config_t *c = &m->cfg;
    int d = m->d, f = m->ffn;
    char p[96], q[160];
    mat_t hb = {NULL, NULL, NULL};
#define SUB(name) (snprintf(q, sizeof q, "%s.%s", p, name), q)
    snprintf(p, sizeof p, "encoder.encoders.%d", i);
    float ffs = c->macaron ? 0.5f : 1.0f;
    if (c->macaron) {
        TRY(load_norm(L, &bk->norm_ff_macaron, d, SUB("norm_ff_macaron")));
        TRY(load_lin(L, &bk->ffm1, &bk->ffm1_b, f, d, SUB("feed_forward_macaron.w_1")));
        TRY(load_lin(L, &bk->ffm2, &bk->ffm2_b, d, f, SUB("feed_forward_macaron.w_2")));
        TRY(load_scaled(L, &bk->ffm2_bh, d, ffs, scratch, SUB("feed_forward_macaron.w_2.bias")));
        TRY(put(L, K_VEC16, 1, NULL, &hb, 1, f, 0, 0, 0, "%s",
                SUB("feed_forward_macaron.w_1.bias")));
        bk->ffm1_bh = hb;
    }
    TRY(load_norm(L, &bk->norm_mha, d, SUB("norm_mha")));
    /* q, k, v weights and biases concatenated for one GEMM */
    static const char *const qkv[3] = {"linear_q", "linear_k", "linear_v"};
    for (int j = 0; j < 3; j++)
        TRY(put(L, K_MAT, j == 0, NULL, j == 0 ? &bk->qkv : NULL, 2, d, d, 0, 0,
                "%s.self_attn.%s.weight", p, qkv[j]));
    for (int j = 0; j < 3; j++)
        TRY(put(L, K_VEC, j == 0, j == 0 ? &bk->qkv_b : NULL, NULL, 1, d, 0, 0, 0,
                "%s.self_attn.%s.bias", p, qkv[j]));
    /* the same in 16 bits (a matrix whose 16-bit copies alone are kept) */
    for (int j = 0; j < 3; j++)
        TRY(put(L, K_VEC16, j == 0, NULL, j == 0 ? &hb : NULL, 1, d, 0, 0, 0,
                "%s.self_attn.%s.bias", p, qkv[j]));
    bk->qkv_bh = hb;
    TRY(load_lin(L, &bk->o, &bk->o_b, d, d, SUB("self_attn.linear_out")));
    if (c->pos == POS_REL) {
        TRY(MAT(&bk->pos, d, d, "%s.self_attn.linear_pos.weight", p));
        TRY(put(L, K_VEC, 1, &bk->pos_u, NULL, 2, m->h, m->dk, 0, 0, "%s.self_attn.pos_bias_u", p));
        TRY(put(L, K_VEC, 1, &bk->pos_v, NULL, 2, m->h, m->dk, 0, 0, "%s.self_attn.pos_bias_v", p));
    }
    if (c->use_cnn_module) {
        TRY(load_norm(L, &bk->norm_conv, d, SUB("norm_conv")));
        TRY(load_norm(L, &bk->norm_final, d, SUB("norm_final")));
        L->perm = (perm_t){PERM_GLU, (size_t)d, (size_t)d, 0, 0};
        TRY(put(L, K_MAT, 1, NULL, &bk->pw1, 3, 2 * d, d, 1, 0,
                "%s.conv_module.pointwise_conv1.weight", p));
        const float *pw1_b_host = NULL;
        TRY(fetch(L, &pw1_b_host, 1, 2 * d, 0, 0, 0, "%s.conv_module.pointwise_conv1.bias", p));
        place(L, pw1_b_host, (size_t)2 * d, K_VEC, 1, &bk->pw1_b, NULL);
        if (L->prec & PREC16) {
            for (int j = 0; j < d; j++) {
                scratch[2 * j] = pw1_b_host[j];
                scratch[2 * j + 1] = pw1_b_host[d + j];
            }
            place(L, scratch, (size_t)2 * d, K_VEC, 1, &bk->pw1_b16, NULL);
        }
        TRY(put(L, K_VEC, 1, &bk->dw_w, NULL, 3, d, 1, m->kernel, 0,
                "%s.conv_module.depthwise_conv.weight", p));
        TRY(VEC(&bk->dw_b, d, "%s.conv_module.depthwise_conv.bias", p));
        TRY(load_norm(L, &bk->cnn_norm, d, SUB("conv_module.norm")));
        if (c->cnn_norm == CNN_NORM_BATCH) {
            TRY(VEC(&bk->bn_mean, d, "%s.conv_module.norm.running_mean", p));
            TRY(VEC(&bk->bn_var, d, "%s.conv_module.norm.running_var", p));
        }
        TRY(put(L, K_MAT, 1, NULL, &bk->pw2, 3, d, d, 1, 0, "%s.conv_module.pointwise_conv2.weight",
                p));
        TRY(VEC(&bk->pw2_b, d, "%s.conv_module.pointwise_conv2.bias", p));
        if (c->causal && m->kernel > 1) {
            /* the causal conv's left context: WeNet pads zeros before pointwise_conv1, which
             * become glu(bias) (conformer.c, README note 7) */
            int left = m->kernel - 1;
            glu_ref(scratch, pw1_b_host, 1, d);
            for (int r = 1; r < left; r++)
                memcpy(scratch + (size_t)r * d, scratch, (size_t)d * sizeof(float));
            place(L, scratch, (size_t)left * d, K_VEC, 1, &bk->causal_left, NULL);
        }
    }
    TRY(load_norm(L, &bk->norm_ff, d, SUB("norm_ff")));
    TRY(load_lin(L, &bk->ff1, &bk->ff1_b, f, d, SUB("feed_forward.w_1")));
    TRY(load_lin(L, &bk->ff2, &bk->ff2_b, d, f, SUB("feed_forward.w_2")));
    TRY(load_scaled(L, &bk->ff2_bh, d, ffs, scratch, SUB("feed_forward.w_2.bias")));
    TRY(put(L, K_VEC16, 1, NULL, &hb, 1, f, 0, 0, 0, "%s", SUB("feed_forward.w_1.bias")));
    bk->ff1_bh = hb;
#undef SUB
    return HARK_OK;
}

static int load_all(gload_t *L, conformer_gpu_model_t *m, float *scratch)
{
    const wenet_config_t *cfg = &m->cfg;
    if (cfg->has_cmvn) {
        TRY(VEC(&m->cmvn_mean, m->in_dim, "encoder.global_cmvn.mean"));
        TRY(VEC(&m->cmvn_istd, m->in_dim, "encoder.global_cmvn.istd"));
    }
    for (int i = 0; i < m->n_conv; i++) {
        gconv_t *cv = &m->conv[i];
        L->perm =
            (perm_t){PERM_CONV, (size_t)cv->cout, (size_t)cv->cin, (size_t)cv->k, (size_t)cv->k};
        TRY(put(L, K_MAT32, 1, NULL, &cv->w, 4, cv->cout, cv->cin, cv->k, cv->k,
                "encoder.embed.conv.%d.weight", 2 * i));
        TRY(VEC(&cv->b, cv->cout, "encoder.embed.conv.%d.bias", 2 * i));
    }
    if (cfg->subsample == SUBSAMPLE_CONV2D || cfg->subsample == SUBSAMPLE_CONV2D6 ||
        cfg->subsample == SUBSAMPLE_CONV2D8) {
        size_t c = (size_t)m->conv[m->n_conv - 1].cout;
        L->perm = (perm_t){PERM_EMBED, (size_t)m->d, c, (size_t)m->embed_in / c, 0};
    }
    const char *emb =
        cfg->subsample == SUBSAMPLE_CONV2D ? "encoder.embed.out.0" : "encoder.embed.linear";
    char eb[64];
    snprintf(eb, sizeof eb, "%s.bias", emb);
    TRY(load_lin(L, &m->embed, &m->embed_b, m->d, m->embed_in, emb));
    TRY(load_scaled(L, &m->embed_bx, m->d, m->xscale, scratch, eb));
    for (int i = 0; i < cfg->n_blocks; i++)
        TRY(load_block(L, m, &m->blocks[i], i, scratch));
    if (cfg->normalize_before)
        TRY(load_norm(L, &m->after_norm, m->d, "encoder.after_norm"));
    TRY(load_lin(L, &m->ctc, &m->ctc_b, m->vocab, m->d, "ctc.ctc_lo"));
    L->n32 = (L->n32 + 63) & ~(size_t)63; /* the positional tables follow, aligned */
    L->n16 = (L->n16 + 127) & ~(size_t)127;
    return HARK_OK;
}

static int check_config(const wenet_config_t *c, hark_err_t *err)
{
    if (c->d_model <= 0 || c->n_heads <= 0 || c->d_model % c->n_heads != 0 || c->d_model % 2)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer (gpu): d_model %d must be even and divisible by n_heads %d",
                       c->d_model, c->n_heads);
    if (c->input_dim <= 0 || c->ffn_dim <= 0 || c->n_blocks < 0 || c->max_len <= 0 ||
        c->vocab_size <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer (gpu): bad sizes (input_dim %d, ffn_dim %d, n_blocks %d, "
                       "max_len %d, vocab %d)",
                       c->input_dim, c->ffn_dim, c->n_blocks, c->max_len, c->vocab_size);
    if (c->subsample != SUBSAMPLE_CONV2D && c->subsample != SUBSAMPLE_CONV2D6 &&
        c->subsample != SUBSAMPLE_CONV2D8)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer (gpu): subsampling %d",
                       (int)c->subsample);
    if (c->pos != POS_REL && c->pos != POS_ABS)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer (gpu): positional encoding %d",
                       (int)c->pos);
    if (c->activation != ACT_SWISH && c->activation != ACT_RELU && c->activation != ACT_GELU)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer (gpu): activation %d",
                       (int)c->activation);
    if (c->use_cnn_module && (c->cnn_kernel <= 0 || (!c->causal && c->cnn_kernel % 2 == 0) ||
                              (c->cnn_norm != CNN_NORM_BATCH && c->cnn_norm != CNN_NORM_LAYER)))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer (gpu): cnn_module_kernel %d (odd unless causal), norm %d",
                       c->cnn_kernel, (int)c->cnn_norm);
    if (c->d_model > 8192 || c->input_dim > 8192)
        return err_set(err, HARK_ERR_UNSUPPORTED, "conformer (gpu): d_model %d too large",
                       c->d_model);
    return HARK_OK;
}

/* what the 16-bit kernels need, FP16 and BF16 alike (every WeNet recipe's sizes fit) */
static int check_fp16(const wenet_config_t *c, hark_err_t *err)
{
    int dk = c->d_model / c->n_heads;
    if (c->d_model % 8 || c->ffn_dim % 8 || c->d_model > CUDA_ROWS_NORM_MAX_D ||
        !cuda_flash_attention_supported(dk) || (c->use_cnn_module && c->cnn_kernel > 64))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "conformer (gpu): fp16 and bf16 need d_model and ffn_dim multiples of 8, "
                       "d_model <= %d, a head width <= 128 (<= 64 off Hopper: shared memory) and "
                       "cnn_module_kernel <= 64 (d_model "
                       "%d, ffn_dim %d, head width %d, kernel %d); use fp32",
                       CUDA_ROWS_NORM_MAX_D, c->d_model, c->ffn_dim, dk, c->cnn_kernel);
    return HARK_OK;
}

int conformer_gpu_model_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                               int precisions, conformer_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    int rc = check_config(cfg, err);
    if (rc != HARK_OK)
        return rc;
    if (!(precisions & (CONFORMER_GPU_FP32 | PREC16)) ||
        (precisions & ~(CONFORMER_GPU_FP32 | PREC16)))
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer (gpu): precisions %d", precisions);
    if ((precisions & PREC16) && (rc = check_fp16(cfg, err)) != HARK_OK)
        return rc;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        cudaGetLastError();
        return err_set(err, HARK_ERR_NO_DEVICE, "conformer (gpu): no CUDA device");
    }
    conformer_gpu_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "conformer (gpu): out of memory");
    m->cfg = *cfg;
    m->precisions = precisions;
    m->d = cfg->d_model;
    m->h = cfg->n_heads;
    m->dk = m->d / m->h;
    m->ffn = cfg->ffn_dim;
    m->kernel = cfg->use_cnn_module ? cfg->cnn_kernel : 0;
    m->vocab = cfg->vocab_size;
    m->in_dim = cfg->input_dim;
    m->xscale = (float)sqrt((double)m->d);
    switch (cfg->subsample) {
    case SUBSAMPLE_CONV2D:
        m->n_conv = 2;
        m->conv[0] = (gconv_t){3, 2, 1, m->d, {NULL, NULL, NULL}, NULL};
        m->conv[1] = (gconv_t){3, 2, m->d, m->d, {NULL, NULL, NULL}, NULL};
        break;
    case SUBSAMPLE_CONV2D6:
        m->n_conv = 2;
        m->conv[0] = (gconv_t){3, 2, 1, m->d, {NULL, NULL, NULL}, NULL};
        m->conv[1] = (gconv_t){5, 3, m->d, m->d, {NULL, NULL, NULL}, NULL};
        break;
    case SUBSAMPLE_CONV2D8:
        m->n_conv = 3;
        for (int i = 0; i < 3; i++)
            m->conv[i] = (gconv_t){3, 2, i ? m->d : 1, m->d, {NULL, NULL, NULL}, NULL};
        break;
    }
    int f = m->in_dim;
    for (int i = 0; i < m->n_conv; i++)
        f = conv_out(f, m->conv[i].k, m->conv[i].stride);
    m->embed_in = m->conv[m->n_conv - 1].cout * f;
    gload_t ld = {.get = get, .user = user, .err = err, .prec = precisions}, *L = &ld;
    float *scratch = hark_malloc((size_t)(m->kernel > 2 ? m->kernel : 2) * m->d * sizeof(float));
    m->blocks = hark_calloc(cfg->n_blocks > 0 ? (size_t)cfg->n_blocks : 1, sizeof *m->blocks);
    if (f <= 0) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "conformer (gpu): input_dim %d is too small for the subsampling", m->in_dim);
        goto fail;
    }
    if (!scratch || !m->blocks) {
        rc = err_set(err, HARK_ERR_NOMEM, "conformer (gpu): out of memory");
        goto fail;
    }
    if ((rc = load_all(L, m, scratch)) != HARK_OK) /* pass 0: sizes and shape checks */
        goto fail;
    size_t pe_n = (size_t)cfg->max_len * m->d;
    /* one block per 16-bit type asked for, each (n16 + pe_n) halves in the same layout */
    int f16 = (precisions & CONFORMER_GPU_FP16) != 0, bf16 = (precisions & CONFORMER_GPU_BF16) != 0;
    size_t b32 = (ld.n32 + pe_n) * sizeof(float), b16 = (ld.n16 + pe_n) * 2;
    ld.h32 = hark_malloc(ld.n32 * sizeof(float) + 1);
    ld.h16 = f16 ? hark_malloc(ld.n16 * 2 + 1) : NULL;
    ld.hb16 = bf16 ? hark_malloc(ld.n16 * 2 + 1) : NULL;
    if (!ld.h32 || (f16 && !ld.h16) || (bf16 && !ld.hb16)) {
        rc = err_set(err, HARK_ERR_NOMEM, "conformer (gpu): out of host memory for staging");
        goto fail;
    }
    cudaError_t e = cudaMalloc(&m->dev32, b32);
    if (e == cudaSuccess && f16)
        e = cudaMalloc(&m->dev16, b16);
    if (e == cudaSuccess && bf16)
        e = cudaMalloc(&m->devbf16, b16);
    if (e != cudaSuccess) {
        rc = cuda_err(err, e, "weights allocation");
        goto fail;
    }
    m->bytes = b32 + (size_t)(f16 + bf16) * b16;
    ld.d32 = m->dev32;
    ld.d16 = m->dev16;
    ld.db16 = m->devbf16;
    ld.pass = 1;
    ld.n32 = ld.n16 = 0;
    if ((rc = load_all(L, m, scratch)) != HARK_OK)
        goto fail;
    m->pe32 = (float *)m->dev32 + ld.n32;
    if (f16)
        m->pe16.f16 = (uint16_t *)m->dev16 + ld.n16;
    if (bf16)
        m->pe16.bf16 = (uint16_t *)m->devbf16 + ld.n16;
    e = cudaMemcpy(m->dev32, ld.h32, ld.n32 * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess && f16)
        e = cudaMemcpy(m->dev16, ld.h16, ld.n16 * 2, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && bf16)
        e = cudaMemcpy(m->devbf16, ld.hb16, ld.n16 * 2, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        rc = cuda_err(err, e, "weights upload");
        goto fail;
    }
    if ((rc = cuda_pos_enc(m->pe32, cfg->max_len, m->d, NULL, err)) != HARK_OK)
        goto fail;
    if (f16 && (rc = cuda_cast((void *)m->pe16.f16, OPS_F16, m->pe32, OPS_F32, pe_n, NULL, err)))
        goto fail;
    if (bf16 && (rc = cuda_cast((void *)m->pe16.bf16, OPS_BF16, m->pe32, OPS_F32, pe_n, NULL, err)))
        goto fail;
    if ((e = cudaDeviceSynchronize()) != cudaSuccess) {
        rc = cuda_err(err, e, "positional table");
        goto fail;
    }
    hark_free(ld.h32);
    hark_free(ld.h16);
    hark_free(ld.hb16);
    hark_free(scratch);
    *out = m;
    return HARK_OK;
fail:
    hark_free(ld.h32);
    hark_free(ld.h16);
    hark_free(ld.hb16);
    hark_free(scratch);
    conformer_gpu_model_destroy(m);
    return rc;
}

int conformer_gpu_model_create_st(const wenet_config_t *cfg, const safetensors_t *st,
                                  int precisions, conformer_gpu_model_t **out, hark_err_t *err)
{
    return conformer_gpu_model_create(cfg, st_get_f32, (void *)st, precisions, out, err);
}

void conformer_gpu_model_destroy(conformer_gpu_model_t *m)
{
    if (!m)
        return;
    cudaFree(m->dev32);
    cudaFree(m->dev16);
    cudaFree(m->devbf16);
    hark_free(m->blocks);
    hark_free(m);
}

/* ---- state --------------------------------------------------------------------------------- */

static size_t al(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

int conformer_gpu_state_create(const conformer_gpu_model_t *m, int precision, int max_batch,
                               int max_frames, conformer_gpu_state_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_batch <= 0 || max_batch > CUDA_MAX_LENS || max_frames <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer (gpu): max_batch %d (1..%d), max_frames %d", max_batch,
                       CUDA_MAX_LENS, max_frames);
    if ((precision != CONFORMER_GPU_FP32 && precision != CONFORMER_GPU_FP16 &&
         precision != CONFORMER_GPU_BF16) ||
        !(m->precisions & precision))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer (gpu): precision %d not uploaded (model holds %d)", precision,
                       m->precisions);
    conformer_gpu_state_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "conformer (gpu): out of memory");
    s->m = m;
    s->dt = precision == CONFORMER_GPU_FP16   ? OPS_F16
            : precision == CONFORMER_GPU_BF16 ? OPS_BF16
                                              : OPS_F32;
    s->max_batch = max_batch;
    s->max_frames = max_frames;
    const char *ng = getenv("HARK_NO_GRAPHS");
    s->graphs = !(ng && *ng && strcmp(ng, "0"));
    int t_out = conformer_gpu_out_len(m, max_frames);
    s->max_t_out = t_out < 1 ? 1 : t_out;
    s->max_rows = max_batch * s->max_t_out;
    int h16 = s->dt != OPS_F32; /* the FP16 forward, in either 16-bit type */
    size_t rows = (size_t)s->max_rows, d = (size_t)m->d, es = ops_dtype_size(s->dt);
    size_t f = (size_t)m->ffn;
    size_t w32 = f > 3 * d ? f : 3 * d;
    int rel = m->cfg.pos == POS_REL;
    s->att_bytes =
        h16 ? 0 : cuda_attention_scratch_bytes(max_batch, s->max_t_out, m->h, m->dk, rel, s->dt);
    /* conv stack: outputs per layer and (FP32) the largest im2col block */
    size_t csz[MAX_CONVS] = {0};
    int hh = max_frames, ww = m->in_dim;
    s->col_bytes = 0;
    for (int i = 0; i < m->n_conv; i++) {
        const gconv_t *cv = &m->conv[i];
        hh = conv_out(hh, cv->k, cv->stride);
        ww = conv_out(ww, cv->k, cv->stride);
        csz[i] = al((size_t)max_batch * (hh > 0 ? hh : 1) * cv->cout * (ww > 0 ? ww : 1) * es);
        size_t one = cuda_conv2d_scratch_bytes(1, cv->cin, cv->cout, cv->k, cv->k, ww, s->dt);
        if (h16 || one == 0 || hh <= 0)
            continue;
        size_t need =
            cuda_conv2d_scratch_bytes(max_batch * hh, cv->cin, cv->cout, cv->k, cv->k, ww, s->dt);
        size_t blk = need < CONV_SCRATCH_BUDGET ? need : CONV_SCRATCH_BUDGET;
        blk = blk > one ? blk : one;
        s->col_bytes = blk > s->col_bytes ? blk : s->col_bytes;
    }
    size_t total = 3 * al((size_t)max_batch * sizeof(int)) + al(rows * d * 4) + al(rows * d * es) +
                   al(s->col_bytes);
    size_t lse_bytes = rows * (size_t)CUDA_LSE_TILES(m->vocab) * 16;
    if (h16) /* x; hn; big = FFN hidden or QKV; ctx/GLU; depthwise out; positions; CTC partials */
        total += al(rows * w32 * 2) + 2 * al(rows * d * 2) + al((size_t)s->max_t_out * d * 2) +
                 al(lse_bytes);
    else
        total += 2 * al(rows * d * 4) + al(rows * w32 * 4) + al((size_t)s->max_t_out * d * 4) +
                 al(s->att_bytes) + al((size_t)max_batch * max_frames * m->in_dim * es);
    for (int i = 0; i < m->n_conv; i++)
        total += csz[i];
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        hark_free(s);
        return cuda_err(err, e, "stream");
    }
    if (!(s->gc = graph_cache_create(GRAPH_SLOTS, s->stream))) {
        conformer_gpu_state_destroy(s);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    int rc = ops_cuda_create(s->stream, &s->g, err);
    if (rc != HARK_OK) {
        conformer_gpu_state_destroy(s);
        return rc;
    }
    const char *ff = getenv("HARK_FFN");
    conformer_gpu_set_fused_ffn(s, ff && !strcmp(ff, "gemm")    ? CONFORMER_FFN_GEMMS
                                   : ff && !strcmp(ff, "fused") ? CONFORMER_FFN_FUSED
                                                                : CONFORMER_FFN_AUTO);
    if ((e = cudaEventCreateWithFlags(&s->lens_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&s->h_lens, 2 * (size_t)max_batch * sizeof(int))) !=
            cudaSuccess) {
        conformer_gpu_state_destroy(s);
        return cuda_err(err, e, "pinned lengths");
    }
    if ((e = cudaMalloc(&s->mem, total)) != cudaSuccess) {
        conformer_gpu_state_destroy(s);
        return err_set(err, HARK_ERR_NOMEM,
                       "conformer (gpu): %zu MiB of scratch for batch %d x %d frames: %s",
                       total >> 20, max_batch, max_frames, cudaGetErrorString(e));
    }
    s->bytes = total + ops_cuda_workspace_bytes();
    char *p = s->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)p, p += al(nbytes))
    TAKE(s->d_lens, int *, (size_t)max_batch * sizeof(int));
    TAKE(s->d_tl, int *, (size_t)max_batch * sizeof(int));
    TAKE(s->d_ctc_lens, int *, (size_t)max_batch * sizeof(int));
    TAKE(s->x, float *, rows *d * 4);
    TAKE(s->hn, void *, rows *d *es);
    if (h16) {
        TAKE(s->big, void *, rows *w32 * 2);
        TAKE(s->s16a, void *, rows *d * 2);
        TAKE(s->s16b, void *, rows *d * 2);
        TAKE(s->p16, void *, (size_t)s->max_t_out *d * 2);
        TAKE(s->lse, void *, lse_bytes);
    } else {
        TAKE(s->a, float *, rows *d * 4);
        TAKE(s->u, float *, rows *d * 4);
        TAKE(s->big32, float *, rows *w32 * 4);
        s->big = s->big32;
        TAKE(s->p32, float *, (size_t)s->max_t_out *d * 4);
        TAKE(s->att, void *, s->att_bytes);
        TAKE(s->in0, void *, (size_t)max_batch *max_frames * m->in_dim * es);
    }
    for (int i = 0; i < m->n_conv; i++) {
        s->cbuf[i] = p;
        p += csz[i];
    }
    TAKE(s->col, void *, s->col_bytes);
#undef TAKE
    HARK_ASSERT((size_t)(p - (char *)s->mem) == total);
    *out = s;
    return HARK_OK;
}

void conformer_gpu_state_destroy(conformer_gpu_state_t *s)
{
    if (!s)
        return;
    if (s->stream)
        cudaStreamSynchronize(s->stream);
    graph_cache_destroy(s->gc);
    for (int i = 0; i < PROF_EVENTS; i++)
        if (s->ev[i])
            cudaEventDestroy(s->ev[i]);
    ops_cuda_destroy(s->g);
    cudaFree(s->mem);
    cudaFreeHost(s->h_lens);
    if (s->lens_ev)
        cudaEventDestroy(s->lens_ev);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    hark_free(s);
}

void conformer_gpu_set_graphs(conformer_gpu_state_t *s, int on)
{
    if (!on)
        graph_cache_clear(s->gc);
    s->graphs = on != 0;
}

void conformer_gpu_set_fused_ffn(conformer_gpu_state_t *s, conformer_ffn_mode_t mode)
{
    graph_cache_clear(s->gc);
    s->ffn = mode;
    if (s->dt == OPS_F32 || !cuda_ffn_f16_fits(s->g, s->m->d, s->m->ffn))
        s->ffn = CONFORMER_FFN_GEMMS;
}

void *conformer_gpu_stream(const conformer_gpu_state_t *s)
{
    return (void *)s->stream;
}

size_t conformer_gpu_state_bytes(const conformer_gpu_state_t *s)
{
    return s->bytes;
}

const char *conformer_gpu_path_name(const conformer_gpu_state_t *s)
{
    return gpu_path_name((gpu_path_t)ops_cuda_path(s->g));
}

int conformer_gpu_sync(conformer_gpu_state_t *s, hark_err_t *err)
{
    cudaError_t e = cudaStreamSynchronize(s->stream);
    return e != cudaSuccess ? cuda_err(err, e, "stream") : HARK_OK;
}

/* ---- forward ------------------------------------------------------------------------------- */

typedef struct {
    conformer_gpu_state_t *s;
    int batch, t, rows; /* padded: rows = batch · t encoder frames */
    int chunk, left;
    hark_err_t *err;
    /* chunk streaming (conformer_gpu_forward_chunks): rows are the packed chunk rows, attention
     * and the depthwise conv go through the cache pool; NULL for the offline forward */
    const struct conformer_gpu_chunks *ck;
    const cuda_chunk_meta_t *mt; /* device metadata of the step */
    int max_keys;                /* the most keys a row of the step attends to */
} gfwd_t;

static int chunk_mhsa(const gfwd_t *F, const gblock_t *bk);
static int chunk_conv_module(const gfwd_t *F, const gblock_t *bk);
static int chunk_trace(const gfwd_t *F, const float *d_x, int cols, const char *fmt, int i);

/* profiling: the time since the previous mark is charged to `stage` (a no-op unless profiling) */
static void mark(conformer_gpu_state_t *s, int stage)
{
    if (!s->prof || s->n_ev >= PROF_EVENTS)
        return;
    if (!s->ev[s->n_ev] && cudaEventCreate(&s->ev[s->n_ev]) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    cudaEventRecord(s->ev[s->n_ev], s->stream);
    s->ev_stage[s->n_ev++] = stage;
}

/* the state's copy of w: f32, f16 or bf16 */
static const void *wmat_dt(ops_dtype_t dt, const mat_t *w)
{
    return dt == OPS_F16 ? w->f16 : dt == OPS_BF16 ? w->bf16 : (const void *)w->f32;
}

static const void *wmat(const gfwd_t *F, const mat_t *w)
{
    return wmat_dt(F->s->dt, w);
}

static cuda_act_t act_of(const wenet_config_t *c)
{
    return c->activation == ACT_RELU   ? CUDA_ACT_RELU
           : c->activation == ACT_GELU ? CUDA_ACT_GELU
                                       : CUDA_ACT_SWISH;
}

/* y (rows, out) float32 = in (rows, k) · wᵀ, in of the state's dtype */
static int gemm_w(const gfwd_t *F, float *y, const void *in, const mat_t *w, int rows, int out,
                  int k)
{
    return cuda_gemm(y, OPS_F32, in, wmat(F, w), F->s->dt, rows, out, k, k, k, out, 1, 1.0f, 0.0f,
                     1, 0, 0, 0, F->s->g, F->err);
}

/* x += alpha · (a + bias), then: pre-norm, hn = next(x) (none: hn untouched); post-norm,
 * x = own(x) and hn = x in the state's dtype. */
static int add_norm(const gfwd_t *F, const float *bias, float alpha, const dnorm_t *own,
                    const dnorm_t *next)
{
    conformer_gpu_state_t *s = F->s;
    int d = s->m->d;
    if (s->m->cfg.normalize_before)
        return cuda_residual_layer_norm(s->x, next ? s->hn : NULL, s->dt, s->x, s->a, bias, alpha,
                                        NULL, 0, next ? next->g : NULL, next ? next->b : NULL,
                                        next != NULL, 0, F->rows, d, NORM_EPS, s->stream, F->err);
    return cuda_residual_layer_norm(s->x, s->hn, s->dt, s->x, s->a, bias, alpha, NULL, 0, own->g,
                                    own->b, 1, 1, F->rows, d, NORM_EPS, s->stream, F->err);
}

/* a = w2(act(w1(hn) + b1)) (w2's bias is added by the residual kernel) */
static int ffn(const gfwd_t *F, const mat_t *w1, const float *b1, const mat_t *w2)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    TRY(gemm_w(F, s->big32, s->hn, w1, F->rows, m->ffn, m->d));
    TRY(cuda_bias_act(s->big, s->dt, s->big32, b1, F->rows, m->ffn, act_of(&m->cfg), s->stream,
                      F->err));
    return gemm_w(F, s->a, s->big, w2, F->rows, m->d, m->ffn);
}

static int mhsa(const gfwd_t *F, const gblock_t *bk)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    int d = m->d, rel = m->cfg.pos == POS_REL;
    if (F->ck)
        return chunk_mhsa(F, bk);
    TRY(gemm_w(F, s->big32, s->hn, &bk->qkv, F->rows, 3 * d, d));
    if (rel) /* p = linear_pos(pe[0:t]) */
        TRY(cuda_gemm(s->p32, OPS_F32, s->dt == OPS_F32 ? (const void *)m->pe32 : wmat(F, &m->pe16),
                      wmat(F, &bk->pos), s->dt, F->t, d, d, d, d, d, 1, 1.0f, 0.0f, 1, 0, 0, 0,
                      s->g, F->err));
    /* ctx goes to big, which is big32 in FP32: the q/k/v there are packed into the attention
     * scratch before the value GEMMs write ctx */
    TRY(cuda_attention(s->big, s->dt, s->att, s->big32, s->big32 + d, s->big32 + 2 * d, 3 * d,
                       bk->qkv_b, bk->qkv_b + d, bk->qkv_b + 2 * d, rel ? s->p32 : NULL,
                       rel ? bk->pos_u : NULL, rel ? bk->pos_v : NULL, s->d_tl, F->chunk, F->left,
                       F->batch, F->t, m->h, m->dk, 1.0f / sqrtf((float)m->dk), s->g, F->err));
    return gemm_w(F, s->a, s->big, &bk->o, F->rows, d, d);
}

static int conv_module(const gfwd_t *F, const gblock_t *bk)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    int d = m->d, kk = m->kernel, causal = m->cfg.causal;
    if (F->ck)
        return chunk_conv_module(F, bk);
    TRY(gemm_w(F, s->big32, s->hn, &bk->pw1, F->rows, 2 * d, d));
    TRY(cuda_glu(s->u, OPS_F32, s->big32, bk->pw1_b, F->rows, d, s->stream, F->err));
    int bn = m->cfg.cnn_norm == CNN_NORM_BATCH;
    TRY(cuda_depthwise_conv_norm_act(
        s->big, s->dt, s->u, causal ? bk->causal_left : NULL, bk->dw_w, bk->dw_b, s->d_tl, F->batch,
        F->t, d, kk, causal ? kk - 1 : (kk - 1) / 2, bn ? CUDA_NORM_BATCH : CUDA_NORM_LAYER,
        bk->cnn_norm.g, bk->cnn_norm.b, bn ? bk->bn_mean : NULL, bn ? bk->bn_var : NULL, NORM_EPS,
        act_of(&m->cfg), s->stream, F->err));
    return gemm_w(F, s->a, s->big, &bk->pw2, F->rows, d, d);
}

/* the pre-norm that opens block i (NULL past the last block) */
static const dnorm_t *first_norm(const conformer_gpu_model_t *m, int i)
{
    if (i >= m->cfg.n_blocks)
        return NULL;
    return m->cfg.macaron ? &m->blocks[i].norm_ff_macaron : &m->blocks[i].norm_mha;
}

static int block_forward(const gfwd_t *F, int i)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const wenet_config_t *c = &m->cfg;
    const gblock_t *bk = &m->blocks[i];
    float ff_scale = c->macaron ? 0.5f : 1.0f;
    int cnn = c->use_cnn_module;
    if (c->macaron) {
        TRY(ffn(F, &bk->ffm1, bk->ffm1_b, &bk->ffm2));
        TRY(add_norm(F, bk->ffm2_b, ff_scale, &bk->norm_ff_macaron, &bk->norm_mha));
        TRY(chunk_trace(F, s->x, m->d, "block %d ffn_macaron", i));
    }
    TRY(mhsa(F, bk));
    TRY(add_norm(F, bk->o_b, 1.0f, &bk->norm_mha, cnn ? &bk->norm_conv : &bk->norm_ff));
    TRY(chunk_trace(F, s->x, m->d, "block %d mhsa", i));
    if (cnn) {
        TRY(conv_module(F, bk));
        TRY(add_norm(F, bk->pw2_b, 1.0f, &bk->norm_conv, &bk->norm_ff));
        TRY(chunk_trace(F, s->x, m->d, "block %d conv", i));
    }
    TRY(ffn(F, &bk->ff1, bk->ff1_b, &bk->ff2));
    const dnorm_t *next = first_norm(m, i + 1);
    if (!cnn) {
        TRY(add_norm(F, bk->ff2_b, ff_scale, &bk->norm_ff, next));
        return chunk_trace(F, s->x, m->d, "block %d ffn", i);
    }
    if (c->normalize_before) {
        /* x = norm_final(x + ½ffn), then the next block's pre-norm */
        TRY(cuda_residual_layer_norm(s->x, NULL, s->dt, s->x, s->a, bk->ff2_b, ff_scale, NULL, 0,
                                     bk->norm_final.g, bk->norm_final.b, 1, 1, F->rows, m->d,
                                     NORM_EPS, s->stream, F->err));
        TRY(chunk_trace(F, s->x, m->d, "block %d ffn", i));
        if (!next)
            return HARK_OK;
        return cuda_layer_norm(s->hn, s->dt, s->x, next->g, next->b, F->rows, m->d, NORM_EPS,
                               s->stream, F->err);
    }
    TRY(add_norm(F, bk->ff2_b, ff_scale, &bk->norm_ff, NULL));
    TRY(cuda_residual_layer_norm(s->x, s->hn, s->dt, s->x, NULL, NULL, 0.0f, NULL, 0,
                                 bk->norm_final.g, bk->norm_final.b, 1, 1, F->rows, m->d, NORM_EPS,
                                 s->stream, F->err));
    return chunk_trace(F, s->x, m->d, "block %d ffn", i);
}

/* ---- FP16 forward ---------------------------------------------------------------------------
 * In either 16-bit type, the state's dt (OPS_F16 or OPS_BF16; "half" below means it): hn (rows, D)
 * half is every sub-module's input; x (rows, D) float the residual stream, updated by the epilogue
 * of each sub-module's last GEMM. */

static cuda_epi_t epi(const conformer_gpu_state_t *s, cuda_epi_mode_t mode, void *out,
                      long long ldo, const float *bias)
{
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.dt = s->dt;
    e.mode = mode;
    e.act = CUDA_ACT_NONE;
    e.out = out;
    e.ldo = ldo;
    e.bias = bias;
    e.alpha = 1.0f;
    return e;
}

/* x += alpha · (a · wᵀ + bias), then the norms n (NULL or nothing to do: none); bias_alpha =
 * alpha · bias (or NULL when alpha is 1) */
static int h_resid(const gfwd_t *F, const void *a, int k, const mat_t *w, const float *bias,
                   float alpha, const float *bias_alpha, const cuda_row_norms_t *n)
{
    conformer_gpu_state_t *s = F->s;
    cuda_epi_t e = epi(s, CUDA_EPI_RESID32, s->x, s->m->d, bias);
    e.alpha = alpha;
    e.beta = 1.0f;
    e.bias_alpha = bias_alpha;
    if (n && (n->ln1 || n->ln2 || n->h_out))
        e.norm = n;
    return cuda_hgemm(&e, a, k, wmat(F, w), F->rows, s->m->d, k, s->g, F->err);
}

/* The layer norms after a residual update, as cuda_hgemm's RESID32 and cuda_ffn take them:
 * pre-norm, hn = next(x) (none: nothing to do); post-norm, x = own(x) and hn = x */
static cuda_row_norms_t norm_after(const conformer_gpu_state_t *s, const dnorm_t *own,
                                   const dnorm_t *next)
{
    cuda_row_norms_t n = {0, NULL, NULL, NULL, NULL, 0, 0, NULL, NORM_EPS};
    if (s->m->cfg.normalize_before) {
        if (next) {
            n.g1 = next->g, n.n_b1 = next->b, n.ln1 = 1;
            n.h_out = s->hn;
        }
    } else {
        n.x_sel = 1;
        n.g1 = own->g, n.n_b1 = own->b, n.ln1 = 1;
        n.h_out = s->hn;
    }
    return n;
}

/* the norms at the end of a block with a conv module: pre-norm, x = norm_final(x), hn = next(x);
 * post-norm, x = norm_final(norm_ff(x)), hn = x */
static cuda_row_norms_t norm_block_end(const conformer_gpu_state_t *s, const gblock_t *bk,
                                       const dnorm_t *next)
{
    cuda_row_norms_t n = {1, bk->norm_final.g, bk->norm_final.b, NULL, NULL, 1, 0, NULL, NORM_EPS};
    if (s->m->cfg.normalize_before) {
        if (next) {
            n.g2 = next->g, n.n_b2 = next->b, n.ln2 = 1;
            n.h_out = s->hn;
        }
    } else {
        n.x_sel = 2;
        n.g1 = bk->norm_ff.g, n.n_b1 = bk->norm_ff.b;
        n.g2 = bk->norm_final.g, n.n_b2 = bk->norm_final.b, n.ln2 = 1;
        n.h_out = s->hn;
    }
    return n;
}

/* x += alpha · w2(act(w1(hn) + b1)) + alpha · b2, then the norms n: one fused kernel where the
 * state takes it at these rows, else two GEMMs (the hidden activations through memory), the
 * norms in the second one's epilogue (or a norm pass: cuda_hgemm decides) */
static int h_ffn(const gfwd_t *F, const mat_t *w1, const float *b1, const mat_t *b1_h,
                 const mat_t *w2, const float *b2, float alpha, const float *b2_alpha,
                 const cuda_row_norms_t *n)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    if (s->ffn == CONFORMER_FFN_FUSED ||
        (s->ffn == CONFORMER_FFN_AUTO && cuda_ffn_f16_prefers(s->g, F->rows))) {
        TRY(cuda_ffn(s->x, s->dt, s->hn, wmat(F, w1), b1, wmat(F, w2), b2, F->rows, m->d, m->ffn,
                     act_of(&m->cfg), alpha, n, s->g, F->err));
        mark(s, CONFORMER_GPU_STAGE_FFN);
        return HARK_OK;
    }
    cuda_epi_t e = epi(s, CUDA_EPI_F16, s->big, m->ffn, b1);
    e.bias_h = wmat(F, b1_h);
    e.act = act_of(&m->cfg);
    TRY(cuda_hgemm(&e, s->hn, m->d, wmat(F, w1), F->rows, m->ffn, m->d, s->g, F->err));
    TRY(h_resid(F, s->big, m->ffn, w2, b2, alpha, b2_alpha, n));
    mark(s, CONFORMER_GPU_STAGE_FFN);
    return HARK_OK;
}

/* the attention module, then the norms n after its residual update */
static int h_mhsa(const gfwd_t *F, const gblock_t *bk, const cuda_row_norms_t *n)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    int d = m->d, rel = m->cfg.pos == POS_REL;
    cuda_epi_t e = epi(s, CUDA_EPI_F16, s->big, 3 * d, bk->qkv_b);
    e.bias_h = wmat(F, &bk->qkv_bh);
    TRY(cuda_hgemm(&e, s->hn, d, wmat(F, &bk->qkv), F->rows, 3 * d, d, s->g, F->err));
    if (rel) { /* p = linear_pos(pe[0:t]) */
        e = epi(s, CUDA_EPI_F16, s->p16, d, NULL);
        TRY(cuda_hgemm(&e, wmat(F, &m->pe16), d, wmat(F, &bk->pos), F->t, d, d, s->g, F->err));
    }
    mark(s, CONFORMER_GPU_STAGE_ATT_PROJ);
    const char *qkv = s->big;
    TRY(cuda_flash_attention(s->s16a, s->dt, d, qkv, qkv + (size_t)d * 2, qkv + (size_t)d * 4,
                             3 * d, rel ? s->p16 : NULL, d, rel ? bk->pos_u : NULL,
                             rel ? bk->pos_v : NULL, s->d_tl, F->chunk, F->left, F->batch, F->t,
                             m->h, m->dk, 1.0f / sqrtf((float)m->dk), s->stream, F->err));
    mark(s, CONFORMER_GPU_STAGE_ATT_CORE);
    TRY(h_resid(F, s->s16a, d, &bk->o, bk->o_b, 1.0f, NULL, n));
    mark(s, CONFORMER_GPU_STAGE_ATT_PROJ);
    return HARK_OK;
}

/* the convolution module, then the norms n after its residual update */
static int h_conv(const gfwd_t *F, const gblock_t *bk, const cuda_row_norms_t *n)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    int d = m->d, kk = m->kernel, causal = m->cfg.causal, bn = m->cfg.cnn_norm == CNN_NORM_BATCH;
    /* pointwise_conv1 with (value, gate) output columns interleaved, the GLU in its epilogue
     * (only the (rows, D) result reaches memory) */
    cuda_epi_t e = epi(s, CUDA_EPI_GLU16, s->s16a, d, bk->pw1_b16);
    TRY(cuda_hgemm(&e, s->hn, d, wmat(F, &bk->pw1), F->rows, 2 * d, d, s->g, F->err));
    TRY(cuda_dwconv_f16(s->s16b, s->dt, s->s16a, causal ? bk->causal_left : NULL, bk->dw_w,
                        bk->dw_b, s->d_tl, F->batch, F->t, d, kk, causal ? kk - 1 : (kk - 1) / 2,
                        bn ? CUDA_NORM_BATCH : CUDA_NORM_LAYER, bk->cnn_norm.g, bk->cnn_norm.b,
                        bn ? bk->bn_mean : NULL, bn ? bk->bn_var : NULL, NORM_EPS, act_of(&m->cfg),
                        s->stream, F->err));
    TRY(h_resid(F, s->s16b, d, &bk->pw2, bk->pw2_b, 1.0f, NULL, n));
    mark(s, CONFORMER_GPU_STAGE_CONV);
    return HARK_OK;
}

static int h_block(const gfwd_t *F, int i)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const wenet_config_t *c = &m->cfg;
    const gblock_t *bk = &m->blocks[i];
    float ff_scale = c->macaron ? 0.5f : 1.0f;
    int cnn = c->use_cnn_module;
    if (c->macaron) {
        cuda_row_norms_t n = norm_after(s, &bk->norm_ff_macaron, &bk->norm_mha);
        TRY(h_ffn(F, &bk->ffm1, bk->ffm1_b, &bk->ffm1_bh, &bk->ffm2, bk->ffm2_b, ff_scale,
                  bk->ffm2_bh, &n));
    }
    cuda_row_norms_t n = norm_after(s, &bk->norm_mha, cnn ? &bk->norm_conv : &bk->norm_ff);
    TRY(h_mhsa(F, bk, &n));
    if (cnn) {
        n = norm_after(s, &bk->norm_conv, &bk->norm_ff);
        TRY(h_conv(F, bk, &n));
    }
    const dnorm_t *next = first_norm(m, i + 1);
    n = cnn ? norm_block_end(s, bk, next) : norm_after(s, &bk->norm_ff, next);
    return h_ffn(F, &bk->ff1, bk->ff1_b, &bk->ff1_bh, &bk->ff2, bk->ff2_b, ff_scale, bk->ff2_bh,
                 &n);
}

/* the FP16 forward in the state's 16-bit type (FP16 or BF16) */
static int forward_f16(const gfwd_t *F, const conformer_opts_t *o, float *d_enc,
                       const float *d_feats, int t_max)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const wenet_config_t *c = &m->cfg;
    hark_err_t *err = F->err;
    /* subsampling: CMVN + the first conv + ReLU, then implicit-GEMM convs + ReLU over
     * channel-last images, then the linear · xscale (+ pe) straight into the residual stream */
    const gconv_t *c0 = &m->conv[0];
    TRY(cuda_conv1_cmvn(s->cbuf[0], s->dt, d_feats, o->skip_cmvn ? NULL : m->cmvn_mean,
                        m->cmvn_istd, s->d_lens, F->batch, t_max, m->in_dim, c0->w.f32, c0->b,
                        c0->cout, c0->k, c0->stride, 1, s->stream, err));
    int hh = conv_out(t_max, c0->k, c0->stride), ww = conv_out(m->in_dim, c0->k, c0->stride);
    for (int i = 1; i < m->n_conv; i++) {
        const gconv_t *cv = &m->conv[i];
        cuda_epi_t e = epi(s, CUDA_EPI_F16, s->cbuf[i], cv->cout, cv->b);
        e.act = CUDA_ACT_RELU;
        TRY(cuda_hconv2d(&e, s->cbuf[i - 1], wmat(F, &cv->w), F->batch, cv->cin, hh, ww, cv->cout,
                         cv->k, cv->k, cv->stride, s->g, err));
        hh = conv_out(hh, cv->k, cv->stride);
        ww = conv_out(ww, cv->k, cv->stride);
    }
    HARK_ASSERT(hh == F->t && m->conv[m->n_conv - 1].cout * ww == m->embed_in);
    cuda_epi_t e = epi(s, CUDA_EPI_RESID32, s->x, m->d, m->embed_b);
    e.alpha = m->xscale;
    e.bias_alpha = m->embed_bx;
    if (c->pos == POS_ABS) {
        e.pe = m->pe32;
        e.pe_rows = F->t;
        e.ld_pe = m->d;
    }
    TRY(cuda_hgemm(&e, s->cbuf[m->n_conv - 1], m->embed_in, wmat(F, &m->embed), F->rows, m->d,
                   m->embed_in, s->g, err));
    const dnorm_t *n0 = c->normalize_before ? first_norm(m, 0) : NULL;
    TRY(cuda_rows_norm(NULL, 0, s->hn, s->dt, NULL, s->x, n0 ? n0->g : NULL, n0 ? n0->b : NULL,
                       n0 != NULL, NULL, NULL, 0, NULL, 0, F->rows, m->d, NORM_EPS, s->stream,
                       err));
    mark(s, CONFORMER_GPU_STAGE_SUBSAMPLE);
    for (int i = 0; i < c->n_blocks; i++)
        TRY(h_block(F, i));
    /* encoder output (pad rows 0), and its half copy for the CTC GEMM */
    int an = c->normalize_before;
    TRY(cuda_rows_norm(NULL, 0, s->hn, s->dt, d_enc, s->x, an ? m->after_norm.g : NULL,
                       an ? m->after_norm.b : NULL, an, NULL, NULL, 0, s->d_tl, F->t, F->rows, m->d,
                       NORM_EPS, s->stream, err));
    mark(s, CONFORMER_GPU_STAGE_NORM);
    return HARK_OK;
}

/* ---- FP32 forward -------------------------------------------------------------------------- */

static int forward_f32(const gfwd_t *F, const conformer_opts_t *o, float *d_enc,
                       const float *d_feats, int t_max)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const wenet_config_t *c = &m->cfg;
    hark_err_t *err = F->err;
    int batch = F->batch, t_out = F->t;
    /* subsampling: CMVN (padding zeroed), conv stack with ReLU, linear · xscale (+ pe) */
    TRY(cuda_cmvn(s->in0, s->dt, d_feats, o->skip_cmvn ? NULL : m->cmvn_mean, m->cmvn_istd,
                  s->d_lens, batch, t_max, m->in_dim, s->stream, err));
    const void *in = s->in0;
    int hh = t_max, ww = m->in_dim;
    for (int i = 0; i < m->n_conv; i++) {
        const gconv_t *cv = &m->conv[i];
        TRY(cuda_conv2d(s->cbuf[i], s->col, s->col_bytes, in, cv->w.f32, wmat(F, &cv->w), cv->b,
                        s->dt, batch, cv->cin, hh, ww, cv->cout, cv->k, cv->k, cv->stride, 1, s->g,
                        err));
        hh = conv_out(hh, cv->k, cv->stride);
        ww = conv_out(ww, cv->k, cv->stride);
        in = s->cbuf[i];
    }
    HARK_ASSERT(hh == t_out && m->conv[m->n_conv - 1].cout * ww == m->embed_in);
    TRY(gemm_w(F, s->a, in, &m->embed, F->rows, m->d, m->embed_in));
    const dnorm_t *n0 = c->normalize_before ? first_norm(m, 0) : NULL;
    TRY(cuda_residual_layer_norm(s->x, s->hn, s->dt, NULL, s->a, m->embed_b, m->xscale,
                                 c->pos == POS_ABS ? m->pe32 : NULL, t_out, n0 ? n0->g : NULL,
                                 n0 ? n0->b : NULL, n0 != NULL, 0, F->rows, m->d, NORM_EPS,
                                 s->stream, err));
    for (int i = 0; i < c->n_blocks; i++)
        TRY(block_forward(F, i));
    size_t n = (size_t)F->rows * m->d;
    if (c->normalize_before) {
        TRY(cuda_layer_norm(d_enc, OPS_F32, s->x, m->after_norm.g, m->after_norm.b, F->rows, m->d,
                            NORM_EPS, s->stream, err));
    } else {
        cudaError_t e =
            cudaMemcpyAsync(d_enc, s->x, n * sizeof(float), cudaMemcpyDeviceToDevice, s->stream);
        if (e != cudaSuccess)
            return cuda_err(err, e, "encoder output copy");
    }
    return cuda_zero_pad_rows(d_enc, s->d_tl, batch, t_out, m->d, s->stream, err);
}

/* the whole forward, enqueued: the lengths from the pinned buffer, then the layers */
static int enqueue_forward(const gfwd_t *F, const conformer_opts_t *o, float *d_enc,
                           const float *d_feats, int t_max)
{
    conformer_gpu_state_t *s = F->s;
    size_t lb = (size_t)F->batch * sizeof(int);
    cudaError_t e = cudaMemcpyAsync(s->d_lens, s->h_lens, lb, cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(s->d_tl, s->h_lens + s->max_batch, lb, cudaMemcpyHostToDevice,
                            s->stream);
    if (e != cudaSuccess)
        return cuda_err(F->err, e, "lengths upload");
    mark(s, -1);
    return s->dt != OPS_F32 ? forward_f16(F, o, d_enc, d_feats, t_max)
                            : forward_f32(F, o, d_enc, d_feats, t_max);
}

typedef struct {
    const gfwd_t *F;
    const conformer_opts_t *o;
    float *d_enc;
    const float *d_feats;
    int t_max;
} run_t;

static int enqueue_run(void *user, hark_err_t *err)
{
    run_t *r = user; /* the forward reports into F->err, the err given */
    (void)err;
    return enqueue_forward(r->F, r->o, r->d_enc, r->d_feats, r->t_max);
}

int conformer_gpu_forward(conformer_gpu_state_t *s, const conformer_opts_t *opts, float *d_enc,
                          int *enc_lens, const float *d_feats, const int *lens, int batch,
                          int t_max, hark_err_t *err)
{
    const conformer_gpu_model_t *m = s->m;
    const wenet_config_t *c = &m->cfg;
    conformer_opts_t dflt = conformer_default_opts();
    const conformer_opts_t *o = opts ? opts : &dflt;
    if (batch <= 0 || t_max <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "conformer (gpu): batch %d, t_max %d", batch,
                       t_max);
    if (batch > s->max_batch || t_max > s->max_frames)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "conformer (gpu): batch %d x %d frames exceeds the state's %d x %d", batch,
                       t_max, s->max_batch, s->max_frames);
    int t_out = conformer_gpu_out_len(m, t_max);
    if (t_out > c->max_len)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "conformer (gpu): %d input frames give %d encoder frames, more than the "
                       "positional table's %d",
                       t_max, t_out, c->max_len);
    for (int b = 0; b < batch; b++)
        if (lens[b] < 0 || lens[b] > t_max)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "conformer (gpu): utterance %d has %d frames (padded length %d)", b,
                           lens[b], t_max);
    int cs = c->use_dynamic_chunk       ? o->chunk_size
             : c->static_chunk_size > 0 ? c->static_chunk_size
                                        : -1;
    gfwd_t F = {
        s,    batch, t_out, batch * t_out, cs > 0 ? cs : 0, cs > 0 ? o->left_chunks : -1, err,
        NULL, NULL,  0};
    for (int b = 0; b < batch; b++)
        enc_lens[b] = conformer_gpu_out_len(m, lens[b]);
    if (t_out <= 0) /* every utterance too short: an empty output */
        return HARK_OK;
    /* the previous forward's copy out of h_lens has run before it is overwritten */
    cudaError_t e = cudaEventSynchronize(s->lens_ev);
    if (e != cudaSuccess)
        return cuda_err(err, e, "lengths event");
    memcpy(s->h_lens, lens, (size_t)batch * sizeof(int));
    memcpy(s->h_lens + s->max_batch, enc_lens, (size_t)batch * sizeof(int));
    int skip = o->skip_cmvn != 0;
    run_t r = {&F, o, d_enc, d_feats, t_max};
    graph_key_t key = {{batch, t_max, F.chunk, F.left, skip, (long long)(intptr_t)d_feats,
                        (long long)(intptr_t)d_enc}};
    int rc = s->graphs ? graph_cache_run(s->gc, &key, enqueue_run, &r, "conformer (gpu)", err)
                       : enqueue_run(&r, err);
    if (rc == HARK_OK && (e = cudaEventRecord(s->lens_ev, s->stream)) != cudaSuccess)
        rc = cuda_err(err, e, "lengths event");
    return rc;
}

/* logits (rows, V) float = ctc_lo(d_enc) (bias included); with d_out NULL only the checks, the
 * lengths and (FP16, BF16) the 16-bit copy of d_enc in hn */
static int ctc_logits(conformer_gpu_state_t *s, float *d_out, const float *d_enc,
                      const int *enc_lens, int batch, int t_enc, hark_err_t *err)
{
    const conformer_gpu_model_t *m = s->m;
    if (batch <= 0 || t_enc < 0 || batch > s->max_batch ||
        (size_t)batch * t_enc > (size_t)s->max_rows)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer ctc (gpu): batch %d x %d frames (the state takes %d rows)", batch,
                       t_enc, s->max_rows);
    for (int b = 0; b < batch; b++)
        if (enc_lens[b] < 0 || enc_lens[b] > t_enc)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "conformer ctc (gpu): utterance %d has %d frames (padded %d)", b,
                           enc_lens[b], t_enc);
    if (t_enc == 0)
        return HARK_OK;
    int rows = batch * t_enc;
    gfwd_t F = {s, batch, t_enc, rows, 0, -1, err, NULL, NULL, 0};
    TRY(cuda_set_lens(s->d_ctc_lens, enc_lens, batch, s->stream, err));
    if (s->dt != OPS_F32) {
        TRY(cuda_cast(s->hn, s->dt, d_enc, OPS_F32, (size_t)rows * m->d, s->stream, err));
        if (!d_out)
            return HARK_OK;
        cuda_epi_t e = epi(s, CUDA_EPI_F32, d_out, m->vocab, m->ctc_b);
        return cuda_hgemm(&e, s->hn, m->d, wmat(&F, &m->ctc), rows, m->vocab, m->d, s->g, err);
    }
    TRY(gemm_w(&F, d_out, d_enc, &m->ctc, rows, m->vocab, m->d));
    return cuda_bias_act(d_out, OPS_F32, d_out, m->ctc_b, rows, m->vocab, CUDA_ACT_NONE, s->stream,
                         err);
}

int conformer_gpu_ctc_log_probs(conformer_gpu_state_t *s, float *d_logp, const float *d_enc,
                                const int *enc_lens, int batch, int t_enc, hark_err_t *err)
{
    TRY(ctc_logits(s, d_logp, d_enc, enc_lens, batch, t_enc, err));
    if (t_enc == 0)
        return HARK_OK;
    return cuda_log_softmax(d_logp, d_logp, NULL, s->d_ctc_lens, t_enc, batch * t_enc, s->m->vocab,
                            s->stream, err);
}

int conformer_gpu_ctc_argmax(conformer_gpu_state_t *s, int *d_arg, float *d_best, float *d_logp,
                             int want_logp, const float *d_enc, const int *enc_lens, int batch,
                             int t_enc, hark_err_t *err)
{
    mark(s, -1);
    if (s->dt != OPS_F32 && !want_logp) { /* no logits in memory: per-block partials instead */
        TRY(ctc_logits(s, NULL, d_enc, enc_lens, batch, t_enc, err));
        if (t_enc == 0)
            return HARK_OK;
        const conformer_gpu_model_t *m = s->m;
        int rows = batch * t_enc;
        cuda_epi_t e = epi(s, CUDA_EPI_LSE, s->lse, CUDA_LSE_TILES(m->vocab), m->ctc_b);
        TRY(cuda_hgemm(&e, s->hn, m->d, wmat_dt(s->dt, &m->ctc), rows, m->vocab, m->d, s->g, err));
        TRY(cuda_lse_argmax(d_arg, d_best, s->lse, m->vocab, s->d_ctc_lens, t_enc, rows, s->stream,
                            err));
        mark(s, CONFORMER_GPU_STAGE_CTC);
        return HARK_OK;
    }
    TRY(ctc_logits(s, d_logp, d_enc, enc_lens, batch, t_enc, err));
    if (t_enc == 0)
        return HARK_OK;
    TRY(cuda_ctc_log_softmax_argmax(d_arg, d_best, want_logp ? d_logp : NULL, d_logp, s->m->vocab,
                                    s->d_ctc_lens, t_enc, batch * t_enc, s->m->vocab, s->stream,
                                    err));
    mark(s, CONFORMER_GPU_STAGE_CTC);
    return HARK_OK;
}

void conformer_gpu_profile(conformer_gpu_state_t *s, int on)
{
    s->prof = on != 0;
    s->n_ev = 0;
    memset(s->prof_ms, 0, sizeof s->prof_ms);
    if (on)
        conformer_gpu_set_graphs(s, 0); /* stage events inside one recorded graph would not help */
}

int conformer_gpu_profile_read(conformer_gpu_state_t *s, double *ms, hark_err_t *err)
{
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "profile");
    for (int i = 1; i < s->n_ev; i++) {
        float t = 0;
        if (s->ev_stage[i] >= 0 && cudaEventElapsedTime(&t, s->ev[i - 1], s->ev[i]) == cudaSuccess)
            s->prof_ms[s->ev_stage[i]] += t;
    }
    cudaGetLastError();
    s->n_ev = 0;
    memcpy(ms, s->prof_ms, sizeof s->prof_ms);
    return HARK_OK;
}

const char *conformer_gpu_stage_name(int stage)
{
    static const char *const names[CONFORMER_GPU_STAGES] = {
        "subsampling", "feed-forward", "attention projections", "attention core", "conv module",
        "norms",       "ctc head"};
    return stage >= 0 && stage < CONFORMER_GPU_STAGES ? names[stage] : "?";
}

/* ---- chunk streaming: conformer_forward_chunks on the device ---------------------------------
 * The FP32 forward's structure (cuBLAS GEMMs with FP32 outputs, fused residual + norm kernels)
 * runs for every precision here, with 16-bit GEMM operands in FP16 / BF16; the stages that read
 * other frames go through the pool: subsampling over each chunk's own (zero-padded) window,
 * K/V stored into each stream's slot (a ring indexed by absolute position), attention over the
 * slot's keys (rel_pos: a table linear_pos(pe) per layer made at creation, indexed by the key's
 * absolute position), the causal depthwise conv over the slot's conv cache. The conv cache keeps
 * glu(pointwise_conv1(h)) of the last K-1 inputs (what the CPU recomputes from its cache of h;
 * an empty cache reads the causal_left rows, glu(bias), as the CPU's zeros give). */

struct conformer_gpu_chunks {
    const conformer_gpu_model_t *m;
    conformer_gpu_state_t *s; /* private: stream, cuBLAS, scratch for (slots, max_frames) */
    int slots, max_frames, cap, lc, layers;
    int step;          /* the most chunks one step takes: min(slots, CONFORMER_CHUNKS_MAX_STEP) */
    void *mem;         /* one device block, the views below */
    float *kc, *vc;    /* (slots, L, cap, D) keys / values after linear_k/v (+ bias) */
    float *cnn;        /* (slots, L, K-1, D) conv cache (above); causal conv only */
    float *pt;         /* (L, max_len, D) linear_pos(pe); rel_pos only */
    float *feats;      /* (step, max_frames, in_dim) the step's windows, padded */
    float *enc, *logp; /* (max_rows, D), (max_rows, V) */
    int *tk_idx;       /* (max_rows, CUDA_CTC_TOPK_MAX) a step's top-k ids (the _topk call) */
    float *tk_val;     /* (max_rows, CUDA_CTC_TOPK_MAX) their log-probs, then (max_rows) blank's */
    int *d_meta;       /* (meta_n) the step's metadata (layout: chunk_meta_views) */
    void *extra;       /* FP16 / BF16: the FP32-structured buffers (a, u, big32) of s */
    int *h_meta;       /* pinned (meta_n) */
    float *h_feats, *h_enc, *h_logp; /* pinned, as feats, enc, logp */
    void *h_tk;                      /* pinned: tk_idx, then tk_val (one block) */
    int meta_n;
    int *offset, *cache_t, *cache_frames; /* (slots) host bookkeeping per slot */
    conformer_gpu_chunks_trace_fn trace;  /* conformer_gpu_chunks_set_trace; NULL: off */
    void *trace_user;
    int *trace_stage; /* the next stage's number in the step being traced */
};

/* slot, row0 (n + 1), pos0, ctx, fresh, lens (`slots` = the step's most chunks each), chunk
 * (max_rows) in one int block */
static cuda_chunk_meta_t chunk_meta_views(const int *base, int slots, int n, int rows)
{
    size_t sl = (size_t)slots;
    cuda_chunk_meta_t mt = {n,
                            rows,
                            base,
                            base + sl,
                            base + 2 * sl + 1,
                            base + 3 * sl + 1,
                            base + 4 * sl + 1,
                            base + 6 * sl + 1};
    return mt;
}

static int *chunk_lens_view(int *base, int slots)
{
    return base + 5 * (size_t)slots + 1;
}

void conformer_gpu_chunks_destroy(conformer_gpu_chunks_t *p)
{
    if (!p)
        return;
    conformer_gpu_state_destroy(p->s); /* waits for its work */
    cudaFree(p->mem);
    cudaFree(p->extra);
    cudaFreeHost(p->h_meta);
    cudaFreeHost(p->h_feats);
    cudaFreeHost(p->h_enc);
    cudaFreeHost(p->h_logp);
    cudaFreeHost(p->h_tk);
    hark_free(p->offset);
    hark_free(p->cache_t);
    hark_free(p->cache_frames);
    hark_free(p);
}

_Static_assert(CONFORMER_CHUNKS_MAX_STEP <= CUDA_MAX_LENS, "a step is one batch of the scratch");

int conformer_gpu_chunks_create(const conformer_gpu_model_t *m, int precision, int slots,
                                int max_frames, int cap, conformer_gpu_chunks_t **out,
                                hark_err_t *err)
{
    *out = NULL;
    const wenet_config_t *c = &m->cfg;
    if (slots < 1 || slots > CONFORMER_CHUNKS_MAX_SLOTS || max_frames < 1 || cap < 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer chunks (gpu): %d slots (1 .. %d), %d frames, cap %d", slots,
                       CONFORMER_CHUNKS_MAX_SLOTS, max_frames, cap);
    if (cap > c->max_len)
        cap = c->max_len; /* no stream gets past the positional table */
    if ((size_t)(2 * m->dk + cap) * sizeof(float) > 200 * 1024)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "conformer chunks (gpu): %d cached keys per stream is too many", cap);
    conformer_gpu_chunks_t *p = hark_calloc(1, sizeof *p);
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "conformer chunks (gpu): out of memory");
    p->m = m;
    p->slots = slots;
    p->step = slots < CONFORMER_CHUNKS_MAX_STEP ? slots : CONFORMER_CHUNKS_MAX_STEP;
    p->max_frames = max_frames;
    p->cap = cap;
    p->layers = c->n_blocks;
    p->lc = c->use_cnn_module && c->causal && m->kernel > 1 ? m->kernel - 1 : 0;
    p->offset = hark_calloc((size_t)slots, sizeof(int));
    p->cache_t = hark_calloc((size_t)slots, sizeof(int));
    p->cache_frames = hark_calloc((size_t)slots, sizeof(int));
    int rc = conformer_gpu_state_create(m, precision, p->step, max_frames, &p->s, err);
    if (rc) {
        conformer_gpu_chunks_destroy(p);
        return rc;
    }
    if (!p->offset || !p->cache_t || !p->cache_frames) {
        conformer_gpu_chunks_destroy(p);
        return err_set(err, HARK_ERR_NOMEM, "conformer chunks (gpu): out of memory");
    }
    for (int i = 0; i < slots; i++)
        p->cache_frames[i] = -1;
    conformer_gpu_state_t *s = p->s;
    size_t d = (size_t)m->d, L = (size_t)(p->layers > 0 ? p->layers : 1), S = (size_t)slots;
    size_t rows = (size_t)s->max_rows, v = (size_t)m->vocab;
    size_t kv = S * L * (size_t)cap * d * 4, cn = S * L * (size_t)p->lc * d * 4;
    size_t pt = c->pos == POS_REL ? L * (size_t)c->max_len * d * 4 : 0;
    size_t fb = (size_t)p->step * (size_t)max_frames * m->in_dim * 4;
    p->meta_n = 6 * p->step + 1 + s->max_rows;
    size_t tkb = rows * CUDA_CTC_TOPK_MAX * 8 + rows * 4; /* ids, values, blank's */
    size_t total = 2 * al(kv) + al(cn) + al(pt) + al(fb) + al(rows * d * 4) + al(rows * v * 4) +
                   al((size_t)p->meta_n * sizeof(int)) + al(tkb);
    size_t w32 = (size_t)m->ffn > 3 * d ? (size_t)m->ffn : 3 * d;
    cudaError_t e = cudaMalloc(&p->mem, total);
    if (e == cudaSuccess && s->dt != OPS_F32)
        e = cudaMalloc(&p->extra, 2 * al(rows * d * 4) + al(rows * w32 * 4));
    if (e != cudaSuccess) {
        conformer_gpu_chunks_destroy(p);
        return err_set(err, HARK_ERR_NOMEM,
                       "conformer chunks (gpu): %zu MiB of caches for %d streams of %d keys: %s",
                       total >> 20, slots, cap, cudaGetErrorString(e));
    }
    char *q = p->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)q, q += al(nbytes))
    TAKE(p->kc, float *, kv);
    TAKE(p->vc, float *, kv);
    TAKE(p->cnn, float *, cn);
    TAKE(p->pt, float *, pt);
    TAKE(p->feats, float *, fb);
    TAKE(p->enc, float *, rows *d * 4);
    TAKE(p->logp, float *, rows *v * 4);
    TAKE(p->d_meta, int *, (size_t)p->meta_n * sizeof(int));
    p->tk_idx = (int *)(void *)q;
    p->tk_val = (float *)(void *)(q + rows * CUDA_CTC_TOPK_MAX * 4);
    q += al(tkb);
    HARK_ASSERT((size_t)(q - (char *)p->mem) == total);
    if (s->dt != OPS_F32) { /* the FP32-structured forward's float buffers, which s lacks */
        q = p->extra;
        TAKE(s->a, float *, rows *d * 4);
        TAKE(s->u, float *, rows *d * 4);
        TAKE(s->big32, float *, rows *w32 * 4);
    }
#undef TAKE
    if ((e = cudaMallocHost((void **)&p->h_meta, (size_t)p->meta_n * sizeof(int))) ||
        (e = cudaMallocHost((void **)&p->h_feats, fb)) ||
        (e = cudaMallocHost((void **)&p->h_enc, rows * d * 4)) ||
        (e = cudaMallocHost((void **)&p->h_logp, rows * v * 4)) ||
        (e = cudaMallocHost(&p->h_tk, tkb))) {
        conformer_gpu_chunks_destroy(p);
        return cuda_err(err, e, "pinned staging");
    }
    memset(p->h_feats, 0, fb);
    if (c->pos == POS_REL) { /* pt_l = linear_pos(pe) over the whole table, per layer */
        gfwd_t F = {s, 1, c->max_len, c->max_len, 0, -1, err, NULL, NULL, 0};
        const void *pe = s->dt == OPS_F32 ? (const void *)m->pe32 : wmat(&F, &m->pe16);
        for (int l = 0; l < p->layers; l++)
            if ((rc = gemm_w(&F, p->pt + (size_t)l * c->max_len * d, pe, &m->blocks[l].pos,
                             c->max_len, m->d, m->d))) {
                conformer_gpu_chunks_destroy(p);
                return rc;
            }
    }
    if ((rc = conformer_gpu_sync(s, err))) {
        conformer_gpu_chunks_destroy(p);
        return rc;
    }
    s->bytes += total + (p->extra ? 2 * al(rows * d * 4) + al(rows * w32 * 4) : 0);
    *out = p;
    return HARK_OK;
}

void conformer_gpu_chunks_reset(conformer_gpu_chunks_t *p, int slot, int cache_frames)
{
    HARK_ASSERT(slot >= 0 && slot < p->slots);
    p->offset[slot] = 0;
    p->cache_t[slot] = 0;
    p->cache_frames[slot] = cache_frames;
}

int conformer_gpu_chunks_offset(const conformer_gpu_chunks_t *p, int slot)
{
    HARK_ASSERT(slot >= 0 && slot < p->slots);
    return p->offset[slot];
}

size_t conformer_gpu_chunks_bytes(const conformer_gpu_chunks_t *p)
{
    return conformer_gpu_state_bytes(p->s);
}

void conformer_gpu_chunks_set_trace(conformer_gpu_chunks_t *p, conformer_gpu_chunks_trace_fn fn,
                                    void *user)
{
    p->trace = fn;
    p->trace_user = user;
}

/* the trace of one stage (conformer_gpu_chunks_set_trace): waits for the step so far, copies
 * d_x (rows, cols) float32 through h_logp or h_enc and hands it to the hook; a no-op unless this
 * is a traced chunk step */
static int chunk_trace(const gfwd_t *F, const float *d_x, int cols, const char *fmt, int i)
{
    const conformer_gpu_chunks_t *p = F->ck;
    if (!p || !p->trace)
        return HARK_OK;
    char name[64];
    snprintf(name, sizeof name, fmt, i);
    float *h = cols == p->m->d ? p->h_enc : p->h_logp; /* (rows, D), (rows, V) */
    cudaError_t e = cudaMemcpyAsync(h, d_x, (size_t)F->rows * cols * sizeof(float),
                                    cudaMemcpyDeviceToHost, F->s->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(F->s->stream);
    if (e != cudaSuccess)
        return cuda_err(F->err, e, "chunk trace");
    p->trace(p->trace_user, (*p->trace_stage)++, name, h, F->rows, cols);
    return HARK_OK;
}

static int chunk_mhsa(const gfwd_t *F, const gblock_t *bk)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const conformer_gpu_chunks_t *p = F->ck;
    int d = m->d, l = (int)(bk - m->blocks), rel = m->cfg.pos == POS_REL;
    long long ss = (long long)p->layers * p->cap * d;
    float *kc = p->kc + (size_t)l * p->cap * d, *vc = p->vc + (size_t)l * p->cap * d;
    TRY(gemm_w(F, s->big32, s->hn, &bk->qkv, F->rows, 3 * d, d));
    TRY(cuda_chunk_kv_store(kc, vc, ss, p->cap, s->big32 + d, s->big32 + 2 * d, 3 * d,
                            bk->qkv_b + d, bk->qkv_b + 2 * d, F->mt, d, s->stream, F->err));
    void *ctx = s->dt == OPS_F32 ? (void *)s->u : s->s16a;
    TRY(cuda_chunk_attention(ctx, s->dt, s->big32, 3 * d, bk->qkv_b, kc, vc, ss, p->cap,
                             rel ? p->pt + (size_t)l * m->cfg.max_len * d : NULL,
                             rel ? bk->pos_u : NULL, rel ? bk->pos_v : NULL, F->mt, F->max_keys,
                             m->h, m->dk, 1.0f / sqrtf((float)m->dk), s->stream, F->err));
    return gemm_w(F, s->a, ctx, &bk->o, F->rows, d, d);
}

/* big32 (rows, 2D) = pointwise_conv1(hn) without its bias, the value columns [0, D) then the gate
 * columns [D, 2D), as cuda_glu reads them. The 16-bit copies of pw1 have their rows interleaved
 * (row 2j value j, row 2j + 1 gate j: PERM_GLU, for the FP16 forward's GLU epilogue), so in FP16
 * and BF16 the value rows and the gate rows are each read at a stride of two rows, and each half
 * is written at a row stride of 2D. (A plain (2D, D) GEMM over the 16-bit copy would hand cuda_glu
 * interleaved columns: value j·gate j pairs scrambled, the bug this replaces.) */
static int pw1_gemm(const gfwd_t *F, const gblock_t *bk)
{
    conformer_gpu_state_t *s = F->s;
    int d = s->m->d;
    if (s->dt == OPS_F32)
        return gemm_w(F, s->big32, s->hn, &bk->pw1, F->rows, 2 * d, d);
    const char *w = wmat(F, &bk->pw1);
    size_t es = ops_dtype_size(s->dt);
    for (int half = 0; half < 2; half++) /* 0: value rows 2j, 1: gate rows 2j + 1 */
        TRY(cuda_gemm(s->big32 + (size_t)half * d, OPS_F32, s->hn, w + (size_t)half * d * es, s->dt,
                      F->rows, d, d, d, 2 * d, 2 * d, 1, 1.0f, 0.0f, 1, 0, 0, 0, s->g, F->err));
    return HARK_OK;
}

static int chunk_conv_module(const gfwd_t *F, const gblock_t *bk)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    const conformer_gpu_chunks_t *p = F->ck;
    int d = m->d, kk = m->kernel, l = (int)(bk - m->blocks), causal = m->cfg.causal;
    TRY(pw1_gemm(F, bk));
    TRY(cuda_glu(s->u, OPS_F32, s->big32, bk->pw1_b, F->rows, d, s->stream, F->err));
    float *cache = p->lc ? p->cnn + (size_t)l * p->lc * d : NULL;
    TRY(cuda_chunk_dwconv(s->a, s->u, cache, (long long)p->layers * p->lc * d, bk->causal_left,
                          bk->dw_w, bk->dw_b, F->mt, d, kk, causal ? kk - 1 : (kk - 1) / 2,
                          s->stream, F->err));
    const float *z = s->a;
    if (m->cfg.cnn_norm == CNN_NORM_BATCH) {
        TRY(cuda_batch_norm(s->a, s->a, bk->cnn_norm.g, bk->cnn_norm.b, bk->bn_mean, bk->bn_var,
                            F->rows, d, NORM_EPS, s->stream, F->err));
    } else {
        TRY(cuda_layer_norm(s->big32, OPS_F32, s->a, bk->cnn_norm.g, bk->cnn_norm.b, F->rows, d,
                            NORM_EPS, s->stream, F->err));
        z = s->big32;
    }
    TRY(cuda_bias_act(s->big, s->dt, z, NULL, F->rows, d, act_of(&m->cfg), s->stream, F->err));
    return gemm_w(F, s->a, s->big, &bk->pw2, F->rows, d, d);
}

/* the subsampling of the step's nk windows (padded to t_max frames) into s->a (nk, t_pad, D),
 * before the embedding's bias and scale */
static int chunk_subsample(const gfwd_t *F, const conformer_opts_t *o, const float *d_feats, int nk,
                           int t_max, int t_pad)
{
    conformer_gpu_state_t *s = F->s;
    const conformer_gpu_model_t *m = s->m;
    hark_err_t *err = F->err;
    const float *mean = o->skip_cmvn ? NULL : m->cmvn_mean;
    int hh, ww;
    const void *in;
    if (s->dt == OPS_F32) {
        TRY(cuda_cmvn(s->in0, s->dt, d_feats, mean, m->cmvn_istd, s->d_lens, nk, t_max, m->in_dim,
                      s->stream, err));
        in = s->in0;
        hh = t_max, ww = m->in_dim;
        for (int i = 0; i < m->n_conv; i++) {
            const gconv_t *cv = &m->conv[i];
            TRY(cuda_conv2d(s->cbuf[i], s->col, s->col_bytes, in, cv->w.f32, wmat(F, &cv->w), cv->b,
                            s->dt, nk, cv->cin, hh, ww, cv->cout, cv->k, cv->k, cv->stride, 1, s->g,
                            err));
            hh = conv_out(hh, cv->k, cv->stride);
            ww = conv_out(ww, cv->k, cv->stride);
            in = s->cbuf[i];
        }
    } else {
        const gconv_t *c0 = &m->conv[0];
        TRY(cuda_conv1_cmvn(s->cbuf[0], s->dt, d_feats, mean, m->cmvn_istd, s->d_lens, nk, t_max,
                            m->in_dim, c0->w.f32, c0->b, c0->cout, c0->k, c0->stride, 1, s->stream,
                            err));
        hh = conv_out(t_max, c0->k, c0->stride), ww = conv_out(m->in_dim, c0->k, c0->stride);
        for (int i = 1; i < m->n_conv; i++) {
            const gconv_t *cv = &m->conv[i];
            cuda_epi_t e = epi(s, CUDA_EPI_F16, s->cbuf[i], cv->cout, cv->b);
            e.act = CUDA_ACT_RELU;
            TRY(cuda_hconv2d(&e, s->cbuf[i - 1], wmat(F, &cv->w), nk, cv->cin, hh, ww, cv->cout,
                             cv->k, cv->k, cv->stride, s->g, err));
            hh = conv_out(hh, cv->k, cv->stride);
            ww = conv_out(ww, cv->k, cv->stride);
        }
        in = s->cbuf[m->n_conv - 1];
    }
    HARK_ASSERT(hh == t_pad && m->conv[m->n_conv - 1].cout * ww == m->embed_in);
    return gemm_w(F, s->a, in, &m->embed, nk * t_pad, m->d, m->embed_in);
}

/* the step; the CTC head's output: whole rows (logp), the top k (tk), or none */
static int forward_chunks(conformer_gpu_chunks_t *p, const int *slots, const conformer_opts_t *opts,
                          float *enc, float *logp, const conformer_ctc_topk_t *tk, int *n_out,
                          const float *const *feats, const int *frames, int n, hark_err_t *err)
{
    const conformer_gpu_model_t *m = p->m;
    const wenet_config_t *c = &m->cfg;
    conformer_gpu_state_t *s = p->s;
    conformer_opts_t dflt = conformer_default_opts();
    const conformer_opts_t *o = opts ? opts : &dflt;
    if (n < 1 || n > p->step)
        return err_set(err, n < 1 ? HARK_ERR_INVALID_ARG : HARK_ERR_TOO_LARGE,
                       "conformer chunks (gpu): %d streams (a step takes 1 .. %d)", n, p->step);
    int *h = p->h_meta, S = p->step, nk = 0, rows = 0, t_max = 0, max_keys = 1;
    int *slot = h, *row0 = h + S, *pos0 = h + 2 * S + 1, *ctx = h + 3 * S + 1;
    int *fresh = h + 4 * S + 1, *lens = chunk_lens_view(h, S), *chunk = h + 6 * S + 1;
    for (int b = 0; b < n; b++) {
        n_out[b] = 0;
        int sl = slots[b];
        if (sl < 0 || sl >= p->slots)
            return err_set(err, HARK_ERR_INVALID_ARG, "conformer chunks (gpu): slot %d of %d", sl,
                           p->slots);
        for (int j = 0; j < b; j++)
            HARK_ASSERT(slots[j] != sl); /* one chunk per stream and step */
        if (frames[b] < 0 || frames[b] > p->max_frames)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "conformer chunk %d (gpu): %d frames (the pool takes at most %d)", b,
                           frames[b], p->max_frames);
        int r = conformer_gpu_out_len(m, frames[b]);
        if (r <= 0)
            continue;
        if (p->offset[sl] + r > c->max_len)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "conformer chunk %d (gpu): stream reached %d encoder frames, past the "
                           "positional table's %d",
                           b, p->offset[sl] + r, c->max_len);
        if (p->cache_t[sl] + r > p->cap)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "conformer chunk %d (gpu): %d cached + %d new frames exceed the pool's "
                           "%d keys per stream",
                           b, p->cache_t[sl], r, p->cap);
        slot[nk] = sl;
        row0[nk] = rows;
        pos0[nk] = p->offset[sl];
        ctx[nk] = p->cache_t[sl];
        fresh[nk] = p->offset[sl] == 0;
        lens[nk] = frames[b];
        for (int i = 0; i < r; i++)
            chunk[rows + i] = nk;
        max_keys = ctx[nk] + r > max_keys ? ctx[nk] + r : max_keys;
        t_max = frames[b] > t_max ? frames[b] : t_max;
        rows += r;
        nk++;
    }
    row0[nk] = rows;
    if (rows == 0)
        return HARK_OK;
    int t_pad = conformer_gpu_out_len(m, t_max);
    HARK_ASSERT(rows <= s->max_rows && nk * t_pad <= s->max_rows);
    /* the windows, padded to t_max frames (rows past a window's end are never read) */
    size_t fd = (size_t)m->in_dim;
    for (int b = 0, k = 0; b < n; b++) {
        if (conformer_gpu_out_len(m, frames[b]) <= 0)
            continue;
        memcpy(p->h_feats + (size_t)k * t_max * fd, feats[b], (size_t)frames[b] * fd * 4);
        k++;
    }
    cudaError_t e = cudaMemcpyAsync(p->d_meta, h, (size_t)p->meta_n * sizeof(int),
                                    cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(p->feats, p->h_feats, (size_t)nk * t_max * fd * 4,
                            cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(s->d_lens, chunk_lens_view(p->d_meta, S), (size_t)nk * sizeof(int),
                            cudaMemcpyDeviceToDevice, s->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "chunk upload");
    cuda_chunk_meta_t mt = chunk_meta_views(p->d_meta, S, nk, rows);
    gfwd_t F = {s, nk, t_pad, rows, 0, -1, err, p, &mt, max_keys};
    int d = m->d, stage = 0;
    p->trace_stage = &stage;
    TRY(chunk_subsample(&F, o, p->feats, nk, t_max, t_pad));
    TRY(cuda_chunk_embed(s->x, s->a, t_pad, m->embed_b, m->xscale,
                         c->pos == POS_ABS ? m->pe32 : NULL, &mt, d, s->stream, err));
    TRY(chunk_trace(&F, s->x, d, "subsampling", 0));
    const dnorm_t *n0 = c->normalize_before ? first_norm(m, 0) : NULL;
    if (n0)
        TRY(cuda_layer_norm(s->hn, s->dt, s->x, n0->g, n0->b, rows, d, NORM_EPS, s->stream, err));
    else
        TRY(cuda_cast(s->hn, s->dt, s->x, OPS_F32, (size_t)rows * d, s->stream, err));
    for (int i = 0; i < c->n_blocks; i++)
        TRY(block_forward(&F, i));
    if (c->normalize_before)
        TRY(cuda_layer_norm(p->enc, OPS_F32, s->x, m->after_norm.g, m->after_norm.b, rows, d,
                            NORM_EPS, s->stream, err));
    else
        TRY(cuda_cast(p->enc, OPS_F32, s->x, OPS_F32, (size_t)rows * d, s->stream, err));
    TRY(chunk_trace(&F, p->enc, d, "encoder", 0));
    if (logp || tk) { /* the CTC head */
        TRY(cuda_cast(s->hn, s->dt, p->enc, OPS_F32, (size_t)rows * d, s->stream, err));
        TRY(gemm_w(&F, p->logp, s->hn, &m->ctc, rows, m->vocab, d));
        TRY(cuda_log_softmax(p->logp, p->logp, m->ctc_b, NULL, rows, rows, m->vocab, s->stream,
                             err));
        TRY(chunk_trace(&F, p->logp, m->vocab, "ctc", 0));
    }
    if (logp) {
        e = cudaMemcpyAsync(p->h_logp, p->logp, (size_t)rows * m->vocab * 4, cudaMemcpyDeviceToHost,
                            s->stream);
        if (e != cudaSuccess)
            return cuda_err(err, e, "chunk log-probs download");
    }
    const size_t nk_tk = tk ? (size_t)rows * (size_t)tk->k : 0;
    if (tk) { /* each row's top k and blank, packed: ids (rows, k), values (rows, k), blank's */
        float *d_blank = p->tk_val + nk_tk;
        TRY(cuda_ctc_topk(p->tk_idx, p->tk_val, d_blank, p->logp, rows, m->vocab, tk->k, tk->blank,
                          s->stream, err));
        if ((e = cudaMemcpyAsync(p->h_tk, p->tk_idx, nk_tk * 4, cudaMemcpyDeviceToHost,
                                 s->stream)) != cudaSuccess ||
            (e = cudaMemcpyAsync((int *)p->h_tk + nk_tk, p->tk_val, (nk_tk + rows) * 4,
                                 cudaMemcpyDeviceToHost, s->stream)) != cudaSuccess)
            return cuda_err(err, e, "chunk top-k download");
    }
    if (enc && (e = cudaMemcpyAsync(p->h_enc, p->enc, (size_t)rows * d * 4, cudaMemcpyDeviceToHost,
                                    s->stream)) != cudaSuccess)
        return cuda_err(err, e, "chunk encoder download");
    TRY(conformer_gpu_sync(s, err));
    if (enc)
        memcpy(enc, p->h_enc, (size_t)rows * d * 4);
    if (logp)
        memcpy(logp, p->h_logp, (size_t)rows * m->vocab * 4);
    if (tk) {
        const int *hi = p->h_tk;
        const float *hv = (const float *)(hi + nk_tk);
        memcpy(tk->idx, hi, nk_tk * 4);
        memcpy(tk->val, hv, nk_tk * 4);
        if (tk->blank_lp)
            memcpy(tk->blank_lp, hv + nk_tk, (size_t)rows * 4);
    }
    for (int b = 0; b < n; b++) {
        int sl = slots[b], r = conformer_gpu_out_len(m, frames[b]);
        if (r <= 0)
            continue;
        int kept = p->cache_t[sl] + r, cf = p->cache_frames[sl];
        p->cache_t[sl] = cf < 0 ? kept : cf < kept ? cf : kept;
        p->offset[sl] += r;
        n_out[b] = r;
    }
    return HARK_OK;
}

int conformer_gpu_forward_chunks(conformer_gpu_chunks_t *p, const int *slots,
                                 const conformer_opts_t *opts, float *enc, float *logp, int *n_out,
                                 const float *const *feats, const int *frames, int n,
                                 hark_err_t *err)
{
    return forward_chunks(p, slots, opts, enc, logp, NULL, n_out, feats, frames, n, err);
}

int conformer_gpu_forward_chunks_topk(conformer_gpu_chunks_t *p, const int *slots,
                                      const conformer_opts_t *opts, float *enc,
                                      const conformer_ctc_topk_t *tk, int *n_out,
                                      const float *const *feats, const int *frames, int n,
                                      hark_err_t *err)
{
    if (!tk || !tk->idx || !tk->val || tk->k < 1 || tk->k > CUDA_CTC_TOPK_MAX ||
        tk->k > p->m->vocab || tk->blank < 0 || tk->blank >= p->m->vocab)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conformer chunks (gpu): top k %d (1 .. %d), blank %d", tk ? tk->k : 0,
                       CUDA_CTC_TOPK_MAX, tk ? tk->blank : -1);
    return forward_chunks(p, slots, opts, enc, NULL, tk, n_out, feats, frames, n, err);
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_cuda(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "conformer (gpu): hark was built without CUDA");
}

int conformer_gpu_model_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                               int precisions, conformer_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

int conformer_gpu_model_create_st(const wenet_config_t *cfg, const safetensors_t *st,
                                  int precisions, conformer_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

void conformer_gpu_model_destroy(conformer_gpu_model_t *m) {}

const wenet_config_t *conformer_gpu_config(const conformer_gpu_model_t *m)
{
    return NULL;
}

int conformer_gpu_out_len(const conformer_gpu_model_t *m, int frames)
{
    return 0;
}

size_t conformer_gpu_model_bytes(const conformer_gpu_model_t *m)
{
    return 0;
}

int conformer_gpu_state_create(const conformer_gpu_model_t *m, int precision, int max_batch,
                               int max_frames, conformer_gpu_state_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

void conformer_gpu_state_destroy(conformer_gpu_state_t *s) {}

void *conformer_gpu_stream(const conformer_gpu_state_t *s)
{
    return NULL;
}

size_t conformer_gpu_state_bytes(const conformer_gpu_state_t *s)
{
    return 0;
}

const char *conformer_gpu_path_name(const conformer_gpu_state_t *s)
{
    return "cpu";
}

int conformer_gpu_sync(conformer_gpu_state_t *s, hark_err_t *err)
{
    return no_cuda(err);
}

int conformer_gpu_forward(conformer_gpu_state_t *s, const conformer_opts_t *opts, float *d_enc,
                          int *enc_lens, const float *d_feats, const int *lens, int batch,
                          int t_max, hark_err_t *err)
{
    return no_cuda(err);
}

int conformer_gpu_ctc_log_probs(conformer_gpu_state_t *s, float *d_logp, const float *d_enc,
                                const int *enc_lens, int batch, int t_enc, hark_err_t *err)
{
    return no_cuda(err);
}

int conformer_gpu_ctc_argmax(conformer_gpu_state_t *s, int *d_arg, float *d_best, float *d_logp,
                             int want_logp, const float *d_enc, const int *enc_lens, int batch,
                             int t_enc, hark_err_t *err)
{
    return no_cuda(err);
}

void conformer_gpu_set_graphs(conformer_gpu_state_t *s, int on) {}

void conformer_gpu_set_fused_ffn(conformer_gpu_state_t *s, conformer_ffn_mode_t mode) {}

void conformer_gpu_profile(conformer_gpu_state_t *s, int on) {}

int conformer_gpu_profile_read(conformer_gpu_state_t *s, double *ms, hark_err_t *err)
{
    return no_cuda(err);
}

const char *conformer_gpu_stage_name(int stage)
{
    return "?";
}

int conformer_gpu_chunks_create(const conformer_gpu_model_t *m, int precision, int slots,
                                int max_frames, int cap, conformer_gpu_chunks_t **out,
                                hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

void conformer_gpu_chunks_destroy(conformer_gpu_chunks_t *p) {}

void conformer_gpu_chunks_reset(conformer_gpu_chunks_t *p, int slot, int cache_frames) {}

void conformer_gpu_chunks_set_trace(conformer_gpu_chunks_t *p, conformer_gpu_chunks_trace_fn fn,
                                    void *user)
{
}

int conformer_gpu_chunks_offset(const conformer_gpu_chunks_t *p, int slot)
{
    return 0;
}

size_t conformer_gpu_chunks_bytes(const conformer_gpu_chunks_t *p)
{
    return 0;
}

int conformer_gpu_forward_chunks(conformer_gpu_chunks_t *p, const int *slots,
                                 const conformer_opts_t *opts, float *enc, float *logp, int *n_out,
                                 const float *const *feats, const int *frames, int n,
                                 hark_err_t *err)
{
    return no_cuda(err);
}

int conformer_gpu_forward_chunks_topk(conformer_gpu_chunks_t *p, const int *slots,
                                      const conformer_opts_t *opts, float *enc,
                                      const conformer_ctc_topk_t *tk, int *n_out,
                                      const float *const *feats, const int *frames, int n,
                                      hark_err_t *err)
{
    return no_cuda(err);
}

#endif
