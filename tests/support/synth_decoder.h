/* synth_decoder.h — the config of a small synthetic attention decoder for the decoder tests
 * (tests/model/wenet/test_decoder.c, test_decoder_gpu.c): sos = eos = vocab - 1, reverse_weight 0.4
 * for a bitransformer, max_len 64. */
#ifndef HARK_TESTS_SUPPORT_SYNTH_DECODER_H
#define HARK_TESTS_SUPPORT_SYNTH_DECODER_H

#include "model/wenet/wenet_config.h"

#include <string.h>

static inline wenet_config_t synth_decoder_config(wenet_decoder_t type, int d, int heads, int ffn,
                                                  int blocks, int r_blocks, int pre_norm, int vocab)
{
    wenet_config_t c;
    memset(&c, 0, sizeof c);
    c.d_model = d;
    c.max_len = 64;
    c.decoder = type;
    c.dec_heads = heads;
    c.dec_ffn_dim = ffn;
    c.dec_blocks = blocks;
    c.dec_r_blocks = r_blocks;
    c.dec_normalize_before = pre_norm;
    c.vocab_size = vocab;
    c.sos = c.eos = vocab - 1;
    c.reverse_weight = type == DECODER_BITRANSFORMER ? 0.4f : 0.0f;
    return c;
}

#endif
