/* family.c — what every family shares: task names, typed look-ups of request / config parameters,
 * and the asr_result_t life cycle (free, deep copy, move). Tests: tests/model/test_family.c */
#include "model/family.h"

#include "search/ctc_endpoint.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

const char *family_task_name(family_task_t t)
{
    switch (t) {
    case FAMILY_TASK_ASR:
        return "asr";
    case FAMILY_TASK_TTS:
        return "tts";
    case FAMILY_TASK_VAD:
        return "vad";
    }
    return "unknown";
}

int family_precision(const char *name, ops_dtype_t *dt)
{
    int p = !strcmp(name, "fp32")   ? OPS_F32
            : !strcmp(name, "fp16") ? OPS_F16
            : !strcmp(name, "bf16") ? OPS_BF16
                                    : -1;
    if (p >= 0)
        *dt = (ops_dtype_t)p;
    return p < 0 ? -1 : 0;
}

const char *family_param(const family_params_t *params, const char *key)
{
    if (!params || !key)
        return NULL;
    for (int i = params->n - 1; i >= 0; i--) /* the last one given wins */
        if (params->p[i].key && !strcmp(params->p[i].key, key))
            return params->p[i].value;
    return NULL;
}

int family_param_int(const family_params_t *params, const char *key, long lo, long hi, int *out,
                     hark_err_t *err)
{
    const char *v = family_param(params, key);
    if (!v)
        return HARK_ERR_NOT_FOUND;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno)
        return err_set(err, HARK_ERR_INVALID_ARG, "%s \"%s\" is not an integer", key, v);
    if (x < lo || x > hi)
        return err_range(err, key, lo, hi, x);
    *out = (int)x;
    return HARK_OK;
}

int family_param_double(const family_params_t *params, const char *key, double *out,
                        hark_err_t *err)
{
    const char *v = family_param(params, key);
    if (!v)
        return HARK_ERR_NOT_FOUND;
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || x != x || x - x != 0) /* not a number, NaN, +-Inf */
        return err_set(err, HARK_ERR_INVALID_ARG, "%s \"%s\" is not a finite number", key, v);
    *out = x;
    return HARK_OK;
}

int family_param_bool(const family_params_t *params, const char *key, int *out, hark_err_t *err)
{
    const char *v = family_param(params, key);
    if (!v)
        return HARK_ERR_NOT_FOUND;
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1"))
        *out = 1; /* yes/no too: DLE's Triton configs say use_denoiser "no" */
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0"))
        *out = 0;
    else
        return err_set(err, HARK_ERR_INVALID_ARG, "%s \"%s\" is not a boolean (true/false)", key,
                       v);
    return HARK_OK;
}

static void hyp_free(asr_hyp_t *h)
{
    hark_free(h->text);
    hark_free(h->tokens);
    hark_free(h->times_ms);
    memset(h, 0, sizeof *h);
}

void asr_result_free(asr_result_t *r)
{
    if (!r)
        return;
    hyp_free(&r->best);
    for (int i = 0; i < r->n_nbest; i++)
        hyp_free(&r->nbest[i]);
    hark_free(r->nbest);
    for (int i = 0; i < r->n_words; i++)
        hark_free(r->words[i].text);
    hark_free(r->words);
    hark_free(r->frame_ids);
    memset(r, 0, sizeof *r);
}

static int hyp_copy(asr_hyp_t *d, const asr_hyp_t *s)
{
    *d = (asr_hyp_t){.n_tokens = s->n_tokens, .score = s->score};
    size_t nb = sizeof(int) * (size_t)s->n_tokens;
    if (s->text && !(d->text = hark_strdup(s->text)))
        return HARK_ERR_NOMEM;
    if (s->n_tokens > 0) {
        if (!(d->tokens = hark_malloc(nb)) || !(d->times_ms = hark_malloc(nb)))
            return HARK_ERR_NOMEM;
        memcpy(d->tokens, s->tokens, nb);
        if (s->times_ms)
            memcpy(d->times_ms, s->times_ms, nb);
        else
            memset(d->times_ms, 0, nb);
    }
    return HARK_OK;
}

int asr_result_copy(asr_result_t *dst, const asr_result_t *src)
{
    memset(dst, 0, sizeof *dst);
    dst->confidence = src->confidence;
    dst->duration_s = src->duration_s;
    dst->word_sep = src->word_sep;
    if (hyp_copy(&dst->best, &src->best))
        goto nomem;
    if (src->n_nbest > 0) {
        if (!(dst->nbest = hark_calloc((size_t)src->n_nbest, sizeof *dst->nbest)))
            goto nomem;
        for (; dst->n_nbest < src->n_nbest; dst->n_nbest++)
            if (hyp_copy(&dst->nbest[dst->n_nbest], &src->nbest[dst->n_nbest])) {
                dst->n_nbest++; /* the half-copied one is freed too */
                goto nomem;
            }
    }
    if (src->n_words > 0) {
        if (!(dst->words = hark_calloc((size_t)src->n_words, sizeof *dst->words)))
            goto nomem;
        for (; dst->n_words < src->n_words; dst->n_words++) {
            asr_word_t *w = &dst->words[dst->n_words];
            *w = src->words[dst->n_words];
            if (!(w->text = hark_strdup(
                      src->words[dst->n_words].text ? src->words[dst->n_words].text : "")))
                goto nomem;
        }
    }
    if (src->n_frames > 0 && src->frame_ids) {
        if (!(dst->frame_ids = hark_malloc(sizeof(int) * (size_t)src->n_frames)))
            goto nomem;
        memcpy(dst->frame_ids, src->frame_ids, sizeof(int) * (size_t)src->n_frames);
        dst->n_frames = src->n_frames;
    }
    return HARK_OK;
nomem:
    asr_result_free(dst);
    return HARK_ERR_NOMEM;
}

void asr_result_take(asr_result_t *dst, asr_result_t *src)
{
    *dst = *src;
    memset(src, 0, sizeof *src);
}

#define MAX_MODEL_JSON (16u << 20)

int family_latest_version(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end || e->d_name[0] < '1' || e->d_name[0] > '9' || v > 1000000 || v <= best)
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s/model.json", dir, e->d_name);
        if (access(p, R_OK) == 0)
            best = (int)v;
    }
    closedir(d);
    return best;
}

void family_version_path(const char *dir, int version, const char *name, char *path, size_t n)
{
    if (version <= 0 && (version = family_latest_version(dir)) <= 0)
        version = 1;
    snprintf(path, n, "%s/%d/%s", dir, version, name);
}

static int is_file(const char *dir, const char *name)
{
    char p[4400];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int wenet_checkpoint_hint(const char *what, const char *dir, hark_err_t *err)
{
    return err_set(err, HARK_ERR_IO,
                   "%s is a WeNet checkpoint, not a hark model: convert it first with "
                   "tools/convert_wenet.py --checkpoint %s/final.pt --config %s/train.yaml "
                   "--units %s/units.txt --cmvn %s/global_cmvn --output MODEL_DIR "
                   "(docs/model-format.md), then give MODEL_DIR",
                   what, dir, dir, dir, dir);
}

int family_resolve_dir(const char *arg, char *entry, size_t n, int *version, hark_err_t *err)
{
    struct stat sb;
    *version = 0;
    char trimmed[4096], parent[4096];
    size_t al = strlen(arg);
    while (al > 1 && arg[al - 1] == '/') /* "repo/wenet/": the name before the slash */
        al--;
    if (al >= sizeof trimmed)
        return err_set(err, HARK_ERR_INVALID_ARG, "%.100s...: path too long", arg);
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)al, arg);
    arg = trimmed;
    if (stat(arg, &sb) != 0)
        return err_set(err, HARK_ERR_IO, "%s: %s", arg, strerror(errno));
    const char *slash = strrchr(arg, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - arg) : 1, slash ? arg : ".");
    const char *base = slash ? slash + 1 : arg;
    if (S_ISREG(sb.st_mode)) {
        size_t l = strlen(base);
        if ((l > 3 && !strcmp(base + l - 3, ".pt")) || (l > 4 && !strcmp(base + l - 4, ".pth")))
            return wenet_checkpoint_hint(arg, parent, err);
        return err_set(err, HARK_ERR_IO,
                       "%s is a file: give the model's folder (a model-repository entry, "
                       "DIR/<version>/model.json)",
                       arg);
    }
    if (!S_ISDIR(sb.st_mode))
        return err_set(err, HARK_ERR_IO, "%s is not a folder", arg);
    if (family_latest_version(arg) > 0) { /* an entry */
        snprintf(entry, n, "%s", arg);
        return HARK_OK;
    }
    char *end;
    long v = strtol(base, &end, 10);
    if (is_file(arg, "model.json")) {
        if (*end || base[0] < '1' || base[0] > '9' || v > 1000000)
            return err_set(err, HARK_ERR_IO,
                           "%s holds a model.json but is not a version folder: a model is "
                           "ENTRY/<version>/model.json (e.g. ENTRY/1/model.json)",
                           arg);
        snprintf(entry, n, "%s", parent); /* a version folder */
        *version = (int)v;
        return HARK_OK;
    }
    if (is_file(arg, "final.pt") || is_file(arg, "train.yaml"))
        return wenet_checkpoint_hint(arg, arg, err);
    /* a repository: its entries */
    DIR *d = opendir(arg);
    if (!d)
        return err_set(err, HARK_ERR_IO, "%s: %s", arg, strerror(errno));
    char names[512] = "", only[4400] = "";
    int models = 0;
    size_t off = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", arg, e->d_name);
        if (family_latest_version(sub) <= 0)
            continue;
        if (!models++)
            snprintf(only, sizeof only, "%s", sub);
        if (off < sizeof names)
            off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", models > 1 ? ", " : "",
                                    e->d_name);
    }
    closedir(d);
    if (models == 1) {
        snprintf(entry, n, "%s", only);
        return HARK_OK;
    }
    if (models > 1)
        return err_set(err, HARK_ERR_IO,
                       "%s is a model repository with %d models (%s): give one of them, "
                       "e.g. %s",
                       arg, models, names, only);
    return err_set(err, HARK_ERR_IO,
                   "%s is not a hark model: expected a model-repository entry "
                   "(%s/<version>/model.json, as tools/convert_*.py write it), one of its version "
                   "folders, or a repository holding one model",
                   arg, arg);
}

int family_open_model_json(const char *dir, int version, char *path, size_t n, cJSON **out,
                           hark_err_t *err)
{
    family_version_path(dir, version, "model.json", path, n);
    return family_read_model_json(path, out, err);
}

int family_read_model_json(const char *path, cJSON **out, hark_err_t *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open (not a converted model directory?)",
                       path);
    long n = -1;
    int rc = HARK_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
        rc = err_set(err, HARK_ERR_IO, "%s: cannot read", path);
    else if ((unsigned long)n > MAX_MODEL_JSON)
        rc = err_set(err, HARK_ERR_FORMAT, "%s: %ld bytes is too large for a model.json", path, n);
    else if (!(buf = hark_malloc((size_t)n + 1)))
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory reading %s", path);
    else if (fread(buf, 1, (size_t)n, f) != (size_t)n)
        rc = err_set(err, HARK_ERR_IO, "%s: cannot read", path);
    fclose(f);
    if (rc) {
        hark_free(buf);
        return rc;
    }
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    hark_free(buf);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return err_set(err, HARK_ERR_FORMAT, "%s: not a JSON object", path);
    }
    *out = j;
    return HARK_OK;
}

int family_tts_vocoder_path(const char *name, const char *dir, const family_params_t *cfg,
                            char *vdir, size_t cap, hark_err_t *err)
{
    return family_model_path(name, dir, cfg, "vocoder", vdir, cap, err);
}

int family_model_path(const char *name, const char *dir, const family_params_t *cfg,
                      const char *key, char *out, size_t cap, hark_err_t *err)
{
    const char *v = family_param(cfg, key);
    if (!v || !*v)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "%s: %s/config.pbtxt names no %s (parameters { key: \"%s\" value "
                       "{ string_value: \"NAME\" } })",
                       name, dir, key, key);
    if (v[0] == '/') {
        snprintf(out, cap, "%s", v);
        return HARK_OK;
    }
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = 0;
    snprintf(out, cap, "%s/%s", slash ? (parent[0] ? parent : "/") : ".", v);
    return HARK_OK;
}

void family_dump_f32(void *user, const char *name, const float *data, int rows, int cols)
{
    family_dump_t *d = user;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s%s.npy", d->dir, d->prefix ? d->prefix : "", name);
    int64_t shape[2] = {rows, cols};
    if (npy_save_f32(path, data, 2, shape))
        d->failed = 1;
}

int family_mkdir_p(const char *dir, hark_err_t *err)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return err_set(err, HARK_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
            *p = '/';
        }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return err_set(err, HARK_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    return HARK_OK;
}

int family_endpoint_params(const family_params_t *params, const char *where, int *endpointing,
                           int *continuous, ctc_endpoint_rule_t *rule, hark_err_t *err)
{
    static const char *const bools[2] = {"endpointing", "continuous_decoding"};
    int *bvals[2] = {endpointing, continuous};
    for (int i = 0; i < 2; i++) {
        const char *v = family_param(params, bools[i]);
        if (v && strcmp(v, "true") && strcmp(v, "false"))
            return err_set(err, HARK_ERR_INVALID_ARG, "%s%s must be true or false", where,
                           bools[i]);
        if (v)
            *bvals[i] = !strcmp(v, "true");
    }
    static const char *const ms_keys[3] = {"endpoint_silence_no_speech_ms",
                                           "endpoint_silence_after_speech_ms",
                                           "endpoint_max_utterance_ms"};
    for (int i = 0; i < 3; i++) {
        int ms = 0, rc = family_param_int(params, ms_keys[i], 0, 1 << 30, &ms, err);
        if (rc == HARK_OK) {
            if (i < 2)
                rule[i].min_trailing_silence = ms;
            else
                rule[i].min_utterance_length = ms;
        } else if (rc != HARK_ERR_NOT_FOUND) {
            return err_set(err, rc, "%s%s must be in [0, 2^30] ms", where, ms_keys[i]);
        }
    }
    return HARK_OK;
}
