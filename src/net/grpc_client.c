/* grpc_client.c — blocking gRPC unary calls over one nghttp2 client session on a plain socket
 * (see grpc_client.h). Tests: tests/net/test_grpc_client.c, tests/server/test_grpc.py */
#include "net/grpc_client.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define INT32_MAX_MSG ((size_t)0x7fffffff)

struct grpc_client {
    char host[256];
    int port;
    unsigned timeout_ms;
    int fd;
    nghttp2_session *sess;
    /* the call in progress */
    int32_t stream_id;
    const uint8_t *out;
    size_t out_len, out_off;
    uint8_t *in;
    size_t in_len, in_cap;
    int done, status, have_status, failed;
    char msg[512];
};

int grpc_client_create(const char *host, int port, unsigned timeout_ms, grpc_client_t **out,
                       hark_err_t *err)
{
    *out = NULL;
    if (!host || !host[0] || strlen(host) >= 256 || port <= 0 || port > 65535)
        return err_set(err, HARK_ERR_INVALID_ARG, "grpc: bad host or port");
    grpc_client_t *c = hark_calloc(1, sizeof *c);
    if (!c)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    c->timeout_ms = timeout_ms ? timeout_ms : 60000;
    c->fd = -1;
    *out = c;
    return HARK_OK;
}

static void drop(grpc_client_t *c)
{
    if (c->sess)
        nghttp2_session_del(c->sess);
    c->sess = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

void grpc_client_destroy(grpc_client_t *c)
{
    if (!c)
        return;
    drop(c);
    hark_free(c->in);
    hark_free(c);
}

/* ---- nghttp2 callbacks ---------------------------------------------------------------------- */

static ssize_t read_req(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                        uint32_t *flags, nghttp2_data_source *src, void *user)
{
    grpc_client_t *c = user;
    size_t n = c->out_len - c->out_off;
    if (n > length)
        n = length;
    memcpy(buf, c->out + c->out_off, n);
    c->out_off += n;
    if (c->out_off == c->out_len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* DATA frames as large as the flow-control windows and the server's SETTINGS_MAX_FRAME_SIZE
 * allow (nghttp2 sends 16 KiB frames otherwise): fewer frames, and fewer writes in pump_send */
static ssize_t read_len(nghttp2_session *s, uint8_t type, int32_t id, int32_t conn_window,
                        int32_t stream_window, uint32_t max_frame, void *user)
{
    (void)s, (void)type, (void)id, (void)user;
    int64_t n = conn_window < stream_window ? conn_window : stream_window;
    if ((int64_t)max_frame < n)
        n = max_frame;
    return n > 0 ? (ssize_t)n : 1;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user)
{
    grpc_client_t *c = user;
    if (id != c->stream_id)
        return 0;
    if (c->in_len + len > c->in_cap) {
        size_t nc = c->in_cap ? c->in_cap : 65536;
        while (nc < c->in_len + len)
            nc *= 2;
        uint8_t *nb = hark_realloc(c->in, nc);
        if (!nb) {
            c->failed = HARK_ERR_NOMEM;
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        c->in = nb;
        c->in_cap = nc;
    }
    memcpy(c->in + c->in_len, data, len);
    c->in_len += len;
    return 0;
}

static int hexval(int ch)
{
    return ch >= '0' && ch <= '9'   ? ch - '0'
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                    : -1;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    grpc_client_t *c = user;
    if (f->hd.stream_id != c->stream_id)
        return 0;
    if (nlen == 11 && !memcmp(name, "grpc-status", 11)) {
        c->status = 0;
        for (size_t i = 0; i < vlen && i < 4; i++)
            c->status = c->status * 10 + (value[i] - '0');
        c->have_status = 1;
    } else if (nlen == 12 && !memcmp(name, "grpc-message", 12)) {
        size_t o = 0;
        for (size_t i = 0; i < vlen && o + 1 < sizeof c->msg; i++) {
            int h1, h2;
            if (value[i] == '%' && i + 2 < vlen && (h1 = hexval(value[i + 1])) >= 0 &&
                (h2 = hexval(value[i + 2])) >= 0) {
                c->msg[o++] = (char)(h1 * 16 + h2);
                i += 2;
            } else {
                c->msg[o++] = (char)value[i];
            }
        }
        c->msg[o] = 0;
    }
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    grpc_client_t *c = user;
    if (id == c->stream_id) {
        c->done = 1;
        if (!c->have_status && code) {
            c->have_status = 1;
            c->status = code == NGHTTP2_REFUSED_STREAM ? 14 : code == NGHTTP2_CANCEL ? 1 : 13;
            snprintf(c->msg, sizeof c->msg, "stream reset (HTTP/2 error %u)", code);
        }
    }
    return 0;
}

static int connect_to(grpc_client_t *c, uint64_t deadline, hark_err_t *err)
{
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(c->host, port, &hints, &res) || !res)
        return err_set(err, HARK_ERR_IO, "grpc: cannot resolve %s", c->host);
    int fd = -1, rc = HARK_ERR_IO;
    for (struct addrinfo *a = res; a && rc; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            uint64_t now = clock_now_ns();
            int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
            int e = 0;
            socklen_t el = sizeof e;
            if (poll(&p, 1, ms) == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) && !e) {
                rc = HARK_OK;
                break;
            }
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (rc)
        return err_set(err, HARK_ERR_IO, "grpc: cannot connect to %s:%d", c->host, c->port);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb)) {
        close(fd);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_data_source_read_length_callback(cb, read_len);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    int r = nghttp2_session_client_new(&c->sess, cb, c);
    nghttp2_session_callbacks_del(cb);
    if (r) {
        close(fd);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    c->fd = fd;
    /* INT32_MAX messages: large flow-control windows, no header-list surprises */
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 24},
                                   {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                   {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, 3);
    nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, 1 << 30);
    return HARK_OK;
}

/* writes what nghttp2 has queued (blocking with the deadline) */
static int pump_send(grpc_client_t *c, uint64_t deadline)
{
    for (;;) {
        const uint8_t *d;
        ssize_t n = nghttp2_session_mem_send(c->sess, &d);
        if (n < 0)
            return HARK_ERR_IO;
        if (n == 0)
            return HARK_OK;
        size_t off = 0;
        while (off < (size_t)n) {
            ssize_t w = send(c->fd, d + off, (size_t)n - off, MSG_NOSIGNAL);
            if (w > 0) {
                off += (size_t)w;
                continue;
            }
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                return HARK_ERR_IO;
            uint64_t now = clock_now_ns();
            if (now >= deadline)
                return HARK_ERR_TIMEOUT;
            struct pollfd p = {c->fd, POLLOUT, 0};
            poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
        }
    }
}

int grpc_client_call(grpc_client_t *c, const char *method, const uint8_t *req, size_t len,
                     uint8_t **resp, size_t *resp_len, int *status, char *msg, size_t cap,
                     hark_err_t *err)
{
    *resp = NULL;
    *resp_len = 0;
    if (len > INT32_MAX_MSG)
        return err_set(err, HARK_ERR_TOO_LARGE, "grpc: request message over 2 GiB");
    uint64_t deadline = clock_now_ns() + (uint64_t)c->timeout_ms * 1000000;
    int rc;
    if (!c->sess && (rc = connect_to(c, deadline, err)))
        return rc;
    uint8_t *frame = hark_malloc(len + 5);
    if (!frame)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    frame[0] = 0;
    frame[1] = (uint8_t)(len >> 24);
    frame[2] = (uint8_t)(len >> 16);
    frame[3] = (uint8_t)(len >> 8);
    frame[4] = (uint8_t)len;
    if (len)
        memcpy(frame + 5, req, len);
    c->out = frame;
    c->out_len = len + 5;
    c->out_off = 0;
    c->in_len = 0;
    c->done = c->have_status = c->status = c->failed = 0;
    c->msg[0] = 0;
    char authority[300], tmo[32];
    snprintf(authority, sizeof authority, "%s:%d", c->host, c->port);
    snprintf(tmo, sizeof tmo, "%um", c->timeout_ms);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nva[] = {NV(":method", "POST"),
                        NV(":scheme", "http"),
                        NV(":path", method),
                        NV(":authority", authority),
                        NV("content-type", "application/grpc"),
                        NV("te", "trailers"),
                        NV("grpc-timeout", tmo),
                        NV("user-agent", "hark-grpc")};
#undef NV
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = read_req};
    c->stream_id = nghttp2_submit_request(c->sess, NULL, nva, sizeof nva / sizeof nva[0], &prd, c);
    if (c->stream_id < 0) {
        hark_free(frame);
        drop(c);
        return err_set(err, HARK_ERR_IO, "grpc: cannot start a stream");
    }
    rc = HARK_OK;
    uint8_t buf[65536];
    while (!c->done) {
        if ((rc = pump_send(c, deadline)))
            break;
        if (!nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess)) {
            rc = HARK_ERR_IO;
            break;
        }
        uint64_t now = clock_now_ns();
        if (now >= deadline) {
            rc = HARK_ERR_TIMEOUT;
            break;
        }
        struct pollfd p = {c->fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
        if (pr <= 0)
            continue;
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            rc = HARK_ERR_IO;
            break;
        }
        if (n > 0 && nghttp2_session_mem_recv(c->sess, buf, (size_t)n) < 0) {
            rc = c->failed ? c->failed : HARK_ERR_IO;
            break;
        }
    }
    hark_free(frame);
    c->out = NULL;
    if (rc) {
        drop(c);
        return err_set(err, rc,
                       rc == HARK_ERR_TIMEOUT ? "grpc: %s timed out after %u ms"
                                              : "grpc: %s: connection failed (%u ms limit)",
                       method, c->timeout_ms);
    }
    pump_send(c, deadline); /* window updates, acks */
    *status = c->have_status ? c->status : 13;
    snprintf(msg, cap, "%s", c->have_status ? c->msg : "no grpc-status in the answer");
    if (*status == 0) {
        if (c->in_len < 5 || c->in[0] != 0 ||
            ((size_t)c->in[1] << 24 | (size_t)c->in[2] << 16 | (size_t)c->in[3] << 8 | c->in[4]) !=
                c->in_len - 5) {
            *status = 13;
            snprintf(msg, cap, "malformed response message");
            return HARK_OK;
        }
        *resp = hark_malloc(c->in_len - 5 + 1);
        if (!*resp)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        memcpy(*resp, c->in + 5, c->in_len - 5);
        *resp_len = c->in_len - 5;
    }
    return HARK_OK;
}
