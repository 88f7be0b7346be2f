/* http_server.h — HTTP/1.1 server core on libuv + http-parser: listeners, keep-alive, pipelining,
 * limits, asynchronous responses from worker threads, graceful shutdown; and the socket-free
 * request parser it uses.  Tests: tests/net/test_http_server.c, tests/fuzz/fuzz_http_request.c
 *
 * OWNERSHIP AND THREADS
 * - The server owns every http_req_t. The handler is called on the loop thread and is *lent* the
 *   request; it must answer it exactly once with http_respond*() (or the chunked trio
 *   http_respond_start / _chunk / _end), either before returning or later from any thread.
 *   Until that answer, the request — its fields, its arena, its body — belongs to whoever will
 *   answer; the server does not touch it. After the answer (after _end for chunked responses)
 *   the request must not be touched again: the server may free it at once.
 * - If the client disconnects, or shutdown passes its deadline, before the answer comes, the
 *   request stays valid until it is answered; the answer is then dropped and the request freed
 *   on the answering thread. http_req_cancelled() tells a worker it may stop early. A request
 *   that is never answered leaks.
 * - Bodies given to http_respond() are copied; bodies given to http_respond_owned() are handed
 *   over and released with free_fn(free_ud) on some thread once written or dropped (also when
 *   http_respond_owned fails).
 * - Answers given on another thread are queued to the connection's own loop, which writes them
 *   (a wake-up per answer, or one per batch between http_hold_wakeups / _release): no thread but
 *   the loop ever writes a connection.
 * - Server functions are loop-thread only, except http_server_stop_accepting,
 *   http_server_shutdown and http_server_stats, which may be called from any thread (until
 *   http_server_destroy).
 */
#ifndef HARK_NET_HTTP_SERVER_H
#define HARK_NET_HTTP_SERVER_H

#include "core/arena.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct uv_loop_s uv_loop_t;

/* ---- requests -------------------------------------------------------------------------------- */

typedef struct {
    const char *name, *value; /* NUL-terminated; value has surrounding whitespace trimmed */
    size_t name_len, value_len;
} http_header_t;

/* One parsed request. All strings are NUL-terminated and live in `arena` (or, for the body, a
 * buffer owned by the request) until the request is freed. Handlers may allocate from `arena`
 * while they own the request. Fields after `user` are private. */
typedef struct http_req {
    arena_t arena;
    int method;              /* enum http_method of <http_parser.h> (HTTP_GET, HTTP_POST...) */
    const char *method_name; /* "GET", "POST", ... (static) */
    const char *url;         /* request target as sent: "/v2/models/x/infer?a=b" */
    const char *path;        /* target up to '?' or '#', not percent-decoded */
    const char *query;       /* after '?' up to '#'; "" when absent */
    size_t path_len, query_len;
    http_header_t *headers; /* [nheaders], in arrival order (trailers of chunked bodies dropped) */
    size_t nheaders;
    const char *body; /* [body_len] bytes, decoded (de-chunked, decompressed), NUL after them */
    size_t body_len;
    unsigned short http_major, http_minor;
    int keep_alive; /* the client wants the connection kept open */
    int upgrade;    /* Upgrade/CONNECT: the connection closes after the answer */
    void *user;     /* free for the handler's use */

    /* private */
    char *body_buf_; /* the allocation; the body starts body_off_ bytes into it */
    size_t body_cap_, body_off_;
    void (*body_free_)(void *buf, void *user); /* body_buf_ came from the body_alloc hook */
    void *body_user_;
} http_req_t;

/* Value of the first header called `name` (case-insensitive), or NULL. */
const char *http_req_header(const http_req_t *req, const char *name);
/* 1 once the client has gone (or the server gave up on the request); any thread. */
int http_req_cancelled(const http_req_t *req);
/* The flag http_req_cancelled reads, for code that checks it without the request (a scheduler
 * dropping queued work of a client that left); valid until the request is answered. */
const _Atomic int *http_req_cancelled_flag(const http_req_t *req);

/* Takes the connection of an Upgrade request away from the server (loop thread, in the handler,
 * when it is the connection's only unanswered request): returns a new descriptor of the socket,
 * the caller's from now on; the server closes its side without a FIN. The request must still be
 * answered (the answer is dropped). Bytes the client sent after the request head, before the
 * takeover, are lost (WebSocket clients wait for the 101). -1 when it cannot. */
int http_req_takeover(http_req_t *req);

/* ---- responses (any thread, exactly once per request) ------------------------------------- */

/* Adds a response header (name and value copied; no CR/LF allowed). Call before the answer,
 * on the thread that owns the request. HARK_OK, HARK_ERR_INVALID_ARG, HARK_ERR_NOMEM. */
int http_res_header(http_req_t *req, const char *name, const char *value);

/* Answers with `status`, Content-Type `content_type` (NULL: none) and a copy of body[len], sent
 * with Content-Length. Returns HARK_OK, or HARK_ERR_NOMEM when no answer could be built: then
 * the connection is closed at that answer's turn. Either way the request is answered. */
int http_respond(http_req_t *req, int status, const char *content_type, const void *body,
                 size_t len);
/* As http_respond, but `body` is handed over: free_fn(free_ud) (if non-NULL) is called once. */
int http_respond_owned(http_req_t *req, int status, const char *content_type, const void *body,
                       size_t len, void (*free_fn)(void *), void *free_ud);
/* Answers `status` with the JSON body {"error": "<formatted message>"}. */
int http_respond_error(http_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Chunked answer (Transfer-Encoding: chunked; close-delimited for HTTP/1.0 clients): start,
 * any number of chunks (copied; empty ones are skipped), end. The request is answered only at
 * _end, which must always be called, even after an error. An out-of-memory chunk aborts the
 * response: the connection is closed where that chunk would have gone. */
int http_respond_start(http_req_t *req, int status, const char *content_type);
int http_respond_chunk(http_req_t *req, const void *data, size_t len);
int http_respond_end(http_req_t *req);

/* Answers given by the calling thread (not a loop thread) between these two calls wake their
 * loops once, at the release, instead of once per answer: a model instance completing a batch
 * of 64 sends a handful of wake-ups instead of 64 (each a syscall that also wakes the loop).
 * Calls nest (up to 64); the release must come on the same thread. */
void http_hold_wakeups(void);
void http_release_wakeups(void);

/* Reason phrase of a status code ("Not Found"); "Unknown" for others. */
const char *http_status_reason(int status);
/* Writes {"error": "<msg escaped>"} into buf[cap] (truncating msg to fit, always valid JSON when
 * cap >= 16); returns the length. */
size_t http_error_json(char *buf, size_t cap, const char *msg);

/* ---- the server ------------------------------------------------------------------------------ */

typedef void (*http_handler_fn)(http_req_t *req, void *user);

/* Zero means "default" for every field. */
typedef struct {
    const char *host;         /* IPv4/IPv6 literal or a name ("localhost"); NULL: "0.0.0.0" */
    int port;                 /* 0: an ephemeral port (read it with http_server_port) */
    http_handler_fn handler;  /* required */
    void *user;               /* passed to handler */
    size_t max_body;          /* decoded body limit, bytes (413); default 64 MiB */
    size_t max_header;        /* request line + headers, bytes (431); default 32 KiB, <= 80 KiB */
    unsigned max_connections; /* beyond it the oldest idle connection (no request arriving, no
                                 answer owed) is closed to make room; with none idle: accept,
                                 answer 503, close; default 1024 */
    unsigned request_timeout_ms; /* head not complete / body stalled this long: 408; default 30 s */
    unsigned idle_timeout_ms;    /* idle keep-alive connection closed; default 60 s */
    unsigned max_pipeline;       /* parsed, unanswered requests per connection; default 16 */
    size_t max_output; /* answer bytes queued on a connection and not yet taken by the socket:
                          beyond it no further request is read from that connection until the
                          client has taken all but a quarter of them (a client that pipelines
                          and never reads holds this much, not all it asked for); default 4 MiB */
    /* Optional, called on the loop thread once a request's head is parsed: the offset into the
     * body that should land 64-byte aligned in memory (KServe's binary tensors follow a JSON
     * header of known length, so they can be used in place). Honoured for Content-Length bodies
     * that are not compressed; NULL: the body itself starts aligned. */
    size_t (*body_align)(const http_req_t *req, void *user);
    /* Optional, both or neither: where those known plain bodies are allocated (e.g. page-locked
     * memory a GPU copies from directly); body_free gets them back when the request is freed.
     * Called on loop threads with body_user. */
    void *(*body_alloc)(size_t len, void *user);
    void (*body_free)(void *buf, void *user);
    void *body_user;
    /* SO_REUSEPORT, so that several servers (one per loop) listen on one port: the first says
     * HTTP_REUSE_FIRST (the port must not be in use by anyone else), the others
     * HTTP_REUSE_JOIN with the port the first one got. */
    int reuse_port;
} http_server_opts_t;

enum { HTTP_REUSE_NONE = 0, HTTP_REUSE_FIRST = 1, HTTP_REUSE_JOIN = 2 };

typedef struct {
    long open_connections;     /* accepted and not yet closed (rejected ones excluded) */
    long requests_in_flight;   /* handed to the handler, answer not yet written out */
    long requests_total;       /* handed to the handler since start */
    long connections_total;    /* accepted since start */
    long connections_rejected; /* over max_connections with none idle to close */
    long connections_evicted;  /* idle ones closed to make room for a new one */
    long bad_requests;         /* answered by the server itself with 4xx (400/408/413/417/431...) */
    long output_stalls;        /* times a connection stopped being read over max_output */
} http_server_stats_t;

typedef struct http_server http_server_t;

/* Binds and listens on `loop` (not yet running, or from its own thread). Several servers may
 * share a loop. HARK_OK; HARK_ERR_INVALID_ARG (bad host/options); HARK_ERR_IO (bind/listen). */
int http_server_create(uv_loop_t *loop, const http_server_opts_t *opts, http_server_t **out,
                       hark_err_t *err);
/* The bound port (useful with port 0). */
int http_server_port(const http_server_t *s);
/* Stops accepting new connections; existing ones carry on. Any thread. */
void http_server_stop_accepting(http_server_t *s);
/* Graceful shutdown, any thread: stop accepting, close idle connections, let requests already
 * received finish (their answers say Connection: close), and after deadline_ms close whatever
 * is left (unanswered requests are cancelled; see OWNERSHIP). Once everything is closed the
 * server holds no handle on the loop, so uv_run returns when nothing else keeps it alive. */
void http_server_shutdown(http_server_t *s, unsigned deadline_ms);
/* Counters, any thread. */
void http_server_stats(const http_server_t *s, http_server_stats_t *out);
/* Frees the server; only after its shutdown has completed (uv_run returned), or NULL. */
void http_server_destroy(http_server_t *s);

/* ---- socket-free request parser (used by the server, the fuzz target and tests) ------------ */

typedef struct {
    size_t max_body, max_header; /* as in http_server_opts_t (0: defaults) */
    size_t req_size;             /* bytes to allocate per request, >= sizeof(http_req_t); 0: that */
    size_t (*body_align)(const http_req_t *req, void *user); /* as in http_server_opts_t */
    void *user;                                              /* for body_align */
    void *(*body_alloc)(size_t len, void *user);             /* as in http_server_opts_t */
    void (*body_free)(void *buf, void *user);
    void *body_user;
} http_reqparser_opts_t;

typedef struct http_reqparser http_reqparser_t;

enum { HTTP_PARSE_MORE = 0, HTTP_PARSE_REQUEST = 1, HTTP_PARSE_ERROR = -1 };

http_reqparser_t *http_reqparser_create(const http_reqparser_opts_t *opts);
void http_reqparser_destroy(http_reqparser_t *p);
/* Feeds data[len] (len 0: the peer closed). Sets *used to the bytes consumed and returns
 * HTTP_PARSE_MORE (all consumed, request incomplete), HTTP_PARSE_REQUEST (a request is complete:
 * take it, then feed the remaining bytes), or HTTP_PARSE_ERROR (the stream cannot go on; status
 * and message from http_reqparser_error). After an upgrade request nothing more may be fed. */
int http_reqparser_feed(http_reqparser_t *p, const char *data, size_t len, size_t *used);
/* The completed request (caller owns it: http_req_free), or NULL. */
http_req_t *http_reqparser_take(http_reqparser_t *p);
/* Status (400, 413, 415, 417, 431, 500, 505) and message of the error. */
int http_reqparser_error(const http_reqparser_t *p, const char **msg);
/* 1 while a request has started arriving and is not complete. */
int http_reqparser_in_request(const http_reqparser_t *p);
/* 1 while the current request's headers are complete and its body is arriving. */
int http_reqparser_in_body(const http_reqparser_t *p);
/* Receiving in place: when the current request's body is a plain Content-Length one that has
 * started (its head is parsed), sets *dst to where its next bytes belong and returns how many
 * are still due; else returns 0. A caller may receive up to that many bytes straight into dst
 * and then feed them from there: they are kept where they are, not copied. */
size_t http_reqparser_body_window(http_reqparser_t *p, char **dst);
/* 1 if the current request asked for 100-continue and no body byte has arrived yet. */
int http_reqparser_wants_continue(const http_reqparser_t *p);
/* Frees a request made by the parser (arena, body, the request itself); NULL is fine. */
void http_req_free(http_req_t *req);

#endif
