/* ops.h — CPU float32 reference ops for the neural models (the `<op>_ref` of STYLE.md): the
 * numerics every GPU kernel is checked against. Arguments: outputs, inputs, sizes.
 * Tests: tests/ops/test_ops_cpu.c (each op against a naive double loop on awkward sizes).
 *
 * Layout: row-major, rows = frames (time), columns = features/channels, unless stated.
 * Weights keep the PyTorch layout (Linear: (out, in); Conv: (out, in/groups, k[, k])).
 * Nothing here allocates; ops that need scratch take it from the caller (size functions below).
 * Output buffers must not alias inputs unless the comment says "may alias".
 */
#ifndef HARK_OPS_OPS_H
#define HARK_OPS_OPS_H

#include <stddef.h>

/* DSWISH: icefall's DoubleSwish, x · sigmoid(x - 1); SWOOSHL / SWOOSHR: the Zipformer's (k2's
 * swoosh_l / swoosh_r), log1p(exp(x - s)) - 0.08 x - o with (s, o) = (4, 0.035) / (1, 0.313261687)
 * (x - s where the exp overflows) */
typedef enum {
    OPS_ACT_NONE = 0,
    OPS_ACT_RELU,
    OPS_ACT_SWISH,
    OPS_ACT_GELU,
    OPS_ACT_DSWISH,
    OPS_ACT_SWOOSHL,
    OPS_ACT_SWOOSHR
} ops_act_t;

/* Threads OpenBLAS may use for the GEMMs (n <= 0 leaves the setting alone). Process-global. */
void ops_set_threads(int n);

/* y (n, out) = x (n, in) · wᵀ + b;  w (out, in), b (out) or NULL.  OpenBLAS sgemm. */
void linear_ref(float *y, const float *x, const float *w, const float *b, int n, int in, int out);

/* c (m, n) = alpha · a (m, k) · op(b) + beta · c, op(b) = bᵀ when trans_b (b is (n, k)), else b
 * (k, n). Leading dimensions lda, ldb, ldc in floats.  A thin sgemm wrapper. */
void matmul_ref(float *c, const float *a, const float *b, int m, int n, int k, int lda, int ldb,
                int ldc, int trans_b, float alpha, float beta);

/* y (n) += alpha · x (n). */
void axpy_ref(float *y, const float *x, float alpha, size_t n);

/* y (n, d) = (x - mean_row) / sqrt(var_row + eps) · g + b, biased variance over d (torch
 * LayerNorm). g, b (d) or NULL (1, 0). y may alias x. */
void layer_norm_ref(float *y, const float *x, const float *g, const float *b, int n, int d,
                    float eps);

/* y (n, c) = (x - rm) / sqrt(rv + eps) · g + b per channel (BatchNorm1d in eval mode, channels
 * along columns). y may alias x. */
void batch_norm_ref(float *y, const float *x, const float *g, const float *b, const float *rm,
                    const float *rv, int n, int c, float eps);

/* k2's swoosh forward: y = log1p(exp(x - shift)) - 0.08 x - offset (x - shift where that
 * overflows); y may alias x. The Zipformer's two: */
#define OPS_SWOOSHL_SHIFT 4.0f
#define OPS_SWOOSHL_OFFSET 0.035f
#define OPS_SWOOSHR_SHIFT 1.0f
#define OPS_SWOOSHR_OFFSET 0.313261687f
void swoosh_ref(float *y, const float *x, size_t n, float shift, float offset);
/* BiasNorm (the Zipformer's): rows of d (stride ld) of x, in place:
 * x · scale / sqrt(mean_j((x_j - b_j)²)), the sum in double */
void bias_norm_ref(float *x, int n, int d, int ld, const float *b, float scale);
/* Elementwise activations over n floats; y may alias x.
 * swish(x) = x·sigmoid(x); relu(x) = max(x, 0); gelu(x) = x/2·(1 + erf(x/√2)) (torch default). */
void relu_ref(float *y, const float *x, size_t n);
void swish_ref(float *y, const float *x, size_t n);
void gelu_ref(float *y, const float *x, size_t n);
void double_swish_ref(float *y, const float *x, size_t n); /* x · sigmoid(x - 1) */
void activation_ref(float *y, const float *x, size_t n, ops_act_t act);

/* y (n, c) = x[:, 0:c] · sigmoid(x[:, c:2c]);  x (n, 2c)  (torch glu(dim=channels)). */
void glu_ref(float *y, const float *x, int n, int c);

/* In place over x (n, m) with row stride ld: row r keeps keys [lo[r], hi[r]) (lo NULL: 0; hi
 * NULL: m) and becomes a softmax over them; keys outside get probability 0. A row with an
 * empty range becomes all zeros (WeNet: softmax of all -inf, then masked_fill 0). */
void softmax_masked_ref(float *x, const int *lo, const int *hi, int n, int m, int ld);

/* y (n, m) = log_softmax over each row of x (n, m). y may alias x. */
void log_softmax_ref(float *y, const float *x, int n, int m);

/* Depthwise conv over time: out (t_len, c) with
 *   out[t][ch] = b[ch] + Σ_k w[ch][k] · in'[t + k - pad_left][ch],  w (c, k) = torch (c, 1, k)
 * where in'[s] = in[s] for 0 <= s < valid, the row left[pad_left + s] for s < 0 when left is
 * given (left: (pad_left, c), e.g. a causal conv's left context), and 0 otherwise. So frames at or
 * past `valid` read as zeros (symmetric padding, or a padded batch). Causal: pad_left = k - 1;
 * symmetric: pad_left = (k - 1) / 2. b may be NULL. */
void depthwise_conv1d_ref(float *out, const float *in, const float *left, const float *w,
                          const float *b, int t_len, int c, int k, int pad_left, int valid);

/* 2-D convolution, no padding, stride `stride`, as torch Conv2d on (cin, h, w) input but with a
 * time-major layout: in (h, cin, w), out (h_out, cout, w_out), h_out = (h - kh)/stride + 1,
 * w_out = (w - kw)/stride + 1; weight (cout, cin, kh, kw), b (cout) or NULL. out row t is the
 * channel-major vector c·w_out + f that WeNet's subsampling flattens. im2col + sgemm in blocks of
 * output rows; col: conv2d_col_floats(...) floats of scratch. */
size_t conv2d_col_floats(int cin, int cout, int kh, int kw, int w_out);
void conv2d_ref(float *out, float *col, const float *in, const float *w, const float *b, int cin,
                int h, int w_in, int cout, int kh, int kw, int stride);

/* Sinusoidal positional-encoding table pe (n, d), d even: pe[p][2i] = sin(p·div_i),
 * pe[p][2i+1] = cos(p·div_i), div_i = exp(2i · -(ln 10000 / d)), in float32 steps like torch. */
void pos_enc_table_ref(float *pe, int n, int d);

/* Multi-head attention core for one sequence (no projections): for each head h,
 *   s = scale · ((q_h + bu_h) · k_hᵀ + (q_h + bv_h) · p_hᵀ)        (second term only when p)
 *   ctx_h = softmax_masked(s, lo, hi) · v_h
 * q, ctx (tq, hd·dk); k, v, p (tk, hd·dk); head h in columns [h·dk, (h+1)·dk). bu, bv (hd, dk)
 * or NULL (zero). lo/hi (tq) key ranges as in softmax_masked_ref (NULL: all keys). This is
 * WeNet's rel_selfattn (pos term on the key's absolute position, no rel_shift) when p, bu, bv
 * are given, and plain scaled-dot-product attention otherwise.
 * scratch: attention_scratch_floats(tk, dk) floats. */
size_t attention_scratch_floats(int tk, int dk);

/* icefall's RelPositionMultiheadAttention core (Transformer-XL rel_shift) for one sequence of t
 * frames: for each head h, with q' = scale · q_h (scaled before the biases, as icefall),
 *   s[i][j] = (q'_i + bu_h) · k_h[j] + (q'_i + bv_h) · p_h[t - 1 - i + j]
 *   ctx_h = softmax_masked(s, lo, hi) · v_h
 * qkv (t, ld): q, k, v at columns 0, H·dk, 2·H·dk; p (2t - 1, ldp): row r the projected
 * relative position t - 1 - r; ctx (t, ldc); head h in columns [h·dk, (h+1)·dk) of each. bu, bv
 * (H, dk) or NULL; lo/hi (t) as in softmax_masked_ref (NULL: all keys).
 * scratch: rel_attention_scratch_floats(t, dk) floats. */
size_t rel_attention_scratch_floats(int t, int dk);
void rel_attention_ref(float *ctx, int ldc, float *scratch, const float *qkv, int ld,
                       const float *p, int ldp, const float *bu, const float *bv, const int *lo,
                       const int *hi, int t, int n_heads, int dk, float scale);

/* BasicNorm (icefall): y (n, d) = x · (mean_row(x²) + eps)^-1/2 per row, the sum in double. y may
 * alias x. */
void basic_norm_ref(float *y, const float *x, int n, int d, float eps);
/* Modified beam search's top k (icefall): the values lp[r][v] = log_softmax(x[r] + bias)[v] +
 * hyp[r] in float32 (log_softmax as log_softmax_ref) over x (n, ldx) rows of m logits (bias (m)
 * or NULL), and the k largest of the flattened (n·m) in descending order, the lower flat index
 * (r·m + v) first on ties: val (k), idx (k). Returns min(k, n·m), the entries filled. */
int beam_topk_ref(float *val, int *idx, const float *x, long long ldx, const float *bias,
                  const float *hyp, int n, int m, int k);
void attention_ref(float *ctx, float *scratch, const float *q, const float *k, const float *v,
                   const float *p, const float *bu, const float *bv, const int *lo, const int *hi,
                   int tq, int tk, int n_heads, int dk, float scale);

/* ---- chunk streaming over a cache pool (the references of chunk_cuda.cu; see ops_cuda.h) -----
 * A step's packed rows of n chunks, one per stream; host ints: slot, row0 (n + 1), pos0, ctx,
 * fresh (n); chunk (rows). */
typedef struct {
    int n, rows;
    const int *slot, *row0, *pos0, *ctx, *fresh, *chunk;
} chunk_meta_t;

/* The semantics of cuda_chunk_embed / cuda_chunk_kv_store / cuda_chunk_attention (ctx float) /
 * cuda_chunk_dwconv (ops_cuda.h), on the host. chunk_attention_ref: attention_ref per chunk over
 * its keys gathered from the ring; scratch chunk_attention_scratch_floats(max_keys, d, dk). */
void chunk_embed_ref(float *x, const float *a, int t_pad, const float *bias, float alpha,
                     const float *pe, const chunk_meta_t *mt, int d);
void chunk_kv_store_ref(float *kc, float *vc, long long slot_stride, int cap, const float *k,
                        const float *v, int ld, const float *bk, const float *bv,
                        const chunk_meta_t *mt, int d);
size_t chunk_attention_scratch_floats(int max_keys, int d, int dk);
void chunk_attention_ref(float *ctx, float *scratch, const float *q, int ldq, const float *bq,
                         const float *kc, const float *vc, long long slot_stride, int cap,
                         const float *pt, const float *bu, const float *bvp, const chunk_meta_t *mt,
                         int max_keys, int heads, int dk, float scale);
void chunk_dwconv_ref(float *out, const float *in, float *cache, long long slot_stride,
                      const float *left_init, const float *w, const float *bias,
                      const chunk_meta_t *mt, int c, int k, int pad_left);

#endif
