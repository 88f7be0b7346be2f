/* ctc_gpu.h — CTC helpers on the GPU: the per-frame argmax that greedy search needs, so that only
 * (rows) ints cross to the host instead of (rows, V) log-probs.
 * CPU reference: ctc_argmax_ref (below). Tests: tests/search/test_ctc_gpu.c */
#ifndef HARK_SEARCH_CTC_GPU_H
#define HARK_SEARCH_CTC_GPU_H

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[r] = argmax_k x[r, k] (first index on ties; NaN never wins), x (rows, V) row-major. */
void ctc_argmax_ref(int *out, const float *x, int rows, int V);
/* The same on the device, enqueued on `stream` (cudaStream_t, NULL = default); d_max (rows),
 * when not NULL, receives each row's maximum (the greedy path's score terms). */
int cuda_ctc_argmax(int *d_out, float *d_max, const float *d_x, int rows, int V, void *stream,
                    hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
