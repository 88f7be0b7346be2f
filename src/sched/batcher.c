/* batcher.c — dynamic, length-aware batching of one model's requests.
 * Tests: tests/sched/test_batcher.c */
#include "sched/batcher.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/clock.h"
#include "hark.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* The items of one request still queued (a request of one item has none). */
struct batcher_group {
    int left;    /* its items in the queue */
    int expired; /* one of its items expired: the others leave expired too */
};

struct batcher {
    batcher_opts_t o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    batcher_item_t **pending; /* unordered; size n, capacity cap */
    size_t n, cap;
    size_t n_req; /* requests with an item queued: what max_queue_size bounds */
    uint64_t next_seq;
    int closed;
    int hurry; /* batcher_hurry: no batch waits for a fuller one */
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
 * after the unlock, so the woken worker does not block on the lock the submitter still holds.
 * The request's group record is allocated before the lock and freed after it when unused. */
int batcher_submit_many(batcher_t *b, batcher_item_t *const *items, int n)
{
    HARK_ASSERT(n >= 1);
    struct batcher_group *g = NULL;
    if (n > 1 && !(g = hark_malloc(sizeof *g)))
        return HARK_ERR_NOMEM;
    int rc = HARK_OK, wake = 0;
    pthread_mutex_lock(&b->lock);
    if (b->closed) {
        rc = HARK_ERR_CLOSED;
    } else if (b->o.max_queue_size && b->n_req >= (size_t)b->o.max_queue_size) {
        b->st.rejected++;
        b->st.rejected_items += (uint64_t)n;
        rc = HARK_ERR_AGAIN;
    } else {
        size_t cap = b->cap;
        while (cap < b->n + (size_t)n)
            cap *= 2;
        if (cap != b->cap) {
            batcher_item_t **np = hark_realloc(b->pending, sizeof *np * cap);
            if (np) {
                b->pending = np;
                b->cap = cap;
            } else {
                rc = HARK_ERR_NOMEM;
            }
        }
    }
    if (!rc) {
        uint64_t now = clock_now_ns();
        wake = b->n == 0;
        for (int i = 0; i < n; i++) {
            batcher_item_t *it = items[i];
            it->enqueue_ns = now;
            it->seq = b->next_seq++;
            it->group_ = g;
            b->pending[b->n++] = it;
            wake |= it->deadline_ns != 0;
        }
        if (g) {
            g->left = n;
            g->expired = 0;
            g = NULL; /* the queue's now */
        }
        b->n_req++;
        b->st.requests++;
        b->st.submitted += (uint64_t)n;
        wake |= due_size(b, b->n) > 0;
    }
    pthread_mutex_unlock(&b->lock);
    hark_free(g);
    if (wake)
        pthread_cond_signal(&b->cond);
    return rc;
}

int batcher_submit(batcher_t *b, batcher_item_t *it)
{
    return batcher_submit_many(b, &it, 1);
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

/* The item at i leaves the queue; its request's place is freed with its last item. */
static batcher_item_t *take(batcher_t *b, size_t i)
{
    batcher_item_t *it = b->pending[i];
    b->pending[i] = b->pending[--b->n];
    struct batcher_group *g = it->group_;
    it->group_ = NULL;
    if (!g || --g->left == 0) {
        b->n_req--;
        hark_free(g);
    }
    return it;
}

/* Moves the expired items to expired[] (up to max_exp in all): those past their deadline and the
 * queued items of their requests. Two passes: the second finds a request's items the first had
 * passed before one of theirs expired. */
static void take_expired(batcher_t *b, uint64_t now, batcher_item_t **expired, int max_exp,
                         int *n_expired)
{
    for (int pass = 0; pass < 2 && (pass == 0 || *n_expired); pass++)
        for (size_t i = 0; i < b->n && *n_expired < max_exp;) {
            batcher_item_t *x = b->pending[i];
            struct batcher_group *g = x->group_;
            if (!(x->deadline_ns && x->deadline_ns <= now) && !(g && g->expired)) {
                i++;
                continue;
            }
            if (!g || !g->expired)
                b->st.expired_requests++;
            if (g)
                g->expired = 1;
            b->st.expired++;
            expired[(*n_expired)++] = take(b, i);
        }
}

static uint64_t absdiff(uint64_t a, uint64_t c)
{
    return a > c ? a - c : c - a;
}

/* Moves `k` items into out[]: the head request, then (length-aware) those whose length is closest
 * to it among the same priority, else the next in arrival order; out[] ends in arrival order. */
static int form_batch(batcher_t *b, int k, batcher_item_t **out)
{
    batcher_item_t *head = take(b, head_index(b));
    out[0] = head;
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
            int closer =
                b->o.length_aware
                    ? absdiff(x->length, head->length) < absdiff(y->length, head->length) ||
                          (absdiff(x->length, head->length) == absdiff(y->length, head->length) &&
                           x->seq < y->seq)
                    : x->seq < y->seq;
            if (closer)
                best = i;
        }
        out[n++] = take(b, best);
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
        take_expired(b, now, expired, max_exp, n_expired); /* expired requests leave first */
        if (*n_expired)
            break;
        if (b->n) {
            int k = due_size(b, b->n);
            uint64_t oldest = b->pending[head_index(b)]->enqueue_ns;
            uint64_t due_at = oldest + b->o.max_queue_delay_us * 1000;
            if (!k && (now >= due_at || b->closed || b->hurry))
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

void batcher_hurry(batcher_t *b)
{
    pthread_mutex_lock(&b->lock);
    b->hurry = 1;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

void batcher_stats(batcher_t *b, batcher_stats_t *out)
{
    pthread_mutex_lock(&b->lock);
    *out = b->st;
    out->pending = b->n;
    out->pending_requests = b->n_req;
    pthread_mutex_unlock(&b->lock);
}
