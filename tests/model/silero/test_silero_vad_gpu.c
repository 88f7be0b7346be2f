/* GPU tests for src/model/silero/silero_vad_gpu.cu against its CPU reference, silero_vad_step:
 * - random weights (scaled by 1/sqrt(fan-in)) with the 16 kHz and the 8 kHz network's sizes, on
 *   files of awkward lengths (0, 1, one sample short of and past a window, long ones, more files
 *   than a block takes and a count that is no multiple of it), every file from a fresh state;
 * - the launcher as a live stream runs it: one window per call for every stream, the state kept
 *   on the device, the probabilities written into a poisoned buffer whose guard must stay
 *   poisoned; equal to the whole-file run;
 * - the real Silero VAD on the shared English audio (when ../shared is present), at both rates.
 * Tolerance: every probability within 1e-5 of the CPU's (both FP32; only the order of the sums
 * differs). The CPU side is silero_vad_step run one file at a time. */
#include "test.h"

#include "hark.h"
#include "model/silero/silero_vad.h"
#include "model/silero/silero_vad_gpu.h"

#include <string.h>

#ifdef HARK_CUDA
#include "audio/audio.h"
#include "support/golden_silero.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TOL 1e-5
#define GUARD 64

typedef struct {
    silero_rate_t r;
    float *block;
} rand_net_t;

/* a network with silero's sizes at `rate` (16000 or 8000) and random weights */
static int rand_net(rand_net_t *n, int rate, unsigned seed)
{
    silero_rate_t *r = &n->r;
    memset(n, 0, sizeof *n);
    int k = rate == 8000 ? 1 : 2;
    r->sample_rate = rate;
    r->window = 256 * k;
    r->context = 32 * k;
    r->n_fft = 128 * k;
    r->hop = 64 * k;
    r->pad = 32 * k;
    r->frames = 4;
    r->n_bins = r->n_fft / 2 + 1;
    static const int cout[SILERO_N_CONV] = {128, 64, 64, 128}, stride[SILERO_N_CONV] = {1, 2, 2, 1};
    size_t total = (size_t)2 * r->n_bins * r->n_fft;
    for (int i = 0; i < SILERO_N_CONV; i++) {
        r->cin[i] = i ? cout[i - 1] : r->n_bins;
        r->cout[i] = cout[i];
        r->stride[i] = stride[i];
        total += (size_t)r->cout[i] * 3 * r->cin[i] + (size_t)r->cout[i];
    }
    total += (size_t)2 * 4 * SILERO_HIDDEN * SILERO_HIDDEN + 2 * 4 * SILERO_HIDDEN + SILERO_HIDDEN;
    n->block = malloc(total * sizeof(float));
    if (!n->block)
        return -1;
    float *p = n->block;
    unsigned st = seed;
#define TAKE(dst, cnt, fan)                                                                        \
    do {                                                                                           \
        dst = p;                                                                                   \
        float sc_ = 1.0f / sqrtf((float)(fan));                                                    \
        for (size_t i_ = 0; i_ < (size_t)(cnt); i_++)                                              \
            p[i_] = test_randf(&st) * sc_;                                                         \
        p += (cnt);                                                                                \
    } while (0)
    TAKE(r->basis, (size_t)2 * r->n_bins * r->n_fft, 16);
    for (int i = 0; i < SILERO_N_CONV; i++) {
        TAKE(r->conv_w[i], (size_t)r->cout[i] * 3 * r->cin[i], r->cin[i]);
        TAKE(r->conv_b[i], (size_t)r->cout[i], 4);
    }
    TAKE(r->w_ih, (size_t)4 * SILERO_HIDDEN * SILERO_HIDDEN, SILERO_HIDDEN / 4);
    TAKE(r->w_hh, (size_t)4 * SILERO_HIDDEN * SILERO_HIDDEN, SILERO_HIDDEN / 4);
    TAKE(r->b_ih, 4 * SILERO_HIDDEN, 1);
    TAKE(r->b_hh, 4 * SILERO_HIDDEN, 1);
    TAKE(r->out_w, SILERO_HIDDEN, 4);
#undef TAKE
    r->out_b = 0.1f;
    return 0;
}

/* the CPU reference: one file, fresh state, zero-padded last window */
static int cpu_probs(const silero_rate_t *r, const float *x, size_t n, float *probs)
{
    size_t W = (size_t)r->window, nw = silero_vad_n_windows(r, n);
    float *state = calloc(silero_vad_state_floats(r), sizeof(float));
    float *scratch = malloc(silero_vad_scratch_floats(r, 1) * sizeof(float));
    float *win = malloc(W * sizeof(float));
    if (!state || !scratch || !win) {
        free(state);
        free(scratch);
        free(win);
        return -1;
    }
    for (size_t k = 0; k < nw; k++) {
        size_t avail = n - k * W < W ? n - k * W : W;
        memcpy(win, x + k * W, avail * sizeof(float));
        memset(win + avail, 0, (W - avail) * sizeof(float));
        silero_vad_step(r, probs + k, state, win, W, 1, scratch);
    }
    free(state);
    free(scratch);
    free(win);
    return 0;
}

/* max |gpu - cpu| over every window of every file; NaN or a missing window counts as infinite */
static double compare_files(test_ctx_t *t, const silero_rate_t *r, float **pcm, const size_t *n,
                            int n_files)
{
    silero_vad_gpu_t *g = NULL;
    hark_err_t err = {0};
    if (silero_vad_gpu_create(r, 0, &g, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "silero_vad_gpu_create: %s", err.msg);
        return INFINITY;
    }
    float **gp = calloc((size_t)n_files, sizeof *gp), **cp = calloc((size_t)n_files, sizeof *cp);
    double worst = 0;
    for (int i = 0; i < n_files; i++) {
        size_t nw = silero_vad_n_windows(r, n[i]);
        gp[i] = malloc((nw + 1) * sizeof(float));
        cp[i] = malloc((nw + 1) * sizeof(float));
        memset(gp[i], 0xff, (nw + 1) * sizeof(float)); /* NaN: an unwritten window fails */
        if (cpu_probs(r, pcm[i], n[i], cp[i]) != 0)
            worst = INFINITY;
    }
    if (silero_vad_gpu_probs(g, (const float *const *)pcm, n, n_files, gp, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "silero_vad_gpu_probs: %s", err.msg);
        worst = INFINITY;
    }
    for (int i = 0; i < n_files && isfinite(worst); i++) {
        size_t nw = silero_vad_n_windows(r, n[i]);
        double d = test_max_abs_diff(gp[i], cp[i], nw);
        uint32_t guard;
        memcpy(&guard, gp[i] + nw, 4);
        if (guard != 0xffffffffu)
            d = INFINITY; /* written past the file's windows */
        worst = d > worst ? d : worst;
    }
    for (int i = 0; i < n_files; i++) {
        free(gp[i]);
        free(cp[i]);
    }
    free(gp);
    free(cp);
    silero_vad_gpu_destroy(g);
    return worst;
}

static void check_random(test_ctx_t *t, int rate)
{
    if (!test_have_gpu()) {
        test_skip(t, "no usable GPU");
        return;
    }
    rand_net_t net;
    CHECK(rand_net(&net, rate, 1234u + (unsigned)rate) == 0);
    const size_t W = (size_t)net.r.window;
    const size_t lens[] = {
        W * 37 + 100,         0, 1, W - 1, W, W + 1, W * 3 + 5, W * 64, 7, W * 11 + 3,
        (size_t)rate * 3 + 17};
    enum { NF = sizeof lens / sizeof lens[0] };
    float *pcm[NF];
    size_t n[NF];
    unsigned st = 99;
    for (int i = 0; i < NF; i++) {
        n[i] = lens[i];
        pcm[i] = malloc((n[i] + 1) * sizeof(float));
        CHECK(pcm[i]);
        for (size_t k = 0; k < n[i]; k++) /* speech-like: a slow tone with noise */
            pcm[i][k] = 0.4f * sinf((float)k * 0.05f * (float)(i + 1)) + 0.1f * test_randf(&st);
    }
    double all = compare_files(t, &net.r, pcm, n, NF);
    double one = compare_files(t, &net.r, pcm, n, 1);
    double three = compare_files(t, &net.r, pcm + 5, n + 5, 3);
    fprintf(stderr,
            "silero gpu %d Hz random: max |gpu - cpu| %.3g (11 files), %.3g (1), %.3g (3)\n", rate,
            all, one, three);
    for (int i = 0; i < NF; i++)
        free(pcm[i]);
    free(net.block);
    CHECK(all <= TOL);
    CHECK(one <= TOL);
    CHECK(three <= TOL);
}

GPU_TEST(silero_vad_gpu_random_16k)
{
    check_random(t, 16000);
}

GPU_TEST(silero_vad_gpu_random_8k)
{
    check_random(t, 8000);
}

/* streams as the server steps them: one window per launch, the state kept on the device */
GPU_TEST(silero_vad_gpu_stream_steps)
{
    if (!test_have_gpu()) {
        test_skip(t, "no usable GPU");
        return;
    }
    rand_net_t net;
    CHECK(rand_net(&net, 16000, 77u) == 0);
    const silero_rate_t *r = &net.r;
    enum { NS = 6, STEPS = 9 };
    const int W = r->window, sf = (int)silero_vad_state_floats(r);
    float *x = malloc((size_t)NS * STEPS * W * sizeof(float));
    float *ref = malloc((size_t)NS * STEPS * sizeof(float));
    float *got = malloc((size_t)NS * STEPS * sizeof(float));
    CHECK(x && ref && got);
    unsigned st = 5;
    for (int i = 0; i < NS * STEPS * W; i++)
        x[i] = 0.5f * test_randf(&st);
    for (int s = 0; s < NS; s++) /* stream s: its STEPS windows contiguous */
        CHECK(cpu_probs(r, x + (size_t)s * STEPS * W, (size_t)STEPS * W, ref + s * STEPS) == 0);
    silero_vad_gpu_t *g = NULL;
    hark_err_t err = {0};
    CHECK(silero_vad_gpu_create(r, 0, &g, &err) == HARK_OK);
    float *d_x = NULL, *d_st = NULL, *d_p = NULL;
    long long *d_meta = NULL, h_meta[3 * NS];
    int *d_nw = NULL, h_nw[NS];
    size_t p_bytes = ((size_t)NS * STEPS + GUARD) * sizeof(float);
    CHECK(cudaMalloc((void **)&d_x, (size_t)NS * W * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_st, (size_t)NS * sf * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_p, p_bytes) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_meta, sizeof h_meta) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_nw, sizeof h_nw) == cudaSuccess);
    CHECK(cudaMemset(d_st, 0, (size_t)NS * sf * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemset(d_p, 0xff, p_bytes) == cudaSuccess);
    int rc = HARK_OK;
    for (int k = 0; k < STEPS && rc == HARK_OK; k++) {
        /* this step's window of every stream, side by side; probabilities at s·STEPS + k */
        for (int s = 0; s < NS; s++) {
            cudaMemcpy(d_x + (size_t)s * W, x + ((size_t)s * STEPS + k) * W, W * sizeof(float),
                       cudaMemcpyHostToDevice);
            h_meta[s] = (long long)s * W;                  /* x_off */
            h_meta[NS + s] = W;                            /* n_samples */
            h_meta[2 * NS + s] = (long long)s * STEPS + k; /* p_off */
            h_nw[s] = 1;
        }
        cudaMemcpy(d_meta, h_meta, sizeof h_meta, cudaMemcpyHostToDevice);
        cudaMemcpy(d_nw, h_nw, sizeof h_nw, cudaMemcpyHostToDevice);
        rc = cuda_silero_vad(d_p, d_st, d_x, d_meta, d_meta + NS, d_meta + 2 * NS, d_nw, NS,
                             silero_vad_gpu_net(g), NULL, &err);
    }
    CHECK(rc == HARK_OK);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    float guard[GUARD];
    cudaMemcpy(got, d_p, (size_t)NS * STEPS * sizeof(float), cudaMemcpyDeviceToHost);
    cudaMemcpy(guard, d_p + NS * STEPS, sizeof guard, cudaMemcpyDeviceToHost);
    double d = test_max_abs_diff(got, ref, (size_t)NS * STEPS);
    fprintf(stderr, "silero gpu stream steps: max |gpu - cpu| %.3g\n", d);
    for (int i = 0; i < GUARD; i++) {
        uint32_t u;
        memcpy(&u, &guard[i], 4);
        CHECK(u == 0xffffffffu);
    }
    cudaFree(d_x);
    cudaFree(d_st);
    cudaFree(d_p);
    cudaFree(d_meta);
    cudaFree(d_nw);
    silero_vad_gpu_destroy(g);
    free(x);
    free(ref);
    free(got);
    free(net.block);
    CHECK(d <= TOL);
}

/* hark vad --device cuda's way: a fixed batch of streams run chunk by chunk, a different number
 * of windows per stream and run (0 included: the state is kept), equal to whole files */
GPU_TEST(silero_vad_gpu_batch_chunks)
{
    if (!test_have_gpu()) {
        test_skip(t, "no usable GPU");
        return;
    }
    rand_net_t net;
    CHECK(rand_net(&net, 8000, 4242u) == 0);
    const silero_rate_t *r = &net.r;
    enum { NS = 7, MAXW = 5 };
    const int W = r->window;
    const int total[NS] = {1, 23, 0, 9, 17, 5, 30}; /* windows per stream */
    float *x[NS], *ref[NS], *got[NS];
    unsigned st = 11;
    for (int s = 0; s < NS; s++) {
        size_t n = (size_t)total[s] * W;
        x[s] = malloc((n + 1) * sizeof(float));
        ref[s] = malloc(((size_t)total[s] + 1) * sizeof(float));
        got[s] = calloc((size_t)total[s] + 1, sizeof(float));
        CHECK(x[s] && ref[s] && got[s]);
        for (size_t k = 0; k < n; k++)
            x[s][k] = 0.3f * sinf((float)k * 0.01f * (float)(s + 1)) + 0.2f * test_randf(&st);
        CHECK(cpu_probs(r, x[s], n, ref[s]) == 0);
    }
    silero_vad_gpu_t *g = NULL;
    silero_vad_gpu_batch_t *b = NULL;
    hark_err_t err = {0};
    CHECK(silero_vad_gpu_create(r, 0, &g, &err) == HARK_OK);
    CHECK(silero_vad_gpu_batch_create(g, NS, MAXW, &b, &err) == HARK_OK);
    int done[NS] = {0}, left = 1, round = 0;
    while (left) {
        int nw[NS];
        float *in = silero_vad_gpu_batch_input(b);
        left = 0;
        for (int s = 0; s < NS; s++) {
            int want = (round + s) % (MAXW + 1); /* 0 .. MAXW, varying */
            nw[s] = total[s] - done[s] < want ? total[s] - done[s] : want;
            memcpy(in + (size_t)s * MAXW * W, x[s] + (size_t)done[s] * W,
                   (size_t)nw[s] * W * sizeof(float));
        }
        CHECK(silero_vad_gpu_batch_run(b, nw, NS, &err) == HARK_OK);
        const float *p = silero_vad_gpu_batch_probs(b);
        for (int s = 0; s < NS; s++) {
            memcpy(got[s] + done[s], p + (size_t)s * MAXW, (size_t)nw[s] * sizeof(float));
            done[s] += nw[s];
            left |= done[s] < total[s];
        }
        round++;
    }
    int bad[1] = {MAXW + 1};
    CHECK(silero_vad_gpu_batch_run(b, bad, 1, &err) == HARK_ERR_INVALID_ARG);
    double d = 0;
    for (int s = 0; s < NS; s++) {
        double e = test_max_abs_diff(got[s], ref[s], (size_t)total[s]);
        d = e > d ? e : d;
        free(x[s]);
        free(ref[s]);
        free(got[s]);
    }
    fprintf(stderr, "silero gpu batch chunks (%d runs): max |gpu - cpu| %.3g\n", round, d);
    silero_vad_gpu_batch_destroy(b);
    silero_vad_gpu_destroy(g);
    free(net.block);
    CHECK(d <= TOL);
}

/* the real model on the shared audio, every file of audio/en/wav at once */
static void check_real(test_ctx_t *t, int rate)
{
    if (!test_have_gpu()) {
        test_skip(t, "no usable GPU");
        return;
    }
    char why[600];
    const char *dir = golden_silero_model(why, sizeof why);
    const char *list = test_shared("audio/en/wav.scp");
    if (!dir || !list) {
        test_skip(t, dir ? "../shared/data/audio/en is absent" : why);
        return;
    }
    silero_vad_t *m = NULL;
    hark_err_t err = {0};
    CHECK(silero_vad_load(dir, 1, &m, &err) == HARK_OK);
    const silero_rate_t *r = silero_vad_rate(m, rate);
    CHECK(r);
    FILE *f = fopen(list, "r");
    CHECK(f);
    float *pcm[64];
    size_t n[64];
    int nf = 0;
    char line[1024];
    while (nf < 64 && fgets(line, sizeof line, f)) {
        char key[256], rel[700];
        if (sscanf(line, "%255s %699s", key, rel) != 2)
            continue;
        const char *base = strrchr(rel, '/');
        char path[800];
        snprintf(path, sizeof path, "audio/en/wav/%s", base ? base + 1 : rel);
        const char *p = test_shared(path);
        audio_t a = {0};
        if (!p || audio_decode_file(p, &(audio_opts_t){.target_rate = rate}, &a, NULL) != HARK_OK)
            continue;
        n[nf] = a.n;
        pcm[nf] = malloc((a.n + 1) * sizeof(float));
        if (pcm[nf]) {
            memcpy(pcm[nf], a.samples, a.n * sizeof(float));
            nf++;
        }
        audio_free(&a);
    }
    fclose(f);
    CHECK(nf > 0);
    double d = compare_files(t, r, pcm, n, nf);
    fprintf(stderr, "silero gpu %d Hz real model, %d files: max |gpu - cpu| %.3g\n", rate, nf, d);
    for (int i = 0; i < nf; i++)
        free(pcm[i]);
    silero_vad_destroy(m);
    CHECK(d <= TOL);
}

GPU_TEST(silero_vad_gpu_real_16k)
{
    check_real(t, 16000);
}

GPU_TEST(silero_vad_gpu_real_8k)
{
    check_real(t, 8000);
}

#endif

TEST(silero_vad_gpu_without_cuda_or_bad_sizes)
{
    /* sizes the kernel does not take are refused with a reason, with or without CUDA */
    silero_rate_t r;
    memset(&r, 0, sizeof r);
    r.frames = 9;
    r.n_bins = 129;
    silero_vad_gpu_t *g = (silero_vad_gpu_t *)1;
    hark_err_t err = {0};
    CHECK(silero_vad_gpu_create(&r, 0, &g, &err) == HARK_ERR_UNSUPPORTED);
    CHECK(g == NULL);
    CHECK(err.msg[0] != 0);
}
