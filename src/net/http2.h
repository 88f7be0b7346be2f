/* http2.h — HTTP/2 server (nghttp2) on libuv for gRPC: listener, per-connection sessions,
 * SETTINGS_MAX_CONCURRENT_STREAMS, idle timeout, graceful shutdown (GOAWAY, drain, close), and
 * answers produced on any thread that reach the socket only through the loop.
 * Tests: tests/net/test_http2.c, tests/server/test_grpc.py; fuzz: tests/fuzz/fuzz_grpc.c
 *
 * OWNERSHIP AND THREADS
 * - Streams are refcounted records owned by the server. The handler's callbacks run on the loop
 *   thread; a handler that answers later (from any thread) takes a reference with
 *   http2_stream_ref and drops it with http2_stream_unref once it will not answer again.
 * - http2_stream_send* may be called from any thread: the headers, data and trailers are queued
 *   to the stream's loop, and a uv_async wakes the loop, which alone hands them to nghttp2 and
 *   writes the socket. Data buffers passed to them are taken (hark_free'd once sent or dropped).
 * - When the client resets the stream or the connection closes, the stream's cancelled flag
 *   (http2_stream_cancelled_flag) becomes 1 and on_close runs; answers queued after that are
 *   dropped (and freed) safely, as long as the sender still holds its reference.
 * - Server functions are loop-thread only except http2_server_shutdown (any thread).
 */
#ifndef HARK_NET_HTTP2_H
#define HARK_NET_HTTP2_H

#include "core/error.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct uv_loop_s uv_loop_t;
typedef struct http2_server http2_server_t;
typedef struct http2_stream http2_stream_t;
typedef struct http2_conn http2_conn_t;

typedef struct {
    const char *name, *value; /* NUL-terminated */
} http2_header_t;

typedef struct {
    /* Request headers are complete (pseudo-headers :method, :path via http2_stream_header).
     * Return 0, or non-zero to reset the stream. */
    int (*on_headers)(http2_stream_t *st, void *user);
    /* A piece of the request body (DATA). Return 0, or non-zero to reset the stream. */
    int (*on_data)(http2_stream_t *st, const uint8_t *data, size_t len, void *user);
    /* The client finished its side (END_STREAM). */
    void (*on_end)(http2_stream_t *st, void *user);
    /* The stream is gone (answered and closed, reset, or its connection closed); the stream
     * record stays valid while references remain. Called once per stream that saw on_headers. */
    void (*on_close)(http2_stream_t *st, void *user);
} http2_handler_t;

typedef struct {
    const char *host;        /* NULL: "127.0.0.1" */
    int port;                /* 0: ephemeral (http2_server_port) */
    http2_handler_t handler; /* required */
    void *user;
    unsigned max_streams;     /* SETTINGS_MAX_CONCURRENT_STREAMS; default 100 */
    unsigned max_connections; /* default 1024 */
    unsigned idle_timeout_ms; /* connection with no open stream closed; default 300 s */
    size_t max_header_list;   /* bytes; default 64 KiB */
    int reuse_port;           /* NET_REUSE_* (net/listen.h): several loops on one port */
} http2_server_opts_t;

/* Binds and listens (loop non-NULL), or with loop NULL makes a socket-free server whose
 * connections are fed with http2_conn_feed (tests, fuzzing). HARK_OK, HARK_ERR_IO. */
int http2_server_create(uv_loop_t *loop, const http2_server_opts_t *o, http2_server_t **out,
                        hark_err_t *err);
int http2_server_port(const http2_server_t *s);
/* Graceful shutdown from any thread: stop listening, GOAWAY every connection, let open streams
 * finish, close what is left after deadline_ms. The server then holds no handle on the loop. */
void http2_server_shutdown(http2_server_t *s, unsigned deadline_ms);
/* After uv_run has returned (or for a socket-free server, any time on its thread); NULL ok. */
void http2_server_destroy(http2_server_t *s);

/* ---- socket-free connections (loop NULL) ---------------------------------------------------- */
typedef void (*http2_write_fn)(void *user, const uint8_t *data, size_t len);
http2_conn_t *http2_conn_open(http2_server_t *s, http2_write_fn write, void *user);
/* Feeds received bytes; answers queued so far are applied and written. Returns 0, or -1 when
 * the connection is finished (protocol error: GOAWAY was written) — then close it. */
int http2_conn_feed(http2_conn_t *c, const uint8_t *data, size_t len);
/* Applies queued answers of a socket-free server (the loop does it on a real one). */
void http2_server_poll(http2_server_t *s);
void http2_conn_close(http2_conn_t *c);

/* ---- streams -------------------------------------------------------------------------------- */
/* Value of request header `name` (lower case; ":path" etc. for pseudo-headers), or NULL. Loop
 * thread, from on_headers on. */
const char *http2_stream_header(const http2_stream_t *st, const char *name);
void *http2_stream_user(const http2_stream_t *st);
void http2_stream_set_user(http2_stream_t *st, void *user);
void http2_stream_ref(http2_stream_t *st);   /* any thread */
void http2_stream_unref(http2_stream_t *st); /* any thread */
/* 1 once reset/closed (any thread); also as a flag to pass to service_infer. */
const atomic_int *http2_stream_cancelled_flag(const http2_stream_t *st);

/* Any thread. Response headers (":status" is added: 200) — at most once, before any data. */
int http2_stream_send_headers(http2_stream_t *st, const http2_header_t *h, int n);
/* Any thread. DATA bytes (taken; hark_free'd). Headers must have been sent first. */
int http2_stream_send_data(http2_stream_t *st, uint8_t *data, size_t len);
/* Any thread. Ends the stream with trailers (copied); n == 0: END_STREAM on the data. When no
 * headers were sent yet, the trailers go as a headers-only response (gRPC Trailers-Only). */
int http2_stream_send_trailers(http2_stream_t *st, const http2_header_t *t, int n);

#endif
