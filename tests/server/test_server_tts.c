/* Runs tests/server/test_server_tts.py: a real `hark serve` on loopback with DLE's converted
 * FastSpeech golden model and the real HiFi-GAN V3 vocoder, under the seed's KServe contract and
 * OpenAI's /v1/audio/speech (streamed), plus bad input. */
#include "test.h"

#include "support/golden_tts.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_tts_end_to_end)
{
    char why[512], fs[600], voc[600];
    if (!test_shared("golden/tts"))
        SKIP("../shared/data/golden/tts is absent");
    const char *d =
        golden_tts_model("fastspeech", "convert_fastspeech.py", "fastspeech/checkpoint_000000.pt",
                         "fastspeech/config.json", why, sizeof why);
    if (!d)
        SKIP(why);
    snprintf(fs, sizeof fs, "%s/m", d);
    d = golden_tts_model("hifigan_v3_real", "convert_hifigan.py",
                         "hifigan_v3_real/generator_v3_ljspeech_wn_removed_fp16.pt",
                         "hifigan_v3/config.json", why, sizeof why);
    if (!d)
        SKIP(why);
    snprintf(voc, sizeof voc, "%s/m", d);
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests and numpy is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_tts.py %s %s %s",
             test_hark_bin(), fs, voc);
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_tts.py failed (status %d)", st);
}
