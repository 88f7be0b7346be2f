/* server.h — `hark serve`: a Triton-style model repository served over KServe v2 HTTP and the
 * OpenAI transcription API, with Prometheus metrics on their own port. The event loop (libuv)
 * parses and routes; inference runs on the model instances' threads, which answer the requests.
 * Tests: tests/server/test_server.py (a real server on loopback, driven with requests and curl)
 *
 * Ownership: the server owns its models, listeners and loops; server_run blocks until a
 * SIGTERM/SIGINT (or server_stop) has drained the in-flight requests.
 * Threads: server_run's thread runs the first HTTP loop (signals, metrics); http_threads - 1
 * more loops run on threads of their own; the model table is shared under a read-write lock.
 */
#ifndef HARK_SERVER_SERVER_H
#define HARK_SERVER_SERVER_H

#include "core/error.h"

#include <stddef.h>

/* Triton's --model-control-mode */
typedef enum { MODEL_CONTROL_NONE = 0, MODEL_CONTROL_EXPLICIT, MODEL_CONTROL_POLL } model_control_t;

/* a repeatable option's values (they point into argv or the config file's lines) */
#define SERVER_LIST_MAX 32
typedef struct {
    const char *v[SERVER_LIST_MAX];
    int n;
} server_list_t;

typedef struct {
    const char *model_repository; /* required */
    const char *host;             /* default 127.0.0.1 */
    int http_port;                /* default 8000; 0: ephemeral (printed on stdout) */
    int metrics_port;             /* default 8002; -1: off; 0: ephemeral */
    int grpc_port;            /* KServe v2 gRPC; default 8001 (cmd_serve); -1: off; 0: ephemeral */
    size_t max_body_bytes;    /* 413 beyond; default 64 MiB */
    int max_connections;      /* default 1024 */
    int request_timeout_ms;   /* stalled client: 408; default 30000 */
    int drain_timeout_ms;     /* graceful shutdown deadline; default 30000 */
    double max_audio_seconds; /* longest request; default 14400 (4 h) */
    double max_pass_seconds;  /* longest audio recognised in one pass (worker buffers are sized
                                 for it); longer requests are cut (VAD or windows); default 60 */
    int cpu_threads;          /* BLAS threads per CPU instance; default 1 */
    int length_aware;         /* length-aware batching; default 1 */
    int max_queue_size;       /* a model's queue, in requests, when its config sets no
                                 max_queue_size (0: unbounded); default 1024: beyond it 503 */
    int strict_model_config;  /* unknown model configs: refuse to start; default 0 */
    int strict_readiness; /* ready only when no model is loading or failed (Triton's); cmd_serve: 1
                           */
    int exit_on_error;    /* a model that fails to load at start-up stops the server with status 1
                             (Triton's --exit-on-error); cmd_serve: 1 */
    int http_threads;     /* event loops serving the HTTP port (SO_REUSEPORT when > 1);
                             0: one per 4 cores, at most 4 */
    int model_control;    /* model_control_t: none (default) loads everything at start and
                             refuses the load/unload API; explicit loads load_models only and
                             allows the API; poll rescans the repository */
    int repository_poll_secs;  /* poll: seconds between scans; cmd_serve: 15 */
    server_list_t load_models; /* explicit: the models loaded at start ("*": all) */
    /* Triton's restricted API groups, "api[,api...]:key=value" each: a request to one of those
     * APIs must carry header key (gRPC: metadata triton-grpc-protocol-key) = value */
    server_list_t http_restricted_api;
    server_list_t grpc_restricted_api;
} server_opts_t;

typedef struct server server_t;

int server_create(const server_opts_t *opts, server_t **out, hark_err_t *err);
/* Serves until SIGTERM/SIGINT or server_stop, then drains and returns 0. */
int server_run(server_t *s);
void server_stop(server_t *s); /* any thread */
void server_destroy(server_t *s);

/* For the API handlers (src/api): the model repository, the drain and startup states, options. */
struct repository;
struct repository *server_repository(server_t *s);
int server_draining(const server_t *s);
int server_loading(const server_t *s);
const server_opts_t *server_options(const server_t *s);
/* The page-locked pool request bodies are received into (a GPU is present), or NULL. */
struct pinned_pool;
struct pinned_pool *server_body_pool(server_t *s);
/* Triton's protocol extensions' state: shared memory regions, trace settings (api/service.h). */
struct service_ext;
struct service_ext *server_ext(server_t *s);
/* The access rules of the API port's transports (server/access.h). */
struct access;
const struct access *server_access(const server_t *s);

#endif
