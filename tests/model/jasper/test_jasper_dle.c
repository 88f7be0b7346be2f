/* Jasper / QuartzNet configurations the J1 goldens do not cover, against DLE's own code:
 * tools/dle_jasper_reference.py builds each model from its yaml with DLE's config.py and
 * model.py (seeded weights, calibrated batch norms), saves it with DLE's Checkpointer and replays
 * inference.py's loop on the J1 utterances and their padded batch (tests/support/dle_jasper.c
 * lists the configurations: QuartzNet 15x5 as shipped with filters / 8, two QuartzNet variations
 * of kernel factor, dilation, residual modes, repeats, masks, activation and padding, and Jasper
 * 10x5 without conv masks); hark converts each checkpoint with tools/convert_jasper.py and must
 * give DLE's numbers stage by stage: every block of utt0 (rel 1e-4) and the log-probs fed DLE's
 * model input (5e-4), then from the waveform the features (3e-3), log-probs on the valid frames
 * (1e-2), the greedy ids of the valid frames and the text exactly — the J1 test's tolerances —
 * for each utterance alone and for each row of DLE's zero-padded batch. One more test replays the
 * J1 checkpoint through the tool and finds the golden set's numbers. Needs $HARK_DLE_SRC (a
 * DeepLearningExamples tree), ../shared and /usr/bin/python3 with torch, yaml and numpy; skips
 * otherwise ($HARK_DLE_REF: sets made elsewhere). The last test puts every golden set beside J1
 * in ../shared/data/golden/jasper (Q1, held out, when it is shared) through the same checks. */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "model/jasper/jasper.h"
#include "support/dle_jasper.h"
#include "support/golden_jasper.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_FEATS 3e-3
#define TOL_LOGP_GIVEN_FEATS 5e-4
#define TOL_LOGP_END_TO_END 1e-2
#define TOL_BLOCK_REL 1e-4

static int json_int(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* max |a[t][c] - ref[c][t]| over t < rows (a: (rows, cols) row-major; ref: (cols, ref_t)) */
static double diff_transposed(const float *a, const float *ref, int rows, int cols, int ref_t)
{
    double d = 0;
    for (int t = 0; t < rows; t++)
        for (int c = 0; c < cols; c++) {
            double e = fabs((double)a[(size_t)t * cols + c] - ref[(size_t)c * ref_t + t]);
            if (!(e <= d))
                d = e; /* NaN wins */
        }
    return d;
}

static void argmax_rows(const float *lp, int T, int V, int *ids)
{
    for (int s = 0; s < T; s++) {
        const float *r = lp + (size_t)s * V;
        int b = 0;
        for (int v = 1; v < V; v++)
            if (r[v] > r[b])
                b = v;
        ids[s] = b;
    }
}

/* DLE's collapse of per-frame ids (helpers.ctc_decoder_predictions_tensor) into text */
static void collapse(const jasper_config_t *cfg, const int *ids, int n, char *out, size_t cap)
{
    size_t pos = 0;
    int prev = cfg->n_labels;
    out[0] = 0;
    for (int s = 0; s < n; s++) {
        int p = ids[s];
        if (p != cfg->n_labels && (p != prev || prev == cfg->n_labels)) {
            size_t k = strlen(cfg->labels[p]);
            if (pos + k < cap) {
                memcpy(out + pos, cfg->labels[p], k);
                pos += k;
                out[pos] = 0;
            }
        }
        prev = p;
    }
}

/* the worst differences of one configuration, printed at its end */
typedef struct {
    double block_rel, logp_given, feats, logp_e2e, b_feats, b_logp;
    int n_blocks_checked;
} worst_t;

static void upd(double *w, double d)
{
    if (!(d <= *w))
        *w = d;
}

typedef struct {
    test_ctx_t *t;
    const char *dir, *utt;
    worst_t *worst;
    int n_checked, failed;
} stage_ctx_t;

static void check_block(void *user, const char *name, const float *data, int rows, int cols)
{
    stage_ctx_t *s = user;
    if (strncmp(name, "block", 5))
        return;
    char file[64];
    snprintf(file, sizeof file, "intermediate/%s.npy", name);
    npy_array_t ref;
    if (dle_jasper_npy(&ref, s->dir, s->utt, file)) {
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s: cannot read the reference", file);
        return;
    }
    if (ref.ndim != 2 || ref.shape[0] != cols || ref.shape[1] != rows) {
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s: DLE [%lld, %lld], hark (%d frames, %d ch)", name,
                  (long long)ref.shape[0], (long long)ref.shape[1], rows, cols);
        npy_free(&ref);
        return;
    }
    double scale = 0;
    for (size_t i = 0; i < ref.count; i++)
        scale = fmax(scale, fabs(((float *)ref.data)[i]));
    double rel = diff_transposed(data, ref.data, rows, cols, rows) / fmax(scale, 1.0);
    if (!(rel <= TOL_BLOCK_REL)) {
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s %s: max |d| / max(1, max |x|) = %.3g", s->utt, name,
                  rel);
    }
    upd(&s->worst->block_rel, rel);
    s->n_checked++;
    npy_free(&ref);
}

/* one utterance: DLE's model input through hark's encoder, then hark from the waveform */
static void check_utt(test_ctx_t *t, jasper_worker_t *w, const jasper_model_t *m, const char *dir,
                      const char *utt, worst_t *worst)
{
    const jasper_config_t *cfg = jasper_config(m);
    const int V = jasper_vocab(m), F = cfg->n_filt, P = cfg->pad_leading;
    cJSON *res = dle_jasper_json(dir, utt, "result.json");
    npy_array_t wav, feat, logp, ids;
    CHECK(res);
    CHECK_OK(dle_jasper_npy(&wav, dir, utt, "waveform.npy"));
    CHECK_OK(dle_jasper_npy(&feat, dir, utt, "features.npy"));
    CHECK_OK(dle_jasper_npy(&logp, dir, utt, "log_probs.npy"));
    CHECK_OK(dle_jasper_npy(&ids, dir, utt, "greedy_ids.npy"));
    const int T_feat = (int)feat.shape[1], t_in = T_feat + P, T = (int)logp.shape[0];
    CHECK_EQ_INT(feat.shape[0], F);
    CHECK_EQ_INT(t_in, json_int(res, "model_in_T"));
    CHECK_EQ_INT(jasper_frames_in(m, wav.count), t_in);
    CHECK_EQ_INT(jasper_frames_out(m, t_in), T);
    /* DLE's model input: pad_leading zero frames, then DLE's features */
    float *in = calloc((size_t)t_in * F, sizeof(float)), *lp = calloc((size_t)T * V, sizeof(float));
    for (int f = 0; f < T_feat; f++)
        for (int c = 0; c < F; c++)
            in[(size_t)(f + P) * F + c] = ((float *)feat.data)[(size_t)c * T_feat + f];
    /* every layer's output where the set has them (the first utterance) */
    npy_array_t probe;
    int with_blocks = dle_jasper_npy(&probe, dir, utt, "intermediate/block00_out.npy") == 0;
    if (with_blocks)
        npy_free(&probe);
    stage_ctx_t sc = {.t = t, .dir = dir, .utt = utt, .worst = worst};
    int len_out = 0;
    hark_err_t err = {0};
    CHECK_OK(jasper_forward(w, in, t_in, json_int(res, "model_in_len"), lp, &len_out,
                            with_blocks ? check_block : NULL, &sc, &err));
    CHECK(!sc.failed);
    if (with_blocks)
        CHECK_EQ_INT(sc.n_checked, cfg->n_blocks);
    worst->n_blocks_checked += sc.n_checked;
    CHECK_EQ_INT(len_out, json_int(res, "out_len"));
    double dg = test_max_abs_diff(lp, logp.data, (size_t)T * V);
    upd(&worst->logp_given, dg);
    /* end to end (inference.py --transcribe_wav): hark's features, encoder, greedy decoding */
    jasper_result_t r;
    int feat_t_in = 0, feat_len = 0;
    CHECK_OK(jasper_features(m, wav.data, wav.count, wav.count, in, &feat_t_in, &feat_len, &err));
    CHECK_EQ_INT(feat_t_in, t_in);
    CHECK_EQ_INT(feat_len, json_int(res, "model_in_len"));
    double df = diff_transposed(in + (size_t)P * F, feat.data, T_feat, F, T_feat);
    upd(&worst->feats, df);
    CHECK_OK(jasper_forward(w, in, t_in, feat_len, lp, &len_out, NULL, NULL, &err));
    CHECK_OK(jasper_run(w, wav.data, wav.count, NULL, &r, &err));
    CHECK_EQ_INT(r.n_frames, T);
    CHECK_EQ_INT(r.len_out, json_int(res, "out_len"));
    double dl = test_max_abs_diff(lp, logp.data, (size_t)r.len_out * V);
    upd(&worst->logp_e2e, dl);
    int id_valid = 0, id_all = 0;
    for (int s = 0; s < T; s++)
        if (r.frame_ids[s] != (int)((float *)ids.data)[s]) {
            id_all++;
            id_valid += s < r.len_out;
        }
    const cJSON *mm = cJSON_GetObjectItemCaseSensitive(res, "min_margin_valid");
    printf("  %s: log_probs fed DLE's input max|d| %.3g (all %d frames); from the waveform: "
           "features %.3g, log_probs %.3g (%d valid frames), ids differing %d valid / %d all; "
           "DLE's smallest top-2 margin %.3g\n",
           utt, dg, T, df, dl, r.len_out, id_valid, id_all,
           cJSON_IsNumber(mm) ? mm->valuedouble : NAN);
    CHECKF(dg <= TOL_LOGP_GIVEN_FEATS, "%s: log_probs fed DLE's input max |d| %.3g", utt, dg);
    CHECKF(df <= TOL_FEATS, "%s: features max |d| %.3g", utt, df);
    CHECKF(dl <= TOL_LOGP_END_TO_END, "%s: log_probs max |d| %.3g", utt, dl);
    CHECKF(id_valid == 0, "%s: %d greedy ids differ on the valid frames", utt, id_valid);
    const char *want = json_str(res, "text_inference_py");
    CHECK(want);
    CHECKF(!strcmp(r.text, want), "%s: text '%s', DLE '%s'", utt, r.text, want);
    jasper_result_free(&r);
    free(in);
    free(lp);
    npy_free(&wav);
    npy_free(&feat);
    npy_free(&logp);
    npy_free(&ids);
    cJSON_Delete(res);
}

/* DLE's collate_fn batch: each row zero-padded to the longest, hark's features of the padded row */
static void check_batch(test_ctx_t *t, jasper_worker_t *w, const jasper_model_t *m, const char *dir,
                        char (*utts)[256], int B, worst_t *worst)
{
    const jasper_config_t *cfg = jasper_config(m);
    const int V = jasper_vocab(m), F = cfg->n_filt, P = cfg->pad_leading;
    cJSON *bres = dle_jasper_json(dir, "batch", "result.json");
    npy_array_t bfeat, blogp, bids, blens;
    CHECK(bres);
    CHECK_OK(dle_jasper_npy(&bfeat, dir, "batch", "features.npy"));
    CHECK_OK(dle_jasper_npy(&blogp, dir, "batch", "log_probs.npy"));
    CHECK_OK(dle_jasper_npy(&bids, dir, "batch", "greedy_ids.npy"));
    CHECK_OK(dle_jasper_npy(&blens, dir, "batch", "out_lens.npy"));
    const int N = json_int(bres, "audio_padded_len");
    const int T_feat = (int)bfeat.shape[2], T_out = (int)blogp.shape[1];
    CHECK_EQ_INT(bfeat.shape[0], B);
    CHECK_EQ_INT(jasper_frames_in(m, (size_t)N), T_feat + P);
    const cJSON *texts = cJSON_GetObjectItemCaseSensitive(bres, "texts_inference_py");
    float *row = calloc((size_t)N, sizeof(float));
    float *in = calloc((size_t)(T_feat + P) * F, sizeof(float));
    float *lp = calloc((size_t)T_out * V, sizeof(float));
    int *ids = calloc((size_t)T_out, sizeof(int));
    char text[8192];
    for (int b = 0; b < B; b++) {
        npy_array_t wav;
        CHECK_OK(dle_jasper_npy(&wav, dir, utts[b], "waveform.npy"));
        CHECK((int)wav.count <= N);
        memset(row, 0, sizeof(float) * (size_t)N);
        memcpy(row, wav.data, sizeof(float) * wav.count);
        int t_in = 0, len_in = 0, len_out = 0;
        hark_err_t err = {0};
        CHECK_OK(jasper_features(m, row, (size_t)N, wav.count, in, &t_in, &len_in, &err));
        CHECK_EQ_INT(t_in, T_feat + P);
        const float *gf = (const float *)bfeat.data + (size_t)b * F * T_feat;
        double df = diff_transposed(in + (size_t)P * F, gf, T_feat, F, T_feat);
        CHECK_OK(jasper_forward(w, in, t_in, len_in, lp, &len_out, NULL, NULL, &err));
        CHECK_EQ_INT(len_out, (int)((float *)blens.data)[b]);
        const float *gl = (const float *)blogp.data + (size_t)b * T_out * V;
        double dl = test_max_abs_diff(lp, gl, (size_t)len_out * V);
        argmax_rows(lp, T_out, V, ids);
        int id_valid = 0, id_all = 0;
        for (int s = 0; s < T_out; s++) {
            int g = (int)((float *)bids.data)[(size_t)b * T_out + s];
            id_all += ids[s] != g;
            id_valid += s < len_out && ids[s] != g;
        }
        collapse(cfg, ids, T_out, text, sizeof text);
        upd(&worst->b_feats, df);
        upd(&worst->b_logp, dl);
        printf("  batch row %d: features max|d| %.3g, log_probs %.3g (%d valid frames), ids "
               "differing %d valid / %d all\n",
               b, df, dl, len_out, id_valid, id_all);
        CHECKF(df <= TOL_FEATS, "row %d: features max |d| %.3g", b, df);
        CHECKF(dl <= TOL_LOGP_END_TO_END, "row %d: log_probs max |d| %.3g", b, dl);
        CHECKF(id_valid == 0, "row %d: %d greedy ids differ on the valid frames", b, id_valid);
        const cJSON *want = cJSON_GetArrayItem(texts, b);
        CHECK(cJSON_IsString(want));
        CHECKF(!strcmp(text, want->valuestring), "row %d: text '%s', DLE '%s'", b, text,
               want->valuestring);
        npy_free(&wav);
    }
    free(row);
    free(in);
    free(lp);
    free(ids);
    npy_free(&bfeat);
    npy_free(&blogp);
    npy_free(&bids);
    npy_free(&blens);
    cJSON_Delete(bres);
}

/* every check on one set: its utterances alone, then its padded batch */
static void check_set(test_ctx_t *t, const char *name, const dle_jasper_set_t *set,
                      jasper_arch_t arch)
{
    jasper_model_t *m = NULL;
    jasper_worker_t *w = NULL;
    hark_err_t err = {0};
    CHECK_OK(jasper_load(set->model, 1, &m, &err));
    CHECK_OK(jasper_worker_create(m, 12.0, &w, &err));
    CHECK_EQ_INT(jasper_config(m)->arch, arch);
    char utts[16][256];
    int n = dle_jasper_utts(set->ref, utts, 16);
    CHECKF(n > 0, "%s: batch/result.json has no utterance order", set->ref);
    worst_t worst = {0};
    for (int u = 0; u < n && !test_failed(t); u++)
        check_utt(t, w, m, set->ref, utts[u], &worst);
    if (!test_failed(t))
        check_batch(t, w, m, set->ref, utts, n, &worst);
    printf("%s: worst: blocks rel %.3g (%d checked), log_probs fed DLE's input %.3g; from the "
           "waveform: features %.3g, log_probs %.3g; batch: features %.3g, log_probs %.3g\n",
           name, worst.block_rel, worst.n_blocks_checked, worst.logp_given, worst.feats,
           worst.logp_e2e, worst.b_feats, worst.b_logp);
    jasper_worker_destroy(w);
    jasper_destroy(m);
}

static void check_config(test_ctx_t *t, const char *name)
{
    const dle_jasper_cfg_t *c = dle_jasper_cfg(name);
    CHECK(c);
    dle_jasper_set_t set = {{0}, {0}};
    char why[1024];
    int r = dle_jasper_ref(c, &set, why, sizeof why);
    if (r == 1)
        SKIP(why);
    CHECKF(r == 0, "%s", why);
    printf("%s: %s\n", c->name, c->what);
    check_set(t, c->name, &set,
              strcmp(c->folder, "Jasper") ? JASPER_ARCH_QUARTZNET : JASPER_ARCH_JASPER);
}

TEST(jasper_dle_quartznet15x5)
{
    check_config(t, "qn15x5_div8");
}

TEST(jasper_dle_quartznet_variant)
{
    check_config(t, "qn_variant");
}

TEST(jasper_dle_quartznet_nomask)
{
    check_config(t, "qn_nomask");
}

TEST(jasper_dle_jasper_nomask)
{
    check_config(t, "jasper_nomask_div16");
}

/* The tool itself: fed the J1 checkpoint, DLE's replayed loop gives the golden set's numbers —
 * the librosa stand-in's filterbank and the window bit for bit, the features and log-probs to
 * float32 noise (another CPU's kernels: 1.9e-6 and 3.8e-5 measured here), ids and texts exactly. */
TEST(jasper_dle_tool_reproduces_j1)
{
    NEED_SHARED(GOLDEN_JASPER);
    const dle_jasper_cfg_t *c = dle_jasper_cfg("j1_replay");
    dle_jasper_set_t set = {{0}, {0}};
    char why[1024];
    int r = dle_jasper_ref(c, &set, why, sizeof why);
    const char *dir = set.ref;
    if (r == 1)
        SKIP(why);
    CHECKF(r == 0, "%s", why);
    const char *exact[2] = {"mel_fb.npy", "stft_window.npy"};
    for (int i = 0; i < 2; i++) {
        npy_array_t a, g;
        CHECK_OK(dle_jasper_npy(&a, dir, ".", exact[i]));
        CHECK_OK(golden_jasper_npy(&g, ".", exact[i]));
        CHECK(a.count == g.count && !memcmp(a.data, g.data, sizeof(float) * a.count));
        npy_free(&a);
        npy_free(&g);
    }
    double wf = 0, wl = 0;
    for (int u = 0; u < 5; u++) {
        const char *sub = u < 4 ? golden_jasper_utts[u] : "batch";
        const char *files[3] = {"features.npy", "log_probs.npy", "greedy_ids.npy"};
        for (int f = 0; f < 3; f++) {
            npy_array_t a, g;
            CHECK_OK(dle_jasper_npy(&a, dir, sub, files[f]));
            CHECK_OK(golden_jasper_npy(&g, sub, files[f]));
            CHECK_EQ_INT(a.count, g.count);
            double d = test_max_abs_diff(a.data, g.data, a.count);
            printf("j1 replay %s/%s: max|d| %.3g\n", sub, files[f], d);
            CHECKF(f != 0 || d <= 1e-5, "%s features: max |d| %.3g", sub, d);
            CHECKF(f != 1 || d <= 2e-4, "%s log_probs: max |d| %.3g", sub, d);
            CHECKF(f != 2 || d == 0, "%s: greedy ids differ", sub);
            upd(f ? &wl : &wf, f == 2 ? 0 : d);
            npy_free(&a);
            npy_free(&g);
        }
        cJSON *a = dle_jasper_json(dir, sub, "result.json"),
              *g = golden_jasper_json(sub, "result.json");
        CHECK(a && g);
        if (u < 4) {
            CHECK(!strcmp(json_str(a, "text_inference_py"), json_str(g, "text_inference_py")));
            CHECK(!strcmp(json_str(a, "text_valid_frames"), json_str(g, "text_valid_frames")));
        } else {
            char *sa = cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "texts_inference_py"));
            char *sg = cJSON_PrintUnformatted(cJSON_GetObjectItem(g, "texts_inference_py"));
            CHECK(sa && sg && !strcmp(sa, sg));
            free(sa);
            free(sg);
        }
        cJSON_Delete(a);
        cJSON_Delete(g);
    }
    printf("j1 replay: worst features %.3g, log_probs %.3g; ids and texts equal\n", wf, wl);
}

/* Golden sets beside J1 in ../shared/data/golden/jasper (made by the goldens' generator with DLE's
 * code; Q1, the held-out QuartzNet, when it is shared): the same checks as above. */
TEST(jasper_dle_other_golden_sets)
{
    char names[16][64];
    int n = dle_jasper_golden_names(names, 16);
    if (n == 0)
        SKIP("no golden set beside J1 in ../shared/data/golden/jasper (Q1 is held out)");
    for (int i = 0; i < n && !test_failed(t); i++) {
        dle_jasper_set_t set = {{0}, {0}};
        char why[1024];
        int r = dle_jasper_golden(names[i], &set, why, sizeof why);
        CHECKF(r == 0, "golden/jasper/%s: %s", names[i], why);
        cJSON *man = dle_jasper_json(set.ref, ".", "manifest.json");
        const char *arch = json_str(man, "arch");
        printf("golden/jasper/%s (%s)\n", names[i], arch ? arch : "?");
        check_set(t, names[i], &set,
                  arch && !strcmp(arch, "jasper") ? JASPER_ARCH_JASPER : JASPER_ARCH_QUARTZNET);
        cJSON_Delete(man);
    }
}
