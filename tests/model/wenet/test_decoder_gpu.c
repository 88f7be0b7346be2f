/* GPU tests for src/model/wenet/decoder_gpu.c: the batched GPU decoder against decoder.c (the CPU
 * reference, itself checked against WeNet in test_decoder.c) on the golden bitransformer with the
 * golden n-best of all five utterances in one call, and on synthetic transformer /
 * bitransformer, pre- and post-norm decoders with ragged batches (empty candidates, utterances
 * without candidates, one-frame utterances, head widths 8 to 128); scratch reserved ahead (no
 * growth within it, one growth past it); plus bad arguments. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/wenet/decoder.h"
#include "model/wenet/decoder_gpu.h"
#include "model/safetensors.h"
#include "model/synth_weights.h"
#include "support/golden_model.h"
#include "support/synth_decoder.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>

/* FP32 on both sides: only the summation order differs (cuBLAS against OpenBLAS) */
#define GPU_TOL 1e-4

static const char *const UTTS[5] = {"librispeech-1995-1837-0001", "jfk",
                                    "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                    "cards-001"};

/* One batch: utterance b has enc (T[b], D) (host, rows of a (B, stride, D) block) and n[b]
 * candidates. Runs the CPU decoder per utterance and the GPU decoder once; returns the worst
 * |gpu - cpu| relative to max(1, |cpu|) over fwd and rev, or -1 after a failure. */
static double compare(test_ctx_t *t, const wenet_decoder_model_t *cpu,
                      wenet_decoder_gpu_state_t *gs, const float *enc, int stride, const int *T,
                      int B, int D, const int *n, const int *const *hyps, const int *lens, float rw)
{
    int total = 0;
    for (int b = 0; b < B; b++)
        total += n[b];
    float *f1 = hark_calloc((size_t)total + 1, sizeof(float));
    float *r1 = hark_calloc((size_t)total + 1, sizeof(float));
    float *f2 = hark_calloc((size_t)total + 1, sizeof(float));
    float *r2 = hark_calloc((size_t)total + 1, sizeof(float));
    float *d_enc = NULL;
    double worst = -1;
    hark_err_t err = {0};
    size_t eb = sizeof(float) * (size_t)B * stride * D;
    if (cudaMalloc((void **)&d_enc, eb + 4) != cudaSuccess ||
        cudaMemcpy(d_enc, enc, eb, cudaMemcpyHostToDevice) != cudaSuccess) {
        test_fail(t, __FILE__, __LINE__, "device buffer");
        goto out;
    }
    for (int b = 0, c = 0; b < B; c += n[b], b++) {
        if (!n[b])
            continue;
        if (wenet_decoder_score(cpu, NULL, enc + (size_t)b * stride * D, T[b], hyps + c, lens + c,
                                n[b], rw, f1 + c, r1 + c, &err) != HARK_OK) {
            test_fail(t, __FILE__, __LINE__, "cpu: %s", err.msg);
            goto out;
        }
    }
    if (wenet_decoder_gpu_score(gs, d_enc, stride, T, B, n, hyps, lens, rw, f2, r2, &err) !=
        HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "gpu: %s", err.msg);
        goto out;
    }
    worst = 0;
    for (int i = 0; i < total; i++) {
        double ef = fabs((double)f2[i] - f1[i]) / fmax(1.0, fabs(f1[i]));
        double er = fabs((double)r2[i] - r1[i]) / fmax(1.0, fabs(r1[i]));
        if (!(ef <= worst))
            worst = isnan(ef) ? INFINITY : ef;
        if (!(er <= worst))
            worst = isnan(er) ? INFINITY : er;
    }
out:
    cudaFree(d_enc);
    hark_free(f1), hark_free(r1), hark_free(f2), hark_free(r2);
    return worst;
}

GPU_TEST(decoder_gpu_golden_nbest_batch)
{
    wenet_config_t cfg;
    safetensors_t *st = NULL;
    char why[600];
    int r = golden_wenet_open(&cfg, &st, why, sizeof why);
    if (r > 0)
        SKIP(why);
    CHECKF(r == 0, "%s", why);
    hark_err_t err = {0};
    wenet_decoder_model_t *cpu = NULL;
    wenet_decoder_gpu_t *gpu = NULL;
    wenet_decoder_gpu_state_t *gs = NULL;
    CHECKF(wenet_decoder_create(&cfg, st, &cpu, &err) == HARK_OK, "%s", err.msg);
    CHECKF(wenet_decoder_gpu_create(&cfg, st_get_f32, st, &gpu, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(wenet_decoder_gpu_state_create(gpu, NULL, &gs, &err));
    cJSON *res = golden_wenet_results();
    CHECK(res != NULL);
    npy_array_t enc[5];
    int T[5], n[5], stride = 0, D = cfg.d_model, total = 0;
    int *lens = hark_malloc(sizeof(int) * 5 * 64);
    const int **hyps = hark_malloc(sizeof(int *) * 5 * 64);
    for (int u = 0; u < 5; u++) {
        CHECK_OK(golden_wenet_npy(&enc[u], UTTS[u], "enc_full.npy"));
        T[u] = (int)enc[u].shape[0];
        stride = T[u] > stride ? T[u] : stride;
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, UTTS[u]),
                                                 "full"),
                "ctc_prefix_beam_search"),
            "nbest");
        n[u] = cJSON_GetArraySize(nb);
        CHECK(n[u] >= 1 && n[u] <= 64);
        for (int i = 0; i < n[u]; i++, total++) {
            const cJSON *h = cJSON_GetArrayItem(nb, i);
            int len = cJSON_GetArraySize(h);
            int *tk = hark_malloc(sizeof(int) * (size_t)(len + 1));
            for (int j = 0; j < len; j++)
                tk[j] = cJSON_GetArrayItem(h, j)->valueint;
            lens[total] = len;
            hyps[total] = tk;
        }
    }
    float *all = hark_calloc((size_t)5 * stride * D, sizeof(float));
    for (int u = 0; u < 5; u++)
        memcpy(all + (size_t)u * stride * D, enc[u].data, sizeof(float) * (size_t)T[u] * D);
    double w = compare(t, cpu, gs, all, stride, T, 5, D, n, hyps, lens, cfg.reverse_weight);
    printf("    golden n-best of 5 utterances (%d candidates) in one call: gpu vs cpu decoder "
           "scores max rel %.3g\n",
           total, w);
    CHECKF(w >= 0 && w <= GPU_TOL, "gpu vs cpu decoder %g", w);
    /* the same batch again: the scratch is reused and the result identical */
    double w2 = compare(t, cpu, gs, all, stride, T, 5, D, n, hyps, lens, cfg.reverse_weight);
    CHECKF(w2 == w, "second call %g vs %g", w2, w);
    for (int i = 0; i < total; i++)
        hark_free((void *)hyps[i]);
    hark_free(hyps), hark_free(lens), hark_free(all);
    for (int u = 0; u < 5; u++)
        npy_free(&enc[u]);
    cJSON_Delete(res);
    wenet_decoder_gpu_state_destroy(gs);
    wenet_decoder_gpu_destroy(gpu);
    wenet_decoder_destroy(cpu);
    st_close(st);
}

#define synth_config synth_decoder_config

GPU_TEST(decoder_gpu_matches_cpu_synthetic)
{
    struct {
        const char *what;
        wenet_config_t c;
    } cases[] = {
        {"transformer d24 h3 f40 pre-norm",
         synth_config(DECODER_TRANSFORMER, 24, 3, 40, 2, 0, 1, 19)},
        {"transformer d24 h6 f17 post-norm",
         synth_config(DECODER_TRANSFORMER, 24, 6, 17, 3, 0, 0, 19)},
        {"bitransformer d64 h2 f33 2+1",
         synth_config(DECODER_BITRANSFORMER, 64, 2, 33, 2, 1, 1, 301)},
        {"bitransformer d256 h2 f64 1+0 (head 128)",
         synth_config(DECODER_BITRANSFORMER, 256, 2, 64, 1, 0, 1, 2050)},
        {"bitransformer d96 h1 f8 post-norm 1+2",
         synth_config(DECODER_BITRANSFORMER, 96, 1, 8, 1, 2, 0, 7)},
    };
    enum { B = 4, STRIDE = 29, MAXC = 16 };
    static const int T[B] = {23, 1, 29, 9};
    static const int n[B] = {6, 2, 0, 5};
    static const int lens[13] = {5, 0, 12, 1, 15, 7, 0, 3, 30, 2, 2, 9, 1};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const wenet_config_t *c = &cases[k].c;
        synth_weights_t bank = {.seed = 4321u + (unsigned)k};
        hark_err_t err = {0};
        wenet_decoder_model_t *cpu = NULL;
        wenet_decoder_gpu_t *gpu = NULL;
        wenet_decoder_gpu_state_t *gs = NULL;
        CHECKF(wenet_decoder_create_fn(c, synth_weights_get, &bank, &cpu, &err) == HARK_OK,
               "%s: %s", cases[k].what, err.msg);
        CHECKF(wenet_decoder_gpu_create(c, synth_weights_get, &bank, &gpu, &err) == HARK_OK,
               "%s: %s", cases[k].what, err.msg);
        CHECK_OK(wenet_decoder_gpu_state_create(gpu, NULL, &gs, &err));
        unsigned seed = 99 + (unsigned)k;
        int D = c->d_model;
        float *enc = hark_malloc(sizeof(float) * B * STRIDE * (size_t)D);
        for (int i = 0; i < B * STRIDE * D; i++) /* padding rows NaN: must never be read */
            enc[i] = (i / D) % STRIDE < T[(i / D) / STRIDE] ? test_randf(&seed) : NAN;
        int toks[13][32];
        const int *hyps[13];
        for (int i = 0; i < 13; i++) {
            for (int j = 0; j < lens[i]; j++)
                toks[i][j] = (int)(test_rand(&seed) % (unsigned)c->vocab_size);
            hyps[i] = toks[i];
        }
        double w[2];
        for (int p = 0; p < 2; p++) /* with and without the right decoder */
            w[p] = compare(t, cpu, gs, enc, STRIDE, T, B, D, n, hyps, lens,
                           p ? 0.0f : c->reverse_weight);
        printf("    %-44s gpu vs cpu rel %.3g (rw %.1f), %.3g (rw 0)\n", cases[k].what, w[0],
               c->reverse_weight, w[1]);
        CHECKF(w[0] >= 0 && w[0] <= GPU_TOL && w[1] >= 0 && w[1] <= GPU_TOL, "%s: %g %g",
               cases[k].what, w[0], w[1]);
        /* bad arguments: a token outside the vocabulary, too long, candidates without frames */
        float f[13], rv[13];
        int bad_tok[1] = {c->vocab_size}, one = 1, zero_t = 0;
        const int *bh[1] = {bad_tok};
        CHECK(wenet_decoder_gpu_score(gs, NULL, STRIDE, T, 1, &one, bh, &one, 0.0f, f, rv, &err) ==
              HARK_ERR_INVALID_ARG);
        int long_len = c->max_len;
        CHECK(wenet_decoder_gpu_score(gs, NULL, STRIDE, T, 1, &one, hyps, &long_len, 0.0f, f, rv,
                                      &err) == HARK_ERR_TOO_LARGE);
        CHECK(wenet_decoder_gpu_score(gs, NULL, STRIDE, &zero_t, 1, &one, hyps, lens, 0.0f, f, rv,
                                      &err) == HARK_ERR_INVALID_ARG);
        int none[B] = {0, 0, 0, 0};
        CHECK_OK(
            wenet_decoder_gpu_score(gs, NULL, STRIDE, T, B, none, hyps, lens, 0.0f, f, rv, &err));
        hark_free(enc);
        wenet_decoder_gpu_state_destroy(gs);
        wenet_decoder_gpu_destroy(gpu);
        wenet_decoder_destroy(cpu);
        synth_weights_free(&bank);
        if (test_failed(t))
            return;
    }
}

/* A state reserved for a load scores calls within it without allocating (grows stays 0, same
 * scores as the CPU decoder, also with fewer rows than reserved); a call past it grows once and
 * still scores right; a smaller reserve changes nothing; a state never reserved allocates in its
 * first call. */
GPU_TEST(decoder_gpu_reserve_no_growth)
{
    wenet_config_t c = synth_config(DECODER_BITRANSFORMER, 64, 2, 33, 2, 1, 1, 301);
    enum { B = 3, STRIDE = 17 };
    static const int T[B] = {17, 5, 11};
    static const int n[B] = {4, 1, 3};
    static const int lens[8] = {3, 0, 9, 4, 12, 7, 1, 2};
    int rows = 0; /* Σ len + 1 = 46 */
    for (int i = 0; i < 8; i++)
        rows += lens[i] + 1;
    synth_weights_t bank = {.seed = 77};
    hark_err_t err = {0};
    wenet_decoder_model_t *cpu = NULL;
    wenet_decoder_gpu_t *gpu = NULL;
    wenet_decoder_gpu_state_t *gs = NULL, *fresh = NULL;
    CHECKF(wenet_decoder_create_fn(&c, synth_weights_get, &bank, &cpu, &err) == HARK_OK, "%s",
           err.msg);
    CHECKF(wenet_decoder_gpu_create(&c, synth_weights_get, &bank, &gpu, &err) == HARK_OK, "%s",
           err.msg);
    CHECK_OK(wenet_decoder_gpu_state_create(gpu, NULL, &gs, &err));
    CHECK_OK(wenet_decoder_gpu_state_create(gpu, NULL, &fresh, &err));
    size_t cap = 0, cap_e = 0;
    CHECK(wenet_decoder_gpu_state_bytes(gs, &cap, &cap_e) == 0 && cap == 0 && cap_e == 0);
    /* 7 rows more than the calls use: their index arrays are laid out by their own rows */
    CHECK_OK(wenet_decoder_gpu_state_reserve(gs, (size_t)rows + 7, B * STRIDE, &err));
    size_t bytes = wenet_decoder_gpu_state_bytes(gs, &cap, &cap_e);
    CHECK(bytes > 0 && cap == (size_t)rows + 7 && cap_e == B * STRIDE);
    CHECK_EQ_INT(wenet_decoder_gpu_state_grows(gs), 0);
    unsigned seed = 5;
    int D = c.d_model;
    float *enc = hark_malloc(sizeof(float) * 2 * B * STRIDE * (size_t)D);
    for (int i = 0; i < 2 * B * STRIDE * D; i++)
        enc[i] = test_randf(&seed);
    int toks[8][16];
    const int *hyps[8];
    for (int i = 0; i < 8; i++) {
        for (int j = 0; j < lens[i]; j++)
            toks[i][j] = (int)(test_rand(&seed) % (unsigned)c.vocab_size);
        hyps[i] = toks[i];
    }
    for (int k = 0; k < 2; k++) { /* exactly the reservation, twice */
        double w = compare(t, cpu, gs, enc, STRIDE, T, B, D, n, hyps, lens, c.reverse_weight);
        CHECKF(w >= 0 && w <= GPU_TOL, "within the reservation: gpu vs cpu %g", w);
        CHECK_EQ_INT(wenet_decoder_gpu_state_grows(gs), 0);
    }
    CHECK_OK(wenet_decoder_gpu_state_reserve(gs, 1, 1, &err)); /* smaller: nothing changes */
    CHECK(wenet_decoder_gpu_state_bytes(gs, &cap, &cap_e) == bytes && cap == (size_t)rows + 7);
    CHECK_EQ_INT(wenet_decoder_gpu_state_grows(gs), 0);
    /* twice the encoder stride: past the reserved encoder rows, grows once, then fits */
    int T2[B] = {2 * STRIDE, 5, 11};
    for (int k = 0; k < 2; k++) {
        double w = compare(t, cpu, gs, enc, 2 * STRIDE, T2, B, D, n, hyps, lens, c.reverse_weight);
        CHECKF(w >= 0 && w <= GPU_TOL, "past the reservation: gpu vs cpu %g", w);
        CHECK_EQ_INT(wenet_decoder_gpu_state_grows(gs), 1);
    }
    wenet_decoder_gpu_state_bytes(gs, &cap, &cap_e);
    CHECK(cap == (size_t)rows + 7 && cap_e == 2 * B * STRIDE);
    CHECK_EQ_INT(wenet_decoder_gpu_state_reserve(gs, (size_t)1 << 29, 1, &err), HARK_ERR_TOO_LARGE);
    /* never reserved: the first call allocates */
    double w = compare(t, cpu, fresh, enc, STRIDE, T, B, D, n, hyps, lens, c.reverse_weight);
    CHECKF(w >= 0 && w <= GPU_TOL, "unreserved state: gpu vs cpu %g", w);
    CHECK_EQ_INT(wenet_decoder_gpu_state_grows(fresh), 1);
    hark_free(enc);
    wenet_decoder_gpu_state_destroy(fresh);
    wenet_decoder_gpu_state_destroy(gs);
    wenet_decoder_gpu_destroy(gpu);
    wenet_decoder_destroy(cpu);
    synth_weights_free(&bank);
}

GPU_TEST(decoder_gpu_refuses_bad_configs)
{
    wenet_config_t c = synth_config(DECODER_NONE, 24, 3, 40, 2, 0, 1, 19);
    synth_weights_t bank = {.seed = 5};
    wenet_decoder_gpu_t *g = NULL;
    hark_err_t err = {0};
    CHECK(wenet_decoder_gpu_create(&c, synth_weights_get, &bank, &g, &err) == HARK_ERR_INVALID_ARG);
    c = synth_config(DECODER_TRANSFORMER, 258, 1, 40, 1, 0, 1, 19); /* head width 258 */
    CHECK(wenet_decoder_gpu_create(&c, synth_weights_get, &bank, &g, &err) == HARK_ERR_UNSUPPORTED);
    c = synth_config(DECODER_TRANSFORMER, 24, 3, 40, 1, 0, 1, 19);
    bank.missing = "decoder.decoders.0.feed_forward.w_2.bias";
    CHECK(wenet_decoder_gpu_create(&c, synth_weights_get, &bank, &g, &err) != HARK_OK);
    CHECK(g == NULL && strstr(err.msg, "w_2.bias") != NULL);
    synth_weights_free(&bank);
}
#endif
