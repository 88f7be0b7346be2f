/* Tests for src/model/tacotron2/tacotron2_family.c: a Tacotron 2 model naming a WaveGlow vocoder
 * in config.pbtxt loads through the public C API (hark.h) as a "tts" model and synthesises
 * reproducibly; one execute of several items (a batch decoded together, each row stopping on
 * its own gate) gives each item what it gets alone; the options and error paths. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "support/golden_model.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tmp/repo/{t2,wg}; with_vocoder 0 leaves the parameter out */
static int make_repo(test_ctx_t *t, int with_vocoder, char *t2dir, char *why, size_t nwhy)
{
    const char *d1 = golden_tts_checkpoint("tacotron2", "convert_tacotron2.py",
                                           "tacotron2/checkpoint_Tacotron2_0.pt", why, nwhy);
    const char *d2 = d1 ? golden_tts_checkpoint("waveglow", "convert_waveglow.py",
                                                "waveglow/checkpoint_WaveGlow_0.pt", why, nwhy)
                        : NULL;
    if (!d1 || !d2)
        return -1;
    const char *tmp = test_tmpdir(t);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s/repo' && mkdir -p '%s/repo/t2' && cp -r '%s/m/1' '%s/repo/t2/' && "
             "ln -s '%s/m' '%s/repo/wg' && sed 's/^name: .*/name: \"t2\"/' '%s/m/config.pbtxt' "
             "> '%s/repo/t2/config.pbtxt' && sed -i 's/\"max_decoder_steps\": 40/"
             "\"max_decoder_steps\": 30/' '%s/repo/t2/1/model.json'",
             tmp, tmp, d1, tmp, d2, tmp, d1, tmp, tmp);
    if (system(cmd) != 0)
        return snprintf(why, nwhy, "cannot build the repository"), -1;
    if (with_vocoder) {
        snprintf(cmd, sizeof cmd,
                 "echo 'parameters { key: \"vocoder\" value { string_value: \"wg\" } }' >> "
                 "'%s/repo/t2/config.pbtxt'",
                 tmp);
        if (system(cmd) != 0)
            return snprintf(why, nwhy, "cannot write config.pbtxt"), -1;
    }
    snprintf(t2dir, 600, "%s/repo/t2", tmp);
    return 0;
}

#define NEED_REPO(with)                                                                            \
    char t2dir[600];                                                                               \
    do {                                                                                           \
        char why_[512] = "";                                                                       \
        if (!test_shared(GOLDEN_TTS))                                                              \
            SKIP("../shared/data/golden/tts is absent");                                           \
        if (make_repo(t, with, t2dir, why_, sizeof why_) != 0) {                                   \
            if (strstr(why_, "python3"))                                                           \
                SKIP(why_);                                                                        \
            CHECKF(0, "%s", why_);                                                                 \
        }                                                                                          \
    } while (0)

TEST(tacotron2_family_synthesize)
{
    NEED_REPO(1);
    hark_model_t *m = NULL;
    CHECKF(hark_model_load(t2dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    int task_ok = !strcmp(hark_model_task(m), "tts") &&
                  !strcmp(hark_model_family(m), "tacotron2") && hark_model_sample_rate(m) == 22050;
    float *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int rate = 0;
    hark_status_t s1 = hark_synthesize(m, "Hello there.", NULL, &a, &na, &rate);
    hark_status_t s2 = hark_synthesize(m, "Hello there.", NULL, &b, &nb, &rate);
    double d = s1 == HARK_OK && s2 == HARK_OK && na == nb ? test_max_abs_diff(a, b, na) : 1;
    float peak = 0;
    for (size_t i = 0; s1 == HARK_OK && i < na; i++)
        peak = fmaxf(peak, fabsf(a[i]));
    hark_pcm_free(a);
    hark_pcm_free(b);
    hark_tts_opts_t o = {NULL, 1.3};
    hark_status_t s3 = hark_synthesize(m, "Hello there.", &o, &a, &na, &rate);
    int s3_msg = strstr(hark_last_error(), "speed") != NULL;
    hark_model_destroy(m);
    CHECK(task_ok);
    CHECKF(s1 == HARK_OK, "%s", hark_last_error());
    printf("    %zu samples (30 steps: gate never fires), peak %.4f, rerun diff %g\n", nb, peak, d);
    CHECK(nb == 30 * 256 && rate == 22050);
    CHECK(d == 0);
    CHECK(peak > 0.99f && peak <= 1.0f);
    CHECK(s3 == HARK_ERR_UNSUPPORTED && s3_msg);
}

typedef struct {
    float *pcm; /* every AUDIO event's samples, joined */
    size_t n;
    int status, done, events;
} slot_t;

static void on_emit(family_item_t *it, const family_event_t *ev)
{
    slot_t *s = it->user;
    if (ev->kind == FAMILY_EV_AUDIO) {
        float *p = realloc(s->pcm, sizeof(float) * (s->n + ev->n));
        if (!p)
            return;
        memcpy(p + s->n, ev->pcm, sizeof(float) * ev->n);
        s->pcm = p;
        s->n += ev->n;
        s->events++;
    } else if (ev->kind == FAMILY_EV_DONE) {
        s->status = ev->status;
        s->done++;
    }
}

/* items 0..n-1 of texts/seeds (and sigma, when not NULL) through one execute */
static int run_items_sigma(const family_t *f, family_worker_t *w, const family_model_t *fm,
                           const char *const *texts, const char *const *seeds, const char *sigma,
                           int n, slot_t *slots)
{
    family_item_t it[4];
    family_item_t *ip[4];
    char opts[4][64];
    hark_err_t err = {0};
    for (int i = 0; i < n; i++) {
        family_param_t p[2] = {{"seed", seeds[i]}, {"sigma", sigma}};
        family_params_t req = {p, sigma ? 2 : 1};
        if (f->parse_opts(fm, NULL, &req, opts[i], &err))
            return -1;
        it[i] =
            (family_item_t){.opts = opts[i], .text = texts[i], .emit = on_emit, .user = &slots[i]};
        ip[i] = &it[i];
    }
    return f->execute(w, ip, n, NULL, &err);
}

static int run_items(const family_t *f, family_worker_t *w, const family_model_t *fm,
                     const char *const *texts, const char *const *seeds, int n, slot_t *slots)
{
    return run_items_sigma(f, w, fm, texts, seeds, NULL, n, slots);
}

/* vocoder_chunk_frames: the audio leaves in several AUDIO events; at sigma 0 (no noise) with the
 * default context the chunks join into the one-piece audio (which is peak-normalised: compared
 * after normalising the joined chunks alike), on the CPU (device -1) or a GPU */
static void streams_chunks(test_ctx_t *t, const char *t2dir, int device, int batch)
{
    const family_t *f = family_find("tacotron2");
    family_param_t cp[2] = {{"vocoder", "wg"}, {"vocoder_chunk_frames", "8"}};
    const char *texts[2] = {"Hello there.", "A second, longer sentence of the batch."};
    const char *seeds[2] = {"3", "4"};
    slot_t whole[2] = {{0}}, parts[2] = {{0}};
    family_worker_opts_t wo = {.max_batch = 2};
    family_load_opts_t lo = {.device = device, .precision = device >= 0 ? "fp32" : NULL};
    for (int k = 0; k < 2; k++) {
        family_params_t cfg = {cp, k ? 2 : 1};
        family_model_t *fm = NULL;
        family_worker_t *w = NULL;
        hark_err_t err = {0};
        CHECKF(f->load(t2dir, &lo, &cfg, &fm, &err) == HARK_OK, "%s", err.msg);
        CHECKF(f->worker_create(fm, &wo, &w, &err) == HARK_OK, "%s", err.msg);
        int rc = run_items_sigma(f, w, fm, texts, seeds, "0", batch, k ? parts : whole);
        f->worker_destroy(w);
        f->unload(fm);
        CHECK(rc == HARK_OK);
    }
    double worst = 0;
    int ok = 1;
    for (int i = 0; i < batch; i++) {
        float peak = 0;
        for (size_t q = 0; q < parts[i].n; q++)
            peak = fmaxf(peak, fabsf(parts[i].pcm[q]));
        for (size_t q = 0; q < parts[i].n && peak > 0; q++)
            parts[i].pcm[q] /= peak;
        printf("    device %d row %d: %d events, %zu vs %zu samples\n", device, i, parts[i].events,
               parts[i].n, whole[i].n);
        ok &= whole[i].events == 1 && parts[i].events >= 3 && parts[i].n == whole[i].n &&
              parts[i].status == HARK_OK;
        if (parts[i].n == whole[i].n && whole[i].n)
            worst = fmax(worst, test_max_abs_diff(parts[i].pcm, whole[i].pcm, whole[i].n));
        free(whole[i].pcm);
        free(parts[i].pcm);
    }
    printf("    joined chunks vs one piece: max abs diff %.3g\n", worst);
    CHECK(ok);
    CHECKF(worst <= 1e-5, "%.3g", worst);
}

TEST(tacotron2_family_batch_equals_single)
{
    NEED_REPO(1);
    const family_t *f = family_find("tacotron2");
    CHECK(f != NULL && f->task == FAMILY_TASK_TTS && f->opts_size <= 64);
    family_model_t *fm = NULL;
    family_worker_t *w = NULL;
    hark_err_t err = {0};
    family_param_t cp = {"vocoder", "wg"};
    family_params_t cfg = {&cp, 1};
    CHECKF(f->load(t2dir, NULL, &cfg, &fm, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(f->worker_create(fm, NULL, &w, &err));
    const char *texts[3] = {"Hello there.", "  ...  ", "A rather longer sentence, with a comma."};
    const char *seeds[3] = {"3", "4", "5"};
    slot_t batch[3] = {{0}}, single[3] = {{0}};
    int rc = run_items(f, w, fm, texts, seeds, 3, batch);
    for (int i = 0; i < 3; i++)
        rc |= run_items(f, w, fm, &texts[i], &seeds[i], 1, &single[i]) > 0 && i != 1;
    double d = 0;
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        ok &= batch[i].done == 1 && single[i].done == 1;
        if (i != 1 && batch[i].n == single[i].n && batch[i].pcm)
            d = fmax(d, test_max_abs_diff(batch[i].pcm, single[i].pcm, batch[i].n));
        else if (i != 1)
            ok = 0;
    }
    int bad_text = batch[1].status == HARK_ERR_INVALID_ARG && !batch[1].pcm;
    for (int i = 0; i < 3; i++) {
        free(batch[i].pcm);
        free(single[i].pcm);
    }
    f->worker_destroy(w);
    f->unload(fm);
    CHECK(rc == HARK_OK);
    CHECK(ok);
    CHECK(bad_text); /* one item's bad text fails that item only */
    printf("    batch vs single max abs diff %.3g\n", d);
    CHECK(d <= 1e-4);
}

TEST(tacotron2_family_errors)
{
    NEED_REPO(0);
    hark_model_t *m = NULL;
    CHECK(hark_model_load(t2dir, NULL, &m) == HARK_ERR_INVALID_ARG && !m);
    CHECKF(strstr(hark_last_error(), "vocoder"), "%s", hark_last_error());
    const family_t *f = family_find("tacotron2");
    char opts[64];
    hark_err_t err = {0};
    family_param_t bad[3] = {{"sigma", "-1"}, {"seed", "1.5"}, {"use_denoiser", "maybe"}};
    for (int i = 0; i < 3; i++) {
        family_params_t req = {&bad[i], 1};
        CHECK(f->parse_opts(NULL, NULL, &req, opts, &err) == HARK_ERR_INVALID_ARG);
    }
    family_param_t good[2] = {{"use_denoiser", "false"}, {"sigma", "0.5"}};
    family_params_t req = {good, 2};
    CHECK_OK(f->parse_opts(NULL, NULL, &req, opts, &err));
    family_model_t *fm = NULL;
    family_param_t cp = {"vocoder", "wg"};
    family_params_t cfg = {&cp, 1};
    family_load_opts_t lo = {.device = -1, .precision = "fp16"}; /* the CPU path is fp32 */
    CHECK(f->load(t2dir, &lo, &cfg, &fm, &err) == HARK_ERR_UNSUPPORTED && !fm);
    lo.precision = "int8";
    CHECK(f->load(t2dir, &lo, &cfg, &fm, &err) == HARK_ERR_INVALID_ARG && !fm);
    CHECKF(strstr(err.msg, "int8"), "%s", err.msg);
    if (!test_have_gpu()) { /* a GPU load fails cleanly without a device */
        lo = (family_load_opts_t){.device = 0};
        CHECK(f->load(t2dir, &lo, &cfg, &fm, &err) != HARK_OK && !fm);
    }
}

/* On the GPU (both precisions): one execute of three items (one bad) gives each good item the
 * CPU family's audio (FP32: within 1e-3 of the peak-normalised samples; FP16: the same lengths,
 * finite, within 0.1) and the bad one its own error. */
GPU_TEST(tacotron2_family_gpu_matches_cpu)
{
    NEED_REPO(1);
    const family_t *f = family_find("tacotron2");
    family_param_t cp = {"vocoder", "wg"};
    family_params_t cfg = {&cp, 1};
    hark_err_t err = {0};
    const char *texts[3] = {"Hello there.", "  ...  ", "A rather longer sentence, with a comma."};
    const char *seeds[3] = {"3", "4", "5"};
    family_worker_opts_t wo = {.max_batch = 3};
    slot_t ref[3] = {{0}};
    family_model_t *fm = NULL;
    family_worker_t *w = NULL;
    CHECKF(f->load(t2dir, NULL, &cfg, &fm, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(f->worker_create(fm, &wo, &w, &err));
    int rc = run_items(f, w, fm, texts, seeds, 3, ref);
    f->worker_destroy(w);
    f->unload(fm);
    CHECK(rc == HARK_OK && ref[0].pcm && ref[2].pcm);
    const char *prec[2] = {"fp32", "fp16"};
    const double bound[2] = {1e-3, 0.1};
    for (int p = 0; p < 2; p++) {
        family_load_opts_t lo = {.device = 0, .precision = prec[p]};
        slot_t got[3] = {{0}};
        fm = NULL;
        w = NULL;
        CHECKF(f->load(t2dir, &lo, &cfg, &fm, &err) == HARK_OK, "%s", err.msg);
        family_info_t info;
        f->info(fm, &info);
        CHECK(info.device == 0);
        CHECKF(f->worker_create(fm, &wo, &w, &err) == HARK_OK, "%s", err.msg);
        rc = run_items(f, w, fm, texts, seeds, 3, got);
        double d = 0;
        int ok = rc == HARK_OK && got[1].status == HARK_ERR_INVALID_ARG && !got[1].pcm;
        for (int i = 0; i < 3; i += 2) {
            ok &= got[i].done == 1 && got[i].status == HARK_OK && got[i].n == ref[i].n;
            if (got[i].pcm && got[i].n == ref[i].n)
                d = fmax(d, test_max_abs_diff(got[i].pcm, ref[i].pcm, ref[i].n));
        }
        for (int i = 0; i < 3; i++)
            free(got[i].pcm);
        f->worker_destroy(w);
        f->unload(fm);
        printf("    %s: GPU vs CPU max abs diff %.3g (bound %.3g)\n", prec[p], d, bound[p]);
        CHECK(ok);
        CHECKF(d <= bound[p], "%s: %.3g", prec[p], d);
    }
    for (int i = 0; i < 3; i++)
        free(ref[i].pcm);
}

TEST(tacotron2_family_streams_chunks)
{
    NEED_REPO(0);
    streams_chunks(t, t2dir, -1, 1);
}

GPU_TEST(tacotron2_family_gpu_streams_chunks)
{
    NEED_REPO(0);
    streams_chunks(t, t2dir, 0, 2);
}
