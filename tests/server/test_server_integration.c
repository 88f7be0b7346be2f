/* Runs tests/server/test_server.py: a real `hark serve` on loopback with the golden WeNet model,
 * driven with Python's requests and curl (KServe v2 JSON and binary, AUDIO, errors, 408/413,
 * statistics, OpenAI formats, concurrency, metrics, repository load/unload, graceful drain). */
#include "test.h"

#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_end_to_end)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    if (system("/usr/bin/python3 -c 'import requests' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with requests is absent");
    if (system("command -v curl >/dev/null 2>&1") != 0)
        SKIP("curl is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server.py %s %s/m %s",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server.py failed (status %d)", st);
}
