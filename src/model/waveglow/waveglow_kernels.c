/* waveglow_kernels.c — the CPU references of waveglow_kernels.h (the GPU launchers are in
 * waveglow_kernels.cu). Tests: tests/model/waveglow/test_waveglow_gpu.c */
#include "model/waveglow/waveglow_kernels.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "model/waveglow/waveglow_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

void wg_noise_ref(float *a, const float *zin, const uint64_t *seeds, float sigma, const int *lens,
                  int batch, int lp, int G, int ch_last, int e)
{
    memset(a, 0, sizeof(float) * (size_t)batch * lp * G);
    for (int b = 0; b < batch; b++) {
        int L = lens[b];
        uint64_t s = seeds ? seeds[b] : 0;
        int n_draws = 1 + (e > 0 ? (G - ch_last) / e : 0);
        float *z = hark_malloc(sizeof(float) * (size_t)G * (L ? L : 1));
        HARK_ASSERT(z);
        for (int d = 0; d < n_draws; d++) {
            int ch = d ? e : ch_last, c0 = d ? G - ch_last - d * e : G - ch_last;
            if (!zin)
                waveglow_gaussian(&s, z, (size_t)ch * L);
            for (int c = 0; c < ch; c++)
                for (int t = 0; t < L; t++) {
                    size_t at = ((size_t)b * lp + t) * G + c0 + c;
                    float v = zin ? zin[at] : z[(size_t)c * L + t];
                    a[at] = v * sigma;
                }
        }
        hark_free(z);
    }
}

void wg_mel_pad_ref(float *x, const float *mel, const int *lens, int batch, int ld, int nm,
                    int cin_p, int t, int pad_l)
{
    int rows = pad_l + t;
    memset(x, 0, sizeof(float) * (size_t)batch * rows * cin_p);
    for (int b = 0; b < batch; b++)
        for (int s = 0; s < lens[b] && s < t; s++)
            for (int i = 0; i < nm; i++)
                x[((size_t)b * rows + pad_l + s) * cin_p + i] = mel[((size_t)b * nm + i) * ld + s];
}

void wg_cond_bias_ref(float *y, const float *x, const float *bias, long long n, int nc, int G)
{
    for (long long i = 0; i < n; i++)
        y[i] = x[i] + bias[(i % nc) / G];
}

void wg_start_ref(float *hs, const float *a, const float *w, const float *b, long long rows, int G,
                  int off, int half, int C)
{
    for (long long r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) {
            float s = b[c];
            for (int q = 0; q < half; q++)
                s += w[(size_t)c * half + q] * a[r * G + off + q];
            hs[r * 2 * C + c] = s;
            hs[r * 2 * C + C + c] = 0.0f;
        }
}

void wg_gate_ref(float *acts, const float *acc, const float *b, long long rows, int C)
{
    for (long long r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) {
            float x = acc[r * 2 * C + c] + (b ? b[c] : 0.0f);
            float g = acc[r * 2 * C + C + c] + (b ? b[C + c] : 0.0f);
            acts[r * C + c] = tanhf(x) * (1.0f / (1.0f + expf(-g)));
        }
}

void wg_flow_tail_ref(float *a, float *wo, const float *hs, int ldh, const float *end_w,
                      const float *end_b, const float *w_inv, const int *lens, int batch, int lp,
                      int G, int off, int ch, int C)
{
    int half = ch / 2;
    float *v = hark_malloc(sizeof(float) * (size_t)ch * 2);
    HARK_ASSERT(v);
    float *x = v + ch;
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < lp; t++) {
            size_t row = (size_t)b * lp + t;
            float *ar = a + row * G + off;
            if (t >= lens[b]) {
                memset(ar, 0, sizeof(float) * (size_t)ch);
                if (wo)
                    memset(wo + row * ch, 0, sizeof(float) * (size_t)ch);
                continue;
            }
            const float *skip = hs + row * ldh + C;
            for (int c = 0; c < ch; c++) {
                float s = 0.0f;
                for (int q = 0; q < C; q++)
                    s += end_w[(size_t)c * C + q] * skip[q];
                v[c] = s + end_b[c];
            }
            memcpy(x, ar, sizeof(float) * (size_t)ch);
            for (int q = 0; q < half; q++)
                x[half + q] = (x[half + q] - v[q]) / expf(v[half + q]);
            for (int c = 0; c < ch; c++) {
                float s = 0.0f;
                for (int j = 0; j < ch; j++)
                    s += w_inv[(size_t)c * ch + j] * x[j];
                ar[c] = s;
            }
            if (wo)
                memcpy(wo + row * ch, v, sizeof(float) * (size_t)ch);
        }
    hark_free(v);
}

void wg_stft_frames_ref(float *fr, const float *x, long long ldx, const int *n, const float *win,
                        int batch, int nf, int N, int hop)
{
    for (int b = 0; b < batch; b++) {
        long long nb = n[b];
        int F = (int)(nb / hop) + 1;
        for (int f = 0; f < nf; f++)
            for (int j = 0; j < N; j++) {
                float v = 0.0f;
                if (f < F) {
                    long long p = (long long)f * hop + j - N / 2;
                    if (p < 0)
                        p = -p;
                    if (p >= nb)
                        p = 2 * (nb - 1) - p;
                    v = x[b * ldx + p] * win[j];
                }
                fr[((size_t)b * nf + f) * N + j] = v;
            }
    }
}

void wg_spec_denoise_ref(float *spec, const float *bias, float strength, long long rows, int nb)
{
    for (long long r = 0; r < rows; r++)
        for (int k = 0; k < nb; k++) {
            float *z = spec + (r * nb + k) * 2;
            float re = z[0], im = z[1];
            float mg = sqrtf(re * re + im * im) - bias[k] * strength;
            mg = mg > 0.0f ? mg : 0.0f;
            float ph = atan2f(im, re);
            z[0] = mg * cosf(ph);
            z[1] = mg * sinf(ph);
        }
}

void wg_ola_ref(float *y, long long ldy, const float *fr, const int *n, const float *win, int batch,
                int nf, int N, int hop)
{
    float scale = (float)N / (float)hop;
    for (int b = 0; b < batch; b++) {
        int F = n[b] / hop + 1;
        long long n_out = (long long)(F - 1) * hop;
        for (long long p = 0; p < n_out; p++) {
            long long q = p + N / 2;
            float acc = 0.0f, wss = 0.0f;
            for (int f = 0; f < F && f < nf; f++) {
                long long j = q - (long long)f * hop;
                if (j < 0 || j >= N)
                    continue;
                acc += fr[((size_t)b * nf + f) * N + j] / (float)N / scale * win[j];
                double w = 0.5 - 0.5 * cos(2.0 * M_PI * (double)j / N);
                wss = (float)((double)wss + w * w);
            }
            if (wss > FLT_MIN)
                acc /= wss;
            y[b * ldy + p] = acc * scale;
        }
    }
}
