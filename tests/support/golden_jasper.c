/* golden_jasper.c — converts DLE's Jasper golden checkpoint once and caches it for the tests
 * (tests/model/jasper/, tests/server/). */
#include "support/golden_jasper.h"

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

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

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
    char conv[1024];
    if (!realpath("tools/convert_jasper.py", conv)) {
        snprintf(why, nwhy, "tools/convert_jasper.py is absent (run from the repository root)");
        return NULL;
    }
    struct stat sc, sp;
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/" GOLDEN_JASPER_CKPT, gdir);
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
    snprintf(dir, sizeof dir, "%s/jasper_j1-%llx", root, key);
    char probe[600];
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
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s' --checkpoint '%s/" GOLDEN_JASPER_CKPT
             "' --config '%s/" GOLDEN_JASPER_YAML "' --output '%s/m' >'%s/log' 2>&1",
             conv, gdir, gdir, tmp, tmp);
    if (system(cmd) != 0) {
        snprintf(why, nwhy, "convert_jasper.py failed (log in %s/log)", tmp);
        return NULL;
    }
    if (rename(tmp, dir) != 0) /* another process won the race: use its copy */
        nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return dir;
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
    FILE *f = p ? fopen(p, "rb") : NULL;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!buf)
        return NULL;
    buf[got] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    return j;
}
