/* bench_silero_vad.c — Silero VAD throughput of hark's CPU path: `streams` files of `seconds`
 * each (jfk.wav tiled) stepped together, one BLAS thread, median of 5 runs. One JSON line per
 * batch size; bench/silero_vad.sh runs it next to ONNX Runtime (bench/silero_vad_ort.js) on the
 * same core and prints the ratios. With `gpu` (a CUDA build, a GPU present) the same files also
 * run through silero_vad_gpu_probs: one launch for all streams, timed from host audio to host
 * probabilities (the copies both ways included), after one untimed run.
 * Usage: bench_silero_vad MODEL_DIR WAV [seconds=60] [streams=1,8,64] [cpu|gpu|cpu,gpu] */
#include "audio/audio.h"
#include "core/clock.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "model/silero/silero_vad_gpu.h"
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR WAV [seconds] [streams,...]\n", argv[0]);
        return 2;
    }
    double seconds = argc > 3 ? atof(argv[3]) : 60.0;
    const char *streams = argc > 4 ? argv[4] : "1,8,64";
    const char *modes = argc > 5 ? argv[5] : "cpu";
    int do_cpu = strstr(modes, "cpu") != NULL, do_gpu = strstr(modes, "gpu") != NULL;
    silero_vad_t *m = NULL;
    hark_err_t err = {0};
    audio_t a = {0};
    if (silero_vad_load(argv[1], 1, &m, &err) ||
        audio_decode_file(argv[2], &(audio_opts_t){.target_rate = 16000}, &a, &err) || !a.n) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    ops_set_threads(1);
    size_t n = (size_t)(seconds * 16000);
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = a.samples[i % a.n];
    const silero_rate_t *r = silero_vad_rate(m, 16000);
    silero_vad_gpu_t *g = NULL;
    if (do_gpu && silero_vad_gpu_create(r, 0, &g, &err) != HARK_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    size_t nw = silero_vad_n_windows(r, n);
    char list[256];
    snprintf(list, sizeof list, "%s", streams);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int b = atoi(tok);
        if (b < 1)
            continue;
        const float **pcm = malloc((size_t)b * sizeof *pcm);
        size_t *ns = malloc((size_t)b * sizeof *ns);
        float **probs = malloc((size_t)b * sizeof *probs);
        for (int i = 0; i < b; i++) {
            pcm[i] = x;
            ns[i] = n;
            probs[i] = malloc(nw * sizeof(float));
        }
        for (int mode = 0; mode < 2; mode++) {
            if (!(mode ? do_gpu : do_cpu))
                continue;
            double t[5];
            for (int k = -mode; k < 5; k++) { /* the GPU: one untimed run first */
                uint64_t t0 = clock_now_ns();
                int rc = mode ? silero_vad_gpu_probs(g, pcm, ns, b, probs, &err)
                              : silero_vad_probs(m, 16000, pcm, ns, b, 0, probs, &err);
                if (rc) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                if (k >= 0)
                    t[k] = (double)(clock_now_ns() - t0) / 1e9;
            }
            qsort(t, 5, sizeof *t, cmp_d);
            double win = (double)nw * b;
            printf("{\"impl\": \"%s\", \"streams\": %d, \"seconds\": %g, \"windows\": %.0f, "
                   "\"median_s\": %.4f, \"windows_per_s\": %.0f, \"rtfx\": %.1f}\n",
                   mode ? "hark-gpu" : "hark", b, seconds, win, t[2], win / t[2],
                   seconds * b / t[2]);
            fflush(stdout);
        }
        for (int i = 0; i < b; i++)
            free(probs[i]);
        free(pcm);
        free(ns);
        free(probs);
    }
    free(x);
    audio_free(&a);
    silero_vad_gpu_destroy(g);
    silero_vad_destroy(m);
    return 0;
}
