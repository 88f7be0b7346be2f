/* cmvn.h — global CMVN in WeNet's JSON format ({"mean_stat": [...], "var_stat": [...],
 * "frame_num": N}); applied as (x - mean) * istd.  Tests: tests/dsp/test_cmvn.c */
#ifndef HARK_DSP_CMVN_H
#define HARK_DSP_CMVN_H

#include "core/error.h"

#include <stddef.h>

typedef struct {
    int dim;
    float *mean; /* (dim) */
    float *istd; /* (dim) */
} cmvn_t;

/* mean = mean_stat/frame_num, var = max(var_stat/frame_num - mean^2, 1e-20), istd = 1/sqrt(var),
 * all in double, then rounded to float32 — as wenet/utils/cmvn.py load_cmvn. */
int cmvn_load_json(const char *path, cmvn_t *out, hark_err_t *err);
int cmvn_parse_json(const char *text, size_t len, const char *name, cmvn_t *out, hark_err_t *err);
/* In place on (frames, dim) features. */
void cmvn_apply(const cmvn_t *c, float *feats, size_t frames);
void cmvn_free(cmvn_t *c);

#endif
