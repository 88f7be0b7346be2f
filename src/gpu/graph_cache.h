/* graph_cache.h — CUDA graphs of a worker's forward passes, kept by shape: the first time a key is
 * seen the work runs as it is enqueued and the key is remembered; the second time the work is
 * captured into a graph and that graph launched; from then on the graph is replayed. A full
 * cache drops its least recently used graph. Used by the Conformer, Jasper, FastSpeech and
 * HiFi-GAN GPU engines (a key holds whatever decides the recorded kernels: batch, lengths, buffer
 * addresses). Only with HARK_CUDA; no test of its own: every GPU engine test that runs a shape
 * twice replays a graph and compares it with the eager run.
 *
 * OWNERSHIP AND THREADS: a cache belongs to one worker and its stream; not thread-safe. */
#ifndef HARK_GPU_GRAPH_CACHE_H
#define HARK_GPU_GRAPH_CACHE_H

#include "core/error.h"

#define GRAPH_KEY_N 8

typedef struct {
    long long v[GRAPH_KEY_N]; /* unused entries zero */
} graph_key_t;

typedef struct graph_cache graph_cache_t;

/* enqueues the work on the cache's stream; HARK_OK or an error code (err set) */
typedef int (*graph_enqueue_fn)(void *user, hark_err_t *err);

/* A cache of `slots` graphs for work enqueued on stream (a cudaStream_t). NULL when out of
 * memory. */
graph_cache_t *graph_cache_create(int slots, void *stream);
void graph_cache_destroy(graph_cache_t *c); /* accepts NULL; the stream must be idle */
void graph_cache_clear(graph_cache_t *c);   /* drops every graph and key */

/* Runs the work of key: replays its graph, records one (second sight), or calls enqueue (first
 * sight, or when the stream cannot be captured). `what` names the engine in errors. */
int graph_cache_run(graph_cache_t *c, const graph_key_t *key, graph_enqueue_fn enqueue, void *user,
                    const char *what, hark_err_t *err);

#endif
