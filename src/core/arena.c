/* arena.c — bump allocator for per-request memory.  Tests: tests/core/test_core.c */
#include "core/arena.h"

#include "core/alloc.h"
#include "core/assert.h"

#include <stdint.h>
#include <string.h>

struct arena_block {
    arena_block_t *next;
    size_t cap; /* usable bytes in data[] */
    size_t used;
    unsigned char data[]; /* malloc alignment; larger alignments are made per allocation */
};

void arena_init(arena_t *a, size_t block_size)
{
    a->head = NULL;
    a->block_size = block_size ? block_size : 65536;
    a->used_total = 0;
}

void *arena_alloc(arena_t *a, size_t size, size_t align)
{
    HARK_ASSERT(align && (align & (align - 1)) == 0 && align <= 64);
    arena_block_t *b = a->head;
    if (b) {
        uintptr_t base = (uintptr_t)b->data;
        size_t off = (size_t)(((base + b->used + align - 1) & ~(uintptr_t)(align - 1)) - base);
        if (off <= b->cap && size <= b->cap - off) {
            b->used = off + size;
            a->used_total += size;
            return b->data + off;
        }
    }
    size_t need = size + align - 1;
    size_t cap = need > a->block_size ? need : a->block_size;
    if (size > SIZE_MAX / 2 || cap > SIZE_MAX - sizeof(arena_block_t))
        return NULL;
    b = hark_malloc(sizeof(arena_block_t) + cap);
    if (!b)
        return NULL;
    b->cap = cap;
    b->next = a->head;
    a->head = b;
    uintptr_t base = (uintptr_t)b->data;
    size_t off = (size_t)(((base + align - 1) & ~(uintptr_t)(align - 1)) - base);
    b->used = off + size;
    a->used_total += size;
    return b->data + off;
}

void *arena_calloc(arena_t *a, size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        return NULL;
    void *p = arena_alloc(a, count * size, 16);
    if (p)
        memset(p, 0, count * size);
    return p;
}

char *arena_strndup(arena_t *a, const char *s, size_t n)
{
    char *d = arena_alloc(a, n + 1, 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

void arena_reset(arena_t *a)
{
    if (!a->head)
        return;
    arena_block_t *keep = a->head;
    while (keep->next) /* keep the oldest (first) block */
        keep = keep->next;
    arena_block_t *b = a->head;
    while (b != keep) {
        arena_block_t *n = b->next;
        hark_free(b);
        b = n;
    }
    keep->used = 0;
    a->head = keep;
    a->used_total = 0;
}

void arena_free(arena_t *a)
{
    arena_block_t *b = a->head;
    while (b) {
        arena_block_t *n = b->next;
        hark_free(b);
        b = n;
    }
    a->head = NULL;
    a->used_total = 0;
}
