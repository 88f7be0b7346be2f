/* golden_model.c — converts the WeNet golden checkpoint once and caches it for the model tests.
 * (Used by tests/model/test_*.c.) */
#include "support/golden_model.h"

#include "test.h"

#include "hark.h"
#include "model/safetensors.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

/* Converts the golden checkpoint once per (checkpoint, converter) version into
 * /tmp/hark-test-cache-<uid>/wenet_small-<key>/m and reuses it; the conversion goes to a private
 * directory renamed into place, so parallel test processes never see a half-written model.
 * Returns NULL (with a reason) when the converter or python3-torch is unavailable. */
const char *golden_wenet_model_dir(char *why, size_t nwhy)
{
    static char dir[512];
    const char *pre = getenv("HARK_GOLDEN_MODEL"); /* a prepared copy, e.g. on the GPU machine */
    if (pre && *pre) {
        snprintf(dir, sizeof dir, "%s", pre);
        return dir;
    }
    if (test_shared(GOLDEN_WENET "/converted/m/1/model.json")) { /* shipped with the data */
        snprintf(dir, sizeof dir, "%s", test_shared(GOLDEN_WENET "/converted"));
        return dir;
    }
    const char *gdir = test_shared(GOLDEN_WENET);
    if (!gdir) {
        snprintf(why, nwhy, "../shared/data/" GOLDEN_WENET " is absent");
        return NULL;
    }
    char args[3000];
    snprintf(args, sizeof args,
             "--checkpoint '%s/final.pt' --config '%s/train.yaml' --units '%s/units.txt' "
             "--cmvn '%s/global_cmvn'",
             gdir, gdir, gdir, gdir);
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/final.pt", gdir);
    return golden_convert_cached("wenet_small", "convert_wenet.py", ckpt, args, dir, sizeof dir,
                                 why, nwhy);
}

const char *golden_convert_cached(const char *tag, const char *converter, const char *ckpt,
                                  const char *args, char *dir, size_t ndir, char *why, size_t nwhy)
{
    /* $HARK_GOLDEN_CONVERTED/<tag>: conversions prepared elsewhere (the GPU machine has no
     * /usr/bin/python3 with torch; tools/device_carry.sh packs this machine's). */
    const char *pre = getenv("HARK_GOLDEN_CONVERTED");
    if (pre && *pre) {
        char probe[700];
        snprintf(dir, ndir, "%s/%s", pre, tag);
        snprintf(probe, sizeof probe, "%s/m/1/model.safetensors", dir);
        if (access(probe, R_OK) == 0)
            return dir;
    }
    char conv[1024], rel[300];
    snprintf(rel, sizeof rel, "tools/%s", converter);
    if (!realpath(rel, conv)) {
        snprintf(why, nwhy, "%s is absent (run from the repository root)", rel);
        return NULL;
    }
    struct stat sc, sp;
    if (stat(conv, &sc) != 0 || stat(ckpt, &sp) != 0) {
        snprintf(why, nwhy, "cannot stat the converter or %.400s", ckpt);
        return NULL;
    }
    unsigned long long key =
        (unsigned long long)sc.st_size * 1000003ull ^ (unsigned long long)sc.st_mtime * 7919ull ^
        (unsigned long long)sp.st_size * 31ull ^ (unsigned long long)sp.st_mtime;
    char root[256];
    snprintf(root, sizeof root, "/tmp/hark-test-cache-%u", (unsigned)getuid());
    mkdir(root, 0700);
    snprintf(dir, ndir, "%s/%s-%llx", root, tag, key);
    char probe[700];
    snprintf(probe, sizeof probe, "%s/m/1/model.safetensors", dir);
    if (access(probe, R_OK) == 0)
        return dir;
    if (system("/usr/bin/python3 -c 'import torch, yaml, numpy' >/dev/null 2>&1") != 0) {
        snprintf(why, nwhy, "/usr/bin/python3 with torch, yaml and numpy is missing");
        return NULL;
    }
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s/tmp-XXXXXX", root);
    if (!mkdtemp(tmp)) {
        snprintf(why, nwhy, "mkdtemp %s: %s", tmp, strerror(errno));
        return NULL;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s --output '%s/m' >'%s/log' 2>&1", conv, args,
             tmp, tmp);
    if (system(cmd) != 0) {
        snprintf(why, nwhy, "%s failed (log in %s/log)", converter, tmp);
        return NULL;
    }
    if (rename(tmp, dir) != 0) /* another process won the race: use its copy */
        nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return dir;
}

int golden_wenet_open(wenet_config_t *cfg, safetensors_t **st, char *why, size_t nwhy)
{
    *st = NULL;
    if (!test_shared(GOLDEN_WENET)) {
        snprintf(why, nwhy, "../shared/data/" GOLDEN_WENET " is absent");
        return 1;
    }
    const char *dir = golden_wenet_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[700];
    hark_err_t err = {0};
    snprintf(path, sizeof path, "%s/m/1/model.json", dir);
    if (wenet_config_load(path, cfg, &err) != HARK_OK) {
        snprintf(why, nwhy, "wenet_config_load: %.400s", err.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/m/1/model.safetensors", dir);
    if (st_open(path, st, &err) != HARK_OK) {
        snprintf(why, nwhy, "st_open: %.400s", err.msg);
        return -1;
    }
    return 0;
}

int golden_wenet_npy(npy_array_t *a, const char *utt, const char *file)
{
    char rel[640];
    snprintf(rel, sizeof rel, GOLDEN_WENET "/goldens/%s/%s", utt, file);
    const char *p = test_shared(rel);
    return p ? npy_load_f32(p, a) : HARK_ERR_IO;
}

cJSON *golden_wenet_results(void)
{
    return test_read_json(test_shared(GOLDEN_WENET "/results.json"));
}
