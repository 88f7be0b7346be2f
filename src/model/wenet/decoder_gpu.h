/* decoder_gpu.h — the WeNet attention decoder of decoder.h on the GPU (float32), scoring the CTC
 * n-best of a whole batch of utterances in one pass: every candidate's rows of every utterance are
 * stacked (no padding rows), each linear is one cuBLAS GEMM over all of them, attention runs over
 * ragged key runs (cuda_segment_attention: a candidate's own earlier rows, its utterance's encoder
 * frames), and only the log-probs of the scored tokens leave the output layer
 * (cuda_lse_gather). It computes what wenet_decoder_score computes, candidate by candidate.
 * Tests: tests/model/wenet/test_decoder_gpu.c (against decoder.c on the golden model and on
 * synthetic pre-/post-norm, transformer and bitransformer configurations).
 *
 * Ownership. A wenet_decoder_gpu_t holds the weights on the device, uploaded once at creation from
 * the weight source (read during creation only); it is immutable and may be shared by any number
 * of states. A wenet_decoder_gpu_state_t belongs to one thread: its cuBLAS handle runs on the
 * stream it was created with. Its scratch (device rows and page-locked staging) is sized ahead by
 * wenet_decoder_gpu_state_reserve, at load time; a call within the reservation neither allocates
 * nor synchronises beyond its own final wait. A call that needs more grows the scratch to its size
 * (a wait for the stream, then cudaFree / cudaMalloc inside the call: the one allocation on the
 * hot path, counted by wenet_decoder_gpu_state_grows); it is never shrunk. */
#ifndef HARK_MODEL_DECODER_GPU_H
#define HARK_MODEL_DECODER_GPU_H

#include "core/error.h"
#include "model/wenet/conformer.h" /* conformer_tensor_fn */
#include "model/wenet/wenet_config.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wenet_decoder_gpu wenet_decoder_gpu_t;
typedef struct wenet_decoder_gpu_state wenet_decoder_gpu_state_t;

/* As wenet_decoder_create_fn (same names, checks and errors), on the current CUDA device;
 * HARK_ERR_NO_DEVICE without one, HARK_ERR_UNSUPPORTED for a head width over 128. */
int wenet_decoder_gpu_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                             wenet_decoder_gpu_t **out, hark_err_t *err);
void wenet_decoder_gpu_destroy(wenet_decoder_gpu_t *d); /* accepts NULL */
size_t wenet_decoder_gpu_bytes(const wenet_decoder_gpu_t *d);

/* stream: cudaStream_t (NULL = default). */
int wenet_decoder_gpu_state_create(const wenet_decoder_gpu_t *d, void *stream,
                                   wenet_decoder_gpu_state_t **out, hark_err_t *err);
void wenet_decoder_gpu_state_destroy(wenet_decoder_gpu_state_t *s); /* accepts NULL */

/* Scratch for calls of up to `rows` decoder rows (Σ over all candidates of len + 1) over up to
 * `enc_rows` encoder rows (batch · t_stride), allocated now (waits for the stream if it replaces
 * a smaller scratch; never shrinks). HARK_ERR_TOO_LARGE past 2^28 rows; HARK_ERR_CUDA (out of
 * memory, naming the size; the state then holds no scratch and stays usable). */
int wenet_decoder_gpu_state_reserve(wenet_decoder_gpu_state_t *s, size_t rows, size_t enc_rows,
                                    hark_err_t *err);
/* How many calls of wenet_decoder_gpu_score allocated because they needed more than the scratch
 * held (the first call of a state never reserved counts too). */
int wenet_decoder_gpu_state_grows(const wenet_decoder_gpu_state_t *s);
/* Bytes of scratch held (device + page-locked); its capacity in rows and encoder rows (either
 * may be NULL). */
size_t wenet_decoder_gpu_state_bytes(const wenet_decoder_gpu_state_t *s, size_t *rows,
                                     size_t *enc_rows);

/* Scores the candidates of `batch` utterances. Utterance b's encoder output is rows
 * [b · t_stride, b · t_stride + enc_lens[b]) of d_enc (device, float32, D columns; enc_lens on
 * the host, >= 1 for an utterance with candidates); its n[b] candidates are the next n[b] entries
 * of hyps / lens (host). fwd and rev (Σ n[b], host) get what wenet_decoder_score gives for each
 * utterance: left-decoder scores, and right-decoder scores where the model has a right decoder
 * and reverse_weight > 0 (0 otherwise; rev may be NULL). Enqueued on the state's stream, which it
 * then waits for. Errors as wenet_decoder_score; HARK_ERR_CUDA. */
int wenet_decoder_gpu_score(wenet_decoder_gpu_state_t *s, const float *d_enc, int t_stride,
                            const int *enc_lens, int batch, const int *n, const int *const *hyps,
                            const int *lens, float reverse_weight, float *fwd, float *rev,
                            hark_err_t *err);

#ifdef __cplusplus
}
#endif

#endif
