/* chunk_cuda.cu — the kernels of a batched streaming (chunk) encoder step over a device cache pool
 * (ops_cuda.h, "chunk streaming"): packed rows of several streams at their own offsets, each
 * attending to its own slot of the K/V pool and reading its own conv cache.
 * CPU references: chunk_*_ref in src/ops/ops_cpu.c. Tests: tests/ops/test_ops_cuda.c (chunk_*). */
#include "ops/ops_cuda.h"

#include "hark.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

static int chunk_fail(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e))
               : HARK_OK;
}

__device__ __forceinline__ void st_out(float *p, size_t i, float v)
{
    p[i] = v;
}
__device__ __forceinline__ void st_out(__half *p, size_t i, float v)
{
    p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void st_out(__nv_bfloat16 *p, size_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

/* ---- embedding rows ------------------------------------------------------------------------ */

__global__ void chunk_embed_kernel(float *x, const float *a, int t_pad, const float *bias,
                                   float alpha, const float *pe, cuda_chunk_meta_t mt, int d)
{
    size_t total = (size_t)mt.rows * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / d), c = (int)(i % d), b = mt.chunk[r], t = r - mt.row0[b];
        float v = alpha * (a[((size_t)b * t_pad + t) * d + c] + (bias ? bias[c] : 0.0f));
        if (pe)
            v += pe[(size_t)(mt.pos0[b] + t) * d + c];
        x[i] = v;
    }
}

extern "C" int cuda_chunk_embed(float *x, const float *a, int t_pad, const float *bias, float alpha,
                                const float *pe, const cuda_chunk_meta_t *mt, int d, void *stream,
                                hark_err_t *err)
{
    if (mt->rows <= 0)
        return HARK_OK;
    size_t total = (size_t)mt->rows * d;
    unsigned gr = (unsigned)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    chunk_embed_kernel<<<gr, 256, 0, (cudaStream_t)stream>>>(x, a, t_pad, bias, alpha, pe, *mt, d);
    return chunk_fail(err, "chunk_embed_kernel");
}

/* ---- K/V into the pool --------------------------------------------------------------------- */

__global__ void chunk_kv_store_kernel(float *kc, float *vc, long long slot_stride, int cap,
                                      const float *k, const float *v, int ld, const float *bk,
                                      const float *bv, cuda_chunk_meta_t mt, int d)
{
    size_t total = (size_t)mt.rows * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / d), c = (int)(i % d), b = mt.chunk[r];
        int p = mt.pos0[b] + r - mt.row0[b];
        size_t dst = (size_t)mt.slot[b] * slot_stride + (size_t)(p % cap) * d + c;
        kc[dst] = k[(size_t)r * ld + c] + (bk ? bk[c] : 0.0f);
        vc[dst] = v[(size_t)r * ld + c] + (bv ? bv[c] : 0.0f);
    }
}

extern "C" int cuda_chunk_kv_store(float *kc, float *vc, long long slot_stride, int cap,
                                   const float *k, const float *v, int ld, const float *bk,
                                   const float *bv, const cuda_chunk_meta_t *mt, int d,
                                   void *stream, hark_err_t *err)
{
    if (mt->rows <= 0)
        return HARK_OK;
    size_t total = (size_t)mt->rows * d;
    unsigned gr = (unsigned)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    chunk_kv_store_kernel<<<gr, 256, 0, (cudaStream_t)stream>>>(kc, vc, slot_stride, cap, k, v, ld,
                                                                bk, bv, *mt, d);
    return chunk_fail(err, "chunk_kv_store_kernel");
}

/* ---- attention over the pool --------------------------------------------------------------- */

#define CA_THREADS 128
#define CA_WARPS (CA_THREADS / 32)

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* block (row, head): scores of the row's keys in shared memory, softmax, then the values */
template <typename TO>
__global__ void __launch_bounds__(CA_THREADS)
    chunk_attention_kernel(TO *ctx, const float *q, int ldq, const float *bq, const float *kc,
                           const float *vc, long long slot_stride, int cap, const float *pt,
                           const float *bu, const float *bvp, cuda_chunk_meta_t mt, int dk,
                           float scale)
{
    extern __shared__ float sm[];
    float *qu = sm, *qv = sm + dk, *s = sm + 2 * dk;
    __shared__ float red[CA_WARPS];
    int r = blockIdx.x, h = blockIdx.y, d = gridDim.y * dk, tid = threadIdx.x;
    int b = mt.chunk[r];
    int n_rows = mt.row0[b + 1] - mt.row0[b], nk = mt.ctx[b] + n_rows;
    int p0 = mt.pos0[b] - mt.ctx[b]; /* absolute position of key 0 */
    const float *kb = kc + (size_t)mt.slot[b] * slot_stride + (size_t)h * dk;
    const float *vb = vc + (size_t)mt.slot[b] * slot_stride + (size_t)h * dk;
    for (int i = tid; i < dk; i += CA_THREADS) {
        float x = q[(size_t)r * ldq + h * dk + i] + (bq ? bq[h * dk + i] : 0.0f);
        qu[i] = x + (pt && bu ? bu[h * dk + i] : 0.0f); /* pos_bias_u/v: rel-pos only */
        qv[i] = x + (pt && bvp ? bvp[h * dk + i] : 0.0f);
    }
    __syncthreads();
    int warp = tid / 32, lane = tid % 32;
    for (int j = warp; j < nk; j += CA_WARPS) {
        int p = p0 + j;
        const float *kj = kb + (size_t)(p % cap) * d;
        float acc = 0.0f;
        for (int i = lane; i < dk; i += 32)
            acc += qu[i] * kj[i];
        if (pt) {
            const float *pj = pt + (size_t)p * d + (size_t)h * dk;
            for (int i = lane; i < dk; i += 32)
                acc += qv[i] * pj[i];
        }
        acc = warp_sum(acc);
        if (lane == 0)
            s[j] = acc * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = tid; j < nk; j += CA_THREADS)
        mx = fmaxf(mx, s[j]);
    mx = warp_max(mx);
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int w = 1; w < CA_WARPS; w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int j = tid; j < nk; j += CA_THREADS) {
        float e = expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0)
        red[warp] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < CA_WARPS; w++)
        sum += red[w];
    float inv = 1.0f / sum;
    for (int i = tid; i < dk; i += CA_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < nk; j++)
            acc += s[j] * vb[(size_t)((p0 + j) % cap) * d + i];
        st_out(ctx, (size_t)r * d + h * dk + i, acc * inv);
    }
}

extern "C" int cuda_chunk_attention(void *ctx, ops_dtype_t ctx_t, const float *q, int ldq,
                                    const float *bq, const float *kc, const float *vc,
                                    long long slot_stride, int cap, const float *pt,
                                    const float *bu, const float *bvp, const cuda_chunk_meta_t *mt,
                                    int max_keys, int heads, int dk, float scale, void *stream,
                                    hark_err_t *err)
{
    if (mt->rows <= 0)
        return HARK_OK;
    if (max_keys < 1 || max_keys > cap || heads < 1 || dk < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "chunk attention: %d keys (cap %d), %d x %d",
                       max_keys, cap, heads, dk);
    size_t shm = (size_t)(2 * dk + max_keys) * sizeof(float);
    if (shm > 200 * 1024)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "chunk attention: %d keys need %zu bytes of shared memory", max_keys, shm);
    dim3 grid((unsigned)mt->rows, (unsigned)heads);
    cudaStream_t st = (cudaStream_t)stream;
#define CA_LAUNCH(T)                                                                               \
    do {                                                                                           \
        if (shm > 48 * 1024)                                                                       \
            cudaFuncSetAttribute(chunk_attention_kernel<T>,                                        \
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);           \
        chunk_attention_kernel<T><<<grid, CA_THREADS, shm, st>>>(                                  \
            (T *)ctx, q, ldq, bq, kc, vc, slot_stride, cap, pt, bu, bvp, *mt, dk, scale);          \
    } while (0)
    if (ctx_t == OPS_F16)
        CA_LAUNCH(__half);
    else if (ctx_t == OPS_BF16)
        CA_LAUNCH(__nv_bfloat16);
    else
        CA_LAUNCH(float);
#undef CA_LAUNCH
    return chunk_fail(err, "chunk_attention_kernel");
}

/* ---- depthwise conv with each stream's left context ---------------------------------------- */

__global__ void chunk_dwconv_kernel(float *out, const float *in, const float *cache,
                                    long long slot_stride, const float *left_init, const float *w,
                                    const float *bias, cuda_chunk_meta_t mt, int c, int k,
                                    int pad_left)
{
    size_t total = (size_t)mt.rows * c;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(i / c), ch = (int)(i % c), b = mt.chunk[r];
        int r0 = mt.row0[b], n = mt.row0[b + 1] - r0, t = r - r0;
        const float *lft =
            cache ? (mt.fresh[b] ? left_init : cache + (size_t)mt.slot[b] * slot_stride) : NULL;
        float acc = bias ? bias[ch] : 0.0f;
        for (int j = 0; j < k; j++) {
            int s = t + j - pad_left;
            float x;
            if (s >= 0 && s < n)
                x = in[(size_t)(r0 + s) * c + ch];
            else if (s < 0 && lft)
                x = lft[(size_t)(pad_left + s) * c + ch];
            else
                continue;
            acc += w[(size_t)ch * k + j] * x;
        }
        out[i] = acc;
    }
}

/* thread (chunk, channel): the last k-1 frames of [left context | the chunk's inputs], written in
 * ascending order (each reads a later or the same frame of the old cache) */
__global__ void chunk_conv_cache_kernel(float *cache, long long slot_stride, const float *in,
                                        const float *left_init, cuda_chunk_meta_t mt, int c, int lc)
{
    size_t total = (size_t)mt.n * c;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int b = (int)(i / c), ch = (int)(i % c);
        int r0 = mt.row0[b], n = mt.row0[b + 1] - r0;
        float *cs = cache + (size_t)mt.slot[b] * slot_stride;
        const float *old = mt.fresh[b] ? left_init : cs;
        for (int j = 0; j < lc; j++) {
            int src = n + j;
            float x = src < lc ? old[(size_t)src * c + ch] : in[(size_t)(r0 + src - lc) * c + ch];
            cs[(size_t)j * c + ch] = x;
        }
    }
}

extern "C" int cuda_chunk_dwconv(float *out, const float *in, float *cache, long long slot_stride,
                                 const float *left_init, const float *w, const float *bias,
                                 const cuda_chunk_meta_t *mt, int c, int k, int pad_left,
                                 void *stream, hark_err_t *err)
{
    if (mt->rows <= 0)
        return HARK_OK;
    if (k < 1 || pad_left < 0 || pad_left >= k || (cache && (!left_init || pad_left != k - 1)))
        return err_set(err, HARK_ERR_INVALID_ARG, "chunk dwconv: k %d, pad_left %d", k, pad_left);
    cudaStream_t st = (cudaStream_t)stream;
    size_t total = (size_t)mt->rows * c;
    unsigned gr = (unsigned)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    chunk_dwconv_kernel<<<gr, 256, 0, st>>>(out, in, cache, slot_stride, left_init, w, bias, *mt, c,
                                            k, pad_left);
    int rc = chunk_fail(err, "chunk_dwconv_kernel");
    if (rc || !cache || k == 1)
        return rc;
    total = (size_t)mt->n * c;
    gr = (unsigned)((total + 255) / 256 < 65535 ? (total + 255) / 256 : 65535);
    chunk_conv_cache_kernel<<<gr, 256, 0, st>>>(cache, slot_stride, in, left_init, *mt, c, k - 1);
    return chunk_fail(err, "chunk_conv_cache_kernel");
}
