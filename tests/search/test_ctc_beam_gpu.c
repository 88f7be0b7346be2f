/* Tests for the GPU CTC prefix beam search (src/search/ctc_beam_gpu.h) against its CPU reference
 * ctc_prefix_beam_search: padded batches of random, peaked, tied and -inf log-probs on awkward
 * sizes and beams, and the golden set's CTC log-probs. Token lists, times and the number of
 * hypotheses must be identical; scores agree to 1e-9 relative (double exp/log on the GPU are
 * within 1 ulp of glibc's, accumulated over the frames). */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "search/ctc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include "search/ctc_beam_gpu.h"

#include <cuda_runtime_api.h>

enum { LP_RANDOM, LP_PEAKED, LP_TIED };

/* (T, V) log-probs, rows normalised; PEAKED: a few likely tokens with blank often on top and
 * repeats (merges, "aa" extensions); TIED: values on a coarse grid with -inf entries. */
static void fill_logp(float *lp, int T, int V, int blank, int kind, unsigned *seed)
{
    for (int t = 0; t < T; t++) {
        float *r = lp + (size_t)t * V;
        for (int v = 0; v < V; v++) {
            float x = 4.0f * test_randf(seed);
            if (kind == LP_PEAKED)
                x = -6.0f + 2.0f * test_randf(seed);
            else if (kind == LP_TIED)
                x = (test_rand(seed) % 5 == 0) ? -INFINITY : (float)(int)(4.0f * x) * 0.25f;
            r[v] = x;
        }
        if (kind == LP_PEAKED) {
            int a = (int)(test_rand(seed) % (unsigned)V);
            r[a] += 6.0f;
            if (test_rand(seed) % 2)
                r[blank] += 5.0f;
        }
        if (kind == LP_TIED)
            r[(int)(test_rand(seed) % (unsigned)V)] = 1.0f; /* each row keeps a finite max */
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < V; v++)
            m = r[v] > m ? r[v] : m;
        for (int v = 0; v < V; v++)
            s += exp((double)r[v] - m);
        /* s >= 1: the row's maximum adds exp(0) */
        // cppcheck-suppress invalidFunctionArg
        float ls = (float)(m + log(s));
        for (int v = 0; v < V; v++)
            r[v] -= ls;
    }
}

/* 1 when the GPU's n-best of utterance b equals the CPU's (tokens, times exact; scores to 1e-9
 * relative); reports the first difference. */
static int same_as_cpu(test_ctx_t *t, const ctc_beam_gpu_t *g, int b, const float *lp, int T, int V,
                       int beam, int blank, const char *what)
{
    ctc_nbest_t ref, got;
    hark_err_t err = {0};
    if (ctc_prefix_beam_search(lp, T, V, beam, blank, &ref, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "cpu search: %s", err.msg);
        return 0;
    }
    if (ctc_beam_gpu_nbest(g, b, &got, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "gpu nbest: %s", err.msg);
        ctc_nbest_free(&ref);
        return 0;
    }
    int ok = got.n == ref.n;
    if (!ok)
        test_fail(t, __FILE__, __LINE__, "%s utt %d (T %d): %d hypotheses, cpu %d", what, b, T,
                  got.n, ref.n);
    for (int i = 0; ok && i < ref.n; i++) {
        int L = ref.lens[i];
        double tol = 1e-9 * (fabs(ref.scores[i]) > 1.0 ? fabs(ref.scores[i]) : 1.0);
        if (got.lens[i] != L || memcmp(got.tokens[i], ref.tokens[i], sizeof(int) * L) ||
            memcmp(got.times[i], ref.times[i], sizeof(int) * L) ||
            !(fabs(got.scores[i] - ref.scores[i]) <= tol ||
              (isinf(ref.scores[i]) && got.scores[i] == ref.scores[i]))) {
            test_fail(
                t, __FILE__, __LINE__,
                "%s utt %d (T %d, V %d, beam %d): hypothesis %d: len %d/%d, score %.17g/%.17g",
                what, b, T, V, beam, i, got.lens[i], L, got.scores[i], ref.scores[i]);
            ok = 0;
        }
    }
    ctc_nbest_free(&ref);
    ctc_nbest_free(&got);
    return ok;
}

GPU_TEST(gpu_ctc_beam_matches_cpu)
{
    /* V, beam, blank, max T, log-prob kind */
    static const int cases[][5] = {
        {1, 3, 0, 9, LP_RANDOM},      {2, 1, 1, 40, LP_PEAKED},    {5, 4, 0, 61, LP_PEAKED},
        {5, 10, 4, 77, LP_TIED},      {37, 10, 0, 130, LP_RANDOM}, {37, 7, 3, 129, LP_PEAKED},
        {37, 32, 0, 50, LP_PEAKED},   {300, 32, 299, 45, LP_TIED}, {5002, 10, 0, 250, LP_PEAKED},
        {5002, 16, 0, 97, LP_RANDOM}, {33, 31, 0, 64, LP_TIED},
    };
    unsigned seed = 11;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int V = cases[c][0], beam = cases[c][1], blank = cases[c][2], tmax = cases[c][3];
        int kind = cases[c][4], B = 5;
        int lens[5] = {tmax, 0, 1, tmax / 2 + 1, tmax - 3 > 0 ? tmax - 3 : 1};
        size_t n = (size_t)B * tmax * V;
        float *lp = malloc(sizeof(float) * n), *d_lp = NULL;
        CHECK(lp);
        for (int b = 0; b < B; b++) {
            float *u = lp + (size_t)b * tmax * V;
            fill_logp(u, lens[b], V, blank, kind, &seed);
            for (size_t i = (size_t)lens[b] * V; i < (size_t)tmax * V; i++)
                u[i] = NAN; /* padding frames: never read */
        }
        CHECK(cudaMalloc((void **)&d_lp, sizeof(float) * n) == cudaSuccess);
        CHECK(cudaMemcpy(d_lp, lp, sizeof(float) * n, cudaMemcpyHostToDevice) == cudaSuccess);
        ctc_beam_gpu_t *g = NULL;
        hark_err_t err = {0};
        CHECKF(ctc_beam_gpu_create(B + 2, tmax + 5, V, beam, blank, &g, &err) == HARK_OK, "%s",
               err.msg);
        CHECKF(ctc_beam_gpu_run(g, d_lp, lens, B, tmax, beam, NULL, &err) == HARK_OK, "%s",
               err.msg);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        char what[64];
        snprintf(what, sizeof what, "case %zu", c);
        for (int b = 0; b < B; b++)
            if (!same_as_cpu(t, g, b, lp + (size_t)b * tmax * V, lens[b], V, beam, blank, what))
                return;
        /* a narrower beam on the same scratch */
        if (beam > 2) {
            CHECK_OK(ctc_beam_gpu_run(g, d_lp, lens, B, tmax, beam - 2, NULL, &err));
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            for (int b = 0; b < B; b++)
                if (!same_as_cpu(t, g, b, lp + (size_t)b * tmax * V, lens[b], V, beam - 2, blank,
                                 what))
                    return;
        }
        ctc_beam_gpu_destroy(g);
        cudaFree(d_lp);
        free(lp);
    }
}

GPU_TEST(gpu_ctc_beam_bad_args)
{
    ctc_beam_gpu_t *g = NULL;
    hark_err_t err = {0};
    CHECK(ctc_beam_gpu_create(2, 10, 5, CTC_GPU_MAX_BEAM + 1, 0, &g, &err) == HARK_ERR_TOO_LARGE);
    CHECK(!g);
    CHECK(ctc_beam_gpu_create(2, 10, 5, 3, 5, &g, &err) == HARK_ERR_INVALID_ARG);
    CHECK_OK(ctc_beam_gpu_create(2, 10, 5, 3, 0, &g, &err));
    float *d = NULL;
    CHECK(cudaMalloc((void **)&d, sizeof(float) * 3 * 11 * 5) == cudaSuccess);
    int lens[3] = {4, 11, 2};
    CHECK(ctc_beam_gpu_run(g, d, lens, 3, 10, 3, NULL, &err) == HARK_ERR_INVALID_ARG); /* batch */
    CHECK(ctc_beam_gpu_run(g, d, lens, 2, 11, 3, NULL, &err) == HARK_ERR_INVALID_ARG); /* frames */
    CHECK(ctc_beam_gpu_run(g, d, lens, 2, 10, 4, NULL, &err) == HARK_ERR_INVALID_ARG); /* beam */
    CHECK(ctc_beam_gpu_run(g, d, lens, 2, 10, 3, NULL, &err) == HARK_ERR_INVALID_ARG); /* lens */
    ctc_nbest_t nb;
    CHECK(ctc_beam_gpu_nbest(g, 0, &nb, &err) == HARK_ERR_INVALID_ARG); /* no run yet */
    cudaFree(d);
    ctc_beam_gpu_destroy(g);
}

#define GSET "golden/wenet_u2pp_conformer_small"

GPU_TEST(gpu_ctc_beam_golden)
{
    static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                                 "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                 "cards-001"};
    NEED_SHARED(GSET "/results.json");
    npy_array_t lp[5];
    int lens[5], V = 0, tmax = 0;
    for (int k = 0; k < 5; k++) {
        char rel[512];
        snprintf(rel, sizeof rel, GSET "/goldens/%s/ctc_logprobs_full.npy", utts[k]);
        CHECK_OK(npy_load(test_shared(rel), &lp[k]));
        lens[k] = (int)lp[k].shape[0];
        V = (int)lp[k].shape[1];
        tmax = lens[k] > tmax ? lens[k] : tmax;
    }
    float *all = calloc((size_t)5 * tmax * V, sizeof(float)), *d = NULL;
    CHECK(all);
    for (int k = 0; k < 5; k++)
        memcpy(all + (size_t)k * tmax * V, lp[k].data, sizeof(float) * (size_t)lens[k] * V);
    CHECK(cudaMalloc((void **)&d, sizeof(float) * (size_t)5 * tmax * V) == cudaSuccess);
    CHECK(cudaMemcpy(d, all, sizeof(float) * (size_t)5 * tmax * V, cudaMemcpyHostToDevice) ==
          cudaSuccess);
    ctc_beam_gpu_t *g = NULL;
    hark_err_t err = {0};
    CHECK_OK(ctc_beam_gpu_create(5, tmax, V, 10, 0, &g, &err));
    CHECK_OK(ctc_beam_gpu_run(g, d, lens, 5, tmax, 10, NULL, &err));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    for (int k = 0; k < 5; k++) {
        if (!same_as_cpu(t, g, k, lp[k].data, lens[k], V, 10, 0, utts[k]))
            return;
        npy_free(&lp[k]);
    }
    ctc_beam_gpu_destroy(g);
    cudaFree(d);
    free(all);
}
#endif
