/* jasper_family.c — DLE Jasper / QuartzNet as a model family (family.h): "jasper", offline ASR
 * over jasper.h on the CPU. Besides the generic WAV/WAV_LENS -> TRANSCRIPTS contract it declares
 * DLE's Triton ensemble contract (AUDIO_SIGNAL + NUM_SAMPLES -> TRANSCRIPT, the per-frame argmax
 * ids jasper-client.py collapses itself). Options (config.pbtxt parameters, then the request's):
 * ctc_frames "all" (decode every output frame, as DLE's inference.py) or "valid" (only the
 * frames of the audio's own length). On a GPU (load device >= 0) the model is uploaded in the
 * precision of config.pbtxt's `parameters precision` (fp32, fp16 or bf16; jasper_gpu.h) and a
 * worker runs each execute as one padded batch (items of bad audio fail alone first).
 * Tests: tests/model/jasper/test_jasper_family.c, tests/model/jasper/test_jasper_gpu.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "hark.h"
#include "model/jasper/jasper.h"
#include "model/jasper/jasper_gpu.h"
#include "model/jasper/jasper_tools.h"
#include "ops/ops.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    int valid_frames_only;
} jasper_family_opts_t;

struct family_model {
    jasper_model_t *m;
    jasper_gpu_model_t *gm; /* NULL: a CPU model */
    int device;             /* -1: CPU */
    char kind[96];
};

struct family_worker {
    const family_model_t *fm;
    jasper_worker_t *w;      /* CPU */
    jasper_gpu_worker_t *gw; /* GPU */
    int max_batch;
    double max_seconds;
};

static int jf_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    ops_dtype_t dt = OPS_F32;
    /* config.pbtxt's precision must be a known one wherever the model is loaded */
    const char *cname = family_param(cfg, "precision");
    if (cname && family_precision(cname, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "jasper: parameters precision \"%s\": expected fp32, fp16 or bf16", cname);
    const char *prec = l.precision ? l.precision : l.device >= 0 ? cname : NULL;
    dt = OPS_F32;
    if (prec && family_precision(prec, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "jasper: precision \"%s\": expected fp32, fp16 or bf16", prec);
    if (l.device < 0 && dt != OPS_F32)
        return err_set(err, HARK_ERR_UNSUPPORTED, "jasper: precision \"%s\": the CPU path is fp32",
                       prec);
    family_model_t *fm = hark_calloc(1, sizeof *fm);
    if (!fm)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    fm->device = l.device < 0 ? -1 : l.device;
    int rc = jasper_load(dir, l.version, &fm->m, err);
    if (!rc && l.device >= 0)
        rc = jasper_gpu_model_create(fm->m, l.device, dt, &fm->gm, err);
    if (rc) {
        jasper_destroy(fm->m);
        hark_free(fm);
        return rc;
    }
    const jasper_config_t *c = jasper_config(fm->m);
    snprintf(fm->kind, sizeof fm->kind, "%s %d blocks, %d labels, %s%s",
             c->arch == JASPER_ARCH_JASPER ? "jasper" : "quartznet", c->n_blocks, c->n_labels,
             dt == OPS_F16    ? "fp16"
             : dt == OPS_BF16 ? "bf16"
                              : "fp32",
             l.device >= 0 ? " (gpu)" : "");
    *out = fm;
    return HARK_OK;
}

static void jf_unload(family_model_t *fm)
{
    if (!fm)
        return;
    jasper_gpu_model_destroy(fm->gm);
    jasper_destroy(fm->m);
    hark_free(fm);
}

static void jf_info(const family_model_t *fm, family_info_t *out)
{
    const jasper_config_t *c = jasper_config(fm->m);
    *out = (family_info_t){.sample_rate = c->sample_rate,
                           .frame_ms = jasper_frame_ms(fm->m, 1 + c->pad_leading) -
                                       jasper_frame_ms(fm->m, c->pad_leading),
                           .device = fm->device,
                           .kind = fm->kind,
                           .frame_pad_id = c->n_labels};
}

static int apply_params(const family_params_t *p, const char *where, jasper_family_opts_t *o,
                        hark_err_t *err)
{
    const char *v = family_param(p, "ctc_frames");
    if (!v)
        return HARK_OK;
    if (!strcmp(v, "all"))
        o->valid_frames_only = 0;
    else if (!strcmp(v, "valid"))
        o->valid_frames_only = 1;
    else
        return err_set(err, HARK_ERR_INVALID_ARG, "%sctc_frames '%s' is not one of all, valid",
                       where, v);
    return HARK_OK;
}

static int jf_parse_opts(const family_model_t *fm, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    jasper_family_opts_t *o = opts;
    memset(o, 0, sizeof *o);
    int rc = apply_params(cfg, "config.pbtxt parameters ", o, err);
    if (!rc)
        rc = apply_params(req, "", o, err);
    return rc;
}

static uint64_t jf_batch_key(const void *opts)
{
    return 0x6a6173706572ull ^ (uint64_t)((const jasper_family_opts_t *)opts)->valid_frames_only;
}

static void jf_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    jasper_worker_destroy(w->w);
    jasper_gpu_worker_destroy(w->gw);
    hark_free(w);
}

static int jf_worker_create(const family_model_t *fm, const family_worker_opts_t *wo,
                            family_worker_t **out, hark_err_t *err)
{
    if (!wo || wo->max_batch < 1 || !(wo->max_seconds > 0))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "worker needs max_batch >= 1 and max_seconds > 0");
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->fm = fm;
    w->max_batch = wo->max_batch;
    w->max_seconds = wo->max_seconds;
    int rc;
    if (fm->gm) {
        rc = jasper_gpu_worker_create(fm->gm, wo->max_batch, wo->max_seconds, &w->gw, err);
    } else {
        if (wo->n_threads > 0)
            ops_set_threads(wo->n_threads);
        rc = jasper_worker_create(fm->m, wo->max_seconds, &w->w, err);
    }
    if (rc) {
        jf_worker_destroy(w);
        return rc;
    }
    *out = w;
    return HARK_OK;
}

/* ---- execute -------------------------------------------------------------------------------- */

/* jasper_result_t -> asr_result_t (r zeroed first; on error the caller frees it). Words are the
 * runs of labels between space labels, timed from their first to their last label's frame. */
static int result_convert(const jasper_model_t *m, jasper_result_t *s, size_t n_samples,
                          const family_item_t *it, asr_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    const jasper_config_t *c = jasper_config(m);
    int frame_ms = jasper_frame_ms(m, 1 + c->pad_leading) - jasper_frame_ms(m, c->pad_leading);
    r->duration_s = (double)n_samples / c->sample_rate;
    r->word_sep = 1;
    r->best.score = s->score;
    r->confidence = 0;
    r->best.text = s->text;
    s->text = NULL;
    r->best.n_tokens = s->n_tokens;
    if (s->n_tokens > 0) {
        r->best.tokens = s->tokens;
        s->tokens = NULL;
        if (!(r->best.times_ms = hark_malloc(sizeof(int) * (size_t)s->n_tokens)))
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int i = 0; i < s->n_tokens; i++)
            r->best.times_ms[i] = jasper_frame_ms(m, s->times[i]);
    }
    if (it->want_frame_ids) {
        r->frame_ids = s->frame_ids;
        r->n_frames = s->n_frames;
        s->frame_ids = NULL;
    }
    if (it->want_words && s->n_tokens > 0) {
        if (!(r->words = hark_calloc((size_t)s->n_tokens, sizeof *r->words)))
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        const int *tok = r->best.tokens;
        for (int i = 0; i < s->n_tokens;) {
            while (i < s->n_tokens && !strcmp(c->labels[tok[i]], " "))
                i++;
            if (i == s->n_tokens)
                break;
            int j = i;
            size_t len = 0;
            while (j < s->n_tokens && strcmp(c->labels[tok[j]], " "))
                len += strlen(c->labels[tok[j++]]);
            asr_word_t *w = &r->words[r->n_words];
            if (!(w->text = hark_malloc(len + 1)))
                return err_set(err, HARK_ERR_NOMEM, "out of memory");
            r->n_words++;
            len = 0;
            for (int k = i; k < j; k++) {
                size_t kl = strlen(c->labels[tok[k]]);
                memcpy(w->text + len, c->labels[tok[k]], kl);
                len += kl;
            }
            w->text[len] = 0;
            w->start_ms = r->best.times_ms[i];
            w->end_ms = r->best.times_ms[j - 1] + frame_ms;
            i = j;
        }
    }
    return HARK_OK;
}

static void emit_error(family_item_t *it, int rc, const hark_err_t *e)
{
    family_event_t ev = {.kind = FAMILY_EV_DONE,
                         .status = rc,
                         .error = e && e->msg[0] ? e->msg : hark_status_str(rc)};
    it->emit(it, &ev);
}

/* The GPU path: items of bad audio (or asking for a dump) fail alone, the rest run as one padded
 * batch; every item's result is that of its utterance alone (jasper_gpu.h). */
static int jf_execute_gpu(family_worker_t *w, family_item_t *const *items, int n,
                          family_exec_times_t *times, hark_err_t *err)
{
    family_exec_times_t tm = {0};
    const jasper_model_t *m = w->fm->m;
    const jasper_config_t *c = jasper_config(m);
    const size_t min = jasper_min_samples(m);
    const size_t max_n = (size_t)ceil(w->max_seconds * c->sample_rate);
    int worst = HARK_OK, n_failed = 0, nb = 0, valid_only = -1;
    family_item_t **run = hark_calloc((size_t)(n ? n : 1), sizeof *run);
    const float **pcm = hark_calloc((size_t)(n ? n : 1), sizeof *pcm);
    size_t *lens = hark_calloc((size_t)(n ? n : 1), sizeof *lens);
    jasper_result_t *res = hark_calloc((size_t)(n ? n : 1), sizeof *res);
    uint64_t t0 = clock_now_ns();
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        const jasper_family_opts_t *o = it->opts;
        hark_err_t e = {0};
        int rc = HARK_OK;
        if (!run || !pcm || !lens || !res)
            rc = err_set(&e, HARK_ERR_NOMEM, "out of memory");
        else if (i >= w->max_batch)
            rc = err_set(&e, HARK_ERR_TOO_LARGE, "batch of %d exceeds the worker's %d", n,
                         w->max_batch);
        else if (it->dump_dir)
            rc =
                err_set(&e, HARK_ERR_UNSUPPORTED,
                        "dump_dir needs a CPU model (the GPU path keeps its stages on the device)");
        else if (it->n == 0)
            rc = err_set(&e, HARK_ERR_INVALID_ARG, "empty audio");
        else if (it->n < min)
            rc = err_set(&e, HARK_ERR_INVALID_ARG,
                         "audio of %zu samples is too short: the STFT needs at least %zu (%.1f ms)",
                         it->n, min, 1000.0 * (double)min / c->sample_rate);
        else if (it->n > max_n)
            rc = err_set(&e, HARK_ERR_TOO_LARGE,
                         "audio of %.2f s is longer than the worker's maximum (%.2f s)",
                         (double)it->n / c->sample_rate, w->max_seconds);
        for (size_t k = 0; !rc && k < it->n; k++)
            if (!isfinite(it->pcm[k]))
                rc = err_set(&e, HARK_ERR_INVALID_ARG, "sample %zu of the audio is %s", k,
                             isnan(it->pcm[k]) ? "NaN" : "infinite");
        if (!rc) {
            /* one batch key: every item shares valid_frames_only */
            valid_only = o ? o->valid_frames_only : 0;
            run[nb] = it;
            pcm[nb] = it->pcm;
            lens[nb++] = it->n;
            continue;
        }
        emit_error(it, rc, &e);
        worst = worst ? worst : rc;
        n_failed++;
    }
    uint64_t t1 = clock_now_ns();
    tm.input_ns = t1 - t0;
    if (nb > 0) {
        hark_err_t e = {0};
        jasper_gpu_run_opts_t ro = {.valid_frames_only = valid_only > 0};
        int rc = jasper_gpu_run(w->gw, pcm, lens, nb, &ro, res, &e);
        uint64_t t2 = clock_now_ns();
        tm.infer_ns = t2 - t1;
        for (int i = 0; i < nb; i++) {
            asr_result_t r;
            memset(&r, 0, sizeof r);
            int irc = rc;
            hark_err_t ie = e;
            if (!irc)
                irc = result_convert(m, &res[i], run[i]->n, run[i], &r, &ie);
            jasper_result_free(&res[i]);
            if (irc) {
                asr_result_free(&r);
                emit_error(run[i], irc, &ie);
                worst = worst ? worst : irc;
                n_failed++;
            } else {
                family_event_t ev = {.kind = FAMILY_EV_DONE, .status = HARK_OK, .asr = &r};
                run[i]->emit(run[i], &ev);
                asr_result_free(&r);
            }
        }
        tm.output_ns = clock_now_ns() - t2;
    }
    hark_free(run);
    hark_free(pcm);
    hark_free(lens);
    hark_free(res);
    if (times)
        *times = tm;
    if (n_failed == n && n > 0)
        return err_set(err, worst, "every item failed (the items carry the messages)");
    return HARK_OK;
}

/* Items run one at a time on the CPU (each at its own length: hark's result for an utterance does
 * not depend on its batch, unlike a zero-padded batch in DLE; docs/features.md says why). */
static int jf_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    if (w->gw)
        return jf_execute_gpu(w, items, n, times, err);
    family_exec_times_t tm = {0};
    int worst = HARK_OK, n_failed = 0;
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        const jasper_family_opts_t *o = it->opts;
        hark_err_t e = {0};
        family_dump_t dctx = {.dir = it->dump_dir};
        jasper_run_opts_t ro = {.valid_frames_only = o ? o->valid_frames_only : 0};
        int rc = HARK_OK;
        if (i >= w->max_batch)
            rc = err_set(&e, HARK_ERR_TOO_LARGE, "batch of %d exceeds the worker's %d", n,
                         w->max_batch);
        if (!rc && it->dump_dir) {
            rc = family_mkdir_p(it->dump_dir, &e);
            ro.stage = family_dump_f32;
            ro.stage_user = &dctx;
        }
        uint64_t t0 = clock_now_ns();
        jasper_result_t jr = {0};
        if (!rc)
            rc = jasper_run(w->w, it->pcm, it->n, &ro, &jr, &e);
        if (!rc && dctx.failed)
            rc = err_set(&e, HARK_ERR_IO, "could not write every stage under %s", it->dump_dir);
        uint64_t t1 = clock_now_ns();
        tm.infer_ns += t1 - t0;
        asr_result_t r;
        memset(&r, 0, sizeof r);
        if (!rc)
            rc = result_convert(w->fm->m, &jr, it->n, it, &r, &e);
        jasper_result_free(&jr);
        if (rc) {
            asr_result_free(&r);
            emit_error(it, rc, &e);
            if (worst == HARK_OK)
                worst = rc;
            n_failed++;
        } else {
            family_event_t ev = {.kind = FAMILY_EV_DONE, .status = HARK_OK, .asr = &r};
            it->emit(it, &ev);
            asr_result_free(&r);
        }
        tm.output_ns += clock_now_ns() - t1;
    }
    if (times)
        *times = tm;
    if (n_failed == n && n > 0)
        return err_set(err, worst, "every item failed (the items carry the messages)");
    return HARK_OK;
}

/* DLE's Triton ensemble (PyTorch/SpeechRecognition/Jasper/triton/model_repo_configs) */
static const family_io_t jasper_io[] = {
    {.audio = "AUDIO_SIGNAL",
     .n_samples = "NUM_SAMPLES",
     .output = "TRANSCRIPT",
     .out = FAMILY_OUT_FRAME_IDS},
    {0},
};

const family_t jasper_family = {
    .name = "jasper",
    .task = FAMILY_TASK_ASR,
    .streaming = 0,
    .opts_size = sizeof(jasper_family_opts_t),
    .load = jf_load,
    .unload = jf_unload,
    .info = jf_info,
    .parse_opts = jf_parse_opts,
    .batch_key = jf_batch_key,
    .worker_create = jf_worker_create,
    .worker_destroy = jf_worker_destroy,
    .stream_open = NULL,
    .stream_close = NULL,
    .execute = jf_execute,
    .bench = jasper_bench_main,
    .inspect = NULL,
    .bench_synthetic = jasper_synthetic_names,
    .io = jasper_io,
};
