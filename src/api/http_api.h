/* http_api.h — the HTTP/1.1 face of the APIs: routes KServe v2 (/v2/...), OpenAI (/v1/...) and
 * the metrics port onto the transport-neutral service (service.h). Handlers run on a transport
 * loop and never block it; answers built on inference threads are handed to http_server, which
 * writes them from the connection's own loop.
 * Tests: tests/server/test_server.py (a real server driven with requests and curl) */
#ifndef HARK_API_HTTP_API_H
#define HARK_API_HTTP_API_H

#include "net/http_server.h"
#include "net/websocket.h"
#include "server/server.h"

typedef struct {
    server_t *s;
    uv_loop_t *loop; /* the loop these handlers run on */
    ws_hub_t *ws;    /* its WebSocket connections (NULL: no upgrades) */
} http_api_ctx_t;

/* http_server handler of the API port; user: an http_api_ctx_t that outlives the server. */
void http_api_handler(http_req_t *req, void *user);
/* body_align hook: KServe's binary tensors start Inference-Header-Content-Length bytes into the
 * body; aligned there, WAV samples are used in place. */
size_t http_api_body_align(const http_req_t *req, void *user);
/* http_server handler of the metrics port; user: the server_t. */
void http_metrics_handler(http_req_t *req, void *user);
/* POST /v1/audio/transcriptions (openai.c). */
void openai_transcriptions(const http_api_ctx_t *c, http_req_t *req);
/* POST /v1/audio/translations: 400 in OpenAI's error object (no hark model translates). */
void openai_translations(const http_api_ctx_t *c, http_req_t *req);
/* GET / and /index.html: the live transcription page (live_page.c). */
void live_page(http_req_t *req);
/* OpenAI's error object {"error": {"message", "type", "param", "code"}} with an HTTP status
 * (openai.c; param may be NULL), or from a hark status. */
void openai_error(http_req_t *req, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void openai_error_rc(http_req_t *req, int rc, const char *msg);
/* POST /v1/audio/speech (openai_speech.c). */
void openai_speech(const http_api_ctx_t *c, http_req_t *req);

/* WeNet's WebSocket streaming protocol (asr_ws.c): an Upgrade: websocket request on any path
 * (?model=NAME, else the first model serving sequences). */
int asr_ws_is_upgrade(const http_req_t *req);
void asr_ws_upgrade(const http_api_ctx_t *c, http_req_t *req);

/* shared by the HTTP handlers */
void http_api_respond_json(http_req_t *req, int status, char *json); /* takes json (hark_malloc) */
void http_api_respond_error(http_req_t *req, int rc, const char *msg);

#endif
