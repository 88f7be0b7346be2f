/* The bundled demo models (issue #22): `hark transcribe` with no --model decodes the bundled
 * synthetic examples (examples/demo-en, voices and sentences held out of training) to their exact
 * text with models/demo-en-asr on the CPU; a missing demo repository is a clear error; `hark
 * serve` with no --model-repository serves the demo models (tests/server/test_demo_serve.py). */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define EX "examples/demo-en"

/* runs cmd, its stdout into out (n bytes); returns the exit status (-1 when it did not exit) */
static int capture(const char *cmd, char *out, size_t n)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(demo_recogniser_exact_text_on_bundled_examples)
{
    FILE *f = fopen(EX "/trans.txt", "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        *sp = 0;
        const char *key = line, *ref = sp + 1;
        char cmd[2048], out[4096];
        snprintf(cmd, sizeof cmd, "%s transcribe " EX "/%s.wav 2>%s/err.txt", test_hark_bin(),
                 key, test_tmpdir(t));
        int st = capture(cmd, out, sizeof out);
        CHECKF(st == 0, "%s: exit status %d", key, st);
        out[strcspn(out, "\n")] = 0;
        const char *text = strchr(out, ' ');
        text = text ? text + 1 : "";
        CHECKF(!strcmp(text, ref), "%s: got '%s', expected '%s'", key, text, ref);
        n++;
    }
    fclose(f);
    CHECK(n >= 4);
    char p[1024], err[1024] = "";
    snprintf(p, sizeof p, "%s/err.txt", test_tmpdir(t));
    FILE *e = fopen(p, "r");
    if (e) {
        size_t len = fread(err, 1, sizeof err - 1, e);
        err[len] = 0;
        fclose(e);
    }
    CHECKF(strstr(err, "bundled demo recogniser") != NULL, "no note on stderr: '%s'", err);
}

TEST(demo_models_missing_is_a_clear_error)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "HARK_DEMO_MODELS=/nonexistent %s transcribe " EX "/x.wav 2>&1",
             test_hark_bin());
    CHECK(capture(cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "needs --model") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "HARK_DEMO_MODELS=/nonexistent %s serve --http-port 0 2>&1",
             test_hark_bin());
    CHECK(capture(cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "bundled demo models") && strstr(out, "not there"), "%s", out);
}

TEST(demo_models_served_without_a_repository)
{
    const char *py = "/usr/bin/python3";
    if (system("/usr/bin/python3 -c 'import requests' >/dev/null 2>&1") != 0)
        SKIP("no /usr/bin/python3 with requests (python3-requests)");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s tests/server/test_demo_serve.py %s", py, test_hark_bin());
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_demo_serve.py failed (status %d)", st);
}
