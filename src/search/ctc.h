/* ctc.h — CTC decoding on the CPU, as WeNet does it (wenet/models/transformer/search.py):
 * greedy search and prefix beam search (one-shot or frame by frame), with per-token frame times.
 * Tests: tests/search/test_search.c (synthetic cases and the WeNet golden n-best lists).
 *
 * Ownership. Log-probs are lent for the call only. A ctc_nbest_t is a snapshot owned by the
 * caller, released with ctc_nbest_free (one allocation; its arrays are read-only views into it).
 * A ctc_beam_t is mutable per-utterance state: one thread at a time; create/destroy.
 *
 * Input layout: logp (T, V) row-major float32 log-probabilities (the CTC head's log_softmax).
 */
#ifndef HARK_SEARCH_CTC_H
#define HARK_SEARCH_CTC_H

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* n hypotheses, best first. For T = 0 both searches return n = 1 with an empty hypothesis
 * (score 0), as WeNet does. */
typedef struct {
    int n;
    const int *const *tokens; /* (n) tokens[i]: (lens[i]) token ids, blanks removed */
    const int *const *times;  /* (n) times[i]: (lens[i]) encoder frame of each token; -1 for
                                 tokens without one (only in hypotheses of score -inf, whose
                                 WeNet time list is shorter than the prefix) */
    const int *lens;          /* (n) */
    const double *scores;     /* (n) prefix beam: logadd(s, ns) in double (WeNet's
                                 nbest_scores); greedy: sum over frames of the max log-prob */
    void *mem_;               /* the single allocation behind the arrays */
} ctc_nbest_t;

/* Releases the arrays and zeroes *nb. Accepts NULL and a zeroed struct. */
void ctc_nbest_free(ctc_nbest_t *nb);

/* For producers of n-best lists (the searches here, ctc_beam_gpu.h): one allocation for n
 * hypotheses of lens[i] tokens; *tokens, *times (n arrays of lens[i] ints) and *scores (n) are
 * the writable views of *nb's arrays. HARK_ERR_NOMEM (then *nb is untouched). */
int ctc_nbest_alloc(ctc_nbest_t *nb, int n, const int *lens, int ***tokens, int ***times,
                    double **scores, hark_err_t *err);

/* Greedy search: per-frame argmax (first index on ties), collapse repeats, drop blanks.
 * times[j] is WeNet's gen_ctc_peak_time: the first frame of the run that emitted token j.
 * Returns n = 1. HARK_ERR_INVALID_ARG (T < 0, V < 1, blank outside [0, V), logp NULL with T > 0),
 * HARK_ERR_NOMEM. On error *out is zeroed. */
int ctc_greedy_search(const float *logp, int T, int V, int blank, ctc_nbest_t *out,
                      hark_err_t *err);

/* Greedy search in pieces (streaming): ctc_argmax_rows writes the argmax of each of T rows
 * (first index on ties) to arg and adds the sum of the row maxima, in frame order, to *score
 * (NULL: not summed); returns T. ctc_greedy_from_argmax collapses a whole utterance's argmax
 * (T frames) as ctc_greedy_search does, with `score` as the hypothesis' score: feeding the rows
 * in any split gives exactly ctc_greedy_search's result. HARK_ERR_INVALID_ARG, HARK_ERR_NOMEM. */
int ctc_argmax_rows(const float *logp, int T, int V, int *arg, double *score);
/* The same from each row's top entries (rows of k: ctc_row_topk's, e.g. from the GPU): the argmax
 * is a row's first entry; equal to ctc_argmax_rows for rows without NaN. Returns T. */
int ctc_argmax_topk(const int *idx, const float *val, int k, int T, int *arg, double *score);

/* The top k of one row of V (1 <= k <= V) in the order the prefix beam search takes them:
 * descending, lower id first on equal values; idx (k) and val (k). */
void ctc_row_topk(const float *row, int V, int k, int *idx, float *val);
int ctc_greedy_from_argmax(const int *arg, int T, int blank, double score, ctc_nbest_t *out,
                           hark_err_t *err);

/* Prefix beam search, exactly WeNet's ctc_prefix_beam_search (no context graph): per frame the
 * top-k tokens (k = min(beam, V), descending, lower id first on ties) in top-k order, each over
 * the current prefixes in beam order; blank / repeated-token / other-token updates in double with
 * log_add = max + log(sum(exp(a - max))); then a stable sort (ties keep first-insertion order)
 * and the first `beam` kept. times are WeNet's Viterbi-path times (nbest_times).
 * Returns up to `beam` hypotheses. HARK_ERR_INVALID_ARG (as greedy, and beam < 1),
 * HARK_ERR_TOO_LARGE (beam > CTC_MAX_BEAM),
 * HARK_ERR_NOMEM. On error *out is zeroed. */
int ctc_prefix_beam_search(const float *logp, int T, int V, int beam, int blank, ctc_nbest_t *out,
                           hark_err_t *err);

/* The same search fed frame by frame (streaming). Feeding the frames of an utterance in any
 * split gives exactly the one-shot result; times count frames since create/reset. */
typedef struct ctc_beam ctc_beam_t;

#define CTC_MAX_BEAM 256 /* per-frame scratch grows as beam * min(beam, V) */

/* HARK_ERR_INVALID_ARG (V < 1, beam < 1, blank outside [0, V)), HARK_ERR_TOO_LARGE (beam >
 * CTC_MAX_BEAM), HARK_ERR_NOMEM. */
int ctc_beam_create(int V, int beam, int blank, ctc_beam_t **out, hark_err_t *err);
void ctc_beam_destroy(ctc_beam_t *b); /* accepts NULL */
/* Back to the empty prefix at frame 0 (keeps the memory). */
void ctc_beam_reset(ctc_beam_t *b);
/* Consumes logp (T, V); T = 0 is a no-op. On error (HARK_ERR_NOMEM) the state is that before
 * the frame that failed, so the call can be retried. */
int ctc_beam_advance(ctc_beam_t *b, const float *logp, int T, hark_err_t *err);
/* The same from each frame's top entries only: rows of k >= min(beam, V) ids and log-probs in
 * ctc_row_topk's order (the search reads the first min(beam, V) of each; nothing else of a frame
 * matters to it), so that streams need not copy whole rows of log-probs. Gives exactly what
 * ctc_beam_advance gives on the rows these came from. HARK_ERR_INVALID_ARG (k too small). */
int ctc_beam_advance_topk(ctc_beam_t *b, const int *idx, const float *val, int k, int T,
                          hark_err_t *err);
/* Frames consumed so far. */
int ctc_beam_frames(const ctc_beam_t *b);
/* Tokens of the best prefix so far (0 before any, or when it is the empty one). */
int ctc_beam_best_len(const ctc_beam_t *b);
/* Snapshot of the current beam (best first). HARK_ERR_NOMEM; on error *out is zeroed. */
int ctc_beam_nbest(const ctc_beam_t *b, ctc_nbest_t *out, hark_err_t *err);

#ifdef __cplusplus
}
#endif
#endif
