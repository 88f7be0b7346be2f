/* Integration tests of `hark speak` with Tacotron 2 + WaveGlow (+ denoiser) through the built
 * binary, on the TTS goldens (../shared/data/golden/tts): the encoder stage equal to DLE's
 * golden (--dump-dir; it runs before any dropout), the per-step dumps' layout, the decoder's
 * length and DLE's audio cut,
 * --seed reproducibility, and the error paths (exit status + message). */
#include "test.h"

#include "audio/audio.h"
#include "core/npy.h"
#include "hark.h"
#include "support/golden_model.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* the converted golden Tacotron 2 and WaveGlow ("<dir>/m" each) */
static int models(char *t2, char *wg, size_t n, char *why, size_t nwhy)
{
    const char *d1 = golden_tts_checkpoint("tacotron2", "convert_tacotron2.py",
                                           "tacotron2/checkpoint_Tacotron2_0.pt", why, nwhy);
    const char *d2 = d1 ? golden_tts_checkpoint("waveglow", "convert_waveglow.py",
                                                "waveglow/checkpoint_WaveGlow_0.pt", why, nwhy)
                        : NULL;
    if (!d1 || !d2)
        return -1;
    snprintf(t2, n, "%s/m", d1);
    snprintf(wg, n, "%s/m", d2);
    return 0;
}

#define NEED_MODELS(t2, wg)                                                                        \
    do {                                                                                           \
        char why_[512] = "";                                                                       \
        if (!test_shared(GOLDEN_TTS))                                                              \
            SKIP("../shared/data/golden/tts is absent");                                           \
        if (models(t2, wg, sizeof t2, why_, sizeof why_) != 0) {                                   \
            if (strstr(why_, "python3"))                                                           \
                SKIP(why_);                                                                        \
            CHECKF(0, "%s", why_);                                                                 \
        }                                                                                          \
    } while (0)

static const char *const S1 =
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!";

TEST(cli_speak_tacotron2_waveglow)
{
    char t2[600], wg[600];
    NEED_MODELS(t2, wg);
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s speak --model '%s' --vocoder '%s' '%s' -o '%s/a.wav' --seed 1 "
             "--max-decoder-steps 40 --dump-dir '%s/d'",
             test_hark_bin(), t2, wg, S1, tmp, tmp);
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "gate never fired") != NULL); /* the golden model's gate stays < 0.5 */
    /* the encoder runs before any dropout: equal to DLE's for the same text */
    char p[700];
    snprintf(p, sizeof p, "%s/d/encoder_out.npy", tmp);
    npy_array_t a = {0}, g = {0};
    CHECK_OK(npy_load_f32(p, &a));
    CHECK_OK(golden_tts_npy(&g, "tacotron2/s1/encoder_out.npy"));
    CHECK_EQ_INT(a.count, g.count);
    double mx = 0;
    for (size_t i = 0; i < g.count; i++)
        mx = fmax(mx, fabs(((float *)g.data)[i]));
    double e = test_max_abs_diff(a.data, g.data, g.count) / mx;
    npy_free(&a);
    npy_free(&g);
    printf("    encoder_out rel diff %.3g\n", e);
    CHECK(e <= 1e-4);
    snprintf(p, sizeof p, "%s/d/mel_postnet.npy", tmp);
    CHECK_OK(npy_load_f32(p, &a));
    CHECK(a.ndim == 2 && a.shape[0] == 80 && a.shape[1] == 40);
    npy_free(&a);
    /* the decoder's per-step states in the goldens' layout (steps, 1, cols) */
    static const struct {
        const char *name;
        int cols;
    } dec[4] = {{"dec_attention_weights", 119},
                {"dec_mel_frames", 80},
                {"dec_gate", 1},
                {"dec_decoder_hidden", 256}};
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/d/%s.npy", tmp, dec[k].name);
        CHECKF(npy_load_f32(p, &a) == HARK_OK, "%s", p);
        int shape_ok =
            a.ndim == 3 && a.shape[0] == 40 && a.shape[1] == 1 && a.shape[2] == dec[k].cols;
        npy_free(&a);
        CHECKF(shape_ok, "%s: shape", dec[k].name);
    }
    /* 40 frames, the gate never fired: DLE keeps mel_lengths (40) · 256 samples, peak 1 */
    snprintf(p, sizeof p, "%s/a.wav", tmp);
    audio_t au = {0};
    hark_err_t err = {0};
    CHECK_OK(audio_decode_file(p, NULL, &au, &err));
    size_t n = au.n;
    float peak = 0;
    for (size_t i = 0; i < n; i++)
        peak = fmaxf(peak, fabsf(au.samples[i]));
    audio_free(&au);
    printf("    %zu samples, peak %.4f\n", n, peak);
    CHECK_EQ_INT(n, 40 * 256);
    CHECK(peak > 0.99f);
}

TEST(cli_speak_tacotron2_seed)
{
    char t2[600], wg[600];
    NEED_MODELS(t2, wg);
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192];
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s speak --model '%s' --vocoder '%s' 'Hello there.' -o '%s/%d.wav' --seed %d "
                 "--max-decoder-steps 30",
                 test_hark_bin(), t2, wg, tmp, k, k < 2 ? 7 : 8);
        int rc = test_run_cmd(t, cmd, out, sizeof out);
        CHECKF(rc == 0, "exit %d: %s", rc, out);
    }
    snprintf(cmd, sizeof cmd, "cmp -s '%s/0.wav' '%s/1.wav'", tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "cmp -s '%s/0.wav' '%s/2.wav'", tmp, tmp);
    CHECK(system(cmd) != 0);
}

TEST(cli_speak_tacotron2_errors)
{
    char t2[600], wg[600];
    NEED_MODELS(t2, wg);
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "%s speak --model '%s' --vocoder '%s' hi -o '%s/x.wav' --seed -1",
             test_hark_bin(), t2, wg, tmp);
    CHECK_EQ_INT(test_run_cmd(t, cmd, out, sizeof out), 2);
    CHECK(strstr(out, "--seed") != NULL);
    snprintf(cmd, sizeof cmd,
             "%s speak --model '%s' --vocoder '%s' hi -o '%s/x.wav' --denoiser-strength lots",
             test_hark_bin(), t2, wg, tmp);
    CHECK_EQ_INT(test_run_cmd(t, cmd, out, sizeof out), 2);
    CHECK(strstr(out, "--denoiser-strength") != NULL);
    /* the acoustic model given as the vocoder */
    snprintf(cmd, sizeof cmd, "%s speak --model '%s' --vocoder '%s' hi -o '%s/x.wav'",
             test_hark_bin(), t2, t2, tmp);
    CHECK_EQ_INT(test_run_cmd(t, cmd, out, sizeof out), 1);
    CHECK(strstr(out, "not a HiFi-GAN or WaveGlow vocoder") != NULL);
    /* no vocoder named in config.pbtxt and none given */
    snprintf(cmd, sizeof cmd, "%s speak --model '%s' hi -o '%s/x.wav'", test_hark_bin(), t2, tmp);
    CHECK_EQ_INT(test_run_cmd(t, cmd, out, sizeof out), 1);
    CHECK(strstr(out, "names no vocoder") != NULL);
}

/* --device cuda: the same WAV as the CPU's (FP32: within 2 LSB of 16-bit; FP16: the same length,
 * within 0.05), --dump-dir through the GPU engines */
GPU_TEST(cli_speak_tacotron2_gpu_matches_cpu)
{
    char t2[600], wg[600];
    NEED_MODELS(t2, wg);
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192];
    const char *dev[3] = {"cpu --precision fp32", "cuda --precision fp32", "cuda --precision fp16"};
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd,
                 "%s speak --model '%s' --vocoder '%s' 'Hello there, again.' -o '%s/%d.wav' "
                 "--seed 7 --max-decoder-steps 30 --device %s %s",
                 test_hark_bin(), t2, wg, tmp, k, dev[k], k == 1 ? "--dump-dir d1" : "");
        char full[4200];
        snprintf(full, sizeof full, "cd '%s' && %s", tmp, cmd);
        int rc = test_run_cmd(t, full, out, sizeof out);
        CHECKF(rc == 0, "%s: exit %d: %s", dev[k], rc, out);
    }
    audio_t au[3] = {{0}};
    hark_err_t err = {0};
    for (int k = 0; k < 3; k++) {
        char p[700];
        snprintf(p, sizeof p, "%s/%d.wav", tmp, k);
        CHECK_OK(audio_decode_file(p, NULL, &au[k], &err));
    }
    int same_len = au[1].n == au[0].n && au[2].n == au[0].n;
    double d32 = same_len ? test_max_abs_diff(au[1].samples, au[0].samples, au[0].n) : 1;
    double d16 = same_len ? test_max_abs_diff(au[2].samples, au[0].samples, au[0].n) : 1;
    for (int k = 0; k < 3; k++)
        audio_free(&au[k]);
    char p[700];
    snprintf(p, sizeof p, "%s/d1/encoder_out.npy", tmp);
    npy_array_t a = {0};
    int dumped = npy_load_f32(p, &a) == HARK_OK && a.count > 0;
    npy_free(&a);
    printf("    GPU vs CPU: fp32 %.3g, fp16 %.3g (max abs, 16-bit WAV)\n", d32, d16);
    CHECK(same_len);
    CHECK(dumped);
    CHECKF(d32 <= 2.0 / 32768, "fp32 %.3g", d32);
    CHECKF(d16 <= 0.05, "fp16 %.3g", d16);
}
