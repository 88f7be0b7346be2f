/* waveglow_gpu.h — the WaveGlow vocoder (waveglow.h) and its denoiser on the GPU, batched over mels
 * of different lengths: FP32 (TF32 off) or FP16 / BF16 GEMM operands with FP32 accumulation; the
 * audio state, WN's residual and skip sums, biases and the denoiser stay FP32.
 *   the upsampler   one polyphase GEMM (ConvTranspose1d as a conv: no zero stuffing, no
 *                   overlap-add) whose output columns are ordered so that its (frames, stride ·
 *                   n_mels) rows are already the grouped conditioning (frames · stride / n_group,
 *                   n_mels · n_group): the "squeeze" costs nothing; + bias, cast to the GEMM type
 *   per flow        WN: start (a small FP32 kernel); per layer the dilated in_layer as an implicit
 *                   GEMM over its taps on the tensor cores (16-bit, channels a multiple of 8;
 *                   otherwise a GEMM per tap), the cond_layer as a second GEMM accumulating into
 *                   the same FP32 output, the gated tanh · sigmoid with both biases (one pass,
 *                   16-bit out), res_skip as a GEMM adding straight into the FP32 [h | skip] rows
 *                   (its biases kept pending and folded into the next layer's input copy and the
 *                   end conv); then one kernel for end conv + affine coupling + inverse 1x1 conv
 *   the noise       made on the device from the seed with the CPU's splitmix64 + Box-Muller,
 *                   counter-based (value i of a draw takes calls 2·⌊i/2⌋ + 1, + 2 of the stream),
 *                   so a seed gives the CPU's audio up to rounding; all draws at once into the
 *                   columns of the audio state the early outputs will occupy
 *   the denoiser    cuFFT (R2C, the spectral subtraction, C2R) and an overlap-add kernel
 * Every conv reads its input masked per item (rows past an item's length are zero), so each
 * item's samples are those of the item alone (padding never reaches another row, nor its own
 * valid samples). Tests: tests/model/waveglow/test_waveglow_gpu.c (every stage against the CPU
 * and DLE's goldens with the recorded noise, FP32 and FP16; batches of different lengths; a
 * generated model of awkward sizes; the seeded noise and the denoiser against the CPU; the
 * kernels against their references; bad arguments)
 *
 * OWNERSHIP AND THREADS
 * - waveglow_gpu_model_t: the weights of one waveglow_model_t (lent: it must outlive this) on one
 *   device in one precision, immutable, shared by any number of workers.
 * - waveglow_gpu_worker_t: one thread's stream, GEMM context, cuFFT plans, pinned staging and
 *   scratch, sized at creation for (max_batch, max_frames); a run allocates nothing on the
 *   device. A run without a stage callback is recorded as a CUDA graph per (batch, frames, input,
 *   noise source, denoiser on/off) the second time that shape is seen and replayed after.
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_WAVEGLOW_GPU_H
#define HARK_MODEL_WAVEGLOW_GPU_H

#include "core/error.h"
#include "model/waveglow/waveglow.h"
#include "ops/ops_cuda.h"

#include <stddef.h>
#include <stdint.h>

typedef struct waveglow_gpu_model waveglow_gpu_model_t;
typedef struct waveglow_gpu_worker waveglow_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16 (the GEMMs' operands: the mel, the conditioning, WN's conv
 * inputs and gated activations, their weights). HARK_ERR_INVALID_ARG, HARK_ERR_UNSUPPORTED (a
 * flow of more than 256 channels), HARK_ERR_CUDA, HARK_ERR_NOMEM. Leaves `device` current. */
int waveglow_gpu_model_create(const waveglow_model_t *m, int device, ops_dtype_t dt,
                              waveglow_gpu_model_t **out, hark_err_t *err);
void waveglow_gpu_model_destroy(waveglow_gpu_model_t *g); /* accepts NULL */
size_t waveglow_gpu_model_bytes(const waveglow_gpu_model_t *g);
const waveglow_model_t *waveglow_gpu_model_cpu(const waveglow_gpu_model_t *g);

/* max_batch in 1..512, max_frames in 1..100,000 (mel frames of the longest item). HARK_ERR_NOMEM
 * names the scratch that did not fit (about batch · frames · stride / n_group · (8 · C + 4 ·
 * n_mels · n_group) bytes in FP16 for C WN channels: 2.4 GB for 8 x 860 frames of DLE's model).
 */
int waveglow_gpu_worker_create(const waveglow_gpu_model_t *g, int max_batch, int max_frames,
                               waveglow_gpu_worker_t **out, hark_err_t *err);
void waveglow_gpu_worker_destroy(waveglow_gpu_worker_t *w);       /* accepts NULL */
size_t waveglow_gpu_worker_bytes(const waveglow_gpu_worker_t *w); /* scratch + pinned + plans */
void waveglow_gpu_set_graphs(waveglow_gpu_worker_t *w, int on);   /* default on; HARK_NO_GRAPHS=1 */
/* The denoiser strength the runs apply to their audio on the device before it comes back
 * (waveglow_denoise's, item by item: its floor(n / hop) · hop samples, zeros after them — all n
 * of them when hop divides the stride, as in DLE's model); 0 (the default): off. A run then
 * refuses items of up to filter_length / 2 samples (HARK_ERR_INVALID_ARG). HARK_ERR_INVALID_ARG
 * for a negative or NaN strength. */
int waveglow_gpu_set_denoise(waveglow_gpu_worker_t *w, float strength, hark_err_t *err);

/* A batch: mel[b] (n_mels, n_frames[b]) row-major, as waveglow_infer's (host, finite) ->
 * audio[b] (host, waveglow_samples(n_frames[b])), each item equal to its batch-1 result.
 * o as waveglow_infer's (NULL: the model's sigma, seed 0):
 *   sigma    < 0: the model's
 *   seed     item b draws the CPU's seeded noise from seeds[b], or from o->seed for every item
 *            when seeds is NULL — the CPU's audio for that seed up to rounding
 *   noise    when set, called for each item b in turn and each draw (draw, z, channels,
 *            n_frames[b] · stride / n_group) as waveglow_infer calls it, before the run; the
 *            values are uploaded (seeds then unused)
 *   stage    when set, called for each item b in turn with the CPU's stage names and shapes
 *            (item b's own length; "upsampled", then per flow "flow{k}_wn_input",
 *            "flow{k}_wn_output", "flow{k}_after_convinv"); the run then synchronises at each
 *            stage and replays no graph
 * HARK_ERR_INVALID_ARG (no frames, NaN), HARK_ERR_TOO_LARGE (batch or frames past the worker's),
 * HARK_ERR_CUDA. */
int waveglow_gpu_run(waveglow_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                     int batch, const waveglow_opts_t *o, const uint64_t *seeds,
                     float *const *audio, hark_err_t *err);

/* The same from a mel already on the device (the GPU Tacotron2's output): d_mel (batch, n_mels,
 * ld_frames) float channel-major, item b valid for its first n_frames[b] <= ld_frames frames (the
 * rest never read), complete before the call (the producer synchronised or on this worker's
 * stream, waveglow_gpu_stream). The audio comes to the host as waveglow_gpu_run's. */
int waveglow_gpu_run_device(waveglow_gpu_worker_t *w, const float *d_mel, int ld_frames,
                            const int *n_frames, int batch, const waveglow_opts_t *o,
                            const uint64_t *seeds, float *const *audio, hark_err_t *err);

/* DLE's Denoiser.forward on the GPU, a batch: audio[b] (n[b] samples, host, n[b] <= the worker's
 * max_frames · stride) -> out[b] (n_out[b] = floor(n[b] / hop) · hop samples; may alias
 * audio[b]) as waveglow_denoise. HARK_ERR_INVALID_ARG (n[b] <= filter_length / 2, NaN, a
 * negative strength), HARK_ERR_TOO_LARGE, HARK_ERR_CUDA. */
int waveglow_gpu_denoise(waveglow_gpu_worker_t *w, const float *const *audio, const size_t *n,
                         int batch, float strength, float *const *out, size_t *n_out,
                         hark_err_t *err);

void *waveglow_gpu_stream(const waveglow_gpu_worker_t *w); /* cudaStream_t */

/* Multiply-adds of the GEMMs for one utterance of n_frames frames (2 · this = FLOPs). */
double waveglow_macs(const waveglow_model_t *m, int n_frames);

#endif
