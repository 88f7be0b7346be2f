/* The bundled demo models (issue #22): `hark transcribe` with no --model decodes the bundled
 * synthetic examples (examples/demo-en, voices and sentences held out of training) to their exact
 * text with models/demo-en-asr on the CPU; a missing demo repository is a clear error; `hark
 * serve` with no --model-repository serves the demo models (tests/server/test_demo_serve.py). */
#include "test.h"

#include "audio/audio.h"
#include "hark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EX "examples/demo-en"

TEST(demo_recogniser_exact_text_on_bundled_examples)
{
    FILE *f = fopen(EX "/trans.txt", "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp = 0;
        const char *key = line, *ref = sp + 1;
        char cmd[2048], out[4096], want[1200];
        snprintf(cmd, sizeof cmd, "%s transcribe " EX "/%s.wav", test_hark_bin(), key);
        int st = test_run_cmd(t, cmd, out, sizeof out);
        CHECKF(st == 0, "%s: exit status %d", key, st);
        /* stdout's 'FILE TEXT' line, beside the note on stderr naming the demo recogniser */
        snprintf(want, sizeof want, EX "/%s.wav %s\n", key, ref);
        const char *hit = strstr(out, want);
        CHECKF(hit && (hit == out || hit[-1] == '\n'), "%s: expected '%s' in:\n%s", key, ref, out);
        CHECKF(strstr(out, "bundled demo recogniser") != NULL, "no note: '%s'", out);
        n++;
    }
    fclose(f);
    CHECK(n >= 4);
}

TEST(demo_models_missing_is_a_clear_error)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "HARK_DEMO_MODELS=/nonexistent %s transcribe " EX "/x.wav",
             test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "needs --model") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "HARK_DEMO_MODELS=/nonexistent %s serve --http-port 0",
             test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "bundled demo models") && strstr(out, "not there"), "%s", out);
}

TEST(demo_models_served_without_a_repository)
{
    const char *py = "/usr/bin/python3";
    if (system("/usr/bin/python3 -c 'import requests' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with requests (python3-requests)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_demo_serve.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_demo_serve.py failed (status %d)", st);
}

TEST(demo_voice_speaks_without_a_model)
{
    if (access("models/demo-en-tts/config.pbtxt", R_OK) != 0)
        SKIP("models/demo-en-tts is absent");
    char cmd[2048], out[4096], wav[1024];
    snprintf(wav, sizeof wav, "%s/demo_voice.wav", test_tmpdir(t));
    snprintf(cmd, sizeof cmd, "%s speak \"It was a cold night.\" -o %s", test_hark_bin(), wav);
    int st = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(st == 0, "exit status %d: %s", st, out);
    CHECKF(strstr(out, "bundled demo voice") != NULL, "no note: '%s'", out);
    audio_t a = {0};
    hark_err_t err = {0};
    CHECKF(audio_decode_file(wav, NULL, &a, &err) == HARK_OK, "%s", err.msg);
    CHECKF(a.rate == 22050, "rate %d", a.rate);
    CHECKF(a.n > 22050 / 2, "%zu samples: under half a second of audio", a.n);
    audio_free(&a);
    /* without the demo models the same command is a usage error, not a crash */
    snprintf(cmd, sizeof cmd, "HARK_DEMO_MODELS=/nonexistent %s speak \"x\" -o %s", test_hark_bin(),
             wav);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "usage: hark speak") != NULL, "%s", out);
}
