/* log.h — leveled logging with a replaceable sink; cheap when the level is off.
 * Tests: tests/core/test_core.c */
#ifndef HARK_CORE_LOG_H
#define HARK_CORE_LOG_H

#include <stdarg.h>

typedef enum {
    LOG_LEVEL_ERROR = 0,
    LOG_LEVEL_WARN,
    LOG_LEVEL_INFO,
    LOG_LEVEL_DEBUG,
    LOG_LEVEL_TRACE
} log_level_t;

/* A sink receives one formatted line (no trailing newline). It may be called from any thread,
 * one call at a time (log.c serialises sinks); it must not keep `msg`. */
typedef void (*log_sink_fn)(void *user, log_level_t level, const char *file, int line,
                            const char *msg);

/* The threshold: error, warn and info on up to `level`, verbosity 0 (info and above), 1 (debug)
 * or 2 (trace). */
void log_set_level(log_level_t level);
/* The most verbose level that can pass (ERROR when every severity is off). */
log_level_t log_get_level(void);
/* Triton's logging settings (its /v2/logging): each of error, warn and info switched on or off
 * by itself (other levels: ignored / 0), and a verbose level (0: none, 1: debug, >= 2: trace;
 * the value given is kept and reported). They and log_set_level replace each other's effect. */
void log_set_enabled(log_level_t level, int on);
int log_enabled(log_level_t level);
void log_set_verbose(unsigned verbose);
unsigned log_get_verbose(void);
/* The default sink's line prefix: "HH:MM:SS.mmm" (DEFAULT) or "YYYY-MM-DDTHH:MM:SS.mmmZ". */
typedef enum { LOG_FORMAT_DEFAULT = 0, LOG_FORMAT_ISO8601 } log_format_t;
void log_set_format(log_format_t f);
log_format_t log_get_format(void);
/* Parses "error|warn|info|debug|trace"; returns 0 on success, -1 if unknown. */
int log_parse_level(const char *name, log_level_t *out);
/* Replace the sink; NULL restores the default (stderr). Returns the previous sink. */
void log_set_sink(log_sink_fn fn, void *user);
void log_write(log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

extern int log_current_level; /* the most verbose level that can pass; -1: none */
#define LOG_AT(lvl, ...)                                                                           \
    do {                                                                                           \
        if ((int)(lvl) <= log_current_level)                                                       \
            log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                     \
    } while (0)
#define LOG_ERROR(...) LOG_AT(LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG_AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG_AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG_AT(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
