/* zipformer_ops.c — the CPU references of zipformer_ops.h (the Zipformer2 encoder's own ops). */
#include "ops/zipformer_ops.h"

#include "ops/ops.h"

#include <math.h>
#include <string.h>

void compact_pos_emb_ref(float *pe, int t, int lc, int e)
{
    const float cl = (float)sqrt((double)e), lcl = (float)log(sqrt((double)e));
    const float ls = (float)(e / (2.0 * M_PI));
    for (int r = 0; r < 2 * t - 1 + lc; r++) {
        float x = (float)(r - (t + lc - 1)), sg = x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f);
        float xc = cl * sg * (logf(fabsf(x) + cl) - lcl);
        float xa = atanf(xc / ls);
        float *o = pe + (size_t)r * e;
        for (int k = 0; 2 * k < e; k++) {
            float arg = xa * (float)(k + 1);
            o[2 * k] = cosf(arg);
            o[2 * k + 1] = sinf(arg);
        }
        o[e - 1] = 1.0f;
    }
}

void zf_rel_softmax_ref(float *sc, const float *bd, const int *lo, const int *hi, int t, int k,
                        int p)
{
    for (int i = 0; i < t; i++) {
        float *row = sc + (size_t)i * k;
        const float *b = bd + (size_t)i * p + (t - 1 - i);
        for (int j = 0; j < k; j++)
            row[j] += b[j];
    }
    softmax_masked_ref(sc, lo, hi, t, k, k);
}

void zf_chunk_conv_ref(float *out, float *tmp, const float *x, const float *left, const float *cw,
                       const float *cb, const float *kw, const float *kb, const float *scale, int t,
                       int d, int kk, int c, int act)
{
    const int lp = kk / 2;
    if (c <= 0 || c > t)
        c = t;
    depthwise_conv1d_ref(out, x, left, cw, cb, t, d, lp + 1, lp, t);
    for (int c0 = 0; c0 < t; c0 += c) {
        const int n = t - c0 < c ? t - c0 : c;
        depthwise_conv1d_ref(tmp, x + (size_t)c0 * d, NULL, kw, kb, n, d, kk, lp, n);
        for (int r = 0; r < n; r++) {
            float *o = out + (size_t)(c0 + r) * d;
            const float *y = tmp + (size_t)r * d;
            for (int ch = 0; ch < d; ch++) {
                const float *l = scale + (size_t)ch * kk, *rt = scale + (size_t)(d + ch) * kk;
                float s = 1.0f;
                if (c < kk) {
                    s += l[r] + rt[kk - c + r];
                } else {
                    if (r < kk)
                        s += l[r];
                    if (r >= c - kk)
                        s += rt[r - (c - kk)];
                }
                o[ch] += y[ch] * s;
            }
        }
    }
    activation_ref(out, out, (size_t)t * d, (ops_act_t)act);
}

void zf_downsample_ref(float *out, const float *in, int ld, const float *w, int te, int ds, int d)
{
    const int td = (te + ds - 1) / ds;
    for (int r = 0; r < td; r++) {
        float *o = out + (size_t)r * d;
        if (ds == 1) {
            memcpy(o, in + (size_t)r * ld, sizeof(float) * d);
            continue;
        }
        for (int c = 0; c < d; c++)
            o[c] = 0.0f;
        for (int k = 0; k < ds; k++) {
            const int src = r * ds + k < te ? r * ds + k : te - 1;
            const float *x = in + (size_t)src * ld;
            for (int c = 0; c < d; c++)
                o[c] += x[c] * w[k];
        }
    }
}

void zf_upsample_combine_ref(float *cur, int ldc, float *outs, const float *xs, const float *comb,
                             int te, int ds, int d)
{
    for (int r = 0; r < te; r++) {
        float *o = cur + (size_t)r * ldc;
        const float *u = xs + (size_t)(r / ds) * d;
        if (ds == 1)
            memcpy(o, u, sizeof(float) * d);
        else
            for (int c = 0; c < d; c++)
                o[c] = o[c] + (u[c] - o[c]) * comb[c];
        if (outs)
            memcpy(outs + (size_t)r * d, o, sizeof(float) * d);
    }
}

void zf_bypass_ref(float *x, const float *orig, const float *scale, int n, int d)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < d; j++) {
            size_t i = (size_t)r * d + j;
            x[i] = orig[i] + (x[i] - orig[i]) * scale[j];
        }
}

void zf_gate_ref(float *o, const float *a, int lda, const float *b, int ldb, int n, int w,
                 int tanh_b)
{
    for (int r = 0; r < n; r++)
        for (int j = 0; j < w; j++) {
            float g = b[(size_t)r * ldb + j];
            o[(size_t)r * w + j] = a[(size_t)r * lda + j] * (tanh_b ? tanhf(g) : g);
        }
}

void zf_convnext_dw_ref(float *out, const float *ext, const float *w, const float *b, int t, int w2,
                        int c, int kk)
{
    const int pad = kk / 2;
    const size_t row = (size_t)w2 * c;
    for (int i = 0; i < t; i++)
        for (int q = 0; q < w2; q++) {
            float *o = out + (size_t)i * row + (size_t)q * c;
            for (int ch = 0; ch < c; ch++)
                o[ch] = b[ch];
            for (int a = 0; a < kk; a++) {
                const float *in_row = ext + (size_t)(i + a) * row;
                for (int j = 0; j < kk; j++) {
                    int qq = q + j - pad;
                    if (qq < 0 || qq >= w2)
                        continue;
                    const float *in = in_row + (size_t)qq * c;
                    const float *wk = w + (size_t)a * kk + j;
                    for (int ch = 0; ch < c; ch++)
                        o[ch] += wk[(size_t)ch * kk * kk] * in[ch];
                }
            }
        }
}

void zf_convnext_out_ref(float *out, const float *y, const float *res, int t, int w2, int c)
{
    for (int i = 0; i < t; i++)
        for (int q = 0; q < w2; q++)
            for (int ch = 0; ch < c; ch++) {
                size_t s = ((size_t)i * w2 + q) * c + ch;
                out[((size_t)i * c + ch) * w2 + q] = y[s] + res[s];
            }
}
