/* frontend_gpu.h — the GPU front end any audio family can put in front of its model: a padded
 * batch of PCM uploaded on the front end's own copy stream in chunks of consecutive utterances
 * of about equal bytes, each chunk's features (features_gpu.h) computed on the caller's compute
 * stream while the next chunk uploads. Tests: tests/dsp/test_frontend_gpu.c
 *
 * Ownership. A frontend_gpu_t belongs to one worker thread (it is that worker's mutable scratch,
 * like its compute stream): it owns its copy stream, the per-chunk upload events, the pinned
 * staging rows and the device PCM, lengths and features, all sized by frontend_gpu_create for
 * (max_batch, max_samples, max_frames) so that frontend_gpu_run allocates nothing. The feature
 * constants (feat_gpu_t) are either lent by the caller (a model's, immutable, shared by its
 * workers; it must outlive the front end) or created from the plan and owned. PCM buffers are
 * lent for one run: page-locked ones (cudaMallocHost, gpu/pinned.h) are read by DMA until the
 * copy stream reaches them, so the caller keeps them until it has waited for the compute stream
 * (or frontend_gpu_wait_failed returned); pageable ones are copied into the staging rows before
 * frontend_gpu_run returns. The device pointers it returns stay the front end's, valid until
 * the next run.
 *
 * Without HARK_CUDA only frontend_upload_split works; the rest reports HARK_ERR_NO_DEVICE.
 */
#ifndef HARK_DSP_FRONTEND_GPU_H
#define HARK_DSP_FRONTEND_GPU_H

#include "core/error.h"
#include "dsp/features.h"

#include <stddef.h>

/* Chunks of a batch's upload: the default, and the most frontend_gpu_set_chunks accepts. */
#define FRONTEND_UPLOAD_CHUNKS 4
#define FRONTEND_UPLOAD_MAX_CHUNKS 16

/* The split of an upload: utterances 0 .. batch - 1 (n[b] samples each) in k = min(chunks,
 * batch) runs of consecutive utterances, run c = [first[c], first[c + 1]), at least one
 * utterance each, cut where the samples before reach c / k of the total. first: k + 1 entries
 * (first[0] = 0 even for an empty batch); returns k. Pure host code. */
int frontend_upload_split(const size_t *n, int batch, int chunks, int *first);

typedef struct frontend_gpu frontend_gpu_t;
struct feat_gpu;

/* A front end on `device` for batches of up to max_batch utterances of up to max_samples
 * samples and max_frames feature frames (plan's features). feats: the plan's feat_gpu_t on that
 * device, lent, or NULL to create one (then HARK_ERR_UNSUPPORTED where feat_gpu_create refuses
 * the plan). HARK_ERR_INVALID_ARG; HARK_ERR_CUDA naming what did not fit; HARK_ERR_NO_DEVICE
 * without CUDA. Leaves `device` current. */
int frontend_gpu_create(const feat_plan_t *plan, struct feat_gpu *feats, int max_batch,
                        size_t max_samples, int max_frames, int device, frontend_gpu_t **out,
                        hark_err_t *err);
void frontend_gpu_destroy(frontend_gpu_t *fe); /* accepts NULL; waits for the copy stream */

/* Chunks of each upload: 0 for FRONTEND_UPLOAD_CHUNKS, 1 for one upload and then the features,
 * at most FRONTEND_UPLOAD_MAX_CHUNKS (a batch of fewer utterances uses one per utterance).
 * Features are per utterance: the results do not depend on it. HARK_ERR_INVALID_ARG outside
 * [0, FRONTEND_UPLOAD_MAX_CHUNKS] (the setting is kept). fe may be NULL (then only checks
 * chunks; so without CUDA too). */
int frontend_gpu_set_chunks(frontend_gpu_t *fe, int chunks, hark_err_t *err);

/* Optional stage profile: two cudaEvent_t of the caller's (lent; NULL, NULL turns it off),
 * recorded on the copy stream by every run: `start` before its first copy (the lengths), and
 * `upload_end` after the last chunk's copies, before the event the compute stream waits for, so
 * that a wait for the compute stream covers it. start -> upload_end is then the upload,
 * including the features of the chunks before the last (computed beside it); an event the
 * caller records on the compute stream after frontend_gpu_run marks the end of the features
 * (the last chunk's rows). */
void frontend_gpu_profile(frontend_gpu_t *fe, void *start, void *upload_end);

/* Uploads utterances pcm[0 .. batch - 1] (n[b] samples in [-1, 1] at the plan's rate; pcm[b]
 * may be NULL when n[b] == 0) and computes their features, asynchronously on compute_stream (a
 * cudaStream_t): the sample lengths first (from pinned memory; every chunk's features read
 * them), then chunk by chunk on the copy stream each utterance to its row of the device PCM,
 * by DMA from page-locked input or through the pinned staging rows, the compute stream waiting
 * for each chunk's event and then computing that chunk's features. No host wait. On return:
 *   *d_feats: (batch, t_max, n_mels) on the device; rows t >= frames of item b are zeroed;
 *   *d_lens:  (batch) int on the device, n[b].
 * t_max: at least every item's feat_num_frames and at most max_frames. The caller waits for the
 * compute stream before reading them, before releasing page-locked input and before the next run
 * (which rewrites the staging rows). batch == 0 or t_max == 0 enqueues nothing.
 * Errors: HARK_ERR_TOO_LARGE past the creation limits, HARK_ERR_INVALID_ARG for a t_max below an
 * item's frames (nothing enqueued for either); HARK_ERR_CUDA ("upload: ...") or the feature
 * kernels' error after the work was enqueued, in which case it has already waited as
 * frontend_gpu_wait_failed does. */
int frontend_gpu_run(frontend_gpu_t *fe, const float *const *pcm, const size_t *n, int batch,
                     int t_max, void *compute_stream, float **d_feats, const int **d_lens,
                     hark_err_t *err);

/* For an error after a run was enqueued (the caller's later stages, or its wait): the copy
 * stream may still read the caller's page-locked buffers and the compute stream wait for it or
 * read what it wrote, so this waits for the copy stream, then for compute_stream, and clears
 * the sticky last error. Returns rc. */
int frontend_gpu_wait_failed(frontend_gpu_t *fe, void *compute_stream, int rc);

#endif
