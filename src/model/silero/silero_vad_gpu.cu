/* silero_vad_gpu.cu — Silero VAD's window step on the GPU (the launcher of silero_vad_gpu.h).
 * A block takes SILERO_GPU_STREAMS streams and walks their windows in order; per window every
 * layer is a set of dot products, one warp per output row, the lanes splitting the row's length
 * and each lane accumulating that row for every stream and frame of the block at once (so each
 * weight is read once per window per block), then summed across the warp. Activations live in
 * shared memory in silero_vad_step's layouts (time-major, channels innermost); the state (h, c,
 * context) stays there between windows and returns to global memory at the end. FP32 throughout.
 * CPU reference: silero_vad_step (silero_vad.c).
 * Tests: tests/model/silero/test_silero_vad_gpu.c */
#include "model/silero/silero_vad_gpu.h"

#include "hark.h"

#include <cuda_runtime.h>

#define S SILERO_GPU_STREAMS
#define TM SILERO_GPU_MAX_FRAMES
#define H SILERO_HIDDEN

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float sigmoid_f(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* sample i of stream s's padded window w: context, new samples (zeros past the end), reflection */
__device__ __forceinline__ float window_sample(const silero_gpu_net_t &net, const float *ctx,
                                               const float *x, long long n, int w, int i)
{
    const int L = net.context + net.window;
    if (i >= L)
        i = L - 2 - (i - L); /* reflect: the edge sample is not repeated */
    if (i < net.context)
        return ctx[i];
    long long pos = (long long)w * net.window + (i - net.context);
    return pos < n ? x[pos] : 0.0f;
}

__global__ void __launch_bounds__(SILERO_GPU_THREADS)
    silero_vad_kernel(float *prob, float *state, const float *x, const long long *x_off,
                      const long long *n_samples, const long long *p_off, const int *n_win,
                      int n_streams, silero_gpu_net_t net)
{
    extern __shared__ float sm[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarp = blockDim.x >> 5;
    const int s0 = blockIdx.x * S, ns = min(S, n_streams - s0);
    const int ctxn = net.context, Lp = ctxn + net.window + net.pad;
    const int T = net.frames, nb = net.n_bins, nf = net.n_fft;
    const int sf = 2 * H + ctxn;          /* state floats per stream */
    const int per = net.r1 + net.r2 + sf; /* shared floats per stream */
    __shared__ int nw_s[S];
    __shared__ long long n_s[S];
    __shared__ const float *x_s[S];
#define R1(s) (sm + (s)*per)
#define R2(s) (sm + (s)*per + net.r1)
#define ST(s) (sm + (s)*per + net.r1 + net.r2) /* h (H), c (H), context */

    if (tid < S) {
        int s = s0 + tid;
        nw_s[tid] = tid < ns ? n_win[s] : 0;
        n_s[tid] = tid < ns ? n_samples[s] : 0;
        x_s[tid] = tid < ns ? x + x_off[s] : x;
    }
    for (int s = 0; s < S; s++)
        for (int i = tid; i < sf; i += blockDim.x)
            ST(s)[i] = s < ns ? state[(size_t)(s0 + s) * sf + i] : 0.0f;
    __syncthreads();
    int wmax = 0;
    for (int s = 0; s < S; s++)
        wmax = max(wmax, nw_s[s]);

    for (int w = 0; w < wmax; w++) {
        /* the padded window into R2; then the next window's context into the state */
        for (int s = 0; s < S; s++)
            for (int i = tid; i < Lp; i += blockDim.x)
                R2(s)[i] = window_sample(net, ST(s) + 2 * H, x_s[s], n_s[s], w, i);
        __syncthreads();
        for (int s = 0; s < S; s++)
            if (w < nw_s[s])
                for (int i = tid; i < ctxn; i += blockDim.x)
                    ST(s)[2 * H + i] = R2(s)[net.window + i];
        /* STFT: spec (T, 2·nb) in R1 = frames · basisᵀ */
        for (int o = warp; o < 2 * nb; o += nwarp) {
            float acc[S][TM] = {};
            const float *b = net.basis + (size_t)o * nf;
#pragma unroll 4
            for (int k = lane; k < nf; k += 32) {
                float wv = __ldg(b + k);
#pragma unroll
                for (int s = 0; s < S; s++)
#pragma unroll
                    for (int t = 0; t < TM; t++)
                        if (t < T)
                            acc[s][t] += wv * R2(s)[t * net.hop + k];
            }
#pragma unroll
            for (int s = 0; s < S; s++)
#pragma unroll
                for (int t = 0; t < TM; t++)
                    if (t < T) {
                        float v = warp_sum(acc[s][t]);
                        if (lane == 0)
                            R1(s)[t * 2 * nb + o] = v;
                    }
        }
        __syncthreads();
        /* magnitude (T, nb) into R2 */
        for (int s = 0; s < S; s++)
            for (int i = tid; i < T * nb; i += blockDim.x) {
                int t = i / nb, f = i - t * nb;
                float re = R1(s)[t * 2 * nb + f], im = R1(s)[t * 2 * nb + nb + f];
                R2(s)[i] = sqrtf(re * re + im * im);
            }
        __syncthreads();
        /* encoder: k=3 convs, pad 1, ReLU; R2 -> R1 -> R2 -> R1 -> R2 */
        int t_in = T;
        for (int l = 0; l < SILERO_N_CONV; l++) {
            const int ci = net.cin[l], co = net.cout[l], st = net.stride[l];
            const int t_out = (t_in - 1) / st + 1;
            const int in_off = (l & 1) ? 0 : net.r1, out_off = (l & 1) ? net.r1 : 0;
            for (int o = warp; o < co; o += nwarp) {
                float acc[S][TM] = {};
                const float *wr = net.conv_w[l] + (size_t)o * 3 * ci;
                for (int j = 0; j < 3; j++)
#pragma unroll 4
                    for (int c = lane; c < ci; c += 32) {
                        float wv = __ldg(wr + j * ci + c);
#pragma unroll
                        for (int t = 0; t < TM; t++) {
                            int src = t * st + j - 1;
                            if (t < t_out && src >= 0 && src < t_in)
#pragma unroll
                                for (int s = 0; s < S; s++)
                                    acc[s][t] += wv * sm[s * per + in_off + src * ci + c];
                        }
                    }
                float bias = __ldg(net.conv_b[l] + o);
#pragma unroll
                for (int s = 0; s < S; s++)
#pragma unroll
                    for (int t = 0; t < TM; t++)
                        if (t < t_out) {
                            float v = warp_sum(acc[s][t]) + bias;
                            if (lane == 0)
                                sm[s * per + out_off + t * co + o] = v > 0.0f ? v : 0.0f;
                        }
            }
            __syncthreads();
            t_in = t_out;
        }
        /* LSTM gates (4H) into R1: x·W_ihᵀ + h·W_hhᵀ + b_ih + b_hh, x in R2 */
        for (int g = warp; g < 4 * H; g += nwarp) {
            float acc[S] = {};
            const float *wi = net.w_ih + (size_t)g * H, *wh = net.w_hh + (size_t)g * H;
#pragma unroll 4
            for (int k = lane; k < H; k += 32) {
                float a = __ldg(wi + k), b = __ldg(wh + k);
#pragma unroll
                for (int s = 0; s < S; s++)
                    acc[s] += a * R2(s)[k] + b * ST(s)[k];
            }
            float bias = __ldg(net.b_ih + g) + __ldg(net.b_hh + g);
#pragma unroll
            for (int s = 0; s < S; s++) {
                float v = warp_sum(acc[s]);
                if (lane == 0)
                    R1(s)[g] = v + bias;
            }
        }
        __syncthreads();
        /* the cell (streams still running only) and relu(h) · out_w per unit into R1[4H ..) */
        for (int i = tid; i < S * H; i += blockDim.x) {
            int s = i / H, k = i - s * H;
            if (w >= nw_s[s])
                continue;
            const float *g = R1(s);
            float *h = ST(s), *c = h + H;
            float gi = sigmoid_f(g[k]), gf = sigmoid_f(g[H + k]);
            float gg = tanhf(g[2 * H + k]), go = sigmoid_f(g[3 * H + k]);
            c[k] = gf * c[k] + gi * gg;
            h[k] = go * tanhf(c[k]);
            R1(s)[4 * H + k] = (h[k] > 0.0f ? h[k] : 0.0f) * __ldg(net.out_w + k);
        }
        __syncthreads();
        if (warp < S && w < nw_s[warp]) {
            float v = 0.0f;
            for (int k = lane; k < H; k += 32)
                v += R1(warp)[4 * H + k];
            v = warp_sum(v);
            if (lane == 0)
                prob[p_off[s0 + warp] + w] = sigmoid_f(v + net.out_b);
        }
        __syncthreads();
    }
    for (int s = 0; s < ns; s++)
        for (int i = tid; i < sf; i += blockDim.x)
            state[(size_t)(s0 + s) * sf + i] = ST(s)[i];
#undef R1
#undef R2
#undef ST
}

extern "C" int cuda_silero_vad(float *prob, float *state, const float *x, const long long *x_off,
                               const long long *n_samples, const long long *p_off, const int *n_win,
                               int n_streams, const silero_gpu_net_t *net, void *stream,
                               hark_err_t *err)
{
    if (n_streams <= 0)
        return HARK_OK;
    size_t smem = (size_t)S * (net->r1 + net->r2 + 2 * H + net->context) * sizeof(float);
    cudaError_t e = cudaSuccess;
    if (smem > 48 * 1024)
        e = cudaFuncSetAttribute(silero_vad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
    if (e == cudaSuccess) {
        unsigned blocks = (unsigned)((n_streams + S - 1) / S);
        silero_vad_kernel<<<blocks, SILERO_GPU_THREADS, smem, (cudaStream_t)stream>>>(
            prob, state, x, x_off, n_samples, p_off, n_win, n_streams, *net);
        e = cudaGetLastError();
    }
    return e == cudaSuccess
               ? HARK_OK
               : err_set(err, HARK_ERR_CUDA, "cuda: silero VAD kernel (%d streams): %s", n_streams,
                         cudaGetErrorString(e));
}
