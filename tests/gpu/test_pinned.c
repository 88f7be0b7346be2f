/* tests for src/gpu/pinned.c: buffers usable, freed ones reused per size class (page-locked with
 * a GPU, heap without one), the cap respected, page-locked buffers seen as such by CUDA. */
#include "test.h"

#include "gpu/gpu.h"
#include "gpu/pinned.h"

#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

TEST(pinned_pool_reuses_and_caps)
{
    int gpu = gpu_device_count() > 0;
    pinned_pool_t *p = pinned_pool_create((size_t)1 << 20); /* 1 MiB page-locked at most */
    CHECK(p);
    /* 100 KB and 90 KB share the 128 KiB class: the second reuses the first's buffer */
    char *a = pinned_alloc(p, 100000);
    CHECK(a);
    memset(a, 0x5a, 100000);
    pinned_free(p, a);
    char *b = pinned_alloc(p, 90000);
    CHECK(b);
    memset(b, 0x33, 90000);
    pinned_stats_t st;
    pinned_pool_stats(p, &st);
    CHECK(st.allocs == 2);
    if (gpu) {
        CHECK(b == a && st.reused == 1 && st.heap == 0);
        CHECK(st.pinned_bytes > 0 && st.pinned_bytes <= ((size_t)1 << 20));
#ifdef HARK_CUDA
        struct cudaPointerAttributes at;
        CHECK(cudaPointerGetAttributes(&at, b) == cudaSuccess && at.type == cudaMemoryTypeHost);
#endif
    } else {
        CHECK(st.reused == 0 && st.heap == 2 && st.pinned_bytes == 0);
    }
    /* beyond the cap (and tiny requests): heap buffers, freed through the pool all the same */
    char *big = pinned_alloc(p, (size_t)3 << 20), *tiny = pinned_alloc(p, 1);
    CHECK(big && tiny);
    memset(big, 1, (size_t)3 << 20);
    tiny[0] = 7;
    pinned_pool_stats(p, &st);
    CHECK(st.allocs == 4 && st.heap >= 1 && st.pinned_bytes <= ((size_t)1 << 20));
    pinned_free(p, big);
    pinned_free(p, tiny);
    pinned_free(p, b);
    pinned_free(p, NULL);
    pinned_pool_destroy(p);
    pinned_pool_destroy(NULL);
}
