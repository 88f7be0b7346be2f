/* fast_beam_search (icefall_fast_beam.c) against icefall's own fast_beam_search_one_best run by
 * the real k2 (tools/icefall_fast_beam_reference.py: icefall's T1 golden model and generated
 * Conformers, several beam / max_contexts / max_states, pruning that bites included): tokens,
 * timestamps and the best path's score, on icefall's encoder output and end to end. Those need k2
 * ($HARK_K2_PYTHONPATH: where `import k2` finds a k2 built from source, docs/model-format.md)
 * and an icefall tree ($HARK_ICEFALL_SRC), or the script's outputs made elsewhere
 * ($HARK_FAST_BEAM_REF/<set>/ref.json), and skip otherwise. Without k2: the search against an
 * exhaustive one (no pruning), the greedy search it becomes with max_states 2 and max_contexts 1,
 * what beam 0 and max_states 1 must give, edge lengths and the refusals of bad options. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"
#include "ops/ops.h"
#include "support/golden_icefall.h"
#include "support/icefall_gen.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* |hark - k2| of the best path's score: the same log-probs summed in the same order, but hark's
 * joiner and encoder differ from torch's in the last bits (measured below 2e-4 on T1) */
#define TOL_SCORE 2e-3
/* a lattice may differ from k2's only where hark saw a pruning decision this close (its score
 * rounding against torch's: below 4e-5 on a T1 path) */
#define TOL_MARGIN 1e-4

/* The settings of the comparisons (the script's --settings): pretrained.py's defaults, decode.py's,
 * pruning that bites (1,2,3; 0.5,2,4; the states 1 and 2 that end with no path), a wide one. */
#define FB_SETTINGS "4,4,8/1,2,3/0.5,2,4/4,1,2/4,4,1/20,8,64/8,16,32/2,3,5"

/* ---- a small model of vocab V for the k2-independent tests --------------------------------- */

/* conformer_random_ckpt.py with vocab V and the sizes below, converted into dir/name */
static int tiny_model(const char *dir, const char *name, int V, int cs, unsigned seed,
                      double blank_bias, const char *conv_flags, char *log, size_t nlog)
{
    const char *py = test_python("torch, numpy");
    if (!py) {
        snprintf(log, nlog, "no python3 with torch and numpy");
        return -1;
    }
    char tok[1024], cmd[4096];
    snprintf(tok, sizeof tok, "%s/%s-tokens.txt", dir, name);
    FILE *f = fopen(tok, "w");
    if (!f)
        return -1;
    fprintf(f, "<blk> 0\n");
    for (int i = 1; i < V; i++)
        fprintf(f, "\xe2\x96\x81t%d %d\n", i, i);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "(%s tests/model/icefall/conformer_random_ckpt.py '%s/%s.pt' --seed %u "
             "--encoder-dim 16 --nhead 2 --dim-feedforward 24 --num-encoder-layers 1 "
             "--cnn-module-kernel 3 --decoder-dim 12 --joiner-dim 20 --context-size %d "
             "--vocab-size %d --blank-bias %g && %s tools/convert_icefall.py --recipe "
             "pruned_transducer_stateless3 --checkpoint '%s/%s.pt' --tokens '%s' --output "
             "'%s/%s' --context-size %d %s) > '%s/%s.log' 2>&1",
             py, dir, name, seed, cs, V, blank_bias, py, dir, name, tok, dir, name, cs,
             conv_flags ? conv_flags : "", dir, name);
    if (system(cmd) == 0)
        return 0;
    snprintf(cmd, sizeof cmd, "%s/%s.log", dir, name);
    f = fopen(cmd, "r");
    size_t k = f ? fread(log, 1, nlog - 1, f) : 0;
    log[k] = 0;
    if (f)
        fclose(f);
    return -1;
}

static icefall_model_t *load_model(const char *dir, const char *name)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    icefall_model_t *m = NULL;
    hark_err_t err = {0};
    return icefall_load(path, 1, &m, &err) ? NULL : m;
}

/* random encoder_proj rows (T, joiner_dim) */
static float *random_ep(const icefall_model_t *m, int T, unsigned seed, float scale)
{
    const int J = icefall_config(m)->joiner_dim;
    float *ep = hark_malloc(sizeof(float) * (size_t)(T > 0 ? T : 1) * J);
    for (size_t i = 0; i < (size_t)T * J; i++)
        ep[i] = scale * test_randf(&seed);
    return ep;
}

/* log-softmax of the joiner for one context (cs symbols) at frame row ep_t -> lp (V) */
static void lp_of(const icefall_model_t *m, const int *ctx, const float *ep_t, float *lp)
{
    const icefall_config_t *c = icefall_config(m);
    float dec[256], dp[256], hid[256];
    icefall_decoder(m, ctx, 1, dec);
    icefall_decoder_proj(m, dec, 1, dp);
    icefall_joiner(m, ep_t, dp, 1, hid, lp);
    log_softmax_ref(lp, lp, 1, c->vocab);
}

/* ---- no pruning: the best of every alignment ------------------------------------------------ */

typedef struct {
    const icefall_model_t *m;
    const float *ep;
    int T, V, cs;
    double best, second; /* best and second-best alignment scores */
    int best_lab[64], lab[64];
} exh_t;

/* every label sequence of frames t .. T-2 (blank or a token each); ctx the current context */
static void exhaust(exh_t *x, int t, const int *ctx, double score)
{
    if (t == x->T - 1) { /* the last frame emits nothing (k2's lattice ends there) */
        if (score > x->best) {
            x->second = x->best;
            x->best = score;
            memcpy(x->best_lab, x->lab, sizeof(int) * (size_t)(x->T > 1 ? x->T - 1 : 0));
        } else if (score > x->second) {
            x->second = score;
        }
        return;
    }
    float lp[64];
    lp_of(x->m, ctx, x->ep + (size_t)t * icefall_config(x->m)->joiner_dim, lp);
    for (int y = 0; y < x->V; y++) {
        int next[8];
        memcpy(next, ctx, sizeof(int) * (size_t)x->cs);
        if (y) {
            memmove(next, next + 1, sizeof(int) * (size_t)(x->cs - 1));
            next[x->cs - 1] = y;
        }
        x->lab[t] = y;
        exhaust(x, t + 1, next, score + (double)lp[y]);
    }
}

TEST(icefall_fast_beam_exhaustive)
{
    /* beam and limits that prune nothing: k2's decoding is then the Viterbi search over
     * (context, graph state), exactly the best of all alignments (a later frame's scores depend
     * only on the context, so keeping one best path per context loses nothing) */
    char log[4000];
    const char *d = test_tmpdir(t);
    static const struct {
        int V, cs, T;
        unsigned seed;
    } cfg[] = {{5, 2, 8, 3}, {4, 3, 9, 5}, {6, 2, 7, 8}};
    for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
        char name[32];
        snprintf(name, sizeof name, "tiny%zu", c);
        if (tiny_model(d, name, cfg[c].V, cfg[c].cs, cfg[c].seed, 0, NULL, log, sizeof log)) {
            if (!test_python("torch, numpy"))
                SKIP("no python3 with torch and numpy (the test model)");
            CHECKF(0, "tiny model: %s", log);
        }
        icefall_model_t *m = load_model(d, name);
        CHECK(m != NULL);
        for (unsigned s = 0; s < 3; s++) {
            const int T = cfg[c].T;
            float *ep = random_ep(m, T, 100 + s + 10 * (unsigned)c, 2.0f);
            exh_t x = {.m = m, .ep = ep, .T = T, .V = cfg[c].V, .cs = cfg[c].cs};
            x.best = x.second = -INFINITY;
            int ctx[8] = {0};
            exhaust(&x, 0, ctx, 0.0);
            CHECKF(x.best - x.second > 1e-3, "config %zu seed %u: a near tie (%g)", c, s,
                   x.best - x.second);
            icefall_fast_beam_opts_t o = {.beam = 1e30, .max_contexts = 1024, .max_states = 1024};
            icefall_hyp_t h;
            hark_err_t err = {0};
            CHECK_OK(icefall_fast_beam_search(m, ep, T, &o, &h, &err));
            int want[64], wt[64], n = 0;
            for (int u = 0; u < T - 1; u++)
                if (x.best_lab[u]) {
                    want[n] = x.best_lab[u];
                    wt[n++] = u;
                }
            printf("  V %d, context %d, T %d, seed %u: %d tokens, score %.6f (exhaustive %.6f, "
                   "margin %.3g)\n",
                   cfg[c].V, cfg[c].cs, T, s, h.n, h.score, x.best, x.best - x.second);
            CHECKF(fabs(h.score - x.best) < 1e-4, "score %.9g vs exhaustive %.9g", h.score, x.best);
            CHECK_EQ_INT(h.n, n);
            for (int i = 0; i < n; i++) {
                CHECK_EQ_INT(h.tokens[i], want[i]);
                CHECK_EQ_INT(h.times[i], wt[i]);
            }
            icefall_hyp_free(&h);
            hark_free(ep);
        }
        icefall_destroy(m);
    }
}

/* ---- properties that follow from k2's rules --------------------------------------------- */

#ifndef RULES_BLANK_BIAS
#define RULES_BLANK_BIAS 4
#endif

TEST(icefall_fast_beam_rules)
{
    char log[4000];
    const char *d = test_tmpdir(t);
    if (tiny_model(d, "m", 7, 2, 21, RULES_BLANK_BIAS, NULL, log, sizeof log)) {
        if (!test_python("torch, numpy"))
            SKIP("no python3 with torch and numpy (the test model)");
        CHECKF(0, "tiny model: %s", log);
    }
    icefall_model_t *m = load_model(d, "m");
    CHECK(m != NULL);
    const int J = icefall_config(m)->joiner_dim, V = 7;
    hark_err_t err = {0};
    icefall_hyp_t h;
    int n_greedy_total = 0, n_empty = 0;
    for (unsigned s = 0; s < 12; s++) {
        const int T = 20 + (int)s;
        float *ep = random_ep(m, T, 500 + s, 2.0f);
        /* greedy search from k2's first context [blank, blank] (icefall's greedy starts from
         * [-1, blank]): argmax per frame, first index on ties */
        int ctx[2] = {0, 0}, gt[64], gtm[64], gn = 0, last_tok = 0;
        double blank_path = 0; /* the all-blank path from [blank, blank], frames 0 .. T-2 */
        for (int u = 0; u < T; u++) {
            float lp[64];
            lp_of(m, ctx, ep + (size_t)u * J, lp);
            int y = 0;
            for (int v = 1; v < V; v++)
                if (lp[v] > lp[y])
                    y = v;
            if (u == T - 1) {
                last_tok = y;
                break;
            }
            if (y) {
                gt[gn] = y;
                gtm[gn++] = u;
                ctx[0] = ctx[1];
                ctx[1] = y;
            }
        }
        int z[2] = {0, 0};
        for (int u = 0; u < T - 1; u++) {
            float lp[64];
            lp_of(m, z, ep + (size_t)u * J, lp);
            blank_path += lp[0];
        }
        /* max_states 2, max_contexts 1: the best destination's context alone survives, i.e.
         * greedy search; a token on the last frame leaves no final state (k2: no path) */
        icefall_fast_beam_opts_t o = {.beam = 1e9, .max_contexts = 1, .max_states = 2};
        CHECK_OK(icefall_fast_beam_search(m, ep, T, &o, &h, &err));
        if (last_tok) {
            CHECKF(h.n == 0 && isinf(h.score) && h.score < 0,
                   "seed %u: greedy emits on the last frame, so no path (%d tokens, score %g)", s,
                   h.n, h.score);
            n_empty++;
        } else {
            CHECK_EQ_INT(h.n, gn);
            for (int i = 0; i < gn; i++) {
                CHECK_EQ_INT(h.tokens[i], gt[i]);
                CHECK_EQ_INT(h.times[i], gtm[i]);
            }
            n_greedy_total += gn;
        }
        icefall_hyp_free(&h);
        /* max_states 1: (ctx, 0) always outranks its final twin (ctx, 1) (a score at least as
         * high, the lower key), so no final state survives the last frame: never a path */
        o = (icefall_fast_beam_opts_t){.beam = 4, .max_contexts = 4, .max_states = 1};
        CHECK_OK(icefall_fast_beam_search(m, ep, T, &o, &h, &err));
        CHECK(h.n == 0 && isinf(h.score) && h.score < 0);
        icefall_hyp_free(&h);
        /* beam 0: a token arc would need a log-prob of 0; only blanks, the path from [blank,
         * blank] */
        o = (icefall_fast_beam_opts_t){.beam = 0, .max_contexts = 4, .max_states = 8};
        CHECK_OK(icefall_fast_beam_search(m, ep, T, &o, &h, &err));
        CHECK_EQ_INT(h.n, 0);
        CHECKF(fabs(h.score - blank_path) < 1e-9, "beam 0: score %.9g, all blanks %.9g", h.score,
               blank_path);
        icefall_hyp_free(&h);
        hark_free(ep);
    }
    printf("  greedy-equivalent: %d tokens over the runs with a path, %d runs without\n",
           n_greedy_total, n_empty);
    CHECK(n_greedy_total > 20); /* the model emits: the comparison means something */
    /* lengths 0 and 1: no tokens; T 1, nothing pruned, ends at the first state (score 0) */
    float *ep = random_ep(m, 1, 9, 2.0f);
    CHECK_OK(icefall_fast_beam_search(m, ep, 0, NULL, &h, &err));
    CHECK(h.n == 0 && h.score == 0);
    icefall_hyp_free(&h);
    icefall_fast_beam_opts_t o = {.beam = 1e9, .max_contexts = 4, .max_states = 64};
    CHECK_OK(icefall_fast_beam_search(m, ep, 1, &o, &h, &err));
    CHECK(h.n == 0 && h.score == 0);
    icefall_hyp_free(&h);
    /* refusals */
    static const icefall_fast_beam_opts_t bad[] = {{-1, 4, 8},  {NAN, 4, 8}, {INFINITY, 4, 8},
                                                   {4, 0, 8},   {4, 4, 0},   {4, 1025, 8},
                                                   {4, 4, 1025}};
    static const char *const what[] = {"beam",       "beam",         "beam",      "max_contexts",
                                       "max_states", "max_contexts", "max_states"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(icefall_fast_beam_search(m, ep, 1, &bad[i], &h, &err), HARK_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, what[i]) != NULL, "%s", err.msg);
        CHECK(h.tokens == NULL && h.n == 0);
    }
    hark_free(ep);
    /* the model's defaults (model.json: the converter's --beam 4 --max-contexts 4
     * --max-states 8) */
    const icefall_fast_beam_opts_t *def = &icefall_config(m)->fast_beam;
    CHECK(def->beam == 4 && def->max_contexts == 4 && def->max_states == 8);
    icefall_destroy(m);
}

/* the converter's --method fast_beam_search --beam --max-contexts --max-states: model.json's
 * defaults (icefall_config) and config.pbtxt's parameters */
TEST(icefall_fast_beam_convert)
{
    char log[4000];
    const char *d = test_tmpdir(t);
    if (tiny_model(d, "m", 5, 2, 4, 2,
                   "--method fast_beam_search --beam 2.5 --max-contexts 3 --max-states 6", log,
                   sizeof log)) {
        if (!test_python("torch, numpy"))
            SKIP("no python3 with torch and numpy (the test model)");
        CHECKF(0, "tiny model: %s", log);
    }
    icefall_model_t *m = load_model(d, "m");
    CHECK(m != NULL);
    const icefall_config_t *c = icefall_config(m);
    CHECK_EQ_INT(c->method, ICEFALL_FAST_BEAM);
    CHECK(!strcmp(icefall_method_name(ICEFALL_FAST_BEAM), "fast_beam_search"));
    CHECK(c->fast_beam.beam == 2.5 && c->fast_beam.max_contexts == 3 &&
          c->fast_beam.max_states == 6);
    icefall_destroy(m);
    char path[1200], buf[8192] = "";
    snprintf(path, sizeof path, "%s/m/config.pbtxt", d);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, "key: \"decoding_method\" value { string_value: \"fast_beam_search\" }"));
    CHECK(strstr(buf, "key: \"beam\" value { string_value: \"2.5\" }"));
    CHECK(strstr(buf, "key: \"max_contexts\" value { string_value: \"3\" }"));
    CHECK(strstr(buf, "key: \"max_states\" value { string_value: \"6\" }"));
    /* model.json without the three keys (older conversions): pretrained.py's 4, 4, 8; a bad
     * one: refused by name */
    snprintf(path, sizeof path, "%s/m/1/model.json", d);
    char cmd[2600];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; j=json.load(open(p)); "
             "[j['decoding'].pop(k) for k in ('beam','max_contexts','max_states')]; "
             "json.dump(j, open(p,'w'))\" '%s'",
             path);
    CHECK_EQ_INT(system(cmd), 0);
    CHECK((m = load_model(d, "m")) != NULL);
    c = icefall_config(m);
    CHECK(c->fast_beam.beam == 4 && c->fast_beam.max_contexts == 4 && c->fast_beam.max_states == 8);
    icefall_destroy(m);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; j=json.load(open(p)); "
             "j['decoding']['max_states']=0; json.dump(j, open(p,'w'))\" '%s'",
             path);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(path, sizeof path, "%s/m", d);
    icefall_model_t *bad = NULL;
    hark_err_t err = {0};
    CHECK_EQ_INT(icefall_load(path, 1, &bad, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "decoding.max_states") != NULL, "%s", err.msg);
}

/* ---- against k2 ----------------------------------------------------------------------------- */

/* The reference set `name` (ref.json): $HARK_FAST_BEAM_REF/<name> when the script's outputs are
 * there (made elsewhere, or by an earlier run), else the script run now with `args` into
 * $HARK_FAST_BEAM_REF/<name> (filling that cache) or the test's directory; NULL with a reason
 * when neither can be (*failed: the script ran and failed). */
static const char *fb_reference(test_ctx_t *t, const char *name, const char *args, char *dir,
                                size_t ndir, const char **why, int *failed)
{
    *failed = 0;
    const char *pre = getenv("HARK_FAST_BEAM_REF");
    if (pre && *pre) {
        snprintf(dir, ndir, "%s/%s", pre, name);
        char p[1200];
        snprintf(p, sizeof p, "%s/ref.json", dir);
        if (access(p, R_OK) == 0)
            return dir;
    }
    const char *k2 = getenv("HARK_K2_PYTHONPATH"), *src = NULL;
    char shims[1024];
    if (!k2 || !*k2) {
        *why = pre && *pre ? "k2 is absent: $HARK_FAST_BEAM_REF lacks this set and "
                             "$HARK_K2_PYTHONPATH (a k2 built from source, docs/model-format.md) "
                             "is not set"
                           : "k2 is absent: $HARK_K2_PYTHONPATH (a k2 built from source, "
                             "docs/model-format.md) and $HARK_FAST_BEAM_REF are not set";
        return NULL;
    }
    if ((*why = golden_icefall_ref_missing(&src, shims, sizeof shims)))
        return NULL;
    snprintf(dir, ndir, "%s/%s", pre && *pre ? pre : test_tmpdir(t), name);
    char cmd[8000];
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && /usr/bin/python3 tools/icefall_fast_beam_reference.py "
             "--icefall-root '%s' --shims '%s' --k2-path '%s' --out '%s' --settings '%s' %s > "
             "'%s/script.log' 2>&1",
             dir, src, shims, k2, dir, FB_SETTINGS, args, dir);
    if (system(cmd) != 0) {
        static char msg[1400];
        snprintf(msg, sizeof msg, "icefall_fast_beam_reference.py failed (see %s/script.log)", dir);
        *why = msg;
        *failed = 1; /* k2 was there: a failure, not a skip */
        return NULL;
    }
    return dir;
}

/* Every utterance and setting of the reference in ref_dir, on icefall's encoder output (and the
 * first setting also end to end, hark's encoder on the utterance's fbank.npy): hark's tokens,
 * timestamps and score must be k2's. Returns the number that differ; *n_tok, *n_cmp count the
 * tokens and searches compared. */
static int compare_with_k2(test_ctx_t *t, const icefall_model_t *m, const char *ref_dir, int *n_tok,
                           int *n_cmp, int *n_lat_diff, double *max_dscore)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/ref.json", ref_dir);
    cJSON *ref = test_read_json(p);
    if (!ref) {
        test_fail(t, __FILE__, __LINE__, "%s unreadable", p);
        return -1;
    }
    const icefall_config_t *c = icefall_config(m);
    const cJSON *utts = cJSON_GetObjectItemCaseSensitive(ref, "utts"), *u;
    int bad = 0;
    hark_err_t err = {0};
    icefall_worker_t *w = NULL;
    if (icefall_worker_create(m, 12, &w, &err)) {
        test_fail(t, __FILE__, __LINE__, "worker: %s", err.msg);
        cJSON_Delete(ref);
        return -1;
    }
    cJSON_ArrayForEach(u, utts)
    {
        npy_array_t enc = {0};
        snprintf(p, sizeof p, "%s/%s/encoder_out.npy", ref_dir, u->string);
        if (npy_load_f32(p, &enc)) {
            test_fail(t, __FILE__, __LINE__, "%s", p);
            bad++;
            break;
        }
        const int T = (int)(enc.count / (size_t)c->d);
        float *ep = hark_malloc(sizeof(float) * (size_t)T * c->joiner_dim);
        icefall_encoder_proj(m, enc.data, T, ep);
        /* hark's own encoder from the same features */
        float *ep2 = NULL;
        int T2 = 0;
        npy_array_t fb = {0};
        snprintf(p, sizeof p, "%s/%s/fbank.npy", ref_dir, u->string);
        if (npy_load_f32(p, &fb) == 0) {
            {
                const int tin = (int)(fb.count / (size_t)c->feature_dim);
                float *e2 = hark_malloc(sizeof(float) * (size_t)icefall_frames_out(tin) * c->d);
                if (icefall_encode(w, fb.data, tin, tin, e2, &T2, NULL, NULL, &err) == 0) {
                    ep2 = hark_malloc(sizeof(float) * (size_t)T2 * c->joiner_dim);
                    icefall_encoder_proj(m, e2, T2, ep2);
                }
                hark_free(e2);
            }
        }
        const cJSON *r;
        int k = 0;
        cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(u, "results"))
        {
            icefall_fast_beam_opts_t o = {
                .beam = cJSON_GetObjectItemCaseSensitive(r, "beam")->valuedouble,
                .max_contexts = cJSON_GetObjectItemCaseSensitive(r, "max_contexts")->valueint,
                .max_states = cJSON_GetObjectItemCaseSensitive(r, "max_states")->valueint};
            const cJSON *tk = cJSON_GetObjectItemCaseSensitive(r, "tokens");
            const cJSON *tm = cJSON_GetObjectItemCaseSensitive(r, "timestamps");
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(r, "score");
            for (int pass = 0; pass < (ep2 && k == 0 ? 2 : 1); pass++) {
                icefall_hyp_t h;
                icefall_fast_beam_stats_t st;
                if (icefall_fast_beam_search_ex(m, pass ? ep2 : ep, pass ? T2 : T, &o, &h, &st,
                                                &err)) {
                    test_fail(t, __FILE__, __LINE__, "%s", err.msg);
                    bad++;
                    continue;
                }
                int same = golden_json_ints_equal(tk, h.tokens, h.n) &&
                           golden_json_ints_equal(tm, h.times, h.n);
                /* the lattice's size: every frame pruned to the same states and arcs */
                const long ls = cJSON_GetObjectItemCaseSensitive(r, "lattice_states")->valueint,
                           la = cJSON_GetObjectItemCaseSensitive(r, "lattice_arcs")->valueint;
                /* (a near tie at a pruning boundary may go either way under the two
                 * implementations' rounding: then the lattices may differ, not the result) */
                int lattice_same = st.states == ls && st.arcs == la;
                int lattice_ok = lattice_same || st.min_margin < TOL_MARGIN;
                double ds = cJSON_IsNull(sc) ? 0 : fabs(h.score - sc->valuedouble);
                int score_ok = cJSON_IsNull(sc)
                                   ? isinf(h.score) && h.score < 0
                                   : ds <= TOL_SCORE * fmax(1.0, fabs(sc->valuedouble));
                if (!pass && !cJSON_IsNull(sc) && ds > *max_dscore)
                    *max_dscore = ds;
                char ks[64];
                if (cJSON_IsNull(sc))
                    snprintf(ks, sizeof ks, "no path");
                else
                    snprintf(ks, sizeof ks, "%.4f", sc->valuedouble);
                printf("  %s %g/%d/%d%s: %d tokens (k2 %d), score %.4f (k2 %s), lattice %ld "
                       "states %ld arcs (k2 %ld, %ld), nearest tie %.2g%s%s\n",
                       u->string, o.beam, o.max_contexts, o.max_states, pass ? " end to end" : "",
                       h.n, cJSON_GetArraySize(tk), h.score, ks, st.states, st.arcs, ls, la,
                       st.min_margin, lattice_same ? "" : " (at a near tie)",
                       same && score_ok && lattice_ok ? "" : "  <-- DIFFERS");
                *n_lat_diff += !lattice_same;
                if (!same || !score_ok || !lattice_ok)
                    bad++;
                *n_tok += h.n;
                (*n_cmp)++;
                icefall_hyp_free(&h);
            }
            k++;
        }
        hark_free(ep);
        hark_free(ep2);
        npy_free(&enc);
        npy_free(&fb);
    }
    icefall_worker_destroy(w);
    cJSON_Delete(ref);
    return bad;
}

TEST(icefall_fast_beam_vs_k2_t1)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    const char *g = test_shared(GOLDEN_ICEFALL), *why = NULL;
    char args[1200], rdir[1200], mwhy[512];
    snprintf(args, sizeof args, "--golden '%s'", g);
    int failed = 0;
    if (!fb_reference(t, "t1", args, rdir, sizeof rdir, &why, &failed)) {
        CHECKF(!failed, "%s", why);
        SKIP(why);
    }
    const char *mdir = golden_icefall_model_dir(mwhy, sizeof mwhy);
    if (!mdir)
        SKIP(mwhy);
    char path[600];
    snprintf(path, sizeof path, "%s/m", mdir);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    CHECK_OK(icefall_load(path, 1, &m, &err));
    int n_tok = 0, n_cmp = 0, nld = 0;
    double md = 0;
    int bad = compare_with_k2(t, m, rdir, &n_tok, &n_cmp, &nld, &md);
    icefall_destroy(m);
    printf("  T1: %d comparisons, %d tokens, score max |diff| %.3g, %d lattices differ at a near "
           "tie\n",
           n_cmp, n_tok, md, nld);
    CHECKF(bad == 0, "%d of %d differ from k2", bad, n_cmp);
    CHECK(n_tok > 0);
}

TEST(icefall_fast_beam_vs_k2_generated)
{
    /* generated Conformers (conformer_random_ckpt.py; kernel 31, the only one the recipe
     * builds) on random features (x 3): vocab 500, contexts 2 and 3, blank biases that leave
     * tokens on about half the frames, so that many compete and pruning bites */
    static const struct {
        const char *name, *flags, *sizes, *conv;
    } cfgs[] = {
        {"g2", "--seed 3 --blank-bias 16 --cnn-module-kernel 31", "", ""},
        {"g3", "--seed 3 --blank-bias 13 --cnn-module-kernel 31 --context-size 3",
         "--context-size 3", "--context-size 3"},
    };
    const char *d = test_tmpdir(t);
    int n_tok = 0, n_cmp = 0, bad = 0, nld = 0;
    double md = 0;
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        char log[4000];
        if (icefall_gen_conformer(d, cfgs[c].name, cfgs[c].flags, cfgs[c].conv, log, sizeof log)) {
            if (!test_python("torch, numpy"))
                SKIP("no python3 with torch and numpy (the generated models)");
            CHECKF(0, "generated model: %s", log);
        }
        /* the script builds icefall's model with the checkpoint maker's sizes */
        char args[2000], rdir[1200];
        const char *why = NULL;
        snprintf(args, sizeof args,
                 "--checkpoint '%s/%s.pt' %s --random-fbank 331:1:3 --random-fbank 97:2:3 "
                 "--random-fbank 610:3:3",
                 d, cfgs[c].name, cfgs[c].sizes);
        int failed = 0;
        if (!fb_reference(t, cfgs[c].name, args, rdir, sizeof rdir, &why, &failed)) {
            CHECKF(!failed, "%s", why);
            SKIP(why);
        }
        icefall_model_t *m = load_model(d, cfgs[c].name);
        CHECK(m != NULL);
        bad += compare_with_k2(t, m, rdir, &n_tok, &n_cmp, &nld, &md);
        icefall_destroy(m);
    }
    printf("  generated: %d comparisons, %d tokens, score max |diff| %.3g, %d lattices differ at a "
           "near tie\n",
           n_cmp, n_tok, md, nld);
    CHECKF(bad == 0, "%d of %d differ from k2", bad, n_cmp);
    CHECK(n_tok > 0);
}
