/* clock.c — monotonic clock.  Tests: tests/core/test_core.c */
#include "core/clock.h"

#include <time.h>

uint64_t clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
