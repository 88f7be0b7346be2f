/* batcher.h — the dynamic batcher of one model: requests wait in a bounded queue and model
 * instances (worker threads) take them out in batches, as Triton's dynamic_batching does
 * (max_batch_size, preferred_batch_size, max_queue_delay_microseconds, max_queue_size, per-request
 * timeouts, priorities) plus length-aware batching: a batch is built around the oldest request
 * from the requests whose audio length is closest to it, so padding stays small.
 * Tests: tests/sched/test_batcher.c
 *
 * Ownership: items are the caller's (embed batcher_item_t in the request); the batcher only links
 * them. An item handed out by batcher_next (or reported expired) belongs to the caller again.
 */
#ifndef HARK_SERVER_BATCHER_H
#define HARK_SERVER_BATCHER_H

#include "core/error.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct batcher_item {
    uint64_t length;      /* cost used for length-aware grouping (e.g. samples) */
    int priority;         /* 0 = default; lower values are served first (Triton's levels) */
    uint64_t deadline_ns; /* clock_now_ns() deadline; 0 = none */
    uint64_t enqueue_ns;  /* set by batcher_submit */
    uint64_t seq;         /* arrival order, set by batcher_submit */
} batcher_item_t;

typedef struct {
    int max_batch_size;          /* >= 1 */
    int preferred[8];            /* preferred batch sizes, ascending; n_preferred may be 0 */
    int n_preferred;
    uint64_t max_queue_delay_us; /* how long the oldest request may wait for a fuller batch */
    int max_queue_size;          /* pending requests; 0 = unbounded */
    int length_aware;            /* 1: group requests of similar length */
} batcher_opts_t;

typedef struct {
    uint64_t submitted, rejected, expired, batches, items_batched;
    size_t pending;
} batcher_stats_t;

typedef struct batcher batcher_t;

int batcher_create(const batcher_opts_t *opts, batcher_t **out, hark_err_t *err);
/* Wakes every waiting worker; the queue must be empty (close + drain first). Accepts NULL. */
void batcher_destroy(batcher_t *b);

/* Queues an item. HARK_ERR_AGAIN when max_queue_size requests are pending (answer 503 with
 * Retry-After), HARK_ERR_CLOSED after batcher_close. Never blocks. */
int batcher_submit(batcher_t *b, batcher_item_t *it);

/* Called by a model instance: waits until a batch is due and moves up to max_batch_size items
 * into items[] (*n of them, oldest-first order of the chosen group). Items whose deadline passed
 * before being batched go to expired[] (*n_expired; capacity max_exp) so the caller can fail them
 * with a timeout. Returns HARK_OK (a batch, possibly with *n == 0 when only expiries were
 * returned), or HARK_ERR_CLOSED once closed and drained. */
int batcher_next(batcher_t *b, batcher_item_t **items, int *n, batcher_item_t **expired,
                 int max_exp, int *n_expired);

/* Stops accepting; pending items are still handed out, then workers get HARK_ERR_CLOSED. */
void batcher_close(batcher_t *b);
void batcher_stats(batcher_t *b, batcher_stats_t *out);

#endif
