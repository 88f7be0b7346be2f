/* Runs tests/server/test_websocket.py: a real `hark serve` with the golden WeNet U2++ model under
 * sequence_batching, driven over WeNet's WebSocket protocol on the HTTP port by a raw-socket
 * client (start, PCM frames, end: partial results, the final one against WeNet's streaming
 * golden, speech_end; protocol errors; a client that goes away; SIGTERM with a session open).
 * Skips when python3-requests is missing. */
#include "test.h"

#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>

TEST(websocket_end_to_end)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *py = "/usr/bin/python3";
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -c 'import requests' >/dev/null 2>&1", py);
    if (system(cmd) != 0) {
        py = "python3";
        snprintf(cmd, sizeof cmd, "%s -c 'import requests' >/dev/null 2>&1", py);
        if (system(cmd) != 0)
            SKIP("no python3 with requests (python3-requests)");
    }
    snprintf(cmd, sizeof cmd, "%s tests/server/test_websocket.py %s %s/m %s", py, test_hark_bin(),
             dir, test_shared(GOLDEN_WENET));
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_websocket.py failed (status %d)", st);
}
