/* rfft.h — real forward FFT for power-of-two sizes that performs, in float32, the same
 * operations in the same order as the FFTPACK-style radix-4/radix-2 transform inside PyTorch's
 * CPU FFT (pocketfft). Why not FFTW here: Kaldi fbank values of low-energy bins depend on the
 * FFT's float32 rounding at the 1e-3 level (see docs/features.md), and WeNet's features were
 * computed by PyTorch; reproducing its rounding is what lets hark match them to < 1e-3.
 * The same arithmetic runs in the GPU kernel (features.cu). Tests: tests/dsp/test_rfft.c */
#ifndef HARK_DSP_RFFT_H
#define HARK_DSP_RFFT_H

#define RFFT_MAX_FACTORS 16

typedef struct {
    int n; /* transform size, a power of two >= 2 */
    int nfact;
    int fact[RFFT_MAX_FACTORS];   /* 2 first (if any), then 4s: pocketfft's order */
    int tw_off[RFFT_MAX_FACTORS]; /* offset of each factor's twiddles in tw[] */
    float *tw;                    /* twiddles (cos, sin) pairs, float32 */
    int n_tw;
} rfft_plan_t;

/* Returns 0, or -1 if n is not a power of two >= 2 or on allocation failure. */
int rfft_plan_init(rfft_plan_t *p, int n);
void rfft_plan_free(rfft_plan_t *p);
/* In: x[n] real. Out: spec[2*(n/2+1)] as (re, im) pairs, bins 0..n/2 (one transform through the
 * lane code below, for tests and one-off use; `work` is unused, x is left as it was). */
void rfft_forward(const rfft_plan_t *p, float *x, float *work, float *spec);

/* RFFT_LANES transforms at once, lane-interleaved: x[j * RFFT_LANES + l] is element j of lane l;
 * spec[(2*k + c) * RFFT_LANES + l] is (c = 0: re, 1: im) of bin k of lane l. Each lane's result
 * is the FFTPACK order described above. `work` holds n * RFFT_LANES floats; x is overwritten. */
#define RFFT_LANES 8
void rfft_forward_lanes(const rfft_plan_t *p, float *x, float *work, float *spec);

#endif
