/* Tests for src/model/fastspeech/ and tools/convert_fastspeech.py against DLE FastSpeech's
 * goldens (../shared/data/golden/tts/fastspeech, README there): for each of the 3 sentences, the
 * ids from hark's own text front end, then every stage (embedding, positions, each FFT block,
 * encoder, duration log / float / rounded, length-regulated sequence, mel side, mel) at alpha 1,
 * durations and mel at alpha 1.3, and DLE's zero-padded batch of the three (its padding quirks
 * included); plus bad models and input.
 * Tolerance: max |diff| <= 1e-4 · max |golden| per stage; rounded durations and frame counts
 * exact. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_REL 1e-4

static const char *const SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

static const char *fs_model(char *why, size_t nwhy)
{
    return golden_tts_model("fastspeech", "convert_fastspeech.py",
                            "fastspeech/checkpoint_000000.pt", "fastspeech/config.json", why, nwhy);
}

#define LOAD_MODEL(m)                                                                              \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = fs_model(why_, sizeof why_);                                            \
        if (!dir_) {                                                                               \
            if (!test_shared("golden/tts"))                                                        \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(fastspeech_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                    \
    } while (0)

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

typedef struct {
    const char *dir; /* "s0", "s0/alpha1.3" */
    int n_checked, n_bad;
    double worst;
    char first_bad[300];
} stages_t;

static void on_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stages_t *s = user;
    char rel[160];
    snprintf(rel, sizeof rel, "fastspeech/%s/%s.npy", s->dir, name);
    npy_array_t g = {0};
    if (golden_tts_npy(&g, rel) != HARK_OK)
        return;
    double e = INFINITY;
    if (g.count == (size_t)rows * cols) {
        e = test_max_abs_diff(data, g.data, g.count);
        if (strcmp(name, "dur_rounded") != 0)
            e /= fmax(max_abs(g.data, g.count), 1e-30);
    }
    int ok = !strcmp(name, "dur_rounded") ? e == 0 : e <= TOL_REL;
    printf("    %s/%-22s (%d, %d) max %s diff %.3g\n", s->dir, name, rows, cols,
           strcmp(name, "dur_rounded") ? "rel" : "abs", e);
    s->n_checked++;
    if (!ok && !s->n_bad++)
        snprintf(s->first_bad, sizeof s->first_bad,
                 "%s/%s: diff %.3g (golden %zu values, got "
                 "%d x %d)",
                 s->dir, name, e, g.count, rows, cols);
    npy_free(&g);
}

static void run_sentence(test_ctx_t *t, fastspeech_model_t *m, int si, float alpha, const char *dir,
                         int expect_checked)
{
    tts_text_t tt;
    hark_err_t err = {0};
    CHECKF(tts_text_to_ids(SENTENCES[si], &tt, &err) == HARK_OK, "%s", err.msg);
    char rel[64];
    snprintf(rel, sizeof rel, "fastspeech/s%d/ids.npy", si);
    npy_array_t gi = {0};
    int ids_ok = golden_tts_npy(&gi, rel) == HARK_OK && gi.count == (size_t)tt.n;
    for (int i = 0; ids_ok && i < tt.n; i++)
        ids_ok = tt.ids[i] == (int)((float *)gi.data)[i];
    npy_free(&gi);
    stages_t s = {dir, 0, 0, 0, ""};
    fastspeech_opts_t o = {alpha, 0, 0, on_stage, &s};
    float *mel = NULL;
    int nf = 0;
    int rc = fastspeech_forward(m, tt.ids, tt.n, &o, &mel, &nf, &err);
    tts_text_free(&tt);
    hark_free(mel);
    CHECKF(ids_ok, "s%d: hark's ids differ from the golden", si);
    CHECKF(rc == HARK_OK, "forward: %s", err.msg);
    CHECKF(s.n_checked == expect_checked, "%s: %d stages checked (want %d)", dir, s.n_checked,
           expect_checked);
    CHECKF(s.n_bad == 0, "%d stages over tolerance; first %s", s.n_bad, s.first_bad);
}

TEST(fastspeech_stages_alpha1)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    static const char *const dirs[3] = {"s0", "s1", "s2"};
    for (int si = 0; si < 3 && !test_failed(t); si++)
        run_sentence(t, m, si, 1.0f, dirs[si], 14);
    fastspeech_destroy(m);
}

TEST(fastspeech_alpha_1_3)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    static const char *const dirs[3] = {"s0/alpha1.3", "s1/alpha1.3", "s2/alpha1.3"};
    for (int si = 0; si < 3 && !test_failed(t); si++)
        run_sentence(t, m, si, 1.3f, dirs[si], 3);
    fastspeech_destroy(m);
}

/* DLE's padded batch: every row run at the batch's padded lengths */
TEST(fastspeech_batch)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    npy_array_t ids = {0}, gm = {0};
    CHECK(golden_tts_npy(&ids, "fastspeech/batch/ids_padded.npy") == HARK_OK);
    CHECK(golden_tts_npy(&gm, "fastspeech/batch/mel.npy") == HARK_OK);
    int B = (int)ids.shape[0], N = (int)ids.shape[1], T = (int)gm.shape[1], nm = 80;
    double worst = 0;
    int rc = HARK_OK, frames_ok = 1;
    hark_err_t err = {0};
    for (int b = 0; b < B && !rc; b++) {
        int row[4096], n = 0;
        for (int i = 0; i < N; i++)
            if (((float *)ids.data)[(size_t)b * N + i] != 0)
                row[n++] = (int)((float *)ids.data)[(size_t)b * N + i];
        fastspeech_opts_t o = {1.0f, N, T, NULL, NULL};
        float *mel = NULL;
        int nf = 0;
        rc = fastspeech_forward(m, row, n, &o, &mel, &nf, &err);
        if (!rc) {
            frames_ok &= nf == T;
            const float *g = (const float *)gm.data + (size_t)b * T * nm;
            double e = test_max_abs_diff(mel, g, (size_t)T * nm) / max_abs(g, (size_t)T * nm);
            printf("    batch row %d: %d ids padded to %d, %d frames; mel max rel diff %.3g\n", b,
                   n, N, T, e);
            worst = fmax(worst, e);
        }
        hark_free(mel);
    }
    npy_free(&ids);
    npy_free(&gm);
    fastspeech_destroy(m);
    CHECKF(rc == HARK_OK, "%s", err.msg);
    CHECK(frames_ok);
    CHECKF(worst <= TOL_REL, "batch mel rel diff %g", worst);
}

TEST(fastspeech_bad_input)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    hark_err_t err = {0};
    float *mel = NULL;
    int nf = 0;
    int ids[3] = {12, 0, 40};
    int r0 = fastspeech_forward(m, ids, 0, NULL, &mel, &nf, &err);
    int r1 = fastspeech_forward(m, ids, 3, NULL, &mel, &nf, &err); /* id 0 is padding */
    ids[1] = 149;
    int r2 = fastspeech_forward(m, ids, 3, NULL, &mel, &nf, &err);
    ids[1] = 41;
    fastspeech_opts_t o = {1e-6f, 0, 0, NULL, NULL}; /* every duration rounds to 0 */
    int r3 = fastspeech_forward(m, ids, 3, &o, &mel, &nf, &err);
    fastspeech_destroy(m);
    CHECK(r0 == HARK_ERR_INVALID_ARG && r1 == HARK_ERR_INVALID_ARG && r2 == HARK_ERR_INVALID_ARG);
    CHECKF(r3 == HARK_ERR_INVALID_ARG && strstr(err.msg, "no frames"), "%d %s", r3, err.msg);
    CHECK(mel == NULL);
}

TEST(fastspeech_bad_model)
{
    char why[512];
    const char *dir = fs_model(why, sizeof why);
    if (!dir) {
        if (!test_shared("golden/tts"))
            SKIP(why);
        CHECKF(0, "conversion: %s", why);
    }
    const char *tmp = test_tmpdir(t);
    char path[1024], cmd[3000];
    fastspeech_model_t *m = NULL;
    hark_err_t err = {0};
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/trunc/1' && cp '%s/m/1/model.json' '%s/trunc/1/' && head -c 9000 "
             "'%s/m/1/model.safetensors' > '%s/trunc/1/model.safetensors'",
             tmp, dir, tmp, dir, tmp);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/trunc", tmp);
    CHECK(fastspeech_load(path, 1, &m, &err) == HARK_ERR_FORMAT && !m);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/shape/1' && cp '%s/m/1/model.safetensors' '%s/shape/1/' && sed "
             "'s/\"dec_layers\": 2/\"dec_layers\": 3/' '%s/m/1/model.json' > "
             "'%s/shape/1/model.json'",
             tmp, dir, tmp, dir, tmp);
    CHECK(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/shape", tmp);
    CHECK(fastspeech_load(path, 1, &m, &err) != HARK_OK && !m);
    CHECKF(strstr(err.msg, "mel_side.layer_stack.2"), "%s", err.msg);
    const char *g = test_shared("golden/tts/fastspeech");
    snprintf(cmd, sizeof cmd,
             "sed 's/\"phoneme_side_conv1d_filter_size\": 256/\"phoneme_side_conv1d_filter_size\": "
             "512/' '%s/config.json' > '%s/c.json' && "
             "/usr/bin/python3 tools/convert_fastspeech.py --checkpoint '%s/checkpoint_000000.pt' "
             "--config '%s/c.json' --output '%s/x' > '%s/log' 2>&1",
             g, tmp, g, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -q 'expected shape' '%s/log'", tmp);
    CHECK(system(cmd) == 0);
}
