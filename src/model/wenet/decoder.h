/* decoder.h — WeNet attention decoder (transformer / bitransformer) on the CPU (float32): scores
 * the CTC n-best for attention rescoring, the reference the GPU path is checked against. Tests:
 * tests/model/wenet/test_decoder.c (token log-probs and scores against the golden set).
 *
 * Ownership. A wenet_decoder_model_t is immutable once created and may be shared by any number of
 * threads: its weights are float32 views into memory the caller keeps alive and unchanged for the
 * model's lifetime (the safetensors mapping, or the buffers behind a conformer_tensor_fn); it owns
 * only the sinusoid table. Each scoring call allocates its own scratch (freed before it returns),
 * so concurrent calls on one model are safe. Buffers passed in are lent for the call only.
 *
 * What it computes (WeNet's attention_rescoring, README note 9). For candidate i with tokens
 * hyp[0..len): the left decoder reads <sos>+hyp (rows 0..len), the right decoder
 * <sos>+reversed(hyp); each is embed·sqrt(D) + absolute pe, blocks of [causal self-attention,
 * source attention over all T encoder frames, ReLU FFN] (pre-norm, or post-norm when
 * normalize_before is false), after_norm (pre-norm only), output_layer, log_softmax. Then, summed
 * in float32 in WeNet's order (tokens j = 0..len-1, then <eos>):
 *   fwd[i] = Σ_j logp[j][hyp_j] + logp[len][eos];
 *   rev[i] = Σ_j rlogp[len-1-j][hyp_j] + rlogp[len][eos].
 * The n candidates are batched (every linear runs over all their rows at once, with no padding
 * rows), and each candidate's result depends only on its own tokens and enc.
 */
#ifndef HARK_MODEL_DECODER_H
#define HARK_MODEL_DECODER_H

#include "core/error.h"
#include "model/wenet/conformer.h" /* conformer_tensor_fn */
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

/* (wenet_config.h already uses the name wenet_decoder_t for the decoder-type enum.) */
typedef struct wenet_decoder_model wenet_decoder_model_t;

/* Builds the decoder of a validated config (cfg->decoder TRANSFORMER or BITRANSFORMER) from a
 * weight source with WeNet's names: `decoder.*` for a transformer, `decoder.left_decoder.*` and
 * `decoder.right_decoder.*` for a bitransformer (docs/model-format.md). HARK_ERR_INVALID_ARG for
 * decoder type none or bad sizes, the getter's status for a missing or mis-shaped tensor (the
 * message names it), HARK_ERR_NOMEM. */
int wenet_decoder_create_fn(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                            wenet_decoder_model_t **out, hark_err_t *err);
/* The same with the tensors of an open safetensors file (F32 only); st must outlive the model. */
int wenet_decoder_create(const wenet_config_t *cfg, const safetensors_t *st,
                         wenet_decoder_model_t **out, hark_err_t *err);
void wenet_decoder_destroy(wenet_decoder_model_t *d); /* accepts NULL */

/* 1 when the model has a right-to-left decoder (bitransformer). */
int wenet_decoder_has_right(const wenet_decoder_model_t *d);

/* Full log-softmax of one candidate, lent to the hook for the duration of the call:
 * logp (rows, vocab), rows = len + 1, row r = the distribution after input r (<sos> = input 0).
 * right = 0 left decoder, 1 right decoder (inputs <sos>+reversed(hyp)). */
typedef void (*wenet_decoder_logp_fn)(void *user, int right, int cand, int rows, int vocab,
                                      const float *logp);

typedef struct {
    /* Optional per-token log-probs, (n, tok_ld) row-major, tok_ld >= max(lens) + 1; columns past
     * lens[i] are left untouched (the golden's layout, where they are NaN):
     *   fwd_tok[i][j] = logp[j][hyp_j] for j < len, fwd_tok[i][len] = logp[len][eos]
     *   rev_tok[i][c] = rlogp[c][hyp_{len-1-c}] for c < len (column c = right-decoder row c,
     *   which predicts hyp token len-1-c), rev_tok[i][len] = rlogp[len][eos]. rev_tok is written
     *   only when rev is computed. */
    float *fwd_tok;
    float *rev_tok;
    int tok_ld;
    wenet_decoder_logp_fn logp_hook; /* optional; must not keep the pointer */
    void *hook_user;
    int n_threads; /* OpenBLAS threads for this call; <= 0 leaves the setting alone */
} wenet_decoder_opts_t;

/* No per-token outputs, no hook, threads untouched. */
wenet_decoder_opts_t wenet_decoder_default_opts(void);

/* Scores n candidate hypotheses of one utterance against its encoder output.
 *   enc   (T, D) encoder output of the utterance (only its T valid frames), T >= 1
 *   hyps  n token arrays, hyps[i] of lens[i] >= 0 ids in [0, vocab)
 *   fwd   (n) left-decoder scores (float32, as WeNet sums them)
 *   rev   (n) right-decoder scores; set to 0 (and not computed) when the model has no right
 *         decoder or reverse_weight <= 0 (WeNet skips the right decoder then). May be NULL
 *         (the right decoder then runs only for opts->rev_tok or opts->logp_hook).
 * The combined attention score is fwd·(1-rw) + rev·rw (the caller adds ctc_weight·ctc).
 * opts NULL means wenet_decoder_default_opts(). n = 0 is a no-op. HARK_ERR_INVALID_ARG for bad
 * sizes or a token out of range, HARK_ERR_TOO_LARGE for len + 1 past the positional table
 * (cfg.max_len), HARK_ERR_NOMEM. */
int wenet_decoder_score(const wenet_decoder_model_t *d, const wenet_decoder_opts_t *opts,
                        const float *enc, int T, const int *const *hyps, const int *lens, int n,
                        float reverse_weight, float *fwd, float *rev, hark_err_t *err);

#endif
