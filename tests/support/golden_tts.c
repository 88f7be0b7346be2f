/* golden_tts.c — converts the TTS golden checkpoints once and caches them for the tests
 * (tests/model/hifigan/, tests/model/fastspeech/). */
#include "support/golden_tts.h"
#include "support/golden_model.h"

#include "test.h"

#include "hark.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *convert(const char *tag, const char *converter, const char *ckpt,
                           const char *config, char *why, size_t nwhy)
{
    static char dirs[4][512];
    static int slot;
    char *dir = dirs[slot++ % 4];
    const char *gdir = test_shared(GOLDEN_TTS);
    if (!gdir) {
        snprintf(why, nwhy, "../shared/data/" GOLDEN_TTS " is absent");
        return NULL;
    }
    char ck[1024], args[3000];
    snprintf(ck, sizeof ck, "%s/%s", gdir, ckpt);
    int n = snprintf(args, sizeof args, "--checkpoint '%s'", ck);
    if (config)
        snprintf(args + n, sizeof args - (size_t)n, " --config '%s/%s'", gdir, config);
    return golden_convert_cached(tag, converter, ck, args, dir, 512, why, nwhy);
}

const char *golden_tts_model(const char *tag, const char *converter, const char *ckpt,
                             const char *config, char *why, size_t nwhy)
{
    return convert(tag, converter, ckpt, config, why, nwhy);
}

const char *golden_tts_checkpoint(const char *tag, const char *converter, const char *ckpt,
                                  char *why, size_t nwhy)
{
    return convert(tag, converter, ckpt, NULL, why, nwhy);
}

int golden_tts_npy(npy_array_t *a, const char *rel)
{
    char r[640];
    snprintf(r, sizeof r, GOLDEN_TTS "/%s", rel);
    const char *p = test_shared(r);
    return p ? npy_load_f32(p, a) : HARK_ERR_IO;
}
