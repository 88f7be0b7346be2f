/* decoder.c — WeNet transformer / bitransformer attention decoder on the CPU (float32): weight
 * loading with WeNet's names and the batched scoring of CTC n-best candidates (decoder.h).
 * Tests: tests/model/wenet/test_decoder.c */
#include "model/wenet/decoder.h"
#include "model/wenet/decoder_weights.h"

#include "core/alloc.h"
#include "hark.h"
#include "ops/ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LN_EPS 1e-5f

struct wenet_decoder_model {
    wenet_config_t cfg;
    int d, h, dk, ffn, vocab, max_len, sos, eos, pre_norm;
    int has_right;
    wdec_weights_t wt;
    float *pe; /* (max_len, D) sinusoid table */
};

/* ---- loading ------------------------------------------------------------------------------- */

typedef struct {
    conformer_tensor_fn get;
    void *user;
    hark_err_t *err;
} loader_t;

static int want(loader_t *L, const float **dst, int ndim, int64_t d0, int64_t d1, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));
static int want(loader_t *L, const float **dst, int ndim, int64_t d0, int64_t d1, const char *fmt,
                ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {d0, d1};
    return L->get(L->user, name, ndim, shape, dst, L->err);
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != HARK_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

static int load_lin(loader_t *L, wdec_lin_t *l, int out, int in, const char *prefix,
                    const char *name)
{
    TRY(want(L, &l->w, 2, out, in, "%s%s.weight", prefix, name));
    TRY(want(L, &l->b, 1, out, 0, "%s%s.bias", prefix, name));
    return HARK_OK;
}

static int load_norm(loader_t *L, wdec_norm_t *n, int d, const char *prefix, const char *name)
{
    TRY(want(L, &n->g, 1, d, 0, "%s%s.weight", prefix, name));
    TRY(want(L, &n->b, 1, d, 0, "%s%s.bias", prefix, name));
    return HARK_OK;
}

/* prefix: "decoder." or "decoder.left_decoder." / "decoder.right_decoder." */
static int load_stack(loader_t *L, const wenet_config_t *c, wdec_stack_t *s, const char *prefix)
{
    int d = c->d_model, f = c->dec_ffn_dim, v = c->vocab_size;
    TRY(want(L, &s->embed, 2, v, d, "%sembed.0.weight", prefix));
    for (int i = 0; i < s->n_blocks; i++) {
        wdec_block_t *b = &s->blocks[i];
        char p[200];
        snprintf(p, sizeof p, "%sdecoders.%d.", prefix, i);
        TRY(load_lin(L, &b->sq, d, d, p, "self_attn.linear_q"));
        TRY(load_lin(L, &b->sk, d, d, p, "self_attn.linear_k"));
        TRY(load_lin(L, &b->sv, d, d, p, "self_attn.linear_v"));
        TRY(load_lin(L, &b->so, d, d, p, "self_attn.linear_out"));
        TRY(load_lin(L, &b->cq, d, d, p, "src_attn.linear_q"));
        TRY(load_lin(L, &b->ck, d, d, p, "src_attn.linear_k"));
        TRY(load_lin(L, &b->cv, d, d, p, "src_attn.linear_v"));
        TRY(load_lin(L, &b->co, d, d, p, "src_attn.linear_out"));
        TRY(load_lin(L, &b->w1, f, d, p, "feed_forward.w_1"));
        TRY(load_lin(L, &b->w2, d, f, p, "feed_forward.w_2"));
        TRY(load_norm(L, &b->norm1, d, p, "norm1"));
        TRY(load_norm(L, &b->norm2, d, p, "norm2"));
        TRY(load_norm(L, &b->norm3, d, p, "norm3"));
    }
    if (c->dec_normalize_before) /* WeNet keeps after_norm in a post-norm model too, but never
                                    applies it */
        TRY(load_norm(L, &s->after_norm, d, prefix, "after_norm"));
    TRY(load_lin(L, &s->out, v, d, prefix, "output_layer"));
    return HARK_OK;
}

int wdec_check_config(const wenet_config_t *cfg, hark_err_t *err)
{
    if (cfg->decoder != DECODER_TRANSFORMER && cfg->decoder != DECODER_BITRANSFORMER)
        return err_set(err, HARK_ERR_INVALID_ARG, "decoder: the model has no attention decoder");
    if (cfg->d_model <= 0 || cfg->d_model % 2 || cfg->dec_heads <= 0 ||
        cfg->d_model % cfg->dec_heads || cfg->dec_ffn_dim <= 0 || cfg->vocab_size <= 0 ||
        cfg->dec_blocks < 0 || cfg->dec_r_blocks < 0 || cfg->max_len < 2)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "decoder: bad sizes (d_model %d, heads %d, ffn %d, vocab %d, blocks %d/%d, "
                       "max_len %d)",
                       cfg->d_model, cfg->dec_heads, cfg->dec_ffn_dim, cfg->vocab_size,
                       cfg->dec_blocks, cfg->dec_r_blocks, cfg->max_len);
    if (cfg->sos < 0 || cfg->sos >= cfg->vocab_size || cfg->eos < 0 || cfg->eos >= cfg->vocab_size)
        return err_set(err, HARK_ERR_INVALID_ARG, "decoder: sos %d / eos %d outside vocab %d",
                       cfg->sos, cfg->eos, cfg->vocab_size);
    return HARK_OK;
}

int wdec_load(const wenet_config_t *cfg, conformer_tensor_fn get, void *user, wdec_weights_t *w,
              hark_err_t *err)
{
    memset(w, 0, sizeof *w);
    int right = cfg->decoder == DECODER_BITRANSFORMER;
    w->left.n_blocks = cfg->dec_blocks;
    w->right.n_blocks = right ? cfg->dec_r_blocks : 0;
    int nb = w->left.n_blocks + w->right.n_blocks;
    w->blocks = hark_calloc(nb > 0 ? (size_t)nb : 1, sizeof *w->blocks);
    if (!w->blocks)
        return err_set(err, HARK_ERR_NOMEM, "decoder: out of memory");
    w->left.blocks = w->blocks;
    w->right.blocks = w->blocks + w->left.n_blocks;
    loader_t L = {get, user, err};
    int rc = load_stack(&L, cfg, &w->left, right ? "decoder.left_decoder." : "decoder.");
    if (rc == HARK_OK && right)
        rc = load_stack(&L, cfg, &w->right, "decoder.right_decoder.");
    if (rc != HARK_OK)
        wdec_free(w);
    return rc;
}

int wdec_check_candidates(int max_len, int vocab, const int *const *hyps, const int *lens,
                          int first, int n, size_t *rows, int *max_rows, hark_err_t *err)
{
    for (int i = first; i < first + n; i++) {
        if (lens[i] < 0 || (lens[i] > 0 && !hyps[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "decoder: candidate %d has length %d", i,
                           lens[i]);
        if (lens[i] + 1 > max_len)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "decoder: candidate %d has %d tokens, more than the positional table "
                           "allows (%d)",
                           i, lens[i], max_len - 1);
        for (int j = 0; j < lens[i]; j++)
            if (hyps[i][j] < 0 || hyps[i][j] >= vocab)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "decoder: candidate %d token %d is %d, outside the vocabulary [0, "
                               "%d)",
                               i, j, hyps[i][j], vocab);
        *rows += (size_t)lens[i] + 1;
        if (lens[i] + 1 > *max_rows)
            *max_rows = lens[i] + 1;
    }
    return HARK_OK;
}

void wdec_free(wdec_weights_t *w)
{
    hark_free(w->blocks);
    memset(w, 0, sizeof *w);
}

int wenet_decoder_create_fn(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                            wenet_decoder_model_t **out, hark_err_t *err)
{
    *out = NULL;
    int rc = wdec_check_config(cfg, err);
    if (rc != HARK_OK)
        return rc;
    wenet_decoder_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "decoder: out of memory");
    m->cfg = *cfg;
    m->d = cfg->d_model;
    m->h = cfg->dec_heads;
    m->dk = m->d / m->h;
    m->ffn = cfg->dec_ffn_dim;
    m->vocab = cfg->vocab_size;
    m->max_len = cfg->max_len;
    m->sos = cfg->sos;
    m->eos = cfg->eos;
    m->pre_norm = cfg->dec_normalize_before;
    m->has_right = cfg->decoder == DECODER_BITRANSFORMER;
    m->pe = hark_malloc((size_t)m->max_len * m->d * sizeof(float));
    if (!m->pe) {
        wenet_decoder_destroy(m);
        return err_set(err, HARK_ERR_NOMEM, "decoder: out of memory");
    }
    if ((rc = wdec_load(cfg, get, user, &m->wt, err)) != HARK_OK) {
        wenet_decoder_destroy(m);
        return rc;
    }
    pos_enc_table_ref(m->pe, m->max_len, m->d);
    *out = m;
    return HARK_OK;
}

int wenet_decoder_create(const wenet_config_t *cfg, const safetensors_t *st,
                         wenet_decoder_model_t **out, hark_err_t *err)
{
    return wenet_decoder_create_fn(cfg, st_get_f32, (void *)st, out, err);
}

void wenet_decoder_destroy(wenet_decoder_model_t *d)
{
    if (!d)
        return;
    wdec_free(&d->wt);
    hark_free(d->pe);
    hark_free(d);
}

int wenet_decoder_has_right(const wenet_decoder_model_t *d)
{
    return d->has_right;
}

wenet_decoder_opts_t wenet_decoder_default_opts(void)
{
    wenet_decoder_opts_t o;
    memset(&o, 0, sizeof o);
    return o;
}

/* ---- scoring ------------------------------------------------------------------------------- */

/* Scratch of one call; candidate i owns rows [off[i], off[i] + len_i + 1) of the row buffers. */
typedef struct {
    int rows;         /* R = Σ (len_i + 1) */
    int max_rows;     /* max (len_i + 1) */
    int *tok;         /* (R) decoder input ids */
    int *pos;         /* (R) position of the row inside its candidate */
    int *off;         /* (n) first row of each candidate */
    int *hi;          /* (max_rows) causal key bound: row r sees keys [0, r] */
    float *x;         /* (R, D) residual stream */
    float *t;         /* (R, D) normed input of a sub-layer */
    float *q, *k, *v; /* (R, D) */
    float *ctx;       /* (R, D) attention context */
    float *o;         /* (R, D) sub-layer output */
    float *hid;       /* (R, F) FFN hidden */
    float *ke, *ve;   /* (T, D) source-attention keys / values of the encoder frames */
    float *att;       /* attention_ref scratch */
    float *logp;      /* (max_rows, V) one candidate's log-softmax */
} scratch_t;

static void add_ref(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* x = x + sub (pre-norm) or x = LN(x + sub) (post-norm) */
static void residual(const wenet_decoder_model_t *m, float *x, const float *sub,
                     const wdec_norm_t *nrm, int rows)
{
    add_ref(x, sub, (size_t)rows * m->d);
    if (!m->pre_norm)
        layer_norm_ref(x, x, nrm->g, nrm->b, rows, m->d, LN_EPS);
}

/* The input of a sub-layer: LN(x) in pre-norm, x itself in post-norm. */
static const float *sub_in(const wenet_decoder_model_t *m, scratch_t *s, const wdec_norm_t *nrm)
{
    if (!m->pre_norm)
        return s->x;
    layer_norm_ref(s->t, s->x, nrm->g, nrm->b, s->rows, m->d, LN_EPS);
    return s->t;
}

/* Runs one decoder stack over the rows in s->tok / s->pos and leaves the per-candidate
 * log-softmax rows to `emit`. */
static void run_stack(const wenet_decoder_model_t *m, const wdec_stack_t *st, scratch_t *s,
                      const float *enc, int T, int n, const int *lens,
                      void (*emit)(void *, int cand, const float *logp), void *emit_user)
{
    int d = m->d, R = s->rows;
    float xscale = sqrtf((float)d);
    float scale = 1.0f / sqrtf((float)m->dk);
    for (int r = 0; r < R; r++) {
        const float *e = st->embed + (size_t)s->tok[r] * d;
        const float *p = m->pe + (size_t)s->pos[r] * d;
        float *x = s->x + (size_t)r * d;
        for (int c = 0; c < d; c++)
            x[c] = e[c] * xscale + p[c];
    }
    for (int b = 0; b < st->n_blocks; b++) {
        const wdec_block_t *bk = &st->blocks[b];
        /* causal self-attention, one candidate at a time over its own rows */
        const float *in = sub_in(m, s, &bk->norm1);
        linear_ref(s->q, in, bk->sq.w, bk->sq.b, R, d, d);
        linear_ref(s->k, in, bk->sk.w, bk->sk.b, R, d, d);
        linear_ref(s->v, in, bk->sv.w, bk->sv.b, R, d, d);
        for (int i = 0; i < n; i++) {
            size_t o = (size_t)s->off[i] * d;
            attention_ref(s->ctx + o, s->att, s->q + o, s->k + o, s->v + o, NULL, NULL, NULL, NULL,
                          s->hi, lens[i] + 1, lens[i] + 1, m->h, m->dk, scale);
        }
        linear_ref(s->o, s->ctx, bk->so.w, bk->so.b, R, d, d);
        residual(m, s->x, s->o, &bk->norm1, R);
        /* source attention: every row sees all T encoder frames */
        in = sub_in(m, s, &bk->norm2);
        linear_ref(s->q, in, bk->cq.w, bk->cq.b, R, d, d);
        linear_ref(s->ke, enc, bk->ck.w, bk->ck.b, T, d, d);
        linear_ref(s->ve, enc, bk->cv.w, bk->cv.b, T, d, d);
        attention_ref(s->ctx, s->att, s->q, s->ke, s->ve, NULL, NULL, NULL, NULL, NULL, R, T, m->h,
                      m->dk, scale);
        linear_ref(s->o, s->ctx, bk->co.w, bk->co.b, R, d, d);
        residual(m, s->x, s->o, &bk->norm2, R);
        /* position-wise FFN with ReLU */
        in = sub_in(m, s, &bk->norm3);
        linear_ref(s->hid, in, bk->w1.w, bk->w1.b, R, d, m->ffn);
        relu_ref(s->hid, s->hid, (size_t)R * m->ffn);
        linear_ref(s->o, s->hid, bk->w2.w, bk->w2.b, R, m->ffn, d);
        residual(m, s->x, s->o, &bk->norm3, R);
    }
    if (m->pre_norm)
        layer_norm_ref(s->x, s->x, st->after_norm.g, st->after_norm.b, R, d, LN_EPS);
    for (int i = 0; i < n; i++) {
        int rows = lens[i] + 1;
        linear_ref(s->logp, s->x + (size_t)s->off[i] * d, st->out.w, st->out.b, rows, d, m->vocab);
        log_softmax_ref(s->logp, s->logp, rows, m->vocab);
        emit(emit_user, i, s->logp);
    }
}

typedef struct {
    const wenet_decoder_model_t *m;
    const wenet_decoder_opts_t *opts;
    const int *const *hyps;
    const int *lens;
    float *score; /* (n) or NULL */
    float *tok;   /* opts->fwd_tok or rev_tok, or NULL */
    int right;
} emit_ctx_t;

/* Sums the candidate's token log-probs in float32 in WeNet's order (search.py
 * attention_rescoring): tokens first (hyp order), then <eos> at row len. */
static void emit_scores(void *user, int cand, const float *logp)
{
    emit_ctx_t *c = user;
    const int *hyp = c->hyps[cand];
    int len = c->lens[cand], V = c->m->vocab;
    float *tok = c->tok ? c->tok + (size_t)cand * c->opts->tok_ld : NULL;
    float sum = 0.0f;
    for (int j = 0; j < len; j++) {
        int row = c->right ? len - 1 - j : j;
        float lp = logp[(size_t)row * V + hyp[j]];
        sum += lp;
        if (tok)
            tok[row] = lp;
    }
    float lp_eos = logp[(size_t)len * V + c->m->eos];
    sum += lp_eos;
    if (tok)
        tok[len] = lp_eos;
    if (c->score)
        c->score[cand] = sum;
    if (c->opts->logp_hook)
        c->opts->logp_hook(c->opts->hook_user, c->right, cand, len + 1, V, logp);
}

int wenet_decoder_score(const wenet_decoder_model_t *d, const wenet_decoder_opts_t *opts,
                        const float *enc, int T, const int *const *hyps, const int *lens, int n,
                        float reverse_weight, float *fwd, float *rev, hark_err_t *err)
{
    wenet_decoder_opts_t dflt = wenet_decoder_default_opts();
    if (!opts)
        opts = &dflt;
    if (n < 0 || (n > 0 && (!enc || T < 1 || !hyps || !lens || !fwd)))
        return err_set(err, HARK_ERR_INVALID_ARG, "decoder: bad arguments (n %d, T %d)", n, T);
    int do_right =
        d->has_right && reverse_weight > 0.0f && (rev || opts->rev_tok || opts->logp_hook);
    if (rev)
        for (int i = 0; i < n; i++)
            rev[i] = 0.0f;
    if (n == 0)
        return HARK_OK;
    size_t R = 0;
    int max_rows = 0;
    int st = wdec_check_candidates(d->max_len, d->vocab, hyps, lens, 0, n, &R, &max_rows, err);
    if (st != HARK_OK)
        return st;
    if ((opts->fwd_tok || (opts->rev_tok && do_right)) && opts->tok_ld < max_rows)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "decoder: tok_ld %d is less than the longest candidate + 1 (%d)",
                       opts->tok_ld, max_rows);
    if (R > (size_t)1 << 30)
        return err_set(err, HARK_ERR_TOO_LARGE, "decoder: %zu decoder rows in one call", R);
    if (opts->n_threads > 0)
        ops_set_threads(opts->n_threads);

    int D = d->d, F = d->ffn, V = d->vocab;
    int tk = T > max_rows ? T : max_rows;
    size_t nf = 7 * R * D + R * F + 2 * (size_t)T * D + attention_scratch_floats(tk, d->dk) +
                (size_t)max_rows * V;
    size_t ni = 2 * R + (size_t)n + (size_t)max_rows;
    float *fbuf = hark_malloc(nf * sizeof(float));
    int *ibuf = hark_malloc(ni * sizeof(int));
    if (!fbuf || !ibuf) {
        hark_free(fbuf);
        hark_free(ibuf);
        return err_set(err, HARK_ERR_NOMEM, "decoder: out of memory for %zu rows", R);
    }
    scratch_t s;
    s.rows = (int)R;
    s.max_rows = max_rows;
    s.tok = ibuf;
    s.pos = s.tok + R;
    s.off = s.pos + R;
    s.hi = s.off + n;
    float *p = fbuf;
    s.x = p, p += R * D;
    s.t = p, p += R * D;
    s.q = p, p += R * D;
    s.k = p, p += R * D;
    s.v = p, p += R * D;
    s.ctx = p, p += R * D;
    s.o = p, p += R * D;
    s.hid = p, p += R * F;
    s.ke = p, p += (size_t)T * D;
    s.ve = p, p += (size_t)T * D;
    s.att = p, p += attention_scratch_floats(tk, d->dk);
    s.logp = p;
    for (int r = 0; r < max_rows; r++)
        s.hi[r] = r + 1;

    /* left: <sos> + hyp */
    int r = 0;
    for (int i = 0; i < n; i++) {
        s.off[i] = r;
        s.tok[r] = d->sos, s.pos[r] = 0, r++;
        for (int j = 0; j < lens[i]; j++)
            s.tok[r] = hyps[i][j], s.pos[r] = j + 1, r++;
    }
    emit_ctx_t ec = {d, opts, hyps, lens, fwd, opts->fwd_tok, 0};
    run_stack(d, &d->wt.left, &s, enc, T, n, lens, emit_scores, &ec);

    /* right: <sos> + reversed(hyp) */
    if (do_right) {
        for (int i = 0; i < n; i++) {
            int o = s.off[i];
            for (int j = 0; j < lens[i]; j++)
                s.tok[o + 1 + j] = hyps[i][lens[i] - 1 - j];
        }
        emit_ctx_t rc = {d, opts, hyps, lens, rev, opts->rev_tok, 1};
        run_stack(d, &d->wt.right, &s, enc, T, n, lens, emit_scores, &rc);
    }
    hark_free(fbuf);
    hark_free(ibuf);
    return HARK_OK;
}
