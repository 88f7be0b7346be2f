/* features.h — speech front ends: Kaldi fbank (WeNet/icefall), NeMo/Jasper log-mel and the
 * HiFi-GAN/Tacotron2 log-mel, on the CPU (FFTW) and on the GPU (cuFFT, batched).
 * The exact pipelines are described in docs/features.md.
 * Tests: tests/dsp/test_features.c (CPU, golden, reference script), tests/dsp/test_features_gpu.c
 */
#ifndef HARK_DSP_FEATURES_H
#define HARK_DSP_FEATURES_H

#include "core/error.h"
#include "dsp/rfft.h"

#include <stddef.h>

typedef enum { FEAT_FBANK = 0, FEAT_NEMO_MEL = 1, FEAT_TTS_MEL = 2 } feat_kind_t;
typedef enum { TTS_MEL_HIFIGAN = 0, TTS_MEL_TACOTRON2 = 1 } feat_tts_variant_t;
/* Kaldi fbank as each recipe calls it (docs/features.md):
 * WENET: snip_edges, int16-range input (x 32768), mel bins 20 Hz .. Nyquist (WeNet's kaldi.fbank);
 * ICEFALL: snip_edges false (Kaldi's reflection at both ends), input in [-1, 1), high_freq -400
 *   (20 .. 7600 Hz at 16 kHz): icefall pretrained.py's kaldifeat options;
 * SHERPA: as ICEFALL with high_freq 0 (Nyquist): sherpa triton's feature extractor. */
typedef enum { FBANK_WENET = 0, FBANK_ICEFALL = 1, FBANK_SHERPA = 2 } feat_fbank_variant_t;

/* Options; feat_default_opts fills the values each original recipe uses. */
typedef struct {
    feat_kind_t kind;
    int sample_rate;  /* input rate in Hz: 16000 (fbank, nemo-mel), 22050 (tts-mel) */
    int num_mel_bins; /* 80 (fbank, tts-mel), 64 (nemo-mel; 80 also valid) */
    float dither;     /* fbank / nemo-mel; 0 = off (always 0 in tests). CPU only. */
    unsigned dither_seed;
    feat_tts_variant_t tts_variant;
    feat_fbank_variant_t fbank_variant; /* fbank only; 0 = WeNet's */
} feat_opts_t;

void feat_default_opts(feat_opts_t *o, feat_kind_t kind);
/* "fbank" | "nemo-mel" | "tts-mel" -> kind; returns -1 if unknown. */
int feat_parse_kind(const char *name, feat_kind_t *out);
const char *feat_kind_name(feat_kind_t kind);

/* REFLECT: torch's (edge not repeated); KALDI: Kaldi's snip_edges=false (edge repeated:
 * x[-1 - i] = x[i], x[n + i] = x[n - 1 - i]) */
typedef enum { FEAT_PAD_NONE = 0, FEAT_PAD_REFLECT = 1, FEAT_PAD_KALDI = 2 } feat_pad_t;
typedef enum { FEAT_LOG_MAX = 0, FEAT_LOG_ADD = 1 } feat_log_t; /* log(max(x,f)) | log(x+g) */

/* An immutable plan, shared by all threads: every derived constant of one front end.
 * Created by feat_plan_create, released by feat_plan_destroy. */
typedef struct feat_plan {
    feat_opts_t opts;
    int win_length; /* samples of the analysis window */
    int hop;        /* frame shift in samples */
    int n_fft;      /* FFT size (win_length <= n_fft) */
    int n_bins;     /* n_fft/2 + 1 */
    int n_mels;
    int frame_span;    /* samples of (padded) signal read per frame: win_length (kaldi) or n_fft */
    int win_offset;    /* where the window sits inside the n_fft frame (torch.stft centres it) */
    feat_pad_t pad;    /* padding of the whole signal before framing */
    int pad_left;      /* samples of padding at each end */
    float input_scale; /* 32768 for WeNet's fbank (int16 range, as WeNet feeds kaldi.fbank) */
    int frame_dc_preemph; /* kaldi: per frame DC removal, then pre-emphasis with x[-1] = x[0] */
    int signal_preemph;   /* nemo: pre-emphasis of the whole signal, x[0] kept */
    float preemph;
    int magnitude; /* 1: sqrt(|X|^2 + mag_eps) (tts), 0: power |X|^2 */
    float mag_eps;
    feat_log_t log_mode;
    float log_eps;  /* floor (LOG_MAX) or guard (LOG_ADD) */
    int normalize;  /* nemo: per-feature mean/std over the valid frames */
    float *window;  /* (win_length) */
    float *mel;     /* (n_mels, n_bins) dense filterbank */
    int *mel_lo;    /* (n_mels) first non-zero bin of each filter */
    int *mel_hi;    /* (n_mels) one past the last non-zero bin */
    void *fft_plan; /* fftwf_plan, r2c n_fft (when !torch_fft) */
    int torch_fft;  /* 1: FFT with PyTorch's float32 operation order (rfft.h) */
    rfft_plan_t rfft;
} feat_plan_t;

int feat_plan_create(const feat_opts_t *opts, feat_plan_t **out, hark_err_t *err);
void feat_plan_destroy(feat_plan_t *p);

/* Number of output frames for n input samples (0 when the audio is too short). */
int feat_num_frames(const feat_plan_t *p, size_t n_samples);
static inline int feat_dim(const feat_plan_t *p)
{
    return p->n_mels;
}

/* Features of one utterance: x (n samples in [-1,1]) -> out (feat_num_frames, n_mels),
 * row-major. Thread-safe (scratch is per call). HARK_ERR_NOMEM on allocation failure. */
int feat_compute(const feat_plan_t *p, const float *x, size_t n, float *out, hark_err_t *err);
/* The same for a row of n samples of which the first n_valid are the utterance and the rest
 * padding (a zero-padded batch row, as DLE's collate_fn makes): the frames and the nemo-mel
 * statistics cover feat_num_frames(p, n_valid), while pre-emphasis, framing and the STFT's
 * reflection see all n samples, as the original does on a padded batch. feat_compute is
 * n_valid == n. HARK_ERR_INVALID_ARG when n_valid > n. */
int feat_compute_padded(const feat_plan_t *p, const float *x, size_t n, size_t n_valid, float *out,
                        hark_err_t *err);

/* Streaming (FEAT_FBANK without dither): the frames of a signal known up to n samples that do not
 * depend on what follows (their windows end within n; a signal that ends at n has
 * feat_num_frames(p, n) frames, the last ones reflected at its end). */
int feat_frames_final(const feat_plan_t *p, size_t n);
/* Frames [t0, t0 + nt) of a signal of n_total samples of which x holds samples
 * [base, base + held) -> out (nt, n_mels): each equals feat_compute's frame of the whole signal.
 * A stream keeps the samples from its next frame's window on and, before its end, asks only for
 * feat_frames_final frames (n_total = the samples so far: no frame reads past them).
 * HARK_ERR_UNSUPPORTED (another kind, or dither), HARK_ERR_INVALID_ARG (frames past the signal's,
 * or reading a sample that is not held), HARK_ERR_NOMEM. */
int feat_compute_frames(const feat_plan_t *p, const float *x, size_t base, size_t held,
                        size_t n_total, int t0, int nt, float *out, hark_err_t *err);

#endif
