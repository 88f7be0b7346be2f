/* family.h — the one interface every model family implements (WeNet, icefall, Jasper, TTS,
 * vocoders, VAD), after Triton's backend API: an immutable model shared per device, workers that
 * own their scratch, and `execute` over a batch of items of one batch key. The scheduler, the
 * server, the CLI and the public C API (include/hark.h) know tasks and batch keys, never a family.
 * The registry (registry.c) lists the families; config.pbtxt's parameters { key: "family" } or
 * the model's model.json picks one.
 * Tests: tests/model/test_family.c (the registry, params), tests/sched/test_instance.c (a test
 * family drives the batcher and instances), tests/model/wenet/ (the WeNet family)
 *
 * OWNERSHIP AND THREADS
 * - family_model_t: made by load, immutable afterwards, shared by any number of workers and
 *   threads; unload releases it once no worker of it is left.
 * - family_worker_t: one thread's mutable state (device streams, scratch). worker_create sizes
 *   all of its scratch for (max_batch, max_seconds); execute then does not allocate on the device.
 * - family_item_t: the caller's. execute is lent the items for the call; it reports each item's
 *   results through item->emit (zero or more partial events, then exactly one DONE) before it
 *   returns, on the calling thread. The event's payload is lent to emit for that call only: emit
 *   copies what it keeps (asr_result_copy) or takes it with asr_result_take.
 * - params: key/value strings, lent for the call.
 */
#ifndef HARK_MODEL_FAMILY_H
#define HARK_MODEL_FAMILY_H

#include "core/error.h"
#include "ops/ops_cuda.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    FAMILY_TASK_ASR = 1, /* offline recognition: PCM in, text out */
    FAMILY_TASK_TTS = 2, /* text in, PCM out */
    FAMILY_TASK_VAD = 3, /* PCM in, speech segments out */
} family_task_t;

const char *family_task_name(family_task_t t); /* "asr", "tts", "vad" */

/* ---- parameters: config.pbtxt `parameters`, request parameters, CLI options -------------- */
typedef struct {
    const char *key, *value; /* numbers and booleans as text ("10", "0.5", "true") */
} family_param_t;

typedef struct {
    const family_param_t *p; /* (n) */
    int n;
} family_params_t;

/* The value of `key` (the last one given wins), or NULL. params may be NULL. */
const char *family_param(const family_params_t *params, const char *key);
/* A precision's name ("fp32", "fp16", "bf16") into *dt: 0, or -1 (*dt unchanged) for another
 * name. */
int family_precision(const char *name, ops_dtype_t *dt);
/* Typed look-ups: HARK_OK (set *out), HARK_ERR_NOT_FOUND (absent: *out untouched), or
 * HARK_ERR_INVALID_ARG naming the key and the value that is not a number / boolean. */
int family_param_int(const family_params_t *params, const char *key, long lo, long hi, int *out,
                     hark_err_t *err);
/* The streaming families' endpointing keys (endpointing, continuous_decoding: true | false;
 * endpoint_silence_no_speech_ms, endpoint_silence_after_speech_ms, endpoint_max_utterance_ms:
 * rule 1 and 2's trailing silence, rule 3's length) from params into *endpointing, *continuous
 * and rule[3] (ctc_endpoint_rule_t, search/ctc_endpoint.h), keys left out leaving them as they
 * are; HARK_ERR_INVALID_ARG naming the key (after `where`) for a bad value. */
struct ctc_endpoint_rule;
int family_endpoint_params(const family_params_t *params, const char *where, int *endpointing,
                           int *continuous, struct ctc_endpoint_rule *rule, hark_err_t *err);
int family_param_double(const family_params_t *params, const char *key, double *out,
                        hark_err_t *err);
/* "true"/"false" or "yes"/"no" (any case), or "1"/"0". */
int family_param_bool(const family_params_t *params, const char *key, int *out, hark_err_t *err);

/* ---- results ---------------------------------------------------------------------------- */
typedef struct {
    char *text;
    int start_ms, end_ms;
} asr_word_t;

typedef struct {
    char *text;
    int *tokens;   /* (n_tokens) unit ids */
    int *times_ms; /* (n_tokens) start of each token, ms from the start of the audio */
    int n_tokens;
    double score;
} asr_hyp_t;

/* One recognition result. Every pointer is owned by the result (asr_result_free). */
typedef struct {
    asr_hyp_t best;
    asr_hyp_t *nbest; /* (n_nbest): beam methods' n-best; 0 entries otherwise */
    int n_nbest;
    asr_word_t *words; /* (n_words) words of best with times, when the item asked for them */
    int n_words;
    double confidence;
    double duration_s; /* of the audio recognised */
    int word_sep;      /* 1: words are joined by spaces (BPE/English); 0: not (characters) */
    int *frame_ids;    /* (n_frames) CTC families, when the item asked for them: the argmax unit
                          of every output frame, blanks and repeats kept (what a Triton greedy
                          decoder model returns); NULL otherwise */
    int n_frames;
} asr_result_t;

/* A family's model.json (at most 16 MiB), parsed: *out is its top-level object (cJSON_Delete).
 * HARK_ERR_IO naming the file (missing: "not a converted model directory?"), HARK_ERR_FORMAT
 * when too large or not a JSON object, HARK_ERR_NOMEM. */
struct cJSON;
int family_read_model_json(const char *path, struct cJSON **out, hark_err_t *err);
/* "DIR/VERSION/NAME" into path (n bytes); a version <= 0 means the highest numeric version
 * folder that holds a model.json (Triton's default policy, as hark serve), 1 when there is none. */
void family_version_path(const char *dir, int version, const char *name, char *path, size_t n);
/* The highest numeric DIR/<v>/ holding a model.json, or 0. */
int family_latest_version(const char *dir);
/* What a user named as a model, into the model-repository entry (entry, n bytes) and *version:
 * an entry (DIR/<v>/model.json: *version 0, the highest), one of its version folders (*version
 * that folder's number), or a repository holding exactly one entry. Anything else is
 * HARK_ERR_IO with what was expected: a WeNet checkpoint (final.pt, or its folder) is told
 * to be converted with tools/convert_wenet.py first, a repository of several models lists them. */
int family_resolve_dir(const char *arg, char *entry, size_t n, int *version, hark_err_t *err);
/* family_read_model_json of DIR/VERSION/model.json, that path left in path (for messages). */
int family_open_model_json(const char *dir, int version, char *path, size_t n, struct cJSON **out,
                           hark_err_t *err);

void asr_result_free(asr_result_t *r); /* frees what r owns and zeroes it; NULL-safe */
/* Deep copy; HARK_ERR_NOMEM leaves *dst zeroed. */
int asr_result_copy(asr_result_t *dst, const asr_result_t *src);

typedef enum {
    FAMILY_EV_PARTIAL = 1, /* asr: a partial result (streaming) */
    FAMILY_EV_AUDIO = 2,   /* tts: a chunk of PCM */
    FAMILY_EV_SEGMENT = 3, /* vad: one speech segment; asr streams: a segment ended by an
                              endpoint, with its final result (asr) and its span */
    FAMILY_EV_DONE = 4,    /* last event of an item: status, and the final asr result */
} family_event_kind_t;

typedef struct {
    family_event_kind_t kind;
    int status;        /* DONE: HARK_OK or the item's error */
    const char *error; /* DONE with an error: the message */
    asr_result_t *asr; /* PARTIAL/DONE of an asr item: lent, or taken by asr_result_take */
    const float *pcm;  /* AUDIO: (n) samples at sample_rate */
    size_t n;
    int sample_rate;
    double seg_start_s, seg_end_s; /* SEGMENT */
} family_event_t;

/* Moves the lent result out of an event (into *dst; the event keeps an empty result). */
void asr_result_take(asr_result_t *dst, asr_result_t *src);

/* ---- items ------------------------------------------------------------------------------ */
typedef struct family_item family_item_t;
typedef void (*family_emit_fn)(family_item_t *item, const family_event_t *ev);

struct family_item {
    const void *opts; /* parse_opts's output for this item's request (opts_size bytes) */
    const float *pcm; /* asr/vad: (n) samples in [-1, 1] at the model's sample rate; lent */
    size_t n;
    const char *text;     /* tts: UTF-8, NUL-terminated; lent */
    int want_words;       /* asr: fill asr_result_t.words */
    int want_frame_ids;   /* asr: fill asr_result_t.frame_ids (families with a FRAME_IDS
                             contract; the others ignore it) */
    const char *dump_dir; /* debug (C API / CLI only; the server leaves it NULL): a family that
                             can writes this item's intermediate stages as DIR/<stage>.npy; one
                             that cannot fails the item with HARK_ERR_UNSUPPORTED. Lent. */
    family_emit_fn emit;
    void *user;
    /* streaming (families with stream_open): the stream this item feeds, from stream_open, or
     * NULL for an offline item. pcm/n are the stream's next audio (n may be 0); the stream's
     * decoding options are those of its first item (the START request's: later items' opts are
     * not read). execute runs every chunk the audio completes and reports a PARTIAL result, then
     * DONE without a result; the item with stream_end = 1 (the audio ends with it) gets the final
     * result with its DONE instead. A stream has at most one item in an execute. */
    void *stream;
    int stream_end;
};

/* Times of one execute call, in nanoseconds (Triton's compute input / infer / output). */
typedef struct {
    uint64_t input_ns, infer_ns, output_ns;
} family_exec_times_t;

/* ---- what the server asks of a loaded model -------------------------------------------- */
typedef struct {
    int sample_rate;  /* asr/vad input, tts output */
    int frame_ms;     /* asr: encoder frame length (0: unknown) */
    int device;       /* -1: CPU */
    const char *kind; /* human description of the architecture */
    int frame_pad_id; /* asr with a FRAME_IDS contract: the id that pads shorter rows of a batch
                         (the CTC blank, which greedy decoding drops) */
} family_info_t;

/* ---- I/O contracts ---------------------------------------------------------------------- */
/* Every ASR family is served under the generic contract: WAV (FP32 [batch, samples]) + WAV_LENS
 * (INT32 [batch, 1]) or AUDIO (BYTES [batch], encoded files) -> TRANSCRIPTS (BYTES [batch, 1]).
 * A family may list further contracts its original serving stack used (e.g. DLE's Triton
 * ensemble), so those clients work unchanged. The server picks the contract whose audio input
 * the request names; the family code never sees the wire. */
typedef enum {
    FAMILY_OUT_TEXT = 0,      /* BYTES [batch, 1]: the best text */
    FAMILY_OUT_FRAME_IDS = 1, /* INT32 [batch, frames]: asr_result_t.frame_ids, shorter rows
                                 padded with family_info_t.frame_pad_id */
} family_out_kind_t;

typedef struct {
    const char *audio;     /* input: samples in [-1, 1], FP32 or FP16, [batch, samples] */
    const char *n_samples; /* input: INT32 [batch, 1], samples of each row (NULL: none) */
    const char *output;    /* the one output */
    family_out_kind_t out;
} family_io_t;

typedef struct {
    int device;            /* -1: CPU, else the CUDA device */
    const char *precision; /* "fp32" (NULL too), "fp16", "bf16"; families refuse what they lack */
    int version;           /* model version directory DIR/<version>/; 0 means 1 */
} family_load_opts_t;

/* Debug dumps (family_item_t.dump_dir): family_dump_f32 writes one stage as
 * DIR/<prefix><name>.npy (rows x cols float32); a failed write sets `failed`. user: a
 * family_dump_t. family_mkdir_p creates dir and its parents (HARK_ERR_IO naming the one it
 * could not make). */
typedef struct {
    const char *dir;
    const char *prefix; /* NULL: none */
    int failed;
} family_dump_t;
void family_dump_f32(void *user, const char *name, const float *data, int rows, int cols);
int family_mkdir_p(const char *dir, hark_err_t *err);

/* The vocoder a TTS model's config.pbtxt names in parameters { key: "vocoder" } — absolute, or
 * relative to the model repository (dir's parent) — into vdir[cap] (HARK_ERR_INVALID_ARG, naming
 * `name`, when none is named). */
int family_tts_vocoder_path(const char *name, const char *dir, const family_params_t *cfg,
                            char *vdir, size_t cap, hark_err_t *err);
/* The model named by config.pbtxt's parameter `key` (absolute, or relative to the repository:
 * dir's parent) into out[cap]; HARK_ERR_INVALID_ARG when none is named (`name` prefixes the
 * message). The vocoder of a TTS model, the endpoint VAD of a streaming recogniser. */
int family_model_path(const char *name, const char *dir, const family_params_t *cfg,
                      const char *key, char *out, size_t cap, hark_err_t *err);

typedef struct {
    int max_batch;      /* items in one execute */
    double max_seconds; /* longest audio of one item */
    int n_threads;      /* CPU workers: BLAS threads (0: leave the setting) */
    int max_sequences;  /* streaming families: streams open at once on this worker (their state
                           is sized at worker_create; 0: no streams) */
} family_worker_opts_t;

typedef struct family_model family_model_t;   /* defined by each family */
typedef struct family_worker family_worker_t; /* defined by each family */

typedef struct family {
    const char *name; /* config.pbtxt / model.json name of the family */
    family_task_t task;
    int streaming;    /* served under sequence_batching */
    size_t opts_size; /* bytes of one request's parsed options */

    int (*load)(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                family_model_t **out, hark_err_t *err);
    void (*unload)(family_model_t *m); /* accepts NULL */
    void (*info)(const family_model_t *m, family_info_t *out);
    /* Request options over the model's defaults (cfg: config.pbtxt parameters, then req: the
     * request's own); fills opts (opts_size bytes). Loop thread; must not block.
     * HARK_ERR_INVALID_ARG names the parameter. */
    int (*parse_opts)(const family_model_t *m, const family_params_t *cfg,
                      const family_params_t *req, void *opts, hark_err_t *err);
    /* Items whose options give equal keys may run in one execute. */
    uint64_t (*batch_key)(const void *opts);
    int (*worker_create)(const family_model_t *m, const family_worker_opts_t *wo,
                         family_worker_t **out, hark_err_t *err);
    void (*worker_destroy)(family_worker_t *w); /* accepts NULL */
    /* Families that stream (NULL otherwise; `streaming` says whether the server serves the
     * family under sequence_batching only). stream_open takes one of the worker's max_sequences
     * stream slots (HARK_ERR_TOO_LARGE when all are taken, HARK_ERR_UNSUPPORTED for a model that
     * cannot stream); stream_close gives it back and frees the stream's state (accepts NULL). A
     * stream is used on its worker's thread only. */
    int (*stream_open)(family_worker_t *w, void **stream, hark_err_t *err);
    void (*stream_close)(family_worker_t *w, void *stream);
    /* Runs n items of one batch key; every item gets exactly one DONE event through its emit
     * before execute returns, whatever the status. Returns HARK_OK, or the error all items failed
     * with (HARK_ERR_CUDA marks the instance unhealthy). times may be NULL. */
    int (*execute)(family_worker_t *w, family_item_t *const *items, int n,
                   family_exec_times_t *times, hark_err_t *err);
    /* Optional command-line tools (NULL: the family has none): `hark bench` and `hark inspect`
     * hand their argv (argv[0] the subcommand) to the family of --model DIR / MODEL_DIR, or for
     * `hark bench --synthetic NAME` to the family listing NAME in bench_synthetic (NULL-ended).
     * They return the process exit status. */
    int (*bench)(int argc, char **argv);
    int (*inspect)(int argc, char **argv);
    const char *const *bench_synthetic;
    /* Contracts besides the generic one (see family_io_t); NULL-name-terminated, or NULL. */
    const family_io_t *io;
} family_t;

/* ---- the registry ----------------------------------------------------------------------- */
/* The family called `name`, or NULL. */
const family_t *family_find(const char *name);
/* All registered families, NULL-terminated. */
const family_t *const *family_list(void);
/* The family of a model directory DIR (version `version`, 0 = 1): the "family" key of
 * DIR/<version>/model.json (the WeNet family when absent: models converted before the key).
 * HARK_ERR_NOT_FOUND names an unknown family; HARK_ERR_IO / HARK_ERR_FORMAT the file. */
int family_of_dir(const char *dir, int version, const family_t **out, hark_err_t *err);
/* Tests register extra families (up to 8) before anything looks one up. */
void family_register_test(const family_t *f);

#endif
