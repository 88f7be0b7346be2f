/* error.c — status + message records.  Tests: tests/core/test_core.c */
#include "core/error.h"

#include "hark.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(hark_err_t *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

int err_prefix(hark_err_t *err, int status, const char *fmt, ...)
{
    if (!err)
        return status;
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(pre);
    if (n > sizeof err->msg - 3)
        n = sizeof err->msg - 3;
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof err->msg - n - 3;
    size_t ol = strnlen(old, rest);
    memcpy(err->msg + n + 2, old, ol);
    err->msg[n + 2 + ol] = 0;
    if (!err->status)
        err->status = status;
    return err->status;
}

int err_range(hark_err_t *err, const char *what, long lo, long hi, long got)
{
    return err_set(err, HARK_ERR_INVALID_ARG, "%s must be in [%ld, %ld] (got %ld)", what, lo, hi,
                   got);
}
