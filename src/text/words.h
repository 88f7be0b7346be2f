/* words.h — word timings from a hypothesis' token timestamps, grouped into subtitle cues and
 * written as SRT or WebVTT (rules in docs/scoring.md, "Word times and subtitles").
 * Tests: tests/eval/test_wer.c
 *
 * Ownership: words_from_tokens returns an array (and its strings) the caller releases with
 * words_free; the units list and the token arrays are lent for the call.
 */
#ifndef HARK_EVAL_WORDS_H
#define HARK_EVAL_WORDS_H

#include "core/error.h"
#include "text/units.h"

#include <stdio.h>

typedef struct {
    char *text;   /* the word as the detokenizer writes it (UTF-8) */
    int start_ms; /* frame of its first token x frame_ms */
    int end_ms;   /* (frame of its last token + 1) x frame_ms */
} word_time_t;

/* Groups n tokens (ids, encoder frames) into words. BPE: a token starting with U+2581 "▁"
 * begins a word (the first token always does); a word's text is units_detokenize of its tokens
 * and a word whose text comes out empty is dropped. CHAR: every token is a word. *out gets
 * *nout <= n words (NULL when none). HARK_ERR_INVALID_ARG (token id outside the list),
 * HARK_ERR_NOMEM. */
int words_from_tokens(const units_t *u, units_style_t style, const int *tokens, const int *times,
                      int n, int frame_ms, word_time_t **out, int *nout, hark_err_t *err);
void words_free(word_time_t *w, int n); /* accepts NULL */

/* Zeroed means defaults. */
typedef struct {
    int max_words; /* words per cue; 0: 7 */
    int pause_ms;  /* a silence longer than this between two words starts a new cue; 0: 500 */
    int hold_ms;   /* a cue stays up this long after its last word ends, but never past the
                      next cue's start or the end of the audio; 0: 500, < 0: no hold */
} cue_opts_t;

typedef struct {
    int first, count; /* words [first, first + count) */
    int start_ms, end_ms;
} cue_t;

/* Splits n words into cues (at most n, written to cues[]); returns the number of cues.
 * duration_ms: length of the audio, or 0 when unknown (the last cue then holds hold_ms). */
int cues_build(const word_time_t *w, int n, const cue_opts_t *o, int duration_ms, cue_t *cues);

typedef enum { SUBTITLE_SRT = 0, SUBTITLE_VTT = 1 } subtitle_format_t;

/* Writes the cues of n words as SRT ("1\n00:00:01,000 --> 00:00:02,500\nTEXT\n\n" ...) or WebVTT
 * ("WEBVTT\n\n00:00:01.000 --> 00:00:02.500\nTEXT\n\n" ...). Words are joined with a space for
 * BPE and with nothing for CHAR units; WebVTT text escapes '&', '<', '>'. HARK_ERR_IO when writing
 * fails, HARK_ERR_NOMEM. */
int subtitle_write(FILE *f, subtitle_format_t fmt, const word_time_t *w, int n, units_style_t style,
                   const cue_opts_t *o, int duration_ms, hark_err_t *err);

#endif
