/* alloc.h — every heap allocation in hark goes through here, so tests can fail the Nth one
 * (SQLite-style) and exercise each out-of-memory path.  Tests: tests/core/test_core.c */
#ifndef HARK_CORE_ALLOC_H
#define HARK_CORE_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *hark_malloc(size_t n);
void *hark_calloc(size_t count, size_t size); /* checks count*size for overflow */
void *hark_realloc(void *p, size_t n);
void hark_free(void *p);
char *hark_strdup(const char *s);

/* Test hook: the `n`-th allocation from now (1 = the next one) and all after it fail until
 * alloc_fail_reset(). n = 0 disables. Thread-safe. */
void alloc_fail_after(long n);
void alloc_fail_reset(void);
/* Number of allocations attempted since the last alloc_fail_after/reset. */
long alloc_count(void);

#ifdef __cplusplus
}
#endif
#endif
