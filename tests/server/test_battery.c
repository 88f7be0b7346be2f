/* Runs tests/server/test_battery.py: the reliability battery of issue 23 (malformed HTTP,
 * slowloris, pipelining without reading, resets, idle connections, lying sizes, bad audio and
 * KServe inputs, bad repositories, load/unload under traffic, overload, SIGTERM in flight, a
 * short soak) against `hark serve` with copies of the bundled demo recognizer (no ../shared).
 * The full-size battery is tools/battery.sh. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

TEST(serve_reliability_battery)
{
    if (system("/usr/bin/python3 -c 'import requests, numpy' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with requests and numpy (python3-requests, python3-numpy)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/server/test_battery.py %s", test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_battery.py failed (status %d)", st);
}
