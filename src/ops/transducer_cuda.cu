/* transducer_cuda.cu — the kernels of icefall's transducers on the GPU (ops_cuda.h, "icefall
 * transducer ops"): BasicNorm rows, the zero-bordered input of the first subsampling conv, the
 * relative-position attention with rel_shift (a packing kernel, cuBLAS GEMMs and a shifted,
 * masked softmax) and greedy search's per-frame kernels (the joiner's hidden layer; argmax,
 * emission and the stateless decoder). Every element type is a template parameter: float
 * (OPS_F32), __half (OPS_F16) or __nv_bfloat16 (OPS_BF16).
 * Tests: tests/ops/test_transducer_cuda.c (each against its CPU reference in ops_cpu.c) */
#include "core/error.h"
#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <stdint.h>

#define TR_ALIGN 256

static size_t tr_align(size_t n)
{
    return (n + TR_ALIGN - 1) / TR_ALIGN * TR_ALIGN;
}

__device__ __forceinline__ float tr_ld(const float *p, size_t i)
{
    return p[i];
}
__device__ __forceinline__ float tr_ld(const __half *p, size_t i)
{
    return __half2float(p[i]);
}
__device__ __forceinline__ float tr_ld(const __nv_bfloat16 *p, size_t i)
{
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ void tr_st(float *p, size_t i, float v)
{
    p[i] = v;
}
__device__ __forceinline__ void tr_st(__half *p, size_t i, float v)
{
    p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void tr_st(__nv_bfloat16 *p, size_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

/* ---- BasicNorm ------------------------------------------------------------------------------ */

/* a row of x scaled by scale · (mean_j((x_j - b_j)²) + eps)^-1/2 (b NULL: 0): BasicNorm (b NULL,
 * scale 1) and BiasNorm (eps 0) */
template <typename T>
__global__ void row_scale_norm_kernel(float *x_out, T *h_out, const float *x, int d, const float *b,
                                      float eps, float scale)
{
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * d;
    float s = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j] - (b ? b[j] : 0.0f);
        s += v * v;
    }
    s = ops_block_sum(s, red);
    float sc = scale * rsqrtf(s / (float)d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j] * sc;
        if (h_out)
            tr_st(h_out, (size_t)blockIdx.x * d + j, v);
        if (x_out)
            x_out[(size_t)blockIdx.x * d + j] = v;
    }
}

static void row_scale_norm(float *x_out, void *h_out, ops_dtype_t h_t, const float *x, int n, int d,
                           const float *b, float eps, float scale, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    int th = d >= 512 ? 256 : 128;
    if (h_t == OPS_F16)
        row_scale_norm_kernel<<<n, th, 0, st>>>(x_out, (__half *)h_out, x, d, b, eps, scale);
    else if (h_t == OPS_BF16)
        row_scale_norm_kernel<<<n, th, 0, st>>>(x_out, (__nv_bfloat16 *)h_out, x, d, b, eps, scale);
    else
        row_scale_norm_kernel<<<n, th, 0, st>>>(x_out, (float *)h_out, x, d, b, eps, scale);
}

extern "C" int cuda_basic_norm(float *x_out, void *h_out, ops_dtype_t h_t, const float *x, int n,
                               int d, float eps, void *stream, hark_err_t *err)
{
    if (n <= 0)
        return HARK_OK;
    if (d <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "basic_norm: %d rows of %d", n, d);
    row_scale_norm(x_out, h_out, h_t, x, n, d, NULL, eps, 1.0f, stream);
    return ops_launched(err, "basic_norm");
}

extern "C" int cuda_bias_norm(float *x_out, void *h_out, ops_dtype_t h_t, const float *x, int n,
                              int d, const float *b, float scale, void *stream, hark_err_t *err)
{
    if (n <= 0)
        return HARK_OK;
    if (d <= 0 || !b)
        return err_set(err, HARK_ERR_INVALID_ARG, "bias_norm: %d rows of %d, bias %p", n, d,
                       (const void *)b);
    row_scale_norm(x_out, h_out, h_t, x, n, d, b, 0.0f, scale, stream);
    return ops_launched(err, "bias_norm");
}

/* ---- the first conv's input ----------------------------------------------------------------- */

template <typename T>
__global__ void pad_frames_kernel(T *out, const float *x, const int *lens, float pad, int t_in,
                                  int f, size_t n)
{
    const int w = f + 2, h = t_in + 2;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(e % (size_t)w);
        size_t rb = e / (size_t)w;
        int r = (int)(rb % (size_t)h), b = (int)(rb / (size_t)h);
        float v = 0.0f;
        if (r >= 1 && r <= t_in && c >= 1 && c <= f) {
            int t = r - 1;
            v = lens && t >= lens[b] ? pad : x[((size_t)b * t_in + t) * f + (c - 1)];
        }
        tr_st(out, e, v);
    }
}

extern "C" int cuda_pad_frames(void *out, ops_dtype_t out_t, const float *x, const int *lens,
                               float pad, int batch, int t_in, int f, void *stream, hark_err_t *err)
{
    size_t n = (size_t)batch * (t_in + 2) * (f + 2);
    if (batch <= 0 || t_in <= 0 || f <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "pad_frames: %d x %d x %d", batch, t_in, f);
    cudaStream_t st = (cudaStream_t)stream;
    if (out_t == OPS_F16)
        pad_frames_kernel<<<ops_grid_for(n, 256), 256, 0, st>>>((__half *)out, x, lens, pad, t_in,
                                                                f, n);
    else if (out_t == OPS_BF16)
        pad_frames_kernel<<<ops_grid_for(n, 256), 256, 0, st>>>((__nv_bfloat16 *)out, x, lens, pad,
                                                                t_in, f, n);
    else
        pad_frames_kernel<<<ops_grid_for(n, 256), 256, 0, st>>>((float *)out, x, lens, pad, t_in, f,
                                                                n);
    return ops_launched(err, "pad_frames_kernel");
}

/* ---- relative-position attention with rel_shift -------------------------------------------- */

/* the scratch of a group of g utterances: qu, qv (H, g, t, dk); scores (H, g, t, t); bd (H, g·t,
 * 2t - 1), all of dt */
typedef struct {
    size_t qu, qv, sc, bd, total;
} rel_layout_t;

static rel_layout_t rel_layout(int g, int t, int heads, int dk, ops_dtype_t dt)
{
    rel_layout_t L;
    size_t es = ops_dtype_size(dt), ght = (size_t)g * heads * t;
    L.qu = 0;
    L.qv = L.qu + tr_align(ght * dk * es);
    L.sc = L.qv + tr_align(ght * dk * es);
    L.bd = L.sc + tr_align(ght * t * es);
    L.total = L.bd + tr_align(ght * (size_t)(2 * t - 1) * es) + TR_ALIGN;
    return L;
}

extern "C" size_t cuda_rel_attention_scratch_bytes(int group, int t, int heads, int dk,
                                                   ops_dtype_t dt)
{
    return rel_layout(group, t, heads, dk, dt).total;
}

/* qu / qv[h][g][i][j] = scale · q + bu / bv, q at qkv row (b0 + g)·t + i, column h·dk + j */
template <typename T>
__global__ void rel_pack_kernel(T *qu, T *qv, const T *qkv, long long ld, const float *bu,
                                const float *bv, int b0, int G, int t, int heads, int dk,
                                float scale, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(e % (size_t)dk);
        size_t r = e / (size_t)dk; /* (h, g, i) */
        int i = (int)(r % (size_t)t);
        size_t hg = r / (size_t)t;
        int g = (int)(hg % (size_t)G), h = (int)(hg / (size_t)G);
        float q = tr_ld(qkv, ((size_t)(b0 + g) * t + i) * ld + (size_t)h * dk + j) * scale;
        tr_st(qu, e, q + (bu ? bu[h * dk + j] : 0.0f));
        tr_st(qv, e, q + (bv ? bv[h * dk + j] : 0.0f));
    }
}

/* one block per score row (h, g, i): s_j = sc[j] + bd[t - 1 - i + j] over the keys [lo, hi),
 * softmax, written over sc (0 outside) */
template <typename T>
__global__ void rel_softmax_kernel(T *sc, const T *bd, const int *lens, int b0, int G, int t,
                                   int chunk, int left)
{
    __shared__ float red[32];
    size_t row = blockIdx.x;
    int i = (int)(row % (size_t)t), g = (int)((row / (size_t)t) % (size_t)G);
    int len = lens ? lens[b0 + g] : t;
    len = len < t ? len : t;
    int lo = 0, hi = len;
    if (chunk > 0) {
        int c = i / chunk, end = (c + 1) * chunk;
        lo = left < 0 ? 0 : (c - left) * chunk;
        lo = lo > 0 ? lo : 0;
        hi = end < len ? end : len;
    }
    T *s = sc + row * t;
    const T *b = bd + row * (size_t)(2 * t - 1) + (t - 1 - i);
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x)
        mx = fmaxf(mx, tr_ld(s, j) + tr_ld(b, j));
    mx = ops_block_max(mx, red);
    float sum = 0.0f;
    for (int j = lo + threadIdx.x; j < hi; j += blockDim.x)
        sum += expf(tr_ld(s, j) + tr_ld(b, j) - mx);
    sum = ops_block_sum(sum, red);
    float inv = hi > lo ? 1.0f / sum : 0.0f;
    for (int j = threadIdx.x; j < t; j += blockDim.x) {
        float v = j >= lo && j < hi ? expf(tr_ld(s, j) + tr_ld(b, j) - mx) * inv : 0.0f;
        tr_st(s, j, v);
    }
}

template <typename T>
static int rel_attention_t(T *ctx, long long ldc, ops_dtype_t dt, void *scratch,
                           size_t scratch_bytes, const T *qkv, long long ld, const T *pp,
                           long long ldp, const float *bu, const float *bv, const int *lens,
                           int chunk, int left, int batch, int t, int heads, int dk, float scale,
                           ops_cuda_t *g, hark_err_t *err)
{
    int G = batch;
    while (G > 1 && rel_layout(G, t, heads, dk, dt).total > scratch_bytes)
        G = (G + 1) / 2;
    rel_layout_t L = rel_layout(G, t, heads, dk, dt);
    if (L.total > scratch_bytes)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "rel_attention: scratch of %zu bytes holds no utterance of %d frames (%zu "
                       "needed)",
                       scratch_bytes, t, L.total);
    char *base = (char *)(((uintptr_t)scratch + TR_ALIGN - 1) / TR_ALIGN * TR_ALIGN);
    T *qu = (T *)(base + L.qu), *qv = (T *)(base + L.qv), *sc = (T *)(base + L.sc),
      *bd = (T *)(base + L.bd);
    const int P = 2 * t - 1, hd = heads * dk;
    cudaStream_t st = g->stream;
    int rc = HARK_OK;
    for (int b0 = 0; b0 < batch && rc == HARK_OK; b0 += G) {
        int ng = batch - b0 < G ? batch - b0 : G;
        size_t n = (size_t)heads * ng * t * dk;
        rel_pack_kernel<<<ops_grid_for(n, 256), 256, 0, st>>>(qu, qv, qkv, ld, bu, bv, b0, ng, t,
                                                              heads, dk, scale, n);
        if ((rc = ops_launched(err, "rel_pack_kernel")) != HARK_OK)
            break;
        /* (q + bu)·kᵀ per head, over the group's utterances */
        for (int h = 0; h < heads && rc == HARK_OK; h++)
            rc = cuda_gemm(sc + (size_t)h * ng * t * t, dt, qu + (size_t)h * ng * t * dk,
                           qkv + (size_t)b0 * t * ld + hd + (size_t)h * dk, dt, t, t, dk, dk,
                           (int)ld, t, 1, 1.0f, 0.0f, ng, (long long)t * dk, (long long)t * ld,
                           (long long)t * t, g, err);
        /* (q + bv)·pᵀ, every frame of the group against every relative position, per head */
        if (rc == HARK_OK)
            rc = cuda_gemm(bd, dt, qv, pp, dt, ng * t, P, dk, dk, (int)ldp, P, 1, 1.0f, 0.0f, heads,
                           (long long)ng * t * dk, (long long)dk, (long long)ng * t * P, g, err);
        if (rc != HARK_OK)
            break;
        rel_softmax_kernel<<<(unsigned)((size_t)heads * ng * t), t >= 256 ? 256 : 128, 0, st>>>(
            sc, bd, lens, b0, ng, t, chunk, left);
        if ((rc = ops_launched(err, "rel_softmax_kernel")) != HARK_OK)
            break;
        for (int h = 0; h < heads && rc == HARK_OK; h++)
            rc = cuda_gemm(ctx + (size_t)b0 * t * ldc + (size_t)h * dk, dt,
                           sc + (size_t)h * ng * t * t,
                           qkv + (size_t)b0 * t * ld + 2 * hd + (size_t)h * dk, dt, t, dk, t, t,
                           (int)ld, (int)ldc, 0, 1.0f, 0.0f, ng, (long long)t * t,
                           (long long)t * ld, (long long)t * ldc, g, err);
    }
    return rc;
}

extern "C" int cuda_rel_attention(void *ctx, long long ldc, ops_dtype_t dt, void *scratch,
                                  size_t scratch_bytes, const void *qkv, long long ld,
                                  const void *pp, long long ldp, const float *bu, const float *bv,
                                  const int *lens, int chunk, int left, int batch, int t, int heads,
                                  int dk, float scale, ops_cuda_t *g, hark_err_t *err)
{
    if (batch <= 0 || t <= 0)
        return HARK_OK;
    if (heads <= 0 || dk <= 0 || ld < 3LL * heads * dk || ldp < (long long)heads * dk ||
        ldc < (long long)heads * dk)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "rel_attention: %d heads of %d with row strides %lld / %lld / %lld", heads,
                       dk, ld, ldp, ldc);
    if (dt == OPS_F16)
        return rel_attention_t((__half *)ctx, ldc, dt, scratch, scratch_bytes, (const __half *)qkv,
                               ld, (const __half *)pp, ldp, bu, bv, lens, chunk, left, batch, t,
                               heads, dk, scale, g, err);
    if (dt == OPS_BF16)
        return rel_attention_t((__nv_bfloat16 *)ctx, ldc, dt, scratch, scratch_bytes,
                               (const __nv_bfloat16 *)qkv, ld, (const __nv_bfloat16 *)pp, ldp, bu,
                               bv, lens, chunk, left, batch, t, heads, dk, scale, g, err);
    return rel_attention_t((float *)ctx, ldc, dt, scratch, scratch_bytes, (const float *)qkv, ld,
                           (const float *)pp, ldp, bu, bv, lens, chunk, left, batch, t, heads, dk,
                           scale, g, err);
}

/* ---- greedy search ------------------------------------------------------------------------- */

/* h[b][j] = tanh(ep[b][t][j] + dp[b][j] + bdp[j]) for every row (rows past their length too:
 * their results are not used) */
template <typename T>
__global__ void joiner_hidden_kernel(T *h, const float *ep, long long ep_b, const int *rows,
                                     const float *dp, const float *bdp, int t, int J, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(e % (size_t)J);
        size_t b = e / (size_t)J, u = rows ? (size_t)rows[b] : b;
        float v = ep[u * ep_b + (size_t)t * J + j] + dp[e] + (bdp ? bdp[j] : 0.0f);
        tr_st(h, e, tanhf(v));
    }
}

extern "C" int cuda_joiner_hidden(void *h, ops_dtype_t h_t, const float *ep, long long ep_b,
                                  const int *rows, const float *dp, const float *bdp, int t,
                                  int batch, int J, void *stream, hark_err_t *err)
{
    size_t n = (size_t)batch * J;
    if (n == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned g = ops_grid_for(n, 256);
    if (h_t == OPS_F16)
        joiner_hidden_kernel<<<g, 256, 0, st>>>((__half *)h, ep, ep_b, rows, dp, bdp, t, J, n);
    else if (h_t == OPS_BF16)
        joiner_hidden_kernel<<<g, 256, 0, st>>>((__nv_bfloat16 *)h, ep, ep_b, rows, dp, bdp, t, J,
                                                n);
    else
        joiner_hidden_kernel<<<g, 256, 0, st>>>((float *)h, ep, ep_b, rows, dp, bdp, t, J, n);
    return ops_launched(err, "joiner_hidden_kernel");
}

/* the stateless decoder of row b's context (cs ids, oldest first; -1: a zero embedding) into dec
 * (D) of T: relu(Σ_k Σ_j W[ch][j][k] · emb[ctx_k][gs·(ch / gs) + j]) */
template <typename T>
__device__ void decoder_row(T *dec, const int *ctx, const float *emb, const float *conv, int D,
                            int cs, int gs)
{
    for (int ch = threadIdx.x; ch < D; ch += blockDim.x) {
        float o = 0.0f;
        for (int k = 0; k < cs; k++) {
            int id = ctx[k];
            if (id < 0)
                continue;
            const float *e = emb + (size_t)id * D + (ch / gs) * gs;
            const float *wc = conv + (size_t)ch * gs * cs + k;
            for (int j = 0; j < gs; j++)
                o += wc[(size_t)j * cs] * e[j];
        }
        tr_st(dec, ch, o > 0.0f ? o : 0.0f);
    }
}

/* one block per row; t < 0: the start (context [-1]·(cs - 1) + [blank], no tokens) */
template <typename T>
__global__ void greedy_step_kernel(cuda_greedy_t G, T *dec, const float *logits, const int *lens,
                                   int t)
{
    __shared__ float bv[32];
    __shared__ int bi[32];
    __shared__ int emit;
    const int b = blockIdx.x;
    int *ctx = G.ctx + (size_t)b * G.cs;
    if (t < 0) {
        if (threadIdx.x == 0) {
            for (int k = 0; k < G.cs; k++)
                ctx[k] = k == G.cs - 1 ? G.blank : -1;
            G.count[b] = 0;
            G.score[b] = 0.0f;
        }
        __syncthreads();
        decoder_row(dec + (size_t)b * G.D, ctx, G.emb, G.conv, G.D, G.cs, G.gs);
        return;
    }
    if (t >= lens[b])
        return;
    const float *lr = logits + (size_t)b * G.ldl;
    float best = -INFINITY;
    int arg = 0x7fffffff;
    for (int v = threadIdx.x; v < G.V; v += blockDim.x) {
        float x = lr[v] + (G.bias ? G.bias[v] : 0.0f);
        if (x > best || (x == best && v < arg)) {
            best = x;
            arg = v;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (ob > best || (ob == best && oa < arg)) {
            best = ob;
            arg = oa;
        }
    }
    if ((threadIdx.x & 31) == 0) {
        bv[threadIdx.x / 32] = best;
        bi[threadIdx.x / 32] = arg;
    }
    __syncthreads();
    if (threadIdx.x == 0) { /* its own pair is warp 0's */
        for (int w = 1; w < (int)blockDim.x / 32; w++)
            if (bv[w] > best || (bv[w] == best && bi[w] < arg)) {
                best = bv[w];
                arg = bi[w];
            }
        emit = arg != G.blank;
        if (emit) {
            int c = G.count[b];
            if (c < G.cap) {
                G.tokens[(size_t)b * G.cap + c] = arg;
                G.times[(size_t)b * G.cap + c] = t;
            }
            G.count[b] = c + 1;
            G.score[b] += best;
            for (int k = 0; k + 1 < G.cs; k++)
                ctx[k] = ctx[k + 1];
            ctx[G.cs - 1] = arg;
        }
    }
    __syncthreads();
    if (emit)
        decoder_row(dec + (size_t)b * G.D, ctx, G.emb, G.conv, G.D, G.cs, G.gs);
}

extern "C" int cuda_greedy_step(const cuda_greedy_t *g, void *dec, ops_dtype_t dec_t,
                                const float *logits, const int *lens, int t, int batch,
                                void *stream, hark_err_t *err)
{
    if (batch <= 0)
        return HARK_OK;
    if (g->cs < 1 || g->gs < 1 || g->D % g->gs || g->V < 1 || g->cap < 1 ||
        (t >= 0 && (!logits || !lens)))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "greedy_step: context %d, group %d of %d, vocabulary %d, room %d", g->cs,
                       g->gs, g->D, g->V, g->cap);
    cudaStream_t st = (cudaStream_t)stream;
    if (dec_t == OPS_F16)
        greedy_step_kernel<<<batch, 128, 0, st>>>(*g, (__half *)dec, logits, lens, t);
    else if (dec_t == OPS_BF16)
        greedy_step_kernel<<<batch, 128, 0, st>>>(*g, (__nv_bfloat16 *)dec, logits, lens, t);
    else
        greedy_step_kernel<<<batch, 128, 0, st>>>(*g, (float *)dec, logits, lens, t);
    return ops_launched(err, "greedy_step_kernel");
}

/* ---- modified beam search ------------------------------------------------------------------- */

template <typename T>
__global__ void transducer_decoder_kernel(T *dec, const int *ctx, const float *emb,
                                          const float *conv, int D, int cs, int gs)
{
    const size_t r = blockIdx.x;
    decoder_row(dec + r * D, ctx + r * cs, emb, conv, D, cs, gs);
}

extern "C" int cuda_transducer_decoder(void *dec, ops_dtype_t dec_t, const int *ctx, int n,
                                       const float *emb, const float *conv, int D, int cs, int gs,
                                       void *stream, hark_err_t *err)
{
    if (n <= 0)
        return HARK_OK;
    if (cs < 1 || gs < 1 || D % gs)
        return err_set(err, HARK_ERR_INVALID_ARG, "transducer_decoder: context %d, group %d of %d",
                       cs, gs, D);
    cudaStream_t st = (cudaStream_t)stream;
    if (dec_t == OPS_F16)
        transducer_decoder_kernel<<<n, 128, 0, st>>>((__half *)dec, ctx, emb, conv, D, cs, gs);
    else if (dec_t == OPS_BF16)
        transducer_decoder_kernel<<<n, 128, 0, st>>>((__nv_bfloat16 *)dec, ctx, emb, conv, D, cs,
                                                     gs);
    else
        transducer_decoder_kernel<<<n, 128, 0, st>>>((float *)dec, ctx, emb, conv, D, cs, gs);
    return ops_launched(err, "transducer_decoder_kernel");
}

#define TOPK_THREADS 256

/* (v, i) ranks before (bv, bi): the larger value, the lower index on ties */
static __device__ __forceinline__ bool topk_before(float v, int i, float bv, int bi)
{
    return v > bv || (v == bv && i < bi);
}

/* one block of TOPK_THREADS per set: each row's max and log-sum-exp (a warp per row, the sum in
 * double as log_softmax_ref), then k rounds of a block-wide pick of the best entry ranking after
 * the previous pick */
__global__ void beam_topk_kernel(float *val, int *idx, const float *x, long long ldx,
                                 const float *bias, const float *hyp, const int *off, int max_rows,
                                 int V, int k)
{
    extern __shared__ float sh[]; /* mx (max_rows), lse (max_rows) */
    __shared__ float wv[TOPK_THREADS / 32];
    __shared__ int wi[TOPK_THREADS / 32];
    __shared__ float pv_s;
    __shared__ int pi_s;
    const int s = blockIdx.x, r0 = off[s], n = off[s + 1] - r0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *mx = sh, *lse = sh + max_rows;
    float *vo = val + (size_t)s * k;
    int *io = idx + (size_t)s * k;
    if (n < 0 || n > max_rows) {
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            vo[j] = -INFINITY;
            io[j] = -2;
        }
        return;
    }
    for (int r = warp; r < n; r += TOPK_THREADS / 32) {
        const float *xr = x + (size_t)(r0 + r) * ldx;
        float m = -INFINITY;
        for (int v = lane; v < V; v += 32)
            m = fmaxf(m, xr[v] + (bias ? bias[v] : 0.0f));
        for (int o = 16; o > 0; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        double sum = 0.0;
        for (int v = lane; v < V; v += 32)
            sum += exp((double)((xr[v] + (bias ? bias[v] : 0.0f)) - m));
        for (int o = 16; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) {
            mx[r] = m;
            lse[r] = (float)log(sum);
        }
    }
    __syncthreads();
    const long long tot = (long long)n * V;
    const int nk = tot < k ? (int)tot : k;
    float pv = INFINITY;
    int pi = -1;
    for (int j = 0; j < nk; j++) {
        float best = -INFINITY;
        int arg = 0x7fffffff;
        for (long long e = threadIdx.x; e < tot; e += TOPK_THREADS) {
            const int r = (int)(e / V), v = (int)(e % V);
            const float xv = x[(size_t)(r0 + r) * ldx + v] + (bias ? bias[v] : 0.0f);
            const float lp = ((xv - mx[r]) - lse[r]) + hyp[r0 + r];
            if (!topk_before(pv, pi, lp, (int)e)) /* ranks at or before the previous pick */
                continue;
            if (topk_before(lp, (int)e, best, arg))
                best = lp, arg = (int)e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, o);
            int oa = __shfl_xor_sync(0xffffffffu, arg, o);
            if (topk_before(ob, oa, best, arg))
                best = ob, arg = oa;
        }
        if (lane == 0) {
            wv[warp] = best;
            wi[warp] = arg;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < TOPK_THREADS / 32; w++)
                if (topk_before(wv[w], wi[w], best, arg))
                    best = wv[w], arg = wi[w];
            vo[j] = best;
            io[j] = arg < tot ? arg : -2; /* nothing left that compares (NaN): an error */
            pv_s = best;
            pi_s = arg;
        }
        __syncthreads();
        pv = pv_s;
        pi = pi_s;
        __syncthreads();
    }
    for (int j = nk + (int)threadIdx.x; j < k; j += blockDim.x) {
        vo[j] = -INFINITY;
        io[j] = -1;
    }
}

extern "C" int cuda_beam_topk(float *val, int *idx, const float *x, long long ldx,
                              const float *bias, const float *hyp, const int *off, int sets,
                              int max_rows, int V, int k, void *stream, hark_err_t *err)
{
    if (sets <= 0)
        return HARK_OK;
    if (max_rows < 1 || max_rows > 1024 || V < 1 || k < 1 || ldx < V ||
        (long long)max_rows * V > 0x7fffffffLL)
        return err_set(err, HARK_ERR_INVALID_ARG, "beam_topk: %d rows of %d (ld %lld), k %d",
                       max_rows, V, ldx, k);
    size_t shm = sizeof(float) * 2 * (size_t)max_rows;
    beam_topk_kernel<<<sets, TOPK_THREADS, shm, (cudaStream_t)stream>>>(val, idx, x, ldx, bias, hyp,
                                                                        off, max_rows, V, k);
    return ops_launched(err, "beam_topk_kernel");
}
