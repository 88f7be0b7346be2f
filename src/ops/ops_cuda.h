/* ops_cuda.h — the neural-model ops of ops.h on the GPU (float32, and float16 or bfloat16 operands
 * with float32 accumulation), used by the GPU Conformer. Each launcher `cuda_<op>` enqueues on a
 * stream and never synchronises or allocates; its CPU reference is the `<op>_ref` named in its
 * comment. Tests: tests/ops/test_ops_cuda.c (each op against its _ref on awkward sizes, guard
 * bytes).
 *
 * Conventions (as ops.h): row-major, rows = frames, columns = features; weights in the PyTorch
 * layout. All pointers are device pointers unless stated. A `void *` tensor has the dtype passed
 * beside it; intermediate results that feed a residual, a norm or a softmax stay float32.
 * Arguments: outputs, inputs, sizes, then the stream (`void *` = cudaStream_t, NULL = default) or
 * the GEMM context (which carries its stream), then `hark_err_t *err`. Every launcher returns
 * HARK_OK or HARK_ERR_CUDA (a failed launch or cuBLAS call, named in err) / HARK_ERR_INVALID_ARG.
 * Padded batches: `lens` (device, one int per utterance) gives each utterance's valid rows.
 */
#ifndef HARK_OPS_OPS_CUDA_H
#define HARK_OPS_OPS_CUDA_H

#include "core/error.h"
#include "ops/ops.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* element types; OPS_F16 and OPS_BF16 are "the 16-bit types" of the FP16 path below */
typedef enum { OPS_F32 = 0, OPS_F16 = 1, OPS_BF16 = 2 } ops_dtype_t;
/* same values as ops_act_t in ops.h */
typedef enum {
    CUDA_ACT_NONE = 0,
    CUDA_ACT_RELU,
    CUDA_ACT_SWISH,
    CUDA_ACT_GELU,
    CUDA_ACT_DSWISH,
    CUDA_ACT_SWOOSHL,
    CUDA_ACT_SWOOSHR
} cuda_act_t;
typedef enum { CUDA_NORM_NONE = 0, CUDA_NORM_BATCH, CUDA_NORM_LAYER } cuda_norm_t;

size_t ops_dtype_size(ops_dtype_t t);

/* ---- GEMM context: a cuBLAS handle bound to one stream, with its own workspace -------------- */
typedef struct ops_cuda ops_cuda_t;

/* stream: cudaStream_t (NULL = default). The handle runs FP32 GEMMs in true FP32 (TF32 off) and
 * FP16 / BF16 GEMMs on the tensor cores with FP32 accumulation. Allocates its workspace here, never
 * later. Takes the current device's GPU path (gpu_device_path: Hopper or Ampere, HARK_GPU_ARCH),
 * once, for the context's life; a device hark cannot use fails here with the reason
 * (HARK_ERR_UNSUPPORTED / HARK_ERR_NO_DEVICE / HARK_ERR_INVALID_ARG for a bad HARK_GPU_ARCH). */
int ops_cuda_create(void *stream, ops_cuda_t **out, hark_err_t *err);
/* the path the context took: gpu_path_t (gpu/gpu_arch.h), GPU_PATH_HOPPER or GPU_PATH_AMPERE */
int ops_cuda_path(const ops_cuda_t *g);
void ops_cuda_destroy(ops_cuda_t *g); /* accepts NULL */
void *ops_cuda_stream(const ops_cuda_t *g);
size_t ops_cuda_workspace_bytes(void);

/* c (m, n) = alpha · a (m, k) · op(b) + beta · c for each of `batch` matrices (strides sa, sb, sc
 * in elements); op(b) = bᵀ when trans_b (b is (n, k)), else b (k, n). a and b are ab_t, c is c_t;
 * accumulation is FP32 for both. Reference: matmul_ref. */
int cuda_gemm(void *c, ops_dtype_t c_t, const void *a, const void *b, ops_dtype_t ab_t, int m,
              int n, int k, int lda, int ldb, int ldc, int trans_b, float alpha, float beta,
              int batch, long long sa, long long sb, long long sc, ops_cuda_t *g, hark_err_t *err);

/* y (n, out) float32 = act(x (n, in) · wᵀ + b); x and w are xw_t, b (out) or NULL.
 * Reference: linear_ref then activation_ref. */
int cuda_linear(float *y, const void *x, const void *w, ops_dtype_t xw_t, const float *b, int n,
                int in, int out, cuda_act_t act, ops_cuda_t *g, hark_err_t *err);

/* ---- elementwise / row ops ------------------------------------------------------------------ */

/* dst (n) of dst_t = src (n) of src_t (round to nearest). */
int cuda_cast(void *dst, ops_dtype_t dst_t, const void *src, ops_dtype_t src_t, size_t n,
              void *stream, hark_err_t *err);

/* y (n, c) of y_t = act(x (n, c) + b), b (c) or NULL; y may alias x when y_t is F32.
 * Reference: activation_ref (bias added first). */
int cuda_bias_act(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c,
                  cuda_act_t act, void *stream, hark_err_t *err);

/* The residual add fused with layer norm, per row r of (n, d):
 *   s = (res ? res[r] : 0) + alpha · (a[r] + bias) + (pe ? pe[r mod pe_rows] : 0)
 *   z = ln ? (s - mean) / sqrt(var + eps) · g + b : s        (g, b (d) or NULL: 1, 0)
 *   x_out[r] = post ? z : s  (float32; may be NULL; may alias res)
 *   y_out[r] = z             (y_t; may be NULL; may alias x_out when y_t is F32)
 * a, bias may be NULL (no term). Reference: axpy_ref + layer_norm_ref. */
int cuda_residual_layer_norm(float *x_out, void *y_out, ops_dtype_t y_t, const float *res,
                             const float *a, const float *bias, float alpha, const float *pe,
                             int pe_rows, const float *g, const float *b, int ln, int post, int n,
                             int d, float eps, void *stream, hark_err_t *err);

/* y (n, d) of y_t = layer_norm(x). Reference: layer_norm_ref. */
int cuda_layer_norm(void *y, ops_dtype_t y_t, const float *x, const float *g, const float *b, int n,
                    int d, float eps, void *stream, hark_err_t *err);

/* y (n, c) = batch norm in eval mode (BatchNorm1d, channels along columns); y may alias x.
 * Reference: batch_norm_ref. */
int cuda_batch_norm(float *y, const float *x, const float *g, const float *b, const float *rm,
                    const float *rv, int n, int c, float eps, void *stream, hark_err_t *err);

/* y (n, c) of y_t = (x[:, :c] + b[:c]) · sigmoid(x[:, c:] + b[c:]), x (n, 2c), b (2c) or NULL.
 * Reference: glu_ref. */
int cuda_glu(void *y, ops_dtype_t y_t, const float *x, const float *b, int n, int c, void *stream,
             hark_err_t *err);

/* Depthwise conv over time for a padded batch, fused with the conv module's norm and activation:
 *   z[b][t][ch] = bias[ch] + Σ_j w[ch][j] · in'[b][t + j - pad_left][ch]
 *   out = act(norm(z))   norm: none; batch (g, beta, rm, rv per channel); layer (over the row)
 * in (batch, t_len, c) float32; in'[s] = in[s] for 0 <= s < lens[b], left[pad_left + s] for
 * s < 0 when left (pad_left, c) is given, 0 otherwise. out (batch, t_len, c) of out_t.
 * lens NULL: every utterance has t_len rows. Reference: depthwise_conv1d_ref, batch_norm_ref /
 * layer_norm_ref, activation_ref. */
int cuda_depthwise_conv_norm_act(void *out, ops_dtype_t out_t, const float *in, const float *left,
                                 const float *w, const float *bias, const int *lens, int batch,
                                 int t_len, int c, int k, int pad_left, cuda_norm_t norm,
                                 const float *g, const float *beta, const float *rm,
                                 const float *rv, float eps, cuda_act_t act, void *stream,
                                 hark_err_t *err);

/* Masked softmax over the score rows of a padded batch of attention maps, x (batch, heads, t, m)
 * float32 (row stride m), into y of y_t (same shape; may alias x when y_t is F32). Row (b, h, i)
 * keeps keys [lo, hi): hi = lens[b] (capped at m), lo = 0; with chunk > 0 (WeNet's chunk mask)
 * hi = min((i/chunk + 1)·chunk, lens[b]) and lo = left < 0 ? 0 : max((i/chunk - left)·chunk, 0).
 * Keys outside get 0; an empty range gives a zero row. Reference: softmax_masked_ref. */
int cuda_softmax_masked(void *y, ops_dtype_t y_t, const float *x, const int *lens, int batch,
                        int heads, int t, int m, int chunk, int left, void *stream,
                        hark_err_t *err);

/* y (n, m) float32 = log_softmax(x + b) per row, b (m) or NULL; y may alias x. With lens, row
 * r = (b, i) of a (batch, t_rows) grid with i >= lens[b] is set to 0 (n = batch · t_rows).
 * Reference: log_softmax_ref. */
int cuda_log_softmax(float *y, const float *x, const float *b, const int *lens, int t_rows, int n,
                     int m, void *stream, hark_err_t *err);

/* Rows (b, i) of buf (batch, t, cols) float32 with i >= lens[b] set to 0. */
int cuda_zero_pad_rows(float *buf, const int *lens, int batch, int t, int cols, void *stream,
                       hark_err_t *err);

/* out (batch, t, f) of out_t = (x - mean) · istd per column for rows t < lens[b], 0 after.
 * mean/istd (f) or NULL (no normalisation). Reference: the CMVN loop of conformer.c. */
int cuda_cmvn(void *out, ops_dtype_t out_t, const float *x, const float *mean, const float *istd,
              const int *lens, int batch, int t, int f, void *stream, hark_err_t *err);

/* Sinusoidal table pe (n, d) float32 as pos_enc_table_ref. */
int cuda_pos_enc(float *pe, int n, int d, void *stream, hark_err_t *err);

/* Writes lens[0..n) from host values passed by value (no host sync, no pinned memory); n <= 512.
 * Later kernels on the same stream see the values. */
#define CUDA_MAX_LENS 512
int cuda_set_lens(int *d_lens, const int *host_lens, int n, void *stream, hark_err_t *err);

/* ---- the attention decoder's row ops (model/decoder_gpu.c) ---------------------------------- */

/* x (rows, d) float32 = emb[tok[r]] · xscale + pe[pos[r]] per row r; emb (vocab, d), pe
 * (max_pos, d), tok / pos (rows) device ints (in range: the caller checks). Reference: the
 * embedding loop of decoder.c. */
int cuda_embed_pos(float *x, const float *emb, const float *pe, const int *tok, const int *pos,
                   int rows, int d, float xscale, void *stream, hark_err_t *err);

/* Attention of each query row over its own run of key rows (rows of ragged groups: a
 * decoder's candidates, or the encoder frames of a candidate's utterance):
 *   ctx[r, h] = softmax_j(scale · q[r, h] · k[kbeg[r] + j, h]) · v[kbeg[r] + j, h],
 *   j in [0, klen[r])  (klen[r] = 0: ctx row 0)
 * q (rows, ldq), k and v (·, ldkv) float32, head h at columns h·dk; ctx (rows, heads·dk) dense;
 * dk <= 128. A block per (16 rows, head) stages the union of its rows' runs in shared memory, 32
 * keys at a time (rows whose runs differ much, as in a tile spanning two groups, cost that much
 * more); keys outside a row's run are never read into its context (they may be NaN). Reference:
 * attention_ref per group (decoder.c: causal self-attention with hi = r + 1, source attention
 * over T frames). */
int cuda_segment_attention(float *ctx, const float *q, int ldq, const float *k, const float *v,
                           int ldkv, const int *kbeg, const int *klen, int rows, int heads, int dk,
                           float scale, void *stream, hark_err_t *err);

/* out[r] = log_softmax(logits[r, :] + bias)[target[r]] for rows r (logits (rows, ld) float32, v
 * columns, bias (v) or NULL, target in [0, v)). Reference: log_softmax_ref then the gather. */
int cuda_lse_gather(float *out, const float *logits, int ld, const float *bias, const int *target,
                    int rows, int v, void *stream, hark_err_t *err);

/* ---- conv2d (WeNet subsampling) -------------------------------------------------------------
 * out (batch, h_out, cout, w_out) of io_t = act(conv2d(in) + b) (act a cuda_act_t: 0 none, 1 ReLU,
 * ...), in (batch, h, cin, w) of io_t,
 * each batch item an image of h time rows (the time-major layout of conv2d_ref); w (cout, cin,
 * kh, kw) and b (cout) in float32 (w32) or io_t (w_io, used for the GEMM path). Small kernels
 * (cin·kh·kw <= 32) run directly; larger ones as im2col + GEMM + a transposing bias/act, in blocks
 * of output rows that fit `scratch` (scratch_bytes; at least cuda_conv2d_scratch_bytes(1, ...)).
 * Reference: conv2d_ref (+ activation_ref). */
size_t cuda_conv2d_scratch_bytes(int rows, int cin, int cout, int kh, int kw, int w_out,
                                 ops_dtype_t io_t);
int cuda_conv2d(void *out, void *scratch, size_t scratch_bytes, const void *in, const float *w32,
                const void *w_io, const float *b, ops_dtype_t io_t, int batch, int cin, int h,
                int w_in, int cout, int kh, int kw, int stride, int act, ops_cuda_t *g,
                hark_err_t *err);

/* ---- attention ------------------------------------------------------------------------------
 * ctx (batch, t, H·dk) of dt = multi-head attention of each utterance over its own keys, as
 * attention_ref per utterance (WeNet rel_selfattn when p is given: scores = scale · ((q + bu)·kᵀ
 * + (q + bv)·pᵀ), no rel_shift; plain scaled dot product otherwise), masked as
 * cuda_softmax_masked (lens, chunk, left).
 *   q, k, v (batch, t, ·) float32 with row stride ld, head h in columns h·dk (e.g. the q, k, v
 *   thirds of a fused QKV projection); bq, bk, bv (H·dk) biases added first, or NULL
 *   p (t, H·dk) float32 projected positions or NULL; bu, bvp (H, dk) or NULL (zero)
 * Runs: a packing kernel, one strided-batched score GEMM (batch·H), the masked softmax, H
 * strided-batched value GEMMs; 16-bit operands with dt F16 or BF16. scratch:
 * cuda_attention_scratch_bytes. */
size_t cuda_attention_scratch_bytes(int batch, int t, int heads, int dk, int rel, ops_dtype_t dt);
int cuda_attention(void *ctx, ops_dtype_t dt, void *scratch, const float *q, const float *k,
                   const float *v, int ld, const float *bq, const float *bk, const float *bv,
                   const float *p, const float *bu, const float *bvp, const int *lens, int chunk,
                   int left, int batch, int t, int heads, int dk, float scale, ops_cuda_t *g,
                   hark_err_t *err);

/* ---- FP16 path: activations in FP16, residual stream in FP32 (gemm_f16.cu, attention_f16.cu,
 * rows_f16.cu, ffn_f16.cu). The same kernels run either 16-bit type: "half" below is the element
 * type `dt`, OPS_F16 (`void *` = __half) or OPS_BF16 (__nv_bfloat16), and operands are of that
 * type unless typed float. The GEMMs (cuda_hgemm, cuda_hconv2d) take dt in cuda_epi_t, the other
 * launchers as an argument. ---------------------------------------------------------------- */

/* The layer norms that follow a residual update r0 (rows of the FP32 stream), fused into the
 * kernel that makes the update (cuda_ffn, cuda_hgemm's RESID32 with `norm`):
 *     r1 = ln1 ? LN(r0; g1, n_b1) : r0;   r2 = ln2 ? LN(r1; g2, n_b2) : r1
 *     x = r0, r1 or r2 (x_sel 0, 1, 2);   h_out (half: the launcher's dt, the next GEMM's input)
 *     = r2 when not NULL
 * g/n_b NULL: 1/0. */
typedef struct {
    int x_sel;
    const float *g1, *n_b1, *g2, *n_b2;
    int ln1, ln2;
    void *h_out;
    float eps;
} cuda_row_norms_t;

/* What a GEMM does with its FP32 accumulator acc (m, n) (+ bias[n] first, when bias):
 *   CUDA_EPI_F16     out (half) = act(acc + bias)
 *   CUDA_EPI_RESID32 out (float) = beta · out + alpha · (acc + bias) + pe[m mod pe_rows]
 *                    (beta 0: out is not read; pe (pe_rows, ·) row stride ld_pe, or NULL);
 *                    with `norm` (beta 1, no pe, ldo = n): then the norms, out being x — in the
 *                    epilogue of 128 x 256 wgmma tiles (whole rows) for n = 256 on Hopper when
 *                    k <= 1024 and m fills half the GPU, else as a cuda_rows_norm pass after the
 *                    GEMM
 *   CUDA_EPI_F32     out (float) = acc + bias
 *   CUDA_EPI_GLU16   out (half) (m, n / 2) = v[2i] · sigmoid(v[2i + 1]) for v = acc + bias: the
 *                    GLU of a projection whose (value, gate) output columns are interleaved (n
 * even) CUDA_EPI_LSE     out (float4) (m, CUDA_LSE_TILES(n)): per row and block of 128 columns, the
 *                    (max, Σ exp(v - max), argmax) of v = acc + bias, for cuda_lse_argmax: the
 *                    CTC head's log-softmax + greedy argmax without writing the logits
 * ldo: out's row stride in elements (LSE: CUDA_LSE_TILES(n) float4s). */
#define CUDA_LSE_TILES(n) (((n) + 127) / 128)
typedef enum {
    CUDA_EPI_F16 = 0,
    CUDA_EPI_RESID32,
    CUDA_EPI_F32,
    CUDA_EPI_LSE,
    CUDA_EPI_GLU16
} cuda_epi_mode_t;
typedef struct {
    cuda_epi_mode_t mode;
    cuda_act_t act;
    const float *bias;
    void *out;
    long long ldo;
    float alpha, beta;
    const float *pe;
    int pe_rows;
    long long ld_pe;
    const float *bias_alpha; /* RESID32: alpha · bias precomputed (n), or NULL; lets cuBLASLt,
                                whose bias is added after alpha, run it when alpha != 1 */
    const void *bias_h;      /* F16: the bias as half (n), or NULL; lets cuBLASLt (whose bias has
                                D's type) run it */
    const cuda_row_norms_t *norm; /* RESID32: the norms after the update, or NULL */
    ops_dtype_t dt; /* the 16-bit type of a, w, the F16 / GLU16 outputs, bias_h and norm->h_out:
                       OPS_F16 or OPS_BF16; OPS_F32 (0: a zeroed struct) means OPS_F16 */
} cuda_epi_t;

/* Which implementation runs cuda_hgemm / cuda_hconv2d: AUTO gives cuBLASLt (its Hopper kernels)
 * the epilogues it can express — bias and ReLU (BIAS / RELU_BIAS), the residual update as
 * alpha/beta, F32; swish and GELU as its BIAS plus a second pass over the output
 * (HARK_LT_ACT_PASS=0 keeps those fused in hark's kernels) — and the rest (pe, LSE, the convs)
 * to the wgmma kernel on the Hopper path when the GEMM fills the GPU with 128 x 128 tiles, else
 * to the mma.sync kernel. MMA, LT and WGMMA force one (LT and WGMMA where they can, mma.sync
 * otherwise: WGMMA on the Ampere path runs mma.sync).
 * The default comes from HARK_HGEMM=auto|mma|lt|wgmma at ops_cuda_create; ops_cuda_last_gemm says
 * which ran last. */
typedef enum { OPS_GEMM_AUTO = 0, OPS_GEMM_MMA, OPS_GEMM_LT, OPS_GEMM_WGMMA } ops_gemm_backend_t;
void ops_cuda_set_gemm_backend(ops_cuda_t *g, ops_gemm_backend_t b);
ops_gemm_backend_t ops_cuda_last_gemm(const ops_cuda_t *g);
void ops_cuda_lt_release(ops_cuda_t *g); /* drops the prepared cuBLASLt plans */

/* acc (m, n) = a (m, k) · wᵀ, a row stride lda, w (n, k) dense (the PyTorch Linear layout), both
 * half, FP32 accumulation on the tensor cores, then the epilogue; on g's stream. k and lda
 * multiples of 8, operands 16-byte aligned. Reference: matmul_ref + the epilogue's ops. */
int cuda_hgemm(const cuda_epi_t *epi, const void *a, long long lda, const void *w, int m, int n,
               int k, ops_cuda_t *g, hark_err_t *err);

/* The feed-forward module in one kernel (ffn_f16.cu; Hopper only), with the layer norms that
 * follow it in its epilogue (cuda_row_norms_t; its h_out of type dt):
 *     r0 = x + alpha · (act(a · w1ᵀ + b1) · w2ᵀ + b2), then the norms
 * a (m, d) half dense (may be h_out), x (m, d) float, w1 (f, d) and w2 (d, f) half (the PyTorch
 * Linear layouts), b1 (f) and b2 (d) float or NULL; norm NULL: x = r0 only. The hidden
 * activations are rounded to half (as the two-GEMM path stores them) but stay in registers.
 * cuda_ffn_f16_fits: it runs here (the Hopper path, d = 256, f a multiple of 64);
 * cuda_ffn_f16_prefers: it also beats the two-GEMM path at m rows (its 128-row blocks fill the
 * last wave of the GPU well enough). Reference: matmul_ref + activation_ref, rounded to half,
 * + matmul_ref + the update, then layer_norm_ref. */
int cuda_ffn_f16_fits(const ops_cuda_t *g, int d, int f);
int cuda_ffn_f16_prefers(const ops_cuda_t *g, int m);
int cuda_ffn(float *x, ops_dtype_t dt, const void *a, const void *w1, const float *b1,
             const void *w2, const float *b2, int m, int d, int f, cuda_act_t act, float alpha,
             const cuda_row_norms_t *norm, ops_cuda_t *g, hark_err_t *err);
/* cuda_ffn with dt = OPS_F16 (its name before bfloat16; kept for the FP16 callers) */
int cuda_ffn_f16(float *x, const void *a, const void *w1, const float *b1, const void *w2,
                 const float *b2, int m, int d, int f, cuda_act_t act, float alpha,
                 const cuda_row_norms_t *norm, ops_cuda_t *g, hark_err_t *err);

/* 2-D convolution as an implicit GEMM: in (batch, h, w_in, cin) half channel-last, w (cout,
 * kh·kw·cin) half with column (i·kw + j)·cin + ci (torch's (cout, cin, kh, kw) permuted), no
 * padding; output position (b, ho, wo) is GEMM row (b·h_out + ho)·w_out + wo, so CUDA_EPI_F16 with
 * ldo = cout writes the channel-last (batch, h_out, w_out, cout) image. cin a multiple of 8.
 * Epilogues: CUDA_EPI_F16 with ReLU, or CUDA_EPI_RESID32 without norms (a 1-D conv as w_in = kw =
 * 1 accumulating into FP32: src/ops/conv1d.h). Reference: conv2d_ref (time-major, channel-major
 * rows) after the layout change. */
int cuda_hconv2d(const cuda_epi_t *epi, const void *in, const void *w, int batch, int cin, int h,
                 int w_in, int cout, int kh, int kw, int stride, ops_cuda_t *g, hark_err_t *err);

/* The first subsampling conv (one input channel, 3x3) fused with CMVN: x (batch, t, f) float
 * features, rows t >= lens[b] read as 0 (lens NULL: all valid), (x - mean) · istd per column
 * (mean NULL: none); out (batch, h_out, w_out, cout) half channel-last = relu?(conv + bias), w
 * (cout, 1, 3, 3) float. Reference: the CMVN loop + conv2d_ref + relu_ref. */
int cuda_conv1_cmvn(void *out, ops_dtype_t out_t, const float *x, const float *mean,
                    const float *istd, const int *lens, int batch, int t, int f, const float *w,
                    const float *bias, int cout, int k, int stride, int relu, void *stream,
                    hark_err_t *err);

/* Layer norms of FP32 rows, a warp per row (d <= CUDA_ROWS_NORM_MAX_D), per row r of x (n, d):
 *   r1 = ln1 ? LN(r; g1, b1) : r;   r2 = ln2 ? LN(r1; g2, b2) : r1
 *   x_out = x_sel == 1 ? r1 : r2 (x_sel 0 or x_out NULL: not written; may alias x)
 *   h_out (half, of type h_t) = r2, o32 (float) = r2, each when not NULL; with lens, rows
 *   (b, i) of the (batch, t_rows) grid with i >= lens[b] are 0 in h_out and o32.
 * g, b NULL: 1, 0. Reference: layer_norm_ref. */
#define CUDA_ROWS_NORM_MAX_D 1024
int cuda_rows_norm(float *x_out, int x_sel, void *h_out, ops_dtype_t h_t, float *o32,
                   const float *x, const float *g1, const float *b1, int ln1, const float *g2,
                   const float *b2, int ln2, const int *lens, int t_rows, int n, int d, float eps,
                   void *stream, hark_err_t *err);

/* cuda_depthwise_conv_norm_act with half input and output (c even, <= 1024; k <= 64); `left`
 * stays float and is rounded to half as it is read. (The conv module's GLU runs before, in
 * pointwise_conv1's GEMM epilogue: CUDA_EPI_GLU16.) Reference: as cuda_depthwise_conv_norm_act. */
int cuda_dwconv_f16(void *out, ops_dtype_t dt, const void *in, const float *left, const float *w,
                    const float *bias, const int *lens, int batch, int t_len, int c, int k,
                    int pad_left, cuda_norm_t norm, const float *g, const float *beta,
                    const float *rm, const float *rv, float eps, cuda_act_t act, void *stream,
                    hark_err_t *err);

/* Fused multi-head attention (flash style; scores never reach memory), half in and out:
 *   ctx (batch·t, ·) row stride ldo, head h in columns [h·dk, (h+1)·dk)
 *   q, k, v (batch·t, ·) row stride ld (e.g. the thirds of a fused QKV output), head h at h·dk
 *   p (t, ·) row stride ldp: WeNet's projected positions (rel_selfattn: scores = scale ·
 *   ((q + bu)·kᵀ + (q + bvp)·pᵀ), bu/bvp (H, dk) float or NULL); p NULL: scale · q·kᵀ
 * masked as cuda_softmax_masked (lens, chunk, left). dk <= 128 where the current device's shared
 * memory holds its tiles: dk <= 64 everywhere, up to 128 on Hopper
 * (cuda_flash_attention_supported). Reference: attention_ref per utterance. */
int cuda_flash_attention_supported(int dk);
int cuda_flash_attention(void *ctx, ops_dtype_t dt, long long ldo, const void *q, const void *k,
                         const void *v, long long ld, const void *p, long long ldp, const float *bu,
                         const float *bvp, const int *lens, int chunk, int left, int batch, int t,
                         int heads, int dk, float scale, void *stream, hark_err_t *err);

/* The end of CUDA_EPI_LSE: per row of partials (n, CUDA_LSE_TILES(v)), arg[r] = argmax (first
 * on ties), best[r] (or NULL) = its log-probability; with lens, rows (b, i) of the (batch, t_rows)
 * grid with i >= lens[b] give 0, 0. Reference: log_softmax_ref + ctc_argmax_ref. */
int cuda_lse_argmax(int *arg, float *best, const void *partials, int v, const int *lens, int t_rows,
                    int n, void *stream, hark_err_t *err);

/* CTC head after the logits GEMM, one pass per row of logits (n, V) float, rows ldx >= V apart:
 * arg[r] = argmax (first on ties, NaN never wins), best[r] (or NULL) = its log-probability, logp
 * (or NULL; rows V apart) = the whole log_softmax row. With lens, rows (b, i) of the (batch,
 * t_rows) grid with i >= lens[b] give arg 0, best 0 and a zero logp row. A block per row, or a warp
 * per row for V <= 256. Reference: log_softmax_ref + ctc_argmax_ref. */
int cuda_ctc_log_softmax_argmax(int *arg, float *best, float *logp, const float *logits,
                                long long ldx, const int *lens, int t_rows, int n, int V,
                                void *stream, hark_err_t *err);

/* Each of n rows of log-probs (n, V) float: its top k (1 <= k <= CUDA_CTC_TOPK_MAX, k <= V) as
 * idx (n, k) and val (n, k) in ctc_row_topk's order (descending, lower id first on ties; NaN never
 * taken, a row short of k non-NaN values padded with (0, NaN)), and the blank's log-prob
 * blank_lp (n) (NULL: not written). Reference: ctc_row_topk (search/ctc.h). */
#define CUDA_CTC_TOPK_MAX 32
int cuda_ctc_topk(int *idx, float *val, float *blank_lp, const float *logp, int n, int V, int k,
                  int blank, void *stream, hark_err_t *err);

/* ---- chunk streaming over a device cache pool (chunk_cuda.cu) --------------------------------
 * One step packs the new encoder rows of n chunks (one per stream) one after another; each stream
 * owns a slot of the pool: K and V (slots, ·, cap, D) float32 (slot_stride elements between
 * slots; the key at absolute position p sits at row p mod cap of its slot, a ring), and its conv
 * cache (K-1, D) per layer. The metadata, device ints (the CPU references take host ones):
 *   slot[b]   the chunk's slot          row0[b]  its first packed row; row0[n] = rows
 *   pos0[b]   absolute position (encoder frames before it) of its first row
 *   ctx[b]    cached keys it attends to before its own rows (positions pos0 - ctx .. pos0 - 1)
 *   fresh[b]  1: its conv cache holds nothing yet (left_init is read in its place)
 *   chunk[r]  the chunk of packed row r */
typedef chunk_meta_t cuda_chunk_meta_t; /* ops.h, the same fields on the device */

/* x (rows, d) float, packed: row r of chunk b at t = r - row0[b] =
 *   alpha · (a[b · t_pad + t] + bias) + (pe ? pe[pos0[b] + t] : 0)
 * a (n, t_pad, d) float (the padded subsampling output after the embedding GEMM), bias (d) or
 * NULL, pe (max_len, d) or NULL. Reference: chunk_embed_ref. */
int cuda_chunk_embed(float *x, const float *a, int t_pad, const float *bias, float alpha,
                     const float *pe, const cuda_chunk_meta_t *mt, int d, void *stream,
                     hark_err_t *err);

/* The packed rows' keys and values (+ bk, bv (d) or NULL) into their slots at their positions:
 * kc/vc [slot · slot_stride + (p mod cap) · d]; k, v (rows, ·) row stride ld.
 * Reference: chunk_kv_store_ref. */
int cuda_chunk_kv_store(float *kc, float *vc, long long slot_stride, int cap, const float *k,
                        const float *v, int ld, const float *bk, const float *bv,
                        const cuda_chunk_meta_t *mt, int d, void *stream, hark_err_t *err);

/* ctx (rows, heads · dk) of ctx_t: each packed row's attention over its slot's keys at positions
 * pos0 - ctx .. pos0 + n_rows - 1 (the cached ones and its whole chunk, no mask, WeNet's
 * forward_chunk; cuda_chunk_kv_store first). q (rows, ·) row stride ldq (+ bq (heads · dk) or
 * NULL); rel-pos (pt not NULL): scores = scale · ((q + bu)·k + (q + bvp)·pt[pos]), pt (max_len,
 * heads · dk) the projected positional table, bu/bvp (heads, dk) or NULL; else scale · q·k.
 * max_keys >= every chunk's ctx + rows (<= cap; sizes the shared memory). Reference:
 * chunk_attention_ref. */
int cuda_chunk_attention(void *ctx, ops_dtype_t ctx_t, const float *q, int ldq, const float *bq,
                         const float *kc, const float *vc, long long slot_stride, int cap,
                         const float *pt, const float *bu, const float *bvp,
                         const cuda_chunk_meta_t *mt, int max_keys, int heads, int dk, float scale,
                         void *stream, hark_err_t *err);

/* out (rows, c) float = depthwise conv of each chunk's rows of in (rows, c), bias (c) or NULL,
 * w (c, k), pad_left frames before: with cache (pad_left = k - 1, causal), the frames before a
 * chunk are its slot's conv cache (k-1, c) (left_init (k-1, c) when fresh), which then takes the
 * last k-1 frames of [cache | the chunk's in]; without (NULL), zeros before and after the chunk
 * (symmetric). Reference: chunk_dwconv_ref. */
int cuda_chunk_dwconv(float *out, const float *in, float *cache, long long slot_stride,
                      const float *left_init, const float *w, const float *bias,
                      const cuda_chunk_meta_t *mt, int c, int k, int pad_left, void *stream,
                      hark_err_t *err);

/* ---- icefall transducer ops (transducer_cuda.cu) ---------------------------------------------
 * BasicNorm per row of x (n, d) float: r = x · (mean(x²) + eps)^-1/2; x_out (float, may alias x)
 * and h_out (of h_t) get r, each when not NULL. Reference: basic_norm_ref. */
int cuda_basic_norm(float *x_out, void *h_out, ops_dtype_t h_t, const float *x, int n, int d,
                    float eps, void *stream, hark_err_t *err);

/* BiasNorm (the Zipformer's) per row of x (n, d) float: r = x · scale / sqrt(mean((x - b)²));
 * x_out (float, may alias x) and h_out (of h_t) get r, each when not NULL. Reference:
 * bias_norm_ref. */
int cuda_bias_norm(float *x_out, void *h_out, ops_dtype_t h_t, const float *x, int n, int d,
                   const float *b, float scale, void *stream, hark_err_t *err);

/* The first subsampling conv's input: out (batch, t_in + 2, f + 2) of out_t, a zero border of one
 * row / column around x (batch, t_in, f) float; rows t >= lens[b] read as `pad` (lens NULL: every
 * row as in x). Reference: the loop in tests/ops/test_transducer_cuda.c (icefall_encode's). */
int cuda_pad_frames(void *out, ops_dtype_t out_t, const float *x, const int *lens, float pad,
                    int batch, int t_in, int f, void *stream, hark_err_t *err);

/* icefall's RelPositionMultiheadAttention (rel_shift) for a padded batch, as rel_attention_ref per
 * utterance: qkv (batch·t, ld) of dt holds q, k, v at columns 0, H·dk, 2·H·dk; pp (2t - 1, ldp)
 * of dt the projected relative positions (row r: position t - 1 - r), head h at column h·dk;
 * bu, bv (H, dk) float or NULL; keys [lo, hi) as cuda_softmax_masked (lens, chunk, left); ctx
 * (batch·t, ldc) of dt, head h at column h·dk. The scores (and the probabilities, over them) are
 * of dt with FP32 accumulation, as PyTorch's autocast makes them. Runs in groups of utterances
 * whose scores fit `scratch` (scratch_bytes >= cuda_rel_attention_scratch_bytes(1, ...); the
 * group's size for g utterances: cuda_rel_attention_scratch_bytes(g, ...)). */
size_t cuda_rel_attention_scratch_bytes(int group, int t, int heads, int dk, ops_dtype_t dt);
int cuda_rel_attention(void *ctx, long long ldc, ops_dtype_t dt, void *scratch,
                       size_t scratch_bytes, const void *qkv, long long ld, const void *pp,
                       long long ldp, const float *bu, const float *bv, const int *lens, int chunk,
                       int left, int batch, int t, int heads, int dk, float scale, ops_cuda_t *g,
                       hark_err_t *err);

/* Greedy search of a stateless transducer (icefall's greedy_search_batch: at most one symbol per
 * frame), one frame at a time on the device:
 *   cuda_joiner_hidden: h (batch, J) of h_t = tanh(ep[u·ep_b + t·J ..] + dp[b] + bdp) (bdp (J)
 *   or NULL), ep and dp float, u = rows[b] (rows NULL: u = b);
 *   the caller's GEMM: logits (batch, ldl) float = h · W_outᵀ (no bias);
 *   cuda_greedy_step: for rows with t < lens[b], the argmax of logits + bias (first on ties); a
 *   token other than blank is appended (tokens / times (batch, cap); count keeps counting past
 *   cap), its logit added to score, the context shifted and dec[b] (D) of dec_t recomputed:
 *   relu(Σ_k Σ_j conv[ch][j][k] · emb[ctx_k][gs·(ch / gs) + j]), id -1 a zero embedding;
 *   t < 0 starts every row: context [-1]·(cs - 1) + [blank], no tokens, dec from it;
 *   the caller's GEMM: dp = dec · W_dpᵀ (the bias goes in as cuda_joiner_hidden's bdp).
 * Reference: icefall_greedy_search (src/model/icefall/icefall.h). */
typedef struct {
    int *ctx;            /* (batch, cs) */
    int *tokens, *times; /* (batch, cap) */
    int *count;          /* (batch) */
    float *score;        /* (batch) */
    int cap;
    const float *emb;  /* (V, D) */
    const float *conv; /* (D, gs, cs) */
    const float *bias; /* (V) output_linear's, or NULL */
    int V, D, cs, gs, blank;
    long long ldl; /* the logits' row stride */
} cuda_greedy_t;
int cuda_joiner_hidden(void *h, ops_dtype_t h_t, const float *ep, long long ep_b, const int *rows,
                       const float *dp, const float *bdp, int t, int batch, int J, void *stream,
                       hark_err_t *err);
int cuda_greedy_step(const cuda_greedy_t *g, void *dec, ops_dtype_t dec_t, const float *logits,
                     const int *lens, int t, int batch, void *stream, hark_err_t *err);

/* Modified beam search (icefall's, batched over utterances) one frame at a time; the hypotheses
 * and their merging stay on the host (icefall_beam_take):
 *   cuda_transducer_decoder: dec (n, D) of dec_t of the contexts ctx (n, cs), as
 *   cuda_greedy_step computes a row's (emb (V, D), conv (D, gs, cs), id -1 a zero embedding);
 *   the caller's GEMMs: dp = dec · W_dpᵀ; cuda_joiner_hidden with rows (each hypothesis's
 *   utterance); logits (n, ldx) = h · W_outᵀ;
 *   cuda_beam_topk: for each set s (an utterance's hypotheses: rows [off[s], off[s + 1]), at
 *   most max_rows of them) beam_topk_ref of its logits + bias (V or NULL) and hyp (n) into
 *   val / idx (sets, k) at s·k; idx -1 past the set's rows·V, -2 for a set over max_rows.
 * Reference: icefall_decoder, beam_topk_ref. */
int cuda_transducer_decoder(void *dec, ops_dtype_t dec_t, const int *ctx, int n, const float *emb,
                            const float *conv, int D, int cs, int gs, void *stream,
                            hark_err_t *err);
int cuda_beam_topk(float *val, int *idx, const float *x, long long ldx, const float *bias,
                   const float *hyp, const int *off, int sets, int max_rows, int V, int k,
                   void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
