/* tacotron2_kern.h — the GPU Tacotron 2's kernels (tacotron2_kern.cu), launched by
 * tacotron2_gpu.c. Internal to src/model/tacotron2. Every launcher enqueues on `stream` and
 * returns 0 or a cudaError_t. The CPU reference of each is the matching step of tacotron2.c
 * (named per launcher); tests/model/tacotron2/test_tacotron2_gpu.c compares every stage with it.
 *
 * Decoder layout (slots: a batch row's fixed place; `rows` (device, na) lists the slots still
 * decoding):
 *   xa (slots, lda)  = [prenet P | context E | h_att AR]        the attention LSTM's input
 *   xd (slots, ldd)  = [h_att AR | context E | h_dec DR]        the decoder LSTM's input
 *   xp (slots, ldp)  = [context E | h_dec DR]                   the projection's input
 * Weights of an LSTM: W (4·H, K) over its whole input row (W_ih | W_hh), bias (4·H) = b_ih + b_hh.
 * wt: 0 float32 weights (accumulation in double), 1 float16 weights (accumulation in float). */
#ifndef HARK_MODEL_TACOTRON2_KERN_H
#define HARK_MODEL_TACOTRON2_KERN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the encoder, in double (tacotron2.c encode) ---- */
/* X (B, Lp, e): row b position pad + s = emb[ids[b · nmax + s]] for s < lens[b]; zeros elsewhere */
int t2k_embed(double *X, const float *emb, const int *ids, const int *lens, int B, int nmax, int Lp,
              int pad, int e, void *stream);
/* X row r (valid position) = relu((Y[r - pad] + b) · scale + shift); pads and rows past a length
 * zero */
int t2k_conv_epi(double *X, const double *Y, const double *b, const double *scale,
                 const double *shift, const int *lens, int B, int Lp, int pad, int e, void *stream);
/* XG (rows, G) = bias per row (the input projection's initial value) */
int t2k_fill_rows(double *XG, const double *bias, int rows, int G, void *stream);
/* One time step t of both encoder LSTM directions for every row still long enough: h (2 parities,
 * 2 directions, B, hid) read at parity t & 1 and written at the other; c (2, B, hid); out (B,
 * nmax, e) columns [dir · hid, (dir + 1) · hid) at the row's position (t, or lens - 1 - t) */
int t2k_enc_lstm_step(double *out, double *h, double *c, const double *xg_f, const double *xg_b,
                      const double *whh_f, const double *whh_b, const double *bhh_f,
                      const double *bhh_b, const int *lens, int B, int nmax, int Lp, int pad,
                      int hid, int e, int t, void *stream);
/* mem_f (B, nmax, e) = (float) X; X = (double) mem_f; rows past a length zero */
int t2k_round_memory(float *mem_f, double *X, const int *lens, int B, int nmax, int e,
                     void *stream);
/* f (n) = (float) d (n) */
int t2k_to_float(float *f, const double *d, long long n, void *stream);

/* ---- the decoder step (tacotron2.c tacotron2_infer's loop) ---- */
/* The decoder step's kernels take the step as *d_step + k_step (device memory: a CUDA graph of a
 * chunk of steps is replayed for every chunk, d_step holding the chunk's first step). */
/* prenet of each listed slot from its previous frame (zeros at step 0) into xa[0, P): two
 * bias-free linears (w0 (P, nm), w1 (P, P)), ReLU, keep · 2. keep from masks (slots, max_steps,
 * 2, P) when given, else the seeded generator from seeds[slot] */
int t2k_prenet(int wt, const void *w0, const void *w1, const float *frames, int max_steps, int nm,
               int P, const int *d_step, int k_step, const int *rows, int na, float *xa, int lda,
               const uint64_t *seeds, const uint8_t *masks, void *stream);
/* LSTM cell of each listed slot: gates = W · x[slot] + bias; c (slots, H) updated in place; h into
 * hout[slot · ldh + u]. Also copies clen floats from csrc[slot · lds] to cdst[slot · ldc] (a side
 * job; clen 0: none); csrc must not be read by this launch's LSTM nor cdst be its x. */
int t2k_lstm(int wt, const void *W, const float *bias, const float *x, int ldx, int K, int H,
             const int *rows, int na, float *c, float *hout, int ldh, const float *csrc, int lds,
             float *cdst, int ldc, int clen, void *stream);
/* y[slot · ldy + o] = W (M, K) · x[slot · ldx] (query projection: no bias) */
int t2k_gemv(int wt, const void *W, const float *x, int ldx, int K, int M, const int *rows, int na,
             float *y, int ldy, void *stream);
/* mel frame and gate: o < nm -> frames[(slot · max_steps + step) · nm + o], o = nm ->
 * gates[slot · max_steps + step], each W (nm + 1, K) · x[slot] + bias[o]; plus the side copy of
 * t2k_lstm */
int t2k_project(int wt, const void *W, const float *bias, const float *x, int ldx, int K, int nm,
                const int *rows, int na, float *frames, float *gates, int max_steps,
                const int *d_step, int k_step, const float *csrc, int lds, float *cdst, int ldc,
                int clen, void *stream);
/* energies (slots, nmax) of each listed slot's positions < lens[slot]: location conv over (w,
 * wcum), location dense, v · tanh(pq + location + pmem) */
int t2k_energy(const float *pq, const float *pmem, const float *w, const float *wcum,
               const float *loc_conv, const float *loc_dense, const float *v, const int *rows,
               int na, const int *lens, int nmax, int A, int F, int Kl, float *energy,
               void *stream);
/* softmax of the energies -> w (and wcum += w, align (slots, max_steps, nmax) row step); context
 * = Σ w · memory (slots, nmax, e) into ctx_a[slot · lda], ctx_d[slot · ldd], ctx_p[slot · ldp] */
int t2k_attend(const float *energy, float *w, float *wcum, float *align, int max_steps,
               const int *d_step, int k_step, const float *memory, const int *rows, int na,
               const int *lens, int nmax, int e, float *ctx_a, int lda, float *ctx_d, int ldd,
               float *ctx_p, int ldp, void *stream);

/* ---- the postnet ---- */
/* xp (B, Tmax + 2·pad, nm) of dt (0 float, 1 half): row pad + s = frames[(b · max_steps + s) · nm]
 * for s < T[b]; zeros elsewhere */
int t2k_post_input(void *xp, int dt, const float *frames, int max_steps, const int *T, int B,
                   int Tmax, int pad, int nm, void *stream);
/* the conv's acc (B, Tmax, c) + b, tanh unless last: not last -> xp_next (B, Tmax + 2·pad, c) of
 * dt at row pad + s (s < T[b], zeros elsewhere); last -> mel (B, nm, Tmax) channel-major = frames
 * + acc + b for s < T[b], 0 past; res (B, nm, Tmax) or NULL: acc + b alone (stage dumps) */
int t2k_post_epi(const float *acc, const float *b, int c, int last, void *xp_next, int dt,
                 float *mel, float *res, const float *frames, int max_steps, const int *T, int B,
                 int Tmax, int pad, void *stream);

#ifdef __cplusplus
}
#endif

#endif
