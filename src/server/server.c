/* server.c — `hark serve`: the process around the APIs — event loops serving the API port,
 * the metrics port, the model repository loaded at start, readiness, signals and graceful
 * drain. Routing and the APIs live in src/api (http_api.h, service.h), models in
 * server/repository.h. Tests: tests/server/test_server.py (through the hark binary) */
#include "server/server.h"

#include "api/http_api.h"
#include "api/kserve_grpc.h"
#include "api/service.h"
#include "core/alloc.h"
#include "core/log.h"
#include "gpu/gpu.h"
#include "gpu/pinned.h"
#include "hark.h"
#include "net/http_server.h"
#include "net/listen.h"
#include "net/websocket.h"
#include "server/access.h"
#include "server/repository.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define MAX_HTTP_LOOPS 64

/* One event loop serving the API port: the first runs on the server's own loop (with the
 * signals and the metrics port), the others each on a thread of their own, all listening on the
 * same port (SO_REUSEPORT: the kernel spreads connections over them). */
typedef struct {
    server_t *s;
    uv_loop_t *loop; /* &s->loop, or &own */
    uv_loop_t own;
    int own_init;
    http_server_t *api;
    kserve_grpc_t *grpc; /* KServe v2 over gRPC on this loop (SO_REUSEPORT); NULL: off */
    ws_hub_t *ws;        /* WebSocket connections upgraded on this loop */
    http_api_ctx_t ctx;  /* the handlers' view of this loop */
    pthread_t th;
    int started;
} http_loop_t;

/* page-locked bytes for request bodies when the machine has a GPU (beyond: heap bodies) */
#define PINNED_BODY_BYTES ((size_t)512 << 20)

struct server {
    server_opts_t o;
    int exit_status;       /* server_run's: 1 when --exit-on-error stopped it */
    pinned_pool_t *bodies; /* request bodies, page-locked (a GPU is present), or NULL */
    uv_loop_t loop;
    int loop_init;
    uv_signal_t sigint, sigterm;
    uv_async_t stop_async;
    http_loop_t hl[MAX_HTTP_LOOPS];
    int n_loops;
    http_server_t *metrics;
    repository_t *repo;
    access_t access;         /* restricted API groups of each transport */
    service_ext_t *ext;      /* shared memory regions, trace settings */
    pthread_mutex_t poll_mu; /* the poll's sleep, cut short by a drain */
    pthread_cond_t poll_cv;
    int poll_sync; /* poll_mu and poll_cv initialised */
    atomic_int draining;
    atomic_int loading; /* startup loads not finished */
};

struct repository *server_repository(server_t *s)
{
    return s->repo;
}

int server_draining(const server_t *s)
{
    return atomic_load(&s->draining);
}

int server_loading(const server_t *s)
{
    return atomic_load(&s->loading);
}

const server_opts_t *server_options(const server_t *s)
{
    return &s->o;
}

struct service_ext *server_ext(server_t *s)
{
    return s->ext;
}

const struct access *server_access(const server_t *s)
{
    return &s->access;
}

struct pinned_pool *server_body_pool(server_t *s)
{
    return s->bodies;
}

/* Around an instance's completions of a batch: the loops are woken once per batch, and every
 * answer is written by its connection's loop (inference threads never write a connection). */
static void completions_begin(int n)
{
    http_hold_wakeups();
}

static void completions_end(int n)
{
    http_release_wakeups();
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static void begin_drain(server_t *s)
{
    if (s->draining)
        return;
    s->draining = 1;
    pthread_mutex_lock(&s->poll_mu); /* the poll stops */
    pthread_cond_broadcast(&s->poll_cv);
    pthread_mutex_unlock(&s->poll_mu);
    LOG_INFO("draining: no new connections, finishing in-flight requests (deadline %d ms)",
             s->o.drain_timeout_ms);
    repository_hurry(s->repo); /* queued requests no longer wait for fuller batches */
    for (int i = 0; i < s->n_loops; i++) {
        if (s->hl[i].api)
            http_server_shutdown(s->hl[i].api, (unsigned)s->o.drain_timeout_ms);
        kserve_grpc_shutdown(s->hl[i].grpc, (unsigned)s->o.drain_timeout_ms);
        ws_hub_shutdown(s->hl[i].ws);
    }
    if (s->metrics)
        http_server_shutdown(s->metrics, (unsigned)s->o.drain_timeout_ms);
    uv_close((uv_handle_t *)&s->sigint, NULL);
    uv_close((uv_handle_t *)&s->sigterm, NULL);
    uv_close((uv_handle_t *)&s->stop_async, NULL);
}

static void on_signal(uv_signal_t *h, int sig)
{
    LOG_INFO("signal %d", sig);
    begin_drain(h->data);
}

static void on_stop(uv_async_t *h)
{
    begin_drain(h->data);
}

void server_stop(server_t *s)
{
    uv_async_send(&s->stop_async);
}

/* explicit: the --load-model models ("*": all); a name that cannot be loaded counts as a failed
 * load (its reason logged); returns how many failed that way */
static int load_named(server_t *s, char *name, size_t nname, char *why, size_t nwhy)
{
    int failed = 0;
    for (int i = 0; i < s->o.load_models.n; i++) {
        const char *m = s->o.load_models.v[i];
        if (!strcmp(m, "*")) {
            repository_load_all(s->repo);
            continue;
        }
        hark_err_t err = {0};
        if (repository_load(s->repo, m, &err) && err.status == HARK_ERR_NOT_FOUND) {
            LOG_ERROR("--load-model %s: %s", m, err.msg); /* (a failed load logs itself) */
            if (failed++ == 0) {
                snprintf(name, nname, "%s", m);
                snprintf(why, nwhy, "%s", err.msg);
            }
        }
    }
    return failed;
}

/* poll: rescans every repository_poll_secs until the drain */
static void poll_repository(server_t *s)
{
    LOG_INFO("polling the model repository every %d s", s->o.repository_poll_secs);
    pthread_mutex_lock(&s->poll_mu);
    while (!atomic_load(&s->draining)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += s->o.repository_poll_secs;
        while (!atomic_load(&s->draining) &&
               pthread_cond_timedwait(&s->poll_cv, &s->poll_mu, &until) == 0)
            ;
        if (atomic_load(&s->draining))
            break;
        pthread_mutex_unlock(&s->poll_mu);
        repository_poll(s->repo);
        pthread_mutex_lock(&s->poll_mu);
    }
    pthread_mutex_unlock(&s->poll_mu);
}

static void *startup_loads(void *p)
{
    server_t *s = p;
    char name[128], why[512];
    int missing = 0;
    if (s->o.model_control == MODEL_CONTROL_EXPLICIT)
        missing = load_named(s, name, sizeof name, why, sizeof why);
    else
        repository_load_all(s->repo);
    s->loading = 0;
    repository_rdlock(s->repo);
    int n = repository_count(s->repo);
    repository_unlock(s->repo);
    LOG_INFO("startup: %d model(s) in the repository processed", n);
    if (!n)
        LOG_WARN("the repository %s holds no model (a model is a folder with config.pbtxt and a "
                 "version folder: was an entry given instead of its repository?)",
                 s->o.model_repository);
    int failed = missing;
    if (!missing)
        failed = repository_failed(s->repo, name, sizeof name, why, sizeof why);
    if (failed && s->o.exit_on_error) {
        LOG_ERROR("startup: %d model(s) failed to load (%s: %s); stopping (--exit-on-error "
                  "false serves the others)",
                  failed, name, why);
        s->exit_status = 1;
        server_stop(s);
        return NULL;
    }
    if (s->o.model_control == MODEL_CONTROL_POLL)
        poll_repository(s);
    return NULL;
}

static int default_http_threads(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > 0 ? (int)(cores / 4) : 1;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

static void *http_loop_main(void *p)
{
    http_loop_t *l = p;
    char name[16]; /* "http<N>"; the first loop is the main thread */
    snprintf(name, sizeof name, "http%d", (int)(l - l->s->hl));
    pthread_setname_np(pthread_self(), name);
    uv_run(l->loop, UV_RUN_DEFAULT); /* until its server has shut down */
    return NULL;
}

/* A listener that could not start, named by what it serves and the flag that sets its port
 * ("metrics port 8002 (--metrics-port): bind 127.0.0.1 port 8002: Address already in use"), not
 * by the HTTP layer it runs on. */
static void port_error(hark_err_t *err, int rc, const char *what, const char *flag, int port)
{
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    const char *w = strncmp(why, "http: ", 6) ? why : why + 6;
    err_set(err, rc, "%s port %d (%s): %s", what, port, flag, w);
}

int server_create(const server_opts_t *o, server_t **out, hark_err_t *err)
{
    *out = NULL;
    server_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    s->o = *o;
    if (!s->o.host)
        s->o.host = "127.0.0.1";
    if (!s->o.max_body_bytes)
        s->o.max_body_bytes = 64u << 20;
    if (!s->o.drain_timeout_ms)
        s->o.drain_timeout_ms = 30000;
    if (!(s->o.max_audio_seconds > 0))
        s->o.max_audio_seconds = 14400;
    if (!(s->o.max_pass_seconds > 0))
        s->o.max_pass_seconds = 60;
    if (s->o.http_threads <= 0) /* a loop per 4 cores, at most 4 */
        s->o.http_threads = default_http_threads();
    if (s->o.http_threads > MAX_HTTP_LOOPS)
        s->o.http_threads = MAX_HTTP_LOOPS;
    if (s->o.max_connections <= 0)
        s->o.max_connections = 1024;
    if (s->o.repository_poll_secs <= 0)
        s->o.repository_poll_secs = 15;
    pthread_mutex_init(&s->poll_mu, NULL);
    pthread_cond_init(&s->poll_cv, NULL);
    s->poll_sync = 1;
    if (!(s->ext = service_ext_create())) {
        server_destroy(s);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    int rc = HARK_OK;
    for (int i = 0; !rc && i < s->o.http_restricted_api.n; i++)
        rc = access_add(&s->access, ACCESS_HTTP, s->o.http_restricted_api.v[i], err);
    for (int i = 0; !rc && i < s->o.grpc_restricted_api.n; i++)
        rc = access_add(&s->access, ACCESS_GRPC, s->o.grpc_restricted_api.v[i], err);
    if (!rc && s->o.load_models.n && s->o.model_control != MODEL_CONTROL_EXPLICIT)
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "--load-model requires --model-control-mode explicit (as Triton's)");
    for (int i = 0; !rc && i < s->o.load_models.n; i++)
        if (!strcmp(s->o.load_models.v[i], "*") && s->o.load_models.n > 1)
            rc = err_set(err, HARK_ERR_INVALID_ARG,
                         "--load-model '*' loads every model: give it alone (as Triton)");
    if (rc)
        goto fail;
    repository_opts_t ro = {.dir = s->o.model_repository,
                            .max_seconds = s->o.max_pass_seconds,
                            .cpu_threads = s->o.cpu_threads,
                            .length_aware = s->o.length_aware,
                            .max_queue_size = s->o.max_queue_size,
                            .completions_begin = completions_begin,
                            .completions_end = completions_end};
    rc = repository_create(&ro, &s->repo, err);
    if (rc)
        goto fail;
    uv_loop_init(&s->loop);
    uv_signal_init(&s->loop, &s->sigint);
    uv_signal_init(&s->loop, &s->sigterm);
    s->sigint.data = s->sigterm.data = s;
    uv_async_init(&s->loop, &s->stop_async, on_stop);
    s->stop_async.data = s;
    s->loop_init = 1;
    /* with a GPU, bodies are received into page-locked memory: an instance then copies a batch
     * of binary WAV tensors to the device straight from the bodies (no staging memcpy) */
    if (gpu_device_count() > 0 && !(s->bodies = pinned_pool_create(PINNED_BODY_BYTES))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* the API port on n loops: each takes its share of the connection limit */
    int n = s->o.http_threads, port = s->o.http_port;
    for (int i = 0; i < n; i++) {
        http_loop_t *l = &s->hl[i];
        l->s = s;
        l->loop = &s->loop;
        if (i > 0) {
            uv_loop_init(&l->own);
            l->own_init = 1;
            l->loop = &l->own;
        }
        s->n_loops = i + 1;
        if ((rc = ws_hub_create(l->loop, &l->ws, err)))
            goto fail;
        l->ctx = (http_api_ctx_t){.s = s, .loop = l->loop, .ws = l->ws};
        http_server_opts_t ho = {.host = s->o.host,
                                 .port = port,
                                 .handler = http_api_handler,
                                 .user = &l->ctx,
                                 .body_align = http_api_body_align,
                                 .body_alloc = s->bodies ? pinned_body_alloc : NULL,
                                 .body_free = s->bodies ? pinned_body_free : NULL,
                                 .body_user = s->bodies,
                                 .max_body = s->o.max_body_bytes,
                                 .max_connections = (unsigned)((s->o.max_connections + n - 1) / n),
                                 .request_timeout_ms = (unsigned)s->o.request_timeout_ms,
                                 .reuse_port = n == 1   ? HTTP_REUSE_NONE
                                               : i == 0 ? HTTP_REUSE_FIRST
                                                        : HTTP_REUSE_JOIN};
        if ((rc = http_server_create(l->loop, &ho, &l->api, err))) {
            port_error(err, rc, "HTTP API", "--http-port", s->o.http_port);
            goto fail;
        }
        port = http_server_port(l->api); /* the others join the port the first one got */
    }
    if (s->o.metrics_port >= 0) {
        http_server_opts_t mo = {.host = s->o.host,
                                 .port = s->o.metrics_port,
                                 .handler = http_metrics_handler,
                                 .user = s};
        if ((rc = http_server_create(&s->loop, &mo, &s->metrics, err))) {
            port_error(err, rc, "metrics", "--metrics-port", s->o.metrics_port);
            goto fail;
        }
    }
    /* gRPC on the same loops, one port shared with SO_REUSEPORT like the HTTP port */
    for (int i = 0, gport = s->o.grpc_port; s->o.grpc_port >= 0 && i < n; i++) {
        kserve_grpc_opts_t go = {.host = s->o.host,
                                 .port = gport,
                                 .max_message = s->o.max_body_bytes,
                                 .max_connections = (unsigned)((s->o.max_connections + n - 1) / n),
                                 .reuse_port = n == 1   ? NET_REUSE_NONE
                                               : i == 0 ? NET_REUSE_FIRST
                                                        : NET_REUSE_JOIN};
        if ((rc = kserve_grpc_create(s->hl[i].loop, s, &go, &s->hl[i].grpc, err)))
            goto fail;
        gport = kserve_grpc_port(s->hl[i].grpc);
    }
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    *out = s;
    return HARK_OK;
fail:
    server_destroy(s);
    return rc;
}

int server_run(server_t *s)
{
    signal(SIGPIPE, SIG_IGN); /* for embedders too: a client's reset is an EPIPE, not a kill */
    printf("hark serving %s: http://%s:%d (KServe v2, OpenAI /v1/audio/transcriptions and "
           "/v1/audio/speech)",
           s->o.model_repository, s->o.host, http_server_port(s->hl[0].api));
    if (s->hl[0].grpc)
        printf(", gRPC grpc://%s:%d", s->o.host, kserve_grpc_port(s->hl[0].grpc));
    if (s->metrics)
        printf(", metrics http://%s:%d/metrics", s->o.host, http_server_port(s->metrics));
    printf("\n");
    fflush(stdout);
    s->loading = 1;
    pthread_t th;
    int loader = pthread_create(&th, NULL, startup_loads, s) == 0;
    if (!loader)
        s->loading = 0;
    LOG_INFO("HTTP: %d event loop%s on port %d", s->n_loops, s->n_loops > 1 ? "s" : "",
             http_server_port(s->hl[0].api));
    for (int i = 1; i < s->n_loops; i++)
        if (pthread_create(&s->hl[i].th, NULL, http_loop_main, &s->hl[i]) == 0)
            s->hl[i].started = 1;
        else { /* its share of the connections goes to the others */
            http_server_shutdown(s->hl[i].api, 0);
            kserve_grpc_shutdown(s->hl[i].grpc, 0);
        }
    uv_run(&s->loop, UV_RUN_DEFAULT);
    for (int i = 1; i < s->n_loops; i++) /* their servers drain with the first one's */
        if (s->hl[i].started) {
            pthread_join(s->hl[i].th, NULL);
            s->hl[i].started = 0;
        }
    if (loader)
        pthread_join(th, NULL);
    repository_unload_all(s->repo);
    LOG_INFO("stopped");
    return s->exit_status;
}

void server_destroy(server_t *s)
{
    if (!s)
        return;
    if (s->loop_init) {
        if (!s->draining) { /* created but never run: close the handles */
            s->draining = 1;
            for (int i = 0; i < s->n_loops; i++) {
                if (s->hl[i].api)
                    http_server_shutdown(s->hl[i].api, 0);
                kserve_grpc_shutdown(s->hl[i].grpc, 0);
                ws_hub_shutdown(s->hl[i].ws);
            }
            if (s->metrics)
                http_server_shutdown(s->metrics, 0);
            uv_close((uv_handle_t *)&s->sigint, NULL);
            uv_close((uv_handle_t *)&s->sigterm, NULL);
            uv_close((uv_handle_t *)&s->stop_async, NULL);
        }
        uv_run(&s->loop, UV_RUN_DEFAULT);
        for (int i = 0; i < s->n_loops; i++) {
            http_loop_t *l = &s->hl[i];
            if (l->own_init) /* a loop whose thread never ran closes its handles here */
                uv_run(&l->own, UV_RUN_DEFAULT);
            http_server_destroy(l->api);
            kserve_grpc_destroy(l->grpc);
            ws_hub_destroy(l->ws);
            if (l->own_init)
                uv_loop_close(&l->own);
        }
        http_server_destroy(s->metrics);
        uv_loop_close(&s->loop);
    }
    repository_destroy(s->repo);
    service_ext_destroy(s->ext); /* the regions still registered are closed */
    pinned_pool_destroy(s->bodies);
    if (s->poll_sync) {
        pthread_cond_destroy(&s->poll_cv);
        pthread_mutex_destroy(&s->poll_mu);
    }
    hark_free(s);
}
