/* tacotron2_impl.h — the Tacotron 2 model's weights as the CPU path (tacotron2.c) lays them out,
 * shared with the GPU path (tacotron2_gpu.c), which re-lays and uploads them; and the seeded
 * prenet dropout generator both paths draw from. Internal to src/model/tacotron2.
 * Tests: tests/model/tacotron2/ */
#ifndef HARK_MODEL_TACOTRON2_IMPL_H
#define HARK_MODEL_TACOTRON2_IMPL_H

#include "model/safetensors.h"
#include "model/tacotron2/tacotron2.h"

#include <stdint.h>

#define MAX_CONVS 64

/* Conv1d + BatchNorm1d (eval): w (cout, k, cin) tap-major for conv1d_ref. */
typedef struct {
    int cin, cout, k;
    float *w;
    const float *b, *bn_g, *bn_b, *bn_m, *bn_v;
} convbn_t;

typedef struct { /* torch LSTMCell / one LSTM direction, gates i, f, g, o */
    int in, hid;
    const float *w_ih;        /* (4·hid, in) */
    const float *w_hh;        /* (4·hid, hid) */
    const float *b_ih, *b_hh; /* (4·hid) */
} lstm_t;

/* The encoder in double precision (see encode()): conv w (k, cout, cin), BN folded into
 * scale/shift; LSTM weights as torch lays them out. */
typedef struct {
    double *w, *b, *scale, *shift; /* w (k, cout, cin); b, scale, shift (cout) */
} convd_t;

typedef struct {
    double *w_ih, *w_hh, *b_ih, *b_hh;
} lstmd_t;

struct tacotron2_model {
    tacotron2_config_t cfg;
    double *dblock; /* the encoder's weights in double (dblock_n values; the pointers below) */
    size_t dblock_n;
    convd_t encd[MAX_CONVS];
    lstmd_t encd_fwd, encd_bwd;
    double *memory_wd; /* (att_dim, enc_dim) */
    safetensors_t *st; /* the mapped weights the const pointers below point into */
    float *block;      /* re-laid-out conv weights */
    const float *emb;  /* (n_symbols, emb_dim) */
    convbn_t enc[MAX_CONVS];
    lstm_t enc_fwd, enc_bwd;
    const float *prenet0, *prenet1; /* (prenet_dim, n_mels), (prenet_dim, prenet_dim) */
    lstm_t att_rnn, dec_rnn;
    const float *query_w;   /* (att_dim, att_rnn_dim) */
    const float *memory_w;  /* (att_dim, enc_dim) */
    const float *v_w;       /* (att_dim) */
    const float *loc_conv;  /* (loc_filters, 2, loc_kernel) */
    const float *loc_dense; /* (att_dim, loc_filters) */
    float *proj_w;          /* (n_mels + 1, dec_rnn_dim + enc_dim): mel projection, gate row */
    float *proj_b;          /* (n_mels + 1) */
    convbn_t post[MAX_CONVS];
};

/* The seeded prenet dropout: row state s starts at the row's seed; draw k (0-based) is
 * splitmix64's output for state seed + (k + 1) · golden, 64 keep bits (bit j keeps unit 64·i + j
 * of the draw's slice). A row draws ceil(prenet_dim / 64) words per layer, layer 0 then 1, step
 * after step: draw k = (2 · step + layer) · words + i. */
#define TACOTRON2_GOLDEN 0x9e3779b97f4a7c15ull
static inline uint64_t tacotron2_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
