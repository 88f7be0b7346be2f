/* End-to-end tests for src/model/wenet/wenet_asr.c against WeNet's golden results: real 16 kHz wavs
 * -> hark (fbank, CMVN, Conformer, CTC, search, decoder, rescoring) -> tokens, text, n-best scores,
 * for every utterance, single and as one padded batch; empty audio; bad options. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "eval/wer.h"
#include "hark.h"
#include "model/wenet/wenet_asr.h"
#include "support/golden_model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                             "cards-001"};
enum { NU = 5 };

typedef struct {
    wenet_asr_t *asr;
    cJSON *results;
    audio_t audio[NU];
    const float *pcm[NU]; /* audio[u].samples ... */
    size_t n[NU];         /* ... and .n, as wenet_recognize takes a batch */
} fixture_t;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) == (size_t)n)
        s[n] = 0;
    fclose(f);
    return s;
}

/* 0 ok, 1 skip (why) */
static int fixture_open(fixture_t *fx, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_wenet_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    hark_err_t err = {0};
    if (wenet_asr_load(path, &fx->asr, &err)) {
        snprintf(why, nwhy, "load failed: %.400s", err.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/results.json", test_shared(GOLDEN_WENET));
    char *txt = slurp(path);
    fx->results = txt ? cJSON_Parse(txt) : NULL;
    free(txt);
    for (int u = 0; u < NU; u++) {
        snprintf(path, sizeof path, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), utts[u]);
        audio_opts_t ao = {.target_rate = 16000};
        if (audio_decode_file(path, &ao, &fx->audio[u], &err)) {
            snprintf(why, nwhy, "%.200s: %.250s", path, err.msg);
            return -1;
        }
        fx->pcm[u] = fx->audio[u].samples;
        fx->n[u] = fx->audio[u].n;
    }
    return fx->results ? 0 : -1;
}

static void fixture_close(fixture_t *fx)
{
    for (int u = 0; u < NU; u++)
        audio_free(&fx->audio[u]);
    cJSON_Delete(fx->results);
    wenet_asr_destroy(fx->asr);
}

static cJSON *golden(fixture_t *fx, int u, const char *mode, const char *method, const char *key)
{
    cJSON *m = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(fx->results, utts[u]), mode), method);
    return cJSON_GetObjectItem(m, key);
}

static int same_tokens(const cJSON *arr, const int *tok, int n)
{
    if (cJSON_GetArraySize(arr) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(arr, i)->valueint != tok[i])
            return 0;
    return 1;
}

#define OPEN_FIXTURE(fx)                                                                           \
    char why_[512];                                                                                \
    int st_ = fixture_open(&fx, why_, sizeof why_);                                                \
    if (st_ == 1)                                                                                  \
        SKIP(why_);                                                                                \
    CHECKF(st_ == 0, "%s", why_)

/* Every utterance alone, every decoding method: identical tokens and text; n-best lists identical
 * with scores within 1e-3; rescoring winner and score as WeNet. */
TEST(wenet_asr_golden_all_methods)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    wenet_worker_t *w;
    hark_err_t err = {0};
    CHECK_OK(wenet_worker_create(fx.asr, NU, 12.0, &w, &err));
    double worst_nb = 0, worst_resc = 0;
    for (int u = 0; u < NU; u++) {
        const float *pcm = fx.audio[u].samples;
        for (int m = 0; m < 3; m++) {
            wenet_decode_opts_t o = wenet_default_opts(fx.asr);
            o.method = (wenet_method_t)m;
            o.beam_size = 10;
            o.nbest = 10;
            wenet_result_t r;
            CHECKF(wenet_recognize(w, &o, &pcm, &fx.audio[u].n, 1, &r, &err) == HARK_OK, "%s",
                   err.msg);
            const char *mname = wenet_method_name(o.method);
            CHECKF(same_tokens(golden(&fx, u, "full", mname, "tokens"), r.best.tokens,
                               r.best.n_tokens),
                   "%s %s: tokens differ from WeNet's", utts[u], mname);
            const char *gt = golden(&fx, u, "full", mname, "text")->valuestring;
            CHECKF(strcmp(gt, r.best.text) == 0, "%s %s: text '%s' vs WeNet '%s'", utts[u], mname,
                   r.best.text, gt);
            if (m == DECODE_CTC_PREFIX_BEAM) {
                cJSON *nb = golden(&fx, u, "full", mname, "nbest");
                cJSON *sc = golden(&fx, u, "full", mname, "nbest_scores");
                CHECK_EQ_INT(r.n_nbest, cJSON_GetArraySize(nb));
                for (int i = 0; i < r.n_nbest; i++) {
                    CHECKF(same_tokens(cJSON_GetArrayItem(nb, i), r.nbest[i].tokens,
                                       r.nbest[i].n_tokens),
                           "%s: n-best %d differs", utts[u], i);
                    double d = fabs(r.nbest[i].score - cJSON_GetArrayItem(sc, i)->valuedouble);
                    if (d > worst_nb)
                        worst_nb = d;
                }
            }
            if (m == DECODE_ATTENTION_RESCORING) {
                double d = fabs(r.best.score - golden(&fx, u, "full", mname, "score")->valuedouble);
                if (d > worst_resc)
                    worst_resc = d;
                double dc =
                    fabs(r.confidence - golden(&fx, u, "full", mname, "confidence")->valuedouble);
                CHECKF(dc < 1e-3, "%s: confidence %.6f vs %.6f", utts[u], r.confidence,
                       golden(&fx, u, "full", mname, "confidence")->valuedouble);
            }
            wenet_result_free(&r);
        }
    }
    printf("    n-best scores: max abs diff %.3g; rescoring score: max abs diff %.3g\n", worst_nb,
           worst_resc);
    CHECKF(worst_nb <= 1e-3, "n-best scores differ by %.3g > 1e-3", worst_nb);
    CHECKF(worst_resc <= 1e-2, "rescoring scores differ by %.3g", worst_resc);
    wenet_worker_destroy(w);
    fixture_close(&fx);
}

/* All five utterances as one padded batch: each gets its single-utterance result (WeNet's
 * batched_full results are identical to full for this causal model). */
TEST(wenet_asr_golden_batched)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    wenet_worker_t *w;
    hark_err_t err = {0};
    CHECK_OK(wenet_worker_create(fx.asr, NU, 12.0, &w, &err));
    const float **pcm = fx.pcm;
    size_t *n = fx.n;
    wenet_result_t r[NU];
    wenet_decode_opts_t o = wenet_default_opts(fx.asr);
    CHECK(o.method == DECODE_ATTENTION_RESCORING);
    CHECKF(wenet_recognize(w, &o, pcm, n, NU, r, &err) == HARK_OK, "%s", err.msg);
    for (int u = 0; u < NU; u++) {
        CHECKF(same_tokens(golden(&fx, u, "batched_full", "attention_rescoring", "tokens"),
                           r[u].best.tokens, r[u].best.n_tokens),
               "%s: batched rescoring tokens differ", utts[u]);
        wenet_result_free(&r[u]);
    }
    wenet_worker_destroy(w);
    fixture_close(&fx);
}

TEST(wenet_asr_empty_and_bad_input)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    wenet_worker_t *w;
    hark_err_t err = {0};
    CHECK_OK(wenet_worker_create(fx.asr, 2, 1.0, &w, &err));
    float silence[100] = {0};
    const float *pcm[2] = {silence, fx.audio[4].samples};
    size_t n[2] = {0, 1000}; /* empty, and shorter than the subsampling needs */
    wenet_result_t r[2];
    for (int m = 0; m < 3; m++) {
        wenet_decode_opts_t o = wenet_default_opts(fx.asr);
        o.method = (wenet_method_t)m;
        CHECKF(wenet_recognize(w, &o, pcm, n, 2, r, &err) == HARK_OK, "%s", err.msg);
        CHECK(r[0].best.text && r[0].best.text[0] == 0 && r[0].best.n_tokens == 0);
        CHECK(r[1].best.text && r[1].best.n_tokens == 0);
        wenet_result_free(&r[0]);
        wenet_result_free(&r[1]);
    }
    size_t big = 16000 * 5; /* longer than the worker's 1 s */
    const float *p1[1] = {fx.audio[1].samples};
    CHECK_EQ_INT(wenet_recognize(w, NULL, p1, &big, 1, r, &err), HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(wenet_recognize(w, NULL, pcm, n, 3, r, &err), HARK_ERR_TOO_LARGE);
    wenet_decode_opts_t o = wenet_default_opts(fx.asr);
    o.beam_size = 0;
    CHECK_EQ_INT(wenet_recognize(w, &o, pcm, n, 1, r, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "beam_size must be in [1, 1000] (got 0)") != NULL, "%s", err.msg);
    CHECK_EQ_INT(wenet_worker_profile(w, 1, &err), HARK_ERR_UNSUPPORTED); /* a CPU worker */
    wenet_worker_scratch_t sc;
    memset(&sc, 0xff, sizeof sc);
    wenet_worker_scratch(w, &sc);
    CHECK(sc.beam == 0 && sc.beam_grows == 0 && sc.decoder_rows == 0 && sc.decoder_bytes == 0 &&
          sc.decoder_grows == 0);
    CHECK_EQ_INT(wenet_worker_set_upload_chunks(w, -1, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(wenet_worker_set_upload_chunks(w, WENET_UPLOAD_MAX_CHUNKS + 1, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "upload chunks") != NULL);
    CHECK_OK(wenet_worker_set_upload_chunks(w, 0, &err));
    CHECK_OK(wenet_worker_set_upload_chunks(w, WENET_UPLOAD_MAX_CHUNKS, &err));
    wenet_worker_destroy(w);
    wenet_asr_t *bad;
    CHECK(wenet_asr_load("/nonexistent/model", &bad, &err) != HARK_OK);
    CHECK(strstr(err.msg, "/nonexistent/model") != NULL);
    fixture_close(&fx);
}

#ifdef HARK_CUDA
/* The prefix beam n-best of one batch searched on the GPU and on the CPU (the same log-probs):
 * the same hypotheses, scores within 1e-9 relative (ctc_beam_gpu.h). */
static void gpu_vs_cpu_search(test_ctx_t *t, wenet_worker_t *w, wenet_decode_opts_t o,
                              const float *const *pcm, const size_t *n)
{
    wenet_result_t rg[NU], rc[NU];
    hark_err_t err = {0};
    o.method = DECODE_CTC_PREFIX_BEAM;
    o.nbest = o.beam_size;
    o.cpu_search = 0;
    CHECKF(wenet_recognize(w, &o, pcm, n, NU, rg, &err) == HARK_OK, "%s", err.msg);
    o.cpu_search = 1;
    CHECKF(wenet_recognize(w, &o, pcm, n, NU, rc, &err) == HARK_OK, "%s", err.msg);
    for (int u = 0; u < NU; u++) {
        CHECKF(rg[u].n_nbest == rc[u].n_nbest, "%s: %d vs %d hypotheses", utts[u], rg[u].n_nbest,
               rc[u].n_nbest);
        for (int i = 0; i < rc[u].n_nbest; i++) {
            const wenet_hyp_t *a = &rg[u].nbest[i], *b = &rc[u].nbest[i];
            CHECKF(a->n_tokens == b->n_tokens &&
                       !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
                       !memcmp(a->times, b->times, sizeof(int) * (size_t)a->n_tokens) &&
                       fabs(a->score - b->score) <= 1e-9 * fmax(1.0, fabs(b->score)),
                   "%s hypothesis %d: gpu search %.17g, cpu %.17g", utts[u], i, a->score, b->score);
        }
        wenet_result_free(&rg[u]);
        wenet_result_free(&rc[u]);
    }
}

/* Attention rescoring with the decoder on the GPU (all candidates of the batch in one pass) vs
 * the CPU decoder on the same n-best: the same winner, its score within 1e-4 (both FP32; only
 * the summation order differs), the same confidence within 1e-4. */
static void gpu_vs_cpu_decoder(test_ctx_t *t, wenet_worker_t *w, wenet_decode_opts_t o,
                               const float *const *pcm, const size_t *n)
{
    wenet_result_t rg[NU], rc[NU];
    hark_err_t err = {0};
    o.method = DECODE_ATTENTION_RESCORING;
    o.cpu_decoder = 0;
    CHECKF(wenet_recognize(w, &o, pcm, n, NU, rg, &err) == HARK_OK, "%s", err.msg);
    o.cpu_decoder = 1;
    CHECKF(wenet_recognize(w, &o, pcm, n, NU, rc, &err) == HARK_OK, "%s", err.msg);
    double worst = 0;
    for (int u = 0; u < NU; u++) {
        const wenet_hyp_t *a = &rg[u].best, *b = &rc[u].best;
        double d = fabs(a->score - b->score) / fmax(1.0, fabs(b->score));
        worst = d > worst ? d : worst;
        CHECKF(a->n_tokens == b->n_tokens &&
                   !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) && d <= 1e-4 &&
                   fabs(rg[u].confidence - rc[u].confidence) <= 1e-4,
               "%s: gpu decoder %.9g (conf %.6f), cpu %.9g (conf %.6f)", utts[u], a->score,
               rg[u].confidence, b->score, rc[u].confidence);
        wenet_result_free(&rg[u]);
        wenet_result_free(&rc[u]);
    }
    printf("    rescoring, gpu vs cpu decoder: same winners, score max rel %.3g\n", worst);
}

/* token edits between a golden token array and a hypothesis (wer_align over token ids) */
static long token_edits(const cJSON *arr, const int *tok, int n, long *n_ref)
{
    int nr = cJSON_GetArraySize(arr);
    uint32_t *r = hark_malloc((size_t)(nr + 1) * 4), *h = hark_malloc((size_t)(n + 1) * 4);
    for (int i = 0; i < nr; i++)
        r[i] = (uint32_t)cJSON_GetArrayItem(arr, i)->valueint;
    for (int i = 0; i < n; i++)
        h[i] = (uint32_t)tok[i];
    wer_counts_t c;
    long e = wer_align(r, (size_t)nr, h, (size_t)n, &c, NULL) == 0 ? wer_errors(&c) : nr + n;
    hark_free(r), hark_free(h);
    *n_ref += nr;
    return e;
}

/* BF16 (8 significant bits against FP16's 11) is not held to WeNet's exact hypotheses; its token
 * error rate against them, over every method and utterance, must stay below this (a broken path
 * gives near 100%) and is printed */
#define BF16_MAX_TER 0.05

/* The whole pipeline on the GPU (features, encoder, CTC and CTC search there; the decoder on the
 * CPU). FP32: WeNet's tokens for every method, n-best scores within 1e-3. FP16: identical greedy
 * and rescoring hypotheses (the issue's bar); n-best score drift reported. BF16: token error rate
 * against WeNet's hypotheses reported, bounded by BF16_MAX_TER. All: the GPU prefix beam search
 * gives the CPU search's n-best. */
static void gpu_golden(test_ctx_t *t, wenet_precision_t prec)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    char why[512], path[1024];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    snprintf(path, sizeof path, "%s/m", dir);
    wenet_load_opts_t lo = {.device = 0, .precision = prec};
    wenet_asr_t *g;
    hark_err_t err = {0};
    CHECKF(wenet_asr_load_opts(path, &lo, &g, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(g, NU, 12.0, &w, &err));
    const float **pcm = fx.pcm;
    size_t *n = fx.n;
    const char *pn = wenet_precision_name(prec);
    double worst = 0;
    long edits = 0, n_ref = 0;
    int differ = 0, must_differ = 0; /* all differences are printed before the test fails */
    for (int m = 0; m < 3; m++) {
        wenet_decode_opts_t o = wenet_default_opts(g);
        o.method = (wenet_method_t)m;
        o.nbest = 10;
        wenet_result_t r[NU];
        CHECKF(wenet_recognize(w, &o, pcm, n, NU, r, &err) == HARK_OK, "%s", err.msg);
        const char *mname = wenet_method_name(o.method);
        for (int u = 0; u < NU; u++) {
            int must = prec == WENET_FP32 || (prec == WENET_FP16 && m != DECODE_CTC_PREFIX_BEAM);
            const cJSON *gt = golden(&fx, u, "full", mname, "tokens");
            int same = same_tokens(gt, r[u].best.tokens, r[u].best.n_tokens);
            edits += token_edits(gt, r[u].best.tokens, r[u].best.n_tokens, &n_ref);
            if (!same) {
                differ++;
                must_differ += must;
                printf("    %s %s %s: differs from WeNet's hypothesis%s\n", pn, utts[u], mname,
                       must ? " (must not)" : "");
            }
            if (m == DECODE_CTC_PREFIX_BEAM) {
                cJSON *sc = golden(&fx, u, "full", mname, "nbest_scores");
                for (int i = 0; i < r[u].n_nbest && i < cJSON_GetArraySize(sc); i++) {
                    double d = fabs(r[u].nbest[i].score - cJSON_GetArrayItem(sc, i)->valuedouble);
                    if (d > worst)
                        worst = d;
                }
            }
            wenet_result_free(&r[u]);
        }
    }
    double ter = n_ref ? (double)edits / (double)n_ref : 0;
    printf("    gpu %s: n-best scores max abs diff %.3g; %d of %d hypotheses differ from WeNet's, "
           "token error rate %.4f (%ld of %ld)\n",
           pn, worst, differ, 3 * NU, ter, edits, n_ref);
    if (prec == WENET_BF16)
        CHECKF(ter <= BF16_MAX_TER, "bf16 token error rate %.4f against WeNet's", ter);
    gpu_vs_cpu_search(t, w, wenet_default_opts(g), pcm, n);
    gpu_vs_cpu_decoder(t, w, wenet_default_opts(g), pcm, n);
    CHECKF(must_differ == 0, "%s: %d hypotheses differ from WeNet's where they must not", pn,
           must_differ);
    if (prec == WENET_FP32)
        CHECKF(worst <= 1e-3, "fp32 n-best scores differ by %.3g", worst);
    wenet_worker_destroy(w);
    wenet_asr_destroy(g);
    fixture_close(&fx);
}

GPU_TEST(gpu_wenet_asr_golden_fp32)
{
    gpu_golden(t, WENET_FP32);
}

GPU_TEST(gpu_wenet_asr_golden_fp16)
{
    gpu_golden(t, WENET_FP16);
}

GPU_TEST(gpu_wenet_asr_golden_bf16)
{
    gpu_golden(t, WENET_BF16);
}

/* The GPU worker's stage profile: one call counted per batch that ran on the GPU (none for an
 * empty batch), every stage's time non-negative, the GPU stages inside the host's wait + issue,
 * the host stages summing to the wall time; off again, nothing more is counted. */
GPU_TEST(gpu_wenet_asr_profile)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    char why[512], path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    wenet_load_opts_t lo = {.device = 0, .precision = WENET_FP16};
    wenet_asr_t *g;
    hark_err_t err = {0};
    CHECKF(wenet_asr_load_opts(path, &lo, &g, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(g, NU, 12.0, &w, &err));
    const float **pcm = fx.pcm;
    size_t *n = fx.n, zero[NU] = {0};
    CHECK_OK(wenet_worker_profile(w, 1, &err));
    wenet_result_t r[NU];
    for (int m = 0; m < 3; m++) { /* greedy, GPU beam, and rescoring (downloads the encoder) */
        wenet_decode_opts_t o = wenet_default_opts(g);
        o.method = (wenet_method_t)m;
        CHECK_OK(wenet_recognize(w, &o, pcm, n, NU, r, &err));
        for (int u = 0; u < NU; u++)
            wenet_result_free(&r[u]);
    }
    CHECK_OK(wenet_recognize(w, NULL, pcm, zero, NU, r, &err)); /* empty: not counted */
    for (int u = 0; u < NU; u++)
        wenet_result_free(&r[u]);
    double ms[WENET_PROF_STAGES];
    int calls = -1;
    CHECK_OK(wenet_worker_profile_read(w, ms, &calls));
    CHECK_EQ_INT(calls, 3);
    double gpu = 0, host = 0;
    for (int i = 0; i < WENET_PROF_STAGES; i++) {
        CHECKF(ms[i] >= 0, "%s %g", wenet_prof_stage_name(i), ms[i]);
        if (i <= WENET_PROF_DOWNLOAD)
            gpu += ms[i];
        else if (i >= WENET_PROF_HOST_ISSUE && i <= WENET_PROF_HOST_AFTER)
            host += ms[i];
        printf("    %-10s %.3f ms\n", wenet_prof_stage_name(i), ms[i] / 3);
    }
    CHECK(ms[WENET_PROF_ENCODER] > 0 && ms[WENET_PROF_FEATURES] > 0);
    /* rescoring ran its decoder on the GPU, after the wait */
    CHECKF(ms[WENET_PROF_DECODER] > 0 && ms[WENET_PROF_DECODER] <= ms[WENET_PROF_HOST_AFTER],
           "decoder %g ms, host after %g", ms[WENET_PROF_DECODER], ms[WENET_PROF_HOST_AFTER]);
    CHECKF(gpu <= ms[WENET_PROF_HOST_ISSUE] + ms[WENET_PROF_HOST_WAIT] + 0.05,
           "GPU stages %g ms outside issue + wait", gpu);
    CHECKF(fabs(host - ms[WENET_PROF_WALL]) <= 1e-6 * ms[WENET_PROF_WALL] + 1e-9,
           "host stages %g vs wall %g", host, ms[WENET_PROF_WALL]);
    CHECK_OK(wenet_worker_profile(w, 0, &err));
    CHECK_OK(wenet_recognize(w, NULL, pcm, n, NU, r, &err));
    for (int u = 0; u < NU; u++)
        wenet_result_free(&r[u]);
    CHECK_OK(wenet_worker_profile_read(w, ms, &calls));
    CHECK_EQ_INT(calls, 0);
    CHECK(!strcmp(wenet_prof_stage_name(WENET_PROF_WALL), "wall") &&
          !strcmp(wenet_prof_stage_name(-1), "?"));
    wenet_worker_destroy(w);
    wenet_asr_destroy(g);
    fixture_close(&fx);
}
#endif

#ifdef HARK_CUDA
/* the golden model on cuda:0, or NULL after a failed check */
static wenet_asr_t *gpu_model(test_ctx_t *t, wenet_precision_t prec)
{
    char why[512], path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    wenet_load_opts_t lo = {.device = 0, .precision = prec};
    wenet_asr_t *g = NULL;
    hark_err_t err = {0};
    if (wenet_asr_load_opts(path, &lo, &g, &err) != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "load: %s", err.msg);
    return g;
}

/* decoder rows that rescoring these prefix-beam results (nbest = beam: every candidate) scores */
static size_t nbest_rows(const wenet_result_t *r, int batch)
{
    size_t rows = 0;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < r[b].n_nbest; i++)
            rows += (size_t)r[b].nbest[i].n_tokens + 1;
    return rows;
}

/* a method over the NU golden utterances; with rows, the rows their n-best gives the decoder */
static int run_batch(wenet_worker_t *w, const wenet_decode_opts_t *o, const float *const *pcm,
                     const size_t *n, int batch, size_t *rows, hark_err_t *err)
{
    wenet_result_t r[NU];
    int rc = wenet_recognize(w, o, pcm, n, batch, r, err);
    if (rc)
        return rc;
    if (rows)
        *rows = nbest_rows(r, batch);
    for (int b = 0; b < batch; b++)
        wenet_result_free(&r[b]);
    return HARK_OK;
}

/* Scratch sized at load time: a GPU worker holds the prefix beam search's scratch for beam 10
 * and the attention decoder's for its reservation from creation; greedy, prefix beam 10 and
 * rescoring, batched and one utterance at a time, allocate nothing (no growth counted). A
 * request for beam 16 grows the beam scratch once (its n-best still the CPU search's), narrower
 * beams after it nothing; rescoring at beam 16 grows the decoder's scratch exactly when its
 * candidates' rows pass the reservation, once, and still picks the CPU decoder's winners. */
GPU_TEST(gpu_wenet_asr_scratch_reserved)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    wenet_asr_t *g = gpu_model(t, WENET_FP32);
    CHECK(g != NULL);
    wenet_worker_t *w;
    hark_err_t err = {0};
    CHECKF(wenet_worker_create(g, NU, 12.0, &w, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_scratch_t s0, sc;
    wenet_worker_scratch(w, &s0);
    printf("    reserved: beam %d; decoder %zu rows, %zu encoder rows, %.1f MiB\n", s0.beam,
           s0.decoder_rows, s0.decoder_enc_rows, (double)s0.decoder_bytes / (1 << 20));
    CHECK(s0.beam == 10 && s0.beam_grows == 0 && s0.decoder_grows == 0);
    CHECKF(s0.decoder_rows > 0 && s0.decoder_enc_rows > 0 && s0.decoder_bytes > 0,
           "the golden decoder runs on the GPU: its scratch must be reserved at creation");
    const float **pcm = fx.pcm;
    size_t *n = fx.n;
    wenet_decode_opts_t o = wenet_default_opts(g);
    o.nbest = o.beam_size;
    CHECK_EQ_INT(o.beam_size, 10);
    size_t rows10 = 0;
    o.method = DECODE_CTC_PREFIX_BEAM;
    CHECKF(run_batch(w, &o, pcm, n, NU, &rows10, &err) == HARK_OK, "%s", err.msg);
    printf("    beam 10: rescoring scores %zu rows\n", rows10);
    CHECKF(rows10 <= s0.decoder_rows, "the test's premise: %zu rows within the reserved %zu",
           rows10, s0.decoder_rows);
    for (int m = 0; m < 3; m++) {
        o.method = (wenet_method_t)m;
        CHECKF(run_batch(w, &o, pcm, n, NU, NULL, &err) == HARK_OK, "%s", err.msg);
        for (int u = 0; u < NU; u++)
            CHECKF(run_batch(w, &o, pcm + u, n + u, 1, NULL, &err) == HARK_OK, "%s", err.msg);
    }
    wenet_worker_scratch(w, &sc);
    CHECKF(sc.beam == 10 && sc.beam_grows == 0 && sc.decoder_grows == 0 &&
               sc.decoder_rows == s0.decoder_rows && sc.decoder_bytes == s0.decoder_bytes,
           "within the reservation: beam %d (%d grows), decoder %zu rows (%d grows)", sc.beam,
           sc.beam_grows, sc.decoder_rows, sc.decoder_grows);
    /* a wider beam: one growth, kept */
    wenet_decode_opts_t o16 = wenet_default_opts(g);
    o16.beam_size = 16;
    gpu_vs_cpu_search(t, w, o16, pcm, n);
    if (test_failed(t))
        return;
    wenet_worker_scratch(w, &sc);
    CHECK(sc.beam == 16 && sc.beam_grows == 1);
    gpu_vs_cpu_search(t, w, o16, pcm, n);
    o.beam_size = 12;
    o.nbest = 12;
    o.method = DECODE_CTC_PREFIX_BEAM;
    CHECKF(run_batch(w, &o, pcm, n, NU, NULL, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_scratch(w, &sc);
    CHECK(sc.beam == 16 && sc.beam_grows == 1 && sc.decoder_grows == 0);
    /* rescoring 16 candidates an utterance: past the decoder's reservation or not */
    size_t rows16 = 0;
    o16.method = DECODE_CTC_PREFIX_BEAM;
    o16.nbest = 16;
    CHECKF(run_batch(w, &o16, pcm, n, NU, &rows16, &err) == HARK_OK, "%s", err.msg);
    o16.method = DECODE_ATTENTION_RESCORING;
    for (int k = 0; k < 2; k++) {
        CHECKF(run_batch(w, &o16, pcm, n, NU, NULL, &err) == HARK_OK, "%s", err.msg);
        wenet_worker_scratch(w, &sc);
        printf("    beam 16: rescoring scores %zu rows; decoder scratch %zu rows, %d grows\n",
               rows16, sc.decoder_rows, sc.decoder_grows);
        CHECK_EQ_INT(sc.decoder_grows, rows16 > s0.decoder_rows);
        CHECK(sc.decoder_rows >= rows16 && sc.beam_grows == 1);
    }
    gpu_vs_cpu_decoder(t, w, o16, pcm, n);
    wenet_worker_destroy(w);
    wenet_asr_destroy(g);
    fixture_close(&fx);
}

static int same_hyp(const wenet_hyp_t *a, const wenet_hyp_t *b)
{
    return a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
           !memcmp(a->times, b->times, sizeof(int) * (size_t)a->n_tokens) &&
           !memcmp(&a->score, &b->score, sizeof a->score) && a->text && b->text &&
           !strcmp(a->text, b->text);
}

/* every field of two results equal, bit for bit */
static int same_result(const wenet_result_t *a, const wenet_result_t *b)
{
    if (!same_hyp(&a->best, &b->best) || a->n_nbest != b->n_nbest || a->frames != b->frames ||
        memcmp(&a->confidence, &b->confidence, sizeof a->confidence))
        return 0;
    for (int i = 0; i < a->n_nbest; i++)
        if (!same_hyp(&a->nbest[i], &b->nbest[i]))
            return 0;
    return 1;
}

/* the same tokens, times, text and n-best, scores and confidence within tol relative: what
 * a different batch shape can change, because cuBLAS picks its FP32 GEMM by shape (another
 * summation order) */
static int near(double x, double y, double tol)
{
    return fabs(x - y) <= tol * (1.0 + fabs(x));
}

static int near_hyp(const wenet_hyp_t *a, const wenet_hyp_t *b, double tol)
{
    return a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
           !memcmp(a->times, b->times, sizeof(int) * (size_t)a->n_tokens) &&
           near(a->score, b->score, tol) && a->text && b->text && !strcmp(a->text, b->text);
}

static int near_result(const wenet_result_t *a, const wenet_result_t *b, double tol)
{
    if (!near_hyp(&a->best, &b->best, tol) || a->n_nbest != b->n_nbest || a->frames != b->frames ||
        !near(a->confidence, b->confidence, tol))
        return 0;
    for (int i = 0; i < a->n_nbest; i++)
        if (!near_hyp(&a->nbest[i], &b->nbest[i], tol))
            return 0;
    return 1;
}

enum { CHUNK_UTTS = 13 };

/* The overlapped upload (chunks of utterances on the copy stream, each chunk's features while
 * the next uploads) gives bit for bit the results of one upload then the features: batches of
 * 1, 3, 7 and 13 utterances of different lengths (an empty one among them; page-locked ones
 * uploaded by DMA, heap ones through the staging rows), 2, 3, 4, 16 and the default number of
 * chunks, every method, FP32 and FP16. The single-chunk run is repeated first, so that a
 * pipeline that is not deterministic run to run is told apart from a chunking fault. */
/* CHUNK_UTTS utterances of different lengths from the fixture's audio (an empty one among
 * them); even ones page-locked, odd ones on the heap */
static void mixed_inputs(const fixture_t *fx, float **buf, const float **pcm, size_t *n)
{
    static const double frac[CHUNK_UTTS] = {1.0,  0.0,   0.37, 0.81, 0.05, 1.0, 0.6,
                                            0.23, 0.001, 0.9,  0.5,  0.72, 0.15};
    for (int i = 0; i < CHUNK_UTTS; i++) {
        const audio_t *au = &fx->audio[i % NU];
        n[i] = (size_t)(frac[i] * (double)au->n);
        size_t bytes = sizeof(float) * (n[i] ? n[i] : 1);
        if (i % 2 == 0 ? cudaMallocHost((void **)&buf[i], bytes) != cudaSuccess
                       : !(buf[i] = hark_malloc(bytes)))
            buf[i] = NULL;
        if (buf[i])
            memcpy(buf[i], au->samples, sizeof(float) * n[i]);
        pcm[i] = buf[i];
    }
}

static void mixed_inputs_free(float **buf)
{
    for (int i = 0; i < CHUNK_UTTS; i++) {
        if (i % 2 == 0)
            cudaFreeHost(buf[i]);
        else
            hark_free(buf[i]);
    }
}

/* One pass of a GPU comparison: for FP32 and FP16, every method and each batch size, `ref`
 * recognised with `set(w, 0)` and then `got` with set(w, v) for each v of vals (the reference
 * run repeated first, to tell a pipeline that is not deterministic from a fault); every result
 * must be identical, or with tol > 0 near (near_result) where a knob changes the GEMM shapes. */
typedef void (*knob_fn)(wenet_worker_t *w, int v);

static void compare_knob(test_ctx_t *t, const float *const *pcm, const size_t *n,
                         const int *batches, int nb, knob_fn set, const int *vals, int nv,
                         double tol, const char *what)
{
    hark_err_t err = {0};
    long compared = 0, near_only = 0;
    for (int p = 0; p < 2; p++) {
        wenet_precision_t prec = p ? WENET_FP16 : WENET_FP32;
        wenet_asr_t *g = gpu_model(t, prec);
        CHECK(g != NULL);
        wenet_worker_t *w;
        CHECKF(wenet_worker_create(g, CHUNK_UTTS, 12.0, &w, &err) == HARK_OK, "%s", err.msg);
        for (int bi = 0; bi < nb; bi++) {
            int B = batches[bi];
            for (int m = 0; m < 3; m++) {
                wenet_decode_opts_t o = wenet_default_opts(g);
                o.method = (wenet_method_t)m;
                o.nbest = o.beam_size;
                wenet_result_t ref[CHUNK_UTTS], got[CHUNK_UTTS];
                set(w, 0);
                CHECKF(wenet_recognize(w, &o, pcm, n, B, ref, &err) == HARK_OK, "%s", err.msg);
                for (int k = -1; k < nv; k++) {
                    set(w, k < 0 ? 0 : vals[k]);
                    CHECKF(wenet_recognize(w, &o, pcm, n, B, got, &err) == HARK_OK, "%s", err.msg);
                    for (int b = 0; b < B; b++) {
                        CHECKF(k < 0 || !tol ? same_result(&ref[b], &got[b])
                                             : near_result(&ref[b], &got[b], tol),
                               "%s, batch %d, %s, utterance %d (%zu samples): %s %d",
                               wenet_precision_name(prec), B, wenet_method_name(o.method), b, n[b],
                               k < 0 ? "two reference runs differ (not deterministic):"
                                     : "differs from the reference run with",
                               k < 0 ? 0 : vals[k]);
                        if (k >= 0 && tol && !same_result(&ref[b], &got[b]))
                            near_only++;
                        if (k >= 0)
                            compared++;
                        wenet_result_free(&got[b]);
                    }
                }
                for (int b = 0; b < B; b++)
                    wenet_result_free(&ref[b]);
            }
        }
        wenet_worker_destroy(w);
        wenet_asr_destroy(g);
    }
    printf("    %ld results identical to the run without %s", compared - near_only, what);
    if (tol)
        printf(", %ld the same but for scores within %g", near_only, tol);
    printf("\n");
}

static void set_chunks(wenet_worker_t *w, int v)
{
    hark_err_t err = {0};
    wenet_worker_set_upload_chunks(w, v ? v : 1, &err); /* 0 here: the single-chunk reference */
}

static void set_buckets(wenet_worker_t *w, int v)
{
    wenet_worker_set_batch_buckets(w, v);
}

GPU_TEST(gpu_wenet_asr_upload_chunks_identical)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    float *buf[CHUNK_UTTS];
    const float *pcm[CHUNK_UTTS];
    size_t n[CHUNK_UTTS];
    mixed_inputs(&fx, buf, pcm, n);
    for (int i = 0; i < CHUNK_UTTS; i++)
        CHECK(buf[i] != NULL);
    static const int batches[4] = {1, 3, 7, 13}, chunk_counts[5] = {2, 3, 4, 16, 1};
    compare_knob(t, pcm, n, batches, 4, set_chunks, chunk_counts, 5, 0, "chunked uploads");
    mixed_inputs_free(buf);
    fixture_close(&fx);
}

/* Batches of more than 8 are computed padded to a multiple of 8 (wenet_worker_set_batch_buckets):
 * the padding changes no token, time or text, whatever the batch, method and precision (9 and
 * 13 utterances: 7 and 3 padding entries; 8: none); scores stay within 1e-4 relative (a padded
 * batch is another GEMM shape, for which cuBLAS may pick another FP32 algorithm, as it does for
 * any other batch size) */
GPU_TEST(gpu_wenet_asr_batch_buckets_identical)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    float *buf[CHUNK_UTTS];
    const float *pcm[CHUNK_UTTS];
    size_t n[CHUNK_UTTS];
    mixed_inputs(&fx, buf, pcm, n);
    for (int i = 0; i < CHUNK_UTTS; i++)
        CHECK(buf[i] != NULL);
    static const int batches[3] = {8, 9, 13}, on[1] = {1};
    compare_knob(t, pcm, n, batches, 3, set_buckets, on, 1, 1e-4, "batch padding");
    mixed_inputs_free(buf);
    fixture_close(&fx);
}
/* Workers taking turns on the GPU (wenet_worker_set_turns): two workers, each in its own thread,
 * recognise the same batches over and over, each waiting on the device for the other's turn;
 * every result equals the one a lone worker gives (greedy and rescoring, FP16). */
typedef struct {
    wenet_worker_t *w;
    const wenet_decode_opts_t *o;
    const float *const *pcm;
    const size_t *n;
    const wenet_result_t *ref;
    int reps, mismatches, rc;
    hark_err_t err;
} turn_run_t;

static void *turn_thread(void *arg)
{
    turn_run_t *r = arg;
    for (int i = 0; i < r->reps && !r->rc; i++) {
        wenet_result_t got[CHUNK_UTTS];
        if ((r->rc = wenet_recognize(r->w, r->o, r->pcm, r->n, CHUNK_UTTS, got, &r->err)))
            break;
        for (int b = 0; b < CHUNK_UTTS; b++) {
            r->mismatches += !same_result(&r->ref[b], &got[b]);
            wenet_result_free(&got[b]);
        }
    }
    return NULL;
}

GPU_TEST(gpu_wenet_asr_turns_identical)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    float *buf[CHUNK_UTTS];
    const float *pcm[CHUNK_UTTS];
    size_t n[CHUNK_UTTS];
    mixed_inputs(&fx, buf, pcm, n);
    for (int i = 0; i < CHUNK_UTTS; i++)
        CHECK(buf[i] != NULL);
    hark_err_t err = {0};
    wenet_asr_t *g = gpu_model(t, WENET_FP16);
    CHECK(g != NULL);
    wenet_worker_t *w[2] = {0};
    for (int i = 0; i < 2; i++) {
        CHECKF(wenet_worker_create(g, CHUNK_UTTS, 12.0, &w[i], &err) == HARK_OK, "%s", err.msg);
        wenet_worker_set_turns(w[i], 1);
    }
    for (int m = 0; m < 3; m += 2) { /* greedy, attention rescoring */
        wenet_decode_opts_t o = wenet_default_opts(g);
        o.method = (wenet_method_t)m;
        wenet_result_t ref[CHUNK_UTTS];
        wenet_worker_set_turns(w[0], 0);
        CHECKF(wenet_recognize(w[0], &o, pcm, n, CHUNK_UTTS, ref, &err) == HARK_OK, "%s", err.msg);
        wenet_worker_set_turns(w[0], 1);
        turn_run_t r[2];
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            r[i] = (turn_run_t){.w = w[i], .o = &o, .pcm = pcm, .n = n, .ref = ref, .reps = 20};
            CHECK(pthread_create(&th[i], NULL, turn_thread, &r[i]) == 0);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        for (int b = 0; b < CHUNK_UTTS; b++)
            wenet_result_free(&ref[b]);
        for (int i = 0; i < 2; i++) {
            CHECKF(r[i].rc == HARK_OK, "worker %d: %s", i, r[i].err.msg);
            CHECKF(r[i].mismatches == 0, "%s: worker %d: %d of %d results differ in turns",
                   wenet_method_name(o.method), i, r[i].mismatches, 20 * CHUNK_UTTS);
        }
    }
    for (int i = 0; i < 2; i++)
        wenet_worker_destroy(w[i]);
    wenet_asr_destroy(g);
    mixed_inputs_free(buf);
    fixture_close(&fx);
}
#endif

/* precision names round-trip; 16-bit precisions on the CPU are refused before anything loads */
TEST(wenet_precision_names_and_cpu_refusal)
{
    static const char *names[3] = {"fp32", "fp16", "bf16"};
    for (int i = 0; i < 3; i++) {
        wenet_precision_t p = wenet_precision_parse(names[i]);
        CHECK(p != 0 && !strcmp(wenet_precision_name(p), names[i]));
    }
    CHECK(wenet_precision_parse("FP16") == 0 && wenet_precision_parse("") == 0 &&
          wenet_precision_parse(NULL) == 0 && wenet_precision_name((wenet_precision_t)9) == NULL);
    for (int p = WENET_FP16; p <= WENET_BF16; p++) {
        wenet_load_opts_t lo = {.device = -1, .precision = (wenet_precision_t)p};
        wenet_asr_t *a = NULL;
        hark_err_t err = {0};
        CHECK(wenet_asr_load_opts("/nonexistent", &lo, &a, &err) == HARK_ERR_UNSUPPORTED);
        CHECK(a == NULL && strstr(err.msg, wenet_precision_name(lo.precision)) != NULL);
    }
    wenet_load_opts_t bad = {.device = -1, .precision = (wenet_precision_t)7};
    wenet_asr_t *a = NULL;
    hark_err_t err = {0};
    CHECK(wenet_asr_load_opts("/nonexistent", &bad, &a, &err) == HARK_ERR_INVALID_ARG);
}

/* Repeated calls on one worker and batch vs single give the same n-best (prefix beam). */
static void repeat_check(test_ctx_t *t, int device)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    char why[512], path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    wenet_load_opts_t lo = {.device = device, .precision = WENET_FP32};
    wenet_asr_t *g;
    hark_err_t err = {0};
    CHECKF(wenet_asr_load_opts(path, &lo, &g, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(g, NU, 12.0, &w, &err));
    const float **pcm = fx.pcm;
    size_t *n = fx.n;
    wenet_decode_opts_t o = wenet_default_opts(g);
    o.method = DECODE_CTC_PREFIX_BEAM;
    o.nbest = 10;
    for (int round = 0; round < 3; round++) {
        wenet_result_t r[NU];
        int batch = round == 2 ? 1 : NU;
        for (int u0 = 0; u0 < NU; u0 += batch) {
            CHECKF(wenet_recognize(w, &o, pcm + u0, n + u0, batch, r + u0, &err) == HARK_OK, "%s",
                   err.msg);
        }
        for (int u = 0; u < NU; u++) {
            int same = same_tokens(golden(&fx, u, "full", "ctc_prefix_beam_search", "tokens"),
                                   r[u].best.tokens, r[u].best.n_tokens);
            cJSON *sc = golden(&fx, u, "full", "ctc_prefix_beam_search", "nbest_scores");
            printf("    device %d round %d (batch %d) %s: best %s, score diff %.3g\n", device,
                   round, batch, utts[u], same ? "same" : "DIFFERS",
                   r[u].n_nbest ? fabs(r[u].nbest[0].score - cJSON_GetArrayItem(sc, 0)->valuedouble)
                                : -1.0);
            CHECKF(same, "device %d round %d %s differs", device, round, utts[u]);
            wenet_result_free(&r[u]);
        }
    }
    wenet_worker_destroy(w);
    wenet_asr_destroy(g);
    fixture_close(&fx);
}

TEST(wenet_asr_repeat_batch_cpu)
{
    repeat_check(t, -1);
}

#ifdef HARK_CUDA
GPU_TEST(gpu_wenet_asr_repeat_batch)
{
    repeat_check(t, 0);
}
#endif
