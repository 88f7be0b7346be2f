/* demo_models.c — where the bundled demo models are (issue #22): `hark serve` with no
 * --model-repository serves them, `hark transcribe` with no --model uses the demo recogniser and
 * `hark speak` with no --model the demo voice.
 * Looked up, in order: $HARK_DEMO_MODELS; beside the binary as built (build/hark ->
 * models/); as installed (PREFIX/bin/hark -> PREFIX/share/hark/models).
 * Tests: tests/cli/test_demo_models.c */
#include "cli/cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int holds_demo(const char *repo)
{
    char p[PATH_MAX + 64];
    struct stat sb;
    snprintf(p, sizeof p, "%s/" CLI_DEMO_ASR "/config.pbtxt", repo);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int cli_demo_models(char *out, size_t n)
{
    const char *env = getenv("HARK_DEMO_MODELS");
    if (env && *env) {
        if (!holds_demo(env))
            return -1; /* named, but not there: say so rather than look elsewhere */
        snprintf(out, n, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -1;
    *slash = 0; /* the binary's folder */
    static const char *const rel[] = {"/../models", "/../share/hark/models"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char cand[PATH_MAX + 32];
        snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
        char *real = realpath(cand, NULL);
        if (!real)
            continue;
        int ok = holds_demo(real) && strlen(real) < n;
        if (ok)
            snprintf(out, n, "%s", real);
        free(real);
        if (ok)
            return 0;
    }
    return -1;
}

int cli_demo_entry(const char *entry, const char *cmd, const char *what, char *out, size_t n)
{
    char p[PATH_MAX + 64];
    struct stat sb;
    if (cli_demo_models(out, n) != 0)
        return -1;
    int len = snprintf(p, sizeof p, "%s/%s", out, entry);
    if (len < 0 || (size_t)len >= n || (size_t)len + sizeof "/config.pbtxt" > sizeof p)
        return -1;
    memcpy(p + len, "/config.pbtxt", sizeof "/config.pbtxt");
    if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    p[len] = 0;
    memcpy(out, p, (size_t)len + 1);
    fprintf(stderr,
            "hark %s: no --model given: using the bundled %s %s (trained on synthetic speech; see "
            "its README.md)\n",
            cmd, what, out);
    return 0;
}
