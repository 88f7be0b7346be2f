/* test.h — hark's tiny test framework: tests register themselves; tests/runner.c runs each in a
 * child process and ends with "N passed, N failed, N skipped". */
#ifndef HARK_TEST_H
#define HARK_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

typedef struct test_ctx test_ctx_t;
typedef struct test_case {
    const char *name;
    const char *file;
    void (*fn)(test_ctx_t *t);
    int gpu; /* 1: needs a GPU; runs under --gpu (and in the default run, skipping if none) */
    struct test_case *next;
} test_case_t;

void test_register(test_case_t *tc);
void test_fail(test_ctx_t *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void test_skip(test_ctx_t *t, const char *reason);
int test_failed(test_ctx_t *t);

/* Absolute path of `rel` under ../shared/data, or NULL when ../shared is absent.
 * Returned pointer is a static buffer per call slot (up to 8 live). */
const char *test_shared(const char *rel);
/* A fresh temporary directory for this test (removed by the runner afterwards). */
const char *test_tmpdir(test_ctx_t *t);
/* Runs cmd through the shell with stdout and stderr into out (n bytes, NUL-terminated, cut to
 * fit); returns its exit status (-1 when it did not exit). */
int test_run_cmd(test_ctx_t *t, const char *cmd, char *out, size_t n);
/* Expected errors stay out of a passing run's log: test_stderr_begin sends this test's stderr
 * (fd 2: hark's log lines, libraries' warnings) to a file, test_stderr_end restores it and puts
 * what was written into out (n bytes, NUL-terminated, cut to fit) for the test to check; returns
 * its length. Check failures still reach the real stderr; a test that returns in between (a
 * failed CHECK) has the captured text printed after it. */
void test_stderr_begin(test_ctx_t *t);
size_t test_stderr_end(test_ctx_t *t, char *out, size_t n);
/* Path of the hark binary (HARK_BIN or build/hark). */
const char *test_hark_bin(void);
/* The python that imports every module of `modules` ("grpc, requests"): Debian's /usr/bin/python3
 * (the one tools/install-deps.sh equips), else the first python3 on PATH; NULL when neither does.
 */
const char *test_python(const char *modules);

/* the JSON document in file `path` (NULL or unreadable: NULL); the caller cJSON_Deletes it */
struct cJSON;
struct cJSON *test_read_json(const char *path);
/* 1 if hark was built with CUDA and a device it can use is present (gpu_usable_count). */
int test_have_gpu(void);
/* Deterministic pseudo-random numbers. */
unsigned test_rand(unsigned *state);
float test_randf(unsigned *state); /* uniform in [-1, 1) */
/* max |a-b| over n elements; NaN in either counts as infinite. */
double test_max_abs_diff(const float *a, const float *b, size_t n);
double test_rel_rms(const float *a, const float *ref, size_t n);

#define TEST_(nm, isgpu)                                                                           \
    static void test_fn_##nm(test_ctx_t *t);                                                       \
    static test_case_t test_tc_##nm = {#nm, __FILE__, test_fn_##nm, isgpu, NULL};                  \
    __attribute__((constructor)) static void test_reg_##nm(void)                                   \
    {                                                                                              \
        test_register(&test_tc_##nm);                                                              \
    }                                                                                              \
    static void test_fn_##nm(test_ctx_t *t)
#define TEST(nm) TEST_(nm, 0)
#define GPU_TEST(nm) TEST_(nm, 1)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            test_fail(t, __FILE__, __LINE__, "%s", #cond);                                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            test_fail(t, __FILE__, __LINE__, __VA_ARGS__);                                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            test_fail(t, __FILE__, __LINE__, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);           \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define CHECK_OK(expr) CHECK_EQ_INT((expr), 0)
#define SKIP(reason)                                                                               \
    do {                                                                                           \
        test_skip(t, reason);                                                                      \
        return;                                                                                    \
    } while (0)
#define NEED_SHARED(rel)                                                                           \
    do {                                                                                           \
        if (!test_shared(rel))                                                                     \
            SKIP("../shared/data/" rel " is absent");                                              \
    } while (0)

#endif
