/* zipformer_ops.h — the Zipformer2 encoder's own ops (icefall's zipformer recipe): CPU references
 * (zipformer_ops.c, float32, used by the CPU encoder in model/icefall/icefall_zipformer.c) and
 * their GPU kernels (zipformer_cuda.cu, float32; the `cuda_zf_*` launchers, conventions as
 * ops_cuda.h: device pointers, enqueued on `stream`, never synchronising or allocating). The GEMMs,
 * activations, GLU, BiasNorm and the symmetric depthwise conv are the shared ops of ops.h /
 * ops_cuda.h.
 *
 * "Streams" below: a streaming step packs n streams' rows one after another (stream j's T rows
 * from row j·T on); each stream's left context lives in a slot of a device pool, slot[j] (device
 * ints) the stream's slot, slot_stride floats between slots, `off` floats into the slot the
 * cache's first row. pool NULL: every cache reads as zeros (a whole utterance's start).
 * Tests: tests/ops/test_zipformer_ops.c (the references against direct loops, the kernels
 * against the references on awkward sizes). */
#ifndef HARK_OPS_ZIPFORMER_OPS_H
#define HARK_OPS_ZIPFORMER_OPS_H

#include "core/error.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU references ------------------------------------------------------------------------- */

/* CompactRelPositionalEncoding for t query frames after lc left-context frames: pe (2t - 1 + lc,
 * e), row r the relative offset r - (t + lc - 1); e even; float32 as icefall computes it. */
void compact_pos_emb_ref(float *pe, int t, int lc, int e);

/* The attention weights of one head after the q·k scores: sc (t, k) row stride k, row i +=
 * bd[i][(t - 1 - i) + j] for each key j (bd (t, p) row stride p, the pos-query · projected
 * positions; p >= k + t - 1), then softmax_masked_ref over keys [lo[i], hi[i]) (NULL: all). */
void zf_rel_softmax_ref(float *sc, const float *bd, const int *lo, const int *hi, int t, int k,
                        int p);

/* ChunkCausalDepthwiseConv1d over x (t, d) in chunks of c frames (c <= 0 or > t: one chunk):
 * out = causal_conv(x) (kernel kk/2 + 1 over the frame and the kk/2 before it: the rows of left
 * (kk/2, d), or zeros when left is NULL) + chunkwise_conv(x) (kernel kk, symmetric, zeros outside
 * the frame's own chunk) scaled per position r in the chunk by 1 + left_edge[r] + right_edge[r]
 * (scale (2, d, kk): rows 0 and 1 aligned to the chunk's start and end); then act (an ops_act_t).
 * cw (d, kk/2 + 1), cb (d), kw (d, kk), kb (d); tmp (t, d) scratch. */
void zf_chunk_conv_ref(float *out, float *tmp, const float *x, const float *left, const float *cw,
                       const float *cb, const float *kw, const float *kb, const float *scale, int t,
                       int d, int kk, int c, int act);

/* SimpleDownsample: out (td, d) row r = Σ_k w[k] · in[min(r·ds + k, te - 1)] over in (te rows of
 * d, row stride ld); ds 1 copies. td = (te + ds - 1) / ds. Also downsample_output (ds 2). */
void zf_downsample_ref(float *out, const float *in, int ld, const float *w, int te, int ds, int d);

/* SimpleUpsample + out_combiner: for each of te rows, u = xs[r / ds] (xs (·, d)), cur row r (row
 * stride ldc) = ds == 1 ? u : cur + (u - cur) · comb; outs (te, d) = the new rows (NULL: not
 * written). */
void zf_upsample_combine_ref(float *cur, int ldc, float *outs, const float *xs, const float *comb,
                             int te, int ds, int d);

/* x (n, d) = orig + (x - orig) · scale (per column): BypassModule. */
void zf_bypass_ref(float *x, const float *orig, const float *scale, int n, int d);

/* o (n, w) = a · (tanh_b ? tanh(b) : b) elementwise, a and b rows lda / ldb apart; o may alias a
 * (NonlinAttention's gates). */
void zf_gate_ref(float *o, const float *a, int lda, const float *b, int ldb, int n, int w,
                 int tanh_b);

/* encoder_embed's ConvNeXt depthwise conv: out (t, w2, c) = b + the (kk, kk) kernel w (c, kk, kk)
 * over ext (t + kk - 1, w2, c) (frequency zero-padded by kk / 2 on each side). */
void zf_convnext_dw_ref(float *out, const float *ext, const float *w, const float *b, int t, int w2,
                        int c, int kk);

/* out (t, c, w2) = y + res, both (t, w2, c) (the ConvNeXt's residual, flattened channel-major as
 * icefall flattens (c, f)). */
void zf_convnext_out_ref(float *out, const float *y, const float *res, int t, int w2, int c);

/* ---- GPU kernels (HARK_CUDA builds; the references above, and the loops named) -------------- */

/* kv (n, lc + t, w): stream j's lc cached rows (pool slot[j], `off`; pool NULL: zeros) then its t
 * new rows x[j·t + i] (row stride ldx). Reference: memcpy per stream (concat_left of
 * icefall_zipformer.c). */
int cuda_zf_cache_concat(float *kv, const float *pool, const int *slot, long long slot_stride,
                         long long off, const float *x, int ldx, int n, int lc, int t, int w,
                         void *stream, hark_err_t *err);
/* Each stream's cache (lc rows of w at `off` in its slot) = rows src0 .. src0 + lc of kv[j] (kv (n,
 * kv_rows, w)). */
int cuda_zf_cache_store(float *pool, const int *slot, long long slot_stride, long long off,
                        const float *kv, int kv_rows, int src0, int n, int lc, int w, void *stream,
                        hark_err_t *err);
/* pe as compact_pos_emb_ref. */
int cuda_zf_pos_emb(float *pe, int t, int lc, int e, void *stream, hark_err_t *err);
/* zf_rel_softmax_ref on every (stream, head): sc (n, h, t, k), bd (n, h, t, p), lo / hi (n·t)
 * device ints (stream j's rows from j·t; NULL: all keys). */
int cuda_zf_rel_softmax(float *sc, const float *bd, const int *lo, const int *hi, int n, int h,
                        int t, int k, int p, void *stream, hark_err_t *err);
/* zf_chunk_conv_ref for n streams, each over ext (n, kk/2 + t, d): the kk/2 left rows, then its
 * t rows (out (n, t, d)). */
int cuda_zf_chunk_conv(float *out, const float *ext, const float *cw, const float *cb,
                       const float *kw, const float *kb, const float *scale, int n, int t, int d,
                       int kk, int c, int act, void *stream, hark_err_t *err);
/* zf_downsample_ref per stream: in (n·te rows, ld), out (n·td, d). */
int cuda_zf_downsample(float *out, const float *in, int ld, const float *w, int n, int te, int ds,
                       int d, void *stream, hark_err_t *err);
/* zf_upsample_combine_ref per stream: cur (n·te rows, ldc), outs (n·te, d) or NULL, xs (n·td, d).
 */
int cuda_zf_upsample_combine(float *cur, int ldc, float *outs, const float *xs, const float *comb,
                             int n, int te, int ds, int d, void *stream, hark_err_t *err);
int cuda_zf_bypass(float *x, const float *orig, const float *scale, int n, int d, void *stream,
                   hark_err_t *err);
int cuda_zf_gate(float *o, const float *a, int lda, const float *b, int ldb, int n, int w,
                 int tanh_b, void *stream, hark_err_t *err);
/* zf_convnext_dw_ref per image: ext (n, t + kk - 1, w2, c), out (n, t, w2, c). */
int cuda_zf_convnext_dw(float *out, const float *ext, const float *w, const float *b, int n, int t,
                        int w2, int c, int kk, void *stream, hark_err_t *err);
/* zf_convnext_out_ref per image: y (n, t, w2, c), res rows r0 .. r0 + t of ext (n, ext_rows, w2,
 * c); out (n, t, c, w2). */
int cuda_zf_convnext_out(float *out, const float *y, const float *ext, int ext_rows, int r0, int n,
                         int t, int w2, int c, void *stream, hark_err_t *err);
/* encoder_embed's last conv (n, tc, c, wf) (time-major, channel-major rows: every frequency
 * column; the stride-2 columns 0, 2, .. are kept) into ext (n, pad + tc + tail, w2, c)
 * position-major: rows pad .. pad + tc the conv frames, the first pad rows the stream's cache
 * (pool slot[j] at off; pool NULL: zeros), the last tail rows zeros. w2 = (wf + 1) / 2. */
int cuda_zf_embed_ext(float *ext, const float *conv, const float *pool, const int *slot,
                      long long slot_stride, long long off, int n, int tc, int c, int wf, int pad,
                      int tail, void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
