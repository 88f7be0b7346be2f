/* test_http_client.c — tests of src/net/http_client.*: URL parsing, and requests against the
 * project's own http_server on 127.0.0.1 (ephemeral port, loop in a thread): keep-alive reuse,
 * chunked responses, reconnect after the server closed an idle connection, timeouts. */
#include "test.h"

#include "hark.h"
#include "net/http_client.h"
#include "net/http_server.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

TEST(http_url_parse_forms)
{
    http_url_t u;
    CHECK_OK(http_url_parse("http://127.0.0.1:8000", &u, NULL));
    CHECK(!strcmp(u.host, "127.0.0.1") && u.port == 8000 && !strcmp(u.prefix, ""));
    CHECK_OK(http_url_parse("localhost:9001", &u, NULL));
    CHECK(!strcmp(u.host, "localhost") && u.port == 9001);
    CHECK_OK(http_url_parse("http://example.org/triton/", &u, NULL));
    CHECK(!strcmp(u.host, "example.org") && u.port == 80 && !strcmp(u.prefix, "/triton"));
    CHECK_OK(http_url_parse("http://[::1]:8123/a/b", &u, NULL));
    CHECK(!strcmp(u.host, "::1") && u.port == 8123 && !strcmp(u.prefix, "/a/b"));
    CHECK_OK(http_url_parse("myhost", &u, NULL));
    CHECK(u.port == 8000);
    hark_err_t err = {0};
    CHECK(http_url_parse("https://x:1", &u, &err) != 0);
    CHECK(strstr(err.msg, "https") != NULL);
    CHECK(http_url_parse("x:0", &u, NULL) != 0);
    CHECK(http_url_parse("x:70000", &u, NULL) != 0);
    CHECK(http_url_parse("x:12a", &u, NULL) != 0);
    CHECK(http_url_parse("http://u@x:1", &u, NULL) != 0);
    CHECK(http_url_parse("ftp://x", &u, NULL) != 0);
    CHECK(http_url_parse("", &u, NULL) != 0);
    CHECK(http_url_parse("http://:80", &u, NULL) != 0);
}

/* ---- a real server ------------------------------------------------------------------------- */

typedef struct {
    uv_loop_t loop;
    http_server_t *srv;
    pthread_t th;
    int port;
} tsrv_t;

typedef struct {
    http_req_t *req;
    int ms;
} slow_t;

static void *slow_main(void *arg)
{
    slow_t *s = arg;
    sleep_ms(s->ms);
    http_respond(s->req, 200, "text/plain", "slow", 4);
    free(s);
    return NULL;
}

/* /echo: "METHOD x=<X-Test> len=N:" + body; /chunked: three chunks; /slow?ms=N: answered by a
 * thread after N ms; /close: answered with Connection: close; else 404 {"error"}. */
static void handler(http_req_t *req, void *user)
{
    if (!strcmp(req->path, "/echo")) {
        const char *x = http_req_header(req, "x-test");
        char *out = arena_alloc(&req->arena, req->body_len + 256, 1);
        int n =
            snprintf(out, 256, "%s x=%s len=%zu:", req->method_name, x ? x : "-", req->body_len);
        memcpy(out + n, req->body, req->body_len);
        http_respond(req, 200, "text/plain", out, (size_t)n + req->body_len);
    } else if (!strcmp(req->path, "/chunked")) {
        http_respond_start(req, 200, "text/plain");
        http_respond_chunk(req, "one,", 4);
        http_respond_chunk(req, "two,", 4);
        http_respond_chunk(req, "three", 5);
        http_respond_end(req);
    } else if (!strcmp(req->path, "/slow")) {
        slow_t *s = malloc(sizeof *s);
        s->req = req;
        const char *ms = strstr(req->query, "ms=");
        s->ms = ms ? atoi(ms + 3) : 50;
        pthread_t th;
        pthread_create(&th, NULL, slow_main, s);
        pthread_detach(th);
    } else if (!strcmp(req->path, "/close")) {
        http_res_header(req, "Connection", "close");
        http_respond(req, 200, "text/plain", "bye", 3);
    } else {
        http_respond_error(req, 404, "no route for '%s'", req->path);
    }
}

static void *loop_main(void *arg)
{
    tsrv_t *ts = arg;
    uv_run(&ts->loop, UV_RUN_DEFAULT);
    return NULL;
}

static int tsrv_start(tsrv_t *ts, unsigned idle_ms)
{
    memset(ts, 0, sizeof *ts);
    http_server_opts_t o = {.host = "127.0.0.1", .handler = handler, .idle_timeout_ms = idle_ms};
    uv_loop_init(&ts->loop);
    if (http_server_create(&ts->loop, &o, &ts->srv, NULL) != HARK_OK) {
        uv_loop_close(&ts->loop);
        return -1;
    }
    ts->port = http_server_port(ts->srv);
    pthread_create(&ts->th, NULL, loop_main, ts);
    return 0;
}

static void tsrv_stop(tsrv_t *ts)
{
    http_server_shutdown(ts->srv, 2000);
    pthread_join(ts->th, NULL);
    http_server_destroy(ts->srv);
    uv_loop_close(&ts->loop);
    sleep_ms(20); /* let a stray /slow thread finish */
}

TEST(http_client_keepalive_reuse_and_headers)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, 0));
    http_client_t *c;
    CHECK_OK(http_client_create("127.0.0.1", ts.port, NULL, &c, NULL));
    http_response_t r;
    for (int i = 0; i < 5; i++) {
        char body[64];
        int n = snprintf(body, sizeof body, "payload %d", i);
        http_kv_t h[1] = {{"X-Test", "abc"}};
        CHECK_OK(http_client_request(c, "POST", "/echo", h, 1, body, (size_t)n, &r, NULL));
        CHECK_EQ_INT(r.status, 200);
        char want[128];
        snprintf(want, sizeof want, "POST x=abc len=%d:%s", n, body);
        CHECKF(r.body_len == strlen(want) && !memcmp(r.body, want, r.body_len), "%s", r.body);
        CHECK_EQ_INT(r.reused, i > 0);
        const char *cl = http_response_header(&r, "content-length");
        CHECK(cl && atoi(cl) == (int)r.body_len);
        CHECK(http_response_header(&r, "Content-Type") != NULL);
    }
    CHECK_OK(http_client_request(c, "GET", "/nope", NULL, 0, NULL, 0, &r, NULL));
    CHECK_EQ_INT(r.status, 404);
    CHECK(strstr((const char *)r.body, "\"error\"") != NULL);
    CHECK_EQ_INT(http_client_connects(c), 1);
    /* a response with Connection: close: the next request opens a new connection */
    CHECK_OK(http_client_request(c, "GET", "/close", NULL, 0, NULL, 0, &r, NULL));
    CHECK(r.status == 200 && r.body_len == 3);
    CHECK_OK(http_client_request(c, "GET", "/echo", NULL, 0, NULL, 0, &r, NULL));
    CHECK(r.status == 200 && !r.reused);
    CHECK_EQ_INT(http_client_connects(c), 2);
    /* a large body */
    size_t big = 3u << 20;
    char *b = malloc(big);
    for (size_t i = 0; i < big; i++)
        b[i] = (char)('a' + i % 26);
    CHECK_OK(http_client_request(c, "POST", "/echo", NULL, 0, b, big, &r, NULL));
    const char *colon = memchr(r.body, ':', 64);
    CHECK(r.status == 200 && colon &&
          r.body_len - (size_t)(colon + 1 - (const char *)r.body) == big);
    CHECK(!memcmp(colon + 1, b, big));
    free(b);
    http_client_destroy(c);
    tsrv_stop(&ts);
}

TEST(http_client_chunked_response)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, 0));
    http_client_t *c;
    CHECK_OK(http_client_create("localhost", ts.port, NULL, &c, NULL));
    http_response_t r;
    for (int i = 0; i < 2; i++) {
        CHECK_OK(http_client_request(c, "GET", "/chunked", NULL, 0, NULL, 0, &r, NULL));
        CHECK_EQ_INT(r.status, 200);
        CHECKF(r.body_len == 13 && !memcmp(r.body, "one,two,three", 13), "%s", r.body);
        const char *te = http_response_header(&r, "Transfer-Encoding");
        CHECK(te && strstr(te, "chunked"));
    }
    CHECK_EQ_INT(http_client_connects(c), 1);
    http_client_destroy(c);
    tsrv_stop(&ts);
}

TEST(http_client_reconnects_after_idle_close)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, 150)); /* the server closes connections idle for 150 ms */
    http_client_t *c;
    CHECK_OK(http_client_create("127.0.0.1", ts.port, NULL, &c, NULL));
    http_response_t r;
    CHECK_OK(http_client_request(c, "GET", "/echo", NULL, 0, NULL, 0, &r, NULL));
    CHECK_EQ_INT(r.status, 200);
    sleep_ms(400);
    hark_err_t err = {0};
    CHECKF(http_client_request(c, "POST", "/echo", NULL, 0, "x", 1, &r, &err) == 0, "%s", err.msg);
    CHECK(r.status == 200 && r.body_len > 0 && r.body[r.body_len - 1] == 'x');
    CHECK_EQ_INT(http_client_connects(c), 2);
    http_client_destroy(c);
    tsrv_stop(&ts);
}

TEST(http_client_timeout_then_recovers)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, 0));
    http_client_opts_t o = {.timeout_ms = 100};
    http_client_t *c;
    CHECK_OK(http_client_create("127.0.0.1", ts.port, &o, &c, NULL));
    http_response_t r;
    hark_err_t err = {0};
    CHECK_EQ_INT(http_client_request(c, "GET", "/slow?ms=600", NULL, 0, NULL, 0, &r, &err),
                 HARK_ERR_TIMEOUT);
    CHECKF(strstr(err.msg, "100 ms") != NULL, "%s", err.msg);
    CHECK_OK(http_client_request(c, "GET", "/slow?ms=10", NULL, 0, NULL, 0, &r, NULL));
    CHECK(r.status == 200 && r.body_len == 4 && !memcmp(r.body, "slow", 4));
    CHECK_EQ_INT(http_client_connects(c), 2);
    http_client_destroy(c);
    /* nothing listening: a clear connect error */
    int port = ts.port;
    tsrv_stop(&ts);
    CHECK_OK(http_client_create("127.0.0.1", port, NULL, &c, NULL));
    CHECK_EQ_INT(http_client_request(c, "GET", "/", NULL, 0, NULL, 0, &r, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "connect") != NULL, "%s", err.msg);
    http_client_destroy(c);
    CHECK(http_client_create("127.0.0.1", 0, NULL, &c, NULL) != 0);
}
