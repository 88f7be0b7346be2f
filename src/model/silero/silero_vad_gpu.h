/* silero_vad_gpu.h — Silero VAD's network on the GPU: one kernel runs every window of a batch of
 * streams, SILERO_GPU_STREAMS streams per thread block (each weight read once per window for all
 * of them), the LSTM state of each stream carried in shared memory from one window to the next.
 * The arithmetic is silero_vad_step's (FP32; the reference): the reflect-padded STFT, its
 * magnitude, the four convolutions with ReLU, the LSTM cell, the output. The same launcher serves
 * whole files (every window of each, from a fresh state) and live streams (one window each, the
 * state kept on the device between calls). Without HARK_CUDA the functions fail with
 * HARK_ERR_UNSUPPORTED.
 * Tests: tests/model/silero/test_silero_vad_gpu.c (against silero_vad_step on random weights at
 * both rates and awkward lengths, and on the real model and audio when ../shared is present).
 *
 * OWNERSHIP AND THREADS
 * - silero_vad_gpu_t: made by silero_vad_gpu_create on a device from one rate's network (copied:
 *   the CPU model may go); silero_vad_gpu_probs keeps its buffers in the handle, so one thread at
 *   a time per handle.
 * - silero_vad_gpu_batch_t: a fixed set of streams run chunk by chunk (hark vad --device cuda),
 *   their states on the device; it uses its handle's network and must not outlive it; one thread
 *   at a time.
 */
#ifndef HARK_MODEL_SILERO_VAD_GPU_H
#define HARK_MODEL_SILERO_VAD_GPU_H

#include "core/error.h"
#include "model/silero/silero_vad.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SILERO_GPU_STREAMS 4 /* streams per thread block */
#ifndef SILERO_GPU_THREADS
#define SILERO_GPU_THREADS 512 /* threads per block: 16 warps, each a row at a time */
#endif
#define SILERO_GPU_MAX_FRAMES 4

/* One rate's network on the device: silero_rate_t's sizes and device pointers to its weights,
 * laid out as there. */
typedef struct {
    int window, context, n_fft, hop, pad, frames, n_bins;
    int cin[SILERO_N_CONV], cout[SILERO_N_CONV], stride[SILERO_N_CONV];
    const float *basis;                     /* (2 · n_bins, n_fft) */
    const float *conv_w[SILERO_N_CONV];     /* (cout, 3, cin) */
    const float *conv_b[SILERO_N_CONV];     /* (cout) */
    const float *w_ih, *w_hh, *b_ih, *b_hh; /* (4H, H), (4H, H), (4H), (4H) */
    const float *out_w;                     /* (H) */
    float out_b;
    int r1, r2; /* floats of the two shared-memory work areas per stream (silero_vad_gpu.c) */
} silero_gpu_net_t;

/* The kernel: stream s (of n_streams) runs n_win[s] windows on its samples x + x_off[s]
 * (n_samples[s] of them; windows past the end are zero-padded, as silero_vad_probs does), from
 * and into its state (n_streams, silero_vad_state_floats: h, c, context), window w's probability
 * into prob[p_off[s] + w]. All pointers on the device. HARK_ERR_CUDA (the launch). */
int cuda_silero_vad(float *prob, float *state, const float *x, const long long *x_off,
                    const long long *n_samples, const long long *p_off, const int *n_win,
                    int n_streams, const silero_gpu_net_t *net, void *stream, hark_err_t *err);

typedef struct silero_vad_gpu silero_vad_gpu_t;

/* Uploads rate r's network to CUDA device `device`. HARK_ERR_UNSUPPORTED (no CUDA, a device hark
 * cannot use, or sizes the kernel does not take: more than SILERO_GPU_MAX_FRAMES frames, an
 * encoder that does not end in one frame of SILERO_HIDDEN channels), HARK_ERR_CUDA,
 * HARK_ERR_NOMEM. */
int silero_vad_gpu_create(const silero_rate_t *r, int device, silero_vad_gpu_t **out,
                          hark_err_t *err);
void silero_vad_gpu_destroy(silero_vad_gpu_t *g); /* accepts NULL */
/* The network's device view (for cuda_silero_vad). */
const silero_gpu_net_t *silero_vad_gpu_net(const silero_vad_gpu_t *g);

/* As silero_vad_probs, on the GPU: file i's pcm[i] (n[i] samples) -> probs[i]
 * (silero_vad_n_windows floats, host memory), every file from a fresh state, all files in one
 * launch (longest first, so the streams of a block end together). HARK_ERR_CUDA,
 * HARK_ERR_NOMEM. */
int silero_vad_gpu_probs(silero_vad_gpu_t *g, const float *const *pcm, const size_t *n, int n_files,
                         float *const *probs, hark_err_t *err);

/* ---- streams run chunk by chunk ---------------------------------------------------------- */
typedef struct silero_vad_gpu_batch silero_vad_gpu_batch_t;
/* Room for max_streams streams of up to max_windows windows per run, every state zeroed.
 * HARK_ERR_CUDA, HARK_ERR_NOMEM. */
int silero_vad_gpu_batch_create(silero_vad_gpu_t *g, int max_streams, int max_windows,
                                silero_vad_gpu_batch_t **out, hark_err_t *err);
void silero_vad_gpu_batch_destroy(silero_vad_gpu_batch_t *b); /* accepts NULL */
/* The input rows to fill before a run: (max_streams, max_windows · window) floats, host memory;
 * stream s's next n_win[s] windows at row s, the caller zero-padding a last partial window. */
float *silero_vad_gpu_batch_input(silero_vad_gpu_batch_t *b);
/* Runs n_win[s] windows (0 .. max_windows) of streams 0 .. n-1 after what each ran before; the
 * probabilities into the rows of silero_vad_gpu_batch_probs ((max_streams, max_windows) floats,
 * host memory, valid until the next run). A stream with 0 windows keeps its state.
 * HARK_ERR_INVALID_ARG (counts out of range), HARK_ERR_CUDA. */
int silero_vad_gpu_batch_run(silero_vad_gpu_batch_t *b, const int *n_win, int n, hark_err_t *err);
const float *silero_vad_gpu_batch_probs(const silero_vad_gpu_batch_t *b);

#ifdef __cplusplus
}
#endif

#endif
