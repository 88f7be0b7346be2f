/* access.h — Triton's restricted APIs (--http-restricted-api, --grpc-restricted-protocol): API
 * groups that a request may use only when it carries a header key (gRPC: the metadata key
 * triton-grpc-protocol-<key>) with a given value. Triton's group names, parsing and messages.
 * Tests: tests/server/test_model_control.py (through a running server) */
#ifndef HARK_SERVER_ACCESS_H
#define HARK_SERVER_ACCESS_H

#include "core/error.h"

#include <stddef.h>

/* Triton's RestrictedCategory, in its order */
typedef enum {
    API_HEALTH = 0,
    API_METADATA,
    API_INFERENCE,
    API_SHARED_MEMORY,
    API_MODEL_CONFIG,
    API_MODEL_REPOSITORY,
    API_STATISTICS,
    API_TRACE,
    API_LOGGING,
    API_GROUPS
} api_group_t;

typedef enum { ACCESS_HTTP = 0, ACCESS_GRPC, ACCESS_TRANSPORTS } access_transport_t;

#define GRPC_RESTRICTED_PREFIX "triton-grpc-protocol-"

typedef struct access {
    struct {
        int on;
        char header[192]; /* HTTP: the key; gRPC: GRPC_RESTRICTED_PREFIX + key, lower case */
        char value[256];
    } rule[ACCESS_TRANSPORTS][API_GROUPS];
} access_t;

/* Adds one group "api[,api...]:key=value" for transport t. An unknown API, an API already in a
 * group of t, or a malformed spec: HARK_ERR_INVALID_ARG with Triton's message. */
int access_add(access_t *a, access_transport_t t, const char *spec, hark_err_t *err);
/* The header a request to g over t must carry, or NULL when g is open. */
const char *access_header(const access_t *a, access_transport_t t, api_group_t g);
/* 1 when a request to g over t whose access_header has the value got (NULL: absent) may go on;
 * else 0 with the message for the client (Triton's wording) in msg[n]. */
int access_allows(const access_t *a, access_transport_t t, api_group_t g, const char *got,
                  char *msg, size_t n);
const char *access_group_name(api_group_t g);

#endif
