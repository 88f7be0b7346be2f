/* multipart.h — multipart/form-data bodies (RFC 7578), as OpenAI-style clients send
 * /v1/audio/transcriptions: parts are zero-copy slices of the request body.
 * Tests: tests/net/test_multipart.c; fuzz target: tests/fuzz/fuzz_multipart.c */
#ifndef HARK_NET_MULTIPART_H
#define HARK_NET_MULTIPART_H

#include "core/error.h"

#include <stddef.h>

#define MULTIPART_MAX_PARTS 64

typedef struct {
    char name[128];         /* form field name (Content-Disposition name=) */
    char filename[256];     /* filename= when present, else "" */
    char content_type[128]; /* the part's Content-Type, else "" */
    const char *data;       /* the part's bytes inside the body (not NUL-terminated) */
    size_t len;
} multipart_part_t;

typedef struct {
    multipart_part_t parts[MULTIPART_MAX_PARTS];
    int n;
} multipart_t;

/* Extracts the boundary from a Content-Type header value ("multipart/form-data; boundary=..",
 * quoted or not). HARK_ERR_INVALID_ARG (message says why) when it is not multipart/form-data or
 * has no usable boundary (1..70 characters). */
int multipart_boundary(const char *content_type, char *boundary, size_t cap, hark_err_t *err);
/* Splits body into parts. The body must outlive `out`. HARK_ERR_FORMAT for a malformed body
 * (missing delimiter, unterminated headers, no closing delimiter, part without a name),
 * HARK_ERR_TOO_LARGE for more than MULTIPART_MAX_PARTS parts. */
int multipart_parse(const char *body, size_t len, const char *boundary, multipart_t *out,
                    hark_err_t *err);
/* The first part named `name`, or NULL. */
const multipart_part_t *multipart_get(const multipart_t *m, const char *name);

#endif
