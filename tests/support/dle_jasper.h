/* dle_jasper.h — Jasper / QuartzNet reference sets of the J1 golden layout made with NVIDIA
 * DeepLearningExamples' own code: those tools/dle_jasper_reference.py makes for configurations
 * the J1 goldens do not cover, converted by tools/convert_jasper.py and cached once per (tool,
 * converter, yaml, flags) version in /tmp/hark-test-cache-<uid>/dle-<name>-<key>/{ref,m}, and
 * any golden set beside J1 in ../shared/data/golden/jasper (Q1, held out, when it is shared);
 * used by tests/model/jasper/test_jasper_dle.c and test_jasper_gpu.c. */
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

/* One reference set: ref, a directory of the J1 layout (uttK_<key>/, batch/); model, the
 * converted model directory (jasper_load's dir). */
typedef struct {
    char ref[700];
    char model[700];
} dle_jasper_set_t;

/* The set of configuration c: $HARK_DLE_REF/<name>/{ref,m} when $HARK_DLE_REF is set (sets made
 * elsewhere, e.g. for the GPU machine, which has no Debian python3-torch), else made here from
 * $HARK_DLE_SRC (a DeepLearningExamples tree), ../shared/data/audio/en and /usr/bin/python3 with
 * torch, yaml and numpy. Returns 0, 1 = skip (a reason in why: something absent), -1 = failure
 * (why names the log). */
int dle_jasper_ref(const dle_jasper_cfg_t *c, dle_jasper_set_t *s, char *why, size_t nwhy);

/* The golden sets in ../shared/data/golden/jasper other than J1 (directories with a
 * manifest.json), sorted; returns how many (at most max). */
int dle_jasper_golden_names(char (*names)[64], int max);
/* Golden set `name`, its checkpoint (*_checkpoint.pt) converted with its yaml (*.yaml) once per
 * version (golden_convert_cached, tag "jasper_<name>"). Returns as dle_jasper_ref. */
int dle_jasper_golden(const char *name, dle_jasper_set_t *s, char *why, size_t nwhy);

/* The utterance directories of a set (uttK_<key>, from batch/result.json's "order"), at most
 * max; returns how many, or -1. */
int dle_jasper_utts(const char *ref, char (*dirs)[256], int max);
/* <ref>/<sub>/<file> as float32; HARK_ERR_IO when absent. */
int dle_jasper_npy(npy_array_t *a, const char *ref, const char *sub, const char *file);
/* <ref>/<sub>/<file> parsed (cJSON_Delete it), or NULL. */
struct cJSON *dle_jasper_json(const char *ref, const char *sub, const char *file);

#endif
