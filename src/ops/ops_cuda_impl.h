/* ops_cuda_impl.h — the GEMM context shared by ops_cuda.cu (cuBLAS) and gemm_f16.cu (the mma.sync
 * kernels and their cuBLASLt alternative), and the device helpers of the 16-bit kernels (*_f16.cu:
 * each is a template over the element type, __half or __nv_bfloat16). Internal to src/ops; C++
 * only. */
#ifndef HARK_OPS_OPS_CUDA_IMPL_H
#define HARK_OPS_OPS_CUDA_IMPL_H

#include "gpu/gpu_arch.h"
#include "hark.h"
#include "ops/ops_cuda.h"

#include <cublasLt.h>
#include <math.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define LT_PLANS 64 /* prepared cuBLASLt matmuls per context */

/* one prepared cuBLASLt matmul: descriptors and the heuristic's algorithm for a shape */
struct lt_plan {
    unsigned long long used;                  /* 0: free */
    int m, n, k, mode, act, has_bias, dt, ok; /* dt: ops_dtype_t of the operands */
    long long lda, ldo;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

struct ops_cuda {
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace; /* shared by cuBLAS and cuBLASLt: both run in order on `stream` */
    int backend;     /* ops_gemm_backend_t */
    int last;        /* the backend the last cuda_hgemm ran on */
    int sm;          /* compute capability of the stream's device, major · 10 + minor */
    int path;        /* gpu_path_t: HOPPER (wgmma kernels allowed) or AMPERE, fixed at create */
    int sms;         /* its multiprocessors */
    unsigned long long tick;
    struct lt_plan plans[LT_PLANS];
};

#define OPS_WORKSPACE_BYTES ((size_t)32 << 20)

/* the activations of ops_cpu.c, same float formulas */
__device__ __forceinline__ float act_f(float x, int act)
{
    switch (act) {
    case CUDA_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case CUDA_ACT_SWISH:
        return x / (1.0f + expf(-x));
    case CUDA_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case CUDA_ACT_DSWISH:
        return x / (1.0f + expf(1.0f - x));
    case CUDA_ACT_SWOOSHL:
    case CUDA_ACT_SWOOSHR: {
        const bool l = act == CUDA_ACT_SWOOSHL;
        const float xo = x - (l ? OPS_SWOOSHL_SHIFT : OPS_SWOOSHR_SHIFT);
        float sp = log1pf(expf(xo));
        if (isinf(sp))
            sp = xo;
        return sp - 0.08f * x - (l ? OPS_SWOOSHL_OFFSET : OPS_SWOOSHR_OFFSET);
    }
    default:
        return x;
    }
}

/* 2^x by the MUFU, subnormal results flushed to 0 (probabilities and exps that are rounded to
 * half or added to >= 1 afterwards); 2^-inf = 0 */
__device__ __forceinline__ float ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* the activations of the FP16 GEMM epilogues (gemm_f16.cu, ffn_f16.cu); fast reciprocals (the
 * result is rounded to half) */
template <int ACT> __device__ __forceinline__ float epi_act(float x)
{
    if (ACT == CUDA_ACT_RELU)
        return x > 0.0f ? x : 0.0f;
    if (ACT == CUDA_ACT_SWISH)
        return __fdividef(x, 1.0f + ex2_ftz(-1.4426950408889634f * x));
    if (ACT == CUDA_ACT_GELU)
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    if (ACT == CUDA_ACT_DSWISH)
        return __fdividef(x, 1.0f + ex2_ftz(1.4426950408889634f * (1.0f - x)));
    if (ACT == CUDA_ACT_SWOOSHL || ACT == CUDA_ACT_SWOOSHR) { /* softplus: x past 20 gives x */
        const float xo = x - (ACT == CUDA_ACT_SWOOSHL ? OPS_SWOOSHL_SHIFT : OPS_SWOOSHR_SHIFT);
        const float sp = xo > 20.0f ? xo : log1pf(ex2_ftz(1.4426950408889634f * xo));
        return sp - 0.08f * x - (ACT == CUDA_ACT_SWOOSHL ? OPS_SWOOSHL_OFFSET : OPS_SWOOSHR_OFFSET);
    }
    return x;
}

/* HARK_OK, or HARK_ERR_CUDA naming `what` when the last launch failed (transducer_cuda.cu,
 * zipformer_cuda.cu) */
static inline int ops_launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? HARK_OK
                            : err_set(err, HARK_ERR_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* blocks of `threads` for a grid-stride loop over n elements (1 .. 65535 x 16) */
static inline unsigned ops_grid_for(size_t n, int threads)
{
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 16 ? 65535 * 16 : g);
}

/* block-wide sum / max over blockDim.x (a multiple of 32, <= 1024) threads, every thread getting
 * the same result, added in the same order; red: 32 floats of shared memory, which may still be
 * read by a previous call (ops_cuda.cu, transducer_cuda.cu, zipformer_cuda.cu) */
static __device__ __forceinline__ float ops_block_sum(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++)
        s += red[i];
    return s;
}

static __device__ __forceinline__ float ops_block_max(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int w = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        red[w] = v;
    __syncthreads();
    float s = red[0];
    for (int i = 1; i < nw; i++)
        s = fmaxf(s, red[i]);
    return s;
}

/* Lets kernel `kern` take `bytes` of dynamic shared memory (past 48 KiB it must be asked for),
 * once per device: set[dev] remembers (a benign race: every thread sets the same value). */
static inline cudaError_t ops_smem_opt_in(const void *kern, size_t bytes, bool *set)
{
    int dev = 0;
    if (bytes <= 48 * 1024 || cudaGetDevice(&dev) != cudaSuccess)
        return cudaSuccess;
    if (dev >= 0 && dev < 64 && set[dev])
        return cudaSuccess;
    cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess && dev >= 0 && dev < 64)
        set[dev] = true;
    return e;
}

/* ---- operand lists of the wgmma instructions (gemm_f16.cu, ffn_f16.cu) ---------------------
 * WG_D<n>: the n FP32 accumulators d[0 .. n) as "+f" operands %0 .. %n-1; WG_R<n>: the matching
 * "{%0, ..., %n-1}" register list of the instruction text. */
#define WG_D4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WG_D16(i) WG_D4(i), WG_D4((i) + 4), WG_D4((i) + 8), WG_D4((i) + 12)
#define WG_D32 WG_D16(0), WG_D16(16)
#define WG_D64 WG_D32, WG_D16(32), WG_D16(48)
#define WG_D128 WG_D64, WG_D16(64), WG_D16(80), WG_D16(96), WG_D16(112)
#define WG_R32                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_R64                                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63}"
#define WG_R128                                                                                    \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "  \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "   \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "   \
    "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "   \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "   \
    "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "     \
    "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "   \
    "%123, %124, %125, %126, %127}"

/* ---- the two 16-bit element types --------------------------------------------------------
 * h16<T> for T = __half (OPS_F16) or __nv_bfloat16 (OPS_BF16): the conversions, all round to
 * nearest even, and `bf16`, which picks the PTX type of the tensor-core instructions (".f16" or
 * ".bf16": same shapes, fragments and descriptors; inline asm needs the name as a literal, so
 * the asm helpers below branch on it with `if constexpr`). The __half forms are the intrinsics
 * the FP16 kernels always used, so their code is unchanged. */
template <typename T> struct h16;
template <> struct h16<__half> {
    typedef __half2 T2;
    static constexpr bool bf16 = false;
    static __device__ __forceinline__ float to_f(__half x)
    {
        return __half2float(x);
    }
    static __device__ __forceinline__ __half from_f(float x)
    {
        return __float2half_rn(x);
    }
    static __device__ __forceinline__ float2 to_f2(__half2 x)
    {
        return __half22float2(x);
    }
    static __device__ __forceinline__ __half2 from_f2(float lo, float hi)
    {
        return __floats2half2_rn(lo, hi);
    }
};
template <> struct h16<__nv_bfloat16> {
    typedef __nv_bfloat162 T2;
    static constexpr bool bf16 = true;
    static __device__ __forceinline__ float to_f(__nv_bfloat16 x)
    {
        return __bfloat162float(x);
    }
    static __device__ __forceinline__ __nv_bfloat16 from_f(float x)
    {
        return __float2bfloat16_rn(x);
    }
    static __device__ __forceinline__ float2 to_f2(__nv_bfloat162 x)
    {
        return __bfloat1622float2(x);
    }
    static __device__ __forceinline__ __nv_bfloat162 from_f2(float lo, float hi)
    {
        return __floats2bfloat162_rn(lo, hi);
    }
};

/* two floats rounded to a 16-bit pair, as the 32-bit register an mma fragment takes (lo in the
 * low half) */
template <typename T> __device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    typename h16<T>::T2 h = h16<T>::from_f2(lo, hi);
    return *(unsigned *)&h;
}

/* tensor-core fragments: ldmatrix (x4, and transposed) from shared memory, and
 * mma.sync m16n8k16 with 16-bit operands of type T and FP32 accumulation */
__device__ __forceinline__ void ldsm_x4(unsigned r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
#define MMA16816_ASM(TY)                                                                           \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0,%1,%2,%3}, "                  \
        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                                 \
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    if constexpr (h16<T>::bf16)
        MMA16816_ASM("bf16");
    else
        MMA16816_ASM("f16");
}
#undef MMA16816_ASM

/* cp.async: 16 bytes global -> shared (valid false: 16 zero bytes, nothing read) */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int sz = valid ? 16 : 0; /* 0: fill 16 zero bytes, read nothing */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(sz));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- Hopper-only device code (issue 24) -----------------------------------------------------
 * wgmma and the async-proxy fence exist only on sm_90a (nvcc defines __CUDA_ARCH_FEAT_SM90_ALL
 * there). The builds for sm_80 / 86 / 89 and the compute_90 PTX compile the Hopper kernels
 * (hgemm_wgmma_kernel, ffn_wgmma_kernel) to a trap instead, as does the host pass: the host
 * launches them only on the Hopper path (ops_cuda_t.path, src/gpu/gpu_arch.h), which needs
 * sm_90a code in the binary and a compute capability 9.0 device. */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HARK_DEV_HOPPER 1
#else
#define HARK_DEV_HOPPER 0
#endif

/* wgmma: a shared-memory matrix descriptor for a K-major tile in the 128-byte-swizzled layout
 * (row r's 16-byte chunk c at c ^ (r mod 8), rows of 128 bytes, 1024-byte aligned groups of 8
 * rows), and the warpgroup fence / commit / wait */
__device__ __forceinline__ uint64_t wg_desc(unsigned smem_addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr & 0x3FFFF) >> 4); /* start address */
    d |= (uint64_t)(16 >> 4) << 16;              /* leading byte offset (unused: swizzled) */
    d |= (uint64_t)(1024 >> 4) << 32;            /* stride byte offset: 8 rows of 128 bytes */
    d |= (uint64_t)1 << 62;                      /* 128-byte swizzle */
    return d;
}

__device__ __forceinline__ void wg_fence()
{
#if HARK_DEV_HOPPER
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit()
{
#if HARK_DEV_HOPPER
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void wg_wait()
{
#if HARK_DEV_HOPPER
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* ---- the residual update + layer norms over whole 256-wide rows, in a wgmma epilogue ---------
 * Used by the fused FFN (ffn_f16.cu) and the residual GEMMs with 128 x 256 tiles (gemm_f16.cu).
 * A warpgroup's 64 x 256 FP32 accumulator o[4q + 2h + e] holds row m_base + g + 8h (g = lane / 4)
 * and column 8q + 2·t4 + e (t4 = lane mod 4): a row's 256 values sit in the 4 threads of a quad,
 * so the norms reduce with quad shuffles (every thread runs them, rows past M included). */
#define ROW_D 256

/* layer norm of one row held by a quad: this thread's 64 values at o[4q + 2h + e] (q < 32, e < 2),
 * columns 8q + 2·t4 + e */
__device__ __forceinline__ void ln_quad(float *o, int h, int t4, const float *g, const float *b,
                                        float eps)
{
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < 32; q++)
        sum += o[4 * q + 2 * h] + o[4 * q + 2 * h + 1];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    float mean = sum / (float)ROW_D, sq = 0.0f;
#pragma unroll
    for (int q = 0; q < 64; q++) {
        float c = o[4 * (q >> 1) + 2 * h + (q & 1)] - mean;
        sq += c * c;
    }
    sq += __shfl_xor_sync(0xffffffffu, sq, 1);
    sq += __shfl_xor_sync(0xffffffffu, sq, 2);
    float rstd = 1.0f / sqrtf(sq / (float)ROW_D + eps);
#pragma unroll
    for (int q = 0; q < 64; q++) {
        int n = (q >> 1) * 8 + t4 * 2 + (q & 1), i = 4 * (q >> 1) + 2 * h + (q & 1);
        o[i] = (o[i] - mean) * rstd * (g ? g[n] : 1.0f) + (b ? b[n] : 0.0f);
    }
}

/* x (m, 256) float, rows m_base + g + 8h: r0 = x + alpha · (o + bias), then the norms nm
 * (has_norm; x = r0 otherwise; nm.h_out of type T); o is overwritten */
template <typename T>
__device__ __forceinline__ void
epi_resid_norms256(float *o, float *x, const float *bias, float alpha, bool has_norm,
                   const cuda_row_norms_t &nm, int M, int m_base, int lane)
{
    int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int m = m_base + g + h * 8;
        bool ok = m < M;
        float *xr = x + (long long)(ok ? m : 0) * ROW_D;
#pragma unroll
        for (int q = 0; q < 32; q++) {
            int n = q * 8 + t4 * 2;
            float2 v = ok ? *(const float2 *)(xr + n) : make_float2(0.0f, 0.0f);
            float c0 = bias ? bias[n] : 0.0f, c1 = bias ? bias[n + 1] : 0.0f;
            o[4 * q + h * 2] = v.x + alpha * (o[4 * q + h * 2] + c0);
            o[4 * q + h * 2 + 1] = v.y + alpha * (o[4 * q + h * 2 + 1] + c1);
        }
#pragma unroll
        for (int step = 0; step <= 2; step++) {
            if (step == 1 && has_norm && nm.ln1)
                ln_quad(o, h, t4, nm.g1, nm.n_b1, nm.eps);
            if (step == 2 && has_norm && nm.ln2)
                ln_quad(o, h, t4, nm.g2, nm.n_b2, nm.eps);
            if (ok && step == (has_norm ? nm.x_sel : 0))
#pragma unroll
                for (int q = 0; q < 32; q++)
                    *(float2 *)(xr + q * 8 + t4 * 2) =
                        make_float2(o[4 * q + h * 2], o[4 * q + h * 2 + 1]);
        }
        if (ok && has_norm && nm.h_out) {
            T *hr = (T *)nm.h_out + (long long)m * ROW_D;
#pragma unroll
            for (int q = 0; q < 32; q++)
                *(typename h16<T>::T2 *)(hr + q * 8 + t4 * 2) =
                    h16<T>::from_f2(o[4 * q + h * 2], o[4 * q + h * 2 + 1]);
        }
    }
}

#endif
