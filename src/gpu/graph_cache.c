/* graph_cache.c — see graph_cache.h */
#include "gpu/graph_cache.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "hark.h"

#include <cuda_runtime.h>
#include <string.h>

typedef struct {
    graph_key_t key;
    cudaGraphExec_t exec;    /* NULL: seen once */
    unsigned long long used; /* 0: empty */
} slot_t;

struct graph_cache {
    cudaStream_t stream;
    int n;
    unsigned long long tick;
    slot_t *slot;
};

graph_cache_t *graph_cache_create(int slots, void *stream)
{
    graph_cache_t *c = hark_calloc(1, sizeof *c);
    if (!c || !(c->slot = hark_calloc((size_t)slots, sizeof *c->slot))) {
        hark_free(c);
        return NULL;
    }
    c->n = slots;
    c->stream = (cudaStream_t)stream;
    return c;
}

void graph_cache_clear(graph_cache_t *c)
{
    for (int i = 0; c && i < c->n; i++) {
        if (c->slot[i].exec)
            cudaGraphExecDestroy(c->slot[i].exec);
        memset(&c->slot[i], 0, sizeof c->slot[i]);
    }
}

void graph_cache_destroy(graph_cache_t *c)
{
    if (!c)
        return;
    graph_cache_clear(c);
    hark_free(c->slot);
    hark_free(c);
}

/* the work captured into *exec; HARK_OK with *exec NULL when the stream cannot be captured */
static int record(graph_cache_t *c, graph_enqueue_fn enqueue, void *user, cudaGraphExec_t *exec,
                  hark_err_t *err)
{
    *exec = NULL;
    cudaGraph_t graph = NULL;
    if (cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return HARK_OK;
    }
    int rc = enqueue(user, err);
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (rc == HARK_OK && e == cudaSuccess && graph)
        e = cudaGraphInstantiate(exec, graph, 0);
    if (graph)
        cudaGraphDestroy(graph);
    if (rc != HARK_OK || e != cudaSuccess) {
        cudaGetLastError();
        *exec = NULL;
    }
    return rc;
}

int graph_cache_run(graph_cache_t *c, const graph_key_t *key, graph_enqueue_fn enqueue, void *user,
                    const char *what, hark_err_t *err)
{
    slot_t *hit = NULL, *victim = &c->slot[0];
    for (int i = 0; i < c->n; i++) {
        slot_t *s = &c->slot[i];
        if (s->used && !memcmp(&s->key, key, sizeof *key)) {
            hit = s;
            break;
        }
        if (s->used < victim->used)
            victim = s;
    }
    if (!hit) { /* first sight: run it, remember the key */
        int rc = enqueue(user, err);
        if (rc == HARK_OK) {
            if (victim->exec)
                cudaGraphExecDestroy(victim->exec);
            *victim = (slot_t){*key, NULL, ++c->tick};
        }
        return rc;
    }
    hit->used = ++c->tick;
    if (!hit->exec) { /* second sight: record it (capture does not run it) */
        int rc = record(c, enqueue, user, &hit->exec, err);
        if (rc != HARK_OK)
            return rc;
        if (!hit->exec)
            return enqueue(user, err);
    }
    cudaError_t e = cudaGraphLaunch(hit->exec, c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, HARK_ERR_CUDA, "%s: graph launch: %s", what, cudaGetErrorString(e));
    }
    return HARK_OK;
}
#endif
