/* websocket.c — WebSocket connections over libwslay on a libuv loop (uv_poll_t on the socket,
 * wslay's callbacks reading and writing it), cross-thread sends through one uv_async per hub.
 * Tests: tests/server/test_websocket.py */
#include "net/websocket.h"

#include "core/alloc.h"
#include "core/base64.h"
#include "core/log.h"
#include "hark.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>
#include <wslay/wslay.h>

#define WS_MAX_MESSAGE ((uint64_t)16 << 20)

typedef struct out_msg {
    struct out_msg *next;
    int text, close;
    size_t len;
    uint8_t data[];
} out_msg_t;

struct ws_conn {
    atomic_int refs;
    ws_hub_t *hub;
    int fd;
    uv_poll_t poll;
    wslay_event_context_ptr ctx;
    ws_handler_t handler;
    void *user;
    ws_conn_t *prev, *next; /* the hub's list (loop thread) */
    /* under hub->mu */
    int closed; /* no more sends accepted */
    out_msg_t *out, **out_tail;
    int in_pending; /* on the hub's pending list */
    ws_conn_t *pending_next;
    /* loop thread */
    int closing, events;
    int close_req; /* ws_close: the close frame goes once the queued messages are out (wslay sends
                      control frames first) */
};

struct ws_hub {
    uv_loop_t *loop;
    uv_async_t async;
    pthread_mutex_t mu;
    ws_conn_t *pending; /* connections with queued messages (referenced) */
    atomic_int shutdown;
    ws_conn_t *conns; /* loop thread */
    int async_open;
};

/* ---- SHA-1 for the handshake (RFC 3174) ------------------------------- */

static uint32_t rol(uint32_t x, int n)
{
    return x << n | x >> (32 - n);
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++)
        w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20)
            f = (b & c) | (~b & d), k = 0x5A827999;
        else if (i < 40)
            f = b ^ c ^ d, k = 0x6ED9EBA1;
        else if (i < 60)
            f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
        else
            f = b ^ c ^ d, k = 0xCA62C1D6;
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

static void sha1(const uint8_t *msg, size_t len, uint8_t out[20])
{
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    size_t i = 0;
    for (; i + 64 <= len; i += 64)
        sha1_block(h, msg + i);
    uint8_t tail[128] = {0};
    size_t r = len - i;
    memcpy(tail, msg + i, r);
    tail[r] = 0x80;
    size_t tl = r + 9 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int k = 0; k < 8; k++)
        tail[tl - 1 - k] = (uint8_t)(bits >> (8 * k));
    sha1_block(h, tail);
    if (tl == 128)
        sha1_block(h, tail + 64);
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 4; j++)
            out[4 * k + j] = (uint8_t)(h[k] >> (24 - 8 * j));
}

void ws_accept_key(const char *key, char out[29])
{
    static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    uint8_t buf[256], d[20];
    size_t kl = strlen(key);
    if (kl > sizeof buf - sizeof GUID)
        kl = sizeof buf - sizeof GUID;
    memcpy(buf, key, kl);
    memcpy(buf + kl, GUID, sizeof GUID - 1);
    sha1(buf, kl + sizeof GUID - 1, d);
    base64_encode(d, sizeof d, out); /* 28 characters and the NUL */
}

/* ---- connections (loop thread unless said) -------------------------------------------------- */

void ws_conn_ref(ws_conn_t *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void out_free(out_msg_t *m)
{
    while (m) {
        out_msg_t *n = m->next;
        hark_free(m);
        m = n;
    }
}

void ws_conn_unref(ws_conn_t *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        out_free(c->out);
        hark_free(c);
    }
}

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    ws_conn_t *c = user;
    ssize_t r;
    while ((r = read(c->fd, buf, len)) < 0 && errno == EINTR)
        ;
    if (r < 0) {
        wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK
                                       ? WSLAY_ERR_WOULDBLOCK
                                       : WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    if (r == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    ws_conn_t *c = user;
    ssize_t r;
    while ((r = send(c->fd, data, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    if (r < 0) {
        wslay_event_set_error(ctx, errno == EAGAIN || errno == EWOULDBLOCK
                                       ? WSLAY_ERR_WOULDBLOCK
                                       : WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *user)
{
    ws_conn_t *c = user;
    if (c->closing || wslay_is_ctrl_frame(arg->opcode))
        return; /* wslay answers pings and close frames itself */
    c->handler.on_message(c, arg->opcode == WSLAY_TEXT_FRAME, arg->msg, arg->msg_length, c->user);
}

static void conn_closed_cb(uv_handle_t *h)
{
    ws_conn_t *c = h->data;
    wslay_event_context_free(c->ctx);
    close(c->fd);
    c->handler.on_close(c, c->user);
    ws_conn_unref(c); /* the hub's */
}

static void conn_close(ws_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    ws_hub_t *h = c->hub;
    pthread_mutex_lock(&h->mu);
    c->closed = 1;
    pthread_mutex_unlock(&h->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_poll_stop(&c->poll);
    uv_close((uv_handle_t *)&c->poll, conn_closed_cb);
}

static void on_poll(uv_poll_t *p, int status, int events);

/* re-arms the poll for what wslay wants; closes when it wants nothing more */
static void conn_update(ws_conn_t *c)
{
    if (c->closing)
        return;
    if (c->close_req && wslay_event_get_queued_msg_count(c->ctx) == 0) {
        c->close_req = 0;
        if (wslay_event_queue_close(c->ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0) != 0 ||
            wslay_event_send(c->ctx) != 0) {
            conn_close(c);
            return;
        }
    }
    int ev = (wslay_event_want_read(c->ctx) ? UV_READABLE : 0) |
             (wslay_event_want_write(c->ctx) ? UV_WRITABLE : 0);
    if (!ev) {
        conn_close(c);
        return;
    }
    if (ev != c->events) {
        c->events = ev;
        uv_poll_start(&c->poll, ev, on_poll);
    }
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    ws_conn_t *c = p->data;
    if (status < 0 || (events & UV_DISCONNECT)) {
        conn_close(c);
        return;
    }
    if (((events & UV_READABLE) && wslay_event_recv(c->ctx) != 0) ||
        ((events & UV_WRITABLE) && wslay_event_send(c->ctx) != 0)) {
        conn_close(c);
        return;
    }
    conn_update(c);
}

/* the hub's wake-up: messages queued by other threads go to their connections */
static void on_async(uv_async_t *a)
{
    ws_hub_t *h = a->data;
    int shutdown = atomic_load(&h->shutdown);
    pthread_mutex_lock(&h->mu);
    ws_conn_t *list = h->pending;
    h->pending = NULL;
    pthread_mutex_unlock(&h->mu);
    while (list) {
        ws_conn_t *c = list, *next = c->pending_next;
        pthread_mutex_lock(&h->mu);
        out_msg_t *m = c->out;
        c->out = NULL;
        c->out_tail = &c->out;
        c->in_pending = 0;
        pthread_mutex_unlock(&h->mu);
        for (out_msg_t *x = m; x && !c->closing; x = x->next) {
            if (x->close) {
                c->close_req = 1;
                continue;
            }
            struct wslay_event_msg wm = {x->text ? WSLAY_TEXT_FRAME : WSLAY_BINARY_FRAME, x->data,
                                         x->len};
            if (wslay_event_queue_msg(c->ctx, &wm) != 0) {
                conn_close(c);
                break;
            }
        }
        out_free(m);
        if (!c->closing && wslay_event_send(c->ctx) != 0)
            conn_close(c);
        conn_update(c);
        ws_conn_unref(c); /* the pending list's */
        list = next;
    }
    if (shutdown) { /* every connection closed, then this handle, so that the loop can end */
        while (h->conns)
            conn_close(h->conns);
        if (h->async_open) {
            h->async_open = 0;
            uv_close((uv_handle_t *)&h->async, NULL);
        }
    }
}

static int enqueue(ws_conn_t *c, out_msg_t *m)
{
    ws_hub_t *h = c->hub;
    pthread_mutex_lock(&h->mu);
    if (c->closed) {
        pthread_mutex_unlock(&h->mu);
        hark_free(m);
        return HARK_ERR_CLOSED;
    }
    *c->out_tail = m;
    c->out_tail = &m->next;
    if (!c->in_pending) {
        c->in_pending = 1;
        ws_conn_ref(c);
        c->pending_next = h->pending;
        h->pending = c;
    }
    pthread_mutex_unlock(&h->mu);
    uv_async_send(&h->async);
    return HARK_OK;
}

int ws_send(ws_conn_t *c, int text, const void *data, size_t len)
{
    out_msg_t *m = hark_malloc(sizeof *m + len + 1);
    if (!m)
        return HARK_ERR_NOMEM;
    m->next = NULL;
    m->text = text;
    m->close = 0;
    m->len = len;
    if (len)
        memcpy(m->data, data, len);
    return enqueue(c, m);
}

void ws_close(ws_conn_t *c)
{
    out_msg_t *m = hark_calloc(1, sizeof *m);
    if (m) {
        m->close = 1;
        enqueue(c, m);
    }
}

int ws_accept(ws_hub_t *h, int fd, const char *key, const ws_handler_t *handler, void *user,
              ws_conn_t **out, hark_err_t *err)
{
    *out = NULL;
    if (atomic_load(&h->shutdown)) {
        close(fd);
        return err_set(err, HARK_ERR_CLOSED, "the server is shutting down");
    }
    char acc[29], head[256];
    ws_accept_key(key, acc);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                     acc);
    ssize_t w;
    while ((w = send(fd, head, (size_t)n, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    if (w != n) {
        close(fd);
        return err_set(err, HARK_ERR_IO, "websocket: the handshake answer could not be written");
    }
    ws_conn_t *c = hark_calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    atomic_init(&c->refs, 1);
    c->hub = h;
    c->fd = fd;
    c->handler = *handler;
    c->user = user;
    c->out_tail = &c->out;
    struct wslay_event_callbacks cb = {on_recv, on_send, NULL, NULL, NULL, NULL, on_msg};
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (wslay_event_context_server_init(&c->ctx, &cb, c) != 0) {
        close(fd);
        hark_free(c);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    wslay_event_config_set_max_recv_msg_length(c->ctx, WS_MAX_MESSAGE);
    if (uv_poll_init(h->loop, &c->poll, fd) != 0) {
        wslay_event_context_free(c->ctx);
        close(fd);
        hark_free(c);
        return err_set(err, HARK_ERR_IO, "websocket: cannot poll the socket");
    }
    c->poll.data = c;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    c->events = UV_READABLE;
    uv_poll_start(&c->poll, UV_READABLE, on_poll);
    *out = c;
    return HARK_OK;
}

/* ---- hubs ----------------------------------------------------------------------------------- */

int ws_hub_create(uv_loop_t *loop, ws_hub_t **out, hark_err_t *err)
{
    ws_hub_t *h = hark_calloc(1, sizeof *h);
    if (!h)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    h->loop = loop;
    pthread_mutex_init(&h->mu, NULL);
    if (uv_async_init(loop, &h->async, on_async) != 0) {
        pthread_mutex_destroy(&h->mu);
        hark_free(h);
        return err_set(err, HARK_ERR_IO, "websocket: uv_async_init failed");
    }
    h->async.data = h;
    h->async_open = 1;
    *out = h;
    return HARK_OK;
}

void ws_hub_shutdown(ws_hub_t *h)
{
    if (!h || atomic_exchange(&h->shutdown, 1))
        return;
    uv_async_send(&h->async); /* on_async closes everything on the loop */
}

void ws_hub_destroy(ws_hub_t *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    ws_conn_t *p = h->pending;
    h->pending = NULL;
    pthread_mutex_unlock(&h->mu);
    while (p) {
        ws_conn_t *n = p->pending_next;
        ws_conn_unref(p);
        p = n;
    }
    pthread_mutex_destroy(&h->mu);
    hark_free(h);
}
