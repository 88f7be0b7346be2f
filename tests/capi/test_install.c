/* Tests of libhark as others use it: examples/c/transcribe (built by make against
 * build/libhark.so) prints WeNet's golden transcript; `make install` into a temporary PREFIX (and
 * a DESTDIR) lays out bin, lib, include and pkgconfig, and the example compiles against the
 * installed copy with `pkg-config --cflags --libs hark` (shared) and `--static` (libhark.a and
 * Libs.private), and both builds print the same golden transcript. */
#include "test.h"

#include "support/golden_model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* build dir of this test binary (HARK_BUILD from make test, else build) as an absolute path */
static const char *build_dir(void)
{
    static char b[1024];
    const char *e = getenv("HARK_BUILD");
    if (e && *e)
        snprintf(b, sizeof b, "%s", e);
    else if (!realpath("build", b))
        return NULL;
    return b;
}

/* WeNet's transcript of cards-001 with the model's default method (attention rescoring) */
static int golden_text(char *text, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/results.json", test_shared(GOLDEN_WENET));
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    cJSON *j = cJSON_Parse(buf);
    cJSON *s = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "cards-001"), "full"),
                            "attention_rescoring"),
        "text");
    int rc = cJSON_IsString(s) ? (snprintf(text, n, "%s\n", s->valuestring), 0) : -1;
    cJSON_Delete(j);
    return rc;
}

TEST(capi_example_transcribe_golden)
{
    char why[512], cmd[4096], out[8192], want[4096];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *b = build_dir();
    CHECK(b != NULL);
    CHECK_OK(golden_text(want, sizeof want));
    snprintf(cmd, sizeof cmd, "%s/examples/c/transcribe %s/m %s/wavs/cards-001.wav", b, dir,
             test_shared(GOLDEN_WENET));
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(!strcmp(out, want), "example printed '%s', WeNet '%s'", out, want);
    /* it links the shared library */
    snprintf(cmd, sizeof cmd, "ldd %s/examples/c/transcribe | grep -q libhark.so", b);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 0);
    snprintf(cmd, sizeof cmd, "%s/examples/c/transcribe /nonexistent %s/wavs/cards-001.wav", b,
             test_shared(GOLDEN_WENET));
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 1);
    CHECKF(strstr(out, "/nonexistent"), "%s", out);
}

TEST(capi_make_install_pkg_config)
{
    char cmd[8192], out[16384];
    const char *b = build_dir();
    struct stat st;
    if (!b || stat("Makefile", &st) || stat("examples/c/transcribe.c", &st))
        SKIP("not run from the repository root");
    if (system("command -v pkg-config >/dev/null 2>&1"))
        SKIP("pkg-config is not installed");
    const char *tmp = test_tmpdir(t);
    /* build with the flags of the build directory (its stamps), so that make finds its objects
     * up to date: the sanitizer (.flags), whether CUDA was left out (no nvcc named in .nvflags)
     * and the CUDA architectures (the list ending .nvflags: "... | sm_80+...+compute_90") */
    char stamp[1100], flags[4096] = "", nvflags[4096] = "", san[1024] = "";
    for (int i = 0; i < 2; i++) {
        snprintf(stamp, sizeof stamp, "%s/%s", b, i ? ".nvflags" : ".flags");
        char *buf = i ? nvflags : flags;
        FILE *sf = fopen(stamp, "r");
        if (sf) {
            size_t nf = fread(buf, 1, sizeof flags - 1, sf);
            buf[nf] = 0;
            fclose(sf);
        }
    }
    const char *fs = strstr(flags, "-fsanitize=");
    if (fs)
        snprintf(san, sizeof san, "SAN=%.*s", (int)strcspn(fs + 11, " \n"), fs + 11);
    const char *bar = strrchr(nvflags, '|');
    if (!strstr(nvflags, "nvcc") || !bar) {
        snprintf(san + strlen(san), sizeof san - strlen(san), " NO_CUDA=1");
    } else {
        char archs[256] = "", ptx[256] = "";
        for (const char *p = bar + 1; *p;) {
            p += strspn(p, " +\n");
            size_t n = strcspn(p, " +\n");
            if (n > 3 && !strncmp(p, "sm_", 3))
                snprintf(archs + strlen(archs), sizeof archs - strlen(archs), "%s%.*s",
                         archs[0] ? " " : "", (int)(n - 3), p + 3);
            else if (n > 8 && !strncmp(p, "compute_", 8))
                snprintf(ptx + strlen(ptx), sizeof ptx - strlen(ptx), "%s%.*s", ptx[0] ? " " : "",
                         (int)(n - 8), p + 8);
            p += n;
        }
        snprintf(san + strlen(san), sizeof san - strlen(san), " CUDA_ARCHS='%s' CUDA_PTX='%s'",
                 archs, ptx);
    }
    const char *mk = "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s";
    snprintf(cmd, sizeof cmd, "%s BUILD=%s %s install PREFIX=%s/p", mk, b, san, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    static const char *files[] = {"bin/hark", "lib/libhark.a", "lib/libhark.so", "include/hark.h",
                                  "lib/pkgconfig/hark.pc"};
    char path[1024];
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/p/%s", tmp, files[i]);
        CHECKF(stat(path, &st) == 0 && st.st_size > 0, "%s missing", path);
    }
    /* DESTDIR stages the same tree under it, the .pc still naming PREFIX */
    snprintf(cmd, sizeof cmd, "%s BUILD=%s %s install PREFIX=/opt/hark DESTDIR=%s/stage", mk, b,
             san, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd,
             "test -x %s/stage/opt/hark/bin/hark && grep -q '^prefix=/opt/hark$' "
             "%s/stage/opt/hark/lib/pkgconfig/hark.pc",
             tmp, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    /* the example against the installed copy: shared, then static */
    snprintf(cmd, sizeof cmd,
             "export PKG_CONFIG_PATH=%s/p/lib/pkgconfig; "
             "cc -std=c11 -Wall -Werror -o %s/ex_shared examples/c/transcribe.c "
             "$(pkg-config --cflags --libs hark) && "
             "cc -std=c11 -Wall -Werror -o %s/ex_static examples/c/transcribe.c "
             "$(pkg-config --cflags hark) "
             "$(pkg-config --static --libs hark | sed 's|-lhark|%s/p/lib/libhark.a|')",
             tmp, tmp, tmp, tmp);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "! ldd %s/ex_static | grep -q libhark.so", tmp);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 0);
    char why[512], want[4096], got[8192];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why); /* built and installed; running needs the golden model */
    CHECK_OK(golden_text(want, sizeof want));
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s/p/lib %s/%s %s/m %s/wavs/cards-001.wav", tmp,
                 tmp, k ? "ex_static" : "ex_shared", dir, test_shared(GOLDEN_WENET));
        CHECKF(test_run_cmd(t, cmd, got, sizeof got) == 0, "%s", got);
        CHECKF(!strcmp(got, want), "%s printed '%s', WeNet '%s'", k ? "static" : "shared", got,
               want);
    }
}
