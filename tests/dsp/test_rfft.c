/* Tests for src/dsp/rfft.c: the torch-order float32 real FFT against a double-precision DFT on
 * every power-of-two size from 2 to 4096, and refusal of other sizes. */
#include "test.h"

#include "dsp/rfft.h"

#include <math.h>
#include <stdlib.h>

TEST(rfft_matches_double_dft)
{
    unsigned seed = 7;
    for (int n = 2; n <= 4096; n *= 2) {
        rfft_plan_t p;
        CHECK_OK(rfft_plan_init(&p, n));
        float *x = malloc(sizeof(float) * (size_t)n), *x0 = malloc(sizeof(float) * (size_t)n);
        float *work = malloc(sizeof(float) * (size_t)n * 2);
        float *spec = malloc(sizeof(float) * (size_t)(n + 2) + 16);
        spec[n + 2] = 12345.0f; /* guard */
        for (int i = 0; i < n; i++)
            x0[i] = x[i] = test_randf(&seed);
        rfft_forward(&p, x, work, spec);
        CHECK(spec[n + 2] == 12345.0f);
        double err = 0, norm = 0;
        for (int k = 0; k <= n / 2; k++) {
            double re = 0, im = 0;
            for (int j = 0; j < n; j++) {
                double a = -2.0 * M_PI * (double)((long)j * k % n) / n;
                re += x0[j] * cos(a);
                im += x0[j] * sin(a);
            }
            err += pow(spec[2 * k] - re, 2) + pow(spec[2 * k + 1] - im, 2);
            norm += re * re + im * im;
        }
        double rel = sqrt(err / norm);
        CHECKF(rel < 1e-6, "n=%d: relative error %.3g", n, rel);
        free(x);
        free(x0);
        free(work);
        free(spec);
        rfft_plan_free(&p);
    }
    rfft_plan_t q;
    CHECK(rfft_plan_init(&q, 400) != 0);
    CHECK(rfft_plan_init(&q, 1) != 0);
}
