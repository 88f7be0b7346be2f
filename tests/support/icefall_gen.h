/* icefall_gen.h — small zipformer (and Conformer) transducers of random (seeded) weights for the
 * tests that need a model but not icefall (tests/model/icefall/zipformer_random_ckpt.py, then
 * tools/convert_icefall.py), with a 500-piece tokens.txt. Needs a python3 with torch and numpy
 * (test_python). */
#ifndef HARK_TEST_ICEFALL_GEN_H
#define HARK_TEST_ICEFALL_GEN_H

#include <stddef.h>

/* The small configuration the zipformer tests share (4 stacks, 5 layers, output dim 48), and its
 * causal flags (chunks of 8 frames, 16 to the left). */
#define ICEFALL_GEN_FLAGS                                                                          \
    "--num-encoder-layers 1,2,1,1 --downsampling-factor 1,2,4,2 --feedforward-dim 64 "             \
    "--num-heads 2 --encoder-dim 32,48,32,40 --encoder-unmasked-dim 32 --query-head-dim 8 "        \
    "--value-head-dim 4 --pos-head-dim 2 --pos-dim 16 --cnn-module-kernel 7,15,7,7 "               \
    "--decoder-dim 32 --joiner-dim 48"
#define ICEFALL_GEN_CAUSAL "--causal True --chunk-size 8 --left-context-frames 16"

/* Writes DIR/tokens.txt and DIR/<name>.pt (model flags `flags`) and converts the checkpoint into
 * the model directory DIR/<name> (`convert_flags` added to the converter's: its --method,
 * --streaming, ...). 0, or -1 with the failing command's output in log. */
int icefall_gen_model(const char *dir, const char *name, const char *flags,
                      const char *convert_flags, char *log, size_t nlog);
/* The same with `ckpt_flags` for zipformer_random_ckpt.py alone (its --seed, --blank-bias: the
 * joiner's blank logit raised by that, 8 by default; larger gives fewer tokens). */
int icefall_gen_model_ex(const char *dir, const char *name, const char *flags,
                         const char *ckpt_flags, const char *convert_flags, char *log, size_t nlog);

/* A pruned_transducer_stateless3 (Conformer) of random values
 * (tests/model/icefall/conformer_random_ckpt.py: its sizes and --seed, --blank-bias in
 * ckpt_flags), converted into DIR/<name> with convert_flags (e.g. --simulate-streaming True). */
int icefall_gen_conformer(const char *dir, const char *name, const char *ckpt_flags,
                          const char *convert_flags, char *log, size_t nlog);

/* A test signal of n samples: 0.2 s segments, each a tone of its own frequency and level, and
 * noise (seeded); the caller frees it (hark_free). */
float *icefall_gen_pcm(size_t n, unsigned seed);
/* max |a - b| / max |b| over n values (NaN anywhere: NaN) */
double icefall_gen_rel_diff(const float *a, const float *b, size_t n);

#endif
