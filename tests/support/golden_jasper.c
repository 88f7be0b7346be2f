/* golden_jasper.c — converts DLE's Jasper golden checkpoint once and caches it for the tests
 * (tests/model/jasper/, tests/server/). */
#include "support/golden_jasper.h"
#include "support/golden_model.h"

#include "test.h"

#include "hark.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const golden_jasper_utts[4] = {
    "utt0_lj-LJ001-0013-crop28037", "utt1_deepspeech-LDC93S1",
    "utt2_librivox-sense_and_sensibility_01_austen_64kb-0890", "utt3_jfk"};

const char *golden_jasper_model_dir(char *why, size_t nwhy)
{
    static char dir[512];
    const char *pre = getenv("HARK_GOLDEN_JASPER");
    if (pre && *pre) {
        snprintf(dir, sizeof dir, "%s", pre);
        return dir;
    }
    const char *gdir = test_shared(GOLDEN_JASPER);
    if (!gdir) {
        snprintf(why, nwhy, "../shared/data/" GOLDEN_JASPER " is absent");
        return NULL;
    }
    char args[3000], ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/" GOLDEN_JASPER_CKPT, gdir);
    snprintf(args, sizeof args, "--checkpoint '%s' --config '%s/" GOLDEN_JASPER_YAML "'", ckpt,
             gdir);
    return golden_convert_cached("jasper_j1", "convert_jasper.py", ckpt, args, dir, sizeof dir, why,
                                 nwhy);
}

int golden_jasper_npy(npy_array_t *a, const char *sub, const char *file)
{
    char rel[640];
    snprintf(rel, sizeof rel, GOLDEN_JASPER "/%s/%s", sub, file);
    const char *p = test_shared(rel);
    return p ? npy_load_f32(p, a) : HARK_ERR_IO;
}

cJSON *golden_jasper_json(const char *sub, const char *file)
{
    char rel[640];
    snprintf(rel, sizeof rel, GOLDEN_JASPER "/%s/%s", sub, file);
    const char *p = test_shared(rel);
    return test_read_json(p);
}
