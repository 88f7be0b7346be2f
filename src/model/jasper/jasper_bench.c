/* jasper_bench.c — `hark bench` for Jasper / QuartzNet (the jasper family's bench hook): the GPU
 * encoder + CTC head (log-softmax + argmax, the ids copied back) from random features, for every
 * (audio length, batch) of the grid, as milliseconds per batch, real-time factor and the fraction
 * of the GPU's dense FP16 (or FP32) peak that the convs' FLOPs reach. --synthetic builds DLE's
 * full-width Jasper 10x5 dense-residual or QuartzNet 15x5 (DLE's configs) with name-seeded
 * generated weights (synth_weights.h; bench/jasper_peer.py makes the same weights for DLE's
 * PyTorch model), --model times a converted model. Tests: tests/model/jasper/test_jasper_family.c
 * (the synthetic configs and the argument errors) */
#include "model/jasper/jasper_tools.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/jasper/jasper.h"
#include "model/jasper/jasper_gpu.h"
#include "model/synth_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

static char *const LABELS[28] = {" ", "a", "b", "c", "d", "e", "f", "g", "h", "i",
                                 "j", "k", "l", "m", "n", "o", "p", "q", "r", "s",
                                 "t", "u", "v", "w", "x", "y", "z", "'"};

const char *const jasper_synthetic_names[] = {"jasper10x5dr", "quartznet15x5", NULL};

static void add_block(jasper_config_t *c, int filters, int repeat, int k, int stride, int dil,
                      int separable, int residual, int dense, int *xs, int *n_xs, int *all,
                      int *n_all, int cin)
{
    jasper_block_cfg_t *b = &c->blocks[c->n_blocks++];
    *b = (jasper_block_cfg_t){.filters = filters,
                              .repeat = repeat,
                              .kernel = k,
                              .stride = stride,
                              .dilation = dil,
                              .separable = separable};
    /* the panes as DLE's JasperEncoder builds them (tools/convert_jasper.py: parse_encoder) */
    if (dense)
        all[(*n_all)++] = cin;
    if (residual) {
        if (dense) {
            b->n_panes = *n_all;
            memcpy(b->pane_ch, all, sizeof(int) * (size_t)*n_all);
        } else {
            b->n_panes = 1;
            b->pane_ch[0] = cin;
        }
        b->dense = dense;
    }
    if (b->dense)
        xs[(*n_xs)++] = filters;
    else
        xs[0] = filters, *n_xs = 1;
}

int jasper_synthetic_config(const char *name, jasper_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->sample_rate = 16000;
    c->n_filt = c->in_feats = 64;
    c->pad_align = 16;
    c->act = JASPER_ACT_RELU;
    c->conv_masks = 1;
    c->n_labels = 28;
    c->labels = (char **)LABELS;
    int xs[JASPER_MAX_BLOCKS + 1] = {64}, n_xs = 1, all[JASPER_MAX_BLOCKS], n_all = 0;
    if (!strcmp(name, "jasper10x5dr")) { /* jasper10x5dr_speedp-online_speca.yaml */
        static const int f[5] = {256, 384, 512, 640, 768}, k[5] = {11, 13, 17, 21, 25};
        c->arch = JASPER_ARCH_JASPER;
        c->pad_leading = 16; /* DLE's inference.py default for Jasper */
        add_block(c, 256, 1, 11, 2, 1, 0, 0, 0, xs, &n_xs, all, &n_all, 64);
        int cin = 256;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 2; j++) {
                add_block(c, f[i], 5, k[i], 1, 1, 0, 1, 1, xs, &n_xs, all, &n_all, cin);
                cin = f[i];
            }
        add_block(c, 896, 1, 29, 1, 2, 0, 0, 0, xs, &n_xs, all, &n_all, cin);
        add_block(c, 1024, 1, 1, 1, 1, 0, 0, 0, xs, &n_xs, all, &n_all, 896);
        return 0;
    }
    if (!strcmp(name, "quartznet15x5")) { /* quartznet15x5_speedp-online-1.15_speca.yaml */
        static const int f[5] = {256, 256, 512, 512, 512}, k[5] = {33, 39, 51, 63, 75};
        c->arch = JASPER_ARCH_QUARTZNET;
        c->pad_leading = 0;
        add_block(c, 256, 1, 33, 2, 1, 1, 0, 0, xs, &n_xs, all, &n_all, 64);
        int cin = 256;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++) {
                add_block(c, f[i], 5, k[i], 1, 1, 1, 1, 0, xs, &n_xs, all, &n_all, cin);
                cin = f[i];
            }
        add_block(c, 512, 1, 87, 1, 2, 1, 0, 0, xs, &n_xs, all, &n_all, cin);
        add_block(c, 1024, 1, 1, 1, 1, 0, 0, 0, xs, &n_xs, all, &n_all, 512);
        return 0;
    }
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hark bench --synthetic jasper10x5dr|quartznet15x5 | --model DIR\n"
            "                  [--batch 1,8,64] [--seconds 2,7,16.7] [--precision fp16|bf16|fp32]\n"
            "                  [--device cuda:N] [--min-time S] [--no-graphs] [--seed N]\n"
            "Times the GPU encoder + CTC head (log-softmax + argmax, ids copied back) from random\n"
            "features: one JSON line per (seconds, batch) with ms per batch, RTFx, the convs'\n"
            "GFLOP per utterance and the fraction of the GPU's dense peak (FP16/BF16 tensor\n"
            "cores, or FP32). --synthetic builds DLE's full-width config with name-seeded weights\n"
            "(--seed, default 1: bench/jasper_peer.py --seed makes the same ones for PyTorch).\n");
}

#ifdef HARK_CUDA
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench_one(const jasper_model_t *m, const jasper_gpu_model_t *g, const char *dev_name,
                     const char *prec, double peak, const char *name, double seconds, int B,
                     double min_time, int graphs)
{
    hark_err_t err = {0};
    const jasper_config_t *c = jasper_config(m);
    jasper_gpu_worker_t *w = NULL;
    size_t n = (size_t)(seconds * c->sample_rate);
    int t_in = jasper_frames_in(m, n), tf = t_in - c->pad_leading, rc = 1;
    size_t nf = (size_t)B * tf * c->n_filt;
    float *h = hark_malloc(sizeof(float) * (nf ? nf : 1)), *d = NULL;
    int *lens = hark_malloc(sizeof(int) * (size_t)B);
    double *times = hark_malloc(sizeof(double) * 1000);
    if (!h || !lens || !times ||
        jasper_gpu_worker_create(g, B, seconds + 0.01, &w, &err) != HARK_OK ||
        cudaMalloc((void **)&d, sizeof(float) * nf) != cudaSuccess) {
        fprintf(stderr, "hark bench: %s batch %d x %.1f s: %s\n", name, B, seconds,
                err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    jasper_gpu_set_graphs(w, graphs);
    unsigned seed = (unsigned)B * 7919u + (unsigned)t_in;
    for (size_t i = 0; i < nf; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    cudaMemcpy(d, h, sizeof(float) * nf, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    int frames = (int)(1 + n / (size_t)(c->sample_rate / 100)); /* feat_num_frames at 10 ms */
    for (int b = 0; b < B; b++)
        lens[b] = frames < tf ? frames : tf;
    int runs = 0;
    double t_start = 0;
    for (int it = -3; runs < 1000; it++) {
        double t0 = clock_now_s();
        if (jasper_gpu_encode(w, d, lens, B, t_in, &err) || jasper_gpu_sync(w, &err)) {
            fprintf(stderr, "hark bench: %s batch %d: %s\n", name, B, err.msg);
            goto done;
        }
        if (it < 0) {
            t_start = clock_now_s();
            continue;
        }
        times[runs++] = clock_now_s() - t0;
        if (clock_now_s() - t_start > min_time && runs >= 10)
            break;
    }
    qsort(times, (size_t)runs, sizeof *times, cmp_double);
    double med = times[runs / 2], flop = 2.0 * jasper_macs(m, t_in);
    double tflops = flop * B / med * 1e-12;
    printf("{\"impl\": \"hark\", \"model\": \"%s\", \"device\": \"%s\", \"gpu_path\": \"%s\", "
           "\"precision\": \"%s\", "
           "\"graphs\": %d, \"seconds\": %.1f, \"batch\": %d, \"ms\": %.3f, \"rtfx\": %.1f, "
           "\"runs\": %d, \"gflop_per_utt\": %.2f, \"tflops\": %.2f, \"fraction_of_peak\": %.4f, "
           "\"model_mb\": %.0f, \"worker_mb\": %.0f}\n",
           name, dev_name, jasper_gpu_path_name(w), prec, graphs, seconds, B, med * 1e3,
           B * seconds / med, runs, flop * 1e-9, tflops, peak > 0 ? tflops / peak : 0.0,
           (double)jasper_gpu_model_bytes(g) / 1048576.0,
           (double)jasper_gpu_worker_bytes(w) / 1048576.0);
    fflush(stdout);
    rc = 0;
done:
    jasper_gpu_worker_destroy(w);
    cudaFree(d);
    hark_free(h);
    hark_free(lens);
    hark_free(times);
    return rc;
}
#endif

int jasper_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *synthetic = NULL, *batches = "1,8,64",
               *seconds_list = "2,7,16.7", *precision = "fp16", *device = "cuda:0";
    double min_time = 2.0;
    int graphs = 1;
    unsigned seed = 1;
    for (int i = 1; i < argc; i++) {
        int v = i + 1 < argc;
        if (!strcmp(argv[i], "--model") && v)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--synthetic") && v)
            synthetic = argv[++i];
        else if (!strcmp(argv[i], "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && v)
            seconds_list = argv[++i];
        else if (!strcmp(argv[i], "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && v)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-graphs"))
            graphs = 0;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hark bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    jasper_config_t cfg;
    if ((!model_dir == !synthetic) || (synthetic && jasper_synthetic_config(synthetic, &cfg))) {
        if (synthetic && model_dir == NULL)
            fprintf(stderr, "hark bench: --synthetic %s: jasper10x5dr or quartznet15x5\n",
                    synthetic);
        usage(stderr);
        return 2;
    }
    ops_dtype_t dt = !strcmp(precision, "fp16")   ? OPS_F16
                     : !strcmp(precision, "bf16") ? OPS_BF16
                     : !strcmp(precision, "fp32") ? OPS_F32
                                                  : (ops_dtype_t)-1;
    if ((int)dt < 0 || strncmp(device, "cuda", 4)) {
        fprintf(stderr, "hark bench: jasper: --precision fp16|bf16|fp32, --device cuda:N (the "
                        "benchmark times the GPU path)\n");
        return 2;
    }
#ifndef HARK_CUDA
    (void)batches;
    (void)seconds_list;
    (void)min_time;
    (void)graphs;
    (void)seed;
    fprintf(stderr, "hark bench: built without CUDA\n");
    return 1;
#else
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    hark_err_t err = {0};
    jasper_model_t *m = NULL;
    synth_weights_t sw = {.seed = seed};
    int rc = synthetic ? jasper_create(&cfg, synth_weights_get, &sw, &m, &err)
                       : jasper_load(model_dir, 0, &m, &err);
    synth_weights_free(&sw);
    if (rc) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        return 1;
    }
    jasper_gpu_model_t *g = NULL;
    if (jasper_gpu_model_create(m, dev, dt, &g, &err)) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        jasper_destroy(m);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    /* dense peaks of the H100 / H200 SXM: FP16 and BF16 tensor cores alike; FP32 without TF32 */
    double peak =
        strstr(prop.name, "H100") || strstr(prop.name, "H200") ? (dt != OPS_F32 ? 989.4 : 66.9) : 0;
    const char *name = synthetic ? synthetic : model_dir;
    int failed = 0;
    for (const char *s = seconds_list; *s;) {
        double secs = atof(s);
        while (*s && *s != ',')
            s++;
        if (*s == ',')
            s++;
        for (const char *b = batches; *b && secs > 0;) {
            int B = atoi(b);
            while (*b && *b != ',')
                b++;
            if (*b == ',')
                b++;
            if (B >= 1)
                failed |=
                    bench_one(m, g, prop.name, precision, peak, name, secs, B, min_time, graphs);
        }
    }
    jasper_gpu_model_destroy(g);
    jasper_destroy(m);
    return failed;
#endif
}
