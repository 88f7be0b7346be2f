/* hifigan_impl.h — the HiFi-GAN model's weights as the CPU path (hifigan.c) lays them out, shared
 * with the GPU path (hifigan_gpu.c), which re-lays and uploads them. Internal to src/model/hifigan.
 * Tests: tests/model/hifigan/ */
#ifndef HARK_MODEL_HIFIGAN_IMPL_H
#define HARK_MODEL_HIFIGAN_IMPL_H

#include "dsp/features.h"
#include "model/hifigan/hifigan.h"

#define HIFIGAN_LRELU_SLOPE 0.1f       /* models.py LRELU_SLOPE */
#define HIFIGAN_LRELU_SLOPE_POST 0.01f /* F.leaky_relu before conv_post: torch's default */

/* One conv: w (k, cout, cin) per tap (Conv1d) or (k · cout, cin) (ConvTranspose1d). */
typedef struct {
    int cin, cout, k, dil, pad, stride;
    float *w;
    float *b; /* (cout) */
} hg_conv_t;

struct hifigan_model {
    hifigan_config_t cfg;
    hg_conv_t conv_pre, conv_post;
    hg_conv_t ups[HIFIGAN_MAX_UPS];
    /* [stage][j][c1|c2][d] */
    hg_conv_t rb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][2][HIFIGAN_MAX_DIL];
    float *block; /* every weight */
    feat_plan_t *mel_plan;
};

#endif
