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
#include <unistd.h>

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
        double df =
            diff_transposed(cap.input + (size_t)P * cap.cols, feat.data, T_feat, cap.cols, T_feat);
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

/* DLE's collapse of per-frame ids (helpers.ctc_decoder_predictions_tensor) into text. */
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

/* ---- DLE's padded batch of four (collate_fn zero padding, batch/) ------------------------ */

TEST(jasper_padded_batch_matches_dle)
{
    fixture_t fx;
    OPEN_FIXTURE(&fx, 12.0);
    const jasper_config_t *cfg = jasper_config(fx.m);
    const int V = jasper_vocab(fx.m), F = cfg->n_filt, P = cfg->pad_leading;
    cJSON *bres = golden_jasper_json("batch", "result.json");
    npy_array_t bfeat, blogp, bids, blens;
    CHECK(bres);
    CHECK_OK(golden_jasper_npy(&bfeat, "batch", "features.npy"));
    CHECK_OK(golden_jasper_npy(&blogp, "batch", "log_probs.npy"));
    CHECK_OK(golden_jasper_npy(&bids, "batch", "greedy_ids.npy"));
    CHECK_OK(golden_jasper_npy(&blens, "batch", "out_lens.npy"));
    const int N = json_int(bres, "audio_padded_len"), T_feat = (int)bfeat.shape[2];
    const int T_out = (int)blogp.shape[1];
    const cJSON *texts = cJSON_GetObjectItemCaseSensitive(bres, "texts_inference_py");
    float *row = calloc((size_t)N, sizeof(float));
    float *in = calloc((size_t)(T_feat + P) * F, sizeof(float));
    float *logp = calloc((size_t)T_out * V, sizeof(float));
    int *ids = calloc((size_t)T_out, sizeof(int));
    char text[4096];
    for (int b = 0; b < 4; b++) {
        npy_array_t wav;
        CHECK_OK(golden_jasper_npy(&wav, golden_jasper_utts[b], "waveform.npy"));
        CHECK((int)wav.count <= N);
        memset(row, 0, sizeof(float) * (size_t)N);
        memcpy(row, wav.data, sizeof(float) * wav.count);
        int t_in = 0, len_in = 0, len_out = 0;
        hark_err_t err = {0};
        CHECK_OK(jasper_features(fx.m, row, (size_t)N, wav.count, in, &t_in, &len_in, &err));
        CHECK_EQ_INT(t_in, T_feat + P);
        const float *gf = (const float *)bfeat.data + (size_t)b * F * T_feat;
        double df = diff_transposed(in + (size_t)P * F, gf, T_feat, F, T_feat);
        CHECK_OK(jasper_forward(fx.w, in, t_in, len_in, logp, &len_out, NULL, NULL, &err));
        CHECK_EQ_INT(len_out, (int)((float *)blens.data)[b]);
        const float *gl = (const float *)blogp.data + (size_t)b * T_out * V;
        double dl = test_max_abs_diff(logp, gl, (size_t)len_out * V);
        int id_diff = 0, id_all_diff = 0;
        for (int s = 0; s < T_out; s++) {
            const float *r = logp + (size_t)s * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (r[v] > r[best])
                    best = v;
            ids[s] = best;
            int g = (int)((float *)bids.data)[(size_t)b * T_out + s];
            id_all_diff += best != g;
            id_diff += best != g && s < len_out;
        }
        collapse(cfg, ids, T_out, text, sizeof text);
        printf("batch row %d: features max|d| %.3g, log_probs max|d| %.3g (valid), ids "
               "differing %d valid / %d all\n",
               b, df, dl, id_diff, id_all_diff);
        CHECKF(df <= TOL_FEATS, "row %d: features max |d| %.3g", b, df);
        CHECKF(dl <= TOL_LOGP_END_TO_END, "row %d: log_probs max |d| %.3g", b, dl);
        CHECKF(id_diff == 0, "row %d: %d greedy ids differ on the valid frames", b, id_diff);
        const cJSON *want = cJSON_GetArrayItem(texts, b);
        CHECK(cJSON_IsString(want));
        CHECKF(!strcmp(text, want->valuestring), "row %d: text '%s', DLE '%s'", b, text,
               want->valuestring);
        npy_free(&wav);
    }
    free(row);
    free(in);
    free(logp);
    free(ids);
    npy_free(&bfeat);
    npy_free(&blogp);
    npy_free(&bids);
    npy_free(&blens);
    cJSON_Delete(bres);
    fixture_close(&fx);
}

/* ---- bad input ----------------------------------------------------------------------------- */

TEST(jasper_bad_audio_is_an_error)
{
    fixture_t fx;
    OPEN_FIXTURE(&fx, 1.0);
    jasper_result_t r;
    hark_err_t err = {0};
    float x[20000];
    unsigned seed = 7;
    for (int i = 0; i < 20000; i++)
        x[i] = 0.1f * test_randf(&seed);
    CHECK_EQ_INT(jasper_run(fx.w, x, 0, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "empty"));
    CHECK_EQ_INT(jasper_run(fx.w, x, 100, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "too short"));
    x[5000] = NAN;
    CHECK_EQ_INT(jasper_run(fx.w, x, 16000, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "NaN"));
    x[5000] = INFINITY;
    CHECK_EQ_INT(jasper_run(fx.w, x, 16000, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    x[5000] = 0;
    CHECK_EQ_INT(jasper_run(fx.w, x, 20000, NULL, &r, &err), HARK_ERR_TOO_LARGE);
    /* the shortest accepted audio and a silent one decode */
    size_t nmin = jasper_min_samples(fx.m);
    CHECK_OK(jasper_run(fx.w, x, nmin, NULL, &r, &err));
    CHECK(r.n_frames == jasper_frames_out(fx.m, jasper_frames_in(fx.m, nmin)));
    jasper_result_free(&r);
    memset(x, 0, sizeof x);
    CHECK_OK(jasper_run(fx.w, x, 16000, NULL, &r, &err));
    CHECK(r.text != NULL);
    jasper_result_free(&r);
    fixture_close(&fx);
}

static int copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int ok = a && b;
    char buf[1 << 16];
    size_t k;
    while (ok && (k = fread(buf, 1, sizeof buf, a)) > 0)
        ok = fwrite(buf, 1, k, b) == k;
    if (a)
        fclose(a);
    if (b && fclose(b))
        ok = 0;
    return ok ? 0 : -1;
}

static int write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    fputs(s, f);
    return fclose(f);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    if (s)
        s[got] = 0;
    fclose(f);
    return s;
}

/* A copy of the converted model in tmp/m/1 whose files the test then spoils. */
static int model_copy(test_ctx_t *t, char *dir, size_t n, char *why, size_t nwhy)
{
    const char *src = golden_jasper_model_dir(why, nwhy);
    if (!src)
        return 1;
    char a[1024], b[1024];
    snprintf(dir, n, "%s/m", test_tmpdir(t));
    snprintf(a, sizeof a, "mkdir -p '%s/1'", dir);
    if (system(a) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        const char *f = i ? "model.safetensors" : "model.json";
        snprintf(a, sizeof a, "%s/m/1/%s", src, f);
        snprintf(b, sizeof b, "%s/1/%s", dir, f);
        if (copy_file(a, b))
            return -1;
    }
    return 0;
}

TEST(jasper_bad_model_files_are_errors)
{
    char dir[600], why[512], p[800];
    int r = model_copy(t, dir, sizeof dir, why, sizeof why);
    if (r == 1)
        SKIP(why);
    CHECK(r == 0);
    jasper_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK_OK(jasper_load(dir, 1, &m, &err));
    jasper_destroy(m);
    snprintf(p, sizeof p, "%s/1/model.json", dir);
    char *json = slurp(p);
    CHECK(json);
    /* a kernel the weights do not have: the tensor is named with both shapes */
    char *w = strstr(json, "\"kernel\": 11");
    CHECK(w);
    memcpy(w, "\"kernel\": 13", 12);
    CHECK_OK(write_text(p, json));
    CHECK_EQ_INT(jasper_load(dir, 1, &m, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "encoder.layers.0.conv.0.weight") && strstr(err.msg, "13"), "%s",
           err.msg);
    memcpy(w, "\"kernel\": 11", 12);
    /* unsupported front end, broken JSON */
    char *k = strstr(json, "\"nemo-mel\"");
    CHECK(k);
    memcpy(k, "\"fbank\"   ", 10);
    CHECK_OK(write_text(p, json));
    CHECK_EQ_INT(jasper_load(dir, 1, &m, &err), HARK_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "features.kind"));
    memcpy(k, "\"nemo-mel\"", 10);
    CHECK_OK(write_text(p, "{\"format_version\": 1, "));
    CHECK_EQ_INT(jasper_load(dir, 1, &m, &err), HARK_ERR_FORMAT);
    CHECK_OK(write_text(p, json));
    free(json);
    /* a truncated weights file */
    snprintf(p, sizeof p, "%s/1/model.safetensors", dir);
    CHECK(truncate(p, 4096) == 0);
    CHECK(jasper_load(dir, 1, &m, &err) != HARK_OK);
    CHECK(m == NULL);
    CHECK(strstr(err.msg, "model.safetensors"));
    /* a NaN in a weight */
    char src[1024];
    snprintf(src, sizeof src, "%s/m/1/model.safetensors", golden_jasper_model_dir(why, sizeof why));
    CHECK_OK(copy_file(src, p));
    FILE *f = fopen(p, "r+b");
    CHECK(f);
    unsigned long long hl = 0;
    CHECK(fread(&hl, 8, 1, f) == 1 && hl < (1u << 20));
    char *hdr = calloc(1, hl + 1);
    CHECK(fread(hdr, 1, hl, f) == hl);
    cJSON *h = cJSON_Parse(hdr);
    free(hdr);
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(h, "decoder.layers.0.bias");
    CHECK(bias);
    long off = (long)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(bias, "data_offsets"), 0)
                   ->valuedouble;
    cJSON_Delete(h);
    float nan = NAN;
    CHECK(fseek(f, 8 + (long)hl + off + 4 * 3, SEEK_SET) == 0 && fwrite(&nan, 4, 1, f) == 1);
    fclose(f);
    CHECK_EQ_INT(jasper_load(dir, 1, &m, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "decoder.layers.0.bias") && strstr(err.msg, "not finite"), "%s",
           err.msg);
    /* no such directory */
    CHECK_EQ_INT(jasper_load("/nonexistent-hark", 1, &m, &err), HARK_ERR_IO);
}
