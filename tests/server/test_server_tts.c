/* Runs tests/server/test_server_tts.py: a real `hark serve` on loopback with DLE's converted
 * FastSpeech golden model and the real HiFi-GAN V3 vocoder, under the seed's KServe contract and
 * OpenAI's /v1/audio/speech (streamed), plus bad input. */
#include "test.h"

#include "support/golden_model.h"
#include "support/golden_tts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* DLE's Tacotron 2 + WaveGlow goldens, converted (as tests/cli/test_cli_speak_tacotron2.c) */
    char t2[600] = "", wg[600] = "", ck[700], args[900];
    const char *g = test_shared(GOLDEN_TTS "/tacotron2/checkpoint_Tacotron2_0.pt");
    const char *g2 = test_shared(GOLDEN_TTS "/waveglow/checkpoint_WaveGlow_0.pt");
    if (g && g2) {
        snprintf(ck, sizeof ck, "%s", g);
        snprintf(args, sizeof args, "--checkpoint '%s'", ck);
        CHECKF(golden_convert_cached("tacotron2", "convert_tacotron2.py", ck, args, t2, sizeof t2,
                                     why, sizeof why),
               "%s", why);
        snprintf(ck, sizeof ck, "%s", g2);
        snprintf(args, sizeof args, "--checkpoint '%s'", ck);
        CHECKF(golden_convert_cached("waveglow", "convert_waveglow.py", ck, args, wg, sizeof wg,
                                     why, sizeof why),
               "%s", why);
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_tts.py %s %s %s%s%s%s%s",
             test_hark_bin(), fs, voc, t2[0] ? " " : "", t2[0] ? t2 : "", t2[0] ? "/m " : "",
             wg[0] ? wg : "");
    if (wg[0])
        strcat(cmd, "/m");
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_tts.py failed (status %d)", st);
}
