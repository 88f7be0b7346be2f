/* GPU tests for src/model/wenet/conformer_gpu.c: the WeNet golden set in FP32 (encoder and CTC
 * log-probs within 1e-4 relative RMS of WeNet for all 5 utterances, greedy argmax identical),
 * FP16 (errors reported; greedy tokens identical) and BF16 (errors reported, tokens reported),
 * the padded batch vs each utterance alone, and GPU vs CPU (conformer.c) on synthetic
 * configurations (conv2d6 non-causal batch_norm, conv2d8, abs_pos, post-norm, chunk masks) in
 * FP32, FP16 and BF16; the chunk-streaming pool vs conformer_forward_chunks, and its FP16 / BF16
 * forward against its FP32 one stage by stage (the pool's trace). The golden model comes from
 * $HARK_SHARED/data/golden/wenet_u2pp_conformer_small/converted/m when present (the device
 * machine), else from tests/support/golden_model.c's conversion cache. */
#include "test.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "core/npy.h"
#include "gpu/gpu.h"
#include "hark.h"
#include "model/wenet/conformer.h"
#include "model/wenet/conformer_gpu.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"
#include "search/ctc.h"
#include "support/golden_model.h"
#include "model/synth_weights.h"

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GSET "golden/wenet_u2pp_conformer_small"
#define REL_TOL 1e-4     /* FP32 vs WeNet */
#define BATCH_TOL 1e-5   /* FP32 batch row vs the same utterance alone */
#define CPU_TOL 1e-4     /* FP32 GPU vs the CPU encoder (as vs WeNet) */
#define BATCH_TOL16 5e-3 /* FP16 batch row vs alone */
#define FP16_SANITY 5e-2 /* FP16 vs WeNet / CPU: reported; this only catches a broken path */
/* BF16: the FP16 tolerances times 8, the ratio of the unit roundoffs (2^-8 against 2^-11: 8
 * significant bits against 11), since every error they bound is made of 16-bit roundings */
#define BF16_SCALE 8.0

static const char *prec_name(int prec)
{
    return prec == CONFORMER_GPU_FP16 ? "fp16" : prec == CONFORMER_GPU_BF16 ? "bf16" : "fp32";
}

/* an FP16 tolerance for a 16-bit precision */
static double tol_prec(int prec, double fp16_tol)
{
    return prec == CONFORMER_GPU_BF16 ? BF16_SCALE * fp16_tol : fp16_tol;
}

static const char *const UTTS[5] = {"librispeech-1995-1837-0001", "jfk",
                                    "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                    "cards-001"};

/* ---- the converted golden model ------------------------------------------------------------ */

typedef struct {
    wenet_config_t cfg;
    safetensors_t *st;
    conformer_gpu_model_t *m;
} golden_t;

/* 0 ok; 1 skip (why); -1 failure (why) */
static int golden_open(golden_t *g, int precisions, char *why, size_t nwhy)
{
    memset(g, 0, sizeof *g);
    int r = golden_wenet_open(&g->cfg, &g->st, why, nwhy);
    if (r)
        return r;
    hark_err_t err = {0};
    if (conformer_gpu_model_create_st(&g->cfg, g->st, precisions, &g->m, &err) != HARK_OK) {
        snprintf(why, nwhy, "conformer_gpu_model_create_st: %.400s", err.msg);
        return -1;
    }
    return 0;
}

static void golden_close(golden_t *g)
{
    conformer_gpu_model_destroy(g->m);
    st_close(g->st);
}

#define OPEN_GOLDEN(g, prec)                                                                       \
    do {                                                                                           \
        char why_[600];                                                                            \
        int r_ = golden_open(&(g), prec, why_, sizeof why_);                                       \
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

static cJSON *greedy_field(cJSON *res, const char *utt, const char *field)
{
    return cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, utt), "full"),
                            "ctc_greedy_search"),
        field);
}

/* ---- running the GPU model on host data ---------------------------------------------------- */

/* how gpu_run's states run the feed-forward modules (AUTO: the state's default) */
static conformer_ffn_mode_t run_ffn = CONFORMER_FFN_AUTO;

/* feats (batch, t_max, in_dim) host → enc (batch, t_out, D), logp (batch, t_out, V) host
 * (hark_malloc'ed), enc_lens; a fresh state of the given precision. 0 or a status (err). */
static int gpu_run(const conformer_gpu_model_t *m, int prec, const conformer_opts_t *o,
                   const float *feats, const int *lens, int batch, int t_max, float **enc,
                   float **logp, int *enc_lens, int *t_out, hark_err_t *err)
{
    const wenet_config_t *c = conformer_gpu_config(m);
    conformer_gpu_state_t *s = NULL;
    float *d_feats = NULL, *d_enc = NULL, *d_logp = NULL;
    int to = conformer_gpu_out_len(m, t_max);
    size_t nf = (size_t)batch * t_max * c->input_dim, ne = (size_t)batch * to * c->d_model;
    size_t nl = (size_t)batch * to * c->vocab_size;
    *enc = hark_malloc((ne + 1) * sizeof(float));
    *logp = hark_malloc((nl + 1) * sizeof(float));
    *t_out = to;
    int rc = conformer_gpu_state_create(m, prec, batch, t_max, &s, err);
    if (rc)
        goto done;
    if (run_ffn != CONFORMER_FFN_AUTO)
        conformer_gpu_set_fused_ffn(s, run_ffn);
    rc = HARK_ERR_CUDA;
    /* inputs go in on the state's stream: a cudaMemcpy from pageable memory may return before
     * the data lands, and the state's (non-blocking) stream does not wait for the legacy one */
    cudaStream_t st = (cudaStream_t)conformer_gpu_stream(s);
    if (cudaMalloc((void **)&d_feats, nf * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d_enc, (ne + 1) * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&d_logp, (nl + 1) * sizeof(float)) != cudaSuccess ||
        cudaMemcpyAsync(d_feats, feats, nf * sizeof(float), cudaMemcpyHostToDevice, st) !=
            cudaSuccess ||
        cudaMemsetAsync(d_enc, 0xff, ne * sizeof(float), st) != cudaSuccess || /* NaN poison */
        cudaMemsetAsync(d_logp, 0xff, nl * sizeof(float), st) != cudaSuccess) {
        err_set(err, rc, "test: cuda setup");
        goto done;
    }
    if ((rc = conformer_gpu_forward(s, o, d_enc, enc_lens, d_feats, lens, batch, t_max, err)) ||
        (rc = conformer_gpu_ctc_log_probs(s, d_logp, d_enc, enc_lens, batch, to, err)) ||
        (rc = conformer_gpu_sync(s, err)))
        goto done;
    rc = HARK_ERR_CUDA;
    if (cudaMemcpy(*enc, d_enc, ne * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(*logp, d_logp, nl * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        err_set(err, rc, "test: download");
        goto done;
    }
    rc = HARK_OK;
done:
    cudaFree(d_feats);
    cudaFree(d_enc);
    cudaFree(d_logp);
    conformer_gpu_state_destroy(s);
    return rc;
}

static int argmax_row(const float *row, int v)
{
    int best = 0;
    for (int k = 1; k < v; k++)
        best = row[k] > row[best] ? k : best;
    return best;
}

/* ---- golden: FP32, FP16 and BF16, every utterance alone ------------------------------------ */

static void golden_all(test_ctx_t *t, int prec)
{
    NEED_SHARED(GSET);
    golden_t g;
    OPEN_GOLDEN(g, prec);
    cJSON *res = load_results();
    CHECKF(res, "results.json");
    int d = g.cfg.d_model, v = g.cfg.vocab_size, h16 = prec != CONFORMER_GPU_FP32;
    double worst_e = 0, worst_c = 0;
    int total_mis = 0, total_frames = 0;
    for (int u = 0; u < 5; u++) {
        npy_array_t fb, enc_ref, ctc_ref;
        CHECK_OK(load_golden(&fb, UTTS[u], "fbank.npy"));
        CHECK_OK(load_golden(&enc_ref, UTTS[u], "enc_full.npy"));
        CHECK_OK(load_golden(&ctc_ref, UTTS[u], "ctc_logprobs_full.npy"));
        int frames = (int)fb.shape[0], el = 0, t_out = 0;
        float *enc, *logp;
        hark_err_t err = {0};
        CHECKF(gpu_run(g.m, prec, NULL, fb.data, &frames, 1, frames, &enc, &logp, &el, &t_out,
                       &err) == HARK_OK,
               "%s: %s", UTTS[u], err.msg);
        CHECK_EQ_INT(el, enc_ref.shape[0]);
        CHECK_EQ_INT(t_out, el);
        double ee = test_rel_rms(enc, enc_ref.data, (size_t)el * d);
        double ec = test_rel_rms(logp, ctc_ref.data, (size_t)el * v);
        worst_e = ee > worst_e ? ee : worst_e;
        worst_c = ec > worst_c ? ec : worst_c;
        cJSON *fa = greedy_field(res, UTTS[u], "frame_argmax");
        cJSON *tok = greedy_field(res, UTTS[u], "tokens");
        CHECKF(cJSON_IsArray(fa) && cJSON_GetArraySize(fa) == el && cJSON_IsArray(tok),
               "%s: results.json frame_argmax/tokens", UTTS[u]);
        int mis = 0, ntok = 0, prev = -1, tok_ok = 1;
        for (int t2 = 0; t2 < el; t2++) {
            int best = argmax_row(logp + (size_t)t2 * v, v);
            mis += best != (int)cJSON_GetArrayItem(fa, t2)->valuedouble;
            if (best != prev && best != g.cfg.blank) { /* greedy CTC: collapse, drop blanks */
                tok_ok &= ntok < cJSON_GetArraySize(tok) &&
                          best == (int)cJSON_GetArrayItem(tok, ntok)->valuedouble;
                ntok++;
            }
            prev = best;
        }
        tok_ok &= ntok == cJSON_GetArraySize(tok);
        total_mis += mis;
        total_frames += el;
        printf("    %s %-42s T'=%3d enc rel %.3g ctc rel %.3g argmax mismatches %d tokens %s\n",
               prec_name(prec), UTTS[u], el, ee, ec, mis, tok_ok ? "equal" : "DIFFER");
        if (h16) {
            double tol = tol_prec(prec, FP16_SANITY);
            CHECKF(ee <= tol && ec <= tol, "%s %s enc %g ctc %g", UTTS[u], prec_name(prec), ee, ec);
        } else {
            CHECKF(ee <= REL_TOL, "%s enc rel %g", UTTS[u], ee);
            CHECKF(ec <= REL_TOL, "%s ctc rel %g", UTTS[u], ec);
            CHECKF(mis == 0, "%s: %d frames differ from WeNet's greedy argmax", UTTS[u], mis);
        }
        /* BF16 (8 significant bits) is not held to WeNet's greedy tokens: FP16's 11 keep them on
         * this peaked CTC head, and docs/benchmarks.md finds decisions lost from 10 bits down */
        CHECKF(tok_ok || prec == CONFORMER_GPU_BF16, "%s: greedy tokens differ from WeNet's",
               UTTS[u]);
        hark_free(enc), hark_free(logp);
        npy_free(&fb), npy_free(&enc_ref), npy_free(&ctc_ref);
    }
    printf("    %s worst: enc rel %.3g, ctc rel %.3g, argmax mismatches %d of %d frames\n",
           prec_name(prec), worst_e, worst_c, total_mis, total_frames);
    cJSON_Delete(res);
    golden_close(&g);
}

GPU_TEST(conformer_gpu_golden_fp32)
{
    golden_all(t, CONFORMER_GPU_FP32);
}

GPU_TEST(conformer_gpu_golden_fp16)
{
    golden_all(t, CONFORMER_GPU_FP16);
}

GPU_TEST(conformer_gpu_golden_bf16)
{
    golden_all(t, CONFORMER_GPU_BF16);
}

/* the same with the fused feed-forward kernel forced (AUTO leaves these few rows to the GEMMs) */
GPU_TEST(conformer_gpu_golden_fp16_fused_ffn)
{
    if (gpu_device_path_quiet(0, NULL) != GPU_PATH_HOPPER)
        SKIP("the fused FFN kernel runs on the Hopper path only (this GPU, or HARK_GPU_ARCH=sm80)");
    run_ffn = CONFORMER_FFN_FUSED;
    golden_all(t, CONFORMER_GPU_FP16);
    run_ffn = CONFORMER_FFN_AUTO;
}

GPU_TEST(conformer_gpu_golden_bf16_fused_ffn)
{
    if (gpu_device_path_quiet(0, NULL) != GPU_PATH_HOPPER)
        SKIP("the fused FFN kernel runs on the Hopper path only (this GPU, or HARK_GPU_ARCH=sm80)");
    run_ffn = CONFORMER_FFN_FUSED;
    golden_all(t, CONFORMER_GPU_BF16);
    run_ffn = CONFORMER_FFN_AUTO;
}

/* ---- golden: the 5 utterances as one padded batch ------------------------------------------ */

GPU_TEST(conformer_gpu_golden_padded_batch)
{
    NEED_SHARED(GSET);
    golden_t g;
    OPEN_GOLDEN(g, CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16 | CONFORMER_GPU_BF16);
    int d = g.cfg.d_model, v = g.cfg.vocab_size, fd = g.cfg.input_dim;
    npy_array_t fb[5], ref[5];
    int lens[5], t_max = 0;
    for (int b = 0; b < 5; b++) {
        CHECK_OK(load_golden(&fb[b], UTTS[b], "fbank.npy"));
        CHECK_OK(load_golden(&ref[b], UTTS[b], "enc_full.npy"));
        lens[b] = (int)fb[b].shape[0];
        t_max = lens[b] > t_max ? lens[b] : t_max;
    }
    t_max += 3;
    float *feats = hark_malloc(sizeof(float) * 5 * t_max * fd);
    for (int b = 0; b < 5; b++)
        for (int i = 0; i < t_max * fd; i++) /* NaN in the padding: must never reach a frame */
            feats[(size_t)b * t_max * fd + i] = i < lens[b] * fd ? ((float *)fb[b].data)[i] : NAN;
    static const int precs[3] = {CONFORMER_GPU_FP32, CONFORMER_GPU_FP16, CONFORMER_GPU_BF16};
    for (int p = 0; p < 3; p++) {
        int prec = precs[p];
        float *enc, *logp;
        int enc_lens[5], t_out;
        hark_err_t err = {0};
        CHECKF(gpu_run(g.m, prec, NULL, feats, lens, 5, t_max, &enc, &logp, enc_lens, &t_out,
                       &err) == HARK_OK,
               "%s", err.msg);
        for (int b = 0; b < 5; b++) {
            float *e1, *l1;
            int el1, t1;
            CHECKF(gpu_run(g.m, prec, NULL, fb[b].data, &lens[b], 1, lens[b], &e1, &l1, &el1, &t1,
                           &err) == HARK_OK,
                   "%s", err.msg);
            CHECK_EQ_INT(enc_lens[b], el1);
            const float *eb = enc + (size_t)b * t_out * d, *lb = logp + (size_t)b * t_out * v;
            double es = test_rel_rms(eb, e1, (size_t)el1 * d);
            double ls = test_rel_rms(lb, l1, (size_t)el1 * v);
            double eg = test_rel_rms(eb, ref[b].data, ref[b].count);
            int pad_zero = 1;
            for (size_t i = (size_t)el1 * d; i < (size_t)t_out * d; i++)
                pad_zero &= eb[i] == 0.0f;
            for (size_t i = (size_t)el1 * v; i < (size_t)t_out * v; i++)
                pad_zero &= lb[i] == 0.0f;
            printf("    %s batch row %d %-42s vs alone enc %.3g ctc %.3g, vs WeNet %.3g\n",
                   prec_name(prec), b, UTTS[b], es, ls, eg);
            double tol = p ? tol_prec(prec, BATCH_TOL16) : BATCH_TOL;
            CHECKF(es <= tol && ls <= tol, "%s row %d vs alone: enc %g ctc %g", prec_name(prec), b,
                   es, ls);
            CHECKF(eg <= (p ? tol_prec(prec, FP16_SANITY) : REL_TOL), "%s row %d vs WeNet %g",
                   prec_name(prec), b, eg);
            CHECKF(pad_zero, "row %d: padded frames are not zero", b);
            hark_free(e1), hark_free(l1);
        }
        hark_free(enc), hark_free(logp);
    }
    /* limits */
    conformer_gpu_state_t *s = NULL;
    hark_err_t err = {0};
    CHECK_OK(conformer_gpu_state_create(g.m, CONFORMER_GPU_FP32, 2, 100, &s, &err));
    int el[6], l6[6] = {10, 10, 10, 10, 10, 10};
    CHECK(conformer_gpu_forward(s, NULL, NULL, el, NULL, l6, 3, 100, &err) == HARK_ERR_TOO_LARGE);
    CHECK(conformer_gpu_forward(s, NULL, NULL, el, NULL, l6, 2, 101, &err) == HARK_ERR_TOO_LARGE);
    l6[1] = 60;
    CHECK(conformer_gpu_forward(s, NULL, NULL, el, NULL, l6, 2, 50, &err) == HARK_ERR_INVALID_ARG);
    conformer_gpu_state_destroy(s);
    hark_free(feats);
    for (int b = 0; b < 5; b++)
        npy_free(&fb[b]), npy_free(&ref[b]);
    golden_close(&g);
}

/* ---- synthetic configurations: GPU vs CPU -------------------------------------------------- */

/* generated weights: src/model/synth_weights.h */
typedef synth_weights_t bank_t;
#define bank_get synth_weights_get
#define bank_free synth_weights_free

static wenet_config_t synth_config(wenet_subsample_t sub, wenet_pos_t pos, int causal,
                                   wenet_cnn_norm_t norm, wenet_act_t act, int macaron,
                                   int normalize_before)
{
    wenet_config_t c;
    memset(&c, 0, sizeof c);
    c.num_mel_bins = c.input_dim = 23;
    c.has_cmvn = 1;
    c.d_model = 24;
    c.n_heads = 3;
    c.ffn_dim = 40;
    c.n_blocks = 2;
    c.subsample = sub;
    c.pos = pos;
    c.macaron = macaron;
    c.use_cnn_module = 1;
    c.cnn_kernel = 7;
    c.causal = causal;
    c.cnn_norm = norm;
    c.activation = act;
    c.normalize_before = normalize_before;
    c.max_len = 500;
    c.use_dynamic_chunk = 1;
    c.vocab_size = 13;
    return c;
}

/* batch of 4 (NaN padding) on the GPU in FP32, FP16 and BF16 vs the CPU encoder's batch: rel[p]
 * the relative RMS error for precision p = 0, 1, 2 */
static int gpu_vs_cpu(test_ctx_t *t, const wenet_config_t *cfg, const conformer_opts_t *o,
                      unsigned seed, double rel[3])
{
    bank_t bank = {.seed = seed};
    conformer_model_t *cm = NULL;
    conformer_gpu_model_t *gm = NULL;
    conformer_state_t *cs = NULL;
    hark_err_t err = {0};
    int ok = 0;
    enum { B = 4, TMAX = 157 };
    int lens[B] = {113, TMAX, 31, 64}, enc_lens[B];
    int fd = cfg->input_dim, d = cfg->d_model, v = cfg->vocab_size;
    float *feats = hark_malloc(sizeof(float) * B * TMAX * fd), *enc = NULL, *logp = NULL;
    unsigned r = seed * 7 + 1;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < TMAX * fd; i++)
            feats[(size_t)b * TMAX * fd + i] = i < lens[b] * fd ? 2.0f * test_randf(&r) : NAN;
    if (conformer_model_create(cfg, bank_get, &bank, &cm, &err) ||
        conformer_gpu_model_create(cfg, bank_get, &bank,
                                   CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16 | CONFORMER_GPU_BF16,
                                   &gm, &err)) {
        test_fail(t, __FILE__, __LINE__, "model_create: %s", err.msg);
        goto done;
    }
    int t_out = conformer_out_len(cm, TMAX);
    enc = hark_malloc(sizeof(float) * B * t_out * d);
    logp = hark_malloc(sizeof(float) * B * t_out * v);
    if (conformer_state_create(cm, B, TMAX, &cs, &err) ||
        conformer_forward(cs, o, enc, enc_lens, feats, lens, B, TMAX, &err) ||
        conformer_ctc_log_probs(cm, o, logp, enc, enc_lens, B, t_out, &err)) {
        test_fail(t, __FILE__, __LINE__, "cpu forward: %s", err.msg);
        goto done;
    }
    static const int precs[3] = {CONFORMER_GPU_FP32, CONFORMER_GPU_FP16, CONFORMER_GPU_BF16};
    for (int p = 0; p < 3; p++) {
        float *ge, *gl;
        int gel[B], gt;
        if (gpu_run(gm, precs[p], o, feats, lens, B, TMAX, &ge, &gl, gel, &gt, &err)) {
            test_fail(t, __FILE__, __LINE__, "gpu forward: %s", err.msg);
            hark_free(ge), hark_free(gl);
            goto done;
        }
        double e = 0;
        int same = gt == t_out;
        for (int b = 0; b < B; b++)
            same &= gel[b] == enc_lens[b];
        if (same) {
            double ee = test_rel_rms(ge, enc, (size_t)B * t_out * d);
            double el = test_rel_rms(gl, logp, (size_t)B * t_out * v);
            e = ee > el ? ee : el;
        } else {
            e = INFINITY;
        }
        rel[p] = e;
        hark_free(ge), hark_free(gl);
    }
    ok = 1;
done:
    conformer_state_destroy(cs);
    conformer_model_destroy(cm);
    conformer_gpu_model_destroy(gm);
    hark_free(feats), hark_free(enc), hark_free(logp);
    bank_free(&bank);
    return ok;
}

GPU_TEST(conformer_gpu_matches_cpu_synthetic)
{
    struct {
        const char *what;
        wenet_config_t cfg;
        int chunk, left;
    } cases[] = {
        {"conv2d6 rel_pos non-causal batch_norm swish",
         synth_config(SUBSAMPLE_CONV2D6, POS_REL, 0, CNN_NORM_BATCH, ACT_SWISH, 1, 1), -1, -1},
        {"conv2d6 abs_pos non-causal batch_norm relu",
         synth_config(SUBSAMPLE_CONV2D6, POS_ABS, 0, CNN_NORM_BATCH, ACT_RELU, 1, 1), -1, -1},
        {"conv2d8 rel_pos non-causal batch_norm gelu",
         synth_config(SUBSAMPLE_CONV2D8, POS_REL, 0, CNN_NORM_BATCH, ACT_GELU, 1, 1), -1, -1},
        {"conv2d rel_pos non-causal layer_norm swish, no macaron, post-norm",
         synth_config(SUBSAMPLE_CONV2D, POS_REL, 0, CNN_NORM_LAYER, ACT_SWISH, 0, 0), -1, -1},
        {"conv2d abs_pos causal batch_norm gelu, chunk 4 left 1",
         synth_config(SUBSAMPLE_CONV2D, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1), 4, 1},
        {"conv2d6 rel_pos non-causal layer_norm relu, chunk 5 all left",
         synth_config(SUBSAMPLE_CONV2D6, POS_REL, 0, CNN_NORM_LAYER, ACT_RELU, 1, 1), 5, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conformer_opts_t o = conformer_default_opts();
        o.chunk_size = cases[i].chunk;
        o.left_chunks = cases[i].left;
        double e[3] = {-1, -1, -1};
        if (!gpu_vs_cpu(t, &cases[i].cfg, &o, 300 + (unsigned)i, e))
            return;
        printf("    %-66s gpu vs cpu fp32 %.3g fp16 %.3g bf16 %.3g\n", cases[i].what, e[0], e[1],
               e[2]);
        CHECKF(e[0] <= CPU_TOL, "%s: fp32 gpu vs cpu rel %g", cases[i].what, e[0]);
        CHECKF(e[1] <= FP16_SANITY, "%s: fp16 gpu vs cpu rel %g", cases[i].what, e[1]);
        CHECKF(e[2] <= tol_prec(CONFORMER_GPU_BF16, FP16_SANITY), "%s: bf16 gpu vs cpu rel %g",
               cases[i].what, e[2]);
    }
}

GPU_TEST(conformer_gpu_refuses_missing_precision)
{
    wenet_config_t c = synth_config(SUBSAMPLE_CONV2D, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1);
    bank_t bank = {.seed = 1};
    conformer_gpu_model_t *m = NULL;
    conformer_gpu_state_t *s = NULL;
    hark_err_t err = {0};
    CHECK_OK(conformer_gpu_model_create(&c, bank_get, &bank, CONFORMER_GPU_FP32, &m, &err));
    CHECK(conformer_gpu_state_create(m, CONFORMER_GPU_FP16, 1, 100, &s, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(conformer_gpu_state_create(m, CONFORMER_GPU_BF16, 1, 100, &s, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(conformer_gpu_state_create(m, CONFORMER_GPU_FP32, 513, 100, &s, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(s == NULL);
    conformer_gpu_model_destroy(m);
    /* a BF16-only model: its state runs; FP16 and FP32 states are refused; unknown flags too */
    CHECK_OK(conformer_gpu_model_create(&c, bank_get, &bank, CONFORMER_GPU_BF16, &m, &err));
    CHECK(conformer_gpu_state_create(m, CONFORMER_GPU_FP16, 1, 100, &s, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(conformer_gpu_state_create(m, CONFORMER_GPU_FP32, 1, 100, &s, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK_OK(conformer_gpu_state_create(m, CONFORMER_GPU_BF16, 1, 100, &s, &err));
    conformer_gpu_state_destroy(s);
    conformer_gpu_model_destroy(m);
    m = NULL;
    CHECK(conformer_gpu_model_create(&c, bank_get, &bank, 8, &m, &err) == HARK_ERR_INVALID_ARG);
    CHECK(m == NULL);
    bank_free(&bank);
}
/* forward + CTC on a state with device buffers ready; enc/logp/arg downloaded into host arrays */
static int run_state(conformer_gpu_state_t *s, const float *d_feats, float *d_enc, float *d_logp,
                     int *d_arg, const int *lens, int batch, int t_max, int te, size_t ne,
                     size_t nl, float *enc, float *logp, int *arg, int *arg2, hark_err_t *err)
{
    int el[8];
    int rc = conformer_gpu_forward(s, NULL, d_enc, el, d_feats, lens, batch, t_max, err);
    /* first without log-probs (FP16: no logits in memory), then with them */
    if (!rc)
        rc = conformer_gpu_ctc_argmax(s, d_arg, NULL, d_logp, 0, d_enc, el, batch, te, err);
    if (!rc && cudaMemcpyAsync(arg2, d_arg, (size_t)batch * te * sizeof(int),
                               cudaMemcpyDeviceToHost, (cudaStream_t)conformer_gpu_stream(s)))
        rc = err_set(err, HARK_ERR_CUDA, "download");
    if (!rc)
        rc = conformer_gpu_ctc_argmax(s, d_arg, NULL, d_logp, 1, d_enc, el, batch, te, err);
    if (!rc)
        rc = conformer_gpu_sync(s, err);
    if (!rc &&
        (cudaMemcpy(enc, d_enc, ne * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(logp, d_logp, nl * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess ||
         cudaMemcpy(arg, d_arg, (size_t)batch * te * sizeof(int), cudaMemcpyDeviceToHost) !=
             cudaSuccess))
        rc = err_set(err, HARK_ERR_CUDA, "download");
    return rc;
}

/* a recorded CUDA graph replays the same forward with new lengths; ctc_argmax agrees with the
 * log-probs it writes */
GPU_TEST(conformer_gpu_graph_replay_matches_direct)
{
    wenet_config_t c = synth_config(SUBSAMPLE_CONV2D, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1);
    bank_t bank = {.seed = 9};
    conformer_gpu_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK_OK(conformer_gpu_model_create(
        &c, bank_get, &bank, CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16 | CONFORMER_GPU_BF16, &m,
        &err));
    enum { B = 3, TM = 97 };
    static const int la[B] = {97, 50, 13}, lb[B] = {60, 97, 0};
    const int *seq[4] = {la, la, lb, la};
    int te = conformer_gpu_out_len(m, TM);
    size_t nf = (size_t)B * TM * c.input_dim, ne = (size_t)B * te * c.d_model,
           nl = (size_t)B * te * c.vocab_size;
    float *feats = hark_malloc(nf * sizeof(float));
    unsigned r = 5;
    for (size_t i = 0; i < nf; i++)
        feats[i] = 2.0f * test_randf(&r);
    float *d_feats = NULL, *d_enc = NULL, *d_logp = NULL;
    int *d_arg = NULL;
    CHECK(cudaMalloc((void **)&d_feats, nf * sizeof(float)) == cudaSuccess &&
          cudaMalloc((void **)&d_enc, ne * sizeof(float)) == cudaSuccess &&
          cudaMalloc((void **)&d_logp, nl * sizeof(float)) == cudaSuccess &&
          cudaMalloc((void **)&d_arg, (size_t)B * te * sizeof(int)) == cudaSuccess);
    CHECK(cudaMemcpy(d_feats, feats, nf * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    float *e1 = hark_malloc(ne * 4), *e2 = hark_malloc(ne * 4), *l1 = hark_malloc(nl * 4),
          *l2 = hark_malloc(nl * 4);
    int *a1 = hark_malloc((size_t)B * te * sizeof(int)), *a2 = hark_malloc((size_t)B * te * 4);
    int *n1 = hark_malloc((size_t)B * te * sizeof(int)), *n2 = hark_malloc((size_t)B * te * 4);
    static const int precs[3] = {CONFORMER_GPU_FP32, CONFORMER_GPU_FP16, CONFORMER_GPU_BF16};
    for (int p = 0; p < 3; p++) {
        int prec = precs[p];
        conformer_gpu_state_t *sg = NULL, *sd = NULL;
        CHECK_OK(conformer_gpu_state_create(m, prec, B, TM, &sg, &err));
        CHECK_OK(conformer_gpu_state_create(m, prec, B, TM, &sd, &err));
        conformer_gpu_set_graphs(sg, 1);
        conformer_gpu_set_graphs(sd, 0);
        for (int it = 0; it < 4; it++) {
            CHECK_OK(run_state(sg, d_feats, d_enc, d_logp, d_arg, seq[it], B, TM, te, ne, nl, e1,
                               l1, a1, n1, &err));
            CHECK_OK(run_state(sd, d_feats, d_enc, d_logp, d_arg, seq[it], B, TM, te, ne, nl, e2,
                               l2, a2, n2, &err));
            double ee = test_rel_rms(e1, e2, ne), el = test_rel_rms(l1, l2, nl);
            int same = 1, consistent = 1;
            for (int i = 0; i < B * te; i++) {
                same &= a1[i] == a2[i] && n1[i] == n2[i] && n1[i] == a1[i];
                int row = i / te, t2 = i % te;
                if (t2 < conformer_gpu_out_len(m, seq[it][row]))
                    consistent &= a1[i] == argmax_row(l1 + (size_t)i * c.vocab_size, c.vocab_size);
            }
            CHECKF(ee == 0 && el == 0 && same, "%s call %d: graph vs direct enc %g logp %g",
                   prec_name(prec), it, ee, el);
            CHECKF(consistent, "%s call %d: ctc_argmax differs from its log-probs", prec_name(prec),
                   it);
        }
        conformer_gpu_state_destroy(sg);
        conformer_gpu_state_destroy(sd);
    }
    cudaFree(d_feats), cudaFree(d_enc), cudaFree(d_logp), cudaFree(d_arg);
    hark_free(feats), hark_free(e1), hark_free(e2), hark_free(l1), hark_free(l2);
    hark_free(a1), hark_free(a2), hark_free(n1), hark_free(n2);
    conformer_gpu_model_destroy(m);
    bank_free(&bank);
}

GPU_TEST(conformer_gpu_fp16_refuses_unsupported_sizes)
{
    wenet_config_t c = synth_config(SUBSAMPLE_CONV2D, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1);
    c.d_model = 20; /* not a multiple of 8 */
    c.n_heads = 2;
    bank_t bank = {.seed = 1};
    conformer_gpu_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK(conformer_gpu_model_create(&c, bank_get, &bank, CONFORMER_GPU_FP16, &m, &err) ==
          HARK_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "fp16") != NULL);
    CHECK(conformer_gpu_model_create(&c, bank_get, &bank, CONFORMER_GPU_BF16, &m, &err) ==
          HARK_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "bf16") != NULL);
    CHECK_OK(conformer_gpu_model_create(&c, bank_get, &bank, CONFORMER_GPU_FP32, &m, &err));
    conformer_gpu_model_destroy(m);
    bank_free(&bank);
}

/* ---- chunk streaming on the device vs conformer_forward_chunks ----------------------------- */

enum { CK_NS = 3, CK_GUARD = 16 };

/* the GPU step's top-k output of ck_run (k 0: whole rows of log-probs instead) */
typedef struct {
    int k, blank;
    int **idx;         /* (NS) each stream's rows of k ids */
    float **val, **bl; /* (NS) their log-probs; the blank's */
} ck_topk_t;

/* Streams the NS synthetic utterances chunk by chunk, batched (stream s joins at step start[s])
 * or (alone >= 0) that stream only; GPU pool (gp, precision) or CPU (cm). Writes each stream's
 * encoder rows and CTC log-probs into enc[s], logp[s] (each followed by CK_GUARD NaN guards the
 * run must not touch), or with tk (GPU) the rows' top k into tk's arrays instead of logp.
 * Returns the number of steps that batched more than one stream, -1 on a failure (reported). */
static int ck_run_at(test_ctx_t *t, const wenet_config_t *c, conformer_model_t *cm,
                     conformer_gpu_chunks_t *gp, float *const *fb, const int *frames,
                     const int *chunk, const int *left, const int *start, int alone,
                     float *const *enc, float *const *logp, int *n_rows, const ck_topk_t *tk,
                     const int *slot_of)
{
    int rate = (int)c->subsample, rc = wenet_right_context(c), d = c->d_model, v = c->vocab_size;
    int max_window = 0, cur[CK_NS] = {0}, mixed = 0;
    for (int s = 0; s < CK_NS; s++) {
        int w = (chunk[s] - 1) * rate + rc + 1;
        max_window = w > max_window ? w : max_window;
        n_rows[s] = 0;
    }
    hark_err_t err = {0};
    conformer_stream_t *sts[CK_NS] = {NULL};
    conformer_state_t *state = NULL;
    float *e_step = hark_malloc(sizeof(float) * CK_NS * (size_t)max_window * d);
    float *l_step = hark_malloc(sizeof(float) * CK_NS * (size_t)max_window * v);
    int kk = tk ? tk->k : 1;
    int *i_step = hark_malloc(sizeof(int) * CK_NS * (size_t)max_window * kk);
    float *v_step = hark_malloc(sizeof(float) * CK_NS * (size_t)max_window * kk);
    float *b_step = hark_malloc(sizeof(float) * CK_NS * (size_t)max_window);
    int ok = 1;
    for (int s = 0; s < CK_NS; s++) {
        int cache = left[s] < 0 ? -1 : chunk[s] * left[s];
        if (gp)
            conformer_gpu_chunks_reset(gp, slot_of ? slot_of[s] : s, cache);
        else if (conformer_stream_create(cm, cache, &sts[s], &err))
            ok = 0;
    }
    if (!gp && conformer_state_create(cm, CK_NS, max_window, &state, &err))
        ok = 0;
    for (int step = 0; ok; step++) {
        const float *f[CK_NS];
        conformer_stream_t *cs[CK_NS];
        int fr[CK_NS], who[CK_NS], sl[CK_NS], n = 0, n_out[CK_NS];
        for (int s = 0; s < CK_NS; s++) {
            if ((alone >= 0 && s != alone) || (alone < 0 && step < start[s]) ||
                cur[s] >= frames[s] - rc)
                continue;
            int w = (chunk[s] - 1) * rate + rc + 1;
            fr[n] = cur[s] + w < frames[s] ? w : frames[s] - cur[s];
            f[n] = fb[s] + (size_t)cur[s] * c->input_dim;
            cs[n] = sts[s];
            sl[n] = slot_of ? slot_of[s] : s;
            who[n++] = s;
            cur[s] += chunk[s] * rate;
        }
        if (!n)
            break;
        mixed += n > 1;
        int total = 0;
        if (gp && tk) {
            conformer_ctc_topk_t q = {tk->k, tk->blank, i_step, v_step, b_step};
            ok = conformer_gpu_forward_chunks_topk(gp, sl, NULL, e_step, &q, n_out, f, fr, n,
                                                   &err) == HARK_OK;
            for (int j = 0; ok && j < n; j++)
                total += n_out[j];
        } else if (gp) {
            ok = conformer_gpu_forward_chunks(gp, sl, NULL, e_step, l_step, n_out, f, fr, n,
                                              &err) == HARK_OK;
            for (int j = 0; ok && j < n; j++)
                total += n_out[j];
        } else {
            ok =
                conformer_forward_chunks(state, cs, NULL, e_step, n_out, f, fr, n, &err) == HARK_OK;
            for (int j = 0; ok && j < n; j++)
                total += n_out[j];
            if (ok && total > 0)
                ok = conformer_ctc_log_probs(cm, NULL, l_step, e_step, &total, 1, total, &err) ==
                     HARK_OK;
        }
        const float *e = e_step, *l = l_step, *tv = v_step, *tb = b_step;
        const int *ti = i_step;
        for (int j = 0; ok && j < n; j++) {
            int s = who[j];
            size_t r0 = (size_t)n_rows[s], nr = (size_t)n_out[j];
            memcpy(enc[s] + r0 * d, e, sizeof(float) * nr * d);
            if (tk) {
                memcpy(tk->idx[s] + r0 * kk, ti, sizeof(int) * nr * kk);
                memcpy(tk->val[s] + r0 * kk, tv, sizeof(float) * nr * kk);
                memcpy(tk->bl[s] + r0, tb, sizeof(float) * nr);
            } else {
                memcpy(logp[s] + r0 * v, l, sizeof(float) * nr * v);
            }
            n_rows[s] += n_out[j];
            e += nr * d;
            l += nr * v;
            ti += nr * kk;
            tv += nr * kk;
            tb += nr;
        }
    }
    if (!ok)
        test_fail(t, __FILE__, __LINE__, "chunk run (%s): %s", gp ? "gpu" : "cpu", err.msg);
    for (int s = 0; s < CK_NS; s++)
        conformer_stream_destroy(sts[s]);
    conformer_state_destroy(state);
    hark_free(e_step), hark_free(l_step), hark_free(i_step), hark_free(v_step), hark_free(b_step);
    return ok ? mixed : -1;
}

/* ck_run_at with stream s in pool slot s */
static int ck_run(test_ctx_t *t, const wenet_config_t *c, conformer_model_t *cm,
                  conformer_gpu_chunks_t *gp, float *const *fb, const int *frames, const int *chunk,
                  const int *left, const int *start, int alone, float *const *enc,
                  float *const *logp, int *n_rows, const ck_topk_t *tk)
{
    return ck_run_at(t, c, cm, gp, fb, frames, chunk, left, start, alone, enc, logp, n_rows, tk,
                     NULL);
}

static int ck_guards_ok(const float *p, size_t n)
{
    for (int i = 0; i < CK_GUARD; i++)
        if (p[n + i] == p[n + i]) /* still NaN */
            return 0;
    return 1;
}

GPU_TEST(gpu_conformer_forward_chunks_matches_cpu)
{
    wenet_config_t cfgs[] = {
        synth_config(SUBSAMPLE_CONV2D8, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1),
        synth_config(SUBSAMPLE_CONV2D6, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1),
        synth_config(SUBSAMPLE_CONV2D, POS_REL, 0, CNN_NORM_BATCH, ACT_RELU, 0, 0),
        synth_config(SUBSAMPLE_CONV2D6, POS_ABS, 1, CNN_NORM_LAYER, ACT_SWISH, 0, 1),
    };
    static const int chunk[CK_NS] = {3, 5, 7}, left[CK_NS] = {-1, 0, 2}, start[CK_NS] = {0, 2, 1};
    static const int frames[CK_NS] = {211, 173, 97};
    static const int precs[2] = {CONFORMER_GPU_FP32, CONFORMER_GPU_FP16};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const wenet_config_t *c = &cfgs[ci];
        bank_t bank = {.seed = 1900 + (unsigned)ci};
        conformer_model_t *cm = NULL;
        conformer_gpu_model_t *gm = NULL;
        hark_err_t err = {0};
        CHECK_OK(conformer_model_create(c, bank_get, &bank, &cm, &err));
        CHECK_OK(conformer_gpu_model_create(c, bank_get, &bank,
                                            CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16, &gm, &err));
        int rate = (int)c->subsample, rc = wenet_right_context(c), d = c->d_model;
        int v = c->vocab_size, max_window = 0;
        float *fb[CK_NS], *ce[CK_NS], *cl[CK_NS], *ge[CK_NS], *gl[CK_NS], *ae[CK_NS], *al_[CK_NS];
        size_t ne[CK_NS], nl[CK_NS];
        unsigned r = 23 + (unsigned)ci;
        for (int s = 0; s < CK_NS; s++) {
            int w = (chunk[s] - 1) * rate + rc + 1;
            max_window = w > max_window ? w : max_window;
            fb[s] = hark_malloc(sizeof(float) * frames[s] * c->input_dim);
            for (int i = 0; i < frames[s] * c->input_dim; i++)
                fb[s][i] = 2.0f * test_randf(&r);
            int te = frames[s] / rate + 8;
            ne[s] = (size_t)te * d, nl[s] = (size_t)te * v;
            float **bufs[6] = {&ce[s], &cl[s], &ge[s], &gl[s], &ae[s], &al_[s]};
            for (int k = 0; k < 6; k++) {
                size_t nn = (k % 2 ? nl[s] : ne[s]) + CK_GUARD;
                *bufs[k] = hark_malloc(sizeof(float) * nn);
                for (size_t i = 0; i < nn; i++)
                    (*bufs[k])[i] = NAN;
            }
        }
        int n_cpu[CK_NS], n_gpu[CK_NS], n_al[CK_NS];
        CHECK(ck_run(t, c, cm, NULL, fb, frames, chunk, left, start, -1, ce, cl, n_cpu, NULL) > 3);
        for (int pi = 0; pi < 2; pi++) {
            int prec = precs[pi];
            conformer_gpu_chunks_t *gp = NULL;
            /* cap: every key of the longest stream (its cache keeps all history) */
            CHECK_OK(conformer_gpu_chunks_create(gm, prec, CK_NS, max_window, frames[0] / rate + 8,
                                                 &gp, &err));
            CHECK(ck_run(t, c, NULL, gp, fb, frames, chunk, left, start, -1, ge, gl, n_gpu, NULL) >
                  3);
            double tol = prec == CONFORMER_GPU_FP32 ? CPU_TOL : FP16_SANITY;
            double btol = prec == CONFORMER_GPU_FP32 ? BATCH_TOL : BATCH_TOL16;
            for (int s = 0; s < CK_NS; s++) {
                CHECK_EQ_INT(n_gpu[s], n_cpu[s]);
                CHECK_EQ_INT(conformer_gpu_chunks_offset(gp, s), n_cpu[s]);
                double ee = test_rel_rms(ge[s], ce[s], (size_t)n_cpu[s] * d);
                double el = test_rel_rms(gl[s], cl[s], (size_t)n_cpu[s] * v);
                CHECKF(ee <= tol && el <= tol, "case %zu %s stream %d: enc %g ctc %g vs cpu", ci,
                       prec_name(prec), s, ee, el);
                CHECK(ck_guards_ok(ge[s], ne[s]) && ck_guards_ok(gl[s], nl[s]));
            }
            /* each stream alone on the pool = batched with the others at other offsets */
            for (int s = 0; s < CK_NS; s++) {
                float *aes[CK_NS], *als[CK_NS];
                for (int k = 0; k < CK_NS; k++)
                    aes[k] = ae[s], als[k] = al_[s];
                CHECK(ck_run(t, c, NULL, gp, fb, frames, chunk, left, start, s, aes, als, n_al,
                             NULL) >= 0);
                CHECK_EQ_INT(n_al[s], n_gpu[s]);
                double ee = test_rel_rms(ae[s], ge[s], (size_t)n_gpu[s] * d);
                double el = test_rel_rms(al_[s], gl[s], (size_t)n_gpu[s] * v);
                CHECKF(ee <= btol && el <= btol, "case %zu %s stream %d alone vs batched: %g %g",
                       ci, prec_name(prec), s, ee, el);
                CHECK(ck_guards_ok(ae[s], ne[s]) && ck_guards_ok(al_[s], nl[s]));
            }
            /* the same run with the CTC head reduced on the device to each row's top k (5; the
             * vocabulary's all when smaller) and the blank's: exactly ctc_row_topk of the whole
             * rows, the encoder rows unchanged (the same kernels in the same order) */
            {
                int *ti[CK_NS];
                float *tv[CK_NS], *tb[CK_NS], *te[CK_NS], *rv = hark_malloc(sizeof(float) * 8);
                int kq = v < 5 ? v : 5, n_tk[CK_NS], *ri = hark_malloc(sizeof(int) * 8);
                for (int s = 0; s < CK_NS; s++) {
                    size_t te_rows = nl[s] / (size_t)v;
                    ti[s] = hark_malloc(sizeof(int) * te_rows * kq);
                    tv[s] = hark_malloc(sizeof(float) * te_rows * kq);
                    tb[s] = hark_malloc(sizeof(float) * te_rows);
                    te[s] = hark_malloc(sizeof(float) * (ne[s] + CK_GUARD));
                }
                ck_topk_t q = {kq, v / 2, ti, tv, tb};
                CHECK(ck_run(t, c, NULL, gp, fb, frames, chunk, left, start, -1, te, NULL, n_tk,
                             &q) > 3);
                int bad = 0, enc_same = 1;
                for (int s = 0; s < CK_NS; s++)
                    enc_same &= n_tk[s] == n_gpu[s] &&
                                !memcmp(te[s], ge[s], sizeof(float) * (size_t)n_gpu[s] * d);
                CHECKF(enc_same,
                       "case %zu %s: the top-k run's encoder rows differ from the first "
                       "run's (not deterministic?)",
                       ci, prec_name(prec));
                for (int s = 0; s < CK_NS; s++) {
                    for (int r0 = 0; enc_same && r0 < n_gpu[s]; r0++) {
                        const float *row = gl[s] + (size_t)r0 * v;
                        ctc_row_topk(row, v, kq, ri, rv);
                        bad += memcmp(ri, ti[s] + (size_t)r0 * kq, sizeof(int) * kq) != 0 ||
                               memcmp(rv, tv[s] + (size_t)r0 * kq, sizeof(float) * kq) != 0 ||
                               tb[s][r0] != row[v / 2];
                    }
                    hark_free(ti[s]), hark_free(tv[s]), hark_free(tb[s]), hark_free(te[s]);
                }
                CHECKF(bad == 0,
                       "case %zu %s: %d rows of the top-k step differ from the whole "
                       "rows' ctc_row_topk",
                       ci, prec_name(prec), bad);
                hark_free(rv), hark_free(ri);
            }
            /* a pool of more streams than one step takes (600 slots, steps of 512): the same
             * streams in slots past the step's size give the same rows; a step of 513 is
             * refused */
            {
                conformer_gpu_chunks_t *gq = NULL;
                static const int far[CK_NS] = {599, 513, 0};
                CHECK_OK(conformer_gpu_chunks_create(gm, prec, 600, max_window,
                                                     frames[0] / rate + 8, &gq, &err));
                CHECK(ck_run_at(t, c, NULL, gq, fb, frames, chunk, left, start, -1, ae, al_, n_al,
                                NULL, far) > 3);
                for (int s = 0; s < CK_NS; s++) {
                    CHECK_EQ_INT(n_al[s], n_gpu[s]);
                    CHECK_EQ_INT(conformer_gpu_chunks_offset(gq, far[s]), n_gpu[s]);
                    double ee = test_rel_rms(ae[s], ge[s], (size_t)n_gpu[s] * d);
                    double el = test_rel_rms(al_[s], gl[s], (size_t)n_gpu[s] * v);
                    CHECKF(ee <= btol && el <= btol,
                           "case %zu %s stream %d in slot %d of 600: %g %g vs slot %d of 3", ci,
                           prec_name(prec), s, far[s], ee, el, s);
                }
                int many = 513, *sl = hark_malloc(sizeof(int) * many),
                    *no = hark_malloc(sizeof(int) * many);
                const float **fp = hark_malloc(sizeof(float *) * many);
                int *fr = hark_malloc(sizeof(int) * many);
                for (int i = 0; i < many; i++)
                    sl[i] = i, fp[i] = fb[0], fr[i] = max_window;
                CHECK(conformer_gpu_forward_chunks(gq, sl, NULL, NULL, NULL, no, fp, fr, many,
                                                   &err) == HARK_ERR_TOO_LARGE);
                CHECK_EQ_INT(conformer_gpu_chunks_offset(gq, 0), n_gpu[2]);
                hark_free(sl), hark_free(no), hark_free(fp), hark_free(fr);
                conformer_gpu_chunks_destroy(gq);
            }
            /* a chunk past the pool's window is refused, and nothing changes */
            int big = max_window + 1, n_out = -1, sl = 0, off = conformer_gpu_chunks_offset(gp, 0);
            const float *fp = fb[0];
            CHECK(conformer_gpu_forward_chunks(gp, &sl, NULL, NULL, NULL, &n_out, &fp, &big, 1,
                                               &err) == HARK_ERR_TOO_LARGE);
            CHECK_EQ_INT(conformer_gpu_chunks_offset(gp, 0), off);
            conformer_gpu_chunks_destroy(gp);
        }
        for (int s = 0; s < CK_NS; s++) {
            hark_free(fb[s]), hark_free(ce[s]), hark_free(cl[s]), hark_free(ge[s]);
            hark_free(gl[s]), hark_free(ae[s]), hark_free(al_[s]);
        }
        conformer_model_destroy(cm);
        conformer_gpu_model_destroy(gm);
        bank_free(&bank);
    }
}

/* ---- chunk streaming: where a 16-bit pool departs from FP32, stage by stage ------------------
 * The same chunk steps through an FP32 pool and an FP16 (BF16) pool of one model, every stage of
 * every step traced (conformer_gpu_chunks_set_trace): subsampling, each block's sub-modules,
 * encoder, ctc. Prints per stage the relative RMS of the 16-bit output against FP32's at the first
 * step (no cache yet: only this step's roundings) and the worst over the steps (the caches'
 * errors included), and the first stage past 1e-2; one GPU run tells where a divergence begins.
 * Fails when a stage passes the FP16 sanity bound (BF16: 8 times it). */

typedef struct {
    int stage, rows, cols;
    char name[64];
    float *x;
} ck_rec_t;

typedef struct {
    ck_rec_t *r;
    int n, cap, bad; /* bad: out of memory */
} ck_trace_t;

static void ck_trace_fn(void *user, int stage, const char *name, const float *x, int rows, int cols)
{
    ck_trace_t *tr = user;
    if (tr->bad)
        return;
    if (tr->n == tr->cap) {
        int cap = tr->cap ? 2 * tr->cap : 256;
        ck_rec_t *r = realloc(tr->r, sizeof *r * (size_t)cap);
        if (!r) {
            tr->bad = 1;
            return;
        }
        tr->r = r, tr->cap = cap;
    }
    ck_rec_t *e = &tr->r[tr->n];
    e->x = malloc(sizeof(float) * (size_t)rows * cols + 1);
    if (!e->x) {
        tr->bad = 1;
        return;
    }
    memcpy(e->x, x, sizeof(float) * (size_t)rows * cols);
    e->stage = stage, e->rows = rows, e->cols = cols;
    snprintf(e->name, sizeof e->name, "%s", name);
    tr->n++;
}

static void ck_trace_free(ck_trace_t *tr)
{
    for (int i = 0; i < tr->n; i++)
        free(tr->r[i].x);
    free(tr->r);
    memset(tr, 0, sizeof *tr);
}

GPU_TEST(gpu_conformer_chunks_fp16_stage_trace)
{
    /* the configurations of gpu_conformer_forward_chunks_matches_cpu (case 0 first) */
    wenet_config_t cfgs[] = {
        synth_config(SUBSAMPLE_CONV2D8, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1),
        synth_config(SUBSAMPLE_CONV2D6, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1),
        synth_config(SUBSAMPLE_CONV2D, POS_REL, 0, CNN_NORM_BATCH, ACT_RELU, 0, 0),
        synth_config(SUBSAMPLE_CONV2D6, POS_ABS, 1, CNN_NORM_LAYER, ACT_SWISH, 0, 1),
    };
    static const int chunk[CK_NS] = {3, 5, 7}, left[CK_NS] = {-1, 0, 2}, start[CK_NS] = {0, 2, 1};
    static const int frames[CK_NS] = {211, 173, 97};
    static const int precs[2] = {CONFORMER_GPU_FP16, CONFORMER_GPU_BF16};
    int all = CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16 | CONFORMER_GPU_BF16;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const wenet_config_t *c = &cfgs[ci];
        bank_t bank = {.seed = 1900 + (unsigned)ci}; /* the matches_cpu case's seed */
        conformer_gpu_model_t *gm = NULL;
        hark_err_t err = {0};
        CHECK_OK(conformer_gpu_model_create(c, bank_get, &bank, all, &gm, &err));
        int rate = (int)c->subsample, rc = wenet_right_context(c), max_window = 0;
        float *fb[CK_NS], *ge[CK_NS], *gl[CK_NS];
        unsigned r = 23 + (unsigned)ci;
        for (int s = 0; s < CK_NS; s++) {
            int w = (chunk[s] - 1) * rate + rc + 1;
            max_window = w > max_window ? w : max_window;
            fb[s] = hark_malloc(sizeof(float) * frames[s] * c->input_dim);
            for (int i = 0; i < frames[s] * c->input_dim; i++)
                fb[s][i] = 2.0f * test_randf(&r);
            size_t te = (size_t)frames[s] / rate + 8;
            ge[s] = hark_malloc(sizeof(float) * (te * c->d_model + CK_GUARD));
            gl[s] = hark_malloc(sizeof(float) * (te * c->vocab_size + CK_GUARD));
        }
        int n_rows[CK_NS], cap = frames[0] / rate + 8;
        ck_trace_t ref = {0};
        conformer_gpu_chunks_t *gp = NULL;
        CHECK_OK(
            conformer_gpu_chunks_create(gm, CONFORMER_GPU_FP32, CK_NS, max_window, cap, &gp, &err));
        conformer_gpu_chunks_set_trace(gp, ck_trace_fn, &ref);
        CHECK(ck_run(t, c, NULL, gp, fb, frames, chunk, left, start, -1, ge, gl, n_rows, NULL) > 3);
        conformer_gpu_chunks_destroy(gp);
        CHECK(!ref.bad && ref.n > 0);
        /* the stages of one step: stage numbers count up from 0 within each step */
        int per_step = 1;
        while (per_step < ref.n && ref.r[per_step].stage != 0)
            per_step++;
        CHECK(ref.n % per_step == 0);
        int steps = ref.n / per_step;
        for (int pi = 0; pi < 2; pi++) {
            int prec = precs[pi];
            double bound = tol_prec(prec, FP16_SANITY);
            ck_trace_t tr = {0};
            gp = NULL;
            CHECK_OK(conformer_gpu_chunks_create(gm, prec, CK_NS, max_window, cap, &gp, &err));
            conformer_gpu_chunks_set_trace(gp, ck_trace_fn, &tr);
            CHECK(ck_run(t, c, NULL, gp, fb, frames, chunk, left, start, -1, ge, gl, n_rows, NULL) >
                  3);
            conformer_gpu_chunks_destroy(gp);
            CHECK(!tr.bad);
            CHECK_EQ_INT(tr.n, ref.n);
            printf("    case %zu %s: %d steps of %d stages, rel RMS vs fp32 (first step, worst "
                   "step):\n",
                   ci, prec_name(prec), steps, per_step);
            int first_bad = -1, worst_stage = 0, worst_at = 0;
            double worst = 0;
            for (int k = 0; k < per_step; k++) {
                double e0 = -1, emax = -1;
                int at = 0;
                for (int st = 0; st < steps; st++) {
                    const ck_rec_t *a = &tr.r[st * per_step + k], *b = &ref.r[st * per_step + k];
                    CHECK(a->stage == k && b->stage == k && !strcmp(a->name, b->name) &&
                          a->rows == b->rows && a->cols == b->cols);
                    double e = test_rel_rms(a->x, b->x, (size_t)a->rows * a->cols);
                    if (e != e) /* NaN: worse than any bound */
                        e = INFINITY;
                    if (st == 0)
                        e0 = e;
                    if (e > emax)
                        emax = e, at = st;
                    if (e > 1e-2 && first_bad < 0)
                        first_bad = k;
                }
                printf("      %2d %-22s %.3g  %.3g (step %d)\n", k, ref.r[k].name, e0, emax, at);
                if (emax > worst)
                    worst = emax, worst_stage = k, worst_at = at;
            }
            if (first_bad >= 0)
                printf("    case %zu %s: first stage past 1e-2: %s\n", ci, prec_name(prec),
                       ref.r[first_bad].name);
            ck_trace_free(&tr);
            CHECKF(worst <= bound, "case %zu %s: stage %s step %d: %g vs fp32 (bound %g)", ci,
                   prec_name(prec), ref.r[worst_stage].name, worst_at, worst, bound);
        }
        ck_trace_free(&ref);
        for (int s = 0; s < CK_NS; s++)
            hark_free(fb[s]), hark_free(ge[s]), hark_free(gl[s]);
        conformer_gpu_model_destroy(gm);
        bank_free(&bank);
    }
}
#endif /* HARK_CUDA */
