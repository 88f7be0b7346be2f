/* Tests for src/model/silero/silero_family.c: the registry finds "silero_vad" (task VAD) from a
 * converted model's directory; one execute over items with different options reports, per item,
 * exactly the segments silero_vad_probs + silero_segments give (as FAMILY_EV_SEGMENT events in
 * seconds) and one DONE; empty audio gives no segment; options are parsed and refused by name;
 * GPU and fp16 loads are refused. Uses the real model (../shared/data/models/silero-vad). */
#include "test.h"

#include "audio/audio.h"
#include "hark.h"
#include "model/family.h"
#include "model/silero/silero_vad.h"
#include "support/golden_silero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double seg[64][2];
    int n_seg, n_done, status, order_ok;
} got_t;

static void emit(family_item_t *it, const family_event_t *ev)
{
    got_t *g = it->user;
    if (ev->kind == FAMILY_EV_SEGMENT) {
        if (g->n_done)
            g->order_ok = 0;
        if (g->n_seg < 64) {
            g->seg[g->n_seg][0] = ev->seg_start_s;
            g->seg[g->n_seg][1] = ev->seg_end_s;
        }
        g->n_seg++;
    } else if (ev->kind == FAMILY_EV_DONE) {
        g->n_done++;
        g->status = ev->status;
    } else {
        g->order_ok = 0;
    }
}

static float *load(const char *name, size_t *n)
{
    char rel[300];
    snprintf(rel, sizeof rel, "audio/en/wav/%s", name);
    audio_t a = {0};
    if (!test_shared(rel) ||
        audio_decode_file(test_shared(rel), &(audio_opts_t){.target_rate = 16000}, &a, NULL))
        return NULL;
    float *x = malloc((a.n + 1) * sizeof *x);
    memcpy(x, a.samples, a.n * sizeof *x);
    *n = a.n;
    audio_free(&a);
    return x;
}

TEST(silero_family_execute)
{
    char why[600];
    const char *dir = golden_silero_model(why, sizeof why);
    if (!dir)
        SKIP(why);
    const family_t *f = NULL;
    hark_err_t err = {0};
    CHECK_OK(family_of_dir(dir, 1, &f, &err));
    CHECK(f == family_find("silero_vad"));
    CHECK_EQ_INT(f->task, FAMILY_TASK_VAD);
    CHECK(!strcmp(family_task_name(f->task), "vad"));

    family_model_t *fm = NULL;
    family_load_opts_t lo = {.device = -1};
    CHECK_OK(f->load(dir, &lo, NULL, &fm, &err));
    family_info_t info;
    f->info(fm, &info);
    CHECK_EQ_INT(info.sample_rate, 16000);
    CHECK_EQ_INT(info.frame_ms, 32);
    CHECK(strstr(info.kind, "8000") != NULL);

    /* item 0: defaults; item 1: config threshold 0.8 and a 1 s split from the request; item 2
     * empty */
    family_param_t cfg_p[] = {{"threshold", "0.8"}};
    family_param_t req_p[] = {{"max_speech_duration_s", "1"}, {"speech_pad_ms", "10"}};
    family_params_t cfg = {cfg_p, 1}, req = {req_p, 2};
    silero_seg_opts_t o[3];
    CHECK_OK(f->parse_opts(fm, NULL, NULL, &o[0], &err));
    CHECK_OK(f->parse_opts(fm, &cfg, &req, &o[1], &err));
    CHECK(o[1].threshold == 0.8 && o[1].max_speech_duration_s == 1.0 && o[1].speech_pad_ms == 10);
    CHECK_OK(f->parse_opts(fm, NULL, NULL, &o[2], &err));
    CHECK(f->batch_key(&o[0]) == f->batch_key(&o[1]));

    size_t n[3] = {0, 0, 0};
    float *pcm[3] = {load("jfk.wav", &n[0]), load("lj-LJ001-0001.wav", &n[1]), NULL};
    CHECK(pcm[0] && pcm[1]);
    family_worker_t *w = NULL;
    family_worker_opts_t wo = {.max_batch = 8, .max_seconds = 30};
    CHECK_OK(f->worker_create(fm, &wo, &w, &err));
    got_t got[3];
    family_item_t it[3];
    family_item_t *items[3];
    for (int i = 0; i < 3; i++) {
        memset(&got[i], 0, sizeof got[i]);
        got[i].order_ok = 1;
        it[i] =
            (family_item_t){.opts = &o[i], .pcm = pcm[i], .n = n[i], .emit = emit, .user = &got[i]};
        items[i] = &it[i];
    }
    family_exec_times_t times;
    CHECK_OK(f->execute(w, items, 3, &times, &err));

    /* the same through the engine's functions */
    silero_vad_t *m = NULL;
    CHECK_OK(silero_vad_load(dir, 1, &m, &err));
    const silero_rate_t *r = silero_vad_rate(m, 16000);
    int ok = 1;
    char msg[400] = "";
    for (int i = 0; i < 3 && ok; i++) {
        size_t nw = silero_vad_n_windows(r, n[i]);
        float *p = malloc((nw + 1) * sizeof *p);
        const float *x[1] = {pcm[i]};
        silero_segment_t *s = NULL;
        size_t ns = 0;
        ok = silero_vad_probs(m, 16000, x, &n[i], 1, 0, &p, &err) == HARK_OK &&
             silero_segments(p, nw, n[i], 16000, r->window, &o[i], &s, &ns, &err) == HARK_OK;
        ok = ok && got[i].n_done == 1 && got[i].status == HARK_OK && got[i].order_ok &&
             got[i].n_seg == (int)ns;
        for (size_t k = 0; ok && k < ns; k++)
            ok = got[i].seg[k][0] == (double)s[k].start / 16000 &&
                 got[i].seg[k][1] == (double)s[k].end / 16000;
        if (!ok)
            snprintf(msg, sizeof msg, "item %d: %d segments and %d DONE, expected %zu", i,
                     got[i].n_seg, got[i].n_done, ns);
        free(s);
        free(p);
    }
    printf("  segments: %d (defaults), %d (threshold 0.8, 1 s split), %d (empty)\n", got[0].n_seg,
           got[1].n_seg, got[2].n_seg);
    silero_vad_destroy(m);
    f->worker_destroy(w);
    f->unload(fm);
    free(pcm[0]);
    free(pcm[1]);
    CHECKF(ok, "%s", msg);
    CHECK(got[0].n_seg >= 2 && got[1].n_seg > got[0].n_seg && got[2].n_seg == 0);
}

TEST(silero_family_refuses)
{
    char why[600];
    const char *dir = golden_silero_model(why, sizeof why);
    if (!dir)
        SKIP(why);
    const family_t *f = family_find("silero_vad");
    CHECK(f != NULL);
    family_model_t *fm = NULL;
    hark_err_t err = {0};
    family_load_opts_t gpu = {.device = 0};
    CHECK_EQ_INT(f->load(dir, &gpu, NULL, &fm, &err), HARK_ERR_UNSUPPORTED);
    family_load_opts_t fp16 = {.device = -1, .precision = "fp16"};
    CHECK_EQ_INT(f->load(dir, &fp16, NULL, &fm, &err), HARK_ERR_UNSUPPORTED);
    family_load_opts_t lo = {.device = -1};
    CHECK_OK(f->load(dir, &lo, NULL, &fm, &err));
    silero_seg_opts_t o;
    const char *bad[][2] = {{"threshold", "1.5"},
                            {"threshold", "abc"},
                            {"min_silence_duration_ms", "-3"},
                            {"max_speech_duration_s", "0"},
                            {"neg_threshold", "2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        family_param_t p[] = {{bad[i][0], bad[i][1]}};
        family_params_t req = {p, 1};
        err.msg[0] = 0;
        int rc = f->parse_opts(fm, NULL, &req, &o, &err);
        if (rc != HARK_ERR_INVALID_ARG || !strstr(err.msg, bad[i][0])) {
            f->unload(fm);
            CHECKF(0, "%s=%s: status %d, message '%s'", bad[i][0], bad[i][1], rc, err.msg);
        }
    }
    f->unload(fm);
}
