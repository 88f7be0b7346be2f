/* GPU tests for src/ops/transducer_cuda.cu against their CPU references (ops_cpu.c) on awkward
 * sizes: BasicNorm (basic_norm_ref), the Zipformer's BiasNorm (bias_norm_ref), the first conv's
 * padded input (the loop below), the relative-position attention with rel_shift
 * (rel_attention_ref, per utterance of a padded batch, full, chunked and grouped by a small
 * scratch), modified beam search's top k (beam_topk_ref: the same picks, ties and short sets
 * included) and the stateless decoder of given contexts (the loop below, icefall_decoder's). The
 * greedy-search kernels are checked through the model against icefall_greedy_search
 * (tests/model/icefall/test_icefall_gpu.c). Tolerances: relative RMS error against the reference
 * from the same (16-bit rounded where 16-bit) inputs, FP32 1e-5, FP16 1e-2, BF16 8e-2 (its unit
 * roundoff is 8 times FP16's). */
#include "test.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <string.h>

static const ops_dtype_t DTS[3] = {OPS_F32, OPS_F16, OPS_BF16};

static double tol_of(ops_dtype_t t)
{
    return t == OPS_F32 ? 1e-5 : t == OPS_F16 ? 1e-2 : 8e-2;
}

static const char *dt_name(ops_dtype_t t)
{
    return t == OPS_F16 ? "fp16" : t == OPS_BF16 ? "bf16" : "fp32";
}

/* a device copy of h (n floats) in type t */
static void *up(const float *h, size_t n, ops_dtype_t t)
{
    void *d = NULL;
    float *tmp = NULL;
    if (cudaMalloc(&d, (n + 1) * ops_dtype_size(t)) != cudaSuccess ||
        cudaMalloc((void **)&tmp, (n + 1) * sizeof(float)) != cudaSuccess)
        return NULL;
    cudaMemcpy(tmp, h, n * sizeof(float), cudaMemcpyHostToDevice);
    cuda_cast(d, t, tmp, OPS_F32, n, NULL, NULL);
    cudaDeviceSynchronize();
    cudaFree(tmp);
    return d;
}

/* h (n floats) = device d of type t */
static void down(float *h, const void *d, size_t n, ops_dtype_t t)
{
    float *tmp = NULL;
    cudaMalloc((void **)&tmp, (n + 1) * sizeof(float));
    cuda_cast(tmp, OPS_F32, d, t, n, NULL, NULL);
    cudaMemcpy(h, tmp, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(tmp);
}

/* h rounded through type t, in place (what the device sees) */
static void round_to(float *h, size_t n, ops_dtype_t t)
{
    if (t == OPS_F32)
        return;
    void *d = up(h, n, t);
    down(h, d, n, t);
    cudaFree(d);
}

static float *hrand(size_t n, unsigned *seed, float scale)
{
    float *p = hark_malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

GPU_TEST(cuda_basic_norm_matches_ref)
{
    const int shapes[][2] = {{1, 7}, {37, 257}, {5, 512}, {3, 1100}};
    unsigned seed = 11;
    hark_err_t err = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], d = shapes[s][1];
        size_t N = (size_t)n * d;
        float *x = hrand(N, &seed, 3.0f), *ref = hark_malloc(N * 4), *got = hark_malloc(N * 4);
        basic_norm_ref(ref, x, n, d, 0.3f);
        for (int k = 0; k < 3; k++) {
            ops_dtype_t ty = DTS[k];
            float *dx = up(x, N, OPS_F32);
            void *dh = up(x, N, ty);
            CHECK_OK(cuda_basic_norm(dx, dh, ty, dx, n, d, 0.3f, NULL, &err));
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            down(got, dx, N, OPS_F32);
            double e32 = test_rel_rms(got, ref, N);
            down(got, dh, N, ty);
            double eh = test_rel_rms(got, ref, N);
            printf("  %d x %d %s: float out %.2e, %s out %.2e\n", n, d, dt_name(ty), e32,
                   dt_name(ty), eh);
            CHECKF(e32 <= 1e-5, "%d x %d: float output %.3g", n, d, e32);
            CHECKF(eh <= tol_of(ty) / 4, "%d x %d: %s output %.3g", n, d, dt_name(ty), eh);
            cudaFree(dx);
            cudaFree(dh);
        }
        hark_free(x);
        hark_free(ref);
        hark_free(got);
    }
}

GPU_TEST(cuda_bias_norm_matches_ref)
{
    const int shapes[][2] = {{1, 7}, {37, 257}, {5, 384}, {3, 1100}};
    unsigned seed = 13;
    hark_err_t err = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int n = shapes[s][0], d = shapes[s][1];
        size_t N = (size_t)n * d;
        float *x = hrand(N, &seed, 3.0f), *b = hrand((size_t)d, &seed, 1.0f);
        float *ref = hark_malloc(N * 4), *got = hark_malloc(N * 4);
        memcpy(ref, x, N * 4);
        bias_norm_ref(ref, n, d, d, b, 1.7f);
        float *db = up(b, (size_t)d, OPS_F32);
        for (int k = 0; k < 3; k++) {
            ops_dtype_t ty = DTS[k];
            float *dx = up(x, N, OPS_F32);
            void *dh = up(x, N, ty);
            CHECK_OK(cuda_bias_norm(dx, dh, ty, dx, n, d, db, 1.7f, NULL, &err));
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            down(got, dx, N, OPS_F32);
            double e32 = test_rel_rms(got, ref, N);
            down(got, dh, N, ty);
            double eh = test_rel_rms(got, ref, N);
            CHECKF(e32 <= 1e-5, "%d x %d: float output %.3g", n, d, e32);
            CHECKF(eh <= tol_of(ty) / 4, "%d x %d: %s output %.3g", n, d, dt_name(ty), eh);
            cudaFree(dx);
            cudaFree(dh);
        }
        CHECK(cuda_bias_norm(NULL, NULL, OPS_F32, NULL, n, d, NULL, 1.0f, NULL, &err) ==
              HARK_ERR_INVALID_ARG);
        cudaFree(db);
        hark_free(x);
        hark_free(b);
        hark_free(ref);
        hark_free(got);
    }
}

GPU_TEST(cuda_pad_frames_matches_loop)
{
    enum { B = 3, T = 11, F = 5 };
    const int lens[B] = {11, 4, 7};
    unsigned seed = 5;
    hark_err_t err = {0};
    float *x = hrand((size_t)B * T * F, &seed, 2.0f);
    const size_t N = (size_t)B * (T + 2) * (F + 2);
    float *ref = hark_malloc(N * 4), *got = hark_malloc(N * 4);
    int *dl = NULL;
    CHECK(cudaMalloc((void **)&dl, sizeof lens) == cudaSuccess);
    cudaMemcpy(dl, lens, sizeof lens, cudaMemcpyHostToDevice);
    for (int with_lens = 0; with_lens < 2; with_lens++)
        for (int k = 0; k < 3; k++) {
            ops_dtype_t ty = DTS[k];
            for (int b = 0; b < B; b++)
                for (int r = 0; r < T + 2; r++)
                    for (int c = 0; c < F + 2; c++) {
                        float v = 0.0f;
                        if (r >= 1 && r <= T && c >= 1 && c <= F)
                            v = with_lens && r - 1 >= lens[b]
                                    ? -23.0f
                                    : x[((size_t)b * T + r - 1) * F + c - 1];
                        ref[((size_t)b * (T + 2) + r) * (F + 2) + c] = v;
                    }
            round_to(ref, N, ty);
            float *dx = up(x, (size_t)B * T * F, OPS_F32);
            void *d = NULL;
            CHECK(cudaMalloc(&d, N * ops_dtype_size(ty)) == cudaSuccess);
            cudaMemset(d, 0xff, N * ops_dtype_size(ty));
            CHECK_OK(
                cuda_pad_frames(d, ty, dx, with_lens ? dl : NULL, -23.0f, B, T, F, NULL, &err));
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            down(got, d, N, ty);
            CHECKF(test_max_abs_diff(got, ref, N) == 0.0, "%s, lens %d: differs", dt_name(ty),
                   with_lens);
            cudaFree(d);
            cudaFree(dx);
        }
    cudaFree(dl);
    hark_free(x);
    hark_free(ref);
    hark_free(got);
}

/* one case: batch B of t frames, lens, H heads of dk, the chunk mask, scratch for `group`
 * utterances; every row of ctx against rel_attention_ref per utterance */
static void rel_case(test_ctx_t *t, ops_cuda_t *g, ops_dtype_t dt, int B, int nt, const int *lens,
                     int H, int dk, int chunk, int left, int group, unsigned seed)
{
    hark_err_t err = {0};
    const int hd = H * dk, P = 2 * nt - 1, ld = 3 * hd + 5, ldp = hd + 3, ldc = hd + 2;
    float *qkv = hrand((size_t)B * nt * ld, &seed, 1.5f), *pp = hrand((size_t)P * ldp, &seed, 1.0f);
    float *bu = hrand((size_t)hd, &seed, 0.5f), *bv = hrand((size_t)hd, &seed, 0.5f);
    round_to(qkv, (size_t)B * nt * ld, dt);
    round_to(pp, (size_t)P * ldp, dt);
    float *ref = hark_calloc((size_t)B * nt * ldc, sizeof(float));
    float *got = hark_calloc((size_t)B * nt * ldc, sizeof(float));
    float *sc = hark_malloc(sizeof(float) * rel_attention_scratch_floats(nt, dk));
    int *lo = hark_malloc(sizeof(int) * nt), *hi = hark_malloc(sizeof(int) * nt);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < nt; i++) {
            lo[i] = 0;
            hi[i] = lens[b];
            if (chunk > 0) {
                int c = i / chunk, end = (c + 1) * chunk;
                lo[i] = left < 0 ? 0 : (c - left) * chunk > 0 ? (c - left) * chunk : 0;
                hi[i] = end < lens[b] ? end : lens[b];
            }
        }
        rel_attention_ref(ref + (size_t)b * nt * ldc, ldc, sc, qkv + (size_t)b * nt * ld, ld, pp,
                          ldp, bu, bv, lo, hi, nt, H, dk, 0.37f);
    }
    void *dq = up(qkv, (size_t)B * nt * ld, dt), *dp = up(pp, (size_t)P * ldp, dt);
    float *dbu = up(bu, hd, OPS_F32), *dbv = up(bv, hd, OPS_F32);
    void *dc = up(got, (size_t)B * nt * ldc, dt); /* zeros: the gap columns stay 0 */
    int *dl = NULL;
    size_t sb = cuda_rel_attention_scratch_bytes(group, nt, H, dk, dt);
    void *scr = NULL;
    CHECK(cudaMalloc((void **)&dl, sizeof(int) * B) == cudaSuccess &&
          cudaMalloc(&scr, sb) == cudaSuccess);
    cudaMemcpy(dl, lens, sizeof(int) * B, cudaMemcpyHostToDevice);
    CHECK_OK(cuda_rel_attention(dc, ldc, dt, scr, sb, dq, ld, dp, ldp, dbu, dbv, dl, chunk, left, B,
                                nt, H, dk, 0.37f, g, &err));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    down(got, dc, (size_t)B * nt * ldc, dt);
    double e = test_rel_rms(got, ref, (size_t)B * nt * ldc);
    printf("  %s B %d t %d H %d dk %d chunk %d left %d group %d: rel RMS %.2e\n", dt_name(dt), B,
           nt, H, dk, chunk, left, group, e);
    CHECKF(e <= tol_of(dt), "%s t %d chunk %d group %d: rel RMS %.3g", dt_name(dt), nt, chunk,
           group, e);
    cudaFree(dq);
    cudaFree(dp);
    cudaFree(dbu);
    cudaFree(dbv);
    cudaFree(dc);
    cudaFree(dl);
    cudaFree(scr);
    hark_free(qkv);
    hark_free(pp);
    hark_free(bu);
    hark_free(bv);
    hark_free(ref);
    hark_free(got);
    hark_free(sc);
    hark_free(lo);
    hark_free(hi);
}

GPU_TEST(cuda_rel_attention_matches_ref)
{
    ops_cuda_t *g = NULL;
    hark_err_t err = {0};
    CHECK_OK(ops_cuda_create(NULL, &g, &err));
    const int lens3[3] = {37, 20, 1}, lens1[1] = {300};
    for (int k = 0; k < 3; k++) {
        ops_dtype_t dt = DTS[k];
        rel_case(t, g, dt, 3, 37, lens3, 3, 20, 0, 0, 3, 1u + k);
        rel_case(t, g, dt, 3, 37, lens3, 3, 20, 0, 0, 1, 2u + k); /* one utterance at a time */
        rel_case(t, g, dt, 3, 37, lens3, 3, 20, 8, 1, 2, 3u + k); /* chunks of 8, one left */
        rel_case(t, g, dt, 3, 37, lens3, 3, 20, 5, -1, 3, 4u + k);
        rel_case(t, g, dt, 1, 300, lens1, 4, 64, 0, 0, 1, 5u + k);
    }
    /* a scratch that holds no utterance is refused */
    CHECK(cuda_rel_attention(NULL, 60, OPS_F32, NULL, 16, NULL, 180, NULL, 60, NULL, NULL, NULL, 0,
                             0, 2, 37, 3, 20, 1.0f, g, &err) == HARK_ERR_INVALID_ARG);
    ops_cuda_destroy(g);
}

/* sets of rows (an utterance's hypotheses) of V logits: the GPU's picks are the reference's, the
 * values within float rounding of the double log-sum-exp; ties inside a row (equal logits) keep
 * the lower index first */
static void topk_case(test_ctx_t *t, int V, int k, int with_bias, const int *rows, int sets,
                      unsigned seed)
{
    hark_err_t err = {0};
    int off[9] = {0}, max_rows = 1;
    for (int s = 0; s < sets; s++) {
        off[s + 1] = off[s] + rows[s];
        max_rows = rows[s] > max_rows ? rows[s] : max_rows;
    }
    const int n = off[sets], ldx = V + 3;
    float *x = hrand((size_t)n * ldx + 1, &seed, 4.0f), *hyp = hrand((size_t)n + 1, &seed, 6.0f);
    float *bias = hrand((size_t)V, &seed, 1.0f);
    for (int r = 0; r < n; r++) /* ties: a row's columns 1 and V-1 repeat column 0 */
        if (V > 2 && r % 2 == 0)
            x[(size_t)r * ldx + 1] = x[(size_t)r * ldx + V - 1] = x[(size_t)r * ldx] + 9.0f;
    if (with_bias)
        bias[1] = bias[V - 1] = bias[0];
    float *dx = up(x, (size_t)n * ldx + 1, OPS_F32), *dh = up(hyp, (size_t)n + 1, OPS_F32);
    float *db = up(bias, (size_t)V, OPS_F32), *dv = NULL;
    int *doff = NULL, *di = NULL;
    CHECK(cudaMalloc((void **)&doff, sizeof off) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dv, sizeof(float) * sets * k) == cudaSuccess);
    CHECK(cudaMalloc((void **)&di, sizeof(int) * sets * k) == cudaSuccess);
    cudaMemcpy(doff, off, sizeof off, cudaMemcpyHostToDevice);
    CHECK_OK(cuda_beam_topk(dv, di, dx, ldx, with_bias ? db : NULL, dh, doff, sets, max_rows, V, k,
                            NULL, &err));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    float *gv = hark_malloc(sizeof(float) * sets * k), *rv = hark_malloc(sizeof(float) * k);
    int *gi = hark_malloc(sizeof(int) * sets * k), *ri = hark_malloc(sizeof(int) * k);
    cudaMemcpy(gv, dv, sizeof(float) * sets * k, cudaMemcpyDeviceToHost);
    cudaMemcpy(gi, di, sizeof(int) * sets * k, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int s = 0; s < sets; s++) {
        int nk = beam_topk_ref(rv, ri, x + (size_t)off[s] * ldx, ldx, with_bias ? bias : NULL,
                               hyp + off[s], rows[s], V, k);
        for (int j = 0; j < k; j++) {
            int want = j < nk ? ri[j] : -1, got = gi[(size_t)s * k + j];
            double dvv = j < nk ? fabs((double)gv[(size_t)s * k + j] - rv[j]) : 0.0;
            if (got != want || dvv > 1e-5 * (1.0 + fabs(rv[j < nk ? j : 0]))) {
                if (bad++ < 5)
                    printf("  V %d k %d set %d pick %d: index %d (want %d), value diff %.3g\n", V,
                           k, s, j, got, want, dvv);
            }
        }
    }
    CHECKF(!bad, "V %d, k %d, bias %d: %d picks differ", V, k, with_bias, bad);
    /* a set over max_rows is marked, not read */
    if (max_rows > 1) {
        CHECK_OK(
            cuda_beam_topk(dv, di, dx, ldx, NULL, dh, doff, sets, max_rows - 1, V, k, NULL, &err));
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        cudaMemcpy(gi, di, sizeof(int) * sets * k, cudaMemcpyDeviceToHost);
        for (int s = 0; s < sets; s++)
            if (rows[s] == max_rows)
                CHECKF(gi[(size_t)s * k] == -2, "set %d over max_rows: %d", s, gi[(size_t)s * k]);
    }
    cudaFree(dx);
    cudaFree(dh);
    cudaFree(db);
    cudaFree(dv);
    cudaFree(di);
    cudaFree(doff);
    hark_free(x);
    hark_free(hyp);
    hark_free(bias);
    hark_free(gv);
    hark_free(rv);
    hark_free(gi);
    hark_free(ri);
}

GPU_TEST(cuda_beam_topk_matches_ref)
{
    const int rows_a[4] = {1, 4, 3, 7}, rows_b[3] = {2, 1, 64}, rows_c[2] = {1, 2};
    topk_case(t, 500, 4, 1, rows_a, 4, 1u);
    topk_case(t, 500, 4, 0, rows_a, 4, 2u);
    topk_case(t, 37, 10, 1, rows_a, 4, 3u);
    topk_case(t, 1001, 64, 1, rows_b, 3, 4u);
    topk_case(t, 3, 8, 0, rows_c, 2, 5u); /* k past a set's rows·V: -1 after them */
    topk_case(t, 1, 1, 1, rows_a, 4, 6u);
    hark_err_t err = {0};
    CHECK(cuda_beam_topk(NULL, NULL, NULL, 10, NULL, NULL, NULL, 1, 0, 10, 4, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(cuda_beam_topk(NULL, NULL, NULL, 9, NULL, NULL, NULL, 1, 4, 10, 4, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
}

/* dec[r][ch] = relu(Σ_k Σ_j conv[ch][j][k] · emb[ctx[r][k]][gs·(ch / gs) + j]), id -1 zero */
GPU_TEST(cuda_transducer_decoder_matches_loop)
{
    const int shapes[][4] = {{7, 13, 2, 1}, {500, 96, 2, 4}, {29, 40, 3, 8}}; /* V D cs gs */
    unsigned seed = 21;
    hark_err_t err = {0};
    for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
        const int V = shapes[c][0], D = shapes[c][1], cs = shapes[c][2], gs = shapes[c][3];
        const int n = 11;
        float *emb = hrand((size_t)V * D, &seed, 1.0f),
              *conv = hrand((size_t)D * gs * cs, &seed, 1.0f);
        int *ctx = hark_malloc(sizeof(int) * n * cs);
        for (int i = 0; i < n * cs; i++)
            ctx[i] = i % 5 == 0 ? -1 : (int)(test_randf(&seed) * 0.5f * V + 0.5f * V) % V;
        float *ref = hark_malloc(sizeof(float) * n * D), *got = hark_malloc(sizeof(float) * n * D);
        for (int r = 0; r < n; r++)
            for (int ch = 0; ch < D; ch++) {
                double o = 0.0;
                for (int k = 0; k < cs; k++) {
                    int id = ctx[r * cs + k];
                    for (int j = 0; id >= 0 && j < gs; j++)
                        o += (double)conv[((size_t)ch * gs + j) * cs + k] *
                             emb[(size_t)id * D + (ch / gs) * gs + j];
                }
                ref[(size_t)r * D + ch] = o > 0.0 ? (float)o : 0.0f;
            }
        float *demb = up(emb, (size_t)V * D, OPS_F32),
              *dconv = up(conv, (size_t)D * gs * cs, OPS_F32);
        int *dctx = NULL;
        CHECK(cudaMalloc((void **)&dctx, sizeof(int) * n * cs) == cudaSuccess);
        cudaMemcpy(dctx, ctx, sizeof(int) * n * cs, cudaMemcpyHostToDevice);
        for (int k = 0; k < 3; k++) {
            ops_dtype_t ty = DTS[k];
            void *d = NULL;
            CHECK(cudaMalloc(&d, (size_t)n * D * ops_dtype_size(ty)) == cudaSuccess);
            CHECK_OK(cuda_transducer_decoder(d, ty, dctx, n, demb, dconv, D, cs, gs, NULL, &err));
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            down(got, d, (size_t)n * D, ty);
            double e = test_rel_rms(got, ref, (size_t)n * D);
            CHECKF(e <= (ty == OPS_F32 ? 1e-6 : tol_of(ty) / 4), "V %d D %d cs %d gs %d %s: %.3g",
                   V, D, cs, gs, dt_name(ty), e);
            cudaFree(d);
        }
        CHECK(cuda_transducer_decoder(NULL, OPS_F32, dctx, n, demb, dconv, D, cs, 7, NULL, &err) ==
              HARK_ERR_INVALID_ARG);
        cudaFree(demb);
        cudaFree(dconv);
        cudaFree(dctx);
        hark_free(emb);
        hark_free(conv);
        hark_free(ctx);
        hark_free(ref);
        hark_free(got);
    }
}

#endif
