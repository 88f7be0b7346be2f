/* Runs tests/server/test_server_stats.py: batch_stats, compute_input, refusals counted as
 * failures, KIND_CPU for an instance that fell back, /v1/audio/translations and OpenAI error
 * objects (issue 23), through `hark serve` with the bundled demo recognizer. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_statistics_and_openai_errors)
{
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with requests and numpy (python3-requests, python3-numpy)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_stats.py %s",
             test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_stats.py failed (status %d)", st);
}
