/* icefall_zf_gpu.h — the zipformer recipe's Zipformer2 encoder on the GPU: a whole
 * utterance (icefall_zf_encode's result) and streaming steps of many streams together
 * (icefall_zf_stream_step_batch's), every stream's left context (the ConvNeXt's frames and each
 * layer's keys, NonlinAttention and value rows and conv inputs) kept on the device in a slot of the
 * worker's pool. The CPU encoder of icefall_zipformer.c is the reference; the Zipformer's own
 * kernels are zipformer_ops.h's, the GEMMs cuBLAS in true FP32. A 16-bit model (FP16 or BF16)
 * stores its projections' matrices in that type and rounds their inputs to it (FP32
 * accumulation, float outputs); everything else, the residual stream and the caches stay float.
 * Tests: tests/model/icefall/test_icefall_zf_gpu.c (generated models against the CPU, offline and
 * chunk by chunk); benchmark: `hark bench --model DIR --device cuda:N --chunk` on a streaming
 * zipformer (icefall_bench.c).
 *
 * OWNERSHIP AND THREADS
 * - icefall_zf_gpu_t: one icefall_model_t's encoder weights (lent: the model must outlive this)
 *   on one device, immutable, shared by any number of workers.
 * - icefall_zf_gpu_worker_t: one thread's CUDA stream, cuBLAS context, scratch and stream pool
 *   (max_streams slots), all allocated at creation.
 * Without HARK_CUDA every call returns HARK_ERR_NO_DEVICE. */
#ifndef HARK_MODEL_ICEFALL_ZF_GPU_H
#define HARK_MODEL_ICEFALL_ZF_GPU_H

#include "core/error.h"
#include "model/icefall/icefall.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct icefall_zf_gpu icefall_zf_gpu_t;
typedef struct icefall_zf_gpu_worker icefall_zf_gpu_worker_t;

/* dt: OPS_F32, OPS_F16 or OPS_BF16 (else HARK_ERR_INVALID_ARG). HARK_ERR_UNSUPPORTED: not a
 * zipformer; HARK_ERR_CUDA / HARK_ERR_NOMEM / HARK_ERR_NO_DEVICE. */
int icefall_zf_gpu_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                          icefall_zf_gpu_t **out, hark_err_t *err);
void icefall_zf_gpu_destroy(icefall_zf_gpu_t *g); /* accepts NULL */
size_t icefall_zf_gpu_bytes(const icefall_zf_gpu_t *g);
ops_dtype_t icefall_zf_gpu_dtype(const icefall_zf_gpu_t *g); /* OPS_F32 without HARK_CUDA */

/* max_t_in (>= 9): the longest whole utterance (feature frames) icefall_zf_gpu_encode takes;
 * max_streams (0 .. 4096): the pool's slots and the most streams one step takes (0: no streaming;
 * a model that cannot stream, icefall_can_stream, refuses more). */
int icefall_zf_gpu_worker_create(const icefall_zf_gpu_t *g, int max_t_in, int max_streams,
                                 icefall_zf_gpu_worker_t **out, hark_err_t *err);
void icefall_zf_gpu_worker_destroy(icefall_zf_gpu_worker_t *w); /* accepts NULL */
size_t icefall_zf_gpu_worker_bytes(const icefall_zf_gpu_worker_t *w);
/* device floats of one stream's caches (a slot) */
size_t icefall_zf_gpu_slot_floats(const icefall_zf_gpu_worker_t *w);
/* the worker's max_t_in, max_streams and model (0, 0, NULL without HARK_CUDA) */
int icefall_zf_gpu_max_frames(const icefall_zf_gpu_worker_t *w);
int icefall_zf_gpu_max_streams(const icefall_zf_gpu_worker_t *w);
const icefall_model_t *icefall_zf_gpu_worker_model(const icefall_zf_gpu_worker_t *w);
/* Streaming steps of up to 128 streams are recorded as CUDA graphs (one per stream count, the
 * second time a count is seen) and replayed after; on by default, off with HARK_NO_GRAPHS set
 * (not "0") or here (dropping the recorded graphs). */
void icefall_zf_gpu_set_graphs(icefall_zf_gpu_worker_t *w, int on);

/* icefall_zf_encode on the device: feats (t_in, feature_dim) host, enc ((t_in - 7) / 2 + 1) / 2
 * rows of d, host; returns when enc is written. */
int icefall_zf_gpu_encode(icefall_zf_gpu_worker_t *w, const float *feats, int t_in, float *enc,
                          int *len_out, hark_err_t *err);

/* Slot s back to a stream's initial state (zero caches, nothing processed). */
int icefall_zf_gpu_slot_reset(icefall_zf_gpu_worker_t *w, int slot, hark_err_t *err);
/* One streaming step of n streams together (icefall_zf_stream_step_batch's result for each): the
 * stream in slot slots[j] (distinct) takes feats[j] (icefall_zf_stream_step_frames rows of
 * feature_dim, host) and gives enc[j] (chunk / 2 rows of d, host); its caches are updated on the
 * device. Returns when every enc[j] is written. HARK_ERR_INVALID_ARG: n outside 1 ..
 * max_streams, a slot out of range or repeated. */
int icefall_zf_gpu_step(icefall_zf_gpu_worker_t *w, const int *slots, const float *const *feats,
                        float *const *enc, int n, hark_err_t *err);

#endif
