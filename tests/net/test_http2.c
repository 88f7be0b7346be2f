/* Tests for src/net/http2.c without sockets: an nghttp2 client session talks to a socket-free
 * http2 server; answers made on another thread reach the client only through the queue; a reset
 * stream sets the cancelled flag and late answers are dropped (ASan: no use after free);
 * SETTINGS_MAX_CONCURRENT_STREAMS; a protocol error ends the connection with GOAWAY; over a real
 * socket, the idle timeout and a shutdown asked from another thread. */
#include "test.h"

#include "core/alloc.h"
#include "net/http2.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

typedef struct {
    http2_server_t *srv;
    http2_conn_t *conn;
    nghttp2_session *cli;
    uint8_t *out; /* server → client bytes not yet given to the client */
    size_t out_len, out_cap;
    size_t out_total;
    int goaway_seen;
    /* server side */
    http2_stream_t *held;
    int n_headers, n_end, n_close;
    size_t body;
    /* client side */
    char status[8], grpc_status[8];
    size_t got_data;
    int closed;
    uint32_t close_code;
} h2t_t;

static void sink(void *user, const uint8_t *d, size_t n)
{
    h2t_t *x = user;
    if (x->out_len + n > x->out_cap) {
        x->out_cap = (x->out_len + n) * 2;
        x->out = hark_realloc(x->out, x->out_cap);
    }
    /* scan whole frames for GOAWAY (type 7); the server writes frames whole */
    for (size_t p = 0; p + 9 <= n;) {
        size_t fl = (size_t)d[p] << 16 | (size_t)d[p + 1] << 8 | d[p + 2];
        if (d[p + 3] == 7)
            x->goaway_seen = 1;
        p += 9 + fl;
    }
    memcpy(x->out + x->out_len, d, n);
    x->out_len += n;
    x->out_total += n;
}

static int s_headers(http2_stream_t *st, void *user)
{
    h2t_t *x = user;
    x->n_headers++;
    const char *p = http2_stream_header(st, ":path");
    if (p && !strcmp(p, "/refuse"))
        return -1;
    http2_stream_ref(st);
    x->held = st;
    return 0;
}

static int s_data(http2_stream_t *st, const uint8_t *d, size_t n, void *user)
{
    ((h2t_t *)user)->body += n;
    return 0;
}

static void s_end(http2_stream_t *st, void *user)
{
    ((h2t_t *)user)->n_end++;
}

static void s_close(http2_stream_t *st, void *user)
{
    ((h2t_t *)user)->n_close++;
}

static int c_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                    const uint8_t *value, size_t vl, uint8_t flags, void *user)
{
    h2t_t *x = user;
    if (nl == 7 && !memcmp(name, ":status", 7))
        snprintf(x->status, sizeof x->status, "%.*s", (int)vl, value);
    if (nl == 11 && !memcmp(name, "grpc-status", 11))
        snprintf(x->grpc_status, sizeof x->grpc_status, "%.*s", (int)vl, value);
    return 0;
}

static int c_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t n,
                  void *user)
{
    ((h2t_t *)user)->got_data += n;
    return 0;
}

static int c_close(nghttp2_session *s, int32_t id, uint32_t code, void *user)
{
    h2t_t *x = user;
    x->closed++;
    x->close_code = code;
    return 0;
}

static int setup(h2t_t *x, unsigned max_streams)
{
    memset(x, 0, sizeof *x);
    http2_server_opts_t o = {
        .handler = {s_headers, s_data, s_end, s_close}, .user = x, .max_streams = max_streams};
    if (http2_server_create(NULL, &o, &x->srv, NULL))
        return -1;
    x->conn = http2_conn_open(x->srv, sink, x);
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_close);
    nghttp2_session_client_new(&x->cli, cb, x);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(x->cli, NGHTTP2_FLAG_NONE, NULL, 0);
    return x->conn ? 0 : -1;
}

static void teardown(h2t_t *x)
{
    nghttp2_session_del(x->cli);
    http2_conn_close(x->conn);
    http2_server_destroy(x->srv);
    hark_free(x->out);
}

/* moves bytes both ways until neither side has anything to say */
static int pump(h2t_t *x)
{
    int rc = 0;
    for (int round = 0; round < 50; round++) {
        int moved = 0;
        const uint8_t *d;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(x->cli, &d)) > 0) {
            moved = 1;
            if (http2_conn_feed(x->conn, d, (size_t)n))
                rc = -1;
        }
        http2_server_poll(x->srv);
        if (x->out_len) {
            moved = 1;
            nghttp2_session_mem_recv(x->cli, x->out, x->out_len);
            x->out_len = 0;
        }
        if (!moved)
            break;
    }
    return rc;
}

static const char *g_body;
static size_t g_body_off;
static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *user)
{
    size_t n = strlen(g_body) - g_body_off;
    if (n > len)
        n = len;
    memcpy(buf, g_body + g_body_off, n);
    g_body_off += n;
    if (!g_body[g_body_off])
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* a POST with body (NULL: headers only, END_STREAM) */
static int32_t request(h2t_t *x, const char *path, const char *body)
{
    nghttp2_nv nv[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
        {(uint8_t *)":authority", (uint8_t *)"t", 10, 1, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
    };
    if (!body)
        return nghttp2_submit_request(x->cli, NULL, nv, 5, NULL, NULL);
    g_body = body;
    g_body_off = 0;
    nghttp2_data_provider prd = {.source.ptr = NULL, .read_callback = read_body};
    return nghttp2_submit_request(x->cli, NULL, nv, 5, &prd, NULL);
}

/* the answer a model instance would give: headers, a message, trailers — from its own thread */
static void *answer_thread(void *p)
{
    http2_stream_t *st = p;
    http2_header_t h[] = {{"content-type", "application/grpc"}};
    http2_stream_send_headers(st, h, 1);
    size_t n = 100000; /* several DATA frames */
    uint8_t *d = hark_malloc(n);
    memset(d, 'x', n);
    http2_stream_send_data(st, d, n);
    http2_header_t t[] = {{"grpc-status", "0"}};
    http2_stream_send_trailers(st, t, 1);
    http2_stream_unref(st);
    return NULL;
}

TEST(http2_answers_from_another_thread)
{
    h2t_t x;
    CHECK_OK(setup(&x, 0));
    CHECK(request(&x, "/a", "hello body") > 0);
    pump(&x);
    CHECK_EQ_INT(x.n_headers, 1);
    CHECK_EQ_INT(x.n_end, 1);
    CHECK_EQ_INT(x.body, 10);
    CHECK(x.held);
    size_t before = x.out_total;
    pthread_t th;
    pthread_create(&th, NULL, answer_thread, x.held);
    pthread_join(th, NULL);
    CHECK_EQ_INT(x.out_total, before); /* nothing written by that thread */
    x.held = NULL;
    pump(&x); /* the loop's turn: the queue is applied and written */
    CHECK(!strcmp(x.status, "200"));
    CHECK_EQ_INT(x.got_data, 100000);
    CHECK(!strcmp(x.grpc_status, "0"));
    CHECK_EQ_INT(x.closed, 1);
    CHECK_EQ_INT(x.n_close, 1);
    teardown(&x);
}

TEST(http2_trailers_only_and_refused)
{
    h2t_t x;
    CHECK_OK(setup(&x, 0));
    request(&x, "/a", NULL);
    pump(&x);
    CHECK(x.held);
    http2_header_t tr[] = {{"content-type", "application/grpc"}, {"grpc-status", "5"}};
    http2_stream_send_trailers(x.held, tr, 2);
    http2_stream_unref(x.held);
    pump(&x);
    CHECK(!strcmp(x.status, "200") && !strcmp(x.grpc_status, "5"));
    CHECK_EQ_INT(x.got_data, 0);
    request(&x, "/refuse", NULL); /* the handler says no: the stream is reset */
    pump(&x);
    CHECK_EQ_INT(x.closed, 2);
    CHECK(x.close_code != 0);
    teardown(&x);
}

TEST(http2_reset_cancels_and_drops_late_answers)
{
    h2t_t x;
    CHECK_OK(setup(&x, 0));
    int32_t id = request(&x, "/a", NULL);
    pump(&x);
    http2_stream_t *st = x.held;
    CHECK(st);
    const atomic_int *cancelled = http2_stream_cancelled_flag(st);
    CHECK_EQ_INT(atomic_load(cancelled), 0);
    nghttp2_submit_rst_stream(x.cli, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    pump(&x);
    CHECK_EQ_INT(atomic_load(cancelled), 1);
    CHECK_EQ_INT(x.n_close, 1);
    /* the answer arrives late, from "an inference thread": dropped, freed, nothing written */
    size_t before = x.out_total;
    pthread_t th;
    pthread_create(&th, NULL, answer_thread, st); /* drops our reference at the end */
    pthread_join(th, NULL);
    pump(&x);
    CHECK_EQ_INT(x.got_data, 0);
    CHECK(x.out_total - before < 64); /* at most a window update or so */
    /* and after the whole connection is gone */
    request(&x, "/a", NULL);
    pump(&x);
    st = x.held;
    http2_conn_close(x.conn);
    x.conn = NULL;
    CHECK_EQ_INT(atomic_load(http2_stream_cancelled_flag(st)), 1);
    pthread_create(&th, NULL, answer_thread, st);
    pthread_join(th, NULL);
    http2_server_poll(x.srv);
    nghttp2_session_del(x.cli);
    http2_server_destroy(x.srv);
    hark_free(x.out);
}

TEST(http2_settings_and_protocol_error)
{
    h2t_t x;
    CHECK_OK(setup(&x, 3));
    request(&x, "/a", NULL);
    pump(&x);
    CHECK_EQ_INT(
        nghttp2_session_get_remote_settings(x.cli, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 3);
    http2_stream_unref(x.held);
    /* a DATA frame on stream 0 is a connection error: GOAWAY, and the connection is finished */
    static const uint8_t bad[] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 'x'};
    x.goaway_seen = 0;
    CHECK(http2_conn_feed(x.conn, bad, sizeof bad) != 0);
    CHECK(x.goaway_seen);
    teardown(&x);
}

/* ---- over a real socket and loop ------------------------------------------------------------ */

static void *loop_main(void *p)
{
    uv_run(p, UV_RUN_DEFAULT);
    return NULL;
}

static int dummy_headers(http2_stream_t *st, void *user)
{
    return 0;
}

TEST(http2_idle_timeout_and_shutdown_from_another_thread)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    http2_server_t *s = NULL;
    http2_server_opts_t o = {
        .port = 0, .handler = {.on_headers = dummy_headers}, .idle_timeout_ms = 150};
    CHECK_OK(http2_server_create(&loop, &o, &s, NULL));
    int port = http2_server_port(s);
    CHECK(port > 0);
    pthread_t th;
    pthread_create(&th, NULL, loop_main, &loop);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    CHECK(write(fd, preface, sizeof preface - 1) == (ssize_t)(sizeof preface - 1));
    /* no stream: after the idle timeout the server says GOAWAY and closes */
    uint8_t buf[4096];
    size_t got = 0;
    int eof = 0;
    uint64_t t0 = (uint64_t)time(NULL);
    while (!eof && (uint64_t)time(NULL) - t0 < 5) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, buf + got, sizeof buf - got);
        if (n <= 0)
            eof = 1;
        else
            got += (size_t)n;
    }
    close(fd);
    CHECK(eof);
    int goaway = 0;
    for (size_t q = 0; q + 9 <= got;) {
        size_t fl = (size_t)buf[q] << 16 | (size_t)buf[q + 1] << 8 | buf[q + 2];
        goaway |= buf[q + 3] == 7;
        q += 9 + fl;
    }
    CHECK(goaway);
    http2_server_shutdown(s, 1000); /* from this thread: the loop finishes and uv_run returns */
    pthread_join(th, NULL);
    http2_server_destroy(s);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
}
