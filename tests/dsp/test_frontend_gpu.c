/* Tests for src/dsp/frontend_gpu.c: the upload's split into chunks (CPU), the chunk setting's
 * bounds (CPU), and on a GPU the overlapped upload + features of a padded batch of awkward
 * lengths from pageable and page-locked buffers against the CPU front end (feat_compute). */
#include "test.h"

#include "dsp/features.h"
#include "dsp/frontend_gpu.h"
#include "hark.h"

#include <stdlib.h>
#include <string.h>

/* min(chunks, batch) runs of consecutive utterances covering the batch, none empty, each cut at
 * the first boundary where the samples before it reach c / k of the total unless a run's one
 * utterance or the later runs' one each force it; empty utterances, one long utterance among
 * short ones, batches of 0 .. 40, 1 .. 16 chunks. */
TEST(frontend_upload_split_runs)
{
    int first[FRONTEND_UPLOAD_MAX_CHUNKS + 1];
    size_t even[4] = {100, 100, 100, 100}, one_first[4] = {400, 0, 0, 0};
    size_t one_last[4] = {0, 0, 0, 400}, zeros[5] = {0, 0, 0, 0, 0};
    CHECK_EQ_INT(frontend_upload_split(even, 4, 4, first), 4);
    CHECK(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 3 && first[4] == 4);
    CHECK_EQ_INT(frontend_upload_split(even, 4, 2, first), 2);
    CHECK(first[1] == 2 && first[2] == 4);
    CHECK_EQ_INT(frontend_upload_split(one_first, 4, 4, first), 4); /* one utterance per run */
    CHECK(first[1] == 1 && first[2] == 2 && first[3] == 3);
    CHECK_EQ_INT(frontend_upload_split(one_last, 4, 2, first), 2); /* the long one alone */
    CHECK(first[1] == 3 && first[2] == 4);
    CHECK_EQ_INT(frontend_upload_split(even, 4, 1, first), 1);
    CHECK(first[0] == 0 && first[1] == 4);
    CHECK_EQ_INT(frontend_upload_split(even, 0, 4, first), 0);
    CHECK_EQ_INT(first[0], 0);
    CHECK_EQ_INT(frontend_upload_split(even, 4, 0, first), 0); /* no chunks: nothing */
    CHECK_EQ_INT(first[0], 0);
    CHECK_EQ_INT(frontend_upload_split(zeros, 5, 3, first), 3); /* all empty: still 3 runs */
    CHECK(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 5);
    CHECK_EQ_INT(frontend_upload_split(even, 4, FRONTEND_UPLOAD_MAX_CHUNKS, first), 4);
    CHECK(first[4] == 4);
    unsigned seed = 11;
    size_t n[40], cum[41];
    for (int it = 0; it < 400; it++) {
        int batch = (int)(test_rand(&seed) % 41), chunks = 1 + (int)(test_rand(&seed) % 16);
        cum[0] = 0;
        for (int b = 0; b < batch; b++) {
            unsigned r = test_rand(&seed) % 8;
            n[b] = r == 0   ? 0
                   : r == 1 ? 160000 + test_rand(&seed) % 800000
                            : test_rand(&seed) % 9000;
            cum[b + 1] = cum[b] + n[b];
        }
        int k = frontend_upload_split(n, batch, chunks, first);
        CHECK_EQ_INT(k, chunks < batch ? chunks : batch);
        CHECK(first[0] == 0 && first[k] == batch);
        for (int c = 1; c < k; c++) {
            size_t target = cum[batch] * (size_t)c / (size_t)k;
            int forced_late = first[c] == first[c - 1] + 1,
                forced_early = first[c] == batch - (k - c);
            CHECKF(first[c] > first[c - 1] && first[c] <= batch - (k - c),
                   "batch %d, %d chunks: run %d = [%d, %d)", batch, chunks, c - 1, first[c - 1],
                   first[c]);
            CHECKF(cum[first[c]] >= target || forced_early,
                   "batch %d, %d chunks: cut %d at %d before the target", batch, chunks, c,
                   first[c]);
            CHECKF(cum[first[c] - 1] < target || forced_late,
                   "batch %d, %d chunks: cut %d at %d past the target", batch, chunks, c, first[c]);
        }
    }
}

/* [0, FRONTEND_UPLOAD_MAX_CHUNKS] accepted, anything else refused with a message naming it;
 * without a front end (a CPU worker's) the bounds are still checked. */
TEST(frontend_set_chunks_bounds)
{
    hark_err_t err = {0};
    CHECK_EQ_INT(frontend_gpu_set_chunks(NULL, -1, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "upload chunks") != NULL);
    CHECK_EQ_INT(frontend_gpu_set_chunks(NULL, FRONTEND_UPLOAD_MAX_CHUNKS + 1, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK_OK(frontend_gpu_set_chunks(NULL, 0, &err));
    CHECK_OK(frontend_gpu_set_chunks(NULL, 1, &err));
    CHECK_OK(frontend_gpu_set_chunks(NULL, FRONTEND_UPLOAD_MAX_CHUNKS, &err));
}

#ifdef HARK_CUDA
#include "dsp/features_gpu.h"
#include "gpu/pinned.h"

#include <cuda_runtime_api.h>

enum { FB = 9 }; /* utterances in the test batch */

/* A batch of awkward lengths (empty, one sample, shorter than a frame, odd sizes) with 1e6 past
 * each length, odd items page-locked (DMA), even ones heap (staged), run with 1, 3 and 16 chunks
 * (16 > FB: one per utterance) on a non-blocking compute stream: every item's rows equal its
 * single-utterance CPU features within tol, its pad rows are zero, the device lengths are n, and
 * every chunking gives the single-chunk run's features bit for bit. A first run of long garbage
 * leaves stale data in the staging and device rows, which must not leak into later runs. */
static void frontend_vs_cpu(test_ctx_t *t, feat_kind_t kind, double tol)
{
    static const size_t lens[FB] = {16000, 0, 399, 400, 1237, 1, 33333, 4801, 7919};
    const size_t max_samples = 33333 + 101, guard = 13;
    feat_opts_t o;
    feat_default_opts(&o, kind);
    feat_plan_t *p;
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    const int D = feat_dim(p);
    pinned_pool_t *pool = pinned_pool_create((size_t)64 << 20);
    CHECK(pool != NULL);
    float *buf[FB] = {0}, *ref[FB] = {0};
    const float *pcm[FB];
    int T[FB], t_max = 0;
    unsigned seed = 7 + (unsigned)kind;
    for (int b = 0; b < FB; b++) {
        size_t bytes = sizeof(float) * (lens[b] + guard);
        buf[b] = b % 2 ? pinned_alloc(pool, bytes) : malloc(bytes);
        CHECK(buf[b] != NULL);
        struct cudaPointerAttributes at;
        CHECK(cudaPointerGetAttributes(&at, buf[b]) == cudaSuccess);
        CHECKF((at.type == cudaMemoryTypeHost) == (b % 2 == 1),
               "item %d: %s memory expected (the test covers DMA and staging)", b,
               b % 2 ? "page-locked" : "pageable");
        for (size_t i = 0; i < lens[b]; i++)
            buf[b][i] =
                0.3f * sinf(1e-4f * (float)i * (float)i + (float)b) + 0.01f * test_randf(&seed);
        for (size_t i = lens[b]; i < lens[b] + guard; i++)
            buf[b][i] = 1e6f;
        pcm[b] = buf[b];
        T[b] = feat_num_frames(p, lens[b]);
        if (T[b] > t_max)
            t_max = T[b];
        ref[b] = malloc(sizeof(float) * (size_t)(T[b] + 1) * D);
        CHECK(ref[b] != NULL);
        CHECK_OK(feat_compute(p, pcm[b], lens[b], ref[b], NULL));
    }
    t_max += 5;
    const int max_frames = t_max + 7;
    const size_t out_n = (size_t)FB * t_max * D;
    hark_err_t err = {0};
    frontend_gpu_t *fe;
    CHECKF(frontend_gpu_create(p, NULL, FB + 2, max_samples, max_frames, 0, &fe, &err) == HARK_OK,
           "%s", err.msg);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    float *d_feats = NULL;
    const int *d_lens = NULL;
    /* the limits, checked before anything is enqueued */
    size_t big[1] = {max_samples + 1};
    CHECK_EQ_INT(frontend_gpu_run(fe, pcm, big, 1, t_max, s, &d_feats, &d_lens, &err),
                 HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(frontend_gpu_run(fe, pcm, lens, FB + 3, t_max, s, &d_feats, &d_lens, &err),
                 HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(frontend_gpu_run(fe, pcm, lens, FB, max_frames + 1, s, &d_feats, &d_lens, &err),
                 HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(frontend_gpu_run(fe, pcm, lens, FB, t_max - 6, s, &d_feats, &d_lens, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(frontend_gpu_set_chunks(fe, FRONTEND_UPLOAD_MAX_CHUNKS + 1, &err),
                 HARK_ERR_INVALID_ARG);
    /* garbage everywhere the real runs do not write: all staging rows, stride max_samples - 1 */
    float *junk = malloc(sizeof(float) * max_samples);
    CHECK(junk != NULL);
    for (size_t i = 0; i < max_samples; i++)
        junk[i] = 1e3f * test_randf(&seed);
    const float *jp[FB];
    size_t jn[FB];
    for (int b = 0; b < FB; b++)
        jp[b] = junk, jn[b] = max_samples - 1;
    CHECKF(frontend_gpu_run(fe, jp, jn, FB, max_frames, s, &d_feats, &d_lens, &err) == HARK_OK,
           "%s", err.msg);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    float *out = malloc(sizeof(float) * out_n), *first = malloc(sizeof(float) * out_n);
    CHECK(out != NULL && first != NULL);
    cudaEvent_t ev[2];
    CHECK(cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess);
    static const int chunk_counts[4] = {1, 3, 16, 1};
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        CHECK_OK(frontend_gpu_set_chunks(fe, chunk_counts[k], &err));
        frontend_gpu_profile(fe, k == 1 ? ev[0] : NULL, k == 1 ? ev[1] : NULL);
        CHECK(cudaMemsetAsync(d_feats, 0x7f, sizeof(float) * out_n, s) == cudaSuccess); /* poison */
        float *df = NULL;
        const int *dl = NULL;
        CHECKF(frontend_gpu_run(fe, pcm, lens, FB, t_max, s, &df, &dl, &err) == HARK_OK, "%s",
               err.msg);
        CHECK(df == d_feats && dl == d_lens);
        CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        int got_lens[FB];
        CHECK(cudaMemcpy(out, df, sizeof(float) * out_n, cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(cudaMemcpy(got_lens, dl, sizeof got_lens, cudaMemcpyDeviceToHost) == cudaSuccess);
        if (k == 1) {
            float ms = -1;
            CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess && ms >= 0);
        }
        for (int b = 0; b < FB; b++) {
            CHECK_EQ_INT(got_lens[b], (int)lens[b]);
            const float *row = out + (size_t)b * t_max * D;
            double e = test_max_abs_diff(row, ref[b], (size_t)T[b] * D);
            if (e > worst)
                worst = e;
            CHECKF(e <= tol, "%s, %d chunks, item %d (n=%zu): gpu vs cpu max abs %.3g > %.1g",
                   feat_kind_name(kind), chunk_counts[k], b, lens[b], e, tol);
            for (size_t i = (size_t)T[b] * D; i < (size_t)t_max * D; i++)
                CHECKF(row[i] == 0.0f, "%s, %d chunks, item %d: pad not zeroed",
                       feat_kind_name(kind), chunk_counts[k], b);
        }
        if (k == 0)
            memcpy(first, out, sizeof(float) * out_n);
        else
            CHECKF(!memcmp(first, out, sizeof(float) * out_n),
                   "%s: %d chunks differ from the single-chunk run", feat_kind_name(kind),
                   chunk_counts[k]);
    }
    printf("    %s: front end vs cpu max abs error %.3g, chunkings identical\n",
           feat_kind_name(kind), worst);
    frontend_gpu_profile(fe, NULL, NULL);
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    frontend_gpu_destroy(fe);
    cudaStreamDestroy(s);
    free(out);
    free(first);
    free(junk);
    for (int b = 0; b < FB; b++) {
        if (b % 2)
            pinned_free(pool, buf[b]);
        else
            free(buf[b]);
        free(ref[b]);
    }
    pinned_pool_destroy(pool);
    feat_plan_destroy(p);
}

/* the tolerance of tests/dsp/test_features_gpu.c: only logf and double reductions differ */
GPU_TEST(gpu_frontend_fbank_matches_cpu)
{
    frontend_vs_cpu(t, FEAT_FBANK, 1e-4);
}

GPU_TEST(gpu_frontend_nemo_mel_matches_cpu)
{
    frontend_vs_cpu(t, FEAT_NEMO_MEL, 1e-4);
}

GPU_TEST(gpu_frontend_tts_mel_matches_cpu)
{
    frontend_vs_cpu(t, FEAT_TTS_MEL, 1e-4);
}

/* A front end made over a lent feat_gpu_t (a model's, shared by its workers) and one made from
 * the plan compute the same features; destroying the borrower leaves the lent one usable. */
GPU_TEST(gpu_frontend_lent_features)
{
    feat_opts_t o;
    feat_default_opts(&o, FEAT_FBANK);
    feat_plan_t *p;
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    hark_err_t err = {0};
    feat_gpu_t *g;
    CHECKF(feat_gpu_create(p, &g, &err) == HARK_OK, "%s", err.msg);
    const size_t n[3] = {5003, 16000, 0};
    const int t_max = feat_num_frames(p, 16000) + 3, D = feat_dim(p);
    float *x = malloc(sizeof(float) * 16000);
    CHECK(x != NULL);
    unsigned seed = 5;
    for (int i = 0; i < 16000; i++)
        x[i] = 0.5f * test_randf(&seed);
    const float *pcm[3] = {x + 100, x, NULL};
    const size_t out_n = (size_t)3 * t_max * D;
    float *out[2] = {malloc(sizeof(float) * out_n), malloc(sizeof(float) * out_n)};
    CHECK(out[0] && out[1]);
    for (int r = 0; r < 3; r++) {
        frontend_gpu_t *fe;
        CHECKF(frontend_gpu_create(p, r == 1 ? NULL : g, 3, 16000, t_max, 0, &fe, &err) == HARK_OK,
               "%s", err.msg);
        CHECK_OK(frontend_gpu_set_chunks(fe, 2, &err));
        float *df;
        const int *dl;
        CHECKF(frontend_gpu_run(fe, pcm, n, 3, t_max, NULL, &df, &dl, &err) == HARK_OK, "%s",
               err.msg);
        CHECK(cudaStreamSynchronize(NULL) == cudaSuccess);
        CHECK(cudaMemcpy(out[r % 2], df, sizeof(float) * out_n, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
        frontend_gpu_destroy(fe);
        if (r > 0)
            CHECKF(!memcmp(out[0], out[1], sizeof(float) * out_n), "run %d differs", r);
    }
    free(out[0]);
    free(out[1]);
    free(x);
    feat_gpu_destroy(g);
    feat_plan_destroy(p);
}
#endif
