/* jasper_impl.h — the Jasper model's folded weights, shared by the CPU path (jasper.c) and the
 * GPU path (jasper_gpu.c), which uploads them. Internal to src/model/jasper.
 * Tests: tests/model/jasper/ */
#ifndef HARK_MODEL_JASPER_IMPL_H
#define HARK_MODEL_JASPER_IMPL_H

#include "dsp/features.h"
#include "model/jasper/jasper.h"

typedef struct {
    int cin, cout, k, stride, dil, pad;
    float *dw; /* (k, cin) depthwise taps, tap-major; separable only, else NULL */
    float *w;  /* (k, cout, cin) tap-major, batch norm folded (pointwise: k = 1) */
    float *b;  /* (cout) batch norm folded */
    int kw;    /* taps of w: k, or 1 for a separable conv's pointwise half */
} jconv_t;

typedef struct {
    jconv_t *sub; /* (repeat) */
    jconv_t *res; /* (n_panes) 1x1 */
} jlayer_t;

struct jasper_model {
    jasper_config_t cfg;
    feat_plan_t *feat;
    jlayer_t layers[JASPER_MAX_BLOCKS];
    jconv_t *convs;     /* every conv (layers point into it) */
    float *wmem;        /* every folded weight */
    const float *dec_w; /* (vocab, C) */
    const float *dec_b; /* (vocab) */
    int vocab, enc_dim;
};

#endif
