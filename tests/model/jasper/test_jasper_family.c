/* Tests for src/model/jasper/jasper_family.c through the family table: the registry entry, a bad
 * precision and (without a GPU) a GPU load refused, options, and execute on a batch (texts as DLE's, words,
 * frame ids, a bad item failing alone). */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "model/family.h"
#include "support/golden_jasper.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

TEST(jasper_family_execute)
{
    const family_t *f = family_find("jasper");
    CHECK(f && f->task == FAMILY_TASK_ASR && !f->streaming && f->io && f->io[0].audio &&
          !strcmp(f->io[0].audio, "AUDIO_SIGNAL") && f->io[0].out == FAMILY_OUT_FRAME_IDS);
    char why[512], dir[600];
    const char *d = golden_jasper_model_dir(why, sizeof why);
    if (!d)
        SKIP(why);
    snprintf(dir, sizeof dir, "%s/m", d);
    family_model_t *m = NULL;
    hark_err_t err = {0};
    family_load_opts_t gpu = {.device = 0};
    family_param_t pp = {"precision", "fp8"};
    family_params_t bad_prec = {&pp, 1};
    CHECK_EQ_INT(f->load(dir, &gpu, &bad_prec, &m, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "precision \"fp8\""));
    if (!test_have_gpu()) { /* a GPU load needs a device (test_jasper_gpu.c runs it on one) */
        CHECK(f->load(dir, &gpu, NULL, &m, &err) != HARK_OK);
        CHECK(m == NULL);
    }
    family_load_opts_t fp16 = {.device = -1, .precision = "fp16"};
    CHECK_EQ_INT(f->load(dir, &fp16, NULL, &m, &err), HARK_ERR_UNSUPPORTED);
    family_load_opts_t cpu = {.device = -1};
    CHECK_OK(f->load(dir, &cpu, NULL, &m, &err));
    family_info_t info;
    f->info(m, &info);
    CHECK_EQ_INT(info.sample_rate, 16000);
    CHECK_EQ_INT(info.frame_ms, 20);
    CHECK_EQ_INT(info.frame_pad_id, 28);
    /* options */
    char opts_all[64], opts_valid[64];
    CHECK(f->opts_size <= sizeof opts_all);
    family_param_t pv = {"ctc_frames", "valid"}, pb = {"ctc_frames", "nope"};
    family_params_t req_v = {&pv, 1}, req_b = {&pb, 1};
    CHECK_OK(f->parse_opts(m, NULL, NULL, opts_all, &err));
    CHECK_OK(f->parse_opts(m, NULL, &req_v, opts_valid, &err));
    CHECK(f->batch_key(opts_all) != f->batch_key(opts_valid));
    CHECK_EQ_INT(f->parse_opts(m, &req_b, NULL, opts_valid, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "config.pbtxt parameters ctc_frames"));
    /* a batch: utt1, a NaN item, utt3 */
    family_worker_t *w = NULL;
    family_worker_opts_t wo = {.max_batch = 4, .max_seconds = 12};
    CHECK_OK(f->worker_create(m, &wo, &w, &err));
    npy_array_t a1, a3;
    CHECK_OK(golden_jasper_npy(&a1, golden_jasper_utts[1], "waveform.npy"));
    CHECK_OK(golden_jasper_npy(&a3, golden_jasper_utts[3], "waveform.npy"));
    float bad[4000] = {0};
    bad[10] = NAN;
    got_t g[3];
    memset(g, 0, sizeof g);
    family_item_t it[3] = {
        {.opts = opts_all,
         .pcm = a1.data,
         .n = a1.count,
         .want_words = 1,
         .want_frame_ids = 1,
         .emit = on_emit,
         .user = &g[0]},
        {.opts = opts_all, .pcm = bad, .n = 4000, .emit = on_emit, .user = &g[1]},
        {.opts = opts_all, .pcm = a3.data, .n = a3.count, .emit = on_emit, .user = &g[2]},
    };
    family_item_t *items[3] = {&it[0], &it[1], &it[2]};
    CHECK_OK(f->execute(w, items, 3, NULL, &err));
    CHECK(g[0].n_done == 1 && g[1].n_done == 1 && g[2].n_done == 1);
    cJSON *r1 = golden_jasper_json(golden_jasper_utts[1], "result.json");
    cJSON *r3 = golden_jasper_json(golden_jasper_utts[3], "result.json");
    CHECK(r1 && r3);
    const char *t1 = cJSON_GetObjectItem(r1, "text_inference_py")->valuestring;
    const char *t3 = cJSON_GetObjectItem(r3, "text_inference_py")->valuestring;
    CHECK_OK(g[0].status);
    CHECKF(!strcmp(g[0].r.best.text, t1), "'%s' vs '%s'", g[0].r.best.text, t1);
    CHECK_EQ_INT(g[0].r.n_frames, cJSON_GetObjectItem(r1, "out_T")->valueint);
    CHECK(g[0].r.frame_ids != NULL && g[0].r.n_words > 5);
    /* the words are the text's space-separated runs, in order, with times that grow */
    char joined[1024] = "";
    for (int i = 0; i < g[0].r.n_words; i++) {
        strcat(joined, i ? " " : "");
        strcat(joined, g[0].r.words[i].text);
        CHECK(g[0].r.words[i].end_ms > g[0].r.words[i].start_ms);
        CHECK(i == 0 || g[0].r.words[i].start_ms >= g[0].r.words[i - 1].end_ms - 20);
    }
    char norm[1024]; /* the text with runs of spaces squeezed and trimmed */
    size_t k = 0;
    for (const char *s = t1; *s; s++)
        if (*s != ' ' || (k && norm[k - 1] != ' '))
            norm[k++] = *s;
    while (k && norm[k - 1] == ' ')
        k--;
    norm[k] = 0;
    CHECKF(!strcmp(joined, norm), "words '%s' vs '%s'", joined, norm);
    CHECK_EQ_INT(g[1].status, HARK_ERR_INVALID_ARG);
    CHECK(strstr(g[1].error, "NaN"));
    CHECK_OK(g[2].status);
    CHECK(!strcmp(g[2].r.best.text, t3));
    CHECK(g[2].r.frame_ids == NULL); /* not asked for */
    for (int i = 0; i < 3; i++)
        asr_result_free(&g[i].r);
    cJSON_Delete(r1);
    cJSON_Delete(r3);
    npy_free(&a1);
    npy_free(&a3);
    f->worker_destroy(w);
    f->unload(m);
}
