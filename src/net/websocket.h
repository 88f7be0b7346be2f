/* websocket.h — WebSocket connections (RFC 6455, framing by libwslay) taken over from the HTTP
 * server after an Upgrade request: one hub per event loop holds its connections, answers the
 * handshake, reads messages on the loop and sends messages queued from any thread.
 * Tests: tests/server/test_websocket.py (a real server, a raw-socket client)
 *
 * OWNERSHIP AND THREADS
 * - A hub belongs to its loop: create, accept and destroy on that loop's thread; ws_hub_shutdown
 *   and ws_send / ws_close / ws_conn_ref / ws_conn_unref from any thread.
 * - A ws_conn_t is refcounted: the hub holds one reference while it is open; the handler's
 *   on_close is the last callback (loop thread); a caller that keeps the connection for another
 *   thread takes its own reference (ws_conn_ref) and drops it when done. ws_send on a closed
 *   connection is dropped (HARK_ERR_CLOSED).
 * - Messages passed to on_message are lent for the call; ws_send copies its data.
 */
#ifndef HARK_NET_WEBSOCKET_H
#define HARK_NET_WEBSOCKET_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct uv_loop_s uv_loop_t;
typedef struct ws_hub ws_hub_t;
typedef struct ws_conn ws_conn_t;

typedef struct {
    /* a complete message (text: 1, binary: 0), loop thread */
    void (*on_message)(ws_conn_t *c, int text, const uint8_t *data, size_t len, void *user);
    /* the connection is closed (by the peer, an error, ws_close or the hub's shutdown) */
    void (*on_close)(ws_conn_t *c, void *user);
} ws_handler_t;

int ws_hub_create(uv_loop_t *loop, ws_hub_t **out, hark_err_t *err);
/* Closes every connection (and refuses new ones); any thread. */
void ws_hub_shutdown(ws_hub_t *h);
/* After the loop ended (every connection closed); accepts NULL. */
void ws_hub_destroy(ws_hub_t *h);

/* The Sec-WebSocket-Accept value of a client's Sec-WebSocket-Key (28 characters + NUL). */
void ws_accept_key(const char *key, char out[29]);

/* Takes over socket fd (the hub owns it from now on, also on failure): writes the 101 answer for
 * the client's key and starts reading. Loop thread. HARK_ERR_CLOSED after shutdown, HARK_ERR_IO. */
int ws_accept(ws_hub_t *h, int fd, const char *key, const ws_handler_t *handler, void *user,
              ws_conn_t **out, hark_err_t *err);

/* Queues a message (copied); any thread. HARK_ERR_CLOSED when the connection is gone. */
int ws_send(ws_conn_t *c, int text, const void *data, size_t len);
/* Closes with a close frame after what is queued; any thread. */
void ws_close(ws_conn_t *c);
void ws_conn_ref(ws_conn_t *c);
void ws_conn_unref(ws_conn_t *c);

#endif
