/* tts_text.h — the English text front end of NVIDIA DeepLearningExamples' FastSpeech (keithito's
 * tacotron text package): ARPAbet in {braces}, english_cleaners (ASCII transliteration,
 * lowercasing, numbers, currency, ordinals and years read as inflect reads them, the 18
 * abbreviations, whitespace collapsed), then symbol ids (148 symbols: '_', '-', punctuation,
 * space, A-Z, a-z, 84 '@' ARPAbet phones). Described in docs/tts.md.
 * DLE's Tacotron2 runs the same pipeline with its own transliteration table
 * (TTS_TEXT_DLE_TACOTRON2).
 * Tests: tests/text/test_tts_text.c (the goldens' sentences, the LJSpeech transcripts against
 * tools/tts_text_reference.py, number words, bad input)
 *
 * Pure functions: thread-safe, no global state. Results are owned by the caller.
 */
#ifndef HARK_TEXT_TTS_TEXT_H
#define HARK_TEXT_TTS_TEXT_H

#include "core/error.h"

#include <stddef.h>

#define TTS_N_SYMBOLS 148
#define TTS_FIRST_LETTER 12 /* ids below are '_', '-', punctuation and space */

/* Which original pipeline's english_cleaners: they differ only in the ASCII transliteration. */
typedef enum {
    TTS_TEXT_FASTSPEECH = 0,    /* DLE FastSpeech: the `unidecode` package (— -> --, ü -> u) */
    TTS_TEXT_DLE_TACOTRON2 = 1, /* DLE Tacotron2: its own table-based `unidecoder` (— dropped,
                                   ü -> ue) */
} tts_text_variant_t;

typedef struct {
    int *ids; /* (n) symbol ids, hark_malloc'ed */
    int n;
    char *cleaned; /* the cleaned text of the non-ARPAbet parts, joined (for logs and dumps) */
} tts_text_t;

/* utf8 (NUL-terminated) -> *out. HARK_ERR_INVALID_ARG: not valid UTF-8, or no letter or phone
 * left (only punctuation and spaces: nothing to speak; the message says so); HARK_ERR_UNSUPPORTED:
 * text the original pipeline cannot read either (it raises: "$,5", numbers of more than 36 digits);
 * HARK_ERR_NOMEM. */
int tts_text_to_ids(const char *utf8, tts_text_t *out, hark_err_t *err);
/* The same with the given variant's transliteration (tts_text_to_ids: TTS_TEXT_FASTSPEECH). */
int tts_text_to_ids_variant(const char *utf8, tts_text_variant_t variant, tts_text_t *out,
                            hark_err_t *err);
void tts_text_free(tts_text_t *t); /* NULL-safe; zeroes *t */

/* english_cleaners on one segment (no brace handling): *out hark_malloc'ed. */
int tts_text_clean(const char *utf8, size_t len, char **out, hark_err_t *err);
int tts_text_clean_variant(const char *utf8, size_t len, tts_text_variant_t variant, char **out,
                           hark_err_t *err);

/* inflect's number_to_words(digits, andword=andword) for a digit string with an optional
 * st/nd/rd/th suffix (ordinal); *out hark_malloc'ed. For tests. */
int tts_number_words(const char *digits, const char *andword, char **out, hark_err_t *err);

/* Symbol text of id (e.g. "a", " ", "@AA1"), or NULL when out of range. */
const char *tts_symbol(int id);

#endif
