/* queue.c — bounded mutex+condvar FIFO with explicit wake-up.  Tests: tests/core/test_core.c */
#include "core/queue.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <time.h>

int queue_init(queue_t *q, size_t capacity)
{
    q->items = hark_calloc(capacity ? capacity : 1, sizeof(void *));
    if (!q->items)
        return HARK_ERR_NOMEM;
    q->cap = capacity ? capacity : 1;
    q->head = q->len = 0;
    q->wakeups = 0;
    q->closed = 0;
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &ca);
    pthread_condattr_destroy(&ca);
    return HARK_OK;
}

void queue_free(queue_t *q)
{
    if (!q->items)
        return;
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    hark_free(q->items);
    q->items = NULL;
}

int queue_push(queue_t *q, void *item)
{
    int rc = HARK_OK;
    pthread_mutex_lock(&q->lock);
    if (q->closed)
        rc = HARK_ERR_CLOSED;
    else if (q->len == q->cap)
        rc = HARK_ERR_AGAIN;
    else {
        q->items[(q->head + q->len) % q->cap] = item;
        q->len++;
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

int queue_pop(queue_t *q, void **out, int64_t timeout_ns)
{
    struct timespec deadline;
    if (timeout_ns > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ns / 1000000000;
        deadline.tv_nsec += timeout_ns % 1000000000;
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000;
        }
    }
    int rc;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (q->len) {
            *out = q->items[q->head];
            q->head = (q->head + 1) % q->cap;
            q->len--;
            rc = HARK_OK;
            break;
        }
        if (q->wakeups) {
            q->wakeups--;
            rc = HARK_ERR_AGAIN;
            break;
        }
        if (q->closed) {
            rc = HARK_ERR_CLOSED;
            break;
        }
        if (timeout_ns == 0) {
            rc = HARK_ERR_TIMEOUT;
            break;
        }
        if (timeout_ns < 0) {
            pthread_cond_wait(&q->cond, &q->lock);
        } else if (pthread_cond_timedwait(&q->cond, &q->lock, &deadline) == ETIMEDOUT && !q->len &&
                   !q->wakeups && !q->closed) {
            rc = HARK_ERR_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

void queue_wake(queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->wakeups++;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

void queue_close(queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

size_t queue_len(queue_t *q)
{
    pthread_mutex_lock(&q->lock);
    size_t n = q->len;
    pthread_mutex_unlock(&q->lock);
    return n;
}
