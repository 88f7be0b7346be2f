/* hifigan.h — jik876/hifi-gan's generator (V1/V2/V3: conv_pre, transposed-conv upsampling stages,
 * multi-receptive-field ResBlock1/ResBlock2 fusion, conv_post, tanh) on the CPU, and its mel
 * recipe for resynthesis. The model files are those of tools/convert_hifigan.py (weight norm
 * already removed; docs/tts.md).
 * Tests: tests/model/hifigan/test_hifigan.c (every stage against the upstream goldens)
 *
 * OWNERSHIP AND THREADS
 * - hifigan_model_t: made by hifigan_load, immutable afterwards (weights re-laid out per tap in
 *   one block), shared by any number of threads; hifigan_destroy once none uses it.
 * - hifigan_forward allocates its activations per call (freed before it returns) and is
 *   thread-safe on a shared model.
 */
#ifndef HARK_MODEL_HIFIGAN_H
#define HARK_MODEL_HIFIGAN_H

#include "core/error.h"

#include <stddef.h>

#define HIFIGAN_MAX_UPS 8
#define HIFIGAN_MAX_KERNELS 8
#define HIFIGAN_MAX_DIL 4

typedef struct {
    int resblock; /* 1 or 2 */
    int num_mels;
    int n_ups;
    int up_rate[HIFIGAN_MAX_UPS], up_kernel[HIFIGAN_MAX_UPS];
    int ch0; /* upsample_initial_channel; stage i has ch0 >> (i + 1) channels */
    int n_kernels;
    int rb_kernel[HIFIGAN_MAX_KERNELS];
    int n_dil; /* 3 (ResBlock1) or 2 (ResBlock2) */
    int rb_dil[HIFIGAN_MAX_KERNELS][HIFIGAN_MAX_DIL];
    int sample_rate, n_fft, hop, win_size;
    double fmin, fmax;
} hifigan_config_t;

typedef struct hifigan_model hifigan_model_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1), checking every
 * tensor's shape and finiteness. HARK_ERR_IO, HARK_ERR_FORMAT (naming the field or tensor and
 * both shapes), HARK_ERR_UNSUPPORTED, HARK_ERR_NOMEM. */
int hifigan_load(const char *dir, int version, hifigan_model_t **out, hark_err_t *err);
void hifigan_destroy(hifigan_model_t *m); /* accepts NULL */
const hifigan_config_t *hifigan_config(const hifigan_model_t *m);
/* Samples produced for n_frames mel frames (n_frames · hop for the upstream configs). */
size_t hifigan_samples(const hifigan_model_t *m, int n_frames);

/* Mel frames on each side of a frame that its samples depend on (the receptive field, rounded
 * up, plus one): vocoding frames [a, b) with this many frames of context on each side (where the
 * utterance has them) gives the samples of [a, b) as the whole utterance at once does, so the
 * vocoder can stream in chunks. */
int hifigan_context_frames(const hifigan_model_t *m);

/* Intermediate stages (tests, --dump-dir): name ("conv_pre", "ups0", "resblock0" (stage 0 only),
 * "mrf0", ..., "conv_post" before tanh), data (rows = channels, cols = time) row-major, lent. */
typedef void (*hifigan_stage_fn)(void *user, const char *name, const float *data, int rows,
                                 int cols);

/* mel (num_mels, n_frames) row-major, as upstream's (1, 80, T) -> audio (hifigan_samples) in
 * [-1, 1] (tanh output). HARK_ERR_INVALID_ARG (no frames, NaN or infinite mel values),
 * HARK_ERR_TOO_LARGE (over 1,000,000 frames), HARK_ERR_NOMEM. stage may be NULL. */
int hifigan_forward(const hifigan_model_t *m, const float *mel, int n_frames, float *audio,
                    hifigan_stage_fn stage, void *user, hark_err_t *err);

/* The vocoder's own mel recipe (meldataset.mel_spectrogram: reflect pad, |STFT|, slaney mel,
 * natural log) of x (n samples in [-1, 1] at the model's rate) -> *mel (num_mels, *n_frames),
 * allocated with hark_malloc (the caller frees it). HARK_ERR_INVALID_ARG (too short / NaN),
 * HARK_ERR_UNSUPPORTED (a recipe other than 22.05 kHz / 1024 / 256 / 80 mels / 0-8 kHz). */
int hifigan_mel(const hifigan_model_t *m, const float *x, size_t n, float **mel, int *n_frames,
                hark_err_t *err);

#endif
