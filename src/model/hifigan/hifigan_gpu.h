/* hifigan_gpu.h — the HiFi-GAN generator (hifigan.h) on the GPU, batched over mels of different
 * lengths, FP32 or FP16 / BF16 GEMM operands with FP32 accumulation and an FP32 residual stream:
 * conv_pre, each ConvTranspose1d as a polyphase conv (one GEMM of u · C/2 columns, no zero
 * stuffing, no overlap-add; src/ops/conv1d.h) and a crop, the MRF resblocks (ResBlock1 / 2) with
 * their leaky ReLUs fused into the masked, zero-padded copy each conv reads, the MRF mean,
 * conv_post and tanh. Each utterance's frames are masked at every conv input, so its samples are
 * those of the utterance alone (padding never reaches another row, nor its own valid samples).
 * Tests: tests/model/hifigan/test_hifigan_gpu.c (every stage against the CPU path and the V3
 * goldens, FP32 and FP16, batches of different lengths, awkward generated models)
 *
 * OWNERSHIP AND THREADS
 * - hifigan_gpu_model_t: the weights of one hifigan_model_t (lent: it must outlive this) on one
 *   device in one precision (channels padded to multiples of 8 with zeros), immutable, shared by
 *   any number of workers.
 * - hifigan_gpu_worker_t: one thread's stream, GEMM context, pinned staging and scratch, sized at
 *   creation for (max_batch, max_frames); a run allocates nothing on the device. A run without a
 *   stage callback is recorded as a CUDA graph per (batch, frames) the second time that shape is
 *   seen (the streaming vocoder's fixed chunk shapes replay theirs).
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_HIFIGAN_GPU_H
#define HARK_MODEL_HIFIGAN_GPU_H

#include "core/error.h"
#include "model/hifigan/hifigan.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct hifigan_gpu_model hifigan_gpu_model_t;
typedef struct hifigan_gpu_worker hifigan_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16 (the convs' operands; accumulation, biases, the residual
 * stream and the MRF sums stay FP32). HARK_ERR_INVALID_ARG, HARK_ERR_CUDA, HARK_ERR_NOMEM.
 * Leaves `device` current. */
int hifigan_gpu_model_create(const hifigan_model_t *m, int device, ops_dtype_t dt,
                             hifigan_gpu_model_t **out, hark_err_t *err);
void hifigan_gpu_model_destroy(hifigan_gpu_model_t *g); /* accepts NULL */
size_t hifigan_gpu_model_bytes(const hifigan_gpu_model_t *g);
int hifigan_gpu_model_device(const hifigan_gpu_model_t *g);
const hifigan_model_t *hifigan_gpu_model_cpu(const hifigan_gpu_model_t *g);

/* max_batch in 1..512, max_frames in 1..1,000,000 (mel frames of the longest item). HARK_ERR_NOMEM
 * names the scratch that did not fit. */
int hifigan_gpu_worker_create(const hifigan_gpu_model_t *g, int max_batch, int max_frames,
                              hifigan_gpu_worker_t **out, hark_err_t *err);
void hifigan_gpu_worker_destroy(hifigan_gpu_worker_t *w);       /* accepts NULL */
size_t hifigan_gpu_worker_bytes(const hifigan_gpu_worker_t *w); /* scratch + pinned + workspace */
int hifigan_gpu_worker_max_frames(const hifigan_gpu_worker_t *w);
int hifigan_gpu_worker_max_batch(const hifigan_gpu_worker_t *w);
void hifigan_gpu_set_graphs(hifigan_gpu_worker_t *w, int on); /* default on; HARK_NO_GRAPHS=1 off */

/* 16-bit workers run each dilation of a stage's resblocks as one fused kernel (cuda_conv1d_res)
 * where it takes the stage's channels: HIFIGAN_FUSED (the default; wgmma kernels on the Hopper
 * path from 64 channels up), HIFIGAN_FUSED_MMA (mma.sync kernels on every path),
 * HIFIGAN_FUSED_WGMMA_ALL (wgmma at every width on the Hopper path: tuning), HIFIGAN_CONV_BY_CONV
 * (the FP32 path's convs in 16 bits). The fused units keep the residual stream between a
 * resblock's dilations in 16 bits (as the original model in FP16 does); hifigan_gpu_set_res16(w, 0)
 * keeps it in FP32 (measurements). The MRF sum and each resblock's input stay FP32.
 * hifigan_gpu_fused_stages: how many stages run fused now. */
typedef enum {
    HIFIGAN_CONV_BY_CONV = 0,
    HIFIGAN_FUSED = 1,
    HIFIGAN_FUSED_MMA = 2,
    HIFIGAN_FUSED_WGMMA_ALL = 3,
} hifigan_fused_t;
void hifigan_gpu_set_fused(hifigan_gpu_worker_t *w, hifigan_fused_t mode);
void hifigan_gpu_set_res16(hifigan_gpu_worker_t *w, int on);
int hifigan_gpu_fused_stages(const hifigan_gpu_worker_t *w);

/* Profiling (benchmarks): while on, each forward records events between its parts (conv_pre,
 * ups{i}, mrf{i} per stage, conv_post) and runs without graphs; hifigan_gpu_profile waits for the
 * last forward and gives each part's name and ms; it returns the number of parts (0 when off). */
#define HIFIGAN_PROF_PARTS (2 + 2 * HIFIGAN_MAX_UPS)
int hifigan_gpu_set_profile(hifigan_gpu_worker_t *w, int on, hark_err_t *err);
int hifigan_gpu_profile(hifigan_gpu_worker_t *w, char names[][16], float *ms, hark_err_t *err);

/* Stages of item `item` (as hifigan_stage_fn: rows = real channels, cols = its own length at that
 * stage, channel-major; "resblock{k}" of stage 0 and "conv_post" before tanh included), lent. */
typedef void (*hifigan_gpu_stage_fn)(void *user, int item, const char *name, const float *data,
                                     int rows, int cols);

/* A batch: mel[b] (num_mels, n_frames[b]) channel-major, as hifigan_forward's (host, finite) ->
 * audio[b] (hifigan_samples(n_frames[b]), host, the tanh output). stage may be NULL (then the run
 * may replay a graph). HARK_ERR_INVALID_ARG (no frames, NaN), HARK_ERR_TOO_LARGE (batch or frames
 * past the worker's), HARK_ERR_CUDA. */
int hifigan_gpu_run(hifigan_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                    int batch, float *const *audio, hifigan_gpu_stage_fn stage, void *user,
                    hark_err_t *err);

/* The same from a mel already on the device (the GPU FastSpeech's output), a window of it: rows
 * [row0, row0 + t) of each item of d_mel (batch, src_rows, num_mels) float time-major are copied
 * into the worker (the source may be reused once this returns... after hifigan_gpu_sync) and
 * vocoded, item b having n_frames[b] valid frames in the window (0..t: 0 gives silence; at least
 * one item must have some). The audio stays on the device at *d_audio (the worker's, valid until
 * its next run): rows of hifigan_samples(t') samples, t' = t rounded up to the model's frame
 * multiple (16-bit: the dilations'), zeros past each item's own length;
 * enqueued on the worker's stream, not waited for (hifigan_gpu_sync, hifigan_gpu_audio_to_host).
 * d_mel must be complete before the call (the producer synchronised). */
int hifigan_gpu_run_device(hifigan_gpu_worker_t *w, const float *d_mel, int src_rows, int row0,
                           int t, const int *n_frames, int batch, const float **d_audio,
                           hark_err_t *err);
/* The last run_device's audio, (batch, hifigan_samples(t)) into host (waits for it). */
int hifigan_gpu_audio_to_host(hifigan_gpu_worker_t *w, int batch, int t, float *host,
                              hark_err_t *err);
int hifigan_gpu_sync(hifigan_gpu_worker_t *w, hark_err_t *err);
void *hifigan_gpu_stream(const hifigan_gpu_worker_t *w); /* cudaStream_t */

/* Multiply-adds of the generator's convs for one utterance of n_frames frames (2 · this = FLOPs).
 */
double hifigan_macs(const hifigan_model_t *m, int n_frames);

#endif
