/* stream_perf.c — see stream_perf.h. One thread (1 MiB stack) and one connection per stream. */
#include "perf/stream_perf.h"

#include "api/kserve.h"
#include "api/kserve_grpc.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "net/grpc_client.h"
#include "net/http_client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    double *v;
    size_t n, cap;
} vec_t;

typedef struct {
    const stream_perf_opts_t *o;
    int level, n_streams;
    char infer_path[1024];
    uint64_t t0_ns, chunk_ns, from_ns, to_ns;
    size_t chunk; /* samples */
    int n_chunks;
    atomic_int stop;
    atomic_int connected;   /* streams whose connection is up (or failed) */
    _Atomic uint64_t go_ns; /* t0_ns once every stream is connected; UINT64_MAX before */
    pthread_mutex_t mu;
    vec_t lat, fin;
    int64_t errors, sequences, warm_errors; /* warm_errors: before the window (connects too) */
    double audio_s;                         /* answered chunks' audio */
    char first_error[512];
} level_t;

typedef struct {
    level_t *L;
    int idx;
    pthread_t th;
    int started;
} stream_t;

static void vec_push(vec_t *v, double x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4096;
        double *p = hark_realloc(v->v, cap * sizeof *p);
        if (!p)
            return; /* the sample is lost; counts stay honest about what was kept */
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void sleep_until(uint64_t t_ns, level_t *L)
{
    for (;;) {
        uint64_t now = clock_now_ns();
        if (now >= t_ns || atomic_load(&L->stop))
            return;
        uint64_t d = t_ns - now;
        if (d > 50000000u)
            d = 50000000u;
        struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

static void record(level_t *L, int ok, int final, double lat_us, double audio_s, uint64_t when,
                   const char *err)
{
    pthread_mutex_lock(&L->mu);
    if (!ok && err && !L->first_error[0]) /* kept from the warm-up too */
        snprintf(L->first_error, sizeof L->first_error, "%s", err);
    if (when < L->from_ns || when > L->to_ns) {
        L->warm_errors += !ok && when < L->from_ns;
        pthread_mutex_unlock(&L->mu);
        return;
    }
    if (ok)
        L->audio_s += audio_s;
    if (!ok) {
        L->errors++;
    } else if (final) {
        vec_push(&L->fin, lat_us);
        L->sequences++;
    } else {
        vec_push(&L->lat, lat_us);
    }
    pthread_mutex_unlock(&L->mu);
}

/* one chunk as an infer body (and as a gRPC message) */
static int chunk_body(const level_t *L, uint64_t id, int i, int end, kserve_response_t *body,
                      uint8_t **msg, size_t *msg_len, hark_err_t *err)
{
    const stream_perf_opts_t *o = L->o;
    size_t off = (size_t)i * L->chunk, m = o->n - off < L->chunk ? o->n - off : L->chunk;
    int32_t len = (int32_t)m;
    int64_t s_wav[2] = {1, (int64_t)m}, s_len[2] = {1, 1};
    kserve_output_t in[2] = {
        {.name = "WAV",
         .dtype = KSERVE_FP32,
         .ndim = 2,
         .shape = s_wav,
         .data = (const uint8_t *)(o->pcm + off),
         .size = m * sizeof(float)},
        {.name = "WAV_LENS",
         .dtype = KSERVE_INT32,
         .ndim = 2,
         .shape = s_len,
         .data = (const uint8_t *)&len,
         .size = sizeof len},
    };
    kserve_param_t p[3] = {{.name = "sequence_id", .num = (double)id},
                           {.name = "sequence_start", .num = i == 0, .boolean = 1},
                           {.name = "sequence_end", .num = end, .boolean = 1}};
    const char *outs[1] = {"TRANSCRIPTS"};
    kserve_request_spec_t spec = {
        .inputs = in, .n_inputs = 2, .outputs = outs, .n_outputs = 1, .params = p, .n_params = 3};
    int rc = kserve_build_request(&spec, body, err);
    if (!rc && o->grpc) {
        rc = kserve_grpc_pack_request(o->model, NULL, body->body, body->len, body->header_len, msg,
                                      msg_len, err);
        kserve_response_free(body);
    }
    return rc;
}

static void *stream_main(void *arg)
{
    stream_t *S = arg;
    level_t *L = S->L;
    const stream_perf_opts_t *o = L->o;
    hark_err_t err = {0};
    http_client_opts_t co = {.timeout_ms = o->timeout_ms};
    http_client_t *c = NULL;
    grpc_client_t *gc = NULL;
    /* connected before the level's clock starts (thousands of connects at once would otherwise
     * be measured as chunk latency) */
    int rc = o->grpc ? grpc_client_create(o->host, o->port, o->timeout_ms, &gc, &err)
                     : http_client_create(o->host, o->port, &co, &c, &err);
    if (!rc && gc) {
        uint8_t *resp = NULL;
        size_t rlen = 0;
        int st = 0;
        char gmsg[200];
        rc = grpc_client_call(gc, "/inference.GRPCInferenceService/ServerLive", NULL, 0, &resp,
                              &rlen, &st, gmsg, sizeof gmsg, &err);
        hark_free(resp);
    } else if (!rc) {
        http_response_t resp;
        rc = http_client_request(c, "GET", "/v2/health/live", NULL, 0, NULL, 0, &resp, &err);
    }
    atomic_fetch_add(&L->connected, 1);
    if (rc) {
        record(L, 0, 0, 0, 0, 0, err.msg); /* a warm-up error */
        http_client_destroy(c);
        grpc_client_destroy(gc);
        return NULL;
    }
    while (atomic_load(&L->go_ns) == UINT64_MAX && !atomic_load(&L->stop)) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    /* streams start staggered over one chunk period, as real callers do not arrive in step */
    uint64_t base = L->t0_ns + L->chunk_ns * (uint64_t)S->idx / (uint64_t)L->n_streams;
    for (uint64_t seq = 0; !atomic_load(&L->stop); seq++) {
        uint64_t id = ((uint64_t)(L->level + 1) << 44) | ((uint64_t)S->idx << 24) | seq;
        if (o->fast)
            base = clock_now_ns();
        int failed = 0;
        for (int i = 0; i < L->n_chunks; i++) {
            uint64_t due = base + (uint64_t)(i + 1) * L->chunk_ns;
            if (!o->fast)
                sleep_until(due, L);
            int stopping = atomic_load(&L->stop);
            if (stopping && i == 0)
                break;
            int end = stopping || i == L->n_chunks - 1; /* a stopped stream closes its sequence */
            kserve_response_t body = {0};
            uint8_t *msg = NULL;
            size_t msg_len = 0;
            char emsg[600] = "";
            int ok = 0;
            uint64_t t0 = clock_now_ns(), t1 = t0;
            if (chunk_body(L, id, i, end, &body, &msg, &msg_len, &err)) {
                snprintf(emsg, sizeof emsg, "%s", err.msg);
            } else if (gc) {
                uint8_t *resp = NULL;
                size_t rlen = 0;
                int st = 0;
                char gmsg[400] = "";
                t0 = clock_now_ns();
                int xrc = grpc_client_call(gc, "/inference.GRPCInferenceService/ModelInfer", msg,
                                           msg_len, &resp, &rlen, &st, gmsg, sizeof gmsg, &err);
                t1 = clock_now_ns();
                ok = !xrc && st == 0;
                if (xrc)
                    snprintf(emsg, sizeof emsg, "%s", err.msg);
                else if (st)
                    snprintf(emsg, sizeof emsg, "gRPC status %d: %s", st, gmsg);
                hark_free(resp);
            } else {
                char hl[32];
                snprintf(hl, sizeof hl, "%zu", body.header_len);
                http_kv_t hdr[2] = {{"Content-Type", "application/octet-stream"},
                                    {"Inference-Header-Content-Length", hl}};
                http_response_t resp;
                t0 = clock_now_ns();
                int xrc = http_client_request(c, "POST", L->infer_path, hdr, 2, body.body, body.len,
                                              &resp, &err);
                t1 = clock_now_ns();
                ok = !xrc && resp.status == 200;
                if (xrc)
                    snprintf(emsg, sizeof emsg, "%s", err.msg);
                else if (!ok)
                    snprintf(emsg, sizeof emsg, "HTTP %d: %.*s", resp.status,
                             (int)(resp.body_len < 400 ? resp.body_len : 400),
                             (const char *)resp.body);
            }
            kserve_response_free(&body);
            hark_free(msg);
            uint64_t from = o->fast ? t0 : due;
            size_t off = (size_t)i * L->chunk;
            double secs = (double)(o->n - off < L->chunk ? o->n - off : L->chunk) / o->rate;
            if (!stopping)
                record(L, ok, end, (double)(t1 - from) / 1000.0, secs, from, ok ? NULL : emsg);
            failed = !ok;
            if (stopping || !ok)
                break; /* a failed chunk ends its sequence (the server ends it too) */
        }
        if (!o->fast) /* the next sequence follows on without a gap (after a failure: now) */
            base = failed ? clock_now_ns() : base + (uint64_t)L->n_chunks * L->chunk_ns;
    }
    http_client_destroy(c);
    grpc_client_destroy(gc);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summarise(level_t *L, stream_perf_row_t *R)
{
    const stream_perf_opts_t *o = L->o;
    perf_row_t *r = &R->row;
    memset(R, 0, sizeof *R);
    r->concurrency = L->n_streams;
    r->batch = 1;
    r->trials = 1;
    r->stable = 1;
    r->requests = (int64_t)(L->lat.n + L->fin.n);
    r->errors = L->errors;
    r->window_s = (double)(L->to_ns - L->from_ns) * 1e-9;
    r->throughput_infer_per_sec = r->window_s > 0 ? (double)r->requests / r->window_s : 0;
    r->throughput_audio_sec_per_sec = r->window_s > 0 ? L->audio_s / r->window_s : 0;
    r->rtf = r->throughput_audio_sec_per_sec;
    r->server_queue_us = r->server_compute_input_us = r->server_compute_infer_us =
        r->server_compute_output_us = -1;
    if (L->lat.n) /* an empty list may have no array: qsort's base must not be NULL */
        qsort(L->lat.v, L->lat.n, sizeof(double), cmp_double);
    if (L->fin.n)
        qsort(L->fin.v, L->fin.n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < L->lat.n; i++)
        sum += L->lat.v[i];
    if (L->lat.n) {
        r->latency_avg_us = sum / (double)L->lat.n;
        r->latency_min_us = L->lat.v[0];
        r->latency_max_us = L->lat.v[L->lat.n - 1];
        r->latency_p50_us = perf_percentile(L->lat.v, L->lat.n, 50);
        r->latency_p90_us = perf_percentile(L->lat.v, L->lat.n, 90);
        r->latency_p95_us = perf_percentile(L->lat.v, L->lat.n, 95);
        r->latency_p99_us = perf_percentile(L->lat.v, L->lat.n, 99);
    }
    R->final_p50_us = L->fin.n ? perf_percentile(L->fin.v, L->fin.n, 50) : -1;
    R->final_p99_us = L->fin.n ? perf_percentile(L->fin.v, L->fin.n, 99) : -1;
    R->sequences = L->sequences;
    R->warm_errors = L->warm_errors;
    R->sustained = L->lat.n > 0 && L->errors == 0 && L->warm_errors == 0 && !o->fast &&
                   r->latency_p99_us <= o->latency_limit_ms * 1000.0;
}

/* one level: n streams for the warm-up and the window */
static int run_level(const stream_perf_opts_t *o, int level, int n, stream_perf_row_t *R,
                     hark_err_t *err)
{
    level_t L;
    memset(&L, 0, sizeof L);
    L.o = o;
    L.level = level;
    L.n_streams = n;
    const char *pre = o->prefix ? o->prefix : "";
    snprintf(L.infer_path, sizeof L.infer_path, "%s/v2/models/%s/infer", pre, o->model);
    L.chunk = (size_t)((int64_t)o->rate * o->chunk_ms / 1000);
    L.n_chunks = (int)((o->n + L.chunk - 1) / L.chunk);
    L.chunk_ns = (uint64_t)o->chunk_ms * 1000000u;
    atomic_store(&L.go_ns, UINT64_MAX);
    L.from_ns = UINT64_MAX; /* errors before the clock starts are warm-up errors */
    L.to_ns = UINT64_MAX;
    pthread_mutex_init(&L.mu, NULL);
    stream_t *S = hark_calloc((size_t)n, sizeof *S);
    if (!S)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 1024 * 1024); /* virtual: touched pages only */
    int started = 0;
    for (int i = 0; i < n; i++) {
        S[i].L = &L;
        S[i].idx = i;
        if (pthread_create(&S[i].th, &at, stream_main, &S[i]) == 0) {
            S[i].started = 1;
            started++;
        }
    }
    pthread_attr_destroy(&at);
    if (started < n) {
        pthread_mutex_lock(&L.mu);
        L.errors += n - started;
        snprintf(L.first_error, sizeof L.first_error, "%d of %d stream threads could not start",
                 n - started, n);
        pthread_mutex_unlock(&L.mu);
    }
    /* every stream connected (or failed to), at most 120 s; then the clock starts */
    uint64_t give_up = clock_now_ns() + 120000000000ull;
    while (atomic_load(&L.connected) < started && clock_now_ns() < give_up) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&L.mu);
    L.t0_ns = clock_now_ns() + 20000000u;
    L.from_ns = L.t0_ns + 2 * L.chunk_ns;
    L.to_ns = L.from_ns + (uint64_t)o->window_ms * 1000000u;
    pthread_mutex_unlock(&L.mu);
    atomic_store(&L.go_ns, L.t0_ns);
    for (uint64_t now; (now = clock_now_ns()) < L.to_ns;) {
        uint64_t d = L.to_ns - now > 100000000u ? 100000000u : L.to_ns - now;
        struct timespec ts = {0, (long)d};
        nanosleep(&ts, NULL);
    }
    atomic_store(&L.stop, 1);
    for (int i = 0; i < n; i++)
        if (S[i].started)
            pthread_join(S[i].th, NULL);
    hark_free(S);
    summarise(&L, R);
    int rc = HARK_OK;
    if (R->row.requests == 0)
        rc = err_set(err, HARK_ERR_IO, "no chunk was answered at %d stream(s)%s%s", n,
                     L.first_error[0] ? ": " : "", L.first_error);
    else if (L.errors && o->log)
        fprintf(o->log, "  first error: %s\n", L.first_error);
    hark_free(L.lat.v);
    hark_free(L.fin.v);
    pthread_mutex_destroy(&L.mu);
    return rc;
}

int stream_perf_run(const stream_perf_opts_t *opts, stream_perf_row_t **rows, int *n_rows,
                    hark_err_t *err)
{
    *rows = NULL;
    *n_rows = 0;
    stream_perf_opts_t o = *opts;
    if (!o.host || !o.model || !o.pcm || !o.n || o.rate <= 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "perf --streaming: host, model and audio needed");
    if (o.chunk_ms <= 0)
        o.chunk_ms = 640;
    if (o.chunk_ms < 10 || o.chunk_ms > 60000)
        return err_set(err, HARK_ERR_INVALID_ARG, "--chunk-ms %d: must be in [10, 60000]",
                       o.chunk_ms);
    if (!o.window_ms)
        o.window_ms = 10000;
    if (o.latency_limit_ms <= 0)
        o.latency_limit_ms = 200;
    if (o.streams_start <= 0)
        o.streams_start = 1;
    if (o.streams_end < o.streams_start)
        o.streams_end = o.streams_start;
    if (o.streams_step <= 0)
        o.streams_step = 1;
    if (o.streams_end > 100000)
        return err_set(err, HARK_ERR_INVALID_ARG, "perf --streaming: at most 100000 streams");
    int nl = (o.streams_end - o.streams_start) / o.streams_step + 1;
    stream_perf_row_t *R = hark_calloc((size_t)nl, sizeof *R);
    if (!R)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int k = 0, rc = HARK_OK;
    for (int n = o.streams_start; n <= o.streams_end && k < nl; n += o.streams_step) {
        hark_err_t lerr = {0};
        rc = run_level(&o, k, n, &R[k], &lerr);
        if (rc && k == 0) {
            *err = lerr;
            break;
        }
        rc = HARK_OK;
        if (o.log)
            stream_perf_print_level(o.log, &R[k], o.latency_limit_ms, o.fast);
        k++;
    }
    if (rc) {
        hark_free(R);
        return rc;
    }
    *rows = R;
    *n_rows = k;
    return HARK_OK;
}

int stream_perf_csv_write(FILE *f, const stream_perf_row_t *rows, int n)
{
    fprintf(f, "%s\n", STREAM_PERF_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        const perf_row_t *r = &rows[i].row;
        fprintf(f, "%d,%lld,%lld,%.3f,%.3f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%lld,%d\n",
                r->concurrency, (long long)r->requests, (long long)r->errors, r->window_s,
                r->throughput_infer_per_sec, r->throughput_audio_sec_per_sec, r->latency_avg_us,
                r->latency_p50_us, r->latency_p90_us, r->latency_p95_us, r->latency_p99_us,
                r->latency_max_us, rows[i].final_p50_us, rows[i].final_p99_us,
                (long long)rows[i].sequences, rows[i].sustained);
    }
    return ferror(f) ? -1 : 0;
}

void stream_perf_print_level(FILE *f, const stream_perf_row_t *R, double limit_ms, int fast)
{
    const perf_row_t *r = &R->row;
    fprintf(f, "Streams: %d\n", r->concurrency);
    fprintf(f, "  Chunks: %lld answered (%lld failed) over %.2f s: %.1f chunks/s, %.1f audio s/s\n",
            (long long)r->requests, (long long)r->errors, r->window_s, r->throughput_infer_per_sec,
            r->throughput_audio_sec_per_sec);
    if (R->warm_errors)
        fprintf(f, "  Failed during the warm-up (connections, first chunks): %lld\n",
                (long long)R->warm_errors);
    fprintf(f, "  Chunk latency: avg %.1f ms, p50 %.1f, p90 %.1f, p95 %.1f, p99 %.1f, max %.1f\n",
            r->latency_avg_us / 1000, r->latency_p50_us / 1000, r->latency_p90_us / 1000,
            r->latency_p95_us / 1000, r->latency_p99_us / 1000, r->latency_max_us / 1000);
    if (R->final_p50_us >= 0)
        fprintf(f, "  Final result after END: p50 %.1f ms, p99 %.1f ms (%lld sequences)\n",
                R->final_p50_us / 1000, R->final_p99_us / 1000, (long long)R->sequences);
    if (fast) {
        fprintf(f, "  Real time: not judged (as fast as possible)\n\n");
        fflush(f);
        return;
    }
    fprintf(f, "  Real time: %s (p99 chunk latency %s %.0f ms%s)\n\n",
            R->sustained ? "sustained" : "NOT sustained",
            r->latency_p99_us <= limit_ms * 1000 ? "<=" : ">", limit_ms,
            r->errors ? ", with errors" : "");
    fflush(f);
}
