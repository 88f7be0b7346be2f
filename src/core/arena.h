/* arena.h — bump allocator for per-request memory, freed in one go.
 * Tests: tests/core/test_core.c */
#ifndef HARK_CORE_ARENA_H
#define HARK_CORE_ARENA_H

#include <stddef.h>

typedef struct arena_block arena_block_t;
typedef struct {
    arena_block_t *head; /* newest block first */
    size_t block_size;   /* default size of a new block */
    size_t used_total;   /* bytes handed out since the last reset */
} arena_t;

/* block_size 0 means 64 KiB. The caller owns the arena_t; arena_free releases its blocks. */
void arena_init(arena_t *a, size_t block_size);
/* Aligned allocation (align a power of two, <= 64); NULL on out-of-memory. Memory is not
 * zeroed. Lives until arena_reset/arena_free. */
void *arena_alloc(arena_t *a, size_t size, size_t align);
void *arena_calloc(arena_t *a, size_t count, size_t size);
char *arena_strndup(arena_t *a, const char *s, size_t n);
/* Forget all allocations but keep the first block for reuse. */
void arena_reset(arena_t *a);
void arena_free(arena_t *a);

#endif
