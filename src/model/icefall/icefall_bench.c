/* icefall_bench.c — `hark bench --model DIR` for an icefall Conformer transducer: the GPU path
 * (icefall_gpu.h) timed from random features already on the device through the encoder,
 * encoder_proj and the search (greedy_search on the device, its tokens copied back; or
 * modified_beam_search on the host over the device's encoder_proj rows), the work
 * bench/icefall_peer.py times in icefall's own PyTorch code. One JSON line per batch.
 * `--chunk` on a streaming zipformer: the GPU encoder's streaming step (icefall_zf_gpu.h) of B
 * streams together, host features in and encoder frames out, each step's latency.
 * Tests: tests/cli/test_cli.c (usage and refusals; the GPU rows on a GPU machine) */
#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "model/family.h"
#include "model/icefall/icefall_gpu.h"
#include "model/icefall/icefall_zf_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

int icefall_bench_main(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hark bench --model DIR [--batch 1,64,256] [--seconds 10]\n"
            "                  [--precision fp16|bf16|fp32] [--device cuda:N]\n"
            "                  [--decoding-method greedy_search|modified_beam_search]\n"
            "                  [--beam-size 4] [--search-threads 1] [--min-time S] [--chunk]\n"
            "Times an icefall Conformer transducer (pruned_transducer_stateless3) on the GPU from\n"
            "random 80-bin features of --seconds: encoder + encoder_proj + the search, its tokens\n"
            "copied back (modified_beam_search: on the host, the utterances shared by\n"
            "--search-threads threads). One JSON line per batch: ms per batch (median), RTFx,\n"
            "the encoder's GFLOP per utterance and TFLOP/s.\n"
            "--chunk (a streaming zipformer, in --precision): B streams stepped together, one\n"
            "chunk each per step, for --min-time; one JSON line per batch: ms per step (median,\n"
            "p99, max) and the streams kept in real time (B x chunk duration / median).\n");
}

#ifdef HARK_CUDA
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench_one(const icefall_model_t *m, const icefall_gpu_model_t *g, const char *dev_name,
                     const char *prec, double seconds, int B, icefall_method_t method, int beam,
                     int threads, double min_time)
{
    hark_err_t err = {0};
    const icefall_config_t *c = icefall_config(m);
    icefall_gpu_worker_t *w = NULL;
    int t_in = icefall_num_frames(m, (size_t)(seconds * c->sample_rate)), rc = 1;
    size_t nf = (size_t)B * t_in * c->feature_dim;
    float *h = hark_malloc(sizeof(float) * (nf ? nf : 1));
    int *lens = hark_malloc(sizeof(int) * (size_t)B);
    double *times = hark_malloc(sizeof(double) * 2000);
    icefall_hyp_t *hy = hark_calloc((size_t)B, sizeof *hy);
    icefall_result_t *res = hark_calloc((size_t)B, sizeof *res);
    if (!h || !lens || !times || !hy || !res ||
        icefall_gpu_worker_create(g, B, seconds + 0.05, &w, &err) != HARK_OK ||
        icefall_gpu_set_search_threads(w, threads, &err) != HARK_OK) {
        fprintf(stderr, "hark bench: batch %d x %.1f s: %s\n", B, seconds,
                err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    unsigned seed = (unsigned)B * 7919u + (unsigned)t_in;
    for (size_t i = 0; i < nf; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = 4.0f * ((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
    }
    float *d = icefall_gpu_feats(w);
    if (cudaMemcpy(d, h, sizeof(float) * nf, cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "hark bench: features upload failed\n");
        goto done;
    }
    for (int b = 0; b < B; b++)
        lens[b] = t_in;
    int runs = 0;
    long tokens = 0;
    double t_start = 0;
    for (int it = -2; runs < 2000; it++) {
        double t0 = clock_now_s();
        int r = icefall_gpu_encode(w, d, lens, B, t_in, NULL, &err);
        tokens = 0;
        if (!r && method == ICEFALL_GREEDY) {
            r = icefall_gpu_greedy(w, &err);
            if (!r)
                r = icefall_gpu_sync(w, &err);
            if (!r)
                r = icefall_gpu_results(w, hy, &err);
            for (int b = 0; b < B && !r; b++) {
                tokens += hy[b].n;
                icefall_hyp_free(&hy[b]);
            }
        } else if (!r &&
                   !(r = method == ICEFALL_FAST_BEAM ? icefall_gpu_fast_beam(w, NULL, res, &err)
                                                     : icefall_gpu_beam(w, beam, 0, res, &err))) {
            for (int b = 0; b < B; b++) {
                tokens += res[b].best.n;
                icefall_result_free(&res[b]);
            }
        }
        if (r) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg);
            goto done;
        }
        if (it < 0) {
            t_start = clock_now_s();
            continue;
        }
        times[runs++] = clock_now_s() - t0;
        if (clock_now_s() - t_start > min_time && runs >= 5)
            break;
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_double);
    double med = times[runs / 2], flop = 2.0 * icefall_gpu_macs(m, t_in);
    printf("{\"impl\": \"hark\", \"model\": \"icefall-conformer\", \"device\": \"%s\", "
           "\"gpu_path\": \"%s\", \"mode\": \"%s\", \"precision\": \"%s\", \"method\": \"%s\", "
           "\"seconds\": %.1f, \"batch\": %d, \"ms\": %.3f, \"rtfx\": %.1f, \"runs\": %d, "
           "\"tokens\": %ld, \"search_threads\": %d, \"gflop_per_utt\": %.2f, \"tflops\": %.2f, "
           "\"model_mb\": %.0f, "
           "\"worker_mb\": %.0f}\n",
           dev_name, icefall_gpu_path_name(w), prec, prec, icefall_method_name(method), seconds, B,
           med * 1e3, B * seconds / med, runs, tokens, threads, flop * 1e-9, flop * B / med * 1e-12,
           (double)icefall_gpu_model_bytes(g) / 1048576.0,
           (double)icefall_gpu_worker_bytes(w) / 1048576.0);
    fflush(stdout);
    rc = 0;
done:
    icefall_gpu_worker_destroy(w);
    hark_free(h);
    hark_free(res);
    hark_free(lens);
    hark_free(times);
    hark_free(hy);
    return rc;
}

/* --chunk: B streams of a streaming zipformer stepped together */
static int bench_chunk(const icefall_model_t *m, const icefall_zf_gpu_t *g, const char *dev_name,
                       const char *precision, int B, double min_time)
{
    hark_err_t err = {0};
    const icefall_config_t *c = icefall_config(m);
    const int n_in = icefall_zf_stream_step_frames(m), F = c->feature_dim;
    const int per = c->zf.chunk / 2, M = c->d;
    icefall_zf_gpu_worker_t *w = NULL;
    int rc = 1, runs = 0;
    const int cap = 100000;
    float *feats = hark_malloc(sizeof(float) * (size_t)B * n_in * F);
    float *enc = hark_malloc(sizeof(float) * (size_t)B * per * M);
    const float **in = hark_malloc(sizeof(*in) * (size_t)B);
    float **out = hark_malloc(sizeof(*out) * (size_t)B);
    int *slots = hark_malloc(sizeof(int) * (size_t)B);
    double *times = hark_malloc(sizeof(double) * cap);
    if (!feats || !enc || !in || !out || !slots || !times ||
        icefall_zf_gpu_worker_create(g, n_in, B, &w, &err)) {
        fprintf(stderr, "hark bench: --chunk, %d streams: %s\n", B,
                err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    unsigned seed = (unsigned)B * 7919u;
    for (size_t i = 0; i < (size_t)B * n_in * F; i++) {
        seed = seed * 1664525u + 1013904223u;
        feats[i] = 4.0f * ((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
    }
    for (int j = 0; j < B; j++) {
        in[j] = feats + (size_t)j * n_in * F;
        out[j] = enc + (size_t)j * per * M;
        slots[j] = j;
    }
    double t_start = 0;
    for (int it = -2; runs < cap; it++) {
        double t0 = clock_now_s();
        if (icefall_zf_gpu_step(w, slots, in, out, B, &err)) {
            fprintf(stderr, "hark bench: --chunk, %d streams: %s\n", B, err.msg);
            goto done;
        }
        if (it < 0) {
            t_start = clock_now_s();
            continue;
        }
        times[runs++] = clock_now_s() - t0;
        if (clock_now_s() - t_start > min_time && runs >= 20)
            break;
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_double);
    const double med = times[runs / 2], p99 = times[(size_t)(runs * 0.99)];
    const double chunk_ms = c->zf.chunk * 2.0 * 10.0; /* 50 Hz frames of 2 feature frames */
    printf("{\"impl\": \"hark\", \"model\": \"icefall-zipformer-streaming\", \"device\": \"%s\", "
           "\"precision\": \"%s\", \"streams\": %d, \"chunk_ms\": %.0f, "
           "\"left_context_frames\": %d, \"steps\": %d, \"ms_per_step\": %.3f, "
           "\"p99_ms\": %.3f, \"max_ms\": %.3f, \"streams_real_time\": %.0f, "
           "\"slot_kib\": %.1f, \"model_mb\": %.0f, \"worker_mb\": %.0f}\n",
           dev_name, precision, B, chunk_ms, c->zf.left_frames, runs, med * 1e3, p99 * 1e3,
           times[runs - 1] * 1e3, B * chunk_ms / (med * 1e3),
           icefall_zf_gpu_slot_floats(w) * 4.0 / 1024.0, icefall_zf_gpu_bytes(g) / 1048576.0,
           icefall_zf_gpu_worker_bytes(w) / 1048576.0);
    fflush(stdout);
    rc = 0;
done:
    icefall_zf_gpu_worker_destroy(w);
    hark_free(feats);
    hark_free(enc);
    hark_free(in);
    hark_free(out);
    hark_free(slots);
    hark_free(times);
    return rc;
}
#endif

int icefall_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *batches = "1,64,256", *precision = "fp16", *device = "cuda:0",
               *method_name = "greedy_search";
    double min_time = 2.0, seconds = 10.0;
    int beam = 4, threads = 1, chunk = 0;
    for (int i = 1; i < argc; i++) {
        int v = i + 1 < argc;
        if (!strcmp(argv[i], "--model") && v)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && v)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--decoding-method") && v)
            method_name = argv[++i];
        else if (!strcmp(argv[i], "--beam-size") && v)
            beam = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--search-threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--chunk"))
            chunk = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hark bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    icefall_method_t method;
    ops_dtype_t dt = !strcmp(precision, "fp16")   ? OPS_F16
                     : !strcmp(precision, "bf16") ? OPS_BF16
                     : !strcmp(precision, "fp32") ? OPS_F32
                                                  : (ops_dtype_t)-1;
    if (!model_dir || (int)dt < 0 || strncmp(device, "cuda", 4) ||
        icefall_method_parse(method_name, &method) || !(seconds > 0.1) || beam < 1 || beam > 64) {
        fprintf(stderr, "hark bench: icefall: --model DIR, --precision fp16|bf16|fp32, --device "
                        "cuda:N (the benchmark times the GPU path), --decoding-method "
                        "greedy_search|modified_beam_search|fast_beam_search (the model's beam, "
                        "max_contexts, max_states), --seconds > 0.1, --beam-size 1..64\n");
        return 2;
    }
#ifndef HARK_CUDA
    (void)batches;
    (void)min_time;
    (void)threads;
    (void)chunk;
    fprintf(stderr, "hark bench: built without CUDA\n");
    return 1;
#else
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_gpu_model_t *g = NULL;
    icefall_zf_gpu_t *zg = NULL;
    if (icefall_load(model_dir, family_latest_version(model_dir), &m, &err)) {
        fprintf(stderr, "hark bench: %s: %s\n", model_dir, err.msg);
        return 1;
    }
    if (chunk && !icefall_can_stream(m)) {
        fprintf(stderr, "hark bench: --chunk: %s is not a streaming zipformer\n", model_dir);
        icefall_destroy(m);
        return 2;
    }
    if (chunk ? icefall_zf_gpu_create(m, dev, dt, &zg, &err)
              : icefall_gpu_model_create(m, dev, dt, &g, &err)) {
        fprintf(stderr, "hark bench: %s: %s\n", model_dir, err.msg);
        icefall_destroy(m);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    int rc = 0;
    char *list = hark_strdup(batches), *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        int B = atoi(tok);
        if (B < 1 || B > (chunk ? 4096 : 1024)) {
            fprintf(stderr, "hark bench: batch %s: 1..%d\n", tok, chunk ? 4096 : 1024);
            rc = 2;
            break;
        }
        rc = chunk ? bench_chunk(m, zg, prop.name, precision, B, min_time)
                   : bench_one(m, g, prop.name, precision, seconds, B, method, beam, threads,
                               min_time);
    }
    hark_free(list);
    icefall_zf_gpu_destroy(zg);
    icefall_gpu_model_destroy(g);
    icefall_destroy(m);
    return rc;
#endif
}
