/* jasper_gpu.h — Jasper / QuartzNet on the GPU: the nemo-mel GPU front end (frontend_gpu.h) with
 * DLE's padding (pad_align, pad_leading), the masked convs as GEMMs (FP32 on cuBLAS, FP16 / BF16
 * on the tensor cores: src/ops/conv1d.h), the dense residual panes accumulated into the last
 * sub-block's FP32 output, the CTC head with log-softmax + argmax on the device, and DLE's greedy
 * decoding on the host (jasper_decode). The results contract is jasper_run's (jasper.h).
 * Tests: tests/model/jasper/test_jasper_gpu.c (the J1 goldens, batches, generated models with
 * awkward sizes against the CPU path)
 *
 * OWNERSHIP AND THREADS
 * - jasper_gpu_model_t: the weights of one jasper_model_t (lent; it must outlive this) uploaded to
 *   one device in one precision (channels padded to multiples of 8 with zeros), immutable, shared
 *   by any number of workers.
 * - jasper_gpu_worker_t: one thread's stream, GEMM context, front end and scratch, all sized at
 *   creation for (max_batch, max_seconds); a run allocates nothing on the device. The forward is
 *   recorded as a CUDA graph per (batch, frames) the second time that shape is seen.
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_MODEL_JASPER_GPU_H
#define HARK_MODEL_JASPER_GPU_H

#include "core/error.h"
#include "model/jasper/jasper.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct jasper_gpu_model jasper_gpu_model_t;
typedef struct jasper_gpu_worker jasper_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16 (activations and GEMM operands; accumulation, biases,
 * depthwise taps and the head's logits stay FP32). HARK_ERR_UNSUPPORTED for a dense list whose
 * panes would read a tensor of another length than the block's input (a strided block between);
 * HARK_ERR_CUDA / HARK_ERR_NOMEM. Leaves `device` current. */
int jasper_gpu_model_create(const jasper_model_t *m, int device, ops_dtype_t dt,
                            jasper_gpu_model_t **out, hark_err_t *err);
void jasper_gpu_model_destroy(jasper_gpu_model_t *g); /* accepts NULL */
size_t jasper_gpu_model_bytes(const jasper_gpu_model_t *g);
int jasper_gpu_model_device(const jasper_gpu_model_t *g);

/* max_batch in 1..512, max_seconds > 0. HARK_ERR_NOMEM names the scratch that did not fit. */
int jasper_gpu_worker_create(const jasper_gpu_model_t *g, int max_batch, double max_seconds,
                             jasper_gpu_worker_t **out, hark_err_t *err);
void jasper_gpu_worker_destroy(jasper_gpu_worker_t *w); /* accepts NULL */
size_t jasper_gpu_worker_bytes(const jasper_gpu_worker_t *w);
/* the GPU path its kernels take, fixed when it was created: "hopper" or "ampere" (gpu_arch.h) */
const char *jasper_gpu_path_name(const jasper_gpu_worker_t *w);
void jasper_gpu_set_graphs(jasper_gpu_worker_t *w, int on); /* default on; HARK_NO_GRAPHS=1 off */

typedef struct {
    int valid_frames_only; /* as jasper_run_opts_t */
    float *logp; /* optional, host: (batch, T_out, vocab) log-probabilities of the padded batch,
                    T_out = jasper_frames_out(m, jasper_frames_in(m, max n)) (tests) */
} jasper_gpu_run_opts_t;

/* A padded batch: pcm[b] (n[b] samples in [-1, 1], finite) -> res[b] (zeroed first; the caller
 * frees each with jasper_result_free). Each item's result is that of the utterance alone: its own
 * T_out frames (jasper_frames_out of its own padded length), as jasper_run. pcm is lent for the
 * call (page-locked buffers are read by DMA). HARK_ERR_INVALID_ARG (empty, too short, NaN),
 * HARK_ERR_TOO_LARGE (batch or length past the worker's), HARK_ERR_CUDA. On an error no res[b]
 * holds anything. */
int jasper_gpu_run(jasper_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                   const jasper_gpu_run_opts_t *o, jasper_result_t *res, hark_err_t *err);

/* The encoder and head alone (benchmarks): d_feats (batch, t_in - pad_leading, n_filt) float on
 * the device, feat_lens[b] (host) valid frames of each -> the per-frame argmax on the device,
 * enqueued on the worker's stream; jasper_gpu_sync waits for it. t_in as jasper_frames_in. */
int jasper_gpu_encode(jasper_gpu_worker_t *w, const float *d_feats, const int *feat_lens, int batch,
                      int t_in, hark_err_t *err);
int jasper_gpu_sync(jasper_gpu_worker_t *w, hark_err_t *err);

/* Multiply-adds of the encoder's convs (and the head) for one utterance of t_in input frames,
 * counted on the real (unpadded) channels: 2 · this is the FLOP count. */
double jasper_macs(const jasper_model_t *m, int t_in);

#endif
