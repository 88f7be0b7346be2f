/* silero_family.c — Silero VAD as a model family (family.h): "silero_vad", task VAD on the CPU.
 * An execute steps all its items' audio together (silero_vad_probs, one batch) at the model's
 * first rate (16 kHz), then reports each item's speech segments as FAMILY_EV_SEGMENT events
 * (seconds) and a DONE. Options (config.pbtxt parameters, then the request's), silero-vad's
 * get_speech_timestamps parameters: threshold, neg_threshold, min_speech_duration_ms,
 * max_speech_duration_s, min_silence_duration_ms, speech_pad_ms. They only shape the segments,
 * so every item may share a batch. GPU loads are refused for now.
 * Tests: tests/model/silero/test_silero_family.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct family_model {
    silero_vad_t *vad;
    int rate; /* the rate items arrive at (info.sample_rate) */
    char kind[160];
};

struct family_worker {
    const family_model_t *fm;
    int max_batch;
};

static int sv_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    if (l.device >= 0)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "silero_vad: not yet on GPU (the CPU path only for now): use "
                       "instance_group kind KIND_CPU, or --device cpu");
    const char *prec = l.precision ? l.precision : family_param(cfg, "precision");
    if (prec && strcmp(prec, "fp32"))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "silero_vad: precision \"%s\": the CPU path is fp32", prec);
    family_model_t *fm = hark_calloc(1, sizeof *fm);
    if (!fm)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int rc = silero_vad_load(dir, l.version, &fm->vad, err);
    if (rc) {
        hark_free(fm);
        return rc;
    }
    int rates[4], n = silero_vad_rates(fm->vad, rates);
    fm->rate = rates[0];
    int off = snprintf(fm->kind, sizeof fm->kind, "silero vad (");
    for (int i = 0; i < n && off < (int)sizeof fm->kind; i++)
        off += snprintf(fm->kind + off, sizeof fm->kind - (size_t)off, "%s%d", i ? ", " : "",
                        rates[i]);
    if (off < (int)sizeof fm->kind)
        snprintf(fm->kind + off, sizeof fm->kind - (size_t)off, " Hz), fp32");
    *out = fm;
    return HARK_OK;
}

static void sv_unload(family_model_t *fm)
{
    if (!fm)
        return;
    silero_vad_destroy(fm->vad);
    hark_free(fm);
}

static void sv_info(const family_model_t *fm, family_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->sample_rate = fm->rate;
    out->frame_ms = silero_vad_rate(fm->vad, fm->rate)->window * 1000 / fm->rate;
    out->device = -1;
    out->kind = fm->kind;
}

static int get_ms(const family_params_t *p, const char *key, int *out, hark_err_t *err)
{
    int rc = family_param_int(p, key, 0, 10000000, out, err);
    return rc == HARK_ERR_NOT_FOUND ? HARK_OK : rc;
}

static int get_prob(const family_params_t *p, const char *key, double *out, hark_err_t *err)
{
    double v;
    int rc = family_param_double(p, key, &v, err);
    if (rc == HARK_ERR_NOT_FOUND)
        return HARK_OK;
    if (rc)
        return rc;
    if (!(v >= 0.0 && v <= 1.0))
        return err_set(err, HARK_ERR_INVALID_ARG, "%s %g: must be in [0, 1]", key, v);
    *out = v;
    return HARK_OK;
}

static int opts_from(const family_params_t *p, silero_seg_opts_t *o, hark_err_t *err)
{
    int rc;
    double v;
    if ((rc = get_prob(p, "threshold", &o->threshold, err)) ||
        (rc = get_prob(p, "neg_threshold", &o->neg_threshold, err)) ||
        (rc = get_ms(p, "min_speech_duration_ms", &o->min_speech_duration_ms, err)) ||
        (rc = get_ms(p, "min_silence_duration_ms", &o->min_silence_duration_ms, err)) ||
        (rc = get_ms(p, "speech_pad_ms", &o->speech_pad_ms, err)))
        return rc;
    rc = family_param_double(p, "max_speech_duration_s", &v, err);
    if (rc == HARK_OK) {
        if (!(v > 0.0))
            return err_set(err, HARK_ERR_INVALID_ARG, "max_speech_duration_s %g: must be > 0", v);
        o->max_speech_duration_s = v;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return rc;
    }
    return HARK_OK;
}

static int sv_parse_opts(const family_model_t *m, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    silero_seg_opts_t *o = opts;
    silero_seg_default_opts(o);
    int rc = opts_from(cfg, o, err);
    return rc ? rc : opts_from(req, o, err);
}

static uint64_t sv_batch_key(const void *opts)
{
    return 0; /* the options shape the segments only: any mix shares the network's batch */
}

static int sv_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                            family_worker_t **out, hark_err_t *err)
{
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->fm = m;
    w->max_batch = wo && wo->max_batch > 0 ? wo->max_batch : 0;
    if (wo && wo->n_threads > 0)
        ops_set_threads(wo->n_threads);
    *out = w;
    return HARK_OK;
}

static void sv_worker_destroy(family_worker_t *w)
{
    hark_free(w);
}

static int sv_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    uint64_t t0 = clock_now_ns();
    const family_model_t *fm = w->fm;
    const silero_rate_t *r = silero_vad_rate(fm->vad, fm->rate);
    const float **pcm = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *pcm);
    size_t *ns = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *ns);
    float **probs = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *probs);
    int rc = pcm && ns && probs ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int i = 0; rc == HARK_OK && i < n; i++) {
        pcm[i] = items[i]->pcm;
        ns[i] = items[i]->pcm ? items[i]->n : 0;
        probs[i] = hark_malloc((silero_vad_n_windows(r, ns[i]) + 1) * sizeof(float));
        if (!probs[i])
            rc = err_set(err, HARK_ERR_NOMEM, "silero_vad: out of memory for %zu samples", ns[i]);
    }
    if (rc == HARK_OK)
        rc = silero_vad_probs(fm->vad, fm->rate, pcm, ns, n, w->max_batch, probs, err);
    uint64_t t1 = clock_now_ns();
    int n_failed = 0, last_rc = rc;
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        hark_err_t ierr = {0};
        int irc = rc;
        if (irc)
            ierr = *err;
        silero_segment_t *segs = NULL;
        size_t n_segs = 0;
        silero_seg_opts_t dflt;
        const silero_seg_opts_t *o = it->opts;
        if (!o) {
            silero_seg_default_opts(&dflt);
            o = &dflt;
        }
        if (!irc)
            irc = silero_segments(probs[i], silero_vad_n_windows(r, ns[i]), ns[i], fm->rate,
                                  r->window, o, &segs, &n_segs, &ierr);
        for (size_t k = 0; !irc && k < n_segs; k++) {
            family_event_t ev = {.kind = FAMILY_EV_SEGMENT,
                                 .sample_rate = fm->rate,
                                 .seg_start_s = (double)segs[k].start / fm->rate,
                                 .seg_end_s = (double)segs[k].end / fm->rate};
            it->emit(it, &ev);
        }
        free(segs);
        if (irc) {
            n_failed++;
            last_rc = irc;
        }
        family_event_t done = {.kind = FAMILY_EV_DONE,
                               .status = irc,
                               .error = irc ? ierr.msg : NULL,
                               .sample_rate = fm->rate};
        it->emit(it, &done);
    }
    for (int i = 0; probs && i < n; i++)
        hark_free(probs[i]);
    hark_free(pcm);
    hark_free(ns);
    hark_free(probs);
    if (times)
        *times = (family_exec_times_t){0, t1 - t0, clock_now_ns() - t1};
    if (n_failed == n && n > 0) {
        if (rc == HARK_OK)
            err_set(err, last_rc, "silero_vad: all %d items failed", n);
        return last_rc;
    }
    return HARK_OK;
}

/* `hark inspect MODEL_DIR`: the networks of each rate and the file's size */
static int sv_inspect(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *o = argc == 2 ? stdout : stderr;
        fprintf(o, "usage: hark inspect MODEL_DIR\n\nPrints a converted Silero VAD's networks "
                   "(one per sample rate), parameter counts and file size.\n");
        return argc == 2 ? 0 : 2;
    }
    silero_vad_t *m = NULL;
    hark_err_t err = {0};
    if (silero_vad_load(argv[1], 1, &m, &err)) {
        fprintf(stderr, "hark inspect: %s\n", err.msg);
        return 1;
    }
    char path[4200];
    struct stat sb;
    family_version_path(argv[1], 0, "model.safetensors", path, sizeof path);
    printf("model                %s\n", argv[1]);
    printf("family               silero_vad (Silero VAD v5/v6, CPU fp32)\n");
    int rates[4], nr = silero_vad_rates(m, rates);
    unsigned long long total = 0;
    for (int i = 0; i < nr; i++) {
        const silero_rate_t *r = silero_vad_rate(m, rates[i]);
        unsigned long long n = (unsigned long long)2 * r->n_bins * r->n_fft;
        printf("%d Hz: window        %d samples (%g ms) after %d of context\n", r->sample_rate,
               r->window, 1000.0 * r->window / r->sample_rate, r->context);
        printf("%d Hz: stft          n_fft %d, hop %d, right reflect pad %d: %d frames x %d "
               "bins\n",
               r->sample_rate, r->n_fft, r->hop, r->pad, r->frames, r->n_bins);
        printf("%d Hz: encoder       ", r->sample_rate);
        for (int k = 0; k < SILERO_N_CONV; k++) {
            printf("%s%d->%d/s%d", k ? ", " : "", r->cin[k], r->cout[k], r->stride[k]);
            n += (unsigned long long)r->cout[k] * (3ull * r->cin[k] + 1);
        }
        n +=
            2ull * 4 * SILERO_HIDDEN * SILERO_HIDDEN + 2ull * 4 * SILERO_HIDDEN + SILERO_HIDDEN + 1;
        printf(" (k3, ReLU)\n%d Hz: decoder       LSTM cell %d, ReLU, 1x1 conv, sigmoid\n",
               r->sample_rate, SILERO_HIDDEN);
        printf("%d Hz: parameters    %llu\n", r->sample_rate, n);
        total += n;
    }
    printf("parameters           %llu\n", total);
    if (stat(path, &sb) == 0)
        printf("file                 %s (%.2f MB)\n", path, (double)sb.st_size / 1e6);
    silero_vad_destroy(m);
    return 0;
}

const family_t silero_vad_family = {
    .name = "silero_vad",
    .task = FAMILY_TASK_VAD,
    .streaming = 0,
    .opts_size = sizeof(silero_seg_opts_t),
    .load = sv_load,
    .unload = sv_unload,
    .info = sv_info,
    .parse_opts = sv_parse_opts,
    .batch_key = sv_batch_key,
    .worker_create = sv_worker_create,
    .worker_destroy = sv_worker_destroy,
    .stream_open = NULL,
    .stream_close = NULL,
    .execute = sv_execute,
    .bench = NULL,
    .inspect = sv_inspect,
    .bench_synthetic = NULL,
    .io = NULL,
};
