/* silero_vad.h — Silero VAD v5/v6 (snakers4/silero-vad) on the CPU: per 512-sample window (256 at
 * 8 kHz) with 64 (32) samples of context, a reflect-padded STFT as one GEMM, its magnitude, four
 * k=3 convolutions with ReLU, an LSTM cell whose state is carried to the next window, ReLU, a 1x1
 * conv and a sigmoid: one speech probability per window. Batched over streams: one step runs a
 * window of every stream as one set of GEMMs (OpenBLAS). Segments from the probabilities follow
 * silero-vad's get_speech_timestamps (silero_segments.c). The model files are those of
 * tools/convert_silero_vad.py (docs/model-format.md).
 * Tests: tests/model/silero/test_silero_vad.c (ONNX Runtime's probabilities and silero-vad's
 * segments on the real audio, when tools/silero_vad_reference.sh has produced them).
 *
 * OWNERSHIP AND THREADS
 * - silero_vad_t: made by silero_vad_load, immutable afterwards, shared by any number of threads.
 * - silero_vad_step works in caller-owned state and scratch; silero_vad_probs allocates its own
 *   per call. Both are thread-safe on a shared model.
 */
#ifndef HARK_MODEL_SILERO_VAD_H
#define HARK_MODEL_SILERO_VAD_H

#include "core/error.h"

#include <stddef.h>

#define SILERO_HIDDEN 128
#define SILERO_N_CONV 4

/* One sample rate's network (the ONNX file's If branch). Weights point into the model's block. */
typedef struct {
    int sample_rate;
    int window, context; /* new samples per step; samples kept from the previous step */
    int n_fft, hop, pad; /* STFT conv size and stride; right reflect padding */
    int frames, n_bins;  /* STFT frames per step; n_fft / 2 + 1 */
    float *basis;        /* (2 · n_bins, n_fft): real rows, then imaginary rows */
    int cin[SILERO_N_CONV], cout[SILERO_N_CONV], stride[SILERO_N_CONV]; /* k 3, pad 1 */
    float *conv_w[SILERO_N_CONV]; /* (cout, 3, cin): taps re-laid for im2col rows */
    float *conv_b[SILERO_N_CONV]; /* (cout) */
    float *w_ih, *w_hh;           /* (4 · H, H), PyTorch gate order i, f, g, o */
    float *b_ih, *b_hh;           /* (4 · H) */
    float *out_w;                 /* (H) */
    float out_b;
} silero_rate_t;

typedef struct silero_vad silero_vad_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1), checking every field
 * and every tensor's shape and finiteness. HARK_ERR_IO, HARK_ERR_FORMAT (naming the field or the
 * tensor and both shapes), HARK_ERR_UNSUPPORTED, HARK_ERR_NOMEM. */
int silero_vad_load(const char *dir, int version, silero_vad_t **out, hark_err_t *err);
void silero_vad_destroy(silero_vad_t *m); /* accepts NULL */
/* The network for sample_rate, or NULL when the model has none. */
const silero_rate_t *silero_vad_rate(const silero_vad_t *m, int sample_rate);
/* The sample rates the model has (up to 4), in model.json order; returns how many. */
int silero_vad_rates(const silero_vad_t *m, int *rates);

/* Windows for n samples: ceil(n / window) (the last one zero-padded, as silero-vad does). */
size_t silero_vad_n_windows(const silero_rate_t *r, size_t n);

/* Floats of one stream's state: h and c (H each), then the context (r->context samples). */
size_t silero_vad_state_floats(const silero_rate_t *r);
/* Floats of silero_vad_step's scratch for `batch` streams. */
size_t silero_vad_scratch_floats(const silero_rate_t *r, int batch);

/* One window of `batch` streams: stream b's new samples x + b · ldx (r->window of them) after its
 * state's context; state (batch, silero_vad_state_floats) zeroed for a fresh stream, updated in
 * place (LSTM h, c and the context); prob (batch) its speech probability. */
void silero_vad_step(const silero_rate_t *r, float *prob, float *state, const float *x, size_t ldx,
                     int batch, float *scratch);

/* Probabilities of whole files: file i's pcm[i] (n[i] samples at `sample_rate`) -> probs[i]
 * (silero_vad_n_windows floats, the caller's), every file from a fresh state, the files stepped
 * together in batches of up to max_batch (0: all). HARK_ERR_UNSUPPORTED (no network for the
 * rate), HARK_ERR_NOMEM. */
int silero_vad_probs(const silero_vad_t *m, int sample_rate, const float *const *pcm,
                     const size_t *n, int n_files, int max_batch, float *const *probs,
                     hark_err_t *err);

/* ---- segments: silero-vad's get_speech_timestamps rules (silero_segments.c) --------------- */
typedef struct {
    double threshold;                   /* speech at or above (0.5) */
    double neg_threshold;               /* < 0: max(threshold - 0.15, 0.01) */
    int min_speech_duration_ms;         /* shorter segments are dropped (250) */
    double max_speech_duration_s;       /* longer segments are split; <= 0: no limit */
    int min_silence_duration_ms;        /* silence that ends a segment (100) */
    int speech_pad_ms;                  /* padding each side (30) */
    int min_silence_at_max_speech_ms;   /* silences considered for a split (98) */
    int use_max_poss_sil_at_max_speech; /* split at the longest silence (1), else the last */
} silero_seg_opts_t;

void silero_seg_default_opts(silero_seg_opts_t *o);

typedef struct {
    long long start, end; /* samples */
} silero_segment_t;

/* Segments of n_samples samples at sample_rate from their windows' probs (n_probs, `window`
 * samples each) -> *segs (malloc'ed, the caller frees; NULL when none), *n_segs.
 * HARK_ERR_INVALID_ARG (bad options), HARK_ERR_NOMEM. */
int silero_segments(const float *probs, size_t n_probs, size_t n_samples, int sample_rate,
                    int window, const silero_seg_opts_t *o, silero_segment_t **segs, size_t *n_segs,
                    hark_err_t *err);

/* The same rules incrementally, for audio of any length: push the probabilities as the windows
 * come, pop the segments that are final (a segment is final once the next one has started, or
 * once the audio is 2 · speech_pad past its end without one), finish with the audio's length
 * to get the rest. The segments equal silero_segments' over the whole audio. The stream owns
 * its state; one thread at a time. */
typedef struct silero_seg_stream silero_seg_stream_t;
/* HARK_ERR_INVALID_ARG (bad options), HARK_ERR_NOMEM. */
int silero_seg_stream_create(const silero_seg_opts_t *o, int sample_rate, int window,
                             silero_seg_stream_t **out, hark_err_t *err);
void silero_seg_stream_destroy(silero_seg_stream_t *s); /* accepts NULL */
/* The next n windows' probabilities. HARK_ERR_INVALID_ARG after finish, HARK_ERR_NOMEM. */
int silero_seg_stream_push(silero_seg_stream_t *s, const float *probs, size_t n, hark_err_t *err);
/* The audio ended after n_samples samples (the windows pushed: ceil(n_samples / window)). */
int silero_seg_stream_finish(silero_seg_stream_t *s, size_t n_samples, hark_err_t *err);
/* Moves up to max final segments, in order, into out; returns how many. */
size_t silero_seg_stream_pop(silero_seg_stream_t *s, silero_segment_t *out, size_t max);
/* The first sample any segment not yet popped may cover: audio before it can be dropped. */
long long silero_seg_stream_keep_from(const silero_seg_stream_t *s);

/* ---- one stream of audio: the network and the segmenter together (silero_vad.c) ---------- */
typedef struct silero_vad_stream silero_vad_stream_t;
/* A stream of audio at sample_rate (the model must have that network) segmented with o.
 * HARK_ERR_UNSUPPORTED (rate), HARK_ERR_INVALID_ARG (options), HARK_ERR_NOMEM. The model must
 * outlive the stream. */
int silero_vad_stream_create(const silero_vad_t *m, int sample_rate, const silero_seg_opts_t *o,
                             silero_vad_stream_t **out, hark_err_t *err);
void silero_vad_stream_destroy(silero_vad_stream_t *s); /* accepts NULL */
/* The next n samples (any n): every window they complete is run. HARK_ERR_NOMEM,
 * HARK_ERR_INVALID_ARG after finish. */
int silero_vad_stream_feed(silero_vad_stream_t *s, const float *pcm, size_t n, hark_err_t *err);
/* The audio ended: the last partial window is zero-padded and run, the segments completed. */
int silero_vad_stream_finish(silero_vad_stream_t *s, hark_err_t *err);
/* Final segments (samples from the stream's start), as silero_seg_stream_pop. */
size_t silero_vad_stream_pop(silero_vad_stream_t *s, silero_segment_t *out, size_t max);
/* As silero_seg_stream_keep_from. */
long long silero_vad_stream_keep_from(const silero_vad_stream_t *s);
/* Samples fed so far. */
size_t silero_vad_stream_samples(const silero_vad_stream_t *s);

#endif
