/* Tests for tools/demo_text.py and tools/demo_data.py (the synthetic demo corpus, issue 22):
 * tests/tools/demo_data_check.py run with /usr/bin/python3 on a made-up transcript file, with the
 * engines of $HARK_DEMO_ENGINES (an env.sh from tools/demo_engines.sh; default .demo/env.sh when
 * present, else espeak-ng and flite from PATH). Skipped when neither has both engines. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"
#define CHECKER "tests/tools/demo_data_check.py"

TEST(demo_data_corpus)
{
    if (access(PY, X_OK) != 0 || access(CHECKER, R_OK) != 0)
        SKIP(PY " (or " CHECKER ") is absent");
    const char *env = getenv("HARK_DEMO_ENGINES");
    if (!env)
        env = access(".demo/env.sh", R_OK) == 0 ? ".demo/env.sh" : "";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, PY " " CHECKER " '%s' '%s'", test_tmpdir(t), env);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (rc == 77)
        SKIP("espeak-ng or flite is absent (tools/demo_engines.sh .demo makes them)");
    CHECKF(rc == 0, "%s exited with %d", CHECKER, rc);
}
