/* wenet_family.c — WeNet U2/U2++ as a model family (family.h): "wenet_u2", offline ASR over
 * wenet_asr.h and chunk-by-chunk streams over wenet_stream.h. Decoding options come from
 * config.pbtxt parameters, then the request's (decoding_method, beam_size, nbest — 1 .. beam_size
 * or "all" —, ctc_weight, reverse_weight, decoding_chunk_size, num_decoding_left_chunks;
 * config.pbtxt may also give precision); execute runs wenet_recognize on the offline items and
 * turns each wenet_result_t into an asr_result_t (token times in ms, words with times on
 * request). decoding_chunk_size / num_decoding_left_chunks: a stream's chunk (16 when no
 * parameter gives one) and left context (-1: all); an offline item decodes with that chunk mask
 * only when a parameter gives decoding_chunk_size. Stream items (item->stream) feed the streams
 * of the worker's pool (family_worker_opts_t.max_sequences), stepped in batches. Endpointing
 * (parameters endpointing, continuous_decoding: true|false; endpoint_silence_no_speech_ms,
 * endpoint_silence_after_speech_ms, endpoint_max_utterance_ms, endpoint_blank_threshold: WeNet's
 * three rules, search/ctc_endpoint.h): at an endpoint a stream emits a SEGMENT event with the
 * segment's final result; a continuous stream goes on with a fresh search, one without continuous
 * decoding ends there (its items' results are that segment's final one). A fourth rule, the VAD's
 * (config.pbtxt parameter endpoint_vad_model: a silero_vad model of the repository, or a path;
 * endpoint_vad_silence_ms, default 500, and endpoint_vad_threshold, default 0.5): with
 * endpointing on, Silero VAD runs on each stream's audio as it comes (silero-vad's rules, that
 * silence as min_silence_duration_ms) and a speech segment it closes ends the recogniser's
 * segment once the encoder has passed its end.
 * Tests: tests/model/wenet/test_wenet_family.c, tests/model/wenet/test_wenet_stream.c,
 * tests/model/wenet/test_wenet_endpoint.c */
#include "model/family.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "model/wenet/wenet_asr.h"
#include "model/wenet/wenet_stream.h"
#include "model/wenet/wenet_tools.h"
#include "text/units.h"
#include "text/words.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define REQ_MAX_BEAM 100 /* request parameters: as the server has always limited them */
#define STREAM_CHUNK 16  /* decoding_chunk_size of streams when no parameter gives one (WeNet's) */
#define STREAM_MAX_CHUNK                                                                           \
    64 /* the largest chunk a worker's streams take, unless config.pbtxt's                         \
          decoding_chunk_size is larger (then that one) */

typedef struct {
    wenet_decode_opts_t d; /* debug hook and n_threads unset: execute sets them. chunk_size is
                              decoding_chunk_size when a parameter gave one (the chunk mask
                              offline), else 0 (full context) */
    int stream_chunk;      /* a stream's chunk: decoding_chunk_size, or STREAM_CHUNK */
} wenet_family_opts_t;

struct family_model {
    wenet_asr_t *asr;
    int gpu_turns; /* config.pbtxt's gpu_turns: instances take turns on the GPU (wenet_asr.h) */
    int stream_threads; /* config.pbtxt's stream_threads: threads per worker for its streams */
    char kind[96];
    int max_chunk;     /* streams: the largest decoding_chunk_size (STREAM_MAX_CHUNK or config's) */
    silero_vad_t *vad; /* endpoint_vad_model's network, or NULL */
    silero_seg_opts_t vad_o; /* its segment rules */
};

/* one stream (item->stream): its slot of the worker's pool, opened with its first item's opts */
typedef struct {
    wenet_stream_t *s;        /* NULL until the first item */
    size_t samples;           /* audio so far */
    int failed;               /* the status that failed the stream's opening, or 0 */
    int ended;                /* an endpoint without continuous decoding: the stream's result is the
                                 segment's final one, later audio is not decoded */
    int seg_start_frame;      /* encoder frame where the current segment starts */
    int continuous;           /* continuous_decoding of the first item's opts (later items' are not
                                 the stream's: a sequence gives its options at START) */
    silero_vad_stream_t *vad; /* the VAD rule's stream (endpointing with endpoint_vad_model) */
    long long vad_end;        /* a speech end (samples) the encoder has not reached yet, or -1 */
    unsigned long mark;       /* the worker's exec_no of the last execute that fed it */
} wf_stream_t;

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
    char *done; /* (max_batch + max_sequences) item already reported */
    /* streams: the pool (NULL without max_sequences), streams open, one execute's stream items */
    wenet_stream_pool_t *pool;
    int max_sequences, n_streams;
    int *sidx;              /* (max_sequences) */
    wenet_stream_t **ready; /* (max_sequences) */
    int *ready_item;        /* (max_sequences) the execute's item that fed ready[q] */
    /* one execute's stream items on the stream threads: the items, those taking audio, each
     * item's status and error (max_batch + max_sequences each) */
    parallel_t *par; /* stream_threads > 1: the threads, else NULL */
    family_item_t *const *items;
    int *acc, *irc;
    hark_err_t *ierr;
    unsigned long exec_no; /* executes so far (wf_stream_t.mark) */
};

/* ---- load ----------------------------------------------------------------------------------- */

static void wf_unload(family_model_t *m);

/* config.pbtxt's endpoint VAD: its network at the model's rate, its rules */
static int load_vad_rule(family_model_t *m, const char *dir, const family_params_t *cfg,
                         hark_err_t *err)
{
    if (!family_param(cfg, "endpoint_vad_model"))
        return HARK_OK;
    char vdir[4096];
    int rc = family_model_path("wenet_u2", dir, cfg, "endpoint_vad_model", vdir, sizeof vdir, err);
    if (rc == HARK_OK && (rc = silero_vad_load(vdir, 0, &m->vad, err)) != HARK_OK)
        return err_prefix(err, rc, "endpoint_vad_model");
    int rate = wenet_asr_sample_rate(m->asr);
    if (rc == HARK_OK && !silero_vad_rate(m->vad, rate))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "endpoint_vad_model %s: no network for the recogniser's %d Hz", vdir, rate);
    silero_seg_default_opts(&m->vad_o);
    m->vad_o.min_silence_duration_ms = 500;
    int ms = 0;
    double th = 0;
    if (rc == HARK_OK) {
        if ((rc = family_param_int(cfg, "endpoint_vad_silence_ms", 0, 1 << 20, &ms, err)) ==
            HARK_OK)
            m->vad_o.min_silence_duration_ms = ms;
        else if (rc == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
    }
    if (rc == HARK_OK) {
        if ((rc = family_param_double(cfg, "endpoint_vad_threshold", &th, err)) == HARK_OK) {
            if (!(th > 0.0 && th < 1.0))
                rc = err_set(err, HARK_ERR_INVALID_ARG,
                             "endpoint_vad_threshold must be in (0, 1) (got %g)", th);
            m->vad_o.threshold = th;
        } else if (rc == HARK_ERR_NOT_FOUND)
            rc = HARK_OK;
    }
    return rc == HARK_OK ? rc : err_prefix(err, rc, "config.pbtxt parameters");
}

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
    m->max_chunk = STREAM_MAX_CHUNK;
    int chunk = 0;
    if ((rc = family_param_int(cfg, "decoding_chunk_size", 1, 4096, &chunk, err)) == HARK_OK) {
        if (chunk > m->max_chunk)
            m->max_chunk = chunk;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        wf_unload(m);
        return err_prefix(err, rc, "config.pbtxt parameters");
    }
    /* stream_threads: threads per instance for its streams' host work (audio in, CTC searches,
     * answers; the caller counts as one), 1 by default */
    m->stream_threads = 1;
    if ((rc = family_param_int(cfg, "stream_threads", 1, PARALLEL_MAX_THREADS, &m->stream_threads,
                               err)) != HARK_OK &&
        rc != HARK_ERR_NOT_FOUND) {
        wf_unload(m);
        return err_prefix(err, rc, "config.pbtxt parameters");
    }
    if ((rc = load_vad_rule(m, dir, cfg, err)) != HARK_OK) {
        wf_unload(m);
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
    silero_vad_destroy(m->vad);
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
                        int max_beam, int max_chunk, hark_err_t *err)
{
    const char *v = family_param(p, "decoding_method");
    if (v && wenet_parse_method(v, &d->method))
        return err_set(err, HARK_ERR_INVALID_ARG, "%sdecoding_method '%s' is not one of %s", where,
                       v, METHODS);
    int rc, beam = 0, nbest = 0;
    double x;
    /* range and integer errors in family_param_int's words (one wording for a request over
     * HTTP or gRPC and for config.pbtxt), prefixed with where they came from */
    if ((rc = family_param_int(p, "beam_size", 1, max_beam, &beam, err)) == HARK_OK)
        d->beam_size = beam;
    else if (rc != HARK_ERR_NOT_FOUND)
        return *where ? err_prefix(err, rc, "%.*s", (int)strlen(where) - 1, where) : rc;
    v = family_param(p, "nbest");
    if (v && !strcmp(v, "all"))
        ; /* the whole beam: wf_parse_opts sets it once the beam is known */
    else if ((rc = family_param_int(p, "nbest", 1, max_beam, &nbest, err)) == HARK_OK)
        d->nbest = nbest;
    else if (rc != HARK_ERR_NOT_FOUND)
        return *where ? err_prefix(err, rc, "%.*s", (int)strlen(where) - 1, where) : rc;
    if ((rc = family_param_double(p, "ctc_weight", &x, err)) == HARK_OK) {
        if (!(x >= 0))
            return err_set(err, HARK_ERR_INVALID_ARG, "%sctc_weight must be >= 0", where);
        d->ctc_weight = (float)x;
    } else if (rc != HARK_ERR_NOT_FOUND) {
        return err_prefix(err, rc, "%s", where[0] ? where : "parameters");
    }
    int chunk = 0, left = 0;
    if ((rc = family_param_int(p, "decoding_chunk_size", 1, max_chunk, &chunk, err)) == HARK_OK)
        d->chunk_size = chunk;
    else if (rc != HARK_ERR_NOT_FOUND)
        return err_set(err, rc, "%sdecoding_chunk_size must be in [1, %d]", where, max_chunk);
    if ((rc = family_param_int(p, "num_decoding_left_chunks", -1, 1 << 20, &left, err)) == HARK_OK)
        d->left_chunks = left;
    else if (rc != HARK_ERR_NOT_FOUND)
        return err_set(err, rc, "%snum_decoding_left_chunks must be -1 (all) or >= 0", where);
    /* WeNet's endpoint rules (search/ctc_endpoint.h): 1 silence with nothing decoded, 2 silence
     * after speech, 3 the utterance's length, in ms; a frame is silence above the threshold */
    if ((rc = family_endpoint_params(p, where, &d->endpointing, &d->continuous_decoding,
                                     d->endpoint.rule, err)))
        return rc;
    if ((rc = family_param_double(p, "endpoint_blank_threshold", &x, err)) == HARK_OK) {
        if (!(x >= 0 && x <= 1))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "%sendpoint_blank_threshold must be in [0, 1]", where);
        d->endpoint.blank_threshold = (float)x;
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
    int rc = apply_params(cfg, "config.pbtxt parameters ", &d, WENET_MAX_BEAM, 4096, err);
    if (rc)
        return rc;
    if (d.method == DECODE_ATTENTION_RESCORING && !has_dec)
        d.method = DECODE_CTC_PREFIX_BEAM; /* the model's default where it cannot rescore */
    const char *nb = family_param(req, "nbest");
    int nbest_given = nb != NULL;
    if ((rc = apply_params(req, "", &d, REQ_MAX_BEAM, m->max_chunk, err)))
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
    o->stream_chunk = d.chunk_size > 0 ? d.chunk_size : STREAM_CHUNK;
    return HARK_OK;
}

static int same_opts(const wenet_decode_opts_t *a, const wenet_decode_opts_t *b)
{
    return a->method == b->method && a->beam_size == b->beam_size && a->nbest == b->nbest &&
           a->ctc_weight == b->ctc_weight && a->reverse_weight == b->reverse_weight &&
           a->cpu_search == b->cpu_search && a->cpu_decoder == b->cpu_decoder &&
           a->chunk_size == b->chunk_size && a->left_chunks == b->left_chunks;
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
    h = mix(h, (uint64_t)(uint32_t)d->chunk_size << 32 | (uint32_t)d->left_chunks);
    return h;
}

/* ---- workers -------------------------------------------------------------------------------- */

static void wf_worker_destroy(family_worker_t *w)
{
    if (!w)
        return;
    wenet_worker_destroy(w->w);
    wenet_stream_pool_destroy(w->pool);
    parallel_destroy(w->par);
    hark_free(w->sidx);
    hark_free(w->ready);
    hark_free(w->ready_item);
    hark_free(w->acc);
    hark_free(w->irc);
    hark_free(w->ierr);
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
    w->done = hark_calloc(b + (size_t)(wo->max_sequences > 0 ? wo->max_sequences : 0), 1);
    int rc = !w->pcm || !w->n || !w->res || !w->idx || !w->done
                 ? err_set(err, HARK_ERR_NOMEM, "out of memory for a batch of %d", wo->max_batch)
                 : wenet_worker_create(m->asr, wo->max_batch, wo->max_seconds, &w->w, err);
    if (!rc && wo->max_sequences > 0) {
        w->max_sequences = wo->max_sequences;
        w->sidx = hark_calloc((size_t)wo->max_sequences, sizeof *w->sidx);
        w->ready = hark_calloc((size_t)wo->max_sequences, sizeof *w->ready);
        w->ready_item = hark_calloc((size_t)wo->max_sequences, sizeof *w->ready_item);
        size_t ni = b + (size_t)wo->max_sequences;
        w->acc = hark_calloc(ni, sizeof *w->acc);
        w->irc = hark_calloc(ni, sizeof *w->irc);
        w->ierr = hark_calloc(ni, sizeof *w->ierr);
        rc = !w->sidx || !w->ready || !w->ready_item || !w->acc || !w->irc || !w->ierr
                 ? err_set(err, HARK_ERR_NOMEM, "out of memory for %d streams", wo->max_sequences)
                 : wenet_stream_pool_create(m->asr, wo->max_sequences, wo->max_seconds,
                                            m->max_chunk, &w->pool, err);
        if (!rc && m->stream_threads > 1 &&
            !(rc = parallel_create(m->stream_threads, &w->par, err)))
            wenet_stream_pool_set_parallel(w->pool, w->par);
    }
    if (rc) {
        wf_worker_destroy(w);
        return rc;
    }
    wenet_worker_set_turns(w->w, m->gpu_turns);
    *out = w;
    return HARK_OK;
}

/* ---- streams -------------------------------------------------------------------------------- */

static int wf_stream_open(family_worker_t *w, void **stream, hark_err_t *err)
{
    *stream = NULL;
    if (!w->pool)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "this worker has no stream slots (created with max_sequences 0)");
    if (w->n_streams >= w->max_sequences)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "all %d stream slots of this worker are in use (max_sequences)",
                       w->max_sequences);
    wf_stream_t *ws = hark_calloc(1, sizeof *ws);
    if (!ws)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->n_streams++;
    *stream = ws;
    return HARK_OK;
}

static void wf_stream_close(family_worker_t *w, void *stream)
{
    wf_stream_t *ws = stream;
    if (!ws)
        return;
    wenet_stream_close(ws->s);
    silero_vad_stream_destroy(ws->vad);
    hark_free(ws);
    w->n_streams--;
}

/* ---- the debug dump (item->dump_dir) ------------------------------------------------------- */

static void dump_stage(void *user, const conformer_stage_t *s)
{
    family_dump_f32(user, s->name, s->data, s->rows, s->cols);
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
    family_dump_t dctx = {0};
    int rc = HARK_OK;
    const char *dump = items[w->idx[0]]->dump_dir;
    if (dump) { /* run() gets a dumping item alone */
        if (wenet_asr_device(m->asr) >= 0)
            rc =
                err_set(&err, HARK_ERR_UNSUPPORTED,
                        "dump_dir needs a CPU model (the GPU path keeps its stages on the device)");
        if (!rc)
            rc = family_mkdir_p(dump, &err);
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

/* A failed stream item: its DONE with the error, counted. */
static void stream_item_failed(family_item_t *it, int rc, const hark_err_t *e, int *worst,
                               int *n_failed)
{
    emit_error(it, rc, e);
    if (*worst == HARK_OK)
        *worst = rc;
    ++*n_failed;
}

/* An endpoint (WeNet's rules, when the stream's options turn them on) ended the segment of the
 * stream that `it` feeds: a SEGMENT event carries the segment's final result; with continuous
 * decoding the stream goes on with a fresh search; without, the stream has ended there (its
 * items' results are that final one; later audio is not decoded). */
static void segment_ended(const family_model_t *m, family_item_t *it)
{
    wf_stream_t *ws = it->stream;
    if (ws->ended)
        return;
    hark_err_t e = {0};
    wenet_result_t wr;
    asr_result_t r;
    memset(&r, 0, sizeof r);
    int rows = 0;
    wenet_stream_encoder_out(ws->s, &rows);
    if (wenet_stream_final(ws->s, &wr, &e) == HARK_OK) {
        if (result_convert(m, &wr, ws->samples, it->want_words, &r, &e) == HARK_OK) {
            double frame_s = wenet_asr_frame_ms(m->asr) / 1000.0;
            family_event_t ev = {.kind = FAMILY_EV_SEGMENT,
                                 .status = HARK_OK,
                                 .asr = &r,
                                 .seg_start_s = ws->seg_start_frame * frame_s,
                                 .seg_end_s = rows * frame_s};
            it->emit(it, &ev);
        }
        wenet_result_free(&wr);
    }
    asr_result_free(&r);
    if (!ws->continuous) {
        ws->ended = 1;
        return;
    }
    ws->seg_start_frame = rows;
    wenet_stream_next_segment(ws->s, &e); /* cannot fail: the stream is open, at an endpoint */
}

/* The VAD rule after a step: the next speech end the VAD has closed inside the current segment
 * ends the segment once the encoder's frames cover it (a CTC rule that fired first wins). */
static void vad_rule(const family_model_t *m, wf_stream_t *ws)
{
    if (!ws->vad || ws->ended || wenet_stream_endpoint(ws->s))
        return;
    const long long fs =
        (long long)wenet_asr_frame_ms(m->asr) * wenet_asr_sample_rate(m->asr) / 1000;
    const long long seg0 = (long long)ws->seg_start_frame * fs;
    silero_segment_t sg;
    if (ws->vad_end >= 0 && ws->vad_end <= seg0)
        ws->vad_end = -1; /* a CTC endpoint passed it */
    while (ws->vad_end < 0 && silero_vad_stream_pop(ws->vad, &sg, 1) == 1)
        if (sg.end > seg0)
            ws->vad_end = sg.end;
    int rows = 0;
    wenet_stream_encoder_out(ws->s, &rows);
    hark_err_t e = {0};
    if (ws->vad_end >= 0 && (long long)rows * fs >= ws->vad_end &&
        wenet_stream_set_endpoint(ws->s, WENET_ENDPOINT_VAD, &e) >= 0)
        ws->vad_end = -1;
}

/* one stream item's audio into its stream (and its VAD), its end: stream item i's own state
 * only, so the items of different streams run side by side (parallel_for) */
static void accept_one(void *ctx, int q)
{
    family_worker_t *w = ctx;
    int i = w->acc[q];
    family_item_t *it = w->items[i];
    wf_stream_t *ws = it->stream;
    hark_err_t *e = &w->ierr[i];
    int rc = HARK_OK;
    if (it->n > 0 && !ws->ended &&
        (rc = wenet_stream_accept(ws->s, it->pcm, it->n, e)) == HARK_OK) {
        ws->samples += it->n;
        if (ws->vad)
            rc = silero_vad_stream_feed(ws->vad, it->pcm, it->n, e);
    }
    if (!rc && it->stream_end)
        rc = wenet_stream_input_done(ws->s, e);
    w->irc[i] = rc;
}

/* stream item sidx[j]'s answer: a PARTIAL and DONE, or the stream's final result with DONE for
 * its last item; a failure is left in irc / ierr for the caller to report */
static void answer_one(void *ctx, int j)
{
    family_worker_t *w = ctx;
    int i = w->sidx[j];
    family_item_t *it = w->items[i];
    wf_stream_t *ws = it->stream;
    hark_err_t *e = &w->ierr[i];
    wenet_result_t wr;
    int fin = it->stream_end;
    int rc =
        fin || ws->ended ? wenet_stream_final(ws->s, &wr, e) : wenet_stream_partial(ws->s, &wr, e);
    asr_result_t r;
    memset(&r, 0, sizeof r);
    if (!rc) {
        rc = result_convert(w->m, &wr, ws->samples, it->want_words, &r, e);
        wenet_result_free(&wr);
    }
    w->irc[i] = rc;
    if (rc) {
        asr_result_free(&r);
        return;
    }
    family_event_t ev = {
        .kind = fin ? FAMILY_EV_DONE : FAMILY_EV_PARTIAL, .status = HARK_OK, .asr = &r};
    it->emit(it, &ev);
    asr_result_free(&r); /* what emit did not take */
    if (!fin) {
        family_event_t done = {.kind = FAMILY_EV_DONE, .status = HARK_OK};
        it->emit(it, &done);
    }
}

/* The stream items (item->stream) of an execute: each one's audio into its stream, then batched
 * steps of every stream with a chunk ready until none is, then per item a PARTIAL and DONE, or
 * the final result with DONE for the last item of a stream. Marks them done. The audio and the
 * answers of different streams' items run on the worker's stream threads (stream_threads), and
 * so do the steps' searches; items of one stream twice in an execute keep to this thread. */
static void run_streams(family_worker_t *w, family_item_t *const *items, int n,
                        family_exec_times_t *tm, int *worst, int *n_failed)
{
    const family_model_t *m = w->m;
    uint64_t t0 = clock_now_ns();
    w->items = items;
    w->exec_no++;
    int na = 0, twice = 0;
    for (int i = 0; i < n; i++) {
        family_item_t *it = items[i];
        if (!it->stream)
            continue;
        w->done[i] = 1;
        wf_stream_t *ws = it->stream;
        hark_err_t e = {0};
        int rc = ws->failed;
        if (rc) {
            err_set(&e, rc, "the stream could not be opened (%s)", hark_status_str(rc));
        } else if (!ws->s) { /* the stream's first item: its options are the stream's */
            const wenet_family_opts_t *fo = it->opts;
            wenet_decode_opts_t o = fo->d;
            o.chunk_size = fo->stream_chunk;
            ws->continuous = fo->d.continuous_decoding;
            o.n_threads = w->n_threads;
            ws->vad_end = -1;
            if ((rc = wenet_stream_open(w->pool, &o, &ws->s, &e)) ||
                (m->vad && o.endpointing &&
                 (rc = silero_vad_stream_create(m->vad, wenet_asr_sample_rate(m->asr), &m->vad_o,
                                                &ws->vad, &e))))
                ws->failed = rc;
        }
        if (rc) {
            stream_item_failed(it, rc, &e, worst, n_failed);
            continue;
        }
        twice |= ws->mark == w->exec_no;
        ws->mark = w->exec_no;
        w->acc[na++] = i;
    }
    parallel_t *par = twice ? NULL : w->par;
    parallel_for(par, na, accept_one, w);
    int k = 0;
    for (int q = 0; q < na; q++) {
        int i = w->acc[q];
        if (w->irc[i]) {
            stream_item_failed(items[i], w->irc[i], &w->ierr[i], worst, n_failed);
            continue;
        }
        if (k < w->max_sequences)
            w->sidx[k++] = i;
    }
    uint64_t t1 = clock_now_ns();
    for (;;) { /* one batched step for every stream with a chunk ready, until none has one */
        int r = 0;
        for (int j = 0; j < k; j++) {
            wenet_stream_t *s = ((wf_stream_t *)items[w->sidx[j]]->stream)->s;
            int seen = 0;
            for (int q = 0; q < r && !seen; q++)
                seen = w->ready[q] == s;
            if (!seen && wenet_stream_ready(s)) {
                w->ready_item[r] = w->sidx[j];
                w->ready[r++] = s;
            }
        }
        hark_err_t e = {0};
        if (!r || wenet_stream_step(w->pool, w->ready, r, &e) != HARK_OK)
            break; /* a failed step failed its streams: their items report it below */
        for (int q = 0; q < r; q++) {
            vad_rule(m, items[w->ready_item[q]]->stream);
            if (wenet_stream_endpoint(w->ready[q]))
                segment_ended(m, items[w->ready_item[q]]);
        }
    }
    uint64_t t2 = clock_now_ns();
    parallel_for(par, k, answer_one, w);
    for (int j = 0; j < k; j++) {
        int i = w->sidx[j];
        if (w->irc[i])
            stream_item_failed(items[i], w->irc[i], &w->ierr[i], worst, n_failed);
    }
    if (tm) {
        tm->input_ns += t1 - t0;
        tm->infer_ns += t2 - t1;
        tm->output_ns += clock_now_ns() - t2;
    }
}

static int wf_execute(family_worker_t *w, family_item_t *const *items, int n,
                      family_exec_times_t *times, hark_err_t *err)
{
    family_exec_times_t tm = {0};
    int n_offline = 0, n_stream = 0;
    for (int i = 0; i < n; i++)
        n_offline += !items[i]->stream, n_stream += !!items[i]->stream;
    if (n_offline > w->max_batch || n_stream > w->max_sequences) {
        hark_err_t e = {0};
        err_set(&e, HARK_ERR_TOO_LARGE,
                "batch of %d items and %d stream items exceeds the worker's %d and %d", n_offline,
                n_stream, w->max_batch, w->max_sequences);
        for (int i = 0; i < n; i++)
            emit_error(items[i], e.status, &e);
        return err_set(err, e.status, "%s", e.msg);
    }
    if (n > 0)
        memset(w->done, 0, (size_t)n);
    int worst = HARK_OK, n_failed = 0;
    if (n_stream)
        run_streams(w, items, n, &tm, &worst, &n_failed);
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
    .stream_open = wf_stream_open,
    .stream_close = wf_stream_close,
    .execute = wf_execute,
    .bench = wenet_bench_main,
    .inspect = wenet_inspect_main,
    .bench_synthetic = wenet_synthetic_models,
};
