/* runner.c — runs every registered test in its own child process (a crash fails one test, not
 * the run) and prints "N passed, N failed, N skipped" last.
 * Usage: hark_tests [--gpu] [--list] [-v] [FILTER...]   (FILTER: substring of test or file) */
#include "test.h"

#include "gpu/gpu.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <execinfo.h>
#include <signal.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct test_ctx {
    int failed, skipped;
    char tmp[256];
    int out_fd;    /* pipe to parent: status line */
    int capturing; /* test_stderr_begin: fd 2 goes to err_path, the real one is saved_err */
    int saved_err;
    char err_path[300];
};

static test_case_t *tests_head;
static test_case_t **tests_tail = &tests_head;

void test_register(test_case_t *tc)
{
    *tests_tail = tc;
    tests_tail = &tc->next;
}

void test_fail(test_ctx_t *t, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stderr);
    dprintf(t->capturing ? t->saved_err : 2, "    %s:%d: check failed: %s\n", file, line, msg);
    t->failed = 1;
}

void test_stderr_begin(test_ctx_t *t)
{
    if (t->capturing)
        return;
    snprintf(t->err_path, sizeof t->err_path, "%s/stderr-capture", test_tmpdir(t));
    int fd = open(t->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    fflush(stderr);
    t->saved_err = dup(2);
    dup2(fd, 2);
    close(fd);
    t->capturing = 1;
}

size_t test_stderr_end(test_ctx_t *t, char *out, size_t n)
{
    if (n)
        out[0] = 0;
    if (!t->capturing)
        return 0;
    fflush(stderr);
    dup2(t->saved_err, 2);
    close(t->saved_err);
    t->capturing = 0;
    FILE *f = fopen(t->err_path, "r");
    size_t k = f && n ? fread(out, 1, n - 1, f) : 0;
    if (n)
        out[k] = 0;
    if (f)
        fclose(f);
    unlink(t->err_path);
    return k;
}

void test_skip(test_ctx_t *t, const char *reason)
{
    dprintf(t->out_fd, "%s", reason);
    t->skipped = 1;
}

int test_failed(test_ctx_t *t)
{
    return t->failed;
}

const char *test_shared(const char *rel)
{
    static char bufs[8][1024];
    static int slot;
    const char *root = getenv("HARK_SHARED");
    char *b = bufs[slot++ % 8];
    snprintf(b, 1024, "%s/data/%s", root ? root : "../shared", rel);
    char *abs = realpath(b, NULL);
    if (!abs)
        return NULL;
    snprintf(b, 1024, "%s", abs);
    free(abs);
    return b;
}

const char *test_tmpdir(test_ctx_t *t)
{
    if (!t->tmp[0]) {
        snprintf(t->tmp, sizeof t->tmp, "/tmp/hark-test-XXXXXX");
        if (!mkdtemp(t->tmp))
            t->tmp[0] = 0;
    }
    return t->tmp;
}

int test_run_cmd(test_ctx_t *t, const char *cmd, char *out, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/cmd-out", test_tmpdir(t));
    size_t len = strlen(cmd) + strlen(path) + 16;
    char *full = malloc(len);
    if (!full) {
        out[0] = 0;
        return -1;
    }
    snprintf(full, len, "%s >%s 2>&1", cmd, path);
    int st = system(full);
    free(full);
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;
    out[k] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *test_hark_bin(void)
{
    const char *b = getenv("HARK_BIN");
    return b ? b : "build/hark";
}

const char *test_python(const char *modules)
{
    static const char *const pys[2] = {"/usr/bin/python3", "python3"};
    char cmd[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import %s' >/dev/null 2>&1", pys[i], modules);
        if (system(cmd) == 0)
            return pys[i];
    }
    return NULL;
}

int test_have_gpu(void)
{
    return gpu_usable_count() > 0; /* a device hark can use under HARK_GPU_ARCH (issue 24) */
}

unsigned test_rand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

float test_randf(unsigned *s)
{
    return (float)test_rand(s) / (float)(1u << 23) - 1.0f;
}

double test_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d != d)
            return INFINITY;
        if (d > m)
            m = d;
    }
    return m;
}

double test_rel_rms(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (num != num)
        return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* In a test child: print where a crash happened, then die of the same signal. */
static void crash_handler(int sig)
{
    void *frames[64];
    int n = backtrace(frames, 64);
    static const char msg[] = "    crashed; backtrace:\n";
    (void)!write(2, msg, sizeof msg - 1);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static int matches(const test_case_t *tc, int nfilt, char **filt)
{
    if (!nfilt)
        return 1;
    for (int i = 0; i < nfilt; i++)
        if (strstr(tc->name, filt[i]) || strstr(tc->file, filt[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int gpu_only = 0, list = 0, verbose = 0, nfilt = 0;
    char **filt = calloc((size_t)argc, sizeof *filt);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gpu"))
            gpu_only = 1;
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else
            filt[nfilt++] = argv[i];
    }
    /* a mistyped HARK_GPU_ARCH would quietly skip every GPU test: refuse it up front */
    gpu_force_t force;
    hark_err_t ferr = {0};
    if (gpu_force_parse(getenv("HARK_GPU_ARCH"), &force, &ferr) != 0) {
        fprintf(stderr, "hark_tests: %s\n", ferr.msg);
        free(filt);
        return 2;
    }
    int passed = 0, failed = 0, skipped = 0;
    for (test_case_t *tc = tests_head; tc; tc = tc->next) {
        if (gpu_only && !tc->gpu)
            continue;
        if (!matches(tc, nfilt, filt))
            continue;
        if (list) {
            printf("%s%s (%s)\n", tc->name, tc->gpu ? " [gpu]" : "", tc->file);
            continue;
        }
        fflush(stdout);
        int pfd[2];
        if (pipe(pfd) != 0)
            return 2;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            close(pfd[0]);
            setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the log even if the test crashes */
            signal(SIGSEGV, crash_handler);
            signal(SIGBUS, crash_handler);
            signal(SIGFPE, crash_handler);
            test_ctx_t ctx = {0};
            ctx.out_fd = pfd[1];
            if (tc->gpu && !test_have_gpu()) {
                /* a GPU that is there but refused (HARK_GPU_ARCH, too old, no code): say why */
                static char why[600];
                hark_err_t e = {0};
                if (gpu_device_count() > 0 && gpu_device_path_quiet(0, &e) == GPU_PATH_NONE)
                    snprintf(why, sizeof why, "GPU 0 cannot be used: %s", e.msg);
                else
                    snprintf(why, sizeof why,
                             "no CUDA device hark can use (or built without CUDA)");
                test_skip(&ctx, why);
            } else
                tc->fn(&ctx);
            if (ctx.capturing) { /* left by a failed check: show what the test had captured */
                static char held[16384];
                if (test_stderr_end(&ctx, held, sizeof held))
                    fprintf(stderr, "    stderr of the test:\n%s", held);
            }
            if (ctx.tmp[0] && !getenv("HARK_KEEP_TMP"))
                nftw(ctx.tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
            fflush(stdout);
            fflush(stderr);
            free(filt); /* the parent's; LeakSanitizer would blame it on the test */
            exit(ctx.failed    ? 1
                 : ctx.skipped ? 3
                               : 0); /* exit, not _exit: LeakSanitizer runs at exit */
        }
        close(pfd[1]);
        char reason[512] = "";
        ssize_t n, off = 0;
        while ((n = read(pfd[0], reason + off, sizeof reason - 1 - (size_t)off)) > 0)
            off += n;
        reason[off] = 0;
        close(pfd[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
            if (verbose)
                printf("PASS %s (%.0f ms)\n", tc->name, ms);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
            skipped++;
            printf("SKIP %s: %s\n", tc->name, reason);
        } else {
            failed++;
            if (WIFSIGNALED(st))
                printf("FAIL %s (%s) killed by signal %d\n", tc->name, tc->file, WTERMSIG(st));
            else
                printf("FAIL %s (%s)\n", tc->name, tc->file);
        }
    }
    free(filt);
    if (!list)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

cJSON *test_read_json(const char *path)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[got] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}
