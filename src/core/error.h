/* error.h — a status plus a message for the caller (a request's error body, a CLI's stderr).
 * Functions that can fail on user input take `hark_err_t *err` (may be NULL) and return a status.
 * Tests: tests/core/test_core.c */
#ifndef HARK_CORE_ERROR_H
#define HARK_CORE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int status;    /* hark_status_t */
    char msg[512]; /* human-readable; names the file/tensor/field and expected vs actual */
} hark_err_t;

/* Records status and message in *err (if err is non-NULL) and returns status, so that
 * `return err_set(err, HARK_ERR_FORMAT, "%s: not a WAV file", name);` reads naturally. */
int err_set(hark_err_t *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message: "ctx: <old message>". Returns err->status (or `status` if NULL). */
int err_prefix(hark_err_t *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* HARK_ERR_INVALID_ARG with the one wording every range check uses, wherever the value came from
 * (a request, config.pbtxt, a flag): "<what> must be in [lo, hi] (got v)". */
int err_range(hark_err_t *err, const char *what, long lo, long hi, long got);

#ifdef __cplusplus
}
#endif
#endif
