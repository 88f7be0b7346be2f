/* Tests for src/sched/instance.c with the golden WeNet model on the CPU: concurrent requests
 * are batched and each gets its single-utterance transcript; statistics add up; a full queue
 * answers AGAIN; oversized audio is refused; unloading drains. */
#include "test.h"

#include "audio/audio.h"
#include "core/clock.h"
#include "hark.h"
#include "sched/instance.h"
#include "support/golden_model.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002", "cards-001"};

typedef struct {
    served_request_t req;
    pthread_mutex_t *lock;
    int *done_count;
    char text[1024];
    int status;
    int batch;
    pthread_t thread; /* the instance thread that completed it */
} my_req_t;

/* completions_begin/_end: each instance thread brackets its completions, never nested */
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

static void on_done(served_request_t *r, int status, const char *error, wenet_result_t *res,
                    const served_timing_t *tm)
{
    if (!tl_in_batch)
        atomic_fetch_add(&g_outside, 1);
    my_req_t *q = (my_req_t *)r;
    q->status = status;
    if (res) {
        snprintf(q->text, sizeof q->text, "%s", res->best.text);
        wenet_result_free(res);
    }
    q->batch = tm ? tm->batch_size : 0;
    q->thread = pthread_self();
    pthread_mutex_lock(q->lock);
    (*q->done_count)++;
    pthread_mutex_unlock(q->lock);
}

/* the five golden utterances at 16 kHz, and each one's greedy transcript from the recognizer
 * alone (loaded with lo, or the defaults when NULL; *o: the greedy options used): the references
 * served requests must match */
/* Waits (polling) until *done reaches n or `seconds` have passed. */
static void wait_done(pthread_mutex_t *lock, const int *done, int n, unsigned seconds)
{
    uint64_t t0 = clock_now_ns();
    for (;;) {
        pthread_mutex_lock(lock);
        int d = *done;
        pthread_mutex_unlock(lock);
        if (d == n || clock_now_ns() - t0 > (uint64_t)seconds * 1000000000ull)
            return;
        usleep(2000);
    }
}

static void golden_refs(test_ctx_t *t, const char *path, const wenet_load_opts_t *lo,
                        audio_t au[5], char ref[5][1024], wenet_decode_opts_t *o)
{
    for (int u = 0; u < 5; u++) {
        char wav[1024];
        snprintf(wav, sizeof wav, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), utts[u]);
        audio_opts_t ao = {.target_rate = 16000};
        CHECK_OK(audio_decode_file(wav, &ao, &au[u], NULL));
    }
    wenet_asr_t *asr;
    hark_err_t err = {0};
    CHECKF((lo ? wenet_asr_load_opts(path, lo, &asr, &err) : wenet_asr_load(path, &asr, &err)) ==
               HARK_OK,
           "%s", err.msg);
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(asr, 1, 12, &w, &err));
    *o = wenet_default_opts(asr);
    o->method = DECODE_CTC_GREEDY;
    for (int u = 0; u < 5; u++) {
        wenet_result_t r;
        const float *p = au[u].samples;
        CHECK_OK(wenet_recognize(w, o, &p, &au[u].n, 1, &r, &err));
        snprintf(ref[u], sizeof ref[u], "%s", r.best.text);
        wenet_result_free(&r);
    }
    wenet_worker_destroy(w);
    wenet_asr_destroy(asr);
}

TEST(served_model_batches_concurrent_requests)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    audio_t au[5];
    char ref[5][1024];
    wenet_decode_opts_t o;
    golden_refs(t, path, NULL, au, ref, &o);
    if (test_failed(t))
        return;
    hark_err_t err = {0};

    served_opts_t so;
    memset(&so, 0, sizeof so);
    so.batching.max_batch_size = 8;
    so.batching.preferred[0] = 4;
    so.batching.n_preferred = 1;
    so.batching.max_queue_delay_us = 50000;
    so.batching.max_queue_size = 12;
    so.batching.length_aware = 1;
    so.groups[0] = (served_group_t){.count = 2, .device = -1, .n_threads = 1};
    so.n_groups = 1;
    so.max_seconds = 12;
    so.completions_begin = batch_begin;
    so.completions_end = batch_end;
    served_model_t *m;
    CHECKF(served_model_create(path, &so, &m, &err) == HARK_OK, "%s", err.msg);
    enum { NR = 10 };
    my_req_t reqs[NR];
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    for (int i = 0; i < NR; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        reqs[i].req.pcm = au[i % 5].samples;
        reqs[i].req.n = au[i % 5].n;
        reqs[i].req.opts = o;
        reqs[i].req.done = on_done;
        reqs[i].lock = &lock;
        reqs[i].done_count = &done;
        CHECKF(served_model_submit(m, &reqs[i].req, &err) == HARK_OK, "%s", err.msg);
    }
    /* audio longer than the model accepts is refused at once (the batcher tests cover a full queue) */
    my_req_t extra = reqs[0];
    size_t too_long = 16000 * 13;
    extra.req.n = too_long;
    CHECK_EQ_INT(served_model_submit(m, &extra.req, &err), HARK_ERR_TOO_LARGE);
    wait_done(&lock, &done, NR, 60);
    CHECK_EQ_INT(done, NR);
    int max_batch = 0;
    for (int i = 0; i < NR; i++) {
        CHECK_EQ_INT(reqs[i].status, HARK_OK);
        CHECKF(strcmp(reqs[i].text, ref[i % 5]) == 0, "request %d: '%s' vs '%s'", i, reqs[i].text,
               ref[i % 5]);
        if (reqs[i].batch > max_batch)
            max_batch = reqs[i].batch;
    }
    CHECK(max_batch > 1); /* something was actually batched */
    served_stats_t st;
    served_model_stats(m, &st);
    CHECK(st.success == NR && st.failure == 0 && st.inference_count == NR);
    CHECK(st.execution_count >= 1 && st.execution_count <= NR);
    CHECK(st.queue_ns > 0 && st.compute_infer_ns > 0 && st.audio_seconds > 40);
    uint64_t hist = 0;
    for (int i = 0; i < 10; i++)
        hist += st.batch_hist[i];
    CHECK_EQ_INT(hist, st.execution_count);
    CHECK_EQ_INT(atomic_load(&g_begins), st.execution_count); /* one bracket per batch */
    CHECK_EQ_INT(atomic_load(&g_ends), st.execution_count);
    CHECK_EQ_INT(atomic_load(&g_outside), 0); /* every completion inside one */
    CHECK(served_model_ready(m));
    served_model_destroy(m);
    for (int u = 0; u < 5; u++)
        audio_free(&au[u]);
}

#ifdef HARK_CUDA
/* Two instances on one GPU (instance_group count: 2): each has its own worker (CUDA stream,
 * cuBLAS handle, scratch) over the shared weights, so their batches run at the same time; every
 * request still gets the transcript the GPU recognizer gives it alone, and both instances
 * complete batches. */
GPU_TEST(gpu_two_instances_share_one_gpu)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    audio_t au[5];
    char ref[5][1024];
    wenet_load_opts_t lo = {.device = 0, .precision = WENET_FP32};
    wenet_decode_opts_t o;
    golden_refs(t, path, &lo, au, ref, &o);
    if (test_failed(t))
        return;
    hark_err_t err = {0};

    served_opts_t so;
    memset(&so, 0, sizeof so);
    so.batching.max_batch_size = 8;
    so.batching.preferred[0] = 4;
    so.batching.preferred[1] = 8;
    so.batching.n_preferred = 2;
    so.batching.max_queue_delay_us = 2000;
    so.batching.length_aware = 1;
    so.groups[0] = (served_group_t){.count = 2, .device = 0};
    so.n_groups = 1;
    so.precision = WENET_FP32;
    so.max_seconds = 12;
    served_model_t *m;
    CHECKF(served_model_create(path, &so, &m, &err) == HARK_OK, "%s", err.msg);
    enum { NR = 120 };
    my_req_t *reqs = calloc(NR, sizeof *reqs);
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    int done = 0;
    for (int i = 0; i < NR; i++) {
        reqs[i].req.pcm = au[i % 5].samples;
        reqs[i].req.n = au[i % 5].n;
        reqs[i].req.opts = o;
        reqs[i].req.done = on_done;
        reqs[i].lock = &lock;
        reqs[i].done_count = &done;
        CHECKF(served_model_submit(m, &reqs[i].req, &err) == HARK_OK, "%s", err.msg);
    }
    wait_done(&lock, &done, NR, 120);
    CHECK_EQ_INT(done, NR);
    int threads = 1;
    for (int i = 0; i < NR; i++) {
        CHECK_EQ_INT(reqs[i].status, HARK_OK);
        CHECKF(strcmp(reqs[i].text, ref[i % 5]) == 0, "request %d: '%s' vs '%s'", i, reqs[i].text,
               ref[i % 5]);
        if (!pthread_equal(reqs[i].thread, reqs[0].thread))
            threads = 2;
    }
    CHECKF(threads == 2, "all %d requests were completed by one instance", NR);
    CHECK(served_model_ready(m));
    served_model_destroy(m);
    free(reqs);
    for (int u = 0; u < 5; u++)
        audio_free(&au[u]);
}
#endif
