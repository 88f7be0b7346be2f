/* hark.c — the public C API (include/hark.h) over the family table (src/model/family.h): models
 * loaded through the registry, a lazily grown pool of workers per model, requests turned into
 * family parameters, results kept as asr_result_t snapshots. Tests: tests/capi/test_capi.c,
 * tests/capi/test_install.c */
#include "hark.h"

#include "audio/audio.h"
#include "capi/hark_internal.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "model/family.h"
#include "ops/ops.h"
#include "server/model_config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECONDS_STEP 30.0 /* unlimited models size workers in steps of this many seconds */

/* ---- errors --------------------------------------------------------------------------------- */

static _Thread_local char last_error[512];

const char *hark_last_error(void)
{
    return last_error;
}

/* Records the status's message for hark_last_error and returns the status. */
static hark_status_t fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static hark_status_t fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return (hark_status_t)status;
}

static hark_status_t fail_err(int status, const hark_err_t *e)
{
    return fail(status, "%s", e->msg[0] ? e->msg : hark_status_str(status));
}

/* ---- models --------------------------------------------------------------------------------- */

typedef struct pooled {
    family_worker_t *w;
    int max_batch;
    double max_seconds;
    struct pooled *next;
} pooled_t;

struct hark_model {
    const family_t *f;
    family_model_t *fm; /* immutable, shared by the workers */
    family_info_t info;
    hark_model_opts_t o;   /* the strings not kept */
    model_config_t cfg;    /* DIR/config.pbtxt when present (zeroed otherwise) ... */
    family_param_t *cfg_p; /* ... its parameters as the family reads them */
    family_params_t cfg_params;
    pthread_mutex_t lock; /* guards free_workers only */
    pooled_t *free_workers;
};

static int parse_device(const hark_model_opts_t *o, int *device)
{
    if (o->gpu > 0) {
        *device = o->gpu - 1;
        return HARK_OK;
    }
    const char *d = o->device;
    if (!d || !strcmp(d, "cpu")) {
        *device = -1;
        return HARK_OK;
    }
    if (!strcmp(d, "cuda")) {
        *device = 0;
        return HARK_OK;
    }
    char *end = NULL;
    long k = strncmp(d, "cuda:", 5) ? -1 : strtol(d + 5, &end, 10);
    if (k < 0 || k > 1024 || end == d + 5 || *end)
        return fail(HARK_ERR_INVALID_ARG, "device \"%s\": expected cpu, cuda or cuda:N", d);
    *device = (int)k;
    return HARK_OK;
}

static void config_notice(void *user, const char *msg)
{
    LOG_DEBUG("%s", msg); /* Triton fields hark does not use: not the library user's concern */
}

hark_status_t hark_model_load(const char *dir, const hark_model_opts_t *opts, hark_model_t **out)
{
    if (!dir || !out)
        return fail(HARK_ERR_INVALID_ARG, "hark_model_load: dir and out are required");
    *out = NULL;
    hark_model_opts_t o = opts ? *opts : (hark_model_opts_t){0};
    if (o.max_batch < 0 || o.max_seconds < 0 || o.n_threads < 0 || o.version < 0 || o.gpu < 0)
        return fail(HARK_ERR_INVALID_ARG,
                    "hark_model_load: max_batch, max_seconds, n_threads, version and gpu must "
                    "not be negative");
    int device = -1, rc = parse_device(&o, &device);
    if (rc)
        return (hark_status_t)rc;
    hark_err_t err = {0};
    const family_t *f;
    /* an entry, one of its version folders, or a repository of one model (issue 23) */
    char entry[4096];
    int named = 0;
    if ((rc = family_resolve_dir(dir, entry, sizeof entry, &named, &err)))
        return fail_err(rc, &err);
    dir = entry;
    if (!o.version)
        o.version = named;
    if ((rc = family_of_dir(dir, o.version, &f, &err)))
        return fail_err(rc, &err);
    hark_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return fail(HARK_ERR_NOMEM, "out of memory");
    /* config.pbtxt's parameters are the model's defaults, as under hark serve */
    char path[4200];
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
    if (access(path, F_OK) == 0) {
        model_config_opts_t mco = {.notice = config_notice};
        if ((rc = model_config_load(path, &mco, &m->cfg, &err))) {
            hark_free(m);
            return fail_err(rc, &err);
        }
        m->cfg_p = hark_calloc((size_t)(m->cfg.n_params ? m->cfg.n_params : 1), sizeof *m->cfg_p);
        if (!m->cfg_p) {
            model_config_free(&m->cfg);
            hark_free(m);
            return fail(HARK_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < m->cfg.n_params; i++)
            m->cfg_p[i] = (family_param_t){m->cfg.params[i].key, m->cfg.params[i].value};
        m->cfg_params = (family_params_t){m->cfg_p, m->cfg.n_params};
    }
    family_load_opts_t lo = {.device = device, .precision = o.precision, .version = o.version};
    if ((rc = f->load(dir, &lo, &m->cfg_params, &m->fm, &err))) {
        model_config_free(&m->cfg);
        hark_free(m->cfg_p);
        hark_free(m);
        return fail_err(rc, &err);
    }
    m->f = f;
    f->info(m->fm, &m->info);
    m->o = o;
    m->o.device = m->o.precision = NULL;
    pthread_mutex_init(&m->lock, NULL);
    if (device < 0 && o.n_threads > 0)
        ops_set_threads(o.n_threads);
    *out = m;
    return HARK_OK;
}

void hark_model_destroy(hark_model_t *m)
{
    if (!m)
        return;
    for (pooled_t *p = m->free_workers, *next; p; p = next) {
        next = p->next;
        m->f->worker_destroy(p->w);
        hark_free(p);
    }
    m->f->unload(m->fm);
    model_config_free(&m->cfg);
    hark_free(m->cfg_p);
    pthread_mutex_destroy(&m->lock);
    hark_free(m);
}

int hark_model_sample_rate(const hark_model_t *m)
{
    return m ? m->info.sample_rate : 0;
}

const char *hark_model_family(const hark_model_t *m)
{
    return m ? m->f->name : "";
}

const char *hark_model_task(const hark_model_t *m)
{
    return m ? family_task_name(m->f->task) : "";
}

int hark_model_device(const hark_model_t *m)
{
    return m ? m->info.device : -1;
}

int hark_model_is_streaming(const hark_model_t *m)
{
    return m && m->f->task == FAMILY_TASK_ASR && m->f->stream_open;
}

const char *hark_model_description(const hark_model_t *m)
{
    return m && m->info.kind ? m->info.kind : "";
}

/* A worker able to take `batch` utterances of `secs` seconds: a free one of the pool, else a new
 * one (a free one too small for it is replaced, so the pool never holds more workers than calls
 * ran at once). */
static int worker_get(hark_model_t *m, int batch, double secs, pooled_t **out, hark_err_t *err)
{
    pooled_t *small = NULL;
    pthread_mutex_lock(&m->lock);
    pooled_t **pp = &m->free_workers;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->max_batch >= batch && (*pp)->max_seconds >= secs)
            break;
    pooled_t *p = *pp;
    if (p)
        *pp = p->next;
    else if ((small = m->free_workers))
        m->free_workers = small->next;
    pthread_mutex_unlock(&m->lock);
    if (p) {
        *out = p;
        return HARK_OK;
    }
    int want_b = batch, rc;
    double want_s = m->o.max_seconds > 0 ? m->o.max_seconds
                                         : SECONDS_STEP * (double)((long)(secs / SECONDS_STEP) + 1);
    if (small) {
        want_b = small->max_batch > want_b ? small->max_batch : want_b;
        want_s = small->max_seconds > want_s ? small->max_seconds : want_s;
        m->f->worker_destroy(small->w);
        hark_free(small);
    }
    if (m->o.max_batch > 0 && want_b < m->o.max_batch)
        want_b = m->o.max_batch; /* a bounded model sizes for its bound once */
    if (!(p = hark_calloc(1, sizeof *p)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    family_worker_opts_t wo = {.max_batch = want_b, .max_seconds = want_s};
    if ((rc = m->f->worker_create(m->fm, &wo, &p->w, err))) {
        hark_free(p);
        return rc;
    }
    LOG_DEBUG("hark: %s worker for %d x %.0f s", m->f->name, want_b, want_s);
    p->max_batch = want_b;
    p->max_seconds = want_s;
    *out = p;
    return HARK_OK;
}

static void worker_put(hark_model_t *m, pooled_t *p)
{
    pthread_mutex_lock(&m->lock);
    p->next = m->free_workers;
    m->free_workers = p;
    pthread_mutex_unlock(&m->lock);
}

/* ---- recognition ---------------------------------------------------------------------------- */

struct hark_asr_result {
    int n;
    asr_result_t *r; /* (n) */
};

typedef struct {
    asr_result_t *dst;
    int status;
    char error[400];
    int done;
} slot_t;

static void on_emit(family_item_t *it, const family_event_t *ev)
{
    slot_t *s = it->user;
    if (ev->kind != FAMILY_EV_DONE)
        return; /* offline: partial events are not kept */
    s->done = 1;
    s->status = ev->status;
    if (ev->status)
        snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
    else if (ev->asr)
        asr_result_take(s->dst, ev->asr);
}

/* hark_asr_opts_t -> family request parameters (text in buf) */
static int asr_params(const hark_asr_opts_t *o, family_param_t *p, char buf[6][40])
{
    int k = 0;
    if (o->decoding_method)
        p[k++] = (family_param_t){"decoding_method", o->decoding_method};
    if (o->beam_size) {
        snprintf(buf[0], 40, "%d", o->beam_size);
        p[k++] = (family_param_t){"beam_size", buf[0]};
    }
    if (o->ctc_weight) {
        snprintf(buf[1], 40, "%.17g", o->ctc_weight < 0 ? 0.0 : o->ctc_weight);
        p[k++] = (family_param_t){"ctc_weight", buf[1]};
    }
    if (o->reverse_weight) {
        snprintf(buf[2], 40, "%.17g", o->reverse_weight < 0 ? 0.0 : o->reverse_weight);
        p[k++] = (family_param_t){"reverse_weight", buf[2]};
    }
    if (o->nbest) {
        if (o->nbest == HARK_NBEST_ALL)
            snprintf(buf[3], 40, "all");
        else
            snprintf(buf[3], 40, "%d", o->nbest);
        p[k++] = (family_param_t){"nbest", buf[3]};
    }
    if (o->decoding_chunk_size) {
        snprintf(buf[4], 40, "%d", o->decoding_chunk_size);
        p[k++] = (family_param_t){"decoding_chunk_size", buf[4]};
    }
    if (o->num_decoding_left_chunks) {
        int left = o->num_decoding_left_chunks;
        snprintf(buf[5], 40, "%d", left == HARK_LEFT_CHUNKS_ZERO ? 0 : left);
        p[k++] = (family_param_t){"num_decoding_left_chunks", buf[5]};
    }
    return k;
}

/* Runs items [0, n) through one borrowed worker. */
static int run_batch(hark_model_t *m, const void *opts, const hark_asr_opts_t *o,
                     const float *const *pcm, const size_t *len, int n, int first,
                     asr_result_t *res)
{
    hark_err_t err = {0};
    double secs = 0;
    for (int i = 0; i < n; i++)
        if ((double)len[i] / m->info.sample_rate > secs)
            secs = (double)len[i] / m->info.sample_rate;
    if (m->o.max_seconds > 0 && secs > m->o.max_seconds)
        return fail(HARK_ERR_TOO_LARGE, "utterance of %.1f s exceeds the model's max_seconds %.1f",
                    secs, m->o.max_seconds);
    family_item_t *items = hark_calloc((size_t)n, sizeof *items);
    family_item_t **ip = hark_calloc((size_t)n, sizeof *ip);
    slot_t *slots = hark_calloc((size_t)n, sizeof *slots);
    pooled_t *w = NULL;
    int rc = !items || !ip || !slots ? err_set(&err, HARK_ERR_NOMEM, "out of memory")
                                     : worker_get(m, n, secs, &w, &err);
    if (rc) {
        fail_err(rc, &err);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        slots[i].dst = &res[i];
        items[i] = (family_item_t){.opts = opts,
                                   .pcm = pcm[i],
                                   .n = len[i],
                                   .want_words = o->want_words,
                                   .dump_dir = o->dump_dir,
                                   .emit = on_emit,
                                   .user = &slots[i]};
        ip[i] = &items[i];
    }
    int xrc = m->f->execute(w->w, ip, n, NULL, &err);
    for (int i = 0; i < n && !rc; i++) {
        if (!slots[i].done)
            rc = fail(HARK_ERR_INTERNAL, "%s: execute gave utterance %d no result", m->f->name,
                      first + i);
        else if (slots[i].status)
            rc = fail(slots[i].status, "utterance %d: %s", first + i, slots[i].error);
    }
    if (!rc && xrc)
        rc = fail_err(xrc, &err);
    if (xrc == HARK_ERR_CUDA) { /* the worker may be broken: do not pool it */
        m->f->worker_destroy(w->w);
        hark_free(w);
        w = NULL;
    }
done:
    if (w)
        worker_put(m, w);
    hark_free(items);
    hark_free(ip);
    hark_free(slots);
    return rc;
}

hark_status_t hark_recognize(hark_model_t *m, const float *const *pcm, const size_t *n_samples,
                             int n, int sample_rate, const hark_asr_opts_t *opts,
                             hark_asr_result_t **out)
{
    if (out)
        *out = NULL;
    if (!m || !out || n < 0 || (n > 0 && (!pcm || !n_samples)))
        return fail(HARK_ERR_INVALID_ARG, "hark_recognize: model, pcm, n_samples and out are "
                                          "required, n >= 0");
    if (m->f->task != FAMILY_TASK_ASR)
        return fail(HARK_ERR_UNSUPPORTED, "hark_recognize: model family %s is a %s model, not asr",
                    m->f->name, family_task_name(m->f->task));
    hark_asr_opts_t o = opts ? *opts : (hark_asr_opts_t){0};
    if (o.dump_dir && n != 1)
        return fail(HARK_ERR_INVALID_ARG, "hark_recognize: dump_dir takes one utterance, not %d",
                    n);
    const int rate = m->info.sample_rate;
    if (sample_rate == 0)
        sample_rate = rate;
    if (sample_rate < AUDIO_MIN_RATE || sample_rate > AUDIO_MAX_RATE)
        return fail(HARK_ERR_INVALID_ARG, "hark_recognize: sample_rate %d outside [%d, %d]",
                    sample_rate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    for (int i = 0; i < n; i++)
        if (!pcm[i] && n_samples[i])
            return fail(HARK_ERR_INVALID_ARG, "hark_recognize: pcm[%d] is NULL", i);
    family_param_t p[8];
    char buf[6][40];
    family_params_t req = {p, asr_params(&o, p, buf)};
    hark_err_t err = {0};
    void *fopts = hark_calloc(1, m->f->opts_size ? m->f->opts_size : 1);
    hark_asr_result_t *r = hark_calloc(1, sizeof *r);
    asr_result_t *res = hark_calloc((size_t)(n ? n : 1), sizeof *res);
    float **resampled = NULL;
    const float **use = NULL;
    size_t *len = NULL;
    int rc = HARK_OK;
    if (!fopts || !r || !res) {
        rc = fail(HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = m->f->parse_opts(m->fm, &m->cfg_params, &req, fopts, &err))) {
        fail_err(rc, &err);
        goto done;
    }
    use = (const float **)pcm;
    len = (size_t *)n_samples;
    if (sample_rate != rate && n > 0) {
        resampled = hark_calloc((size_t)n, sizeof *resampled);
        use = hark_calloc((size_t)n, sizeof *use);
        len = hark_calloc((size_t)n, sizeof *len);
        if (!resampled || !use || !len) {
            rc = fail(HARK_ERR_NOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < n && !rc; i++) {
            if ((rc = audio_resample(pcm[i], n_samples[i], sample_rate, rate, &resampled[i],
                                     &len[i], &err)))
                fail(rc, "utterance %d: %s", i, err.msg);
            use[i] = resampled[i];
        }
        if (rc)
            goto done;
    }
    int step = m->o.max_batch > 0 ? m->o.max_batch : (n ? n : 1);
    for (int first = 0; first < n && !rc; first += step) {
        int k = n - first < step ? n - first : step;
        rc = run_batch(m, fopts, &o, use + first, len + first, k, first, res + first);
    }
done:
    if (resampled)
        for (int i = 0; i < n; i++)
            hark_free(resampled[i]);
    if (resampled || len != n_samples) {
        hark_free(resampled);
        hark_free(use);
        hark_free(len);
    }
    hark_free(fopts);
    if (rc) {
        for (int i = 0; res && i < n; i++)
            asr_result_free(&res[i]);
        hark_free(res);
        hark_free(r);
        return (hark_status_t)rc;
    }
    r->n = n;
    r->r = res;
    *out = r;
    return HARK_OK;
}

void hark_asr_result_destroy(hark_asr_result_t *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        asr_result_free(&r->r[i]);
    hark_free(r->r);
    hark_free(r);
}

int hark_asr_result_move(hark_asr_result_t *r, int i, asr_result_t *dst)
{
    if (!r || i < 0 || i >= r->n)
        return HARK_ERR_INVALID_ARG;
    asr_result_take(dst, &r->r[i]);
    return HARK_OK;
}

static const asr_result_t *at(const hark_asr_result_t *r, int i)
{
    return r && i >= 0 && i < r->n ? &r->r[i] : NULL;
}

int hark_asr_result_count(const hark_asr_result_t *r)
{
    return r ? r->n : 0;
}

const char *hark_asr_result_text(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? (a->best.text ? a->best.text : "") : NULL;
}

static int hyp_tokens(const asr_hyp_t *h, const int **tokens, const int **times_ms)
{
    if (tokens)
        *tokens = h ? h->tokens : NULL;
    if (times_ms)
        *times_ms = h ? h->times_ms : NULL;
    return h ? h->n_tokens : 0;
}

int hark_asr_result_tokens(const hark_asr_result_t *r, int i, const int **tokens,
                           const int **times_ms)
{
    const asr_result_t *a = at(r, i);
    return hyp_tokens(a ? &a->best : NULL, tokens, times_ms);
}

double hark_asr_result_score(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->best.score : 0;
}

double hark_asr_result_confidence(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->confidence : 0;
}

double hark_asr_result_duration(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->duration_s : 0;
}

int hark_asr_result_word_sep(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->word_sep : 0;
}

int hark_asr_result_word_count(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->n_words : 0;
}

const char *hark_asr_result_word(const hark_asr_result_t *r, int i, int k, int *start_ms,
                                 int *end_ms)
{
    const asr_result_t *a = at(r, i);
    if (!a || k < 0 || k >= a->n_words)
        return NULL;
    if (start_ms)
        *start_ms = a->words[k].start_ms;
    if (end_ms)
        *end_ms = a->words[k].end_ms;
    return a->words[k].text;
}

int hark_asr_result_nbest_count(const hark_asr_result_t *r, int i)
{
    const asr_result_t *a = at(r, i);
    return a ? a->n_nbest : 0;
}

static const asr_hyp_t *nbest_at(const hark_asr_result_t *r, int i, int k)
{
    const asr_result_t *a = at(r, i);
    return a && k >= 0 && k < a->n_nbest ? &a->nbest[k] : NULL;
}

const char *hark_asr_result_nbest_text(const hark_asr_result_t *r, int i, int k, double *score)
{
    const asr_hyp_t *h = nbest_at(r, i, k);
    if (score)
        *score = h ? h->score : 0;
    return h ? (h->text ? h->text : "") : NULL;
}

int hark_asr_result_nbest_tokens(const hark_asr_result_t *r, int i, int k, const int **tokens,
                                 const int **times_ms)
{
    return hyp_tokens(nbest_at(r, i, k), tokens, times_ms);
}

/* ---- streaming and synthesis: no family yet ------------------------------------------------- */

/* A stream: a worker of its own (one stream slot) over the family's streams (family.h
 * stream_open / stream items); each accept_waveform is one execute of one stream item, whose
 * PARTIAL / DONE result is kept as the stream's latest. */
struct hark_stream {
    hark_model_t *m;
    family_worker_t *w;
    void *st;    /* the family's stream */
    void *fopts; /* parse_opts of the create's options */
    asr_result_t last;
    int ended;  /* the input ended (accept_waveform with n == 0) */
    int status; /* the last item's error, or 0 */
    char error[400];
};

static void stream_emit(family_item_t *it, const family_event_t *ev)
{
    hark_stream_t *s = it->user;
    if (ev->kind == FAMILY_EV_DONE && ev->status) {
        s->status = ev->status;
        snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
    }
    if ((ev->kind == FAMILY_EV_PARTIAL || ev->kind == FAMILY_EV_DONE) && ev->asr && !ev->status) {
        asr_result_free(&s->last);
        asr_result_take(&s->last, ev->asr);
    }
}

hark_status_t hark_stream_create(hark_model_t *m, const hark_asr_opts_t *opts, hark_stream_t **out)
{
    if (out)
        *out = NULL;
    if (!m || !out)
        return fail(HARK_ERR_INVALID_ARG, "hark_stream_create: model and out are required");
    if (m->f->task != FAMILY_TASK_ASR || !m->f->stream_open)
        return fail(HARK_ERR_UNSUPPORTED,
                    "hark_stream_create: model family %s has no streaming recognition", m->f->name);
    hark_asr_opts_t o = opts ? *opts : (hark_asr_opts_t){0};
    family_param_t p[8];
    char buf[6][40];
    family_params_t req = {p, asr_params(&o, p, buf)};
    hark_err_t err = {0};
    hark_stream_t *s = hark_calloc(1, sizeof *s);
    if (!s || !(s->fopts = hark_calloc(1, m->f->opts_size ? m->f->opts_size : 1))) {
        hark_free(s);
        return fail(HARK_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    /* one slot, for as long a stream as the model takes (max_seconds), 10 minutes otherwise */
    family_worker_opts_t wo = {.max_batch = 1,
                               .max_seconds = m->o.max_seconds > 0 ? m->o.max_seconds : 600,
                               .n_threads = m->o.n_threads,
                               .max_sequences = 1};
    int rc = m->f->parse_opts(m->fm, &m->cfg_params, &req, s->fopts, &err);
    if (!rc)
        rc = m->f->worker_create(m->fm, &wo, &s->w, &err);
    if (!rc)
        rc = m->f->stream_open(s->w, &s->st, &err);
    if (rc) {
        fail_err(rc, &err);
        hark_stream_destroy(s);
        return (hark_status_t)rc;
    }
    *out = s;
    return HARK_OK;
}

hark_status_t hark_stream_accept_waveform(hark_stream_t *s, const float *pcm, size_t n,
                                          int sample_rate)
{
    if (!s || (n > 0 && !pcm))
        return fail(HARK_ERR_INVALID_ARG, "hark_stream_accept_waveform: stream and pcm required");
    if (s->ended)
        return fail(HARK_ERR_CLOSED, "hark_stream_accept_waveform: the input already ended");
    if (s->status)
        return fail(s->status, "hark_stream_accept_waveform: the stream failed: %s", s->error);
    if (sample_rate && sample_rate != s->m->info.sample_rate)
        return fail(HARK_ERR_UNSUPPORTED,
                    "hark_stream_accept_waveform: streams take the model's rate, %d Hz, not %d",
                    s->m->info.sample_rate, sample_rate);
    hark_err_t err = {0};
    family_item_t it = {.opts = s->fopts,
                        .pcm = pcm,
                        .n = n,
                        .want_words = 1,
                        .emit = stream_emit,
                        .user = s,
                        .stream = s->st,
                        .stream_end = n == 0};
    family_item_t *ip[1] = {&it};
    s->ended = n == 0;
    int rc = s->m->f->execute(s->w, ip, 1, NULL, &err);
    if (rc)
        return fail_err(rc, &err);
    if (s->status)
        return fail(s->status, "%s", s->error);
    return HARK_OK;
}

hark_status_t hark_stream_decode(hark_stream_t *s)
{
    if (!s)
        return fail(HARK_ERR_INVALID_ARG, "hark_stream_decode: no stream");
    return s->status ? fail(s->status, "%s", s->error) : HARK_OK; /* accept_waveform decoded */
}

hark_status_t hark_stream_result(hark_stream_t *s, hark_asr_result_t **out)
{
    if (out)
        *out = NULL;
    if (!s || !out)
        return fail(HARK_ERR_INVALID_ARG, "hark_stream_result: stream and out are required");
    hark_asr_result_t *r = hark_calloc(1, sizeof *r);
    asr_result_t *a = hark_calloc(1, sizeof *a);
    if (!r || !a || asr_result_copy(a, &s->last)) {
        hark_free(r);
        hark_free(a);
        return fail(HARK_ERR_NOMEM, "out of memory");
    }
    r->n = 1;
    r->r = a;
    *out = r;
    return HARK_OK;
}

void hark_stream_destroy(hark_stream_t *s)
{
    if (!s)
        return;
    if (s->st)
        s->m->f->stream_close(s->w, s->st);
    if (s->w)
        s->m->f->worker_destroy(s->w);
    asr_result_free(&s->last);
    hark_free(s->fopts);
    hark_free(s);
}

typedef struct {
    float *pcm;
    size_t n;
    int rate, done, status;
    char error[512];
} tts_slot_t;

static void on_tts_emit(family_item_t *item, const family_event_t *ev)
{
    tts_slot_t *s = item->user;
    if (ev->kind == FAMILY_EV_AUDIO && ev->n && !s->status) {
        float *p = hark_realloc(s->pcm, sizeof(float) * (s->n + ev->n));
        if (!p) {
            s->status = HARK_ERR_NOMEM;
            snprintf(s->error, sizeof s->error, "out of memory for %zu samples", s->n + ev->n);
            return;
        }
        memcpy(p + s->n, ev->pcm, sizeof(float) * ev->n);
        s->pcm = p;
        s->n += ev->n;
        s->rate = ev->sample_rate;
    } else if (ev->kind == FAMILY_EV_DONE) {
        s->done = 1;
        if (ev->status && !s->status) {
            s->status = ev->status;
            snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
        }
    }
}

hark_status_t hark_synthesize(hark_model_t *m, const char *text, const hark_tts_opts_t *opts,
                              float **pcm, size_t *n, int *sample_rate)
{
    if (pcm)
        *pcm = NULL;
    if (n)
        *n = 0;
    if (!m || !text || !pcm || !n)
        return fail(HARK_ERR_INVALID_ARG, "hark_synthesize: model, text, pcm and n are required");
    if (m->f->task != FAMILY_TASK_TTS)
        return fail(HARK_ERR_UNSUPPORTED,
                    "hark_synthesize: model family %s is an %s model, not a TTS model", m->f->name,
                    family_task_name(m->f->task));
    hark_tts_opts_t o = opts ? *opts : (hark_tts_opts_t){0};
    if (o.voice && *o.voice)
        return fail(HARK_ERR_UNSUPPORTED,
                    "hark_synthesize: voice \"%s\": %s models have one voice (leave it NULL)",
                    o.voice, m->f->name);
    if (o.speed < 0)
        return fail(HARK_ERR_INVALID_ARG, "hark_synthesize: speed must not be negative");
    family_param_t p[1];
    char buf[40];
    int np = 0;
    if (o.speed > 0) {
        snprintf(buf, sizeof buf, "%.9g", o.speed);
        p[np++] = (family_param_t){"speed", buf};
    }
    family_params_t req = {p, np};
    hark_err_t err = {0};
    void *fopts = hark_calloc(1, m->f->opts_size ? m->f->opts_size : 1);
    if (!fopts)
        return fail(HARK_ERR_NOMEM, "out of memory");
    tts_slot_t slot = {0};
    pooled_t *w = NULL;
    int rc = m->f->parse_opts(m->fm, &m->cfg_params, &req, fopts, &err);
    if (!rc)
        rc = worker_get(m, 1, 0, &w, &err);
    if (rc) {
        hark_free(fopts);
        return fail_err(rc, &err);
    }
    family_item_t item = {.opts = fopts, .text = text, .emit = on_tts_emit, .user = &slot};
    family_item_t *ip = &item;
    int xrc = m->f->execute(w->w, &ip, 1, NULL, &err);
    worker_put(m, w);
    hark_free(fopts);
    if (!slot.done)
        rc = fail(HARK_ERR_INTERNAL, "%s: execute gave the text no result", m->f->name);
    else if (slot.status)
        rc = fail(slot.status, "%s", slot.error);
    else if (xrc)
        rc = fail_err(xrc, &err);
    if (rc) {
        hark_free(slot.pcm);
        return (hark_status_t)rc;
    }
    *pcm = slot.pcm;
    *n = slot.n;
    if (sample_rate)
        *sample_rate = slot.rate;
    return HARK_OK;
}

/* ---- voice activity -------------------------------------------------------------------------- */

struct hark_vad_result {
    int n;
    double **seg; /* (n) each (2 * n_seg[i]) start, end */
    int *n_seg;
};

typedef struct {
    hark_vad_result_t *r;
    int i, done, status;
    char error[512];
} vad_slot_t;

static void on_vad_emit(family_item_t *item, const family_event_t *ev)
{
    vad_slot_t *s = item->user;
    if (ev->kind == FAMILY_EV_SEGMENT && !s->status) {
        int k = s->r->n_seg[s->i];
        double *p = hark_realloc(s->r->seg[s->i], sizeof(double) * 2 * (size_t)(k + 1));
        if (!p) {
            s->status = HARK_ERR_NOMEM;
            snprintf(s->error, sizeof s->error, "out of memory for %d segments", k + 1);
            return;
        }
        p[2 * k] = ev->seg_start_s;
        p[2 * k + 1] = ev->seg_end_s;
        s->r->seg[s->i] = p;
        s->r->n_seg[s->i] = k + 1;
    } else if (ev->kind == FAMILY_EV_DONE) {
        s->done = 1;
        if (ev->status && !s->status) {
            s->status = ev->status;
            snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
        }
    }
}

/* the options that are set, as the family's parameters */
static int vad_params(const hark_vad_opts_t *o, family_param_t *p, char (*buf)[40])
{
    int n = 0;
#define VAD_NUM(key, val, fmt)                                                                     \
    do {                                                                                           \
        snprintf(buf[n], 40, fmt, val);                                                            \
        p[n] = (family_param_t){key, buf[n]};                                                      \
        n++;                                                                                       \
    } while (0)
    if (o->threshold != 0)
        VAD_NUM("threshold", o->threshold, "%.17g");
    if (o->neg_threshold != 0)
        VAD_NUM("neg_threshold", o->neg_threshold, "%.17g");
    if (o->max_speech_s != 0)
        VAD_NUM("max_speech_duration_s", o->max_speech_s, "%.17g");
    if (o->min_speech_ms != 0)
        VAD_NUM("min_speech_duration_ms", o->min_speech_ms == HARK_VAD_ZERO ? 0 : o->min_speech_ms,
                "%d");
    if (o->min_silence_ms != 0)
        VAD_NUM("min_silence_duration_ms",
                o->min_silence_ms == HARK_VAD_ZERO ? 0 : o->min_silence_ms, "%d");
    if (o->speech_pad_ms != 0)
        VAD_NUM("speech_pad_ms", o->speech_pad_ms == HARK_VAD_ZERO ? 0 : o->speech_pad_ms, "%d");
#undef VAD_NUM
    return n;
}

hark_status_t hark_detect_speech(hark_model_t *m, const float *const *pcm, const size_t *n_samples,
                                 int n, int sample_rate, const hark_vad_opts_t *opts,
                                 hark_vad_result_t **out)
{
    if (out)
        *out = NULL;
    if (!m || !out || n < 0 || (n > 0 && (!pcm || !n_samples)))
        return fail(HARK_ERR_INVALID_ARG,
                    "hark_detect_speech: model, pcm, n_samples and out are required, n >= 0");
    if (m->f->task != FAMILY_TASK_VAD)
        return fail(HARK_ERR_UNSUPPORTED,
                    "hark_detect_speech: model family %s is a %s model, not vad", m->f->name,
                    family_task_name(m->f->task));
    const int rate = m->info.sample_rate;
    if (sample_rate == 0)
        sample_rate = rate;
    if (sample_rate < AUDIO_MIN_RATE || sample_rate > AUDIO_MAX_RATE)
        return fail(HARK_ERR_INVALID_ARG, "hark_detect_speech: sample_rate %d outside [%d, %d]",
                    sample_rate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    for (int i = 0; i < n; i++)
        if (!pcm[i] && n_samples[i])
            return fail(HARK_ERR_INVALID_ARG, "hark_detect_speech: pcm[%d] is NULL", i);
    hark_vad_opts_t o = opts ? *opts : (hark_vad_opts_t){0};
    family_param_t p[6];
    char buf[6][40];
    family_params_t req = {p, vad_params(&o, p, buf)};
    hark_err_t err = {0};
    int k = n ? n : 1, rc = HARK_OK;
    void *fopts = hark_calloc(1, m->f->opts_size ? m->f->opts_size : 1);
    hark_vad_result_t *r = hark_calloc(1, sizeof *r);
    float **resampled = hark_calloc((size_t)k, sizeof *resampled);
    vad_slot_t *slots = hark_calloc((size_t)k, sizeof *slots);
    family_item_t *items = hark_calloc((size_t)k, sizeof *items);
    family_item_t **ip = hark_calloc((size_t)k, sizeof *ip);
    pooled_t *w = NULL;
    if (r) {
        r->seg = hark_calloc((size_t)k, sizeof *r->seg);
        r->n_seg = hark_calloc((size_t)k, sizeof *r->n_seg);
        r->n = n;
    }
    if (!fopts || !r || !r->seg || !r->n_seg || !resampled || !slots || !items || !ip) {
        rc = fail(HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = m->f->parse_opts(m->fm, &m->cfg_params, &req, fopts, &err))) {
        fail_err(rc, &err);
        goto done;
    }
    double longest = 0;
    for (int i = 0; i < n; i++) {
        const float *x = pcm[i];
        size_t len = n_samples[i];
        if (sample_rate != rate && len) {
            if ((rc = audio_resample(pcm[i], n_samples[i], sample_rate, rate, &resampled[i], &len,
                                     &err))) {
                fail(rc, "utterance %d: %s", i, err.msg);
                goto done;
            }
            x = resampled[i];
        }
        longest = (double)len / rate > longest ? (double)len / rate : longest;
        slots[i] = (vad_slot_t){.r = r, .i = i};
        items[i] = (family_item_t){
            .opts = fopts, .pcm = x, .n = len, .emit = on_vad_emit, .user = &slots[i]};
        ip[i] = &items[i];
    }
    if (n > 0) {
        if ((rc = worker_get(m, n, longest, &w, &err))) {
            fail_err(rc, &err);
            goto done;
        }
        int xrc = m->f->execute(w->w, ip, n, NULL, &err);
        worker_put(m, w);
        for (int i = 0; i < n && !rc; i++) {
            if (!slots[i].done)
                rc = fail(HARK_ERR_INTERNAL, "%s: execute gave utterance %d no result", m->f->name,
                          i);
            else if (slots[i].status)
                rc = fail(slots[i].status, "utterance %d: %s", i, slots[i].error);
        }
        if (!rc && xrc)
            rc = fail_err(xrc, &err);
    }
done:
    for (int i = 0; resampled && i < n; i++)
        hark_free(resampled[i]);
    hark_free(resampled);
    hark_free(slots);
    hark_free(items);
    hark_free(ip);
    hark_free(fopts);
    if (rc) {
        hark_vad_result_destroy(r);
        return (hark_status_t)rc;
    }
    *out = r;
    return HARK_OK;
}

void hark_vad_result_destroy(hark_vad_result_t *r)
{
    if (!r)
        return;
    for (int i = 0; r->seg && i < r->n; i++)
        hark_free(r->seg[i]);
    hark_free(r->seg);
    hark_free(r->n_seg);
    hark_free(r);
}

int hark_vad_result_count(const hark_vad_result_t *r)
{
    return r ? r->n : 0;
}

int hark_vad_result_segments(const hark_vad_result_t *r, int i, const double **start_end)
{
    if (start_end)
        *start_end = NULL;
    if (!r || i < 0 || i >= r->n)
        return 0;
    if (start_end)
        *start_end = r->seg[i];
    return r->n_seg[i];
}

/* ---- audio files ---------------------------------------------------------------------------- */

hark_status_t hark_decode_audio_file(const char *path, int sample_rate, float **pcm, size_t *n,
                                     int *out_rate)
{
    if (pcm)
        *pcm = NULL;
    if (n)
        *n = 0;
    if (!path || !pcm || !n || sample_rate < 0)
        return fail(HARK_ERR_INVALID_ARG,
                    "hark_decode_audio_file: path, pcm and n are required, sample_rate >= 0");
    audio_t a = {0};
    audio_opts_t ao = {.target_rate = sample_rate};
    hark_err_t err = {0};
    int rc = audio_decode_file(path, &ao, &a, &err);
    if (rc)
        return fail_err(rc, &err);
    *pcm = a.samples;
    *n = a.n;
    if (out_rate)
        *out_rate = a.rate;
    return HARK_OK;
}

void hark_pcm_free(float *pcm)
{
    hark_free(pcm);
}
