/* ops_cpu.c — CPU float32 reference ops (GEMMs through OpenBLAS, the rest plain loops).
 * Tests: tests/ops/test_ops_cpu.c */
#include "ops/ops.h"

#include "core/assert.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void ops_set_threads(int n)
{
    if (n > 0)
        openblas_set_num_threads(n);
}

void matmul_ref(float *c, const float *a, const float *b, int m, int n, int k, int lda, int ldb,
                int ldc, int trans_b, float alpha, float beta)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) { /* sgemm leaves c alone for k == 0; make it the mathematical beta·c */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                lda, b, ldb, beta, c, ldc);
}

void linear_ref(float *y, const float *x, const float *w, const float *b, int n, int in, int out)
{
    if (n <= 0 || out <= 0)
        return;
    if (b) {
        for (int i = 0; i < n; i++)
            memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
    }
    matmul_ref(y, x, w, n, out, in, in, in, out, 1, 1.0f, b ? 1.0f : 0.0f);
}

void axpy_ref(float *y, const float *x, float alpha, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

void layer_norm_ref(float *y, const float *x, const float *g, const float *b, int n, int d,
                    float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double sum = 0.0, sq = 0.0;
        for (int i = 0; i < d; i++)
            sum += xr[i];
        double mean = sum / d;
        for (int i = 0; i < d; i++) {
            double c = xr[i] - mean;
            sq += c * c;
        }
        float rstd = (float)(1.0 / sqrt(sq / d + eps));
        float fmean = (float)mean;
        for (int i = 0; i < d; i++) {
            float v = (xr[i] - fmean) * rstd;
            yr[i] = v * (g ? g[i] : 1.0f) + (b ? b[i] : 0.0f);
        }
    }
}

void batch_norm_ref(float *y, const float *x, const float *g, const float *b, const float *rm,
                    const float *rv, int n, int c, float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * c;
        float *yr = y + (size_t)r * c;
        for (int i = 0; i < c; i++) {
            float inv = 1.0f / sqrtf(rv[i] + eps);
            yr[i] = (xr[i] - rm[i]) * inv * (g ? g[i] : 1.0f) + (b ? b[i] : 0.0f);
        }
    }
}

void relu_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void swish_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-x[i]));
}

void gelu_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

void double_swish_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + expf(1.0f - x[i]));
}

void swoosh_ref(float *y, const float *x, size_t n, float shift, float offset)
{
    for (size_t i = 0; i < n; i++) {
        float xo = x[i] - shift, l = log1pf(expf(xo));
        if (isinf(l))
            l = xo;
        y[i] = l - 0.08f * x[i] - offset;
    }
}

void activation_ref(float *y, const float *x, size_t n, ops_act_t act)
{
    switch (act) {
    case OPS_ACT_RELU:
        relu_ref(y, x, n);
        return;
    case OPS_ACT_SWISH:
        swish_ref(y, x, n);
        return;
    case OPS_ACT_GELU:
        gelu_ref(y, x, n);
        return;
    case OPS_ACT_DSWISH:
        double_swish_ref(y, x, n);
        return;
    case OPS_ACT_SWOOSHL:
        swoosh_ref(y, x, n, OPS_SWOOSHL_SHIFT, OPS_SWOOSHL_OFFSET);
        return;
    case OPS_ACT_SWOOSHR:
        swoosh_ref(y, x, n, OPS_SWOOSHR_SHIFT, OPS_SWOOSHR_OFFSET);
        return;
    case OPS_ACT_NONE:
        break;
    }
    if (y != x)
        memmove(y, x, n * sizeof *y);
}

void glu_ref(float *y, const float *x, int n, int c)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * 2 * c;
        float *yr = y + (size_t)r * c;
        for (int i = 0; i < c; i++)
            yr[i] = xr[i] / (1.0f + expf(-xr[c + i]));
    }
}

size_t rel_attention_scratch_floats(int t, int dk)
{
    return (size_t)2 * t * dk + (size_t)t * t + (size_t)t * (2 * t - 1);
}

void rel_attention_ref(float *ctx, int ldc, float *scratch, const float *qkv, int ld,
                       const float *p, int ldp, const float *bu, const float *bv, const int *lo,
                       const int *hi, int t, int n_heads, int dk, float scale)
{
    const int P = 2 * t - 1, hd = n_heads * dk;
    float *qu = scratch, *qv = qu + (size_t)t * dk, *ac = qv + (size_t)t * dk,
          *bd = ac + (size_t)t * t;
    for (int h = 0; h < n_heads; h++) {
        for (int i = 0; i < t; i++) {
            const float *q = qkv + (size_t)i * ld + (size_t)h * dk;
            for (int j = 0; j < dk; j++) {
                float qs = q[j] * scale;
                qu[(size_t)i * dk + j] = qs + (bu ? bu[(size_t)h * dk + j] : 0.0f);
                qv[(size_t)i * dk + j] = qs + (bv ? bv[(size_t)h * dk + j] : 0.0f);
            }
        }
        const float *k = qkv + hd + (size_t)h * dk, *v = qkv + 2 * hd + (size_t)h * dk;
        matmul_ref(ac, qu, k, t, t, dk, dk, ld, t, 1, 1.0f, 0.0f);
        matmul_ref(bd, qv, p + (size_t)h * dk, t, P, dk, dk, ldp, P, 1, 1.0f, 0.0f);
        for (int i = 0; i < t; i++) { /* rel_shift: relative position i - j */
            float *a = ac + (size_t)i * t;
            const float *b = bd + (size_t)i * P + (t - 1 - i);
            for (int j = 0; j < t; j++)
                a[j] += b[j];
        }
        softmax_masked_ref(ac, lo, hi, t, t, t);
        matmul_ref(ctx + (size_t)h * dk, ac, v, t, dk, t, t, ld, ldc, 0, 1.0f, 0.0f);
    }
}

void bias_norm_ref(float *x, int n, int d, int ld, const float *b, float scale)
{
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * ld;
        double s = 0;
        for (int j = 0; j < d; j++) {
            float v = xr[j] - b[j];
            s += (double)v * v;
        }
        float sc = scale / sqrtf((float)(s / d));
        for (int j = 0; j < d; j++)
            xr[j] *= sc;
    }
}

void basic_norm_ref(float *y, const float *x, int n, int d, float eps)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        float *yr = y + (size_t)r * d;
        double s = 0;
        for (int j = 0; j < d; j++)
            s += (double)xr[j] * xr[j];
        float sc = 1.0f / sqrtf((float)(s / d) + eps);
        for (int j = 0; j < d; j++)
            yr[j] = xr[j] * sc;
    }
}

void softmax_masked_ref(float *x, const int *lo, const int *hi, int n, int m, int ld)
{
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * ld;
        int a = lo ? lo[r] : 0, e = hi ? hi[r] : m;
        if (a < 0)
            a = 0;
        if (e > m)
            e = m;
        if (a >= e) {
            memset(xr, 0, (size_t)m * sizeof *xr);
            continue;
        }
        float mx = xr[a];
        for (int j = a + 1; j < e; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        double sum = 0.0;
        for (int j = a; j < e; j++) {
            xr[j] = expf(xr[j] - mx);
            sum += xr[j];
        }
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < a; j++)
            xr[j] = 0.0f;
        for (int j = a; j < e; j++)
            xr[j] *= inv;
        for (int j = e; j < m; j++)
            xr[j] = 0.0f;
    }
}

void log_softmax_ref(float *y, const float *x, int n, int m)
{
    if (m <= 0)
        return;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * m;
        float *yr = y + (size_t)r * m;
        float mx = xr[0];
        for (int j = 1; j < m; j++)
            mx = xr[j] > mx ? xr[j] : mx;
        double sum = exp((double)(xr[0] - mx)); /* >= 1: the max is among them */
        for (int j = 1; j < m; j++)
            sum += exp((double)(xr[j] - mx));
        float lse = (float)log(sum);
        for (int j = 0; j < m; j++)
            yr[j] = (xr[j] - mx) - lse;
    }
}

int beam_topk_ref(float *val, int *idx, const float *x, long long ldx, const float *bias,
                  const float *hyp, int n, int m, int k)
{
    const long long tot = (long long)n * m;
    const int nk = tot < k ? (int)tot : k;
    int got = 0;
    if (nk <= 0)
        return 0;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * (size_t)ldx;
        float mx = xr[0] + (bias ? bias[0] : 0.0f);
        for (int j = 1; j < m; j++) {
            float v = xr[j] + (bias ? bias[j] : 0.0f);
            mx = v > mx ? v : mx;
        }
        double sum = 0.0;
        for (int j = 0; j < m; j++)
            sum += exp((double)((xr[j] + (bias ? bias[j] : 0.0f)) - mx));
        const float lse = (float)log(sum);
        for (int j = 0; j < m; j++) {
            float v = (((xr[j] + (bias ? bias[j] : 0.0f)) - mx) - lse) + hyp[r];
            if (got == nk && !(v > val[got - 1]))
                continue;
            int pos = got < nk ? got++ : nk - 1;
            while (pos > 0 && v > val[pos - 1]) { /* strictly greater: earlier indices stay first */
                val[pos] = val[pos - 1];
                idx[pos] = idx[pos - 1];
                pos--;
            }
            val[pos] = v;
            idx[pos] = r * m + j;
        }
    }
    return nk;
}

void depthwise_conv1d_ref(float *out, const float *in, const float *left, const float *w,
                          const float *b, int t_len, int c, int k, int pad_left, int valid)
{
    HARK_ASSERT(pad_left >= 0 && pad_left < k);
    for (int t = 0; t < t_len; t++) {
        float *o = out + (size_t)t * c;
        for (int ch = 0; ch < c; ch++)
            o[ch] = b ? b[ch] : 0.0f;
        for (int j = 0; j < k; j++) {
            int s = t + j - pad_left;
            const float *src;
            if (s >= 0 && s < valid)
                src = in + (size_t)s * c;
            else if (s < 0 && left)
                src = left + (size_t)(pad_left + s) * c;
            else
                continue; /* zero padding */
            for (int ch = 0; ch < c; ch++)
                o[ch] += w[(size_t)ch * k + j] * src[ch];
        }
    }
}

/* Output rows per im2col block: about 512 GEMM columns. */
static int conv2d_block_rows(int w_out)
{
    int r = 512 / (w_out > 0 ? w_out : 1);
    return r > 0 ? r : 1;
}

size_t conv2d_col_floats(int cin, int cout, int kh, int kw, int w_out)
{
    size_t cols = (size_t)conv2d_block_rows(w_out) * (size_t)w_out;
    return ((size_t)cin * kh * kw + (size_t)cout) * cols;
}

void conv2d_ref(float *out, float *col, const float *in, const float *w, const float *b, int cin,
                int h, int w_in, int cout, int kh, int kw, int stride)
{
    if (h < kh || w_in < kw)
        return;
    int h_out = (h - kh) / stride + 1, w_out = (w_in - kw) / stride + 1;
    int kk = cin * kh * kw, rows = conv2d_block_rows(w_out);
    for (int r0 = 0; r0 < h_out; r0 += rows) {
        int nb = h_out - r0 < rows ? h_out - r0 : rows;
        int ncol = nb * w_out;
        float *tmp = col + (size_t)kk * ncol; /* (cout, ncol) */
        /* col (kk, ncol): row (ci, i, j), column (r, wo) */
        for (int ci = 0; ci < cin; ci++)
            for (int i = 0; i < kh; i++)
                for (int j = 0; j < kw; j++) {
                    float *dst = col + (size_t)((ci * kh + i) * kw + j) * ncol;
                    for (int r = 0; r < nb; r++) {
                        const float *src =
                            in + ((size_t)((r0 + r) * stride + i) * cin + ci) * w_in + j;
                        for (int wo = 0; wo < w_out; wo++)
                            dst[r * w_out + wo] = src[(size_t)wo * stride];
                    }
                }
        matmul_ref(tmp, w, col, cout, ncol, kk, kk, ncol, ncol, 0, 1.0f, 0.0f);
        for (int r = 0; r < nb; r++)
            for (int co = 0; co < cout; co++) {
                float *o = out + ((size_t)(r0 + r) * cout + co) * w_out;
                const float *s = tmp + (size_t)co * ncol + (size_t)r * w_out;
                float bias = b ? b[co] : 0.0f;
                for (int wo = 0; wo < w_out; wo++)
                    o[wo] = s[wo] + bias;
            }
    }
}

void pos_enc_table_ref(float *pe, int n, int d)
{
    float step = (float)(-(log(10000.0) / d));
    for (int i = 0; 2 * i < d; i++) {
        float div = expf((float)(2 * i) * step);
        for (int p = 0; p < n; p++) {
            float arg = (float)p * div;
            pe[(size_t)p * d + 2 * i] = sinf(arg);
            if (2 * i + 1 < d)
                pe[(size_t)p * d + 2 * i + 1] = cosf(arg);
        }
    }
}

enum { ATT_QBLOCK = 64 };

size_t attention_scratch_floats(int tk, int dk)
{
    return (size_t)ATT_QBLOCK * ((size_t)(tk > 0 ? tk : 1) + 2 * (size_t)dk);
}

void attention_ref(float *ctx, float *scratch, const float *q, const float *k, const float *v,
                   const float *p, const float *bu, const float *bv, const int *lo, const int *hi,
                   int tq, int tk, int n_heads, int dk, float scale)
{
    int d = n_heads * dk;
    float *s = scratch;                            /* (QB, tk) */
    float *qu = scratch + (size_t)ATT_QBLOCK * tk; /* (QB, dk) */
    float *qv = qu + (size_t)ATT_QBLOCK * dk;      /* (QB, dk) */
    for (int h = 0; h < n_heads; h++) {
        for (int r0 = 0; r0 < tq; r0 += ATT_QBLOCK) {
            int nb = tq - r0 < ATT_QBLOCK ? tq - r0 : ATT_QBLOCK;
            const float *qh = q + (size_t)r0 * d + (size_t)h * dk;
            const float *qa = qh;
            int lda = d;
            if (bu) {
                for (int r = 0; r < nb; r++)
                    for (int i = 0; i < dk; i++)
                        qu[r * dk + i] = qh[(size_t)r * d + i] + bu[h * dk + i];
                qa = qu;
                lda = dk;
            }
            matmul_ref(s, qa, k + (size_t)h * dk, nb, tk, dk, lda, d, tk, 1, scale, 0.0f);
            if (p) {
                const float *qb = qh;
                int ldb = d;
                if (bv) {
                    for (int r = 0; r < nb; r++)
                        for (int i = 0; i < dk; i++)
                            qv[r * dk + i] = qh[(size_t)r * d + i] + bv[h * dk + i];
                    qb = qv;
                    ldb = dk;
                }
                matmul_ref(s, qb, p + (size_t)h * dk, nb, tk, dk, ldb, d, tk, 1, scale, 1.0f);
            }
            softmax_masked_ref(s, lo ? lo + r0 : NULL, hi ? hi + r0 : NULL, nb, tk, tk);
            matmul_ref(ctx + (size_t)r0 * d + (size_t)h * dk, s, v + (size_t)h * dk, nb, dk, tk, tk,
                       d, d, 0, 1.0f, 0.0f);
        }
    }
}

/* ---- chunk streaming over a cache pool --------------------------------------------------------
 */

void chunk_embed_ref(float *x, const float *a, int t_pad, const float *bias, float alpha,
                     const float *pe, const chunk_meta_t *mt, int d)
{
    for (int b = 0; b < mt->n; b++)
        for (int r = mt->row0[b]; r < mt->row0[b + 1]; r++) {
            int t = r - mt->row0[b];
            const float *src = a + ((size_t)b * t_pad + t) * d;
            for (int c = 0; c < d; c++) {
                float v = alpha * (src[c] + (bias ? bias[c] : 0.0f));
                x[(size_t)r * d + c] = pe ? v + pe[(size_t)(mt->pos0[b] + t) * d + c] : v;
            }
        }
}

void chunk_kv_store_ref(float *kc, float *vc, long long slot_stride, int cap, const float *k,
                        const float *v, int ld, const float *bk, const float *bv,
                        const chunk_meta_t *mt, int d)
{
    for (int b = 0; b < mt->n; b++)
        for (int r = mt->row0[b]; r < mt->row0[b + 1]; r++) {
            int p = mt->pos0[b] + r - mt->row0[b];
            size_t dst = (size_t)mt->slot[b] * (size_t)slot_stride + (size_t)(p % cap) * d;
            for (int c = 0; c < d; c++) {
                kc[dst + c] = k[(size_t)r * ld + c] + (bk ? bk[c] : 0.0f);
                vc[dst + c] = v[(size_t)r * ld + c] + (bv ? bv[c] : 0.0f);
            }
        }
}

size_t chunk_attention_scratch_floats(int max_keys, int d, int dk)
{
    return 4 * (size_t)max_keys * d + attention_scratch_floats(max_keys, dk);
}

void chunk_attention_ref(float *ctx, float *scratch, const float *q, int ldq, const float *bq,
                         const float *kc, const float *vc, long long slot_stride, int cap,
                         const float *pt, const float *bu, const float *bvp, const chunk_meta_t *mt,
                         int max_keys, int heads, int dk, float scale)
{
    int d = heads * dk;
    float *k = scratch, *v = k + (size_t)max_keys * d, *p = v + (size_t)max_keys * d;
    float *qb = p + (size_t)max_keys * d, *att = qb + (size_t)max_keys * d;
    for (int b = 0; b < mt->n; b++) {
        int r0 = mt->row0[b], rows = mt->row0[b + 1] - r0, nk = mt->ctx[b] + rows;
        int p0 = mt->pos0[b] - mt->ctx[b];
        HARK_ASSERT(nk <= max_keys && nk <= cap && p0 >= 0);
        if (rows <= 0)
            continue;
        const float *ks = kc + (size_t)mt->slot[b] * (size_t)slot_stride;
        const float *vs = vc + (size_t)mt->slot[b] * (size_t)slot_stride;
        for (int j = 0; j < nk; j++) {
            size_t src = (size_t)((p0 + j) % cap) * d;
            memcpy(k + (size_t)j * d, ks + src, (size_t)d * sizeof(float));
            memcpy(v + (size_t)j * d, vs + src, (size_t)d * sizeof(float));
            if (pt)
                memcpy(p + (size_t)j * d, pt + (size_t)(p0 + j) * d, (size_t)d * sizeof(float));
        }
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < d; c++)
                qb[(size_t)r * d + c] = q[(size_t)(r0 + r) * ldq + c] + (bq ? bq[c] : 0.0f);
        attention_ref(ctx + (size_t)r0 * d, att, qb, k, v, pt ? p : NULL, pt ? bu : NULL,
                      pt ? bvp : NULL, NULL, NULL, rows, nk, heads, dk, scale);
    }
}

void chunk_dwconv_ref(float *out, const float *in, float *cache, long long slot_stride,
                      const float *left_init, const float *w, const float *bias,
                      const chunk_meta_t *mt, int c, int k, int pad_left)
{
    int lc = k - 1;
    for (int b = 0; b < mt->n; b++) {
        int r0 = mt->row0[b], n = mt->row0[b + 1] - r0;
        if (n <= 0)
            continue;
        float *cs = cache ? cache + (size_t)mt->slot[b] * (size_t)slot_stride : NULL;
        const float *left = cs && mt->fresh[b] ? left_init : cs;
        depthwise_conv1d_ref(out + (size_t)r0 * c, in + (size_t)r0 * c, left, w, bias, n, c, k,
                             pad_left, n);
        if (!cs || lc <= 0)
            continue;
        /* the last lc frames of [left | in] */
        for (int j = 0; j < lc; j++) {
            int src = n + j;
            const float *row = src < lc ? left + (size_t)src * c : in + (size_t)(r0 + src - lc) * c;
            memmove(cs + (size_t)j * c, row, (size_t)c * sizeof(float));
        }
    }
}
