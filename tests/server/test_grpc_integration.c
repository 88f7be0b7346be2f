/* Runs tests/server/test_grpc.py: a real `hark serve` on loopback with the golden WeNet model,
 * driven over gRPC with grpcio (every RPC, transcripts equal to the HTTP path's, ModelStreamInfer,
 * error codes, graceful drain). Skips when python3-grpcio / grpc_tools are missing. */
#include "test.h"

#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>

TEST(grpc_end_to_end)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *py = test_python("grpc, grpc_tools.protoc, requests");
    if (!py)
        SKIP("no python3 with grpcio, grpc_tools and requests (python3-grpcio, "
             "python3-grpc-tools)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_grpc.py %s %s/m %s", py, test_hark_bin(), dir,
             test_shared(GOLDEN_WENET));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_grpc.py failed (status %d)", st);
}
