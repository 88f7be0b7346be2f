/* decoder_weights.h — the weight layout of WeNet's attention decoder, shared by decoder.c (host
 * pointers) and decoder_gpu.c (device pointers, through a getter that uploads): the tensors by
 * WeNet's names, the checks on a config, and one loader over a conformer_tensor_fn. Internal to
 * src/model; implemented in decoder.c. */
#ifndef HARK_MODEL_DECODER_WEIGHTS_H
#define HARK_MODEL_DECODER_WEIGHTS_H

#include "core/error.h"
#include "model/wenet/conformer.h" /* conformer_tensor_fn */
#include "model/wenet/wenet_config.h"

typedef struct {
    const float *w; /* (out, in) */
    const float *b; /* (out) */
} wdec_lin_t;

typedef struct {
    const float *g, *b; /* (D) */
} wdec_norm_t;

typedef struct {
    wdec_norm_t norm1, norm2, norm3; /* before self-attn, src-attn, FFN (after them: post-norm) */
    wdec_lin_t sq, sk, sv, so;       /* self_attn.linear_{q,k,v,out}: (D, D) */
    wdec_lin_t cq, ck, cv, co;       /* src_attn.linear_{q,k,v,out}: (D, D) */
    wdec_lin_t w1;                   /* feed_forward.w_1: (F, D) */
    wdec_lin_t w2;                   /* feed_forward.w_2: (D, F) */
} wdec_block_t;

typedef struct {
    const float *embed;   /* (V, D) embed.0.weight */
    wdec_block_t *blocks; /* (n_blocks) */
    int n_blocks;
    wdec_norm_t after_norm; /* pre-norm only */
    wdec_lin_t out;         /* output_layer: (V, D) */
} wdec_stack_t;

typedef struct {
    wdec_stack_t left, right; /* right: bitransformer only (n_blocks 0 otherwise) */
    wdec_block_t *blocks;     /* owned: the left blocks, then the right ones */
} wdec_weights_t;

/* HARK_ERR_INVALID_ARG for a config without an attention decoder or with bad sizes (the message
 * names them). */
int wdec_check_config(const wenet_config_t *cfg, hark_err_t *err);

/* Fills w from get with WeNet's names (`decoder.*` for a transformer, `decoder.left_decoder.*` and
 * `decoder.right_decoder.*` for a bitransformer); the getter's status for a missing or mis-shaped
 * tensor, HARK_ERR_NOMEM. On failure w holds nothing to free. cfg must pass wdec_check_config. */
int wdec_load(const wenet_config_t *cfg, conformer_tensor_fn get, void *user, wdec_weights_t *w,
              hark_err_t *err);
void wdec_free(wdec_weights_t *w); /* the blocks array; accepts a zeroed struct */

/* Checks candidates first .. first + n - 1 (hyps[i] of lens[i] tokens): lengths >= 0, len + 1 rows
 * within max_len, tokens in [0, vocab); adds their rows (Σ len + 1) to *rows and raises
 * *max_rows. HARK_ERR_INVALID_ARG / HARK_ERR_TOO_LARGE naming the candidate. */
int wdec_check_candidates(int max_len, int vocab, const int *const *hyps, const int *lens,
                          int first, int n, size_t *rows, int *max_rows, hark_err_t *err);

#endif
