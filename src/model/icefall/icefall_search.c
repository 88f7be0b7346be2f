/* icefall_search.c — icefall's transducer searches on the CPU (icefall.h): greedy_search_batch
 * (at most one symbol per frame, batched over utterances) and modified_beam_search (hypotheses
 * keyed by their token sequence, merged with logaddexp, topk over the whole beam, length-normalised
 * pick), the text as pretrained.py joins the pieces, and icefall_run end to end.
 * Tests: tests/model/icefall/test_icefall.c */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "ops/ops.h"

#include <math.h>
#include <string.h>

void icefall_hyp_free(icefall_hyp_t *h)
{
    if (!h)
        return;
    hark_free(h->tokens);
    hark_free(h->times);
    memset(h, 0, sizeof *h);
}

void icefall_result_free(icefall_result_t *r)
{
    if (!r)
        return;
    icefall_hyp_free(&r->best);
    for (int i = 0; i < r->n_nbest; i++)
        icefall_hyp_free(&r->nbest[i]);
    hark_free(r->nbest);
    hark_free(r->text);
    memset(r, 0, sizeof *r);
}

/* ---- greedy_search_batch -------------------------------------------------------------------- */

int icefall_greedy_search(const icefall_model_t *m, const float *const *ep, const int *lens, int B,
                          icefall_hyp_t *out, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const int J = c->joiner_dim, V = c->vocab, D = c->decoder_dim, cs = c->context_size;
    int T = 0, rc = HARK_OK;
    for (int b = 0; b < B; b++) {
        memset(&out[b], 0, sizeof out[b]);
        T = lens[b] > T ? lens[b] : T;
    }
    size_t nb = (size_t)(B > 0 ? B : 1);
    int *ctx = hark_malloc(sizeof(int) * nb * (size_t)cs);
    int *rows = hark_malloc(sizeof(int) * nb), *emit = hark_malloc(sizeof(int) * nb);
    float *dp = hark_malloc(sizeof(float) * nb * (size_t)J);  /* (B, J) per utterance */
    float *dec = hark_malloc(sizeof(float) * nb * (size_t)D); /* (B, D) */
    float *dpn = hark_malloc(sizeof(float) * nb * (size_t)J); /* (B, J) recomputed rows */
    float *e = hark_malloc(sizeof(float) * nb * (size_t)J);   /* (nact, J) this frame */
    float *d2 = hark_malloc(sizeof(float) * nb * (size_t)J);  /* (nact, J) */
    float *hid = hark_malloc(sizeof(float) * nb * (size_t)J);
    float *logits = hark_malloc(sizeof(float) * nb * (size_t)V);
    int *ctx2 = hark_malloc(sizeof(int) * nb * (size_t)cs);
    for (int b = 0; b < B; b++) {
        size_t cap = (size_t)(lens[b] > 0 ? lens[b] : 1);
        out[b].tokens = hark_malloc(sizeof(int) * cap);
        out[b].times = hark_malloc(sizeof(int) * cap);
        if (!out[b].tokens || !out[b].times)
            rc = HARK_ERR_NOMEM;
    }
    if (rc || !ctx || !rows || !emit || !dp || !dec || !dpn || !e || !d2 || !hid || !logits ||
        !ctx2) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in greedy search");
        goto done;
    }
    /* context [-1] * (cs - 1) + [blank] */
    for (int b = 0; b < B; b++)
        for (int k = 0; k < cs; k++)
            ctx[(size_t)b * cs + k] = k == cs - 1 ? c->blank_id : -1;
    icefall_decoder(m, ctx, B, dec);
    icefall_decoder_proj(m, dec, B, dp);
    for (int t = 0; t < T; t++) {
        int na = 0;
        for (int b = 0; b < B; b++)
            if (lens[b] > t) {
                rows[na] = b;
                memcpy(e + (size_t)na * J, ep[b] + (size_t)t * J, sizeof(float) * J);
                memcpy(d2 + (size_t)na * J, dp + (size_t)b * J, sizeof(float) * J);
                na++;
            }
        icefall_joiner(m, e, d2, na, hid, logits);
        int ne = 0;
        for (int i = 0; i < na; i++) {
            const float *l = logits + (size_t)i * V;
            int y = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > l[y])
                    y = v; /* the first index on ties, as torch's argmax */
            if (y == c->blank_id)
                continue;
            int b = rows[i];
            icefall_hyp_t *h = &out[b];
            h->tokens[h->n] = y;
            h->times[h->n] = t;
            h->n++;
            h->score += l[y];
            int *cx = ctx + (size_t)b * cs;
            memmove(cx, cx + 1, sizeof(int) * (size_t)(cs - 1));
            cx[cs - 1] = y;
            memcpy(ctx2 + (size_t)ne * cs, cx, sizeof(int) * (size_t)cs);
            emit[ne++] = b;
        }
        if (ne) {
            icefall_decoder(m, ctx2, ne, dec);
            icefall_decoder_proj(m, dec, ne, dpn);
            for (int i = 0; i < ne; i++)
                memcpy(dp + (size_t)emit[i] * J, dpn + (size_t)i * J, sizeof(float) * J);
        }
    }
done:
    hark_free(ctx);
    hark_free(ctx2);
    hark_free(rows);
    hark_free(emit);
    hark_free(dp);
    hark_free(dec);
    hark_free(dpn);
    hark_free(e);
    hark_free(d2);
    hark_free(hid);
    hark_free(logits);
    if (rc)
        for (int b = 0; b < B; b++)
            icefall_hyp_free(&out[b]);
    return rc;
}

/* ---- greedy search over chunks ------------------------------------------------------------- */

void icefall_greedy_free(icefall_greedy_t *g)
{
    if (!g)
        return;
    hark_free(g->ctx);
    hark_free(g->dp);
    hark_free(g->dec);
    hark_free(g->hid);
    hark_free(g->logits);
    icefall_hyp_free(&g->hyp);
    memset(g, 0, sizeof *g);
}

int icefall_greedy_init(const icefall_model_t *m, icefall_greedy_t *g, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    memset(g, 0, sizeof *g);
    g->ctx = hark_malloc(sizeof(int) * (size_t)c->context_size);
    g->dp = hark_malloc(sizeof(float) * (size_t)c->joiner_dim);
    g->dec = hark_malloc(sizeof(float) * (size_t)c->decoder_dim);
    g->hid = hark_malloc(sizeof(float) * (size_t)c->joiner_dim);
    g->logits = hark_malloc(sizeof(float) * (size_t)c->vocab);
    if (!g->ctx || !g->dp || !g->dec || !g->hid || !g->logits) {
        icefall_greedy_free(g);
        return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in greedy search");
    }
    icefall_greedy_reset(m, g);
    return HARK_OK;
}

void icefall_greedy_reset(const icefall_model_t *m, icefall_greedy_t *g)
{
    const icefall_config_t *c = &m->cfg;
    for (int k = 0; k < c->context_size; k++) /* [-1] * (cs - 1) + [blank] */
        g->ctx[k] = k == c->context_size - 1 ? c->blank_id : -1;
    icefall_decoder(m, g->ctx, 1, g->dec);
    icefall_decoder_proj(m, g->dec, 1, g->dp);
    g->hyp.n = 0;
    g->hyp.score = 0;
}

int icefall_greedy_advance(const icefall_model_t *m, icefall_greedy_t *g, const float *ep, int T,
                           int t0, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const int J = c->joiner_dim, V = c->vocab, cs = c->context_size;
    icefall_hyp_t *h = &g->hyp;
    if (h->n + T > g->cap) { /* at most one token per frame */
        int cap = g->cap ? g->cap : 64;
        while (cap < h->n + T)
            cap *= 2;
        int *tk = hark_realloc(h->tokens, sizeof(int) * (size_t)cap);
        if (tk)
            h->tokens = tk;
        int *tm = tk ? hark_realloc(h->times, sizeof(int) * (size_t)cap) : NULL;
        if (tm)
            h->times = tm;
        if (!tk || !tm)
            return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in greedy search");
        g->cap = cap;
    }
    for (int t = 0; t < T; t++) {
        icefall_joiner(m, ep + (size_t)t * J, g->dp, 1, g->hid, g->logits);
        const float *l = g->logits;
        int y = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[y])
                y = v; /* the first index on ties, as torch's argmax */
        if (y == c->blank_id)
            continue;
        h->tokens[h->n] = y;
        h->times[h->n] = t0 + t;
        h->n++;
        h->score += l[y];
        memmove(g->ctx, g->ctx + 1, sizeof(int) * (size_t)(cs - 1));
        g->ctx[cs - 1] = y;
        icefall_decoder(m, g->ctx, 1, g->dec);
        icefall_decoder_proj(m, g->dec, 1, g->dp);
    }
    return HARK_OK;
}

/* ---- modified_beam_search ------------------------------------------------------------------- */

/* torch.logaddexp in float32 */
static float logaddexpf_(float a, float b)
{
    if (isinf(a) && a == b)
        return a;
    float mx = a > b ? a : b;
    return mx + log1pf(expf(-fabsf(a - b)));
}

void icefall_beam_free(icefall_beam_t *b)
{
    if (!b)
        return;
    hark_free(b->A);
    hark_free(b->B);
    hark_free(b->store);
    hark_free(b->ctx);
    hark_free(b->dec);
    hark_free(b->dp);
    hark_free(b->e);
    hark_free(b->hid);
    hark_free(b->lp);
    hark_free(b->top);
    hark_free(b->topv);
    hark_free(b->hyp_lp);
    memset(b, 0, sizeof *b);
}

/* Every hypothesis's ys and times room for cap entries (the A ones moved over) */
static int beam_grow(icefall_beam_t *b, int cap)
{
    int *store = hark_malloc(sizeof(int) * 4 * (size_t)b->beam * (size_t)cap);
    if (!store)
        return HARK_ERR_NOMEM;
    const int cs = b->cs;
    for (int i = 0; i < b->beam; i++) {
        int *ys = store + (size_t)(4 * i) * cap, *times = store + (size_t)(4 * i + 1) * cap;
        if (i < b->na) {
            memcpy(ys, b->A[i].ys, sizeof(int) * (size_t)b->A[i].n_ys);
            memcpy(times, b->A[i].times, sizeof(int) * (size_t)(b->A[i].n_ys - cs));
        }
        b->A[i].ys = ys;
        b->A[i].times = times;
        b->B[i].ys = store + (size_t)(4 * i + 2) * cap;
        b->B[i].times = store + (size_t)(4 * i + 3) * cap;
    }
    hark_free(b->store);
    b->store = store;
    b->cap = cap;
    return HARK_OK;
}

static int beam_init(const icefall_model_t *m, int beam, int cap, int scratch, icefall_beam_t *b,
                     hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const size_t J = (size_t)c->joiner_dim, V = (size_t)c->vocab, D = (size_t)c->decoder_dim;
    const size_t n = (size_t)(beam > 0 ? beam : 1), cs = (size_t)c->context_size;
    memset(b, 0, sizeof *b);
    if (beam < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: beam %d must be >= 1", beam);
    b->beam = beam;
    b->cs = (int)cs;
    b->A = hark_calloc(n, sizeof *b->A);
    b->B = hark_calloc(n, sizeof *b->B);
    int ok = b->A && b->B;
    if (scratch) {
        ok = ok && (b->ctx = hark_malloc(sizeof(int) * n * cs)) &&
             (b->dec = hark_malloc(sizeof(float) * n * D)) &&
             (b->dp = hark_malloc(sizeof(float) * n * J)) &&
             (b->e = hark_malloc(sizeof(float) * n * J)) &&
             (b->hid = hark_malloc(sizeof(float) * n * J)) &&
             (b->lp = hark_malloc(sizeof(float) * n * V)) &&
             (b->top = hark_malloc(sizeof(int) * n)) &&
             (b->topv = hark_malloc(sizeof(float) * n)) &&
             (b->hyp_lp = hark_malloc(sizeof(float) * n));
    }
    if (!ok || beam_grow(b, cap > c->context_size + 1 ? cap : c->context_size + 1)) {
        icefall_beam_free(b);
        return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
    }
    icefall_beam_reset(m, b);
    return HARK_OK;
}

int icefall_beam_init(const icefall_model_t *m, int beam, int cap, icefall_beam_t *b,
                      hark_err_t *err)
{
    return beam_init(m, beam, cap, 1, b, err);
}

int icefall_beam_init_hyps(const icefall_model_t *m, int beam, int cap, icefall_beam_t *b,
                           hark_err_t *err)
{
    return beam_init(m, beam, cap, 0, b, err);
}

void icefall_beam_reset(const icefall_model_t *m, icefall_beam_t *b)
{
    const icefall_config_t *c = &m->cfg;
    for (int k = 0; k < b->cs; k++)
        b->A[0].ys[k] = k == b->cs - 1 ? c->blank_id : -1;
    b->A[0].n_ys = b->cs;
    b->A[0].log_prob = 0.0f;
    b->na = 1;
}

int icefall_beam_advance(const icefall_model_t *m, icefall_beam_t *b, const float *ep, int T,
                         int t0, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const int J = c->joiner_dim, V = c->vocab, cs = c->context_size, beam = b->beam;
    int longest = 0;
    for (int i = 0; i < b->na; i++)
        longest = b->A[i].n_ys > longest ? b->A[i].n_ys : longest;
    if (longest + T > b->cap) { /* at most one token per frame */
        int cap = b->cap;
        while (cap < longest + T)
            cap *= 2;
        if (beam_grow(b, cap))
            return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
    }
    for (int t = 0; t < T; t++) {
        const bhyp_t *A = b->A;
        const int na = b->na;
        for (int i = 0; i < na; i++) {
            memcpy(b->ctx + (size_t)i * cs, A[i].ys + A[i].n_ys - cs, sizeof(int) * (size_t)cs);
            memcpy(b->e + (size_t)i * J, ep + (size_t)t * J, sizeof(float) * J);
            b->hyp_lp[i] = A[i].log_prob;
        }
        icefall_decoder(m, b->ctx, na, b->dec);
        icefall_decoder_proj(m, b->dec, na, b->dp);
        icefall_joiner(m, b->e, b->dp, na, b->hid, b->lp);
        int nk = beam_topk_ref(b->topv, b->top, b->lp, V, NULL, b->hyp_lp, na, V, beam);
        icefall_beam_take(b, c->blank_id, b->topv, b->top, nk, V, t0 + t);
    }
    return HARK_OK;
}

void icefall_beam_take(icefall_beam_t *b, int blank, const float *val, const int *idx, int nk,
                       int V, int t)
{
    const int cs = b->cs;
    bhyp_t *A = b->A, *Bh = b->B;
    int nb = 0;
    for (int k = 0; k < nk; k++) {
        int hi = idx[k] / V, tok = idx[k] % V;
        const bhyp_t *src = &A[hi];
        /* the new sequence: src's ys, plus tok unless it is blank */
        int emit_tok = tok != blank;
        int n_new = src->n_ys + emit_tok;
        int found = -1;
        for (int j = 0; j < nb && found < 0; j++) {
            if (Bh[j].n_ys != n_new)
                continue;
            if (memcmp(Bh[j].ys, src->ys, sizeof(int) * (size_t)src->n_ys))
                continue;
            if (emit_tok && Bh[j].ys[n_new - 1] != tok)
                continue;
            found = j;
        }
        if (found >= 0) {
            Bh[found].log_prob = logaddexpf_(Bh[found].log_prob, val[k]);
            continue;
        }
        bhyp_t *dst = &Bh[nb++];
        memcpy(dst->ys, src->ys, sizeof(int) * (size_t)src->n_ys);
        memcpy(dst->times, src->times, sizeof(int) * (size_t)(src->n_ys - cs));
        dst->n_ys = src->n_ys;
        if (emit_tok) {
            dst->times[dst->n_ys - cs] = t;
            dst->ys[dst->n_ys++] = tok;
        }
        dst->log_prob = val[k];
    }
    b->A = Bh;
    b->B = A;
    b->na = nb;
}

int icefall_beam_best(const icefall_beam_t *b)
{
    /* max of log_prob / len(ys) in float32, the first on ties (Python's max) */
    const bhyp_t *A = b->A;
    int bi = 0;
    float bs = A[0].log_prob / (float)A[0].n_ys;
    for (int i = 1; i < b->na; i++) {
        float s = A[i].log_prob / (float)A[i].n_ys;
        if (s > bs) {
            bs = s;
            bi = i;
        }
    }
    return bi;
}

int icefall_beam_result(const icefall_beam_t *b, icefall_hyp_t *best, icefall_hyp_t **nbest,
                        int *n_nbest, hark_err_t *err)
{
    const bhyp_t *A = b->A;
    const int na = b->na, cs = b->cs;
    int rc = HARK_OK;
    memset(best, 0, sizeof *best);
    if (nbest)
        *nbest = NULL;
    if (n_nbest)
        *n_nbest = 0;
    const int bi = icefall_beam_best(b);
    int nout = nbest ? na : 0;
    icefall_hyp_t *list = nbest ? hark_calloc((size_t)(na > 0 ? na : 1), sizeof *list) : NULL;
    if (nbest && !list)
        return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
    for (int i = -1; i < nout && !rc; i++) {
        const bhyp_t *s = &A[i < 0 ? bi : i];
        icefall_hyp_t *h = i < 0 ? best : &list[i];
        int n = s->n_ys - cs;
        h->tokens = hark_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
        h->times = hark_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
        if (!h->tokens || !h->times) {
            rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
            break;
        }
        memcpy(h->tokens, s->ys + cs, sizeof(int) * (size_t)n);
        memcpy(h->times, s->times, sizeof(int) * (size_t)n);
        h->n = n;
        h->score = s->log_prob;
    }
    if (rc) {
        icefall_hyp_free(best);
        for (int i = 0; list && i < nout; i++)
            icefall_hyp_free(&list[i]);
        hark_free(list);
    } else if (nbest) {
        *nbest = list;
        if (n_nbest)
            *n_nbest = nout;
    }
    return rc;
}

int icefall_modified_beam_search(const icefall_model_t *m, const float *ep, int T, int beam,
                                 icefall_hyp_t *best, icefall_hyp_t **nbest, int *n_nbest,
                                 hark_err_t *err)
{
    memset(best, 0, sizeof *best);
    if (nbest)
        *nbest = NULL;
    if (n_nbest)
        *n_nbest = 0;
    icefall_beam_t b;
    int rc = icefall_beam_init(m, beam, T + m->cfg.context_size + 1, &b, err);
    if (rc)
        return rc;
    rc = icefall_beam_advance(m, &b, ep, T, 0, err);
    if (!rc)
        rc = icefall_beam_result(&b, best, nbest, n_nbest, err);
    icefall_beam_free(&b);
    return rc;
}

/* ---- text and end to end -------------------------------------------------------------------- */

int icefall_text(const icefall_model_t *m, const icefall_hyp_t *h, char **text, hark_err_t *err)
{
    return units_detokenize(m->units, UNITS_STYLE_BPE, h->tokens, h->n, text, err);
}

int icefall_audio_frames(const icefall_model_t *m, const float *pcm, size_t n, int max_t_in,
                         double max_seconds, int *frames, hark_err_t *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(pcm[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "sample %zu of the audio is %s", i,
                           isnan(pcm[i]) ? "NaN" : "infinite");
    const int T = icefall_num_frames(m, n), tmin = icefall_min_frames(m);
    if (T < tmin)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "audio of %zu samples is too short: the encoder needs at least %d feature "
                       "frames (%d samples)",
                       n, tmin, tmin * 160 - 80);
    if (T > max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "audio of %.2f s is longer than the worker's maximum (%.2f s)",
                       (double)n / m->cfg.sample_rate, max_seconds);
    *frames = T;
    return HARK_OK;
}

int icefall_run(icefall_worker_t *w, const float *const *pcm, const size_t *n, int B,
                const icefall_run_opts_t *o, icefall_result_t *res, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_config_t *c = &m->cfg;
    const int F = c->feature_dim, J = c->joiner_dim;
    int rc = HARK_OK;
    for (int b = 0; b < B; b++)
        memset(&res[b], 0, sizeof res[b]);
    icefall_method_t method = o ? o->method : (icefall_method_t)c->method;
    int beam = o && o->beam_size > 0 ? o->beam_size : c->beam_size;
    size_t nb = (size_t)(B > 0 ? B : 1);
    float **ep = hark_calloc(nb, sizeof *ep);
    int *lens = hark_calloc(nb, sizeof *lens);
    float *feats = w->feats, *enc = w->enc;
    icefall_hyp_t *hyps = hark_calloc(nb, sizeof *hyps);
    if (!ep || !lens || !hyps) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory");
        goto done;
    }
    for (int b = 0; b < B && !rc; b++) {
        int T = 0;
        if ((rc = icefall_audio_frames(m, pcm[b], n[b], w->max_t_in, w->max_seconds, &T, err)))
            break;
        if ((rc = feat_compute(m->feat, pcm[b], n[b], feats, err)))
            break;
        if (o && o->stage && B == 1)
            o->stage(o->stage_user, "fbank", feats, T, F);
        int len = 0;
        if ((rc = icefall_encode(w, feats, T, T, enc, &len, o && B == 1 ? o->stage : NULL,
                                 o ? o->stage_user : NULL, err)))
            break;
        if (o && o->stage && B == 1)
            o->stage(o->stage_user, "encoder_out", enc, len, c->d);
        if (!(ep[b] = hark_malloc(sizeof(float) * (size_t)len * J))) {
            rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory");
            break;
        }
        icefall_encoder_proj(m, enc, len, ep[b]);
        lens[b] = len;
        res[b].n_frames = len;
    }
    if (rc)
        goto done;
    if (method == ICEFALL_GREEDY) {
        if ((rc = icefall_greedy_search(m, (const float *const *)ep, lens, B, hyps, err)))
            goto done;
        for (int b = 0; b < B; b++) {
            res[b].best = hyps[b];
            memset(&hyps[b], 0, sizeof hyps[b]);
        }
    } else if (method == ICEFALL_FAST_BEAM) {
        for (int b = 0; b < B && !rc; b++)
            rc = icefall_fast_beam_search(m, ep[b], lens[b],
                                          o && o->fast_beam.max_states > 0 ? &o->fast_beam : NULL,
                                          &res[b].best, err);
    } else {
        for (int b = 0; b < B && !rc; b++)
            rc = icefall_modified_beam_search(m, ep[b], lens[b], beam, &res[b].best, &res[b].nbest,
                                              &res[b].n_nbest, err);
    }
    for (int b = 0; b < B && !rc; b++)
        rc = icefall_text(m, &res[b].best, &res[b].text, err);
done:
    for (int b = 0; ep && b < B; b++)
        hark_free(ep[b]);
    hark_free(ep);
    hark_free(lens);
    hark_free(hyps);
    if (rc)
        for (int b = 0; b < B; b++)
            icefall_result_free(&res[b]);
    return rc;
}
