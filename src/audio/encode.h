/* encode.h — synthesized audio as the bytes of a response, produced as the samples arrive: WAV
 * (16-bit PCM; streamed with RIFF/data sizes 0xFFFFFFFF, as OpenAI streams WAV, since the length
 * is not known when the header leaves), raw PCM (16-bit little-endian mono at 24 kHz, OpenAI's
 * "pcm"), and FLAC, MP3 and Ogg Opus through libsndfile (encoded into memory and handed over
 * whole at the end: their writers go back to patch headers). Tests: tests/audio/test_encode.c
 *
 * OWNERSHIP AND THREADS: an encoder belongs to one thread at a time; write_fn is called on the
 * thread that calls audio_enc_write / audio_enc_close, with bytes lent for the call.
 */
#ifndef HARK_AUDIO_ENCODE_H
#define HARK_AUDIO_ENCODE_H

#include "core/error.h"

#include <stddef.h>

typedef enum {
    AUDIO_ENC_WAV = 0,
    AUDIO_ENC_PCM,
    AUDIO_ENC_FLAC,
    AUDIO_ENC_MP3,
    AUDIO_ENC_OPUS,
} audio_enc_format_t;

/* "wav", "pcm", "flac", "mp3", "opus" (OpenAI's response_format names): HARK_OK, or
 * HARK_ERR_INVALID_ARG naming the formats there are. */
int audio_enc_format_parse(const char *name, audio_enc_format_t *out, hark_err_t *err);
const char *audio_enc_content_type(audio_enc_format_t f);
/* 1 when bytes leave as samples arrive (wav, pcm); 0 when the file comes whole at close. */
int audio_enc_streams(audio_enc_format_t f);
/* The sample rate of the output for input at in_rate: pcm 24000; opus 24000 unless in_rate is one
 * Opus takes (8, 12, 16, 24, 48 kHz); the others in_rate. */
int audio_enc_output_rate(audio_enc_format_t f, int in_rate);

/* Returns 0, or non-zero to stop (the encoder then fails with HARK_ERR_CANCELLED). */
typedef int (*audio_enc_write_fn)(void *user, const void *data, size_t len);

typedef struct audio_enc audio_enc_t;

/* HARK_ERR_INVALID_ARG (rate), HARK_ERR_NOMEM, HARK_ERR_UNSUPPORTED (libsndfile lacks the
 * format). The WAV header is written at once. */
int audio_enc_open(audio_enc_format_t f, int in_rate, audio_enc_write_fn write_fn, void *user,
                   audio_enc_t **out, hark_err_t *err);
/* Samples in [-1, 1] (clipped) at in_rate. */
int audio_enc_write(audio_enc_t *e, const float *pcm, size_t n, hark_err_t *err);
/* Flushes what is left (the whole file for flac/mp3/opus) and frees e (also on error). */
int audio_enc_close(audio_enc_t *e, hark_err_t *err);
/* Frees e without writing anything more (NULL-safe). */
void audio_enc_abort(audio_enc_t *e);

#endif
