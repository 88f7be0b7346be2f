/* Integration tests of `hark speak` and `hark vocode` through the built binary, on the TTS
 * goldens (../shared/data/golden/tts): the real V3 vocoder resynthesising LJ001-0002 (WAV within
 * 1 LSB of the golden resynthesis), text -> mel equal to DLE's golden mel (--dump-dir) with the
 * vocoder the model's config.pbtxt names, one WAV per line of a text file, and the error paths
 * (exit status + message). */
#include "test.h"

#include "audio/audio.h"
#include "core/npy.h"
#include "hark.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* tmp/repo/{fs,voc}: the golden FastSpeech naming "voc" as its vocoder, and the real V3 */
static int make_repo(test_ctx_t *t, char *why, size_t nwhy)
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
    char cmd[4096];
    const char *tmp = test_tmpdir(t);
    snprintf(
        cmd, sizeof cmd,
        "mkdir -p '%s/repo/fs' && cp -r '%s/m/1' '%s/repo/fs/' && ln -s '%s/m' '%s/repo/voc' "
        "&& sed 's/^name: .*/name: \"fs\"/' '%s/m/config.pbtxt' > '%s/repo/fs/config.pbtxt' && "
        "echo 'parameters { key: \"vocoder\" value { string_value: \"voc\" } }' >> "
        "'%s/repo/fs/config.pbtxt'",
        tmp, fsd, tmp, voc, tmp, fsd, tmp, tmp);
    if (system(cmd) != 0) {
        snprintf(why, nwhy, "cannot build the test repository");
        return -1;
    }
    return 0;
}

#define NEED_REPO()                                                                                \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (!test_shared("golden/tts"))                                                            \
            SKIP("../shared/data/golden/tts is absent");                                           \
        CHECKF(make_repo(t, why_, sizeof why_) == 0, "%s", why_);                                  \
    } while (0)

static int read_wav(const char *path, audio_t *a)
{
    hark_err_t err = {0};
    return audio_decode_file(path, NULL, a, &err);
}

TEST(cli_vocode_resynthesis)
{
    NEED_REPO();
    const char *wav = test_shared("audio/lj22k/LJ001-0002.wav");
    if (!wav)
        SKIP("../shared/data/audio/lj22k is absent");
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192], path[600];
    snprintf(path, sizeof path, "%s/r.wav", tmp);
    snprintf(cmd, sizeof cmd, "%s vocode --model %s/repo/voc --wav %s -o %s", test_hark_bin(), tmp,
             wav, path);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    audio_t a = {0}, g = {0};
    CHECK(read_wav(path, &a) == HARK_OK);
    CHECK(read_wav(test_shared("golden/tts/hifigan_v3_real/resynth_LJ001-0002.wav"), &g) ==
          HARK_OK);
    CHECK(a.rate == 22050 && a.n == g.n);
    double d = test_max_abs_diff(a.samples, g.samples, a.n) * 32768.0;
    printf("    resynthesis: %zu samples, max diff %.0f LSB from the golden WAV\n", a.n, d);
    audio_free(&a);
    audio_free(&g);
    CHECK(d <= 1.0);
    /* --mel: the golden mel gives the same audio */
    snprintf(cmd, sizeof cmd, "%s vocode --model %s/repo/voc --mel %s -o %s/m.wav", test_hark_bin(),
             tmp, test_shared("golden/tts/hifigan_v3_real/mel_input.npy"), tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
}

TEST(cli_speak_matches_golden_mel)
{
    NEED_REPO();
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192], path[600];
    snprintf(cmd, sizeof cmd,
             "%s speak --model %s/repo/fs 'Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 "
             "\xe2\x80\x94 at 4:30 p.m.!' -o %s/s.wav --dump-dir %s/d",
             test_hark_bin(), tmp, tmp, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    npy_array_t mel = {0}, gm = {0};
    snprintf(path, sizeof path, "%s/d/mel.npy", tmp);
    CHECK(npy_load_f32(path, &mel) == HARK_OK);
    CHECK(golden_tts_npy(&gm, "fastspeech/s1/mel.npy") == HARK_OK);
    CHECK(mel.count == gm.count);
    double e = test_max_abs_diff(mel.data, gm.data, mel.count);
    npy_free(&mel);
    npy_free(&gm);
    printf("    speak: mel max abs diff %.3g from DLE's golden\n", e);
    CHECK(e <= 1e-3);
    audio_t a = {0};
    snprintf(path, sizeof path, "%s/s.wav", tmp);
    CHECK(read_wav(path, &a) == HARK_OK);
    int n_ok = a.rate == 22050 && a.n == 579 * 256;
    audio_free(&a);
    CHECK(n_ok);
}

TEST(cli_speak_text_file)
{
    NEED_REPO();
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192], path[600];
    snprintf(path, sizeof path, "%s/lines.txt", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("LJ001-0002\tin being comparatively modern.\nHello there.\n\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s speak --model %s/repo/fs --vocoder %s/repo/voc --text-file %s "
             "--output-dir %s/wavs",
             test_hark_bin(), tmp, tmp, path, tmp);
    int st = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(st == 1 && strstr(out, "nothing speakable") && strstr(out, "2 WAVs written"), "%d %s",
           st, out);
    snprintf(path, sizeof path, "%s/wavs/LJ001-0002.wav", tmp);
    CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/wavs/0002.wav", tmp);
    CHECK(access(path, R_OK) == 0);
}

TEST(cli_speak_vocode_errors)
{
    NEED_REPO();
    const char *tmp = test_tmpdir(t);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd, "%s speak --model %s/repo/fs '' -o %s/e.wav", test_hark_bin(), tmp,
             tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "nothing speakable"), "%s",
           out);
    snprintf(cmd, sizeof cmd, "%s speak --model %s/repo/fs hi -o %s/e.wav --device cuda",
             test_hark_bin(), tmp, tmp);
    /* the GPU path where a GPU is; else a clear failure naming the device */
    int grc = test_run_cmd(t, cmd, out, sizeof out);
    if (test_have_gpu())
        CHECKF(grc == 0, "%s", out);
    else
        CHECKF(grc == 1 && strstr(out, "--device cuda:0"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s speak --model %s/repo/fs hi -o %s/e.wav --device gpu",
             test_hark_bin(), tmp, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 2 && strstr(out, "expected cpu, cuda"), "%s",
           out);
    snprintf(cmd, sizeof cmd, "%s speak --model %s/repo/fs hi -o %s/e.wav --precision fp16",
             test_hark_bin(), tmp, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 2 && strstr(out, "fp32 only"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s speak --model %s/repo/voc hi -o %s/e.wav", test_hark_bin(), tmp,
             tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "not a FastSpeech"), "%s",
           out);
    /* a NaN mel and a mel of the wrong shape */
    float bad[80 * 3];
    for (int i = 0; i < 80 * 3; i++)
        bad[i] = -4.0f;
    bad[100] = NAN;
    char p[600];
    snprintf(p, sizeof p, "%s/nan.npy", tmp);
    int64_t shape[3] = {1, 80, 3};
    CHECK(npy_save_f32(p, bad, 3, shape) == 0);
    snprintf(cmd, sizeof cmd, "%s vocode --model %s/repo/voc --mel %s -o %s/e.wav", test_hark_bin(),
             tmp, p, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "NaN"), "%s", out);
    int64_t shape2[2] = {3, 80};
    CHECK(npy_save_f32(p, bad, 2, shape2) == 0);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "expected a mel"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s vocode --model %s/repo/fs --mel %s -o %s/e.wav", test_hark_bin(),
             tmp, p, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 1 && strstr(out, "family"), "%s", out);
}
