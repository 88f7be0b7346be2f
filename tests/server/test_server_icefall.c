/* Runs tests/server/test_server_icefall.py: a real `hark serve` on loopback with icefall's
 * converted T1 golden model (family icefall_transducer) under the generic contract, with
 * decoding_method and beam_size from config.pbtxt and from the request, OpenAI transcriptions and
 * bad input. */
#include "test.h"

#include "support/golden_icefall.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_icefall_end_to_end)
{
    char why[512];
    const char *dir = golden_icefall_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests and numpy is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_icefall.py %s %s/m %s",
             test_hark_bin(), dir, test_shared(GOLDEN_ICEFALL));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_icefall.py failed (status %d)", st);
}
