/* Tests for src/model/icefall/icefall_family.c through the family table and the CLI: the
 * registry entry, GPU loads (refused without a GPU) and refused precisions, options (icefall's
 * method names, beam_size / beam, errors naming the parameter), execute on a batch (icefall's
 * greedy and beam texts, words, an n-best that starts with the best, bad items failing alone;
 * fast_beam_search's options and its items as icefall_run gives them), `hark transcribe
 * --decoding-method`; and the errors of corrupt or missing model files. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/family.h"
#include "model/icefall/icefall.h"
#include "support/golden_icefall.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int status;
    char error[256];
    asr_result_t r;
    int n_done;
} got_t;

static void on_emit(family_item_t *it, const family_event_t *ev)
{
    got_t *g = it->user;
    if (ev->kind != FAMILY_EV_DONE)
        return;
    g->n_done++;
    g->status = ev->status;
    if (ev->error)
        snprintf(g->error, sizeof g->error, "%s", ev->error);
    if (ev->asr)
        asr_result_take(&g->r, ev->asr);
}

static const char *golden_text(const cJSON *res, const char *utt, const char *method)
{
    const cJSON *u =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "utterances"), utt);
    const cJSON *t =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, method), "text");
    return cJSON_IsString(t) ? t->valuestring : "";
}

TEST(icefall_family_execute)
{
    const family_t *f = family_find("icefall_transducer");
    CHECK(f && f->task == FAMILY_TASK_ASR && !f->streaming && !f->io);
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512], dir[600];
    const char *d = golden_icefall_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    snprintf(dir, sizeof dir, "%s/m", d);
    const family_t *fd = NULL;
    hark_err_t err = {0};
    CHECK_OK(family_of_dir(dir, 0, &fd, &err));
    CHECK(fd == f);
    family_model_t *m = NULL;
    family_load_opts_t gpu = {.device = 0, .precision = "fp16"},
                       fp16 = {.device = -1, .precision = "fp16"},
                       badp = {.device = 0, .precision = "fp8"};
    /* the Conformer loads on a GPU where there is one (icefall_gpu.h; its tests run it) */
    int grc = f->load(dir, &gpu, NULL, &m, &err);
    if (test_have_gpu()) {
        CHECK_OK(grc);
        family_info_t gi;
        f->info(m, &gi);
        CHECK_EQ_INT(gi.device, 0);
        CHECK(strstr(gi.kind, "fp16 (gpu)") != NULL);
        f->unload(m);
    } else {
        CHECK(grc != HARK_OK && m == NULL);
    }
    m = NULL;
    CHECK_EQ_INT(f->load(dir, &badp, NULL, &m, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "fp8") && m == NULL);
    CHECK_EQ_INT(f->load(dir, &fp16, NULL, &m, &err), HARK_ERR_UNSUPPORTED);
    family_load_opts_t cpu = {.device = -1};
    CHECK_OK(f->load(dir, &cpu, NULL, &m, &err));
    family_info_t info;
    f->info(m, &info);
    CHECK_EQ_INT(info.sample_rate, 16000);
    CHECK_EQ_INT(info.frame_ms, 40);

    /* options: the model's default (greedy_search, beam 4), config then request */
    char o_greedy[256], o_beam[256], o_x[256];
    CHECK(f->opts_size <= sizeof o_greedy);
    family_param_t pm = {"decoding_method", "modified_beam_search"};
    family_param_t pb[2] = {{"decoding_method", "modified_beam_search"}, {"beam", "4"}};
    family_param_t p8 = {"beam_size", "8"}, pbad = {"decoding_method", "ctc_greedy_search"};
    family_param_t pfast = {"decoding_method", "fast_beam_search_nbest"},
                   pzero = {"beam_size", "0"};
    family_params_t cfg_m = {&pm, 1}, req_b = {pb, 2}, req_8 = {&p8, 1}, req_bad = {&pbad, 1},
                    req_fast = {&pfast, 1}, req_zero = {&pzero, 1};
    CHECK_OK(f->parse_opts(m, NULL, NULL, o_greedy, &err));
    CHECK_OK(f->parse_opts(m, &cfg_m, NULL, o_beam, &err));
    CHECK(f->batch_key(o_greedy) != f->batch_key(o_beam));
    CHECK_OK(f->parse_opts(m, NULL, &req_b, o_x, &err));
    CHECK(f->batch_key(o_x) == f->batch_key(o_beam));
    CHECK_OK(f->parse_opts(m, &cfg_m, &req_8, o_x, &err));
    CHECK(f->batch_key(o_x) != f->batch_key(o_beam));
    CHECK_EQ_INT(f->parse_opts(m, &req_bad, NULL, o_x, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "config.pbtxt parameters decoding_method 'ctc_greedy_search'"));
    CHECK_EQ_INT(f->parse_opts(m, NULL, &req_fast, o_x, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "not implemented yet"));
    CHECK_EQ_INT(f->parse_opts(m, NULL, &req_zero, o_x, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "beam_size"));
    /* fast_beam_search: beam is a number (icefall's --beam), with max_contexts and max_states;
     * config.pbtxt's, then the request's; bad values named */
    char o_fast[256], o_fast2[256];
    {
        family_param_t pf[1] = {{"decoding_method", "fast_beam_search"}};
        family_param_t pf2[4] = {{"decoding_method", "fast_beam_search"},
                                 {"beam", "2.5"},
                                 {"max_contexts", "3"},
                                 {"max_states", "6"}};
        family_param_t pf3[2] = {{"beam", "2.5"}, {"max_contexts", "3"}};
        family_param_t pf4 = {"max_states", "6"};
        family_params_t req_f = {pf, 1}, req_f2 = {pf2, 4}, cfg_f3 = {pf3, 2}, req_f4 = {&pf4, 1};
        CHECK_OK(f->parse_opts(m, NULL, &req_f, o_fast, &err));
        CHECK(f->batch_key(o_fast) != f->batch_key(o_greedy) &&
              f->batch_key(o_fast) != f->batch_key(o_beam));
        CHECK_OK(f->parse_opts(m, NULL, &req_f2, o_fast2, &err));
        CHECK(f->batch_key(o_fast2) != f->batch_key(o_fast));
        /* the same options from config.pbtxt (method, beam, contexts) and the request (states) */
        family_param_t pc[3] = {
            {"decoding_method", "fast_beam_search"}, {"beam", "2.5"}, {"max_contexts", "3"}};
        family_params_t cfg_c = {pc, 3};
        CHECK_OK(f->parse_opts(m, &cfg_c, &req_f4, o_x, &err));
        CHECK(f->batch_key(o_x) == f->batch_key(o_fast2));
        /* beam as a number belongs to fast_beam_search; with the other methods it is beam_size's
         * other name (an integer) */
        CHECK_EQ_INT(f->parse_opts(m, &cfg_f3, NULL, o_x, &err), HARK_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, "config.pbtxt parameters") && strstr(err.msg, "beam \"2.5\""), "%s",
               err.msg);
        static const char *const bad[][2] = {{"beam", "x"},          {"beam", "-1"},
                                             {"beam", "inf"},        {"max_contexts", "0"},
                                             {"max_states", "1025"}, {"max_states", "2.5"}};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            family_param_t pb2[2] = {{"decoding_method", "fast_beam_search"},
                                     {bad[i][0], bad[i][1]}};
            family_params_t rb = {pb2, 2};
            CHECK_EQ_INT(f->parse_opts(m, NULL, &rb, o_x, &err), HARK_ERR_INVALID_ARG);
            CHECKF(strstr(err.msg, bad[i][0]), "%s %s: %s", bad[i][0], bad[i][1], err.msg);
        }
    }

    /* a batch: utt0, a NaN item, utt2, a too-short item, utt3 — greedy, then beam */
    family_worker_t *w = NULL;
    family_worker_opts_t wo = {.max_batch = 8, .max_seconds = 12};
    CHECK_OK(f->worker_create(m, &wo, &w, &err));
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    npy_array_t a[3];
    const int uu[3] = {0, 2, 3};
    for (int i = 0; i < 3; i++)
        CHECK_OK(golden_icefall_npy(&a[i], golden_icefall_utts[uu[i]], "waveform.npy"));
    float bad[4000] = {0}, shortpcm[1000] = {0};
    bad[10] = NAN;
    for (int meth = 0; meth < 2; meth++) {
        const char *opts = meth ? o_beam : o_greedy;
        const char *key = meth ? "modified_beam_search" : "greedy_search";
        got_t g[5];
        memset(g, 0, sizeof g);
        family_item_t it[5] = {
            {.opts = opts,
             .pcm = a[0].data,
             .n = a[0].count,
             .want_words = 1,
             .emit = on_emit,
             .user = &g[0]},
            {.opts = opts, .pcm = bad, .n = 4000, .emit = on_emit, .user = &g[1]},
            {.opts = opts, .pcm = a[1].data, .n = a[1].count, .emit = on_emit, .user = &g[2]},
            {.opts = opts, .pcm = shortpcm, .n = 1000, .emit = on_emit, .user = &g[3]},
            {.opts = opts, .pcm = a[2].data, .n = a[2].count, .emit = on_emit, .user = &g[4]},
        };
        family_item_t *items[5] = {&it[0], &it[1], &it[2], &it[3], &it[4]};
        CHECK_OK(f->execute(w, items, 5, NULL, &err));
        for (int i = 0; i < 5; i++)
            CHECK_EQ_INT(g[i].n_done, 1);
        const int ok[3] = {0, 2, 4};
        for (int i = 0; i < 3; i++) {
            const char *want = golden_text(res, golden_icefall_utts[uu[i]], key);
            CHECK_OK(g[ok[i]].status);
            CHECKF(g[ok[i]].r.best.text && !strcmp(g[ok[i]].r.best.text, want),
                   "%s %s: '%s' vs '%s'", golden_icefall_utts[uu[i]], key, g[ok[i]].r.best.text,
                   want);
        }
        CHECK_EQ_INT(g[1].status, HARK_ERR_INVALID_ARG);
        CHECK(strstr(g[1].error, "NaN"));
        CHECK_EQ_INT(g[3].status, HARK_ERR_INVALID_ARG);
        CHECK(strstr(g[3].error, "too short"));
        /* words: the text's words in order, times that grow */
        const asr_result_t *r = &g[0].r;
        CHECK(r->n_words > 5 && r->word_sep == 1);
        for (int i = 1; i < r->n_words; i++)
            CHECK(r->words[i].start_ms >= r->words[i - 1].start_ms);
        CHECK(r->best.n_tokens > 0 && r->best.times_ms[r->best.n_tokens - 1] <= 11000);
        if (meth) { /* the n-best is the final beam, the best first */
            CHECK(r->n_nbest >= 1 && r->n_nbest <= 4);
            CHECK(!strcmp(r->nbest[0].text, r->best.text));
        } else {
            CHECK_EQ_INT(r->n_nbest, 0);
        }
        for (int i = 0; i < 5; i++)
            asr_result_free(&g[i].r);
    }
    /* nbest: the best n of the final beam; "all" the whole beam; a bad value named */
    {
        family_param_t pn[2] = {{"decoding_method", "modified_beam_search"}, {"nbest", "1"}};
        family_param_t pnb = {"nbest", "x"};
        family_params_t req_n = {pn, 2}, req_nb = {&pnb, 1};
        char o_n[256];
        CHECK_OK(f->parse_opts(m, NULL, &req_n, o_n, &err));
        CHECK(f->batch_key(o_n) != f->batch_key(o_beam));
        CHECK_EQ_INT(f->parse_opts(m, NULL, &req_nb, o_x, &err), HARK_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, "nbest"), "%s", err.msg);
        got_t g1;
        memset(&g1, 0, sizeof g1);
        family_item_t it1 = {
            .opts = o_n, .pcm = a[2].data, .n = a[2].count, .emit = on_emit, .user = &g1};
        family_item_t *one[1] = {&it1};
        CHECK_OK(f->execute(w, one, 1, NULL, &err));
        CHECK_OK(g1.status);
        CHECK_EQ_INT(g1.r.n_nbest, 1);
        CHECK(!strcmp(g1.r.nbest[0].text, g1.r.best.text));
        asr_result_free(&g1.r);
    }
    /* fast_beam_search: each item of a batch as icefall_run gives it alone (the request's beam,
     * max_contexts, max_states reach the search) */
    {
        icefall_model_t *im = NULL;
        icefall_worker_t *iw = NULL;
        CHECK_OK(icefall_load(dir, 1, &im, &err));
        CHECK_OK(icefall_worker_create(im, 12, &iw, &err));
        for (int k = 0; k < 2; k++) {
            const char *opts = k ? o_fast2 : o_fast;
            icefall_run_opts_t ro = {.method = ICEFALL_FAST_BEAM,
                                     .fast_beam = k ? (icefall_fast_beam_opts_t){2.5, 3, 6}
                                                    : icefall_config(im)->fast_beam};
            got_t g[3];
            memset(g, 0, sizeof g);
            family_item_t it[3];
            family_item_t *items[3];
            for (int i = 0; i < 3; i++) {
                it[i] = (family_item_t){.opts = opts,
                                        .pcm = a[i].data,
                                        .n = a[i].count,
                                        .emit = on_emit,
                                        .user = &g[i]};
                items[i] = &it[i];
            }
            CHECK_OK(f->execute(w, items, 3, NULL, &err));
            for (int i = 0; i < 3; i++) {
                icefall_result_t r1;
                const float *pcm = a[i].data;
                size_t n1 = a[i].count;
                CHECK_OK(icefall_run(iw, &pcm, &n1, 1, &ro, &r1, &err));
                CHECK_OK(g[i].status);
                CHECKF(!strcmp(g[i].r.best.text, r1.text), "fast_beam_search %d, %s: '%s' vs '%s'",
                       k, golden_icefall_utts[uu[i]], g[i].r.best.text, r1.text);
                CHECK_EQ_INT(g[i].r.best.n_tokens, r1.best.n);
                CHECK_EQ_INT(g[i].r.n_nbest, 0);
                icefall_result_free(&r1);
                asr_result_free(&g[i].r);
            }
        }
        icefall_worker_destroy(iw);
        icefall_destroy(im);
    }
    for (int i = 0; i < 3; i++)
        npy_free(&a[i]);
    cJSON_Delete(res);
    f->worker_destroy(w);
    f->unload(m);
}

/* `hark transcribe --decoding-method` on the golden wavs */
TEST(icefall_cli_transcribe)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512];
    const char *d = golden_icefall_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    const char *wav = test_shared(GOLDEN_ICEFALL "/wavs/lj-LJ001-0013.wav");
    CHECK(wav != NULL);
    static const char *const methods[] = {"greedy_search", "modified_beam_search",
                                          "fast_beam_search"};
    /* fast_beam_search: no golden (icefall's needs k2: test_icefall_fast_beam.c); the CLI must
     * give what the library gives */
    char fast_text[4096];
    {
        char mdir[700];
        snprintf(mdir, sizeof mdir, "%s/m", d);
        hark_err_t err = {0};
        icefall_model_t *im = NULL;
        icefall_worker_t *iw = NULL;
        npy_array_t pcm = {0};
        CHECK_OK(icefall_load(mdir, 1, &im, &err));
        CHECK_OK(icefall_worker_create(im, 12, &iw, &err));
        CHECK_OK(golden_icefall_npy(&pcm, "lj-LJ001-0013", "waveform.npy"));
        icefall_run_opts_t ro = {.method = ICEFALL_FAST_BEAM};
        icefall_result_t r1;
        const float *p1 = pcm.data;
        size_t n1 = pcm.count;
        CHECK_OK(icefall_run(iw, &p1, &n1, 1, &ro, &r1, &err));
        CHECK(r1.best.n > 0); /* 45 tokens, as k2's (test_icefall_fast_beam.c) */
        snprintf(fast_text, sizeof fast_text, "%s", r1.text);
        icefall_result_free(&r1);
        npy_free(&pcm);
        icefall_worker_destroy(iw);
        icefall_destroy(im);
    }
    for (int k = 0; k < 3; k++) {
        char cmd[4096], out[8192] = "";
        snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --decoding-method %s %s 2>&1",
                 test_hark_bin(), d, methods[k], wav);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = 0;
        CHECK_EQ_INT(pclose(p), 0);
        char want[9000];
        snprintf(want, sizeof want, "%s %s\n", wav,
                 k == 2 ? fast_text : golden_text(res, "lj-LJ001-0013", methods[k]));
        CHECKF(!strcmp(out, want), "%s:\n  got  %s  want %s", methods[k], out, want);
    }
    char cmd[4096], out[4096] = "";
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method attention_rescoring %s 2>&1",
             test_hark_bin(), d, wav);
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK(pclose(p) != 0);
    CHECKF(strstr(out, "decoding_method 'attention_rescoring' is not one of greedy_search"), "%s",
           out);
    cJSON_Delete(res);
}

/* ---- corrupt or missing model files ------------------------------------------------------- */

static int copy_file(const char *src, const char *dst)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    return system(cmd);
}

static int load_err(const char *dir, hark_err_t *err)
{
    icefall_model_t *m = NULL;
    int rc = icefall_load(dir, 1, &m, err);
    icefall_destroy(m);
    return rc;
}

TEST(icefall_model_file_errors)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512];
    const char *d = golden_icefall_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    char src[700], dst[900], root[600], path[1100];
    snprintf(src, sizeof src, "%s/m/1", d);
    snprintf(root, sizeof root, "%s/m", test_tmpdir(t));
    snprintf(dst, sizeof dst, "%s/1", root);
    char cmd[5000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s'/* '%s'/", dst, src, dst);
    CHECK_EQ_INT(system(cmd), 0);
    hark_err_t err = {0};
    CHECK_OK(load_err(root, &err));

    /* tokens.txt missing, then one token short */
    snprintf(path, sizeof path, "%s/tokens.txt", dst);
    char moved[1200];
    snprintf(moved, sizeof moved, "%s.bak", path);
    CHECK_OK(rename(path, moved));
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "tokens.txt"), "%s", err.msg);
    snprintf(cmd, sizeof cmd, "head -n 499 '%s' > '%s'", moved, path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK(load_err(root, &err) != HARK_OK);
    CHECKF(strstr(err.msg, "499") && strstr(err.msg, "500"), "%s", err.msg);
    CHECK_OK(rename(moved, path));

    /* model.json: missing, not JSON, a field out of range, an unknown recipe */
    snprintf(path, sizeof path, "%s/model.json", dst);
    snprintf(moved, sizeof moved, "%s.bak", path);
    CHECK_OK(rename(path, moved));
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "model.json"), "%s", err.msg);
    FILE *fp = fopen(path, "w");
    fputs("{not json", fp);
    fclose(fp);
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_FORMAT);
    snprintf(cmd, sizeof cmd, "sed 's/\"nhead\": 4/\"nhead\": 3/' '%s' > '%s'", moved, path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "nhead 3"), "%s", err.msg);
    snprintf(cmd, sizeof cmd,
             "sed 's/\"num_encoder_layers\": 3/\"num_encoder_layers\": 4/' '%s' > '%s'", moved,
             path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK(load_err(root, &err) != HARK_OK);
    CHECKF(strstr(err.msg, "encoder.encoder.layers.3.") && strstr(err.msg, "missing"), "%s",
           err.msg);
    snprintf(cmd, sizeof cmd,
             "sed 's/\"recipe\": \"pruned_transducer_stateless3\"/\"recipe\": \"zipformer\"/' "
             "'%s' > '%s'",
             moved, path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(err.msg, "zipformer"), "%s", err.msg);
    snprintf(cmd, sizeof cmd, "sed 's/\"decoder_dim\": 256/\"decoder_dim\": 255/' '%s' > '%s'",
             moved, path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "decoder.embedding.weight") && strstr(err.msg, "[500,256]"), "%s",
           err.msg);
    CHECK_OK(rename(moved, path));

    /* model.safetensors: missing, truncated, a NaN in a weight */
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    snprintf(moved, sizeof moved, "%s.bak", path);
    CHECK_OK(rename(path, moved));
    CHECK(load_err(root, &err) != HARK_OK);
    CHECKF(strstr(err.msg, "model.safetensors"), "%s", err.msg);
    snprintf(cmd, sizeof cmd, "head -c 100000 '%s' > '%s'", moved, path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "model.safetensors"), "%s", err.msg);
    CHECK_EQ_INT(copy_file(moved, path), 0);
    {
        /* poison the last float of the file (joiner.output_linear.bias's last value) */
        FILE *fw = fopen(path, "r+b");
        CHECK(fw != NULL);
        fseek(fw, -4, SEEK_END);
        float nan = NAN;
        fwrite(&nan, 4, 1, fw);
        fclose(fw);
    }
    CHECK_EQ_INT(load_err(root, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "NaN"), "%s", err.msg);
    CHECK_OK(rename(moved, path));
    CHECK_OK(load_err(root, &err));
}

/* the converter's refusals: recipes by name, flags hark does not implement, a wrong
 * --context-size, a token table of the wrong size, fast_beam_search's options out of range —
 * and nothing written */
TEST(icefall_convert_errors)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    if (system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    const char *g = test_shared(GOLDEN_ICEFALL);
    char out[600], tok[700];
    snprintf(out, sizeof out, "%s/out", test_tmpdir(t));
    snprintf(tok, sizeof tok, "%s/short_tokens.txt", test_tmpdir(t));
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "head -n 400 '%s/tokens.txt' > '%s'", g, tok);
    CHECK_EQ_INT(system(cmd), 0);
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"--recipe zipformer", "not a zipformer checkpoint"},
        {"--recipe zipformer --causal True",
         "--chunk-size 16,32,64,-1: a causal model decodes with one value"},
        {"--recipe zipformer --causal True --chunk-size 16 --left-context-frames 64 "
         "--downsampling-factor 1,2,4,3,4,2",
         "--chunk-size 16: not a multiple of stack 3's downsampling factor 3"},
        {"--recipe zipformer --causal True --chunk-size 16 --left-context-frames 16",
         "fewer than stack 1's convolution needs"},
        {"--recipe zipformer --causal-convolution True",
         "--causal-convolution: not a flag of the zipformer recipe"},
        {"--recipe pruned_transducer_stateless3 --num-heads 4",
         "--num-heads: not a flag of the pruned_transducer_stateless3 recipe"},
        {"--recipe zipformer --num-heads 4,4", "--num-heads 4,4: 2 values for 6 stacks"},
        {"--recipe zipformer --encoder-unmasked-dim 512", "stack 0 has 512 > its encoder dim"},
        {"--recipe zipformer --cnn-module-kernel 30", "kernels must be odd"},
        {"--recipe zipformer --use-transducer False", "--use-transducer False"},
        {"--recipe zipformer --decoder-dim 510", "--decoder-dim 510: must be a multiple of 4"},
        {"--recipe zipformer --context-size 1", "--context-size 1: not supported yet"},
        {"--recipe conformer_ctc", "--recipe conformer_ctc: not an icefall recipe"},
        {"--recipe pruned_transducer_stateless3 --context-size 3", "--context-size 3"},
        {"--recipe pruned_transducer_stateless3 --dynamic-chunk-training True",
         "--dynamic-chunk-training True needs --causal-convolution True"},
        {"--recipe pruned_transducer_stateless3 --dynamic-chunk-training True "
         "--causal-convolution True",
         "--dynamic-chunk-training True: not supported yet"},
        {"--recipe pruned_transducer_stateless3 --method fast_beam_search_nbest",
         "--method fast_beam_search_nbest: not implemented"},
        {"--recipe pruned_transducer_stateless3 --method fast_beam_search --beam -1",
         "--beam -1.0: fast_beam_search's beam must be a finite number >= 0"},
        {"--recipe pruned_transducer_stateless3 --max-states 0",
         "--max-states 0: must be in [1, 1024]"},
        {"--recipe pruned_transducer_stateless3 --max-contexts 2000",
         "--max-contexts 2000: must be in [1, 1024]"},
        {"--recipe zipformer --method fast_beam_search --streaming 4",
         "--method fast_beam_search with --streaming"},
        {"--recipe pruned_transducer_stateless3 --max-sym-per-frame 2", "--max-sym-per-frame 2"},
        {"--recipe pruned_transducer_stateless3 --simulate-streaming True",
         "--simulate-streaming True needs --causal-convolution True"},
        {"--recipe pruned_transducer_stateless3 --simulate-streaming True --causal-convolution "
         "True --decode-chunk-size 16 --left-context 40",
         "--left-context 40 must be a multiple of --decode-chunk-size 16"},
        {"--recipe pruned_transducer_stateless3 --tokens SHORT", "400 tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[1000];
        const char *s = strstr(cases[i].args, " --tokens SHORT");
        if (s)
            snprintf(args, sizeof args, "%.*s --tokens '%s'", (int)(s - cases[i].args),
                     cases[i].args, tok);
        else
            snprintf(args, sizeof args, "%s --tokens '%s/tokens.txt'", cases[i].args, g);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/convert_icefall.py --checkpoint '%s/pretrained.pt' %s "
                 "--output '%s' 2>&1",
                 g, args, out);
        FILE *p = popen(cmd, "r");
        char buf[4096] = "";
        size_t n = fread(buf, 1, sizeof buf - 1, p);
        buf[n] = 0;
        int st = pclose(p);
        CHECKF(st != 0 && strstr(buf, cases[i].msg), "%s: status %d, output %s", cases[i].args, st,
               buf);
        CHECKF(access(out, F_OK) != 0, "%s: wrote %s", cases[i].args, out);
    }
}

/* an item's dump_dir gets every stage as .npy, and they are icefall's */
TEST(icefall_family_dump_dir)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    const family_t *f = family_find("icefall_transducer");
    char why[512], dir[600];
    const char *d = golden_icefall_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    snprintf(dir, sizeof dir, "%s/m", d);
    family_model_t *m = NULL;
    family_worker_t *w = NULL;
    hark_err_t err = {0};
    family_load_opts_t cpu = {.device = -1};
    CHECK_OK(f->load(dir, &cpu, NULL, &m, &err));
    family_worker_opts_t wo = {.max_batch = 2, .max_seconds = 5};
    CHECK_OK(f->worker_create(m, &wo, &w, &err));
    char opts[256];
    CHECK_OK(f->parse_opts(m, NULL, NULL, opts, &err));
    npy_array_t a = {0};
    CHECK_OK(golden_icefall_npy(&a, GOLDEN_ICEFALL_DEBUG_UTT, "waveform.npy"));
    char dump[700];
    snprintf(dump, sizeof dump, "%s/dump/utt", test_tmpdir(t));
    got_t g;
    memset(&g, 0, sizeof g);
    family_item_t it = {
        .opts = opts, .pcm = a.data, .n = a.count, .dump_dir = dump, .emit = on_emit, .user = &g};
    family_item_t *items[1] = {&it};
    CHECK_OK(f->execute(w, items, 1, NULL, &err));
    CHECK_OK(g.status);
    static const char *const stages[] = {"fbank",      "embed_conv_out",   "embed_out",
                                         "pos_emb",    "layer0_self_attn", "layer2_out",
                                         "encoder_out"};
    for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s.npy", dump, stages[i]);
        npy_array_t s = {0};
        CHECKF(npy_load_f32(p, &s) == 0, "%s not written", p);
        npy_free(&s);
    }
    char p[800];
    snprintf(p, sizeof p, "%s/encoder_out.npy", dump);
    npy_array_t mine = {0}, ref = {0};
    CHECK_OK(npy_load_f32(p, &mine));
    CHECK_OK(golden_icefall_npy(&ref, GOLDEN_ICEFALL_DEBUG_UTT, "encoder_out.npy"));
    CHECK(mine.count == ref.count);
    CHECK(test_max_abs_diff(mine.data, ref.data, ref.count) <= 2e-5);
    npy_free(&mine);
    npy_free(&ref);
    npy_free(&a);
    asr_result_free(&g.r);
    f->worker_destroy(w);
    f->unload(m);
}

/* `hark inspect` on a converted icefall model: the architecture read back, the parameter count
 * (icefall's 6,130,594 less simple_am_proj / simple_lm_proj and the folded scalar scales) */
TEST(icefall_cli_inspect)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512];
    const char *d = golden_icefall_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    char cmd[2048], out[8192] = "";
    snprintf(cmd, sizeof cmd, "%s inspect %s/m 2>&1", test_hark_bin(), d);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK_EQ_INT(pclose(p), 0);
    CHECKF(strstr(out, "3 layers, encoder_dim 256, 4 heads, dim_feedforward 1024, "
                       "cnn_module_kernel 31") &&
               strstr(out, "decoder_dim 256, context_size 2, vocab 500") &&
               strstr(out, "joiner_dim 320") && strstr(out, "high_freq -400") &&
               strstr(out, "parameters           5873512 "),
           "%s", out);
}
