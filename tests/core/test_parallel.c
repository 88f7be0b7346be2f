/* Tests for src/core/parallel.c: every index exactly once over many loops of every size (fewer
 * indices than threads, none, one, many), inline sets, the caller taking part, refusals. */
#include "test.h"

#include "core/alloc.h"
#include "core/parallel.h"
#include "hark.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct {
    atomic_int *hits;
    atomic_int calls;
    pthread_t caller;
    atomic_int by_caller, by_others;
} par_ctx_t;

static void count(void *ctx, int i)
{
    par_ctx_t *c = ctx;
    atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->calls, 1);
    if (pthread_equal(pthread_self(), c->caller))
        atomic_fetch_add(&c->by_caller, 1);
    else
        atomic_fetch_add(&c->by_others, 1);
    for (volatile int k = 0; k < 2000; k++) /* long enough for the helpers to take a share */
        ;
}

static int run_once(parallel_t *p, int n, par_ctx_t *c)
{
    for (int i = 0; i < n; i++)
        atomic_store(&c->hits[i], 0);
    atomic_store(&c->calls, 0);
    parallel_for(p, n, count, c);
    int bad = atomic_load(&c->calls) != n;
    for (int i = 0; i < n; i++)
        bad += atomic_load(&c->hits[i]) != 1;
    return bad; /* indices not run exactly once (+1 for a wrong count of calls) */
}

TEST(parallel_every_index_once)
{
    enum { MAXN = 5000 };
    par_ctx_t c;
    memset(&c, 0, sizeof c);
    c.hits = hark_calloc(MAXN, sizeof *c.hits);
    c.caller = pthread_self();
    static const int threads[] = {1, 2, 3, 8};
    static const int sizes[] = {0, 1, 2, 3, 7, 8, 9, 100, 513, MAXN};
    hark_err_t err = {0};
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
        parallel_t *p;
        CHECK_OK(parallel_create(threads[ti], &p, &err));
        CHECK_EQ_INT(parallel_threads(p), threads[ti]);
        atomic_store(&c.by_caller, 0);
        atomic_store(&c.by_others, 0);
        for (int rep = 0; rep < 20; rep++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                int bad = run_once(p, sizes[si], &c);
                CHECKF(bad == 0, "%d threads, n %d: %d indices not run exactly once", threads[ti],
                       sizes[si], bad);
            }
        if (threads[ti] == 1)
            CHECK_EQ_INT(atomic_load(&c.by_others), 0); /* a set of one runs on the caller */
        else
            printf("    %d threads: %d calls on the caller, %d on helpers\n", threads[ti],
                   atomic_load(&c.by_caller), atomic_load(&c.by_others));
        CHECK(atomic_load(&c.by_caller) > 0);
        parallel_destroy(p);
    }
    /* NULL: inline, in order */
    CHECK(parallel_threads(NULL) == 1);
    CHECK_EQ_INT(run_once(NULL, 37, &c), 0);
    hark_free(c.hits);
}

TEST(parallel_refusals)
{
    parallel_t *p = (parallel_t *)1;
    hark_err_t err = {0};
    CHECK_EQ_INT(parallel_create(0, &p, &err), HARK_ERR_INVALID_ARG);
    CHECK(p == NULL);
    CHECK_EQ_INT(parallel_create(PARALLEL_MAX_THREADS + 1, &p, &err), HARK_ERR_INVALID_ARG);
    parallel_destroy(NULL);
    CHECK_OK(parallel_create(4, &p, &err)); /* destroyed without ever running a loop */
    parallel_destroy(p);
}
