/* Runs tests/server/test_model_control.py: Triton's --model-control-mode none|explicit|poll,
 * --http-restricted-api / --grpc-restricted-protocol, and model names that cannot leave the
 * repository (issue 23, defect 4), on copies of the bundled demo recogniser (models/demo-en-asr:
 * nothing from ../shared). Skips when python3-grpcio / grpc_tools / requests are missing. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(model_control_and_restricted_apis)
{
    const char *py = test_python("grpc, grpc_tools.protoc, requests");
    if (!py)
        SKIP("no python3 with grpcio, grpc_tools and requests (python3-grpcio, "
             "python3-grpc-tools)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_model_control.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_model_control.py failed (status %d)", st);
}
