/* Runs tests/server/test_server_long.py: `hark serve` with the bundled demo recognizer naming the
 * real Silero VAD (converted from ../shared/data/models/silero-vad) as its vad_model, and the
 * same recognizer without one (windows): a file over a minute through OpenAI's transcriptions
 * and KServe AUDIO against `hark transcribe --vad`, and 413 over --max-audio-seconds. */
#include "test.h"

#include "support/golden_silero.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_long_audio)
{
    char why[512];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests and numpy is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_long.py %s %s",
             test_hark_bin(), m);
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_long.py failed (status %d)", st);
}
