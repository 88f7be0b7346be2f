/* ctc_beam_gpu.h — CTC prefix beam search on the GPU for a padded batch, so that only the n-best
 * lists cross to the host instead of the (batch, T, V) log-probs. The same search as
 * ctc_prefix_beam_search (ctc.h, WeNet's ctc_prefix_beam_search): per frame the top-k tokens
 * (descending, lower id first on ties), the blank / repeat / extension updates in double in
 * WeNet's order, a stable sort and the first `beam` kept, Viterbi times. One block per utterance.
 * Tests: tests/search/test_ctc_beam_gpu.c (against ctc_prefix_beam_search on awkward sizes).
 *
 * Differences from the CPU search, both at the level of rounding: double exp/log on the GPU are
 * within 1 ulp of glibc's, so scores may differ in the last bits (and an exact tie between two
 * different prefixes could then break the other way); a NaN log-prob counts as -inf.
 *
 * Ownership. A ctc_beam_gpu_t holds device scratch and page-locked result buffers sized at
 * create for (max_batch, max_frames, beam): creating allocates (cudaMalloc, cudaMallocHost), so
 * it belongs at load time — the WeNet worker (src/model/wenet/) creates one for beam 10 and
 * makes a new one inside a request only for a beam wider than any before — while
 * ctc_beam_gpu_run never allocates. One stream at a time uses it. Results of the last run stay
 * in it until the next run; ctc_beam_gpu_nbest copies one utterance's into a snapshot the caller
 * frees (ctc_nbest_free).
 */
#ifndef HARK_SEARCH_CTC_BEAM_GPU_H
#define HARK_SEARCH_CTC_BEAM_GPU_H

#include "core/error.h"
#include "search/ctc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CTC_GPU_MAX_BEAM 32 /* wider beams run on the CPU (ctc_prefix_beam_search) */

typedef struct ctc_beam_gpu ctc_beam_gpu_t;

/* The widest beam the search kernel runs at on device `device`: CTC_GPU_MAX_BEAM where a block's
 * shared memory holds it (sm_80, sm_90: 163 / 227 KiB), less where it does not (sm_86, sm_89:
 * 99 KiB, beam 31); 0 when the device cannot be queried. Wider beams run on the CPU. */
int ctc_beam_gpu_beam_limit(int device);

/* Scratch for up to max_batch utterances of up to max_frames frames each, beams up to `beam`,
 * on the current device. HARK_ERR_INVALID_ARG (sizes < 1, blank outside [0, V)),
 * HARK_ERR_TOO_LARGE (beam > ctc_beam_gpu_beam_limit), HARK_ERR_CUDA (out of device memory). */
int ctc_beam_gpu_create(int max_batch, int max_frames, int V, int beam, int blank,
                        ctc_beam_gpu_t **out, hark_err_t *err);
void ctc_beam_gpu_destroy(ctc_beam_gpu_t *g); /* accepts NULL */
int ctc_beam_gpu_max_beam(const ctc_beam_gpu_t *g);

/* Enqueues on `stream` (cudaStream_t): the search over d_logp (batch, t_stride, V) device
 * float32 log-probs, utterance b's first lens[b] frames (lens: host, copied here), with beam
 * `beam` (<= the create beam), then the download of the n-best lists. Never synchronises or
 * allocates; the results are readable after the stream has drained, and the next run may be
 * enqueued only then (it reuses the same page-locked buffers).
 * HARK_ERR_INVALID_ARG (sizes beyond create's, lens[b] outside [0, t_stride]), HARK_ERR_CUDA. */
int ctc_beam_gpu_run(ctc_beam_gpu_t *g, const float *d_logp, const int *lens, int batch,
                     int t_stride, int beam, void *stream, hark_err_t *err);

/* Utterance b's n-best of the last run (after its stream drained), as ctc_prefix_beam_search
 * returns it. HARK_ERR_INVALID_ARG (b outside the last batch), HARK_ERR_NOMEM. */
int ctc_beam_gpu_nbest(const ctc_beam_gpu_t *g, int b, ctc_nbest_t *out, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
