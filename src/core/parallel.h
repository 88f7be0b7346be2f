/* parallel.h — a few threads that share the iterations of a loop with its caller.
 *
 * parallel_for(p, n, fn, ctx) calls fn(ctx, i) once for every i in [0, n), spread over the
 * caller and the set's helper threads (each takes the next index as it gets free), and returns
 * when every call has returned. Calls for different i run at the same time: fn must only touch
 * what index i owns. One caller at a time per set. A set of 1 thread, or p NULL, runs the loop on
 * the caller alone, in order. */
#ifndef HARK_CORE_PARALLEL_H
#define HARK_CORE_PARALLEL_H

#include "core/error.h"

typedef struct parallel parallel_t;

#define PARALLEL_MAX_THREADS 64

/* threads 1 .. PARALLEL_MAX_THREADS (the caller counts as one). HARK_ERR_INVALID_ARG,
 * HARK_ERR_NOMEM, HARK_ERR_INTERNAL (a thread could not start). */
int parallel_create(int threads, parallel_t **out, hark_err_t *err);
void parallel_destroy(parallel_t *p);      /* accepts NULL; waits for nothing: no loop may run */
int parallel_threads(const parallel_t *p); /* 1 for NULL */
void parallel_for(parallel_t *p, int n, void (*fn)(void *ctx, int i), void *ctx);

#endif
