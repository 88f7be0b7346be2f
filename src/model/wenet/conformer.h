/* conformer.h — WeNet U2/U2++ Conformer encoder and CTC head on the CPU (float32), the reference
 * the GPU path is checked against. Tests: tests/model/wenet/test_conformer.c (stage by stage
 * against
 * ../shared/data/golden/wenet_u2pp_conformer_small, and batch-vs-single invariance).
 *
 * Ownership. A conformer_model_t is immutable once created and may be shared by any number of
 * threads: its weights are float32 views into memory the caller keeps alive and unchanged for the
 * model's lifetime (the safetensors mapping, or the buffers behind a conformer_tensor_fn); the
 * model owns only small derived tables (positional encoding, causal left context). A
 * conformer_state_t is the mutable per-caller scratch, sized at creation for the worst case
 * (max_batch utterances of max_frames input frames); one thread uses a state at a time, and the
 * hot path allocates nothing. Buffers passed to the functions are lent for the call only.
 *
 * Supported (WeNet recipe) configurations: subsampling conv2d / conv2d6 / conv2d8; rel_pos with
 * rel_selfattn (WeNet's variant: pos_bias_u/v, linear_pos, no rel_shift) or abs_pos with plain
 * self-attention; macaron FFN or not; conv module or not, causal or symmetric, batch_norm or
 * layer_norm; swish / relu / gelu; normalize_before true (pre-norm + after_norm) or false.
 * Padded batches: every utterance gets exactly its single-utterance result (the depthwise conv
 * reads zeros past each utterance's end, attention masks padded keys) — unlike WeNet itself for
 * non-causal conv modules.
 */
#ifndef HARK_MODEL_CONFORMER_H
#define HARK_MODEL_CONFORMER_H

#include "core/error.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

#include <stdint.h>

typedef struct conformer_model conformer_model_t;
typedef struct conformer_state conformer_state_t;

/* Weight source: sets *data to the float32 tensor `name` (WeNet's state-dict key, e.g.
 * "encoder.encoders.0.self_attn.linear_q.weight") after checking it has exactly `shape`; returns
 * HARK_OK, or a status with err naming the tensor and what was expected. */
typedef int (*conformer_tensor_fn)(void *user, const char *name, int ndim, const int64_t *shape,
                                   const float **data, hark_err_t *err);

/* One stage output, lent to the debug hook for the duration of the call, one call per utterance
 * of the batch. Names (layer i = 0..n_blocks-1):
 *   "embed_conv_out"   (rows, C·F')  conv stack output, row t = channel-major c·F' + f
 *   "embed_out"        (rows, D)     after the linear, x sqrt(D) (and + pe for abs_pos)
 *                                    = WeNet's enc_full_layer_outputs[0]
 *   "layer{i}_{norm_ff_macaron,feed_forward_macaron,norm_mha,self_attn,norm_conv,conv_module,
 *    norm_ff,feed_forward,norm_final}_out"  (rows, D): raw sub-module outputs, before the
 *                                    residual add and before the FFN x0.5 (WeNet's debug_*)
 *   "layer{i}_out"     (rows, D)     block output = enc_full_layer_outputs[i + 1]
 *   "enc_out"          (rows, D)     encoder output (after after_norm)
 *   "ctc_logprobs"     (rows, V)     from conformer_ctc_log_probs                           */
typedef struct {
    const char *name;
    int layer;         /* block index, or -1 */
    int utt;           /* utterance index in the batch */
    int rows, cols;    /* rows = the utterance's frames at this stage */
    const float *data; /* (rows, cols) row-major */
} conformer_stage_t;
typedef void (*conformer_debug_fn)(void *user, const conformer_stage_t *stage);

typedef struct {
    /* WeNet decoding_chunk_size: <= 0 full context; > 0 the chunk mask (README note 5). As in
     * WeNet, it applies to a use_dynamic_chunk model only: a static_chunk_size model always uses
     * its own chunk size, any other model always runs with full context. */
    int chunk_size;
    int left_chunks; /* num_decoding_left_chunks when a chunk mask applies: < 0 all left chunks */
    int skip_cmvn;   /* 1: feats are already CMVN-normalised (else the model's CMVN applies) */
    int n_threads;   /* OpenBLAS threads for this call; <= 0 leaves the setting alone */
    conformer_debug_fn debug; /* optional stage hook; must not keep the pointers */
    void *debug_user;
} conformer_opts_t;

/* Full context, all left chunks, CMVN from the model, threads untouched, no hook. */
conformer_opts_t conformer_default_opts(void);

/* Builds the model from a validated config and a weight source. HARK_ERR_INVALID_ARG /
 * HARK_ERR_UNSUPPORTED for a config this code cannot run, the getter's status for a missing or
 * mis-shaped tensor (message names it), HARK_ERR_NOMEM. */
int conformer_model_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                           conformer_model_t **out, hark_err_t *err);
/* The same with the tensors of an open safetensors file (F32 only); st must outlive the model. */
int conformer_model_create_st(const wenet_config_t *cfg, const safetensors_t *st,
                              conformer_model_t **out, hark_err_t *err);
void conformer_model_destroy(conformer_model_t *m); /* accepts NULL */

const wenet_config_t *conformer_config(const conformer_model_t *m);
/* Encoder frames for `frames` input frames (WeNet's subsampling formula; 0 when too short). */
int conformer_out_len(const conformer_model_t *m, int frames);

/* Scratch for up to max_batch utterances of up to max_frames input frames each. */
int conformer_state_create(const conformer_model_t *m, int max_batch, int max_frames,
                           conformer_state_t **out, hark_err_t *err);
void conformer_state_destroy(conformer_state_t *s); /* accepts NULL */

/* Encoder forward over a padded batch.
 *   enc      (batch, t_out, D), t_out = conformer_out_len(m, t_max); rows past an utterance's
 *            length are set to 0
 *   enc_lens (batch) encoder frames per utterance
 *   feats    (batch, t_max, input_dim) fbank frames (rows past lens[b] are ignored)
 *   lens     (batch) valid frames, 0..t_max
 * opts NULL means conformer_default_opts(). HARK_ERR_INVALID_ARG for bad sizes, HARK_ERR_TOO_LARGE
 * past the state's limits or the positional table (cfg.max_len encoder frames). */
int conformer_forward(conformer_state_t *s, const conformer_opts_t *opts, float *enc, int *enc_lens,
                      const float *feats, const int *lens, int batch, int t_max, hark_err_t *err);

/* CTC head: logp (batch, t_enc, V) = log_softmax(ctc_lo(enc)); rows past enc_lens[b] set to 0.
 * enc (batch, t_enc, D) as written by conformer_forward. Uses no scratch; only opts->debug and
 * opts->n_threads matter. */
int conformer_ctc_log_probs(const conformer_model_t *m, const conformer_opts_t *opts, float *logp,
                            const float *enc, const int *enc_lens, int batch, int t_enc,
                            hark_err_t *err);

/* ---- streaming (WeNet's forward_chunk) ------------------------------------------------------
 * A stream holds one utterance's caches between chunks: the attention keys/values after
 * linear_k/linear_v of every layer, and for a causal conv module the last K-1 inputs of each
 * conv module (WeNet's att_cache and cnn_cache), plus the encoder frames emitted so far (offset).
 * It owns its memory (it grows with the cache, so a stream keeping all history grows with the
 * utterance); one thread uses a stream at a time. */
typedef struct conformer_stream conformer_stream_t;

/* cache_frames: attention history kept between chunks, WeNet's required_cache_size =
 * decoding_chunk_size · num_decoding_left_chunks: < 0 all of it, 0 none. */
int conformer_stream_create(const conformer_model_t *m, int cache_frames, conformer_stream_t **out,
                            hark_err_t *err);
void conformer_stream_destroy(conformer_stream_t *st); /* accepts NULL */
void conformer_stream_reset(conformer_stream_t *st);   /* back to an empty history */
int conformer_stream_offset(const conformer_stream_t *st);

/* One chunk: feats (frames, input_dim) fbank frames (WeNet's driver passes windows of
 * (chunk - 1) · rate + right_context + 1 frames with stride chunk · rate; the last may be
 * shorter) → enc (n_out, D), n_out = conformer_out_len(m, frames) (0: too short, nothing
 * changes). Every frame of the chunk attends to all cached frames and the whole chunk (no mask
 * inside a chunk, as WeNet). Uses s as scratch (frames <= its max_frames). Debug stages as for
 * conformer_forward, utt 0. HARK_ERR_TOO_LARGE past the positional table, HARK_ERR_NOMEM. */
int conformer_forward_chunk(conformer_state_t *s, conformer_stream_t *st,
                            const conformer_opts_t *opts, float *enc, int *n_out,
                            const float *feats, int frames, hark_err_t *err);

/* Reserves the attention cache for `frames` keys per layer (cache + one chunk) now, and fixes
 * it there: a later chunk that would need more fails with HARK_ERR_TOO_LARGE instead of growing
 * (streams kept in a pool sized up front). HARK_ERR_NOMEM leaves the stream growable. */
int conformer_stream_reserve(conformer_stream_t *st, int frames, hark_err_t *err);
/* Reset (conformer_stream_reset) with another attention history (as conformer_stream_create's
 * cache_frames); the reserved memory stays. */
void conformer_stream_set_cache(conformer_stream_t *st, int cache_frames);

/* One chunk each for n different streams (n <= the state's max_batch) in one batched forward:
 * the row-wise stages (linears, norms, FFNs) run once over all their rows packed together; the
 * stages that read other frames (subsampling, attention over each stream's own cache at its own
 * offset, the causal conv over its own conv cache) per stream. feats[b] (frames[b], input_dim)
 * as for conformer_forward_chunk; enc (Σ n_out, D) packed: chunk b's n_out[b] rows follow chunk
 * b-1's. Each stream gets exactly what conformer_forward_chunk alone gives it. A stream may
 * appear once. On error no stream has changed. */
int conformer_forward_chunks(conformer_state_t *s, conformer_stream_t *const *sts,
                             const conformer_opts_t *opts, float *enc, int *n_out,
                             const float *const *feats, const int *frames, int n, hark_err_t *err);

/* The caches of `layer` for inspection (valid until the next call on the stream): k, v
 * (cache_t, D) with head h in columns h·dk; cnn (K-1, D) the conv module's last inputs, or NULL
 * without a causal conv module. Returns cache_t. */
int conformer_stream_cache(const conformer_stream_t *st, int layer, const float **k,
                           const float **v, const float **cnn);

#endif
