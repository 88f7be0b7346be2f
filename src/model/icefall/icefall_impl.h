/* icefall_impl.h — the icefall model and worker structures, shared by icefall.c (loading, the
 * encoder, decoder and joiner) and icefall_search.c (searches, end to end). Not a public header.
 * Tests: tests/model/icefall/test_icefall.c */
#ifndef HARK_MODEL_ICEFALL_IMPL_H
#define HARK_MODEL_ICEFALL_IMPL_H

#include "model/icefall/icefall.h"

struct safetensors;

/* One ConformerEncoderLayer; every pointer a view into the safetensors mapping, effective
 * values (the stored log-scales folded in by the converter). */
typedef struct {
    const float *ffm_w1, *ffm_b1, *ffm_w2, *ffm_b2; /* (ff, d), (ff), (d, ff), (d) */
    const float *in_w, *in_b;                       /* (3d, d), (3d): q, k, v rows */
    const float *out_w, *out_b;                     /* (d, d), (d) */
    const float *pos_w;                             /* (d, d) linear_pos, no bias */
    const float *bu, *bv;                           /* (nhead, d / nhead) */
    const float *pw1_w, *pw1_b;                     /* (2d, d, 1), (2d) */
    const float *dw_w, *dw_b;                       /* (d, 1, kernel), (d) */
    const float *pw2_w, *pw2_b;                     /* (d, d, 1), (d) */
    const float *ff_w1, *ff_b1, *ff_w2, *ff_b2;     /* as the macaron's */
    float eps;                                      /* norm_final: exp(log eps) */
} icefall_layer_t;

struct icefall_model {
    icefall_config_t cfg;
    struct safetensors *st;
    units_t *units;
    feat_plan_t *feat;
    int w1, w2; /* frequency widths after the 2nd and 3rd subsampling convs (39, 19 for 80) */
    const float *conv0_w, *conv0_b; /* (8, 1, 3, 3), (8) */
    const float *conv1_w, *conv1_b; /* (32, 8, 3, 3), (32) */
    const float *conv2_w, *conv2_b; /* (128, 32, 3, 3), (128) */
    const float *embed_w, *embed_b; /* (d, 128 * w2), (d) */
    float embed_eps;
    icefall_layer_t *layers;              /* (n_layers) */
    const float *dec_emb;                 /* (vocab, decoder_dim) */
    const float *dec_conv;                /* (decoder_dim, 1, context_size) */
    const float *enc_proj_w, *enc_proj_b; /* (joiner_dim, d), (joiner_dim) */
    const float *dec_proj_w, *dec_proj_b; /* (joiner_dim, decoder_dim), (joiner_dim) */
    const float *out_w, *out_b;           /* (vocab, joiner_dim), (vocab) */
};

struct icefall_worker {
    const icefall_model_t *m;
    double max_seconds;
    int max_t_in;   /* feature frames the scratch holds */
    float *scratch; /* one block for the encoder's activations (enc_sizes) */
    int *lo, *hi;   /* (T') key ranges of the attention's softmax */
    float *feats;   /* (max_t_in, feature_dim) icefall_run's features of one utterance */
    float *enc;     /* (T'max, d) icefall_run's encoder output of one utterance */
};

#endif
