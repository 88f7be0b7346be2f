/* conv1d.c — CPU references of the masked 1-D conv launchers (conv1d.h), plain loops in the order
 * the GPU kernels accumulate. Tests: tests/ops/test_conv1d.c */
#include "ops/conv1d.h"

#include "core/assert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int conv1d_len(int len, int k, int stride, int dil)
{
    int pad = (k / 2) * dil;
    int n = len + 2 * pad - dil * (k - 1) - 1;
    return n < 0 ? 0 : n / stride + 1;
}

void conv1d_pad_mask_ref(float *out, const float *in, const int *lens, int batch, int t, int c,
                         int ld_in, int ld_out, int pad_l, int pad_r)
{
    int tp = pad_l + t + pad_r;
    for (int b = 0; b < batch; b++) {
        int v = lens && lens[b] < t ? lens[b] : t;
        for (int r = 0; r < tp; r++) {
            float *o = out + ((size_t)b * tp + r) * ld_out;
            int s = r - pad_l;
            memset(o, 0, sizeof(float) * (size_t)ld_out);
            if (s >= 0 && s < v)
                memcpy(o, in + ((size_t)b * t + s) * ld_in, sizeof(float) * (size_t)c);
        }
    }
}

void conv1d_ref(float *acc, float beta, const float *xp, const float *w, int batch, int t_pad,
                int cin, int cout, int k, int stride, int dil)
{
    int span = dil * (k - 1) + 1;
    int t_out = t_pad < span ? 0 : (t_pad - span) / stride + 1;
    for (int b = 0; b < batch; b++)
        for (int s = 0; s < t_out; s++)
            for (int o = 0; o < cout; o++) {
                float sum = 0;
                for (int j = 0; j < k; j++) {
                    const float *x =
                        xp + ((size_t)b * t_pad + (size_t)s * stride + (size_t)j * dil) * cin;
                    const float *wr = w + ((size_t)o * k + j) * cin;
                    for (int i = 0; i < cin; i++)
                        sum += x[i] * wr[i];
                }
                float *a = acc + ((size_t)b * t_out + s) * cout + o;
                *a = beta == 0.0f ? sum : beta * *a + sum;
            }
}

void conv1d_depthwise_ref(float *out, const float *in, const float *w, const int *lens, int batch,
                          int t, int c, int k, int stride, int dil)
{
    int pad = (k / 2) * dil, t_out = conv1d_len(t, k, stride, dil);
    for (int b = 0; b < batch; b++) {
        int v = lens && lens[b] < t ? lens[b] : t;
        int v_out = conv1d_len(v, k, stride, dil);
        for (int s = 0; s < t_out; s++) {
            float *o = out + ((size_t)b * t_out + s) * c;
            for (int ch = 0; ch < c; ch++) {
                float sum = 0;
                for (int j = 0; j < k && s < v_out; j++) {
                    int r = s * stride + j * dil - pad;
                    if (r >= 0 && r < v)
                        sum += w[(size_t)j * c + ch] * in[((size_t)b * t + r) * c + ch];
                }
                o[ch] = sum;
            }
        }
    }
}

void conv1d_act_ref(float *y, const float *x, const float *b, int n, int c, conv1d_act_t act)
{
    for (int r = 0; r < n; r++)
        for (int i = 0; i < c; i++) {
            float v = x[(size_t)r * c + i] + (b ? b[i] : 0.0f);
            if (act == CONV1D_ACT_RELU)
                v = v > 0.0f ? v : 0.0f;
            else if (act == CONV1D_ACT_HARDTANH)
                v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
            y[(size_t)r * c + i] = v;
        }
}

void conv1d_pad_mask_act_ref(float *out, const float *in, const float *bias, float slope,
                             const int *lens, int batch, int t, int c, int ld_in, int ld_out,
                             int pad_l, int pad_r)
{
    int tp = pad_l + t + pad_r;
    for (int b = 0; b < batch; b++) {
        int v = lens && lens[b] < t ? lens[b] : t;
        for (int r = 0; r < tp; r++) {
            float *o = out + ((size_t)b * tp + r) * ld_out;
            int s = r - pad_l;
            memset(o, 0, sizeof(float) * (size_t)ld_out);
            if (s < 0 || s >= v)
                continue;
            const float *x = in + ((size_t)b * t + s) * ld_in;
            for (int i = 0; i < c; i++) {
                float y = x[i] + (bias ? bias[i] : 0.0f);
                o[i] = y > 0.0f ? y : y * slope;
            }
        }
    }
}

int conv1d_transpose_taps(int k, int stride)
{
    return (k + stride - 1) / stride;
}

int conv1d_transpose_pad_r(int pad, int stride)
{
    return (pad + stride - 1) / stride;
}

void conv1d_transpose_weights(float *w, const float *wt, int cin, int cout, int k, int stride,
                              int cin_p, int cout_p)
{
    int J = conv1d_transpose_taps(k, stride);
    memset(w, 0, sizeof(float) * (size_t)stride * cout_p * J * cin_p);
    /* output column r·cout_p + o, tap jj reads input row q - (J-1-jj): full position q·u + r
     * takes kernel tap r + (J-1-jj)·u */
    for (int r = 0; r < stride; r++)
        for (int o = 0; o < cout; o++)
            for (int jj = 0; jj < J; jj++) {
                int tap = r + (J - 1 - jj) * stride;
                if (tap >= k)
                    continue;
                float *dst = w + (((size_t)r * cout_p + o) * J + jj) * cin_p;
                for (int i = 0; i < cin; i++)
                    dst[i] = wt[((size_t)i * cout + o) * k + tap];
            }
}

void conv1d_transpose_ref(float *y, const float *x, const float *wt, const float *b, int batch,
                          int t, int cin, int cout, int k, int stride, int pad)
{
    int t_out = (t - 1) * stride - 2 * pad + k;
    for (int bb = 0; bb < batch; bb++) {
        float *yb = y + (size_t)bb * t_out * cout;
        for (int p = 0; p < t_out; p++)
            for (int o = 0; o < cout; o++)
                yb[(size_t)p * cout + o] = b ? b[o] : 0.0f;
        for (int s = 0; s < t; s++)
            for (int tap = 0; tap < k; tap++) {
                int p = s * stride + tap - pad;
                if (p < 0 || p >= t_out)
                    continue;
                const float *xr = x + ((size_t)bb * t + s) * cin;
                for (int o = 0; o < cout; o++) {
                    float sum = 0;
                    for (int i = 0; i < cin; i++)
                        sum += xr[i] * wt[((size_t)i * cout + o) * k + tap];
                    yb[(size_t)p * cout + o] += sum;
                }
            }
    }
}

void conv1d_crop_bias_ref(float *y, const float *x, const float *bias, int batch, int t, int c,
                          int ld, long long ld_b, int off)
{
    for (int b = 0; b < batch; b++)
        for (int s = 0; s < t; s++)
            for (int i = 0; i < c; i++)
                y[((size_t)b * t + s) * c + i] =
                    x[b * ld_b + (long long)(off + s) * ld + i] + (bias ? bias[i] : 0.0f);
}

void conv1d_sum_ref(float *y, const float *x, const float *b, int first, float div, int n, int c)
{
    for (int r = 0; r < n; r++)
        for (int i = 0; i < c; i++) {
            size_t q = (size_t)r * c + i;
            float v = (first ? 0.0f : y[q]) + (x[q] + (b ? b[i] : 0.0f));
            y[q] = div == 1.0f ? v : v / div;
        }
}

void conv1d_post_tanh_ref(float *audio, float *pre, const float *x, const float *w, float bias,
                          float slope, const int *lens, int batch, int t, int c, int k)
{
    for (int b = 0; b < batch; b++) {
        int len = lens && lens[b] < t ? lens[b] : t;
        for (int s = 0; s < t; s++) {
            size_t q = (size_t)b * t + s;
            float z = 0.0f;
            if (s < len) {
                float acc = 0.0f;
                for (int j = 0; j < k; j++) {
                    int r = s + j - k / 2;
                    if (r < 0 || r >= len)
                        continue;
                    const float *xr = x + ((size_t)b * t + r) * c;
                    for (int i = 0; i < c; i++)
                        acc += w[(size_t)j * c + i] * (xr[i] > 0.0f ? xr[i] : xr[i] * slope);
                }
                z = acc + bias;
            }
            if (pre)
                pre[q] = z;
            audio[q] = s < len ? tanhf(z) : 0.0f;
        }
    }
}

/* acc (c) = Σ_j w[:, j, :] · in[s + (j - k/2)·d] over the rows of in (len, c) (0 outside) */
static void res_conv_at(float *acc, const float *in, const float *w, int k, int d, int s, int len,
                        int c)
{
    for (int o = 0; o < c; o++) {
        float v = 0.0f;
        for (int j = 0; j < k; j++) {
            int r = s + (j - k / 2) * d;
            if (r < 0 || r >= len)
                continue;
            const float *wr = w + ((size_t)o * k + j) * c, *ir = in + (size_t)r * c;
            for (int i = 0; i < c; i++)
                v += wr[i] * ir[i];
        }
        acc[o] = v;
    }
}

void conv1d_res_ref(float *out, float *sum, const float *x, const float *w1, const float *b1,
                    int k1, int d1, const float *w2, const float *b2, int k2, float slope,
                    const int *lens, int batch, int t, int c, int first, float div,
                    const conv1d_res_ext_t *ext, void (*round16)(float *v, size_t n, void *user),
                    void *user)
{
    size_t n = (size_t)t * c;
    const conv1d_res_ext_t e0 = {0}, *e = ext ? ext : &e0;
    const long long ldb = e->x_ld_b > 0 ? e->x_ld_b : (long long)n;
    float *xv = malloc(sizeof(float) * (n ? n : 1)); /* the item's x as the kernel reads it */
    HARK_ASSERT(xv);
    float *a = malloc(sizeof(float) * (n ? n : 1)), *z = malloc(sizeof(float) * (n ? n : 1));
    float *acc = malloc(sizeof(float) * (size_t)(c ? c : 1));
    HARK_ASSERT(a && z && acc);
    for (int b = 0; b < batch; b++) {
        int len = lens && lens[b] < t ? lens[b] : t;
        const float *xb = xv;
        for (size_t i = 0; i < (size_t)len * c; i++)
            xv[i] = x[b * ldb + (long long)i] + (e->x_bias ? e->x_bias[i % (size_t)c] : 0.0f);
        for (size_t i = 0; i < n; i++)
            a[i] = i < (size_t)len * c ? (xb[i] > 0.0f ? xb[i] : xb[i] * slope) : 0.0f;
        if (round16)
            round16(a, n, user);
        const float *in = a;
        if (k2 > 0) {
            memset(z, 0, sizeof(float) * n);
            for (int u = 0; u < len; u++) {
                res_conv_at(acc, a, w1, k1, d1, u, len, c);
                for (int o = 0; o < c; o++) {
                    float v = b1[o] + acc[o];
                    z[(size_t)u * c + o] = v > 0.0f ? v : v * slope;
                }
            }
            if (round16)
                round16(z, n, user);
            in = z;
        }
        const float *bias = k2 > 0 ? b2 : b1;
        for (int s = 0; s < len; s++) {
            if (k2 > 0)
                res_conv_at(acc, in, w2, k2, 1, s, len, c);
            else
                res_conv_at(acc, in, w1, k1, d1, s, len, c);
            for (int o = 0; o < c; o++) {
                size_t q = ((size_t)b * t + s) * c + o;
                float y = xb[(size_t)s * c + o] + (bias[o] + acc[o]);
                if (out)
                    out[q] = y;
                if (sum) {
                    float v = (first ? 0.0f : sum[q]) + y;
                    v = div == 1.0f ? v : v / div;
                    if (!(e->next && e->no_sum_store))
                        sum[q] = v;
                    if (e->next) {
                        float *nx = (float *)e->next + b * e->next_ld_b;
                        float nv = v > 0.0f ? v : v * e->next_slope;
                        if (round16)
                            round16(&nv, 1, user);
                        nx[(long long)(e->next_off + s) * c + o] = nv;
                    }
                }
            }
        }
        if (out && e->out16 && round16) /* the 16-bit residual the next dilation reads */
            round16(out + (size_t)b * n, (size_t)len * c, user);
        if (sum && e->sum16 && round16 && !(e->next && e->no_sum_store)) /* a 16-bit MRF sum */
            round16(sum + (size_t)b * n, (size_t)len * c, user);
    }
    free(a);
    free(z);
    free(acc);
    free(xv);
}
