/* Endpointing of the causal zipformer's streams (icefall_stream_set_endpointing in
 * src/model/icefall/icefall_stream.c; the family's SEGMENT events in icefall_family.c), with a
 * generated causal model (support/icefall_gen.h):
 * - icefall_endpoint_rules: a model whose joiner emits only blanks (its blank logit raised by
 *   10^4), so the silence is every frame: rule 1 ends a segment every 2400 ms (60 frames of 40 ms,
 * 15 steps of 4 frames), rule 3 at the first step at or past its length, rule 2 never (nothing
 * decoded); off, none.
 * - icefall_endpoint_stream: a model whose joiner emits tokens on speech and none on quiet (blank
 *   logit raised by 12), speech with long quiet stretches, greedy and modified beam search:
 *   the segments (rule, frames, tokens, times from the stream's start) are those of a reference
 *   that runs the searches over the whole audio's encoder frames step by step, counting the blank
 *   frames itself and restarting the search at each endpoint; the first one is where the rules
 *   hold on the search without endpoints; several non-empty segments; without continuous
 *   decoding the stream stops at the first; fed at once or in pieces, the same.
 * - icefall_endpoint_family: the same through the family (request parameters endpointing,
 *   continuous_decoding, endpoint_*_ms): a SEGMENT event per segment before the item's result,
 *   the segments' texts and spans; without continuous decoding one, then the items' results are
 *   its; bad values refused by name. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"
#include "search/ctc_endpoint.h"
#include "support/icefall_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE 16000
#define PER 4  /* encoder frames a step (chunk 8 / 2) */
#define FMS 40 /* ms an encoder frame */
#define MAXSEG 32

/* the generated causal model with the joiner's blank logit raised by blank_bias */
static int gen_causal(test_ctx_t *t, const char *blank_bias, char *dir, size_t n)
{
    char log[4096], ck[64];
    const char *tmp = test_tmpdir(t);
    snprintf(ck, sizeof ck, "--blank-bias %s", blank_bias);
    if (icefall_gen_model_ex(tmp, "me", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL, ck, NULL, log,
                             sizeof log)) {
        printf("  conversion failed: %s\n", log);
        return -1;
    }
    snprintf(dir, n, "%s/me", tmp);
    return 0;
}

/* speech-like stretches (0.2 s pieces of a tone and noise, as test_icefall_stream.c's) between
 * quiet ones (noise at 1e-4): the spans in seconds, speech first */
static float *make_signal(const double *spans, int n_spans, size_t *n_out, unsigned seed)
{
    size_t n = 0;
    for (int i = 0; i < n_spans; i++)
        n += (size_t)(spans[i] * RATE);
    float *x = hark_malloc(sizeof(float) * n);
    float fr = 0, amp = 0, nz = 0;
    size_t at = 0;
    for (int s = 0; s < n_spans; s++) {
        size_t k = (size_t)(spans[s] * RATE);
        for (size_t i = 0; i < k; i++, at++) {
            if (s % 2) {
                x[at] = 1e-4f * test_randf(&seed);
                continue;
            }
            if (i % 3200 == 0) {
                fr = 0.02f + 0.15f * (test_randf(&seed) + 1);
                amp = 0.25f * (test_randf(&seed) + 1);
                nz = 0.1f * (test_randf(&seed) + 1);
            }
            x[at] = amp * sinf(fr * (float)at) + nz * test_randf(&seed);
        }
    }
    *n_out = n;
    return x;
}

typedef struct {
    int rule, start, end;
    int n, tokens[512], times[512];
} seg_t;

/* The reference: the searches over the whole audio's encoder frames (icefall_zf_stream_encode,
 * which test_icefall_stream.c checks the stream's steps against) step by step; after each of the
 * steps the audio completes (not the tail padding's) the rules, the trailing silence counted here
 * frame by frame (greedy: a frame that added no token; beam: the frames after the best
 * hypothesis's last token); at an endpoint the segment is recorded and the search restarted.
 * Returns the segments (the last one: what remains at the end). */
static int ref_segments(icefall_worker_t *w, const icefall_model_t *m, const float *pcm, size_t n,
                        int beam, const ctc_endpoint_rule_t *rule, int continuous, seg_t *seg,
                        int *n_seg)
{
    const icefall_config_t *c = icefall_config(m);
    hark_err_t err = {0};
    int T = icefall_num_frames(m, n);
    float *feats = hark_malloc(sizeof(float) * (size_t)(T > 0 ? T : 1) * c->feature_dim);
    float *se = NULL;
    int slen = 0;
    int rc = feat_compute(icefall_feat_plan(m), pcm, n, feats, &err);
    if (!rc)
        rc = icefall_zf_stream_encode(w, feats, T, &se, &slen, &err);
    hark_free(feats);
    if (rc)
        return rc;
    float *ep = hark_malloc(sizeof(float) * (size_t)slen * c->joiner_dim);
    icefall_encoder_proj(m, se, slen, ep);
    hark_free(se);
    const int n_in = icefall_zf_stream_step_frames(m), step = 2 * c->zf.chunk;
    const int real_steps = T >= n_in ? (T - n_in) / step + 1 : 0;
    icefall_greedy_t g;
    icefall_beam_t b;
    memset(&g, 0, sizeof g);
    memset(&b, 0, sizeof b);
    rc = beam ? icefall_beam_init(m, beam, 256, &b, &err) : icefall_greedy_init(m, &g, &err);
    int ns = 0, seg_start = 0, blanks = 0, stopped = 0;
    for (int k = 0; !rc && k * PER < slen && !stopped; k++) {
        for (int f = k * PER; f < (k + 1) * PER && !rc; f++) {
            const float *e = ep + (size_t)f * c->joiner_dim;
            if (beam) {
                rc = icefall_beam_advance(m, &b, e, 1, f, &err);
            } else {
                int before = g.hyp.n;
                rc = icefall_greedy_advance(m, &g, e, 1, f, &err);
                blanks = g.hyp.n > before ? 0 : blanks + 1;
            }
        }
        const int frames = (k + 1) * PER;
        if (beam) {
            const bhyp_t *h = &b.A[icefall_beam_best(&b)];
            int nt = h->n_ys - b.cs;
            blanks = nt > 0 ? frames - 1 - h->times[nt - 1] : frames - seg_start;
        }
        if (rc || k >= real_steps || !rule)
            continue;
        const int decoded =
            beam ? b.A[icefall_beam_best(&b)].n_ys > b.cs : blanks < frames - seg_start;
        int r = endpoint_rules_check(rule, (long)(frames - seg_start) * FMS, (long)blanks * FMS,
                                     decoded);
        if (!r)
            continue;
        icefall_hyp_t h = {0};
        if (beam) {
            rc = icefall_beam_result(&b, &h, NULL, NULL, &err);
        } else {
            h = g.hyp;
        }
        seg_t *s = &seg[ns++];
        s->rule = r;
        s->start = seg_start;
        s->end = frames;
        s->n = h.n < 512 ? h.n : 512;
        if (h.n > 0) {
            memcpy(s->tokens, h.tokens, sizeof(int) * (size_t)s->n);
            memcpy(s->times, h.times, sizeof(int) * (size_t)s->n);
        }
        if (beam)
            icefall_hyp_free(&h);
        if (!continuous) {
            stopped = 1;
            break;
        }
        if (beam)
            icefall_beam_reset(m, &b);
        else
            icefall_greedy_reset(m, &g);
        seg_start = frames;
        blanks = 0;
        if (ns == MAXSEG - 1)
            break;
    }
    if (!rc && !stopped) { /* what remains */
        icefall_hyp_t h = {0};
        if (beam)
            rc = icefall_beam_result(&b, &h, NULL, NULL, &err);
        else
            h = g.hyp;
        seg_t *s = &seg[ns++];
        s->rule = 0;
        s->start = seg_start;
        s->end = slen;
        s->n = h.n < 512 ? h.n : 512;
        if (h.n > 0) {
            memcpy(s->tokens, h.tokens, sizeof(int) * (size_t)s->n);
            memcpy(s->times, h.times, sizeof(int) * (size_t)s->n);
        }
        if (beam)
            icefall_hyp_free(&h);
    }
    *n_seg = ns;
    icefall_greedy_free(&g);
    icefall_beam_free(&b);
    hark_free(ep);
    return rc;
}

static int same_seg(const seg_t *r, const icefall_hyp_t *h)
{
    if (r->n != h->n)
        return 0;
    for (int i = 0; i < h->n; i++)
        if (r->tokens[i] != h->tokens[i] || r->times[i] != h->times[i])
            return 0;
    return 1;
}

/* Feeds pcm in pieces of `piece` (0: at once), pops every segment, ends the stream. Checks each
 * against ref (n_ref, the last one the final result); *n_got: the segments seen. */
static void run_stream(test_ctx_t *t, icefall_worker_t *w, icefall_stream_t *s, const float *pcm,
                       size_t n, size_t piece, const seg_t *ref, int n_ref, int continuous,
                       int *n_got)
{
    hark_err_t err = {0};
    int got = 0, ok = 1;
    icefall_segment_t sg;
    for (size_t at = 0; at < n;) {
        size_t k = piece && piece < n - at ? piece : n - at;
        CHECK_OK(icefall_stream_accept(w, s, pcm + at, k, &err));
        at += k;
        while (icefall_stream_pop_segment(s, &sg)) {
            const seg_t *r = got < n_ref ? &ref[got] : NULL;
            int same = r && r->rule == sg.rule && r->start == sg.start_frame &&
                       r->end == sg.end_frame && same_seg(r, &sg.res.best);
            CHECKF(same,
                   "piece %zu: segment %d (rule %d, frames %d .. %d, %d tokens) is not the "
                   "reference's (rule %d, %d .. %d, %d tokens)",
                   piece, got, sg.rule, sg.start_frame, sg.end_frame, sg.res.best.n,
                   r ? r->rule : -1, r ? r->start : -1, r ? r->end : -1, r ? r->n : -1);
            CHECK(sg.res.text != NULL);
            icefall_result_free(&sg.res);
            got++;
        }
    }
    CHECK_OK(icefall_stream_input_done(w, s, &err));
    CHECK(!icefall_stream_pop_segment(s, &sg)); /* none in the tail */
    icefall_result_t res;
    CHECK_OK(icefall_stream_result(s, &res, &err));
    const seg_t *last = &ref[n_ref - 1];
    if (continuous)
        ok = got == n_ref - 1 && same_seg(last, &res.best);
    else
        ok = got == 1 && icefall_stream_stopped(s) && same_seg(&ref[0], &res.best);
    CHECKF(ok, "piece %zu: %d segments (the reference's %d), the final result's %d tokens", piece,
           got, n_ref - 1, res.best.n);
    CHECK_EQ_INT(icefall_stream_segments(s), got);
    CHECK(icefall_stream_samples(s) == n);
    icefall_result_free(&res);
    *n_got = got;
}

TEST(icefall_endpoint_rules)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700];
    CHECK(gen_causal(t, "10000", dir, sizeof dir) == 0); /* blanks only */
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w = NULL;
    icefall_stream_t *s = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &w, &err));
    CHECK_OK(icefall_stream_create(m, &s, &err));
    CHECK_EQ_INT(icefall_frame_ms(m, 1), FMS);
    const double spans[] = {3.0, 2.0, 3.0, 2.0}; /* 10 s: 1000 fbank frames */
    size_t n = 0;
    float *pcm = make_signal(spans, 4, &n, 5);
    const int T = icefall_num_frames(m, n), n_in = icefall_zf_stream_step_frames(m);
    const int real_steps = (T - n_in) / 16 + 1; /* the steps the audio completes */
    ctc_endpoint_rule_t r[CTC_ENDPOINT_RULES];
    static const int methods[2] = {ICEFALL_GREEDY, ICEFALL_MODIFIED_BEAM};
    for (int mi = 0; mi < 2; mi++) {
        /* sherpa-onnx's defaults (rule NULL): rule 1 every 60 frames (15 steps), empty segments */
        CHECK_OK(icefall_stream_start(s, (icefall_method_t)methods[mi], 4, &err));
        CHECK_EQ_INT(icefall_stream_set_endpointing(s, NULL, 1, &err), 0);
        CHECK_OK(icefall_stream_accept(w, s, pcm, n, &err));
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        icefall_segment_t sg;
        int k = 0;
        while (icefall_stream_pop_segment(s, &sg)) {
            CHECKF(sg.rule == 1 && sg.start_frame == 60 * k && sg.end_frame == 60 * (k + 1) &&
                       sg.res.best.n == 0 && sg.res.text && !sg.res.text[0],
                   "segment %d: rule %d, frames %d .. %d, %d tokens", k, sg.rule, sg.start_frame,
                   sg.end_frame, sg.res.best.n);
            icefall_result_free(&sg.res);
            k++;
        }
        CHECK_EQ_INT(k, real_steps * PER / 60);
        /* rule 3 at 1000 ms: the first step at or past 25 frames (28), every 7 steps */
        endpoint_rules_transducer_default(r);
        r[0].min_trailing_silence = 1 << 30;
        r[2].min_utterance_length = 1000;
        CHECK_OK(icefall_stream_start(s, (icefall_method_t)methods[mi], 4, &err));
        CHECK_OK(icefall_stream_set_endpointing(s, r, 1, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm, n, &err));
        k = 0;
        while (icefall_stream_pop_segment(s, &sg)) {
            CHECKF(sg.rule == 3 && sg.start_frame == 28 * k && sg.end_frame == 28 * (k + 1),
                   "rule 3: segment %d: rule %d, frames %d .. %d", k, sg.rule, sg.start_frame,
                   sg.end_frame);
            icefall_result_free(&sg.res);
            k++;
        }
        CHECK_EQ_INT(k, icefall_stream_steps(s) / 7);
        /* rule 2 alone (40 ms of silence after speech): nothing decoded, never */
        r[2].min_utterance_length = 1 << 30;
        r[1].min_trailing_silence = 40;
        CHECK_OK(icefall_stream_start(s, (icefall_method_t)methods[mi], 4, &err));
        CHECK_OK(icefall_stream_set_endpointing(s, r, 1, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm, n, &err));
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        CHECK_EQ_INT(icefall_stream_segments(s), 0);
        /* rule 1 without continuous decoding: stops at frame 60, the rest counted only */
        CHECK_OK(icefall_stream_start(s, (icefall_method_t)methods[mi], 4, &err));
        CHECK_OK(icefall_stream_set_endpointing(s, NULL, 0, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm, n / 2, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm + n / 2, n - n / 2, &err));
        CHECK(icefall_stream_stopped(s));
        CHECK_EQ_INT(icefall_stream_steps(s), 15);
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        CHECK_EQ_INT(icefall_stream_steps(s), 15);
        CHECK(icefall_stream_samples(s) == n);
        CHECK(icefall_stream_pop_segment(s, &sg) && sg.end_frame == 60);
        icefall_result_free(&sg.res);
        /* off (the start's default): no segment, every step */
        CHECK_OK(icefall_stream_start(s, (icefall_method_t)methods[mi], 4, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm, n, &err));
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        CHECK_EQ_INT(icefall_stream_segments(s), 0);
        CHECK(!icefall_stream_pop_segment(s, &sg));
    }
    /* refused: before start; negative times */
    icefall_stream_t *s2 = NULL;
    CHECK_OK(icefall_stream_create(m, &s2, &err));
    CHECK_EQ_INT(icefall_stream_set_endpointing(s2, NULL, 1, &err), HARK_ERR_INVALID_ARG);
    CHECK_OK(icefall_stream_start(s2, ICEFALL_GREEDY, 0, &err));
    endpoint_rules_transducer_default(r);
    r[1].min_trailing_silence = -1;
    CHECK_EQ_INT(icefall_stream_set_endpointing(s2, r, 1, &err), HARK_ERR_INVALID_ARG);
    icefall_stream_destroy(s2);
    printf("  blanks only: rule 1 every 60 frames (%d segments in %.1f s), rule 3 every 28, rule 2 "
           "never\n",
           real_steps * PER / 60, (double)n / RATE);
    hark_free(pcm);
    icefall_stream_destroy(s);
    icefall_worker_destroy(w);
    icefall_destroy(m);
}

TEST(icefall_endpoint_stream)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700];
    CHECK(gen_causal(t, "12", dir, sizeof dir) == 0); /* tokens in the speech, not the quiet */
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w = NULL;
    icefall_stream_t *s = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &w, &err));
    CHECK_OK(icefall_stream_create(m, &s, &err));
    const double spans[] = {1.6, 2.0, 1.2, 4.0, 1.0, 0.6};
    size_t n = 0;
    float *pcm = make_signal(spans, 6, &n, 7);
    ctc_endpoint_rule_t r[CTC_ENDPOINT_RULES];
    endpoint_rules_transducer_default(r);
    static seg_t ref[MAXSEG], nocut[2];
    static const size_t pieces[] = {0, 1234, 3001, 16000};
    for (int beam = 0; beam <= 4; beam += 4) {
        int n_ref = 0, n_nocut = 0;
        CHECK_OK(ref_segments(w, m, pcm, n, beam, r, 1, ref, &n_ref));
        /* the first endpoint: where the rules first hold on the search without endpoints */
        CHECK_OK(ref_segments(w, m, pcm, n, beam, NULL, 1, nocut, &n_nocut));
        CHECK_EQ_INT(n_nocut, 1);
        int first = -1;
        for (int b = PER; first < 0 && b <= ref[0].end; b += PER) {
            int last = -1, k = 0;
            for (int i = 0; i < nocut[0].n && nocut[0].times[i] < b; i++, k++)
                last = nocut[0].times[i];
            if (!beam && endpoint_rules_check(r, (long)b * FMS, (long)(b - 1 - last) * FMS, k > 0))
                first = b;
        }
        if (!beam) {
            CHECKF(first == ref[0].end,
                   "greedy: the rules first hold at frame %d, the reference's "
                   "first segment ends at %d",
                   first, ref[0].end);
            for (int i = 0; i < ref[0].n; i++)
                CHECK(ref[0].tokens[i] == nocut[0].tokens[i] &&
                      ref[0].times[i] == nocut[0].times[i]);
        }
        int with_text = 0;
        for (int i = 0; i < n_ref; i++)
            with_text += ref[i].n > 0;
        CHECKF(n_ref >= 3 && with_text >= 3, "%s: %d segments, %d with tokens",
               beam ? "beam" : "greedy", n_ref, with_text);
        CHECK(ref[1].n > 0 && ref[1].times[0] >= ref[1].start); /* times from the stream's start */
        printf("  %s: %d segments:", beam ? "modified_beam_search" : "greedy_search", n_ref);
        for (int i = 0; i < n_ref; i++)
            printf(" [%d, %d) rule %d %d tokens;", ref[i].start, ref[i].end, ref[i].rule, ref[i].n);
        printf("\n");
        for (int pi = 0; pi < 4; pi++) {
            int got = 0;
            CHECK_OK(
                icefall_stream_start(s, beam ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY, beam, &err));
            CHECK_OK(icefall_stream_set_endpointing(s, NULL, 1, &err));
            run_stream(t, w, s, pcm, n, pieces[pi], ref, n_ref, 1, &got);
            if (test_failed(t))
                break;
        }
        /* without continuous decoding: the first segment, then nothing */
        CHECK_OK(ref_segments(w, m, pcm, n, beam, r, 0, ref, &n_ref));
        CHECK_EQ_INT(n_ref, 1);
        int got = 0;
        CHECK_OK(
            icefall_stream_start(s, beam ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY, beam, &err));
        CHECK_OK(icefall_stream_set_endpointing(s, NULL, 0, &err));
        run_stream(t, w, s, pcm, n, 3001, ref, n_ref, 0, &got);
        if (test_failed(t))
            break;
    }
    hark_free(pcm);
    icefall_stream_destroy(s);
    icefall_worker_destroy(w);
    icefall_destroy(m);
}

/* ---- through the family --------------------------------------------------------------------- */

typedef struct {
    int n_seg, n_done, n_partial, status, order_ok;
    char error[300];
    asr_result_t seg[MAXSEG];
    double seg_start[MAXSEG], seg_end[MAXSEG];
    asr_result_t final;
} egot_t;

static void on_emit(family_item_t *it, const family_event_t *ev)
{
    egot_t *g = it->user;
    if (ev->kind == FAMILY_EV_SEGMENT && ev->asr && g->n_seg < MAXSEG) {
        g->seg_start[g->n_seg] = ev->seg_start_s;
        g->seg_end[g->n_seg] = ev->seg_end_s;
        asr_result_take(&g->seg[g->n_seg++], ev->asr);
    }
    if (ev->kind == FAMILY_EV_PARTIAL)
        g->n_partial++;
    if (ev->kind != FAMILY_EV_DONE)
        return;
    g->n_done++;
    g->status = ev->status;
    if (ev->error)
        snprintf(g->error, sizeof g->error, "%s", ev->error);
    if (ev->asr) {
        asr_result_free(&g->final);
        asr_result_take(&g->final, ev->asr);
    }
}

static void egot_free(egot_t *g)
{
    for (int i = 0; i < g->n_seg; i++)
        asr_result_free(&g->seg[i]);
    asr_result_free(&g->final);
    memset(g, 0, sizeof *g);
}

static int same_tokens(const asr_hyp_t *a, const icefall_hyp_t *b, const icefall_model_t *m)
{
    if (a->n_tokens != b->n)
        return 0;
    for (int i = 0; i < b->n; i++)
        if (a->tokens[i] != b->tokens[i] || a->times_ms[i] != icefall_frame_ms(m, b->times[i]))
            return 0;
    return 1;
}

/* One stream through the family in pieces of `piece` samples (the last item ends it). */
static void family_stream(test_ctx_t *t, const family_t *f, family_worker_t *w, const void *opts,
                          const float *pcm, size_t n, size_t piece, egot_t *g)
{
    hark_err_t err = {0};
    void *st = NULL;
    CHECK_OK(f->stream_open(w, &st, &err));
    for (size_t at = 0; at < n; at += piece) {
        size_t k = n - at < piece ? n - at : piece;
        family_item_t it = {.opts = opts,
                            .pcm = pcm + at,
                            .n = k,
                            .want_words = 1,
                            .emit = on_emit,
                            .user = g,
                            .stream = st,
                            .stream_end = at + k == n};
        family_item_t *items[1] = {&it};
        CHECK_OK(f->execute(w, items, 1, NULL, &err));
    }
    f->stream_close(w, st);
}

TEST(icefall_endpoint_family)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700];
    CHECK(gen_causal(t, "12", dir, sizeof dir) == 0);
    const family_t *f = family_find("icefall_transducer");
    hark_err_t err = {0};
    family_model_t *fm = NULL;
    family_load_opts_t cpu = {.device = -1};
    CHECK_OK(f->load(dir, &cpu, NULL, &fm, &err));
    icefall_model_t *m = NULL;
    icefall_worker_t *iw = NULL;
    icefall_stream_t *s = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &iw, &err));
    CHECK_OK(icefall_stream_create(m, &s, &err));
    const double spans[] = {1.6, 2.0, 1.2, 4.0, 1.0, 0.6};
    size_t n = 0;
    float *pcm = make_signal(spans, 6, &n, 7);

    /* the engine's segments (continuous) */
    icefall_segment_t want[MAXSEG];
    int n_want = 0;
    CHECK_OK(icefall_stream_start(s, ICEFALL_GREEDY, 0, &err));
    CHECK_OK(icefall_stream_set_endpointing(s, NULL, 1, &err));
    CHECK_OK(icefall_stream_accept(iw, s, pcm, n, &err));
    CHECK_OK(icefall_stream_input_done(iw, s, &err));
    while (n_want < MAXSEG && icefall_stream_pop_segment(s, &want[n_want]))
        n_want++;
    icefall_result_t last;
    CHECK_OK(icefall_stream_result(s, &last, &err));
    CHECK(n_want >= 3);

    char o_on[256], o_once[256], o_off[256], o_cfg[256];
    family_param_t on[2] = {{"endpointing", "true"}, {"continuous_decoding", "true"}};
    family_param_t once[1] = {{"endpointing", "true"}};
    family_params_t req_on = {on, 2}, req_once = {once, 1};
    CHECK_OK(f->parse_opts(fm, NULL, &req_on, o_on, &err));
    CHECK_OK(f->parse_opts(fm, NULL, &req_once, o_once, &err));
    CHECK_OK(f->parse_opts(fm, NULL, NULL, o_off, &err));
    /* config.pbtxt turns it on, the request's rule 2 makes every 40 ms of silence an endpoint */
    family_param_t cfgp[2] = {{"endpointing", "true"}, {"continuous_decoding", "true"}};
    family_param_t r2[1] = {{"endpoint_silence_after_speech_ms", "40"}};
    family_params_t cfg = {cfgp, 2}, req_r2 = {r2, 1};
    CHECK_OK(f->parse_opts(fm, &cfg, &req_r2, o_cfg, &err));
    family_worker_t *w = NULL;
    family_worker_opts_t wo = {.max_batch = 1, .max_seconds = 12, .max_sequences = 2};
    CHECK_OK(f->worker_create(fm, &wo, &w, &err));

    /* continuous: a SEGMENT per endpoint, the engine's, then the last segment's DONE */
    egot_t g;
    memset(&g, 0, sizeof g);
    family_stream(t, f, w, o_on, pcm, n, 8000, &g);
    CHECKF(g.status == 0, "%s", g.error);
    CHECK_EQ_INT(g.n_seg, n_want);
    for (int i = 0; i < n_want; i++) {
        CHECKF(same_tokens(&g.seg[i].best, &want[i].res.best, m) &&
                   !strcmp(g.seg[i].best.text, want[i].res.text),
               "segment %d: '%s', the engine's '%s'", i, g.seg[i].best.text, want[i].res.text);
        CHECK(fabs(g.seg_start[i] - want[i].start_frame * 0.04) < 1e-9 &&
              fabs(g.seg_end[i] - want[i].end_frame * 0.04) < 1e-9);
        CHECK(want[i].res.best.n == 0 || g.seg[i].n_words > 0);
    }
    CHECK(same_tokens(&g.final.best, &last.best, m));
    size_t n_items = (n + 7999) / 8000;
    CHECK_EQ_INT(g.n_done, (int)n_items);
    CHECK_EQ_INT(g.n_partial, (int)n_items - 1);
    printf("  continuous: %d segments ('%s' ... ) and the last ('%s')\n", g.n_seg,
           g.seg[0].best.text, g.final.best.text);
    egot_free(&g);

    /* without continuous decoding: one segment, then the items' results are its */
    family_stream(t, f, w, o_once, pcm, n, 8000, &g);
    CHECKF(g.status == 0, "%s", g.error);
    CHECK_EQ_INT(g.n_seg, 1);
    CHECK(same_tokens(&g.seg[0].best, &want[0].res.best, m));
    CHECK(same_tokens(&g.final.best, &want[0].res.best, m));
    CHECK_EQ_INT(g.n_done, (int)n_items);
    egot_free(&g);

    /* off: no SEGMENT, today's final result (the whole audio's search) */
    family_stream(t, f, w, o_off, pcm, n, 8000, &g);
    CHECK_EQ_INT(g.n_seg, 0);
    icefall_result_t whole;
    CHECK_OK(icefall_stream_start(s, ICEFALL_GREEDY, 0, &err));
    CHECK_OK(icefall_stream_accept(iw, s, pcm, n, &err));
    CHECK_OK(icefall_stream_input_done(iw, s, &err));
    CHECK_OK(icefall_stream_result(s, &whole, &err));
    CHECK(same_tokens(&g.final.best, &whole.best, m));
    icefall_result_free(&whole);
    egot_free(&g);

    /* config.pbtxt's keys, the request's rule 2 time: more, shorter segments */
    family_stream(t, f, w, o_cfg, pcm, n, 8000, &g);
    CHECKF(g.status == 0 && g.n_seg > n_want, "%d segments with rule 2 at 40 ms (%s)", g.n_seg,
           g.error);
    egot_free(&g);

    /* bad values, by name */
    char o_bad[256];
    family_param_t bad1[1] = {{"endpointing", "yes"}};
    family_param_t bad2[1] = {{"endpoint_max_utterance_ms", "-5"}};
    family_params_t rb1 = {bad1, 1}, rb2 = {bad2, 1};
    CHECK_EQ_INT(f->parse_opts(fm, NULL, &rb1, o_bad, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "endpointing") != NULL);
    CHECK(f->parse_opts(fm, NULL, &rb2, o_bad, &err) != HARK_OK);
    CHECK(strstr(err.msg, "endpoint_max_utterance_ms") != NULL);

    for (int i = 0; i < n_want; i++)
        icefall_result_free(&want[i].res);
    icefall_result_free(&last);
    f->worker_destroy(w);
    f->unload(fm);
    hark_free(pcm);
    icefall_stream_destroy(s);
    icefall_worker_destroy(iw);
    icefall_destroy(m);
}
