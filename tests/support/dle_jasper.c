/* dle_jasper.c — reference sets of DLE's own Jasper / QuartzNet code for other configurations,
 * made by tools/dle_jasper_reference.py and cached for the tests (tests/model/jasper/). */
#include "support/dle_jasper.h"
#include "support/golden_model.h"

#include "test.h"

#include "hark.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* yaml: "dle:" = relative to DLE's QuartzNet / Jasper folder, "shared:" = under ../shared/data,
 * else a path in this repository. ckpt (the tool's --checkpoint): the same prefixes. Each seed is
 * the one of 1..8 whose set has the largest smallest top-1 / top-2 log-prob margin (3.1e-3 to
 * 1.05e-2; J1's is 2.0e-3): greedy ids nearer a tie than float32 noise (~1e-4) test nothing. */
const dle_jasper_cfg_t dle_jasper_cfgs[] = {
    {"qn15x5_div8", "QuartzNet", "dle:configs/quartznet15x5_speedp-online-1.15_speca.yaml",
     "--filters-div 8 --seed 1", "", NULL,
     "QuartzNet 15x5 as DLE ships it (separable k33 s2, 15 residual blocks k33..k75, k87 "
     "dilation 2, k1), filters / 8"},
    {"qn_variant", "QuartzNet", "tests/model/jasper/dle/quartznet_variant.yaml", "--seed 6", "",
     NULL,
     "QuartzNet with 80 mels, pad_align 8, kernel_size_factor, dilated and non-separable residual "
     "blocks, dense residual panes, repeats 1..4, a block of two masked stride-2 convs"},
    {"qn_nomask", "QuartzNet", "tests/model/jasper/dle/quartznet_nomask.yaml", "--seed 7", "", NULL,
     "QuartzNet without conv masks, hardtanh, pad_align 0, a repeat-2 block of stride 2"},
    {"jasper_nomask_div16", "Jasper", "dle:configs/jasper10x5dr_speedp-offline_speca_nomask.yaml",
     "--filters-div 16 --seed 5", "", NULL,
     "Jasper 10x5 dense residual without conv masks as DLE ships it, filters / 16"},
    {"j1_replay", "Jasper", "shared:golden/jasper/J1/jasper10x5dr_speedp-online_speca_golden.yaml",
     "", "", "shared:golden/jasper/J1/Jasper_epoch1_checkpoint.pt",
     "the J1 golden's own checkpoint and yaml (the tool against the golden set)"},
};
const int dle_jasper_n_cfgs = (int)(sizeof dle_jasper_cfgs / sizeof dle_jasper_cfgs[0]);

const dle_jasper_cfg_t *dle_jasper_cfg(const char *name)
{
    for (int i = 0; i < dle_jasper_n_cfgs; i++)
        if (!strcmp(dle_jasper_cfgs[i].name, name))
            return &dle_jasper_cfgs[i];
    return NULL;
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

/* "dle:" / "shared:" / repository path -> absolute path in out; 0 ok, 1 absent */
static int resolve(const char *spec, const char *dle_arch, char *out, size_t n)
{
    char tmp[1024];
    if (!strncmp(spec, "dle:", 4)) {
        snprintf(tmp, sizeof tmp, "%s/%s", dle_arch, spec + 4);
    } else if (!strncmp(spec, "shared:", 7)) {
        const char *p = test_shared(spec + 7);
        if (!p)
            return 1;
        snprintf(tmp, sizeof tmp, "%s", p);
    } else {
        snprintf(tmp, sizeof tmp, "%s", spec);
    }
    return realpath(tmp, out) && strlen(out) < n ? 0 : 1;
}

static unsigned long long file_key(const char *path)
{
    struct stat s;
    if (stat(path, &s) != 0)
        return 0;
    return (unsigned long long)s.st_size * 1000003ull ^ (unsigned long long)s.st_mtime * 7919ull;
}

static unsigned long long str_key(const char *s)
{
    unsigned long long h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void set_paths(dle_jasper_set_t *s, const char *dir)
{
    snprintf(s->ref, sizeof s->ref, "%.690s/ref", dir);
    snprintf(s->model, sizeof s->model, "%.690s/m", dir);
}

int dle_jasper_ref(const dle_jasper_cfg_t *c, dle_jasper_set_t *s, char *why, size_t nwhy)
{
    char probe[1200], dir[600];
    const char *pre = getenv("HARK_DLE_REF");
    if (pre && *pre) {
        snprintf(dir, sizeof dir, "%.500s/%s", pre, c->name);
        snprintf(probe, sizeof probe, "%s/m/1/model.safetensors", dir);
        if (access(probe, R_OK) != 0) {
            snprintf(why, nwhy, "$HARK_DLE_REF has no %s (%s)", c->name, probe);
            return 1;
        }
        set_paths(s, dir);
        return 0;
    }
    const char *src = getenv("HARK_DLE_SRC");
    if (!src || !*src) {
        snprintf(why, nwhy, "$HARK_DLE_SRC (a DeepLearningExamples tree) is not set");
        return 1;
    }
    const char *audio = test_shared("audio/en");
    if (!audio) {
        snprintf(why, nwhy, "../shared/data/audio/en is absent");
        return 1;
    }
    char audio_dir[1024];
    snprintf(audio_dir, sizeof audio_dir, "%s", audio);
    /* DLE's folder for this architecture: the repository root, PyTorch/SpeechRecognition or it */
    char arch[1024] = "", tmp[1200];
    const char *forms[3] = {"%s/PyTorch/SpeechRecognition/%s", "%s/%s", "%s"};
    int found = 0;
    for (int i = 0; i < 3 && !found; i++) {
        char base[1024];
        snprintf(base, sizeof base, forms[i], src, c->folder);
        snprintf(tmp, sizeof tmp, "%s/common/features.py", base);
        found = access(tmp, R_OK) == 0 && realpath(base, arch) != NULL;
    }
    if (!found) {
        snprintf(why, nwhy, "$HARK_DLE_SRC %.300s holds no DLE %s folder", src, c->folder);
        return -1;
    }
    char yaml[1024], ckpt[1024] = "", tool[1024], conv[1024];
    if (resolve(c->yaml, arch, yaml, sizeof yaml)) {
        snprintf(why, nwhy, "%s is absent", c->yaml);
        return !strncmp(c->yaml, "shared:", 7) ? 1 : -1;
    }
    if (c->ckpt && resolve(c->ckpt, arch, ckpt, sizeof ckpt)) {
        snprintf(why, nwhy, "%s is absent", c->ckpt);
        return 1;
    }
    if (!realpath("tools/dle_jasper_reference.py", tool) ||
        !realpath("tools/convert_jasper.py", conv)) {
        snprintf(why, nwhy, "tools/ is absent (run from the repository root)");
        return -1;
    }
    if (system("/usr/bin/python3 -c 'import torch, yaml, numpy' >/dev/null 2>&1") != 0) {
        snprintf(why, nwhy, "/usr/bin/python3 with torch, yaml and numpy is missing");
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s/%s/model.py", arch,
             !strcmp(c->folder, "Jasper") ? "jasper" : "quartznet");
    unsigned long long key = file_key(tool) ^ file_key(conv) * 3ull ^ file_key(yaml) * 5ull ^
                             file_key(tmp) * 7ull ^ str_key(c->flags) ^ str_key(c->conv) * 11ull ^
                             str_key(arch) * 13ull ^ (*ckpt ? file_key(ckpt) * 17ull : 0);
    char root[256];
    snprintf(root, sizeof root, "/tmp/hark-test-cache-%u", (unsigned)getuid());
    mkdir(root, 0700);
    snprintf(dir, sizeof dir, "%s/dle-%s-%llx", root, c->name, key);
    set_paths(s, dir);
    snprintf(probe, sizeof probe, "%s/m/1/model.safetensors", dir);
    if (access(probe, R_OK) == 0)
        return 0;
    char work[300];
    snprintf(work, sizeof work, "%s/tmp-XXXXXX", root);
    if (!mkdtemp(work)) {
        snprintf(why, nwhy, "mkdtemp %s: %s", work, strerror(errno));
        return -1;
    }
    /* the converter reads what the tool wrote: its checkpoint (named as DLE's Checkpointer names
     * it) or the one it was given, and the yaml it built the model from */
    char ck_arg[1200], conv_ck[1200];
    snprintf(ck_arg, sizeof ck_arg, *ckpt ? "--checkpoint '%s'" : "%s", ckpt);
    if (*ckpt)
        snprintf(conv_ck, sizeof conv_ck, "%s", ckpt);
    else
        snprintf(conv_ck, sizeof conv_ck, "%s/ref/%s_epoch1_checkpoint.pt", work, c->folder);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s' --dle-root '%s' --config '%s' --audio-dir '%s' --out '%s/ref' "
             "%s %s >'%s/log' 2>&1 && /usr/bin/python3 '%s' --checkpoint '%s' --config "
             "'%s/ref/model.yaml' --output '%s/m' %s >>'%s/log' 2>&1",
             tool, arch, yaml, audio_dir, work, c->flags, ck_arg, work, conv, conv_ck, work, work,
             c->conv, work);
    if (system(cmd) != 0) {
        snprintf(why, nwhy,
                 "dle_jasper_reference.py or convert_jasper.py failed on %s (log in "
                 "%s/log)",
                 c->name, work);
        return -1;
    }
    if (rename(work, dir) != 0) /* another process won the race: use its copy */
        nftw(work, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int dle_jasper_npy(npy_array_t *a, const char *ref, const char *sub, const char *file)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s/%s", ref, sub, file);
    return access(p, R_OK) == 0 ? npy_load_f32(p, a) : HARK_ERR_IO;
}

cJSON *dle_jasper_json(const char *ref, const char *sub, const char *file)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s/%s", ref, sub, file);
    return test_read_json(p);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

int dle_jasper_golden_names(char (*names)[64], int max)
{
    const char *root = test_shared("golden/jasper");
    DIR *d = root ? opendir(root) : NULL;
    if (!d)
        return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s", root);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char probe[1400];
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "J1") || strlen(e->d_name) >= 64)
            continue;
        snprintf(probe, sizeof probe, "%s/%s/manifest.json", path, e->d_name);
        if (access(probe, R_OK) == 0)
            snprintf(names[n++], 64, "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    return n;
}

/* <dir>/<first entry ending in suffix> into out (a placeholder path when none: the conversion
 * may come from $HARK_GOLDEN_CONVERTED) */
static void find_file(const char *dir, const char *suffix, char *out, size_t n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    snprintf(out, n, "%s/(no *%s)", dir, suffix);
    size_t ls = strlen(suffix);
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > ls && !strcmp(e->d_name + l - ls, suffix)) {
            snprintf(out, n, "%s/%s", dir, e->d_name);
            break;
        }
    }
    if (d)
        closedir(d);
}

int dle_jasper_golden(const char *name, dle_jasper_set_t *s, char *why, size_t nwhy)
{
    char rel[128], ck[1024], yaml[1024], args[2200], tag[96], dir[600];
    snprintf(rel, sizeof rel, "golden/jasper/%s", name);
    const char *g = test_shared(rel);
    if (!g) {
        snprintf(why, nwhy, "../shared/data/%s is absent", rel);
        return 1;
    }
    snprintf(s->ref, sizeof s->ref, "%s", g);
    find_file(s->ref, "_checkpoint.pt", ck, sizeof ck);
    find_file(s->ref, ".yaml", yaml, sizeof yaml);
    snprintf(args, sizeof args, "--checkpoint '%s' --config '%s'", ck, yaml);
    snprintf(tag, sizeof tag, "jasper_%s", name);
    for (char *p = tag; *p; p++)
        *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    if (!golden_convert_cached(tag, "convert_jasper.py", ck, args, dir, sizeof dir, why, nwhy))
        return 1;
    snprintf(s->model, sizeof s->model, "%.690s/m", dir);
    return 0;
}

int dle_jasper_utts(const char *ref, char (*dirs)[256], int max)
{
    cJSON *b = dle_jasper_json(ref, "batch", "result.json");
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(b, "order");
    int n = cJSON_IsArray(order) ? cJSON_GetArraySize(order) : -1;
    if (n > max)
        n = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *k = cJSON_GetArrayItem(order, i);
        if (!cJSON_IsString(k)) {
            n = -1;
            break;
        }
        snprintf(dirs[i], 256, "utt%d_%.200s", i, k->valuestring);
    }
    cJSON_Delete(b);
    return n;
}
