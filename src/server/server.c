/* server.c — `hark serve`: model repository, KServe v2 HTTP, OpenAI transcriptions, metrics,
 * readiness and graceful drain. The loop thread parses, validates and routes; model instances
 * answer inference requests from their own threads.
 * Tests: tests/server/test_server.py (through the hark binary) */
#include "server/server.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "text/words.h"
#include "gpu/gpu.h"
#include "gpu/pinned.h"
#include "hark.h"
#include "net/http_server.h"
#include "api/kserve.h"
#include "net/multipart.h"
#include "sched/instance.h"
#include "api/metrics.h"
#include "server/model_config.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <http_parser.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#define MAX_MODELS 64
#define MAX_HTTP_LOOPS 64

typedef enum { M_UNAVAILABLE = 0, M_LOADING, M_READY, M_UNLOADING } mstate_t;
static const char *const state_names[] = {"UNAVAILABLE", "LOADING", "READY", "UNLOADING"};

typedef struct {
    char name[128];
    char dir[4096];
    int version;
    char version_str[16];
    mstate_t state;
    char reason[512];
    model_config_t cfg;
    int has_cfg;
    served_model_t *served;
    wenet_decode_opts_t defaults; /* from config.pbtxt parameters */
} model_entry_t;

/* One event loop serving the API port: the first runs on the server's own loop (with the
 * signals and the metrics port), the others each on a thread of their own, all listening on the
 * same port (SO_REUSEPORT: the kernel spreads connections over them). */
typedef struct {
    server_t *s;
    uv_loop_t *loop; /* &s->loop, or &own */
    uv_loop_t own;
    int own_init;
    http_server_t *api;
    pthread_t th;
    int started;
} http_loop_t;

/* page-locked bytes for request bodies when the machine has a GPU (beyond: heap bodies) */
#define PINNED_BODY_BYTES ((size_t)512 << 20)

struct server {
    server_opts_t o;
    pinned_pool_t *bodies; /* request bodies, page-locked (a GPU is present), or NULL */
    uv_loop_t loop;
    int loop_init;
    uv_signal_t sigint, sigterm;
    uv_async_t stop_async;
    http_loop_t hl[MAX_HTTP_LOOPS];
    int n_loops;
    http_server_t *metrics;
    /* the model table: read-locked by the loops (in parallel), write-locked to change entries;
     * writers are preferred so that load/unload are not starved by steady traffic */
    pthread_rwlock_t lock;
    model_entry_t models[MAX_MODELS];
    int n_models;
    atomic_int draining;
    atomic_int loading; /* startup loads not finished */
};

/* ---- model repository ------------------------------------------------------------------- */

static model_entry_t *find_model(server_t *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n_models; i++)
        if (strlen(s->models[i].name) == len && !strncmp(s->models[i].name, name, len))
            return &s->models[i];
    return NULL;
}

/* latest numeric version directory that holds a model, or 0 */
static int latest_version(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0 || v > 1000000)
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s/model.json", dir, e->d_name);
        if (access(p, R_OK) == 0 && v > best)
            best = (int)v;
    }
    closedir(d);
    return best;
}

static void notice(void *user, const char *msg)
{
    LOG_INFO("%s: %s", (const char *)user, msg);
}

/* Around an instance's completions of a batch of n: the loops are woken once; the instance
 * writes the answers of a small batch itself (no wait for a loop), and leaves those of a large
 * one to the loops (a write per answer would hold up its next batch). */
#define WRITE_HERE_MAX_BATCH 8

static void completions_begin(int n)
{
    http_hold_wakeups(n <= WRITE_HERE_MAX_BATCH);
}

static void completions_end(int n)
{
    http_release_wakeups();
}

/* Reads config.pbtxt and turns it into served options. Called off the loop, table unlocked. */
static int prepare(server_t *s, model_entry_t *m, served_opts_t *so, hark_err_t *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/config.pbtxt", m->dir);
    model_config_free(&m->cfg);
    m->has_cfg = 0;
    model_config_opts_t mo = {.notice = notice, .user = m->name};
    int rc = model_config_load(path, &mo, &m->cfg, err);
    if (rc)
        return rc;
    m->has_cfg = 1;
    if (!m->cfg.family || strcmp(m->cfg.family, "wenet_u2") != 0)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: model family '%s' is not served by hark "
                       "(set backend: \"hark\" and parameters family)",
                       path, m->cfg.family ? m->cfg.family : "(none)");
    m->version = latest_version(m->dir);
    if (!m->version)
        return err_set(err, HARK_ERR_NOT_FOUND, "%s: no version directory with a model.json",
                       m->dir);
    snprintf(m->version_str, sizeof m->version_str, "%d", m->version);
    memset(so, 0, sizeof *so);
    so->completions_begin = completions_begin; /* one wake-up per loop and batch */
    so->completions_end = completions_end;
    so->version = m->version;
    so->max_seconds = s->o.max_audio_seconds;
    so->precision = WENET_FP32;
    const char *prec = model_config_param(&m->cfg, "precision");
    if (prec && !(so->precision = wenet_precision_parse(prec)))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "%s: parameters precision \"%s\": expected fp32, fp16 or bf16", path, prec);
    batcher_opts_t *b = &so->batching;
    b->max_batch_size = m->cfg.max_batch_size > 0 ? m->cfg.max_batch_size : 1;
    const model_dynamic_batching_t *db = &m->cfg.dynamic_batching;
    if (db->present) {
        for (int i = 0; i < db->n_preferred && i < 8; i++)
            b->preferred[b->n_preferred++] = db->preferred_batch_size[i];
        b->max_queue_delay_us = db->max_queue_delay_microseconds;
        b->max_queue_size = (int)db->default_queue_policy.max_queue_size;
    }
    b->length_aware = s->o.length_aware;
    int ngpu = gpu_device_count();
    for (int g = 0; g < m->cfg.n_instance_groups && so->n_groups < 8; g++) {
        const model_instance_group_t *ig = &m->cfg.instance_groups[g];
        int count = ig->count > 0 ? ig->count : 1;
        int want_gpu = ig->kind == MODEL_KIND_GPU || (ig->kind == MODEL_KIND_AUTO && ngpu > 0);
        if (want_gpu && ngpu == 0) {
            LOG_WARN("%s: instance_group %s asks for KIND_GPU but no GPU is available; running it "
                     "on the CPU",
                     m->name, ig->name);
            want_gpu = 0;
        }
        if (!want_gpu) {
            so->groups[so->n_groups++] =
                (served_group_t){.count = count, .device = -1, .n_threads = s->o.cpu_threads};
            continue;
        }
        int ndev = ig->n_gpus ? ig->n_gpus : ngpu;
        for (int d = 0; d < ndev && so->n_groups < 8; d++) {
            int dev = ig->n_gpus ? ig->gpus[d] : d;
            if (dev >= ngpu)
                return err_set(err, HARK_ERR_NO_DEVICE,
                               "%s: instance_group %s names GPU %d; %d present", path, ig->name,
                               dev, ngpu);
            so->groups[so->n_groups++] = (served_group_t){.count = count, .device = dev};
        }
    }
    if (!so->n_groups)
        so->groups[so->n_groups++] =
            (served_group_t){.count = 1, .device = ngpu ? 0 : -1, .n_threads = s->o.cpu_threads};
    return HARK_OK;
}

static void set_defaults(model_entry_t *m)
{
    wenet_decode_opts_t d = wenet_default_opts(served_model_asr(m->served));
    const char *v;
    if ((v = model_config_param(&m->cfg, "decoding_method")))
        wenet_parse_method(v, &d.method);
    if ((v = model_config_param(&m->cfg, "beam_size")))
        d.beam_size = atoi(v);
    if ((v = model_config_param(&m->cfg, "ctc_weight")))
        d.ctc_weight = (float)atof(v);
    if ((v = model_config_param(&m->cfg, "reverse_weight")))
        d.reverse_weight = (float)atof(v);
    if (d.method == DECODE_ATTENTION_RESCORING &&
        wenet_asr_config(served_model_asr(m->served))->decoder == DECODER_NONE)
        d.method = DECODE_CTC_PREFIX_BEAM;
    m->defaults = d;
}

/* Loads (or reloads) one model; any thread. */
static int load_model(server_t *s, model_entry_t *m, hark_err_t *err)
{
    pthread_rwlock_wrlock(&s->lock);
    if (m->state == M_LOADING || m->state == M_UNLOADING) {
        pthread_rwlock_unlock(&s->lock);
        return err_set(err, HARK_ERR_AGAIN, "model '%s' is %s", m->name,
                       m->state == M_LOADING ? "loading" : "unloading");
    }
    served_model_t *old = m->served;
    m->served = NULL;
    m->state = M_LOADING;
    pthread_rwlock_unlock(&s->lock);
    served_model_destroy(old); /* drains what it had queued */
    served_opts_t so;
    uint64_t t0 = clock_now_ns();
    served_model_t *sm = NULL;
    int rc = prepare(s, m, &so, err);
    if (!rc)
        rc = served_model_create(m->dir, &so, &sm, err);
    pthread_rwlock_wrlock(&s->lock);
    if (rc) {
        m->state = M_UNAVAILABLE;
        snprintf(m->reason, sizeof m->reason, "%s", err->msg);
        LOG_ERROR("model %s: %s", m->name, err->msg);
    } else {
        m->served = sm;
        set_defaults(m);
        m->state = M_READY;
        m->reason[0] = 0;
        LOG_INFO("model %s version %s ready (%d instance groups, %.1f s)", m->name, m->version_str,
                 so.n_groups, (double)(clock_now_ns() - t0) * 1e-9);
    }
    pthread_rwlock_unlock(&s->lock);
    return rc;
}

static void unload_model(server_t *s, model_entry_t *m)
{
    pthread_rwlock_wrlock(&s->lock);
    served_model_t *old = m->served;
    m->served = NULL;
    if (m->state == M_READY)
        m->state = M_UNLOADING;
    pthread_rwlock_unlock(&s->lock);
    served_model_destroy(old);
    pthread_rwlock_wrlock(&s->lock);
    if (m->state == M_UNLOADING)
        m->state = M_UNAVAILABLE;
    snprintf(m->reason, sizeof m->reason, "unloaded");
    pthread_rwlock_unlock(&s->lock);
}

static int scan_repository(server_t *s, hark_err_t *err)
{
    DIR *d = opendir(s->o.model_repository);
    if (!d)
        return err_set(err, HARK_ERR_IO, "--model-repository %s: %s", s->o.model_repository,
                       strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char cfg[4400];
        snprintf(cfg, sizeof cfg, "%s/%s/config.pbtxt", s->o.model_repository, e->d_name);
        if (access(cfg, R_OK) != 0)
            continue;
        if (s->n_models == MAX_MODELS || strlen(e->d_name) >= sizeof s->models[0].name)
            continue;
        model_entry_t *m = &s->models[s->n_models++];
        snprintf(m->name, sizeof m->name, "%s", e->d_name);
        snprintf(m->dir, sizeof m->dir, "%s/%s", s->o.model_repository, e->d_name);
        snprintf(m->version_str, sizeof m->version_str, "1");
    }
    closedir(d);
    return HARK_OK;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static void respond_json(http_req_t *req, int status, char *json)
{
    if (!json) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    http_respond_owned(req, status, "application/json", json, strlen(json), hark_free, json);
}

static void respond_cjson(http_req_t *req, int status, cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    http_respond_owned(req, status, "application/json", s, strlen(s), free, s);
}

static int status_for(int rc)
{
    switch (rc) {
    case HARK_ERR_AGAIN:
        return 503;
    case HARK_ERR_CLOSED:
        return 503;
    case HARK_ERR_TOO_LARGE:
        return 413;
    case HARK_ERR_TIMEOUT:
        return 504;
    case HARK_ERR_NOT_FOUND:
        return 404;
    case HARK_ERR_NOMEM:
    case HARK_ERR_INTERNAL:
    case HARK_ERR_CUDA:
        return 500;
    default:
        return 400;
    }
}

/* path segment i (0-based, '/'-separated) of req->path; returns its length */
static size_t segment(const char *path, int i, const char **out)
{
    *out = "";
    const char *p = path;
    for (int k = 0; k <= i; k++) {
        if (*p != '/')
            return 0;
        p++;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (k == i) {
            *out = p;
            return len;
        }
        p += len;
    }
    return 0;
}

static int server_ready(server_t *s)
{
    if (s->draining || s->loading)
        return 0;
    pthread_rwlock_rdlock(&s->lock);
    int ok = 1;
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].state == M_READY && !served_model_ready(s->models[i].served))
            ok = 0;
    pthread_rwlock_unlock(&s->lock);
    return ok;
}

/* ---- inference ------------------------------------------------------------------------------ */

typedef struct infer_ctx infer_ctx_t;
typedef struct {
    served_request_t req; /* first */
    infer_ctx_t *ctx;
    int index;
} infer_item_t;

enum { OUT_KSERVE = 0, OUT_OPENAI = 1 };

struct infer_ctx {
    server_t *s;
    uv_loop_t *loop; /* the loop thread the request came in on */
    http_req_t *http;
    int kind;
    char model[128], version[16];
    kserve_request_t kreq;
    int batch;
    infer_item_t *items;
    const float **pcm; /* (batch) samples: in the HTTP body or kreq (WAV), or in own[] */
    float **own;       /* (batch) decoded sample buffers (AUDIO, OpenAI), owned */
    size_t *n;
    wenet_result_t *results;
    const wenet_asr_t *asr;
    pthread_mutex_t lock;
    int remaining;
    int status; /* first failure */
    char error[512];
    /* OpenAI */
    char format[32];
    char language[32];
    int want_words;
    double duration;
};

static void ctx_free(infer_ctx_t *c)
{
    for (int i = 0; i < c->batch; i++) {
        if (c->own)
            hark_free(c->own[i]);
        if (c->results)
            wenet_result_free(&c->results[i]);
    }
    hark_free(c->pcm);
    hark_free(c->own);
    hark_free(c->n);
    hark_free(c->results);
    hark_free(c->items);
    kserve_request_free(&c->kreq);
    pthread_mutex_destroy(&c->lock);
    hark_free(c);
}

static void finish_kserve(infer_ctx_t *c)
{
    int B = c->batch;
    const char **texts = hark_calloc((size_t)B, sizeof *texts);
    size_t *lens = hark_calloc((size_t)B, sizeof *lens);
    if (!texts || !lens) {
        http_respond_error(c->http, 500, "out of memory");
        goto done;
    }
    for (int i = 0; i < B; i++) {
        texts[i] = c->results[i].best.text ? c->results[i].best.text : "";
        lens[i] = strlen(texts[i]);
    }
    size_t packed_size;
    uint8_t *packed = kserve_bytes_pack(texts, lens, B, &packed_size);
    int64_t shape[2] = {B, 1};
    kserve_output_t out = {.name = "TRANSCRIPTS",
                           .dtype = KSERVE_BYTES,
                           .ndim = 2,
                           .shape = shape,
                           .data = packed,
                           .size = packed_size};
    kserve_response_t resp;
    hark_err_t err = {0};
    if (!packed) {
        http_respond_error(c->http, 500, "out of memory");
    } else if (kserve_build_response(&c->kreq, c->model, c->version, &out, 1, &resp, &err)) {
        http_respond_error(c->http, status_for(err.status), "%s", err.msg);
    } else {
        if (resp.binary) {
            char hl[32];
            snprintf(hl, sizeof hl, "%zu", resp.header_len);
            http_res_header(c->http, "Inference-Header-Content-Length", hl);
        }
        http_respond_owned(c->http, 200,
                           resp.binary ? "application/octet-stream" : "application/json", resp.body,
                           resp.len, hark_free, resp.body);
    }
    hark_free(packed);
done:
    hark_free(texts);
    hark_free(lens);
}

static void finish_openai(infer_ctx_t *c)
{
    wenet_result_t *r = &c->results[0];
    const char *text = r->best.text ? r->best.text : "";
    if (!strcmp(c->format, "text")) {
        http_respond(c->http, 200, "text/plain; charset=utf-8", text, strlen(text));
        return;
    }
    if (!strcmp(c->format, "json")) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "text", text);
        respond_cjson(c->http, 200, j);
        return;
    }
    int style;
    const units_t *u = wenet_asr_units(c->asr, &style);
    word_time_t *w = NULL;
    int nw = 0;
    hark_err_t err = {0};
    if (words_from_tokens(u, (units_style_t)style, r->best.tokens, r->best.times, r->best.n_tokens,
                          wenet_asr_frame_ms(c->asr), &w, &nw, &err)) {
        http_respond_error(c->http, 500, "%s", err.msg);
        return;
    }
    int dur_ms = (int)(c->duration * 1000);
    if (!strcmp(c->format, "srt") || !strcmp(c->format, "vtt")) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        int rc = f ? subtitle_write(f, !strcmp(c->format, "srt") ? SUBTITLE_SRT : SUBTITLE_VTT, w,
                                    nw, (units_style_t)style, NULL, dur_ms, &err)
                   : HARK_ERR_NOMEM;
        if (f)
            fclose(f);
        if (rc)
            http_respond_error(c->http, 500, "%s", err.msg[0] ? err.msg : "out of memory");
        else
            http_respond(c->http, 200,
                         !strcmp(c->format, "srt") ? "application/x-subrip" : "text/vtt", buf, len);
        free(buf);
        words_free(w, nw);
        return;
    }
    /* verbose_json: OpenAI's shape; segments are the subtitle cues */
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "task", "transcribe");
    cJSON_AddStringToObject(j, "language", c->language[0] ? c->language : "english");
    cJSON_AddNumberToObject(j, "duration", c->duration);
    cJSON_AddStringToObject(j, "text", text);
    cue_t *cues = hark_calloc((size_t)(nw ? nw : 1), sizeof *cues);
    int nc = cues ? cues_build(w, nw, NULL, dur_ms, cues) : 0;
    cJSON *segs = cJSON_AddArrayToObject(j, "segments");
    for (int i = 0; i < nc; i++) {
        cJSON *sg = cJSON_CreateObject();
        cJSON_AddNumberToObject(sg, "id", i);
        cJSON_AddNumberToObject(sg, "seek", 0);
        cJSON_AddNumberToObject(sg, "start", cues[i].start_ms / 1000.0);
        cJSON_AddNumberToObject(sg, "end", cues[i].end_ms / 1000.0);
        char line[4096] = "";
        size_t off = 0;
        for (int k = 0; k < cues[i].count; k++)
            off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0, "%s%s",
                                    k && style == UNITS_STYLE_BPE ? " " : "",
                                    w[cues[i].first + k].text);
        cJSON_AddStringToObject(sg, "text", line);
        cJSON_AddItemToObject(sg, "tokens", cJSON_CreateArray());
        cJSON_AddNumberToObject(sg, "temperature", 0);
        cJSON_AddNumberToObject(sg, "avg_logprob", 0);
        cJSON_AddNumberToObject(sg, "compression_ratio", 0);
        cJSON_AddNumberToObject(sg, "no_speech_prob", 0);
        cJSON_AddItemToArray(segs, sg);
    }
    if (c->want_words) {
        cJSON *ws = cJSON_AddArrayToObject(j, "words");
        for (int i = 0; i < nw; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "word", w[i].text);
            cJSON_AddNumberToObject(x, "start", w[i].start_ms / 1000.0);
            cJSON_AddNumberToObject(x, "end", w[i].end_ms / 1000.0);
            cJSON_AddItemToArray(ws, x);
        }
    }
    hark_free(cues);
    words_free(w, nw);
    respond_cjson(c->http, 200, j);
}

static void item_done(served_request_t *r, int status, const char *error, wenet_result_t *res,
                      const served_timing_t *tm)
{
    infer_item_t *it = (infer_item_t *)r;
    infer_ctx_t *c = it->ctx;
    pthread_mutex_lock(&c->lock);
    if (res)
        c->results[it->index] = *res; /* take ownership of the snapshot */
    if (status && !c->status) {
        c->status = status;
        snprintf(c->error, sizeof c->error, "%s", error ? error : hark_status_str(status));
    }
    int last = --c->remaining == 0;
    pthread_mutex_unlock(&c->lock);
    if (!last)
        return;
    if (c->status) {
        if (c->status == HARK_ERR_AGAIN)
            http_res_header(c->http, "Retry-After", "1");
        http_respond_error(c->http, status_for(c->status), "%s", c->error);
    } else if (c->kind == OUT_KSERVE) {
        finish_kserve(c);
    } else {
        finish_openai(c);
    }
    ctx_free(c);
}

static infer_ctx_t *ctx_new(const http_loop_t *l, http_req_t *req, model_entry_t *m, int batch,
                            int kind)
{
    infer_ctx_t *c = hark_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->s = l->s;
    c->loop = l->loop;
    c->http = req;
    c->kind = kind;
    c->batch = batch;
    snprintf(c->model, sizeof c->model, "%s", m->name);
    snprintf(c->version, sizeof c->version, "%s", m->version_str);
    c->asr = served_model_asr(m->served);
    pthread_mutex_init(&c->lock, NULL);
    c->items = hark_calloc((size_t)batch, sizeof *c->items);
    c->pcm = hark_calloc((size_t)batch, sizeof *c->pcm);
    c->own = hark_calloc((size_t)batch, sizeof *c->own);
    c->n = hark_calloc((size_t)batch, sizeof *c->n);
    c->results = hark_calloc((size_t)batch, sizeof *c->results);
    if (!c->items || !c->pcm || !c->own || !c->n || !c->results) {
        ctx_free(c);
        return NULL;
    }
    return c;
}

/* Submits every item (loop thread, table locked by the caller). On a failed submission the items
 * not queued are counted off; the last completion (or this function) answers. */
static void submit_all(infer_ctx_t *c, served_model_t *sm, const wenet_decode_opts_t *o,
                       uint64_t timeout_us)
{
    c->remaining = c->batch;
    int queued = 0;
    hark_err_t err = {0};
    int rc = HARK_OK;
    for (int i = 0; i < c->batch; i++) {
        infer_item_t *it = &c->items[i];
        it->ctx = c;
        it->index = i;
        it->req.pcm = c->pcm[i];
        it->req.n = c->n[i];
        it->req.opts = *o;
        it->req.done = item_done;
        it->req.item.deadline_ns = timeout_us ? clock_now_ns() + timeout_us * 1000 : 0;
        if ((rc = served_model_submit(sm, &it->req, &err)))
            break;
        queued++;
    }
    if (!rc)
        return;
    pthread_mutex_lock(&c->lock);
    if (!c->status) {
        c->status = rc;
        snprintf(c->error, sizeof c->error, "%s", err.msg);
    }
    c->remaining -= c->batch - queued;
    int last = c->remaining == 0;
    pthread_mutex_unlock(&c->lock);
    if (last) {
        if (rc == HARK_ERR_AGAIN)
            http_res_header(c->http, "Retry-After", "1");
        http_respond_error(c->http, status_for(rc), "%s", c->error);
        ctx_free(c);
    }
}

/* decoding options from KServe request parameters over the model's defaults */
static int request_opts(const model_entry_t *m, const kserve_request_t *k, wenet_decode_opts_t *o,
                        hark_err_t *err)
{
    *o = m->defaults;
    if (k->decoding_method && wenet_parse_method(k->decoding_method, &o->method))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "decoding_method '%s' is not one of ctc_greedy_search, "
                       "ctc_prefix_beam_search, attention_rescoring",
                       k->decoding_method);
    if (k->has_beam_size) {
        if (k->beam_size < 1 || k->beam_size > 100)
            return err_set(err, HARK_ERR_INVALID_ARG, "beam_size must be in [1, 100]");
        o->beam_size = k->beam_size;
    }
    if (k->has_ctc_weight)
        o->ctc_weight = (float)k->ctc_weight;
    if (k->has_reverse_weight)
        o->reverse_weight = (float)k->reverse_weight;
    if (o->method == DECODE_ATTENTION_RESCORING &&
        wenet_asr_config(served_model_asr(m->served))->decoder == DECODER_NONE)
        return err_set(err, HARK_ERR_INVALID_ARG, "attention_rescoring: this model has no decoder");
    return HARK_OK;
}

/* Encoded audio is decoded on libuv's thread pool, not on the loop; the requests are submitted
 * from the loop once their PCM is ready. */
typedef struct {
    uv_work_t work;
    infer_ctx_t *c;
    int rate;
    double max_seconds;
    const uint8_t **src; /* (batch) encoded files, inside the HTTP request's body */
    size_t *src_len;
    const char *what; /* "AUDIO" or "file" for messages */
    wenet_decode_opts_t o;
    uint64_t timeout_us;
    int rc;
    hark_err_t err;
} decode_job_t;

static void decode_job_free(decode_job_t *j)
{
    hark_free(j->src);
    hark_free(j->src_len);
    hark_free(j);
}

static void decode_work(uv_work_t *w)
{
    decode_job_t *j = w->data;
    infer_ctx_t *c = j->c;
    for (int b = 0; b < c->batch && !j->rc; b++) {
        audio_opts_t ao = {.target_rate = j->rate, .max_seconds = j->max_seconds};
        audio_t au;
        if ((j->rc = audio_decode_memory(j->src[b], j->src_len[b], &ao, &au, &j->err))) {
            if (c->batch > 1)
                err_prefix(&j->err, j->rc, "%s[%d]", j->what, b);
            else
                err_prefix(&j->err, j->rc, "%s", j->what);
            break;
        }
        c->pcm[b] = c->own[b] = au.samples; /* taken over; audio_t holds nothing else */
        c->n[b] = au.n;
    }
    if (!j->rc && c->kind == OUT_OPENAI)
        c->duration = (double)c->n[0] / j->rate;
}

static void decode_after(uv_work_t *w, int status)
{
    decode_job_t *j = w->data;
    infer_ctx_t *c = j->c;
    server_t *s = c->s;
    if (j->rc || status) {
        http_respond_error(c->http, status_for(j->rc ? j->rc : HARK_ERR_INTERNAL), "%s",
                           j->rc ? j->err.msg : "decoding was cancelled");
        ctx_free(c);
        decode_job_free(j);
        return;
    }
    pthread_rwlock_rdlock(&s->lock);
    model_entry_t *m = find_model(s, c->model, strlen(c->model));
    if (!m || m->state != M_READY) { /* unloaded while the audio was being decoded */
        pthread_rwlock_unlock(&s->lock);
        http_respond_error(c->http, 503, "model '%s' is not ready", c->model);
        ctx_free(c);
        decode_job_free(j);
        return;
    }
    c->asr = served_model_asr(m->served);
    submit_all(c, m->served, &j->o, j->timeout_us);
    pthread_rwlock_unlock(&s->lock);
    decode_job_free(j);
}

/* Queues the decoding of c's encoded inputs (completing on c's loop); on failure answers and
 * frees c. */
static void decode_then_submit(infer_ctx_t *c, decode_job_t *j)
{
    j->c = c;
    j->work.data = j;
    if (uv_queue_work(c->loop, &j->work, decode_work, decode_after) != 0) {
        http_respond_error(c->http, 500, "cannot queue the audio decoding");
        ctx_free(c);
        decode_job_free(j);
    }
}

static decode_job_t *decode_job_new(int batch, int rate, double max_seconds, const char *what)
{
    decode_job_t *j = hark_calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->src = hark_calloc((size_t)batch, sizeof *j->src);
    j->src_len = hark_calloc((size_t)batch, sizeof *j->src_len);
    if (!j->src || !j->src_len) {
        decode_job_free(j);
        return NULL;
    }
    j->rate = rate;
    j->max_seconds = max_seconds;
    j->what = what;
    return j;
}

/* http_server's body_align hook: KServe's binary tensors start Inference-Header-Content-Length
 * bytes into the body; aligned there, the WAV samples are used in place (no copy). */
static size_t infer_body_align(const http_req_t *req, void *user)
{
    const char *h = http_req_header(req, "Inference-Header-Content-Length");
    size_t at = 0;
    if (!h || kserve_parse_header_length(h, strlen(h), SIZE_MAX, &at, NULL))
        return 0;
    return at;
}

static void handle_infer(const http_loop_t *l, http_req_t *req, model_entry_t *m)
{
    server_t *s = l->s;
    hark_err_t err = {0};
    size_t hlen = (size_t)-1;
    const char *h = http_req_header(req, "Inference-Header-Content-Length");
    if (h && kserve_parse_header_length(h, strlen(h), req->body_len, &hlen, &err)) {
        http_respond_error(req, 400, "%s", err.msg);
        return;
    }
    infer_ctx_t *c = NULL;
    decode_job_t *job = NULL;
    kserve_request_t kr;
    memset(&kr, 0, sizeof kr);
    if (kserve_parse_request((const uint8_t *)req->body, req->body_len, hlen, &kr, &err)) {
        http_respond_error(req, status_for(err.status), "%s", err.msg);
        return;
    }
    const wenet_asr_t *asr = served_model_asr(m->served);
    const int rate = wenet_asr_sample_rate(asr);
    const kserve_tensor_t *wav = kserve_request_input(&kr, "WAV");
    const kserve_tensor_t *lens = kserve_request_input(&kr, "WAV_LENS");
    const kserve_tensor_t *audio = kserve_request_input(&kr, "AUDIO");
    int B = 0, rc = HARK_OK;
    const int maxb = m->cfg.max_batch_size;
    if (wav) {
        if (wav->dtype != KSERVE_FP32 || (maxb > 0 ? wav->ndim != 2 : wav->ndim != 1)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input 'WAV' must be FP32 with shape %s, got %s "
                         "with %d dimensions",
                         maxb > 0 ? "[batch, samples]" : "[samples]", kserve_dtype_name(wav->dtype),
                         wav->ndim);
            goto fail;
        }
        B = maxb > 0 ? (int)wav->shape[0] : 1;
        int64_t N = wav->shape[wav->ndim - 1];
        if (lens && (lens->dtype != KSERVE_INT32 || lens->count != B)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input 'WAV_LENS' must be INT32 with %d "
                         "elements (one per batch item)",
                         B);
            goto fail;
        }
        if (B < 1 || (maxb > 0 && B > maxb)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG, "batch size %d is outside [1, %d]", B,
                         maxb > 0 ? maxb : 1);
            goto fail;
        }
        if (!(c = ctx_new(l, req, m, B, OUT_KSERVE))) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        /* the samples are used where they are: in the body (the HTTP layer aligned them, see
         * infer_body_align) or, when unaligned (a compressed or chunked body), in one aligned
         * copy owned by the parsed request; then a finiteness check over the samples that count
         * (perf_analyzer sends random bytes) */
        const int32_t *lv = lens ? kserve_tensor_data(&kr, lens) : NULL;
        const float *all = kserve_tensor_data(&kr, wav);
        if ((lens && !lv) || !all) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int b = 0; b < B && !rc; b++) {
            int64_t n = lv ? lv[b] : N;
            if (n < 0 || n > N) {
                rc = err_set(&err, HARK_ERR_INVALID_ARG, "WAV_LENS[%d] = %lld is outside [0, %lld]",
                             b, (long long)n, (long long)N);
                break;
            }
            const float *x = c->pcm[b] = all + (size_t)b * (size_t)N;
            c->n[b] = (size_t)n;
            size_t i = kserve_f32_find_nonfinite(x, (size_t)n);
            if (i < (size_t)n)
                rc = err_set(&err, HARK_ERR_INVALID_ARG,
                             "tensor 'WAV': element %zu of item %d is %s; audio must be finite", i,
                             b, isnan(x[i]) ? "NaN" : "infinite");
        }
        if (rc)
            goto fail;
    } else if (audio) {
        if (audio->dtype != KSERVE_BYTES) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input 'AUDIO' must be BYTES (encoded audio files)");
            goto fail;
        }
        B = (int)audio->count;
        if (B < 1 || (maxb > 0 && B > maxb)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG, "batch size %d is outside [1, %d]", B,
                         maxb > 0 ? maxb : 1);
            goto fail;
        }
        if (!(c = ctx_new(l, req, m, B, OUT_KSERVE))) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (!(job = decode_job_new(B, rate, s->o.max_audio_seconds, "AUDIO"))) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        size_t pos = 0;
        for (int b = 0; b < B && kserve_bytes_next(audio, &pos, &job->src[b], &job->src_len[b]);
             b++)
            ;
    } else {
        rc = err_set(
            &err, HARK_ERR_INVALID_ARG,
            "expected inputs 'WAV' (FP32 [batch, samples]) and 'WAV_LENS' (INT32 [batch, 1]), "
            "or 'AUDIO' (BYTES [batch]); got %d other input(s)",
            kr.n_inputs);
        goto fail;
    }
    for (int i = 0; i < kr.n_outputs; i++)
        if (strcmp(kr.outputs[i].name, "TRANSCRIPTS") != 0) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "unknown output '%s' (this model has TRANSCRIPTS)", kr.outputs[i].name);
            goto fail;
        }
    wenet_decode_opts_t o;
    if ((rc = request_opts(m, &kr, &o, &err)))
        goto fail;
    c->kreq = kr; /* the context owns the parsed request now */
    if (job) {
        job->o = o;
        job->timeout_us = kr.has_timeout ? kr.timeout_us : 0;
        decode_then_submit(c, job);
        return;
    }
    submit_all(c, m->served, &o, kr.has_timeout ? kr.timeout_us : 0);
    return;
fail:
    if (job)
        decode_job_free(job);
    if (c) {
        c->kreq = kr;
        ctx_free(c);
    } else {
        kserve_request_free(&kr);
    }
    http_respond_error(req, status_for(rc ? rc : err.status), "%s", err.msg);
}

/* ---- OpenAI ----------------------------------------------------------------------------- */

static void handle_openai(const http_loop_t *l, http_req_t *req)
{
    server_t *s = l->s;
    hark_err_t err = {0};
    char boundary[80];
    multipart_t mp;
    if (multipart_boundary(http_req_header(req, "Content-Type"), boundary, sizeof boundary, &err) ||
        multipart_parse(req->body, req->body_len, boundary, &mp, &err)) {
        http_respond_error(req, 400, "%s", err.msg);
        return;
    }
    const multipart_part_t *file = multipart_get(&mp, "file");
    if (!file) {
        http_respond_error(req, 400, "missing the 'file' part");
        return;
    }
    char fmt[32] = "json", name[128] = "", lang[32] = "";
    const multipart_part_t *p;
    if ((p = multipart_get(&mp, "response_format")) && p->len)
        snprintf(fmt, sizeof fmt, "%.*s", (int)(p->len < 31 ? p->len : 31), p->data);
    if (strcmp(fmt, "json") && strcmp(fmt, "text") && strcmp(fmt, "srt") && strcmp(fmt, "vtt") &&
        strcmp(fmt, "verbose_json")) {
        http_respond_error(req, 400,
                           "response_format '%s' is not one of json, text, srt, vtt, "
                           "verbose_json",
                           fmt);
        return;
    }
    if ((p = multipart_get(&mp, "model")) && p->len)
        snprintf(name, sizeof name, "%.*s", (int)(p->len < 127 ? p->len : 127), p->data);
    if ((p = multipart_get(&mp, "language")) && p->len)
        snprintf(lang, sizeof lang, "%.*s", (int)(p->len < 31 ? p->len : 31), p->data);
    int want_words = 0;
    for (int i = 0; i < mp.n; i++)
        if (!strcmp(mp.parts[i].name, "timestamp_granularities[]") && mp.parts[i].len == 4 &&
            !memcmp(mp.parts[i].data, "word", 4))
            want_words = 1;
    pthread_rwlock_rdlock(&s->lock);
    model_entry_t *m = find_model(s, name, strlen(name));
    if (!m) { /* OpenAI clients name their own models ("whisper-1"): one ready model serves them */
        model_entry_t *only = NULL;
        int ready = 0;
        for (int i = 0; i < s->n_models; i++)
            if (s->models[i].state == M_READY) {
                only = &s->models[i];
                ready++;
            }
        if (ready == 1)
            m = only;
    }
    if (!m || m->state != M_READY) {
        pthread_rwlock_unlock(&s->lock);
        http_respond_error(req, m ? 503 : 404,
                           m ? "model '%s' is not ready" : "model '%s' not found", name);
        return;
    }
    const wenet_asr_t *asr = served_model_asr(m->served);
    infer_ctx_t *c = ctx_new(l, req, m, 1, OUT_OPENAI);
    decode_job_t *j = decode_job_new(1, wenet_asr_sample_rate(asr), s->o.max_audio_seconds, "file");
    if (j)
        j->o = m->defaults;
    pthread_rwlock_unlock(&s->lock);
    if (!c || !j) {
        if (c)
            ctx_free(c);
        if (j)
            decode_job_free(j);
        http_respond_error(req, 500, "out of memory");
        return;
    }
    j->src[0] = (const uint8_t *)file->data;
    j->src_len[0] = file->len;
    snprintf(c->format, sizeof c->format, "%s", fmt);
    snprintf(c->language, sizeof c->language, "%s", lang);
    c->want_words = want_words;
    decode_then_submit(c, j);
}

/* ---- routing ---------------------------------------------------------------------------- */

static char *model_metadata(const model_entry_t *m)
{
    const model_config_t *c = &m->cfg;
    kserve_tensor_meta_t in[8], out[8];
    int ni = 0, no = 0;
    for (int i = 0; i < c->n_inputs && ni < 8; i++)
        in[ni++] = (kserve_tensor_meta_t){c->inputs[i].name,
                                          model_data_type_kserve(c->inputs[i].data_type),
                                          c->inputs[i].ndims, c->inputs[i].dims};
    for (int i = 0; i < c->n_outputs && no < 8; i++)
        out[no++] = (kserve_tensor_meta_t){c->outputs[i].name,
                                           model_data_type_kserve(c->outputs[i].data_type),
                                           c->outputs[i].ndims, c->outputs[i].dims};
    const char *versions[1] = {m->version_str};
    kserve_model_meta_t mm = {.name = m->name,
                              .versions = versions,
                              .n_versions = 1,
                              .platform = c->platform && c->platform[0] ? c->platform : "hark",
                              .max_batch_size = c->max_batch_size,
                              .inputs = in,
                              .outputs = out,
                              .n_inputs = ni,
                              .n_outputs = no};
    return kserve_model_metadata_json(&mm);
}

static void fill_stats(const model_entry_t *m, kserve_model_stats_t *k, served_stats_t *st)
{
    memset(k, 0, sizeof *k);
    memset(st, 0, sizeof *st);
    if (m->served)
        served_model_stats(m->served, st);
    k->name = m->name;
    k->version = m->version_str;
    k->last_inference = st->last_inference_ms;
    k->inference_count = st->inference_count;
    k->execution_count = st->execution_count;
    k->success = (kserve_duration_t){st->success, st->request_ns};
    k->fail = (kserve_duration_t){st->failure, 0};
    k->queue = (kserve_duration_t){st->success + st->failure, st->queue_ns};
    k->compute_input = (kserve_duration_t){st->success, st->compute_input_ns};
    k->compute_infer = (kserve_duration_t){st->success, st->compute_infer_ns};
    k->compute_output = (kserve_duration_t){st->success, st->compute_output_ns};
}

typedef struct {
    server_t *s;
    http_req_t *req;
    model_entry_t *m;
    int load;
} repo_job_t;

static void *repo_thread(void *p)
{
    repo_job_t *j = p;
    hark_err_t err = {0};
    if (j->load) {
        if (load_model(j->s, j->m, &err))
            http_respond_error(j->req, status_for(err.status), "failed to load '%s': %s",
                               j->m->name, err.msg);
        else
            http_respond(j->req, 200, "application/json", "{}", 2);
    } else {
        unload_model(j->s, j->m);
        http_respond(j->req, 200, "application/json", "{}", 2);
    }
    hark_free(j);
    return NULL;
}

static void handle_repository(server_t *s, http_req_t *req)
{
    const char *seg = "";
    size_t len = segment(req->path, 2, &seg);
    if (len == 5 && !strncmp(seg, "index", 5)) {
        cJSON *arr = cJSON_CreateArray();
        pthread_rwlock_rdlock(&s->lock);
        for (int i = 0; i < s->n_models; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", s->models[i].name);
            cJSON_AddStringToObject(e, "version", s->models[i].version_str);
            cJSON_AddStringToObject(e, "state", state_names[s->models[i].state]);
            cJSON_AddStringToObject(e, "reason", s->models[i].reason);
            cJSON_AddItemToArray(arr, e);
        }
        pthread_rwlock_unlock(&s->lock);
        respond_cjson(req, 200, arr);
        return;
    }
    const char *name = "", *act = "";
    size_t nl = segment(req->path, 3, &name), al = segment(req->path, 4, &act);
    if (!(len == 6 && !strncmp(seg, "models", 6)) || !nl || !al) {
        http_respond_error(req, 404, "unknown repository endpoint %s", req->path);
        return;
    }
    pthread_rwlock_wrlock(&s->lock);
    model_entry_t *m = find_model(s, name, nl);
    if (!m && s->n_models < MAX_MODELS && nl < sizeof m->name) { /* a model added since start */
        char cfg[4400];
        snprintf(cfg, sizeof cfg, "%s/%.*s/config.pbtxt", s->o.model_repository, (int)nl, name);
        if (access(cfg, R_OK) == 0) {
            m = &s->models[s->n_models++];
            snprintf(m->name, sizeof m->name, "%.*s", (int)nl, name);
            snprintf(m->dir, sizeof m->dir, "%s/%.*s", s->o.model_repository, (int)nl, name);
            snprintf(m->version_str, sizeof m->version_str, "1");
        }
    }
    pthread_rwlock_unlock(&s->lock);
    int load = al == 4 && !strncmp(act, "load", 4), unload = al == 6 && !strncmp(act, "unload", 6);
    if (!m || (!load && !unload)) {
        if (m)
            http_respond_error(req, 404, "unknown repository action '%.*s'", (int)al, act);
        else
            http_respond_error(req, 404, "model '%.*s' not found in %s", (int)nl, name,
                               s->o.model_repository);
        return;
    }
    repo_job_t *j = hark_calloc(1, sizeof *j);
    pthread_t th;
    if (!j) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    *j = (repo_job_t){s, req, m, load};
    if (pthread_create(&th, NULL, repo_thread, j) != 0) {
        hark_free(j);
        http_respond_error(req, 500, "cannot start the %s", load ? "load" : "unload");
        return;
    }
    pthread_detach(th);
}

static void api_handler(http_req_t *req, void *user)
{
    const http_loop_t *l = user;
    server_t *s = l->s;
    const char *p = req->path;
    int get = req->method == HTTP_GET || req->method == HTTP_HEAD, post = req->method == HTTP_POST;
    if (!strcmp(p, "/v2/health/live")) {
        http_respond(req, 200, NULL, "", 0);
        return;
    }
    if (!strcmp(p, "/v2/health/ready")) {
        int ok = server_ready(s);
        http_respond(req, ok ? 200 : 503, NULL, "", 0);
        return;
    }
    if (!strcmp(p, "/v2") && get) {
        static const char *const ext[] = {"binary_tensor_data", "parameters",
                                          "statistics",         "model_configuration",
                                          "model_repository",   "schedule_policy"};
        respond_json(req, 200, kserve_server_metadata_json("hark", HARK_VERSION, ext, 6));
        return;
    }
    if (!strcmp(p, "/v1/models") && get) {
        cJSON *j = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(j, "data");
        cJSON_AddStringToObject(j, "object", "list");
        pthread_rwlock_rdlock(&s->lock);
        for (int i = 0; i < s->n_models; i++)
            if (s->models[i].state == M_READY) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "id", s->models[i].name);
                cJSON_AddStringToObject(e, "object", "model");
                cJSON_AddNumberToObject(e, "created", 0);
                cJSON_AddStringToObject(e, "owned_by", "hark");
                cJSON_AddItemToArray(d, e);
            }
        pthread_rwlock_unlock(&s->lock);
        respond_cjson(req, 200, j);
        return;
    }
    if (!strcmp(p, "/v1/audio/transcriptions")) {
        if (!post)
            http_respond_error(req, 405, "use POST");
        else
            handle_openai(l, req);
        return;
    }
    if (!strncmp(p, "/v2/repository/", 15)) {
        if (!post)
            http_respond_error(req, 405, "use POST");
        else
            handle_repository(s, req);
        return;
    }
    if (!strcmp(p, "/v2/models/stats") && get) {
        kserve_model_stats_t ks[MAX_MODELS];
        served_stats_t st;
        int n = 0;
        pthread_rwlock_rdlock(&s->lock);
        for (int i = 0; i < s->n_models; i++)
            if (s->models[i].state == M_READY)
                fill_stats(&s->models[i], &ks[n++], &st);
        respond_json(req, 200, kserve_stats_json(ks, n));
        pthread_rwlock_unlock(&s->lock);
        return;
    }
    const char *name = "";
    size_t nl = segment(p, 2, &name);
    if (strncmp(p, "/v2/models/", 11) != 0 || !nl) {
        http_respond_error(req, 404, "unknown endpoint %s %s", req->method_name, p);
        return;
    }
    /* /v2/models/<m>[/versions/<v>][/<action>] */
    int next = 3;
    const char *seg = "", *ver = NULL;
    size_t sl = segment(p, next, &seg), vl = 0;
    if (sl == 8 && !strncmp(seg, "versions", 8)) {
        vl = segment(p, next + 1, &ver);
        next += 2;
        sl = segment(p, next, &seg);
    }
    pthread_rwlock_rdlock(&s->lock);
    model_entry_t *m = find_model(s, name, nl);
    if (!m || (ver && (vl != strlen(m->version_str) || strncmp(ver, m->version_str, vl)))) {
        pthread_rwlock_unlock(&s->lock);
        http_respond_error(req, 404,
                           m ? "model '%.*s' has no version %.*s" : "model '%.*s' not found",
                           (int)nl, name, (int)vl, ver ? ver : "");
        return;
    }
    int ready = m->state == M_READY;
    if (!sl && get) { /* metadata */
        if (!m->has_cfg)
            http_respond_error(req, 400, "model '%s' is not loaded: %s", m->name, m->reason);
        else
            respond_json(req, 200, model_metadata(m));
    } else if (sl == 5 && !strncmp(seg, "ready", 5) && get) {
        http_respond(req, ready && served_model_ready(m->served) ? 200 : 400, NULL, "", 0);
    } else if (sl == 6 && !strncmp(seg, "config", 6) && get) {
        if (!m->has_cfg)
            http_respond_error(req, 400, "model '%s' is not loaded: %s", m->name, m->reason);
        else
            respond_json(req, 200, model_config_to_json(&m->cfg));
    } else if (sl == 5 && !strncmp(seg, "stats", 5) && get) {
        kserve_model_stats_t ks;
        served_stats_t st;
        fill_stats(m, &ks, &st);
        respond_json(req, 200, kserve_stats_json(&ks, 1));
    } else if (sl == 5 && !strncmp(seg, "infer", 5)) {
        if (!post)
            http_respond_error(req, 405, "use POST");
        else if (!ready || s->draining)
            http_respond_error(req, 503, "model '%s' is not ready (%s)", m->name,
                               s->draining ? "draining" : state_names[m->state]);
        else
            handle_infer(l, req, m);
    } else {
        http_respond_error(req, 404, "unknown endpoint %s %s", req->method_name, p);
    }
    pthread_rwlock_unlock(&s->lock);
}

static void metrics_handler(http_req_t *req, void *user)
{
    server_t *s = user;
    if (strcmp(req->path, "/metrics") != 0) {
        http_respond_error(req, 404, "metrics are at /metrics");
        return;
    }
    metrics_model_t mm[MAX_MODELS];
    int n = 0;
    pthread_rwlock_rdlock(&s->lock);
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].state == M_READY) {
            mm[n].name = s->models[i].name;
            mm[n].version = s->models[i].version_str;
            served_model_stats(s->models[i].served, &mm[n].stats);
            n++;
        }
    char *text;
    size_t len;
    int rc = metrics_render(mm, n, &text, &len);
    pthread_rwlock_unlock(&s->lock);
    if (rc)
        http_respond_error(req, 500, "out of memory");
    else
        http_respond_owned(req, 200, "text/plain; version=0.0.4", text, len, hark_free, text);
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static void begin_drain(server_t *s)
{
    if (s->draining)
        return;
    s->draining = 1;
    LOG_INFO("draining: no new connections, finishing in-flight requests (deadline %d ms)",
             s->o.drain_timeout_ms);
    for (int i = 0; i < s->n_loops; i++)
        if (s->hl[i].api)
            http_server_shutdown(s->hl[i].api, (unsigned)s->o.drain_timeout_ms);
    if (s->metrics)
        http_server_shutdown(s->metrics, (unsigned)s->o.drain_timeout_ms);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->stop_async, NULL);
}

static void on_signal(uv_signal_t *h, int sig)
{
    LOG_INFO("signal %d", sig);
    begin_drain(h->data);
}

static void on_stop(uv_async_t *h)
{
    begin_drain(h->data);
}

void server_stop(server_t *s)
{
    uv_async_send(&s->stop_async);
}

static void *startup_loads(void *p)
{
    server_t *s = p;
    hark_err_t err;
    for (int i = 0; i < s->n_models; i++) {
        memset(&err, 0, sizeof err);
        load_model(s, &s->models[i], &err);
    }
    s->loading = 0;
    LOG_INFO("startup: %d model(s) in the repository processed", s->n_models);
    return NULL;
}

static int default_http_threads(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > 0 ? (int)(cores / 4) : 1;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

static void *http_loop_main(void *p)
{
    http_loop_t *l = p;
    char name[16]; /* "http<N>"; the first loop is the main thread */
    snprintf(name, sizeof name, "http%d", (int)(l - l->s->hl));
    pthread_setname_np(pthread_self(), name);
    uv_run(l->loop, UV_RUN_DEFAULT); /* until its server has shut down */
    return NULL;
}

int server_create(const server_opts_t *o, server_t **out, hark_err_t *err)
{
    *out = NULL;
    server_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    s->o = *o;
    if (!s->o.host)
        s->o.host = "127.0.0.1";
    if (!s->o.max_body_bytes)
        s->o.max_body_bytes = 64u << 20;
    if (!s->o.drain_timeout_ms)
        s->o.drain_timeout_ms = 30000;
    if (!(s->o.max_audio_seconds > 0))
        s->o.max_audio_seconds = 60;
    if (s->o.http_threads <= 0) /* a loop per 4 cores, at most 4 */
        s->o.http_threads = default_http_threads();
    if (s->o.http_threads > MAX_HTTP_LOOPS)
        s->o.http_threads = MAX_HTTP_LOOPS;
    if (s->o.max_connections <= 0)
        s->o.max_connections = 1024;
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    int rc = scan_repository(s, err);
    if (rc)
        goto fail;
    uv_loop_init(&s->loop);
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_async_init(&s->loop, &s->stop_async, on_stop);
    s->stop_async.data = s;
    s->loop_init = 1;
    /* with a GPU, bodies are received into page-locked memory: an instance then copies a batch
     * of binary WAV tensors to the device straight from the bodies (no staging memcpy) */
    if (gpu_device_count() > 0 && !(s->bodies = pinned_pool_create(PINNED_BODY_BYTES))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* the API port on n loops: each takes its share of the connection limit */
    int n = s->o.http_threads, port = s->o.http_port;
    for (int i = 0; i < n; i++) {
        http_loop_t *l = &s->hl[i];
        l->s = s;
        l->loop = &s->loop;
        if (i > 0) {
            uv_loop_init(&l->own);
            l->own_init = 1;
            l->loop = &l->own;
        }
        s->n_loops = i + 1;
        http_server_opts_t ho = {.host = s->o.host,
                                 .port = port,
                                 .handler = api_handler,
                                 .user = l,
                                 .body_align = infer_body_align,
                                 .body_alloc = s->bodies ? pinned_body_alloc : NULL,
                                 .body_free = s->bodies ? pinned_body_free : NULL,
                                 .body_user = s->bodies,
                                 .max_body = s->o.max_body_bytes,
                                 .max_connections = (unsigned)((s->o.max_connections + n - 1) / n),
                                 .request_timeout_ms = (unsigned)s->o.request_timeout_ms,
                                 .reuse_port = n == 1   ? HTTP_REUSE_NONE
                                               : i == 0 ? HTTP_REUSE_FIRST
                                                        : HTTP_REUSE_JOIN};
        if ((rc = http_server_create(l->loop, &ho, &l->api, err)))
            goto fail;
        port = http_server_port(l->api); /* the others join the port the first one got */
    }
    if (s->o.metrics_port >= 0) {
        http_server_opts_t mo = {
            .host = s->o.host, .port = s->o.metrics_port, .handler = metrics_handler, .user = s};
        if ((rc = http_server_create(&s->loop, &mo, &s->metrics, err)))
            goto fail;
    }
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    *out = s;
    return HARK_OK;
fail:
    server_destroy(s);
    return rc;
}

int server_run(server_t *s)
{
    printf("hark serving %s: http://%s:%d (KServe v2, OpenAI /v1/audio/transcriptions)",
           s->o.model_repository, s->o.host, http_server_port(s->hl[0].api));
    if (s->metrics)
        printf(", metrics http://%s:%d/metrics", s->o.host, http_server_port(s->metrics));
    printf("\n");
    fflush(stdout);
    s->loading = 1;
    pthread_t th;
    int loader = pthread_create(&th, NULL, startup_loads, s) == 0;
    if (!loader)
        s->loading = 0;
    LOG_INFO("HTTP: %d event loop%s on port %d", s->n_loops, s->n_loops > 1 ? "s" : "",
             http_server_port(s->hl[0].api));
    for (int i = 1; i < s->n_loops; i++)
        if (pthread_create(&s->hl[i].th, NULL, http_loop_main, &s->hl[i]) == 0)
            s->hl[i].started = 1;
        else /* its share of the connections goes to the others */
            http_server_shutdown(s->hl[i].api, 0);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    for (int i = 1; i < s->n_loops; i++) /* their servers drain with the first one's */
        if (s->hl[i].started) {
            pthread_join(s->hl[i].th, NULL);
            s->hl[i].started = 0;
        }
    if (loader)
        pthread_join(th, NULL);
    for (int i = 0; i < s->n_models; i++)
        unload_model(s, &s->models[i]);
    LOG_INFO("stopped");
    return 0;
}

void server_destroy(server_t *s)
{
    if (!s)
        return;
    if (s->loop_init) {
        if (!s->draining) { /* created but never run: close the handles */
            s->draining = 1;
            for (int i = 0; i < s->n_loops; i++)
                if (s->hl[i].api)
                    http_server_shutdown(s->hl[i].api, 0);
            if (s->metrics)
                http_server_shutdown(s->metrics, 0);
            uv_close((uv_handle_t *)&s->sigint, NULL);
            uv_close((uv_handle_t *)&s->sigterm, NULL);
            uv_close((uv_handle_t *)&s->stop_async, NULL);
        }
        uv_run(&s->loop, UV_RUN_DEFAULT);
        for (int i = 0; i < s->n_loops; i++) {
            http_loop_t *l = &s->hl[i];
            if (l->own_init) /* a loop whose thread never ran closes its handles here */
                uv_run(&l->own, UV_RUN_DEFAULT);
            http_server_destroy(l->api);
            if (l->own_init)
                uv_loop_close(&l->own);
        }
        http_server_destroy(s->metrics);
        uv_loop_close(&s->loop);
    }
    for (int i = 0; i < s->n_models; i++) {
        served_model_destroy(s->models[i].served);
        model_config_free(&s->models[i].cfg);
    }
    pthread_rwlock_destroy(&s->lock);
    pinned_pool_destroy(s->bodies);
    hark_free(s);
}
