/* Tests for src/model/icefall/ (icefall.h) against icefall's T1 goldens
 * (../shared/data/golden/icefall/T1, README there): stage by stage — fbank from the waveform,
 * the encoder embed, positional encoding, layer 0's modules and every layer's output (debug
 * utterance), the encoder output and its projection for every utterance given the golden fbank,
 * the decoder and joiner on the golden contexts, greedy and modified-beam tokens, timestamps and
 * text given the golden encoder output and end to end from the waveform, the padded batch, and
 * batched vs single. Tolerances (max |diff|) are named below; tokens and text must be exact. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "support/golden_icefall.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fbank from the waveform: torchaudio's float32 Kaldi vs ours; the README expects 1e-5 .. 1e-4
 * from FFT rounding, more only in near-silent bins (log of a tiny energy). Measured (x86-64,
 * OpenBLAS): 2.1e-5, near-silent bins 1.5e-5. */
#define TOL_FBANK 1e-4
#define TOL_FBANK_SILENT 1e-3 /* bins whose golden log energy is below -10 */
/* activations given the golden fbank (float32 sgemm order vs torch's), relative to
 * max(1, max |x|) of the stage; measured <= 2.4e-5 (embed_linear_out, |x| up to 18) */
#define TOL_STAGE 1e-4
#define TOL_ENC 2e-5       /* measured 5.7e-6 (encoder_out), 1.05e-5 (encoder_out_proj) */
#define TOL_DEC 5e-6       /* measured 9.5e-7 */
#define TOL_LOGITS 2e-5    /* measured 3.8e-6 */
#define TOL_BEAM_LOGP 1e-4 /* measured 1.5e-5 on log-probabilities of -20 .. -350 */

typedef struct {
    icefall_model_t *m;
    icefall_worker_t *w;
} fixture_t;

static void fixture_close(fixture_t *fx)
{
    icefall_worker_destroy(fx->w);
    icefall_destroy(fx->m);
    memset(fx, 0, sizeof *fx);
}

/* 0 ok, 1 skip (why), -1 failure (why) */
static int fixture_open(fixture_t *fx, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_icefall_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    hark_err_t err = {0};
    if (icefall_load(path, 1, &fx->m, &err) || icefall_worker_create(fx->m, 12.0, &fx->w, &err)) {
        snprintf(why, nwhy, "%.400s", err.msg);
        fixture_close(fx);
        return -1;
    }
    return 0;
}

#define OPEN_FIXTURE(fx)                                                                           \
    do {                                                                                           \
        char why_[512];                                                                            \
        int r_ = fixture_open(fx, why_, sizeof why_);                                              \
        if (r_ == 1)                                                                               \
            SKIP(why_);                                                                            \
        CHECKF(r_ == 0, "fixture: %s", why_);                                                      \
    } while (0)

#define LOAD(arr, sub, file)                                                                       \
    CHECKF(golden_icefall_npy(&(arr), sub, file) == 0, "golden %s/%s missing", sub, file)

static const cJSON *utt_json(const cJSON *res, const char *utt, const char *method)
{
    const cJSON *u =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "utterances"), utt);
    return method ? cJSON_GetObjectItemCaseSensitive(u, method) : u;
}

/* ints of a JSON array into a[] (n <= cap); returns n or -1 */
static int json_ints(const cJSON *arr, int *a, int cap)
{
    if (!cJSON_IsArray(arr))
        return -1;
    int n = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (n >= cap || !cJSON_IsNumber(v))
            return -1;
        a[n++] = v->valueint;
    }
    return n;
}

static int same_ints(const int *a, int na, const int *b, int nb, int *first)
{
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) {
            *first = i;
            return 0;
        }
    *first = n;
    return na == nb;
}

/* the golden encoder output of utt -> its projection (T', J), hark_malloc'ed */
static float *golden_ep(const icefall_model_t *m, const char *utt, int *T)
{
    npy_array_t e = {0};
    if (golden_icefall_npy(&e, utt, "encoder_out.npy"))
        return NULL;
    *T = (int)e.shape[0];
    float *ep = hark_malloc(sizeof(float) * (size_t)*T * icefall_config(m)->joiner_dim);
    if (ep)
        icefall_encoder_proj(m, e.data, *T, ep);
    npy_free(&e);
    return ep;
}

/* icefall's fbank (fbank.npy, the model's front end) and sherpa triton's (fbank_triton.npy,
 * high_freq 0) from the waveform */
TEST(icefall_fbank_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    hark_err_t err = {0};
    feat_opts_t so;
    feat_default_opts(&so, FEAT_FBANK);
    so.fbank_variant = FBANK_SHERPA;
    feat_plan_t *sherpa = NULL;
    CHECK_OK(feat_plan_create(&so, &sherpa, &err));
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_icefall_utts[u];
        for (int v = 0; v < 2; v++) {
            const feat_plan_t *plan = v ? sherpa : icefall_feat_plan(fx.m);
            const char *file = v ? "fbank_triton.npy" : "fbank.npy";
            npy_array_t wav = {0}, ref = {0};
            LOAD(wav, utt, "waveform.npy");
            LOAD(ref, utt, file);
            int T = feat_num_frames(plan, wav.count);
            CHECKF(T == ref.shape[0], "%s: %d frames, golden %lld", utt, T,
                   (long long)ref.shape[0]);
            float *f = hark_malloc(sizeof(float) * ref.count);
            CHECK_OK(feat_compute(plan, wav.data, wav.count, f, &err));
            const float *r = ref.data;
            double d = 0, ds = 0;
            for (size_t i = 0; i < ref.count; i++) {
                double x = fabs((double)f[i] - r[i]);
                if (r[i] < -10)
                    ds = x > ds ? x : ds;
                else
                    d = x > d ? x : d;
            }
            printf("  %s %s: max |diff| %.2e (bins above -10), %.2e (near-silent bins)\n", utt,
                   file, d, ds);
            CHECKF(d <= TOL_FBANK, "%s %s: max |diff| %.3g > %g", utt, file, d, TOL_FBANK);
            CHECKF(ds <= TOL_FBANK_SILENT, "%s %s: near-silent max |diff| %.3g > %g", utt, file, ds,
                   TOL_FBANK_SILENT);
            hark_free(f);
            npy_free(&wav);
            npy_free(&ref);
        }
    }
    feat_plan_destroy(sherpa);
    fixture_close(&fx);
}

/* ---- stages of the debug utterance ----------------------------------------------------------- */

#define MAX_STAGES 24
typedef struct {
    char name[MAX_STAGES][48];
    float *data[MAX_STAGES];
    int rows[MAX_STAGES], cols[MAX_STAGES], n;
} capture_t;

static void capture(void *user, const char *name, const float *data, int rows, int cols)
{
    capture_t *c = user;
    if (c->n == MAX_STAGES)
        return;
    size_t cnt = (size_t)rows * cols;
    float *p = malloc(sizeof(float) * (cnt ? cnt : 1));
    memcpy(p, data, sizeof(float) * cnt);
    snprintf(c->name[c->n], 48, "%s", name);
    c->data[c->n] = p;
    c->rows[c->n] = rows;
    c->cols[c->n++] = cols;
}

static int capture_find(const capture_t *c, const char *name)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->name[i], name))
            return i;
    return -1;
}

static void capture_free(capture_t *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->data[i]);
    c->n = 0;
}

TEST(icefall_encoder_stages_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    const char *utt = GOLDEN_ICEFALL_DEBUG_UTT;
    npy_array_t fb = {0};
    LOAD(fb, utt, "fbank.npy");
    int T = (int)fb.shape[0], Tp = icefall_frames_out(T), len = 0;
    const int d = icefall_config(fx.m)->d;
    float *enc = hark_malloc(sizeof(float) * (size_t)Tp * d);
    capture_t cap = {0};
    hark_err_t err = {0};
    CHECK_OK(icefall_encode(fx.w, fb.data, T, T, enc, &len, capture, &cap, &err));
    CHECK_EQ_INT(len, 40);
    static const char *const names[] = {"embed_linear_out",
                                        "embed_out",
                                        "pos_emb",
                                        "layer0_feed_forward_macaron",
                                        "layer0_self_attn",
                                        "layer0_conv_module",
                                        "layer0_feed_forward",
                                        "layer0_norm_final",
                                        "layer0_out",
                                        "layer1_out",
                                        "layer2_out"};
    char sub[128];
    snprintf(sub, sizeof sub, "%s/intermediates", utt);
    /* embed_conv_out: golden (1, 128, T', W) NCHW; ours (T', 128 * W) channel-major rows */
    {
        npy_array_t g = {0};
        LOAD(g, sub, "embed_conv_out.npy");
        int i = capture_find(&cap, "embed_conv_out");
        CHECK(i >= 0);
        int C = (int)g.shape[1], TT = (int)g.shape[2], W = (int)g.shape[3];
        CHECK(cap.rows[i] == TT && cap.cols[i] == C * W);
        double md = 0, mx = 0;
        const float *r = g.data;
        for (int c = 0; c < C; c++)
            for (int tt = 0; tt < TT; tt++)
                for (int f = 0; f < W; f++) {
                    double a = cap.data[i][(size_t)tt * C * W + (size_t)c * W + f];
                    double b = r[((size_t)c * TT + tt) * W + f];
                    md = fmax(md, fabs(a - b));
                    mx = fmax(mx, fabs(b));
                }
        printf("  embed_conv_out: max |diff| %.2e (max |x| %.1f)\n", md, mx);
        CHECKF(md <= TOL_STAGE * fmax(1.0, mx), "embed_conv_out: %.3g", md);
        npy_free(&g);
    }
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        char file[96];
        snprintf(file, sizeof file, "%s.npy", names[k]);
        npy_array_t g = {0};
        LOAD(g, sub, file);
        int i = capture_find(&cap, names[k]);
        CHECKF(i >= 0, "stage %s not reported", names[k]);
        CHECKF((size_t)cap.rows[i] * cap.cols[i] == g.count, "%s: %dx%d vs %zu values", names[k],
               cap.rows[i], cap.cols[i], g.count);
        double md = test_max_abs_diff(cap.data[i], g.data, g.count);
        double mx = 0;
        for (size_t j = 0; j < g.count; j++)
            mx = fmax(mx, fabs(((const float *)g.data)[j]));
        printf("  %s: max |diff| %.2e (max |x| %.1f)\n", names[k], md, mx);
        CHECKF(md <= TOL_STAGE * fmax(1.0, mx), "%s: max |diff| %.3g", names[k], md);
        npy_free(&g);
    }
    capture_free(&cap);
    hark_free(enc);
    npy_free(&fb);
    fixture_close(&fx);
}

TEST(icefall_encoder_out_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    const icefall_config_t *c = icefall_config(fx.m);
    hark_err_t err = {0};
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_icefall_utts[u];
        npy_array_t fb = {0}, ref = {0}, refp = {0};
        LOAD(fb, utt, "fbank.npy");
        LOAD(ref, utt, "encoder_out.npy");
        LOAD(refp, utt, "encoder_out_proj.npy");
        int T = (int)fb.shape[0], Tp = icefall_frames_out(T), len = 0;
        CHECK_EQ_INT(Tp, (int)ref.shape[0]);
        float *enc = hark_malloc(sizeof(float) * (size_t)Tp * c->d);
        float *ep = hark_malloc(sizeof(float) * (size_t)Tp * c->joiner_dim);
        CHECK_OK(icefall_encode(fx.w, fb.data, T, T, enc, &len, NULL, NULL, &err));
        CHECK_EQ_INT(len, Tp);
        double d = test_max_abs_diff(enc, ref.data, ref.count);
        icefall_encoder_proj(fx.m, enc, Tp, ep);
        double dp = test_max_abs_diff(ep, refp.data, refp.count);
        printf("  %s: encoder_out max |diff| %.2e, encoder_out_proj %.2e\n", utt, d, dp);
        CHECKF(d <= TOL_ENC, "%s: encoder_out max |diff| %.3g > %g", utt, d, TOL_ENC);
        CHECKF(dp <= TOL_ENC, "%s: encoder_out_proj max |diff| %.3g > %g", utt, dp, TOL_ENC);
        hark_free(enc);
        hark_free(ep);
        npy_free(&fb);
        npy_free(&ref);
        npy_free(&refp);
    }
    fixture_close(&fx);
}

TEST(icefall_decoder_joiner_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    const icefall_config_t *c = icefall_config(fx.m);
    const int D = c->decoder_dim, J = c->joiner_dim, V = c->vocab;
    float *dec = hark_malloc(sizeof(float) * 64 * D), *dp = hark_malloc(sizeof(float) * 64 * J);
    float *hid = hark_malloc(sizeof(float) * 64 * J), *lg = hark_malloc(sizeof(float) * 64 * V);
    float *e = hark_malloc(sizeof(float) * 64 * J);
    double worst_dec = 0, worst_log = 0;
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_icefall_utts[u];
        static const struct {
            int ctx[2];
            const char *file, *proj;
        } fixed[] = {{{-1, 0}, "decoder_out_init.npy", "decoder_out_init_proj.npy"},
                     {{0, 0}, "decoder_out_blank_blank.npy", "decoder_out_blank_blank_proj.npy"}};
        for (int k = 0; k < 2; k++) {
            npy_array_t g = {0}, gp = {0};
            LOAD(g, utt, fixed[k].file);
            LOAD(gp, utt, fixed[k].proj);
            icefall_decoder(fx.m, fixed[k].ctx, 1, dec);
            icefall_decoder_proj(fx.m, dec, 1, dp);
            worst_dec = fmax(worst_dec, test_max_abs_diff(dec, g.data, g.count));
            worst_dec = fmax(worst_dec, test_max_abs_diff(dp, gp.data, gp.count));
            npy_free(&g);
            npy_free(&gp);
        }
        npy_array_t cx = {0}, cxo = {0}, jt = {0}, jc = {0}, jl = {0}, ref_ep = {0};
        LOAD(cx, utt, "joiner_contexts.npy");
        LOAD(cxo, utt, "joiner_context_decoder_out.npy");
        LOAD(jt, utt, "joiner_t.npy");
        LOAD(jc, utt, "joiner_ctx.npy");
        LOAD(jl, utt, "joiner_logits.npy");
        LOAD(ref_ep, utt, "encoder_out_proj.npy");
        int nc = (int)cx.shape[0], np_ = (int)jt.shape[0];
        CHECK(nc <= 64 && np_ <= 64);
        int ctx[128];
        const float *cxf = cx.data;
        for (int i = 0; i < 2 * nc; i++)
            ctx[i] = (int)cxf[i];
        icefall_decoder(fx.m, ctx, nc, dec);
        worst_dec = fmax(worst_dec, test_max_abs_diff(dec, cxo.data, cxo.count));
        /* joiner on (frame, context) pairs, from the golden encoder projection */
        const float *jcf = jc.data, *jtf = jt.data;
        for (int i = 0; i < 2 * np_; i++)
            ctx[i] = (int)jcf[i];
        icefall_decoder(fx.m, ctx, np_, dec);
        icefall_decoder_proj(fx.m, dec, np_, dp);
        for (int i = 0; i < np_; i++)
            memcpy(e + (size_t)i * J, (const float *)ref_ep.data + (size_t)jtf[i] * J,
                   sizeof(float) * J);
        icefall_joiner(fx.m, e, dp, np_, hid, lg);
        worst_log = fmax(worst_log, test_max_abs_diff(lg, jl.data, jl.count));
        npy_free(&cx);
        npy_free(&cxo);
        npy_free(&jt);
        npy_free(&jc);
        npy_free(&jl);
        npy_free(&ref_ep);
    }
    printf("  decoder (+proj) max |diff| %.2e, joiner logits %.2e\n", worst_dec, worst_log);
    CHECKF(worst_dec <= TOL_DEC, "decoder max |diff| %.3g > %g", worst_dec, TOL_DEC);
    CHECKF(worst_log <= TOL_LOGITS, "joiner logits max |diff| %.3g > %g", worst_log, TOL_LOGITS);
    hark_free(dec);
    hark_free(dp);
    hark_free(hid);
    hark_free(lg);
    hark_free(e);
    fixture_close(&fx);
}

/* greedy (batched over the four) and modified beam search on the golden encoder output */
TEST(icefall_search_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    hark_err_t err = {0};
    float *ep[4];
    int lens[4];
    for (int u = 0; u < 4; u++)
        CHECK((ep[u] = golden_ep(fx.m, golden_icefall_utts[u], &lens[u])) != NULL);
    icefall_hyp_t g[4];
    CHECK_OK(icefall_greedy_search(fx.m, (const float *const *)ep, lens, 4, g, &err));
    static int want[2048], wt[2048];
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_icefall_utts[u];
        const cJSON *gs = utt_json(res, utt, "greedy_search");
        int n = json_ints(cJSON_GetObjectItemCaseSensitive(gs, "tokens"), want, 2048), at;
        int nt = json_ints(cJSON_GetObjectItemCaseSensitive(gs, "timestamps"), wt, 2048);
        CHECKF(same_ints(g[u].tokens, g[u].n, want, n, &at),
               "%s: greedy tokens part at %d (%d vs %d tokens)", utt, at, g[u].n, n);
        CHECKF(same_ints(g[u].times, g[u].n, wt, nt, &at), "%s: greedy timestamps part at %d", utt,
               at);
        char *text = NULL;
        CHECK_OK(icefall_text(fx.m, &g[u], &text, &err));
        const char *wtext = cJSON_GetObjectItemCaseSensitive(gs, "text")->valuestring;
        CHECKF(!strcmp(text, wtext), "%s: greedy text\n  got  %s\n  want %s", utt, text, wtext);
        hark_free(text);
        /* modified beam search, beam 4 */
        const cJSON *mb = utt_json(res, utt, "modified_beam_search");
        icefall_hyp_t best;
        icefall_hyp_t *nb = NULL;
        int nnb = 0;
        CHECK_OK(icefall_modified_beam_search(fx.m, ep[u], lens[u], 4, &best, &nb, &nnb, &err));
        n = json_ints(cJSON_GetObjectItemCaseSensitive(mb, "tokens"), want, 2048);
        nt = json_ints(cJSON_GetObjectItemCaseSensitive(mb, "timestamps"), wt, 2048);
        CHECKF(same_ints(best.tokens, best.n, want, n, &at),
               "%s: modified_beam_search tokens part at %d (%d vs %d tokens)", utt, at, best.n, n);
        CHECKF(same_ints(best.times, best.n, wt, nt, &at),
               "%s: modified_beam_search timestamps part at %d", utt, at);
        double lp = cJSON_GetObjectItemCaseSensitive(mb, "best_log_prob")->valuedouble;
        printf("  %s: greedy %d tokens, beam %d tokens, log_prob %.5f (golden %.5f, |diff| %.1e)\n",
               utt, g[u].n, best.n, best.score, lp, fabs(best.score - lp));
        CHECKF(fabs(best.score - lp) <= TOL_BEAM_LOGP, "%s: best log_prob %.6f vs %.6f", utt,
               best.score, lp);
        CHECK_OK(icefall_text(fx.m, &best, &text, &err));
        wtext = cJSON_GetObjectItemCaseSensitive(mb, "text")->valuestring;
        CHECKF(!strcmp(text, wtext), "%s: beam text\n  got  %s\n  want %s", utt, text, wtext);
        hark_free(text);
        /* the whole final beam, in icefall's order */
        const cJSON *fb = cJSON_GetObjectItemCaseSensitive(mb, "final_beam");
        CHECK_EQ_INT(nnb, cJSON_GetArraySize(fb));
        for (int i = 0; i < nnb && i < cJSON_GetArraySize(fb); i++) {
            const cJSON *h = cJSON_GetArrayItem(fb, i);
            int ny = json_ints(cJSON_GetObjectItemCaseSensitive(h, "ys"), want, 2048);
            CHECKF(ny >= 2 && same_ints(nb[i].tokens, nb[i].n, want + 2, ny - 2, &at),
                   "%s: final beam entry %d differs at %d", utt, i, at);
            double hl = cJSON_GetObjectItemCaseSensitive(h, "log_prob")->valuedouble;
            CHECKF(fabs(nb[i].score - hl) <= TOL_BEAM_LOGP, "%s: beam %d log_prob %.6f vs %.6f",
                   utt, i, nb[i].score, hl);
            icefall_hyp_free(&nb[i]);
        }
        hark_free(nb);
        icefall_hyp_free(&best);
        icefall_hyp_free(&g[u]);
        hark_free(ep[u]);
    }
    cJSON_Delete(res);
    fixture_close(&fx);
}

/* waveform -> text, each utterance alone and the four in one icefall_run */
TEST(icefall_end_to_end_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    hark_err_t err = {0};
    npy_array_t wav[4];
    const float *pcm[4];
    size_t n[4];
    for (int u = 0; u < 4; u++) {
        memset(&wav[u], 0, sizeof wav[u]);
        LOAD(wav[u], golden_icefall_utts[u], "waveform.npy");
        pcm[u] = wav[u].data;
        n[u] = wav[u].count;
    }
    static int want[2048];
    for (int meth = 0; meth < 2; meth++) {
        icefall_run_opts_t o = {.method = meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY};
        const char *key = meth ? "modified_beam_search" : "greedy_search";
        icefall_result_t all[4], one;
        CHECK_OK(icefall_run(fx.w, pcm, n, 4, &o, all, &err));
        for (int u = 0; u < 4; u++) {
            const char *utt = golden_icefall_utts[u];
            const cJSON *j = utt_json(res, utt, key);
            int nw = json_ints(cJSON_GetObjectItemCaseSensitive(j, "tokens"), want, 2048), at;
            const char *wtext = cJSON_GetObjectItemCaseSensitive(j, "text")->valuestring;
            CHECKF(same_ints(all[u].best.tokens, all[u].best.n, want, nw, &at),
                   "%s %s (batch of 4): tokens part at %d", utt, key, at);
            CHECKF(!strcmp(all[u].text, wtext), "%s %s: text\n  got  %s\n  want %s", utt, key,
                   all[u].text, wtext);
            CHECK_OK(icefall_run(fx.w, &pcm[u], &n[u], 1, &o, &one, &err));
            CHECKF(same_ints(one.best.tokens, one.best.n, all[u].best.tokens, all[u].best.n, &at),
                   "%s %s: alone vs in the batch part at %d", utt, key, at);
            icefall_result_free(&one);
            icefall_result_free(&all[u]);
        }
    }
    for (int u = 0; u < 4; u++)
        npy_free(&wav[u]);
    cJSON_Delete(res);
    fixture_close(&fx);
}

/* icefall's padded batch: rows padded with log(1e-10) as pretrained.py pads them; the encoder
 * given each padded row and its length gives the batch golden (which differs from the single run
 * for T = 3 mod 4), and the searches over it the batch's tokens */
TEST(icefall_padded_batch_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    const icefall_config_t *c = icefall_config(fx.m);
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    npy_array_t fp = {0}, fl = {0}, eo = {0}, el = {0};
    LOAD(fp, "batch", "fbank_padded.npy");
    LOAD(fl, "batch", "fbank_lens.npy");
    LOAD(eo, "batch", "encoder_out.npy");
    LOAD(el, "batch", "encoder_out_lens.npy");
    const int B = (int)fp.shape[0], Tmax = (int)fp.shape[1], F = (int)fp.shape[2];
    const int Tpm = (int)eo.shape[1], d = c->d, J = c->joiner_dim;
    CHECK_EQ_INT(icefall_frames_out(Tmax), Tpm);
    hark_err_t err = {0};
    float *enc = hark_malloc(sizeof(float) * (size_t)Tpm * d);
    float *ep[4];
    int lens[4];
    const cJSON *order =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "batch"), "order");
    const cJSON *per =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "batch"), "per_utt");
    CHECK(B == 4 && cJSON_GetArraySize(order) == 4);
    for (int b = 0; b < B; b++) {
        int len_in = (int)((const float *)fl.data)[b], len = 0;
        CHECK_OK(icefall_encode(fx.w, (const float *)fp.data + (size_t)b * Tmax * F, Tmax, len_in,
                                enc, &len, NULL, NULL, &err));
        CHECK_EQ_INT(len, (int)((const float *)el.data)[b]);
        double md =
            test_max_abs_diff(enc, (const float *)eo.data + (size_t)b * Tpm * d, (size_t)len * d);
        printf("  batch row %d (%s): T %d, encoder_out max |diff| %.2e\n", b,
               cJSON_GetArrayItem(order, b)->valuestring, len_in, md);
        CHECKF(md <= TOL_ENC, "batch row %d: encoder_out max |diff| %.3g", b, md);
        ep[b] = hark_malloc(sizeof(float) * (size_t)len * J);
        icefall_encoder_proj(fx.m, enc, len, ep[b]);
        lens[b] = len;
    }
    icefall_hyp_t g[4];
    CHECK_OK(icefall_greedy_search(fx.m, (const float *const *)ep, lens, B, g, &err));
    static int want[2048];
    for (int b = 0; b < B; b++) {
        const char *utt = cJSON_GetArrayItem(order, b)->valuestring;
        const cJSON *pu = cJSON_GetObjectItemCaseSensitive(per, utt);
        int n = json_ints(cJSON_GetObjectItemCaseSensitive(pu, "greedy_tokens"), want, 2048), at;
        CHECKF(same_ints(g[b].tokens, g[b].n, want, n, &at), "batch %s: greedy part at %d", utt,
               at);
        icefall_hyp_t best;
        CHECK_OK(icefall_modified_beam_search(fx.m, ep[b], lens[b], 4, &best, NULL, NULL, &err));
        n = json_ints(cJSON_GetObjectItemCaseSensitive(pu, "modified_beam_search_tokens"), want,
                      2048);
        CHECKF(same_ints(best.tokens, best.n, want, n, &at), "batch %s: beam part at %d", utt, at);
        icefall_hyp_free(&best);
        icefall_hyp_free(&g[b]);
        hark_free(ep[b]);
    }
    hark_free(enc);
    npy_free(&fp);
    npy_free(&fl);
    npy_free(&eo);
    npy_free(&el);
    cJSON_Delete(res);
    fixture_close(&fx);
}

/* the shortest audio (7 feature frames, one encoder frame) and awkward lengths: no error, each
 * utterance's result the same alone and in a batch with the others; one sample less is refused */
TEST(icefall_short_and_awkward_lengths)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    fixture_t fx;
    OPEN_FIXTURE(&fx);
    npy_array_t wav = {0};
    LOAD(wav, "jfk", "waveform.npy");
    hark_err_t err = {0};
    const size_t lens[] = {1040, 1041, 1199, 1200, 1681, 2000, 4321, 16000 + 79};
    enum { NL = sizeof lens / sizeof *lens };
    const float *pcm[NL];
    for (int i = 0; i < NL; i++) {
        pcm[i] = (const float *)wav.data + 3000 * (size_t)i; /* speech, not the leading silence */
        CHECK_EQ_INT(icefall_num_frames(fx.m, lens[i]) >= 7, 1);
    }
    CHECK_EQ_INT(icefall_frames_out(icefall_num_frames(fx.m, 1040)), 1);
    for (int meth = 0; meth < 2; meth++) {
        icefall_run_opts_t o = {.method = meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY};
        icefall_result_t all[NL], one;
        CHECK_OK(icefall_run(fx.w, pcm, lens, NL, &o, all, &err));
        for (int i = 0; i < NL; i++) {
            CHECK_EQ_INT(all[i].n_frames, icefall_frames_out(icefall_num_frames(fx.m, lens[i])));
            CHECK_OK(icefall_run(fx.w, &pcm[i], &lens[i], 1, &o, &one, &err));
            int at;
            CHECKF(same_ints(one.best.tokens, one.best.n, all[i].best.tokens, all[i].best.n, &at),
                   "%zu samples: alone vs batch part at %d", lens[i], at);
            CHECK(!strcmp(one.text, all[i].text));
            for (int k = 0; k < one.best.n; k++)
                CHECK(one.best.times[k] >= 0 && one.best.times[k] < one.n_frames);
            icefall_result_free(&one);
            icefall_result_free(&all[i]);
        }
    }
    size_t short_n = 1039;
    icefall_result_t r;
    CHECK_EQ_INT(icefall_run(fx.w, &pcm[0], &short_n, 1, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "too short"), "%s", err.msg);
    size_t long_n = wav.count; /* 11 s against a 12 s worker: fine; a 3 s worker refuses it */
    icefall_worker_t *w3 = NULL;
    CHECK_OK(icefall_worker_create(fx.m, 3.0, &w3, &err));
    const float *p0 = wav.data;
    CHECK_EQ_INT(icefall_run(w3, &p0, &long_n, 1, NULL, &r, &err), HARK_ERR_TOO_LARGE);
    icefall_worker_destroy(w3);
    npy_free(&wav);
    fixture_close(&fx);
}
