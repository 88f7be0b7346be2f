/* fastspeech_impl.h — the FastSpeech model's weights as the CPU path (fastspeech.c) holds them,
 * shared with the GPU path (fastspeech_gpu.c), which re-lays and uploads them. Internal to
 * src/model/fastspeech. Tests: tests/model/fastspeech/ */
#ifndef HARK_MODEL_FASTSPEECH_IMPL_H
#define HARK_MODEL_FASTSPEECH_IMPL_H

#include "model/fastspeech/fastspeech.h"
#include "model/safetensors.h"

#define FASTSPEECH_LN_EPS 1e-5f

typedef struct {
    int cin, cout, k, pad;
    float *w; /* (k, cout, cin) */
    const float *b;
} conv_t;

typedef struct {
    int heads, filter;
    const float *qkv_w, *qkv_b; /* (heads · 192, d), (heads · 192) */
    const float *ln1_g, *ln1_b;
    const float *fc_w, *fc_b; /* (d, heads · 64), (d) */
    conv_t c1, c2;
    const float *ln2_g, *ln2_b;
} fft_layer_t;

struct fastspeech_model {
    fastspeech_config_t cfg;
    safetensors_t *st;              /* kept mapped: the plain tensors point into it */
    const float *emb;               /* (n_symbols, d) */
    const float *pos_enc, *pos_dec; /* (max_seq_len + 1, d) */
    fft_layer_t *enc, *dec;
    conv_t dp1, dp2;
    const float *dp_ln1_g, *dp_ln1_b, *dp_ln2_g, *dp_ln2_b, *dp_w, *dp_b;
    const float *mel_w, *mel_b; /* (n_mels, d), (n_mels) */
    float *block;               /* re-laid conv weights */
};

/* DLE's inference durations from the predictor's raw output, the one rule both paths use:
 * dfl[r] = max(exp(dlog[r]) - 1, 0) (dfl may be NULL), rep[r] = round-half-to-even(dfl · alpha)
 * (torch.round: rintf). Returns Σ rep. */
long fastspeech_round_durations(const float *dlog, int n, float alpha, float *dfl, int *rep);

#endif
