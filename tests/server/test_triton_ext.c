/* Runs tests/server/test_triton_ext.py: Triton's logging, trace and system shared memory
 * extensions over HTTP and gRPC (issue 23, Server), on a copy of the bundled demo recogniser
 * (models/demo-en-asr: nothing from ../shared). The gRPC half is skipped inside the script when
 * python3-grpcio / grpc_tools are missing; the test skips without requests and numpy. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(triton_logging_trace_and_shared_memory)
{
    /* Debian's python3 (python3-requests, python3-numpy), else the first python3 on PATH */
    const char *probe = "-c 'import requests, numpy' >/dev/null 2>&1";
    const char *py = "/usr/bin/python3";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", py, probe);
    if (system(cmd) != 0) {
        py = "python3";
        snprintf(cmd, sizeof cmd, "%s %s", py, probe);
        if (system(cmd) != 0)
            SKIP("no python3 with requests and numpy");
    }
    snprintf(cmd, sizeof cmd, "%s tests/server/test_triton_ext.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_triton_ext.py failed (status %d)", st);
}
