/* GPU tests for src/model/fastspeech/fastspeech_gpu.c: the three golden sentences in ONE batch
 * (111, 122 and 51 symbols; 536, 579 and 211 frames), every stage of every item against DLE's
 * goldens for that sentence alone and against the CPU path, FP32 and FP16; per-item alpha (1.3,
 * 1, 1.3) against the alpha-1.3 goldens; bad input.
 * Tolerances, max |diff| / max |ref| per stage: FP32 1e-4 (the README's deep-stack figure),
 * durations and frame counts exact (the host rounds them by the CPU's rule from the FP32 duration
 * predictor's output; the goldens keep >= 3e-3 from a tie). FP16 (half operands, unit roundoff
 * 4.9e-4, FP32 accumulation, residuals and layer norms, the duration predictor in FP32): a few
 * roundoffs per GEMM, post-LN renormalising each block; measured on the H100, both GPU paths
 * alike (session 12), at most 5.4e-4 at any stage and the mel: bound 3e-3; the durations may move
 * by one frame where dur·alpha lies within the FP16 encoder's error of a .5 tie: at most 2 symbols
 * of a sentence may differ by 1, and the mel side is compared only where the frame count is exact.
 * Each test prints the measured figures. */
#include "test.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "model/fastspeech/fastspeech_gpu.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL32 1e-4
#define TOL16 3e-3
#define TOL16_MEL 3e-3

static const char *const SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

static const char *fs_model(char *why, size_t nwhy)
{
    return golden_tts_model("fastspeech", "convert_fastspeech.py",
                            "fastspeech/checkpoint_000000.pt", "fastspeech/config.json", why, nwhy);
}

#define LOAD_MODEL(m)                                                                              \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = fs_model(why_, sizeof why_);                                            \
        if (!dir_) {                                                                               \
            if (!test_shared("golden/tts"))                                                        \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(fastspeech_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                    \
    } while (0)

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* the CPU's stages of one sentence, kept by name */
#define MAX_ST 32
typedef struct {
    int n;
    char name[MAX_ST][40];
    float *data[MAX_ST];
    size_t count[MAX_ST];
} cpu_st_t;

static void keep(void *user, const char *name, const float *data, int rows, int cols)
{
    cpu_st_t *s = user;
    if (s->n >= MAX_ST)
        return;
    size_t n = (size_t)rows * cols;
    snprintf(s->name[s->n], sizeof s->name[s->n], "%s", name);
    s->data[s->n] = malloc(n * 4);
    memcpy(s->data[s->n], data, n * 4);
    s->count[s->n++] = n;
}

typedef struct {
    ops_dtype_t dt;
    cpu_st_t cpu[3];
    const char *gdir[3]; /* golden dirs per item */
    int frames_exact[3]; /* mel side comparable */
    int n_checked, n_bad, dur_moved[3];
    char first_bad[300];
} check_t;

static int is_dur(const char *name)
{
    return !strncmp(name, "dur_", 4);
}

static int mel_side(const char *name)
{
    return !strncmp(name, "mel", 3) || !strncmp(name, "dec_", 4) || !strcmp(name, "decoder_out");
}

static void on_gpu_stage(void *user, int item, const char *name, const float *data, int rows,
                         int cols)
{
    check_t *c = user;
    size_t n = (size_t)rows * cols;
    int rounded = !strcmp(name, "dur_rounded");
    double tol = c->dt == OPS_F32 ? TOL32 : !strcmp(name, "mel") ? TOL16_MEL : TOL16;
    double d_cpu = INFINITY, d_gold = INFINITY;
    const cpu_st_t *cs = &c->cpu[item];
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->name[i], name) && cs->count[i] == n) {
            d_cpu = test_max_abs_diff(data, cs->data[i], n);
            if (!rounded)
                d_cpu /= fmax(max_abs(cs->data[i], n), 1e-30);
        }
    char rel[160];
    npy_array_t g = {0};
    snprintf(rel, sizeof rel, "fastspeech/%s/%s.npy", c->gdir[item], name);
    int have_gold = golden_tts_npy(&g, rel) == HARK_OK;
    if (have_gold && g.count == n) {
        d_gold = test_max_abs_diff(data, g.data, n);
        if (!rounded)
            d_gold /= fmax(max_abs(g.data, n), 1e-30);
    }
    if (rounded && c->dt != OPS_F32) { /* count the symbols whose duration moved */
        int moved = 0, over = 0;
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < cs->n; k++)
                if (!strcmp(cs->name[k], name) && cs->count[k] == n && data[i] != cs->data[k][i]) {
                    moved++;
                    over |= fabsf(data[i] - cs->data[k][i]) > 1;
                }
        c->dur_moved[item] = over ? 1000 : moved;
    }
    int skip = mel_side(name) && !c->frames_exact[item];
    printf("    %s item %d %-22s (%d, %d) max %s diff vs CPU %.3g, vs golden %.3g%s\n",
           c->dt == OPS_F32 ? "fp32" : "fp16", item, name, rows, cols, rounded ? "abs" : "rel",
           d_cpu, have_gold ? d_gold : -1.0, skip ? " (frame count differs: not compared)" : "");
    npy_free(&g);
    if (skip)
        return;
    c->n_checked++;
    int ok;
    if (rounded)
        ok = c->dt == OPS_F32 ? d_cpu == 0 && (!have_gold || d_gold == 0) : c->dur_moved[item] <= 2;
    else if (is_dur(name) && c->dt != OPS_F32)
        ok = 1; /* printed; judged through the rounded durations */
    else
        ok = d_cpu <= tol && (!have_gold || d_gold <= tol);
    if (!ok && !c->n_bad++)
        snprintf(c->first_bad, sizeof c->first_bad, "item %d %s: vs CPU %.3g, vs golden %.3g", item,
                 name, d_cpu, d_gold);
}

static void run_batch(test_ctx_t *t, ops_dtype_t dt, const float *alpha)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    tts_text_t tt[3];
    const int *ids[3];
    int n[3], nf_cpu[3], nf[3], T = 0;
    float *cpu_mel[3];
    hark_err_t err = {0};
    check_t *c = calloc(1, sizeof *c);
    c->dt = dt;
    static const char *const d1[3] = {"s0", "s1", "s2"}, *const d13[3] = {"s0/alpha1.3",
                                                                          "s1/alpha1.3",
                                                                          "s2/alpha1.3"};
    for (int i = 0; i < 3; i++) {
        CHECKF(tts_text_to_ids(SENTENCES[i], &tt[i], &err) == HARK_OK, "%s", err.msg);
        ids[i] = tt[i].ids;
        n[i] = tt[i].n;
        c->gdir[i] = alpha[i] == 1.0f ? d1[i] : d13[i];
        fastspeech_opts_t o = {alpha[i], 0, 0, keep, &c->cpu[i]};
        CHECK_OK(fastspeech_forward(m, ids[i], n[i], &o, &cpu_mel[i], &nf_cpu[i], &err));
    }
    fastspeech_gpu_model_t *g = NULL;
    fastspeech_gpu_worker_t *w = NULL;
    CHECKF(fastspeech_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(fastspeech_gpu_worker_create(g, 3, 256, 1024, &w, &err) == HARK_OK, "%s", err.msg);
    /* a first run without stages: the frame counts (for the FP16 comparison rule) */
    const float *d_mel = NULL;
    fastspeech_gpu_opts_t go = {alpha, NULL, NULL};
    CHECKF(fastspeech_gpu_run(w, ids, n, 3, &go, nf, &T, &d_mel, &err) == HARK_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        c->frames_exact[i] = nf[i] == nf_cpu[i];
        printf("    %s item %d: %d symbols, %d frames (CPU %d)\n", dt == OPS_F32 ? "fp32" : "fp16",
               i, n[i], nf[i], nf_cpu[i]);
    }
    go.stage = on_gpu_stage;
    go.stage_user = c;
    CHECKF(fastspeech_gpu_run(w, ids, n, 3, &go, nf, &T, &d_mel, &err) == HARK_OK, "%s", err.msg);
    /* the mel through the host copy equals the staged one's source */
    double dm = 0;
    for (int i = 0; i < 3; i++)
        if (c->frames_exact[i]) {
            float *h = malloc(sizeof(float) * (size_t)nf[i] * 80);
            CHECK_OK(fastspeech_gpu_mel_to_host(w, i, h, &err));
            dm = fmax(dm, test_max_abs_diff(h, cpu_mel[i], (size_t)nf[i] * 80) /
                              max_abs(cpu_mel[i], (size_t)nf[i] * 80));
            free(h);
        }
    printf("    %s mel (host copy) max rel diff vs CPU %.3g\n", dt == OPS_F32 ? "fp32" : "fp16",
           dm);
    /* twice more without stages: the phases recorded as graphs, then replayed */
    go.stage = NULL;
    double dg = 0;
    for (int rep = 0; rep < 2; rep++) {
        int nf2[3], T2 = 0;
        CHECKF(fastspeech_gpu_run(w, ids, n, 3, &go, nf2, &T2, &d_mel, &err) == HARK_OK, "%s",
               err.msg);
        for (int i = 0; i < 3; i++) {
            CHECK(nf2[i] == nf[i]);
            float *h = malloc(sizeof(float) * (size_t)nf[i] * 80);
            CHECK_OK(fastspeech_gpu_mel_to_host(w, i, h, &err));
            if (c->frames_exact[i])
                dg = fmax(dg, test_max_abs_diff(h, cpu_mel[i], (size_t)nf[i] * 80) /
                                  max_abs(cpu_mel[i], (size_t)nf[i] * 80));
            free(h);
        }
    }
    printf("    %s mel through the graphs: max rel diff vs CPU %.3g\n",
           dt == OPS_F32 ? "fp32" : "fp16", dg);
    dm = fmax(dm, dg);
    fastspeech_gpu_worker_destroy(w);
    fastspeech_gpu_model_destroy(g);
    int exact = 1;
    for (int i = 0; i < 3; i++) {
        exact &= c->frames_exact[i];
        tts_text_free(&tt[i]);
        hark_free(cpu_mel[i]);
        for (int k = 0; k < c->cpu[i].n; k++)
            free(c->cpu[i].data[k]);
    }
    fastspeech_destroy(m);
    int bad = c->n_bad, checked = c->n_checked;
    char first[300];
    snprintf(first, sizeof first, "%s", c->first_bad);
    free(c);
    CHECKF(dt != OPS_F32 || exact, "fp32: a frame count differs from the CPU's");
    CHECKF(checked >= 3 * 9, "%d stages checked", checked);
    CHECKF(bad == 0, "%d stages over the bound; first %s", bad, first);
    CHECKF(dm <= (dt == OPS_F32 ? TOL32 : TOL16_MEL), "mel host copy %g", dm);
}

GPU_TEST(fastspeech_gpu_batch_stages_fp32)
{
    const float alpha[3] = {1, 1, 1};
    run_batch(t, OPS_F32, alpha);
}

GPU_TEST(fastspeech_gpu_batch_alpha_per_item_fp32)
{
    const float alpha[3] = {1.3f, 1.0f, 1.3f};
    run_batch(t, OPS_F32, alpha);
}

GPU_TEST(fastspeech_gpu_batch_stages_fp16)
{
    const float alpha[3] = {1, 1, 1};
    run_batch(t, OPS_F16, alpha);
}

GPU_TEST(fastspeech_gpu_bad_input)
{
    fastspeech_model_t *m = NULL;
    LOAD_MODEL(m);
    hark_err_t err = {0};
    fastspeech_gpu_model_t *g = NULL;
    fastspeech_gpu_worker_t *w = NULL;
    CHECKF(fastspeech_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
    CHECK_EQ_INT(fastspeech_gpu_worker_create(g, 0, 10, 10, &w, &err), HARK_ERR_INVALID_ARG);
    CHECKF(fastspeech_gpu_worker_create(g, 2, 8, 64, &w, &err) == HARK_OK, "%s", err.msg);
    int a[9] = {10, 11, 12, 13, 14, 15, 16, 17, 18}, bad[2] = {10, 149};
    const int *ids[3] = {a, a, a};
    int n9 = 9, n2 = 2, n0 = 0, nf[3], T;
    const float *d = NULL;
    CHECK_EQ_INT(fastspeech_gpu_run(w, ids, &n9, 1, NULL, nf, &T, &d, &err), HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(fastspeech_gpu_run(w, ids, &n0, 1, NULL, nf, &T, &d, &err), HARK_ERR_INVALID_ARG);
    int n3[3] = {3, 3, 3};
    CHECK_EQ_INT(fastspeech_gpu_run(w, ids, n3, 3, NULL, nf, &T, &d, &err), HARK_ERR_TOO_LARGE);
    ids[0] = bad;
    CHECK_EQ_INT(fastspeech_gpu_run(w, ids, &n2, 1, NULL, nf, &T, &d, &err), HARK_ERR_INVALID_ARG);
    fastspeech_gpu_worker_destroy(w);
    fastspeech_gpu_model_destroy(g);
    fastspeech_destroy(m);
}

#endif
