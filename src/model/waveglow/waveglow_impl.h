/* waveglow_impl.h — the WaveGlow model's weights as the CPU path (waveglow.c) lays them out, shared
 * with the GPU path (waveglow_gpu.c), which re-lays and uploads them; and the CPU's seeded noise,
 * which the GPU reproduces counter by counter. Internal to src/model/waveglow.
 * Tests: tests/model/waveglow/ */
#ifndef HARK_MODEL_WAVEGLOW_IMPL_H
#define HARK_MODEL_WAVEGLOW_IMPL_H

#include "model/safetensors.h"
#include "model/waveglow/waveglow.h"

#include <fftw3.h>
#include <stdint.h>

typedef struct {
    int ch;                                   /* channels this flow works on */
    const float *w_inv;                       /* (ch, ch) the inverse of the 1x1 convolution */
    const float *start_w;                     /* (C, ch/2) */
    const float *start_b;                     /* (C) */
    float *in_w[WAVEGLOW_MAX_LAYERS];         /* (k, 2C, C) per tap */
    const float *in_b[WAVEGLOW_MAX_LAYERS];   /* (2C) */
    const float *cond_w[WAVEGLOW_MAX_LAYERS]; /* (2C, n_mels · n_group) */
    const float *cond_b[WAVEGLOW_MAX_LAYERS];
    const float *rs_w[WAVEGLOW_MAX_LAYERS]; /* (2C or C, C) */
    const float *rs_b[WAVEGLOW_MAX_LAYERS];
    const float *end_w; /* (ch, C) */
    const float *end_b; /* (ch) */
} flow_t;

struct waveglow_model {
    waveglow_config_t cfg;
    safetensors_t *st;
    float *block;      /* re-laid-out weights */
    float *up_w;       /* (up_kernel · n_mels, n_mels): row tap · n_mels + out, col in */
    const float *up_b; /* (n_mels) */
    flow_t flow[WAVEGLOW_MAX_FLOWS];
    float *window;       /* (filter_length) periodic Hann */
    float *bias_spec;    /* (filter_length / 2 + 1) */
    fftwf_plan fwd, inv; /* planned once at load; executed on per-call buffers (new-array API) */
};

/* Channels flow k works on (DLE's WaveGlow.__init__: n_group less n_early_size per early output
 * before it). */
int waveglow_flow_channels(const waveglow_config_t *c, int k);

/* The seeded noise: splitmix64 (the state advances by 0x9e3779b97f4a7c15 per call, so call j
 * (1-based) of a stream seeded s returns mix(s + j · 0x9e37...)), and n standard normal values
 * from it by Box-Muller over 53-bit uniforms, two calls per pair (z[2p] = r·cos, z[2p+1] = r·sin;
 * an odd n still takes two calls for the last value). waveglow_infer draws the initial z and
 * then each early output's from one stream seeded opts->seed. */
uint64_t waveglow_splitmix64(uint64_t *s);
void waveglow_gaussian(uint64_t *s, float *z, size_t n);

#endif
