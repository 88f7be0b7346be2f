/* alloc.c — allocation wrappers with a failure-injection hook for tests.
 * Tests: tests/core/test_core.c */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_at; /* 0: never fail; else the allocation number that fails first */
static atomic_long n_allocs;

static int should_fail(void)
{
    long k = atomic_fetch_add(&n_allocs, 1) + 1;
    long f = atomic_load(&fail_at);
    return f > 0 && k >= f;
}

void *hark_malloc(size_t n)
{
    if (should_fail())
        return NULL;
    return malloc(n ? n : 1);
}

void *hark_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    if (should_fail())
        return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *hark_realloc(void *p, size_t n)
{
    if (should_fail())
        return NULL;
    return realloc(p, n ? n : 1);
}

void hark_free(void *p)
{
    free(p);
}

char *hark_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = hark_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

void alloc_fail_after(long n)
{
    atomic_store(&n_allocs, 0);
    atomic_store(&fail_at, n);
}

void alloc_fail_reset(void)
{
    atomic_store(&fail_at, 0);
    atomic_store(&n_allocs, 0);
}

long alloc_count(void)
{
    return atomic_load(&n_allocs);
}
