/* golden_icefall.h — icefall's T1 golden set (../shared/data/golden/icefall/T1, Conformer
 * pruned_transducer_stateless3) converted once per (checkpoint, converter) version into
 * /tmp/hark-test-cache-<uid>/, shared by the icefall tests. */
#ifndef HARK_TEST_GOLDEN_ICEFALL_H
#define HARK_TEST_GOLDEN_ICEFALL_H

#include "core/npy.h"

#include <stddef.h>

#define GOLDEN_ICEFALL "golden/icefall/T1"
#define GOLDEN_ICEFALL_DEBUG_UTT "sb-spk1_snt1-crop1.625s"

/* The four utterances of the set, in results.json's (and the batch's) order. */
extern const char *const golden_icefall_utts[4];

/* Directory holding the converted model as "<dir>/m", or NULL with a reason in why (../shared,
 * the converter or python3-torch missing, or the conversion failed). $HARK_GOLDEN_ICEFALL, when
 * set, names such a directory prepared elsewhere. */
const char *golden_icefall_model_dir(char *why, size_t nwhy);
/* T1/goldens/<sub>/<file> as float32 (from f32/i64); HARK_ERR_IO when absent. */
int golden_icefall_npy(npy_array_t *a, const char *sub, const char *file);
/* T1/results.json parsed (cJSON_Delete it), or NULL. */
struct cJSON *golden_icefall_results(void);

/* Why icefall's own code cannot run here (for SKIP), or NULL when it can: $HARK_ICEFALL_SRC (an
 * icefall source tree: *src), ../shared/tools/icefall (the import shims: their path into shims)
 * and /usr/bin/python3 with torch, torchaudio, numpy and packaging. */
const char *golden_icefall_ref_missing(const char **src, char *shims, size_t nshims);
/* 1 if the JSON array arr holds exactly the n integers a. */
int golden_json_ints_equal(const struct cJSON *arr, const int *a, int n);

#endif
