/* Runs tests/server/test_sequence.py: a real `hark serve` with the golden WeNet U2++ model under a
 * sequence_batching config like WeNet's streaming_wenet, driven chunk by chunk over HTTP, gRPC
 * ModelInfer and ModelStreamInfer (partial and final transcripts against WeNet's streaming
 * goldens, interleaved sequences, pool exhausted, idle timeout, unknown sequence, a client that
 * goes away). Skips when python3-grpcio / grpc_tools are missing. */
#include "test.h"

#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>

TEST(sequence_end_to_end)
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
    snprintf(cmd, sizeof cmd, "%s tests/server/test_sequence.py %s %s/m %s", py, test_hark_bin(),
             dir, test_shared(GOLDEN_WENET));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_sequence.py failed (status %d)", st);
}
