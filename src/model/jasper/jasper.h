/* jasper.h — NVIDIA DeepLearningExamples' Jasper (dense-residual 1-D conv blocks) and QuartzNet
 * (time-channel separable convs) CTC models on the CPU: the nemo-mel front end with DLE's padding
 * (pad_align, pad_leading), masked convolutions with batch norm folded in at load, the CTC head
 * and greedy CTC over characters as DLE's inference.py decodes. The model files are those of
 * tools/convert_jasper.py (docs/model-format.md).
 * Tests: tests/model/jasper/test_jasper.c (every stage against DLE's goldens)
 *
 * OWNERSHIP AND THREADS
 * - jasper_model_t: made by jasper_load, immutable afterwards (folded weights in one block),
 *   shared by any number of workers; jasper_destroy once no worker is left.
 * - jasper_worker_t: one thread's scratch, sized at creation for (max_seconds); jasper_run and
 *   jasper_forward use it and allocate nothing else but the result's arrays.
 */
#ifndef HARK_MODEL_JASPER_H
#define HARK_MODEL_JASPER_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

#define JASPER_MAX_BLOCKS 64
#define JASPER_MAX_PANES 64

typedef enum { JASPER_ARCH_JASPER = 0, JASPER_ARCH_QUARTZNET = 1 } jasper_arch_t;
typedef enum { JASPER_ACT_RELU = 0, JASPER_ACT_HARDTANH = 1 } jasper_act_t;

typedef struct {
    int filters, repeat, kernel, stride, dilation;
    int separable;                 /* depthwise (kernel) then pointwise (1x1) per sub-block */
    int n_panes;                   /* residual 1x1 convs; pane p reads the block list's [p] */
    int pane_ch[JASPER_MAX_PANES]; /* (n_panes) their input channels */
    int dense;                     /* the output is appended to the list (else replaces it) */
} jasper_block_cfg_t;

typedef struct {
    jasper_arch_t arch;
    int sample_rate, n_filt, pad_align, pad_leading;
    int in_feats;
    jasper_act_t act;
    int conv_masks; /* use_conv_masks: every conv zeroes its input past the valid length */
    int n_blocks;
    jasper_block_cfg_t blocks[JASPER_MAX_BLOCKS];
    int n_labels;  /* the blank is id n_labels; vocabulary n_labels + 1 */
    char **labels; /* (n_labels) UTF-8 strings, owned */
    int stride;    /* product of the blocks' strides (feature frames per output frame) */
} jasper_config_t;

/* Reads model.json. HARK_ERR_IO, HARK_ERR_FORMAT / HARK_ERR_UNSUPPORTED naming the field. */
int jasper_config_load(const char *path, jasper_config_t *cfg, hark_err_t *err);
void jasper_config_free(jasper_config_t *cfg);

typedef struct jasper_model jasper_model_t;
typedef struct jasper_worker jasper_worker_t;

/* Loads DIR/<version>/model.json and model.safetensors (version 0 means 1), checks every tensor's
 * shape and finiteness, folds each batch norm into the conv before it. HARK_ERR_IO,
 * HARK_ERR_FORMAT (naming the tensor and both shapes), HARK_ERR_NOMEM. */
int jasper_load(const char *dir, int version, jasper_model_t **out, hark_err_t *err);
/* A model from a config (copied) and a tensor source: get(user, name, ndim, shape, &data, err)
 * lends each tensor of the file's names and shapes (st_get_f32 over a safetensors file, or
 * synth_weights_get for generated weights); the folded weights are copies. cfg must be valid
 * (as jasper_config_load leaves it). Errors as jasper_load. */
typedef int (*jasper_tensor_fn)(void *user, const char *name, int ndim, const int64_t *shape,
                                const float **data, hark_err_t *err);
int jasper_create(const jasper_config_t *cfg, jasper_tensor_fn get, void *user,
                  jasper_model_t **out, hark_err_t *err);
void jasper_destroy(jasper_model_t *m); /* accepts NULL */
const jasper_config_t *jasper_config(const jasper_model_t *m);
int jasper_vocab(const jasper_model_t *m); /* n_labels + 1 */

/* Sizes for n_sig samples (a padded row: n_sig of the row, the rest as DLE pads):
 * T_in = roundup(1 + n_sig / hop, pad_align) + pad_leading, T_out the encoder's frames. */
int jasper_frames_in(const jasper_model_t *m, size_t n_sig);
int jasper_frames_out(const jasper_model_t *m, int t_in);
/* Encoder length for a valid input length (the masked convs' length rule). */
int jasper_len_out(const jasper_model_t *m, int len_in);

/* Shortest audio accepted: the STFT's reflection needs n_fft / 2 + 1 samples. */
size_t jasper_min_samples(const jasper_model_t *m);

/* Intermediate stages for tests and --dump-dir: name, (rows = frames, cols) row-major, lent. */
typedef void (*jasper_stage_fn)(void *user, const char *name, const float *data, int rows,
                                int cols);

int jasper_worker_create(const jasper_model_t *m, double max_seconds, jasper_worker_t **out,
                         hark_err_t *err);
void jasper_worker_destroy(jasper_worker_t *w); /* accepts NULL */

/* Model input of one row: x (n_sig samples; the first n_valid the utterance) -> feats
 * (T_in, n_filt): pad_leading zero frames, the valid nemo-mel frames, zeros up to T_in.
 * *t_in, *len_in: T_in and the valid length (pad_leading frames count as valid, as in DLE).
 * feats has room for jasper_frames_in(m, n_sig) rows. HARK_ERR_INVALID_ARG (too short). */
int jasper_features(const jasper_model_t *m, const float *x, size_t n_sig, size_t n_valid,
                    float *feats, int *t_in, int *len_in, hark_err_t *err);

/* Encoder + CTC head: feats (t_in, n_filt) with len_in valid frames -> logp (T_out, vocab)
 * log-probabilities for every frame (frames past *len_out included, as DLE computes them).
 * t_in must fit the worker (HARK_ERR_TOO_LARGE). stage may be NULL. */
int jasper_forward(jasper_worker_t *w, const float *feats, int t_in, int len_in, float *logp,
                   int *len_out, jasper_stage_fn stage, void *user, hark_err_t *err);

/* One utterance end to end. */
typedef struct {
    int *frame_ids; /* (n_frames) argmax of every output frame (DLE's greedy decoder output) */
    int n_frames;   /* T_out */
    int len_out;    /* valid output frames */
    int *tokens;    /* (n_tokens) label ids after the CTC collapse, blanks removed */
    int *times;     /* (n_tokens) output frame where each token's run starts */
    int n_tokens;
    char *text;   /* the labels joined */
    double score; /* sum over the decoded frames of the best log-probability */
} jasper_result_t;
void jasper_result_free(jasper_result_t *r); /* frees what r owns and zeroes it; NULL-safe */

typedef struct {
    int valid_frames_only; /* 0: decode every frame as DLE's inference.py; 1: only len_out */
    jasper_stage_fn stage; /* NULL: none */
    void *stage_user;
} jasper_run_opts_t;

/* x (n samples in [-1, 1], finite) -> *res. HARK_ERR_INVALID_ARG (empty, too short, NaN),
 * HARK_ERR_TOO_LARGE (longer than the worker's max_seconds), HARK_ERR_NOMEM. */
int jasper_run(jasper_worker_t *w, const float *x, size_t n, const jasper_run_opts_t *o,
               jasper_result_t *res, hark_err_t *err);

/* DLE's greedy CTC over per-frame argmax ids (T) and their log-probabilities best (T): res gets
 * a copy of the ids, the collapsed tokens (blank dropped, repeats merged unless a blank
 * separates them) over every frame, or over the first len_out with valid_frames_only, their
 * start frames, the text and the score (the sum of best over the decoded frames). Shared by
 * jasper_run and the GPU path (jasper_gpu.h). HARK_ERR_NOMEM (res left empty). */
int jasper_decode(const jasper_model_t *m, const int *ids, const float *best, int T, int len_out,
                  int valid_frames_only, jasper_result_t *res, hark_err_t *err);

/* Milliseconds from the start of the audio to output frame t (pad_leading taken off). */
int jasper_frame_ms(const jasper_model_t *m, int t);

#endif
