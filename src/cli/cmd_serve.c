/* cmd_serve.c — `hark serve`: options come from one table that drives the flags, the config file
 * (`--config FILE`, lines `name = value`, `#` comments; flags win) and --help.
 * Tests: tests/server/test_server.py */
#include "cli/cli.h"
#include "core/log.h"
#include "hark.h"
#include "server/server.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum {
    OPT_STR,
    OPT_INT,
    OPT_DOUBLE,
    OPT_SIZE,
    OPT_BOOL,
    OPT_LOGLEVEL,
    OPT_CHOICE, /* one of the option's choices ("a|b|c"), stored as its index (int) */
    OPT_LIST    /* repeatable: each value is appended to a server_list_t */
} opt_type_t;

typedef struct {
    const char *name;
    opt_type_t type;
    size_t offset; /* into server_opts_t (unused for log-level) */
    const char *def;
    double min, max;
    const char *help;
} opt_t;

/* the words of each OPT_CHOICE option, '|'-separated; the value stored is the word's index */
static const struct {
    const char *option, *words;
} choices[] = {{"model-control-mode", "none|explicit|poll"}};

static const char *choices_of(const char *option)
{
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (!strcmp(choices[i].option, option))
            return choices[i].words;
    return "";
}

#define OFF(f) offsetof(server_opts_t, f)
static const opt_t options[] = {
    {"model-repository", OPT_STR, OFF(model_repository), NULL, 0, 0,
     "directory of models, Triton's layout: <model>/config.pbtxt, <model>/<version>/"},
    {"host", OPT_STR, OFF(host), "127.0.0.1", 0, 0,
     "address to listen on; the default answers this machine only: --host 0.0.0.0 listens on "
     "every interface (in a container, to publish the ports)"},
    {"http-port", OPT_INT, OFF(http_port), "8000", 0, 65535,
     "KServe v2 + OpenAI HTTP port (0: any)"},
    {"grpc-port", OPT_INT, OFF(grpc_port), "8001", -1, 65535,
     "KServe v2 gRPC port (inference.GRPCInferenceService; -1: off, 0: any)"},
    {"metrics-port", OPT_INT, OFF(metrics_port), "8002", -1, 65535,
     "Prometheus metrics port (-1: off, 0: any)"},
    {"max-body-bytes", OPT_SIZE, OFF(max_body_bytes), "67108864", 1024, 4e9,
     "largest request body; bigger ones get 413"},
    {"max-connections", OPT_INT, OFF(max_connections), "1024", 1, 1e6,
     "simultaneous connections; beyond it the oldest idle one is closed, or 503 when none is "
     "idle"},
    {"http-threads", OPT_INT, OFF(http_threads), "0", 0, 64,
     "event-loop threads sharing the HTTP port (0: one per 4 cores, at most 4)"},
    {"request-timeout-ms", OPT_INT, OFF(request_timeout_ms), "30000", 10, 3.6e6,
     "a client stalled mid-request this long gets 408"},
    {"drain-timeout-ms", OPT_INT, OFF(drain_timeout_ms), "30000", 0, 3.6e6,
     "on SIGTERM/SIGINT, time given to in-flight requests"},
    {"max-audio-seconds", OPT_DOUBLE, OFF(max_audio_seconds), "14400", 1, 86400,
     "longest audio a request may carry (413 beyond; longer than --max-pass-seconds is cut by "
     "the model's vad_model, or into windows)"},
    {"max-pass-seconds", OPT_DOUBLE, OFF(max_pass_seconds), "60", 1, 3600,
     "longest audio recognised in one pass (model buffers are sized for it)"},
    {"cpu-threads", OPT_INT, OFF(cpu_threads), "1", 0, 256, "BLAS threads per CPU model instance"},
    {"max-queue-size", OPT_INT, OFF(max_queue_size), "1024", 0, 1e7,
     "requests (of any batch size: one place each) a model queues when its config sets no "
     "max_queue_size (0: unbounded); beyond it 503 with Retry-After"},
    {"strict-readiness", OPT_BOOL, OFF(strict_readiness), "true", 0, 1,
     "ready only when no model is loading or failed to load (false: when the ready ones are)"},
    {"exit-on-error", OPT_BOOL, OFF(exit_on_error), "true", 0, 1,
     "a model that fails to load at start-up stops the server (status 1)"},
    {"length-aware-batching", OPT_BOOL, OFF(length_aware), "true", 0, 1,
     "batch requests of similar audio length together"},
    {"model-control-mode", OPT_CHOICE, OFF(model_control), "none", 0, 0,
     "none: every model is loaded at start-up and the repository load/unload API is refused; "
     "explicit: only the --load-model models are loaded at start-up, and the API loads and "
     "unloads; poll: every model is loaded at start-up, the repository is rescanned every "
     "--repository-poll-secs (new and changed models loaded, removed ones unloaded) and the API "
     "is refused (Triton's)"},
    {"repository-poll-secs", OPT_INT, OFF(repository_poll_secs), "15", 1, 86400,
     "poll: seconds between scans of the repository"},
    {"load-model", OPT_LIST, OFF(load_models), NULL, 0, 0,
     "explicit: a model loaded at start-up (repeatable; '*' alone: every model)"},
    {"http-restricted-api", OPT_LIST, OFF(http_restricted_api), NULL, 0, 0,
     "API[,API...]:KEY=VALUE: those HTTP APIs answer 403 unless the request has header KEY: "
     "VALUE (repeatable; an API in one group only). APIs: health, metadata, inference, "
     "model-config, model-repository, statistics, shared-memory, trace, logging"},
    {"grpc-restricted-protocol", OPT_LIST, OFF(grpc_restricted_api), NULL, 0, 0,
     "API[,API...]:KEY=VALUE: those gRPC APIs answer UNAVAILABLE unless the call has metadata "
     "triton-grpc-protocol-KEY: VALUE (Triton's; --grpc-restricted-api is the same)"},
    {"grpc-restricted-api", OPT_LIST, OFF(grpc_restricted_api), NULL, 0, 0,
     "the same as --grpc-restricted-protocol"},
    {"log-level", OPT_LOGLEVEL, 0, "info", 0, 0, "error, warn, info, debug or trace"},
};
#define N_OPTIONS (int)(sizeof options / sizeof options[0])

static void serve_usage(FILE *f)
{
    fprintf(f, "usage: hark serve [--model-repository DIR] [options]\n\n"
               "Without --model-repository, the bundled demo models (models/) are served.\n\n"
               "Every option may also be set in a file given with --config FILE, one\n"
               "'name = value' per line; options on the command line win.\n\n");
    for (int i = 0; i < N_OPTIONS; i++)
        fprintf(f, "  --%-24s %s%s%s%s\n", options[i].name, options[i].help,
                options[i].def ? " (default " : "", options[i].def ? options[i].def : "",
                options[i].def ? ")" : "");
}

/* Applies name=value; returns 0 or prints why and returns -1. */
static int set_option(server_opts_t *o, const char *name, const char *value, const char *where)
{
    for (int i = 0; i < N_OPTIONS; i++) {
        const opt_t *op = &options[i];
        if (strcmp(op->name, name) != 0)
            continue;
        char *p = (char *)o + op->offset, *end = NULL;
        double v = 0;
        switch (op->type) {
        case OPT_STR:
            *(const char **)p = value;
            return 0;
        case OPT_LIST: {
            server_list_t *l = (server_list_t *)p;
            if (l->n == SERVER_LIST_MAX) {
                fprintf(stderr, "hark serve: %s: more than %d --%s\n", where, SERVER_LIST_MAX,
                        name);
                return -1;
            }
            l->v[l->n++] = value;
            return 0;
        }
        case OPT_CHOICE: {
            int k = 0;
            for (const char *c = choices_of(op->name); c; k++) {
                const char *bar = strchr(c, '|');
                size_t len = bar ? (size_t)(bar - c) : strlen(c);
                if (strlen(value) == len && !strncasecmp(c, value, len)) {
                    memcpy(p, &k, sizeof k);
                    return 0;
                }
                c = bar ? bar + 1 : NULL;
            }
            fprintf(stderr, "hark serve: %s: %s = '%s' must be one of %s\n", where, name, value,
                    choices_of(op->name));
            return -1;
        }
        case OPT_LOGLEVEL: {
            log_level_t l;
            if (log_parse_level(value, &l)) {
                fprintf(stderr,
                        "hark serve: %s: log-level '%s' is not error|warn|info|debug|trace\n",
                        where, value);
                return -1;
            }
            log_set_level(l);
            return 0;
        }
        case OPT_BOOL:
            if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes"))
                *(int *)p = 1;
            else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no"))
                *(int *)p = 0;
            else {
                fprintf(stderr, "hark serve: %s: %s must be true or false\n", where, name);
                return -1;
            }
            return 0;
        default:
            v = strtod(value, &end);
            if (!*value || *end || v < op->min || v > op->max ||
                (op->type != OPT_DOUBLE && v != (double)(long long)v)) {
                fprintf(stderr, "hark serve: %s: %s = '%s' must be a %s in [%g, %g]\n", where, name,
                        value, op->type == OPT_DOUBLE ? "number" : "whole number", op->min,
                        op->max);
                return -1;
            }
            if (op->type == OPT_INT) {
                int iv = (int)v;
                memcpy(p, &iv, sizeof iv);
            } else if (op->type == OPT_SIZE) {
                size_t zv = (size_t)v;
                memcpy(p, &zv, sizeof zv);
            } else {
                memcpy(p, &v, sizeof v);
            }
            return 0;
        }
    }
    fprintf(stderr, "hark serve: %s: unknown option '%s' (see hark serve --help)\n", where, name);
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = 0;
    return s;
}

/* Config file lines are kept alive for the process (string options point into them). */
static int load_file(server_opts_t *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hark serve: --config %s: cannot open\n", path);
        return -1;
    }
    char line[4096];
    int ln = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        ln++;
        char *h = strchr(line, '#');
        if (h)
            *h = 0;
        char *t = trim(line);
        if (!*t)
            continue;
        char *eq = strchr(t, '=');
        if (!eq) {
            fprintf(stderr, "hark serve: %s:%d: expected 'name = value'\n", path, ln);
            rc = -1;
            break;
        }
        *eq = 0;
        char where[600];
        snprintf(where, sizeof where, "%s:%d", path, ln);
        char *name = trim(t), *value = strdup(trim(eq + 1));
        if (!value || set_option(o, name, value, where))
            rc = -1;
    }
    fclose(f);
    return rc;
}

int cli_serve(int argc, char **argv)
{
    server_opts_t o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < N_OPTIONS; i++) /* defaults */
        if (options[i].def && options[i].type != OPT_LOGLEVEL)
            set_option(&o, options[i].name, options[i].def, "default");
    for (int i = 1; i < argc; i++) /* the file first, so that flags win */
        if (!strcmp(argv[i], "--config") && i + 1 < argc && load_file(&o, argv[i + 1]))
            return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            serve_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "hark serve: unexpected argument '%s'\n", a);
            return 2;
        }
        char name[128];
        const char *value, *eq = strchr(a, '=');
        if (eq) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - a - 2), a + 2);
            value = eq + 1;
        } else if (i + 1 < argc) {
            snprintf(name, sizeof name, "%s", a + 2);
            value = argv[++i];
        } else {
            fprintf(stderr, "hark serve: %s needs a value\n", a);
            return 2;
        }
        if (set_option(&o, name, value, "command line"))
            return 2;
    }
    char demo[4096];
    if (!o.model_repository) {
        if (cli_demo_models(demo, sizeof demo)) {
            fprintf(stderr, "hark serve: no --model-repository given, and the bundled demo models "
                            "(models/ beside the binary, or $HARK_DEMO_MODELS) are not there\n");
            serve_usage(stderr);
            return 2;
        }
        fprintf(stderr,
                "hark serve: no --model-repository given: serving the bundled demo models "
                "in %s (small models trained by hark on synthetic speech; see its "
                "README.md)\n",
                demo);
        o.model_repository = demo;
    }
    hark_err_t err = {0};
    server_t *s;
    if (server_create(&o, &s, &err)) {
        fprintf(stderr, "hark serve: %s\n", err.msg);
        return 1;
    }
    int rc = server_run(s);
    server_destroy(s);
    return rc;
}
