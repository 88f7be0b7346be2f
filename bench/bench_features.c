/* bench_features.c — feature throughput of hark's front ends: CPU single thread (one 10 s
 * utterance) and GPU batched (64 x 10 s, including the host->device copy of the PCM from pinned
 * memory). Prints one JSON line per measurement; bench/features.sh runs it next to
 * bench/bench_features_torch.py and prints the ratios. */
#include "audio/audio.h"
#include "core/clock.h"
#include "dsp/features.h"
#include "hark.h"
#ifdef HARK_CUDA
#include "dsp/features_gpu.h"
#include <cuda_runtime_api.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 10 s of speech at `rate` (jfk tiled) or, without ../shared, a chirp with noise */
static float *make_signal(const char *wav, int rate, double seconds, size_t *n_out)
{
    size_t n = (size_t)(seconds * rate);
    float *x = malloc(sizeof(float) * n);
    audio_t a = {0};
    audio_opts_t ao = {.target_rate = rate};
    int ok = wav && audio_decode_file(wav, &ao, &a, NULL) == HARK_OK && a.n > 0;
    unsigned s = 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = ok ? a.samples[i % a.n]
                  : 0.3f * sinf(1e-5f * (float)i * (float)(i % 50000)) +
                        0.01f * ((float)(s >> 8) / (float)(1u << 24) - 0.5f);
    }
    audio_free(&a);
    *n_out = n;
    return x;
}

struct kcase {
    const char *name;
    feat_kind_t kind;
    feat_tts_variant_t variant;
};
static const struct kcase cases[] = {
    {"fbank", FEAT_FBANK, TTS_MEL_HIFIGAN},
    {"nemo-mel", FEAT_NEMO_MEL, TTS_MEL_HIFIGAN},
    {"tts-mel/hifigan", FEAT_TTS_MEL, TTS_MEL_HIFIGAN},
    {"tts-mel/tacotron2", FEAT_TTS_MEL, TTS_MEL_TACOTRON2},
};

int main(int argc, char **argv)
{
    int runs = 50, batch = 64, cpu = 1, gpu = 1;
    double seconds = 10;
    const char *wav = "../shared/data/audio/en/wav/jfk.wav";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu-only"))
            gpu = 0;
        else if (!strcmp(argv[i], "--gpu-only"))
            cpu = 0;
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--wav") && i + 1 < argc)
            wav = argv[++i];
        else {
            fprintf(stderr, "usage: bench_features [--cpu-only|--gpu-only] [--runs N] [--batch B] "
                            "[--seconds S] [--wav FILE]\n");
            return 2;
        }
    }
    double *t = malloc(sizeof(double) * (size_t)(runs > 0 ? runs : 1));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        feat_opts_t o;
        feat_default_opts(&o, cases[c].kind);
        o.tts_variant = cases[c].variant;
        feat_plan_t *p;
        if (feat_plan_create(&o, &p, NULL))
            return 1;
        size_t n;
        float *x = make_signal(wav, o.sample_rate, seconds, &n);
        int T = feat_num_frames(p, n), D = feat_dim(p);
        float *out = malloc(sizeof(float) * (size_t)T * (size_t)D);
        if (cpu) {
            feat_compute(p, x, n, out, NULL); /* warm-up */
            for (int r = 0; r < runs; r++) {
                uint64_t t0 = clock_now_ns();
                feat_compute(p, x, n, out, NULL);
                t[r] = (double)(clock_now_ns() - t0) * 1e-6;
            }
            double ms = median(t, runs);
            printf("{\"impl\": \"hark\", \"device\": \"cpu\", \"threads\": 1, \"kind\": \"%s\", "
                   "\"batch\": 1, \"frames\": %d, \"bins\": %d, \"median_ms\": %.4f, "
                   "\"rtfx\": %.1f}\n",
                   cases[c].name, T, D, ms, seconds * 1000.0 / ms);
            fflush(stdout);
        }
#ifdef HARK_CUDA
        int ndev = 0;
        if (gpu && cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) {
            feat_gpu_t *g;
            hark_err_t e = {0};
            if (feat_gpu_create(p, &g, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            size_t stride = n;
            float *h_pcm, *d_pcm, *d_out;
            int *d_lens, *lens = malloc(sizeof(int) * (size_t)batch);
            cudaMallocHost((void **)&h_pcm, sizeof(float) * stride * (size_t)batch);
            cudaMalloc((void **)&d_pcm, sizeof(float) * stride * (size_t)batch);
            cudaMalloc((void **)&d_out, sizeof(float) * (size_t)batch * (size_t)T * (size_t)D);
            cudaMalloc((void **)&d_lens, sizeof(int) * (size_t)batch);
            for (int b = 0; b < batch; b++) {
                memcpy(h_pcm + (size_t)b * stride, x, sizeof(float) * n);
                lens[b] = (int)n;
            }
            cudaMemcpy(d_lens, lens, sizeof(int) * (size_t)batch, cudaMemcpyHostToDevice);
            cudaStream_t s;
            cudaStreamCreate(&s);
            cudaEvent_t e0, e1, e2;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            cudaEventCreate(&e2);
            double *tk = malloc(sizeof(double) * (size_t)(runs > 0 ? runs : 1));
            for (int r = -3; r < runs; r++) {
                cudaEventRecord(e0, s);
                cudaMemcpyAsync(d_pcm, h_pcm, sizeof(float) * stride * (size_t)batch,
                                cudaMemcpyHostToDevice, s);
                cudaEventRecord(e1, s);
                feat_gpu_compute(g, d_out, NULL, d_pcm, stride, d_lens, batch, T, s, NULL);
                cudaEventRecord(e2, s);
                cudaEventSynchronize(e2);
                float ms_all, ms_k;
                cudaEventElapsedTime(&ms_all, e0, e2);
                cudaEventElapsedTime(&ms_k, e1, e2);
                if (r >= 0) {
                    t[r] = ms_all;
                    tk[r] = ms_k;
                }
            }
            cudaError_t ce = cudaGetLastError();
            double ms = median(t, runs), msk = median(tk, runs);
            printf("{\"impl\": \"hark\", \"device\": \"cuda\", \"kind\": \"%s\", \"batch\": %d, "
                   "\"frames\": %d, \"bins\": %d, \"median_ms\": %.4f, \"kernel_ms\": %.4f, "
                   "\"rtfx\": %.1f, \"rtfx_kernels_only\": %.1f, \"includes_h2d\": true, "
                   "\"status\": \"%s\"}\n",
                   cases[c].name, batch, T, D, ms, msk, seconds * batch * 1000.0 / ms,
                   seconds * batch * 1000.0 / msk, cudaGetErrorString(ce));
            fflush(stdout);
            free(tk);
            free(lens);
            cudaStreamDestroy(s);
            cudaFreeHost(h_pcm);
            cudaFree(d_pcm);
            cudaFree(d_out);
            cudaFree(d_lens);
            feat_gpu_destroy(g);
        }
#else
        (void)gpu, (void)batch; /* a build without CUDA times the CPU only */
#endif
        free(out);
        free(x);
        feat_plan_destroy(p);
    }
    free(t);
    return 0;
}
