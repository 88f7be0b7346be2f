/* ops_cuda.cu — GPU kernels and launchers for the Conformer ops (ops_cuda.h): cuBLAS GEMMs (FP32
 * with TF32 off, FP16 / BF16 operands with FP32 accumulation) and fused row/elementwise kernels
 * (outputs of any ops_dtype_t where the launcher takes one).
 * CPU references: src/ops/ops_cpu.c. Tests: tests/ops/test_ops_cuda.c */
#include "ops/ops_cuda.h"

#include "core/alloc.h"
#include "gpu/gpu.h"
#include "ops/ops_cuda_impl.h"
#include "hark.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE_BYTES OPS_WORKSPACE_BYTES
#define ALIGN_BYTES 256

extern "C" size_t ops_dtype_size(ops_dtype_t t)
{
    return t == OPS_F16 || t == OPS_BF16 ? 2 : 4;
}

extern "C" size_t ops_cuda_workspace_bytes(void)
{
    return WORKSPACE_BYTES;
}

static int cuda_fail(hark_err_t *err, cudaError_t e, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static int blas_fail(hark_err_t *err, cublasStatus_t s, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, "cublas: %s: %s", what, cublasGetStatusString(s));
}

/* after every launch: a bad configuration or a sticky device error becomes a status */
static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? cuda_fail(err, e, what) : HARK_OK;
}

static unsigned grid_for(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(b < 1 ? 1 : b > (1u << 20) ? (1u << 20) : b);
}

static size_t align_up(size_t n)
{
    return (n + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
}

static void *offp(const void *p, size_t elems, ops_dtype_t t)
{
    return (char *)p + elems * ops_dtype_size(t);
}

/* ---- device helpers ------------------------------------------------------------------------ */

__device__ __forceinline__ float ldf(const float *p, size_t i)
{
    return p[i];
}
__device__ __forceinline__ float ldf(const __half *p, size_t i)
{
    return __half2float(p[i]);
}
__device__ __forceinline__ void stf(float *p, size_t i, float v)
{
    p[i] = v;
}
__device__ __forceinline__ void stf(__half *p, size_t i, float v)
{
    p[i] = __float2half_rn(v);
}
__device__ __forceinline__ float ldf(const __nv_bfloat16 *p, size_t i)
{
    return __bfloat162float(p[i]);
}
__device__ __forceinline__ void stf(__nv_bfloat16 *p, size_t i, float v)
{
    p[i] = __float2bfloat16_rn(v);
}

static int row_threads(int d)
{
    return d >= 512 ? 256 : d >= 128 ? 128 : 64;
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

extern "C" int ops_cuda_create(void *stream, ops_cuda_t **out, hark_err_t *err)
{
    *out = NULL;
    ops_cuda_t *g = (ops_cuda_t *)hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "ops_cuda: out of memory");
    g->stream = (cudaStream_t)stream;
    const char *be = getenv("HARK_HGEMM"); /* auto (the default) | mma | lt | wgmma */
    g->backend = be && !strcmp(be, "mma")     ? OPS_GEMM_MMA
                 : be && !strcmp(be, "lt")    ? OPS_GEMM_LT
                 : be && !strcmp(be, "wgmma") ? OPS_GEMM_WGMMA
                                              : OPS_GEMM_AUTO;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess)
        g->sm = major * 10 + minor;
    cudaGetLastError();
    /* the path, once for this context: every kernel choice below reads g->path, never the
     * device again */
    hark_err_t why;
    why.status = 0;
    why.msg[0] = 0;
    g->path = (int)gpu_device_path(dev, &why);
    if (g->path == GPU_PATH_NONE) {
        hark_free(g);
        return err_set(err, why.status ? why.status : HARK_ERR_UNSUPPORTED, "%s", why.msg);
    }
    if (cudaDeviceGetAttribute(&g->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        g->sms = 0;
    cudaGetLastError();
    cublasStatus_t s = cublasCreate(&g->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        hark_free(g);
        return blas_fail(err, s, "cublasCreate");
    }
    if ((s = cublasLtCreate(&g->lt)) != CUBLAS_STATUS_SUCCESS) {
        ops_cuda_destroy(g);
        return blas_fail(err, s, "cublasLtCreate");
    }
    cudaError_t e = cudaMalloc(&g->workspace, WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        ops_cuda_destroy(g);
        return cuda_fail(err, e, "cublas workspace");
    }
    /* CUBLAS_DEFAULT_MATH: FP32 GEMMs stay FP32 (TF32 only with CUBLAS_TF32_TENSOR_OP_MATH or a
     * *_FAST_TF32 compute type, neither used here); FP16 GEMMs use the tensor cores */
    if ((s = cublasSetStream(g->h, g->stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(g->h, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetWorkspace(g->h, g->workspace, WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS) {
        ops_cuda_destroy(g);
        return blas_fail(err, s, "cublas setup");
    }
    *out = g;
    return HARK_OK;
}

extern "C" void ops_cuda_destroy(ops_cuda_t *g)
{
    if (!g)
        return;
    if (g->h)
        cublasDestroy(g->h);
    ops_cuda_lt_release(g);
    if (g->lt)
        cublasLtDestroy(g->lt);
    cudaFree(g->workspace);
    hark_free(g);
}

extern "C" int ops_cuda_path(const ops_cuda_t *g)
{
    return g->path;
}

extern "C" void *ops_cuda_stream(const ops_cuda_t *g)
{
    return (void *)g->stream;
}

static cudaDataType_t cu_type(ops_dtype_t t)
{
    return t == OPS_F16 ? CUDA_R_16F : t == OPS_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

extern "C" int cuda_gemm(void *c, ops_dtype_t c_t, const void *a, const void *b, ops_dtype_t ab_t,
                         int m, int n, int k, int lda, int ldb, int ldc, int trans_b, float alpha,
                         float beta, int batch, long long sa, long long sb, long long sc,
                         ops_cuda_t *g, hark_err_t *err)
{
    if (m <= 0 || n <= 0 || batch <= 0)
        return HARK_OK;
    if (k <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "cuda_gemm: k = %d", k);
    /* row-major C (m, n) = A · op(B)  <=>  column-major Cᵀ (n, m) = op(B)ᵀ · Aᵀ */
    cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        g->h, ta, CUBLAS_OP_N, n, m, k, &alpha, b, cu_type(ab_t), ldb, sb, a, cu_type(ab_t), lda,
        sa, &beta, c, cu_type(c_t), ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char what[128];
        snprintf(what, sizeof what, "gemm %dx%dx%d batch %d (%s)", m, n, k, batch,
                 ab_t == OPS_F16    ? "fp16"
                 : ab_t == OPS_BF16 ? "bf16"
                                    : "fp32");
        return blas_fail(err, s, what);
    }
    return HARK_OK;
}

extern "C" int cuda_linear(float *y, const void *x, const void *w, ops_dtype_t xw_t, const float *b,
                           int n, int in, int out, cuda_act_t act, ops_cuda_t *g, hark_err_t *err)
{
    int rc = cuda_gemm(y, OPS_F32, x, w, xw_t, n, out, in, in, in, out, 1, 1.0f, 0.0f, 1, 0, 0, 0,
                       g, err);
    if (rc != HARK_OK || (!b && act == CUDA_ACT_NONE))
        return rc;
    return cuda_bias_act(y, OPS_F32, y, b, n, out, act, g->stream, err);
}

/* ---- elementwise --------------------------------------------------------------------------- */

template <typename TD, typename TS> __global__ void cast_kernel(TD *dst, const TS *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        stf(dst, i, ldf(src, i));
}

extern "C" int cuda_cast(void *dst, ops_dtype_t dst_t, const void *src, ops_dtype_t src_t, size_t n,
                         void *stream, hark_err_t *err)
{
    if (n == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    if (dst_t == src_t) {
        cudaError_t e =
            cudaMemcpyAsync(dst, src, n * ops_dtype_size(dst_t), cudaMemcpyDeviceToDevice, st);
        return e != cudaSuccess ? cuda_fail(err, e, "cast (copy)") : HARK_OK;
    }
    unsigned gr = grid_for(n, 256);
    if (dst_t == OPS_F16 && src_t == OPS_F32)
        cast_kernel<<<gr, 256, 0, st>>>((__half *)dst, (const float *)src, n);
    else if (dst_t == OPS_F32 && src_t == OPS_F16)
        cast_kernel<<<gr, 256, 0, st>>>((float *)dst, (const __half *)src, n);
    else if (dst_t == OPS_BF16 && src_t == OPS_F32)
        cast_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)dst, (const float *)src, n);
    else if (dst_t == OPS_F32 && src_t == OPS_BF16)
        cast_kernel<<<gr, 256, 0, st>>>((float *)dst, (const __nv_bfloat16 *)src, n);
    else if (dst_t == OPS_BF16 && src_t == OPS_F16) /* through float: exact, then one rounding */
        cast_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)dst, (const __half *)src, n);
    else if (dst_t == OPS_F16 && src_t == OPS_BF16)
        cast_kernel<<<gr, 256, 0, st>>>((__half *)dst, (const __nv_bfloat16 *)src, n);
    else
        return err_set(err, HARK_ERR_INVALID_ARG, "cast: dtypes %d -> %d", (int)src_t, (int)dst_t);
    return launched(err, "cast_kernel");
}

template <typename TY>
__global__ void bias_act_kernel(TY *y, const float *x, const float *b, size_t n, int c, int act)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i] + (b ? b[i % (size_t)c] : 0.0f);
        stf(y, i, act_f(v, act));
    }
}

extern "C" int cuda_bias_act(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c,
                             cuda_act_t act, void *stream, hark_err_t *err)
{
    size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(c > 0 ? c : 0);
    if (total == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned gr = grid_for(total, 256);
    if (y_t == OPS_F16)
        bias_act_kernel<<<gr, 256, 0, st>>>((__half *)y, x, b, total, c, (int)act);
    else if (y_t == OPS_BF16)
        bias_act_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)y, x, b, total, c, (int)act);
    else
        bias_act_kernel<<<gr, 256, 0, st>>>((float *)y, x, b, total, c, (int)act);
    return launched(err, "bias_act_kernel");
}

/* ---- residual + layer norm ----------------------------------------------------------------- */

template <typename TY>
__global__ void residual_layer_norm_kernel(float *x_out, TY *y_out, const float *res,
                                           const float *a, const float *bias, float alpha,
                                           const float *pe, int pe_rows, const float *g,
                                           const float *b, int ln, int post, int d, float eps)
{
    extern __shared__ float sm[];
    float *row = sm + 32; /* (d) */
    size_t r = blockIdx.x, off = r * (size_t)d;
    const float *per = pe ? pe + (size_t)(r % (size_t)pe_rows) * d : NULL;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float s = res ? res[off + i] : 0.0f;
        if (a)
            s += alpha * (a[off + i] + (bias ? bias[i] : 0.0f));
        if (per)
            s += per[i];
        row[i] = s;
        sum += s;
    }
    if (!ln) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            if (x_out)
                x_out[off + i] = row[i];
            if (y_out)
                stf(y_out, off + i, row[i]);
        }
        return;
    }
    float mean = ops_block_sum(sum, sm) / (float)d, sq = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float c = row[i] - mean;
        sq += c * c;
    }
    float rstd = 1.0f / sqrtf(ops_block_sum(sq, sm) / (float)d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float s = row[i];
        float z = (s - mean) * rstd * (g ? g[i] : 1.0f) + (b ? b[i] : 0.0f);
        if (x_out)
            x_out[off + i] = post ? z : s;
        if (y_out)
            stf(y_out, off + i, z);
    }
}

extern "C" int cuda_residual_layer_norm(float *x_out, void *y_out, ops_dtype_t y_t,
                                        const float *res, const float *a, const float *bias,
                                        float alpha, const float *pe, int pe_rows, const float *g,
                                        const float *b, int ln, int post, int n, int d, float eps,
                                        void *stream, hark_err_t *err)
{
    if (n <= 0 || d <= 0)
        return HARK_OK;
    if (pe && pe_rows <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "residual_layer_norm: pe_rows %d", pe_rows);
    cudaStream_t st = (cudaStream_t)stream;
    int th = row_threads(d);
    size_t smem = (32 + (size_t)d) * sizeof(float);
    if (smem > 48 * 1024)
        return err_set(err, HARK_ERR_INVALID_ARG, "residual_layer_norm: d %d too large", d);
    if (y_t == OPS_F16)
        residual_layer_norm_kernel<<<(unsigned)n, th, smem, st>>>(
            x_out, (__half *)y_out, res, a, bias, alpha, pe, pe_rows, g, b, ln, post, d, eps);
    else if (y_t == OPS_BF16)
        residual_layer_norm_kernel<<<(unsigned)n, th, smem, st>>>(x_out, (__nv_bfloat16 *)y_out,
                                                                  res, a, bias, alpha, pe, pe_rows,
                                                                  g, b, ln, post, d, eps);
    else
        residual_layer_norm_kernel<<<(unsigned)n, th, smem, st>>>(
            x_out, (float *)y_out, res, a, bias, alpha, pe, pe_rows, g, b, ln, post, d, eps);
    return launched(err, "residual_layer_norm_kernel");
}

extern "C" int cuda_layer_norm(void *y, ops_dtype_t y_t, const float *x, const float *g,
                               const float *b, int n, int d, float eps, void *stream,
                               hark_err_t *err)
{
    return cuda_residual_layer_norm(NULL, y, y_t, x, NULL, NULL, 0.0f, NULL, 0, g, b, 1, 0, n, d,
                                    eps, stream, err);
}

__global__ void batch_norm_kernel(float *y, const float *x, const float *g, const float *b,
                                  const float *rm, const float *rv, size_t n, int c, float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int ch = (int)(i % (size_t)c);
        float inv = 1.0f / sqrtf(rv[ch] + eps);
        y[i] = (x[i] - rm[ch]) * inv * (g ? g[ch] : 1.0f) + (b ? b[ch] : 0.0f);
    }
}

extern "C" int cuda_batch_norm(float *y, const float *x, const float *g, const float *b,
                               const float *rm, const float *rv, int n, int c, float eps,
                               void *stream, hark_err_t *err)
{
    size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(c > 0 ? c : 0);
    if (total == 0)
        return HARK_OK;
    batch_norm_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(y, x, g, b, rm, rv,
                                                                              total, c, eps);
    return launched(err, "batch_norm_kernel");
}

template <typename TY>
__global__ void glu_kernel(TY *y, const float *x, const float *b, size_t n, int c)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)c;
        int j = (int)(i % (size_t)c);
        const float *xr = x + r * 2 * (size_t)c;
        float u = xr[j] + (b ? b[j] : 0.0f), v = xr[c + j] + (b ? b[c + j] : 0.0f);
        stf(y, i, u / (1.0f + expf(-v)));
    }
}

extern "C" int cuda_glu(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c,
                        void *stream, hark_err_t *err)
{
    size_t total = (size_t)(n > 0 ? n : 0) * (size_t)(c > 0 ? c : 0);
    if (total == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned gr = grid_for(total, 256);
    if (y_t == OPS_F16)
        glu_kernel<<<gr, 256, 0, st>>>((__half *)y, x, b, total, c);
    else if (y_t == OPS_BF16)
        glu_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)y, x, b, total, c);
    else
        glu_kernel<<<gr, 256, 0, st>>>((float *)y, x, b, total, c);
    return launched(err, "glu_kernel");
}

/* ---- depthwise conv + norm + activation ---------------------------------------------------- */

/* one block per (t, b) row; threads over channels */
template <typename TO>
__global__ void depthwise_conv_norm_act_kernel(TO *out, const float *in, const float *left,
                                               const float *w, const float *bias, const int *lens,
                                               int t_len, int c, int k, int pad_left, int norm,
                                               const float *g, const float *beta, const float *rm,
                                               const float *rv, float eps, int act)
{
    extern __shared__ float sm[];
    float *row = sm + 32; /* (c) */
    int t = blockIdx.x, b = blockIdx.y;
    int valid = lens ? min(lens[b], t_len) : t_len;
    const float *inb = in + (size_t)b * t_len * c;
    size_t o = ((size_t)b * t_len + t) * (size_t)c;
    float sum = 0.0f;
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        float z = bias ? bias[ch] : 0.0f;
        for (int j = 0; j < k; j++) {
            int s = t + j - pad_left;
            float v;
            if (s >= 0 && s < valid)
                v = inb[(size_t)s * c + ch];
            else if (s < 0 && left)
                v = left[(size_t)(pad_left + s) * c + ch];
            else
                continue;
            z += w[(size_t)ch * k + j] * v;
        }
        if (norm == CUDA_NORM_BATCH)
            z = (z - rm[ch]) * (1.0f / sqrtf(rv[ch] + eps)) * (g ? g[ch] : 1.0f) +
                (beta ? beta[ch] : 0.0f);
        if (norm == CUDA_NORM_LAYER) {
            row[ch] = z;
            sum += z;
        } else {
            stf(out, o + ch, act_f(z, act));
        }
    }
    if (norm != CUDA_NORM_LAYER)
        return;
    float mean = ops_block_sum(sum, sm) / (float)c, sq = 0.0f;
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        float e = row[ch] - mean;
        sq += e * e;
    }
    float rstd = 1.0f / sqrtf(ops_block_sum(sq, sm) / (float)c + eps);
    for (int ch = threadIdx.x; ch < c; ch += blockDim.x) {
        float z = (row[ch] - mean) * rstd * (g ? g[ch] : 1.0f) + (beta ? beta[ch] : 0.0f);
        stf(out, o + ch, act_f(z, act));
    }
}

extern "C" int cuda_depthwise_conv_norm_act(void *out, ops_dtype_t out_t, const float *in,
                                            const float *left, const float *w, const float *bias,
                                            const int *lens, int batch, int t_len, int c, int k,
                                            int pad_left, cuda_norm_t norm, const float *g,
                                            const float *beta, const float *rm, const float *rv,
                                            float eps, cuda_act_t act, void *stream,
                                            hark_err_t *err)
{
    if (batch <= 0 || t_len <= 0 || c <= 0)
        return HARK_OK;
    if (k <= 0 || pad_left < 0 || pad_left >= k || (norm == CUDA_NORM_BATCH && (!rm || !rv)))
        return err_set(err, HARK_ERR_INVALID_ARG, "depthwise_conv: kernel %d, pad_left %d, norm %d",
                       k, pad_left, (int)norm);
    size_t smem = (32 + (size_t)(norm == CUDA_NORM_LAYER ? c : 0)) * sizeof(float);
    if (smem > 48 * 1024)
        return err_set(err, HARK_ERR_INVALID_ARG, "depthwise_conv: %d channels too many", c);
    dim3 grid((unsigned)t_len, (unsigned)batch);
    int th = row_threads(c);
    cudaStream_t st = (cudaStream_t)stream;
    if (out_t == OPS_F16)
        depthwise_conv_norm_act_kernel<<<grid, th, smem, st>>>(
            (__half *)out, in, left, w, bias, lens, t_len, c, k, pad_left, (int)norm, g, beta, rm,
            rv, eps, (int)act);
    else if (out_t == OPS_BF16)
        depthwise_conv_norm_act_kernel<<<grid, th, smem, st>>>(
            (__nv_bfloat16 *)out, in, left, w, bias, lens, t_len, c, k, pad_left, (int)norm, g,
            beta, rm, rv, eps, (int)act);
    else
        depthwise_conv_norm_act_kernel<<<grid, th, smem, st>>>(
            (float *)out, in, left, w, bias, lens, t_len, c, k, pad_left, (int)norm, g, beta, rm,
            rv, eps, (int)act);
    return launched(err, "depthwise_conv_norm_act_kernel");
}

/* ---- softmax ------------------------------------------------------------------------------- */

/* one warp per row */
template <typename TY>
__global__ void softmax_masked_kernel(TY *y, const float *x, const int *lens, int heads, int t,
                                      int m, int chunk, int left, long long rows)
{
    long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    int lane = threadIdx.x & 31;
    int b = (int)(r / ((long long)heads * t)), i = (int)(r % t);
    int hi = lens ? lens[b] : m, lo = 0;
    hi = hi < m ? hi : m;
    if (chunk > 0) {
        int ci = i / chunk, e = (ci + 1) * chunk;
        hi = e < hi ? e : hi;
        if (left >= 0)
            lo = (ci - left) * chunk > 0 ? (ci - left) * chunk : 0;
    }
    const float *xr = x + r * m;
    TY *yr = y + r * m;
    if (lo >= hi) {
        for (int j = lane; j < m; j += 32)
            stf(yr, j, 0.0f);
        return;
    }
    float mx = -INFINITY;
    for (int j = lo + lane; j < hi; j += 32)
        mx = fmaxf(mx, xr[j]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float s = 0.0f;
    for (int j = lo + lane; j < hi; j += 32)
        s += expf(xr[j] - mx);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    float inv = 1.0f / s;
    for (int j = lane; j < m; j += 32)
        stf(yr, j, j >= lo && j < hi ? expf(xr[j] - mx) * inv : 0.0f);
}

extern "C" int cuda_softmax_masked(void *y, ops_dtype_t y_t, const float *x, const int *lens,
                                   int batch, int heads, int t, int m, int chunk, int left,
                                   void *stream, hark_err_t *err)
{
    long long rows = (long long)batch * heads * t;
    if (rows <= 0 || m <= 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned gr = (unsigned)((rows + 7) / 8);
    if (y_t == OPS_F16)
        softmax_masked_kernel<<<gr, 256, 0, st>>>((__half *)y, x, lens, heads, t, m, chunk, left,
                                                  rows);
    else if (y_t == OPS_BF16)
        softmax_masked_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)y, x, lens, heads, t, m, chunk,
                                                  left, rows);
    else
        softmax_masked_kernel<<<gr, 256, 0, st>>>((float *)y, x, lens, heads, t, m, chunk, left,
                                                  rows);
    return launched(err, "softmax_masked_kernel");
}

/* one block per row */
__global__ void log_softmax_kernel(float *y, const float *x, const float *b, const int *lens,
                                   int t_rows, int m)
{
    __shared__ float sh[32];
    size_t r = blockIdx.x;
    const float *xr = x + r * m;
    float *yr = y + r * m;
    if (lens && (int)(r % (size_t)t_rows) >= lens[r / (size_t)t_rows]) {
        for (int j = threadIdx.x; j < m; j += blockDim.x)
            yr[j] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < m; j += blockDim.x)
        mx = fmaxf(mx, xr[j] + (b ? b[j] : 0.0f));
    mx = ops_block_max(mx, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < m; j += blockDim.x)
        s += expf((xr[j] + (b ? b[j] : 0.0f)) - mx);
    float lse = logf(ops_block_sum(s, sh));
    for (int j = threadIdx.x; j < m; j += blockDim.x)
        yr[j] = ((xr[j] + (b ? b[j] : 0.0f)) - mx) - lse;
}

extern "C" int cuda_log_softmax(float *y, const float *x, const float *b, const int *lens,
                                int t_rows, int n, int m, void *stream, hark_err_t *err)
{
    if (n <= 0 || m <= 0)
        return HARK_OK;
    if (lens && t_rows <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "log_softmax: t_rows %d", t_rows);
    log_softmax_kernel<<<(unsigned)n, 256, 0, (cudaStream_t)stream>>>(y, x, b, lens, t_rows, m);
    return launched(err, "log_softmax_kernel");
}

/* ---- padding, CMVN, positions, lengths ----------------------------------------------------- */

__global__ void zero_pad_rows_kernel(float *buf, const int *lens, int t, int cols, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / (size_t)cols;
        if ((int)(row % (size_t)t) >= lens[row / (size_t)t])
            buf[i] = 0.0f;
    }
}

extern "C" int cuda_zero_pad_rows(float *buf, const int *lens, int batch, int t, int cols,
                                  void *stream, hark_err_t *err)
{
    size_t n = (size_t)(batch > 0 ? batch : 0) * (size_t)(t > 0 ? t : 0) * (cols > 0 ? cols : 0);
    if (n == 0)
        return HARK_OK;
    zero_pad_rows_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(buf, lens, t, cols, n);
    return launched(err, "zero_pad_rows_kernel");
}

template <typename TO>
__global__ void cmvn_kernel(TO *out, const float *x, const float *mean, const float *istd,
                            const int *lens, int t, int f, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / (size_t)f;
        int col = (int)(i % (size_t)f);
        float v = 0.0f;
        if (!lens || (int)(row % (size_t)t) < lens[row / (size_t)t])
            v = mean ? (x[i] - mean[col]) * istd[col] : x[i];
        stf(out, i, v);
    }
}

extern "C" int cuda_cmvn(void *out, ops_dtype_t out_t, const float *x, const float *mean,
                         const float *istd, const int *lens, int batch, int t, int f, void *stream,
                         hark_err_t *err)
{
    size_t n = (size_t)(batch > 0 ? batch : 0) * (size_t)(t > 0 ? t : 0) * (f > 0 ? f : 0);
    if (n == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned gr = grid_for(n, 256);
    if (out_t == OPS_F16)
        cmvn_kernel<<<gr, 256, 0, st>>>((__half *)out, x, mean, istd, lens, t, f, n);
    else if (out_t == OPS_BF16)
        cmvn_kernel<<<gr, 256, 0, st>>>((__nv_bfloat16 *)out, x, mean, istd, lens, t, f, n);
    else
        cmvn_kernel<<<gr, 256, 0, st>>>((float *)out, x, mean, istd, lens, t, f, n);
    return launched(err, "cmvn_kernel");
}

/* pos_enc_table_ref's float steps; the div term through a double exp rounded once to float, which
 * is what glibc's correctly rounded expf gives */
__global__ void pos_enc_kernel(float *pe, int n, int d, float step)
{
    int half = (d + 1) / 2;
    size_t total = (size_t)n * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(idx / (size_t)half), i = (int)(idx % (size_t)half);
        float div = (float)exp((double)((float)(2 * i) * step));
        float arg = (float)p * div;
        pe[(size_t)p * d + 2 * i] = sinf(arg);
        if (2 * i + 1 < d)
            pe[(size_t)p * d + 2 * i + 1] = cosf(arg);
    }
}

extern "C" int cuda_pos_enc(float *pe, int n, int d, void *stream, hark_err_t *err)
{
    if (n <= 0 || d <= 0)
        return HARK_OK;
    float step = (float)(-(log(10000.0) / d));
    pos_enc_kernel<<<grid_for((size_t)n * ((d + 1) / 2), 256), 256, 0, (cudaStream_t)stream>>>(
        pe, n, d, step);
    return launched(err, "pos_enc_kernel");
}

struct lens_arg {
    int v[CUDA_MAX_LENS];
};

__global__ void set_lens_kernel(int *d_lens, lens_arg a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        d_lens[i] = a.v[i];
}

extern "C" int cuda_set_lens(int *d_lens, const int *host_lens, int n, void *stream,
                             hark_err_t *err)
{
    if (n <= 0)
        return HARK_OK;
    if (n > CUDA_MAX_LENS)
        return err_set(err, HARK_ERR_TOO_LARGE, "cuda_set_lens: %d lengths (at most %d)", n,
                       CUDA_MAX_LENS);
    lens_arg a;
    for (int i = 0; i < n; i++)
        a.v[i] = host_lens[i];
    set_lens_kernel<<<(unsigned)((n + 127) / 128), 128, 0, (cudaStream_t)stream>>>(d_lens, a, n);
    return launched(err, "set_lens_kernel");
}

/* ---- conv2d -------------------------------------------------------------------------------- */

/* one thread per output element (R, co, wo), R = b·h_out + ho */
template <typename T>
__global__ void conv2d_direct_kernel(T *out, const T *in, const float *w, const float *b, int cin,
                                     int h, int w_in, int cout, int kh, int kw, int stride,
                                     int h_out, int w_out, int act, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int wo = (int)(e % (size_t)w_out);
        size_t rc = e / (size_t)w_out;
        int co = (int)(rc % (size_t)cout);
        size_t R = rc / (size_t)cout;
        int bb = (int)(R / (size_t)h_out), ho = (int)(R % (size_t)h_out);
        float acc = 0.0f;
        for (int ci = 0; ci < cin; ci++)
            for (int i = 0; i < kh; i++) {
                const T *src = in + (((size_t)bb * h + (size_t)ho * stride + i) * cin + ci) * w_in +
                               (size_t)wo * stride;
                const float *wr = w + (((size_t)co * cin + ci) * kh + i) * kw;
                for (int j = 0; j < kw; j++)
                    acc += wr[j] * ldf(src, j);
            }
        acc += b ? b[co] : 0.0f;
        stf(out, e, act_f(acc, act));
    }
}

/* col (rows·w_out, K) for output rows [r0, r0 + rows): column kk = (ci·kh + i)·kw + j */
template <typename T>
__global__ void im2col_kernel(T *col, const T *in, int r0, int cin, int h, int w_in, int kh, int kw,
                              int stride, int h_out, int w_out, size_t n)
{
    int K = cin * kh * kw;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int kk = (int)(e % (size_t)K);
        size_t m = e / (size_t)K;
        int wo = (int)(m % (size_t)w_out);
        size_t R = (size_t)r0 + m / (size_t)w_out;
        int bb = (int)(R / (size_t)h_out), ho = (int)(R % (size_t)h_out);
        int j = kk % kw, i = (kk / kw) % kh, ci = kk / (kw * kh);
        col[e] = in[(((size_t)bb * h + (size_t)ho * stride + i) * cin + ci) * w_in +
                    (size_t)wo * stride + j];
    }
}

/* out rows [r0, r0 + rows) (cout, w_out) from tmp (rows·w_out, cout) */
template <typename T>
__global__ void conv_bias_act_kernel(T *out, const float *tmp, const float *b, int cout, int w_out,
                                     int act, size_t n)
{
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int wo = (int)(e % (size_t)w_out);
        size_t rc = e / (size_t)w_out;
        int co = (int)(rc % (size_t)cout);
        size_t rr = rc / (size_t)cout;
        float v = tmp[(rr * w_out + wo) * cout + co] + (b ? b[co] : 0.0f);
        stf(out, e, act_f(v, act));
    }
}

static size_t conv2d_row_bytes(int cin, int cout, int kh, int kw, int w_out, ops_dtype_t io_t)
{
    return (size_t)w_out * cin * kh * kw * ops_dtype_size(io_t) + (size_t)w_out * cout * 4;
}

extern "C" size_t cuda_conv2d_scratch_bytes(int rows, int cin, int cout, int kh, int kw, int w_out,
                                            ops_dtype_t io_t)
{
    if (cin * kh * kw <= 32)
        return 0;
    return (size_t)rows * conv2d_row_bytes(cin, cout, kh, kw, w_out, io_t) + 2 * ALIGN_BYTES;
}

template <typename T>
static int conv2d_t(T *out, void *scratch, size_t scratch_bytes, const T *in, const float *w32,
                    const void *w_io, const float *b, ops_dtype_t io_t, int batch, int cin, int h,
                    int w_in, int cout, int kh, int kw, int stride, int act, ops_cuda_t *g,
                    hark_err_t *err)
{
    int h_out = h < kh ? 0 : (h - kh) / stride + 1,
        w_out = w_in < kw ? 0 : (w_in - kw) / stride + 1;
    if (batch <= 0 || h_out <= 0 || w_out <= 0)
        return HARK_OK;
    size_t rows = (size_t)batch * h_out;
    int K = cin * kh * kw;
    if (K <= 32) {
        size_t n = rows * cout * w_out;
        conv2d_direct_kernel<<<grid_for(n, 256), 256, 0, g->stream>>>(
            out, in, w32, b, cin, h, w_in, cout, kh, kw, stride, h_out, w_out, act, n);
        return launched(err, "conv2d_direct_kernel");
    }
    size_t per = conv2d_row_bytes(cin, cout, kh, kw, w_out, io_t);
    size_t avail = scratch_bytes > 2 * ALIGN_BYTES ? scratch_bytes - 2 * ALIGN_BYTES : 0;
    size_t blk = avail / per;
    if (blk < 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv2d: scratch of %zu bytes holds no output row (%zu needed)",
                       scratch_bytes, per + 2 * ALIGN_BYTES);
    if (blk > rows)
        blk = rows;
    T *col = (T *)scratch;
    float *tmp = (float *)((char *)scratch + align_up(blk * w_out * K * sizeof(T)));
    for (size_t r0 = 0; r0 < rows; r0 += blk) {
        size_t nb = rows - r0 < blk ? rows - r0 : blk;
        size_t ncol = nb * w_out * K;
        im2col_kernel<<<grid_for(ncol, 256), 256, 0, g->stream>>>(
            col, in, (int)r0, cin, h, w_in, kh, kw, stride, h_out, w_out, ncol);
        int rc = launched(err, "im2col_kernel");
        if (rc == HARK_OK)
            rc = cuda_gemm(tmp, OPS_F32, col, w_io, io_t, (int)(nb * w_out), cout, K, K, K, cout, 1,
                           1.0f, 0.0f, 1, 0, 0, 0, g, err);
        if (rc != HARK_OK)
            return rc;
        size_t n = nb * cout * w_out;
        conv_bias_act_kernel<<<grid_for(n, 256), 256, 0, g->stream>>>(out + r0 * cout * w_out, tmp,
                                                                      b, cout, w_out, act, n);
        if ((rc = launched(err, "conv_bias_act_kernel")) != HARK_OK)
            return rc;
    }
    return HARK_OK;
}

extern "C" int cuda_conv2d(void *out, void *scratch, size_t scratch_bytes, const void *in,
                           const float *w32, const void *w_io, const float *b, ops_dtype_t io_t,
                           int batch, int cin, int h, int w_in, int cout, int kh, int kw,
                           int stride, int act, ops_cuda_t *g, hark_err_t *err)
{
    if (stride <= 0 || kh <= 0 || kw <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "conv2d: kernel %dx%d stride %d", kh, kw, stride);
    if (io_t == OPS_F16)
        return conv2d_t((__half *)out, scratch, scratch_bytes, (const __half *)in, w32, w_io, b,
                        io_t, batch, cin, h, w_in, cout, kh, kw, stride, act, g, err);
    if (io_t == OPS_BF16)
        return conv2d_t((__nv_bfloat16 *)out, scratch, scratch_bytes, (const __nv_bfloat16 *)in,
                        w32, w_io, b, io_t, batch, cin, h, w_in, cout, kh, kw, stride, act, g, err);
    return conv2d_t((float *)out, scratch, scratch_bytes, (const float *)in, w32, w_io, b, io_t,
                    batch, cin, h, w_in, cout, kh, kw, stride, act, g, err);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* Q2, K2 (batch, H, t, w) with w = dk (plain) or 2·dk (rel: [q + bu | q + bv], [k | p]);
 * V2 (batch, t, D) = v + bv */
template <typename T>
__global__ void attention_pack_kernel(T *q2, T *k2, T *v2, const float *q, const float *k,
                                      const float *v, int ld, const float *bq, const float *bk,
                                      const float *bv, const float *p, const float *bu,
                                      const float *bvp, int t, int heads, int dk, size_t n)
{
    int d = heads * dk, rel = p != NULL, w = rel ? 2 * dk : dk;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        int col = (int)(e % (size_t)d);
        size_t row = e / (size_t)d; /* b·t + tt */
        int tt = (int)(row % (size_t)t);
        size_t bb = row / (size_t)t;
        int hh = col / dk, i = col % dk;
        size_t src = row * (size_t)ld + col;
        float qv = q[src] + (bq ? bq[col] : 0.0f);
        float kv = k[src] + (bk ? bk[col] : 0.0f);
        size_t dst = ((bb * heads + hh) * (size_t)t + tt) * w + i;
        stf(q2, dst, qv + (bu ? bu[col] : 0.0f));
        stf(k2, dst, kv);
        if (rel) {
            stf(q2, dst + dk, qv + (bvp ? bvp[col] : 0.0f));
            stf(k2, dst + dk, p[(size_t)tt * d + col]);
        }
        stf(v2, e, v[src] + (bv ? bv[col] : 0.0f));
    }
}

typedef struct {
    size_t q2, k2, v2, s, p, total;
} att_layout_t;

static att_layout_t att_layout(int batch, int t, int heads, int dk, int rel, ops_dtype_t dt)
{
    att_layout_t L;
    size_t es = ops_dtype_size(dt), w = (size_t)(rel ? 2 * dk : dk);
    size_t bht = (size_t)batch * heads * t, tt = (size_t)t;
    L.q2 = 0;
    L.k2 = L.q2 + align_up(bht * w * es);
    L.v2 = L.k2 + align_up(bht * w * es);
    L.s = L.v2 + align_up((size_t)batch * t * heads * dk * es);
    L.p = L.s + align_up(bht * tt * 4);
    L.total = L.p + (dt != OPS_F32 ? align_up(bht * tt * es) : 0);
    if (dt == OPS_F32)
        L.p = L.s;
    return L;
}

extern "C" size_t cuda_attention_scratch_bytes(int batch, int t, int heads, int dk, int rel,
                                               ops_dtype_t dt)
{
    return att_layout(batch, t, heads, dk, rel, dt).total;
}

extern "C" int cuda_attention(void *ctx, ops_dtype_t dt, void *scratch, const float *q,
                              const float *k, const float *v, int ld, const float *bq,
                              const float *bk, const float *bv, const float *p, const float *bu,
                              const float *bvp, const int *lens, int chunk, int left, int batch,
                              int t, int heads, int dk, float scale, ops_cuda_t *g, hark_err_t *err)
{
    if (batch <= 0 || t <= 0)
        return HARK_OK;
    int rel = p != NULL, d = heads * dk, w = rel ? 2 * dk : dk;
    att_layout_t L = att_layout(batch, t, heads, dk, rel, dt);
    char *base = (char *)scratch;
    void *q2 = base + L.q2, *k2 = base + L.k2, *v2 = base + L.v2, *pr = base + L.p;
    float *s = (float *)(base + L.s);
    size_t n = (size_t)batch * t * d;
    if (dt == OPS_F16)
        attention_pack_kernel<<<grid_for(n, 256), 256, 0, g->stream>>>(
            (__half *)q2, (__half *)k2, (__half *)v2, q, k, v, ld, bq, bk, bv, p, bu, bvp, t, heads,
            dk, n);
    else if (dt == OPS_BF16)
        attention_pack_kernel<<<grid_for(n, 256), 256, 0, g->stream>>>(
            (__nv_bfloat16 *)q2, (__nv_bfloat16 *)k2, (__nv_bfloat16 *)v2, q, k, v, ld, bq, bk, bv,
            p, bu, bvp, t, heads, dk, n);
    else
        attention_pack_kernel<<<grid_for(n, 256), 256, 0, g->stream>>>(
            (float *)q2, (float *)k2, (float *)v2, q, k, v, ld, bq, bk, bv, p, bu, bvp, t, heads,
            dk, n);
    int rc = launched(err, "attention_pack_kernel");
    long long tw = (long long)t * w, tt = (long long)t * t;
    if (rc == HARK_OK)
        rc = cuda_gemm(s, OPS_F32, q2, k2, dt, t, t, w, w, w, t, 1, scale, 0.0f, batch * heads, tw,
                       tw, tt, g, err);
    if (rc == HARK_OK)
        rc = cuda_softmax_masked(pr, dt, s, lens, batch, heads, t, t, chunk, left, g->stream, err);
    for (int h = 0; h < heads && rc == HARK_OK; h++)
        rc = cuda_gemm(offp(ctx, (size_t)h * dk, dt), dt, offp(pr, (size_t)h * tt, dt),
                       offp(v2, (size_t)h * dk, dt), dt, t, dk, t, t, d, d, 0, 1.0f, 0.0f, batch,
                       (long long)heads * tt, (long long)t * d, (long long)t * d, g, err);
    return rc;
}

/* ---- the attention decoder's row ops ------------------------------------------------------- */

__global__ void embed_pos_kernel(float *x, const float *emb, const float *pe, const int *tok,
                                 const int *pos, int d, float xscale, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)d;
        int c = (int)(i % (size_t)d);
        x[i] = emb[(size_t)tok[r] * d + c] * xscale + pe[(size_t)pos[r] * d + c];
    }
}

extern "C" int cuda_embed_pos(float *x, const float *emb, const float *pe, const int *tok,
                              const int *pos, int rows, int d, float xscale, void *stream,
                              hark_err_t *err)
{
    size_t n = (size_t)(rows > 0 ? rows : 0) * (size_t)(d > 0 ? d : 0);
    if (n == 0)
        return HARK_OK;
    embed_pos_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(x, emb, pe, tok, pos, d,
                                                                         xscale, n);
    return launched(err, "embed_pos_kernel");
}

/* A block per (tile of SA_TQ query rows, head); 4 warps, SA_TQ / 4 rows each. The tile's keys are
 * the union of its rows' runs (usually one run: a candidate's rows, or one utterance's frames),
 * staged SA_KC at a time in shared memory so that all the tile's rows read them from there; lane
 * j scores key j of the chunk for a row, the warp takes the chunk's max and sum, and each lane
 * accumulates its dims (lane, lane + 32, ...) of the value rows, an online softmax across chunks.
 */
#define SA_TQ 16
#define SA_KC 32
#define SA_THREADS 128

static size_t seg_smem_bytes(int dk)
{
    return sizeof(float) * ((size_t)SA_TQ * dk + (size_t)SA_KC * (dk + 1) + (size_t)SA_KC * dk);
}

__global__ void __launch_bounds__(SA_THREADS)
    segment_attention_kernel(float *ctx, const float *q, int ldq, const float *k, const float *v,
                             int ldkv, const int *kbeg, const int *klen, int rows, int heads,
                             int dk, float scale)
{
    extern __shared__ float sa_smem[];
    float *qs = sa_smem;               /* (SA_TQ, dk), pre-scaled */
    float *ks = qs + SA_TQ * dk;       /* (SA_KC, dk + 1): padded, lanes read rows */
    float *vs = ks + SA_KC * (dk + 1); /* (SA_KC, dk) */
    __shared__ int rb[SA_TQ], rl[SA_TQ];
    int r0 = blockIdx.x * SA_TQ, h = blockIdx.y, tid = threadIdx.x;
    int warp = tid >> 5, lane = tid & 31;
    if (tid < SA_TQ) {
        int r = r0 + tid;
        rb[tid] = r < rows ? kbeg[r] : 0;
        rl[tid] = r < rows ? klen[r] : 0;
    }
    for (int i = tid; i < SA_TQ * dk; i += SA_THREADS) {
        int r = r0 + i / dk, c = i % dk;
        qs[i] = r < rows ? q[(size_t)r * ldq + (size_t)h * dk + c] * scale : 0.0f;
    }
    __syncthreads();
    int lo = INT_MAX, hi = INT_MIN;
    for (int i = 0; i < SA_TQ; i++)
        if (rl[i] > 0) {
            lo = min(lo, rb[i]);
            hi = max(hi, rb[i] + rl[i]);
        }
    constexpr int RPW = SA_TQ / (SA_THREADS / 32); /* rows per warp */
    float m[RPW], l[RPW], acc[RPW][4];
#pragma unroll
    for (int a = 0; a < RPW; a++) {
        m[a] = -INFINITY, l[a] = 0.0f;
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[a][e] = 0.0f;
    }
    for (int k0 = lo; k0 < hi; k0 += SA_KC) {
        int kn = min(SA_KC, hi - k0);
        __syncthreads(); /* the previous chunk is consumed */
        for (int i = tid; i < SA_KC * dk; i += SA_THREADS) {
            int j = i / dk, c = i % dk;
            bool in = j < kn;
            size_t src = (size_t)(k0 + j) * ldkv + (size_t)h * dk + c;
            ks[j * (dk + 1) + c] = in ? k[src] : 0.0f;
            vs[j * dk + c] = in ? v[src] : 0.0f;
        }
        __syncthreads();
        /* lane j scores key j against the warp's RPW rows at once (each key element read once) */
        int key = k0 + lane;
        float t[RPW], p[RPW];
        bool ok[RPW];
#pragma unroll
        for (int a = 0; a < RPW; a++) {
            int i = warp * RPW + a;
            ok[a] = lane < kn && key >= rb[i] && key < rb[i] + rl[i];
            t[a] = 0.0f;
        }
        const float *kr = ks + lane * (dk + 1), *q0 = qs + warp * RPW * dk;
        for (int c = 0; c < dk; c++) {
            float kv = kr[c];
#pragma unroll
            for (int a = 0; a < RPW; a++)
                t[a] += q0[a * dk + c] * kv;
        }
#pragma unroll
        for (int a = 0; a < RPW; a++) {
            float sc = ok[a] ? t[a] : -INFINITY, cm = sc;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
            p[a] = 0.0f;
            if (cm == -INFINITY) /* no key of this chunk for the row: its state stays */
                continue;
            float mn = fmaxf(m[a], cm), corr = expf(m[a] - mn);
            p[a] = ok[a] ? expf(sc - mn) : 0.0f;
            float ps = p[a];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                ps += __shfl_xor_sync(0xffffffffu, ps, o);
            l[a] = l[a] * corr + ps;
            m[a] = mn;
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[a][e] *= corr;
        }
        /* the value rows, each element read once for the RPW rows; a key no row takes (outside
         * every run: maybe padding, NaN) is skipped */
        for (int j = 0; j < kn; j++) {
            float pj[RPW];
            bool any = false;
#pragma unroll
            for (int a = 0; a < RPW; a++) {
                pj[a] = __shfl_sync(0xffffffffu, p[a], j);
                any |= pj[a] != 0.0f;
            }
            if (!any)
                continue;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = lane + 32 * e;
                if (c < dk) {
                    float vv = vs[j * dk + c];
#pragma unroll
                    for (int a = 0; a < RPW; a++)
                        if (pj[a] != 0.0f)
                            acc[a][e] += pj[a] * vv;
                }
            }
        }
    }
#pragma unroll
    for (int a = 0; a < RPW; a++) {
        int r = r0 + warp * RPW + a;
        if (r >= rows)
            continue;
        float inv = l[a] > 0.0f ? 1.0f / l[a] : 0.0f;
        float *cr = ctx + (size_t)r * heads * dk + (size_t)h * dk;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int c = lane + 32 * e;
            if (c < dk)
                cr[c] = acc[a][e] * inv;
        }
    }
}

extern "C" int cuda_segment_attention(float *ctx, const float *q, int ldq, const float *k,
                                      const float *v, int ldkv, const int *kbeg, const int *klen,
                                      int rows, int heads, int dk, float scale, void *stream,
                                      hark_err_t *err)
{
    if (rows <= 0)
        return HARK_OK;
    if (heads <= 0 || heads > 65535 || dk <= 0 || dk > 128 || ldq < heads * dk || ldkv < heads * dk)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "segment_attention: heads %d, dk %d (<= 128), ldq %d, ldkv %d", heads, dk,
                       ldq, ldkv);
    dim3 grid((unsigned)((rows + SA_TQ - 1) / SA_TQ), (unsigned)heads);
    segment_attention_kernel<<<grid, SA_THREADS, seg_smem_bytes(dk), (cudaStream_t)stream>>>(
        ctx, q, ldq, k, v, ldkv, kbeg, klen, rows, heads, dk, scale);
    return launched(err, "segment_attention_kernel");
}

__global__ void lse_gather_kernel(float *out, const float *logits, int ld, const float *bias,
                                  const int *target, int v)
{
    __shared__ float sh[32];
    const float *xr = logits + (size_t)blockIdx.x * ld;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < v; j += blockDim.x)
        mx = fmaxf(mx, xr[j] + (bias ? bias[j] : 0.0f));
    mx = ops_block_max(mx, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < v; j += blockDim.x)
        s += expf((xr[j] + (bias ? bias[j] : 0.0f)) - mx);
    float lse = logf(ops_block_sum(s, sh));
    if (threadIdx.x == 0) {
        int tg = target[blockIdx.x];
        out[blockIdx.x] = ((xr[tg] + (bias ? bias[tg] : 0.0f)) - mx) - lse;
    }
}

extern "C" int cuda_lse_gather(float *out, const float *logits, int ld, const float *bias,
                               const int *target, int rows, int v, void *stream, hark_err_t *err)
{
    if (rows <= 0)
        return HARK_OK;
    if (v <= 0 || ld < v)
        return err_set(err, HARK_ERR_INVALID_ARG, "lse_gather: v %d, ld %d", v, ld);
    lse_gather_kernel<<<(unsigned)rows, 256, 0, (cudaStream_t)stream>>>(out, logits, ld, bias,
                                                                        target, v);
    return launched(err, "lse_gather_kernel");
}
