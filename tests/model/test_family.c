/* Tests for src/model/family.c and src/model/registry.c: task names, parameter look-ups,
 * asr_result_t copy / take / free (every allocation failing in turn), the registry and
 * family_of_dir over model.json files. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

TEST(family_task_names)
{
    CHECK(!strcmp(family_task_name(FAMILY_TASK_ASR), "asr"));
    CHECK(!strcmp(family_task_name(FAMILY_TASK_TTS), "tts"));
    CHECK(!strcmp(family_task_name(FAMILY_TASK_VAD), "vad"));
    CHECK(!strcmp(family_task_name((family_task_t)99), "unknown"));
}

TEST(family_params_lookup)
{
    family_param_t p[] = {{"beam_size", "4"}, {"ctc_weight", "0.25"},
                          {"beam_size", "7"}, {"bad_int", "4x"},
                          {"bad_num", "nan"}, {"flag", "TRUE"},
                          {"off", "0"},       {"huge", "99999999999999999999"},
                          {"inf", "inf"},     {"empty", ""}};
    family_params_t ps = {p, (int)(sizeof p / sizeof p[0])};
    hark_err_t err = {0};
    CHECK(family_param(NULL, "x") == NULL);
    CHECK(family_param(&ps, "missing") == NULL);
    CHECK(!strcmp(family_param(&ps, "beam_size"), "7")); /* the last one wins */
    int i = -1;
    CHECK_EQ_INT(family_param_int(&ps, "missing", 0, 10, &i, &err), HARK_ERR_NOT_FOUND);
    CHECK_EQ_INT(i, -1);
    CHECK_OK(family_param_int(&ps, "beam_size", 1, 10, &i, &err));
    CHECK_EQ_INT(i, 7);
    CHECK_EQ_INT(family_param_int(&ps, "beam_size", 1, 5, &i, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "beam_size") && strstr(err.msg, "[1, 5]"), "%s", err.msg);
    CHECK_EQ_INT(family_param_int(&ps, "bad_int", 0, 10, &i, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "bad_int") && strstr(err.msg, "4x"), "%s", err.msg);
    CHECK_EQ_INT(family_param_int(&ps, "huge", 0, 10, &i, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(family_param_int(&ps, "empty", 0, 10, &i, &err), HARK_ERR_INVALID_ARG);
    double d = -1;
    CHECK_OK(family_param_double(&ps, "ctc_weight", &d, &err));
    CHECK(d == 0.25);
    CHECK_EQ_INT(family_param_double(&ps, "bad_num", &d, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "bad_num"), "%s", err.msg);
    CHECK_EQ_INT(family_param_double(&ps, "inf", &d, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(family_param_double(&ps, "missing", &d, &err), HARK_ERR_NOT_FOUND);
    int b = -1;
    CHECK_OK(family_param_bool(&ps, "flag", &b, &err));
    CHECK_EQ_INT(b, 1);
    CHECK_OK(family_param_bool(&ps, "off", &b, &err));
    CHECK_EQ_INT(b, 0);
    CHECK_EQ_INT(family_param_bool(&ps, "ctc_weight", &b, &err), HARK_ERR_INVALID_ARG);
}

static void fill(asr_result_t *r)
{
    static int tok[3] = {5, 6, 7}, tms[3] = {0, 40, 80};
    static asr_hyp_t nb[2] = {{"a b", tok, tms, 3, -1.5}, {"a c", tok, tms, 2, -2.5}};
    static asr_word_t w[2] = {{"a", 0, 40}, {"b", 40, 120}};
    *r = (asr_result_t){.best = {"a b", tok, tms, 3, -1.5},
                        .nbest = nb,
                        .n_nbest = 2,
                        .words = w,
                        .n_words = 2,
                        .confidence = 0.75,
                        .duration_s = 1.25,
                        .word_sep = 1};
}

static int same_hyp(const asr_hyp_t *a, const asr_hyp_t *b)
{
    return !strcmp(a->text, b->text) && a->n_tokens == b->n_tokens && a->score == b->score &&
           !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
           !memcmp(a->times_ms, b->times_ms, sizeof(int) * (size_t)a->n_tokens);
}

TEST(family_asr_result_copy_take_free)
{
    asr_result_t src, dst, moved;
    fill(&src);
    CHECK_OK(asr_result_copy(&dst, &src));
    CHECK(dst.best.text != src.best.text && dst.best.tokens != src.best.tokens);
    CHECK(same_hyp(&dst.best, &src.best));
    CHECK_EQ_INT(dst.n_nbest, 2);
    CHECK(same_hyp(&dst.nbest[1], &src.nbest[1]));
    CHECK_EQ_INT(dst.n_words, 2);
    CHECK(!strcmp(dst.words[1].text, "b") && dst.words[1].start_ms == 40 &&
          dst.words[1].end_ms == 120);
    CHECK(dst.confidence == 0.75 && dst.duration_s == 1.25 && dst.word_sep == 1);
    asr_result_take(&moved, &dst);
    CHECK(dst.best.text == NULL && dst.n_nbest == 0 && dst.words == NULL);
    CHECK(!strcmp(moved.best.text, "a b"));
    asr_result_free(&moved);
    CHECK(moved.best.text == NULL && moved.nbest == NULL && moved.n_words == 0);
    asr_result_free(&moved); /* twice, and NULL */
    asr_result_free(NULL);
    /* every allocation of the copy failing in turn: NOMEM, *dst zeroed, nothing leaked (ASan) */
    alloc_fail_after(0);
    CHECK_OK(asr_result_copy(&dst, &src));
    long n = alloc_count();
    asr_result_free(&dst);
    CHECK(n > 5);
    for (long k = 1; k <= n; k++) {
        alloc_fail_after(k);
        int rc = asr_result_copy(&dst, &src);
        alloc_fail_reset();
        CHECKF(rc == HARK_ERR_NOMEM, "allocation %ld of %ld failing: %d", k, n, rc);
        CHECK(dst.best.text == NULL && dst.nbest == NULL && dst.words == NULL && dst.n_nbest == 0 &&
              dst.n_words == 0);
    }
}

/* ---- the registry --------------------------------------------------------------------------- */

static int t_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                  family_model_t **out, hark_err_t *err)
{
    return err_set(err, HARK_ERR_UNSUPPORTED, "test family");
}

static const family_t test_family = {
    .name = "test_family_x", .task = FAMILY_TASK_TTS, .load = t_load};

static void write_json(const char *dir, int version, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%d", dir, version);
    mkdir(dir, 0755);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%d/model.json", dir, version);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

TEST(family_registry)
{
    const family_t *w = family_find("wenet_u2");
    CHECK(w != NULL);
    CHECK_EQ_INT(w->task, FAMILY_TASK_ASR);
    CHECK(w->load && w->unload && w->info && w->parse_opts && w->batch_key && w->worker_create &&
          w->worker_destroy && w->execute && w->opts_size > 0);
    /* WeNet streams (stream_open), but is served offline for now (streaming = 0) */
    CHECK(!w->streaming && w->stream_open && w->stream_close);
    CHECK(family_find("nope") == NULL && family_find(NULL) == NULL);
    CHECK(family_find("test_family_x") == NULL);
    family_register_test(&test_family);
    family_register_test(&test_family); /* once only */
    CHECK(family_find("test_family_x") == &test_family);
    int n = 0, seen_w = 0, seen_t = 0;
    for (const family_t *const *f = family_list(); *f; f++, n++) {
        seen_w += *f == w;
        seen_t += *f == &test_family;
    }
    CHECK(seen_w == 1 && seen_t == 1 && n >= 2);

    char root[512], dir[600];
    snprintf(root, sizeof root, "%s", test_tmpdir(t));
    const family_t *f = NULL;
    hark_err_t err = {0};
    snprintf(dir, sizeof dir, "%s/old", root); /* no "family": a model converted before the key */
    write_json(dir, 1, "{\"encoder\": \"conformer\"}");
    CHECK_OK(family_of_dir(dir, 0, &f, &err));
    CHECK(f == w);
    snprintf(dir, sizeof dir, "%s/named", root);
    write_json(dir, 1, "{\"family\": \"wenet_u2\"}");
    write_json(dir, 2, "{\"family\": \"test_family_x\"}");
    f = NULL;
    CHECK_OK(family_of_dir(dir, 1, &f, &err));
    CHECK(f == w);
    CHECK_OK(family_of_dir(dir, 2, &f, &err));
    CHECK(f == &test_family);
    snprintf(dir, sizeof dir, "%s/unknown", root);
    write_json(dir, 1, "{\"family\": \"icefall_zipformer\"}");
    f = NULL;
    CHECK_EQ_INT(family_of_dir(dir, 1, &f, &err), HARK_ERR_NOT_FOUND);
    CHECKF(strstr(err.msg, "icefall_zipformer") && strstr(err.msg, "wenet_u2") &&
               strstr(err.msg, "model.json"),
           "%s", err.msg);
    CHECK(f == NULL);
    snprintf(dir, sizeof dir, "%s/badjson", root);
    write_json(dir, 1, "{\"family\": ");
    CHECK_EQ_INT(family_of_dir(dir, 1, &f, &err), HARK_ERR_FORMAT);
    snprintf(dir, sizeof dir, "%s/badtype", root);
    write_json(dir, 1, "{\"family\": 3}");
    CHECK_EQ_INT(family_of_dir(dir, 1, &f, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "\"family\""), "%s", err.msg);
    snprintf(dir, sizeof dir, "%s/absent", root);
    CHECK_EQ_INT(family_of_dir(dir, 1, &f, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "absent/1/model.json"), "%s", err.msg);
    CHECK(f == NULL);
}
