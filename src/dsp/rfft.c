/* rfft.c — FFTPACK-order float32 real FFT (radix 4, one radix 2), matching PyTorch's CPU FFT
 * operation by operation. Written from the FFTPACK algorithm description (radf2/radf4 passes).
 * Tests: tests/dsp/test_rfft.c */
#include "dsp/rfft.h"

#include "core/alloc.h"
#include "core/assert.h"

#include <math.h>
#include <string.h>

int rfft_plan_init(rfft_plan_t *p, int n)
{
    memset(p, 0, sizeof *p);
    if (n < 2 || (n & (n - 1)))
        return -1;
    p->n = n;
    int len = n;
    while (len % 4 == 0) {
        p->fact[p->nfact++] = 4;
        len /= 4;
    }
    if (len % 2 == 0) { /* the single 2 goes to the front */
        p->fact[p->nfact++] = 2;
        int t = p->fact[0];
        p->fact[0] = 2;
        p->fact[p->nfact - 1] = t;
    }
    int total = 0, l1 = 1;
    for (int k = 0; k < p->nfact; k++) {
        int ip = p->fact[k], ido = n / (l1 * ip);
        p->tw_off[k] = total;
        total += (ip - 1) * (ido - 1);
        l1 *= ip;
    }
    p->n_tw = total;
    p->tw = hark_malloc(sizeof(float) * (size_t)(total > 0 ? total : 1));
    if (!p->tw)
        return -1;
    l1 = 1;
    for (int k = 0; k < p->nfact; k++) {
        int ip = p->fact[k], ido = n / (l1 * ip);
        float *tw = p->tw + p->tw_off[k];
        if (k < p->nfact - 1) { /* the last factor needs none */
            for (int j = 1; j < ip; j++) {
                for (int i = 1; i <= (ido - 1) / 2; i++) {
                    double a = 2.0 * M_PI * (double)((long)j * l1 * i) / (double)n;
                    tw[(j - 1) * (ido - 1) + 2 * i - 2] = (float)cos(a);
                    tw[(j - 1) * (ido - 1) + 2 * i - 1] = (float)sin(a);
                }
            }
        }
        l1 *= ip;
    }
    return 0;
}

void rfft_plan_free(rfft_plan_t *p)
{
    hark_free(p->tw);
    p->tw = NULL;
}

#define WA(x, i) wa[(i) + (x) * (ido - 1)]

/* ---- RFFT_LANES transforms at once: element j of lane l at x[j * RFFT_LANES + l]. Each lane
 * performs exactly the operations of the single transform above (the lane loop is innermost,
 * so the compiler turns it into SIMD without reordering any lane's arithmetic). */
#define LC(a, b, c) cc[((a) + ido * ((b) + l1 * (c))) * RFFT_LANES + l]
#define L_CH2(a, b, c) ch[((a) + ido * ((b) + 2 * (c))) * RFFT_LANES + l]
#define L_CH4(a, b, c) ch[((a) + ido * ((b) + 4 * (c))) * RFFT_LANES + l]

/* AVX2 clone picked at load time where the CPU has it; no FMA, so the same roundings */
__attribute__((target_clones("avx2", "default"))) static void
pass2_lanes(int ido, int l1, const float *restrict cc, float *restrict ch, const float *restrict wa)
{
    for (int k = 0; k < l1; k++) {
#pragma GCC ivdep
        for (int l = 0; l < RFFT_LANES; l++) {
            L_CH2(0, 0, k) = LC(0, k, 0) + LC(0, k, 1);
            L_CH2(ido - 1, 1, k) = LC(0, k, 0) - LC(0, k, 1);
        }
        if ((ido & 1) == 0) {
#pragma GCC ivdep
            for (int l = 0; l < RFFT_LANES; l++) {
                L_CH2(0, 1, k) = -LC(ido - 1, k, 1);
                L_CH2(ido - 1, 0, k) = LC(ido - 1, k, 0);
            }
        }
    }
    if (ido <= 2)
        return;
    for (int k = 0; k < l1; k++) {
        for (int i = 2; i < ido; i += 2) {
            int ic = ido - i;
            float wr = WA(0, i - 2), wi = WA(0, i - 1);
#pragma GCC ivdep
            for (int l = 0; l < RFFT_LANES; l++) {
                float tr2 = wr * LC(i - 1, k, 1) + wi * LC(i, k, 1);
                float ti2 = wr * LC(i, k, 1) - wi * LC(i - 1, k, 1);
                L_CH2(i - 1, 0, k) = LC(i - 1, k, 0) + tr2;
                L_CH2(ic - 1, 1, k) = LC(i - 1, k, 0) - tr2;
                L_CH2(i, 0, k) = ti2 + LC(i, k, 0);
                L_CH2(ic, 1, k) = ti2 - LC(i, k, 0);
            }
        }
    }
}

__attribute__((target_clones("avx2", "default"))) static void
pass4_lanes(int ido, int l1, const float *restrict cc, float *restrict ch, const float *restrict wa)
{
    const float hsqt2 = 0.707106781186547524400844362104849f;
    for (int k = 0; k < l1; k++) {
#pragma GCC ivdep
        for (int l = 0; l < RFFT_LANES; l++) {
            float tr1 = LC(0, k, 3) + LC(0, k, 1);
            L_CH4(0, 2, k) = LC(0, k, 3) - LC(0, k, 1);
            float tr2 = LC(0, k, 0) + LC(0, k, 2);
            L_CH4(ido - 1, 1, k) = LC(0, k, 0) - LC(0, k, 2);
            L_CH4(0, 0, k) = tr2 + tr1;
            L_CH4(ido - 1, 3, k) = tr2 - tr1;
        }
        if ((ido & 1) == 0) {
#pragma GCC ivdep
            for (int l = 0; l < RFFT_LANES; l++) {
                float ti1 = -hsqt2 * (LC(ido - 1, k, 1) + LC(ido - 1, k, 3));
                float tr1 = hsqt2 * (LC(ido - 1, k, 1) - LC(ido - 1, k, 3));
                L_CH4(ido - 1, 0, k) = LC(ido - 1, k, 0) + tr1;
                L_CH4(ido - 1, 2, k) = LC(ido - 1, k, 0) - tr1;
                L_CH4(0, 3, k) = ti1 + LC(ido - 1, k, 2);
                L_CH4(0, 1, k) = ti1 - LC(ido - 1, k, 2);
            }
        }
    }
    if (ido <= 2)
        return;
    for (int k = 0; k < l1; k++) {
        for (int i = 2; i < ido; i += 2) {
            int ic = ido - i;
            float w0r = WA(0, i - 2), w0i = WA(0, i - 1), w1r = WA(1, i - 2), w1i = WA(1, i - 1);
            float w2r = WA(2, i - 2), w2i = WA(2, i - 1);
#pragma GCC ivdep
            for (int l = 0; l < RFFT_LANES; l++) {
                float cr2 = w0r * LC(i - 1, k, 1) + w0i * LC(i, k, 1);
                float ci2 = w0r * LC(i, k, 1) - w0i * LC(i - 1, k, 1);
                float cr3 = w1r * LC(i - 1, k, 2) + w1i * LC(i, k, 2);
                float ci3 = w1r * LC(i, k, 2) - w1i * LC(i - 1, k, 2);
                float cr4 = w2r * LC(i - 1, k, 3) + w2i * LC(i, k, 3);
                float ci4 = w2r * LC(i, k, 3) - w2i * LC(i - 1, k, 3);
                float tr1 = cr4 + cr2, tr4 = cr4 - cr2;
                float ti1 = ci2 + ci4, ti4 = ci2 - ci4;
                float tr2 = LC(i - 1, k, 0) + cr3, tr3 = LC(i - 1, k, 0) - cr3;
                float ti2 = LC(i, k, 0) + ci3, ti3 = LC(i, k, 0) - ci3;
                L_CH4(i - 1, 0, k) = tr2 + tr1;
                L_CH4(ic - 1, 3, k) = tr2 - tr1;
                L_CH4(i, 0, k) = ti1 + ti2;
                L_CH4(ic, 3, k) = ti1 - ti2;
                L_CH4(i - 1, 2, k) = tr3 + ti4;
                L_CH4(ic - 1, 1, k) = tr3 - ti4;
                L_CH4(i, 2, k) = tr4 + ti3;
                L_CH4(ic, 1, k) = tr4 - ti3;
            }
        }
    }
}

void rfft_forward_lanes(const rfft_plan_t *p, float *x, float *work, float *spec)
{
    int n = p->n, l1 = n;
    float *p1 = x, *p2 = work;
    for (int k1 = 0; k1 < p->nfact; k1++) {
        int k = p->nfact - k1 - 1;
        int ip = p->fact[k], ido = n / l1;
        l1 /= ip;
        if (ip == 4)
            pass4_lanes(ido, l1, p1, p2, p->tw + p->tw_off[k]);
        else
            pass2_lanes(ido, l1, p1, p2, p->tw + p->tw_off[k]);
        float *t = p1;
        p1 = p2;
        p2 = t;
    }
    const int L = RFFT_LANES;
    for (int l = 0; l < L; l++) {
        spec[l] = p1[l];
        spec[L + l] = 0;
        spec[(size_t)2 * (n / 2) * L + l] = p1[(size_t)(n - 1) * L + l];
        spec[(size_t)(2 * (n / 2) + 1) * L + l] = 0;
    }
    for (int i = 1; i < n / 2; i++)
        for (int l = 0; l < L; l++) {
            spec[(size_t)2 * i * L + l] = p1[(size_t)(2 * i - 1) * L + l];
            spec[(size_t)(2 * i + 1) * L + l] = p1[(size_t)2 * i * L + l];
        }
}

void rfft_forward(const rfft_plan_t *p, float *x, float *work, float *spec)
{
    /* one transform through the lane code: lane 0 carries x, the others zeros */
    const int n = p->n, L = RFFT_LANES;
    float *xl = hark_calloc((size_t)n * L * 3 + (size_t)(n + 2) * L, sizeof(float));
    HARK_ASSERT(xl != NULL);
    float *wl = xl + (size_t)n * L, *sl = wl + (size_t)2 * n * L;
    for (int j = 0; j < n; j++)
        xl[(size_t)j * L] = x[j];
    rfft_forward_lanes(p, xl, wl, sl);
    for (int k = 0; k < n + 2; k++)
        spec[k] = sl[(size_t)k * L];
    (void)work;
    hark_free(xl);
}
