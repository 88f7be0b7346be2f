/* queue.h — bounded, thread-safe FIFO of pointers with explicit wake-up, for handing work
 * between the event loop and inference workers.  Tests: tests/core/test_core.c */
#ifndef HARK_CORE_QUEUE_H
#define HARK_CORE_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void **items; /* ring of `cap` slots */
    size_t cap, head, len;
    unsigned wakeups; /* pending explicit wake-ups */
    int closed;
} queue_t;

/* capacity > 0. Returns HARK_OK or HARK_ERR_NOMEM. */
int queue_init(queue_t *q, size_t capacity);
void queue_free(queue_t *q); /* the items themselves are the caller's */
/* HARK_OK, HARK_ERR_AGAIN when full, HARK_ERR_CLOSED after queue_close. Never blocks. */
int queue_push(queue_t *q, void *item);
/* Waits up to timeout_ns (negative: forever, 0: poll) for an item.
 * HARK_OK with *out set; HARK_ERR_TIMEOUT; HARK_ERR_AGAIN when woken by queue_wake with no item;
 * HARK_ERR_CLOSED once closed and drained. */
int queue_pop(queue_t *q, void **out, int64_t timeout_ns);
/* Wake one waiter (or the next pop) without an item — e.g. to re-check a deadline. */
void queue_wake(queue_t *q);
/* Reject further pushes; pops drain what is left, then return HARK_ERR_CLOSED. */
void queue_close(queue_t *q);
size_t queue_len(queue_t *q);

#endif
