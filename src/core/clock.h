/* clock.h — monotonic clock.  Tests: tests/core/test_core.c */
#ifndef HARK_CORE_CLOCK_H
#define HARK_CORE_CLOCK_H

#include <stdint.h>

uint64_t clock_now_ns(void); /* CLOCK_MONOTONIC, nanoseconds */
static inline double clock_now_s(void)
{
    return (double)clock_now_ns() * 1e-9;
}

#endif
