/* asr_ws.c — WeNet runtime's WebSocket streaming ASR protocol on the HTTP port: a client sends
 * {"signal":"start","nbest":N,"continuous_decoding":B}, binary frames of 16-bit little-endian
 * PCM at the model's rate, then {"signal":"end"}; it gets {"status":"ok","type":"server_ready"},
 * {"status":"ok","type":"partial_result","nbest":"[{\"sentence\":...}]"} as chunks decode
 * something, {"status":"ok","type":"final_result","nbest":"[{\"sentence\":...,\"word_pieces\":
 * [{\"word\",\"start\",\"end\"}]}]"} (times in ms of the stream) at each endpoint (endpointing
 * is always on, as in WeNet's server) and at the end, and {"status":"ok","type":"speech_end"}
 * after the end's final result, or after the first endpoint's without continuous decoding (then
 * recognition stops: later audio or the end signal closes the connection, as WeNet's does);
 * errors as {"status":"failed","message":...} and the connection closes. The session is one
 * sequence of the service (the audio of each frame one chunk), so the scheduler, statistics and
 * limits are those of sequence batching. Tests: tests/server/test_websocket.py */
#include "api/http_api.h"

#include "api/kserve.h"
#include "api/service.h"
#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"
#include "net/websocket.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    atomic_int refs; /* the connection's (until on_close) + one per chunk in flight */
    server_t *s;
    uv_loop_t *loop;
    ws_conn_t *c; /* referenced */
    char model[128];
    uint64_t owner;
    char seq_id[40];
    /* loop thread */
    int started, ended, sent_any, nbest, continuous;
    int16_t *held; /* the last frame's samples, sent with the next frame or as the END chunk */
    size_t n_held, cap_held;
    atomic_int failed;
    atomic_int stopped; /* speech_end sent (an instance thread): later answers are dropped */
} session_t;

typedef struct {
    session_t *ss;
    int end;
    kserve_request_t kreq;
    uint8_t *body;
} chunk_t;

static void session_unref(session_t *ss)
{
    if (atomic_fetch_sub(&ss->refs, 1) == 1) {
        ws_conn_unref(ss->c);
        hark_free(ss->held);
        hark_free(ss);
    }
}

static void send_json(session_t *ss, cJSON *o)
{
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    if (t)
        ws_send(ss->c, 1, t, strlen(t));
    cJSON_free(t);
    cJSON_Delete(o);
}

static void send_status(session_t *ss, const char *type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "type", type);
    send_json(ss, o);
}

/* an error ends the session: the message, then the close */
static void send_error(session_t *ss, const char *msg)
{
    if (atomic_exchange(&ss->failed, 1))
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "failed");
    cJSON_AddStringToObject(o, "message", msg);
    send_json(ss, o);
    ws_close(ss->c);
}

/* one path of the n-best: {"sentence":text} (+ "word_pieces" in a final result) */
static void add_path(cJSON *arr, const char *text, const asr_word_t *w, int n_w, int final)
{
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "sentence", text ? text : "");
    if (final) {
        cJSON *wp = cJSON_AddArrayToObject(p, "word_pieces");
        for (int i = 0; i < n_w; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "word", w[i].text ? w[i].text : "");
            cJSON_AddNumberToObject(o, "start", w[i].start_ms);
            cJSON_AddNumberToObject(o, "end", w[i].end_ms);
            cJSON_AddItemToArray(wp, o);
        }
    }
    cJSON_AddItemToArray(arr, p);
}

/* {"status":"ok","type":type,"nbest":"[{\"sentence\":...},...]"} (WeNet sends nbest as a JSON
 * text): the best path (with its words when final), then the method's other paths, up to the
 * session's nbest. r NULL: one empty sentence. */
static void send_result(session_t *ss, const char *type, const asr_result_t *r, int final)
{
    cJSON *arr = cJSON_CreateArray();
    const char *best = r ? r->best.text : "";
    add_path(arr, best, r ? r->words : NULL, r ? r->n_words : 0, final);
    for (int i = 0, k = 1; r && i < r->n_nbest && k < ss->nbest; i++) {
        const char *t = r->nbest[i].text ? r->nbest[i].text : "";
        if (i == 0 && !strcmp(t, best ? best : "")) /* the best path again */
            continue;
        add_path(arr, t, NULL, 0, final);
        k++;
    }
    char *nb = cJSON_PrintUnformatted(arr);
    cJSON_Delete(arr);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddStringToObject(o, "nbest", nb ? nb : "[]");
    cJSON_free(nb);
    send_json(ss, o);
}

static void chunk_free(void *user)
{
    chunk_t *ck = user;
    session_t *ss = ck->ss;
    hark_free(ck->body);
    hark_free(ck);
    session_unref(ss);
}

/* The recognition of one chunk (an instance thread): each segment an endpoint ended is a
 * final result (and without continuous decoding the end of recognition); then the chunk's own
 * result: the final one with the END chunk, else a partial one when something was decoded. */
static void chunk_asr(void *user, int segment, asr_result_t *r, double start_s, double end_s)
{
    chunk_t *ck = user;
    session_t *ss = ck->ss;
    (void)start_s, (void)end_s;
    if (atomic_load(&ss->stopped) || atomic_load(&ss->failed))
        return;
    if (segment || ck->end) {
        send_result(ss, "final_result", r, 1);
        if (ck->end || !ss->continuous) {
            atomic_store(&ss->stopped, 1);
            send_status(ss, "speech_end");
        }
    } else if (r->best.text && r->best.text[0]) {
        send_result(ss, "partial_result", r, 0);
    }
}

/* the service's answer to one chunk (the results went through chunk_asr): errors only */
static void chunk_done(void *user, int status, const char *error, const char *model,
                       const char *version, const kserve_output_t *outs, int n_outs)
{
    chunk_t *ck = user;
    session_t *ss = ck->ss;
    (void)model, (void)version, (void)outs, (void)n_outs;
    if (status && !atomic_load(&ss->stopped))
        send_error(ss, error && error[0] ? error : hark_status_str(status));
}

/* One chunk of the session's sequence: a KServe request as the transports make them. */
static void submit(session_t *ss, const int16_t *pcm, size_t n, int end)
{
    chunk_t *ck = hark_calloc(1, sizeof *ck);
    char hdr[640], opts[128] = "";
    if (!ss->sent_any) /* the sequence's options, WeNet server's: endpointing always on */
        snprintf(opts, sizeof opts, ",\"endpointing\":\"true\",\"continuous_decoding\":\"%s\"%s",
                 ss->continuous ? "true" : "false", ss->nbest > 1 ? ",\"nbest\":\"all\"" : "");
    int hl = snprintf(hdr, sizeof hdr,
                      "{\"inputs\":[{\"name\":\"WAV\",\"shape\":[1,%zu],\"datatype\":\"FP32\","
                      "\"parameters\":{\"binary_data_size\":%zu}}],\"parameters\":{"
                      "\"sequence_id\":\"%s\",\"sequence_start\":%s,\"sequence_end\":%s%s}}",
                      n, n * sizeof(float), ss->seq_id, ss->sent_any ? "false" : "true",
                      end ? "true" : "false", opts);
    size_t len = (size_t)hl + n * sizeof(float);
    if (!ck || !(ck->body = hark_malloc(len + 64))) {
        hark_free(ck);
        send_error(ss, "out of memory");
        return;
    }
    memcpy(ck->body, hdr, (size_t)hl);
    float *x = (float *)(void *)(ck->body + hl); /* memcpy'd per sample: alignment not assumed */
    for (size_t i = 0; i < n; i++) {
        float v = pcm[i] / 32768.0f;
        memcpy((uint8_t *)x + i * sizeof v, &v, sizeof v);
    }
    hark_err_t err = {0};
    if (kserve_parse_request(ck->body, len, (size_t)hl, &ck->kreq, &err)) {
        hark_free(ck->body);
        hark_free(ck);
        send_error(ss, err.msg);
        return;
    }
    ck->ss = ss;
    ck->end = end;
    ss->sent_any = 1;
    atomic_fetch_add(&ss->refs, 1);
    service_infer_t in = {.model = ss->model,
                          .req = &ck->kreq,
                          .body = ck->body,
                          .body_free = chunk_free,
                          .body_user = ck,
                          .owner = ss->owner,
                          .loop = ss->loop,
                          .done = chunk_done,
                          .user = ck,
                          .asr = chunk_asr,
                          .want_words = 1};
    service_infer(ss->s, &in);
}

static void on_text(session_t *ss, const uint8_t *data, size_t len)
{
    cJSON *j = cJSON_ParseWithLength((const char *)data, len);
    const cJSON *sig = cJSON_GetObjectItemCaseSensitive(j, "signal");
    if (!cJSON_IsObject(j) || !cJSON_IsString(sig)) {
        send_error(ss, cJSON_IsObject(j) ? "Wrong message header" : "Wrong protocol");
    } else if (!strcmp(sig->valuestring, "start")) {
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(j, "nbest");
        const cJSON *cd = cJSON_GetObjectItemCaseSensitive(j, "continuous_decoding");
        if (nb && !cJSON_IsNumber(nb))
            send_error(ss, "integer is expected for nbest option");
        else if (cd && !cJSON_IsBool(cd))
            send_error(ss, "boolean true or false is expected for continuous_decoding option");
        else if (ss->started)
            send_error(ss, "the session has started already");
        else {
            ss->nbest = nb ? nb->valueint : 1;
            ss->continuous = cd && cJSON_IsTrue(cd);
            ss->started = 1;
            send_status(ss, "server_ready");
        }
    } else if (!strcmp(sig->valuestring, "end")) {
        if (atomic_load(&ss->stopped)) { /* recognition stopped at an endpoint: WeNet closes */
            ss->ended = 1;
            ws_close(ss->c);
        } else if (!ss->started || ss->ended) {
            send_error(ss, ss->ended ? "the session has ended" : "Start signal is expected");
        } else {
            ss->ended = 1;
            if (ss->n_held)
                submit(ss, ss->held, ss->n_held, 1);
            else if (!ss->sent_any) { /* no audio at all */
                send_result(ss, "final_result", NULL, 1);
                send_status(ss, "speech_end");
            } else
                send_error(ss, "internal: the last audio was not held back");
            ss->n_held = 0;
        }
    } else {
        send_error(ss, "Unexpected signal type");
    }
    cJSON_Delete(j);
}

static void on_message(ws_conn_t *c, int text, const uint8_t *data, size_t len, void *user)
{
    session_t *ss = user;
    if (atomic_load(&ss->failed))
        return;
    if (text) {
        on_text(ss, data, len);
        return;
    }
    if (ss->started && atomic_load(&ss->stopped)) { /* after speech_end: WeNet closes */
        if (!ss->ended)
            ws_close(ss->c);
        ss->ended = 1;
        return;
    }
    if (!ss->started || ss->ended) {
        send_error(ss, ss->ended ? "audio after the end signal"
                                 : "Start signal is expected before binary data");
        return;
    }
    if (len % 2) {
        send_error(ss, "binary frames carry 16-bit PCM: an odd number of bytes");
        return;
    }
    if (!len)
        return;
    /* the frame before goes now; this one waits for the next or the end (so END carries audio) */
    if (ss->n_held)
        submit(ss, ss->held, ss->n_held, 0);
    size_t n = len / 2;
    if (n > ss->cap_held) {
        int16_t *nh = hark_realloc(ss->held, n * sizeof *nh);
        if (!nh) {
            send_error(ss, "out of memory");
            return;
        }
        ss->held = nh;
        ss->cap_held = n;
    }
    memcpy(ss->held, data, len);
    ss->n_held = n;
}

static void on_close(ws_conn_t *c, void *user)
{
    session_t *ss = user;
    service_abandon(ss->s, ss->owner); /* its sequence, if still open */
    session_unref(ss);
}

int asr_ws_is_upgrade(const http_req_t *req)
{
    const char *up = http_req_header(req, "Upgrade");
    return req->upgrade && up && !strcasecmp(up, "websocket");
}

void asr_ws_upgrade(const http_api_ctx_t *ctx, http_req_t *req)
{
    const char *k = http_req_header(req, "Sec-WebSocket-Key");
    const char *ver = http_req_header(req, "Sec-WebSocket-Version");
    if (!ctx->ws || !k || !k[0] || strlen(k) > 64 || (ver && strcmp(ver, "13"))) {
        http_respond_error(req, 400, "a WebSocket upgrade needs Sec-WebSocket-Key and version 13");
        return;
    }
    char key[80]; /* the request is gone once answered */
    snprintf(key, sizeof key, "%s", k);
    hark_err_t err = {0};
    session_t *ss = hark_calloc(1, sizeof *ss);
    if (!ss) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    /* the model: ?model=NAME, else the first one serving sequences */
    const char *q = strstr(req->query, "model=");
    if (q && (q == req->query || q[-1] == '&')) {
        size_t l = strcspn(q + 6, "&");
        snprintf(ss->model, sizeof ss->model, "%.*s", (int)(l < 127 ? l : 127), q + 6);
    } else if (service_stream_model(ctx->s, ss->model, sizeof ss->model, &err)) {
        hark_free(ss);
        http_api_respond_error(req, err.status, err.msg);
        return;
    }
    int fd = http_req_takeover(req);
    if (fd < 0) {
        hark_free(ss);
        http_respond_error(req, 400, "the connection cannot be upgraded (pipelined requests?)");
        return;
    }
    http_respond(req, 101, NULL, NULL, 0); /* the server's copy of the request: dropped */
    atomic_init(&ss->refs, 1);
    ss->s = ctx->s;
    ss->loop = ctx->loop;
    ss->owner = service_new_owner();
    snprintf(ss->seq_id, sizeof ss->seq_id, "ws-%llu", (unsigned long long)ss->owner);
    ws_handler_t h = {on_message, on_close};
    if (ws_accept(ctx->ws, fd, key, &h, ss, &ss->c, &err)) {
        LOG_WARN("websocket: %s", err.msg);
        hark_free(ss);
        return;
    }
    ws_conn_ref(ss->c); /* the session's */
}
