/* perf.c — the `hark perf` engine: closed-loop (concurrency) and open-loop (request rate) load on
 * a KServe v2 infer endpoint, measurement windows with a stability check, server-side times from
 * the model's /stats, CSV and tables. Tests: tests/perf/test_perf.c, tests/cli/test_cli_perf.c
 *
 * Definitions
 * - Latency: client-side, from the first byte sent to the last byte received, successful
 *   requests only; percentiles are nearest-rank.
 * - A window's requests are those that completed inside it; windows are back to back.
 * - A level is stable when, over its last `stable_windows` windows, both the throughput and the
 *   chosen latency (average or --percentile) stay within +-threshold of their mean. The row
 *   reports those windows merged; after max_trials windows it reports the last ones, unstable.
 * - throughput_infer_per_sec: completed inferences (requests x batch) per second.
 * - throughput_audio_sec_per_sec = rtf: seconds of audio recognised per wall-clock second, all
 *   streams together (the inverse of the usual real-time factor; 10 means 10x faster than real
 *   time).
 * - server_*_us: (ns after - ns before) / (count after - count before) of the model's
 *   statistics around the windows, i.e. per request as the server counts them; -1 when unknown.
 * CSV columns (PERF_CSV_HEADER): concurrency (0 in rate mode), request_rate (0 in concurrency
 * mode), batch, the two throughputs, latency_{avg,p50,p90,p95,p99}_us, server_{queue,
 * compute_input,compute_infer,compute_output}_us, rtf, requests, errors, window_s, stable (0/1),
 * trials. */
#include "perf/perf.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "net/grpc_client.h"
#include "net/http_client.h"
#include "api/kserve_grpc.h"
#include "grpc_service.pb-c.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- pure helpers -------------------------------------------------------------------------- */

double perf_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    if (p <= 0)
        return sorted[0];
    if (p >= 100)
        return sorted[n - 1];
    double rank = ceil(p / 100.0 * (double)n); /* 1-based */
    size_t i = rank < 1 ? 0 : (size_t)rank - 1;
    return sorted[i < n ? i : n - 1];
}

int perf_stable(const double *vals, int n, int k, double threshold)
{
    if (k < 1 || n < k)
        return 0;
    double mean = 0;
    for (int i = n - k; i < n; i++)
        mean += vals[i];
    mean /= k;
    for (int i = n - k; i < n; i++) {
        if (!isfinite(vals[i]))
            return 0;
        if (mean == 0) {
            if (vals[i] != 0)
                return 0;
        } else if (fabs(vals[i] - mean) > threshold * fabs(mean)) {
            return 0;
        }
    }
    return 1;
}

static int json_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
        *out = (uint64_t)v->valuedouble;
        return 0;
    }
    if (cJSON_IsString(v)) { /* some servers write 64-bit counters as strings */
        char *end;
        unsigned long long x = strtoull(v->valuestring, &end, 10);
        if (*v->valuestring && !*end) {
            *out = x;
            return 0;
        }
    }
    return -1;
}

int perf_parse_stats(const char *json, size_t len, perf_server_stats_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(json, len);
    static const char *const names[4] = {"queue", "compute_input", "compute_infer",
                                         "compute_output"};
    int rc = HARK_OK;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "model_stats");
    const cJSON *m = cJSON_IsArray(ms) ? cJSON_GetArrayItem(ms, 0) : NULL;
    const cJSON *is = cJSON_GetObjectItemCaseSensitive(m, "inference_stats");
    if (!root || !m || !cJSON_IsObject(is)) {
        rc = err_set(err, HARK_ERR_FORMAT, "statistics: no model_stats[0].inference_stats");
        goto done;
    }
    json_u64(m, "inference_count", &out->inference_count); /* optional */
    const cJSON *succ = cJSON_GetObjectItemCaseSensitive(is, "success");
    if (succ)
        json_u64(succ, "count", &out->success_count);
    for (int i = 0; i < 4; i++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(is, names[i]);
        if (!cJSON_IsObject(d) || json_u64(d, "count", &out->count[i]) ||
            json_u64(d, "ns", &out->ns[i])) {
            rc = err_set(err, HARK_ERR_FORMAT, "statistics: inference_stats.%s.{count,ns} missing",
                         names[i]);
            goto done;
        }
    }
done:
    cJSON_Delete(root);
    return rc;
}

void perf_stats_delta(const perf_server_stats_t *before, const perf_server_stats_t *after,
                      double us[4])
{
    for (int i = 0; i < 4; i++) {
        if (after->count[i] > before->count[i] && after->ns[i] >= before->ns[i])
            us[i] = (double)(after->ns[i] - before->ns[i]) / 1000.0 /
                    (double)(after->count[i] - before->count[i]);
        else
            us[i] = -1;
    }
}

int perf_csv_write(FILE *f, const perf_row_t *rows, int n)
{
    fprintf(f, "%s\n", PERF_CSV_HEADER);
    for (int i = 0; i < n; i++) {
        const perf_row_t *r = &rows[i];
        fprintf(f,
                "%d,%.3f,%d,%.3f,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.3f,%lld,%lld,"
                "%.3f,%d,%d\n",
                r->concurrency, r->request_rate, r->batch, r->throughput_infer_per_sec,
                r->throughput_audio_sec_per_sec, r->latency_avg_us, r->latency_p50_us,
                r->latency_p90_us, r->latency_p95_us, r->latency_p99_us, r->server_queue_us,
                r->server_compute_input_us, r->server_compute_infer_us, r->server_compute_output_us,
                r->rtf, (long long)r->requests, (long long)r->errors, r->window_s, r->stable,
                r->trials);
    }
    fflush(f);
    return ferror(f) ? HARK_ERR_IO : HARK_OK;
}

static void level_name(char *buf, size_t n, const perf_row_t *r)
{
    if (r->request_rate > 0)
        snprintf(buf, n, "Request rate: %g", r->request_rate);
    else
        snprintf(buf, n, "Request concurrency: %d", r->concurrency);
}

void perf_print_level(FILE *f, const perf_row_t *r, double percentile)
{
    char name[64];
    level_name(name, sizeof name, r);
    fprintf(f, "%s\n  Client:\n", name);
    fprintf(f, "    Request count: %lld (%lld failed) over %.2f s in %d window(s)%s\n",
            (long long)r->requests, (long long)r->errors, r->window_s, r->trials,
            r->stable ? "" : " -- unstable");
    fprintf(f, "    Throughput: %.2f infer/sec, %.2f audio sec/sec\n", r->throughput_infer_per_sec,
            r->throughput_audio_sec_per_sec);
    if (percentile > 0)
        fprintf(f, "    (stability judged on p%g latency)\n", percentile);
    fprintf(f, "    Avg latency: %.0f usec (min %.0f, max %.0f)\n", r->latency_avg_us,
            r->latency_min_us, r->latency_max_us);
    fprintf(f, "    p50 latency: %.0f usec\n    p90 latency: %.0f usec\n", r->latency_p50_us,
            r->latency_p90_us);
    fprintf(f, "    p95 latency: %.0f usec\n    p99 latency: %.0f usec\n", r->latency_p95_us,
            r->latency_p99_us);
    fprintf(f, "  Server:\n");
    if (r->server_queue_us < 0 && r->server_compute_infer_us < 0)
        fprintf(f, "    (no statistics)\n");
    else
        fprintf(f,
                "    Avg request time: queue %.0f usec + compute input %.0f usec + compute infer "
                "%.0f usec + compute output %.0f usec\n",
                r->server_queue_us, r->server_compute_input_us, r->server_compute_infer_us,
                r->server_compute_output_us);
    fprintf(f, "  Real-time: %.2f audio seconds per second\n\n", r->rtf);
    fflush(f);
}

void perf_print_table(FILE *f, const perf_row_t *rows, int n)
{
    int rate = n > 0 && rows[0].request_rate > 0;
    fprintf(f, "%-11s %10s %11s %10s %10s %10s %10s %10s %10s %10s %s\n",
            rate ? "Rate(req/s)" : "Concurrency", "Infer/s", "Audio-s/s", "Avg(us)", "p50(us)",
            "p90(us)", "p95(us)", "p99(us)", "Queue(us)", "Infer(us)", "Stable");
    for (int i = 0; i < n; i++) {
        const perf_row_t *r = &rows[i];
        char lvl[32];
        if (rate)
            snprintf(lvl, sizeof lvl, "%g", r->request_rate);
        else
            snprintf(lvl, sizeof lvl, "%d", r->concurrency);
        fprintf(f, "%-11s %10.2f %11.2f %10.0f %10.0f %10.0f %10.0f %10.0f %10.0f %10.0f %s\n", lvl,
                r->throughput_infer_per_sec, r->throughput_audio_sec_per_sec, r->latency_avg_us,
                r->latency_p50_us, r->latency_p90_us, r->latency_p95_us, r->latency_p99_us,
                r->server_queue_us, r->server_compute_infer_us, r->stable ? "yes" : "no");
    }
    fflush(f);
}

/* ---- the load generator -------------------------------------------------------------------- */

typedef struct {
    double lat_us;
    double audio_s;
    int batch;
    int ok;
} rec_t;

typedef struct {
    rec_t *r;
    size_t n, cap;
} recs_t;

typedef struct {
    const perf_opts_t *o;
    char infer_path[1024], stats_path[1024];
    /* gRPC (o->grpc): each input as a serialized ModelInferRequest, and the stats client */
    uint8_t **grpc_msg;
    size_t *grpc_len;
    grpc_client_t *grpc_stats;
    double rate; /* this level's requests/s; 0: closed loop */
    atomic_int stop;
    atomic_llong issued;  /* whole run */
    atomic_llong next_in; /* round-robin over inputs */
    atomic_int in_flight;
    pthread_mutex_t mu;
    recs_t recs;           /* completed since the last drain (mu) */
    uint64_t next_arrival; /* ns, open loop (mu) */
    unsigned rng;          /* (mu) */
    char first_error[512]; /* (mu) */
    int oom;               /* (mu) */
} run_t;

typedef struct {
    run_t *run;
    pthread_t th;
    int started;
} worker_t;

static void sleep_until(uint64_t t_ns, const run_t *r)
{
    for (;;) {
        uint64_t now = clock_now_ns();
        if (now >= t_ns || atomic_load(&r->stop))
            return;
        uint64_t d = t_ns - now;
        if (d > 50000000u)
            d = 50000000u; /* wake up for stop at least every 50 ms */
        struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

static double next_gap_s(run_t *r)
{
    if (!r->o->poisson)
        return 1.0 / r->rate;
    r->rng = r->rng * 1103515245u + 12345u;
    double u = ((r->rng >> 8) + 1.0) / 16777217.0; /* (0, 1) */
    return -log(u) / r->rate;
}

static void record(run_t *r, const rec_t *rc, const char *error)
{
    pthread_mutex_lock(&r->mu);
    if (r->recs.n == r->recs.cap) {
        size_t cap = r->recs.cap ? r->recs.cap * 2 : 1024;
        rec_t *p = hark_realloc(r->recs.r, cap * sizeof *p);
        if (p) {
            r->recs.r = p;
            r->recs.cap = cap;
        } else {
            r->oom = 1;
        }
    }
    if (r->recs.n < r->recs.cap)
        r->recs.r[r->recs.n++] = *rc;
    if (error && !r->first_error[0])
        snprintf(r->first_error, sizeof r->first_error, "%s", error);
    pthread_mutex_unlock(&r->mu);
}

/* the server's {"error": "..."} message, else the start of the body */
static void error_of(const http_response_t *resp, char *buf, size_t n)
{
    cJSON *j = cJSON_ParseWithLength((const char *)resp->body, resp->body_len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e))
        snprintf(buf, n, "HTTP %d: %s", resp->status, e->valuestring);
    else
        snprintf(buf, n, "HTTP %d: %.200s", resp->status, (const char *)resp->body);
    cJSON_Delete(j);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    run_t *r = w->run;
    const perf_opts_t *o = r->o;
    hark_err_t err = {0};
    http_client_opts_t co = {.timeout_ms = o->timeout_ms};
    http_client_t *c = NULL;
    grpc_client_t *gc = NULL;
    if (o->grpc ? grpc_client_create(o->host, o->port, o->timeout_ms, &gc, &err)
                : http_client_create(o->host, o->port, &co, &c, &err)) {
        rec_t rc = {0};
        record(r, &rc, err.msg);
        return NULL;
    }
    while (!atomic_load(&r->stop)) {
        if (r->rate > 0) {
            pthread_mutex_lock(&r->mu);
            uint64_t t = r->next_arrival;
            r->next_arrival += (uint64_t)(next_gap_s(r) * 1e9);
            pthread_mutex_unlock(&r->mu);
            sleep_until(t, r);
            if (atomic_load(&r->stop))
                break;
        }
        if (atomic_fetch_add(&r->issued, 1) >= o->max_requests) {
            atomic_fetch_sub(&r->issued, 1);
            break;
        }
        int k = atomic_fetch_add(&r->next_in, 1) % o->n_inputs;
        const perf_input_t *in = &o->inputs[k];
        if (gc) {
            uint8_t *resp = NULL;
            size_t rlen;
            int st = 0;
            char gmsg[512] = "";
            atomic_fetch_add(&r->in_flight, 1);
            uint64_t t0 = clock_now_ns();
            int rc =
                grpc_client_call(gc, "/inference.GRPCInferenceService/ModelInfer", r->grpc_msg[k],
                                 r->grpc_len[k], &resp, &rlen, &st, gmsg, sizeof gmsg, &err);
            uint64_t t1 = clock_now_ns();
            atomic_fetch_sub(&r->in_flight, 1);
            hark_free(resp);
            rec_t rec = {.lat_us = (double)(t1 - t0) / 1000.0,
                         .audio_s = in->audio_s,
                         .batch = in->batch,
                         .ok = !rc && st == 0};
            char msg[600] = "";
            if (rc)
                snprintf(msg, sizeof msg, "%s", err.msg);
            else if (st)
                snprintf(msg, sizeof msg, "gRPC status %d: %s", st, gmsg);
            record(r, &rec, rec.ok ? NULL : msg);
            continue;
        }
        char hl[32];
        http_kv_t hdr[2] = {{"Content-Type", "application/octet-stream"},
                            {"Inference-Header-Content-Length", hl}};
        snprintf(hl, sizeof hl, "%ld", in->header_len);
        if (in->header_len < 0)
            hdr[0].value = "application/json";
        http_response_t resp;
        atomic_fetch_add(&r->in_flight, 1);
        uint64_t t0 = clock_now_ns();
        int rc = http_client_request(c, "POST", r->infer_path, hdr, in->header_len < 0 ? 1 : 2,
                                     in->body, in->len, &resp, &err);
        uint64_t t1 = clock_now_ns();
        atomic_fetch_sub(&r->in_flight, 1);
        rec_t rec = {.lat_us = (double)(t1 - t0) / 1000.0,
                     .audio_s = in->audio_s,
                     .batch = in->batch,
                     .ok = !rc && resp.status == 200};
        char msg[512] = "";
        if (rc)
            snprintf(msg, sizeof msg, "%s", err.msg);
        else if (resp.status != 200)
            error_of(&resp, msg, sizeof msg);
        record(r, &rec, rec.ok ? NULL : msg);
    }
    http_client_destroy(c);
    grpc_client_destroy(gc);
    return NULL;
}

/* one measurement window, summarised */
typedef struct {
    double t_s;
    int64_t ok, errors, infers;
    double audio_s;
    double *lat; /* (ok) sorted, hark_malloc */
    double lat_avg;
    int have_stats;
    perf_server_stats_t s0, s1;
} window_t;

/* ModelStatistics over gRPC, into the same figures */
static int fetch_stats_grpc(const run_t *r, perf_server_stats_t *s)
{
    Inference__ModelStatisticsRequest q = INFERENCE__MODEL_STATISTICS_REQUEST__INIT;
    q.name = (char *)r->o->model;
    q.version = (char *)(r->o->version ? r->o->version : "");
    uint8_t buf[1024], *resp = NULL;
    size_t len = protobuf_c_message_get_packed_size(&q.base), rlen;
    int st = 0;
    char msg[256];
    hark_err_t err = {0};
    if (len > sizeof buf)
        return -1;
    protobuf_c_message_pack(&q.base, buf);
    if (grpc_client_call(r->grpc_stats, "/inference.GRPCInferenceService/ModelStatistics", buf, len,
                         &resp, &rlen, &st, msg, sizeof msg, &err) ||
        st) {
        hark_free(resp);
        return -1;
    }
    Inference__ModelStatisticsResponse *m =
        inference__model_statistics_response__unpack(NULL, rlen, resp);
    hark_free(resp);
    int rc = -1;
    if (m && m->n_model_stats && m->model_stats[0]->inference_stats) {
        const Inference__ModelStatistics *ms = m->model_stats[0];
        const Inference__InferStatistics *is = ms->inference_stats;
        const Inference__StatisticDuration *d[4] = {is->queue, is->compute_input, is->compute_infer,
                                                    is->compute_output};
        memset(s, 0, sizeof *s);
        for (int i = 0; i < 4; i++)
            if (d[i]) {
                s->count[i] = d[i]->count;
                s->ns[i] = d[i]->ns;
            }
        s->inference_count = ms->inference_count;
        s->success_count = is->success ? is->success->count : 0;
        rc = 0;
    }
    if (m)
        inference__model_statistics_response__free_unpacked(m, NULL);
    return rc;
}

static int fetch_stats(http_client_t *c, const run_t *r, perf_server_stats_t *s)
{
    if (r->o->grpc)
        return fetch_stats_grpc(r, s);
    http_response_t resp;
    hark_err_t err = {0};
    if (http_client_request(c, "GET", r->stats_path, NULL, 0, NULL, 0, &resp, &err) ||
        resp.status != 200)
        return -1;
    return perf_parse_stats((const char *)resp.body, resp.body_len, s, NULL) ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* takes the records completed since the last drain into w */
static int drain(run_t *r, window_t *w, double t_s)
{
    pthread_mutex_lock(&r->mu);
    recs_t got = r->recs;
    memset(&r->recs, 0, sizeof r->recs);
    int oom = r->oom;
    pthread_mutex_unlock(&r->mu);
    memset(w, 0, sizeof *w);
    w->t_s = t_s;
    w->lat = hark_malloc(sizeof(double) * (got.n ? got.n : 1));
    if (!w->lat || oom) {
        hark_free(got.r);
        hark_free(w->lat);
        w->lat = NULL;
        return HARK_ERR_NOMEM;
    }
    double sum = 0;
    for (size_t i = 0; i < got.n; i++) {
        const rec_t *e = &got.r[i];
        if (!e->ok) {
            w->errors++;
            continue;
        }
        w->lat[w->ok++] = e->lat_us;
        sum += e->lat_us;
        w->infers += e->batch;
        w->audio_s += e->audio_s;
    }
    qsort(w->lat, (size_t)w->ok, sizeof(double), cmp_double);
    w->lat_avg = w->ok ? sum / (double)w->ok : 0;
    hark_free(got.r);
    return HARK_OK;
}

static double window_latency(const window_t *w, double percentile)
{
    return percentile > 0 ? perf_percentile(w->lat, (size_t)w->ok, percentile) : w->lat_avg;
}

/* merges windows w[0..k) into a row */
static int make_row(const window_t *w, int k, perf_row_t *row)
{
    size_t n = 0;
    double t = 0, audio = 0, sum = 0;
    int64_t infers = 0, errors = 0;
    for (int i = 0; i < k; i++) {
        n += (size_t)w[i].ok;
        t += w[i].t_s;
        audio += w[i].audio_s;
        infers += w[i].infers;
        errors += w[i].errors;
    }
    double *lat = hark_malloc(sizeof(double) * (n ? n : 1));
    if (!lat)
        return HARK_ERR_NOMEM;
    size_t at = 0;
    for (int i = 0; i < k; i++) {
        memcpy(lat + at, w[i].lat, sizeof(double) * (size_t)w[i].ok);
        at += (size_t)w[i].ok;
    }
    qsort(lat, n, sizeof(double), cmp_double);
    for (size_t i = 0; i < n; i++)
        sum += lat[i];
    row->requests = (int64_t)n;
    row->errors = errors;
    row->window_s = t;
    row->throughput_infer_per_sec = t > 0 ? (double)infers / t : 0;
    row->throughput_audio_sec_per_sec = t > 0 ? audio / t : 0;
    row->rtf = row->throughput_audio_sec_per_sec;
    row->latency_avg_us = n ? sum / (double)n : 0;
    row->latency_min_us = n ? lat[0] : 0;
    row->latency_max_us = n ? lat[n - 1] : 0;
    row->latency_p50_us = perf_percentile(lat, n, 50);
    row->latency_p90_us = perf_percentile(lat, n, 90);
    row->latency_p95_us = perf_percentile(lat, n, 95);
    row->latency_p99_us = perf_percentile(lat, n, 99);
    hark_free(lat);
    double us[4] = {-1, -1, -1, -1};
    int all = 1;
    for (int i = 0; i < k; i++)
        all &= w[i].have_stats;
    if (k > 0 && all)
        perf_stats_delta(&w[0].s0, &w[k - 1].s1, us);
    row->server_queue_us = us[0];
    row->server_compute_input_us = us[1];
    row->server_compute_infer_us = us[2];
    row->server_compute_output_us = us[3];
    return HARK_OK;
}

static void stop_workers(run_t *r, worker_t *w, int n)
{
    atomic_store(&r->stop, 1);
    for (int i = 0; i < n; i++)
        if (w[i].started)
            pthread_join(w[i].th, NULL);
}

/* Measures one level (rate > 0: open loop; else `conc` connections). *capped = a global cap was
 * hit. */
static int run_level(run_t *r, http_client_t *sc, int conc, double rate, uint64_t deadline_ns,
                     perf_row_t *row, int *capped, hark_err_t *err)
{
    const perf_opts_t *o = r->o;
    int nthreads = rate > 0 ? o->max_threads : conc;
    worker_t *w = hark_calloc((size_t)nthreads, sizeof *w);
    window_t win[64]; /* ring of the last windows; stable_windows <= 16 */
    int nwin = 0, rc = HARK_OK;
    double *thr = hark_calloc((size_t)o->max_trials, sizeof *thr);
    double *lat = hark_calloc((size_t)o->max_trials, sizeof *lat);
    memset(win, 0, sizeof win);
    if (!w || !thr || !lat) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    atomic_store(&r->stop, 0);
    r->rate = rate;
    r->next_arrival = clock_now_ns();
    memset(row, 0, sizeof *row);
    row->concurrency = rate > 0 ? 0 : conc;
    row->request_rate = rate;
    row->batch = o->inputs[0].batch;
    for (int i = 0; i < nthreads; i++) {
        w[i].run = r;
        if (pthread_create(&w[i].th, NULL, worker_main, &w[i]) != 0) {
            stop_workers(r, w, i);
            rc = err_set(err, HARK_ERR_NOMEM, "cannot start thread %d of %d", i + 1, nthreads);
            goto done;
        }
        w[i].started = 1;
    }
    perf_server_stats_t prev;
    memset(&prev, 0, sizeof prev);
    int have_prev = fetch_stats(sc, r, &prev) == 0;
    uint64_t t_prev = clock_now_ns();
    window_t dummy;
    if (drain(r, &dummy, 0) == HARK_OK) /* nothing should be there yet */
        hark_free(dummy.lat);
    int trials = 0, stable = 0;
    const int k = o->stable_windows;
    while (trials < o->max_trials) {
        uint64_t end = t_prev + (uint64_t)o->window_ms * 1000000u;
        if (end > deadline_ns) {
            end = deadline_ns;
            *capped = 1;
        }
        while (clock_now_ns() < end) {
            if (atomic_load(&r->issued) >= o->max_requests && atomic_load(&r->in_flight) == 0) {
                *capped = 1;
                break;
            }
            sleep_until(clock_now_ns() + 10000000u < end ? clock_now_ns() + 10000000u : end, r);
        }
        uint64_t t_now = clock_now_ns();
        window_t *cur = &win[nwin % 64];
        hark_free(cur->lat);
        if (drain(r, cur, (double)(t_now - t_prev) * 1e-9)) {
            cur->lat = NULL;
            stop_workers(r, w, nthreads);
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory recording latencies");
            goto done;
        }
        t_prev = t_now;
        cur->s0 = prev;
        cur->have_stats = have_prev && fetch_stats(sc, r, &cur->s1) == 0;
        have_prev = cur->have_stats;
        prev = cur->s1;
        nwin++;
        thr[trials] = cur->t_s > 0 ? (double)cur->infers / cur->t_s : 0;
        lat[trials] = window_latency(cur, o->percentile);
        trials++;
        stable = cur->ok > 0 && perf_stable(thr, trials, k, o->threshold) &&
                 perf_stable(lat, trials, k, o->threshold);
        if (stable || *capped)
            break;
    }
    stop_workers(r, w, nthreads);
    /* the reported windows: the last k (fewer when the level was cut short) */
    int use = nwin < k ? nwin : k;
    window_t merged[64];
    for (int i = 0; i < use; i++)
        merged[i] = win[(nwin - use + i) % 64];
    if ((rc = make_row(merged, use, row))) {
        err_set(err, rc, "out of memory");
        goto done;
    }
    row->stable = stable;
    row->trials = trials;
done:
    for (int i = 0; i < 64; i++)
        hark_free(win[i].lat);
    hark_free(w);
    hark_free(thr);
    hark_free(lat);
    return rc;
}

void perf_estimate(const perf_opts_t *in, int *levels, double *lo_s, double *hi_s)
{
    double win = (in->window_ms ? in->window_ms : 5000) * 1e-3;
    int k = in->stable_windows > 0 ? in->stable_windows : 3;
    int trials = in->max_trials > 0 ? in->max_trials : 10;
    double cap = in->max_seconds > 0 ? in->max_seconds : 300;
    int n = 0;
    if (in->rate_start > 0) { /* as perf_run counts the open-loop levels */
        double end = in->rate_end < in->rate_start ? in->rate_start : in->rate_end;
        double step = in->rate_step > 0          ? in->rate_step
                      : end - in->rate_start > 0 ? end - in->rate_start
                                                 : 1;
        for (double x = in->rate_start; x <= end * (1 + 1e-9) && n < 10000; x += step)
            n++;
    } else {
        int a = in->conc_start > 0 ? in->conc_start : 1;
        int b = in->conc_end < a ? a : in->conc_end, step = in->conc_step > 0 ? in->conc_step : 1;
        n = (b - a) / step + 1;
    }
    *levels = n;
    *lo_s = n * (k < trials ? k : trials) * win;
    *hi_s = n * trials * win;
    if (*lo_s > cap)
        *lo_s = cap;
    if (*hi_s > cap)
        *hi_s = cap;
}

int perf_run(const perf_opts_t *opts, perf_row_t **rows_out, int *n_out, hark_err_t *err)
{
    *rows_out = NULL;
    *n_out = 0;
    perf_opts_t o = *opts;
    if (!o.host || !o.model || !o.inputs || o.n_inputs < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "perf: host, model and inputs are required");
    if (!o.window_ms)
        o.window_ms = 5000;
    if (o.threshold <= 0)
        o.threshold = 0.1;
    if (o.stable_windows <= 0)
        o.stable_windows = 3;
    if (o.max_trials <= 0)
        o.max_trials = 10;
    if (o.max_threads <= 0)
        o.max_threads = 64;
    if (o.max_requests <= 0)
        o.max_requests = 100000;
    if (o.max_seconds <= 0)
        o.max_seconds = 300;
    if (!o.timeout_ms)
        o.timeout_ms = 60000;
    if (o.stable_windows > 16 || o.max_trials < o.stable_windows)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "perf: need 1 <= stable windows (%d) <= 16 and <= max trials (%d)",
                       o.stable_windows, o.max_trials);
    int rate_mode = o.rate_start > 0;
    int nlevels = 0;
    if (rate_mode) {
        if (o.rate_end < o.rate_start)
            o.rate_end = o.rate_start;
        if (o.rate_step <= 0)
            o.rate_step = o.rate_end - o.rate_start > 0 ? o.rate_end - o.rate_start : 1;
        for (double x = o.rate_start; x <= o.rate_end * (1 + 1e-9) && nlevels < 10000;
             x += o.rate_step)
            nlevels++;
    } else {
        if (o.conc_start <= 0)
            o.conc_start = 1;
        if (o.conc_end < o.conc_start)
            o.conc_end = o.conc_start;
        if (o.conc_step <= 0)
            o.conc_step = 1;
        if (o.conc_end > o.max_threads)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "perf: concurrency %d needs as many threads (one connection each); "
                           "raise --max-threads (now %d)",
                           o.conc_end, o.max_threads);
        nlevels = (o.conc_end - o.conc_start) / o.conc_step + 1;
    }
    run_t r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.rng = o.seed ? o.seed : 12345u;
    pthread_mutex_init(&r.mu, NULL);
    const char *pre = o.prefix ? o.prefix : "";
    if (o.version && *o.version) {
        snprintf(r.infer_path, sizeof r.infer_path, "%s/v2/models/%s/versions/%s/infer", pre,
                 o.model, o.version);
        snprintf(r.stats_path, sizeof r.stats_path, "%s/v2/models/%s/versions/%s/stats", pre,
                 o.model, o.version);
    } else {
        snprintf(r.infer_path, sizeof r.infer_path, "%s/v2/models/%s/infer", pre, o.model);
        snprintf(r.stats_path, sizeof r.stats_path, "%s/v2/models/%s/stats", pre, o.model);
    }
    perf_row_t *rows = hark_calloc((size_t)nlevels, sizeof *rows);
    http_client_t *sc = NULL;
    http_client_opts_t co = {.timeout_ms = 10000};
    int rc = rows ? http_client_create(o.host, o.port, &co, &sc, err)
                  : err_set(err, HARK_ERR_NOMEM, "out of memory");
    if (!rc && o.grpc) { /* every input as a ModelInferRequest, made once */
        r.grpc_msg = hark_calloc((size_t)o.n_inputs, sizeof *r.grpc_msg);
        r.grpc_len = hark_calloc((size_t)o.n_inputs, sizeof *r.grpc_len);
        rc = r.grpc_msg && r.grpc_len
                 ? grpc_client_create(o.host, o.port, 10000, &r.grpc_stats, err)
                 : err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int i = 0; !rc && i < o.n_inputs; i++)
            rc = kserve_grpc_pack_request(
                o.model, o.version, o.inputs[i].body, o.inputs[i].len,
                o.inputs[i].header_len < 0 ? (size_t)-1 : (size_t)o.inputs[i].header_len,
                &r.grpc_msg[i], &r.grpc_len[i], err);
    }
    uint64_t deadline = clock_now_ns() + (uint64_t)(o.max_seconds * 1e9);
    int n = 0, capped = 0;
    for (int lv = 0; !rc && lv < nlevels && !capped; lv++) {
        int conc = rate_mode ? 0 : o.conc_start + lv * o.conc_step;
        double rate = rate_mode ? o.rate_start + lv * o.rate_step : 0;
        r.first_error[0] = 0;
        rc = run_level(&r, sc, conc, rate, deadline, &rows[n], &capped, err);
        if (rc)
            break;
        if (rows[n].requests == 0) { /* nothing succeeded: say why and stop */
            rc = err_set(err, HARK_ERR_IO, "no request succeeded at %s %g: %s",
                         rate_mode ? "request rate" : "concurrency", rate_mode ? rate : conc,
                         r.first_error[0] ? r.first_error : "no response within the window");
            break;
        }
        if (o.log) {
            if (r.first_error[0])
                fprintf(o.log, "  (first failure: %s)\n", r.first_error);
            perf_print_level(o.log, &rows[n], o.percentile);
        }
        n++;
    }
    http_client_destroy(sc);
    grpc_client_destroy(r.grpc_stats);
    for (int i = 0; r.grpc_msg && i < o.n_inputs; i++)
        hark_free(r.grpc_msg[i]);
    hark_free(r.grpc_msg);
    hark_free(r.grpc_len);
    hark_free(r.recs.r);
    pthread_mutex_destroy(&r.mu);
    if (rc && n == 0) {
        hark_free(rows);
        return rc;
    }
    *rows_out = rows;
    *n_out = n;
    return rc;
}
