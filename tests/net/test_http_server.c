/* test_http_server.c — tests of src/net/http_server*: the socket-free request parser, then a real
 * server on 127.0.0.1 (ephemeral port, loop in a thread) driven with raw sockets and curl.
 * The fuzz seeds in tests/fuzz/corpus_http/ are replayed here too. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "net/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>
#include <zlib.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* zlib-compresses src (gzip: 1, zlib/deflate: 0) into a malloc'd buffer. */
static unsigned char *compress_buf(const void *src, size_t n, int gzip, size_t *out_n)
{
    z_stream z = {0};
    if (deflateInit2(&z, 6, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return NULL;
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    unsigned char *out = malloc(cap);
    z.next_in = (Bytef *)(uintptr_t)src;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    *out_n = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- the parser without sockets -------------------------------------------------------------- */

/* Feeds msg[len] in pieces of `step` bytes (0: all at once); collects up to `max` requests.
 * Returns the number of requests, or -status on error. */
static int parse_all(const http_reqparser_opts_t *o, const char *msg, size_t len, size_t step,
                     http_req_t **reqs, int max)
{
    http_reqparser_t *p = http_reqparser_create(o);
    int n = 0;
    size_t off = 0;
    while (off < len) {
        size_t end = step && off + step < len ? off + step : len;
        size_t pos = off;
        while (pos < end) {
            size_t used;
            int rc = http_reqparser_feed(p, msg + pos, end - pos, &used);
            pos += used;
            if (rc == HTTP_PARSE_REQUEST) {
                http_req_t *r = http_reqparser_take(p);
                if (n < max)
                    reqs[n++] = r;
                else
                    http_req_free(r);
            } else if (rc == HTTP_PARSE_ERROR) {
                int st = http_reqparser_error(p, NULL);
                http_reqparser_destroy(p);
                return -st;
            } else {
                break;
            }
        }
        off = end;
    }
    http_reqparser_destroy(p);
    return n;
}

static void free_reqs(http_req_t **r, int n)
{
    for (int i = 0; i < n; i++)
        http_req_free(r[i]);
}

TEST(http_parser_request_fields_any_split)
{
    static const char msg[] = "POST /v2/models/asr/infer?x=1&y=2 HTTP/1.1\r\n"
                              "Host: 127.0.0.1\r\n"
                              "inference-header-content-length:   11  \r\n"
                              "Content-Length: 16\r\n"
                              "\r\n"
                              "{\"inputs\": []}xy"
                              "GET /v2/health/ready HTTP/1.1\r\nConnection: close\r\n\r\n";
    size_t len = sizeof msg - 1;
    for (size_t step = 0; step <= len; step += (step < 16 ? 1 : 7)) {
        http_req_t *r[4];
        int n = parse_all(NULL, msg, len, step, r, 4);
        CHECKF(n == 2, "step %zu: %d requests", step, n);
        CHECK(r[0]->method == HTTP_POST && !strcmp(r[0]->method_name, "POST"));
        CHECK(!strcmp(r[0]->path, "/v2/models/asr/infer") && r[0]->path_len == 20);
        CHECK(!strcmp(r[0]->query, "x=1&y=2") && r[0]->query_len == 7);
        CHECK(!strcmp(r[0]->url, "/v2/models/asr/infer?x=1&y=2"));
        CHECK(r[0]->nheaders == 3);
        const char *v = http_req_header(r[0], "INFERENCE-Header-Content-Length");
        CHECK(v && !strcmp(v, "11"));
        CHECK(http_req_header(r[0], "host") && !http_req_header(r[0], "absent"));
        CHECK(r[0]->body_len == 16 && !memcmp(r[0]->body, "{\"inputs\": []}xy", 16));
        CHECK(r[0]->body[16] == 0);
        CHECK(r[0]->keep_alive == 1 && r[0]->http_major == 1 && r[0]->http_minor == 1);
        CHECK(r[1]->method == HTTP_GET && !strcmp(r[1]->path, "/v2/health/ready"));
        CHECK(r[1]->query_len == 0 && r[1]->body_len == 0 && r[1]->keep_alive == 0);
        free_reqs(r, n);
    }
}

TEST(http_parser_chunked_gzip_body_any_split)
{
    char plain[3000];
    for (size_t i = 0; i < sizeof plain; i++)
        plain[i] = (char)('a' + i % 23);
    size_t zn;
    unsigned char *z = compress_buf(plain, sizeof plain, 1, &zn);
    CHECK(z);
    /* two chunks of the gzip stream, plus a trailer */
    char msg[8192];
    size_t half = zn / 2;
    int n = snprintf(msg, sizeof msg,
                     "PUT /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n"
                     "\r\n%zx\r\n",
                     half);
    memcpy(msg + n, z, half);
    n += (int)half;
    n += snprintf(msg + n, sizeof msg - (size_t)n, "\r\n%zx;ext=1\r\n", zn - half);
    memcpy(msg + n, z + half, zn - half);
    n += (int)(zn - half);
    n += snprintf(msg + n, sizeof msg - (size_t)n, "\r\n0\r\nX-Trailer: t\r\n\r\n");
    free(z);
    for (size_t step = 1; step <= (size_t)n; step = step < 40 ? step + 1 : step * 2) {
        http_req_t *r[2];
        int got = parse_all(NULL, msg, (size_t)n, step, r, 2);
        CHECKF(got == 1, "step %zu: %d", step, got);
        CHECK(r[0]->body_len == sizeof plain && !memcmp(r[0]->body, plain, sizeof plain));
        CHECK(r[0]->nheaders == 2); /* the trailer is not a header */
        free_reqs(r, got);
    }
}

TEST(http_parser_limits_and_errors)
{
    http_reqparser_opts_t o = {.max_body = 1000, .max_header = 256};
    http_req_t *r[2];
    char big[600];
    memset(big, 'a', sizeof big);
    char msg[2048];
    snprintf(msg, sizeof msg, "GET / HTTP/1.1\r\nX-Big: %.*s\r\n\r\n", (int)sizeof big, big);
    CHECK_EQ_INT(parse_all(&o, msg, strlen(msg), 0, r, 2), -431);
    snprintf(msg, sizeof msg, "GET /%.*s HTTP/1.1\r\n\r\n", (int)sizeof big, big);
    CHECK_EQ_INT(parse_all(&o, msg, strlen(msg), 0, r, 2), -431);
    /* 413 from Content-Length alone: the body never needs to arrive */
    snprintf(msg, sizeof msg, "POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n");
    CHECK_EQ_INT(parse_all(&o, msg, strlen(msg), 0, r, 2), -413);
    snprintf(msg, sizeof msg, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n");
    size_t ml = strlen(msg);
    memset(msg + ml, 'b', 1001);
    CHECK_EQ_INT(parse_all(&o, msg, ml + 1001, 0, r, 2), -413);
    /* request smuggling shapes and garbage */
    const char *bad400[] = {
        "GARBAGE\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    };
    for (size_t i = 0; i < sizeof bad400 / sizeof *bad400; i++)
        CHECKF(parse_all(&o, bad400[i], strlen(bad400[i]), 0, r, 2) == -400, "case %zu", i);
    /* found by the fuzzer: a NUL inside a header value (http-parser lets it through) */
    static const char nul[] = "GET / HTTP/1.1\r\nUpgrade:\0 websocket\r\n\r\n";
    CHECK_EQ_INT(parse_all(&o, nul, sizeof nul - 1, 0, r, 2), -400);
    CHECK_EQ_INT(parse_all(&o, "GET / HTTP/9.9\r\n\r\n", 18, 0, r, 2), -505);
    const char *e417 = "POST / HTTP/1.1\r\nExpect: something\r\nContent-Length: 1\r\n\r\nx";
    CHECK_EQ_INT(parse_all(&o, e417, strlen(e417), 0, r, 2), -417);
    const char *e415 = "POST / HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx";
    CHECK_EQ_INT(parse_all(&o, e415, strlen(e415), 0, r, 2), -415);
    /* an empty Expect: is no expectation (perf_analyzer sends one) */
    const char *e0 = "POST / HTTP/1.1\r\nExpect:\r\nContent-Length: 1\r\n\r\nx";
    CHECK_EQ_INT(parse_all(&o, e0, strlen(e0), 0, r, 2), 1);
    free_reqs(r, 1);
    /* gzip: a bomb is 413, a truncated stream 400, a corrupt one 400 */
    size_t zn;
    char *zeros = calloc(1, 256 << 10);
    unsigned char *z = compress_buf(zeros, 256 << 10, 1, &zn);
    free(zeros);
    CHECK(z && zn < 1000);
    int hn = snprintf(msg, sizeof msg,
                      "POST / HTTP/1.1\r\nContent-Encoding: gzip\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      zn);
    memcpy(msg + hn, z, zn);
    CHECK_EQ_INT(parse_all(&o, msg, (size_t)hn + zn, 0, r, 2), -413);
    free(z);
    z = compress_buf("hello", 5, 1, &zn);
    hn = snprintf(msg, sizeof msg,
                  "POST / HTTP/1.1\r\nContent-Encoding: gzip\r\n"
                  "Content-Length: %zu\r\n\r\n",
                  zn - 4);
    memcpy(msg + hn, z, zn - 4);
    CHECK_EQ_INT(parse_all(&o, msg, (size_t)hn + zn - 4, 0, r, 2), -400);
    free(z);
    const char *corrupt =
        "POST / HTTP/1.1\r\nContent-Encoding: deflate\r\nContent-Length: 4\r\n\r\nabcd";
    CHECK_EQ_INT(parse_all(&o, corrupt, strlen(corrupt), 0, r, 2), -400);
    /* EOF mid-request is an error; EOF between requests is not */
    http_reqparser_t *p = http_reqparser_create(&o);
    size_t used;
    CHECK_EQ_INT(http_reqparser_feed(p, "GET / HT", 8, &used), HTTP_PARSE_MORE);
    CHECK(http_reqparser_in_request(p));
    CHECK_EQ_INT(http_reqparser_feed(p, "", 0, &used), HTTP_PARSE_ERROR);
    http_reqparser_destroy(p);
    p = http_reqparser_create(&o);
    CHECK_EQ_INT(http_reqparser_feed(p, "", 0, &used), HTTP_PARSE_MORE);
    http_reqparser_destroy(p);
}

TEST(http_parser_expect_continue_and_absolute_url)
{
    http_reqparser_t *p = http_reqparser_create(NULL);
    const char *h = "POST http://example.com:8000/v2/x?q=1 HTTP/1.1\r\nExpect: 100-Continue\r\n"
                    "Content-Length: 3\r\n\r\n";
    size_t used;
    CHECK_EQ_INT(http_reqparser_feed(p, h, strlen(h), &used), HTTP_PARSE_MORE);
    CHECK(used == strlen(h));
    CHECK(http_reqparser_wants_continue(p) && http_reqparser_in_body(p));
    CHECK_EQ_INT(http_reqparser_feed(p, "abc", 3, &used), HTTP_PARSE_REQUEST);
    CHECK(!http_reqparser_wants_continue(p));
    http_req_t *r = http_reqparser_take(p);
    CHECK(r && !strcmp(r->path, "/v2/x") && !strcmp(r->query, "q=1") && r->body_len == 3);
    http_req_free(r);
    http_reqparser_destroy(p);
}

/* body_align hook for the tests: the offset named by an X-Align header */
static size_t align_hook(const http_req_t *req, void *user)
{
    const char *v = http_req_header(req, "x-align");
    return v ? (size_t)strtoul(v, NULL, 10) : 0;
}

static unsigned fnv1a(const void *p, size_t n)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const unsigned char *)p)[i]) * 16777619u;
    return h;
}

/* A plain Content-Length body: after a first piece fed from the caller's buffer, the rest is
 * "received" straight into the window (copied there, as recv would) and fed from there; the
 * next pipelined request parses normally; byte X-Align of the body is 64-byte aligned. Chunked
 * and compressed bodies have no window. */
TEST(http_parser_body_window_in_place)
{
    enum { N = 100000 };
    char *body = malloc(N);
    for (int i = 0; i < N; i++)
        body[i] = (char)(i * 7 + (i >> 9));
    char head[256];
    for (int align = 0; align < 70; align += 13) {
        int hl =
            snprintf(head, sizeof head,
                     "POST /x HTTP/1.1\r\nContent-Length: %d\r\nX-Align: %d\r\n\r\n", N, align);
        http_reqparser_opts_t o = {.body_align = align_hook};
        http_reqparser_t *p = http_reqparser_create(&o);
        char *dst;
        size_t used;
        CHECK(http_reqparser_body_window(p, &dst) == 0 && !dst); /* nothing started */
        char first[512];
        memcpy(first, head, (size_t)hl);
        memcpy(first + hl, body, 300);
        CHECK_EQ_INT(http_reqparser_feed(p, first, (size_t)hl + 300, &used), HTTP_PARSE_MORE);
        CHECK_EQ_INT(used, hl + 300);
        size_t got = 300, step = 7001;
        int rc = HTTP_PARSE_MORE;
        while (got < N) {
            size_t due = http_reqparser_body_window(p, &dst);
            CHECKF(due == N - got && dst, "due %zu at %zu", due, got);
            size_t k = due < step ? due : step;
            memcpy(dst, body + got, k);
            rc = http_reqparser_feed(p, dst, k, &used);
            CHECK_EQ_INT(used, k);
            got += k;
            CHECK_EQ_INT(rc, got < N ? HTTP_PARSE_MORE : HTTP_PARSE_REQUEST);
            step += 3000;
        }
        CHECK(http_reqparser_body_window(p, &dst) == 0); /* complete, not yet taken */
        http_req_t *r = http_reqparser_take(p);
        CHECK(r && r->body_len == N && !memcmp(r->body, body, N) && r->body[N] == 0);
        CHECKF((uintptr_t)(r->body + align) % 64 == 0, "align %d: %p", align, (void *)r->body);
        http_req_free(r);
        static const char next[] = "GET /next HTTP/1.1\r\n\r\n";
        CHECK_EQ_INT(http_reqparser_feed(p, next, sizeof next - 1, &used), HTTP_PARSE_REQUEST);
        r = http_reqparser_take(p);
        CHECK(r && !strcmp(r->path, "/next") && r->body_len == 0);
        http_req_free(r);
        http_reqparser_destroy(p);
    }
    /* no window for a chunked body, nor for a compressed one */
    static const char chunked[] = "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel";
    static const char gz[] =
        "POST /g HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 9000\r\n\r\n";
    const char *msgs[2] = {chunked, gz};
    for (int i = 0; i < 2; i++) {
        http_reqparser_t *p = http_reqparser_create(NULL);
        size_t used;
        char *dst;
        CHECK_EQ_INT(http_reqparser_feed(p, msgs[i], strlen(msgs[i]), &used), HTTP_PARSE_MORE);
        CHECK(http_reqparser_in_body(p) && http_reqparser_body_window(p, &dst) == 0);
        http_reqparser_destroy(p);
    }
    free(body);
}

/* the body_alloc / body_free hooks: known plain bodies come from the hook and go back to it when
 * the request is freed; chunked bodies stay on the heap */
static int hook_allocs, hook_frees;
static void *hook_alloc(size_t len, void *user)
{
    (void)user;
    hook_allocs++;
    return hark_malloc(len);
}
static void hook_free(void *buf, void *user)
{
    (void)user;
    hook_frees++;
    hark_free(buf);
}

TEST(http_parser_body_alloc_hooks)
{
    static const char msg[] = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
                              "POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3\r\nabc\r\n0\r\n\r\n";
    http_reqparser_opts_t o = {0};
    o.body_alloc = hook_alloc;
    o.body_free = hook_free;
    for (size_t step = 0; step <= 7; step += 7) {
        hook_allocs = hook_frees = 0;
        http_req_t *r[2];
        CHECK(parse_all(&o, msg, sizeof msg - 1, step, r, 2) == 2);
        CHECK(r[0]->body_len == 5 && !memcmp(r[0]->body, "hello", 5));
        CHECK(r[1]->body_len == 3 && !memcmp(r[1]->body, "abc", 3));
        CHECK(hook_allocs == 1 && hook_frees == 0);
        free_reqs(r, 2);
        CHECK(hook_frees == 1);
    }
}

TEST(http_error_json_escapes_and_truncates)
{
    char b[64];
    size_t n = http_error_json(b, sizeof b, "bad \"x\"\n\\ \x01");
    CHECK(!strcmp(b, "{\"error\": \"bad \\\"x\\\"\\n\\\\ \\u0001\"}"));
    CHECK(n == strlen(b));
    char s[32];
    char longmsg[200];
    memset(longmsg, 'q', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = 0;
    n = http_error_json(s, sizeof s, longmsg);
    CHECK(n == strlen(s) && n < sizeof s && s[n - 1] == '}' && s[n - 2] == '"');
    CHECK(!strcmp(http_status_reason(413), "Content Too Large"));
}

/* Replays the fuzz seeds (first byte: feed step, then the bytes): each parses or fails cleanly;
 * the well-formed ones give requests. */
TEST(http_parser_fuzz_seeds)
{
    DIR *d = opendir("tests/fuzz/corpus_http");
    if (!d)
        SKIP("tests/fuzz/corpus_http not found (run from the repository root)");
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "tests/fuzz/corpus_http/%s", e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        if (n < 1)
            continue;
        http_req_t *r[8]; /* the first byte is the fuzz target's feed step */
        int got = parse_all(NULL, buf + 1, n - 1, (size_t)(buf[0] % 64), r, 8);
        CHECKF(got >= -505, "%s", path);
        CHECKF(strstr(path, "malformed") ? got == -400 : got >= 1, "%s: %d", path, got);
        if (got > 0)
            free_reqs(r, got);
        files++;
    }
    closedir(d);
    CHECK(files >= 3);
}

/* ---- a real server --------------------------------------------------------------------------- */

typedef struct {
    uv_loop_t loop;
    http_server_t *srv;
    pthread_t th;
    int port;
    int running;
} tsrv_t;

static atomic_int g_workers;   /* worker threads alive */
static atomic_int g_cancelled; /* workers that saw their request cancelled */

typedef struct {
    http_req_t *req;
    int ms;
} job_t;

static void *worker_main(void *arg)
{
    job_t *j = arg;
    sleep_ms(j->ms);
    http_req_t *req = j->req;
    if (http_req_cancelled(req))
        atomic_fetch_add(&g_cancelled, 1);
    char body[64];
    int n = snprintf(body, sizeof body, "async %d", j->ms);
    http_res_header(req, "X-Worker", "yes");
    http_respond(req, 200, "text/plain", body, (size_t)n);
    free(j);
    atomic_fetch_sub(&g_workers, 1);
    return NULL;
}

static void freer(void *p)
{
    free(p);
}

/* /park: the request waits in g_parked until the test answers it from its own thread */
#define MAX_PARKED 300
static http_req_t *g_parked[MAX_PARKED];
static atomic_int g_n_parked;
static atomic_int g_blocking; /* /block has started */

/* /echo: "METHOD path ?query x=<X-Test> len=N\n" + body; /async?ms=N: answered by a thread;
 * /chunked: three chunks; /owned: a handed-over body; anything else: 404 JSON. */
static void test_handler(http_req_t *req, void *user)
{
    if (!strcmp(req->path, "/echo")) {
        const char *x = http_req_header(req, "x-test");
        size_t cap = req->body_len + 256;
        char *out = arena_alloc(&req->arena, cap, 1);
        int n = snprintf(out, 256, "%s %s ?%s x=%s len=%zu\n", req->method_name, req->path,
                         req->query, x ? x : "-", req->body_len);
        memcpy(out + n, req->body, req->body_len);
        http_respond(req, 200, "text/plain", out, (size_t)n + req->body_len);
    } else if (!strcmp(req->path, "/async")) {
        job_t *j = malloc(sizeof *j);
        j->req = req;
        const char *ms = strstr(req->query, "ms=");
        j->ms = ms ? atoi(ms + 3) : 20;
        pthread_t th;
        atomic_fetch_add(&g_workers, 1);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &a, worker_main, j) != 0) {
            atomic_fetch_sub(&g_workers, 1);
            free(j);
            http_respond_error(req, 500, "no thread");
        }
        pthread_attr_destroy(&a);
    } else if (!strcmp(req->path, "/chunked")) {
        http_respond_start(req, 200, "text/plain");
        http_respond_chunk(req, "one,", 4);
        http_respond_chunk(req, "", 0);
        http_respond_chunk(req, "two,", 4);
        http_respond_chunk(req, "three", 5);
        http_respond_end(req);
    } else if (!strcmp(req->path, "/block")) { /* holds the loop thread up */
        atomic_store(&g_blocking, 1);
        sleep_ms(300);
        http_respond(req, 200, "text/plain", "unblocked", 9);
    } else if (!strcmp(req->path, "/park")) {
        int i = atomic_fetch_add(&g_n_parked, 1);
        if (i < MAX_PARKED)
            g_parked[i] = req;
        else
            http_respond_error(req, 503, "parking full");
    } else if (!strcmp(req->path, "/sum")) { /* large bodies: length, hash, alignment */
        char b[128];
        const char *v = http_req_header(req, "x-align");
        size_t at = v ? (size_t)strtoul(v, NULL, 10) : 0;
        int n = snprintf(b, sizeof b, "len=%zu fnv=%08x aligned=%d", req->body_len,
                         fnv1a(req->body, req->body_len), (uintptr_t)(req->body + at) % 64 == 0);
        http_respond(req, 200, "text/plain", b, (size_t)n);
    } else if (!strcmp(req->path, "/owned")) {
        char *b = strdup("owned body");
        http_respond_owned(req, 201, "text/plain", b, strlen(b), freer, b);
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

static int tsrv_start(tsrv_t *ts, const http_server_opts_t *opts)
{
    memset(ts, 0, sizeof *ts);
    http_server_opts_t o = opts ? *opts : (http_server_opts_t){0};
    o.host = o.host ? o.host : "127.0.0.1";
    if (!o.handler)
        o.handler = test_handler;
    uv_loop_init(&ts->loop);
    hark_err_t err = {0};
    if (http_server_create(&ts->loop, &o, &ts->srv, &err) != HARK_OK) {
        fprintf(stderr, "    %s\n", err.msg);
        uv_loop_close(&ts->loop);
        return -1;
    }
    ts->port = http_server_port(ts->srv);
    pthread_create(&ts->th, NULL, loop_main, ts);
    ts->running = 1;
    return 0;
}

/* Two servers, each on its own loop thread, sharing one port through SO_REUSEPORT */
static int tsrv_start_pair(tsrv_t *a, tsrv_t *b)
{
    http_server_opts_t o = {.reuse_port = HTTP_REUSE_FIRST};
    int rc = tsrv_start(a, &o);
    if (rc != HARK_OK)
        return rc;
    o.port = a->port;
    o.reuse_port = HTTP_REUSE_JOIN;
    return tsrv_start(b, &o);
}

/* Shuts down, joins the loop (bounded by the deadline), waits for stray workers. */
static void tsrv_stop(tsrv_t *ts, unsigned deadline_ms)
{
    if (!ts->running)
        return;
    http_server_shutdown(ts->srv, deadline_ms);
    pthread_join(ts->th, NULL);
    http_server_destroy(ts->srv);
    uv_loop_close(&ts->loop);
    ts->running = 0;
    for (int i = 0; i < 300 && atomic_load(&g_workers) > 0; i++)
        sleep_ms(10);
}

static int cli_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int send_str(int fd, const char *s)
{
    return send_all(fd, s, strlen(s));
}

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
} rd_t;

typedef struct {
    int status;
    char head[4096];
    char body[1 << 16];
    size_t body_len;
} resp_t;

static void rd_init(rd_t *r, int fd)
{
    r->fd = fd;
    r->cap = 1 << 18;
    r->buf = malloc(r->cap);
    r->len = 0;
}

static void rd_free(rd_t *r)
{
    free(r->buf);
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* Reads more bytes; 0 on EOF, -1 on error/timeout. */
static int rd_fill(rd_t *r)
{
    if (r->len == r->cap)
        return -1;
    ssize_t n = recv(r->fd, r->buf + r->len, r->cap - r->len, 0);
    if (n > 0)
        r->len += (size_t)n;
    return n > 0 ? 1 : n == 0 ? 0 : -1;
}

static void rd_consume(rd_t *r, size_t n)
{
    memmove(r->buf, r->buf + n, r->len - n);
    r->len -= n;
}

static const char *resp_header(const resp_t *rs, const char *name, char *val, size_t cap)
{
    size_t nl = strlen(name);
    const char *line = strstr(rs->head, "\r\n");
    while (line && line[2]) {
        line += 2;
        if (!strncasecmp(line, name, nl) && line[nl] == ':') {
            const char *v = line + nl + 1;
            while (*v == ' ')
                v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= cap)
                n = cap - 1;
            memcpy(val, v, n);
            val[n] = 0;
            return val;
        }
        line = strstr(line, "\r\n");
    }
    return NULL;
}

/* Reads one response (Content-Length, chunked, or until EOF). 0 or -1. */
static int read_response(rd_t *r, resp_t *rs)
{
    char *end;
    while (!(end = memmem(r->buf, r->len, "\r\n\r\n", 4)))
        if (rd_fill(r) <= 0)
            return -1;
    size_t hl = (size_t)(end - r->buf) + 4;
    if (hl >= sizeof rs->head)
        return -1;
    memcpy(rs->head, r->buf, hl);
    rs->head[hl] = 0;
    rd_consume(r, hl);
    if (sscanf(rs->head, "HTTP/1.%*d %d", &rs->status) != 1)
        return -1;
    rs->body_len = 0;
    char v[64];
    if (rs->status < 200 || rs->status == 204 || rs->status == 304)
        return 0;
    if (resp_header(rs, "content-length", v, sizeof v)) {
        size_t cl = (size_t)strtoul(v, NULL, 10);
        if (cl > sizeof rs->body)
            return -1;
        while (r->len < cl)
            if (rd_fill(r) <= 0)
                return -1;
        memcpy(rs->body, r->buf, cl);
        rs->body_len = cl;
        rd_consume(r, cl);
    } else if (resp_header(rs, "transfer-encoding", v, sizeof v)) {
        for (;;) {
            char *le;
            while (!(le = memmem(r->buf, r->len, "\r\n", 2)))
                if (rd_fill(r) <= 0)
                    return -1;
            size_t sz = (size_t)strtoul(r->buf, NULL, 16);
            rd_consume(r, (size_t)(le - r->buf) + 2);
            while (r->len < sz + 2)
                if (rd_fill(r) <= 0)
                    return -1;
            if (sz == 0) {
                rd_consume(r, 2);
                break;
            }
            if (rs->body_len + sz > sizeof rs->body)
                return -1;
            memcpy(rs->body + rs->body_len, r->buf, sz);
            rs->body_len += sz;
            rd_consume(r, sz + 2);
        }
    } else {
        int rc;
        while ((rc = rd_fill(r)) > 0)
            ;
        if (rc < 0)
            return -1;
        rs->body_len = r->len < sizeof rs->body ? r->len : sizeof rs->body;
        memcpy(rs->body, r->buf, rs->body_len);
        r->len = 0;
    }
    return 0;
}

/* 1 if the server closed the connection (EOF or reset) within the receive timeout. */
static int rd_closed(rd_t *r)
{
    if (r->len)
        return 0;
    char c;
    ssize_t n = recv(r->fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static int body_is(const resp_t *rs, const char *s)
{
    return rs->body_len == strlen(s) && !memcmp(rs->body, s, rs->body_len);
}

/* One request on a fresh connection. */
static int roundtrip(int port, const char *req, resp_t *rs)
{
    rd_t r;
    int fd = cli_connect(port);
    if (fd < 0)
        return -1;
    rd_init(&r, fd);
    int rc = send_str(fd, req) == 0 ? read_response(&r, rs) : -1;
    rd_free(&r);
    return rc;
}

static resp_t *new_resp(void)
{
    return calloc(1, sizeof(resp_t));
}

TEST(http_get_post_keepalive)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    CHECK(ts.port > 0);
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK(r.fd >= 0);
    CHECK_OK(send_str(r.fd, "GET /echo?a=1 HTTP/1.1\r\nHost: t\r\nx-test: hi\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK_EQ_INT(rs->status, 200);
    CHECKF(body_is(rs, "GET /echo ?a=1 x=hi len=0\n"), "%.*s", (int)rs->body_len, rs->body);
    char v[64];
    CHECK(resp_header(rs, "content-type", v, sizeof v) && !strcmp(v, "text/plain"));
    CHECK(!resp_header(rs, "connection", v, sizeof v)); /* HTTP/1.1 keeps alive by default */
    for (int i = 0; i < 20; i++) {                      /* the same connection, sequentially */
        CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"));
        CHECK_OK(read_response(&r, rs));
        CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=5\nhello"));
    }
    CHECK_OK(send_str(r.fd, "GET /nope HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 404 && body_is(rs, "{\"error\": \"no route for '/nope'\"}"));
    CHECK(resp_header(rs, "content-type", v, sizeof v) && !strcmp(v, "application/json"));
    CHECK_OK(send_str(r.fd, "GET /owned HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 201 && body_is(rs, "owned body"));
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK(st.open_connections == 1 && st.requests_total == 23 && st.connections_total == 1);
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_pipelined_answers_keep_request_order)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    /* the first is answered last by its worker; the answers must still come in order */
    CHECK_OK(send_str(r.fd, "GET /async?ms=80 HTTP/1.1\r\n\r\n"
                            "GET /echo?second HTTP/1.1\r\n\r\n"
                            "GET /async?ms=10 HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "async 80"));
    char v[16];
    CHECK(resp_header(rs, "x-worker", v, sizeof v) && !strcmp(v, "yes"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "GET /echo ?second x=- len=0\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "async 10"));
    /* deeper than max_pipeline (16): reading pauses and resumes, nothing is lost */
    char many[40 * 40];
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(many + n, "GET /echo?%d HTTP/1.1\r\n\r\n", i);
    CHECK_OK(send_all(r.fd, many, n));
    for (int i = 0; i < 40; i++) {
        char want[64];
        snprintf(want, sizeof want, "GET /echo ?%d x=- len=0\n", i);
        CHECK_OK(read_response(&r, rs));
        CHECKF(body_is(rs, want), "%d", i);
    }
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_chunked_request_and_chunked_response)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "4\r\nwave\r\n"));
    sleep_ms(20); /* the rest in a second segment */
    CHECK_OK(send_str(r.fd, "6\r\n-form!\r\n0\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=10\nwave-form!"));
    CHECK_OK(send_str(r.fd, "GET /chunked HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    char v[32];
    CHECK(resp_header(rs, "transfer-encoding", v, sizeof v) && !strcmp(v, "chunked"));
    CHECK(rs->status == 200 && body_is(rs, "one,two,three"));
    /* HEAD: the GET head, no body */
    CHECK_OK(send_str(r.fd, "HEAD /echo HTTP/1.1\r\n\r\nGET /echo HTTP/1.1\r\n\r\n"));
    char *end;
    while (!(end = memmem(r.buf, r.len, "\r\n\r\n", 4)))
        CHECK(rd_fill(&r) > 0);
    CHECK(!strncmp(r.buf, "HTTP/1.1 200 OK\r\n", 17) &&
          memmem(r.buf, r.len, "Content-Length: 23", 18));
    rd_consume(&r, (size_t)(end - r.buf) + 4);
    CHECK_OK(read_response(&r, rs)); /* the next answer follows right after the HEAD's head */
    CHECK(rs->status == 200 && body_is(rs, "GET /echo ? x=- len=0\n"));
    /* HTTP/1.0: chunked becomes close-delimited; the connection closes */
    CHECK_OK(send_str(r.fd, "GET /chunked HTTP/1.0\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "one,two,three"));
    CHECK(resp_header(rs, "connection", v, sizeof v) && !strcmp(v, "close"));
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_expect_100_continue)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(
        send_str(r.fd, "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"));
    CHECK_OK(read_response(&r, rs)); /* the interim answer comes before any body byte */
    CHECK_EQ_INT(rs->status, 100);
    CHECK_OK(send_str(r.fd, "body"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=4\nbody"));
    /* a client that sends the body anyway gets no 100 */
    CHECK_OK(send_str(r.fd,
                      "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok"
                      "GET /echo HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=2\nok"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "GET /echo ? x=- len=0\n"));
    /* 100 waits for the earlier (slow) answer: the order on the wire stays right */
    CHECK_OK(send_str(r.fd,
                      "GET /async?ms=50 HTTP/1.1\r\n\r\n"
                      "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "async 50"));
    CHECK_OK(read_response(&r, rs));
    CHECK_EQ_INT(rs->status, 100);
    CHECK_OK(send_str(r.fd, "abc"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=3\nabc"));
    /* an empty Expect: is accepted as is; another expectation is 417 and the end */
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nExpect:\r\nContent-Length: 1\r\n\r\nz"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200);
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nExpect: tea\r\nContent-Length: 1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 417 && strstr(rs->body, "\"error\""));
    CHECK(rd_closed(&r));
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_gzip_and_deflate_bodies)
{
    http_server_opts_t o = {.max_body = 1 << 20};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    char plain[5000];
    for (size_t i = 0; i < sizeof plain; i++)
        plain[i] = (char)('A' + (i * 7) % 26);
    for (int gz = 0; gz < 2; gz++) {
        size_t zn;
        unsigned char *z = compress_buf(plain, sizeof plain, gz, &zn);
        char head[256];
        int hn = snprintf(head, sizeof head,
                          "POST /echo HTTP/1.1\r\nContent-Encoding: %s\r\n"
                          "Content-Length: %zu\r\n\r\n",
                          gz ? "gzip" : "deflate", zn);
        rd_t r;
        rd_init(&r, cli_connect(ts.port));
        CHECK_OK(send_all(r.fd, head, (size_t)hn));
        CHECK_OK(send_all(r.fd, z, zn));
        free(z);
        CHECK_OK(read_response(&r, rs));
        CHECK_EQ_INT(rs->status, 200);
        const char *nl = memchr(rs->body, '\n', rs->body_len);
        CHECK(nl && !strncmp(rs->body, "POST /echo ? x=- len=5000\n", 26));
        CHECK(rs->body_len - (size_t)(nl + 1 - rs->body) == sizeof plain);
        CHECK(!memcmp(nl + 1, plain, sizeof plain));
        rd_free(&r);
    }
    /* a zip bomb: 8 MiB of zeros in a few KiB, limit 1 MiB */
    size_t bn = 8 << 20, zn;
    char *zeros = calloc(1, bn);
    unsigned char *z = compress_buf(zeros, bn, 1, &zn);
    free(zeros);
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "POST /echo HTTP/1.1\r\nContent-Encoding: gzip\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      zn);
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_all(r.fd, head, (size_t)hn));
    send_all(r.fd, z, zn); /* the server may stop reading early */
    free(z);
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 413 && strstr(rs->body, "decompressed"));
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_body_too_large_then_next_connection_works)
{
    http_server_opts_t o = {.max_body = 64 * 1024};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    /* decided from Content-Length alone, while the client keeps sending */
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nContent-Length: 10000000\r\n\r\n"));
    char junk[16384];
    memset(junk, 'j', sizeof junk);
    for (int i = 0; i < 8; i++)
        if (send_all(r.fd, junk, sizeof junk) != 0)
            break;
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 413 && strstr(rs->body, "too large"));
    char v[16];
    CHECK(resp_header(rs, "connection", v, sizeof v) && !strcmp(v, "close"));
    rd_free(&r);
    /* chunked: decided by the running size */
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    for (int i = 0; i < 6; i++) {
        char sz[16];
        snprintf(sz, sizeof sz, "%zx\r\n", sizeof junk);
        if (send_str(r.fd, sz) || send_all(r.fd, junk, sizeof junk) || send_str(r.fd, "\r\n"))
            break;
    }
    CHECK_OK(read_response(&r, rs));
    CHECK_EQ_INT(rs->status, 413);
    rd_free(&r);
    CHECK_OK(roundtrip(ts.port, "GET /echo HTTP/1.1\r\n\r\n", rs));
    CHECK_EQ_INT(rs->status, 200);
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK(st.bad_requests == 2);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_malformed_and_oversized_heads)
{
    http_server_opts_t o = {.max_header = 1024};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    /* a good request first: its answer still comes, then the 400, then the close */
    CHECK_OK(send_str(r.fd, "GET /echo HTTP/1.1\r\n\r\nBLAH\x01 / HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK_EQ_INT(rs->status, 200);
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 400 && strstr(rs->body, "malformed"));
    CHECK(rd_closed(&r));
    rd_free(&r);
    char big[2048];
    memset(big, 'h', sizeof big);
    big[sizeof big - 1] = 0;
    char req[4096];
    snprintf(req, sizeof req, "GET /echo HTTP/1.1\r\nX-Big: %s\r\n\r\n", big);
    CHECK_OK(roundtrip(ts.port, req, rs));
    CHECK_EQ_INT(rs->status, 431);
    CHECK_OK(roundtrip(ts.port, "GET /echo HTTP/1.1\r\nx-test: ok\r\n\r\n", rs));
    CHECK(rs->status == 200 && body_is(rs, "GET /echo ? x=ok len=0\n"));
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_stalled_request_408_and_idle_close)
{
    http_server_opts_t o = {.request_timeout_ms = 200, .idle_timeout_ms = 300};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    double t0 = now_s();
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
    CHECK_OK(read_response(&r, rs));
    double dt = now_s() - t0;
    CHECK_EQ_INT(rs->status, 408);
    CHECKF(dt > 0.15 && dt < 1.5, "408 after %.3f s", dt);
    CHECK(rd_closed(&r));
    rd_free(&r);
    /* a stalled head too */
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "GET /echo HTTP/1.1\r\nHost: x"));
    CHECK_OK(read_response(&r, rs));
    CHECK_EQ_INT(rs->status, 408);
    rd_free(&r);
    /* idle keep-alive: closed after the idle timeout, silently */
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "GET /echo HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    t0 = now_s();
    CHECK(rd_closed(&r));
    dt = now_s() - t0;
    CHECKF(dt > 0.2 && dt < 1.5, "idle close after %.3f s", dt);
    rd_free(&r);
    /* a slow but steady body is not a stall */
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "POST /echo HTTP/1.1\r\nContent-Length: 4\r\n\r\n"));
    for (int i = 0; i < 4; i++) {
        sleep_ms(120);
        CHECK_OK(send_str(r.fd, "s"));
    }
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "POST /echo ? x=- len=4\nssss"));
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_async_completion_from_worker_thread)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    double t0 = now_s();
    CHECK_OK(roundtrip(ts.port, "GET /async?ms=20 HTTP/1.1\r\n\r\n", rs));
    double dt = now_s() - t0;
    CHECK(rs->status == 200 && body_is(rs, "async 20"));
    CHECKF(dt >= 0.019 && dt < 1.0, "%.3f s", dt);
    /* many at once on separate connections */
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = cli_connect(ts.port);
        CHECK(fds[i] >= 0);
        CHECK_OK(send_str(fds[i], "GET /async?ms=30 HTTP/1.1\r\n\r\n"));
    }
    for (int i = 0; i < 8; i++) {
        rd_t r;
        rd_init(&r, fds[i]);
        CHECK_OK(read_response(&r, rs));
        CHECK(rs->status == 200 && body_is(rs, "async 30"));
        rd_free(&r);
    }
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_client_gone_before_async_answer)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    atomic_store(&g_cancelled, 0);
    for (int i = 0; i < 3; i++) {
        int fd = cli_connect(ts.port);
        CHECK(fd >= 0);
        CHECK_OK(
            send_str(fd, "GET /async?ms=100 HTTP/1.1\r\n\r\nGET /async?ms=10 HTTP/1.1\r\n\r\n"));
        sleep_ms(20);
        close(fd); /* before the workers answer */
    }
    for (int i = 0; i < 100 && atomic_load(&g_workers) > 0; i++)
        sleep_ms(10);
    CHECK_EQ_INT(atomic_load(&g_workers), 0);
    int nc = atomic_load(&g_cancelled); /* every 100 ms one; a 10 ms one only if it ran late */
    CHECKF(nc >= 3 && nc <= 6, "%d cancelled", nc);
    http_server_stats_t st;
    for (int i = 0; i < 100; i++) {
        http_server_stats(ts.srv, &st);
        if (st.open_connections == 0)
            break;
        sleep_ms(10);
    }
    CHECK(st.open_connections == 0 && st.requests_in_flight == 0);
    CHECK_OK(roundtrip(ts.port, "GET /echo HTTP/1.1\r\n\r\n", rs));
    CHECK_EQ_INT(rs->status, 200);
    tsrv_stop(&ts, 1000);
    free(rs);
}

TEST(http_graceful_shutdown_finishes_inflight)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    resp_t *rs = new_resp();
    rd_t r, idle;
    rd_init(&r, cli_connect(ts.port));
    rd_init(&idle, cli_connect(ts.port));
    CHECK_OK(send_str(idle.fd, "GET /echo HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&idle, rs));
    CHECK_OK(send_str(r.fd, "GET /async?ms=200 HTTP/1.1\r\n\r\n"));
    sleep_ms(50);
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK(st.requests_in_flight == 1 && st.open_connections == 2);
    double t0 = now_s();
    http_server_shutdown(ts.srv, 3000);
    CHECK(rd_closed(&idle)); /* idle ones go at once */
    CHECK_OK(read_response(&r, rs));
    CHECK(rs->status == 200 && body_is(rs, "async 200"));
    char v[16];
    CHECK(resp_header(rs, "connection", v, sizeof v) && !strcmp(v, "close"));
    CHECK(rd_closed(&r));
    rd_free(&r);
    rd_free(&idle);
    pthread_join(ts.th, NULL); /* the loop exits by itself */
    double dt = now_s() - t0;
    CHECKF(dt < 2.0, "loop exited after %.3f s", dt);
    CHECK(cli_connect(ts.port) < 0); /* no longer listening */
    http_server_destroy(ts.srv);
    uv_loop_close(&ts.loop);
    free(rs);
}

TEST(http_shutdown_deadline_answers_503_and_drops_late_answers_safely)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    CHECK_OK(send_str(r.fd, "GET /async?ms=400 HTTP/1.1\r\n\r\n"));
    sleep_ms(30);
    double t0 = now_s();
    http_server_shutdown(ts.srv, 100);
    pthread_join(ts.th, NULL);
    double dt = now_s() - t0;
    CHECKF(dt < 0.35, "loop exited after %.3f s", dt);
    /* the deadline came first: told 503, then the connection closes */
    resp_t *rs = new_resp();
    CHECK_OK(read_response(&r, rs));
    CHECKF(rs->status == 503 && strstr(rs->body, "drain deadline"), "%d %.*s", rs->status,
           (int)rs->body_len, rs->body);
    char v[16];
    CHECK(resp_header(rs, "connection", v, sizeof v) && !strcmp(v, "close"));
    CHECK(rd_closed(&r));
    free(rs);
    http_server_destroy(ts.srv);
    uv_loop_close(&ts.loop);
    /* the worker answers after the server is gone: dropped and freed on its thread */
    for (int i = 0; i < 100 && atomic_load(&g_workers) > 0; i++)
        sleep_ms(10);
    CHECK_EQ_INT(atomic_load(&g_workers), 0);
    rd_free(&r);
}

/* connections over the limit that are all busy (a request arriving): 503 */
TEST(http_too_many_connections_503)
{
    http_server_opts_t o = {.max_connections = 2};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    rd_t a, b;
    rd_init(&a, cli_connect(ts.port));
    rd_init(&b, cli_connect(ts.port));
    CHECK_OK(send_str(a.fd, "GET /echo HTTP/1.1\r\n")); /* requests on their way: not idle */
    CHECK_OK(send_str(b.fd, "GET /echo HTTP/1.1\r\n"));
    sleep_ms(50);
    CHECK_OK(roundtrip(ts.port, "GET /echo HTTP/1.1\r\n\r\n", rs));
    CHECK(rs->status == 503 && strstr(rs->body, "too many connections"));
    rd_free(&a);
    /* a slot frees up */
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        ok = roundtrip(ts.port, "GET /echo HTTP/1.1\r\n\r\n", rs) == 0 && rs->status == 200;
        if (!ok)
            sleep_ms(10);
    }
    CHECK(ok);
    CHECK_OK(send_str(b.fd, "\r\n")); /* b's request completes and is answered */
    CHECK_OK(read_response(&b, rs));
    CHECK(rs->status == 200);
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK(st.connections_rejected >= 1);
    rd_free(&b);
    tsrv_stop(&ts, 1000);
    free(rs);
}

/* idle connections do not starve new ones: at the limit, the oldest idle one is closed */
TEST(http_idle_connection_evicted_at_the_limit)
{
    http_server_opts_t o = {.max_connections = 2};
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &o));
    resp_t *rs = new_resp();
    rd_t a, b;
    rd_init(&a, cli_connect(ts.port));
    CHECK_OK(send_str(a.fd, "GET /echo HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&a, rs));
    sleep_ms(20);
    rd_init(&b, cli_connect(ts.port)); /* never sends a byte */
    sleep_ms(20);
    CHECK_OK(roundtrip(ts.port, "GET /echo HTTP/1.1\r\n\r\n", rs)); /* a third */
    CHECK(rs->status == 200);
    CHECK(rd_closed(&a));                                   /* the oldest idle one made room */
    CHECK_OK(send_str(b.fd, "GET /echo HTTP/1.1\r\n\r\n")); /* the younger one still works */
    CHECK_OK(read_response(&b, rs));
    CHECK(rs->status == 200);
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK(st.connections_evicted == 1 && st.connections_rejected == 0);
    rd_free(&a);
    rd_free(&b);
    tsrv_stop(&ts, 1000);
    free(rs);
}

/* An API port and a metrics port on one loop; and IPv6 where the host has it. */
static void metrics_handler(http_req_t *req, void *user)
{
    const http_server_t *api = *(http_server_t **)user;
    http_server_stats_t st;
    http_server_stats(api, &st);
    char b[128];
    int n = snprintf(b, sizeof b, "open %ld\n", st.open_connections);
    http_respond(req, 200, "text/plain; version=0.0.4", b, (size_t)n);
}

static void *run_loop(void *loop)
{
    uv_run(loop, UV_RUN_DEFAULT);
    return NULL;
}

TEST(http_two_servers_share_a_loop)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    http_server_t *api = NULL, *met = NULL, *v6 = NULL;
    http_server_opts_t ao = {.host = "127.0.0.1", .handler = test_handler};
    http_server_opts_t mo = {.host = "localhost", .handler = metrics_handler, .user = &api};
    http_server_opts_t vo = {.host = "::1", .handler = test_handler};
    hark_err_t err = {0};
    CHECK_OK(http_server_create(&loop, &ao, &api, &err));
    CHECK_OK(http_server_create(&loop, &mo, &met, &err));
    int have_v6 = http_server_create(&loop, &vo, &v6, &err) == HARK_OK;
    http_server_opts_t bad = {
        .host = "127.0.0.1", .port = http_server_port(api), .handler = test_handler};
    http_server_t *dup = NULL;
    CHECK_EQ_INT(http_server_create(&loop, &bad, &dup, &err), HARK_ERR_IO);
    CHECK(strstr(err.msg, "bind") || strstr(err.msg, "listen"));
    CHECK_EQ_INT(http_server_create(
                     &loop,
                     &(http_server_opts_t){.host = "no.such.host.invalid", .handler = test_handler},
                     &dup, &err),
                 HARK_ERR_INVALID_ARG);
    pthread_t th;
    pthread_create(&th, NULL, run_loop, &loop);
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(http_server_port(api)));
    CHECK_OK(send_str(r.fd, "GET /echo HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&r, rs));
    CHECK_OK(roundtrip(http_server_port(met), "GET /metrics HTTP/1.1\r\n\r\n", rs));
    CHECK(rs->status == 200 && body_is(rs, "open 1\n"));
    if (have_v6) {
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
                                  .sin6_port = htons((uint16_t)http_server_port(v6))};
        a6.sin6_addr = in6addr_loopback;
        struct timeval tv = {3, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        CHECK(connect(fd, (struct sockaddr *)&a6, sizeof a6) == 0);
        rd_t r6;
        rd_init(&r6, fd);
        CHECK_OK(send_str(fd, "GET /echo?v6 HTTP/1.1\r\n\r\n"));
        CHECK_OK(read_response(&r6, rs));
        CHECK(rs->status == 200 && body_is(rs, "GET /echo ?v6 x=- len=0\n"));
        rd_free(&r6);
        http_server_shutdown(v6, 500);
    }
    rd_free(&r);
    http_server_shutdown(api, 500);
    http_server_shutdown(met, 500);
    pthread_join(th, NULL);
    http_server_destroy(api);
    http_server_destroy(met);
    http_server_destroy(v6);
    CHECK_OK(uv_loop_close(&loop));
    free(rs);
}

/* Large bodies (received in place while they arrive) in several sends, pipelined with a small
 * request, on one keep-alive connection; the body_align hook's offset lands aligned. */
TEST(http_large_bodies_received_in_place)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, &(http_server_opts_t){.body_align = align_hook}));
    resp_t *rs = new_resp();
    rd_t r;
    rd_init(&r, cli_connect(ts.port));
    size_t sizes[4] = {1 << 20, 320000, 20000, 16385};
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        char *msg = malloc(n + 512);
        int hl = sprintf(msg, "POST /sum HTTP/1.1\r\nContent-Length: %zu\r\nX-Align: %d\r\n\r\n", n,
                         k * 17 + 3);
        for (size_t i = 0; i < n; i++)
            msg[hl + i] = (char)(i * 31 + k);
        unsigned want = fnv1a(msg + hl, n);
        size_t tot = (size_t)hl + n;
        tot += (size_t)sprintf(msg + tot, "GET /echo?after%d HTTP/1.1\r\n\r\n", k);
        /* in uneven pieces with pauses, so the body arrives over several reads */
        for (size_t off = 0, piece = 1000; off < tot; off += piece, piece = piece * 3 + 77) {
            size_t m = off + piece < tot ? piece : tot - off;
            CHECK_OK(send_all(r.fd, msg + off, m));
            sleep_ms(2);
        }
        CHECK_OK(read_response(&r, rs));
        char want_s[128];
        snprintf(want_s, sizeof want_s, "len=%zu fnv=%08x aligned=1", n, want);
        CHECKF(rs->status == 200 && body_is(rs, want_s), "%zu: %.*s", n, (int)rs->body_len,
               rs->body);
        char want_e[64];
        snprintf(want_e, sizeof want_e, "GET /echo ?after%d x=- len=0\n", k);
        CHECK_OK(read_response(&r, rs));
        CHECKF(body_is(rs, want_e), "%.*s", (int)rs->body_len, rs->body);
        free(msg);
    }
    /* the same large body chunked: no window, still right */
    size_t n = 200000;
    char *msg = malloc(n + 512);
    int hl = sprintf(msg, "POST /sum HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n", n);
    for (size_t i = 0; i < n; i++)
        msg[hl + i] = (char)(i * 13);
    unsigned want = fnv1a(msg + hl, n);
    memcpy(msg + hl + n, "\r\n0\r\n\r\n", 7);
    CHECK_OK(send_all(r.fd, msg, (size_t)hl + n + 7));
    CHECK_OK(read_response(&r, rs));
    char want_s[128];
    snprintf(want_s, sizeof want_s, "len=%zu fnv=%08x", n, want);
    CHECKF(rs->status == 200 && rs->body_len > strlen(want_s) &&
               !memcmp(rs->body, want_s, strlen(want_s)),
           "%.*s", (int)rs->body_len, rs->body);
    free(msg);
    rd_free(&r);
    tsrv_stop(&ts, 1000);
    free(rs);
}

/* 1 when fd has bytes to read within ms */
static int readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* Between http_hold_wakeups and http_release_wakeups (an instance completing a batch) the
 * loops' wake-ups wait for the release, on every loop concerned: answers go out only then, and a
 * held answer to a client that has gone is dropped safely. More answers than a hold keeps (140 >
 * 128) still all arrive, and the loops keep serving those connections. */
TEST(http_held_wakeups_answer_at_release)
{
    tsrv_t a, b;
    CHECK_OK(tsrv_start_pair(&a, &b));
    atomic_store(&g_n_parked, 0);
    enum { NC = 12 };
    rd_t r[NC];
    for (int i = 0; i < NC; i++) {
        rd_init(&r[i], cli_connect(a.port));
        CHECK(r[i].fd >= 0);
        CHECK_OK(send_str(r[i].fd, "GET /park HTTP/1.1\r\nConnection: close\r\n\r\n"));
    }
    for (int i = 0; i < 300 && atomic_load(&g_n_parked) < NC; i++)
        sleep_ms(5);
    CHECK_EQ_INT(atomic_load(&g_n_parked), NC);
    close(r[NC - 1].fd); /* this client leaves before its answer */
    r[NC - 1].fd = -1;
    sleep_ms(50);
    http_hold_wakeups();
    http_hold_wakeups(); /* nested */
    for (int i = 0; i < NC; i++)
        http_respond(g_parked[i], 200, "text/plain", "held", 4);
    http_release_wakeups();
    int early = 0;
    for (int i = 0; i < NC - 1; i++)
        early += readable(r[i].fd, i ? 0 : 100);
    http_release_wakeups();
    CHECKF(early == 0, "%d answers went out before the release", early);
    resp_t *rs = new_resp();
    for (int i = 0; i < NC - 1; i++) {
        CHECK_OK(read_response(&r[i], rs));
        CHECK(rs->status == 200 && body_is(rs, "held"));
    }
    for (int i = 0; i < NC; i++)
        rd_free(&r[i]);
    /* keep-alive answers, more in one hold than it keeps */
    atomic_store(&g_n_parked, 0);
    enum { NP = 140 };
    rd_t *p = calloc(NP, sizeof *p);
    for (int i = 0; i < NP; i++) {
        rd_init(&p[i], cli_connect(i % 2 ? a.port : b.port));
        CHECK(p[i].fd >= 0);
        CHECK_OK(send_str(p[i].fd, "GET /park HTTP/1.1\r\n\r\n"));
    }
    for (int i = 0; i < 600 && atomic_load(&g_n_parked) < NP; i++)
        sleep_ms(5);
    CHECK_EQ_INT(atomic_load(&g_n_parked), NP);
    http_hold_wakeups();
    for (int i = 0; i < NP; i++)
        http_respond(g_parked[i], 200, "text/plain", "many", 4);
    http_release_wakeups();
    for (int i = 0; i < NP; i++) {
        CHECK_OK(read_response(&p[i], rs));
        CHECK(rs->status == 200 && body_is(rs, "many"));
        if (i % 10 == 0) { /* the loop took the answered request off: the next one is served */
            CHECK_OK(send_str(p[i].fd, "GET /echo?again HTTP/1.1\r\n\r\n"));
            CHECK_OK(read_response(&p[i], rs));
            CHECK(rs->status == 200 && body_is(rs, "GET /echo ?again x=- len=0\n"));
        }
        rd_free(&p[i]);
    }
    /* keep-alive answers in a hold that leaves them to the loops (a large batch): at the release */
    atomic_store(&g_n_parked, 0);
    for (int i = 0; i < NC; i++) {
        rd_init(&p[i], cli_connect(i % 2 ? a.port : b.port));
        CHECK_OK(send_str(p[i].fd, "GET /park HTTP/1.1\r\n\r\n"));
    }
    for (int i = 0; i < 300 && atomic_load(&g_n_parked) < NC; i++)
        sleep_ms(5);
    CHECK_EQ_INT(atomic_load(&g_n_parked), NC);
    http_hold_wakeups();
    http_hold_wakeups(); /* nested: the outer one still holds */
    for (int i = 0; i < NC; i++)
        http_respond(g_parked[i], 200, "text/plain", "loop", 4);
    http_release_wakeups();
    early = 0;
    for (int i = 0; i < NC; i++)
        early += readable(p[i].fd, i ? 0 : 100);
    http_release_wakeups();
    CHECKF(early == 0, "%d answers left to the loops went out before the release", early);
    for (int i = 0; i < NC; i++) {
        CHECK_OK(read_response(&p[i], rs));
        CHECK(rs->status == 200 && body_is(rs, "loop"));
        rd_free(&p[i]);
    }
    free(p);
    tsrv_stop(&a, 1000);
    tsrv_stop(&b, 1000);
    free(rs);
}

/* An answer from another thread is written by the connection's own loop, never by the answering
 * thread: while that loop is busy elsewhere the answer waits for it; pipelined answers keep their
 * order; the connection goes on once the loop is free. */
TEST(http_answer_from_another_thread_written_by_its_loop)
{
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    atomic_store(&g_n_parked, 0);
    atomic_store(&g_blocking, 0);
    rd_t pa, bl;
    rd_init(&pa, cli_connect(ts.port));
    rd_init(&bl, cli_connect(ts.port));
    CHECK_OK(send_str(pa.fd, "GET /park HTTP/1.1\r\n\r\n"));
    for (int i = 0; i < 300 && atomic_load(&g_n_parked) < 1; i++)
        sleep_ms(5);
    CHECK_EQ_INT(atomic_load(&g_n_parked), 1);
    CHECK_OK(send_str(bl.fd, "GET /block HTTP/1.1\r\n\r\n")); /* the loop sleeps 300 ms */
    for (int i = 0; i < 300 && !atomic_load(&g_blocking); i++)
        sleep_ms(1);
    CHECK(atomic_load(&g_blocking));
    http_respond(g_parked[0], 200, "text/plain", "queued", 6);
    CHECKF(!readable(pa.fd, 100), "the answer went out while its loop was blocked");
    resp_t *rs = new_resp();
    CHECK_OK(read_response(&pa, rs));
    CHECK(rs->status == 200 && body_is(rs, "queued"));
    CHECK_OK(read_response(&bl, rs));
    CHECK(body_is(rs, "unblocked"));
    /* two pipelined requests answered from a thread in reverse order: still in order */
    atomic_store(&g_n_parked, 0);
    CHECK_OK(send_str(pa.fd, "GET /park HTTP/1.1\r\n\r\nGET /park HTTP/1.1\r\n\r\n"));
    for (int i = 0; i < 300 && atomic_load(&g_n_parked) < 2; i++)
        sleep_ms(5);
    CHECK_EQ_INT(atomic_load(&g_n_parked), 2);
    http_respond(g_parked[1], 200, "text/plain", "second", 6);
    sleep_ms(20);
    CHECK(!readable(pa.fd, 50));
    http_respond(g_parked[0], 200, "text/plain", "first", 5);
    CHECK_OK(read_response(&pa, rs));
    CHECK(body_is(rs, "first"));
    CHECK_OK(read_response(&pa, rs));
    CHECK(body_is(rs, "second"));
    CHECK_OK(send_str(pa.fd, "GET /echo?after HTTP/1.1\r\n\r\n"));
    CHECK_OK(read_response(&pa, rs));
    CHECK(body_is(rs, "GET /echo ?after x=- len=0\n"));
    http_server_stats_t st;
    http_server_stats(ts.srv, &st);
    CHECK_EQ_INT(st.requests_in_flight, 0);
    rd_free(&pa);
    rd_free(&bl);
    tsrv_stop(&ts, 1000);
    free(rs);
}

/* SO_REUSEPORT: two servers, each on its own loop thread, listen on one port; the kernel spreads
 * connections over both and each answers its own. A first server of a new group refuses a port
 * that is in use (by a group with SO_REUSEPORT, or by a plain listener). */
TEST(http_reuse_port_spreads_connections_over_loops)
{
    tsrv_t a, b;
    CHECK_OK(tsrv_start_pair(&a, &b));
    CHECK_EQ_INT(b.port, a.port);
    uv_loop_t loop;
    uv_loop_init(&loop);
    http_server_t *other = NULL;
    hark_err_t err = {0};
    http_server_opts_t fo = {.host = "127.0.0.1",
                             .port = a.port,
                             .handler = test_handler,
                             .reuse_port = HTTP_REUSE_FIRST};
    CHECK_EQ_INT(http_server_create(&loop, &fo, &other, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "bind") != NULL, "%s", err.msg);
    int plain = socket(AF_INET, SOCK_STREAM, 0); /* a listener without SO_REUSEPORT */
    struct sockaddr_in pa = {.sin_family = AF_INET};
    pa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t pl = sizeof pa;
    CHECK(bind(plain, (struct sockaddr *)&pa, sizeof pa) == 0 && listen(plain, 4) == 0 &&
          getsockname(plain, (struct sockaddr *)&pa, &pl) == 0);
    fo.port = ntohs(pa.sin_port);
    CHECK_EQ_INT(http_server_create(&loop, &fo, &other, &err), HARK_ERR_IO);
    close(plain);
    uv_loop_close(&loop);
    resp_t *rs = new_resp();
    for (int i = 0; i < 32; i++) {
        char req[64];
        snprintf(req, sizeof req, "GET /echo?%d HTTP/1.1\r\n\r\n", i);
        CHECK_OK(roundtrip(a.port, req, rs));
        CHECK_EQ_INT(rs->status, 200);
    }
    http_server_stats_t sa, sb;
    http_server_stats(a.srv, &sa);
    http_server_stats(b.srv, &sb);
    CHECKF(sa.requests_total + sb.requests_total == 32 && sa.requests_total > 0 &&
               sb.requests_total > 0,
           "%ld + %ld", sa.requests_total, sb.requests_total);
    tsrv_stop(&a, 1000);
    tsrv_stop(&b, 1000);
    free(rs);
}

TEST(http_curl_client)
{
    if (system("command -v curl >/dev/null 2>&1") != 0)
        SKIP("curl not installed");
    tsrv_t ts;
    CHECK_OK(tsrv_start(&ts, NULL));
    const char *dir = test_tmpdir(t);
    char in[512], out[512], cmd[2048];
    snprintf(in, sizeof in, "%s/in.bin", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    /* 2 MiB: curl sends Expect: 100-continue for a body this size */
    FILE *f = fopen(in, "wb");
    CHECK(f);
    for (int i = 0; i < (2 << 20) / 16; i++)
        fwrite("0123456789abcdef", 1, 16, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "curl -s -S --max-time 5 -o %s -w '%%{http_code}' -H 'X-Test: curl' "
             "--data-binary @%s 'http://127.0.0.1:%d/echo?c=1' > %s.code",
             out, in, ts.port, out);
    CHECK_OK(system(cmd));
    char code[16] = "";
    snprintf(cmd, sizeof cmd, "%s.code", out);
    f = fopen(cmd, "r");
    CHECK(f && fgets(code, sizeof code, f));
    fclose(f);
    CHECK(!strcmp(code, "200"));
    f = fopen(out, "rb");
    CHECK(f);
    char line[128] = "";
    CHECK(fgets(line, sizeof line, f));
    fclose(f);
    CHECKF(!strcmp(line, "POST /echo ?c=1 x=curl len=2097152\n"), "%s", line);
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 5 -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/echo "
             "http://127.0.0.1:%d/chunked > %s.code2",
             ts.port, ts.port, out);
    CHECK_OK(system(cmd));
    tsrv_stop(&ts, 1000);
}
