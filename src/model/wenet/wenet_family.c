/* wenet_family.c — WeNet U2/U2++ as a model family (family.h): "wenet_u2", offline ASR over
 * wenet_asr.h. Decoding options come from config.pbtxt parameters, then the request's
 * (decoding_method, beam_size, nbest — 1 .. beam_size or "all" —, ctc_weight, reverse_weight;
 * config.pbtxt may also give precision); execute runs wenet_recognize
 * on the batch and turns each wenet_result_t into an asr_result_t (token times in ms, words with
 * times on request). Tests: tests/model/wenet/test_wenet_family.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/wenet/wenet_asr.h"
#include "model/wenet/wenet_tools.h"
#include "text/units.h"
#include "text/words.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define REQ_MAX_BEAM 100 /* request parameters: as the server has always limited them */

typedef struct {
    wenet_decode_opts_t d; /* debug hook and n_threads unset: execute sets them */
} wenet_family_opts_t;

struct family_model {
    wenet_asr_t *asr;
    int gpu_turns; /* config.pbtxt's gpu_turns: instances take turns on the GPU (wenet_asr.h) */
    char kind[96];
};

struct family_worker {
    const family_model_t *m;
    wenet_worker_t *w;
    int n_threads;
    int max_batch;
    /* scratch, (max_batch) each */
    const float **pcm;
    size_t *n;
    wenet_result_t *res;
    int *idx;   /* items of the run being recognized */
    char *done; /* item already reported */
};

/* ---- load ----------------------------------------------------------------------------------- */

static int wf_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    /* config.pbtxt's precision must be a known one wherever the model is loaded (a typo is an
     * error on a CPU-only machine too), and applies to a GPU (the CPU path is FP32 only) */
    const char *cname = family_param(cfg, "precision");
    if (cname && !wenet_precision_parse(cname))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "parameters precision \"%s\": expected fp32, fp16 or bf16", cname);
    const char *pname = l.precision ? l.precision : l.device >= 0 ? cname : NULL;
    wenet_load_opts_t wl = {.device = l.device, .precision = WENET_FP32, .version = l.version};
    if (pname && !(wl.precision = wenet_precision_parse(pname)))
        return err_set(err, HARK_ERR_INVALID_ARG, "precision \"%s\": expected fp32, fp16 or bf16",
                       pname);
    /* gpu_turns: "true": a GPU's instances take turns on it, each uploading and answering
     * while another computes; "false" (default): their batches run side by side */
    const char *turns = family_param(cfg, "gpu_turns");
    if (turns && strcmp(turns, "true") && strcmp(turns, "false"))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "parameters gpu_turns \"%s\": expected true or false", turns);
    family_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    m->gpu_turns = turns && !strcmp(turns, "true");
    int rc = wenet_asr_load_opts(dir, &wl, &m->asr, err);
    if (rc) {
        hark_free(m);
        return rc;
    }
    const wenet_config_t *c = wenet_asr_config(m->asr);
    snprintf(m->kind, sizeof m->kind, "wenet_u2 conformer %d blocks%s, %s", c->n_blocks,
             c->decoder == DECODER_BITRANSFORMER ? " + bitransformer decoder"
             : c->decoder == DECODER_TRANSFORMER ? " + transformer decoder"
                                                 : "",
             wenet_precision_name(wl.precision));
    *out = m;
    return HARK_OK;
}

static void wf_unload(family_model_t *m)
{
    if (!m)
        return;
    wenet_asr_destroy(m->asr);
    hark_free(m);
}

static void wf_info(const family_model_t *m, family_info_t *out)
{
    *out = (family_info_t){.sample_rate = wenet_asr_sample_rate(m->asr),
                           .frame_ms = wenet_asr_frame_ms(m->asr),
                           .device = wenet_asr_device(m->asr),
                           .kind = m->kind};
}

/* ---- options -------------------------------------------------------------------------------- */

static const char METHODS[] = "ctc_greedy_search, ctc_prefix_beam_search, attention_rescoring";

/* One set of parameters over *d. `where` prefixes messages ("" for a request). */
static int apply_params(const family_params_t *p, const char *where, wenet_decode_opts_t *d,
                        int max_beam, hark_err_t *err)
{
    const char *v = family_param(p, "decoding_method");
    if (v && wenet_parse_method(v, &d->method))
        return err_set(err, HARK_ERR_INVALID_ARG, "%sdecoding_method '%s' is not one of %s", where,
                       v, METHODS);
    int rc, beam = 0, nbest = 0;
    double x;
    if ((rc = family_param_int(p, "beam_size", 1, max_beam, &beam, err)) == HARK_OK)
        d->beam_size = beam;
    else if (rc != HARK_ERR_NOT_FOUND)
        return err_set(err, rc, "%sbeam_size must be in [1, %d]", where, max_beam);
    v = family_param(p, "nbest");
    if (v && !strcmp(v, "all"))
        ; /* the whole beam: wf_parse_opts sets it once the beam is known */
    else if ((rc = family_param_int(p, "nbest", 1, max_beam, &nbest, err)) == HARK_OK)
        d->nbest = nbest;
    else if (rc != HARK_ERR_NOT_FOUND)
        return err_set(err, rc, "%snbest must be in [1, %d]", where, max_beam);
    if ((rc = family_param_double(p, "ctc_weight", &x, err)) == HARK_OK) {
        if (!(x >= 0))
            return err_set(err, HARK_ERR_INVALID_ARG, "%sctc_weight must be >= 0", where);
        d->ctc_weight = (float)x;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return err_prefix(err, rc, "%s", where[0] ? where : "parameters");
    }
    if ((rc = family_param_double(p, "reverse_weight", &x, err)) == HARK_OK) {
        if (!(x >= 0 && x <= 1))
            return err_set(err, HARK_ERR_INVALID_ARG, "%sreverse_weight must be in [0, 1]", where);
        d->reverse_weight = (float)x;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return err_prefix(err, rc, "%s", where[0] ? where : "parameters");
    }
    return HARK_OK;
}

static int wf_parse_opts(const family_model_t *m, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    wenet_family_opts_t *o = opts;
    memset(o, 0, sizeof *o);
    wenet_decode_opts_t d = wenet_default_opts(m->asr);
    int has_dec = wenet_asr_config(m->asr)->decoder != DECODER_NONE;
    int rc = apply_params(cfg, "config.pbtxt parameters ", &d, 1000, err);
    if (rc)
        return rc;
    if (d.method == DECODE_ATTENTION_RESCORING && !has_dec)
        d.method = DECODE_CTC_PREFIX_BEAM; /* the model's default where it cannot rescore */
    const char *nb = family_param(req, "nbest");
    int nbest_given = nb != NULL;
    if ((rc = apply_params(req, "", &d, REQ_MAX_BEAM, err)))
        return rc;
    if (nb && !strcmp(nb, "all"))
        d.nbest = d.beam_size;
    if (d.method == DECODE_ATTENTION_RESCORING && !has_dec)
        return err_set(err, HARK_ERR_INVALID_ARG, "attention_rescoring: this model has no decoder");
    if (d.nbest > d.beam_size) {
        if (nbest_given)
            return err_set(err, HARK_ERR_INVALID_ARG, "nbest %d exceeds beam_size %d", d.nbest,
                           d.beam_size);
        d.nbest = d.beam_size; /* a narrower beam given over the configured n-best */
    }
    d.n_threads = 0;
    d.debug = NULL;
    d.debug_user = NULL;
    o->d = d;
    return HARK_OK;
}

static int same_opts(const wenet_decode_opts_t *a, const wenet_decode_opts_t *b)
{
    return a->method == b->method && a->beam_size == b->beam_size && a->nbest == b->nbest &&
           a->ctc_weight == b->ctc_weight && a->reverse_weight == b->reverse_weight &&
           a->cpu_search == b->cpu_search && a->cpu_decoder == b->cpu_decoder;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static uint64_t fbits(float f)
{
    uint32_t u;
    if (f == 0)
        f = 0; /* -0 == +0 */
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A hash of exactly the fields same_opts compares: equal options, equal keys. Different options
 * collide with probability ~2^-64, and execute still runs each set of equal options apart. */
static uint64_t wf_batch_key(const void *opts)
{
    const wenet_decode_opts_t *d = &((const wenet_family_opts_t *)opts)->d;
    uint64_t h = 0x77656e6574ull;
    h = mix(h, (uint64_t)d->method);
    h = mix(h, (uint64_t)(uint32_t)d->beam_size);
    h = mix(h, (uint64_t)(uint32_t)d->nbest);
    h = mix(h, fbits(d->ctc_weight));
    h = mix(h, fbits(d->reverse_weight));
    h = mix(h, (uint64_t)(d->cpu_search != 0) << 1 | (uint64_t)(d->cpu_decoder != 0));
    return h;
}

/* ---- workers -------------------------------------------------------------------------------- */

static void wf_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    wenet_worker_destroy(w->w);
    hark_free(w->pcm);
    hark_free(w->n);
    hark_free(w->res);
    hark_free(w->idx);
    hark_free(w->done);
    hark_free(w);
}

static int wf_worker_create(const family_model_t *m, const family_worker_opts_t *wo,
                            family_worker_t **out, hark_err_t *err)
{
    if (!wo || wo->max_batch < 1 || !(wo->max_seconds > 0))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "worker needs max_batch >= 1 and max_seconds > 0");
    family_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    size_t b = (size_t)wo->max_batch;
    w->m = m;
    w->n_threads = wo->n_threads;
    w->max_batch = wo->max_batch;
    w->pcm = hark_calloc(b, sizeof *w->pcm);
    w->n = hark_calloc(b, sizeof *w->n);
    w->res = hark_calloc(b, sizeof *w->res);
    w->idx = hark_calloc(b, sizeof *w->idx);
    w->done = hark_calloc(b, 1);
    int rc = !w->pcm || !w->n || !w->res || !w->idx || !w->done
                 ? err_set(err, HARK_ERR_NOMEM, "out of memory for a batch of %d", wo->max_batch)
                 : wenet_worker_create(m->asr, wo->max_batch, wo->max_seconds, &w->w, err);
    if (rc) {
        wf_worker_destroy(w);
        return rc;
    }
    wenet_worker_set_turns(w->w, m->gpu_turns);
    *out = w;
    return HARK_OK;
}

/* ---- the debug dump (item->dump_dir) ------------------------------------------------------- */

typedef struct {
    const char *dir;
    int failed;
} dump_ctx_t;

static void dump_stage(void *user, const conformer_stage_t *s)
{
    dump_ctx_t *d = user;
    char path[4300];
    snprintf(path, sizeof path, "%s/%s.npy", d->dir, s->name);
    int64_t shape[2] = {s->rows, s->cols};
    if (npy_save_f32(path, s->data, 2, shape))
        d->failed = 1;
}

static int mkdir_p(const char *dir, hark_err_t *err)
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

/* features after CMVN, as the encoder sees them: DIR/feats_cmvn.npy */
static int dump_features(const wenet_asr_t *asr, const float *pcm, size_t n, const char *dir,
                         hark_err_t *err)
{
    const wenet_config_t *c = wenet_asr_config(asr);
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_FBANK);
    fo.sample_rate = c->sample_rate;
    fo.num_mel_bins = c->num_mel_bins;
    feat_plan_t *p;
    int rc = feat_plan_create(&fo, &p, err);
    if (rc)
        return rc;
    int T = feat_num_frames(p, n), D = feat_dim(p);
    float *f = hark_malloc(sizeof(float) * (size_t)(T ? T : 1) * (size_t)D);
    if (!f)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    else
        rc = feat_compute(p, pcm, n, f, err);
    const float *mean, *istd;
    if (!rc && wenet_asr_cmvn(asr, &mean, &istd))
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                f[(size_t)t * D + i] = (f[(size_t)t * D + i] - mean[i]) * istd[i];
    char path[4300];
    snprintf(path, sizeof path, "%s/feats_cmvn.npy", dir);
    int64_t shape[2] = {T, D};
    if (!rc && npy_save_f32(path, f, 2, shape))
        rc = err_set(err, HARK_ERR_IO, "cannot write %s", path);
    hark_free(f);
    feat_plan_destroy(p);
    return rc;
}

/* ---- execute -------------------------------------------------------------------------------- */

static int hyp_convert(asr_hyp_t *d, const wenet_hyp_t *s, int frame_ms)
{
    memset(d, 0, sizeof *d);
    d->score = s->score;
    d->n_tokens = s->n_tokens;
    if (!(d->text = hark_strdup(s->text ? s->text : "")))
        return HARK_ERR_NOMEM;
    if (s->n_tokens > 0) {
        d->tokens = hark_malloc(sizeof(int) * (size_t)s->n_tokens);
        d->times_ms = hark_malloc(sizeof(int) * (size_t)s->n_tokens);
        if (!d->tokens || !d->times_ms)
            return HARK_ERR_NOMEM;
        memcpy(d->tokens, s->tokens, sizeof(int) * (size_t)s->n_tokens);
        for (int i = 0; i < s->n_tokens; i++)
            d->times_ms[i] = s->times[i] * frame_ms;
    }
    return HARK_OK;
}

/* wenet_result_t -> asr_result_t (r is zeroed first; on error the caller frees it) */
static int result_convert(const family_model_t *m, const wenet_result_t *s, size_t n_samples,
                          int want_words, asr_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    const int frame_ms = wenet_asr_frame_ms(m->asr);
    int style = 0;
    const units_t *u = wenet_asr_units(m->asr, &style);
    r->confidence = s->confidence;
    r->duration_s = (double)n_samples / wenet_asr_sample_rate(m->asr);
    r->word_sep = style == UNITS_STYLE_BPE;
    if (hyp_convert(&r->best, &s->best, frame_ms))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    if (s->n_nbest > 0) {
        if (!(r->nbest = hark_calloc((size_t)s->n_nbest, sizeof *r->nbest)))
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (; r->n_nbest < s->n_nbest; r->n_nbest++)
            if (hyp_convert(&r->nbest[r->n_nbest], &s->nbest[r->n_nbest], frame_ms)) {
                r->n_nbest++;
                return err_set(err, HARK_ERR_NOMEM, "out of memory");
            }
    }
    if (want_words && s->best.n_tokens > 0) {
        word_time_t *w = NULL;
        int nw = 0;
        int rc = words_from_tokens(u, (units_style_t)style, s->best.tokens, s->best.times,
                                   s->best.n_tokens, frame_ms, &w, &nw, err);
        if (rc)
            return rc;
        /* word_time_t and asr_word_t have the same fields: move them over */
        if (nw > 0 && !(r->words = hark_calloc((size_t)nw, sizeof *r->words))) {
            words_free(w, nw);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < nw; i++) {
            r->words[i] = (asr_word_t){w[i].text, w[i].start_ms, w[i].end_ms};
            w[i].text = NULL;
        }
        r->n_words = nw;
        words_free(w, nw);
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

/* Recognizes items idx[0..k) (equal options) as one batch and reports each. Returns the
 * recognizer's status (the items are reported either way). */
static int run(family_worker_t *w, family_item_t *const *items, int k, family_exec_times_t *tm,
               int *worst, int *n_failed)
{
    const family_model_t *m = w->m;
    const wenet_family_opts_t *fo = items[w->idx[0]]->opts;
    wenet_decode_opts_t o = fo->d;
    o.n_threads = w->n_threads;
    hark_err_t err = {0};
    dump_ctx_t dctx = {0};
    int rc = HARK_OK;
    const char *dump = items[w->idx[0]]->dump_dir;
    if (dump) { /* run() gets a dumping item alone */
        if (wenet_asr_device(m->asr) >= 0)
            rc =
                err_set(&err, HARK_ERR_UNSUPPORTED,
                        "dump_dir needs a CPU model (the GPU path keeps its stages on the device)");
        if (!rc)
            rc = mkdir_p(dump, &err);
        if (!rc)
            rc = dump_features(m->asr, w->pcm[0], w->n[0], dump, &err);
        dctx.dir = dump;
        o.debug = dump_stage;
        o.debug_user = &dctx;
    }
    uint64_t t0 = clock_now_ns();
    if (!rc)
        rc = wenet_recognize(w->w, &o, w->pcm, w->n, k, w->res, &err);
    if (!rc && dctx.failed) {
        for (int j = 0; j < k; j++)
            wenet_result_free(&w->res[j]);
        rc = err_set(&err, HARK_ERR_IO, "could not write every stage under %s", dump);
    }
    uint64_t t1 = clock_now_ns();
    if (tm)
        tm->infer_ns += t1 - t0;
    if (rc) {
        if (k > 1 && rc != HARK_ERR_CUDA)
            return rc; /* the caller retries one by one */
        for (int j = 0; j < k; j++) {
            emit_error(items[w->idx[j]], rc, &err);
            w->done[w->idx[j]] = 1;
        }
        if (rc == HARK_ERR_CUDA || *worst == HARK_OK)
            *worst = rc; /* a CUDA error wins: it marks the instance unhealthy */
        *n_failed += k;
        return HARK_OK;
    }
    for (int j = 0; j < k; j++) {
        family_item_t *it = items[w->idx[j]];
        asr_result_t r;
        hark_err_t e = {0};
        int rc1 = result_convert(m, &w->res[j], w->n[j], it->want_words, &r, &e);
        wenet_result_free(&w->res[j]);
        if (rc1) {
            asr_result_free(&r);
            emit_error(it, rc1, &e);
            if (*worst == HARK_OK)
                *worst = rc1;
            ++*n_failed;
        } else {
            family_event_t ev = {.kind = FAMILY_EV_DONE, .status = HARK_OK, .asr = &r};
            it->emit(it, &ev);
            asr_result_free(&r); /* what emit did not take */
        }
        w->done[w->idx[j]] = 1;
    }
    if (tm)
        tm->output_ns += clock_now_ns() - t1;
    return HARK_OK;
}

static int wf_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    family_exec_times_t tm = {0};
    if (n > w->max_batch) {
        hark_err_t e = {0};
        err_set(&e, HARK_ERR_TOO_LARGE, "batch of %d exceeds the worker's %d", n, w->max_batch);
        for (int i = 0; i < n; i++)
            emit_error(items[i], e.status, &e);
        return err_set(err, e.status, "%s", e.msg);
    }
    memset(w->done, 0, (size_t)n);
    int worst = HARK_OK, n_failed = 0;
    uint64_t t_in = clock_now_ns();
    for (int i = 0; i < n; i++) {
        if (w->done[i])
            continue;
        /* a run: item i and every later one with equal options (dumping items go alone) */
        const wenet_decode_opts_t *oi = &((const wenet_family_opts_t *)items[i]->opts)->d;
        int k = 0;
        for (int j = i; j < n; j++) {
            const wenet_decode_opts_t *oj = &((const wenet_family_opts_t *)items[j]->opts)->d;
            if (w->done[j] || !same_opts(oi, oj) ||
                (k && (items[j]->dump_dir || items[i]->dump_dir)))
                continue;
            w->idx[k] = j;
            w->pcm[k] = items[j]->pcm;
            w->n[k] = items[j]->n;
            k++;
        }
        tm.input_ns += clock_now_ns() - t_in;
        if (run(w, items, k, &tm, &worst, &n_failed) != HARK_OK) {
            /* the batch failed as a whole: alone, each failure stays with its item */
            int idx[1];
            for (int j = 0; j < k; j++) {
                idx[0] = w->idx[j];
                w->idx[0] = idx[0];
                w->pcm[0] = items[idx[0]]->pcm;
                w->n[0] = items[idx[0]]->n;
                run(w, items, 1, &tm, &worst, &n_failed);
            }
        }
        t_in = clock_now_ns();
    }
    if (times)
        *times = tm;
    if (worst == HARK_ERR_CUDA)
        return err_set(err, worst, "a CUDA call failed (the items carry the message)");
    if (n_failed == n && n > 0)
        return err_set(err, worst, "every item failed (the items carry the messages)");
    return HARK_OK;
}

const family_t wenet_family = {
    .name = "wenet_u2",
    .task = FAMILY_TASK_ASR,
    .streaming = 0,
    .opts_size = sizeof(wenet_family_opts_t),
    .load = wf_load,
    .unload = wf_unload,
    .info = wf_info,
    .parse_opts = wf_parse_opts,
    .batch_key = wf_batch_key,
    .worker_create = wf_worker_create,
    .worker_destroy = wf_worker_destroy,
    .stream_open = NULL,
    .stream_close = NULL,
    .execute = wf_execute,
    .bench = wenet_bench_main,
    .inspect = wenet_inspect_main,
    .bench_synthetic = wenet_synthetic_models,
};
