/* wenet_stream.h — chunk-by-chunk streaming recognition with a WeNet U2/U2++ model (WeNet's
 * forward_chunk driven as its runtime's decoder loop drives it), on the CPU: PCM fed in pieces ->
 * fbank frames computed incrementally -> chunks of (chunk - 1) * subsampling + right_context + 1
 * frames every chunk * subsampling frames -> one batched encoder forward for all the streams that
 * have a chunk ready (each over its own attention / conv caches at its own offset) -> CTC -> the
 * prefix beam (or greedy) search continued per stream -> partial results; at the end attention
 * rescoring of the n-best over the stream's whole encoder output. On a GPU-loaded model the
 * encoder step runs on the device (conformer_gpu_chunks: every slot's attention and conv caches
 * kept there, sized at pool creation; max_sequences <= 512), its encoder rows and CTC log-probs
 * come back to the host, and the searches continue here.
 * Tests: tests/model/wenet/test_wenet_stream.c (goldens: per-chunk encoder output and caches,
 * streaming texts of every method; alone vs batched at other offsets; chunk mask offline =
 * streaming).
 *
 * Ownership. A wenet_stream_pool_t belongs to one worker thread: wenet_stream_pool_create sizes
 * everything for max_sequences streams of up to max_seconds each and chunks of up to max_chunk
 * encoder frames (feature buffers, encoder caches and encoder history per slot, the batched
 * forward's scratch); open and close only take and give back a slot (the search state of a beam
 * method is made at open and freed at close). A wenet_stream_t is a slot of its pool: valid from
 * wenet_stream_open until wenet_stream_close, used on the pool's thread only. After close, calls
 * on it fail with HARK_ERR_CLOSED until the slot is opened again (the pool's memory stays until
 * wenet_stream_pool_destroy). PCM is lent for the call; results are snapshots freed with
 * wenet_result_free.
 *
 * Features: a stream's fbank frames are exactly the offline frames of its concatenated audio
 * (Kaldi frames are independent, snip_edges: a frame is computed once its last sample arrived).
 * Chunks: WeNet's forward_chunk_by_chunk windows, so a stream's encoder output, CTC and results
 * are those of WeNet's simulate_streaming decode of the whole audio.
 */
#ifndef HARK_MODEL_WENET_STREAM_H
#define HARK_MODEL_WENET_STREAM_H

#include "core/error.h"
#include "core/parallel.h"
#include "model/wenet/conformer.h"
#include "model/wenet/wenet_asr.h"

#include <stddef.h>

typedef struct wenet_stream_pool wenet_stream_pool_t;
typedef struct wenet_stream wenet_stream_t;

/* Streams need a chunk-trained model (use_dynamic_chunk or static_chunk_size, as WeNet's
 * forward_chunk_by_chunk asserts): HARK_ERR_UNSUPPORTED otherwise. HARK_ERR_INVALID_ARG for
 * sizes out of range (max_sequences 1..4096, max_seconds > 0, max_chunk >= 1), HARK_ERR_NOMEM. */
int wenet_stream_pool_create(const wenet_asr_t *asr, int max_sequences, double max_seconds,
                             int max_chunk, wenet_stream_pool_t **out, hark_err_t *err);
void wenet_stream_pool_destroy(wenet_stream_pool_t *p); /* accepts NULL; closes every stream */
int wenet_stream_pool_free_slots(const wenet_stream_pool_t *p);

/* A stream in a free slot, decoding with opts (method, beam, weights, nbest, n_threads; its
 * chunk_size: encoder frames per chunk, 1 .. max_chunk; left_chunks: -1 all history, >= 0 that
 * many chunks of attention history). HARK_ERR_TOO_LARGE when all max_sequences slots are open;
 * wenet_check_opts's errors; HARK_ERR_NOMEM. */
int wenet_stream_open(wenet_stream_pool_t *p, const wenet_decode_opts_t *opts, wenet_stream_t **out,
                      hark_err_t *err);
void wenet_stream_close(wenet_stream_t *s); /* accepts NULL and a closed stream */

/* Appends n samples in [-1, 1] at the model's rate and computes the fbank frames they complete.
 * HARK_ERR_CLOSED after wenet_stream_input_done (or on a closed stream), HARK_ERR_TOO_LARGE past
 * max_seconds (nothing of this call is kept). */
int wenet_stream_accept(wenet_stream_t *s, const float *pcm, size_t n, hark_err_t *err);
/* No more audio: the last (shorter) chunks become ready. HARK_ERR_CLOSED on a closed stream. */
int wenet_stream_input_done(wenet_stream_t *s, hark_err_t *err);
/* The most streams one batched forward takes: 1 .. its default, min(max_sequences,
 * CONFORMER_CHUNKS_MAX_STEP); wenet_stream_step runs more in forwards of that many in turn. For
 * tests and tuning. HARK_ERR_INVALID_ARG out of range. */
int wenet_stream_pool_set_step(wenet_stream_pool_t *p, int step, hark_err_t *err);

/* The threads the streams' searches of a forward are spread over (borrowed: it must outlive its
 * use here; NULL, the default: the calling thread alone). Results are the same either way. */
void wenet_stream_pool_set_parallel(wenet_stream_pool_t *p, parallel_t *par);

/* 1 when a chunk is ready for wenet_stream_step. */
int wenet_stream_ready(const wenet_stream_t *s);
/* 1 when the input is done and every chunk has been through the encoder (wenet_stream_final). */
int wenet_stream_finished(const wenet_stream_t *s);

/* One chunk of each of the n streams (all of this pool, all ready, each once, n <= max_sequences)
 * in batched forwards (one, or in turn forwards of the pool's step when n is larger), then each
 * stream's CTC search over its new frames. HARK_ERR_INVALID_ARG
 * (a stream not ready, of another pool, given twice), HARK_ERR_CLOSED, before anything changed;
 * a failure inside a forward (HARK_ERR_NOMEM, HARK_ERR_TOO_LARGE past the positional table)
 * marks that forward's streams failed, a search's (HARK_ERR_NOMEM) its stream (the others still
 * step; the first error is returned): later calls on them return that error. */
int wenet_stream_step(wenet_stream_pool_t *p, wenet_stream_t *const *s, int n, hark_err_t *err);

/* The best hypothesis so far, from the CTC search alone (prefix beam: its best and n-best in
 * WeNet's order; greedy: the collapsed argmax path): r is zeroed first. */
int wenet_stream_partial(wenet_stream_t *s, wenet_result_t *r, hark_err_t *err);
/* The final result with the stream's method (attention rescoring over the whole encoder output
 * for attention_rescoring). HARK_ERR_AGAIN before wenet_stream_finished or an endpoint. The
 * stream stays open (close it). With endpointing, partial and final results are the current
 * segment's (rescoring over its encoder frames); times count the stream's encoder frames. */
int wenet_stream_final(wenet_stream_t *s, wenet_result_t *r, hark_err_t *err);

/* Endpointing (opts.endpointing, WeNet's CTC rules: search/ctc_endpoint.h). After a step whose
 * new frames complete a rule, wenet_stream_endpoint gives its number (1 ..) and the stream takes
 * no more steps (wenet_stream_ready is 0) until the caller has taken the segment's final result
 * (wenet_stream_final) and then either closes the stream or, for continuous decoding, calls
 * wenet_stream_next_segment: a fresh search and endpoint state for the frames that follow, the
 * encoder's caches (its left context) kept. The rules are not checked on the input's last
 * chunk (WeNet checks them only while features go on). HARK_ERR_INVALID_ARG without an
 * endpoint. wenet_stream_segments counts the segments ended so. */
int wenet_stream_endpoint(const wenet_stream_t *s);
/* An endpoint found by a rule outside the engine (the wenet_u2 family's VAD rule:
 * WENET_ENDPOINT_VAD): the segment ends after the frames stepped so far, as if a CTC rule had
 * fired there. Returns 1 when it took effect, 0 when the stream already has an endpoint, is
 * finished (no endpoint on the input's last chunk, as for the CTC rules) or has no frame in the
 * segment yet; HARK_ERR_CLOSED / the earlier failure otherwise. */
#define WENET_ENDPOINT_VAD 4
int wenet_stream_set_endpoint(wenet_stream_t *s, int rule, hark_err_t *err);
int wenet_stream_next_segment(wenet_stream_t *s, hark_err_t *err);
int wenet_stream_segments(const wenet_stream_t *s);

/* Inspection (tests, tools): fbank frames so far (before CMVN), (*frames, input_dim); encoder
 * output so far, (*rows, D); the encoder stream (offset, caches: conformer_stream_cache). */
const float *wenet_stream_features(const wenet_stream_t *s, int *frames);
const float *wenet_stream_encoder_out(const wenet_stream_t *s, int *rows);
/* NULL on a GPU-loaded model (its caches live on the device) */
const conformer_stream_t *wenet_stream_encoder(const wenet_stream_t *s);
/* Chunks stepped so far. */
int wenet_stream_chunks(const wenet_stream_t *s);

#endif
