/* waveglow_kernels.h — the GPU kernels of the WaveGlow engine (waveglow_gpu.c) that the shared ops
 * (ops_cuda.h, conv1d.h) lack: the CPU references (waveglow_kernels.c, always built) and their
 * launchers (waveglow_kernels.cu, HARK_CUDA only). Layouts: the batch stays padded, time-major
 * with channels innermost; an item b has lens[b] valid rows of lp (WN rows: frames · stride /
 * n_group), rows past it are written as zero where a kernel says so. The audio state a (batch, lp,
 * G) float holds every flow's channels at once: flow k's ch_k channels are columns [G - ch_k, G),
 * the columns before them the (sigma-scaled) noise its early outputs will join — so DLE's
 * cat(sigma·z, audio) costs nothing, and a (batch, lp · G) is the audio in sample order.
 * Tests: tests/model/waveglow/test_waveglow_gpu.c (each launcher against its reference on awkward
 * sizes).
 *
 * The launchers follow ops_cuda.h: outputs, inputs, sizes, then the stream, then err; they enqueue,
 * never synchronise or allocate; HARK_OK, HARK_ERR_CUDA or HARK_ERR_INVALID_ARG. Device pointers
 * unless stated; dt: OPS_F32 or OPS_F16 (OPS_BF16 too) where a `void *` carries it.
 */
#ifndef HARK_MODEL_WAVEGLOW_KERNELS_H
#define HARK_MODEL_WAVEGLOW_KERNELS_H

#include "core/error.h"
#include "ops/ops_cuda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU references ------------------------------------------------------------------------ */

/* The initial audio state: a[b][t][col] = sigma · z for t < lens[b], 0 after, where z is the
 * CPU's noise for item b alone: draw 0 (ch_last channels) at columns [G - ch_last, G), draw j >= 1
 * (early output j, e channels) at [G - ch_last - j·e, G - ch_last - (j-1)·e); each draw (channels,
 * len) channel-major as waveglow_noise_fn fills it. zin (batch, lp, G) host values laid out so
 * (the noise hook's, gathered), or NULL: the seeded stream seeds[b] (waveglow_gaussian, draws one
 * after another). */
void wg_noise_ref(float *a, const float *zin, const uint64_t *seeds, float sigma, const int *lens,
                  int batch, int lp, int G, int ch_last, int e);

/* x (batch, pad_l + t, cin_p) of the conv's type (float here) = the mel of item b transposed to
 * time-major: row pad_l + s = mel[b][i][s] (columns i < nm) for s < lens[b]; every other row and
 * column zero. mel (batch, nm, ld) float channel-major (lens[b] <= ld: only valid frames are
 * read). */
void wg_mel_pad_ref(float *x, const float *mel, const int *lens, int batch, int ld, int nm,
                    int cin_p, int t, int pad_l);

/* y (n) = x + bias[(i mod nc) / G]: the upsampler's bias on the grouped conditioning (row of nc
 * columns mel · G + j). */
void wg_cond_bias_ref(float *y, const float *x, const float *bias, long long n, int nc, int G);

/* WN's start: hs[r][c] = b[c] + Σ_q w[c][q] · a[r · G + off + q] (q < half) and hs[r][C + c] = 0
 * (the skip sum) for rows r < rows; hs (rows, 2C), w (C, half). */
void wg_start_ref(float *hs, const float *a, const float *w, const float *b, long long rows, int G,
                  int off, int half, int C);

/* acts (rows, C) = tanh(acc[r][c] + b[c]) · sigmoid(acc[r][C + c] + b[C + c]); acc (rows, 2C),
 * b (2C) or NULL. */
void wg_gate_ref(float *acts, const float *acc, const float *b, long long rows, int C);

/* One flow's end, in place on a (batch, lp, G) at columns [off, off + ch): for t < lens[b],
 *   wo = end_w · skip + end_b       skip = hs[row][C .. 2C) (row stride ldh), end_w (ch, C)
 *   x1[q] = (x1[q] - wo[q]) / exp(wo[half + q])   (x = the row's ch values, x1 its upper half)
 *   a[off ..] = w_inv · x           w_inv (ch, ch)
 * rows t >= lens[b]: 0. wo (batch, lp, ch) or NULL: wo written (0 past lens). */
void wg_flow_tail_ref(float *a, float *wo, const float *hs, int ldh, const float *end_w,
                      const float *end_b, const float *w_inv, const int *lens, int batch, int lp,
                      int G, int off, int ch, int C);

/* The denoiser's STFT frames: fr[b][f][j] = x[b][refl(f · hop + j - N/2)] · win[j] for f <
 * n[b] / hop + 1, 0 for the later frames up to nf; refl reflects at both ends of item b's n[b]
 * samples (n[b] > N/2). x (batch, ldx), fr (batch, nf, N). */
void wg_stft_frames_ref(float *fr, const float *x, long long ldx, const int *n, const float *win,
                        int batch, int nf, int N, int hop);

/* Per bin of spec (rows, N/2 + 1) complex (re, im interleaved), in place: mag = |X| less
 * bias[k] · strength, clamped at 0, with X's phase: (mg · cos φ, mg · sin φ), φ = atan2(im, re).
 */
void wg_spec_denoise_ref(float *spec, const float *bias, float strength, long long rows, int nb);

/* The inverse's overlap-add: fr (batch, nf, N) the unnormalised inverse real DFTs; item b's
 * output y[p] (p < (n[b] / hop) · hop) = (Σ_f fr[f][q - f·hop] / N / scale · win[q - f·hop]) /
 * wss[q] · scale at q = p + N/2 (frames f < n[b] / hop + 1 in ascending order; wss the window's
 * sum of squares, float accumulation of double terms as librosa's; no division where wss <=
 * FLT_MIN), scale = N / hop. y (batch, ldy), n[b] <= ldy; the samples after each item's output are
 * left as they are (y may be the frames' source x: they are made before). */
void wg_ola_ref(float *y, long long ldy, const float *fr, const int *n, const float *win, int batch,
                int nf, int N, int hop);

/* ---- GPU launchers (HARK_CUDA) -------------------------------------------------------------
 * Each takes its scalars where the reference does; sigma and strength as device floats (*d_sigma,
 * *d_strength) so that a recorded CUDA graph reads each run's value; seeds device uint64s. */

int cuda_wg_noise(float *a, const float *zin, const uint64_t *seeds, const float *d_sigma,
                  const int *lens, int batch, int lp, int G, int ch_last, int e, void *stream,
                  hark_err_t *err);
int cuda_wg_mel_pad(void *x, ops_dtype_t dt, const float *mel, const int *lens, int batch, int ld,
                    int nm, int cin_p, int t, int pad_l, void *stream, hark_err_t *err);
int cuda_wg_cond_bias(void *y, ops_dtype_t dt, const float *x, const float *bias, long long n,
                      int nc, int G, void *stream, hark_err_t *err);
int cuda_wg_start(float *hs, const float *a, const float *w, const float *b, long long rows, int G,
                  int off, int half, int C, void *stream, hark_err_t *err);
int cuda_wg_gate(void *acts, ops_dtype_t dt, const float *acc, const float *b, long long rows,
                 int C, void *stream, hark_err_t *err);
int cuda_wg_flow_tail(float *a, float *wo, const float *hs, int ldh, const float *end_w,
                      const float *end_b, const float *w_inv, const int *lens, int batch, int lp,
                      int G, int off, int ch, int C, void *stream, hark_err_t *err);
int cuda_wg_stft_frames(float *fr, const float *x, long long ldx, const int *n, const float *win,
                        int batch, int nf, int N, int hop, void *stream, hark_err_t *err);
int cuda_wg_spec_denoise(float *spec, const float *bias, const float *d_strength, long long rows,
                         int nb, void *stream, hark_err_t *err);
int cuda_wg_ola(float *y, long long ldy, const float *fr, const int *n, const float *win, int batch,
                int nf, int N, int hop, void *stream, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
