/* bench_hgemm.c — the FP16 GEMM of gemm_f16.cu (fused epilogues) against cuBLAS (FP16 operands,
 * FP32 accumulation, no epilogue) on the Conformer's GEMM shapes: rows = 249 encoder frames per
 * 10 s utterance x batch. Prints one line per shape: ms, TFLOP/s, ratio; then per batch the whole
 * feed-forward module (w1 + bias + swish, w2 + residual) as the fused kernel of ffn_f16.cu against
 * the two GEMMs of the AUTO policy, in the same run. Not a test (correctness:
 * tests/ops/test_ops_cuda.c). Usage: bench_hgemm [batch ...] (default 64 256);
 * bench_hgemm --ffn batch ... (the FFN module only; FFN_ACT=none|relu|swish picks the fused
 * kernel's activation, to see what it costs). The FFN operands are random. */
#include "hark.h"
#include "ops/ops_cuda.h"

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#define CK(x)                                                                                      \
    do {                                                                                           \
        if ((x) != 0) {                                                                            \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct {
    const char *name;
    int n, k, mode; /* rows come from the batch; conv: an implicit 3x3 stride-2 conv */
    int conv;
} shape_t;

static double time_ms(int (*fn)(void *), void *arg, cudaStream_t st)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++)
        CK(fn(arg));
    float best = 1e30f;
    for (int r = 0; r < 5; r++) {
        CK(cudaEventRecord(e0, st));
        for (int i = 0; i < 10; i++)
            CK(fn(arg));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        best = ms / 10 < best ? ms / 10 : best;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

typedef struct {
    cuda_epi_t e;
    const void *a, *w;
    void *c;
    int m, n, k, conv, batch, h, wd;
    ops_cuda_t *g;
    cudaStream_t st;
} job_t;

static int run_hark(void *p)
{
    job_t *j = p;
    if (j->conv)
        return cuda_hconv2d(&j->e, j->a, j->w, j->batch, 256, j->h, j->wd, 256, 3, 3, 2, j->g,
                            NULL);
    return cuda_hgemm(&j->e, j->a, j->k, j->w, j->m, j->n, j->k, j->g, NULL);
}

typedef struct {
    void *a, *w1, *w2, *h;
    float *x, *b1, *b2;
    int m;
    ops_cuda_t *g;
} ffn_job_t;

/* FFN_ACT=none|relu|swish (default swish): the fused kernel's activation, to see what it costs */
static cuda_act_t ffn_act(void)
{
    const char *s = getenv("FFN_ACT");
    return !s                   ? CUDA_ACT_SWISH
           : !strcmp(s, "none") ? CUDA_ACT_NONE
           : !strcmp(s, "relu") ? CUDA_ACT_RELU
                                : CUDA_ACT_SWISH;
}

static int run_ffn_fused(void *p)
{
    ffn_job_t *j = p;
    return cuda_ffn_f16(j->x, j->a, j->w1, j->b1, j->w2, j->b2, j->m, 256, 2048, ffn_act(), 0.5f,
                        NULL, j->g, NULL);
}

static int run_ffn_gemms(void *p)
{
    ffn_job_t *j = p;
    cuda_epi_t e;
    memset(&e, 0, sizeof e);
    e.mode = CUDA_EPI_F16;
    e.act = CUDA_ACT_SWISH;
    e.bias = j->b1;
    e.bias_h = j->b1; /* zeros either way */
    e.out = j->h;
    e.ldo = 2048;
    if (cuda_hgemm(&e, j->a, 256, j->w1, j->m, 2048, 256, j->g, NULL) != HARK_OK)
        return 1;
    e.mode = CUDA_EPI_RESID32;
    e.act = CUDA_ACT_NONE;
    e.bias = j->b2;
    e.bias_alpha = j->b2;
    e.bias_h = NULL;
    e.out = j->x;
    e.ldo = 256;
    e.alpha = 0.5f;
    e.beta = 1.0f;
    return cuda_hgemm(&e, j->h, 2048, j->w2, j->m, 256, 2048, j->g, NULL);
}

/* n uniform values in [-scale, scale) from a fixed seed into dst: float32, or (half) FP16 */
static void fill_uniform(void *dst, int half, size_t n, float scale, cudaStream_t st, unsigned seed)
{
    float *h = malloc(n * sizeof(float)), *d = NULL;
    if (!h) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    unsigned long long s = 0x9E3779B97F4A7C15ull * seed + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = scale * ((float)(s >> 40) / (float)(1 << 24) * 2.0f - 1.0f);
    }
    if (!half) {
        CK(cudaMemcpy(dst, h, n * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        CK(cudaMalloc((void **)&d, n * sizeof(float)));
        CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
        CK(cuda_cast(dst, OPS_F16, d, OPS_F32, n, st, NULL));
        CK(cudaStreamSynchronize(st));
        cudaFree(d);
    }
    free(h);
}

/* the FFN module both ways at rows m: "fused  ms TF/s | gemms ms TF/s | gemms/fused" */
static void bench_ffn(ops_cuda_t *g, cudaStream_t st, int batch, int m)
{
    ffn_job_t j = {0};
    j.m = m;
    j.g = g;
    CK(cudaMalloc(&j.a, (size_t)m * 256 * 2));
    CK(cudaMalloc(&j.w1, (size_t)2048 * 256 * 2));
    CK(cudaMalloc(&j.w2, (size_t)2048 * 256 * 2));
    CK(cudaMalloc(&j.h, (size_t)m * 2048 * 2));
    CK(cudaMalloc((void **)&j.x, (size_t)m * 256 * 4));
    CK(cudaMalloc((void **)&j.b1, 2048 * 4));
    CK(cudaMalloc((void **)&j.b2, 256 * 4));
    /* random operands (constant ones can run faster than real data): uniform, scaled as trained
     * layers are (inputs ~1, weights ~1 / sqrt(fan-in)) */
    fill_uniform(j.a, 1, (size_t)m * 256, 1.0f, st, 1);
    fill_uniform(j.w1, 1, (size_t)2048 * 256, 0.0625f, st, 2);
    fill_uniform(j.w2, 1, (size_t)2048 * 256, 0.022f, st, 3);
    fill_uniform(j.x, 0, (size_t)m * 256, 1.0f, st, 4);
    fill_uniform(j.b1, 0, 2048, 0.1f, st, 5);
    fill_uniform(j.b2, 0, 256, 0.1f, st, 6);
    double flop = 2.0 * 2.0 * m * 256 * 2048;
    ops_cuda_set_gemm_backend(g, OPS_GEMM_AUTO);
    double tg = time_ms(run_ffn_gemms, &j, st);
    double tf = cuda_ffn_f16_fits(g, 256, 2048) ? time_ms(run_ffn_fused, &j, st) : 0.0;
    printf("%-30s %6d %8d fused %8.3f ms %6.1f TF/s | two gemms %8.3f ms %6.1f TF/s | %5.2fx\n",
           "ffn module (fused vs gemms)", batch, m, tf, tf > 0 ? flop / tf * 1e-9 : 0.0, tg,
           flop / tg * 1e-9, tf > 0 ? tg / tf : 0.0);
    fflush(stdout);
    cudaFree(j.a), cudaFree(j.w1), cudaFree(j.w2), cudaFree(j.h), cudaFree(j.x), cudaFree(j.b1);
    cudaFree(j.b2);
}

static int run_cublas(void *p)
{
    job_t *j = p;
    return cuda_gemm(j->c, OPS_F16, j->a, j->w, OPS_F16, j->m, j->n, j->k, j->k, j->k, j->n, 1,
                     1.0f, 0.0f, 1, 0, 0, 0, j->g, NULL);
}

int main(int argc, char **argv)
{
    int batches[8] = {64, 256}, nb = 2;
    if (argc > 1 && !strcmp(argv[1], "--ffn")) { /* the FFN module only */
        cudaStream_t st;
        CK(cudaStreamCreate(&st));
        ops_cuda_t *g = NULL;
        CK(ops_cuda_create(st, &g, NULL));
        for (int i = 2; i < argc; i++)
            bench_ffn(g, st, atoi(argv[i]), 249 * atoi(argv[i]));
        ops_cuda_destroy(g);
        return 0;
    }
    if (argc > 1)
        for (nb = 0; nb < 8 && nb + 1 < argc; nb++)
            batches[nb] = atoi(argv[nb + 1]);
    static const shape_t shapes[] = {
        {"ffn w1 (bias+swish)", 2048, 256, CUDA_EPI_F16, 0},
        {"ffn w2 (residual)", 256, 2048, CUDA_EPI_RESID32, 0},
        {"qkv (bias)", 768, 256, CUDA_EPI_F16, 0},
        {"out / pw2 (residual)", 256, 256, CUDA_EPI_RESID32, 0},
        {"pw1 (bias; GLU in the conv)", 512, 256, CUDA_EPI_F16, 0},
        {"ctc (fp32 logits)", 5002, 256, CUDA_EPI_F32, 0},
        {"subsampling conv2 (implicit)", 256, 2304, CUDA_EPI_F16, 1},
    };
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    ops_cuda_t *g = NULL;
    CK(ops_cuda_create(st, &g, NULL));
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s\n%-30s %6s %8s %9s %9s %9s %9s %11s %7s %s\n", prop.name, "gemm", "batch", "rows",
           "mma ms", "mma TF/s", "wgmma", "auto TF/s", "cuBLAS TF/s", "auto/cuBLAS", "auto ran");
    for (int bi = 0; bi < nb; bi++) {
        int B = batches[bi], m = 249 * B;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const shape_t *sh = &shapes[s];
            job_t j;
            memset(&j, 0, sizeof j);
            j.n = sh->n;
            j.k = sh->k;
            j.m = m;
            j.conv = sh->conv;
            j.g = g;
            j.st = st;
            j.batch = B;
            j.h = 498; /* the first conv's output for 998 frames x 80 bins */
            j.wd = 39;
            if (sh->conv)
                j.m = B * 248 * 19;
            size_t na = sh->conv ? (size_t)B * 498 * 39 * 256 : (size_t)j.m * j.k;
            void *a, *w, *c, *bias;
            CK(cudaMalloc(&a, na * 2));
            CK(cudaMalloc(&w, (size_t)j.n * j.k * 2));
            CK(cudaMalloc(&c, (size_t)j.m * j.n * 4));
            CK(cudaMalloc(&bias, (size_t)j.n * 4));
            CK(cudaMemset(a, 0x3c, na * 2)); /* 1.0-ish halves: no NaN, no zeros */
            CK(cudaMemset(w, 0x21, (size_t)j.n * j.k * 2));
            CK(cudaMemset(c, 0, (size_t)j.m * j.n * 4));
            CK(cudaMemset(bias, 0, (size_t)j.n * 4));
            j.a = a;
            j.w = w;
            j.c = c;
            j.e.mode = (cuda_epi_mode_t)sh->mode;
            j.e.act = sh->conv ? CUDA_ACT_RELU : CUDA_ACT_SWISH;
            j.e.bias = bias;
            j.e.out = c;
            j.e.ldo = j.n;
            j.e.alpha = 0.5f;
            j.e.beta = 1.0f;
            j.e.bias_alpha = bias;
            j.e.bias_h = bias; /* zeros either way */
            double flop = 2.0 * j.m * j.n * j.k;
            ops_cuda_set_gemm_backend(g, OPS_GEMM_MMA);
            double th = time_ms(run_hark, &j, st);
            ops_cuda_set_gemm_backend(g, OPS_GEMM_WGMMA);
            double tw = time_ms(run_hark, &j, st);
            int wg = ops_cuda_last_gemm(g) == OPS_GEMM_WGMMA;
            ops_cuda_set_gemm_backend(g, OPS_GEMM_AUTO);
            double ta = time_ms(run_hark, &j, st);
            double tc = sh->conv ? 0 : time_ms(run_cublas, &j, st);
            static const char *const nm[4] = {"auto", "mma", "cublasLt", "wgmma"};
            printf("%-30s %6d %8d %9.3f %9.1f %9.1f %9.1f %11.1f %7.2f %s\n", sh->name, B, j.m, th,
                   flop / th * 1e-9, wg ? flop / tw * 1e-9 : 0.0, flop / ta * 1e-9,
                   tc > 0 ? flop / tc * 1e-9 : 0.0, tc > 0 ? tc / ta : 0.0,
                   nm[ops_cuda_last_gemm(g)]);
            fflush(stdout);
            cudaFree(a), cudaFree(w), cudaFree(c), cudaFree(bias);
        }
        bench_ffn(g, st, B, m);
    }
    ops_cuda_destroy(g);
    return 0;
}
#else
int main(void)
{
    fprintf(stderr, "bench_hgemm: built without CUDA\n");
    return 0;
}
#endif
