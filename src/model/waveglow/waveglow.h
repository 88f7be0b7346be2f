/* waveglow.h — NVIDIA DeepLearningExamples' WaveGlow vocoder (PyTorch/SpeechSynthesis/Tacotron2,
 * waveglow/) on the CPU: the transposed-convolution upsampler, the grouping ("squeeze") of the
 * conditioning, the reverse flows (WN affine coupling layers, inverse 1x1 convolutions, early
 * outputs joined with fresh noise), sigma; and DLE's STFT denoiser (waveglow/denoiser.py: the
 * bias spectrum of the vocoder's output for an all-zero mel, subtracted from the magnitude with
 * a strength). The model files are those of tools/convert_waveglow.py (weight norm removed, the
 * 1x1 inverses stored; docs/model-format.md); the bias spectrum is computed at load.
 * Tests: tests/model/waveglow/test_waveglow.c (every flow, the audio and the denoised audio
 * against DLE's goldens with the recorded noise; bad model files)
 *
 * OWNERSHIP AND THREADS
 * - waveglow_model_t: made by waveglow_load, immutable afterwards, shared by any number of
 *   threads; waveglow_destroy once none uses it.
 * - waveglow_infer / waveglow_denoise allocate their activations per call (freed before they
 *   return) and write into the caller's buffers; both are thread-safe on a shared model.
 */
#ifndef HARK_MODEL_WAVEGLOW_H
#define HARK_MODEL_WAVEGLOW_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

#define WAVEGLOW_MAX_FLOWS 64
#define WAVEGLOW_MAX_LAYERS 32

typedef struct {
    int n_mels, n_flows, n_group, n_early_every, n_early_size;
    int wn_layers, wn_kernel, wn_channels;
    int up_kernel, up_stride; /* the upsampler: ConvTranspose1d(n_mels, n_mels, k, stride) */
    int sample_rate;
    float sigma;                        /* default sigma (DLE inference.py: 0.9) */
    float denoiser_strength;            /* default strength (inference.py: 0.01; 0: off) */
    int filter_length, hop, win_length; /* the denoiser's STFT (1024, 1024 / n_overlap, 1024) */
    int bias_frames;                    /* mel frames of the zero input (DLE: 88) */
} waveglow_config_t;

typedef struct waveglow_model waveglow_model_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1) and computes the
 * denoiser's bias spectrum. HARK_ERR_IO, HARK_ERR_FORMAT (naming the field or tensor and both
 * shapes), HARK_ERR_UNSUPPORTED, HARK_ERR_NOMEM. */
int waveglow_load(const char *dir, int version, waveglow_model_t **out, hark_err_t *err);
void waveglow_destroy(waveglow_model_t *m); /* accepts NULL */
const waveglow_config_t *waveglow_config(const waveglow_model_t *m);
/* Samples for n_frames mel frames (n_frames · up_stride). */
size_t waveglow_samples(const waveglow_model_t *m, int n_frames);
/* Mel frames of context on each side that a frame's samples depend on (the flows' dilated WN
 * convolutions and the upsampler's span): a window of the mel with this much context on each
 * side gives its middle frames' samples as the whole mel does (at sigma 0; the denoiser's STFT
 * reaches less far). */
int waveglow_context_frames(const waveglow_model_t *m);
/* The denoiser's bias spectrum (filter_length / 2 + 1 magnitudes), lent. */
const float *waveglow_bias_spec(const waveglow_model_t *m);

/* The latent noise: draw 0 is the initial z (channels of the last flow, len), then one draw per
 * early output, in DLE's order (channels n_early_size): fill z (channels, len) with standard
 * normal values; sigma is applied by the caller of the hook. */
typedef void (*waveglow_noise_fn)(void *user, int draw, float *z, int channels, int len);
/* Stages (tests, --dump-dir): "upsampled" (n_mels, frames · stride), and per flow k (run from
 * n_flows-1 down to 0) "flow{k}_wn_input", "flow{k}_wn_output", "flow{k}_after_convinv"
 * (channels, len); data row-major, lent. */
typedef void (*waveglow_stage_fn)(void *user, const char *name, const float *data, int rows,
                                  int cols);

typedef struct {
    float sigma;   /* < 0: the model's */
    uint64_t seed; /* the seeded Gaussian noise when no hook is given */
    waveglow_noise_fn noise;
    void *noise_user;
    waveglow_stage_fn stage;
    void *stage_user;
} waveglow_opts_t;

/* mel (n_mels, n_frames) row-major, as DLE's (1, 80, T) -> audio (waveglow_samples), as
 * WaveGlow.infer returns it. o may be NULL (the model's sigma, seed 0). HARK_ERR_INVALID_ARG (no
 * frames, NaN or infinite mel values), HARK_ERR_TOO_LARGE (over 100,000 frames), HARK_ERR_NOMEM. */
int waveglow_infer(const waveglow_model_t *m, const float *mel, int n_frames,
                   const waveglow_opts_t *o, float *audio, hark_err_t *err);

/* DLE's Denoiser.forward(audio, strength): the STFT of audio (n samples) with the bias
 * spectrum · strength subtracted from the magnitude (clamped at 0), inverted: *n_out =
 * floor(n / hop) · hop samples into out (n for WaveGlow's output). out may alias audio.
 * HARK_ERR_INVALID_ARG (n <= filter_length / 2: too short to reflect-pad; NaN input),
 * HARK_ERR_NOMEM. */
int waveglow_denoise(const waveglow_model_t *m, const float *audio, size_t n, float strength,
                     float *out, size_t *n_out, hark_err_t *err);

#endif
