/* tacotron2_bench.c — `hark bench --model TACOTRON2_DIR [--vocoder WAVEGLOW_DIR]` (the tacotron2
 * family's bench hook): text -> Tacotron 2 -> WaveGlow on the GPU (tacotron2_gpu.h,
 * waveglow_gpu.h) for each batch size of --batch, the batch filled with the lines of --text-file
 * in turn (default: DLE's three golden sentences). One JSON line per batch size: ms per batch
 * (median; the whole synthesis from ids to the audio on the host), the Tacotron 2 and WaveGlow
 * shares, mel frames and audio samples made, samples per second, real-time factor, GPU memory.
 * --no-vocoder times Tacotron 2 alone. Full-size models with generated weights:
 * bench/tacotron2.sh (DLE's own code exports them; docs/benchmarks.md).
 * Tests: tests/model/tacotron2/test_tacotron2_family.c (the argument errors) */
#include "model/tacotron2/tacotron2_tools.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/tacotron2/tacotron2.h"
#include "model/tacotron2/tacotron2_gpu.h"
#include "model/waveglow/waveglow.h"
#include "model/waveglow/waveglow_gpu.h"
#include "server/model_config.h"
#include "text/tts_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_LINES 64
#define MAX_B 256

static void usage(FILE *f)
{
    fprintf(f,
            "usage: hark bench --model TACOTRON2_DIR [--vocoder WAVEGLOW_DIR | --no-vocoder]\n"
            "                  [--batch 1,8,32] [--precision fp16|fp32] [--device cuda:N]\n"
            "                  [--text-file F] [--min-time S] [--profile] [--chunk-frames N]\n"
            "Times text -> Tacotron 2 -> WaveGlow on the GPU, each batch filled with the lines of\n"
            "F in turn (default: DLE's three golden sentences): one JSON line per batch size with\n"
            "ms per batch, the Tacotron 2 / WaveGlow shares, samples per second, real-time factor\n"
            "and GPU memory. The vocoder defaults to the one the model's config.pbtxt names.\n"
            "--profile adds a line per batch size with each Tacotron 2 kernel's time per decoder\n"
            "step (one more run, without CUDA graphs). --chunk-frames N adds the time from the\n"
            "ids to the first streamed chunk's audio (config.pbtxt's vocoder_chunk_frames N).\n");
}

static const char *const SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

#ifdef HARK_CUDA
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    tacotron2_gpu_worker_t *tw;
    waveglow_gpu_worker_t *vw; /* NULL: --no-vocoder */
    const int *const *ids;
    const int *n;
    int B, hop;
    uint64_t *seeds;
    float **audio;
} run_t;

/* one synthesis: *t_t2, *t_all (s); the frames and audio samples of the batch */
static int synth(run_t *r, double *t_t2, double *t_all, long long *frames, long long *samples,
                 hark_err_t *err)
{
    double t0 = clock_now_s();
    int nf[MAX_B], ml[MAX_B];
    tacotron2_opts_t o = {.seeds = r->seeds};
    int rc = tacotron2_gpu_run(r->tw, r->ids, r->n, r->B, &o, NULL, nf, ml, err);
    *t_t2 = clock_now_s() - t0;
    *frames = *samples = 0;
    for (int b = 0; b < r->B; b++) {
        *frames += nf[b];
        *samples += (long long)nf[b] * r->hop;
    }
    if (!rc && r->vw) {
        int ld = 0;
        const float *d_mel = tacotron2_gpu_mel(r->tw, &ld);
        waveglow_opts_t wo = {.sigma = -1.0f};
        rc = waveglow_gpu_run_device(r->vw, d_mel, ld, nf, r->B, &wo, r->seeds, r->audio, err);
    }
    *t_all = clock_now_s() - t0;
    return rc;
}

/* ids -> the first streamed chunk's audio on the host (the family's vocoder_chunk_frames: the
 * first chunk is chunk / 2 frames, vocoded with ctx frames of context after it): *t (s) */
static int first_audio(run_t *r, int chunk, int ctx, double *t, hark_err_t *err)
{
    double t0 = clock_now_s();
    int nf[MAX_B], ml[MAX_B], fn[MAX_B];
    tacotron2_opts_t o = {.seeds = r->seeds};
    int rc = tacotron2_gpu_run(r->tw, r->ids, r->n, r->B, &o, NULL, nf, ml, err);
    if (!rc) {
        int ld = 0, wl = chunk / 2 + ctx;
        for (int b = 0; b < r->B; b++)
            fn[b] = nf[b] < wl ? nf[b] : wl;
        const float *d_mel = tacotron2_gpu_mel(r->tw, &ld);
        waveglow_opts_t wo = {.sigma = -1.0f};
        rc = waveglow_gpu_run_device(r->vw, d_mel, ld, fn, r->B, &wo, r->seeds, r->audio, err);
    }
    *t = clock_now_s() - t0;
    return rc;
}

static int bench_batch(const tacotron2_gpu_model_t *gt, const waveglow_gpu_model_t *gv,
                       const tacotron2_model_t *t2, const waveglow_model_t *wg, tts_text_t *tt,
                       int n_lines, int B, double min_time, int profile, int chunk,
                       const char *dev_name, const char *prec, const char *t2_name,
                       const char *wg_name, int dev)
{
    hark_err_t err = {0};
    const int *ids[MAX_B];
    int n[MAX_B], rc = 1, maxn = 0;
    uint64_t seeds[MAX_B];
    float *audio[MAX_B] = {0};
    for (int b = 0; b < B; b++) {
        ids[b] = tt[b % n_lines].ids;
        n[b] = tt[b % n_lines].n;
        seeds[b] = (uint64_t)b;
        maxn = n[b] > maxn ? n[b] : maxn;
    }
    const tacotron2_config_t *c = tacotron2_config(t2);
    run_t r = {NULL, NULL, ids, n, B, c->hop, seeds, audio};
    double *t_t2 = hark_malloc(sizeof(double) * 1000), *t_all = hark_malloc(sizeof(double) * 1000);
    long long frames = 0, samples = 0;
    double a_prof = 0, b_prof = 0;
    if (!t_t2 || !t_all ||
        tacotron2_gpu_worker_create(gt, B, maxn, c->max_decoder_steps, &r.tw, &err) ||
        (gv && waveglow_gpu_worker_create(gv, B, c->max_decoder_steps, &r.vw, &err))) {
        fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    for (int b = 0; gv && b < B; b++)
        if (!(audio[b] = hark_malloc(sizeof(float) * waveglow_samples(wg, c->max_decoder_steps)))) {
            fprintf(stderr, "hark bench: out of memory\n");
            goto done;
        }
    int runs = 0;
    double start = 0;
    for (int it = -2; runs < 1000; it++) {
        double a, b_;
        if (synth(&r, &a, &b_, &frames, &samples, &err)) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg);
            goto done;
        }
        if (it < 0) {
            start = clock_now_s();
            continue;
        }
        t_t2[runs] = a;
        t_all[runs++] = b_;
        if (clock_now_s() - start > min_time && runs >= 3)
            break;
    }
    qsort(t_t2, (size_t)runs, sizeof(double), cmp_double);
    qsort(t_all, (size_t)runs, sizeof(double), cmp_double);
    double ms = t_all[runs / 2] * 1e3, t2_ms = t_t2[runs / 2] * 1e3;
    double audio_s = (double)samples / c->sample_rate;
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(dev);
    cudaMemGetInfo(&free_b, &total_b);
    printf(
        "{\"impl\": \"hark\", \"model\": \"tacotron2\", \"tacotron2\": \"%s\", "
        "\"vocoder\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %d, "
        "\"ms\": %.3f, \"tacotron2_ms\": %.3f, \"waveglow_ms\": %.3f, \"frames\": %lld, "
        "\"samples\": %lld, \"samples_per_s\": %.0f, \"audio_s\": %.3f, \"rtf\": %.5f, "
        "\"rtfx\": %.1f, \"runs\": %d, \"model_mb\": %.0f, \"worker_mb\": %.0f, "
        "\"gpu_used_mb\": %.0f}\n",
        t2_name, gv ? wg_name : "none", dev_name, prec, B, ms, t2_ms, gv ? ms - t2_ms : 0.0, frames,
        samples, (double)samples / (ms / 1e3), audio_s, ms / 1e3 / audio_s, audio_s / (ms / 1e3),
        runs,
        (double)(tacotron2_gpu_model_bytes(gt) + (gv ? waveglow_gpu_model_bytes(gv) : 0)) /
            1048576.0,
        (double)(tacotron2_gpu_worker_bytes(r.tw) + (r.vw ? waveglow_gpu_worker_bytes(r.vw) : 0)) /
            1048576.0,
        (double)(total_b - free_b) / 1048576.0);
    fflush(stdout);
    if (chunk && gv) { /* time to the first streamed chunk */
        int ctx = waveglow_context_frames(wg), fr = 0;
        for (int it = -2; fr < 1000; it++) {
            double a;
            if (first_audio(&r, chunk, ctx, &a, &err)) {
                fprintf(stderr, "hark bench: batch %d (first audio): %s\n", B, err.msg);
                goto done;
            }
            if (it < 0) {
                start = clock_now_s();
                continue;
            }
            t_t2[fr++] = a;
            if (clock_now_s() - start > min_time / 2 && fr >= 5)
                break;
        }
        qsort(t_t2, (size_t)fr, sizeof(double), cmp_double);
        printf("{\"impl\": \"hark\", \"first_audio\": \"tacotron2\", \"precision\": \"%s\", "
               "\"batch\": %d, \"chunk_frames\": %d, \"context_frames\": %d, "
               "\"first_audio_ms\": %.3f, \"runs\": %d}\n",
               prec, B, chunk, ctx, t_t2[fr / 2] * 1e3, fr);
        fflush(stdout);
    }
    if (profile) {
        const char *names[16];
        double pm[16];
        if (tacotron2_gpu_set_profile(r.tw, 1, &err) ||
            synth(&r, &a_prof, &b_prof, &frames, &samples, &err)) {
            fprintf(stderr, "hark bench: profile: %s\n", err.msg);
            goto done;
        }
        int np = tacotron2_gpu_profile(r.tw, names, pm, 16);
        printf("{\"impl\": \"hark\", \"profile\": \"tacotron2\", \"precision\": \"%s\", "
               "\"batch\": %d",
               prec, B);
        for (int i = 0; i < np; i++)
            printf(", \"%s_%s\": %.2f", names[i], i < 7 ? "us_per_step" : "ms",
                   i < 7 ? pm[i] * 1e3 : pm[i]);
        printf("}\n");
        fflush(stdout);
        tacotron2_gpu_set_profile(r.tw, 0, &err);
    }
    rc = 0;
done:
    tacotron2_gpu_worker_destroy(r.tw);
    waveglow_gpu_worker_destroy(r.vw);
    for (int b = 0; b < B; b++)
        hark_free(audio[b]);
    hark_free(t_t2);
    hark_free(t_all);
    return rc;
}
#endif

/* the vocoder config.pbtxt names (as hark speak resolves it) */
static int vocoder_of(const char *model_dir, char *out, size_t n)
{
    hark_err_t err = {0};
    if (model_config_vocoder_dir(model_dir, out, n, &err) == HARK_OK)
        return 0;
    fprintf(stderr, "hark bench: %s%s\n", err.msg,
            err.status == HARK_ERR_NOT_FOUND ? ": give --vocoder DIR or --no-vocoder" : "");
    return -1;
}

/* the non-empty lines of path (at most MAX_LINES) through DLE's Tacotron 2 front end */
static int read_lines(const char *path, tts_text_t *tt, int *n_out)
{
    int n = 0;
    hark_err_t err = {0};
    if (!path) {
        for (; n < 3; n++)
            if (tts_text_to_ids_variant(SENTENCES[n], TTS_TEXT_DLE_TACOTRON2, &tt[n], &err)) {
                fprintf(stderr, "hark bench: %s\n", err.msg);
                return -1;
            }
        *n_out = n;
        return 0;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hark bench: cannot open --text-file %s\n", path);
        return -1;
    }
    char line[8192];
    while (n < MAX_LINES && fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = 0;
        if (!l)
            continue;
        if (tts_text_to_ids_variant(line, TTS_TEXT_DLE_TACOTRON2, &tt[n], &err)) {
            fprintf(stderr, "hark bench: %s: %s\n", path, err.msg);
            fclose(f);
            return -1;
        }
        n++;
    }
    fclose(f);
    if (!n) {
        fprintf(stderr, "hark bench: %s has no text\n", path);
        return -1;
    }
    *n_out = n;
    return 0;
}

int tacotron2_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *vocoder = NULL, *batches = "1,8,32", *precision = "fp16",
               *device = "cuda:0", *text_file = NULL;
    double min_time = 3.0;
    int no_voc = 0, profile = 0, chunk = 0;
    for (int i = 1; i < argc; i++) {
        int v = i + 1 < argc;
        if (!strcmp(argv[i], "--model") && v)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--vocoder") && v)
            vocoder = argv[++i];
        else if (!strcmp(argv[i], "--no-vocoder"))
            no_voc = 1;
        else if (!strcmp(argv[i], "--profile"))
            profile = 1;
        else if (!strcmp(argv[i], "--chunk-frames") && v)
            chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(argv[i], "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--text-file") && v)
            text_file = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hark bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    ops_dtype_t dt = !strcmp(precision, "fp16")   ? OPS_F16
                     : !strcmp(precision, "fp32") ? OPS_F32
                                                  : (ops_dtype_t)-1;
    if (!model_dir || (int)dt < 0 || strncmp(device, "cuda", 4) || (no_voc && vocoder) ||
        chunk < 0 || chunk > 100000) {
        fprintf(stderr, "hark bench: tacotron2: --model DIR, --precision fp16|fp32, "
                        "--device cuda:N (the benchmark times the GPU path), not both --vocoder "
                        "and --no-vocoder\n");
        usage(stderr);
        return 2;
    }
    char vdir[1200];
    if (!vocoder && !no_voc) {
        if (vocoder_of(model_dir, vdir, sizeof vdir))
            return 2;
        vocoder = vdir;
    }
    tts_text_t tt[MAX_LINES];
    memset(tt, 0, sizeof tt);
    int n_lines = 0;
    if (read_lines(text_file, tt, &n_lines))
        return 2;
    int failed = 1;
#ifndef HARK_CUDA
    (void)batches;
    (void)min_time;
    (void)profile;
    (void)chunk;
    fprintf(stderr, "hark bench: built without CUDA\n");
#else
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    hark_err_t err = {0};
    tacotron2_model_t *t2 = NULL;
    waveglow_model_t *wg = NULL;
    tacotron2_gpu_model_t *gt = NULL;
    waveglow_gpu_model_t *gv = NULL;
    if (tacotron2_load(model_dir, 0, &t2, &err) ||
        (vocoder && waveglow_load(vocoder, 1, &wg, &err)) ||
        tacotron2_gpu_model_create(t2, dev, dt, &gt, &err) ||
        (wg && waveglow_gpu_model_create(wg, dev, dt, &gv, &err))) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        goto done;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    failed = 0;
    for (const char *b = batches; *b && !failed;) {
        int B = atoi(b);
        if (B < 1 || B > MAX_B) {
            fprintf(stderr, "hark bench: batch %d: must be in [1, %d]\n", B, MAX_B);
            failed = 1;
            break;
        }
        failed = bench_batch(gt, gv, t2, wg, tt, n_lines, B, min_time, profile, chunk, prop.name,
                             precision, model_dir, vocoder ? vocoder : "none", dev);
        const char *comma = strchr(b, ',');
        b = comma ? comma + 1 : b + strlen(b);
    }
done:
    waveglow_gpu_model_destroy(gv);
    tacotron2_gpu_model_destroy(gt);
    waveglow_destroy(wg);
    tacotron2_destroy(t2);
#endif
    for (int i = 0; i < n_lines; i++)
        tts_text_free(&tt[i]);
    return failed;
}
