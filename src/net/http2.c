/* http2.c — HTTP/2 server on libuv + nghttp2 (see http2.h): the loop owns sockets and sessions;
 * answers from other threads arrive through a mutex-protected queue and a uv_async wake-up.
 * Tests: tests/net/test_http2.c, tests/server/test_grpc.py; fuzz: tests/fuzz/fuzz_grpc.c */
#include "net/http2.h"

#include "net/listen.h"

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"

#include <nghttp2/nghttp2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define WRITE_HIGH_WATER ((size_t)1 << 20) /* bytes queued on the socket before we stop sending */
#define WRITE_CHUNK ((size_t)64 << 10)
#define READ_BUF ((size_t)64 << 10)

enum { OP_HEADERS, OP_DATA, OP_TRAILERS };

typedef struct op {
    struct op *next;
    http2_stream_t *st; /* holds a reference */
    int kind;
    uint8_t *data; /* DATA payload (taken) */
    size_t len;
    nghttp2_nv *nv; /* HEADERS / TRAILERS: one allocation holding the array and the strings */
    int n;
} op_t;

/* the queue of answers from any thread to the loop; refcounted (the server and every stream) */
typedef struct {
    pthread_mutex_t mu;
    op_t *head, *tail;
    atomic_int refs;
    int closed;        /* the loop is gone: pushes are freed at once */
    uv_async_t *async; /* NULL for a socket-free server */
    int shutdown_req;  /* under mu */
    unsigned shutdown_ms;
} outq_t;

typedef struct chunk {
    struct chunk *next;
    uint8_t *data;
    size_t len, off;
} chunk_t;

struct http2_stream {
    atomic_int refs;
    atomic_int cancelled;
    outq_t *q;
    http2_conn_t *conn; /* loop only; NULL once closed */
    int32_t id;
    http2_header_t *hdrs; /* request headers (copies) */
    int nh, caph;
    size_t hdr_bytes;
    int seen; /* on_headers was called */
    /* output, loop only */
    chunk_t *out_head, *out_tail;
    int submitted, deferred, end_pending;
    nghttp2_nv *trailers;
    int ntrailers;
    struct http2_stream *prev, *next; /* in conn */
    void *user;
};

struct http2_conn {
    http2_server_t *s;
    nghttp2_session *sess;
    int is_tcp;
    uv_tcp_t tcp;
    uv_timer_t idle;
    int handles_open;
    http2_write_fn wfn;
    void *wuser;
    http2_stream_t *streams;
    int nstreams;
    int closing, goaway;
    size_t write_pending;
    uint8_t rbuf[READ_BUF];
    struct http2_conn *prev, *next;
};

struct http2_server {
    http2_server_opts_t o;
    uv_loop_t *loop;
    uv_tcp_t listener;
    int listening;
    uv_async_t async;
    uv_timer_t deadline;
    int handles_open;
    outq_t *q;
    http2_conn_t *conns;
    int nconns;
    int port;
    int shutting, finished;
};

/* ---- queue and refs ------------------------------------------------------------------------- */

static void q_unref(outq_t *q)
{
    if (atomic_fetch_sub(&q->refs, 1) == 1) {
        pthread_mutex_destroy(&q->mu);
        hark_free(q);
    }
}

static void stream_free(http2_stream_t *st)
{
    for (int i = 0; i < st->nh; i++)
        hark_free((void *)st->hdrs[i].name); /* name and value share one allocation */
    hark_free(st->hdrs);
    for (chunk_t *c = st->out_head, *n; c; c = n) {
        n = c->next;
        hark_free(c->data);
        hark_free(c);
    }
    hark_free(st->trailers);
    q_unref(st->q);
    hark_free(st);
}

void http2_stream_ref(http2_stream_t *st)
{
    atomic_fetch_add(&st->refs, 1);
}

void http2_stream_unref(http2_stream_t *st)
{
    if (st && atomic_fetch_sub(&st->refs, 1) == 1)
        stream_free(st);
}

static void op_free(op_t *op)
{
    hark_free(op->data);
    hark_free(op->nv);
    http2_stream_unref(op->st);
    hark_free(op);
}

static int q_push(http2_stream_t *st, op_t *op)
{
    outq_t *q = st->q;
    http2_stream_ref(st);
    op->st = st;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        op_free(op);
        return HARK_ERR_CLOSED;
    }
    if (q->tail)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    if (q->async)
        uv_async_send(q->async);
    pthread_mutex_unlock(&q->mu);
    return HARK_OK;
}

/* nv array + strings in one allocation; extra: room for one more leading entry (:status) */
static nghttp2_nv *nv_copy(const http2_header_t *h, int n, int status, int *out_n)
{
    size_t bytes = (size_t)(n + 1) * sizeof(nghttp2_nv) + 4;
    for (int i = 0; i < n; i++)
        bytes += strlen(h[i].name) + strlen(h[i].value) + 2;
    nghttp2_nv *nv = hark_malloc(bytes);
    if (!nv)
        return NULL;
    char *p = (char *)(nv + n + 1);
    int k = 0;
    if (status) {
        memcpy(p, "200", 4);
        nv[k++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)p, 7, 3, NGHTTP2_NV_FLAG_NONE};
        p += 4;
    }
    for (int i = 0; i < n; i++) {
        size_t ln = strlen(h[i].name), lv = strlen(h[i].value);
        memcpy(p, h[i].name, ln + 1);
        memcpy(p + ln + 1, h[i].value, lv + 1);
        nv[k++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)p + ln + 1, ln, lv, NGHTTP2_NV_FLAG_NONE};
        p += ln + lv + 2;
    }
    *out_n = k;
    return nv;
}

int http2_stream_send_headers(http2_stream_t *st, const http2_header_t *h, int n)
{
    op_t *op = hark_calloc(1, sizeof *op);
    if (!op || !(op->nv = nv_copy(h, n, 1, &op->n))) {
        hark_free(op);
        return HARK_ERR_NOMEM;
    }
    op->kind = OP_HEADERS;
    return q_push(st, op);
}

int http2_stream_send_data(http2_stream_t *st, uint8_t *data, size_t len)
{
    op_t *op = hark_calloc(1, sizeof *op);
    if (!op) {
        hark_free(data);
        return HARK_ERR_NOMEM;
    }
    op->kind = OP_DATA;
    op->data = data;
    op->len = len;
    return q_push(st, op);
}

int http2_stream_send_trailers(http2_stream_t *st, const http2_header_t *t, int n)
{
    op_t *op = hark_calloc(1, sizeof *op);
    if (!op || !(op->nv = nv_copy(t, n, 1, &op->n))) {
        hark_free(op);
        return HARK_ERR_NOMEM;
    }
    op->kind = OP_TRAILERS;
    return q_push(st, op);
}

const char *http2_stream_header(const http2_stream_t *st, const char *name)
{
    for (int i = 0; i < st->nh; i++)
        if (!strcmp(st->hdrs[i].name, name))
            return st->hdrs[i].value;
    return NULL;
}

void *http2_stream_user(const http2_stream_t *st)
{
    return st->user;
}

void http2_stream_set_user(http2_stream_t *st, void *user)
{
    st->user = user;
}

const atomic_int *http2_stream_cancelled_flag(const http2_stream_t *st)
{
    return &st->cancelled;
}

/* ---- connections ---------------------------------------------------------------------------- */

static void conn_flush(http2_conn_t *c);
static void conn_close(http2_conn_t *c);
static void server_maybe_finish(http2_server_t *s);

/* the stream is gone from its connection: cancel, tell the handler, drop the server's ref */
static void stream_closed(http2_stream_t *st)
{
    http2_conn_t *c = st->conn;
    if (!c)
        return;
    st->conn = NULL;
    atomic_store(&st->cancelled, 1);
    if (st->prev)
        st->prev->next = st->next;
    else
        c->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    c->nstreams--;
    if (c->sess)
        nghttp2_session_set_stream_user_data(c->sess, st->id, NULL);
    if (st->seen && c->s->o.handler.on_close)
        c->s->o.handler.on_close(st, c->s->o.user);
    http2_stream_unref(st);
    if (c->nstreams == 0 && c->is_tcp && !c->closing && c->s->o.idle_timeout_ms)
        uv_timer_again(&c->idle);
}

static ssize_t data_read_cb(nghttp2_session *sess, int32_t id, uint8_t *buf, size_t length,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    http2_stream_t *st = src->ptr;
    size_t got = 0;
    while (got < length && st->out_head) {
        chunk_t *ch = st->out_head;
        size_t k = ch->len - ch->off;
        if (k > length - got)
            k = length - got;
        memcpy(buf + got, ch->data + ch->off, k);
        ch->off += k;
        got += k;
        if (ch->off == ch->len) {
            st->out_head = ch->next;
            if (!st->out_head)
                st->out_tail = NULL;
            hark_free(ch->data);
            hark_free(ch);
        }
    }
    if (!st->out_head && st->end_pending) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        if (st->ntrailers) {
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            /* skip the :status entry we keep first */
            if (nghttp2_submit_trailer(sess, id, st->trailers + 1, (size_t)st->ntrailers - 1))
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
        return (ssize_t)got;
    }
    if (!got) {
        st->deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    return (ssize_t)got;
}

static void apply_op(op_t *op)
{
    http2_stream_t *st = op->st;
    http2_conn_t *c = st->conn;
    if (!c || c->closing)
        return; /* reset or closed: dropped */
    int rv = 0;
    switch (op->kind) {
    case OP_HEADERS: {
        if (st->submitted)
            return;
        nghttp2_data_provider prd = {.source.ptr = st, .read_callback = data_read_cb};
        rv = nghttp2_submit_response(c->sess, st->id, op->nv, (size_t)op->n, &prd);
        st->submitted = 1;
        break;
    }
    case OP_DATA: {
        chunk_t *ch = hark_calloc(1, sizeof *ch);
        if (!ch) {
            rv = -1;
            break;
        }
        ch->data = op->data;
        ch->len = op->len;
        op->data = NULL;
        if (st->out_tail)
            st->out_tail->next = ch;
        else
            st->out_head = ch;
        st->out_tail = ch;
        break;
    }
    case OP_TRAILERS:
        if (st->end_pending)
            return;
        if (!st->submitted) { /* Trailers-Only */
            st->submitted = 1;
            st->end_pending = 1;
            rv = nghttp2_submit_response(c->sess, st->id, op->nv, (size_t)op->n, NULL);
            break;
        }
        st->end_pending = 1;
        st->trailers = op->nv;
        st->ntrailers = op->n;
        op->nv = NULL;
        break;
    }
    if (!rv && st->deferred && st->submitted) {
        st->deferred = 0;
        rv = nghttp2_session_resume_data(c->sess, st->id);
    }
    if (rv)
        nghttp2_submit_rst_stream(c->sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

static void begin_shutdown(http2_server_t *s, unsigned ms);

/* applies every queued answer, then writes the connections that got some */
static void drain_queue(http2_server_t *s)
{
    outq_t *q = s->q;
    pthread_mutex_lock(&q->mu);
    op_t *list = q->head;
    q->head = q->tail = NULL;
    int sd = q->shutdown_req;
    q->shutdown_req = 0;
    pthread_mutex_unlock(&q->mu);
    for (op_t *op = list; op; op = op->next)
        apply_op(op);
    for (op_t *op = list, *n; op; op = n) {
        n = op->next;
        http2_conn_t *c = op->st->conn;
        if (c && !c->closing)
            conn_flush(c); /* cheap when nothing is pending */
        op_free(op);
    }
    if (sd)
        begin_shutdown(s, q->shutdown_ms);
}

static void on_async(uv_async_t *h)
{
    drain_queue(h->data);
}

void http2_server_poll(http2_server_t *s)
{
    drain_queue(s);
}

/* nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *sess, const nghttp2_frame *f, void *user)
{
    http2_conn_t *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    http2_stream_t *st = hark_calloc(1, sizeof *st);
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    atomic_init(&st->refs, 1);
    atomic_init(&st->cancelled, 0);
    st->q = c->s->q;
    atomic_fetch_add(&st->q->refs, 1);
    st->conn = c;
    st->id = f->hd.stream_id;
    st->next = c->streams;
    if (c->streams)
        c->streams->prev = st;
    c->streams = st;
    c->nstreams++;
    if (c->is_tcp)
        uv_timer_stop(&c->idle);
    nghttp2_session_set_stream_user_data(sess, st->id, st);
    return 0;
}

static int on_header(nghttp2_session *sess, const nghttp2_frame *f, const uint8_t *name,
                     size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    http2_conn_t *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client: ignored */
    http2_stream_t *st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (!st)
        return 0;
    st->hdr_bytes += nlen + vlen + 32;
    if (st->hdr_bytes > c->s->o.max_header_list)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets the stream */
    if (st->nh == st->caph) {
        int nc = st->caph ? st->caph * 2 : 16;
        http2_header_t *nh = hark_realloc(st->hdrs, (size_t)nc * sizeof *nh);
        if (!nh)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        st->hdrs = nh;
        st->caph = nc;
    }
    char *p = hark_malloc(nlen + vlen + 2);
    if (!p)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    memcpy(p, name, nlen);
    p[nlen] = 0;
    memcpy(p + nlen + 1, value, vlen);
    p[nlen + 1 + vlen] = 0;
    st->hdrs[st->nh++] = (http2_header_t){p, p + nlen + 1};
    return 0;
}

static int on_frame_recv(nghttp2_session *sess, const nghttp2_frame *f, void *user)
{
    http2_conn_t *c = user;
    http2_server_t *s = c->s;
    if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
        return 0;
    http2_stream_t *st = nghttp2_session_get_stream_user_data(sess, f->hd.stream_id);
    if (!st)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        st->seen = 1;
        if (s->o.handler.on_headers(st, s->o.user)) {
            nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_REFUSED_STREAM);
            return 0;
        }
    }
    if ((f->hd.flags & NGHTTP2_FLAG_END_STREAM) && st->seen && s->o.handler.on_end)
        s->o.handler.on_end(st, s->o.user);
    return 0;
}

static int on_data_chunk(nghttp2_session *sess, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *user)
{
    http2_conn_t *c = user;
    http2_stream_t *st = nghttp2_session_get_stream_user_data(sess, id);
    if (!st || !st->seen)
        return 0;
    if (c->s->o.handler.on_data && c->s->o.handler.on_data(st, data, len, c->s->o.user))
        nghttp2_submit_rst_stream(sess, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    return 0;
}

static int on_stream_close(nghttp2_session *sess, int32_t id, uint32_t code, void *user)
{
    http2_stream_t *st = nghttp2_session_get_stream_user_data(sess, id);
    if (st)
        stream_closed(st);
    return 0;
}

static nghttp2_session_callbacks *g_cbs;
static pthread_once_t g_cbs_once = PTHREAD_ONCE_INIT;
static void make_cbs(void)
{
    if (nghttp2_session_callbacks_new(&g_cbs))
        return;
    nghttp2_session_callbacks_set_on_begin_headers_callback(g_cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(g_cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(g_cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g_cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(g_cbs, on_stream_close);
}

static http2_conn_t *conn_new(http2_server_t *s)
{
    pthread_once(&g_cbs_once, make_cbs);
    if (!g_cbs)
        return NULL;
    http2_conn_t *c = hark_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->s = s;
    nghttp2_option *opt = NULL;
    if (nghttp2_option_new(&opt)) {
        hark_free(c);
        return NULL;
    }
    nghttp2_option_set_max_send_header_block_length(opt, 64 << 10);
    int rv = nghttp2_session_server_new2(&c->sess, g_cbs, c, opt);
    nghttp2_option_del(opt);
    if (rv) {
        hark_free(c);
        return NULL;
    }
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->o.max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)s->o.max_header_list},
        /* DATA frames up to 1 MiB: a client that sends its message in frames as large as we
         * take (hark's does) sends a 5 s request in one frame instead of twenty of 16 KiB */
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, 1 << 20},
    };
    nghttp2_submit_settings(c->sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
    nghttp2_session_set_local_window_size(c->sess, NGHTTP2_FLAG_NONE, 0, 16 << 20);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (s->shutting) { /* accepted in the same turn as the shutdown */
        nghttp2_submit_goaway(c->sess, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
        c->goaway = 1;
    }
    return c;
}

static void conn_unlink_and_free_session(http2_conn_t *c)
{
    http2_server_t *s = c->s;
    while (c->streams)
        stream_closed(c->streams);
    nghttp2_session_del(c->sess);
    c->sess = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
}

typedef struct {
    uv_write_t req;
    http2_conn_t *c;
    uint8_t *buf;
    size_t len;
} wreq_t;

static void on_written(uv_write_t *w, int status)
{
    wreq_t *r = (wreq_t *)w;
    http2_conn_t *c = r->c;
    c->write_pending -= r->len;
    hark_free(r->buf);
    hark_free(r);
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    conn_flush(c);
}

static int conn_write(http2_conn_t *c, uint8_t *buf, size_t len)
{
    if (!c->is_tcp) {
        if (c->wfn)
            c->wfn(c->wuser, buf, len);
        hark_free(buf);
        return 0;
    }
    wreq_t *r = hark_malloc(sizeof *r);
    if (!r) {
        hark_free(buf);
        return -1;
    }
    r->c = c;
    r->buf = buf;
    r->len = len;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
    c->write_pending += len;
    if (uv_write(&r->req, (uv_stream_t *)&c->tcp, &b, 1, on_written)) {
        c->write_pending -= len;
        hark_free(buf);
        hark_free(r);
        return -1;
    }
    return 0;
}

/* sends what nghttp2 has, in writes of up to WRITE_CHUNK, until the socket's queue is full */
static void conn_flush(http2_conn_t *c)
{
    if (c->closing)
        return;
    while (c->write_pending < WRITE_HIGH_WATER) {
        uint8_t *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->sess, &data);
            if (n < 0) {
                hark_free(buf);
                conn_close(c);
                return;
            }
            if (n == 0)
                break;
            if (len + (size_t)n > cap) {
                size_t nc = cap ? cap : WRITE_CHUNK;
                while (nc < len + (size_t)n)
                    nc *= 2;
                uint8_t *nb = hark_realloc(buf, nc);
                if (!nb) {
                    hark_free(buf);
                    conn_close(c);
                    return;
                }
                buf = nb;
                cap = nc;
            }
            memcpy(buf + len, data, (size_t)n);
            len += (size_t)n;
            if (len >= WRITE_CHUNK)
                break;
        }
        if (!len)
            break;
        if (conn_write(c, buf, len)) {
            conn_close(c);
            return;
        }
    }
    if (c->write_pending == 0 &&
        ((!nghttp2_session_want_read(c->sess) && !nghttp2_session_want_write(c->sess)) ||
         (c->goaway && c->nstreams == 0)))
        conn_close(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    http2_conn_t *c = h->data;
    if (--c->handles_open == 0) {
        http2_server_t *s = c->s;
        hark_free(c);
        server_maybe_finish(s);
    }
}

static void conn_close(http2_conn_t *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    conn_unlink_and_free_session(c);
    if (c->is_tcp) {
        uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
        uv_close((uv_handle_t *)&c->idle, on_conn_handle_closed);
    }
    /* socket-free connections are freed by http2_conn_close */
}

static void on_idle(uv_timer_t *t)
{
    http2_conn_t *c = t->data;
    if (c->nstreams == 0 && !c->closing) {
        nghttp2_session_terminate_session(c->sess, NGHTTP2_NO_ERROR);
        conn_flush(c);
    }
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    http2_conn_t *c = h->data;
    *b = uv_buf_init((char *)c->rbuf, sizeof c->rbuf);
}

static int conn_recv(http2_conn_t *c, const uint8_t *data, size_t len)
{
    ssize_t rv = nghttp2_session_mem_recv(c->sess, data, len);
    if (rv < 0) {
        LOG_DEBUG("http2: %s; closing the connection", nghttp2_strerror((int)rv));
        /* a protocol error has GOAWAY queued: try to send it before closing */
        if (!c->goaway)
            nghttp2_session_terminate_session(c->sess, NGHTTP2_PROTOCOL_ERROR);
        c->goaway = 1;
        conn_flush(c);
        return -1;
    }
    drain_queue(c->s); /* answers produced synchronously by the handler */
    if (!c->closing)
        conn_flush(c);
    return 0;
}

static void on_read(uv_stream_t *h, ssize_t n, const uv_buf_t *b)
{
    http2_conn_t *c = h->data;
    if (n < 0) {
        conn_close(c);
        return;
    }
    if (n == 0)
        return;
    if (conn_recv(c, (const uint8_t *)b->base, (size_t)n) && !c->closing) {
        uv_read_stop(h);
        if (c->write_pending == 0)
            conn_close(c);
    }
}

static void on_reject_closed(uv_handle_t *h)
{
    hark_free(h);
}

static void on_connection(uv_stream_t *l, int status)
{
    http2_server_t *s = l->data;
    if (status < 0)
        return;
    if (s->nconns >= (int)s->o.max_connections || s->shutting) {
        uv_tcp_t *t = hark_malloc(sizeof *t);
        if (!t)
            return;
        uv_tcp_init(s->loop, t);
        if (uv_accept(l, (uv_stream_t *)t) == 0)
            LOG_WARN("gRPC: over %u connections; refusing one", s->o.max_connections);
        uv_close((uv_handle_t *)t, on_reject_closed);
        return;
    }
    http2_conn_t *c = conn_new(s);
    if (!c)
        return;
    c->is_tcp = 1;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->idle);
    c->tcp.data = c->idle.data = c;
    c->handles_open = 2;
    if (uv_accept(l, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (s->o.idle_timeout_ms)
        uv_timer_start(&c->idle, on_idle, s->o.idle_timeout_ms, s->o.idle_timeout_ms);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    conn_flush(c); /* our SETTINGS */
}

/* ---- server --------------------------------------------------------------------------------- */

static void on_server_handle_closed(uv_handle_t *h)
{
    http2_server_t *s = h->data;
    s->handles_open--;
}

static void server_maybe_finish(http2_server_t *s)
{
    if (!s->shutting || s->finished || s->nconns > 0 || !s->loop)
        return;
    s->finished = 1;
    pthread_mutex_lock(&s->q->mu);
    s->q->closed = 1;
    op_t *list = s->q->head;
    s->q->head = s->q->tail = NULL;
    pthread_mutex_unlock(&s->q->mu);
    for (op_t *op = list, *n; op; op = n) {
        n = op->next;
        op_free(op);
    }
    uv_close((uv_handle_t *)&s->deadline, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->async, on_server_handle_closed);
}

static void on_deadline(uv_timer_t *t)
{
    http2_server_t *s = t->data;
    if (s->nconns)
        LOG_WARN("gRPC: drain deadline passed; closing %d connection(s)", s->nconns);
    while (s->conns)
        conn_close(s->conns);
    server_maybe_finish(s);
}

static void begin_shutdown(http2_server_t *s, unsigned ms)
{
    if (s->shutting)
        return;
    s->shutting = 1;
    if (s->listening) {
        s->listening = 0;
        uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
    }
    for (http2_conn_t *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (!c->goaway) {
            nghttp2_submit_goaway(c->sess, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(c->sess),
                                  NGHTTP2_NO_ERROR, NULL, 0);
            c->goaway = 1;
        }
        conn_flush(c); /* closes it at once when it has no stream */
    }
    if (s->loop)
        uv_timer_start(&s->deadline, on_deadline, ms, 0);
    server_maybe_finish(s);
}

void http2_server_shutdown(http2_server_t *s, unsigned deadline_ms)
{
    pthread_mutex_lock(&s->q->mu);
    if (!s->q->closed) {
        s->q->shutdown_req = 1;
        s->q->shutdown_ms = deadline_ms;
        if (s->q->async)
            uv_async_send(s->q->async);
    }
    pthread_mutex_unlock(&s->q->mu);
}

int http2_server_create(uv_loop_t *loop, const http2_server_opts_t *o, http2_server_t **out,
                        hark_err_t *err)
{
    *out = NULL;
    http2_server_t *s = hark_calloc(1, sizeof *s);
    outq_t *q = hark_calloc(1, sizeof *q);
    if (!s || !q) {
        hark_free(s);
        hark_free(q);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    s->o = *o;
    if (!s->o.host)
        s->o.host = "127.0.0.1";
    if (!s->o.max_streams)
        s->o.max_streams = 100;
    if (!s->o.max_connections)
        s->o.max_connections = 1024;
    if (!s->o.max_header_list)
        s->o.max_header_list = 64 << 10;
    pthread_mutex_init(&q->mu, NULL);
    atomic_init(&q->refs, 1);
    s->q = q;
    s->loop = loop;
    if (!loop) {
        *out = s;
        return HARK_OK;
    }
    int fd = -1, rc;
    if ((rc = net_listen(s->o.host, o->port, o->reuse_port, "gRPC", &fd, &s->port, err))) {
        q_unref(q);
        hark_free(s);
        return rc;
    }
    uv_tcp_init(loop, &s->listener);
    uv_async_init(loop, &s->async, on_async);
    uv_timer_init(loop, &s->deadline);
    s->listener.data = s->async.data = s->deadline.data = s;
    s->handles_open = 3;
    s->listening = 1;
    q->async = &s->async;
    if ((rc = uv_tcp_open(&s->listener, fd)) ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection))) {
        err_set(err, HARK_ERR_IO, "gRPC: cannot listen on %s:%d: %s", s->o.host, o->port,
                uv_strerror(rc));
        *out = s; /* closed through shutdown by the caller's destroy path */
        begin_shutdown(s, 0);
        return HARK_ERR_IO;
    }
    *out = s;
    return HARK_OK;
}

int http2_server_port(const http2_server_t *s)
{
    return s->port;
}

void http2_server_destroy(http2_server_t *s)
{
    if (!s)
        return;
    while (s->conns) { /* socket-free ones */
        http2_conn_t *c = s->conns;
        conn_close(c);
        if (!c->is_tcp)
            hark_free(c);
    }
    pthread_mutex_lock(&s->q->mu);
    s->q->closed = 1;
    s->q->async = NULL;
    op_t *list = s->q->head;
    s->q->head = s->q->tail = NULL;
    pthread_mutex_unlock(&s->q->mu);
    for (op_t *op = list, *n; op; op = n) {
        n = op->next;
        op_free(op);
    }
    q_unref(s->q);
    hark_free(s);
}

/* ---- socket-free connections ---------------------------------------------------------------- */

http2_conn_t *http2_conn_open(http2_server_t *s, http2_write_fn write, void *user)
{
    http2_conn_t *c = conn_new(s);
    if (!c)
        return NULL;
    c->wfn = write;
    c->wuser = user;
    conn_flush(c);
    return c;
}

int http2_conn_feed(http2_conn_t *c, const uint8_t *data, size_t len)
{
    if (c->closing)
        return -1;
    int rv = conn_recv(c, data, len);
    return rv || c->closing ? -1 : 0;
}

void http2_conn_close(http2_conn_t *c)
{
    if (!c)
        return;
    conn_close(c);
    hark_free(c);
}
