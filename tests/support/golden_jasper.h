/* golden_jasper.h — DLE's Jasper golden set (../shared/data/golden/jasper/J1) converted once per
 * (checkpoint, converter) version into /tmp/hark-test-cache-<uid>/, shared by the Jasper tests. */
#ifndef HARK_TEST_GOLDEN_JASPER_H
#define HARK_TEST_GOLDEN_JASPER_H

#include "core/npy.h"

#include <stddef.h>

#define GOLDEN_JASPER "golden/jasper/J1"
#define GOLDEN_JASPER_CKPT "Jasper_epoch1_checkpoint.pt"
#define GOLDEN_JASPER_YAML "jasper10x5dr_speedp-online_speca_golden.yaml"

/* The four utterance directories of the set, in order. */
extern const char *const golden_jasper_utts[4];

/* Directory holding the converted model as "<dir>/m", or NULL with a reason in why (../shared,
 * the converter or python3-torch missing, or the conversion failed). $HARK_GOLDEN_JASPER, when
 * set, names such a directory prepared elsewhere. */
const char *golden_jasper_model_dir(char *why, size_t nwhy);
/* J1/<sub>/<file> as float32 (from f32/i32); HARK_ERR_IO when absent. */
int golden_jasper_npy(npy_array_t *a, const char *sub, const char *file);
/* J1/<sub>/result.json parsed (cJSON_Delete it), or NULL. */
struct cJSON *golden_jasper_json(const char *sub, const char *file);

#endif
