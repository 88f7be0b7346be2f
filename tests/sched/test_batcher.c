/* Tests for src/sched/batcher.c: preferred sizes, queue delay, bounded queue, length-aware
 * grouping, priorities, deadlines, close/drain, many producers/consumers, and requests of several
 * items: admitted or refused whole, counted once against max_queue_size, expired whole. */
#include "test.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "sched/batcher.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static batcher_opts_t opts(int maxb, uint64_t delay_us)
{
    batcher_opts_t o;
    memset(&o, 0, sizeof o);
    o.max_batch_size = maxb;
    o.max_queue_delay_us = delay_us;
    return o;
}

TEST(batcher_preferred_size_is_immediate)
{
    batcher_opts_t o = opts(8, 1000000);
    o.preferred[0] = 4;
    o.n_preferred = 1;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t it[4] = {{0}};
    for (int i = 0; i < 4; i++)
        CHECK_OK(batcher_submit(b, &it[i]));
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    uint64_t t0 = clock_now_ns();
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK_EQ_INT(n, 4);
    CHECK(clock_now_ns() - t0 < 100 * 1000000ull);
    CHECK(out[0] == &it[0] && out[3] == &it[3]); /* arrival order */
    batcher_destroy(b);
}

TEST(batcher_waits_for_the_queue_delay)
{
    batcher_opts_t o = opts(8, 30000);
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t it[2] = {{0}};
    uint64_t t0 = clock_now_ns();
    CHECK_OK(batcher_submit(b, &it[0]));
    CHECK_OK(batcher_submit(b, &it[1]));
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    uint64_t waited = clock_now_ns() - t0;
    CHECK_EQ_INT(n, 2);
    CHECKF(waited >= 29 * 1000000ull && waited < 500 * 1000000ull, "waited %llu ns",
           (unsigned long long)waited);
    batcher_destroy(b);
}

TEST(batcher_bounded_queue_and_bad_options)
{
    batcher_opts_t o = opts(4, 1000);
    o.max_queue_size = 3;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t it[4] = {{0}};
    for (int i = 0; i < 3; i++)
        CHECK_OK(batcher_submit(b, &it[i]));
    CHECK_EQ_INT(batcher_submit(b, &it[3]), HARK_ERR_AGAIN);
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.rejected == 1 && st.pending == 3);
    batcher_close(b);
    CHECK_EQ_INT(batcher_submit(b, &it[3]), HARK_ERR_CLOSED);
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne)); /* drains after close */
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(batcher_next(b, out, &n, exp, 8, &ne), HARK_ERR_CLOSED);
    batcher_destroy(b);
    hark_err_t e = {0};
    o = opts(4, 0);
    o.preferred[0] = 5;
    o.n_preferred = 1;
    CHECK_EQ_INT(batcher_create(&o, &b, &e), HARK_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "preferred_batch_size") != NULL);
    o = opts(0, 0);
    CHECK_EQ_INT(batcher_create(&o, &b, &e), HARK_ERR_INVALID_ARG);
}

static void lengths_case(test_ctx_t *t, int aware, const uint64_t *want_first)
{
    batcher_opts_t o = opts(3, 1000000);
    o.length_aware = aware;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    uint64_t lens[6] = {100, 5000, 110, 5100, 120, 4900};
    batcher_item_t it[6];
    memset(it, 0, sizeof it);
    for (int i = 0; i < 6; i++) {
        it[i].length = lens[i];
        CHECK_OK(batcher_submit(b, &it[i]));
    }
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK_EQ_INT(n, 3);
    for (int i = 0; i < 3; i++)
        CHECKF(out[i]->length == want_first[i], "aware=%d item %d: %llu", aware, i,
               (unsigned long long)out[i]->length);
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK_EQ_INT(n, 3);
    batcher_destroy(b);
}

TEST(batcher_length_aware_grouping)
{
    static const uint64_t aware[3] = {100, 110, 120}, fifo[3] = {100, 5000, 110};
    lengths_case(t, 1, aware);
    if (!test_failed(t))
        lengths_case(t, 0, fifo);
}

TEST(batcher_priority_and_deadlines)
{
    batcher_opts_t o = opts(1, 1000000);
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t a = {0}, hi = {0}, late = {0};
    hi.priority = -1;
    CHECK_OK(batcher_submit(b, &a));
    CHECK_OK(batcher_submit(b, &hi));
    batcher_item_t *out[4], *exp[4];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 4, &ne));
    CHECK(n == 1 && out[0] == &hi);
    CHECK_OK(batcher_next(b, out, &n, exp, 4, &ne));
    CHECK(n == 1 && out[0] == &a);
    /* a request whose deadline passes while it waits for a fuller batch */
    batcher_destroy(b);
    o = opts(4, 1000000);
    CHECK_OK(batcher_create(&o, &b, NULL));
    late.deadline_ns = clock_now_ns() + 10 * 1000000ull;
    CHECK_OK(batcher_submit(b, &late));
    uint64_t t0 = clock_now_ns();
    CHECK_OK(batcher_next(b, out, &n, exp, 4, &ne));
    CHECK(n == 0 && ne == 1 && exp[0] == &late);
    CHECK(clock_now_ns() - t0 < 500 * 1000000ull);
    batcher_destroy(b);
}

struct mt {
    batcher_t *b;
    int produced_per_thread;
    int consumed, max_seen;
    pthread_mutex_t lock;
};

static void *producer(void *p)
{
    struct mt *m = p;
    batcher_item_t *items = calloc((size_t)m->produced_per_thread, sizeof *items);
    for (int i = 0; i < m->produced_per_thread; i++) {
        items[i].length = (uint64_t)(i * 7919 % 1000);
        while (batcher_submit(m->b, &items[i]) == HARK_ERR_AGAIN)
            ;
    }
    return items; /* freed by the test once all are consumed */
}

static void *consumer(void *p)
{
    struct mt *m = p;
    batcher_item_t *out[16], *exp[16];
    int n, ne;
    while (batcher_next(m->b, out, &n, exp, 16, &ne) == HARK_OK) {
        pthread_mutex_lock(&m->lock);
        m->consumed += n;
        if (n > m->max_seen)
            m->max_seen = n;
        pthread_mutex_unlock(&m->lock);
    }
    return NULL;
}

TEST(batcher_many_producers_and_consumers)
{
    batcher_opts_t o = opts(16, 200);
    o.preferred[0] = 8;
    o.n_preferred = 1;
    o.length_aware = 1;
    o.max_queue_size = 64;
    struct mt m = {.produced_per_thread = 2000};
    pthread_mutex_init(&m.lock, NULL);
    CHECK_OK(batcher_create(&o, &m.b, NULL));
    pthread_t prod[4], cons[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&cons[i], NULL, consumer, &m);
    for (int i = 0; i < 4; i++)
        pthread_create(&prod[i], NULL, producer, &m);
    void *mem[4];
    for (int i = 0; i < 4; i++)
        pthread_join(prod[i], &mem[i]);
    batcher_close(m.b);
    for (int i = 0; i < 3; i++)
        pthread_join(cons[i], NULL);
    for (int i = 0; i < 4; i++)
        free(mem[i]);
    CHECK_EQ_INT(m.consumed, 4 * 2000);
    CHECK(m.max_seen >= 1 && m.max_seen <= 16);
    batcher_stats_t st;
    batcher_stats(m.b, &st);
    CHECK(st.items_batched == 8000 && st.pending == 0);
    batcher_destroy(m.b);
}

/* one batcher_next on a thread, its result and when it came */
typedef struct {
    batcher_t *b;
    pthread_t th;
    int n, ne;
    atomic_int done;
    batcher_item_t *out[16];
} one_next_t;

static void *one_next_main(void *p)
{
    one_next_t *w = p;
    batcher_item_t *exp[16];
    batcher_next(w->b, w->out, &w->n, exp, 16, &w->ne);
    atomic_store(&w->done, 1);
    return NULL;
}

static void one_next_start(one_next_t *w, batcher_t *b)
{
    memset(w, 0, sizeof *w);
    w->b = b;
    pthread_create(&w->th, NULL, one_next_main, w);
    struct timespec ts = {0, 20 * 1000000L}; /* let it reach its wait */
    nanosleep(&ts, NULL);
}

/* 1 when w finished within ms milliseconds */
static int one_next_wait(one_next_t *w, int ms)
{
    for (int i = 0; i < ms && !atomic_load(&w->done); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    if (!atomic_load(&w->done))
        return 0;
    pthread_join(w->th, NULL);
    return 1;
}

/* Submissions wake a worker already waiting when there is something for it to do (the first
 * request with no delay, a preferred size reached, a deadline to honour) — and the others do not
 * make it return early. Two waiting workers both get their batch. */
TEST(batcher_wakes_waiting_workers_when_there_is_work)
{
    batcher_opts_t o = opts(8, 10 * 1000000); /* 10 s: only a wake-up ends the wait early */
    o.preferred[0] = 4;
    o.n_preferred = 1;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t it[16];
    memset(it, 0, sizeof it);
    one_next_t w, w2;
    one_next_start(&w, b);
    for (int i = 0; i < 3; i++)
        CHECK_OK(batcher_submit(b, &it[i]));
    CHECK(!one_next_wait(&w, 50)); /* 3 < 4: it keeps waiting */
    CHECK_OK(batcher_submit(b, &it[3]));
    CHECK(one_next_wait(&w, 2000));
    CHECK_EQ_INT(w.n, 4);
    one_next_start(&w, b); /* a lone request with a deadline, far before the delay */
    it[4].deadline_ns = clock_now_ns() + 30 * 1000000ull;
    CHECK_OK(batcher_submit(b, &it[4]));
    CHECK(one_next_wait(&w, 2000));
    CHECK(w.n == 0 && w.ne == 1);
    memset(it, 0, sizeof it);
    one_next_start(&w, b); /* two workers waiting, 12 requests */
    one_next_start(&w2, b);
    for (int i = 0; i < 12; i++)
        CHECK_OK(batcher_submit(b, &it[i]));
    CHECK(one_next_wait(&w, 2000) && one_next_wait(&w2, 2000));
    CHECKF(w.n >= 4 && w2.n >= 4, "%d and %d", w.n, w2.n); /* each woke to a due batch */
    batcher_close(b);
    int left = 12 - w.n - w2.n, n, ne;
    batcher_item_t *out[16], *exp[16];
    while (left > 0 && batcher_next(b, out, &n, exp, 16, &ne) == HARK_OK)
        left -= n;
    CHECK_EQ_INT(left, 0);
    batcher_destroy(b);
    o = opts(8, 0); /* no delay: the first request wakes the worker */
    CHECK_OK(batcher_create(&o, &b, NULL));
    one_next_start(&w, b);
    CHECK_OK(batcher_submit(b, &it[0]));
    CHECK(one_next_wait(&w, 2000));
    CHECK_EQ_INT(w.n, 1);
    batcher_destroy(b);
}

/* ---- requests of several items (issue 23): max_queue_size counts requests, admitted whole ---- */

static batcher_item_t **ptrs(batcher_item_t *it, int n, batcher_item_t **p)
{
    for (int i = 0; i < n; i++)
        p[i] = &it[i];
    return p;
}

/* max_queue_size 2: with one request pending a 3-item request is the second request, admitted;
 * with two pending a third request is refused whole, none of its items queued */
/* the drain: what waits for a fuller batch is handed out at once, and so is what comes after */
TEST(batcher_hurry_ends_the_wait_for_fuller_batches)
{
    batcher_opts_t o = opts(8, 600 * 1000000ull); /* 10 minutes: only the hurry ends the wait */
    o.preferred[0] = 8;
    o.n_preferred = 1;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t it[3];
    memset(it, 0, sizeof it);
    one_next_t w;
    one_next_start(&w, b);
    CHECK_OK(batcher_submit(b, &it[0]));
    CHECK_OK(batcher_submit(b, &it[1]));
    CHECK(!one_next_wait(&w, 50)); /* 2 < 8: it waits */
    batcher_hurry(b);
    CHECK(one_next_wait(&w, 5000));
    CHECK(w.n == 2 && w.ne == 0);
    one_next_start(&w, b); /* a request after the hurry does not wait either */
    CHECK_OK(batcher_submit(b, &it[2]));
    CHECK(one_next_wait(&w, 5000));
    CHECK_EQ_INT(w.n, 1);
    batcher_close(b);
    batcher_destroy(b);
}

TEST(batcher_request_of_many_items_is_admitted_or_refused_whole)
{
    batcher_opts_t o = opts(8, 10 * 1000000); /* nothing is due while the test looks */
    o.max_queue_size = 2;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t one = {0}, three[3], more[3], *p[3];
    memset(three, 0, sizeof three);
    memset(more, 0, sizeof more);
    CHECK_OK(batcher_submit(b, &one));
    CHECK_OK(batcher_submit_many(b, ptrs(three, 3, p), 3));
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.pending == 4 && st.pending_requests == 2 && st.requests == 2 && st.submitted == 4);
    CHECK_EQ_INT(batcher_submit_many(b, ptrs(more, 3, p), 3), HARK_ERR_AGAIN);
    batcher_stats(b, &st);
    CHECKF(st.pending == 4 && st.pending_requests == 2 && st.rejected == 1 &&
               st.rejected_items == 3 && st.requests == 2 && st.submitted == 4,
           "pending %zu/%zu rejected %llu/%llu", st.pending, st.pending_requests,
           (unsigned long long)st.rejected, (unsigned long long)st.rejected_items);
    CHECK(more[0].group_ == NULL && more[2].group_ == NULL && more[1].enqueue_ns == 0);
    CHECK_EQ_INT(batcher_submit(b, &more[0]), HARK_ERR_AGAIN); /* one item: the same bound */
    batcher_close(b);
    CHECK_EQ_INT(batcher_submit_many(b, ptrs(more, 3, p), 3), HARK_ERR_CLOSED);
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne)); /* drained: exactly the four admitted */
    CHECK(n == 4 && ne == 0 && out[0] == &one && out[1] == &three[0] && out[3] == &three[2]);
    CHECK_EQ_INT(batcher_next(b, out, &n, exp, 8, &ne), HARK_ERR_CLOSED);
    batcher_stats(b, &st);
    CHECK(st.pending == 0 && st.pending_requests == 0 && st.items_batched == 4);
    batcher_destroy(b);
}

/* two requests of 5 items fill a queue of 2 (10 items), a third request of one item does not fit */
TEST(batcher_max_queue_size_counts_requests_not_items)
{
    batcher_opts_t o = opts(16, 10 * 1000000);
    o.max_queue_size = 2;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t a[5], c[5], d = {0}, *p[5];
    memset(a, 0, sizeof a);
    memset(c, 0, sizeof c);
    CHECK_OK(batcher_submit_many(b, ptrs(a, 5, p), 5));
    CHECK_OK(batcher_submit_many(b, ptrs(c, 5, p), 5));
    CHECK_EQ_INT(batcher_submit(b, &d), HARK_ERR_AGAIN);
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.pending == 10 && st.pending_requests == 2 && st.rejected == 1 && st.requests == 2);
    batcher_close(b);
    batcher_item_t *out[16], *exp[16];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 16, &ne));
    CHECK_EQ_INT(n, 10);
    batcher_destroy(b);
}

/* A request's place is given back only when its last item leaves the queue: 5 items batched two
 * at a time hold the only place of the queue until the third batch. */
TEST(batcher_request_holds_its_place_until_its_last_item_leaves)
{
    batcher_opts_t o = opts(2, 0);
    o.max_queue_size = 1;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t a[5], x = {0}, *p[5];
    memset(a, 0, sizeof a);
    CHECK_OK(batcher_submit_many(b, ptrs(a, 5, p), 5));
    batcher_item_t *out[4], *exp[4];
    int n, ne, got = 0;
    for (int round = 0; round < 3; round++) {
        CHECK_EQ_INT(batcher_submit(b, &x), HARK_ERR_AGAIN); /* its place is still taken */
        CHECK_OK(batcher_next(b, out, &n, exp, 4, &ne));
        CHECK_EQ_INT(n, round < 2 ? 2 : 1);
        for (int i = 0; i < n; i++)
            CHECK(out[i] == &a[got + i]);
        got += n;
        batcher_stats_t st;
        batcher_stats(b, &st);
        CHECK_EQ_INT((int)st.pending_requests, round < 2 ? 1 : 0);
        CHECK_EQ_INT((int)st.pending, 5 - got);
    }
    CHECK_OK(batcher_submit(b, &x)); /* the last item left: the place is free */
    CHECK_OK(batcher_next(b, out, &n, exp, 4, &ne));
    CHECK(n == 1 && out[0] == &x);
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.rejected == 3 && st.requests == 2 && st.submitted == 6 && st.batches == 4 &&
          st.items_batched == 6);
    batcher_destroy(b);
}

/* One expired item takes its request's other queued items with it (even one with no deadline,
 * even one the scan had passed), counted as one expired request; the place is freed then. With
 * less room in expired[] than items, the rest leave on the next call, before any batch. */
TEST(batcher_request_expires_whole)
{
    batcher_opts_t o = opts(8, 10 * 1000000);
    o.max_queue_size = 1;
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t a[3], *p[4];
    memset(a, 0, sizeof a);
    a[2].deadline_ns = clock_now_ns() + 5 * 1000000ull; /* the last one only */
    CHECK_OK(batcher_submit_many(b, ptrs(a, 3, p), 3));
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK(n == 0 && ne == 3);
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.expired == 3 && st.expired_requests == 1 && st.pending == 0 &&
          st.pending_requests == 0);
    /* room for 2 of 4 */
    batcher_item_t c[4];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 4; i++)
        c[i].deadline_ns = clock_now_ns() - 1;
    CHECK_OK(batcher_submit_many(b, ptrs(c, 4, p), 4));
    CHECK_OK(batcher_next(b, out, &n, exp, 2, &ne));
    CHECK(n == 0 && ne == 2);
    CHECK_OK(batcher_next(b, out, &n, exp, 2, &ne));
    CHECK(n == 0 && ne == 2);
    batcher_stats(b, &st);
    CHECK(st.expired == 7 && st.expired_requests == 2 && st.pending_requests == 0);
    batcher_destroy(b);
    /* part of a request batched, the rest expires: the request is counted expired once */
    o = opts(2, 0);
    CHECK_OK(batcher_create(&o, &b, NULL));
    memset(c, 0, sizeof c);
    for (int i = 0; i < 4; i++)
        c[i].deadline_ns = clock_now_ns() + 20 * 1000000ull;
    CHECK_OK(batcher_submit_many(b, ptrs(c, 4, p), 4));
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK(n == 2 && ne == 0);
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK_OK(batcher_next(b, out, &n, exp, 8, &ne));
    CHECK(n == 0 && ne == 2 && exp[0] != exp[1]);
    batcher_stats(b, &st);
    CHECK(st.expired == 2 && st.expired_requests == 1 && st.pending_requests == 0);
    batcher_destroy(b);
}

TEST(batcher_submit_many_out_of_memory_queues_nothing)
{
    batcher_opts_t o = opts(8, 0);
    batcher_t *b;
    CHECK_OK(batcher_create(&o, &b, NULL));
    batcher_item_t a[3], *p[3];
    memset(a, 0, sizeof a);
    alloc_fail_after(1);
    int rc = batcher_submit_many(b, ptrs(a, 3, p), 3);
    alloc_fail_reset();
    CHECK_EQ_INT(rc, HARK_ERR_NOMEM);
    batcher_stats_t st;
    batcher_stats(b, &st);
    CHECK(st.pending == 0 && st.pending_requests == 0 && st.requests == 0);
    /* the queue's array grows for a request of more items than it holds */
    batcher_item_t *big = calloc(200, sizeof *big), **bp = calloc(200, sizeof *bp);
    CHECK_OK(batcher_submit_many(b, ptrs(big, 200, bp), 200));
    batcher_stats(b, &st);
    CHECK(st.pending == 200 && st.pending_requests == 1);
    batcher_close(b);
    batcher_item_t *out[8], *exp[8];
    int n, ne, got = 0;
    while (batcher_next(b, out, &n, exp, 8, &ne) == HARK_OK)
        got += n;
    CHECK_EQ_INT(got, 200);
    batcher_destroy(b);
    free(big);
    free(bp);
}

/* Many threads submit requests of 1..5 items against max_queue_size 3 (retrying when refused;
 * the workers start once the queue has refused one, so the bound is reached for sure) while
 * workers batch them and a monitor samples the queue: the pending requests never exceed
 * the bound, every item is batched exactly once, none of a refused request's items ever is, and
 * the counters add up. */
enum { MQ_PRODUCERS = 4, MQ_REQS = 1500, MQ_BOUND = 3 };

struct mq {
    batcher_t *b;
    atomic_int stop, over_bound, attempts, refused_items, requests, items;
    atomic_uchar *seen;  /* (MQ_PRODUCERS * MQ_REQS * 5) batched count of each item */
    batcher_item_t *all; /* (MQ_PRODUCERS * MQ_REQS * 5) */
};

static void *mq_producer(void *p)
{
    struct mq *q = (struct mq *)((void **)p)[0];
    int id = (int)(intptr_t)((void **)p)[1];
    unsigned seed = (unsigned)id * 2654435761u + 1;
    for (int r = 0; r < MQ_REQS; r++) {
        seed = seed * 1103515245u + 12345u;
        int k = 1 + (int)((seed >> 16) % 5);
        batcher_item_t *its = &q->all[((size_t)id * MQ_REQS + (size_t)r) * 5], *ip[5];
        for (int i = 0; i < k; i++) {
            its[i].length = (uint64_t)((seed >> 8) % 1000);
            ip[i] = &its[i];
        }
        int rc;
        while ((rc = batcher_submit_many(q->b, ip, k)) == HARK_ERR_AGAIN) {
            atomic_fetch_add(&q->attempts, 1);
            atomic_fetch_add(&q->refused_items, k);
            sched_yield();
        }
        atomic_fetch_add(&q->attempts, 1);
        if (rc == HARK_OK) {
            atomic_fetch_add(&q->requests, 1);
            atomic_fetch_add(&q->items, k);
        }
    }
    return NULL;
}

static void *mq_worker(void *p)
{
    struct mq *q = p;
    batcher_item_t *out[8], *exp[8];
    int n, ne;
    while (batcher_next(q->b, out, &n, exp, 8, &ne) == HARK_OK)
        for (int i = 0; i < n; i++)
            atomic_fetch_add(&q->seen[out[i] - q->all], 1);
    return NULL;
}

static void *mq_monitor(void *p)
{
    struct mq *q = p;
    while (!atomic_load(&q->stop)) {
        batcher_stats_t st;
        batcher_stats(q->b, &st);
        if (st.pending_requests > MQ_BOUND)
            atomic_fetch_add(&q->over_bound, 1);
        sched_yield();
    }
    return NULL;
}

TEST(batcher_concurrent_submitters_never_exceed_max_queue_size)
{
    batcher_opts_t o = opts(8, 100);
    o.preferred[0] = 4;
    o.n_preferred = 1;
    o.length_aware = 1;
    o.max_queue_size = MQ_BOUND;
    size_t total = (size_t)MQ_PRODUCERS * MQ_REQS * 5;
    struct mq q = {0};
    q.seen = calloc(total, sizeof *q.seen);
    q.all = calloc(total, sizeof *q.all);
    CHECK(q.seen && q.all);
    CHECK_OK(batcher_create(&o, &q.b, NULL));
    pthread_t prod[MQ_PRODUCERS], work[2], mon;
    void *args[MQ_PRODUCERS][2];
    pthread_create(&mon, NULL, mq_monitor, &q);
    for (int i = 0; i < MQ_PRODUCERS; i++) {
        args[i][0] = &q;
        args[i][1] = (void *)(intptr_t)i;
        pthread_create(&prod[i], NULL, mq_producer, args[i]);
    }
    batcher_stats_t st;
    do { /* nothing takes requests yet: the queue fills and refuses */
        sched_yield();
        batcher_stats(q.b, &st);
    } while (!st.rejected);
    CHECK_EQ_INT((int)st.pending_requests, MQ_BOUND);
    for (int i = 0; i < 2; i++)
        pthread_create(&work[i], NULL, mq_worker, &q);
    for (int i = 0; i < MQ_PRODUCERS; i++)
        pthread_join(prod[i], NULL);
    batcher_close(q.b);
    for (int i = 0; i < 2; i++)
        pthread_join(work[i], NULL);
    atomic_store(&q.stop, 1);
    pthread_join(mon, NULL);
    CHECK_EQ_INT(atomic_load(&q.over_bound), 0);
    CHECK_EQ_INT(atomic_load(&q.requests), MQ_PRODUCERS * MQ_REQS);
    /* each submitted item batched once; the unused slots (k < 5) never */
    int twice = 0, batched = 0;
    for (size_t i = 0; i < total; i++) {
        twice += q.seen[i] > 1;
        batched += q.seen[i] == 1;
    }
    CHECK_EQ_INT(twice, 0);
    CHECK_EQ_INT(batched, atomic_load(&q.items));
    batcher_stats(q.b, &st);
    CHECK(st.requests == (uint64_t)atomic_load(&q.requests) &&
          st.submitted == (uint64_t)atomic_load(&q.items) && st.items_batched == st.submitted &&
          st.requests + st.rejected == (uint64_t)atomic_load(&q.attempts) &&
          st.rejected_items == (uint64_t)atomic_load(&q.refused_items) && st.pending == 0 &&
          st.pending_requests == 0 && st.expired == 0);
    batcher_destroy(q.b);
    free(q.seen);
    free(q.all);
}
