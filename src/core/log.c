/* log.c — leveled logging with a replaceable, serialised sink.
 * Tests: tests/core/test_core.c */
#include "core/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int log_current_level = LOG_LEVEL_INFO;
/* Triton's settings: a bit per severity (error, warn, info) and the verbose level; the threshold
 * log_current_level follows from them (the macros' cheap test), the bits are checked here */
static atomic_uint enabled_bits =
    (1u << LOG_LEVEL_ERROR) | (1u << LOG_LEVEL_WARN) | (1u << LOG_LEVEL_INFO);
static atomic_uint verbose_level;
static atomic_int line_format = LOG_FORMAT_DEFAULT;
static log_sink_fn sink_fn;
static void *sink_user;
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static void update_threshold(void)
{
    unsigned v = atomic_load(&verbose_level), bits = atomic_load(&enabled_bits);
    int t = -1;
    if (v)
        t = v >= 2 ? LOG_LEVEL_TRACE : LOG_LEVEL_DEBUG;
    else
        for (int l = LOG_LEVEL_INFO; l >= LOG_LEVEL_ERROR && t < 0; l--)
            if (bits & (1u << l))
                t = l;
    __atomic_store_n(&log_current_level, t, __ATOMIC_RELAXED);
}

void log_set_level(log_level_t level)
{
    unsigned bits = 0;
    for (int l = LOG_LEVEL_ERROR; l <= LOG_LEVEL_INFO; l++)
        if (l <= (int)level)
            bits |= 1u << l;
    atomic_store(&enabled_bits, bits);
    atomic_store(&verbose_level, level == LOG_LEVEL_TRACE   ? 2u
                                 : level == LOG_LEVEL_DEBUG ? 1u
                                                            : 0u);
    update_threshold();
}

log_level_t log_get_level(void)
{
    int t = __atomic_load_n(&log_current_level, __ATOMIC_RELAXED);
    return t < 0 ? LOG_LEVEL_ERROR : (log_level_t)t;
}

void log_set_enabled(log_level_t level, int on)
{
    if (level > LOG_LEVEL_INFO)
        return;
    if (on)
        atomic_fetch_or(&enabled_bits, 1u << level);
    else
        atomic_fetch_and(&enabled_bits, ~(1u << level));
    update_threshold();
}

int log_enabled(log_level_t level)
{
    if (level > LOG_LEVEL_INFO)
        return 0;
    return (atomic_load(&enabled_bits) >> level) & 1;
}

void log_set_verbose(unsigned verbose)
{
    atomic_store(&verbose_level, verbose);
    update_threshold();
}

unsigned log_get_verbose(void)
{
    return atomic_load(&verbose_level);
}

void log_set_format(log_format_t f)
{
    atomic_store(&line_format, (int)f);
}

log_format_t log_get_format(void)
{
    return (log_format_t)atomic_load(&line_format);
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
    if (level <= LOG_LEVEL_INFO && !log_enabled(level))
        return; /* switched off by itself (the threshold lets debug lines through) */
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
        if (log_get_format() == LOG_FORMAT_ISO8601)
            fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s:%d: %s\n",
                    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                    ts.tv_nsec / 1000000, level_names[level], base, line, msg);
        else
            fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s %s:%d: %s\n", tm.tm_hour, tm.tm_min,
                    tm.tm_sec, ts.tv_nsec / 1000000, level_names[level], base, line, msg);
    }
    pthread_mutex_unlock(&sink_lock);
}
