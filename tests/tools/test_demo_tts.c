/* Tests for the demo voice's tools (issue 22 part 3, docs/demo-voice.md):
 * demo_tts_tools runs tests/tools/demo_tts_check.py — tools/train_demo_tts.py's FastSpeech equals
 * hark's after export + convert (ids, durations, mel), and, with the engines of
 * $HARK_DEMO_ENGINES (default .demo/env.sh when present), a toy run of the whole recipe ending
 * in `hark speak`; demo_tts_round_trip speaks held-out sentences with models/demo-en-tts and
 * transcribes them with models/demo-en-asr (tools/demo_tts_roundtrip.py): WER <= 10%;
 * demo_tts_resynth_round_trip runs the same with espeak-ng resynthesised by the real HiFi-GAN V3
 * (--resynth: what the voice can reach), which must pass the same bar. */
#include "support/golden_tts.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECKER "tests/tools/demo_tts_check.py"

TEST(demo_tts_tools)
{
    const char *py = test_python("torch, numpy, yaml");
    if (!py)
        SKIP("no python3 with torch, numpy and yaml");
    const char *env = getenv("HARK_DEMO_ENGINES");
    if (!env)
        env = access(".demo/env.sh", R_OK) == 0 ? ".demo/env.sh" : "";
    char cmd[1400], out[8192];
    snprintf(cmd, sizeof cmd, "%s " CHECKER " '%s' '%s' '%s' 2>&1", py, test_hark_bin(),
             test_tmpdir(t), env);
    int st = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(st == 0, "%s exited with %d:\n%s", CHECKER, st, out);
}

TEST(demo_tts_round_trip)
{
    if (access("models/demo-en-tts/1/model.safetensors", R_OK) != 0)
        SKIP("models/demo-en-tts is absent (the demo voice is not trained yet)");
    if (access("models/demo-en-asr/1/model.safetensors", R_OK) != 0)
        SKIP("models/demo-en-asr is absent");
    if (!test_shared("text/ljspeech_transcripts.tsv"))
        SKIP("../shared/data/text is absent (the held-out sentences come from it)");
    const char *py = test_python("numpy");
    if (!py)
        SKIP("no python3 with numpy");
    char cmd[1400], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s tools/demo_tts_roundtrip.py --hark '%s' --count 10 --max-wer 10 2>&1", py,
             test_hark_bin());
    int st = test_run_cmd(t, cmd, out, sizeof out);
    printf("    %s", out);
    CHECKF(st == 0, "round trip: status %d:\n%s", st, out);
}

TEST(demo_tts_resynth_round_trip)
{
    if (access(".demo/env.sh", R_OK) != 0 && !getenv("HARK_DEMO_ENGINES"))
        SKIP("no espeak-ng engines (tools/demo_engines.sh .demo, or $HARK_DEMO_ENGINES)");
    if (!test_shared("text/ljspeech_transcripts.tsv"))
        SKIP("../shared/data/text is absent (the held-out sentences come from it)");
    const char *py = test_python("numpy");
    if (!py)
        SKIP("no python3 with numpy");
    char why[512];
    const char *voc = golden_tts_model("hifigan_v3_real", "convert_hifigan.py",
                                       "hifigan_v3_real/generator_v3_ljspeech_wn_removed_fp16.pt",
                                       "hifigan_v3/config.json", why, sizeof why);
    if (!voc)
        SKIP(why);
    const char *env = getenv("HARK_DEMO_ENGINES");
    char cmd[1600], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s tools/demo_tts_roundtrip.py --hark '%s' --resynth '%s/m' --engines-env '%s' "
             "--count 10 --max-wer 10 2>&1",
             py, test_hark_bin(), voc, env ? env : ".demo/env.sh");
    int st = test_run_cmd(t, cmd, out, sizeof out);
    printf("    %s", out);
    CHECKF(st == 0 && strstr(out, "espeak-ng through"), "resynthesised round trip: status %d:\n%s",
           st, out);
}
