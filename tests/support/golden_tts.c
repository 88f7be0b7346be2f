/* golden_tts.c — converts the TTS golden checkpoints once and caches them for the tests
 * (tests/model/hifigan/, tests/model/fastspeech/). */
#include "support/golden_tts.h"

#include "test.h"

#include "hark.h"

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

const char *golden_tts_model(const char *tag, const char *converter, const char *ckpt,
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
    char conv[1024], rel[300];
    snprintf(rel, sizeof rel, "tools/%s", converter);
    if (!realpath(rel, conv)) {
        snprintf(why, nwhy, "%s is absent (run from the repository root)", rel);
        return NULL;
    }
    struct stat sc, sp;
    char ck[1024], cf[1024];
    snprintf(ck, sizeof ck, "%s/%s", gdir, ckpt);
    snprintf(cf, sizeof cf, "%s/%s", gdir, config);
    if (stat(conv, &sc) != 0 || stat(ck, &sp) != 0) {
        snprintf(why, nwhy, "cannot stat the converter or %.400s", ck);
        return NULL;
    }
    unsigned long long key =
        (unsigned long long)sc.st_size * 1000003ull ^ (unsigned long long)sc.st_mtime * 7919ull ^
        (unsigned long long)sp.st_size * 31ull ^ (unsigned long long)sp.st_mtime;
    char root[256];
    snprintf(root, sizeof root, "/tmp/hark-test-cache-%u", (unsigned)getuid());
    mkdir(root, 0700);
    snprintf(dir, 512, "%s/%s-%llx", root, tag, key);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/m/1/model.safetensors", dir);
    if (access(probe, R_OK) == 0)
        return dir;
    if (system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
        snprintf(why, nwhy, "/usr/bin/python3 with torch and numpy is missing");
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
             "/usr/bin/python3 '%s' --checkpoint '%s' --config '%s' --output '%s/m' >'%s/log' 2>&1",
             conv, ck, cf, tmp, tmp);
    if (system(cmd) != 0) {
        snprintf(why, nwhy, "%s failed (log in %s/log)", converter, tmp);
        return NULL;
    }
    if (rename(tmp, dir) != 0) /* another process won the race: use its copy */
        nftw(tmp, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return dir;
}

int golden_tts_npy(npy_array_t *a, const char *rel)
{
    char r[640];
    snprintf(r, sizeof r, GOLDEN_TTS "/%s", rel);
    const char *p = test_shared(r);
    return p ? npy_load_f32(p, a) : HARK_ERR_IO;
}
