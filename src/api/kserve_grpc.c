/* kserve_grpc.c — the GRPCInferenceService RPCs over the http2 server and service.h: one call
 * record per HTTP/2 stream; unary RPCs answer HEADERS + one message + trailers (errors as
 * Trailers-Only); ModelStreamInfer answers each request message with its own response message.
 * Answers made on inference threads are queued to the loop by http2_stream_send_*.
 * Tests: tests/server/test_grpc.py; fuzz: tests/fuzz/fuzz_grpc.c */
#include "api/kserve_grpc.h"

#include "api/service.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "gpu/pinned.h"
#include "grpc_service.pb-c.h"
#include "hark.h"
#include "net/http2.h"
#include "server/access.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define GRPC_PREFIX_PATH "/inference.GRPCInferenceService/"

typedef enum {
    RPC_NONE = 0,
    RPC_SERVER_LIVE,
    RPC_SERVER_READY,
    RPC_MODEL_READY,
    RPC_SERVER_METADATA,
    RPC_MODEL_METADATA,
    RPC_MODEL_INFER,
    RPC_MODEL_STREAM_INFER,
    RPC_MODEL_CONFIG,
    RPC_MODEL_STATISTICS,
    RPC_REPOSITORY_INDEX,
    RPC_REPOSITORY_LOAD,
    RPC_REPOSITORY_UNLOAD,
    RPC_SHM_STATUS,
    RPC_SHM_REGISTER,
    RPC_SHM_UNREGISTER,
    RPC_CUDA_SHM_STATUS,
    RPC_CUDA_SHM_REGISTER,
    RPC_CUDA_SHM_UNREGISTER,
    RPC_TRACE_SETTING,
    RPC_LOG_SETTINGS,
} rpc_t;

/* each RPC with its request message and its restricted-API group (Triton's mapping) */
static const struct {
    const char *name;
    rpc_t rpc;
    const ProtobufCMessageDescriptor *in;
    api_group_t group;
} RPCS[] = {
    {"ServerLive", RPC_SERVER_LIVE, &inference__server_live_request__descriptor, API_HEALTH},
    {"ServerReady", RPC_SERVER_READY, &inference__server_ready_request__descriptor, API_HEALTH},
    {"ModelReady", RPC_MODEL_READY, &inference__model_ready_request__descriptor, API_HEALTH},
    {"ServerMetadata", RPC_SERVER_METADATA, &inference__server_metadata_request__descriptor,
     API_METADATA},
    {"ModelMetadata", RPC_MODEL_METADATA, &inference__model_metadata_request__descriptor,
     API_METADATA},
    {"ModelInfer", RPC_MODEL_INFER, &inference__model_infer_request__descriptor, API_INFERENCE},
    {"ModelStreamInfer", RPC_MODEL_STREAM_INFER, &inference__model_infer_request__descriptor,
     API_INFERENCE},
    {"ModelConfig", RPC_MODEL_CONFIG, &inference__model_config_request__descriptor,
     API_MODEL_CONFIG},
    {"ModelStatistics", RPC_MODEL_STATISTICS, &inference__model_statistics_request__descriptor,
     API_STATISTICS},
    {"RepositoryIndex", RPC_REPOSITORY_INDEX, &inference__repository_index_request__descriptor,
     API_MODEL_REPOSITORY},
    {"RepositoryModelLoad", RPC_REPOSITORY_LOAD,
     &inference__repository_model_load_request__descriptor, API_MODEL_REPOSITORY},
    {"RepositoryModelUnload", RPC_REPOSITORY_UNLOAD,
     &inference__repository_model_unload_request__descriptor, API_MODEL_REPOSITORY},
    {"SystemSharedMemoryStatus", RPC_SHM_STATUS,
     &inference__system_shared_memory_status_request__descriptor, API_SHARED_MEMORY},
    {"SystemSharedMemoryRegister", RPC_SHM_REGISTER,
     &inference__system_shared_memory_register_request__descriptor, API_SHARED_MEMORY},
    {"SystemSharedMemoryUnregister", RPC_SHM_UNREGISTER,
     &inference__system_shared_memory_unregister_request__descriptor, API_SHARED_MEMORY},
    {"CudaSharedMemoryStatus", RPC_CUDA_SHM_STATUS,
     &inference__cuda_shared_memory_status_request__descriptor, API_SHARED_MEMORY},
    {"CudaSharedMemoryRegister", RPC_CUDA_SHM_REGISTER,
     &inference__cuda_shared_memory_register_request__descriptor, API_SHARED_MEMORY},
    {"CudaSharedMemoryUnregister", RPC_CUDA_SHM_UNREGISTER,
     &inference__cuda_shared_memory_unregister_request__descriptor, API_SHARED_MEMORY},
    {"TraceSetting", RPC_TRACE_SETTING, &inference__trace_setting_request__descriptor, API_TRACE},
    {"LogSettings", RPC_LOG_SETTINGS, &inference__log_settings_request__descriptor, API_LOGGING},
};

struct kserve_grpc {
    server_t *s;
    uv_loop_t *loop;
    http2_server_t *h2;
    size_t max_message;
    ProtobufCAllocator infer_alloc; /* ModelInferRequest: large fields in page-locked memory */
};

/* protobuf-c's allocator for ModelInferRequest: a field as large as a tensor (raw_input_contents)
 * goes into the server's page-locked body pool, so that a GPU instance uploads it by DMA where it
 * lies, as it does HTTP bodies; the rest on the heap. A 16-byte header says which. */
#define PB_HDR 16
#define PB_PINNED_MIN ((size_t)32 << 10)
static void *pb_alloc(void *pool, size_t n)
{
    int big = pool && n >= PB_PINNED_MIN;
    uint8_t *p = big ? pinned_alloc(pool, n + PB_HDR) : hark_malloc(n + PB_HDR);
    if (!p)
        return NULL;
    p[0] = (uint8_t)big;
    return p + PB_HDR;
}

static void pb_free(void *pool, void *ptr)
{
    if (!ptr)
        return;
    uint8_t *p = (uint8_t *)ptr - PB_HDR;
    if (p[0])
        pinned_free(pool, p);
    else
        hark_free(p);
}

/* One RPC (one HTTP/2 stream). Refcounted: the stream's on_close drops one, each in-flight
 * inference or repository load holds one. Loop-thread fields are marked. */
typedef struct {
    atomic_int refs;
    kserve_grpc_t *g;
    http2_stream_t *st; /* referenced */
    rpc_t rpc;
    int idx; /* into RPCS */
    uint64_t deadline_ns;
    atomic_int answered; /* unary: 1 once the answer is queued */
    /* streaming: 1 while the client may still send + 1 per inference in flight; whoever takes it
     * to 0 ends the RPC */
    atomic_int open_work;
    uint64_t owner; /* ModelStreamInfer: the sequences started on this stream (service.h) */
    /* request bytes (loop) */
    uint8_t *buf;
    size_t len, cap;
    int failed; /* loop: answered with an error, further data ignored */
} call_t;

static void call_unref(call_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        http2_stream_unref(c->st);
        hark_free(c->buf);
        hark_free(c);
    }
}

/* ---- answers (any thread) ------------------------------------------------------------------- */

static void send_headers(call_t *c)
{
    http2_header_t h[] = {{"content-type", "application/grpc"}};
    http2_stream_send_headers(c->st, h, 1);
}

/* the status: as Trailers-Only (unary errors: no headers went out, so content-type goes with
 * it), or as the trailers after the streaming RPC's headers */
static void send_status(call_t *c, int code, const char *msg)
{
    char num[16], enc[1024];
    snprintf(num, sizeof num, "%d", code);
    http2_header_t t[3];
    int n = 0;
    if (c->rpc != RPC_MODEL_STREAM_INFER)
        t[n++] = (http2_header_t){"content-type", "application/grpc"};
    t[n++] = (http2_header_t){"grpc-status", num};
    if (msg && msg[0]) {
        grpc_percent_encode(msg, enc, sizeof enc);
        t[n++] = (http2_header_t){"grpc-message", enc};
    }
    http2_stream_send_trailers(c->st, t, n);
}

/* unary: the message, or an error status (frame NULL) */
static void answer(call_t *c, int status, const char *msg, uint8_t *frame, size_t len)
{
    if (atomic_exchange(&c->answered, 1)) {
        hark_free(frame);
        return;
    }
    if (status == HARK_OK && frame) {
        send_headers(c);
        http2_stream_send_data(c->st, frame, len);
        http2_header_t t[] = {{"grpc-status", "0"}};
        http2_stream_send_trailers(c->st, t, 1);
        return;
    }
    hark_free(frame);
    send_status(c, status == HARK_OK ? GRPC_STATUS_INTERNAL : grpc_status_of(status), msg);
}

static void answer_code(call_t *c, int code, const char *msg)
{
    if (atomic_exchange(&c->answered, 1))
        return;
    send_status(c, code, msg);
}

static void answer_pb(call_t *c, const ProtobufCMessage *m)
{
    size_t len;
    uint8_t *f = grpc_frame_pack(m, &len);
    answer(c, f ? HARK_OK : HARK_ERR_NOMEM, "out of memory", f, len);
}

static void answer_json(call_t *c, kserve_grpc_doc_t kind, int rc, char *json, hark_err_t *err)
{
    uint8_t *f = NULL;
    size_t len = 0;
    if (!rc)
        rc = kserve_grpc_json_frame(kind, json, &f, &len, err);
    hark_free(json);
    answer(c, rc, err->msg, f, len);
}

/* streaming: one unit of work finished; the last one ends the RPC with OK */
static void stream_work_done(call_t *c)
{
    if (atomic_fetch_sub(&c->open_work, 1) == 1 && !atomic_exchange(&c->answered, 1)) {
        http2_header_t t[] = {{"grpc-status", "0"}};
        http2_stream_send_trailers(c->st, t, 1);
    }
}

/* ---- inference ------------------------------------------------------------------------------ */

/* one inference in flight: the service borrows kreq (which borrows pb) until it calls body_free
 * (after done), as the HTTP path does */
typedef struct {
    call_t *c; /* referenced */
    kserve_request_t kreq;
    Inference__ModelInferRequest *pb;
} infer_t;

static void infer_free(void *user)
{
    infer_t *in = user;
    protobuf_c_message_free_unpacked(&in->pb->base, &in->c->g->infer_alloc);
    call_unref(in->c);
    hark_free(in);
}

/* the service's answer, on an inference thread (or the loop for early errors): serialised here,
 * queued to the connection's loop by http2_stream_send_* */
static void infer_done(void *user, int status, const char *error, const char *model,
                       const char *version, const kserve_output_t *outs, int n_outs)
{
    infer_t *in = user;
    call_t *c = in->c;
    int stream = c->rpc == RPC_MODEL_STREAM_INFER;
    const char *id = in->pb->id ? in->pb->id : "";
    hark_err_t err = {0};
    uint8_t *f = NULL;
    size_t len = 0;
    if (status == HARK_OK) {
        kserve_grpc_infer_answer_t a = {.model = model,
                                        .version = version,
                                        .id = id,
                                        .req = &in->kreq,
                                        .outs = outs,
                                        .n_outs = n_outs,
                                        .stream = stream,
                                        .final_response = 1};
        status = kserve_grpc_infer_frame(&a, &f, &len, &err);
        error = err.msg;
    }
    if (stream) {
        if (status != HARK_OK)
            f = kserve_grpc_stream_error_frame(error, model, id, &len);
        if (f)
            http2_stream_send_data(c->st, f, len);
        stream_work_done(c);
    } else {
        answer(c, status, error, f, len);
    }
}

static void stream_error(call_t *c, const char *msg, const char *model, const char *id)
{
    size_t fl;
    uint8_t *f = kserve_grpc_stream_error_frame(msg, model, id, &fl);
    if (f)
        http2_stream_send_data(c->st, f, fl);
}

/* one ModelInferRequest message (unary or one of a stream) */
static void start_infer(call_t *c, const uint8_t *msg, size_t len)
{
    int stream = c->rpc == RPC_MODEL_STREAM_INFER;
    hark_err_t err = {0};
    Inference__ModelInferRequest *pb =
        inference__model_infer_request__unpack(&c->g->infer_alloc, len, msg);
    if (!pb) {
        if (stream)
            stream_error(c, "malformed ModelInferRequest message", "", "");
        else
            answer_code(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed ModelInferRequest message");
        return;
    }
    infer_t *in = hark_calloc(1, sizeof *in);
    int rc = in ? kserve_grpc_request_from_pb(pb, &in->kreq, &err)
                : err_set(&err, HARK_ERR_NOMEM, "out of memory");
    if (rc) {
        if (stream)
            stream_error(c, err.msg, pb->model_name, pb->id);
        else
            answer(c, rc, err.msg, NULL, 0);
        hark_free(in);
        protobuf_c_message_free_unpacked(&pb->base, &c->g->infer_alloc);
        return;
    }
    in->c = c;
    in->pb = pb;
    atomic_fetch_add(&c->refs, 1);
    if (stream)
        atomic_fetch_add(&c->open_work, 1);
    service_infer_t si = {.model = pb->model_name,
                          .version = pb->model_version,
                          .req = &in->kreq,
                          .body = pb,
                          .body_free = infer_free, /* after done: the context itself */
                          .body_user = in,
                          .cancelled = http2_stream_cancelled_flag(c->st),
                          .deadline_ns = c->deadline_ns,
                          .owner = c->owner,
                          .loop = c->g->loop,
                          .done = infer_done,
                          .user = in};
    service_infer(c->g->s, &si);
}

/* ---- repository load / unload --------------------------------------------------------------- */

static void load_done(void *user, int status, const char *msg)
{
    call_t *c = user;
    if (status == HARK_OK) {
        Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
        answer_pb(c, &r.base); /* same (empty) wire form as the unload response */
    } else {
        answer(c, status, msg, NULL, 0);
    }
    call_unref(c);
}

/* ---- dispatch (loop thread) ----------------------------------------------------------------- */

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static void handle_unary(call_t *c, const uint8_t *msg, size_t len)
{
    server_t *s = c->g->s;
    hark_err_t err = {0};
    char *json = NULL;
    if (c->rpc == RPC_MODEL_INFER) {
        start_infer(c, msg, len);
        return;
    }
    ProtobufCMessage *m = protobuf_c_message_unpack(RPCS[c->idx].in, NULL, len, msg);
    if (!m) {
        answer_code(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed request message");
        return;
    }
    switch (c->rpc) {
    case RPC_SERVER_LIVE: {
        Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
        r.live = service_live(s) ? 1 : 0;
        answer_pb(c, &r.base);
        break;
    }
    case RPC_SERVER_READY: {
        Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
        r.ready = service_ready(s) ? 1 : 0;
        answer_pb(c, &r.base);
        break;
    }
    case RPC_MODEL_READY: {
        Inference__ModelReadyRequest *q = (Inference__ModelReadyRequest *)m;
        Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
        r.ready =
            service_model_ready(s, str_or_empty(q->name), str_or_empty(q->version), NULL) == 1;
        answer_pb(c, &r.base);
        break;
    }
    case RPC_SERVER_METADATA: {
        int rc = service_server_metadata(s, &json, &err);
        answer_json(c, KSERVE_GRPC_SERVER_METADATA, rc, json, &err);
        break;
    }
    case RPC_MODEL_METADATA:
    case RPC_MODEL_CONFIG:
    case RPC_MODEL_STATISTICS: {
        /* the three requests share their wire form: name = 1, version = 2 */
        Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)m;
        const char *name = str_or_empty(q->name), *ver = str_or_empty(q->version);
        int rc;
        if (c->rpc == RPC_MODEL_METADATA) {
            rc = service_model_metadata(s, name, ver, &json, &err);
            answer_json(c, KSERVE_GRPC_MODEL_METADATA, rc, json, &err);
        } else if (c->rpc == RPC_MODEL_CONFIG) {
            rc = service_model_config(s, name, ver, &json, &err);
            answer_json(c, KSERVE_GRPC_MODEL_CONFIG, rc, json, &err);
        } else {
            rc = service_model_stats(s, name, ver, &json, &err);
            answer_json(c, KSERVE_GRPC_MODEL_STATS, rc, json, &err);
        }
        break;
    }
    case RPC_REPOSITORY_INDEX: {
        Inference__RepositoryIndexRequest *q = (Inference__RepositoryIndexRequest *)m;
        int rc = service_repository_index(s, q->ready, &json, &err);
        answer_json(c, KSERVE_GRPC_REPOSITORY_INDEX, rc, json, &err);
        break;
    }
    case RPC_REPOSITORY_LOAD:
    case RPC_REPOSITORY_UNLOAD: {
        /* both requests: repository_name = 1, model_name = 2 */
        Inference__RepositoryModelLoadRequest *q = (Inference__RepositoryModelLoadRequest *)m;
        if (!q->model_name || !q->model_name[0]) {
            answer_code(c, GRPC_STATUS_INVALID_ARGUMENT, "model_name is required");
            break;
        }
        atomic_fetch_add(&c->refs, 1);
        service_repository_load(s, q->model_name, c->rpc == RPC_REPOSITORY_LOAD, load_done, c);
        break;
    }
    case RPC_SHM_STATUS:
    case RPC_CUDA_SHM_STATUS: {
        /* both requests: name = 1 */
        Inference__SystemSharedMemoryStatusRequest *q =
            (Inference__SystemSharedMemoryStatusRequest *)m;
        const char *name = str_or_empty(q->name);
        int rc;
        if (c->rpc == RPC_SHM_STATUS) {
            rc = service_shm_status(s, name, &json, &err);
        } else if (name[0]) {
            rc = err_set(&err, HARK_ERR_NOT_FOUND,
                         "Unable to find cuda shared memory region: '%.200s' (%s)", name,
                         SERVICE_NO_CUDA_SHM);
        } else {
            rc = (json = hark_strdup("[]")) ? HARK_OK : err_set(&err, HARK_ERR_NOMEM, "oom");
        }
        answer_json(c,
                    c->rpc == RPC_SHM_STATUS ? KSERVE_GRPC_SHM_STATUS : KSERVE_GRPC_CUDA_SHM_STATUS,
                    rc, json, &err);
        break;
    }
    case RPC_SHM_REGISTER: {
        Inference__SystemSharedMemoryRegisterRequest *q =
            (Inference__SystemSharedMemoryRegisterRequest *)m;
        int rc = service_shm_register(s, str_or_empty(q->name), str_or_empty(q->key), q->offset,
                                      q->byte_size, &err);
        Inference__SystemSharedMemoryRegisterResponse r =
            INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
        if (rc)
            answer(c, rc, err.msg, NULL, 0);
        else
            answer_pb(c, &r.base);
        break;
    }
    case RPC_SHM_UNREGISTER:
    case RPC_CUDA_SHM_UNREGISTER: {
        /* both requests: name = 1; both responses empty */
        Inference__SystemSharedMemoryUnregisterRequest *q =
            (Inference__SystemSharedMemoryUnregisterRequest *)m;
        if (c->rpc == RPC_SHM_UNREGISTER)
            service_shm_unregister(s, str_or_empty(q->name));
        Inference__SystemSharedMemoryUnregisterResponse r =
            INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
        answer_pb(c, &r.base);
        break;
    }
    case RPC_CUDA_SHM_REGISTER:
        answer(c, HARK_ERR_UNSUPPORTED, SERVICE_NO_CUDA_SHM, NULL, 0);
        break;
    case RPC_TRACE_SETTING:
    case RPC_LOG_SETTINGS: {
        struct cJSON *upd = NULL;
        int rc, trace = c->rpc == RPC_TRACE_SETTING;
        if (trace) {
            Inference__TraceSettingRequest *q = (Inference__TraceSettingRequest *)m;
            if (!(rc = kserve_grpc_trace_update(q, &upd, &err)))
                rc = service_trace_settings(s, str_or_empty(q->model_name), upd, &json, &err);
        } else if (!(rc = kserve_grpc_log_update((Inference__LogSettingsRequest *)m, &upd, &err))) {
            rc = service_log_settings(s, upd, &json, &err);
        }
        cJSON_Delete(upd);
        answer_json(c, trace ? KSERVE_GRPC_TRACE_SETTING : KSERVE_GRPC_LOG_SETTINGS, rc, json,
                    &err);
        break;
    }
    default:
        answer_code(c, GRPC_STATUS_UNIMPLEMENTED, "not implemented");
        break;
    }
    protobuf_c_message_free_unpacked(m, NULL);
}

/* takes whole messages out of c->buf; streaming handles each, unary waits for the end */
static int take_messages(call_t *c, int at_end)
{
    hark_err_t err = {0};
    size_t off = 0;
    for (;;) {
        const uint8_t *msg;
        size_t ml, used;
        int r =
            grpc_frame_next(c->buf + off, c->len - off, c->g->max_message, &msg, &ml, &used, &err);
        if (r < 0) {
            int code = r == HARK_ERR_TOO_LARGE     ? GRPC_STATUS_RESOURCE_EXHAUSTED
                       : r == HARK_ERR_UNSUPPORTED ? GRPC_STATUS_UNIMPLEMENTED
                                                   : GRPC_STATUS_INTERNAL;
            c->failed = 1;
            if (c->rpc == RPC_MODEL_STREAM_INFER) {
                if (atomic_exchange(&c->answered, 1) == 0) {
                    /* ends the RPC now; inferences still in flight are dropped */
                    send_status(c, code, err.msg);
                }
            } else {
                answer_code(c, code, err.msg);
            }
            return -1;
        }
        if (r == 0)
            break;
        if (c->rpc == RPC_MODEL_STREAM_INFER) {
            start_infer(c, msg, ml);
            off += used;
            continue;
        }
        if (!at_end)
            return 0; /* unary: the message waits for END_STREAM */
        if (off + used != c->len) {
            c->failed = 1;
            answer_code(c, GRPC_STATUS_UNIMPLEMENTED,
                        "more than one request message for a unary RPC");
            return -1;
        }
        handle_unary(c, msg, ml);
        off += used;
        break;
    }
    if (off) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
    return 0;
}

static int on_headers(http2_stream_t *st, void *user)
{
    kserve_grpc_t *g = user;
    call_t *c = hark_calloc(1, sizeof *c);
    if (!c)
        return -1;
    atomic_init(&c->refs, 1);
    atomic_init(&c->open_work, 1);
    c->g = g;
    c->st = st;
    http2_stream_ref(st);
    http2_stream_set_user(st, c);
    const char *path = http2_stream_header(st, ":path");
    const char *method = http2_stream_header(st, ":method");
    const char *ct = http2_stream_header(st, "content-type");
    const char *to = http2_stream_header(st, "grpc-timeout");
    if (!method || strcmp(method, "POST")) {
        answer_code(c, GRPC_STATUS_UNIMPLEMENTED, "gRPC calls are POST requests");
        c->failed = 1;
        return 0;
    }
    if (!ct || strncmp(ct, "application/grpc", 16) || (ct[16] && ct[16] != '+' && ct[16] != ';')) {
        answer_code(c, GRPC_STATUS_INTERNAL, "content-type must be application/grpc");
        c->failed = 1;
        return 0;
    }
    if (path && !strncmp(path, GRPC_PREFIX_PATH, strlen(GRPC_PREFIX_PATH))) {
        const char *name = path + strlen(GRPC_PREFIX_PATH);
        for (size_t i = 0; i < sizeof RPCS / sizeof RPCS[0]; i++)
            if (!strcmp(name, RPCS[i].name)) {
                c->rpc = RPCS[i].rpc;
                c->idx = (int)i;
            }
    }
    if (c->rpc == RPC_NONE) {
        char msg[300];
        snprintf(msg, sizeof msg, "method %.200s is not implemented by hark", path ? path : "");
        answer_code(c, GRPC_STATUS_UNIMPLEMENTED, msg);
        c->failed = 1;
        return 0;
    }
    /* Triton's restricted protocols: UNAVAILABLE before anything else is looked at */
    const access_t *acc = g->s ? server_access(g->s) : NULL;
    const char *rh = access_header(acc, ACCESS_GRPC, RPCS[c->idx].group);
    char denied[300];
    if (rh && !access_allows(acc, ACCESS_GRPC, RPCS[c->idx].group, http2_stream_header(st, rh),
                             denied, sizeof denied)) {
        answer_code(c, GRPC_STATUS_UNAVAILABLE, denied);
        c->failed = 1;
        return 0;
    }
    if (to) {
        uint64_t ns;
        if (grpc_parse_timeout(to, strlen(to), &ns)) {
            answer_code(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed grpc-timeout header");
            c->failed = 1;
            return 0;
        }
        uint64_t now = clock_now_ns();
        c->deadline_ns = ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
        if (!c->deadline_ns)
            c->deadline_ns = 1;
    }
    if (c->rpc == RPC_MODEL_STREAM_INFER) {
        c->owner = service_new_owner();
        send_headers(c);
    }
    return 0;
}

static int on_data(http2_stream_t *st, const uint8_t *data, size_t len, void *user)
{
    call_t *c = http2_stream_user(st);
    if (!c || c->failed)
        return 0;
    /* a message over the limit is refused as soon as its prefix is here (take_messages), so
     * the buffer holds at most one message plus one DATA frame */
    if (c->len + len > c->cap) {
        size_t nc = c->cap ? c->cap : 4096;
        while (nc < c->len + len)
            nc *= 2;
        /* the first message's length prefix known (it is at the start of the buffer): room for
         * all of it at once, so that a large request is received with one copy, not a doubling
         * series of reallocations (a message over the limit is refused by take_messages) */
        uint8_t pre[GRPC_PREFIX];
        size_t have = c->len < GRPC_PREFIX ? c->len : GRPC_PREFIX;
        memcpy(pre, c->buf ? c->buf : pre, have);
        if (have < GRPC_PREFIX && len >= GRPC_PREFIX - have)
            memcpy(pre + have, data, GRPC_PREFIX - have);
        if (have == GRPC_PREFIX || len >= GRPC_PREFIX - have) {
            size_t whole = GRPC_PREFIX + ((size_t)pre[1] << 24 | (size_t)pre[2] << 16 |
                                          (size_t)pre[3] << 8 | pre[4]);
            if (whole > nc && whole <= c->g->max_message + GRPC_PREFIX)
                nc = whole;
        }
        uint8_t *nb = hark_realloc(c->buf, nc);
        if (!nb) {
            c->failed = 1;
            answer_code(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory for the request");
            return 0;
        }
        c->buf = nb;
        c->cap = nc;
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    take_messages(c, 0);
    return 0;
}

static void on_end(http2_stream_t *st, void *user)
{
    call_t *c = http2_stream_user(st);
    if (!c || c->failed)
        return;
    if (c->rpc == RPC_MODEL_STREAM_INFER) {
        if (c->len && !atomic_exchange(&c->answered, 1))
            send_status(c, GRPC_STATUS_INTERNAL, "the stream ended inside a message");
        else
            stream_work_done(c);
        return;
    }
    if (!c->len) {
        answer_code(c, GRPC_STATUS_INTERNAL, "no request message");
        return;
    }
    if (take_messages(c, 1) == 0 && c->len)
        answer_code(c, GRPC_STATUS_INTERNAL, "the request ended inside a message");
}

static void on_close(http2_stream_t *st, void *user)
{
    call_t *c = http2_stream_user(st);
    http2_stream_set_user(st, NULL);
    if (c && c->owner && c->g->s) /* the client went away or finished: its open sequences end */
        service_abandon(c->g->s, c->owner);
    if (c)
        call_unref(c);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int kserve_grpc_create(uv_loop_t *loop, server_t *s, const kserve_grpc_opts_t *o,
                       kserve_grpc_t **out, hark_err_t *err)
{
    *out = NULL;
    kserve_grpc_t *g = hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    g->s = s;
    g->loop = loop;
    g->infer_alloc = (ProtobufCAllocator){pb_alloc, pb_free, s ? server_body_pool(s) : NULL};
    g->max_message = o->max_message ? o->max_message : (size_t)64 << 20;
    http2_server_opts_t ho = {.host = o->host,
                              .port = o->port,
                              .handler = {on_headers, on_data, on_end, on_close},
                              .user = g,
                              .max_streams = o->max_streams,
                              .max_connections = o->max_connections,
                              .idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : 300000,
                              .reuse_port = o->reuse_port};
    int rc = http2_server_create(loop, &ho, &g->h2, err);
    *out = g; /* even on failure: the caller runs the loop and destroys it */
    return rc;
}

int kserve_grpc_port(const kserve_grpc_t *g)
{
    return http2_server_port(g->h2);
}

void kserve_grpc_shutdown(kserve_grpc_t *g, unsigned deadline_ms)
{
    if (g && g->h2)
        http2_server_shutdown(g->h2, deadline_ms);
}

void kserve_grpc_destroy(kserve_grpc_t *g)
{
    if (!g)
        return;
    http2_server_destroy(g->h2);
    hark_free(g);
}

/* for the fuzz target and tests: the socket-free http2 server under the handlers */
http2_server_t *kserve_grpc_http2(kserve_grpc_t *g);
http2_server_t *kserve_grpc_http2(kserve_grpc_t *g)
{
    return g->h2;
}
