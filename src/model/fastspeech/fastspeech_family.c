/* fastspeech_family.c — DLE FastSpeech + a HiFi-GAN vocoder as a model family (family.h):
 * "fastspeech", task TTS on the CPU: item->text -> text/tts_text ids -> fastspeech.h mel ->
 * hifigan.h audio, reported as one AUDIO event then DONE. The vocoder is the model directory
 * config.pbtxt names in parameters { key: "vocoder" } (absolute, or relative to the model
 * repository: the model directory's parent). Options (config.pbtxt parameters, then the
 * request's): alpha (DLE's duration scale) or speed (1 / alpha).
 * The vocoder streams: audio leaves in chunks of config.pbtxt's vocoder_chunk_frames mel frames
 * (default 64; the first chunk half that; 0: the whole utterance at once), each vocoded with
 * hifigan_context_frames of context on each side so the seams equal one-shot output.
 * On a GPU (load device >= 0, instance_group KIND_GPU; precision fp32 / fp16 / bf16 from the load
 * options, else config.pbtxt's `parameters precision`): both models are uploaded
 * (fastspeech_gpu.h, hifigan_gpu.h) and an execute runs its items as one batch: the mels of all
 * sentences at once, then the vocoder over the batch one chunk window at a time (each item's
 * window as the CPU path cuts it; the mel never leaves the device). dump_dir needs a CPU model.
 * Tests: tests/model/fastspeech/test_fastspeech_family.c, test_fastspeech_gpu.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "model/fastspeech/fastspeech_gpu.h"
#include "model/fastspeech/fastspeech_tools.h"
#include "model/hifigan/hifigan.h"
#include "model/hifigan/hifigan_gpu.h"
#include "text/tts_text.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    float alpha;
} fs_opts_t;

struct family_model {
    fastspeech_model_t *fs;
    hifigan_model_t *voc;
    fastspeech_gpu_model_t *gfs; /* GPU: both, else NULL */
    hifigan_gpu_model_t *gvoc;
    int device;       /* -1: CPU */
    int chunk_frames; /* the vocoder streams chunks of this many mel frames (0: whole) */
    char kind[200];
};

struct family_worker {
    const family_model_t *fm;
    fastspeech_gpu_worker_t *gfs; /* GPU */
    hifigan_gpu_worker_t *gvoc;
    int max_batch, voc_frames;
    float *audio; /* host (max_batch, hifigan_samples(voc_frames)) */
};

#define DEFAULT_CHUNK_FRAMES 64 /* 0.74 s of 22.05 kHz audio; the first chunk half that */

static void ff_unload(family_model_t *fm);

static int ff_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    ops_dtype_t dt = OPS_F32;
    const char *cname = family_param(cfg, "precision");
    if (cname && family_precision(cname, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fastspeech: parameters precision \"%s\": expected fp32, fp16 or bf16",
                       cname);
    const char *prec = l.precision ? l.precision : l.device >= 0 ? cname : NULL;
    dt = OPS_F32;
    if (prec && family_precision(prec, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fastspeech: precision \"%s\": expected fp32, fp16 or bf16", prec);
    if (l.device < 0 && dt != OPS_F32)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "fastspeech: precision \"%s\": the CPU path is fp32", prec);
    char vdir[4200];
    int vrc = family_tts_vocoder_path("fastspeech", dir, cfg, vdir, sizeof vdir, err);
    if (vrc)
        return vrc;
    const char *v = family_param(cfg, "vocoder");
    family_model_t *fm = hark_calloc(1, sizeof *fm);
    if (!fm)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    fm->device = l.device < 0 ? -1 : l.device;
    int rc = fastspeech_load(dir, l.version, &fm->fs, err);
    if (!rc && (rc = hifigan_load(vdir, 1, &fm->voc, err)))
        err_prefix(err, rc, "fastspeech: vocoder \"%s\": ", v);
    if (!rc && fastspeech_config(fm->fs)->n_mels != hifigan_config(fm->voc)->num_mels)
        rc = err_set(err, HARK_ERR_FORMAT,
                     "fastspeech: the model makes %d mel bins, its vocoder %s reads %d",
                     fastspeech_config(fm->fs)->n_mels, vdir, hifigan_config(fm->voc)->num_mels);
    if (!rc && fm->device >= 0 &&
        !(rc = fastspeech_gpu_model_create(fm->fs, fm->device, dt, &fm->gfs, err)))
        rc = hifigan_gpu_model_create(fm->voc, fm->device, dt, &fm->gvoc, err);
    if (rc) {
        ff_unload(fm);
        return rc;
    }
    fm->chunk_frames = DEFAULT_CHUNK_FRAMES;
    rc = family_param_int(cfg, "vocoder_chunk_frames", 0, 100000, &fm->chunk_frames, err);
    if (rc && rc != HARK_ERR_NOT_FOUND) {
        ff_unload(fm);
        return rc;
    }
    if (fm->chunk_frames == 1)
        fm->chunk_frames = 2; /* the first chunk is half of one */
    const fastspeech_config_t *c = fastspeech_config(fm->fs);
    snprintf(fm->kind, sizeof fm->kind,
             "fastspeech d_model %d, %d+%d FFT blocks + hifi-gan V%s, %s%s", c->d_model,
             c->enc_layers, c->dec_layers, hifigan_config(fm->voc)->resblock == 1 ? "1/V2" : "3",
             dt == OPS_F16    ? "fp16"
             : dt == OPS_BF16 ? "bf16"
                              : "fp32",
             fm->device >= 0 ? " (gpu)" : "");
    *out = fm;
    return HARK_OK;
}

static void ff_unload(family_model_t *fm)
{
    if (!fm)
        return;
    hifigan_gpu_model_destroy(fm->gvoc);
    fastspeech_gpu_model_destroy(fm->gfs);
    hifigan_destroy(fm->voc);
    fastspeech_destroy(fm->fs);
    hark_free(fm);
}

static void ff_info(const family_model_t *fm, family_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->sample_rate = hifigan_config(fm->voc)->sample_rate;
    out->device = fm->device;
    out->kind = fm->kind;
}

static int opts_from(const family_params_t *p, fs_opts_t *o, hark_err_t *err)
{
    double v;
    int rc = family_param_double(p, "alpha", &v, err);
    if (rc == HARK_OK) {
        if (!(v > 0.05 && v <= 20))
            return err_set(err, HARK_ERR_INVALID_ARG, "alpha %g: must be in (0.05, 20]", v);
        o->alpha = (float)v;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return rc;
    }
    rc = family_param_double(p, "speed", &v, err);
    if (rc == HARK_OK) {
        if (!(v >= 0.05 && v < 20))
            return err_set(err, HARK_ERR_INVALID_ARG, "speed %g: must be in [0.05, 20)", v);
        o->alpha = (float)(1.0 / v);
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return rc;
    }
    return HARK_OK;
}

static int ff_parse_opts(const family_model_t *m, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    fs_opts_t *o = opts;
    o->alpha = 1.0f;
    int rc = opts_from(cfg, o, err);
    return rc ? rc : opts_from(req, o, err);
}

static uint64_t ff_batch_key(const void *opts)
{
    return 0; /* items run one by one: any mix fits one execute */
}

static void ff_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    hifigan_gpu_worker_destroy(w->gvoc);
    fastspeech_gpu_worker_destroy(w->gfs);
    hark_free(w->audio);
    hark_free(w);
}

static int ff_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                            family_worker_t **out, hark_err_t *err)
{
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->fm = m;
    if (m->gfs) {
        /* the mel side up to max_seconds of audio (or max_seq_len frames); the vocoder one chunk
         * window (or the whole mel when it does not chunk) */
        const fastspeech_config_t *c = fastspeech_config(m->fs);
        int hop = (int)hifigan_samples(m->voc, 1), sr = hifigan_config(m->voc)->sample_rate;
        int frames = c->max_seq_len;
        if (wo && wo->max_seconds > 0 && wo->max_seconds * sr / hop < frames)
            frames = (int)(wo->max_seconds * sr / hop) + 1;
        int ctx = hifigan_context_frames(m->voc), ch = m->chunk_frames;
        w->max_batch = wo && wo->max_batch > 0 ? wo->max_batch : 1;
        w->voc_frames = ch && ch + 2 * ctx < frames ? ch + 2 * ctx : frames;
        int rc = fastspeech_gpu_worker_create(m->gfs, w->max_batch, c->max_seq_len, frames, &w->gfs,
                                              err);
        if (!rc)
            rc = hifigan_gpu_worker_create(m->gvoc, w->max_batch, w->voc_frames, &w->gvoc, err);
        if (!rc && !(w->audio = hark_malloc(sizeof(float) * (size_t)w->max_batch *
                                            hifigan_samples(m->voc, w->voc_frames))))
            rc = err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory");
        if (rc) {
            ff_worker_destroy(w);
            return rc;
        }
    }
    *out = w;
    return HARK_OK;
}

/* frames [a, b) of mt (nm, nf) vocoded with `ctx` frames of context on each side: the samples
 * of [a, b) exactly as the whole utterance gives them (hifigan_context_frames), emitted */
static int vocode_span(const family_model_t *fm, family_item_t *it, const float *mt, int nm, int nf,
                       int a, int b, int ctx, hark_err_t *err)
{
    int lo = a - ctx > 0 ? a - ctx : 0, hi = b + ctx < nf ? b + ctx : nf, w = hi - lo;
    size_t hop = hifigan_samples(fm->voc, 1), ns = hifigan_samples(fm->voc, w);
    float *sub = hark_malloc(sizeof(float) * (size_t)nm * w),
          *out = hark_malloc(sizeof(float) * ns);
    int rc = sub && out ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory");
    if (!rc) {
        for (int r = 0; r < nm; r++)
            memcpy(sub + (size_t)r * w, mt + (size_t)r * nf + lo, sizeof(float) * (size_t)w);
        rc = hifigan_forward(fm->voc, sub, w, out, NULL, NULL, err);
    }
    if (!rc) {
        family_event_t ev = {.kind = FAMILY_EV_AUDIO,
                             .pcm = out + (size_t)(a - lo) * hop,
                             .n = (size_t)(b - a) * hop,
                             .sample_rate = hifigan_config(fm->voc)->sample_rate};
        it->emit(it, &ev);
    }
    hark_free(sub);
    hark_free(out);
    return rc;
}

/* one item: text -> audio, emitted as AUDIO events: the whole utterance at once (chunk_frames 0,
 * or a dump), else a first chunk of chunk_frames / 2 mel frames and then chunk_frames each */
static int synth_one(const family_model_t *fm, family_item_t *it, hark_err_t *err)
{
    const fs_opts_t *o = it->opts;
    tts_text_t tt;
    if (!it->text)
        return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech: the request has no text");
    int rc = tts_text_to_ids(it->text, &tt, err);
    if (rc)
        return rc;
    family_dump_t d = {it->dump_dir, "", 0};
    if (it->dump_dir) {
        mkdir(it->dump_dir, 0755);
        char path[4200];
        snprintf(path, sizeof path, "%s/ids.npy", it->dump_dir);
        int64_t shape[1] = {tt.n};
        npy_save(path, NPY_I32, tt.ids, 1, shape);
    }
    fastspeech_opts_t fo = {o ? o->alpha : 1.0f, 0, 0, it->dump_dir ? family_dump_f32 : NULL, &d};
    float *mel = NULL, *mt = NULL;
    int nf = 0;
    rc = fastspeech_forward(fm->fs, tt.ids, tt.n, &fo, &mel, &nf, err);
    tts_text_free(&tt);
    if (rc)
        return rc;
    int nm = fastspeech_config(fm->fs)->n_mels;
    mt = hark_malloc(sizeof(float) * (size_t)nf * nm);
    if (!mt) {
        hark_free(mel);
        return err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory for %d frames", nf);
    }
    for (int t = 0; t < nf; t++)
        for (int b = 0; b < nm; b++)
            mt[(size_t)b * nf + t] = mel[(size_t)t * nm + b];
    hark_free(mel);
    int chunk = fm->chunk_frames;
    if (!chunk || it->dump_dir || nf <= chunk) {
        size_t ns = hifigan_samples(fm->voc, nf);
        float *out = hark_malloc(sizeof(float) * ns);
        family_dump_t dv = {it->dump_dir, "vocoder_", 0};
        rc = out ? hifigan_forward(fm->voc, mt, nf, out, it->dump_dir ? family_dump_f32 : NULL, &dv,
                                   err)
                 : err_set(err, HARK_ERR_NOMEM, "fastspeech: out of memory for %d frames", nf);
        if (!rc) {
            family_event_t ev = {.kind = FAMILY_EV_AUDIO,
                                 .pcm = out,
                                 .n = ns,
                                 .sample_rate = hifigan_config(fm->voc)->sample_rate};
            it->emit(it, &ev);
        }
        hark_free(out);
    } else {
        int ctx = hifigan_context_frames(fm->voc);
        for (int a = 0, b; a < nf && !rc; a = b) {
            b = a + (a ? chunk : chunk / 2);
            b = b > nf ? nf : b;
            rc = vocode_span(fm, it, mt, nm, nf, a, b, ctx, err);
        }
    }
    hark_free(mt);
    return rc;
}

/* ---- the GPU path: one batch of items -------------------------------------------------------- */

static void done_event(family_item_t *it, int rc, const char *msg, int rate)
{
    family_event_t done = {
        .kind = FAMILY_EV_DONE, .status = rc, .error = rc ? msg : NULL, .sample_rate = rate};
    it->emit(it, &done);
}

/* items[0..n) (n <= max_batch): the texts' ids, the mels of all at once, then the vocoder over
 * the batch one window at a time: chunk c covers frames [a, b) of every item that has them, read
 * with ctx frames of context each side (cut at the item's own end, as vocode_span cuts it) */
static int execute_gpu(family_worker_t *w, family_item_t *const *items, int n, int *n_failed,
                       int *last_rc, hark_err_t *err)
{
    const family_model_t *fm = w->fm;
    int rate = hifigan_config(fm->voc)->sample_rate;
    size_t hop = hifigan_samples(fm->voc, 1);
    tts_text_t tt[CUDA_MAX_LENS];
    const int *ids[CUDA_MAX_LENS];
    int lens[CUDA_MAX_LENS], nf[CUDA_MAX_LENS], wl[CUDA_MAX_LENS], idx[CUDA_MAX_LENS], nb = 0;
    float alpha[CUDA_MAX_LENS];
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        const fs_opts_t *o = it->opts;
        hark_err_t ie = {0};
        int rc = !it->text
                     ? err_set(&ie, HARK_ERR_INVALID_ARG, "fastspeech: the request has no text")
                 : it->dump_dir
                     ? err_set(&ie, HARK_ERR_UNSUPPORTED,
                               "fastspeech: dump_dir needs a CPU model (the GPU path keeps its "
                               "stages on the device)")
                     : tts_text_to_ids(it->text, &tt[nb], &ie);
        if (rc) {
            (*n_failed)++;
            *last_rc = rc;
            if (n == 1)
                *err = ie;
            done_event(it, rc, ie.msg, rate);
            continue;
        }
        ids[nb] = tt[nb].ids;
        lens[nb] = tt[nb].n;
        alpha[nb] = o ? o->alpha : 1.0f;
        idx[nb++] = i;
    }
    if (!nb)
        return HARK_OK;
    hark_err_t be = {0};
    int T = 0;
    const float *d_mel = NULL;
    fastspeech_gpu_opts_t go = {alpha, NULL, NULL};
    int rc = fastspeech_gpu_run(w->gfs, ids, lens, nb, &go, nf, &T, &d_mel, &be);
    int chunk = fm->chunk_frames, ctx = hifigan_context_frames(fm->voc);
    if (!chunk || T <= chunk)
        chunk = T; /* one window (the CPU path's rule: no chunks for a mel within one) */
    for (int a = 0, b; a < T && !rc; a = b) {
        b = a + (a || chunk == T ? chunk : chunk / 2);
        b = b > T ? T : b;
        int lo = chunk == T ? 0 : (a - ctx > 0 ? a - ctx : 0);
        int hi = chunk == T ? T : (b + ctx < T ? b + ctx : T), wlen = hi - lo;
        if (wlen > w->voc_frames) {
            rc = err_set(&be, HARK_ERR_TOO_LARGE,
                         "fastspeech: %d mel frames at once, the vocoder worker takes %d", wlen,
                         w->voc_frames);
            break;
        }
        for (int k = 0; k < nb; k++)
            wl[k] = nf[k] - lo < 0 ? 0 : nf[k] - lo > wlen ? wlen : nf[k] - lo;
        const float *d_audio = NULL;
        rc = hifigan_gpu_run_device(w->gvoc, d_mel, T, lo, wlen, wl, nb, &d_audio, &be);
        if (!rc)
            rc = hifigan_gpu_audio_to_host(w->gvoc, nb, wlen, w->audio, &be);
        size_t row = hifigan_samples(fm->voc, wlen);
        for (int k = 0; k < nb && !rc; k++) {
            int e_ = b < nf[k] ? b : nf[k];
            if (a >= e_)
                continue;
            family_event_t ev = {.kind = FAMILY_EV_AUDIO,
                                 .pcm = w->audio + (size_t)k * row + (size_t)(a - lo) * hop,
                                 .n = (size_t)(e_ - a) * hop,
                                 .sample_rate = rate};
            items[idx[k]]->emit(items[idx[k]], &ev);
        }
    }
    for (int k = 0; k < nb; k++) {
        tts_text_free(&tt[k]);
        if (rc) {
            (*n_failed)++;
            *last_rc = rc;
        }
        done_event(items[idx[k]], rc, be.msg, rate);
    }
    if (rc && (n == 1 || rc == HARK_ERR_CUDA))
        *err = be;
    return rc == HARK_ERR_CUDA ? rc : HARK_OK;
}

static int ff_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    uint64_t t0 = clock_now_ns();
    int rate = hifigan_config(w->fm->voc)->sample_rate, n_failed = 0, last_rc = HARK_OK;
    if (w->gfs) {
        for (int i = 0; i < n; i += w->max_batch) {
            int k = n - i < w->max_batch ? n - i : w->max_batch;
            int rc = execute_gpu(w, items + i, k, &n_failed, &last_rc, err);
            if (rc == HARK_ERR_CUDA) { /* a sticky device error: the rest fail too */
                for (int j = i + k; j < n; j++) {
                    n_failed++;
                    done_event(items[j], rc, err->msg, rate);
                }
                break;
            }
        }
    } else {
        for (int i = 0; i < n; i++) {
            family_item_t *it = items[i];
            hark_err_t ierr = {0};
            int rc = synth_one(w->fm, it, &ierr);
            if (rc) {
                n_failed++;
                last_rc = rc;
                if (n == 1)
                    *err = ierr;
            }
            done_event(it, rc, ierr.msg, rate);
        }
    }
    if (times)
        *times = (family_exec_times_t){0, clock_now_ns() - t0, 0};
    if (n_failed == n && n > 0) {
        if (n > 1)
            err_set(err, last_rc, "fastspeech: all %d items failed", n);
        return last_rc;
    }
    return HARK_OK;
}

const family_t fastspeech_family = {
    .name = "fastspeech",
    .task = FAMILY_TASK_TTS,
    .streaming = 0,
    .opts_size = sizeof(fs_opts_t),
    .load = ff_load,
    .unload = ff_unload,
    .info = ff_info,
    .parse_opts = ff_parse_opts,
    .batch_key = ff_batch_key,
    .worker_create = ff_worker_create,
    .worker_destroy = ff_worker_destroy,
    .stream_open = NULL,
    .stream_close = NULL,
    .execute = ff_execute,
    .bench = fastspeech_bench_main,
    .inspect = NULL,
    .bench_synthetic = NULL,
    .io = NULL,
};
