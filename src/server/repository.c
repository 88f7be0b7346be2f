/* repository.c — the model repository: scan, load through the family a config names, unload,
 * states, and the JSON documents about models. Tests: tests/server/test_server.py */
#include "server/repository.h"

#include "api/kserve.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "gpu/gpu.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_MODELS 64

struct repository {
    repository_opts_t o;
    char dir[3072];
    pthread_rwlock_t lock;
    repo_model_t models[MAX_MODELS];
    int n_models;
};

static const char *const state_names[] = {"UNAVAILABLE", "LOADING", "READY", "UNLOADING"};

const char *repo_state_name(repo_state_t s)
{
    return (unsigned)s < 4 ? state_names[s] : "UNKNOWN";
}

void repository_rdlock(repository_t *r)
{
    pthread_rwlock_rdlock(&r->lock);
}

void repository_unlock(repository_t *r)
{
    pthread_rwlock_unlock(&r->lock);
}

int repository_count(repository_t *r)
{
    return r->n_models;
}

repo_model_t *repository_at(repository_t *r, int i)
{
    return i >= 0 && i < r->n_models ? &r->models[i] : NULL;
}

/* the entry called name[len], removed ones too (any_removed) or not */
static repo_model_t *find_entry(repository_t *r, const char *name, size_t len, int any_removed)
{
    for (int i = 0; i < r->n_models; i++)
        if (strlen(r->models[i].name) == len && !strncmp(r->models[i].name, name, len) &&
            (any_removed || !r->models[i].removed))
            return &r->models[i];
    return NULL;
}

static repo_model_t *find_name(repository_t *r, const char *name, size_t len)
{
    return find_entry(r, name, len, 0);
}

int repository_name_valid(const char *name, size_t len, hark_err_t *err)
{
    const char *why = NULL;
    if (!name || !len)
        why = "is empty";
    else if (len >= sizeof((repo_model_t *)0)->name)
        why = "is too long (127 bytes at most)";
    else if (name[0] == '.')
        why = "starts with '.'";
    for (size_t i = 0; !why && i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == '/' || c == '\\')
            why = "contains a path separator";
        else if (c < 0x20 || c == 0x7f)
            why = "contains a control character";
    }
    if (!why)
        return HARK_OK;
    /* the name itself is not echoed: it may hold anything */
    return err_set(err, HARK_ERR_INVALID_ARG,
                   "invalid model name: it %s (a model name is the name of a folder in the "
                   "model repository)",
                   why);
}

/* Removes the repository's own path from a message meant for clients (they see paths relative
 * to the repository; the server's log keeps the whole message). */
static void redact(const repository_t *r, char *msg, size_t cap)
{
    size_t dl = strlen(r->dir);
    if (!dl || !msg)
        return;
    static const char with[] = "<model repository>";
    char *p = msg;
    while ((p = strstr(p, r->dir))) {
        size_t tail = strlen(p + dl) + 1;
        if (p[dl] == '/') {
            memmove(p, p + dl + 1, tail - 1);
        } else if ((size_t)(p - msg) + sizeof with - 1 + tail <= cap) {
            memmove(p + sizeof with - 1, p + dl, tail);
            memcpy(p, with, sizeof with - 1);
            p += sizeof with - 1;
        } else {
            memmove(p, p + dl, tail);
        }
    }
}

/* a fingerprint of dir and what lies under it, depth levels down: each entry's name, size and
 * modification time (the size too: a file rewritten within one tick of the file system's clock
 * keeps its time, and a scan may catch it half written) */
static uint64_t tree_stamp(const char *dir, int depth)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    uint64_t h = 1469598103934665603ull;
    for (const char *c = strrchr(dir, '/') ? strrchr(dir, '/') : dir; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    h ^= ((uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec) * 31u;
    h = (h ^ (uint64_t)st.st_size) * 1099511628211ull;
    if (!S_ISDIR(st.st_mode) || depth <= 0)
        return h;
    DIR *d = opendir(dir);
    if (!d)
        return h;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        h += tree_stamp(p, depth - 1); /* a sum: the order entries are listed in does not count */
    }
    closedir(d);
    return h;
}

repo_model_t *repository_find(repository_t *r, const char *name, size_t len, const char *version,
                              hark_err_t *err)
{
    repo_model_t *m = find_name(r, name, len);
    if (!m) {
        err_set(err, HARK_ERR_NOT_FOUND, "model '%.*s' not found", (int)len, name);
        return NULL;
    }
    if (version && version[0] && strcmp(version, m->version_str) != 0) {
        err_set(err, HARK_ERR_NOT_FOUND, "model '%s' has no version %s", m->name, version);
        return NULL;
    }
    return m;
}

repo_model_t *repository_only_ready(repository_t *r, int task)
{
    repo_model_t *only = NULL;
    int ready = 0;
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].state == M_READY && r->models[i].served &&
            (!task || (int)served_model_family(r->models[i].served)->task == task)) {
            only = &r->models[i];
            ready++;
        }
    return ready == 1 ? only : NULL;
}

static void notice(void *user, const char *msg)
{
    LOG_INFO("%s: %s", (const char *)user, msg);
}

/* the load log's line for an instance group on a GPU: which device and which code path */
static void log_gpu_group(const char *model, const char *group, int dev, gpu_path_t gp)
{
    char name[256];
    int cc = gpu_device_cc(dev, name, sizeof name);
    LOG_INFO("model %s: instance_group %s on GPU %d (%s, sm_%d): %s path", model, group, dev, name,
             cc, gpu_path_name(gp));
}

/* An audio model's inputs are the server's contract (service.c): WAV (FP32 or FP16) with
 * WAV_LENS (INT32), AUDIO (STRING), or a family's own pair (family_io_t). Anything else would be
 * advertised by /config and then refused by every request: refused here, naming the line. */
static int check_audio_inputs(const model_config_t *cfg, const family_t *fam, const char *path,
                              hark_err_t *err)
{
    for (int i = 0; i < cfg->n_inputs; i++) {
        const model_io_t *in = &cfg->inputs[i];
        int samples = !strcmp(in->name, "WAV"), lens = !strcmp(in->name, "WAV_LENS");
        int files = !strcmp(in->name, "AUDIO");
        for (const family_io_t *c = fam->io; c && c->audio; c++) {
            samples |= !strcmp(in->name, c->audio);
            lens |= c->n_samples && !strcmp(in->name, c->n_samples);
        }
        int ok = samples ? in->data_type == MODEL_TYPE_FP32 || in->data_type == MODEL_TYPE_FP16
                 : lens  ? in->data_type == MODEL_TYPE_INT32
                 : files ? in->data_type == MODEL_TYPE_STRING
                         : -1;
        if (ok == -1)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "%s:%d: input '%s' is not one hark serves for %s ('WAV' and "
                           "'WAV_LENS', or 'AUDIO'%s%s%s)",
                           path, in->line, in->name,
                           fam->task == FAMILY_TASK_ASR ? "a recognizer" : "a VAD model",
                           fam->io && fam->io->audio ? ", or '" : "",
                           fam->io && fam->io->audio ? fam->io->audio : "",
                           fam->io && fam->io->audio ? "'" : "");
        if (!ok)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "%s:%d: input '%s' has data_type %s; hark serves it as %s", path,
                           in->line, in->name, dtype_config_name(in->data_type),
                           samples ? "TYPE_FP32 or TYPE_FP16"
                           : lens  ? "TYPE_INT32"
                                   : "TYPE_STRING");
    }
    return HARK_OK;
}

/* Reads config.pbtxt and turns it into served options (cfg params point into m->cfg). Called
 * off the loop, table unlocked, the entry LOADING (no reader looks at it). *params: the
 * parameters as the family reads them (the caller hark_frees it once the model is created). */
static int prepare(repository_t *r, repo_model_t *m, served_opts_t *so, family_param_t **params,
                   hark_err_t *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/config.pbtxt", m->dir);
    model_config_free(&m->cfg);
    m->has_cfg = 0;
    model_config_opts_t mo = {.notice = notice, .user = m->name};
    int rc = model_config_load(path, &mo, &m->cfg, err);
    if (rc)
        return rc;
    m->has_cfg = 1;
    const family_t *fam = m->cfg.family ? family_find(m->cfg.family) : NULL;
    if (!fam)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: model family '%s' is not served by hark "
                       "(set backend: \"hark\" and parameters family)",
                       path, m->cfg.family ? m->cfg.family : "(none)");
    if (fam->task != FAMILY_TASK_ASR && fam->task != FAMILY_TASK_TTS &&
        fam->task != FAMILY_TASK_VAD)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: family '%s' (%s) cannot be served yet: the server serves ASR, TTS and "
                       "VAD models",
                       path, fam->name, family_task_name(fam->task));
    if (fam->streaming && !m->cfg.sequence_batching)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: family '%s' streams only: give the model sequence_batching { }", path,
                       fam->name);
    if (m->cfg.sequence_batching && !fam->stream_open)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: family '%s' does not stream: sequence_batching cannot serve it", path,
                       fam->name);
    if (m->cfg.name && *m->cfg.name && strcmp(m->cfg.name, m->name) != 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "%s: name \"%s\" differs from the model's folder \"%s\" (Triton's rule: "
                       "they must match)",
                       path, m->cfg.name, m->name);
    if ((fam->task == FAMILY_TASK_ASR || fam->task == FAMILY_TASK_VAD) &&
        (rc = check_audio_inputs(&m->cfg, fam, path, err)) != HARK_OK)
        return rc;
    m->version = family_latest_version(m->dir);
    if (!m->version)
        return err_set(err, HARK_ERR_NOT_FOUND, "%s: no version directory with a model.json",
                       m->dir);
    snprintf(m->version_str, sizeof m->version_str, "%d", m->version);
    memset(so, 0, sizeof *so);
    so->family = fam;
    if (!(*params = hark_calloc((size_t)m->cfg.n_params + 1, sizeof **params)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < m->cfg.n_params; i++)
        (*params)[i] = (family_param_t){m->cfg.params[i].key, m->cfg.params[i].value};
    so->cfg = (family_params_t){*params, m->cfg.n_params};
    so->completions_begin = r->o.completions_begin;
    so->completions_end = r->o.completions_end;
    so->version = m->version;
    so->max_seconds = r->o.max_seconds;
    so->precision = model_config_param(&m->cfg, "precision");
    batcher_opts_t *b = &so->batching;
    b->max_batch_size = m->cfg.max_batch_size > 0 ? m->cfg.max_batch_size : 1;
    const model_dynamic_batching_t *db = &m->cfg.dynamic_batching;
    b->max_queue_size = r->o.max_queue_size; /* unless the config sets one */
    if (db->present) {
        for (int i = 0; i < db->n_preferred && i < 8; i++)
            b->preferred[b->n_preferred++] = db->preferred_batch_size[i];
        b->max_queue_delay_us = db->max_queue_delay_microseconds;
        if (db->default_queue_policy.max_queue_size)
            b->max_queue_size = (int)db->default_queue_policy.max_queue_size;
        so->default_timeout_us = db->default_queue_policy.default_timeout_microseconds;
    }
    b->length_aware = r->o.length_aware;
    if (m->cfg.sequence_batching) { /* Triton's: oldest's candidates, direct's batch slots */
        const model_sequence_batching_t *q = &m->cfg.seq;
        so->seq.enabled = 1;
        so->seq.max_sequences = q->oldest ? q->max_candidate_sequences : b->max_batch_size;
        so->seq.idle_us = m->cfg.max_sequence_idle_microseconds;
        so->seq.max_queue_delay_us = q->max_queue_delay_microseconds;
        for (int i = 0; i < q->n_preferred && i < 8; i++)
            so->seq.preferred[so->seq.n_preferred++] = q->preferred_batch_size[i];
    }
    /* the GPUs hark can use, in order: a device too old for hark's code, or one this build has no
     * code for, is logged once (gpu_device_path) and left out, as if absent (issue 24) */
    int ngpu = gpu_device_count(), usable[64], nuse = 0;
    for (int d = 0; d < ngpu && nuse < 64; d++)
        if (gpu_device_path(d, NULL) != GPU_PATH_NONE)
            usable[nuse++] = d;
    for (int g = 0; g < m->cfg.n_instance_groups && so->n_groups < 8; g++) {
        model_instance_group_t *ig = &m->cfg.instance_groups[g];
        int count = ig->count > 0 ? ig->count : 1;
        int want_gpu = ig->kind == MODEL_KIND_GPU || (ig->kind == MODEL_KIND_AUTO && nuse > 0);
        if (want_gpu && nuse == 0) {
            LOG_WARN("%s: instance_group %s asks for KIND_GPU but no GPU %s available; running it "
                     "on the CPU",
                     m->name, ig->name, ngpu ? "hark can use is" : "is");
            want_gpu = 0;
        }
        /* the model's config tells what runs (Triton resolves KIND_AUTO the same way): a group
         * that fell back to the CPU reads KIND_CPU, without GPUs */
        if (ig->kind != MODEL_KIND_MODEL) {
            ig->kind = want_gpu ? MODEL_KIND_GPU : MODEL_KIND_CPU;
            if (!want_gpu)
                ig->n_gpus = 0;
        }
        if (!want_gpu) {
            so->groups[so->n_groups++] =
                (served_group_t){.count = count, .device = -1, .n_threads = r->o.cpu_threads};
            continue;
        }
        int ndev = ig->n_gpus ? ig->n_gpus : nuse;
        for (int d = 0; d < ndev && so->n_groups < 8; d++) {
            int dev = ig->n_gpus ? ig->gpus[d] : usable[d];
            if (dev >= ngpu)
                return err_set(err, HARK_ERR_NO_DEVICE,
                               "%s: instance_group %s names GPU %d; %d present", path, ig->name,
                               dev, ngpu);
            hark_err_t why = {0};
            gpu_path_t gp = gpu_device_path(dev, &why);
            if (gp == GPU_PATH_NONE)
                return err_set(err, why.status ? why.status : HARK_ERR_UNSUPPORTED,
                               "%s: instance_group %s names GPU %d: %s", path, ig->name, dev,
                               why.msg);
            log_gpu_group(m->name, ig->name, dev, gp);
            so->groups[so->n_groups++] = (served_group_t){.count = count, .device = dev};
        }
    }
    if (!so->n_groups) {
        so->groups[so->n_groups++] = (served_group_t){
            .count = 1, .device = nuse ? usable[0] : -1, .n_threads = r->o.cpu_threads};
        if (nuse)
            log_gpu_group(m->name, "(default)", usable[0], gpu_device_path(usable[0], NULL));
    }
    return HARK_OK;
}

/* Loads (or reloads) one model; any thread but a loop. */
static int load_model(repository_t *r, repo_model_t *m, hark_err_t *err)
{
    pthread_rwlock_wrlock(&r->lock);
    if (m->state == M_LOADING || m->state == M_UNLOADING) {
        pthread_rwlock_unlock(&r->lock);
        return err_set(err, HARK_ERR_AGAIN, "model '%s' is %s", m->name,
                       m->state == M_LOADING ? "loading" : "unloading");
    }
    served_model_t *old = m->served;
    m->served = NULL;
    m->family = NULL;
    m->state = M_LOADING;
    pthread_rwlock_unlock(&r->lock);
    served_model_destroy(old); /* drains what it had queued */
    m->stamp = tree_stamp(m->dir, 3);
    served_opts_t so;
    uint64_t t0 = clock_now_ns();
    served_model_t *sm = NULL;
    family_param_t *params = NULL;
    int rc = prepare(r, m, &so, &params, err);
    if (!rc)
        rc = served_model_create(m->dir, &so, &sm, err);
    hark_free(params); /* served_model_create copied them */
    pthread_rwlock_wrlock(&r->lock);
    if (rc) {
        m->state = M_UNAVAILABLE;
        LOG_ERROR("model %s: %s", m->name, err->msg);
        redact(r, err->msg, sizeof err->msg); /* clients see paths within the repository */
        snprintf(m->reason, sizeof m->reason, "%s", err->msg);
    } else {
        m->served = sm;
        m->family = so.family;
        m->state = M_READY;
        m->reason[0] = 0;
        LOG_INFO("model %s version %s ready (family %s, %d instance groups, %.1f s)", m->name,
                 m->version_str, so.family->name, so.n_groups,
                 (double)(clock_now_ns() - t0) * 1e-9);
    }
    pthread_rwlock_unlock(&r->lock);
    return rc;
}

static void unload_model(repository_t *r, repo_model_t *m)
{
    pthread_rwlock_wrlock(&r->lock);
    served_model_t *old = m->served;
    m->served = NULL;
    m->family = NULL;
    if (m->state == M_READY)
        m->state = M_UNLOADING;
    pthread_rwlock_unlock(&r->lock);
    served_model_destroy(old);
    pthread_rwlock_wrlock(&r->lock);
    if (m->state == M_UNLOADING)
        m->state = M_UNAVAILABLE;
    snprintf(m->reason, sizeof m->reason, "unloaded");
    pthread_rwlock_unlock(&r->lock);
}

/* the entry of `name`, added when the directory has gained it since the scan (or brought back
 * when it had been removed); NULL when absent, with err set */
static repo_model_t *entry_for(repository_t *r, const char *name, hark_err_t *err)
{
    size_t nl = strlen(name);
    if (repository_name_valid(name, nl, err))
        return NULL;
    char cfg[4400];
    snprintf(cfg, sizeof cfg, "%s/%s/config.pbtxt", r->dir, name);
    int on_disk = access(cfg, R_OK) == 0;
    pthread_rwlock_wrlock(&r->lock);
    repo_model_t *m = find_entry(r, name, nl, 1);
    if (m && m->removed && on_disk) {
        m->removed = 0;
        m->reason[0] = 0;
    } else if (m && m->removed) {
        m = NULL;
    } else if (!m && on_disk && r->n_models < MAX_MODELS) {
        m = &r->models[r->n_models++];
        memset(m, 0, sizeof *m);
        snprintf(m->name, sizeof m->name, "%s", name);
        snprintf(m->dir, sizeof m->dir, "%s/%s", r->dir, name);
        snprintf(m->version_str, sizeof m->version_str, "1");
    }
    pthread_rwlock_unlock(&r->lock);
    if (!m) {
        LOG_INFO("model '%s': no %s", name, cfg); /* the path stays in the server's log */
        err_set(err, HARK_ERR_NOT_FOUND, "model '%s' not found in the model repository", name);
    }
    return m;
}

int repository_load(repository_t *r, const char *name, hark_err_t *err)
{
    repo_model_t *m = entry_for(r, name, err);
    if (!m)
        return err->status ? err->status : HARK_ERR_NOT_FOUND;
    int rc = load_model(r, m, err);
    if (rc)
        err_prefix(err, rc, "failed to load '%s'", name);
    return rc;
}

int repository_unload(repository_t *r, const char *name, hark_err_t *err)
{
    repo_model_t *m = entry_for(r, name, err);
    if (!m)
        return err->status ? err->status : HARK_ERR_NOT_FOUND;
    unload_model(r, m);
    return HARK_OK;
}

void repository_load_all(repository_t *r)
{
    hark_err_t err;
    for (int i = 0; i < r->n_models; i++) {
        memset(&err, 0, sizeof err);
        load_model(r, &r->models[i], &err);
    }
}

int repository_poll(repository_t *r)
{
    int n = 0;
    hark_err_t err;
    /* gone: unloaded, and out of the index (only this thread adds entries, so no lock to read) */
    for (int i = 0; i < r->n_models; i++) {
        repo_model_t *m = &r->models[i];
        char cfg[4400];
        snprintf(cfg, sizeof cfg, "%s/config.pbtxt", m->dir);
        if (m->removed || access(cfg, R_OK) == 0)
            continue;
        LOG_INFO("poll: model %s left the repository: unloading it", m->name);
        unload_model(r, m);
        pthread_rwlock_wrlock(&r->lock);
        m->removed = 1;
        m->reason[0] = 0;
        pthread_rwlock_unlock(&r->lock);
        n++;
    }
    DIR *d = opendir(r->dir);
    if (!d) {
        LOG_WARN("poll: cannot read the model repository %s: %s", r->dir, strerror(errno));
        return n;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t nl = strlen(e->d_name);
        memset(&err, 0, sizeof err);
        if (repository_name_valid(e->d_name, nl, &err))
            continue;
        char cfg[4400];
        snprintf(cfg, sizeof cfg, "%s/%s/config.pbtxt", r->dir, e->d_name);
        if (access(cfg, R_OK) != 0)
            continue;
        repo_model_t *m = find_name(r, e->d_name, nl);
        if (m &&
            (m->state == M_LOADING || m->state == M_UNLOADING || tree_stamp(m->dir, 3) == m->stamp))
            continue;
        LOG_INFO("poll: model %s %s", e->d_name,
                 m ? "changed: reloading it" : "is new: loading it");
        if (!m && !(m = entry_for(r, e->d_name, &err)))
            continue;
        memset(&err, 0, sizeof err);
        load_model(r, m, &err);
        n++;
    }
    closedir(d);
    return n;
}

void repository_hurry(repository_t *r)
{
    pthread_rwlock_rdlock(&r->lock);
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].served)
            served_model_hurry(r->models[i].served);
    pthread_rwlock_unlock(&r->lock);
}

void repository_unload_all(repository_t *r)
{
    for (int i = 0; i < r->n_models; i++)
        unload_model(r, &r->models[i]);
}

int repository_healthy(repository_t *r)
{
    pthread_rwlock_rdlock(&r->lock);
    int ok = 1;
    for (int i = 0; i < r->n_models; i++)
        if (r->models[i].state == M_READY && !served_model_ready(r->models[i].served))
            ok = 0;
    pthread_rwlock_unlock(&r->lock);
    return ok;
}

static int load_failed(const repo_model_t *m)
{
    return m->state == M_UNAVAILABLE && m->reason[0] && strcmp(m->reason, "unloaded");
}

int repository_all_ready(repository_t *r)
{
    pthread_rwlock_rdlock(&r->lock);
    int ok = 1;
    for (int i = 0; i < r->n_models; i++) {
        const repo_model_t *m = &r->models[i];
        if (m->state == M_LOADING || load_failed(m) ||
            (m->state == M_READY && !served_model_ready(m->served)))
            ok = 0;
    }
    pthread_rwlock_unlock(&r->lock);
    return ok;
}

int repository_failed(repository_t *r, char *name, size_t nname, char *why, size_t nwhy)
{
    pthread_rwlock_rdlock(&r->lock);
    int n = 0;
    for (int i = 0; i < r->n_models; i++)
        if (load_failed(&r->models[i]) && n++ == 0) {
            snprintf(name, nname, "%s", r->models[i].name);
            snprintf(why, nwhy, "%s", r->models[i].reason);
        }
    pthread_rwlock_unlock(&r->lock);
    return n;
}

int repository_create(const repository_opts_t *o, repository_t **out, hark_err_t *err)
{
    *out = NULL;
    DIR *d = opendir(o->dir);
    if (!d)
        return err_set(err, HARK_ERR_IO, "--model-repository %s: %s", o->dir, strerror(errno));
    repository_t *r = hark_calloc(1, sizeof *r);
    if (!r) {
        closedir(d);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    r->o = *o;
    snprintf(r->dir, sizeof r->dir, "%s", o->dir);
    for (size_t dl = strlen(r->dir); dl > 1 && r->dir[dl - 1] == '/';)
        r->dir[--dl] = 0; /* "repo/" and "repo" alike */
    r->o.dir = r->dir;
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&r->lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        /* every folder is a model: one without config.pbtxt is listed and fails to load, naming
         * the file (Triton's strict rule), instead of vanishing from the index */
        char sub[4400];
        snprintf(sub, sizeof sub, "%s/%s", r->dir, e->d_name);
        struct stat st;
        if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        hark_err_t why = {0};
        if (repository_name_valid(e->d_name, strlen(e->d_name), &why)) {
            LOG_WARN("model folder %s/%s left out: %s", r->dir, e->d_name, why.msg);
            continue;
        }
        if (r->n_models == MAX_MODELS) {
            LOG_WARN("model folder %s/%s left out: more than %d models", r->dir, e->d_name,
                     MAX_MODELS);
            continue;
        }
        repo_model_t *m = &r->models[r->n_models++];
        snprintf(m->name, sizeof m->name, "%s", e->d_name);
        snprintf(m->dir, sizeof m->dir, "%s/%s", r->dir, e->d_name);
        snprintf(m->version_str, sizeof m->version_str, "1");
    }
    closedir(d);
    *out = r;
    return HARK_OK;
}

void repository_destroy(repository_t *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_models; i++) {
        served_model_destroy(r->models[i].served);
        model_config_free(&r->models[i].cfg);
    }
    pthread_rwlock_destroy(&r->lock);
    hark_free(r);
}

/* ---- documents ------------------------------------------------------------------------ */

char *repository_index_json(repository_t *r, int ready_only)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < r->n_models; i++) {
        const repo_model_t *m = &r->models[i];
        if (m->removed || (ready_only && m->state != M_READY))
            continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", m->name);
        cJSON_AddStringToObject(e, "version", m->version_str);
        cJSON_AddStringToObject(e, "state", state_names[m->state]);
        cJSON_AddStringToObject(e, "reason", m->reason);
        cJSON_AddItemToArray(arr, e);
    }
    char *s = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    char *out = s ? hark_strdup(s) : NULL;
    free(s);
    return out;
}

char *repository_metadata_json(const repo_model_t *m)
{
    const model_config_t *c = &m->cfg;
    kserve_tensor_meta_t in[8], out[8];
    int ni = 0, no = 0;
    for (int i = 0; i < c->n_inputs && ni < 8; i++)
        in[ni++] = (kserve_tensor_meta_t){c->inputs[i].name,
                                          model_data_type_kserve(c->inputs[i].data_type),
                                          c->inputs[i].ndims, c->inputs[i].dims};
    for (int i = 0; i < c->n_outputs && no < 8; i++)
        out[no++] = (kserve_tensor_meta_t){c->outputs[i].name,
                                           model_data_type_kserve(c->outputs[i].data_type),
                                           c->outputs[i].ndims, c->outputs[i].dims};
    const char *versions[1] = {m->version_str};
    kserve_model_meta_t mm = {.name = m->name,
                              .versions = versions,
                              .n_versions = 1,
                              .platform = c->platform && c->platform[0] ? c->platform : "hark",
                              .max_batch_size = c->max_batch_size,
                              .inputs = in,
                              .outputs = out,
                              .n_inputs = ni,
                              .n_outputs = no};
    return kserve_model_metadata_json(&mm);
}

static void fill_stats(const repo_model_t *m, kserve_model_stats_t *k, served_stats_t *st)
{
    memset(k, 0, sizeof *k);
    memset(st, 0, sizeof *st);
    if (m->served)
        served_model_stats(m->served, st);
    k->name = m->name;
    k->version = m->version_str;
    k->last_inference = st->last_inference_ms;
    k->inference_count = st->inference_count;
    k->execution_count = st->execution_count;
    k->success = (kserve_duration_t){st->success, st->request_ns};
    k->fail = (kserve_duration_t){st->failure, 0};
    k->queue = (kserve_duration_t){st->success + st->failure, st->queue_ns};
    k->compute_input = (kserve_duration_t){st->success, st->compute_input_ns};
    k->compute_infer = (kserve_duration_t){st->success, st->compute_infer_ns};
    k->compute_output = (kserve_duration_t){st->success, st->compute_output_ns};
}

/* st's batch sizes as Triton's batch_stats (count: executions of that size), ascending; into
 * out (SERVED_BATCH_STATS) */
static int fill_batch_stats(const served_stats_t *st, kserve_batch_stats_t *out)
{
    int n = 0;
    for (int i = 0; i < st->n_batch_stats; i++) {
        const served_batch_stat_t *b = &st->batch_stats[i];
        int at = n++;
        while (at > 0 && out[at - 1].batch_size > (uint64_t)b->batch_size) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = (kserve_batch_stats_t){.batch_size = (uint64_t)b->batch_size,
                                         .compute_input = {b->count, b->input_ns},
                                         .compute_infer = {b->count, b->infer_ns},
                                         .compute_output = {b->count, b->output_ns}};
    }
    return n;
}

char *repository_stats_json(repository_t *r, const repo_model_t *m)
{
    static __thread kserve_model_stats_t ks[MAX_MODELS];
    served_stats_t st;
    int n = 0, cap = m ? 1 : r->n_models;
    kserve_batch_stats_t *bs =
        hark_calloc((size_t)(cap ? cap : 1) * SERVED_BATCH_STATS, sizeof *bs);
    if (!bs)
        return NULL;
    for (int i = 0; i < cap; i++) {
        const repo_model_t *x = m ? m : &r->models[i];
        if (!m && x->state != M_READY)
            continue;
        fill_stats(x, &ks[n], &st);
        ks[n].batch_stats = bs + (size_t)n * SERVED_BATCH_STATS;
        ks[n].n_batch_stats = fill_batch_stats(&st, bs + (size_t)n * SERVED_BATCH_STATS);
        n++;
    }
    char *json = kserve_stats_json(ks, n);
    hark_free(bs);
    return json;
}

int repository_metrics(repository_t *r, metrics_model_t *out, int max)
{
    int n = 0;
    for (int i = 0; i < r->n_models && n < max; i++)
        if (r->models[i].state == M_READY) {
            out[n].name = r->models[i].name;
            out[n].version = r->models[i].version_str;
            served_model_stats(r->models[i].served, &out[n].stats);
            n++;
        }
    return n;
}
