/* instance.h — a served ASR model: the shared recognizer(s), its dynamic batcher and its model
 * instances (one worker thread each, on a GPU or the CPU), plus the counters Triton's statistics
 * and Prometheus metrics report. Transport-independent: the HTTP/gRPC layers submit requests and
 * get a completion callback on a worker thread.
 * Tests: tests/sched/test_instance.c
 *
 * Ownership: a request is the caller's until its `done` callback runs (on a worker thread); the
 * callback receives the results, which it must release with wenet_result_free, and it may free the
 * request. served_model_destroy closes the batcher, lets the workers finish what is queued and
 * joins them.
 */
#ifndef HARK_SERVER_INSTANCE_H
#define HARK_SERVER_INSTANCE_H

#include "core/error.h"
#include "model/wenet/wenet_asr.h"
#include "sched/batcher.h"

#include <pthread.h>
#include <stdint.h>

typedef struct served_request served_request_t;

/* Durations of one request, in nanoseconds (Triton's statistics: queue, compute input (padding +
 * features), compute infer (encoder + search), compute output (results)). */
typedef struct {
    uint64_t queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns;
    int batch_size;     /* the batch this request ran in */
    double padding;     /* fraction of padded samples in that batch */
} served_timing_t;

typedef void (*served_done_fn)(served_request_t *req, int status, const char *error,
                               wenet_result_t *result, const served_timing_t *timing);

struct served_request {
    batcher_item_t item;       /* first: the batcher's link */
    const float *pcm;          /* (n) samples at the model's rate; lent until done runs */
    size_t n;
    wenet_decode_opts_t opts;  /* per-request decoding (defaults from the model's parameters) */
    served_done_fn done;
    void *user;
};

typedef struct {
    int count;            /* instances */
    int device;           /* -1: CPU, else the CUDA device of these instances */
    int n_threads;        /* CPU instances: BLAS threads each (0: leave the setting) */
} served_group_t;

typedef struct {
    batcher_opts_t batching;
    served_group_t groups[8];
    int n_groups;
    wenet_precision_t precision; /* GPU instances */
    double max_seconds;          /* longest request accepted (worker buffers are sized for it) */
    int version;                 /* model version directory to load; 0 means 1 */
    /* Optional, called on the instance thread around the `done` callbacks of one batch of n
     * requests (the HTTP layer wakes its loops once per batch: http_hold_wakeups). */
    void (*completions_begin)(int n);
    void (*completions_end)(int n);
} served_opts_t;

/* Cumulative counters (atomic snapshot under the model's lock). */
typedef struct {
    uint64_t success, failure, inference_count, execution_count;
    uint64_t queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns, request_ns;
    uint64_t last_inference_ms; /* wall clock of the last completion, ms since the epoch */
    double audio_seconds, compute_seconds, padded_samples, total_samples;
    uint64_t batch_hist[10]; /* batch sizes: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, 129-256, >256 */
    uint64_t pending;
} served_stats_t;

typedef struct served_model served_model_t;

/* Loads the WeNet model directory once per device used and starts the instances. */
int served_model_create(const char *model_dir, const served_opts_t *opts, served_model_t **out,
                        hark_err_t *err);
void served_model_destroy(served_model_t *m); /* accepts NULL */
const wenet_asr_t *served_model_asr(const served_model_t *m);
/* Queues a request: HARK_ERR_AGAIN when the queue is full, HARK_ERR_CLOSED when unloading,
 * HARK_ERR_TOO_LARGE for audio longer than max_seconds. On error `done` is not called. */
int served_model_submit(served_model_t *m, served_request_t *req, hark_err_t *err);
void served_model_stats(served_model_t *m, served_stats_t *out);
/* 1 while every instance is healthy (a sticky CUDA error marks the model not ready). */
int served_model_ready(const served_model_t *m);

#endif
