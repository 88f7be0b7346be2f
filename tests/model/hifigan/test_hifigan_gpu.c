/* GPU tests for src/model/hifigan/hifigan_gpu.c: the random-weight V3 golden's every stage
 * (conv_pre, ups, stage-0 resblocks, mrf, conv_post, audio) on the GPU against the goldens and the
 * CPU path, FP32 and FP16; the whole clip and the real V3 resynthesis; a batch of 3 mels of
 * different lengths against each alone on the CPU (padding never leaks into an item) and the graph
 * replay; a generated ResBlock1 model with awkward sizes (20 mels, 52 -> 26 -> 13 channels, rates 3
 * and 2 with kernels 7 and 4) against the CPU; a generated ResBlock1 model of V1's resblocks at
 * widths the fused resblock units take (128 -> 64 -> 32) against the CPU, fused and conv by conv
 * against each other. 16-bit workers run the fused units by default (the V3 tests run them).
 * Tolerances, max |diff| / max |ref| per stage: FP32 1e-4 (the README's deep-stack figure; only the
 * order of FP32 sums differs from the CPU). FP16 (operands rounded to half, unit roundoff 2^-11
 * = 4.9e-4, FP32 accumulation and residual stream): a single conv's output errs by a few roundoffs
 * of its inputs relative to its largest value, and the stages add up ~20 convs (V3: 3 stages x 3
 * resblocks x 2 convs + the upsamplers) whose relative errors add through the residuals and the MRF
 * mean, tanh never amplifying. Measured on the H100, both GPU paths alike (session 12):
 * conv_pre 3.6e-4, the later stages of the random V3 golden and its batch of 3 lengths at
 * most 1.2e-3, the real V3's whole clip 1.9e-2 (its trained weights drive the stack harder than
 * random ones). Bounds: 1.5e-3 for conv_pre, 5e-3 for the random-weight stages and batches, 3e-2
 * for the real clip; each test prints the measured value. */
#include "test.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "hark.h"
#include "model/hifigan/hifigan.h"
#include "model/hifigan/hifigan_gpu.h"
#include "support/golden_tts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL32 1e-4
#define TOL16_PRE 1.5e-3
#define TOL16 5e-3
#define TOL16_REAL 3e-2

static double tol_for(ops_dtype_t dt, const char *stage)
{
    if (dt == OPS_F32)
        return TOL32;
    return strcmp(stage, "conv_pre") ? TOL16 : TOL16_PRE;
}

static const char *v3_model(char *why, size_t nwhy)
{
    return golden_tts_model("hifigan_v3", "convert_hifigan.py", "hifigan_v3/g_00000000",
                            "hifigan_v3/config.json", why, nwhy);
}

static const char *v3_real_model(char *why, size_t nwhy)
{
    return golden_tts_model("hifigan_v3_real", "convert_hifigan.py",
                            "hifigan_v3_real/generator_v3_ljspeech_wn_removed_fp16.pt",
                            "hifigan_v3/config.json", why, nwhy);
}

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double rel_diff(const float *got, const float *ref, size_t n)
{
    return test_max_abs_diff(got, ref, n) / fmax(max_abs(ref, n), 1e-30);
}

#define LOAD(m, fn)                                                                                \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = fn(why_, sizeof why_);                                                  \
        if (!dir_) {                                                                               \
            if (!test_shared("golden/tts"))                                                        \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(hifigan_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                       \
    } while (0)

/* ---- stages: the CPU's, kept by name, then the GPU's compared with them and the goldens -------
 */

#define MAX_STAGES 24
typedef struct {
    int n;
    char name[MAX_STAGES][32];
    float *data[MAX_STAGES];
    size_t count[MAX_STAGES];
} cpu_stages_t;

static void keep_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    cpu_stages_t *s = user;
    if (s->n >= MAX_STAGES)
        return;
    size_t n = (size_t)rows * cols;
    snprintf(s->name[s->n], sizeof s->name[s->n], "%s", name);
    s->data[s->n] = malloc(n * sizeof(float));
    memcpy(s->data[s->n], data, n * sizeof(float));
    s->count[s->n++] = n;
}

static void free_stages(cpu_stages_t *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->data[i]);
    s->n = 0;
}

typedef struct {
    const cpu_stages_t *cpu;
    ops_dtype_t dt;
    int golden; /* compare with hifigan_v3/short/<name>.npy too */
    int n_checked, n_bad;
    char first_bad[256];
} gpu_check_t;

static void check_stage(void *user, int item, const char *name, const float *data, int rows,
                        int cols)
{
    gpu_check_t *c = user;
    size_t n = (size_t)rows * cols;
    double tol = tol_for(c->dt, name), d_cpu = INFINITY, d_gold = -1;
    for (int i = 0; i < c->cpu->n; i++)
        if (!strcmp(c->cpu->name[i], name) && c->cpu->count[i] == n)
            d_cpu = rel_diff(data, c->cpu->data[i], n);
    if (c->golden) {
        char rel[128];
        npy_array_t g = {0};
        snprintf(rel, sizeof rel, "hifigan_v3/short/%s.npy", name);
        d_gold = INFINITY;
        if (golden_tts_npy(&g, rel) == HARK_OK && g.count == n)
            d_gold = rel_diff(data, g.data, n);
        npy_free(&g);
    }
    printf("    %s item %d %-10s (%d, %d) max rel diff vs CPU %.3g, vs golden %.3g (bound %g)\n",
           c->dt == OPS_F32 ? "fp32" : "fp16", item, name, rows, cols, d_cpu, d_gold, tol);
    c->n_checked++;
    if (!(d_cpu <= tol) || !(d_gold <= tol)) {
        if (!c->n_bad++)
            snprintf(c->first_bad, sizeof c->first_bad, "%s: vs CPU %.3g, vs golden %.3g", name,
                     d_cpu, d_gold);
    }
}

static void v3_stages(test_ctx_t *t, ops_dtype_t dt)
{
    hifigan_model_t *m = NULL;
    LOAD(m, v3_model);
    npy_array_t mel = {0}, ga = {0};
    CHECK(golden_tts_npy(&mel, "hifigan_v3/short/mel_input.npy") == HARK_OK);
    CHECK(golden_tts_npy(&ga, "hifigan_v3/short/audio.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    size_t ns = hifigan_samples(m, nf);
    float *cpu_audio = malloc(ns * 4), *audio = malloc(ns * 4);
    cpu_stages_t cs = {0};
    hark_err_t err = {0};
    CHECK_OK(hifigan_forward(m, mel.data, nf, cpu_audio, keep_stage, &cs, &err));
    hifigan_gpu_model_t *g = NULL;
    hifigan_gpu_worker_t *w = NULL;
    CHECKF(hifigan_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(hifigan_gpu_worker_create(g, 3, 200, &w, &err) == HARK_OK, "%s", err.msg);
    gpu_check_t c = {&cs, dt, 1, 0, 0, ""};
    const float *mels[1] = {mel.data};
    float *outs[1] = {audio};
    CHECKF(hifigan_gpu_run(w, mels, &nf, 1, outs, check_stage, &c, &err) == HARK_OK, "%s", err.msg);
    double d_cpu = rel_diff(audio, cpu_audio, ns), d_gold = rel_diff(audio, ga.data, ns);
    printf("    %s audio (1, %zu) max rel diff vs CPU %.3g, vs golden %.3g\n",
           dt == OPS_F32 ? "fp32" : "fp16", ns, d_cpu, d_gold);
    /* the same without stages, through a graph (third run replays the second's) */
    float *again = malloc(ns * 4);
    outs[0] = again;
    for (int i = 0; i < 3; i++)
        CHECKF(hifigan_gpu_run(w, mels, &nf, 1, outs, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
    double d_graph = test_max_abs_diff(again, audio, ns);
    hifigan_gpu_worker_destroy(w);
    hifigan_gpu_model_destroy(g);
    free_stages(&cs);
    free(cpu_audio);
    free(audio);
    free(again);
    npy_free(&mel);
    npy_free(&ga);
    hifigan_destroy(m);
    CHECKF(c.n_checked == 11, "%d stages checked", c.n_checked);
    CHECKF(c.n_bad == 0, "%d stages over the bound: first %s", c.n_bad, c.first_bad);
    CHECKF(d_cpu <= tol_for(dt, "audio") && d_gold <= tol_for(dt, "audio"),
           "audio: vs CPU %g, vs golden %g", d_cpu, d_gold);
    /* the same kernels on the same shapes: equal but for a GEMM backend's own choices */
    printf("    graph replay vs the staged run: max abs diff %.3g\n", d_graph);
    CHECKF(d_graph <= 1e-6, "the graph replay differs from the direct run by %g", d_graph);
}

GPU_TEST(hifigan_gpu_v3_stages_fp32)
{
    v3_stages(t, OPS_F32);
}

GPU_TEST(hifigan_gpu_v3_stages_fp16)
{
    v3_stages(t, OPS_F16);
}

/* items of different lengths in one batch == each alone on the CPU; and == the batch-1 GPU run */
static void batch_vs_cpu(test_ctx_t *t, hifigan_model_t *m, ops_dtype_t dt, const float *mel_full,
                         int nf_full, const int *starts, const int *lens, int batch, double tol,
                         hifigan_fused_t fused)
{
    int nm = hifigan_config(m)->num_mels;
    hark_err_t err = {0};
    hifigan_gpu_model_t *g = NULL;
    hifigan_gpu_worker_t *w = NULL;
    CHECKF(hifigan_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(hifigan_gpu_worker_create(g, batch, nf_full, &w, &err) == HARK_OK, "%s", err.msg);
    hifigan_gpu_set_fused(w, fused);
    printf("    %s, %d stages fused\n", dt == OPS_F32 ? "fp32" : "fp16",
           hifigan_gpu_fused_stages(w));
    float *mels[8], *outs[8], *cpu[8], *one[8];
    for (int b = 0; b < batch; b++) {
        mels[b] = malloc(sizeof(float) * nm * lens[b]);
        for (int r = 0; r < nm; r++)
            memcpy(mels[b] + (size_t)r * lens[b], mel_full + (size_t)r * nf_full + starts[b],
                   sizeof(float) * lens[b]);
        size_t ns = hifigan_samples(m, lens[b]);
        outs[b] = malloc(ns * 4);
        cpu[b] = malloc(ns * 4);
        one[b] = malloc(ns * 4);
        CHECK_OK(hifigan_forward(m, mels[b], lens[b], cpu[b], NULL, NULL, &err));
        const float *mb[1] = {mels[b]};
        float *ob[1] = {one[b]};
        CHECKF(hifigan_gpu_run(w, mb, &lens[b], 1, ob, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
    }
    CHECKF(hifigan_gpu_run(w, (const float *const *)mels, lens, batch, outs, NULL, NULL, &err) ==
               HARK_OK,
           "%s", err.msg);
    int bad = -1;
    double worst = 0, worst_one = 0;
    for (int b = 0; b < batch; b++) {
        size_t ns = hifigan_samples(m, lens[b]);
        double d = rel_diff(outs[b], cpu[b], ns), d1 = rel_diff(outs[b], one[b], ns);
        printf(
            "    %s batch item %d (%d frames): max rel diff vs CPU %.3g, vs the GPU alone %.3g\n",
            dt == OPS_F32 ? "fp32" : "fp16", b, lens[b], d, d1);
        if (!(d <= tol) && bad < 0)
            bad = b;
        worst = fmax(worst, d);
        worst_one = fmax(worst_one, d1);
        free(mels[b]);
        free(outs[b]);
        free(cpu[b]);
        free(one[b]);
    }
    hifigan_gpu_worker_destroy(w);
    hifigan_gpu_model_destroy(g);
    CHECKF(bad < 0, "item %d over %g (worst %g)", bad, tol, worst);
    /* the same item alone or in a batch: only GEMM shapes differ (FP32 sums' order) */
    CHECKF(worst_one <= (dt == OPS_F32 ? 1e-5 : 1e-3), "batch vs alone %g", worst_one);
}

GPU_TEST(hifigan_gpu_v3_batch_of_different_lengths)
{
    hifigan_model_t *m = NULL;
    LOAD(m, v3_model);
    npy_array_t mel = {0};
    CHECK(golden_tts_npy(&mel, "hifigan_v3/mel/mel.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    const int starts[3] = {0, 40, 100}, lens[3] = {nf, 37, 1};
    batch_vs_cpu(t, m, OPS_F32, mel.data, nf, starts, lens, 3, TOL32, HIFIGAN_FUSED);
    if (!test_failed(t))
        batch_vs_cpu(t, m, OPS_F16, mel.data, nf, starts, lens, 3, TOL16, HIFIGAN_FUSED);
    if (!test_failed(t))
        batch_vs_cpu(t, m, OPS_F16, mel.data, nf, starts, lens, 3, TOL16, HIFIGAN_CONV_BY_CONV);
    npy_free(&mel);
    hifigan_destroy(m);
}

GPU_TEST(hifigan_gpu_v3_real_full_clip)
{
    hifigan_model_t *m = NULL;
    LOAD(m, v3_real_model);
    npy_array_t mel = {0}, ga = {0};
    CHECK(golden_tts_npy(&mel, "hifigan_v3_real/mel_input.npy") == HARK_OK);
    CHECK(golden_tts_npy(&ga, "hifigan_v3_real/audio.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    size_t ns = hifigan_samples(m, nf);
    CHECK(ns == ga.count);
    float *audio = malloc(ns * 4);
    double d[2] = {INFINITY, INFINITY};
    for (int p = 0; p < 2; p++) {
        ops_dtype_t dt = p ? OPS_F16 : OPS_F32;
        hark_err_t err = {0};
        hifigan_gpu_model_t *g = NULL;
        hifigan_gpu_worker_t *w = NULL;
        CHECKF(hifigan_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
        CHECKF(hifigan_gpu_worker_create(g, 1, nf, &w, &err) == HARK_OK, "%s", err.msg);
        const float *mb[1] = {mel.data};
        float *ob[1] = {audio};
        CHECKF(hifigan_gpu_run(w, mb, &nf, 1, ob, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
        d[p] = rel_diff(audio, ga.data, ns);
        printf("    real V3 %s, %d frames -> %zu samples: max rel diff vs golden %.3g\n",
               p ? "fp16" : "fp32", nf, ns, d[p]);
        hifigan_gpu_worker_destroy(w);
        hifigan_gpu_model_destroy(g);
    }
    free(audio);
    npy_free(&mel);
    npy_free(&ga);
    hifigan_destroy(m);
    CHECKF(d[0] <= TOL32, "fp32 %g", d[0]);
    CHECKF(d[1] <= TOL16_REAL, "fp16 %g", d[1]);
}

/* a generator of config `json` with seeded random weights (tools/convert_hifigan.py --random
 * SEED) under the test's temporary folder, loaded; NULL (the reason checked or skipped) else */
static hifigan_model_t *generated(test_ctx_t *t, const char *json, int seed, const char *name)
{
    const char *py = test_python("numpy"); /* Debian's, or the device's on PATH */
    if (!py) {
        test_skip(t, "no python3 with numpy (tools/convert_hifigan.py --random needs it)");
        return NULL;
    }
    const char *tmp = test_tmpdir(t);
    char cmd[4096], dir[600];
    snprintf(cmd, sizeof cmd,
             "printf '%%s' '%s' > '%s/%s.json' && %s tools/convert_hifigan.py --random %d --config "
             "'%s/%s.json' --output '%s/%s' > '%s/%s.log' 2>&1",
             json, tmp, name, py, seed, tmp, name, tmp, name, tmp, name);
    if (system(cmd) != 0) {
        test_fail(t, __FILE__, __LINE__, "the converter failed: see %s/%s.log", tmp, name);
        return NULL;
    }
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    hifigan_model_t *m = NULL;
    hark_err_t err = {0};
    if (hifigan_load(dir, 1, &m, &err) != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "%s", err.msg);
    return m;
}

/* a generated ResBlock1 model whose channels are no multiple of 8 */
GPU_TEST(hifigan_gpu_awkward_resblock1_matches_cpu)
{
    hifigan_model_t *m = generated(
        t,
        "{\"resblock\": \"1\", \"num_mels\": 20, \"upsample_rates\": [3, 2], "
        "\"upsample_kernel_sizes\": [7, 4], \"upsample_initial_channel\": 52, "
        "\"resblock_kernel_sizes\": [3, 5], \"resblock_dilation_sizes\": [[1, 3, 5], [1, 2, 3]], "
        "\"sampling_rate\": 8000, \"n_fft\": 64, \"hop_size\": 6, \"win_size\": 64}",
        3, "awk");
    if (!m)
        return;
    const int nf = 23, nm = 20;
    float *mel = malloc(sizeof(float) * nm * nf);
    unsigned seed = 17;
    for (int i = 0; i < nm * nf; i++)
        mel[i] = 2.0f * test_randf(&seed) - 3.0f;
    const int starts[3] = {0, 4, 11}, lens[3] = {nf, 17, 1};
    batch_vs_cpu(t, m, OPS_F32, mel, nf, starts, lens, 3, TOL32, HIFIGAN_FUSED);
    if (!test_failed(t)) /* the a-priori bound, kept: the test runs on the device since session
                          * 16 (passed) but its value was not recorded */
        batch_vs_cpu(t, m, OPS_F16, mel, nf, starts, lens, 3, TOL16_REAL, HIFIGAN_FUSED);
    free(mel);
    hifigan_destroy(m);
}

/* a generated ResBlock1 model of V1's resblocks (kernels 3 / 7 / 11, dilations 1 / 3 / 5) at widths
 * the fused units take (128 -> 64 -> 32 channels): FP16 with the stages fused (the residual
 * between dilations in 16 bits, the default) against the CPU; fused with that residual in FP32
 * against the same conv by conv (both round at the same points: 1e-3, as a batch against its
 * items); the 16-bit residual's own difference printed */
GPU_TEST(hifigan_gpu_fused_resblock1_matches_cpu)
{
    hifigan_model_t *m = generated(
        t,
        "{\"resblock\": \"1\", \"num_mels\": 80, \"upsample_rates\": [4, 2], "
        "\"upsample_kernel_sizes\": [8, 4], \"upsample_initial_channel\": 128, "
        "\"resblock_kernel_sizes\": [3, 7, 11], \"resblock_dilation_sizes\": [[1, 3, 5], "
        "[1, 3, 5], [1, 3, 5]], \"sampling_rate\": 16000, \"n_fft\": 64, \"hop_size\": 8, "
        "\"win_size\": 64}",
        5, "v1s");
    if (!m)
        return;
    hark_err_t err = {0};
    const int nf = 150, nm = 80;
    float *mel = malloc(sizeof(float) * nm * nf);
    unsigned seed = 19;
    for (int i = 0; i < nm * nf; i++)
        mel[i] = 2.0f * test_randf(&seed) - 3.0f;
    const int starts[3] = {0, 9, 40}, lens[3] = {nf, 97, 1};
    batch_vs_cpu(t, m, OPS_F16, mel, nf, starts, lens, 3, TOL16, HIFIGAN_FUSED);
    /* fused and conv by conv on the GPU */
    hifigan_gpu_model_t *g = NULL;
    hifigan_gpu_worker_t *w = NULL;
    CHECKF(hifigan_gpu_model_create(m, 0, OPS_F16, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(hifigan_gpu_worker_create(g, 1, nf, &w, &err) == HARK_OK, "%s", err.msg);
    CHECK_EQ_INT(hifigan_gpu_fused_stages(w), 2);
    size_t ns = hifigan_samples(m, nf);
    float *a = malloc(ns * 4), *b = malloc(ns * 4), *h = malloc(ns * 4);
    const float *mb[1] = {mel};
    float *oa[1] = {a}, *ob[1] = {b}, *oh[1] = {h};
    CHECKF(hifigan_gpu_run(w, mb, &nf, 1, oh, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
    hifigan_gpu_set_res16(w, 0);
    CHECKF(hifigan_gpu_run(w, mb, &nf, 1, oa, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
    hifigan_gpu_set_fused(w, HIFIGAN_CONV_BY_CONV);
    CHECK_EQ_INT(hifigan_gpu_fused_stages(w), 0);
    CHECKF(hifigan_gpu_run(w, mb, &nf, 1, ob, NULL, NULL, &err) == HARK_OK, "%s", err.msg);
    double d = rel_diff(a, b, ns), d16 = rel_diff(h, b, ns);
    printf("    fused vs conv by conv (fp16, %d frames): max rel diff %.3g; with the 16-bit "
           "residual %.3g\n",
           nf, d, d16);
    CHECKF(d <= 1e-3, "fused vs conv by conv %g", d);
    free(a);
    free(b);
    free(h);
    hifigan_gpu_worker_destroy(w);
    hifigan_gpu_model_destroy(g);
    free(mel);
    hifigan_destroy(m);
}

GPU_TEST(hifigan_gpu_refuses_bad_batches)
{
    hifigan_model_t *m = NULL;
    LOAD(m, v3_model);
    hark_err_t err = {0};
    hifigan_gpu_model_t *g = NULL;
    hifigan_gpu_worker_t *w = NULL;
    CHECKF(hifigan_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
    CHECK_EQ_INT(hifigan_gpu_worker_create(g, 0, 10, &w, &err), HARK_ERR_INVALID_ARG);
    CHECKF(hifigan_gpu_worker_create(g, 2, 10, &w, &err) == HARK_OK, "%s", err.msg);
    float mel[80 * 11] = {0}, audio[11 * 256];
    const float *mb[3] = {mel, mel, mel};
    float *ob[3] = {audio, audio, audio};
    int n11 = 11, n0 = 0;
    CHECK_EQ_INT(hifigan_gpu_run(w, mb, &n11, 1, ob, NULL, NULL, &err), HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(hifigan_gpu_run(w, mb, &n0, 1, ob, NULL, NULL, &err), HARK_ERR_INVALID_ARG);
    int n3[3] = {3, 3, 3};
    CHECK_EQ_INT(hifigan_gpu_run(w, mb, n3, 3, ob, NULL, NULL, &err), HARK_ERR_TOO_LARGE);
    mel[5] = NAN;
    CHECK_EQ_INT(hifigan_gpu_run(w, mb, n3, 1, ob, NULL, NULL, &err), HARK_ERR_INVALID_ARG);
    hifigan_gpu_worker_destroy(w);
    hifigan_gpu_model_destroy(g);
    hifigan_destroy(m);
}

#endif
