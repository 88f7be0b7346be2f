/* golden_model.h — the WeNet golden checkpoint converted once per (checkpoint, converter) version
 * into /tmp/hark-test-cache-<uid>/, shared by the model tests. */
#ifndef HARK_TEST_GOLDEN_MODEL_H
#define HARK_TEST_GOLDEN_MODEL_H

#include <stddef.h>

#define GOLDEN_WENET "golden/wenet_u2pp_conformer_small"

/* Directory holding the converted model as "<dir>/m" (a model-repository entry), or NULL with a
 * reason in why (../shared, the converter or python3-torch missing, or the conversion failed).
 * $HARK_GOLDEN_MODEL, when set, names such a directory prepared elsewhere, and so does
 * ../shared/data/GOLDEN_WENET/converted when present (the GPU machine has no Debian python3-torch
 * to convert with). */
const char *golden_wenet_model_dir(char *why, size_t nwhy);

struct cJSON;
struct safetensors;
#include "core/npy.h"
#include "model/wenet/wenet_config.h"

/* Opens the converted golden model's config and weights: 0 ok, 1 skip (reason in why), -1 failure
 * (message in why). *st is the caller's (st_close). */
int golden_wenet_open(wenet_config_t *cfg, struct safetensors **st, char *why, size_t nwhy);
/* goldens/<utt>/<file> as float32 (HARK_ERR_IO when absent). */
int golden_wenet_npy(npy_array_t *a, const char *utt, const char *file);
/* results.json parsed (cJSON_Delete it), or NULL. */
struct cJSON *golden_wenet_results(void);

#endif
