/* icefall_stream.c — a causal zipformer recognising a stream of audio as it comes (icefall.h,
 * icefall_stream_*), as icefall's streaming_decode.py decodes a DecodeStream: the fbank frame by
 * frame as the samples arrive, encoder steps of 2c + 13 frames every 2c (icefall_zf_stream_step),
 * greedy_search or modified_beam_search carried across the steps, and at the end the tail padding;
 * with endpointing, sherpa-onnx's endpoint rules after each step, a segment's result queued and the
 * search restarted (the encoder's caches and the fbank going on) at each endpoint. Several streams
 * fed together (icefall_stream_feed) advance in rounds: each stream's front end up to its next
 * complete step, the ready steps as one icefall_zf_stream_step_batch, each stream's search on its
 * own output; accept and input_done are a feed of one stream.
 * OWNERSHIP AND THREADS: a stream and the worker that steps it belong to one thread at a time.
 * Tests: tests/model/icefall/test_icefall_stream.c, tests/model/icefall/test_icefall_endpoint.c */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"
#include "model/icefall/icefall_zf_gpu.h"

#include "core/alloc.h"
#include "core/parallel.h"
#include "hark.h"

#include <math.h>
#include <string.h>

#define PIECE 16000    /* samples taken into the front end at a time */
#define TAIL_FRAMES 30 /* streaming_decode.py: DecodeStream.set_features(tail_pad_len=30) */

struct icefall_stream {
    const icefall_model_t *m;
    icefall_zf_stream_t *enc; /* the encoder's caches on the CPU (NULL until its first CPU step) */
    int slot;                 /* >= 0: the caches in this slot of the worker's GPU encoder */
    int slot_fresh;           /* started since the slot was last reset */
    int step, n_in, per;      /* frames: a step's advance (2c), input (2c + 13), output (c / 2) */
    /* front end: samples [pcm_base, pcm_base + pcm_n) kept (from the next frame's window on) */
    float *pcm; /* (PIECE + a window) */
    size_t pcm_cap, pcm_n, pcm_base, n_samples;
    /* fbank frames [feat_base, feat_base + feat_n) not yet behind every step */
    float *feats; /* (feat_cap, F) */
    int feat_cap, feat_n, feat_base;
    int frames;          /* fbank frames computed */
    int steps;           /* encoder steps run */
    float *in;           /* (n_in, F) a step's input with the tail padding */
    float *enc_out, *ep; /* (per, d), (per, joiner_dim) */
    int started, ended;
    icefall_method_t method;
    icefall_greedy_t g;
    icefall_beam_t b;
    int has_g, has_b;
    /* endpointing (icefall_stream_set_endpointing) */
    int ep_on, ep_continuous;
    ctc_endpoint_rule_t ep_rule[CTC_ENDPOINT_RULES];
    int seg_start;           /* encoder frame where the current segment starts */
    int stopped;             /* an endpoint without continuous decoding: nothing more is decoded */
    int in_tail;             /* input_done's tail padding steps: no endpoints */
    icefall_segment_t *segs; /* (segs_cap) queued segments [segs_head, n_segs) */
    int segs_head, n_segs, segs_cap, n_ended;
    /* the feed in progress (icefall_stream_feed): what is left of its audio, whether it ends the
     * stream, where it stands (FEED_*), the fbank target and after it; T, total: input_done's */
    const float *f_pcm;
    size_t f_n;
    int f_done, f_phase, f_after, f_target, f_T, f_total;
    const float *f_in; /* the ready step's input */
    int f_ready;       /* feed_next's result in the round */
};

enum { FEED_AUDIO, FEED_FRAMES, FEED_ENDED, FEED_TAIL, FEED_IDLE };

static void segs_clear(icefall_stream_t *s)
{
    for (int i = s->segs_head; i < s->n_segs; i++)
        icefall_result_free(&s->segs[i].res);
    s->segs_head = s->n_segs = 0;
}

void icefall_stream_destroy(icefall_stream_t *s)
{
    if (!s)
        return;
    icefall_zf_stream_destroy(s->enc);
    hark_free(s->pcm);
    hark_free(s->feats);
    hark_free(s->in);
    hark_free(s->enc_out);
    hark_free(s->ep);
    icefall_greedy_free(&s->g);
    icefall_beam_free(&s->b);
    segs_clear(s);
    hark_free(s->segs);
    hark_free(s);
}

int icefall_stream_create(const icefall_model_t *m, icefall_stream_t **out, hark_err_t *err)
{
    *out = NULL;
    const icefall_config_t *c = &m->cfg;
    icefall_stream_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    s->m = m;
    s->slot = -1;
    /* the CPU encoder's caches (s->enc) come with the stream's first step on a CPU worker: a
     * stream stepped on a GPU worker keeps them in its device slot only */
    if (!icefall_can_stream(m)) {
        hark_free(s);
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall: only a causal zipformer with one chunk size > 0 and a left "
                       "context > 0 (a multiple of every downsampling factor) streams");
    }
    const feat_plan_t *fp = m->feat;
    const size_t F = (size_t)c->feature_dim;
    s->step = 2 * c->zf.chunk;
    s->n_in = icefall_zf_stream_step_frames(m);
    s->per = c->zf.chunk / 2;
    s->pcm_cap = PIECE + (size_t)fp->frame_span + (size_t)fp->hop;
    s->feat_cap = s->n_in + PIECE / fp->hop + 2;
    s->pcm = hark_malloc(sizeof(float) * s->pcm_cap);
    s->feats = hark_malloc(sizeof(float) * (size_t)s->feat_cap * F);
    s->in = hark_malloc(sizeof(float) * (size_t)s->n_in * F);
    s->enc_out = hark_malloc(sizeof(float) * (size_t)s->per * c->d);
    s->ep = hark_malloc(sizeof(float) * (size_t)s->per * c->joiner_dim);
    if (!s->pcm || !s->feats || !s->in || !s->enc_out || !s->ep) {
        icefall_stream_destroy(s);
        return err_set(err, HARK_ERR_NOMEM, "out of memory for an icefall stream");
    }
    *out = s;
    return HARK_OK;
}

int icefall_stream_start(icefall_stream_t *s, icefall_method_t method, int beam, hark_err_t *err)
{
    const icefall_model_t *m = s->m;
    if (beam <= 0)
        beam = m->cfg.beam_size;
    if (method == ICEFALL_FAST_BEAM)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall stream: fast_beam_search decodes whole utterances only (a stream "
                       "decodes with greedy_search or modified_beam_search)");
    if (method != ICEFALL_GREEDY && method != ICEFALL_MODIFIED_BEAM)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall stream: unknown decoding method %d",
                       (int)method);
    if (method == ICEFALL_MODIFIED_BEAM && beam > 64)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall stream: beam %d must be in [1, 64]",
                       beam);
    int rc = HARK_OK;
    if (method == ICEFALL_GREEDY) {
        if (!s->has_g && (rc = icefall_greedy_init(m, &s->g, err)))
            return rc;
        s->has_g = 1;
        icefall_greedy_reset(m, &s->g);
    } else {
        if (s->has_b && s->b.beam != beam) {
            icefall_beam_free(&s->b);
            s->has_b = 0;
        }
        if (!s->has_b && (rc = icefall_beam_init(m, beam, 256, &s->b, err)))
            return rc;
        s->has_b = 1;
        icefall_beam_reset(m, &s->b);
    }
    if (s->enc)
        icefall_zf_stream_reset(s->enc);
    s->slot_fresh = 1;
    s->method = method;
    s->pcm_n = s->pcm_base = s->n_samples = 0;
    s->feat_n = s->feat_base = s->frames = s->steps = 0;
    s->started = 1;
    s->ended = 0;
    s->ep_on = s->ep_continuous = s->seg_start = s->stopped = s->in_tail = s->n_ended = 0;
    segs_clear(s);
    return HARK_OK;
}

void icefall_stream_set_slot(icefall_stream_t *s, int slot)
{
    s->slot = slot < 0 ? -1 : slot;
    s->slot_fresh = 1;
}

int icefall_stream_set_endpointing(icefall_stream_t *s, const ctc_endpoint_rule_t *rule,
                                   int continuous, hark_err_t *err)
{
    if (!s->started)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall stream: endpointing before start");
    ctc_endpoint_rule_t r[CTC_ENDPOINT_RULES];
    if (rule)
        memcpy(r, rule, sizeof r);
    else
        endpoint_rules_transducer_default(r);
    for (int i = 0; i < CTC_ENDPOINT_RULES; i++)
        if (r[i].min_trailing_silence < 0 || r[i].min_utterance_length < 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "endpoint rule %d: negative times", i + 1);
    memcpy(s->ep_rule, r, sizeof r);
    s->ep_on = 1;
    s->ep_continuous = !!continuous;
    return HARK_OK;
}

/* The current segment's result (what icefall_stream_result gives) into res (zeroed first). */
static int hyp_result(const icefall_stream_t *s, icefall_result_t *res, hark_err_t *err)
{
    memset(res, 0, sizeof *res);
    const icefall_model_t *m = s->m;
    int rc = HARK_OK;
    res->n_frames = s->steps * s->per;
    if (!s->started) {
        /* nothing decoded */
    } else if (s->method == ICEFALL_GREEDY) {
        const icefall_hyp_t *h = &s->g.hyp;
        size_t k = (size_t)(h->n > 0 ? h->n : 1);
        res->best.tokens = hark_malloc(sizeof(int) * k);
        res->best.times = hark_malloc(sizeof(int) * k);
        if (!res->best.tokens || !res->best.times) {
            icefall_result_free(res);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
        if (h->n > 0) {
            memcpy(res->best.tokens, h->tokens, sizeof(int) * (size_t)h->n);
            memcpy(res->best.times, h->times, sizeof(int) * (size_t)h->n);
        }
        res->best.n = h->n;
        res->best.score = h->score;
    } else {
        rc = icefall_beam_result(&s->b, &res->best, &res->nbest, &res->n_nbest, err);
    }
    if (!rc)
        rc = icefall_text(m, &res->best, &res->text, err);
    if (rc) {
        int n_frames = res->n_frames;
        icefall_result_free(res);
        res->n_frames = n_frames;
    }
    return rc;
}

/* After a step: the rules on the current segment; at an endpoint its result queued, then a fresh
 * search (continuous) or the stream stopped. */
static int endpoint_check(icefall_stream_t *s, hark_err_t *err)
{
    const icefall_model_t *m = s->m;
    const int frames = s->steps * s->per;
    int n, last;
    if (s->method == ICEFALL_GREEDY) {
        n = s->g.hyp.n;
        last = n > 0 ? s->g.hyp.times[n - 1] : -1;
    } else {
        const bhyp_t *h = &s->b.A[icefall_beam_best(&s->b)];
        n = h->n_ys - s->b.cs;
        last = n > 0 ? h->times[n - 1] : -1;
    }
    const long fms = icefall_frame_ms(m, 1);
    const int trailing = frames - (n > 0 ? last + 1 : s->seg_start);
    int rule = endpoint_rules_check(s->ep_rule, (long)(frames - s->seg_start) * fms,
                                    (long)trailing * fms, n > 0);
    if (!rule)
        return HARK_OK;
    if (s->segs_head > 0 && s->segs_head == s->n_segs)
        s->segs_head = s->n_segs = 0;
    if (s->n_segs == s->segs_cap) {
        int cap = s->segs_cap ? 2 * s->segs_cap : 4;
        icefall_segment_t *g = hark_realloc(s->segs, sizeof *g * (size_t)cap);
        if (!g)
            return err_set(err, HARK_ERR_NOMEM, "icefall stream: out of memory for a segment");
        s->segs = g;
        s->segs_cap = cap;
    }
    icefall_segment_t *sg = &s->segs[s->n_segs];
    int rc = hyp_result(s, &sg->res, err);
    if (rc)
        return rc;
    sg->rule = rule;
    sg->start_frame = s->seg_start;
    sg->end_frame = frames;
    s->n_segs++;
    s->n_ended++;
    if (!s->ep_continuous) {
        s->stopped = 1;
        return HARK_OK;
    }
    if (s->method == ICEFALL_GREEDY)
        icefall_greedy_reset(m, &s->g);
    else
        icefall_beam_reset(m, &s->b);
    s->seg_start = frames;
    return HARK_OK;
}

int icefall_stream_pop_segment(icefall_stream_t *s, icefall_segment_t *seg)
{
    if (s->segs_head >= s->n_segs) {
        memset(seg, 0, sizeof *seg);
        return 0;
    }
    *seg = s->segs[s->segs_head++];
    return 1;
}

int icefall_stream_segments(const icefall_stream_t *s)
{
    return s->n_ended;
}

int icefall_stream_stopped(const icefall_stream_t *s)
{
    return s->stopped;
}

/* After the encoder step into s->enc_out: the search over its output, then the endpoint rules. */
static int after_step(icefall_stream_t *s, hark_err_t *err)
{
    const icefall_model_t *m = s->m;
    icefall_encoder_proj(m, s->enc_out, s->per, s->ep);
    const int t0 = s->steps * s->per;
    int rc = s->method == ICEFALL_GREEDY ? icefall_greedy_advance(m, &s->g, s->ep, s->per, t0, err)
                                         : icefall_beam_advance(m, &s->b, s->ep, s->per, t0, err);
    if (rc)
        return rc;
    s->steps++;
    return s->ep_on && !s->in_tail ? endpoint_check(s, err) : HARK_OK;
}

/* The feed's front end, run until a step is ready (1, s->f_in its n_in frames) or the feed is
 * used up (0); < 0 an error. Audio goes into the front end PIECE samples at a time; the fbank
 * frames each piece completes are computed as far as the frames buffer holds them (the frames
 * behind every later step dropped first); the samples before the next frame's window are dropped
 * once a piece's frames are all computed. At the feed's end (input_done) every frame, then the
 * tail padding steps. Each step is ready as soon as its frames are: the steps, their order and
 * their inputs are what a stream fed on its own runs. */
static int feed_next(icefall_stream_t *s, hark_err_t *err)
{
    const feat_plan_t *fp = s->m->feat;
    const size_t F = (size_t)s->m->cfg.feature_dim;
    for (;;) {
        switch (s->f_phase) {
        case FEED_AUDIO:
            if (s->stopped) { /* counted, not decoded */
                s->n_samples += s->f_n;
                s->f_n = 0;
            }
            if (s->f_n > 0) {
                size_t k = s->pcm_cap - s->pcm_n; /* >= PIECE: fewer than a window + hop kept */
                k = k < s->f_n ? k : s->f_n;
                k = k < PIECE ? k : PIECE;
                memcpy(s->pcm + s->pcm_n, s->f_pcm, sizeof(float) * k);
                s->pcm_n += k;
                s->n_samples += k;
                s->f_pcm += k;
                s->f_n -= k;
                s->f_target = feat_frames_final(fp, s->n_samples);
                s->f_after = FEED_AUDIO;
                s->f_phase = FEED_FRAMES;
            } else if (s->f_done) {
                s->f_T = feat_num_frames(fp, s->n_samples);
                s->f_target = s->f_T;
                s->f_after = FEED_ENDED;
                s->f_phase = FEED_FRAMES;
            } else {
                s->f_phase = FEED_IDLE;
            }
            break;
        case FEED_FRAMES: {
            if (!s->stopped && s->feat_base + s->feat_n >= s->steps * s->step + s->n_in) {
                s->f_in = s->feats + (size_t)(s->steps * s->step - s->feat_base) * F;
                return 1;
            }
            int drop = s->steps * s->step - s->feat_base; /* frames behind every later step */
            drop = drop > s->feat_n ? s->feat_n : drop;
            if (drop > 0) {
                memmove(s->feats, s->feats + (size_t)drop * F,
                        sizeof(float) * (size_t)(s->feat_n - drop) * F);
                s->feat_n -= drop;
                s->feat_base += drop;
            }
            if (!s->stopped && s->frames < s->f_target) {
                int room = s->feat_cap - s->feat_n, nf = s->f_target - s->frames;
                nf = nf < room ? nf : room;
                if (nf <= 0) /* defensive: fewer than n_in frames are kept */
                    return err_set(err, HARK_ERR_INTERNAL,
                                   "icefall stream: no room for fbank frames");
                int rc = feat_compute_frames(fp, s->pcm, s->pcm_base, s->pcm_n, s->n_samples,
                                             s->frames, nf, s->feats + (size_t)s->feat_n * F, err);
                if (rc)
                    return rc;
                s->feat_n += nf;
                s->frames += nf;
                break;
            }
            long keep = (long)s->frames * fp->hop - fp->pad_left;
            size_t k = keep > 0 ? (size_t)keep : 0;
            if (k > s->pcm_base) {
                size_t d = k - s->pcm_base < s->pcm_n ? k - s->pcm_base : s->pcm_n;
                memmove(s->pcm, s->pcm + d, sizeof(float) * (s->pcm_n - d));
                s->pcm_n -= d;
                s->pcm_base += d;
            }
            s->f_phase = s->f_after;
            break;
        }
        case FEED_ENDED:
            s->ended = 1;
            if (s->stopped) {
                s->f_phase = FEED_IDLE;
                break;
            }
            s->in_tail = 1;
            /* DecodeStream: the features padded by 13 + 30 frames of log(1e-10); steps while
             * frames are left (a step reads what there is, padded to n_in) */
            s->f_total = s->f_T + s->n_in - s->step + TAIL_FRAMES;
            s->f_phase = FEED_TAIL;
            break;
        case FEED_TAIL: {
            if (s->steps * s->step >= s->f_total) {
                s->f_phase = FEED_IDLE;
                break;
            }
            const int f0 = s->steps * s->step, T = s->f_T;
            const float pad = s->m->cfg.pad_value;
            for (int i = 0; i < s->n_in; i++) {
                float *row = s->in + (size_t)i * F;
                if (f0 + i < T)
                    memcpy(row, s->feats + (size_t)(f0 + i - s->feat_base) * F, sizeof(float) * F);
                else
                    for (size_t j = 0; j < F; j++)
                        row[j] = pad;
            }
            s->f_in = s->in;
            return 1;
        }
        default:
            return 0;
        }
    }
}

/* The checks of a feed's stream before any of it is taken */
static int feed_check(icefall_worker_t *w, const icefall_stream_feed_t *f, hark_err_t *err)
{
    const icefall_stream_t *s = f->s;
    if (!s->started)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall stream: %s before start",
                       f->n > 0 || !f->input_done ? "accept" : "input_done");
    if (s->ended)
        return err_set(err, HARK_ERR_CLOSED, "the stream's audio has already ended");
    if (w->m != s->m)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: the stream is another model's");
    for (size_t i = 0; i < f->n; i++)
        if (!isfinite(f->pcm[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "sample %zu of the chunk is %s", i,
                           isnan(f->pcm[i]) ? "NaN" : "infinite");
    return HARK_OK;
}

typedef struct {
    icefall_stream_feed_t *f;
    icefall_worker_t *w;
} feed_ctx_t;

/* feed i's front end up to its next step (its result in f_ready), when the feed is live */
static void front_one(void *ctx, int i)
{
    icefall_stream_feed_t *fi = &((feed_ctx_t *)ctx)->f[i];
    if (fi->status || fi->s->f_phase == FEED_IDLE)
        return;
    fi->s->f_ready = feed_next(fi->s, &fi->err);
}

/* the search of the round's r-th step */
static void search_one(void *ctx, int r)
{
    feed_ctx_t *c = ctx;
    icefall_stream_feed_t *fi = &c->f[c->w->b_job[r]];
    fi->status = after_step(fi->s, &fi->err);
}

/* The round's nr steps on the worker's GPU encoder: each stream in its slot (every stream of
 * the round has one), reset first when the stream started since */
static int gpu_step(icefall_worker_t *w, icefall_stream_feed_t *f, int nr, hark_err_t *err)
{
    for (int r = 0; r < nr; r++) {
        icefall_stream_t *s = f[w->b_job[r]].s;
        int rc;
        if (s->slot_fresh && (rc = icefall_zf_gpu_slot_reset(w->zgpu, s->slot, err)))
            return rc;
        s->slot_fresh = 0;
        w->b_slot[r] = s->slot;
    }
    return icefall_zf_gpu_step(w->zgpu, w->b_slot, w->b_in, w->b_out, nr, err);
}

int icefall_stream_feed(icefall_worker_t *w, icefall_stream_feed_t *f, int n)
{
    if (n > w->max_streams) {
        for (int i = 0; i < n; i++)
            f[i].status = err_set(&f[i].err, HARK_ERR_INVALID_ARG,
                                  "icefall: %d streams fed together: the worker has room for %d", n,
                                  w->max_streams);
        return f[0].status;
    }
    int n_live = 0;
    for (int i = 0; i < n; i++) {
        icefall_stream_feed_t *fi = &f[i];
        memset(&fi->err, 0, sizeof fi->err);
        fi->status = feed_check(w, fi, &fi->err);
        for (int j = 0; !fi->status && j < i; j++)
            if (f[j].s == fi->s)
                fi->status = err_set(&fi->err, HARK_ERR_INVALID_ARG,
                                     "icefall: feed %d is feed %d's stream again", i, j);
        if (fi->status)
            continue;
        icefall_stream_t *s = fi->s;
        s->f_pcm = fi->pcm;
        s->f_n = fi->n;
        s->f_done = fi->input_done;
        s->f_phase = FEED_AUDIO;
        n_live++;
    }
    /* rounds: every live feed's front end up to its next ready step; those steps as one batch;
     * each stream's search on its own output (both per stream on the worker's stream threads) */
    feed_ctx_t fc = {.f = f, .w = w};
    while (n_live > 0) {
        int nr = 0;
        parallel_for(w->par, n, front_one, &fc);
        for (int i = 0; i < n; i++) {
            icefall_stream_feed_t *fi = &f[i];
            if (fi->status || fi->s->f_phase == FEED_IDLE)
                continue;
            int r = fi->s->f_ready;
            if (r < 0 || r == 0) {
                if (r < 0)
                    fi->status = r;
                fi->s->f_phase = FEED_IDLE;
                n_live--;
                continue;
            }
            if (w->zgpu && fi->s->slot < 0)
                fi->status = err_set(&fi->err, HARK_ERR_INVALID_ARG,
                                     "icefall stream: the worker's encoder is on a GPU and this "
                                     "stream has no slot there (icefall_stream_set_slot)");
            else if (!w->zgpu && !fi->s->enc)
                fi->status = icefall_zf_stream_create(w->m, &fi->s->enc, &fi->err);
            if (fi->status) { /* this stream only: the others' steps go on */
                fi->s->f_phase = FEED_IDLE;
                n_live--;
                continue;
            }
            w->b_job[nr] = i;
            w->b_zs[nr] = fi->s->enc;
            w->b_in[nr] = fi->s->f_in;
            w->b_out[nr++] = fi->s->enc_out;
        }
        if (nr == 0)
            break;
        hark_err_t e = {0};
        int rc = w->zgpu ? gpu_step(w, f, nr, &e)
                         : icefall_zf_stream_step_batch(w, w->b_zs, w->b_in, w->b_out, nr, &e);
        if (rc) {
            for (int r = 0; r < nr; r++) {
                f[w->b_job[r]].status = rc;
                f[w->b_job[r]].err = e;
            }
        } else {
            parallel_for(w->par, nr, search_one, &fc);
        }
        for (int r = 0; r < nr; r++) {
            icefall_stream_feed_t *fi = &f[w->b_job[r]];
            if (fi->status) {
                fi->s->f_phase = FEED_IDLE;
                n_live--;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (f[i].status)
            return f[i].status;
    return HARK_OK;
}

int icefall_stream_accept(icefall_worker_t *w, icefall_stream_t *s, const float *pcm, size_t n,
                          hark_err_t *err)
{
    icefall_stream_feed_t f = {.s = s, .pcm = pcm, .n = n};
    int rc = icefall_stream_feed(w, &f, 1);
    if (rc && err)
        *err = f.err;
    return rc;
}

int icefall_stream_input_done(icefall_worker_t *w, icefall_stream_t *s, hark_err_t *err)
{
    icefall_stream_feed_t f = {.s = s, .input_done = 1};
    int rc = icefall_stream_feed(w, &f, 1);
    if (rc && err)
        *err = f.err;
    return rc;
}

int icefall_stream_result(const icefall_stream_t *s, icefall_result_t *res, hark_err_t *err)
{
    return hyp_result(s, res, err);
}

int icefall_stream_steps(const icefall_stream_t *s)
{
    return s->steps;
}

size_t icefall_stream_samples(const icefall_stream_t *s)
{
    return s->n_samples;
}

int icefall_stream_ended(const icefall_stream_t *s)
{
    return s->ended;
}
