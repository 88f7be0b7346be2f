/* service.c — the KServe v2 operations over the model repository and the scheduler, shared by
 * every transport (HTTP/1.1, gRPC) and the OpenAI handler: health, metadata, config, statistics,
 * repository control, and inference with the offline-ASR contract (WAV + WAV_LENS or AUDIO in,
 * TRANSCRIPTS out) or one a model's family declares (family_io_t: its own audio / sample-count
 * input and text or frame-id output names). Tests: tests/server/test_server.py,
 * tests/server/test_grpc.py, tests/server/test_server_jasper.c (a family contract) */
#include "api/service.h"

#include "api/req_params.h"
#include "api/service_impl.h"
#include "api/service_tts.h"
#include "audio/audio.h"
#include "core/alloc.h"
#include "core/assert.h"
#include "core/clock.h"
#include "core/log.h"
#include "hark.h"
#include "model/silero/silero_cut.h"
#include "server/model_config.h"
#include "server/repository.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

int service_status_http(int rc)
{
    switch (rc) {
    case HARK_ERR_AGAIN:
    case HARK_ERR_CLOSED:
    case HARK_ERR_UNAVAILABLE:
        return 503;
    case HARK_ERR_TOO_LARGE:
        return 413;
    case HARK_ERR_EXHAUSTED:
        return 429;
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

int service_live(server_t *s)
{
    return 1;
}

int service_ready(server_t *s)
{
    if (server_draining(s) || server_loading(s))
        return 0;
    return server_options(s)->strict_readiness ? repository_all_ready(server_repository(s))
                                               : repository_healthy(server_repository(s));
}

int service_model_ready(server_t *s, const char *model, const char *version, hark_err_t *err)
{
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    repo_model_t *m = repository_find(r, model, strlen(model), version, err);
    int ok = !m ? HARK_ERR_NOT_FOUND : m->state == M_READY && served_model_ready(m->served);
    repository_unlock(r);
    return ok;
}

int service_server_metadata(server_t *s, char **json, hark_err_t *err)
{
    static const char *const ext[] = {"binary_tensor_data",   "parameters",       "statistics",
                                      "model_configuration",  "model_repository", "schedule_policy",
                                      "system_shared_memory", "logging",          "trace"};
    if (!(*json = kserve_server_metadata_json("hark", HARK_VERSION, ext, 9)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    return HARK_OK;
}

enum { DOC_METADATA, DOC_CONFIG, DOC_STATS };

static int model_doc(server_t *s, const char *model, const char *version, int what, char **json,
                     hark_err_t *err)
{
    *json = NULL;
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    int rc = HARK_OK;
    if (what == DOC_STATS && (!model || !model[0])) {
        *json = repository_stats_json(r, NULL);
        goto out;
    }
    repo_model_t *m =
        repository_find(r, model ? model : "", model ? strlen(model) : 0, version, err);
    if (!m) {
        rc = HARK_ERR_NOT_FOUND;
        goto out;
    }
    if (what != DOC_STATS && !m->has_cfg) {
        rc = err_set(err, HARK_ERR_UNAVAILABLE, "model '%s' is not loaded: %s", m->name, m->reason);
        goto out;
    }
    *json = what == DOC_METADATA ? repository_metadata_json(m)
            : what == DOC_CONFIG ? model_config_to_json(&m->cfg)
                                 : repository_stats_json(r, m);
out:
    repository_unlock(r);
    if (!rc && !*json)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    return rc;
}

int service_model_metadata(server_t *s, const char *model, const char *version, char **json,
                           hark_err_t *err)
{
    return model_doc(s, model, version, DOC_METADATA, json, err);
}

int service_model_config(server_t *s, const char *model, const char *version, char **json,
                         hark_err_t *err)
{
    return model_doc(s, model, version, DOC_CONFIG, json, err);
}

int service_model_stats(server_t *s, const char *model, const char *version, char **json,
                        hark_err_t *err)
{
    return model_doc(s, model, version, DOC_STATS, json, err);
}

int service_repository_index(server_t *s, int ready_only, char **json, hark_err_t *err)
{
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    *json = repository_index_json(r, ready_only);
    repository_unlock(r);
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "out of memory");
}

typedef struct {
    server_t *s;
    char model[128];
    int load;
    service_done_fn done;
    void *user;
} repo_job_t;

static void *repo_thread(void *p)
{
    repo_job_t *j = p;
    hark_err_t err = {0};
    repository_t *r = server_repository(j->s);
    int rc = j->load ? repository_load(r, j->model, &err) : repository_unload(r, j->model, &err);
    j->done(j->user, rc, rc ? err.msg : NULL);
    hark_free(j);
    return NULL;
}

void service_repository_load(server_t *s, const char *model, int load, service_done_fn done,
                             void *user)
{
    if (server_options(s)->model_control != MODEL_CONTROL_EXPLICIT) {
        /* Triton's answer in modes none and poll (UNAVAILABLE: HTTP 503, gRPC UNAVAILABLE) */
        done(user, HARK_ERR_UNAVAILABLE,
             "explicit model load / unload is not allowed if polling is enabled");
        return;
    }
    hark_err_t err = {0};
    if (repository_name_valid(model, model ? strlen(model) : 0, &err)) {
        done(user, err.status, err.msg);
        return;
    }
    repo_job_t *j = hark_calloc(1, sizeof *j);
    if (!j) {
        done(user, HARK_ERR_NOMEM, "out of memory");
        return;
    }
    *j = (repo_job_t){.s = s, .load = load, .done = done, .user = user};
    snprintf(j->model, sizeof j->model, "%s", model);
    pthread_t th;
    if (pthread_create(&th, NULL, repo_thread, j) != 0) {
        hark_free(j);
        done(user, HARK_ERR_INTERNAL, load ? "cannot start the load" : "cannot start the unload");
        return;
    }
    pthread_detach(th);
}

/* ---- inference ------------------------------------------------------------------------- */

typedef struct job job_t;
typedef struct longform longform_t;
typedef struct {
    served_request_t req; /* first */
    job_t *job;
    int index;
} job_item_t;

enum { JOB_KSERVE = 0, JOB_TRANSCRIBE = 1 };

/* ---- long-form requests: audio longer than the single-pass limit (--max-pass-seconds) is cut by
 * silero_cut into the model's vad_model's speech segments (silero-vad's rules, segments of at
 * most LF_VAD_MAX_S, as `hark transcribe --vad`), or without one into LF_WINDOW_S windows
 * overlapping by LF_OVERLAP_S; the pieces are kept as int16 (half of float; the audio decoded
 * from 16-bit files is exact) and queued up to 2 · max_batch_size pieces (at most 64, and at most
 * LF_QUEUED_S of audio) at a time, one request in the queue each (other requests batch in
 * between), as float only while queued. Windows are stitched at
 * the middle of each overlap: a word belongs to the window its midpoint falls in, by its times. */
#define LF_VAD_MAX_S 20.0
#define LF_WINDOW_S 30.0
#define LF_OVERLAP_S 2.0
#define LF_QUEUED_S 240.0 /* audio queued at a time, at most */

typedef struct {
    long long start, end; /* samples at the model's rate */
    int16_t *pcm;         /* (end - start) until queued */
    asr_result_t res;
} lf_piece_t;

struct longform {
    char vad_dir[4096]; /* the vad_model's directory; "": fixed windows */
    int vad_version;
    char vad_name[128];
    char vad_err[256]; /* the vad_model cannot serve (not ready, not a VAD): a long request fails */
    double pass_s;     /* the single-pass limit */
    lf_piece_t *p;     /* (n) in order */
    int n, cap;
    int next;      /* the first piece not queued yet */
    int max_win;   /* pieces queued at a time (the job's item arrays hold this many) */
    long long hop; /* windows: samples between window starts (0: VAD segments) */
    long long half_overlap;
    size_t n_samples;
    uv_async_t async; /* a window's last completion -> the loop */
    int async_live;
    service_segment_t *segs; /* (n_segs) the answer's segments */
    int n_segs;
};

/* One request of B utterances in flight: freed when the last item completes. */
struct job {
    server_t *s;
    int kind;
    service_infer_t in;       /* JOB_KSERVE: the caller's request (req taken) */
    service_transcribe_t tin; /* JOB_TRANSCRIBE */
    char model[128], version[16];
    int batch;
    job_item_t *items;
    void *opts;        /* the family's options, shared by the items */
    const float **pcm; /* (batch) samples: in the body / request (WAV), or in own[] */
    float **own;       /* (batch) decoded sample buffers (AUDIO, transcriptions), owned */
    size_t *n;
    asr_result_t *results;
    svc_tally_t t; /* the items' tally: the first failure is the job's */
    double duration;
    /* encoded inputs (decoded on the loop's thread pool) */
    uv_work_t work;
    const uint8_t **src;
    size_t *src_len;
    const char *what;
    int rate;
    uint64_t deadline_ns;
    req_params_t params; /* the request's options */
    int seq;             /* a chunk of a sequence (the model serves sequence_batching) */
    served_seq_ctl_t ctl;
    const family_io_t *io; /* the family's contract the request used; NULL: the generic one */
    int vad;               /* a VAD model: SEGMENTS out */
    int **segs;            /* (batch) vad: each item's segments, ms, start/end pairs */
    int *n_segs, *cap_segs;
    int frame_pad_id; /* FRAME_IDS outputs: pads shorter rows */
    int want_words;
    uint64_t input_ns; /* checking / converting the input tensors and decoding the audio files:
                        * each item's share goes to compute_input */
    longform_t *lf;    /* audio over the single-pass limit may be cut (ASR, one file) */
};

static void lf_closed(uv_handle_t *h)
{
    job_t *j = h->data;
    hark_free(j->lf);
    hark_free(j);
}

static void job_free(job_t *j)
{
    for (int i = 0; i < j->batch; i++) {
        if (j->own)
            hark_free(j->own[i]);
        if (j->results)
            asr_result_free(&j->results[i]);
    }
    req_params_free(&j->params);
    hark_free(j->pcm);
    hark_free(j->own);
    hark_free(j->n);
    hark_free(j->results);
    hark_free(j->items);
    hark_free(j->opts);
    hark_free(j->src);
    hark_free(j->src_len);
    if (j->kind == JOB_KSERVE) {
        kserve_request_free(j->in.req);
        if (j->in.body_free)
            j->in.body_free(j->in.body_user);
    }
    for (int i = 0; j->segs && i < j->batch; i++)
        hark_free(j->segs[i]);
    hark_free(j->segs);
    hark_free(j->n_segs);
    hark_free(j->cap_segs);
    svc_tally_destroy(&j->t);
    if (j->lf) {
        for (int i = 0; i < j->lf->n; i++) {
            hark_free(j->lf->p[i].pcm);
            asr_result_free(&j->lf->p[i].res);
        }
        hark_free(j->lf->p);
        for (int i = 0; i < j->lf->n_segs; i++)
            hark_free(j->lf->segs[i].text);
        hark_free(j->lf->segs);
        if (j->lf->async_live) { /* on the loop's thread: freed once the handle is closed */
            j->lf->async.data = j;
            uv_close((uv_handle_t *)&j->lf->async, lf_closed);
            return;
        }
        hark_free(j->lf);
    }
    hark_free(j);
}

static job_t *job_new(server_t *s, int kind, int batch)
{
    job_t *j = hark_calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->s = s;
    j->kind = kind;
    j->batch = batch;
    svc_tally_init(&j->t);
    j->items = hark_calloc((size_t)batch, sizeof *j->items);
    j->pcm = hark_calloc((size_t)batch, sizeof *j->pcm);
    j->own = hark_calloc((size_t)batch, sizeof *j->own);
    j->n = hark_calloc((size_t)batch, sizeof *j->n);
    j->results = hark_calloc((size_t)batch, sizeof *j->results);
    if (!j->items || !j->pcm || !j->own || !j->n || !j->results) {
        j->batch = 0;
        job_free(j);
        return NULL;
    }
    return j;
}

/* A FRAME_IDS contract's answer: INT32 [B, frames], shorter rows padded. Then frees. */
static void finish_frame_ids(job_t *j)
{
    int B = j->batch, F = 0;
    for (int i = 0; i < B; i++)
        if (j->results[i].n_frames > F)
            F = j->results[i].n_frames;
    int32_t *ids = hark_malloc(sizeof(int32_t) * ((size_t)B * F + 1));
    if (!ids) {
        j->in.done(j->in.user, HARK_ERR_NOMEM, "out of memory", j->model, j->version, NULL, 0);
    } else {
        for (int i = 0; i < B; i++)
            for (int f = 0; f < F; f++)
                ids[(size_t)i * F + f] = f < j->results[i].n_frames && j->results[i].frame_ids
                                             ? j->results[i].frame_ids[f]
                                             : j->frame_pad_id;
        int64_t shape[2] = {B, F};
        kserve_output_t out = {.name = j->io->output,
                               .dtype = KSERVE_INT32,
                               .ndim = 2,
                               .shape = shape,
                               .data = (const uint8_t *)ids,
                               .size = sizeof(int32_t) * (size_t)B * F};
        j->in.done(j->in.user, HARK_OK, NULL, j->model, j->version, &out, 1);
    }
    hark_free(ids);
    job_free(j);
}

/* A VAD model's answer: SEGMENTS INT32 [B, S, 2] (start and end ms of each speech segment; an
 * item with fewer than the most segments S is padded with -1). Then frees. */
static void finish_segments(job_t *j)
{
    int B = j->batch, S = 0;
    for (int i = 0; i < B; i++)
        S = j->n_segs[i] > S ? j->n_segs[i] : S;
    int32_t *v = hark_malloc(sizeof(int32_t) * ((size_t)B * S * 2 + 1));
    if (!v) {
        j->in.done(j->in.user, HARK_ERR_NOMEM, "out of memory", j->model, j->version, NULL, 0);
    } else {
        for (int i = 0; i < B; i++)
            for (int k = 0; k < 2 * S; k++)
                v[(size_t)i * S * 2 + k] = k < 2 * j->n_segs[i] ? j->segs[i][k] : -1;
        int64_t shape[3] = {B, S, 2};
        kserve_output_t out = {.name = "SEGMENTS",
                               .dtype = KSERVE_INT32,
                               .ndim = 3,
                               .shape = shape,
                               .data = (const uint8_t *)v,
                               .size = sizeof(int32_t) * (size_t)B * S * 2};
        j->in.done(j->in.user, HARK_OK, NULL, j->model, j->version, &out, 1);
    }
    hark_free(v);
    job_free(j);
}

/* The answer: TRANSCRIPTS [B, 1] (or the contract's output) for KServe, the whole result for a
 * transcription. Then frees. */
static void job_finish(job_t *j)
{
    if (j->kind == JOB_TRANSCRIBE) {
        if (j->t.status)
            j->tin.done(j->tin.user, j->t.status, j->t.error, NULL, 0, NULL, 0);
        else
            j->tin.done(j->tin.user, HARK_OK, NULL, &j->results[0], j->duration,
                        j->lf ? j->lf->segs : NULL, j->lf ? j->lf->n_segs : 0);
        job_free(j);
        return;
    }
    if (j->t.status) {
        j->in.done(j->in.user, j->t.status, j->t.error, j->model, j->version, NULL, 0);
        job_free(j);
        return;
    }
    int B = j->batch;
    if (j->in.asr && B == 1)
        j->in.asr(j->in.user, 0, &j->results[0], 0, j->results[0].duration_s);
    if (j->io && j->io->out == FAMILY_OUT_FRAME_IDS) {
        finish_frame_ids(j);
        return;
    }
    if (j->vad) {
        finish_segments(j);
        return;
    }
    const char **texts = hark_calloc((size_t)B, sizeof *texts);
    size_t *lens = hark_calloc((size_t)B, sizeof *lens);
    size_t packed_size = 0;
    uint8_t *packed = NULL;
    if (texts && lens) {
        for (int i = 0; i < B; i++) {
            texts[i] = j->results[i].best.text ? j->results[i].best.text : "";
            lens[i] = strlen(texts[i]);
        }
        packed = kserve_bytes_pack(texts, lens, B, &packed_size);
    }
    if (!packed) {
        j->in.done(j->in.user, HARK_ERR_NOMEM, "out of memory", j->model, j->version, NULL, 0);
    } else { /* a sequence's answers are [B], as WeNet's streaming client reads them */
        int64_t shape[2] = {B, 1};
        kserve_output_t out = {.name = j->io ? j->io->output : "TRANSCRIPTS",
                               .dtype = KSERVE_BYTES,
                               .ndim = j->seq ? 1 : 2,
                               .shape = shape,
                               .data = packed,
                               .size = packed_size};
        j->in.done(j->in.user, HARK_OK, NULL, j->model, j->version, &out, 1);
    }
    hark_free(packed);
    hark_free(texts);
    hark_free(lens);
    job_free(j);
}

static void job_fail(job_t *j, int rc, const char *msg)
{
    svc_tally_fail(&j->t, rc, msg);
    job_finish(j);
}

/* a segment an endpoint ended (a sequence's chunk of a caller that wants the results) */
static void item_segment(served_request_t *r, asr_result_t *res, double start_s, double end_s)
{
    job_t *j = ((job_item_t *)r)->job;
    j->in.asr(j->in.user, 1, res, start_s, end_s);
}

static void item_done(served_request_t *r, int status, const char *error, asr_result_t *res,
                      const served_timing_t *tm)
{
    job_item_t *it = (job_item_t *)r;
    job_t *j = it->job;
    if (res) /* its own slot; the tally's lock publishes it to the last completion */
        asr_result_take(&j->results[it->index], res);
    if (svc_tally_done(&j->t, 1, status, error)) {
        if (j->lf) /* a window of a long request: the loop queues the next one or answers */
            uv_async_send(&j->lf->async);
        else
            job_finish(j);
    }
}

/* ---- shared with service_tts.c (service_impl.h) --------------------------------------------- */

void svc_tally_init(svc_tally_t *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->lock, NULL);
}

void svc_tally_destroy(svc_tally_t *t)
{
    pthread_mutex_destroy(&t->lock);
}

int svc_tally_done(svc_tally_t *t, int n, int status, const char *error)
{
    pthread_mutex_lock(&t->lock);
    if (status && !t->status) {
        t->status = status;
        snprintf(t->error, sizeof t->error, "%s",
                 error && error[0] ? error : hark_status_str(status));
    }
    t->remaining -= n;
    int last = t->remaining == 0;
    pthread_mutex_unlock(&t->lock);
    return last;
}

void svc_tally_fail(svc_tally_t *t, int status, const char *error)
{
    t->status = status;
    snprintf(t->error, sizeof t->error, "%s", error && error[0] ? error : hark_status_str(status));
}

int svc_queue(server_t *s, const char *model, const char *version, const req_params_t *params,
              int n, const served_seq_ctl_t *ctl, svc_item_fn item, void *user, void **opts,
              hark_err_t *err)
{
    repository_t *r = server_repository(s);
    served_request_t *stack[16], **reqs = stack;
    int rc = HARK_OK;
    HARK_ASSERT(n >= 1 && (!ctl || n == 1));
    repository_rdlock(r);
    repo_model_t *m = repository_find(r, model, strlen(model), version, err);
    if (!m) {
        rc = HARK_ERR_NOT_FOUND;
    } else if (m->state != M_READY || server_draining(s)) {
        rc = err_set(err, HARK_ERR_UNAVAILABLE, "model '%s' is not ready (%s)", m->name,
                     server_draining(s) ? "draining" : repo_state_name(m->state));
    } else {
        const family_t *fam = served_model_family(m->served);
        family_params_t req = req_params_view(params);
        if (!(*opts = hark_calloc(1, fam->opts_size ? fam->opts_size : 1)))
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        else
            rc = served_model_parse_opts(m->served, &req, *opts, err);
        if (!rc && n > 16 && !(reqs = hark_malloc(sizeof *reqs * (size_t)n)))
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int i = 0; i < n && !rc; i++) {
            reqs[i] = item(user, i, *opts);
            reqs[i]->fi.opts = *opts;
        }
        /* all or none (one place in the queue); once queued the caller may be gone */
        if (!rc)
            rc = ctl ? served_model_submit_seq(m->served, reqs[0], ctl, err)
                     : served_model_submit_many(m->served, reqs, n, err);
        if (rc) /* refused (bad options, too long, queue full): a failure of the model's */
            served_model_count_failure(m->served);
    }
    repository_unlock(r);
    if (reqs != stack)
        hark_free(reqs);
    return rc;
}

/* a VAD item's speech segment (worker thread): kept in ms; out of memory fails the item */
static void item_speech(served_request_t *r, double start_s, double end_s)
{
    job_item_t *it = (job_item_t *)r;
    job_t *j = it->job;
    int i = it->index;
    if (j->n_segs[i] == j->cap_segs[i]) {
        int cap = j->cap_segs[i] ? 2 * j->cap_segs[i] : 16;
        int *g = hark_realloc(j->segs[i], sizeof(int) * 2 * (size_t)cap);
        if (!g)
            return; /* the segment is lost; counted below */
        j->segs[i] = g;
        j->cap_segs[i] = cap;
    }
    j->segs[i][2 * j->n_segs[i]] = (int)(start_s * 1000.0 + 0.5);
    j->segs[i][2 * j->n_segs[i] + 1] = (int)(end_s * 1000.0 + 0.5);
    j->n_segs[i]++;
}

/* request i of a recognition job */
static served_request_t *job_item(void *user, int i, void *opts)
{
    job_t *j = user;
    job_item_t *it = &j->items[i];
    it->job = j;
    it->index = i;
    it->req.fi.pcm = j->pcm[i];
    it->req.fi.n = j->n[i];
    it->req.fi.want_words = j->want_words;
    it->req.segment = j->kind == JOB_KSERVE && j->in.asr && j->batch == 1 ? item_segment : NULL;
    it->req.fi.want_frame_ids = j->io && j->io->out == FAMILY_OUT_FRAME_IDS;
    it->req.cancelled = j->kind == JOB_KSERVE ? j->in.cancelled : j->tin.cancelled;
    it->req.done = item_done;
    it->req.speech = j->vad ? item_speech : NULL;
    it->req.item.deadline_ns = j->deadline_ns;
    it->req.input_ns = j->input_ns / (uint64_t)(j->batch > 0 ? j->batch : 1);
    return &it->req;
}

/* Queues every item, all or none; the job is answered (and freed) by the last completion, or
 * here when none was queued. */
static void job_submit(job_t *j)
{
    hark_err_t err = {0};
    j->t.remaining = j->batch;
    int rc = svc_queue(j->s, j->model, j->version, &j->params, j->batch, j->seq ? &j->ctl : NULL,
                       job_item, j, &j->opts, &err);
    if (rc)
        job_fail(j, rc, err.msg);
}

/* A long-form plan for a request to ASR model m (under the repository lock): its vad_model's
 * directory, or windows. NULL when out of memory (then the audio gets one pass). */
static longform_t *lf_plan(server_t *s, repository_t *r, const repo_model_t *m)
{
    longform_t *lf = hark_calloc(1, sizeof *lf);
    if (!lf)
        return NULL;
    lf->pass_s = server_options(s)->max_pass_seconds;
    int maxb = m->cfg.max_batch_size > 0 ? m->cfg.max_batch_size : 1;
    lf->max_win = 2 * maxb < 64 ? 2 * maxb : 64;
    const char *vn = model_config_param(&m->cfg, "vad_model");
    if (!vn || !vn[0])
        return lf;
    snprintf(lf->vad_name, sizeof lf->vad_name, "%s", vn);
    hark_err_t e = {0};
    repo_model_t *v = repository_find(r, vn, strlen(vn), NULL, &e);
    if (!v || v->state != M_READY || !v->served)
        snprintf(lf->vad_err, sizeof lf->vad_err,
                 "model '%s': its vad_model '%s' is not a ready model of the repository", m->name,
                 vn);
    else if (strcmp(served_model_family(v->served)->name, "silero_vad") != 0)
        snprintf(lf->vad_err, sizeof lf->vad_err,
                 "model '%s': its vad_model '%s' is a '%s' model, not silero_vad", m->name, vn,
                 served_model_family(v->served)->name);
    else {
        snprintf(lf->vad_dir, sizeof lf->vad_dir, "%s", v->dir);
        lf->vad_version = v->version;
    }
    return lf;
}

/* ---- long-form (see longform_t) ------------------------------------------------------------ */

/* a piece from silero_cut (thread pool): kept as int16 */
static int lf_piece(void *user, long long start, long long end, const float *pcm, hark_err_t *err)
{
    longform_t *lf = user;
    if (lf->n == lf->cap) {
        int cap = lf->cap ? 2 * lf->cap : 64;
        lf_piece_t *p = hark_realloc(lf->p, sizeof *p * (size_t)cap);
        if (!p)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        lf->p = p;
        lf->cap = cap;
    }
    size_t n = (size_t)(end - start);
    int16_t *x = hark_malloc(sizeof *x * (n ? n : 1));
    if (!x)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) { /* k / 32768 back to k exactly; clamped */
        float v = pcm[i] * 32768.0f;
        x[i] = (int16_t)(v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : lrintf(v));
    }
    lf->p[lf->n++] = (lf_piece_t){.start = start, .end = end, .pcm = x};
    return HARK_OK;
}

/* cuts the file (thread pool): the vad_model's segments or windows, at the model's rate */
static int lf_cut(job_t *j, hark_err_t *err)
{
    longform_t *lf = j->lf;
    silero_vad_t *vad = NULL;
    audio_reader_t *rd = NULL;
    silero_cut_opts_t co = {.max_seconds = server_options(j->s)->max_audio_seconds};
    int rc = HARK_OK;
    if (lf->vad_err[0]) {
        rc = err_set(err, HARK_ERR_UNAVAILABLE, "%s", lf->vad_err);
        goto out;
    }
    if (lf->vad_dir[0]) {
        if ((rc = silero_vad_load(lf->vad_dir, lf->vad_version, &vad, err))) {
            err_prefix(err, rc, "vad_model '%s'", lf->vad_name);
            goto out;
        }
        silero_seg_default_opts(&co.seg);
        co.seg.max_speech_duration_s = lf->pass_s < LF_VAD_MAX_S ? lf->pass_s : LF_VAD_MAX_S;
        co.vad = vad;
    } else {
        co.window_s = lf->pass_s < LF_WINDOW_S ? lf->pass_s : LF_WINDOW_S;
        co.overlap_s = LF_OVERLAP_S < co.window_s / 4 ? LF_OVERLAP_S : co.window_s / 4;
        long long W = (long long)(co.window_s * j->rate + 0.5);
        lf->hop = W - (long long)(co.overlap_s * j->rate + 0.5);
        lf->half_overlap = (W - lf->hop) / 2;
    }
    if ((rc = audio_reader_open_memory(j->src[0], j->src_len[0], j->rate, &rd, err)))
        goto out;
    rc = silero_cut(rd, &co, lf_piece, NULL, lf, &lf->n_samples, err);
    if (rc == HARK_ERR_UNSUPPORTED && vad)
        err_prefix(err, rc, "vad_model '%s'", lf->vad_name);
out:
    audio_reader_close(rd);
    silero_vad_destroy(vad);
    return rc;
}

/* queues the next window of pieces (loop thread), as float while queued */
static void lf_submit(job_t *j)
{
    longform_t *lf = j->lf;
    int w = 0;
    /* at most LF_QUEUED_S of audio as float at a time (one piece at least) */
    long long samples = 0;
    while (lf->next + w < lf->n && w < lf->max_win &&
           (w == 0 || samples + (lf->p[lf->next + w].end - lf->p[lf->next + w].start) <=
                          (long long)(LF_QUEUED_S * j->rate))) {
        samples += lf->p[lf->next + w].end - lf->p[lf->next + w].start;
        w++;
    }
    for (int i = 0; i < w; i++) {
        lf_piece_t *p = &lf->p[lf->next + i];
        size_t n = (size_t)(p->end - p->start);
        float *x = hark_malloc(sizeof *x * (n ? n : 1));
        if (!x) {
            j->batch = i;
            job_fail(j, HARK_ERR_NOMEM, "out of memory");
            return;
        }
        for (size_t k = 0; k < n; k++)
            x[k] = p->pcm[k] / 32768.0f;
        hark_free(p->pcm);
        p->pcm = NULL;
        j->own[i] = x;
        j->pcm[i] = x;
        j->n[i] = n;
        memset(&j->results[i], 0, sizeof j->results[i]);
        memset(&j->items[i], 0, sizeof j->items[i]);
    }
    j->batch = w;
    lf->next += w;
    svc_tally_destroy(&j->t); /* a fresh tally per window; a failure ends the request */
    svc_tally_init(&j->t);
    job_submit(j);
}

static int lf_add_word(asr_result_t *o, int *cap, const asr_word_t *w, int off_ms)
{
    if (o->n_words == *cap) {
        int c = *cap ? 2 * *cap : 256;
        asr_word_t *p = hark_realloc(o->words, sizeof *p * (size_t)c);
        if (!p)
            return HARK_ERR_NOMEM;
        o->words = p;
        *cap = c;
    }
    char *t = hark_strdup(w->text ? w->text : "");
    if (!t)
        return HARK_ERR_NOMEM;
    o->words[o->n_words++] = (asr_word_t){t, w->start_ms + off_ms, w->end_ms + off_ms};
    return HARK_OK;
}

/* appends t to a growing string */
static int lf_append(char **s, size_t *len, size_t *cap, const char *t, int sep)
{
    size_t n = strlen(t);
    if (!n)
        return HARK_OK;
    if (*len + n + 2 > *cap) {
        size_t c = 2 * (*len + n + 2);
        char *p = hark_realloc(*s, c);
        if (!p)
            return HARK_ERR_NOMEM;
        *s = p;
        *cap = c;
    }
    if (*len && sep)
        (*s)[(*len)++] = ' ';
    memcpy(*s + *len, t, n + 1);
    *len += n;
    return HARK_OK;
}

/* the pieces' results into results[0] and the segments, in order (loop thread) */
static int lf_stitch(job_t *j)
{
    longform_t *lf = j->lf;
    asr_result_t *o = &j->results[0];
    size_t len = 0, cap = 0;
    int wcap = 0, rc = HARK_OK;
    char *text = hark_strdup(""), *seg = NULL;
    size_t slen = 0, scap = 0;
    if (!text || !(lf->segs = hark_calloc((size_t)lf->n + 1, sizeof *lf->segs)))
        rc = HARK_ERR_NOMEM;
    cap = 1;
    o->word_sep = 1;
    for (int i = 0; i < lf->n && !rc; i++) {
        const lf_piece_t *p = &lf->p[i];
        const asr_result_t *r = &p->res;
        int off_ms = (int)(p->start * 1000 / j->rate);
        double t0 = (double)p->start / j->rate, t1 = (double)p->end / j->rate;
        o->word_sep = r->word_sep;
        if (!lf->hop) { /* a VAD segment: all of it */
            const char *t = r->best.text ? r->best.text : "";
            rc = lf_append(&text, &len, &cap, t, r->word_sep);
            for (int k = 0; k < r->n_words && !rc; k++)
                rc = lf_add_word(o, &wcap, &r->words[k], off_ms);
            if (!rc && t[0] && !(seg = hark_strdup(t)))
                rc = HARK_ERR_NOMEM;
        } else { /* a window: the words whose midpoint is its own (the overlaps split halfway) */
            long long c0 = i ? p->start + lf->half_overlap : 0;
            long long c1 = i + 1 < lf->n ? lf->p[i + 1].start + lf->half_overlap : LLONG_MAX;
            t0 = (double)c0 / j->rate;
            t1 = c1 == LLONG_MAX ? t1 : (double)c1 / j->rate;
            if (r->n_words == 0 && r->best.text) /* no word times: the text as it is */
                rc = lf_append(&seg, &slen, &scap, r->best.text, r->word_sep);
            for (int k = 0; k < r->n_words && !rc; k++) {
                long long mid = p->start + (long long)(r->words[k].start_ms + r->words[k].end_ms) *
                                               j->rate / 2000;
                if (mid < c0 || mid >= c1)
                    continue;
                rc = lf_add_word(o, &wcap, &r->words[k], off_ms);
                if (!rc)
                    rc = lf_append(&seg, &slen, &scap, r->words[k].text, r->word_sep);
            }
            if (!rc && seg)
                rc = lf_append(&text, &len, &cap, seg, r->word_sep);
            slen = 0;
        }
        if (!rc && seg && seg[0]) {
            lf->segs[lf->n_segs++] = (service_segment_t){t0, t1, seg};
            seg = NULL;
            scap = 0;
        } else if (seg) {
            hark_free(seg);
            seg = NULL;
            scap = 0;
        }
    }
    hark_free(seg);
    o->best.text = text;
    o->duration_s = j->duration;
    return rc;
}

/* a window's last completion (loop thread): keep its results, queue the next or answer */
static void lf_window_done(uv_async_t *a)
{
    job_t *j = a->data;
    longform_t *lf = j->lf;
    int first = lf->next - j->batch;
    for (int i = 0; i < j->batch; i++) {
        asr_result_take(&lf->p[first + i].res, &j->results[i]);
        hark_free(j->own[i]);
        j->own[i] = NULL;
    }
    j->batch = 0;
    if (!j->t.status && lf->next < lf->n) {
        lf_submit(j);
        return;
    }
    j->batch = 1;
    if (!j->t.status && lf_stitch(j))
        svc_tally_fail(&j->t, HARK_ERR_NOMEM, "out of memory");
    job_finish(j);
}

/* after the cut (loop thread): the first window, or the answer for audio with no speech */
static void lf_start(job_t *j, uv_loop_t *loop)
{
    longform_t *lf = j->lf;
    j->duration = (double)lf->n_samples / j->rate;
    if (uv_async_init(loop, &lf->async, lf_window_done) != 0) {
        job_fail(j, HARK_ERR_INTERNAL, "cannot start a long request");
        return;
    }
    lf->async.data = j;
    lf->async_live = 1;
    if (lf->n == 0) {
        j->batch = 1;
        if (lf_stitch(j))
            svc_tally_fail(&j->t, HARK_ERR_NOMEM, "out of memory");
        job_finish(j);
        return;
    }
    /* the item arrays hold max_win pieces */
    size_t W = (size_t)lf->max_win;
    hark_free(j->items);
    hark_free(j->pcm);
    hark_free(j->own);
    hark_free(j->n);
    hark_free(j->results);
    j->items = hark_calloc(W, sizeof *j->items);
    j->pcm = hark_calloc(W, sizeof *j->pcm);
    j->own = hark_calloc(W, sizeof *j->own);
    j->n = hark_calloc(W, sizeof *j->n);
    j->results = hark_calloc(W, sizeof *j->results);
    if (!j->items || !j->pcm || !j->own || !j->n || !j->results) {
        j->batch = 0;
        job_fail(j, HARK_ERR_NOMEM, "out of memory");
        return;
    }
    lf_submit(j);
}

/* Encoded audio is decoded on libuv's thread pool, not on the loop. */
static void decode_work(uv_work_t *w)
{
    job_t *j = w->data;
    hark_err_t err = {0};
    /* one pass at most --max-pass-seconds (the instances refuse longer items anyway); a long
     * single file is cut instead (j->lf) */
    const server_opts_t *so = server_options(j->s);
    double max_seconds =
        so->max_pass_seconds < so->max_audio_seconds ? so->max_pass_seconds : so->max_audio_seconds;
    uint64_t t0 = clock_now_ns();
    for (int b = 0; b < j->batch && !j->t.status; b++) {
        audio_opts_t ao = {.target_rate = j->rate, .max_seconds = max_seconds};
        audio_t au;
        int rc = audio_decode_memory(j->src[b], j->src_len[b], &ao, &au, &err);
        if (rc == HARK_ERR_TOO_LARGE && j->lf) { /* longer than one pass: cut it */
            j->lf->n = 0;
            if (!(rc = lf_cut(j, &err)))
                return;
        } else if (j->lf) {
            hark_free(j->lf); /* one pass */
            j->lf = NULL;
        }
        if (!rc && au.n == 0 && !j->seq) { /* a valid header and no samples */
            hark_free(au.samples);
            rc = err_set(&err, HARK_ERR_INVALID_ARG, "no samples (empty audio)");
        }
        if (rc) {
            if (j->batch > 1)
                err_prefix(&err, rc, "%s[%d]", j->what, b);
            else
                err_prefix(&err, rc, "%s", j->what);
            j->t.status = rc;
            snprintf(j->t.error, sizeof j->t.error, "%s", err.msg);
            break;
        }
        j->pcm[b] = j->own[b] = au.samples; /* taken over; audio_t holds nothing else */
        j->n[b] = au.n;
    }
    if (!j->t.status)
        j->duration = j->rate > 0 ? (double)j->n[0] / j->rate : 0;
    j->input_ns += clock_now_ns() - t0;
}

/* A request refused before it was queued (its input did not pass): a failure in the model's
 * statistics, as Triton counts it. */
static void count_refused(server_t *s, const char *model, const char *version)
{
    repository_t *r = server_repository(s);
    hark_err_t e = {0};
    repository_rdlock(r);
    repo_model_t *m = repository_find(r, model, strlen(model), version, &e);
    if (m && m->state == M_READY && m->served)
        served_model_count_failure(m->served);
    repository_unlock(r);
}

static void decode_after(uv_work_t *w, int status)
{
    job_t *j = w->data;
    if (j->t.status || status) {
        if (!j->t.status) {
            job_fail(j, HARK_ERR_INTERNAL, "decoding was cancelled");
        } else {
            count_refused(j->s, j->model, j->version); /* audio that does not decode */
            job_finish(j);
        }
        return;
    }
    if (j->lf)
        lf_start(j, w->loop);
    else
        job_submit(j);
}

static void decode_then_submit(job_t *j, uv_loop_t *loop)
{
    j->work.data = j;
    if (!loop || uv_queue_work(loop, &j->work, decode_work, decode_after) != 0)
        job_fail(j, HARK_ERR_INTERNAL, "cannot queue the audio decoding");
}

static int alloc_src(job_t *j)
{
    j->src = hark_calloc((size_t)j->batch, sizeof *j->src);
    j->src_len = hark_calloc((size_t)j->batch, sizeof *j->src_len);
    return j->src && j->src_len;
}

static void infer_start(server_t *s, const service_infer_t *in);

void service_infer(server_t *s, const service_infer_t *in)
{
    service_infer_t w;
    hark_err_t err = {0};
    int rc = svc_shm_prepare(s, in, &w, &err);
    if (!rc) {
        infer_start(s, &w);
        return;
    }
    in->done(in->user, rc, err.msg, in->model ? in->model : "", "", NULL, 0);
    kserve_request_free(in->req);
    if (in->body_free)
        in->body_free(in->body_user);
}

static void infer_start(server_t *s, const service_infer_t *in)
{
    hark_err_t err = {0};
    kserve_request_t *kr = in->req;
    job_t *j = NULL;
    int rc = HARK_OK;
    char model[128], version[16];
    int maxb = 0, rate = 0, pad_id = 0, seq = 0, tts = 0, vad = 0;
    const family_io_t *fio = NULL; /* the family's extra contracts (static tables) */
    longform_t *plan = NULL;       /* an ASR model's long-form plan (AUDIO of one file) */
    int found = 0;                 /* the model is ready: a refusal from here is its failure */
    uint64_t t_in = clock_now_ns();
    if (!in->model || strlen(in->model) >= sizeof model ||
        (in->version && strlen(in->version) >= sizeof version)) {
        rc = err_set(&err, HARK_ERR_NOT_FOUND, "model '%s' not found", in->model ? in->model : "");
        goto fail;
    }
    /* what the contract needs of the model, under the lock for a moment */
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    repo_model_t *m = repository_find(r, in->model, strlen(in->model), in->version, &err);
    if (m && (m->state != M_READY || server_draining(s)))
        rc = err_set(&err, HARK_ERR_UNAVAILABLE, "model '%s' is not ready (%s)", m->name,
                     server_draining(s) ? "draining" : repo_state_name(m->state));
    else if (!m)
        rc = HARK_ERR_NOT_FOUND;
    if (!rc) {
        found = 1;
        snprintf(model, sizeof model, "%s", m->name);
        snprintf(version, sizeof version, "%s", m->version_str);
        maxb = m->cfg.max_batch_size;
        family_info_t fi;
        served_model_info(m->served, &fi);
        rate = fi.sample_rate;
        pad_id = fi.frame_pad_id;
        fio = served_model_family(m->served)->io;
        seq = served_model_sequential(m->served);
        tts = served_model_family(m->served)->task == FAMILY_TASK_TTS;
        vad = served_model_family(m->served)->task == FAMILY_TASK_VAD;
        if (served_model_family(m->served)->task == FAMILY_TASK_ASR && !seq)
            plan = lf_plan(s, r, m);
    }
    repository_unlock(r);
    if (rc)
        goto fail;
    if (tts) {
        service_tts_infer(s, in, model, version, maxb);
        return;
    }
    if (seq && !kr->has_sequence_id) {
        rc = err_set(&err, HARK_ERR_INVALID_ARG,
                     "model '%s' serves sequences (sequence_batching): the request needs "
                     "parameters sequence_id, with sequence_start on a sequence's first request "
                     "and sequence_end on its last",
                     model);
        goto fail;
    }
    const kserve_tensor_t *wav = kserve_request_input(kr, "WAV");
    const kserve_tensor_t *lens = kserve_request_input(kr, "WAV_LENS");
    const kserve_tensor_t *audio = kserve_request_input(kr, "AUDIO");
    const family_io_t *io = NULL; /* a family contract, when the request names its audio input */
    for (const family_io_t *c = fio; !wav && c && c->audio; c++)
        if (kserve_request_input(kr, c->audio)) {
            io = c;
            wav = kserve_request_input(kr, c->audio);
            lens = c->n_samples ? kserve_request_input(kr, c->n_samples) : NULL;
        }
    const char *wav_name = io ? io->audio : "WAV", *lens_name = io ? io->n_samples : "WAV_LENS";
    const char *out_name = io ? io->output : vad ? "SEGMENTS" : "TRANSCRIPTS";
    int B = 0;
    for (int i = 0; i < kr->n_outputs; i++)
        if (strcmp(kr->outputs[i].name, out_name) != 0) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG, "unknown output '%s' (this model has %s)",
                         kr->outputs[i].name, out_name);
            goto fail;
        }
    if (wav && audio) {
        rc = err_set(&err, HARK_ERR_INVALID_ARG,
                     "inputs '%s' and 'AUDIO' were both given: send samples ('%s') or encoded "
                     "files ('AUDIO'), not both",
                     wav_name, wav_name);
        goto fail;
    }
    for (int i = 0; (wav || audio) && i < kr->n_inputs; i++) { /* nothing is ignored */
        const kserve_tensor_t *t = &kr->inputs[i];
        if (t == wav || t == audio || (t == lens && wav))
            continue;
        if (audio && t == lens)
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input 'WAV_LENS' goes with 'WAV', not with 'AUDIO' (encoded files "
                         "carry their own length)");
        else if (audio)
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "unknown input '%s' (a request with 'AUDIO' has no other input)", t->name);
        else
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "unknown input '%s' (a request with '%s' has no other input%s%s%s)",
                         t->name, wav_name, lens_name ? " but '" : "", lens_name ? lens_name : "",
                         lens_name ? "'" : "");
        goto fail;
    }
    if (wav) {
        /* FP32, or FP16 (sherpa's Triton configs declare WAV TYPE_FP16; converted here) */
        int fp16 = wav->dtype == KSERVE_FP16;
        if ((wav->dtype != KSERVE_FP32 && !fp16) || (maxb > 0 ? wav->ndim != 2 : wav->ndim != 1)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input '%s' must be %s with shape %s, got %s with %d dimensions", wav_name,
                         "FP32 or FP16", maxb > 0 ? "[batch, samples]" : "[samples]",
                         kserve_dtype_name(wav->dtype), wav->ndim);
            goto fail;
        }
        B = maxb > 0 ? (int)wav->shape[0] : 1;
        int64_t N = wav->shape[wav->ndim - 1];
        if (lens && (lens->dtype != KSERVE_INT32 || lens->count != B)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "input '%s' must be INT32 with %d elements (one per batch item)",
                         lens_name, B);
            goto fail;
        }
        if (B < 1 || (maxb > 0 && B > maxb)) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG, "batch size %d is outside [1, %d]", B,
                         maxb > 0 ? maxb : 1);
            goto fail;
        }
        if (!(j = job_new(s, JOB_KSERVE, B))) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        j->in = *in;
        j->io = io;
        j->frame_pad_id = pad_id;
        /* the samples are used where they are (in the body, aligned by the transport, or one
         * aligned copy owned by the parsed request; FP16 converted into one buffer the job
         * owns); then a finiteness check over the samples that count (perf_analyzer sends
         * random bytes) */
        const int32_t *lv = lens ? kserve_tensor_data(kr, lens) : NULL;
        const float *all = NULL;
        if (fp16) {
            if ((j->own[0] = hark_malloc(sizeof(float) * ((size_t)wav->count + 1))) &&
                (rc = kserve_tensor_to_f32(wav, j->own[0], &err)))
                goto fail;
            all = j->own[0];
        } else {
            all = kserve_tensor_data(kr, wav);
        }
        if ((lens && !lv) || !all) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int b = 0; b < B && !rc; b++) {
            int64_t n = lv ? lv[b] : N;
            if (n < 0 || n > N) {
                rc = err_set(&err, HARK_ERR_INVALID_ARG, "%s[%d] = %lld is outside [0, %lld]",
                             lens_name, b, (long long)n, (long long)N);
                break;
            }
            if (n == 0 && !seq) { /* (a sequence may end with an empty chunk) */
                rc = err_set(&err, HARK_ERR_INVALID_ARG,
                             "input '%s': item %d has no samples (empty audio)", wav_name, b);
                break;
            }
            if (rate > 0 && (double)n > server_options(s)->max_audio_seconds * rate) {
                rc = err_set(&err, HARK_ERR_TOO_LARGE,
                             "input '%s': item %d is %.1f s of audio, longer than %g s (the "
                             "server's --max-audio-seconds)",
                             wav_name, b, (double)n / rate, server_options(s)->max_audio_seconds);
                break;
            }
            const float *x = j->pcm[b] = all + (size_t)b * (size_t)N;
            j->n[b] = (size_t)n;
            size_t i = kserve_f32_find_nonfinite(x, (size_t)n);
            if (i < (size_t)n)
                rc = err_set(&err, HARK_ERR_INVALID_ARG,
                             "tensor '%s': element %zu of item %d is %s; audio must be finite",
                             wav_name, i, b, isnan(x[i]) ? "NaN" : "infinite");
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
        if (!(j = job_new(s, JOB_KSERVE, B)) || !alloc_src(j)) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        j->in = *in;
        size_t pos = 0;
        for (int b = 0; b < B && kserve_bytes_next(audio, &pos, &j->src[b], &j->src_len[b]); b++)
            ;
        j->what = "AUDIO";
        if (B == 1) { /* one file may be longer than one pass */
            j->lf = plan;
            plan = NULL;
        }
    } else {
        char also[160] = "";
        for (const family_io_t *c = fio; c && c->audio; c++)
            snprintf(also + strlen(also), sizeof also - strlen(also), ", or '%s'%s%s%s", c->audio,
                     c->n_samples ? " and '" : "", c->n_samples ? c->n_samples : "",
                     c->n_samples ? "'" : "");
        rc = err_set(&err, HARK_ERR_INVALID_ARG,
                     "expected inputs 'WAV' (FP32 [batch, samples]) and 'WAV_LENS' (INT32 "
                     "[batch, 1]), or 'AUDIO' (BYTES [batch])%s; got %d other input(s)",
                     also, kr->n_inputs);
        goto fail;
    }
    snprintf(j->model, sizeof j->model, "%s", model);
    snprintf(j->version, sizeof j->version, "%s", version);
    j->rate = rate;
    if (vad) {
        j->vad = 1;
        j->segs = hark_calloc((size_t)B, sizeof *j->segs);
        j->n_segs = hark_calloc((size_t)B, sizeof *j->n_segs);
        j->cap_segs = hark_calloc((size_t)B, sizeof *j->cap_segs);
        if (!j->segs || !j->n_segs || !j->cap_segs) {
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (seq) {
        if (B != 1) {
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "a sequence request carries one chunk: batch size 1, got %d", B);
            goto fail;
        }
        j->seq = 1;
        j->ctl = (served_seq_ctl_t){.id = kr->sequence_id,
                                    .id_str = kr->sequence_id_str,
                                    .start = kr->sequence_start,
                                    .end = kr->sequence_end,
                                    .owner = in->owner};
    }
    uint64_t timeout_us = kr->has_timeout ? kr->timeout_us : 0;
    j->deadline_ns = timeout_us ? clock_now_ns() + timeout_us * 1000 : 0;
    if (in->deadline_ns && (!j->deadline_ns || in->deadline_ns < j->deadline_ns))
        j->deadline_ns = in->deadline_ns;
    if ((rc = req_params_from_json(&j->params, kr->parameters, &err)))
        goto fail;
    hark_free(plan);
    j->want_words = in->want_words || (j->lf && !j->lf->vad_dir[0]); /* windows: by words */
    j->input_ns = clock_now_ns() - t_in; /* the tensors checked (FP16 converted); files: + decode */
    if (j->src)
        decode_then_submit(j, in->loop);
    else
        job_submit(j);
    return;
fail:
    if (found && !tts)
        count_refused(s, model, version);
    hark_free(plan);
    if (j) { /* the job owns the request now: the answer, then job_free releases it */
        job_fail(j, rc ? rc : err.status, err.msg);
        return;
    }
    in->done(in->user, rc ? rc : err.status, err.msg, in->model ? in->model : "", "", NULL, 0);
    kserve_request_free(kr);
    if (in->body_free)
        in->body_free(in->body_user);
}

void service_transcribe(server_t *s, const service_transcribe_t *in)
{
    hark_err_t err = {0};
    repository_t *r = server_repository(s);
    char model[128];
    int rate = 0;
    int rc = HARK_OK;
    longform_t *plan = NULL;
    repository_rdlock(r);
    const char *name = in->model ? in->model : "";
    repo_model_t *m = repository_find(r, name, strlen(name), NULL, &err);
    if (!m) /* OpenAI clients name their own models ("whisper-1"): one ready model serves them */
        m = repository_only_ready(r, FAMILY_TASK_ASR);
    if (!m)
        rc = err_set(&err, HARK_ERR_NOT_FOUND, "model '%s' not found", name);
    else if (m->state != M_READY || server_draining(s))
        rc = err_set(&err, HARK_ERR_UNAVAILABLE, "model '%s' is not ready", m->name);
    else if (served_model_family(m->served)->task != FAMILY_TASK_ASR)
        rc = err_set(&err, HARK_ERR_INVALID_ARG, "model '%s' is a %s model, not a recognizer",
                     m->name, family_task_name(served_model_family(m->served)->task));
    if (!rc) {
        snprintf(model, sizeof model, "%s", m->name);
        family_info_t fi;
        served_model_info(m->served, &fi);
        rate = fi.sample_rate;
        if (!served_model_sequential(m->served))
            plan = lf_plan(s, r, m);
    }
    repository_unlock(r);
    job_t *j = NULL;
    if (!rc && (!(j = job_new(s, JOB_TRANSCRIBE, 1)) || !alloc_src(j)))
        rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
    if (rc) {
        if (j)
            job_free(j);
        hark_free(plan);
        in->done(in->user, rc, err.msg, NULL, 0, NULL, 0);
        return;
    }
    j->tin = *in;
    j->lf = plan;
    j->want_words = in->want_words || (plan && !plan->vad_dir[0]); /* windows: stitched by words */
    snprintf(j->model, sizeof j->model, "%s", model);
    j->rate = rate;
    j->src[0] = in->audio;
    j->src_len[0] = in->len;
    j->what = "file";
    if ((rc = req_params_copy(&j->params, &in->params, &err))) {
        job_fail(j, rc, err.msg);
        return;
    }
    decode_then_submit(j, in->loop);
}

void service_asr_language(server_t *s, const char *model, char *out, size_t n)
{
    repository_t *r = server_repository(s);
    hark_err_t err = {0};
    const char *name = model ? model : "";
    out[0] = 0;
    repository_rdlock(r);
    repo_model_t *m = repository_find(r, name, strlen(name), NULL, &err);
    if (!m) /* as service_transcribe: one ready recognizer serves any name */
        m = repository_only_ready(r, FAMILY_TASK_ASR);
    const char *lang = m && m->has_cfg ? model_config_param(&m->cfg, "language") : NULL;
    if (lang)
        snprintf(out, n, "%s", lang);
    repository_unlock(r);
}

uint64_t service_new_owner(void)
{
    static atomic_uint_fast64_t next = 1;
    return atomic_fetch_add(&next, 1);
}

void service_abandon(server_t *s, uint64_t owner)
{
    if (!owner)
        return;
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    for (int i = 0; i < repository_count(r); i++) {
        repo_model_t *m = repository_at(r, i);
        if (m->state == M_READY && m->served)
            served_model_abandon(m->served, owner);
    }
    repository_unlock(r);
}

int service_stream_model(server_t *s, char *name, size_t cap, hark_err_t *err)
{
    repository_t *r = server_repository(s);
    int rc = err_set(err, HARK_ERR_NOT_FOUND,
                     "no model serving sequences (sequence_batching) "
                     "is ready");
    repository_rdlock(r);
    for (int i = 0; i < repository_count(r); i++) {
        repo_model_t *m = repository_at(r, i);
        if (m->state == M_READY && m->served && served_model_sequential(m->served)) {
            snprintf(name, cap, "%s", m->name);
            rc = HARK_OK;
            break;
        }
    }
    repository_unlock(r);
    return rc;
}
