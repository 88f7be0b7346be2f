/* kserve_grpc.h — KServe v2 over gRPC (Triton's inference.GRPCInferenceService): the pure codec
 * (gRPC message framing, grpc-timeout, status mapping, ModelInferRequest → kserve_request_t,
 * outputs → ModelInferResponse, the service's JSON documents → their protobuf messages) in
 * kserve_grpc_codec.c, and the RPC handlers over an http2 server in kserve_grpc.c.
 * Tests: tests/api/test_kserve_grpc.c (codec), tests/server/test_grpc.py (every RPC through a real
 * server), tests/fuzz/fuzz_grpc.c (HTTP/2 + framing + protobuf decode)
 *
 * OWNERSHIP
 * - Framed messages (grpc_frame_pack and the kserve_grpc frame builders) are hark_malloc'd: the
 *   caller's to hark_free (or to hand to http2_stream_send, which takes them).
 * - kserve_grpc_request_from_pb: the request borrows strings and raw input bytes from the
 *   unpacked ModelInferRequest, which must outlive it; the rest is the request's own.
 */
#ifndef HARK_API_KSERVE_GRPC_H
#define HARK_API_KSERVE_GRPC_H

#include "api/kserve.h"
#include "core/arena.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;
struct ProtobufCMessage;
struct ProtobufCMessageDescriptor;
struct Inference__ModelInferRequest;

/* gRPC status codes (grpc/status.h numbering). */
enum {
    GRPC_STATUS_OK = 0,
    GRPC_STATUS_CANCELLED = 1,
    GRPC_STATUS_UNKNOWN = 2,
    GRPC_STATUS_INVALID_ARGUMENT = 3,
    GRPC_STATUS_DEADLINE_EXCEEDED = 4,
    GRPC_STATUS_NOT_FOUND = 5,
    GRPC_STATUS_RESOURCE_EXHAUSTED = 8,
    GRPC_STATUS_FAILED_PRECONDITION = 9,
    GRPC_STATUS_UNIMPLEMENTED = 12,
    GRPC_STATUS_INTERNAL = 13,
    GRPC_STATUS_UNAVAILABLE = 14,
};

/* hark status → gRPC status: INVALID_ARG/TOO_LARGE/FORMAT → INVALID_ARGUMENT, NOT_FOUND →
 * NOT_FOUND, UNAVAILABLE/CLOSED → UNAVAILABLE, AGAIN (queue full) → RESOURCE_EXHAUSTED, TIMEOUT →
 * DEADLINE_EXCEEDED, CANCELLED → CANCELLED, UNSUPPORTED → UNIMPLEMENTED, others → INTERNAL.
 * (A message over the size limit is RESOURCE_EXHAUSTED: the transport says so itself.) */
int grpc_status_of(int hark_status);
/* Parses a grpc-timeout header value (1-8 digits then H, M, S, m, u or n) into nanoseconds
 * (saturating). HARK_OK or HARK_ERR_INVALID_ARG. */
int grpc_parse_timeout(const char *v, size_t n, uint64_t *ns);
/* Percent-encodes a grpc-message value (bytes outside 0x20-0x7e and '%' become %XX) into
 * out[cap] (NUL-terminated, truncated on a whole escape); returns the length written. */
size_t grpc_percent_encode(const char *msg, char *out, size_t cap);

/* ---- length-prefixed messages: 1 byte compressed flag, 4 bytes big-endian length ---------- */
#define GRPC_PREFIX 5
/* Looks at buf[len] for one whole message. Returns 1 with *msg, *msg_len, *consumed set, 0 when
 * more bytes are needed, or an error: HARK_ERR_UNSUPPORTED (compressed flag set: hark accepts
 * identity only), HARK_ERR_TOO_LARGE (declared length over max), HARK_ERR_INVALID_ARG (flag
 * byte neither 0 nor 1). */
int grpc_frame_next(const uint8_t *buf, size_t len, size_t max, const uint8_t **msg,
                    size_t *msg_len, size_t *consumed, hark_err_t *err);
/* Packs a protobuf message with its 5-byte prefix; NULL when out of memory. */
uint8_t *grpc_frame_pack(const struct ProtobufCMessage *m, size_t *len);

/* ---- ModelInfer ---------------------------------------------------------------------------- */
/* Builds a kserve_request_t from an unpacked ModelInferRequest (see OWNERSHIP): inputs from
 * raw_input_contents (one per input, in order) or from each input's typed `contents`; parameters
 * (bool/int64/uint64/double/string) into a JSON object that kserve_request_finish_params reads
 * (sequence_id, sequence_start/end, priority, timeout, decoding parameters); requested output
 * names. Inputs and outputs in shared memory (Triton's shared_memory_region, _offset, _byte_size
 * parameters) are taken with their regions named (raw_input_contents then hold the other inputs
 * only, in order); the service reads and writes the regions. Validates shapes, datatypes and
 * sizes. HARK_OK, HARK_ERR_INVALID_ARG naming the input, HARK_ERR_NOMEM. On failure *req holds
 * nothing. */
int kserve_grpc_request_from_pb(const struct Inference__ModelInferRequest *pb,
                                kserve_request_t *req, hark_err_t *err);

typedef struct {
    const char *model, *version, *id;
    const kserve_request_t *req; /* its outputs[] select and order the outputs; NULL: all */
    const kserve_output_t *outs;
    int n_outs;
    int stream;         /* 1: wrap in ModelStreamInferResponse{infer_response} */
    int final_response; /* stream: add parameter triton_final_response: true */
} kserve_grpc_infer_answer_t;

/* A framed ModelInferResponse (or ModelStreamInferResponse) holding every output as raw
 * contents, outputs[i] paired with raw_output_contents[i] (BYTES as 4-byte LE length + bytes);
 * an output the request put in shared memory has empty contents and the parameters
 * shared_memory_region, shared_memory_byte_size (the bytes written) and shared_memory_offset.
 * HARK_OK; HARK_ERR_INVALID_ARG (an unknown requested output); HARK_ERR_NOMEM. */
int kserve_grpc_infer_frame(const kserve_grpc_infer_answer_t *a, uint8_t **frame, size_t *len,
                            hark_err_t *err);
/* A framed ModelStreamInferResponse{error_message, infer_response{id}}. NULL when out of memory. */
uint8_t *kserve_grpc_stream_error_frame(const char *msg, const char *model, const char *id,
                                        size_t *len);

/* ---- JSON documents → protobuf ------------------------------------------------------------ */
/* Fills a message of descriptor `d` from JSON object `j` by field name: numbers, bools, strings,
 * enums by name (or number), nested messages, repeated fields from arrays, map fields from JSON
 * objects; unknown keys are ignored. Everything is allocated in `a` (free the arena, never the
 * message). HARK_OK or HARK_ERR_INVALID_ARG naming the field whose JSON type does not fit. */
int pb_from_json(const struct ProtobufCMessageDescriptor *d, const struct cJSON *j, arena_t *a,
                 struct ProtobufCMessage **out, hark_err_t *err);
/* The service's JSON (server metadata, model metadata, bare ModelConfig, {"model_stats"},
 * repository index array) parsed and framed as ServerMetadataResponse, ModelMetadataResponse,
 * ModelConfigResponse{config}, ModelStatisticsResponse, RepositoryIndexResponse{models}.
 * HARK_OK, HARK_ERR_INTERNAL (malformed JSON) or HARK_ERR_NOMEM. */
typedef enum {
    KSERVE_GRPC_SERVER_METADATA,
    KSERVE_GRPC_MODEL_METADATA,
    KSERVE_GRPC_MODEL_CONFIG,
    KSERVE_GRPC_MODEL_STATS,
    KSERVE_GRPC_REPOSITORY_INDEX,
    KSERVE_GRPC_LOG_SETTINGS,    /* {"log_info": true, ...} → LogSettingsResponse */
    KSERVE_GRPC_TRACE_SETTING,   /* {"trace_level": [...], "trace_rate": "1", ...} */
    KSERVE_GRPC_SHM_STATUS,      /* [{"name", "key", "offset", "byte_size"}] → regions by name */
    KSERVE_GRPC_CUDA_SHM_STATUS, /* [{"name", "device_id", "byte_size"}] */
} kserve_grpc_doc_t;
int kserve_grpc_json_frame(kserve_grpc_doc_t kind, const char *json, uint8_t **frame, size_t *len,
                           hark_err_t *err);

/* The settings of a LogSettingsRequest / TraceSettingRequest as the JSON update the service
 * takes (service_log_settings, service_trace_settings): log values as JSON booleans, numbers,
 * strings (no value: null); trace values as strings, trace_level as an array, no value: null
 * (clear). *update NULL when the request sets nothing (a query); else the caller's to
 * cJSON_Delete. HARK_OK, HARK_ERR_INVALID_ARG (several values for a one-value trace setting),
 * HARK_ERR_NOMEM. */
struct Inference__LogSettingsRequest;
struct Inference__TraceSettingRequest;
int kserve_grpc_log_update(const struct Inference__LogSettingsRequest *q, struct cJSON **update,
                           hark_err_t *err);
int kserve_grpc_trace_update(const struct Inference__TraceSettingRequest *q, struct cJSON **update,
                             hark_err_t *err);

/* ---- client side -------------------------------------------------------------------------- */
/* An HTTP infer body (as kserve_build_request makes it: JSON header + binary blobs) as a
 * serialized ModelInferRequest for `model`/`version`: inputs as raw_input_contents, parameters as
 * typed InferParameters (integers int64, other numbers double), requested outputs by name.
 * *msg is hark_malloc'd. HARK_OK, or kserve_parse_request's errors, HARK_ERR_NOMEM. */
int kserve_grpc_pack_request(const char *model, const char *version, const uint8_t *body,
                             size_t len, size_t header_len, uint8_t **msg, size_t *msg_len,
                             hark_err_t *err);
/* A serialized ModelInferResponse as a kserve_parsed_response_t (outputs copied into its arena;
 * json NULL); free it with kserve_parsed_response_free. HARK_OK, HARK_ERR_FORMAT, HARK_ERR_NOMEM.
 */
int kserve_grpc_parse_response(const uint8_t *msg, size_t len, kserve_parsed_response_t *out,
                               hark_err_t *err);

/* ---- the RPC handlers (kserve_grpc.c) ------------------------------------------------------ */
typedef struct server server_t;
typedef struct http2_server http2_server_t;
typedef struct uv_loop_s uv_loop_t;

typedef struct {
    const char *host;
    int port;             /* 0: ephemeral (kserve_grpc_port) */
    size_t max_message;   /* largest request message; default 64 MiB */
    unsigned max_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS; default 100 */
    unsigned max_connections;
    unsigned idle_timeout_ms; /* connection without streams closed; default 300 s */
    int reuse_port;           /* NET_REUSE_* (net/listen.h): one port served by several loops */
} kserve_grpc_opts_t;

typedef struct kserve_grpc kserve_grpc_t;

/* Listens on `loop` and serves the RPCs through service.h. HARK_OK or HARK_ERR_IO. */
int kserve_grpc_create(uv_loop_t *loop, server_t *s, const kserve_grpc_opts_t *o,
                       kserve_grpc_t **out, hark_err_t *err);
int kserve_grpc_port(const kserve_grpc_t *g);
/* Graceful: GOAWAY, in-flight RPCs finish within deadline_ms, then everything closes. Any thread.
 */
void kserve_grpc_shutdown(kserve_grpc_t *g, unsigned deadline_ms);
/* After the loop has run the shutdown to completion; NULL ok. */
void kserve_grpc_destroy(kserve_grpc_t *g);

#endif
