/* batcher.h — the dynamic batcher of one model: requests wait in a bounded queue and model
 * instances (worker threads) take them out in batches, as Triton's dynamic_batching does
 * (max_batch_size, preferred_batch_size, max_queue_delay_microseconds, max_queue_size, per-request
 * timeouts, priorities) plus length-aware batching: a batch is built around the oldest request
 * from the requests whose audio length is closest to it, so padding stays small.
 * Tests: tests/sched/test_batcher.c
 *
 * Requests and items: a request of batch size N is N items, queued together and atomically
 * (batcher_submit_many); max_queue_size counts requests, as Triton's does, and a request holds
 * its place until the last of its items has left the queue. Items are batched one by one: the
 * items of one request may land in different batches and share batches with other requests'.
 *
 * Ownership: items are the caller's (embed batcher_item_t in the request); the batcher only links
 * them. An item handed out by batcher_next (or reported expired) belongs to the caller again.
 * The batcher allocates (and frees) the small record that ties a request's items together.
 */
#ifndef HARK_SERVER_BATCHER_H
#define HARK_SERVER_BATCHER_H

#include "core/error.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct batcher_item {
    uint64_t length;              /* cost used for length-aware grouping (e.g. samples) */
    int priority;                 /* 0 = default; lower values are served first (Triton's levels) */
    uint64_t deadline_ns;         /* clock_now_ns() deadline; 0 = none */
    uint64_t enqueue_ns;          /* set by batcher_submit */
    uint64_t seq;                 /* arrival order, set by batcher_submit */
    struct batcher_group *group_; /* private: the request's items still queued (NULL: alone) */
} batcher_item_t;

typedef struct {
    int max_batch_size; /* >= 1 */
    int preferred[8];   /* preferred batch sizes, ascending; n_preferred may be 0 */
    int n_preferred;
    uint64_t max_queue_delay_us; /* how long the oldest request may wait for a fuller batch */
    int max_queue_size;          /* pending requests (not items); 0 = unbounded */
    int length_aware;            /* 1: group requests of similar length */
} batcher_opts_t;

/* Counters since creation; "request" is one batcher_submit(_many) call, "item" one of its items. */
typedef struct {
    uint64_t requests;         /* requests queued */
    uint64_t submitted;        /* items queued (of those requests) */
    uint64_t rejected;         /* requests refused whole: max_queue_size requests were pending */
    uint64_t rejected_items;   /* their items (none of them was queued) */
    uint64_t expired;          /* items that left the queue expired, to be failed by the caller */
    uint64_t expired_requests; /* requests that had an item expire (each counted once) */
    uint64_t batches;          /* batches handed out (with at least one item) */
    uint64_t items_batched;    /* items in them */
    size_t pending;            /* items queued now */
    size_t pending_requests;   /* requests with an item queued now (what max_queue_size bounds) */
} batcher_stats_t;

typedef struct batcher batcher_t;

int batcher_create(const batcher_opts_t *opts, batcher_t **out, hark_err_t *err);
/* Wakes every waiting worker; the queue must be empty (close + drain first). Accepts NULL. */
void batcher_destroy(batcher_t *b);

/* Queues the n items of one request (n >= 1), all or none: HARK_ERR_AGAIN, none queued, when
 * max_queue_size requests are pending (answer 503 with Retry-After), HARK_ERR_CLOSED after
 * batcher_close, HARK_ERR_NOMEM. The request counts as one against max_queue_size until its last
 * item has been batched or has expired. Its items should share priority and deadline: once one of
 * them expires, the others still queued expire with it (so a request is failed once, as a
 * whole, and its items still queued cost nothing). Never blocks. */
int batcher_submit_many(batcher_t *b, batcher_item_t *const *items, int n);
/* A request of one item. */
int batcher_submit(batcher_t *b, batcher_item_t *it);

/* Called by a model instance: waits until a batch is due and moves up to max_batch_size items
 * into items[] (*n of them, oldest-first order of the chosen group). Items whose deadline passed
 * before being batched, and the queued items of their requests, go to expired[] (*n_expired;
 * capacity max_exp; the rest on the next call, before any batch) so the caller can fail them
 * with a timeout. Returns HARK_OK (a batch, possibly with *n == 0 when only expiries were
 * returned), or HARK_ERR_CLOSED once closed and drained. */
int batcher_next(batcher_t *b, batcher_item_t **items, int *n, batcher_item_t **expired,
                 int max_exp, int *n_expired);

/* Stops accepting; pending items are still handed out, then workers get HARK_ERR_CLOSED. */
void batcher_close(batcher_t *b);
/* From now on no batch waits for a fuller one (max_queue_delay_microseconds is over for every
 * item, queued or to come); requests are still taken. The server calls it when it drains. */
void batcher_hurry(batcher_t *b);
void batcher_stats(batcher_t *b, batcher_stats_t *out);

#endif
