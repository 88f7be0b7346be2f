/* instance.c — model instances: worker threads that take batches from the batcher, run the
 * recognizer and complete the requests. Tests: tests/sched/test_instance.c */
#include "sched/instance.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "hark.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_INSTANCES 64
#define MAX_ASR 9

typedef struct {
    served_model_t *m;
    const wenet_asr_t *asr;
    int n_threads;
    pthread_t thread;
    int started;
} instance_t;

struct served_model {
    served_opts_t o;
    batcher_t *batcher;
    wenet_asr_t *asr[MAX_ASR]; /* one per device used; [0] is the first loaded */
    int asr_device[MAX_ASR];
    int n_asr;
    instance_t inst[MAX_INSTANCES];
    int n_inst;
    pthread_mutex_t lock;
    served_stats_t st;
    int unhealthy;
};

static int hist_bucket(int b)
{
    int k = 0;
    for (int lim = 1; k < 9 && b > lim; lim *= 2)
        k++;
    return k;
}

static int same_opts(const wenet_decode_opts_t *a, const wenet_decode_opts_t *b)
{
    return a->method == b->method && a->beam_size == b->beam_size && a->nbest == b->nbest &&
           a->ctc_weight == b->ctc_weight && a->reverse_weight == b->reverse_weight;
}

/* Runs `n` requests that share decoding options as one padded batch and completes them. */
static void run_group(instance_t *in, wenet_worker_t *w, served_request_t **reqs, int n,
                      uint64_t t_dequeue)
{
    served_model_t *m = in->m;
    const float *pcm[512];
    size_t len[512];
    wenet_result_t res[512];
    size_t maxn = 0, total = 0;
    uint64_t t0 = clock_now_ns();
    for (int i = 0; i < n; i++) {
        pcm[i] = reqs[i]->pcm;
        len[i] = reqs[i]->n;
        total += len[i];
        if (len[i] > maxn)
            maxn = len[i];
    }
    wenet_decode_opts_t o = reqs[0]->opts;
    o.n_threads = in->n_threads;
    uint64_t t1 = clock_now_ns();
    hark_err_t err = {0};
    int rc = wenet_recognize(w, &o, pcm, len, n, res, &err);
    uint64_t t2 = clock_now_ns();
    served_timing_t tm = {.compute_input_ns = t1 - t0, .compute_infer_ns = t2 - t1, .batch_size = n};
    tm.padding = maxn ? 1.0 - (double)total / ((double)maxn * n) : 0.0;
    double audio = 0;
    for (int i = 0; i < n; i++)
        audio += (double)len[i] / wenet_asr_sample_rate(in->asr);
    pthread_mutex_lock(&m->lock);
    m->st.execution_count++;
    m->st.inference_count += (uint64_t)n;
    m->st.batch_hist[hist_bucket(n)]++;
    m->st.padded_samples += (double)maxn * n - (double)total;
    m->st.total_samples += (double)maxn * n;
    m->st.audio_seconds += rc ? 0 : audio;
    m->st.compute_seconds += (double)(t2 - t0) * 1e-9;
    if (rc == HARK_ERR_CUDA)
        m->unhealthy = 1;
    pthread_mutex_unlock(&m->lock);
    /* the completions, their statistics under one lock, then (completions_end) the answers go */
    uint64_t queue_ns = 0, output_ns = 0, request_ns = 0;
    if (m->o.completions_begin)
        m->o.completions_begin(n);
    for (int i = 0; i < n; i++) {
        served_request_t *r = reqs[i];
        uint64_t enq = r->item.enqueue_ns;
        tm.queue_ns = t_dequeue - enq;
        tm.compute_output_ns = 0; /* the callback serialises; measured around it below */
        uint64_t t3 = clock_now_ns();
        r->done(r, rc, rc ? err.msg : NULL, rc ? NULL : &res[i], &tm); /* may free r */
        uint64_t t4 = clock_now_ns();
        queue_ns += tm.queue_ns;
        output_ns += t4 - t3;
        request_ns += t4 - enq;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&m->lock);
    if (rc)
        m->st.failure += (uint64_t)n;
    else
        m->st.success += (uint64_t)n;
    m->st.queue_ns += queue_ns;
    m->st.compute_input_ns += tm.compute_input_ns * (uint64_t)n;
    m->st.compute_infer_ns += tm.compute_infer_ns * (uint64_t)n;
    m->st.compute_output_ns += output_ns;
    m->st.request_ns += request_ns;
    m->st.last_inference_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    pthread_mutex_unlock(&m->lock);
    if (m->o.completions_end)
        m->o.completions_end(n);
}

static void *instance_main(void *arg)
{
    instance_t *in = arg;
    served_model_t *m = in->m;
    char name[16]; /* "inst<N>" in top, perf and bench/serve_bench.sh */
    snprintf(name, sizeof name, "inst%d", (int)(in - m->inst));
    pthread_setname_np(pthread_self(), name);
    int maxb = m->o.batching.max_batch_size;
    wenet_worker_t *w = NULL;
    hark_err_t err = {0};
    if (wenet_worker_create(in->asr, maxb, m->o.max_seconds, &w, &err)) {
        LOG_ERROR("model instance: %s", err.msg);
        pthread_mutex_lock(&m->lock);
        m->unhealthy = 1;
        pthread_mutex_unlock(&m->lock);
    }
    batcher_item_t *items[512], *expired[64];
    served_request_t *group[512];
    int n, ne;
    while (batcher_next(m->batcher, items, &n, expired, 64, &ne) == HARK_OK) {
        uint64_t t_dequeue = clock_now_ns();
        for (int i = 0; i < ne; i++) {
            served_request_t *r = (served_request_t *)expired[i];
            pthread_mutex_lock(&m->lock);
            m->st.failure++;
            pthread_mutex_unlock(&m->lock);
            r->done(r, HARK_ERR_TIMEOUT, "request timed out before it was scheduled", NULL, NULL);
        }
        if (!w) { /* no scratch: fail what comes */
            for (int i = 0; i < n; i++) {
                served_request_t *r = (served_request_t *)items[i];
                r->done(r, HARK_ERR_INTERNAL, "model instance failed to start", NULL, NULL);
            }
            continue;
        }
        /* requests with the same decoding options run together */
        int left = n;
        while (left > 0) {
            int g = 0;
            served_request_t *first = (served_request_t *)items[0];
            for (int i = 0; i < left;) {
                served_request_t *r = (served_request_t *)items[i];
                if (same_opts(&r->opts, &first->opts)) {
                    group[g++] = r;
                    items[i] = items[--left];
                } else {
                    i++;
                }
            }
            run_group(in, w, group, g, t_dequeue);
        }
    }
    wenet_worker_destroy(w);
    return NULL;
}

int served_model_create(const char *dir, const served_opts_t *o, served_model_t **out,
                        hark_err_t *err)
{
    *out = NULL;
    if (o->n_groups < 1 || o->n_groups > 8)
        return err_set(err, HARK_ERR_INVALID_ARG, "instance_group: between 1 and 8 groups");
    if (o->batching.max_batch_size > 512)
        return err_set(err, HARK_ERR_INVALID_ARG, "max_batch_size %d exceeds hark's 512",
                       o->batching.max_batch_size);
    served_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    m->o = *o;
    if (m->o.max_seconds <= 0)
        m->o.max_seconds = 60;
    pthread_mutex_init(&m->lock, NULL);
    int rc = batcher_create(&o->batching, &m->batcher, err);
    if (rc)
        goto fail;
    for (int g = 0; g < o->n_groups; g++) {
        const served_group_t *gr = &o->groups[g];
        int k = 0;
        while (k < m->n_asr && m->asr_device[k] != gr->device)
            k++;
        if (k == m->n_asr) {
            if (k == MAX_ASR) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "too many devices");
                goto fail;
            }
            wenet_load_opts_t lo = {.device = gr->device,
                                    .precision = gr->device >= 0 ? o->precision : WENET_FP32,
                                    .version = o->version};
            if ((rc = wenet_asr_load_opts(dir, &lo, &m->asr[k], err)))
                goto fail;
            m->asr_device[k] = gr->device;
            m->n_asr++;
        }
        for (int c = 0; c < gr->count; c++) {
            if (m->n_inst == MAX_INSTANCES) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "more than %d instances", MAX_INSTANCES);
                goto fail;
            }
            instance_t *in = &m->inst[m->n_inst++];
            in->m = m;
            in->asr = m->asr[k];
            in->n_threads = gr->n_threads;
        }
    }
    for (int i = 0; i < m->n_inst; i++) {
        if (pthread_create(&m->inst[i].thread, NULL, instance_main, &m->inst[i]) != 0) {
            rc = err_set(err, HARK_ERR_INTERNAL, "cannot start instance thread %d", i);
            goto fail;
        }
        m->inst[i].started = 1;
    }
    *out = m;
    return HARK_OK;
fail:
    served_model_destroy(m);
    return rc;
}

void served_model_destroy(served_model_t *m)
{
    if (!m)
        return;
    if (m->batcher)
        batcher_close(m->batcher);
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].started)
            pthread_join(m->inst[i].thread, NULL);
    batcher_destroy(m->batcher);
    for (int k = 0; k < m->n_asr; k++)
        wenet_asr_destroy(m->asr[k]);
    pthread_mutex_destroy(&m->lock);
    hark_free(m);
}

const wenet_asr_t *served_model_asr(const served_model_t *m)
{
    return m->asr[0];
}

int served_model_submit(served_model_t *m, served_request_t *req, hark_err_t *err)
{
    const wenet_asr_t *a = m->asr[0];
    if ((double)req->n > m->o.max_seconds * wenet_asr_sample_rate(a))
        return err_set(err, HARK_ERR_TOO_LARGE, "audio of %.1f s exceeds the model's limit of %.0f s",
                       (double)req->n / wenet_asr_sample_rate(a), m->o.max_seconds);
    req->item.length = req->n;
    int rc = batcher_submit(m->batcher, &req->item);
    if (rc == HARK_ERR_AGAIN)
        return err_set(err, rc, "the model's queue is full");
    if (rc == HARK_ERR_CLOSED)
        return err_set(err, rc, "the model is unloading");
    if (rc)
        return err_set(err, rc, "cannot queue the request");
    return HARK_OK;
}

void served_model_stats(served_model_t *m, served_stats_t *out)
{
    batcher_stats_t bs;
    batcher_stats(m->batcher, &bs);
    pthread_mutex_lock(&m->lock);
    *out = m->st;
    pthread_mutex_unlock(&m->lock);
    out->pending = bs.pending;
}

int served_model_ready(const served_model_t *m)
{
    return !m->unhealthy;
}
