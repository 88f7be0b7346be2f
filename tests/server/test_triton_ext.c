/* Runs tests/server/test_triton_ext.py: Triton's logging, trace and system shared memory
 * extensions over HTTP and gRPC (issue 23, Server), on a copy of the bundled demo recogniser
 * (models/demo-en-asr: nothing from ../shared). The gRPC half is skipped inside the script when
 * python3-grpcio / grpc_tools are missing; the test skips without requests and numpy. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(triton_logging_trace_and_shared_memory)
{
    const char *py = test_python("requests, numpy");
    if (!py)
        SKIP("no python3 with requests and numpy");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_triton_ext.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_triton_ext.py failed (status %d)", st);
}
