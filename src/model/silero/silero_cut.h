/* silero_cut.h — long audio cut into pieces a recogniser takes in one pass, in bounded memory:
 * an audio_reader_t read block by block and either segmented by a Silero VAD stream as it comes
 * (silero_vad_stream: get_speech_timestamps' rules) or cut into fixed windows with overlap (no
 * VAD). Only the audio a piece still to come may need is kept. Shared by `hark transcribe --vad`
 * (src/cli/cmd_transcribe_vad.c) and the server's long-form requests (src/api/service.c).
 * Tests: tests/model/silero/test_silero_cut.c, tests/cli/test_cli_transcribe_vad.c,
 * tests/server/test_server_long.py */
#ifndef HARK_MODEL_SILERO_CUT_H
#define HARK_MODEL_SILERO_CUT_H

#include "audio/audio.h"
#include "model/silero/silero_vad.h"

typedef struct {
    const silero_vad_t *vad; /* NULL: fixed windows */
    silero_seg_opts_t seg;   /* with vad */
    double window_s;         /* without vad: window length (> 0) */
    double overlap_s;        /* without vad: overlap of neighbouring windows, in [0, window_s) */
    double max_seconds;      /* > 0: HARK_ERR_TOO_LARGE once the audio is longer */
} silero_cut_opts_t;

/* A piece [start, end) (samples at the reader's rate from the audio's start), pcm (end - start
 * samples) lent for the call. Returns HARK_OK or a status that stops the cutting. */
typedef int (*silero_cut_fn)(void *user, long long start, long long end, const float *pcm,
                             hark_err_t *err);
/* Optional: the samples read so far, after each block. */
typedef void (*silero_cut_progress_fn)(void *user, size_t samples);

/* Reads rd to its end and hands every piece to cb, in order. *n_samples (may be NULL): the
 * samples read. Fixed windows of W samples with hop H = W - overlap: [k·H, k·H + W) cut at the
 * end of the audio; a last window wholly inside the previous one is not made. Errors: the
 * reader's, silero_vad_stream_create's (HARK_ERR_UNSUPPORTED: no network for the reader's rate),
 * HARK_ERR_TOO_LARGE, HARK_ERR_INVALID_ARG (options), HARK_ERR_NOMEM, or cb's status. */
int silero_cut(audio_reader_t *rd, const silero_cut_opts_t *o, silero_cut_fn cb,
               silero_cut_progress_fn progress, void *user, size_t *n_samples, hark_err_t *err);

#endif
