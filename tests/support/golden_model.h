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

/* What every golden model of the tests is: tools/<converter> run once per (converter,
 * checkpoint) version — sizes and mtimes of both — into /tmp/hark-test-cache-<uid>/<tag>-<key>/m
 * by /usr/bin/python3 with `args --output DIR/m` (args: the converter's other arguments, paths
 * quoted by the caller), in a private directory renamed into place so that parallel test
 * processes never see a half-written model. dir (ndir >= 512) receives the directory; returns
 * dir, or NULL with a reason in why (the converter, the checkpoint or python3 with torch, yaml
 * and numpy missing, or the conversion failed: its log is named). */
const char *golden_convert_cached(const char *tag, const char *converter, const char *ckpt,
                                  const char *args, char *dir, size_t ndir, char *why, size_t nwhy);

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
