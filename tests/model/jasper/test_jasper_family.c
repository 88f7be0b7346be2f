/* Tests for src/model/jasper/jasper_family.c through the family table: the registry entry, a bad
 * precision and (without a GPU) a GPU load refused, options, and execute on a batch (texts as
 * DLE's, words, frame ids, a bad item failing alone). */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "model/family.h"
#include "model/jasper/jasper.h"
#include "model/jasper/jasper_tools.h"
#include "model/synth_weights.h"
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

/* `hark bench --synthetic`: DLE's full-width configs (built as its JasperEncoder builds the
 * panes), a model from generated weights, the family's bench hook and its argument errors */
TEST(jasper_bench_synthetic_configs)
{
    jasper_config_t c;
    CHECK_EQ_INT(jasper_synthetic_config("nope", &c), -1);
    CHECK_OK(jasper_synthetic_config("jasper10x5dr", &c));
    CHECK_EQ_INT(c.n_blocks, 13);
    CHECK_EQ_INT(c.pad_leading, 16);
    CHECK(c.blocks[0].stride == 2 && c.blocks[0].n_panes == 0 && !c.blocks[0].dense);
    /* block l of the ten dense ones has l panes: the input channels of every dense block so far */
    static const int want10[10] = {256, 256, 256, 384, 384, 512, 512, 640, 640, 768};
    CHECK_EQ_INT(c.blocks[10].n_panes, 10);
    for (int p = 0; p < 10; p++)
        CHECK_EQ_INT(c.blocks[10].pane_ch[p], want10[p]);
    CHECK(c.blocks[10].dense && c.blocks[11].dilation == 2 && c.blocks[11].kernel == 29);
    CHECK(c.blocks[12].filters == 1024 && c.blocks[12].kernel == 1);
    CHECK_OK(jasper_synthetic_config("quartznet15x5", &c));
    CHECK_EQ_INT(c.n_blocks, 18);
    CHECK_EQ_INT(c.pad_leading, 0);
    CHECK(c.blocks[1].n_panes == 1 && c.blocks[1].pane_ch[0] == 256 && !c.blocks[1].dense);
    CHECK(c.blocks[7].pane_ch[0] == 256 && c.blocks[7].filters == 512 && c.blocks[7].kernel == 51 &&
          c.blocks[7].separable);
    CHECK(c.blocks[16].kernel == 87 && c.blocks[16].dilation == 2 && c.blocks[16].separable);
    CHECK(!c.blocks[17].separable && c.blocks[17].filters == 1024);
    /* QuartzNet's 19M generated weights load (Jasper's 333M would be slow here) */
    synth_weights_t sw = {.seed = 1};
    jasper_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK_OK(jasper_create(&c, synth_weights_get, &sw, &m, &err));
    synth_weights_free(&sw);
    CHECK(m && jasper_vocab(m) == 29);
    CHECK(jasper_frames_out(m, jasper_frames_in(m, 16000)) == 56); /* 112 frames, stride 2 */
    jasper_destroy(m);
    const family_t *f = family_find("jasper");
    CHECK(f && f->bench && f->bench_synthetic && !strcmp(f->bench_synthetic[0], "jasper10x5dr"));
    char *bad[] = {"bench", "--synthetic", "nope", NULL};
    CHECK_EQ_INT(f->bench(3, bad), 2);
    char *badp[] = {"bench", "--synthetic", "quartznet15x5", "--precision", "fp8", NULL};
    CHECK_EQ_INT(f->bench(5, badp), 2);
}
