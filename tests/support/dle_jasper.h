/* dle_jasper.h — Jasper / QuartzNet reference sets made with NVIDIA DeepLearningExamples' own code
 * by tools/dle_jasper_reference.py (configurations the J1 goldens do not cover), converted by
 * tools/convert_jasper.py and cached once per (tool, converter, yaml, flags) version in
 * /tmp/hark-test-cache-<uid>/dle-<name>-<key>/{ref,m}; shared by tests/model/jasper/
 * test_jasper_dle.c and test_jasper_gpu.c. */
#ifndef HARK_TEST_DLE_JASPER_H
#define HARK_TEST_DLE_JASPER_H

#include "core/npy.h"

#include <stddef.h>

typedef struct {
    const char *name;   /* cache tag, test log */
    const char *folder; /* DLE's "QuartzNet" or "Jasper" folder */
    const char *yaml;   /* "dle:configs/X.yaml" (a stock config of that folder) or a repo path */
    const char *flags;  /* the reference tool's other flags (--seed, --filters-div ...) */
    const char *conv;   /* convert_jasper.py's other flags */
    const char *ckpt;   /* NULL: weights drawn by the tool; else a checkpoint (as yaml) */
    const char *what;   /* one line for the log */
} dle_jasper_cfg_t;

extern const dle_jasper_cfg_t dle_jasper_cfgs[];
extern const int dle_jasper_n_cfgs;
const dle_jasper_cfg_t *dle_jasper_cfg(const char *name);

/* The directory holding ref/ (the tool's output: the J1 layout) and m/ (the converted model) for
 * c: $HARK_DLE_REF/<name> when $HARK_DLE_REF is set (sets made elsewhere, e.g. for the GPU machine,
 * which has no Debian python3-torch), else made here from $HARK_DLE_SRC (a DeepLearningExamples
 * tree), ../shared/data/audio/en and /usr/bin/python3 with torch, yaml and numpy. dir receives it
 * (ndir >= 512). Returns 0, 1 = skip (a reason in why: something absent), -1 = failure (why names
 * the log). */
int dle_jasper_ref(const dle_jasper_cfg_t *c, char *dir, size_t ndir, char *why, size_t nwhy);

/* <dir>/ref/<sub>/<file> as float32; HARK_ERR_IO when absent. */
int dle_jasper_npy(npy_array_t *a, const char *dir, const char *sub, const char *file);
/* <dir>/ref/<sub>/<file> parsed (cJSON_Delete it), or NULL. */
struct cJSON *dle_jasper_json(const char *dir, const char *sub, const char *file);

#endif
