/* Tests for src/sched/instance.c with a test family (no model): concurrent requests are batched
 * and each gets its own result; items of different batch keys never share an execute; statistics
 * add up; oversized audio is refused; cancelled requests never run; a failing execute marks the
 * model unhealthy; a worker that cannot start fails its requests; unloading drains the queue; a
 * request of several items takes one place in the queue, queued or refused whole, and times out
 * whole. */
#include "test.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "sched/instance.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the test family: "recognises" n samples as the text "n=<n> key=<key>" ------------------- */
struct family_model {
    int fail_worker; /* config parameter fail_worker=1: worker_create fails */
};
struct family_worker {
    int max_batch;
};
typedef struct {
    int key;  /* request parameter "key" */
    int fail; /* request parameter "fail": execute fails with HARK_ERR_CUDA */
} echo_opts_t;

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_executes, g_mixed_keys, g_items_run, g_over_batch;

static int echo_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                     family_model_t **out, hark_err_t *err)
{
    family_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int rc = family_param_int(cfg, "fail_worker", 0, 1, &m->fail_worker, err);
    if (rc && rc != HARK_ERR_NOT_FOUND) {
        hark_free(m);
        return rc;
    }
    *out = m;
    return HARK_OK;
}

static void echo_unload(family_model_t *m)
{
    hark_free(m);
}

static void echo_info(const family_model_t *m, family_info_t *out)
{
    out->sample_rate = 1000;
    out->device = -1;
    out->kind = "echo";
}

static int echo_parse(const family_model_t *m, const family_params_t *cfg,
                      const family_params_t *req, void *opts, hark_err_t *err)
{
    echo_opts_t *o = opts;
    memset(o, 0, sizeof *o);
    int rc;
    if ((rc = family_param_int(req, "key", 0, 1000, &o->key, err)) && rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_int(req, "fail", 0, 1, &o->fail, err)) && rc != HARK_ERR_NOT_FOUND)
        return rc;
    return HARK_OK;
}

static uint64_t echo_key(const void *opts)
{
    const echo_opts_t *o = opts;
    return (uint64_t)o->key * 2 + (uint64_t)o->fail;
}

static int echo_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                              family_worker_t **out, hark_err_t *err)
{
    if (m->fail_worker)
        return err_set(err, HARK_ERR_NOMEM, "test: no scratch for this worker");
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->max_batch = wo->max_batch;
    *out = w;
    return HARK_OK;
}

static void echo_worker_destroy(family_worker_t *w)
{
    hark_free(w);
}

static int echo_execute(family_worker_t *w, family_item_t *const *items, int n,
                        family_exec_times_t *times, hark_err_t *err)
{
    const echo_opts_t *first = items[0]->opts;
    pthread_mutex_lock(&g_log_lock);
    g_executes++;
    g_items_run += n;
    if (n > w->max_batch)
        g_over_batch++;
    for (int i = 0; i < n; i++)
        if (echo_key(items[i]->opts) != echo_key(first))
            g_mixed_keys++;
    pthread_mutex_unlock(&g_log_lock);
    usleep(2000); /* long enough for requests to queue up behind a batch */
    for (int i = 0; i < n; i++) {
        const echo_opts_t *o = items[i]->opts;
        family_event_t ev = {.kind = FAMILY_EV_DONE};
        asr_result_t r = {0};
        char text[64];
        if (o->fail) {
            ev.status = HARK_ERR_CUDA;
            ev.error = "test: the device failed";
        } else {
            snprintf(text, sizeof text, "n=%zu key=%d", items[i]->n, o->key);
            r.best.text = hark_strdup(text);
            r.duration_s = items[i]->n / 1000.0;
            ev.asr = &r;
        }
        items[i]->emit(items[i], &ev);
        asr_result_free(&r); /* what the receiver did not take */
    }
    if (times)
        times->infer_ns = 2000000;
    return first->fail ? err_set(err, HARK_ERR_CUDA, "test: the device failed") : HARK_OK;
}

static const family_t echo_family = {
    .name = "test_echo",
    .task = FAMILY_TASK_ASR,
    .opts_size = sizeof(echo_opts_t),
    .load = echo_load,
    .unload = echo_unload,
    .info = echo_info,
    .parse_opts = echo_parse,
    .batch_key = echo_key,
    .worker_create = echo_worker_create,
    .worker_destroy = echo_worker_destroy,
    .execute = echo_execute,
};

/* ---- requests ----------------------------------------------------------------------------- */
typedef struct {
    served_request_t req;
    echo_opts_t opts;
    atomic_int cancel;
    pthread_mutex_t *lock;
    int *done_count;
    char text[1024];
    int status;
    int batch;
    int timed; /* done got timing (the request ran) */
} my_req_t;

static __thread int tl_in_batch;
static atomic_int g_begins, g_ends, g_outside;

static void batch_begin(int n)
{
    if (tl_in_batch++)
        atomic_fetch_add(&g_outside, 1);
    atomic_fetch_add(&g_begins, 1);
}

static void batch_end(int n)
{
    tl_in_batch--;
    atomic_fetch_add(&g_ends, 1);
}

static void on_done(served_request_t *r, int status, const char *error, asr_result_t *res,
                    const served_timing_t *tm)
{
    my_req_t *q = (my_req_t *)r;
    if (tm && !tl_in_batch)
        atomic_fetch_add(&g_outside, 1);
    q->status = status;
    if (res) {
        asr_result_t mine;
        asr_result_take(&mine, res); /* taken: the instance frees nothing of it */
        snprintf(q->text, sizeof q->text, "%s", mine.best.text ? mine.best.text : "");
        asr_result_free(&mine);
    } else if (error) {
        snprintf(q->text, sizeof q->text, "error: %s", error);
    }
    q->batch = tm ? tm->batch_size : 0;
    q->timed = tm != NULL;
    pthread_mutex_lock(q->lock);
    (*q->done_count)++;
    pthread_mutex_unlock(q->lock);
}

static void wait_done(pthread_mutex_t *lock, const int *done, int n, unsigned seconds)
{
    uint64_t t0 = clock_now_ns();
    for (;;) {
        pthread_mutex_lock(lock);
        int d = *done;
        pthread_mutex_unlock(lock);
        if (d == n || clock_now_ns() - t0 > (uint64_t)seconds * 1000000000ull)
            return;
        usleep(1000);
    }
}

static void opts_for(served_opts_t *so, int count)
{
    memset(so, 0, sizeof *so);
    so->family = &echo_family;
    so->batching.max_batch_size = 8;
    so->batching.preferred[0] = 4;
    so->batching.n_preferred = 1;
    so->batching.max_queue_delay_us = 20000;
    so->batching.max_queue_size = 64;
    so->batching.length_aware = 1;
    so->groups[0] = (served_group_t){.count = count, .device = -1};
    so->n_groups = 1;
    so->max_seconds = 10;
    so->completions_begin = batch_begin;
    so->completions_end = batch_end;
}

/* what submit_n sets as each request's input_ns (the caller's time on its input) */
static uint64_t g_submit_input_ns;

/* submits requests with the given keys (request parameter "key"), n = 100 * (i + 1) samples */
static void submit_n(test_ctx_t *t, served_model_t *m, my_req_t *reqs, int nr, const int *keys,
                     pthread_mutex_t *lock, int *done)
{
    hark_err_t err = {0};
    for (int i = 0; i < nr; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        char kv[16];
        snprintf(kv, sizeof kv, "%d", keys ? keys[i] : 0);
        family_param_t p = {"key", kv};
        family_params_t req = {&p, 1};
        CHECKF(served_model_parse_opts(m, &req, &reqs[i].opts, &err) == HARK_OK, "%s", err.msg);
        reqs[i].req.fi.opts = &reqs[i].opts;
        reqs[i].req.fi.n = (size_t)(100 * (i + 1));
        reqs[i].req.cancelled = &reqs[i].cancel;
        reqs[i].req.input_ns = g_submit_input_ns;
        reqs[i].req.done = on_done;
        reqs[i].lock = lock;
        reqs[i].done_count = done;
        CHECKF(served_model_submit(m, &reqs[i].req, &err) == HARK_OK, "%s", err.msg);
    }
}

static void reset_log(void)
{
    pthread_mutex_lock(&g_log_lock);
    g_executes = g_mixed_keys = g_items_run = g_over_batch = 0;
    pthread_mutex_unlock(&g_log_lock);
    atomic_store(&g_begins, 0);
    atomic_store(&g_ends, 0);
    atomic_store(&g_outside, 0);
}

TEST(served_model_batches_by_key)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 2);
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    CHECK(served_model_family(m) == &echo_family);
    enum { NR = 40 };
    static my_req_t reqs[NR];
    int keys[NR];
    for (int i = 0; i < NR; i++)
        keys[i] = i % 3;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    submit_n(t, m, reqs, NR, keys, &lock, &done);
    if (test_failed(t))
        return;
    /* audio longer than the model accepts is refused at once */
    my_req_t extra = reqs[0];
    extra.req.fi.n = 1000 * 11;
    CHECK_EQ_INT(served_model_submit(m, &extra.req, &err), HARK_ERR_TOO_LARGE);
    wait_done(&lock, &done, NR, 30);
    CHECK_EQ_INT(done, NR);
    int max_batch = 0;
    for (int i = 0; i < NR; i++) {
        char want[64];
        snprintf(want, sizeof want, "n=%d key=%d", 100 * (i + 1), keys[i]);
        CHECK_EQ_INT(reqs[i].status, HARK_OK);
        CHECKF(!strcmp(reqs[i].text, want), "request %d: '%s' vs '%s'", i, reqs[i].text, want);
        if (reqs[i].batch > max_batch)
            max_batch = reqs[i].batch;
    }
    CHECK(max_batch > 1);          /* something was batched */
    CHECK_EQ_INT(g_mixed_keys, 0); /* never two keys in one execute */
    CHECK_EQ_INT(g_over_batch, 0);
    CHECK_EQ_INT(g_items_run, NR);
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == NR && st.failure == 0 && st.inference_count == NR);
    CHECK_EQ_INT(st.execution_count, g_executes);
    CHECK(st.queue_ns > 0 && st.compute_infer_ns > 0);
    CHECK(st.audio_seconds > 81 && st.audio_seconds < 82.1); /* sum of 0.1 * (i + 1) s */
    uint64_t hist = 0;
    for (int i = 0; i < 10; i++)
        hist += st.batch_hist[i];
    CHECK_EQ_INT(hist, st.execution_count);
    CHECK_EQ_INT(atomic_load(&g_begins), st.execution_count); /* one bracket per batch */
    CHECK_EQ_INT(atomic_load(&g_ends), st.execution_count);
    CHECK_EQ_INT(atomic_load(&g_outside), 0);
    CHECK(served_model_ready(m));
    served_model_destroy(m);
}

/* Statistics (issue 23): the caller's input time (audio decoding, tensor checks) is counted in
 * compute_input, every execution is listed under its batch size (Triton's batch_stats), and a
 * request refused before the queue counts as a failure. */
TEST(served_model_stats_input_batches_refusals)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 2);
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    enum { NR = 40 };
    static my_req_t reqs[NR];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    const uint64_t each = 1000000; /* 1 ms of input work per request, as the caller reports */
    g_submit_input_ns = each;
    submit_n(t, m, reqs, NR, NULL, &lock, &done);
    g_submit_input_ns = 0;
    if (test_failed(t))
        return;
    wait_done(&lock, &done, NR, 30);
    CHECK_EQ_INT(done, NR);
    served_model_count_failure(m);
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == NR && st.failure == 1);
    CHECKF(st.compute_input_ns >= NR * each, "compute_input %llu ns for %d requests",
           (unsigned long long)st.compute_input_ns, NR);
    CHECK(st.n_batch_stats >= 1);
    uint64_t execs = 0, items = 0;
    for (int i = 0; i < st.n_batch_stats; i++) {
        const served_batch_stat_t *b = &st.batch_stats[i];
        CHECK(b->batch_size >= 1 && b->batch_size <= 8 && b->count >= 1);
        for (int k = 0; k < i; k++)
            CHECK(st.batch_stats[k].batch_size != b->batch_size);
        CHECKF(b->input_ns >= b->count * (uint64_t)b->batch_size * each,
               "batch size %d: input %llu ns over %llu executions", b->batch_size,
               (unsigned long long)b->input_ns, (unsigned long long)b->count);
        CHECK(b->infer_ns > 0);
        execs += b->count;
        items += b->count * (uint64_t)b->batch_size;
    }
    CHECK_EQ_INT(execs, st.execution_count);
    CHECK_EQ_INT(items, NR);
    served_model_destroy(m);
}

TEST(served_model_bad_request_options)
{
    served_opts_t so;
    opts_for(&so, 1);
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    echo_opts_t o;
    family_param_t p = {"key", "many"};
    family_params_t req = {&p, 1};
    CHECK_EQ_INT(served_model_parse_opts(m, &req, &o, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "key") && strstr(err.msg, "many"), "%s", err.msg);
    served_model_destroy(m);
}

TEST(served_model_drops_cancelled_requests)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 1);
    so.batching.max_queue_delay_us = 200000; /* the requests wait long enough to be cancelled */
    so.batching.n_preferred = 0;
    so.batching.max_batch_size = 64;
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    enum { NR = 6 };
    static my_req_t reqs[NR];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    submit_n(t, m, reqs, NR, NULL, &lock, &done);
    if (test_failed(t))
        return;
    for (int i = 0; i < NR; i += 2)
        atomic_store(&reqs[i].cancel, 1);
    wait_done(&lock, &done, NR, 10);
    CHECK_EQ_INT(done, NR);
    for (int i = 0; i < NR; i++) {
        CHECK_EQ_INT(reqs[i].status, i % 2 ? HARK_OK : HARK_ERR_CANCELLED);
        CHECK_EQ_INT(reqs[i].timed, i % 2);
    }
    CHECK_EQ_INT(g_items_run, NR / 2);
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == NR / 2 && st.failure == NR / 2);
    served_model_destroy(m);
}

TEST(served_model_failed_execute_marks_unhealthy)
{
    served_opts_t so;
    opts_for(&so, 1);
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    my_req_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    family_param_t p = {"fail", "1"};
    family_params_t req = {&p, 1};
    CHECK_OK(served_model_parse_opts(m, &req, &r.opts, &err));
    r.req.fi.opts = &r.opts;
    r.req.fi.n = 10;
    r.req.done = on_done;
    r.lock = &lock;
    r.done_count = &done;
    CHECK_OK(served_model_submit(m, &r.req, &err));
    wait_done(&lock, &done, 1, 10);
    CHECK_EQ_INT(done, 1);
    CHECK_EQ_INT(r.status, HARK_ERR_CUDA);
    CHECKF(strstr(r.text, "device failed") != NULL, "%s", r.text);
    CHECK(!served_model_ready(m));
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.failure == 1 && st.success == 0);
    served_model_destroy(m);
}

/* an instance whose worker cannot be created (no memory for its scratch, its stream pool): the
 * model fails to load, naming the instance and the reason, rather than answering some requests
 * with errors */
TEST(served_model_worker_that_cannot_start)
{
    served_opts_t so;
    opts_for(&so, 2);
    family_param_t p = {"fail_worker", "1"};
    so.cfg = (family_params_t){&p, 1};
    served_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK(served_model_create("unused", &so, &m, &err) == HARK_ERR_NOMEM && m == NULL);
    CHECKF(strstr(err.msg, "model instance 1 of 2") && strstr(err.msg, "no scratch"), "%s",
           err.msg);
}

TEST(served_model_unload_drains_the_queue)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 1);
    so.batching.max_queue_delay_us = 500000;
    so.batching.n_preferred = 0;
    so.batching.max_batch_size = 4;
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    enum { NR = 10 };
    static my_req_t reqs[NR];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    submit_n(t, m, reqs, NR, NULL, &lock, &done);
    if (test_failed(t))
        return;
    served_model_destroy(m); /* closes the batcher: what is queued still runs */
    CHECK_EQ_INT(done, NR);
    for (int i = 0; i < NR; i++)
        CHECK_EQ_INT(reqs[i].status, HARK_OK);
    CHECK_EQ_INT(g_items_run, NR);
}

/* ---- sequences: a streaming test family ------------------------------------------------------
 * A stream sums its chunks' sample counts; each item reports "sum=<total> chunks=<k>" (PARTIAL,
 * or the final result with DONE at stream_end). It checks the scheduler's promises: a stream is
 * used by the worker that opened it, on that worker's thread, at most once per execute, never
 * more streams open than max_sequences. */
typedef struct {
    family_worker_t *w;
    pthread_t thread;
    size_t sum;
    int chunks;
} ctr_stream_t;

static struct {
    pthread_mutex_t lock;
    int opens, closes, open_now, max_open_seen, wrong_worker, twice, executes, multi;
} g_seq;
static pthread_once_t g_seq_once = PTHREAD_ONCE_INIT;
static void g_seq_init(void)
{
    pthread_mutex_init(&g_seq.lock, NULL);
}

struct ctr_worker {
    int max_sequences, open;
};

static int ctr_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                             family_worker_t **out, hark_err_t *err)
{
    struct ctr_worker *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->max_sequences = wo->max_sequences;
    *out = (family_worker_t *)w;
    return HARK_OK;
}

static void ctr_worker_destroy(family_worker_t *w)
{
    hark_free(w);
}

static int ctr_stream_open(family_worker_t *fw, void **stream, hark_err_t *err)
{
    struct ctr_worker *w = (struct ctr_worker *)fw;
    if (w->open >= w->max_sequences)
        return err_set(err, HARK_ERR_TOO_LARGE, "test: all stream slots taken");
    ctr_stream_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    s->w = fw;
    s->thread = pthread_self();
    w->open++;
    pthread_mutex_lock(&g_seq.lock);
    g_seq.opens++;
    if (++g_seq.open_now > g_seq.max_open_seen)
        g_seq.max_open_seen = g_seq.open_now;
    pthread_mutex_unlock(&g_seq.lock);
    *stream = s;
    return HARK_OK;
}

static void ctr_stream_close(family_worker_t *fw, void *stream)
{
    ctr_stream_t *s = stream;
    if (!s)
        return;
    ((struct ctr_worker *)fw)->open--;
    pthread_mutex_lock(&g_seq.lock);
    g_seq.closes++;
    g_seq.open_now--;
    if (s->w != fw || !pthread_equal(s->thread, pthread_self()))
        g_seq.wrong_worker++;
    pthread_mutex_unlock(&g_seq.lock);
    hark_free(s);
}

static int ctr_execute(family_worker_t *w, family_item_t *const *items, int n,
                       family_exec_times_t *times, hark_err_t *err)
{
    pthread_mutex_lock(&g_seq.lock);
    g_seq.executes++;
    g_seq.multi += n > 1;
    for (int i = 0; i < n; i++) {
        ctr_stream_t *s = items[i]->stream;
        if (!s || s->w != w || !pthread_equal(s->thread, pthread_self()))
            g_seq.wrong_worker++;
        for (int j = 0; j < i; j++)
            g_seq.twice += items[j]->stream == s;
    }
    pthread_mutex_unlock(&g_seq.lock);
    usleep(3000);
    for (int i = 0; i < n; i++) {
        ctr_stream_t *s = items[i]->stream;
        if (!s)
            continue;
        s->sum += items[i]->n;
        s->chunks++;
        char text[64];
        snprintf(text, sizeof text, "sum=%zu chunks=%d", s->sum, s->chunks);
        asr_result_t r = {0};
        r.best.text = hark_strdup(text);
        family_event_t ev = {.kind = items[i]->stream_end ? FAMILY_EV_DONE : FAMILY_EV_PARTIAL,
                             .asr = &r};
        items[i]->emit(items[i], &ev);
        asr_result_free(&r);
        if (!items[i]->stream_end) {
            family_event_t done = {.kind = FAMILY_EV_DONE};
            items[i]->emit(items[i], &done);
        }
    }
    return HARK_OK;
}

static const family_t ctr_family = {
    .name = "test_counter",
    .task = FAMILY_TASK_ASR,
    .opts_size = sizeof(echo_opts_t),
    .load = echo_load,
    .unload = echo_unload,
    .info = echo_info,
    .parse_opts = echo_parse,
    .batch_key = echo_key,
    .worker_create = ctr_worker_create,
    .worker_destroy = ctr_worker_destroy,
    .stream_open = ctr_stream_open,
    .stream_close = ctr_stream_close,
    .execute = ctr_execute,
};

static served_model_t *seq_model(test_ctx_t *t, int instances, int per_instance, uint64_t idle_us)
{
    served_opts_t so;
    opts_for(&so, instances);
    so.family = &ctr_family;
    so.seq = (served_seq_opts_t){.enabled = 1,
                                 .max_sequences = per_instance,
                                 .idle_us = idle_us,
                                 .preferred = {4},
                                 .n_preferred = 1,
                                 .max_queue_delay_us = 2000};
    pthread_once(&g_seq_once, g_seq_init);
    pthread_mutex_lock(&g_seq.lock);
    g_seq.opens = g_seq.closes = g_seq.open_now = g_seq.max_open_seen = 0;
    g_seq.wrong_worker = g_seq.twice = g_seq.executes = g_seq.multi = 0;
    pthread_mutex_unlock(&g_seq.lock);
    served_model_t *m = NULL;
    hark_err_t err = {0};
    if (served_model_create("unused", &so, &m, &err) != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "served_model_create: %s", err.msg);
    return m;
}

/* one chunk of n samples of sequence id */
static int seq_chunk(served_model_t *m, my_req_t *q, uint64_t id, int start, int end, size_t n,
                     uint64_t owner, pthread_mutex_t *lock, int *done, hark_err_t *err)
{
    memset(q, 0, sizeof *q);
    family_params_t none = {0};
    int rc = served_model_parse_opts(m, &none, &q->opts, err);
    if (rc)
        return rc;
    q->req.fi.opts = &q->opts;
    q->req.fi.n = n;
    q->req.cancelled = &q->cancel;
    q->req.done = on_done;
    q->lock = lock;
    q->done_count = done;
    served_seq_ctl_t c = {.id = id, .start = start, .end = end, .owner = owner};
    return served_model_submit_seq(m, &q->req, &c, err);
}

TEST(served_sequences_bound_ordered_batched)
{
    served_model_t *m = seq_model(t, 2, 2, 0);
    if (!m)
        return;
    enum { NS = 4, NC = 5 };
    static my_req_t reqs[NS][NC];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int done;
    done = 0;
    hark_err_t err = {0};
    /* every chunk of every sequence submitted at once: later chunks wait for earlier ones */
    for (int c = 0; c < NC; c++)
        for (int s = 0; s < NS; s++)
            CHECKF(seq_chunk(m, &reqs[s][c], 100 + s, c == 0, c == NC - 1, (size_t)(s + 1), 0,
                             &lock, &done, &err) == HARK_OK,
                   "%s", err.msg);
    /* the pool (2 instances x 2) is full: a fifth sequence is refused, a chunk of none too */
    static my_req_t extra;
    CHECK_EQ_INT(seq_chunk(m, &extra, 999, 1, 0, 1, 0, &lock, &done, &err), HARK_ERR_EXHAUSTED);
    CHECK_EQ_INT(seq_chunk(m, &extra, 998, 0, 0, 1, 0, &lock, &done, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(seq_chunk(m, &extra, 0, 1, 0, 1, 0, &lock, &done, &err), HARK_ERR_INVALID_ARG);
    wait_done(&lock, &done, NS * NC, 20);
    CHECK_EQ_INT(done, NS * NC);
    for (int s = 0; s < NS; s++)
        for (int c = 0; c < NC; c++) {
            char want[64];
            snprintf(want, sizeof want, "sum=%d chunks=%d", (s + 1) * (c + 1), c + 1);
            CHECKF(reqs[s][c].status == HARK_OK && !strcmp(reqs[s][c].text, want),
                   "sequence %d chunk %d: '%s' (want '%s')", s, c, reqs[s][c].text, want);
        }
    pthread_mutex_lock(&g_seq.lock);
    CHECK_EQ_INT(g_seq.wrong_worker, 0);
    CHECK_EQ_INT(g_seq.twice, 0);
    CHECKF(g_seq.multi > 0, "chunks of different sequences never shared an execute");
    CHECK_EQ_INT(g_seq.opens, NS);
    CHECK_EQ_INT(g_seq.closes, NS);
    CHECK(g_seq.max_open_seen <= NS);
    pthread_mutex_unlock(&g_seq.lock);
    CHECK_EQ_INT(served_model_sequences(m), 0);
    /* the slots are back: a new sequence starts; a chunk after END is of no sequence */
    done = 0;
    CHECK_EQ_INT(seq_chunk(m, &extra, 100, 0, 0, 1, 0, &lock, &done, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(seq_chunk(m, &extra, 999, 1, 1, 7, 0, &lock, &done, &err), HARK_OK);
    wait_done(&lock, &done, 1, 10);
    CHECK(!strcmp(extra.text, "sum=7 chunks=1"));
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == NS * NC + 1 && st.inference_count == NS * NC + 1);
    served_model_destroy(m);
}

TEST(served_sequences_idle_abandon_unload)
{
    served_model_t *m = seq_model(t, 1, 2, 100000); /* 0.1 s idle */
    if (!m)
        return;
    static my_req_t r[8];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* static: alive for the instances
                                                                 even when a check returns early */
    static int done;
    done = 0;
    hark_err_t err = {0};
    CHECK_EQ_INT(seq_chunk(m, &r[0], 1, 1, 0, 3, 0, &lock, &done, &err), HARK_OK);
    CHECK_EQ_INT(seq_chunk(m, &r[1], 2, 1, 0, 3, 42, &lock, &done, &err), HARK_OK);
    CHECK_EQ_INT(seq_chunk(m, &r[2], 3, 1, 0, 3, 0, &lock, &done, &err), HARK_ERR_EXHAUSTED);
    wait_done(&lock, &done, 2, 10);
    served_model_abandon(m, 42); /* sequence 2's client went away */
    CHECK_EQ_INT(seq_chunk(m, &r[2], 2, 0, 0, 3, 42, &lock, &done, &err), HARK_ERR_INVALID_ARG);
    usleep(400000); /* sequence 1 idles past 0.1 s */
    CHECK_EQ_INT(seq_chunk(m, &r[2], 1, 0, 0, 3, 0, &lock, &done, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(served_model_sequences(m), 0);
    pthread_mutex_lock(&g_seq.lock);
    CHECK_EQ_INT(g_seq.closes, 2);
    pthread_mutex_unlock(&g_seq.lock);
    /* a restart of an active id ends the old sequence; unloading closes what is open */
    CHECK_EQ_INT(seq_chunk(m, &r[3], 5, 1, 0, 1, 0, &lock, &done, &err), HARK_OK);
    CHECK_EQ_INT(seq_chunk(m, &r[4], 5, 1, 0, 2, 0, &lock, &done, &err), HARK_OK);
    wait_done(&lock, &done, 4, 10);
    usleep(50000); /* the old sequence's slot comes back once its instance closed it */
    CHECK_EQ_INT(seq_chunk(m, &r[5], 6, 1, 0, 2, 0, &lock, &done, &err), HARK_OK);
    wait_done(&lock, &done, 5, 10);
    CHECK(!strcmp(r[4].text, "sum=2 chunks=1"));
    /* plain requests are refused by a sequence model */
    memset(&r[6], 0, sizeof r[6]);
    r[6].req.fi.opts = &r[6].opts;
    r[6].req.done = on_done;
    CHECK_EQ_INT(served_model_submit(m, &r[6].req, &err), HARK_ERR_INVALID_ARG);
    served_model_destroy(m);
    pthread_mutex_lock(&g_seq.lock);
    CHECK_EQ_INT(g_seq.opens, g_seq.closes);
    CHECK_EQ_INT(g_seq.wrong_worker, 0);
    pthread_mutex_unlock(&g_seq.lock);
}

/* ---- the WeNet family served: concurrent requests each get the transcript the recognizer gives
 * the utterance alone (CPU), and two instances on one GPU both complete batches ---------------- */
#include "audio/audio.h"
#include "model/wenet/wenet_asr.h"
#include "support/golden_model.h"

static const char *g_utts[] = {"librispeech-1995-1837-0001", "jfk",
                               "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                               "cards-001"};

typedef struct {
    my_req_t r;
    pthread_t thread;
} wreq_t;

static void golden_refs(test_ctx_t *t, const char *path, int device, audio_t au[5],
                        char ref[5][1024])
{
    for (int u = 0; u < 5; u++) {
        char wav[1024];
        snprintf(wav, sizeof wav, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), g_utts[u]);
        audio_opts_t ao = {.target_rate = 16000};
        CHECK_OK(audio_decode_file(wav, &ao, &au[u], NULL));
    }
    wenet_asr_t *asr;
    hark_err_t err = {0};
    wenet_load_opts_t lo = {.device = device, .precision = WENET_FP32};
    CHECKF(wenet_asr_load_opts(path, &lo, &asr, &err) == HARK_OK, "%s", err.msg);
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(asr, 1, 12, &w, &err));
    wenet_decode_opts_t o = wenet_default_opts(asr);
    o.method = DECODE_CTC_GREEDY;
    for (int u = 0; u < 5; u++) {
        wenet_result_t r;
        const float *p = au[u].samples;
        CHECK_OK(wenet_recognize(w, &o, &p, &au[u].n, 1, &r, &err));
        snprintf(ref[u], sizeof ref[u], "%s", r.best.text);
        wenet_result_free(&r);
    }
    wenet_worker_destroy(w);
    wenet_asr_destroy(asr);
}

static pthread_t g_done_threads[256];
static atomic_int g_n_done_threads;

static void on_done_thread(served_request_t *r, int status, const char *error, asr_result_t *res,
                           const served_timing_t *tm)
{
    int k = atomic_fetch_add(&g_n_done_threads, 1);
    if (k < 256)
        g_done_threads[k] = pthread_self();
    on_done(r, status, error, res, tm);
}

static void served_wenet(test_ctx_t *t, int device, int count, int nr)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    audio_t au[5];
    char ref[5][1024];
    golden_refs(t, path, device, au, ref);
    if (test_failed(t))
        return;
    served_opts_t so;
    memset(&so, 0, sizeof so);
    so.family = family_find("wenet_u2");
    CHECK(so.family != NULL);
    so.batching.max_batch_size = 8;
    so.batching.preferred[0] = 4;
    so.batching.n_preferred = 1;
    so.batching.max_queue_delay_us = 20000;
    so.batching.length_aware = 1;
    so.groups[0] = (served_group_t){.count = count, .device = device, .n_threads = 1};
    so.n_groups = 1;
    so.precision = "fp32";
    so.max_seconds = 12;
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create(path, &so, &m, &err) == HARK_OK, "%s", err.msg);
    my_req_t *reqs = calloc((size_t)nr, sizeof *reqs);
    void *opts = calloc(1, so.family->opts_size);
    family_param_t p = {"decoding_method", "ctc_greedy_search"};
    family_params_t req = {&p, 1};
    CHECK_OK(served_model_parse_opts(m, &req, opts, &err));
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    atomic_store(&g_n_done_threads, 0);
    for (int i = 0; i < nr; i++) {
        reqs[i].req.fi.opts = opts;
        reqs[i].req.fi.pcm = au[i % 5].samples;
        reqs[i].req.fi.n = au[i % 5].n;
        reqs[i].req.done = on_done_thread;
        reqs[i].lock = &lock;
        reqs[i].done_count = &done;
        CHECKF(served_model_submit(m, &reqs[i].req, &err) == HARK_OK, "%s", err.msg);
    }
    wait_done(&lock, &done, nr, 120);
    CHECK_EQ_INT(done, nr);
    int max_batch = 0;
    for (int i = 0; i < nr; i++) {
        CHECK_EQ_INT(reqs[i].status, HARK_OK);
        CHECKF(!strcmp(reqs[i].text, ref[i % 5]), "request %d: '%s' vs '%s'", i, reqs[i].text,
               ref[i % 5]);
        if (reqs[i].batch > max_batch)
            max_batch = reqs[i].batch;
    }
    CHECK(max_batch > 1);
    if (count > 1) {
        int threads = 1, n = atomic_load(&g_n_done_threads);
        for (int i = 1; i < n && i < 256; i++)
            if (!pthread_equal(g_done_threads[i], g_done_threads[0]))
                threads = 2;
        CHECKF(threads == 2, "all %d requests were completed by one instance", nr);
    }
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == (uint64_t)nr && st.audio_seconds > 4.0 * nr);
    CHECK(served_model_ready(m));
    served_model_destroy(m);
    free(opts);
    free(reqs);
    for (int u = 0; u < 5; u++)
        audio_free(&au[u]);
}

TEST(served_wenet_matches_the_recognizer)
{
    served_wenet(t, -1, 2, 10);
}

#ifdef HARK_CUDA
GPU_TEST(gpu_two_instances_share_one_gpu)
{
    served_wenet(t, 0, 2, 120);
}
#endif

/* fills r[0..n) as requests of the default options (no submission) */
static void prepare_n(test_ctx_t *t, served_model_t *m, my_req_t *r, int n, size_t samples,
                      pthread_mutex_t *lock, int *done, served_request_t **ptr)
{
    hark_err_t err = {0};
    family_params_t none = {NULL, 0};
    for (int i = 0; i < n; i++) {
        memset(&r[i], 0, sizeof r[i]);
        CHECK_OK(served_model_parse_opts(m, &none, &r[i].opts, &err));
        r[i].req.fi.opts = &r[i].opts;
        r[i].req.fi.n = samples;
        r[i].req.done = on_done;
        r[i].lock = lock;
        r[i].done_count = done;
        ptr[i] = &r[i].req;
    }
}

/* Issue 23: a client request of several items takes one place of max_queue_size and is queued
 * or refused as a whole (no `done` for any item of a refused one); unloading runs what was
 * queued. */
TEST(served_model_submit_many_is_one_request)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 1);
    so.batching.max_queue_delay_us = 10 * 1000000; /* nothing is due before the unload */
    so.batching.n_preferred = 0;
    so.batching.max_queue_size = 1;
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    static my_req_t a[3], b[2];
    served_request_t *pa[3], *pb[2];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    prepare_n(t, m, a, 3, 100, &lock, &done, pa);
    prepare_n(t, m, b, 2, 100, &lock, &done, pb);
    CHECKF(served_model_submit_many(m, pa, 3, &err) == HARK_OK, "%s", err.msg);
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.pending == 1 && st.pending_items == 3);
    CHECK_EQ_INT(served_model_submit_many(m, pb, 2, &err), HARK_ERR_AGAIN);
    CHECKF(strstr(err.msg, "Exceeds maximum queue size") && strstr(err.msg, "1 requests"), "%s",
           err.msg);
    b[1].req.fi.n = 1000 * 11; /* too long: refused before the queue is looked at */
    CHECK_EQ_INT(served_model_submit_many(m, pb, 2, &err), HARK_ERR_TOO_LARGE);
    served_model_stats(m, &st);
    CHECK(st.pending == 1 && st.pending_items == 3);
    served_model_destroy(m); /* drains: the three run */
    CHECK_EQ_INT(done, 3);
    for (int i = 0; i < 3; i++)
        CHECK(a[i].status == HARK_OK && a[i].timed && !strcmp(a[i].text, "n=100 key=0"));
    CHECK_EQ_INT(g_items_run, 3);
}

/* The default timeout is one deadline for a request's items: they expire together, each failed
 * once with the timeout, and none of them runs. */
TEST(served_model_request_times_out_whole)
{
    reset_log();
    served_opts_t so;
    opts_for(&so, 1);
    so.batching.max_queue_delay_us = 10 * 1000000;
    so.batching.n_preferred = 0;
    so.batching.max_queue_size = 1;
    so.default_timeout_us = 30000;
    served_model_t *m;
    hark_err_t err = {0};
    CHECKF(served_model_create("unused", &so, &m, &err) == HARK_OK, "%s", err.msg);
    static my_req_t a[4], x;
    served_request_t *pa[4], *px;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    prepare_n(t, m, a, 4, 100, &lock, &done, pa);
    CHECKF(served_model_submit_many(m, pa, 4, &err) == HARK_OK, "%s", err.msg);
    wait_done(&lock, &done, 4, 10);
    CHECK_EQ_INT(done, 4);
    for (int i = 0; i < 4; i++)
        CHECKF(a[i].status == HARK_ERR_TIMEOUT && !a[i].timed && strstr(a[i].text, "timed out"),
               "item %d: %d %s", i, a[i].status, a[i].text);
    CHECK_EQ_INT(g_items_run, 0);
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.pending == 0 && st.pending_items == 0 && st.failure == 4);
    /* its place is free again */
    prepare_n(t, m, &x, 1, 100, &lock, &done, &px);
    x.req.item.deadline_ns = clock_now_ns() + 60ull * 1000000000ull; /* its own: not the default */
    CHECK_OK(served_model_submit(m, px, &err));
    served_model_destroy(m);
    CHECK(done == 5 && x.status == HARK_OK);
}
