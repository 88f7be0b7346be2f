/* icefall_family.c — icefall's pruned stateless transducers as a model family (family.h):
 * "icefall_transducer", offline ASR over icefall.h on the CPU, or for the zipformer with its
 * encoder on a GPU (load device >= 0: icefall_zf_gpu.h, in `parameters precision`; whole utterances
 * and the streams' steps, each stream's caches in its slot of the worker's device pool, the fbank
 * and the searches on the host), or for the Conformer (pruned_transducer_stateless3) on a GPU (load
 * device >= 0: icefall_gpu.h, in config.pbtxt's `parameters precision` fp32 | fp16 | bf16; greedy
 * and modified beam search on the device, the beam's merges and fast_beam_search's utterances on
 * `parameters search_threads` host threads per instance, 1..64, default 1; no dump_dir; streams:
 * `parameters stream_threads` 1..64, default 1, threads per instance sharing the streams' front
 * ends and searches), served under the generic WAV/WAV_LENS (or AUDIO) -> TRANSCRIPTS contract.
 * Options (config.pbtxt parameters, then the request's): decoding_method greedy_search |
 * modified_beam_search | fast_beam_search (icefall's names; the model's default from the
 * converter's --method; fast_beam_search offline only, on the host: icefall_fast_beam.c), beam_size
 * (modified_beam_search's width, icefall's --beam-size; `beam` is taken as the same, except with
 * fast_beam_search, where beam is icefall's --beam, a number >= 0, beside max_contexts and
 * max_states, 1..1024; their defaults from model.json, the converter's --beam, --max-contexts,
 * --max-states), nbest (1..64 or "all": hypotheses of the final beam
 * returned, best first), for streams the endpointing keys of the WeNet family (endpointing,
 * continuous_decoding: true|false, default false; endpoint_silence_no_speech_ms,
 * endpoint_silence_after_speech_ms, endpoint_max_utterance_ms: the three rules of
 * search/ctc_endpoint.h with sherpa-onnx's transducer defaults 2400, 1200, 20000; silence is the
 * frames on which the search emitted no token, so endpoint_blank_threshold has no use here and
 * is ignored as other keys are), other keys ignored. An execute runs its items'
 * encoders one by one and greedy search over all of them at once (greedy_search_batch).
 * A causal zipformer (icefall_can_stream) also streams: a worker created with max_sequences holds
 * that many icefall_stream_t, made at its creation; stream_open lends one, and the stream items
 * (item->stream) feed it chunk by chunk as streaming_decode.py decodes (icefall_stream_*), with
 * the decoding method and beam of the stream's first item; the stream items of one execute are fed
 * together (icefall_stream_feed: the encoder steps of every stream with a chunk ready run as one
 * batched step, as streaming_decode.py steps its batch of streams; a stream's later items in the
 * same execute in later rounds, in order): a PARTIAL result after each item, the
 * final one with the DONE of the item that ends the stream (its tail padding run); with
 * endpointing, each segment an endpoint ended is a SEGMENT event with its final result (times from
 * the stream's start) before the item's own result, and the stream goes on with a fresh search
 * (continuous_decoding) or stops there (later audio is not decoded; the items' results are that
 * segment's). A model that
 * cannot stream refuses a worker with max_sequences (sequence_batching) by name.
 * Tests: tests/model/icefall/test_icefall_family.c, tests/model/icefall/test_icefall_stream.c,
 * tests/model/icefall/test_icefall_endpoint.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_gpu.h"
#include "model/icefall/icefall_zf_gpu.h"
#include "ops/ops.h"
#include "text/words.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    int method; /* icefall_method_t */
    int beam_size;
    icefall_fast_beam_opts_t fast_beam; /* fast_beam_search's beam, max_contexts, max_states */
    int nbest; /* modified_beam_search: hypotheses of the final beam returned, best first; 0 all */
    int endpointing, continuous; /* streams: endpoint rules on; go on after one */
    ctc_endpoint_rule_t ep_rule[CTC_ENDPOINT_RULES]; /* sherpa-onnx's transducer defaults */
} icefall_family_opts_t;

int icefall_inspect_main(int argc, char **argv); /* icefall_inspect.c */
int icefall_bench_main(int argc, char **argv);   /* icefall_bench.c */

struct family_model {
    icefall_model_t *m;
    icefall_gpu_model_t *gm; /* the Conformer on a GPU, or NULL */
    icefall_zf_gpu_t *zg;    /* the zipformer's encoder on a GPU, or NULL */
    int device;              /* -1: CPU */
    int search_threads;      /* config.pbtxt's search_threads (GPU models' beam search) */
    int stream_threads;      /* config.pbtxt's stream_threads (the streams' host work) */
    char kind[160];
};

/* one stream slot of a worker (item->stream) */
typedef struct {
    icefall_stream_t *s;
    int used;   /* lent by stream_open */
    int opened; /* started with its first item's options */
    int failed; /* the status that broke the stream, or 0 */
} if_stream_t;

struct family_worker {
    const family_model_t *fm;
    icefall_worker_t *w;
    icefall_gpu_worker_t *gw;     /* a GPU Conformer's (then w is NULL) */
    icefall_zf_gpu_worker_t *zgw; /* a GPU zipformer's encoder (w's, which searches) */
    int max_batch;
    double max_seconds;
    if_stream_t *slots; /* (max_sequences) */
    int max_sequences, n_streams;
    /* an execute's stream items (max_sequences each): the items, taken yet, a round's feeds */
    family_item_t **s_items, **f_items;
    char *s_taken;
    icefall_stream_feed_t *feeds;
};

static int if_load(const char *dir, const family_load_opts_t *lo, const family_params_t *cfg,
                   family_model_t **out, hark_err_t *err)
{
    family_load_opts_t l = lo ? *lo : (family_load_opts_t){.device = -1};
    /* config.pbtxt's precision must be a known one wherever the model is loaded; it applies on a
     * GPU (the CPU path is fp32) */
    ops_dtype_t dt = OPS_F32;
    const char *cname = family_param(cfg, "precision");
    if (cname && family_precision(cname, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall_transducer: parameters precision \"%s\": expected fp32, fp16 or "
                       "bf16",
                       cname);
    const char *prec = l.precision ? l.precision : l.device >= 0 ? cname : NULL;
    dt = OPS_F32;
    if (prec && family_precision(prec, &dt))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall_transducer: precision \"%s\": expected fp32, fp16 or bf16", prec);
    if (l.device < 0 && dt != OPS_F32)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall_transducer: precision \"%s\": the CPU path is fp32", prec);
    family_model_t *fm = hark_calloc(1, sizeof *fm);
    if (!fm)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    fm->device = l.device < 0 ? -1 : l.device;
    /* search_threads: a GPU worker's threads for modified beam search's merges (host work) */
    fm->search_threads = 1;
    int rc = family_param_int(cfg, "search_threads", 1, 64, &fm->search_threads, err);
    if (rc == HARK_ERR_NOT_FOUND)
        rc = HARK_OK;
    else if (rc)
        err_prefix(err, rc, "config.pbtxt parameters");
    fm->stream_threads = 1;
    if (!rc) {
        rc = family_param_int(cfg, "stream_threads", 1, 64, &fm->stream_threads, err);
        if (rc == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
        else if (rc)
            err_prefix(err, rc, "config.pbtxt parameters");
    }
    if (!rc)
        rc = icefall_load(dir, l.version, &fm->m, err);
    if (!rc && l.device >= 0 && icefall_config(fm->m)->encoder_type == ICEFALL_ZIPFORMER) {
        rc = icefall_zf_gpu_create(fm->m, l.device, dt, &fm->zg, err);
    } else if (!rc && l.device >= 0) {
        rc = icefall_gpu_model_create(fm->m, l.device, dt, &fm->gm, err);
    }
    if (rc) {
        icefall_destroy(fm->m);
        hark_free(fm);
        return rc;
    }
    const icefall_config_t *c = icefall_config(fm->m);
    const char *pn = dt == OPS_F16 ? "fp16" : dt == OPS_BF16 ? "bf16" : "fp32";
    if (c->encoder_type == ICEFALL_ZIPFORMER)
        snprintf(fm->kind, sizeof fm->kind,
                 "icefall zipformer: %d stacks, %d layers, output dim %d, vocab %d, %s%s",
                 c->zf.n_stacks, c->n_layers, c->d, c->vocab, pn, fm->zg ? " (gpu encoder)" : "");
    else
        snprintf(fm->kind, sizeof fm->kind,
                 "icefall pruned_transducer_stateless3: conformer %d layers d %d, vocab %d, %s%s",
                 c->n_layers, c->d, c->vocab, pn, fm->gm ? " (gpu)" : "");
    *out = fm;
    return HARK_OK;
}

static void if_unload(family_model_t *fm)
{
    if (!fm)
        return;
    icefall_gpu_model_destroy(fm->gm);
    icefall_zf_gpu_destroy(fm->zg);
    icefall_destroy(fm->m);
    hark_free(fm);
}

static void if_info(const family_model_t *fm, family_info_t *out)
{
    const icefall_config_t *c = icefall_config(fm->m);
    *out = (family_info_t){.sample_rate = c->sample_rate,
                           .frame_ms = icefall_frame_ms(fm->m, 1),
                           .device = fm->device,
                           .kind = fm->kind,
                           .frame_pad_id = c->blank_id};
}

static int apply_params(const family_params_t *p, const char *where, icefall_family_opts_t *o,
                        hark_err_t *err)
{
    const char *v = family_param(p, "decoding_method");
    if (v) {
        icefall_method_t mt;
        if (icefall_method_parse(v, &mt)) {
            if (!strncmp(v, "fast_beam_search", 16))
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "%sdecoding_method '%s' is not implemented yet (fast_beam_search "
                               "is icefall's one best with the trivial graph; no LG or n-best)",
                               where, v);
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "%sdecoding_method '%s' is not one of greedy_search, "
                           "modified_beam_search, fast_beam_search",
                           where, v);
        }
        o->method = (int)mt;
    }
    int rc = HARK_OK;
    /* fast_beam_search: beam is icefall's --beam (a number), with max_contexts and max_states;
     * for the other methods beam is beam_size's other name (below) */
    if (o->method == ICEFALL_FAST_BEAM) {
        icefall_fast_beam_opts_t fb = o->fast_beam;
        if ((rc = family_param_double(p, "beam", &fb.beam, err)) == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
        if (!rc && (rc = family_param_int(p, "max_contexts", 1, ICEFALL_FAST_BEAM_MAX_ITEMS,
                                          &fb.max_contexts, err)) == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
        if (!rc && (rc = family_param_int(p, "max_states", 1, ICEFALL_FAST_BEAM_MAX_ITEMS,
                                          &fb.max_states, err)) == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
        if (!rc)
            rc = icefall_fast_beam_check(&fb, err);
        if (rc)
            return *where ? err_prefix(err, rc, "%.*s", (int)strlen(where) - 1, where) : rc;
        o->fast_beam = fb;
    }
    v = family_param(p, "nbest");
    if (v && !strcmp(v, "all")) {
        o->nbest = 0;
    } else if (v) {
        int nb;
        rc = family_param_int(p, "nbest", 1, 64, &nb, err);
        if (rc)
            return *where ? err_prefix(err, rc, "%.*s", (int)strlen(where) - 1, where) : rc;
        o->nbest = nb;
    }
    static const char *const beam_keys[] = {"beam", "beam_size"}; /* beam_size wins */
    for (int k = o->method == ICEFALL_FAST_BEAM; k < 2; k++) {
        int b;
        rc = family_param_int(p, beam_keys[k], 1, 64, &b, err);
        if (rc == HARK_OK)
            o->beam_size = b;
        else if (rc != HARK_ERR_NOT_FOUND) /* the message names the key */
            return *where ? err_prefix(err, rc, "%.*s", (int)strlen(where) - 1, where) : rc;
    }
    /* the WeNet family's endpointing keys */
    return family_endpoint_params(p, where, &o->endpointing, &o->continuous, o->ep_rule, err);
}

static int if_parse_opts(const family_model_t *fm, const family_params_t *cfg,
                         const family_params_t *req, void *opts, hark_err_t *err)
{
    icefall_family_opts_t *o = opts;
    const icefall_config_t *c = icefall_config(fm->m);
    o->method = c->method;
    o->beam_size = c->beam_size;
    o->fast_beam = c->fast_beam;
    o->nbest = 0;
    o->endpointing = o->continuous = 0;
    endpoint_rules_transducer_default(o->ep_rule);
    int rc = apply_params(cfg, "config.pbtxt parameters ", o, err);
    if (!rc)
        rc = apply_params(req, "", o, err);
    return rc;
}

static uint64_t if_batch_key(const void *opts)
{
    const icefall_family_opts_t *o = opts;
    uint64_t k = 0x696365666c6cull ^ ((uint64_t)o->method << 8) ^ (uint64_t)o->beam_size ^
                 ((uint64_t)o->nbest << 16);
    if (o->method == ICEFALL_FAST_BEAM) { /* items of one batch share these too */
        uint64_t bits;
        memcpy(&bits, &o->fast_beam.beam, sizeof bits);
        k ^= (bits * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)o->fast_beam.max_contexts << 24) ^
             ((uint64_t)o->fast_beam.max_states << 40);
    }
    return k;
}

static void if_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    for (int i = 0; w->slots && i < w->max_sequences; i++)
        icefall_stream_destroy(w->slots[i].s);
    hark_free(w->slots);
    hark_free(w->s_items);
    hark_free(w->f_items);
    hark_free(w->s_taken);
    hark_free(w->feeds);
    icefall_worker_destroy(w->w);
    icefall_zf_gpu_worker_destroy(w->zgw);
    icefall_gpu_worker_destroy(w->gw);
    hark_free(w);
}

static int if_worker_create(const family_model_t *fm, const family_worker_opts_t *wo,
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
    if (wo->n_threads > 0)
        ops_set_threads(wo->n_threads);
    int rc = fm->gm ? icefall_gpu_worker_create(fm->gm, wo->max_batch, wo->max_seconds, &w->gw, err)
                    : icefall_worker_create(fm->m, wo->max_seconds, &w->w, err);
    if (!rc && w->gw)
        rc = icefall_gpu_set_search_threads(w->gw, fm->search_threads, err);
    if (!rc && fm->zg) { /* the encoder on the GPU, the front end and the searches here */
        rc = icefall_zf_gpu_worker_create(
            fm->zg, icefall_worker_max_frames(w->w),
            wo->max_sequences > 0 && icefall_can_stream(fm->m) ? wo->max_sequences : 0, &w->zgw,
            err);
        if (!rc)
            rc = icefall_worker_use_gpu(w->w, w->zgw, err);
    }
    if (!rc && wo->max_sequences > 0) {
        if (!icefall_can_stream(fm->m))
            rc = err_set(err, HARK_ERR_UNSUPPORTED,
                         "icefall_transducer: this model cannot stream (sequence_batching): only "
                         "a causal zipformer (converted with --causal True, one --chunk-size and "
                         "a --left-context-frames > 0) streams; serve it with dynamic_batching");
        else if (!(w->slots = hark_calloc((size_t)wo->max_sequences, sizeof *w->slots)) ||
                 !(w->s_items = hark_calloc((size_t)wo->max_sequences, sizeof *w->s_items)) ||
                 !(w->f_items = hark_calloc((size_t)wo->max_sequences, sizeof *w->f_items)) ||
                 !(w->s_taken = hark_calloc((size_t)wo->max_sequences, 1)) ||
                 !(w->feeds = hark_calloc((size_t)wo->max_sequences, sizeof *w->feeds)))
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %d streams", wo->max_sequences);
        else
            rc = icefall_worker_reserve_streams(w->w, wo->max_sequences, err);
        if (!rc && fm->stream_threads > 1)
            rc = icefall_worker_set_stream_threads(w->w, fm->stream_threads, err);
        if (!rc)
            w->max_sequences = wo->max_sequences;
        for (int i = 0; !rc && i < w->max_sequences; i++)
            if ((rc = icefall_stream_create(fm->m, &w->slots[i].s, err)))
                err_prefix(err, rc, "stream %d of %d (max_sequences)", i + 1, w->max_sequences);
            else if (w->zgw)
                icefall_stream_set_slot(w->slots[i].s, i);
    }
    if (rc) {
        if_worker_destroy(w);
        return rc;
    }
    *out = w;
    return HARK_OK;
}

/* ---- streams -------------------------------------------------------------------------------- */

static int if_stream_open(family_worker_t *w, void **stream, hark_err_t *err)
{
    *stream = NULL;
    if (!w->slots)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "this worker has no stream slots (created with max_sequences 0)");
    for (int i = 0; i < w->max_sequences; i++)
        if (!w->slots[i].used) {
            w->slots[i] = (if_stream_t){.s = w->slots[i].s, .used = 1};
            w->n_streams++;
            *stream = &w->slots[i];
            return HARK_OK;
        }
    return err_set(err, HARK_ERR_TOO_LARGE,
                   "all %d stream slots of this worker are in use (max_sequences)",
                   w->max_sequences);
}

static void if_stream_close(family_worker_t *w, void *stream)
{
    if_stream_t *ws = stream;
    if (!ws || !ws->used)
        return;
    ws->used = ws->opened = ws->failed = 0;
    w->n_streams--;
}

/* ---- execute -------------------------------------------------------------------------------- */

static int hyp_convert(const icefall_model_t *m, icefall_hyp_t *h, asr_hyp_t *o, hark_err_t *err)
{
    memset(o, 0, sizeof *o);
    o->score = h->score;
    o->n_tokens = h->n;
    int rc = icefall_text(m, h, &o->text, err);
    if (rc)
        return rc;
    if (h->n > 0) {
        o->tokens = h->tokens;
        h->tokens = NULL;
        if (!(o->times_ms = hark_malloc(sizeof(int) * (size_t)h->n)))
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int i = 0; i < h->n; i++)
            o->times_ms[i] = icefall_frame_ms(m, h->times[i]);
    }
    return HARK_OK;
}

static void asr_hyp_free_(asr_hyp_t *h)
{
    hark_free(h->text);
    hark_free(h->tokens);
    hark_free(h->times_ms);
    memset(h, 0, sizeof *h);
}

/* icefall_result_t -> asr_result_t (r zeroed first; on error the caller frees it) */
static int result_convert(const icefall_model_t *m, icefall_result_t *s, size_t n_samples,
                          const family_item_t *it, int nbest, asr_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    const icefall_config_t *c = icefall_config(m);
    r->duration_s = (double)n_samples / c->sample_rate;
    r->word_sep = 1;
    int *frames = NULL;
    if (it->want_words && s->best.n > 0) {
        if (!(frames = hark_malloc(sizeof(int) * (size_t)s->best.n)))
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        memcpy(frames, s->best.times, sizeof(int) * (size_t)s->best.n);
    }
    int rc = hyp_convert(m, &s->best, &r->best, err);
    if (!rc && s->n_nbest > 0) {
        if (!(r->nbest = hark_calloc((size_t)s->n_nbest, sizeof *r->nbest)))
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int i = 0; !rc && i < s->n_nbest; i++) {
            rc = hyp_convert(m, &s->nbest[i], &r->nbest[i], err);
            r->n_nbest = i + 1;
        }
        /* best first: by the length-normalised log-probability that picked the best
         * (log_prob / (tokens + context_size)), icefall's beam order among equals */
        for (int i = 1; !rc && i < r->n_nbest; i++) {
            asr_hyp_t h = r->nbest[i];
            double key = h.score / (h.n_tokens + c->context_size);
            int j = i;
            for (; j > 0; j--) {
                const asr_hyp_t *p = &r->nbest[j - 1];
                if (!(key > p->score / (p->n_tokens + c->context_size)))
                    break;
                r->nbest[j] = r->nbest[j - 1];
            }
            r->nbest[j] = h;
        }
        while (!rc && nbest > 0 && r->n_nbest > nbest) /* the n best of the beam */
            asr_hyp_free_(&r->nbest[--r->n_nbest]);
    }
    if (!rc && frames) {
        word_time_t *wt = NULL;
        int nw = 0;
        rc = words_from_tokens(icefall_units(m), UNITS_STYLE_BPE, r->best.tokens, frames,
                               r->best.n_tokens, icefall_frame_ms(m, 1), &wt, &nw, err);
        if (!rc && nw > 0) {
            if (!(r->words = hark_calloc((size_t)nw, sizeof *r->words)))
                rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            for (int i = 0; !rc && i < nw; i++) {
                r->words[i].text = wt[i].text;
                wt[i].text = NULL;
                r->words[i].start_ms = wt[i].start_ms;
                r->words[i].end_ms = wt[i].end_ms;
                r->n_words = i + 1;
            }
        }
        words_free(wt, nw);
    }
    hark_free(frames);
    return rc;
}

static void emit_error(family_item_t *it, int rc, const hark_err_t *e)
{
    family_event_t ev = {.kind = FAMILY_EV_DONE,
                         .status = rc,
                         .error = e && e->msg[0] ? e->msg : hark_status_str(rc)};
    it->emit(it, &ev);
}

/* res as the item's DONE (kind FAMILY_EV_DONE), or as a PARTIAL followed by a DONE without a
 * result (a stream's item that does not end it); n_samples: the audio res covers */
static void emit_result(family_worker_t *w, family_item_t *it, icefall_result_t *res,
                        size_t n_samples, family_event_kind_t kind, int *worst, int *n_failed)
{
    hark_err_t e = {0};
    asr_result_t r;
    const icefall_family_opts_t *o = it->opts;
    int rc = result_convert(w->fm->m, res, n_samples, it, o ? o->nbest : 0, &r, &e);
    if (rc) {
        asr_result_free(&r);
        emit_error(it, rc, &e);
        *worst = *worst ? *worst : rc;
        (*n_failed)++;
        return;
    }
    family_event_t ev = {.kind = kind, .status = HARK_OK, .asr = &r};
    it->emit(it, &ev);
    asr_result_free(&r);
    if (kind != FAMILY_EV_DONE) {
        family_event_t done = {.kind = FAMILY_EV_DONE, .status = HARK_OK};
        it->emit(it, &done);
    }
}

/* The segments endpoints ended in the item's stream, each a SEGMENT event with its final result;
 * the first failed conversion's status (in err; the rest are still emitted) or HARK_OK. */
static int emit_segments(family_worker_t *w, family_item_t *it, hark_err_t *err)
{
    int worst = HARK_OK;
    if_stream_t *ws = it->stream;
    const icefall_model_t *m = w->fm->m;
    const icefall_family_opts_t *o = it->opts;
    icefall_segment_t sg;
    while (icefall_stream_pop_segment(ws->s, &sg)) {
        hark_err_t e = {0};
        asr_result_t r;
        int rc =
            result_convert(m, &sg.res, icefall_stream_samples(ws->s), it, o ? o->nbest : 0, &r, &e);
        if (!rc) {
            family_event_t ev = {.kind = FAMILY_EV_SEGMENT,
                                 .status = HARK_OK,
                                 .asr = &r,
                                 .seg_start_s = icefall_frame_ms(m, sg.start_frame) / 1000.0,
                                 .seg_end_s = icefall_frame_ms(m, sg.end_frame) / 1000.0};
            it->emit(it, &ev);
        }
        asr_result_free(&r);
        icefall_result_free(&sg.res);
        if (rc && !worst) {
            worst = rc;
            *err = e;
        }
    }
    return worst;
}

/* A stream item before its audio: its stream started with this item's options when it is the
 * stream's first; a failed or ended stream refuses it. */
static int stream_item_prepare(family_worker_t *w, family_item_t *it, hark_err_t *e)
{
    if_stream_t *ws = it->stream;
    const icefall_family_opts_t *o = it->opts;
    const icefall_config_t *c = icefall_config(w->fm->m);
    int rc = HARK_OK;
    if (ws->failed) {
        rc = err_set(e, ws->failed, "the stream failed earlier (%s)", hark_status_str(ws->failed));
    } else if (!ws->opened) {
        rc = icefall_stream_start(ws->s,
                                  o ? (icefall_method_t)o->method : (icefall_method_t)c->method,
                                  o ? o->beam_size : c->beam_size, e);
        if (!rc && o && o->endpointing)
            rc = icefall_stream_set_endpointing(ws->s, o->ep_rule, o->continuous, e);
        if (rc)
            ws->failed = rc;
        ws->opened = 1;
    }
    if (!rc && icefall_stream_ended(ws->s))
        rc = err_set(e, HARK_ERR_CLOSED, "the stream's audio has already ended (%s)",
                     "an item after its end");
    return rc;
}

/* A stream item after its audio went in (rc: how that went, described in e): the segments its
 * endpoints ended, then its result or its error. */
static void stream_item_finish(family_worker_t *w, family_item_t *it, int rc, hark_err_t *e,
                               int *worst, int *n_failed)
{
    if_stream_t *ws = it->stream;
    hark_err_t se = {0};
    int src = emit_segments(w, it, &se);
    if (!rc && src) {
        rc = src;
        *e = se;
    }
    if (rc) {
        /* bad samples are refused before any is taken: the stream goes on; anything else
         * breaks it */
        if (rc != HARK_ERR_INVALID_ARG && rc != HARK_ERR_CLOSED)
            ws->failed = rc;
        emit_error(it, rc, e);
        *worst = *worst ? *worst : rc;
        (*n_failed)++;
        return;
    }
    icefall_result_t res;
    if ((rc = icefall_stream_result(ws->s, &res, e))) {
        emit_error(it, rc, e);
        *worst = *worst ? *worst : rc;
        (*n_failed)++;
        return;
    }
    emit_result(w, it, &res, icefall_stream_samples(ws->s),
                it->stream_end ? FAMILY_EV_DONE : FAMILY_EV_PARTIAL, worst, n_failed);
    icefall_result_free(&res);
}

/* The n (<= max_sequences) stream items of an execute, in rounds: each round takes, in order, the
 * first item not yet run of every stream, feeds them together (icefall_stream_feed: their encoder
 * steps batched), then finishes each; a stream's next item waits for the next round. */
static void run_stream_items(family_worker_t *w, family_item_t **items, int n, int *worst,
                             int *n_failed)
{
    memset(w->s_taken, 0, (size_t)n);
    for (int left = n; left > 0;) {
        int nf = 0;
        for (int k = 0; k < n; k++) {
            if (w->s_taken[k])
                continue;
            family_item_t *it = items[k];
            int busy = 0;
            for (int j = 0; j < nf && !busy; j++)
                busy = w->f_items[j]->stream == it->stream;
            if (busy)
                continue;
            w->s_taken[k] = 1;
            left--;
            hark_err_t e = {0};
            int rc = stream_item_prepare(w, it, &e);
            if (rc) {
                stream_item_finish(w, it, rc, &e, worst, n_failed);
                continue;
            }
            if_stream_t *ws = it->stream;
            w->feeds[nf] = (icefall_stream_feed_t){
                .s = ws->s, .pcm = it->pcm, .n = it->n, .input_done = it->stream_end};
            w->f_items[nf++] = it;
        }
        if (nf == 0)
            continue;
        icefall_stream_feed(w->w, w->feeds, nf);
        for (int j = 0; j < nf; j++)
            stream_item_finish(w, w->f_items[j], w->feeds[j].status, &w->feeds[j].err, worst,
                               n_failed);
    }
}

/* Items of bad audio fail alone first; an item asking for a dump runs alone (its stages); the
 * rest run as one icefall_run (greedy search batched over them). */
static int if_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    family_exec_times_t tm = {0};
    const icefall_model_t *m = w->fm->m;
    const icefall_config_t *c = icefall_config(m);
    const size_t max_n = (size_t)floor(w->max_seconds * c->sample_rate);
    int worst = HARK_OK, n_failed = 0, nb = 0;
    size_t cap = (size_t)(n > 0 ? n : 1);
    family_item_t **run = hark_calloc(cap, sizeof *run);
    const float **pcm = hark_calloc(cap, sizeof *pcm);
    size_t *lens = hark_calloc(cap, sizeof *lens);
    icefall_result_t *res = hark_calloc(cap, sizeof *res);
    icefall_run_opts_t ro = {0};
    uint64_t t0 = clock_now_ns();
    int n_stream = 0, n_offline = 0;
    for (int i = 0; i < n; i++)
        n_stream += !!items[i]->stream;
    if (n_stream > 0 && w->max_sequences > 0) {
        /* in groups of at most max_sequences items, in order (a sequence's later items in a later
         * group or round) */
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (!items[i]->stream)
                continue;
            w->s_items[k++] = items[i];
            if (k == w->max_sequences) {
                run_stream_items(w, w->s_items, k, &worst, &n_failed);
                k = 0;
            }
        }
        if (k > 0)
            run_stream_items(w, w->s_items, k, &worst, &n_failed);
    }
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        const icefall_family_opts_t *o = it->opts;
        hark_err_t e = {0};
        int rc = HARK_OK;
        if (it->stream) {
            if (w->max_sequences < 1) {
                err_set(&e, HARK_ERR_TOO_LARGE, "%d stream items for a worker without streams",
                        n_stream);
                emit_error(it, e.status, &e);
                worst = worst ? worst : e.status;
                n_failed++;
            }
            continue;
        }
        if (!run || !pcm || !lens || !res)
            rc = err_set(&e, HARK_ERR_NOMEM, "out of memory");
        else if (++n_offline > w->max_batch)
            rc = err_set(&e, HARK_ERR_TOO_LARGE, "batch of %d exceeds the worker's %d",
                         n - n_stream, w->max_batch);
        else if (it->n == 0)
            rc = err_set(&e, HARK_ERR_INVALID_ARG, "empty audio");
        else if (icefall_num_frames(m, it->n) < icefall_min_frames(m))
            rc = err_set(&e, HARK_ERR_INVALID_ARG,
                         "audio of %zu samples is too short: the encoder needs at least %d feature "
                         "frames (%d samples)",
                         it->n, icefall_min_frames(m), icefall_min_frames(m) * 160 - 80);
        else if (it->n > max_n)
            rc = err_set(&e, HARK_ERR_TOO_LARGE,
                         "audio of %.2f s is longer than the worker's maximum (%.2f s)",
                         (double)it->n / c->sample_rate, w->max_seconds);
        for (size_t k = 0; !rc && k < it->n; k++)
            if (!isfinite(it->pcm[k]))
                rc = err_set(&e, HARK_ERR_INVALID_ARG, "sample %zu of the audio is %s", k,
                             isnan(it->pcm[k]) ? "NaN" : "infinite");
        if (!rc) {
            /* one batch key: every item shares method and beam */
            ro.method = o ? (icefall_method_t)o->method : (icefall_method_t)c->method;
            ro.beam_size = o ? o->beam_size : c->beam_size;
            ro.fast_beam = o ? o->fast_beam : c->fast_beam;
            if (!it->dump_dir || w->gw) {
                if (it->dump_dir && w->gw) {
                    rc = err_set(&e, HARK_ERR_UNSUPPORTED,
                                 "dump_dir needs a CPU model (the GPU path keeps its stages on "
                                 "the device)");
                    emit_error(it, rc, &e);
                    worst = worst ? worst : rc;
                    n_failed++;
                    continue;
                }
                run[nb] = it;
                pcm[nb] = it->pcm;
                lens[nb++] = it->n;
                continue;
            }
            /* the dump: this item alone, with its stages */
            family_dump_t dctx = {.dir = it->dump_dir};
            icefall_run_opts_t one = ro;
            one.stage = family_dump_f32;
            one.stage_user = &dctx;
            icefall_result_t r1;
            rc = family_mkdir_p(it->dump_dir, &e);
            if (!rc)
                rc = icefall_run(w->w, &it->pcm, &it->n, 1, &one, &r1, &e);
            if (!rc && dctx.failed) {
                icefall_result_free(&r1);
                rc = err_set(&e, HARK_ERR_IO, "could not write every stage under %s", it->dump_dir);
            }
            if (!rc) {
                emit_result(w, it, &r1, it->n, FAMILY_EV_DONE, &worst, &n_failed);
                icefall_result_free(&r1);
                continue;
            }
        }
        emit_error(it, rc, &e);
        worst = worst ? worst : rc;
        n_failed++;
    }
    uint64_t t1 = clock_now_ns();
    tm.input_ns = 0;
    if (nb > 0) {
        hark_err_t e = {0};
        int rc = w->gw ? icefall_gpu_run(w->gw, pcm, lens, nb, &ro, res, &e)
                       : icefall_run(w->w, pcm, lens, nb, &ro, res, &e);
        uint64_t t2 = clock_now_ns();
        tm.infer_ns = t2 - t0;
        for (int i = 0; i < nb; i++) {
            if (rc) {
                emit_error(run[i], rc, &e);
                worst = worst ? worst : rc;
                n_failed++;
            } else {
                emit_result(w, run[i], &res[i], run[i]->n, FAMILY_EV_DONE, &worst, &n_failed);
            }
            icefall_result_free(&res[i]);
        }
        tm.output_ns = clock_now_ns() - t2;
    } else {
        tm.infer_ns = t1 - t0;
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

const family_t icefall_transducer_family = {
    .name = "icefall_transducer",
    .task = FAMILY_TASK_ASR,
    .streaming = 0,
    .opts_size = sizeof(icefall_family_opts_t),
    .load = if_load,
    .unload = if_unload,
    .info = if_info,
    .parse_opts = if_parse_opts,
    .batch_key = if_batch_key,
    .worker_create = if_worker_create,
    .worker_destroy = if_worker_destroy,
    .stream_open = if_stream_open,
    .stream_close = if_stream_close,
    .execute = if_execute,
    .bench = icefall_bench_main,
    .inspect = icefall_inspect_main,
    .bench_synthetic = NULL,
    .io = NULL,
};
