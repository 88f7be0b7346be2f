/* Runs tests/server/test_server_jasper.py: a real `hark serve` on loopback with DLE's converted
 * Jasper golden model, under the generic contract and DLE's Triton ensemble contract, plus
 * OpenAI transcriptions and bad input. */
#include "test.h"

#include "support/golden_jasper.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_jasper_end_to_end)
{
    char why[512];
    const char *dir = golden_jasper_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    if (!test_shared("audio/en/wav/jfk.wav"))
        SKIP("../shared/data/audio/en/wav is absent");
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests and numpy is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_jasper.py %s %s/m %s %s",
             test_hark_bin(), dir, test_shared(GOLDEN_JASPER), test_shared("audio/en/wav"));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_jasper.py failed (status %d)", st);
}
