/* units.h — a WeNet unit list (units.txt: "<token> <id>" per line, ids 0..V-1 in order) and
 * detokenization as WeNet's BpeTokenizer / CharTokenizer do it (wenet/text/).
 * Tests: tests/search/test_search.c
 *
 * Ownership: a units_t is immutable once loaded and may be shared by threads; strings returned
 * by units_token live as long as it. units_detokenize returns a string the caller hark_free()s.
 */
#ifndef HARK_SEARCH_UNITS_H
#define HARK_SEARCH_UNITS_H

#include "core/error.h"

typedef struct units units_t;

typedef enum {
    UNITS_STYLE_BPE = 0,  /* join, then U+2581 "▁" -> ' ', then strip (WeNet BpeTokenizer) */
    UNITS_STYLE_CHAR = 1, /* join with no separator (WeNet CharTokenizer, e.g. Chinese chars) */
} units_style_t;

/* Loads units.txt. Each non-empty line is "<token> <id>" (separated by spaces or tabs; a trailing
 * CR is ignored); ids must be 0, 1, 2, ... in line order. HARK_ERR_IO (cannot open/read),
 * HARK_ERR_FORMAT (the message names the file and line: missing id, extra fields, id out of
 * order, empty file), HARK_ERR_NOMEM. */
int units_load(const char *path, units_t **out, hark_err_t *err);
void units_destroy(units_t *u); /* accepts NULL */

int units_count(const units_t *u);                   /* V */
const char *units_token(const units_t *u, int id);   /* NULL when id is outside [0, V) */
int units_find(const units_t *u, const char *token); /* the id, or -1 */
/* UNITS_STYLE_BPE when some token starts with "▁" (a SentencePiece list), else CHAR. A model's
 * config (WeNet `tokenizer: bpe|char`) should win over this guess when known. */
units_style_t units_guess_style(const units_t *u);
/* HARK_OK when the list has exactly `vocab` units (the model's output size), else
 * HARK_ERR_INVALID_ARG with both numbers in the message. */
int units_check_vocab(const units_t *u, int vocab, hark_err_t *err);

/* Text of n ids (the tokens joined; for BPE "▁" becomes a space and leading/trailing whitespace
 * is stripped, as Python's str.strip). Special units (<unk>, ...) are copied as written, as
 * WeNet does. *text is a NUL-terminated UTF-8 string from hark_malloc. HARK_ERR_INVALID_ARG for an
 * id outside [0, V) (names its position), HARK_ERR_NOMEM. */
int units_detokenize(const units_t *u, units_style_t style, const int *ids, int n, char **text,
                     hark_err_t *err);

#endif
