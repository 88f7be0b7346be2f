/* assert.c — the always-on assertion handler.  Tests: tests/core/test_core.c */
#include "core/assert.h"

#include <stdio.h>
#include <stdlib.h>

_Noreturn void hark_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "hark: assertion failed: %s (%s:%d)\n", expr, file, line);
    fflush(stderr);
    abort();
}
