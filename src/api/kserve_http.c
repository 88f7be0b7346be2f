/* kserve_http.c — KServe v2 / Triton over HTTP/1.1: routing of the API port, each endpoint
 * turned into a service call (service.h), answers as JSON or binary tensors; and the metrics
 * port; Triton's logging, trace and shared memory extensions. The loop parses the request body
 * (outside the model table's lock); inference answers are serialised on the inference thread
 * and written by the connection's loop.
 * Tests: tests/server/test_server.py, tests/server/test_triton_ext.py */
#include "api/http_api.h"

#include "api/kserve.h"
#include "api/metrics.h"
#include "api/service.h"
#include "core/alloc.h"
#include "hark.h"
#include "server/access.h"
#include "server/repository.h"
#include "server/shm.h"

#include <cjson/cJSON.h>
#include <http_parser.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_METRIC_MODELS 64

void http_api_respond_json(http_req_t *req, int status, char *json)
{
    if (!json) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    http_respond_owned(req, status, "application/json", json, strlen(json), hark_free, json);
}

void http_api_respond_error(http_req_t *req, int rc, const char *msg)
{
    if (rc == HARK_ERR_AGAIN)
        http_res_header(req, "Retry-After", "1");
    http_respond_error(req, service_status_http(rc), "%s",
                       msg && msg[0] ? msg : hark_status_str(rc));
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

size_t http_api_body_align(const http_req_t *req, void *user)
{
    const char *h = http_req_header(req, "Inference-Header-Content-Length");
    size_t at = 0;
    if (!h || kserve_parse_header_length(h, strlen(h), SIZE_MAX, &at, NULL))
        return 0;
    return at;
}

/* ---- infer -------------------------------------------------------------------------------- */

typedef struct {
    http_req_t *http;
    kserve_request_t kreq; /* handed to the service; alive until its done returns */
} http_infer_t;

/* the service's answer, on an inference thread (or the loop for early errors): serialise here;
 * http_server queues it to the connection's loop */
static void infer_done(void *user, int status, const char *error, const char *model,
                       const char *version, const kserve_output_t *outs, int n_outs)
{
    http_infer_t *h = user;
    if (status) {
        http_api_respond_error(h->http, status, error);
        return;
    }
    kserve_response_t resp;
    hark_err_t err = {0};
    if (kserve_build_response(&h->kreq, model, version, outs, n_outs, &resp, &err)) {
        http_api_respond_error(h->http, err.status, err.msg);
        return;
    }
    if (resp.binary) {
        char hl[32];
        snprintf(hl, sizeof hl, "%zu", resp.header_len);
        http_res_header(h->http, "Inference-Header-Content-Length", hl);
    }
    http_respond_owned(h->http, 200, resp.binary ? "application/octet-stream" : "application/json",
                       resp.body, resp.len, hark_free, resp.body);
}

static void infer_free(void *user)
{
    hark_free(user);
}

static void handle_infer(const http_api_ctx_t *c, http_req_t *req, const char *model,
                         const char *version)
{
    hark_err_t err = {0};
    size_t hlen = (size_t)-1;
    const char *h = http_req_header(req, "Inference-Header-Content-Length");
    if (h && kserve_parse_header_length(h, strlen(h), req->body_len, &hlen, &err)) {
        http_respond_error(req, 400, "%s", err.msg);
        return;
    }
    http_infer_t *hi = hark_calloc(1, sizeof *hi);
    if (!hi) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    hi->http = req;
    if (kserve_parse_request((const uint8_t *)req->body, req->body_len, hlen, &hi->kreq, &err)) {
        hark_free(hi);
        http_api_respond_error(req, err.status, err.msg);
        return;
    }
    service_infer_t in = {.model = model,
                          .version = version,
                          .req = &hi->kreq,
                          .body = req->body,
                          .body_free = infer_free, /* after done: the context itself */
                          .body_user = hi,
                          .loop = c->loop,
                          .cancelled = http_req_cancelled_flag(req), /* left: dropped unrun */
                          .done = infer_done,
                          .user = hi};
    service_infer(c->s, &in);
}

/* ---- repository control ---------------------------------------------------------------- */

static void repo_done(void *user, int status, const char *msg)
{
    http_req_t *req = user;
    if (status)
        http_api_respond_error(req, status, msg);
    else
        http_respond(req, 200, "application/json", "{}", 2);
}

static void handle_repository(const http_api_ctx_t *c, http_req_t *req)
{
    const char *seg = "";
    size_t len = segment(req->path, 2, &seg);
    if (len == 5 && !strncmp(seg, "index", 5)) {
        int ready_only = 0;
        if (req->body_len) {
            cJSON *b = cJSON_ParseWithLength(req->body, req->body_len);
            ready_only = b && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "ready"));
            cJSON_Delete(b);
        }
        char *json = NULL;
        hark_err_t err = {0};
        if (service_repository_index(c->s, ready_only, &json, &err))
            http_api_respond_error(req, err.status, err.msg);
        else
            http_api_respond_json(req, 200, json);
        return;
    }
    const char *name = "", *act = "";
    size_t nl = segment(req->path, 3, &name), al = segment(req->path, 4, &act);
    int load = al == 4 && !strncmp(act, "load", 4), unload = al == 6 && !strncmp(act, "unload", 6);
    if (!(len == 6 && !strncmp(seg, "models", 6)) || !nl || !(load || unload)) {
        http_respond_error(req, 404, "unknown repository endpoint %s", req->path);
        return;
    }
    char model[256];
    if (nl >= sizeof model) {
        http_respond_error(req, 400, "invalid model name: it is too long");
        return;
    }
    snprintf(model, sizeof model, "%.*s", (int)nl, name);
    service_repository_load(c->s, model, load, repo_done, req);
}

/* ---- Triton's extensions: logging, trace, shared memory --------------------------------- */

static void respond_doc(http_req_t *req, int rc, char *json, const hark_err_t *err);

/* a POST body as a JSON object (empty: {}); NULL after answering 400 */
static cJSON *body_object(http_req_t *req, const char *what)
{
    cJSON *j =
        req->body_len ? cJSON_ParseWithLength(req->body, req->body_len) : cJSON_CreateObject();
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        http_respond_error(req, 400, "the %s request body must be a JSON object", what);
        return NULL;
    }
    return j;
}

/* GET or POST /v2/logging, /v2/trace/setting, /v2/models/<m>/trace/setting */
static void handle_settings(const http_api_ctx_t *c, http_req_t *req, int trace, const char *model)
{
    int get = req->method == HTTP_GET || req->method == HTTP_HEAD;
    if (!get && req->method != HTTP_POST) {
        http_respond_error(req, 405, "use GET or POST");
        return;
    }
    cJSON *upd = NULL;
    if (!get && !(upd = body_object(req, trace ? "trace setting" : "log setting")))
        return;
    char *json = NULL;
    hark_err_t err = {0};
    int rc = trace ? service_trace_settings(c->s, model, upd, &json, &err)
                   : service_log_settings(c->s, upd, &json, &err);
    cJSON_Delete(upd);
    respond_doc(req, rc, json, &err);
}

/* /v2/{system,cuda}sharedmemory[/region/<name>]/{status,register,unregister} */
static void handle_shm(const http_api_ctx_t *c, http_req_t *req, int cuda)
{
    const char *seg = "", *name = "", *act = "";
    size_t sl = segment(req->path, 2, &seg), nl = 0, al;
    int at = 2;
    if (sl == 6 && !strncmp(seg, "region", 6)) {
        nl = segment(req->path, 3, &name);
        at = 4;
    }
    al = segment(req->path, at, &act);
    int status = al == 6 && !strncmp(act, "status", 6);
    int reg = al == 8 && !strncmp(act, "register", 8);
    int unreg = al == 10 && !strncmp(act, "unregister", 10);
    const char *rest = "";
    if ((at == 4 && !nl) || !(status || reg || unreg) || segment(req->path, at + 1, &rest) ||
        (reg && !nl)) {
        http_respond_error(req, 404,
                           "unknown endpoint %s: use /v2/%ssharedmemory[/region/NAME]/status, "
                           "/v2/%ssharedmemory/region/NAME/register or "
                           "/v2/%ssharedmemory[/region/NAME]/unregister",
                           req->path, cuda ? "cuda" : "system", cuda ? "cuda" : "system",
                           cuda ? "cuda" : "system");
        return;
    }
    int get = req->method == HTTP_GET || req->method == HTTP_HEAD;
    if (status ? !get : req->method != HTTP_POST) {
        http_respond_error(req, 405, status ? "use GET" : "use POST");
        return;
    }
    char region[SHM_NAME_MAX];
    if (nl >= sizeof region) {
        http_respond_error(req, 400, "shared memory region name too long (at most %d bytes)",
                           (int)sizeof region - 1);
        return;
    }
    snprintf(region, sizeof region, "%.*s", (int)nl, name);
    char *json = NULL;
    hark_err_t err = {0};
    int rc = HARK_OK;
    if (cuda) { /* none can be registered: none to list or unregister */
        if (reg)
            rc = err_set(&err, HARK_ERR_UNSUPPORTED, "%s", SERVICE_NO_CUDA_SHM);
        else if (status && region[0])
            rc = err_set(&err, HARK_ERR_NOT_FOUND,
                         "Unable to find cuda shared memory region: '%s' (%s)", region,
                         SERVICE_NO_CUDA_SHM);
        else if (status && !(json = hark_strdup("[]")))
            rc = err_set(&err, HARK_ERR_NOMEM, "out of memory");
    } else if (status) {
        rc = service_shm_status(c->s, region, &json, &err);
    } else if (unreg) {
        service_shm_unregister(c->s, region);
    } else {
        cJSON *b = body_object(req, "shared memory register");
        if (!b)
            return;
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(b, "key");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(b, "offset");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(b, "byte_size");
        double o = cJSON_IsNumber(off) ? off->valuedouble : 0, n = 0;
        if (!cJSON_IsString(key))
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "Shared memory register request has no 'key' field (a string)");
        else if (off && !(cJSON_IsNumber(off) && o >= 0 && o == (double)(uint64_t)o))
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "Shared memory register request: 'offset' must be an integer >= 0");
        else if (!cJSON_IsNumber(size) || (n = size->valuedouble) < 0 || n != (double)(uint64_t)n)
            rc = err_set(&err, HARK_ERR_INVALID_ARG,
                         "Shared memory register request has no 'byte_size' field (an integer "
                         ">= 0)");
        else
            rc = service_shm_register(c->s, region, key->valuestring, (uint64_t)o, (uint64_t)n,
                                      &err);
        cJSON_Delete(b);
    }
    if (rc)
        http_api_respond_error(req, rc, err.msg);
    else if (json)
        http_api_respond_json(req, 200, json);
    else
        http_respond(req, 200, "application/json", "{}", 2);
}

/* ---- routing ------------------------------------------------------------------------------ */

/* Triton's restricted APIs: 0 when the request may use group g; else it is answered 403 */
static int restricted(const http_api_ctx_t *c, http_req_t *req, api_group_t g)
{
    const access_t *a = server_access(c->s);
    const char *h = access_header(a, ACCESS_HTTP, g);
    char msg[300];
    if (!h || access_allows(a, ACCESS_HTTP, g, http_req_header(req, h), msg, sizeof msg))
        return 0;
    http_respond_error(req, 403, "%s", msg);
    return 1;
}

/* the API group of a request to the API port (Triton's mapping; hark's own endpoints where they
 * belong: OpenAI's and the WebSocket's are inference, /v1/models metadata), or -1: open */
static int api_group_of(const char *p, int ws)
{
    if (ws || !strncmp(p, "/v1/audio/", 10))
        return API_INFERENCE;
    if (!strcmp(p, "/v2/models/stats"))
        return API_STATISTICS;
    if (!strncmp(p, "/v2/models/", 11)) { /* /v2/models/<m>[/versions/<v>][/<action>] */
        const char *seg;
        size_t sl = segment(p, 3, &seg);
        int at = 3;
        if (sl == 8 && !strncmp(seg, "versions", 8))
            sl = segment(p, at += 2, &seg);
        static const struct {
            const char *name;
            api_group_t g;
        } act[] = {{"ready", API_HEALTH},       {"config", API_MODEL_CONFIG},
                   {"stats", API_STATISTICS},   {"infer", API_INFERENCE},
                   {"generate", API_INFERENCE}, {"generate_stream", API_INFERENCE},
                   {"trace", API_TRACE}};
        for (size_t i = 0; sl && i < sizeof act / sizeof act[0]; i++)
            if (strlen(act[i].name) == sl && !strncmp(seg, act[i].name, sl))
                return act[i].g;
        return API_METADATA;
    }
    if (!strncmp(p, "/v2/health/", 11))
        return API_HEALTH;
    if (!strncmp(p, "/v2/repository/", 15))
        return API_MODEL_REPOSITORY;
    if (!strcmp(p, "/v2") || !strcmp(p, "/v1/models"))
        return API_METADATA;
    if (!strncmp(p, "/v2/logging", 11))
        return API_LOGGING;
    if (!strncmp(p, "/v2/trace", 9))
        return API_TRACE;
    if (!strncmp(p, "/v2/systemsharedmemory", 22) || !strncmp(p, "/v2/cudasharedmemory", 20))
        return API_SHARED_MEMORY;
    return -1;
}

static void respond_doc(http_req_t *req, int rc, char *json, const hark_err_t *err)
{
    if (rc)
        http_api_respond_error(req, rc, err->msg);
    else
        http_api_respond_json(req, 200, json);
}

static void openai_models(const http_api_ctx_t *c, http_req_t *req)
{
    char *idx = NULL;
    hark_err_t err = {0};
    if (service_repository_index(c->s, 1, &idx, &err)) {
        http_api_respond_error(req, err.status, err.msg);
        return;
    }
    cJSON *in = cJSON_Parse(idx);
    hark_free(idx);
    cJSON *j = cJSON_CreateObject(), *d = cJSON_AddArrayToObject(j, "data");
    cJSON_AddStringToObject(j, "object", "list");
    const cJSON *e;
    cJSON_ArrayForEach(e, in)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", cJSON_IsString(nm) ? nm->valuestring : "");
        cJSON_AddStringToObject(o, "object", "model");
        cJSON_AddNumberToObject(o, "created", 0);
        cJSON_AddStringToObject(o, "owned_by", "hark");
        cJSON_AddItemToArray(d, o);
    }
    cJSON_Delete(in);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    http_api_respond_json(req, 200, s ? hark_strdup(s) : NULL);
    free(s);
}

void http_api_handler(http_req_t *req, void *user)
{
    const http_api_ctx_t *c = user;
    server_t *s = c->s;
    const char *p = req->path;
    int get = req->method == HTTP_GET || req->method == HTTP_HEAD, post = req->method == HTTP_POST;
    hark_err_t err = {0};
    char *json = NULL;
    int ws = asr_ws_is_upgrade(req), g = api_group_of(p, ws);
    if (g >= 0 && restricted(c, req, (api_group_t)g))
        return;
    if (ws) {
        asr_ws_upgrade(c, req);
        return;
    }
    if ((!strcmp(p, "/") || !strcmp(p, "/index.html")) && get) {
        live_page(req);
        return;
    }
    if (!strcmp(p, "/v2/health/live")) {
        http_respond(req, service_live(s) ? 200 : 503, NULL, "", 0);
        return;
    }
    if (!strcmp(p, "/v2/health/ready")) {
        http_respond(req, service_ready(s) ? 200 : 503, NULL, "", 0);
        return;
    }
    if (!strcmp(p, "/v2") && get) {
        int rc = service_server_metadata(s, &json, &err);
        respond_doc(req, rc, json, &err);
        return;
    }
    if (!strcmp(p, "/v1/models") && get) {
        openai_models(c, req);
        return;
    }
    if (!strcmp(p, "/v1/audio/transcriptions")) {
        if (!post)
            openai_error(req, 405, NULL, "use POST");
        else
            openai_transcriptions(c, req);
        return;
    }
    if (!strcmp(p, "/v1/audio/translations")) {
        if (!post)
            openai_error(req, 405, NULL, "use POST");
        else
            openai_translations(c, req);
        return;
    }
    if (!strcmp(p, "/v1/audio/speech")) {
        if (!post)
            openai_error(req, 405, NULL, "use POST");
        else
            openai_speech(c, req);
        return;
    }
    if (!strncmp(p, "/v2/repository/", 15)) {
        if (!post)
            http_respond_error(req, 405, "use POST");
        else
            handle_repository(c, req);
        return;
    }
    if (!strcmp(p, "/v2/logging")) {
        handle_settings(c, req, 0, NULL);
        return;
    }
    if (!strcmp(p, "/v2/trace/setting")) {
        handle_settings(c, req, 1, NULL);
        return;
    }
    if (!strncmp(p, "/v2/systemsharedmemory/", 23) || !strncmp(p, "/v2/cudasharedmemory/", 21)) {
        handle_shm(c, req, p[4] == 'c');
        return;
    }
    if (!strcmp(p, "/v2/models/stats") && get) {
        int rc = service_model_stats(s, NULL, NULL, &json, &err);
        respond_doc(req, rc, json, &err);
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
    char model[256], version[32];
    if (nl >= sizeof model || vl >= sizeof version) {
        http_respond_error(req, 404, "model '%.*s' not found", (int)(nl < 200 ? nl : 200), name);
        return;
    }
    snprintf(model, sizeof model, "%.*s", (int)nl, name);
    snprintf(version, sizeof version, "%.*s", (int)vl, ver ? ver : "");
    if (ver && !vl) {
        http_respond_error(req, 404, "model '%s': empty version", model);
        return;
    }
    if (!sl && get) {
        int rc = service_model_metadata(s, model, version, &json, &err);
        if (rc == HARK_ERR_UNAVAILABLE)
            rc = HARK_ERR_INVALID_ARG; /* as before: 400 for a model that is not loaded */
        respond_doc(req, rc, json, &err);
    } else if (sl == 5 && !strncmp(seg, "ready", 5) && get) {
        /* an unknown model is 404; a known one 200 or 400 by readiness */
        int rc = service_model_ready(s, model, version, &err);
        if (rc < 0)
            http_api_respond_error(req, rc, err.msg);
        else
            http_respond(req, rc ? 200 : 400, NULL, "", 0);
    } else if (sl == 6 && !strncmp(seg, "config", 6) && get) {
        int rc = service_model_config(s, model, version, &json, &err);
        if (rc == HARK_ERR_UNAVAILABLE)
            rc = HARK_ERR_INVALID_ARG; /* Triton: 400 for a model that is not loaded */
        respond_doc(req, rc, json, &err);
    } else if (sl == 5 && !strncmp(seg, "stats", 5) && get) {
        int rc = service_model_stats(s, model, version, &json, &err);
        respond_doc(req, rc, json, &err);
    } else if (sl == 5 && !strncmp(seg, "trace", 5)) {
        const char *t = "", *rest = "";
        size_t tl = segment(p, next + 1, &t);
        if (ver || tl != 7 || strncmp(t, "setting", 7) || segment(p, next + 2, &rest))
            http_respond_error(req, ver ? 400 : 404,
                               "%s: trace settings are at /v2/models/<model>/trace/setting (no "
                               "version)",
                               p);
        else
            handle_settings(c, req, 1, model);
    } else if (sl == 5 && !strncmp(seg, "infer", 5)) {
        if (!post)
            http_respond_error(req, 405, "use POST");
        else
            handle_infer(c, req, model, version);
    } else {
        http_respond_error(req, 404, "unknown endpoint %s %s", req->method_name, p);
    }
}

void http_metrics_handler(http_req_t *req, void *user)
{
    server_t *s = user;
    if (strcmp(req->path, "/metrics") != 0) {
        http_respond_error(req, 404, "metrics are at /metrics");
        return;
    }
    static __thread metrics_model_t mm[MAX_METRIC_MODELS];
    repository_t *r = server_repository(s);
    repository_rdlock(r);
    int n = repository_metrics(r, mm, MAX_METRIC_MODELS);
    char *text;
    size_t len;
    int rc = metrics_render(mm, n, &text, &len);
    repository_unlock(r);
    if (rc)
        http_respond_error(req, 500, "out of memory");
    else
        http_respond_owned(req, 200, "text/plain; version=0.0.4", text, len, hark_free, text);
}
