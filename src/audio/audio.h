/* audio.h — audio input: decode WAV/FLAC/OGG/MP3 (libsndfile) from a file or a memory buffer,
 * mix down to mono, resample (libsoxr); validate raw PCM tensors.
 * Tests: tests/audio/test_audio.c; fuzz target: tests/fuzz/fuzz_audio_decode.c
 *
 * Ownership: audio_decode_* fill a caller-provided audio_t whose samples[] belong to the caller
 * and are released with audio_free (which accepts a zeroed or already-freed audio_t). On failure
 * *out is left zeroed, nothing is leaked, and err (may be NULL) says what was wrong. Input
 * buffers are lent for the call only.
 *
 * Accepted input: RIFF/RIFX/RF64 WAV (PCM 8/16/24/32, float, double, u-law, A-law), FLAC,
 * Ogg (Vorbis, Opus) and MPEG audio (MP3, layers I-III). Anything else is refused before any
 * decoder runs. Sample values: integer PCM is divided by 2^(bits-1) exactly (int16 k becomes
 * k/32768, so k = x*32768 is recovered bit-exactly); float data must be finite and is clamped
 * to [-1, 1]; resampler overshoot is clamped too. Multi-channel audio is averaged to mono.
 * When the file's rate equals the target rate no resampling happens (bit-exact passthrough).
 */
#ifndef HARK_AUDIO_AUDIO_H
#define HARK_AUDIO_AUDIO_H

#include "core/error.h"

#include <stddef.h>

#define AUDIO_MIN_RATE 1000              /* Hz; rates outside [MIN, MAX] are refused */
#define AUDIO_MAX_RATE 384000            /* Hz */
#define AUDIO_DEFAULT_MAX_SECONDS 3600.0 /* when audio_opts_t.max_seconds is 0 */

/* Zeroed means defaults. */
typedef struct {
    int target_rate;    /* Hz; 0: keep the file's rate */
    double max_seconds; /* 0: AUDIO_DEFAULT_MAX_SECONDS; longer audio -> HARK_ERR_TOO_LARGE */
} audio_opts_t;

typedef struct {
    float *samples;      /* (n,) mono, in [-1, 1]; owned, release with audio_free; NULL if n == 0 */
    size_t n;            /* number of samples */
    int rate;            /* Hz, rate of samples[] */
    int source_rate;     /* Hz, as stored in the file */
    int source_channels; /* before mixdown */
    int source_format;   /* libsndfile SF_FORMAT_* major type (SF_FORMAT_WAV, _FLAC, _OGG, ...) */
} audio_t;

/* Decode a file / a buffer. Status: HARK_OK; HARK_ERR_INVALID_ARG (bad opts or arguments);
 * HARK_ERR_IO (file cannot be opened or read); HARK_ERR_FORMAT (empty, truncated, corrupt,
 * unknown container, NaN/Inf samples); HARK_ERR_UNSUPPORTED (known container but codec or sample
 * rate hark refuses); HARK_ERR_TOO_LARGE (longer than max_seconds); HARK_ERR_NOMEM. */
int audio_decode_file(const char *path, const audio_opts_t *opts, audio_t *out, hark_err_t *err);
int audio_decode_memory(const void *data, size_t len, const audio_opts_t *opts, audio_t *out,
                        hark_err_t *err);

/* Resample mono float32 in[0..n) from in_rate to out_rate (libsoxr, high quality, linear phase,
 * no delay). *out (owned by the caller, hark_free; NULL when *out_n == 0) gets about
 * n*out_rate/in_rate samples. Equal rates copy bit-exactly. No clamping here. Rates must lie in
 * [AUDIO_MIN_RATE, AUDIO_MAX_RATE]. */
int audio_resample(const float *in, size_t n, int in_rate, int out_rate, float **out, size_t *out_n,
                   hark_err_t *err);

/* Validate PCM that arrives as a float tensor (KServe input): every sample must be finite;
 * HARK_ERR_INVALID_ARG names the index and kind (NaN, +Inf, -Inf) of the first bad one. Values
 * outside [-1, 1] are accepted: some clients send int16-scaled floats on purpose. */
int audio_check_pcm(const float *x, size_t n, hark_err_t *err);

/* Releases a->samples and zeroes *a. Accepts NULL. */
void audio_free(audio_t *a);

/* Reading a file block by block, for audio of any length in bounded memory: the checks and
 * conversions of audio_decode_file (containers, codecs, truncation, NaN/Inf, mono mixdown,
 * clamping), resampled to target_rate (0: the file's rate) by a streaming libsoxr of the same
 * quality. No length limit: the caller decides what to keep. Errors as audio_decode_file's. */
typedef struct audio_reader audio_reader_t;
int audio_reader_open(const char *path, int target_rate, audio_reader_t **out, hark_err_t *err);
/* The same over an encoded file in memory (data lent until audio_reader_close). */
int audio_reader_open_memory(const void *data, size_t len, int target_rate, audio_reader_t **out,
                             hark_err_t *err);
int audio_reader_rate(const audio_reader_t *r); /* Hz of what read gives */
/* Seconds of audio the header declares (an estimate for MP3), 0 when it does not say. */
double audio_reader_duration(const audio_reader_t *r);
/* Up to max samples into out; *n of them (0 only at the end of the file). */
int audio_reader_read(audio_reader_t *r, float *out, size_t max, size_t *n, hark_err_t *err);
void audio_reader_close(audio_reader_t *r); /* accepts NULL */

#endif
