/* Runs tests/server/test_server_queue.py: max_queue_size counts requests and a request of several
 * batch items is queued or refused whole (issue 23), through `hark serve` with the bundled demo
 * recognizer (no ../shared needed). */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_queue_counts_requests_not_items)
{
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with requests and numpy (python3-requests, python3-numpy)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_server_queue.py %s",
             test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_queue.py failed (status %d)", st);
}
