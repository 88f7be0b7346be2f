/* repository.h — the model repository of `hark serve`: Triton's layout (<repo>/<model>/
 * config.pbtxt, <repo>/<model>/<version>/), each model's state (UNAVAILABLE, LOADING, READY,
 * UNLOADING), loading through the family its config names, unloading, and the documents the APIs
 * report about models (index, metadata, config, statistics, metrics).
 * Tests: tests/server/test_server.py, tests/server/test_grpc.py (through a running server)
 *
 * THREADS: the table is shared by the transport loops (readers, in parallel) and the load/unload
 * threads (writers, preferred so that steady traffic does not starve them). repository_rdlock /
 * _unlock bracket every use of a repo_model_t the table hands out; a model found under the read
 * lock stays loaded until the unlock. Loading and unloading block (run them off the loops).
 */
#ifndef HARK_SERVER_REPOSITORY_H
#define HARK_SERVER_REPOSITORY_H

#include "api/metrics.h"
#include "core/error.h"
#include "sched/instance.h"
#include "server/model_config.h"

typedef enum { M_UNAVAILABLE = 0, M_LOADING, M_READY, M_UNLOADING } repo_state_t;
const char *repo_state_name(repo_state_t s);

typedef struct {
    char name[128];
    char dir[4096];
    int version;
    char version_str[16];
    repo_state_t state;
    char reason[512];
    model_config_t cfg;
    int has_cfg;
    served_model_t *served; /* READY: the family's model, batcher and instances */
    const family_t *family; /* READY */
    uint64_t stamp;         /* poll: a fingerprint of its files (names, sizes, times) at its load */
    int removed;            /* poll: its folder left the repository (hidden from every lookup) */
} repo_model_t;

typedef struct {
    const char *dir;    /* the repository */
    double max_seconds; /* longest request a model accepts */
    int cpu_threads;    /* BLAS threads per CPU instance */
    int length_aware;   /* length-aware batching */
    int max_queue_size; /* the queue bound of a config that sets none (0: unbounded) */
    /* optional, around each batch's completions on an instance thread */
    void (*completions_begin)(int n);
    void (*completions_end)(int n);
} repository_opts_t;

typedef struct repository repository_t;

/* Scans dir for models (nothing is loaded yet). HARK_ERR_IO when dir cannot be read. */
int repository_create(const repository_opts_t *o, repository_t **out, hark_err_t *err);
/* Unloads every model first; accepts NULL. */
void repository_destroy(repository_t *r);

void repository_rdlock(repository_t *r);
void repository_unlock(repository_t *r);
int repository_count(repository_t *r); /* under the lock */
repo_model_t *repository_at(repository_t *r, int i);
/* The model called name[len] (version NULL or "": any; else it must be the served one), or NULL
 * with err set (HARK_ERR_NOT_FOUND). Under the lock. */
repo_model_t *repository_find(repository_t *r, const char *name, size_t len, const char *version,
                              hark_err_t *err);
/* The one READY model of a task (family_task_t; 0: of any task), when exactly one is (OpenAI
 * clients name models hark does not have: "whisper-1", "tts-1"). Under the lock. */
repo_model_t *repository_only_ready(repository_t *r, int task);

/* 0 when name[len] may name a model folder: not empty, shorter than 128 bytes, no '/' or '\\',
 * not starting with '.' (".", "..", hidden folders), no control characters; else
 * HARK_ERR_INVALID_ARG with the reason. */
int repository_name_valid(const char *name, size_t len, hark_err_t *err);

/* Loads (or reloads) / unloads one model by name (a model added to the directory since the scan
 * is found too). Blocking; any thread but a loop. */
int repository_load(repository_t *r, const char *name, hark_err_t *err);
int repository_unload(repository_t *r, const char *name, hark_err_t *err);
/* Loads every model found by the scan (startup). */
void repository_load_all(repository_t *r);
/* Triton's poll: rescans the folder; a new model is loaded, one whose files changed since its
 * load is reloaded, one whose folder is gone is unloaded and leaves the index. Returns how many
 * models it loaded, reloaded or unloaded. Blocking; one caller at a time. */
int repository_poll(repository_t *r);
void repository_unload_all(repository_t *r);
/* Every loaded model's queue hands out what it holds without waiting for fuller batches
 * (served_model_hurry): what is in flight when the server drains is run at once. */
void repository_hurry(repository_t *r);
/* 1 when every READY model's instances are healthy. */
int repository_healthy(repository_t *r);
/* strict readiness (Triton's --strict-readiness): 1 when no model is loading or failed to load
 * (an unloaded one does not count) and every READY one is healthy. */
int repository_all_ready(repository_t *r);
/* The models whose last load failed; the first one's name and reason into name/why. */
int repository_failed(repository_t *r, char *name, size_t nname, char *why, size_t nwhy);

/* JSON documents (hark_malloc'd); under the lock. */
char *repository_index_json(repository_t *r, int ready_only);
char *repository_metadata_json(const repo_model_t *m);
/* KServe statistics of m, or of every READY model when m is NULL. */
char *repository_stats_json(repository_t *r, const repo_model_t *m);
/* Fills up to max entries for the Prometheus renderer; returns how many. */
int repository_metrics(repository_t *r, metrics_model_t *out, int max);

#endif
