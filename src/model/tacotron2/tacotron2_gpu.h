/* tacotron2_gpu.h — Tacotron 2 (tacotron2.h) on the GPU, batched over sentences of different
 * lengths:
 * - the encoder in double, as the CPU path runs it (embedding, convolutions + BatchNorm + ReLU as
 *   cuBLAS DGEMMs per tap, the bidirectional LSTM one kernel per time step for every row and both
 *   directions, the memory rounded to float once, the processed memory);
 * - the autoregressive decoder: per step seven kernels over the rows still decoding — prenet
 *   (with the seeded dropout generator of the CPU path, or recorded masks), the attention LSTM cell
 *   (its four gate rows and the cell update in one kernel), the query projection, the location
 *   features and energies, softmax and context, the decoder LSTM cell, the mel projection and
 *   gate. Weights are FP32 (accumulated in double) or FP16 (accumulated in float); the state, the
 *   attention and every activation stay FP32. The gates come back to the host every 16 steps:
 *   each row stops on its own gate (the steps a finished row ran past it are discarded), finished
 *   rows leave the kernels' row list, and a row's result equals its batch-1 result;
 * - the postnet: convolutions with BatchNorm folded in (cuda_conv1d, FP32 or FP16 operands), tanh
 *   and the residual; the mel stays on the device for the GPU vocoder.
 * Tests: tests/model/tacotron2/test_tacotron2_gpu.c (every stage and step against the CPU engine
 * and DLE's goldens, FP32 and FP16, batches of different lengths, the seeded dropout, errors)
 *
 * OWNERSHIP AND THREADS
 * - tacotron2_gpu_model_t: the weights of one tacotron2_model_t (lent: it must outlive this) on
 *   one device in one precision, immutable, shared by any number of workers.
 * - tacotron2_gpu_worker_t: one thread's stream, cuBLAS handles, pinned staging and scratch, sized
 *   at creation for (max_batch, max_ids, max_steps); a run allocates nothing on the device except
 *   the recorded-mask table of a run given a mask hook (tests). A run without a stage hook
 *   replays a CUDA graph per chunk of 16 decoder steps once its shape repeats.
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_TACOTRON2_GPU_H
#define HARK_MODEL_TACOTRON2_GPU_H

#include "core/error.h"
#include "model/tacotron2/tacotron2.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct tacotron2_gpu_model tacotron2_gpu_model_t;
typedef struct tacotron2_gpu_worker tacotron2_gpu_worker_t;

/* dt: OPS_F32 or OPS_F16 (the decoder's and postnet's weights). HARK_ERR_INVALID_ARG,
 * HARK_ERR_UNSUPPORTED (sizes past what the kernels take), HARK_ERR_CUDA, HARK_ERR_NOMEM. Leaves
 * `device` current. */
int tacotron2_gpu_model_create(const tacotron2_model_t *m, int device, ops_dtype_t dt,
                               tacotron2_gpu_model_t **out, hark_err_t *err);
void tacotron2_gpu_model_destroy(tacotron2_gpu_model_t *g); /* accepts NULL */
size_t tacotron2_gpu_model_bytes(const tacotron2_gpu_model_t *g);
int tacotron2_gpu_model_device(const tacotron2_gpu_model_t *g);

/* max_batch in 1..256, max_ids in 1..4096 (symbols of the longest sentence), max_steps in
 * 1..100,000 (0: the model's max_decoder_steps; a run may ask for fewer). HARK_ERR_NOMEM names
 * the scratch that did not fit. */
int tacotron2_gpu_worker_create(const tacotron2_gpu_model_t *g, int max_batch, int max_ids,
                                int max_steps, tacotron2_gpu_worker_t **out, hark_err_t *err);
void tacotron2_gpu_worker_destroy(tacotron2_gpu_worker_t *w);       /* accepts NULL */
size_t tacotron2_gpu_worker_bytes(const tacotron2_gpu_worker_t *w); /* device scratch */
int tacotron2_gpu_worker_max_batch(const tacotron2_gpu_worker_t *w);
int tacotron2_gpu_worker_max_ids(const tacotron2_gpu_worker_t *w);
int tacotron2_gpu_worker_max_steps(const tacotron2_gpu_worker_t *w);
void *tacotron2_gpu_worker_stream(const tacotron2_gpu_worker_t *w); /* its cudaStream_t */
/* CUDA graphs of the decoder's chunks of steps (recorded the second time a (rows, steps,
 * symbols) shape is seen, replayed after): default on, HARK_NO_GRAPHS=1 off. */
void tacotron2_gpu_set_graphs(tacotron2_gpu_worker_t *w, int on);
/* Kernel times (`hark bench --profile`): while on, runs record CUDA events around each part (no
 * graphs; a little slower) and add up their times; turning it on clears them. HARK_ERR_CUDA. */
int tacotron2_gpu_set_profile(tacotron2_gpu_worker_t *w, int on, hark_err_t *err);
/* The parts' names and times (ms): the seven decoder kernels per step (averaged over the steps
 * run), the encoder and the postnet summed over the runs; the count (<= cap). */
int tacotron2_gpu_profile(const tacotron2_gpu_worker_t *w, const char **names, double *ms, int cap);

/* As tacotron2_infer (same options, same errors, plus HARK_ERR_TOO_LARGE past the worker's sizes
 * and HARK_ERR_CUDA): row b speaks ids[b]; o->stage receives the same stages as the CPU path.
 * res (batch) receives mel (n_mels, n_frames) channel-major, the alignments, n_frames and
 * mel_length as tacotron2_infer's; res may be NULL: then only n_frames[b] / mel_length[b] (either
 * may be NULL) are written and the mel stays on the device (tacotron2_gpu_mel). */
int tacotron2_gpu_run(tacotron2_gpu_worker_t *w, const int *const *ids, const int *n_ids, int batch,
                      const tacotron2_opts_t *o, tacotron2_result_t *res, int *n_frames,
                      int *mel_length, hark_err_t *err);

/* The last run's mel on the device: (batch, n_mels, *ld) float, channel-major, row b valid for
 * its n_frames (zeros past them up to *ld, the batch's longest), valid until the next run. */
const float *tacotron2_gpu_mel(const tacotron2_gpu_worker_t *w, int *ld);

#endif
