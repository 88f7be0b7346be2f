/* ctc_gpu.h — the CPU reference of the GPU's per-frame CTC argmax (the greedy search's only
 * device work: cuda_ctc_log_softmax_argmax and cuda_lse_argmax in ops/ops_cuda.h), so that only
 * (rows) ints cross to the host instead of (rows, V) log-probs.
 * Tests: tests/search/test_ctc_gpu.c */
#ifndef HARK_SEARCH_CTC_GPU_H
#define HARK_SEARCH_CTC_GPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* out[r] = argmax_k x[r, k] (first index on ties; NaN never wins), x (rows, V) row-major. */
void ctc_argmax_ref(int *out, const float *x, int rows, int V);

#ifdef __cplusplus
}
#endif
#endif
