/* ffn_f16.cu — the Conformer feed-forward module as one Hopper kernel, for either 16-bit type
 * (FP16 or BF16 operands: the kernel is a template over the element type; "half" below is it):
 *     x (m, 256) float += alpha · (act(a · w1ᵀ + b1) · w2ᵀ + b2), then the layer norms after it
 * A block takes 128 rows of a (two warpgroups of 64) and walks the hidden dimension in chunks of
 * 64: s = a · w1[chunk]ᵀ (wgmma m64n64k16, both operands in shared memory), then bias +
 * activation on the accumulators, rounded to half in registers, then o += s · w2[:, chunk]ᵀ
 * (wgmma m64n256k16 with its A operand taken from those registers). The (m, f) hidden
 * activations never reach memory: the two-GEMM path writes and reads them (2 · m · f · 2 bytes,
 * twice again for a separate activation pass), which at batch 256 costs more than the GEMMs'
 * arithmetic.
 * Shared memory: the a tile (64 KiB, kept for the whole walk) and two buffers each of the w1 and
 * w2 chunks (32 KiB each), 128-byte-swizzled K-major as wgmma reads them. Per chunk j: S(j); its
 * activation; wait for chunk j + 1's copies; a block barrier (every warpgroup has finished S(j)
 * and O(j - 1)); issue O(j); copy w1 chunk j + 2 and w2 chunk j + 1 into the freed buffers; O(j)
 * left in flight until S(j + 1) waits. The two warpgroups meet the barrier at different points
 * (before / after their activation), so that one's activation overlaps the other's wgmmas.
 * The epilogue adds into the residual stream and runs the layer norms that follow the module (a
 * row's 256 values sit in the 4 threads of a quad): the separate norm pass is gone too.
 * CPU reference: matmul_ref + activation_ref, rounded to half, + matmul_ref + the update, then
 * layer_norm_ref. Test: tests/ops/test_ops_cuda.c (cuda_ffn_f16_matches_ref). */
#include "ops/ops_cuda.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define FF_D 256  /* model width: the output tile is a whole row */
#define FF_HC 64  /* hidden units per chunk */
#define FF_BM 128 /* rows per block */
#define FF_THREADS 256
#define FF_X_BYTES (FF_BM * FF_D * 2)
#define FF_W1_BYTES (FF_HC * FF_D * 2)
#define FF_W2_BYTES (FF_D * FF_HC * 2)
#define FF_B1_SLOTS 4 /* b1 chunks in shared memory: chunk j + 2 is copied while j is read */
#define FF_SMEM (FF_X_BYTES + 2 * FF_W1_BYTES + 2 * FF_W2_BYTES + FF_B1_SLOTS * FF_HC * 4 + 1024)

/* s (64 x 64, this warpgroup's fragments) = [s +] A (64 x 16) · B (64 x 16)ᵀ, both from shared
 * memory; acc 0: s is overwritten */
#define WGMMA_M64N64K16_ASM(TY)                                                                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_R32                \
                 ", %32, %33, p, 1, 1, 0, 0;\n}\n"                                                 \
                 : WG_D32                                                                          \
                 : "l"(da), "l"(db), "r"(acc))
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float d[32], uint64_t da, uint64_t db, int acc)
{
    if constexpr (h16<T>::bf16)
        WGMMA_M64N64K16_ASM("bf16");
    else
        WGMMA_M64N64K16_ASM("f16");
}
#undef WGMMA_M64N64K16_ASM

/* d (64 x 256) += A (64 x 16, 16-bit fragments in registers, the mma.sync m16n8k16 A layout per
 * warp) · B (256 x 16)ᵀ from shared memory */
#define WGMMA_M64N256K16_RS_ASM(TY)                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                        \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " " WG_R128              \
                 ", {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"                              \
                 : WG_D128                                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db))
template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float d[128], const unsigned a[4], uint64_t db)
{
    if constexpr (h16<T>::bf16)
        WGMMA_M64N256K16_RS_ASM("bf16");
    else
        WGMMA_M64N256K16_RS_ASM("f16");
}
#undef WGMMA_M64N256K16_RS_ASM

/* byte offset of 16-byte chunk c of row r in a K-major 128-byte-swizzled tile of `rows` rows and
 * 8 · (number of atoms) chunks: atoms of 64 columns are rows · 128 bytes apart */
__device__ __forceinline__ unsigned sw_off(int r, int c, int rows)
{
    return (unsigned)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

template <typename T, int ACT>
__global__ void __launch_bounds__(FF_THREADS, 1)
    ffn_wgmma_kernel(float *__restrict__ x, const T *a, const T *__restrict__ w1,
                     const float *__restrict__ b1, const T *__restrict__ w2,
                     const float *__restrict__ b2, int M, int F, float alpha, int has_norm,
                     cuda_row_norms_t nm)
{
#if HARK_DEV_HOPPER
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
    unsigned pad = ((base + 1023u) & ~1023u) - base; /* the swizzle needs 1024-byte alignment */
    unsigned char *smem = smem_raw + pad;
    unsigned sbase = base + pad;
    unsigned char *s_w1 = smem + FF_X_BYTES, *s_w2 = s_w1 + 2 * FF_W1_BYTES;
    float *s_b1 = (float *)(s_w2 + 2 * FF_W2_BYTES); /* FF_B1_SLOTS x 64 */
    int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wq = (tid >> 5) & 3;
    int t4 = lane & 3;
    int m0 = blockIdx.x * FF_BM, NC = F / FF_HC;

    /* copies: 16-byte chunks, consecutive threads along a row */
#pragma unroll
    for (int i = 0; i < FF_X_BYTES / 16 / FF_THREADS; i++) {
        int id = tid + FF_THREADS * i, r = id >> 5, c = id & 31;
        bool ok = m0 + r < M;
        cp_async16(smem + sw_off(r, c, FF_BM), ok ? a + (long long)(m0 + r) * FF_D + c * 8 : a, ok);
    }
    auto load_w1 = [&](int j) { /* rows j·64 .. +63 of w1 (f, 256) */
                                unsigned char *s = s_w1 + (j & 1) * FF_W1_BYTES;
                                const T *src = w1 + (long long)j * FF_HC * FF_D;
#pragma unroll
                                for (int i = 0; i < FF_W1_BYTES / 16 / FF_THREADS; i++) {
                                    int id = tid + FF_THREADS * i, r = id >> 5, c = id & 31;
                                    cp_async16(s + sw_off(r, c, FF_HC), src + r * FF_D + c * 8,
                                               true);
                                }
                                /* its 64 biases (zeros without b1) travel with it: read after
                                 * the same barrier, never from global memory in the loop */
                                if (tid < FF_HC / 4)
                                    cp_async16(s_b1 + (j % FF_B1_SLOTS) * FF_HC + tid * 4,
                                               b1 ? b1 + j * FF_HC + tid * 4 : (const float *)w1,
                                               b1 != nullptr);
    };
    auto load_w2 = [&](int j) { /* columns j·64 .. +63 of w2 (256, f) */
                                unsigned char *s = s_w2 + (j & 1) * FF_W2_BYTES;
                                const T *src = w2 + (long long)j * FF_HC;
#pragma unroll
                                for (int i = 0; i < FF_W2_BYTES / 16 / FF_THREADS; i++) {
                                    int id = tid + FF_THREADS * i, n = id >> 3, c = id & 7;
                                    cp_async16(s + sw_off(n, c, FF_D),
                                               src + (long long)n * F + c * 8, true);
                                }
    };
    auto block_sync_copies = [&]() {
        cp_async_wait<0>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync 1, %0;\n" ::"n"(FF_THREADS) : "memory");
    };
    auto load_next = [&](int j) { /* into the buffers of w1 chunk j and w2 chunk j - 1 */
                                  if (j + 2 < NC)
                                      load_w1(j + 2);
                                  if (j + 1 < NC)
                                      load_w2(j + 1);
                                  cp_async_commit();
    };
    load_w1(0);
    if (NC > 1)
        load_w1(1);
    load_w2(0);
    cp_async_commit();
    cp_async_wait<0>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();

    float o[128], s[32];
    unsigned p[16];
#pragma unroll
    for (int i = 0; i < 128; i++)
        o[i] = 0.0f;
    unsigned xs = sbase + wg * 64 * 128; /* this warpgroup's 64 rows of the a tile */
    for (int j = 0; j < NC; j++) {
        unsigned w1s = sbase + FF_X_BYTES + (j & 1) * FF_W1_BYTES;
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < FF_D / 16; ks++)
            wgmma_m64n64k16<T>(s, wg_desc(xs + (ks >> 2) * FF_BM * 128 + (ks & 3) * 32),
                               wg_desc(w1s + (ks >> 2) * FF_HC * 128 + (ks & 3) * 32), ks > 0);
        wg_commit();
        wg_wait<0>(); /* S(j) and O(j - 1) */
#pragma unroll
        for (int i = 0; i < 32; i++)
            asm volatile("" : "+f"(s[i])::"memory");
        /* Warpgroup 1 meets the block barrier before its activation, warpgroup 0 after its
         * own: one warpgroup's activation then runs while the other's wgmmas keep the tensor
         * cores busy. The barrier (bar.sync counts arrivals, wherever they come from) means:
         * every thread's copies of w1 chunk j + 1 and w2 chunk j landed, and both warpgroups are
         * past S(j) and O(j - 1), whose buffers the next copies overwrite. */
        if (wg == 1) {
            block_sync_copies();
            load_next(j);
        }
        /* s[4q + e]: row g (+8 for e >= 2), hidden column 8q + 2·t4 + (e & 1) */
#pragma unroll
        for (int q = 0; q < 8; q++) {
            float2 cb = *(const float2 *)(s_b1 + (j % FF_B1_SLOTS) * FF_HC + q * 8 + t4 * 2);
            float c0 = cb.x, c1 = cb.y;
            /* k-step q / 2 of O: registers {row g lo, row g+8 lo, row g hi, row g+8 hi} */
            int r = (q >> 1) * 4 + (q & 1) * 2;
            p[r] = pack2<T>(epi_act<ACT>(s[4 * q] + c0), epi_act<ACT>(s[4 * q + 1] + c1));
            p[r + 1] = pack2<T>(epi_act<ACT>(s[4 * q + 2] + c0), epi_act<ACT>(s[4 * q + 3] + c1));
        }
        if (wg == 0)
            block_sync_copies();
        unsigned w2s = sbase + FF_X_BYTES + 2 * FF_W1_BYTES + (j & 1) * FF_W2_BYTES;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < FF_HC / 16; kk++)
            wgmma_m64n256k16_rs<T>(o, p + kk * 4, wg_desc(w2s + kk * 32));
        wg_commit();
        if (wg == 0) /* the copies into the freed buffers, while O(j) runs */
            load_next(j);
    }
    wg_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; i++)
        asm volatile("" : "+f"(o[i])::"memory");
    epi_resid_norms256<T>(o, x, b2, alpha, has_norm, nm, M, m0 + wg * 64 + wq * 16, lane);
#else
    __trap(); /* never launched off the Hopper path */
#endif
}

template <typename T, int ACT>
static int ffn_launch(float *x, const void *a, const void *w1, const float *b1, const void *w2,
                      const float *b2, int m, int f, float alpha, const cuda_row_norms_t *norm,
                      cudaStream_t st, hark_err_t *err)
{
    static bool set[64];
    auto kern = ffn_wgmma_kernel<T, ACT>;
    cudaError_t e = ops_smem_opt_in((const void *)kern, FF_SMEM, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: ffn smem attribute: %s", cudaGetErrorString(e));
    cuda_row_norms_t nm = {0, NULL, NULL, NULL, NULL, 0, 0, NULL, 0.0f};
    if (norm)
        nm = *norm;
    kern<<<(m + FF_BM - 1) / FF_BM, FF_THREADS, FF_SMEM, st>>>(
        x, (const T *)a, (const T *)w1, b1, (const T *)w2, b2, m, f, alpha, norm != NULL, nm);
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: ffn_wgmma_kernel: %s", cudaGetErrorString(e));
    return HARK_OK;
}

extern "C" int cuda_ffn_f16_fits(const ops_cuda_t *g, int d, int f)
{
    return g && g->path == GPU_PATH_HOPPER && d == FF_D && f > 0 && f % FF_HC == 0;
}

/* A block holds an SM for the whole hidden walk, so the time goes in waves of g->sms blocks;
 * measured on an H100 (bench_hgemm --ffn): one full wave of 128-row blocks beats the two GEMMs
 * from about 70% occupancy of the last wave on */
extern "C" int cuda_ffn_f16_prefers(const ops_cuda_t *g, int m)
{
    if (!g || g->sms <= 0 || m <= 0)
        return 0;
    long long blocks = (m + FF_BM - 1) / FF_BM, waves = (blocks + g->sms - 1) / g->sms;
    return blocks * 10 >= waves * g->sms * 7;
}

template <typename T>
static int ffn_run(float *x, const void *a, const void *w1, const float *b1, const void *w2,
                   const float *b2, int m, int f, cuda_act_t act, float alpha,
                   const cuda_row_norms_t *norm, cudaStream_t st, hark_err_t *err)
{
    switch (act) {
    case CUDA_ACT_RELU:
        return ffn_launch<T, CUDA_ACT_RELU>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    case CUDA_ACT_SWISH:
        return ffn_launch<T, CUDA_ACT_SWISH>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    case CUDA_ACT_GELU:
        return ffn_launch<T, CUDA_ACT_GELU>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    case CUDA_ACT_DSWISH:
        return ffn_launch<T, CUDA_ACT_DSWISH>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    case CUDA_ACT_SWOOSHL:
        return ffn_launch<T, CUDA_ACT_SWOOSHL>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    case CUDA_ACT_SWOOSHR:
        return ffn_launch<T, CUDA_ACT_SWOOSHR>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    default:
        return ffn_launch<T, CUDA_ACT_NONE>(x, a, w1, b1, w2, b2, m, f, alpha, norm, st, err);
    }
}

extern "C" int cuda_ffn(float *x, ops_dtype_t dt, const void *a, const void *w1, const float *b1,
                        const void *w2, const float *b2, int m, int d, int f, cuda_act_t act,
                        float alpha, const cuda_row_norms_t *norm, ops_cuda_t *g, hark_err_t *err)
{
    if (!x || !a || !w1 || !w2 || m < 0 || !cuda_ffn_f16_fits(g, d, f) ||
        (dt != OPS_F16 && dt != OPS_BF16) || (norm && (norm->x_sel < 0 || norm->x_sel > 2)))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "cuda_ffn: needs the Hopper path, d = %d, f a multiple of %d and a 16-bit "
                       "type (d %d, f %d, m %d, dtype %d)",
                       FF_D, FF_HC, d, f, m, (int)dt);
    if (m == 0)
        return HARK_OK;
    if (dt == OPS_BF16)
        return ffn_run<__nv_bfloat16>(x, a, w1, b1, w2, b2, m, f, act, alpha, norm, g->stream, err);
    return ffn_run<__half>(x, a, w1, b1, w2, b2, m, f, act, alpha, norm, g->stream, err);
}

extern "C" int cuda_ffn_f16(float *x, const void *a, const void *w1, const float *b1,
                            const void *w2, const float *b2, int m, int d, int f, cuda_act_t act,
                            float alpha, const cuda_row_norms_t *norm, ops_cuda_t *g,
                            hark_err_t *err)
{
    return cuda_ffn(x, OPS_F16, a, w1, b1, w2, b2, m, d, f, act, alpha, norm, g, err);
}
