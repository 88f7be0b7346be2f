/* GPU tests of the Zipformer2 encoder on the device (src/model/icefall/icefall_zf_gpu.c) against
 * the CPU encoder (icefall_zipformer.c, itself checked against icefall's own code), on generated
 * models (tests/model/icefall/zipformer_random_ckpt.py): the shared small configuration
 * non-causal and causal, and a second causal one of other sizes (6 stacks down to 1/8 rate,
 * kernels 31, 3 heads of 12, chunks of 16 frames, 64 to the left):
 * - icefall_zf_gpu_matches_cpu: in FP32, FP16 and BF16, whole utterances of three lengths
 *   (icefall_zf_gpu_encode vs icefall_encode), and streams chunk by chunk — four streams of
 *   different lengths stepped together in changing groups, each step's encoder frames against
 *   the CPU's step of the same stream alone (the first step of each group size runs as
 *   enqueued, the later ones run its recorded CUDA graph); a slot reset and reused by a new
 *   stream; relative difference (max |a - b| / max |b|) at most zf_tol: FP32 1e-4 (summation
 *   order only), the 16-bit types' bounds from their projections' rounded operands (zf_tol);
 * - icefall_zf_gpu_refusals: steps of 0 or too many streams, a slot twice or out of range,
 *   lengths outside the worker's, a non-causal model asked for streams.
 * Needs a python3 with torch and numpy (the generator) and a GPU; skips otherwise. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_zf_gpu.h"
#include "support/icefall_gen.h"

#define make_pcm icefall_gen_pcm
#define rel_diff icefall_gen_rel_diff

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ZF_GPU_CAUSAL2                                                                             \
    "--num-encoder-layers 1,1,1,1,1,1 --downsampling-factor 1,2,4,8,4,2 --feedforward-dim 96 "     \
    "--num-heads 3 --encoder-dim 48,48,64,64,48,48 --encoder-unmasked-dim 32 --query-head-dim 12 " \
    "--value-head-dim 8 --pos-head-dim 4 --pos-dim 48 --cnn-module-kernel 31,31,15,15,15,31 "      \
    "--decoder-dim 32 --joiner-dim 48 --causal True --chunk-size 16 --left-context-frames 64"

static float *features(const icefall_model_t *m, size_t n, unsigned seed, int *T)
{
    hark_err_t err = {0};
    float *pcm = make_pcm(n, seed);
    *T = icefall_num_frames(m, n);
    float *f = hark_malloc(sizeof(float) * (size_t)*T * icefall_config(m)->feature_dim);
    if (feat_compute(icefall_feat_plan(m), pcm, n, f, &err)) {
        hark_free(f);
        f = NULL;
    }
    hark_free(pcm);
    return f;
}

#define NB 4

/* GPU vs CPU encoder frames, max |a - b| / max |b|, per type: FP32 both sides differ in summation
 * order only. The 16-bit models round every projection's input and weights to the type (unit
 * roundoff u: FP16 2^-11, BF16 2^-8) through all the layers; the bounds are 10 u. On the H200
 * (2026-11-30) the worst cases of these models were FP16 9.6e-4 (2.0 u) and BF16 9.0e-3 (2.3 u). */
static double zf_tol(ops_dtype_t dt)
{
    return dt == OPS_F32 ? 1e-4 : dt == OPS_F16 ? 10.0 / 2048 : 10.0 / 256;
}

static const char *zf_dt_name(ops_dtype_t dt)
{
    return dt == OPS_F16 ? "fp16" : dt == OPS_BF16 ? "bf16" : "fp32";
}

/* the streams of one causal model: 4 streams stepped in changing groups, then slot 1 reused */
static void check_streams(test_ctx_t *t, icefall_model_t *m, icefall_zf_gpu_worker_t *gw,
                          double tol)
{
    hark_err_t err = {0};
    const icefall_config_t *c = icefall_config(m);
    const int F = c->feature_dim, M = c->d, n_in = icefall_zf_stream_step_frames(m);
    const int step = 2 * c->zf.chunk, per = c->zf.chunk / 2;
    icefall_worker_t *w = NULL;
    CHECK_OK(icefall_worker_create(m, 1, &w, &err));
    const size_t lens[NB] = {52000, 40000, 23457, 45000};
    float *feats[NB + 1];
    int nsteps[NB + 1], T;
    for (int j = 0; j <= NB; j++) {
        feats[j] = features(m, j < NB ? lens[j] : 30001, 70 + (unsigned)j, &T);
        CHECK(feats[j] != NULL);
        nsteps[j] = (T - n_in) / step + 1;
    }
    icefall_zf_stream_t *cs[NB + 1];
    for (int j = 0; j <= NB; j++)
        CHECK_OK(icefall_zf_stream_create(m, &cs[j], &err));
    float *want = hark_malloc(sizeof(float) * (size_t)per * M), *got[NB];
    for (int j = 0; j < NB; j++)
        got[j] = hark_malloc(sizeof(float) * (size_t)per * M);
    /* stream j in slot sl[j] (out of order); stream 4 takes slot 1 after stream 1 ends */
    int sl[NB + 1] = {3, 1, 0, 2, 1}, done[NB + 1] = {0}, total = 0, groups[NB + 1] = {0};
    static const int start[NB] = {0, 1, 3, 6};
    double worst = 0;
    for (int j = 0; j < NB; j++)
        CHECK_OK(icefall_zf_gpu_slot_reset(gw, sl[j], &err));
    int reused = 0;
    for (int r = 0; r < 400; r++) {
        if (!reused && done[1] >= nsteps[1]) { /* stream 1 ended: stream 4 takes its slot */
            CHECK_OK(icefall_zf_gpu_slot_reset(gw, sl[1], &err));
            reused = 1;
        }
        int slots[NB], who[NB], n = 0, left = 0;
        const float *in[NB];
        float *out[NB];
        for (int q = 0; q < NB; q++) {
            const int j = q == 1 && reused ? NB : q;
            left += done[j] < nsteps[j];
            if (r < start[q] || done[j] >= nsteps[j] || (q == 2 && (r - start[q]) % 3 == 2))
                continue;
            slots[n] = sl[j];
            in[n] = feats[j] + (size_t)done[j] * step * F;
            out[n] = got[n];
            who[n++] = j;
        }
        if (!left)
            break;
        if (!n)
            continue;
        CHECK_OK(icefall_zf_gpu_step(gw, slots, in, out, n, &err));
        groups[n]++;
        for (int k = 0; k < n; k++) {
            const int j = who[k];
            CHECK_OK(icefall_zf_stream_step(w, cs[j], in[k], want, &err));
            double d = rel_diff(out[k], want, (size_t)per * M);
            worst = d > worst || isnan(d) ? d : worst;
            CHECKF(d <= tol, "round %d, stream %d step %d (slot %d, with %d others): %g", r, j,
                   done[j], slots[k], n - 1, d);
            done[j]++;
            total++;
        }
    }
    CHECK(reused && done[NB] == nsteps[NB]);
    printf("  %d steps of %d streams (groups of 1/2/3/4: %d/%d/%d/%d; slot 1 reused): GPU vs CPU "
           "at most %.3g relative\n",
           total, NB + 1, groups[1], groups[2], groups[3], groups[4], worst);
    for (int j = 0; j <= NB; j++) {
        icefall_zf_stream_destroy(cs[j]);
        hark_free(feats[j]);
    }
    for (int j = 0; j < NB; j++)
        hark_free(got[j]);
    hark_free(want);
    icefall_worker_destroy(w);
}

GPU_TEST(icefall_zf_gpu_matches_cpu)
{
    const char *py = test_python("torch, numpy");
    if (!py)
        SKIP("no python3 with torch and numpy (the model generator)");
    static const struct {
        const char *name, *flags;
        int causal;
    } cases[] = {{"m", ICEFALL_GEN_FLAGS, 0},
                 {"mc", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL, 1},
                 {"mc2", ZF_GPU_CAUSAL2, 1}};
    char log[4096], dir[700];
    const char *tmp = test_tmpdir(t);
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        CHECKF(icefall_gen_model(tmp, cases[ci].name, cases[ci].flags, NULL, log, sizeof log) == 0,
               "%s", log);
        snprintf(dir, sizeof dir, "%s/%s", tmp, cases[ci].name);
        hark_err_t err = {0};
        icefall_model_t *m = NULL;
        icefall_worker_t *w = NULL;
        icefall_zf_gpu_t *g = NULL;
        icefall_zf_gpu_worker_t *gw = NULL;
        CHECK_OK(icefall_load(dir, 1, &m, &err));
        const icefall_config_t *c = icefall_config(m);
        CHECK_OK(icefall_worker_create(m, 4, &w, &err));
        for (int k = 0; k < 3; k++) {
            const ops_dtype_t dt = k == 0 ? OPS_F32 : k == 1 ? OPS_F16 : OPS_BF16;
            const char *dn = zf_dt_name(dt);
            CHECK_OK(icefall_zf_gpu_create(m, 0, dt, &g, &err));
            CHECK_EQ_INT(icefall_zf_gpu_dtype(g), dt);
            CHECK_OK(icefall_zf_gpu_worker_create(g, 400, cases[ci].causal ? NB : 0, &gw, &err));
            printf("  %s %s: weights %.2f MB, worker %.1f MB, slot %zu floats\n", cases[ci].name,
                   dn, icefall_zf_gpu_bytes(g) / 1048576.0,
                   icefall_zf_gpu_worker_bytes(gw) / 1048576.0, icefall_zf_gpu_slot_floats(gw));
            static const size_t lens[3] = {37000, 20011, 1600};
            for (int u = 0; u < 3; u++) {
                int T;
                float *f = features(m, lens[u], 50 + (unsigned)u, &T);
                CHECK(f != NULL);
                const int To = ((T - 7) / 2 + 1) / 2;
                float *want = hark_malloc(sizeof(float) * (size_t)To * c->d);
                float *got = hark_malloc(sizeof(float) * (size_t)To * c->d);
                int lw = 0, lg = 0;
                CHECK_OK(icefall_encode(w, f, T, T, want, &lw, NULL, NULL, &err));
                CHECK_OK(icefall_zf_gpu_encode(gw, f, T, got, &lg, &err));
                CHECK_EQ_INT(lg, lw);
                double d = rel_diff(got, want, (size_t)lw * c->d);
                printf("  %s %s, %d frames: encoder %d frames, GPU vs CPU %.3g relative\n",
                       cases[ci].name, dn, T, lw, d);
                CHECKF(d <= zf_tol(dt), "%s %s, %d frames: %g", cases[ci].name, dn, T, d);
                hark_free(f);
                hark_free(want);
                hark_free(got);
            }
            if (cases[ci].causal)
                check_streams(t, m, gw, zf_tol(dt));
            icefall_zf_gpu_worker_destroy(gw);
            icefall_zf_gpu_destroy(g);
            gw = NULL;
            g = NULL;
        }
        icefall_worker_destroy(w);
        icefall_destroy(m);
    }
}

GPU_TEST(icefall_zf_gpu_refusals)
{
    const char *py = test_python("torch, numpy");
    if (!py)
        SKIP("no python3 with torch and numpy (the model generator)");
    char log[4096], dir[700], dnc[700];
    const char *tmp = test_tmpdir(t);
    CHECKF(icefall_gen_model(tmp, "mc", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL, NULL, log,
                             sizeof log) == 0,
           "%s", log);
    CHECKF(icefall_gen_model(tmp, "m", ICEFALL_GEN_FLAGS, NULL, log, sizeof log) == 0, "%s", log);
    snprintf(dir, sizeof dir, "%s/mc", tmp);
    snprintf(dnc, sizeof dnc, "%s/m", tmp);
    hark_err_t err = {0};
    icefall_model_t *m = NULL, *mn = NULL;
    icefall_zf_gpu_t *g = NULL, *gn = NULL;
    icefall_zf_gpu_worker_t *gw = NULL, *bad = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_load(dnc, 1, &mn, &err));
    CHECK_EQ_INT(icefall_zf_gpu_create(m, 0, (ops_dtype_t)7, &g, &err), HARK_ERR_INVALID_ARG);
    CHECK(g == NULL);
    CHECK_OK(icefall_zf_gpu_create(m, 0, OPS_F32, &g, &err));
    CHECK_OK(icefall_zf_gpu_create(mn, 0, OPS_F32, &gn, &err));
    CHECK_EQ_INT(icefall_zf_gpu_worker_create(gn, 400, 2, &bad, &err), HARK_ERR_UNSUPPORTED);
    CHECK(bad == NULL);
    CHECK_EQ_INT(icefall_zf_gpu_worker_create(g, 8, 2, &bad, &err), HARK_ERR_INVALID_ARG);
    CHECK_OK(icefall_zf_gpu_worker_create(g, 100, 2, &gw, &err));
    const int F = icefall_config(m)->feature_dim, n_in = icefall_zf_stream_step_frames(m);
    const int M = icefall_config(m)->d;
    float *f = hark_calloc((size_t)200 * F, sizeof(float)),
          *o = hark_malloc(sizeof(float) * 200 * M);
    float *outs[3] = {o, o, o};
    const float *ins[3] = {f, f, f};
    int len = 0;
    CHECK_EQ_INT(icefall_zf_gpu_encode(gw, f, 8, o, &len, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(icefall_zf_gpu_encode(gw, f, 101, o, &len, &err), HARK_ERR_INVALID_ARG);
    const int two[2] = {1, 1}, far[1] = {2}, three[3] = {0, 1, 0};
    CHECK_EQ_INT(icefall_zf_gpu_step(gw, two, ins, outs, 0, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(icefall_zf_gpu_step(gw, three, ins, outs, 3, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(icefall_zf_gpu_step(gw, two, ins, outs, 2, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "twice") != NULL);
    CHECK_EQ_INT(icefall_zf_gpu_step(gw, far, ins, outs, 1, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(icefall_zf_gpu_slot_reset(gw, -1, &err), HARK_ERR_INVALID_ARG);
    /* the worker still runs */
    const int one[1] = {0};
    CHECK_OK(icefall_zf_gpu_step(gw, one, ins, outs, 1, &err));
    CHECK_OK(icefall_zf_gpu_encode(gw, f, n_in, o, &len, &err));
    hark_free(f);
    hark_free(o);
    icefall_zf_gpu_worker_destroy(gw);
    icefall_zf_gpu_destroy(g);
    icefall_zf_gpu_destroy(gn);
    icefall_destroy(m);
    icefall_destroy(mn);
}

static int same_tokens(const icefall_hyp_t *a, const icefall_hyp_t *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->tokens[i] != b->tokens[i] || a->times[i] != b->times[i])
            return 0;
    return 1;
}

/* icefall_worker_use_gpu: a worker whose encoder runs on the GPU gives the CPU worker's results,
 * offline (icefall_run, greedy and beam) and for streams fed together (icefall_stream_feed, each
 * in its slot, started twice); with the FP16 encoder, the CPU's greedy tokens offline; a stream
 * without a slot refused alone, the others fed with it stepping */
GPU_TEST(icefall_zf_gpu_attached_worker)
{
    const char *py = test_python("torch, numpy");
    if (!py)
        SKIP("no python3 with torch and numpy (the model generator)");
    char log[4096], dir[700];
    const char *tmp = test_tmpdir(t);
    CHECKF(icefall_gen_model_ex(tmp, "mc", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL,
                                "--blank-bias 4", NULL, log, sizeof log) == 0,
           "%s", log);
    snprintf(dir, sizeof dir, "%s/mc", tmp);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *wc = NULL, *wg = NULL;
    icefall_zf_gpu_t *g = NULL;
    icefall_zf_gpu_worker_t *gw = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 4, &wc, &err));
    CHECK_OK(icefall_worker_create(m, 4, &wg, &err));
    CHECK_OK(icefall_zf_gpu_create(m, 0, OPS_F32, &g, &err));
    CHECK_OK(icefall_zf_gpu_worker_create(g, icefall_worker_max_frames(wg) - 1, 3, &gw, &err));
    CHECK_EQ_INT(icefall_worker_use_gpu(wg, gw, &err), HARK_ERR_INVALID_ARG); /* too short */
    icefall_zf_gpu_worker_destroy(gw);
    CHECK_OK(icefall_zf_gpu_worker_create(g, icefall_worker_max_frames(wg), 3, &gw, &err));
    CHECK_OK(icefall_worker_use_gpu(wg, gw, &err));
    /* and one with the FP16 encoder: the CPU's greedy tokens offline */
    icefall_worker_t *wh = NULL;
    icefall_zf_gpu_t *gh = NULL;
    icefall_zf_gpu_worker_t *gwh = NULL;
    CHECK_OK(icefall_worker_create(m, 4, &wh, &err));
    CHECK_OK(icefall_zf_gpu_create(m, 0, OPS_F16, &gh, &err));
    CHECK_OK(icefall_zf_gpu_worker_create(gh, icefall_worker_max_frames(wh), 0, &gwh, &err));
    CHECK_OK(icefall_worker_use_gpu(wh, gwh, &err));
    CHECK_OK(icefall_worker_reserve_streams(wc, 3, &err));
    CHECK_OK(icefall_worker_reserve_streams(wg, 3, &err));
    const size_t lens[3] = {47000, 30011, 12000};
    float *pcm[3];
    for (int j = 0; j < 3; j++)
        pcm[j] = make_pcm(lens[j], 90 + (unsigned)j);
    /* offline */
    for (int method = 0; method < 2; method++) {
        icefall_run_opts_t o = {.method = method ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY,
                                .beam_size = 4};
        icefall_result_t rc_[3], rg[3];
        CHECK_OK(icefall_run(wc, (const float *const *)pcm, lens, 3, &o, rc_, &err));
        CHECK_OK(icefall_run(wg, (const float *const *)pcm, lens, 3, &o, rg, &err));
        icefall_result_t rh[3];
        if (!method)
            CHECK_OK(icefall_run(wh, (const float *const *)pcm, lens, 3, &o, rh, &err));
        for (int j = 0; j < 3; j++) {
            printf("  offline %s, utterance %d: %d tokens (cpu %d)\n", method ? "beam" : "greedy",
                   j, rg[j].best.n, rc_[j].best.n);
            CHECKF(same_tokens(&rg[j].best, &rc_[j].best), "offline %d, utterance %d", method, j);
            if (!method) {
                printf("  offline greedy fp16, utterance %d: %d tokens\n", j, rh[j].best.n);
                CHECKF(same_tokens(&rh[j].best, &rc_[j].best), "fp16 greedy, utterance %d", j);
                icefall_result_free(&rh[j]);
            }
            icefall_result_free(&rc_[j]);
            icefall_result_free(&rg[j]);
        }
    }
    /* streams: the same audio in pieces, fed together, twice (the slots reset at start) */
    icefall_stream_t *sc[3], *sg[3];
    for (int j = 0; j < 3; j++) {
        CHECK_OK(icefall_stream_create(m, &sc[j], &err));
        CHECK_OK(icefall_stream_create(m, &sg[j], &err));
        icefall_stream_set_slot(sg[j], 2 - j);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < 3; j++) {
            icefall_method_t mt = (j + pass) % 2 ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY;
            CHECK_OK(icefall_stream_start(sc[j], mt, 4, &err));
            CHECK_OK(icefall_stream_start(sg[j], mt, 4, &err));
        }
        size_t at[3] = {0};
        for (int round = 0;; round++) {
            icefall_stream_feed_t fc[3], fg[3];
            int n = 0;
            for (int j = 0; j < 3; j++) {
                if (at[j] > lens[j])
                    continue;
                size_t k = lens[j] - at[j] < 7001 ? lens[j] - at[j] : 7001;
                fc[n] = (icefall_stream_feed_t){
                    .s = sc[j], .pcm = pcm[j] + at[j], .n = k, .input_done = at[j] + k == lens[j]};
                fg[n] = fc[n];
                fg[n].s = sg[j];
                at[j] = at[j] + k == lens[j] ? lens[j] + 1 : at[j] + k;
                n++;
            }
            if (!n)
                break;
            CHECK_OK(icefall_stream_feed(wc, fc, n));
            CHECK_OK(icefall_stream_feed(wg, fg, n));
        }
        for (int j = 0; j < 3; j++) {
            icefall_result_t a, b;
            CHECK_OK(icefall_stream_result(sc[j], &a, &err));
            CHECK_OK(icefall_stream_result(sg[j], &b, &err));
            printf("  pass %d stream %d: %d tokens in %d steps (cpu %d)\n", pass, j, b.best.n,
                   icefall_stream_steps(sg[j]), a.best.n);
            CHECKF(same_tokens(&a.best, &b.best), "pass %d stream %d", pass, j);
            icefall_result_free(&a);
            icefall_result_free(&b);
        }
    }
    /* a stream without a slot on the GPU worker is refused by name */
    icefall_stream_t *ns = NULL;
    CHECK_OK(icefall_stream_create(m, &ns, &err));
    CHECK_OK(icefall_stream_start(ns, ICEFALL_GREEDY, 0, &err));
    CHECK_EQ_INT(icefall_stream_accept(wg, ns, pcm[0], 16000, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "slot") != NULL);
    /* and fed with a stream that has one, only it fails: the other steps */
    CHECK_OK(icefall_stream_start(ns, ICEFALL_GREEDY, 0, &err));
    CHECK_OK(icefall_stream_start(sg[0], ICEFALL_GREEDY, 0, &err));
    icefall_stream_feed_t two[2] = {{.s = ns, .pcm = pcm[0], .n = 16000},
                                    {.s = sg[0], .pcm = pcm[0], .n = 16000}};
    CHECK_EQ_INT(icefall_stream_feed(wg, two, 2), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(two[0].status, HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(two[1].status, HARK_OK);
    CHECK(icefall_stream_steps(sg[0]) > 0);
    icefall_stream_destroy(ns);
    for (int j = 0; j < 3; j++) {
        icefall_stream_destroy(sc[j]);
        icefall_stream_destroy(sg[j]);
        hark_free(pcm[j]);
    }
    icefall_worker_destroy(wc);
    icefall_worker_destroy(wg);
    icefall_worker_destroy(wh);
    icefall_zf_gpu_worker_destroy(gw);
    icefall_zf_gpu_worker_destroy(gwh);
    icefall_zf_gpu_destroy(g);
    icefall_zf_gpu_destroy(gh);
    icefall_destroy(m);
}
