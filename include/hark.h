/* hark — public C API of the hark speech inference engine: load a model directory of any family
 * hark knows, recognise buffers of PCM, read audio files; streams and synthesis are declared for
 * the families to come. It fronts the same family table (src/model/family.h) as the server.
 * Implementation: src/capi/hark.c. Tests: tests/capi/test_capi.c (API against the WeNet engine on
 * the golden model), tests/capi/test_install.c (make install + pkg-config + examples/c),
 * tests/core/test_status.c (status strings).
 *
 * OWNERSHIP
 * - Every object hark creates (hark_model_t, hark_asr_result_t, hark_stream_t) is released with
 *   its _destroy function, which accepts NULL. PCM returned by hark (hark_decode_audio_file,
 *   hark_synthesize) is released with hark_pcm_free.
 * - Everything passed into hark (paths, PCM, option structs and their strings) is lent for the
 *   duration of the call only; hark never keeps a pointer it was lent.
 * - Results are snapshots: a hark_asr_result_t owns all its strings and arrays; pointers returned
 *   by its accessors stay valid until hark_asr_result_destroy and need no freeing.
 * - Option structs: zeroed means defaults (`hark_asr_opts_t o = {0};`); NULL means all defaults.
 *
 * ERRORS AND THREADS
 * - Every function that can fail returns hark_status_t (0 = HARK_OK, negative = error), and
 *   hark_last_error() then says why, in a message of the calling thread.
 * - A hark_model_t is shared: any number of threads may call hark_recognize on one model at
 *   once. Each call borrows a worker (scratch, device streams) from the model's pool under a
 *   mutex and gives it back at the end; the pool creates workers lazily, one per concurrent
 *   call, sized for the largest call seen (see hark_model_opts_t). Recognition itself runs
 *   unlocked. A hark_stream_t is used by one thread at a time.
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
    HARK_ERR_INVALID_ARG = -1,  /* a caller passed something malformed */
    HARK_ERR_NOMEM = -2,        /* an allocation failed */
    HARK_ERR_IO = -3,           /* a file could not be read or written */
    HARK_ERR_FORMAT = -4,       /* data is corrupt or of an unknown format */
    HARK_ERR_UNSUPPORTED = -5,  /* valid but not supported by hark */
    HARK_ERR_TOO_LARGE = -6,    /* exceeds a configured limit */
    HARK_ERR_CUDA = -7,         /* a CUDA call failed */
    HARK_ERR_NOT_FOUND = -8,    /* a named thing does not exist */
    HARK_ERR_AGAIN = -9,        /* not now: queue full, woken without data */
    HARK_ERR_TIMEOUT = -10,     /* a deadline passed */
    HARK_ERR_CLOSED = -11,      /* the object was shut down */
    HARK_ERR_NO_DEVICE = -12,   /* no GPU, or hark built without CUDA */
    HARK_ERR_INTERNAL = -13,    /* a bug in hark */
    HARK_ERR_CANCELLED = -14,   /* the caller or client gave up on the work */
    HARK_ERR_UNAVAILABLE = -15, /* not ready now (loading, draining, unhealthy) */
    HARK_ERR_EXHAUSTED = -16,   /* every slot of a pool is taken (sequences): retry later */
} hark_status_t;

/* A static, human-readable name for a status ("invalid argument", ...). Never NULL. */
const char *hark_status_str(int status);

/* Library version string. */
const char *hark_version(void);

/* The message of the last call that failed on this thread ("" when none). Never NULL; valid
 * until the next hark call on this thread. */
const char *hark_last_error(void);

/* ---- models -------------------------------------------------------------------------------- */
typedef struct hark_model hark_model_t;

/* Zeroed means defaults. */
typedef struct {
    const char *device;    /* "cpu" (and NULL), "cuda" (= cuda:0) or "cuda:N" */
    int gpu;               /* for callers holding a number: 0 = as `device` says; N > 0: CUDA
                              device N - 1 (overrides `device`) */
    const char *precision; /* "fp32" (and NULL); GPU: "fp16", "bf16"; a family refuses what it
                              lacks */
    int version;           /* the model version directory DIR/<version>/; 0: the highest */
    int max_batch;         /* utterances per engine call; 0: no limit (workers grow as needed);
                              a longer hark_recognize call is cut into batches of this size */
    double max_seconds;    /* longest utterance; 0: no limit (workers grow in 30 s steps);
                              longer audio fails with HARK_ERR_TOO_LARGE */
    int n_threads;         /* CPU models: BLAS threads, set once at load for the whole process;
                              0: leave the setting alone */
} hark_model_opts_t;

/* Loads the model directory DIR (a model-repository entry: DIR/<version>/model.json, whose
 * "family" key picks the family; none means WeNet U2; one of its version folders, or a repository
 * holding one entry, are accepted too; anything else fails with what was expected).
 * DIR/config.pbtxt, when present, gives the decoding defaults through its `parameters` as it does
 * for hark serve (hark_asr_opts_t fields override them per call); its other fields (batching,
 * instances) are the server's. HARK_ERR_IO / HARK_ERR_FORMAT (files), HARK_ERR_NOT_FOUND (unknown
 * family), HARK_ERR_INVALID_ARG (options), HARK_ERR_NO_DEVICE. */
hark_status_t hark_model_load(const char *dir, const hark_model_opts_t *opts, hark_model_t **out);
void hark_model_destroy(hark_model_t *m); /* accepts NULL; no call on m may be running */

int hark_model_sample_rate(const hark_model_t *m); /* Hz of the PCM it takes (ASR) or gives (TTS) */
const char *
hark_model_family(const hark_model_t *m);           /* the family's name, as model.json gives it */
const char *hark_model_task(const hark_model_t *m); /* "asr", "tts", "vad" */
int hark_model_device(const hark_model_t *m);       /* -1: CPU, else the CUDA device */
int hark_model_is_streaming(const hark_model_t *m); /* 1: its family streams (hark_stream_*) */
const char *hark_model_description(const hark_model_t *m); /* human-readable, for logs */

/* ---- offline recognition (task "asr") ------------------------------------------------------ */
typedef struct hark_asr_result hark_asr_result_t;

#define HARK_WEIGHT_ZERO (-1.0)    /* hark_asr_opts_t weights: a weight of exactly 0 */
#define HARK_NBEST_ALL (-1)        /* hark_asr_opts_t.nbest: as many hypotheses as the beam holds */
#define HARK_LEFT_CHUNKS_ALL (-1)  /* hark_asr_opts_t.num_decoding_left_chunks: all history */
#define HARK_LEFT_CHUNKS_ZERO (-2) /* ... none (WeNet's 0) */

/* Zeroed means the model's defaults. */
typedef struct {
    const char *decoding_method;  /* WeNet: "ctc_greedy_search", "ctc_prefix_beam_search",
                                     "attention_rescoring"; NULL: the model's (rescoring when it
                                     has a decoder) */
    int beam_size;                /* 0: the model's (10); else 1 .. 100 */
    double ctc_weight;            /* attention rescoring; 0: the model's; HARK_WEIGHT_ZERO: 0 */
    double reverse_weight;        /* bidirectional decoders; 0: the model's; HARK_WEIGHT_ZERO: 0 */
    int nbest;                    /* hypotheses of beam methods to return; 0: 1; HARK_NBEST_ALL */
    int want_words;               /* 1: words with start/end times (hark_asr_result_word) */
    const char *dump_dir;         /* DEBUG HOOK, not for production: with n == 1, a family that
                                     can (WeNet on the CPU) writes every intermediate stage of
                                     the utterance as DUMP_DIR/<stage>.npy (features after CMVN as
                                     feats_cmvn.npy, each encoder block, enc_out, ctc_logprobs);
                                     others fail with HARK_ERR_UNSUPPORTED */
    int decoding_chunk_size;      /* chunk-trained models (WeNet U2/U2++): 0 the model's
                                     (config.pbtxt's, else full context); > 0 decode with WeNet's
                                     chunk attention mask of that many encoder frames */
    int num_decoding_left_chunks; /* with a chunk: 0 the model's (all); > 0 that many chunks of
                                     left context; HARK_LEFT_CHUNKS_ALL; HARK_LEFT_CHUNKS_ZERO */
} hark_asr_opts_t;

/* Recognises n utterances (pcm[i]: n_samples[i] mono samples in [-1, 1] at sample_rate Hz; 0
 * means the model's rate; another rate is resampled first) in one padded batch (or batches of
 * max_batch). On success *out holds n results in order. Any utterance failing fails the call
 * (the message names the utterance) and *out is NULL. HARK_ERR_INVALID_ARG (arguments, options),
 * HARK_ERR_TOO_LARGE (past max_seconds), HARK_ERR_UNSUPPORTED (not an ASR model), ... */
hark_status_t hark_recognize(hark_model_t *m, const float *const *pcm, const size_t *n_samples,
                             int n, int sample_rate, const hark_asr_opts_t *opts,
                             hark_asr_result_t **out);
void hark_asr_result_destroy(hark_asr_result_t *r); /* accepts NULL */

/* Accessors; i is the utterance (0 .. count - 1). Out of range: NULL / 0. */
int hark_asr_result_count(const hark_asr_result_t *r);
const char *hark_asr_result_text(const hark_asr_result_t *r, int i); /* never NULL in range */
/* The best hypothesis' tokens: unit ids and start times (ms from the start of the audio); returns
 * their number. tokens / times_ms may be NULL. */
int hark_asr_result_tokens(const hark_asr_result_t *r, int i, const int **tokens,
                           const int **times_ms);
double hark_asr_result_score(const hark_asr_result_t *r, int i);
double hark_asr_result_confidence(const hark_asr_result_t *r, int i); /* 0 when the method has
                                                                          none */
double hark_asr_result_duration(const hark_asr_result_t *r, int i);   /* seconds of audio */
/* 1 when words are written with spaces between them (BPE units), 0 when not (characters) */
int hark_asr_result_word_sep(const hark_asr_result_t *r, int i);
/* Words (want_words): their number; word k's text with its start / end in ms (may be NULL). */
int hark_asr_result_word_count(const hark_asr_result_t *r, int i);
const char *hark_asr_result_word(const hark_asr_result_t *r, int i, int k, int *start_ms,
                                 int *end_ms);
/* The n-best of beam methods (0 hypotheses otherwise): hypothesis k's text, score, tokens. */
int hark_asr_result_nbest_count(const hark_asr_result_t *r, int i);
const char *hark_asr_result_nbest_text(const hark_asr_result_t *r, int i, int k, double *score);
int hark_asr_result_nbest_tokens(const hark_asr_result_t *r, int i, int k, const int **tokens,
                                 const int **times_ms);

/* ---- streaming recognition ------------------------------------------------------------------
 * The loop: create -> accept_waveform (chunks as they arrive, at the model's rate) -> decode ->
 * result (partial, then final after accept_waveform with n == 0 marks the end) -> destroy.
 * Families with streams (WeNet U2/U2++ models trained with chunks: chunk-by-chunk decoding with
 * per-stream caches; hark_asr_opts_t's decoding_chunk_size, default 16, and
 * num_decoding_left_chunks apply). accept_waveform decodes every chunk the audio completes
 * (decode has nothing left to do and reports the stream's state); result is a snapshot of the
 * latest partial or final result (one utterance: index 0). A stream holds a worker of its own
 * sized for the model's max_seconds (10 minutes when 0). Other models: HARK_ERR_UNSUPPORTED from
 * create (hark_last_error names the family); a model without chunk training: the family's
 * error; another sample rate: HARK_ERR_UNSUPPORTED; audio after the end: HARK_ERR_CLOSED. */
typedef struct hark_stream hark_stream_t;
hark_status_t hark_stream_create(hark_model_t *m, const hark_asr_opts_t *opts, hark_stream_t **out);
hark_status_t hark_stream_accept_waveform(hark_stream_t *s, const float *pcm, size_t n,
                                          int sample_rate);
hark_status_t hark_stream_decode(hark_stream_t *s);
hark_status_t hark_stream_result(hark_stream_t *s, hark_asr_result_t **out);
void hark_stream_destroy(hark_stream_t *s); /* accepts NULL */

/* ---- synthesis (task "tts") -----------------------------------------------------------------
 * TTS families: "fastspeech" (DLE FastSpeech + the HiFi-GAN vocoder its config.pbtxt names, CPU,
 * English text through DLE's cleaners). Other models: HARK_ERR_UNSUPPORTED. Text with nothing
 * to speak: HARK_ERR_INVALID_ARG. */
typedef struct {
    const char *voice; /* NULL: the model's (one-voice models refuse any other) */
    double speed;      /* 0: 1.0; FastSpeech: durations scaled by 1 / speed */
} hark_tts_opts_t;
/* *pcm (hark_pcm_free) gets *n samples at *sample_rate. */
hark_status_t hark_synthesize(hark_model_t *m, const char *text, const hark_tts_opts_t *opts,
                              float **pcm, size_t *n, int *sample_rate);

/* ---- voice activity (task "vad") ------------------------------------------------------------
 * VAD families: "silero_vad" (Silero VAD v5/v6, CPU). Segments follow silero-vad's
 * get_speech_timestamps rules; options left 0 take the model's config.pbtxt parameters, else
 * silero-vad's defaults. Other models: HARK_ERR_UNSUPPORTED. */
#define HARK_VAD_ZERO (-1) /* hark_vad_opts_t durations: exactly 0 ms */
typedef struct {
    double threshold;     /* speech at or above; 0: the model's (0.5) */
    double neg_threshold; /* speech ends below; 0: threshold - 0.15 */
    int min_speech_ms;    /* shorter segments are dropped; 0: 250; HARK_VAD_ZERO */
    int min_silence_ms;   /* silence that ends a segment; 0: 100; HARK_VAD_ZERO */
    int speech_pad_ms;    /* padding each side; 0: 30; HARK_VAD_ZERO */
    double max_speech_s;  /* longer segments are split; 0: no limit */
} hark_vad_opts_t;
typedef struct hark_vad_result hark_vad_result_t;
/* The speech segments of n utterances (pcm[i]: n_samples[i] samples at sample_rate Hz; 0 means
 * the model's rate; another rate is resampled first), stepped as one batch. *out holds n
 * segment lists in order. HARK_ERR_INVALID_ARG (arguments, options), HARK_ERR_UNSUPPORTED. */
hark_status_t hark_detect_speech(hark_model_t *m, const float *const *pcm, const size_t *n_samples,
                                 int n, int sample_rate, const hark_vad_opts_t *opts,
                                 hark_vad_result_t **out);
void hark_vad_result_destroy(hark_vad_result_t *r);    /* accepts NULL */
int hark_vad_result_count(const hark_vad_result_t *r); /* utterances */
/* Utterance i's segments: returns how many; *start_end (lent, valid until destroy) gets their
 * start and end in seconds from the utterance's start, interleaved (2 per segment). */
int hark_vad_result_segments(const hark_vad_result_t *r, int i, const double **start_end);

/* ---- audio files ---------------------------------------------------------------------------- */
/* Decodes a WAV/FLAC/OGG/MP3 file to mono float PCM in [-1, 1] at sample_rate Hz (0: the file's
 * own; *out_rate, which may be NULL, gets the rate). *pcm is released with hark_pcm_free (NULL
 * when *n == 0). HARK_ERR_IO, HARK_ERR_FORMAT, HARK_ERR_UNSUPPORTED, HARK_ERR_TOO_LARGE (> 1 h). */
hark_status_t hark_decode_audio_file(const char *path, int sample_rate, float **pcm, size_t *n,
                                     int *out_rate);
void hark_pcm_free(float *pcm); /* accepts NULL */

#ifdef __cplusplus
}
#endif
#endif
