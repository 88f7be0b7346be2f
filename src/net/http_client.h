/* http_client.h — a small blocking HTTP/1.1 keep-alive client (one connection per object):
 * connect with a timeout, one writev per request, responses parsed with http-parser
 * (Content-Length, chunked or until close), one reconnect when an idle keep-alive connection was
 * closed by the server. Tests: tests/net/test_http_client.c
 *
 * OWNERSHIP AND THREADS
 * - An http_client_t is used by one thread at a time. It only ever contacts the host and port it
 *   was created with (the address the user gave, or loopback).
 * - http_client_request() fills an http_response_t whose strings and body belong to the client
 *   and stay valid until the next request on it or http_client_destroy().
 */
#ifndef HARK_NET_HTTP_CLIENT_H
#define HARK_NET_HTTP_CLIENT_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

/* "http://host:port[/prefix]", "host:port", "http://host[/prefix]" (port 80) or "host" (port
 * 8000, the KServe default). IPv6 literals go in brackets. prefix has no trailing '/' ("" when
 * absent); requests go to prefix + path. Returns HARK_OK or HARK_ERR_INVALID_ARG (https, user
 * info, a bad port, an over-long host). */
typedef struct {
    char host[256];
    int port;
    char prefix[512];
} http_url_t;
int http_url_parse(const char *s, http_url_t *u, hark_err_t *err);

/* Zero means "default" for every field. */
typedef struct {
    unsigned connect_timeout_ms; /* default 5000 */
    unsigned timeout_ms; /* per request, from sending to the last body byte; default 60000 */
    size_t max_body;     /* responses larger than this fail; default 256 MiB */
} http_client_opts_t;

typedef struct {
    const char *name, *value;
} http_kv_t;

typedef struct {
    int status;
    const http_kv_t *headers; /* (n_headers), names as received */
    int n_headers;
    const uint8_t *body; /* (body_len) bytes, de-chunked, NUL after them */
    size_t body_len;
    int reused; /* 1: sent on a connection that had served an earlier request */
} http_response_t;

typedef struct http_client http_client_t;

/* Resolves nothing and connects nowhere yet (the first request connects). HARK_OK,
 * HARK_ERR_INVALID_ARG (no host / bad port), HARK_ERR_NOMEM. */
int http_client_create(const char *host, int port, const http_client_opts_t *opts,
                       http_client_t **out, hark_err_t *err);
void http_client_destroy(http_client_t *c); /* closes the connection; NULL is fine */

/* Sends `method path` with headers[n_headers] (Host, Content-Length and Connection are added;
 * don't pass them) and body[body_len] in one writev, and reads the whole response. When a reused
 * connection turns out closed (send fails, or EOF/reset before any response byte), reconnects
 * and sends once more. Returns HARK_OK (any HTTP status: check resp->status), HARK_ERR_IO
 * (connect/send/receive failed; the message names host:port), HARK_ERR_TIMEOUT,
 * HARK_ERR_FORMAT (malformed response), HARK_ERR_TOO_LARGE, HARK_ERR_NOMEM. After an error the
 * connection is closed; the next request reconnects. */
int http_client_request(http_client_t *c, const char *method, const char *path,
                        const http_kv_t *headers, int n_headers, const void *body, size_t body_len,
                        http_response_t *resp, hark_err_t *err);

/* Value of the first response header called `name` (case-insensitive), or NULL. */
const char *http_response_header(const http_response_t *r, const char *name);

/* Connections opened so far (tests check keep-alive reuse with it). */
long http_client_connects(const http_client_t *c);

#endif
