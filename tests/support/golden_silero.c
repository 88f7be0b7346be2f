/* golden_silero.c — see golden_silero.h */
#include "support/golden_silero.h"
#include "support/golden_model.h"

#include "test.h"

#include <stdio.h>

const char *golden_silero_model(char *why, size_t nwhy)
{
    static char dir[512], m[600];
    const char *onnx = test_shared("models/silero-vad/silero_vad.onnx");
    if (!onnx) {
        snprintf(why, nwhy, "../shared/data/models/silero-vad is absent");
        return NULL;
    }
    char args[1200];
    snprintf(args, sizeof args, "--onnx '%s'", onnx);
    if (!golden_convert_cached("silero_vad", "convert_silero_vad.py", onnx, args, dir, sizeof dir,
                               why, nwhy))
        return NULL;
    snprintf(m, sizeof m, "%s/m", dir);
    return m;
}
