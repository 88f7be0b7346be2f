/* Tests for src/model/waveglow/ and tools/convert_waveglow.py against DLE WaveGlow's goldens
 * (../shared/data/golden/tts/waveglow, README there): the converter's prepared weights (weight
 * norm removed, the 1x1 inverses), the upsampler, every flow's WN input / output and its state
 * after the inverse 1x1 convolution, the audio with the recorded noise (sigma 0.9), the
 * denoiser's bias spectrum (computed at load) and the denoised audio at strengths 0.01 and 0.1;
 * the seeded noise; bad model files and input.
 * Tolerance: max |diff| <= 1e-4 · max |golden| per stage. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/safetensors.h"
#include "model/waveglow/waveglow.h"
#include "support/golden_model.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOL_REL 1e-4

static const char *wg_model_dir(char *why, size_t nwhy)
{
    return golden_tts_checkpoint("waveglow", "convert_waveglow.py",
                                 "waveglow/checkpoint_WaveGlow_0.pt", why, nwhy);
}

#define MODEL_DIR(p)                                                                               \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = wg_model_dir(why_, sizeof why_);                                        \
        if (!dir_) {                                                                               \
            if (!test_shared(GOLDEN_TTS) || strstr(why_, "python3"))                               \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        snprintf(p, sizeof p, "%s/m", dir_);                                                       \
    } while (0)

#define LOAD_MODEL(m)                                                                              \
    do {                                                                                           \
        char p_[600];                                                                              \
        MODEL_DIR(p_);                                                                             \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(waveglow_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                      \
    } while (0)

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* rel diff of a (n) against golden/tts/waveglow/<file> (its first n values when prefix). */
static double rel_to_golden(const float *a, size_t n, const char *file, int prefix)
{
    char rel[160];
    snprintf(rel, sizeof rel, "waveglow/%s", file);
    npy_array_t g = {0};
    if (golden_tts_npy(&g, rel) != HARK_OK)
        return INFINITY;
    double e = INFINITY;
    if (g.count == n || (prefix && g.count >= n))
        e = test_max_abs_diff(a, g.data, n) / fmax(max_abs(g.data, n), 1e-30);
    npy_free(&g);
    return e;
}

TEST(waveglow_converter_prepared_weights)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    char p[600];
    MODEL_DIR(p);
    char st_path[700];
    snprintf(st_path, sizeof st_path, "%s/1/model.safetensors", p);
    safetensors_t *st = NULL;
    hark_err_t err = {0};
    CHECK_OK(st_open(st_path, &st, &err));
    const float *w;
    int64_t sh[3] = {128, 64, 3};
    int rc = st_get_f32(st, "WN.0.in_layers.0.weight", 3, sh, &w, &err);
    double e = rc ? INFINITY
                  : rel_to_golden(w, 128 * 64 * 3, "flow0_WN_in_layer0_weight_effective.npy", 0);
    double ei = 0;
    for (int k = 0; k < 4 && !rc; k++) {
        int ch = k < 2 ? 8 : 6;
        char name[64], file[64];
        snprintf(name, sizeof name, "convinv.%d.W_inverse", k);
        snprintf(file, sizeof file, "convinv%d_W_inverse.npy", k);
        int64_t s2[2] = {ch, ch};
        rc = st_get_f32(st, name, 2, s2, &w, &err);
        if (!rc)
            ei = fmax(ei, rel_to_golden(w, (size_t)ch * ch, file, 0));
    }
    st_close(st);
    CHECKF(rc == HARK_OK, "%s", err.msg);
    printf("    weight norm removed: rel diff %.3g; W_inverse (torch LU here vs there): %.3g\n", e,
           ei);
    CHECK(e <= 1e-6);
    CHECK(ei <= TOL_REL);
}

typedef struct {
    npy_array_t z[2];
} noise_t;

static void on_noise(void *user, int draw, float *z, int channels, int len)
{
    noise_t *nz = user;
    const npy_array_t *a = &nz->z[draw < 2 ? draw : 1];
    if (draw < 2 && a->count == (size_t)channels * len)
        memcpy(z, a->data, sizeof(float) * a->count);
    else
        memset(z, 0, sizeof(float) * (size_t)channels * len);
}

typedef struct {
    int n_checked, n_bad;
    char first_bad[300];
} stages_t;

static void on_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stages_t *s = user;
    char file[96];
    double e;
    if (!strcmp(name, "upsampled")) { /* the golden holds the first 3072 samples of each row */
        npy_array_t g = {0};
        e = INFINITY;
        if (golden_tts_npy(&g, "waveglow/upsampled_spect_first3072.npy") == HARK_OK &&
            g.count == (size_t)rows * 3072 && cols >= 3072) {
            double d = 0;
            for (int r = 0; r < rows; r++)
                d = fmax(d, test_max_abs_diff(data + (size_t)r * cols,
                                              (const float *)g.data + (size_t)r * 3072, 3072));
            e = d / max_abs(g.data, g.count);
        }
        npy_free(&g);
    } else {
        snprintf(file, sizeof file, "%s.npy", name);
        e = rel_to_golden(data, (size_t)rows * cols, file, 0);
    }
    printf("    %-24s (%d, %d) max rel diff %.3g\n", name, rows, cols, e);
    s->n_checked++;
    if (!(e <= TOL_REL) && !s->n_bad++)
        snprintf(s->first_bad, sizeof s->first_bad, "%s: %.3g", name, e);
}

static int load_noise(noise_t *nz)
{
    return golden_tts_npy(&nz->z[0], "waveglow/z_initial.npy") ||
           golden_tts_npy(&nz->z[1], "waveglow/z_early_k2.npy");
}

TEST(waveglow_flows_audio_and_denoiser)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_MODEL(m);
    noise_t nz = {{{0}}};
    npy_array_t mel = {0}, gaudio = {0};
    CHECK(load_noise(&nz) == 0);
    CHECK(golden_tts_npy(&mel, "waveglow/mel_input.npy") == HARK_OK && mel.count == 80 * 40);
    CHECK(golden_tts_npy(&gaudio, "waveglow/audio.npy") == HARK_OK && gaudio.count == 10240);
    stages_t s = {0};
    waveglow_opts_t o = {
        .sigma = 0.9f, .noise = on_noise, .noise_user = &nz, .stage = on_stage, .stage_user = &s};
    size_t n = waveglow_samples(m, 40);
    float *audio = hark_malloc(sizeof(float) * n), *den = hark_malloc(sizeof(float) * n);
    hark_err_t err = {0};
    int rc = waveglow_infer(m, mel.data, 40, &o, audio, &err);
    double ea = rc ? INFINITY : rel_to_golden(audio, n, "audio.npy", 0);
    double eb = rel_to_golden(waveglow_bias_spec(m), 513, "denoiser_bias_spec.npy", 0);
    /* the denoiser on the golden audio (the stage alone) and on hark's own audio */
    double ed[2][2];
    const float strengths[2] = {0.01f, 0.1f};
    const char *files[2] = {"audio_denoised_strength0.01.npy", "audio_denoised_strength0.1.npy"};
    for (int i = 0; i < 2; i++)
        for (int src = 0; src < 2; src++) {
            size_t n_out = 0;
            int r2 = rc ? rc
                        : waveglow_denoise(m, src ? audio : gaudio.data, n, strengths[i], den,
                                           &n_out, &err);
            ed[i][src] = r2 || n_out != n ? INFINITY : rel_to_golden(den, n, files[i], 0);
        }
    hark_free(audio);
    hark_free(den);
    npy_free(&mel);
    npy_free(&gaudio);
    npy_free(&nz.z[0]);
    npy_free(&nz.z[1]);
    waveglow_destroy(m);
    CHECKF(rc == HARK_OK, "infer: %s", err.msg);
    printf("    audio %.3g; bias spectrum %.3g; denoised 0.01: %.3g (golden audio) %.3g (own); "
           "0.1: %.3g %.3g\n",
           ea, eb, ed[0][0], ed[0][1], ed[1][0], ed[1][1]);
    CHECKF(s.n_checked == 13, "%d stages checked (want 13)", s.n_checked);
    CHECKF(s.n_bad == 0, "%d stages over tolerance; first %s", s.n_bad, s.first_bad);
    CHECK(ea <= TOL_REL);
    CHECK(eb <= TOL_REL);
    for (int i = 0; i < 2; i++)
        CHECKF(ed[i][0] <= TOL_REL && ed[i][1] <= TOL_REL, "denoised %g: %.3g / %.3g", strengths[i],
               ed[i][0], ed[i][1]);
}

/* The seeded Gaussian: the same seed gives the same audio, another seed another; sigma 0 makes
 * the output independent of the noise. */
TEST(waveglow_seeded_noise_and_sigma)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_MODEL(m);
    npy_array_t mel = {0};
    CHECK(golden_tts_npy(&mel, "waveglow/mel_input.npy") == HARK_OK);
    size_t n = waveglow_samples(m, 40);
    float *a = hark_malloc(sizeof(float) * n * 4);
    hark_err_t err = {0};
    waveglow_opts_t o = {.sigma = -1, .seed = 5};
    int rc = waveglow_infer(m, mel.data, 40, &o, a, &err);
    if (!rc)
        rc = waveglow_infer(m, mel.data, 40, &o, a + n, &err);
    o.seed = 6;
    if (!rc)
        rc = waveglow_infer(m, mel.data, 40, &o, a + 2 * n, &err);
    o.sigma = 0;
    if (!rc)
        rc = waveglow_infer(m, mel.data, 40, &o, a + 3 * n, &err);
    double same = test_max_abs_diff(a, a + n, n), other = test_max_abs_diff(a, a + 2 * n, n);
    double rms = 0;
    for (size_t i = 0; i < n; i++)
        rms += (double)a[i] * a[i];
    rms = sqrt(rms / (double)n);
    hark_free(a);
    npy_free(&mel);
    waveglow_destroy(m);
    CHECKF(rc == HARK_OK, "%s", err.msg);
    printf("    same seed %.3g, other seed %.3g, rms %.3g\n", same, other, rms);
    CHECK(same == 0);
    CHECK(other > 1e-3);
    CHECK(rms > 1e-3 && rms < 10);
}

TEST(waveglow_bad_input_and_files)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_MODEL(m);
    hark_err_t err = {0};
    float mel[80 * 2] = {0}, out[1024];
    mel[5] = NAN;
    CHECK_EQ_INT(waveglow_infer(m, mel, 2, NULL, out, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(waveglow_infer(m, mel, 0, NULL, out, &err), HARK_ERR_INVALID_ARG);
    size_t n_out = 1;
    CHECK_EQ_INT(waveglow_denoise(m, out, 300, 0.1f, out, &n_out, &err), HARK_ERR_INVALID_ARG);
    CHECK(n_out == 0);
    waveglow_destroy(m);

    char p[600];
    MODEL_DIR(p);
    const char *tmp = test_tmpdir(t);
    char cmd[2400], q[700];
    CHECK(waveglow_load("/nonexistent/wg", 1, &m, &err) != HARK_OK);
    CHECK(m == NULL);
    snprintf(cmd, sizeof cmd,
             "cp -r '%s' '%s/wg' && truncate -s 1000000 '%s/wg/1/model.safetensors'", p, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(q, sizeof q, "%s/wg", tmp);
    CHECK_EQ_INT(waveglow_load(q, 1, &m, &err), HARK_ERR_FORMAT);
    printf("    truncated: %s\n", err.msg);
    snprintf(cmd, sizeof cmd,
             "cp '%s/1/model.safetensors' '%s/wg/1/' && sed -i 's/\"n_channels\": 64/"
             "\"n_channels\": 32/' '%s/wg/1/model.json'",
             p, tmp, tmp);
    CHECK(system(cmd) == 0);
    CHECK_EQ_INT(waveglow_load(q, 1, &m, &err), HARK_ERR_FORMAT);
    printf("    wrong shape: %s\n", err.msg);
    CHECK(strstr(err.msg, "WN.0") != NULL);
    CHECK(m == NULL);
    snprintf(cmd, sizeof cmd, "rm '%s/wg/1/model.json'", tmp);
    CHECK(system(cmd) == 0);
    CHECK_EQ_INT(waveglow_load(q, 1, &m, &err), HARK_ERR_IO);
}

/* The converter refuses a weight_g without its weight_v, naming it, and writes nothing. */
TEST(waveglow_convert_rejects_broken_weight_norm)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with torch is missing");
    const char *tmp = test_tmpdir(t);
    const char *ck = test_shared(GOLDEN_TTS "/waveglow/checkpoint_WaveGlow_0.pt");
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import torch; c = torch.load('%s'); "
             "del c['state_dict']['WN.1.start.weight_v']; "
             "torch.save(c, '%s/bad.pt')\" && /usr/bin/python3 tools/convert_waveglow.py "
             "--checkpoint '%s/bad.pt' --output '%s/out' >'%s/log' 2>&1",
             ck, tmp, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -q 'WN.1.start.weight_g: its weight_v is missing' '%s/log'",
             tmp);
    CHECK(system(cmd) == 0);
    char p[600];
    snprintf(p, sizeof p, "%s/out", tmp);
    struct stat st;
    CHECK(stat(p, &st) != 0);
}
