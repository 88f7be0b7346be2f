/* Tests for the public C API (include/hark.h, src/capi/hark.c) on the golden WeNet model: the
 * API gives exactly wenet_recognize's texts, tokens and times for every decoding method, batched,
 * alone and cut into max_batch batches; resampling from another rate; words; errors with
 * hark_last_error; the streaming and TTS entry points answer UNSUPPORTED; concurrent calls;
 * config.pbtxt parameters as the model's defaults. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/wenet/wenet_asr.h"
#include "support/golden_model.h"

#include <cjson/cJSON.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                             "cards-001"};
enum { NU = 5 };

typedef struct {
    char dir[1024];
    float *pcm[NU];
    size_t n[NU];
} fx_t;

static int fx_open(fx_t *fx, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_wenet_model_dir(why, nwhy);
    if (!dir)
        return 1;
    snprintf(fx->dir, sizeof fx->dir, "%s/m", dir);
    for (int u = 0; u < NU; u++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), utts[u]);
        int rate = 0;
        if (hark_decode_audio_file(path, 16000, &fx->pcm[u], &fx->n[u], &rate) || rate != 16000) {
            snprintf(why, nwhy, "%.200s: %.250s", path, hark_last_error());
            return -1;
        }
    }
    return 0;
}

static void fx_close(fx_t *fx)
{
    for (int u = 0; u < NU; u++)
        hark_pcm_free(fx->pcm[u]);
}

#define OPEN_FX(fx)                                                                                \
    char why_[512];                                                                                \
    int st_ = fx_open(&fx, why_, sizeof why_);                                                     \
    if (st_ == 1)                                                                                  \
        SKIP(why_);                                                                                \
    CHECKF(st_ == 0, "%s", why_)

static const char *methods[3] = {"ctc_greedy_search", "ctc_prefix_beam_search",
                                 "attention_rescoring"};

/* result i (its best and n-best) against wenet_recognize's */
static int same_as(const hark_asr_result_t *r, int i, const wenet_result_t *w, int frame_ms)
{
    const int *tok, *tms;
    int nt = hark_asr_result_tokens(r, i, &tok, &tms);
    if (strcmp(hark_asr_result_text(r, i), w->best.text) || nt != w->best.n_tokens ||
        hark_asr_result_score(r, i) != w->best.score ||
        hark_asr_result_confidence(r, i) != w->confidence ||
        hark_asr_result_nbest_count(r, i) != w->n_nbest)
        return 0;
    for (int k = 0; k < nt; k++)
        if (tok[k] != w->best.tokens[k] || tms[k] != w->best.times[k] * frame_ms)
            return 0;
    for (int h = 0; h < w->n_nbest; h++) {
        double sc;
        const char *txt = hark_asr_result_nbest_text(r, i, h, &sc);
        nt = hark_asr_result_nbest_tokens(r, i, h, &tok, &tms);
        if (!txt || strcmp(txt, w->nbest[h].text) || sc != w->nbest[h].score ||
            nt != w->nbest[h].n_tokens || (nt && memcmp(tok, w->nbest[h].tokens, sizeof(int) * nt)))
            return 0;
    }
    return 1;
}

TEST(capi_golden_every_method)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *m = NULL, *m2 = NULL;
    CHECKF(hark_model_load(fx.dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    hark_model_opts_t mo = {.max_batch = 2, .device = "cpu", .precision = "fp32"};
    CHECKF(hark_model_load(fx.dir, &mo, &m2) == HARK_OK, "%s", hark_last_error());
    CHECK(!strcmp(hark_model_family(m), "wenet_u2") && !strcmp(hark_model_task(m), "asr"));
    CHECK_EQ_INT(hark_model_sample_rate(m), 16000);
    CHECK_EQ_INT(hark_model_device(m), -1);
    CHECK_EQ_INT(hark_model_is_streaming(m), 1); /* the family streams (capi_stream_golden) */
    CHECK(strstr(hark_model_description(m), "wenet_u2") != NULL);
    wenet_asr_t *ref;
    hark_err_t err = {0};
    CHECK_OK(wenet_asr_load(fx.dir, &ref, &err));
    wenet_worker_t *ww;
    CHECK_OK(wenet_worker_create(ref, NU, 12.0, &ww, &err));
    const int fms = wenet_asr_frame_ms(ref);
    const float *pcm[NU];
    for (int u = 0; u < NU; u++)
        pcm[u] = fx.pcm[u];
    for (int mi = 0; mi < 3; mi++) {
        hark_asr_opts_t o = {.decoding_method = methods[mi], .nbest = 4};
        wenet_decode_opts_t wo = wenet_default_opts(ref);
        wo.method = (wenet_method_t)mi;
        wo.nbest = 4;
        wenet_result_t w[NU];
        CHECK_OK(wenet_recognize(ww, &wo, pcm, fx.n, NU, w, &err));
        hark_asr_result_t *r = NULL, *r2 = NULL;
        CHECKF(hark_recognize(m, pcm, fx.n, NU, 16000, &o, &r) == HARK_OK, "%s", hark_last_error());
        CHECKF(hark_recognize(m2, pcm, fx.n, NU, 0, &o, &r2) == HARK_OK, "%s", hark_last_error());
        CHECK_EQ_INT(hark_asr_result_count(r), NU);
        CHECK_EQ_INT(hark_asr_result_count(r2), NU);
        for (int u = 0; u < NU; u++) {
            CHECKF(same_as(r, u, &w[u], fms), "%s %s: '%s' vs wenet_recognize '%s'", utts[u],
                   methods[mi], hark_asr_result_text(r, u), w[u].best.text);
            CHECKF(same_as(r2, u, &w[u], fms), "%s %s in batches of 2", utts[u], methods[mi]);
            CHECK(fabs(hark_asr_result_duration(r, u) - fx.n[u] / 16000.0) < 1e-9);
            hark_asr_result_t *one = NULL;
            CHECK_OK(hark_recognize(m, &pcm[u], &fx.n[u], 1, 16000, &o, &one));
            CHECKF(!strcmp(hark_asr_result_text(one, 0), w[u].best.text), "%s alone", utts[u]);
            hark_asr_result_destroy(one);
            wenet_result_free(&w[u]);
        }
        hark_asr_result_destroy(r);
        hark_asr_result_destroy(r2);
    }
    wenet_worker_destroy(ww);
    wenet_asr_destroy(ref);
    hark_model_destroy(m);
    hark_model_destroy(m2);
    fx_close(&fx);
}

/* 8 kHz input is resampled to the model's 16 kHz: the same result as resampling it ourselves;
 * words with times; accessors out of range */
TEST(capi_resample_words_accessors)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *m = NULL;
    CHECKF(hark_model_load(fx.dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    float *lo = NULL, *back = NULL;
    size_t nlo = 0, nback = 0;
    hark_err_t err = {0};
    CHECK_OK(audio_resample(fx.pcm[1], fx.n[1], 16000, 8000, &lo, &nlo, &err));
    CHECK_OK(audio_resample(lo, nlo, 8000, 16000, &back, &nback, &err));
    hark_asr_opts_t o = {.decoding_method = "ctc_greedy_search", .want_words = 1};
    hark_asr_result_t *a = NULL, *b = NULL;
    const float *pa[1] = {lo}, *pb[1] = {back};
    CHECKF(hark_recognize(m, pa, &nlo, 1, 8000, &o, &a) == HARK_OK, "%s", hark_last_error());
    CHECK_OK(hark_recognize(m, pb, &nback, 1, 16000, &o, &b));
    CHECKF(!strcmp(hark_asr_result_text(a, 0), hark_asr_result_text(b, 0)), "'%s' vs '%s'",
           hark_asr_result_text(a, 0), hark_asr_result_text(b, 0));
    CHECK(strlen(hark_asr_result_text(a, 0)) > 10);
    int nw = hark_asr_result_word_count(a, 0);
    CHECK(nw > 3 && hark_asr_result_word_sep(a, 0) == 1);
    char joined[2048] = "";
    size_t off = 0;
    int prev = -1;
    for (int k = 0; k < nw; k++) {
        int s0, s1;
        const char *wd = hark_asr_result_word(a, 0, k, &s0, &s1);
        CHECK(wd && s0 < s1 && s0 >= prev);
        prev = s0;
        off += (size_t)snprintf(joined + off, sizeof joined - off, "%s%s", k ? " " : "", wd);
    }
    CHECKF(!strcmp(joined, hark_asr_result_text(a, 0)), "'%s'", joined);
    CHECK_EQ_INT(hark_asr_result_nbest_count(a, 0), 0); /* greedy */
    CHECK(hark_asr_result_text(a, 1) == NULL && hark_asr_result_text(a, -1) == NULL);
    CHECK(hark_asr_result_word(a, 0, nw, NULL, NULL) == NULL);
    CHECK(hark_asr_result_nbest_text(a, 0, 0, NULL) == NULL);
    CHECK_EQ_INT(hark_asr_result_tokens(a, 3, NULL, NULL), 0);
    CHECK_EQ_INT(hark_asr_result_count(NULL), 0);
    hark_asr_result_destroy(a);
    hark_asr_result_destroy(b);
    hark_asr_result_destroy(NULL);
    hark_free(lo);
    hark_free(back);
    hark_model_destroy(m);
    fx_close(&fx);
}

TEST(capi_errors_and_unsupported)
{
    hark_model_t *m = (hark_model_t *)1;
    CHECK_EQ_INT(hark_model_load("/nonexistent/model", NULL, &m), HARK_ERR_IO);
    CHECK(m == NULL);
    CHECKF(strstr(hark_last_error(), "/nonexistent/model"), "%s", hark_last_error());
    hark_model_opts_t bad = {.device = "tpu"};
    CHECK_EQ_INT(hark_model_load("/x", &bad, &m), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(hark_last_error(), "tpu"), "%s", hark_last_error());
    CHECK_EQ_INT(hark_model_load(NULL, NULL, &m), HARK_ERR_INVALID_ARG);
    float *pcm = (float *)1;
    size_t n = 7;
    CHECK_EQ_INT(hark_decode_audio_file("/nonexistent.wav", 16000, &pcm, &n, NULL), HARK_ERR_IO);
    CHECK(pcm == NULL && n == 0);
    CHECKF(strstr(hark_last_error(), "/nonexistent.wav"), "%s", hark_last_error());
    hark_model_destroy(NULL);
    hark_stream_destroy(NULL);
    hark_pcm_free(NULL);
    fx_t fx;
    OPEN_FX(fx);
    hark_model_opts_t mo = {.max_seconds = 5};
    CHECKF(hark_model_load(fx.dir, &mo, &m) == HARK_OK, "%s", hark_last_error());
    hark_asr_result_t *r = (hark_asr_result_t *)1;
    const float *p[1] = {fx.pcm[0]};
    hark_asr_opts_t o = {.decoding_method = "viterbi"};
    CHECK_EQ_INT(hark_recognize(m, p, &fx.n[0], 1, 0, &o, &r), HARK_ERR_INVALID_ARG);
    CHECK(r == NULL);
    CHECKF(strstr(hark_last_error(), "decoding_method 'viterbi' is not one of"), "%s",
           hark_last_error());
    o = (hark_asr_opts_t){.beam_size = 500};
    CHECK_EQ_INT(hark_recognize(m, p, &fx.n[0], 1, 0, &o, &r), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(hark_last_error(), "beam_size must be in [1, 100] (got 500)"), "%s",
           hark_last_error());
    CHECK_EQ_INT(hark_recognize(m, p, &fx.n[0], 1, 44, NULL, &r), HARK_ERR_INVALID_ARG);
    size_t too_long = 16000 * 6;
    float *zeros = hark_calloc(too_long, sizeof(float));
    const float *pz[2] = {fx.pcm[1], zeros};
    size_t nz[2] = {fx.n[1], too_long};
    CHECK_EQ_INT(hark_recognize(m, pz, nz, 2, 0, NULL, &r), HARK_ERR_TOO_LARGE);
    CHECKF(strstr(hark_last_error(), "max_seconds"), "%s", hark_last_error());
    o = (hark_asr_opts_t){.dump_dir = "/tmp/x"};
    CHECK_EQ_INT(hark_recognize(m, pz, nz, 2, 0, &o, &r), HARK_ERR_INVALID_ARG);
    hark_free(zeros);
    /* TTS on an ASR model, streams: bad arguments */
    CHECK_EQ_INT(hark_stream_accept_waveform(NULL, NULL, 0, 16000), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(hark_stream_decode(NULL), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(hark_stream_result(NULL, &r), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(hark_stream_create(NULL, NULL, NULL), HARK_ERR_INVALID_ARG);
    float *out = NULL;
    size_t nout = 1;
    int rate = 0;
    CHECK_EQ_INT(hark_synthesize(m, "hello", NULL, &out, &nout, &rate), HARK_ERR_UNSUPPORTED);
    CHECK(out == NULL && nout == 0);
    CHECKF(strstr(hark_last_error(), "TTS"), "%s", hark_last_error());
    hark_model_destroy(m);
    fx_close(&fx);
}

typedef struct {
    hark_model_t *m;
    const fx_t *fx;
    int u, ok;
    char text[2][1024];
} job_t;

static void *job(void *arg)
{
    job_t *j = arg;
    hark_asr_opts_t o = {.decoding_method = "ctc_prefix_beam_search"};
    j->ok = 1;
    for (int rep = 0; rep < 2; rep++) {
        hark_asr_result_t *r = NULL;
        const float *p[1] = {j->fx->pcm[j->u]};
        if (hark_recognize(j->m, p, &j->fx->n[j->u], 1, 0, &o, &r)) {
            j->ok = 0;
            snprintf(j->text[rep], sizeof j->text[rep], "%s", hark_last_error());
        } else {
            snprintf(j->text[rep], sizeof j->text[rep], "%s", hark_asr_result_text(r, 0));
        }
        hark_asr_result_destroy(r);
    }
    return NULL;
}

/* Threads share one model (each borrows its own worker): each gets the single-thread result. */
TEST(capi_concurrent_calls)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *m = NULL;
    hark_model_opts_t mo = {.n_threads = 1};
    CHECKF(hark_model_load(fx.dir, &mo, &m) == HARK_OK, "%s", hark_last_error());
    job_t jobs[3];
    pthread_t th[3];
    for (int k = 0; k < 3; k++) {
        jobs[k] = (job_t){.m = m, .fx = &fx, .u = k % 2 ? 1 : 4};
        CHECK_OK(pthread_create(&th[k], NULL, job, &jobs[k]));
    }
    for (int k = 0; k < 3; k++)
        pthread_join(th[k], NULL);
    job_t alone = {.m = m, .fx = &fx, .u = 1};
    job(&alone);
    CHECK(alone.ok);
    for (int k = 0; k < 3; k++) {
        CHECKF(jobs[k].ok, "%s", jobs[k].text[0]);
        CHECK(!strcmp(jobs[k].text[0], jobs[k].text[1]));
    }
    CHECKF(!strcmp(jobs[1].text[0], alone.text[0]), "'%s' vs '%s'", jobs[1].text[0], alone.text[0]);
    CHECK(strcmp(jobs[0].text[0], jobs[1].text[0]) != 0);
    hark_model_destroy(m);
    fx_close(&fx);
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* DIR/config.pbtxt's parameters are the model's defaults (per-call options still override);
 * a broken config.pbtxt fails the load, naming the file. */
TEST(capi_config_pbtxt_defaults)
{
    fx_t fx;
    OPEN_FX(fx);
    char dir[1024], path[1200], target[1200];
    snprintf(dir, sizeof dir, "%s/cfg", test_tmpdir(t));
    CHECK_OK(mkdir(dir, 0755));
    snprintf(path, sizeof path, "%s/1", dir);
    snprintf(target, sizeof target, "%s/1", fx.dir);
    CHECK_OK(symlink(target, path));
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
    CHECK_OK(write_file(path,
                        "backend: \"hark\"\n"
                        "parameters { key: \"family\" value { string_value: \"wenet_u2\" } }\n"
                        "parameters { key: \"decoding_method\" value { string_value: "
                        "\"ctc_greedy_search\" } }\n"));
    hark_model_t *plain = NULL, *m = NULL;
    CHECKF(hark_model_load(fx.dir, NULL, &plain) == HARK_OK, "%s", hark_last_error());
    CHECKF(hark_model_load(dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    const float *p[1] = {fx.pcm[0]};
    hark_asr_opts_t greedy = {.decoding_method = "ctc_greedy_search"};
    hark_asr_opts_t resc = {.decoding_method = "attention_rescoring"};
    hark_asr_result_t *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(hark_recognize(m, p, &fx.n[0], 1, 0, NULL, &a)); /* config: greedy */
    CHECK_OK(hark_recognize(plain, p, &fx.n[0], 1, 0, &greedy, &b));
    CHECK_OK(hark_recognize(m, p, &fx.n[0], 1, 0, &resc, &c));    /* the call overrides it */
    CHECK_OK(hark_recognize(plain, p, &fx.n[0], 1, 0, NULL, &d)); /* model.json: rescoring */
    CHECKF(!strcmp(hark_asr_result_text(a, 0), hark_asr_result_text(b, 0)), "'%s' vs '%s'",
           hark_asr_result_text(a, 0), hark_asr_result_text(b, 0));
    CHECK(!strcmp(hark_asr_result_text(c, 0), hark_asr_result_text(d, 0)));
    CHECK(hark_asr_result_score(a, 0) != hark_asr_result_score(c, 0)); /* not the same search */
    hark_asr_result_destroy(a);
    hark_asr_result_destroy(b);
    hark_asr_result_destroy(c);
    hark_asr_result_destroy(d);
    hark_model_destroy(m);
    hark_model_destroy(plain);
    CHECK_OK(write_file(path, "parameters { key: \"beam_size\" value { string_value: \"0\" } }\n"));
    CHECK_EQ_INT(hark_model_load(dir, NULL, &m), HARK_OK); /* checked per call ... */
    CHECK_EQ_INT(hark_recognize(m, p, &fx.n[0], 1, 0, NULL, &a), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(hark_last_error(),
                  "config.pbtxt parameters: beam_size must be in [1, 1000] (got 0)"),
           "%s", hark_last_error());
    hark_model_destroy(m);
    CHECK_OK(write_file(path, "max_batch_size: -3 {\n"));
    CHECK(hark_model_load(dir, NULL, &m) != HARK_OK);
    CHECKF(strstr(hark_last_error(), "config.pbtxt"), "%s", hark_last_error());
    fx_close(&fx);
}

/* hark_model_load on a GPU ("cuda:0", and gpu = 1 for cuda:0): the CPU model's texts for a
 * batch; fp16 loads and recognizes; dump_dir is refused there. */
GPU_TEST(capi_gpu_model)
{
    if (!test_have_gpu())
        SKIP("no GPU");
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *c = NULL, *g = NULL, *h = NULL;
    hark_model_opts_t go = {.device = "cuda:0"}, ho = {.gpu = 1, .precision = "fp16"};
    CHECK_OK(hark_model_load(fx.dir, NULL, &c));
    CHECKF(hark_model_load(fx.dir, &go, &g) == HARK_OK, "%s", hark_last_error());
    CHECKF(hark_model_load(fx.dir, &ho, &h) == HARK_OK, "%s", hark_last_error());
    CHECK_EQ_INT(hark_model_device(g), 0);
    CHECK_EQ_INT(hark_model_device(h), 0);
    CHECK(strstr(hark_model_description(h), "fp16") != NULL);
    const float *pcm[NU];
    for (int u = 0; u < NU; u++)
        pcm[u] = fx.pcm[u];
    hark_asr_result_t *rc = NULL, *rg = NULL, *rh = NULL;
    CHECK_OK(hark_recognize(c, pcm, fx.n, NU, 0, NULL, &rc));
    CHECKF(hark_recognize(g, pcm, fx.n, NU, 0, NULL, &rg) == HARK_OK, "%s", hark_last_error());
    CHECKF(hark_recognize(h, pcm, fx.n, NU, 0, NULL, &rh) == HARK_OK, "%s", hark_last_error());
    for (int u = 0; u < NU; u++) {
        CHECKF(!strcmp(hark_asr_result_text(rg, u), hark_asr_result_text(rc, u)),
               "%s: gpu '%s' vs cpu '%s'", utts[u], hark_asr_result_text(rg, u),
               hark_asr_result_text(rc, u));
        CHECK(strlen(hark_asr_result_text(rh, u)) > 0);
    }
    hark_asr_result_destroy(rc);
    hark_asr_result_destroy(rg);
    hark_asr_result_destroy(rh);
    hark_asr_opts_t d = {.dump_dir = "/tmp/hark-gpu-dump"};
    hark_asr_result_t *r = NULL;
    CHECK_EQ_INT(hark_recognize(g, pcm, fx.n, 1, 0, &d, &r), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(hark_last_error(), "CPU"), "%s", hark_last_error());
    hark_model_destroy(c);
    hark_model_destroy(g);
    hark_model_destroy(h);
    fx_close(&fx);
}

/* Every allocation of hark_model_load and of hark_recognize (every method, words, n-best) failing
 * in turn (SQLite-style):
 * each call fails with a status and a message and leaves nothing behind (SAN=address checks
 * leaks); after each failed recognize the model still gives the same result. */
TEST(capi_every_allocation_failing)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *m = NULL;
    alloc_fail_after(0);
    CHECK_OK(hark_model_load(fx.dir, NULL, &m));
    long n_load = alloc_count();
    hark_model_destroy(m);
    for (long k = 1; k <= n_load; k++) {
        m = (hark_model_t *)1;
        alloc_fail_after(k);
        int rc = hark_model_load(fx.dir, NULL, &m);
        alloc_fail_reset();
        CHECKF(rc != HARK_OK && m == NULL && hark_last_error()[0],
               "allocation %ld of %ld failing: status %d, model %p", k, n_load, rc, (void *)m);
    }
    CHECK_OK(hark_model_load(fx.dir, NULL, &m));
    const float *p[1] = {fx.pcm[4]};
    size_t n1 = fx.n[4] < 24000 ? fx.n[4] : 24000; /* 1.5 s: enough for words, quick to run */
    for (int mi = 0; mi < 3; mi++) {
        hark_asr_opts_t o = {.decoding_method = methods[mi], .nbest = 2, .want_words = 1};
        hark_asr_result_t *ref = NULL, *r = NULL;
        CHECK_OK(hark_recognize(m, p, &n1, 1, 0, &o, &ref));
        alloc_fail_after(0);
        CHECK_OK(hark_recognize(m, p, &n1, 1, 0, &o, &r));
        long n_rec = alloc_count();
        hark_asr_result_destroy(r);
        for (long k = 1; k <= n_rec; k++) {
            r = (hark_asr_result_t *)1;
            alloc_fail_after(k);
            int rc = hark_recognize(m, p, &n1, 1, 0, &o, &r);
            alloc_fail_reset();
            CHECKF(rc != HARK_OK && r == NULL && hark_last_error()[0],
                   "%s: allocation %ld of %ld failing: status %d", methods[mi], k, n_rec, rc);
            CHECK_OK(hark_recognize(m, p, &n1, 1, 0, &o, &r));
            CHECKF(!strcmp(hark_asr_result_text(r, 0), hark_asr_result_text(ref, 0)),
                   "%s after allocation %ld failed: '%s' vs '%s'", methods[mi], k,
                   hark_asr_result_text(r, 0), hark_asr_result_text(ref, 0));
            hark_asr_result_destroy(r);
        }
        hark_asr_result_destroy(ref);
    }
    hark_model_destroy(m);
    fx_close(&fx);
}

/* A stream through the C API: jfk in 0.64 s pieces gives growing partial results and, after the
 * end, WeNet's streaming result (chunk 16, all history, attention rescoring) of the goldens;
 * a second stream with left context 4 and greedy search gives that golden's; another rate and
 * audio after the end are refused. */
TEST(capi_stream_golden)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_model_t *m;
    CHECKF(hark_model_load(fx.dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    CHECK(hark_model_is_streaming(m));
    cJSON *res = golden_wenet_results();
    CHECK(res != NULL);
    static const struct {
        const char *mode, *method;
        hark_asr_opts_t o;
    } runs[2] = {{"stream_chunk16_left-1", "attention_rescoring", {0}},
                 {"stream_chunk16_left4",
                  "ctc_greedy_search",
                  {.decoding_method = "ctc_greedy_search",
                   .decoding_chunk_size = 16,
                   .num_decoding_left_chunks = 4}}};
    for (int k = 0; k < 2; k++) {
        hark_stream_t *s;
        CHECKF(hark_stream_create(m, &runs[k].o, &s) == HARK_OK, "%s", hark_last_error());
        int partials = 0;
        const float *pcm = fx.pcm[1];
        size_t n = fx.n[1];
        for (size_t at = 0; at < n; at += 10240) {
            size_t c = n - at < 10240 ? n - at : 10240;
            CHECKF(hark_stream_accept_waveform(s, pcm + at, c, 16000) == HARK_OK, "%s",
                   hark_last_error());
            CHECK_OK(hark_stream_decode(s));
            hark_asr_result_t *r;
            CHECK_OK(hark_stream_result(s, &r));
            partials += hark_asr_result_text(r, 0)[0] != 0;
            hark_asr_result_destroy(r);
        }
        CHECK_OK(hark_stream_accept_waveform(s, NULL, 0, 0));
        hark_asr_result_t *r;
        CHECK_OK(hark_stream_result(s, &r));
        const cJSON *g = cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "jfk"), runs[k].mode),
                                runs[k].method),
            "text");
        CHECKF(cJSON_IsString(g) && !strcmp(hark_asr_result_text(r, 0), g->valuestring),
               "%s %s: '%s', golden '%s'", runs[k].mode, runs[k].method, hark_asr_result_text(r, 0),
               cJSON_IsString(g) ? g->valuestring : "?");
        printf("    %s %s: %d partial results with text, final = WeNet's\n", runs[k].mode,
               runs[k].method, partials);
        CHECK(partials >= 5);
        hark_asr_result_destroy(r);
        CHECK_EQ_INT(hark_stream_accept_waveform(s, pcm, 100, 16000), HARK_ERR_CLOSED);
        hark_stream_destroy(s);
    }
    hark_stream_t *s;
    CHECK_OK(hark_stream_create(m, NULL, &s));
    CHECK_EQ_INT(hark_stream_accept_waveform(s, fx.pcm[1], 100, 8000), HARK_ERR_UNSUPPORTED);
    hark_stream_destroy(s);
    cJSON_Delete(res);
    hark_model_destroy(m);
    fx_close(&fx);
}
