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
    /* Debian's python3 (CI), else the first python3 on PATH with requests (the GPU machine) */
    const char *py = "/usr/bin/python3";
    if (system("/usr/bin/python3 -c 'import requests' >/dev/null 2>&1") != 0) {
        py = "python3";
        if (system("python3 -c 'import requests' >/dev/null 2>&1") != 0)
            SKIP("no python3 with requests");
    }
    if (system("command -v curl >/dev/null 2>&1") != 0)
        SKIP("curl is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_server.py %s %s/m %s", py, test_hark_bin(), dir,
             test_shared(GOLDEN_WENET));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server.py failed (status %d)", st);
}
