/* wenet_bench.c — `hark bench` for WeNet models: engine-only speed of a Conformer model (no server,
 * no audio decoding): encoder + CTC log-softmax + argmax from random 80-bin features, per batch
 * size, printed as real-time factor, latency per batch, peak memory and the encoder's GFLOP/s. The
 * PyTorch side of the same measurement is bench/wenet_peer.py (bench/conformer.sh runs both).
 * Tests: tests/cli/test_cli.c (cli_bench_synthetic_and_errors) */
#include "model/wenet/wenet_tools.h"
#include "model/family.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "gpu/gpu.h"
#include "gpu/pinned.h"
#include "audio/audio.h"
#include "model/wenet/conformer.h"
#include "model/synth_weights.h"
#include "model/wenet/wenet_asr.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"
#include "hark.h"
#include "search/ctc_beam_gpu.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the next number of a comma-separated --batch list, *b moved past it */
static int next_batch(const char **b)
{
    int v = atoi(*b);
    while (**b && **b != ',')
        (*b)++;
    if (**b == ',')
        (*b)++;
    return v;
}

#ifdef HARK_CUDA
#include "model/wenet/conformer_gpu.h"
#include "search/ctc_gpu.h"
#include <cuda_runtime_api.h>

/* --profile: the same work stage by stage (CUDA events between stages, graphs off), one JSON line
 * with ms per batch for each stage */
static void print_profile(conformer_gpu_state_t *s, const float *d_feats, float *d_enc,
                          float *d_logp, int *d_arg, const int *lens, int *elens, int B, int T,
                          int te, const char *gpu, wenet_precision_t prec)
{
    enum { REPS = 10 };
    hark_err_t err = {0};
    double ms[CONFORMER_GPU_STAGES] = {0};
    conformer_gpu_profile(s, 1);
    int rc = HARK_OK;
    for (int i = 0; i < REPS && !rc; i++) {
        rc = conformer_gpu_forward(s, NULL, d_enc, elens, d_feats, lens, B, T, &err);
        if (!rc)
            rc = conformer_gpu_ctc_argmax(s, d_arg, NULL, d_logp, 0, d_enc, elens, B, te, &err);
        if (!rc)
            rc = conformer_gpu_profile_read(s, ms, &err);
    }
    conformer_gpu_profile(s, 0);
    conformer_gpu_set_graphs(s, 1);
    if (rc) {
        fprintf(stderr, "hark bench: profile: %s\n", err.msg);
        return;
    }
    double total = 0;
    for (int i = 0; i < CONFORMER_GPU_STAGES; i++)
        total += ms[i] / REPS;
    printf("{\"impl\": \"hark\", \"device\": \"%s\", \"gpu_path\": \"%s\", \"mode\": \"%s\", "
           "\"batch\": %d, \"profile_ms\": {",
           gpu, conformer_gpu_path_name(s), wenet_precision_name(prec), B);
    for (int i = 0; i < CONFORMER_GPU_STAGES; i++)
        printf("%s\"%s\": %.3f", i ? ", " : "", conformer_gpu_stage_name(i), ms[i] / REPS);
    printf("}, \"profile_total_ms\": %.3f}\n", total);
    fflush(stdout);
}

/* the encoder on the device in wp (*prec: its CONFORMER_GPU_ precision), the device's properties;
 * NULL (said on stderr) on a failure */
static conformer_gpu_model_t *bench_gpu_model(const wenet_config_t *cfg, conformer_tensor_fn get,
                                              void *user, int device, wenet_precision_t wp,
                                              int *prec, struct cudaDeviceProp *prop)
{
    hark_err_t err = {0};
    conformer_gpu_model_t *gm = NULL;
    cudaSetDevice(device);
    *prec = wp == WENET_FP16   ? CONFORMER_GPU_FP16
            : wp == WENET_BF16 ? CONFORMER_GPU_BF16
                               : CONFORMER_GPU_FP32;
    if (conformer_gpu_model_create(cfg, get, user, *prec, &gm, &err)) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        return NULL;
    }
    cudaGetDeviceProperties(prop, device);
    return gm;
}

/* GPU: the same work as the CPU path (encoder + CTC log-softmax + argmax, the argmax on the
 * device so only (batch, frames) ints come back), timed on the host around a stream sync. */
static int bench_gpu(const wenet_config_t *cfg, conformer_tensor_fn get, void *user, int device,
                     wenet_precision_t wp, int profile, double *ms_out, int *b_out, int *n_out,
                     const char *batches, double seconds, double min_time, double flops)
{
    hark_err_t err = {0};
    cudaSetDevice(device);
    size_t free0, total;
    cudaMemGetInfo(&free0, &total);
    int prec;
    struct cudaDeviceProp prop;
    conformer_gpu_model_t *gm = bench_gpu_model(cfg, get, user, device, wp, &prec, &prop);
    if (!gm)
        return 1;
    int T = (int)(seconds * 100) - 2, te = conformer_gpu_out_len(gm, T), V = cfg->vocab_size;
    for (const char *b = batches; *b;) {
        int B = next_batch(&b);
        if (B < 1)
            continue;
        conformer_gpu_state_t *s = NULL;
        float *d_feats = NULL, *d_enc = NULL, *d_logp = NULL, *h_feats = NULL;
        int *d_arg = NULL, *h_arg = NULL, *lens = NULL, *elens = NULL;
        double *times = NULL;
        int ok = conformer_gpu_state_create(gm, prec, B, T, &s, &err) == HARK_OK;
        size_t nf = (size_t)B * T * cfg->input_dim;
        if (ok)
            ok = cudaMalloc((void **)&d_feats, sizeof(float) * nf) == cudaSuccess &&
                 cudaMalloc((void **)&d_enc, sizeof(float) * (size_t)B * te * cfg->d_model) ==
                     cudaSuccess &&
                 cudaMalloc((void **)&d_logp, sizeof(float) * (size_t)B * te * V) == cudaSuccess &&
                 cudaMalloc((void **)&d_arg, sizeof(int) * (size_t)B * te) == cudaSuccess &&
                 cudaMallocHost((void **)&h_arg, sizeof(int) * (size_t)B * te) == cudaSuccess;
        h_feats = hark_malloc(sizeof(float) * nf);
        lens = hark_malloc(sizeof(int) * (size_t)B);
        elens = hark_malloc(sizeof(int) * (size_t)B);
        times = hark_malloc(sizeof(double) * 1000);
        if (!ok || !h_feats || !lens || !elens || !times) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B,
                    err.msg[0] ? err.msg : "out of memory");
            cudaGetLastError();
        } else {
            unsigned seed = (unsigned)B;
            for (size_t i = 0; i < nf; i++) {
                seed = seed * 1664525u + 1013904223u;
                h_feats[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
            }
            /* the state's stream does not wait for the default stream: finish the upload first */
            cudaMemcpy(d_feats, h_feats, sizeof(float) * nf, cudaMemcpyHostToDevice);
            cudaDeviceSynchronize();
            for (int i = 0; i < B; i++)
                lens[i] = T;
            cudaStream_t str = (cudaStream_t)conformer_gpu_stream(s);
            int n = 0, rc = 0;
            double t_start = 0;
            for (int it = -3; n < 1000; it++) {
                double t0 = clock_now_s();
                rc = conformer_gpu_forward(s, NULL, d_enc, elens, d_feats, lens, B, T, &err);
                if (!rc) /* logits, log-softmax and argmax (one pass over the logits) */
                    rc = conformer_gpu_ctc_argmax(s, d_arg, NULL, d_logp, 0, d_enc, elens, B, te,
                                                  &err);
                if (!rc && cudaMemcpyAsync(h_arg, d_arg, sizeof(int) * (size_t)B * te,
                                           cudaMemcpyDeviceToHost, str) != cudaSuccess)
                    rc = err_set(&err, HARK_ERR_CUDA, "copy");
                if (!rc)
                    rc = conformer_gpu_sync(s, &err);
                if (rc)
                    break;
                if (it < 0) {
                    t_start = clock_now_s();
                    continue;
                }
                times[n++] = clock_now_s() - t0;
                if (clock_now_s() - t_start > min_time && n >= 10)
                    break;
            }
            if (rc) {
                fprintf(stderr, "hark bench: batch %d: %s\n", B, err.msg);
            } else {
                qsort(times, (size_t)n, sizeof *times, cmp_double);
                double med = times[n / 2];
                size_t free1;
                cudaMemGetInfo(&free1, &total);
                /* dense peaks of the H100/H200 SXM (FP16 and BF16 tensor cores alike; FP32
                 * without TF32) */
                double peak = strstr(prop.name, "H100") || strstr(prop.name, "H200")
                                  ? (wp != WENET_FP32 ? 989.4 : 66.9)
                                  : 0;
                double tf = flops * B / med * 1e-12;
                if (*n_out < 16) {
                    ms_out[*n_out] = med * 1e3;
                    b_out[(*n_out)++] = B;
                }
                printf("{\"impl\": \"hark\", \"device\": \"%s\", \"gpu_path\": \"%s\", "
                       "\"mode\": \"%s\", \"batch\": %d, "
                       "\"ms\": %.3f, \"rtfx\": %.1f, \"runs\": %d, \"peak_mem_mb\": %.0f, "
                       "\"model_mb\": %.0f, \"state_mb\": %.0f, \"gflop_per_utt\": %.2f, "
                       "\"tflops\": %.2f, \"fraction_of_peak\": %.4f}\n",
                       prop.name, conformer_gpu_path_name(s), wenet_precision_name(wp), B,
                       med * 1e3, B * seconds / med, n, (double)(free0 - free1) / 1048576.0,
                       (double)conformer_gpu_model_bytes(gm) / 1048576.0,
                       (double)conformer_gpu_state_bytes(s) / 1048576.0, flops * 1e-9, tf,
                       peak > 0 ? tf / peak : 0.0);
                fflush(stdout);
                if (profile)
                    print_profile(s, d_feats, d_enc, d_logp, d_arg, lens, elens, B, T, te,
                                  prop.name, wp);
            }
        }
        conformer_gpu_state_destroy(s);
        cudaFree(d_feats);
        cudaFree(d_enc);
        cudaFree(d_logp);
        cudaFree(d_arg);
        cudaFreeHost(h_arg);
        hark_free(h_feats);
        hark_free(lens);
        hark_free(elens);
        hark_free(times);
    }
    conformer_gpu_model_destroy(gm);
    return 0;
}

/* --chunk (GPU): the streaming step as the sequence batcher runs it (conformer_gpu_forward_chunks):
 * B streams of --seconds, started together, stepped one 16-frame (640 ms) chunk at a time in one
 * batched forward with every earlier chunk as context; WeNet's windows ((16 - 1) · rate + right
 * context + 1 fbank frames, stride 16 · rate). Host in, host out (the call uploads the chunks'
 * features and waits); "ctc": "none" runs the encoder alone, "host" adds the CTC head with its
 * log-probs copied to the host (B · 16 · vocab floats a step), "top10" the CTC head reduced on the
 * device to each frame's top 10 and the blank's (what a stream pool with beam 10 copies). ms per
 * step averaged over whole streams, repeated for --min-time; streams kept in real time = B ·
 * 640 ms / ms per step. */
static int bench_chunks(const wenet_config_t *cfg, conformer_tensor_fn get, void *user, int device,
                        wenet_precision_t wp, const char *batches, double seconds, double min_time)
{
    hark_err_t err = {0};
    int prec;
    struct cudaDeviceProp prop;
    conformer_gpu_model_t *gm = bench_gpu_model(cfg, get, user, device, wp, &prec, &prop);
    if (!gm)
        return 1;
    const int T = (int)(seconds * 100) - 2, chunk = 16, F = cfg->input_dim, V = cfg->vocab_size;
    /* WeNet's windows, as the stream pool cuts them (wenet_stream.c) */
    const int rate = (int)cfg->subsample, ctx = wenet_right_context(cfg) + 1;
    const int window = (chunk - 1) * rate + ctx, stride = chunk * rate;
    const int cap = conformer_gpu_out_len(gm, T) + chunk;
    int per_stream = 0, rc = 0;
    for (int cur = 0; cur <= T - ctx; cur += stride)
        per_stream++;
    for (const char *b = batches; *b && !rc;) {
        int B = next_batch(&b);
        if (B < 1)
            continue;
        conformer_gpu_chunks_t *p = NULL;
        float *h_feats = hark_malloc(sizeof(float) * (size_t)B * T * F);
        float *logp = hark_malloc(sizeof(float) * (size_t)B * chunk * V);
        int *tk_idx = hark_malloc(sizeof(int) * (size_t)B * chunk * 10);
        float *tk_val = hark_malloc(sizeof(float) * (size_t)B * chunk * 11);
        const float **fp = hark_malloc(sizeof(float *) * (size_t)B);
        int *slots = hark_malloc(sizeof(int) * (size_t)B), *frames = hark_malloc(sizeof(int) * B),
            *n_out = hark_malloc(sizeof(int) * (size_t)B);
        if (!h_feats || !logp || !tk_idx || !tk_val || !fp || !slots || !frames || !n_out ||
            conformer_gpu_chunks_create(gm, prec, B, window, cap, &p, &err)) {
            fprintf(stderr, "hark bench: chunk batch %d: %s\n", B,
                    err.msg[0] ? err.msg : "out of memory");
            rc = 1;
        }
        unsigned seed = (unsigned)B;
        for (size_t i = 0; !rc && i < (size_t)B * T * F; i++) {
            seed = seed * 1664525u + 1013904223u;
            h_feats[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
        }
        static const char *const ctc_name[3] = {"none", "host", "top10"};
        for (int with_ctc = 0; with_ctc < 3 && !rc; with_ctc++) {
            conformer_ctc_topk_t tk = {10, cfg->blank, tk_idx, tk_val,
                                       tk_val + (size_t)B * chunk * 10};
            double t_all = 0, t_start = clock_now_s();
            long steps = 0;
            for (int run = -1; !rc; run++) { /* run -1: warm-up (graph recordings) */
                for (int i = 0; i < B; i++) {
                    slots[i] = i;
                    conformer_gpu_chunks_reset(p, i, -1);
                }
                double t0 = clock_now_s();
                int n = 0;
                for (int cur = 0; cur <= T - ctx && !rc; cur += stride, n++) {
                    for (int i = 0; i < B; i++) {
                        fp[i] = h_feats + ((size_t)i * T + cur) * F;
                        frames[i] = T - cur < window ? T - cur : window;
                    }
                    rc = with_ctc == 2 ? conformer_gpu_forward_chunks_topk(
                                             p, slots, NULL, NULL, &tk, n_out, fp, frames, B, &err)
                                       : conformer_gpu_forward_chunks(p, slots, NULL, NULL,
                                                                      with_ctc ? logp : NULL, n_out,
                                                                      fp, frames, B, &err);
                }
                if (rc)
                    fprintf(stderr, "hark bench: chunk batch %d: %s\n", B, err.msg);
                if (run < 0)
                    continue;
                t_all += clock_now_s() - t0;
                steps += n;
                if (clock_now_s() - t_start > min_time && run >= 1)
                    break;
            }
            if (rc)
                break;
            double ms = t_all / (double)steps * 1e3;
            printf(
                "{\"impl\": \"hark chunks\", \"device\": \"%s\", \"mode\": \"%s\", \"batch\": %d, "
                "\"ctc\": \"%s\", \"chunk_ms_audio\": 640, \"left_chunks\": -1, "
                "\"chunks_per_stream\": %ld, \"ms_per_step\": %.3f, "
                "\"ms_per_chunk_per_stream\": %.4f, \"streams_real_time\": %d, "
                "\"pool_mb\": %.0f}\n",
                prop.name, wenet_precision_name(wp), B, ctc_name[with_ctc], (long)per_stream, ms,
                ms / B, (int)(B * 640.0 / ms), (double)conformer_gpu_chunks_bytes(p) / 1048576.0);
            fflush(stdout);
        }
        conformer_gpu_chunks_destroy(p);
        hark_free(h_feats);
        hark_free(logp);
        hark_free(tk_idx);
        hark_free(tk_val);
        hark_free(fp);
        hark_free(slots);
        hark_free(frames);
        hark_free(n_out);
    }
    conformer_gpu_model_destroy(gm);
    return rc;
}
#endif

/* Multiply-accumulates ×2 of one utterance of `frames` fbank frames through the encoder and the
 * CTC projection (softmax, norms and elementwise work not counted): the figure TFLOP/s uses. */
double bench_conformer_flops(const wenet_config_t *c, int frames)
{
    double D = c->d_model, F = c->ffn_dim, K = c->cnn_kernel, V = c->vocab_size;
    int t = frames, f = c->input_dim, layers = c->subsample == SUBSAMPLE_CONV2D ? 2 : 3;
    double mac = 0, cin = 1;
    for (int i = 0; i < layers; i++) { /* 3x3 stride 2 convs (conv2d6's second is 5x5 stride 3) */
        int k = (c->subsample == SUBSAMPLE_CONV2D6 && i == 1) ? 5 : 3, s = k == 5 ? 3 : 2;
        t = (t - k) / s + 1;
        f = (f - k) / s + 1;
        mac += (double)t * f * D * cin * k * k;
        cin = D;
    }
    double T = t;
    mac += T * (D * f) * D;           /* subsampling linear */
    double per_block = 2 * T * D * F; /* FFN */
    if (c->macaron)
        per_block += 2 * T * D * F;
    per_block += 4 * T * D * D + (c->pos == POS_REL ? T * D * D : 0); /* q, k, v, out (+ pos) */
    per_block += (c->pos == POS_REL ? 2 : 1) * T * T * D + T * T * D; /* scores (+pos), A·V */
    if (c->use_cnn_module)
        per_block += T * D * 2 * D + T * D * K + T * D * D;
    mac += c->n_blocks * per_block + T * D * V; /* + CTC projection */
    return 2 * mac;
}

static void bench_usage(FILE *f)
{
    fprintf(f,
            "usage: hark bench --model DIR | --synthetic conformer-librispeech [--batch 1,8,64]\n"
            "                  [--seconds 10] [--compare-pytorch]\n"
            "                  [--device cpu|cuda:N] [--precision fp32|fp16|bf16] [--threads N]\n"
            "                  [--min-time S] [--profile] [--chunk]\n"
            "                  [--pipeline [--wav FILE] [--pageable] [--method M] [--beam N]\n"
            "                   [--cpu-search] [--cpu-decoder] [--upload-chunks N]\n"
            "                   [--workers N [--turns]]]\n"
            "--pipeline times the whole recognizer instead (PCM in -> text out: features,\n"
            "encoder, CTC, search) on copies of FILE (or noise) cut to --seconds;\n"
            "on a GPU the samples are page-locked as the server's request bodies are\n"
            "(--pageable: ordinary memory, staged by the worker). --method\n"
            "ctc_greedy_search (default) | ctc_prefix_beam_search | attention_rescoring,\n"
            "--beam its beam (10); --cpu-search runs the prefix beam search on the CPU\n"
            "(the whole log-prob matrix downloaded) instead of the GPU; --cpu-decoder\n"
            "scores attention_rescoring's candidates with the CPU decoder; --upload-chunks\n"
            "splits a batch's upload into N chunks, each chunk's features overlapping the next\n"
            "chunk's copy (default 4; 1: upload everything, then the features).\n"
            "--workers N (2..8) runs N workers at once, each batch size in its own thread\n"
            "and stream, and prints the utterances all of them finish per second; --turns\n"
            "makes them take turns on the GPU (config.pbtxt's gpu_turns).\n"
            "--profile (GPU) adds a line per batch size with the time of each stage: of the\n"
            "encoder's (CUDA events, graphs off), or with --pipeline of the recognizer's\n"
            "(upload, features, encoder, CTC, download on the GPU; issuing, waiting and\n"
            "decoding on the host).\n"
            "--chunk (GPU) times the streaming step instead: B streams of --seconds stepped\n"
            "together one 640 ms chunk at a time with all earlier chunks as context, the\n"
            "encoder alone, with the CTC log-probs copied to the host, and with only each\n"
            "frame's top 10 copied; one JSON line each (ms per step, streams kept in real time).\n"
            "Times encoder + CTC log-softmax + argmax on random features (10 s = 998 frames)\n"
            "and prints one JSON line per batch size.\n");
}

const char *const wenet_synthetic_models[] = {"conformer-librispeech", NULL};

/* --synthetic conformer-librispeech: the full-size LibriSpeech U2++ encoder + CTC with generated
 * weights (src/model/synth_weights.h), for runs without a checkpoint. */
static int synth_config(const char *name, wenet_config_t *c, hark_err_t *err)
{
    if (strcmp(name, "conformer-librispeech") != 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "--synthetic %s: the known configuration is conformer-librispeech", name);
    memset(c, 0, sizeof *c);
    c->num_mel_bins = c->input_dim = 80;
    c->sample_rate = 16000;
    c->frame_length_ms = 25;
    c->frame_shift_ms = 10;
    c->d_model = 256;
    c->n_heads = 4;
    c->ffn_dim = 2048;
    c->n_blocks = 12;
    c->subsample = SUBSAMPLE_CONV2D;
    c->pos = POS_REL;
    c->macaron = 1;
    c->use_cnn_module = 1;
    c->cnn_kernel = 15;
    c->causal = 1;
    c->cnn_norm = CNN_NORM_LAYER;
    c->activation = ACT_SWISH;
    c->normalize_before = 1;
    c->max_len = 5000;
    c->use_dynamic_chunk = 1;
    c->decoder = DECODER_NONE;
    c->vocab_size = 5002;
    c->sos = c->eos = 5001;
    return HARK_OK;
}

/* --compare-pytorch: WeNet's own encoder with the same weights (bench/wenet_peer.py reads the
 * hark model directory), same batches, same machine; prints its lines and hark/PyTorch ratios.
 * Returns 0, or -1 when no PyTorch figure came back (the comparison asked for was not made). */
static int compare_pytorch(const char *model_dir, int gpu, wenet_precision_t wp,
                           const char *batches, double seconds, int threads, double *hark_ms,
                           int *hark_b, int nh)
{
    const char *py = getenv("HARK_PYTHON") ? getenv("HARK_PYTHON") : "python3";
    const char *script = getenv("HARK_PEER") ? getenv("HARK_PEER") : "bench/wenet_peer.py";
    const char *wenet = getenv("HARK_WENET") ? getenv("HARK_WENET") : ".ext";
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s %s time --hark-model '%s' --wenet '%s' --shims '%s/shims' --device %s --modes %s "
             "--batches %s --seconds %g --threads %d 2>/dev/null",
             py, script, model_dir, wenet, wenet, gpu ? "cuda" : "cpu",
             !gpu               ? "fp32"
             : wp == WENET_FP16 ? "fp16,compile"
             : wp == WENET_BF16 ? "bf16,compile-bf16"
                                : "fp32",
             batches, seconds, threads);
    FILE *f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "hark bench: cannot run %s\n", script);
        return -1;
    }
    char line[4096];
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '{')
            continue;
        fputs(line, stdout);
        const char *pb = strstr(line, "\"batch\": "), *pm = strstr(line, "\"ms\": "),
                   *pmode = strstr(line, "\"mode\": \"");
        if (!pb || !pm || !pmode)
            continue;
        got++;
        int B = atoi(pb + 9);
        double ms = atof(pm + 6);
        char mode[32] = "";
        sscanf(pmode + 9, "%31[^\"]", mode);
        for (int i = 0; i < nh; i++)
            if (hark_b[i] == B && hark_ms[i] > 0)
                printf("ratio: hark %s is %.2fx PyTorch %s at batch %d (%.3f ms vs %.3f ms)\n",
                       wenet_precision_name(wp), ms / hark_ms[i], mode, B, hark_ms[i], ms);
    }
    int st = pclose(f);
    if (got)
        return 0;
    fprintf(stderr,
            "hark bench: --compare-pytorch: no PyTorch results (%s exited with %d); it needs %s "
            "with torch (Debian's /usr/bin/python3: tools/install-deps.sh --dev) and WeNet's "
            "sources in %s (bench/conformer.sh says how to fill .ext/)\n",
            script, WIFEXITED(st) ? WEXITSTATUS(st) : -1, py, wenet);
    return -1;
}

/* --pipeline: the full recognizer path, PCM in -> text out (features, encoder, CTC, greedy
 * search, detokenization), `B` copies of one utterance per batch, on the CPU or a GPU. */
typedef struct {
    wenet_method_t method;
    int beam, cpu_search, cpu_decoder, pageable, profile, upload_chunks;
    int workers; /* --workers: that many workers side by side, each in its own thread */
    int turns;   /* --turns: those workers take turns on the GPU (wenet_worker_set_turns) */
} bench_search_t;

/* --workers N: N workers (each its own CUDA stream) recognise batches of the same size at once,
 * each from its own thread, for min_time; the figure is the utterances all of them finished per
 * second. It tells whether two batches side by side on one GPU reach the rate of one batch twice
 * their size (what two server instances fed cohorts of ~32 can reach). */
typedef struct {
    wenet_worker_t *w;
    const wenet_decode_opts_t *o;
    const float *const *p;
    const size_t *len;
    int B;
    double until;   /* clock_now_s() when to stop */
    long batches;   /* out */
    hark_err_t err; /* out */
    int rc;         /* out */
} bench_conc_t;

static void *bench_conc_run(void *arg)
{
    bench_conc_t *c = arg;
    wenet_result_t *res = hark_malloc(sizeof(wenet_result_t) * (size_t)c->B);
    if (!res) {
        c->rc = 1;
        snprintf(c->err.msg, sizeof c->err.msg, "out of memory");
        return NULL;
    }
    while (clock_now_s() < c->until) {
        if ((c->rc = wenet_recognize(c->w, c->o, c->p, c->len, c->B, res, &c->err)))
            break;
        for (int i = 0; i < c->B; i++)
            wenet_result_free(&res[i]);
        c->batches++;
    }
    hark_free(res);
    return NULL;
}

/* the concurrent measurement for one batch size; returns 0 and prints one JSON line */
static int bench_concurrent(const wenet_asr_t *asr, const wenet_decode_opts_t *o,
                            const float *const *p, const size_t *len, int B, double seconds,
                            double min_time, int nw, int turns, const char *mode)
{
    enum { MAXW = 8 };
    hark_err_t err = {0};
    wenet_worker_t *w[MAXW] = {0};
    bench_conc_t c[MAXW];
    pthread_t th[MAXW];
    int rc = 0, started = 0;
    for (int i = 0; i < nw && !rc; i++)
        if (wenet_worker_create(asr, B, seconds + 1, &w[i], &err)) {
            fprintf(stderr, "hark bench: worker %d, batch %d: %s\n", i, B, err.msg);
            rc = 1;
        } else {
            wenet_worker_set_turns(w[i], turns);
        }
    for (int pass = 0; pass < 2 && !rc; pass++) { /* a warm-up second, then the timed run */
        double t0 = clock_now_s(), span = pass ? min_time : 1.0;
        for (int i = 0; i < nw; i++) {
            c[i] =
                (bench_conc_t){.w = w[i], .o = o, .p = p, .len = len, .B = B, .until = t0 + span};
            if (pthread_create(&th[i], NULL, bench_conc_run, &c[i]))
                break;
            started = i + 1;
        }
        long total = 0;
        for (int i = 0; i < started; i++) {
            pthread_join(th[i], NULL);
            total += c[i].batches;
            if (c[i].rc && !rc) {
                fprintf(stderr, "hark bench: %s\n", c[i].err.msg);
                rc = 1;
            }
        }
        double dt = clock_now_s() - t0;
        if (started < nw && !rc) {
            fprintf(stderr, "hark bench: could not start %d threads\n", nw);
            rc = 1;
        }
        if (pass && !rc)
            printf("{\"impl\": \"hark\", \"path\": \"pcm->text\", \"mode\": \"%s\", "
                   "\"workers\": %d, \"turns\": %s, \"batch\": %d, \"seconds\": %.1f, \"batches\": "
                   "%ld, "
                   "\"utt_per_sec\": %.1f, \"rtfx\": %.1f}\n",
                   mode, nw, turns ? "true" : "false", B, seconds, total, total * B / dt,
                   total * B * seconds / dt);
        started = 0;
    }
    fflush(stdout);
    for (int i = 0; i < nw; i++)
        wenet_worker_destroy(w[i]);
    return rc;
}

/* --pipeline --profile: REPS more batches with the worker's stage profile, one JSON line of ms
 * per batch for each stage */
static void print_pipeline_profile(wenet_worker_t *w, const wenet_decode_opts_t *o,
                                   const float *const *p, const size_t *len, wenet_result_t *res,
                                   int B, const char *mode)
{
    enum { REPS = 20 };
    hark_err_t err = {0};
    double ms[WENET_PROF_STAGES];
    int calls = 0, rc = wenet_worker_profile(w, 1, &err);
    for (int i = 0; i < REPS && !rc; i++) {
        rc = wenet_recognize(w, o, p, len, B, res, &err);
        for (int b = 0; b < B && !rc; b++)
            wenet_result_free(&res[b]);
    }
    wenet_worker_profile_read(w, ms, &calls);
    wenet_worker_profile(w, 0, &err);
    if (rc || !calls) {
        fprintf(stderr, "hark bench: pipeline profile: %s\n", rc ? err.msg : "no GPU batches");
        return;
    }
    printf("{\"impl\": \"hark\", \"path\": \"pcm->text\", \"mode\": \"%s\", \"method\": "
           "\"%s\", \"batch\": %d, \"profile_ms\": {",
           mode, wenet_method_name(o->method), B);
    for (int i = 0; i < WENET_PROF_STAGES; i++)
        printf("%s\"%s\": %.3f", i ? ", " : "", wenet_prof_stage_name(i), ms[i] / calls);
    printf("}}\n");
    fflush(stdout);
}

static int bench_pipeline(const char *model_dir, int device, wenet_precision_t wp, const char *wav,
                          const char *batches, double seconds, double min_time, int threads,
                          const bench_search_t *bs)
{
    hark_err_t err = {0};
    wenet_load_opts_t lo = {.device = device, .precision = wp};
    wenet_asr_t *asr;
    if (wenet_asr_load_opts(model_dir, &lo, &asr, &err)) {
        fprintf(stderr, "hark bench: %s\n", err.msg);
        return 1;
    }
    int rate = wenet_asr_sample_rate(asr);
    size_t n = (size_t)(seconds * rate);
    /* on a GPU the samples sit in page-locked memory, as `hark serve` receives request bodies
     * (copied to the device by DMA; --pageable: through the worker's staging buffer instead) */
    /* (the pool rounds a buffer up to a power of two: cap leaves room for that and the header) */
    pinned_pool_t *pool =
        device >= 0 && !bs->pageable ? pinned_pool_create(2 * sizeof(float) * n + 65536) : NULL;
    float *pcm = pool ? pinned_alloc(pool, sizeof(float) * n) : hark_malloc(sizeof(float) * n);
    pinned_stats_t pst = {0};
    if (pool)
        pinned_pool_stats(pool, &pst);
    const char *input = pst.pinned_bytes ? "page-locked" : "pageable";
    if (pool && !pst.pinned_bytes)
        fprintf(stderr, "hark bench: could not page-lock the input; timing it from ordinary "
                        "memory\n");
    if (!pcm) {
        fprintf(stderr, "hark bench: out of memory\n");
        pinned_pool_destroy(pool);
        wenet_asr_destroy(asr);
        return 1;
    }
    audio_t au = {0};
    audio_opts_t ao = {.target_rate = rate};
    int have = wav && audio_decode_file(wav, &ao, &au, &err) == HARK_OK && au.n > 0;
    unsigned seed = 7;
    for (size_t i = 0; i < n; i++) { /* the file, repeated to `seconds`, or noise */
        seed = seed * 1664525u + 1013904223u;
        pcm[i] =
            have ? au.samples[i % au.n] : 0.1f * ((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
    }
    audio_free(&au);
    int rc = 0;
    for (const char *b = batches; *b;) {
        int B = next_batch(&b);
        if (B < 1 || B > 512)
            continue;
        wenet_worker_t *w = NULL;
        const float **p = hark_malloc(sizeof(float *) * (size_t)B);
        size_t *len = hark_malloc(sizeof(size_t) * (size_t)B);
        wenet_result_t *res = hark_malloc(sizeof(wenet_result_t) * (size_t)B);
        double *times = hark_malloc(sizeof(double) * 1000);
        if (!p || !len || !res || !times || wenet_worker_create(asr, B, seconds + 1, &w, &err) ||
            (bs->upload_chunks > 0 &&
             wenet_worker_set_upload_chunks(w, bs->upload_chunks, &err) != HARK_OK)) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B,
                    err.msg[0] ? err.msg : "out of memory");
            rc = 1;
        } else {
            for (int i = 0; i < B; i++) {
                p[i] = pcm;
                len[i] = n;
            }
            wenet_decode_opts_t o = wenet_default_opts(asr);
            o.method = bs->method;
            o.beam_size = bs->beam;
            o.cpu_search = bs->cpu_search;
            o.cpu_decoder = bs->cpu_decoder;
            o.n_threads = threads;
            if (bs->workers > 1) {
                rc = bench_concurrent(asr, &o, p, len, B, seconds, min_time, bs->workers, bs->turns,
                                      wenet_precision_name(wp));
                goto next_batch;
            }
            int k = 0;
            double t_start = 0;
            for (int it = -2; k < 1000; it++) {
                double t0 = clock_now_s();
                if (wenet_recognize(w, &o, p, len, B, res, &err)) {
                    fprintf(stderr, "hark bench: %s\n", err.msg);
                    rc = 1;
                    break;
                }
                for (int i = 0; i < B; i++)
                    wenet_result_free(&res[i]);
                if (it < 0) {
                    t_start = clock_now_s();
                    continue;
                }
                times[k++] = clock_now_s() - t0;
                if (clock_now_s() - t_start > min_time && k >= 5)
                    break;
            }
            if (!rc) {
                qsort(times, (size_t)k, sizeof *times, cmp_double);
                double med = times[k / 2];
                int cpu_srch = device < 0 || bs->cpu_search || bs->beam > CTC_GPU_MAX_BEAM;
                const char *where = o.method == DECODE_CTC_GREEDY ? ""
                                    : cpu_srch                    ? ", \"search\": \"cpu\""
                                                                  : ", \"search\": \"gpu\"";
                const char *dec = o.method != DECODE_ATTENTION_RESCORING ? ""
                                  : cpu_srch || bs->cpu_decoder          ? ", \"decoder\": \"cpu\""
                                                                         : ", \"decoder\": \"gpu\"";
                printf(
                    "{\"impl\": \"hark\", \"path\": \"pcm->text\", \"device\": \"%s\", "
                    "\"gpu_path\": \"%s\", \"mode\": \"%s\", \"input\": \"%s\", "
                    "\"method\": \"%s\"%s%s, \"beam\": %d, \"batch\": %d, \"seconds\": %.1f, "
                    "\"ms\": %.3f, \"rtfx\": %.1f, \"utt_per_sec\": %.1f, \"upload_chunks\": %d, "
                    "\"runs\": %d}\n",
                    device < 0 ? "cpu" : "cuda",
                    device < 0 ? "cpu" : gpu_path_name(gpu_device_path_quiet(device, NULL)),
                    wenet_precision_name(wp), input, wenet_method_name(o.method), where, dec,
                    o.beam_size, B, seconds, med * 1e3, B * seconds / med, B / med,
                    bs->upload_chunks > 0 ? bs->upload_chunks : WENET_UPLOAD_CHUNKS, k);
                fflush(stdout);
                if (bs->profile)
                    print_pipeline_profile(w, &o, p, len, res, B, wenet_precision_name(wp));
            }
        }
    next_batch:
        wenet_worker_destroy(w);
        hark_free(p);
        hark_free(len);
        hark_free(res);
        hark_free(times);
    }
    if (pool)
        pinned_free(pool, pcm);
    else
        hark_free(pcm);
    pinned_pool_destroy(pool);
    wenet_asr_destroy(asr);
    return rc;
}

int wenet_bench_main(int argc, char **argv)
{
    const char *model_dir = NULL, *batches = "1,8,64", *device = "cpu", *precision = "fp32";
    const char *wav = NULL, *synthetic = NULL;
    int pipeline = 0, compare = 0, profile = 0, chunk = 0;
    bench_search_t bs = {.method = DECODE_CTC_GREEDY, .beam = 10};
    double hark_ms[16];
    int hark_b[16], nh = 0;
    double seconds = 10, min_time = 2.0;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        int v = i + 1 < argc;
        if (!strcmp(argv[i], "--model") && v)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && v)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--device") && v)
            device = argv[++i];
        else if (!strcmp(argv[i], "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(argv[i], "--threads") && v)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pipeline"))
            pipeline = 1;
        else if (!strcmp(argv[i], "--turns"))
            bs.turns = 1;
        else if (!strcmp(argv[i], "--workers") && v)
            bs.workers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pageable"))
            bs.pageable = 1;
        else if (!strcmp(argv[i], "--cpu-search"))
            bs.cpu_search = 1;
        else if (!strcmp(argv[i], "--cpu-decoder"))
            bs.cpu_decoder = 1;
        else if (!strcmp(argv[i], "--upload-chunks") && v)
            bs.upload_chunks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--beam") && v)
            bs.beam = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--method") && v) {
            if (wenet_parse_method(argv[++i], &bs.method)) {
                fprintf(stderr, "hark bench: unknown --method '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--compare-pytorch"))
            compare = 1;
        else if (!strcmp(argv[i], "--profile"))
            profile = 1;
        else if (!strcmp(argv[i], "--chunk"))
            chunk = 1;
        else if (!strcmp(argv[i], "--synthetic") && v)
            synthetic = argv[++i];
        else if (!strcmp(argv[i], "--wav") && v)
            wav = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && v)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "hark bench: unknown or incomplete option '%s'\n", argv[i]);
            bench_usage(stderr);
            return 2;
        }
    }
    if ((!model_dir && !synthetic) || (model_dir && synthetic) || seconds <= 0 || bs.workers < 0 ||
        bs.workers > 8 || (bs.workers > 1 && (!pipeline || profile)) ||
        (synthetic && (pipeline || compare)) || (profile && strncmp(device, "cuda", 4)) ||
        (chunk && (strncmp(device, "cuda", 4) || pipeline || compare || profile))) {
        if (profile && strncmp(device, "cuda", 4))
            fprintf(stderr, "hark bench: --profile times the GPU stages (--device cuda:N)\n");
        if (chunk)
            fprintf(stderr, "hark bench: --chunk times the GPU streaming step (--device cuda:N; "
                            "no --pipeline, --compare-pytorch or --profile)\n");
        if (synthetic && (pipeline || compare))
            fprintf(stderr, "hark bench: --pipeline and --compare-pytorch need --model (the same "
                            "weights on both sides)\n");
        bench_usage(stderr);
        return 2;
    }
    int gpu = !strncmp(device, "cuda", 4);
    wenet_precision_t wp = wenet_precision_parse(precision);
    if ((!gpu && strcmp(device, "cpu")) || !wp || (wp != WENET_FP32 && !gpu)) {
        fprintf(stderr, "hark bench: --device cpu|cuda:N, --precision fp32|fp16|bf16 (fp16, bf16: "
                        "GPU only)\n");
        return 2;
    }
#ifndef HARK_CUDA
    if (gpu) {
        fprintf(stderr, "hark bench: built without CUDA\n");
        return 2;
    }
#endif
    bs.profile = profile;
    if (pipeline)
        return bench_pipeline(model_dir, gpu ? (device[4] == ':' ? atoi(device + 5) : 0) : -1, wp,
                              wav, batches, seconds, min_time, threads, &bs);
    hark_err_t err = {0};
    wenet_config_t cfg;
    safetensors_t *st = NULL;
    conformer_model_t *m = NULL;
    synth_weights_t synth = {.seed = 20261121};
    conformer_tensor_fn get = st_get_f32;
    void *user = NULL;
    char path[4096];
    int rc = 1;
    if (synthetic) {
        if (synth_config(synthetic, &cfg, &err))
            goto fail;
        get = synth_weights_get;
        user = &synth;
    } else {
        if (wenet_config_load(model_dir, &cfg, &err))
            goto fail;
        family_version_path(model_dir, 0, "model.safetensors", path, sizeof path);
        if (st_open(path, &st, &err))
            goto fail;
        user = st;
    }
    int T = (int)(seconds * 100) - 2;
    double flops = bench_conformer_flops(&cfg, T);
#ifdef HARK_CUDA
    if (gpu && chunk) {
        rc = bench_chunks(&cfg, get, user, device[4] == ':' ? atoi(device + 5) : 0, wp, batches,
                          seconds, min_time);
        st_close(st);
        synth_weights_free(&synth);
        return rc;
    }
    if (gpu) {
        rc = bench_gpu(&cfg, get, user, device[4] == ':' ? atoi(device + 5) : 0, wp, profile,
                       hark_ms, hark_b, &nh, batches, seconds, min_time, flops);
        if (!rc && compare &&
            compare_pytorch(model_dir, 1, wp, batches, seconds, threads, hark_ms, hark_b, nh))
            rc = 1;
        st_close(st);
        synth_weights_free(&synth);
        return rc;
    }
#endif
    if (conformer_model_create(&cfg, get, user, &m, &err))
        goto fail;
    for (const char *b = batches; *b;) {
        int B = next_batch(&b);
        if (B < 1)
            continue;
        conformer_state_t *s = NULL;
        int te = conformer_out_len(m, T), V = cfg.vocab_size, D = cfg.d_model;
        float *feats = hark_malloc(sizeof(float) * (size_t)B * T * cfg.input_dim);
        float *enc = hark_malloc(sizeof(float) * (size_t)B * te * D);
        float *logp = hark_malloc(sizeof(float) * (size_t)B * te * V);
        int *lens = hark_malloc(sizeof(int) * (size_t)B),
            *elens = hark_malloc(sizeof(int) * (size_t)B);
        int *best = hark_malloc(sizeof(int) * (size_t)B * te);
        double *times = hark_malloc(sizeof(double) * 1000);
        if (!feats || !enc || !logp || !lens || !elens || !best || !times ||
            conformer_state_create(m, B, T, &s, &err)) {
            fprintf(stderr, "hark bench: batch %d: %s\n", B,
                    err.msg[0] ? err.msg : "out of memory");
        } else {
            unsigned seed = (unsigned)B;
            for (size_t i = 0; i < (size_t)B * T * cfg.input_dim; i++) {
                seed = seed * 1664525u + 1013904223u;
                feats[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
            }
            for (int i = 0; i < B; i++)
                lens[i] = T;
            conformer_opts_t o = conformer_default_opts();
            o.n_threads = threads;
            int n = 0, ok = 1;
            double t_start = clock_now_s();
            for (int it = -1; n < 1000; it++) {
                double t0 = clock_now_s();
                if (conformer_forward(s, &o, enc, elens, feats, lens, B, T, &err) ||
                    conformer_ctc_log_probs(m, &o, logp, enc, elens, B, te, &err)) {
                    ok = 0;
                    break;
                }
                for (size_t r = 0; r < (size_t)B * te; r++) { /* greedy argmax, as the peer */
                    const float *row = logp + r * V;
                    int bi = 0;
                    for (int k = 1; k < V; k++)
                        if (row[k] > row[bi])
                            bi = k;
                    best[r] = bi;
                }
                if (it < 0) { /* warm-up */
                    t_start = clock_now_s();
                    continue;
                }
                times[n++] = clock_now_s() - t0;
                if (clock_now_s() - t_start > min_time && n >= 3)
                    break;
            }
            if (!ok) {
                fprintf(stderr, "hark bench: %s\n", err.msg);
            } else {
                qsort(times, (size_t)n, sizeof *times, cmp_double);
                double med = times[n / 2];
                if (nh < 16) {
                    hark_ms[nh] = med * 1e3;
                    hark_b[nh++] = B;
                }
                struct rusage ru;
                getrusage(RUSAGE_SELF, &ru);
                printf(
                    "{\"impl\": \"hark\", \"device\": \"cpu\", \"mode\": \"fp32\", \"batch\": %d, "
                    "\"ms\": %.3f, \"rtfx\": %.1f, \"runs\": %d, \"peak_rss_mb\": %ld, "
                    "\"threads\": %d, \"gflop_per_utt\": %.2f, \"tflops\": %.4f}\n",
                    B, med * 1e3, B * seconds / med, n, ru.ru_maxrss / 1024, threads, flops * 1e-9,
                    flops * B / med * 1e-12);
                fflush(stdout);
            }
        }
        conformer_state_destroy(s);
        hark_free(feats);
        hark_free(enc);
        hark_free(logp);
        hark_free(lens);
        hark_free(elens);
        hark_free(best);
        hark_free(times);
    }
    rc = 0;
    if (compare && compare_pytorch(model_dir, 0, 0, batches, seconds, threads, hark_ms, hark_b, nh))
        rc = 1;
    goto done;
fail:
    fprintf(stderr, "hark bench: %s\n", err.msg);
done:
    conformer_model_destroy(m);
    st_close(st);
    synth_weights_free(&synth);
    return rc;
}
