/* Runs tests/server/test_live_page.py: the live page of `hark serve` in Debian's headless
 * Chromium (chromedriver, python3-selenium) with a speech file as the microphone, against the
 * golden WeNet model under sequence_batching. Skips when Chromium, its driver or the Python
 * modules are absent (tools/install-deps.sh installs them). */
#include "test.h"

#include "support/golden_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TEST(serve_live_page_in_chromium)
{
    char why[512];
    if (access("/usr/bin/chromium", X_OK) || access("/usr/bin/chromedriver", X_OK))
        SKIP("Debian's chromium and chromium-driver are absent");
    if (system("/usr/bin/python3 -c 'import selenium, websocket, numpy, requests' "
               ">/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with selenium, websocket, numpy and requests is absent");
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *wav = test_shared("golden/wenet_u2pp_conformer_small/wavs/LJ001-0002.wav");
    if (!wav)
        SKIP("the golden wav is absent");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_live_page.py %s %s/m %s",
             test_hark_bin(), dir, wav);
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_live_page.py failed (status %d)", st);
}
