/* Tests for src/ops/ops_cpu.c: every op against a naive double-precision loop on awkward sizes
 * (1, 7, 33, 257, blocks that do not divide), with guard floats after each output buffer.
 * Tolerances are stated per op; float32 GEMMs are checked relative to Σ|a·b| of each dot product.
 */
#include "test.h"

#include "core/alloc.h"
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 16
#define SENTINEL (-7777.25f)

/* n floats followed by GUARD sentinel floats. */
static float *galloc(size_t n)
{
    float *p = hark_malloc((n + GUARD) * sizeof *p);
    for (size_t i = 0; i < n + GUARD; i++)
        p[i] = SENTINEL;
    return p;
}

static int guard_ok(const float *p, size_t n)
{
    for (size_t i = n; i < n + GUARD; i++)
        if (p[i] != SENTINEL)
            return 0;
    return 1;
}

static float *rand_buf(size_t n, unsigned *seed, float scale)
{
    float *p = hark_malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

/* |got - ref| <= rel·mag + abs for every element; reports the first failure. */
static int close_to(const float *got, const double *ref, const double *mag, size_t n, double rel,
                    double abs_tol, size_t *bad)
{
    for (size_t i = 0; i < n; i++) {
        double m = mag ? mag[i] : fabs(ref[i]);
        if (!(fabs(got[i] - ref[i]) <= rel * m + abs_tol)) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

TEST(ops_linear_awkward_sizes)
{
    static const int sz[][3] = {{1, 1, 1}, {7, 33, 257}, {33, 257, 7}, {257, 80, 33}, {1, 7, 1}};
    unsigned seed = 11;
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
        int n = sz[c][0], in = sz[c][1], out = sz[c][2];
        for (int with_b = 0; with_b < 2; with_b++) {
            float *x = rand_buf((size_t)n * in, &seed, 1.0f);
            float *w = rand_buf((size_t)out * in, &seed, 0.5f);
            float *b = rand_buf(out, &seed, 0.3f);
            float *y = galloc((size_t)n * out);
            double *ref = hark_malloc(sizeof(double) * n * out),
                   *mag = hark_malloc(sizeof(double) * n * out);
            linear_ref(y, x, w, with_b ? b : NULL, n, in, out);
            for (int i = 0; i < n; i++)
                for (int o = 0; o < out; o++) {
                    double s = with_b ? b[o] : 0.0, m = with_b ? fabs(b[o]) : 0.0;
                    for (int j = 0; j < in; j++) {
                        s += (double)x[i * in + j] * w[o * in + j];
                        m += fabs((double)x[i * in + j] * w[o * in + j]);
                    }
                    ref[i * out + o] = s;
                    mag[i * out + o] = m;
                }
            size_t bad = 0;
            /* float32 dot products: error <= ~in·eps·Σ|x·w|; 1e-5 holds for in <= 257 */
            CHECKF(close_to(y, ref, mag, (size_t)n * out, 1e-5, 1e-7, &bad),
                   "linear n=%d in=%d out=%d bias=%d at %zu: %g vs %g", n, in, out, with_b, bad,
                   y[bad], ref[bad]);
            CHECK(guard_ok(y, (size_t)n * out));
            hark_free(x), hark_free(w), hark_free(b), hark_free(y), hark_free(ref), hark_free(mag);
        }
    }
}

TEST(ops_matmul_strides_trans_beta)
{
    unsigned seed = 5;
    int m = 7, n = 33, k = 17, lda = 20, ldb_t = 19, ldb_n = 40, ldc = 35;
    float *a = rand_buf((size_t)m * lda, &seed, 1.0f);
    float *bt = rand_buf((size_t)n * ldb_t, &seed, 1.0f); /* (n, k) with ld 19 */
    float *bn = rand_buf((size_t)k * ldb_n, &seed, 1.0f); /* (k, n) with ld 40 */
    for (int tb = 0; tb < 2; tb++) {
        float *c = galloc((size_t)m * ldc);
        for (int i = 0; i < m * ldc; i++)
            c[i] = 0.25f * (float)(i % 7);
        double *ref = hark_malloc(sizeof(double) * m * ldc),
               *mag = hark_malloc(sizeof(double) * m * ldc);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < ldc; j++) {
                double cv = c[i * ldc + j];
                if (j >= n) { /* outside the n columns: untouched */
                    ref[i * ldc + j] = cv;
                    mag[i * ldc + j] = 0;
                    continue;
                }
                double s = 0, mg = 0;
                for (int q = 0; q < k; q++) {
                    double bv = tb ? bt[j * ldb_t + q] : bn[q * ldb_n + j];
                    s += (double)a[i * lda + q] * bv;
                    mg += fabs((double)a[i * lda + q] * bv);
                }
                ref[i * ldc + j] = 0.5 * s - 2.0 * cv;
                mag[i * ldc + j] = 0.5 * mg + 2.0 * fabs(cv);
            }
        matmul_ref(c, a, tb ? bt : bn, m, n, k, lda, tb ? ldb_t : ldb_n, ldc, tb, 0.5f, -2.0f);
        size_t bad = 0;
        CHECKF(close_to(c, ref, mag, (size_t)m * ldc, 1e-6, 1e-7, &bad), "trans=%d at %zu", tb,
               bad);
        CHECK(guard_ok(c, (size_t)m * ldc));
        hark_free(c), hark_free(ref), hark_free(mag);
    }
    hark_free(a), hark_free(bt), hark_free(bn);
}

TEST(ops_layer_norm_and_batch_norm)
{
    static const int sz[][2] = {{1, 1}, {7, 33}, {33, 257}, {3, 256}};
    unsigned seed = 7;
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
        int n = sz[c][0], d = sz[c][1];
        float *x = rand_buf((size_t)n * d, &seed, 3.0f);
        for (int i = 0; i < n * d; i++)
            x[i] += 5.0f; /* an offset, so a one-pass variance would lose digits */
        float *g = rand_buf(d, &seed, 1.0f), *b = rand_buf(d, &seed, 1.0f);
        float *rm = rand_buf(d, &seed, 1.0f), *rv = rand_buf(d, &seed, 0.5f);
        for (int i = 0; i < d; i++)
            rv[i] += 1.0f;
        float *y = galloc((size_t)n * d), *y2 = galloc((size_t)n * d);
        double *ref = hark_malloc(sizeof(double) * n * d),
               *ref2 = hark_malloc(sizeof(double) * n * d);
        for (int r = 0; r < n; r++) {
            double mean = 0, var = 0;
            for (int i = 0; i < d; i++)
                mean += x[r * d + i];
            mean /= d;
            for (int i = 0; i < d; i++)
                var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
            var /= d;
            for (int i = 0; i < d; i++) {
                ref[r * d + i] = (x[r * d + i] - mean) / sqrt(var + 1e-5) * g[i] + b[i];
                ref2[r * d + i] = (x[r * d + i] - rm[i]) / sqrt(rv[i] + 1e-3) * g[i] + b[i];
            }
        }
        layer_norm_ref(y, x, g, b, n, d, 1e-5f);
        batch_norm_ref(y2, x, g, b, rm, rv, n, d, 1e-3f);
        size_t bad = 0;
        /* outputs are O(1..10): absolute 1e-5 plus relative 1e-6 */
        CHECKF(close_to(y, ref, NULL, (size_t)n * d, 1e-6, 1e-5, &bad), "layer_norm %dx%d at %zu",
               n, d, bad);
        CHECKF(close_to(y2, ref2, NULL, (size_t)n * d, 1e-6, 1e-5, &bad), "batch_norm %dx%d at %zu",
               n, d, bad);
        CHECK(guard_ok(y, (size_t)n * d) && guard_ok(y2, (size_t)n * d));
        layer_norm_ref(x, x, NULL, NULL, n, d, 1e-5f); /* in place, no affine */
        for (int r = 0; r < n; r++)
            for (int i = 0; i < d; i++) {
                double want = (ref[r * d + i] - b[i]) / g[i];
                if (fabs(g[i]) > 0.05f)
                    CHECKF(fabs(x[r * d + i] - want) <= 1e-4 * (1 + fabs(want)), "in-place ln");
            }
        hark_free(x), hark_free(g), hark_free(b), hark_free(rm), hark_free(rv);
        hark_free(y), hark_free(y2), hark_free(ref), hark_free(ref2);
    }
}

TEST(ops_activations_and_glu)
{
    int n = 257;
    unsigned seed = 3;
    float *x = rand_buf(n, &seed, 12.0f);
    x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f, x[3] = -1e-30f;
    for (int a = OPS_ACT_NONE; a <= OPS_ACT_SWOOSHR; a++) {
        float *y = galloc(n);
        double *ref = hark_malloc(sizeof(double) * n);
        activation_ref(y, x, n, (ops_act_t)a);
        for (int i = 0; i < n; i++) {
            double v = x[i];
            ref[i] = a == OPS_ACT_RELU      ? (v > 0 ? v : 0)
                     : a == OPS_ACT_SWISH   ? v / (1 + exp(-v))
                     : a == OPS_ACT_GELU    ? 0.5 * v * (1 + erf(v / sqrt(2.0)))
                     : a == OPS_ACT_DSWISH  ? v / (1 + exp(1 - v))
                     : a == OPS_ACT_SWOOSHL ? log1p(exp(v - 4)) - 0.08 * v - 0.035
                     : a == OPS_ACT_SWOOSHR ? log1p(exp(v - 1)) - 0.08 * v - 0.313261687
                                            : v;
        }
        size_t bad = 0;
        /* expf/erff are within a few ulp: relative 2e-6, absolute 1e-7 */
        CHECKF(close_to(y, ref, NULL, n, 2e-6, 1e-7, &bad), "act %d at x=%g: %g vs %g", a, x[bad],
               y[bad], ref[bad]);
        CHECK(guard_ok(y, n));
        hark_free(y), hark_free(ref);
    }
    /* glu over (7, 2·33) */
    int rows = 7, c = 33;
    float *g = rand_buf((size_t)rows * 2 * c, &seed, 6.0f);
    float *y = galloc((size_t)rows * c);
    double *ref = hark_malloc(sizeof(double) * rows * c);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < c; i++)
            ref[r * c + i] = g[r * 2 * c + i] / (1 + exp(-(double)g[r * 2 * c + c + i]));
    glu_ref(y, g, rows, c);
    size_t bad = 0;
    CHECKF(close_to(y, ref, NULL, (size_t)rows * c, 2e-6, 1e-7, &bad), "glu at %zu", bad);
    CHECK(guard_ok(y, (size_t)rows * c));
    hark_free(g), hark_free(y), hark_free(ref), hark_free(x);
}

TEST(ops_softmax_masked_and_log_softmax)
{
    unsigned seed = 9;
    int n = 7, m = 33, ld = 40;
    float *x = galloc((size_t)n * ld);
    for (int i = 0; i < n * ld; i++)
        x[i] = 8.0f * test_randf(&seed);
    int lo[7] = {0, 5, 0, 32, 10, 3, 0}, hi[7] = {33, 6, 0, 33, 20, 2, 1}; /* rows 2, 5 empty */
    float *orig = hark_malloc(sizeof(float) * n * ld);
    memcpy(orig, x, sizeof(float) * n * ld);
    softmax_masked_ref(x, lo, hi, n, m, ld);
    for (int r = 0; r < n; r++) {
        double mx = -INFINITY, sum = 0;
        for (int j = lo[r]; j < hi[r]; j++)
            mx = fmax(mx, orig[r * ld + j]);
        for (int j = lo[r]; j < hi[r]; j++)
            sum += exp(orig[r * ld + j] - mx);
        for (int j = 0; j < m; j++) {
            double want = (j >= lo[r] && j < hi[r]) ? exp(orig[r * ld + j] - mx) / sum : 0.0;
            CHECKF(fabs(x[r * ld + j] - want) <= 1e-6 * want + 1e-8, "softmax r=%d j=%d %g vs %g",
                   r, j, x[r * ld + j], want);
        }
        for (int j = m; j < ld; j++) /* beyond m: untouched */
            CHECK(x[r * ld + j] == orig[r * ld + j]);
    }
    CHECK(guard_ok(x, (size_t)n * ld));
    hark_free(orig), hark_free(x);

    static const int sz[][2] = {{1, 1}, {7, 5002}, {3, 33}};
    for (size_t c = 0; c < 3; c++) {
        int rn = sz[c][0], rm = sz[c][1];
        float *a = rand_buf((size_t)rn * rm, &seed, 20.0f), *y = galloc((size_t)rn * rm);
        double *ref = hark_malloc(sizeof(double) * rn * rm);
        for (int r = 0; r < rn; r++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < rm; j++)
                mx = fmax(mx, a[r * rm + j]);
            for (int j = 0; j < rm; j++)
                sum += exp(a[r * rm + j] - mx);
            for (int j = 0; j < rm; j++)
                ref[r * rm + j] = a[r * rm + j] - mx - log(sum);
        }
        log_softmax_ref(y, a, rn, rm);
        size_t bad = 0;
        /* values up to ~50 in magnitude: relative 1e-6, absolute 2e-6 */
        CHECKF(close_to(y, ref, NULL, (size_t)rn * rm, 1e-6, 2e-6, &bad), "log_softmax at %zu",
               bad);
        CHECK(guard_ok(y, (size_t)rn * rm));
        hark_free(a), hark_free(y), hark_free(ref);
    }
}

TEST(ops_depthwise_conv1d_causal_symmetric_valid)
{
    static const int ts[] = {1, 7, 33}, cs[] = {1, 7, 257}, ks[] = {1, 3, 15, 31};
    unsigned seed = 21;
    for (int a = 0; a < 3; a++)
        for (int bi = 0; bi < 3; bi++)
            for (int ki = 0; ki < 4; ki++)
                for (int mode = 0; mode < 3; mode++) { /* 0 causal+left, 1 symmetric, 2 causal 0 */
                    int tl = ts[a], c = cs[bi], k = ks[ki];
                    int pad = mode == 1 ? (k - 1) / 2 : k - 1;
                    int valid = mode == 1 ? (tl * 2 + 2) / 3 : tl; /* symmetric: a padded tail */
                    float *in = rand_buf((size_t)tl * c, &seed, 1.0f);
                    float *left = rand_buf((size_t)(k - 1) * c + 1, &seed, 1.0f);
                    float *w = rand_buf((size_t)c * k, &seed, 0.5f), *b = rand_buf(c, &seed, 0.2f);
                    float *out = galloc((size_t)tl * c);
                    const float *lp = mode == 0 ? left : NULL;
                    depthwise_conv1d_ref(out, in, lp, w, b, tl, c, k, pad, valid);
                    for (int ti = 0; ti < tl; ti++)
                        for (int ch = 0; ch < c; ch++) {
                            double s = b[ch], mg = fabs(b[ch]);
                            for (int j = 0; j < k; j++) {
                                int src = ti + j - pad;
                                double xv = 0;
                                if (src >= 0 && src < valid)
                                    xv = in[src * c + ch];
                                else if (src < 0 && lp)
                                    xv = lp[(pad + src) * c + ch];
                                s += w[ch * k + j] * xv;
                                mg += fabs(w[ch * k + j] * xv);
                            }
                            CHECKF(fabs(out[ti * c + ch] - s) <= 1e-6 * mg + 1e-7,
                                   "dwconv t=%d c=%d k=%d mode=%d at (%d,%d)", tl, c, k, mode, ti,
                                   ch);
                        }
                    CHECK(guard_ok(out, (size_t)tl * c));
                    hark_free(in), hark_free(left), hark_free(w), hark_free(b), hark_free(out);
                }
}

TEST(ops_conv2d_im2col)
{
    /* cin, h, w, cout, kh, kw, stride: the WeNet stacks plus a case with several row blocks */
    static const int sz[][7] = {{1, 33, 80, 7, 3, 3, 2}, {7, 16, 39, 33, 3, 3, 2},
                                {3, 17, 19, 5, 5, 5, 3}, {2, 401, 7, 3, 3, 3, 2},
                                {1, 3, 3, 1, 3, 3, 2},   {4, 9, 9, 257, 3, 3, 1}};
    unsigned seed = 33;
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
        int cin = sz[c][0], h = sz[c][1], wi = sz[c][2], cout = sz[c][3], kh = sz[c][4],
            kw = sz[c][5], st = sz[c][6];
        int ho = (h - kh) / st + 1, wo = (wi - kw) / st + 1;
        float *in = rand_buf((size_t)h * cin * wi, &seed, 1.0f);
        float *w = rand_buf((size_t)cout * cin * kh * kw, &seed, 0.5f),
              *b = rand_buf(cout, &seed, 0.3f);
        size_t ncol = conv2d_col_floats(cin, cout, kh, kw, wo);
        float *col = galloc(ncol), *out = galloc((size_t)ho * cout * wo);
        conv2d_ref(out, col, in, w, b, cin, h, wi, cout, kh, kw, st);
        for (int ti = 0; ti < ho; ti++)
            for (int co = 0; co < cout; co++)
                for (int f = 0; f < wo; f++) {
                    double s = b[co], mg = fabs(b[co]);
                    for (int ci = 0; ci < cin; ci++)
                        for (int i = 0; i < kh; i++)
                            for (int j = 0; j < kw; j++) {
                                double p = (double)w[((co * cin + ci) * kh + i) * kw + j] *
                                           in[((ti * st + i) * cin + ci) * wi + f * st + j];
                                s += p, mg += fabs(p);
                            }
                    float got = out[(ti * cout + co) * wo + f];
                    CHECKF(fabs(got - s) <= 1e-5 * mg + 1e-7,
                           "conv2d case %zu at (%d,%d,%d): %g vs %g", c, ti, co, f, got, s);
                }
        CHECK(guard_ok(out, (size_t)ho * cout * wo));
        CHECK(guard_ok(col, ncol));
        hark_free(in), hark_free(w), hark_free(b), hark_free(col), hark_free(out);
    }
}

TEST(ops_pos_enc_table)
{
    int n = 5000, d = 256;
    float *pe = galloc((size_t)n * d);
    pos_enc_table_ref(pe, n, d);
    CHECK(guard_ok(pe, (size_t)n * d));
    double worst_exact = 0, worst_steps = 0;
    float step = (float)(-(log(10000.0) / d));
    for (int p = 0; p < n; p++)
        for (int i = 0; 2 * i < d; i++) {
            double div = exp(2.0 * i * -(log(10000.0) / d));
            double e_s = sin(p * div), e_c = cos(p * div);
            /* the same float32 steps as torch, then sin/cos in double */
            float divf = (float)exp((double)((float)(2 * i) * step));
            float argf = (float)p * divf;
            double s_s = sin((double)argf), s_c = cos((double)argf);
            worst_exact = fmax(worst_exact, fmax(fabs(pe[p * d + 2 * i] - e_s),
                                                 fabs(pe[p * d + 2 * i + 1] - e_c)));
            worst_steps = fmax(worst_steps, fmax(fabs(pe[p * d + 2 * i] - s_s),
                                                 fabs(pe[p * d + 2 * i + 1] - s_c)));
        }
    /* float32 argument rounding at p ~ 5000 costs up to ~5e-4 against exact math; against the
     * float32 steps only the expf ulp (times p) and the sinf/cosf rounding remain */
    CHECKF(worst_exact < 1e-3, "pe vs exact %g", worst_exact);
    CHECKF(worst_steps < 1e-6, "pe vs float steps %g", worst_steps);
    CHECK(pe[0] == 0.0f && pe[1] == 1.0f);
    hark_free(pe);
}

/* Naive double attention, the WeNet rel_selfattn formula when p/bu/bv are given. */
static void attention_naive(double *ctx, const float *q, const float *k, const float *v,
                            const float *p, const float *bu, const float *bv, const int *lo,
                            const int *hi, int tq, int tk, int nh, int dk, double scale)
{
    int d = nh * dk;
    double *s = malloc(sizeof(double) * (tk ? tk : 1));
    for (int h = 0; h < nh; h++)
        for (int r = 0; r < tq; r++) {
            int a = lo ? lo[r] : 0, e = hi ? hi[r] : tk;
            double mx = -INFINITY, sum = 0;
            for (int j = a; j < e; j++) {
                double acc = 0;
                for (int i = 0; i < dk; i++) {
                    double qq = q[r * d + h * dk + i];
                    acc += (qq + (bu ? bu[h * dk + i] : 0)) * k[j * d + h * dk + i];
                    if (p)
                        acc += (qq + (bv ? bv[h * dk + i] : 0)) * p[j * d + h * dk + i];
                }
                s[j] = acc * scale;
                mx = fmax(mx, s[j]);
            }
            for (int j = a; j < e; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int i = 0; i < dk; i++) {
                double acc = 0;
                for (int j = a; j < e; j++)
                    acc += s[j] / sum * v[j * d + h * dk + i];
                ctx[r * d + h * dk + i] = acc;
            }
        }
    free(s);
}

TEST(ops_attention_rel_and_plain)
{
    static const int sz[][3] = {{1, 1, 1}, {7, 2, 5}, {70, 3, 16}, {129, 4, 64}, {33, 1, 7}};
    unsigned seed = 77;
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++)
        for (int variant = 0; variant < 3;
             variant++) { /* 0 rel+masks, 1 plain full, 2 plain+chunk */
            int t_len = sz[c][0], nh = sz[c][1], dk = sz[c][2], d = nh * dk;
            float *q = rand_buf((size_t)t_len * d, &seed, 1.0f),
                  *k = rand_buf((size_t)t_len * d, &seed, 1.0f);
            float *v = rand_buf((size_t)t_len * d, &seed, 1.0f),
                  *p = rand_buf((size_t)t_len * d, &seed, 1.0f);
            float *bu = rand_buf(d, &seed, 0.3f), *bv = rand_buf(d, &seed, 0.3f);
            int *lo = malloc(sizeof(int) * t_len), *hi = malloc(sizeof(int) * t_len);
            int valid = (t_len * 3 + 3) / 4;
            for (int r = 0; r < t_len; r++) {
                if (variant == 0) { /* padding mask: keys [0, valid) */
                    lo[r] = 0, hi[r] = valid;
                } else { /* chunk mask, chunk 4, one left chunk */
                    lo[r] = (r / 4 - 1) * 4 > 0 ? (r / 4 - 1) * 4 : 0;
                    hi[r] = (r / 4 + 1) * 4 < t_len ? (r / 4 + 1) * 4 : t_len;
                }
            }
            int use_mask = variant != 1, rel = variant == 0;
            float *scratch = galloc(attention_scratch_floats(t_len, dk));
            float *ctx = galloc((size_t)t_len * d);
            double *ref = hark_malloc(sizeof(double) * t_len * d);
            double scale = 1.0 / sqrt((double)dk);
            attention_ref(ctx, scratch, q, k, v, rel ? p : NULL, rel ? bu : NULL, rel ? bv : NULL,
                          use_mask ? lo : NULL, use_mask ? hi : NULL, t_len, t_len, nh, dk,
                          (float)scale);
            attention_naive(ref, q, k, v, rel ? p : NULL, rel ? bu : NULL, rel ? bv : NULL,
                            use_mask ? lo : NULL, use_mask ? hi : NULL, t_len, t_len, nh, dk,
                            scale);
            size_t bad = 0;
            /* scores up to ~dk^0.5·few, softmax in float: absolute 2e-5 on outputs of O(1) */
            CHECKF(close_to(ctx, ref, NULL, (size_t)t_len * d, 1e-5, 2e-5, &bad),
                   "attention T=%d H=%d dk=%d variant=%d at %zu: %g vs %g", t_len, nh, dk, variant,
                   bad, ctx[bad], ref[bad]);
            CHECK(guard_ok(ctx, (size_t)t_len * d));
            CHECK(guard_ok(scratch, attention_scratch_floats(t_len, dk)));
            hark_free(q), hark_free(k), hark_free(v), hark_free(p), hark_free(bu), hark_free(bv);
            free(lo), free(hi);
            hark_free(scratch), hark_free(ctx), hark_free(ref);
        }
}
