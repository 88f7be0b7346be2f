/* wer.h — scoring recognizer output: text normalisation (rules in docs/scoring.md), Levenshtein
 * alignment with Kaldi compute-wer's tie-breaking giving substitution / deletion / insertion
 * counts, at word level and at character (code point) level, and corpus totals.
 * Tests: tests/eval/test_wer.c
 *
 * Ownership: strings are lent for the call; wer_normalize returns a string the caller
 * hark_free()s. Nothing here keeps state: every function may be called from any thread.
 */
#ifndef HARK_EVAL_WER_H
#define HARK_EVAL_WER_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    long sub; /* substitutions */
    long del; /* deletions: reference units missing from the hypothesis */
    long ins; /* insertions: hypothesis units not in the reference */
    long ref; /* N: reference length (words or characters) */
} wer_counts_t;

/* Scoring normalisation, applied identically to references and hypotheses (docs/scoring.md):
 * ASCII letters upper-cased, other letters (any non-ASCII code point not listed as punctuation
 * or space) kept as they are; hyphens and dashes become spaces; punctuation is removed, except an
 * apostrophe between two word characters and '.' / ',' between two ASCII digits; whitespace runs
 * collapse to one space, none at either end. Invalid UTF-8 bytes are kept unchanged. *out gets a
 * NUL-terminated string from hark_malloc. HARK_ERR_NOMEM. */
int wer_normalize(const char *text, char **out, hark_err_t *err);

/* Aligns hyp against ref (sequences of symbol ids) with unit costs and fills *out with the S/D/I
 * split of one minimum-cost alignment, chosen as Kaldi's LevenshteinEditDistance does
 * (util/edit-distance-inl.h, used by compute-wer): at each cell a match/substitution wins only
 * when strictly cheaper than both deletion and insertion, then deletion when strictly cheaper
 * than insertion, else insertion. out->ref = nref. Time O(nref * nhyp), memory O(nref).
 * HARK_ERR_NOMEM. */
int wer_align(const uint32_t *ref, size_t nref, const uint32_t *hyp, size_t nhyp, wer_counts_t *out,
              hark_err_t *err);

/* Word level: both texts are split on whitespace (ASCII and the spaces wer_normalize knows) and
 * words compared byte for byte. Pass normalised text to score under docs/scoring.md's rules. */
int wer_words(const char *ref, const char *hyp, wer_counts_t *out, hark_err_t *err);

/* Character level: UTF-8 code points, whitespace excluded (so CER does not count word
 * boundaries); an invalid byte counts as one character of its own. */
int wer_chars(const char *ref, const char *hyp, wer_counts_t *out, hark_err_t *err);

/* acc += c (all four fields). */
void wer_add(wer_counts_t *acc, const wer_counts_t *c);
/* S + D + I */
long wer_errors(const wer_counts_t *c);
/* (S + D + I) / max(N, 1): 0 for an empty reference and an empty hypothesis, the number of
 * inserted units for an empty reference and a non-empty hypothesis. */
double wer_rate(const wer_counts_t *c);

#endif
