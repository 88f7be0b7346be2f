/* pinned.c — the page-locked buffer pool of pinned.h. Each buffer has a 64-byte header in front
 * of it: its class (or HEAP) and, while free, the next buffer of its class. */
#include "gpu/pinned.h"

#include "core/alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

#define MIN_SHIFT 16 /* 64 KiB */
#define CLASSES 12   /* ... 128 MiB */
#define HDR 64
#define HEAP (-1)

typedef struct hdr {
    int cls;
    struct hdr *next; /* free list */
} hdr_t;

struct pinned_pool {
    pthread_mutex_t mu;
    size_t cap;
    int usable; /* CUDA and a device */
    hdr_t *free_[CLASSES];
    pinned_stats_t st;
};

pinned_pool_t *pinned_pool_create(size_t cap)
{
    pinned_pool_t *p = hark_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->mu, NULL);
    p->cap = cap;
#ifdef HARK_CUDA
    int n = 0;
    p->usable = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    if (!p->usable)
        cudaGetLastError();
#endif
    return p;
}

void pinned_pool_destroy(pinned_pool_t *p)
{
    if (!p)
        return;
    for (int c = 0; c < CLASSES; c++)
        for (hdr_t *h = p->free_[c], *nx; h; h = nx) {
            nx = h->next;
#ifdef HARK_CUDA
            cudaFreeHost(h);
#endif
        }
    pthread_mutex_destroy(&p->mu);
    hark_free(p);
}

static void *heap_buf(size_t len)
{
    if (len > SIZE_MAX - HDR)
        return NULL;
    hdr_t *h = hark_malloc(HDR + len);
    if (!h)
        return NULL;
    h->cls = HEAP;
    return (char *)h + HDR;
}

void *pinned_alloc(pinned_pool_t *p, size_t len)
{
    int cls = 0;
    while (cls < CLASSES && ((size_t)1 << (MIN_SHIFT + cls)) < len)
        cls++;
    pthread_mutex_lock(&p->mu);
    p->st.allocs++;
    hdr_t *h = NULL;
    if (cls < CLASSES && (h = p->free_[cls])) {
        p->free_[cls] = h->next;
        p->st.reused++;
    }
    size_t sz = (size_t)1 << (MIN_SHIFT + (cls < CLASSES ? cls : 0));
    int fresh = !h && p->usable && cls < CLASSES && p->st.pinned_bytes + sz + HDR <= p->cap;
    if (fresh)
        p->st.pinned_bytes += sz + HDR; /* reserved before the slow call, outside the lock */
    if (!h && !fresh)
        p->st.heap++;
    pthread_mutex_unlock(&p->mu);
    if (h)
        return (char *)h + HDR;
    if (!fresh)
        return heap_buf(len);
#ifdef HARK_CUDA
    void *m = NULL;
    if (cudaHostAlloc(&m, sz + HDR, cudaHostAllocPortable) == cudaSuccess) {
        h = m;
        h->cls = cls;
        return (char *)h + HDR;
    }
    cudaGetLastError();
#endif
    pthread_mutex_lock(&p->mu);
    p->st.pinned_bytes -= sz + HDR;
    p->st.heap++;
    pthread_mutex_unlock(&p->mu);
    return heap_buf(len);
}

void pinned_free(pinned_pool_t *p, void *ptr)
{
    if (!ptr)
        return;
    hdr_t *h = (hdr_t *)((char *)ptr - HDR);
    if (h->cls == HEAP) {
        hark_free(h);
        return;
    }
    pthread_mutex_lock(&p->mu);
    h->next = p->free_[h->cls];
    p->free_[h->cls] = h;
    pthread_mutex_unlock(&p->mu);
}

void pinned_pool_stats(pinned_pool_t *p, pinned_stats_t *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

void *pinned_body_alloc(size_t len, void *user)
{
    return pinned_alloc(user, len);
}

void pinned_body_free(void *ptr, void *user)
{
    pinned_free(user, ptr);
}
