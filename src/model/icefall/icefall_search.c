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

/* ---- modified_beam_search ------------------------------------------------------------------- */

typedef struct {
    int *ys;    /* (n_ys) context_size initial entries, then the tokens */
    int *times; /* (n_ys - context_size) */
    int n_ys;
    float log_prob;
} bhyp_t;

/* torch.logaddexp in float32 */
static float logaddexpf_(float a, float b)
{
    if (isinf(a) && a == b)
        return a;
    float mx = a > b ? a : b;
    return mx + log1pf(expf(-fabsf(a - b)));
}

int icefall_modified_beam_search(const icefall_model_t *m, const float *ep, int T, int beam,
                                 icefall_hyp_t *best, icefall_hyp_t **nbest, int *n_nbest,
                                 hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const int J = c->joiner_dim, V = c->vocab, D = c->decoder_dim, cs = c->context_size;
    memset(best, 0, sizeof *best);
    if (nbest)
        *nbest = NULL;
    if (n_nbest)
        *n_nbest = 0;
    if (beam < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: beam %d must be >= 1", beam);
    int rc = HARK_OK;
    const size_t cap = (size_t)T + (size_t)cs + 1;
    bhyp_t *A0 = hark_calloc((size_t)beam, sizeof *A0), *B0 = hark_calloc((size_t)beam, sizeof *B0);
    bhyp_t *A = A0, *Bh = B0; /* swapped every frame */
    int *store = hark_malloc(sizeof(int) * 4 * (size_t)beam * cap);
    int *ctx = hark_malloc(sizeof(int) * (size_t)beam * cs);
    float *dec = hark_malloc(sizeof(float) * (size_t)beam * D);
    float *dp = hark_malloc(sizeof(float) * (size_t)beam * J);
    float *e = hark_malloc(sizeof(float) * (size_t)beam * J);
    float *hid = hark_malloc(sizeof(float) * (size_t)beam * J);
    float *lp = hark_malloc(sizeof(float) * (size_t)beam * V);
    int *top = hark_malloc(sizeof(int) * (size_t)beam);
    if (!A || !Bh || !store || !ctx || !dec || !dp || !e || !hid || !lp || !top) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
        goto done;
    }
    for (int i = 0; i < beam; i++) {
        A[i].ys = store + (size_t)(4 * i) * cap;
        A[i].times = store + (size_t)(4 * i + 1) * cap;
        Bh[i].ys = store + (size_t)(4 * i + 2) * cap;
        Bh[i].times = store + (size_t)(4 * i + 3) * cap;
    }
    int na = 1;
    for (int k = 0; k < cs; k++)
        A[0].ys[k] = k == cs - 1 ? c->blank_id : -1;
    A[0].n_ys = cs;
    A[0].log_prob = 0.0f;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < na; i++) {
            memcpy(ctx + (size_t)i * cs, A[i].ys + A[i].n_ys - cs, sizeof(int) * (size_t)cs);
            memcpy(e + (size_t)i * J, ep + (size_t)t * J, sizeof(float) * J);
        }
        icefall_decoder(m, ctx, na, dec);
        icefall_decoder_proj(m, dec, na, dp);
        icefall_joiner(m, e, dp, na, hid, lp);
        log_softmax_ref(lp, lp, na, V);
        for (int i = 0; i < na; i++) {
            float *row = lp + (size_t)i * V;
            for (int v = 0; v < V; v++)
                row[v] += A[i].log_prob;
        }
        /* topk(beam) over the flattened (na x V), descending; lower index first on ties */
        int nk = beam < na * V ? beam : na * V;
        int got = 0;
        for (int idx = 0; idx < na * V; idx++) {
            float v = lp[idx];
            if (got == nk && !(v > lp[top[got - 1]]))
                continue;
            int pos = got < nk ? got++ : nk - 1;
            while (pos > 0 && v > lp[top[pos - 1]]) {
                top[pos] = top[pos - 1];
                pos--;
            }
            top[pos] = idx;
        }
        int nb = 0;
        for (int k = 0; k < nk; k++) {
            int hi = top[k] / V, tok = top[k] % V;
            const bhyp_t *src = &A[hi];
            float val = lp[top[k]];
            /* the new sequence: src's ys, plus tok unless it is blank */
            int emit_tok = tok != c->blank_id;
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
                Bh[found].log_prob = logaddexpf_(Bh[found].log_prob, val);
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
            dst->log_prob = val;
        }
        bhyp_t *tmp = A;
        A = Bh;
        Bh = tmp;
        na = nb;
    }
    /* best: max of log_prob / len(ys) in float32, the first on ties (Python's max) */
    int bi = 0;
    float bs = A[0].log_prob / (float)A[0].n_ys;
    for (int i = 1; i < na; i++) {
        float s = A[i].log_prob / (float)A[i].n_ys;
        if (s > bs) {
            bs = s;
            bi = i;
        }
    }
    int nout = nbest ? na : 0;
    icefall_hyp_t *list = nbest ? hark_calloc((size_t)(na > 0 ? na : 1), sizeof *list) : NULL;
    if (nbest && !list) {
        rc = err_set(err, HARK_ERR_NOMEM, "icefall: out of memory in modified beam search");
        goto done;
    }
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
done:
    hark_free(A0);
    hark_free(B0);
    hark_free(store);
    hark_free(ctx);
    hark_free(dec);
    hark_free(dp);
    hark_free(e);
    hark_free(hid);
    hark_free(lp);
    hark_free(top);
    return rc;
}

/* ---- text and end to end -------------------------------------------------------------------- */

int icefall_text(const icefall_model_t *m, const icefall_hyp_t *h, char **text, hark_err_t *err)
{
    return units_detokenize(m->units, UNITS_STYLE_BPE, h->tokens, h->n, text, err);
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
        for (size_t i = 0; i < n[b]; i++)
            if (!isfinite(pcm[b][i])) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "sample %zu of the audio is %s", i,
                             isnan(pcm[b][i]) ? "NaN" : "infinite");
                break;
            }
        if (rc)
            break;
        int T = icefall_num_frames(m, n[b]);
        const int tmin = icefall_min_frames(m);
        if (T < tmin) {
            rc = err_set(err, HARK_ERR_INVALID_ARG,
                         "audio of %zu samples is too short: the encoder needs at least %d "
                         "feature frames (%d samples)",
                         n[b], tmin, tmin * 160 - 80);
            break;
        }
        if (T > w->max_t_in) {
            rc = err_set(err, HARK_ERR_TOO_LARGE,
                         "audio of %.2f s is longer than the worker's maximum (%.2f s)",
                         (double)n[b] / c->sample_rate, w->max_seconds);
            break;
        }
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
