/* Tests for src/model/jasper/jasper.c against NVIDIA DeepLearningExamples' Jasper goldens
 * (../shared/data/golden/jasper/J1, README there): stage by stage — features (model input), every
 * encoder block, logits and log-probs given the golden features, then end to end (log-probs,
 * greedy ids, text) for each utterance and for DLE's zero-padded batch of four; plus bad input.
 * Tolerances are the README's: features atol 3e-3, log-probs atol 5e-4 fed the golden features
 * and 1e-2 end to end, exact greedy ids on the valid frames and exact text. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/jasper/jasper.h"
#include "support/golden_jasper.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_FEATS 3e-3
#define TOL_LOGP_GIVEN_FEATS 5e-4
#define TOL_LOGP_END_TO_END 1e-2

typedef struct {
    jasper_model_t *m;
    jasper_worker_t *w;
} fixture_t;

static void fixture_close(fixture_t *fx)
{
    jasper_worker_destroy(fx->w);
    jasper_destroy(fx->m);
    memset(fx, 0, sizeof *fx);
}

/* 0 ok, 1 skip (why), -1 failure (why) */
static int fixture_open(fixture_t *fx, double max_seconds, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_jasper_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    hark_err_t err = {0};
    if (jasper_load(path, 1, &fx->m, &err) ||
        jasper_worker_create(fx->m, max_seconds, &fx->w, &err)) {
        snprintf(why, nwhy, "%.400s", err.msg);
        fixture_close(fx);
        return -1;
    }
    return 0;
}

#define OPEN_FIXTURE(fx, secs)                                                                     \
    do {                                                                                           \
        char why_[512];                                                                            \
        int r_ = fixture_open(fx, secs, why_, sizeof why_);                                        \
        if (r_ == 1)                                                                               \
            SKIP(why_);                                                                            \
        CHECKF(r_ == 0, "fixture: %s", why_);                                                      \
    } while (0)

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

/* ---- stages of utt0, fed DLE's own model input ------------------------------------------ */

typedef struct {
    test_ctx_t *t;
    const char *utt;
    double worst_block_rel;
    int n_checked;
    int failed;
} stage_ctx_t;

static void check_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stage_ctx_t *s = user;
    if (strncmp(name, "block", 5))
        return;
    char file[64];
    snprintf(file, sizeof file, "intermediate/%s.npy", name);
    npy_array_t ref;
    if (golden_jasper_npy(&ref, s->utt, file)) {
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s: cannot read the golden", file);
        return;
    }
    if (ref.ndim != 2 || ref.shape[0] != cols || ref.shape[1] != rows) {
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s: golden [%lld, %lld], hark (%d frames, %d ch)",
                  name, (long long)ref.shape[0], (long long)ref.shape[1], rows, cols);
        npy_free(&ref);
        return;
    }
    double scale = 0;
    for (size_t i = 0; i < ref.count; i++)
        scale = fmax(scale, fabs(((float *)ref.data)[i]));
    double d = diff_transposed(data, ref.data, rows, cols, rows);
    double rel = d / fmax(scale, 1.0);
    printf("  %s: max|d| %.3g (values up to %.3g)\n", name, d, scale);
    if (!(rel <= 1e-4)) { /* float32 re-association across 13 blocks: measured <= 1.2e-6 */
        s->failed = 1;
        test_fail(s->t, __FILE__, __LINE__, "%s: max |d| %.3g, values up to %.3g", name, d, scale);
    }
    if (rel > s->worst_block_rel || rel != rel)
        s->worst_block_rel = rel;
    s->n_checked++;
    npy_free(&ref);
}

TEST(jasper_blocks_and_log_probs_given_golden_input)
{
    fixture_t fx;
    OPEN_FIXTURE(&fx, 12.0);
    const jasper_config_t *cfg = jasper_config(fx.m);
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_jasper_utts[u];
        cJSON *res = golden_jasper_json(utt, "result.json");
        npy_array_t feat, logp;
        CHECK(res);
        CHECK_OK(golden_jasper_npy(&feat, utt, "features.npy"));
        CHECK_OK(golden_jasper_npy(&logp, utt, "log_probs.npy"));
        /* DLE's model input: pad_leading zero frames, then the golden features */
        int T_feat = (int)feat.shape[1], F = cfg->n_filt, P = cfg->pad_leading;
        int t_in = T_feat + P, len_in = json_int(res, "model_in_len");
        CHECK_EQ_INT(t_in, json_int(res, "model_in_T"));
        float *in = calloc((size_t)t_in * F, sizeof(float));
        int V = jasper_vocab(fx.m), T_out = jasper_frames_out(fx.m, t_in);
        CHECK_EQ_INT(T_out, logp.shape[0]);
        float *out = calloc((size_t)T_out * V, sizeof(float));
        for (int f = 0; f < T_feat; f++)
            for (int c = 0; c < F; c++)
                in[(size_t)(f + P) * F + c] = ((float *)feat.data)[(size_t)c * T_feat + f];
        stage_ctx_t sc = {.t = t, .utt = utt};
        int has_blocks = u == 0; /* intermediate/ exists for utt0 only */
        int len_out = 0;
        hark_err_t err = {0};
        CHECK_OK(jasper_forward(fx.w, in, t_in, len_in, out, &len_out,
                                has_blocks ? check_stage : NULL, &sc, &err));
        CHECK_EQ_INT(len_out, json_int(res, "out_len"));
        if (has_blocks)
            CHECK_EQ_INT(sc.n_checked, cfg->n_blocks);
        CHECK(!sc.failed);
        double d = test_max_abs_diff(out, logp.data, (size_t)T_out * V);
        printf("%s: log_probs given golden features, all %d frames: max|d| %.3g\n", utt, T_out, d);
        CHECKF(d <= TOL_LOGP_GIVEN_FEATS, "%s: log_probs max |d| %.3g > %.1g", utt, d,
               TOL_LOGP_GIVEN_FEATS);
        free(in);
        free(out);
        npy_free(&feat);
        npy_free(&logp);
        cJSON_Delete(res);
    }
    fixture_close(&fx);
}

/* ---- end to end, one utterance at a time (inference.py --transcribe_wav) ---------------- */

typedef struct {
    float *input; /* model_input copy */
    int rows, cols;
    float *logp; /* log_probs copy (frames, vocab) */
    int n_logp;
} capture_t;

static void capture(void *user, const char *name, const float *data, int rows, int cols)
{
    capture_t *c = user;
    if (!strcmp(name, "model_input")) {
        c->input = malloc(sizeof(float) * (size_t)rows * cols);
        memcpy(c->input, data, sizeof(float) * (size_t)rows * cols);
        c->rows = rows;
        c->cols = cols;
    } else if (!strcmp(name, "log_probs")) {
        c->logp = malloc(sizeof(float) * (size_t)rows * cols);
        memcpy(c->logp, data, sizeof(float) * (size_t)rows * cols);
        c->n_logp = rows * cols;
    }
}

TEST(jasper_end_to_end_matches_dle)
{
    fixture_t fx;
    OPEN_FIXTURE(&fx, 12.0);
    const jasper_config_t *cfg = jasper_config(fx.m);
    const int V = jasper_vocab(fx.m);
    for (int u = 0; u < 4; u++) {
        const char *utt = golden_jasper_utts[u];
        cJSON *res = golden_jasper_json(utt, "result.json");
        npy_array_t wav, feat, logp, ids;
        CHECK(res);
        CHECK_OK(golden_jasper_npy(&wav, utt, "waveform.npy"));
        CHECK_OK(golden_jasper_npy(&feat, utt, "features.npy"));
        CHECK_OK(golden_jasper_npy(&logp, utt, "log_probs.npy"));
        CHECK_OK(golden_jasper_npy(&ids, utt, "greedy_ids.npy"));
        capture_t cap = {0};
        jasper_run_opts_t o = {.stage = capture, .stage_user = &cap};
        jasper_result_t r;
        hark_err_t err = {0};
        CHECK_OK(jasper_run(fx.w, wav.data, wav.count, &o, &r, &err));
        /* features: the golden [64, T_feat] is the model input without pad_leading */
        int T_feat = (int)feat.shape[1], P = cfg->pad_leading;
        CHECK_EQ_INT(cap.rows, T_feat + P);
        CHECK_EQ_INT(json_int(res, "feat_T_padded"), T_feat);
        for (int i = 0; i < P * cap.cols; i++)
            CHECK(cap.input[i] == 0.0f);
        double df = diff_transposed(cap.input + (size_t)P * cap.cols, feat.data, T_feat, cap.cols,
                                    T_feat);
        /* log-probs (all frames), greedy ids (valid frames exact), text */
        CHECK_EQ_INT(r.n_frames, logp.shape[0]);
        CHECK_EQ_INT(r.len_out, json_int(res, "out_len"));
        CHECK_EQ_INT(cap.n_logp, (int)logp.count);
        /* valid frames: what the README's end-to-end figure covers */
        double dl = test_max_abs_diff(cap.logp, logp.data, (size_t)r.len_out * V);
        double dl_all = test_max_abs_diff(cap.logp, logp.data, logp.count);
        int id_valid_diff = 0, id_all_diff = 0;
        for (int s = 0; s < r.n_frames; s++) {
            int g = (int)((float *)ids.data)[s];
            if (r.frame_ids[s] != g) {
                id_all_diff++;
                id_valid_diff += s < r.len_out;
            }
        }
        printf("%s: features max|d| %.3g; log_probs max|d| %.3g valid, %.3g all frames; ids "
               "differing: %d valid, %d all; text '%s'\n",
               utt, df, dl, dl_all, id_valid_diff, id_all_diff, r.text);
        CHECKF(df <= TOL_FEATS, "%s: features max |d| %.3g > %.1g", utt, df, TOL_FEATS);
        CHECKF(dl <= TOL_LOGP_END_TO_END, "%s: log_probs max |d| %.3g > %.1g", utt, dl,
               TOL_LOGP_END_TO_END);
        CHECKF(id_valid_diff == 0, "%s: %d greedy ids differ on the valid frames", utt,
               id_valid_diff);
        const char *want = json_str(res, "text_inference_py");
        CHECK(want);
        CHECKF(!strcmp(r.text, want), "%s: text '%s', DLE '%s'", utt, r.text, want);
        free(cap.input);
        free(cap.logp);
        jasper_result_free(&r);
        npy_free(&wav);
        npy_free(&feat);
        npy_free(&logp);
        npy_free(&ids);
        cJSON_Delete(res);
    }
    fixture_close(&fx);
}
