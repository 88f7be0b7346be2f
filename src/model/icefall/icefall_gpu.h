/* icefall_gpu.h — icefall's pruned_transducer_stateless3 Conformer transducer on the GPU, float32,
 * float16 or bfloat16: the encoder of icefall_encode for a padded batch (the 16-bit types for the
 * GEMM operands and activations, FP32 accumulation and residual stream), encoder_proj, and
 * greedy_search_batch on the device (the joiner, argmax and stateless decoder one frame at a time
 * for the whole batch: cuda_greedy_step); encoder_proj, the decoder and the joiner are float32 in
 * every type. modified_beam_search runs its decoder, joiner and top k on the device and merges
 * the hypotheses on the host (icefall_beam_take). The CPU functions of icefall.h are the
 * reference.
 * Tests: tests/model/icefall/test_icefall_gpu.c (the T1 goldens, padded batches, generated models
 * against the CPU path); benchmark: `hark bench --model DIR --device cuda:N` (icefall_bench.c).
 *
 * Padding. A batch row's valid frames give the utterance's own result (icefall_run's: each
 * utterance at its own length) when the rows past its length read as zeros: the first conv's
 * zero border then stands where the utterance ends, as it does alone. icefall's own batches pad
 * the features with log(1e-10) (pretrained.py); icefall_gpu_encode takes either.
 *
 * OWNERSHIP AND THREADS
 * - icefall_gpu_model_t: one icefall_model_t's weights (lent: it must outlive this) on one device
 *   in one element type, immutable, shared by any number of workers.
 * - icefall_gpu_worker_t: one thread's CUDA stream, cuBLAS context and device scratch, sized at
 *   creation for (max_batch, max_seconds); afterwards only modified beam search's room (on its
 *   first call, and when a call needs more).
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_ICEFALL_GPU_H
#define HARK_MODEL_ICEFALL_GPU_H

#include "core/error.h"
#include "model/icefall/icefall.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct icefall_gpu_model icefall_gpu_model_t;
typedef struct icefall_gpu_worker icefall_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16. HARK_ERR_UNSUPPORTED: a zipformer (its encoder's GPU path is
 * icefall_zf_gpu.h), or with a 16-bit dt an encoder_dim / dim_feedforward not a multiple of 8 or a
 * convolution kernel over 64; HARK_ERR_CUDA / HARK_ERR_NOMEM. Leaves `device` current. */
int icefall_gpu_model_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                             icefall_gpu_model_t **out, hark_err_t *err);
void icefall_gpu_model_destroy(icefall_gpu_model_t *g); /* accepts NULL */
size_t icefall_gpu_model_bytes(const icefall_gpu_model_t *g);
int icefall_gpu_model_device(const icefall_gpu_model_t *g);

/* max_batch in 1..1024, max_seconds > 0. HARK_ERR_NOMEM names the scratch that did not fit. */
int icefall_gpu_worker_create(const icefall_gpu_model_t *g, int max_batch, double max_seconds,
                              icefall_gpu_worker_t **out, hark_err_t *err);
void icefall_gpu_worker_destroy(icefall_gpu_worker_t *w); /* accepts NULL */
size_t icefall_gpu_worker_bytes(const icefall_gpu_worker_t *w);
/* the GPU path of its kernels: "hopper" or "ampere" (gpu_arch.h) */
const char *icefall_gpu_path_name(const icefall_gpu_worker_t *w);
/* feature frames the worker takes (max_seconds at the model's frame rate) */
int icefall_gpu_max_frames(const icefall_gpu_worker_t *w);
/* the worker's device buffer for a padded batch of features, (max_batch, max frames, feature_dim)
 * float (icefall_gpu_run fills it; the benchmark writes its own features there) */
float *icefall_gpu_feats(icefall_gpu_worker_t *w);

/* The encoder and encoder_proj over a padded batch, enqueued on the worker's stream: d_feats
 * (batch, t_in, feature_dim) float on the device; lens[b] (host) valid frames of each (>= 7);
 * pad NULL: rows past lens[b] are read as given (icefall's own padding already in them), else as
 * *pad (0: each row's result is its utterance's alone, see "Padding"). The outputs stay on the
 * device: encoder frames icefall_frames_out(t_in) per row, icefall_frames_out(lens[b]) valid.
 * HARK_ERR_INVALID_ARG (a length outside [7, t_in]), HARK_ERR_TOO_LARGE (batch or t_in past the
 * worker's), HARK_ERR_CUDA. */
int icefall_gpu_encode(icefall_gpu_worker_t *w, const float *d_feats, const int *lens, int batch,
                       int t_in, const float *pad, hark_err_t *err);
/* greedy_search_batch over the last encode's rows, enqueued; icefall_gpu_results reads it */
int icefall_gpu_greedy(icefall_gpu_worker_t *w, hark_err_t *err);
int icefall_gpu_sync(icefall_gpu_worker_t *w, hark_err_t *err);
/* After a sync: the last encode's encoder output of row b (icefall_frames_out(lens[b]) frames of
 * d, *n_frames of them) or its encoder_proj rows (joiner_dim each) into host buffers of
 * max_frames x width floats; the greedy hypotheses (out[b], the caller frees each). */
int icefall_gpu_read(icefall_gpu_worker_t *w, int b, int proj, float *host, int max_frames,
                     int *n_frames, hark_err_t *err);
int icefall_gpu_results(icefall_gpu_worker_t *w, icefall_hyp_t *out, hark_err_t *err);
/* modified_beam_search (icefall_modified_beam_search's result, 1 <= beam <= ICEFALL_GPU_MAX_BEAM)
 * of every row of the last encode, frame by frame for the rows with frames left: the hypotheses'
 * decoder, joiner, log-softmax and top k on the device (cuda_transducer_decoder, cuda_beam_topk),
 * the picks back to the host, where icefall_beam_take merges them (the rows shared by the
 * worker's search threads). res[b].best (and with nbest the final beam) for row b; the other
 * fields untouched. On an error no res[b] holds anything. The first call, and one with more
 * rows x beam than before, makes the device room for batch x beam hypotheses (kept). */
#define ICEFALL_GPU_MAX_BEAM 64
int icefall_gpu_beam(icefall_gpu_worker_t *w, int beam, int nbest, icefall_result_t *res,
                     hark_err_t *err);
/* fast_beam_search (icefall_fast_beam_search; o NULL: the model's options) of every row of the
 * last encode on the host, over the rows' encoder_proj copied back, the rows shared by the
 * worker's search threads: res[b].best for row b; the other fields untouched. On an error no
 * res[b] holds anything. */
int icefall_gpu_fast_beam(icefall_gpu_worker_t *w, const icefall_fast_beam_opts_t *o,
                          icefall_result_t *res, hark_err_t *err);
/* threads (1..64, the caller counting as one; 1 by default) for icefall_gpu_beam's per-frame
 * merges of the rows' picks and icefall_gpu_fast_beam's rows; more than 1 also sets OpenBLAS to
 * one thread per call, process-wide (ops_set_threads(1)): its pool would otherwise take the
 * fast beam search's small GEMMs one at a time */
int icefall_gpu_set_search_threads(icefall_gpu_worker_t *w, int threads, hark_err_t *err);

/* End to end as icefall_run (same results contract and errors): the fbank on the host, the
 * encoder and the search on the device (fast_beam_search on the host). */
int icefall_gpu_run(icefall_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                    const icefall_run_opts_t *o, icefall_result_t *res, hark_err_t *err);

/* Multiply-adds of the encoder (and encoder_proj) for one utterance of t_in feature frames:
 * 2 · this is its FLOP count (benchmarks). */
double icefall_gpu_macs(const icefall_model_t *m, int t_in);

#endif
