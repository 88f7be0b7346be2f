/* kserve.h — the KServe v2 / Triton HTTP inference codec as pure functions (no sockets): infer
 * request parsing (JSON + binary-tensor extension), response building, metadata/stats JSON.
 * Tests: tests/api/test_kserve.c; fuzz: tests/fuzz/fuzz_kserve_request.c */
#ifndef HARK_NET_KSERVE_H
#define HARK_NET_KSERVE_H

#include "core/arena.h"
#include "core/dtype.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* Ownership
 * - kserve_request_t borrows the body passed to kserve_parse_request: binary tensors point into
 *   it, so the body must outlive the request. Everything else (the parsed JSON header, tensors
 *   converted from JSON `data`, aligned copies) is owned by the request and released by
 *   kserve_request_free().
 * - kserve_response_t owns one hark_malloc'd buffer: the JSON header followed by the binary
 *   blobs, ready to be sent in one write. kserve_response_free() releases it.
 * - The *_json builders return NUL-terminated strings from hark_malloc (hark_free them), or
 *   NULL when out of memory.
 * Data is little-endian on the wire; hark only runs on little-endian hosts. */

/* the element types are core/dtype.h's (one table); the KServe spellings of its values */
typedef dtype_t kserve_dtype_t;
#define KSERVE_INVALID DTYPE_INVALID
#define KSERVE_BOOL DTYPE_BOOL
#define KSERVE_UINT8 DTYPE_UINT8
#define KSERVE_UINT16 DTYPE_UINT16
#define KSERVE_UINT32 DTYPE_UINT32
#define KSERVE_UINT64 DTYPE_UINT64
#define KSERVE_INT8 DTYPE_INT8
#define KSERVE_INT16 DTYPE_INT16
#define KSERVE_INT32 DTYPE_INT32
#define KSERVE_INT64 DTYPE_INT64
#define KSERVE_FP16 DTYPE_FP16
#define KSERVE_FP32 DTYPE_FP32
#define KSERVE_FP64 DTYPE_FP64
#define KSERVE_BYTES DTYPE_BYTES
#define KSERVE_BF16 DTYPE_BF16

/* "FP32" → KSERVE_FP32; KSERVE_INVALID for an unknown name. */
kserve_dtype_t kserve_dtype_parse(const char *name);
const char *kserve_dtype_name(kserve_dtype_t t);
/* Bytes per element; 0 for BYTES (variable) and INVALID. */
size_t kserve_dtype_size(kserve_dtype_t t);

#define KSERVE_MAX_DIMS 32

typedef struct {
    const char *name; /* owned by the request */
    kserve_dtype_t dtype;
    int ndim;
    int64_t shape[KSERVE_MAX_DIMS]; /* each >= 0 */
    int64_t count;                  /* product of shape (1 for ndim 0) */
    /* Raw little-endian elements, `size` bytes. BYTES: each element is a 4-byte little-endian
     * length followed by that many bytes (checked to be exactly `count` elements). May be
     * unaligned when it points into the body: use kserve_tensor_data() for typed access. */
    const uint8_t *data;
    size_t size;
    int binary; /* 1: came as a binary blob after the JSON header; 0: from JSON `data` */
    /* Triton's shared memory extension: shm_region non-NULL when the tensor lies in a registered
     * region (parameters shared_memory_region, shared_memory_offset, shared_memory_byte_size);
     * then data is NULL and size 0 until the service reads it (service_infer). */
    const char *shm_region;
    uint64_t shm_offset, shm_byte_size;
} kserve_tensor_t;

typedef struct {
    const char *name;
    int binary_data; /* -1: not given (use the request's binary_data_output), 0, 1 */
    /* shared memory: the output is written into this region (NULL: none) at shm_offset, at most
     * shm_byte_size bytes; shm_written says how many went there (set by the service before the
     * response is built, which then names the region instead of carrying the data) */
    const char *shm_region;
    uint64_t shm_offset, shm_byte_size, shm_written;
} kserve_output_req_t;

typedef struct {
    /* request header */
    int has_id;
    const char *id; /* "" when absent; echoed only when has_id */
    /* request `parameters`: the raw object (NULL when absent; any JSON values) plus the
     * protocol's own, type-checked. A model's options (e.g. decoding_method) stay in the raw
     * object: the service hands them to the model's family, which checks them. */
    const struct cJSON *parameters;
    int has_sequence_id;
    uint64_t sequence_id;        /* when given as a number */
    const char *sequence_id_str; /* when given as a string (else NULL) */
    int sequence_start, sequence_end;
    int has_priority;
    uint64_t priority;
    int has_timeout;
    uint64_t timeout_us;
    int binary_data_output; /* request-level default for outputs: 0/1 */

    int n_inputs;
    kserve_tensor_t *inputs; /* in the order of the request's inputs[] */
    int n_outputs;
    kserve_output_req_t *outputs; /* the request's outputs[] (0 entries: return all) */

    struct cJSON *json; /* the parsed JSON header (owned) */
    arena_t arena;      /* owns inputs, outputs, converted data */
} kserve_request_t;

/* Parses the value of an `Inference-Header-Content-Length` header: decimal digits only, at most
 * body_len. Returns HARK_OK or HARK_ERR_INVALID_ARG with a message. */
int kserve_parse_header_length(const char *value, size_t n, size_t body_len, size_t *out,
                               hark_err_t *err);

/* Parses an infer request body. header_len is the Inference-Header-Content-Length value, or
 * (size_t)-1 when the header was absent (then the whole body is JSON and no input may be binary).
 * Validates every tensor: known datatype, non-negative shape without overflow, data matching
 * shape × datatype (JSON `data` nested or flat; BYTES elements well-formed), binary blobs in the
 * order of inputs[] consuming the rest of the body exactly. Returns HARK_OK, or
 * HARK_ERR_INVALID_ARG (malformed: the HTTP layer answers 400 {"error": err->msg}),
 * HARK_ERR_UNSUPPORTED (classification: 400 too), HARK_ERR_NOMEM. Inputs and outputs in shared
 * memory are taken (their parameters checked: a region name, byte size and optional offset, and
 * neither data nor binary data nor binary_data: true beside them); reading and writing the
 * regions is the service's.
 * On failure *req holds nothing to free (kserve_request_free is still harmless). */
int kserve_parse_request(const uint8_t *body, size_t body_len, size_t header_len,
                         kserve_request_t *req, hark_err_t *err);
void kserve_request_free(kserve_request_t *req); /* accepts a zeroed or freed request */

/* For transports that build a kserve_request_t themselves (gRPC): fills parameters and the typed
 * fields (sequence_id, sequence_start/end, priority, timeout, binary_data_output) from a JSON
 * object of request parameters, exactly as kserve_parse_request does
 * for the JSON header's "parameters". `params` (NULL: none) must outlive req (make it req->json).
 * HARK_OK or HARK_ERR_INVALID_ARG naming the parameter. */
int kserve_request_finish_params(kserve_request_t *req, const struct cJSON *params,
                                 hark_err_t *err);
/* Checks that t->data[t->size] matches shape × datatype (BYTES: exactly `count` well-formed
 * elements); `what` ("input") names the tensor in the message. HARK_OK or HARK_ERR_INVALID_ARG. */
int kserve_tensor_check(const kserve_tensor_t *t, const char *what, hark_err_t *err);

const kserve_tensor_t *kserve_request_input(const kserve_request_t *req, const char *name);
/* The tensor's elements aligned for their type: the data itself when already aligned, else a
 * copy in the request's arena. NULL for BYTES or when out of memory. */
const void *kserve_tensor_data(kserve_request_t *req, const kserve_tensor_t *t);
/* Copies the tensor into dst (count floats), converting any numeric datatype to float; returns
 * HARK_OK, or HARK_ERR_INVALID_ARG naming the tensor when a value is NaN/Inf (perf_analyzer's
 * random bytes) or the datatype is BYTES. */
int kserve_tensor_to_f32(const kserve_tensor_t *t, float *dst, hark_err_t *err);
/* Index of the first NaN or infinite element of x[n], or n when every element is finite. Works
 * on the bit patterns a block at a time without a branch per element (about memory speed; the
 * plain isfinite loop is 3-5x slower), so a 5 s request costs a few microseconds. */
size_t kserve_f32_find_nonfinite(const float *x, size_t n);
/* Walks BYTES elements: *pos starts at 0; each call yields one element; returns 0 at the end. */
int kserve_bytes_next(const kserve_tensor_t *t, size_t *pos, const uint8_t **elem, size_t *len);

/* ---- responses ---------------------------------------------------------------------------- */
typedef struct {
    const char *name;
    kserve_dtype_t dtype;
    int ndim;
    const int64_t *shape; /* (ndim) */
    const void *data;     /* raw little-endian elements; BYTES: packed (4-byte LE length + bytes)
                             per element (kserve_bytes_pack builds it) */
    size_t size;
} kserve_output_t;

typedef struct {
    uint8_t *body; /* JSON header then the binary blobs (hark_malloc) */
    size_t len;    /* total body length */
    size_t
        header_len; /* JSON length; when binary, send Inference-Header-Content-Length: header_len */
    int binary;     /* some output was written as binary data */
} kserve_response_t;

/* Builds the response to `req` (NULL: no request options; return all outputs as JSON).
 * When the request lists outputs, exactly those are returned in that order (an unknown name is
 * an HARK_ERR_INVALID_ARG error naming it); else all of `outs`. An output is binary when its
 * request entry says binary_data: true, or when it says nothing and the request has
 * binary_data_output: true — BYTES included (WeNet's client needs bytes, not str). An output the
 * request put in shared memory carries "parameters": {"shared_memory_region",
 * "shared_memory_byte_size" (the bytes written), "shared_memory_offset" (when not 0)} and no
 * data. JSON `data`
 * is flat; BYTES elements that are not UTF-8 have the bad bytes replaced by U+FFFD. The shape ×
 * datatype must match `size` (checked: HARK_ERR_INTERNAL names the output). */
int kserve_build_response(const kserve_request_t *req, const char *model_name,
                          const char *model_version, const kserve_output_t *outs, int n_outs,
                          kserve_response_t *resp, hark_err_t *err);
void kserve_response_free(kserve_response_t *resp);

/* Packs n strings as BYTES elements into a hark_malloc'd buffer (*size bytes). */
uint8_t *kserve_bytes_pack(const char *const *strs, const size_t *lens, int n, size_t *size);

/* A parsed infer response (client side, and for round-trip tests). Same ownership as a request:
 * binary outputs point into the body. */
typedef struct {
    const char *model_name, *model_version, *id; /* "" when absent */
    int n_outputs;
    kserve_tensor_t *outputs;
    struct cJSON *json;
    arena_t arena;
} kserve_parsed_response_t;

int kserve_parse_response(const uint8_t *body, size_t body_len, size_t header_len,
                          kserve_parsed_response_t *resp, hark_err_t *err);
void kserve_parsed_response_free(kserve_parsed_response_t *resp);

/* ---- client side: infer requests ----------------------------------------------------------- */
/* A request parameter: a string when `str` is non-NULL, else a boolean (true when num != 0) when
 * `boolean`, else the number `num` (written as an integer when it is one). */
typedef struct {
    const char *name;
    const char *str;
    double num;
    int boolean;
} kserve_param_t;

typedef struct {
    const char *id;                /* NULL: no "id" */
    const kserve_output_t *inputs; /* (n_inputs) named tensors, all sent as binary blobs */
    int n_inputs;
    const char *const *outputs; /* (n_outputs) names, each asked for with binary_data: true */
    int n_outputs;
    const kserve_param_t *params; /* (n_params) request "parameters"; 0: none */
    int n_params;
} kserve_request_spec_t;

/* Builds an infer request body with the binary-tensor extension: the JSON header, then each
 * input's raw bytes in order (each tensor's shape x datatype must match its size; BYTES must be
 * well-formed packed elements). Fills out->body (hark_malloc), out->len, out->header_len (send
 * it as Inference-Header-Content-Length) and out->binary = 1; free with kserve_response_free.
 * Returns HARK_OK, HARK_ERR_INVALID_ARG naming the bad tensor or parameter, or HARK_ERR_NOMEM. */
int kserve_build_request(const kserve_request_spec_t *spec, kserve_response_t *out,
                         hark_err_t *err);

/* ---- other endpoints ---------------------------------------------------------------------- */
/* {"error": "<msg>"} */
char *kserve_error_json(const char *msg);
/* GET /v2: {"name", "version", "extensions": [...]} */
char *kserve_server_metadata_json(const char *name, const char *version,
                                  const char *const *extensions, int n_extensions);

typedef struct {
    const char *name;
    const char *datatype; /* KServe spelling: "FP32", "BYTES" */
    int ndim;
    const int64_t *dims; /* (ndim) without the batch dimension; -1 = variable */
} kserve_tensor_meta_t;

typedef struct {
    const char *name;
    const char *const *versions; /* (n_versions) */
    int n_versions;
    const char *platform;
    int max_batch_size; /* > 0: every shape gets a leading -1 batch dimension */
    const kserve_tensor_meta_t *inputs, *outputs;
    int n_inputs, n_outputs;
} kserve_model_meta_t;

/* GET /v2/models/<m>[/versions/<v>]: {"name", "versions", "platform", "inputs", "outputs"} */
char *kserve_model_metadata_json(const kserve_model_meta_t *m);

typedef struct {
    uint64_t count, ns;
} kserve_duration_t;

typedef struct {
    uint64_t batch_size;
    kserve_duration_t compute_input, compute_infer, compute_output;
} kserve_batch_stats_t;

typedef struct {
    const char *name;
    const char *version;      /* written as a JSON string, as Triton does */
    uint64_t last_inference;  /* milliseconds since the epoch, 0: never */
    uint64_t inference_count; /* inferences (batch items) */
    uint64_t execution_count; /* model executions (batches) */
    kserve_duration_t success, fail, queue, compute_input, compute_infer, compute_output, cache_hit,
        cache_miss;
    int n_batch_stats;
    const kserve_batch_stats_t *batch_stats;
} kserve_model_stats_t;

/* GET /v2/models[/<m>]/stats: {"model_stats": [...]}, every counter a JSON integer (exact up to
 * 2^64-1). */
char *kserve_stats_json(const kserve_model_stats_t *stats, int n);

#endif
