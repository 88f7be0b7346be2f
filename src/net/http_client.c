/* http_client.c — blocking HTTP/1.1 keep-alive client on a non-blocking socket + poll, responses
 * parsed with http-parser. Tests: tests/net/test_http_client.c */
#include "net/http_client.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"

#include <errno.h>
#include <fcntl.h>
#include <http_parser.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- URLs ------------------------------------------------------------------------------------ */

int http_url_parse(const char *s, http_url_t *u, hark_err_t *err)
{
    memset(u, 0, sizeof *u);
    if (!s || !*s)
        return err_set(err, HARK_ERR_INVALID_ARG, "empty URL");
    const char *p = s;
    int dflt_port = 8000;
    if (!strncasecmp(p, "https://", 8))
        return err_set(err, HARK_ERR_UNSUPPORTED, "%s: https is not supported (plain http only)",
                       s);
    if (!strncasecmp(p, "http://", 7)) {
        p += 7;
        dflt_port = 80;
    } else if (strstr(p, "://")) {
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: only http:// URLs are supported", s);
    }
    const char *slash = strchr(p, '/');
    size_t auth_len = slash ? (size_t)(slash - p) : strlen(p);
    if (memchr(p, '@', auth_len))
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: user info in URLs is not supported", s);
    const char *host = p, *port = NULL;
    size_t host_len;
    if (*p == '[') { /* [v6]:port */
        const char *close = memchr(p, ']', auth_len);
        if (!close)
            return err_set(err, HARK_ERR_INVALID_ARG, "%s: unterminated '[' in the host", s);
        host = p + 1;
        host_len = (size_t)(close - host);
        if (close + 1 < p + auth_len) {
            if (close[1] != ':')
                return err_set(err, HARK_ERR_INVALID_ARG, "%s: expected ':' after ']'", s);
            port = close + 2;
        }
    } else {
        const char *colon = memchr(p, ':', auth_len);
        host_len = colon ? (size_t)(colon - p) : auth_len;
        port = colon ? colon + 1 : NULL;
    }
    if (host_len == 0 || host_len >= sizeof u->host)
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: %s host name", s,
                       host_len ? "over-long" : "no");
    memcpy(u->host, host, host_len);
    u->port = dflt_port;
    if (port) {
        const char *end = p + auth_len;
        long v = 0;
        if (port == end)
            return err_set(err, HARK_ERR_INVALID_ARG, "%s: empty port", s);
        for (const char *q = port; q < end; q++) {
            if (*q < '0' || *q > '9' || (v = v * 10 + (*q - '0')) > 65535)
                return err_set(err, HARK_ERR_INVALID_ARG, "%s: bad port", s);
        }
        if (v == 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "%s: bad port 0", s);
        u->port = (int)v;
    }
    if (slash) {
        size_t n = strlen(slash);
        while (n && slash[n - 1] == '/')
            n--;
        if (n >= sizeof u->prefix)
            return err_set(err, HARK_ERR_INVALID_ARG, "%s: over-long path prefix", s);
        memcpy(u->prefix, slash, n);
    }
    return HARK_OK;
}

/* ---- the client ------------------------------------------------------------------------------ */

struct http_client {
    char host[256];
    char host_hdr[300]; /* Host: header value */
    int port;
    http_client_opts_t o;
    int fd;     /* -1: not connected */
    int served; /* requests answered on this connection */
    long connects;

    /* the current response */
    http_parser parser;
    http_parser_settings settings;
    char *hbuf; /* header names and values, NUL-separated; offsets in hoff */
    size_t hlen, hcap;
    size_t *hoff; /* (2 * n_headers): name, value offsets */
    int nh, hoff_cap, in_value;
    http_kv_t *kv;
    int kv_cap;
    uint8_t *body;
    size_t blen, bcap;
    int complete, too_large, oom;
};

int http_client_create(const char *host, int port, const http_client_opts_t *opts,
                       http_client_t **out, hark_err_t *err)
{
    *out = NULL;
    if (!host || !*host || strlen(host) >= sizeof((http_client_t *)0)->host)
        return err_set(err, HARK_ERR_INVALID_ARG, "http client: bad host name");
    if (port < 1 || port > 65535)
        return err_set(err, HARK_ERR_INVALID_ARG, "http client: bad port %d", port);
    http_client_t *c = hark_calloc(1, sizeof *c);
    if (!c)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    snprintf(c->host, sizeof c->host, "%s", host);
    if (strchr(host, ':'))
        snprintf(c->host_hdr, sizeof c->host_hdr, "[%s]:%d", host, port);
    else
        snprintf(c->host_hdr, sizeof c->host_hdr, "%s:%d", host, port);
    c->port = port;
    if (opts)
        c->o = *opts;
    if (!c->o.connect_timeout_ms)
        c->o.connect_timeout_ms = 5000;
    if (!c->o.timeout_ms)
        c->o.timeout_ms = 60000;
    if (!c->o.max_body)
        c->o.max_body = (size_t)256 << 20;
    c->fd = -1;
    *out = c;
    return HARK_OK;
}

static void conn_close(http_client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->served = 0;
}

void http_client_destroy(http_client_t *c)
{
    if (!c)
        return;
    conn_close(c);
    hark_free(c->hbuf);
    hark_free(c->hoff);
    hark_free(c->kv);
    hark_free(c->body);
    hark_free(c);
}

long http_client_connects(const http_client_t *c)
{
    return c->connects;
}

static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = clock_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error (errno). */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        int left = ms_left(deadline_ns);
        if (left == 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left);
        if (r > 0)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

static int conn_open(http_client_t *c, hark_err_t *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char port[8];
    snprintf(port, sizeof port, "%d", c->port);
    int gai = getaddrinfo(c->host, port, &hints, &res);
    if (gai)
        return err_set(err, HARK_ERR_IO, "%s: cannot resolve: %s", c->host_hdr, gai_strerror(gai));
    uint64_t deadline = clock_now_ns() + (uint64_t)c->o.connect_timeout_ms * 1000000u;
    int rc = HARK_ERR_IO, last_errno = 0, timed_out = 0;
    for (struct addrinfo *a = res; a && c->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            if (errno != EINPROGRESS) {
                last_errno = errno;
                close(fd);
                continue;
            }
            int w = wait_fd(fd, POLLOUT, deadline);
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            if (w <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr) {
                if (w == 0)
                    timed_out = 1;
                last_errno = w < 0 ? errno : soerr;
                close(fd);
                continue;
            }
        }
        c->fd = fd;
        c->served = 0;
        c->connects++;
        rc = HARK_OK;
    }
    freeaddrinfo(res);
    if (rc) {
        if (timed_out)
            return err_set(err, HARK_ERR_TIMEOUT, "%s: connect timed out after %u ms", c->host_hdr,
                           c->o.connect_timeout_ms);
        return err_set(err, HARK_ERR_IO, "%s: cannot connect: %s", c->host_hdr,
                       strerror(last_errno ? last_errno : ECONNREFUSED));
    }
    return HARK_OK;
}

/* ---- response parsing ------------------------------------------------------------------------ */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = hark_realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static int hbuf_put(http_client_t *c, const char *s, size_t n)
{
    if (grow((void **)&c->hbuf, &c->hcap, c->hlen + n + 1, 1)) {
        c->oom = 1;
        return -1;
    }
    memcpy(c->hbuf + c->hlen, s, n);
    c->hlen += n;
    c->hbuf[c->hlen] = 0;
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
    http_client_t *c = p->data;
    if (c->in_value || c->nh == 0) {     /* a new header starts */
        if (c->nh && hbuf_put(c, "", 1)) /* NUL after the previous value */
            return -1;
        size_t cap = (size_t)c->hoff_cap;
        if (grow((void **)&c->hoff, &cap, (size_t)(c->nh + 1) * 2, sizeof *c->hoff)) {
            c->oom = 1;
            return -1;
        }
        c->hoff_cap = (int)cap;
        c->hoff[2 * c->nh] = c->hlen;
        c->hoff[2 * c->nh + 1] = (size_t)-1;
        c->nh++;
        c->in_value = 0;
    }
    return hbuf_put(c, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
    http_client_t *c = p->data;
    if (!c->nh)
        return -1;
    if (!c->in_value) {
        if (hbuf_put(c, "", 1))
            return -1;
        c->hoff[2 * c->nh - 1] = c->hlen;
        c->in_value = 1;
    }
    return hbuf_put(c, at, n);
}

static int on_headers_complete(http_parser *p)
{
    http_client_t *c = p->data;
    if (c->nh && c->in_value && hbuf_put(c, "", 1))
        return -1;
    if (c->nh && !c->in_value) { /* a name without a value */
        if (hbuf_put(c, "", 1))
            return -1;
        c->hoff[2 * c->nh - 1] = c->hlen - 1;
    }
    if (p->content_length != ULLONG_MAX && p->content_length > 0) {
        if (p->content_length > c->o.max_body) {
            c->too_large = 1;
            return -1;
        }
        if (grow((void **)&c->body, &c->bcap, (size_t)p->content_length + 1, 1)) {
            c->oom = 1;
            return -1;
        }
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
    http_client_t *c = p->data;
    if (c->blen + n > c->o.max_body) {
        c->too_large = 1;
        return -1;
    }
    if (grow((void **)&c->body, &c->bcap, c->blen + n + 1, 1)) {
        c->oom = 1;
        return -1;
    }
    memcpy(c->body + c->blen, at, n);
    c->blen += n;
    return 0;
}

static int on_message_complete(http_parser *p)
{
    http_client_t *c = p->data;
    c->complete = 1;
    http_parser_pause(p, 1); /* anything after the response is not ours */
    return 0;
}

static void resp_reset(http_client_t *c)
{
    http_parser_init(&c->parser, HTTP_RESPONSE);
    c->parser.data = c;
    http_parser_settings_init(&c->settings);
    c->settings.on_header_field = on_header_field;
    c->settings.on_header_value = on_header_value;
    c->settings.on_headers_complete = on_headers_complete;
    c->settings.on_body = on_body;
    c->settings.on_message_complete = on_message_complete;
    c->hlen = 0;
    c->nh = 0;
    c->in_value = 0;
    c->blen = 0;
    c->complete = c->too_large = c->oom = 0;
}

/* ---- one exchange ---------------------------------------------------------------------------- */

enum { TRY_OK = 0, TRY_RETRY = 1 }; /* or a negative status */

/* Sends the request and reads the response on the open connection. TRY_RETRY: the connection
 * was found closed before any response byte (caller may reconnect and resend). */
static int exchange(http_client_t *c, struct iovec *iov, int niov, uint64_t deadline,
                    hark_err_t *err)
{
    size_t total = 0;
    for (int i = 0; i < niov; i++)
        total += iov[i].iov_len;
    struct iovec *v = iov;
    int nv = niov;
    while (total) {
        ssize_t w = writev(c->fd, v, nv);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int r = wait_fd(c->fd, POLLOUT, deadline);
                if (r == 0)
                    return err_set(err, HARK_ERR_TIMEOUT, "%s: sending timed out after %u ms",
                                   c->host_hdr, c->o.timeout_ms);
                if (r < 0)
                    return err_set(err, HARK_ERR_IO, "%s: poll: %s", c->host_hdr, strerror(errno));
                continue;
            }
            if (errno == EPIPE || errno == ECONNRESET)
                return TRY_RETRY;
            return err_set(err, HARK_ERR_IO, "%s: send: %s", c->host_hdr, strerror(errno));
        }
        total -= (size_t)w;
        while (nv && (size_t)w >= v->iov_len) {
            w -= (ssize_t)v->iov_len;
            v++;
            nv--;
        }
        if (nv) {
            v->iov_base = (char *)v->iov_base + w;
            v->iov_len -= (size_t)w;
        }
    }
    resp_reset(c);
    char buf[65536];
    size_t got_any = 0;
    while (!c->complete) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int w = wait_fd(c->fd, POLLIN, deadline);
                if (w == 0)
                    return err_set(err, HARK_ERR_TIMEOUT, "%s: no complete response within %u ms",
                                   c->host_hdr, c->o.timeout_ms);
                if (w < 0)
                    return err_set(err, HARK_ERR_IO, "%s: poll: %s", c->host_hdr, strerror(errno));
                continue;
            }
            if (errno == ECONNRESET && !got_any)
                return TRY_RETRY;
            return err_set(err, HARK_ERR_IO, "%s: receive: %s", c->host_hdr, strerror(errno));
        }
        if (r == 0 && !got_any)
            return TRY_RETRY;
        got_any += (size_t)r;
        size_t used = http_parser_execute(&c->parser, &c->settings, buf, (size_t)r);
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (c->complete)
            break;
        if (c->too_large)
            return err_set(err, HARK_ERR_TOO_LARGE, "%s: response body over %zu bytes", c->host_hdr,
                           c->o.max_body);
        if (c->oom)
            return err_set(err, HARK_ERR_NOMEM, "out of memory reading a response");
        if (e != HPE_OK || (r > 0 && used != (size_t)r))
            return err_set(err, HARK_ERR_FORMAT, "%s: malformed HTTP response: %s", c->host_hdr,
                           http_errno_description(e));
        if (r == 0) /* EOF: complete only if the body was delimited by the close */
            return err_set(err, HARK_ERR_IO, "%s: connection closed mid-response", c->host_hdr);
    }
    return TRY_OK;
}

int http_client_request(http_client_t *c, const char *method, const char *path,
                        const http_kv_t *headers, int n_headers, const void *body, size_t body_len,
                        http_response_t *resp, hark_err_t *err)
{
    memset(resp, 0, sizeof *resp);
    /* the head: request line, Host, caller's headers, Content-Length */
    size_t need = strlen(method) + strlen(path) + strlen(c->host_hdr) + 96;
    for (int i = 0; i < n_headers; i++) {
        if (strpbrk(headers[i].name, "\r\n:") || strpbrk(headers[i].value, "\r\n"))
            return err_set(err, HARK_ERR_INVALID_ARG, "header '%s': CR, LF or ':' in it",
                           headers[i].name);
        need += strlen(headers[i].name) + strlen(headers[i].value) + 4;
    }
    if (strpbrk(path, " \r\n") || strpbrk(method, " \r\n"))
        return err_set(err, HARK_ERR_INVALID_ARG, "bad request target '%s'", path);
    char *head = hark_malloc(need);
    if (!head)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    size_t n =
        (size_t)snprintf(head, need, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, c->host_hdr);
    for (int i = 0; i < n_headers; i++)
        n += (size_t)snprintf(head + n, need - n, "%s: %s\r\n", headers[i].name, headers[i].value);
    int has_body = body_len > 0 || strcmp(method, "GET") != 0;
    if (has_body)
        n += (size_t)snprintf(head + n, need - n, "Content-Length: %zu\r\n", body_len);
    n += (size_t)snprintf(head + n, need - n, "\r\n");

    uint64_t deadline = clock_now_ns() + (uint64_t)c->o.timeout_ms * 1000000u;
    int rc = HARK_OK;
    for (int attempt = 0;; attempt++) {
        int reused = c->fd >= 0;
        if (reused) { /* an idle connection the server closed shows as readable (EOF) */
            struct pollfd p = {.fd = c->fd, .events = POLLIN};
            if (poll(&p, 1, 0) > 0) {
                conn_close(c);
                reused = 0;
            }
        }
        if (c->fd < 0 && (rc = conn_open(c, err)))
            break;
        struct iovec iov[2] = {{head, n}, {(void *)(uintptr_t)body, body_len}};
        rc = exchange(c, iov, body_len ? 2 : 1, deadline, err);
        if (rc == TRY_RETRY) {
            conn_close(c);
            if (reused && attempt == 0)
                continue;
            rc = err_set(err, HARK_ERR_IO, "%s: connection closed before a response", c->host_hdr);
        }
        if (rc == HARK_OK)
            resp->reused = reused;
        break;
    }
    hark_free(head);
    if (rc) {
        conn_close(c);
        return rc;
    }
    /* publish the response */
    if (c->nh > c->kv_cap) {
        http_kv_t *kv = hark_realloc(c->kv, sizeof *kv * (size_t)c->nh);
        if (!kv) {
            conn_close(c);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
        c->kv = kv;
        c->kv_cap = c->nh;
    }
    for (int i = 0; i < c->nh; i++) {
        c->kv[i].name = c->hbuf + c->hoff[2 * i];
        c->kv[i].value = c->hbuf + c->hoff[2 * i + 1];
    }
    if (grow((void **)&c->body, &c->bcap, c->blen + 1, 1)) {
        conn_close(c);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    c->body[c->blen] = 0;
    resp->status = (int)c->parser.status_code;
    resp->headers = c->kv;
    resp->n_headers = c->nh;
    resp->body = c->body;
    resp->body_len = c->blen;
    c->served++;
    if (!http_should_keep_alive(&c->parser))
        conn_close(c);
    return HARK_OK;
}

const char *http_response_header(const http_response_t *r, const char *name)
{
    for (int i = 0; i < r->n_headers; i++)
        if (!strcasecmp(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}
