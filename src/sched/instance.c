/* instance.c — model instances: worker threads that take batches from the batcher, run the
 * family and complete the requests. Tests: tests/sched/test_instance.c */
#include "sched/instance.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "hark.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_INSTANCES 64
#define MAX_DEVICES 9

typedef struct {
    served_model_t *m;
    const family_model_t *model;
    int n_threads;
    pthread_t thread;
    int started;
} instance_t;

struct served_model {
    served_opts_t o;
    family_param_t *cfg_p; /* (o.cfg.n) owned copies of the config parameters */
    batcher_t *batcher;
    family_model_t *model[MAX_DEVICES]; /* one per device used; [0] is the first loaded */
    int model_device[MAX_DEVICES];
    int n_models;
    int sample_rate;
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

/* the family's events for one item: the final result is kept in the request until the batch's
 * completions (partial events are for streaming, which submits through its own path) */
static void on_emit(family_item_t *fi, const family_event_t *ev)
{
    served_request_t *r = fi->user;
    if (ev->kind != FAMILY_EV_DONE)
        return;
    r->status_ = ev->status;
    if (ev->status)
        snprintf(r->error_, sizeof r->error_, "%s",
                 ev->error ? ev->error : hark_status_str(ev->status));
    else if (ev->asr)
        asr_result_take(&r->result_, ev->asr);
}

/* Runs `n` requests of one batch key as one execute and completes them. */
static void run_group(instance_t *in, family_worker_t *w, served_request_t **reqs, int n,
                      uint64_t t_dequeue)
{
    served_model_t *m = in->m;
    family_item_t *items[512];
    size_t maxn = 0, total = 0;
    for (int i = 0; i < n; i++) {
        served_request_t *r = reqs[i];
        r->fi.emit = on_emit;
        r->fi.user = r;
        r->status_ = HARK_ERR_INTERNAL;
        snprintf(r->error_, sizeof r->error_, "the model gave no result");
        memset(&r->result_, 0, sizeof r->result_);
        items[i] = &r->fi;
        total += r->fi.n;
        if (r->fi.n > maxn)
            maxn = r->fi.n;
    }
    family_exec_times_t et = {0};
    hark_err_t err = {0};
    uint64_t t0 = clock_now_ns();
    int rc = m->o.family->execute(w, items, n, &et, &err);
    uint64_t t2 = clock_now_ns();
    if (!et.input_ns && !et.infer_ns && !et.output_ns)
        et.infer_ns = t2 - t0;
    served_timing_t tm = {
        .compute_input_ns = et.input_ns, .compute_infer_ns = et.infer_ns, .batch_size = n};
    tm.padding = maxn ? 1.0 - (double)total / ((double)maxn * n) : 0.0;
    double audio = m->sample_rate > 0 ? (double)total / m->sample_rate : 0;
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
    uint64_t queue_ns = 0, output_ns = et.output_ns * (uint64_t)n, request_ns = 0;
    uint64_t ok = 0, failed = 0;
    if (m->o.completions_begin)
        m->o.completions_begin(n);
    for (int i = 0; i < n; i++) {
        served_request_t *r = reqs[i];
        uint64_t enq = r->item.enqueue_ns;
        tm.queue_ns = t_dequeue - enq;
        tm.compute_output_ns = 0; /* the callback serialises; measured around it below */
        int st = r->status_;
        asr_result_t res = r->result_; /* the request may be freed by its callback */
        char error[sizeof r->error_];
        if (st)
            memcpy(error, r->error_, sizeof error);
        uint64_t t3 = clock_now_ns();
        r->done(r, st, st ? error : NULL, st ? NULL : &res, &tm); /* may free r */
        uint64_t t4 = clock_now_ns();
        asr_result_free(&res); /* what the callback did not take */
        queue_ns += tm.queue_ns;
        output_ns += t4 - t3;
        request_ns += t4 - enq;
        if (st)
            failed++;
        else
            ok++;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&m->lock);
    m->st.failure += failed;
    m->st.success += ok;
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
    const family_t *fam = m->o.family;
    char name[16]; /* "inst<N>" in top, perf and bench/serve_bench.sh */
    snprintf(name, sizeof name, "inst%d", (int)(in - m->inst));
    pthread_setname_np(pthread_self(), name);
    family_worker_opts_t wo = {.max_batch = m->o.batching.max_batch_size,
                               .max_seconds = m->o.max_seconds,
                               .n_threads = in->n_threads};
    family_worker_t *w = NULL;
    hark_err_t err = {0};
    if (fam->worker_create(in->model, &wo, &w, &err)) {
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
        /* requests whose client went away are dropped before they cost anything */
        for (int i = 0; i < n;) {
            served_request_t *r = (served_request_t *)items[i];
            if (r->cancelled && atomic_load(r->cancelled)) {
                items[i] = items[--n];
                pthread_mutex_lock(&m->lock);
                m->st.failure++;
                pthread_mutex_unlock(&m->lock);
                r->done(r, HARK_ERR_CANCELLED, "the client cancelled the request", NULL, NULL);
            } else {
                i++;
            }
        }
        if (!w) { /* no scratch: fail what comes */
            for (int i = 0; i < n; i++) {
                served_request_t *r = (served_request_t *)items[i];
                r->done(r, HARK_ERR_UNAVAILABLE, "model instance failed to start", NULL, NULL);
            }
            continue;
        }
        /* requests of one batch key run together, oldest first */
        int left = n;
        while (left > 0) {
            int g = 0;
            uint64_t key = ((served_request_t *)items[0])->key_;
            for (int i = 0; i < left;) {
                served_request_t *r = (served_request_t *)items[i];
                if (r->key_ == key) {
                    group[g++] = r;
                    memmove(&items[i], &items[i + 1], (size_t)(left - i - 1) * sizeof items[0]);
                    left--;
                } else {
                    i++;
                }
            }
            run_group(in, w, group, g, t_dequeue);
        }
    }
    fam->worker_destroy(w);
    return NULL;
}

static int copy_params(served_model_t *m, const family_params_t *src, hark_err_t *err)
{
    m->o.cfg = (family_params_t){0};
    if (!src || src->n <= 0)
        return HARK_OK;
    m->cfg_p = hark_calloc((size_t)src->n, sizeof *m->cfg_p);
    if (!m->cfg_p)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < src->n; i++) {
        m->cfg_p[i].key = hark_strdup(src->p[i].key);
        m->cfg_p[i].value = hark_strdup(src->p[i].value ? src->p[i].value : "");
        m->o.cfg.n = i + 1;
        if (!m->cfg_p[i].key || !m->cfg_p[i].value)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    m->o.cfg.p = m->cfg_p;
    return HARK_OK;
}

int served_model_create(const char *dir, const served_opts_t *o, served_model_t **out,
                        hark_err_t *err)
{
    *out = NULL;
    if (!o->family)
        return err_set(err, HARK_ERR_INVALID_ARG, "no model family given");
    if (o->n_groups < 1 || o->n_groups > 8)
        return err_set(err, HARK_ERR_INVALID_ARG, "instance_group: between 1 and 8 groups");
    if (o->batching.max_batch_size > 512)
        return err_set(err, HARK_ERR_INVALID_ARG, "max_batch_size %d exceeds hark's 512",
                       o->batching.max_batch_size);
    served_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    m->o = *o;
    m->o.precision = NULL; /* not kept: the caller's string */
    if (m->o.max_seconds <= 0)
        m->o.max_seconds = 60;
    pthread_mutex_init(&m->lock, NULL);
    int rc = copy_params(m, &o->cfg, err);
    if (rc)
        goto fail;
    if ((rc = batcher_create(&o->batching, &m->batcher, err)))
        goto fail;
    for (int g = 0; g < o->n_groups; g++) {
        const served_group_t *gr = &o->groups[g];
        int k = 0;
        while (k < m->n_models && m->model_device[k] != gr->device)
            k++;
        if (k == m->n_models) {
            if (k == MAX_DEVICES) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "too many devices");
                goto fail;
            }
            family_load_opts_t lo = {.device = gr->device,
                                     .precision = gr->device >= 0 ? o->precision : NULL,
                                     .version = o->version};
            if ((rc = o->family->load(dir, &lo, &m->o.cfg, &m->model[k], err)))
                goto fail;
            m->model_device[k] = gr->device;
            m->n_models++;
        }
        for (int c = 0; c < gr->count; c++) {
            if (m->n_inst == MAX_INSTANCES) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "more than %d instances", MAX_INSTANCES);
                goto fail;
            }
            instance_t *in = &m->inst[m->n_inst++];
            in->m = m;
            in->model = m->model[k];
            in->n_threads = gr->n_threads;
        }
    }
    family_info_t fi = {0};
    o->family->info(m->model[0], &fi);
    m->sample_rate = fi.sample_rate;
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
    for (int k = 0; k < m->n_models; k++)
        m->o.family->unload(m->model[k]);
    for (int i = 0; i < m->o.cfg.n; i++) {
        hark_free((char *)m->cfg_p[i].key);
        hark_free((char *)m->cfg_p[i].value);
    }
    hark_free(m->cfg_p);
    pthread_mutex_destroy(&m->lock);
    hark_free(m);
}

const family_t *served_model_family(const served_model_t *m)
{
    return m->o.family;
}

void served_model_info(const served_model_t *m, family_info_t *out)
{
    memset(out, 0, sizeof *out);
    m->o.family->info(m->model[0], out);
}

int served_model_parse_opts(const served_model_t *m, const family_params_t *req, void *opts,
                            hark_err_t *err)
{
    return m->o.family->parse_opts(m->model[0], &m->o.cfg, req, opts, err);
}

int served_model_submit(served_model_t *m, served_request_t *req, hark_err_t *err)
{
    if (m->sample_rate > 0 && (double)req->fi.n > m->o.max_seconds * m->sample_rate)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "audio of %.1f s exceeds the model's limit of %.0f s",
                       (double)req->fi.n / m->sample_rate, m->o.max_seconds);
    req->key_ = m->o.family->batch_key(req->fi.opts);
    req->item.length = req->fi.text ? strlen(req->fi.text) : req->fi.n;
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
