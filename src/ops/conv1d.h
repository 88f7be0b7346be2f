/* conv1d.h — masked 1-D convolutions over padded batches (Jasper / QuartzNet's MaskedConv1d):
 * the CPU references (conv1d.c) and their GPU launchers (conv1d.cu). Tensors are time-major,
 * channels innermost: (batch, t, c), row stride given where it may differ from c. An utterance's
 * valid length lens[b] masks its input: rows at or past it read as zero (DLE's MaskedConv1d).
 * Tests: tests/ops/test_conv1d.c (the references; the transposed conv as a polyphase conv),
 * tests/ops/test_conv1d_cuda.c (each launcher against its reference on awkward sizes, FP32 / FP16
 * / BF16).
 *
 * The launchers follow ops_cuda.h: outputs, inputs, sizes, then the stream or the GEMM context,
 * then err; they enqueue, never synchronise or allocate; HARK_OK, HARK_ERR_CUDA or
 * HARK_ERR_INVALID_ARG. They exist only with HARK_CUDA.
 */
#ifndef HARK_OPS_CONV1D_H
#define HARK_OPS_CONV1D_H

#include "core/error.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* activations of conv1d_act */
typedef enum { CONV1D_ACT_NONE = 0, CONV1D_ACT_RELU = 1, CONV1D_ACT_HARDTANH = 2 } conv1d_act_t;

/* Output frames of a conv with `pad` = (k / 2) · dil on both sides over len frames (k odd). */
int conv1d_len(int len, int k, int stride, int dil);

/* ---- CPU references ------------------------------------------------------------------------ */

/* out (batch, pad_l + t + pad_r, ld_out): row pad_l + s = in row s (its first c columns) for
 * 0 <= s < min(lens[b], t), every other row and column >= c zero. in (batch, t, ld_in).
 * lens NULL: t for all. */
void conv1d_pad_mask_ref(float *out, const float *in, const int *lens, int batch, int t, int c,
                         int ld_in, int ld_out, int pad_l, int pad_r);

/* acc (batch, t_out, cout) = beta · acc + Σ_j xp[b][s·stride + j·dil] · w[:, j, :]ᵀ over an
 * already padded input xp (batch, t_pad, cin); w (cout, k, cin);
 * t_out = (t_pad - dil·(k - 1) - 1) / stride + 1. beta 0: acc is not read. */
void conv1d_ref(float *acc, float beta, const float *xp, const float *w, int batch, int t_pad,
                int cin, int cout, int k, int stride, int dil);

/* Depthwise conv (no bias) of the masked input, with the output masked for the next conv:
 *   out[b][s][ch] = Σ_j w[j][ch] · in'[b][s·stride + j·dil - pad][ch]  (pad = (k / 2) · dil)
 * in' = in for rows < min(lens[b], t), 0 otherwise; out rows >= conv1d_len(lens[b]) are 0.
 * in (batch, t, c), w (k, c) tap-major, out (batch, conv1d_len(t), c). lens NULL: t for all. */
void conv1d_depthwise_ref(float *out, const float *in, const float *w, const int *lens, int batch,
                          int t, int c, int k, int stride, int dil);

/* y (n, c) = act(x (n, c) + b), b (c) or NULL; hardtanh clamps to [-1, 1] (nn.Hardtanh()). */
void conv1d_act_ref(float *y, const float *x, const float *b, int n, int c, conv1d_act_t act);

/* conv1d_pad_mask_ref fused with a bias and a leaky ReLU (HiFi-GAN): row pad_l + s of out =
 * lrelu(in row s + bias) for 0 <= s < min(lens[b], t), lrelu(v) = v > 0 ? v : slope · v (slope 1:
 * none); bias (c) or NULL. Every other row and column >= c zero. */
void conv1d_pad_mask_act_ref(float *out, const float *in, const float *bias, float slope,
                             const int *lens, int batch, int t, int c, int ld_in, int ld_out,
                             int pad_l, int pad_r);

/* Where conv1d_res reads x and what else it writes (NULL: x is (batch, t, c) contiguous, no bias,
 * nothing else): x_ld_b > 0 elements between items of x (rows of an item stay c apart), x_bias (c)
 * added to every x value read (a transposed conv's bias, its output read uncropped); with sum and
 * next, lrelu(the new sum, next_slope) rounded to 16 bits also goes to next + b·next_ld_b +
 * (next_off + s)·c for s < len (the next transposed conv's padded input; other rows untouched),
 * and sum itself is not written back when no_sum_store. x16: x holds 16-bit values of the kernel's
 * dtype (the residual between a resblock's dilations; the reference reads x's floats as given, the
 * tests round them first); out16: out is written rounded to that dtype (the reference rounds out
 * with round16); sum16: sum holds 16-bit values of that dtype, read (not first) and written rounded
 * (the reference rounds the sum it stores; the sum's value for next is the unrounded one). */
typedef struct {
    long long x_ld_b;
    const float *x_bias;
    void *next;
    long long next_ld_b;
    int next_off;
    float next_slope;
    int no_sum_store;
    int x16, out16, sum16;
} conv1d_res_ext_t;

/* One dilation of HiFi-GAN's resblocks on the FP32 residual stream x (batch, t, c), fused
 * (cuda_conv1d_res): with len = lens[b] clamped to t (lens NULL: t),
 *   a[v] = lrelu(x[v]) for 0 <= v < len, else 0
 *   two convs (ResBlock1, k2 > 0):
 *     z[u] = lrelu(b1 + Σ_j w1[:, j, :] · a[u + (j - k1/2)·d1]) for 0 <= u < len, else 0
 *     y[s] = x[s] + (b2 + Σ_j w2[:, j, :] · z[s + j - k2/2])
 *   one conv (ResBlock2, k2 = 0): y[s] = x[s] + (b1 + Σ_j w1[:, j, :] · a[s + (j - k1/2)·d1])
 * then, for s < len only (rows at or past len are not written): out[s] = y[s] (out not NULL) and
 * sum[s] = ((first ? 0 : sum[s]) + y[s]) / div (sum not NULL; div 1: no division) — the MRF
 * average of the resblocks, one at a time. lrelu(v) = v > 0 ? v : slope · v; w1 (c, k1, c) and
 * w2 (c, k2, c) as (cout, tap, cin); b1, b2 (c); k1, k2 odd. round16 (or NULL) is applied to a
 * and to z (the values the GPU rounds to 16 bits: the tests pass a rounding to the kernel's
 * dtype). */
void conv1d_res_ref(float *out, float *sum, const float *x, const float *w1, const float *b1,
                    int k1, int d1, const float *w2, const float *b2, int k2, float slope,
                    const int *lens, int batch, int t, int c, int first, float div,
                    const conv1d_res_ext_t *ext, void (*round16)(float *v, size_t n, void *user),
                    void *user);

/* ---- ConvTranspose1d as a conv (polyphase) ---------------------------------------------------
 * A transposed conv of stride u, kernel k and padding pad (torch's, output length (t-1)·u - 2·pad
 * + k) is the plain conv of its input, zero-padded by J - 1 = conv1d_transpose_taps(k, u) - 1
 * rows on the left and conv1d_transpose_pad_r(pad, u) on the right, with J taps and u · cout_p
 * output columns (phase r of output row q: full output position q·u + r), followed by a crop of
 * pad positions (conv1d_crop_bias_ref with off = pad): no zero-stuffed input, no overlap-add. */
int conv1d_transpose_taps(int k, int stride);
int conv1d_transpose_pad_r(int pad, int stride);
/* w (u · cout_p, J, cin_p), zeros where cout/cin are padded or a tap is past k, from wt (cin,
 * cout, k), torch's ConvTranspose1d weight. */
void conv1d_transpose_weights(float *w, const float *wt, int cin, int cout, int k, int stride,
                              int cin_p, int cout_p);
/* Plain ConvTranspose1d (the direct scatter; the tests' reference): y (batch, t_out, cout) =
 * b + Σ x (batch, t, cin) · wt, t_out = (t - 1)·stride - 2·pad + k, b (cout) or NULL. */
void conv1d_transpose_ref(float *y, const float *x, const float *wt, const float *b, int batch,
                          int t, int cin, int cout, int k, int stride, int pad);

/* y (batch, t, c) = x[b · ld_b + (off + s) · ld + col] + bias[col] (bias (c) or NULL): the crop
 * of a transposed conv's polyphase output (ld = c_x >= c columns). */
void conv1d_crop_bias_ref(float *y, const float *x, const float *bias, int batch, int t, int c,
                          int ld, long long ld_b, int off);

/* y (n, c) = ((first ? 0 : y) + x + b) / div, b (c) or NULL (div 1: no division): the MRF
 * average of HiFi-GAN's resblocks, one resblock's output at a time. */
void conv1d_sum_ref(float *y, const float *x, const float *b, int first, float div, int n, int c);

/* HiFi-GAN's conv_post and tanh, one output channel: with len = lens[b] clamped to t (lens NULL: t)
 * and a[v] = lrelu(x[v]) (slope) for 0 <= v < len, 0 otherwise,
 *   pre[s] = bias + Σ_j Σ_i w[j·c + i] · a[s + j - k/2][i],  audio[s] = tanh(pre[s])  for s < len,
 * both 0 past len; x (batch, t, c) float, w (k, c) (the conv's (1, k, c) weight), pre (batch, t)
 * or NULL. */
void conv1d_post_tanh_ref(float *audio, float *pre, const float *x, const float *w, float bias,
                          float slope, const int *lens, int batch, int t, int c, int k);

/* ---- GPU launchers (HARK_CUDA) ---------------------------------------------------------------
 * dtypes: OPS_F32, OPS_F16, OPS_BF16; FP32 accumulation throughout. */

/* conv1d_pad_mask_ref with in of in_t and out of out_t (converted, rounded to nearest). out may
 * alias in (an in-place mask) when pad_l = pad_r = 0, ld_in = ld_out and the types are equal. */
int cuda_conv1d_pad_mask(void *out, ops_dtype_t out_t, const void *in, ops_dtype_t in_t,
                         const int *lens, int batch, int t, int c, int ld_in, int ld_out, int pad_l,
                         int pad_r, void *stream, hark_err_t *err);

/* conv1d_ref with xp and w of dt (acc float). 16-bit with cin a multiple of 8 and dil 1 (or
 * stride 1 and t_pad a multiple of dil): one implicit GEMM over all taps (cuda_hconv2d, RESID32
 * epilogue); otherwise one strided-batched GEMM per tap (cuda_gemm, the CPU path's order). */
int cuda_conv1d(float *acc, float beta, const void *xp, const void *w, ops_dtype_t dt, int batch,
                int t_pad, int cin, int cout, int k, int stride, int dil, ops_cuda_t *g,
                hark_err_t *err);

/* conv1d_depthwise_ref with in and out of dt (w float), out's rows ldo >= c apart (the columns
 * past c untouched). */
int cuda_conv1d_depthwise(void *out, const void *in, ops_dtype_t dt, const float *w,
                          const int *lens, int batch, int t, int c, int k, int stride, int dil,
                          int ldo, void *stream, hark_err_t *err);

/* conv1d_act_ref with y of y_t (x float). */
int cuda_conv1d_act(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c,
                    conv1d_act_t act, void *stream, hark_err_t *err);

/* conv1d_pad_mask_act_ref (bias float, device, or NULL) with in of in_t, out of out_t. */
int cuda_conv1d_pad_mask_act(void *out, ops_dtype_t out_t, const void *in, ops_dtype_t in_t,
                             const float *bias, float slope, const int *lens, int batch, int t,
                             int c, int ld_in, int ld_out, int pad_l, int pad_r, void *stream,
                             hark_err_t *err);

/* conv1d_crop_bias_ref, float; y of y_t. */
int cuda_conv1d_crop_bias(void *y, ops_dtype_t y_t, const float *x, const float *bias, int batch,
                          int t, int c, int ld, long long ld_b, int off, void *stream,
                          hark_err_t *err);

/* conv1d_sum_ref, float; y must not alias x. */
int cuda_conv1d_sum(float *y, const float *x, const float *b, int first, float div, int n, int c,
                    void *stream, hark_err_t *err);

/* conv1d_res_ref on the tensor cores: w1, w2 of dt (OPS_F16 or OPS_BF16), a and z rounded to it,
 * FP32 accumulation; x, out, sum float (or 16-bit of dt: ext x16 / out16 / sum16), out and sum
 * never aliasing x or each other. Only where
 * cuda_conv1d_res_fits (c = 32, 64, 128 or 256, and the block's shared memory fits the current
 * device), else HARK_ERR_INVALID_ARG. hopper 1 (the caller's path is GPU_PATH_HOPPER): the
 * wgmma kernel where it is the faster one (64 channels and up) on a compute capability 9.0
 * device; 2: wgmma for every width (tests); 0 or another device: mma.sync kernels. The same
 * results up to the order of FP32 sums. ext (conv1d_res_ext_t, or NULL): x_ld_b a multiple of 4
 * (8 with x16), x, out, sum, x_bias and next 16-byte aligned, next_ld_b even, next of dt. */
int cuda_conv1d_res_fits(int c, int k1, int d1, int k2);
int cuda_conv1d_res(void *out, void *sum, const void *x, const void *w1, const float *b1, int k1,
                    int d1, const void *w2, const float *b2, int k2, ops_dtype_t dt, float slope,
                    const int *lens, int batch, int t, int c, int first, float div,
                    const conv1d_res_ext_t *ext, int hopper, void *stream, hark_err_t *err);

/* conv1d_post_tanh_ref with x of x_t and w of w_t (any of the three, read as float; lens device,
 * or NULL); c a multiple of 4, c · k <= 8192. FP32 arithmetic throughout. */
int cuda_conv1d_post_tanh(float *audio, float *pre, const void *x, ops_dtype_t x_t, const void *w,
                          ops_dtype_t w_t, float bias, float slope, const int *lens, int batch,
                          int t, int c, int k, void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
