/* Tests for src/core: status strings, logging sink, allocation hook, arena, queue, clock. */
#include "test.h"

#include "core/alloc.h"
#include "core/arena.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/queue.h"
#include "hark.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

TEST(status_strings)
{
    CHECK(strcmp(hark_status_str(HARK_OK), "ok") == 0);
    CHECK(strcmp(hark_status_str(HARK_ERR_NOMEM), "out of memory") == 0);
    CHECK(strcmp(hark_status_str(12345), "unknown status") == 0);
    for (int s = HARK_ERR_UNAVAILABLE; s <= 0; s++)
        CHECK(strcmp(hark_status_str(s), "unknown status") != 0);
}

struct sink_capture {
    int calls;
    log_level_t level;
    char msg[256];
};

static void capture_sink(void *user, log_level_t level, const char *file, int line, const char *msg)
{
    struct sink_capture *c = user;
    c->calls++;
    c->level = level;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
}

TEST(log_sink_and_level)
{
    struct sink_capture c = {0};
    log_set_sink(capture_sink, &c);
    log_set_level(LOG_LEVEL_WARN);
    LOG_INFO("hidden %d", 1);
    CHECK_EQ_INT(c.calls, 0);
    LOG_ERROR("shown %d", 42);
    CHECK_EQ_INT(c.calls, 1);
    CHECK(c.level == LOG_LEVEL_ERROR);
    CHECK(strcmp(c.msg, "shown 42") == 0);
    log_level_t l;
    CHECK_OK(log_parse_level("debug", &l));
    CHECK(l == LOG_LEVEL_DEBUG);
    CHECK(log_parse_level("loud", &l) != 0);
    log_set_sink(NULL, NULL);
}

/* Triton's logging settings on the same logger: each of error / warning / info switched by
 * itself, a verbose level that lets debug (1) and trace (2) lines through, and log_set_level
 * setting them all at once. */
TEST(log_severities_and_verbose_level)
{
    struct sink_capture c = {0};
    log_level_t saved = log_get_level();
    log_set_sink(capture_sink, &c);
    log_set_level(LOG_LEVEL_INFO);
    CHECK(log_enabled(LOG_LEVEL_INFO) && log_enabled(LOG_LEVEL_WARN) &&
          log_enabled(LOG_LEVEL_ERROR) && log_get_verbose() == 0);
    log_set_enabled(LOG_LEVEL_WARN, 0); /* warnings off, info and errors still on */
    LOG_WARN("hidden");
    CHECK_EQ_INT(c.calls, 0);
    LOG_INFO("info");
    LOG_ERROR("error");
    CHECK_EQ_INT(c.calls, 2);
    log_set_enabled(LOG_LEVEL_INFO, 0);
    LOG_INFO("hidden");
    CHECK_EQ_INT(c.calls, 2);
    LOG_DEBUG("hidden");
    CHECK_EQ_INT(c.calls, 2);
    log_set_verbose(1); /* debug lines pass; info stays off */
    LOG_DEBUG("debug");
    CHECK_EQ_INT(c.calls, 3);
    CHECK(c.level == LOG_LEVEL_DEBUG);
    LOG_INFO("hidden");
    LOG_AT(LOG_LEVEL_TRACE, "hidden");
    CHECK_EQ_INT(c.calls, 3);
    log_set_verbose(5);
    CHECK_EQ_INT(log_get_verbose(), 5);
    LOG_AT(LOG_LEVEL_TRACE, "trace");
    CHECK_EQ_INT(c.calls, 4);
    log_set_verbose(0);
    log_set_enabled(LOG_LEVEL_ERROR, 0); /* everything off */
    LOG_ERROR("hidden");
    CHECK_EQ_INT(c.calls, 4);
    log_set_level(LOG_LEVEL_DEBUG); /* all on again, verbose 1 */
    CHECK(log_enabled(LOG_LEVEL_INFO) && log_enabled(LOG_LEVEL_WARN) && log_get_verbose() == 1);
    log_set_format(LOG_FORMAT_ISO8601);
    CHECK(log_get_format() == LOG_FORMAT_ISO8601);
    log_set_format(LOG_FORMAT_DEFAULT);
    log_set_sink(NULL, NULL);
    log_set_level(saved);
}

TEST(alloc_fail_nth)
{
    alloc_fail_after(3);
    void *a = hark_malloc(10), *b = hark_malloc(10), *c = hark_malloc(10), *d = hark_malloc(1);
    CHECK(a && b);
    CHECK(c == NULL && d == NULL);
    alloc_fail_reset();
    void *e = hark_malloc(10);
    CHECK(e != NULL);
    hark_free(a);
    hark_free(b);
    hark_free(e);
    CHECK(hark_calloc(SIZE_MAX / 2, 4) == NULL); /* overflow is caught */
}

TEST(arena_alloc_align_reset)
{
    arena_t a;
    arena_init(&a, 128);
    char *p = arena_alloc(&a, 3, 1);
    double *q = arena_alloc(&a, sizeof(double) * 4, 16);
    void *q64 = arena_alloc(&a, 8, 64);
    CHECK(q64 && ((uintptr_t)q64 & 63) == 0);
    CHECK(p && q);
    CHECK(((uintptr_t)q & 15) == 0);
    void *big = arena_alloc(&a, 1000, 8); /* larger than a block */
    CHECK(big != NULL);
    memset(big, 1, 1000);
    char *s = arena_strndup(&a, "hello world", 5);
    CHECK(strcmp(s, "hello") == 0);
    arena_reset(&a);
    CHECK_EQ_INT(a.used_total, 0);
    CHECK(arena_alloc(&a, 16, 8) != NULL);
    arena_free(&a);
    /* out-of-memory path */
    arena_init(&a, 64);
    alloc_fail_after(1);
    CHECK(arena_alloc(&a, 8, 8) == NULL);
    alloc_fail_reset();
    arena_free(&a);
}

struct producer_arg {
    queue_t *q;
    int n;
};

static void *producer(void *p)
{
    struct producer_arg *a = p;
    for (int i = 1; i <= a->n; i++)
        while (queue_push(a->q, (void *)(intptr_t)i) == HARK_ERR_AGAIN)
            usleep(10);
    return NULL;
}

TEST(queue_fifo_bounded_wake_close)
{
    queue_t q;
    CHECK_OK(queue_init(&q, 2));
    void *out;
    CHECK_EQ_INT(queue_pop(&q, &out, 0), HARK_ERR_TIMEOUT);
    CHECK_OK(queue_push(&q, (void *)1));
    CHECK_OK(queue_push(&q, (void *)2));
    CHECK_EQ_INT(queue_push(&q, (void *)3), HARK_ERR_AGAIN);
    CHECK_OK(queue_pop(&q, &out, -1));
    CHECK(out == (void *)1);
    queue_wake(&q);
    CHECK_OK(queue_pop(&q, &out, -1)); /* items come before wake-ups */
    CHECK(out == (void *)2);
    CHECK_EQ_INT(queue_pop(&q, &out, -1), HARK_ERR_AGAIN);
    uint64_t t0 = clock_now_ns();
    CHECK_EQ_INT(queue_pop(&q, &out, 20 * 1000 * 1000), HARK_ERR_TIMEOUT);
    CHECK(clock_now_ns() - t0 >= 19 * 1000 * 1000);
    /* producer thread, consumer here: order preserved */
    struct producer_arg pa = {&q, 1000};
    pthread_t th;
    pthread_create(&th, NULL, producer, &pa);
    for (int i = 1; i <= 1000; i++) {
        CHECK_OK(queue_pop(&q, &out, -1));
        CHECK_EQ_INT((intptr_t)out, i);
    }
    pthread_join(th, NULL);
    CHECK_OK(queue_push(&q, (void *)7));
    queue_close(&q);
    CHECK_EQ_INT(queue_push(&q, (void *)8), HARK_ERR_CLOSED);
    CHECK_OK(queue_pop(&q, &out, -1)); /* drains */
    CHECK_EQ_INT(queue_pop(&q, &out, -1), HARK_ERR_CLOSED);
    queue_free(&q);
}

TEST(clock_monotonic)
{
    uint64_t a = clock_now_ns();
    usleep(2000);
    uint64_t b = clock_now_ns();
    CHECK(b > a && b - a >= 1900000);
}

#include "core/assert.h"
TEST(assert_aborts)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", 1);
        dup2(fd, 2);
        HARK_ASSERT(1 + 1 == 3);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st));
}

#include "core/error.h"
TEST(error_set_and_prefix)
{
    hark_err_t e = {0};
    CHECK_EQ_INT(err_set(&e, HARK_ERR_FORMAT, "bad %s", "header"), HARK_ERR_FORMAT);
    CHECK(strcmp(e.msg, "bad header") == 0);
    CHECK_EQ_INT(err_prefix(&e, HARK_ERR_IO, "a.wav"), HARK_ERR_FORMAT);
    CHECK(strcmp(e.msg, "a.wav: bad header") == 0);
    CHECK_EQ_INT(err_set(NULL, HARK_ERR_IO, "x"), HARK_ERR_IO);
    /* the one wording of a range error */
    CHECK_EQ_INT(err_range(&e, "beam_size", 1, 1000, -5), HARK_ERR_INVALID_ARG);
    CHECK(strcmp(e.msg, "beam_size must be in [1, 1000] (got -5)") == 0);
}

/* core/dtype.h: one table serves the KServe and config.pbtxt spellings and the sizes */
#include "core/dtype.h"
TEST(dtype_table_round_trips)
{
    CHECK_EQ_INT(dtype_from_kserve("FP32"), DTYPE_FP32);
    CHECK_EQ_INT(dtype_from_kserve("BYTES"), DTYPE_BYTES);
    CHECK_EQ_INT(dtype_from_kserve("TYPE_FP32"), DTYPE_INVALID);
    CHECK_EQ_INT(dtype_from_kserve("INVALID"), DTYPE_INVALID);
    CHECK(!strcmp(dtype_config_name(DTYPE_BYTES), "TYPE_STRING"));
    CHECK(!strcmp(dtype_kserve_name((dtype_t)99), "INVALID"));
    for (int i = 1; i < DTYPE_COUNT; i++) {
        CHECK_EQ_INT(dtype_from_kserve(dtype_kserve_name((dtype_t)i)), i);
        CHECK(!strcmp(dtype_config_names[i], dtype_config_name((dtype_t)i)));
    }
    CHECK(dtype_config_names[DTYPE_COUNT] == NULL);
    CHECK_EQ_INT(dtype_size(DTYPE_FP16), 2);
    CHECK_EQ_INT(dtype_size(DTYPE_INT64), 8);
    CHECK_EQ_INT(dtype_size(DTYPE_BYTES), 0);
}
