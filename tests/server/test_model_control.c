/* Runs tests/server/test_model_control.py: Triton's --model-control-mode none|explicit|poll,
 * --http-restricted-api / --grpc-restricted-protocol, and model names that cannot leave the
 * repository (issue 23, defect 4), on copies of the bundled demo recogniser (models/demo-en-asr:
 * nothing from ../shared). Skips when python3-grpcio / grpc_tools / requests are missing. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(model_control_and_restricted_apis)
{
    /* Debian's python3 (python3-grpcio, python3-grpc-tools), else the first python3 on PATH */
    const char *probe = "-c 'import grpc, grpc_tools.protoc, requests' >/dev/null 2>&1";
    const char *py = "/usr/bin/python3";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", py, probe);
    if (system(cmd) != 0) {
        py = "python3";
        snprintf(cmd, sizeof cmd, "%s %s", py, probe);
        if (system(cmd) != 0)
            SKIP("no python3 with grpcio, grpc_tools and requests (python3-grpcio, "
                 "python3-grpc-tools)");
    }
    snprintf(cmd, sizeof cmd, "%s tests/server/test_model_control.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_model_control.py failed (status %d)", st);
}
