/* Tests of src/ops/zipformer_ops.h: the CPU references against direct formulas (the shifted
 * softmax, the positions table), and every GPU kernel (zipformer_cuda.cu) against its reference on
 * awkward sizes: several streams in pool slots out of order, caches longer and shorter than a
 * step, chunks shorter than the kernel, downsampling factors that do not divide the rows, empty
 * key ranges. Tolerance: relative RMS 1e-5 (FP32; the kernels do the references' float operations,
 * the softmax's sum in float instead of double). */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/zipformer_ops.h"

#include <math.h>
#include <string.h>

static float *hrand(size_t n, unsigned *seed, float scale)
{
    float *p = hark_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

TEST(zf_rel_softmax_ref_direct)
{
    /* nt 4, lc 3: keys 7, positions 2t - 1 + lc = 10 */
    const int nt = 4, lc = 3, k = lc + nt, p = 2 * nt - 1 + lc;
    unsigned seed = 5;
    float *sc = hrand((size_t)nt * k, &seed, 2.0f), *bd = hrand((size_t)nt * p, &seed, 2.0f);
    float *want = hark_malloc(sizeof(float) * nt * k);
    const int lo[4] = {0, 2, 3, 5}, hi[4] = {7, 6, 3, 7};
    for (int i = 0; i < nt; i++) {
        double mx = -INFINITY, s = 0;
        double v[16];
        for (int j = 0; j < k; j++) { /* key j at relative offset j - (lc + i) */
            v[j] = (double)sc[i * k + j] + bd[i * p + (nt - 1 - i) + j];
            if (j >= lo[i] && j < hi[i] && v[j] > mx)
                mx = v[j];
        }
        for (int j = lo[i]; j < hi[i]; j++)
            s += exp(v[j] - mx);
        for (int j = 0; j < k; j++)
            want[i * k + j] = j >= lo[i] && j < hi[i] ? (float)(exp(v[j] - mx) / s) : 0.0f;
    }
    zf_rel_softmax_ref(sc, bd, lo, hi, nt, k, p);
    for (int i = 0; i < nt * k; i++)
        CHECKF(fabsf(sc[i] - want[i]) <= 1e-6f, "entry %d: %g vs %g", i, sc[i], want[i]);
    hark_free(sc);
    hark_free(bd);
    hark_free(want);
}

TEST(zf_pos_emb_ref_direct)
{
    const int nt = 5, lc = 2, e = 8;
    float pe[(2 * 5 - 1 + 2) * 8];
    compact_pos_emb_ref(pe, nt, lc, e);
    for (int r = 0; r < 2 * nt - 1 + lc; r++) {
        double x = r - (nt + lc - 1), cl = sqrt((double)e);
        double xc = cl * (x > 0 ? 1 : x < 0 ? -1 : 0) * (log(fabs(x) + cl) - log(cl));
        double xa = atan(xc / (e / (2 * M_PI)));
        for (int k = 0; k < e / 2; k++) {
            double c = cos(xa * (k + 1)), s = k == e / 2 - 1 ? 1.0 : sin(xa * (k + 1));
            CHECKF(fabs(pe[r * e + 2 * k] - c) < 1e-5 && fabs(pe[r * e + 2 * k + 1] - s) < 1e-5,
                   "row %d pair %d", r, k);
        }
    }
}

#ifdef HARK_CUDA
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>

static float *up(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof(float)) != cudaSuccess)
        return NULL;
    if (n)
        cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    return d;
}

static int *up_int(const int *h, size_t n)
{
    int *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * sizeof(int)) != cudaSuccess)
        return NULL;
    if (n)
        cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice);
    return d;
}

static float *down(const float *d, size_t n)
{
    float *h = hark_malloc((n ? n : 1) * sizeof(float));
    cudaDeviceSynchronize();
    cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

/* relative RMS of got (device) against want (host), n floats, printed */
static double err_of(const float *dgot, const float *want, size_t n, const char *what)
{
    float *got = down(dgot, n);
    double e = test_rel_rms(got, want, n);
    printf("  %s: rel RMS %.2e\n", what, e);
    hark_free(got);
    return e;
}

GPU_TEST(cuda_zf_cache_concat_store_match_ref)
{
    hark_err_t err = {0};
    unsigned seed = 3;
    const int n = 3, slots_h[3] = {2, 0, 5}, n_slots = 6, w = 13, ldx = 17;
    const long long ss = 1000, off = 37;
    const int cases[][2] = {{5, 3}, {5, 7}, {1, 1}, {0, 4}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int lc = cases[ci][0], nt = cases[ci][1], rows = lc + nt;
        float *pool = hrand((size_t)n_slots * ss, &seed, 1.0f);
        float *x = hrand((size_t)n * nt * ldx, &seed, 1.0f);
        float *want = hark_malloc(sizeof(float) * n * rows * w);
        float *want_pool = hark_malloc(sizeof(float) * n_slots * ss);
        memcpy(want_pool, pool, sizeof(float) * n_slots * ss);
        for (int j = 0; j < n; j++) {
            float *kv = want + (size_t)j * rows * w;
            const float *cache = pool + slots_h[j] * ss + off;
            memcpy(kv, cache, sizeof(float) * lc * w);
            for (int r = 0; r < nt; r++)
                memcpy(kv + (size_t)(lc + r) * w, x + ((size_t)j * nt + r) * ldx,
                       sizeof(float) * w);
            memcpy(want_pool + slots_h[j] * ss + off, kv + (size_t)nt * w, sizeof(float) * lc * w);
        }
        float *dpool = up(pool, (size_t)n_slots * ss), *dx = up(x, (size_t)n * nt * ldx);
        float *dkv = up(want, (size_t)n * rows * w); /* overwritten */
        int *dslot = up_int(slots_h, n);
        CHECK_OK(cudaMemset(dkv, 0xff, sizeof(float) * n * rows * w));
        CHECK_OK(
            cuda_zf_cache_concat(dkv, dpool, dslot, ss, off, dx, ldx, n, lc, nt, w, NULL, &err));
        CHECKF(err_of(dkv, want, (size_t)n * rows * w, "concat") == 0.0, "lc %d nt %d", lc, nt);
        CHECK_OK(cuda_zf_cache_store(dpool, dslot, ss, off, dkv, rows, nt, n, lc, w, NULL, &err));
        CHECKF(err_of(dpool, want_pool, (size_t)n_slots * ss, "store") == 0.0, "lc %d nt %d", lc,
               nt);
        /* no pool: zero rows in front */
        for (int j = 0; j < n; j++)
            memset(want + (size_t)j * rows * w, 0, sizeof(float) * lc * w);
        CHECK_OK(cuda_zf_cache_concat(dkv, NULL, NULL, 0, 0, dx, ldx, n, lc, nt, w, NULL, &err));
        CHECKF(err_of(dkv, want, (size_t)n * rows * w, "concat, no pool") == 0.0, "lc %d", lc);
        cudaFree(dpool);
        cudaFree(dx);
        cudaFree(dkv);
        cudaFree(dslot);
        hark_free(pool);
        hark_free(x);
        hark_free(want);
        hark_free(want_pool);
    }
    CHECK(cuda_zf_cache_store(NULL, NULL, 0, 0, NULL, 3, 2, 1, 2, 4, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
}

GPU_TEST(cuda_zf_pos_emb_matches_ref)
{
    hark_err_t err = {0};
    const int cases[][3] = {{1, 0, 4}, {16, 128, 48}, {37, 5, 16}, {3, 64, 2}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int nt = cases[i][0], lc = cases[i][1], e = cases[i][2];
        const size_t n = (size_t)(2 * nt - 1 + lc) * e;
        float *want = hark_malloc(sizeof(float) * n), *d = up(want, n);
        compact_pos_emb_ref(want, nt, lc, e);
        CHECK_OK(cuda_zf_pos_emb(d, nt, lc, e, NULL, &err));
        CHECKF(err_of(d, want, n, "pos_emb") <= 1e-6, "nt %d lc %d e %d", nt, lc, e);
        cudaFree(d);
        hark_free(want);
    }
    CHECK(cuda_zf_pos_emb(NULL, 3, 0, 7, NULL, &err) == HARK_ERR_INVALID_ARG);
}

GPU_TEST(cuda_zf_rel_softmax_matches_ref)
{
    hark_err_t err = {0};
    unsigned seed = 7;
    const int cases[][5] = {/* n, h, nt, lc, extra p */ {2, 3, 5, 0, 0},
                            {3, 2, 16, 9, 0},
                            {1, 4, 37, 0, 3},
                            {2, 1, 2, 300, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int n = cases[ci][0], h = cases[ci][1], nt = cases[ci][2], lc = cases[ci][3];
        const int k = lc + nt, p = 2 * nt - 1 + lc + cases[ci][4];
        const size_t ns = (size_t)n * h * nt * k, nb = (size_t)n * h * nt * p;
        float *sc = hrand(ns, &seed, 3.0f), *bd = hrand(nb, &seed, 3.0f);
        int *lo = hark_malloc(sizeof(int) * n * nt), *hi = hark_malloc(sizeof(int) * n * nt);
        for (int r = 0; r < n * nt; r++) {
            lo[r] = (int)((test_randf(&seed) + 1.0f) * 0.5f * k);
            hi[r] = lo[r] + (int)((test_randf(&seed) + 1.0f) * 0.5f * (k - lo[r] + 1));
            if (r % 5 == 3)
                hi[r] = lo[r]; /* empty */
        }
        for (int masked = 0; masked < 2; masked++) {
            float *want = hark_malloc(sizeof(float) * ns);
            memcpy(want, sc, sizeof(float) * ns);
            for (int j = 0; j < n; j++)
                for (int hh = 0; hh < h; hh++) {
                    size_t m = (size_t)j * h + hh;
                    zf_rel_softmax_ref(want + m * nt * k, bd + m * nt * p,
                                       masked ? lo + (size_t)j * nt : NULL,
                                       masked ? hi + (size_t)j * nt : NULL, nt, k, p);
                }
            float *dsc = up(sc, ns), *dbd = up(bd, nb);
            int *dlo = up_int(lo, (size_t)n * nt), *dhi = up_int(hi, (size_t)n * nt);
            CHECK_OK(cuda_zf_rel_softmax(dsc, dbd, masked ? dlo : NULL, masked ? dhi : NULL, n, h,
                                         nt, k, p, NULL, &err));
            CHECKF(err_of(dsc, want, ns, masked ? "rel_softmax, masked" : "rel_softmax") <= 1e-5,
                   "case %zu", ci);
            cudaFree(dsc);
            cudaFree(dbd);
            cudaFree(dlo);
            cudaFree(dhi);
            hark_free(want);
        }
        hark_free(sc);
        hark_free(bd);
        hark_free(lo);
        hark_free(hi);
    }
    CHECK(cuda_zf_rel_softmax(NULL, NULL, NULL, NULL, 1, 1, 4, 4, 6, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
}

GPU_TEST(cuda_zf_chunk_conv_matches_ref)
{
    hark_err_t err = {0};
    unsigned seed = 9;
    const int cases[][5] = {/* n, nt, d, kk, c */ {2, 16, 37, 7, 4},
                            {1, 16, 37, 31, 16},
                            {3, 13, 20, 15, 3},
                            {2, 5, 8, 7, -1},
                            {1, 40, 33, 31, 8},
                            {2, 2, 16, 31, 2}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int n = cases[ci][0], nt = cases[ci][1], d = cases[ci][2], kk = cases[ci][3];
        const int c = cases[ci][4], lp = kk / 2;
        const size_t ne = (size_t)n * (lp + nt) * d, no = (size_t)n * nt * d;
        float *ext = hrand(ne, &seed, 1.0f), *cw = hrand((size_t)d * (lp + 1), &seed, 0.5f);
        float *cb = hrand((size_t)d, &seed, 0.5f), *kw = hrand((size_t)d * kk, &seed, 0.5f);
        float *kb = hrand((size_t)d, &seed, 0.5f), *scale = hrand((size_t)2 * d * kk, &seed, 0.5f);
        float *want = hark_malloc(sizeof(float) * no), *tmp = hark_malloc(sizeof(float) * nt * d);
        float *dext = up(ext, ne), *dcw = up(cw, (size_t)d * (lp + 1)), *dcb = up(cb, d);
        float *dkw = up(kw, (size_t)d * kk), *dkb = up(kb, d), *dsc = up(scale, (size_t)2 * d * kk);
        float *dout = up(want, no);
        for (int act = 0; act < 2; act++) {
            const int a = act ? OPS_ACT_SWOOSHR : OPS_ACT_NONE;
            for (int j = 0; j < n; j++) {
                const float *e = ext + (size_t)j * (lp + nt) * d;
                zf_chunk_conv_ref(want + (size_t)j * nt * d, tmp, e + (size_t)lp * d, e, cw, cb, kw,
                                  kb, scale, nt, d, kk, c, a);
            }
            CHECK_OK(cuda_zf_chunk_conv(dout, dext, dcw, dcb, dkw, dkb, dsc, n, nt, d, kk, c, a,
                                        NULL, &err));
            CHECKF(err_of(dout, want, no, "chunk_conv") <= 1e-5, "case %zu act %d", ci, a);
        }
        cudaFree(dext);
        cudaFree(dcw);
        cudaFree(dcb);
        cudaFree(dkw);
        cudaFree(dkb);
        cudaFree(dsc);
        cudaFree(dout);
        hark_free(ext);
        hark_free(cw);
        hark_free(cb);
        hark_free(kw);
        hark_free(kb);
        hark_free(scale);
        hark_free(want);
        hark_free(tmp);
    }
}

GPU_TEST(cuda_zf_sampling_bypass_gate_match_ref)
{
    hark_err_t err = {0};
    unsigned seed = 21;
    const int n = 3, d = 19, ld = 23;
    const int tes[] = {13, 16, 1};
    const int dss[] = {1, 2, 4, 8};
    for (size_t ti = 0; ti < sizeof tes / sizeof *tes; ti++)
        for (size_t di = 0; di < sizeof dss / sizeof *dss; di++) {
            const int te = tes[ti], ds = dss[di], td = (te + ds - 1) / ds;
            float *in = hrand((size_t)n * te * ld, &seed, 1.0f), *w = hrand(ds, &seed, 1.0f);
            float *comb = hrand(d, &seed, 1.0f), *xs = hrand((size_t)n * td * d, &seed, 1.0f);
            float *want = hark_malloc(sizeof(float) * n * td * d);
            float *wcur = hark_malloc(sizeof(float) * n * te * ld);
            float *wouts = hark_malloc(sizeof(float) * n * te * d);
            memcpy(wcur, in, sizeof(float) * n * te * ld);
            for (int j = 0; j < n; j++) {
                zf_downsample_ref(want + (size_t)j * td * d, in + (size_t)j * te * ld, ld, w, te,
                                  ds, d);
                zf_upsample_combine_ref(wcur + (size_t)j * te * ld, ld, wouts + (size_t)j * te * d,
                                        xs + (size_t)j * td * d, comb, te, ds, d);
            }
            float *din = up(in, (size_t)n * te * ld), *dw = up(w, ds), *dcomb = up(comb, d);
            float *dxs = up(xs, (size_t)n * td * d), *dout = up(want, (size_t)n * td * d);
            float *douts = up(wouts, (size_t)n * te * d);
            CHECK_OK(cuda_zf_downsample(dout, din, ld, dw, n, te, ds, d, NULL, &err));
            CHECKF(err_of(dout, want, (size_t)n * td * d, "downsample") <= 1e-6, "te %d ds %d", te,
                   ds);
            CHECK_OK(
                cuda_zf_upsample_combine(din, ld, douts, dxs, dcomb, n, te, ds, d, NULL, &err));
            CHECKF(err_of(din, wcur, (size_t)n * te * ld, "upsample") <= 1e-6, "te %d ds %d", te,
                   ds);
            CHECKF(err_of(douts, wouts, (size_t)n * te * d, "upsample outs") <= 1e-6, "te %d ds %d",
                   te, ds);
            cudaFree(din);
            cudaFree(dw);
            cudaFree(dcomb);
            cudaFree(dxs);
            cudaFree(dout);
            cudaFree(douts);
            hark_free(in);
            hark_free(w);
            hark_free(comb);
            hark_free(xs);
            hark_free(want);
            hark_free(wcur);
            hark_free(wouts);
        }
    /* bypass and the gates */
    const int rows = 29, wd = 21, lda = 3 * wd;
    float *x = hrand((size_t)rows * wd, &seed, 1.0f), *orig = hrand((size_t)rows * wd, &seed, 1.0f);
    float *sc = hrand(wd, &seed, 1.0f), *p = hrand((size_t)rows * lda, &seed, 2.0f);
    float *want = hark_malloc(sizeof(float) * rows * wd);
    memcpy(want, x, sizeof(float) * rows * wd);
    zf_bypass_ref(want, orig, sc, rows, wd);
    float *dx = up(x, (size_t)rows * wd), *dorig = up(orig, (size_t)rows * wd), *dsc = up(sc, wd);
    float *dp = up(p, (size_t)rows * lda);
    CHECK_OK(cuda_zf_bypass(dx, dorig, dsc, rows, wd, NULL, &err));
    CHECK(err_of(dx, want, (size_t)rows * wd, "bypass") <= 1e-6);
    zf_gate_ref(want, p + wd, lda, p, lda, rows, wd, 1);
    CHECK_OK(cuda_zf_gate(dx, dp + wd, lda, dp, lda, rows, wd, 1, NULL, &err));
    CHECK(err_of(dx, want, (size_t)rows * wd, "gate, tanh") <= 1e-6);
    zf_gate_ref(want, want, wd, p + 2 * wd, lda, rows, wd, 0);
    CHECK_OK(cuda_zf_gate(dx, dx, wd, dp + 2 * wd, lda, rows, wd, 0, NULL, &err));
    CHECK(err_of(dx, want, (size_t)rows * wd, "gate, in place") <= 1e-6);
    cudaFree(dx);
    cudaFree(dorig);
    cudaFree(dsc);
    cudaFree(dp);
    hark_free(x);
    hark_free(orig);
    hark_free(sc);
    hark_free(p);
    hark_free(want);
}

GPU_TEST(cuda_zf_embed_ops_match_ref)
{
    hark_err_t err = {0};
    unsigned seed = 31;
    /* encoder_embed's layout: conv (n, tc, c, wf) -> ext (n, pad + tc + tail, w2, c) */
    const int n = 2, tc = 6, c = 5, wf = 7, w2 = 4, pad = 3, kk = 7;
    const long long ss = 500, off = 11;
    const int slots_h[2] = {1, 0};
    float *conv = hrand((size_t)n * tc * c * wf, &seed, 1.0f);
    float *pool = hrand((size_t)2 * ss, &seed, 1.0f);
    float *dconv = up(conv, (size_t)n * tc * c * wf), *dpool = up(pool, (size_t)2 * ss);
    int *dslot = up_int(slots_h, 2);
    for (int stream = 0; stream < 2; stream++) {
        const int tail = stream ? 0 : pad, rows = pad + tc + tail;
        const size_t row = (size_t)w2 * c, ne = (size_t)n * rows * row;
        float *want = hark_malloc(sizeof(float) * ne);
        memset(want, 0, sizeof(float) * ne);
        for (int j = 0; j < n; j++) {
            float *e = want + (size_t)j * rows * row;
            if (stream)
                memcpy(e, pool + slots_h[j] * ss + off, sizeof(float) * pad * row);
            for (int nt = 0; nt < tc; nt++)
                for (int ch = 0; ch < c; ch++)
                    for (int q = 0; q < w2; q++)
                        e[(size_t)(pad + nt) * row + (size_t)q * c + ch] =
                            conv[(((size_t)j * tc + nt) * c + ch) * wf + 2 * q];
        }
        float *dext = up(want, ne);
        CHECK_OK(cudaMemset(dext, 0xff, sizeof(float) * ne));
        CHECK_OK(cuda_zf_embed_ext(dext, dconv, stream ? dpool : NULL, dslot, ss, off, n, tc, c, wf,
                                   pad, tail, NULL, &err));
        CHECK(err_of(dext, want, ne, stream ? "embed_ext, stream" : "embed_ext") == 0.0);
        /* the ConvNeXt over it: nt = rows - (kk - 1) frames */
        const int nt = rows - (kk - 1);
        float *w = hrand((size_t)c * kk * kk, &seed, 0.3f), *b = hrand(c, &seed, 0.3f);
        float *wdw = hark_malloc(sizeof(float) * n * nt * row);
        float *wout = hark_malloc(sizeof(float) * n * nt * row);
        float *y = hrand((size_t)n * nt * row, &seed, 1.0f);
        for (int j = 0; j < n; j++) {
            zf_convnext_dw_ref(wdw + (size_t)j * nt * row, want + (size_t)j * rows * row, w, b, nt,
                               w2, c, kk);
            zf_convnext_out_ref(wout + (size_t)j * nt * row, y + (size_t)j * nt * row,
                                want + ((size_t)j * rows + pad) * row, nt, w2, c);
        }
        float *dw = up(w, (size_t)c * kk * kk), *db = up(b, c), *dy = up(y, (size_t)n * nt * row);
        float *ddw = up(wdw, (size_t)n * nt * row), *dout = up(wout, (size_t)n * nt * row);
        CHECK_OK(cuda_zf_convnext_dw(ddw, dext, dw, db, n, nt, w2, c, kk, NULL, &err));
        CHECK(err_of(ddw, wdw, (size_t)n * nt * row, "convnext_dw") <= 1e-6);
        CHECK_OK(cuda_zf_convnext_out(dout, dy, dext, rows, pad, n, nt, w2, c, NULL, &err));
        CHECK(err_of(dout, wout, (size_t)n * nt * row, "convnext_out") <= 1e-6);
        cudaFree(dext);
        cudaFree(dw);
        cudaFree(db);
        cudaFree(dy);
        cudaFree(ddw);
        cudaFree(dout);
        hark_free(want);
        hark_free(w);
        hark_free(b);
        hark_free(wdw);
        hark_free(wout);
        hark_free(y);
    }
    cudaFree(dconv);
    cudaFree(dpool);
    cudaFree(dslot);
    hark_free(conv);
    hark_free(pool);
}
#endif
