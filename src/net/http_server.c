/* http_server.c — the libuv half of http_server: listeners, connections, timers, ordered
 * (pipelined) answers, completions from worker threads via uv_async, graceful shutdown.
 * Tests: tests/net/test_http_server.c */
#include "net/http_server.h"

#include "net/listen.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "core/log.h"
#include "hark.h"

#include <http_parser.h>
#include <errno.h>
#include <netdb.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#define RBUF_SIZE (32 * 1024)
#define LINGER_MS 2000   /* after our last answer: wait this long for the client's FIN */
#define MAX_REJECTING 64 /* connections being told 503 at once; beyond, closed outright */
/* a body with at least this much still due is read straight into place (on_alloc) */
#define MIN_WINDOW (16 * 1024)

/* ---- types ----------------------------------------------------------------------------------- */

enum { P_HEAD, P_CHUNK, P_END };

/* One piece of output: a response head (+ its whole body for plain answers), a chunk, or the
 * end of a chunked answer. Owned by its request until the loop takes it, then by a write. */
typedef struct piece {
    struct piece *next;
    int kind;
    const char *hdr; /* head text (no final CRLF) or chunk-size line */
    size_t hdr_len;
    const char *data; /* body / chunk bytes */
    size_t len;
    void (*free_fn)(void *);
    void *free_ud;
    const char *trailer; /* static: the Connection line + CRLF, or a chunk's CRLF */
    size_t trailer_len;
} piece_t;

typedef struct conn conn_t;

/* The server's view of a request. `pub` must stay first: the parser allocates this size. */
typedef struct sreq {
    http_req_t pub;
    pthread_mutex_t mu; /* guards out_*, final, aborted, orphan, in_ready, refs */
    int refs;           /* loop (in a connection's FIFO) + responder + ready list */
    piece_t *out_head, **out_tail;
    int final, aborted, orphan, in_ready;
    atomic_int cancelled;
    /* owner thread (the responder) */
    int started, chunked, close_delim;
    char *xhdr; /* extra headers, "Name: value\r\n"... */
    size_t xhdr_len, xhdr_cap;
    /* set at dispatch */
    pthread_t loop_thread;
    http_server_t *srv; /* valid while !orphan */
    /* loop thread */
    conn_t *conn;
    struct sreq *next;       /* connection FIFO */
    struct sreq *ready_next; /* server ready list (under srv->ready_mu) */
    int counted;             /* counts in requests_in_flight */
    int began;               /* some of its answer went to the socket (or a write) */
} sreq_t;

enum { T_NONE, T_IDLE, T_REQ, T_LINGER };

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_shutdown_t shut;
    http_server_t *srv;
    conn_t *prev, *next;
    http_reqparser_t *parser;
    sreq_t *fifo_head, *fifo_tail;
    unsigned fifo_len;
    char *rbuf;
    size_t rlen;
    int handles; /* open uv handles */
    int reading, paused, parse_dead, closing, finishing, read_eof, rejected, draining;
    int out_full; /* over max_output: not read until the socket has taken most of it */
    int in_process, took_req, continue_sent;
    int in_window; /* the pending read goes straight into a request body (on_alloc) */
    int writes;    /* uv_writes in progress */
    int flushing;  /* conn_flush is taking and writing answers (under wmu) */
    int tstate;
    /* Answering threads may write a plain answer to the socket themselves when it is the next
     * one due (sreq_write_direct). wmu guards what they look at — fifo_head/fifo_tail, writes,
     * flushing, closing, parse_dead; the loop changes those under it, reads them freely. Lock
     * order: a request's mu, then wmu; the loop never takes a request's mu while holding wmu. */
    pthread_mutex_t wmu;
};

typedef struct {
    uv_write_t w;
    conn_t *c;
    piece_t *pieces;
    unsigned n;
    uv_buf_t bufs[];
} wreq_t;

struct http_server {
    uv_loop_t *loop;
    http_server_opts_t o;
    uv_tcp_t listener;
    uv_async_t async; /* stop/shutdown requests from other threads */
    /* answers from other threads: an eventfd the loop polls, written only when wake_pending
     * goes 0 -> 1 (uv_async would do, but its loop side spins until the sending thread has
     * returned from the write: 14% of a loop's time at concurrency 1 on the development VM) */
    uv_poll_t wake;
    int wake_fd;
    atomic_int wake_pending;
    uv_timer_t deadline;
    int port;
    int handles;       /* open uv handles of the server itself */
    int listening;     /* loop thread */
    int shutting_down; /* loop thread */
    int closing;       /* loop thread: final handles being closed */
    int free_on_close; /* creation failed late: free when the handles are closed */
    conn_t *conns;
    int rejecting;
    pthread_mutex_t ready_mu;
    sreq_t *ready_head, *ready_tail;
    atomic_int want_stop, want_shutdown, async_closed;
    atomic_uint deadline_ms;
    atomic_long n_open, n_inflight, n_requests, n_accepted, n_rejected, n_bad, n_evicted;
    atomic_long n_stalls;
};

static const char CONN_KEEP[] = "\r\n";
static const char CONN_KEEP10[] = "Connection: keep-alive\r\n\r\n";
static const char CONN_CLOSE[] = "Connection: close\r\n\r\n";
static const char CRLF[] = "\r\n";
static const char CHUNK_END[] = "0\r\n\r\n";
static const char CONTINUE_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void conn_flush(conn_t *c);
static void conn_close(conn_t *c);
static void server_wake(http_server_t *s);
static void conn_process(conn_t *c);
static void conn_update_timer(conn_t *c, int progress);
static void conn_timer_cb(uv_timer_t *t);
static void server_maybe_finish(http_server_t *s);

/* ---- pieces and requests --------------------------------------------------------------------- */

static void pieces_free(piece_t *p)
{
    while (p) {
        piece_t *n = p->next;
        if (p->free_fn)
            p->free_fn(p->free_ud);
        hark_free(p);
        p = n;
    }
}

static void sreq_free(sreq_t *r)
{
    pieces_free(r->out_head);
    hark_free(r->xhdr);
    pthread_mutex_destroy(&r->mu);
    http_req_free(&r->pub);
}

static void sreq_init(sreq_t *r, conn_t *c, int refs)
{
    pthread_mutex_init(&r->mu, NULL);
    r->refs = refs;
    r->out_tail = &r->out_head;
    atomic_init(&r->cancelled, 0);
    r->srv = c->srv;
    r->conn = c;
    r->loop_thread = pthread_self();
}

static void sreq_unref(sreq_t *r)
{
    pthread_mutex_lock(&r->mu);
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        sreq_free(r);
}

/* The loop is done with an answered request (its answer is written or handed to a write): it
 * leaves the connection, which may close and be freed while the request still sits on a ready
 * list or in an answering thread's hold; marked an orphan, nobody follows its conn or srv again. */
static void sreq_retire(sreq_t *r)
{
    pthread_mutex_lock(&r->mu);
    r->orphan = 1;
    r->conn = NULL;
    int last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        sreq_free(r);
}

/* Wake-ups held by this (answering) thread between http_hold_wakeups and http_release_wakeups:
 * the requests it put on ready lists, each with a reference, so that the release can send one
 * wake-up per server, under the lock of one of its requests that is not an orphan (which keeps
 * that server alive, as in sreq_queue). */
#define HOLD_MAX 128
static __thread struct {
    int depth, n;
    sreq_t *held[HOLD_MAX];
} tl_hold;

static void hold_flush(void);

/* Queues a piece (may be NULL) of r's answer, from any thread. `final` ends the answer and drops
 * the responder's reference; `abort` makes the connection close where the piece would go. */
static void sreq_queue(sreq_t *r, piece_t *pc, int final, int abort)
{
    piece_t *drop = NULL;
    conn_t *direct = NULL;
    int free_now = 0, flush = 0;
    pthread_mutex_lock(&r->mu);
    HARK_ASSERT(!r->final);
    if (pc) {
        *r->out_tail = pc;
        r->out_tail = &pc->next;
    }
    if (abort)
        r->aborted = 1;
    if (final) {
        r->final = 1;
        r->refs--;
    }
    if (r->orphan) { /* nobody will send it */
        drop = r->out_head;
        r->out_head = NULL;
        r->out_tail = &r->out_head;
        free_now = r->refs == 0;
    } else if (pthread_equal(pthread_self(), r->loop_thread)) {
        direct = r->conn;
    }
    if (!r->orphan && !direct && !r->in_ready) { /* the loop takes it from its ready list */
        http_server_t *s = r->srv;
        r->in_ready = 1;
        r->refs++;
        pthread_mutex_lock(&s->ready_mu);
        r->ready_next = NULL;
        if (s->ready_tail)
            s->ready_tail->ready_next = r;
        else
            s->ready_head = r;
        s->ready_tail = r;
        pthread_mutex_unlock(&s->ready_mu);
        if (tl_hold.depth) { /* the wake-up goes at the release, once per server */
            r->refs++;
            tl_hold.held[tl_hold.n++] = r;
            flush = tl_hold.n == HOLD_MAX;
        } else {
            server_wake(s); /* under r->mu: the server outlives every non-orphan request */
        }
    }
    pthread_mutex_unlock(&r->mu);
    pieces_free(drop);
    if (free_now)
        sreq_free(r);
    if (direct)
        conn_flush(direct);
    if (flush)
        hold_flush();
}

/* Sends the held wake-ups (one per server with a live request among them) and drops the holds. */
static void hold_flush(void)
{
    http_server_t *woken[HOLD_MAX];
    int n_woken = 0, n = tl_hold.n;
    tl_hold.n = 0;
    for (int i = 0; i < n; i++) {
        sreq_t *r = tl_hold.held[i];
        pthread_mutex_lock(&r->mu);
        if (!r->orphan) {
            http_server_t *s = r->srv;
            int k = 0;
            while (k < n_woken && woken[k] != s)
                k++;
            if (k == n_woken) {
                woken[n_woken++] = s;
                server_wake(s); /* under r->mu, r not an orphan: s is alive */
            }
        }
        pthread_mutex_unlock(&r->mu);
    }
    for (int i = 0; i < n; i++)
        sreq_unref(tl_hold.held[i]);
}

void http_hold_wakeups(void)
{
    HARK_ASSERT(tl_hold.depth < 64);
    tl_hold.depth++;
}

void http_release_wakeups(void)
{
    HARK_ASSERT(tl_hold.depth > 0);
    if (--tl_hold.depth == 0)
        hold_flush();
}

/* A piece with room for a head of hdr_cap bytes and a copy of data[len]. */
static piece_t *piece_new(int kind, size_t hdr_cap, const void *data, size_t len)
{
    if (hdr_cap > SIZE_MAX / 2 || len > SIZE_MAX / 2)
        return NULL;
    piece_t *p = hark_malloc(sizeof *p + hdr_cap + len);
    if (!p)
        return NULL;
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->hdr = (char *)(p + 1);
    if (data && len) {
        char *d = (char *)(p + 1) + hdr_cap;
        memcpy(d, data, len);
        p->data = d;
        p->len = len;
    }
    return p;
}

static int no_crlf(const char *s)
{
    return s && !strpbrk(s, "\r\n");
}

/* Builds the response head into a new piece with room for (and a copy of) copy[copy_len]: status
 * line, Content-Type, the framing header (Content-Length: clen, or chunked) and the extra headers
 * (no final CRLF: the loop adds the Connection line). */
static piece_t *head_piece(sreq_t *r, int status, const char *ctype, size_t clen, const void *copy,
                           size_t copy_len, int chunked)
{
    if (ctype && !no_crlf(ctype))
        ctype = NULL;
    size_t cap = 128 + (ctype ? strlen(ctype) : 0) + r->xhdr_len;
    piece_t *p = piece_new(P_HEAD, cap, copy, copy_len);
    if (!p)
        return NULL;
    char *h = (char *)p->hdr;
    int n = snprintf(h, cap, "HTTP/1.1 %d %s\r\n", status, http_status_reason(status));
    if (ctype)
        n += snprintf(h + n, cap - (size_t)n, "Content-Type: %s\r\n", ctype);
    if (chunked) {
        if (!r->close_delim)
            n += snprintf(h + n, cap - (size_t)n, "Transfer-Encoding: chunked\r\n");
    } else if (status >= 200 && status != 204 && status != 304) {
        n += snprintf(h + n, cap - (size_t)n, "Content-Length: %zu\r\n", clen);
    }
    if (r->xhdr_len)
        memcpy(h + n, r->xhdr, r->xhdr_len);
    p->hdr_len = (size_t)n + r->xhdr_len;
    return p;
}

/* ---- the public answer API (any thread) ------------------------------------------------------ */

int http_req_cancelled(const http_req_t *req)
{
    return atomic_load(&((const sreq_t *)req)->cancelled);
}

const atomic_int *http_req_cancelled_flag(const http_req_t *req)
{
    return &((const sreq_t *)req)->cancelled;
}

int http_res_header(http_req_t *req, const char *name, const char *value)
{
    sreq_t *r = (sreq_t *)req;
    if (!name || !*name || !no_crlf(name) || strchr(name, ':') || !no_crlf(value))
        return HARK_ERR_INVALID_ARG;
    size_t nl = strlen(name), vl = strlen(value), need = r->xhdr_len + nl + vl + 4;
    if (need > r->xhdr_cap) {
        size_t cap = need * 2 > 256 ? need * 2 : 256;
        char *b = hark_realloc(r->xhdr, cap);
        if (!b)
            return HARK_ERR_NOMEM;
        r->xhdr = b;
        r->xhdr_cap = cap;
    }
    char *d = r->xhdr + r->xhdr_len;
    memcpy(d, name, nl);
    memcpy(d + nl, ": ", 2);
    memcpy(d + nl + 2, value, vl);
    memcpy(d + nl + 2 + vl, "\r\n", 2);
    r->xhdr_len = need;
    return HARK_OK;
}

int http_respond_owned(http_req_t *req, int status, const char *content_type, const void *body,
                       size_t len, void (*free_fn)(void *), void *free_ud)
{
    sreq_t *r = (sreq_t *)req;
    HARK_ASSERT(!r->started);
    r->started = 1;
    piece_t *p = head_piece(r, status, content_type, len, NULL, 0, 0);
    if (!p) {
        if (free_fn)
            free_fn(free_ud);
        sreq_queue(r, NULL, 1, 1);
        return HARK_ERR_NOMEM;
    }
    p->data = body;
    p->len = len;
    p->free_fn = free_fn;
    p->free_ud = free_ud;
    sreq_queue(r, p, 1, 0);
    return HARK_OK;
}

int http_respond(http_req_t *req, int status, const char *content_type, const void *body,
                 size_t len)
{
    sreq_t *r = (sreq_t *)req;
    HARK_ASSERT(!r->started);
    r->started = 1;
    piece_t *p = head_piece(r, status, content_type, len, body, len, 0);
    sreq_queue(r, p, 1, p == NULL);
    return p ? HARK_OK : HARK_ERR_NOMEM;
}

int http_respond_error(http_req_t *req, int status, const char *fmt, ...)
{
    char msg[512], body[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = http_error_json(body, sizeof body, msg);
    return http_respond(req, status, "application/json", body, n);
}

int http_respond_start(http_req_t *req, int status, const char *content_type)
{
    sreq_t *r = (sreq_t *)req;
    HARK_ASSERT(!r->started);
    r->started = r->chunked = 1;
    if (req->http_major == 1 && req->http_minor == 0) {
        r->close_delim = 1; /* HTTP/1.0 has no chunked encoding: the close ends the body */
        req->keep_alive = 0;
    }
    piece_t *p = head_piece(r, status, content_type, 0, NULL, 0, 1);
    sreq_queue(r, p, 0, p == NULL);
    return p ? HARK_OK : HARK_ERR_NOMEM;
}

int http_respond_chunk(http_req_t *req, const void *data, size_t len)
{
    sreq_t *r = (sreq_t *)req;
    HARK_ASSERT(r->started && r->chunked);
    if (len == 0)
        return HARK_OK;
    piece_t *p = piece_new(P_CHUNK, 24, data, len);
    if (p && !r->close_delim) {
        p->hdr_len = (size_t)snprintf((char *)p->hdr, 24, "%zx\r\n", len);
        p->trailer = CRLF;
        p->trailer_len = 2;
    }
    sreq_queue(r, p, 0, p == NULL);
    return p ? HARK_OK : HARK_ERR_NOMEM;
}

int http_respond_end(http_req_t *req)
{
    sreq_t *r = (sreq_t *)req;
    HARK_ASSERT(r->started && r->chunked);
    piece_t *p = NULL;
    int close_delim = r->close_delim; /* r may be freed once queued */
    if (!close_delim) {
        p = piece_new(P_END, 0, NULL, 0);
        if (p) {
            p->hdr = CHUNK_END;
            p->hdr_len = sizeof CHUNK_END - 1;
        }
    }
    sreq_queue(r, p, 1, !close_delim && p == NULL);
    return close_delim || p ? HARK_OK : HARK_ERR_NOMEM;
}

/* ---- connections (loop thread) --------------------------------------------------------------- */

static void conn_set_reading(conn_t *c);

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->handles > 0)
        return;
    http_server_t *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->rejected)
        s->rejecting--;
    else
        atomic_fetch_sub(&s->n_open, 1);
    http_reqparser_destroy(c->parser);
    hark_free(c->rbuf);
    pthread_mutex_destroy(&c->wmu);
    hark_free(c);
    server_maybe_finish(s);
}

/* No request is parsed on this connection any more (its last one is in the FIFO). */
static void conn_set_dead(conn_t *c)
{
    pthread_mutex_lock(&c->wmu);
    c->parse_dead = 1;
    pthread_mutex_unlock(&c->wmu);
}

static void fifo_append(conn_t *c, sreq_t *r)
{
    pthread_mutex_lock(&c->wmu);
    if (c->fifo_tail)
        c->fifo_tail->next = r;
    else
        c->fifo_head = r;
    c->fifo_tail = r;
    pthread_mutex_unlock(&c->wmu);
    c->fifo_len++;
}

static void fifo_pop(conn_t *c)
{
    pthread_mutex_lock(&c->wmu);
    c->fifo_head = c->fifo_head->next;
    if (!c->fifo_head)
        c->fifo_tail = NULL;
    pthread_mutex_unlock(&c->wmu);
    c->fifo_len--;
}

/* Gives up on every request still in the FIFO: each becomes an orphan, freed when answered. */
static void fifo_orphan_all(conn_t *c)
{
    http_server_t *s = c->srv;
    pthread_mutex_lock(&c->wmu);
    sreq_t *r = c->fifo_head;
    c->fifo_head = c->fifo_tail = NULL;
    pthread_mutex_unlock(&c->wmu);
    c->fifo_len = 0;
    while (r) {
        sreq_t *next = r->next;
        if (r->counted)
            atomic_fetch_sub(&s->n_inflight, 1);
        atomic_store(&r->cancelled, 1);
        pthread_mutex_lock(&r->mu);
        r->orphan = 1;
        r->conn = NULL;
        piece_t *drop = r->out_head;
        r->out_head = NULL;
        r->out_tail = &r->out_head;
        int last = --r->refs == 0;
        pthread_mutex_unlock(&r->mu);
        pieces_free(drop);
        if (last)
            sreq_free(r);
        r = next;
    }
}

/* Closes the connection now. Unanswered requests become orphans: they are freed when answered. */
static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    pthread_mutex_lock(&c->wmu); /* no answering thread writes to the socket after this */
    c->closing = 1;
    pthread_mutex_unlock(&c->wmu);
    fifo_orphan_all(c);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn_t *c = req->data;
    if (status < 0 || c->read_eof)
        conn_close(c);
}

/* Every answer is on its way and no request will follow: send FIN once written, then keep
 * reading (and dropping) until the client closes, so that it reads our last answer instead of
 * a reset. */
static void conn_finish(conn_t *c)
{
    if (c->finishing || c->closing)
        return;
    c->finishing = 1;
    c->shut.data = c;
    if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    c->tstate = T_LINGER;
    uv_timer_start(&c->timer, conn_timer_cb, LINGER_MS, 0);
    conn_set_reading(c);
}

/* Queues the server's own answer (an error), after the answers already owed; no request is
 * parsed on this connection after it. */
static void conn_fail(conn_t *c, int status, const char *msg)
{
    http_server_t *s = c->srv;
    conn_set_dead(c);
    if (status >= 400 && status < 500)
        atomic_fetch_add(&s->n_bad, 1);
    sreq_t *e = hark_calloc(1, sizeof *e);
    if (!e) {
        conn_close(c);
        return;
    }
    sreq_init(e, c, 1);
    arena_init(&e->pub.arena, 256);
    e->pub.keep_alive = 0;
    e->pub.http_major = e->pub.http_minor = 1;
    char body[512];
    size_t n = http_error_json(body, sizeof body, msg);
    piece_t *p = head_piece(e, status, "application/json", n, body, n, 0);
    if (!p) {
        sreq_free(e);
        conn_close(c);
        return;
    }
    e->out_head = p;
    e->out_tail = &p->next;
    e->final = 1;
    fifo_append(c, e);
    LOG_DEBUG("http: %d %s", status, msg);
    conn_flush(c);
}

static void on_write(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    conn_t *c = wr->c;
    pthread_mutex_lock(&c->wmu);
    c->writes--;
    pthread_mutex_unlock(&c->wmu);
    pieces_free(wr->pieces); /* the answer's memory goes back as soon as the socket took it */
    hark_free(wr);
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (c->out_full && !c->in_process &&
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) <= c->srv->o.max_output / 4) {
        c->out_full = 0; /* the client reads again: so do we */
        conn_process(c);
        return;
    }
    conn_update_timer(c, 1);
}

/* Sends, in request order, every answer piece that is ready, in one uv_write; pops the
 * requests that are fully answered; answers 100-continue when it is the current request's turn;
 * finishes the connection once nothing more is owed. */
static void conn_flush(conn_t *c)
{
    if (c->closing)
        return;
    http_server_t *s = c->srv;
    piece_t *list = NULL, **tail = &list;
    size_t nbufs = 0;
    sreq_t *r;
    pthread_mutex_lock(&c->wmu); /* answering threads keep off the socket until it is written */
    c->flushing = 1;
    pthread_mutex_unlock(&c->wmu);
    while ((r = c->fifo_head)) {
        pthread_mutex_lock(&r->mu);
        piece_t *got = r->out_head;
        r->out_head = NULL;
        r->out_tail = &r->out_head;
        int final = r->final, aborted = r->aborted;
        pthread_mutex_unlock(&r->mu);
        if (got)
            r->began = 1;
        int closes = !r->pub.keep_alive || (c->parse_dead && r == c->fifo_tail);
        int head_only = r->pub.method == HTTP_HEAD;
        for (piece_t *p = got; p; p = p->next) {
            if (p->kind == P_HEAD) {
                if (closes)
                    p->trailer = CONN_CLOSE, p->trailer_len = sizeof CONN_CLOSE - 1;
                else if (r->pub.http_major == 1 && r->pub.http_minor == 0)
                    p->trailer = CONN_KEEP10, p->trailer_len = sizeof CONN_KEEP10 - 1;
                else
                    p->trailer = CONN_KEEP, p->trailer_len = sizeof CONN_KEEP - 1;
            }
            if (head_only) /* HEAD: the head as for GET, no body bytes */
                p->len = 0;
            if (head_only && p->kind != P_HEAD)
                p->hdr_len = p->trailer_len = 0;
            nbufs += 3;
        }
        *tail = got;
        while (*tail)
            tail = &(*tail)->next;
        if (aborted || (final && closes)) {
            /* nothing goes after this answer (or after the point where it broke): what is
             * queued is written, then the connection ends */
            if (final && !aborted) {
                fifo_pop(c);
                if (r->counted)
                    atomic_fetch_sub(&s->n_inflight, 1);
                sreq_retire(r);
            }
            conn_set_dead(c);
            fifo_orphan_all(c);
            break;
        }
        if (!final)
            break;
        fifo_pop(c);
        if (r->counted)
            atomic_fetch_sub(&s->n_inflight, 1);
        sreq_retire(r);
    }
    int want_continue = !c->fifo_head && !c->parse_dead && !c->continue_sent &&
                        http_reqparser_wants_continue(c->parser);
    if (want_continue)
        nbufs++;
    wreq_t *w = nbufs ? hark_malloc(sizeof *w + nbufs * sizeof(uv_buf_t)) : NULL;
    int failed = nbufs && !w, sent = 0;
    if (w) {
        w->c = c;
        w->pieces = list;
        w->n = 0;
        /* a head: status and headers, Connection line, body; a chunk: size line, data, CRLF;
         * less what an answering thread already wrote of it */
        for (piece_t *p = list; p; p = p->next) {
            uv_buf_t pb[3];
            unsigned k = 0;
            if (p->hdr_len)
                pb[k++] = uv_buf_init((char *)p->hdr, (unsigned)p->hdr_len);
            if (p->kind == P_HEAD && p->trailer_len)
                pb[k++] = uv_buf_init((char *)p->trailer, (unsigned)p->trailer_len);
            if (p->len)
                pb[k++] = uv_buf_init((char *)p->data, (unsigned)p->len);
            if (p->kind != P_HEAD && p->trailer_len)
                pb[k++] = uv_buf_init((char *)p->trailer, (unsigned)p->trailer_len);
            for (unsigned i = 0; i < k; i++)
                w->bufs[w->n++] = pb[i];
        }
        if (want_continue) {
            w->bufs[w->n++] = uv_buf_init((char *)CONTINUE_100, sizeof CONTINUE_100 - 1);
            c->continue_sent = 1;
        }
    }
    /* straight to the socket when it takes it all (the usual case: no write request, no epoll
     * change, no callback on a later turn); what it does not take goes by uv_write */
    pthread_mutex_lock(&c->wmu);
    if (w && w->n) {
        size_t total = 0;
        for (unsigned i = 0; i < w->n; i++)
            total += w->bufs[i].len;
        sent = uv_try_write((uv_stream_t *)&c->tcp, w->bufs, w->n);
        if (sent < 0 && sent != UV_EAGAIN && sent != UV_ENOSYS) {
            failed = 1;
        } else if (sent > 0 && (size_t)sent == total) {
            w->n = 0; /* all written */
        } else {
            size_t skip = sent > 0 ? (size_t)sent : 0;
            unsigned first = 0;
            while (first < w->n && skip >= w->bufs[first].len)
                skip -= w->bufs[first++].len;
            w->bufs[first].base += skip; /* first < w->n: not all was written */
            w->bufs[first].len -= skip;
            memmove(w->bufs, w->bufs + first, (w->n - first) * sizeof(uv_buf_t));
            w->n -= first;
            if (uv_write(&w->w, (uv_stream_t *)&c->tcp, w->bufs, w->n, on_write) != 0)
                failed = 1;
            else
                c->writes++; /* w and its pieces belong to the write now */
        }
    }
    c->flushing = 0;
    pthread_mutex_unlock(&c->wmu);
    if (w && (failed || w->n == 0)) {
        pieces_free(list);
        hark_free(w);
    } else if (!w) {
        pieces_free(list);
    }
    if (failed) {
        conn_close(c);
        return;
    }
    if (sent > 0)
        conn_update_timer(c, 1);
    if (c->parse_dead && !c->fifo_head) {
        conn_finish(c);
        return;
    }
    if (c->paused && c->fifo_len < s->o.max_pipeline && !c->in_process) {
        c->paused = 0;
        conn_process(c);
        return;
    }
    conn_update_timer(c, 0);
}

int http_req_takeover(http_req_t *req)
{
    sreq_t *r = (sreq_t *)req;
    conn_t *c = r->conn;
    int fd = -1;
    if (!c || c->closing || !req->upgrade || c->fifo_head != r || c->fifo_tail != r ||
        uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
        return -1;
    int nfd = dup(fd);
    if (nfd < 0)
        return -1;
    conn_close(c); /* r becomes an orphan: freed when the caller answers it */
    return nfd;
}

static void conn_dispatch(conn_t *c, http_req_t *req)
{
    http_server_t *s = c->srv;
    sreq_t *r = (sreq_t *)req;
    sreq_init(r, c, 2);
    r->counted = 1;
    if (!req->keep_alive || req->upgrade || c->draining)
        conn_set_dead(c); /* this is the connection's last request */
    fifo_append(c, r);
    c->continue_sent = 0;
    c->took_req = 1;
    atomic_fetch_add(&s->n_inflight, 1);
    atomic_fetch_add(&s->n_requests, 1);
    s->o.handler(req, s->o.user); /* may answer (and free) req before returning */
}

/* Parses data[len] (the read buffer, or body bytes received in place), dispatching complete
 * requests, until it is used up, the pipeline is full, or parsing is over; returns the bytes
 * consumed. */
static size_t conn_parse(conn_t *c, const char *data, size_t len)
{
    http_server_t *s = c->srv;
    size_t off = 0;
    while (!c->closing && !c->parse_dead) {
        if (c->fifo_len >= s->o.max_pipeline) {
            c->paused = 1;
            break;
        }
        if (!c->out_full && !http_reqparser_in_request(c->parser) &&
            uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) > s->o.max_output) {
            /* the client does not read its answers: stop taking requests from it (on_write
             * resumes) rather than queue answers without bound */
            c->out_full = 1;
            atomic_fetch_add(&s->n_stalls, 1);
        }
        if (c->out_full)
            break;
        if (off == len && !c->read_eof)
            break;
        size_t used = 0;
        int rc = http_reqparser_feed(c->parser, data + off, len - off, &used);
        off += used;
        if (rc == HTTP_PARSE_REQUEST) {
            conn_dispatch(c, http_reqparser_take(c->parser));
            continue;
        }
        if (rc == HTTP_PARSE_ERROR) {
            const char *msg;
            int status = http_reqparser_error(c->parser, &msg);
            conn_fail(c, status, msg);
            break;
        }
        if (c->read_eof) /* a clean end between requests */
            conn_set_dead(c);
        break;
    }
    return off;
}

/* Parses what is buffered (see conn_parse), then writes what is ready and re-arms reading. */
static void conn_process(conn_t *c)
{
    c->in_process++;
    size_t off = conn_parse(c, c->rbuf, c->rlen);
    c->in_process--;
    if (c->closing)
        return;
    if (c->parse_dead) {
        c->rlen = 0;
    } else if (off) {
        memmove(c->rbuf, c->rbuf + off, c->rlen - off);
        c->rlen -= off;
    }
    conn_flush(c); /* also: 100-continue, finishing, timers */
    if (!c->closing)
        conn_set_reading(c);
}

/* Reads go to the read buffer, or, while a large plain body is arriving and nothing else is
 * buffered, straight into the request's body (no copy; exactly the bytes still due, so the next
 * request's head never lands there). */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    char *dst;
    size_t due =
        c->rlen == 0 && !c->parse_dead && !c->out_full && c->fifo_len < c->srv->o.max_pipeline
            ? http_reqparser_body_window(c->parser, &dst)
            : 0;
    c->in_window = due >= MIN_WINDOW;
    if (c->in_window)
        *buf = uv_buf_init(dst, (unsigned)(due < (1u << 30) ? due : (1u << 30)));
    else
        *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(RBUF_SIZE - c->rlen));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = st->data;
    if (nread == 0 || c->closing)
        return;
    if (nread < 0) {
        if (nread != UV_EOF || c->finishing) {
            conn_close(c);
            return;
        }
        /* the client is gone (or half-closed: treated alike, as most servers do): requests
         * it is still owed are cancelled; answers already complete are still written */
        c->read_eof = 1;
        uv_read_stop(st);
        c->reading = 0;
        int owed = http_reqparser_in_request(c->parser);
        for (sreq_t *r = c->fifo_head; r && !owed; r = r->next) {
            pthread_mutex_lock(&r->mu);
            owed = !r->final;
            pthread_mutex_unlock(&r->mu);
        }
        if (owed) {
            conn_close(c);
            return;
        }
        conn_set_dead(c);
        conn_flush(c); /* writes what is left, then finishes */
        return;
    }
    if (c->parse_dead) /* lingering or waiting on earlier answers: drop what comes */
        return;
    int in_body = http_reqparser_in_body(c->parser);
    c->took_req = 0;
    if (c->in_window) { /* body bytes, already in place: the parser only counts them */
        c->in_window = 0;
        c->in_process++;
        conn_parse(c, buf->base, (size_t)nread); /* all body: the window was what is due */
        c->in_process--;
        if (c->closing)
            return;
    } else {
        c->rlen += (size_t)nread;
    }
    conn_process(c);
    if (!c->closing && (in_body || c->took_req))
        conn_update_timer(c, 1);
}

static void conn_set_reading(conn_t *c)
{
    int want = !c->closing && !c->read_eof && !c->paused && !c->out_full && c->rlen < RBUF_SIZE;
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = 1;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void conn_timer_cb(uv_timer_t *t)
{
    conn_t *c = t->data;
    int st = c->tstate;
    c->tstate = T_NONE;
    if (st == T_REQ && http_reqparser_in_request(c->parser) && !c->parse_dead)
        conn_fail(c, 408, "request timeout: the request did not arrive in time");
    else if (st == T_IDLE || st == T_LINGER)
        conn_close(c);
}

/* Arms the timer for the connection's state: a request arriving (408 when it stalls), idle
 * (closed), or none while the handler works. `progress`: bytes moved, restart the clock. */
static void conn_update_timer(conn_t *c, int progress)
{
    if (c->closing || c->finishing)
        return;
    http_server_t *s = c->srv;
    int want = T_NONE;
    unsigned ms = 0;
    if (c->parse_dead)
        want = T_NONE;
    else if (http_reqparser_in_request(c->parser))
        want = T_REQ, ms = s->o.request_timeout_ms;
    else if (!c->fifo_head)
        want = T_IDLE, ms = s->o.idle_timeout_ms;
    if (want == T_NONE) {
        if (c->tstate != T_NONE)
            uv_timer_stop(&c->timer);
    } else if (want != c->tstate || progress) {
        uv_timer_start(&c->timer, conn_timer_cb, ms, 0);
    }
    c->tstate = want;
}

static void on_connection(uv_stream_t *ls, int status)
{
    http_server_t *s = ls->data;
    if (status < 0) {
        LOG_WARN("http: accept: %s", uv_strerror(status));
        return;
    }
    conn_t *c = hark_calloc(1, sizeof *c);
    if (!c) { /* libuv pauses accepting until the next uv_accept; nothing better to do */
        LOG_ERROR("http: out of memory accepting a connection");
        return;
    }
    c->srv = s;
    pthread_mutex_init(&c->wmu, NULL);
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->handles = 2;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    int over = (unsigned long)atomic_load(&s->n_open) >= s->o.max_connections;
    if (over) { /* idle connections must not starve new ones: the oldest idle one makes room */
        conn_t *idle = NULL;
        for (conn_t *x = c->next; x; x = x->next) /* newest first: the last match is the oldest */
            if (!x->rejected && !x->closing && !x->finishing && !x->parse_dead &&
                x->tstate == T_IDLE && !x->fifo_head && !x->writes)
                idle = x;
        if (idle) {
            atomic_fetch_add(&s->n_evicted, 1);
            conn_close(idle); /* its count goes when its handles are closed */
            over = 0;
        }
    }
    c->rejected = over;
    if (over)
        s->rejecting++;
    else
        atomic_fetch_add(&s->n_open, 1);
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    atomic_fetch_add(&s->n_accepted, 1);
    if (over) {
        atomic_fetch_add(&s->n_rejected, 1);
        if (s->rejecting > MAX_REJECTING) {
            conn_close(c);
            return;
        }
    }
    uv_tcp_nodelay(&c->tcp, 1);
    http_reqparser_opts_t po = {s->o.max_body, s->o.max_header, sizeof(sreq_t), s->o.body_align,
                                s->o.user,     s->o.body_alloc, s->o.body_free, s->o.body_user};
    c->parser = http_reqparser_create(&po);
    c->rbuf = hark_malloc(RBUF_SIZE);
    if (!c->parser || !c->rbuf) {
        conn_close(c);
        return;
    }
    if (over) {
        conn_fail(c, 503, "too many connections");
        conn_set_reading(c);
        return;
    }
    conn_set_reading(c);
    conn_update_timer(c, 0);
}

/* ---- the server ------------------------------------------------------------------------------ */

static void on_server_handle_closed(uv_handle_t *h)
{
    http_server_t *s = h->data;
    if (--s->handles == 0 && s->free_on_close) {
        pthread_mutex_destroy(&s->ready_mu);
        close(s->wake_fd);
        hark_free(s);
    }
}

/* Any thread: the loop will look at the ready list. One write per batch of answers that the
 * loop has not started draining yet. */
static void server_wake(http_server_t *s)
{
    if (!atomic_exchange(&s->wake_pending, 1)) {
        uint64_t one = 1;
        ssize_t w = write(s->wake_fd, &one, sizeof one);
        (void)w; /* can only fail when the counter is full, and then the loop is woken anyway */
    }
}

static void server_close_listener(http_server_t *s)
{
    if (!s->listening)
        return;
    s->listening = 0;
    uv_close((uv_handle_t *)&s->listener, on_server_handle_closed);
}

static void drain_ready(http_server_t *s)
{
    pthread_mutex_lock(&s->ready_mu);
    sreq_t *r = s->ready_head;
    s->ready_head = s->ready_tail = NULL;
    pthread_mutex_unlock(&s->ready_mu);
    while (r) {
        sreq_t *next = r->ready_next;
        pthread_mutex_lock(&r->mu);
        r->in_ready = 0;
        conn_t *c = r->orphan ? NULL : r->conn;
        pthread_mutex_unlock(&r->mu);
        if (c)
            conn_flush(c);
        sreq_unref(r);
        r = next;
    }
}

static void on_wake(uv_poll_t *h, int status, int events)
{
    http_server_t *s = h->data;
    uint64_t v;
    ssize_t n = read(s->wake_fd, &v, sizeof v);
    (void)n;
    atomic_store(&s->wake_pending, 0); /* before draining: what comes after is woken for again */
    drain_ready(s);
}

/* Once shutting down and no connection is left: close the server's own handles. */
static void server_maybe_finish(http_server_t *s)
{
    if (!s->shutting_down || s->conns || s->closing)
        return;
    s->closing = 1;
    atomic_store(&s->async_closed, 1);
    drain_ready(s); /* every request is an orphan now: nothing more can be queued */
    uv_close((uv_handle_t *)&s->deadline, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->async, on_server_handle_closed);
    uv_close((uv_handle_t *)&s->wake, on_server_handle_closed);
}

/* The drain's deadline: a request still waiting for its answer, none of which has been sent, is
 * told 503 (best effort: what the socket takes now) before its connection closes, so that the
 * client learns the server gave up rather than seeing the connection drop. */
static void conn_deadline_503(conn_t *c)
{
    sreq_t *r = c->fifo_head;
    if (c->closing || c->rejected || !r || r->began || c->writes)
        return;
    char body[160], head[400];
    size_t n = http_error_json(body, sizeof body,
                               "the server is shutting down: this request was not finished by "
                               "the drain deadline");
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
                     n);
    uv_buf_t b[2] = {uv_buf_init(head, (unsigned)h), uv_buf_init(body, (unsigned)n)};
    uv_try_write((uv_stream_t *)&c->tcp, b, 2); /* what it does not take is lost with the close */
}

static void on_deadline(uv_timer_t *t)
{
    http_server_t *s = t->data;
    conn_t *c = s->conns;
    while (c) {
        conn_t *n = c->next;
        conn_deadline_503(c);
        conn_close(c);
        c = n;
    }
}

static void server_begin_shutdown(http_server_t *s, unsigned deadline_ms)
{
    if (s->shutting_down)
        return;
    s->shutting_down = 1;
    server_close_listener(s);
    uv_timer_start(&s->deadline, on_deadline, deadline_ms, 0);
    conn_t *c = s->conns;
    while (c) {
        conn_t *n = c->next;
        if (!c->closing && !c->finishing) { /* finishing ones end by themselves */
            int busy = c->fifo_head || c->writes || http_reqparser_in_request(c->parser);
            if (c->rejected || !busy) {
                conn_close(c);
            } else {
                c->draining = 1;
                if (!http_reqparser_in_request(c->parser))
                    conn_set_dead(c);
                conn_flush(c);
            }
        }
        c = n;
    }
    server_maybe_finish(s);
}

static void on_async(uv_async_t *a)
{
    http_server_t *s = a->data;
    if (atomic_load(&s->want_stop))
        server_close_listener(s);
    drain_ready(s);
    if (atomic_load(&s->want_shutdown))
        server_begin_shutdown(s, atomic_load(&s->deadline_ms));
}

int http_server_create(uv_loop_t *loop, const http_server_opts_t *opts, http_server_t **out,
                       hark_err_t *err)
{
    *out = NULL;
    if (!opts || !opts->handler)
        return err_set(err, HARK_ERR_INVALID_ARG, "http: a handler is required");
    if (opts->port < 0 || opts->port > 65535)
        return err_set(err, HARK_ERR_INVALID_ARG, "http: port %d out of range", opts->port);
    http_server_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "http: out of memory");
    s->loop = loop;
    s->o = *opts;
    if (!s->o.host || !*s->o.host)
        s->o.host = "0.0.0.0";
    if (!s->o.max_body)
        s->o.max_body = (size_t)64 << 20;
    if (!s->o.max_header)
        s->o.max_header = (size_t)32 << 10;
    if (!s->o.max_connections)
        s->o.max_connections = 1024;
    if (!s->o.request_timeout_ms)
        s->o.request_timeout_ms = 30000;
    if (!s->o.idle_timeout_ms)
        s->o.idle_timeout_ms = 60000;
    if (!s->o.max_pipeline)
        s->o.max_pipeline = 16;
    if (!s->o.max_output)
        s->o.max_output = (size_t)4 << 20;
    int fd = -1;
    int rc = net_listen(s->o.host, s->o.port, opts->reuse_port, "http", &fd, &s->port, err);
    if (rc != HARK_OK) {
        hark_free(s);
        return rc;
    }
    s->o.host = NULL; /* not kept */
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        err_set(err, HARK_ERR_IO, "http: eventfd: %s", strerror(errno));
        close(fd);
        hark_free(s);
        return HARK_ERR_IO;
    }
    pthread_mutex_init(&s->ready_mu, NULL);
    uv_tcp_init(loop, &s->listener);
    uv_async_init(loop, &s->async, on_async);
    uv_timer_init(loop, &s->deadline);
    uv_poll_init(loop, &s->wake, s->wake_fd);
    uv_poll_start(&s->wake, UV_READABLE, on_wake);
    s->listener.data = s->async.data = s->deadline.data = s->wake.data = s;
    s->handles = 4;
    s->listening = 1;
    int uvrc = uv_tcp_open(&s->listener, fd);
    if (uvrc == 0)
        uvrc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection);
    if (uvrc != 0) { /* not expected once listen(2) worked: close up when the loop runs */
        err_set(err, HARK_ERR_IO, "http: listen on port %d: %s", s->port, uv_strerror(uvrc));
        s->free_on_close = 1;
        s->shutting_down = 1;
        server_close_listener(s);
        server_maybe_finish(s);
        return HARK_ERR_IO;
    }
    *out = s;
    return HARK_OK;
}

int http_server_port(const http_server_t *s)
{
    return s->port;
}

void http_server_stop_accepting(http_server_t *s)
{
    atomic_store(&s->want_stop, 1);
    if (!atomic_load(&s->async_closed))
        uv_async_send(&s->async);
}

void http_server_shutdown(http_server_t *s, unsigned deadline_ms)
{
    atomic_store(&s->deadline_ms, deadline_ms);
    atomic_store(&s->want_shutdown, 1);
    if (!atomic_load(&s->async_closed))
        uv_async_send(&s->async);
}

void http_server_stats(const http_server_t *s, http_server_stats_t *o)
{
    http_server_t *m = (http_server_t *)s; /* atomics are read-only here */
    o->open_connections = atomic_load(&m->n_open);
    o->requests_in_flight = atomic_load(&m->n_inflight);
    o->requests_total = atomic_load(&m->n_requests);
    o->connections_total = atomic_load(&m->n_accepted);
    o->connections_rejected = atomic_load(&m->n_rejected);
    o->connections_evicted = atomic_load(&m->n_evicted);
    o->bad_requests = atomic_load(&m->n_bad);
    o->output_stalls = atomic_load(&m->n_stalls);
}

void http_server_destroy(http_server_t *s)
{
    if (!s)
        return;
    HARK_ASSERT(s->handles == 0); /* shut down, and the loop has run the close callbacks */
    pthread_mutex_destroy(&s->ready_mu);
    close(s->wake_fd);
    hark_free(s);
}
