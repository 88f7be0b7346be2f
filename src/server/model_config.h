/* model_config.h — Triton `config.pbtxt` for hark's model repository: a protobuf text-format
 * parser (generic tree), its mapping onto model_config_t, and the `GET /v2/models/<m>/config` JSON.
 * Tests: tests/server/test_model_config.c; fuzz: tests/fuzz/fuzz_model_config.c */
#ifndef HARK_SERVER_MODEL_CONFIG_H
#define HARK_SERVER_MODEL_CONFIG_H

#include "core/arena.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

/* Why a parser of our own: none of hark's C dependencies reads protobuf *text* format (protobuf-c
 * only handles the binary wire format and has no descriptors for Triton's ModelConfig anyway), so
 * a compact tokenizer + recursive-descent parser (~400 lines) is cheaper than linking C++
 * libprotobuf. It accepts the text format as protoc writes and Triton reads it: `#` comments,
 * `field: value`, `field { ... }`, `field: { ... }`, `field < ... >`, `field: [a, b]` lists,
 * `field [ {..}, {..} ]`, `,`/`;` separators, single/double quoted strings with C escapes
 * (adjacent literals concatenate), decimal/hex/octal ints, floats, identifiers (enums, bools).
 *
 * Ownership: every node and string lives in the arena passed to pbtxt_parse; nothing is freed
 * separately. model_config_t owns an arena holding all of its strings and arrays:
 * model_config_free() releases everything at once. */

/* ---- generic protobuf text-format tree ----------------------------------------------------- */
typedef enum {
    PBTXT_MESSAGE, /* `{ ... }`: child = first field */
    PBTXT_LIST,    /* `[ a, b ]`: child = first element (elements carry the list's name) */
    PBTXT_STRING,  /* str/len: the decoded bytes (NUL-terminated; may contain NULs) */
    PBTXT_NUMBER,  /* str: token text incl. a leading '-' ("-1", "0x1f", "2.5e3", "-inf") */
    PBTXT_IDENT,   /* str: identifier (enum value, true/false, inf, nan) */
} pbtxt_kind_t;

typedef struct pbtxt_node {
    pbtxt_kind_t kind;
    const char *name; /* field name; "" for the root */
    int line, col;    /* 1-based position of the field name (or of a list element) */
    int vline, vcol;  /* position of the value (for a list element: the element) */
    const char *str;  /* STRING / NUMBER / IDENT */
    size_t len;
    struct pbtxt_node *child; /* MESSAGE / LIST */
    struct pbtxt_node *next;  /* next field of the same message / next list element */
} pbtxt_node_t;

/* Parses `len` bytes of text format into a tree allocated in `arena`. `path` only names the
 * file in messages ("path:line:col: expected ':' or '{' after field name 'x'").
 * Returns HARK_OK with *root a PBTXT_MESSAGE, or HARK_ERR_FORMAT. Nesting is limited to 64. */
int pbtxt_parse(const char *text, size_t len, const char *path, arena_t *arena, pbtxt_node_t **root,
                hark_err_t *err);

/* Scalar conversions; each returns 0 on success, -1 if the node does not hold that type.
 * Integers accept decimal, 0x hex and 0-prefixed octal; bools accept true/false/True/False/t/f
 * and 0/1. */
int pbtxt_to_i64(const pbtxt_node_t *n, int64_t *out);
int pbtxt_to_u64(const pbtxt_node_t *n, uint64_t *out);
int pbtxt_to_double(const pbtxt_node_t *n, double *out);
int pbtxt_to_bool(const pbtxt_node_t *n, int *out);

/* ---- Triton ModelConfig, the fields hark uses --------------------------------------------- */
typedef enum { /* values as in Triton's model_config.proto DataType */
               MODEL_TYPE_INVALID = 0,
               MODEL_TYPE_BOOL,
               MODEL_TYPE_UINT8,
               MODEL_TYPE_UINT16,
               MODEL_TYPE_UINT32,
               MODEL_TYPE_UINT64,
               MODEL_TYPE_INT8,
               MODEL_TYPE_INT16,
               MODEL_TYPE_INT32,
               MODEL_TYPE_INT64,
               MODEL_TYPE_FP16,
               MODEL_TYPE_FP32,
               MODEL_TYPE_FP64,
               MODEL_TYPE_STRING,
               MODEL_TYPE_BF16,
} model_data_type_t;

typedef enum { MODEL_KIND_AUTO = 0, MODEL_KIND_GPU, MODEL_KIND_CPU, MODEL_KIND_MODEL } model_kind_t;
typedef enum { MODEL_TIMEOUT_REJECT = 0, MODEL_TIMEOUT_DELAY } model_timeout_action_t;
typedef enum {
    MODEL_VERSIONS_LATEST = 0,
    MODEL_VERSIONS_ALL,
    MODEL_VERSIONS_SPECIFIC
} model_version_policy_t;

typedef struct {
    const char *name;
    model_data_type_t data_type;
    int ndims;
    int64_t *dims; /* (ndims) each >= 1 or -1 (variable); excludes the batch dimension */
    int line;      /* where the entry starts in config.pbtxt */
} model_io_t;

typedef struct {
    model_timeout_action_t timeout_action;
    uint64_t default_timeout_microseconds; /* 0: none */
    int allow_timeout_override;
    uint32_t max_queue_size; /* 0: unlimited */
} model_queue_policy_t;

typedef struct {
    int present; /* a `dynamic_batching { }` block was given */
    int n_preferred;
    int32_t *preferred_batch_size; /* (n_preferred) each in [1, max_batch_size] */
    uint64_t max_queue_delay_microseconds;
    int preserve_ordering;
    uint64_t priority_levels;        /* 0: priorities off */
    uint64_t default_priority_level; /* in [1, priority_levels] when priority_levels > 0 */
    model_queue_policy_t default_queue_policy;
} model_dynamic_batching_t;

typedef struct {
    const char *name; /* "<model>_<index>" when the file gives none */
    int count;        /* >= 1 (0 or absent means 1, as in Triton) */
    model_kind_t kind;
    int n_gpus;
    int32_t *gpus; /* (n_gpus) device ids >= 0; empty: every GPU (KIND_GPU) */
} model_instance_group_t;

typedef struct {
    const char *key, *value; /* parameters { key: "k" value { string_value: "v" } } */
} model_param_t;

typedef struct {
    const char *name;     /* "" when absent (model_config_load fills in the directory name) */
    const char *platform; /* "" when absent */
    const char *backend;  /* "" when absent */
    const char *family;   /* the hark model family: parameters["family"] when backend is "hark",
                             else platform when no backend is given, else NULL (not a hark model) */
    int max_batch_size;   /* >= 0; 0: the model does not batch (no leading batch dim) */
    int n_inputs, n_outputs;
    model_io_t *inputs, *outputs;
    model_dynamic_batching_t dynamic_batching;
    int n_instance_groups;
    model_instance_group_t *instance_groups; /* Triton's default when absent: one KIND_AUTO group */
    int n_params;
    model_param_t *params; /* in file order, keys unique */
    model_version_policy_t version_policy;
    uint32_t latest_num_versions; /* LATEST: >= 1 (default 1) */
    int n_specific_versions;
    int64_t *specific_versions;              /* SPECIFIC: (n_specific_versions) each >= 1 */
    int sequence_batching;                   /* a `sequence_batching { }` block was given */
    uint64_t max_sequence_idle_microseconds; /* Triton's default 1000000 when not given */
    int decoupled;                           /* model_transaction_policy.decoupled */
    int response_cache;                      /* response_cache.enable */
    arena_t arena;                           /* owns every pointer above */
} model_config_t;

/* Called once per ignored Triton field path (e.g. "optimization", "input.reshape") with a
 * ready line "config.pbtxt:12: ignoring field 'optimization'". Must not keep `msg`. */
typedef void (*model_config_notice_fn)(void *user, const char *msg);

typedef struct {
    model_config_notice_fn notice; /* NULL: LOG_WARN the line */
    void *user;
} model_config_opts_t;

/* Parses and validates config text. `path` names the file in every message. Errors
 * (HARK_ERR_FORMAT for syntax/types/unknown fields, HARK_ERR_INVALID_ARG for out-of-range or
 * inconsistent values) read "path:line:col: field 'instance_group.count': must be >= 0, got -1".
 * On success the caller owns *cfg (model_config_free); on failure *cfg holds nothing to free.
 * opts may be NULL. */
int model_config_parse(const char *text, size_t len, const char *path,
                       const model_config_opts_t *opts, model_config_t *cfg, hark_err_t *err);
/* Reads and parses a file (at most 16 MiB); an absent `name` becomes the name of the directory
 * holding the file, as in Triton's model repository. HARK_ERR_IO if it cannot be read. */
int model_config_load(const char *path, const model_config_opts_t *opts, model_config_t *cfg,
                      hark_err_t *err);
void model_config_free(model_config_t *cfg); /* accepts a zeroed or freed config */

/* parameters[key] or NULL. */
const char *model_config_param(const model_config_t *cfg, const char *key);
const model_io_t *model_config_input(const model_config_t *cfg, const char *name);
const model_io_t *model_config_output(const model_config_t *cfg, const char *name);

/* "TYPE_FP32" (config spelling) and "FP32" (KServe v2 spelling; TYPE_STRING is "BYTES"). */
const char *model_data_type_name(model_data_type_t t);
const char *model_data_type_kserve(model_data_type_t t);
/* Element size in bytes; 0 for STRING/INVALID. */
size_t model_data_type_size(model_data_type_t t);

/* The config as Triton serialises it for `GET /v2/models/<m>/config`: proto3 JSON with the
 * proto's field names and defaults printed, 64-bit integers as JSON numbers (Triton rewrites
 * protobuf's quoted int64s into numbers for dims, delays and timeouts). Returns a NUL-terminated
 * string from hark_malloc (caller hark_free's it) or NULL when out of memory. */
char *model_config_to_json(const model_config_t *cfg);

#endif
