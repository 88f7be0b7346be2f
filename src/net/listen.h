/* listen.h — a listening TCP socket for hark's servers (HTTP/1.1, HTTP/2): host name or literal
 * resolved, SO_REUSEADDR, and SO_REUSEPORT so that several event loops accept on one port (the
 * kernel spreads the connections over them). Plain system calls, so that a failure leaves no
 * libuv handle to close; the caller hands the descriptor to uv_tcp_open.
 * Tests: tests/net/test_http_server.c (http_reuse_port_*), tests/net/test_http2.c */
#ifndef HARK_NET_LISTEN_H
#define HARK_NET_LISTEN_H

#include "core/error.h"

/* reuse: NET_REUSE_NONE; NET_REUSE_FIRST for the first of a group (the port must not be in use
 * by anyone else, with SO_REUSEPORT or without); NET_REUSE_JOIN for the others, on the port the
 * first one got. */
enum { NET_REUSE_NONE = 0, NET_REUSE_FIRST = 1, NET_REUSE_JOIN = 2 };

/* Resolves host ("127.0.0.1", "::1", "localhost") and port into a sockaddr_storage.
 * HARK_ERR_INVALID_ARG naming the host (who: "http", "gRPC" in messages). */
struct sockaddr_storage;
int net_resolve(const char *host, int port, struct sockaddr_storage *ss, const char *who,
                hark_err_t *err);

/* A non-blocking, close-on-exec socket bound to host:port and listening (backlog 511): *fd, and
 * *bound_port (the one the kernel gave for port 0). HARK_ERR_IO naming the call that failed. */
int net_listen(const char *host, int port, int reuse, const char *who, int *fd, int *bound_port,
               hark_err_t *err);

#endif
