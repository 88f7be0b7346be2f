/* features.cu — GPU front ends: one block per (item, frame) runs the CPU pipeline of features.c
 * in shared memory with the same float32 operation order (this file is compiled with
 * -fmad=false so no multiply-add is fused), including rfft.c's FFTPACK radix-4/2 passes.
 * CPU reference: feat_compute (src/dsp/features.c). Tests: tests/dsp/test_features_gpu.c */
#include "dsp/features_gpu.h"

#include "core/alloc.h"
#include "hark.h"

#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#define FEAT_THREADS 256
#define FEAT_MAX_FFT 2048

struct feat_params {
    int kind, win_length, hop, n_fft, n_bins, n_mels, frame_span, win_offset, pad_reflect, pad_left;
    float input_scale, preemph, mag_eps, log_eps;
    int frame_dc_preemph, signal_preemph, magnitude, log_add, normalize;
    int nfact, fact[RFFT_MAX_FACTORS], tw_off[RFFT_MAX_FACTORS];
};

struct feat_gpu {
    feat_params prm;
    float *d_window; /* (win_length) */
    float *d_mel;    /* (n_mels, n_bins) */
    int *d_mel_lo, *d_mel_hi;
    float *d_tw; /* rfft twiddles */
};

__device__ static int frames_for(const feat_params &p, long n)
{
    if (n <= 0)
        return 0;
    if (p.kind == FEAT_FBANK)
        return n < p.win_length ? 0 : (int)(1 + (n - p.win_length) / p.hop);
    if (p.kind == FEAT_NEMO_MEL)
        return (int)((n + p.hop - 1) / p.hop);
    long padded = n + 2L * p.pad_left;
    return padded < p.n_fft ? 0 : (int)(1 + (padded - p.n_fft) / p.hop);
}

__device__ static long reflect_idx(long i, long n)
{
    if (n == 1)
        return 0;
    while (i < 0 || i >= n) {
        if (i < 0)
            i = -i;
        if (i >= n)
            i = 2 * (n - 1) - i;
    }
    return i;
}

/* the signal after scaling and (nemo) whole-signal pre-emphasis, as features.c's sig[] */
__device__ static float sig_at(const feat_params &p, const float *x, long i)
{
    float v = x[i] * p.input_scale;
    if (p.signal_preemph && i > 0)
        v = v - p.preemph * (x[i - 1] * p.input_scale);
    return v;
}

/* One FFTPACK pass (radix 4 or 2), work items spread over the block. Same arithmetic as rfft.c. */
__device__ static void pass4(int ido, int l1, const float *cc, float *ch, const float *wa)
{
#define CC(a, b, c) cc[(a) + ido * ((b) + l1 * (c))]
#define CH(a, b, c) ch[(a) + ido * ((b) + 4 * (c))]
#define WA(x, i) wa[(i) + (x) * (ido - 1)]
    const float hsqt2 = 0.707106781186547524400844362104849f;
    for (int k = threadIdx.x; k < l1; k += blockDim.x) {
        float tr1 = CC(0, k, 3) + CC(0, k, 1);
        CH(0, 2, k) = CC(0, k, 3) - CC(0, k, 1);
        float tr2 = CC(0, k, 0) + CC(0, k, 2);
        CH(ido - 1, 1, k) = CC(0, k, 0) - CC(0, k, 2);
        CH(0, 0, k) = tr2 + tr1;
        CH(ido - 1, 3, k) = tr2 - tr1;
        if ((ido & 1) == 0) {
            float ti1 = -hsqt2 * (CC(ido - 1, k, 1) + CC(ido - 1, k, 3));
            float tr1b = hsqt2 * (CC(ido - 1, k, 1) - CC(ido - 1, k, 3));
            CH(ido - 1, 0, k) = CC(ido - 1, k, 0) + tr1b;
            CH(ido - 1, 2, k) = CC(ido - 1, k, 0) - tr1b;
            CH(0, 3, k) = ti1 + CC(ido - 1, k, 2);
            CH(0, 1, k) = ti1 - CC(ido - 1, k, 2);
        }
    }
    if (ido <= 2)
        return;
    int half = (ido - 1) / 2; /* i = 2, 4, ..., < ido */
    for (int w = threadIdx.x; w < l1 * half; w += blockDim.x) {
        int k = w / half, i = 2 + 2 * (w % half), ic = ido - i;
        float cr2 = WA(0, i - 2) * CC(i - 1, k, 1) + WA(0, i - 1) * CC(i, k, 1);
        float ci2 = WA(0, i - 2) * CC(i, k, 1) - WA(0, i - 1) * CC(i - 1, k, 1);
        float cr3 = WA(1, i - 2) * CC(i - 1, k, 2) + WA(1, i - 1) * CC(i, k, 2);
        float ci3 = WA(1, i - 2) * CC(i, k, 2) - WA(1, i - 1) * CC(i - 1, k, 2);
        float cr4 = WA(2, i - 2) * CC(i - 1, k, 3) + WA(2, i - 1) * CC(i, k, 3);
        float ci4 = WA(2, i - 2) * CC(i, k, 3) - WA(2, i - 1) * CC(i - 1, k, 3);
        float tr1 = cr4 + cr2, tr4 = cr4 - cr2;
        float ti1 = ci2 + ci4, ti4 = ci2 - ci4;
        float tr2 = CC(i - 1, k, 0) + cr3, tr3 = CC(i - 1, k, 0) - cr3;
        float ti2 = CC(i, k, 0) + ci3, ti3 = CC(i, k, 0) - ci3;
        CH(i - 1, 0, k) = tr2 + tr1;
        CH(ic - 1, 3, k) = tr2 - tr1;
        CH(i, 0, k) = ti1 + ti2;
        CH(ic, 3, k) = ti1 - ti2;
        CH(i - 1, 2, k) = tr3 + ti4;
        CH(ic - 1, 1, k) = tr3 - ti4;
        CH(i, 2, k) = tr4 + ti3;
        CH(ic, 1, k) = tr4 - ti3;
    }
#undef CH
}

__device__ static void pass2(int ido, int l1, const float *cc, float *ch, const float *wa)
{
#define CH(a, b, c) ch[(a) + ido * ((b) + 2 * (c))]
    for (int k = threadIdx.x; k < l1; k += blockDim.x) {
        CH(0, 0, k) = CC(0, k, 0) + CC(0, k, 1);
        CH(ido - 1, 1, k) = CC(0, k, 0) - CC(0, k, 1);
        if ((ido & 1) == 0) {
            CH(0, 1, k) = -CC(ido - 1, k, 1);
            CH(ido - 1, 0, k) = CC(ido - 1, k, 0);
        }
    }
    if (ido <= 2)
        return;
    int half = (ido - 1) / 2;
    for (int w = threadIdx.x; w < l1 * half; w += blockDim.x) {
        int k = w / half, i = 2 + 2 * (w % half), ic = ido - i;
        float wr = WA(0, i - 2), wi = WA(0, i - 1);
        float tr2 = wr * CC(i - 1, k, 1) + wi * CC(i, k, 1);
        float ti2 = wr * CC(i, k, 1) - wi * CC(i - 1, k, 1);
        CH(i - 1, 0, k) = CC(i - 1, k, 0) + tr2;
        CH(ic - 1, 1, k) = CC(i - 1, k, 0) - tr2;
        CH(i, 0, k) = ti2 + CC(i, k, 0);
        CH(ic, 1, k) = ti2 - CC(i, k, 0);
    }
#undef CH
#undef CC
#undef WA
}

/* Sum of one double per thread over the block (blockDim.x a power of two <= FEAT_THREADS);
 * every thread gets the total. `red` is shared scratch of blockDim.x doubles. */
__device__ static double block_sum(double v, double *red)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h)
            red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    double total = red[0];
    __syncthreads();
    return total;
}

/* grid (t_max, B), block FEAT_THREADS. out: (B, t_max, n_mels). */
__global__ void features_kernel(float *out, int *frames_out, const float *pcm, size_t stride,
                                const int *lens, int t_max, feat_params p, const float *window,
                                const float *mel, const int *mel_lo, const int *mel_hi,
                                const float *tw)
{
    __shared__ float bufa[FEAT_MAX_FFT], bufb[FEAT_MAX_FFT], frame[FEAT_MAX_FFT];
    __shared__ double red[FEAT_THREADS];
    const int t = blockIdx.x, b = blockIdx.y;
    const long n = lens[b];
    const float *x = pcm + (size_t)b * stride;
    const int T = frames_for(p, n);
    float *o = out + ((size_t)b * t_max + t) * p.n_mels;
    if (t == 0 && threadIdx.x == 0 && frames_out)
        frames_out[b] = T;
    if (t >= T) {
        for (int m = threadIdx.x; m < p.n_mels; m += blockDim.x)
            o[m] = 0.0f;
        return;
    }
    const int S = p.frame_span, W = p.win_length;
    long start = (long)t * p.hop - p.pad_left;
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        long i = p.pad_reflect ? reflect_idx(start + j, n) : start + j;
        frame[j] = sig_at(p, x, i);
    }
    __syncthreads();
    if (p.frame_dc_preemph) {
        double s = 0;
        for (int j = threadIdx.x; j < S; j += blockDim.x)
            s += frame[j];
        float mean = (float)(block_sum(s, red) / S);
        for (int j = threadIdx.x; j < S; j += blockDim.x) {
            float cur = frame[j] - mean;
            float prev = j > 0 ? frame[j - 1] - mean : cur;
            bufb[j] = cur - p.preemph * prev;
        }
        __syncthreads();
        for (int j = threadIdx.x; j < S; j += blockDim.x)
            frame[j] = bufb[j];
        __syncthreads();
    }
    for (int j = threadIdx.x; j < p.n_fft; j += blockDim.x) {
        int wj = j - p.win_offset;
        float v = 0.0f;
        if (wj >= 0 && wj < W)
            v = frame[S == W ? wj : j] * window[wj];
        bufa[j] = v;
    }
    __syncthreads();
    /* FFTPACK passes, ping-pong between bufa and bufb */
    float *p1 = bufa, *p2 = bufb;
    int l1 = p.n_fft;
    for (int k1 = 0; k1 < p.nfact; k1++) {
        int k = p.nfact - k1 - 1, ip = p.fact[k], ido = p.n_fft / l1;
        l1 /= ip;
        if (ip == 4)
            pass4(ido, l1, p1, p2, tw + p.tw_off[k]);
        else
            pass2(ido, l1, p1, p2, tw + p.tw_off[k]);
        __syncthreads();
        float *tmp = p1;
        p1 = p2;
        p2 = tmp;
    }
    /* spectrum -> power/magnitude into p2 (n_bins) */
    const int N = p.n_fft;
    for (int kb = threadIdx.x; kb < p.n_bins; kb += blockDim.x) {
        float re = kb == 0 ? p1[0] : (kb == N / 2 ? p1[N - 1] : p1[2 * kb - 1]);
        float im = (kb == 0 || kb == N / 2) ? 0.0f : p1[2 * kb];
        float pw;
        if (p.magnitude)
            pw = sqrtf(re * re + im * im + p.mag_eps);
        else {
            float a = sqrtf(re * re + im * im);
            pw = a * a;
        }
        p2[kb] = pw;
    }
    __syncthreads();
    for (int m = threadIdx.x; m < p.n_mels; m += blockDim.x) {
        const float *row = mel + (size_t)m * p.n_bins;
        float acc = 0.0f;
        for (int kb = mel_lo[m]; kb < mel_hi[m]; kb++)
            acc += row[kb] * p2[kb];
        o[m] = p.log_add ? logf(acc + p.log_eps) : logf(fmaxf(acc, p.log_eps));
    }
}

/* NeMo per-feature normalisation; grid (n_mels, B), block FEAT_THREADS. */
__global__ void normalize_kernel(float *out, const float *pcm_unused, const int *lens, int t_max,
                                 feat_params p)
{
    __shared__ double red[FEAT_THREADS];
    const int m = blockIdx.x, b = blockIdx.y;
    const int T = frames_for(p, lens[b]);
    if (T == 0)
        return;
    float *col = out + (size_t)b * t_max * p.n_mels + m;
    double s = 0;
    for (int t = threadIdx.x; t < T; t += blockDim.x)
        s += col[(size_t)t * p.n_mels];
    double mean = block_sum(s, red) / T;
    double q = 0;
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        double d = col[(size_t)t * p.n_mels] - mean;
        q += d * d;
    }
    double sd = T > 1 ? sqrt(block_sum(q, red) / (T - 1)) : 0.0;
    float fm = (float)mean, fs = (float)sd + 1e-5f;
    for (int t = threadIdx.x; t < T; t += blockDim.x)
        col[(size_t)t * p.n_mels] = (col[(size_t)t * p.n_mels] - fm) / fs;
}

static int cuda_fail(hark_err_t *err, cudaError_t e, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, "features (gpu): %s: %s", what, cudaGetErrorString(e));
}

extern "C" int feat_gpu_create(const feat_plan_t *pl, feat_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    if (pl->opts.dither > 0)
        return err_set(err, HARK_ERR_UNSUPPORTED, "features (gpu): dither is CPU-only");
    if (pl->pad == FEAT_PAD_KALDI)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "features (gpu): the icefall/sherpa fbank (snip_edges=false) is CPU-only");
    if (!pl->torch_fft || pl->n_fft > FEAT_MAX_FFT || pl->frame_span > FEAT_MAX_FFT)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "features (gpu): n_fft %d must be a power of two <= %d", pl->n_fft,
                       FEAT_MAX_FFT);
    feat_gpu_t *g = (feat_gpu_t *)hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "features (gpu): out of memory");
    feat_params &p = g->prm;
    p.kind = pl->opts.kind;
    p.win_length = pl->win_length;
    p.hop = pl->hop;
    p.n_fft = pl->n_fft;
    p.n_bins = pl->n_bins;
    p.n_mels = pl->n_mels;
    p.frame_span = pl->frame_span;
    p.win_offset = pl->win_offset;
    p.pad_reflect = pl->pad == FEAT_PAD_REFLECT;
    p.pad_left = pl->pad_left;
    p.input_scale = pl->input_scale;
    p.preemph = pl->preemph;
    p.mag_eps = pl->mag_eps;
    p.log_eps = pl->log_eps;
    p.frame_dc_preemph = pl->frame_dc_preemph;
    p.signal_preemph = pl->signal_preemph;
    p.magnitude = pl->magnitude;
    p.log_add = pl->log_mode == FEAT_LOG_ADD;
    p.normalize = pl->normalize;
    p.nfact = pl->rfft.nfact;
    memcpy(p.fact, pl->rfft.fact, sizeof p.fact);
    memcpy(p.tw_off, pl->rfft.tw_off, sizeof p.tw_off);
    size_t nmel = (size_t)pl->n_mels * pl->n_bins;
    cudaError_t e;
    if ((e = cudaMalloc(&g->d_window, sizeof(float) * pl->win_length)) ||
        (e = cudaMalloc(&g->d_mel, sizeof(float) * nmel)) ||
        (e = cudaMalloc(&g->d_mel_lo, sizeof(int) * pl->n_mels)) ||
        (e = cudaMalloc(&g->d_mel_hi, sizeof(int) * pl->n_mels)) ||
        (e = cudaMalloc(&g->d_tw, sizeof(float) * (pl->rfft.n_tw ? pl->rfft.n_tw : 1))) ||
        (e = cudaMemcpy(g->d_window, pl->window, sizeof(float) * pl->win_length,
                        cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(g->d_mel, pl->mel, sizeof(float) * nmel, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(g->d_mel_lo, pl->mel_lo, sizeof(int) * pl->n_mels,
                        cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(g->d_mel_hi, pl->mel_hi, sizeof(int) * pl->n_mels,
                        cudaMemcpyHostToDevice)) ||
        (pl->rfft.n_tw && (e = cudaMemcpy(g->d_tw, pl->rfft.tw, sizeof(float) * pl->rfft.n_tw,
                                          cudaMemcpyHostToDevice)))) {
        feat_gpu_destroy(g);
        return cuda_fail(err, e, "upload");
    }
    *out = g;
    return HARK_OK;
}

extern "C" void feat_gpu_destroy(feat_gpu_t *g)
{
    if (!g)
        return;
    cudaFree(g->d_window);
    cudaFree(g->d_mel);
    cudaFree(g->d_mel_lo);
    cudaFree(g->d_mel_hi);
    cudaFree(g->d_tw);
    hark_free(g);
}

extern "C" int feat_gpu_compute(feat_gpu_t *g, float *d_out, int *d_frames, const float *d_pcm,
                                size_t stride, const int *d_lens, int batch, int t_max,
                                void *stream, hark_err_t *err)
{
    if (batch <= 0 || t_max <= 0)
        return HARK_OK;
    cudaStream_t s = (cudaStream_t)stream;
    dim3 grid((unsigned)t_max, (unsigned)batch);
    features_kernel<<<grid, FEAT_THREADS, 0, s>>>(d_out, d_frames, d_pcm, stride, d_lens, t_max,
                                                  g->prm, g->d_window, g->d_mel, g->d_mel_lo,
                                                  g->d_mel_hi, g->d_tw);
    if (g->prm.normalize) {
        dim3 g2((unsigned)g->prm.n_mels, (unsigned)batch);
        normalize_kernel<<<g2, FEAT_THREADS, 0, s>>>(d_out, d_pcm, d_lens, t_max, g->prm);
    }
    cudaError_t e = cudaGetLastError();
    return e ? cuda_fail(err, e, "launch") : HARK_OK;
}
