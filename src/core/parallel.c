/* parallel.c — see parallel.h. The helpers sleep on a condition variable between loops; a loop
 * is published under the mutex as a new generation, its indices handed out by an atomic counter,
 * and the caller waits until every helper has left it (so that fn and ctx are never used after
 * parallel_for returns). */
#include "core/parallel.h"

#include <pthread.h>
#include <stdatomic.h>

#include "core/alloc.h"
#include "hark.h"

struct parallel {
    int threads, started;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen; /* the loop being published; helpers remember the last one they ran */
    int stop;     /* destroy: helpers leave */
    int busy;     /* helpers still in the current loop */
    void (*fn)(void *ctx, int i);
    void *ctx;
    int n;
    atomic_int next; /* the next index to hand out */
};

static void run_share(parallel_t *p, void (*fn)(void *, int), void *ctx, int n)
{
    for (;;) {
        int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= n)
            return;
        fn(ctx, i);
    }
}

static void *helper_main(void *arg)
{
    parallel_t *p = arg;
    unsigned seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        void (*fn)(void *, int) = p->fn;
        void *ctx = p->ctx;
        int n = p->n;
        pthread_mutex_unlock(&p->mu);
        run_share(p, fn, ctx, n);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int parallel_create(int threads, parallel_t **out, hark_err_t *err)
{
    *out = NULL;
    if (threads < 1 || threads > PARALLEL_MAX_THREADS)
        return err_set(err, HARK_ERR_INVALID_ARG, "parallel: %d threads (1 .. %d)", threads,
                       PARALLEL_MAX_THREADS);
    parallel_t *p = hark_calloc(1, sizeof *p);
    if (!p || !(p->th = hark_calloc((size_t)threads, sizeof *p->th))) {
        hark_free(p);
        return err_set(err, HARK_ERR_NOMEM, "parallel: out of memory");
    }
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    for (int i = 0; i < threads - 1; i++) {
        if (pthread_create(&p->th[i], NULL, helper_main, p) != 0) {
            parallel_destroy(p);
            return err_set(err, HARK_ERR_INTERNAL, "parallel: cannot start thread %d of %d", i + 1,
                           threads - 1);
        }
        p->started++;
    }
    *out = p;
    return HARK_OK;
}

void parallel_destroy(parallel_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->th[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
    hark_free(p->th);
    hark_free(p);
}

int parallel_threads(const parallel_t *p)
{
    return p ? p->threads : 1;
}

void parallel_for(parallel_t *p, int n, void (*fn)(void *ctx, int i), void *ctx)
{
    if (!p || p->started == 0 || n <= 1) {
        for (int i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->busy = p->started;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_share(p, fn, ctx, n);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
