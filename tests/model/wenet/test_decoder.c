/* Tests for src/model/wenet/decoder.c: the golden bitransformer decoder (per-token log-probs, full
 * log-softmax of candidate 0, forward / reverse scores and the rescoring winner) for full-context
 * and streaming n-best lists, plus synthetic transformer decoders for batch-vs-single invariance
 * and weight-loading errors. HARK_TEST_REPORT=1 prints the measured errors. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/wenet/decoder.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"
#include "support/golden_model.h"
#include "support/synth_decoder.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GSET GOLDEN_WENET
#define TOK_TOL 2e-4f   /* per-token / full log-prob vs WeNet (max abs) */
#define SCORE_TOL 1e-3f /* summed scores vs WeNet (abs) */
#define BATCH_TOL 1e-5f /* batched candidate vs the same candidate alone */

static const char *const UTTS[5] = {"librispeech-1995-1837-0001", "jfk",
                                    "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                    "cards-001"};

static int report(void)
{
    const char *e = getenv("HARK_TEST_REPORT");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- the converted golden model (tests/support/golden_model.c) --------------------------- */

typedef struct {
    wenet_config_t cfg;
    safetensors_t *st;
    wenet_decoder_model_t *d;
} golden_model_t;

/* 0 ok; 1 skip (reason in why); -1 failure (message in why). */
static int golden_open(golden_model_t *g, char *why, size_t nwhy)
{
    memset(g, 0, sizeof *g);
    int r = golden_wenet_open(&g->cfg, &g->st, why, nwhy);
    if (r)
        return r;
    hark_err_t err = {0};
    if (wenet_decoder_create(&g->cfg, g->st, &g->d, &err) != HARK_OK) {
        snprintf(why, nwhy, "wenet_decoder_create: %.400s", err.msg);
        return -1;
    }
    return 0;
}

static void golden_close(golden_model_t *g)
{
    wenet_decoder_destroy(g->d);
    st_close(g->st);
}

#define OPEN_GOLDEN(g)                                                                             \
    do {                                                                                           \
        char why_[600];                                                                            \
        int r_ = golden_open(&(g), why_, sizeof why_);                                             \
        if (r_ > 0)                                                                                \
            SKIP(why_);                                                                            \
        CHECKF(r_ == 0, "%s", why_);                                                               \
    } while (0)

static int load_golden(npy_array_t *a, const char *utt, const char *file)
{
    return golden_wenet_npy(a, utt, file);
}

static cJSON *load_results(void)
{
    return golden_wenet_results();
}

static const cJSON *jpath(const cJSON *j, const char *a, const char *b, const char *c)
{
    j = cJSON_GetObjectItemCaseSensitive(j, a);
    j = cJSON_GetObjectItemCaseSensitive(j, b);
    return cJSON_GetObjectItemCaseSensitive(j, c);
}

/* ---- keeping the full log-softmax of candidate 0 -------------------------------------------- */

typedef struct {
    float *logp[2]; /* left, right: (rows, vocab) */
    int rows[2], vocab;
} keep0_t;

static void keep0(void *user, int right, int cand, int rows, int vocab, const float *logp)
{
    keep0_t *k = user;
    if (cand != 0)
        return;
    size_t n = (size_t)rows * vocab;
    hark_free(k->logp[right]);
    k->logp[right] = hark_malloc(n * sizeof(float));
    memcpy(k->logp[right], logp, n * sizeof(float));
    k->rows[right] = rows;
    k->vocab = vocab;
}

/* ---- golden --------------------------------------------------------------------------------- */

typedef struct {
    double tok_fwd, tok_rev, full_fwd, full_rev, score_fwd, score_rev, combined;
    int utts, cands, best_ok;
} errs_t;

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

/* One utterance of one mode: enc file, n-best from results.json, token goldens with `tok_prefix`
 * (e.g. "full_rescoring"). Returns NULL on success, else a static message. */
static const char *check_utt(golden_model_t *g, const cJSON *res, const char *utt, const char *mode,
                             const char *enc_file, const char *tok_prefix, int want_full, errs_t *e)
{
    static char msg[1024];
    npy_array_t enc = {0}, gf = {0}, gr = {0}, gl0 = {0}, gr0 = {0};
    keep0_t k0 = {{NULL, NULL}, {0, 0}, 0};
    int **hyps = NULL, *lens = NULL, n = 0;
    float *fwd = NULL, *rev = NULL, *ft = NULL, *rt = NULL;
    const char *fail = NULL;
    char name[256];
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        snprintf(msg, sizeof msg, __VA_ARGS__);                                                    \
        fail = msg;                                                                                \
        goto out;                                                                                  \
    } while (0)
    const cJSON *nbest =
        jpath(cJSON_GetObjectItemCaseSensitive(res, utt), mode, "ctc_prefix_beam_search", "nbest");
    const cJSON *ar = jpath(res, utt, mode, "attention_rescoring");
    const cJSON *cands = cJSON_GetObjectItemCaseSensitive(ar, "candidates");
    if (!cJSON_IsArray(nbest) || !cJSON_IsArray(cands))
        FAIL("%s %s: no nbest / candidates in results.json", utt, mode);
    n = cJSON_GetArraySize(nbest);
    if (n != cJSON_GetArraySize(cands) || n < 1)
        FAIL("%s %s: %d nbest vs %d candidates", utt, mode, n, cJSON_GetArraySize(cands));
    if (load_golden(&enc, utt, enc_file) != HARK_OK || enc.ndim != 2 ||
        enc.shape[1] != g->cfg.d_model)
        FAIL("%s: cannot load %s", utt, enc_file);
    snprintf(name, sizeof name, "%s_fwd_token_logp.npy", tok_prefix);
    if (load_golden(&gf, utt, name) != HARK_OK || gf.ndim != 2 || gf.shape[0] != n)
        FAIL("%s: cannot load %s (nbest %d)", utt, name, n);
    snprintf(name, sizeof name, "%s_rev_token_logp.npy", tok_prefix);
    if (load_golden(&gr, utt, name) != HARK_OK || gr.ndim != 2 || gr.shape[0] != n)
        FAIL("%s: cannot load %s", utt, name);
    int ld = (int)gf.shape[1];
    hyps = hark_calloc((size_t)n, sizeof *hyps);
    lens = hark_calloc((size_t)n, sizeof *lens);
    fwd = hark_calloc((size_t)n, sizeof *fwd);
    rev = hark_calloc((size_t)n, sizeof *rev);
    ft = hark_malloc((size_t)n * ld * sizeof *ft);
    rt = hark_malloc((size_t)n * ld * sizeof *rt);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        ft[i] = rt[i] = NAN;
    for (int i = 0; i < n; i++) {
        const cJSON *h = cJSON_GetArrayItem(nbest, i);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cands, i), "tokens");
        lens[i] = cJSON_GetArraySize(h);
        if (lens[i] + 1 > ld || cJSON_GetArraySize(ct) != lens[i])
            FAIL("%s %s: candidate %d has %d tokens (golden width %d)", utt, mode, i, lens[i], ld);
        hyps[i] = hark_malloc((size_t)(lens[i] + 1) * sizeof(int));
        for (int j = 0; j < lens[i]; j++) {
            hyps[i][j] = cJSON_GetArrayItem(h, j)->valueint;
            if (hyps[i][j] != cJSON_GetArrayItem(ct, j)->valueint)
                FAIL("%s %s: nbest %d differs from candidates[%d].tokens", utt, mode, i, i);
        }
    }
    wenet_decoder_opts_t o = wenet_decoder_default_opts();
    o.fwd_tok = ft, o.rev_tok = rt, o.tok_ld = ld;
    o.n_threads = 1;
    if (want_full)
        o.logp_hook = keep0, o.hook_user = &k0;
    hark_err_t err = {0};
    float rw = g->cfg.reverse_weight;
    int rc = wenet_decoder_score(g->d, &o, enc.data, (int)enc.shape[0], (const int *const *)hyps,
                                 lens, n, rw, fwd, rev, &err);
    if (rc != HARK_OK)
        FAIL("%s %s: wenet_decoder_score: %s", utt, mode, err.msg);

    /* per-token log-probs: same NaN layout as the golden */
    const float *rf = gf.data, *rr = gr.data;
    for (size_t i = 0; i < (size_t)n * ld; i++) {
        if (isnan(rf[i]) != isnan(ft[i]) || isnan(rr[i]) != isnan(rt[i]))
            FAIL("%s %s: token log-prob layout differs at candidate %zu column %zu", utt, mode,
                 i / ld, i % ld);
        if (!isnan(rf[i]))
            e->tok_fwd = maxd(e->tok_fwd, fabs(rf[i] - ft[i]));
        if (!isnan(rr[i]))
            e->tok_rev = maxd(e->tok_rev, fabs(rr[i] - rt[i]));
    }
    /* scores and the winner */
    float best = -INFINITY;
    int best_i = -1;
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cands, i);
        double af = cJSON_GetObjectItemCaseSensitive(c, "att_forward_score")->valuedouble;
        double av = cJSON_GetObjectItemCaseSensitive(c, "att_reverse_score")->valuedouble;
        double ac = cJSON_GetObjectItemCaseSensitive(c, "att_combined_score")->valuedouble;
        double ctc = cJSON_GetObjectItemCaseSensitive(c, "ctc_prefix_score")->valuedouble;
        float comb = fwd[i] * (1.0f - rw) + rev[i] * rw;
        e->score_fwd = maxd(e->score_fwd, fabs(af - fwd[i]));
        e->score_rev = maxd(e->score_rev, fabs(av - rev[i]));
        e->combined = maxd(e->combined, fabs(ac - comb));
        float fin = comb + (float)(ctc * g->cfg.ctc_weight);
        if (fin > best)
            best = fin, best_i = i;
    }
    int want_best = cJSON_GetObjectItemCaseSensitive(ar, "best_index")->valueint;
    if (best_i != want_best)
        FAIL("%s %s: rescoring picks candidate %d, WeNet %d", utt, mode, best_i, want_best);
    e->best_ok++;
    if (want_full) {
        const char *files[2] = {"full_rescoring_decoder_logp_hyp0.npy",
                                "full_rescoring_rdecoder_logp_hyp0.npy"};
        npy_array_t *arr[2] = {&gl0, &gr0};
        for (int r = 0; r < 2; r++) {
            if (load_golden(arr[r], utt, files[r]) != HARK_OK || arr[r]->ndim != 2)
                FAIL("%s: cannot load %s", utt, files[r]);
            if (!k0.logp[r] || arr[r]->shape[0] != k0.rows[r] || arr[r]->shape[1] != k0.vocab)
                FAIL("%s: %s is %lldx%lld, hark gave %dx%d", utt, files[r],
                     (long long)arr[r]->shape[0], (long long)arr[r]->shape[1], k0.rows[r],
                     k0.vocab);
            double m = test_max_abs_diff(k0.logp[r], arr[r]->data, arr[r]->count);
            if (r)
                e->full_rev = maxd(e->full_rev, m);
            else
                e->full_fwd = maxd(e->full_fwd, m);
        }
    }
    e->utts++;
    e->cands += n;
out:
#undef FAIL
    for (int i = 0; hyps && i < n; i++)
        hark_free(hyps[i]);
    hark_free(hyps);
    hark_free(lens);
    hark_free(fwd);
    hark_free(rev);
    hark_free(ft);
    hark_free(rt);
    hark_free(k0.logp[0]);
    hark_free(k0.logp[1]);
    npy_free(&enc);
    npy_free(&gf);
    npy_free(&gr);
    npy_free(&gl0);
    npy_free(&gr0);
    return fail;
}

static void check_errs(test_ctx_t *t, const char *what, const errs_t *e, int want_full)
{
    if (report()) {
        printf("  decoder %s: %d utts, %d candidates; max abs: token fwd %.3g rev %.3g, score fwd "
               "%.3g rev %.3g combined %.3g; winner ok %d/%d\n",
               what, e->utts, e->cands, e->tok_fwd, e->tok_rev, e->score_fwd, e->score_rev,
               e->combined, e->best_ok, e->utts);
        if (want_full)
            printf("  decoder %s: full log-softmax of hyp 0 (2 utts) max abs fwd %.3g rev %.3g\n",
                   what, e->full_fwd, e->full_rev);
    }
    CHECKF(e->tok_fwd < TOK_TOL && e->tok_rev < TOK_TOL, "%s token log-probs: fwd %g rev %g", what,
           e->tok_fwd, e->tok_rev);
    CHECKF(!want_full || (e->full_fwd < TOK_TOL && e->full_rev < TOK_TOL),
           "%s full log-softmax of hyp 0: fwd %g rev %g", what, e->full_fwd, e->full_rev);
    CHECKF(e->score_fwd < SCORE_TOL && e->score_rev < SCORE_TOL && e->combined < SCORE_TOL,
           "%s scores: fwd %g rev %g combined %g", what, e->score_fwd, e->score_rev, e->combined);
}

TEST(decoder_golden_full_context)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    CHECK(g.cfg.decoder == DECODER_BITRANSFORMER && wenet_decoder_has_right(g.d));
    CHECK(g.cfg.reverse_weight > 0.29f && g.cfg.reverse_weight < 0.31f);
    cJSON *res = load_results();
    CHECK(res);
    errs_t e = {0};
    const char *fail = NULL;
    for (int u = 0; u < 5 && !fail; u++) {
        int full = !strcmp(UTTS[u], "LJ001-0002") || !strcmp(UTTS[u], "cards-001");
        fail = check_utt(&g, res, UTTS[u], "full", "enc_full.npy", "full_rescoring", full, &e);
    }
    cJSON_Delete(res);
    golden_close(&g);
    CHECKF(!fail, "%s", fail);
    CHECK(e.utts == 5);
    check_errs(t, "full", &e, 1);
}

TEST(decoder_golden_streaming_nbest)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    cJSON *res = load_results();
    CHECK(res);
    errs_t e = {0};
    const char *fail = NULL;
    static const char *const left[2] = {"-1", "4"};
    for (int l = 0; l < 2 && !fail; l++) {
        char mode[64], encf[64], pre[64];
        snprintf(mode, sizeof mode, "stream_chunk16_left%s", left[l]);
        snprintf(encf, sizeof encf, "enc_chunk16_left%s_stream.npy", left[l]);
        snprintf(pre, sizeof pre, "stream_chunk16_left%s_rescoring", left[l]);
        for (int u = 0; u < 5 && !fail; u++)
            fail = check_utt(&g, res, UTTS[u], mode, encf, pre, 0, &e);
    }
    cJSON_Delete(res);
    golden_close(&g);
    CHECKF(!fail, "%s", fail);
    CHECK(e.utts == 10);
    check_errs(t, "stream", &e, 0);
}

/* ---- synthetic decoders --------------------------------------------------------------------- */

/* Random weights made on demand, one buffer per tensor; records every name and shape so that a
 * safetensors file with the same tensors can be written. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
    float *data;
} rec_t;

typedef struct {
    unsigned seed;
    rec_t r[256];
    int n;
} bank_t;

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int bank_get(void *user, const char *name, int ndim, const int64_t *shape,
                    const float **data, hark_err_t *err)
{
    bank_t *bk = user;
    if (bk->n >= 256 || ndim > 2)
        return err_set(err, HARK_ERR_NOMEM, "bank full");
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    float fan_in = ndim >= 2 ? (float)shape[1] : 1.0f;
    float *p = hark_malloc(n * sizeof(float));
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "oom");
    int is_norm_w = strstr(name, "norm") && ends_with(name, ".weight");
    int is_embed = strstr(name, "embed.0") != NULL;
    for (size_t i = 0; i < n; i++) {
        float r = test_randf(&bk->seed);
        if (is_norm_w)
            p[i] = 1.0f + 0.1f * r;
        else if (is_embed)
            p[i] = 0.2f * r;
        else if (ndim >= 2)
            p[i] = r * 1.7f / sqrtf(fan_in);
        else
            p[i] = 0.1f * r;
    }
    rec_t *rc = &bk->r[bk->n++];
    snprintf(rc->name, sizeof rc->name, "%s", name);
    rc->ndim = ndim;
    rc->shape[0] = shape[0];
    rc->shape[1] = ndim > 1 ? shape[1] : 0;
    rc->data = p;
    *data = p;
    return HARK_OK;
}

static void bank_free(bank_t *bk)
{
    for (int i = 0; i < bk->n; i++)
        hark_free(bk->r[i].data);
    bk->n = 0;
}

static wenet_config_t synth_config(wenet_decoder_t type, int heads, int ffn, int blocks,
                                   int r_blocks, int pre_norm)
{
    return synth_decoder_config(type, 24, heads, ffn, blocks, r_blocks, pre_norm, 19);
}

/* Batched scores and per-token log-probs of n candidates vs each candidate alone. */
static void check_batch_invariance(test_ctx_t *t, const wenet_decoder_model_t *d, float rw,
                                   const char *what)
{
    enum { N = 6, T = 23, LD = 16 };
    static const int lens[N] = {5, 0, 12, 1, 15, 7};
    unsigned seed = 77;
    float enc[T * 24];
    for (int i = 0; i < T * 24; i++)
        enc[i] = test_randf(&seed);
    int toks[N][LD];
    const int *hyps[N];
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < lens[i]; j++)
            toks[i][j] = (int)(test_rand(&seed) % 19u);
        hyps[i] = toks[i];
    }
    float fwd[N], rev[N], ft[N * LD], rt[N * LD];
    wenet_decoder_opts_t o = wenet_decoder_default_opts();
    o.fwd_tok = ft, o.rev_tok = rt, o.tok_ld = LD;
    hark_err_t err = {0};
    CHECKF(wenet_decoder_score(d, &o, enc, T, hyps, lens, N, rw, fwd, rev, &err) == HARK_OK, "%s",
           err.msg);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float f1, r1, ft1[LD], rt1[LD];
        o.fwd_tok = ft1, o.rev_tok = rt1;
        CHECKF(wenet_decoder_score(d, &o, enc, T, &hyps[i], &lens[i], 1, rw, &f1, &r1, &err) ==
                   HARK_OK,
               "%s", err.msg);
        CHECKF(isfinite(f1) && f1 < 0.0f, "%s: candidate %d score %g", what, i, f1);
        worst = maxd(worst, fabs(f1 - fwd[i]));
        worst = maxd(worst, fabs(r1 - rev[i]));
        worst = maxd(worst, test_max_abs_diff(ft1, ft + i * LD, (size_t)lens[i] + 1));
        if (rw > 0.0f)
            worst = maxd(worst, test_max_abs_diff(rt1, rt + i * LD, (size_t)lens[i] + 1));
        else
            CHECKF(r1 == 0.0f && rev[i] == 0.0f, "%s: rev must be 0 without a right decoder", what);
    }
    if (report())
        printf("  decoder %s: batched vs single max abs %.3g\n", what, worst);
    CHECKF(worst < BATCH_TOL, "%s: batched vs single differ by %g", what, worst);
}

TEST(decoder_synthetic_batch_invariance)
{
    struct {
        const char *what;
        wenet_config_t c;
    } cases[] = {
        {"transformer h3 f40 pre-norm", synth_config(DECODER_TRANSFORMER, 3, 40, 2, 0, 1)},
        {"transformer h6 f17 post-norm", synth_config(DECODER_TRANSFORMER, 6, 17, 3, 0, 0)},
        {"bitransformer h2 f33 2+1", synth_config(DECODER_BITRANSFORMER, 2, 33, 2, 1, 1)},
        {"bitransformer 1+0", synth_config(DECODER_BITRANSFORMER, 4, 20, 1, 0, 1)},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        bank_t bk = {.seed = 1234u + (unsigned)k};
        wenet_decoder_model_t *d = NULL;
        hark_err_t err = {0};
        int rc = wenet_decoder_create_fn(&cases[k].c, bank_get, &bk, &d, &err);
        if (rc != HARK_OK)
            bank_free(&bk);
        CHECKF(rc == HARK_OK, "%s: %s", cases[k].what, err.msg);
        CHECK(wenet_decoder_has_right(d) == (cases[k].c.decoder == DECODER_BITRANSFORMER));
        check_batch_invariance(t, d, cases[k].c.reverse_weight, cases[k].what);
        wenet_decoder_destroy(d);
        bank_free(&bk);
        if (test_failed(t))
            return;
    }
}

/* Writes the bank's tensors as a safetensors file, leaving out `skip` and giving `bad` a wrong
 * first dimension. Returns 0 on success. */
static int write_st(const char *path, const bank_t *bk, const char *skip, const char *bad)
{
    size_t cap = 64 + (size_t)bk->n * 256, off = 0;
    char *hdr = hark_malloc(cap);
    size_t hl = (size_t)snprintf(hdr, cap, "{");
    for (int i = 0; i < bk->n; i++) {
        const rec_t *r = &bk->r[i];
        if (skip && !strcmp(r->name, skip))
            continue;
        size_t cnt = (size_t)r->shape[0] * (r->ndim > 1 ? (size_t)r->shape[1] : 1);
        int64_t d0 = bad && !strcmp(r->name, bad) ? r->shape[0] + 1 : r->shape[0];
        if (d0 != r->shape[0])
            cnt += r->ndim > 1 ? (size_t)r->shape[1] : 1;
        char dims[64];
        if (r->ndim > 1)
            snprintf(dims, sizeof dims, "%lld,%lld", (long long)d0, (long long)r->shape[1]);
        else
            snprintf(dims, sizeof dims, "%lld", (long long)d0);
        hl += (size_t)snprintf(
            hdr + hl, cap - hl,
            "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
            hl > 1 ? "," : "", r->name, dims, off, off + cnt * 4);
        off += cnt * 4;
    }
    hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
    while (hl % 8)
        hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        hark_free(hdr);
        return -1;
    }
    uint64_t n64 = hl;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(n64 >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    for (int i = 0; i < bk->n; i++) {
        const rec_t *r = &bk->r[i];
        if (skip && !strcmp(r->name, skip))
            continue;
        size_t cnt = (size_t)r->shape[0] * (r->ndim > 1 ? (size_t)r->shape[1] : 1);
        fwrite(r->data, 4, cnt, f);
        if (bad && !strcmp(r->name, bad)) /* the extra row */
            fwrite(r->data, 4, r->ndim > 1 ? (size_t)r->shape[1] : 1, f);
    }
    int rc = ferror(f) ? -1 : 0;
    fclose(f);
    hark_free(hdr);
    return rc;
}

TEST(decoder_safetensors_and_weight_errors)
{
    wenet_config_t c = synth_config(DECODER_TRANSFORMER, 3, 40, 2, 0, 1);
    bank_t bk = {.seed = 99u};
    wenet_decoder_model_t *ref = NULL;
    hark_err_t err = {0};
    CHECKF(wenet_decoder_create_fn(&c, bank_get, &bk, &ref, &err) == HARK_OK, "%s", err.msg);
    char path[600];
    snprintf(path, sizeof path, "%s/dec.safetensors", test_tmpdir(t));

    /* the same tensors through a safetensors file give the same scores */
    CHECK(write_st(path, &bk, NULL, NULL) == 0);
    safetensors_t *st = NULL;
    CHECKF(st_open(path, &st, &err) == HARK_OK, "%s", err.msg);
    wenet_decoder_model_t *d = NULL;
    CHECKF(wenet_decoder_create(&c, st, &d, &err) == HARK_OK, "%s", err.msg);
    float enc[5 * 24];
    unsigned seed = 5;
    for (int i = 0; i < 5 * 24; i++)
        enc[i] = test_randf(&seed);
    int h0[3] = {4, 17, 0};
    const int *hyps[1] = {h0};
    int len = 3;
    float f_ref, f_st, rev = 1.0f;
    CHECK(wenet_decoder_score(ref, NULL, enc, 5, hyps, &len, 1, 0.5f, &f_ref, &rev, &err) ==
          HARK_OK);
    CHECK(rev == 0.0f); /* a transformer decoder has no right-to-left score */
    CHECK(wenet_decoder_score(d, NULL, enc, 5, hyps, &len, 1, 0.0f, &f_st, NULL, &err) == HARK_OK);
    CHECKF(f_ref == f_st, "%g vs %g", f_ref, f_st);
    wenet_decoder_destroy(d);
    st_close(st);

    /* bad requests fail the request with a message */
    h0[1] = 19;
    CHECK(wenet_decoder_score(ref, NULL, enc, 5, hyps, &len, 1, 0.0f, &f_ref, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "vocabulary"), "%s", err.msg);
    h0[1] = 17;
    len = 64; /* len + 1 past max_len */
    int big[64] = {0};
    hyps[0] = big;
    CHECK(wenet_decoder_score(ref, NULL, enc, 5, hyps, &len, 1, 0.0f, &f_ref, NULL, &err) ==
          HARK_ERR_TOO_LARGE);
    CHECK(wenet_decoder_score(ref, NULL, enc, 0, hyps, &len, 1, 0.0f, &f_ref, NULL, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(wenet_decoder_score(ref, NULL, NULL, 0, NULL, NULL, 0, 0.0f, NULL, NULL, &err) ==
          HARK_OK);

    /* a missing tensor and a mis-shaped one are named */
    static const char *const names[2] = {"decoder.decoders.1.src_attn.linear_v.bias",
                                         "decoder.decoders.0.feed_forward.w_2.weight"};
    for (int k = 0; k < 2; k++) {
        CHECK(write_st(path, &bk, k == 0 ? names[0] : NULL, k == 1 ? names[1] : NULL) == 0);
        st = NULL;
        CHECKF(st_open(path, &st, &err) == HARK_OK, "%s", err.msg);
        d = NULL;
        int rc = wenet_decoder_create(&c, st, &d, &err);
        st_close(st);
        CHECK(d == NULL);
        CHECK_EQ_INT(rc, k == 0 ? HARK_ERR_NOT_FOUND : HARK_ERR_FORMAT);
        CHECKF(strstr(err.msg, names[k]), "message does not name the tensor: %s", err.msg);
        if (k == 1)
            CHECKF(strstr(err.msg, "[25,40]") && strstr(err.msg, "[24,40]"), "%s", err.msg);
    }
    /* wrong names for a bitransformer: the left decoder's prefix is required */
    wenet_config_t cb = c;
    cb.decoder = DECODER_BITRANSFORMER;
    CHECK(write_st(path, &bk, NULL, NULL) == 0);
    st = NULL;
    CHECKF(st_open(path, &st, &err) == HARK_OK, "%s", err.msg);
    CHECK(wenet_decoder_create(&cb, st, &d, &err) == HARK_ERR_NOT_FOUND);
    st_close(st);
    CHECKF(strstr(err.msg, "decoder.left_decoder.embed.0.weight"), "%s", err.msg);
    /* every allocation of create and score can fail cleanly */
    int ok = 0;
    hyps[0] = h0;
    len = 3;
    for (long k = 1; k < 100 && !ok; k++) {
        wenet_decoder_model_t *m2 = NULL;
        bank_t b2 = {.seed = 99u};
        alloc_fail_after(k);
        int rc = wenet_decoder_create_fn(&c, bank_get, &b2, &m2, &err);
        int rs = rc == HARK_OK ? wenet_decoder_score(m2, NULL, enc, 5, hyps, &len, 1, 0.0f, &f_ref,
                                                     NULL, &err)
                               : rc;
        alloc_fail_reset();
        CHECKF(rs == HARK_OK || rs == HARK_ERR_NOMEM, "allocation %ld: status %d", k, rs);
        ok = rs == HARK_OK;
        wenet_decoder_destroy(m2);
        bank_free(&b2);
    }
    CHECK(ok);
    /* a model without a decoder */
    cb.decoder = DECODER_NONE;
    CHECK(wenet_decoder_create_fn(&cb, bank_get, &bk, &d, &err) == HARK_ERR_INVALID_ARG);
    wenet_decoder_destroy(ref);
    bank_free(&bk);
}
