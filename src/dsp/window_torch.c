/* window_torch.c — analysis windows computed with PyTorch's float32 arithmetic: torch builds
 * hann/povey windows with SLEEF's vectorised cosf/powf (AVX2 kernels on x86-64), and Kaldi fbank
 * values of low-energy bins move by ~1e-3 when a window sample differs by one ulp. This file is
 * compiled with -mavx2 -mfma (see Makefile); features.c calls it only when the CPU has them.
 * Tests: tests/dsp/test_features.c (fbank vs WeNet golden) */
#include "dsp/window_torch.h"

#include <math.h>
#include <sleef.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* w[i] = (0.5 - 0.5 cos(2 pi i / (n-1)))^power, every step in float32 as torch's hann_window +
 * pow: arange * float(2 pi/(n-1)), cos, * -0.5, + 0.5, pow(float(power)). */
static void hann_pow_avx2(float *w, int n, float power)
{
    float step = (float)(2.0 * M_PI / (double)(n - 1));
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float a[8];
        for (int k = 0; k < 8; k++)
            a[k] = (float)(i + k) * step;
        __m256 c = Sleef_cosf8_u10(_mm256_loadu_ps(a));
        __m256 h = _mm256_add_ps(_mm256_mul_ps(c, _mm256_set1_ps(-0.5f)), _mm256_set1_ps(0.5f));
        if (power != 1.0f)
            h = Sleef_powf8_u10(h, _mm256_set1_ps(power));
        _mm256_storeu_ps(w + i, h);
    }
    for (; i < n; i++) { /* torch's scalar tail uses the same SLEEF routines */
        float a[8] = {0}, o[8];
        a[0] = (float)i * step;
        __m256 c = Sleef_cosf8_u10(_mm256_loadu_ps(a));
        __m256 h = _mm256_add_ps(_mm256_mul_ps(c, _mm256_set1_ps(-0.5f)), _mm256_set1_ps(0.5f));
        if (power != 1.0f)
            h = Sleef_powf8_u10(h, _mm256_set1_ps(power));
        _mm256_storeu_ps(o, h);
        w[i] = o[0];
    }
}
#endif

int window_torch_hann_pow_avx2(float *w, int n, float power)
{
#if defined(__AVX2__) && defined(__FMA__)
    hann_pow_avx2(w, n, power);
    return 0;
#else
    return -1;
#endif
}
