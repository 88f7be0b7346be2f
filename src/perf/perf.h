/* perf.h — perf_analyzer-style load generation against a KServe v2 (hark or Triton) HTTP server:
 * load levels, measurement windows, stability check, latency percentiles, CSV output.
 * Tests: tests/perf/test_perf.c (pure functions), tests/cli/test_cli_perf.c (against hark serve).
 */
#ifndef HARK_PERF_PERF_H
#define HARK_PERF_PERF_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One load level's measurement: one CSV row, one line of the summary table, one point of the
 * plot (src/perf/plot.h). Latencies are client-side, in microseconds; server_* are averages from
 * the model's /stats endpoint (ns delta over the windows / count delta: per request as the server
 * counts them), in microseconds, or -1 when the server gave no statistics. STABLE FIELD SET: plot.c
 * relies on it. */
typedef struct {
    int concurrency;                 /* closed-loop requests in flight; 0 in request-rate mode */
    double request_rate;             /* open-loop target requests/s; 0 in concurrency mode */
    int batch;                       /* batch size per request (-b) */
    int stable;                      /* 1: the last 3 windows agreed within the threshold */
    int trials;                      /* measurement windows run at this level */
    int64_t requests;                /* completed requests in the reported windows */
    int64_t errors;                  /* failed requests in the reported windows */
    double window_s;                 /* total wall time of the reported windows, seconds */
    double throughput_infer_per_sec; /* inferences (requests × batch) per second */
    double throughput_audio_sec_per_sec; /* seconds of audio processed per wall second */
    double latency_avg_us, latency_p50_us, latency_p90_us, latency_p95_us, latency_p99_us;
    double latency_min_us, latency_max_us;
    double server_queue_us, server_compute_input_us, server_compute_infer_us,
        server_compute_output_us;
    /* Real-time factor as a speed: audio seconds processed per wall-clock second at this load
     * (= throughput_audio_sec_per_sec; > 1 is faster than real time). */
    double rtf;
} perf_row_t;

/* ---- pure helpers (tests/perf/test_perf.c) ------------------------------------------------- */

/* Nearest-rank percentile of sorted[n] (ascending): the smallest sample with at least p% of the
 * samples <= it; p in [0, 100] (0: the minimum); 0 when n == 0. */
double perf_percentile(const double *sorted, size_t n, double p);

/* 1 when each of the last `k` of vals[n] lies within +-threshold (0.1 = 10%) of their mean;
 * 0 when n < k, or the mean is 0 while some value is not. */
int perf_stable(const double *vals, int n, int k, double threshold);

/* Cumulative durations from a model's statistics (Triton's GET .../stats JSON). */
typedef struct {
    uint64_t count[4], ns[4]; /* queue, compute_input, compute_infer, compute_output */
    uint64_t inference_count, success_count;
} perf_server_stats_t;

/* Parses {"model_stats": [{... "inference_stats": {"queue": {"count", "ns"}, ...}}]} (the first
 * model). HARK_OK or HARK_ERR_FORMAT naming the missing field. */
int perf_parse_stats(const char *json, size_t len, perf_server_stats_t *out, hark_err_t *err);
/* Average per count of the difference after - before, in microseconds, for each of the four
 * durations into us[4]; -1 where the count did not grow. */
void perf_stats_delta(const perf_server_stats_t *before, const perf_server_stats_t *after,
                      double us[4]);

/* Writes the CSV header and one line per row (columns: docs in perf.c, PERF_CSV_HEADER). */
#define PERF_CSV_HEADER                                                                            \
    "concurrency,request_rate,batch,throughput_infer_per_sec,throughput_audio_sec_per_sec,"        \
    "latency_avg_us,latency_p50_us,latency_p90_us,latency_p95_us,latency_p99_us,"                  \
    "server_queue_us,server_compute_input_us,server_compute_infer_us,server_compute_output_us,"    \
    "rtf,requests,errors,window_s,stable,trials"
int perf_csv_write(FILE *f, const perf_row_t *rows, int n);
/* perf_analyzer-like block for one level, and the summary table of all levels. */
void perf_print_level(FILE *f, const perf_row_t *r, double percentile);
void perf_print_table(FILE *f, const perf_row_t *rows, int n);

/* ---- the load generator -------------------------------------------------------------------- */

/* One ready-to-send infer request. */
typedef struct {
    const uint8_t *body; /* (len) bytes, borrowed for the run */
    size_t len;
    long header_len; /* Inference-Header-Content-Length; -1: a pure JSON body */
    int batch;       /* inferences in it */
    double audio_s;  /* seconds of audio in it (all batch items) */
} perf_input_t;

/* Zero means "default" for the fields marked so. */
typedef struct {
    const char *host; /* required; the only address contacted */
    int port;
    const char *prefix;         /* URL path prefix ("" or NULL: none) */
    int grpc;                   /* 1: KServe v2 over gRPC (ModelInfer, ModelStatistics) */
    const char *model;          /* required */
    const char *version;        /* NULL: the server's choice */
    const perf_input_t *inputs; /* (n_inputs), sent round-robin */
    int n_inputs;
    /* closed loop: levels conc_start, +conc_step, ... <= conc_end (concurrency = threads =
     * connections, each with one request in flight) */
    int conc_start, conc_end, conc_step;
    /* open loop, when rate_start > 0: levels in requests/s; arrivals constant or Poisson, sent by
     * max_threads threads (a request waits for a free thread when all are busy) */
    double rate_start, rate_end, rate_step;
    int poisson;
    unsigned window_ms;   /* default 5000 */
    double threshold;     /* stability, default 0.1 */
    int stable_windows;   /* default 3 */
    int max_trials;       /* windows per level, default 10 */
    double percentile;    /* latency for the stability check; 0: the average */
    int max_threads;      /* default 64 */
    int64_t max_requests; /* whole run; default 100000 */
    double max_seconds;   /* whole run; default 300 */
    unsigned timeout_ms;  /* per request; default 60000 */
    FILE *log;            /* per-level report as it goes (perf_print_level); NULL: quiet */
    unsigned seed;        /* Poisson arrivals */
} perf_opts_t;

/* Runs every load level; *rows (hark_malloc, hark_free it) gets one row per level measured (the
 * run stops early, marking the row unstable, when a global cap is hit). Returns HARK_OK;
 * HARK_ERR_INVALID_ARG (options); HARK_ERR_IO (the first level had no successful request: err
 * holds the first failure, e.g. the server's {"error"} message); HARK_ERR_NOMEM. */
int perf_run(const perf_opts_t *o, perf_row_t **rows, int *n_rows, hark_err_t *err);

/* How long perf_run will take with o (its defaults applied): *levels load levels, each of
 * stable_windows to max_trials windows, so *lo_s to *hi_s seconds, both capped at max_seconds. */
void perf_estimate(const perf_opts_t *o, int *levels, double *lo_s, double *hi_s);

#endif
