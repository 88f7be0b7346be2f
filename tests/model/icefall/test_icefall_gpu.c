/* GPU tests of the icefall Conformer transducer (src/model/icefall/icefall_gpu.c):
 * - icefall_gpu_golden: T1, icefall's own outputs. Waveforms -> text through icefall_gpu_run
 *   (each utterance's own result in a batch of four): FP32 gives icefall's greedy and modified
 *   beam search tokens and text; FP16 icefall's greedy tokens (the checks); BF16's
 *   agreement is printed. icefall's padded batch (log(1e-10) padding): the encoder rows against
 *   the batch golden, FP32 greedy tokens against the batch's.
 * - icefall_gpu_matches_cpu: generated Conformers of awkward sizes (3 heads of 24, FFN 136,
 *   context 3; a causal-conv one with simulated streaming) against the CPU path on a batch of
 *   utterances of different lengths: FP32 the CPU's tokens (greedy, beam: its utterances on 3
 *   search threads) and encoder output, the 16-bit types the encoder output within their bounds.
 * - icefall_gpu_refusals: a zipformer (icefall_zf_gpu.h runs its encoder), short / long / NaN
 *   audio, as icefall_run's errors. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_gpu.h"
#include "support/golden_icefall.h"
#include "support/icefall_gen.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>

/* relative RMS of the encoder output against the reference, per type: FP32 (cuBLAS in true
 * FP32, the CPU's OpenBLAS: summation order only); 16-bit operands and activations through 3
 * layers (FP16 measured on the H200 first, then set with room; BF16 8x FP16's: its unit roundoff
 * is 8 times FP16's) */
static double enc_tol(ops_dtype_t dt)
{
    return dt == OPS_F32 ? 1e-4 : dt == OPS_F16 ? 2e-2 : 1.6e-1;
}

static const char *dt_name(ops_dtype_t t)
{
    return t == OPS_F16 ? "fp16" : t == OPS_BF16 ? "bf16" : "fp32";
}

static int same(const int *a, int na, const int *b, int nb)
{
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static int json_ints(const cJSON *arr, int *a, int cap)
{
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

static const cJSON *jget(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* the converted T1 golden model's directory into path, or NULL with the reason in why */
static const char *t1_model(char *path, size_t n, char *why, size_t nwhy)
{
    const char *dir = golden_icefall_model_dir(why, nwhy);
    if (!dir)
        return NULL;
    snprintf(path, n, "%s/m", dir);
    return path;
}

GPU_TEST(icefall_gpu_golden)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512], path[1024];
    if (!t1_model(path, sizeof path, why, sizeof why))
        SKIP(why);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    CHECK_OK(icefall_load(path, 1, &m, &err));
    cJSON *res = golden_icefall_results();
    CHECK(res != NULL);
    npy_array_t wav[4], fp = {0}, fl = {0}, eo = {0};
    const float *pcm[4];
    size_t n[4];
    for (int u = 0; u < 4; u++) {
        memset(&wav[u], 0, sizeof wav[u]);
        CHECK_OK(golden_icefall_npy(&wav[u], golden_icefall_utts[u], "waveform.npy"));
        pcm[u] = wav[u].data;
        n[u] = wav[u].count;
    }
    CHECK_OK(golden_icefall_npy(&fp, "batch", "fbank_padded.npy"));
    CHECK_OK(golden_icefall_npy(&fl, "batch", "fbank_lens.npy"));
    CHECK_OK(golden_icefall_npy(&eo, "batch", "encoder_out.npy"));
    const int B = (int)fp.shape[0], Tmax = (int)fp.shape[1], F = (int)fp.shape[2];
    const int Tpm = (int)eo.shape[1], d = icefall_config(m)->d;
    const cJSON *bat = jget(res, "batch"), *order = jget(bat, "order"), *per = jget(bat, "per_utt");
    CHECK(B == 4 && cJSON_GetArraySize(order) == 4);
    static int want[4096];
    static float enc[4096 * 256];
    for (int k = 0; k < 3; k++) {
        ops_dtype_t dt = k == 0 ? OPS_F32 : k == 1 ? OPS_F16 : OPS_BF16;
        icefall_gpu_model_t *g = NULL;
        icefall_gpu_worker_t *w = NULL;
        CHECK_OK(icefall_gpu_model_create(m, 0, dt, &g, &err));
        CHECK_OK(icefall_gpu_worker_create(g, 4, 12.0, &w, &err));
        /* waveforms -> text, each utterance alone in the batch */
        for (int meth = 0; meth < (dt == OPS_F32 ? 2 : 1); meth++) {
            icefall_run_opts_t o = {.method = meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY};
            const char *key = meth ? "modified_beam_search" : "greedy_search";
            icefall_result_t r[4];
            CHECK_OK(icefall_gpu_run(w, pcm, n, 4, &o, r, &err));
            int bad = 0;
            for (int u = 0; u < 4; u++) {
                const char *utt = golden_icefall_utts[u];
                const cJSON *j = jget(jget(jget(res, "utterances"), utt), key);
                int nw = json_ints(jget(j, "tokens"), want, 4096);
                int ok = same(r[u].best.tokens, r[u].best.n, want, nw), at = 0;
                while (at < nw && at < r[u].best.n && want[at] == r[u].best.tokens[at])
                    at++;
                /* the encoder rows of this run against icefall's (each utterance alone) */
                npy_array_t ge = {0};
                int nf = 0;
                double e = -1;
                if (!golden_icefall_npy(&ge, utt, "encoder_out.npy") &&
                    !icefall_gpu_read(w, u, 0, enc, 4096, &nf, &err) && (size_t)nf * d == ge.count)
                    e = test_rel_rms(enc, ge.data, ge.count);
                npy_free(&ge);
                printf("  %s %s %s: encoder rel RMS %.2e, %d tokens (icefall %d) %s", dt_name(dt),
                       key, utt, e, r[u].best.n, nw, ok ? "same\n" : "DIFFERENT");
                if (!ok) { /* where: the frame of the first difference and its golden margin */
                    int fr = at < r[u].best.n ? r[u].best.times[at] : -1;
                    const cJSON *mg = jget(j, "frame_top1_top2_margins");
                    const cJSON *mf = fr >= 0 && !meth ? cJSON_GetArrayItem(mg, fr) : NULL;
                    printf(" from token %d (frame %d, icefall's top-2 logit margin there %.4f)\n",
                           at, fr, mf ? mf->valuedouble : -1.0);
                }
                CHECKF(e >= 0 && e <= enc_tol(dt), "%s %s: encoder rel RMS %.3g", dt_name(dt), utt,
                       e);
                if (dt != OPS_BF16) {
                    bad += !ok;
                    if (ok)
                        CHECKF(!strcmp(r[u].text, jget(j, "text")->valuestring),
                               "%s %s: text\n  got  %s\n  want %s", dt_name(dt), key, r[u].text,
                               jget(j, "text")->valuestring);
                }
                icefall_result_free(&r[u]);
            }
            CHECKF(bad == 0, "%s %s: %d of 4 utterances differ from icefall's tokens", dt_name(dt),
                   key, bad);
        }
        /* icefall's padded batch */
        float *dfe = icefall_gpu_feats(w);
        int lens[4];
        for (int b = 0; b < B; b++)
            lens[b] = (int)((const float *)fl.data)[b];
        CHECK(cudaMemcpy(dfe, fp.data, sizeof(float) * (size_t)B * Tmax * F,
                         cudaMemcpyHostToDevice) == cudaSuccess);
        CHECK_OK(icefall_gpu_encode(w, dfe, lens, B, Tmax, NULL, &err));
        CHECK_OK(icefall_gpu_greedy(w, &err));
        CHECK_OK(icefall_gpu_sync(w, &err));
        icefall_hyp_t hy[4];
        CHECK_OK(icefall_gpu_results(w, hy, &err));
        for (int b = 0; b < B; b++) {
            int nf = 0;
            CHECK_OK(icefall_gpu_read(w, b, 0, enc, 4096, &nf, &err));
            double e =
                test_rel_rms(enc, (const float *)eo.data + (size_t)b * Tpm * d, (size_t)nf * d);
            const char *utt = cJSON_GetArrayItem(order, b)->valuestring;
            int nw = json_ints(jget(jget(per, utt), "greedy_tokens"), want, 4096);
            int ok = same(hy[b].tokens, hy[b].n, want, nw);
            printf("  %s batch row %d (%s): encoder rel RMS %.2e, greedy %s\n", dt_name(dt), b, utt,
                   e, ok ? "same" : "DIFFERENT");
            CHECKF(e <= enc_tol(dt), "%s batch row %d: encoder rel RMS %.3g", dt_name(dt), b, e);
            if (dt == OPS_F32)
                CHECKF(ok, "fp32 batch row %d: greedy tokens differ", b);
            icefall_hyp_free(&hy[b]);
        }
        icefall_gpu_worker_destroy(w);
        icefall_gpu_model_destroy(g);
    }
    for (int u = 0; u < 4; u++)
        npy_free(&wav[u]);
    npy_free(&fp);
    npy_free(&fl);
    npy_free(&eo);
    cJSON_Delete(res);
    icefall_destroy(m);
}

/* the searches compared: greedy, modified beam 4 and 9, fast beam (the model's options and
 * small ones, where pruning bites) */
#define NMETH 5
static const char *const METH_NAMES[NMETH] = {"greedy_search", "modified_beam_search", "beam 9",
                                              "fast_beam_search", "fast_beam_search 1.5/2/3"};
static icefall_run_opts_t meth_opts(int meth)
{
    icefall_run_opts_t o = {.method = meth == 0   ? ICEFALL_GREEDY
                                      : meth <= 2 ? ICEFALL_MODIFIED_BEAM
                                                  : ICEFALL_FAST_BEAM,
                            .beam_size = meth == 2 ? 9 : 0};
    if (meth == 4)
        o.fast_beam = (icefall_fast_beam_opts_t){1.5, 2, 3};
    return o;
}

/* the CPU's result for each utterance against the GPU's in a batch of all of them */
static void against_cpu(test_ctx_t *t, icefall_model_t *m, const float *const *pcm, const size_t *n,
                        int B, const char *name)
{
    hark_err_t err = {0};
    icefall_worker_t *cw = NULL;
    CHECK_OK(icefall_worker_create(m, 12.0, &cw, &err));
    const icefall_config_t *c = icefall_config(m);
    static float enc[4096 * 256];
    float *cenc = hark_malloc(sizeof(float) * 1024 * (size_t)c->d), *feats = NULL;
    icefall_result_t cpu[NMETH][8];
    for (int meth = 0; meth < NMETH; meth++) {
        icefall_run_opts_t o = meth_opts(meth);
        for (int b = 0; b < B; b++)
            CHECK_OK(icefall_run(cw, &pcm[b], &n[b], 1, &o, &cpu[meth][b], &err));
    }
    for (int k = 0; k < 3; k++) {
        ops_dtype_t dt = k == 0 ? OPS_F32 : k == 1 ? OPS_F16 : OPS_BF16;
        icefall_gpu_model_t *g = NULL;
        icefall_gpu_worker_t *w = NULL;
        CHECK_OK(icefall_gpu_model_create(m, 0, dt, &g, &err));
        CHECK_OK(icefall_gpu_worker_create(g, B, 12.0, &w, &err));
        CHECK_OK(icefall_gpu_set_search_threads(w, 3, &err)); /* beam: merges on 3 threads */
        for (int meth = 0; meth < NMETH; meth++) {
            icefall_run_opts_t o = meth_opts(meth);
            icefall_result_t r[8];
            CHECK_OK(icefall_gpu_run(w, pcm, n, B, &o, r, &err));
            int agree = 0, beams = 0;
            for (int b = 0; b < B; b++) {
                const icefall_result_t *cr = &cpu[meth][b];
                int ok = same(r[b].best.tokens, r[b].best.n, cr->best.tokens, cr->best.n) &&
                         same(r[b].best.times, r[b].best.n, cr->best.times, cr->best.n);
                /* the whole final beam: the same hypotheses in the same order, the scores close */
                int all = ok && r[b].n_nbest == cr->n_nbest;
                for (int i = 0; all && i < cr->n_nbest; i++)
                    all = same(r[b].nbest[i].tokens, r[b].nbest[i].n, cr->nbest[i].tokens,
                               cr->nbest[i].n) &&
                          fabs(r[b].nbest[i].score - cr->nbest[i].score) <=
                              1e-4 * (1.0 + fabs(cr->nbest[i].score));
                agree += ok;
                beams += all;
                if (dt == OPS_F32)
                    CHECKF(all, "%s fp32 %s utterance %d: %d tokens (the CPU %d), beam %s", name,
                           METH_NAMES[meth], b, r[b].best.n, cr->best.n, all ? "same" : "differs");
            }
            printf("  %s %s %s: %d of %d utterances give the CPU's tokens", name, dt_name(dt),
                   METH_NAMES[meth], agree, B);
            if (meth == 1 || meth == 2)
                printf(", %d the CPU's whole final beam (scores within 1e-4)", beams);
            printf("\n");
            for (int b = 0; b < B; b++)
                icefall_result_free(&r[b]);
        }
        /* the last run's encoder rows against the CPU encoder of each utterance alone */
        double worst = 0;
        for (int b = 0; b < B; b++) {
            int T = icefall_num_frames(m, n[b]), nf = 0, len = 0;
            hark_free(feats);
            feats = hark_malloc(sizeof(float) * (size_t)T * c->feature_dim);
            CHECK_OK(feat_compute(icefall_feat_plan(m), pcm[b], n[b], feats, &err));
            CHECK_OK(icefall_encode(cw, feats, T, T, cenc, &len, NULL, NULL, &err));
            CHECK_OK(icefall_gpu_read(w, b, 0, enc, 4096, &nf, &err));
            CHECK_EQ_INT(nf, len);
            double e = test_rel_rms(enc, cenc, (size_t)len * c->d);
            worst = e > worst ? e : worst;
        }
        printf("  %s %s: encoder rel RMS against the CPU, worst row %.2e\n", name, dt_name(dt),
               worst);
        CHECKF(worst <= enc_tol(dt), "%s %s: encoder rel RMS %.3g", name, dt_name(dt), worst);
        icefall_gpu_worker_destroy(w);
        icefall_gpu_model_destroy(g);
    }
    for (int meth = 0; meth < NMETH; meth++)
        for (int b = 0; b < B; b++)
            icefall_result_free(&cpu[meth][b]);
    hark_free(cenc);
    hark_free(feats);
    icefall_worker_destroy(cw);
}

GPU_TEST(icefall_gpu_matches_cpu)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    if (!test_python("torch, numpy"))
        SKIP("no /usr/bin/python3 with torch and numpy to make the generated models");
    const char *tmp = test_tmpdir(t);
    npy_array_t wav = {0};
    CHECK_OK(golden_icefall_npy(&wav, "jfk", "waveform.npy"));
    /* lengths: 1.3 s, the longest 7 s, 2.2 s, 1040 samples (7 frames, one encoder frame) */
    const size_t n[4] = {20800, 112000, 35300, 1040};
    const float *pcm[4];
    for (int b = 0; b < 4; b++)
        pcm[b] = (const float *)wav.data + 4000 * (size_t)b;
    const struct {
        const char *name, *ckpt, *conv;
    } cases[] = {
        {"d72h3", "--seed 3 --context-size 3", "--context-size 3"},
        {"causal", "--seed 4 --encoder-dim 48 --nhead 2 --dim-feedforward 96 --cnn-module-kernel 7",
         "--causal-convolution True --simulate-streaming True --decode-chunk-size 8 "
         "--left-context 16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char log[4096], path[1100];
        CHECKF(icefall_gen_conformer(tmp, cases[i].name, cases[i].ckpt, cases[i].conv, log,
                                     sizeof log) == 0,
               "generating %s: %s", cases[i].name, log);
        snprintf(path, sizeof path, "%s/%s", tmp, cases[i].name);
        icefall_model_t *m = NULL;
        hark_err_t err = {0};
        CHECK_OK(icefall_load(path, 1, &m, &err));
        against_cpu(t, m, pcm, n, 4, cases[i].name);
        icefall_destroy(m);
        if (test_failed(t))
            break;
    }
    npy_free(&wav);
}

GPU_TEST(icefall_gpu_refusals)
{
    NEED_SHARED(GOLDEN_ICEFALL);
    char why[512], path[1024];
    if (!t1_model(path, sizeof path, why, sizeof why))
        SKIP(why);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_gpu_model_t *g = NULL;
    icefall_gpu_worker_t *w = NULL;
    CHECK_OK(icefall_load(path, 1, &m, &err));
    CHECK_OK(icefall_gpu_model_create(m, 0, OPS_F16, &g, &err));
    CHECK_OK(icefall_gpu_worker_create(g, 2, 3.0, &w, &err));
    CHECK(icefall_gpu_set_search_threads(w, 0, &err) == HARK_ERR_INVALID_ARG);
    CHECK(icefall_gpu_set_search_threads(w, 65, &err) == HARK_ERR_INVALID_ARG);
    float *x = hark_calloc(16000 * 4, sizeof(float));
    const float *pcm[2] = {x, x};
    size_t n[2] = {16000, 1039};
    icefall_result_t r[2];
    CHECK(icefall_gpu_run(w, pcm, n, 2, NULL, r, &err) == HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "too short") != NULL, "%s", err.msg);
    n[1] = 16000 * 4;
    CHECK(icefall_gpu_run(w, pcm, n, 2, NULL, r, &err) == HARK_ERR_TOO_LARGE);
    x[77] = NAN;
    n[1] = 16000;
    CHECK(icefall_gpu_run(w, pcm, n, 2, NULL, r, &err) == HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "NaN") != NULL, "%s", err.msg);
    x[77] = 0.0f;
    CHECK(icefall_gpu_run(w, pcm, n, 3, NULL, r, &err) == HARK_ERR_TOO_LARGE);
    /* and the worker still runs */
    CHECK_OK(icefall_gpu_run(w, pcm, n, 2, NULL, r, &err));
    icefall_result_free(&r[0]);
    icefall_result_free(&r[1]);
    icefall_gpu_worker_destroy(w);
    icefall_gpu_model_destroy(g);
    icefall_destroy(m);
    hark_free(x);
    /* a zipformer is refused here (its encoder's GPU path is icefall_zf_gpu.h) */
    if (test_python("torch, numpy")) {
        char log[4096];
        const char *tmp = test_tmpdir(t);
        CHECKF(icefall_gen_model(tmp, "zf", ICEFALL_GEN_FLAGS, NULL, log, sizeof log) == 0, "%s",
               log);
        snprintf(path, sizeof path, "%s/zf", tmp);
        CHECK_OK(icefall_load(path, 1, &m, &err));
        CHECK(icefall_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_ERR_UNSUPPORTED);
        icefall_destroy(m);
    }
}

#endif
