/* Tests for src/sched/batcher.c: preferred sizes, queue delay, bounded queue, length-aware
 * grouping, priorities, deadlines, close/drain, and many producers/consumers. */
#include "test.h"

#include "core/clock.h"
#include "hark.h"
#include "sched/batcher.h"

#include <pthread.h>
#include <stdatomic.h>
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
