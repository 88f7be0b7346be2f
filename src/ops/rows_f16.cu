/* rows_f16.cu — the row and elementwise stages of the FP16 Conformer path around the GEMMs of
 * gemm_f16.cu: layer norms of the FP32 residual stream into FP16 GEMM inputs (a warp per row), the
 * depthwise conv + norm + activation over FP16 time tiles, the first subsampling conv fused with
 * CMVN (FP32 features in, a channel-last FP16 image out), and the CTC head's log-softmax fused
 * with the greedy argmax (one pass over the logits). The 16-bit kernels are templates over the
 * element type T (__half or __nv_bfloat16): "FP16" and "half" here mean either.
 * CPU references: layer_norm_ref, depthwise_conv1d_ref + batch_norm_ref/layer_norm_ref +
 * activation_ref, conv2d_ref + relu_ref, log_softmax_ref + ctc_argmax_ref.
 * Tests: tests/ops/test_ops_cuda.c (cuda_rows_norm_*, cuda_dwconv_f16_*, cuda_conv1_cmvn_*,
 * cuda_ctc_log_softmax_argmax_*). */
#include "ops/ops_cuda.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>

static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e))
               : HARK_OK;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The warp sums of 16 values at once (v[r]: this lane's part of row r), by recursive halving: each
 * exchange sends the half of the rows the partner keeps (16 shuffles instead of 80). Returns the
 * sum of row lane / 2; v is overwritten. */
__device__ __forceinline__ float warp_sum_rows16(float *v, int lane)
{
#pragma unroll
    for (int o = 16, n = 8; o >= 2; o >>= 1, n >>= 1) {
        bool up = lane & o; /* keeps rows [n, 2n) of the current 2n */
#pragma unroll
        for (int k = 0; k < n; k++) {
            float keep = up ? v[k + n] : v[k], send = up ? v[k] : v[k + n];
            v[k] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

/* ---- layer norms, a warp per row ------------------------------------------------------------ */

/* in place over v[0..EPL) (element lane + 32·i valid when < d) */
template <int EPL>
__device__ __forceinline__ void ln_lane(float *v, int lane, int d, const float *g, const float *b,
                                        float eps)
{
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; i++)
        if (lane + 32 * i < d)
            s += v[i];
    float mean = warp_sum(s) / (float)d, q = 0.0f;
#pragma unroll
    for (int i = 0; i < EPL; i++)
        if (lane + 32 * i < d) {
            float c = v[i] - mean;
            q += c * c;
        }
    float rstd = 1.0f / sqrtf(warp_sum(q) / (float)d + eps);
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        int e = lane + 32 * i;
        if (e < d)
            v[i] = (v[i] - mean) * rstd * (g ? g[e] : 1.0f) + (b ? b[e] : 0.0f);
    }
}

template <typename T, int EPL>
__global__ void rows_norm_kernel(float *x_out, int x_sel, T *h_out, float *o32, const float *x,
                                 const float *g1, const float *b1, int ln1, const float *g2,
                                 const float *b2, int ln2, const int *lens, int t_rows, int n,
                                 int d, float eps)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n)
        return;
    size_t off = (size_t)row * d;
    float v[EPL];
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        int e = lane + 32 * i;
        v[i] = e < d ? x[off + e] : 0.0f;
    }
    for (int step = 1; step <= 2; step++) { /* LN1, then LN2; x_out takes the x_sel-th result */
        if (step == 1 ? ln1 : ln2)
            ln_lane<EPL>(v, lane, d, step == 1 ? g1 : g2, step == 1 ? b1 : b2, eps);
        if (x_out && x_sel == step)
#pragma unroll
            for (int i = 0; i < EPL; i++)
                if (lane + 32 * i < d)
                    x_out[off + lane + 32 * i] = v[i];
    }
    bool pad = lens && (row % t_rows) >= lens[row / t_rows];
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        int e = lane + 32 * i;
        if (e >= d)
            continue;
        float z = pad ? 0.0f : v[i];
        if (h_out)
            h_out[off + e] = h16<T>::from_f(z);
        if (o32)
            o32[off + e] = z;
    }
}

template <typename T>
static void rows_norm_launch(float *x_out, int x_sel, void *h_out, float *o32, const float *x,
                             const float *g1, const float *b1, int ln1, const float *g2,
                             const float *b2, int ln2, const int *lens, int t_rows, int n, int d,
                             float eps, cudaStream_t st)
{
    unsigned grid = (unsigned)((n + 7) / 8);
#define RN(E)                                                                                      \
    rows_norm_kernel<T, E><<<grid, 256, 0, st>>>(x_out, x_sel, (T *)h_out, o32, x, g1, b1, ln1,    \
                                                 g2, b2, ln2, lens, t_rows, n, d, eps)
    if (d <= 128)
        RN(4);
    else if (d <= 256)
        RN(8);
    else if (d <= 512)
        RN(16);
    else
        RN(32);
#undef RN
}

extern "C" int cuda_rows_norm(float *x_out, int x_sel, void *h_out, ops_dtype_t h_t, float *o32,
                              const float *x, const float *g1, const float *b1, int ln1,
                              const float *g2, const float *b2, int ln2, const int *lens,
                              int t_rows, int n, int d, float eps, void *stream, hark_err_t *err)
{
    if (n <= 0 || d <= 0)
        return HARK_OK;
    if (d > CUDA_ROWS_NORM_MAX_D || (lens && t_rows <= 0) || x_sel < 0 || x_sel > 2 ||
        (h_t != OPS_F16 && h_t != OPS_BF16))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "rows_norm: d %d (at most %d), t_rows %d, x_sel %d, h_t %d (16-bit)", d,
                       CUDA_ROWS_NORM_MAX_D, t_rows, x_sel, (int)h_t);
    cudaStream_t st = (cudaStream_t)stream;
    if (h_t == OPS_BF16)
        rows_norm_launch<__nv_bfloat16>(x_out, x_sel, h_out, o32, x, g1, b1, ln1, g2, b2, ln2, lens,
                                        t_rows, n, d, eps, st);
    else
        rows_norm_launch<__half>(x_out, x_sel, h_out, o32, x, g1, b1, ln1, g2, b2, ln2, lens,
                                 t_rows, n, d, eps, st);
    return launched(err, "rows_norm_kernel");
}

/* ---- depthwise conv + norm + activation, FP16 in and out ------------------------------------ */

#define DW_THREADS 128 /* each thread owns channel pairs p = tid + DW_THREADS·q */
#define DW_LU 8        /* input rows whose loads a thread issues together */

/* output rows per block: 16, 8 where each thread holds 4 channel pairs */
template <int PPT> struct dw_tile {
    static constexpr int TT = PPT == 4 ? 8 : 16;
};

/* Any kernel size and channel count (the general path): grid (ceil(t_len / TT), batch); c even;
 * PPT channel pairs per thread. The input rows of the tile and its halo are loaded DW_LU at a time
 * per thread (independent loads in flight) into shared memory as half pairs;
 * each thread then convolves its channels down the tile. */
template <typename T, int PPT>
__global__ void __launch_bounds__(DW_THREADS)
    dwconv_f16_kernel(T *out, const T *in, const float *left, const float *w, const float *bias,
                      const int *lens, int t_len, int c, int k, int pad_left, int norm,
                      const float *g, const float *beta, const float *rm, const float *rv,
                      float eps, int act)
{
    constexpr int DW_TT = dw_tile<PPT>::TT;
    typedef typename h16<T>::T2 T2;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T2 *rows = (T2 *)smem_raw;                    /* (DW_TT + k - 1, c / 2) */
    __shared__ float red[DW_THREADS / 32][DW_TT]; /* per-warp partial row sums */
    __shared__ float stat[2][DW_TT];              /* mean, 1/std */
    int t0 = blockIdx.x * DW_TT, b = blockIdx.y, tid = threadIdx.x, c2 = c >> 1;
    int valid = lens ? min(lens[b], t_len) : t_len;
    int nr = DW_TT + k - 1;
    const unsigned *inb = (const unsigned *)in + (size_t)b * t_len * c2;
    for (int r0 = 0; r0 < nr; r0 += DW_LU) {
        unsigned u[DW_LU][PPT];
#pragma unroll
        for (int l = 0; l < DW_LU; l++)
#pragma unroll
            for (int q = 0; q < PPT; q++) {
                int s = t0 - pad_left + r0 + l, p = tid + DW_THREADS * q;
                u[l][q] = 0u;
                if (r0 + l < nr && p < c2 && s >= 0 && s < valid)
                    u[l][q] = inb[(size_t)s * c2 + p];
            }
#pragma unroll
        for (int l = 0; l < DW_LU; l++)
#pragma unroll
            for (int q = 0; q < PPT; q++) {
                int r = r0 + l, s = t0 - pad_left + r, p = tid + DW_THREADS * q;
                if (r >= nr || p >= c2)
                    continue;
                T2 v = h16<T>::from_f2(0.0f, 0.0f);
                if (s >= 0 && s < valid) {
                    v = *(T2 *)&u[l][q];
                } else if (s < 0 && left) {
                    v = h16<T>::from_f2(left[(size_t)(pad_left + s) * c + 2 * p],
                                        left[(size_t)(pad_left + s) * c + 2 * p + 1]);
                }
                rows[r * c2 + p] = v;
            }
    }
    __syncthreads();
    float z[PPT][2][DW_TT];
#pragma unroll
    for (int q = 0; q < PPT; q++) {
        int p = tid + DW_THREADS * q;
#pragma unroll
        for (int e = 0; e < 2; e++)
#pragma unroll
            for (int r = 0; r < DW_TT; r++)
                z[q][e][r] = 0.0f;
        if (p >= c2)
            continue;
        float b0 = bias ? bias[2 * p] : 0.0f, b1 = bias ? bias[2 * p + 1] : 0.0f;
#pragma unroll
        for (int r = 0; r < DW_TT; r++) {
            z[q][0][r] = b0;
            z[q][1][r] = b1;
        }
        for (int j = 0; j < k; j++) {
            float w0 = w[(size_t)(2 * p) * k + j], w1 = w[(size_t)(2 * p + 1) * k + j];
#pragma unroll
            for (int r = 0; r < DW_TT; r++) {
                float2 v = h16<T>::to_f2(rows[(r + j) * c2 + p]);
                z[q][0][r] += w0 * v.x;
                z[q][1][r] += w1 * v.y;
            }
        }
        if (norm == CUDA_NORM_BATCH) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int ch = 2 * p + e;
                float inv = 1.0f / sqrtf(rv[ch] + eps), gg = g ? g[ch] : 1.0f,
                      be = beta ? beta[ch] : 0.0f, mu = rm[ch];
#pragma unroll
                for (int r = 0; r < DW_TT; r++)
                    z[q][e][r] = (z[q][e][r] - mu) * inv * gg + be;
            }
        }
    }
    if (norm == CUDA_NORM_LAYER) { /* two passes over the row: mean, then variance */
        int warp = tid >> 5, lane = tid & 31;
        for (int pass = 0; pass < 2; pass++) {
#pragma unroll
            for (int r = 0; r < DW_TT; r++) {
                float sum = 0.0f;
#pragma unroll
                for (int q = 0; q < PPT; q++)
                    if (tid + DW_THREADS * q < c2)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float v = z[q][e][r] - (pass ? stat[0][r] : 0.0f);
                            sum += pass ? v * v : v;
                        }
                sum = warp_sum(sum);
                if (lane == 0)
                    red[warp][r] = sum;
            }
            __syncthreads();
            if (tid < DW_TT) {
                float sum = 0.0f;
                for (int i = 0; i < DW_THREADS / 32; i++)
                    sum += red[i][tid];
                if (pass == 0)
                    stat[0][tid] = sum / (float)c;
                else
                    stat[1][tid] = 1.0f / sqrtf(sum / (float)c + eps);
            }
            __syncthreads();
        }
#pragma unroll
        for (int q = 0; q < PPT; q++) {
            int p = tid + DW_THREADS * q;
            if (p >= c2)
                continue;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int ch = 2 * p + e;
                float gg = g ? g[ch] : 1.0f, be = beta ? beta[ch] : 0.0f;
#pragma unroll
                for (int r = 0; r < DW_TT; r++)
                    z[q][e][r] = (z[q][e][r] - stat[0][r]) * stat[1][r] * gg + be;
            }
        }
    }
    T2 *ob = (T2 *)out + (size_t)b * t_len * c2;
#pragma unroll
    for (int q = 0; q < PPT; q++) {
        int p = tid + DW_THREADS * q;
        if (p >= c2)
            continue;
#pragma unroll
        for (int r = 0; r < DW_TT; r++)
            if (t0 + r < t_len)
                ob[(size_t)(t0 + r) * c2 + p] =
                    h16<T>::from_f2(act_f(z[q][0][r], act), act_f(z[q][1][r], act));
    }
}

/* The common shapes (kernel K = 15 or 31, at most 256 channels): grid (ceil(t_len / DWR_ROWS),
 * batch), a thread per channel pair. Each thread walks the DWR_ROWS + K - 1 input rows of its
 * tile straight from global memory (all loads independent, the halo rows shared with the
 * neighbouring tiles through L1/L2) and adds each row into the outputs it reaches: weights and
 * accumulators stay in registers, no shared-memory staging and no barrier before the norm. Short
 * blocks, so batch 1 still spreads over ceil(t_len / 16) multiprocessors. */
#define DWR_ROWS 16
#define DWR_THREADS 128

/* the activations as the GEMM epilogues compute them (fast exp and reciprocal: the result is
 * rounded to half) */
__device__ __forceinline__ float act_fast(float x, int act)
{
    switch (act) {
    case CUDA_ACT_RELU:
        return epi_act<CUDA_ACT_RELU>(x);
    case CUDA_ACT_SWISH:
        return epi_act<CUDA_ACT_SWISH>(x);
    case CUDA_ACT_GELU:
        return epi_act<CUDA_ACT_GELU>(x);
    case CUDA_ACT_DSWISH:
        return epi_act<CUDA_ACT_DSWISH>(x);
    case CUDA_ACT_SWOOSHL:
        return epi_act<CUDA_ACT_SWOOSHL>(x);
    case CUDA_ACT_SWOOSHR:
        return epi_act<CUDA_ACT_SWOOSHR>(x);
    default:
        return x;
    }
}

template <typename T, int K>
__global__ void __launch_bounds__(DWR_THREADS, K <= 15 ? 4 : 2)
    dwconv_reg_kernel(T *out, const T *in, const float *left, const float *w, const float *bias,
                      const int *lens, int t_len, int c, int pad_left, int norm, const float *g,
                      const float *beta, const float *rm, const float *rv, float eps, int act)
{
    constexpr int R = DWR_ROWS, NI = R + K - 1;
    typedef typename h16<T>::T2 T2;
    static_assert(R == 16, "warp_sum_rows16");
    __shared__ float red[2][DWR_THREADS / 32][R];
    int t0 = blockIdx.x * R, b = blockIdx.y, p = threadIdx.x, c2 = c >> 1;
    int warp = p >> 5, lane = p & 31;
    bool on = p < c2;
    int valid = lens ? min(lens[b], t_len) : t_len;
    float2 wk[K], z[R];
    float b0 = on && bias ? bias[2 * p] : 0.0f, b1 = on && bias ? bias[2 * p + 1] : 0.0f;
#pragma unroll
    for (int j = 0; j < K; j++)
        wk[j] = on ? make_float2(w[(size_t)(2 * p) * K + j], w[(size_t)(2 * p + 1) * K + j])
                   : make_float2(0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < R; r++)
        z[r] = make_float2(b0, b1);
    const unsigned *inb = (const unsigned *)in + (size_t)b * t_len * c2;
    /* every load of the tile first (independent, all in flight), then the arithmetic */
    unsigned u[NI];
#pragma unroll
    for (int i = 0; i < NI; i++) {
        int s = t0 - pad_left + i;
        u[i] = on && s >= 0 && s < valid ? inb[(size_t)s * c2 + p] : 0u; /* else 0 */
    }
    bool from_left = left && on && t0 < pad_left; /* the tile reaches into the cached rows */
#pragma unroll
    for (int i = 0; i < NI; i++) {
        float2 x = h16<T>::to_f2(*(T2 *)&u[i]); /* rows outside the utterance loaded as 0 */
        int s = t0 - pad_left + i;
        if (from_left && s < 0)
            x = h16<T>::to_f2(h16<T>::from_f2(left[(size_t)(pad_left + s) * c + 2 * p],
                                              left[(size_t)(pad_left + s) * c + 2 * p + 1]));
#pragma unroll
        for (int j = 0; j < K; j++) {
            int r = i - j;
            if (r >= 0 && r < R) {
                z[r].x += wk[j].x * x.x;
                z[r].y += wk[j].y * x.y;
            }
        }
    }
    if (norm == CUDA_NORM_BATCH) {
        float i0 = on ? rsqrtf(rv[2 * p] + eps) : 0.0f,
              i1 = on ? rsqrtf(rv[2 * p + 1] + eps) : 0.0f;
        float g0 = on && g ? g[2 * p] : 1.0f, g1 = on && g ? g[2 * p + 1] : 1.0f;
        float e0 = on && beta ? beta[2 * p] : 0.0f, e1 = on && beta ? beta[2 * p + 1] : 0.0f;
        float m0 = on ? rm[2 * p] : 0.0f, m1 = on ? rm[2 * p + 1] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            z[r].x = (z[r].x - m0) * i0 * g0 + e0;
            z[r].y = (z[r].y - m1) * i1 * g1 + e1;
        }
    } else if (norm == CUDA_NORM_LAYER) { /* mean, then variance, over the row's c channels */
        float mean[R], part[R], inv_c = 1.0f / (float)c;
#pragma unroll
        for (int r = 0; r < R; r++)
            part[r] = on ? z[r].x + z[r].y : 0.0f;
        float v = warp_sum_rows16(part, lane); /* row lane / 2 */
        if (!(lane & 1))
            red[0][warp][lane >> 1] = v;
        __syncthreads();
#pragma unroll
        for (int r = 0; r < R; r++) {
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < DWR_THREADS / 32; i++)
                sum += red[0][i][r];
            mean[r] = sum * inv_c;
            float dx = z[r].x - mean[r], dy = z[r].y - mean[r];
            part[r] = on ? dx * dx + dy * dy : 0.0f;
        }
        v = warp_sum_rows16(part, lane);
        if (!(lane & 1))
            red[1][warp][lane >> 1] = v;
        __syncthreads();
        float g0 = on && g ? g[2 * p] : 1.0f, g1 = on && g ? g[2 * p + 1] : 1.0f;
        float e0 = on && beta ? beta[2 * p] : 0.0f, e1 = on && beta ? beta[2 * p + 1] : 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++) {
            float sum = 0.0f;
#pragma unroll
            for (int i = 0; i < DWR_THREADS / 32; i++)
                sum += red[1][i][r];
            float rstd = rsqrtf(sum * inv_c + eps);
            z[r].x = (z[r].x - mean[r]) * rstd * g0 + e0;
            z[r].y = (z[r].y - mean[r]) * rstd * g1 + e1;
        }
    }
    if (!on)
        return;
    T2 *ob = (T2 *)out + (size_t)b * t_len * c2;
#pragma unroll
    for (int r = 0; r < R; r++)
        if (t0 + r < t_len)
            ob[(size_t)(t0 + r) * c2 + p] =
                h16<T>::from_f2(act_fast(z[r].x, act), act_fast(z[r].y, act));
}

template <typename T>
static int dwconv_launch(void *out, const void *in, const float *left, const float *w,
                         const float *bias, const int *lens, int batch, int t_len, int c, int k,
                         int pad_left, cuda_norm_t norm, const float *g, const float *beta,
                         const float *rm, const float *rv, float eps, cuda_act_t act,
                         cudaStream_t st, hark_err_t *err)
{
    if ((k == 15 || k == 31) && c <= 2 * DWR_THREADS) {
        dim3 grid((unsigned)((t_len + DWR_ROWS - 1) / DWR_ROWS), (unsigned)batch);
#define DWR(KK)                                                                                    \
    dwconv_reg_kernel<T, KK><<<grid, DWR_THREADS, 0, st>>>((T *)out, (const T *)in, left, w, bias, \
                                                           lens, t_len, c, pad_left, (int)norm, g, \
                                                           beta, rm, rv, eps, (int)act)
        if (k == 15)
            DWR(15);
        else
            DWR(31);
#undef DWR
        return launched(err, "dwconv_reg_kernel");
    }
    static bool set[3][64];
#define DW(P, I)                                                                                   \
    do {                                                                                           \
        constexpr int tt_ = dw_tile<P>::TT;                                                        \
        size_t smem = (size_t)(tt_ + k - 1) * c * sizeof(T);                                       \
        dim3 grid((unsigned)((t_len + tt_ - 1) / tt_), (unsigned)batch);                           \
        cudaError_t e_ = ops_smem_opt_in((const void *)dwconv_f16_kernel<T, P>, smem, set[I]);     \
        if (e_ != cudaSuccess)                                                                     \
            return err_set(err, HARK_ERR_CUDA, "dwconv_f16 smem: %s", cudaGetErrorString(e_));     \
        dwconv_f16_kernel<T, P><<<grid, DW_THREADS, smem, st>>>(                                   \
            (T *)out, (const T *)in, left, w, bias, lens, t_len, c, k, pad_left, (int)norm, g,     \
            beta, rm, rv, eps, (int)act);                                                          \
    } while (0)
    if (c <= 2 * DW_THREADS)
        DW(1, 0);
    else if (c <= 4 * DW_THREADS)
        DW(2, 1);
    else
        DW(4, 2);
#undef DW
    return launched(err, "dwconv_f16_kernel");
}

extern "C" int cuda_dwconv_f16(void *out, ops_dtype_t dt, const void *in, const float *left,
                               const float *w, const float *bias, const int *lens, int batch,
                               int t_len, int c, int k, int pad_left, cuda_norm_t norm,
                               const float *g, const float *beta, const float *rm, const float *rv,
                               float eps, cuda_act_t act, void *stream, hark_err_t *err)
{
    if (batch <= 0 || t_len <= 0 || c <= 0)
        return HARK_OK;
    if (k <= 0 || k > 64 || pad_left < 0 || pad_left >= k || c % 2 || c > 8 * DW_THREADS ||
        (norm == CUDA_NORM_BATCH && (!rm || !rv)) || (dt != OPS_F16 && dt != OPS_BF16))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "dwconv_f16: kernel %d (1..64), pad_left %d, %d channels (even, at most "
                       "%d), norm %d, dtype %d (16-bit)",
                       k, pad_left, c, 8 * DW_THREADS, (int)norm, (int)dt);
    cudaStream_t st = (cudaStream_t)stream;
    if (dt == OPS_BF16)
        return dwconv_launch<__nv_bfloat16>(out, in, left, w, bias, lens, batch, t_len, c, k,
                                            pad_left, norm, g, beta, rm, rv, eps, act, st, err);
    return dwconv_launch<__half>(out, in, left, w, bias, lens, batch, t_len, c, k, pad_left, norm,
                                 g, beta, rm, rv, eps, act, st, err);
}

/* ---- first subsampling conv (one input channel) fused with CMVN ----------------------------- */

/* grid (ceil(h_out / C1_HO), batch), 128 threads: V output channels a lane, C1_HO output rows a
 * block (the weights loaded once for them); smem: the rows of f floats they read (the CMVN'd
 * features, zero past the utterance's end) */
#define C1_HO 4
template <typename T, int K, int V>
__global__ void conv1_cmvn_kernel(T *out, const float *x, const float *mean, const float *istd,
                                  const int *lens, int t, int f, const float *w, const float *bias,
                                  int cout, int stride, int h_out, int w_out, int relu)
{
    extern __shared__ float xs[]; /* ((C1_HO - 1) · stride + K, f) */
    int ho0 = blockIdx.x * C1_HO, b = blockIdx.y, nho = min(C1_HO, h_out - ho0);
    int nrows = (nho - 1) * stride + K;
    int valid = lens ? min(lens[b], t) : t;
    for (int idx = threadIdx.x; idx < nrows * f; idx += blockDim.x) {
        int i = idx / f, col = idx - i * f, tt = ho0 * stride + i;
        float v = 0.0f;
        if (tt < valid) {
            v = x[((size_t)b * t + tt) * f + col];
            if (mean)
                v = (v - mean[col]) * istd[col];
        }
        xs[idx] = v;
    }
    __syncthreads();
    /* lane: V consecutive output channels (one 4- or 16-byte store per position), warp: output
     * columns wo = warp, warp + warps, ...; a warp writes 32·V channels of one position at once */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int co = lane * V; co < cout; co += 32 * V) {
        float wv[V][K * K], bv[V];
#pragma unroll
        for (int c = 0; c < V; c++) {
#pragma unroll
            for (int e = 0; e < K * K; e++)
                wv[c][e] = w[(size_t)(co + c) * K * K + e];
            bv[c] = bias ? bias[co + c] : 0.0f;
        }
        for (int hi = 0; hi < nho; hi++) {
            const float *xr = xs + hi * stride * f;
            T *o = out + (((size_t)b * h_out + ho0 + hi) * w_out) * cout + co;
            for (int wo = warp; wo < w_out; wo += warps) {
                float a[V];
#pragma unroll
                for (int c = 0; c < V; c++)
                    a[c] = bv[c];
#pragma unroll
                for (int i = 0; i < K; i++)
#pragma unroll
                    for (int j = 0; j < K; j++) {
                        float x = xr[i * f + wo * stride + j];
#pragma unroll
                        for (int c = 0; c < V; c++)
                            a[c] += wv[c][i * K + j] * x;
                    }
                __align__(16) typename h16<T>::T2 h[V / 2];
#pragma unroll
                for (int c = 0; c < V; c += 2) {
                    float a0 = a[c], a1 = a[c + 1];
                    if (relu) {
                        a0 = a0 < 0.0f ? 0.0f : a0;
                        a1 = a1 < 0.0f ? 0.0f : a1;
                    }
                    h[c / 2] = h16<T>::from_f2(a0, a1);
                }
                if (V == 8)
                    *(uint4 *)(o + (size_t)wo * cout) = *(const uint4 *)h;
                else
                    *(typename h16<T>::T2 *)(o + (size_t)wo * cout) = h[0];
            }
        }
    }
}

template <typename T>
static void conv1_launch(void *out, const float *x, const float *mean, const float *istd,
                         const int *lens, int t, int f, const float *w, const float *bias, int cout,
                         int stride, int h_out, int w_out, int relu, dim3 grid, size_t smem,
                         cudaStream_t st)
{
    if (cout % 8 == 0) /* 16-byte stores */
        conv1_cmvn_kernel<T, 3, 8><<<grid, 128, smem, st>>>((T *)out, x, mean, istd, lens, t, f, w,
                                                            bias, cout, stride, h_out, w_out, relu);
    else
        conv1_cmvn_kernel<T, 3, 2><<<grid, 128, smem, st>>>((T *)out, x, mean, istd, lens, t, f, w,
                                                            bias, cout, stride, h_out, w_out, relu);
}

extern "C" int cuda_conv1_cmvn(void *out, ops_dtype_t out_t, const float *x, const float *mean,
                               const float *istd, const int *lens, int batch, int t, int f,
                               const float *w, const float *bias, int cout, int k, int stride,
                               int relu, void *stream, hark_err_t *err)
{
    if (k != 3 || stride <= 0 || cout <= 0 || cout % 2 || (mean && !istd) ||
        (out_t != OPS_F16 && out_t != OPS_BF16))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1_cmvn: kernel %d (only 3: WeNet's first subsampling conv), stride %d, "
                       "cout %d (even), out_t %d (16-bit)",
                       k, stride, cout, (int)out_t);
    int h_out = t < k ? 0 : (t - k) / stride + 1, w_out = f < k ? 0 : (f - k) / stride + 1;
    if (batch <= 0 || h_out <= 0 || w_out <= 0)
        return HARK_OK;
    size_t smem = (size_t)((C1_HO - 1) * stride + k) * f * sizeof(float);
    if (smem > 48 * 1024)
        return err_set(err, HARK_ERR_INVALID_ARG, "conv1_cmvn: %d features, stride %d too many", f,
                       stride);
    dim3 grid((unsigned)((h_out + C1_HO - 1) / C1_HO), (unsigned)batch);
    cudaStream_t st = (cudaStream_t)stream;
    if (out_t == OPS_BF16)
        conv1_launch<__nv_bfloat16>(out, x, mean, istd, lens, t, f, w, bias, cout, stride, h_out,
                                    w_out, relu, grid, smem, st);
    else
        conv1_launch<__half>(out, x, mean, istd, lens, t, f, w, bias, cout, stride, h_out, w_out,
                             relu, grid, smem, st);
    return launched(err, "conv1_cmvn_kernel");
}

/* ---- CTC: log-softmax fused with the greedy argmax ------------------------------------------ */

/* online (max, Σexp) pairs, merged; argmax keeps the first index on ties, NaN never wins */
struct lse_t {
    float m, s;
    int i;
};

__device__ __forceinline__ lse_t lse_merge(lse_t a, lse_t b)
{
    if (b.m > a.m || (b.m == a.m && b.i < a.i && b.i >= 0)) {
        lse_t t = a;
        a = b;
        b = t;
    }
    /* a has the larger max */
    if (b.i >= 0 && a.m != -INFINITY)
        a.s += b.s * expf(b.m - a.m);
    return a;
}

/* a row's (max, Σexp(x - max), first argmax), threads tid = 0, nt, 2nt, ... of the row, then
 * merged across the warp */
__device__ __forceinline__ lse_t lsm_warp_scan(const float *xr, int V, int tid, int nt)
{
    lse_t a = {-INFINITY, 0.0f, -1};
    for (int j = tid; j < V; j += nt) {
        float v = xr[j];
        if (v > a.m) {
            a.s = (a.i >= 0 ? a.s * expf(a.m - v) : 0.0f) + 1.0f;
            a.m = v;
            a.i = j;
        } else if (a.i >= 0 && v == v) {
            a.s += expf(v - a.m);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        lse_t b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
        b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
        a = lse_merge(a, b);
    }
    return a;
}

/* row r's outputs from its merged scan a (thread tid of nt writes its share of logp) */
__device__ __forceinline__ void lsm_write(int *arg, float *best, float *logp, const float *xr,
                                          size_t r, int V, lse_t a, int tid, int nt)
{
    float lse = logf(a.s); /* log Σ exp(x - max) */
    if (tid == 0) {
        arg[r] = a.i >= 0 ? a.i : 0;
        if (best)
            best[r] = -lse;
    }
    if (logp)
        for (int j = tid; j < V; j += nt)
            logp[r * V + j] = (xr[j] - a.m) - lse;
}

/* a row past its utterance's length: arg 0, best 0, a zero logp row */
__device__ __forceinline__ bool lsm_masked(int *arg, float *best, float *logp, const int *lens,
                                           int t_rows, size_t r, int V, int tid, int nt)
{
    if (!lens || (int)(r % (size_t)t_rows) < lens[r / (size_t)t_rows])
        return false;
    if (tid == 0) {
        arg[r] = 0;
        if (best)
            best[r] = 0.0f;
    }
    if (logp)
        for (int j = tid; j < V; j += nt)
            logp[r * V + j] = 0.0f;
    return true;
}

/* one block per row (large V): arg[r], best[r] = log-prob of the argmax; logp (optional) = the
 * full row. Logits rows ldx apart, logp rows V apart. */
__global__ void ctc_lsm_argmax_kernel(int *arg, float *best, float *logp, const float *x,
                                      const int *lens, int t_rows, int V, long long ldx)
{
    __shared__ lse_t sh[32];
    size_t r = blockIdx.x;
    const float *xr = x + r * ldx;
    if (lsm_masked(arg, best, logp, lens, t_rows, r, V, threadIdx.x, blockDim.x))
        return;
    lse_t a = lsm_warp_scan(xr, V, threadIdx.x, blockDim.x);
    int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if ((threadIdx.x & 31) == 0)
        sh[w] = a;
    __syncthreads();
    a = sh[0];
    for (int i = 1; i < nw; i++)
        a = lse_merge(a, sh[i]);
    lsm_write(arg, best, logp, xr, r, V, a, threadIdx.x, blockDim.x);
}

/* one warp per row (small V: Jasper's 29 characters), 8 rows a block */
__global__ void ctc_lsm_argmax_warp_kernel(int *arg, float *best, float *logp, const float *x,
                                           const int *lens, int t_rows, int V, long long ldx, int n)
{
    size_t r = (size_t)blockIdx.x * 8 + threadIdx.y;
    if (r >= (size_t)n)
        return;
    const float *xr = x + r * ldx;
    if (lsm_masked(arg, best, logp, lens, t_rows, r, V, threadIdx.x, 32))
        return;
    lsm_write(arg, best, logp, xr, r, V, lsm_warp_scan(xr, V, threadIdx.x, 32), threadIdx.x, 32);
}

extern "C" int cuda_ctc_log_softmax_argmax(int *arg, float *best, float *logp, const float *logits,
                                           long long ldx, const int *lens, int t_rows, int n, int V,
                                           void *stream, hark_err_t *err)
{
    if (n <= 0 || V <= 0)
        return HARK_OK;
    if (!arg || (lens && t_rows <= 0) || ldx < V)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc_log_softmax_argmax: t_rows %d, ldx %lld",
                       t_rows, ldx);
    cudaStream_t st = (cudaStream_t)stream;
    if (V <= 256)
        ctc_lsm_argmax_warp_kernel<<<(unsigned)((n + 7) / 8), dim3(32, 8), 0, st>>>(
            arg, best, logp, logits, lens, t_rows, V, ldx, n);
    else
        ctc_lsm_argmax_kernel<<<(unsigned)n, 256, 0, st>>>(arg, best, logp, logits, lens, t_rows, V,
                                                           ldx);
    return launched(err, "ctc_lsm_argmax_kernel");
}

/* ---- CTC: each row's top k (streams copy these instead of whole rows) ----------------------- */

/* A warp per row: each lane keeps the top k of its strided share (descending, lower id first on
 * ties: it scans its ids in increasing order and inserts only past strictly smaller values; NaN
 * never enters), then k rounds of a warp argmax over the lanes' heads (larger value, then lower
 * id) give ctc_row_topk's list. A row with fewer than k non-NaN values ends in (0, NaN) entries. */
__global__ void ctc_topk_kernel(int *idx, float *val, float *blank_lp, const float *x, int n, int V,
                                int k, int blank)
{
    const size_t r = (size_t)blockIdx.x * 8 + threadIdx.y;
    if (r >= (size_t)n)
        return;
    const int lane = threadIdx.x;
    const float *xr = x + r * (size_t)V;
    float lv[CUDA_CTC_TOPK_MAX];
    int li[CUDA_CTC_TOPK_MAX], m = 0;
    for (int j = lane; j < V; j += 32) {
        const float v = xr[j];
        if (!(v == v) || (m == k && !(v > lv[k - 1])))
            continue;
        int p = m < k ? m++ : k - 1;
        while (p > 0 && v > lv[p - 1]) {
            lv[p] = lv[p - 1];
            li[p] = li[p - 1];
            p--;
        }
        lv[p] = v;
        li[p] = j;
    }
    int h = 0;
    for (int o = 0; o < k; o++) {
        float bv = h < m ? lv[h] : -INFINITY;
        int bi = h < m ? li[h] : INT_MAX;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (ov > bv || (ov == bv && oi < bi)) {
                bv = ov;
                bi = oi;
            }
        }
        if (h < m && li[h] == bi)
            h++;
        if (lane == 0) {
            idx[r * k + o] = bi == INT_MAX ? 0 : bi;
            val[r * k + o] = bi == INT_MAX ? NAN : bv;
        }
    }
    if (lane == 0 && blank_lp)
        blank_lp[r] = xr[blank];
}

extern "C" int cuda_ctc_topk(int *idx, float *val, float *blank_lp, const float *logp, int n, int V,
                             int k, int blank, void *stream, hark_err_t *err)
{
    if (n <= 0)
        return HARK_OK;
    if (!idx || !val || !logp || k < 1 || k > CUDA_CTC_TOPK_MAX || k > V || blank < 0 || blank >= V)
        return err_set(err, HARK_ERR_INVALID_ARG, "ctc_topk: k %d (1 .. %d, <= V %d), blank %d", k,
                       CUDA_CTC_TOPK_MAX, V, blank);
    ctc_topk_kernel<<<(unsigned)((n + 7) / 8), dim3(32, 8), 0, (cudaStream_t)stream>>>(
        idx, val, blank_lp, logp, n, V, k, blank);
    return launched(err, "ctc_topk_kernel");
}
