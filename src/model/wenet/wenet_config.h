/* wenet_config.h — hyper-parameters of a converted WeNet U2/U2++ model (DIR/1/model.json).
 * Parsed and validated by wenet_config_load; every unsupported option is refused by name.
 * Format documented in docs/model-format.md.  Tests: tests/model/wenet/test_wenet_config.c */
#ifndef HARK_MODEL_WENET_CONFIG_H
#define HARK_MODEL_WENET_CONFIG_H

#include "core/error.h"

typedef enum {
    SUBSAMPLE_CONV2D = 4,
    SUBSAMPLE_CONV2D6 = 6,
    SUBSAMPLE_CONV2D8 = 8
} wenet_subsample_t;
typedef enum { POS_REL = 0, POS_ABS = 1 } wenet_pos_t; /* rel_pos+rel_selfattn | abs_pos+selfattn */
typedef enum { ACT_SWISH = 0, ACT_RELU = 1, ACT_GELU = 2 } wenet_act_t;
typedef enum { CNN_NORM_BATCH = 0, CNN_NORM_LAYER = 1 } wenet_cnn_norm_t;
typedef enum {
    DECODER_NONE = 0,
    DECODER_TRANSFORMER = 1,
    DECODER_BITRANSFORMER = 2
} wenet_decoder_t;

typedef struct {
    /* front end */
    int num_mel_bins;    /* 80 */
    int sample_rate;     /* 16000 */
    int frame_length_ms; /* 25 */
    int frame_shift_ms;  /* 10 */
    int has_cmvn;        /* 1: cmvn mean/istd tensors are in the weights */
    /* encoder */
    int input_dim; /* = num_mel_bins */
    int d_model;   /* output_size, 256 */
    int n_heads;   /* attention_heads */
    int ffn_dim;   /* linear_units */
    int n_blocks;  /* num_blocks */
    wenet_subsample_t subsample;
    wenet_pos_t pos;
    int macaron; /* macaron_style */
    int use_cnn_module;
    int cnn_kernel; /* cnn_module_kernel (odd unless causal) */
    int causal;     /* causal conv module */
    wenet_cnn_norm_t cnn_norm;
    wenet_act_t activation;
    int normalize_before;
    int max_len;           /* positional-encoding table length, 5000 */
    int static_chunk_size; /* >0: WeNet applies this chunk mask in every forward */
    int use_dynamic_chunk; /* dynamic-chunk trained: any decoding chunk size works */
    /* decoder */
    wenet_decoder_t decoder;
    int dec_heads, dec_ffn_dim, dec_blocks, dec_r_blocks; /* r_blocks: bitransformer only */
    int dec_normalize_before;
    /* vocabulary */
    int vocab_size;
    int sos, eos, blank;
    /* decoding defaults */
    float ctc_weight, reverse_weight;
} wenet_config_t;

/* Reads and validates DIR/1/model.json (or a direct path to model.json). */
int wenet_config_load(const char *path, wenet_config_t *cfg, hark_err_t *err);
/* Encoder frames after subsampling for `frames` input frames (WeNet's formula); 0 when the input
 * is too short for the convolution stack. */
int wenet_subsampled_len(const wenet_config_t *cfg, int frames);
/* Input frames the subsampling stack looks ahead beyond a frame (WeNet's right_context: 6, 10,
 * 14 for conv2d, conv2d6, conv2d8). Streaming chunks span (chunk-1)*rate + right_context + 1. */
int wenet_right_context(const wenet_config_t *cfg);

#endif
