/* Tests for src/model/fastspeech/fastspeech_family.c through the public C API (hark.h): a
 * FastSpeech model naming its vocoder in config.pbtxt loads as a "tts" model, hark_synthesize
 * gives exactly what fastspeech.h + hifigan.h give for DLE's golden sentence (frame count from
 * the golden, speed = 1 / alpha), and the error paths (no vocoder, nothing speakable, a voice,
 * recognition on a TTS model). */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "model/hifigan/hifigan.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SENTENCE =
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!";

/* tmp/repo/{fs,voc}; with_vocoder 0 leaves the parameter out */
static int make_repo(test_ctx_t *t, int with_vocoder, char *fsdir, char *vocdir, char *why,
                     size_t nwhy)
{
    const char *fs =
        golden_tts_model("fastspeech", "convert_fastspeech.py", "fastspeech/checkpoint_000000.pt",
                         "fastspeech/config.json", why, nwhy);
    if (!fs)
        return -1;
    char fsd[600];
    snprintf(fsd, sizeof fsd, "%s", fs);
    const char *voc = golden_tts_model("hifigan_v3_real", "convert_hifigan.py",
                                       "hifigan_v3_real/generator_v3_ljspeech_wn_removed_fp16.pt",
                                       "hifigan_v3/config.json", why, nwhy);
    if (!voc)
        return -1;
    const char *tmp = test_tmpdir(t);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s/repo' && mkdir -p '%s/repo/fs' && cp -r '%s/m/1' '%s/repo/fs/' && "
             "ln -s '%s/m' '%s/repo/voc' && sed 's/^name: .*/name: \"fs\"/' '%s/m/config.pbtxt' "
             "> '%s/repo/fs/config.pbtxt'",
             tmp, tmp, fsd, tmp, voc, tmp, fsd, tmp);
    if (system(cmd) != 0)
        return snprintf(why, nwhy, "cannot build the repository"), -1;
    if (with_vocoder) {
        snprintf(cmd, sizeof cmd,
                 "echo 'parameters { key: \"vocoder\" value { string_value: \"voc\" } }' >> "
                 "'%s/repo/fs/config.pbtxt'",
                 tmp);
        if (system(cmd) != 0)
            return snprintf(why, nwhy, "cannot write config.pbtxt"), -1;
    }
    snprintf(fsdir, 600, "%s/repo/fs", tmp);
    snprintf(vocdir, 600, "%s/m", voc);
    return 0;
}

#define NEED_REPO(with)                                                                            \
    char fsdir[600], vocdir[600];                                                                  \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (!test_shared("golden/tts"))                                                            \
            SKIP("../shared/data/golden/tts is absent");                                           \
        CHECKF(make_repo(t, with, fsdir, vocdir, why_, sizeof why_) == 0, "%s", why_);             \
    } while (0)

/* the engines called directly, for comparison */
static int direct(const char *fsdir, const char *vocdir, float alpha, float **audio, size_t *n)
{
    fastspeech_model_t *fs = NULL;
    hifigan_model_t *voc = NULL;
    hark_err_t err = {0};
    tts_text_t tt = {0};
    float *mel = NULL, *mt = NULL;
    int nf = 0, rc = fastspeech_load(fsdir, 1, &fs, &err);
    if (!rc)
        rc = hifigan_load(vocdir, 1, &voc, &err);
    if (!rc)
        rc = tts_text_to_ids(SENTENCE, &tt, &err);
    fastspeech_opts_t o = {alpha, 0, 0, NULL, NULL};
    if (!rc)
        rc = fastspeech_forward(fs, tt.ids, tt.n, &o, &mel, &nf, &err);
    if (!rc) {
        mt = malloc(sizeof(float) * (size_t)nf * 80);
        for (int f = 0; f < nf; f++)
            for (int b = 0; b < 80; b++)
                mt[(size_t)b * nf + f] = mel[(size_t)f * 80 + b];
        *n = hifigan_samples(voc, nf);
        *audio = malloc(sizeof(float) * *n);
        rc = hifigan_forward(voc, mt, nf, *audio, NULL, NULL, &err);
    }
    free(mt);
    hark_free(mel);
    tts_text_free(&tt);
    hifigan_destroy(voc);
    fastspeech_destroy(fs);
    return rc;
}

/* sets parameters { key: "vocoder_chunk_frames" value ... } in the model's config (replacing
 * an earlier one) */
static void set_chunk(test_ctx_t *t, const char *fsdir, int frames)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "sed -i '/vocoder_chunk_frames/d' '%s/config.pbtxt' && echo 'parameters { key: "
             "\"vocoder_chunk_frames\" value { string_value: \"%d\" } }' >> '%s/config.pbtxt'",
             fsdir, frames, fsdir);
    CHECK(system(cmd) == 0);
}

TEST(fastspeech_family_synthesize)
{
    NEED_REPO(1);
    set_chunk(t, fsdir, 0); /* the whole utterance at once: exactly the engines' output */
    hark_model_t *m = NULL;
    CHECKF(hark_model_load(fsdir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    int task_ok = !strcmp(hark_model_task(m), "tts") &&
                  !strcmp(hark_model_family(m), "fastspeech") && hark_model_sample_rate(m) == 22050;
    float *pcm = NULL, *ref = NULL;
    size_t n = 0, nref = 0;
    int rate = 0;
    hark_status_t st = hark_synthesize(m, SENTENCE, NULL, &pcm, &n, &rate);
    int rc_direct = direct(fsdir, vocdir, 1.0f, &ref, &nref);
    double d = (st == HARK_OK && !rc_direct && n == nref) ? test_max_abs_diff(pcm, ref, n) : 1;
    hark_pcm_free(pcm);
    free(ref);
    /* speed 1/1.3 = DLE's alpha 1.3: the golden's 754 frames */
    hark_tts_opts_t o = {NULL, 1.0 / 1.3};
    size_t n13 = 0;
    hark_status_t st13 = hark_synthesize(m, SENTENCE, &o, &pcm, &n13, &rate);
    hark_pcm_free(pcm);
    hark_model_destroy(m);
    CHECK(task_ok);
    CHECKF(st == HARK_OK, "%s", hark_last_error());
    CHECK(rate == 22050 && n == 579 * 256);
    CHECKF(d == 0, "hark_synthesize differs from the engines by %g", d);
    CHECKF(st13 == HARK_OK && n13 == 754 * 256, "%d %zu", st13, n13);
}

/* the vocoder streaming in chunks (the default 64 frames, and 10 for many seams): the chunks
 * join into what the whole utterance at once gives, to 1e-4 */
TEST(fastspeech_family_chunked_vocoder_equals_one_shot)
{
    NEED_REPO(1);
    float *ref = NULL;
    size_t nref = 0;
    CHECK_OK(direct(fsdir, vocdir, 1.0f, &ref, &nref));
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            set_chunk(t, fsdir, 10);
        hark_model_t *m = NULL;
        CHECKF(hark_model_load(fsdir, NULL, &m) == HARK_OK, "%s", hark_last_error());
        float *pcm = NULL;
        size_t n = 0;
        int rate = 0;
        hark_status_t st = hark_synthesize(m, SENTENCE, NULL, &pcm, &n, &rate);
        hark_model_destroy(m);
        CHECKF(st == HARK_OK && n == nref, "%s: %zu samples, one-shot %zu", hark_last_error(), n,
               nref);
        double d = test_max_abs_diff(pcm, ref, n);
        printf("    chunks of %d frames: max |chunked - one-shot| = %.3g\n", pass ? 10 : 64, d);
        CHECKF(d <= 1e-4, "chunks of %d frames differ from one-shot by %g", pass ? 10 : 64, d);
        hark_pcm_free(pcm);
    }
    free(ref);
}

/* the GPU path through the family (instance on a GPU, as KIND_GPU loads it): one-shot FP32 ==
 * the CPU engines to 1e-4 of the peak; chunks of 64 and 10 frames == the GPU's own one-shot, FP32
 * to 1e-4, FP16 to 1e-3 (the same mel; the windows' GEMMs only sum in another order); FP16
 * one-shot against the CPU to 5e-2 of the peak (FastSpeech's FP16 mel error through the FP16
 * vocoder; measured 1.5e-2 on the H100) */
GPU_TEST(fastspeech_family_gpu_chunked_equals_one_shot)
{
    NEED_REPO(1);
    float *ref = NULL;
    size_t nref = 0;
    CHECK_OK(direct(fsdir, vocdir, 1.0f, &ref, &nref));
    double peak = 0;
    for (size_t i = 0; i < nref; i++)
        peak = fmax(peak, fabs(ref[i]));
    static const char *const precs[2] = {"fp32", "fp16"};
    for (int p = 0; p < 2; p++) {
        float *one = NULL;
        size_t n_one = 0;
        for (int pass = 0; pass < 3; pass++) {
            set_chunk(t, fsdir, pass == 0 ? 0 : pass == 1 ? 64 : 10);
            hark_model_opts_t mo = {.device = "cuda", .precision = precs[p]};
            hark_model_t *m = NULL;
            CHECKF(hark_model_load(fsdir, &mo, &m) == HARK_OK, "%s", hark_last_error());
            CHECK(hark_model_device(m) == 0);
            float *pcm = NULL;
            size_t n = 0;
            int rate = 0;
            hark_status_t st = hark_synthesize(m, SENTENCE, NULL, &pcm, &n, &rate);
            hark_model_destroy(m);
            CHECKF(st == HARK_OK && n == nref, "%s: %zu samples, CPU %zu", hark_last_error(), n,
                   nref);
            if (pass == 0) {
                double d = test_max_abs_diff(pcm, ref, n) / peak;
                printf("    gpu %s one-shot: max diff vs the CPU engines %.3g of the peak\n",
                       precs[p], d);
                CHECKF(d <= (p ? 5e-2 : 1e-4), "%s one-shot differs from the CPU by %g", precs[p],
                       d);
                one = pcm;
                n_one = n;
                continue;
            }
            double d = test_max_abs_diff(pcm, one, n_one);
            printf("    gpu %s chunks of %d frames: max |chunked - one-shot| = %.3g\n", precs[p],
                   pass == 1 ? 64 : 10, d);
            hark_pcm_free(pcm);
            CHECKF(d <= (p ? 1e-3 : 1e-4), "%s chunks differ from one-shot by %g", precs[p], d);
        }
        hark_pcm_free(one);
    }
    free(ref);
}

TEST(fastspeech_family_errors)
{
    NEED_REPO(1);
    hark_model_t *m = NULL;
    CHECKF(hark_model_load(fsdir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    float *pcm = NULL;
    size_t n = 0;
    int rate = 0;
    hark_status_t s1 = hark_synthesize(m, "  ...  ", NULL, &pcm, &n, &rate);
    int s1_msg = strstr(hark_last_error(), "speakable") != NULL;
    hark_tts_opts_t o = {"alice", 0};
    hark_status_t s2 = hark_synthesize(m, "hello", &o, &pcm, &n, &rate);
    hark_asr_result_t *r = NULL;
    float x[16000] = {0};
    const float *xs[1] = {x};
    size_t ns[1] = {16000};
    hark_status_t s3 = hark_recognize(m, xs, ns, 1, 22050, NULL, &r);
    hark_model_destroy(m);
    CHECK(s1 == HARK_ERR_INVALID_ARG && s1_msg && pcm == NULL && n == 0);
    CHECK(s2 == HARK_ERR_UNSUPPORTED);
    CHECK(s3 == HARK_ERR_UNSUPPORTED && r == NULL);
    /* GPU and fp16 are refused */
    hark_model_opts_t mo = {.precision = "fp16"};
    CHECK(hark_model_load(fsdir, &mo, &m) == HARK_ERR_UNSUPPORTED && !m);
}

TEST(fastspeech_family_needs_vocoder)
{
    NEED_REPO(0);
    hark_model_t *m = NULL;
    CHECK(hark_model_load(fsdir, NULL, &m) == HARK_ERR_INVALID_ARG && !m);
    CHECKF(strstr(hark_last_error(), "vocoder"), "%s", hark_last_error());
}

/* hark bench's argument errors (the timing itself needs a GPU: docs/tts.md) */
TEST(fastspeech_bench_arguments)
{
    NEED_REPO(1);
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "%s bench --model %s --precision fp8", test_hark_bin(), fsdir);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 2 && strstr(out, "--precision"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s bench --model %s --device cpu", test_hark_bin(), fsdir);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 2 && strstr(out, "GPU path"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s bench --model %s --help", test_hark_bin(), fsdir);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0 && strstr(out, "first audio"), "%s", out);
    if (!test_have_gpu()) { /* no device: a clear failure, not a crash */
        snprintf(cmd, sizeof cmd, "%s bench --model %s --batch 1 --min-time 0.1", test_hark_bin(),
                 fsdir);
        CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "hark bench:"), "%s", out);
    }
}
