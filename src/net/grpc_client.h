/* grpc_client.h — a small blocking gRPC client over nghttp2 (one connection per object, one call
 * at a time, unary calls), for `hark perf -i grpc` and `hark transcribe --url grpc://...`.
 * Message limits: INT32_MAX both ways, as Triton's clients set them.
 * Tests: tests/net/test_grpc_client.c (against the real http2 server), tests/server/test_grpc.py
 *
 * OWNERSHIP AND THREADS
 * - A grpc_client_t is used by one thread at a time; it only contacts the host and port it was
 *   created with. Responses (*resp) are hark_malloc'd: the caller's to hark_free.
 */
#ifndef HARK_NET_GRPC_CLIENT_H
#define HARK_NET_GRPC_CLIENT_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct grpc_client grpc_client_t;

/* Connects nowhere yet (the first call connects). timeout_ms: per call (0: 60 s), also sent as
 * grpc-timeout. HARK_OK, HARK_ERR_INVALID_ARG, HARK_ERR_NOMEM. */
int grpc_client_create(const char *host, int port, unsigned timeout_ms, grpc_client_t **out,
                       hark_err_t *err);
void grpc_client_destroy(grpc_client_t *c); /* NULL ok */

/* Calls `method` ("/inference.GRPCInferenceService/ModelInfer") with the serialized request
 * message req[len]. Returns HARK_OK when the call completed at the gRPC level: *status is the
 * grpc-status (0: *resp, *resp_len hold the response message), msg[cap] the grpc-message
 * (percent-decoded). Transport failures: HARK_ERR_IO (connect, reset, protocol error: the
 * connection is dropped and the next call reconnects), HARK_ERR_TIMEOUT, HARK_ERR_NOMEM. */
int grpc_client_call(grpc_client_t *c, const char *method, const uint8_t *req, size_t len,
                     uint8_t **resp, size_t *resp_len, int *status, char *msg, size_t cap,
                     hark_err_t *err);

#endif
