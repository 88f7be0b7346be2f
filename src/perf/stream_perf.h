/* stream_perf.h — `hark perf --streaming`: N simulated streams, each a thread and a connection,
 * sending one audio file chunk by chunk as sequences (sequence_id / sequence_start /
 * sequence_end, KServe v2 over HTTP or gRPC ModelInfer) at real-time pace (a chunk leaves when
 * its last sample would have been spoken) or as fast as answers come; per stream count (load
 * level): chunk latency percentiles, time to the final result after the END chunk, chunks and
 * audio seconds per second, errors, and whether the level is sustained in real time.
 * Tests: tests/cli/test_cli_perf.c (against hark serve with a streaming model)
 *
 * Latency of a chunk: real-time pace, from the moment its last sample would have been spoken
 * (its due time) to its answer — so a stream that falls behind real time shows it; as fast as
 * possible, from sending to the answer. Every stream connects first (a liveness call); the
 * level's clock starts once all are connected. Chunks due in the first two chunk periods (the
 * streams start staggered over one period) are not measured; their failures are counted as
 * warm-up errors, and a level with any error is not sustained. A failed chunk ends its sequence;
 * the stream starts the next one at once.
 */
#ifndef HARK_PERF_STREAM_PERF_H
#define HARK_PERF_STREAM_PERF_H

#include "core/error.h"
#include "perf/perf.h"

#include <stdio.h>

typedef struct {
    const char *host; /* required */
    int port;
    const char *prefix; /* URL path prefix ("" or NULL: none) */
    int grpc;           /* 1: gRPC ModelInfer */
    const char *model;  /* required */
    const float *pcm;   /* (n) samples at `rate`, sent by every stream, again and again */
    size_t n;
    int rate;
    int chunk_ms;                                 /* audio per chunk; default 640 */
    int fast;                                     /* 1: as fast as possible; 0: real-time pace */
    int streams_start, streams_end, streams_step; /* levels */
    unsigned window_ms;                           /* measured time per level (default 10000) */
    double latency_limit_ms; /* sustained: p99 chunk latency <= this, no errors (default 200) */
    unsigned timeout_ms;     /* per request; default 60000 */
    FILE *log;               /* per-level report as it goes; NULL: quiet */
} stream_perf_opts_t;

typedef struct {
    perf_row_t row; /* concurrency = streams; latency_* = chunk latency; requests = chunks */
    double final_p50_us, final_p99_us; /* END chunk: its answer (the final result); -1: none */
    int64_t sequences;                 /* sequences finished in the window */
    int64_t warm_errors; /* failures before the window (connections, warm-up chunks) */
    int sustained;
} stream_perf_row_t;

/* Runs every level; *rows (hark_free) one per level. HARK_OK; HARK_ERR_INVALID_ARG (options);
 * HARK_ERR_IO (the first level had no successful chunk: err holds the first failure);
 * HARK_ERR_NOMEM. */
int stream_perf_run(const stream_perf_opts_t *o, stream_perf_row_t **rows, int *n_rows,
                    hark_err_t *err);

#define STREAM_PERF_CSV_HEADER                                                                     \
    "streams,chunks,errors,window_s,chunks_per_sec,audio_sec_per_sec,latency_avg_us,"              \
    "latency_p50_us,latency_p90_us,latency_p95_us,latency_p99_us,latency_max_us,final_p50_us,"     \
    "final_p99_us,sequences,sustained"
int stream_perf_csv_write(FILE *f, const stream_perf_row_t *rows, int n);
void stream_perf_print_level(FILE *f, const stream_perf_row_t *r, double limit_ms, int fast);

#endif
