/* pinned.h — a pool of page-locked host buffers for request bodies, so that a GPU model instance
 * copies the samples to the device by DMA straight from where the HTTP loop received them (no
 * staging memcpy on the instance's thread). Buffers come in power-of-two classes from 64 KiB; a
 * freed buffer goes back to its class's free list and is reused, so page-locking (slow) happens
 * only while the pool warms up. Past `cap` page-locked bytes, for sizes beyond the largest
 * class, and without CUDA or a device, buffers are plain heap memory (still freed through the
 * pool). Thread-safe. Tests: tests/gpu/test_pinned.c. */
#ifndef HARK_GPU_PINNED_H
#define HARK_GPU_PINNED_H

#include <stddef.h>

typedef struct pinned_pool pinned_pool_t;

typedef struct {
    size_t pinned_bytes; /* page-locked bytes held (in use or free) */
    long allocs, reused; /* pinned_alloc calls; of them, served from a free list */
    long heap;           /* of them, served from the heap */
} pinned_stats_t;

/* NULL when out of memory. cap: the page-locked bytes the pool may hold. */
pinned_pool_t *pinned_pool_create(size_t cap);
/* Every buffer must have been freed. Accepts NULL. */
void pinned_pool_destroy(pinned_pool_t *p);
/* At least len bytes, 16-byte aligned; NULL only when out of memory. */
void *pinned_alloc(pinned_pool_t *p, size_t len);
/* A buffer from pinned_alloc of the same pool, or NULL. */
void pinned_free(pinned_pool_t *p, void *ptr);
void pinned_pool_stats(pinned_pool_t *p, pinned_stats_t *out);

/* The http_server_opts_t body_alloc / body_free hooks over a pool (user = the pool). */
void *pinned_body_alloc(size_t len, void *user);
void pinned_body_free(void *ptr, void *user);

#endif
