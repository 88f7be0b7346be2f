/* gemm_f16.cu — FP16 tensor-core GEMM with fused epilogues (mma.sync m16n8k16, FP32
 * accumulation, a cp.async pipeline four stages deep), and the same kernel as an implicit-GEMM
 * 2-D convolution over a channel-last FP16 image. The epilogues are the ones the Conformer needs
 * after a GEMM: bias + activation to FP16, GLU to FP16, and the residual update of the FP32
 * stream (x = beta·x + alpha·(acc + bias) + pe), so no FP32 GEMM output ever reaches memory.
 * CPU references: matmul_ref + activation_ref / glu_ref / axpy_ref, conv2d_ref (ops_cpu.c).
 * Tests: tests/ops/test_ops_cuda.c (cuda_hgemm_*, cuda_hconv2d_*). */
#include "ops/ops_cuda.h"

#include "hark.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define BK 32      /* k per pipeline stage */
#define LDS 40     /* shared-memory row in halves: BK + 8 (80 bytes: ldmatrix conflict-free) */
#define STAGES 4

/* A operand: plain rows (A[m][k] at a + m·lda + k) or the implicit im2col of a channel-last image
 * in (batch, h, w, cin): row m = (b, ho, wo), column k = (i·kw + j)·cin + ci. */
struct gemm_a_t {
    const __half *a;
    long long lda;
    int conv, cin, h, w, kw, stride, h_out, w_out;
};

struct gemm_epi_t {
    int mode, act;
    const float *bias; /* (N) or NULL */
    void *out;
    long long ldo;
    float alpha, beta;
    const float *pe; /* RESID: + pe[(m mod pe_rows)·ld_pe + n], or NULL */
    int pe_rows;
    long long ld_pe;
};

__device__ __forceinline__ float epi_act(float x, int act)
{
    switch (act) {
    case CUDA_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case CUDA_ACT_SWISH:
        return x / (1.0f + __expf(-x));
    case CUDA_ACT_GELU:
        return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    default:
        return x;
    }
}

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

__device__ __forceinline__ void ldsm_x4(unsigned r[4], const void *smem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* element offset of A[m][k] for k a multiple of 8 (the 8 halves of a chunk are contiguous) */
__device__ __forceinline__ long long a_koff(const gemm_a_t &A, int k)
{
    if (!A.conv)
        return k;
    int ij = k / A.cin, ci = k - ij * A.cin;
    int i = ij / A.kw, j = ij - i * A.kw;
    return ((long long)i * A.w + j) * A.cin + ci;
}

__device__ __forceinline__ long long a_rowoff(const gemm_a_t &A, int m)
{
    if (!A.conv)
        return (long long)m * A.lda;
    int per = A.h_out * A.w_out, b = m / per, r = m - b * per, ho = r / A.w_out,
        wo = r - ho * A.w_out;
    return (((long long)b * A.h + (long long)ho * A.stride) * A.w + (long long)wo * A.stride) *
           A.cin;
}

/* two adjacent output columns (n, n + 1) of row m; v1 is ignored past N */
__device__ __forceinline__ void epi_store(const gemm_epi_t &E, int m, int n, int N, float v0,
                                          float v1)
{
    bool has1 = n + 1 < N;
    if (E.bias) {
        v0 += E.bias[n];
        if (has1)
            v1 += E.bias[n + 1];
    }
    switch (E.mode) {
    case CUDA_EPI_F16: {
        __half *o = (__half *)E.out + (long long)m * E.ldo + n;
        v0 = epi_act(v0, E.act);
        v1 = epi_act(v1, E.act);
        if (has1 && !(E.ldo & 1))
            *(__half2 *)o = __floats2half2_rn(v0, v1);
        else {
            o[0] = __float2half_rn(v0);
            if (has1)
                o[1] = __float2half_rn(v1);
        }
        break;
    }
    case CUDA_EPI_GLU16: /* columns (2j, 2j + 1) = (value, gate) of output j; N even */
        ((__half *)E.out)[(long long)m * E.ldo + (n >> 1)] =
            __float2half_rn(v0 / (1.0f + __expf(-v1)));
        break;
    case CUDA_EPI_RESID32: {
        float *o = (float *)E.out + (long long)m * E.ldo + n;
        const float *pe = E.pe ? E.pe + (long long)(m % E.pe_rows) * E.ld_pe + n : NULL;
        float r0 = E.alpha * v0 + (pe ? pe[0] : 0.0f);
        o[0] = E.beta != 0.0f ? E.beta * o[0] + r0 : r0;
        if (has1) {
            float r1 = E.alpha * v1 + (pe ? pe[1] : 0.0f);
            o[1] = E.beta != 0.0f ? E.beta * o[1] + r1 : r1;
        }
        break;
    }
    default: { /* CUDA_EPI_F32 */
        float *o = (float *)E.out + (long long)m * E.ldo + n;
        o[0] = v0;
        if (has1)
            o[1] = v1;
    }
    }
}

/* Block tile BM × BN, warp tile WM × WN; threads = (BM/WM)·(BN/WN)·32. Grid: x over N tiles, y
 * over M tiles (neighbouring blocks share A rows; the weights stay in L2). */
template <int BM, int BN, int WM, int WN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    hgemm_kernel(gemm_a_t A, const __half *__restrict__ W, int M, int N, int K, gemm_epi_t E)
{
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NTL = WN / 8;
    constexpr int A_CH = BM * (BK / 8) / NT, B_CH = BN * (BK / 8) / NT;
    static_assert(A_CH >= 1 && B_CH >= 1 && NTL % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *sA = (__half *)smem_raw;      /* (STAGES, BM, LDS) */
    __half *sB = sA + STAGES * BM * LDS;  /* (STAGES, BN, LDS) */
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int wm = warp / WARPS_N, wn = warp % WARPS_N;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    long long a_off[A_CH];
    bool a_ok[A_CH];
    int a_row[A_CH], a_kc[A_CH];
#pragma unroll
    for (int i = 0; i < A_CH; i++) {
        int c = tid + i * NT;
        a_row[i] = c >> 2;
        a_kc[i] = (c & 3) * 8;
        int m = m0 + a_row[i];
        a_ok[i] = m < M;
        a_off[i] = a_ok[i] ? a_rowoff(A, m) : 0;
    }
    const __half *b_ptr[B_CH];
    bool b_ok[B_CH];
    int b_row[B_CH], b_kc[B_CH];
#pragma unroll
    for (int i = 0; i < B_CH; i++) {
        int c = tid + i * NT;
        b_row[i] = c >> 2;
        b_kc[i] = (c & 3) * 8;
        int n = n0 + b_row[i];
        b_ok[i] = n < N;
        b_ptr[i] = W + (long long)(b_ok[i] ? n : 0) * K;
    }
    int KT = (K + BK - 1) / BK;

    auto load_tile = [&](int stage, int kt) {
        __half *da = sA + stage * BM * LDS, *db = sB + stage * BN * LDS;
#pragma unroll
        for (int i = 0; i < A_CH; i++) {
            int k = kt * BK + a_kc[i];
            bool ok = a_ok[i] && k < K;
            const __half *src = ok ? A.a + a_off[i] + a_koff(A, k) : A.a;
            cp_async16(da + a_row[i] * LDS + a_kc[i], src, ok);
        }
#pragma unroll
        for (int i = 0; i < B_CH; i++) {
            int k = kt * BK + b_kc[i];
            bool ok = b_ok[i] && k < K;
            cp_async16(db + b_row[i] * LDS + b_kc[i], ok ? b_ptr[i] + k : W, ok);
        }
    };

    float acc[MT][NTL][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NTL; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT)
            load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); /* stage kt landed for all; stage kt - 1 is free */
        int nk = kt + STAGES - 1;
        if (nk < KT)
            load_tile(nk % STAGES, nk);
        cp_async_commit();
        const __half *ta = sA + (kt % STAGES) * BM * LDS, *tb = sB + (kt % STAGES) * BN * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MT][4], bf[NTL / 2][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                ldsm_x4(af[i], ta + (wm * WM + i * 16 + (lane & 15)) * LDS + kk + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < NTL / 2; j++)
                ldsm_x4(bf[j], tb + (wn * WN + j * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk +
                                   ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NTL; j++)
                    mma16816(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
        }
    }
    cp_async_wait<0>();

    int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NTL; j++) {
            int n = n0 + wn * WN + j * 8 + t4 * 2;
            if (n >= N)
                continue;
            int m = m0 + wm * WM + i * 16 + g;
            if (m < M)
                epi_store(E, m, n, N, acc[i][j][0], acc[i][j][1]);
            if (m + 8 < M)
                epi_store(E, m + 8, n, N, acc[i][j][2], acc[i][j][3]);
        }
}

static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what,
                                      cudaGetErrorString(e))
                            : HARK_OK;
}

template <int BM, int BN, int WM, int WN>
static int hgemm_launch(const gemm_a_t &A, const __half *W, int M, int N, int K,
                        const gemm_epi_t &E, cudaStream_t st, hark_err_t *err)
{
    constexpr int threads = (BM / WM) * (BN / WN) * 32;
    constexpr size_t smem = (size_t)STAGES * (BM + BN) * LDS * sizeof(__half);
    static bool attr_set[64]; /* per device; a benign race: every thread sets the same value */
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64 || !attr_set[dev]) {
        cudaError_t e = cudaFuncSetAttribute(hgemm_kernel<BM, BN, WM, WN>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem);
        if (e != cudaSuccess)
            return err_set(err, HARK_ERR_CUDA, "cuda: hgemm smem attribute: %s",
                           cudaGetErrorString(e));
        if (dev >= 0 && dev < 64)
            attr_set[dev] = true;
    }
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    hgemm_kernel<BM, BN, WM, WN><<<grid, threads, smem, st>>>(A, W, M, N, K, E);
    return launched(err, "hgemm_kernel");
}

static int hgemm_run(const gemm_a_t &A, const __half *W, int M, int N, int K,
                     const gemm_epi_t &E, cudaStream_t st, hark_err_t *err)
{
    if (M <= 0 || N <= 0)
        return HARK_OK;
    /* big tiles once there are two waves of them on a 132-SM part, small ones before */
    long long big = (long long)((M + 127) / 128) * ((N + 127) / 128);
    if (big >= 264)
        return hgemm_launch<128, 128, 64, 32>(A, W, M, N, K, E, st, err);
    return hgemm_launch<64, 64, 32, 32>(A, W, M, N, K, E, st, err);
}

static int epi_check(const cuda_epi_t *e, int N, hark_err_t *err)
{
    if (!e || !e->out)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: no output");
    if (e->mode < CUDA_EPI_F16 || e->mode > CUDA_EPI_F32)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: epilogue %d", (int)e->mode);
    if (e->mode == CUDA_EPI_GLU16 && N % 2)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: GLU needs an even N (%d)", N);
    if (e->pe && e->pe_rows <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: pe_rows %d", e->pe_rows);
    return HARK_OK;
}

static gemm_epi_t epi_of(const cuda_epi_t *e)
{
    gemm_epi_t E;
    E.mode = (int)e->mode;
    E.act = (int)e->act;
    E.bias = e->bias;
    E.out = e->out;
    E.ldo = e->ldo;
    E.alpha = e->alpha;
    E.beta = e->beta;
    E.pe = e->pe;
    E.pe_rows = e->pe_rows;
    E.ld_pe = e->ld_pe;
    return E;
}

static bool al16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

extern "C" int cuda_hgemm(const cuda_epi_t *epi, const void *a, long long lda, const void *w,
                          int m, int n, int k, void *stream, hark_err_t *err)
{
    int rc = epi_check(epi, n, err);
    if (rc != HARK_OK)
        return rc;
    if (m <= 0 || n <= 0)
        return HARK_OK;
    if (k <= 0 || k % 8 || lda % 8 || lda < k || !al16(a) || !al16(w))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hgemm: k %d and lda %lld must be multiples of 8 (lda >= k), operands "
                       "16-byte aligned",
                       k, lda);
    gemm_a_t A = {(const __half *)a, lda, 0, 0, 0, 0, 0, 0, 0, 0};
    return hgemm_run(A, (const __half *)w, m, n, k, epi_of(epi), (cudaStream_t)stream, err);
}

extern "C" int cuda_hconv2d(const cuda_epi_t *epi, const void *in, const void *w, int batch,
                            int cin, int h, int w_in, int cout, int kh, int kw, int stride,
                            void *stream, hark_err_t *err)
{
    int rc = epi_check(epi, cout, err);
    if (rc != HARK_OK)
        return rc;
    if (cin <= 0 || cin % 8 || kh <= 0 || kw <= 0 || stride <= 0 || !al16(in) || !al16(w))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hconv2d: cin %d (a multiple of 8), kernel %dx%d, stride %d, operands "
                       "16-byte aligned",
                       cin, kh, kw, stride);
    int h_out = h < kh ? 0 : (h - kh) / stride + 1, w_out = w_in < kw ? 0 : (w_in - kw) / stride + 1;
    if (batch <= 0 || h_out <= 0 || w_out <= 0)
        return HARK_OK;
    long long m = (long long)batch * h_out * w_out;
    if (m > 0x7fffffffLL)
        return err_set(err, HARK_ERR_TOO_LARGE, "hconv2d: %lld output positions", m);
    gemm_a_t A = {(const __half *)in, 0, 1, cin, h, w_in, kw, stride, h_out, w_out};
    return hgemm_run(A, (const __half *)w, (int)m, cout, kh * kw * cin, epi_of(epi),
                     (cudaStream_t)stream, err);
}
