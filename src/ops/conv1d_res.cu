/* conv1d_res.cu — one dilation of HiFi-GAN's resblocks fused into one kernel (conv1d.h,
 * cuda_conv1d_res): the leaky ReLU of the FP32 residual stream, the dilated conv, its bias and
 * leaky ReLU, the second conv, its bias, the residual add and the MRF sum, with every
 * intermediate in shared memory. CPU reference: conv1d_res_ref (conv1d.c).
 * Tests: tests/ops/test_conv1d_cuda.c (cuda_conv1d_res_matches_ref)
 *
 * A block owns TO = BM - 2·(k2 / 2) output rows of one item and all c channels (c = 32, 64, 128 or
 * 256; 8 warps, res_cfg). It loads the input rows its two convs reach,
 * lrelu'd, masked to the item's length and rounded to 16 bits, into shared memory (X: BM +
 * (k1-1)·d1 rows). Phase 1 is BM rows of the first conv (rows of X at offsets j·d1 for tap j: no
 * im2col), its epilogue writes lrelu(acc + b1), masked and rounded, as Y over X's first rows (all
 * warps have left X by then); phase 2 is the second conv over Y (taps at offsets j), whose epilogue
 * adds the bias and the FP32 residual and writes the row (and the MRF sum). The weights stream
 * through two shared buffers of (c, KC) chunks with cp.async, one chunk ahead of the mma.sync
 * loop. Blocks wholly past their item's length return at once (the padded batch costs nothing
 * there). */
#include "ops/conv1d.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define RES_THREADS 256

/* the block shape per channel count: WN warps across the columns (WTN each), WM down the rows
 * (WTM each): warp tiles of 64 x 32 (32 and 128 channels), 32 x 64 (64) and 64 x 64 (256), and
 * the narrow widths take more rows per block (less of the halo the convs' reach adds); BMV the
 * block's rows: res_bm(C), or 64 for 256 channels when the grid would not fill the GPU (then
 * 64 x 32 warp tiles, 8 across) */
__host__ __device__ constexpr int res_bm(int c)
{
    return c == 32 ? 512 : c == 64 ? 256 : 128;
}
template <int C, int BMV = res_bm(C)> struct res_cfg {
    static constexpr int WN = C == 256 ? (BMV == 64 ? 8 : 4) : C == 128 ? 4 : 1;
    static constexpr int WM = 8 / WN;
    static constexpr int WTN = C / WN;
    static constexpr int NT = WTN / 8; /* mma n-tiles per warp */
    static constexpr int BM = BMV;
    static constexpr int WTM = BM / WM;
    static constexpr int MT = WTM / 16;
    static constexpr int KC = C < 64 ? C : 64; /* input channels per weight chunk */
    static constexpr int LD = C + 8;           /* row stride of X / Y: conflict-free ldmatrix */
    static constexpr int LDW = KC + 8;
    static_assert(WM * WN == 8 && WTM % 16 == 0 && WTN % 16 == 0 && C % KC == 0, "res_cfg");
};

typedef struct {
    void *out;     /* float, or T with out16 */
    void *sum;     /* float, or T with sum16 */
    const void *x; /* float, or T with x16 */
    const void *w1, *w2;
    const float *b1, *b2;
    const int *lens;
    int k1, d1, k2, t, first;
    float div, slope;
    long long x_ld_b; /* conv1d_res_ext_t, x_ld_b resolved */
    const float *x_bias;
    void *next;
    long long next_ld_b;
    int next_off, sum_store;
    float next_slope;
    int x16, out16, sum16;
} res_args_t;

/* rows of X (and of Y, whose last taps reach k2 - 1 rows past BM: only for rows past TO) */
__host__ __device__ static inline int res_rows(int bm, int k1, int d1, int k2)
{
    int e1 = (k1 - 1) * d1, e2 = k2 > 0 ? k2 - 1 : 0;
    return bm + (e1 > e2 ? e1 : e2);
}

template <int C, int BMV = res_bm(C)> static size_t res_smem(int k1, int d1, int k2)
{
    typedef res_cfg<C, BMV> F;
    return ((size_t)res_rows(F::BM, k1, d1, k2) * F::LD + 2 * (size_t)C * F::LDW) * 2;
}

/* ---- pieces both kernels share --------------------------------------------------------------- */

/* where X / Y element (row, col) sits: rows of ld elements (the mma.sync kernel: ldmatrix rows),
 * or channel groups of 8 (the wgmma kernel: group g's rows are 16-byte rows gs elements apart from
 * group g + 1's, the no-swizzle K-major layout a wgmma descriptor reads from any row on) */
struct res_rows_at {
    int ld;
    __device__ __forceinline__ int operator()(int r, int c) const
    {
        return r * ld + c;
    }
};
struct res_groups_at {
    int gs;
    __device__ __forceinline__ int operator()(int r, int c) const
    {
        return (c >> 3) * gs + r * 8 + (c & 7);
    }
};

/* X: lrelu(x) of the item's rows v0 .. v0 + rows - 1 inside [0, len), 0 outside, rounded to T,
 * into sX (row stride ld); x of XT (float, or T: the 16-bit residual between dilations), read 16
 * bytes at a time, 4 loads in flight per thread before their stores */
template <typename T, int C, typename XT, typename AT>
__device__ __forceinline__ void res_load_x(T *sX, AT at, const XT *xb, const float *xbias, int v0,
                                           int rows, int len, float slope, int tid)
{
    typedef typename h16<T>::T2 T2;
    constexpr int XU = 4;               /* 8 and 16 measured the same on the H200 */
    constexpr int VE = 16 / sizeof(XT); /* elements per load: 4 floats or 8 16-bit values */
    const int nx = rows * (C / VE);
    for (int i0 = tid; i0 < nx; i0 += RES_THREADS * XU) {
        uint4 q[XU];
#pragma unroll
        for (int u = 0; u < XU; u++) {
            int i = i0 + u * RES_THREADS, r = i / (C / VE), cv = (i % (C / VE)) * VE, v = v0 + r;
            q[u] = make_uint4(0u, 0u, 0u, 0u);
            if (i < nx && v >= 0 && v < len)
                q[u] = *(const uint4 *)(xb + (long long)v * C + cv);
        }
#pragma unroll
        for (int u = 0; u < XU; u++) {
            int i = i0 + u * RES_THREADS, r = i / (C / VE), cv = (i % (C / VE)) * VE, v = v0 + r;
            if (i >= nx)
                break;
            float f[VE];
            if constexpr (sizeof(XT) == 4) {
                f[0] = __uint_as_float(q[u].x), f[1] = __uint_as_float(q[u].y);
                f[2] = __uint_as_float(q[u].z), f[3] = __uint_as_float(q[u].w);
            } else {
                const T2 *h = (const T2 *)&q[u];
#pragma unroll
                for (int e = 0; e < VE / 2; e++) {
                    float2 p = h16<T>::to_f2(h[e]);
                    f[2 * e] = p.x, f[2 * e + 1] = p.y;
                }
            }
            if (xbias && v >= 0 && v < len) /* rows outside the item stay zero */
#pragma unroll
                for (int e = 0; e < VE; e++)
                    f[e] += xbias[cv + e];
            T2 *d = (T2 *)(sX + at(r, cv));
#pragma unroll
            for (int e = 0; e < VE / 2; e++)
                d[e] = h16<T>::from_f2(f[2 * e] > 0.0f ? f[2 * e] : f[2 * e] * slope,
                                       f[2 * e + 1] > 0.0f ? f[2 * e + 1] : f[2 * e + 1] * slope);
        }
    }
}

/* res_load_x of the item's x, as a holds it (float, or 16-bit with x16) */
template <typename T, int C, typename AT>
__device__ __forceinline__ void res_load_item(T *sX, AT at, const res_args_t &a, int b, int v0,
                                              int rows, int len, int tid)
{
    if (a.x16)
        res_load_x<T, C>(sX, at, (const T *)a.x + b * a.x_ld_b, a.x_bias, v0, rows, len, a.slope,
                         tid);
    else
        res_load_x<T, C>(sX, at, (const float *)a.x + b * a.x_ld_b, a.x_bias, v0, rows, len,
                         a.slope, tid);
}

/* Y (row, col .. col + 1) = lrelu(v + b1), rounded, where u = u0 + row is inside [0, len); 0
 * outside (the second conv's zero padding) */
template <typename T, typename AT>
__device__ __forceinline__ void res_store_y(T *sX, AT at, int row, int col, float v0, float v1,
                                            const res_args_t &a, int u0, int len)
{
    typedef typename h16<T>::T2 T2;
    int u = u0 + row;
    float y0 = 0.0f, y1 = 0.0f;
    if (u >= 0 && u < len) {
        y0 = v0 + a.b1[col];
        y1 = v1 + a.b1[col + 1];
        y0 = y0 > 0.0f ? y0 : y0 * a.slope;
        y1 = y1 > 0.0f ? y1 : y1 * a.slope;
    }
    *(T2 *)(sX + at(row, col)) = h16<T>::from_f2(y0, y1);
}

/* row s of item b, columns col .. col + 1: y = x + (v + bias); out, the MRF sum and its lrelu'd
 * 16-bit copy for the next transposed conv */
template <typename T, int C>
__device__ __forceinline__ void res_store_out(const res_args_t &a, const float *bias, int b, int s,
                                              int col, float v0, float v1)
{
    typedef typename h16<T>::T2 T2;
    long long o = ((long long)b * a.t + s) * C + col, xo = b * a.x_ld_b + (long long)s * C + col;
    float2 xv = a.x16 ? h16<T>::to_f2(*(const T2 *)((const T *)a.x + xo))
                      : *(const float2 *)((const float *)a.x + xo);
    if (a.x_bias) {
        xv.x += a.x_bias[col];
        xv.y += a.x_bias[col + 1];
    }
    float2 y = make_float2(xv.x + (v0 + bias[col]), xv.y + (v1 + bias[col + 1]));
    if (a.out && a.out16)
        *(T2 *)((T *)a.out + o) = h16<T>::from_f2(y.x, y.y);
    else if (a.out)
        *(float2 *)((float *)a.out + o) = y;
    if (a.sum) {
        float2 sv = a.first   ? make_float2(0.0f, 0.0f)
                    : a.sum16 ? h16<T>::to_f2(*(const T2 *)((const T *)a.sum + o))
                              : *(const float2 *)((const float *)a.sum + o);
        sv.x += y.x;
        sv.y += y.y;
        if (a.div != 1.0f) {
            sv.x /= a.div;
            sv.y /= a.div;
        }
        if (a.sum_store && a.sum16)
            *(T2 *)((T *)a.sum + o) = h16<T>::from_f2(sv.x, sv.y);
        else if (a.sum_store)
            *(float2 *)((float *)a.sum + o) = sv;
        if (a.next) {
            float z0 = sv.x > 0.0f ? sv.x : sv.x * a.next_slope;
            float z1 = sv.y > 0.0f ? sv.y : sv.y * a.next_slope;
            *(typename h16<T>::T2 *)((T *)a.next + b * a.next_ld_b +
                                     (long long)(a.next_off + s) * C + col) =
                h16<T>::from_f2(z0, z1);
        }
    }
}

template <typename T, int C, int BMV>
__global__ void __launch_bounds__(RES_THREADS) res_kernel(res_args_t a)
{
    typedef res_cfg<C, BMV> F;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int rows_x = F::BM + (a.k1 - 1) * a.d1;
    T *sX = (T *)smem_raw; /* (rows, LD); Y (BM, LD) over its first rows */
    T *sW = sX + res_rows(F::BM, a.k1, a.d1, a.k2) * F::LD; /* (2, C, LDW) */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = warp / F::WN, wn = warp % F::WN;
    const int b = blockIdx.y;
    const int len = a.lens && a.lens[b] < a.t ? a.lens[b] : a.t;
    const bool two = a.k2 > 0;
    const int p2 = two ? a.k2 / 2 : 0, TO = F::BM - 2 * p2;
    const int s0 = blockIdx.x * TO;
    if (s0 >= len)
        return;
    const int u0 = s0 - p2, v0 = u0 - (a.k1 / 2) * a.d1; /* first Y row, first X row */
    constexpr int NCH = C / F::KC;
    const int n1 = a.k1 * NCH, total = n1 + (two ? a.k2 * NCH : 0);

    /* weight chunk `it` -> buffer `buf`: rows n (output channels) of KC input channels */
    auto load_w = [&](int it, int buf) {
        const T *w = (const T *)(it < n1 ? a.w1 : a.w2);
        int k = it < n1 ? a.k1 : a.k2, q = it < n1 ? it : it - n1;
        int j = q / NCH, c0 = (q % NCH) * F::KC;
        T *dst = sW + buf * C * F::LDW;
        for (int i = tid; i < C * (F::KC / 8); i += RES_THREADS) {
            int n = i / (F::KC / 8), c8 = (i % (F::KC / 8)) * 8;
            cp_async16(dst + n * F::LDW + c8, w + ((long long)n * k + j) * C + c0 + c8, true);
        }
    };
    load_w(0, 0);
    cp_async_commit();

    res_load_item<T, C>(sX, res_rows_at{F::LD}, a, b, v0, rows_x, len, tid);

    float acc[F::MT][F::NT][4];
#pragma unroll
    for (int i = 0; i < F::MT; i++)
#pragma unroll
        for (int j = 0; j < F::NT; j++)
#pragma unroll
            for (int r = 0; r < 4; r++)
                acc[i][j][r] = 0.0f;
    const int g = lane >> 2, tq = lane & 3;

    for (int it = 0; it < total; it++) {
        cp_async_wait<0>();
        __syncthreads(); /* chunk it (and X, or Y) visible to all; buffer (it+1)&1 is free */
        if (it + 1 < total)
            load_w(it + 1, (it + 1) & 1);
        cp_async_commit();
        const bool ph1 = it < n1;
        const int q = ph1 ? it : it - n1, j = q / NCH, c0 = (q % NCH) * F::KC;
        const T *A = sX + (ph1 ? j * a.d1 : j) * F::LD + c0;
        const T *W = sW + (it & 1) * C * F::LDW;
#pragma unroll
        for (int kk = 0; kk < F::KC; kk += 16) {
            unsigned af[F::MT][4], bf[F::NT / 2][4];
#pragma unroll
            for (int i = 0; i < F::MT; i++)
                ldsm_x4(af[i],
                        A + (wm * F::WTM + i * 16 + (lane & 15)) * F::LD + kk + (lane >> 4) * 8);
#pragma unroll
            for (int jj = 0; jj < F::NT / 2; jj++)
                ldsm_x4(bf[jj],
                        W + (wn * F::WTN + jj * 16 + (lane & 7) + (lane >> 4) * 8) * F::LDW + kk +
                            ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int i = 0; i < F::MT; i++)
#pragma unroll
                for (int n = 0; n < F::NT; n++)
                    mma16816<T>(acc[i][n], af[i], bf[n >> 1][(n & 1) * 2],
                                bf[n >> 1][(n & 1) * 2 + 1]);
        }
        if (two && it == n1 - 1) {
            /* phase 1 done: Y = lrelu(acc + b1) masked to [0, len), over X's first rows */
            __syncthreads();
#pragma unroll
            for (int i = 0; i < F::MT; i++)
#pragma unroll
                for (int n = 0; n < F::NT; n++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int row = wm * F::WTM + i * 16 + g + h * 8;
                        int col = wn * F::WTN + n * 8 + tq * 2;
                        res_store_y(sX, res_rows_at{F::LD}, row, col, acc[i][n][2 * h],
                                    acc[i][n][2 * h + 1], a, u0, len);
                        acc[i][n][2 * h] = acc[i][n][2 * h + 1] = 0.0f;
                    }
        }
    }
    cp_async_wait<0>();

    /* y = x + (acc + bias) for the block's rows inside the item; out and the MRF sum */
    const float *bias = two ? a.b2 : a.b1;
#pragma unroll
    for (int i = 0; i < F::MT; i++)
#pragma unroll
        for (int n = 0; n < F::NT; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = wm * F::WTM + i * 16 + g + h * 8, col = wn * F::WTN + n * 8 + tq * 2;
                int s = s0 + row;
                if (row >= TO || s >= len)
                    continue;
                res_store_out<T, C>(a, bias, b, s, col, acc[i][n][2 * h], acc[i][n][2 * h + 1]);
            }
}

/* what the launchers ask of the current device, queried once per device (a benign race: every
 * thread stores the same values) */
typedef struct {
    bool ready, hopper; /* hopper: compute capability 9.0, where the sm_90a kernels run */
    int sms, smem;      /* multiprocessors; shared memory a block may opt in to */
} res_dev_t;

static const res_dev_t *res_dev(void)
{
    static res_dev_t devs[64];
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return NULL;
    res_dev_t *p = &devs[dev];
    if (!p->ready) {
        if (cudaDeviceGetAttribute(&p->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&p->smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
                cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
            return NULL;
        p->hopper = major == 9 && minor == 0;
        p->ready = true;
    }
    return p;
}

static int max_smem(int *bytes)
{
    const res_dev_t *d = res_dev();
    if (!d)
        return -1;
    *bytes = d->smem;
    return 0;
}

/* kern may take up to the device's opt-in limit of dynamic shared memory: set once per device
 * (set[] belongs to the kernel) */
static cudaError_t res_opt_in(const void *kern, bool *set)
{
    const res_dev_t *d = res_dev();
    return d ? ops_smem_opt_in(kern, (size_t)d->smem, set) : cudaErrorInvalidDevice;
}

static size_t smem_for(int c, int k1, int d1, int k2)
{
    switch (c) {
    case 32:
        return res_smem<32>(k1, d1, k2);
    case 64:
        return res_smem<64>(k1, d1, k2);
    case 128:
        return res_smem<128>(k1, d1, k2);
    case 256:
        return res_smem<256>(k1, d1, k2);
    default:
        return 0;
    }
}

static int rows_per_block(int c)
{
    return c == 32    ? res_cfg<32>::BM
           : c == 64  ? res_cfg<64>::BM
           : c == 128 ? res_cfg<128>::BM
                      : res_cfg<256>::BM;
}

extern "C" int cuda_conv1d_res_fits(int c, int k1, int d1, int k2)
{
    int lim = 0;
    size_t need = smem_for(c, k1, d1, k2);
    if (!need || k1 < 1 || k1 % 2 == 0 || d1 < 1 || k2 < 0 || (k2 && k2 % 2 == 0) || max_smem(&lim))
        return 0;
    return need <= (size_t)lim && 2 * (k2 / 2) < rows_per_block(c);
}

/* 256 channels: does the grid of 128-row blocks fall short of two per multiprocessor? */
static bool res_short_grid(const res_args_t &a, int batch)
{
    const res_dev_t *d = res_dev();
    int to = res_bm(256) - 2 * (a.k2 / 2);
    long long blocks = (long long)((a.t + to - 1) / to) * batch;
    return d && blocks < 2LL * d->sms && 2 * (a.k2 / 2) < 64;
}

template <typename T, int C, int BMV = res_bm(C)>
static int res_go(const res_args_t &a, int batch, cudaStream_t st, hark_err_t *err)
{
    static bool set[64];
    size_t smem = res_smem<C, BMV>(a.k1, a.d1, a.k2);
    cudaError_t e = res_opt_in((const void *)res_kernel<T, C, BMV>, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: conv1d_res: shared memory %zu: %s", smem,
                       cudaGetErrorString(e));
    int to = BMV - 2 * (a.k2 / 2);
    dim3 grid((unsigned)((a.t + to - 1) / to), (unsigned)batch);
    res_kernel<T, C, BMV><<<grid, RES_THREADS, smem, st>>>(a);
    e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: conv1d_res: %s", cudaGetErrorString(e))
               : HARK_OK;
}

/* ---- Hopper: the same unit on wgmma -----------------------------------------------------------
 * Two warpgroups; each takes BM / 128 slabs of 64 rows and issues wgmma.m64nCk16 with both
 * operands in shared memory. X / Y are kept in 8-channel groups (res_groups_at): a group's rows
 * are consecutive 16-byte rows, the no-swizzle K-major layout, so the A descriptor of tap j simply
 * starts j·dil rows further down — the row shift of a tap stays free, as in the mma.sync kernel.
 * The weights stream through four buffers of (C, 64) chunks in the 128-byte-swizzled K-major
 * layout (gemm_f16.cu's), two chunks ahead; a chunk is 64 consecutive K elements of every output
 * channel's (tap, cin) row, so it may span two taps (32 channels) or part of one. Two chunks'
 * wgmma batches are in flight (wait_group 1): buffer (it + 2) mod 4 held chunk it - 2, which every
 * warpgroup finished before iteration it's barrier. Only on the Hopper path (sm_90a code, a
 * compute capability 9.0 device); elsewhere the kernel traps and the launcher picks the mma.sync
 * one. The launcher takes it from 64 channels up (see res_c) unless asked for every width
 * (hopper = 2: the tests keep 32 channels checked). */
#define WGS_R16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define WGS_ASM(SHAPE, TY, RLIST, DLIST, A, P)                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                    \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " " RLIST ", " A          \
                 ", p, 1, 1, 0, 0;\n}\n"                                                           \
                 : DLIST                                                                           \
                 : "l"(da), "l"(db), "r"(acc))
/* d (64 x N of this warpgroup) = (acc ? d : 0) + A (64 x 16) · B (N x 16)ᵀ, both from shared
 * memory (acc 0 starts a sum without writing d first: no other instruction defines the
 * accumulators while wgmma batches are in flight) */
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int acc)
{
#if HARK_DEV_HOPPER
    constexpr bool bf = h16<T>::bf16;
    if constexpr (N == 32) {
        if constexpr (bf)
            WGS_ASM("m64n32k16", "bf16", WGS_R16, WG_D16(0), "%16, %17", "%18");
        else
            WGS_ASM("m64n32k16", "f16", WGS_R16, WG_D16(0), "%16, %17", "%18");
    } else if constexpr (N == 64) {
        if constexpr (bf)
            WGS_ASM("m64n64k16", "bf16", WG_R32, WG_D32, "%32, %33", "%34");
        else
            WGS_ASM("m64n64k16", "f16", WG_R32, WG_D32, "%32, %33", "%34");
    } else if constexpr (N == 128) {
        if constexpr (bf)
            WGS_ASM("m64n128k16", "bf16", WG_R64, WG_D64, "%64, %65", "%66");
        else
            WGS_ASM("m64n128k16", "f16", WG_R64, WG_D64, "%64, %65", "%66");
    } else {
        if constexpr (bf)
            WGS_ASM("m64n256k16", "bf16", WG_R128, WG_D128, "%128, %129", "%130");
        else
            WGS_ASM("m64n256k16", "f16", WG_R128, WG_D128, "%128, %129", "%130");
    }
#endif
}
#undef WGS_ASM
#undef WGS_R16

/* the descriptor of a no-swizzle K-major operand: core matrices of 8 rows x 16 bytes, lbo bytes
 * apart along K, sbo along M */
__device__ __forceinline__ uint64_t wg_desc_plain(unsigned smem_addr, unsigned lbo, unsigned sbo)
{
    return (uint64_t)((smem_addr & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
}

template <int C> struct wres_cfg {
    static constexpr int BM = res_bm(C);
    static constexpr int SL = BM / 128;    /* 64-row slabs per warpgroup */
    static constexpr int ND = C / 2;       /* accumulators per thread per slab */
    static constexpr int WBYTES = C * 128; /* a weight chunk: C rows of 64 K elements */
    static constexpr int NB = 4;           /* weight buffers: chunks it - 1 .. it + 2 */
};

/* rows per channel group of X: odd, so the groups' rows start in different bank quads */
__host__ __device__ static inline int wres_group_rows(int bm, int k1, int d1, int k2)
{
    return res_rows(bm, k1, d1, k2) | 1;
}

template <int C> static size_t wres_smem(int k1, int d1, int k2)
{
    typedef wres_cfg<C> F;
    return 1024 + F::NB * (size_t)F::WBYTES + (size_t)wres_group_rows(F::BM, k1, d1, k2) * C * 2;
}

template <typename T, int C>
__global__ void __launch_bounds__(RES_THREADS, 1) wres_kernel(res_args_t a)
{
#if HARK_DEV_HOPPER
    typedef wres_cfg<C> F;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned base = (unsigned)__cvta_generic_to_shared(smem_raw);
    unsigned pad = ((base + 1023u) & ~1023u) - base; /* the swizzle needs 1024-byte alignment */
    unsigned char *sw = smem_raw + pad;              /* NB weight chunks */
    const unsigned sw_addr = base + pad, sx_addr = sw_addr + F::NB * F::WBYTES;
    T *sX = (T *)(sw + F::NB * F::WBYTES); /* channel groups (res_groups_at); Y over X */
    const int gs = wres_group_rows(F::BM, a.k1, a.d1, a.k2) * 8;
    const res_groups_at at{gs};
    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7, wq = (tid >> 5) & 3;
    const int b = blockIdx.y;
    const int len = a.lens && a.lens[b] < a.t ? a.lens[b] : a.t;
    const bool two = a.k2 > 0;
    const int p2 = two ? a.k2 / 2 : 0, TO = F::BM - 2 * p2;
    const int s0 = blockIdx.x * TO;
    if (s0 >= len)
        return;
    const int u0 = s0 - p2, v0 = u0 - (a.k1 / 2) * a.d1;
    const int rows_x = F::BM + (a.k1 - 1) * a.d1;
    const int K1 = a.k1 * C, K2 = two ? a.k2 * C : 0;
    const int n1 = (K1 + 63) / 64, total = n1 + (K2 + 63) / 64;

    /* chunk it -> buffer buf: row n's 16-byte piece cc at n·128 + (cc ^ (n mod 8))·16 */
    auto load_w = [&](int it, int buf) {
        const T *w = (const T *)(it < n1 ? a.w1 : a.w2);
        int K = it < n1 ? K1 : K2, k0 = (it < n1 ? it : it - n1) * 64;
        unsigned char *dst = sw + buf * F::WBYTES;
        for (int i = tid; i < C * 8; i += RES_THREADS) {
            int n = i >> 3, cc = i & 7;
            bool ok = k0 + cc * 8 < K;
            cp_async16(dst + n * 128 + ((cc ^ (n & 7)) << 4),
                       ok ? w + (long long)n * K + k0 + cc * 8 : w, ok);
        }
    };
    load_w(0, 0);
    cp_async_commit();
    if (total > 1)
        load_w(1, 1);
    cp_async_commit();

    res_load_item<T, C>(sX, at, a, b, v0, rows_x, len, tid);

    float d[F::SL][F::ND]; /* each phase's first wgmma overwrites them (acc 0) */
    const int g = lane >> 2, tq = lane & 3;
    const int wrow = wq * 16; /* this warp's rows within a slab (the epilogue's fragments) */
    auto pin_d = [&]() {
#pragma unroll
        for (int sl = 0; sl < F::SL; sl++)
#pragma unroll
            for (int i = 0; i < F::ND; i++)
                asm volatile("" : "+f"(d[sl][i])::"memory");
    };

    for (int it = 0; it < total; it++) {
        cp_async_wait<1>(); /* chunk it has landed (it + 1 may be in flight) */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* chunk it and X (or Y) visible; chunk it - 2 done everywhere */
        if (it + 2 < total)
            load_w(it + 2, (it + 2) % F::NB);
        cp_async_commit();
        const bool ph1 = it < n1;
        const int K = ph1 ? K1 : K2, k0 = (ph1 ? it : it - n1) * 64, dil = ph1 ? a.d1 : 1;
        const unsigned sb = sw_addr + (it % F::NB) * F::WBYTES;
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            int kk = k0 + ks * 16;
            if (C >= 64 || kk < K) { /* K = k·C: whole chunks from 64 channels up */
                int j = kk / C, c = kk - j * C;
#pragma unroll
                for (int sl = 0; sl < F::SL; sl++) {
                    unsigned ra = sx_addr + (unsigned)at((wg * F::SL + sl) * 64 + j * dil, c) * 2;
                    wgmma_ss<T, C>(d[sl], wg_desc_plain(ra, (unsigned)gs * 2, 128),
                                   wg_desc(sb + ks * 32), k0 + ks);
                }
            }
        }
        wg_commit();
        wg_wait<1>(); /* chunk it - 1's batch is done: its buffer is free after the next barrier */
        if (two && it == n1 - 1) {
            wg_wait<0>();
            pin_d();
            __syncthreads(); /* every warpgroup's wgmmas have left X */
#pragma unroll
            for (int sl = 0; sl < F::SL; sl++)
#pragma unroll
                for (int q = 0; q < C / 8; q++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        int row = (wg * F::SL + sl) * 64 + wrow + g + h * 8, col = q * 8 + tq * 2;
                        res_store_y(sX, at, row, col, d[sl][4 * q + 2 * h],
                                    d[sl][4 * q + 2 * h + 1], a, u0, len);
                    }
        }
    }
    wg_wait<0>();
    pin_d();
    cp_async_wait<0>();

    const float *bias = two ? a.b2 : a.b1;
#pragma unroll
    for (int sl = 0; sl < F::SL; sl++)
#pragma unroll
        for (int q = 0; q < C / 8; q++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int row = (wg * F::SL + sl) * 64 + wrow + g + h * 8, col = q * 8 + tq * 2;
                int s = s0 + row;
                if (row >= TO || s >= len)
                    continue;
                res_store_out<T, C>(a, bias, b, s, col, d[sl][4 * q + 2 * h],
                                    d[sl][4 * q + 2 * h + 1]);
            }
#else
    __trap(); /* never launched off the Hopper path */
#endif
}

template <typename T, int C>
static int wres_go(const res_args_t &a, int batch, cudaStream_t st, hark_err_t *err)
{
    static bool set[64];
    size_t smem = wres_smem<C>(a.k1, a.d1, a.k2);
    cudaError_t e = res_opt_in((const void *)wres_kernel<T, C>, set);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: conv1d_res (wgmma): shared memory %zu: %s", smem,
                       cudaGetErrorString(e));
    int to = wres_cfg<C>::BM - 2 * (a.k2 / 2);
    dim3 grid((unsigned)((a.t + to - 1) / to), (unsigned)batch);
    wres_kernel<T, C><<<grid, RES_THREADS, smem, st>>>(a);
    e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: conv1d_res (wgmma): %s", cudaGetErrorString(e))
               : HARK_OK;
}

/* the wgmma kernel for c channels, or 1 where it cannot run (not a cc 9.0 device; its shared
 * memory does not fit) */
template <typename T>
static int wres_c(const res_args_t &a, int batch, int c, cudaStream_t st, hark_err_t *err)
{
    const res_dev_t *d = res_dev();
    if (!d || !d->hopper)
        return 1;
    const int lim = d->smem;
    size_t need = c == 32    ? wres_smem<32>(a.k1, a.d1, a.k2)
                  : c == 64  ? wres_smem<64>(a.k1, a.d1, a.k2)
                  : c == 128 ? wres_smem<128>(a.k1, a.d1, a.k2)
                             : wres_smem<256>(a.k1, a.d1, a.k2);
    if (need > (size_t)lim)
        return 1;
    switch (c) {
    case 32:
        return wres_go<T, 32>(a, batch, st, err);
    case 64:
        return wres_go<T, 64>(a, batch, st, err);
    case 128:
        return wres_go<T, 128>(a, batch, st, err);
    default:
        return wres_go<T, 256>(a, batch, st, err);
    }
}

template <typename T>
static int res_c(const res_args_t &a, int batch, int c, cudaStream_t st, hark_err_t *err,
                 int hopper)
{
    /* wgmma from 64 channels up: measured on the H200 (hark bench --profile [--wgmma-all], V1 at
     * batch 32, ms per stage, mma.sync -> wgmma with both operands in shared memory and two
     * chunks in flight): 256 channels 9.2 -> 7.0, 128 15.9 -> 12.7, 64 9.4 -> 8.5, 32 7.1 -> 7.3
     * (its chunks span two taps, half a chunk idle at an odd tap count's tail) */
    if ((hopper == 2 || (hopper == 1 && c >= 64)) && !(c == 256 && res_short_grid(a, batch))) {
        int rc = wres_c<T>(a, batch, c, st, err);
        if (rc != 1)
            return rc;
    }
    switch (c) {
    case 32:
        return res_go<T, 32>(a, batch, st, err);
    case 64:
        return res_go<T, 64>(a, batch, st, err);
    case 128:
        return res_go<T, 128>(a, batch, st, err);
    default: /* a grid short of two blocks per multiprocessor (one fits): blocks of 64 rows */
        if (res_short_grid(a, batch))
            return res_go<T, 256, 64>(a, batch, st, err);
        return res_go<T, 256>(a, batch, st, err);
    }
}

extern "C" int cuda_conv1d_res(void *out, void *sum, const void *x, const void *w1, const float *b1,
                               int k1, int d1, const void *w2, const float *b2, int k2,
                               ops_dtype_t dt, float slope, const int *lens, int batch, int t,
                               int c, int first, float div, const conv1d_res_ext_t *ext, int hopper,
                               void *stream, hark_err_t *err)
{
    if ((dt != OPS_F16 && dt != OPS_BF16) || batch < 0 || t < 0 || (!out && !sum) ||
        !cuda_conv1d_res_fits(c, k1, d1, k2) || (k2 && (!w2 || !b2)) || !w1 || !b1 || div == 0.0f)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d_res: dtype %d, batch %d, t %d, c %d, k1 %d, d1 %d, k2 %d", (int)dt,
                       batch, t, c, k1, d1, k2);
    if (batch == 0 || t == 0)
        return HARK_OK;
    const conv1d_res_ext_t e0 = {}, *e = ext ? ext : &e0;
    const int x_vec = e->x16 ? 8 : 4; /* elements per 16-byte load of x */
    if ((e->x_ld_b > 0 && (e->x_ld_b < (long long)t * c || e->x_ld_b % x_vec)) ||
        e->next_ld_b % 2 || (e->next && !sum) || ((uintptr_t)x | (uintptr_t)e->next) % 16 ||
        (e->x_bias && (uintptr_t)e->x_bias % 16) || ((uintptr_t)out | (uintptr_t)sum) % 16)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d_res: x item stride %lld (t %d, c %d), next without sum, or an "
                       "unaligned pointer",
                       e->x_ld_b, t, c);
    res_args_t a = {out,
                    sum,
                    x,
                    w1,
                    w2,
                    b1,
                    b2,
                    lens,
                    k1,
                    d1,
                    k2,
                    t,
                    first,
                    div,
                    slope,
                    e->x_ld_b > 0 ? e->x_ld_b : (long long)t * c,
                    e->x_bias,
                    e->next,
                    e->next_ld_b,
                    e->next_off,
                    !(e->next && e->no_sum_store),
                    e->next_slope,
                    e->x16 != 0,
                    e->out16 != 0,
                    e->sum16 != 0};
    cudaStream_t st = (cudaStream_t)stream;
    return dt == OPS_F16 ? res_c<__half>(a, batch, c, st, err, hopper)
                         : res_c<__nv_bfloat16>(a, batch, c, st, err, hopper);
}
