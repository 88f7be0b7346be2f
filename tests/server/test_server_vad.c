/* Runs tests/server/test_server_vad.py: `hark serve` with the real Silero VAD (converted from
 * ../shared/data/models/silero-vad) answering SEGMENTS for WAV and AUDIO requests, against `hark
 * vad` on the same files. */
#include "test.h"

#include "support/golden_silero.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_vad_end_to_end)
{
    char why[512];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    const char *a = test_shared("audio/en/wav/jfk.wav");
    const char *b = test_shared("audio/en/wav/librispeech-1995-1837-0001.wav");
    if (!a || !b)
        SKIP("../shared/data/audio/en/wav is absent");
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests and numpy is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_vad.py %s %s %s %s",
             test_hark_bin(), m, a, b);
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_vad.py failed (status %d)", st);
}
