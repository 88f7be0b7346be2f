/* Tests for src/model/hifigan/ and tools/convert_hifigan.py against jik876/hifi-gan's goldens
 * (../shared/data/golden/tts/hifigan_v3 and hifigan_v3_real, README there): every stage of the
 * random-weight V3 generator on a 32-frame mel (conv_pre, ups, stage-0 resblocks, mrf, conv_post,
 * audio), the whole-clip audio, the vocoder's own mel of the real LJSpeech clip, and the real V3
 * weights resynthesising that clip; plus bad models and bad input.
 * Tolerance: FP32 CPU, max |diff| <= 1e-4 · max |golden| per stage (the README's deep-stack
 * figure); the mel 1e-4 absolute (docs/features.md's tts-mel bound). */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/hifigan/hifigan.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOL_REL 1e-4
#define TOL_MEL 1e-4

static const char *v3_model(char *why, size_t nwhy)
{
    return golden_tts_model("hifigan_v3", "convert_hifigan.py", "hifigan_v3/g_00000000",
                            "hifigan_v3/config.json", why, nwhy);
}

static const char *v3_real_model(char *why, size_t nwhy)
{
    return golden_tts_model("hifigan_v3_real", "convert_hifigan.py",
                            "hifigan_v3_real/generator_v3_ljspeech_wn_removed_fp16.pt",
                            "hifigan_v3/config.json", why, nwhy);
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* stage capture: compares each named stage with short/<name>.npy as it is produced */
typedef struct {
    int n_checked, n_bad;
    double worst;
    char first_bad[256];
} stages_t;

static void on_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stages_t *s = user;
    char rel[128];
    snprintf(rel, sizeof rel, "hifigan_v3/short/%s.npy", name);
    npy_array_t g = {0};
    if (golden_tts_npy(&g, rel) != HARK_OK)
        return;
    double rel_err = INFINITY;
    if (g.count == (size_t)rows * cols) {
        double d = test_max_abs_diff(data, g.data, g.count);
        rel_err = d / fmax(max_abs(g.data, g.count), 1e-30);
    }
    printf("    %-10s (%d, %d) max rel diff %.3g\n", name, rows, cols, rel_err);
    s->n_checked++;
    if (!(rel_err <= TOL_REL)) {
        if (!s->n_bad++)
            snprintf(s->first_bad, sizeof s->first_bad,
                     "%s: rel diff %.3g (golden %zu values, "
                     "got %d x %d)",
                     name, rel_err, g.count, rows, cols);
    }
    s->worst = fmax(s->worst, rel_err);
    npy_free(&g);
}

#define LOAD_MODEL(m, fn)                                                                          \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = fn(why_, sizeof why_);                                                  \
        if (!dir_) {                                                                               \
            if (!test_shared("golden/tts"))                                                        \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(hifigan_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                       \
    } while (0)

TEST(hifigan_v3_stages)
{
    hifigan_model_t *m = NULL;
    LOAD_MODEL(m, v3_model);
    npy_array_t mel = {0};
    CHECK(golden_tts_npy(&mel, "hifigan_v3/short/mel_input.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    CHECK(hifigan_samples(m, nf) == 8192);
    float *audio = hark_malloc(sizeof(float) * 8192);
    stages_t s = {0};
    hark_err_t err = {0};
    int rc = hifigan_forward(m, mel.data, nf, audio, on_stage, &s, &err);
    npy_array_t ga = {0};
    CHECK(golden_tts_npy(&ga, "hifigan_v3/short/audio.npy") == HARK_OK);
    double d = test_max_abs_diff(audio, ga.data, 8192) / max_abs(ga.data, 8192);
    printf("    audio      (1, 8192) max rel diff %.3g\n", d);
    hark_free(audio);
    npy_free(&ga);
    npy_free(&mel);
    hifigan_destroy(m);
    CHECKF(rc == HARK_OK, "forward: %s", err.msg);
    CHECKF(s.n_checked == 11, "%d stages checked", s.n_checked);
    CHECKF(s.n_bad == 0, "%d stages over %g: first %s", s.n_bad, TOL_REL, s.first_bad);
    CHECKF(d <= TOL_REL, "audio rel diff %g", d);
}

TEST(hifigan_v3_full_clip)
{
    hifigan_model_t *m = NULL;
    LOAD_MODEL(m, v3_model);
    npy_array_t mel = {0}, ga = {0};
    CHECK(golden_tts_npy(&mel, "hifigan_v3/mel/mel.npy") == HARK_OK);
    CHECK(golden_tts_npy(&ga, "hifigan_v3/full/audio.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    size_t n = hifigan_samples(m, nf);
    CHECK(n == ga.count);
    float *audio = hark_malloc(sizeof(float) * n);
    hark_err_t err = {0};
    int rc = hifigan_forward(m, mel.data, nf, audio, NULL, NULL, &err);
    double d = test_max_abs_diff(audio, ga.data, n) / max_abs(ga.data, n);
    printf("    full clip (%d frames -> %zu samples) max rel diff %.3g\n", nf, n, d);
    hark_free(audio);
    npy_free(&mel);
    npy_free(&ga);
    hifigan_destroy(m);
    CHECKF(rc == HARK_OK, "forward: %s", err.msg);
    CHECKF(d <= TOL_REL, "rel diff %g", d);
}

/* The real V3 vocoder: hark's mel of the real clip == the golden mel, and the generator on that
 * mel == the golden resynthesis. */
TEST(hifigan_v3_real_resynthesis)
{
    hifigan_model_t *m = NULL;
    LOAD_MODEL(m, v3_real_model);
    const char *wav = test_shared("audio/lj22k/LJ001-0002.wav");
    if (!wav) {
        hifigan_destroy(m);
        SKIP("../shared/data/audio/lj22k is absent");
    }
    audio_t a = {0};
    hark_err_t err = {0};
    int rc = audio_decode_file(wav, NULL, &a, &err);
    float *mel = NULL, *audio = NULL;
    int nf = 0;
    npy_array_t gm = {0}, ga = {0};
    if (!rc)
        rc = hifigan_mel(m, a.samples, a.n, &mel, &nf, &err);
    double dm = INFINITY, da = INFINITY, da_own = INFINITY;
    if (!rc && golden_tts_npy(&gm, "hifigan_v3_real/mel_input.npy") == HARK_OK &&
        golden_tts_npy(&ga, "hifigan_v3_real/audio.npy") == HARK_OK &&
        gm.count == (size_t)80 * nf) {
        dm = test_max_abs_diff(mel, gm.data, gm.count);
        size_t n = hifigan_samples(m, nf);
        audio = hark_malloc(sizeof(float) * n);
        if (n == ga.count && !(rc = hifigan_forward(m, gm.data, nf, audio, NULL, NULL, &err))) {
            da = test_max_abs_diff(audio, ga.data, n) / max_abs(ga.data, n);
            if (!(rc = hifigan_forward(m, mel, nf, audio, NULL, NULL, &err)))
                da_own = test_max_abs_diff(audio, ga.data, n) / max_abs(ga.data, n);
        }
    }
    printf("    real clip: %zu samples, %d frames; mel max abs diff %.3g; audio from the golden "
           "mel max rel diff %.3g, from hark's mel %.3g\n",
           a.n, nf, dm, da, da_own);
    hark_free(mel);
    hark_free(audio);
    npy_free(&gm);
    npy_free(&ga);
    audio_free(&a);
    hifigan_destroy(m);
    CHECKF(rc == HARK_OK, "%s", err.msg);
    CHECKF(dm <= TOL_MEL, "mel diff %g", dm);
    CHECKF(da <= TOL_REL, "audio rel diff %g", da);
    /* hark's mel differs from torch's by float rounding only; through the whole generator that
     * stays well under 1e-3 of the peak */
    CHECKF(da_own <= 1e-3, "audio from hark's own mel: rel diff %g", da_own);
}

TEST(hifigan_bad_input)
{
    hifigan_model_t *m = NULL;
    LOAD_MODEL(m, v3_model);
    float mel[80 * 4];
    for (int i = 0; i < 80 * 4; i++)
        mel[i] = -5.0f;
    float audio[4 * 256];
    hark_err_t err = {0};
    int rc0 = hifigan_forward(m, mel, 0, audio, NULL, NULL, &err);
    mel[77] = NAN;
    int rc1 = hifigan_forward(m, mel, 4, audio, NULL, NULL, &err);
    char msg[sizeof err.msg];
    memcpy(msg, err.msg, sizeof msg);
    float x[100] = {0};
    float *out = NULL;
    int nf = 0;
    int rc2 = hifigan_mel(m, x, 100, &out, &nf, &err);
    hifigan_destroy(m);
    CHECK(rc0 == HARK_ERR_INVALID_ARG);
    CHECKF(rc1 == HARK_ERR_INVALID_ARG && strstr(msg, "NaN"), "%d %s", rc1, msg);
    CHECK(rc2 == HARK_ERR_INVALID_ARG && out == NULL);
}

/* A model directory whose files are broken: clear errors, no crash. */
TEST(hifigan_bad_model)
{
    char why[512];
    const char *dir = v3_model(why, sizeof why);
    if (!dir) {
        if (!test_shared("golden/tts"))
            SKIP(why);
        CHECKF(0, "conversion: %s", why);
    }
    const char *tmp = test_tmpdir(t);
    char path[1024], cmd[3000];
    hifigan_model_t *m = NULL;
    hark_err_t err = {0};
    /* missing directory */
    snprintf(path, sizeof path, "%s/none", tmp);
    CHECK(hifigan_load(path, 1, &m, &err) == HARK_ERR_IO && !m);
    /* truncated safetensors */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/trunc/1' && cp '%s/m/1/model.json' '%s/trunc/1/' && head -c 5000 "
             "'%s/m/1/model.safetensors' > '%s/trunc/1/model.safetensors'",
             tmp, dir, tmp, dir, tmp);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/trunc", tmp);
    CHECK(hifigan_load(path, 1, &m, &err) == HARK_ERR_FORMAT && !m);
    /* a model.json that does not describe the weights (another channel count) */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/shape/1' && cp '%s/m/1/model.safetensors' '%s/shape/1/' && sed "
             "'s/\"upsample_initial_channel\": 256/\"upsample_initial_channel\": 128/' "
             "'%s/m/1/model.json' > '%s/shape/1/model.json'",
             tmp, dir, tmp, dir, tmp);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/shape", tmp);
    err.msg[0] = 0;
    CHECK(hifigan_load(path, 1, &m, &err) == HARK_ERR_FORMAT && !m);
    CHECKF(strstr(err.msg, "conv_pre.weight"), "%s", err.msg);
    /* the converter refuses a config that does not fit the checkpoint */
    const char *g = test_shared("golden/tts/hifigan_v3");
    snprintf(cmd, sizeof cmd,
             "sed 's/\"upsample_initial_channel\": 256/\"upsample_initial_channel\": 512/' "
             "'%s/config.json' > '%s/c.json' && /usr/bin/python3 tools/convert_hifigan.py "
             "--checkpoint '%s/g_00000000' --config '%s/c.json' --output '%s/x' > '%s/log' 2>&1",
             g, tmp, g, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -q 'expected shape' '%s/log'", tmp);
    CHECK(system(cmd) == 0);
    /* and a file that is not a checkpoint */
    snprintf(cmd, sizeof cmd,
             "echo garbage > '%s/bad.pt' && /usr/bin/python3 tools/convert_hifigan.py "
             "--checkpoint '%s/bad.pt' --config '%s/config.json' --output '%s/y' > '%s/log2' 2>&1",
             tmp, tmp, g, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -q 'cannot load checkpoint' '%s/log2'", tmp);
    CHECK(system(cmd) == 0);
}
