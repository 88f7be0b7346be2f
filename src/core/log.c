/* log.c — leveled logging with a replaceable, serialised sink.
 * Tests: tests/core/test_core.c */
#include "core/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int log_current_level = LOG_LEVEL_INFO;
static log_sink_fn sink_fn;
static void *sink_user;
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void log_set_level(log_level_t level)
{
    log_current_level = (int)level;
}

log_level_t log_get_level(void)
{
    return (log_level_t)log_current_level;
}

int log_parse_level(const char *name, log_level_t *out)
{
    for (int i = 0; i < 5; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (log_level_t)i;
            return 0;
        }
    }
    return -1;
}

void log_set_sink(log_sink_fn fn, void *user)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = fn;
    sink_user = user;
    pthread_mutex_unlock(&sink_lock);
}

void log_write(log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    pthread_mutex_lock(&sink_lock);
    if (sink_fn) {
        sink_fn(sink_user, level, base, line, msg);
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s %s:%d: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
                ts.tv_nsec / 1000000, level_names[level], base, line, msg);
    }
    pthread_mutex_unlock(&sink_lock);
}
