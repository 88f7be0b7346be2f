/* scp.h — Kaldi-style "<id> <value>" list files: wav.scp (value: a path) and text / trans
 * (value: the words, possibly none), with look-up by id. Tests: tests/eval/test_wer.c
 *
 * Ownership: an scp_t owns its entries' strings; scp_free releases them (accepts a zeroed or
 * already-freed scp_t). Look-ups return pointers into the list, valid until scp_free.
 */
#ifndef HARK_EVAL_SCP_H
#define HARK_EVAL_SCP_H

#include "core/error.h"

#include <stddef.h>

typedef struct {
    char *id;    /* first field */
    char *value; /* the rest of the line, leading/trailing blanks removed; "" when none */
    int line;    /* 1-based line number in the file */
} scp_entry_t;

typedef struct {
    scp_entry_t *e; /* (n) in file order */
    int n;
    int *by_id; /* (n) indices into e sorted by id, for scp_find */
} scp_t;

/* Reads PATH. Blank lines and lines starting with '#' are skipped; fields are separated by
 * spaces or tabs; a trailing CR is ignored. need_value: a line with an id alone is an error
 * (wav.scp) instead of an empty value (a transcript of silence). Errors name the file and line:
 * HARK_ERR_IO (cannot open/read), HARK_ERR_FORMAT (missing value, duplicate id, NUL byte),
 * HARK_ERR_NOMEM. On failure *out is left zeroed. */
int scp_load(const char *path, int need_value, scp_t *out, hark_err_t *err);
void scp_free(scp_t *s);
/* The entry with this id, or NULL. O(log n). */
const scp_entry_t *scp_find(const scp_t *s, const char *id);

/* Kaldi's "command |" wav.scp entries: 1 when value ends with '|' (blanks after it allowed). */
int scp_is_command(const char *value);
/* Runs such an entry's command through /bin/sh and takes its standard output: *data
 * (hark_malloc'd, hark_free) of *len bytes, at most max_bytes. HARK_ERR_IO (cannot start, or the
 * command failed: the message gives its exit status), HARK_ERR_TOO_LARGE, HARK_ERR_NOMEM. The
 * value comes from a list the user gave: it runs with the user's rights, like Kaldi's. */
int scp_run_command(const char *value, void **data, size_t *len, size_t max_bytes, hark_err_t *err);

#endif
