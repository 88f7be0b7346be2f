/* fastspeech_gpu.h — DLE FastSpeech (fastspeech.h) on the GPU, batched over sentences of
 * different lengths without padding to a fixed size: embedding + positions, the post-LN FFT blocks
 * (fused QKV, self-attention masked to each sentence's length, conv-1D feed-forward), the duration
 * predictor, the length regulator (a gather on the device), the mel-side blocks and the mel
 * linear. FP32 (cuBLAS in true FP32, FP32 attention) or FP16 / BF16 (tensor-core GEMMs and convs,
 * flash attention, FP32 accumulation, residual stream and layer norms; the duration predictor stays
 * FP32). Each sentence's result is that of the sentence alone (the CPU path without pad_to): every
 * conv reads its input masked to the sentence's length, every attention its keys.
 * The durations are rounded on the host by the CPU path's own rule (fastspeech_round_durations)
 * from the predictor's output: the host needs the frame counts to size the mel side anyway. Tests:
 * tests/model/fastspeech/test_fastspeech_gpu.c (every stage against the CPU path and DLE's goldens,
 * FP32 and FP16, a batch of the three golden sentences)
 *
 * OWNERSHIP AND THREADS
 * - fastspeech_gpu_model_t: the weights of one fastspeech_model_t (lent: it must outlive this) on
 *   one device in one precision, immutable, shared by any number of workers.
 * - fastspeech_gpu_worker_t: one thread's stream, GEMM context, pinned staging and scratch, sized
 * at creation for (max_batch, max_symbols, max_frames); a run allocates nothing on the device.
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_FASTSPEECH_GPU_H
#define HARK_MODEL_FASTSPEECH_GPU_H

#include "core/error.h"
#include "model/fastspeech/fastspeech.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct fastspeech_gpu_model fastspeech_gpu_model_t;
typedef struct fastspeech_gpu_worker fastspeech_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16. 16-bit needs d_model and the FFT filters to be multiples of 8
 * (HARK_ERR_UNSUPPORTED otherwise), and kernels k = 2 · padding + 1 everywhere. HARK_ERR_CUDA,
 * HARK_ERR_NOMEM. Leaves `device` current. */
int fastspeech_gpu_model_create(const fastspeech_model_t *m, int device, ops_dtype_t dt,
                                fastspeech_gpu_model_t **out, hark_err_t *err);
void fastspeech_gpu_model_destroy(fastspeech_gpu_model_t *g); /* accepts NULL */
size_t fastspeech_gpu_model_bytes(const fastspeech_gpu_model_t *g);
const fastspeech_model_t *fastspeech_gpu_model_cpu(const fastspeech_gpu_model_t *g);

/* max_batch 1..512, max_symbols 1..max_seq_len, max_frames 1..max_seq_len (longer mel sides are
 * cut to max_frames: the CPU path cuts at max_seq_len). */
int fastspeech_gpu_worker_create(const fastspeech_gpu_model_t *g, int max_batch, int max_symbols,
                                 int max_frames, fastspeech_gpu_worker_t **out, hark_err_t *err);
void fastspeech_gpu_worker_destroy(fastspeech_gpu_worker_t *w); /* accepts NULL */
size_t fastspeech_gpu_worker_bytes(const fastspeech_gpu_worker_t *w);
int fastspeech_gpu_worker_max_frames(const fastspeech_gpu_worker_t *w);

/* Stages of item `item`, as fastspeech_stage_fn's names and layout (rows = its own positions,
 * time-major; durations (1, n)), lent. "emb" and "length_regulated" are not produced (the
 * positions are added in the same pass: "enc_add_pos_enc", "mel_side_add_pos_enc"). */
typedef void (*fastspeech_gpu_stage_fn)(void *user, int item, const char *name, const float *data,
                                        int rows, int cols);

typedef struct {
    const float *alpha; /* per item (NULL or 0: 1) */
    fastspeech_gpu_stage_fn stage;
    void *stage_user;
} fastspeech_gpu_opts_t;

/* ids[b] (n[b] symbol ids in [1, n_symbols)) -> the mels on the device, *d_mel (batch, *t_max,
 * n_mels) time-major float (the worker's, valid until its next run; rows past n_frames[b] are not
 * meaningful), n_frames[b] (host) each item's frames. Synchronous: the mel is complete on return.
 * HARK_ERR_INVALID_ARG (no ids, an id out of range, an item whose durations all round to 0),
 * HARK_ERR_TOO_LARGE (batch or symbols past the worker's), HARK_ERR_CUDA. */
int fastspeech_gpu_run(fastspeech_gpu_worker_t *w, const int *const *ids, const int *n, int batch,
                       const fastspeech_gpu_opts_t *o, int *n_frames, int *t_max,
                       const float **d_mel, hark_err_t *err);

/* Item b's mel of the last run to the host: out (n_frames[b], n_mels) time-major. */
int fastspeech_gpu_mel_to_host(fastspeech_gpu_worker_t *w, int b, float *out, hark_err_t *err);

#endif
