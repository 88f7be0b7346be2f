/* GPU tests for src/ops/ops_cuda.cu: every launcher against its CPU reference (ops_cpu.c) on
 * random data with awkward sizes (1, 7, 33, 257, ...), poisoned outputs (NaN bytes: an unwritten
 * element fails) and guard elements after every output. Tolerances, relative RMS error against
 * the reference computed from the same (FP16-rounded where FP16) inputs: FP32 1e-5, FP16 1e-2
 * (FP16 outputs / operands), unless an op states otherwise. Every test of a 16-bit op runs in
 * FP16 and again in BF16 (the same body over both types) with the FP16 tolerance times 8 (tol16:
 * bf16's unit roundoff is 2^-8, fp16's 2^-11). Measured errors are printed. */
#include "test.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "gpu/gpu_arch.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"
#include "search/ctc_gpu.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 64 /* guard elements after each device buffer */
#define TOL32 1e-5
#define TOL16 1e-2

/* the 16-bit types, each test of a 16-bit op runs in turn */
static const ops_dtype_t H16[2] = {OPS_F16, OPS_BF16};

static const char *dt_name(ops_dtype_t t)
{
    return t == OPS_F16 ? "fp16" : t == OPS_BF16 ? "bf16" : "fp32";
}

/* A tolerance stated for FP16 (output / operand roundings) in 16-bit type t: the same for FP16,
 * 8x for BF16, whose unit roundoff 2^-8 is 8 times FP16's 2^-11 (its 8-bit significand against
 * FP16's 11), so every rounding error the bound counts grows by that factor. */
static double tol16(ops_dtype_t t, double fp16_tol)
{
    return t == OPS_BF16 ? 8.0 * fp16_tol : fp16_tol;
}

static double tol_of(ops_dtype_t t)
{
    return t == OPS_F32 ? TOL32 : tol16(t, TOL16);
}

/* n elements + GUARD, every byte 0xff (a NaN in all three dtypes) */
static void *dalloc(size_t n, ops_dtype_t t)
{
    void *p = NULL;
    size_t bytes = (n + GUARD) * ops_dtype_size(t);
    if (cudaMalloc(&p, bytes) != cudaSuccess)
        return NULL;
    cudaMemset(p, 0xff, bytes);
    return p;
}

/* a device copy of h (n floats) in dtype t */
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

/* h (n floats) = device d of dtype t; 0 on success */
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

/* the guard after n elements still holds 0xff bytes */
static int guard_ok(const void *d, size_t n, ops_dtype_t t)
{
    size_t es = ops_dtype_size(t);
    unsigned char g[GUARD * 4];
    if (cudaMemcpy(g, (const char *)d + n * es, GUARD * es, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 0;
    for (size_t i = 0; i < GUARD * es; i++)
        if (g[i] != 0xff)
            return 0;
    return 1;
}

static float *hrand(size_t n, unsigned *seed, float scale)
{
    float *p = hark_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

/* rounds h through dtype t (what the device sees) */
static void round_to(float *h, size_t n, ops_dtype_t t)
{
    if (t == OPS_F32)
        return;
    void *d = dup_to(h, n, t);
    dup_from(h, d, n, t);
    cudaFree(d);
}

/* downloads n outputs (dtype t), checks the guard, returns rel RMS vs ref (INFINITY on NaN) */
static double out_err(const void *d, ops_dtype_t t, const float *ref, size_t n, int *guard)
{
    float *h = hark_malloc((n ? n : 1) * sizeof(float));
    double e = INFINITY;
    if (dup_from(h, d, n, t) == 0)
        e = test_rel_rms(h, ref, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != h[i])
            e = INFINITY;
    *guard = guard_ok(d, n, t);
    hark_free(h);
    return e;
}

#define CHECK_ERR(e, tol, guard, ...)                                                              \
    do {                                                                                           \
        CHECKF(guard, "guard overwritten: " __VA_ARGS__);                                          \
        CHECKF((e) <= (tol), __VA_ARGS__);                                                         \
    } while (0)

static ops_cuda_t *new_ctx(test_ctx_t *t)
{
    ops_cuda_t *g = NULL;
    hark_err_t err = {0};
    if (ops_cuda_create(NULL, &g, &err) != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "ops_cuda_create: %s", err.msg);
    else
        printf("    gpu path: %s\n", gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    return g;
}

/* The wgmma kernels ran where the context's path allows them: on the Hopper path at least `min`
 * of the runs, on the Ampere path (HARK_GPU_ARCH=sm80, or a pre-Hopper GPU) none, whatever the
 * backend asked for (issue 24) */
static int wgmma_runs_ok(const ops_cuda_t *g, int runs, int min)
{
    return ops_cuda_path(g) == GPU_PATH_HOPPER ? runs >= min : runs == 0;
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

GPU_TEST(cuda_gemm_matches_matmul_ref)
{
    static const int sz[][3] = {
        {1, 1, 1}, {7, 33, 257}, {257, 7, 33}, {33, 257, 1000}, {64, 5002, 256}};
    /* operand and output types: fp32; fp16 -> fp32, fp16; bf16 -> fp32, bf16 */
    static const ops_dtype_t ab[5] = {OPS_F32, OPS_F16, OPS_F16, OPS_BF16, OPS_BF16},
                             ct[5] = {OPS_F32, OPS_F32, OPS_F16, OPS_F32, OPS_BF16};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 5;
    double worst[5] = {0, 0, 0, 0, 0};
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++)
        for (int tb = 0; tb < 2; tb++)
            for (int v = 0; v < 5; v++) {
                int m = sz[c][0], n = sz[c][1], k = sz[c][2], batch = 2;
                int lda = k + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
                size_t sa = (size_t)m * lda, sb = (size_t)(tb ? n : k) * ldb, sc = (size_t)m * ldc;
                size_t nc = sc * batch;
                float *a = hrand(sa * batch, &seed, 1.0f), *b = hrand(sb * batch, &seed, 1.0f);
                float *c0 = hrand(nc, &seed, 1.0f);
                round_to(a, sa * batch, ab[v]);
                round_to(b, sb * batch, ab[v]);
                round_to(c0, nc, ct[v]);
                float beta = (c & 1) ? 0.3f : 0.0f, alpha = 0.7f;
                void *da = dup_to(a, sa * batch, ab[v]), *db = dup_to(b, sb * batch, ab[v]);
                void *dc = beta != 0.0f ? dup_to(c0, nc, ct[v]) : dalloc(nc, ct[v]);
                float *ref = hark_malloc(nc * sizeof(float)),
                      *got = hark_malloc(nc * sizeof(float));
                memcpy(ref, c0, nc * sizeof(float));
                for (int i = 0; i < batch; i++)
                    matmul_ref(ref + i * sc, a + i * sa, b + i * sb, m, n, k, lda, ldb, ldc, tb,
                               alpha, beta);
                hark_err_t err = {0};
                CHECKF(cuda_gemm(dc, ct[v], da, db, ab[v], m, n, k, lda, ldb, ldc, tb, alpha, beta,
                                 batch, (long long)sa, (long long)sb, (long long)sc, g,
                                 &err) == HARK_OK,
                       "%s", err.msg);
                CHECK(dup_from(got, dc, nc, ct[v]) == 0);
                CHECKF(guard_ok(dc, nc, ct[v]), "gemm guard overwritten");
                /* columns n..ldc-1 are not C's: untouched (still poison, or c0) */
                size_t nv = 0;
                for (size_t i = 0; i < nc; i++) {
                    if ((int)(i % ldc) >= n) {
                        CHECKF(beta != 0.0f ? got[i] == c0[i] : got[i] != got[i],
                               "gemm wrote past column n");
                        continue;
                    }
                    got[nv] = got[i], ref[nv] = ref[i], nv++;
                }
                double e = test_rel_rms(got, ref, nv);
                for (size_t i = 0; i < nv; i++)
                    if (got[i] != got[i])
                        e = INFINITY;
                worst[v] = e > worst[v] ? e : worst[v];
                CHECKF(e <= tol_of(ab[v]), "gemm %dx%dx%d trans_b %d beta %g %s->%s rel %g", m, n,
                       k, tb, beta, dt_name(ab[v]), dt_name(ct[v]), e);
                cudaFree(da), cudaFree(db), cudaFree(dc);
                hark_free(a), hark_free(b), hark_free(c0), hark_free(ref), hark_free(got);
            }
    printf("    gemm rel rms: fp32 %.3g, fp16->fp32 %.3g, fp16->fp16 %.3g, bf16->fp32 %.3g, "
           "bf16->bf16 %.3g\n",
           worst[0], worst[1], worst[2], worst[3], worst[4]);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_linear_bias_act_matches_ref)
{
    static const int sz[][3] = {{1, 33, 257}, {7, 33, 257}, {257, 80, 33}, {33, 1, 7}};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 7;
    double worst[3] = {0, 0, 0};
    for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++)
        for (int act = 0; act <= CUDA_ACT_SWOOSHR; act++)
            for (int v = 0; v < 3; v++) {
                ops_dtype_t xt = v ? H16[v - 1] : OPS_F32;
                int n = sz[c][0], in = sz[c][1], out = sz[c][2];
                float *x = hrand((size_t)n * in, &seed, 2.0f);
                float *w = hrand((size_t)out * in, &seed, 1.0f / sqrtf((float)in));
                float *b = hrand((size_t)out, &seed, 0.5f);
                round_to(x, (size_t)n * in, xt);
                round_to(w, (size_t)out * in, xt);
                float *ref = hark_malloc((size_t)n * out * sizeof(float));
                linear_ref(ref, x, w, b, n, in, out);
                activation_ref(ref, ref, (size_t)n * out, (ops_act_t)act);
                void *dx = dup_to(x, (size_t)n * in, xt), *dw = dup_to(w, (size_t)out * in, xt);
                float *db = dup_to(b, (size_t)out, OPS_F32), *dy = dalloc((size_t)n * out, OPS_F32);
                hark_err_t err = {0};
                CHECKF(cuda_linear(dy, dx, dw, xt, db, n, in, out, (cuda_act_t)act, g, &err) ==
                           HARK_OK,
                       "%s", err.msg);
                int gd;
                double e = out_err(dy, OPS_F32, ref, (size_t)n * out, &gd);
                worst[v] = e > worst[v] ? e : worst[v];
                CHECK_ERR(e, tol_of(xt), gd, "linear %dx%dx%d act %d %s rel %g", n, in, out, act,
                          dt_name(xt), e);
                cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy);
                hark_free(x), hark_free(w), hark_free(b), hark_free(ref);
            }
    printf("    linear+bias+act rel rms: fp32 %.3g, fp16 %.3g, bf16 %.3g\n", worst[0], worst[1],
           worst[2]);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_bias_act_fp16_output)
{
    unsigned seed = 8;
    int n = 257, c = 33;
    double worst[2] = {0, 0};
    for (int h = 0; h < 2; h++)
        for (int act = 0; act <= CUDA_ACT_SWOOSHR; act++) {
            ops_dtype_t yt = H16[h];
            float *x = hrand((size_t)n * c, &seed, 3.0f), *b = hrand((size_t)c, &seed, 1.0f);
            float *ref = hark_malloc((size_t)n * c * sizeof(float));
            for (int i = 0; i < n * c; i++)
                ref[i] = x[i] + b[i % c];
            activation_ref(ref, ref, (size_t)n * c, (ops_act_t)act);
            float *dx = dup_to(x, (size_t)n * c, OPS_F32), *db = dup_to(b, (size_t)c, OPS_F32);
            void *dy = dalloc((size_t)n * c, yt);
            CHECK_OK(cuda_bias_act(dy, yt, dx, db, n, c, (cuda_act_t)act, NULL, NULL));
            int gd;
            double e = out_err(dy, yt, ref, (size_t)n * c, &gd);
            worst[h] = e > worst[h] ? e : worst[h];
            CHECK_ERR(e, tol16(yt, 1e-3), gd, "bias_act act %d %s out rel %g", act, dt_name(yt),
                      e); /* one rounding */
            cudaFree(dx), cudaFree(db), cudaFree(dy);
            hark_free(x), hark_free(b), hark_free(ref);
        }
    printf("    bias+act -> fp16 rel rms %.3g (tol 1e-3), -> bf16 %.3g (tol 8e-3)\n", worst[0],
           worst[1]);
}

/* ---- norms --------------------------------------------------------------------------------- */

GPU_TEST(cuda_residual_layer_norm_matches_ref)
{
    static const int ns[] = {1, 7, 257}, ds[] = {1, 7, 33, 257, 1000};
    unsigned seed = 9;
    double worst[3] = {0, 0, 0};
    for (size_t in = 0; in < 3; in++)
        for (size_t id = 0; id < 5; id++)
            for (int mode = 0; mode < 4; mode++) /* 0 pre, 1 post, 2 no ln, 3 embed (no res, pe) */
                for (int v = 0; v < 3; v++) {
                    ops_dtype_t yt = v ? H16[v - 1] : OPS_F32;
                    int n = ns[in], d = ds[id], pe_rows = 5;
                    size_t nd = (size_t)n * d;
                    float *res = hrand(nd, &seed, 2.0f), *a = hrand(nd, &seed, 1.0f);
                    float *bias = hrand((size_t)d, &seed, 0.3f),
                          *gm = hrand((size_t)d, &seed, 0.2f);
                    float *bt = hrand((size_t)d, &seed, 0.2f),
                          *pe = hrand((size_t)pe_rows * d, &seed, 1.0f);
                    for (int i = 0; i < d; i++)
                        gm[i] += 1.0f;
                    float alpha = mode == 3 ? 16.0f : 0.5f;
                    float *s = hark_malloc(nd * sizeof(float)),
                          *z = hark_malloc(nd * sizeof(float));
                    for (size_t i = 0; i < nd; i++) {
                        size_t r = i / d, j = i % d;
                        s[i] = (mode == 3 ? 0.0f : res[i]) + alpha * (a[i] + bias[j]) +
                               (mode == 3 ? pe[(r % pe_rows) * d + j] : 0.0f);
                    }
                    if (mode == 2)
                        memcpy(z, s, nd * sizeof(float));
                    else
                        layer_norm_ref(z, s, gm, bt, n, d, 1e-5f);
                    float *dres = dup_to(res, nd, OPS_F32), *da = dup_to(a, nd, OPS_F32);
                    float *dbias = dup_to(bias, d, OPS_F32), *dg = dup_to(gm, d, OPS_F32);
                    float *dbt = dup_to(bt, d, OPS_F32),
                          *dpe = dup_to(pe, (size_t)pe_rows * d, OPS_F32);
                    float *dx = dalloc(nd, OPS_F32);
                    void *dy = dalloc(nd, yt);
                    CHECK_OK(cuda_residual_layer_norm(dx, dy, yt, mode == 3 ? NULL : dres, da,
                                                      dbias, alpha, mode == 3 ? dpe : NULL, pe_rows,
                                                      dg, dbt, mode != 2, mode == 1, n, d, 1e-5f,
                                                      NULL, NULL));
                    int g1, g2;
                    double ex = out_err(dx, OPS_F32, mode == 1 ? z : s, nd, &g1);
                    double ey = out_err(dy, yt, z, nd, &g2);
                    double tol = v ? tol16(yt, 1e-3) : TOL32; /* 16-bit: one output rounding */
                    worst[v] = ey > worst[v] ? ey : worst[v];
                    CHECK_ERR(ex, TOL32, g1, "residual_ln x n %d d %d mode %d rel %g", n, d, mode,
                              ex);
                    CHECK_ERR(ey, tol, g2, "residual_ln y n %d d %d mode %d %s rel %g", n, d, mode,
                              dt_name(yt), ey);
                    /* in place: x_out aliases res */
                    if (mode == 1 && v == 0) {
                        CHECK_OK(cuda_residual_layer_norm(dres, dres, OPS_F32, dres, da, dbias,
                                                          alpha, NULL, 0, dg, dbt, 1, 1, n, d,
                                                          1e-5f, NULL, NULL));
                        double e2 = out_err(dres, OPS_F32, z, nd, &g1);
                        CHECK_ERR(e2, TOL32, g1, "residual_ln in place rel %g", e2);
                    }
                    cudaFree(dres), cudaFree(da), cudaFree(dbias), cudaFree(dg), cudaFree(dbt);
                    cudaFree(dpe), cudaFree(dx), cudaFree(dy);
                    hark_free(res), hark_free(a), hark_free(bias), hark_free(gm), hark_free(bt);
                    hark_free(pe), hark_free(s), hark_free(z);
                }
    printf("    residual+layer_norm rel rms: fp32 %.3g, fp16 out %.3g, bf16 out %.3g\n", worst[0],
           worst[1], worst[2]);
}

GPU_TEST(cuda_batch_norm_matches_ref)
{
    static const int cs[] = {1, 7, 257};
    unsigned seed = 10;
    double worst = 0;
    for (int ic = 0; ic < 3; ic++) {
        int n = 33, c = cs[ic];
        float *x = hrand((size_t)n * c, &seed, 2.0f), *g = hrand(c, &seed, 0.3f);
        float *b = hrand(c, &seed, 0.3f), *rm = hrand(c, &seed, 0.5f), *rv = hrand(c, &seed, 0.4f);
        for (int i = 0; i < c; i++)
            rv[i] += 0.6f, g[i] += 1.0f;
        float *ref = hark_malloc((size_t)n * c * sizeof(float));
        batch_norm_ref(ref, x, g, b, rm, rv, n, c, 1e-5f);
        float *dx = dup_to(x, (size_t)n * c, OPS_F32), *dg = dup_to(g, c, OPS_F32);
        float *db = dup_to(b, c, OPS_F32), *drm = dup_to(rm, c, OPS_F32),
              *drv = dup_to(rv, c, OPS_F32);
        float *dy = dalloc((size_t)n * c, OPS_F32);
        CHECK_OK(cuda_batch_norm(dy, dx, dg, db, drm, drv, n, c, 1e-5f, NULL, NULL));
        int gd;
        double e = out_err(dy, OPS_F32, ref, (size_t)n * c, &gd);
        worst = e > worst ? e : worst;
        CHECK_ERR(e, TOL32, gd, "batch_norm c %d rel %g", c, e);
        cudaFree(dx), cudaFree(dg), cudaFree(db), cudaFree(drm), cudaFree(drv), cudaFree(dy);
        hark_free(x), hark_free(g), hark_free(b), hark_free(rm), hark_free(rv), hark_free(ref);
    }
    printf("    batch_norm rel rms %.3g\n", worst);
}

/* ---- GLU, depthwise conv ------------------------------------------------------------------- */

GPU_TEST(cuda_glu_matches_ref)
{
    static const int ns[] = {1, 7, 257}, cs[] = {1, 33, 257};
    unsigned seed = 12;
    double worst[3] = {0, 0, 0};
    for (int in = 0; in < 3; in++)
        for (int ic = 0; ic < 3; ic++)
            for (int v = 0; v < 3; v++) {
                ops_dtype_t yt = v ? H16[v - 1] : OPS_F32;
                int n = ns[in], c = cs[ic];
                float *x = hrand((size_t)n * 2 * c, &seed, 3.0f), *b = hrand(2 * c, &seed, 0.5f);
                float *xb = hark_malloc((size_t)n * 2 * c * sizeof(float));
                for (int i = 0; i < n * 2 * c; i++)
                    xb[i] = x[i] + b[i % (2 * c)];
                float *ref = hark_malloc((size_t)n * c * sizeof(float));
                glu_ref(ref, xb, n, c);
                float *dx = dup_to(x, (size_t)n * 2 * c, OPS_F32), *db = dup_to(b, 2 * c, OPS_F32);
                void *dy = dalloc((size_t)n * c, yt);
                CHECK_OK(cuda_glu(dy, yt, dx, db, n, c, NULL, NULL));
                int gd;
                double e = out_err(dy, yt, ref, (size_t)n * c, &gd);
                worst[v] = e > worst[v] ? e : worst[v];
                CHECK_ERR(e, v ? tol16(yt, 1e-3) : TOL32, gd, "glu n %d c %d %s rel %g", n, c,
                          dt_name(yt), e);
                cudaFree(dx), cudaFree(db), cudaFree(dy);
                hark_free(x), hark_free(b), hark_free(xb), hark_free(ref);
            }
    printf("    glu rel rms: fp32 %.3g, fp16 out %.3g, bf16 out %.3g\n", worst[0], worst[1],
           worst[2]);
}

GPU_TEST(cuda_depthwise_conv_norm_act_matches_ref)
{
    enum { B = 4, T = 33 };
    static const int lens[B] = {T, 7, 1, 0};
    static const int cs[] = {7, 257};
    static const int kp[][3] = {{15, 14, 1}, {15, 7, 0}, {4, 3, 0}, {1, 0, 0}}; /* k, pad, left */
    unsigned seed = 13;
    double worst[3] = {0, 0, 0};
    for (int ic = 0; ic < 2; ic++)
        for (int ik = 0; ik < 4; ik++)
            for (int norm = 0; norm < 3; norm++)
                for (int v = 0; v < 3; v++) {
                    ops_dtype_t ot = v ? H16[v - 1] : OPS_F32;
                    int c = cs[ic], k = kp[ik][0], pad = kp[ik][1], has_left = kp[ik][2];
                    int act = (norm + ik) % 4;
                    size_t n = (size_t)B * T * c;
                    float *in = hrand(n, &seed, 2.0f),
                          *left = hrand((size_t)pad * c + 1, &seed, 1.0f);
                    float *w = hrand((size_t)c * k, &seed, 0.4f), *bias = hrand(c, &seed, 0.2f);
                    float *g = hrand(c, &seed, 0.2f), *beta = hrand(c, &seed, 0.2f);
                    float *rm = hrand(c, &seed, 0.3f), *rv = hrand(c, &seed, 0.3f);
                    for (int i = 0; i < c; i++)
                        g[i] += 1.0f, rv[i] += 0.7f;
                    float *ref = hark_malloc(n * sizeof(float));
                    for (int b = 0; b < B; b++) {
                        float *o = ref + (size_t)b * T * c;
                        depthwise_conv1d_ref(o, in + (size_t)b * T * c, has_left ? left : NULL, w,
                                             bias, T, c, k, pad, lens[b]);
                        if (norm == CUDA_NORM_BATCH)
                            batch_norm_ref(o, o, g, beta, rm, rv, T, c, 1e-5f);
                        if (norm == CUDA_NORM_LAYER)
                            layer_norm_ref(o, o, g, beta, T, c, 1e-5f);
                        activation_ref(o, o, (size_t)T * c, (ops_act_t)act);
                    }
                    float *din = dup_to(in, n, OPS_F32),
                          *dleft = dup_to(left, (size_t)pad * c + 1, OPS_F32);
                    float *dw = dup_to(w, (size_t)c * k, OPS_F32),
                          *dbias = dup_to(bias, c, OPS_F32);
                    float *dg = dup_to(g, c, OPS_F32), *dbeta = dup_to(beta, c, OPS_F32);
                    float *drm = dup_to(rm, c, OPS_F32), *drv = dup_to(rv, c, OPS_F32);
                    int *dl = NULL;
                    CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
                    CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
                    void *dout = dalloc(n, ot);
                    CHECK_OK(cuda_depthwise_conv_norm_act(dout, ot, din, has_left ? dleft : NULL,
                                                          dw, dbias, dl, B, T, c, k, pad,
                                                          (cuda_norm_t)norm, dg, dbeta, drm, drv,
                                                          1e-5f, (cuda_act_t)act, NULL, NULL));
                    int gd;
                    double e = out_err(dout, ot, ref, n, &gd);
                    worst[v] = e > worst[v] ? e : worst[v];
                    CHECK_ERR(e, v ? tol16(ot, 1e-3) : TOL32, gd,
                              "dwconv c %d k %d pad %d left %d norm %d act %d %s rel %g", c, k, pad,
                              has_left, norm, act, dt_name(ot), e);
                    cudaFree(din), cudaFree(dleft), cudaFree(dw), cudaFree(dbias), cudaFree(dg);
                    cudaFree(dbeta), cudaFree(drm), cudaFree(drv), cudaFree(dl), cudaFree(dout);
                    hark_free(in), hark_free(left), hark_free(w), hark_free(bias), hark_free(g);
                    hark_free(beta), hark_free(rm), hark_free(rv), hark_free(ref);
                }
    printf("    depthwise conv+norm+act rel rms: fp32 %.3g, fp16 out %.3g, bf16 out %.3g\n",
           worst[0], worst[1], worst[2]);
}

/* ---- softmax, attention -------------------------------------------------------------------- */

/* key range of row i of utterance length len, as the kernels and conformer.c's build_masks */
static void key_range(int i, int len, int m, int chunk, int left, int *lo, int *hi)
{
    int h = len < m ? len : m, l = 0;
    if (chunk > 0) {
        int ci = i / chunk, e = (ci + 1) * chunk;
        h = e < h ? e : h;
        if (left >= 0)
            l = (ci - left) * chunk > 0 ? (ci - left) * chunk : 0;
    }
    *lo = l, *hi = h;
}

GPU_TEST(cuda_softmax_masked_matches_ref)
{
    enum { B = 3, H = 3, T = 33 };
    static const int lens[B] = {T, 0, 20};
    static const int ch[][2] = {{0, -1}, {4, 1}, {5, -1}, {7, 0}};
    unsigned seed = 14;
    double worst[3] = {0, 0, 0};
    for (int c = 0; c < 4; c++)
        for (int v = 0; v < 3; v++) {
            ops_dtype_t yt = v ? H16[v - 1] : OPS_F32;
            size_t n = (size_t)B * H * T * T;
            float *x = hrand(n, &seed, 6.0f), *ref = hark_malloc(n * sizeof(float));
            memcpy(ref, x, n * sizeof(float));
            int lo[B * H * T], hi[B * H * T];
            for (int r = 0; r < B * H * T; r++)
                key_range(r % T, lens[r / (H * T)], T, ch[c][0], ch[c][1], &lo[r], &hi[r]);
            softmax_masked_ref(ref, lo, hi, B * H * T, T, T);
            float *dx = dup_to(x, n, OPS_F32);
            int *dl = NULL;
            CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
            CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
            void *dy = v ? dalloc(n, yt) : dx; /* fp32: in place */
            CHECK_OK(
                cuda_softmax_masked(dy, yt, dx, dl, B, H, T, T, ch[c][0], ch[c][1], NULL, NULL));
            int gd;
            double e = out_err(dy, yt, ref, n, &gd);
            worst[v] = e > worst[v] ? e : worst[v];
            CHECK_ERR(e, v ? tol16(yt, 1e-3) : TOL32, gd, "softmax chunk %d left %d %s rel %g",
                      ch[c][0], ch[c][1], dt_name(yt), e);
            if (v)
                cudaFree(dy);
            cudaFree(dx), cudaFree(dl);
            hark_free(x), hark_free(ref);
        }
    printf("    masked softmax rel rms: fp32 %.3g, fp16 out %.3g, bf16 out %.3g\n", worst[0],
           worst[1], worst[2]);
}

GPU_TEST(cuda_attention_matches_ref)
{
    enum { B = 3, T = 33, H = 4, DK = 8, D = H * DK };
    static const int lens[B] = {T, 20, 1};
    static const int ch[][2] = {{0, -1}, {4, 1}};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 15;
    double worst[3] = {0, 0, 0};
    for (int rel = 0; rel < 2; rel++)
        for (int c = 0; c < 2; c++)
            for (int v = 0; v < 3; v++) {
                ops_dtype_t dt = v ? H16[v - 1] : OPS_F32;
                int ld = 3 * D + 5; /* q | k | v | pad per row */
                size_t nq = (size_t)B * T * ld;
                float *qkv = hrand(nq, &seed, 1.0f), *bias = hrand(3 * D, &seed, 0.3f);
                float *p = hrand((size_t)T * D, &seed, 1.0f), *bu = hrand(D, &seed, 0.3f);
                float *bv = hrand(D, &seed, 0.3f);
                /* the device rounds q+b, k+b, v+b, p to dt: give the reference the same */
                float *q = hark_malloc((size_t)T * D * sizeof(float)),
                      *k = hark_malloc((size_t)T * D * sizeof(float));
                float *vv = hark_malloc((size_t)T * D * sizeof(float)),
                      *pr = hark_malloc((size_t)T * D * sizeof(float));
                float *ref = hark_malloc((size_t)B * T * D * sizeof(float));
                float *scr = hark_malloc(attention_scratch_floats(T, DK) * sizeof(float));
                float *qu = hark_malloc((size_t)T * D * sizeof(float));
                memcpy(pr, p, (size_t)T * D * sizeof(float));
                for (int b = 0; b < B; b++) {
                    for (int r = 0; r < T; r++)
                        for (int j = 0; j < D; j++) {
                            const float *row = qkv + ((size_t)b * T + r) * ld;
                            q[r * D + j] = row[j] + bias[j];
                            k[r * D + j] = row[D + j] + bias[D + j];
                            vv[r * D + j] = row[2 * D + j] + bias[2 * D + j];
                        }
                    int lo[T], hi[T];
                    for (int i = 0; i < T; i++)
                        key_range(i, lens[b], T, ch[c][0], ch[c][1], &lo[i], &hi[i]);
                    if (v) { /* 16-bit operands: (q + bu) and (q + bv) rounded separately */
                        round_to(k, (size_t)T * D, dt);
                        round_to(vv, (size_t)T * D, dt);
                        round_to(pr, (size_t)T * D, dt);
                    }
                    if (v && rel) {
                        /* reference with rounded q+bu / q+bv: run the two terms through bu=bv=0 */
                        float *qv = hark_malloc((size_t)T * D * sizeof(float));
                        float *s1 = hark_malloc((size_t)T * T * sizeof(float));
                        for (int i = 0; i < T * D; i++)
                            qu[i] = q[i] + bu[i % D], qv[i] = q[i] + bv[i % D];
                        round_to(qu, (size_t)T * D, dt);
                        round_to(qv, (size_t)T * D, dt);
                        float sc = 1.0f / sqrtf((float)DK);
                        for (int h = 0; h < H; h++) {
                            matmul_ref(s1, qu + h * DK, k + h * DK, T, T, DK, D, D, T, 1, sc, 0.0f);
                            matmul_ref(s1, qv + h * DK, pr + h * DK, T, T, DK, D, D, T, 1, sc,
                                       1.0f);
                            softmax_masked_ref(s1, lo, hi, T, T, T);
                            round_to(s1, (size_t)T * T, dt);
                            matmul_ref(ref + (size_t)b * T * D + h * DK, s1, vv + h * DK, T, DK, T,
                                       T, D, D, 0, 1.0f, 0.0f);
                        }
                        hark_free(qv), hark_free(s1);
                    } else {
                        if (v)
                            round_to(q, (size_t)T * D, dt);
                        attention_ref(ref + (size_t)b * T * D, scr, q, k, vv, rel ? pr : NULL,
                                      rel ? bu : NULL, rel ? bv : NULL, lo, hi, T, T, H, DK,
                                      1.0f / sqrtf((float)DK));
                    }
                }
                float *dqkv = dup_to(qkv, nq, OPS_F32), *dbias = dup_to(bias, 3 * D, OPS_F32);
                float *dp = dup_to(p, (size_t)T * D, OPS_F32), *dbu = dup_to(bu, D, OPS_F32);
                float *dbv = dup_to(bv, D, OPS_F32);
                int *dl = NULL;
                CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
                CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
                void *scratch = NULL;
                CHECK(cudaMalloc(&scratch, cuda_attention_scratch_bytes(B, T, H, DK, rel, dt)) ==
                      cudaSuccess);
                void *dctx = dalloc((size_t)B * T * D, dt);
                hark_err_t err = {0};
                CHECKF(cuda_attention(dctx, dt, scratch, dqkv, dqkv + D, dqkv + 2 * D, ld, dbias,
                                      dbias + D, dbias + 2 * D, rel ? dp : NULL, rel ? dbu : NULL,
                                      rel ? dbv : NULL, dl, ch[c][0], ch[c][1], B, T, H, DK,
                                      1.0f / sqrtf((float)DK), g, &err) == HARK_OK,
                       "%s", err.msg);
                int gd;
                double e = out_err(dctx, dt, ref, (size_t)B * T * D, &gd);
                worst[v] = e > worst[v] ? e : worst[v];
                CHECK_ERR(e, tol_of(dt), gd, "attention rel_pos %d chunk %d %s rel %g", rel,
                          ch[c][0], dt_name(dt), e);
                cudaFree(dqkv), cudaFree(dbias), cudaFree(dp), cudaFree(dbu), cudaFree(dbv);
                cudaFree(dl), cudaFree(scratch), cudaFree(dctx);
                hark_free(qkv), hark_free(bias), hark_free(p), hark_free(bu), hark_free(bv);
                hark_free(q), hark_free(k), hark_free(vv), hark_free(pr), hark_free(ref);
                hark_free(scr), hark_free(qu);
            }
    printf("    attention rel rms: fp32 %.3g, fp16 %.3g, bf16 %.3g\n", worst[0], worst[1],
           worst[2]);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_log_softmax_matches_ref)
{
    static const int ns[] = {1, 7, 33, 99}, ms[] = {1, 7, 5002};
    unsigned seed = 16;
    double worst = 0;
    for (int in = 0; in < 4; in++)
        for (int im = 0; im < 3; im++) {
            /* n = batch x t_rows; utterance b keeps t_rows - b rows */
            int n = ns[in], m = ms[im], t_rows = n % 3 == 0 ? n / 3 : n, batch = n / t_rows;
            int lens[8] = {0};
            for (int b = 0; b < batch; b++)
                lens[b] = t_rows - b;
            float *x = hrand((size_t)n * m, &seed, 8.0f), *b = hrand(m, &seed, 1.0f);
            float *ref = hark_malloc((size_t)n * m * sizeof(float));
            for (int i = 0; i < n * m; i++)
                ref[i] = x[i] + b[i % m];
            log_softmax_ref(ref, ref, n, m);
            for (int r = 0; r < n; r++)
                if (r % t_rows >= lens[r / t_rows])
                    memset(ref + (size_t)r * m, 0, (size_t)m * sizeof(float));
            float *dx = dup_to(x, (size_t)n * m, OPS_F32), *db = dup_to(b, m, OPS_F32);
            float *dy = dalloc((size_t)n * m, OPS_F32);
            int *dl = NULL;
            CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
            CHECK_OK(cuda_set_lens(dl, lens, batch, NULL, NULL));
            CHECK_OK(cuda_log_softmax(dy, dx, db, dl, t_rows, n, m, NULL, NULL));
            int gd;
            double e = out_err(dy, OPS_F32, ref, (size_t)n * m, &gd);
            worst = e > worst ? e : worst;
            CHECK_ERR(e, TOL32, gd, "log_softmax n %d m %d rel %g", n, m, e);
            /* in place, no lengths */
            log_softmax_ref(ref, x, n, m);
            CHECK_OK(cuda_log_softmax(dx, dx, NULL, NULL, 0, n, m, NULL, NULL));
            e = out_err(dx, OPS_F32, ref, (size_t)n * m, &gd);
            CHECK_ERR(e, TOL32, gd, "log_softmax in place n %d m %d rel %g", n, m, e);
            cudaFree(dx), cudaFree(db), cudaFree(dy), cudaFree(dl);
            hark_free(x), hark_free(b), hark_free(ref);
        }
    printf("    log_softmax rel rms %.3g\n", worst);
}

/* ---- conv2d, CMVN, positions, padding ------------------------------------------------------ */

GPU_TEST(cuda_conv2d_matches_ref)
{
    /* cin, h, w, cout, k, stride: direct (K <= 32) and im2col + GEMM paths */
    static const int cs[][6] = {{1, 33, 19, 7, 3, 2},
                                {1, 80, 80, 16, 3, 2},
                                {5, 33, 19, 7, 3, 2},
                                {4, 37, 23, 9, 5, 3},
                                {16, 9, 11, 33, 3, 2}};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 17;
    double worst[3] = {0, 0, 0};
    enum { B = 2 };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++)
        for (int v = 0; v < 3; v++) {
            ops_dtype_t io = v ? H16[v - 1] : OPS_F32;
            int cin = cs[c][0], h = cs[c][1], w = cs[c][2], cout = cs[c][3], k = cs[c][4],
                s = cs[c][5];
            int relu = (int)(c & 1) == 0, ho = (h - k) / s + 1, wo = (w - k) / s + 1;
            size_t nin = (size_t)B * h * cin * w, nout = (size_t)B * ho * cout * wo;
            size_t nw = (size_t)cout * cin * k * k;
            float *in = hrand(nin, &seed, 1.0f), *wt = hrand(nw, &seed, 0.3f),
                  *b = hrand(cout, &seed, 0.2f);
            round_to(in, nin, io);
            float *w_round = hark_malloc(nw * sizeof(float));
            memcpy(w_round, wt, nw * sizeof(float));
            int direct = cin * k * k <= 32;
            if (!direct) /* the GEMM path uses the io-dtype weights */
                round_to(w_round, nw, io);
            float *ref = hark_malloc(nout * sizeof(float));
            float *col = hark_malloc(conv2d_col_floats(cin, cout, k, k, wo) * sizeof(float));
            for (int bb = 0; bb < B; bb++) {
                float *o = ref + (size_t)bb * ho * cout * wo;
                conv2d_ref(o, col, in + (size_t)bb * h * cin * w, w_round, b, cin, h, w, cout, k, k,
                           s);
                if (relu)
                    relu_ref(o, o, (size_t)ho * cout * wo);
            }
            void *din = dup_to(in, nin, io), *dw_io = dup_to(wt, nw, io);
            float *dw32 = dup_to(wt, nw, OPS_F32), *db = dup_to(b, cout, OPS_F32);
            void *dout = dalloc(nout, io);
            /* scratch for 3 output rows: several blocks, the last one partial */
            size_t sb = cuda_conv2d_scratch_bytes(3, cin, cout, k, k, wo, io);
            void *scr = NULL;
            CHECK(cudaMalloc(&scr, sb ? sb : 1) == cudaSuccess);
            hark_err_t err = {0};
            CHECKF(cuda_conv2d(dout, scr, sb, din, dw32, dw_io, db, io, B, cin, h, w, cout, k, k, s,
                               relu, g, &err) == HARK_OK,
                   "%s", err.msg);
            int gd;
            double e = out_err(dout, io, ref, nout, &gd);
            worst[v] = e > worst[v] ? e : worst[v];
            CHECK_ERR(e, v ? tol16(io, 2e-3) : TOL32, gd, "conv2d case %zu %s rel %g", c,
                      dt_name(io), e);
            cudaFree(din), cudaFree(dw_io), cudaFree(dw32), cudaFree(db), cudaFree(dout),
                cudaFree(scr);
            hark_free(in), hark_free(wt), hark_free(w_round), hark_free(b), hark_free(ref),
                hark_free(col);
        }
    printf("    conv2d rel rms: fp32 %.3g, fp16 %.3g (tol 2e-3: fp16 in/out), bf16 %.3g (8x)\n",
           worst[0], worst[1], worst[2]);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_cmvn_and_padding)
{
    enum { B = 3, T = 33, F = 80 };
    static const int lens[B] = {T, 5, 0};
    unsigned seed = 18;
    size_t n = (size_t)B * T * F;
    float *x = hrand(n, &seed, 10.0f), *mean = hrand(F, &seed, 3.0f), *istd = hrand(F, &seed, 0.2f);
    for (int i = 0; i < F; i++)
        istd[i] += 0.5f;
    for (size_t i = 0; i < n; i++) /* garbage past each length */
        if ((int)((i / F) % T) >= lens[i / ((size_t)T * F)])
            x[i] = NAN;
    float *ref = hark_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        ref[i] = (int)((i / F) % T) < lens[i / ((size_t)T * F)] ? (x[i] - mean[i % F]) * istd[i % F]
                                                                : 0.0f;
    float *dx = dup_to(x, n, OPS_F32), *dm = dup_to(mean, F, OPS_F32),
          *di = dup_to(istd, F, OPS_F32);
    int *dl = NULL;
    CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
    CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
    for (int v = 0; v < 3; v++) {
        ops_dtype_t ot = v ? H16[v - 1] : OPS_F32;
        void *dy = dalloc(n, ot);
        CHECK_OK(cuda_cmvn(dy, ot, dx, dm, di, dl, B, T, F, NULL, NULL));
        int gd;
        double e = out_err(dy, ot, ref, n, &gd);
        CHECK_ERR(e, v ? tol16(ot, 1e-3) : 1e-7, gd, "cmvn %s rel %g", dt_name(ot), e);
        cudaFree(dy);
    }
    /* zero_pad_rows: rows past each length become 0, others unchanged */
    float *y = hrand(n, &seed, 1.0f);
    float *dy = dup_to(y, n, OPS_F32);
    CHECK_OK(cuda_zero_pad_rows(dy, dl, B, T, F, NULL, NULL));
    for (size_t i = 0; i < n; i++)
        if ((int)((i / F) % T) >= lens[i / ((size_t)T * F)])
            y[i] = 0.0f;
    int gd;
    double e = out_err(dy, OPS_F32, y, n, &gd);
    CHECK_ERR(e, 0.0, gd, "zero_pad_rows rel %g", e);
    /* cast round trip f32 -> 16-bit -> f32: within half an ulp (fp16 2^-11, bf16 2^-8) */
    for (int h = 0; h < 2; h++) {
        void *h16 = dalloc(n, H16[h]);
        CHECK_OK(cuda_cast(h16, H16[h], dy, OPS_F32, n, NULL, NULL));
        e = out_err(h16, H16[h], y, n, &gd);
        CHECK_ERR(e, tol16(H16[h], 4.9e-4), gd, "cast %s rel %g", dt_name(H16[h]), e);
        cudaFree(h16);
    }
    /* fp16 -> bf16 -> fp16 (through float): within half a bf16 ulp of the fp16 values */
    void *a16 = dalloc(n, OPS_F16), *b16 = dalloc(n, OPS_BF16), *c16 = dalloc(n, OPS_F16);
    round_to(y, n, OPS_F16);
    CHECK_OK(cuda_cast(a16, OPS_F16, dy, OPS_F32, n, NULL, NULL));
    CHECK_OK(cuda_cast(b16, OPS_BF16, a16, OPS_F16, n, NULL, NULL));
    CHECK_OK(cuda_cast(c16, OPS_F16, b16, OPS_BF16, n, NULL, NULL));
    e = out_err(c16, OPS_F16, y, n, &gd);
    CHECK_ERR(e, 3.9e-3, gd, "cast fp16 -> bf16 -> fp16 rel %g", e);
    cudaFree(a16), cudaFree(b16), cudaFree(c16);
    cudaFree(dy), cudaFree(dx), cudaFree(dm), cudaFree(di), cudaFree(dl);
    hark_free(x), hark_free(mean), hark_free(istd), hark_free(ref), hark_free(y);
}

GPU_TEST(cuda_pos_enc_matches_ref)
{
    static const int sz[][2] = {{5000, 256}, {7, 6}, {33, 7}, {1, 2}};
    double worst = 0;
    for (int c = 0; c < 4; c++) {
        int n = sz[c][0], d = sz[c][1];
        float *ref = hark_malloc((size_t)n * d * sizeof(float));
        pos_enc_table_ref(ref, n, d);
        float *dpe = dalloc((size_t)n * d, OPS_F32);
        CHECK_OK(cuda_pos_enc(dpe, n, d, NULL, NULL));
        float *h = hark_malloc((size_t)n * d * sizeof(float));
        CHECK(dup_from(h, dpe, (size_t)n * d, OPS_F32) == 0);
        double e = test_max_abs_diff(h, ref, (size_t)n * d);
        worst = e > worst ? e : worst;
        CHECKF(guard_ok(dpe, (size_t)n * d, OPS_F32), "pos_enc guard");
        CHECKF(e <= 1e-5, "pos_enc %dx%d max abs %g", n, d, e); /* sin/cos of args up to 5000 */
        cudaFree(dpe);
        hark_free(ref), hark_free(h);
    }
    printf("    pos_enc max abs %.3g (tol 1e-5)\n", worst);
}

GPU_TEST(cuda_ops_reject_bad_arguments)
{
    hark_err_t err = {0};
    CHECK(cuda_depthwise_conv_norm_act(NULL, OPS_F32, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 3, 3,
                                       CUDA_NORM_NONE, NULL, NULL, NULL, NULL, 1e-5f, CUDA_ACT_NONE,
                                       NULL, &err) == HARK_ERR_INVALID_ARG);
    int lens[CUDA_MAX_LENS + 1] = {0};
    CHECK(cuda_set_lens(NULL, lens, CUDA_MAX_LENS + 1, NULL, &err) == HARK_ERR_TOO_LARGE);
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    CHECK(cuda_conv2d(NULL, NULL, 0, NULL, NULL, NULL, NULL, OPS_F32, 1, 8, 9, 9, 4, 3, 3, 2, 1, g,
                      &err) == HARK_ERR_INVALID_ARG); /* im2col path without scratch */
    CHECK(strstr(err.msg, "scratch") != NULL);
    ops_cuda_destroy(g);
}
/* ---- FP16 path: gemm_f16.cu, attention_f16.cu, rows_f16.cu ---------------------------------- */

/* half outputs from identical half operands: output rounding (~3e-4) + order; in BF16
 * tol16(OPS_BF16, TOL_H) = 1.6e-2 (8x: unit roundoff 2^-8 against 2^-11) */
#define TOL_H 2e-3

/* the CPU side of the GEMM epilogues, in place over acc (m, n) -> ref (as the out layout) */
static void epi_ref(float *ref, const float *acc, const float *bias, int mode, int act, int m,
                    int n, const float *x0, float alpha, float beta, const float *pe, int pe_rows)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float v = acc[(size_t)i * n + j] + (bias ? bias[j] : 0.0f);
            if (mode == CUDA_EPI_F16) {
                activation_ref(&v, &v, 1, (ops_act_t)act);
                ref[(size_t)i * n + j] = v;
            } else if (mode == CUDA_EPI_RESID32) {
                ref[(size_t)i * n + j] = beta * x0[(size_t)i * n + j] + alpha * v +
                                         (pe ? pe[(size_t)(i % pe_rows) * n + j] : 0.0f);
            } else {
                ref[(size_t)i * n + j] = v;
            }
        }
}

GPU_TEST(cuda_hgemm_epilogues_match_ref)
{
    /* m, n, k, lda pad; the last one takes the 128x128 tiles */
    static const int sz[][4] = {{1, 8, 8, 0},         {37, 40, 72, 8}, {300, 264, 136, 0},
                                {130, 1000, 256, 16}, {5, 13, 24, 0},  {2100, 2048, 64, 0},
                                {4100, 520, 264, 8}};
    unsigned seed = 31;
    static const ops_gemm_backend_t bes[3] = {OPS_GEMM_MMA, OPS_GEMM_LT, OPS_GEMM_WGMMA};
    static const char *const names[4] = {"auto", "mma", "cublasLt", "wgmma"};
    double worst[2][3][3];
    memset(worst, 0, sizeof worst);
    int runs[4] = {0, 0, 0, 0};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    for (int h = 0; h < 2; h++)        /* fp16, bf16 */
        for (int be = 0; be < 3; be++) /* mma.sync; cuBLASLt where it can; wgmma where it can */
            for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++)
                for (int mode = CUDA_EPI_F16; mode <= CUDA_EPI_F32; mode++) {
                    ops_dtype_t ht = H16[h];
                    ops_cuda_set_gemm_backend(g, bes[be]);
                    int m = sz[c][0], n = sz[c][1], k = sz[c][2], lda = k + sz[c][3];
                    size_t na = (size_t)m * lda, nw = (size_t)n * k, nc = (size_t)m * n;
                    float *a = hrand(na, &seed, 1.0f), *w = hrand(nw, &seed, 0.3f);
                    float *bias = hrand(n, &seed, 0.5f), *x0 = hrand(nc, &seed, 1.0f);
                    float *pe = hrand((size_t)7 * n, &seed, 0.5f);
                    round_to(a, na, ht);
                    round_to(w, nw, ht);
                    float *acc = hark_malloc(nc * sizeof(float)),
                          *ref = hark_malloc(nc * sizeof(float));
                    matmul_ref(acc, a, w, m, n, k, lda, k, n, 1, 1.0f, 0.0f);
                    int act = (int)(c % (CUDA_ACT_SWOOSHR + 1)); /* 7 shapes, 7 acts */
                    epi_ref(ref, acc, c % 2 ? bias : NULL, mode, act, m, n, x0, 0.5f, 1.0f,
                            c % 3 ? pe : NULL, 7);
                    void *da = dup_to(a, na, ht), *dw = dup_to(w, nw, ht);
                    float *db = dup_to(bias, n, OPS_F32), *dpe = dup_to(pe, (size_t)7 * n, OPS_F32);
                    for (int i = 0; i < n; i++)
                        bias[i] *= 0.5f; /* alpha · bias, for cuBLASLt */
                    float *dba = dup_to(bias, n, OPS_F32);
                    for (int i = 0; i < n; i++)
                        bias[i] *= 2.0f;
                    void *dbh = dup_to(bias, n, ht); /* 16-bit bias (cuBLASLt): an extra rounding */
                    int half = mode == CUDA_EPI_F16;
                    size_t nout = nc;
                    ops_dtype_t ot = half ? ht : OPS_F32;
                    void *dout =
                        mode == CUDA_EPI_RESID32 ? dup_to(x0, nc, OPS_F32) : dalloc(nout, ot);
                    if (mode == CUDA_EPI_RESID32) { /* the guard after a copied buffer: poison it */
                        cudaMemset((float *)dout + nc, 0xff, GUARD * sizeof(float));
                    }
                    cuda_epi_t e;
                    memset(&e, 0, sizeof e);
                    e.mode = (cuda_epi_mode_t)mode;
                    e.act = (cuda_act_t)act;
                    e.bias = c % 2 ? db : NULL;
                    e.out = dout;
                    e.ldo = n;
                    e.alpha = 0.5f;
                    e.beta = 1.0f;
                    e.pe = c % 3 ? dpe : NULL;
                    e.pe_rows = 7;
                    e.ld_pe = n;
                    e.bias_alpha = dba;
                    e.bias_h = dbh;
                    e.dt = ht;
                    hark_err_t err = {0};
                    CHECKF(cuda_hgemm(&e, da, lda, dw, m, n, k, g, &err) == HARK_OK, "%s", err.msg);
                    int ran = (int)ops_cuda_last_gemm(g);
                    runs[ran]++;
                    int gd;
                    double er = out_err(dout, ot, ref, nout, &gd);
                    worst[h][be][mode] = er > worst[h][be][mode] ? er : worst[h][be][mode];
                    CHECK_ERR(er, half ? tol16(ht, TOL_H) : TOL32, gd,
                              "hgemm %s %dx%dx%d lda %d epilogue %d act %d on %s rel %g",
                              dt_name(ht), m, n, k, lda, mode, act, names[ran], er);
                    cudaFree(da), cudaFree(dw), cudaFree(db), cudaFree(dpe), cudaFree(dout),
                        cudaFree(dba);
                    cudaFree(dbh);
                    hark_free(a), hark_free(w), hark_free(bias), hark_free(x0), hark_free(pe);
                    hark_free(acc), hark_free(ref);
                }
    for (int h = 0; h < 2; h++)
        for (int be = 0; be < 3; be++)
            printf("    hgemm %s %s (where it can) rel rms: 16-bit out %.3g, resid32 %.3g, f32 "
                   "%.3g\n",
                   dt_name(H16[h]), names[bes[be]], worst[h][be][0], worst[h][be][1],
                   worst[h][be][2]);
    printf("    runs: mma %d, cublasLt %d, wgmma %d\n", runs[OPS_GEMM_MMA], runs[OPS_GEMM_LT],
           runs[OPS_GEMM_WGMMA]);
    CHECK(runs[OPS_GEMM_LT] > 0);
    CHECKF(wgmma_runs_ok(g, runs[OPS_GEMM_WGMMA], 1), "%d wgmma runs on the %s path",
           runs[OPS_GEMM_WGMMA], gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    hark_err_t err = {0};
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.out = &e;
    CHECK(cuda_hgemm(&e, NULL, 12, NULL, 4, 4, 12, g, &err) == HARK_ERR_INVALID_ARG);
    e.mode = (cuda_epi_mode_t)99;
    CHECK(cuda_hgemm(&e, NULL, 16, NULL, 4, 5, 16, g, &err) == HARK_ERR_INVALID_ARG);
    ops_cuda_destroy(g);
}

/* The error of an updated residual stream dx (n floats; got: host scratch) against ref: with
 * update_only, x0 is taken off both sides first (the update alone); NaN anywhere is infinite. */
static double x_update_err(float *got, float *ref, const float *x0, const float *dx, size_t n,
                           int update_only, int *gd)
{
    if (dup_from(got, dx, n, OPS_F32) != 0)
        return INFINITY;
    if (update_only)
        for (size_t i = 0; i < n; i++) {
            got[i] -= x0[i];
            ref[i] -= x0[i];
        }
    double er = test_rel_rms(got, ref, n);
    *gd = guard_ok(dx, n, OPS_F32);
    for (size_t i = 0; i < n; i++)
        if (got[i] != got[i])
            er = INFINITY;
    return er;
}

/* The norms after a residual update (cuda_row_norms_t), case nk: 0 none; 1 hn = LN(x) (pre-norm
 * after the macaron FFN); 2 x = LN1(x), hn = LN2(x) (block end, pre-norm); 3 x = hn = LN2(LN1(x)),
 * LN1 without affine, hn written over `over` (block end, post-norm). Sets nm (device g/b: dng,
 * dnb, 2d each; hn: dh) and applies the case to ref (m, d), the normed half output's reference
 * to href. */
static void norms_case(int nk, cuda_row_norms_t *nm, float *ref, float *href, const float *ng,
                       const float *nb, float *dng, float *dnb, void *dh, void *over, int m, int d)
{
    if (nk == 1) {
        nm->g1 = dng, nm->n_b1 = dnb, nm->ln1 = 1, nm->h_out = dh;
        layer_norm_ref(href, ref, ng, nb, m, d, 1e-5f);
    } else if (nk == 2) {
        nm->x_sel = 1, nm->g1 = dng, nm->n_b1 = dnb, nm->ln1 = 1;
        nm->g2 = dng + d, nm->n_b2 = dnb + d, nm->ln2 = 1, nm->h_out = dh;
        layer_norm_ref(ref, ref, ng, nb, m, d, 1e-5f);
        layer_norm_ref(href, ref, ng + d, nb + d, m, d, 1e-5f);
    } else if (nk == 3) {
        nm->x_sel = 2, nm->g1 = NULL, nm->n_b1 = NULL, nm->ln1 = 1;
        nm->g2 = dng + d, nm->n_b2 = dnb + d, nm->ln2 = 1, nm->h_out = over;
        layer_norm_ref(ref, ref, NULL, NULL, m, d, 1e-5f);
        layer_norm_ref(ref, ref, ng + d, nb + d, m, d, 1e-5f);
        memcpy(href, ref, (size_t)m * d * sizeof(float));
    }
}

GPU_TEST(cuda_ffn_f16_matches_ref)
{
    /* m (rows: partial tiles, one row, several blocks), f, act, biases, norms after (0: none,
     * 1: hn = LN(x), 2: x = LN1(x), hn = LN2(x), 3: x = LN2(LN1(x)) = hn written over a) */
    static const int sz[][5] = {
        {1, 64, CUDA_ACT_SWISH, 1, 1},     {77, 192, CUDA_ACT_RELU, 0, 0},
        {128, 2048, CUDA_ACT_SWISH, 1, 2}, {300, 1024, CUDA_ACT_GELU, 1, 3},
        {1000, 2048, CUDA_ACT_NONE, 1, 0}, {4133, 512, CUDA_ACT_SWISH, 0, 3},
        {33, 384, CUDA_ACT_SWOOSHL, 1, 0}, {65, 256, CUDA_ACT_DSWISH, 1, 1}};
    const int d = 256;
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    hark_err_t err = {0};
    if (!cuda_ffn_f16_fits(g, d, 2048)) {
        CHECK(cuda_ffn_f16(NULL, NULL, NULL, NULL, NULL, NULL, 4, d, 64, CUDA_ACT_SWISH, 1.0f, NULL,
                           g, &err) == HARK_ERR_INVALID_ARG);
        ops_cuda_destroy(g);
        CHECK(ops_cuda_path(g) != GPU_PATH_HOPPER); /* d = 256, f = 2048 fit on Hopper */
        SKIP("the fused FFN kernel runs on the Hopper path only (this GPU, or HARK_GPU_ARCH=sm80)");
    }
    unsigned seed = 77;
    double worst[2] = {0, 0}, worst_h[2] = {0, 0};
    for (int ih = 0; ih < 2; ih++)
        for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
            ops_dtype_t ht = H16[ih];
            int m = sz[c][0], f = sz[c][1], act = sz[c][2], bias = sz[c][3], nk = sz[c][4];
            float alpha = c % 2 ? 1.0f : 0.5f;
            size_t na = (size_t)m * d, nw = (size_t)f * d, nh = (size_t)m * f;
            float *a = hrand(na, &seed, 1.0f), *w1 = hrand(nw, &seed, 0.1f);
            float *w2 = hrand(nw, &seed, 0.05f), *b1 = hrand(f, &seed, 0.5f);
            float *b2 = hrand(d, &seed, 0.5f), *x0 = hrand(na, &seed, 0.1f);
            float *ng = hrand(2 * d, &seed, 1.0f), *nb = hrand(2 * d, &seed, 0.3f);
            round_to(a, na, ht);
            round_to(w1, nw, ht);
            round_to(w2, nw, ht);
            float *h = hark_malloc(nh * sizeof(float)), *acc = hark_malloc(na * sizeof(float));
            float *ref = hark_malloc(na * sizeof(float)), *href = hark_malloc(na * sizeof(float));
            matmul_ref(h, a, w1, m, f, d, d, d, f, 1, 1.0f, 0.0f);
            epi_ref(h, h, bias ? b1 : NULL, CUDA_EPI_F16, act, m, f, NULL, 0.0f, 0.0f, NULL, 0);
            round_to(h, nh, ht);
            matmul_ref(acc, h, w2, m, d, f, f, f, d, 1, 1.0f, 0.0f);
            epi_ref(ref, acc, bias ? b2 : NULL, CUDA_EPI_RESID32, CUDA_ACT_NONE, m, d, x0, alpha,
                    1.0f, NULL, 0);
            cuda_row_norms_t nm = {0, NULL, NULL, NULL, NULL, 0, 0, NULL, 1e-5f};
            void *da = dup_to(a, na, ht), *dw1 = dup_to(w1, nw, ht);
            void *dw2 = dup_to(w2, nw, ht), *dh = dalloc(na, ht);
            float *db1 = dup_to(b1, f, OPS_F32), *db2 = dup_to(b2, d, OPS_F32);
            float *dng = dup_to(ng, 2 * d, OPS_F32), *dnb = dup_to(nb, 2 * d, OPS_F32);
            float *dx = dup_to(x0, na, OPS_F32);
            norms_case(nk, &nm, ref, href, ng, nb, dng, dnb, dh, da, m, d);
            /* fp16 through its old name, the wrapper of cuda_ffn */
            if (ht == OPS_F16)
                CHECKF(cuda_ffn_f16(dx, da, dw1, bias ? db1 : NULL, dw2, bias ? db2 : NULL, m, d, f,
                                    (cuda_act_t)act, alpha, nk ? &nm : NULL, g, &err) == HARK_OK,
                       "%s", err.msg);
            else
                CHECKF(cuda_ffn(dx, ht, da, dw1, bias ? db1 : NULL, dw2, bias ? db2 : NULL, m, d, f,
                                (cuda_act_t)act, alpha, nk ? &nm : NULL, g, &err) == HARK_OK,
                       "%s", err.msg);
            /* without norms: the FFN's part of x alone (x0 subtracted on both sides) */
            float *got = hark_malloc(na * sizeof(float));
            int gd;
            double er = x_update_err(got, ref, x0, dx, na, nk == 0 || nk == 1, &gd);
            worst[ih] = er > worst[ih] ? er : worst[ih];
            CHECK_ERR(er, tol16(ht, TOL_H), gd,
                      "ffn %s m %d f %d act %d bias %d norms %d: x rel %g", dt_name(ht), m, f, act,
                      bias, nk, er);
            if (nk) {
                double eh = out_err(nm.h_out, ht, href, na, &gd);
                worst_h[ih] = eh > worst_h[ih] ? eh : worst_h[ih];
                CHECK_ERR(eh, tol16(ht, TOL_H), gd, "ffn %s m %d f %d norms %d: hn rel %g",
                          dt_name(ht), m, f, nk, eh);
            }
            cudaFree(da), cudaFree(dw1), cudaFree(dw2), cudaFree(db1), cudaFree(db2), cudaFree(dx);
            cudaFree(dh), cudaFree(dng), cudaFree(dnb);
            hark_free(a), hark_free(w1), hark_free(w2), hark_free(b1), hark_free(b2), hark_free(x0);
            hark_free(h), hark_free(acc), hark_free(ref), hark_free(got), hark_free(href);
            hark_free(ng), hark_free(nb);
        }
    for (int ih = 0; ih < 2; ih++)
        printf("    fused ffn %s rel rms (worst): x update %.3g, normed 16-bit out %.3g\n",
               dt_name(H16[ih]), worst[ih], worst_h[ih]);
    CHECK(cuda_ffn_f16(NULL, NULL, NULL, NULL, NULL, NULL, 4, 128, 64, CUDA_ACT_SWISH, 1.0f, NULL,
                       g, &err) == HARK_ERR_INVALID_ARG);
    CHECK(cuda_ffn_f16(NULL, NULL, NULL, NULL, NULL, NULL, 4, d, 100, CUDA_ACT_SWISH, 1.0f, NULL, g,
                       &err) == HARK_ERR_INVALID_ARG);
    float one = 0.0f; /* non-NULL pointers: a non-16-bit type is refused before any launch */
    CHECK(cuda_ffn(&one, OPS_F32, &one, &one, NULL, &one, NULL, 4, d, 64, CUDA_ACT_SWISH, 1.0f,
                   NULL, g, &err) == HARK_ERR_INVALID_ARG);
    ops_cuda_destroy(g);
}

/* The GLU epilogue: out (m, n/2) half = v[2i] · sigmoid(v[2i + 1]), v = a · wᵀ + bias (the
 * pointwise_conv1 of the conv module with interleaved (value, gate) rows) */
GPU_TEST(cuda_hgemm_glu_matches_ref)
{
    static const int sz[][3] = {{2, 6, 8}, {37, 40, 72}, {300, 512, 256}, {4100, 512, 256}};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 79;
    double worst[2] = {0, 0};
    int wg_runs = 0;
    for (int ih = 0; ih < 2; ih++)
        for (int be = 0; be < 2; be++)
            for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
                ops_dtype_t ht = H16[ih];
                ops_cuda_set_gemm_backend(g, be ? OPS_GEMM_AUTO : OPS_GEMM_MMA);
                int m = sz[c][0], n = sz[c][1], k = sz[c][2], half_n = n / 2, has_b = (c + be) % 2;
                float *a = hrand((size_t)m * k, &seed, 1.0f),
                      *w = hrand((size_t)n * k, &seed, 0.2f);
                float *b = hrand(n, &seed, 0.5f);
                round_to(a, (size_t)m * k, ht);
                round_to(w, (size_t)n * k, ht);
                float *v = hark_malloc((size_t)m * n * sizeof(float));
                float *ref = hark_malloc((size_t)m * half_n * sizeof(float));
                matmul_ref(v, a, w, m, n, k, k, k, n, 1, 1.0f, 0.0f);
                for (int r = 0; r < m; r++)
                    for (int i = 0; i < half_n; i++) {
                        float x = v[(size_t)r * n + 2 * i] + (has_b ? b[2 * i] : 0.0f);
                        float gt = v[(size_t)r * n + 2 * i + 1] + (has_b ? b[2 * i + 1] : 0.0f);
                        ref[(size_t)r * half_n + i] = x / (1.0f + expf(-gt));
                    }
                void *da = dup_to(a, (size_t)m * k, ht), *dw = dup_to(w, (size_t)n * k, ht);
                float *db = dup_to(b, n, OPS_F32);
                void *dout = dalloc((size_t)m * half_n, ht);
                cuda_epi_t e;
                memset(&e, 0, sizeof e);
                e.mode = CUDA_EPI_GLU16;
                e.out = dout;
                e.ldo = half_n;
                e.bias = has_b ? db : NULL;
                e.dt = ht;
                hark_err_t err = {0};
                CHECKF(cuda_hgemm(&e, da, k, dw, m, n, k, g, &err) == HARK_OK, "%s", err.msg);
                wg_runs += ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA;
                int gd;
                double er = out_err(dout, ht, ref, (size_t)m * half_n, &gd);
                worst[ih] = er > worst[ih] ? er : worst[ih];
                CHECK_ERR(er, tol16(ht, TOL_H), gd, "glu gemm %s m %d n %d k %d (%s) rel %g",
                          dt_name(ht), m, n, k,
                          ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA ? "wgmma" : "mma", er);
                cudaFree(da), cudaFree(dw), cudaFree(db), cudaFree(dout);
                hark_free(a), hark_free(w), hark_free(b), hark_free(v), hark_free(ref);
            }
    printf("    GLU epilogue rel rms: fp16 %.3g, bf16 %.3g (%d runs on wgmma)\n", worst[0],
           worst[1], wg_runs);
    CHECKF(wgmma_runs_ok(g, wg_runs, 1), "%d wgmma runs on the %s path", wg_runs,
           gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.mode = CUDA_EPI_GLU16;
    e.out = &e;
    e.ldo = 8;
    hark_err_t err = {0};
    CHECK(cuda_hgemm(&e, NULL, 8, NULL, 4, 15, 8, g, &err) == HARK_ERR_INVALID_ARG); /* n odd */
    ops_cuda_destroy(g);
}

/* A residual GEMM with the norms after it (cuda_epi_t.norm): on Hopper with n = 256 in the
 * epilogue of the 128 x 256 wgmma tiles, elsewhere (mma.sync forced, n != 256) the GEMM and a
 * cuda_rows_norm pass */
GPU_TEST(cuda_hgemm_resid_norms_matches_ref)
{
    /* m, n, k, norms case (norms_case), backend (0 AUTO, 1 mma.sync); fused: AUTO, n 256, k <= 1024
     * and at least half a GPU of 128-row blocks (m >= 8448 on 132 multiprocessors) */
    static const int sz[][5] = {{1, 256, 256, 1, 0},    {77, 256, 72, 2, 0},
                                {300, 256, 512, 3, 0},  {9000, 256, 256, 1, 0},
                                {9000, 256, 256, 2, 1}, {130, 200, 64, 1, 0},
                                {8500, 256, 512, 3, 0}, {9000, 256, 2048, 2, 0}};
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    unsigned seed = 78;
    double worst[2] = {0, 0}, worst_h[2] = {0, 0};
    int wg_runs = 0;
    for (int ih = 0; ih < 2; ih++)
        for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
            ops_dtype_t ht = H16[ih];
            int m = sz[c][0], d = sz[c][1], k = sz[c][2], nk = sz[c][3];
            ops_cuda_set_gemm_backend(g, sz[c][4] ? OPS_GEMM_MMA : OPS_GEMM_AUTO);
            float alpha = c % 2 ? 1.0f : 0.5f;
            size_t na = (size_t)m * k, nw = (size_t)d * k, nx = (size_t)m * d;
            float *a = hrand(na, &seed, 1.0f), *w = hrand(nw, &seed, 0.1f);
            float *b = hrand(d, &seed, 0.5f), *x0 = hrand(nx, &seed, 0.5f);
            float *ng = hrand(2 * d, &seed, 1.0f), *nb = hrand(2 * d, &seed, 0.3f);
            round_to(a, na, ht);
            round_to(w, nw, ht);
            float *acc = hark_malloc(nx * sizeof(float)), *ref = hark_malloc(nx * sizeof(float));
            float *href = hark_malloc(nx * sizeof(float)), *got = hark_malloc(nx * sizeof(float));
            matmul_ref(acc, a, w, m, d, k, k, k, d, 1, 1.0f, 0.0f);
            epi_ref(ref, acc, b, CUDA_EPI_RESID32, CUDA_ACT_NONE, m, d, x0, alpha, 1.0f, NULL, 0);
            void *da = dup_to(a, na, ht), *dw = dup_to(w, nw, ht), *dh = dalloc(nx, ht);
            void *dover = dalloc(nx, ht);
            float *db = dup_to(b, d, OPS_F32), *dx = dup_to(x0, nx, OPS_F32);
            float *dng = dup_to(ng, 2 * d, OPS_F32), *dnb = dup_to(nb, 2 * d, OPS_F32);
            cuda_row_norms_t nm = {0, NULL, NULL, NULL, NULL, 0, 0, NULL, 1e-5f};
            norms_case(nk, &nm, ref, href, ng, nb, dng, dnb, dh, dover, m, d);
            cuda_epi_t e;
            memset(&e, 0, sizeof e);
            e.mode = CUDA_EPI_RESID32;
            e.out = dx;
            e.ldo = d;
            e.bias = db;
            e.alpha = alpha;
            e.beta = 1.0f;
            e.norm = &nm;
            e.dt = ht;
            hark_err_t err = {0};
            CHECKF(cuda_hgemm(&e, da, k, dw, m, d, k, g, &err) == HARK_OK, "%s", err.msg);
            int fused = ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA;
            wg_runs += fused;
            int gd; /* norms case 1: x is the update alone, compared without x0 */
            double er = x_update_err(got, ref, x0, dx, nx, nk == 1, &gd);
            worst[ih] = er > worst[ih] ? er : worst[ih];
            CHECK_ERR(er, tol16(ht, TOL_H), gd,
                      "resid norms %s m %d n %d k %d norms %d (%s): x rel %g", dt_name(ht), m, d, k,
                      nk, fused ? "fused" : "separate", er);
            double eh = out_err(nm.h_out, ht, href, nx, &gd);
            worst_h[ih] = eh > worst_h[ih] ? eh : worst_h[ih];
            CHECK_ERR(eh, tol16(ht, TOL_H), gd, "resid norms %s m %d n %d k %d norms %d: hn rel %g",
                      dt_name(ht), m, d, k, nk, eh);
            cudaFree(da), cudaFree(dw), cudaFree(dh), cudaFree(dover), cudaFree(db), cudaFree(dx);
            cudaFree(dng), cudaFree(dnb);
            hark_free(a), hark_free(w), hark_free(b), hark_free(x0), hark_free(ng), hark_free(nb);
            hark_free(acc), hark_free(ref), hark_free(href), hark_free(got);
        }
    for (int ih = 0; ih < 2; ih++)
        printf("    residual GEMM + norms %s rel rms (worst): x %.3g, normed 16-bit out %.3g\n",
               dt_name(H16[ih]), worst[ih], worst_h[ih]);
    printf("    (%d runs fused)\n", wg_runs);
    CHECKF(wgmma_runs_ok(g, wg_runs, 4), "%d wgmma runs on the %s path", wg_runs,
           gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    /* the norms need the plain update: beta 1, no pe */
    cuda_row_norms_t nm = {0, NULL, NULL, NULL, NULL, 1, 0, NULL, 1e-5f};
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.mode = CUDA_EPI_RESID32;
    e.out = &e;
    e.ldo = 256;
    e.beta = 0.0f;
    e.norm = &nm;
    hark_err_t err = {0};
    CHECK(cuda_hgemm(&e, NULL, 8, NULL, 4, 256, 8, g, &err) == HARK_ERR_INVALID_ARG);
    ops_cuda_destroy(g);
}

GPU_TEST(cuda_hconv2d_matches_conv2d_ref)
{
    /* cin, h, w, cout, k, stride */
    static const int cs[][6] = {{8, 9, 11, 24, 3, 2},     {16, 20, 13, 40, 5, 3},
                                {32, 33, 19, 264, 3, 2},  {64, 219, 79, 256, 3, 2},
                                {16, 219, 79, 256, 3, 2}, {256, 99, 19, 256, 3, 2}};
    enum { B = 2 };
    unsigned seed = 32;
    double worst[2] = {0, 0};
    int wg_runs = 0;
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    for (int ih = 0; ih < 2; ih++)
        for (int be = 0; be < 2; be++) /* AUTO (long K on wgmma), then wgmma wherever it fits */
            for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
                ops_dtype_t ht = H16[ih];
                ops_cuda_set_gemm_backend(g, be ? OPS_GEMM_WGMMA : OPS_GEMM_AUTO);
                int cin = cs[c][0], h = cs[c][1], w = cs[c][2], cout = cs[c][3], k = cs[c][4],
                    st = cs[c][5];
                int ho = (h - k) / st + 1, wo = (w - k) / st + 1;
                size_t nin = (size_t)B * h * w * cin, nw = (size_t)cout * cin * k * k,
                       nout = (size_t)B * ho * wo * cout;
                float *img = hrand(nin, &seed, 1.0f), *wt = hrand(nw, &seed, 0.2f),
                      *b = hrand(cout, &seed, 0.3f);
                round_to(img, nin, ht);
                round_to(wt, nw, ht);
                /* the reference in conv2d_ref's layout: in (h, cin, w), out (h_out, cout, w_out) */
                float *tin = hark_malloc(nin * sizeof(float)),
                      *tout = hark_malloc(nout * sizeof(float));
                float *col = hark_malloc(conv2d_col_floats(cin, cout, k, k, wo) * sizeof(float));
                float *ref = hark_malloc(nout * sizeof(float)),
                      *wp = hark_malloc(nw * sizeof(float));
                for (int bb = 0; bb < B; bb++) {
                    for (int y = 0; y < h; y++)
                        for (int ci = 0; ci < cin; ci++)
                            for (int x = 0; x < w; x++)
                                tin[(((size_t)bb * h + y) * cin + ci) * w + x] =
                                    img[(((size_t)bb * h + y) * w + x) * cin + ci];
                    float *o = tout + (size_t)bb * ho * cout * wo;
                    conv2d_ref(o, col, tin + (size_t)bb * h * cin * w, wt, b, cin, h, w, cout, k, k,
                               st);
                    relu_ref(o, o, (size_t)ho * cout * wo);
                    for (int y = 0; y < ho; y++)
                        for (int co = 0; co < cout; co++)
                            for (int x = 0; x < wo; x++)
                                ref[(((size_t)bb * ho + y) * wo + x) * cout + co] =
                                    o[((size_t)y * cout + co) * wo + x];
                }
                for (int co = 0; co < cout; co++) /* (cout, cin, kh, kw) -> (cout, kh, kw, cin) */
                    for (int ci = 0; ci < cin; ci++)
                        for (int i = 0; i < k * k; i++)
                            wp[((size_t)co * k * k + i) * cin + ci] =
                                wt[((size_t)co * cin + ci) * k * k + i];
                void *din = dup_to(img, nin, ht), *dw = dup_to(wp, nw, ht);
                float *db = dup_to(b, cout, OPS_F32);
                void *dout = dalloc(nout, ht);
                cuda_epi_t e;
                memset(&e, 0, sizeof e);
                e.mode = CUDA_EPI_F16;
                e.act = CUDA_ACT_RELU;
                e.bias = db;
                e.out = dout;
                e.ldo = cout;
                e.dt = ht;
                hark_err_t err = {0};
                CHECKF(cuda_hconv2d(&e, din, dw, B, cin, h, w, cout, k, k, st, g, &err) == HARK_OK,
                       "%s", err.msg);
                wg_runs += ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA;
                int gd;
                double er = out_err(dout, ht, ref, nout, &gd);
                worst[ih] = er > worst[ih] ? er : worst[ih];
                CHECK_ERR(er, tol16(ht, TOL_H), gd, "hconv2d %s case %zu on %s rel %g", dt_name(ht),
                          c, ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA ? "wgmma" : "mma", er);
                cudaFree(din), cudaFree(dw), cudaFree(db), cudaFree(dout);
                hark_free(img), hark_free(wt), hark_free(b), hark_free(tin), hark_free(tout);
                hark_free(col), hark_free(ref), hark_free(wp);
            }
    printf("    hconv2d rel rms: fp16 %.3g, bf16 %.3g (%d of the runs on wgmma)\n", worst[0],
           worst[1], wg_runs);
    CHECKF(wgmma_runs_ok(g, wg_runs, 4), "%d wgmma runs on the %s path", wg_runs,
           gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    ops_cuda_destroy(g);
}

/* C output channels: multiples of 8 take 16-byte stores, the rest half pairs; output type ht */
static void conv1_case(test_ctx_t *t, int C, ops_dtype_t ht)
{
    enum { B = 3, T = 37, F = 23, K = 3, S = 2 };
    static const int lens[B] = {T, 20, 5};
    unsigned seed = 33;
    int ho = (T - K) / S + 1, wo = (F - K) / S + 1;
    size_t nx = (size_t)B * T * F, nout = (size_t)B * ho * wo * C;
    float *x = hrand(nx, &seed, 3.0f), *w = hrand((size_t)C * K * K, &seed, 0.5f);
    float *b = hrand(C, &seed, 0.3f), *mean = hrand(F, &seed, 1.0f), *istd = hrand(F, &seed, 0.2f);
    for (int i = 0; i < F; i++)
        istd[i] += 1.0f;
    float *ref = hark_malloc(nout * sizeof(float)),
          *img = hark_malloc((size_t)T * F * sizeof(float));
    float *o = hark_malloc((size_t)ho * C * wo * sizeof(float));
    float *col = hark_malloc(conv2d_col_floats(1, C, K, K, wo) * sizeof(float));
    for (int bb = 0; bb < B; bb++) {
        for (int t2 = 0; t2 < T; t2++)
            for (int f = 0; f < F; f++)
                img[(size_t)t2 * F + f] =
                    t2 < lens[bb] ? (x[((size_t)bb * T + t2) * F + f] - mean[f]) * istd[f] : 0.0f;
        conv2d_ref(o, col, img, w, b, 1, T, F, C, K, K, S);
        relu_ref(o, o, (size_t)ho * C * wo);
        for (int y = 0; y < ho; y++)
            for (int co = 0; co < C; co++)
                for (int xx = 0; xx < wo; xx++)
                    ref[(((size_t)bb * ho + y) * wo + xx) * C + co] =
                        o[((size_t)y * C + co) * wo + xx];
    }
    float *dx = dup_to(x, nx, OPS_F32), *dw = dup_to(w, (size_t)C * K * K, OPS_F32);
    float *db = dup_to(b, C, OPS_F32), *dm = dup_to(mean, F, OPS_F32),
          *di = dup_to(istd, F, OPS_F32);
    int *dl = NULL;
    CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
    CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
    void *dout = dalloc(nout, ht);
    CHECK_OK(cuda_conv1_cmvn(dout, ht, dx, dm, di, dl, B, T, F, dw, db, C, K, S, 1, NULL, NULL));
    int gd;
    double er = out_err(dout, ht, ref, nout, &gd);
    CHECK_ERR(er, tol16(ht, TOL_H), gd, "conv1_cmvn %s %d channels rel %g", dt_name(ht), C, er);
    printf("    conv1+cmvn %s %d channels rel rms %.3g\n", dt_name(ht), C, er);
    hark_err_t err = {0};
    CHECK(cuda_conv1_cmvn(dout, ht, dx, dm, di, dl, B, T, F, dw, db, C, 5, S, 1, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(cuda_conv1_cmvn(dout, OPS_F32, dx, dm, di, dl, B, T, F, dw, db, C, K, S, 1, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dm), cudaFree(di), cudaFree(dl);
    cudaFree(dout);
    hark_free(x), hark_free(w), hark_free(b), hark_free(mean), hark_free(istd), hark_free(ref);
    hark_free(img), hark_free(o), hark_free(col);
}

GPU_TEST(cuda_conv1_cmvn_matches_ref)
{
    for (int ih = 0; ih < 2; ih++) {
        conv1_case(t, 40, H16[ih]);
        conv1_case(t, 264, H16[ih]);
        conv1_case(t, 22, H16[ih]);
        if (test_failed(t))
            return;
    }
}

GPU_TEST(cuda_rows_norm_matches_ref)
{
    static const int ds[] = {24, 144, 256, 1000};
    enum { B = 3, TR = 13, N = B * TR };
    static const int lens[B] = {TR, 4, 0};
    unsigned seed = 34;
    double worst[2] = {0, 0};
    for (int ih = 0; ih < 2; ih++)
        for (int id = 0; id < 4; id++)
            for (int mode = 0; mode < 3; mode++) {
                ops_dtype_t ht = H16[ih];
                /* 0: hn = LN1(x); 1: x = LN1(x), hn = LN2(x); 2: x = LN2(LN1(x)), hn = x, o32 with
                 * lens
                 */
                int d = ds[id];
                size_t n = (size_t)N * d;
                float *x = hrand(n, &seed, 3.0f), *g1 = hrand(d, &seed, 0.2f),
                      *b1 = hrand(d, &seed, 0.2f);
                float *g2 = hrand(d, &seed, 0.2f), *b2 = hrand(d, &seed, 0.2f);
                for (int i = 0; i < d; i++)
                    x[i] += 5.0f, g1[i] += 1.0f, g2[i] += 1.0f;
                float *r1 = hark_malloc(n * sizeof(float)), *r2 = hark_malloc(n * sizeof(float));
                layer_norm_ref(r1, x, g1, b1, N, d, 1e-5f);
                if (mode)
                    layer_norm_ref(r2, r1, g2, b2, N, d, 1e-5f);
                else
                    memcpy(r2, r1, n * sizeof(float));
                float *xref = mode == 1 ? r1 : mode == 2 ? r2 : x;
                float *oref = hark_malloc(n * sizeof(float));
                memcpy(oref, r2, n * sizeof(float));
                if (mode == 2)
                    for (int r = 0; r < N; r++)
                        if (r % TR >= lens[r / TR])
                            memset(oref + (size_t)r * d, 0, (size_t)d * sizeof(float));
                float *dx = dup_to(x, n, OPS_F32), *dg1 = dup_to(g1, d, OPS_F32),
                      *db1 = dup_to(b1, d, OPS_F32);
                float *dg2 = dup_to(g2, d, OPS_F32), *db2 = dup_to(b2, d, OPS_F32);
                void *dh = dalloc(n, ht);
                float *do32 = mode == 2 ? dalloc(n, OPS_F32) : NULL;
                int *dl = NULL;
                CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
                CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
                CHECK_OK(cuda_rows_norm(mode ? dx : NULL, mode, dh, ht, do32, dx, dg1, db1, 1, dg2,
                                        db2, mode != 0, mode == 2 ? dl : NULL, TR, N, d, 1e-5f,
                                        NULL, NULL));
                int gd;
                double e1 = out_err(dh, ht, oref, n, &gd);
                CHECK_ERR(e1, tol16(ht, TOL_H), gd, "rows_norm d %d mode %d %s rel %g", d, mode,
                          dt_name(ht), e1);
                double e2 = out_err(dx, OPS_F32, xref, n, &gd);
                CHECK_ERR(e2, TOL32, 1, "rows_norm d %d mode %d x rel %g", d, mode, e2);
                if (do32) {
                    double e3 = out_err(do32, OPS_F32, oref, n, &gd);
                    CHECK_ERR(e3, TOL32, gd, "rows_norm d %d o32 rel %g", d, e3);
                }
                worst[ih] = e1 > worst[ih] ? e1 : worst[ih];
                cudaFree(dx), cudaFree(dg1), cudaFree(db1), cudaFree(dg2), cudaFree(db2);
                cudaFree(dh), cudaFree(do32), cudaFree(dl);
                hark_free(x), hark_free(g1), hark_free(b1), hark_free(g2), hark_free(b2);
                hark_free(r1), hark_free(r2), hark_free(oref);
            }
    printf("    rows_norm 16-bit out rel rms: fp16 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

GPU_TEST(cuda_dwconv_f16_matches_ref)
{
    enum { B = 3, T = 37 };
    static const int lens[B] = {T, 20, 1};
    /* c, k, pad, left, norm; k 15 or 31 with c <= 256 take the register kernel */
    static const int cs[][5] = {
        {24, 7, 6, 1, CUDA_NORM_LAYER},    {300, 15, 7, 0, CUDA_NORM_BATCH},
        {600, 3, 1, 0, CUDA_NORM_LAYER},   {256, 15, 14, 1, CUDA_NORM_LAYER},
        {256, 31, 15, 0, CUDA_NORM_BATCH}, {200, 15, 7, 1, CUDA_NORM_LAYER},
        {256, 31, 30, 1, CUDA_NORM_NONE}};
    unsigned seed = 35;
    double worst[2] = {0, 0};
    for (int ih = 0; ih < 2; ih++)
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
            ops_dtype_t ht = H16[ih];
            int c = cs[ci][0], k = cs[ci][1], pad = cs[ci][2], has_left = cs[ci][3],
                norm = cs[ci][4];
            int act = (int)(ci % 4);
            size_t n = (size_t)B * T * c;
            float *in = hrand(n, &seed, 2.0f), *left = hrand((size_t)pad * c + 1, &seed, 1.0f);
            float *w = hrand((size_t)c * k, &seed, 0.4f), *bias = hrand(c, &seed, 0.2f);
            float *g = hrand(c, &seed, 0.2f), *beta = hrand(c, &seed, 0.2f);
            float *rm = hrand(c, &seed, 0.3f), *rv = hrand(c, &seed, 0.3f);
            for (int i = 0; i < c; i++)
                g[i] += 1.0f, rv[i] += 0.7f;
            round_to(in, n, ht);
            round_to(left, (size_t)pad * c + 1, ht);
            float *ref = hark_malloc(n * sizeof(float));
            for (int b = 0; b < B; b++) {
                float *o = ref + (size_t)b * T * c;
                depthwise_conv1d_ref(o, in + (size_t)b * T * c, has_left ? left : NULL, w, bias, T,
                                     c, k, pad, lens[b]);
                if (norm == CUDA_NORM_BATCH)
                    batch_norm_ref(o, o, g, beta, rm, rv, T, c, 1e-5f);
                else if (norm == CUDA_NORM_LAYER)
                    layer_norm_ref(o, o, g, beta, T, c, 1e-5f);
                activation_ref(o, o, (size_t)T * c, (ops_act_t)act);
            }
            void *din = dup_to(in, n, ht);
            float *dleft = dup_to(left, (size_t)pad * c + 1, OPS_F32);
            float *dw = dup_to(w, (size_t)c * k, OPS_F32), *dbias = dup_to(bias, c, OPS_F32);
            float *dg = dup_to(g, c, OPS_F32), *dbeta = dup_to(beta, c, OPS_F32);
            float *drm = dup_to(rm, c, OPS_F32), *drv = dup_to(rv, c, OPS_F32);
            int *dl = NULL;
            CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
            CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
            void *dout = dalloc(n, ht);
            CHECK_OK(cuda_dwconv_f16(dout, ht, din, has_left ? dleft : NULL, dw, dbias, dl, B, T, c,
                                     k, pad, (cuda_norm_t)norm, dg, dbeta, drm, drv, 1e-5f,
                                     (cuda_act_t)act, NULL, NULL));
            int gd;
            double e = out_err(dout, ht, ref, n, &gd);
            worst[ih] = e > worst[ih] ? e : worst[ih];
            CHECK_ERR(e, tol16(ht, TOL_H), gd,
                      "dwconv_f16 %s c %d k %d pad %d left %d norm %d act %d rel %g", dt_name(ht),
                      c, k, pad, has_left, norm, act, e);
            cudaFree(din), cudaFree(dleft), cudaFree(dw), cudaFree(dbias), cudaFree(dg);
            cudaFree(dbeta), cudaFree(drm), cudaFree(drv), cudaFree(dl), cudaFree(dout);
            hark_free(in), hark_free(left), hark_free(w), hark_free(bias), hark_free(g);
            hark_free(beta), hark_free(rm), hark_free(rv), hark_free(ref);
        }
    printf("    dwconv_f16 rel rms: fp16 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

GPU_TEST(cuda_flash_attention_matches_ref)
{
    /* t, heads, dk, rel, chunk, left */
    static const int cs[][6] = {
        {37, 4, 64, 1, 0, -1},  {130, 2, 64, 1, 16, 1},  {1, 3, 8, 1, 0, -1}, {70, 3, 8, 0, 5, -1},
        {65, 2, 100, 1, 0, -1}, {129, 1, 128, 0, 0, -1}, {33, 2, 32, 1, 4, 0}};
    enum { B = 3 };
    unsigned seed = 36;
    double worst[2] = {0, 0};
    for (int ih = 0; ih < 2; ih++)
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            ops_dtype_t ht = H16[ih];
            int T = cs[c][0], H = cs[c][1], DK = cs[c][2], rel = cs[c][3], chunk = cs[c][4],
                left = cs[c][5];
            int D = H * DK, ld = 3 * D, lens[B] = {T, (T + 1) / 2, c % 2 ? 0 : 1};
            size_t nq = (size_t)B * T * ld, nc = (size_t)B * T * D;
            float *qkv = hrand(nq, &seed, 1.5f), *p = hrand((size_t)T * D, &seed, 1.0f);
            float *bu = hrand(D, &seed, 0.3f), *bv = hrand(D, &seed, 0.3f);
            round_to(qkv, nq, ht);
            round_to(p, (size_t)T * D, ht);
            float *q = hark_malloc((size_t)T * D * sizeof(float)),
                  *k = hark_malloc((size_t)T * D * 4);
            float *v = hark_malloc((size_t)T * D * 4), *ref = hark_malloc(nc * sizeof(float));
            float *scr = hark_malloc(attention_scratch_floats(T, DK) * sizeof(float));
            int *lo = hark_malloc((size_t)T * sizeof(int)),
                *hi = hark_malloc((size_t)T * sizeof(int));
            for (int b = 0; b < B; b++) {
                for (int i = 0; i < T; i++) {
                    memcpy(q + (size_t)i * D, qkv + ((size_t)b * T + i) * ld, (size_t)D * 4);
                    memcpy(k + (size_t)i * D, qkv + ((size_t)b * T + i) * ld + D, (size_t)D * 4);
                    memcpy(v + (size_t)i * D, qkv + ((size_t)b * T + i) * ld + 2 * D,
                           (size_t)D * 4);
                    key_range(i, lens[b], T, chunk, left, &lo[i], &hi[i]);
                }
                attention_ref(ref + (size_t)b * T * D, scr, q, k, v, rel ? p : NULL,
                              rel ? bu : NULL, rel ? bv : NULL, lo, hi, T, T, H, DK,
                              1.0f / sqrtf((float)DK));
            }
            void *dqkv = dup_to(qkv, nq, ht), *dp = dup_to(p, (size_t)T * D, ht);
            float *dbu = dup_to(bu, D, OPS_F32), *dbv = dup_to(bv, D, OPS_F32);
            int *dl = NULL;
            CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
            CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
            void *dctx = dalloc(nc, ht);
            hark_err_t err = {0};
            const char *base = dqkv;
            CHECKF(cuda_flash_attention(dctx, ht, D, base, base + (size_t)D * 2,
                                        base + (size_t)D * 4, ld, rel ? dp : NULL, D,
                                        rel ? dbu : NULL, rel ? dbv : NULL, dl, chunk, left, B, T,
                                        H, DK, 1.0f / sqrtf((float)DK), NULL, &err) == HARK_OK,
                   "%s", err.msg);
            int gd;
            double e = out_err(dctx, ht, ref, nc, &gd);
            worst[ih] = e > worst[ih] ? e : worst[ih];
            CHECK_ERR(e, tol16(ht, 5e-3), gd,
                      "flash attention %s t %d heads %d dk %d rel %d chunk %d left %d rel %g",
                      dt_name(ht), T, H, DK, rel, chunk, left, e);
            cudaFree(dqkv), cudaFree(dp), cudaFree(dbu), cudaFree(dbv), cudaFree(dl),
                cudaFree(dctx);
            hark_free(qkv), hark_free(p), hark_free(bu), hark_free(bv), hark_free(q), hark_free(k);
            hark_free(v), hark_free(ref), hark_free(scr), hark_free(lo), hark_free(hi);
        }
    printf("    flash attention rel rms: fp16 %.3g, bf16 %.3g (tol 5e-3, 4e-2: 16-bit q+b, "
           "probabilities and output)\n",
           worst[0], worst[1]);
    hark_err_t err = {0};
    CHECK(cuda_flash_attention(NULL, OPS_F32, 0, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, 0,
                               -1, 1, 4, 1, 64, 1.0f, NULL, &err) == HARK_ERR_INVALID_ARG);
    CHECK(cuda_flash_attention(NULL, OPS_F16, 0, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL, NULL, 0,
                               -1, 1, 4, 1, 129, 1.0f, NULL, &err) == HARK_ERR_INVALID_ARG);
}

GPU_TEST(cuda_ctc_log_softmax_argmax_matches_ref)
{
    /* a warp per row up to 256 (Jasper's 29), a block per row past it; logits rows V or V + 3
     * apart (the pad columns hold values that would win) */
    static const int vs[] = {1, 7, 29, 256, 257, 5002};
    enum { B = 3, TR = 11, N = B * TR };
    static const int lens[B] = {TR, 6, 0};
    unsigned seed = 37;
    for (int iv = 0; iv < 6; iv++) {
        int V = vs[iv], ldx = V + (iv % 2) * 3;
        size_t n = (size_t)N * V;
        float *x = hrand(n, &seed, 8.0f), *ref = hark_malloc(n * sizeof(float));
        if (V > 1)
            x[3 * V + 1] = x[3 * V + 2] = 40.0f; /* a tie: the first index wins */
        log_softmax_ref(ref, x, N, V);
        int arg_ref[N];
        float best_ref[N];
        for (int r = 0; r < N; r++) {
            int pad = r % TR >= lens[r / TR];
            if (pad)
                memset(ref + (size_t)r * V, 0, (size_t)V * sizeof(float));
            ctc_argmax_ref(&arg_ref[r], x + (size_t)r * V, 1, V);
            if (pad)
                arg_ref[r] = 0;
            best_ref[r] = ref[(size_t)r * V + arg_ref[r]];
        }
        float *xp = hark_malloc((size_t)N * ldx * sizeof(float));
        for (int r = 0; r < N; r++)
            for (int j = 0; j < ldx; j++)
                xp[(size_t)r * ldx + j] = j < V ? x[(size_t)r * V + j] : 1e30f;
        float *dx = dup_to(xp, (size_t)N * ldx, OPS_F32), *dlp = dalloc(n, OPS_F32),
              *dbest = dalloc(N, OPS_F32);
        int *darg = NULL, *dl = NULL;
        CHECK(cudaMalloc((void **)&darg, N * sizeof(int)) == cudaSuccess);
        CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
        CHECK_OK(cuda_set_lens(dl, lens, B, NULL, NULL));
        CHECK_OK(cuda_ctc_log_softmax_argmax(darg, dbest, dlp, dx, ldx, dl, TR, N, V, NULL, NULL));
        int arg[N];
        CHECK(cudaMemcpy(arg, darg, sizeof arg, cudaMemcpyDeviceToHost) == cudaSuccess);
        int same = 1;
        for (int r = 0; r < N; r++)
            same &= arg[r] == arg_ref[r];
        CHECKF(same, "ctc argmax V %d differs", V);
        int gd;
        double e = out_err(dlp, OPS_F32, ref, n, &gd);
        CHECK_ERR(e, TOL32, gd, "ctc log-softmax V %d rel %g", V, e);
        e = out_err(dbest, OPS_F32, best_ref, N, &gd);
        CHECK_ERR(e, TOL32, gd, "ctc best log-prob V %d rel %g", V, e);
        cudaFree(dx), cudaFree(dlp), cudaFree(dbest), cudaFree(darg), cudaFree(dl);
        hark_free(x), hark_free(xp), hark_free(ref);
    }
}
/* the CTC head without logits in memory: LSE partials + cuda_lse_argmax vs log_softmax + argmax */
GPU_TEST(cuda_hgemm_lse_argmax_matches_ref)
{
    static const int sz[][2] = {
        {37, 13}, {300, 5002}, {1000, 300}, {2, 129}, {1100, 5002}}; /* m, n */
    enum { K = 72 };
    unsigned seed = 38;
    ops_cuda_t *g = new_ctx(t);
    CHECK(g);
    double worst = 0;
    int wg_runs = 0;
    /* mma.sync everywhere, then AUTO (the wgmma kernel where the tiles fill the GPU); fp16 and
     * bf16 operands (FP32 out of identical rounded operands: the FP32 tolerance for both) */
    for (int ih = 0; ih < 2; ih++)
        for (int be = 0; be < 2; be++)
            for (size_t c = 0; c < sizeof sz / sizeof sz[0]; c++) {
                ops_dtype_t ht = H16[ih];
                ops_cuda_set_gemm_backend(g, be ? OPS_GEMM_AUTO : OPS_GEMM_MMA);
                int m = sz[c][0], n = sz[c][1], tr = m > 3 ? m / 3 : m, batch = m / tr;
                int lens[8] = {tr, tr / 2, 0};
                float *a = hrand((size_t)m * K, &seed, 1.0f),
                      *w = hrand((size_t)n * K, &seed, 1.0f);
                float *bias = hrand(n, &seed, 1.0f);
                round_to(a, (size_t)m * K, ht);
                round_to(w, (size_t)n * K, ht);
                float *lp = hark_malloc((size_t)m * n * sizeof(float));
                matmul_ref(lp, a, w, m, n, K, K, K, n, 1, 1.0f, 0.0f);
                for (int i = 0; i < m * n; i++)
                    lp[i] += bias[i % n];
                log_softmax_ref(lp, lp, m, n);
                int *arg_ref = hark_malloc(sizeof(int) * (size_t)m),
                    *arg = hark_malloc(sizeof(int) * (size_t)m);
                float *best_ref = hark_malloc(sizeof(float) * (size_t)m);
                for (int r = 0; r < m; r++) {
                    int pad = r / tr < batch && r % tr >= lens[r / tr];
                    ctc_argmax_ref(&arg_ref[r], lp + (size_t)r * n, 1, n);
                    best_ref[r] = lp[(size_t)r * n + arg_ref[r]];
                    if (pad)
                        arg_ref[r] = 0, best_ref[r] = 0.0f;
                }
                void *da = dup_to(a, (size_t)m * K, ht), *dw = dup_to(w, (size_t)n * K, ht);
                float *db = dup_to(bias, n, OPS_F32), *dbest = dalloc(m, OPS_F32);
                void *part = NULL;
                int *darg = NULL, *dl = NULL;
                CHECK(cudaMalloc(&part, (size_t)m * CUDA_LSE_TILES(n) * 16) == cudaSuccess);
                CHECK(cudaMalloc((void **)&darg, sizeof(int) * (size_t)m) == cudaSuccess);
                CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
                CHECK_OK(cuda_set_lens(dl, lens, batch, NULL, NULL));
                cuda_epi_t e;
                memset(&e, 0, sizeof e);
                e.mode = CUDA_EPI_LSE;
                e.bias = db;
                e.out = part;
                e.ldo = CUDA_LSE_TILES(n);
                e.dt = ht;
                hark_err_t err = {0};
                CHECKF(cuda_hgemm(&e, da, K, dw, m, n, K, g, &err) == HARK_OK, "%s", err.msg);
                wg_runs += ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA;
                /* rows past the batch grid (m not a multiple of tr) count as valid */
                CHECK_OK(cuda_lse_argmax(darg, dbest, part, n, dl, tr, batch * tr, NULL, NULL));
                if (batch * tr < m)
                    CHECK_OK(
                        cuda_lse_argmax(darg + batch * tr, dbest + batch * tr,
                                        (char *)part + (size_t)batch * tr * CUDA_LSE_TILES(n) * 16,
                                        n, NULL, 0, m - batch * tr, NULL, NULL));
                CHECK(cudaMemcpy(arg, darg, sizeof(int) * (size_t)m, cudaMemcpyDeviceToHost) ==
                      cudaSuccess);
                int same = 0;
                for (int r = 0; r < m; r++)
                    same += arg[r] == arg_ref[r];
                CHECKF(same == m, "lse argmax %s %dx%d (%s): %d of %d rows agree", dt_name(ht), m,
                       n, be ? "auto" : "mma", same, m);
                int gd;
                double er = out_err(dbest, OPS_F32, best_ref, m, &gd);
                worst = er > worst ? er : worst;
                CHECK_ERR(er, 1e-5, gd, "lse best log-prob %s %dx%d rel %g", dt_name(ht), m, n, er);
                cudaFree(da), cudaFree(dw), cudaFree(db), cudaFree(dbest), cudaFree(part),
                    cudaFree(darg);
                cudaFree(dl);
                hark_free(a), hark_free(w), hark_free(bias), hark_free(lp), hark_free(arg_ref);
                hark_free(arg), hark_free(best_ref);
            }
    printf("    lse argmax: best log-prob rel rms %.3g (%d runs on wgmma)\n", worst, wg_runs);
    CHECKF(wgmma_runs_ok(g, wg_runs, 1), "%d wgmma runs on the %s path", wg_runs,
           gpu_path_name((gpu_path_t)ops_cuda_path(g)));
    hark_err_t err = {0};
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.mode = CUDA_EPI_LSE;
    e.out = &e;
    e.ldo = 3; /* not CUDA_LSE_TILES(500) */
    CHECK(cuda_hgemm(&e, NULL, 8, NULL, 4, 500, 8, g, &err) == HARK_ERR_INVALID_ARG);
    e.ldo = CUDA_LSE_TILES(500);
    e.dt = (ops_dtype_t)7; /* not an element type */
    CHECK(cuda_hgemm(&e, NULL, 8, NULL, 4, 500, 8, g, &err) == HARK_ERR_INVALID_ARG);
    ops_cuda_destroy(g);
}

/* the attention decoder's row ops (cuda_embed_pos, cuda_segment_attention, cuda_lse_gather)
 * against their CPU references on ragged, awkward sizes */
GPU_TEST(cuda_decoder_row_ops_match_ref)
{
    unsigned seed = 41;
    /* embedding + positions */
    {
        enum { R = 37, D = 24, V = 11, P = 50 };
        float *emb = hrand((size_t)V * D, &seed, 1.0f), *pe = hrand((size_t)P * D, &seed, 1.0f);
        int tok[R], pos[R];
        float *ref = hark_malloc(sizeof(float) * R * D);
        for (int r = 0; r < R; r++) {
            tok[r] = (int)(test_rand(&seed) % V), pos[r] = (int)(test_rand(&seed) % P);
            for (int c = 0; c < D; c++)
                ref[r * D + c] = emb[tok[r] * D + c] * 4.9f + pe[pos[r] * D + c];
        }
        float *de = dup_to(emb, (size_t)V * D, OPS_F32), *dp = dup_to(pe, (size_t)P * D, OPS_F32);
        float *dx = dalloc((size_t)R * D, OPS_F32);
        int *dt = NULL, *dq = NULL;
        CHECK(cudaMalloc((void **)&dt, sizeof tok) == cudaSuccess &&
              cudaMalloc((void **)&dq, sizeof pos) == cudaSuccess);
        cudaMemcpy(dt, tok, sizeof tok, cudaMemcpyHostToDevice);
        cudaMemcpy(dq, pos, sizeof pos, cudaMemcpyHostToDevice);
        CHECK_OK(cuda_embed_pos(dx, de, dp, dt, dq, R, D, 4.9f, NULL, NULL));
        int gd;
        double e = out_err(dx, OPS_F32, ref, (size_t)R * D, &gd);
        CHECK_ERR(e, TOL32, gd, "embed_pos rel %g", e);
        cudaFree(de), cudaFree(dp), cudaFree(dx), cudaFree(dt), cudaFree(dq);
        hark_free(emb), hark_free(pe), hark_free(ref);
    }
    /* attention over ragged key runs: rows, heads, dk, extra columns of q */
    static const int cs[][4] = {
        {13, 3, 8, 0}, {70, 2, 64, 5}, {9, 1, 128, 0}, {33, 4, 100, 2}, {301, 2, 32, 0}};
    double worst = 0;
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        int R = cs[ci][0], H = cs[ci][1], dk = cs[ci][2], HD = H * dk, ldq = HD + cs[ci][3];
        enum { K = 41 };
        float *q = hrand((size_t)R * ldq, &seed, 1.0f), *k = hrand((size_t)K * HD, &seed, 1.0f);
        float *v = hrand((size_t)K * HD, &seed, 1.0f);
        int *kb = hark_malloc(sizeof(int) * (size_t)R), *kl = hark_malloc(sizeof(int) * (size_t)R);
        float *ref = hark_calloc((size_t)R * HD, sizeof(float));
        float *scr = hark_malloc(sizeof(float) * attention_scratch_floats(K, dk));
        float scale = 1.0f / sqrtf((float)dk);
        for (int r = 0; r < R; r++) {
            kb[r] = (int)(test_rand(&seed) % K);
            kl[r] = r % 7 == 3   ? 0
                    : r % 7 == 4 ? 1
                                 : (int)(test_rand(&seed) % (unsigned)(K - kb[r] + 1));
            if (kl[r] > 0)
                attention_ref(ref + (size_t)r * HD, scr, q + (size_t)r * ldq,
                              k + (size_t)kb[r] * HD, v + (size_t)kb[r] * HD, NULL, NULL, NULL,
                              NULL, NULL, 1, kl[r], H, dk, scale);
        }
        float *dqv = dup_to(q, (size_t)R * ldq, OPS_F32), *dk_ = dup_to(k, (size_t)K * HD, OPS_F32);
        float *dv = dup_to(v, (size_t)K * HD, OPS_F32), *dc = dalloc((size_t)R * HD, OPS_F32);
        int *dkb = NULL, *dkl = NULL;
        CHECK(cudaMalloc((void **)&dkb, sizeof(int) * (size_t)R) == cudaSuccess &&
              cudaMalloc((void **)&dkl, sizeof(int) * (size_t)R) == cudaSuccess);
        cudaMemcpy(dkb, kb, sizeof(int) * (size_t)R, cudaMemcpyHostToDevice);
        cudaMemcpy(dkl, kl, sizeof(int) * (size_t)R, cudaMemcpyHostToDevice);
        CHECK_OK(cuda_segment_attention(dc, dqv, ldq, dk_, dv, HD, dkb, dkl, R, H, dk, scale, NULL,
                                        NULL));
        int gd;
        double e = out_err(dc, OPS_F32, ref, (size_t)R * HD, &gd);
        worst = e > worst ? e : worst;
        CHECK_ERR(e, TOL32, gd, "segment_attention rows %d heads %d dk %d rel %g", R, H, dk, e);
        cudaFree(dqv), cudaFree(dk_), cudaFree(dv), cudaFree(dc), cudaFree(dkb), cudaFree(dkl);
        hark_free(q), hark_free(k), hark_free(v), hark_free(kb), hark_free(kl), hark_free(ref);
        hark_free(scr);
    }
    hark_err_t err = {0};
    CHECK(cuda_segment_attention(NULL, NULL, 200, NULL, NULL, 200, NULL, NULL, 1, 1, 129, 1.0f,
                                 NULL, &err) == HARK_ERR_INVALID_ARG);
    /* log-softmax at a target column: rows, v (ld = v + 3); a bias in every other case */
    static const int ls[][2] = {{1, 7}, {17, 5002}, {130, 33}};
    double worst_l = 0;
    for (size_t li = 0; li < sizeof ls / sizeof ls[0]; li++) {
        int R = ls[li][0], V = ls[li][1], ld = V + 3;
        float *x = hrand((size_t)R * ld, &seed, 8.0f), *row = hark_malloc(sizeof(float) * V);
        float *ref = hark_malloc(sizeof(float) * (size_t)R);
        int *tg = hark_malloc(sizeof(int) * (size_t)R);
        float *bias = li % 2 ? hrand((size_t)V, &seed, 3.0f) : NULL;
        for (int r = 0; r < R; r++) {
            tg[r] = (int)(test_rand(&seed) % (unsigned)V);
            for (int j = 0; j < V; j++)
                row[j] = x[(size_t)r * ld + j] + (bias ? bias[j] : 0.0f);
            log_softmax_ref(row, row, 1, V);
            ref[r] = row[tg[r]];
        }
        float *dx = dup_to(x, (size_t)R * ld, OPS_F32), *dout = dalloc((size_t)R, OPS_F32);
        float *db = bias ? dup_to(bias, (size_t)V, OPS_F32) : NULL;
        int *dtg = NULL;
        CHECK(cudaMalloc((void **)&dtg, sizeof(int) * (size_t)R) == cudaSuccess);
        cudaMemcpy(dtg, tg, sizeof(int) * (size_t)R, cudaMemcpyHostToDevice);
        CHECK_OK(cuda_lse_gather(dout, dx, ld, db, dtg, R, V, NULL, NULL));
        int gd;
        double e = out_err(dout, OPS_F32, ref, (size_t)R, &gd);
        worst_l = e > worst_l ? e : worst_l;
        CHECK_ERR(e, TOL32, gd, "lse_gather rows %d v %d rel %g", R, V, e);
        cudaFree(dx), cudaFree(dout), cudaFree(dtg), cudaFree(db);
        hark_free(x), hark_free(row), hark_free(ref), hark_free(tg), hark_free(bias);
    }
    CHECK(cuda_lse_gather(NULL, NULL, 5, NULL, NULL, 1, 7, NULL, &err) == HARK_ERR_INVALID_ARG);
    printf("    segment attention rel rms %.3g, lse gather %.3g\n", worst, worst_l);
}

/* ---- chunk streaming over a cache pool (chunk_cuda.cu) --------------------------------------- */

/* 3 chunks of 3, 5 and 1 rows in slots 2, 0, 3 of 4, at positions 0, 9 and 17 of a ring of 11
 * keys with 0, 4 and 6 cached keys (the second and third wrap around); the first conv cache is
 * fresh. Every kernel against its chunk_*_ref, guard elements after every output. */
enum { CK_N = 3, CK_ROWS = 9, CK_SLOTS = 4, CK_CAP = 11, CK_TPAD = 6, CK_MAXLEN = 40 };
static const int ck_slot[CK_N] = {2, 0, 3}, ck_row0[CK_N + 1] = {0, 3, 8, 9};
static const int ck_pos0[CK_N] = {0, 9, 17}, ck_ctx[CK_N] = {0, 4, 6}, ck_fresh[CK_N] = {1, 0, 0};
static const int ck_chunk[CK_ROWS] = {0, 0, 0, 1, 1, 1, 1, 1, 2};

static int *ck_upload(const int *h, int n)
{
    int *d = NULL;
    if (cudaMalloc((void **)&d, sizeof(int) * (size_t)n) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, h, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice);
    return d;
}

GPU_TEST(cuda_chunk_kernels_match_ref)
{
    unsigned seed = 77;
    chunk_meta_t hm = {CK_N, CK_ROWS, ck_slot, ck_row0, ck_pos0, ck_ctx, ck_fresh, ck_chunk};
    int *dmi[6] = {ck_upload(ck_slot, CK_N),  ck_upload(ck_row0, CK_N + 1),
                   ck_upload(ck_pos0, CK_N),  ck_upload(ck_ctx, CK_N),
                   ck_upload(ck_fresh, CK_N), ck_upload(ck_chunk, CK_ROWS)};
    CHECK(dmi[0] && dmi[1] && dmi[2] && dmi[3] && dmi[4] && dmi[5]);
    cuda_chunk_meta_t dm = {CK_N, CK_ROWS, dmi[0], dmi[1], dmi[2], dmi[3], dmi[4], dmi[5]};
    static const int hd[][2] = {{3, 8}, {2, 100}, {1, 33}}; /* heads, dk */
    for (size_t ci = 0; ci < sizeof hd / sizeof hd[0]; ci++) {
        int H = hd[ci][0], dk = hd[ci][1], D = H * dk, ld = 3 * D + 2;
        /* embedding rows */
        {
            float *a = hrand((size_t)CK_N * CK_TPAD * D, &seed, 1.0f);
            float *bias = hrand((size_t)D, &seed, 1.0f),
                  *pe = hrand((size_t)CK_MAXLEN * D, &seed, 1.0f);
            float *ref = hark_malloc(sizeof(float) * CK_ROWS * D);
            for (int withpe = 0; withpe < 2; withpe++) {
                chunk_embed_ref(ref, a, CK_TPAD, bias, 2.5f, withpe ? pe : NULL, &hm, D);
                float *da = dup_to(a, (size_t)CK_N * CK_TPAD * D, OPS_F32);
                float *db = dup_to(bias, (size_t)D, OPS_F32);
                float *dp = dup_to(pe, (size_t)CK_MAXLEN * D, OPS_F32);
                float *dx = dalloc((size_t)CK_ROWS * D, OPS_F32);
                CHECK_OK(cuda_chunk_embed(dx, da, CK_TPAD, db, 2.5f, withpe ? dp : NULL, &dm, D,
                                          NULL, NULL));
                int gd;
                double e = out_err(dx, OPS_F32, ref, (size_t)CK_ROWS * D, &gd);
                CHECK_ERR(e, TOL32, gd, "chunk_embed D %d pe %d rel %g", D, withpe, e);
                cudaFree(da), cudaFree(db), cudaFree(dp), cudaFree(dx);
            }
            hark_free(a), hark_free(bias), hark_free(pe), hark_free(ref);
        }
        /* K/V store, then attention (rel-pos and plain; float and 16-bit context) */
        size_t pool = (size_t)CK_SLOTS * 2 * CK_CAP * D; /* (slots, L = 2, cap, D): layer 1 */
        long long ss = 2LL * CK_CAP * D;
        float *kc = hrand(pool, &seed, 1.0f), *vc = hrand(pool, &seed, 1.0f);
        float *qkv = hrand((size_t)CK_ROWS * ld, &seed, 1.0f),
              *bqkv = hrand((size_t)3 * D, &seed, 0.5f);
        float *pt = hrand((size_t)CK_MAXLEN * D, &seed, 1.0f);
        float *bu = hrand((size_t)D, &seed, 0.5f), *bv = hrand((size_t)D, &seed, 0.5f);
        float *dkc = dup_to(kc, pool, OPS_F32), *dvc = dup_to(vc, pool, OPS_F32);
        float *dq = dup_to(qkv, (size_t)CK_ROWS * ld, OPS_F32),
              *db = dup_to(bqkv, (size_t)3 * D, OPS_F32);
        float *dpt = dup_to(pt, (size_t)CK_MAXLEN * D, OPS_F32);
        float *dbu = dup_to(bu, (size_t)D, OPS_F32), *dbv = dup_to(bv, (size_t)D, OPS_F32);
        size_t l1 = (size_t)CK_CAP * D;
        chunk_kv_store_ref(kc + l1, vc + l1, ss, CK_CAP, qkv + D, qkv + 2 * D, ld, bqkv + D,
                           bqkv + 2 * D, &hm, D);
        CHECK_OK(cuda_chunk_kv_store(dkc + l1, dvc + l1, ss, CK_CAP, dq + D, dq + 2 * D, ld, db + D,
                                     db + 2 * D, &dm, D, NULL, NULL));
        int gd;
        double e = out_err(dkc, OPS_F32, kc, pool, &gd);
        CHECK_ERR(e, 0.0, gd, "chunk_kv_store K D %d rel %g", D, e);
        e = out_err(dvc, OPS_F32, vc, pool, &gd);
        CHECK_ERR(e, 0.0, gd, "chunk_kv_store V D %d rel %g", D, e);
        int max_keys = 9; /* chunk 1: 4 cached + 5 */
        float *scr = hark_malloc(sizeof(float) * chunk_attention_scratch_floats(max_keys, D, dk));
        float *ref = hark_malloc(sizeof(float) * CK_ROWS * D);
        float scale = 1.0f / sqrtf((float)dk);
        for (int rel = 0; rel < 2; rel++) {
            chunk_attention_ref(ref, scr, qkv, ld, bqkv, kc + l1, vc + l1, ss, CK_CAP,
                                rel ? pt : NULL, bu, bv, &hm, max_keys, H, dk, scale);
            static const ops_dtype_t ots[3] = {OPS_F32, OPS_F16, OPS_BF16};
            for (int oi = 0; oi < 3; oi++) {
                void *dc = dalloc((size_t)CK_ROWS * D, ots[oi]);
                CHECK_OK(cuda_chunk_attention(dc, ots[oi], dq, ld, db, dkc + l1, dvc + l1, ss,
                                              CK_CAP, rel ? dpt : NULL, dbu, dbv, &dm, max_keys, H,
                                              dk, scale, NULL, NULL));
                e = out_err(dc, ots[oi], ref, (size_t)CK_ROWS * D, &gd);
                CHECK_ERR(e, tol_of(ots[oi]), gd, "chunk_attention %s D %d rel-pos %d rel %g",
                          dt_name(ots[oi]), D, rel, e);
                cudaFree(dc);
            }
        }
        hark_free(scr), hark_free(ref);
        hark_free(kc), hark_free(vc), hark_free(qkv), hark_free(bqkv), hark_free(pt);
        hark_free(bu), hark_free(bv);
        cudaFree(dkc), cudaFree(dvc), cudaFree(dq), cudaFree(db), cudaFree(dpt);
        cudaFree(dbu), cudaFree(dbv);
    }
    /* depthwise conv: causal over the caches (k 5: the 1-row chunk shifts its cache), and
     * symmetric within each chunk (k 5, 3) */
    static const int cc[][3] = {{5, 4, 1}, {5, 2, 0}, {3, 1, 0}, {2, 1, 1}}; /* k, pad, cached */
    for (size_t ci = 0; ci < sizeof cc / sizeof cc[0]; ci++) {
        int C = 37, K = cc[ci][0], pad = cc[ci][1], cached = cc[ci][2], lc = K - 1;
        size_t cs = (size_t)CK_SLOTS * 2 * (lc ? lc : 1) * C; /* (slots, L = 2, K-1, C) */
        long long ss = 2LL * (lc ? lc : 1) * C;
        float *in = hrand((size_t)CK_ROWS * C, &seed, 1.0f), *cache = hrand(cs, &seed, 1.0f);
        float *li = hrand((size_t)(lc ? lc : 1) * C, &seed, 1.0f);
        float *w = hrand((size_t)C * K, &seed, 1.0f), *b = hrand((size_t)C, &seed, 1.0f);
        float *ref = hark_malloc(sizeof(float) * CK_ROWS * C);
        float *din = dup_to(in, (size_t)CK_ROWS * C, OPS_F32), *dcache = dup_to(cache, cs, OPS_F32);
        float *dli = dup_to(li, (size_t)(lc ? lc : 1) * C, OPS_F32);
        float *dw = dup_to(w, (size_t)C * K, OPS_F32), *dbias = dup_to(b, (size_t)C, OPS_F32);
        float *dout = dalloc((size_t)CK_ROWS * C, OPS_F32);
        size_t l1 = (size_t)(lc ? lc : 1) * C;
        chunk_dwconv_ref(ref, in, cached ? cache + l1 : NULL, ss, li, w, b, &hm, C, K, pad);
        CHECK_OK(cuda_chunk_dwconv(dout, din, cached ? dcache + l1 : NULL, ss, dli, dw, dbias, &dm,
                                   C, K, pad, NULL, NULL));
        int gd;
        double e = out_err(dout, OPS_F32, ref, (size_t)CK_ROWS * C, &gd);
        CHECK_ERR(e, TOL32, gd, "chunk_dwconv k %d pad %d cached %d rel %g", K, pad, cached, e);
        e = out_err(dcache, OPS_F32, cache, cs, &gd);
        CHECK_ERR(e, 0.0, gd, "chunk_dwconv cache k %d rel %g", K, e);
        cudaFree(din), cudaFree(dcache), cudaFree(dli), cudaFree(dw), cudaFree(dbias),
            cudaFree(dout);
        hark_free(in), hark_free(cache), hark_free(li), hark_free(w), hark_free(b), hark_free(ref);
    }
    hark_err_t err = {0};
    CHECK(cuda_chunk_attention(NULL, OPS_F32, NULL, 1, NULL, NULL, NULL, 1, 4, NULL, NULL, NULL,
                               &dm, 5, 1, 8, 1.0f, NULL, &err) == HARK_ERR_INVALID_ARG);
    for (int i = 0; i < 6; i++)
        cudaFree(dmi[i]);
}
#endif /* HARK_CUDA */
