/* Tests for src/model/wenet/wenet_family.c: the "wenet_u2" family table on the golden model gives
 * exactly wenet_recognize's texts, tokens, times (ms) and n-best, for every decoding method, each
 * utterance alone and all five as one batch, mixed options in one execute; words with times on
 * request; parse_opts's errors; batch keys equal exactly when the options are. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "model/wenet/wenet_asr.h"
#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                             "cards-001"};
enum { NU = 5 };

typedef struct {
    const family_t *f;
    family_model_t *m;
    wenet_asr_t *ref; /* the same model, loaded directly */
    audio_t audio[NU];
} fx_t;

static int fx_open(fx_t *fx, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_wenet_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    hark_err_t err = {0};
    fx->f = family_find("wenet_u2");
    family_load_opts_t lo = {.device = -1};
    if (!fx->f || fx->f->load(path, &lo, NULL, &fx->m, &err) ||
        wenet_asr_load(path, &fx->ref, &err)) {
        snprintf(why, nwhy, "load failed: %.400s", err.msg);
        return -1;
    }
    for (int u = 0; u < NU; u++) {
        snprintf(path, sizeof path, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), utts[u]);
        audio_opts_t ao = {.target_rate = 16000};
        if (audio_decode_file(path, &ao, &fx->audio[u], &err)) {
            snprintf(why, nwhy, "%.200s: %.250s", path, err.msg);
            return -1;
        }
    }
    return 0;
}

static void fx_close(fx_t *fx)
{
    for (int u = 0; u < NU; u++)
        audio_free(&fx->audio[u]);
    if (fx->f)
        fx->f->unload(fx->m);
    wenet_asr_destroy(fx->ref);
}

#define OPEN_FX(fx)                                                                                \
    char why_[512];                                                                                \
    int st_ = fx_open(&fx, why_, sizeof why_);                                                     \
    if (st_ == 1)                                                                                  \
        SKIP(why_);                                                                                \
    CHECKF(st_ == 0, "%s", why_)

/* what emit saw, per item */
typedef struct {
    int n_done, n_other, status;
    char error[256];
    asr_result_t r;
} got_t;

static void on_emit(family_item_t *it, const family_event_t *ev)
{
    got_t *g = it->user;
    if (ev->kind != FAMILY_EV_DONE) {
        g->n_other++;
        return;
    }
    g->n_done++;
    g->status = ev->status;
    if (ev->error)
        snprintf(g->error, sizeof g->error, "%s", ev->error);
    if (ev->asr)
        asr_result_take(&g->r, ev->asr);
}

static int parse(fx_t *fx, const char *const *kv, void *opts, hark_err_t *err)
{
    family_param_t p[8];
    int n = 0;
    for (; kv && kv[2 * n]; n++)
        p[n] = (family_param_t){kv[2 * n], kv[2 * n + 1]};
    family_params_t req = {p, n};
    return fx->f->parse_opts(fx->m, NULL, &req, opts, err);
}

static int same_hyp(const asr_hyp_t *a, const wenet_hyp_t *b, int frame_ms)
{
    if (a->n_tokens != b->n_tokens || strcmp(a->text, b->text ? b->text : "") ||
        a->score != b->score)
        return 0;
    for (int i = 0; i < a->n_tokens; i++)
        if (a->tokens[i] != b->tokens[i] || a->times_ms[i] != b->times[i] * frame_ms)
            return 0;
    return 1;
}

static const char *method_names[3] = {"ctc_greedy_search", "ctc_prefix_beam_search",
                                      "attention_rescoring"};

TEST(wenet_family_matches_recognize)
{
    fx_t fx;
    OPEN_FX(fx);
    family_info_t info;
    fx.f->info(fx.m, &info);
    CHECK_EQ_INT(info.sample_rate, wenet_asr_sample_rate(fx.ref));
    CHECK_EQ_INT(info.frame_ms, wenet_asr_frame_ms(fx.ref));
    CHECK_EQ_INT(info.device, -1);
    CHECKF(info.kind && strstr(info.kind, "wenet_u2"), "%s", info.kind ? info.kind : "(null)");
    const int fms = info.frame_ms;
    hark_err_t err = {0};
    family_worker_t *fw;
    wenet_worker_t *ww;
    family_worker_opts_t wo = {.max_batch = NU, .max_seconds = 12.0};
    CHECK_OK(fx.f->worker_create(fx.m, &wo, &fw, &err));
    CHECK_OK(wenet_worker_create(fx.ref, NU, 12.0, &ww, &err));
    void *opts = hark_calloc(1, fx.f->opts_size);
    const float *pcm[NU];
    size_t n[NU];
    for (int u = 0; u < NU; u++)
        pcm[u] = fx.audio[u].samples, n[u] = fx.audio[u].n;
    for (int m = 0; m < 3; m++) {
        const char *kv[] = {"decoding_method", method_names[m], "nbest", "5", NULL};
        CHECK_OK(parse(&fx, kv, opts, &err));
        wenet_decode_opts_t o = wenet_default_opts(fx.ref);
        o.method = (wenet_method_t)m;
        o.nbest = 5;
        for (int batched = 0; batched < 2; batched++) {
            wenet_result_t ref[NU];
            got_t got[NU];
            family_item_t items[NU], *ip[NU];
            memset(got, 0, sizeof got);
            for (int u = 0; u < NU; u++) {
                items[u] = (family_item_t){
                    .opts = opts, .pcm = pcm[u], .n = n[u], .emit = on_emit, .user = &got[u]};
                ip[u] = &items[u];
            }
            family_exec_times_t tm = {0};
            if (batched) {
                CHECK_OK(wenet_recognize(ww, &o, pcm, n, NU, ref, &err));
                CHECKF(fx.f->execute(fw, ip, NU, &tm, &err) == HARK_OK, "%s", err.msg);
                CHECK(tm.infer_ns > 0 && tm.output_ns > 0);
            } else {
                for (int u = 0; u < NU; u++) {
                    CHECK_OK(wenet_recognize(ww, &o, &pcm[u], &n[u], 1, &ref[u], &err));
                    CHECKF(fx.f->execute(fw, &ip[u], 1, NULL, &err) == HARK_OK, "%s", err.msg);
                }
            }
            for (int u = 0; u < NU; u++) {
                const asr_result_t *r = &got[u].r;
                CHECKF(got[u].n_done == 1 && got[u].n_other == 0 && got[u].status == HARK_OK,
                       "%s: %d DONE events, status %d %s", utts[u], got[u].n_done, got[u].status,
                       got[u].error);
                CHECKF(same_hyp(&r->best, &ref[u].best, fms), "%s %s%s: '%s' vs recognize '%s'",
                       utts[u], method_names[m], batched ? " batched" : "", r->best.text,
                       ref[u].best.text);
                CHECK(r->best.text[0] != 0);
                CHECK_EQ_INT(r->n_nbest, ref[u].n_nbest);
                for (int i = 0; i < r->n_nbest; i++)
                    CHECKF(same_hyp(&r->nbest[i], &ref[u].nbest[i], fms), "%s n-best %d", utts[u],
                           i);
                CHECK(r->confidence == ref[u].confidence);
                CHECK(fabs(r->duration_s - (double)n[u] / 16000) < 1e-9);
                CHECK(r->words == NULL && r->n_words == 0); /* not asked for */
                asr_result_free(&got[u].r);
                wenet_result_free(&ref[u]);
            }
        }
    }
    hark_free(opts);
    fx.f->worker_destroy(fw);
    wenet_worker_destroy(ww);
    fx_close(&fx);
}

/* Items of different options in one execute: each gets its own options' result; words with
 * times when asked; a batch larger than the worker fails every item with one DONE each. */
TEST(wenet_family_mixed_batch_and_words)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_err_t err = {0};
    family_worker_t *fw;
    family_worker_opts_t wo = {.max_batch = 4, .max_seconds = 12.0};
    CHECK_OK(fx.f->worker_create(fx.m, &wo, &fw, &err));
    void *og = hark_calloc(1, fx.f->opts_size), *ob = hark_calloc(1, fx.f->opts_size);
    const char *kg[] = {"decoding_method", "ctc_greedy_search", NULL};
    const char *kb[] = {"decoding_method", "ctc_prefix_beam_search", "beam_size", "4", NULL};
    CHECK_OK(parse(&fx, kg, og, &err));
    CHECK_OK(parse(&fx, kb, ob, &err));
    got_t alone[4], mixed[4];
    family_item_t items[4], *ip[4];
    memset(alone, 0, sizeof alone);
    memset(mixed, 0, sizeof mixed);
    for (int k = 0; k < 4; k++) {
        items[k] = (family_item_t){.opts = k % 2 ? ob : og,
                                   .pcm = fx.audio[k].samples,
                                   .n = fx.audio[k].n,
                                   .want_words = k == 1,
                                   .emit = on_emit,
                                   .user = &alone[k]};
        ip[k] = &items[k];
        CHECK_OK(fx.f->execute(fw, &ip[k], 1, NULL, &err));
        items[k].user = &mixed[k];
    }
    CHECK_OK(fx.f->execute(fw, ip, 4, NULL, &err));
    for (int k = 0; k < 4; k++) {
        CHECK(mixed[k].n_done == 1 && mixed[k].status == HARK_OK);
        CHECKF(!strcmp(mixed[k].r.best.text, alone[k].r.best.text), "%s: '%s' vs '%s'", utts[k],
               mixed[k].r.best.text, alone[k].r.best.text);
        CHECK_EQ_INT(mixed[k].r.n_nbest, k % 2 ? 1 : 0);
    }
    /* words: in order, each within the audio, joined they give the text */
    const asr_result_t *r = &mixed[1].r;
    CHECK(r->n_words > 3 && r->word_sep == 1);
    char joined[4096] = "";
    size_t off = 0;
    for (int i = 0; i < r->n_words; i++) {
        CHECK(r->words[i].start_ms < r->words[i].end_ms);
        CHECK(i == 0 || r->words[i].start_ms >= r->words[i - 1].start_ms);
        CHECK(r->words[i].end_ms <= (int)(r->duration_s * 1000) + 100);
        off += (size_t)snprintf(joined + off, sizeof joined - off, "%s%s", i ? " " : "",
                                r->words[i].text);
    }
    CHECKF(!strcmp(joined, r->best.text), "words '%s' vs text '%s'", joined, r->best.text);
    CHECK_EQ_INT(r->words[0].start_ms, r->best.times_ms[0]);
    for (int k = 0; k < 4; k++)
        asr_result_free(&alone[k].r), asr_result_free(&mixed[k].r);
    /* too many items: every one gets its DONE with the error */
    family_item_t five[5], *fp[5];
    got_t g5[5];
    memset(g5, 0, sizeof g5);
    for (int k = 0; k < 5; k++) {
        five[k] = (family_item_t){.opts = og,
                                  .pcm = fx.audio[0].samples,
                                  .n = fx.audio[0].n,
                                  .emit = on_emit,
                                  .user = &g5[k]};
        fp[k] = &five[k];
    }
    CHECK_EQ_INT(fx.f->execute(fw, fp, 5, NULL, &err), HARK_ERR_TOO_LARGE);
    for (int k = 0; k < 5; k++)
        CHECK(g5[k].n_done == 1 && g5[k].status == HARK_ERR_TOO_LARGE && g5[k].error[0]);
    /* one item too long for the worker fails alone; the others of its batch still succeed */
    got_t g2[2];
    memset(g2, 0, sizeof g2);
    float *longpcm = hark_calloc(16000 * 13, sizeof(float));
    family_item_t two[2] = {
        {.opts = og, .pcm = longpcm, .n = 16000 * 13, .emit = on_emit, .user = &g2[0]},
        {.opts = og,
         .pcm = fx.audio[1].samples,
         .n = fx.audio[1].n,
         .emit = on_emit,
         .user = &g2[1]}};
    family_item_t *tp[2] = {&two[0], &two[1]};
    CHECK_OK(fx.f->execute(fw, tp, 2, NULL, &err));
    CHECK(g2[0].n_done == 1 && g2[0].status == HARK_ERR_TOO_LARGE);
    CHECK(g2[1].n_done == 1 && g2[1].status == HARK_OK && g2[1].r.best.text[0]);
    asr_result_free(&g2[1].r);
    hark_free(longpcm);
    hark_free(og);
    hark_free(ob);
    fx.f->worker_destroy(fw);
    fx_close(&fx);
}

TEST(wenet_family_parse_opts_errors)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_err_t err = {0};
    void *o = hark_calloc(1, fx.f->opts_size);
    static const struct {
        const char *k, *v, *msg;
    } bad[] = {
        {"decoding_method", "beam",
         "decoding_method 'beam' is not one of ctc_greedy_search, ctc_prefix_beam_search, "
         "attention_rescoring"},
        /* one wording for every range (err_range), the value given named */
        {"beam_size", "0", "beam_size must be in [1, 100] (got 0)"},
        {"beam_size", "101", "beam_size must be in [1, 100] (got 101)"},
        {"beam_size", "ten", "beam_size \"ten\" is not an integer"},
        {"nbest", "0", "nbest must be in [1, 100] (got 0)"},
        {"nbest", "11", "nbest 11 exceeds beam_size 10"},
        {"ctc_weight", "-1", "ctc_weight must be >= 0"},
        {"ctc_weight", "x", "ctc_weight"},
        {"ctc_weight", "1e999", "ctc_weight"},
        {"reverse_weight", "1.5", "reverse_weight must be in [0, 1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *kv[] = {bad[i].k, bad[i].v, NULL};
        err.msg[0] = 0;
        CHECK_EQ_INT(parse(&fx, kv, o, &err), HARK_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, bad[i].msg), "%s=%s: '%s'", bad[i].k, bad[i].v, err.msg);
    }
    /* config.pbtxt parameters: checked too, and named as such */
    family_param_t cp[] = {{"beam_size", "0"}};
    family_params_t cfg = {cp, 1};
    CHECK_EQ_INT(fx.f->parse_opts(fx.m, &cfg, NULL, o, &err), HARK_ERR_INVALID_ARG);
    CHECKF(!strcmp(err.msg, "config.pbtxt parameters: beam_size must be in [1, 1000] (got 0)"),
           "%s", err.msg);
    /* a config beam of 4 under the default n-best: fine; a request n-best above it: refused */
    cp[0].value = "4";
    family_param_t rp[] = {{"nbest", "5"}};
    family_params_t req = {rp, 1};
    CHECK_OK(fx.f->parse_opts(fx.m, &cfg, NULL, o, &err));
    CHECK_EQ_INT(fx.f->parse_opts(fx.m, &cfg, &req, o, &err), HARK_ERR_INVALID_ARG);
    /* bad precision at load */
    family_model_t *m2 = NULL;
    family_load_opts_t lo = {.device = -1, .precision = "fp8"};
    char why[512], path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    CHECK_EQ_INT(fx.f->load(path, &lo, NULL, &m2, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "fp8"), "%s", err.msg);
    /* config.pbtxt's gpu_turns: true or false, nothing else */
    lo.precision = NULL;
    family_param_t tp[] = {{"gpu_turns", "yes"}};
    family_params_t tcfg = {tp, 1};
    CHECK_EQ_INT(fx.f->load(path, &lo, &tcfg, &m2, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "gpu_turns \"yes\": expected true or false"), "%s", err.msg);
    tp[0].value = "true";
    CHECK_OK(fx.f->load(path, &lo, &tcfg, &m2, &err));
    fx.f->unload(m2);
    m2 = NULL;
    CHECK(fx.f->load("/nonexistent/model", NULL, NULL, &m2, &err) != HARK_OK);
    hark_free(o);
    fx_close(&fx);
}

/* Keys: equal for options that are equal however they were spelled (defaults written out,
 * 0.5 as 0.50, config vs request), different when any option differs. */
TEST(wenet_family_batch_keys)
{
    fx_t fx;
    OPEN_FX(fx);
    hark_err_t err = {0};
    wenet_decode_opts_t d = wenet_default_opts(fx.ref);
    char beam_def[16], ctc_def[32], ctc_def2[40];
    snprintf(beam_def, sizeof beam_def, "%d", d.beam_size);
    snprintf(ctc_def, sizeof ctc_def, "%.9g", d.ctc_weight);
    snprintf(ctc_def2, sizeof ctc_def2, "%.9g0", d.ctc_weight);
    struct {
        const char *kv[8];
        int cls; /* equal classes: equal options */
    } sets[] = {
        {{NULL}, 0},
        {{"beam_size", beam_def, NULL}, 0},
        {{"ctc_weight", ctc_def, NULL}, 0},
        {{"ctc_weight", ctc_def2, "decoding_method", "attention_rescoring", NULL}, 0},
        {{"beam_size", "4", NULL}, 1},
        {{"beam_size", "04", NULL}, 1},
        {{"beam_size", "4", "nbest", "2", NULL}, 2},
        {{"ctc_weight", "0.25", NULL}, 3},
        {{"reverse_weight", "0.125", NULL}, 4},
        {{"decoding_method", "ctc_greedy_search", NULL}, 5},
        {{"decoding_method", "ctc_prefix_beam_search", NULL}, 6},
        {{"decoding_method", "ctc_prefix_beam_search", "beam_size", "4", NULL}, 7},
    };
    enum { NS = sizeof sets / sizeof sets[0] };
    uint64_t key[NS];
    void *o = hark_calloc(1, fx.f->opts_size);
    for (int i = 0; i < NS; i++) {
        CHECKF(parse(&fx, sets[i].kv, o, &err) == HARK_OK, "set %d: %s", i, err.msg);
        key[i] = fx.f->batch_key(o);
    }
    for (int i = 0; i < NS; i++)
        for (int j = 0; j < NS; j++)
            CHECKF((key[i] == key[j]) == (sets[i].cls == sets[j].cls),
                   "sets %d and %d: keys %s, options %s", i, j,
                   key[i] == key[j] ? "equal" : "differ",
                   sets[i].cls == sets[j].cls ? "equal" : "differ");
    /* the config's options and the same given by the request: one key */
    family_param_t cp[] = {{"beam_size", "4"}};
    family_params_t cfg = {cp, 1};
    CHECK_OK(fx.f->parse_opts(fx.m, &cfg, NULL, o, &err));
    CHECK(fx.f->batch_key(o) == key[4]);
    hark_free(o);
    fx_close(&fx);
}

/* The family on the GPU (FP32): the CPU family's tokens for every method over the batch; info
 * names the device; a dumping item fails alone with UNSUPPORTED (the stages stay on the GPU). */
GPU_TEST(wenet_family_gpu_matches_cpu)
{
    if (!test_have_gpu())
        SKIP("no GPU");
    fx_t fx;
    OPEN_FX(fx);
    char why[512], path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    family_model_t *g = NULL;
    family_load_opts_t lo = {.device = 0, .precision = "fp32"};
    hark_err_t err = {0};
    CHECKF(fx.f->load(path, &lo, NULL, &g, &err) == HARK_OK, "%s", err.msg);
    family_info_t info;
    fx.f->info(g, &info);
    CHECK_EQ_INT(info.device, 0);
    family_worker_t *wc, *wg;
    family_worker_opts_t wo = {.max_batch = NU, .max_seconds = 12.0};
    CHECK_OK(fx.f->worker_create(fx.m, &wo, &wc, &err));
    CHECKF(fx.f->worker_create(g, &wo, &wg, &err) == HARK_OK, "%s", err.msg);
    void *opts = hark_calloc(1, fx.f->opts_size);
    for (int m = 0; m < 3; m++) {
        const char *kv[] = {"decoding_method", method_names[m], NULL};
        CHECK_OK(parse(&fx, kv, opts, &err));
        got_t gc[NU], gg[NU];
        family_item_t ic[NU], ig[NU], *pc[NU], *pg[NU];
        memset(gc, 0, sizeof gc);
        memset(gg, 0, sizeof gg);
        for (int u = 0; u < NU; u++) {
            ic[u] = (family_item_t){.opts = opts,
                                    .pcm = fx.audio[u].samples,
                                    .n = fx.audio[u].n,
                                    .emit = on_emit,
                                    .user = &gc[u]};
            ig[u] = ic[u];
            ig[u].user = &gg[u];
            pc[u] = &ic[u];
            pg[u] = &ig[u];
        }
        CHECK_OK(fx.f->execute(wc, pc, NU, NULL, &err));
        CHECKF(fx.f->execute(wg, pg, NU, NULL, &err) == HARK_OK, "%s", err.msg);
        for (int u = 0; u < NU; u++) {
            const asr_hyp_t *a = &gg[u].r.best, *b = &gc[u].r.best;
            CHECKF(gg[u].status == HARK_OK && a->n_tokens == b->n_tokens &&
                       !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
                       !strcmp(a->text, b->text),
                   "%s %s: gpu '%s' vs cpu '%s'", utts[u], method_names[m], a->text, b->text);
            asr_result_free(&gc[u].r);
            asr_result_free(&gg[u].r);
        }
    }
    got_t gd;
    memset(&gd, 0, sizeof gd);
    family_item_t id = {.opts = opts,
                        .pcm = fx.audio[4].samples,
                        .n = fx.audio[4].n,
                        .dump_dir = test_tmpdir(t),
                        .emit = on_emit,
                        .user = &gd};
    family_item_t *pd = &id;
    CHECK_EQ_INT(fx.f->execute(wg, &pd, 1, NULL, &err), HARK_ERR_UNSUPPORTED);
    CHECK(gd.n_done == 1 && gd.status == HARK_ERR_UNSUPPORTED && strstr(gd.error, "CPU"));
    hark_free(opts);
    fx.f->worker_destroy(wc);
    fx.f->worker_destroy(wg);
    fx.f->unload(g);
    fx_close(&fx);
}
