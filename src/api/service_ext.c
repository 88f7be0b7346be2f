/* service_ext.c — Triton's protocol extensions that perf_analyzer and tritonclient use, for
 * every transport: logging (hark's logger, core/log.h), trace settings (kept and reported; hark
 * writes no traces), and system shared memory (server/shm.h): the regions' register / status /
 * unregister, and infer requests whose inputs are read from regions and whose outputs are
 * written into them. Tests: tests/server/test_triton_ext.py (HTTP and gRPC) */
#include "api/service.h"

#include "api/service_impl.h"
#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"
#include "server/server.h"
#include "server/shm.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- trace settings ------------------------------------------------------------------------ */
enum { TRACE_TIMESTAMPS = 1, TRACE_TENSORS = 2 };
enum { F_LEVEL = 1, F_RATE = 2, F_COUNT = 4, F_FREQ = 8 }; /* a model's own fields */

typedef struct {
    unsigned level; /* TRACE_* bits; 0: OFF */
    uint32_t rate, log_frequency;
    int32_t count;
} trace_cfg_t;

typedef struct {
    char model[128];
    unsigned set; /* F_*: the fields the model has of its own */
    trace_cfg_t cfg;
} trace_model_t;

#define MAX_TRACE_MODELS 256

struct service_ext {
    shm_registry_t *shm;
    pthread_mutex_t lock; /* the trace settings */
    trace_cfg_t global;
    trace_model_t *models; /* (n_models) */
    int n_models;
};

static const trace_cfg_t TRACE_DEFAULT = {
    .level = 0, .rate = 1000, .log_frequency = 0, .count = -1};

service_ext_t *service_ext_create(void)
{
    service_ext_t *e = hark_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->models = hark_calloc(MAX_TRACE_MODELS, sizeof *e->models);
    if (!e->models || !(e->shm = shm_registry_create())) {
        hark_free(e->models);
        hark_free(e);
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    e->global = TRACE_DEFAULT;
    return e;
}

void service_ext_destroy(service_ext_t *e)
{
    if (!e)
        return;
    shm_registry_destroy(e->shm);
    pthread_mutex_destroy(&e->lock);
    hark_free(e->models);
    hark_free(e);
}

static char *print_doc(cJSON *o)
{
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    char *r = s ? hark_strdup(s) : NULL;
    cJSON_free(s);
    return r;
}

/* checks that every key of `update` is one of names[] (or `update` is an object at all) */
static int known_keys(const cJSON *update, const char *what, const char *const *names, int n,
                      hark_err_t *err)
{
    if (!cJSON_IsObject(update))
        return err_set(err, HARK_ERR_INVALID_ARG, "the %s request must be a JSON object", what);
    const cJSON *v;
    cJSON_ArrayForEach(v, update)
    {
        int ok = 0;
        for (int i = 0; i < n && !ok; i++)
            ok = !strcmp(v->string, names[i]);
        if (!ok) {
            char list[256] = "";
            for (int i = 0; i < n; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         names[i]);
            return err_set(err, HARK_ERR_INVALID_ARG, "unknown %s setting '%.100s' (known: %s)",
                           what, v->string, list);
        }
    }
    return HARK_OK;
}

/* ---- logging ------------------------------------------------------------------------------- */

int service_log_settings(server_t *s, const cJSON *update, char **json, hark_err_t *err)
{
    static const char *const keys[] = {"log_file",  "log_info",          "log_warning",
                                       "log_error", "log_verbose_level", "log_format"};
    static const log_level_t sev[] = {LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR};
    *json = NULL;
    if (update) {
        int rc = known_keys(update, "log", keys, 6, err);
        if (rc)
            return rc;
        /* all checked first: a bad value changes nothing */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(update, "log_file");
        if (v && !cJSON_IsNull(v))
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "log file location can not be updated through network protocol (hark "
                           "logs to stderr)");
        for (int i = 0; i < 3; i++) {
            v = cJSON_GetObjectItemCaseSensitive(update, keys[1 + i]);
            if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
                return err_set(err, HARK_ERR_INVALID_ARG, "%s must be true or false", keys[1 + i]);
        }
        const cJSON *vl = cJSON_GetObjectItemCaseSensitive(update, "log_verbose_level");
        if (vl && !cJSON_IsNull(vl) &&
            !(cJSON_IsNumber(vl) && vl->valuedouble >= 0 && vl->valuedouble <= 4294967295.0 &&
              vl->valuedouble == floor(vl->valuedouble)))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "log_verbose_level must be an integer >= 0 (0: none, 1: debug, 2 and "
                           "above: trace)");
        const cJSON *fm = cJSON_GetObjectItemCaseSensitive(update, "log_format");
        int iso = 0;
        if (fm && !cJSON_IsNull(fm)) {
            if (!cJSON_IsString(fm) ||
                (strcmp(fm->valuestring, "default") && strcmp(fm->valuestring, "ISO8601")))
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "invalid argument for log_format: expected \"default\" or "
                               "\"ISO8601\"");
            iso = !strcmp(fm->valuestring, "ISO8601");
        }
        for (int i = 0; i < 3; i++) {
            v = cJSON_GetObjectItemCaseSensitive(update, keys[1 + i]);
            if (cJSON_IsBool(v))
                log_set_enabled(sev[i], cJSON_IsTrue(v));
        }
        if (cJSON_IsNumber(vl))
            log_set_verbose((unsigned)vl->valuedouble);
        if (cJSON_IsString(fm))
            log_set_format(iso ? LOG_FORMAT_ISO8601 : LOG_FORMAT_DEFAULT);
        LOG_INFO("log settings: info %d, warning %d, error %d, verbose level %u, format %s",
                 log_enabled(LOG_LEVEL_INFO), log_enabled(LOG_LEVEL_WARN),
                 log_enabled(LOG_LEVEL_ERROR), log_get_verbose(),
                 log_get_format() == LOG_FORMAT_ISO8601 ? "ISO8601" : "default");
    }
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "log_file", "");
        cJSON_AddBoolToObject(o, "log_info", log_enabled(LOG_LEVEL_INFO));
        cJSON_AddBoolToObject(o, "log_warning", log_enabled(LOG_LEVEL_WARN));
        cJSON_AddBoolToObject(o, "log_error", log_enabled(LOG_LEVEL_ERROR));
        cJSON_AddNumberToObject(o, "log_verbose_level", log_get_verbose());
        cJSON_AddStringToObject(o, "log_format",
                                log_get_format() == LOG_FORMAT_ISO8601 ? "ISO8601" : "default");
    }
    if (!(*json = print_doc(o)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    return HARK_OK;
}

/* ---- trace --------------------------------------------------------------------------------- */

/* a setting given as a decimal string (Triton's form) or a JSON integer, in [lo, hi] */
static int trace_int(const cJSON *v, const char *key, long long lo, long long hi, long long *out,
                     hark_err_t *err)
{
    if (cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
        v->valuedouble <= hi) {
        *out = (long long)v->valuedouble;
        return HARK_OK;
    }
    if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        errno = 0;
        long long x = strtoll(v->valuestring, &end, 10);
        if (!*end && !errno && x >= lo && x <= hi) {
            *out = x;
            return HARK_OK;
        }
    }
    return err_set(err, HARK_ERR_INVALID_ARG,
                   "Unable to parse '%s': expected an integer in [%lld, %lld] (as a string)", key,
                   lo, hi);
}

static trace_model_t *trace_model(service_ext_t *e, const char *model)
{
    for (int i = 0; i < e->n_models; i++)
        if (!strcmp(e->models[i].model, model))
            return &e->models[i];
    return NULL;
}

static char *trace_json(const trace_cfg_t *c)
{
    cJSON *o = cJSON_CreateObject(), *lv;
    char num[24];
    if (!o)
        return NULL;
    if ((lv = cJSON_AddArrayToObject(o, "trace_level"))) {
        if (!c->level)
            cJSON_AddItemToArray(lv, cJSON_CreateString("OFF"));
        if (c->level & TRACE_TIMESTAMPS)
            cJSON_AddItemToArray(lv, cJSON_CreateString("TIMESTAMPS"));
        if (c->level & TRACE_TENSORS)
            cJSON_AddItemToArray(lv, cJSON_CreateString("TENSORS"));
    }
    snprintf(num, sizeof num, "%" PRIu32, c->rate);
    cJSON_AddStringToObject(o, "trace_rate", num);
    snprintf(num, sizeof num, "%" PRId32, c->count);
    cJSON_AddStringToObject(o, "trace_count", num);
    snprintf(num, sizeof num, "%" PRIu32, c->log_frequency);
    cJSON_AddStringToObject(o, "log_frequency", num);
    cJSON_AddStringToObject(o, "trace_file", "");
    cJSON_AddStringToObject(o, "trace_mode", "triton");
    return print_doc(o);
}

int service_trace_settings(server_t *s, const char *model, const cJSON *update, char **json,
                           hark_err_t *err)
{
    static const char *const keys[] = {"trace_level",   "trace_rate", "trace_count",
                                       "log_frequency", "trace_file", "trace_mode"};
    service_ext_t *e = server_ext(s);
    *json = NULL;
    if (model && model[0] && service_model_ready(s, model, "", NULL) != 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "Request for unknown model : %.127s", model);
    if (model && strlen(model) >= sizeof e->models[0].model)
        return err_set(err, HARK_ERR_INVALID_ARG, "model name too long");
    /* the update, checked whole before anything changes */
    trace_cfg_t nv = {0};
    unsigned given = 0, cleared = 0;
    if (update) {
        int rc = known_keys(update, "trace", keys, 6, err);
        if (rc)
            return rc;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(update, "trace_file");
        if (v && !cJSON_IsNull(v))
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "trace file location can not be updated through network protocol "
                           "(hark writes no trace files)");
        v = cJSON_GetObjectItemCaseSensitive(update, "trace_mode");
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !strcmp(v->valuestring, "triton")))
            return err_set(err, HARK_ERR_INVALID_ARG, "trace_mode: hark knows \"triton\" only");
        if ((v = cJSON_GetObjectItemCaseSensitive(update, "trace_level"))) {
            if (cJSON_IsNull(v)) {
                cleared |= F_LEVEL;
            } else {
                if (!cJSON_IsArray(v) || !cJSON_GetArraySize(v))
                    return err_set(err, HARK_ERR_INVALID_ARG,
                                   "trace_level must be an array of \"OFF\", \"TIMESTAMPS\", "
                                   "\"TENSORS\"");
                const cJSON *l;
                int off = 0;
                cJSON_ArrayForEach(l, v)
                {
                    const char *t = cJSON_IsString(l) ? l->valuestring : "";
                    if (!strcmp(t, "OFF"))
                        off = 1;
                    else if (!strcmp(t, "TIMESTAMPS"))
                        nv.level |= TRACE_TIMESTAMPS;
                    else if (!strcmp(t, "TENSORS"))
                        nv.level |= TRACE_TENSORS;
                    else
                        return err_set(err, HARK_ERR_INVALID_ARG,
                                       "unknown trace_level '%.40s' (OFF, TIMESTAMPS, TENSORS)", t);
                }
                if (off && (nv.level || cJSON_GetArraySize(v) > 1))
                    return err_set(err, HARK_ERR_INVALID_ARG,
                                   "Expect only one trace level 'OFF' is specified");
                given |= F_LEVEL;
            }
        }
        static const struct {
            const char *key;
            unsigned f;
            long long lo, hi;
        } ints[] = {{"trace_rate", F_RATE, 0, UINT32_MAX},
                    {"trace_count", F_COUNT, -1, INT32_MAX},
                    {"log_frequency", F_FREQ, 0, UINT32_MAX}};
        for (int i = 0; i < 3; i++) {
            if (!(v = cJSON_GetObjectItemCaseSensitive(update, ints[i].key)))
                continue;
            if (cJSON_IsNull(v)) {
                cleared |= ints[i].f;
                continue;
            }
            long long x = 0;
            if ((rc = trace_int(v, ints[i].key, ints[i].lo, ints[i].hi, &x, err)))
                return rc;
            given |= ints[i].f;
            if (ints[i].f == F_RATE)
                nv.rate = (uint32_t)x;
            else if (ints[i].f == F_COUNT)
                nv.count = (int32_t)x;
            else
                nv.log_frequency = (uint32_t)x;
        }
    }
    pthread_mutex_lock(&e->lock);
    int rc = HARK_OK;
    trace_cfg_t *dst = &e->global, out = e->global;
    trace_model_t *m = NULL;
    if (model && model[0]) {
        m = trace_model(e, model);
        if (update && !cJSON_GetArraySize(update)) { /* Triton: drop the model's own settings */
            if (m)
                *m = e->models[--e->n_models];
            m = NULL;
        } else if (update && !m) {
            if (e->n_models == MAX_TRACE_MODELS) {
                rc = err_set(err, HARK_ERR_TOO_LARGE, "trace settings for %d models at most",
                             MAX_TRACE_MODELS);
                goto out;
            }
            m = &e->models[e->n_models++];
            memset(m, 0, sizeof *m);
            snprintf(m->model, sizeof m->model, "%s", model);
        }
        if (m)
            dst = &m->cfg;
    }
    if (update) {
        const trace_cfg_t *base = m ? &e->global : &TRACE_DEFAULT; /* what a null falls back to */
        if (given & F_LEVEL)
            dst->level = nv.level;
        if (given & F_RATE)
            dst->rate = nv.rate;
        if (given & F_COUNT)
            dst->count = nv.count;
        if (given & F_FREQ)
            dst->log_frequency = nv.log_frequency;
        if (cleared & F_LEVEL)
            dst->level = base->level;
        if (cleared & F_RATE)
            dst->rate = base->rate;
        if (cleared & F_COUNT)
            dst->count = base->count;
        if (cleared & F_FREQ)
            dst->log_frequency = base->log_frequency;
        if (m)
            m->set = (m->set | given) & ~cleared;
    }
    /* the effective settings: a model's own fields over the global ones */
    out = e->global;
    if (m) {
        if (m->set & F_LEVEL)
            out.level = m->cfg.level;
        if (m->set & F_RATE)
            out.rate = m->cfg.rate;
        if (m->set & F_COUNT)
            out.count = m->cfg.count;
        if (m->set & F_FREQ)
            out.log_frequency = m->cfg.log_frequency;
    }
out:
    pthread_mutex_unlock(&e->lock);
    if (rc)
        return rc;
    if (!(*json = trace_json(&out)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    return HARK_OK;
}

/* ---- shared memory: the regions ------------------------------------------------------------ */

int service_shm_register(server_t *s, const char *name, const char *key, uint64_t offset,
                         uint64_t byte_size, hark_err_t *err)
{
    int rc = shm_register(server_ext(s)->shm, name, key, offset, byte_size, err);
    if (!rc)
        LOG_INFO("shared memory region '%s' registered: '%s' [%" PRIu64 ", +%" PRIu64 ")", name,
                 key, offset, byte_size);
    return rc;
}

int service_shm_status(server_t *s, const char *name, char **json, hark_err_t *err)
{
    *json = NULL;
    shm_registry_t *r = server_ext(s)->shm;
    int n = shm_status(r, name, NULL, 0, err), cap = n;
    if (n < 0)
        return n;
    shm_region_info_t *v = hark_calloc(cap ? (size_t)cap : 1, sizeof *v);
    if (!v)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    n = shm_status(r, name, v, cap, err); /* a register in between: the first cap */
    if (n < 0) {
        hark_free(v);
        return n;
    }
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n && i < cap; i++) {
        cJSON *o = cJSON_CreateObject();
        char num[24];
        if (!o)
            break;
        cJSON_AddStringToObject(o, "name", v[i].name);
        cJSON_AddStringToObject(o, "key", v[i].key);
        snprintf(num, sizeof num, "%" PRIu64, v[i].offset);
        cJSON_AddItemToObject(o, "offset", cJSON_CreateRaw(num)); /* exact beyond 2^53 */
        snprintf(num, sizeof num, "%" PRIu64, v[i].byte_size);
        cJSON_AddItemToObject(o, "byte_size", cJSON_CreateRaw(num));
        cJSON_AddItemToArray(a, o);
    }
    hark_free(v);
    if (!(*json = print_doc(a)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    return HARK_OK;
}

void service_shm_unregister(server_t *s, const char *name)
{
    shm_unregister(server_ext(s)->shm, name);
    LOG_INFO("shared memory region%s '%s' unregistered", name && name[0] ? "" : "s",
             name && name[0] ? name : "*");
}

/* ---- shared memory: infer requests --------------------------------------------------------- */

typedef struct {
    server_t *s;
    kserve_request_t *req;
    service_infer_fn done;
    void *user;
} shm_answer_t;

/* the service's answer: outputs asked for in shared memory go there, then the transport's done */
static void shm_done(void *user, int status, const char *error, const char *model,
                     const char *version, const kserve_output_t *outs, int n_outs)
{
    shm_answer_t *w = user;
    kserve_request_t *kr = w->req;
    hark_err_t err = {0};
    for (int i = 0; !status && i < kr->n_outputs; i++) {
        kserve_output_req_t *o = &kr->outputs[i];
        if (!o->shm_region)
            continue;
        const kserve_output_t *out = NULL;
        for (int k = 0; k < n_outs && !out; k++)
            if (outs[k].name && !strcmp(outs[k].name, o->name))
                out = &outs[k];
        if (!out)
            continue; /* the response builder names the unknown output */
        if (out->size > o->shm_byte_size)
            status = err_set(&err, HARK_ERR_INVALID_ARG,
                             "output '%s' is %zu bytes: more than the %" PRIu64
                             " of its shared_memory_byte_size (region '%s')",
                             o->name, out->size, o->shm_byte_size, o->shm_region);
        else
            status = shm_write(server_ext(w->s)->shm, o->shm_region, o->shm_offset, out->data,
                               out->size, &err);
        if (status)
            error = err.msg;
        else
            o->shm_written = out->size;
    }
    w->done(w->user, status, error, model, version, status ? NULL : outs, status ? 0 : n_outs);
    hark_free(w);
}

int svc_shm_prepare(server_t *s, const service_infer_t *in, service_infer_t *out, hark_err_t *err)
{
    kserve_request_t *kr = in->req;
    shm_registry_t *r = server_ext(s)->shm;
    *out = *in;
    int outputs = 0;
    uint64_t total = 0, limit = server_options(s)->max_body_bytes;
    for (int i = 0; i < kr->n_inputs; i++) {
        kserve_tensor_t *t = &kr->inputs[i];
        if (!t->shm_region)
            continue;
        size_t esz = kserve_dtype_size(t->dtype);
        int rc;
        if (esz && (uint64_t)t->count * esz != t->shm_byte_size)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "input '%s': shared_memory_byte_size %" PRIu64
                           " does not match shape × %s = %" PRIu64 " bytes",
                           t->name, t->shm_byte_size, kserve_dtype_name(t->dtype),
                           (uint64_t)t->count * esz);
        if ((rc = shm_check(r, t->shm_region, t->shm_offset, t->shm_byte_size, err)))
            return err_prefix(err, rc, "input '%s'", t->name);
        if ((total += t->shm_byte_size) > limit)
            return err_set(
                err, HARK_ERR_TOO_LARGE,
                "inputs in shared memory of more than %" PRIu64 " bytes (--max-body-bytes)", limit);
        uint8_t *p = arena_alloc(&kr->arena, t->shm_byte_size ? t->shm_byte_size : 1, 64);
        if (!p)
            return err_set(err, HARK_ERR_NOMEM, "out of memory for input '%s'", t->name);
        if ((rc = shm_read(r, t->shm_region, t->shm_offset, p, t->shm_byte_size, err)))
            return err_prefix(err, rc, "input '%s'", t->name);
        t->data = p;
        t->size = t->shm_byte_size;
        t->binary = 1;
        if ((rc = kserve_tensor_check(t, "input", err)))
            return rc;
    }
    for (int i = 0; i < kr->n_outputs; i++) {
        const kserve_output_req_t *o = &kr->outputs[i];
        int rc;
        if (o->shm_region &&
            (rc = shm_check(r, o->shm_region, o->shm_offset, o->shm_byte_size, err)))
            return err_prefix(err, rc, "output '%s'", o->name);
        outputs += o->shm_region != NULL;
    }
    if (!outputs)
        return HARK_OK;
    shm_answer_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    *w = (shm_answer_t){.s = s, .req = kr, .done = in->done, .user = in->user};
    out->done = shm_done;
    out->user = w;
    return HARK_OK;
}
