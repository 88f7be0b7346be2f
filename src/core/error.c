/* error.c — status + message records.  Tests: tests/core/test_core.c */
#include "core/error.h"

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
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
    if (!err->status)
        err->status = status;
    return err->status;
}
