/* tacotron2.h — NVIDIA DeepLearningExamples' Tacotron 2 (PyTorch/SpeechSynthesis/Tacotron2) on
 * the CPU: symbol embedding, the encoder (convolutions + BatchNorm + ReLU, a bidirectional LSTM),
 * the autoregressive decoder (prenet with its always-on dropout, attention LSTM cell,
 * location-sensitive attention, decoder LSTM cell, mel projection and gate), the postnet. The
 * model files are those of tools/convert_tacotron2.py (docs/tts.md, docs/model-format.md); text
 * goes through text/tts_text.h (TTS_TEXT_DLE_TACOTRON2) first.
 * Tests: tests/model/tacotron2/test_tacotron2.c (every stage and every decoder step against DLE's
 * goldens with the recorded prenet masks; batches; bad model files)
 *
 * OWNERSHIP AND THREADS
 * - tacotron2_model_t: made by tacotron2_load, immutable afterwards (its weights stay mapped),
 *   shared by any number of threads; tacotron2_destroy once none uses it.
 * - tacotron2_infer allocates its activations per call (freed before it returns) and the results
 *   it returns (the caller's: tacotron2_result_free).
 */
#ifndef HARK_MODEL_TACOTRON2_H
#define HARK_MODEL_TACOTRON2_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n_mels, n_symbols, emb_dim;
    int enc_kernel, enc_convs, enc_dim; /* enc_dim: the BiLSTM output (2 × enc_dim/2) */
    int att_rnn_dim, att_dim, loc_filters, loc_kernel;
    int dec_rnn_dim, prenet_dim;
    int max_decoder_steps;
    float gate_threshold;
    int no_early_stopping; /* DLE's decoder_no_early_stopping: run max_decoder_steps always */
    int postnet_dim, postnet_kernel, postnet_convs;
    int sample_rate, hop;
} tacotron2_config_t;

typedef struct tacotron2_model tacotron2_model_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1). HARK_ERR_IO,
 * HARK_ERR_FORMAT (naming the field or tensor and both shapes), HARK_ERR_UNSUPPORTED,
 * HARK_ERR_NOMEM. */
int tacotron2_load(const char *dir, int version, tacotron2_model_t **out, hark_err_t *err);
void tacotron2_destroy(tacotron2_model_t *m); /* accepts NULL */
const tacotron2_config_t *tacotron2_config(const tacotron2_model_t *m);

/* The prenet's dropout keep-mask of row `row`, decoder step `step`, prenet layer `layer` (0, 1):
 * keep (n = prenet_dim) receives 0 or 1 (DLE's layer output is relu(W·x) · keep · 2). */
typedef void (*tacotron2_mask_fn)(void *user, int row, int step, int layer, uint8_t *keep, int n);

/* Stages (tests, --dump-dir) of row `row`: name, decoder step (-1 outside the decoder), data
 * (rows, cols) row-major, lent. Names follow the goldens: embedded (emb_dim, n: channel-major),
 * encoder_out (n, enc_dim), processed_memory (n, att_dim); per step: prenet_out,
 * attention_hidden, attention_cell, attention_weights (1, n), attention_weights_cum,
 * attention_context, decoder_hidden, decoder_cell, mel_frame, gate (the logit); after the loop:
 * mel_decoder, postnet_residual, mel_postnet (n_mels, frames: channel-major). */
typedef void (*tacotron2_stage_fn)(void *user, int row, const char *name, int step,
                                   const float *data, int rows, int cols);

/* Replaces row `row`'s encoder output (n symbols, e = enc_dim, row-major) before the processed
 * memory is computed from it: the decoder checked stage by stage from the golden's encoder output
 * (tests). */
typedef void (*tacotron2_memory_fn)(void *user, int row, float *memory, int n, int e);

typedef struct {
    uint64_t seed;          /* the seeded prenet dropout generator: row b uses seeds[b] when */
    const uint64_t *seeds;  /* given, seed otherwise (a row's masks never depend on the batch) */
    tacotron2_mask_fn mask; /* overrides the generator (recorded masks) */
    void *mask_user;
    int max_decoder_steps; /* 0: the model's */
    int early_stopping;    /* 0: the model's (DLE: !decoder_no_early_stopping); 1 on; -1 off */
    tacotron2_stage_fn stage;
    void *stage_user;
    tacotron2_memory_fn memory; /* NULL: the encoder's own output */
    void *memory_user;
} tacotron2_opts_t;

typedef struct {
    float *mel;        /* (n_mels, n_frames) channel-major, after the postnet; hark_malloc'ed */
    int n_frames;      /* decoder steps run for this row (the step whose gate fired included) */
    int mel_length;    /* DLE's mel_lengths: the steps before sigmoid(gate) first exceeded the
                          threshold (n_frames when it never did); audio is cut to mel_length · hop */
    float *alignments; /* (n_frames, n_ids) attention weights per step; hark_malloc'ed */
    int n_ids;
} tacotron2_result_t;

/* Batched inference: row b speaks ids[b] (n_ids[b] symbol ids in [0, n_symbols)); batch >= 1.
 * Each row decodes until its own gate fires (or max_decoder_steps): finished rows leave the
 * batch, so a row's result equals its batch-1 result. res (batch) receives the results.
 * HARK_ERR_INVALID_ARG (an empty batch, no ids, an id out of range), HARK_ERR_TOO_LARGE,
 * HARK_ERR_NOMEM. On an error every res[b] is zeroed. */
int tacotron2_infer(const tacotron2_model_t *m, const int *const *ids, const int *n_ids, int batch,
                    const tacotron2_opts_t *o, tacotron2_result_t *res, hark_err_t *err);
void tacotron2_result_free(tacotron2_result_t *r); /* frees what r owns, zeroes it; NULL-safe */

#endif
