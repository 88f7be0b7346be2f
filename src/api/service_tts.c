/* service_tts.c — speech synthesis through the scheduler: the seed's KServe contract (INPUT text
 * -> OUTPUT samples + OUTPUT_LENGTH, every item of a request queued on its own so the dynamic
 * batcher mixes requests) and OpenAI's speech, whose audio goes to the caller chunk by chunk as
 * the family emits it. Tests: tests/server/test_server_tts.py */
#include "api/service_tts.h"

#include "api/req_params.h"
#include "api/service_impl.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "server/repository.h"
#include "server/server.h"

#include <stdio.h>
#include <string.h>

#define MAX_TEXT_BYTES 16384 /* one item's text (OpenAI's limit is 4096 characters) */

typedef struct tts_job tts_job_t;
typedef struct {
    served_request_t req; /* first */
    tts_job_t *job;
    float *pcm; /* KServe: the item's audio, gathered */
    size_t n, cap;
    int failed; /* out of memory gathering */
} tts_item_t;

struct tts_job {
    server_t *s;
    int speak;           /* 1: service_speak (audio streamed to sin), 0: KServe */
    service_infer_t in;  /* KServe: the caller's request (req taken) */
    service_speak_t sin; /* speak */
    char model[128], version[16];
    int batch;
    tts_item_t *items;
    char **texts; /* (batch) NUL-terminated copies */
    void *opts;
    req_params_t params;
    uint64_t deadline_ns;
    svc_tally_t t; /* the items' tally: the first failure is the job's */
    int rate;
};

static void job_free(tts_job_t *j)
{
    for (int i = 0; i < j->batch; i++) {
        if (j->items)
            hark_free(j->items[i].pcm);
        if (j->texts)
            hark_free(j->texts[i]);
    }
    hark_free(j->items);
    hark_free(j->texts);
    hark_free(j->opts);
    req_params_free(&j->params);
    if (!j->speak) {
        kserve_request_free(j->in.req);
        if (j->in.body_free)
            j->in.body_free(j->in.body_user);
    }
    svc_tally_destroy(&j->t);
    hark_free(j);
}

static tts_job_t *job_new(server_t *s, int speak, int batch)
{
    tts_job_t *j = hark_calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->s = s;
    j->speak = speak;
    j->batch = batch;
    svc_tally_init(&j->t);
    j->items = hark_calloc((size_t)batch, sizeof *j->items);
    j->texts = hark_calloc((size_t)batch, sizeof *j->texts);
    if (!j->items || !j->texts) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* KServe: OUTPUT [B, longest] (zero-padded) + OUTPUT_LENGTH [B, 1] */
static void answer_kserve(tts_job_t *j)
{
    int B = j->batch;
    size_t L = 0;
    for (int i = 0; i < B; i++)
        L = j->items[i].n > L ? j->items[i].n : L;
    float *audio = hark_calloc((size_t)B * L + 1, sizeof *audio);
    int32_t *lens = hark_calloc((size_t)B, sizeof *lens);
    if (!audio || !lens || L > INT32_MAX) {
        j->in.done(j->in.user, HARK_ERR_NOMEM, "out of memory for the audio", j->model, j->version,
                   NULL, 0);
    } else {
        for (int i = 0; i < B; i++) {
            if (j->items[i].n)
                memcpy(audio + (size_t)i * L, j->items[i].pcm, j->items[i].n * sizeof *audio);
            lens[i] = (int32_t)j->items[i].n;
        }
        int64_t s_audio[2] = {B, (int64_t)L}, s_lens[2] = {B, 1};
        kserve_output_t outs[2] = {
            {.name = "OUTPUT",
             .dtype = KSERVE_FP32,
             .ndim = 2,
             .shape = s_audio,
             .data = (const uint8_t *)audio,
             .size = sizeof *audio * (size_t)B * L},
            {.name = "OUTPUT_LENGTH",
             .dtype = KSERVE_INT32,
             .ndim = 2,
             .shape = s_lens,
             .data = (const uint8_t *)lens,
             .size = sizeof *lens * (size_t)B},
        };
        j->in.done(j->in.user, HARK_OK, NULL, j->model, j->version, outs, 2);
    }
    hark_free(audio);
    hark_free(lens);
}

static void job_finish(tts_job_t *j)
{
    if (j->speak)
        j->sin.done(j->sin.user, j->t.status, j->t.status ? j->t.error : NULL);
    else if (j->t.status)
        j->in.done(j->in.user, j->t.status, j->t.error, j->model, j->version, NULL, 0);
    else
        answer_kserve(j);
    job_free(j);
}

static void job_fail(tts_job_t *j, int rc, const char *msg)
{
    svc_tally_fail(&j->t, rc, msg);
    job_finish(j);
}

static void item_audio(served_request_t *r, const float *pcm, size_t n, int rate)
{
    tts_item_t *it = (tts_item_t *)r;
    tts_job_t *j = it->job;
    j->rate = rate;
    if (j->speak) {
        j->sin.audio(j->sin.user, pcm, n, rate);
        return;
    }
    if (it->failed)
        return;
    if (it->n + n > it->cap) {
        size_t cap = it->cap ? it->cap : 65536;
        while (cap < it->n + n)
            cap *= 2;
        float *b = hark_realloc(it->pcm, cap * sizeof *b);
        if (!b) {
            it->failed = 1;
            return;
        }
        it->pcm = b;
        it->cap = cap;
    }
    memcpy(it->pcm + it->n, pcm, n * sizeof *pcm);
    it->n += n;
}

static void item_done(served_request_t *r, int status, const char *error, asr_result_t *res,
                      const served_timing_t *tm)
{
    tts_item_t *it = (tts_item_t *)r;
    tts_job_t *j = it->job;
    if (!status && it->failed) {
        status = HARK_ERR_NOMEM;
        error = "out of memory gathering the audio";
    }
    if (svc_tally_done(&j->t, 1, status, error))
        job_finish(j);
}

/* item i of a synthesis job */
static served_request_t *tts_item(void *user, int i, void *opts)
{
    tts_job_t *j = user;
    tts_item_t *it = &j->items[i];
    it->job = j;
    it->req.fi.text = j->texts[i];
    it->req.cancelled = j->speak ? j->sin.cancelled : j->in.cancelled;
    it->req.audio = item_audio;
    it->req.done = item_done;
    it->req.item.deadline_ns = j->deadline_ns;
    return &it->req;
}

/* Queues every item, all or none; answered by the last completion, or here when none was
 * queued. */
static void job_submit(tts_job_t *j)
{
    hark_err_t err = {0};
    j->t.remaining = j->batch;
    int rc = svc_queue(j->s, j->model, j->version, &j->params, j->batch, NULL, tts_item, j,
                       &j->opts, &err);
    if (rc)
        job_fail(j, rc, err.msg);
}

/* a NUL-terminated copy of one text, refused when too long or holding a NUL */
static int take_text(tts_job_t *j, int i, const uint8_t *p, size_t len, const char *what,
                     hark_err_t *err)
{
    if (len > MAX_TEXT_BYTES)
        return err_set(err, HARK_ERR_TOO_LARGE, "%s: %zu bytes of text; at most %d", what, len,
                       MAX_TEXT_BYTES);
    if (memchr(p, 0, len))
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: the text holds a NUL byte", what);
    if (!(j->texts[i] = hark_malloc(len + 1)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    memcpy(j->texts[i], p, len);
    j->texts[i][len] = 0;
    return HARK_OK;
}

void service_tts_infer(server_t *s, const service_infer_t *in, const char *model,
                       const char *version, int max_batch)
{
    hark_err_t err = {0};
    kserve_request_t *kr = in->req;
    tts_job_t *j = NULL;
    int rc = HARK_OK;
    for (int i = 0; i < kr->n_outputs && !rc; i++)
        if (strcmp(kr->outputs[i].name, "OUTPUT") && strcmp(kr->outputs[i].name, "OUTPUT_LENGTH"))
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "unknown output '%s' (this model has OUTPUT and OUTPUT_LENGTH)",
                         kr->outputs[i].name);
    const kserve_tensor_t *t = rc ? NULL : kserve_request_input(kr, "INPUT");
    if (!rc && (!t || t->dtype != KSERVE_BYTES || kr->n_inputs != 1))
        rc = err_set(&err, HARK_ERR_INVALID_ARG,
                     "model '%s' synthesizes speech: it takes one input, 'INPUT' (BYTES, one "
                     "UTF-8 text per batch item)%s",
                     model, t && t->dtype != KSERVE_BYTES ? "; INPUT is not BYTES" : "");
    int B = rc ? 0 : (int)t->count, cap = max_batch > 0 ? max_batch : 1;
    if (!rc && (B < 1 || B > cap))
        rc = err_set(&err, HARK_ERR_INVALID_ARG, "batch size %d is outside [1, %d]", B, cap);
    if (!rc && !(j = job_new(s, 0, B)))
        rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
    if (rc) {
        in->done(in->user, rc, err.msg, model, version, NULL, 0);
        kserve_request_free(kr);
        if (in->body_free)
            in->body_free(in->body_user);
        return;
    }
    j->in = *in; /* the job owns the request from here */
    snprintf(j->model, sizeof j->model, "%s", model);
    snprintf(j->version, sizeof j->version, "%s", version);
    size_t pos = 0;
    const uint8_t *p;
    size_t len;
    for (int b = 0; b < B && !rc && kserve_bytes_next(t, &pos, &p, &len); b++) {
        char what[32];
        snprintf(what, sizeof what, B > 1 ? "INPUT[%d]" : "INPUT", b);
        rc = take_text(j, b, p, len, what, &err);
    }
    uint64_t timeout_us = kr->has_timeout ? kr->timeout_us : 0;
    j->deadline_ns = timeout_us ? clock_now_ns() + timeout_us * 1000 : 0;
    if (in->deadline_ns && (!j->deadline_ns || in->deadline_ns < j->deadline_ns))
        j->deadline_ns = in->deadline_ns;
    if (!rc)
        rc = req_params_from_json(&j->params, kr->parameters, &err);
    if (rc) {
        job_fail(j, rc, err.msg);
        return;
    }
    job_submit(j);
}

void service_speak(server_t *s, const service_speak_t *in)
{
    hark_err_t err = {0};
    repository_t *r = server_repository(s);
    char model[128] = "", version[16] = "";
    int rc = HARK_OK;
    repository_rdlock(r);
    const char *name = in->model ? in->model : "";
    repo_model_t *m = repository_find(r, name, strlen(name), NULL, &err);
    if (!m) /* OpenAI clients name their own models ("tts-1"): one ready TTS model serves them */
        m = repository_only_ready(r, FAMILY_TASK_TTS);
    if (!m)
        rc = err_set(&err, HARK_ERR_NOT_FOUND,
                     "model '%s' not found (and no single TTS model is "
                     "ready to stand in for it)",
                     name);
    else if (m->state != M_READY || server_draining(s))
        rc = err_set(&err, HARK_ERR_UNAVAILABLE, "model '%s' is not ready", m->name);
    else if (served_model_family(m->served)->task != FAMILY_TASK_TTS)
        rc = err_set(&err, HARK_ERR_INVALID_ARG, "model '%s' is a %s model, not a TTS model",
                     m->name, family_task_name(served_model_family(m->served)->task));
    if (!rc) {
        snprintf(model, sizeof model, "%s", m->name);
        snprintf(version, sizeof version, "%s", m->version_str);
    }
    repository_unlock(r);
    tts_job_t *j = NULL;
    if (!rc && !(j = job_new(s, 1, 1)))
        rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
    if (rc) {
        in->done(in->user, rc, err.msg);
        return;
    }
    j->sin = *in;
    snprintf(j->model, sizeof j->model, "%s", model);
    snprintf(j->version, sizeof j->version, "%s", version);
    const char *text = in->text ? in->text : "";
    if ((rc = take_text(j, 0, (const uint8_t *)text, strlen(text), "input", &err)) ||
        (rc = req_params_copy(&j->params, &in->params, &err))) {
        job_fail(j, rc, err.msg);
        return;
    }
    job_submit(j);
}
