/* conformer_gpu.h — the WeNet Conformer encoder and CTC head of conformer.h on the GPU, float32,
 * float16 or bfloat16 (16-bit GEMM operands and activations on the tensor cores, FP32
 * accumulation, FP32 residual stream; BF16 runs the FP16 path's kernels with bfloat16).
 * Tests: tests/model/wenet/test_conformer_gpu.c (golden set, padded batch, GPU vs CPU on synthetic
 * configurations); benchmark: bench/bench_conformer_gpu.c.
 *
 * Ownership. A conformer_gpu_model_t holds the weights on the device, uploaded once at creation
 * (an FP32, an FP16 and/or a BF16 copy of every matrix, as the `precisions` flags ask; vectors in
 * FP32);
 * it is immutable afterwards and may be shared by any number of states and threads. The weight
 * source is read during creation only. A conformer_gpu_state_t owns one CUDA stream, a cuBLAS
 * handle and all device scratch, sized at creation for (max_batch, max_frames); one thread uses a
 * state at a time. Forward and CTC enqueue work on the state's stream and return without waiting
 * for it: no allocation inside, and the one host wait is a forward's for the previous forward on
 * the same state to have run (the lengths reach the device, and its recorded CUDA graphs, through
 * a pinned buffer of the state's); call conformer_gpu_sync (or order your own work after
 * conformer_gpu_stream) before reading the outputs. Device buffers passed in are lent
 * for the call and must stay valid until that work has run. Inputs must be complete when the
 * state's stream reaches them: that stream is non-blocking, so it does not wait for work on the
 * legacy default stream (and a cudaMemcpy from pageable memory may return before its data lands):
 * write them with cudaMemcpyAsync on conformer_gpu_stream(s), or synchronise first.
 *
 * Same configurations as conformer.h (conv2d/6/8, rel_pos/abs_pos, macaron, causal or symmetric
 * conv module with per-utterance masking, batch/layer norm, swish/relu/gelu, pre/post norm), full
 * context or WeNet's chunk mask (opts->chunk_size, left_chunks, as conformer_forward). The padded
 * batch stays padded on the GPU: each utterance sees only its own frames (keys masked, the
 * depthwise conv reads zeros past its end), so it gets its single-utterance result. Streaming:
 * conformer_gpu_chunks below. No debug hook here (the chunk pool has one: its trace).
 */
#ifndef HARK_MODEL_CONFORMER_GPU_H
#define HARK_MODEL_CONFORMER_GPU_H

#include "core/error.h"
#include "model/wenet/conformer.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* flags for the model (which copies to upload, any combination); exactly one for a state */
enum { CONFORMER_GPU_FP32 = 1, CONFORMER_GPU_FP16 = 2, CONFORMER_GPU_BF16 = 4 };

typedef struct conformer_gpu_model conformer_gpu_model_t;
typedef struct conformer_gpu_state conformer_gpu_state_t;

/* Builds the model on the current CUDA device from a validated config and a weight source (the
 * same tensors and checks as conformer_model_create). HARK_ERR_NO_DEVICE without CUDA,
 * HARK_ERR_INVALID_ARG / HARK_ERR_UNSUPPORTED for a config, the getter's status for a tensor,
 * HARK_ERR_NOMEM, HARK_ERR_CUDA. */
int conformer_gpu_model_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                               int precisions, conformer_gpu_model_t **out, hark_err_t *err);
/* The same from an open safetensors file (F32 tensors); st is not needed afterwards. */
int conformer_gpu_model_create_st(const wenet_config_t *cfg, const safetensors_t *st,
                                  int precisions, conformer_gpu_model_t **out, hark_err_t *err);
void conformer_gpu_model_destroy(conformer_gpu_model_t *m); /* accepts NULL */

const wenet_config_t *conformer_gpu_config(const conformer_gpu_model_t *m);
int conformer_gpu_out_len(const conformer_gpu_model_t *m, int frames);
size_t conformer_gpu_model_bytes(const conformer_gpu_model_t *m); /* device memory held */

/* precision: CONFORMER_GPU_FP32, CONFORMER_GPU_FP16 or CONFORMER_GPU_BF16 (the model must hold
 * that copy); max_batch <= 512. */
int conformer_gpu_state_create(const conformer_gpu_model_t *m, int precision, int max_batch,
                               int max_frames, conformer_gpu_state_t **out, hark_err_t *err);
void conformer_gpu_state_destroy(conformer_gpu_state_t *s); /* accepts NULL; waits for its work */
void *conformer_gpu_stream(const conformer_gpu_state_t *s); /* its cudaStream_t */
size_t conformer_gpu_state_bytes(const conformer_gpu_state_t *s); /* device memory held */
/* the GPU path its kernels take, fixed when it was created: "hopper" or "ampere" (gpu_arch.h) */
const char *conformer_gpu_path_name(const conformer_gpu_state_t *s);
/* Waits for the state's work; HARK_ERR_CUDA if any of it failed. */
int conformer_gpu_sync(conformer_gpu_state_t *s, hark_err_t *err);

/* Encoder forward over a padded batch, enqueued on the state's stream.
 *   d_enc    (batch, t_out, D) float32 on the device, t_out = conformer_gpu_out_len(m, t_max);
 *            rows past an utterance's length are set to 0
 *   enc_lens (batch) host: encoder frames per utterance (written before returning)
 *   d_feats  (batch, t_max, input_dim) float32 fbank frames on the device (rows past lens[b] are
 *            ignored, whatever they hold)
 *   lens     (batch) host: valid frames, 0..t_max
 * opts: chunk_size, left_chunks and skip_cmvn as conformer_forward (NULL: defaults); n_threads and
 * debug are ignored. Errors as conformer_forward, plus HARK_ERR_CUDA. */
int conformer_gpu_forward(conformer_gpu_state_t *s, const conformer_opts_t *opts, float *d_enc,
                          int *enc_lens, const float *d_feats, const int *lens, int batch,
                          int t_max, hark_err_t *err);

/* CTC head: d_logp (batch, t_enc, V) float32 = log_softmax(ctc_lo(d_enc)); rows past enc_lens[b]
 * (host) set to 0. Enqueued on the state's stream; batch · t_enc must fit the state. */
int conformer_gpu_ctc_log_probs(conformer_gpu_state_t *s, float *d_logp, const float *d_enc,
                                const int *enc_lens, int batch, int t_enc, hark_err_t *err);

/* CTC head + greedy argmax: d_arg (batch · t_enc) ints, the argmax per frame (0 past
 * enc_lens[b]); d_best (or NULL) its log-probability. With want_logp, d_logp (batch, t_enc, V)
 * float receives the log-probs as conformer_gpu_ctc_log_probs (one pass over the logits finds the
 * argmax); without, FP32 uses d_logp as scratch for the logits and FP16 / BF16 leave it untouched
 * (their GEMM epilogue reduces each block of 128 logits to (max, Σ exp, argmax); no logits reach
 * memory).
 * Enqueued on the state's stream. */
int conformer_gpu_ctc_argmax(conformer_gpu_state_t *s, int *d_arg, float *d_best, float *d_logp,
                             int want_logp, const float *d_enc, const int *enc_lens, int batch,
                             int t_enc, hark_err_t *err);

/* CUDA graphs (on by default; HARK_NO_GRAPHS=1 in the environment turns them off at creation):
 * a forward is recorded the second time its (batch, frames, d_feats, d_enc, chunk options) are
 * seen and replayed after that; up to 32 shapes per state, the least recently used replaced. */
void conformer_gpu_set_graphs(conformer_gpu_state_t *s, int on);

/* How an FP16 or BF16 forward runs the feed-forward modules: GEMMS, two GEMMs with the hidden
 * activations in memory; FUSED, one kernel that keeps them on chip (cuda_ffn: Hopper,
 * d_model 256, ffn_dim a multiple of 64; elsewhere GEMMS), with the layer norms after the
 * module in its epilogue; AUTO (the default), FUSED where cuda_ffn_f16_prefers the rows (batch x
 * encoder frames). HARK_FFN=gemm|fused in the environment picks one at creation. Drops the
 * recorded graphs. */
typedef enum {
    CONFORMER_FFN_AUTO = 0,
    CONFORMER_FFN_GEMMS,
    CONFORMER_FFN_FUSED
} conformer_ffn_mode_t;
void conformer_gpu_set_fused_ffn(conformer_gpu_state_t *s, conformer_ffn_mode_t mode);

/* Stage profile of the FP16 / BF16 path with CUDA events (turns graphs off): after profile(s, 1),
 * each forward / ctc_argmax adds the time of its stages; profile_read waits for the stream and
 * gives the totals (ms) per stage since profiling was turned on. */
enum {
    CONFORMER_GPU_STAGE_SUBSAMPLE,
    CONFORMER_GPU_STAGE_FFN,
    CONFORMER_GPU_STAGE_ATT_PROJ,
    CONFORMER_GPU_STAGE_ATT_CORE,
    CONFORMER_GPU_STAGE_CONV,
    CONFORMER_GPU_STAGE_NORM,
    CONFORMER_GPU_STAGE_CTC,
    CONFORMER_GPU_STAGES
};
void conformer_gpu_profile(conformer_gpu_state_t *s, int on);
int conformer_gpu_profile_read(conformer_gpu_state_t *s, double *ms, hark_err_t *err);
const char *conformer_gpu_stage_name(int stage);

/* ---- chunk streaming: conformer_forward_chunks on the device ---------------------------------
 * A pool of `slots` streams whose encoder caches stay on the device, all sized at creation: K and
 * V of every layer (slots, L, cap, D) each (cap: cached keys + one chunk per stream, at most the
 * positional table's max_len), the causal conv caches (slots, L, K-1, D), and the scratch of one
 * step of up to min(slots, CONFORMER_CHUNKS_MAX_STEP) chunks of up to max_frames fbank frames
 * (nothing is allocated per step): a pool may hold more streams than one step takes.
 * A stream is a slot: reset it (cache_frames as conformer_stream_create's) before its first
 * chunk. One step, conformer_gpu_forward_chunks, runs one chunk of each of n streams at their own
 * offsets in one batched forward and gives what conformer_forward_chunks (conformer.h) gives on
 * the CPU: enc (Σ n_out, D) packed, chunk b's rows after chunk b-1's; logp (Σ n_out, V) their
 * CTC log-probs; either may be NULL. Host in, host out: the call waits for its work. FP16 and
 * BF16 run 16-bit GEMM operands with FP32 outputs (the FP32 forward's structure), attention and
 * the caches in FP32. On a failure before the forward nothing changes; a CUDA failure inside it
 * leaves the n streams' device caches undefined (reset them). One thread uses a pool at a time. */
typedef struct conformer_gpu_chunks conformer_gpu_chunks_t;

#define CONFORMER_CHUNKS_MAX_SLOTS 4096
#define CONFORMER_CHUNKS_MAX_STEP                                                                  \
    512 /* chunks one step takes (the batch of the device scratch)                                 \
         */

/* precision as conformer_gpu_state_create; slots 1 .. CONFORMER_CHUNKS_MAX_SLOTS. HARK_ERR_NOMEM
 * when the caches do not fit, HARK_ERR_CUDA. */
int conformer_gpu_chunks_create(const conformer_gpu_model_t *m, int precision, int slots,
                                int max_frames, int cap, conformer_gpu_chunks_t **out,
                                hark_err_t *err);
void conformer_gpu_chunks_destroy(conformer_gpu_chunks_t *p); /* accepts NULL */
/* An empty history for slot; cache_frames: < 0 all of it, 0 none, > 0 the last n keys. */
void conformer_gpu_chunks_reset(conformer_gpu_chunks_t *p, int slot, int cache_frames);
int conformer_gpu_chunks_offset(const conformer_gpu_chunks_t *p, int slot); /* encoder frames */
size_t conformer_gpu_chunks_bytes(const conformer_gpu_chunks_t *p);         /* device memory held */
/* slots (n <= min(slots, CONFORMER_CHUNKS_MAX_STEP)) distinct; feats[b] (frames[b], input_dim)
 * host; n_out (n) encoder rows per chunk (0: too short, that stream unchanged). opts: skip_cmvn
 * only. HARK_ERR_TOO_LARGE past max_frames, the positional table or cap; HARK_ERR_CUDA. */
int conformer_gpu_forward_chunks(conformer_gpu_chunks_t *p, const int *slots,
                                 const conformer_opts_t *opts, float *enc, float *logp, int *n_out,
                                 const float *const *feats, const int *frames, int n,
                                 hark_err_t *err);

/* The same step with the CTC head's output reduced on the device (the log-probs stay there): per
 * encoder row its top k log-probs, idx (Σ n_out, k) and val (Σ n_out, k) in ctc_row_topk's order
 * (search/ctc.h), and the blank's, blank_lp (Σ n_out) (NULL: not copied); 1 <= k <= 32 (the
 * prefix beam search reads only a frame's top min(beam, V); greedy search its first; endpointing
 * the blank's). B · 16 rows of (2k + 1) floats a step instead of B · 16 · V. */
#define CONFORMER_CTC_TOPK_MAX 32
typedef struct {
    int k, blank;
    int *idx;
    float *val, *blank_lp;
} conformer_ctc_topk_t;
int conformer_gpu_forward_chunks_topk(conformer_gpu_chunks_t *p, const int *slots,
                                      const conformer_opts_t *opts, float *enc,
                                      const conformer_ctc_topk_t *tk, int *n_out,
                                      const float *const *feats, const int *frames, int n,
                                      hark_err_t *err);

/* Debugging: with fn set, each conformer_gpu_forward_chunks step waits after every stage and
 * calls fn(user, stage, name, x, rows, cols) with that stage's output on the host (float32, valid
 * only during the call), the step's packed rows (chunk b's after chunk b-1's):
 *   stage 0             "subsampling"          the residual stream after the embedding (+ pe)
 *   then per block i    "block i ffn_macaron"  the residual stream after each sub-module's
 *                       "block i mhsa"         residual update (post-norm: and its norm; the
 *                       "block i conv"         last one of a block after norm_final, where the
 *                       "block i ffn"          block has a conv module)
 *   then                "encoder"              enc (after after_norm)
 *                       "ctc"                  the log-probs (only when the step asks for logp)
 * (cols: D, or V for "ctc"; stage counts up from 0 in that order.) The same stages in FP32 and
 * FP16 / BF16 pools over the same steps locate where a 16-bit forward departs. NULL: off. */
typedef void (*conformer_gpu_chunks_trace_fn)(void *user, int stage, const char *name,
                                              const float *x, int rows, int cols);
void conformer_gpu_chunks_set_trace(conformer_gpu_chunks_t *p, conformer_gpu_chunks_trace_fn fn,
                                    void *user);

#ifdef __cplusplus
}
#endif
#endif
