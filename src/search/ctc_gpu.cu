/* ctc_gpu.cu — per-frame argmax of CTC log-probs on the GPU: one warp per row, strided loads,
 * then a warp shuffle reduction that keeps the lowest index among equal maxima.
 * CPU reference: ctc_argmax_ref in ctc_argmax_ref.c. Tests: tests/search/test_ctc_gpu.c */
#include "search/ctc_gpu.h"

#include "hark.h"

#include <cuda_runtime.h>
#include <math.h>

__device__ static inline void better(float &bv, int &bi, float v, int i)
{
    /* larger wins; on ties the lower index; NaN never wins */
    if (v > bv || (v == bv && i < bi) || (bv != bv && v == v)) {
        bv = v;
        bi = i;
    }
}

__global__ void ctc_argmax_kernel(int *out, float *maxv, const float *x, int rows, int V)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= rows)
        return;
    const float *row = x + (size_t)warp * V;
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int k = lane; k < V; k += 32)
        better(bv, bi, row[k], k);
    for (int off = 16; off > 0; off >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, bv, off);
        int oi = __shfl_down_sync(0xffffffffu, bi, off);
        better(bv, bi, ov, oi);
    }
    if (lane == 0) {
        out[warp] = bi == 0x7fffffff ? 0 : bi;
        if (maxv)
            maxv[warp] = bv;
    }
}

extern "C" int cuda_ctc_argmax(int *d_out, float *d_max, const float *d_x, int rows, int V,
                               void *stream, hark_err_t *err)
{
    if (rows <= 0)
        return HARK_OK;
    int threads = 256, blocks = (int)(((long)rows * 32 + threads - 1) / threads);
    ctc_argmax_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(d_out, d_max, d_x, rows, V);
    cudaError_t e = cudaGetLastError();
    return e ? err_set(err, HARK_ERR_CUDA, "ctc argmax: %s", cudaGetErrorString(e)) : HARK_OK;
}
