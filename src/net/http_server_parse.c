/* http_server_parse.c — the socket-free half of http_server: http-parser callbacks that build an
 * http_req_t under the server's limits (head size, body size, gzip/deflate bodies, Expect).
 * Tests: tests/net/test_http_server.c (parser_* tests), tests/fuzz/fuzz_http_request.c */
#include "net/http_server.h"

#include "core/alloc.h"
#include "hark.h"

#include <http_parser.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#define DEFAULT_MAX_BODY ((size_t)64 << 20)
#define DEFAULT_MAX_HEADER ((size_t)32 << 10)
#define MAX_HEADERS 128
#define HEADER_OVERHEAD 4 /* ": " and CRLF of each header line */

enum { ENC_NONE, ENC_GZIP, ENC_DEFLATE };

typedef struct {
    size_t name_off, name_len, val_off, val_len;
} hdr_span_t;

struct http_reqparser {
    http_parser hp;
    http_parser_settings cb;
    size_t max_body, max_header, req_size;
    size_t (*body_align)(const http_req_t *req, void *user);
    void *user;
    void *(*body_alloc)(size_t len, void *user);
    void (*body_free)(void *buf, void *user);
    void *body_user;

    http_req_t *req;  /* being built */
    http_req_t *done; /* complete, not yet taken */

    /* the head, as it arrives: url bytes, then each header's name and value bytes */
    char *hbuf;
    size_t hlen, hcap;
    size_t url_len;
    hdr_span_t *hdrs; /* [nh] */
    size_t nh;
    int last_was_value;
    size_t trailer_bytes;

    int in_msg, in_body, got_body, expect_continue, headers_done;
    int enc;
    size_t body_due; /* a plain Content-Length body: its length (in-place receiving); else 0 */
    z_stream zs;
    int zs_live, z_end;
    size_t z_in; /* compressed bytes of this body */

    int dead;
    int status;
    char msg[200];
};

static int fail(http_reqparser_t *p, int status, const char *msg)
{
    p->status = status;
    snprintf(p->msg, sizeof p->msg, "%s", msg);
    /* stops http-parser with HPE_CB_* (1 from on_headers_complete would mean "skip the body") */
    return -1;
}

/* ---- head accumulation ----------------------------------------------------------------------- */

static int head_append(http_reqparser_t *p, const char *at, size_t len)
{
    size_t need = p->hlen + len;
    if (need + p->nh * HEADER_OVERHEAD > p->max_header)
        return fail(p, 431, "request header fields too large");
    if (need > p->hcap) {
        size_t cap = p->hcap ? p->hcap : 1024;
        while (cap < need)
            cap *= 2;
        if (cap > p->max_header)
            cap = p->max_header;
        char *b = hark_realloc(p->hbuf, cap);
        if (!b)
            return fail(p, 500, "out of memory");
        p->hbuf = b;
        p->hcap = cap;
    }
    memcpy(p->hbuf + p->hlen, at, len);
    p->hlen = need;
    return 0;
}

static void zs_end(http_reqparser_t *p)
{
    if (p->zs_live)
        inflateEnd(&p->zs);
    p->zs_live = 0;
}

static void reset_message(http_reqparser_t *p)
{
    p->hlen = p->url_len = p->nh = 0;
    p->last_was_value = 0;
    p->trailer_bytes = 0;
    p->in_msg = p->in_body = p->got_body = p->expect_continue = p->headers_done = 0;
    p->enc = ENC_NONE;
    p->body_due = 0;
    p->z_end = 0;
    p->z_in = 0;
    zs_end(p);
}

static int on_message_begin(http_parser *hp)
{
    http_reqparser_t *p = hp->data;
    reset_message(p);
    http_req_free(p->req);
    p->req = hark_calloc(1, p->req_size);
    if (!p->req)
        return fail(p, 500, "out of memory");
    arena_init(&p->req->arena, 4096);
    p->in_msg = 1;
    return 0;
}

static int on_url(http_parser *hp, const char *at, size_t len)
{
    http_reqparser_t *p = hp->data;
    if (head_append(p, at, len))
        return -1;
    p->url_len += len;
    return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
    http_reqparser_t *p = hp->data;
    if (p->headers_done) { /* a trailer of a chunked body: bounded, then dropped */
        p->trailer_bytes += len + HEADER_OVERHEAD;
        return p->trailer_bytes > p->max_header ? fail(p, 431, "trailers too large") : 0;
    }
    if (p->nh == 0 || p->last_was_value) {
        if (p->nh == MAX_HEADERS)
            return fail(p, 431, "too many header fields");
        if (p->nh % 16 == 0) {
            hdr_span_t *h = hark_realloc(p->hdrs, (p->nh + 16) * sizeof *h);
            if (!h)
                return fail(p, 500, "out of memory");
            p->hdrs = h;
        }
        p->hdrs[p->nh++] = (hdr_span_t){p->hlen, 0, 0, 0};
        p->last_was_value = 0;
    }
    if (head_append(p, at, len))
        return -1;
    p->hdrs[p->nh - 1].name_len += len;
    return 0;
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
    http_reqparser_t *p = hp->data;
    if (p->headers_done) {
        p->trailer_bytes += len;
        return p->trailer_bytes > p->max_header ? fail(p, 431, "trailers too large") : 0;
    }
    hdr_span_t *h = &p->hdrs[p->nh - 1];
    if (!p->last_was_value) {
        h->val_off = p->hlen;
        p->last_was_value = 1;
    }
    if (head_append(p, at, len))
        return -1;
    h->val_len += len;
    return 0;
}

/* Splits the request target into path and query (origin-form, or absolute-form via
 * http_parser_parse_url). */
static int split_url(http_reqparser_t *p, http_req_t *r)
{
    const char *u = r->url;
    size_t n = p->url_len;
    size_t path_off = 0, path_len = n, q_off = n, q_len = 0;
    if (n && u[0] != '/' && strcmp(u, "*") != 0) {
        struct http_parser_url pu;
        http_parser_url_init(&pu);
        if (http_parser_parse_url(u, n, p->hp.method == HTTP_CONNECT, &pu) != 0)
            return fail(p, 400, "malformed request target");
        path_off = path_len = 0;
        if (pu.field_set & (1 << UF_PATH)) {
            path_off = pu.field_data[UF_PATH].off;
            path_len = pu.field_data[UF_PATH].len;
        }
        if (pu.field_set & (1 << UF_QUERY)) {
            q_off = pu.field_data[UF_QUERY].off;
            q_len = pu.field_data[UF_QUERY].len;
        }
    } else {
        const char *q = memchr(u, '?', n);
        const char *f = memchr(u, '#', n);
        if (f && (!q || f < q))
            q = NULL;
        size_t end = f ? (size_t)(f - u) : n;
        if (q) {
            path_len = (size_t)(q - u);
            q_off = path_len + 1;
            q_len = end - q_off;
        } else {
            path_len = end;
        }
    }
    r->path = path_len ? arena_strndup(&r->arena, u + path_off, path_len) : "/";
    r->path_len = path_len ? path_len : 1;
    r->query = arena_strndup(&r->arena, u + q_off, q_len);
    r->query_len = q_len;
    if (!r->path || !r->query)
        return fail(p, 500, "out of memory");
    return 0;
}

/* Room for `need` body bytes and a NUL after them (body_off_ bytes into the allocation). */
static int body_reserve(http_reqparser_t *p, size_t need)
{
    http_req_t *r = p->req;
    if (r->body_off_ + need + 1 <= r->body_cap_)
        return 0;
    size_t cap = r->body_cap_ ? r->body_cap_ : 4096;
    while (cap < r->body_off_ + need + 1)
        cap = cap > SIZE_MAX / 2 ? r->body_off_ + need + 1 : cap * 2;
    if (cap > r->body_off_ + p->max_body + 1)
        cap = r->body_off_ + p->max_body + 1;
    char *b;
    if (r->body_free_) { /* a hook's buffer does not grow: move to the heap */
        b = hark_malloc(cap);
        if (!b)
            return fail(p, 500, "out of memory");
        memcpy(b, r->body_buf_, r->body_cap_);
        r->body_free_(r->body_buf_, r->body_user_);
        r->body_free_ = NULL;
    } else if (!(b = hark_realloc(r->body_buf_, cap))) {
        return fail(p, 500, "out of memory");
    }
    r->body_buf_ = b;
    r->body_cap_ = cap;
    return 0;
}

#define BODY_ALIGN 64

/* A known plain body, allocated once at its final size, placed so that byte `at` of it (the
 * body_align hook's answer) is BODY_ALIGN-aligned in memory. */
static int body_alloc_aligned(http_reqparser_t *p, size_t len)
{
    http_req_t *r = p->req;
    size_t at = p->body_align ? p->body_align(r, p->user) : 0;
    if (len > SIZE_MAX - BODY_ALIGN - 1)
        return fail(p, 413, "request body too large");
    char *b = p->body_alloc ? p->body_alloc(len + BODY_ALIGN + 1, p->body_user)
                            : hark_malloc(len + BODY_ALIGN + 1);
    if (!b)
        return fail(p, 500, "out of memory");
    if (p->body_alloc) {
        r->body_free_ = p->body_free;
        r->body_user_ = p->body_user;
    }
    uintptr_t want = (uintptr_t)b + (at % BODY_ALIGN);
    r->body_off_ = (BODY_ALIGN - want % BODY_ALIGN) % BODY_ALIGN;
    r->body_buf_ = b;
    r->body_cap_ = len + BODY_ALIGN + 1;
    return 0;
}

static int on_headers_complete(http_parser *hp)
{
    http_reqparser_t *p = hp->data;
    http_req_t *r = p->req;
    p->headers_done = 1;
    if (memchr(p->hbuf, 0, p->url_len))
        return fail(p, 400, "malformed HTTP request: NUL in the request target");
    r->url = arena_strndup(&r->arena, p->hbuf, p->url_len);
    r->headers = arena_calloc(&r->arena, p->nh ? p->nh : 1, sizeof *r->headers);
    if (!r->url || !r->headers)
        return fail(p, 500, "out of memory");
    for (size_t i = 0; i < p->nh; i++) {
        const hdr_span_t *s = &p->hdrs[i];
        const char *v = p->hbuf + s->val_off;
        size_t vl = s->val_len;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            vl--;
        for (size_t k = 0; k < vl; k++) /* http-parser lets NUL and other controls through */
            if (((unsigned char)v[k] < 0x20 && v[k] != '\t') || v[k] == 0x7f)
                return fail(p, 400, "malformed HTTP request: control character in a header");
        http_header_t *h = &r->headers[i];
        h->name = arena_strndup(&r->arena, p->hbuf + s->name_off, s->name_len);
        h->value = arena_strndup(&r->arena, v, vl);
        h->name_len = s->name_len;
        h->value_len = vl;
        if (!h->name || !h->value)
            return fail(p, 500, "out of memory");
    }
    r->nheaders = p->nh;
    r->method = hp->method;
    r->method_name = http_method_str((enum http_method)hp->method);
    r->http_major = hp->http_major;
    r->http_minor = hp->http_minor;
    if (split_url(p, r))
        return -1;
    if (hp->http_major != 1)
        return fail(p, 505, "HTTP version not supported (HTTP/1.x only)");

    int chunked = (hp->flags & F_CHUNKED) != 0;
    uint64_t clen = hp->content_length; /* ULLONG_MAX when absent */
    int has_clen = !chunked && clen != ULLONG_MAX;
    int body_follows = chunked || (has_clen && clen > 0);

    const char *enc = http_req_header(r, "content-encoding");
    if (!enc || !*enc || !strcasecmp(enc, "identity"))
        p->enc = ENC_NONE;
    else if (!strcasecmp(enc, "gzip") || !strcasecmp(enc, "x-gzip"))
        p->enc = ENC_GZIP;
    else if (!strcasecmp(enc, "deflate"))
        p->enc = ENC_DEFLATE;
    else
        return fail(p, 415, "unsupported Content-Encoding (gzip, deflate or identity)");

    const char *expect = http_req_header(r, "expect");
    if (expect && *expect) { /* an empty Expect: (perf_analyzer sends one) means nothing */
        if (strcasecmp(expect, "100-continue") != 0)
            return fail(p, 417, "unsupported expectation (only 100-continue)");
        p->expect_continue = body_follows;
    }

    if (has_clen && clen > p->max_body)
        return fail(p, 413, "request body too large");
    if (p->enc != ENC_NONE) {
        memset(&p->zs, 0, sizeof p->zs);
        if (inflateInit2(&p->zs, p->enc == ENC_GZIP ? 15 + 16 : 15) != Z_OK)
            return fail(p, 500, "out of memory");
        p->zs_live = 1;
    }
    /* a known plain body is allocated once (aligned as the hook asks) and may be received in
     * place (http_reqparser_body_window) */
    if (has_clen && clen > 0 && p->enc == ENC_NONE) {
        if (body_alloc_aligned(p, (size_t)clen))
            return -1;
        p->body_due = (size_t)clen;
    }
    p->in_body = body_follows;
    return 0;
}

static int body_append(http_reqparser_t *p, const char *at, size_t len)
{
    http_req_t *r = p->req;
    if (len > p->max_body - r->body_len)
        return fail(p, 413, "request body too large");
    if (body_reserve(p, r->body_len + len))
        return -1;
    char *dst = r->body_buf_ + r->body_off_ + r->body_len;
    if (at != dst) /* else received in place */
        memcpy(dst, at, len);
    r->body_len += len;
    return 0;
}

/* Inflates in[len] into the body; the decoded size is bounded by max_body (a zip bomb is 413). */
static int body_inflate(http_reqparser_t *p, const char *in, size_t len)
{
    http_req_t *r = p->req;
    z_stream *z = &p->zs;
    z->next_in = (Bytef *)(uintptr_t)in;
    z->avail_in = (uInt)len;
    while (z->avail_in > 0) {
        if (p->z_end) {
            /* gzip allows several members back to back; anything else after the end is bad */
            if (p->enc != ENC_GZIP)
                return fail(p, 400, "data after the end of the deflate stream");
            if (inflateReset(z) != Z_OK)
                return fail(p, 400, "corrupt gzip body");
            p->z_end = 0;
        }
        if (r->body_len == p->max_body)
            return fail(p, 413, "request body too large once decompressed");
        size_t room_want = r->body_len + (len > 4096 ? len * 4 : 16384);
        if (room_want > p->max_body)
            room_want = p->max_body;
        if (body_reserve(p, room_want))
            return -1;
        size_t room = r->body_cap_ - 1 - r->body_off_ - r->body_len;
        if (room > p->max_body - r->body_len)
            room = p->max_body - r->body_len;
        if (room > UINT32_MAX)
            room = UINT32_MAX;
        z->next_out = (Bytef *)r->body_buf_ + r->body_off_ + r->body_len;
        z->avail_out = (uInt)room;
        uInt in_before = z->avail_in;
        int zr = inflate(z, Z_NO_FLUSH);
        r->body_len += room - z->avail_out;
        if (zr == Z_OK && z->avail_in == in_before && z->avail_out == room) /* defensive */
            return fail(p, 400, "corrupt compressed body");
        if (zr == Z_STREAM_END)
            p->z_end = 1;
        else if (zr == Z_BUF_ERROR && z->avail_out == 0)
            continue; /* output full: the next turn grows it or says 413 */
        else if (zr != Z_OK)
            return fail(p, 400, p->enc == ENC_GZIP ? "corrupt gzip body" : "corrupt deflate body");
    }
    return 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    http_reqparser_t *p = hp->data;
    p->got_body = 1;
    if (p->enc != ENC_NONE) {
        /* the compressed bytes are bounded too (a slow trickle of an endless stream) */
        if (len > p->max_body - p->z_in)
            return fail(p, 413, "request body too large");
        p->z_in += len;
        return body_inflate(p, at, len);
    }
    return body_append(p, at, len);
}

static int on_message_complete(http_parser *hp)
{
    http_reqparser_t *p = hp->data;
    http_req_t *r = p->req;
    if (p->enc != ENC_NONE && p->z_in > 0 && !p->z_end)
        return fail(p, 400, "truncated compressed body");
    if (r->body_buf_) {
        if (body_reserve(p, r->body_len))
            return -1;
        r->body_buf_[r->body_off_ + r->body_len] = 0;
        r->body = r->body_buf_ + r->body_off_;
    } else {
        r->body = "";
    }
    r->keep_alive = http_should_keep_alive(hp);
    r->upgrade = hp->upgrade;
    p->done = r;
    p->req = NULL;
    reset_message(p);
    http_parser_pause(hp, 1); /* one request per feed: the caller takes it, then feeds on */
    return 0;
}

/* ---- public ---------------------------------------------------------------------------------- */

http_reqparser_t *http_reqparser_create(const http_reqparser_opts_t *o)
{
    http_reqparser_t *p = hark_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->max_body = o && o->max_body ? o->max_body : DEFAULT_MAX_BODY;
    p->max_header = o && o->max_header ? o->max_header : DEFAULT_MAX_HEADER;
    p->req_size = o && o->req_size > sizeof(http_req_t) ? o->req_size : sizeof(http_req_t);
    p->body_align = o ? o->body_align : NULL;
    p->user = o ? o->user : NULL;
    if (o && o->body_alloc && o->body_free) {
        p->body_alloc = o->body_alloc;
        p->body_free = o->body_free;
        p->body_user = o->body_user;
    }
    http_parser_init(&p->hp, HTTP_REQUEST);
    p->hp.data = p;
    http_parser_settings_init(&p->cb);
    p->cb.on_message_begin = on_message_begin;
    p->cb.on_url = on_url;
    p->cb.on_header_field = on_header_field;
    p->cb.on_header_value = on_header_value;
    p->cb.on_headers_complete = on_headers_complete;
    p->cb.on_body = on_body;
    p->cb.on_message_complete = on_message_complete;
    return p;
}

void http_reqparser_destroy(http_reqparser_t *p)
{
    if (!p)
        return;
    zs_end(p);
    http_req_free(p->req);
    http_req_free(p->done);
    hark_free(p->hbuf);
    hark_free(p->hdrs);
    hark_free(p);
}

int http_reqparser_feed(http_reqparser_t *p, const char *data, size_t len, size_t *used)
{
    *used = 0;
    if (p->dead)
        return HTTP_PARSE_ERROR;
    if (p->done) /* the caller must take the previous request first */
        return HTTP_PARSE_REQUEST;
    if (HTTP_PARSER_ERRNO(&p->hp) == HPE_PAUSED)
        http_parser_pause(&p->hp, 0);
    if (len == 0 && !p->in_msg)
        return HTTP_PARSE_MORE; /* a clean close between requests */
    size_t n = http_parser_execute(&p->hp, &p->cb, data, len);
    *used = n > len ? len : n;
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    if (e == HPE_PAUSED && p->done)
        return HTTP_PARSE_REQUEST;
    if (e == HPE_OK && len == 0 && p->in_msg)
        e = HPE_INVALID_EOF_STATE;
    if (e == HPE_OK)
        return HTTP_PARSE_MORE;
    p->dead = 1;
    if (!p->status) {
        if (e == HPE_HEADER_OVERFLOW)
            fail(p, 431, "request header fields too large");
        else if (e == HPE_INVALID_EOF_STATE)
            fail(p, 400, "connection closed in the middle of a request");
        else {
            char m[160];
            snprintf(m, sizeof m, "malformed HTTP request: %s", http_errno_description(e));
            fail(p, 400, m);
        }
    }
    return HTTP_PARSE_ERROR;
}

http_req_t *http_reqparser_take(http_reqparser_t *p)
{
    http_req_t *r = p->done;
    p->done = NULL;
    return r;
}

int http_reqparser_error(const http_reqparser_t *p, const char **msg)
{
    if (msg)
        *msg = p->msg;
    return p->status;
}

int http_reqparser_in_request(const http_reqparser_t *p)
{
    return p->in_msg;
}

int http_reqparser_in_body(const http_reqparser_t *p)
{
    return p->in_msg && p->in_body;
}

size_t http_reqparser_body_window(http_reqparser_t *p, char **dst)
{
    *dst = NULL;
    if (p->dead || p->done || !p->in_msg || !p->in_body || !p->body_due || !p->req)
        return 0;
    http_req_t *r = p->req;
    if (r->body_len >= p->body_due) /* defensive: the parser completes the message first */
        return 0;
    *dst = r->body_buf_ + r->body_off_ + r->body_len;
    return p->body_due - r->body_len;
}

int http_reqparser_wants_continue(const http_reqparser_t *p)
{
    return p->in_msg && p->expect_continue && !p->got_body && !p->dead;
}

void http_req_free(http_req_t *r)
{
    if (!r)
        return;
    arena_free(&r->arena);
    if (r->body_free_)
        r->body_free_(r->body_buf_, r->body_user_);
    else
        hark_free(r->body_buf_);
    hark_free(r);
}

const char *http_req_header(const http_req_t *r, const char *name)
{
    for (size_t i = 0; i < r->nheaders; i++)
        if (!strcasecmp(r->headers[i].name, name))
            return r->headers[i].value;
    return NULL;
}

const char *http_status_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 406:
        return "Not Acceptable";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 417:
        return "Expectation Failed";
    case 422:
        return "Unprocessable Content";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    }
    return "Unknown";
}

size_t http_error_json(char *buf, size_t cap, const char *msg)
{
    static const char pre[] = "{\"error\": \"", post[] = "\"}";
    static const char hex[] = "0123456789abcdef";
    if (cap < sizeof pre + sizeof post - 1) {
        if (cap)
            buf[0] = 0;
        return 0;
    }
    size_t n = sizeof pre - 1, lim = cap - sizeof post; /* room for post and its NUL */
    memcpy(buf, pre, n);
    for (const unsigned char *s = (const unsigned char *)msg; *s; s++) {
        char e[7];
        size_t el = 0;
        if (*s == '"' || *s == '\\')
            e[el++] = '\\', e[el++] = (char)*s;
        else if (*s == '\n')
            e[el++] = '\\', e[el++] = 'n';
        else if (*s == '\t')
            e[el++] = '\\', e[el++] = 't';
        else if (*s == '\r')
            e[el++] = '\\', e[el++] = 'r';
        else if (*s < 0x20 || *s == 0x7f)
            el = (size_t)snprintf(e, sizeof e, "\\u00%c%c", hex[*s >> 4], hex[*s & 15]);
        else
            e[el++] = (char)*s;
        if (n + el > lim)
            break;
        memcpy(buf + n, e, el);
        n += el;
    }
    memcpy(buf + n, post, sizeof post);
    return n + sizeof post - 1;
}
