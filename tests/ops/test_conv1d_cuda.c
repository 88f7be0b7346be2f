/* GPU tests for src/ops/conv1d.cu: every launcher against its CPU reference (conv1d.c) on random
 * data with awkward sizes (odd channel counts, time lengths that are no multiple of a tile, a
 * batch of different lengths, one of them 0 or 1), in FP32, FP16 and BF16, with poisoned outputs
 * (NaN bytes: an unwritten element fails) and guard elements after every output (they must stay
 * poisoned). The reference is fed the same (16-bit rounded) inputs. Tolerances (relative RMS):
 * the copies exact; the convs, whose outputs are FP32 and whose products of 16-bit operands are
 * exact in FP32, 1e-5 in every type (only the order of the FP32 sums differs); outputs rounded to
 * 16 bits 1e-2 (FP16), 8e-2 (BF16: 8x FP16's unit roundoff), 1e-5 FP32. */
#include "test.h"

#ifdef HARK_CUDA
#include "hark.h"
#include "ops/conv1d.h"
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64

static const ops_dtype_t ALL[3] = {OPS_F32, OPS_F16, OPS_BF16};

static const char *dt_name(ops_dtype_t t)
{
    return t == OPS_F16 ? "fp16" : t == OPS_BF16 ? "bf16" : "fp32";
}

static double tol_out(ops_dtype_t t)
{
    return t == OPS_F32 ? 1e-5 : t == OPS_F16 ? 1e-2 : 8e-2;
}

/* n elements + GUARD of dtype t, every byte 0xff (a NaN in all three dtypes) */
static void *dalloc(size_t n, ops_dtype_t t)
{
    void *p = NULL;
    size_t bytes = (n + GUARD) * ops_dtype_size(t);
    if (cudaMalloc(&p, bytes) != cudaSuccess)
        return NULL;
    cudaMemset(p, 0xff, bytes);
    return p;
}

static void *dup_to(const float *h, size_t n, ops_dtype_t t)
{
    void *d = dalloc(n, t);
    float *tmp = NULL;
    if (!d || cudaMalloc((void **)&tmp, (n ? n : 1) * sizeof(float)) != cudaSuccess)
        return NULL;
    cudaMemcpy(tmp, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cuda_cast(d, t, tmp, OPS_F32, n, NULL, NULL);
    cudaDeviceSynchronize();
    cudaFree(tmp);
    return d;
}

/* h (n floats) = device d (n elements of t); 0 on success */
static int dup_from(float *h, const void *d, size_t n, ops_dtype_t t)
{
    float *tmp = NULL;
    if (cudaMalloc((void **)&tmp, (n ? n : 1) * sizeof(float)) != cudaSuccess)
        return -1;
    int rc = cuda_cast(tmp, OPS_F32, d, t, n, NULL, NULL);
    if (cudaDeviceSynchronize() != cudaSuccess)
        rc = -1;
    cudaMemcpy(h, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
    return rc;
}

/* the GUARD elements after n of d are still poisoned (all bytes 0xff) */
static int guard_ok(const void *d, size_t n, ops_dtype_t t)
{
    size_t es = ops_dtype_size(t);
    unsigned char g[GUARD * 4];
    cudaMemcpy(g, (const char *)d + n * es, GUARD * es, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < GUARD * es; i++)
        if (g[i] != 0xff)
            return 0;
    return 1;
}

/* h rounded through dtype t (the values a 16-bit tensor holds) */
static void round_to(float *h, size_t n, ops_dtype_t t)
{
    void *d = dup_to(h, n, t);
    dup_from(h, d, n, t);
    cudaFree(d);
}

static float *rnd(size_t n, unsigned *seed, float scale)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* ---- pad + mask ----------------------------------------------------------------------------- */

static void pad_mask_case(test_ctx_t *t, int c, int ld_out)
{
    const int batch = 3, tl = 37, ld_in = 16, pl = 5, pr = 4;
    int lens[3] = {37, 20, 0}, *d_lens = NULL;
    unsigned seed = 11;
    size_t n_in = (size_t)batch * tl * ld_in, tp = (size_t)(pl + tl + pr),
           n_out = (size_t)batch * tp * ld_out;
    float *in = rnd(n_in, &seed, 3.0f), *ref = malloc(n_out * 4), *got = malloc(n_out * 4);
    cudaMalloc((void **)&d_lens, sizeof lens);
    cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++) {
            ops_dtype_t it = ALL[a], ot = ALL[b];
            float *hin = malloc(n_in * 4);
            memcpy(hin, in, n_in * 4);
            round_to(hin, n_in, it);
            void *din = dup_to(hin, n_in, it), *dout = dalloc(n_out, ot);
            hark_err_t err = {0};
            CHECK_OK(cuda_conv1d_pad_mask(dout, ot, din, it, d_lens, batch, tl, c, ld_in, ld_out,
                                          pl, pr, NULL, &err));
            CHECK_OK(dup_from(got, dout, n_out, ot));
            conv1d_pad_mask_ref(ref, hin, d_lens ? lens : NULL, batch, tl, c, ld_in, ld_out, pl,
                                pr);
            round_to(ref, n_out, ot);
            CHECKF(!memcmp(got, ref, n_out * 4), "%s -> %s: the copy differs", dt_name(it),
                   dt_name(ot));
            CHECKF(guard_ok(dout, n_out, ot), "%s -> %s: wrote past the end", dt_name(it),
                   dt_name(ot));
            /* in place: a plain mask */
            if (it == ot) {
                CHECK_OK(cuda_conv1d_pad_mask(din, it, din, it, d_lens, batch, tl, c, ld_in, ld_in,
                                              0, 0, NULL, &err));
                float *g2 = malloc(n_in * 4), *r2 = malloc(n_in * 4);
                CHECK_OK(dup_from(g2, din, n_in, it));
                conv1d_pad_mask_ref(r2, hin, lens, batch, tl, c, ld_in, ld_in, 0, 0);
                CHECKF(!memcmp(g2, r2, n_in * 4), "%s in place: differs", dt_name(it));
                free(g2);
                free(r2);
            }
            CHECK_EQ_INT(cuda_conv1d_pad_mask(din, it, din, it, d_lens, batch, tl, c, ld_in, ld_in,
                                              1, 0, NULL, &err),
                         HARK_ERR_INVALID_ARG);
            cudaFree(din);
            cudaFree(dout);
            free(hin);
        }
    cudaFree(d_lens);
    free(in);
    free(ref);
    free(got);
}

/* c 13: one element per thread; c 12 with every row stride a multiple of 4: four per thread */
GPU_TEST(cuda_conv1d_pad_mask_matches_ref)
{
    pad_mask_case(t, 13, 24);
    if (!test_failed(t))
        pad_mask_case(t, 12, 20);
}

/* ---- the conv as GEMMs ---------------------------------------------------------------------- */

typedef struct {
    int batch, t_pad, cin, cout, k, stride, dil;
} conv_case_t;

GPU_TEST(cuda_conv1d_matches_ref)
{
    ops_cuda_t *g = NULL;
    hark_err_t err = {0};
    CHECK_OK(ops_cuda_create(NULL, &g, &err));
    /* implicit GEMM (16-bit, dil 1, cin % 8 == 0; cin 24 and 40: taps not whole 32-wide k
     * tiles), per-tap GEMMs (cin 13, dilation 2), strides 1 and 2, k 1 (a pointwise conv) */
    const conv_case_t cases[] = {
        {3, 55, 24, 40, 11, 1, 1},
        {2, 38, 13, 19, 5, 2, 1},
        {2, 61, 16, 24, 7, 1, 2},
        {1, 29, 64, 136, 29, 1, 1},
        {4, 33, 40, 8, 1, 1, 1},
        {3, 70, 32, 96, 11, 2, 1},
        /* dilated, t_pad a multiple of dil: the implicit GEMM over a (t_pad / dil x dil) image */
        {3, 66, 24, 40, 3, 1, 3},
        {2, 60, 16, 24, 7, 1, 5},
        {3, 72, 32, 8, 5, 1, 12},
    };
    unsigned seed = 5;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < 3; d++)
            for (int beta1 = 0; beta1 < 2; beta1++) {
                const conv_case_t *c = &cases[ci];
                ops_dtype_t dt = ALL[d];
                int span = c->dil * (c->k - 1) + 1, t_out = (c->t_pad - span) / c->stride + 1;
                size_t nx = (size_t)c->batch * c->t_pad * c->cin,
                       nw = (size_t)c->cout * c->k * c->cin,
                       no = (size_t)c->batch * t_out * c->cout;
                float *x = rnd(nx, &seed, 1.0f), *w = rnd(nw, &seed, 0.3f);
                float *acc0 = rnd(no, &seed, 1.0f), *ref = malloc(no * 4), *got = malloc(no * 4);
                round_to(x, nx, dt);
                round_to(w, nw, dt);
                void *dx = dup_to(x, nx, dt), *dw = dup_to(w, nw, dt);
                float *dacc = beta1 ? dup_to(acc0, no, OPS_F32) : dalloc(no, OPS_F32);
                memcpy(ref, acc0, no * 4);
                conv1d_ref(ref, beta1 ? 1.0f : 0.0f, x, w, c->batch, c->t_pad, c->cin, c->cout,
                           c->k, c->stride, c->dil);
                CHECK_OK(cuda_conv1d(dacc, beta1 ? 1.0f : 0.0f, dx, dw, dt, c->batch, c->t_pad,
                                     c->cin, c->cout, c->k, c->stride, c->dil, g, &err));
                CHECK_OK(dup_from(got, dacc, no, OPS_F32));
                double e = test_rel_rms(got, ref, no);
                printf("conv1d %s b%d t%d %d->%d k%d s%d d%d beta %d: rel rms %.2g\n", dt_name(dt),
                       c->batch, c->t_pad, c->cin, c->cout, c->k, c->stride, c->dil, beta1, e);
                CHECKF(all_finite(got, no) && e <= 1e-5, "%s case %zu beta %d: rel rms %.3g",
                       dt_name(dt), ci, beta1, e);
                CHECKF(guard_ok(dacc, no, OPS_F32), "%s case %zu: wrote past the end", dt_name(dt),
                       ci);
                /* the fused 16-bit path of jasper_gpu.c: bias + ReLU in hconv2d's epilogue */
                if (dt != OPS_F32 && c->dil == 1 && c->cin % 8 == 0 && !beta1) {
                    float *b = rnd((size_t)c->cout, &seed, 0.5f), *r2 = malloc(no * 4),
                          *g2 = malloc(no * 4);
                    float *db = dup_to(b, (size_t)c->cout, OPS_F32);
                    void *dy = dalloc(no, dt);
                    cuda_epi_t ep = {.mode = CUDA_EPI_F16,
                                     .act = CUDA_ACT_RELU,
                                     .bias = db,
                                     .out = dy,
                                     .ldo = c->cout,
                                     .alpha = 1.0f,
                                     .dt = dt};
                    CHECK_OK(cuda_hconv2d(&ep, dx, dw, c->batch, c->cin, c->t_pad, 1, c->cout, c->k,
                                          1, c->stride, g, &err));
                    CHECK_OK(dup_from(g2, dy, no, dt));
                    conv1d_act_ref(r2, ref, b, (int)(no / c->cout), c->cout, CONV1D_ACT_RELU);
                    double e2 = test_rel_rms(g2, r2, no);
                    CHECKF(all_finite(g2, no) && e2 <= tol_out(dt),
                           "%s case %zu fused ReLU: rel rms %.3g", dt_name(dt), ci, e2);
                    CHECK(guard_ok(dy, no, dt));
                    cudaFree(db);
                    cudaFree(dy);
                    free(b);
                    free(r2);
                    free(g2);
                }
                cudaFree(dx);
                cudaFree(dw);
                cudaFree(dacc);
                free(x);
                free(w);
                free(acc0);
                free(ref);
                free(got);
            }
    ops_cuda_destroy(g);
}

/* ---- depthwise ------------------------------------------------------------------------------ */

GPU_TEST(cuda_conv1d_depthwise_matches_ref)
{
    typedef struct {
        int t, c, k, stride, dil;
    } dw_case_t;
    const dw_case_t cases[] = {
        /* register tiles of 128 frames (stride 1 or 2, dilation 1 or 2): one tile and a partial
         * one, taps not a multiple of 8, QuartzNet's k 75 over three tiles and a channel block of
         * 8, k 87 dilation 2 (tiles of 64: 128 frames do not fit 48 KiB); the shared-memory tiles
         * of 64 frames (dilation 3, stride 2 with dilation 2); past 48 KiB of staged rows (k 201,
         * dilation 2) the direct kernel */
        {41, 20, 5, 1, 1},   {141, 20, 13, 2, 1}, {70, 37, 9, 1, 2},
        {300, 40, 75, 1, 1}, {133, 64, 87, 1, 2}, {1, 8, 3, 1, 1},
        {95, 33, 11, 1, 3},  {60, 16, 5, 2, 2},   {50, 24, 201, 1, 2},
    };
    const int batch = 3;
    int lens[3], *d_lens = NULL;
    cudaMalloc((void **)&d_lens, sizeof lens);
    unsigned seed = 9;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < 3; d++) {
            const dw_case_t *c = &cases[ci];
            ops_dtype_t dt = ALL[d];
            lens[0] = c->t;
            lens[1] = c->t / 2 + 1;
            lens[2] = 1;
            cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
            int t_out = conv1d_len(c->t, c->k, c->stride, c->dil);
            size_t nx = (size_t)batch * c->t * c->c, no = (size_t)batch * t_out * c->c;
            float *x = rnd(nx, &seed, 1.0f), *w = rnd((size_t)c->k * c->c, &seed, 0.5f);
            float *ref = malloc(no * 4), *got = malloc(no * 4);
            round_to(x, nx, dt);
            /* the third pass writes rows ldo = c + 5 apart: columns past c stay untouched */
            const int ldo = c->c + 5;
            const size_t ns = (size_t)batch * t_out * ldo;
            void *dx = dup_to(x, nx, dt), *dy = dalloc(no, dt), *ds = dalloc(ns, dt);
            float *dw = dup_to(w, (size_t)c->k * c->c, OPS_F32), *gs = malloc(ns * 4);
            hark_err_t err = {0};
            for (int pass = 0; pass < 3; pass++) {
                const int masked = pass > 0, strided = pass == 2;
                cudaMemset(dy, 0xff, (no + GUARD) * ops_dtype_size(dt));
                cudaMemset(ds, 0xff, (ns + GUARD) * ops_dtype_size(dt));
                CHECK_OK(cuda_conv1d_depthwise(
                    strided ? ds : dy, dx, dt, dw, masked ? d_lens : NULL, batch, c->t, c->c, c->k,
                    c->stride, c->dil, strided ? ldo : c->c, NULL, &err));
                CHECK_OK(dup_from(got, dy, no, dt));
                if (strided) {
                    CHECK_OK(dup_from(gs, ds, ns, dt));
                    int untouched = 1;
                    for (size_t r = 0; r < (size_t)batch * t_out; r++)
                        for (int j = 0; j < ldo; j++)
                            if (j < c->c)
                                got[r * c->c + j] = gs[r * ldo + j];
                            else
                                untouched &= isnan(gs[r * ldo + j]); /* still 0xff.. */
                    CHECK(untouched);
                }
                conv1d_depthwise_ref(ref, x, w, masked ? lens : NULL, batch, c->t, c->c, c->k,
                                     c->stride, c->dil);
                double e = test_rel_rms(got, ref, no);
                printf("depthwise %s t%d c%d k%d s%d d%d masked %d ldo %d: rel rms %.2g\n",
                       dt_name(dt), c->t, c->c, c->k, c->stride, c->dil, masked,
                       strided ? ldo : c->c, e);
                CHECKF(all_finite(got, no) && e <= tol_out(dt), "%s case %zu: rel rms %.3g",
                       dt_name(dt), ci, e);
                /* masked rows exactly 0 */
                for (int b = 0; masked && b < batch; b++)
                    for (int s = conv1d_len(lens[b], c->k, c->stride, c->dil); s < t_out; s++)
                        for (int ch = 0; ch < c->c; ch++)
                            CHECK(got[((size_t)b * t_out + s) * c->c + ch] == 0.0f);
                CHECK(guard_ok(strided ? ds : dy, strided ? ns : no, dt));
            }
            cudaFree(dx);
            cudaFree(dy);
            cudaFree(ds);
            cudaFree(dw);
            free(gs);
            free(x);
            free(w);
            free(ref);
            free(got);
        }
    cudaFree(d_lens);
}

/* ---- bias + activation ---------------------------------------------------------------------- */

GPU_TEST(cuda_conv1d_act_matches_ref)
{
    const int n = 37, c = 13;
    unsigned seed = 3;
    float *x = rnd((size_t)n * c, &seed, 2.0f), *b = rnd((size_t)c, &seed, 0.5f);
    float *ref = malloc((size_t)n * c * 4), *got = malloc((size_t)n * c * 4);
    float *dx = dup_to(x, (size_t)n * c, OPS_F32), *db = dup_to(b, (size_t)c, OPS_F32);
    for (int d = 0; d < 3; d++)
        for (int a = 0; a < 3; a++) {
            ops_dtype_t dt = ALL[d];
            void *dy = dalloc((size_t)n * c, dt);
            hark_err_t err = {0};
            CHECK_OK(
                cuda_conv1d_act(dy, dt, dx, a == 1 ? NULL : db, n, c, (conv1d_act_t)a, NULL, &err));
            CHECK_OK(dup_from(got, dy, (size_t)n * c, dt));
            conv1d_act_ref(ref, x, a == 1 ? NULL : b, n, c, (conv1d_act_t)a);
            round_to(ref, (size_t)n * c, dt); /* one rounding of the same float value */
            CHECKF(!memcmp(got, ref, (size_t)n * c * 4), "%s act %d differs", dt_name(dt), a);
            CHECK(guard_ok(dy, (size_t)n * c, dt));
            cudaFree(dy);
        }
    hark_err_t err = {0};
    CHECK_EQ_INT(cuda_conv1d_act(dx, OPS_F32, dx, NULL, n, c, (conv1d_act_t)7, NULL, &err),
                 HARK_ERR_INVALID_ARG);
    cudaFree(dx);
    cudaFree(db);
    free(x);
    free(b);
    free(ref);
    free(got);
}

/* ---- HiFi-GAN's pieces ---------------------------------------------------------------------- */

static void pad_mask_act_case(test_ctx_t *t, int c, int ld_in, int ld_out)
{
    const int batch = 3, tl = 37, pl = 6, pr = 3;
    int lens[3] = {37, 20, 1}, *d_lens = NULL;
    unsigned seed = 21;
    size_t n_in = (size_t)batch * tl * ld_in, n_out = (size_t)batch * (pl + tl + pr) * ld_out;
    float *in = rnd(n_in, &seed, 3.0f), *b = rnd((size_t)c, &seed, 1.0f);
    float *ref = malloc(n_out * 4), *got = malloc(n_out * 4);
    float *db = dup_to(b, (size_t)c, OPS_F32);
    cudaMalloc((void **)&d_lens, sizeof lens);
    cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
    for (int a = 0; a < 3; a++)
        for (int o = 0; o < 3; o++)
            for (int withb = 0; withb < 2; withb++) {
                ops_dtype_t it = ALL[a], ot = ALL[o];
                float *hin = malloc(n_in * 4);
                memcpy(hin, in, n_in * 4);
                round_to(hin, n_in, it);
                void *din = dup_to(hin, n_in, it), *dout = dalloc(n_out, ot);
                hark_err_t err = {0};
                CHECK_OK(cuda_conv1d_pad_mask_act(dout, ot, din, it, withb ? db : NULL, 0.1f,
                                                  d_lens, batch, tl, c, ld_in, ld_out, pl, pr, NULL,
                                                  &err));
                CHECK_OK(dup_from(got, dout, n_out, ot));
                conv1d_pad_mask_act_ref(ref, hin, withb ? b : NULL, 0.1f, lens, batch, tl, c, ld_in,
                                        ld_out, pl, pr);
                round_to(ref, n_out, ot);
                CHECKF(!memcmp(got, ref, n_out * 4), "%s -> %s (bias %d): differs", dt_name(it),
                       dt_name(ot), withb);
                CHECK(guard_ok(dout, n_out, ot));
                cudaFree(din);
                cudaFree(dout);
                free(hin);
            }
    cudaFree(d_lens);
    cudaFree(db);
    free(in);
    free(b);
    free(ref);
    free(got);
}

/* one element per thread (c 13), and four (c 8, strides multiples of 4) */
GPU_TEST(cuda_conv1d_pad_mask_act_matches_ref)
{
    pad_mask_act_case(t, 13, 13, 16);
    if (!test_failed(t))
        pad_mask_act_case(t, 8, 12, 16);
}

/* the whole transposed conv as the GPU runs it (pad_mask_act, cuda_conv1d with the polyphase
 * weights, crop_bias) against the direct scatter, per item at its own length; batch 3 */
GPU_TEST(cuda_conv1d_transpose_polyphase_matches_ref)
{
    const int cases[][5] = {
        {13, 11, 16, 8, 4}, {24, 12, 16, 8, 4}, {9, 3, 7, 3, 2}, {40, 20, 4, 2, 1}};
    ops_cuda_t *g = NULL;
    hark_err_t err = {0};
    CHECK_OK(ops_cuda_create(NULL, &g, &err));
    int lens[3] = {29, 11, 1}, *d_lens = NULL;
    cudaMalloc((void **)&d_lens, sizeof lens);
    cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
    unsigned seed = 9;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int d = 0; d < 3; d++) {
            ops_dtype_t dt = ALL[d];
            int cin = cases[ci][0], cout = cases[ci][1], k = cases[ci][2], u = cases[ci][3],
                pad = cases[ci][4];
            const int batch = 3, tl = 29;
            int cin_p = (cin + 7) & ~7, cout_p = (cout + 7) & ~7, J = conv1d_transpose_taps(k, u),
                R = conv1d_transpose_pad_r(pad, u), nq = tl + R, tp = J - 1 + tl + R;
            int t_out = (tl - 1) * u - 2 * pad + k;
            size_t nx = (size_t)batch * tl * cin, nwt = (size_t)cin * cout * k,
                   nw = (size_t)u * cout_p * J * cin_p, ny = (size_t)batch * tl * u * cout_p;
            float *x = rnd(nx, &seed, 1.0f), *wt = rnd(nwt, &seed, 0.3f),
                  *b = rnd((size_t)cout_p, &seed, 0.5f);
            round_to(x, nx, dt);
            round_to(wt, nwt, dt);
            float *w = malloc(nw * 4), *ref = calloc((size_t)batch * t_out * cout, 4),
                  *got = malloc(ny * 4);
            conv1d_transpose_weights(w, wt, cin, cout, k, u, cin_p, cout_p);
            for (int bb = 0; bb < batch; bb++)
                conv1d_transpose_ref(ref + (size_t)bb * t_out * cout, x + (size_t)bb * tl * cin, wt,
                                     b, 1, lens[bb], cin, cout, k, u, pad);
            float *dx = dup_to(x, nx, OPS_F32), *db = dup_to(b, (size_t)cout_p, OPS_F32);
            void *dw = dup_to(w, nw, dt), *dxp = dalloc((size_t)batch * tp * cin_p, dt);
            float *dyp = dalloc((size_t)batch * nq * u * cout_p, OPS_F32),
                  *dy = dalloc(ny, OPS_F32);
            CHECK_OK(cuda_conv1d_pad_mask_act(dxp, dt, dx, OPS_F32, NULL, 1.0f, d_lens, batch, tl,
                                              cin, cin, cin_p, J - 1, R, NULL, &err));
            CHECK_OK(cuda_conv1d(dyp, 0.0f, dxp, dw, dt, batch, tp, cin_p, u * cout_p, J, 1, 1, g,
                                 &err));
            CHECK_OK(cuda_conv1d_crop_bias(dy, OPS_F32, dyp, db, batch, tl * u, cout_p, cout_p,
                                           (long long)nq * u * cout_p, pad, NULL, &err));
            CHECK_OK(dup_from(got, dy, ny, OPS_F32));
            CHECK(guard_ok(dy, ny, OPS_F32));
            double num = 0, den = 0;
            for (int bb = 0; bb < batch; bb++)
                for (int p = 0; p < lens[bb] * u; p++)
                    for (int o = 0; o < cout; o++) {
                        double r = ref[((size_t)bb * t_out + p) * cout + o],
                               v = got[((size_t)bb * tl * u + p) * cout_p + o];
                        num += (v - r) * (v - r);
                        den += r * r;
                    }
            double rel = sqrt(num / (den > 0 ? den : 1));
            cudaFree(dx);
            cudaFree(db);
            cudaFree(dw);
            cudaFree(dxp);
            cudaFree(dyp);
            cudaFree(dy);
            free(x);
            free(wt);
            free(b);
            free(w);
            free(ref);
            free(got);
            CHECKF(rel <= 1e-5, "case %zu %s: rel RMS %g", ci, dt_name(dt), rel);
        }
    cudaFree(d_lens);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_conv1d_sum_and_post_tanh_match_ref)
{
    const int n = 41, c = 13, batch = 3, tl = 19, ld = 8;
    unsigned seed = 4;
    float *y0 = rnd((size_t)n * c, &seed, 1.0f), *x = rnd((size_t)n * c, &seed, 1.0f),
          *b = rnd((size_t)c, &seed, 1.0f);
    float *ref = malloc((size_t)n * c * 4), *got = malloc((size_t)n * c * 4);
    float *dx = dup_to(x, (size_t)n * c, OPS_F32), *db = dup_to(b, (size_t)c, OPS_F32);
    hark_err_t err = {0};
    for (int first = 0; first < 2; first++) {
        float *dy = dup_to(y0, (size_t)n * c, OPS_F32);
        memcpy(ref, y0, (size_t)n * c * 4);
        CHECK_OK(cuda_conv1d_sum(dy, dx, db, first, 3.0f, n, c, NULL, &err));
        conv1d_sum_ref(ref, x, b, first, 3.0f, n, c);
        CHECK_OK(dup_from(got, dy, (size_t)n * c, OPS_F32));
        CHECKF(!memcmp(got, ref, (size_t)n * c * 4), "sum (first %d) differs", first);
        CHECK(guard_ok(dy, (size_t)n * c, OPS_F32));
        cudaFree(dy);
    }
    CHECK_EQ_INT(cuda_conv1d_sum(dx, dx, NULL, 0, 1.0f, n, c, NULL, &err), HARK_ERR_INVALID_ARG);
    int lens[3] = {19, 7, 1}, *d_lens = NULL;
    cudaMalloc((void **)&d_lens, sizeof lens);
    cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
    /* conv_post + tanh, weights of each dtype: 36 channels, 7 taps, 19 rows; 32 channels over
     * tiles of 256 rows (an item ending one row past a tile, one of 1 row), x FP32 and FP16;
     * 512 channels (too wide for the tiled kernel's shared memory), x FP32 and BF16 */
    static const int pcases[5][4] = {{36, 7, 19, OPS_F32},
                                     {32, 7, 600, OPS_F32},
                                     {32, 7, 600, OPS_F16},
                                     {512, 7, 40, OPS_F32},
                                     {512, 7, 40, OPS_BF16}};
    for (int pcase = 0; pcase < 5; pcase++) {
        const ops_dtype_t x_t = (ops_dtype_t)pcases[pcase][3];
        const int pc = pcases[pcase][0], pk = pcases[pcase][1], ptl = pcases[pcase][2];
        int plens[3] = {ptl, ptl > 256 ? 257 : 7, 1}, *d_plens = NULL;
        cudaMalloc((void **)&d_plens, sizeof plens);
        cudaMemcpy(d_plens, plens, sizeof plens, cudaMemcpyHostToDevice);
        size_t qn = (size_t)batch * ptl;
        float *qx = rnd(qn * pc, &seed, 2.0f);
        round_to(qx, qn * pc, x_t);
        void *dqx = dup_to(qx, qn * pc, x_t);
        float *ra = malloc(qn * 4), *rp = malloc(qn * 4), *ga = malloc(qn * 4),
              *gp = malloc(qn * 4);
        for (int a = 0; a < 3; a++) {
            float *pw = rnd((size_t)pk * pc, &seed, 0.2f);
            round_to(pw, (size_t)pk * pc, ALL[a]);
            void *dpw = dup_to(pw, (size_t)pk * pc, ALL[a]);
            float *da = dalloc(qn, OPS_F32), *dp = dalloc(qn, OPS_F32);
            CHECK_OK(cuda_conv1d_post_tanh(da, dp, dqx, x_t, dpw, ALL[a], 0.3f, 0.01f, d_plens,
                                           batch, ptl, pc, pk, NULL, &err));
            conv1d_post_tanh_ref(ra, rp, qx, pw, 0.3f, 0.01f, plens, batch, ptl, pc, pk);
            CHECK_OK(dup_from(ga, da, qn, OPS_F32));
            CHECK_OK(dup_from(gp, dp, qn, OPS_F32));
            /* the same order of FP32 sums; the GPU fuses multiply-adds */
            CHECKF(test_max_abs_diff(gp, rp, qn) <= 1e-5, "%s c %d: pre diff %g", dt_name(ALL[a]),
                   pc, test_max_abs_diff(gp, rp, qn));
            CHECKF(test_max_abs_diff(ga, ra, qn) <= 1e-5, "%s c %d: tanh diff %g", dt_name(ALL[a]),
                   pc, test_max_abs_diff(ga, ra, qn));
            for (int bb = 0; bb < batch; bb++) /* zeros past each length */
                for (int s = plens[bb]; s < ptl; s++)
                    CHECK(ga[(size_t)bb * ptl + s] == 0.0f && gp[(size_t)bb * ptl + s] == 0.0f);
            CHECK(guard_ok(da, qn, OPS_F32) && guard_ok(dp, qn, OPS_F32));
            cudaFree(da);
            cudaFree(dp);
            cudaFree(dpw);
            free(pw);
        }
        cudaFree(d_plens);
        cudaFree(dqx);
        free(qx);
        free(ra);
        free(rp);
        free(ga);
        free(gp);
    }
    size_t na = (size_t)batch * tl;
    float *px = rnd(na * 36, &seed, 2.0f), *dpx = dup_to(px, na * 36, OPS_F32);
    CHECK_EQ_INT(cuda_conv1d_post_tanh(NULL, NULL, dpx, OPS_F32, dpx, OPS_F32, 0, 0.01f, NULL, 1, 4,
                                       6, 7, NULL, &err),
                 HARK_ERR_INVALID_ARG); /* c not a multiple of 4 */
    float *acc = rnd(na * ld, &seed, 2.0f), *dacc = dup_to(acc, na * ld, OPS_F32);
    /* crop + bias alone, into fp16 */
    float *dh = dalloc((size_t)batch * 5 * 6, OPS_F16), hc[3 * 5 * 6], rc2[3 * 5 * 6];
    CHECK_OK(cuda_conv1d_crop_bias(dh, OPS_F16, dacc, db, batch, 5, 6, ld, (long long)tl * ld, 3,
                                   NULL, &err));
    conv1d_crop_bias_ref(rc2, acc, b, batch, 5, 6, ld, (long long)tl * ld, 3);
    round_to(rc2, sizeof rc2 / 4, OPS_F16);
    CHECK_OK(dup_from(hc, dh, sizeof hc / 4, OPS_F16));
    CHECK(!memcmp(hc, rc2, sizeof hc));
    CHECK(guard_ok(dh, sizeof hc / 4, OPS_F16));
    /* four columns per thread: c 4, ld 8, into bf16 */
    CHECK_OK(cuda_conv1d_crop_bias(dh, OPS_BF16, dacc, db, batch, 5, 4, 8, (long long)tl * 8, 3,
                                   NULL, &err));
    conv1d_crop_bias_ref(rc2, acc, b, batch, 5, 4, 8, (long long)tl * 8, 3);
    round_to(rc2, (size_t)batch * 5 * 4, OPS_BF16);
    CHECK_OK(dup_from(hc, dh, (size_t)batch * 5 * 4, OPS_BF16));
    CHECK(!memcmp(hc, rc2, (size_t)batch * 5 * 4 * 4));
    cudaFree(dh);
    cudaFree(d_lens);
    cudaFree(dacc);
    cudaFree(dpx);
    free(px);
    cudaFree(dx);
    cudaFree(db);
    free(y0);
    free(x);
    free(b);
    free(ref);
    free(got);
    free(acc);
}

/* ---- HiFi-GAN's fused resblock unit --------------------------------------------------------- */

static void round_cb(float *v, size_t n, void *user)
{
    round_to(v, n, *(const ops_dtype_t *)user);
}

/* relative RMS of (got - ref) over the rows s < lens[b], against the RMS of (ref - base): the
 * conv part of y = x + conv (base = x), or the whole sum (base NULL) */
static double res_err(const float *got, const float *ref, const float *base, const int *lens,
                      int batch, int t, int c)
{
    double e = 0, r = 0;
    for (int b = 0; b < batch; b++)
        for (int s = 0; s < (lens[b] < t ? lens[b] : t); s++)
            for (int i = 0; i < c; i++) {
                size_t q = ((size_t)b * t + s) * c + i;
                double d = (double)got[q] - ref[q], v = ref[q] - (base ? base[q] : 0.0f);
                e += d * d;
                r += v * v;
            }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* rows s >= lens[b] of the device array d (batch, t, c) of es-byte elements still hold the poison
 * (all bytes 0xff) */
static int res_rows_untouched(const void *d, size_t es, const int *lens, int batch, int t, int c)
{
    size_t row = (size_t)c * es;
    unsigned char *h = malloc((size_t)batch * t * row + 1);
    int ok = h && cudaMemcpy(h, d, (size_t)batch * t * row, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int b = 0; ok && b < batch; b++)
        for (int s = lens[b] < t ? lens[b] : t; ok && s < t; s++)
            for (size_t i = 0; i < row; i++)
                ok = ok && h[((size_t)b * t + s) * row + i] == 0xff;
    free(h);
    return ok;
}

/* Every channel count the kernel takes, ResBlock1's two convs (V1's kernels and dilations, at
 * lengths that are no multiple of a block's rows, with an item of 0, one of 1 and one ending one
 * row past a block; 256 channels in both block shapes) and ResBlock2's one conv (V3's longest
 * reach, 5 taps at dilation 12); out
 * alone, and out with the MRF sum (first, then accumulating with the division). Tolerance on
 * the conv part (relative RMS): the reference rounds at the same points, so only the FP32 sums'
 * order differs, which now and then moves z across a rounding boundary of the 16-bit type:
 * 1e-4 FP16, 8e-4 BF16 (8x its unit roundoff). */
GPU_TEST(cuda_conv1d_res_matches_ref)
{
    static const int cases[][5] =
        {
            /* c, k1, d1, k2, tl */
            {32, 3, 1, 3, 600},    {32, 11, 5, 11, 1100}, {64, 7, 3, 7, 263},
            {64, 5, 12, 0, 300},   {128, 11, 5, 11, 157}, {128, 3, 1, 0, 140},
            {256, 3, 3, 3, 200},   {256, 11, 5, 11, 150}, {32, 7, 6, 0, 700},
            {256, 7, 3, 7, 12000}, /* a grid long enough for 256 channels' 128-row blocks */
        };
    static const ops_dtype_t dts[2] = {OPS_F16, OPS_BF16};
    unsigned seed = 21;
    hark_err_t err = {0};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int c = cases[ci][0], k1 = cases[ci][1], d1 = cases[ci][2], k2 = cases[ci][3],
                  tl = cases[ci][4], batch = 3;
        if (!cuda_conv1d_res_fits(c, k1, d1, k2)) {
            fprintf(stderr, "  conv1d_res: c %d k1 %d d1 %d k2 %d does not fit this GPU\n", c, k1,
                    d1, k2);
            continue;
        }
        /* an item ending one row past the first block's rows, one of 1 row, one of 0 */
        /* 256 channels: 64-row blocks while the grid is short of two per multiprocessor */
        int blk = (c == 32 ? 512 : c == 64 ? 256 : c == 128 || tl > 5000 ? 128 : 64) - 2 * (k2 / 2);
        int lens[3] = {blk + 1 < tl ? blk + 1 : tl, 1, 0};
        if (ci % 2 && tl < 5000) /* the long grid keeps short items: a cheap reference */
            lens[2] = tl, lens[1] = 0, lens[0] = tl - 7;
        int *d_lens = NULL;
        cudaMalloc((void **)&d_lens, sizeof lens);
        cudaMemcpy(d_lens, lens, sizeof lens, cudaMemcpyHostToDevice);
        size_t n = (size_t)batch * tl * c, nw1 = (size_t)c * k1 * c, nw2 = (size_t)c * k2 * c;
        float *x = rnd(n, &seed, 2.0f), *s0 = rnd(n, &seed, 1.0f);
        float *w1 = rnd(nw1, &seed, 1.5f / sqrtf((float)(c * k1))),
              *b1 = rnd((size_t)c, &seed, 0.3f);
        float *w2 = rnd(nw2 ? nw2 : 1, &seed, 1.5f / sqrtf((float)(c * (k2 ? k2 : 1))));
        float *b2 = rnd((size_t)c, &seed, 0.3f);
        float *rout = malloc(n * 4), *rsum = malloc(n * 4), *gout = malloc(n * 4),
              *gsum = malloc(n * 4);
        float *dx = dup_to(x, n, OPS_F32), *db1 = dup_to(b1, (size_t)c, OPS_F32),
              *db2 = dup_to(b2, (size_t)c, OPS_F32);
        /* x with items 8 rows apart past their t rows and a bias; next: the items' rows 3 rows
         * down in (tl + 5)-row items, sentinel values elsewhere */
        const long long xs_ld = (long long)(tl + 8) * c, nx_ld = (long long)(tl + 5) * c;
        const size_t nx_n = (size_t)batch * nx_ld;
        float *xs = rnd((size_t)batch * xs_ld, &seed, 2.0f), *xb = rnd((size_t)c, &seed, 0.5f);
        float *nx0 = malloc(nx_n * 4), *rnext = malloc(nx_n * 4);
        for (size_t i = 0; i < nx_n; i++)
            nx0[i] = 7.0f;
        float *dxs = dup_to(xs, (size_t)batch * xs_ld, OPS_F32),
              *dxb = dup_to(xb, (size_t)c, OPS_F32);
        for (int di = 0; di < 2; di++) {
            ops_dtype_t dt = dts[di];
            float *hw1 = malloc(nw1 * 4), *hw2 = malloc((nw2 ? nw2 : 1) * 4);
            memcpy(hw1, w1, nw1 * 4);
            memcpy(hw2, w2, (nw2 ? nw2 : 1) * 4);
            round_to(hw1, nw1, dt);
            round_to(hw2, nw2 ? nw2 : 1, dt);
            void *dw1 = dup_to(hw1, nw1, dt), *dw2 = dup_to(hw2, nw2 ? nw2 : 1, dt);
            double tol = dt == OPS_F16 ? 1e-4 : 8e-4, ulp = dt == OPS_F16 ? 0x1p-10 : 0x1p-7;
            /* x and the old sum rounded to dt: the 16-bit residual between dilations, the
             * 16-bit MRF sum */
            float *xr = malloc(n * 4), *sr = malloc(n * 4);
            memcpy(xr, x, n * 4);
            round_to(xr, n, dt);
            memcpy(sr, s0, n * 4);
            round_to(sr, n, dt);
            void *dxr = dup_to(xr, n, dt);
            /* out; out + first sum; sum / 3 only; sum / 3 into the next conv's 16-bit input
             * only, from x read with an item stride and a bias; 16-bit x into out and a 16-bit sum;
             * 16-bit x into 16-bit out — each with the mma.sync kernels and then with the Hopper
             * path's (wgmma, on a compute capability 9.0 device; mma.sync elsewhere) */
            for (int mk = 0; mk < 12; mk++) {
                int mode = mk % 6, hop = 2 * (mk / 6), x16 = mode >= 4, out16 = mode == 5;
                const ops_dtype_t out_t = out16 ? dt : OPS_F32, sum_t = x16 ? dt : OPS_F32;
                const float *sin = x16 ? sr : s0;
                const float *xin = mode == 3 ? xs : x16 ? xr : x;
                void *dout = mode == 2 || mode == 3 ? NULL : dalloc(n, out_t);
                void *dsum = mode == 0 || mode == 5 ? NULL : dup_to(sin, n, sum_t);
                int first = mode == 1;
                float div = mode == 2 || mode == 3 ? 3.0f : 1.0f;
                conv1d_res_ext_t ext = {.x16 = x16, .out16 = out16, .sum16 = x16};
                void *dnext = NULL;
                if (mode == 3) {
                    ext = (conv1d_res_ext_t){.x_ld_b = xs_ld,
                                             .x_bias = dxb,
                                             .next_ld_b = nx_ld,
                                             .next_off = 3,
                                             .next_slope = 0.2f,
                                             .no_sum_store = 1};
                    ext.next = dnext = dup_to(nx0, nx_n, dt);
                }
                CHECK_OK(cuda_conv1d_res(dout, dsum,
                                         mode == 3 ? dxs
                                         : x16     ? dxr
                                                   : dx,
                                         dw1, db1, k1, d1, k2 ? dw2 : NULL, k2 ? db2 : NULL, k2, dt,
                                         0.1f, d_lens, batch, tl, c, first, div, mode ? &ext : NULL,
                                         hop, NULL, &err));
                memcpy(rsum, sin, n * 4);
                memcpy(rnext, nx0, nx_n * 4);
                if (mode == 3)
                    ext.next = rnext, ext.x_bias = xb;
                conv1d_res_ref(rout, dsum || mode == 3 ? rsum : NULL, xin, hw1, b1, k1, d1, hw2, b2,
                               k2, 0.1f, lens, batch, tl, c, first, div, mode ? &ext : NULL,
                               round_cb, &dt);
                if (dnext) {
                    /* the lrelu'd mean in the item's rows, every other row untouched; the GPU's
                     * and the reference's FP32 sums may round to neighbouring 16-bit values */
                    float *gn = malloc(nx_n * 4);
                    CHECK_OK(dup_from(gn, dnext, nx_n, dt));
                    CHECK(!memcmp(rsum, s0, n * 4));
                    CHECK_OK(dup_from(gsum, dsum, n, OPS_F32));
                    CHECKF(!memcmp(gsum, s0, n * 4), "c %d: the sum was stored", c);
                    double num = 0, den = 0;
                    int moved = 0;
                    for (size_t i = 0; i < nx_n; i++) {
                        if (rnext[i] == nx0[i] || gn[i] == nx0[i]) {
                            moved += gn[i] != rnext[i];
                            continue;
                        }
                        num += ((double)gn[i] - rnext[i]) * ((double)gn[i] - rnext[i]);
                        den += (double)rnext[i] * rnext[i];
                    }
                    double e = sqrt(num / (den > 0 ? den : 1));
                    fprintf(stderr, "  conv1d_res %s%s c %d: next %.2e\n", dt_name(dt),
                            hop ? " hopper" : "", c, e);
                    CHECKF(!moved, "c %d: next: %d rows outside the items written or missed", c,
                           moved);
                    CHECKF(e <= ulp, "c %d: next rel. RMS %g", c, e);
                    CHECK(guard_ok(dnext, nx_n, dt));
                    cudaFree(dnext);
                    cudaFree(dsum);
                    free(gn);
                    continue;
                }
                if (dout) {
                    /* 16-bit out: both sides rounded, their FP32 sums' order may put an element
                     * one 16-bit step apart, so the bound is on the whole value */
                    CHECK_OK(dup_from(gout, dout, n, out_t));
                    double e = res_err(gout, rout, out16 ? NULL : xin, lens, batch, tl, c);
                    fprintf(stderr,
                            "  conv1d_res %s%s c %d k1 %d d1 %d k2 %d tl %d: out%s%s %.2e\n",
                            dt_name(dt), hop ? " hopper" : "", c, k1, d1, k2, tl,
                            x16 ? " (x 16-bit)" : "", out16 ? " 16-bit" : "", e);
                    CHECKF(e <= (out16 ? ulp : tol),
                           "%s%s c %d k1 %d d1 %d k2 %d mode %d: out rel. RMS %g", dt_name(dt),
                           hop ? " hopper" : "", c, k1, d1, k2, mode, e);
                    CHECKF(res_rows_untouched(dout, ops_dtype_size(out_t), lens, batch, tl, c),
                           "c %d: rows past an item's length were written", c);
                    CHECK(guard_ok(dout, n, out_t));
                    cudaFree(dout);
                }
                if (dsum) {
                    CHECK_OK(dup_from(gsum, dsum, n, sum_t));
                    /* rows past the lengths keep the old sum */
                    for (int b = 0; b < batch; b++)
                        for (int s = lens[b]; s < tl; s++)
                            CHECK(!memcmp(gsum + ((size_t)b * tl + s) * c,
                                          sin + ((size_t)b * tl + s) * c, (size_t)c * 4));
                    /* a 16-bit sum: both sides rounded, one step apart at most (as out16) */
                    double e = res_err(gsum, rsum, mode == 1 ? x : NULL, lens, batch, tl, c);
                    fprintf(stderr, "  conv1d_res %s%s c %d: sum%s %.2e\n", dt_name(dt),
                            hop ? " hopper" : "", c, x16 ? " 16-bit" : "", e);
                    CHECKF(e <= (x16 ? ulp : tol), "%s%s c %d mode %d: sum rel. RMS %g",
                           dt_name(dt), hop ? " hopper" : "", c, mode, e);
                    CHECK(guard_ok(dsum, n, sum_t));
                    cudaFree(dsum);
                }
            }
            cudaFree(dw1);
            cudaFree(dw2);
            cudaFree(dxr);
            free(xr);
            free(sr);
            free(hw1);
            free(hw2);
        }
        cudaFree(d_lens);
        cudaFree(dx);
        cudaFree(dxs);
        cudaFree(dxb);
        cudaFree(db1);
        cudaFree(db2);
        free(x);
        free(xs);
        free(xb);
        free(nx0);
        free(rnext);
        free(s0);
        free(w1);
        free(b1);
        free(w2);
        free(b2);
        free(rout);
        free(rsum);
        free(gout);
        free(gsum);
    }
    /* refused: FP32, a channel count without a block shape, out and sum both NULL */
    CHECK(!cuda_conv1d_res_fits(48, 3, 1, 3));
    CHECK_EQ_INT(cuda_conv1d_res(NULL, NULL, NULL, NULL, NULL, 3, 1, NULL, NULL, 0, OPS_F16, 0.1f,
                                 NULL, 1, 8, 32, 1, 1.0f, NULL, 1, NULL, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(cuda_conv1d_res((float *)8, NULL, (float *)8, (void *)8, (float *)8, 3, 1, NULL,
                                 NULL, 0, OPS_F32, 0.1f, NULL, 1, 8, 32, 1, 1.0f, NULL, 0, NULL,
                                 &err),
                 HARK_ERR_INVALID_ARG);
    /* 16-bit x with an item stride its 16-byte loads cannot keep to */
    conv1d_res_ext_t odd = {.x_ld_b = 8 * 32 + 4, .x16 = 1};
    CHECK_EQ_INT(cuda_conv1d_res((float *)16, NULL, (float *)16, (void *)16, (float *)16, 3, 1,
                                 NULL, NULL, 0, OPS_F16, 0.1f, NULL, 1, 8, 32, 1, 1.0f, &odd, 0,
                                 NULL, &err),
                 HARK_ERR_INVALID_ARG);
}

#endif
