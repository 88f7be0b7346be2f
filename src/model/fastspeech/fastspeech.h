/* fastspeech.h — NVIDIA DeepLearningExamples' FastSpeech (CUDA-Optimized/FastSpeech) on the CPU:
 * symbol embedding, sinusoid positions, post-LN FFT blocks (fused-QKV self-attention, conv-1D
 * feed-forward), the duration predictor, the length regulator and the mel linear. The model files
 * are those of tools/convert_fastspeech.py (docs/tts.md); text goes through
 * text/tts_text.h first.
 * Tests: tests/model/fastspeech/test_fastspeech.c (every stage against DLE's goldens, the padded
 * batch)
 *
 * OWNERSHIP AND THREADS
 * - fastspeech_model_t: made by fastspeech_load, immutable afterwards, shared by any number of
 *   threads; fastspeech_destroy once none uses it.
 * - fastspeech_forward allocates its activations per call (freed before it returns), and the
 *   mel it returns (the caller's).
 */
#ifndef HARK_MODEL_FASTSPEECH_H
#define HARK_MODEL_FASTSPEECH_H

#include "core/error.h"

#include <stddef.h>

typedef struct {
    int d_model, d_k, d_v;
    int enc_layers, enc_heads, enc_filter;
    int dec_layers, dec_heads, dec_filter;
    int conv_kernel, conv_padding;
    int dp_filter, dp_kernel;
    int n_mels, max_seq_len, n_symbols;
    int sample_rate, hop;
} fastspeech_config_t;

typedef struct fastspeech_model fastspeech_model_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1). HARK_ERR_IO,
 * HARK_ERR_FORMAT (naming the field or tensor and both shapes), HARK_ERR_NOMEM. */
int fastspeech_load(const char *dir, int version, fastspeech_model_t **out, hark_err_t *err);
void fastspeech_destroy(fastspeech_model_t *m); /* accepts NULL */
const fastspeech_config_t *fastspeech_config(const fastspeech_model_t *m);

/* Stages (tests, --dump-dir): name, data (rows, cols) row-major (time-major: rows = positions),
 * lent. Names follow the goldens: emb, enc_add_pos_enc, enc_layer{l}_attn_ln, enc_layer{l}_out,
 * encoder_out, dur_log, dur_float, dur_rounded (as floats), length_regulated,
 * mel_side_add_pos_enc, dec_layer{l}_attn_ln, dec_layer{l}_out, decoder_out, mel. */
typedef void (*fastspeech_stage_fn)(void *user, const char *name, const float *data, int rows,
                                    int cols);

typedef struct {
    float alpha;    /* duration scale (DLE's alpha; 0 means 1) */
    int pad_to;     /* DLE's padded batch: run the row as padded to this many symbols (0: n) */
    int pad_frames; /* ... and its mel side as padded to this many frames (0: its own T) */
    fastspeech_stage_fn stage;
    void *stage_user;
} fastspeech_opts_t;

/* ids (n symbol ids in [1, n_symbols)) -> *mel (frames, n_mels) row-major, hark_malloc'ed, as
 * DLE's forward returns it (the inferencer transposes it for the vocoder); *n_frames = T (or
 * pad_frames when set: the rows past T as DLE computes them). HARK_ERR_INVALID_ARG (no ids, an id
 * out of range, no frames: every duration rounds to 0), HARK_ERR_TOO_LARGE (over max_seq_len
 * symbols), HARK_ERR_NOMEM. */
int fastspeech_forward(const fastspeech_model_t *m, const int *ids, int n,
                       const fastspeech_opts_t *o, float **mel, int *n_frames, hark_err_t *err);

#endif
