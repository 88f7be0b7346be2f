/* wenet_stream.c — WeNet U2/U2++ chunk-by-chunk streaming on the CPU (see wenet_stream.h): a pool
 * of stream slots sized at creation, incremental fbank, batched chunk forwards, per-stream CTC
 * search, rescoring at the end. Tests: tests/model/wenet/test_wenet_stream.c
 *
 * Chunk k of a stream reads fbank frames [k * stride, min(k * stride + window, T)) with
 * window = (chunk - 1) * rate + right_context + 1 and stride = chunk * rate (WeNet's
 * forward_chunk_by_chunk; its runtime feeds the same windows: the first chunk `window` frames,
 * then `stride` new ones after the 1 + right_context - rate it keeps). A chunk is ready when its
 * whole window has arrived, or, once the input is done, when it holds at least right_context + 1
 * frames (WeNet's `range(0, T - context + 1, stride)`): a stream's chunks are then exactly
 * forward_chunk_by_chunk's. A slot keeps all of its stream's fbank frames and encoder output
 * (rescoring reads the whole utterance), which max_seconds bounds.
 */
#include "model/wenet/wenet_stream.h"

#include "core/alloc.h"
#include "core/assert.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/wenet/conformer_gpu.h"
#include "search/ctc.h"

#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

#define TAIL_HOPS 400 /* PCM taken per fbank call: up to 4 s of 10 ms hops past one window */

enum { SLOT_FREE = 0, SLOT_OPEN = 1 };

struct wenet_stream {
    wenet_stream_pool_t *pool;
    int state;  /* SLOT_FREE | SLOT_OPEN */
    int failed; /* a status that failed a step (later calls return it), or 0 */
    wenet_decode_opts_t o;
    int window, stride, context; /* fbank frames: chunk window, step, the least last chunk */
    int input_done;
    int chunks;  /* chunks stepped */
    float *tail; /* (tail_cap) PCM not yet framed, from sample frames * hop */
    size_t tail_n;
    float *feats; /* (max_frames, input_dim) every fbank frame so far */
    int n_frames;
    float *enc;             /* (max_te, D) every encoder frame so far */
    conformer_stream_t *cs; /* CPU: attention / conv caches, reserved for max_te keys; GPU: NULL
                               (the caches are slot `this - pool->slots` of pool->gpu) */
    int te;                 /* encoder frames so far */
    ctc_beam_t *beam;       /* prefix beam methods: made at open, freed at close */
    int *arg;               /* (max_te) greedy: argmax of every frame */
    double greedy_score;    /* greedy: sum of the frame maxima (of the segment) */
    /* endpointing (opts.endpointing): the segment is the encoder frames from seg_start on */
    ctc_endpoint_t ep;
    int endpoint;   /* the rule (1 ..) that ended the segment, 0 while it goes on */
    int seg_start;  /* encoder frame where the segment starts */
    int seg_tokens; /* greedy: tokens of the segment's collapsed path */
    int segments;   /* segments ended by wenet_stream_next_segment */
};

struct wenet_stream_pool {
    const wenet_asr_t *asr;
    const conformer_model_t *m;
    const feat_plan_t *fbank;
    int max_sequences, max_chunk, max_frames, max_te, n_open;
    int step; /* the most streams one batched forward takes: min(max_sequences, the GPU pool's) */
    size_t tail_cap;
    int D, V, in_dim, rate, right_context;
    wenet_stream_t *slots;       /* (max_sequences) */
    conformer_state_t *state;    /* (step, window(max_chunk)) */
    float *enc;                  /* (step * max_chunk, D) one forward's encoder rows, packed */
    float *logp;                 /* (step * max_chunk, V) their CTC log-probs */
    int tk_cap;                  /* entries a row of tk_idx / tk_val holds: min(CTC_MAX_BEAM, V) */
    int *tk_idx;                 /* (step * max_chunk, tk_cap) each row's top k ids */
    float *tk_val;               /* (as tk_idx) their log-probs */
    float *tk_blank;             /* (step * max_chunk) the blank's (the GPU's top-k step) */
    int *frames, *n_out;         /* (step) */
    const float **feats;         /* (step) */
    conformer_stream_t **cs;     /* (step) */
    conformer_gpu_chunks_t *gpu; /* a GPU model's streams: their caches on the device, else NULL */
    int *slot_of;                /* (step) GPU: the pool slot of each chunk of a forward */
    int *row0;       /* (step + 1) where each chunk's rows start in a forward's output */
    parallel_t *par; /* the streams' searches of a forward spread over it (borrowed) */
    int device;      /* GPU: the CUDA device */
};

static void slot_free_mem(wenet_stream_t *s)
{
    hark_free(s->tail);
    hark_free(s->feats);
    hark_free(s->enc);
    hark_free(s->arg);
    conformer_stream_destroy(s->cs);
    ctc_beam_destroy(s->beam);
    memset(s, 0, sizeof *s);
}

void wenet_stream_pool_destroy(wenet_stream_pool_t *p)
{
    if (!p)
        return;
    for (int i = 0; p->slots && i < p->max_sequences; i++)
        slot_free_mem(&p->slots[i]);
    hark_free(p->slots);
    conformer_state_destroy(p->state);
    conformer_gpu_chunks_destroy(p->gpu);
    hark_free(p->slot_of);
    hark_free(p->row0);
    hark_free(p->enc);
    hark_free(p->logp);
    hark_free(p->tk_idx);
    hark_free(p->tk_val);
    hark_free(p->tk_blank);
    hark_free(p->frames);
    hark_free(p->n_out);
    hark_free(p->feats);
    hark_free(p->cs);
    hark_free(p);
}

/* the most streams one batched forward takes (the pool's default step) */
static int most_step(int max_sequences)
{
    return max_sequences < CONFORMER_CHUNKS_MAX_STEP ? max_sequences : CONFORMER_CHUNKS_MAX_STEP;
}

int wenet_stream_pool_create(const wenet_asr_t *asr, int max_sequences, double max_seconds,
                             int max_chunk, wenet_stream_pool_t **out, hark_err_t *err)
{
    *out = NULL;
    const wenet_config_t *c = wenet_asr_config(asr);
    if (max_sequences < 1 || max_sequences > 4096 || !(max_seconds > 0) || max_seconds > 3600 ||
        max_chunk < 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "stream pool: max_sequences %d (1 .. 4096), max_seconds %g (0 .. 3600], "
                       "max_chunk %d (>= 1)",
                       max_sequences, max_seconds, max_chunk);
    if (!c->use_dynamic_chunk && c->static_chunk_size <= 0)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "streaming needs a chunk-trained model (use_dynamic_chunk or "
                       "static_chunk_size); this one was trained with full context only");
    const feat_plan_t *fb = wenet_asr_fbank(asr);
    if (fb->pad != FEAT_PAD_NONE || fb->normalize || fb->signal_preemph)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "streaming: the front end's frames are not independent (padding, "
                       "normalisation or pre-emphasis over the signal)");
    wenet_stream_pool_t *p = hark_calloc(1, sizeof *p);
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "stream pool: out of memory");
    p->asr = asr;
    p->m = wenet_asr_encoder(asr);
    p->fbank = fb;
    p->max_sequences = max_sequences;
    p->max_chunk = max_chunk;
    p->D = c->d_model;
    p->V = c->vocab_size;
    p->in_dim = c->input_dim;
    p->rate = (int)c->subsample;
    p->right_context = wenet_right_context(c);
    p->max_frames = feat_num_frames(fb, (size_t)(max_seconds * c->sample_rate) + 1);
    if (p->max_frames < 1)
        p->max_frames = 1;
    p->max_te = conformer_out_len(p->m, p->max_frames);
    if (p->max_te < 1)
        p->max_te = 1;
    p->tail_cap = (size_t)fb->frame_span + (size_t)TAIL_HOPS * fb->hop;
    int window = (max_chunk - 1) * p->rate + p->right_context + 1;
    p->step = most_step(max_sequences);
    size_t S = (size_t)max_sequences, B = (size_t)p->step, rows = B * (size_t)max_chunk;
    int prec = 0;
    const conformer_gpu_model_t *gm = wenet_asr_gpu_encoder(asr, &prec, &p->device);
    int rc;
    if (gm) { /* the caches of every slot on the device, keys for the whole utterance */
#ifdef HARK_CUDA
        cudaSetDevice(p->device);
#endif
        rc = conformer_gpu_chunks_create(gm, prec, max_sequences, window, p->max_te, &p->gpu, err);
    } else {
        rc = conformer_state_create(p->m, p->step, window, &p->state, err);
    }
    if (rc) {
        wenet_stream_pool_destroy(p);
        return rc;
    }
    p->slots = hark_calloc(S, sizeof *p->slots);
    p->enc = hark_malloc(rows * (size_t)p->D * sizeof(float));
    p->logp = hark_malloc(rows * (size_t)p->V * sizeof(float));
    p->tk_cap = p->V < CTC_MAX_BEAM ? p->V : CTC_MAX_BEAM;
    p->tk_idx = hark_malloc(rows * (size_t)p->tk_cap * sizeof(int));
    p->tk_val = hark_malloc(rows * (size_t)p->tk_cap * sizeof(float));
    p->tk_blank = hark_malloc(rows * sizeof(float));
    p->frames = hark_malloc(B * sizeof(int));
    p->n_out = hark_malloc(B * sizeof(int));
    p->feats = hark_malloc(B * sizeof *p->feats);
    p->cs = hark_malloc(B * sizeof *p->cs);
    p->slot_of = hark_malloc(B * sizeof *p->slot_of);
    p->row0 = hark_malloc((B + 1) * sizeof *p->row0);
    rc = !p->slots || !p->enc || !p->logp || !p->tk_idx || !p->tk_val || !p->tk_blank ||
                 !p->frames || !p->n_out || !p->feats || !p->cs || !p->slot_of || !p->row0
             ? HARK_ERR_NOMEM
             : HARK_OK;
    for (int i = 0; i < max_sequences && !rc; i++) {
        wenet_stream_t *s = &p->slots[i];
        s->pool = p;
        s->tail = hark_malloc(p->tail_cap * sizeof(float));
        s->feats = hark_malloc((size_t)p->max_frames * p->in_dim * sizeof(float));
        s->enc = hark_malloc((size_t)p->max_te * p->D * sizeof(float));
        s->arg = hark_malloc((size_t)p->max_te * sizeof(int));
        if (!s->tail || !s->feats || !s->enc || !s->arg)
            rc = HARK_ERR_NOMEM;
        else if (p->gpu)
            continue;
        else if ((rc = conformer_stream_create(p->m, -1, &s->cs, err)) ||
                 (rc = conformer_stream_reserve(s->cs, p->max_te, err)))
            break;
    }
    if (rc) {
        if (rc == HARK_ERR_NOMEM)
            err_set(err, rc, "stream pool: out of memory for %d streams of %.1f s", max_sequences,
                    max_seconds);
        wenet_stream_pool_destroy(p);
        return rc;
    }
    *out = p;
    return HARK_OK;
}

int wenet_stream_pool_free_slots(const wenet_stream_pool_t *p)
{
    return p->max_sequences - p->n_open;
}

/* ---- streams --------------------------------------------------------------------------------- */

int wenet_stream_open(wenet_stream_pool_t *p, const wenet_decode_opts_t *opts, wenet_stream_t **out,
                      hark_err_t *err)
{
    *out = NULL;
    int rc = wenet_check_opts(p->asr, opts, err);
    if (rc)
        return rc;
    if (opts->chunk_size < 1 || opts->chunk_size > p->max_chunk)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "decoding_chunk_size %d: a stream takes 1 .. %d encoder frames a chunk",
                       opts->chunk_size, p->max_chunk);
    if (opts->left_chunks < -1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "num_decoding_left_chunks %d: expected -1 (all) or >= 0", opts->left_chunks);
    if (p->n_open >= p->max_sequences)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "all %d stream slots of this worker are in use (max_sequences)",
                       p->max_sequences);
    wenet_stream_t *s = NULL;
    for (int i = 0; i < p->max_sequences && !s; i++)
        if (p->slots[i].state == SLOT_FREE)
            s = &p->slots[i];
    HARK_ASSERT(s != NULL);
    if (opts->method != DECODE_CTC_GREEDY &&
        (rc = ctc_beam_create(p->V, opts->beam_size, wenet_asr_config(p->asr)->blank, &s->beam,
                              err)))
        return rc;
    s->o = *opts;
    s->o.debug = NULL;
    s->o.debug_user = NULL;
    s->window = (opts->chunk_size - 1) * p->rate + p->right_context + 1;
    s->stride = opts->chunk_size * p->rate;
    s->context = p->right_context + 1;
    s->failed = 0;
    s->input_done = 0;
    s->chunks = 0;
    s->tail_n = 0;
    s->n_frames = 0;
    s->greedy_score = 0;
    ctc_endpoint_reset(&s->ep);
    s->endpoint = 0;
    s->seg_start = 0;
    s->seg_tokens = 0;
    s->segments = 0;
    /* WeNet's required_cache_size = decoding_chunk_size * num_decoding_left_chunks */
    int cache = opts->left_chunks < 0 ? -1 : opts->chunk_size * opts->left_chunks;
    if (p->gpu)
        conformer_gpu_chunks_reset(p->gpu, (int)(s - p->slots), cache);
    else
        conformer_stream_set_cache(s->cs, cache);
    s->te = 0;
    s->state = SLOT_OPEN;
    p->n_open++;
    *out = s;
    return HARK_OK;
}

void wenet_stream_close(wenet_stream_t *s)
{
    if (!s || s->state != SLOT_OPEN)
        return;
    ctc_beam_destroy(s->beam);
    s->beam = NULL;
    s->state = SLOT_FREE;
    s->pool->n_open--;
}

static int check_open(const wenet_stream_t *s, const char *what, hark_err_t *err)
{
    if (!s || s->state != SLOT_OPEN)
        return err_set(err, HARK_ERR_CLOSED, "%s: the stream is closed", what);
    if (s->failed)
        return err_set(err, s->failed, "%s: the stream failed earlier (%s)", what,
                       hark_status_str(s->failed));
    return HARK_OK;
}

int wenet_stream_accept(wenet_stream_t *s, const float *pcm, size_t n, hark_err_t *err)
{
    int rc = check_open(s, "stream accept", err);
    if (rc)
        return rc;
    if (s->input_done)
        return err_set(err, HARK_ERR_CLOSED, "stream accept: the input already ended");
    if (n > 0 && !pcm)
        return err_set(err, HARK_ERR_INVALID_ARG, "stream accept: NULL samples");
    const wenet_stream_pool_t *p = s->pool;
    const feat_plan_t *fb = p->fbank;
    /* all of this call's frames must fit, or nothing of it is kept */
    size_t hop = (size_t)fb->hop;
    if (feat_num_frames(fb, s->tail_n + n) > p->max_frames - s->n_frames)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "stream accept: the stream passes the worker's %.1f s",
                       (double)p->max_frames * hop / wenet_asr_sample_rate(p->asr));
    while (n > 0) {
        size_t take = p->tail_cap - s->tail_n < n ? p->tail_cap - s->tail_n : n;
        memcpy(s->tail + s->tail_n, pcm, take * sizeof(float));
        s->tail_n += take;
        pcm += take;
        n -= take;
        int f = feat_num_frames(fb, s->tail_n);
        if (f <= 0)
            continue;
        /* frames are independent: those of the tail are the utterance's next f frames */
        rc = feat_compute(fb, s->tail, s->tail_n, s->feats + (size_t)s->n_frames * p->in_dim, err);
        if (rc) /* NOMEM inside the front end: this piece is not consumed */
            return rc;
        s->n_frames += f;
        size_t used = (size_t)f * hop;
        memmove(s->tail, s->tail + used, (s->tail_n - used) * sizeof(float));
        s->tail_n -= used;
    }
    return HARK_OK;
}

int wenet_stream_input_done(wenet_stream_t *s, hark_err_t *err)
{
    int rc = check_open(s, "stream input_done", err);
    if (rc)
        return rc;
    s->input_done = 1;
    return HARK_OK;
}

/* fbank frames of the next chunk's window, 0 when it is not ready */
static int next_window(const wenet_stream_t *s)
{
    int cur = s->chunks * s->stride, left = s->n_frames - cur;
    if (left >= s->window)
        return s->window;
    return s->input_done && left >= s->context ? left : 0;
}

int wenet_stream_ready(const wenet_stream_t *s)
{
    return s && s->state == SLOT_OPEN && !s->failed && !s->endpoint && next_window(s) > 0;
}

int wenet_stream_finished(const wenet_stream_t *s)
{
    return s && s->state == SLOT_OPEN && s->input_done && next_window(s) == 0;
}

int wenet_stream_endpoint(const wenet_stream_t *s)
{
    return s && s->state == SLOT_OPEN ? s->endpoint : 0;
}

int wenet_stream_set_endpoint(wenet_stream_t *s, int rule, hark_err_t *err)
{
    int rc = check_open(s, "stream set_endpoint", err);
    if (rc)
        return rc;
    if (rule < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "stream set_endpoint: rule %d", rule);
    if (s->endpoint || wenet_stream_finished(s) || s->te <= s->seg_start)
        return 0;
    s->endpoint = rule;
    return 1;
}

int wenet_stream_next_segment(wenet_stream_t *s, hark_err_t *err)
{
    int rc = check_open(s, "stream next_segment", err);
    if (rc)
        return rc;
    if (!s->endpoint)
        return err_set(err, HARK_ERR_INVALID_ARG, "stream next_segment: no endpoint");
    if (s->beam)
        ctc_beam_reset(s->beam);
    s->greedy_score = 0;
    s->seg_tokens = 0;
    s->seg_start = s->te;
    ctc_endpoint_reset(&s->ep);
    s->endpoint = 0;
    s->segments++;
    return HARK_OK;
}

int wenet_stream_segments(const wenet_stream_t *s)
{
    return s->segments;
}

/* after a step: the segment's tokens so far (greedy: counted over the new frames), then WeNet's
 * rules over the new rows, except for the input's last chunk (WeNet checks them only while
 * the features go on) */
static void endpoint_check(wenet_stream_t *s, const float *blank_lp, long stride, int t0, int rows)
{
    const wenet_stream_pool_t *p = s->pool;
    const int blank = wenet_asr_config(p->asr)->blank;
    if (!s->beam)
        for (int t = t0; t < t0 + rows; t++) {
            int prev = t > s->seg_start ? s->arg[t - 1] : -1;
            s->seg_tokens += s->arg[t] != blank && s->arg[t] != prev;
        }
    if (!s->o.endpointing || (s->input_done && next_window(s) == 0))
        return;
    int decoded = s->beam ? ctc_beam_best_len(s->beam) > 0 : s->seg_tokens > 0;
    s->endpoint = ctc_endpoint_detect_blank(&s->ep, &s->o.endpoint, blank_lp, stride, rows,
                                            wenet_asr_frame_ms(p->asr), decoded);
}

typedef struct {
    wenet_stream_pool_t *p;
    wenet_stream_t *const *ss;
    int K, gpu_topk;
} search_ctx_t;

/* stream b of a forward: its encoder rows kept, its search over its new frames' top K (or whole
 * rows), its endpoint rules; touches stream b's state only (parallel_for) */
static void search_one(void *ctx, int b)
{
    const search_ctx_t *c = ctx;
    const wenet_stream_pool_t *p = c->p;
    wenet_stream_t *s = c->ss[b];
    const size_t r0 = (size_t)p->row0[b], K = (size_t)c->K;
    const int rows = p->n_out[b], t0 = s->te;
    s->te += rows;
    HARK_ASSERT(t0 >= 0 && t0 + rows <= p->max_te);
    memcpy(s->enc + (size_t)t0 * p->D, p->enc + r0 * p->D, (size_t)rows * p->D * sizeof(float));
    if (!c->gpu_topk) /* whole rows came back: reduced here as the device reduces them */
        for (size_t r = r0; r < r0 + (size_t)rows; r++)
            ctc_row_topk(p->logp + r * p->V, p->V, c->K, p->tk_idx + r * K, p->tk_val + r * K);
    const int *ti = p->tk_idx + r0 * K;
    const float *tv = p->tk_val + r0 * K;
    if (s->beam) {
        hark_err_t e = {0};
        int rc = ctc_beam_advance_topk(s->beam, ti, tv, c->K, rows, &e);
        if (rc)
            s->failed = rc;
    } else {
        ctc_argmax_topk(ti, tv, c->K, rows, s->arg + t0, &s->greedy_score);
    }
    s->chunks++;
    if (c->gpu_topk)
        endpoint_check(s, p->tk_blank + r0, 1, t0, rows);
    else
        endpoint_check(s, p->logp + r0 * p->V + s->o.endpoint.blank, p->V, t0, rows);
}

/* one batched forward of n <= p->step streams (checked by wenet_stream_step), then each stream's
 * search and endpoint rules over its new rows */
static int step_forward(wenet_stream_pool_t *p, wenet_stream_t *const *ss, int n, hark_err_t *err)
{
    for (int b = 0; b < n; b++) {
        const wenet_stream_t *s = ss[b];
        p->frames[b] = next_window(s);
        p->feats[b] = s->feats + (size_t)s->chunks * s->stride * p->in_dim;
        p->cs[b] = s->cs;
        p->slot_of[b] = (int)(s - p->slots);
    }
    conformer_opts_t co = conformer_default_opts();
    co.n_threads = ss[0]->o.n_threads;
    /* The searches read each frame's top K only (K: the largest beam of the step, 1 for greedy)
     * and endpointing the blank's log-prob: on the GPU, when K <= 32 and the endpoint rules read
     * the model's blank, only those come back (B · 16 rows of 2K + 1 floats instead of B · 16 ·
     * V); otherwise the whole rows, reduced here the same way (ctc_row_topk). */
    const int blank = wenet_asr_config(p->asr)->blank;
    int K = 1, gpu_topk = p->gpu != NULL;
    for (int b = 0; b < n; b++) {
        const wenet_stream_t *s = ss[b];
        int k = s->beam ? (s->o.beam_size < p->V ? s->o.beam_size : p->V) : 1;
        K = k > K ? k : K;
        if (s->o.endpointing && s->o.endpoint.blank != blank)
            gpu_topk = 0;
    }
    HARK_ASSERT(K <= p->tk_cap);
    gpu_topk = gpu_topk && K <= CONFORMER_CTC_TOPK_MAX;
    int rc;
    if (p->gpu) { /* encoder and CTC on the device, the searches here */
#ifdef HARK_CUDA
        cudaSetDevice(p->device);
#endif
        if (gpu_topk) {
            conformer_ctc_topk_t tk = {K, blank, p->tk_idx, p->tk_val, p->tk_blank};
            rc = conformer_gpu_forward_chunks_topk(p->gpu, p->slot_of, &co, p->enc, &tk, p->n_out,
                                                   p->feats, p->frames, n, err);
        } else {
            rc = conformer_gpu_forward_chunks(p->gpu, p->slot_of, &co, p->enc, p->logp, p->n_out,
                                              p->feats, p->frames, n, err);
        }
    } else {
        rc = conformer_forward_chunks(p->state, p->cs, &co, p->enc, p->n_out, p->feats, p->frames,
                                      n, err);
        int total = 0;
        for (int b = 0; b < n && !rc; b++)
            total += p->n_out[b];
        if (!rc && total > 0)
            rc = conformer_ctc_log_probs(p->m, &co, p->logp, p->enc, &total, 1, total, err);
    }
    if (rc) {
        for (int b = 0; b < n; b++)
            ss[b]->failed = rc;
        return rc;
    }
    p->row0[0] = 0;
    for (int b = 0; b < n; b++)
        p->row0[b + 1] = p->row0[b] + p->n_out[b];
    search_ctx_t sc = {p, ss, K, gpu_topk};
    parallel_for(p->par, n, search_one, &sc); /* a search's failure marks its stream only */
    return HARK_OK;
}

void wenet_stream_pool_set_parallel(wenet_stream_pool_t *p, parallel_t *par)
{
    p->par = par;
}

int wenet_stream_pool_set_step(wenet_stream_pool_t *p, int step, hark_err_t *err)
{
    int most = most_step(p->max_sequences);
    if (step < 1 || step > most)
        return err_set(err, HARK_ERR_INVALID_ARG, "stream pool: a forward of %d streams (1 .. %d)",
                       step, most);
    p->step = step;
    return HARK_OK;
}

int wenet_stream_step(wenet_stream_pool_t *p, wenet_stream_t *const *ss, int n, hark_err_t *err)
{
    if (n < 1 || n > p->max_sequences)
        return err_set(err, HARK_ERR_INVALID_ARG, "stream step: %d streams (1 .. %d)", n,
                       p->max_sequences);
    for (int b = 0; b < n; b++) {
        const wenet_stream_t *s = ss[b];
        int rc = check_open(s, "stream step", err);
        if (rc)
            return rc;
        if (s->pool != p)
            return err_set(err, HARK_ERR_INVALID_ARG, "stream step: stream %d is another pool's",
                           b);
        if (!next_window(s))
            return err_set(err, HARK_ERR_INVALID_ARG, "stream step: stream %d has no chunk ready",
                           b);
        for (int c = 0; c < b; c++)
            if (ss[c] == s)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "stream step: stream %d is also stream %d", b, c);
    }
    /* more streams than one forward takes: forwards of p->step in turn (a failed one marks its
     * streams failed; the others still step) */
    int rc = HARK_OK;
    for (int g = 0; g < n; g += p->step) {
        int rc1 = step_forward(p, ss + g, n - g < p->step ? n - g : p->step, err);
        rc = rc ? rc : rc1;
    }
    for (int b = 0; b < n && !rc; b++) /* the streams were open: a failure now is a search's */
        if (ss[b]->failed)
            rc = err_set(err, ss[b]->failed, "stream step: the CTC search of stream %d: %s", b,
                         hark_status_str(ss[b]->failed));
    return rc;
}

/* the CTC n-best of the stream's segment so far (greedy: its one path); times from the segment's
 * start */
static int stream_nbest(const wenet_stream_t *s, ctc_nbest_t *nb, hark_err_t *err)
{
    if (s->beam)
        return ctc_beam_nbest(s->beam, nb, err);
    return ctc_greedy_from_argmax(s->arg + s->seg_start, s->te - s->seg_start,
                                  wenet_asr_config(s->pool->asr)->blank, s->greedy_score, nb, err);
}

static void shift_times(wenet_hyp_t *h, int by)
{
    for (int i = 0; i < h->n_tokens; i++)
        if (h->times[i] >= 0)
            h->times[i] += by;
}

/* the result of the segment so far with method o: the search's n-best, rescored over the
 * segment's encoder frames when o says so; times in the stream's encoder frames */
static int segment_result(wenet_stream_t *s, const wenet_decode_opts_t *o, wenet_result_t *r,
                          hark_err_t *err)
{
    ctc_nbest_t nb;
    int rc = stream_nbest(s, &nb, err);
    if (rc)
        return rc;
    const wenet_stream_pool_t *p = s->pool;
    rc = wenet_result_from_ctc(p->asr, o, &nb, s->enc + (size_t)s->seg_start * p->D,
                               s->te - s->seg_start, r, err);
    if (rc)
        return rc;
    shift_times(&r->best, s->seg_start);
    for (int i = 0; i < r->n_nbest; i++)
        shift_times(&r->nbest[i], s->seg_start);
    r->frames = s->n_frames;
    return HARK_OK;
}

int wenet_stream_partial(wenet_stream_t *s, wenet_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    int rc = check_open(s, "stream partial", err);
    if (rc)
        return rc;
    wenet_decode_opts_t o = s->o;
    if (o.method == DECODE_ATTENTION_RESCORING)
        o.method = DECODE_CTC_PREFIX_BEAM; /* partials: the CTC search's best */
    return segment_result(s, &o, r, err);
}

int wenet_stream_final(wenet_stream_t *s, wenet_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    int rc = check_open(s, "stream final", err);
    if (rc)
        return rc;
    if (!wenet_stream_finished(s) && !s->endpoint)
        return err_set(err, HARK_ERR_AGAIN, "stream final: %s",
                       s->input_done ? "chunks are still ready to step"
                                     : "the input has not ended");
    return segment_result(s, &s->o, r, err);
}

const float *wenet_stream_features(const wenet_stream_t *s, int *frames)
{
    *frames = s->n_frames;
    return s->feats;
}

const float *wenet_stream_encoder_out(const wenet_stream_t *s, int *rows)
{
    *rows = s->te;
    return s->enc;
}

const conformer_stream_t *wenet_stream_encoder(const wenet_stream_t *s)
{
    return s->cs;
}

int wenet_stream_chunks(const wenet_stream_t *s)
{
    return s->chunks;
}
