/* golden_icefall.c — converts icefall's T1 golden checkpoint once and caches it for the tests
 * (tests/model/icefall/). */
#include "support/golden_icefall.h"
#include "support/golden_model.h"

#include "test.h"

#include "hark.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

const char *const golden_icefall_utts[4] = {"jfk",
                                            "librivox-sense_and_sensibility_01_austen_64kb-0890",
                                            "lj-LJ001-0013", GOLDEN_ICEFALL_DEBUG_UTT};

const char *golden_icefall_model_dir(char *why, size_t nwhy)
{
    static char dir[512];
    const char *pre = getenv("HARK_GOLDEN_ICEFALL");
    if (pre && *pre) {
        snprintf(dir, sizeof dir, "%s", pre);
        return dir;
    }
    const char *gdir = test_shared(GOLDEN_ICEFALL);
    if (!gdir) {
        snprintf(why, nwhy, "../shared/data/" GOLDEN_ICEFALL " is absent");
        return NULL;
    }
    char args[3000], ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/pretrained.pt", gdir);
    snprintf(args, sizeof args,
             "--recipe pruned_transducer_stateless3 --checkpoint '%s' --tokens '%s/tokens.txt'",
             ckpt, gdir);
    return golden_convert_cached("icefall_t1", "convert_icefall.py", ckpt, args, dir, sizeof dir,
                                 why, nwhy);
}

int golden_icefall_npy(npy_array_t *a, const char *sub, const char *file)
{
    char rel[640];
    snprintf(rel, sizeof rel, GOLDEN_ICEFALL "/goldens/%s/%s", sub, file);
    const char *p = test_shared(rel);
    return p ? npy_load_f32(p, a) : HARK_ERR_IO;
}

cJSON *golden_icefall_results(void)
{
    const char *p = test_shared(GOLDEN_ICEFALL "/results.json");
    return test_read_json(p);
}

const char *golden_icefall_ref_missing(const char **src, char *shims, size_t nshims)
{
    *src = getenv("HARK_ICEFALL_SRC");
    if (!*src || !**src)
        return "$HARK_ICEFALL_SRC (an icefall source tree) is not set";
    const char *root = getenv("HARK_SHARED") ? getenv("HARK_SHARED") : "../shared";
    snprintf(shims, nshims, "%s/tools/icefall", root);
    if (access(shims, R_OK) != 0)
        return "../shared/tools/icefall (the import shims) is absent";
    if (system("/usr/bin/python3 -c 'import torch, torchaudio, numpy, packaging' >/dev/null 2>&1"))
        return "/usr/bin/python3 with torch, torchaudio, numpy and packaging is absent";
    return NULL;
}

int golden_json_ints_equal(const cJSON *arr, const int *a, int n)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(arr, i)->valueint != a[i])
            return 0;
    return 1;
}
