/* tacotron2_kern.cu — the GPU Tacotron 2's kernels (tacotron2_kern.h says what each computes and
 * names its CPU reference). The decoder's matrix-vector products stream each weight row once per
 * batch tile through a warp (vector loads, warp-shuffle sums); the LSTM cell update is fused into
 * the kernel that computes its four gate rows. FP32 weights accumulate in double, FP16 weights in
 * float.
 * Tests: tests/model/tacotron2/test_tacotron2_gpu.c */
#include "model/tacotron2/tacotron2_kern.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define LAUNCHED() ((int)cudaGetLastError())

/* ---- encoder -------------------------------------------------------------------------------- */

__global__ void k_embed(double *X, const float *emb, const int *ids, const int *lens, int nmax,
                        int Lp, int pad, int e)
{
    int r = blockIdx.x, b = r / Lp, p = r % Lp - pad;
    int valid = p >= 0 && p < lens[b];
    const float *src = valid ? emb + (size_t)ids[(size_t)b * nmax + p] * e : NULL;
    for (int q = threadIdx.x; q < e; q += blockDim.x)
        X[(size_t)r * e + q] = valid ? (double)src[q] : 0.0;
}

extern "C" int t2k_embed(double *X, const float *emb, const int *ids, const int *lens, int B,
                         int nmax, int Lp, int pad, int e, void *stream)
{
    k_embed<<<B * Lp, 128, 0, (cudaStream_t)stream>>>(X, emb, ids, lens, nmax, Lp, pad, e);
    return LAUNCHED();
}

__global__ void k_conv_epi(double *X, const double *Y, const double *bias, const double *scale,
                           const double *shift, const int *lens, int Lp, int pad, int e)
{
    int r = blockIdx.x, b = r / Lp, p = r % Lp - pad;
    int valid = p >= 0 && p < lens[b];
    for (int q = threadIdx.x; q < e; q += blockDim.x) {
        double v = 0;
        if (valid) {
            v = (Y[(size_t)(r - pad) * e + q] + bias[q]) * scale[q] + shift[q];
            v = v > 0 ? v : 0;
        }
        X[(size_t)r * e + q] = v;
    }
}

extern "C" int t2k_conv_epi(double *X, const double *Y, const double *b, const double *scale,
                            const double *shift, const int *lens, int B, int Lp, int pad, int e,
                            void *stream)
{
    k_conv_epi<<<B * Lp, 128, 0, (cudaStream_t)stream>>>(X, Y, b, scale, shift, lens, Lp, pad, e);
    return LAUNCHED();
}

__global__ void k_fill_rows(double *XG, const double *bias, int G)
{
    for (int q = threadIdx.x; q < G; q += blockDim.x)
        XG[(size_t)blockIdx.x * G + q] = bias[q];
}

extern "C" int t2k_fill_rows(double *XG, const double *bias, int rows, int G, void *stream)
{
    k_fill_rows<<<rows, 256, 0, (cudaStream_t)stream>>>(XG, bias, G);
    return LAUNCHED();
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* a warp per (unit, direction); every row of the batch in turn */
__global__ void k_enc_lstm_step(double *out, double *h, double *c, const double *xg_f,
                                const double *xg_b, const double *whh_f, const double *whh_b,
                                const double *bhh_f, const double *bhh_b, const int *lens, int B,
                                int nmax, int Lp, int pad, int hid, int e, int t)
{
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int u = blockIdx.x * (blockDim.x / 32) + warp, dir = blockIdx.y;
    if (u >= hid)
        return;
    const double *W = dir ? whh_b : whh_f, *bhh = dir ? bhh_b : bhh_f, *xg = dir ? xg_b : xg_f;
    int par = t & 1, G = 4 * hid;
    const double *hp = h + ((size_t)(par * 2 + dir) * B) * hid;
    double *hn = h + ((size_t)((par ^ 1) * 2 + dir) * B) * hid;
    {
        int b = blockIdx.z, n = lens[b];
        if (t >= n)
            return;
        int pos = dir ? n - 1 - t : t;
        double acc[4] = {0, 0, 0, 0};
        for (int k = lane; k < hid; k += 32) {
            double x = hp[(size_t)b * hid + k];
#pragma unroll
            for (int g = 0; g < 4; g++)
                acc[g] += W[((size_t)g * hid + u) * hid + k] * x;
        }
#pragma unroll
        for (int g = 0; g < 4; g++)
            acc[g] = warp_sum_d(acc[g]);
        if (lane == 0) {
            const double *xr = xg + ((size_t)b * Lp + pad + pos) * G;
            double gt[4];
#pragma unroll
            for (int g = 0; g < 4; g++)
                gt[g] = (xr[g * hid + u] + bhh[g * hid + u]) + acc[g];
            double i = 1.0 / (1.0 + exp(-gt[0])), f = 1.0 / (1.0 + exp(-gt[1]));
            double gg = tanh(gt[2]), o = 1.0 / (1.0 + exp(-gt[3]));
            double *cc = c + ((size_t)dir * B + b) * hid + u;
            *cc = f * *cc + i * gg;
            double hv = o * tanh(*cc);
            hn[(size_t)b * hid + u] = hv;
            out[((size_t)b * nmax + pos) * e + dir * hid + u] = hv;
        }
    }
}

extern "C" int t2k_enc_lstm_step(double *out, double *h, double *c, const double *xg_f,
                                 const double *xg_b, const double *whh_f, const double *whh_b,
                                 const double *bhh_f, const double *bhh_b, const int *lens, int B,
                                 int nmax, int Lp, int pad, int hid, int e, int t, void *stream)
{
    dim3 grid((hid + 7) / 8, 2, B); /* a block per (8 units, direction, row) */
    k_enc_lstm_step<<<grid, 256, 0, (cudaStream_t)stream>>>(
        out, h, c, xg_f, xg_b, whh_f, whh_b, bhh_f, bhh_b, lens, B, nmax, Lp, pad, hid, e, t);
    return LAUNCHED();
}

__global__ void k_round_memory(float *mem_f, double *X, const int *lens, int nmax, int e)
{
    int r = blockIdx.x, b = r / nmax, s = r % nmax;
    int valid = s < lens[b];
    for (int q = threadIdx.x; q < e; q += blockDim.x) {
        size_t i = (size_t)r * e + q;
        float v = valid ? (float)X[i] : 0.0f;
        mem_f[i] = v;
        X[i] = v;
    }
}

extern "C" int t2k_round_memory(float *mem_f, double *X, const int *lens, int B, int nmax, int e,
                                void *stream)
{
    k_round_memory<<<B * nmax, 128, 0, (cudaStream_t)stream>>>(mem_f, X, lens, nmax, e);
    return LAUNCHED();
}

__global__ void k_to_float(float *f, const double *d, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        f[i] = (float)d[i];
}

extern "C" int t2k_to_float(float *f, const double *d, long long n, void *stream)
{
    long long blocks = (n + 255) / 256;
    k_to_float<<<(int)(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096), 256, 0,
                 (cudaStream_t)stream>>>(f, d, n);
    return LAUNCHED();
}

/* ---- decoder: weight rows against batch tiles ------------------------------------------------ */

__device__ __forceinline__ double wval(float w)
{
    return (double)w;
}
__device__ __forceinline__ float wval(__half w)
{
    return __half2float(w);
}

template <typename AT> __device__ __forceinline__ AT warp_sum(AT v);
template <> __device__ __forceinline__ double warp_sum<double>(double v)
{
    return warp_sum_d(v);
}
template <> __device__ __forceinline__ float warp_sum<float>(float v)
{
    return warp_sum_f(v);
}

/* the V-column chunk at k0 of rows j < BT of xs (float4 reads) */
template <int BT, int V>
__device__ __forceinline__ void load_x(const float *xs, int K, int k0, float (&xv)[BT][V])
{
#pragma unroll
    for (int j = 0; j < BT; j++)
#pragma unroll
        for (int q = 0; q < V; q += 4) {
            float4 f = *(const float4 *)(xs + (size_t)j * K + k0 + q);
            xv[j][q] = f.x;
            xv[j][q + 1] = f.y;
            xv[j][q + 2] = f.z;
            xv[j][q + 3] = f.w;
        }
}

/* acc[r][j] += the R rows' chunks (raw[r]) · the staged rows' chunk xv[j] */
template <typename WT, typename AT, int BT, int R, int V>
__device__ __forceinline__ void dot_chunk(const uint4 (&raw)[R], const float (&xv)[BT][V],
                                          AT (&acc)[R][BT])
{
#pragma unroll
    for (int r = 0; r < R; r++) {
        const WT *ws = (const WT *)&raw[r];
#pragma unroll
        for (int j = 0; j < BT; j++)
#pragma unroll
            for (int q = 0; q < V; q++)
                acc[r][j] += (AT)wval(ws[q]) * (AT)xv[j][q];
    }
}

/* acc[r][j] += Σ_k w[r · rstride + k] · xs[j · K + k] for R weight rows and j < BT staged rows
 * (zeros past the rows listed), per lane: lanes take 16-byte chunks 32 apart, U chunks of each
 * row in flight at once, each chunk of the staged rows read once for the R rows. A lane adds its
 * products in increasing k whatever U, R and BT are. */
template <typename WT, typename AT, int BT, int R, int U>
__device__ __forceinline__ void row_dots(const WT *__restrict__ w, size_t rstride, const float *xs,
                                         int K, AT (&acc)[R][BT])
{
    const int lane = threadIdx.x % 32;
    constexpr int V = 16 / sizeof(WT); /* elements per 16-byte load */
    if (K % V == 0) {
        const int nv = K / V;
        int v = lane;
        for (; v + 32 * (U - 1) < nv; v += 32 * U) {
            uint4 raw[U][R];
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int r = 0; r < R; r++)
                    raw[u][r] = __ldg((const uint4 *)(w + r * rstride) + v + 32 * u);
#pragma unroll
            for (int u = 0; u < U; u++) {
                float xv[BT][V];
                load_x<BT, V>(xs, K, (v + 32 * u) * V, xv);
                dot_chunk<WT, AT, BT, R, V>(raw[u], xv, acc);
            }
        }
        for (; v < nv; v += 32) {
            uint4 raw[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                raw[r] = __ldg((const uint4 *)(w + r * rstride) + v);
            float xv[BT][V];
            load_x<BT, V>(xs, K, v * V, xv);
            dot_chunk<WT, AT, BT, R, V>(raw, xv, acc);
        }
    } else {
        for (int k = lane; k < K; k += 32)
#pragma unroll
            for (int r = 0; r < R; r++) {
                AT wq = (AT)wval(w[r * rstride + k]);
#pragma unroll
                for (int j = 0; j < BT; j++)
                    acc[r][j] += wq * (AT)xs[j * K + k];
            }
    }
}

/* stages rows b0 .. b0 + BT of x into xs (zeros past na) */
template <int BT>
__device__ __forceinline__ void stage_x(float *xs, const float *x, int ldx, int K, const int *rows,
                                        int b0, int na)
{
    for (int i = threadIdx.x; i < BT * K; i += blockDim.x) {
        int j = i / K, k = i % K;
        xs[i] = b0 + j < na ? x[(size_t)rows[b0 + j] * ldx + k] : 0.0f;
    }
}

__device__ __forceinline__ void side_copy(const float *csrc, int lds, float *cdst, int ldc,
                                          int clen, const int *rows, int na)
{
    if (clen <= 0)
        return;
    long long n = (long long)na * clen;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        int slot = rows[i / clen], q = (int)(i % clen);
        cdst[(size_t)slot * ldc + q] = csrc[(size_t)slot * lds + q];
    }
}

template <typename AT> __device__ __forceinline__ AT sigm(AT x)
{
    return (AT)1 / ((AT)1 + exp(-x));
}

template <typename WT, typename AT, int BT>
__global__ void k_lstm(const WT *__restrict__ W, const float *__restrict__ bias, const float *x,
                       int ldx, int K, int H, const int *rows, int na, float *c, float *hout,
                       int ldh, const float *csrc, int lds, float *cdst, int ldc, int clen)
{
    extern __shared__ float xs[];
    side_copy(csrc, lds, cdst, ldc, clen, rows, na);
    const int lane = threadIdx.x % 32;
    const int u = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    for (int b0 = 0; b0 < na; b0 += BT) {
        __syncthreads();
        stage_x<BT>(xs, x, ldx, K, rows, b0, na);
        __syncthreads();
        if (u >= H)
            continue;
        AT acc[4][BT];
#pragma unroll
        for (int g = 0; g < 4; g++)
#pragma unroll
            for (int j = 0; j < BT; j++)
                acc[g][j] = 0;
        /* the unit's four gate rows (i, f, g, o: H rows apart) together */
        row_dots<WT, AT, BT, 4, 2>(W + (size_t)u * K, (size_t)H * K, xs, K, acc);
#pragma unroll
        for (int g = 0; g < 4; g++)
#pragma unroll
            for (int j = 0; j < BT; j++)
                acc[g][j] = warp_sum<AT>(acc[g][j]);
#pragma unroll
        for (int j = 0; j < BT; j++) {
            if (lane != j || b0 + j >= na)
                continue;
            int slot = rows[b0 + j];
            AT gi = acc[0][j] + (AT)bias[u], gf = acc[1][j] + (AT)bias[H + u];
            AT gg = acc[2][j] + (AT)bias[2 * H + u], go = acc[3][j] + (AT)bias[3 * H + u];
            AT cc = (AT)c[(size_t)slot * H + u];
            cc = sigm(gf) * cc + sigm(gi) * tanh(gg);
            c[(size_t)slot * H + u] = (float)cc;
            hout[(size_t)slot * ldh + u] = (float)(sigm(go) * tanh(cc));
        }
    }
}

/* batch tile: up to 8 rows (no more than the rows listed: a tile's empty rows still cost their
 * multiply-adds), as many as fit 96 KB of staged input, at least 1. A row's sums do not depend on
 * the tile (the same lanes add the same products in the same order). */
static int tile_for(int K, int na)
{
    int bt = na >= 8 ? 8 : na >= 4 ? 4 : na >= 2 ? 2 : 1;
    while (bt > 1 && (size_t)bt * K * 4 > 96 * 1024)
        bt /= 2;
    return bt;
}

template <typename WT, typename AT, int BT>
static int launch_lstm(const void *W, const float *bias, const float *x, int ldx, int K, int H,
                       const int *rows, int na, float *c, float *hout, int ldh, const float *csrc,
                       int lds, float *cdst, int ldc, int clen, cudaStream_t s)
{
    size_t smem = sizeof(float) * (size_t)BT * K;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(
            k_lstm<WT, AT, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return (int)e;
    }
    k_lstm<WT, AT, BT><<<(H + 7) / 8, 256, smem, s>>>((const WT *)W, bias, x, ldx, K, H, rows, na,
                                                      c, hout, ldh, csrc, lds, cdst, ldc, clen);
    return LAUNCHED();
}

extern "C" int t2k_lstm(int wt, const void *W, const float *bias, const float *x, int ldx, int K,
                        int H, const int *rows, int na, float *c, float *hout, int ldh,
                        const float *csrc, int lds, float *cdst, int ldc, int clen, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    int bt = tile_for(K, na);
#define L(T, A, N)                                                                                 \
    launch_lstm<T, A, N>(W, bias, x, ldx, K, H, rows, na, c, hout, ldh, csrc, lds, cdst, ldc,      \
                         clen, s)
#define TILES(T, A)                                                                                \
    (bt == 8 ? L(T, A, 8) : bt == 4 ? L(T, A, 4) : bt == 2 ? L(T, A, 2) : L(T, A, 1))
    if (wt == 0)
        return TILES(float, double);
    return TILES(__half, float);
#undef TILES
#undef L
}

/* a warp per output row; mode 0: y[slot · ldy + o]; mode 1: the projection (frames / gates) */
template <typename WT, typename AT, int BT, int MODE>
__global__ void k_rows(const WT *__restrict__ W, const float *__restrict__ bias, const float *x,
                       int ldx, int K, int M, const int *rows, int na, float *y, int ldy,
                       float *gates, int max_steps, const int *d_step, int k_step,
                       const float *csrc, int lds, float *cdst, int ldc, int clen)
{
    extern __shared__ float xs[];
    const int step = MODE ? *d_step + k_step : 0;
    side_copy(csrc, lds, cdst, ldc, clen, rows, na);
    const int lane = threadIdx.x % 32;
    const int o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    for (int b0 = 0; b0 < na; b0 += BT) {
        __syncthreads();
        stage_x<BT>(xs, x, ldx, K, rows, b0, na);
        __syncthreads();
        if (o >= M)
            continue;
        AT acc[1][BT];
#pragma unroll
        for (int j = 0; j < BT; j++)
            acc[0][j] = 0;
        row_dots<WT, AT, BT, 1, 8>(W + (size_t)o * K, 0, xs, K, acc);
#pragma unroll
        for (int j = 0; j < BT; j++)
            acc[0][j] = warp_sum<AT>(acc[0][j]);
#pragma unroll
        for (int j = 0; j < BT; j++) {
            if (lane != j || b0 + j >= na)
                continue;
            int slot = rows[b0 + j];
            if (MODE == 0)
                y[(size_t)slot * ldy + o] = (float)acc[0][j];
            else if (o < M - 1)
                y[((size_t)slot * max_steps + step) * (M - 1) + o] =
                    (float)(acc[0][j] + (AT)bias[o]);
            else
                gates[(size_t)slot * max_steps + step] = (float)(acc[0][j] + (AT)bias[o]);
        }
    }
}

template <typename WT, typename AT, int BT, int MODE>
static int launch_rows(const void *W, const float *bias, const float *x, int ldx, int K, int M,
                       const int *rows, int na, float *y, int ldy, float *gates, int max_steps,
                       const int *d_step, int k_step, const float *csrc, int lds, float *cdst,
                       int ldc, int clen, cudaStream_t s)
{
    size_t smem = sizeof(float) * (size_t)BT * K;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(
            k_rows<WT, AT, BT, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess)
            return (int)e;
    }
    k_rows<WT, AT, BT, MODE><<<(M + 7) / 8, 256, smem, s>>>((const WT *)W, bias, x, ldx, K, M, rows,
                                                            na, y, ldy, gates, max_steps, d_step,
                                                            k_step, csrc, lds, cdst, ldc, clen);
    return LAUNCHED();
}

#define ROWS(T, A, N, MODE)                                                                        \
    launch_rows<T, A, N, MODE>(W, bias, x, ldx, K, M, rows, na, y, ldy, gates, max_steps, d_step,  \
                               k_step, csrc, lds, cdst, ldc, clen, s)
#define ROWS_ALL(MODE)                                                                             \
    do {                                                                                           \
        int bt = tile_for(K, na);                                                                  \
        if (wt == 0)                                                                               \
            return bt == 8   ? ROWS(float, double, 8, MODE)                                        \
                   : bt == 4 ? ROWS(float, double, 4, MODE)                                        \
                   : bt == 2 ? ROWS(float, double, 2, MODE)                                        \
                             : ROWS(float, double, 1, MODE);                                       \
        return bt == 8   ? ROWS(__half, float, 8, MODE)                                            \
               : bt == 4 ? ROWS(__half, float, 4, MODE)                                            \
               : bt == 2 ? ROWS(__half, float, 2, MODE)                                            \
                         : ROWS(__half, float, 1, MODE);                                           \
    } while (0)

extern "C" int t2k_gemv(int wt, const void *W, const float *x, int ldx, int K, int M,
                        const int *rows, int na, float *y, int ldy, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const float *bias = NULL, *csrc = NULL;
    float *gates = NULL, *cdst = NULL;
    const int *d_step = NULL;
    int max_steps = 0, k_step = 0, lds = 0, ldc = 0, clen = 0;
    ROWS_ALL(0);
}

extern "C" int t2k_project(int wt, const void *W, const float *bias, const float *x, int ldx, int K,
                           int nm, const int *rows, int na, float *frames, float *gates,
                           int max_steps, const int *d_step, int k_step, const float *csrc, int lds,
                           float *cdst, int ldc, int clen, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    int M = nm + 1, ldy = 0;
    float *y = frames;
    ROWS_ALL(1);
}

/* ---- prenet --------------------------------------------------------------------------------- */

__device__ __forceinline__ uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* one block of warps per row: a warp per output unit, lanes over the inputs */
template <typename WT, typename AT>
__global__ void k_prenet(const WT *__restrict__ w0, const WT *__restrict__ w1, const float *frames,
                         int max_steps, int nm, int P, const int *d_step, int k_step,
                         const int *rows, float *xa, int lda, const uint64_t *seeds,
                         const uint8_t *masks)
{
    extern __shared__ float sm[]; /* in (max(nm, P)), h (P) */
    int wide = nm > P ? nm : P, step = *d_step + k_step;
    float *in = sm, *hb = sm + wide;
    int slot = rows[blockIdx.x], lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int warps = blockDim.x / 32;
    for (int k = threadIdx.x; k < nm; k += blockDim.x)
        in[k] = step == 0 ? 0.0f : frames[((size_t)slot * max_steps + step - 1) * nm + k];
    __syncthreads();
    int words = (P + 63) / 64;
    uint64_t seed = seeds ? seeds[slot] : 0;
    for (int layer = 0; layer < 2; layer++) {
        const WT *W = layer ? w1 : w0;
        int K = layer ? P : nm;
        for (int o0 = warp * 8; o0 < P; o0 += warps * 8) { /* 8 units a warp at a time */
            AT acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int k = lane; k < K; k += 32) {
                AT xk = (AT)in[k];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (o0 + j < P)
                        acc[j] += (AT)wval(W[(size_t)(o0 + j) * K + k]) * xk;
            }
            AT a = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                AT t = warp_sum<AT>(acc[j]);
                if (lane == j)
                    a = t;
            }
            if (lane >= 8 || o0 + lane >= P)
                continue;
            int o = o0 + lane;
            float v = (float)a;
            int keep;
            if (masks)
                keep = masks[(((size_t)slot * max_steps + step) * 2 + layer) * P + o];
            else {
                uint64_t draw = (uint64_t)(2 * step + layer) * words + o / 64;
                keep = (int)((mix64(seed + (draw + 1) * 0x9e3779b97f4a7c15ull) >> (o % 64)) & 1);
            }
            hb[o] = (v > 0 ? v : 0.0f) * (float)keep * 2.0f;
        }
        __syncthreads();
        for (int o = threadIdx.x; o < P; o += blockDim.x)
            in[o] = hb[o];
        __syncthreads();
    }
    for (int o = threadIdx.x; o < P; o += blockDim.x)
        xa[(size_t)slot * lda + o] = in[o];
}

extern "C" int t2k_prenet(int wt, const void *w0, const void *w1, const float *frames,
                          int max_steps, int nm, int P, const int *d_step, int k_step,
                          const int *rows, int na, float *xa, int lda, const uint64_t *seeds,
                          const uint8_t *masks, void *stream)
{
    size_t smem = sizeof(float) * (size_t)((nm > P ? nm : P) + P);
    int threads = ((P + 7) / 8) * 32; /* a warp per 8 units, up to 32 warps */
    threads = threads > 1024 ? 1024 : threads;
    cudaStream_t s = (cudaStream_t)stream;
    if (wt == 0)
        k_prenet<float, double><<<na, threads, smem, s>>>((const float *)w0, (const float *)w1,
                                                          frames, max_steps, nm, P, d_step, k_step,
                                                          rows, xa, lda, seeds, masks);
    else
        k_prenet<__half, float><<<na, threads, smem, s>>>((const __half *)w0, (const __half *)w1,
                                                          frames, max_steps, nm, P, d_step, k_step,
                                                          rows, xa, lda, seeds, masks);
    return LAUNCHED();
}

/* ---- attention ------------------------------------------------------------------------------ */

#define ECH 16 /* positions per energy block */

__global__ void k_energy(const float *pq, const float *pmem, const float *w, const float *wcum,
                         const float *loc_conv, const float *loc_dense, const float *v,
                         const int *rows, const int *lens, int nmax, int A, int F, int Kl,
                         float *energy)
{
    extern __shared__ float sm[]; /* ww (2, ECH + Kl - 1), loc (ECH, F), red (ECH, warps),
                                     dT (F, A): the location dense transposed */
    int slot = rows[blockIdx.x], n = lens[slot], s0 = blockIdx.y * ECH;
    if (s0 >= n)
        return;
    int pad = (Kl - 1) / 2, span = ECH + Kl - 1, warps = blockDim.x / 32;
    float *ww = sm, *loc = sm + 2 * span, *red = loc + ECH * F, *dT = red + ECH * warps;
    for (int i = threadIdx.x; i < A * F; i += blockDim.x) /* coalesced reads, A-major writes */
        dT[(i % F) * A + i / F] = loc_dense[i];
    for (int i = threadIdx.x; i < span; i += blockDim.x) {
        int p = s0 - pad + i;
        int in = p >= 0 && p < n;
        ww[i] = in ? w[(size_t)slot * nmax + p] : 0.0f;
        ww[span + i] = in ? wcum[(size_t)slot * nmax + p] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < ECH * F; i += blockDim.x) {
        int s = i / F, f = i % F;
        const float *w0 = loc_conv + (size_t)f * 2 * Kl, *w1 = w0 + Kl;
        float acc = 0;
        for (int k = 0; k < Kl; k++) {
            int p = s0 + s + k - pad;
            if (p >= 0 && p < n) /* as the CPU: out-of-range taps are skipped */
                acc += w0[k] * ww[s + k] + w1[k] * ww[span + s + k];
        }
        loc[i] = acc;
    }
    __syncthreads();
    float part[ECH];
#pragma unroll
    for (int s = 0; s < ECH; s++)
        part[s] = 0;
    const float *pm = pmem + ((size_t)slot * nmax + s0) * A;
    for (int a = threadIdx.x; a < A; a += blockDim.x) {
        float q = pq[(size_t)slot * A + a], va = v[a];
#pragma unroll
        for (int s = 0; s < ECH; s++) {
            if (s0 + s >= n)
                break;
            float pl = 0;
            for (int f = 0; f < F; f++)
                pl += loc[s * F + f] * dT[f * A + a];
            part[s] += va * tanhf(q + pl + pm[(size_t)s * A + a]);
        }
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int s = 0; s < ECH; s++) {
        float t = warp_sum_f(part[s]);
        if (lane == 0)
            red[s * warps + warp] = t;
    }
    __syncthreads();
    if (threadIdx.x < ECH && s0 + (int)threadIdx.x < n) {
        float t = 0;
        for (int q = 0; q < warps; q++)
            t += red[threadIdx.x * warps + q];
        energy[(size_t)slot * nmax + s0 + threadIdx.x] = t;
    }
}

extern "C" int t2k_energy(const float *pq, const float *pmem, const float *w, const float *wcum,
                          const float *loc_conv, const float *loc_dense, const float *v,
                          const int *rows, int na, const int *lens, int nmax, int A, int F, int Kl,
                          float *energy, void *stream)
{
    dim3 grid(na, (nmax + ECH - 1) / ECH);
    size_t smem = sizeof(float) * (size_t)(2 * (ECH + Kl - 1) + ECH * F + ECH * 4 + (size_t)F * A);
    if (smem > 48 * 1024) {
        cudaError_t er =
            cudaFuncSetAttribute(k_energy, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (er != cudaSuccess)
            return (int)er;
    }
    k_energy<<<grid, 128, smem, (cudaStream_t)stream>>>(pq, pmem, w, wcum, loc_conv, loc_dense, v,
                                                        rows, lens, nmax, A, F, Kl, energy);
    return LAUNCHED();
}

__global__ void k_attend(const float *energy, float *w, float *wcum, float *align, int max_steps,
                         const int *d_step, int k_step, const float *memory, const int *rows,
                         const int *lens, int nmax, int e, float *ctx_a, int lda, float *ctx_d,
                         int ldd, float *ctx_p, int ldp)
{
    extern __shared__ float wts[]; /* (nmax) */
    const int step = *d_step + k_step;
    __shared__ double red[32];
    __shared__ float mx_s;
    __shared__ double sum_s;
    int slot = rows[blockIdx.x], n = lens[slot];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        wts[s] = energy[(size_t)slot * nmax + s];
        mx = fmaxf(mx, wts[s]);
    }
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY;
        for (int q = 0; q < warps; q++)
            m = fmaxf(m, (float)red[q]);
        mx_s = m;
    }
    __syncthreads();
    double sum = 0;
    for (int s = threadIdx.x; s < n; s += blockDim.x) {
        wts[s] = expf(wts[s] - mx_s);
        sum += wts[s];
    }
    sum = warp_sum_d(sum);
    __syncthreads();
    if (lane == 0)
        red[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int q = 0; q < warps; q++)
            t += red[q];
        sum_s = t;
    }
    __syncthreads();
    float fsum = (float)sum_s;
    for (int s = threadIdx.x; s < n; s += blockDim.x)
        wts[s] = wts[s] / fsum;
    __syncthreads();
    if (blockIdx.y == 0)
        for (int s = threadIdx.x; s < n; s += blockDim.x) {
            size_t i = (size_t)slot * nmax + s;
            w[i] = wts[s];
            wcum[i] += wts[s];
            align[((size_t)slot * max_steps + step) * nmax + s] = wts[s];
        }
    int col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col < e) {
        double acc = 0;
        const float *mem = memory + (size_t)slot * nmax * e + col;
        int s = 0;
        for (; s + 4 <= n; s += 4) { /* four loads in flight, added in order */
            float m0 = mem[(size_t)s * e], m1 = mem[(size_t)(s + 1) * e];
            float m2 = mem[(size_t)(s + 2) * e], m3 = mem[(size_t)(s + 3) * e];
            acc += (double)wts[s] * (double)m0;
            acc += (double)wts[s + 1] * (double)m1;
            acc += (double)wts[s + 2] * (double)m2;
            acc += (double)wts[s + 3] * (double)m3;
        }
        for (; s < n; s++)
            acc += (double)wts[s] * (double)mem[(size_t)s * e];
        float cv = (float)acc;
        ctx_a[(size_t)slot * lda + col] = cv;
        ctx_d[(size_t)slot * ldd + col] = cv;
        ctx_p[(size_t)slot * ldp + col] = cv;
    }
}

extern "C" int t2k_attend(const float *energy, float *w, float *wcum, float *align, int max_steps,
                          const int *d_step, int k_step, const float *memory, const int *rows,
                          int na, const int *lens, int nmax, int e, float *ctx_a, int lda,
                          float *ctx_d, int ldd, float *ctx_p, int ldp, void *stream)
{
    dim3 grid(na, (e + 127) / 128);
    size_t smem = sizeof(float) * (size_t)nmax;
    cudaStream_t s = (cudaStream_t)stream;
    if (smem > 48 * 1024) {
        cudaError_t er =
            cudaFuncSetAttribute(k_attend, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (er != cudaSuccess)
            return (int)er;
    }
    k_attend<<<grid, 128, smem, s>>>(energy, w, wcum, align, max_steps, d_step, k_step, memory,
                                     rows, lens, nmax, e, ctx_a, lda, ctx_d, ldd, ctx_p, ldp);
    return LAUNCHED();
}

/* ---- postnet -------------------------------------------------------------------------------- */

__global__ void k_post_input(void *xp, int dt, const float *frames, int max_steps, const int *T,
                             int Tp, int pad, int nm)
{
    int r = blockIdx.x, b = r / Tp, s = r % Tp - pad;
    int valid = s >= 0 && s < T[b];
    for (int q = threadIdx.x; q < nm; q += blockDim.x) {
        float v = valid ? frames[((size_t)b * max_steps + s) * nm + q] : 0.0f;
        if (dt)
            ((__half *)xp)[(size_t)r * nm + q] = __float2half_rn(v);
        else
            ((float *)xp)[(size_t)r * nm + q] = v;
    }
}

extern "C" int t2k_post_input(void *xp, int dt, const float *frames, int max_steps, const int *T,
                              int B, int Tmax, int pad, int nm, void *stream)
{
    int Tp = Tmax + 2 * pad;
    k_post_input<<<B * Tp, 128, 0, (cudaStream_t)stream>>>(xp, dt, frames, max_steps, T, Tp, pad,
                                                           nm);
    return LAUNCHED();
}

__global__ void k_post_epi(const float *acc, const float *bias, int c, int last, void *xp_next,
                           int dt, float *mel, float *res, const float *frames, int max_steps,
                           const int *T, int Tmax, int pad)
{
    int Tp = Tmax + 2 * pad;
    if (!last) { /* a row of the next padded input */
        int r = blockIdx.x, b = r / Tp, s = r % Tp - pad;
        int valid = s >= 0 && s < T[b];
        for (int q = threadIdx.x; q < c; q += blockDim.x) {
            float v = valid ? tanhf(acc[((size_t)b * Tmax + s) * c + q] + bias[q]) : 0.0f;
            if (dt)
                ((__half *)xp_next)[(size_t)r * c + q] = __float2half_rn(v);
            else
                ((float *)xp_next)[(size_t)r * c + q] = v;
        }
        return;
    }
    int r = blockIdx.x; /* (b, s) of (B, Tmax) */
    int b = r / Tmax, s = r % Tmax, valid = s < T[b];
    for (int q = threadIdx.x; q < c; q += blockDim.x) {
        float rv = valid ? acc[(size_t)r * c + q] + bias[q] : 0.0f;
        float fv = valid ? frames[((size_t)b * max_steps + s) * c + q] : 0.0f;
        size_t o = ((size_t)b * c + q) * Tmax + s;
        mel[o] = valid ? fv + rv : 0.0f;
        if (res)
            res[o] = rv;
    }
}

extern "C" int t2k_post_epi(const float *acc, const float *b, int c, int last, void *xp_next,
                            int dt, float *mel, float *res, const float *frames, int max_steps,
                            const int *T, int B, int Tmax, int pad, void *stream)
{
    int blocks = last ? B * Tmax : B * (Tmax + 2 * pad);
    k_post_epi<<<blocks, 128, 0, (cudaStream_t)stream>>>(acc, b, c, last, xp_next, dt, mel, res,
                                                         frames, max_steps, T, Tmax, pad);
    return LAUNCHED();
}
