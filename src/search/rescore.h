/* rescore.h — WeNet attention-rescoring selection (wenet/models/transformer/search.py,
 * attention_rescoring): combines decoder and CTC scores with WeNet's float32 torch-scalar
 * arithmetic and picks the winner. Tests: tests/search/test_search.c (golden candidates).
 *
 * The decoder scores come from the attention decoder (model/wenet/decoder.h); the CTC prefix scores
 * from ctc_prefix_beam_search. All buffers are lent for the call only.
 *
 * Arithmetic, per candidate i (float32 unless noted; w32(x) = (float)x, as torch casts a Python
 * scalar to the tensor's dtype):
 *   combined[i] = use_rev ? fwd*w32(1-rw) + rev*w32(rw) : fwd     (1-rw computed in double)
 *   final[i]    = combined[i] + w32(ctc[i]*ctc_weight)            (product in double)
 *   conf[i]     = exp((double)(combined[i] / (float)(len_i + 1))) (exp in double)
 * use_rev = rev != NULL && rw > 0. best = the first i with the maximum final (0 when none is
 * greater than -inf, as in WeNet).
 */
#ifndef HARK_SEARCH_RESCORE_H
#define HARK_SEARCH_RESCORE_H

#include "core/error.h"

typedef struct {
    int best;          /* index of the winning candidate */
    float score;       /* final[best]: WeNet's result score */
    double confidence; /* conf[best]: WeNet's result confidence */
} rescore_pick_t;

/* Weights are doubles as in WeNet's Python (pass the config's values; 0.5/0.3 stored as float
 * give the same results).
 *   ctc      (n) CTC prefix scores (ctc_nbest_t.scores)
 *   fwd      (n) left-decoder scores;  rev (n) right-decoder scores or NULL
 *   lens     (n) token counts of the candidates
 *   combined, final_, conf: optional (n) outputs (NULL to skip)
 * n = 0 or a negative len: HARK_ERR_INVALID_ARG (as is a NULL required array). */
int rescore_select(const double *ctc, const float *fwd, const float *rev, const int *lens, int n,
                   double ctc_weight, double reverse_weight, float *combined, float *final_,
                   double *conf, rescore_pick_t *out, hark_err_t *err);

/* WeNet's tokens_confidence for one candidate of len tokens, in double:
 *   tc[j] = exp(fwd_tok[j]), then with use_rev (rev_tok != NULL && rw > 0)
 *   tc[j] = (tc[j] + exp(rev_tok[len-1-j])) / 2
 * fwd_tok, rev_tok: one candidate's rows in the layout of the decoder's fwd_tok / rev_tok options
 * and of the golden *_token_logp.npy files: fwd_tok[j] = left-decoder log p of hyp token j;
 * rev_tok[len-1-j] = right-decoder log p of hyp token j (the right decoder reads the hypothesis
 * reversed). */
void rescore_token_confidence(const float *fwd_tok, const float *rev_tok, int len,
                              double reverse_weight, double *tc);

#endif
