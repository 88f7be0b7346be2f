/* hark — public C API of the hark speech inference engine.
 * Tests: tests/core/test_status.c (status strings); the API grows with each model family.
 *
 * Ownership: every object hark creates is released with the matching _destroy function, which
 * accepts NULL. Buffers passed into hark are lent for the duration of the call only; hark never
 * keeps a pointer it was lent. Results are snapshots the caller frees.
 */
#ifndef HARK_H
#define HARK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HARK_VERSION "0.1.0"

/* Status codes: 0 is success, negative values are errors. */
typedef enum {
    HARK_OK = 0,
    HARK_ERR_INVALID_ARG = -1, /* a caller passed something malformed */
    HARK_ERR_NOMEM = -2,       /* an allocation failed */
    HARK_ERR_IO = -3,          /* a file could not be read or written */
    HARK_ERR_FORMAT = -4,      /* data is corrupt or of an unknown format */
    HARK_ERR_UNSUPPORTED = -5, /* valid but not supported by hark */
    HARK_ERR_TOO_LARGE = -6,   /* exceeds a configured limit */
    HARK_ERR_CUDA = -7,        /* a CUDA call failed */
    HARK_ERR_NOT_FOUND = -8,   /* a named thing does not exist */
    HARK_ERR_AGAIN = -9,       /* not now: queue full, woken without data */
    HARK_ERR_TIMEOUT = -10,    /* a deadline passed */
    HARK_ERR_CLOSED = -11,     /* the object was shut down */
    HARK_ERR_NO_DEVICE = -12,  /* no GPU, or hark built without CUDA */
    HARK_ERR_INTERNAL = -13,   /* a bug in hark */
    HARK_ERR_CANCELLED = -14,  /* the caller or client gave up on the work */
    HARK_ERR_UNAVAILABLE = -15, /* not ready now (loading, draining, unhealthy) */
} hark_status_t;

/* A static, human-readable name for a status ("invalid argument", ...). Never NULL. */
const char *hark_status_str(int status);

/* Library version string. */
const char *hark_version(void);

#ifdef __cplusplus
}
#endif
#endif
