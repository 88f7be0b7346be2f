/* decode_list.h — recognizes a list of audio files concurrently: a pool of threads calling
 * hark_recognize (include/hark.h) on one shared model, whose worker pool gives each thread its
 * own worker, taking batches of similar-length files (longest first). Used by `hark transcribe
 * --wavscp`. Tests: tests/cli/test_cli_transcribe_eval.c
 *
 * Ownership: items[] belong to the caller; decode_list_run fills their result / error, which
 * decode_item_free releases. The model, the options and the paths are lent for the call.
 * Callbacks run on pool threads, one at a time (under the pool's lock), and must not keep the
 * item pointer.
 */
#ifndef HARK_EVAL_DECODE_LIST_H
#define HARK_EVAL_DECODE_LIST_H

#include "core/error.h"
#include "hark.h"
#include "model/family.h"

typedef struct {
    const char *path;    /* in: audio file (lent) */
    int status;          /* out: HARK_OK, or the failure's status */
    char *error;         /* out: message when status != HARK_OK (hark_malloc'd) */
    asr_result_t result; /* out: on success */
    double seconds;      /* out: audio duration at the model's rate (0 when unreadable) */
} decode_item_t;

typedef void (*decode_done_fn)(void *user, const decode_item_t *item, int done, int total);

/* Zeroed means defaults. */
typedef struct {
    int jobs;            /* worker threads; <= 0: the number of online CPUs (at most n) */
    int batch;           /* utterances per hark_recognize call; <= 0: 1 */
    decode_done_fn done; /* optional: after each item, success or failure */
    void *user;
} decode_list_opts_t;

/* Decodes items[0..n) with opts (NULL: the model's defaults; dump_dir is refused). Files are
 * ordered by size, largest first, so a batch holds utterances of similar length and the longest
 * start early; results land in the item they belong to. A file that cannot be read fails alone; a
 * batch the recognizer refuses is retried one utterance at a time, so a failure stays with its
 * file. Returns HARK_OK when the pool ran (items carry their own status), or the error that kept it
 * from starting (threads, memory). */
int decode_list_run(hark_model_t *m, const hark_asr_opts_t *opts, decode_item_t *items, int n,
                    const decode_list_opts_t *lo, hark_err_t *err);

void decode_item_free(decode_item_t *it); /* releases result and error; keeps path */

#endif
