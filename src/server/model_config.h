/* model_config.h — Triton `config.pbtxt` for hark's model repository: the ModelConfig schema over
 * the text-format tree of core/pbtxt.h, its mapping onto model_config_t, and the
 * `GET /v2/models/<m>/config` JSON.
 * Tests: tests/server/test_model_config.c; fuzz: tests/fuzz/fuzz_model_config.c */
#ifndef HARK_SERVER_MODEL_CONFIG_H
#define HARK_SERVER_MODEL_CONFIG_H

#include "core/arena.h"
#include "core/dtype.h"
#include "core/pbtxt.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

/* Ownership: model_config_t owns an arena holding all of its strings and arrays:
 * model_config_free() releases everything at once. */

/* ---- Triton ModelConfig, the fields hark uses --------------------------------------------- */
/* the element types are core/dtype.h's (one table); config.pbtxt's spellings of its values */
typedef dtype_t model_data_type_t;
#define MODEL_TYPE_INVALID DTYPE_INVALID
#define MODEL_TYPE_BOOL DTYPE_BOOL
#define MODEL_TYPE_UINT8 DTYPE_UINT8
#define MODEL_TYPE_UINT16 DTYPE_UINT16
#define MODEL_TYPE_UINT32 DTYPE_UINT32
#define MODEL_TYPE_UINT64 DTYPE_UINT64
#define MODEL_TYPE_INT8 DTYPE_INT8
#define MODEL_TYPE_INT16 DTYPE_INT16
#define MODEL_TYPE_INT32 DTYPE_INT32
#define MODEL_TYPE_INT64 DTYPE_INT64
#define MODEL_TYPE_FP16 DTYPE_FP16
#define MODEL_TYPE_FP32 DTYPE_FP32
#define MODEL_TYPE_FP64 DTYPE_FP64
#define MODEL_TYPE_STRING DTYPE_BYTES
#define MODEL_TYPE_BF16 DTYPE_BF16

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

typedef enum {
    MODEL_CONTROL_START = 0,
    MODEL_CONTROL_READY,
    MODEL_CONTROL_END,
    MODEL_CONTROL_CORRID
} model_seq_control_kind_t;

typedef struct {
    const char *name; /* the input Triton would fill with the control */
    model_seq_control_kind_t kind;
    model_data_type_t data_type; /* CORRID's */
} model_seq_control_t;

/* sequence_batching's strategy (direct { } when none is given, as Triton) and controls */
typedef struct {
    int oldest;                  /* 1: oldest { }; 0: direct { } */
    int max_candidate_sequences; /* oldest: sequences open at once per instance (>= 1) */
    int n_preferred;
    int32_t *preferred_batch_size; /* (n_preferred) oldest, ascending */
    uint64_t max_queue_delay_microseconds;
    int n_controls;
    model_seq_control_t *controls; /* (n_controls) */
} model_sequence_batching_t;

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
    model_sequence_batching_t seq;           /* when sequence_batching */
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
 * inconsistent values) read "path:line:col: field 'instance_group.count': must be >= 1 (...), got
 * 0". On success the caller owns *cfg (model_config_free); on failure *cfg holds nothing to free.
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
/* The vocoder the TTS model in model_dir names in its config.pbtxt (parameters { key: "vocoder"
 * }): a directory, absolute or relative to the model repository (model_dir's parent), into
 * out[n]. HARK_ERR_IO / HARK_ERR_FORMAT (config.pbtxt), HARK_ERR_NOT_FOUND (no vocoder named). */
int model_config_vocoder_dir(const char *model_dir, char *out, size_t n, hark_err_t *err);
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
