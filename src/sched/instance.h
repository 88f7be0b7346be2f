/* instance.h — a served model of any family: the family's loaded model(s) (one per device used),
 * its dynamic batcher and its model instances (one worker thread each, on a GPU or the CPU, each
 * with a family worker whose scratch is sized at start), plus the counters Triton's statistics
 * and Prometheus metrics report. It knows items and batch keys, never what a family computes.
 * Transport-independent: callers submit requests and get a completion callback on a worker
 * thread. Tests: tests/sched/test_instance.c (a test family), tests/server/test_server.py
 *
 * Ownership: a request is the caller's until its `done` callback runs (on a worker thread, or in
 * served_model_destroy for requests never run); the callback is handed the result (it takes what
 * it keeps with asr_result_take; the instance frees the rest after the callback) and it may free
 * the request. served_model_destroy closes the batcher, lets the workers finish what is queued
 * and joins them.
 */
#ifndef HARK_SCHED_INSTANCE_H
#define HARK_SCHED_INSTANCE_H

#include "core/error.h"
#include "model/family.h"
#include "sched/batcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct served_request served_request_t;
typedef struct served_seq served_seq_t;

/* Durations of one request, in nanoseconds (Triton's statistics: queue, compute input (padding +
 * features), compute infer (encoder + search), compute output (results)). */
typedef struct {
    uint64_t queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns;
    int batch_size; /* the batch this request ran in */
    double padding; /* fraction of padded samples in that batch */
} served_timing_t;

/* result: the item's final ASR result (NULL on error or for other tasks); timing NULL for
 * requests that never ran (expired, cancelled, unloaded). */
typedef void (*served_done_fn)(served_request_t *req, int status, const char *error,
                               asr_result_t *result, const served_timing_t *timing);

struct served_request {
    batcher_item_t item; /* first: the batcher's link (priority, deadline_ns set by the caller) */
    /* set by the caller: fi.opts (served_model_parse_opts's output, kept alive until done),
     * fi.pcm / fi.n or fi.text, fi.want_words; fi.emit and fi.user belong to the instance */
    family_item_t fi;
    const atomic_int *cancelled; /* optional: non-zero drops the request before it runs */
    /* optional: time the caller spent on this item's input before queueing it (decoding the
     * audio file, converting or checking the tensor); counted in compute_input with the family's
     * own input time (Triton's compute_input: the input tensors made ready for the model) */
    uint64_t input_ns;
    served_done_fn done;
    void *user;
    /* optional (asr sequences): each segment an endpoint ended while this chunk ran, with its
     * final result (lent: asr_result_take keeps it) and its span in seconds of the stream; called
     * in order on the worker thread just before done, never for a request that failed */
    void (*segment)(served_request_t *req, asr_result_t *result, double start_s, double end_s);
    /* optional (tts): each chunk of audio as the family produces it (pcm lent for the call),
     * called on the worker thread during the execute, in order, before done; without it the
     * audio is dropped */
    void (*audio)(served_request_t *req, const float *pcm, size_t n, int sample_rate);
    /* optional (vad): each speech segment of the item's audio, seconds, in order, on the worker
     * thread during the execute; without it segments are dropped */
    void (*speech)(served_request_t *req, double start_s, double end_s);
    /* private to the instance */
    uint64_t key_;
    int status_;
    char error_[256];
    asr_result_t result_;
    struct served_seg *segs_; /* (n_segs_) SEGMENT events kept for `segment` */
    int n_segs_;
    served_seq_t *seq_;          /* a chunk of this sequence (served_model_submit_seq) */
    int seq_flags_;              /* SEQ_START / SEQ_END / SEQ_CLOSE (instance.c) */
    served_request_t *seq_next_; /* the sequence's queue of chunks */
};

typedef struct {
    int count;     /* instances */
    int device;    /* -1: CPU, else the CUDA device of these instances */
    int n_threads; /* CPU instances: BLAS threads each (0: leave the setting) */
} served_group_t;

/* sequence_batching: every request is a chunk of a sequence (a stream of the family), bound at
 * its START to the instance with the most free slots and kept there; one chunk of a sequence is
 * queued or running at a time (later ones wait in order), so chunks of different sequences batch
 * together in one execute. */
typedef struct {
    int enabled;
    int max_sequences; /* per instance (family_worker_opts_t.max_sequences), >= 1 */
    uint64_t idle_us;  /* a sequence with no request for this long is ended; 0: never */
    int preferred[8];  /* the per-instance batcher's preferred sizes (ascending) */
    int n_preferred;
    uint64_t max_queue_delay_us;
} served_seq_opts_t;

typedef struct {
    const family_t *family; /* required */
    family_params_t cfg;    /* config.pbtxt parameters (copied by served_model_create) */
    batcher_opts_t batching;
    served_group_t groups[8];
    int n_groups;
    const char *precision;       /* GPU instances: "fp16", "bf16" (NULL: fp32) */
    double max_seconds;          /* longest request accepted (worker buffers are sized for it) */
    uint64_t default_timeout_us; /* a request with no deadline of its own waits at most this
                                    long in the queue (0: no limit; Triton's
                                    default_queue_policy.default_timeout_microseconds) */
    int version;                 /* model version directory to load; 0 means 1 */
    served_seq_opts_t seq;
    /* Optional, called on the instance thread around the `done` callbacks of one batch of n
     * requests (a transport wakes its loops once per batch). */
    void (*completions_begin)(int n);
    void (*completions_end)(int n);
} served_opts_t;

/* One batch size's executions (Triton's batch_stats): how many, and their compute times. */
typedef struct {
    int batch_size;
    uint64_t count, input_ns, infer_ns, output_ns;
} served_batch_stat_t;
#define SERVED_BATCH_STATS 64 /* distinct batch sizes kept; executions of others are not listed */

/* Cumulative counters (atomic snapshot under the model's lock). */
typedef struct {
    uint64_t success, failure, inference_count, execution_count;
    uint64_t queue_ns, compute_input_ns, compute_infer_ns, compute_output_ns, request_ns;
    uint64_t last_inference_ms; /* wall clock of the last completion, ms since the epoch */
    double audio_seconds, compute_seconds, padded_samples, total_samples;
    uint64_t
        batch_hist[10]; /* batch sizes: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65-128, 129-256, >256 */
    uint64_t pending;   /* requests queued now: what max_queue_size bounds (Triton's count) */
    uint64_t pending_items; /* their items still queued */
    int n_batch_stats;      /* in the order the sizes first ran */
    served_batch_stat_t batch_stats[SERVED_BATCH_STATS];
} served_stats_t;

typedef struct served_model served_model_t;

/* Loads the model directory once per device used (through opts->family) and starts the
 * instances. */
int served_model_create(const char *model_dir, const served_opts_t *opts, served_model_t **out,
                        hark_err_t *err);
void served_model_destroy(served_model_t *m); /* accepts NULL */
/* No batch waits for a fuller one any more (batcher_hurry on each of its queues): the drain. */
void served_model_hurry(served_model_t *m);
const family_t *served_model_family(const served_model_t *m);
/* The first loaded model's description. */
void served_model_info(const served_model_t *m, family_info_t *out);
/* A request's options: the config's parameters, then req's, through the family (loop thread).
 * opts must hold served_model_family(m)->opts_size bytes. */
int served_model_parse_opts(const served_model_t *m, const family_params_t *req, void *opts,
                            hark_err_t *err);
/* Queues the n items of one client request (its batch), all or none: HARK_ERR_AGAIN when
 * max_queue_size requests are queued (the request counts once, until its last item has left the
 * queue), HARK_ERR_CLOSED when unloading, HARK_ERR_TOO_LARGE for an item's audio longer than
 * max_seconds. An item with no deadline_ns gets the request's default timeout (one deadline for
 * all); once an item expires the request's items still queued expire with it. Each queued item
 * gets its own `done`; on error none was queued and no `done` is called. Once it returns
 * HARK_OK the requests may already be complete (and freed). */
int served_model_submit_many(served_model_t *m, served_request_t *const *reqs, int n,
                             hark_err_t *err);
/* A request of one item. */
int served_model_submit(served_model_t *m, served_request_t *req, hark_err_t *err);
/* A sequence's controls, from the request's parameters. */
typedef struct {
    uint64_t id;        /* sequence_id as a number (when id_str is NULL); 0 is no id */
    const char *id_str; /* sequence_id as a string, or NULL */
    int start, end;     /* sequence_start / sequence_end */
    uint64_t owner;     /* the transport's client (a gRPC stream), 0: none (see abandon) */
} served_seq_ctl_t;

/* 1 when the model serves sequences (then every request goes through served_model_submit_seq). */
int served_model_sequential(const served_model_t *m);
/* Queues one chunk of a sequence (req->fi as for served_model_submit; fi.stream is the
 * instance's). START opens the sequence (a START for an active id ends that one first);
 * HARK_ERR_EXHAUSTED when every instance's slots are taken; HARK_ERR_INVALID_ARG for a chunk of
 * no active sequence (never started, ended, idle past idle_us or abandoned). The chunk's done
 * gets the partial result (the final one with END). On error `done` is not called. Loop thread;
 * never blocks. */
int served_model_submit_seq(served_model_t *m, served_request_t *req, const served_seq_ctl_t *c,
                            hark_err_t *err);
/* Ends every sequence started by `owner` (its client went away): chunks still waiting fail with
 * HARK_ERR_CANCELLED, the slots are freed once the chunk in flight (if any) completes. */
void served_model_abandon(served_model_t *m, uint64_t owner);
/* Sequences open now (all instances). */
int served_model_sequences(served_model_t *m);
void served_model_stats(served_model_t *m, served_stats_t *out);
/* A request refused before it was queued (invalid input, a full queue): one more failure, as
 * Triton counts them. */
void served_model_count_failure(served_model_t *m);
/* 1 while every instance is healthy (a sticky CUDA error marks the model not ready). */
int served_model_ready(const served_model_t *m);

#endif
