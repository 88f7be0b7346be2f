/* batcher.c — dynamic, length-aware batching of one model's requests.
 * Tests: tests/sched/test_batcher.c */
#include "sched/batcher.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"

#include <errno.h>
#include <string.h>
#include <time.h>

struct batcher {
    batcher_opts_t o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    batcher_item_t **pending; /* unordered; size n, capacity cap */
    size_t n, cap;
    uint64_t next_seq;
    int closed;
    batcher_stats_t st;
};

int batcher_create(const batcher_opts_t *o, batcher_t **out, hark_err_t *err)
{
    *out = NULL;
    if (o->max_batch_size < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "max_batch_size must be >= 1");
    if (o->n_preferred < 0 || o->n_preferred > 8)
        return err_set(err, HARK_ERR_INVALID_ARG, "at most 8 preferred batch sizes");
    for (int i = 0; i < o->n_preferred; i++)
        if (o->preferred[i] < 1 || o->preferred[i] > o->max_batch_size ||
            (i && o->preferred[i] <= o->preferred[i - 1]))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "preferred_batch_size %d must be ascending and within 1..%d",
                           o->preferred[i], o->max_batch_size);
    if (o->max_queue_size < 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "max_queue_size must be >= 0");
    batcher_t *b = hark_calloc(1, sizeof *b);
    if (!b)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    b->o = *o;
    b->cap = 64;
    b->pending = hark_malloc(sizeof *b->pending * b->cap);
    if (!b->pending) {
        hark_free(b);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    *out = b;
    return HARK_OK;
}

void batcher_destroy(batcher_t *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    hark_free(b->pending);
    hark_free(b);
}

/* The batch size to form now with `avail` requests: a preferred size if one is reachable, the
 * maximum when that many wait, else 0 (wait for more, until the delay runs out). */
static int due_size(const batcher_t *b, size_t avail)
{
    int maxb = b->o.max_batch_size;
    if (avail >= (size_t)maxb)
        return maxb;
    for (int i = b->o.n_preferred - 1; i >= 0; i--)
        if (avail >= (size_t)b->o.preferred[i])
            return b->o.preferred[i];
    return 0;
}

/* A waiting worker is woken only when it has something new to do: the queue was empty (it starts
 * the delay clock, or with no delay takes the request), a batch size is now reachable, or the
 * request has a deadline (it may expire before the worker's current wake-up). Other requests
 * just wait for the batch to fill or the delay to pass, without waking anyone. The signal goes
 * after the unlock, so the woken worker does not block on the lock the submitter still holds. */
int batcher_submit(batcher_t *b, batcher_item_t *it)
{
    int rc = HARK_OK, wake = 0;
    pthread_mutex_lock(&b->lock);
    if (b->closed) {
        rc = HARK_ERR_CLOSED;
    } else if (b->o.max_queue_size && b->n >= (size_t)b->o.max_queue_size) {
        b->st.rejected++;
        rc = HARK_ERR_AGAIN;
    } else {
        if (b->n == b->cap) {
            batcher_item_t **np = hark_realloc(b->pending, sizeof *np * b->cap * 2);
            if (!np) {
                pthread_mutex_unlock(&b->lock);
                return HARK_ERR_NOMEM;
            }
            b->pending = np;
            b->cap *= 2;
        }
        it->enqueue_ns = clock_now_ns();
        it->seq = b->next_seq++;
        b->pending[b->n++] = it;
        b->st.submitted++;
        wake = b->n == 1 || due_size(b, b->n) > 0 || it->deadline_ns;
    }
    pthread_mutex_unlock(&b->lock);
    if (wake)
        pthread_cond_signal(&b->cond);
    return rc;
}

/* index of the request served first: highest priority (lowest value), then oldest */
static size_t head_index(const batcher_t *b)
{
    size_t h = 0;
    for (size_t i = 1; i < b->n; i++) {
        const batcher_item_t *x = b->pending[i], *y = b->pending[h];
        if (x->priority < y->priority || (x->priority == y->priority && x->seq < y->seq))
            h = i;
    }
    return h;
}

static void take(batcher_t *b, size_t i)
{
    b->pending[i] = b->pending[--b->n];
}

static uint64_t absdiff(uint64_t a, uint64_t c)
{
    return a > c ? a - c : c - a;
}

/* Moves `k` items into out[]: the head request, then (length-aware) those whose length is closest
 * to it among the same priority, else the next in arrival order; out[] ends in arrival order. */
static int form_batch(batcher_t *b, int k, batcher_item_t **out)
{
    size_t h = head_index(b);
    batcher_item_t *head = b->pending[h];
    out[0] = head;
    take(b, h);
    int n = 1;
    while (n < k && b->n) {
        size_t best = 0;
        for (size_t i = 1; i < b->n; i++) {
            const batcher_item_t *x = b->pending[i], *y = b->pending[best];
            if (x->priority != y->priority) {
                if (x->priority < y->priority)
                    best = i;
                continue;
            }
            int closer = b->o.length_aware
                             ? absdiff(x->length, head->length) < absdiff(y->length, head->length) ||
                                   (absdiff(x->length, head->length) ==
                                        absdiff(y->length, head->length) &&
                                    x->seq < y->seq)
                             : x->seq < y->seq;
            if (closer)
                best = i;
        }
        out[n++] = b->pending[best];
        take(b, best);
    }
    for (int i = 1; i < n; i++) /* arrival order within the batch */
        for (int j = i; j > 0 && out[j]->seq < out[j - 1]->seq; j--) {
            batcher_item_t *t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

int batcher_next(batcher_t *b, batcher_item_t **items, int *n, batcher_item_t **expired,
                 int max_exp, int *n_expired)
{
    *n = 0;
    *n_expired = 0;
    pthread_mutex_lock(&b->lock);
    for (;;) {
        uint64_t now = clock_now_ns();
        /* expired requests leave first */
        for (size_t i = 0; i < b->n && *n_expired < max_exp;) {
            if (b->pending[i]->deadline_ns && b->pending[i]->deadline_ns <= now) {
                expired[(*n_expired)++] = b->pending[i];
                b->st.expired++;
                take(b, i);
            } else {
                i++;
            }
        }
        if (*n_expired)
            break;
        if (b->n) {
            int k = due_size(b, b->n);
            uint64_t oldest = b->pending[head_index(b)]->enqueue_ns;
            uint64_t due_at = oldest + b->o.max_queue_delay_us * 1000;
            if (!k && (now >= due_at || b->closed))
                k = (int)(b->n < (size_t)b->o.max_batch_size ? b->n : (size_t)b->o.max_batch_size);
            if (k) {
                *n = form_batch(b, k, items);
                b->st.batches++;
                b->st.items_batched += (uint64_t)*n;
                break;
            }
            /* wait for more requests or the delay (or the nearest deadline) */
            uint64_t wake = due_at;
            for (size_t i = 0; i < b->n; i++)
                if (b->pending[i]->deadline_ns && b->pending[i]->deadline_ns < wake)
                    wake = b->pending[i]->deadline_ns;
            struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
            pthread_cond_timedwait(&b->cond, &b->lock, &ts);
            continue;
        }
        if (b->closed) {
            pthread_mutex_unlock(&b->lock);
            return HARK_ERR_CLOSED;
        }
        pthread_cond_wait(&b->cond, &b->lock);
    }
    int more = b->n > 0; /* more may be due for another worker */
    pthread_mutex_unlock(&b->lock);
    if (more)
        pthread_cond_signal(&b->cond);
    return HARK_OK;
}

void batcher_close(batcher_t *b)
{
    pthread_mutex_lock(&b->lock);
    b->closed = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

void batcher_stats(batcher_t *b, batcher_stats_t *out)
{
    pthread_mutex_lock(&b->lock);
    *out = b->st;
    out->pending = b->n;
    pthread_mutex_unlock(&b->lock);
}
