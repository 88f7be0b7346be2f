/* shm.h — Triton's system shared memory regions: POSIX shared memory objects (shm_open) that
 * clients register by name (key, offset, byte_size) and then name in infer requests, so that
 * tensors travel through memory instead of the socket. A registry of them, thread-safe.
 * Tests: tests/server/test_shm.c (unit), tests/server/test_triton_ext.py (through a server)
 *
 * Access goes through the object's descriptor (pread/pwrite at the region's offset), not through
 * a mapping: a client that shrinks its object (ftruncate) after registering it then makes a read
 * come up short (a clear error) instead of a SIGBUS that would take the server down. The
 * descriptor, opened read-write, is the registration: closed on unregister and by
 * shm_registry_destroy. A copy in flight keeps its own duplicate of the descriptor, so an
 * unregister never waits for it and never pulls the memory from under it. */
#ifndef HARK_SERVER_SHM_H
#define HARK_SERVER_SHM_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct shm_registry shm_registry_t;

/* NULL when out of memory. */
shm_registry_t *shm_registry_create(void);
/* Closes every region; accepts NULL. */
void shm_registry_destroy(shm_registry_t *r);

#define SHM_NAME_MAX 128 /* region names and keys: at most 127 bytes */

/* Registers region `name` as bytes [offset, offset + byte_size) of the object `key` (a POSIX
 * shared memory name such as "/input0"), opened read-write. HARK_OK, or HARK_ERR_INVALID_ARG
 * with the reason: a name already registered (Triton's "already in manager"), an empty or
 * too-long name or key, byte_size 0, an object that cannot be opened (with errno's text), or a
 * region that does not lie inside the object (its size is given). */
int shm_register(shm_registry_t *r, const char *name, const char *key, uint64_t offset,
                 uint64_t byte_size, hark_err_t *err);
/* Unregisters region `name` (NULL or "": every region). An unknown name is not an error (as
 * Triton: clients unregister what they may have registered). */
void shm_unregister(shm_registry_t *r, const char *name);

typedef struct {
    char name[SHM_NAME_MAX], key[SHM_NAME_MAX];
    uint64_t offset, byte_size;
} shm_region_info_t;

/* The registered regions in name order into out[cap] (all of them, or the one called `name`
 * when it is non-empty); returns how many there are (may exceed cap), or HARK_ERR_NOT_FOUND
 * with err set when `name` is given and not registered. */
int shm_status(shm_registry_t *r, const char *name, shm_region_info_t *out, int cap,
               hark_err_t *err);

/* Copies n bytes at `offset` into region `name` to dst (read), or src into it (write).
 * HARK_ERR_INVALID_ARG with the reason: an unknown region, offset + n beyond the region's
 * byte_size, or an object shrunk since it was registered; HARK_ERR_IO for a failed read/write. */
int shm_read(shm_registry_t *r, const char *name, uint64_t offset, void *dst, size_t n,
             hark_err_t *err);
int shm_write(shm_registry_t *r, const char *name, uint64_t offset, const void *src, size_t n,
              hark_err_t *err);
/* Checks that [offset, offset + n) lies in region `name` (the errors of shm_read). */
int shm_check(shm_registry_t *r, const char *name, uint64_t offset, uint64_t n, hark_err_t *err);

#endif
