/* fastspeech_bench.c — `hark bench --model FASTSPEECH_DIR [--vocoder HIFIGAN_DIR]` (the fastspeech
 * family's bench hook): text -> FastSpeech -> HiFi-GAN on the GPU (fastspeech_gpu.h,
 * hifigan_gpu.h) for each batch size of --batch, the batch filled with DLE's three golden
 * sentences in turn. One JSON line per batch size: ms per batch (median, the whole synthesis:
 * ids, both models, the audio on the host), the FastSpeech and HiFi-GAN shares, time to first
 * audio (ids -> the first vocoder chunk of chunk_frames / 2 mel frames + context on the host, as
 * the streaming family emits it), real-time factor (synthesis time / audio seconds) and its
 * inverse, GPU memory (the models, the workers, and the device's used memory after the runs).
 * Full-size models with generated weights: tools/convert_fastspeech.py --random 1 --config base,
 * tools/convert_hifigan.py --random 1 --config v1 (docs/tts.md).
 * Tests: tests/model/fastspeech/test_fastspeech_family.c (the argument errors) */
#include "model/fastspeech/fastspeech_tools.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "model/fastspeech/fastspeech_gpu.h"
#include "model/hifigan/hifigan.h"
#include "model/hifigan/hifigan_gpu.h"
#include "server/model_config.h"
#include "text/tts_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: hark bench --model FASTSPEECH_DIR [--vocoder HIFIGAN_DIR] [--batch 1,32]\n"
        "                  [--precision fp16|bf16|fp32] [--device cuda:N] [--chunk-frames 64]\n"
        "                  [--min-time S] [--alpha A] [--no-graphs] [--no-fused | --no-wgmma | "
        "--wgmma-all] [--res32]\n"
        "                  [--profile]\n"
        "Times text -> FastSpeech -> HiFi-GAN on the GPU, each batch filled with DLE's three\n"
        "golden sentences in turn: one JSON line per batch size with ms per batch, time to\n"
        "first audio (the first streamed vocoder chunk), real-time factor and GPU memory.\n"
        "The vocoder defaults to the one the model's config.pbtxt names. --no-fused runs\n"
        "HiFi-GAN's resblocks conv by conv, --no-wgmma fused on mma.sync only, --res32 keeps the\n"
        "fused units' residual between dilations in FP32 (default 16 bits); --profile adds "
        "a line with the vocoder's ms per\n"
        "part (conv_pre, ups{i}, mrf{i}, conv_post; no graphs).\n");
}

#ifdef HARK_CUDA
static const char *const SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    fastspeech_gpu_worker_t *fw;
    hifigan_gpu_worker_t *vw; /* the whole mel at once */
    hifigan_gpu_worker_t *cw; /* one streamed chunk window */
    const hifigan_model_t *voc;
    const int *const *ids;
    const int *n;
    const float *alpha;
    int B, chunk, ctx;
    float *audio;
} run_t;

/* one synthesis: *t_fs, *t_all (s); audio samples of the batch into *samples */
static int synth(run_t *r, double *t_fs, double *t_all, size_t *samples, hark_err_t *err)
{
    double t0 = clock_now_s();
    int nf[CUDA_MAX_LENS], T = 0;
    const float *d_mel = NULL, *d_audio = NULL;
    fastspeech_gpu_opts_t go = {r->alpha, NULL, NULL};
    int rc = fastspeech_gpu_run(r->fw, r->ids, r->n, r->B, &go, nf, &T, &d_mel, err);
    *t_fs = clock_now_s() - t0;
    if (!rc)
        rc = hifigan_gpu_run_device(r->vw, d_mel, T, 0, T, nf, r->B, &d_audio, err);
    if (!rc)
        rc = hifigan_gpu_audio_to_host(r->vw, r->B, T, r->audio, err);
    *t_all = clock_now_s() - t0;
    *samples = 0;
    for (int b = 0; b < r->B; b++)
        *samples += hifigan_samples(r->voc, nf[b]);
    return rc;
}

/* ids -> the first streamed chunk's audio on the host */
static int first_audio(run_t *r, double *t, hark_err_t *err)
{
    double t0 = clock_now_s();
    int nf[CUDA_MAX_LENS], wl[CUDA_MAX_LENS], T = 0;
    const float *d_mel = NULL, *d_audio = NULL;
    fastspeech_gpu_opts_t go = {r->alpha, NULL, NULL};
    int rc = fastspeech_gpu_run(r->fw, r->ids, r->n, r->B, &go, nf, &T, &d_mel, err);
    int b = r->chunk / 2 > 0 ? r->chunk / 2 : 1;
    b = b > T ? T : b;
    int wlen = b + r->ctx < T ? b + r->ctx : T;
    for (int k = 0; k < r->B; k++)
        wl[k] = nf[k] < wlen ? nf[k] : wlen;
    if (!rc)
        rc = hifigan_gpu_run_device(r->cw, d_mel, T, 0, wlen, wl, r->B, &d_audio, err);
    if (!rc)
        rc = hifigan_gpu_audio_to_host(r->cw, r->B, wlen, r->audio, err);
    *t = clock_now_s() - t0;
    return rc;
}

static int bench_batch(const fastspeech_gpu_model_t *gf, const hifigan_gpu_model_t *gv,
                       const fastspeech_model_t *fs, const hifigan_model_t *voc, int B, float alpha,
                       int chunk, double min_time, int graphs, int fused, int res16, int profile,
                       const char *dev_name, const char *prec, const char *fs_name,
                       const char *voc_name, int dev)
{
    hark_err_t err = {0};
    tts_text_t tt[3];
    const int *ids[CUDA_MAX_LENS];
    int n[CUDA_MAX_LENS], rc = 1, maxn = 0;
    float alphas[CUDA_MAX_LENS];
    for (int i = 0; i < 3; i++)
        if (tts_text_to_ids(SENTENCES[i], &tt[i], &err)) {
            fprintf(stderr, "hark bench: %s\n", err.msg);
            return 1;
        }
    for (int b = 0; b < B; b++) {
        ids[b] = tt[b % 3].ids;
        n[b] = tt[b % 3].n;
        alphas[b] = alpha;
        maxn = n[b] > maxn ? n[b] : maxn;
    }
    const fastspeech_config_t *c = fastspeech_config(fs);
    int max_frames = c->max_seq_len, ctx = hifigan_context_frames(voc);
    run_t r = {NULL, NULL, NULL, voc, ids, n, alphas, B, chunk, ctx, NULL};
    double *t_fs = hark_malloc(sizeof(double) * 1000), *t_all = hark_malloc(sizeof(double) * 1000),
           *t_first = hark_malloc(sizeof(double) * 1000);
    size_t samples = 0;
    /* the vocoder worker sized for this batch's mel (one FastSpeech run finds its length) */
    int nf[CUDA_MAX_LENS], T = 0;
    const float *d_mel = NULL;
    fastspeech_gpu_opts_t go = {alphas, NULL, NULL};
    if (fastspeech_gpu_worker_create(gf, B, maxn, max_frames, &r.fw, &err) ||
        fastspeech_gpu_run(r.fw, ids, n, B, &go, nf, &T, &d_mel, &err) ||
        hifigan_gpu_worker_create(gv, B, T, &r.vw, &err) ||
        hifigan_gpu_worker_create(gv, B, chunk / 2 + ctx + 1, &r.cw, &err) ||
        !(r.audio = hark_malloc(sizeof(float) * (size_t)B * hifigan_samples(voc, T)))) {
        fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg[0] ? err.msg : "out of memory");
        goto done;
    }
    hifigan_gpu_set_graphs(r.vw, graphs);
    hifigan_gpu_set_graphs(r.cw, graphs);
    hifigan_gpu_set_fused(r.vw, (hifigan_fused_t)fused);
    hifigan_gpu_set_fused(r.cw, (hifigan_fused_t)fused);
    hifigan_gpu_set_res16(r.vw, res16);
    hifigan_gpu_set_res16(r.cw, res16);
    int runs = 0, fruns = 0;
    double start = 0;
    for (int it = -3; runs < 1000; it++) {
        double a, b_;
        if (synth(&r, &a, &b_, &samples, &err)) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg);
            goto done;
        }
        if (it < 0) {
            start = clock_now_s();
            continue;
        }
        t_fs[runs] = a;
        t_all[runs++] = b_;
        if (clock_now_s() - start > min_time && runs >= 5)
            break;
    }
    for (int it = -3; fruns < 1000; it++) {
        double a;
        if (first_audio(&r, &a, &err)) {
            fprintf(stderr, "hark bench: batch %d (first audio): %s\n", B, err.msg);
            goto done;
        }
        if (it < 0) {
            start = clock_now_s();
            continue;
        }
        t_first[fruns++] = a;
        if (clock_now_s() - start > min_time / 2 && fruns >= 5)
            break;
    }
    qsort(t_fs, (size_t)runs, sizeof(double), cmp_double);
    qsort(t_all, (size_t)runs, sizeof(double), cmp_double);
    qsort(t_first, (size_t)fruns, sizeof(double), cmp_double);
    double ms = t_all[runs / 2] * 1e3, fs_ms = t_fs[runs / 2] * 1e3;
    double audio_s = (double)samples / hifigan_config(voc)->sample_rate;
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(dev);
    cudaMemGetInfo(&free_b, &total_b);
    printf("{\"impl\": \"hark\", \"model\": \"%s\", \"vocoder\": \"%s\", \"device\": \"%s\", "
           "\"precision\": \"%s\", \"graphs\": %d, \"batch\": %d, \"alpha\": %.2f, "
           "\"ms\": %.3f, \"fastspeech_ms\": %.3f, \"hifigan_ms\": %.3f, "
           "\"first_audio_ms\": %.3f, \"chunk_frames\": %d, \"audio_s\": %.3f, \"rtf\": %.5f, "
           "\"rtfx\": %.1f, \"runs\": %d, \"model_mb\": %.0f, \"worker_mb\": %.0f, "
           "\"gpu_used_mb\": %.0f, \"fused_stages\": %d, \"res16\": %d}\n",
           fs_name, voc_name, dev_name, prec, graphs, B, alpha, ms, fs_ms, ms - fs_ms,
           t_first[fruns / 2] * 1e3, chunk, audio_s, ms / 1e3 / audio_s, audio_s / (ms / 1e3), runs,
           (double)(fastspeech_gpu_model_bytes(gf) + hifigan_gpu_model_bytes(gv)) / 1048576.0,
           (double)(fastspeech_gpu_worker_bytes(r.fw) + hifigan_gpu_worker_bytes(r.vw) +
                    hifigan_gpu_worker_bytes(r.cw)) /
               1048576.0,
           (double)(total_b - free_b) / 1048576.0, hifigan_gpu_fused_stages(r.vw), res16);
    fflush(stdout);
    if (profile) { /* the vocoder's parts, averaged over 5 forwards after one warm-up */
        char names[HIFIGAN_PROF_PARTS][16];
        float part[HIFIGAN_PROF_PARTS], sum[HIFIGAN_PROF_PARTS] = {0};
        int np = 0;
        if (hifigan_gpu_set_profile(r.vw, 1, &err))
            goto prof_fail;
        for (int it = 0; it < 6; it++) {
            double a, b_;
            if (synth(&r, &a, &b_, &samples, &err) ||
                (np = hifigan_gpu_profile(r.vw, names, part, &err)) < 0)
                goto prof_fail;
            for (int i = 0; it > 0 && i < np; i++)
                sum[i] += part[i] / 5.0f;
        }
        printf("{\"impl\": \"hark\", \"profile\": \"hifigan\", \"precision\": \"%s\", "
               "\"batch\": %d, \"fused_stages\": %d, \"ms\": {",
               prec, B, hifigan_gpu_fused_stages(r.vw));
        for (int i = 0; i < np; i++)
            printf("%s\"%s\": %.3f", i ? ", " : "", names[i], sum[i]);
        printf("}}\n");
        fflush(stdout);
        hifigan_gpu_set_profile(r.vw, 0, &err);
    }
    rc = 0;
    goto done;
prof_fail:
    fprintf(stderr, "hark bench: batch %d (profile): %s\n", B, err.msg);
done:
    fastspeech_gpu_worker_destroy(r.fw);
    hifigan_gpu_worker_destroy(r.vw);
    hifigan_gpu_worker_destroy(r.cw);
    hark_free(r.audio);
    hark_free(t_fs);
    hark_free(t_all);
    hark_free(t_first);
    for (int i = 0; i < 3; i++)
        tts_text_free(&tt[i]);
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
            err.status == HARK_ERR_NOT_FOUND ? ": give --vocoder DIR" : "");
    return -1;
}

int fastspeech_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *vocoder = NULL, *batches = "1,32", *precision = "fp16",
               *device = "cuda:0";
    double min_time = 3.0;
    float alpha = 1.0f;
    int graphs = 1, chunk = 64, fused = HIFIGAN_FUSED, res16 = 1, profile = 0;
    for (int i = 1; i < argc; i++) {
        int v = i + 1 < argc;
        if (!strcmp(argv[i], "--model") && v)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--vocoder") && v)
            vocoder = argv[++i];
        else if (!strcmp(argv[i], "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(argv[i], "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--alpha") && v)
            alpha = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--chunk-frames") && v)
            chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-graphs"))
            graphs = 0;
        else if (!strcmp(argv[i], "--no-fused"))
            fused = HIFIGAN_CONV_BY_CONV;
        else if (!strcmp(argv[i], "--no-wgmma"))
            fused = HIFIGAN_FUSED_MMA;
        else if (!strcmp(argv[i], "--wgmma-all"))
            fused = HIFIGAN_FUSED_WGMMA_ALL;
        else if (!strcmp(argv[i], "--res32"))
            res16 = 0;
        else if (!strcmp(argv[i], "--profile"))
            profile = 1;
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
                     : !strcmp(precision, "bf16") ? OPS_BF16
                     : !strcmp(precision, "fp32") ? OPS_F32
                                                  : (ops_dtype_t)-1;
    if (!model_dir || (int)dt < 0 || strncmp(device, "cuda", 4) || !(alpha > 0.05f) || chunk < 2 ||
        chunk > 100000) {
        fprintf(stderr, "hark bench: fastspeech: --model DIR, --precision fp16|bf16|fp32, "
                        "--device cuda:N (the benchmark times the GPU path), --alpha > 0.05, "
                        "--chunk-frames >= 2\n");
        usage(stderr);
        return 2;
    }
    char vdir[1200];
    if (!vocoder) {
        if (vocoder_of(model_dir, vdir, sizeof vdir))
            return 2;
        vocoder = vdir;
    }
#ifndef HARK_CUDA
    (void)batches;
    (void)min_time;
    (void)graphs;
    (void)fused;
    (void)res16;
    (void)profile;
    fprintf(stderr, "hark bench: built without CUDA\n");
    return 1;
#else
    int dev = device[4] == ':' ? atoi(device + 5) : 0;
    hark_err_t err = {0};
    fastspeech_model_t *fs = NULL;
    hifigan_model_t *voc = NULL;
    fastspeech_gpu_model_t *gf = NULL;
    hifigan_gpu_model_t *gv = NULL;
    int failed = 1;
    if (fastspeech_load(model_dir, 0, &fs, &err) || hifigan_load(vocoder, 1, &voc, &err) ||
        fastspeech_gpu_model_create(fs, dev, dt, &gf, &err) ||
        hifigan_gpu_model_create(voc, dev, dt, &gv, &err)) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        goto done;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    failed = 0;
    for (const char *b = batches; *b;) {
        int B = atoi(b);
        while (*b && *b != ',')
            b++;
        if (*b == ',')
            b++;
        if (B >= 1 && B <= CUDA_MAX_LENS)
            failed |= bench_batch(gf, gv, fs, voc, B, alpha, chunk, min_time, graphs, fused, res16,
                                  profile, prop.name, precision, model_dir, vocoder, dev);
    }
done:
    hifigan_gpu_model_destroy(gv);
    fastspeech_gpu_model_destroy(gf);
    hifigan_destroy(voc);
    fastspeech_destroy(fs);
    return failed;
#endif
}
