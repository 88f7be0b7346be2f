/* conv1d.h — masked 1-D convolutions over padded batches (Jasper / QuartzNet's MaskedConv1d):
 * the CPU references (conv1d.c) and their GPU launchers (conv1d.cu). Tensors are time-major,
 * channels innermost: (batch, t, c), row stride given where it may differ from c. An utterance's
 * valid length lens[b] masks its input: rows at or past it read as zero (DLE's MaskedConv1d).
 * Tests: tests/ops/test_conv1d.c (the references), tests/ops/test_conv1d_cuda.c (each launcher
 * against its reference on awkward sizes, FP32 / FP16 / BF16).
 *
 * The launchers follow ops_cuda.h: outputs, inputs, sizes, then the stream or the GEMM context,
 * then err; they enqueue, never synchronise or allocate; HARK_OK, HARK_ERR_CUDA or
 * HARK_ERR_INVALID_ARG. They exist only with HARK_CUDA.
 */
#ifndef HARK_OPS_CONV1D_H
#define HARK_OPS_CONV1D_H

#include "core/error.h"
#include "ops/ops_cuda.h"

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

/* ---- GPU launchers (HARK_CUDA) ---------------------------------------------------------------
 * dtypes: OPS_F32, OPS_F16, OPS_BF16; FP32 accumulation throughout. */

/* conv1d_pad_mask_ref with in of in_t and out of out_t (converted, rounded to nearest). out may
 * alias in (an in-place mask) when pad_l = pad_r = 0, ld_in = ld_out and the types are equal. */
int cuda_conv1d_pad_mask(void *out, ops_dtype_t out_t, const void *in, ops_dtype_t in_t,
                         const int *lens, int batch, int t, int c, int ld_in, int ld_out, int pad_l,
                         int pad_r, void *stream, hark_err_t *err);

/* conv1d_ref with xp and w of dt (acc float). 16-bit with dil 1 and cin a multiple of 8: one
 * implicit GEMM over all taps (cuda_hconv2d, RESID32 epilogue); otherwise one strided-batched
 * GEMM per tap (cuda_gemm, the CPU path's order). */
int cuda_conv1d(float *acc, float beta, const void *xp, const void *w, ops_dtype_t dt, int batch,
                int t_pad, int cin, int cout, int k, int stride, int dil, ops_cuda_t *g,
                hark_err_t *err);

/* conv1d_depthwise_ref with in and out of dt (w float). */
int cuda_conv1d_depthwise(void *out, const void *in, ops_dtype_t dt, const float *w,
                          const int *lens, int batch, int t, int c, int k, int stride, int dil,
                          void *stream, hark_err_t *err);

/* conv1d_act_ref with y of y_t (x float). */
int cuda_conv1d_act(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c,
                    conv1d_act_t act, void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
