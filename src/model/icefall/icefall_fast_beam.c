/* icefall_fast_beam.c — icefall's fast_beam_search_one_best with k2's trivial graph on the CPU
 * (icefall.h): k2's RNN-T decoding streams (rnnt_decode.cu: at most one symbol per frame, states
 * keyed by (decoder context, graph state), Viterbi scores, pruned per frame by beam, max_states,
 * then max_contexts), the lattice they leave and k2's shortest path through it.
 * Tests: tests/model/icefall/test_icefall_fast_beam.c
 *
 * OWNERSHIP AND THREADS: a call reads the shared, immutable model and allocates its own state
 * (the lattice's back-pointers, T x max_states at most, and one frame's arcs, max_states x
 * (vocab + 1)), freed before it returns; calls on different threads are independent. */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * What k2 does, in the terms used here (k2/csrc/rnnt_decode.cu, ragged_ops_inl.h, fsa_utils.cu,
 * fsa_algo.cu at the commit the reference was built from):
 *
 * - The trivial graph of vocab V has two states: state 0 with a self-loop for every token
 *   1 .. V-1 (in that order) and then an arc labelled -1 to state 1, the graph's final state,
 *   which has no arcs. A decoding state is key = context * 2 + graph_state, context the last
 *   context_size symbols as the number sum tok_k V^(cs-1-k) (oldest first). The first state is
 *   key 0: context [blank, ..., blank], score 0 (not greedy search's [-1, ..., blank]).
 * - A frame: the joiner's log-softmax for each distinct context of the states (float). Every
 *   graph-state-0 state s (score S) expands, in this order, the blank (to itself, S + lp[0],
 *   always kept), each token l (to context (ctx % V^(cs-1)) V + l, S + lp[l]) and the final
 *   arc (to (ctx, 1), S + lp[0]); a token arc survives the first pass if S + lp[l] >= M - beam,
 *   the final arc if S >= M - beam (k2 counts its log-prob as 0 there), M the best score of the
 *   frame's states (before the frame). States of graph state 1 expand nothing.
 * - The arcs are grouped by destination key (ascending; a stable sort, so arcs into one state
 *   stay in source order). A destination's score is the max of its arcs (not a log-add).
 * - Pruning (PruneRagged, k2's CPU: std::stable_sort by score, descending): states ranked by
 *   score, ties by key, keep the first max_states (only when there are more) and those not below
 *   best - beam; then the contexts of all destinations (in key order, one left empty by the
 *   state pruning scoring -inf) ranked by their best kept state, keep the first max_contexts and
 *   those not below best - beam. A state lives when it and its context are kept. The (ctx, 1)
 *   "final" states take places like any other.
 * - The lattice: every frame's kept arcs; on the last frame only the final arcs into kept
 *   (ctx, 1) states, with score 0 (allow_partial false: none kept, no path, no tokens). k2's
 *   shortest path (max, double) takes for every state the best entering arc, the last one
 *   among equals (ArgMaxPerSublist's >=) in arc order (source state order), and traces back
 *   from the final state. The best path's score is its start state's score on the last frame
 *   (the last frame's blank is not counted); its tokens are the non-blank arcs' labels, each at
 *   its frame (get_texts_with_timestamp).
 */

typedef struct {
    int64_t key;  /* context * 2 + graph state (1: the graph's final state) */
    double score; /* best path score into it */
    int prev;     /* the source of its best entering arc, among the previous frame's states */
    int label;    /* that arc's: 0 blank, a token, -1 the final arc */
} fb_state_t;

typedef struct {
    int64_t key;  /* destination */
    double score; /* source score + log-prob */
    int src;      /* source state (this frame's index) */
    int label;
    int order; /* position in the expansion: the stable sort's tie-break */
} fb_arc_t;

typedef struct {
    double score;
    int idx;
} fb_rank_t;

#define FB_NEAR 1e-3 /* first-pass arcs this near the cut are looked at for stats' margin */

typedef struct {
    const icefall_model_t *m;
    icefall_fast_beam_opts_t o;
    int V, cs, J, D;
    int64_t vpow; /* V^(cs-1) */
    /* the lattice: frame t's states at frames[off[t] .. off[t+1]) */
    fb_state_t *frames;
    size_t n_frames_used, cap_frames;
    size_t *off; /* (T + 2) */
    /* per frame scratch */
    int64_t *ctx_ids; /* (max_states) this frame's distinct contexts */
    int *ctx_tok;     /* (max_states, cs) their symbols, oldest first */
    int *st_ctx;      /* (max_states) each state's context index */
    float *dec, *dp, *e, *hid, *lp;
    fb_arc_t *arcs;   /* (max_states (V + 1)) */
    fb_state_t *dest; /* (max_states (V + 1)) the frame's destinations */
    fb_rank_t *rank;  /* (max_states (V + 1)) */
    char *keep;       /* (2 max_states (V + 1)) destinations kept, then their contexts */
    double *cscore;   /* (max_states (V + 1)) per destination context */
    int *dctx;        /* (max_states (V + 1)) each destination's context index */
    int *nin;         /* (max_states (V + 1)) each destination's entering arcs */
    fb_arc_t *near;   /* (max_states (V + 1)) first-pass arcs within NEAR of the cut: key, |gap| */
    double margin;    /* the nearest decision to a flip so far (icefall_fast_beam_stats_t) */
    long arcs_total, arcs_last; /* arcs into kept states: all frames', the last frame's */
} fb_t;

int icefall_fast_beam_check(const icefall_fast_beam_opts_t *o, hark_err_t *err)
{
    if (!(o->beam >= 0) || !isfinite(o->beam))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fast_beam_search: beam %g must be a finite number >= 0", o->beam);
    if (o->max_contexts < 1 || o->max_contexts > ICEFALL_FAST_BEAM_MAX_ITEMS)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fast_beam_search: max_contexts %d must be in [1, %d]", o->max_contexts,
                       ICEFALL_FAST_BEAM_MAX_ITEMS);
    if (o->max_states < 1 || o->max_states > ICEFALL_FAST_BEAM_MAX_ITEMS)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fast_beam_search: max_states %d must be in [1, %d]", o->max_states,
                       ICEFALL_FAST_BEAM_MAX_ITEMS);
    return HARK_OK;
}

static void fb_free(fb_t *f)
{
    hark_free(f->frames);
    hark_free(f->off);
    hark_free(f->ctx_ids);
    hark_free(f->ctx_tok);
    hark_free(f->st_ctx);
    hark_free(f->dec);
    hark_free(f->dp);
    hark_free(f->e);
    hark_free(f->hid);
    hark_free(f->lp);
    hark_free(f->arcs);
    hark_free(f->dest);
    hark_free(f->rank);
    hark_free(f->keep);
    hark_free(f->cscore);
    hark_free(f->dctx);
    hark_free(f->nin);
    hark_free(f->near);
}

/* room for n more states in the lattice */
static int fb_reserve(fb_t *f, size_t n)
{
    if (f->n_frames_used + n <= f->cap_frames)
        return HARK_OK;
    size_t cap = f->cap_frames ? f->cap_frames : 1024;
    while (cap < f->n_frames_used + n)
        cap *= 2;
    fb_state_t *p = hark_realloc(f->frames, sizeof *p * cap);
    if (!p)
        return HARK_ERR_NOMEM;
    f->frames = p;
    f->cap_frames = cap;
    return HARK_OK;
}

static int cmp_arc(const void *a, const void *b)
{
    const fb_arc_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* PruneRagged's order: score descending, the earlier first among equals (a stable sort) */
static int cmp_rank(const void *a, const void *b)
{
    const fb_rank_t *x = a, *y = b;
    if (x->score > y->score)
        return -1;
    if (x->score < y->score)
        return 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* keep[i] for n items of score[i]: k2's PruneRaggedAxis1 within one stream. With max_items < n
 * the items ranked past max_items go, and any below best - beam. *margin: the smallest gap
 * between the last kept and the first dropped by rank, or between a score and best - beam,
 * leaving out the exact ties every implementation breaks alike: a state and its final twin
 * (keys given: the same context; both scores are S + lp[blank]) and a score equal to the best. */
static void prune(char *keep, const double *score, const fb_state_t *keys, int n, double beam,
                  int max_items, fb_rank_t *rk, double *margin)
{
    double best = -INFINITY, m = INFINITY;
    for (int i = 0; i < n; i++)
        best = score[i] > best ? score[i] : best;
    for (int i = 0; i < n; i++)
        if (isfinite(score[i]) && score[i] != best && fabs(score[i] - (best - beam)) < m)
            m = fabs(score[i] - (best - beam));
    if (max_items < n) {
        for (int i = 0; i < n; i++)
            rk[i] = (fb_rank_t){score[i], i};
        qsort(rk, (size_t)n, sizeof *rk, cmp_rank);
        for (int k = 0; k < n; k++)
            keep[rk[k].idx] = k < max_items && !(rk[k].score < best - beam);
        const fb_rank_t *a = &rk[max_items - 1], *b = &rk[max_items];
        int twins =
            keys && a->score == b->score && (keys[a->idx].key >> 1) == (keys[b->idx].key >> 1);
        if (isfinite(b->score) && !twins && a->score - b->score < m)
            m = a->score - b->score;
    } else {
        for (int i = 0; i < n; i++)
            keep[i] = score[i] >= best - beam;
    }
    *margin = m;
}

/* One frame: the states of frame t (in the lattice) -> those of frame t + 1, appended. */
static int fb_frame(fb_t *f, int t, const float *ep_t)
{
    const icefall_model_t *m = f->m;
    const int V = f->V, cs = f->cs, J = f->J;
    const double beam = f->o.beam;
    if (fb_reserve(f, (size_t)f->o.max_states))
        return HARK_ERR_NOMEM;
    const fb_state_t *S = f->frames + f->off[t];
    const int n = (int)(f->off[t + 1] - f->off[t]);
    /* the distinct contexts (the states are in key order, so grouped) and their log-probs */
    int nc = 0;
    for (int i = 0; i < n; i++) {
        int64_t ctx = S[i].key >> 1;
        if (nc == 0 || f->ctx_ids[nc - 1] != ctx) {
            f->ctx_ids[nc] = ctx;
            int64_t c = ctx;
            for (int k = cs - 1; k >= 0; k--, c /= V)
                f->ctx_tok[(size_t)nc * cs + k] = (int)(c % V);
            nc++;
        }
        f->st_ctx[i] = nc - 1;
    }
    icefall_decoder(m, f->ctx_tok, nc, f->dec);
    icefall_decoder_proj(m, f->dec, nc, f->dp);
    for (int r = 0; r < nc; r++)
        memcpy(f->e + (size_t)r * J, ep_t, sizeof(float) * (size_t)J);
    icefall_joiner(m, f->e, f->dp, nc, f->hid, f->lp);
    log_softmax_ref(f->lp, f->lp, nc, V);
    /* expand, with the first pass's beam against the best score before the frame */
    double M = -INFINITY;
    for (int i = 0; i < n; i++)
        M = S[i].score > M ? S[i].score : M;
    const double cut = M - beam;
    int na = 0, n_near = 0;
    for (int i = 0; i < n; i++) {
        if (S[i].key & 1)
            continue; /* the graph's final state: no arcs */
        const float *l = f->lp + (size_t)f->st_ctx[i] * V;
        const double s = S[i].score;
        const int64_t ctx = S[i].key >> 1, next = (ctx % f->vpow) * V;
        f->arcs[na] = (fb_arc_t){S[i].key, s + (double)l[0], i, 0, na};
        na++;
        for (int tok = 1; tok < V; tok++) {
            double sc = s + (double)l[tok];
            if (f->near && fabs(sc - cut) < FB_NEAR)
                f->near[n_near++] = (fb_arc_t){(next + tok) * 2, fabs(sc - cut), i, tok, 0};
            if (sc >= cut) {
                f->arcs[na] = (fb_arc_t){(next + tok) * 2, sc, i, tok, na};
                na++;
            }
        }
        if (f->near && fabs(s - cut) < FB_NEAR && s != M) /* (the best state's always passes) */
            f->near[n_near++] = (fb_arc_t){ctx * 2 + 1, fabs(s - cut), i, -1, 0};
        if (s >= cut) { /* the final arc, its log-prob counted as 0 by this test */
            f->arcs[na] = (fb_arc_t){ctx * 2 + 1, s + (double)l[0], i, -1, na};
            na++;
        }
    }
    qsort(f->arcs, (size_t)na, sizeof *f->arcs, cmp_arc);
    /* destinations: the max of their arcs; the entering arc k2's shortest path keeps is the
     * last of the best (its arcs are in source order) */
    int nd = 0;
    for (int a = 0; a < na; a++) {
        const fb_arc_t *x = &f->arcs[a];
        if (nd == 0 || f->dest[nd - 1].key != x->key) {
            f->nin[nd] = 1;
            f->dest[nd++] = (fb_state_t){x->key, x->score, x->src, x->label};
            continue;
        }
        f->nin[nd - 1]++;
        fb_state_t *d = &f->dest[nd - 1];
        if (x->score >= d->score)
            *d = (fb_state_t){x->key, x->score, x->src, x->label};
    }
    /* states, then contexts (all the destinations' contexts, in key order) */
    int ndc = 0;
    for (int d = 0; d < nd; d++) {
        f->cscore[d] = f->dest[d].score; /* the states' scores, for the first prune */
        if (d == 0 || (f->dest[d].key >> 1) != (f->dest[d - 1].key >> 1))
            ndc++;
        f->dctx[d] = ndc - 1;
    }
    double sm, cm;
    prune(f->keep, f->cscore, f->dest, nd, beam, f->o.max_states, f->rank, &sm);
    for (int c = 0; c < ndc; c++)
        f->cscore[c] = -INFINITY;
    for (int d = 0; d < nd; d++)
        if (f->keep[d] && f->dest[d].score > f->cscore[f->dctx[d]])
            f->cscore[f->dctx[d]] = f->dest[d].score;
    char *ckeep = f->keep + nd;
    prune(ckeep, f->cscore, NULL, ndc, beam, f->o.max_contexts, f->rank, &cm);
    fb_state_t *out = f->frames + f->off[t + 1];
    int k = 0;
    f->arcs_last = 0;
    for (int d = 0; d < nd; d++)
        if (f->keep[d] && ckeep[f->dctx[d]]) {
            out[k++] = f->dest[d];
            f->arcs_last += f->nin[d];
        }
    f->arcs_total += f->arcs_last;
    f->off[t + 2] = f->off[t + 1] + (size_t)k;
    f->n_frames_used = f->off[t + 2];
    /* how near a decision that shaped this frame's lattice came to going the other way: the
     * first pass's arcs into kept states, the state and context ranks and beams */
    for (int i = 0; i < n_near; i++) {
        int lo = 0, hi = k;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (out[mid].key < f->near[i].key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < k && out[lo].key == f->near[i].key && f->near[i].score < f->margin)
            f->margin = f->near[i].score;
    }
    f->margin = sm < f->margin ? sm : f->margin;
    f->margin = cm < f->margin ? cm : f->margin;
    return HARK_OK;
}

int icefall_fast_beam_search(const icefall_model_t *m, const float *ep, int T,
                             const icefall_fast_beam_opts_t *opts, icefall_hyp_t *best,
                             hark_err_t *err)
{
    return icefall_fast_beam_search_ex(m, ep, T, opts, best, NULL, err);
}

int icefall_fast_beam_search_ex(const icefall_model_t *m, const float *ep, int T,
                                const icefall_fast_beam_opts_t *opts, icefall_hyp_t *best,
                                icefall_fast_beam_stats_t *stats, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    memset(best, 0, sizeof *best);
    if (stats)
        memset(stats, 0, sizeof *stats);
    fb_t f = {.m = m,
              .o = opts ? *opts : c->fast_beam,
              .V = c->vocab,
              .cs = c->context_size,
              .J = c->joiner_dim,
              .D = c->decoder_dim};
    int rc = icefall_fast_beam_check(&f.o, err);
    if (rc)
        return rc;
    if (c->blank_id != 0)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "fast_beam_search: k2's decoding takes symbol 0 as the blank (blank_id %d)",
                       c->blank_id);
    /* keys are context * 2 + 1 < 2 V^cs, as k2's int64 state ids */
    f.vpow = 1;
    for (int k = 0; k < f.cs; k++) {
        if (f.vpow > INT64_MAX / 2 / f.V)
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "fast_beam_search: vocab %d ^ context_size %d overflows k2's 64-bit "
                           "state ids",
                           f.V, f.cs);
        if (k < f.cs - 1)
            f.vpow *= f.V;
    }
    const size_t ms = (size_t)f.o.max_states, narc = ms * (size_t)(f.V + 1);
    const int tt = T > 0 ? T : 0;
    f.off = hark_malloc(sizeof *f.off * (size_t)(tt + 2));
    f.ctx_ids = hark_malloc(sizeof *f.ctx_ids * ms);
    f.ctx_tok = hark_malloc(sizeof *f.ctx_tok * ms * (size_t)f.cs);
    f.st_ctx = hark_malloc(sizeof *f.st_ctx * ms);
    f.dec = hark_malloc(sizeof(float) * ms * (size_t)f.D);
    f.dp = hark_malloc(sizeof(float) * ms * (size_t)f.J);
    f.e = hark_malloc(sizeof(float) * ms * (size_t)f.J);
    f.hid = hark_malloc(sizeof(float) * ms * (size_t)f.J);
    f.lp = hark_malloc(sizeof(float) * ms * (size_t)f.V);
    f.arcs = hark_malloc(sizeof *f.arcs * narc);
    f.dest = hark_malloc(sizeof *f.dest * narc);
    f.rank = hark_malloc(sizeof *f.rank * narc);
    f.keep = hark_malloc(2 * narc);
    f.cscore = hark_malloc(sizeof *f.cscore * narc);
    f.dctx = hark_malloc(sizeof *f.dctx * narc);
    f.nin = hark_malloc(sizeof *f.nin * narc);
    f.near = stats ? hark_malloc(sizeof *f.near * narc) : NULL; /* (the margin's: tests) */
    f.margin = INFINITY;
    if (!f.off || !f.ctx_ids || !f.ctx_tok || !f.st_ctx || !f.dec || !f.dp || !f.e || !f.hid ||
        !f.lp || !f.arcs || !f.dest || !f.rank || !f.keep || !f.cscore || !f.dctx || !f.nin ||
        (stats && !f.near) || fb_reserve(&f, ms + 1)) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in fast beam search");
        goto done;
    }
    /* frame 0: context [blank] * cs, graph state 0, score 0 */
    f.frames[0] = (fb_state_t){0, 0.0, -1, 0};
    f.off[0] = 0;
    f.off[1] = f.n_frames_used = 1;
    for (int t = 0; t < tt; t++)
        if (fb_frame(&f, t, ep + (size_t)t * f.J)) {
            rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in fast beam search");
            goto done;
        }
    best->tokens = hark_malloc(sizeof(int) * (size_t)(tt > 0 ? tt : 1));
    best->times = hark_malloc(sizeof(int) * (size_t)(tt > 0 ? tt : 1));
    if (!best->tokens || !best->times) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in fast beam search");
        goto done;
    }
    if (tt == 0)
        goto done; /* k2 needs a frame; nothing to decode */
    /* the final arcs: from the last frame's states whose (ctx, 1) was kept; the best (the last
     * of the best in state order) ends the path */
    const fb_state_t *last = f.frames + f.off[tt - 1], *after = f.frames + f.off[tt];
    const int n_last = (int)(f.off[tt] - f.off[tt - 1]), n_after = (int)(f.off[tt + 1] - f.off[tt]);
    char *fin = f.keep; /* (n_last) scratch */
    memset(fin, 0, (size_t)n_last);
    int n_fin = 0;
    for (int i = 0; i < n_after; i++)
        if (after[i].key & 1) {
            fin[after[i].prev] = 1;
            n_fin++;
        }
    if (stats) { /* k2's lattice: every frame's states and the final one; the last frame's arcs
                    are its final arcs alone */
        stats->states = (long)f.off[tt] + 1;
        stats->arcs = f.arcs_total - f.arcs_last + n_fin;
        stats->min_margin = f.margin;
    }
    int bi = -1;
    for (int i = 0; i < n_last; i++)
        if (fin[i] && (bi < 0 || last[i].score >= last[bi].score))
            bi = i;
    if (bi < 0) {
        best->score = -INFINITY; /* no final arc was kept: k2's lattice has no path */
        goto done;
    }
    best->score = last[bi].score;
    int n = 0;
    for (int u = tt - 1, i = bi; u > 0; u--) {
        const fb_state_t *s = f.frames + f.off[u] + i;
        if (s->label > 0) {
            best->tokens[n] = s->label;
            best->times[n++] = u - 1;
        }
        i = s->prev;
    }
    for (int a = 0, b = n - 1; a < b; a++, b--) {
        int x = best->tokens[a];
        best->tokens[a] = best->tokens[b];
        best->tokens[b] = x;
        x = best->times[a];
        best->times[a] = best->times[b];
        best->times[b] = x;
    }
    best->n = n;
done:
    fb_free(&f);
    if (rc)
        icefall_hyp_free(best);
    return rc;
}
