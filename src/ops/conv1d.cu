/* conv1d.cu — the GPU launchers of conv1d.h: the masked, zero-padded copy a conv reads (with the
 * dtype change of the model input), the conv itself as GEMMs (an implicit GEMM over all taps on
 * the tensor cores, or one strided-batched GEMM per tap), the depthwise conv with its input and
 * output masks, and bias + activation from the FP32 accumulator. Each kernel is a template over
 * float, __half and __nv_bfloat16 with FP32 arithmetic. CPU references: conv1d.c.
 * Tests: tests/ops/test_conv1d_cuda.c */
#include "ops/conv1d.h"

#include "hark.h"
#include "ops/ops_cuda_impl.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float ld_f(const float *p)
{
    return *p;
}
__device__ __forceinline__ float ld_f(const __half *p)
{
    return __half2float(*p);
}
__device__ __forceinline__ float ld_f(const __nv_bfloat16 *p)
{
    return __bfloat162float(*p);
}
__device__ __forceinline__ void st_f(float *p, float v)
{
    *p = v;
}
__device__ __forceinline__ void st_f(__half *p, float v)
{
    *p = __float2half_rn(v);
}
__device__ __forceinline__ void st_f(__nv_bfloat16 *p, float v)
{
    *p = __float2bfloat16_rn(v);
}

/* four consecutive elements (16-byte float / 8-byte 16-bit accesses: the caller checks alignment)
 */
__device__ __forceinline__ void ld4(const float *p, float *v)
{
    float4 q = *(const float4 *)p;
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}
template <typename T> __device__ __forceinline__ void ld4(const T *p, float *v)
{
    uint2 q = *(const uint2 *)p;
    float2 a = h16<T>::to_f2(*(const typename h16<T>::T2 *)&q.x);
    float2 b = h16<T>::to_f2(*(const typename h16<T>::T2 *)&q.y);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void st4(float *p, const float *v)
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
template <typename T> __device__ __forceinline__ void st4(T *p, const float *v)
{
    typename h16<T>::T2 a = h16<T>::from_f2(v[0], v[1]), b = h16<T>::from_f2(v[2], v[3]);
    uint2 q;
    q.x = *(const unsigned *)&a;
    q.y = *(const unsigned *)&b;
    *(uint2 *)p = q;
}

/* the four-wide kernels' conditions: every extent a multiple of 4, the pointers aligned to four
 * elements, and the element count within a 32-bit index */
static bool vec4_ok(long long n, size_t elem, const void *p, const void *q, int a, int b, int c,
                    long long d)
{
    return n < (1LL << 31) && a % 4 == 0 && b % 4 == 0 && c % 4 == 0 && d % 4 == 0 &&
           (uintptr_t)p % (4 * elem) == 0 && (q == NULL || (uintptr_t)q % 16 == 0);
}

static int launched(hark_err_t *err, const char *what)
{
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess
               ? err_set(err, HARK_ERR_CUDA, "cuda: %s: %s", what, cudaGetErrorString(e))
               : HARK_OK;
}

static unsigned grid_for(long long n, int threads)
{
    long long b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535LL * 16 ? 65535LL * 16 : b < 1 ? 1 : b);
}

static bool dtype_ok(ops_dtype_t t)
{
    return t == OPS_F32 || t == OPS_F16 || t == OPS_BF16;
}

/* ---- pad + mask ----------------------------------------------------------------------------- */

/* one thread per output element (grid-stride) */
template <typename TO, typename TI>
__global__ void pad_mask_kernel(TO *out, const TI *in, const float *bias, float slope,
                                const int *lens, int batch, int t, int c, int ld_in, int ld_out,
                                int pad_l, int tp)
{
    long long n = (long long)batch * tp * ld_out;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        int col = (int)(i % ld_out);
        long long row = i / ld_out;
        int r = (int)(row % tp), b = (int)(row / tp);
        int v = lens && lens[b] < t ? lens[b] : t;
        int s = r - pad_l;
        float x = 0.0f;
        if (col < c && s >= 0 && s < v) {
            x = ld_f(in + ((long long)b * t + s) * ld_in + col);
            if (bias)
                x += bias[col];
            x = x > 0.0f ? x : x * slope; /* slope 1: x itself, bit for bit */
        }
        st_f(out + i, x);
    }
}

/* the same, four columns per thread (c, ld_in and ld_out multiples of 4; 32-bit indices) */
template <typename TO, typename TI>
__global__ void pad_mask4_kernel(TO *out, const TI *in, const float *bias, float slope,
                                 const int *lens, int t, int c, int ld_in, int ld_out, int pad_l,
                                 int tp, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4)
        return;
    const int q = ld_out / 4, row = i / q, col = (i - row * q) * 4;
    const int b = row / tp, s = row - b * tp - pad_l;
    const int v = lens && lens[b] < t ? lens[b] : t;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (col < c && s >= 0 && s < v) {
        ld4(in + ((long long)b * t + s) * ld_in + col, x);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (bias)
                x[j] += bias[col + j];
            x[j] = x[j] > 0.0f ? x[j] : x[j] * slope;
        }
    }
    st4(out + (long long)row * ld_out + col, x);
}

template <typename TO, typename TI>
static void pad_mask_go(void *out, const void *in, const float *bias, float slope, const int *lens,
                        int batch, int t, int c, int ld_in, int ld_out, int pad_l, int tp,
                        cudaStream_t st)
{
    long long n = (long long)batch * tp * ld_out;
    if (vec4_ok(n, sizeof(TI), in, NULL, c, ld_in, ld_out, 0) &&
        (uintptr_t)out % (4 * sizeof(TO)) == 0) {
        int n4 = (int)(n / 4);
        pad_mask4_kernel<TO, TI><<<(n4 + 255) / 256, 256, 0, st>>>(
            (TO *)out, (const TI *)in, bias, slope, lens, t, c, ld_in, ld_out, pad_l, tp, n4);
        return;
    }
    pad_mask_kernel<TO, TI><<<grid_for(n, 256), 256, 0, st>>>(
        (TO *)out, (const TI *)in, bias, slope, lens, batch, t, c, ld_in, ld_out, pad_l, tp);
}

template <typename TO>
static void pad_mask_in(void *out, const void *in, ops_dtype_t in_t, const float *bias, float slope,
                        const int *lens, int batch, int t, int c, int ld_in, int ld_out, int pad_l,
                        int tp, cudaStream_t st)
{
    if (in_t == OPS_F16)
        pad_mask_go<TO, __half>(out, in, bias, slope, lens, batch, t, c, ld_in, ld_out, pad_l, tp,
                                st);
    else if (in_t == OPS_BF16)
        pad_mask_go<TO, __nv_bfloat16>(out, in, bias, slope, lens, batch, t, c, ld_in, ld_out,
                                       pad_l, tp, st);
    else
        pad_mask_go<TO, float>(out, in, bias, slope, lens, batch, t, c, ld_in, ld_out, pad_l, tp,
                               st);
}

extern "C" int cuda_conv1d_pad_mask_act(void *out, ops_dtype_t out_t, const void *in,
                                        ops_dtype_t in_t, const float *bias, float slope,
                                        const int *lens, int batch, int t, int c, int ld_in,
                                        int ld_out, int pad_l, int pad_r, void *stream,
                                        hark_err_t *err)
{
    if (!dtype_ok(out_t) || !dtype_ok(in_t) || batch < 0 || t < 0 || c < 0 || ld_in < c ||
        ld_out < c || pad_l < 0 || pad_r < 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d_pad_mask: batch %d, t %d, c %d, ld %d -> %d, pad %d + %d", batch, t,
                       c, ld_in, ld_out, pad_l, pad_r);
    if (out == in && (pad_l || pad_r || ld_in != ld_out || in_t != out_t))
        return err_set(err, HARK_ERR_INVALID_ARG, "conv1d_pad_mask: in place only as a plain mask");
    int tp = pad_l + t + pad_r;
    if (batch == 0 || tp == 0 || ld_out == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    if (out_t == OPS_F16)
        pad_mask_in<__half>(out, in, in_t, bias, slope, lens, batch, t, c, ld_in, ld_out, pad_l, tp,
                            st);
    else if (out_t == OPS_BF16)
        pad_mask_in<__nv_bfloat16>(out, in, in_t, bias, slope, lens, batch, t, c, ld_in, ld_out,
                                   pad_l, tp, st);
    else
        pad_mask_in<float>(out, in, in_t, bias, slope, lens, batch, t, c, ld_in, ld_out, pad_l, tp,
                           st);
    return launched(err, "conv1d_pad_mask_kernel");
}

extern "C" int cuda_conv1d_pad_mask(void *out, ops_dtype_t out_t, const void *in, ops_dtype_t in_t,
                                    const int *lens, int batch, int t, int c, int ld_in, int ld_out,
                                    int pad_l, int pad_r, void *stream, hark_err_t *err)
{
    return cuda_conv1d_pad_mask_act(out, out_t, in, in_t, NULL, 1.0f, lens, batch, t, c, ld_in,
                                    ld_out, pad_l, pad_r, stream, err);
}

/* ---- the conv as GEMMs ---------------------------------------------------------------------- */

extern "C" int cuda_conv1d(float *acc, float beta, const void *xp, const void *w, ops_dtype_t dt,
                           int batch, int t_pad, int cin, int cout, int k, int stride, int dil,
                           ops_cuda_t *g, hark_err_t *err)
{
    if (!dtype_ok(dt) || batch < 0 || cin < 1 || cout < 1 || k < 1 || stride < 1 || dil < 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d: batch %d, cin %d, cout %d, k %d, stride %d, dil %d", batch, cin,
                       cout, k, stride, dil);
    int span = dil * (k - 1) + 1;
    int t_out = t_pad < span ? 0 : (t_pad - span) / stride + 1;
    if (batch == 0 || t_out == 0)
        return HARK_OK;
    if (dt != OPS_F32 && cin % 8 == 0 && (dil == 1 || (stride == 1 && t_pad % dil == 0))) {
        /* one implicit GEMM: the padded input as a (t_pad / dil x dil) image of cin channels
         * (row r, column c = frame r·dil + c), the taps as a k x 1 kernel — a dilated conv is an
         * undilated one down the image's rows, and output (ho, wo) is frame ho·dil + wo, so the
         * rows come out in time order, t_out per utterance; w (cout, k·cin) the channel-last
         * order hconv2d reads */
        cuda_epi_t e = {};
        e.mode = CUDA_EPI_RESID32;
        e.out = acc;
        e.ldo = cout;
        e.alpha = 1.0f;
        e.beta = beta;
        e.dt = dt;
        return cuda_hconv2d(&e, xp, w, batch, cin, t_pad / dil, dil, cout, k, 1, stride, g, err);
    }
    /* tap j: rows s·stride + j·dil of the padded input, a strided view (lda = stride·cin), times
     * w[:, j, :] (rows of k·cin); every tap after the first adds to acc */
    size_t es = ops_dtype_size(dt);
    for (int j = 0; j < k; j++) {
        const char *a = (const char *)xp + (size_t)j * dil * cin * es;
        const char *b = (const char *)w + (size_t)j * cin * es;
        int rc = cuda_gemm(acc, OPS_F32, a, b, dt, t_out, cout, cin, stride * cin, k * cin, cout, 1,
                           1.0f, j ? 1.0f : beta, batch, (long long)t_pad * cin, 0,
                           (long long)t_out * cout, g, err);
        if (rc != HARK_OK)
            return rc;
    }
    return HARK_OK;
}

/* ---- depthwise ------------------------------------------------------------------------------ */

/* a block: 32 channels x DW_ROWS output frames of one utterance; each thread one channel and
 * DW_ROWS / 8 frames (threads (32, 8)) */
#define DW_ROWS 32

template <typename T>
__global__ void depthwise_kernel(T *out, const T *in, const float *w, const int *lens, int t, int c,
                                 int k, int stride, int dil, int pad, int t_out, int ldo)
{
    int ch = blockIdx.x * 32 + threadIdx.x, b = blockIdx.z;
    if (ch >= c)
        return;
    int v = lens && lens[b] < t ? lens[b] : t;
    /* the masked conv's output length for v input frames */
    int span = v + 2 * pad - dil * (k - 1) - 1;
    int v_out = span < 0 ? 0 : span / stride + 1;
    const T *x = in + (long long)b * t * c + ch;
    for (int s = blockIdx.y * DW_ROWS + threadIdx.y; s < t_out && s < (blockIdx.y + 1) * DW_ROWS;
         s += 8) {
        float sum = 0.0f;
        if (s < v_out) {
            int r0 = s * stride - pad;
            for (int j = 0; j < k; j++) {
                int r = r0 + j * dil;
                if (r >= 0 && r < v)
                    sum += w[(long long)j * c + ch] * ld_f(x + (long long)r * c);
            }
        }
        st_f(out + ((long long)b * t_out + s) * ldo + ch, sum);
    }
}

/* The same with the block's input rows (masked, as float) and taps staged in shared memory: a
 * block of 32 channels x DW_TILE output frames reads its (DW_TILE - 1)·stride + (k - 1)·dil + 1
 * input rows once instead of k times from L1 / L2 (QuartzNet's k = 33..87). The sum runs over
 * the taps in the same order. */
#define DW_TILE 64

static int dw_tile_rows(int k, int stride, int dil)
{
    return (DW_TILE - 1) * stride + (k - 1) * dil + 1;
}

template <typename T>
__global__ void depthwise_tiled_kernel(T *out, const T *in, const float *w, const int *lens, int t,
                                       int c, int k, int stride, int dil, int pad, int t_out,
                                       int rows, int ldo)
{
    extern __shared__ float dw_sm[];
    float *xs = dw_sm, *ws = dw_sm + (size_t)rows * 32; /* (rows, 32), (k, 32) */
    const int tx = threadIdx.x, ty = threadIdx.y, b = blockIdx.z;
    const int ch = blockIdx.x * 32 + tx, s0 = blockIdx.y * DW_TILE;
    const int v = lens && lens[b] < t ? lens[b] : t;
    const int span = v + 2 * pad - dil * (k - 1) - 1;
    const int v_out = span < 0 ? 0 : span / stride + 1;
    const int r0 = s0 * stride - pad;
    const T *x = in + (long long)b * t * c;
    for (int i = ty; i < rows; i += 8) {
        int r = r0 + i;
        xs[i * 32 + tx] = ch < c && r >= 0 && r < v ? ld_f(x + (long long)r * c + ch) : 0.0f;
    }
    for (int j = ty; j < k; j += 8)
        ws[j * 32 + tx] = ch < c ? w[(long long)j * c + ch] : 0.0f;
    __syncthreads();
    if (ch >= c)
        return;
    for (int i = ty; i < DW_TILE; i += 8) {
        int s = s0 + i;
        if (s >= t_out)
            break;
        float sum = 0.0f;
        if (s < v_out) {
            const float *xr = xs + (size_t)i * stride * 32 + tx;
            for (int j = 0; j < k; j++)
                sum += ws[j * 32 + tx] * xr[(size_t)j * dil * 32];
        }
        st_f(out + ((long long)b * t_out + s) * ldo + ch, sum);
    }
}

/* Register tiles (QuartzNet's separable convs, stride 1 or 2, dilation 1 or 2): a block of 32
 * channels x 8·R output frames, each thread R consecutive frames of one channel. The block's taps
 * (float, zero-padded to a multiple of DWR_JC) and input rows (in the input's type, masked) are
 * staged in shared memory, by 16-byte cp.async copies where the channels allow (vec: c a multiple
 * of 8 16-bit / 4 float values, both pointers 16-byte aligned), else element by element. A thread
 * then walks the taps DWR_JC at a time over a window of input rows held in registers (W of them,
 * sliding by DWR_JC · D), so each row and tap read from shared memory serves R (resp. up to
 * DWR_JC) multiply-adds instead of one: the tiled kernel is bound by shared-memory loads (two per
 * multiply-add) at k = 33..87. Sums over the taps in order, as the other two kernels (the zero
 * taps past k add exact zeros). */
#define DWR_JC 8

static int dwr_rows(int r, int kp, int stride, int dil)
{
    return (8 * r - 1) * stride + (kp - 1) * dil + 1;
}

template <typename T> static size_t dwr_smem(int rows, int kp)
{
    return (size_t)kp * 32 * sizeof(float) + (size_t)rows * 32 * sizeof(T);
}

template <typename T, int R, int S, int D>
__global__ void __launch_bounds__(256)
    depthwise_reg_kernel(T *out, const T *in, const float *w, const int *lens, int t, int c, int k,
                         int kp, int pad, int t_out, int rows, int vec, int ldo)
{
    constexpr int W = (R - 1) * S + (DWR_JC - 1) * D + 1, STEP = DWR_JC * D;
    static_assert(W >= STEP, "the window keeps rows from one chunk of taps to the next");
    extern __shared__ __align__(16) unsigned char dwr_sm[];
    float *ws = (float *)dwr_sm;         /* (kp, 32) */
    T *xs = (T *)(ws + (size_t)kp * 32); /* (rows, 32) */
    const int tx = threadIdx.x, ty = threadIdx.y, b = blockIdx.z, c0 = blockIdx.x * 32;
    const int ch = c0 + tx, s0 = blockIdx.y * (8 * R);
    const int v = lens && lens[b] < t ? lens[b] : t;
    const int span = v + 2 * pad - D * (k - 1) - 1;
    const int v_out = span < 0 ? 0 : span / S + 1;
    const int r0 = s0 * S - pad;
    const T *x = in + (long long)b * t * c;
    if (vec) {
        constexpr int XV = 16 / sizeof(T), XQ = 32 / XV; /* values per copy, copies per row */
        const int lane = ty * 32 + tx, q = lane % XQ, cx = c0 + q * XV, cw = c0 + (lane % 8) * 4;
        for (int i = lane / XQ; i < rows; i += 256 / XQ) {
            const int r = r0 + i;
            const bool ok = cx < c && r >= 0 && r < v;
            cp_async16(xs + i * 32 + q * XV, ok ? x + (long long)r * c + cx : x, ok);
        }
        for (int j = lane / 8; j < kp; j += 32) {
            const bool ok = cw < c && j < k;
            cp_async16(ws + j * 32 + (lane % 8) * 4, ok ? w + (long long)j * c + cw : w, ok);
        }
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        for (int i = ty; i < rows; i += 8) {
            const int r = r0 + i;
            st_f(xs + i * 32 + tx,
                 ch < c && r >= 0 && r < v ? ld_f(x + (long long)r * c + ch) : 0.0f);
        }
        for (int j = ty; j < kp; j += 8)
            ws[j * 32 + tx] = ch < c && j < k ? w[(long long)j * c + ch] : 0.0f;
    }
    __syncthreads();
    const int o0 = s0 + ty * R;
    if (ch >= c || o0 >= t_out)
        return;
    const T *xr = xs + (size_t)ty * R * S * 32 + tx; /* this thread's first row */
    float acc[R], win[W];
#pragma unroll
    for (int m = 0; m < R; m++)
        acc[m] = 0.0f;
#pragma unroll
    for (int i = 0; i < W; i++)
        win[i] = ld_f(xr + i * 32);
    for (int j0 = 0; j0 < kp; j0 += DWR_JC) {
#pragma unroll
        for (int jj = 0; jj < DWR_JC; jj++) {
            const float wj = ws[(j0 + jj) * 32 + tx];
#pragma unroll
            for (int m = 0; m < R; m++)
                acc[m] = fmaf(wj, win[m * S + jj * D], acc[m]);
        }
        if (j0 + DWR_JC < kp) { /* slide: rows (j0 + DWR_JC)·D + [0, W) */
            const T *nr = xr + (size_t)(j0 + DWR_JC) * D * 32;
#pragma unroll
            for (int i = 0; i < W - STEP; i++)
                win[i] = win[i + STEP];
#pragma unroll
            for (int i = W - STEP; i < W; i++)
                win[i] = ld_f(nr + i * 32);
        }
    }
    T *o = out + ((long long)b * t_out + o0) * ldo + ch;
#pragma unroll
    for (int m = 0; m < R; m++)
        if (o0 + m < t_out)
            st_f(o + (long long)m * ldo, o0 + m < v_out ? acc[m] : 0.0f);
}

/* launches the register-tiled kernel when the staged rows fit 48 KiB (R = 16, else 8); 0 when they
 * do not */
template <typename T, int S, int D>
static int depthwise_reg_go(void *out, const void *in, const float *w, const int *lens, int batch,
                            int t, int c, int k, int t_out, int ldo, cudaStream_t st)
{
    const int kp = (k + DWR_JC - 1) / DWR_JC * DWR_JC, pad = (k / 2) * D;
    const int vec =
        c % (int)(16 / sizeof(T)) == 0 && (uintptr_t)in % 16 == 0 && (uintptr_t)w % 16 == 0;
    for (int r = 16; r >= 8; r /= 2) {
        int rows = dwr_rows(r, kp, S, D);
        size_t smem = dwr_smem<T>(rows, kp);
        if (smem > 48 * 1024)
            continue;
        dim3 grid((unsigned)((c + 31) / 32), (unsigned)((t_out + 8 * r - 1) / (8 * r)),
                  (unsigned)batch);
        if (r == 16)
            depthwise_reg_kernel<T, 16, S, D><<<grid, dim3(32, 8), smem, st>>>(
                (T *)out, (const T *)in, w, lens, t, c, k, kp, pad, t_out, rows, vec, ldo);
        else
            depthwise_reg_kernel<T, 8, S, D><<<grid, dim3(32, 8), smem, st>>>(
                (T *)out, (const T *)in, w, lens, t, c, k, kp, pad, t_out, rows, vec, ldo);
        return 1;
    }
    return 0;
}

template <typename T>
static void depthwise_go(void *out, const void *in, const float *w, const int *lens, int batch,
                         int t, int c, int k, int stride, int dil, int t_out, int ldo,
                         cudaStream_t st)
{
    if ((stride == 1 && dil == 1 &&
         depthwise_reg_go<T, 1, 1>(out, in, w, lens, batch, t, c, k, t_out, ldo, st)) ||
        (stride == 1 && dil == 2 &&
         depthwise_reg_go<T, 1, 2>(out, in, w, lens, batch, t, c, k, t_out, ldo, st)) ||
        (stride == 2 && dil == 1 &&
         depthwise_reg_go<T, 2, 1>(out, in, w, lens, batch, t, c, k, t_out, ldo, st)))
        return;
    int rows = dw_tile_rows(k, stride, dil);
    size_t smem = ((size_t)rows + (size_t)k) * 32 * sizeof(float);
    if (smem <= 48 * 1024) {
        dim3 grid((unsigned)((c + 31) / 32), (unsigned)((t_out + DW_TILE - 1) / DW_TILE),
                  (unsigned)batch);
        depthwise_tiled_kernel<T><<<grid, dim3(32, 8), smem, st>>>((T *)out, (const T *)in, w, lens,
                                                                   t, c, k, stride, dil,
                                                                   (k / 2) * dil, t_out, rows, ldo);
        return;
    }
    dim3 grid((unsigned)((c + 31) / 32), (unsigned)((t_out + DW_ROWS - 1) / DW_ROWS),
              (unsigned)batch);
    depthwise_kernel<T><<<grid, dim3(32, 8), 0, st>>>((T *)out, (const T *)in, w, lens, t, c, k,
                                                      stride, dil, (k / 2) * dil, t_out, ldo);
}

extern "C" int cuda_conv1d_depthwise(void *out, const void *in, ops_dtype_t dt, const float *w,
                                     const int *lens, int batch, int t, int c, int k, int stride,
                                     int dil, int ldo, void *stream, hark_err_t *err)
{
    if (!dtype_ok(dt) || batch < 0 || batch > 65535 || t < 0 || c < 0 || k < 1 || stride < 1 ||
        dil < 1 || ldo < c)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d_depthwise: batch %d, t %d, c %d, k %d, stride %d, dil %d, ldo %d",
                       batch, t, c, k, stride, dil, ldo);
    int t_out = conv1d_len(t, k, stride, dil);
    if (batch == 0 || t_out == 0 || c == 0)
        return HARK_OK;
    if ((t_out + DW_ROWS - 1) / DW_ROWS > 65535)
        return err_set(err, HARK_ERR_TOO_LARGE, "conv1d_depthwise: %d output frames", t_out);
    cudaStream_t st = (cudaStream_t)stream;
    if (dt == OPS_F16)
        depthwise_go<__half>(out, in, w, lens, batch, t, c, k, stride, dil, t_out, ldo, st);
    else if (dt == OPS_BF16)
        depthwise_go<__nv_bfloat16>(out, in, w, lens, batch, t, c, k, stride, dil, t_out, ldo, st);
    else
        depthwise_go<float>(out, in, w, lens, batch, t, c, k, stride, dil, t_out, ldo, st);
    return launched(err, "conv1d_depthwise_kernel");
}

/* ---- bias + activation ---------------------------------------------------------------------- */

template <typename T>
__global__ void act_kernel(T *y, const float *x, const float *b, int n, int c, int act)
{
    long long total = (long long)n * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i] + (b ? b[i % c] : 0.0f);
        if (act == CONV1D_ACT_RELU)
            v = v > 0.0f ? v : 0.0f;
        else if (act == CONV1D_ACT_HARDTANH)
            v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
        st_f(y + i, v);
    }
}

extern "C" int cuda_conv1d_act(void *y, ops_dtype_t y_t, const float *x, const float *b, int n,
                               int c, conv1d_act_t act, void *stream, hark_err_t *err)
{
    if (!dtype_ok(y_t) || n < 0 || c < 0 || act < CONV1D_ACT_NONE || act > CONV1D_ACT_HARDTANH)
        return err_set(err, HARK_ERR_INVALID_ARG, "conv1d_act: n %d, c %d, act %d", n, c, (int)act);
    long long total = (long long)n * c;
    if (total == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    unsigned gr = grid_for(total, 256);
    if (y_t == OPS_F16)
        act_kernel<__half><<<gr, 256, 0, st>>>((__half *)y, x, b, n, c, (int)act);
    else if (y_t == OPS_BF16)
        act_kernel<__nv_bfloat16><<<gr, 256, 0, st>>>((__nv_bfloat16 *)y, x, b, n, c, (int)act);
    else
        act_kernel<float><<<gr, 256, 0, st>>>((float *)y, x, b, n, c, (int)act);
    return launched(err, "conv1d_act_kernel");
}

/* ---- HiFi-GAN's pieces: the transposed conv's crop, the MRF sum, the tanh head --------------- */

template <typename T>
__global__ void crop_bias_kernel(T *y, const float *x, const float *bias, int batch, int t, int c,
                                 int ld, long long ld_b, int off)
{
    long long n = (long long)batch * t * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        int col = (int)(i % c);
        long long row = i / c;
        int s = (int)(row % t), b = (int)(row / t);
        st_f(y + i, x[b * ld_b + (long long)(off + s) * ld + col] + (bias ? bias[col] : 0.0f));
    }
}

/* the same, four columns per thread (c, ld and ld_b multiples of 4; 32-bit indices) */
template <typename T>
__global__ void crop_bias4_kernel(T *y, const float *x, const float *bias, int t, int c, int ld,
                                  long long ld_b, int off, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4)
        return;
    const int q = c / 4, row = i / q, col = (i - row * q) * 4;
    const int b = row / t, s = row - b * t;
    float v[4];
    ld4(x + b * ld_b + (long long)(off + s) * ld + col, v);
    if (bias)
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] += bias[col + j];
    st4(y + (long long)i * 4, v);
}

template <typename T>
static void crop_bias_go(void *y, const float *x, const float *bias, int batch, int t, int c,
                         int ld, long long ld_b, int off, cudaStream_t st)
{
    long long n = (long long)batch * t * c;
    if (vec4_ok(n, sizeof(T), y, x, c, ld, 4, ld_b)) {
        int n4 = (int)(n / 4);
        crop_bias4_kernel<T>
            <<<(n4 + 255) / 256, 256, 0, st>>>((T *)y, x, bias, t, c, ld, ld_b, off, n4);
        return;
    }
    crop_bias_kernel<T>
        <<<grid_for(n, 256), 256, 0, st>>>((T *)y, x, bias, batch, t, c, ld, ld_b, off);
}

extern "C" int cuda_conv1d_crop_bias(void *y, ops_dtype_t y_t, const float *x, const float *bias,
                                     int batch, int t, int c, int ld, long long ld_b, int off,
                                     void *stream, hark_err_t *err)
{
    if (!dtype_ok(y_t) || batch < 0 || t < 0 || c < 0 || ld < c || off < 0 ||
        ld_b < (long long)(off + t) * ld)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "conv1d_crop_bias: batch %d, t %d, c %d, ld %d, ld_b %lld, off %d", batch, t,
                       c, ld, ld_b, off);
    long long n = (long long)batch * t * c;
    if (n == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    if (y_t == OPS_F16)
        crop_bias_go<__half>(y, x, bias, batch, t, c, ld, ld_b, off, st);
    else if (y_t == OPS_BF16)
        crop_bias_go<__nv_bfloat16>(y, x, bias, batch, t, c, ld, ld_b, off, st);
    else
        crop_bias_go<float>(y, x, bias, batch, t, c, ld, ld_b, off, st);
    return launched(err, "conv1d_crop_bias_kernel");
}

__global__ void sum_kernel(float *y, const float *x, const float *b, int first, float div, int n,
                           int c)
{
    long long total = (long long)n * c;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float v = (first ? 0.0f : y[i]) + (x[i] + (b ? b[i % c] : 0.0f));
        y[i] = div == 1.0f ? v : v / div;
    }
}

extern "C" int cuda_conv1d_sum(float *y, const float *x, const float *b, int first, float div,
                               int n, int c, void *stream, hark_err_t *err)
{
    if (n < 0 || c < 0 || !(div != 0.0f) || y == x)
        return err_set(err, HARK_ERR_INVALID_ARG, "conv1d_sum: n %d, c %d, div %g", n, c,
                       (double)div);
    long long total = (long long)n * c;
    if (total == 0)
        return HARK_OK;
    sum_kernel<<<grid_for(total, 256), 256, 0, (cudaStream_t)stream>>>(y, x, b, first, div, n, c);
    return launched(err, "conv1d_sum_kernel");
}

/* one thread per output sample; the weights (as float) in shared memory, read by all threads at
 * once (broadcast); the input rows of neighbouring samples come from L1 */
/* four consecutive x values as floats: float, or 16-bit (8-byte aligned) */
template <typename TX> __device__ __forceinline__ float4 ld4_f(const TX *p)
{
    if constexpr (sizeof(TX) == 4) {
        return *(const float4 *)p;
    } else {
        uint2 u = *(const uint2 *)p;
        float2 lo = h16<TX>::to_f2(*(const typename h16<TX>::T2 *)&u.x);
        float2 hi = h16<TX>::to_f2(*(const typename h16<TX>::T2 *)&u.y);
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
}

template <typename TX, typename TW>
__global__ void post_tanh_kernel(float *audio, float *pre, const TX *x, const TW *w, float bias,
                                 float slope, const int *lens, int t, int c, int k)
{
    extern __shared__ float sw[]; /* (k, c) */
    for (int i = threadIdx.x; i < k * c; i += blockDim.x)
        sw[i] = ld_f(w + i);
    __syncthreads();
    const int b = blockIdx.y, len = lens && lens[b] < t ? lens[b] : t;
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < t; s += gridDim.x * blockDim.x) {
        float z = 0.0f;
        if (s < len) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int r = s + j - k / 2;
                if (r < 0 || r >= len)
                    continue;
                const TX *xr = x + ((long long)b * t + r) * c;
                const float *wr = sw + j * c;
                for (int i = 0; i < c / 4; i++) {
                    float4 v = ld4_f(xr + 4 * i);
                    acc += wr[4 * i] * (v.x > 0.0f ? v.x : v.x * slope);
                    acc += wr[4 * i + 1] * (v.y > 0.0f ? v.y : v.y * slope);
                    acc += wr[4 * i + 2] * (v.z > 0.0f ? v.z : v.z * slope);
                    acc += wr[4 * i + 3] * (v.w > 0.0f ? v.w : v.w * slope);
                }
            }
            z = acc + bias;
        }
        long long q = (long long)b * t + s;
        if (pre)
            pre[q] = z;
        audio[q] = s < len ? tanhf(z) : 0.0f;
    }
}

/* the same with the block's rows in shared memory: the block's 256 outputs of item b read rows
 * s0 - k/2 .. s0 + 255 + k/2, loaded once, lrelu'd and masked to [0, len) (the taps the kernel
 * above skips read zeros here: the same sums), c + 1 floats apart (conflict-free); tiles stride the
 * grid */
#define POST_ROWS 256
template <typename TX, typename TW>
__global__ void post_tanh_tile_kernel(float *audio, float *pre, const TX *x, const TW *w,
                                      float bias, float slope, const int *lens, int t, int c, int k)
{
    extern __shared__ float sh[];
    float *sw = sh, *tile = sh + k * c; /* (k, c); (POST_ROWS + k - 1, c + 1) */
    const int ld = c + 1, rows = POST_ROWS + k - 1, h = k / 2, c4n = c / 4;
    for (int i = threadIdx.x; i < k * c; i += blockDim.x)
        sw[i] = ld_f(w + i);
    const int b = blockIdx.y, len = lens && lens[b] < t ? lens[b] : t;
    for (int s0 = blockIdx.x * POST_ROWS; s0 < t; s0 += gridDim.x * POST_ROWS) {
        __syncthreads(); /* the weights in; the last tile read */
        for (int i = threadIdx.x; i < rows * c4n; i += blockDim.x) {
            int q = i / c4n, c4 = (i % c4n) * 4, r = s0 - h + q;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r >= 0 && r < len)
                v = ld4_f(x + ((long long)b * t + r) * c + c4);
            float *d = tile + q * ld + c4;
            d[0] = v.x > 0.0f ? v.x : v.x * slope;
            d[1] = v.y > 0.0f ? v.y : v.y * slope;
            d[2] = v.z > 0.0f ? v.z : v.z * slope;
            d[3] = v.w > 0.0f ? v.w : v.w * slope;
        }
        __syncthreads();
        const int s = s0 + threadIdx.x;
        if (s >= t)
            continue;
        float z = 0.0f;
        if (s < len) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                const float *xr = tile + (threadIdx.x + j) * ld, *wr = sw + j * c;
                for (int i = 0; i < c; i++)
                    acc += wr[i] * xr[i];
            }
            z = acc + bias;
        }
        long long q = (long long)b * t + s;
        if (pre)
            pre[q] = z;
        audio[q] = s < len ? tanhf(z) : 0.0f;
    }
}

template <typename TX, typename TW>
static void post_tanh_go(float *audio, float *pre, const void *x, const void *w, float bias,
                         float slope, const int *lens, int batch, int t, int c, int k,
                         cudaStream_t st)
{
    size_t tile = ((size_t)k * c + (size_t)(POST_ROWS + k - 1) * (c + 1)) * sizeof(float);
    long long blocks = ((long long)t + POST_ROWS - 1) / POST_ROWS;
    dim3 grid((unsigned)(blocks > 65535 ? 65535 : blocks), (unsigned)batch);
    if (tile <= 48 * 1024) /* no opt-in needed: 32 channels at 7 taps take 35 KB */
        post_tanh_tile_kernel<TX, TW><<<grid, POST_ROWS, tile, st>>>(
            audio, pre, (const TX *)x, (const TW *)w, bias, slope, lens, t, c, k);
    else
        post_tanh_kernel<TX, TW><<<grid, 256, (size_t)c * k * sizeof(float), st>>>(
            audio, pre, (const TX *)x, (const TW *)w, bias, slope, lens, t, c, k);
}

template <typename TX>
static void post_tanh_w(float *audio, float *pre, const void *x, const void *w, ops_dtype_t w_t,
                        float bias, float slope, const int *lens, int batch, int t, int c, int k,
                        cudaStream_t st)
{
    if (w_t == OPS_F16)
        post_tanh_go<TX, __half>(audio, pre, x, w, bias, slope, lens, batch, t, c, k, st);
    else if (w_t == OPS_BF16)
        post_tanh_go<TX, __nv_bfloat16>(audio, pre, x, w, bias, slope, lens, batch, t, c, k, st);
    else
        post_tanh_go<TX, float>(audio, pre, x, w, bias, slope, lens, batch, t, c, k, st);
}

extern "C" int cuda_conv1d_post_tanh(float *audio, float *pre, const void *x, ops_dtype_t x_t,
                                     const void *w, ops_dtype_t w_t, float bias, float slope,
                                     const int *lens, int batch, int t, int c, int k, void *stream,
                                     hark_err_t *err)
{
    if (!dtype_ok(w_t) || !dtype_ok(x_t) || batch < 0 || t < 0 || c < 4 || c % 4 || k < 1 ||
        k % 2 == 0 || (long long)c * k > 8192)
        return err_set(err, HARK_ERR_INVALID_ARG, "conv1d_post_tanh: batch %d, t %d, c %d, k %d",
                       batch, t, c, k);
    if (batch == 0 || t == 0)
        return HARK_OK;
    cudaStream_t st = (cudaStream_t)stream;
    if (x_t == OPS_F16)
        post_tanh_w<__half>(audio, pre, x, w, w_t, bias, slope, lens, batch, t, c, k, st);
    else if (x_t == OPS_BF16)
        post_tanh_w<__nv_bfloat16>(audio, pre, x, w, w_t, bias, slope, lens, batch, t, c, k, st);
    else
        post_tanh_w<float>(audio, pre, x, w, w_t, bias, slope, lens, batch, t, c, k, st);
    return launched(err, "conv1d_post_tanh_kernel");
}
