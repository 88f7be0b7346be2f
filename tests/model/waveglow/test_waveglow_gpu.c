/* GPU tests for src/model/waveglow/waveglow_gpu.c and waveglow_kernels.cu: each kernel against its
 * CPU reference (waveglow_kernels.c) on awkward sizes; DLE's random-weight golden model (80 mels,
 * 4 flows of 8/8/6/6 channels, WN 4 layers x 64 channels) on the GPU with the recorded noise,
 * every stage against the CPU path and the goldens, FP32 and FP16, and the graph replay; a batch of
 * mels of different lengths (each item against its batch-1 run and the CPU with the same seed);
 * the device-mel entry; the seeded noise against the CPU's; the denoiser against the CPU and the
 * goldens (alone and inside a run); a generated model of awkward sizes (20 mels, n_group 6, 36 WN
 * channels, kernel 5, upsampler 50 / 12); bad arguments.
 * Tolerances, max |diff| / max |ref|: FP32 1e-4 (the CPU's own bound against the goldens; only
 * the order of FP32 sums differs). FP16 (GEMM operands rounded to half, unit roundoff 2^-11 =
 * 4.9e-4; FP32 accumulation, audio state and skip sums): the upsampled conditioning is one
 * rounding of the polyphase GEMM's output (<= 1 roundoff, 1e-3 bound); a flow's output adds the
 * rounding of its WN's inputs through 4 layers of 3 GEMMs each, and the flows compound: the bound
 * is 1e-2 for every flow stage and the audio (measured values printed by each test). */
#include "test.h"

#include "hark.h"
#include "model/waveglow/waveglow.h"
#include "model/waveglow/waveglow_kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a generated model of awkward sizes ------------------------------------------------------
 */

typedef struct {
    FILE *f;
    char hdr[65536];
    size_t hlen, off;
    int n;
    float *data[512];
    size_t count[512];
} st_writer_t;

static void st_add(st_writer_t *s, const char *name, int nd, int d0, int d1, int d2, float *data)
{
    size_t count = (size_t)d0 * (nd > 1 ? d1 : 1) * (nd > 2 ? d2 : 1);
    char shape[64];
    if (nd == 1)
        snprintf(shape, sizeof shape, "[%d]", d0);
    else if (nd == 2)
        snprintf(shape, sizeof shape, "[%d,%d]", d0, d1);
    else
        snprintf(shape, sizeof shape, "[%d,%d,%d]", d0, d1, d2);
    s->hlen +=
        (size_t)snprintf(s->hdr + s->hlen, sizeof s->hdr - s->hlen,
                         "%s\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                         s->n ? "," : "{", name, shape, s->off, s->off + count * 4);
    s->off += count * 4;
    s->data[s->n] = data;
    s->count[s->n++] = count;
}

static float *rndw(size_t n, unsigned *seed, float scale)
{
    float *p = malloc((n ? n : 1) * 4);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

/* 20 mels, 5 flows, n_group 6, early every 2 of size 2 (channels 6 6 4 4 2), WN 3 layers x 36
 * channels with kernel 5, upsampler 50 / 12, denoiser STFT 64 / 16 */
static int write_awkward(const char *dir)
{
    const int nm = 20, nfl = 5, G = 6, every = 2, e = 2, nl = 3, K = 5, C = 36, uk = 50, us = 12;
    char path[700];
    snprintf(path, sizeof path, "mkdir -p '%s/1'", dir);
    if (system(path) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/1/model.json", dir);
    FILE *j = fopen(path, "w");
    if (!j)
        return -1;
    fprintf(j,
            "{\"family\": \"waveglow\", \"format_version\": 1, \"n_mel_channels\": %d, "
            "\"n_flows\": %d, \"n_group\": %d, \"n_early_every\": %d, \"n_early_size\": %d, "
            "\"WN_config\": {\"n_layers\": %d, \"kernel_size\": %d, \"n_channels\": %d}, "
            "\"upsample_kernel\": %d, \"upsample_stride\": %d, \"sampling_rate\": 8000, "
            "\"sigma\": 0.8, \"denoiser\": {\"strength\": 0.05, \"filter_length\": 64, "
            "\"n_overlap\": 4, \"win_length\": 64, \"mode\": \"zeros\", \"bias_frames\": 9}}\n",
            nm, nfl, G, every, e, nl, K, C, uk, us);
    fclose(j);
    static st_writer_t s;
    memset(&s, 0, sizeof s);
    unsigned seed = 99;
    char nmb[96];
    st_add(&s, "upsample.weight", 3, nm, nm, uk, rndw((size_t)nm * nm * uk, &seed, 0.2f));
    st_add(&s, "upsample.bias", 1, nm, 0, 0, rndw(nm, &seed, 0.1f));
    int ch = G;
    for (int k = 0; k < nfl; k++) {
        if (k && k % every == 0)
            ch -= e;
        float *wi = rndw((size_t)ch * ch, &seed, 0.15f), *cw = rndw((size_t)ch * ch, &seed, 0.1f);
        for (int i = 0; i < ch; i++)
            wi[i * ch + i] += 1.0f;
        snprintf(nmb, sizeof nmb, "convinv.%d.conv.weight", k);
        st_add(&s, nmb, 3, ch, ch, 1, cw);
        snprintf(nmb, sizeof nmb, "convinv.%d.W_inverse", k);
        st_add(&s, nmb, 2, ch, ch, 0, wi);
        snprintf(nmb, sizeof nmb, "WN.%d.start.weight", k);
        st_add(&s, nmb, 3, C, ch / 2, 1, rndw((size_t)C * ch / 2, &seed, 0.5f));
        snprintf(nmb, sizeof nmb, "WN.%d.start.bias", k);
        st_add(&s, nmb, 1, C, 0, 0, rndw(C, &seed, 0.1f));
        snprintf(nmb, sizeof nmb, "WN.%d.end.weight", k);
        st_add(&s, nmb, 3, ch, C, 1, rndw((size_t)ch * C, &seed, 0.05f));
        snprintf(nmb, sizeof nmb, "WN.%d.end.bias", k);
        st_add(&s, nmb, 1, ch, 0, 0, rndw(ch, &seed, 0.05f));
        for (int i = 0; i < nl; i++) {
            int rs = i < nl - 1 ? 2 * C : C;
            snprintf(nmb, sizeof nmb, "WN.%d.in_layers.%d.weight", k, i);
            st_add(&s, nmb, 3, 2 * C, C, K, rndw((size_t)2 * C * C * K, &seed, 0.15f));
            snprintf(nmb, sizeof nmb, "WN.%d.in_layers.%d.bias", k, i);
            st_add(&s, nmb, 1, 2 * C, 0, 0, rndw(2 * C, &seed, 0.1f));
            snprintf(nmb, sizeof nmb, "WN.%d.cond_layers.%d.weight", k, i);
            st_add(&s, nmb, 3, 2 * C, nm * G, 1, rndw((size_t)2 * C * nm * G, &seed, 0.1f));
            snprintf(nmb, sizeof nmb, "WN.%d.cond_layers.%d.bias", k, i);
            st_add(&s, nmb, 1, 2 * C, 0, 0, rndw(2 * C, &seed, 0.1f));
            snprintf(nmb, sizeof nmb, "WN.%d.res_skip_layers.%d.weight", k, i);
            st_add(&s, nmb, 3, rs, C, 1, rndw((size_t)rs * C, &seed, 0.2f));
            snprintf(nmb, sizeof nmb, "WN.%d.res_skip_layers.%d.bias", k, i);
            st_add(&s, nmb, 1, rs, 0, 0, rndw(rs, &seed, 0.1f));
        }
    }
    s.hlen += (size_t)snprintf(s.hdr + s.hlen, sizeof s.hdr - s.hlen, "}");
    while (s.hlen % 8)
        s.hdr[s.hlen++] = ' ';
    snprintf(path, sizeof path, "%s/1/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        for (int i = 0; i < s.n; i++)
            free(s.data[i]);
        return -1;
    }
    uint64_t hl = s.hlen;
    fwrite(&hl, 8, 1, f);
    fwrite(s.hdr, 1, s.hlen, f);
    for (int i = 0; i < s.n; i++) {
        fwrite(s.data[i], 4, s.count[i], f);
        free(s.data[i]);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* the generated model is a valid WaveGlow for the CPU path (so the GPU test's reference holds) */
TEST(waveglow_gpu_awkward_model_runs_on_cpu)
{
    const char *tmp = test_tmpdir(t);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/awk", tmp);
    CHECK(write_awkward(dir) == 0);
    waveglow_model_t *m = NULL;
    hark_err_t err = {0};
    CHECKF(waveglow_load(dir, 1, &m, &err) == HARK_OK, "%s", err.msg);
    const int nf = 23, nm = 20;
    float mel[20 * 23];
    unsigned seed = 17;
    for (int i = 0; i < nm * nf; i++)
        mel[i] = 2.0f * test_randf(&seed) - 3.0f;
    size_t n = waveglow_samples(m, nf);
    float *a = malloc(n * 4);
    waveglow_opts_t o = {.sigma = -1, .seed = 9};
    int rc = waveglow_infer(m, mel, nf, &o, a, &err);
    double rms = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rms += (double)a[i] * a[i];
    rms = sqrt(rms / (double)n);
    printf("    awkward model: %zu samples, rms %.3g\n", n, rms);
    free(a);
    waveglow_destroy(m);
    CHECKF(rc == HARK_OK, "%s", err.msg);
    CHECK(rms > 1e-3 && rms < 100);
}

/* The noise kernel's counter arithmetic (which draw a column is, its channel, the splitmix calls
 * before it: waveglow_kernels.cu) written out in C, against the CPU's sequential stream
 * (wg_noise_ref via waveglow_gaussian): every value equal, odd channel-length products included. */
static uint64_t mix_at(uint64_t s, unsigned long long call)
{
    uint64_t z = s + call * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

TEST(waveglow_gpu_noise_counters_match_the_cpu_stream)
{
    const int batch = 2, lp = 13, G = 10, ch_last = 4, e = 2, lens[2] = {13, 7};
    const uint64_t seeds[2] = {42, 0xdeadbeefull};
    const float sigma = 0.6f;
    size_t n = (size_t)batch * lp * G, bad = 0;
    float *ref = malloc(n * 4);
    wg_noise_ref(ref, NULL, seeds, sigma, lens, batch, lp, G, ch_last, e);
    for (size_t i = 0; i < n; i++) {
        int col = (int)(i % G), tt = (int)(i / G % lp), b = (int)(i / G / lp), L = lens[b];
        float v = 0.0f;
        if (tt < L) {
            int c0 = G - ch_last, d, c;
            if (col >= c0) {
                d = 0;
                c = col - c0;
            } else {
                d = (c0 - col - 1) / e + 1;
                c = col - (c0 - d * e);
            }
            unsigned long long before = 0;
            if (d > 0)
                before = 2ull * (((unsigned long long)ch_last * L + 1) / 2) +
                         (unsigned long long)(d - 1) * 2ull * (((unsigned long long)e * L + 1) / 2);
            unsigned long long idx = (unsigned long long)c * L + tt, p = idx / 2;
            double u1 = ((mix_at(seeds[b], before + 2 * p + 1) >> 11) + 1.0) * 0x1.0p-53;
            double u2 = (mix_at(seeds[b], before + 2 * p + 2) >> 11) * 0x1.0p-53;
            double r = sqrt(-2.0 * log(u1));
            double z = (idx & 1) ? r * sin(2.0 * M_PI * u2) : r * cos(2.0 * M_PI * u2);
            v = (float)z * sigma;
        }
        bad += v != ref[i];
    }
    free(ref);
    CHECKF(bad == 0, "%zu of %zu values differ", bad, n);
}

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "hark.h"
#include "model/waveglow/waveglow.h"
#include "model/waveglow/waveglow_gpu.h"
#include "model/waveglow/waveglow_kernels.h"
#include "support/golden_model.h"
#include "support/golden_tts.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL32 1e-4
#define TOL16_UP 1e-3
#define TOL16 1e-2

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

static const char *dtn(ops_dtype_t dt)
{
    return dt == OPS_F32 ? "fp32" : "fp16";
}

/* ---- kernels against their references -------------------------------------------------------
 */

static float *dup_f(const float *h, size_t n)
{
    float *d = NULL;
    if (cudaMalloc((void **)&d, (n ? n : 1) * 4) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice);
    return d;
}

static void *dup_b(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    return d;
}

/* n floats of d (F32) or of half values cast back (F16) */
static void back(float *h, const void *d, size_t n, ops_dtype_t dt)
{
    if (dt == OPS_F32) {
        cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost);
        return;
    }
    float *tmp = NULL;
    cudaMalloc((void **)&tmp, (n ? n : 1) * 4);
    cuda_cast(tmp, OPS_F32, d, dt, n, NULL, NULL);
    cudaMemcpy(h, tmp, n * 4, cudaMemcpyDeviceToHost);
    cudaFree(tmp);
}

static void *dalloc(size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess)
        return NULL;
    cudaMemset(d, 0xff, bytes); /* NaN: an unwritten element fails */
    return d;
}

static float *rnd(size_t n, unsigned *seed, float scale)
{
    float *p = malloc((n ? n : 1) * 4);
    for (size_t i = 0; i < n; i++)
        p[i] = scale * test_randf(seed);
    return p;
}

GPU_TEST(waveglow_gpu_kernels_match_references)
{
    unsigned seed = 7;
    hark_err_t err = {0};
    const int batch = 3, lp = 37, G = 6, lens[3] = {37, 11, 1};
    int *d_lens = dup_b(lens, sizeof lens);
    float sigma = 0.7f, *d_sigma = dup_f(&sigma, 1);
    /* noise: seeded (counter-based vs the CPU's sequential stream) and uploaded */
    {
        const uint64_t seeds[3] = {5, 0xfeedbeefcafe1234ull, 0};
        uint64_t *d_seeds = dup_b(seeds, sizeof seeds);
        size_t n = (size_t)batch * lp * G;
        float *ref = malloc(n * 4), *got = malloc(n * 4), *a = dalloc(n * 4);
        float *zin = rnd(n, &seed, 2.0f), *d_zin = dup_f(zin, n);
        for (int pass = 0; pass < 2; pass++) {
            wg_noise_ref(ref, pass ? zin : NULL, seeds, sigma, lens, batch, lp, G, 2, 2);
            CHECK_OK(cuda_wg_noise(a, pass ? d_zin : NULL, d_seeds, d_sigma, d_lens, batch, lp, G,
                                   2, 2, NULL, &err));
            back(got, a, n, OPS_F32);
            size_t exact = 0;
            for (size_t i = 0; i < n; i++)
                exact += got[i] == ref[i];
            double d = rel_diff(got, ref, n);
            printf("    noise (%s): %zu of %zu values exact, max rel diff %.3g\n",
                   pass ? "uploaded" : "seeded", exact, n, d);
            CHECK(d <= 1e-6);
        }
        free(ref);
        free(got);
        free(zin);
        cudaFree(a);
        cudaFree(d_zin);
        cudaFree(d_seeds);
    }
    for (int p = 0; p < 2; p++) {
        ops_dtype_t dt = p ? OPS_F16 : OPS_F32;
        double tol = p ? 2e-3 : 1e-6;
        /* mel pad: 20 mels (-> 24), ld 41, 3 left rows */
        {
            int nm = 20, cin_p = 24, tt = 40, ld = 41, pl = 3, ml[3] = {40, 13, 1};
            int *d_ml = dup_b(ml, sizeof ml);
            size_t nmel = (size_t)batch * nm * ld, nx = (size_t)batch * (pl + tt) * cin_p;
            float *mel = rnd(nmel, &seed, 3.0f), *d_mel = dup_f(mel, nmel);
            float *ref = malloc(nx * 4), *got = malloc(nx * 4);
            void *x = dalloc(nx * 4);
            wg_mel_pad_ref(ref, mel, ml, batch, ld, nm, cin_p, tt, pl);
            CHECK_OK(cuda_wg_mel_pad(x, dt, d_mel, d_ml, batch, ld, nm, cin_p, tt, pl, NULL, &err));
            back(got, x, nx, dt);
            double d = rel_diff(got, ref, nx);
            printf("    %s mel_pad max rel diff %.3g\n", dtn(dt), d);
            CHECK(d <= tol);
            free(mel);
            free(ref);
            free(got);
            cudaFree(x);
            cudaFree(d_mel);
            cudaFree(d_ml);
        }
        /* cond bias: nc 30 (G 6) over 37 rows */
        {
            long long n = 37 * 30;
            float *x = rnd((size_t)n, &seed, 1.0f), *b = rnd(5, &seed, 1.0f);
            float *ref = malloc(n * 4), *got = malloc(n * 4), *dx = dup_f(x, n), *db = dup_f(b, 5);
            void *y = dalloc(n * 4);
            wg_cond_bias_ref(ref, x, b, n, 30, 6);
            CHECK_OK(cuda_wg_cond_bias(y, dt, dx, db, n, 30, 6, NULL, &err));
            back(got, y, n, dt);
            double d = rel_diff(got, ref, n);
            printf("    %s cond_bias max rel diff %.3g\n", dtn(dt), d);
            CHECK(d <= tol);
            free(x);
            free(b);
            free(ref);
            free(got);
            cudaFree(dx);
            cudaFree(db);
            cudaFree(y);
        }
        /* gate: C 37 over 53 rows */
        {
            long long rows = 53;
            int C = 37;
            float *acc = rnd(rows * 2 * C, &seed, 3.0f), *b = rnd(2 * C, &seed, 1.0f);
            float *ref = malloc(rows * C * 4), *got = malloc(rows * C * 4);
            float *da = dup_f(acc, rows * 2 * C), *db = dup_f(b, 2 * C);
            void *y = dalloc(rows * C * 4);
            wg_gate_ref(ref, acc, b, rows, C);
            CHECK_OK(cuda_wg_gate(y, dt, da, db, rows, C, NULL, &err));
            back(got, y, rows * C, dt);
            double d = rel_diff(got, ref, rows * C);
            printf("    %s gate max rel diff %.3g\n", dtn(dt), d);
            CHECK(d <= tol);
            free(acc);
            free(b);
            free(ref);
            free(got);
            cudaFree(da);
            cudaFree(db);
            cudaFree(y);
        }
    }
    /* start and flow tail: G 6, flow of 4 channels at offset 2, C 37 */
    {
        long long rows = (long long)batch * lp;
        int C = 37, ch = 4, off = 2, half = 2;
        float *a = rnd(rows * G, &seed, 1.0f), *w = rnd((size_t)C * half, &seed, 0.5f);
        float *b = rnd(C, &seed, 0.5f), *ref = malloc(rows * 2 * C * 4),
              *got = malloc(rows * 2 * C * 4);
        float *da = dup_f(a, rows * G), *dw = dup_f(w, C * half), *db = dup_f(b, C);
        float *hs = dalloc(rows * 2 * C * 4);
        wg_start_ref(ref, a, w, b, rows, G, off, half, C);
        CHECK_OK(cuda_wg_start(hs, da, dw, db, rows, G, off, half, C, NULL, &err));
        back(got, hs, rows * 2 * C, OPS_F32);
        double d = rel_diff(got, ref, rows * 2 * C);
        printf("    start max rel diff %.3g\n", d);
        CHECK(d <= 1e-6);
        float *hsv = rnd(rows * 2 * C, &seed, 1.0f), *ew = rnd((size_t)ch * C, &seed, 0.05f);
        float *eb = rnd(ch, &seed, 0.1f), *wi = rnd((size_t)ch * ch, &seed, 0.5f);
        float *ra = malloc(rows * G * 4), *rwo = malloc(rows * ch * 4),
              *gwo = malloc(rows * ch * 4);
        memcpy(ra, a, rows * G * 4);
        float *dhs = dup_f(hsv, rows * 2 * C), *dew = dup_f(ew, ch * C), *deb = dup_f(eb, ch);
        float *dwi = dup_f(wi, ch * ch), *dwo = dalloc(rows * ch * 4);
        wg_flow_tail_ref(ra, rwo, hsv, 2 * C, ew, eb, wi, lens, batch, lp, G, off, ch, C);
        CHECK_OK(cuda_wg_flow_tail(da, dwo, dhs, 2 * C, dew, deb, dwi, d_lens, batch, lp, G, off,
                                   ch, C, NULL, &err));
        float *ga = malloc(rows * G * 4);
        back(ga, da, rows * G, OPS_F32);
        back(gwo, dwo, rows * ch, OPS_F32);
        double d1 = rel_diff(ga, ra, rows * G), d2 = rel_diff(gwo, rwo, rows * ch);
        printf("    flow_tail max rel diff %.3g (audio), %.3g (wo)\n", d1, d2);
        CHECK(d1 <= 1e-5 && d2 <= 1e-5);
        free(a), free(w), free(b), free(ref), free(got), free(hsv), free(ew), free(eb), free(wi);
        free(ra), free(rwo), free(gwo), free(ga);
        cudaFree(da), cudaFree(dw), cudaFree(db), cudaFree(hs), cudaFree(dhs), cudaFree(dew);
        cudaFree(deb), cudaFree(dwi), cudaFree(dwo);
    }
    /* the denoiser's kernels: N 40, hop 10, items of 123, 61, 21 samples */
    {
        int N = 40, hop = 10, nb = N / 2 + 1, n[3] = {123, 61, 21};
        long long ldx = 130;
        int nf = (int)(ldx / hop) + 1;
        float *x = rnd((size_t)batch * ldx, &seed, 1.0f), *win = rnd(N, &seed, 1.0f);
        for (int j = 0; j < N; j++)
            win[j] = 0.5f - 0.5f * cosf(6.2831853f * j / N);
        int *dn = dup_b(n, sizeof n);
        float *dx = dup_f(x, batch * ldx), *dwin = dup_f(win, N);
        size_t nfr = (size_t)batch * nf * N;
        float *ref = malloc(nfr * 4), *got = malloc(nfr * 4), *dfr = dalloc(nfr * 4);
        wg_stft_frames_ref(ref, x, ldx, n, win, batch, nf, N, hop);
        CHECK_OK(cuda_wg_stft_frames(dfr, dx, ldx, dn, dwin, batch, nf, N, hop, NULL, &err));
        back(got, dfr, nfr, OPS_F32);
        double d = rel_diff(got, ref, nfr);
        printf("    stft_frames max rel diff %.3g\n", d);
        CHECK(d == 0);
        size_t ns = (size_t)batch * nf * nb * 2;
        float *spec = rnd(ns, &seed, 2.0f), *bias = rnd(nb, &seed, 1.0f), strength = 0.6f;
        for (int k = 0; k < nb; k++)
            bias[k] = fabsf(bias[k]);
        float *dspec = dup_f(spec, ns), *dbias = dup_f(bias, nb), *dst = dup_f(&strength, 1);
        float *sref = malloc(ns * 4), *sgot = malloc(ns * 4);
        memcpy(sref, spec, ns * 4);
        wg_spec_denoise_ref(sref, bias, strength, (long long)batch * nf, nb);
        CHECK_OK(cuda_wg_spec_denoise(dspec, dbias, dst, (long long)batch * nf, nb, NULL, &err));
        back(sgot, dspec, ns, OPS_F32);
        d = rel_diff(sgot, sref, ns);
        printf("    spec_denoise max rel diff %.3g\n", d);
        CHECK(d <= 1e-5);
        float *y = malloc((size_t)batch * ldx * 4), *gy = malloc((size_t)batch * ldx * 4);
        float *dy = dalloc((size_t)batch * ldx * 4);
        wg_ola_ref(y, ldx, ref, n, win, batch, nf, N, hop);
        CHECK_OK(cuda_wg_ola(dy, ldx, dfr, dn, dwin, batch, nf, N, hop, NULL, &err));
        back(gy, dy, (size_t)batch * ldx, OPS_F32);
        double worst = 0;
        for (int b = 0; b < batch; b++) {
            size_t no = (size_t)(n[b] / hop) * hop;
            worst = fmax(worst, rel_diff(gy + b * ldx, y + b * ldx, no));
        }
        printf("    ola max rel diff %.3g\n", worst);
        CHECK(worst <= 1e-5);
        free(x), free(win), free(ref), free(got), free(spec), free(bias), free(sref), free(sgot);
        free(y), free(gy);
        cudaFree(dn), cudaFree(dx), cudaFree(dwin), cudaFree(dfr), cudaFree(dspec), cudaFree(dbias);
        cudaFree(dst), cudaFree(dy);
    }
    cudaFree(d_lens);
    cudaFree(d_sigma);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

/* ---- the golden model ----------------------------------------------------------------------- */

static const char *wg_dir(char *why, size_t nwhy)
{
    return golden_tts_checkpoint("waveglow", "convert_waveglow.py",
                                 "waveglow/checkpoint_WaveGlow_0.pt", why, nwhy);
}

#define LOAD_GOLDEN(m)                                                                             \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = wg_dir(why_, sizeof why_);                                              \
        if (!dir_)                                                                                 \
            SKIP(why_);                                                                            \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(waveglow_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                      \
    } while (0)

typedef struct {
    npy_array_t z[2];
} noise_t;

static void on_noise(void *user, int draw, float *z, int channels, int len)
{
    noise_t *nz = user;
    const npy_array_t *a = &nz->z[draw < 2 ? draw : 1];
    if (draw < 2 && a->count == (size_t)channels * len)
        memcpy(z, a->data, sizeof(float) * a->count);
    else
        memset(z, 0, sizeof(float) * (size_t)channels * len);
}

#define MAX_STAGES 32
typedef struct {
    int n;
    char name[MAX_STAGES][32];
    float *data[MAX_STAGES];
    size_t count[MAX_STAGES];
} stages_t;

static void keep_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stages_t *s = user;
    if (s->n >= MAX_STAGES)
        return;
    size_t n = (size_t)rows * cols;
    snprintf(s->name[s->n], sizeof s->name[s->n], "%s", name);
    s->data[s->n] = malloc(n * 4);
    memcpy(s->data[s->n], data, n * 4);
    s->count[s->n++] = n;
}

static void free_stages(stages_t *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->data[i]);
    s->n = 0;
}

static double golden_rel(const char *name, const float *data, int rows, int cols)
{
    npy_array_t g = {0};
    double e = INFINITY;
    char rel[160];
    if (!strcmp(name, "upsampled")) {
        if (golden_tts_npy(&g, "waveglow/upsampled_spect_first3072.npy") == HARK_OK &&
            g.count == (size_t)rows * 3072 && cols >= 3072) {
            double d = 0;
            for (int r = 0; r < rows; r++)
                d = fmax(d, test_max_abs_diff(data + (size_t)r * cols,
                                              (const float *)g.data + (size_t)r * 3072, 3072));
            e = d / max_abs(g.data, g.count);
        }
    } else {
        snprintf(rel, sizeof rel, "waveglow/%s.npy", name);
        if (golden_tts_npy(&g, rel) == HARK_OK && g.count == (size_t)rows * cols)
            e = rel_diff(data, g.data, g.count);
    }
    npy_free(&g);
    return e;
}

GPU_TEST(waveglow_gpu_golden_stages_fp32_fp16)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_GOLDEN(m);
    noise_t nz = {{{0}}};
    npy_array_t mel = {0}, ga = {0};
    CHECK(golden_tts_npy(&nz.z[0], "waveglow/z_initial.npy") == HARK_OK);
    CHECK(golden_tts_npy(&nz.z[1], "waveglow/z_early_k2.npy") == HARK_OK);
    CHECK(golden_tts_npy(&mel, "waveglow/mel_input.npy") == HARK_OK && mel.count == 80 * 40);
    CHECK(golden_tts_npy(&ga, "waveglow/audio.npy") == HARK_OK);
    int nf = 40;
    size_t ns = waveglow_samples(m, nf);
    hark_err_t err = {0};
    stages_t cs = {0}, gs = {0};
    float *cpu = malloc(ns * 4), *audio = malloc(ns * 4), *again = malloc(ns * 4);
    waveglow_opts_t o = {.sigma = 0.9f, .noise = on_noise, .noise_user = &nz};
    o.stage = keep_stage;
    o.stage_user = &cs;
    CHECK_OK(waveglow_infer(m, mel.data, nf, &o, cpu, &err));
    for (int p = 0; p < 2; p++) {
        ops_dtype_t dt = p ? OPS_F16 : OPS_F32;
        waveglow_gpu_model_t *g = NULL;
        waveglow_gpu_worker_t *w = NULL;
        CHECKF(waveglow_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
        CHECKF(waveglow_gpu_worker_create(g, 2, 64, &w, &err) == HARK_OK, "%s", err.msg);
        o.stage_user = &gs;
        const float *mb[1] = {mel.data};
        float *ob[1] = {audio};
        CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
        CHECKF(gs.n == cs.n && gs.n == 13, "%d GPU stages, %d CPU", gs.n, cs.n);
        int bad = 0;
        for (int i = 0; i < gs.n; i++) {
            double tol = dt == OPS_F32                      ? TOL32
                         : !strcmp(gs.name[i], "upsampled") ? TOL16_UP
                                                            : TOL16;
            double dc = !strcmp(gs.name[i], cs.name[i]) && gs.count[i] == cs.count[i]
                            ? rel_diff(gs.data[i], cs.data[i], cs.count[i])
                            : INFINITY;
            /* (80, samples) for "upsampled", else (channels, samples / n_group) */
            int rows = !strcmp(gs.name[i], "upsampled") ? 80 : (int)(gs.count[i] / (ns / 8));
            int cols = (int)(gs.count[i] / (size_t)rows);
            double dg = golden_rel(gs.name[i], gs.data[i], rows, cols);
            printf("    %s %-22s vs CPU %.3g, vs golden %.3g (bound %g)\n", dtn(dt), gs.name[i], dc,
                   dg, tol);
            bad += !(dc <= tol) || !(dg <= tol);
        }
        o.stage = NULL; /* the graph: eager, recorded, replayed */
        ob[0] = again;
        for (int r = 0; r < 3; r++)
            CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
        o.stage = keep_stage;
        double dc = rel_diff(audio, cpu, ns), dg = rel_diff(audio, ga.data, ns);
        double dgr = test_max_abs_diff(again, audio, ns);
        printf(
            "    %s audio vs CPU %.3g, vs golden %.3g; graph replay vs staged run %.3g; model %zu "
            "B, worker %zu B\n",
            dtn(dt), dc, dg, dgr, waveglow_gpu_model_bytes(g), waveglow_gpu_worker_bytes(w));
        free_stages(&gs);
        waveglow_gpu_worker_destroy(w);
        waveglow_gpu_model_destroy(g);
        double tol = dt == OPS_F32 ? TOL32 : TOL16;
        CHECKF(bad == 0, "%s: %d stages over the bound", dtn(dt), bad);
        CHECKF(dc <= tol && dg <= tol, "%s audio: %g / %g", dtn(dt), dc, dg);
        CHECKF(dgr <= 1e-6, "graph replay differs by %g", dgr);
    }
    free_stages(&cs);
    free(cpu), free(audio), free(again);
    npy_free(&mel), npy_free(&ga), npy_free(&nz.z[0]), npy_free(&nz.z[1]);
    waveglow_destroy(m);
}

/* items of different lengths in one batch, seeded: each == its batch-1 run and the CPU with the
 * same seed; from the host and from a device mel */
static void batch_check(test_ctx_t *t, waveglow_model_t *m, ops_dtype_t dt, const float *mel_full,
                        int nf_full, const int *starts, const int *lens, int batch, double tol)
{
    int nm = waveglow_config(m)->n_mels, maxf = 0;
    for (int b = 0; b < batch; b++)
        maxf = lens[b] > maxf ? lens[b] : maxf;
    hark_err_t err = {0};
    waveglow_gpu_model_t *g = NULL;
    waveglow_gpu_worker_t *w = NULL;
    CHECKF(waveglow_gpu_model_create(m, 0, dt, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(waveglow_gpu_worker_create(g, batch, maxf, &w, &err) == HARK_OK, "%s", err.msg);
    float *mels[8], *outs[8], *cpu[8], *one[8], *dev[8];
    uint64_t seeds[8];
    float *h_dm = calloc((size_t)batch * nm * maxf, 4);
    waveglow_opts_t o = {.sigma = -1};
    for (int b = 0; b < batch; b++) {
        mels[b] = malloc(sizeof(float) * nm * lens[b]);
        for (int r = 0; r < nm; r++) {
            memcpy(mels[b] + (size_t)r * lens[b], mel_full + (size_t)r * nf_full + starts[b],
                   sizeof(float) * lens[b]);
            memcpy(h_dm + ((size_t)b * nm + r) * maxf, mels[b] + (size_t)r * lens[b],
                   sizeof(float) * lens[b]);
        }
        size_t ns = waveglow_samples(m, lens[b]);
        outs[b] = malloc(ns * 4), cpu[b] = malloc(ns * 4), one[b] = malloc(ns * 4);
        dev[b] = malloc(ns * 4);
        seeds[b] = 100 + b;
        o.seed = seeds[b];
        CHECK_OK(waveglow_infer(m, mels[b], lens[b], &o, cpu[b], &err));
        const float *mb[1] = {mels[b]};
        float *ob[1] = {one[b]};
        CHECKF(waveglow_gpu_run(w, mb, &lens[b], 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
    }
    CHECKF(waveglow_gpu_run(w, (const float *const *)mels, lens, batch, &o, seeds, outs, &err) ==
               HARK_OK,
           "%s", err.msg);
    float *d_mel = dup_f(h_dm, (size_t)batch * nm * maxf);
    CHECKF(waveglow_gpu_run_device(w, d_mel, maxf, lens, batch, &o, seeds, dev, &err) == HARK_OK,
           "%s", err.msg);
    int bad = -1;
    double worst = 0, worst_one = 0, worst_dev = 0;
    for (int b = 0; b < batch; b++) {
        size_t ns = waveglow_samples(m, lens[b]);
        double d = rel_diff(outs[b], cpu[b], ns), d1 = rel_diff(outs[b], one[b], ns);
        double dd = test_max_abs_diff(dev[b], outs[b], ns);
        printf("    %s item %d (%d frames): vs CPU %.3g, vs the GPU alone %.3g, device mel vs host "
               "%.3g\n",
               dtn(dt), b, lens[b], d, d1, dd);
        if (!(d <= tol) && bad < 0)
            bad = b;
        worst = fmax(worst, d), worst_one = fmax(worst_one, d1), worst_dev = fmax(worst_dev, dd);
        free(mels[b]), free(outs[b]), free(cpu[b]), free(one[b]), free(dev[b]);
    }
    free(h_dm);
    cudaFree(d_mel);
    waveglow_gpu_worker_destroy(w);
    waveglow_gpu_model_destroy(g);
    CHECKF(bad < 0, "item %d over %g (worst %g)", bad, tol, worst);
    /* alone or in a batch: only GEMM shapes differ (the order of FP32 sums) */
    CHECKF(worst_one <= (dt == OPS_F32 ? 1e-5 : 1e-3), "batch vs alone %g", worst_one);
    CHECKF(worst_dev == 0, "device mel vs host mel %g", worst_dev);
}

GPU_TEST(waveglow_gpu_batch_of_different_lengths_seeded)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_GOLDEN(m);
    npy_array_t mel = {0};
    CHECK(golden_tts_npy(&mel, "waveglow/dle_mel/mel.npy") == HARK_OK);
    int nf = (int)mel.shape[2];
    const int starts[3] = {0, 40, 100}, lens[3] = {nf, 37, 1};
    batch_check(t, m, OPS_F32, mel.data, nf, starts, lens, 3, TOL32);
    if (!test_failed(t))
        batch_check(t, m, OPS_F16, mel.data, nf, starts, lens, 3, TOL16);
    npy_free(&mel);
    waveglow_destroy(m);
}

/* the denoiser alone on the golden audio (against the CPU and the goldens) and inside a run */
GPU_TEST(waveglow_gpu_denoiser_matches_cpu)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_GOLDEN(m);
    npy_array_t ga = {0}, mel = {0};
    CHECK(golden_tts_npy(&ga, "waveglow/audio.npy") == HARK_OK);
    CHECK(golden_tts_npy(&mel, "waveglow/mel_input.npy") == HARK_OK);
    hark_err_t err = {0};
    waveglow_gpu_model_t *g = NULL;
    waveglow_gpu_worker_t *w = NULL;
    CHECKF(waveglow_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(waveglow_gpu_worker_create(g, 2, 40, &w, &err) == HARK_OK, "%s", err.msg);
    size_t n = ga.count, n2 = 7000, n_out[2] = {0, 0}, nc = 0;
    float *cpu = malloc(n * 4), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
    const float strengths[2] = {0.01f, 0.1f};
    const char *files[2] = {"waveglow/audio_denoised_strength0.01.npy",
                            "waveglow/audio_denoised_strength0.1.npy"};
    for (int i = 0; i < 2; i++) {
        const float *in[2] = {ga.data, ga.data};
        float *out[2] = {o1, o2};
        size_t ns[2] = {n, n2};
        CHECKF(waveglow_gpu_denoise(w, in, ns, 2, strengths[i], out, n_out, &err) == HARK_OK, "%s",
               err.msg);
        CHECK_OK(waveglow_denoise(m, ga.data, n, strengths[i], cpu, &nc, &err));
        npy_array_t gd = {0};
        CHECK(golden_tts_npy(&gd, files[i]) == HARK_OK && gd.count == n);
        double dc = rel_diff(o1, cpu, n), dg = rel_diff(o1, gd.data, n);
        CHECK_OK(waveglow_denoise(m, ga.data, n2, strengths[i], cpu, &nc, &err));
        double d2 = n_out[1] == nc ? rel_diff(o2, cpu, nc) : INFINITY;
        printf("    strength %g: vs CPU %.3g, vs golden %.3g; a %zu-sample item vs CPU %.3g\n",
               strengths[i], dc, dg, n2, d2);
        npy_free(&gd);
        CHECK(n_out[0] == n);
        CHECK(dc <= TOL32 && dg <= TOL32 && d2 <= TOL32);
    }
    /* inside a run, seeded: CPU infer + denoise */
    CHECK_OK(waveglow_gpu_set_denoise(w, 0.1f, &err));
    waveglow_opts_t o = {.sigma = -1, .seed = 3};
    int nf = 40;
    const float *mb[1] = {mel.data};
    float *ob[1] = {o1};
    CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(waveglow_infer(m, mel.data, nf, &o, cpu, &err));
    CHECK_OK(waveglow_denoise(m, cpu, n, 0.1f, cpu, &nc, &err));
    double d = rel_diff(o1, cpu, n);
    printf("    run with the denoiser (0.1) vs CPU infer + denoise %.3g\n", d);
    CHECK(d <= TOL32);
    CHECK_EQ_INT(waveglow_gpu_set_denoise(w, -1.0f, &err), HARK_ERR_INVALID_ARG);
    waveglow_gpu_worker_destroy(w);
    waveglow_gpu_model_destroy(g);
    free(cpu), free(o1), free(o2);
    npy_free(&ga), npy_free(&mel);
    waveglow_destroy(m);
}

GPU_TEST(waveglow_gpu_awkward_model_matches_cpu)
{
    const char *tmp = test_tmpdir(t);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/awk", tmp);
    CHECK(write_awkward(dir) == 0);
    waveglow_model_t *m = NULL;
    hark_err_t err = {0};
    CHECKF(waveglow_load(dir, 1, &m, &err) == HARK_OK, "%s", err.msg);
    const int nf = 23, nm = 20;
    float *mel = malloc(sizeof(float) * nm * nf);
    unsigned seed = 17;
    for (int i = 0; i < nm * nf; i++)
        mel[i] = 2.0f * test_randf(&seed) - 3.0f;
    const int starts[3] = {0, 4, 11}, lens[3] = {nf, 17, 1};
    batch_check(t, m, OPS_F32, mel, nf, starts, lens, 3, TOL32);
    if (!test_failed(t))
        batch_check(t, m, OPS_F16, mel, nf, starts, lens, 3, TOL16);
    /* the denoiser with an STFT of 64 / 16 on a run's audio */
    if (!test_failed(t)) {
        waveglow_gpu_model_t *g = NULL;
        waveglow_gpu_worker_t *w = NULL;
        CHECKF(waveglow_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
        CHECKF(waveglow_gpu_worker_create(g, 1, nf, &w, &err) == HARK_OK, "%s", err.msg);
        size_t n = waveglow_samples(m, nf), nc = 0;
        float *a = malloc(n * 4), *c = malloc(n * 4);
        CHECK_OK(waveglow_gpu_set_denoise(w, 0.3f, &err));
        waveglow_opts_t o = {.sigma = -1, .seed = 9};
        const float *mb[1] = {mel};
        float *ob[1] = {a};
        CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
        CHECK_OK(waveglow_infer(m, mel, nf, &o, c, &err));
        CHECK_OK(waveglow_denoise(m, c, n, 0.3f, c, &nc, &err));
        double d = rel_diff(a, c, nc);
        printf("    awkward denoised run vs CPU %.3g (%zu of %zu samples)\n", d, nc, n);
        free(a), free(c);
        waveglow_gpu_worker_destroy(w);
        waveglow_gpu_model_destroy(g);
        CHECK(d <= TOL32);
    }
    free(mel);
    waveglow_destroy(m);
}

/* the seeded noise: the GPU's audio for a seed is the CPU's (FP32) */
GPU_TEST(waveglow_gpu_seeded_noise_matches_cpu)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_GOLDEN(m);
    npy_array_t mel = {0};
    CHECK(golden_tts_npy(&mel, "waveglow/mel_input.npy") == HARK_OK);
    int nf = 40;
    size_t n = waveglow_samples(m, nf);
    float *c = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
    hark_err_t err = {0};
    waveglow_gpu_model_t *g = NULL;
    waveglow_gpu_worker_t *w = NULL;
    CHECKF(waveglow_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
    CHECKF(waveglow_gpu_worker_create(g, 1, nf, &w, &err) == HARK_OK, "%s", err.msg);
    waveglow_opts_t o = {.sigma = -1, .seed = 0x123456789abcull};
    const float *mb[1] = {mel.data};
    float *ob[1] = {a};
    CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(waveglow_infer(m, mel.data, nf, &o, c, &err));
    o.seed++;
    ob[0] = b;
    CHECKF(waveglow_gpu_run(w, mb, &nf, 1, &o, NULL, ob, &err) == HARK_OK, "%s", err.msg);
    double d = rel_diff(a, c, n), other = rel_diff(b, c, n);
    printf("    seed vs CPU %.3g; another seed differs by %.3g\n", d, other);
    waveglow_gpu_worker_destroy(w);
    waveglow_gpu_model_destroy(g);
    free(a), free(b), free(c);
    npy_free(&mel);
    waveglow_destroy(m);
    CHECK(d <= TOL32);
    CHECK(other > 1e-2);
}

GPU_TEST(waveglow_gpu_refuses_bad_arguments)
{
    NEED_SHARED(GOLDEN_TTS "/waveglow");
    waveglow_model_t *m = NULL;
    LOAD_GOLDEN(m);
    hark_err_t err = {0};
    waveglow_gpu_model_t *g = NULL;
    waveglow_gpu_worker_t *w = NULL;
    CHECK_EQ_INT(waveglow_gpu_model_create(m, 0, (ops_dtype_t)7, &g, &err), HARK_ERR_INVALID_ARG);
    CHECKF(waveglow_gpu_model_create(m, 0, OPS_F32, &g, &err) == HARK_OK, "%s", err.msg);
    CHECK_EQ_INT(waveglow_gpu_worker_create(g, 0, 10, &w, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(waveglow_gpu_worker_create(g, 1, 0, &w, &err), HARK_ERR_INVALID_ARG);
    CHECKF(waveglow_gpu_worker_create(g, 2, 10, &w, &err) == HARK_OK, "%s", err.msg);
    static float mel[80 * 11], audio[11 * 256];
    const float *mb[3] = {mel, mel, mel};
    float *ob[3] = {audio, audio, audio};
    int n11 = 11, n0 = 0, n3[3] = {3, 3, 3};
    CHECK_EQ_INT(waveglow_gpu_run(w, mb, &n11, 1, NULL, NULL, ob, &err), HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(waveglow_gpu_run(w, mb, &n0, 1, NULL, NULL, ob, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(waveglow_gpu_run(w, mb, n3, 3, NULL, NULL, ob, &err), HARK_ERR_TOO_LARGE);
    CHECK_EQ_INT(waveglow_gpu_run_device(w, NULL, 3, n3, 1, NULL, NULL, ob, &err),
                 HARK_ERR_INVALID_ARG);
    float *d = dup_f(mel, 80 * 3);
    CHECK_EQ_INT(waveglow_gpu_run_device(w, d, 2, n3, 1, NULL, NULL, ob, &err),
                 HARK_ERR_INVALID_ARG);
    cudaFree(d);
    size_t ns = 300, no = 0;
    CHECK_EQ_INT(waveglow_gpu_denoise(w, mb, &ns, 1, 0.1f, ob, &no, &err), HARK_ERR_INVALID_ARG);
    ns = 10 * 256 + 1;
    CHECK_EQ_INT(waveglow_gpu_denoise(w, mb, &ns, 1, 0.1f, ob, &no, &err), HARK_ERR_TOO_LARGE);
    CHECK_OK(waveglow_gpu_set_denoise(w, 0.1f, &err));
    int n1 = 1; /* 256 samples: too short for a 1024-point denoiser */
    CHECK_EQ_INT(waveglow_gpu_run(w, mb, &n1, 1, NULL, NULL, ob, &err), HARK_ERR_INVALID_ARG);
    mel[5] = NAN;
    CHECK_EQ_INT(waveglow_gpu_run(w, mb, n3, 1, NULL, NULL, ob, &err), HARK_ERR_INVALID_ARG);
    waveglow_gpu_worker_destroy(w);
    waveglow_gpu_model_destroy(g);
    waveglow_destroy(m);
}

#endif
