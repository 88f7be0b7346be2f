/* waveglow_kernels.cu — the launchers of waveglow_kernels.h: the counter-based seeded noise (each
 * value from its own splitmix64 counters: no sequential state), the mel's transposing pad, the
 * upsampler's bias, WN's start, its gated activation, a flow's end (end conv, affine coupling,
 * inverse 1x1 conv) and the denoiser's STFT frames, spectral subtraction and overlap-add. FP32
 * arithmetic throughout (no fast math: expf, tanhf, IEEE division as the CPU path); 16-bit only
 * where an output is a GEMM's operand. CPU references: waveglow_kernels.c.
 * Tests: tests/model/waveglow/test_waveglow_gpu.c */
#include "model/waveglow/waveglow_kernels.h"

#include "hark.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

__device__ __forceinline__ void wg_st(float *p, float v)
{
    *p = v;
}
__device__ __forceinline__ void wg_st(__half *p, float v)
{
    *p = __float2half_rn(v);
}
__device__ __forceinline__ void wg_st(__nv_bfloat16 *p, float v)
{
    *p = __float2bfloat16_rn(v);
}

static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e))
               : HARK_OK;
}

static unsigned grid_for(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535LL * 16 ? 65535LL * 16 : b < 1 ? 1 : b);
}

#define GRID_STRIDE(i, n)                                                                          \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);                  \
         i += (long long)gridDim.x * blockDim.x)

static bool dt_ok(ops_dtype_t t)
{
    return t == OPS_F32 || t == OPS_F16 || t == OPS_BF16;
}

/* ---- noise ---------------------------------------------------------------------------------- */

__device__ __forceinline__ uint64_t splitmix_at(uint64_t seed, unsigned long long call)
{
    uint64_t z = seed + call * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void noise_kernel(float *a, const float *zin, const uint64_t *seeds,
                             const float *d_sigma, const int *lens, int batch, int lp, int G,
                             int ch_last, int e)
{
    long long n = (long long)batch * lp * G;
    float sigma = *d_sigma;
    GRID_STRIDE(i, n)
    {
        int col = (int)(i % G);
        long long row = i / G;
        int t = (int)(row % lp), b = (int)(row / lp);
        int L = lens[b];
        float v = 0.0f;
        if (t < L) {
            if (zin) {
                v = zin[i] * sigma;
            } else {
                /* the draw holding this column, its channel, and the calls before it */
                int c0 = G - ch_last, d, c;
                if (col >= c0) {
                    d = 0;
                    c = col - c0;
                } else {
                    d = (c0 - col - 1) / e + 1;
                    c = col - (c0 - d * e);
                }
                unsigned long long before = 0;
                if (d > 0)
                    before =
                        2ull * (((unsigned long long)ch_last * L + 1) / 2) +
                        (unsigned long long)(d - 1) * 2ull * (((unsigned long long)e * L + 1) / 2);
                unsigned long long idx = (unsigned long long)c * L + t, p = idx / 2;
                uint64_t s = seeds[b];
                double u1 = ((splitmix_at(s, before + 2 * p + 1) >> 11) + 1.0) * 0x1.0p-53;
                double u2 = (splitmix_at(s, before + 2 * p + 2) >> 11) * 0x1.0p-53;
                double r = sqrt(-2.0 * log(u1));
                double z = (idx & 1) ? r * sin(2.0 * 3.14159265358979323846 * u2)
                                     : r * cos(2.0 * 3.14159265358979323846 * u2);
                v = (float)z * sigma;
            }
        }
        a[i] = v;
    }
}

extern "C" int cuda_wg_noise(float *a, const float *zin, const uint64_t *seeds,
                             const float *d_sigma, const int *lens, int batch, int lp, int G,
                             int ch_last, int e, void *stream, hark_err_t *err)
{
    if (batch < 0 || lp < 0 || G < 1 || ch_last < 1 || ch_last > G || e < 0 ||
        (ch_last < G && (e < 1 || (G - ch_last) % e)) || (!zin && !seeds))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "wg_noise: batch %d, lp %d, G %d, last %d, early %d", batch, lp, G, ch_last,
                       e);
    long long n = (long long)batch * lp * G;
    if (!n)
        return HARK_OK;
    noise_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(a, zin, seeds, d_sigma, lens,
                                                                     batch, lp, G, ch_last, e);
    return launched(err, "wg_noise");
}

/* ---- the mel's pad -------------------------------------------------------------------------- */

template <typename T>
__global__ void mel_pad_kernel(T *x, const float *mel, const int *lens, int batch, int ld, int nm,
                               int cin_p, int t, int pad_l)
{
    int rows = pad_l + t;
    long long n = (long long)batch * rows * cin_p;
    GRID_STRIDE(i, n)
    {
        int col = (int)(i % cin_p);
        long long row = i / cin_p;
        int s = (int)(row % rows) - pad_l, b = (int)(row / rows);
        float v = 0.0f;
        if (col < nm && s >= 0 && s < lens[b] && s < t)
            v = mel[((long long)b * nm + col) * ld + s];
        wg_st(x + i, v);
    }
}

extern "C" int cuda_wg_mel_pad(void *x, ops_dtype_t dt, const float *mel, const int *lens,
                               int batch, int ld, int nm, int cin_p, int t, int pad_l, void *stream,
                               hark_err_t *err)
{
    if (!dt_ok(dt) || batch < 0 || nm < 1 || cin_p < nm || t < 0 || ld < 1 || pad_l < 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_mel_pad: batch %d, nm %d -> %d, t %d, ld %d",
                       batch, nm, cin_p, t, ld);
    long long n = (long long)batch * (pad_l + t) * cin_p;
    if (!n)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned g = grid_for(n, 256);
    if (dt == OPS_F16)
        mel_pad_kernel<<<g, 256, 0, st>>>((__half *)x, mel, lens, batch, ld, nm, cin_p, t, pad_l);
    else if (dt == OPS_BF16)
        mel_pad_kernel<<<g, 256, 0, st>>>((__nv_bfloat16 *)x, mel, lens, batch, ld, nm, cin_p, t,
                                          pad_l);
    else
        mel_pad_kernel<<<g, 256, 0, st>>>((float *)x, mel, lens, batch, ld, nm, cin_p, t, pad_l);
    return launched(err, "wg_mel_pad");
}

/* ---- the upsampler's bias ------------------------------------------------------------------- */

template <typename T>
__global__ void cond_bias_kernel(T *y, const float *x, const float *bias, long long n, int nc,
                                 int G)
{
    GRID_STRIDE(i, n)
    {
        wg_st(y + i, x[i] + bias[(int)(i % nc) / G]);
    }
}

extern "C" int cuda_wg_cond_bias(void *y, ops_dtype_t dt, const float *x, const float *bias,
                                 long long n, int nc, int G, void *stream, hark_err_t *err)
{
    if (!dt_ok(dt) || n < 0 || nc < 1 || G < 1 || nc % G)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_cond_bias: n %lld, nc %d, G %d", n, nc, G);
    if (!n)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned g = grid_for(n, 256);
    if (dt == OPS_F16)
        cond_bias_kernel<<<g, 256, 0, st>>>((__half *)y, x, bias, n, nc, G);
    else if (dt == OPS_BF16)
        cond_bias_kernel<<<g, 256, 0, st>>>((__nv_bfloat16 *)y, x, bias, n, nc, G);
    else
        cond_bias_kernel<<<g, 256, 0, st>>>((float *)y, x, bias, n, nc, G);
    return launched(err, "wg_cond_bias");
}

/* ---- WN's start ----------------------------------------------------------------------------- */

__global__ void start_kernel(float *hs, const float *a, const float *w, const float *b,
                             long long rows, int G, int off, int half, int C)
{
    long long n = rows * 2 * C;
    GRID_STRIDE(i, n)
    {
        int c = (int)(i % (2 * C));
        long long r = i / (2 * C);
        float s = 0.0f;
        if (c < C) {
            s = b[c];
            const float *x = a + r * G + off, *wr = w + (long long)c * half;
            for (int q = 0; q < half; q++)
                s += wr[q] * x[q];
        }
        hs[i] = s;
    }
}

extern "C" int cuda_wg_start(float *hs, const float *a, const float *w, const float *b,
                             long long rows, int G, int off, int half, int C, void *stream,
                             hark_err_t *err)
{
    if (rows < 0 || G < 1 || off < 0 || half < 1 || off + half > G || C < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_start: rows %lld, G %d, off %d, half %d",
                       rows, G, off, half);
    long long n = rows * 2 * C;
    if (!n)
        return HARK_OK;
    start_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(hs, a, w, b, rows, G, off,
                                                                     half, C);
    return launched(err, "wg_start");
}

/* ---- the gated activation ------------------------------------------------------------------- */

template <typename T>
__global__ void gate_kernel(T *acts, const float *acc, const float *b, long long rows, int C)
{
    long long n = rows * C;
    GRID_STRIDE(i, n)
    {
        int c = (int)(i % C);
        long long r = i / C;
        float x = acc[r * 2 * C + c] + (b ? b[c] : 0.0f);
        float g = acc[r * 2 * C + C + c] + (b ? b[C + c] : 0.0f);
        wg_st(acts + i, tanhf(x) * (1.0f / (1.0f + expf(-g))));
    }
}

extern "C" int cuda_wg_gate(void *acts, ops_dtype_t dt, const float *acc, const float *b,
                            long long rows, int C, void *stream, hark_err_t *err)
{
    if (!dt_ok(dt) || rows < 0 || C < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_gate: rows %lld, C %d", rows, C);
    long long n = rows * C;
    if (!n)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned g = grid_for(n, 256);
    if (dt == OPS_F16)
        gate_kernel<<<g, 256, 0, st>>>((__half *)acts, acc, b, rows, C);
    else if (dt == OPS_BF16)
        gate_kernel<<<g, 256, 0, st>>>((__nv_bfloat16 *)acts, acc, b, rows, C);
    else
        gate_kernel<<<g, 256, 0, st>>>((float *)acts, acc, b, rows, C);
    return launched(err, "wg_gate");
}

/* ---- a flow's end --------------------------------------------------------------------------- */

#define TAIL_WARPS 4
#define TAIL_MAX_CH 256

/* a warp per row: the end conv's ch dot products over the skip row (8 at a time, lanes over C,
 * then warp sums), the coupling and the inverse 1x1 conv in shared memory */
__global__ void flow_tail_kernel(float *a, float *wo, const float *hs, int ldh, const float *end_w,
                                 const float *end_b, const float *w_inv, const int *lens, int batch,
                                 int lp, int G, int off, int ch, int C)
{
    __shared__ float sv[TAIL_WARPS][TAIL_MAX_CH], sx[TAIL_WARPS][TAIL_MAX_CH];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, half = ch / 2;
    long long rows = (long long)batch * lp;
    for (long long row = (long long)blockIdx.x * TAIL_WARPS + warp; row < rows;
         row += (long long)gridDim.x * TAIL_WARPS) {
        int t = (int)(row % lp), b = (int)(row / lp);
        float *ar = a + row * G + off;
        if (t >= lens[b]) {
            for (int c = lane; c < ch; c += 32) {
                ar[c] = 0.0f;
                if (wo)
                    wo[row * ch + c] = 0.0f;
            }
            continue;
        }
        const float *skip = hs + row * ldh + C;
        for (int c0 = 0; c0 < ch; c0 += 8) {
            float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int nc = ch - c0 < 8 ? ch - c0 : 8;
            for (int q = lane; q < C; q += 32) {
                float x = skip[q];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (j < nc)
                        s[j] += end_w[(long long)(c0 + j) * C + q] * x;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float v = s[j];
                for (int o = 16; o > 0; o >>= 1)
                    v += __shfl_xor_sync(0xffffffffu, v, o);
                if (lane == 0 && j < nc)
                    sv[warp][c0 + j] = v + end_b[c0 + j];
            }
        }
        for (int c = lane; c < ch; c += 32)
            sx[warp][c] = ar[c];
        __syncwarp();
        for (int q = lane; q < half; q += 32)
            sx[warp][half + q] = (sx[warp][half + q] - sv[warp][q]) / expf(sv[warp][half + q]);
        __syncwarp();
        for (int c = lane; c < ch; c += 32) {
            float y = 0.0f;
            for (int j = 0; j < ch; j++)
                y += w_inv[c * ch + j] * sx[warp][j];
            ar[c] = y;
            if (wo)
                wo[row * ch + c] = sv[warp][c];
        }
        __syncwarp();
    }
}

extern "C" int cuda_wg_flow_tail(float *a, float *wo, const float *hs, int ldh, const float *end_w,
                                 const float *end_b, const float *w_inv, const int *lens, int batch,
                                 int lp, int G, int off, int ch, int C, void *stream,
                                 hark_err_t *err)
{
    if (batch < 0 || lp < 0 || ch < 2 || ch % 2 || ch > TAIL_MAX_CH || off < 0 || off + ch > G ||
        C < 1 || ldh < 2 * C)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "wg_flow_tail: batch %d, lp %d, G %d, off %d, ch %d (<= %d), C %d", batch,
                       lp, G, off, ch, TAIL_MAX_CH, C);
    long long rows = (long long)batch * lp;
    if (!rows)
        return HARK_OK;
    long long blocks = (rows + TAIL_WARPS - 1) / TAIL_WARPS;
    flow_tail_kernel<<<(unsigned)(blocks > (1 << 20) ? (1 << 20) : blocks), 32 * TAIL_WARPS, 0,
                       (cudaStream_t)stream>>>(a, wo, hs, ldh, end_w, end_b, w_inv, lens, batch, lp,
                                               G, off, ch, C);
    return launched(err, "wg_flow_tail");
}

/* ---- the denoiser --------------------------------------------------------------------------- */

__global__ void stft_frames_kernel(float *fr, const float *x, long long ldx, const int *n,
                                   const float *win, int batch, int nf, int N, int hop)
{
    long long total = (long long)batch * nf * N;
    GRID_STRIDE(i, total)
    {
        int j = (int)(i % N);
        long long r = i / N;
        int f = (int)(r % nf), b = (int)(r / nf);
        long long nb = n[b];
        float v = 0.0f;
        if (f < (int)(nb / hop) + 1) {
            long long p = (long long)f * hop + j - N / 2;
            if (p < 0)
                p = -p;
            if (p >= nb)
                p = 2 * (nb - 1) - p;
            v = x[b * ldx + p] * win[j];
        }
        fr[i] = v;
    }
}

extern "C" int cuda_wg_stft_frames(float *fr, const float *x, long long ldx, const int *n,
                                   const float *win, int batch, int nf, int N, int hop,
                                   void *stream, hark_err_t *err)
{
    if (batch < 0 || nf < 0 || N < 2 || hop < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_stft_frames: batch %d, nf %d, N %d, hop %d",
                       batch, nf, N, hop);
    long long total = (long long)batch * nf * N;
    if (!total)
        return HARK_OK;
    stft_frames_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(fr, x, ldx, n, win,
                                                                               batch, nf, N, hop);
    return launched(err, "wg_stft_frames");
}

__global__ void spec_denoise_kernel(float2 *spec, const float *bias, const float *d_strength,
                                    long long rows, int nb)
{
    float strength = *d_strength;
    long long n = rows * nb;
    GRID_STRIDE(i, n)
    {
        float2 z = spec[i];
        float mg = sqrtf(z.x * z.x + z.y * z.y) - bias[i % nb] * strength;
        mg = mg > 0.0f ? mg : 0.0f;
        float ph = atan2f(z.y, z.x);
        spec[i] = make_float2(mg * cosf(ph), mg * sinf(ph));
    }
}

extern "C" int cuda_wg_spec_denoise(float *spec, const float *bias, const float *d_strength,
                                    long long rows, int nb, void *stream, hark_err_t *err)
{
    if (rows < 0 || nb < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_spec_denoise: rows %lld, bins %d", rows, nb);
    long long n = rows * nb;
    if (!n)
        return HARK_OK;
    spec_denoise_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>((float2 *)spec, bias,
                                                                            d_strength, rows, nb);
    return launched(err, "wg_spec_denoise");
}

__global__ void ola_kernel(float *y, long long ldy, const float *fr, const int *n, const float *win,
                           int batch, int nf, int N, int hop, long long ld_max)
{
    float scale = (float)N / (float)hop;
    long long total = (long long)batch * ld_max;
    GRID_STRIDE(i, total)
    {
        long long p = i % ld_max;
        int b = (int)(i / ld_max);
        int F = n[b] / hop + 1;
        if (p >= (long long)(F - 1) * hop)
            continue;
        long long q = p + N / 2;
        float acc = 0.0f, wss = 0.0f;
        long long f_lo = q - N + 1 <= 0 ? 0 : (q - N + 1 + hop - 1) / hop;
        for (long long f = f_lo; f < F && f < nf && f * hop <= q; f++) {
            int j = (int)(q - f * hop);
            acc += fr[((long long)b * nf + f) * N + j] / (float)N / scale * win[j];
            double w = 0.5 - 0.5 * cos(2.0 * 3.14159265358979323846 * (double)j / N);
            wss = (float)((double)wss + w * w);
        }
        if (wss > FLT_MIN)
            acc /= wss;
        y[b * ldy + p] = acc * scale;
    }
}

extern "C" int cuda_wg_ola(float *y, long long ldy, const float *fr, const int *n, const float *win,
                           int batch, int nf, int N, int hop, void *stream, hark_err_t *err)
{
    if (batch < 0 || nf < 1 || N < 2 || hop < 1 || ldy < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "wg_ola: batch %d, nf %d, N %d, hop %d, ldy %lld",
                       batch, nf, N, hop, ldy);
    long long ld_max = (long long)(nf - 1) * hop, total = (long long)batch * ld_max;
    if (!total)
        return HARK_OK;
    ola_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(y, ldy, fr, n, win, batch,
                                                                       nf, N, hop, ld_max);
    return launched(err, "wg_ola");
}
