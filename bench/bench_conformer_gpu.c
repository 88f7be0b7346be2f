/* bench_conformer_gpu.c — the full-size LibriSpeech U2++ Conformer encoder (12 blocks, d 256,
 * 4 heads, FFN 2048, kernel 15, conv2d, rel_pos, causal, vocab 5002; random weights) on the GPU:
 * encoder + CTC log-probs for batches of 10 s (1000 fbank frames), FP32 and FP16, stream launches
 * and CUDA-graph replays; median ms per batch (CUDA events), RTFx, device memory. The CPU encoder
 * (batch 1, all cores) runs in the same process as the baseline.  Usage: bench_conformer_gpu
 * [reps]. Not a test: nothing is asserted (correctness: tests/model/test_conformer_gpu.c). */
#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/conformer.h"
#include "model/conformer_gpu.h"

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#define T_FRAMES 1000 /* 10 s at 10 ms */
#define MAX_TENSORS 1024

/* deterministic random weights, one buffer per tensor name, kept until exit */
typedef struct {
    char *names[MAX_TENSORS];
    float *bufs[MAX_TENSORS];
    int n;
} bank_t;

static int bank_get(void *user, const char *name, int ndim, const int64_t *shape,
                    const float **data, hark_err_t *err)
{
    bank_t *bk = user;
    for (int i = 0; i < bk->n; i++)
        if (!strcmp(bk->names[i], name)) {
            *data = bk->bufs[i];
            return HARK_OK;
        }
    if (bk->n >= MAX_TENSORS)
        return err_set(err, HARK_ERR_NOMEM, "bank full");
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    float fan_in = ndim >= 2 ? (float)(n / (size_t)shape[0]) : 1.0f;
    float *p = hark_malloc(n * sizeof(float));
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "oom");
    unsigned s = 12345;
    for (const char *c = name; *c; c++)
        s = s * 31u + (unsigned char)*c;
    size_t len = strlen(name);
    int norm_w = strstr(name, "norm") && len > 7 && !strcmp(name + len - 7, ".weight");
    int var = strstr(name, "running_var") || strstr(name, "cmvn.istd");
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float r = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
        p[i] = var                                      ? 1.0f + 0.25f * r
               : norm_w                                 ? 1.0f + 0.1f * r
               : ndim >= 2 && !strstr(name, "pos_bias") ? r * 1.7f / sqrtf(fan_in)
                                                        : 0.1f * r;
    }
    bk->names[bk->n] = hark_strdup(name);
    bk->bufs[bk->n++] = p;
    *data = p;
    return HARK_OK;
}

static wenet_config_t u2pp_config(void)
{
    wenet_config_t c;
    memset(&c, 0, sizeof c);
    c.num_mel_bins = c.input_dim = 80;
    c.sample_rate = 16000;
    c.has_cmvn = 1;
    c.d_model = 256;
    c.n_heads = 4;
    c.ffn_dim = 2048;
    c.n_blocks = 12;
    c.subsample = SUBSAMPLE_CONV2D;
    c.pos = POS_REL;
    c.macaron = 1;
    c.use_cnn_module = 1;
    c.cnn_kernel = 15;
    c.causal = 1;
    c.cnn_norm = CNN_NORM_LAYER;
    c.activation = ACT_SWISH;
    c.normalize_before = 1;
    c.max_len = 5000;
    c.use_dynamic_chunk = 1;
    c.vocab_size = 5002;
    return c;
}

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

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define HK(x)                                                                                      \
    do {                                                                                           \
        if ((x) != HARK_OK) {                                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, err.msg);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    double ms, ms_graph;
    size_t state_bytes, used_bytes;
} result_t;

static result_t run_case(const conformer_gpu_model_t *m, int prec, int batch, int reps,
                         size_t free_before)
{
    hark_err_t err = {0};
    result_t r = {0};
    const wenet_config_t *c = conformer_gpu_config(m);
    conformer_gpu_state_t *s = NULL;
    HK(conformer_gpu_state_create(m, prec, batch, T_FRAMES, &s, &err));
    int t_out = conformer_gpu_out_len(m, T_FRAMES);
    size_t nf = (size_t)batch * T_FRAMES * c->input_dim;
    float *h = malloc(nf * sizeof(float)), *d_feats, *d_enc, *d_logp;
    unsigned seed = 7;
    for (size_t i = 0; i < nf; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = 12.0f + 4.0f * ((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
    }
    CK(cudaMalloc((void **)&d_feats, nf * sizeof(float)));
    CK(cudaMalloc((void **)&d_enc, (size_t)batch * t_out * c->d_model * sizeof(float)));
    CK(cudaMalloc((void **)&d_logp, (size_t)batch * t_out * c->vocab_size * sizeof(float)));
    CK(cudaMemcpy(d_feats, h, nf * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* the state's stream does not wait for the legacy stream */
    int lens[512], enc_lens[512];
    for (int b = 0; b < batch; b++)
        lens[b] = T_FRAMES;
    cudaStream_t st = (cudaStream_t)conformer_gpu_stream(s);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double *ms = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < 3; i++) { /* warm-up */
        HK(conformer_gpu_forward(s, NULL, d_enc, enc_lens, d_feats, lens, batch, T_FRAMES, &err));
        HK(conformer_gpu_ctc_log_probs(s, d_logp, d_enc, enc_lens, batch, t_out, &err));
    }
    HK(conformer_gpu_sync(s, &err));
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, st));
        HK(conformer_gpu_forward(s, NULL, d_enc, enc_lens, d_feats, lens, batch, T_FRAMES, &err));
        HK(conformer_gpu_ctc_log_probs(s, d_logp, d_enc, enc_lens, batch, t_out, &err));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float f;
        CK(cudaEventElapsedTime(&f, e0, e1));
        ms[i] = f;
    }
    r.ms = median(ms, reps);
    /* the same work captured once as a CUDA graph (possible because a forward neither allocates
     * nor synchronises), then replayed */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    HK(conformer_gpu_forward(s, NULL, d_enc, enc_lens, d_feats, lens, batch, T_FRAMES, &err));
    HK(conformer_gpu_ctc_log_probs(s, d_logp, d_enc, enc_lens, batch, t_out, &err));
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(exec, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float f;
        CK(cudaEventElapsedTime(&f, e0, e1));
        ms[i] = f;
    }
    r.ms_graph = median(ms, reps);
    size_t fr, tot;
    CK(cudaMemGetInfo(&fr, &tot));
    r.used_bytes = free_before - fr; /* model + state + this case's I/O buffers + graph */
    r.state_bytes = conformer_gpu_state_bytes(s);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(d_feats);
    cudaFree(d_enc);
    cudaFree(d_logp);
    conformer_gpu_state_destroy(s);
    free(ms);
    free(h);
    return r;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1)
        reps = 1;
    hark_err_t err = {0};
    struct cudaDeviceProp prop;
    CK(cudaFree(0));
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t free0, total;
    CK(cudaMemGetInfo(&free0, &total));
    wenet_config_t cfg = u2pp_config();
    static bank_t bank;
    conformer_gpu_model_t *gm = NULL;
    HK(conformer_gpu_model_create(&cfg, bank_get, &bank, CONFORMER_GPU_FP32 | CONFORMER_GPU_FP16,
                                  &gm, &err));
    printf("device: %s (%d SMs), model: 12 blocks d256 ffn2048 k15 vocab 5002, weights on GPU "
           "%.1f MiB (fp32 + fp16 copies), input %d frames (10 s)\n",
           prop.name, prop.multiProcessorCount, conformer_gpu_model_bytes(gm) / 1048576.0,
           T_FRAMES);

    /* CPU baseline: batch 1, all cores */
    conformer_model_t *cm = NULL;
    conformer_state_t *cs = NULL;
    HK(conformer_model_create(&cfg, bank_get, &bank, &cm, &err));
    HK(conformer_state_create(cm, 1, T_FRAMES, &cs, &err));
    int t_out = conformer_out_len(cm, T_FRAMES), el, lens1 = T_FRAMES;
    float *feats = malloc(sizeof(float) * T_FRAMES * 80),
          *enc = malloc(sizeof(float) * t_out * 256);
    float *logp = malloc(sizeof(float) * (size_t)t_out * 5002);
    for (int i = 0; i < T_FRAMES * 80; i++)
        feats[i] = 12.0f + 4.0f * sinf(0.37f * (float)i);
    double cpu_ms[3];
    for (int i = 0; i < 4; i++) {
        double t0 = clock_now_s();
        HK(conformer_forward(cs, NULL, enc, &el, feats, &lens1, 1, T_FRAMES, &err));
        HK(conformer_ctc_log_probs(cm, NULL, logp, enc, &el, 1, t_out, &err));
        if (i > 0)
            cpu_ms[i - 1] = (clock_now_s() - t0) * 1e3;
    }
    double cpu = median(cpu_ms, 3);
    printf("cpu baseline (conformer.c, batch 1, OpenBLAS all threads): %.1f ms, RTFx %.1f\n", cpu,
           10.0 / (cpu / 1e3));
    conformer_state_destroy(cs);
    conformer_model_destroy(cm);

    static const int batches[3] = {1, 8, 64};
    printf("\n%-5s %5s %10s %8s %10s %8s %9s %10s %12s\n", "prec", "batch", "ms/batch", "RTFx",
           "graph ms", "RTFx", "vs cpu", "state MiB", "GPU used MiB");
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 3; i++) {
            int prec = p ? CONFORMER_GPU_FP16 : CONFORMER_GPU_FP32, b = batches[i];
            result_t r = run_case(gm, prec, b, reps, free0);
            double audio = 10.0 * b;
            printf("%-5s %5d %10.2f %8.0f %10.2f %8.0f %8.1fx %10.1f %12.1f\n", p ? "fp16" : "fp32",
                   b, r.ms, audio / (r.ms / 1e3), r.ms_graph, audio / (r.ms_graph / 1e3),
                   (cpu * b) / r.ms_graph, r.state_bytes / 1048576.0, r.used_bytes / 1048576.0);
            fflush(stdout);
        }
    printf("(ms/batch: encoder + CTC log-probs, median of %d, CUDA events; RTFx = audio seconds / "
           "wall seconds; vs cpu = GPU throughput over the CPU batch-1 baseline; GPU used = device "
           "memory taken since start, model included)\n",
           reps);
    conformer_gpu_model_destroy(gm);
    free(feats), free(enc), free(logp);
    return 0;
}
#else
int main(void)
{
    printf("bench_conformer_gpu: built without CUDA\n");
    return 0;
}
#endif
