/* attention_f16.cu — fused multi-head attention over a padded FP16 or BF16 batch (the kernel is a
 * template over the 16-bit element type) in one pass over key tiles (flash-attention style:
 * scores, masked online softmax in FP32 registers and the value product, mma.sync m16n8k16 with
 * FP32 accumulation); WeNet's rel_selfattn runs as one attention with doubled head width:
 * [q + bu | q + bv] · [k | p]ᵀ. The (batch, heads, t, t) score matrix is never written to memory.
 * CPU reference: attention_ref (ops_cpu.c), masked as softmax_masked_ref.
 * Tests: tests/ops/test_ops_cuda.c (cuda_flash_attention_matches_ref). */
#include "ops/ops_cuda.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define QT 128 /* queries per block (8 warps × 16): each key tile is loaded once per 128 */
#define KT 64  /* keys per tile */

template <typename T> struct fa_args {
    const T *q, *k, *v; /* row (b·t + i), head h at column h·dk; row stride ld */
    long long ld;
    const T *p; /* (t, ·) row stride ldp, or NULL */
    long long ldp;
    const float *bu, *bv; /* (H, dk) or NULL */
    const int *lens;
    int chunk, left, t, heads, dk;
    float scale_log2; /* scale · log2(e) */
    T *out;           /* (b·t + i, ·) row stride ldo, head h at h·dk */
    long long ldo;
    int vec; /* 16-byte loads allowed */
};

/* rows [0, NR) of a tile: dst[r][c] (row stride lds halves) = src row (row0 + r) columns
 * [0, dk) (+ bias[c] in FP32 when given), zero for c in [dk, dkp) and for rows past `rows` */
template <typename T, int DKP, int NR>
__device__ __forceinline__ void load_rows(T *dst, int lds, const T *src, long long ld, int row0,
                                          int rows, int dk, const float *bias, int vec)
{
    constexpr int CH = DKP / 8;
    for (int idx = threadIdx.x; idx < NR * CH; idx += blockDim.x) {
        int r = idx / CH, c8 = (idx - r * CH) * 8;
        T *d = dst + r * lds + c8;
        const T *s = src + (long long)(row0 + r) * ld + c8;
        bool row_ok = r < rows;
        if (vec && row_ok && c8 + 8 <= dk) {
            uint4 u = *(const uint4 *)s;
            if (bias) {
                T *hv = (T *)&u;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    hv[e] = h16<T>::from_f(h16<T>::to_f(hv[e]) + bias[c8 + e]);
            }
            *(uint4 *)d = u;
            continue;
        }
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float v = 0.0f;
            if (row_ok && c8 + e < dk)
                v = h16<T>::to_f(s[e]) + (bias ? bias[c8 + e] : 0.0f);
            d[e] = h16<T>::from_f(v);
        }
    }
}

/* rows [0, NR) of a tile by cp.async (16-byte chunks; rows past `rows` zero-filled): the key /
 * position / value tiles when every row is DKP aligned halves (a.vec, dk == DKP) */
template <typename T, int DKP, int NR>
__device__ __forceinline__ void load_rows_async(T *dst, int lds, const T *src, long long ld,
                                                int row0, int rows)
{
    constexpr int CH = DKP / 8;
    for (int idx = threadIdx.x; idx < NR * CH; idx += blockDim.x) {
        int r = idx / CH, c8 = (idx - r * CH) * 8;
        bool ok = r < rows;
        cp_async16(dst + r * lds + c8, ok ? src + (long long)(row0 + r) * ld + c8 : src, ok);
    }
}

/* grid (ceil(t / QT), heads, batch), QT / 16 warps */
/* E: the 16-bit element type (T is the utterance length here) */
template <typename E, int DKP, int REL>
__global__ void __launch_bounds__(QT * 2, 2) flash_attention_kernel(fa_args<E> a)
{
    constexpr int W = REL ? 2 * DKP : DKP; /* score width */
    constexpr int LQ = W + 8, LV = DKP + 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int KV = KT * LQ + KT * LV; /* one buffer of key (| position) and value rows */
    E *sQ = (E *)smem_raw;                /* (QT, LQ), then two buffers: K (KT, LQ), V (KT, LV) */
    int q0 = blockIdx.x * QT, h = blockIdx.y, b = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    int T = a.t, dk = a.dk, len = a.lens ? min(a.lens[b], T) : T;
    long long rowb = (long long)b * T;
    int hc = h * dk;

    /* the key range of the thread's two rows (g and g + 8 of the warp's 16) */
    int lo[2], hi[2];
#pragma unroll
    for (int s = 0; s < 2; s++) {
        int i = q0 + warp * 16 + g + s * 8;
        lo[s] = 0;
        hi[s] = len;
        if (a.chunk > 0) {
            int ci = i / a.chunk, e = (ci + 1) * a.chunk;
            hi[s] = min(hi[s], e);
            if (a.left >= 0)
                lo[s] = max((ci - a.left) * a.chunk, 0);
        }
    }

    float o[DKP / 8][4];
#pragma unroll
    for (int j = 0; j < DKP / 8; j++)
#pragma unroll
        for (int r = 0; r < 4; r++)
            o[j][r] = 0.0f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};

    int ntiles = (len + KT - 1) / KT;
    /* aligned full-width rows: tile kt + 1 is copied (cp.async) while tile kt is used */
    bool async = a.vec && dk == DKP;
    auto load_kv = [&](int kt) {
        int j0 = kt * KT;
        E *sK = sQ + QT * LQ + (kt & 1) * KV, *sV = sK + KT * LQ;
        if (async) {
            load_rows_async<E, DKP, KT>(sK, LQ, a.k + rowb * a.ld + hc, a.ld, j0, T - j0);
            if (REL)
                load_rows_async<E, DKP, KT>(sK + DKP, LQ, a.p + hc, a.ldp, j0, T - j0);
            load_rows_async<E, DKP, KT>(sV, LV, a.v + rowb * a.ld + hc, a.ld, j0, T - j0);
            cp_async_commit();
            return;
        }
        load_rows<E, DKP, KT>(sK, LQ, a.k + rowb * a.ld + hc, a.ld, j0, T - j0, dk, NULL, a.vec);
        if (REL)
            load_rows<E, DKP, KT>(sK + DKP, LQ, a.p + hc, a.ldp, j0, T - j0, dk, NULL, a.vec);
        load_rows<E, DKP, KT>(sV, LV, a.v + rowb * a.ld + hc, a.ld, j0, T - j0, dk, NULL, a.vec);
    };
    if (async && ntiles > 0)
        load_kv(0); /* in flight while Q' is loaded */
    /* Q' = [q + bu | q + bv] (REL) or q */
    load_rows<E, DKP, QT>(sQ, LQ, a.q + rowb * a.ld + hc, a.ld, q0, T - q0, dk,
                          a.bu ? a.bu + hc : NULL, a.vec);
    if (REL)
        load_rows<E, DKP, QT>(sQ + DKP, LQ, a.q + rowb * a.ld + hc, a.ld, q0, T - q0, dk,
                              a.bv ? a.bv + hc : NULL, a.vec);
    for (int kt = 0; kt < ntiles; kt++) {
        int j0 = kt * KT;
        __syncthreads(); /* tile kt - 1 is consumed (and Q' is written, the first time) */
        if (async) {
            if (kt + 1 < ntiles)
                load_kv(kt + 1); /* into the buffer tile kt - 1 used */
            else
                cp_async_commit();
            cp_async_wait<1>(); /* this thread's copies of tile kt landed */
        } else {
            load_kv(kt);
        }
        __syncthreads();
        const E *sK = sQ + QT * LQ + (kt & 1) * KV, *sV = sK + KT * LQ;

        float s[KT / 8][4];
#pragma unroll
        for (int j = 0; j < KT / 8; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                s[j][r] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < W / 16; ks++) {
            unsigned af[4];
            ldsm_x4(af, sQ + (warp * 16 + (lane & 15)) * LQ + ks * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < KT / 16; np++) {
                unsigned bf[4];
                ldsm_x4(bf, sK + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LQ + ks * 16 +
                                ((lane >> 3) & 1) * 8);
                mma16816<E>(s[2 * np], af, bf[0], bf[1]);
                mma16816<E>(s[2 * np + 1], af, bf[2], bf[3]);
            }
        }
        /* mask, online softmax (base 2) */
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < KT / 8; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int rs = r >> 1, key = j0 + j * 8 + t4 * 2 + (r & 1);
                float v = key >= lo[rs] && key < hi[rs] ? s[j][r] * a.scale_log2 : -INFINITY;
                s[j][r] = v;
                tmax[rs] = fmaxf(tmax[rs], v);
            }
        float corr[2];
#pragma unroll
        for (int rs = 0; rs < 2; rs++) {
            tmax[rs] = fmaxf(tmax[rs], __shfl_xor_sync(0xffffffffu, tmax[rs], 1));
            tmax[rs] = fmaxf(tmax[rs], __shfl_xor_sync(0xffffffffu, tmax[rs], 2));
            float mnew = fmaxf(mrow[rs], tmax[rs]);
            float muse = mnew == -INFINITY ? 0.0f : mnew;
            corr[rs] = ex2_ftz(mrow[rs] - muse); /* 0 while nothing was kept */
            mrow[rs] = mnew;
            lrow[rs] *= corr[rs];
            tmax[rs] = muse;
        }
#pragma unroll
        for (int j = 0; j < KT / 8; j++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float p = ex2_ftz(s[j][r] - tmax[r >> 1]);
                s[j][r] = p;
                lrow[r >> 1] += p;
            }
#pragma unroll
        for (int j = 0; j < DKP / 8; j++) {
            o[j][0] *= corr[0];
            o[j][1] *= corr[0];
            o[j][2] *= corr[1];
            o[j][3] *= corr[1];
        }
        /* o += P · V: P's accumulator layout is the A fragment of the next mma */
#pragma unroll
        for (int kk = 0; kk < KT / 16; kk++) {
            unsigned pa[4] = {pack2<E>(s[2 * kk][0], s[2 * kk][1]),
                              pack2<E>(s[2 * kk][2], s[2 * kk][3]),
                              pack2<E>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack2<E>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dn = 0; dn < DKP / 16; dn++) {
                unsigned vf[4];
                ldsm_x4_t(vf, sV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LV + dn * 16 +
                                  (lane >> 4) * 8);
                mma16816<E>(o[2 * dn], pa, vf[0], vf[1]);
                mma16816<E>(o[2 * dn + 1], pa, vf[2], vf[3]);
            }
        }
    }
    float inv[2];
#pragma unroll
    for (int rs = 0; rs < 2; rs++) {
        float l = lrow[rs];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[rs] = l > 0.0f ? 1.0f / l : 0.0f; /* an empty key range gives a zero row */
    }
#pragma unroll
    for (int rs = 0; rs < 2; rs++) {
        int i = q0 + warp * 16 + g + rs * 8;
        if (i >= T)
            continue;
        E *dst = a.out + (rowb + i) * a.ldo + hc;
#pragma unroll
        for (int j = 0; j < DKP / 8; j++) {
            int c = j * 8 + t4 * 2;
            float v0 = o[j][rs * 2] * inv[rs], v1 = o[j][rs * 2 + 1] * inv[rs];
            if (c + 1 < dk && a.vec)
                *(typename h16<E>::T2 *)(dst + c) = h16<E>::from_f2(v0, v1);
            else {
                if (c < dk)
                    dst[c] = h16<E>::from_f(v0);
                if (c + 1 < dk)
                    dst[c + 1] = h16<E>::from_f(v1);
            }
        }
    }
}

/* shared memory of a block: the query tile and two stages of key, position and value tiles */
static constexpr size_t fa_smem(int dkp, int rel)
{
    return ((size_t)QT * ((rel ? 2 * dkp : dkp) + 8) +
            2 * ((size_t)KT * ((rel ? 2 * dkp : dkp) + 8) + KT * (dkp + 8))) *
           2;
}

template <typename T, int DKP, int REL>
static int fa_launch(const fa_args<T> &a, int batch, cudaStream_t st, hark_err_t *err)
{
    constexpr size_t smem = fa_smem(DKP, REL);
    static bool set[64];
    cudaError_t e = ops_smem_opt_in((const void *)flash_attention_kernel<T, DKP, REL>, smem, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: flash attention smem: %s", cudaGetErrorString(e));
    dim3 grid((unsigned)((a.t + QT - 1) / QT), (unsigned)a.heads, (unsigned)batch);
    flash_attention_kernel<T, DKP, REL><<<grid, QT * 2, smem, st>>>(a);
    e = cudaGetLastError();
    return e != cudaSuccess ? err_set(err, HARK_ERR_CUDA, "cuda: flash_attention_kernel: %s",
                                      cudaGetErrorString(e))
                            : HARK_OK;
}

static bool al16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* head widths past 64 take 104 KiB (166 KiB with positions) per block: the H100's 227 KiB holds
 * them, the 99 KiB of sm_86 / sm_89 and the 163 KiB of the A100 not always (issue 24): asked of
 * the current device, positions assumed */
extern "C" int cuda_flash_attention_supported(int dk)
{
    if (dk <= 0 || dk > 128)
        return 0;
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
            cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fa_smem(dk <= 32 ? 32 : dk <= 64 ? 64 : 128, 1) <= (size_t)optin;
}

template <typename T>
static int fa_run(void *ctx, long long ldo, const void *q, const void *k, const void *v,
                  long long ld, const void *p, long long ldp, const float *bu, const float *bvp,
                  const int *lens, int chunk, int left, int batch, int t, int heads, int dk,
                  float scale, cudaStream_t st, hark_err_t *err)
{
    fa_args<T> a;
    a.q = (const T *)q;
    a.k = (const T *)k;
    a.v = (const T *)v;
    a.ld = ld;
    a.p = (const T *)p;
    a.ldp = ldp;
    a.bu = bu;
    a.bv = bvp;
    a.lens = lens;
    a.chunk = chunk;
    a.left = left;
    a.t = t;
    a.heads = heads;
    a.dk = dk;
    a.scale_log2 = scale * 1.4426950408889634f;
    a.out = (T *)ctx;
    a.ldo = ldo;
    a.vec = dk % 8 == 0 && ld % 8 == 0 && ldo % 8 == 0 && (!p || ldp % 8 == 0) && al16(q) &&
            al16(k) && al16(v) && al16(ctx) && (!p || al16(p));
    int rel = p != NULL;
    if (dk <= 32)
        return rel ? fa_launch<T, 32, 1>(a, batch, st, err)
                   : fa_launch<T, 32, 0>(a, batch, st, err);
    if (dk <= 64)
        return rel ? fa_launch<T, 64, 1>(a, batch, st, err)
                   : fa_launch<T, 64, 0>(a, batch, st, err);
    return rel ? fa_launch<T, 128, 1>(a, batch, st, err) : fa_launch<T, 128, 0>(a, batch, st, err);
}

extern "C" int cuda_flash_attention(void *ctx, ops_dtype_t dt, long long ldo, const void *q,
                                    const void *k, const void *v, long long ld, const void *p,
                                    long long ldp, const float *bu, const float *bvp,
                                    const int *lens, int chunk, int left, int batch, int t,
                                    int heads, int dk, float scale, void *stream, hark_err_t *err)
{
    if (batch <= 0 || t <= 0)
        return HARK_OK;
    /* the range only: the shared-memory fit is the model's check (cuda_flash_attention_supported,
     * at creation); a launch past it fails in fa_launch with CUDA's reason */
    if (dk <= 0 || dk > 128 || heads <= 0 || heads > 65535 || batch > 65535 ||
        (dt != OPS_F16 && dt != OPS_BF16))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "flash attention: head width %d (1..128; past 64 only where a block's "
                       "shared memory holds it: Hopper), %d heads, batch %d, dtype %d (16-bit)",
                       dk, heads, batch, (int)dt);
    cudaStream_t st = (cudaStream_t)stream;
    if (dt == OPS_BF16)
        return fa_run<__nv_bfloat16>(ctx, ldo, q, k, v, ld, p, ldp, bu, bvp, lens, chunk, left,
                                     batch, t, heads, dk, scale, st, err);
    return fa_run<__half>(ctx, ldo, q, k, v, ld, p, ldp, bu, bvp, lens, chunk, left, batch, t,
                          heads, dk, scale, st, err);
}
