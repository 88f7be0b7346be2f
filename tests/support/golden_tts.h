/* golden_tts.h — the TTS golden sets (../shared/data/golden/tts, README there): a converter run
 * once per (checkpoint, converter) version into /tmp/hark-test-cache-<uid>/, shared by the TTS
 * tests, and the sets' .npy files. */
#ifndef HARK_TEST_GOLDEN_TTS_H
#define HARK_TEST_GOLDEN_TTS_H

#include "core/npy.h"

#include <stddef.h>

#define GOLDEN_TTS "golden/tts"

/* Runs `/usr/bin/python3 tools/<converter> --checkpoint golden/tts/<ckpt> --config
 * golden/tts/<config> --output <cache>/<tag>-<key>` once and returns that directory, or NULL with
 * a reason in why (../shared, the converter or python3-torch missing, or the conversion failed).
 * The returned string is static per tag slot (up to 4 tags live). */
const char *golden_tts_model(const char *tag, const char *converter, const char *ckpt,
                             const char *config, char *why, size_t nwhy);
/* The same for a checkpoint that carries its own configuration (no --config): DLE's Tacotron 2
 * and WaveGlow. The checkpoint may be absent where HARK_GOLDEN_CONVERTED gives its conversion. */
const char *golden_tts_checkpoint(const char *tag, const char *converter, const char *ckpt,
                                  char *why, size_t nwhy);
/* golden/tts/<rel> as float32 (from f32/f64/i32/i64); HARK_ERR_IO when absent. */
int golden_tts_npy(npy_array_t *a, const char *rel);

#endif
