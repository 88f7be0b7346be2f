/* Tests for src/search/: CTC greedy and prefix beam search, attention-rescoring selection and
 * units, against WeNet's results.json (golden set) and on hand-made log-prob matrices with known
 * answers, bad input, and an out-of-memory sweep. */
#include "test.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/npy.h"
#include "hark.h"
#include "search/ctc.h"
#include "search/rescore.h"
#include "text/units.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GSET "golden/wenet_u2pp_conformer_small"

/* ---- helpers --------------------------------------------------------------------------------- */

static cJSON *load_results(void)
{
    return test_read_json(test_shared(GSET "/results.json"));
}

/* 1 when the JSON int array equals v[0..n) */
static int json_ints_eq(const cJSON *arr, const int *v, int n)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return 0;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (!cJSON_IsNumber(e) || (int)e->valuedouble != v[i++])
            return 0;
    }
    return 1;
}

static int json_ints(const cJSON *arr, int *v, int cap)
{
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr)
    {
        if (n < cap)
            v[n] = (int)e->valuedouble;
        n++;
    }
    return n;
}

static const cJSON *jget(const cJSON *o, const char *a, const char *b, const char *c)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, a);
    if (r && b)
        r = cJSON_GetObjectItemCaseSensitive(r, b);
    if (r && c)
        r = cJSON_GetObjectItemCaseSensitive(r, c);
    return r;
}

static int load_logp(const char *utt, npy_array_t *a)
{
    char rel[512];
    snprintf(rel, sizeof rel, GSET "/goldens/%s/ctc_logprobs_full.npy", utt);
    const char *p = test_shared(rel);
    return p ? npy_load(p, a) : HARK_ERR_IO;
}

static units_t *load_units(void)
{
    units_t *u = NULL;
    const char *p = test_shared(GSET "/units.txt");
    if (p && units_load(p, &u, NULL) != HARK_OK)
        u = NULL;
    return u;
}

/* Exact prefix probabilities by enumerating every CTC path of a (T, V) matrix (tiny sizes):
 * the collapsed label of each path is hashed as a base-(V+1) number. Returns the log-prob of the
 * label sequence `lab` of length n. */
static double exact_prefix_logp(const float *logp, int T, int V, int blank, const int *lab, int n)
{
    long paths = 1;
    for (int t = 0; t < T; t++)
        paths *= V;
    double total = 0.0;
    int path[16];
    for (long p = 0; p < paths; p++) {
        long q = p;
        double lp = 0.0;
        for (int t = 0; t < T; t++) {
            path[t] = (int)(q % V);
            q /= V;
            lp += logp[t * V + path[t]];
        }
        int m = 0, ok = 1;
        for (int t = 0; t < T && ok; t++) {
            if (path[t] == blank || (t > 0 && path[t] == path[t - 1]))
                continue;
            if (m >= n || lab[m] != path[t])
                ok = 0;
            m++;
        }
        if (ok && m == n)
            total += exp(lp);
    }
    return total > 0.0 ? log(total) : -INFINITY;
}

/* A random row-normalised log-prob matrix. */
static void random_logp(float *logp, int T, int V, unsigned *seed, float sharp)
{
    for (int t = 0; t < T; t++) {
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            logp[t * V + v] = sharp * test_randf(seed);
            sum += exp(logp[t * V + v]);
        }
        float ls = sum > 0.0 ? (float)log(sum) : 0.0f; /* V >= 1: sum > 0 */
        for (int v = 0; v < V; v++)
            logp[t * V + v] -= ls;
    }
}

/* ---- golden: greedy -------------------------------------------------------------------------- */

static const char *UTTS[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                             "cards-001"};
#define N_UTTS 5

TEST(search_golden_greedy)
{
    NEED_SHARED(GSET "/results.json");
    cJSON *res = load_results();
    units_t *units = load_units();
    CHECK(res && units);
    CHECK(units_count(units) == 5002 && units_guess_style(units) == UNITS_STYLE_BPE);
    for (int k = 0; k < N_UTTS; k++) {
        npy_array_t lp;
        CHECK_OK(load_logp(UTTS[k], &lp));
        CHECK(lp.dtype == NPY_F32 && lp.ndim == 2 && lp.shape[1] == 5002);
        int T = (int)lp.shape[0], V = (int)lp.shape[1];
        const cJSON *g = jget(res, UTTS[k], "full", "ctc_greedy_search");
        CHECK(g);
        ctc_nbest_t nb;
        hark_err_t err = {0};
        CHECKF(ctc_greedy_search(lp.data, T, V, 0, &nb, &err) == HARK_OK, "%s", err.msg);
        CHECK(nb.n == 1);
        CHECKF(json_ints_eq(jget(g, "tokens", NULL, NULL), nb.tokens[0], nb.lens[0]),
               "%s: greedy tokens differ", UTTS[k]);
        /* times: first frame of each run of WeNet's own frame_argmax */
        int fa[4096];
        int nfa = json_ints(jget(g, "frame_argmax", NULL, NULL), fa, 4096);
        CHECK(nfa == T);
        for (int f = 0, j = 0; f < T; f++)
            if (fa[f] != 0 && (f == 0 || fa[f - 1] != fa[f])) {
                CHECKF(nb.times[0][j] == f, "%s: greedy time of token %d", UTTS[k], j);
                j++;
            }
        char *text = NULL;
        CHECK_OK(units_detokenize(units, UNITS_STYLE_BPE, nb.tokens[0], nb.lens[0], &text, &err));
        const char *want = cJSON_GetStringValue(jget(g, "text", NULL, NULL));
        CHECKF(want && strcmp(text, want) == 0, "%s: text \"%s\" vs \"%s\"", UTTS[k], text,
               want ? want : "(null)");
        hark_free(text);
        ctc_nbest_free(&nb);
        npy_free(&lp);
    }
    units_destroy(units);
    cJSON_Delete(res);
}

/* ---- golden: prefix beam --------------------------------------------------------------------- */

/* Compares an n-best with results[utt][mode]["ctc_prefix_beam_search"]; returns the max |score
 * difference| in *maxd, or fails the test. */
static int check_nbest(test_ctx_t *t, const cJSON *pb, const ctc_nbest_t *nb, const units_t *units,
                       const char *utt, double *maxd)
{
    const cJSON *nbest = jget(pb, "nbest", NULL, NULL),
                *scores = jget(pb, "nbest_scores", NULL, NULL);
    const cJSON *times = jget(pb, "nbest_times", NULL, NULL),
                *texts = jget(pb, "nbest_text", NULL, NULL);
    if (!nbest || !scores || !times || !texts) {
        test_fail(t, __FILE__, __LINE__, "%s: nbest fields missing", utt);
        return 0;
    }
    if (cJSON_GetArraySize(nbest) != nb->n) {
        test_fail(t, __FILE__, __LINE__, "%s: %d hypotheses, WeNet %d", utt, nb->n,
                  cJSON_GetArraySize(nbest));
        return 0;
    }
    for (int i = 0; i < nb->n; i++) {
        if (!json_ints_eq(cJSON_GetArrayItem(nbest, i), nb->tokens[i], nb->lens[i])) {
            test_fail(t, __FILE__, __LINE__, "%s: n-best %d tokens differ", utt, i);
            return 0;
        }
        if (!json_ints_eq(cJSON_GetArrayItem(times, i), nb->times[i], nb->lens[i])) {
            test_fail(t, __FILE__, __LINE__, "%s: n-best %d times differ", utt, i);
            return 0;
        }
        double want = cJSON_GetArrayItem(scores, i)->valuedouble;
        double d = fabs(nb->scores[i] - want);
        *maxd = d > *maxd ? d : *maxd;
        if (!(d <= 1e-3)) {
            test_fail(t, __FILE__, __LINE__, "%s: n-best %d score %.9f vs %.9f", utt, i,
                      nb->scores[i], want);
            return 0;
        }
        char *text = NULL;
        if (units_detokenize(units, UNITS_STYLE_BPE, nb->tokens[i], nb->lens[i], &text, NULL) ||
            strcmp(text, cJSON_GetArrayItem(texts, i)->valuestring) != 0) {
            test_fail(t, __FILE__, __LINE__, "%s: n-best %d text \"%s\"", utt, i,
                      text ? text : "(error)");
            hark_free(text);
            return 0;
        }
        hark_free(text);
    }
    return 1;
}

TEST(search_golden_prefix_beam)
{
    NEED_SHARED(GSET "/results.json");
    cJSON *res = load_results();
    units_t *units = load_units();
    CHECK(res && units);
    double maxd = 0.0, ms_total = 0.0;
    int exact = 1;
    for (int k = 0; k < N_UTTS; k++) {
        npy_array_t lp;
        CHECK_OK(load_logp(UTTS[k], &lp));
        int T = (int)lp.shape[0], V = (int)lp.shape[1];
        const cJSON *pb = jget(res, UTTS[k], "full", "ctc_prefix_beam_search");
        CHECK(pb);
        ctc_nbest_t nb;
        hark_err_t err = {0};
        double t0 = clock_now_s();
        CHECKF(ctc_prefix_beam_search(lp.data, T, V, 10, 0, &nb, &err) == HARK_OK, "%s", err.msg);
        double ms = (clock_now_s() - t0) * 1e3;
        ms_total += ms;
        double d = 0.0;
        if (!check_nbest(t, pb, &nb, units, UTTS[k], &d))
            return;
        maxd = d > maxd ? d : maxd;
        for (int i = 0; i < nb.n; i++)
            exact &= nb.scores[i] ==
                     cJSON_GetArrayItem(jget(pb, "nbest_scores", NULL, NULL), i)->valuedouble;
        CHECK(cJSON_GetObjectItem(pb, "score")->valuedouble - nb.scores[0] == 0.0 ||
              fabs(cJSON_GetObjectItem(pb, "score")->valuedouble - nb.scores[0]) <= 1e-3);
        fprintf(stderr, "    %-42s T=%3d  n-best max |score diff| %.3g  %.2f ms\n", UTTS[k], T, d,
                ms);

        /* streaming: the same frames in uneven pieces give the same n-best */
        ctc_beam_t *b = NULL;
        CHECK_OK(ctc_beam_create(V, 10, 0, &b, &err));
        for (int t0f = 0, step = 1; t0f < T; t0f += step, step = step % 7 + 3) {
            int n = t0f + step <= T ? step : T - t0f;
            CHECK_OK(ctc_beam_advance(b, (const float *)lp.data + (size_t)t0f * V, n, &err));
        }
        CHECK(ctc_beam_frames(b) == T);
        ctc_nbest_t nb2;
        CHECK_OK(ctc_beam_nbest(b, &nb2, &err));
        CHECK(nb2.n == nb.n);
        for (int i = 0; i < nb.n; i++) {
            CHECK(nb2.lens[i] == nb.lens[i] && nb2.scores[i] == nb.scores[i]);
            CHECK(memcmp(nb2.tokens[i], nb.tokens[i], sizeof(int) * nb.lens[i]) == 0);
            CHECK(memcmp(nb2.times[i], nb.times[i], sizeof(int) * nb.lens[i]) == 0);
        }
        /* reset: a second utterance on the same state */
        ctc_beam_reset(b);
        CHECK(ctc_beam_frames(b) == 0);
        CHECK_OK(ctc_beam_advance(b, lp.data, T, &err));
        ctc_nbest_free(&nb2);
        CHECK_OK(ctc_beam_nbest(b, &nb2, &err));
        for (int i = 0; i < nb.n; i++)
            CHECK(nb2.scores[i] == nb.scores[i] && nb2.lens[i] == nb.lens[i]);
        ctc_nbest_free(&nb2);
        ctc_beam_destroy(b);
        ctc_nbest_free(&nb);
        npy_free(&lp);
    }
    fprintf(
        stderr,
        "    prefix beam (beam 10): max |score - WeNet nbest_scores| = %.3g (%s), total %.1f ms\n",
        maxd, exact ? "all bit-identical" : "not all bit-identical", ms_total);
    units_destroy(units);
    cJSON_Delete(res);
}

/* ---- golden: attention rescoring ------------------------------------------------------------- */

static int load_tok_logp(const char *utt, const char *which, npy_array_t *a)
{
    char rel[512];
    snprintf(rel, sizeof rel, GSET "/goldens/%s/%s_token_logp.npy", utt, which);
    const char *p = test_shared(rel);
    return p ? npy_load(p, a) : HARK_ERR_IO;
}

/* Checks attention_rescoring of one mode from the candidates' decoder scores and `ctc` scores. */
static int check_rescore(test_ctx_t *t, const cJSON *ar, const double *ctc, const units_t *units,
                         const char *what, const npy_array_t *ftok, const npy_array_t *rtok)
{
    const cJSON *cands = jget(ar, "candidates", NULL, NULL);
    int n = cJSON_GetArraySize(cands);
    float fwd[64], rev[64], comb[64], fin[64];
    int lens[64];
    double conf[64];
    if (n < 1 || n > 64) {
        test_fail(t, __FILE__, __LINE__, "%s: %d candidates", what, n);
        return 0;
    }
    int *tok[64];
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cands, i);
        fwd[i] = (float)jget(c, "att_forward_score", NULL, NULL)->valuedouble;
        rev[i] = (float)jget(c, "att_reverse_score", NULL, NULL)->valuedouble;
        lens[i] = cJSON_GetArraySize(jget(c, "tokens", NULL, NULL));
        tok[i] = malloc(sizeof(int) * (lens[i] + 1));
        json_ints(jget(c, "tokens", NULL, NULL), tok[i], lens[i]);
    }
    rescore_pick_t pick;
    hark_err_t err = {0};
    int ok = 0;
    if (rescore_select(ctc, fwd, rev, lens, n, 0.5, 0.3, comb, fin, conf, &pick, &err)) {
        test_fail(t, __FILE__, __LINE__, "%s: %s", what, err.msg);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const cJSON *c = cJSON_GetArrayItem(cands, i);
        float wc = (float)jget(c, "att_combined_score", NULL, NULL)->valuedouble;
        float wf = (float)jget(c, "final_score", NULL, NULL)->valuedouble;
        if (comb[i] != wc || fin[i] != wf) {
            test_fail(t, __FILE__, __LINE__,
                      "%s: candidate %d combined %.9g vs %.9g, final %.9g vs %.9g", what, i,
                      comb[i], wc, fin[i], wf);
            goto out;
        }
    }
    int best = (int)jget(ar, "best_index", NULL, NULL)->valuedouble;
    if (pick.best != best || (double)pick.score != jget(ar, "score", NULL, NULL)->valuedouble ||
        pick.confidence != jget(ar, "confidence", NULL, NULL)->valuedouble ||
        conf[best] != pick.confidence) {
        test_fail(t, __FILE__, __LINE__,
                  "%s: best %d (WeNet %d), score %.9g, confidence %.17g vs %.17g", what, pick.best,
                  best, pick.score, pick.confidence,
                  jget(ar, "confidence", NULL, NULL)->valuedouble);
        goto out;
    }
    if (!json_ints_eq(jget(ar, "tokens", NULL, NULL), tok[best], lens[best])) {
        test_fail(t, __FILE__, __LINE__, "%s: tokens of the winner differ", what);
        goto out;
    }
    char *text = NULL;
    if (units_detokenize(units, UNITS_STYLE_BPE, tok[best], lens[best], &text, &err) ||
        strcmp(text, jget(ar, "text", NULL, NULL)->valuestring) != 0) {
        test_fail(t, __FILE__, __LINE__, "%s: text \"%s\"", what, text ? text : err.msg);
        hark_free(text);
        goto out;
    }
    hark_free(text);
    if (ftok && rtok) {
        /* tokens_confidence from the decoder's per-token log-probs; and the float32 sums */
        int ld = (int)ftok->shape[1];
        const float *fr = (const float *)ftok->data + (size_t)best * ld;
        const float *rr = (const float *)rtok->data + (size_t)best * ld;
        double tc[512];
        rescore_token_confidence(fr, rr, lens[best], 0.3, tc);
        const cJSON *wtc = jget(ar, "tokens_confidence", NULL, NULL);
        for (int j = 0; j < lens[best]; j++) {
            if (tc[j] != cJSON_GetArrayItem(wtc, j)->valuedouble) {
                test_fail(t, __FILE__, __LINE__, "%s: token confidence %d %.17g vs %.17g", what, j,
                          tc[j], cJSON_GetArrayItem(wtc, j)->valuedouble);
                goto out;
            }
        }
    }
    ok = 1;
out:
    for (int i = 0; i < n; i++)
        free(tok[i]);
    return ok;
}

TEST(search_golden_rescoring)
{
    NEED_SHARED(GSET "/results.json");
    cJSON *res = load_results();
    units_t *units = load_units();
    CHECK(res && units);
    int checked = 0;
    for (int k = 0; k < N_UTTS; k++) {
        /* full context: CTC scores from our own prefix beam search */
        npy_array_t lp, ft, rt;
        CHECK_OK(load_logp(UTTS[k], &lp));
        CHECK_OK(load_tok_logp(UTTS[k], "full_rescoring_fwd", &ft));
        CHECK_OK(load_tok_logp(UTTS[k], "full_rescoring_rev", &rt));
        ctc_nbest_t nb;
        CHECK_OK(
            ctc_prefix_beam_search(lp.data, (int)lp.shape[0], (int)lp.shape[1], 10, 0, &nb, NULL));
        const cJSON *ar = jget(res, UTTS[k], "full", "attention_rescoring");
        const cJSON *cands = jget(ar, "candidates", NULL, NULL);
        CHECK(cJSON_GetArraySize(cands) == nb.n);
        for (int i = 0; i < nb.n; i++)
            CHECK(json_ints_eq(jget(cJSON_GetArrayItem(cands, i), "tokens", NULL, NULL),
                               nb.tokens[i], nb.lens[i]));
        char what[128];
        snprintf(what, sizeof what, "%s full", UTTS[k]);
        if (!check_rescore(t, ar, nb.scores, units, what, &ft, &rt))
            return;
        /* times of the winner: its prefix-beam times */
        CHECK(json_ints_eq(jget(ar, "times", NULL, NULL),
                           nb.times[jget(ar, "best_index", NULL, NULL)->valueint],
                           nb.lens[jget(ar, "best_index", NULL, NULL)->valueint]));
        checked++;
        ctc_nbest_free(&nb);
        npy_free(&lp);
        npy_free(&ft);
        npy_free(&rt);
        /* streaming modes: only candidates are stored; use their CTC prefix scores */
        const char *modes[] = {"stream_chunk16_left-1", "stream_chunk16_left4"};
        for (int m = 0; m < 2; m++) {
            const cJSON *sar = jget(res, UTTS[k], modes[m], "attention_rescoring");
            const cJSON *sc = jget(sar, "candidates", NULL, NULL);
            if (!sc)
                continue;
            double ctc[64];
            int n = cJSON_GetArraySize(sc);
            CHECK(n <= 64);
            for (int i = 0; i < n; i++)
                ctc[i] =
                    jget(cJSON_GetArrayItem(sc, i), "ctc_prefix_score", NULL, NULL)->valuedouble;
            snprintf(what, sizeof what, "%s %s", UTTS[k], modes[m]);
            if (!check_rescore(t, sar, ctc, units, what, NULL, NULL))
                return;
            checked++;
        }
    }
    fprintf(stderr,
            "    rescoring: %d (utterance, mode) pairs: best_index, combined, final, "
            "confidence bit-identical\n",
            checked);
    units_destroy(units);
    cJSON_Delete(res);
}

/* ---- synthetic ------------------------------------------------------------------------------- */

/* Log-probs that put (almost) all mass on one token per frame. */
static void one_hot(float *logp, const int *seq, int T, int V)
{
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++)
            logp[t * V + v] = v == seq[t] ? -0.01f : -8.0f;
}

TEST(search_synthetic_known)
{
    enum { V = 5 };
    float logp[16 * V];
    ctc_nbest_t nb;
    hark_err_t err = {0};
    /* all blank -> one empty hypothesis */
    int blanks[6] = {0, 0, 0, 0, 0, 0};
    one_hot(logp, blanks, 6, V);
    CHECK_OK(ctc_greedy_search(logp, 6, V, 0, &nb, &err));
    CHECK(nb.n == 1 && nb.lens[0] == 0);
    ctc_nbest_free(&nb);
    CHECK_OK(ctc_prefix_beam_search(logp, 6, V, 4, 0, &nb, &err));
    CHECK(nb.n == 4 && nb.lens[0] == 0);
    ctc_nbest_free(&nb);
    /* repeats separated by blank are two tokens, unseparated repeats one */
    int seq[9] = {2, 2, 0, 2, 3, 3, 0, 0, 4};
    one_hot(logp, seq, 9, V);
    int want[4] = {2, 2, 3, 4}, want_gt[4] = {0, 3, 4, 8};
    CHECK_OK(ctc_greedy_search(logp, 9, V, 0, &nb, &err));
    CHECK(nb.lens[0] == 4 && memcmp(nb.tokens[0], want, sizeof want) == 0);
    CHECK(memcmp(nb.times[0], want_gt, sizeof want_gt) == 0);
    ctc_nbest_free(&nb);
    CHECK_OK(ctc_prefix_beam_search(logp, 9, V, 3, 0, &nb, &err));
    CHECK(nb.lens[0] == 4 && memcmp(nb.tokens[0], want, sizeof want) == 0);
    /* WeNet's Viterbi times: a run's time moves to its last frame while it continues */
    int want_bt[4] = {1, 3, 5, 8};
    CHECKF(memcmp(nb.times[0], want_bt, sizeof want_bt) == 0, "times %d %d %d %d", nb.times[0][0],
           nb.times[0][1], nb.times[0][2], nb.times[0][3]);
    ctc_nbest_free(&nb);
    /* a blank id other than 0 */
    int seq4[5] = {1, 4, 4, 2, 4};
    one_hot(logp, seq4, 5, V);
    CHECK_OK(ctc_greedy_search(logp, 5, V, 4, &nb, &err));
    CHECK(nb.lens[0] == 2 && nb.tokens[0][0] == 1 && nb.tokens[0][1] == 2);
    ctc_nbest_free(&nb);
    CHECK_OK(ctc_prefix_beam_search(logp, 5, V, 2, 4, &nb, &err));
    CHECK(nb.lens[0] == 2 && nb.tokens[0][0] == 1 && nb.tokens[0][1] == 2);
    ctc_nbest_free(&nb);
}

TEST(search_beam1_equals_greedy)
{
    unsigned seed = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int T = 1 + (int)(test_rand(&seed) % 60), V = 2 + (int)(test_rand(&seed) % 40);
        float *logp = malloc(sizeof(float) * T * V);
        random_logp(logp, T, V, &seed, 3.0f + (float)(trial % 5));
        ctc_nbest_t g, b;
        CHECK_OK(ctc_greedy_search(logp, T, V, 0, &g, NULL));
        CHECK_OK(ctc_prefix_beam_search(logp, T, V, 1, 0, &b, NULL));
        CHECK(b.n == 1 && b.lens[0] == g.lens[0]);
        CHECK(memcmp(b.tokens[0], g.tokens[0], sizeof(int) * g.lens[0]) == 0);
        /* the beam-1 score is that of the single best path's prefix (>= the path itself) */
        CHECK(b.scores[0] >= g.scores[0] - 1e-9);
        ctc_nbest_free(&g);
        ctc_nbest_free(&b);
        free(logp);
    }
}

/* With a beam wider than every possible prefix there is no pruning: each score is the exact
 * prefix probability summed over all paths, and the n-best is sorted. */
TEST(search_beam_exact_small)
{
    unsigned seed = 99;
    for (int trial = 0; trial < 30; trial++) {
        int T = 2 + trial % 3, V = 2 + (trial / 3) % 3;
        float logp[6 * 4];
        random_logp(logp, T, V, &seed, 2.0f);
        ctc_nbest_t nb;
        CHECK_OK(ctc_prefix_beam_search(logp, T, V, CTC_MAX_BEAM, 0, &nb, NULL));
        CHECK(nb.n >= 1);
        for (int i = 0; i < nb.n; i++) {
            double ex = exact_prefix_logp(logp, T, V, 0, nb.tokens[i], nb.lens[i]);
            CHECKF(ex == nb.scores[i] || fabs(ex - nb.scores[i]) < 1e-9,
                   "T=%d V=%d hyp %d: %.12f vs exact %.12f", T, V, i, nb.scores[i], ex);
            if (i > 0)
                CHECK(nb.scores[i] <= nb.scores[i - 1]);
            /* impossible prefixes (score -inf) have no Viterbi path, hence no times */
            for (int j = 0; j < nb.lens[i] && nb.scores[i] > -INFINITY; j++)
                CHECK(nb.times[i][j] >= 0 && nb.times[i][j] < T &&
                      (j == 0 || nb.times[i][j] > nb.times[i][j - 1]));
        }
        ctc_nbest_free(&nb);
    }
}

TEST(search_bad_input)
{
    ctc_nbest_t nb;
    hark_err_t err = {0};
    float logp[8] = {0};
    /* T = 0: one empty hypothesis with score 0, as WeNet */
    CHECK_OK(ctc_greedy_search(NULL, 0, 4, 0, &nb, &err));
    CHECK(nb.n == 1 && nb.lens[0] == 0 && nb.scores[0] == 0.0);
    ctc_nbest_free(&nb);
    CHECK_OK(ctc_prefix_beam_search(NULL, 0, 4, 10, 0, &nb, &err));
    CHECK(nb.n == 1 && nb.lens[0] == 0 && nb.scores[0] == 0.0);
    ctc_nbest_free(&nb);
    ctc_nbest_free(&nb); /* twice is fine */
    ctc_nbest_free(NULL);
    /* beam < 1, blank out of range, bad shapes */
    CHECK(ctc_prefix_beam_search(logp, 2, 4, 0, 0, &nb, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "beam"));
    CHECK(nb.n == 0 && nb.mem_ == NULL);
    CHECK(ctc_prefix_beam_search(logp, 2, 4, CTC_MAX_BEAM + 1, 0, &nb, &err) == HARK_ERR_TOO_LARGE);
    CHECK(ctc_prefix_beam_search(logp, 2, 4, 3, 4, &nb, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "blank"));
    CHECK(ctc_greedy_search(logp, -1, 4, 0, &nb, &err) == HARK_ERR_INVALID_ARG);
    CHECK(ctc_greedy_search(logp, 2, 0, 0, &nb, &err) == HARK_ERR_INVALID_ARG);
    CHECK(ctc_greedy_search(NULL, 2, 4, 0, &nb, &err) == HARK_ERR_INVALID_ARG);
    ctc_beam_t *b = NULL;
    CHECK(ctc_beam_create(4, 0, 0, &b, &err) == HARK_ERR_INVALID_ARG && b == NULL);
    ctc_beam_destroy(NULL);
    /* beam wider than V: top-k takes all V tokens */
    CHECK_OK(ctc_prefix_beam_search(logp, 2, 4, 10, 0, &nb, &err));
    CHECK(nb.n >= 1 && nb.n <= 10);
    ctc_nbest_free(&nb);

    /* rescoring */
    double ctc[2] = {-1.0, -2.0};
    float fwd[2] = {-3.0f, -1.0f};
    int lens[2] = {1, 2}, badlens[2] = {1, -1};
    rescore_pick_t pick;
    CHECK(rescore_select(ctc, fwd, NULL, lens, 0, 0.5, 0.3, NULL, NULL, NULL, &pick, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(rescore_select(ctc, fwd, NULL, badlens, 2, 0.5, 0.3, NULL, NULL, NULL, &pick, &err) ==
          HARK_ERR_INVALID_ARG);
    /* without a right decoder the combined score is fwd itself */
    float comb[2];
    CHECK_OK(rescore_select(ctc, fwd, NULL, lens, 2, 0.5, 0.3, comb, NULL, NULL, &pick, &err));
    CHECK(comb[0] == -3.0f && comb[1] == -1.0f && pick.best == 1 && pick.score == -2.0f);
    CHECK(pick.confidence == exp((double)(-1.0f / 3.0f)));
    /* ties: the first maximum wins */
    float fwd2[2] = {-1.5f, -2.0f};
    CHECK_OK(rescore_select(ctc, fwd2, NULL, lens, 2, 0.5, 0.0, NULL, NULL, NULL, &pick, &err));
    CHECK(pick.best == 0 && pick.score == -2.0f);
    double ctc2[2] = {-2.0, -1.0};
    CHECK_OK(rescore_select(ctc2, fwd2, NULL, lens, 2, 0.5, 0.0, NULL, NULL, NULL, &pick, &err));
    CHECK(pick.best == 0);
}

static const char *write_file(test_ctx_t *t, const char *name, const char *text)
{
    static char path[8][512];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, 512, "%s/%s", test_tmpdir(t), name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

TEST(search_units)
{
    hark_err_t err = {0};
    units_t *u = NULL;
    const char *bpe = write_file(t, "bpe.txt",
                                 "<blank> 0\n<unk> 1\n\xe2\x96\x81 2\n\xe2\x96\x81HELLO 3\r\n"
                                 "\xe2\x96\x81WOR 4\nLD 5\n'S 6\n\n<sos/eos> 7\n");
    CHECKF(units_load(bpe, &u, &err) == HARK_OK, "%s", err.msg);
    CHECK(units_count(u) == 8 && units_guess_style(u) == UNITS_STYLE_BPE);
    CHECK(strcmp(units_token(u, 3), "\xe2\x96\x81HELLO") == 0 && units_token(u, 8) == NULL);
    CHECK(units_token(u, -1) == NULL && units_find(u, "LD") == 5 && units_find(u, "X") == -1);
    char *s = NULL;
    int ids[] = {2, 3, 4, 5, 6, 2};
    CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, ids, 6, &s, &err));
    CHECKF(strcmp(s, "HELLO WORLD'S") == 0, "\"%s\"", s);
    hark_free(s);
    int ids2[] = {4, 1, 2, 2, 5};
    CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, ids2, 5, &s, &err));
    CHECKF(strcmp(s, "WOR<unk>  LD") == 0, "\"%s\"", s); /* inner spaces are kept */
    hark_free(s);
    CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, ids, 0, &s, &err));
    CHECK(strcmp(s, "") == 0);
    hark_free(s);
    int only_space[] = {2, 2};
    CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, only_space, 2, &s, &err));
    CHECK(strcmp(s, "") == 0);
    hark_free(s);
    CHECK_OK(units_detokenize(u, UNITS_STYLE_CHAR, ids, 3, &s, &err));
    CHECK(strcmp(s, "\xe2\x96\x81\xe2\x96\x81HELLO\xe2\x96\x81WOR") == 0);
    hark_free(s);
    int badid[] = {3, 8};
    CHECK(units_detokenize(u, UNITS_STYLE_BPE, badid, 2, &s, &err) == HARK_ERR_INVALID_ARG);
    CHECK(s == NULL && strstr(err.msg, "position 1"));
    CHECK_OK(units_check_vocab(u, 8, &err));
    CHECK(units_check_vocab(u, 5002, &err) == HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "8") && strstr(err.msg, "5002"), "%s", err.msg);
    units_destroy(u);
    units_destroy(NULL);

    /* Chinese characters: joined without spaces; not stripped */
    const char *ch = write_file(
        t, "char.txt", "<blank> 0\n<unk> 1\n\xe4\xbd\xa0 2\n\xe5\xa5\xbd 3\n<sos/eos> 4\n");
    CHECK_OK(units_load(ch, &u, &err));
    CHECK(units_guess_style(u) == UNITS_STYLE_CHAR);
    int cid[] = {2, 3, 2};
    CHECK_OK(units_detokenize(u, UNITS_STYLE_CHAR, cid, 3, &s, &err));
    CHECK(strcmp(s, "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xbd\xa0") == 0);
    hark_free(s);
    units_destroy(u);

    /* errors name the file and line */
    u = NULL;
    CHECK(units_load(write_file(t, "gap.txt", "<blank> 0\na 1\nb 3\n"), &u, &err) ==
          HARK_ERR_FORMAT);
    CHECKF(u == NULL && strstr(err.msg, "gap.txt:3") && strstr(err.msg, "expected 2"), "%s",
           err.msg);
    CHECK(units_load(write_file(t, "one.txt", "<blank> 0\nlonely\n"), &u, &err) == HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "one.txt:2") && strstr(err.msg, "one field"), "%s", err.msg);
    CHECK(units_load(write_file(t, "three.txt", "<blank> 0 9\n"), &u, &err) == HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "three.txt:1") && strstr(err.msg, "more than two"), "%s", err.msg);
    CHECK(units_load(write_file(t, "nan.txt", "<blank> zero\n"), &u, &err) == HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "nan.txt:1") && strstr(err.msg, "not an integer"), "%s", err.msg);
    CHECK(units_load(write_file(t, "empty.txt", "\n\n"), &u, &err) == HARK_ERR_FORMAT);
    CHECK(strstr(err.msg, "no units"));
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.txt", test_tmpdir(t));
    CHECK(units_load(missing, &u, &err) == HARK_ERR_IO && strstr(err.msg, "nope.txt"));
}

/* Python's str.strip() removes Unicode whitespace too (U+3000 here, U+00A0, ...). */
TEST(search_units_strip_unicode)
{
    hark_err_t err = {0};
    units_t *u = NULL;
    CHECK_OK(units_load(write_file(t, "u.txt", "<blank> 0\n\xe3\x80\x80 1\n\xc2\xa0 2\nA 3\n"), &u,
                        &err));
    int ids[] = {1, 2, 3, 1, 3, 2};
    char *s = NULL;
    CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, ids, 6, &s, &err));
    CHECKF(strcmp(s, "A\xe3\x80\x80"
                     "A") == 0,
           "\"%s\"", s);
    hark_free(s);
    units_destroy(u);
}

/* ---- out of memory --------------------------------------------------------------------------- */

static int same_nbest(const ctc_nbest_t *a, const ctc_nbest_t *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->lens[i] != b->lens[i] || a->scores[i] != b->scores[i] ||
            memcmp(a->tokens[i], b->tokens[i], sizeof(int) * a->lens[i]) ||
            memcmp(a->times[i], b->times[i], sizeof(int) * a->lens[i]))
            return 0;
    return 1;
}

TEST(search_oom_sweep)
{
    /* long enough that the trie, its hash and the time cells grow and compact */
    enum { T = 1200, V = 30, BEAM = 8 };
    float *logp = malloc(sizeof(float) * T * V);
    unsigned seed = 7;
    random_logp(logp, T, V, &seed, 4.0f);
    ctc_nbest_t ref, nb;
    CHECK_OK(ctc_prefix_beam_search(logp, T, V, BEAM, 0, &ref, NULL));
    int failures = 0;
    for (long n = 1;; n++) {
        alloc_fail_after(n);
        hark_err_t err = {0};
        int rc = ctc_prefix_beam_search(logp, T, V, BEAM, 0, &nb, &err);
        alloc_fail_reset();
        if (rc == HARK_OK) {
            CHECK(same_nbest(&ref, &nb));
            ctc_nbest_free(&nb);
            break;
        }
        CHECK(rc == HARK_ERR_NOMEM && nb.mem_ == NULL && strstr(err.msg, "memory"));
        failures++;
        CHECK(n < 1000);
    }
    CHECK(failures > 10);

    /* streaming: a failed advance leaves the state as it was; retrying completes it */
    ctc_beam_t *b = NULL;
    CHECK_OK(ctc_beam_create(V, BEAM, 0, &b, NULL));
    int t0 = 0, fails = 0;
    for (long n = 1; t0 < T; n = n % 3 + 1) {
        CHECK(fails < 100000);
        int step = 100 < T - t0 ? 100 : T - t0;
        alloc_fail_after(n);
        int rc = ctc_beam_advance(b, logp + (size_t)t0 * V, step, NULL);
        alloc_fail_reset();
        if (rc == HARK_OK) {
            t0 += step;
            continue;
        }
        CHECK(rc == HARK_ERR_NOMEM);
        fails++;
        /* frames before the failing one were consumed: continue from there */
        t0 = ctc_beam_frames(b);
    }
    CHECK_OK(ctc_beam_nbest(b, &nb, NULL));
    CHECK(same_nbest(&ref, &nb));
    ctc_nbest_free(&nb);
    ctc_beam_destroy(b);
    fprintf(stderr, "    oom: %d one-shot failures, %d streaming failures recovered\n", failures,
            fails);

    /* greedy, units, detokenize */
    for (long n = 1;; n++) {
        alloc_fail_after(n);
        int rc = ctc_greedy_search(logp, T, V, 0, &nb, NULL);
        alloc_fail_reset();
        if (rc == HARK_OK) {
            ctc_nbest_free(&nb);
            break;
        }
        CHECK(rc == HARK_ERR_NOMEM);
    }
    const char *p = write_file(t, "u.txt",
                               "<blank> 0\n\xe2\x96\x81"
                               "A 1\nB 2\n");
    for (long n = 1;; n++) {
        units_t *u = NULL;
        alloc_fail_after(n);
        int rc = units_load(p, &u, NULL);
        alloc_fail_reset();
        if (rc == HARK_OK) {
            int ids[] = {1, 2, 1};
            char *s = NULL;
            alloc_fail_after(1);
            CHECK(units_detokenize(u, UNITS_STYLE_BPE, ids, 3, &s, NULL) == HARK_ERR_NOMEM);
            alloc_fail_reset();
            CHECK_OK(units_detokenize(u, UNITS_STYLE_BPE, ids, 3, &s, NULL));
            CHECK(strcmp(s, "AB A") == 0);
            hark_free(s);
            units_destroy(u);
            break;
        }
        CHECK(rc == HARK_ERR_NOMEM && u == NULL);
    }
    ctc_nbest_free(&ref);
    free(logp);
}

/* ---- frames given as their top entries (streams on the GPU copy only these) -------------------
 * Fed each frame's top K (K >= beam, ctc_row_topk's, some rows with ties), in pieces, the search
 * gives exactly the n-best that the whole rows give; greedy from the first entries the same argmax
 * and score as ctc_argmax_rows. */
TEST(search_topk_rows_equal_dense)
{
    unsigned seed = 4242;
    hark_err_t err = {0};
    for (int trial = 0; trial < 60; trial++) {
        int T = 1 + (int)(test_rand(&seed) % 50), V = 2 + (int)(test_rand(&seed) % 60);
        int beam = 1 + (int)(test_rand(&seed) % 12), kb = beam < V ? beam : V;
        int K = kb + (int)(test_rand(&seed) % 4);
        K = K < V ? K : V;
        float *logp = malloc(sizeof(float) * T * V), *val = malloc(sizeof(float) * T * K);
        int *idx = malloc(sizeof(int) * T * K), *a1 = malloc(sizeof(int) * T),
            *a2 = malloc(sizeof(int) * T);
        random_logp(logp, T, V, &seed, 3.0f);
        for (int f = 0; f < T; f += 3) /* exact ties, lower id first */
            logp[f * V + V - 1] = logp[f * V];
        for (int f = 0; f < T; f++)
            ctc_row_topk(logp + (size_t)f * V, V, K, idx + (size_t)f * K, val + (size_t)f * K);
        ctc_beam_t *bd = NULL, *bt = NULL;
        CHECK_OK(ctc_beam_create(V, beam, 0, &bd, &err));
        CHECK_OK(ctc_beam_create(V, beam, 0, &bt, &err));
        for (int t0 = 0; t0 < T;) {
            int n = 1 + (int)(test_rand(&seed) % 7);
            n = n < T - t0 ? n : T - t0;
            CHECK_OK(ctc_beam_advance(bd, logp + (size_t)t0 * V, n, &err));
            CHECK_OK(
                ctc_beam_advance_topk(bt, idx + (size_t)t0 * K, val + (size_t)t0 * K, K, n, &err));
            t0 += n;
        }
        ctc_nbest_t nd, nt;
        CHECK_OK(ctc_beam_nbest(bd, &nd, &err));
        CHECK_OK(ctc_beam_nbest(bt, &nt, &err));
        CHECKF(same_nbest(&nd, &nt), "trial %d (T %d V %d beam %d K %d): n-best differ", trial, T,
               V, beam, K);
        double s1 = 0, s2 = 0;
        ctc_argmax_rows(logp, T, V, a1, &s1);
        ctc_argmax_topk(idx, val, K, T, a2, &s2);
        CHECK(memcmp(a1, a2, sizeof(int) * T) == 0 && s1 == s2);
        if (trial == 0) { /* fewer entries than the beam takes, an id out of range */
            CHECK_EQ_INT(ctc_beam_advance_topk(bt, idx, val, kb - 1, 1, &err),
                         HARK_ERR_INVALID_ARG);
            int bad[64];
            float bv[64] = {0};
            for (int i = 0; i < K; i++)
                bad[i] = i == K - 1 ? V : 0;
            CHECK_EQ_INT(ctc_beam_advance_topk(bt, bad, bv, K, 1, &err), HARK_ERR_INVALID_ARG);
        }
        ctc_nbest_free(&nd);
        ctc_nbest_free(&nt);
        ctc_beam_destroy(bd);
        ctc_beam_destroy(bt);
        free(logp), free(val), free(idx), free(a1), free(a2);
    }
}
