/* GPU tests for src/ops/transducer_cuda.cu against their CPU references (ops_cpu.c) on awkward
 * sizes: BasicNorm (basic_norm_ref), the first conv's padded input (the loop below), the
 * relative-position attention with rel_shift (rel_attention_ref, per utterance of a padded batch,
 * full, chunked and grouped by a small scratch). The greedy-search kernels are checked through
 * the model against icefall_greedy_search (tests/model/icefall/test_icefall_gpu.c). Tolerances:
 * relative RMS error against the reference from the same (16-bit rounded where 16-bit) inputs,
 * FP32 1e-5, FP16 1e-2, BF16 8e-2 (its unit roundoff is 8 times FP16's). */
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

#endif
