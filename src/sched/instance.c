/* instance.c — model instances: worker threads that take batches from the batcher, run the
 * family and complete the requests; under sequence_batching each instance has a queue of its own
 * and the sequences (streams) bound to it, a table of the active ones and an idle reaper.
 * Tests: tests/sched/test_instance.c, tests/server/test_sequence.py */
#include "sched/instance.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "hark.h"

#include <inttypes.h>
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
    batcher_t *own; /* sequence models: this instance's own queue (its sequences' chunks) */
    int seq_used;   /* sequence slots taken (under m->seq_lock) */
    int up;         /* 0: creating its worker; 1: running; -1: the worker failed (m->lock) */
    int up_rc;
    char up_err[512];
} instance_t;

enum { SEQ_START = 1, SEQ_END = 2, SEQ_CLOSE = 4 };

/* One sequence: bound to an instance, whose worker holds its stream. */
struct served_seq {
    uint64_t id;
    char *id_str; /* NULL: numeric id */
    uint64_t owner;
    int inst;
    void *stream;                  /* the family's; touched on the instance's thread only */
    served_request_t *head, *tail; /* chunks waiting for the one in flight */
    int in_flight;                 /* a chunk queued or running */
    int ended;                     /* out of the table: no more chunks */
    int cancel;                    /* abandoned: waiting chunks fail as cancelled */
    uint64_t last_ns;              /* last request or completion */
    served_seq_t *next;            /* the table */
    served_request_t close;        /* the SEQ_CLOSE item that frees it on its instance */
};

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
    pthread_cond_t up_cond; /* an instance's worker was created, or failed (m->lock) */
    /* sequences (o.seq.enabled) */
    pthread_mutex_t seq_lock;
    served_seq_t *seqs; /* active sequences */
    int n_seqs;         /* records alive (active or closing) */
    pthread_t reaper;
    int reaper_started, stopping;
    pthread_cond_t reaper_cond;
};

static int hist_bucket(int b)
{
    int k = 0;
    for (int lim = 1; k < 9 && b > lim; lim *= 2)
        k++;
    return k;
}

struct served_seg {
    asr_result_t result;
    double start_s, end_s;
};

/* the family's events for one item: the final result (a stream chunk's partial one) and the
 * segments an endpoint ended are kept in the request until the batch's completions */
static void on_emit(family_item_t *fi, const family_event_t *ev)
{
    served_request_t *r = fi->user;
    if (ev->kind == FAMILY_EV_SEGMENT && fi->stream && ev->asr && r->segment) {
        struct served_seg *g = hark_realloc(r->segs_, (size_t)(r->n_segs_ + 1) * sizeof *g);
        if (!g) { /* defensive: the segment is lost, the chunk's own answer still goes */
            LOG_WARN("out of memory keeping an endpoint's segment");
            return;
        }
        r->segs_ = g;
        g += r->n_segs_++;
        memset(&g->result, 0, sizeof g->result);
        asr_result_take(&g->result, ev->asr);
        g->start_s = ev->seg_start_s;
        g->end_s = ev->seg_end_s;
        return;
    }
    if (ev->kind == FAMILY_EV_SEGMENT && !fi->stream) { /* vad: a speech segment */
        if (r->speech)
            r->speech(r, ev->seg_start_s, ev->seg_end_s);
        return;
    }
    if (ev->kind == FAMILY_EV_AUDIO) { /* tts: streamed to the caller as it comes */
        if (r->audio && ev->pcm && ev->n)
            r->audio(r, ev->pcm, ev->n, ev->sample_rate);
        return;
    }
    if (ev->kind == FAMILY_EV_PARTIAL && fi->stream && ev->asr) { /* a chunk's answer */
        asr_result_free(&r->result_);
        asr_result_take(&r->result_, ev->asr);
        return;
    }
    if (ev->kind != FAMILY_EV_DONE)
        return;
    r->status_ = ev->status;
    if (ev->status)
        snprintf(r->error_, sizeof r->error_, "%s",
                 ev->error ? ev->error : hark_status_str(ev->status));
    else if (ev->asr)
        asr_result_take(&r->result_, ev->asr);
}

/* ---- sequences ------------------------------------------------------------------------------ */

static void seq_free(served_seq_t *q)
{
    hark_free(q->id_str);
    hark_free(q);
}

/* under seq_lock: takes q out of the table */
static void seq_unlink(served_model_t *m, served_seq_t *q)
{
    for (served_seq_t **p = &m->seqs; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    q->next = NULL;
    q->ended = 1;
}

static batcher_t *inst_batcher(served_model_t *m, int i)
{
    return m->inst[i].own ? m->inst[i].own : m->batcher;
}

/* On q's instance: closes its stream, gives its slot back, frees it (q out of the table). */
static void seq_close(instance_t *in, family_worker_t *w, served_seq_t *q)
{
    served_model_t *m = in->m;
    if (q->stream && w && m->o.family->stream_close)
        m->o.family->stream_close(w, q->stream);
    pthread_mutex_lock(&m->seq_lock);
    in->seq_used--;
    m->n_seqs--;
    pthread_mutex_unlock(&m->seq_lock);
    seq_free(q);
}

static void seq_fail_list(served_request_t *r, int status, const char *msg)
{
    while (r) {
        served_request_t *next = r->seq_next_;
        r->done(r, status, msg, NULL, NULL); /* may free r */
        r = next;
    }
}

/* A chunk of q is complete (status st), before its done callback: the next waiting chunk goes to
 * the instance's queue; after the END chunk, an error or abandonment the sequence is closed here
 * (on its instance's thread) and its slot given back, so that a client answered can start a new
 * sequence at once. */
static void seq_chunk_done(instance_t *in, family_worker_t *w, served_request_t *r, int st)
{
    served_model_t *m = in->m;
    served_seq_t *q = r->seq_;
    served_request_t *fail = NULL;
    int close = 0;
    pthread_mutex_lock(&m->seq_lock);
    q->in_flight = 0;
    q->last_ns = clock_now_ns();
    if ((r->seq_flags_ & SEQ_END) || st != HARK_OK || q->cancel) {
        if (!q->ended)
            seq_unlink(m, q);
        fail = q->head;
        q->head = q->tail = NULL;
        close = 1;
    } else {
        while (q->head) {
            served_request_t *next = q->head;
            q->head = next->seq_next_;
            if (!q->head)
                q->tail = NULL;
            next->seq_next_ = NULL;
            if (batcher_submit(in->own, &next->item) == HARK_OK) {
                q->in_flight = 1;
                break;
            }
            next->seq_next_ = fail; /* unloading: fails, the sequence ends */
            fail = next;
            if (!q->ended)
                seq_unlink(m, q);
            close = !q->head;
        }
    }
    int cancel = q->cancel;
    pthread_mutex_unlock(&m->seq_lock);
    if (close && !q->in_flight)
        seq_close(in, w, q);
    if (fail) {
        pthread_mutex_lock(&m->lock);
        for (served_request_t *x = fail; x; x = x->seq_next_)
            m->st.failure++;
        pthread_mutex_unlock(&m->lock);
        seq_fail_list(fail, cancel ? HARK_ERR_CANCELLED : HARK_ERR_INVALID_ARG,
                      cancel ? "the client cancelled the sequence"
                             : "the sequence ended before this request ran");
    }
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
        r->segs_ = NULL;
        r->n_segs_ = 0;
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
    uint64_t ok = 0, failed = 0, input_ns = 0, exec_output_ns = 0;
    if (m->o.completions_begin)
        m->o.completions_begin(n);
    for (int i = 0; i < n; i++) {
        served_request_t *r = reqs[i];
        uint64_t enq = r->item.enqueue_ns;
        tm.queue_ns = t_dequeue - enq;
        tm.compute_input_ns = et.input_ns + r->input_ns;
        input_ns += tm.compute_input_ns;
        tm.compute_output_ns = 0; /* the callback serialises; measured around it below */
        int st = r->status_;
        asr_result_t res = r->result_; /* the request may be freed by its callback */
        char error[sizeof r->error_];
        if (st)
            memcpy(error, r->error_, sizeof error);
        struct served_seg *segs = r->segs_;
        int n_segs = r->n_segs_;
        uint64_t t3 = clock_now_ns();
        if (r->seq_)
            seq_chunk_done(in, w, r, st);
        for (int k = 0; k < n_segs; k++) {
            if (!st)
                r->segment(r, &segs[k].result, segs[k].start_s, segs[k].end_s);
            asr_result_free(&segs[k].result);
        }
        hark_free(segs);
        r->done(r, st, st ? error : NULL, st ? NULL : &res, &tm); /* may free r */
        uint64_t t4 = clock_now_ns();
        asr_result_free(&res); /* what the callback did not take */
        queue_ns += tm.queue_ns;
        output_ns += t4 - t3;
        exec_output_ns += t4 - t3;
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
    m->st.compute_input_ns += input_ns;
    m->st.compute_infer_ns += tm.compute_infer_ns * (uint64_t)n;
    /* batch_stats: this execution under its batch size (input: the family's and the items') */
    served_batch_stat_t *bst = NULL;
    for (int i = 0; i < m->st.n_batch_stats && !bst; i++)
        if (m->st.batch_stats[i].batch_size == n)
            bst = &m->st.batch_stats[i];
    if (!bst && m->st.n_batch_stats < SERVED_BATCH_STATS) {
        bst = &m->st.batch_stats[m->st.n_batch_stats++];
        bst->batch_size = n;
    }
    if (bst) {
        bst->count++;
        bst->input_ns += input_ns - et.input_ns * (uint64_t)(n - 1); /* the execution's once */
        bst->infer_ns += tm.compute_infer_ns;
        bst->output_ns += et.output_ns + exec_output_ns;
    }
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
                               .n_threads = in->n_threads,
                               .max_sequences = m->o.seq.enabled ? m->o.seq.max_sequences : 0};
    batcher_t *queue = in->own ? in->own : m->batcher;
    family_worker_t *w = NULL;
    hark_err_t err = {0};
    int wrc = fam->worker_create(in->model, &wo, &w, &err);
    pthread_mutex_lock(&m->lock);
    in->up = wrc ? -1 : 1;
    in->up_rc = wrc;
    if (wrc) {
        snprintf(in->up_err, sizeof in->up_err, "%s", err.msg);
        m->unhealthy = 1;
    }
    pthread_cond_broadcast(&m->up_cond);
    pthread_mutex_unlock(&m->lock);
    batcher_item_t *items[512], *expired[64];
    served_request_t *group[512];
    int n, ne;
    while (batcher_next(queue, items, &n, expired, 64, &ne) == HARK_OK) {
        uint64_t t_dequeue = clock_now_ns();
        for (int i = 0; i < ne; i++) {
            served_request_t *r = (served_request_t *)expired[i];
            pthread_mutex_lock(&m->lock);
            m->st.failure++;
            pthread_mutex_unlock(&m->lock);
            if (r->seq_)
                seq_chunk_done(in, w, r, HARK_ERR_TIMEOUT);
            r->done(r, HARK_ERR_TIMEOUT, "request timed out before it was scheduled", NULL, NULL);
        }
        /* sequences' closings; requests whose client went away are dropped before they cost
         * anything; a sequence's first chunk opens its stream */
        for (int i = 0; i < n;) {
            served_request_t *r = (served_request_t *)items[i];
            int st = HARK_OK;
            const char *msg = NULL;
            hark_err_t e = {0};
            if (r->seq_flags_ & SEQ_CLOSE) {
                items[i] = items[--n];
                seq_close(in, w, r->seq_);
                continue;
            }
            if (r->cancelled && atomic_load(r->cancelled)) {
                st = HARK_ERR_CANCELLED;
                msg = "the client cancelled the request";
            } else if (!w) {
                st = HARK_ERR_UNAVAILABLE;
                msg = "model instance failed to start";
            } else if (r->seq_ && (r->seq_flags_ & SEQ_START) &&
                       (st = fam->stream_open(w, &r->seq_->stream, &e))) {
                msg = e.msg;
            }
            if (r->seq_ && !st) {
                r->fi.stream = r->seq_->stream;
                r->fi.stream_end = (r->seq_flags_ & SEQ_END) != 0;
            }
            if (!st) {
                i++;
                continue;
            }
            items[i] = items[--n];
            pthread_mutex_lock(&m->lock);
            m->st.failure++;
            pthread_mutex_unlock(&m->lock);
            char buf[sizeof e.msg];
            snprintf(buf, sizeof buf, "%s", msg ? msg : hark_status_str(st));
            if (r->seq_)
                seq_chunk_done(in, w, r, st);
            r->done(r, st, buf, NULL, NULL);
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
    /* unloading: the sequences still open on this instance */
    for (;;) {
        served_seq_t *q = NULL;
        pthread_mutex_lock(&m->seq_lock);
        for (served_seq_t *x = m->seqs; x && !q; x = x->next)
            if (x->inst == (int)(in - m->inst))
                q = x;
        if (q)
            seq_unlink(m, q);
        pthread_mutex_unlock(&m->seq_lock);
        if (!q)
            break;
        seq_close(in, w, q);
    }
    fam->worker_destroy(w);
    return NULL;
}

/* Ends the sequences idle past idle_us: out of the table, their stream closed by their instance. */
static void *reaper_main(void *arg)
{
    served_model_t *m = arg;
    pthread_setname_np(pthread_self(), "seq-idle");
    uint64_t idle_ns = m->o.seq.idle_us * 1000;
    uint64_t tick = idle_ns / 4 < 50000000ull ? idle_ns / 4 : 50000000ull;
    if (tick < 1000000)
        tick = 1000000;
    pthread_mutex_lock(&m->seq_lock);
    while (!m->stopping) {
        uint64_t now = clock_now_ns();
        for (served_seq_t **p = &m->seqs; *p;) {
            served_seq_t *q = *p;
            if (!q->in_flight && now - q->last_ns > idle_ns &&
                batcher_submit(inst_batcher(m, q->inst), &q->close.item) == HARK_OK) {
                *p = q->next;
                q->next = NULL;
                q->ended = 1;
                char id[300];
                if (q->id_str)
                    snprintf(id, sizeof id, "'%s'", q->id_str);
                else
                    snprintf(id, sizeof id, "%" PRIu64, q->id);
                LOG_INFO("sequence %s idle for %.1f s: ended", id,
                         (double)(now - q->last_ns) * 1e-9);
            } else {
                p = &q->next;
            }
        }
        uint64_t wake = clock_now_ns() + tick;
        struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
        pthread_cond_timedwait(&m->reaper_cond, &m->seq_lock, &ts);
    }
    pthread_mutex_unlock(&m->seq_lock);
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
    if (o->seq.enabled && (!o->family->stream_open || !o->family->stream_close))
        return err_set(err, HARK_ERR_UNSUPPORTED, "sequence_batching: family '%s' does not stream",
                       o->family->name);
    if (o->seq.enabled && (o->seq.max_sequences < 1 || o->seq.max_sequences > 4096))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "sequence_batching: %d sequences per instance (1 .. 4096)",
                       o->seq.max_sequences);
    served_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    m->o = *o;
    m->o.precision = NULL; /* not kept: the caller's string */
    if (m->o.max_seconds <= 0)
        m->o.max_seconds = 60;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->seq_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->reaper_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&m->up_cond, NULL);
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
    { /* the config's options must parse on their own: a bad value fails the load, not every
         request later */
        void *opts = hark_calloc(1, o->family->opts_size ? o->family->opts_size : 1);
        family_params_t none = {NULL, 0};
        rc = opts ? o->family->parse_opts(m->model[0], &m->o.cfg, &none, opts, err)
                  : err_set(err, HARK_ERR_NOMEM, "out of memory");
        hark_free(opts);
        if (rc) {
            if (!strstr(err->msg, "config.pbtxt"))
                err_prefix(err, rc, "config.pbtxt parameters");
            goto fail;
        }
    }
    if (o->seq.enabled) { /* each instance takes its own sequences' chunks */
        batcher_opts_t bo = {.max_batch_size =
                                 o->seq.max_sequences < 512 ? o->seq.max_sequences : 512,
                             .max_queue_delay_us = o->seq.max_queue_delay_us};
        for (int i = 0; i < o->seq.n_preferred && i < 8; i++)
            if (o->seq.preferred[i] <= bo.max_batch_size)
                bo.preferred[bo.n_preferred++] = o->seq.preferred[i];
        for (int i = 0; i < m->n_inst; i++)
            if ((rc = batcher_create(&bo, &m->inst[i].own, err)))
                goto fail;
        if (o->seq.idle_us) {
            if (pthread_create(&m->reaper, NULL, reaper_main, m) != 0) {
                rc = err_set(err, HARK_ERR_INTERNAL, "cannot start the sequence idle thread");
                goto fail;
            }
            m->reaper_started = 1;
        }
    }
    for (int i = 0; i < m->n_inst; i++) {
        if (pthread_create(&m->inst[i].thread, NULL, instance_main, &m->inst[i]) != 0) {
            rc = err_set(err, HARK_ERR_INTERNAL, "cannot start instance thread %d", i);
            goto fail;
        }
        m->inst[i].started = 1;
    }
    /* ready only when every instance has its worker (scratch, device memory, stream pool): a
     * model that cannot run all its instances fails to load, with the reason */
    int bad = -1;
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < m->n_inst; i++) {
        while (m->inst[i].up == 0)
            pthread_cond_wait(&m->up_cond, &m->lock);
        if (m->inst[i].up < 0 && bad < 0)
            bad = i;
    }
    pthread_mutex_unlock(&m->lock);
    if (bad >= 0) {
        rc = err_set(err, m->inst[bad].up_rc, "model instance %d of %d: %s", bad + 1, m->n_inst,
                     m->inst[bad].up_err);
        goto fail;
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
    if (m->reaper_started) {
        pthread_mutex_lock(&m->seq_lock);
        m->stopping = 1;
        pthread_cond_signal(&m->reaper_cond);
        pthread_mutex_unlock(&m->seq_lock);
        pthread_join(m->reaper, NULL);
    }
    if (m->batcher)
        batcher_close(m->batcher);
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].own)
            batcher_close(m->inst[i].own);
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].started)
            pthread_join(m->inst[i].thread, NULL);
    batcher_destroy(m->batcher);
    for (int i = 0; i < m->n_inst; i++)
        batcher_destroy(m->inst[i].own);
    /* instances never started: their sequences (none can be open without a thread) */
    while (m->seqs) {
        served_seq_t *q = m->seqs;
        m->seqs = q->next;
        seq_free(q);
    }
    pthread_mutex_destroy(&m->seq_lock);
    pthread_cond_destroy(&m->reaper_cond);
    pthread_cond_destroy(&m->up_cond);
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

int served_model_sequential(const served_model_t *m)
{
    return m->o.seq.enabled;
}

static int seq_is(const served_seq_t *q, const served_seq_ctl_t *c)
{
    return c->id_str ? q->id_str && !strcmp(q->id_str, c->id_str) : !q->id_str && q->id == c->id;
}

/* under seq_lock: q leaves the table as abandoned; closed now when nothing of it is in flight */
static void seq_abandon_locked(served_model_t *m, served_seq_t *q)
{
    seq_unlink(m, q);
    q->cancel = 1;
    if (!q->in_flight && batcher_submit(inst_batcher(m, q->inst), &q->close.item) != HARK_OK)
        LOG_WARN("sequence closing could not be queued (unloading)");
}

int served_model_submit_seq(served_model_t *m, served_request_t *req, const served_seq_ctl_t *c,
                            hark_err_t *err)
{
    if (!m->o.seq.enabled)
        return err_set(err, HARK_ERR_INVALID_ARG, "this model does not serve sequences");
    if (!c->id_str ? c->id == 0 : !c->id_str[0])
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "a sequence request needs a non-zero or non-empty sequence_id");
    if (c->id_str && strlen(c->id_str) > 255)
        return err_set(err, HARK_ERR_INVALID_ARG, "sequence_id of more than 255 bytes");
    if (m->sample_rate > 0 && (double)req->fi.n > m->o.max_seconds * m->sample_rate)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "audio of %.1f s exceeds the model's limit of %.0f s",
                       (double)req->fi.n / m->sample_rate, m->o.max_seconds);
    char idbuf[300];
    if (c->id_str)
        snprintf(idbuf, sizeof idbuf, "'%s'", c->id_str);
    else
        snprintf(idbuf, sizeof idbuf, "%" PRIu64, c->id);
    req->key_ = m->o.family->batch_key(req->fi.opts);
    req->item.length = req->fi.n;
    req->seq_next_ = NULL;
    req->seq_flags_ = (c->start ? SEQ_START : 0) | (c->end ? SEQ_END : 0);
    int rc = HARK_OK;
    served_seq_t *fresh = NULL;
    if (c->start) { /* allocated outside the lock */
        fresh = hark_calloc(1, sizeof *fresh);
        if (!fresh || (c->id_str && !(fresh->id_str = hark_strdup(c->id_str)))) {
            hark_free(fresh);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
    }
    pthread_mutex_lock(&m->seq_lock);
    served_seq_t *q = m->seqs;
    while (q && !seq_is(q, c))
        q = q->next;
    if (c->start) {
        if (q) { /* a new START for an active id ends the old sequence */
            LOG_INFO("sequence %s restarted: the active one is ended", idbuf);
            seq_abandon_locked(m, q);
        }
        int best = -1;
        for (int i = 0; i < m->n_inst; i++)
            if (m->inst[i].seq_used < m->o.seq.max_sequences &&
                (best < 0 || m->inst[i].seq_used < m->inst[best].seq_used))
                best = i;
        if (best < 0) {
            rc = err_set(err, HARK_ERR_EXHAUSTED,
                         "sequence %s: all %d sequence slots are in use (max_candidate_sequences "
                         "%d x %d instances); retry later",
                         idbuf, m->o.seq.max_sequences * m->n_inst, m->o.seq.max_sequences,
                         m->n_inst);
            goto out;
        }
        q = fresh;
        fresh = NULL;
        q->id = c->id;
        q->owner = c->owner;
        q->inst = best;
        q->close.seq_ = q;
        q->close.seq_flags_ = SEQ_CLOSE;
        q->next = m->seqs;
        m->seqs = q;
        m->inst[best].seq_used++;
        m->n_seqs++;
    } else if (!q) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "sequence %s is not active (never started with sequence_start, ended, or "
                     "idle past max_sequence_idle_microseconds): its first request must set "
                     "sequence_start",
                     idbuf);
        goto out;
    }
    req->seq_ = q;
    q->last_ns = clock_now_ns();
    if (!q->in_flight) {
        if ((rc = batcher_submit(inst_batcher(m, q->inst), &req->item))) {
            rc = err_set(err, rc,
                         rc == HARK_ERR_CLOSED ? "the model is unloading"
                                               : "cannot queue the request");
            if (c->start) { /* never opened: undone at once */
                seq_unlink(m, q);
                m->inst[q->inst].seq_used--;
                m->n_seqs--;
                fresh = q;
            }
            goto out;
        }
        q->in_flight = 1;
    } else if (q->tail) {
        q->tail->seq_next_ = req;
        q->tail = req;
    } else {
        q->head = q->tail = req;
    }
    if (c->end) /* no more chunks: a later one is of an unknown sequence */
        seq_unlink(m, q);
out:
    pthread_mutex_unlock(&m->seq_lock);
    if (fresh)
        seq_free(fresh);
    return rc;
}

void served_model_hurry(served_model_t *m)
{
    if (m->batcher)
        batcher_hurry(m->batcher);
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].own)
            batcher_hurry(m->inst[i].own);
}

void served_model_abandon(served_model_t *m, uint64_t owner)
{
    if (!m->o.seq.enabled || !owner)
        return;
    pthread_mutex_lock(&m->seq_lock);
    for (served_seq_t *q = m->seqs, *next; q; q = next) {
        next = q->next;
        if (q->owner == owner)
            seq_abandon_locked(m, q);
    }
    pthread_mutex_unlock(&m->seq_lock);
}

int served_model_sequences(served_model_t *m)
{
    pthread_mutex_lock(&m->seq_lock);
    int n = m->n_seqs;
    pthread_mutex_unlock(&m->seq_lock);
    return n;
}

int served_model_submit_many(served_model_t *m, served_request_t *const *reqs, int n,
                             hark_err_t *err)
{
    if (m->o.seq.enabled)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "this model serves sequences (sequence_batching): requests need "
                       "parameters sequence_id, with sequence_start on the first");
    if (n < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "a request of no items");
    for (int i = 0; i < n; i++) {
        const served_request_t *req = reqs[i];
        if (m->sample_rate > 0 && (double)req->fi.n > m->o.max_seconds * m->sample_rate)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "audio of %.1f s exceeds the model's limit of %.0f s",
                           (double)req->fi.n / m->sample_rate, m->o.max_seconds);
    }
    batcher_item_t *stack[64] = {0}, **items = stack;
    if (n > 64 && !(items = hark_malloc(sizeof *items * (size_t)n)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    /* one default deadline for the request: its items expire together */
    uint64_t deadline =
        m->o.default_timeout_us ? clock_now_ns() + m->o.default_timeout_us * 1000 : 0;
    for (int i = 0; i < n; i++) {
        served_request_t *req = reqs[i];
        req->key_ = m->o.family->batch_key(req->fi.opts);
        req->item.length = req->fi.text ? strlen(req->fi.text) : req->fi.n;
        if (!req->item.deadline_ns)
            req->item.deadline_ns = deadline;
        items[i] = &req->item;
    }
    int rc = batcher_submit_many(m->batcher, items, n);
    if (items != stack)
        hark_free(items);
    if (rc == HARK_ERR_AGAIN)
        return err_set(err, rc,
                       "Exceeds maximum queue size (the model's max_queue_size is %d requests)",
                       m->o.batching.max_queue_size);
    if (rc == HARK_ERR_CLOSED)
        return err_set(err, rc, "the model is unloading");
    if (rc)
        return err_set(err, rc, "cannot queue the request");
    return HARK_OK;
}

int served_model_submit(served_model_t *m, served_request_t *req, hark_err_t *err)
{
    return served_model_submit_many(m, &req, 1, err);
}

void served_model_count_failure(served_model_t *m)
{
    pthread_mutex_lock(&m->lock);
    m->st.failure++;
    pthread_mutex_unlock(&m->lock);
}

void served_model_stats(served_model_t *m, served_stats_t *out)
{
    batcher_stats_t bs;
    batcher_stats(m->batcher, &bs);
    size_t pending = bs.pending_requests, items = bs.pending;
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i].own) {
            batcher_stats(m->inst[i].own, &bs);
            pending += bs.pending_requests;
            items += bs.pending;
        }
    pthread_mutex_lock(&m->lock);
    *out = m->st;
    pthread_mutex_unlock(&m->lock);
    out->pending = pending;
    out->pending_items = items;
}

int served_model_ready(const served_model_t *m)
{
    return !m->unhealthy;
}
