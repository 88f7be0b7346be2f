/* tacotron2_family.c — DLE Tacotron 2 + WaveGlow (+ denoiser) as a model family (family.h):
 * "tacotron2", task TTS on the CPU: the items of one execute are decoded as one batch
 * (tacotron2_infer: every row stops on its own gate), then each row's mel goes through WaveGlow,
 * the denoiser, DLE's mel_lengths cut and peak normalisation, reported as one AUDIO event then
 * DONE. The vocoder is the WaveGlow directory config.pbtxt names in parameters { key: "vocoder" }
 * (absolute, or relative to the model repository). Options (config.pbtxt parameters, then the
 * request's): seed (the prenet dropout and WaveGlow noise; default 0), sigma, denoiser_strength
 * or use_denoiser (DLE's Triton parameter: false = strength 0), max_decoder_steps; speed must
 * be 1 (Tacotron 2 has no duration control).
 * Streaming: with config.pbtxt's vocoder_chunk_frames N > 0 (default 0: the whole mel at once),
 * WaveGlow runs on windows of the mel — a first chunk of N / 2 frames, then N each — with
 * vocoder_context_frames of context on each side (default the vocoder's receptive field, so that
 * at sigma 0 the chunks join into the whole utterance's audio), and each chunk leaves as its own
 * AUDIO event as soon as it is made. Each window draws its own noise; streamed audio is not
 * peak-normalised (its peak is not known until the end).
 * On a GPU (load device >= 0, instance_group KIND_GPU; precision fp32 / fp16 from the load or
 * config.pbtxt's parameters { key: "precision" }, fp32 by default) both models run on the device
 * (tacotron2_gpu.h, waveglow_gpu.h): an execute decodes its items as one batch, the mel stays on
 * the device for WaveGlow, the denoiser runs there too; the cut and the normalisation as on the
 * CPU. The worker is sized at creation (max_batch; max_decoder_steps frames; GPU_MAX_IDS symbols:
 * a longer text fails alone).
 * Tests: tests/model/tacotron2/test_tacotron2_family.c, test_tacotron2_gpu.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/tacotron2/tacotron2.h"
#include "model/tacotron2/tacotron2_gpu.h"
#include "model/tacotron2/tacotron2_tools.h"
#include "model/waveglow/waveglow.h"
#include "model/waveglow/waveglow_gpu.h"
#include "text/tts_text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    long long seed;
    float sigma;    /* < 0: the vocoder's */
    float strength; /* < 0: the vocoder's */
    int max_steps;  /* 0: the model's */
} t2_opts_t;

#define GPU_MAX_IDS 1024        /* symbols of one text on the GPU */
#define WG_SEED 0x5741564547ull /* WaveGlow's noise: the row's seed ^ this */

struct family_model {
    tacotron2_model_t *t2;
    waveglow_model_t *wg;
    int device; /* -1: CPU */
    ops_dtype_t dt;
    tacotron2_gpu_model_t *gt; /* GPU: both, else NULL */
    waveglow_gpu_model_t *gv;
    int chunk_frames; /* the vocoder streams chunks of this many mel frames (0: whole) */
    int ctx_frames;   /* context on each side of a chunk's window */
    char kind[160];
};

struct family_worker {
    const family_model_t *fm;
    tacotron2_gpu_worker_t *tw; /* GPU */
    waveglow_gpu_worker_t *vw;
    int max_batch;
    float **audio; /* (max_batch) host rows of the vocoder's longest output */
};

static void tf_unload(family_model_t *fm)
{
    if (!fm)
        return;
    waveglow_gpu_model_destroy(fm->gv);
    tacotron2_gpu_model_destroy(fm->gt);
    waveglow_destroy(fm->wg);
    tacotron2_destroy(fm->t2);
    hark_free(fm);
}

static int tf_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    const char *cname = family_param(cfg, "precision");
    const char *prec = l.precision ? l.precision : cname;
    ops_dtype_t dt = OPS_F32;
    if (prec && !strcmp(prec, "fp16"))
        dt = OPS_F16;
    else if (prec && strcmp(prec, "fp32"))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "tacotron2: precision \"%s\": expected fp32 or fp16", prec);
    if (l.device < 0 && dt != OPS_F32)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "tacotron2: precision \"%s\": the CPU path is fp32", prec);
    char vdir[4200];
    int vrc = family_tts_vocoder_path("tacotron2", dir, cfg, vdir, sizeof vdir, err);
    if (vrc)
        return vrc;
    family_model_t *fm = hark_calloc(1, sizeof *fm);
    if (!fm)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    fm->device = l.device < 0 ? -1 : l.device;
    fm->dt = dt;
    int rc = tacotron2_load(dir, l.version, &fm->t2, err);
    if (!rc)
        rc = waveglow_load(vdir, 1, &fm->wg, err);
    if (!rc && tacotron2_config(fm->t2)->n_mels != waveglow_config(fm->wg)->n_mels)
        rc = err_set(err, HARK_ERR_INVALID_ARG,
                     "tacotron2: the model makes %d mel bins, the vocoder %s reads %d",
                     tacotron2_config(fm->t2)->n_mels, vdir, waveglow_config(fm->wg)->n_mels);
    if (!rc && fm->device >= 0 &&
        !(rc = tacotron2_gpu_model_create(fm->t2, fm->device, dt, &fm->gt, err)))
        rc = waveglow_gpu_model_create(fm->wg, fm->device, dt, &fm->gv, err);
    if (rc) {
        tf_unload(fm);
        return rc;
    }
    fm->ctx_frames = waveglow_context_frames(fm->wg);
    rc = family_param_int(cfg, "vocoder_chunk_frames", 0, 100000, &fm->chunk_frames, err);
    if (!rc || rc == HARK_ERR_NOT_FOUND)
        rc = family_param_int(cfg, "vocoder_context_frames", 0, 100000, &fm->ctx_frames, err);
    if (rc && rc != HARK_ERR_NOT_FOUND) {
        tf_unload(fm);
        return rc;
    }
    if (fm->chunk_frames == 1)
        fm->chunk_frames = 2; /* the first chunk is half of one */
    const tacotron2_config_t *c = tacotron2_config(fm->t2);
    const waveglow_config_t *w = waveglow_config(fm->wg);
    snprintf(fm->kind, sizeof fm->kind,
             "tacotron2 encoder %d, decoder %d/%d + waveglow %d flows x %d, %s%s", c->enc_dim,
             c->att_rnn_dim, c->dec_rnn_dim, w->n_flows, w->wn_channels,
             dt == OPS_F16 ? "fp16" : "fp32", fm->device >= 0 ? " (gpu)" : "");
    *out = fm;
    return HARK_OK;
}

static void tf_info(const family_model_t *fm, family_info_t *out)
{
    memset(out, 0, sizeof *out);
    out->sample_rate = waveglow_config(fm->wg)->sample_rate;
    out->device = fm->device;
    out->kind = fm->kind;
}

static int opts_from(const family_params_t *p, t2_opts_t *o, hark_err_t *err)
{
    double v;
    int rc, b, steps;
    if ((rc = family_param_double(p, "seed", &v, err)) == HARK_OK) {
        if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v))
            return err_set(err, HARK_ERR_INVALID_ARG, "seed %g: must be an integer >= 0", v);
        o->seed = (long long)v;
    } else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_double(p, "sigma", &v, err)) == HARK_OK) {
        if (!(v >= 0 && v <= 10))
            return err_set(err, HARK_ERR_INVALID_ARG, "sigma %g: must be in [0, 10]", v);
        o->sigma = (float)v;
    } else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_bool(p, "use_denoiser", &b, err)) == HARK_OK) {
        if (!b)
            o->strength = 0;
    } else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_double(p, "denoiser_strength", &v, err)) == HARK_OK) {
        if (!(v >= 0 && v <= 10))
            return err_set(err, HARK_ERR_INVALID_ARG, "denoiser_strength %g: must be in [0, 10]",
                           v);
        o->strength = (float)v;
    } else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_int(p, "max_decoder_steps", 1, 1000000, &steps, err)) == HARK_OK)
        o->max_steps = steps;
    else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    if ((rc = family_param_double(p, "speed", &v, err)) == HARK_OK) {
        if (v != 1.0)
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "speed %g: Tacotron 2 has no duration control (only 1)", v);
    } else if (rc != HARK_ERR_NOT_FOUND)
        return rc;
    return HARK_OK;
}

static int tf_parse_opts(const family_model_t *m, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    t2_opts_t *o = opts;
    *o = (t2_opts_t){0, -1.0f, -1.0f, 0};
    int rc = opts_from(cfg, o, err);
    return rc ? rc : opts_from(req, o, err);
}

static uint64_t tf_batch_key(const void *opts)
{
    const t2_opts_t *o = opts; /* the seed is per row; the rest is shared by a batch */
    uint32_t a, b;
    memcpy(&a, &o->sigma, 4);
    memcpy(&b, &o->strength, 4);
    return ((uint64_t)a * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)b << 17) ^ (uint64_t)o->max_steps;
}

static void tf_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    tacotron2_gpu_worker_destroy(w->tw);
    waveglow_gpu_worker_destroy(w->vw);
    for (int b = 0; w->audio && b < w->max_batch; b++)
        hark_free(w->audio[b]);
    hark_free(w->audio);
    hark_free(w);
}

static int tf_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                            family_worker_t **out, hark_err_t *err)
{
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->fm = m;
    if (m->gt) {
        int steps = tacotron2_config(m->t2)->max_decoder_steps, rc;
        w->max_batch = wo && wo->max_batch > 0 ? wo->max_batch : 1;
        rc = tacotron2_gpu_worker_create(m->gt, w->max_batch, GPU_MAX_IDS, steps, &w->tw, err);
        if (!rc)
            rc = waveglow_gpu_worker_create(m->gv, w->max_batch, steps, &w->vw, err);
        if (!rc && !(w->audio = hark_calloc((size_t)w->max_batch, sizeof *w->audio)))
            rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory");
        for (int b = 0; !rc && b < w->max_batch; b++)
            if (!(w->audio[b] = hark_malloc(sizeof(float) * waveglow_samples(m->wg, steps))))
                rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory");
        if (rc) {
            tf_worker_destroy(w);
            return rc;
        }
    }
    *out = w;
    return HARK_OK;
}

/* DLE's inference.py after the vocoder: the mel_lengths cut and peak normalisation, in place;
 * the samples kept */
static size_t finish(const family_model_t *fm, float *a, size_t n, int mel_length)
{
    size_t keep = (size_t)(mel_length > 0 ? mel_length : 1) * (size_t)tacotron2_config(fm->t2)->hop;
    if (keep < n)
        n = keep;
    float peak = 0;
    for (size_t i = 0; i < n; i++)
        peak = fmaxf(peak, fabsf(a[i]));
    if (peak > 0)
        for (size_t i = 0; i < n; i++)
            a[i] /= peak;
    return n;
}

/* one row's mel -> audio (hark_malloc'ed): WaveGlow, the denoiser, the mel_lengths cut, peak
 * normalisation (DLE's inference.py) */
static int vocode(const family_model_t *fm, const t2_opts_t *o, const tacotron2_result_t *r,
                  float **audio, size_t *n_audio, hark_err_t *err)
{
    const waveglow_config_t *c = waveglow_config(fm->wg);
    size_t n = waveglow_samples(fm->wg, r->n_frames);
    float *a = hark_malloc(sizeof(float) * n);
    if (!a)
        return err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for %zu samples", n);
    waveglow_opts_t wo = {.sigma = o->sigma, .seed = (uint64_t)o->seed ^ 0x5741564547ull};
    int rc = waveglow_infer(fm->wg, r->mel, r->n_frames, &wo, a, err);
    float strength = o->strength >= 0 ? o->strength : c->denoiser_strength;
    if (!rc && strength > 0)
        rc = waveglow_denoise(fm->wg, a, n, strength, a, &n, err);
    if (rc) {
        hark_free(a);
        return rc;
    }
    *n_audio = finish(fm, a, n, r->mel_length);
    *audio = a;
    return HARK_OK;
}

/* the batch on the GPU: Tacotron 2, then WaveGlow (and the denoiser) from the mel on the device
 * into w->audio[b] (nf[b] frames, mel length ml[b]) */
static int gpu_synth(family_worker_t *w, const t2_opts_t *o, const int *const *ids, const int *nid,
                     const uint64_t *seeds, int nb, int *nf, int *ml, hark_err_t *err)
{
    const family_model_t *fm = w->fm;
    tacotron2_opts_t to = {.seeds = seeds, .max_decoder_steps = o->max_steps};
    int rc = tacotron2_gpu_run(w->tw, ids, nid, nb, &to, NULL, nf, ml, err);
    float strength = o->strength >= 0 ? o->strength : waveglow_config(fm->wg)->denoiser_strength;
    if (!rc)
        rc = waveglow_gpu_set_denoise(w->vw, strength, err);
    uint64_t *ws = rc ? NULL : hark_malloc(sizeof(uint64_t) * (size_t)nb);
    if (!rc && !ws)
        rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory");
    for (int b = 0; !rc && b < nb; b++)
        ws[b] = seeds[b] ^ WG_SEED;
    if (!rc) {
        int ld = 0;
        const float *d_mel = tacotron2_gpu_mel(w->tw, &ld);
        waveglow_opts_t wo = {.sigma = o->sigma};
        rc = waveglow_gpu_run_device(w->vw, d_mel, ld, nf, nb, &wo, ws, w->audio, err);
    }
    hark_free(ws);
    return rc;
}

/* ---- streaming: WaveGlow on windows of the mel ---------------------------------------------- */

#define CHUNK_SEED                                                                                 \
    0x9e3779b97f4a7c15ull /* window k's noise: the row's WaveGlow seed + k · this                 \
                           */

/* chunk boundaries: the first chunk half of `chunk` frames, then `chunk` each; [a, *b) of T */
static int chunk_end(int a, int chunk, int T)
{
    int len = a ? chunk : chunk / 2;
    len = len < 1 ? 1 : len;
    return a + len < T ? a + len : T;
}

/* emits the samples of frames [a, b) from a window's audio that starts at frame lo, cut at keep */
static void emit_span(family_item_t *it, const float *win, int lo, int a, int b, size_t hop,
                      size_t keep, int rate)
{
    size_t s0 = (size_t)a * hop, s1 = (size_t)b * hop;
    s1 = s1 < keep ? s1 : keep;
    if (s0 >= s1)
        return;
    family_event_t ev = {.kind = FAMILY_EV_AUDIO,
                         .pcm = win + (s0 - (size_t)lo * hop),
                         .n = s1 - s0,
                         .sample_rate = rate};
    it->emit(it, &ev);
}

/* DLE's audio cut of a row: mel_length · hop samples */
static size_t keep_of(const family_model_t *fm, int mel_length)
{
    return (size_t)(mel_length > 0 ? mel_length : 1) * (size_t)tacotron2_config(fm->t2)->hop;
}

/* one row on the CPU, chunk by chunk */
static int stream_cpu(const family_model_t *fm, const t2_opts_t *o, const tacotron2_result_t *r,
                      family_item_t *it, int rate, hark_err_t *err)
{
    const waveglow_config_t *c = waveglow_config(fm->wg);
    int T = r->n_frames, nm = c->n_mels, chunk = fm->chunk_frames, ctx = fm->ctx_frames;
    int wmax = chunk + 2 * ctx < T ? chunk + 2 * ctx : T;
    size_t hop = waveglow_samples(fm->wg, 1), keep = keep_of(fm, r->mel_length);
    float strength = o->strength >= 0 ? o->strength : c->denoiser_strength;
    float *sub = hark_malloc(sizeof(float) * (size_t)nm * wmax);
    float *audio = hark_malloc(sizeof(float) * waveglow_samples(fm->wg, wmax));
    int rc = sub && audio ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory");
    for (int a = 0, k = 0, b; !rc && a < T; a = b, k++) {
        b = chunk_end(a, chunk, T);
        int lo = a - ctx > 0 ? a - ctx : 0, hi = b + ctx < T ? b + ctx : T, wl = hi - lo;
        for (int q = 0; q < nm; q++)
            memcpy(sub + (size_t)q * wl, r->mel + (size_t)q * T + lo, sizeof(float) * (size_t)wl);
        waveglow_opts_t wo = {.sigma = o->sigma,
                              .seed = ((uint64_t)o->seed ^ WG_SEED) + (uint64_t)k * CHUNK_SEED};
        size_t n = waveglow_samples(fm->wg, wl);
        rc = waveglow_infer(fm->wg, sub, wl, &wo, audio, err);
        if (!rc && strength > 0)
            rc = waveglow_denoise(fm->wg, audio, n, strength, audio, &n, err);
        if (!rc)
            emit_span(it, audio, lo, a, b, hop, keep, rate);
    }
    hark_free(sub);
    hark_free(audio);
    return rc;
}

/* the batch on the GPU, chunk by chunk over its longest mel: a window's WaveGlow run covers every
 * row (a row past its end vocodes its zero padding, discarded) */
static int stream_gpu(family_worker_t *w, const t2_opts_t *o, const uint64_t *seeds, int nb,
                      const int *nf, const int *ml, family_item_t *const *items, const int *row,
                      int rate, hark_err_t *err)
{
    const family_model_t *fm = w->fm;
    const waveglow_config_t *c = waveglow_config(fm->wg);
    int T = 0, chunk = fm->chunk_frames, ctx = fm->ctx_frames, ld = 0;
    for (int b = 0; b < nb; b++)
        T = nf[b] > T ? nf[b] : T;
    size_t hop = waveglow_samples(fm->wg, 1);
    float strength = o->strength >= 0 ? o->strength : c->denoiser_strength;
    int min_frames = strength > 0 ? (int)((size_t)c->filter_length / 2 / hop) + 1 : 1;
    const float *d_mel = tacotron2_gpu_mel(w->tw, &ld);
    int *fn = hark_malloc(sizeof(int) * (size_t)nb);
    uint64_t *ws = hark_malloc(sizeof(uint64_t) * (size_t)nb);
    int rc = fn && ws ? waveglow_gpu_set_denoise(w->vw, strength, err)
                      : err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory");
    for (int a = 0, k = 0, e; !rc && a < T; a = e, k++) {
        e = chunk_end(a, chunk, T);
        int lo = a - ctx > 0 ? a - ctx : 0, hi = e + ctx < T ? e + ctx : T, wl = hi - lo;
        for (int b = 0; b < nb; b++) {
            int own = (nf[b] < hi ? nf[b] : hi) - lo; /* the row's frames in the window */
            fn[b] = own < min_frames ? (min_frames < wl ? min_frames : wl) : own;
            ws[b] = (seeds[b] ^ WG_SEED) + (uint64_t)k * CHUNK_SEED;
        }
        waveglow_opts_t wo = {.sigma = o->sigma};
        rc = waveglow_gpu_run_device(w->vw, d_mel + lo, ld, fn, nb, &wo, ws, w->audio, err);
        for (int b = 0; !rc && b < nb; b++)
            if (a < nf[b])
                emit_span(items[row[b]], w->audio[b], lo, a, e < nf[b] ? e : nf[b], hop,
                          keep_of(fm, ml[b]), rate);
    }
    hark_free(fn);
    hark_free(ws);
    return rc;
}

static int tf_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    const family_model_t *fm = w->fm;
    uint64_t t0 = clock_now_ns();
    int rate = waveglow_config(fm->wg)->sample_rate, n_failed = 0, last_rc = HARK_OK;
    tts_text_t *tt = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *tt);
    int *st = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *st);
    char(*msg)[256] = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *msg);
    const int **ids = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
    int *nid = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *nid), *row = NULL;
    uint64_t *seeds = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *seeds);
    tacotron2_result_t *res = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    row = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *row);
    int *nf = hark_calloc((size_t)(n > 0 ? n : 1) * 2, sizeof *nf), *ml = nf ? nf + n : NULL;
    int nb = 0, brc = HARK_OK, gpu = w->tw != NULL;
    hark_err_t berr = {0};
    if (!tt || !st || !msg || !ids || !nid || !seeds || !res || !row || !nf) {
        brc = err_set(&berr, HARK_ERR_NOMEM, "tacotron2: out of memory for a batch of %d", n);
        for (int i = 0; i < n; i++)
            if (st)
                st[i] = brc;
    }
    for (int i = 0; i < n && !brc; i++) { /* the text of every item; the good ones batch */
        hark_err_t e = {0};
        const t2_opts_t *o = items[i]->opts;
        if (!items[i]->text)
            st[i] = err_set(&e, HARK_ERR_INVALID_ARG, "tacotron2: the request has no text");
        else if (items[i]->dump_dir)
            st[i] = err_set(&e, HARK_ERR_UNSUPPORTED,
                            "tacotron2: no stage dumps in the family (use hark speak --dump-dir)");
        else
            st[i] = tts_text_to_ids_variant(items[i]->text, TTS_TEXT_DLE_TACOTRON2, &tt[i], &e);
        if (!st[i] && gpu && tt[i].n > GPU_MAX_IDS)
            st[i] = err_set(&e, HARK_ERR_TOO_LARGE,
                            "tacotron2: the text makes %d symbols (at most %d on the GPU)", tt[i].n,
                            GPU_MAX_IDS);
        if (st[i]) {
            snprintf(msg[i], sizeof msg[i], "%.250s", e.msg);
            continue;
        }
        ids[nb] = tt[i].ids;
        nid[nb] = tt[i].n;
        seeds[nb] = o ? (uint64_t)o->seed : 0;
        row[nb++] = i;
    }
    const t2_opts_t *o0 = n > 0 ? items[0]->opts : NULL; /* one batch key: shared options */
    t2_opts_t dflt = {0, -1.0f, -1.0f, 0};
    if (!o0)
        o0 = &dflt;
    if (nb > 0) {
        tacotron2_opts_t to = {.seeds = seeds, .max_decoder_steps = o0->max_steps};
        if (gpu && fm->chunk_frames) { /* Tacotron 2, then WaveGlow window by window */
            brc = tacotron2_gpu_run(w->tw, ids, nid, nb, &to, NULL, nf, ml, &berr);
            if (!brc)
                brc = stream_gpu(w, o0, seeds, nb, nf, ml, items, row, rate, &berr);
        } else
            brc = gpu ? gpu_synth(w, o0, ids, nid, seeds, nb, nf, ml, &berr)
                      : tacotron2_infer(fm->t2, ids, nid, nb, &to, res, &berr);
    }
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        float *audio = NULL;
        size_t na = 0;
        int rc = st ? st[i] : HARK_ERR_NOMEM;
        hark_err_t ierr = {0};
        if (rc)
            snprintf(ierr.msg, sizeof ierr.msg, "%s", msg ? msg[i] : "out of memory");
        int b = -1;
        for (int k = 0; k < nb && !rc; k++)
            if (row[k] == i)
                b = k;
        if (!rc && brc) {
            rc = brc;
            ierr = berr;
        } else if (!rc && b >= 0 && fm->chunk_frames) { /* streamed (GPU: above) */
            const t2_opts_t *o = it->opts ? it->opts : &dflt;
            if (!gpu)
                rc = stream_cpu(fm, o, &res[b], it, rate, &ierr);
        } else if (!rc && b >= 0 && gpu) {
            audio = w->audio[b]; /* the worker's: not freed below */
            na = finish(fm, audio, waveglow_samples(fm->wg, nf[b]), ml[b]);
        } else if (!rc && b >= 0) {
            const t2_opts_t *o = it->opts ? it->opts : &dflt;
            rc = vocode(fm, o, &res[b], &audio, &na, &ierr);
        }
        if (!rc && !fm->chunk_frames) {
            family_event_t ev = {
                .kind = FAMILY_EV_AUDIO, .pcm = audio, .n = na, .sample_rate = rate};
            it->emit(it, &ev);
        } else if (rc) {
            n_failed++;
            last_rc = rc;
            if (n == 1)
                *err = ierr;
        }
        if (!gpu)
            hark_free(audio);
        family_event_t done = {.kind = FAMILY_EV_DONE,
                               .status = rc,
                               .error = rc ? ierr.msg : NULL,
                               .sample_rate = rate};
        it->emit(it, &done);
    }
    for (int i = 0; i < n; i++) {
        if (tt)
            tts_text_free(&tt[i]);
        if (res)
            tacotron2_result_free(&res[i]);
    }
    hark_free(tt);
    hark_free(st);
    hark_free(msg);
    hark_free(ids);
    hark_free(nid);
    hark_free(seeds);
    hark_free(res);
    hark_free(row);
    hark_free(nf);
    if (times)
        *times = (family_exec_times_t){0, clock_now_ns() - t0, 0};
    if (n_failed == n && n > 0) {
        if (n > 1)
            err_set(err, last_rc, "tacotron2: all %d items failed", n);
        return last_rc;
    }
    return HARK_OK;
}

const family_t tacotron2_family = {
    .name = "tacotron2",
    .task = FAMILY_TASK_TTS,
    .streaming = 0,
    .opts_size = sizeof(t2_opts_t),
    .load = tf_load,
    .unload = tf_unload,
    .info = tf_info,
    .parse_opts = tf_parse_opts,
    .batch_key = tf_batch_key,
    .worker_create = tf_worker_create,
    .worker_destroy = tf_worker_destroy,
    .stream_open = NULL,
    .stream_close = NULL,
    .execute = tf_execute,
    .bench = tacotron2_bench_main,
    .inspect = NULL,
    .bench_synthetic = NULL,
    .io = NULL,
};
