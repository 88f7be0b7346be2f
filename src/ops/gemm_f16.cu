/* gemm_f16.cu — FP16 / BF16 tensor-core GEMMs with fused epilogues: an mma.sync m16n8k16 kernel
 * (FP32 accumulation, cp.async pipeline four stages deep) and a Hopper wgmma kernel, each also an
 * implicit-GEMM 2-D convolution over a channel-last FP16 image. The epilogues are the ones the
 * Conformer needs after a GEMM: bias + activation to FP16, the residual update of the FP32 stream
 * (x = beta·x + alpha·(acc + bias) + pe), FP32 logits, or the CTC head's per-block (max, Σexp,
 * argmax), so no FP32 GEMM output has to reach memory. Every kernel is a template over the 16-bit
 * element type T (__half or __nv_bfloat16, cuda_epi_t.dt): "FP16" and "half" here mean either.
 * CPU references: matmul_ref + activation_ref / axpy_ref / log_softmax_ref, conv2d_ref.
 * cuda_hgemm can instead hand the GEMMs whose epilogue cuBLASLt expresses to cuBLASLt (see
 * ops_cuda.h: ops_gemm_backend_t); the rest always run here.
 * Tests: tests/ops/test_ops_cuda.c (cuda_hgemm_*, cuda_hconv2d_*). */
#include "ops/ops_cuda.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BK 32  /* k per pipeline stage */
#define LDS BK /* shared-memory row in halves (64 bytes), its four 16-byte chunks swizzled */
#define STAGES 4

/* A operand: plain rows (A[m][k] at a + m·lda + k) or the implicit im2col of a channel-last image
 * in (batch, h, w, cin): row m = (b, ho, wo), column k = (i·kw + j)·cin + ci. */
template <typename T> struct gemm_a_t {
    const T *a;
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
    int has_norm; /* EPI_RESID_NORM: the norms after the update */
    cuda_row_norms_t nm;
};

/* RESID32 with norms, as the wgmma kernel runs it: 128 x 256 tiles, the update and the layer norms
 * of whole rows in the epilogue (epi_resid_norms256) */
#define EPI_RESID_NORM 16

/* half offset of 16-byte chunk c (0..3) of tile row r: chunk c ^ ((r / 2) mod 4), so that the 8
 * rows of an ldmatrix and the 8 chunks of a cp.async phase fall in distinct banks */
__device__ __forceinline__ int swz(int r, int c)
{
    return r * LDS + ((c ^ (r >> 1)) & 3) * 8;
}

template <typename T> __device__ __forceinline__ long long a_rowoff(const gemm_a_t<T> &A, int m)
{
    int per = A.h_out * A.w_out, b = m / per, r = m - b * per, ho = r / A.w_out,
        wo = r - ho * A.w_out;
    return (((long long)b * A.h + (long long)ho * A.stride) * A.w + (long long)wo * A.stride) *
           A.cin;
}

/* The epilogue of one 16-row slab of accumulators in the mma.sync (and wgmma) fragment layout:
 * acc[j][0..1] at row m_base + g, columns n_base + 8j + 2·t4 (+1); acc[j][2..3] at row + 8. */
template <typename T, int NTL>
__device__ __forceinline__ void epi_glu(const gemm_epi_t &E, int M, int N, int m_base, int n_base,
                                        const float (*acc)[4], int lane);

template <typename T, int NTL, int MODE, int ACT>
__device__ __forceinline__ void epi_slab(const gemm_epi_t &E, int M, int N, int m_base, int n_base,
                                         const float (*acc)[4], int lane)
{
    if constexpr (MODE == CUDA_EPI_GLU16) {
        epi_glu<T, NTL>(E, M, N, m_base, n_base, acc, lane);
        return;
    }
    int g = lane >> 2, t4 = lane & 3;
    bool pair_ok = !(E.ldo & 1);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int m = m_base + g + h * 8;
        if (m >= M)
            continue;
        const float *pe =
            MODE == CUDA_EPI_RESID32 && E.pe ? E.pe + (long long)(m % E.pe_rows) * E.ld_pe : NULL;
#pragma unroll
        for (int j = 0; j < NTL; j++) {
            int n = n_base + j * 8 + t4 * 2;
            if (n >= N)
                continue;
            bool has1 = n + 1 < N;
            float v0 = acc[j][h * 2], v1 = acc[j][h * 2 + 1];
            if (E.bias) {
                v0 += E.bias[n];
                v1 += has1 ? E.bias[n + 1] : 0.0f;
            }
            if (MODE == CUDA_EPI_F16) {
                T *o = (T *)E.out + (long long)m * E.ldo + n;
                v0 = epi_act<ACT>(v0);
                v1 = epi_act<ACT>(v1);
                if (has1 && pair_ok) {
                    *(typename h16<T>::T2 *)o = h16<T>::from_f2(v0, v1);
                } else {
                    o[0] = h16<T>::from_f(v0);
                    if (has1)
                        o[1] = h16<T>::from_f(v1);
                }
            } else if (MODE == CUDA_EPI_RESID32) {
                float *o = (float *)E.out + (long long)m * E.ldo + n;
                float r0 = E.alpha * v0 + (pe ? pe[n] : 0.0f);
                float r1 = E.alpha * v1 + (pe && has1 ? pe[n + 1] : 0.0f);
                if (has1 && pair_ok) {
                    float2 x = E.beta != 0.0f ? *(float2 *)o : make_float2(0.0f, 0.0f);
                    *(float2 *)o = make_float2(E.beta * x.x + r0, E.beta * x.y + r1);
                } else {
                    o[0] = E.beta != 0.0f ? E.beta * o[0] + r0 : r0;
                    if (has1)
                        o[1] = E.beta != 0.0f ? E.beta * o[1] + r1 : r1;
                }
            } else { /* CUDA_EPI_F32 */
                float *o = (float *)E.out + (long long)m * E.ldo + n;
                if (has1 && pair_ok) {
                    *(float2 *)o = make_float2(v0, v1);
                } else {
                    o[0] = v0;
                    if (has1)
                        o[1] = v1;
                }
            }
        }
    }
}

/* CUDA_EPI_GLU16: the thread's column pair (n, n + 1) of accumulator group j is (value, gate) of
 * output column n / 2 = n_base / 2 + 4j + t4, so a quad holds 4 consecutive outputs per group.
 * A 4 x 4 transpose over each quad's 4 groups (three shuffles) gives each thread the 4
 * consecutive outputs of one group: one 8-byte store instead of four 2-byte ones. All lanes run
 * the shuffles (rows past M included). */
template <typename T, int NTL>
__device__ __forceinline__ void epi_glu(const gemm_epi_t &E, int M, int N, int m_base, int n_base,
                                        const float (*acc)[4], int lane)
{
    static_assert(NTL % 4 == 0, "groups of four");
    int g = lane >> 2, t4 = lane & 3, ho = N / 2;
    bool vec = !(E.ldo & 3) && !((uintptr_t)E.out & 7);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int m = m_base + g + h * 8;
#pragma unroll
        for (int j0 = 0; j0 < NTL; j0 += 4) {
            float gv[4], w[4];
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                int n = n_base + (j0 + jj) * 8 + t4 * 2;
                float v0 = acc[j0 + jj][h * 2], v1 = acc[j0 + jj][h * 2 + 1];
                if (E.bias && n + 1 < N) {
                    v0 += E.bias[n];
                    v1 += E.bias[n + 1];
                }
                gv[jj] = __fdividef(v0, 1.0f + ex2_ftz(-1.4426950408889634f * v1));
            }
            /* round r: lane t4 receives V[(t4 + r) & 3][t4] from lane (t4 + r) & 3, which sends
             * its gv[(own t4 - r) & 3] */
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int si = (t4 - r) & 3;
                float send = si == 0 ? gv[0] : si == 1 ? gv[1] : si == 2 ? gv[2] : gv[3];
                float got = __shfl_sync(0xffffffffu, send, (lane & ~3) | ((t4 + r) & 3));
                int q = (t4 + r) & 3;
#pragma unroll
                for (int e = 0; e < 4; e++)
                    w[e] = q == e ? got : w[e];
            }
            int c0 = n_base / 2 + (j0 + t4) * 4; /* w[e]: output column c0 + e */
            if (m >= M || c0 >= ho)
                continue;
            T *o = (T *)E.out + (long long)m * E.ldo + c0;
            if (vec && c0 + 4 <= ho) {
                typename h16<T>::T2 p0 = h16<T>::from_f2(w[0], w[1]),
                                    p1 = h16<T>::from_f2(w[2], w[3]);
                uint2 u = make_uint2(*(unsigned *)&p0, *(unsigned *)&p1);
                *(uint2 *)o = u;
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (c0 + e < ho)
                        o[e] = h16<T>::from_f(w[e]);
            }
        }
    }
}

/* online (max, Σ exp(x - max), first argmax) triples; NaN never wins, ties keep the first index */
struct lse3 {
    float m, s;
    int i;
};

__device__ __forceinline__ lse3 lse_add(lse3 a, float v, int i)
{
    if (v > a.m) {
        a.s = (a.i >= 0 ? a.s * __expf(a.m - v) : 0.0f) + 1.0f;
        a.m = v;
        a.i = i;
    } else if (a.i >= 0 && v == v) {
        a.s += __expf(v - a.m);
    }
    return a;
}

__device__ __forceinline__ lse3 lse_merge3(lse3 a, lse3 b)
{
    if (b.i >= 0 && (a.i < 0 || b.m > a.m || (b.m == a.m && b.i < a.i))) {
        lse3 t = a;
        a = b;
        b = t;
    }
    if (b.i >= 0)
        a.s += b.s * __expf(b.m - a.m);
    return a;
}

__device__ __forceinline__ lse3 lse_shfl(lse3 a, int o)
{
    lse3 b;
    b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
    b.i = __shfl_xor_sync(0xffffffffu, a.i, o);
    return lse_merge3(a, b);
}

/* CUDA_EPI_LSE: per row, the (max, Σ exp, argmax) of (acc + bias) over this block's BN columns,
 * written as a float4 (m, s, argmax bits, 0) to out[row · ldo + blockIdx.x] */
template <int BM, int WM, int WN, int MT, int NTL, int WARPS_N>
__device__ __forceinline__ void epi_lse(const gemm_epi_t &E, int M, int N, int m0, int n0, int wm,
                                        int wn, const float (*acc)[NTL][4], int lane,
                                        unsigned char *smem)
{
    int g = lane >> 2, t4 = lane & 3;
    lse3 *red = (lse3 *)smem; /* (BM, WARPS_N) */
    __syncthreads();          /* the pipeline's shared memory is free */
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            lse3 a = {-INFINITY, 0.0f, -1};
#pragma unroll
            for (int j = 0; j < NTL; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int n = n0 + wn * WN + j * 8 + t4 * 2 + e;
                    if (n < N)
                        a = lse_add(a, acc[i][j][h * 2 + e] + (E.bias ? E.bias[n] : 0.0f), n);
                }
            a = lse_shfl(a, 1);
            a = lse_shfl(a, 2);
            if (t4 == 0)
                red[(wm * WM + i * 16 + g + h * 8) * WARPS_N + wn] = a;
        }
    __syncthreads();
    for (int r = threadIdx.x; r < BM; r += blockDim.x) {
        if (m0 + r >= M)
            continue;
        lse3 a = red[r * WARPS_N];
        for (int w = 1; w < WARPS_N; w++)
            a = lse_merge3(a, red[r * WARPS_N + w]);
        ((float4 *)E.out)[(long long)(m0 + r) * E.ldo + blockIdx.x] =
            make_float4(a.m, a.s, __int_as_float(a.i), 0.0f);
    }
}

/* CUDA_EPI_LSE for the wgmma kernel: a row's BN = 128 columns sit in one quad (acc[j][2h + e] at
 * column 8j + 2·t4 + e), so each row reduces in registers and two shuffles: max and first argmax,
 * then Σ exp(v - max); one (max, Σ, argmax) per row and block column, as epi_lse writes it */
template <int NTL>
__device__ __forceinline__ void epi_lse_quad(const gemm_epi_t &E, int M, int N, int m_base,
                                             int n_base, const float (*acc)[4], int lane)
{
    int g = lane >> 2, t4 = lane & 3;
    float bv[NTL][2];
#pragma unroll
    for (int j = 0; j < NTL; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int n = n_base + j * 8 + t4 * 2 + e;
            bv[j][e] = n >= N ? NAN : E.bias ? E.bias[n] : 0.0f; /* NaN: never counted */
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
        int ai = -1;
#pragma unroll
        for (int j = 0; j < NTL; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = acc[j][h * 2 + e] + bv[j][e];
                if (v > mx) { /* columns rise along j, e: the first maximum stays */
                    mx = v;
                    ai = n_base + j * 8 + t4 * 2 + e;
                }
            }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            float om = __shfl_xor_sync(0xffffffffu, mx, o);
            int oi = __shfl_xor_sync(0xffffffffu, ai, o);
            if (oi >= 0 && (ai < 0 || om > mx || (om == mx && oi < ai))) {
                mx = om;
                ai = oi;
            }
        }
        float sum = 0.0f;
        if (ai >= 0)
#pragma unroll
            for (int j = 0; j < NTL; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = acc[j][h * 2 + e] + bv[j][e];
                    sum += v == v ? ex2_ftz((v - mx) * 1.4426950408889634f) : 0.0f;
                }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        int m = m_base + g + h * 8;
        if (t4 == 0 && m < M)
            ((float4 *)E.out)[(long long)m * E.ldo + n_base / 128] =
                make_float4(mx, sum, __int_as_float(ai), 0.0f);
    }
}

/* Block tile BM × BN, warp tile WM × WN; threads = (BM/WM)·(BN/WN)·32. Grid: x over N tiles, y
 * over M tiles (neighbouring blocks share A rows; the weights stay in L2). MODE and ACT fix the
 * epilogue at compile time; CONV: 0 plain rows, 1 implicit conv with cin % 32 == 0 (a k tile is
 * one filter tap: its offset advances incrementally), 2 implicit conv with cin % 8 == 0. */
template <typename T, int BM, int BN, int WM, int WN, int MODE, int ACT, int CONV>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    hgemm_kernel(gemm_a_t<T> A, const T *__restrict__ W, int M, int N, int K, gemm_epi_t E)
{
    constexpr int WARPS_N = BN / WN, NT = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NTL = WN / 8;
    constexpr int A_CH = BM * (BK / 8) / NT, B_CH = BN * (BK / 8) / NT;
    static_assert(A_CH >= 1 && B_CH >= 1 && NTL % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *sA = (T *)smem_raw;          /* (STAGES, BM, LDS) */
    T *sB = sA + STAGES * BM * LDS; /* (STAGES, BN, LDS) */
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int wm = warp / WARPS_N, wn = warp % WARPS_N;
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    const T *a_ptr[A_CH];
    bool a_ok[A_CH];
    int a_sm[A_CH], a_kc[A_CH];
#pragma unroll
    for (int i = 0; i < A_CH; i++) {
        int c = tid + i * NT, row = c >> 2, m = m0 + row;
        a_kc[i] = (c & 3) * 8;
        a_sm[i] = swz(row, c & 3);
        a_ok[i] = m < M;
        long long off = !a_ok[i] ? 0 : CONV ? a_rowoff(A, m) : (long long)m * A.lda;
        a_ptr[i] = A.a + off + (CONV == 2 ? 0 : a_kc[i]);
    }
    const T *b_ptr[B_CH];
    bool b_ok[B_CH];
    int b_sm[B_CH], b_kc[B_CH];
#pragma unroll
    for (int i = 0; i < B_CH; i++) {
        int c = tid + i * NT, row = c >> 2, n = n0 + row;
        b_kc[i] = (c & 3) * 8;
        b_sm[i] = swz(row, c & 3);
        b_ok[i] = n < N;
        b_ptr[i] = W + (long long)(b_ok[i] ? n : 0) * K + b_kc[i];
    }
    int KT = (K + BK - 1) / BK;
    int ci0 = 0, ti = 0, tj = 0; /* CONV 1: the channel block and filter tap of the next tile */

    auto load_tile = [&](int stage, int kt) {
        T *da = sA + stage * BM * LDS, *db = sB + stage * BN * LDS;
        long long koff = (long long)kt * BK;
        if (CONV == 1) { /* tiles are loaded in order 0, 1, 2, ... */
            koff = ((long long)ti * A.w + tj) * A.cin + ci0;
            ci0 += BK;
            if (ci0 == A.cin) {
                ci0 = 0;
                if (++tj == A.kw) {
                    tj = 0;
                    ++ti;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < A_CH; i++) {
            int k = kt * BK + a_kc[i];
            bool ok = a_ok[i] && k < K;
            const T *src = a_ptr[i] + koff;
            if (CONV == 2 && ok) {
                int ij = k / A.cin, ci = k - ij * A.cin, ii = ij / A.kw, jj = ij - ii * A.kw;
                src = a_ptr[i] + ((long long)ii * A.w + jj) * A.cin + ci;
            }
            cp_async16(da + a_sm[i], ok ? src : A.a, ok);
        }
#pragma unroll
        for (int i = 0; i < B_CH; i++) {
            int k = kt * BK + b_kc[i];
            bool ok = b_ok[i] && k < K;
            cp_async16(db + b_sm[i], ok ? b_ptr[i] + (long long)kt * BK : W, ok);
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
        const T *ta = sA + (kt % STAGES) * BM * LDS, *tb = sB + (kt % STAGES) * BN * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[MT][4], bf[NTL / 2][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
                ldsm_x4(af[i], ta + swz(wm * WM + i * 16 + (lane & 15), (kk >> 3) + (lane >> 4)));
#pragma unroll
            for (int j = 0; j < NTL / 2; j++)
                ldsm_x4(bf[j], tb + swz(wn * WN + j * 16 + (lane & 7) + (lane >> 4) * 8,
                                        (kk >> 3) + ((lane >> 3) & 1)));
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NTL; j++)
                    mma16816<T>(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2],
                                bf[j >> 1][(j & 1) * 2 + 1]);
        }
    }
    cp_async_wait<0>();

    if constexpr (MODE == CUDA_EPI_LSE) {
        epi_lse<BM, WM, WN, MT, NTL, WARPS_N>(E, M, N, m0, n0, wm, wn, acc, lane, smem_raw);
    } else {
        /* each thread owns column pairs (n, n + 1) of rows g and g + 8 of each mma tile */
#pragma unroll
        for (int i = 0; i < MT; i++)
            epi_slab<T, NTL, MODE, ACT>(E, M, N, m0 + wm * WM + i * 16, n0 + wn * WN, acc[i], lane);
    }
}

/* ---- Hopper: wgmma ----------------------------------------------------------------------------
 * Block tile 128 × 128 × 64, two consumer warpgroups (rows 0-63 and 64-127), each issuing
 * wgmma.m64n128k16 from shared memory; all 256 threads load the tiles with cp.async into the
 * 128-byte-swizzled K-major layout wgmma reads (row r's 16-byte chunk c at c ^ (r mod 8), rows of
 * 128 bytes, 1024-byte aligned), STG stages deep (STG - 2 tiles loading ahead of the one in use,
 * one wgmma batch in flight). */
#define WG_BM 128
#define WG_BN 128
#define WG_BK 64
#define WG_THREADS 256
#define WG_TILE_BYTES (WG_BM * WG_BK * 2) /* = WG_BN * WG_BK * 2 */

/* d (64 × 128, this warpgroup's fragments) += A (64 × 16) · B (128 × 16)ᵀ from shared memory */
#define WGMMA_M64N128K16_ASM(TY)                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_R64               \
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : WG_D64                                                                          \
                 : "l"(da), "l"(db))
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float d[64], uint64_t da, uint64_t db)
{
    if constexpr (h16<T>::bf16)
        WGMMA_M64N128K16_ASM("bf16");
    else
        WGMMA_M64N128K16_ASM("f16");
}
#undef WGMMA_M64N128K16_ASM

/* d (64 × 256, this warpgroup's fragments) += A (64 × 16) · B (256 × 16)ᵀ from shared memory */
#define WGMMA_M64N256K16_ASM(TY)                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " WG_R128              \
                 ", %128, %129, p, 1, 1, 0, 0;\n}\n"                                               \
                 : WG_D128                                                                         \
                 : "l"(da), "l"(db))
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float d[128], uint64_t da, uint64_t db)
{
    if constexpr (h16<T>::bf16)
        WGMMA_M64N256K16_ASM("bf16");
    else
        WGMMA_M64N256K16_ASM("f16");
}
#undef WGMMA_M64N256K16_ASM

template <typename T, int MODE, int ACT, int CONV, int STG, int BN>
__global__ void __launch_bounds__(WG_THREADS, STG == 3 && BN == 128 ? 2 : 1)
    hgemm_wgmma_kernel(gemm_a_t<T> A, const T *__restrict__ W, int M, int N, int K, gemm_epi_t E)
{
#if HARK_DEV_HOPPER
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
    unsigned pad = ((base + 1023u) & ~1023u) - base; /* the swizzle needs 1024-byte alignment */
    constexpr int A_BYTES = WG_TILE_BYTES, STAGE_BYTES = A_BYTES + BN * WG_BK * 2;
    unsigned char *smem = smem_raw + pad; /* stage s: A at s·STAGE, B at s·STAGE + A_BYTES */
    unsigned sbase = base + pad;
    int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wq = (tid >> 5) & 3;
    int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * BN;
    constexpr int CH = WG_BM * (WG_BK / 8) / WG_THREADS; /* 16-byte chunks per thread, A: 4 */
    constexpr int CHB = BN * (WG_BK / 8) / WG_THREADS;   /* B: 4 or 8 */

    /* this thread's chunks: rows tid / 8 + 32·i, chunk tid mod 8 (the same for A and B), at
     * s_off + 4096·i in the tile (32 rows of 128 bytes further, same swizzle phase) */
    int kc = (tid & 7) * 8, r0 = tid >> 3;
    const T *a_ptr[CH], *b_ptr[CHB];
    bool a_ok[CH], b_ok[CHB];
    unsigned s_off = (unsigned)(r0 * 128 + (((tid & 7) ^ (r0 & 7)) * 16));
#pragma unroll
    for (int i = 0; i < CH; i++) {
        int m = m0 + r0 + 32 * i;
        a_ok[i] = m < M;
        long long off = !a_ok[i] ? 0 : CONV ? a_rowoff(A, m) : (long long)m * A.lda;
        a_ptr[i] = A.a + off + (CONV == 2 ? 0 : kc);
    }
#pragma unroll
    for (int i = 0; i < CHB; i++) {
        int n = n0 + r0 + 32 * i;
        b_ok[i] = n < N;
        b_ptr[i] = W + (long long)(b_ok[i] ? n : 0) * K + kc;
    }
    int KT = (K + WG_BK - 1) / WG_BK;
    int ci0 = 0, ti = 0, tj = 0; /* CONV 1: channel block and filter tap of the next tile */

    auto load_tile = [&](int stage, int kt) {
        unsigned char *sa = smem + stage * STAGE_BYTES, *sb = sa + A_BYTES;
        long long koff = (long long)kt * WG_BK;
        if (CONV == 1) { /* tiles are loaded in order 0, 1, 2, ... */
            koff = ((long long)ti * A.w + tj) * A.cin + ci0;
            ci0 += WG_BK;
            if (ci0 == A.cin) {
                ci0 = 0;
                if (++tj == A.kw) {
                    tj = 0;
                    ++ti;
                }
            }
        }
        int k = kt * WG_BK + kc;
#pragma unroll
        for (int i = 0; i < CH; i++) {
            bool ok = a_ok[i] && k < K;
            const T *src = a_ptr[i] + koff;
            if (CONV == 2 && ok) {
                int ij = k / A.cin, ci = k - ij * A.cin, ii = ij / A.kw, jj = ij - ii * A.kw;
                src = a_ptr[i] + ((long long)ii * A.w + jj) * A.cin + ci;
            }
            cp_async16(sa + s_off + 4096 * i, ok ? src : A.a, ok);
        }
#pragma unroll
        for (int i = 0; i < CHB; i++) {
            bool okb = b_ok[i] && k < K;
            cp_async16(sb + s_off + 4096 * i, okb ? b_ptr[i] + (long long)kt * WG_BK : W, okb);
        }
    };

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < STG - 2; s++) {
        if (s < KT)
            load_tile(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STG - 3>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile kt landed; every warpgroup finished the batch of tile kt - 2 */
        int nk = kt + STG - 2;
        if (nk < KT)
            load_tile(nk % STG, nk);
        cp_async_commit();
        unsigned sa = sbase + (kt % STG) * STAGE_BYTES + wg * 64 * 128,
                 sb = sbase + (kt % STG) * STAGE_BYTES + A_BYTES;
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < WG_BK / 16; ks++) {
            if constexpr (BN == 256)
                wgmma_m64n256k16<T>(d, wg_desc(sa + ks * 32), wg_desc(sb + ks * 32));
            else
                wgmma_m64n128k16<T>(d, wg_desc(sa + ks * 32), wg_desc(sb + ks * 32));
        }
        wg_commit();
        wg_wait<1>();
    }
    wg_wait<0>();
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        asm volatile("" : "+f"(d[i])::"memory");
    if constexpr (MODE == CUDA_EPI_LSE) {
        static_assert(BN == 128, "LSE partials cover 128 columns");
        epi_lse_quad<BN / 8>(E, M, N, m0 + wg * 64 + wq * 16, n0, (const float(*)[4])d, lane);
    } else if constexpr (MODE == EPI_RESID_NORM) {
        static_assert(BN == ROW_D, "whole rows");
        epi_resid_norms256<T>(d, (float *)E.out, E.bias, E.alpha, E.has_norm != 0, E.nm, M,
                              m0 + wg * 64 + wq * 16, lane);
    } else {
        epi_slab<T, BN / 8, MODE, ACT>(E, M, N, m0 + wg * 64 + wq * 16, n0, (const float(*)[4])d,
                                       lane);
    }
#else
    __trap(); /* never launched off the Hopper path */
#endif
}

static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e))
               : HARK_OK;
}

template <typename T, int BM, int BN, int WM, int WN, int MODE, int ACT, int CONV>
static int hgemm_launch(const gemm_a_t<T> &A, const T *W, int M, int N, int K, const gemm_epi_t &E,
                        cudaStream_t st, hark_err_t *err)
{
    constexpr int threads = (BM / WM) * (BN / WN) * 32;
    constexpr size_t smem = (size_t)STAGES * (BM + BN) * LDS * sizeof(T);
    auto kern = hgemm_kernel<T, BM, BN, WM, WN, MODE, ACT, CONV>;
    static bool set[64];
    cudaError_t e = ops_smem_opt_in((const void *)kern, smem, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: hgemm smem attribute: %s", cudaGetErrorString(e));
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM));
    kern<<<grid, threads, smem, st>>>(A, W, M, N, K, E);
    return launched(err, "hgemm_kernel");
}

template <typename T, int MODE, int ACT, int CONV, int STG, int BN>
static int wgmma_launch_stg(const gemm_a_t<T> &A, const T *W, int M, int N, int K,
                            const gemm_epi_t &E, cudaStream_t st, hark_err_t *err)
{
    constexpr size_t smem = (size_t)STG * (WG_TILE_BYTES + BN * WG_BK * 2) + 1024;
    auto kern = hgemm_wgmma_kernel<T, MODE, ACT, CONV, STG, BN>;
    static bool set[64];
    cudaError_t e = ops_smem_opt_in((const void *)kern, smem, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: wgmma smem attribute: %s", cudaGetErrorString(e));
    dim3 grid((unsigned)((N + BN - 1) / BN), (unsigned)((M + WG_BM - 1) / WG_BM));
    kern<<<grid, WG_THREADS, smem, st>>>(A, W, M, N, K, E);
    return launched(err, "hgemm_wgmma_kernel");
}

/* 3 stages (96 KiB: two blocks per SM, one's epilogue overlapping the other's main loop) for
 * short K, 4 (one block per SM, deeper prefetch) for long K; HARK_WGMMA_STAGES=3|4 forces one.
 * The implicit convs with 256 output channels take 128 x 256 tiles (4 stages, 192 KiB): each im2col
 * A tile, gathered from the image, is then read once instead of once per 128 columns */
/* HARK_WGMMA_WIDE=0 keeps the convs on 128 x 128 tiles (for comparison) */
static bool wide_conv_tiles()
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("HARK_WGMMA_WIDE");
        on = !(e && !strcmp(e, "0"));
    }
    return on != 0;
}

template <typename T, int MODE, int ACT, int CONV>
static int wgmma_launch(const gemm_a_t<T> &A, const T *W, int M, int N, int K, const gemm_epi_t &E,
                        cudaStream_t st, hark_err_t *err)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("HARK_WGMMA_STAGES");
        forced = e && (*e == '3' || *e == '4') ? *e - '0' : 0;
    }
    if constexpr (CONV != 0) {
        if (N % 256 == 0 && wide_conv_tiles())
            return wgmma_launch_stg<T, MODE, ACT, CONV, 4, 256>(A, W, M, N, K, E, st, err);
    }
    int stg = forced ? forced : K >= 1024 ? 4 : 3;
    if (stg == 3)
        return wgmma_launch_stg<T, MODE, ACT, CONV, 3, 128>(A, W, M, N, K, E, st, err);
    return wgmma_launch_stg<T, MODE, ACT, CONV, 4, 128>(A, W, M, N, K, E, st, err);
}

/* big tiles once there are two waves of them on a 132-SM part, small ones before */
template <typename T, int MODE, int ACT, int CONV>
static int hgemm_tiles(const gemm_a_t<T> &A, const T *W, int M, int N, int K, const gemm_epi_t &E,
                       cudaStream_t st, int wgmma, hark_err_t *err)
{
    long long big = (long long)((M + 127) / 128) * ((N + 127) / 128);
    if (wgmma)
        return wgmma_launch<T, MODE, ACT, CONV>(A, W, M, N, K, E, st, err);
    if (big >= 264)
        return hgemm_launch<T, 128, 128, 64, 32, MODE, ACT, CONV>(A, W, M, N, K, E, st, err);
    return hgemm_launch<T, 64, 64, 32, 32, MODE, ACT, CONV>(A, W, M, N, K, E, st, err);
}

/* whether the wgmma kernel takes this GEMM under the context's policy: the Hopper path, enough
 * 128 x 128 tiles to fill it, and (implicit conv) k tiles that stay inside one filter tap or the
 * generic addressing */
static bool wgmma_takes(const ops_cuda_t *g, int M, int N, int K)
{
    /* AUTO: the GEMMs cuBLASLt does not take (pe, the convs; swish/GELU with HARK_LT_ACT_PASS=0) */
    if (g->backend != OPS_GEMM_WGMMA && g->backend != OPS_GEMM_AUTO)
        return false;
    if (g->path != GPU_PATH_HOPPER)
        return false;
    long long tiles = (long long)((M + WG_BM - 1) / WG_BM) * ((N + WG_BN - 1) / WG_BN);
    return tiles >= 132;
}

template <typename T>
static int hgemm_run(const gemm_a_t<T> &A, const T *W, int M, int N, int K, const gemm_epi_t &E,
                     cudaStream_t st, int wg, hark_err_t *err)
{
    if (M <= 0 || N <= 0)
        return HARK_OK;
    if (A.conv) { /* the subsampling convs: bias + ReLU; Jasper's 1-D convs: also RESID32 */
        int whole_taps = A.cin % (wg ? WG_BK : BK) == 0;
        if (E.mode == CUDA_EPI_RESID32 && !E.has_norm) {
            if (whole_taps)
                return hgemm_tiles<T, CUDA_EPI_RESID32, CUDA_ACT_NONE, 1>(A, W, M, N, K, E, st, wg,
                                                                          err);
            return hgemm_tiles<T, CUDA_EPI_RESID32, CUDA_ACT_NONE, 2>(A, W, M, N, K, E, st, wg,
                                                                      err);
        }
        if (E.mode != CUDA_EPI_F16 || E.act != CUDA_ACT_RELU)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "hconv2d: only the F16 + ReLU and RESID32 (no norms) epilogues");
        if (whole_taps)
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_RELU, 1>(A, W, M, N, K, E, st, wg, err);
        return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_RELU, 2>(A, W, M, N, K, E, st, wg, err);
    }
    switch (E.mode) {
    case CUDA_EPI_F16:
        switch (E.act) {
        case CUDA_ACT_RELU:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_RELU, 0>(A, W, M, N, K, E, st, wg, err);
        case CUDA_ACT_SWISH:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_SWISH, 0>(A, W, M, N, K, E, st, wg, err);
        case CUDA_ACT_GELU:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_GELU, 0>(A, W, M, N, K, E, st, wg, err);
        case CUDA_ACT_DSWISH:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_DSWISH, 0>(A, W, M, N, K, E, st, wg, err);
        case CUDA_ACT_SWOOSHL:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_SWOOSHL, 0>(A, W, M, N, K, E, st, wg, err);
        case CUDA_ACT_SWOOSHR:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_SWOOSHR, 0>(A, W, M, N, K, E, st, wg, err);
        default:
            return hgemm_tiles<T, CUDA_EPI_F16, CUDA_ACT_NONE, 0>(A, W, M, N, K, E, st, wg, err);
        }
    case CUDA_EPI_RESID32:
        if (E.has_norm) /* cuda_hgemm checked: Hopper, N = 256 */
            return wgmma_launch_stg<T, EPI_RESID_NORM, CUDA_ACT_NONE, 0, 4, ROW_D>(A, W, M, N, K, E,
                                                                                   st, err);
        return hgemm_tiles<T, CUDA_EPI_RESID32, CUDA_ACT_NONE, 0>(A, W, M, N, K, E, st, wg, err);
    case CUDA_EPI_LSE: /* partials per 128 columns: 128 x 128 tiles, wgmma or mma.sync */
        if (wg)
            return wgmma_launch<T, CUDA_EPI_LSE, CUDA_ACT_NONE, 0>(A, W, M, N, K, E, st, err);
        return hgemm_launch<T, 128, 128, 64, 32, CUDA_EPI_LSE, CUDA_ACT_NONE, 0>(A, W, M, N, K, E,
                                                                                 st, err);
    case CUDA_EPI_GLU16:
        return hgemm_tiles<T, CUDA_EPI_GLU16, CUDA_ACT_NONE, 0>(A, W, M, N, K, E, st, wg, err);
    default:
        return hgemm_tiles<T, CUDA_EPI_F32, CUDA_ACT_NONE, 0>(A, W, M, N, K, E, st, wg, err);
    }
}

static bool al16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* the GEMM's 16-bit type: cuda_epi_t.dt, OPS_F32 (0, a zeroed struct) read as OPS_F16 */
static ops_dtype_t epi_dt(const cuda_epi_t *e)
{
    return e->dt == OPS_BF16 ? OPS_BF16 : OPS_F16;
}

static int epi_check(const cuda_epi_t *e, int N, hark_err_t *err)
{
    if (!e || !e->out)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: no output");
    if (e->dt != OPS_F32 && e->dt != OPS_F16 && e->dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: element type %d", (int)e->dt);
    if (e->mode < CUDA_EPI_F16 || e->mode > CUDA_EPI_GLU16)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: epilogue %d", (int)e->mode);
    if (e->mode == CUDA_EPI_LSE && (e->ldo != CUDA_LSE_TILES(N) || !al16(e->out)))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hgemm: LSE partials need ldo = %d, 16-byte "
                       "alignment",
                       CUDA_LSE_TILES(N));
    if (e->mode == CUDA_EPI_GLU16 && (N % 2 || e->ldo < N / 2))
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: GLU needs n even (%d), ldo >= n / 2", N);
    if (e->pe && e->pe_rows <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "hgemm: pe_rows %d", e->pe_rows);
    if (e->mode == CUDA_EPI_RESID32 && e->norm &&
        (e->beta != 1.0f || e->pe || e->ldo != N || e->norm->x_sel < 0 || e->norm->x_sel > 2))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hgemm: the norms after a residual update need beta 1, no pe, ldo = n, "
                       "x_sel 0..2");
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
    E.has_norm = e->mode == CUDA_EPI_RESID32 && e->norm;
    memset(&E.nm, 0, sizeof E.nm);
    if (E.has_norm)
        E.nm = *e->norm;
    return E;
}

/* ---- cuBLASLt ------------------------------------------------------------------------------ */

static bool lt_expresses(const cuda_epi_t *e)
{
    switch (e->mode) {
    case CUDA_EPI_F16: /* its bias must be D's type (bias_h); swish and GELU: a second pass */
        return !e->bias || e->bias_h;
    case CUDA_EPI_RESID32: /* cuBLASLt adds its bias after alpha */
        return !e->pe && (!e->bias || e->alpha == 1.0f || e->bias_alpha);
    case CUDA_EPI_F32:
        return true;
    default:
        return false;
    }
}

static void lt_plan_free(lt_plan *p)
{
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

extern "C" void ops_cuda_lt_release(ops_cuda_t *g)
{
    for (int i = 0; i < LT_PLANS; i++)
        lt_plan_free(&g->plans[i]);
}

extern "C" void ops_cuda_set_gemm_backend(ops_cuda_t *g, ops_gemm_backend_t b)
{
    g->backend = (int)b;
}

extern "C" ops_gemm_backend_t ops_cuda_last_gemm(const ops_cuda_t *g)
{
    return (ops_gemm_backend_t)g->last;
}

/* the prepared matmul for this shape and epilogue (NULL: cuBLASLt has no algorithm for it) */
static lt_plan *lt_get(ops_cuda_t *g, const cuda_epi_t *e, long long lda, int m, int n, int k)
{
    int has_bias = e->bias != NULL, dt = (int)epi_dt(e);
    lt_plan *victim = &g->plans[0];
    for (int i = 0; i < LT_PLANS; i++) {
        lt_plan *p = &g->plans[i];
        if (p->used && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldo == e->ldo &&
            p->mode == (int)e->mode && p->act == (int)e->act && p->has_bias == has_bias &&
            p->dt == dt) {
            p->used = ++g->tick;
            return p->ok ? p : NULL;
        }
        if (p->used < victim->used)
            victim = p;
    }
    lt_plan *p = victim;
    lt_plan_free(p);
    p->used = ++g->tick;
    p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldo = e->ldo;
    p->mode = (int)e->mode, p->act = (int)e->act, p->has_bias = has_bias, p->dt = dt;
    /* row-major out (m, n) = a (m, k) · wᵀ is column-major outᵀ (n, m) = op_T(w) · a */
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int relu = e->mode == CUDA_EPI_F16 && e->act == CUDA_ACT_RELU; /* others: act_pass */
    cublasLtEpilogue_t ep = has_bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                                     : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    cudaDataType_t ab = dt == OPS_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    cudaDataType_t ct = e->mode == CUDA_EPI_F16 ? ab : CUDA_R_32F;
    size_t ws = OPS_WORKSPACE_BYTES;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) ||
        cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)k, (uint64_t)n, k) ||
        cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)k, (uint64_t)m, lda) ||
        cublasLtMatrixLayoutCreate(&p->lc, ct, (uint64_t)n, (uint64_t)m, e->ldo) ||
        cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) ||
        cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                       &found) ||
        found < 1) {
        p->ok = 0;
    } else {
        p->algo = res.algo;
        p->ok = 1;
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    return p->ok ? p : NULL;
}

/* out (m, n) half, row stride ldo, = act(out) in place: the swish / GELU cuBLASLt has no
 * epilogue for, 8 halves per thread where the rows allow */
template <typename T, int ACT>
__global__ void act_pass_kernel(T *out, int m, int n, long long ldo, int vec)
{
    long long per = vec ? n / 8 : n, total = (long long)m * per;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        long long r = i / per, c = i - r * per;
        if (vec) {
            uint4 *p = (uint4 *)(out + r * ldo + c * 8);
            uint4 u = *p;
            typename h16<T>::T2 *h = (typename h16<T>::T2 *)&u;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                float2 f = h16<T>::to_f2(h[k]);
                h[k] = h16<T>::from_f2(epi_act<ACT>(f.x), epi_act<ACT>(f.y));
            }
            *p = u;
        } else {
            T *p = out + r * ldo + c;
            *p = h16<T>::from_f(epi_act<ACT>(h16<T>::to_f(*p)));
        }
    }
}

template <typename T>
static int act_pass(ops_cuda_t *g, const cuda_epi_t *e, int m, int n, hark_err_t *err)
{
    int vec = n % 8 == 0 && e->ldo % 8 == 0 && al16(e->out);
    long long total = (long long)m * (vec ? n / 8 : n);
    unsigned grid = (unsigned)((total + 255) / 256 < 65536 ? (total + 255) / 256 : 65536);
    if (e->act == CUDA_ACT_SWISH)
        act_pass_kernel<T, CUDA_ACT_SWISH>
            <<<grid, 256, 0, g->stream>>>((T *)e->out, m, n, e->ldo, vec);
    else if (e->act == CUDA_ACT_DSWISH)
        act_pass_kernel<T, CUDA_ACT_DSWISH>
            <<<grid, 256, 0, g->stream>>>((T *)e->out, m, n, e->ldo, vec);
    else if (e->act == CUDA_ACT_SWOOSHL)
        act_pass_kernel<T, CUDA_ACT_SWOOSHL>
            <<<grid, 256, 0, g->stream>>>((T *)e->out, m, n, e->ldo, vec);
    else if (e->act == CUDA_ACT_SWOOSHR)
        act_pass_kernel<T, CUDA_ACT_SWOOSHR>
            <<<grid, 256, 0, g->stream>>>((T *)e->out, m, n, e->ldo, vec);
    else
        act_pass_kernel<T, CUDA_ACT_GELU>
            <<<grid, 256, 0, g->stream>>>((T *)e->out, m, n, e->ldo, vec);
    return launched(err, "act_pass_kernel");
}

/* HARK_OK, HARK_ERR_UNSUPPORTED (no algorithm: the caller runs the mma kernel) or the failure */
static int lt_run(ops_cuda_t *g, const cuda_epi_t *e, const void *a, long long lda, const void *w,
                  int m, int n, int k, hark_err_t *err)
{
    lt_plan *p = lt_get(g, e, lda, m, n, k);
    if (!p)
        return HARK_ERR_UNSUPPORTED;
    float alpha = 1.0f, beta = 0.0f;
    const void *bias = e->bias; /* of D's type */
    if (e->mode == CUDA_EPI_F16 && bias)
        bias = e->bias_h;
    if (e->mode == CUDA_EPI_RESID32) {
        alpha = e->alpha;
        beta = e->beta;
        if (bias && alpha != 1.0f)
            bias = e->bias_alpha;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (bias)
        st = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmul(g->lt, p->op, &alpha, w, p->la, a, p->lb, &beta, e->out, p->lc, e->out,
                            p->lc, &p->algo, g->workspace, OPS_WORKSPACE_BYTES, g->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return err_set(err, HARK_ERR_CUDA, "cublasLt: hgemm %dx%dx%d: %s", m, n, k,
                       cublasGetStatusString(st));
    if (e->mode == CUDA_EPI_F16 &&
        (e->act == CUDA_ACT_SWISH || e->act == CUDA_ACT_GELU || e->act >= CUDA_ACT_DSWISH))
        return epi_dt(e) == OPS_BF16 ? act_pass<__nv_bfloat16>(g, e, m, n, err)
                                     : act_pass<__half>(g, e, m, n, err);
    return HARK_OK;
}

/* one warp per row: merge the row's partials, then argmax and its log-probability */
__global__ void lse_combine_kernel(int *arg, float *best, const float4 *part, int ntiles,
                                   const int *lens, int t_rows, int n)
{
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n)
        return;
    if (lens && row % t_rows >= lens[row / t_rows]) {
        if (lane == 0) {
            arg[row] = 0;
            if (best)
                best[row] = 0.0f;
        }
        return;
    }
    lse3 a = {-INFINITY, 0.0f, -1};
    for (int t = lane; t < ntiles; t += 32) {
        float4 p = part[(long long)row * ntiles + t];
        lse3 b = {p.x, p.y, __float_as_int(p.z)};
        a = lse_merge3(a, b);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        a = lse_shfl(a, o);
    if (lane == 0) {
        arg[row] = a.i >= 0 ? a.i : 0;
        if (best)
            best[row] = -logf(a.s); /* x_max - log Σ exp(x) */
    }
}

extern "C" int cuda_lse_argmax(int *arg, float *best, const void *partials, int v, const int *lens,
                               int t_rows, int n, void *stream, hark_err_t *err)
{
    if (n <= 0 || v <= 0)
        return HARK_OK;
    if (!arg || (lens && t_rows <= 0))
        return err_set(err, HARK_ERR_INVALID_ARG, "lse_argmax: t_rows %d", t_rows);
    lse_combine_kernel<<<(unsigned)((n + 7) / 8), 256, 0, (cudaStream_t)stream>>>(
        arg, best, (const float4 *)partials, CUDA_LSE_TILES(v), lens, t_rows, n);
    return launched(err, "lse_combine_kernel");
}

/* the hgemm of plain rows on the mma.sync or (wg) the wgmma kernel, in element type T */
template <typename T>
static int hgemm_rows(const cuda_epi_t *epi, const void *a, long long lda, const void *w, int m,
                      int n, int k, cudaStream_t st, int wg, hark_err_t *err)
{
    gemm_a_t<T> A = {(const T *)a, lda, 0, 0, 0, 0, 0, 0, 0, 0};
    return hgemm_run(A, (const T *)w, m, n, k, epi_of(epi), st, wg, err);
}

static int hgemm_rows_dt(const cuda_epi_t *epi, const void *a, long long lda, const void *w, int m,
                         int n, int k, cudaStream_t st, int wg, hark_err_t *err)
{
    if (epi_dt(epi) == OPS_BF16)
        return hgemm_rows<__nv_bfloat16>(epi, a, lda, w, m, n, k, st, wg, err);
    return hgemm_rows<__half>(epi, a, lda, w, m, n, k, st, wg, err);
}

extern "C" int cuda_hgemm(const cuda_epi_t *epi, const void *a, long long lda, const void *w, int m,
                          int n, int k, ops_cuda_t *g, hark_err_t *err)
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
    if (epi->mode == CUDA_EPI_RESID32 && epi->norm) {
        const cuda_row_norms_t *nm = epi->norm;
        /* fused where its 128-row blocks fill at least half the GPU and k is short (H100: at
         * batch 1 and 8 two blocks / the 2048-deep FFN GEMM are latency-bound there, cuBLASLt +
         * the norm pass faster) */
        long long blocks = (m + 127) / 128;
        if ((g->backend == OPS_GEMM_AUTO || g->backend == OPS_GEMM_WGMMA) &&
            g->path == GPU_PATH_HOPPER && n == ROW_D && k <= 1024 && blocks * 2 >= g->sms) {
            g->last = OPS_GEMM_WGMMA;
            return hgemm_rows_dt(epi, a, lda, w, m, n, k, g->stream, 1, err);
        }
        cuda_epi_t plain = *epi; /* the update, then a separate pass for the norms */
        plain.norm = NULL;
        rc = cuda_hgemm(&plain, a, lda, w, m, n, k, g, err);
        if (rc != HARK_OK)
            return rc;
        float *x = (float *)epi->out;
        return cuda_rows_norm(nm->x_sel ? x : NULL, nm->x_sel, nm->h_out, epi_dt(epi), NULL, x,
                              nm->g1, nm->n_b1, nm->ln1, nm->g2, nm->n_b2, nm->ln2, NULL, 0, m, n,
                              nm->eps, g->stream, err);
    }
    /* AUTO: cuBLASLt where it expresses the epilogue, except an activation it lacks (a second
     * pass over the output) on a GEMM too small for that to pay */
    int post =
        epi->mode == CUDA_EPI_F16 &&
        (epi->act == CUDA_ACT_SWISH || epi->act == CUDA_ACT_GELU || epi->act >= CUDA_ACT_DSWISH);
    /* AUTO runs swish/GELU as cuBLASLt + a second pass (H100, FFN w1 at batch 256: 0.31 ms
     * against 0.37 for the fused mma.sync or wgmma kernels); HARK_LT_ACT_PASS=0 keeps them fused */
    static int lt_post = -1;
    if (lt_post < 0) {
        const char *ev = getenv("HARK_LT_ACT_PASS");
        lt_post = !(ev && *ev == '0');
    }
    if ((g->backend == OPS_GEMM_LT || (g->backend == OPS_GEMM_AUTO && (!post || lt_post))) &&
        lt_expresses(epi) && al16(epi->out)) {
        rc = lt_run(g, epi, a, lda, w, m, n, k, err);
        if (rc != HARK_ERR_UNSUPPORTED) {
            g->last = OPS_GEMM_LT;
            return rc;
        }
    }
    int wg = wgmma_takes(g, m, n, k);
    g->last = wg ? OPS_GEMM_WGMMA : OPS_GEMM_MMA;
    return hgemm_rows_dt(epi, a, lda, w, m, n, k, g->stream, wg, err);
}

extern "C" int cuda_hconv2d(const cuda_epi_t *epi, const void *in, const void *w, int batch,
                            int cin, int h, int w_in, int cout, int kh, int kw, int stride,
                            ops_cuda_t *g, hark_err_t *err)
{
    int rc = epi_check(epi, cout, err);
    if (rc != HARK_OK)
        return rc;
    if (cin <= 0 || cin % 8 || kh <= 0 || kw <= 0 || stride <= 0 || !al16(in) || !al16(w))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hconv2d: cin %d (a multiple of 8), kernel %dx%d, stride %d, operands "
                       "16-byte aligned",
                       cin, kh, kw, stride);
    int h_out = h < kh ? 0 : (h - kh) / stride + 1,
        w_out = w_in < kw ? 0 : (w_in - kw) / stride + 1;
    if (batch <= 0 || h_out <= 0 || w_out <= 0)
        return HARK_OK;
    long long m = (long long)batch * h_out * w_out;
    if (m > 0x7fffffffLL)
        return err_set(err, HARK_ERR_TOO_LARGE, "hconv2d: %lld output positions", m);
    int K = kh * kw * cin, wg = wgmma_takes(g, (int)m, cout, K);
    g->last = wg ? OPS_GEMM_WGMMA : OPS_GEMM_MMA;
    if (epi_dt(epi) == OPS_BF16) {
        gemm_a_t<__nv_bfloat16> A = {
            (const __nv_bfloat16 *)in, 0, 1, cin, h, w_in, kw, stride, h_out, w_out};
        return hgemm_run(A, (const __nv_bfloat16 *)w, (int)m, cout, K, epi_of(epi), g->stream, wg,
                         err);
    }
    gemm_a_t<__half> A = {(const __half *)in, 0, 1, cin, h, w_in, kw, stride, h_out, w_out};
    return hgemm_run(A, (const __half *)w, (int)m, cout, K, epi_of(epi), g->stream, wg, err);
}
