/* features_gpu.h — the three front ends on the GPU, batched over a padded batch with per-item
 * lengths. One fused kernel per frame (framing, pre-emphasis, window, FFT, mel, log) performing
 * the CPU path's float32 operations in the same order, so GPU == CPU to float rounding of log();
 * a second kernel does NeMo's per-feature normalisation.
 * Tests: tests/dsp/test_features_gpu.c; benchmark: bench/bench_features.c */
#ifndef HARK_DSP_FEATURES_GPU_H
#define HARK_DSP_FEATURES_GPU_H

#include "core/error.h"
#include "dsp/features.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct feat_gpu feat_gpu_t;

/* Uploads the plan's window, filterbank and FFT twiddles to the current device.
 * HARK_ERR_NO_DEVICE without CUDA; HARK_ERR_UNSUPPORTED for dither > 0 or a non power-of-two
 * FFT. */
int feat_gpu_create(const feat_plan_t *plan, feat_gpu_t **out, hark_err_t *err);
void feat_gpu_destroy(feat_gpu_t *g);

/* d_pcm: (B, stride) samples in [-1,1] on the device, item b valid for d_lens[b] samples.
 * d_out: (B, t_max, n_mels); rows t >= frames(len_b) are zeroed; t_max >= max frames.
 * d_frames (optional, may be NULL): (B) int, receives each item's frame count.
 * Asynchronous on `stream` (a cudaStream_t; NULL = default). No allocation, no host sync. */
int feat_gpu_compute(feat_gpu_t *g, float *d_out, int *d_frames, const float *d_pcm, size_t stride,
                     const int *d_lens, int batch, int t_max, void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
