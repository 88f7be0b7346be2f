/* rescore.c — WeNet attention-rescoring score combination and selection, in WeNet's float32
 * torch-scalar arithmetic (see rescore.h). Tests: tests/search/test_search.c
 */
#include "search/rescore.h"

#include "hark.h"

#include <math.h>

/* A float32 tensor op with a Python scalar: torch casts the scalar to float, then computes and
 * rounds in float32. volatile keeps every intermediate a real float (no excess precision, no
 * contraction into an FMA). */
static float mul32(float a, double scalar)
{
    volatile float s = (float)scalar;
    volatile float r = a * s;
    return r;
}

static float add32(float a, float b)
{
    volatile float r = a + b;
    return r;
}

int rescore_select(const double *ctc, const float *fwd, const float *rev, const int *lens, int n,
                   double ctc_weight, double reverse_weight, float *combined, float *final_,
                   double *conf, rescore_pick_t *out, hark_err_t *err)
{
    if (!ctc || !fwd || !lens || !out || n < 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "rescore_select: bad arguments (n=%d, a required array is NULL?)", n);
    for (int i = 0; i < n; i++)
        if (lens[i] < 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "rescore_select: candidate %d has length %d",
                           i, lens[i]);
    int use_rev = rev != NULL && reverse_weight > 0;
    int best = 0;
    float best_score = -INFINITY;
    double best_conf = 0.0;
    for (int i = 0; i < n; i++) {
        float score = fwd[i];
        if (use_rev)
            score = add32(mul32(fwd[i], 1.0 - reverse_weight), mul32(rev[i], reverse_weight));
        volatile float per_tok = score / (float)(lens[i] + 1);
        double c = exp((double)per_tok);
        float fin = add32(score, (float)(ctc[i] * ctc_weight));
        if (combined)
            combined[i] = score;
        if (final_)
            final_[i] = fin;
        if (conf)
            conf[i] = c;
        if (i == 0)
            best_conf = c;
        if (fin > best_score) {
            best_score = fin;
            best = i;
            best_conf = c;
        }
    }
    out->best = best;
    out->score = best_score;
    out->confidence = best_conf;
    return HARK_OK;
}

void rescore_token_confidence(const float *fwd_tok, const float *rev_tok, int len,
                              double reverse_weight, double *tc)
{
    int use_rev = rev_tok != NULL && reverse_weight > 0;
    for (int j = 0; j < len; j++) {
        tc[j] = exp((double)fwd_tok[j]);
        if (use_rev)
            tc[j] = (tc[j] + exp((double)rev_tok[len - 1 - j])) / 2;
    }
}
