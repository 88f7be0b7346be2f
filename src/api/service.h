/* service.h — the KServe v2 operations of a running server, independent of any transport: the
 * HTTP/1.1 handlers (api/kserve_http.c), gRPC (api/kserve_grpc.c) and the OpenAI handler call
 * these and serialise what comes back in their own wire format. Implemented by the server
 * (server/server.c, over the model repository and the scheduler).
 * Tests: tests/server/test_server.py, tests/server/test_grpc.py (through both transports)
 *
 * OWNERSHIP AND THREADS
 * - Every function is called on a transport's loop thread and never blocks it for long (no model
 *   load, no inference: those complete later through callbacks).
 * - JSON documents returned in *json are hark_malloc'd, NUL-terminated, the caller's to hark_free.
 * - service_infer takes the parsed request (its kserve_request_t and the body it borrows) and
 *   calls done exactly once, on some thread (an instance's, or the calling loop's for an early
 *   error, possibly before service_infer returns). The outputs passed to done are lent for that
 *   call only: a transport serialises them there and queues the bytes to its own loop (inference
 *   threads never write a connection). After done, the service holds nothing of the request.
 * Errors: HARK_ERR_NOT_FOUND (model/version), HARK_ERR_INVALID_ARG (bad request; the message says
 * which input), HARK_ERR_UNAVAILABLE (not ready, draining), HARK_ERR_AGAIN (queue full),
 * HARK_ERR_TIMEOUT (queued past its timeout), HARK_ERR_CANCELLED (the client went away),
 * HARK_ERR_TOO_LARGE. service_status_http maps them to HTTP; gRPC maps them to its codes.
 */
#ifndef HARK_API_SERVICE_H
#define HARK_API_SERVICE_H

#include "api/kserve.h"
#include "core/error.h"
#include "model/family.h"

#include <stdatomic.h>

typedef struct server server_t;
typedef struct uv_loop_s uv_loop_t;

/* HTTP status of a service error (400, 404, 408, 413, 429/503, 500, 504). */
int service_status_http(int status);

int service_live(server_t *s);  /* 1 */
int service_ready(server_t *s); /* 1 when not loading/draining and every ready model is healthy */
/* 1 when the model (version NULL or "": the served one) is READY and healthy, 0 when it is
 * known but not, HARK_ERR_NOT_FOUND (err says which) when there is no such model/version. */
int service_model_ready(server_t *s, const char *model, const char *version, hark_err_t *err);

/* {"name","version","extensions":[...]} */
int service_server_metadata(server_t *s, char **json, hark_err_t *err);
/* KServe model metadata / the bare ModelConfig JSON / {"model_stats": [...]} (model NULL or "":
 * every ready model). version NULL or "": the served one. */
int service_model_metadata(server_t *s, const char *model, const char *version, char **json,
                           hark_err_t *err);
int service_model_config(server_t *s, const char *model, const char *version, char **json,
                         hark_err_t *err);
int service_model_stats(server_t *s, const char *model, const char *version, char **json,
                        hark_err_t *err);
/* [{"name","version","state","reason"}, ...]; ready_only: READY models only. */
int service_repository_index(server_t *s, int ready_only, char **json, hark_err_t *err);

/* Loads or unloads a model on a thread of its own; done(user, status, message) is called once,
 * from that thread (or from this call on an immediate error: HARK_ERR_UNAVAILABLE unless
 * --model-control-mode is explicit, HARK_ERR_INVALID_ARG for a name that is no folder name). */
typedef void (*service_done_fn)(void *user, int status, const char *msg);
void service_repository_load(server_t *s, const char *model, int load, service_done_fn done,
                             void *user);

/* One inference's answer: outputs lent for the call (see OWNERSHIP). status HARK_OK, or an error
 * with its message (outs NULL). */
typedef void (*service_infer_fn)(void *user, int status, const char *error, const char *model,
                                 const char *version, const kserve_output_t *outs, int n_outs);

/* A batch-1 ASR request's recognition itself, lent for the call (asr_result_take keeps it), on
 * the thread that then answers: segment = 1 for each segment an endpoint ended while a
 * sequence's chunk ran (start_s .. end_s its span in the stream, seconds), before the chunk's
 * answer; segment = 0 for the request's own result (start_s 0, end_s its audio's duration),
 * just before done. Not called for a request that failed. */
typedef void (*service_asr_fn)(void *user, int segment, asr_result_t *result, double start_s,
                               double end_s);

typedef struct {
    const char *model, *version; /* version NULL or "": the served one */
    kserve_request_t *req;       /* taken: freed by the service after done */
    const void *body;            /* the bytes req borrows from; released with body_free */
    void (*body_free)(void *user);
    void *body_user;
    /* set by the transport when its client went away (stream reset, connection closed): items
     * still queued are dropped and answered HARK_ERR_CANCELLED */
    const atomic_int *cancelled;
    uint64_t deadline_ns; /* clock_now_ns() deadline from the transport (grpc-timeout); 0: none */
    /* the client, for the sequences it starts (a gRPC stream; 0: none): service_abandon ends
     * them when it goes away */
    uint64_t owner;
    uv_loop_t *loop; /* the caller's loop (encoded audio is decoded on its thread pool) */
    service_infer_fn done;
    void *user;
    /* optional (the WebSocket; KServe transports leave them 0 and keep one answer per request):
     * the results themselves through asr (batch 1 only), with word times when want_words */
    service_asr_fn asr;
    int want_words;
} service_infer_t;

/* Starts an inference; done is always called exactly once (see OWNERSHIP). Inputs in shared
 * memory are read from their regions first, and outputs asked for in shared memory are written
 * into them before done (which then builds a response naming the regions). A model served
 * under sequence_batching takes requests of batch 1 with parameters sequence_id (number or
 * string), sequence_start on a sequence's first request and sequence_end on its last; each is
 * answered with the partial result (TRANSCRIPTS [1]), the last with the final one. Errors:
 * HARK_ERR_EXHAUSTED (every sequence slot taken), HARK_ERR_INVALID_ARG (no sequence_id, a chunk
 * of no active sequence). */
void service_infer(server_t *s, const service_infer_t *in);

/* The name of a READY model that serves sequences (the first one), for clients that name none
 * (WebSocket). HARK_ERR_NOT_FOUND when there is none. */
int service_stream_model(server_t *s, char *name, size_t cap, hark_err_t *err);

/* A new client id for service_infer_t.owner (never 0). */
uint64_t service_new_owner(void);
/* The client `owner` went away: its sequences end (any thread but an instance's). */
void service_abandon(server_t *s, uint64_t owner);

/* A piece of a long-form request (audio longer than the single-pass limit, cut by the model's
 * vad_model or into windows): its span in the audio, seconds, and its text. */
typedef struct {
    double start_s, end_s;
    char *text;
} service_segment_t;

/* One recognition of an encoded audio file (OpenAI's transcriptions): result lent for the call
 * (asr_result_take keeps it; a long request's is the pieces' texts and words stitched in order,
 * word times from the audio's start); duration_s of the decoded audio; segs (n_segs) a long
 * request's pieces in order, lent for the call (NULL, 0 for audio recognised in one pass). */
typedef void (*service_transcribe_fn)(void *user, int status, const char *error,
                                      asr_result_t *result, double duration_s,
                                      const service_segment_t *segs, int n_segs);
typedef struct {
    const char *model;    /* a model name; unknown or "" with exactly one READY model: that one */
    const uint8_t *audio; /* (len) an encoded file (WAV/FLAC/OGG/MP3), lent until done */
    size_t len;
    family_params_t params; /* request options, lent for the call */
    int want_words;
    const atomic_int *cancelled;
    uv_loop_t *loop; /* the audio is decoded on its thread pool */
    service_transcribe_fn done;
    void *user;
} service_transcribe_t;
void service_transcribe(server_t *s, const service_transcribe_t *in);
/* The language the recognizer service_transcribe would use for `model` declares (config.pbtxt
 * parameter "language", e.g. "en") into out (n bytes; "" when it declares none or there is no
 * such model). */
void service_asr_language(server_t *s, const char *model, char *out, size_t n);

/* ---- Triton's protocol extensions: logging, trace, system shared memory (service_ext.c) ---- */
struct cJSON;
/* The server's share of them (server.c owns one): the shared memory regions and the trace
 * settings. service_ext_destroy unregisters (closes) every region; it accepts NULL. */
typedef struct service_ext service_ext_t;
service_ext_t *service_ext_create(void);
void service_ext_destroy(service_ext_t *e);

/* Triton's logging extension on hark's logger (core/log.h): applies `update` (NULL: none; a JSON
 * object of log_info, log_warning, log_error (booleans), log_verbose_level (integer >= 0),
 * log_format ("default" or "ISO8601"); log_file only as null: hark logs to stderr), all or none,
 * then returns every setting as {"log_file", "log_info", "log_warning", "log_error",
 * "log_verbose_level", "log_format"}. HARK_ERR_INVALID_ARG naming a bad or unknown setting,
 * HARK_ERR_UNSUPPORTED for a log_file. */
int service_log_settings(server_t *s, const struct cJSON *update, char **json, hark_err_t *err);
/* Triton's trace extension: the global settings (model NULL or ""), or a READY model's (its own
 * values over the global ones). `update` (NULL: none) sets trace_level (array of "OFF", or of
 * "TIMESTAMPS" / "TENSORS"), trace_rate, log_frequency (uint32), trace_count (int32 >= -1) as
 * strings or integers; null clears one (a model's falls back to the global value, a global one
 * to its default); an empty update of a model drops its own settings. trace_file only as null.
 * Returns {"trace_level": [...], "trace_rate", "trace_count", "log_frequency", "trace_file",
 * "trace_mode": "triton"} (values as strings, as Triton). hark keeps and reports the settings but
 * writes no traces. HARK_ERR_INVALID_ARG (a bad value, an unknown setting or model),
 * HARK_ERR_UNSUPPORTED (a trace_file). */
int service_trace_settings(server_t *s, const char *model, const struct cJSON *update, char **json,
                           hark_err_t *err);
/* System shared memory (server/shm.h): register, the status as Triton's JSON array
 * [{"name", "key", "offset", "byte_size"}] (name NULL or "": every region; an unknown name:
 * HARK_ERR_NOT_FOUND), unregister (name NULL or "": all; unknown names are no error). */
int service_shm_register(server_t *s, const char *name, const char *key, uint64_t offset,
                         uint64_t byte_size, hark_err_t *err);
int service_shm_status(server_t *s, const char *name, char **json, hark_err_t *err);
void service_shm_unregister(server_t *s, const char *name);
/* CUDA shared memory: none can be registered (HARK_ERR_UNSUPPORTED with this message), so the
 * status lists none and unregister has nothing to do. */
#define SERVICE_NO_CUDA_SHM                                                                        \
    "CUDA shared memory is not supported by hark: register a system shared memory region "         \
    "instead (/v2/systemsharedmemory, SystemSharedMemoryRegister)"

/* ---- speech synthesis (OpenAI's /v1/audio/speech) ------------------------------------------ */
/* Audio as the model produces it (pcm lent for the call), on an instance thread, in order. */
typedef void (*service_audio_fn)(void *user, const float *pcm, size_t n, int sample_rate);
/* The end: status HARK_OK after the last audio, or the error (audio may have come before). */
typedef void (*service_speak_done_fn)(void *user, int status, const char *error);
typedef struct {
    const char *model;      /* a TTS model's name; unknown or "" with exactly one READY TTS model:
                               that one (OpenAI clients name "tts-1") */
    const char *text;       /* UTF-8, lent until done */
    family_params_t params; /* options (speed, ...), lent for the call */
    const atomic_int *cancelled;
    service_audio_fn audio;
    service_speak_done_fn done;
    void *user;
} service_speak_t;
/* done is always called exactly once (see OWNERSHIP). Errors as service_infer's, plus
 * HARK_ERR_INVALID_ARG for a model that is not a TTS model. */
void service_speak(server_t *s, const service_speak_t *in);

#endif
