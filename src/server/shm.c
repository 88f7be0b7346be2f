/* shm.c — the registry of Triton's system shared memory regions: each a read-write descriptor of
 * a POSIX shared memory object and the window [offset, offset + byte_size) of it that the client
 * registered; copies go through duplicates of the descriptor (see shm.h).
 * Tests: tests/server/test_shm.c, tests/server/test_triton_ext.py */
#include "server/shm.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h> /* shm_open */
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    shm_region_info_t info;
    int fd;
} region_t;

struct shm_registry {
    pthread_mutex_t lock;
    region_t *v; /* (n) registration order */
    int n, cap;
};

shm_registry_t *shm_registry_create(void)
{
    shm_registry_t *r = hark_calloc(1, sizeof *r);
    if (r)
        pthread_mutex_init(&r->lock, NULL);
    return r;
}

void shm_registry_destroy(shm_registry_t *r)
{
    if (!r)
        return;
    shm_unregister(r, NULL);
    pthread_mutex_destroy(&r->lock);
    hark_free(r->v);
    hark_free(r);
}

/* under the lock */
static region_t *find(shm_registry_t *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].info.name, name))
            return &r->v[i];
    return NULL;
}

int shm_register(shm_registry_t *r, const char *name, const char *key, uint64_t offset,
                 uint64_t byte_size, hark_err_t *err)
{
    if (!name || !name[0] || strlen(name) >= SHM_NAME_MAX)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "a shared memory region needs a name of 1 to %d bytes", SHM_NAME_MAX - 1);
    if (!key || !key[0] || strlen(key) >= SHM_NAME_MAX)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "cannot register shared memory region '%s': the key must be 1 to %d bytes "
                       "(a POSIX shared memory name such as \"/input0\")",
                       name, SHM_NAME_MAX - 1);
    if (!byte_size)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "cannot register shared memory region '%s': byte_size is 0", name);
    if (offset > (uint64_t)INT64_MAX || byte_size > (uint64_t)INT64_MAX - offset)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "cannot register shared memory region '%s': offset %" PRIu64
                       " + byte_size %" PRIu64 " overflows",
                       name, offset, byte_size);
    pthread_mutex_lock(&r->lock);
    int rc = HARK_OK, fd = -1;
    if (find(r, name)) {
        rc = err_set(err, HARK_ERR_INVALID_ARG, "shared memory region '%s' already in manager",
                     name);
        goto out;
    }
    fd = shm_open(key, O_RDWR, 0);
    if (fd < 0) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "cannot register shared memory region '%s': unable to open shared memory "
                     "object '%s' read-write: %s",
                     name, key, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "cannot register shared memory region '%s': fstat of '%s': %s", name, key,
                     strerror(errno));
        goto out;
    }
    if ((uint64_t)st.st_size < offset + byte_size) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "cannot register shared memory region '%s': offset %" PRIu64
                     " + byte_size %" PRIu64 " is past the end of '%s' (%lld bytes)",
                     name, offset, byte_size, key, (long long)st.st_size);
        goto out;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        region_t *v = hark_realloc(r->v, (size_t)cap * sizeof *v);
        if (!v) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto out;
        }
        r->v = v;
        r->cap = cap;
    }
    region_t *g = &r->v[r->n++];
    memset(g, 0, sizeof *g);
    snprintf(g->info.name, sizeof g->info.name, "%s", name);
    snprintf(g->info.key, sizeof g->info.key, "%s", key);
    g->info.offset = offset;
    g->info.byte_size = byte_size;
    g->fd = fd;
    fd = -1;
out:
    pthread_mutex_unlock(&r->lock);
    if (fd >= 0)
        close(fd);
    return rc;
}

void shm_unregister(shm_registry_t *r, const char *name)
{
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n;) {
        if (name && name[0] && strcmp(r->v[i].info.name, name)) {
            i++;
            continue;
        }
        close(r->v[i].fd);
        memmove(&r->v[i], &r->v[i + 1], (size_t)(r->n - i - 1) * sizeof *r->v);
        r->n--;
    }
    pthread_mutex_unlock(&r->lock);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const shm_region_info_t *)a)->name, ((const shm_region_info_t *)b)->name);
}

int shm_status(shm_registry_t *r, const char *name, shm_region_info_t *out, int cap,
               hark_err_t *err)
{
    pthread_mutex_lock(&r->lock);
    int n = 0;
    if (name && name[0]) {
        region_t *g = find(r, name);
        if (!g) {
            pthread_mutex_unlock(&r->lock);
            return err_set(err, HARK_ERR_NOT_FOUND,
                           "Unable to find system shared memory region: '%s'", name);
        }
        if (cap > 0)
            out[0] = g->info;
        n = 1;
    } else {
        for (int i = 0; i < r->n; i++, n++)
            if (n < cap)
                out[n] = r->v[i].info;
    }
    pthread_mutex_unlock(&r->lock);
    if (n > 0 && cap > 0) /* a counting call passes no array: qsort's base must not be NULL */
        qsort(out, (size_t)(n < cap ? n : cap), sizeof *out, by_name);
    return n;
}

/* Under the lock: the region's window check, and a duplicate of its descriptor with the absolute
 * position of `offset` (the caller closes *fd). */
static int locate(shm_registry_t *r, const char *name, uint64_t offset, uint64_t n, int *fd,
                  off_t *at, hark_err_t *err)
{
    pthread_mutex_lock(&r->lock);
    region_t *g = find(r, name ? name : "");
    int rc = HARK_OK;
    if (!g) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "unknown shared memory region '%s' (register it first: POST "
                     "/v2/systemsharedmemory/region/%s/register)",
                     name ? name : "", name ? name : "");
    } else if (offset > g->info.byte_size || n > g->info.byte_size - offset) {
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "shared memory region '%s': offset %" PRIu64 " + byte size %" PRIu64
                     " is past its end (%" PRIu64 " bytes)",
                     name, offset, n, g->info.byte_size);
    } else if (fd) {
        *at = (off_t)(g->info.offset + offset);
        if ((*fd = dup(g->fd)) < 0)
            rc = err_set(err, HARK_ERR_IO, "shared memory region '%s': dup: %s", name,
                         strerror(errno));
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int shm_check(shm_registry_t *r, const char *name, uint64_t offset, uint64_t n, hark_err_t *err)
{
    return locate(r, name, offset, n, NULL, NULL, err);
}

/* the object shrunk under its registration (the client's ftruncate) */
static int shrunk(int fd, off_t end, const char *name, hark_err_t *err)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size < end)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "shared memory region '%s': its object is now %lld bytes, shorter than "
                       "the registered region",
                       name, (long long)st.st_size);
    return HARK_OK;
}

int shm_read(shm_registry_t *r, const char *name, uint64_t offset, void *dst, size_t n,
             hark_err_t *err)
{
    int fd = -1;
    off_t at = 0;
    int rc = locate(r, name, offset, n, &fd, &at, err);
    if (rc)
        return rc;
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (uint8_t *)dst + done, n - done, at + (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            rc = err_set(err, HARK_ERR_IO, "shared memory region '%s': read: %s", name,
                         strerror(errno));
            break;
        }
        if (k == 0) { /* end of the object */
            rc = shrunk(fd, at + (off_t)n, name, err);
            if (!rc)
                rc = err_set(err, HARK_ERR_IO, "shared memory region '%s': short read", name);
            break;
        }
        done += (size_t)k;
    }
    close(fd);
    return rc;
}

int shm_write(shm_registry_t *r, const char *name, uint64_t offset, const void *src, size_t n,
              hark_err_t *err)
{
    int fd = -1;
    off_t at = 0;
    int rc = locate(r, name, offset, n, &fd, &at, err);
    if (rc)
        return rc;
    /* a write past the object's end would grow the client's object instead */
    if ((rc = shrunk(fd, at + (off_t)n, name, err))) {
        close(fd);
        return rc;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t k = pwrite(fd, (const uint8_t *)src + done, n - done, at + (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rc = err_set(err, HARK_ERR_IO, "shared memory region '%s': write: %s", name,
                         k < 0 ? strerror(errno) : "no progress");
            break;
        }
        done += (size_t)k;
    }
    close(fd);
    return rc;
}
