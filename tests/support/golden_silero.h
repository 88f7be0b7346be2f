/* golden_silero.h — the real Silero VAD (../shared/data/models/silero-vad/silero_vad.onnx)
 * converted once per (model, converter) version into /tmp/hark-test-cache-<uid>/, shared by the
 * VAD tests. */
#ifndef HARK_TEST_GOLDEN_SILERO_H
#define HARK_TEST_GOLDEN_SILERO_H

#include <stddef.h>

/* The converted model directory, or NULL with a reason in why (../shared or the converter's
 * python3 missing, or the conversion failed). The string is static. */
const char *golden_silero_model(char *why, size_t nwhy);

#endif
