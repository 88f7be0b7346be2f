/* waveglow_gpu.c — WaveGlow and its denoiser on the GPU (waveglow_gpu.h); the CPU reference is
 * waveglow.c. Tests: tests/model/waveglow/test_waveglow_gpu.c
 *
 * Buffers of a worker, for B items padded to Fp frames (lp = Fp · stride / G WN rows each, rows =
 * B · lp), time-major with channels innermost:
 *   xp    the masked, zero-padded input of a conv (GEMM type): the mel (B, J-1 + Fp, nm_p) for the
 *         polyphase upsampler, then WN's h (B, lp + 2·pad_i, C) per layer
 *   acc   FP32: the upsampler's output (rows, nc), then each layer's in + cond (rows, 2C); the
 *         denoiser's frames (B, nf, N)
 *   cond  (rows, nc) the grouped conditioning with its bias (GEMM type), shared by every flow
 *   hs    FP32 (rows, 2C): WN's h in columns [0, C), the skip sum in [C, 2C); the denoiser's
 *         spectra
 *   acts  (rows, C) the gated activations (GEMM type)
 *   a     FP32 (rows, G): the audio state (waveglow_kernels.h), the output in sample order
 * Biases of res_skip are never added to the large tensors: h_i = hs + hb_i (Σ of the res biases of
 * layers before i, added by the next layer's masked input copy) and skip = hs + sb, folded into
 * the end conv's bias at load (end_b + end_w · sb).
 */
#include "model/waveglow/waveglow_gpu.h"

#include "model/waveglow/waveglow_impl.h"

double waveglow_macs(const waveglow_model_t *m, int n_frames)
{
    const waveglow_config_t *c = &m->cfg;
    double L = (double)n_frames * c->up_stride / c->n_group, C = c->wn_channels;
    double nc = (double)c->n_mels * c->n_group;
    double macs = (double)n_frames * c->up_stride * c->n_mels *
                  (double)((c->up_kernel + c->up_stride - 1) / c->up_stride) * c->n_mels;
    for (int k = 0; k < c->n_flows; k++) {
        double ch = waveglow_flow_channels(c, k);
        macs += L * C * ch / 2 + L * ch * C + L * ch * ch;
        for (int i = 0; i < c->wn_layers; i++)
            macs +=
                L * 2 * C * (c->wn_kernel * C + nc) + L * C * (i < c->wn_layers - 1 ? 2 * C : C);
    }
    return macs;
}

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "hark.h"
#include "model/waveglow/waveglow_kernels.h"
#include "ops/conv1d.h"

#include <cuda_runtime_api.h>
#include <cufft.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_SLOTS 16
#define MAX_FRAMES 100000
#define WHAT "waveglow (gpu)"

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, WHAT ": %s: %s", what, cudaGetErrorString(e));
}

static int fft_err(hark_err_t *err, cufftResult r, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, WHAT ": cuFFT %s: error %d", what, (int)r);
}

static size_t al(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

typedef struct {
    int ch;
    const void *w_in[WAVEGLOW_MAX_LAYERS];    /* (2C, K, C) */
    const void *cond_w[WAVEGLOW_MAX_LAYERS];  /* (2C, nc) */
    const void *rs_w[WAVEGLOW_MAX_LAYERS];    /* (2C or C, C) */
    const float *gate_b[WAVEGLOW_MAX_LAYERS]; /* (2C) in_b + cond_b */
    const float *hb[WAVEGLOW_MAX_LAYERS];     /* (C) res biases pending before layer i; [0] NULL */
    const float *start_w, *start_b;           /* (C, ch/2), (C) */
    const float *end_w, *end_b;               /* (ch, C), (ch) with the pending skip bias */
    const float *w_inv;                       /* (ch, ch) */
} gflow_t;

struct waveglow_gpu_model {
    const waveglow_model_t *m;
    int device;
    ops_dtype_t dt;
    int nm_p, J;      /* the mel's channels padded to 8; the polyphase upsampler's taps */
    int frame_mult;   /* 16-bit: frames padded so every dilation divides lp (the implicit GEMM) */
    const void *up_w; /* (stride · n_mels, J, nm_p), columns (r / G, mel, r mod G) */
    const float *up_b, *window, *bias_spec;
    gflow_t flow[WAVEGLOW_MAX_FLOWS];
    void *dmat, *dflt;
    size_t bytes;
};

const waveglow_model_t *waveglow_gpu_model_cpu(const waveglow_gpu_model_t *g)
{
    return g->m;
}

size_t waveglow_gpu_model_bytes(const waveglow_gpu_model_t *g)
{
    return g->bytes;
}

void waveglow_gpu_model_destroy(waveglow_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g);
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    size_t w_in[WAVEGLOW_MAX_LAYERS], cond_w[WAVEGLOW_MAX_LAYERS], rs_w[WAVEGLOW_MAX_LAYERS];
    size_t gate_b[WAVEGLOW_MAX_LAYERS], hb[WAVEGLOW_MAX_LAYERS];
    size_t start_w, start_b, end_w, end_b, w_inv;
} oflow_t;

typedef struct {
    waveglow_gpu_model_t *g;
    size_t up_w, up_b, window, bias_spec;
    oflow_t flow[WAVEGLOW_MAX_FLOWS];
} offs_t;

static float *flt_copy(weight_stage_t *s, size_t *off, const float *src, size_t n)
{
    *off = weight_stage_take(&s->n_flt, n);
    if (s->sizing)
        return NULL;
    if (src)
        memcpy(s->flt + *off, src, sizeof(float) * n);
    return s->flt + *off;
}

static void stage_flow(weight_stage_t *s, const waveglow_config_t *c, const flow_t *f, oflow_t *o)
{
    int C = c->wn_channels, K = c->wn_kernel, nc = c->n_mels * c->n_group, ch = f->ch;
    int half = ch / 2, nl = c->wn_layers;
    double hb[8192], sb[8192];
    HARK_ASSERT(C <= 8192);
    for (int i = 0; i < nl; i++) {
        int rsn = i < nl - 1 ? 2 * C : C;
        o->w_in[i] = weight_stage_take(&s->n_mat, (size_t)2 * C * K * C);
        o->cond_w[i] = weight_stage_take(&s->n_mat, (size_t)2 * C * nc);
        o->rs_w[i] = weight_stage_take(&s->n_mat, (size_t)rsn * C);
        float *gb = flt_copy(s, &o->gate_b[i], NULL, (size_t)2 * C);
        float *h = i ? flt_copy(s, &o->hb[i], NULL, (size_t)C) : NULL;
        if (s->sizing)
            continue;
        float *w = s->mat + o->w_in[i];
        for (int oc = 0; oc < 2 * C; oc++)
            for (int t = 0; t < K; t++)
                for (int q = 0; q < C; q++)
                    w[((size_t)oc * K + t) * C + q] = f->in_w[i][((size_t)t * 2 * C + oc) * C + q];
        memcpy(s->mat + o->cond_w[i], f->cond_w[i], sizeof(float) * (size_t)2 * C * nc);
        memcpy(s->mat + o->rs_w[i], f->rs_w[i], sizeof(float) * (size_t)rsn * C);
        for (int q = 0; q < 2 * C; q++)
            gb[q] = f->in_b[i][q] + f->cond_b[i][q];
        if (i == 0)
            for (int q = 0; q < C; q++)
                hb[q] = sb[q] = 0.0;
        if (h)
            for (int q = 0; q < C; q++)
                h[q] = (float)hb[q];
        for (int q = 0; q < C; q++) {
            if (i < nl - 1) {
                hb[q] += f->rs_b[i][q];
                sb[q] += f->rs_b[i][C + q];
            } else {
                sb[q] += f->rs_b[i][q];
            }
        }
    }
    flt_copy(s, &o->start_w, f->start_w, (size_t)C * half);
    flt_copy(s, &o->start_b, f->start_b, (size_t)C);
    flt_copy(s, &o->end_w, f->end_w, (size_t)ch * C);
    float *eb = flt_copy(s, &o->end_b, NULL, (size_t)ch);
    flt_copy(s, &o->w_inv, f->w_inv, (size_t)ch * ch);
    if (s->sizing)
        return;
    for (int q = 0; q < ch; q++) {
        double v = f->end_b[q];
        for (int j = 0; j < C; j++)
            v += (double)f->end_w[(size_t)q * C + j] * sb[j];
        eb[q] = (float)v;
    }
}

static void stage_all(weight_stage_t *s, void *user)
{
    offs_t *o = user;
    waveglow_gpu_model_t *g = o->g;
    const waveglow_model_t *m = g->m;
    const waveglow_config_t *c = &m->cfg;
    int nm = c->n_mels, u = c->up_stride, G = c->n_group, J = g->J, nm_p = g->nm_p,
        K = c->up_kernel;
    size_t nw = (size_t)u * nm * J * nm_p;
    o->up_w = weight_stage_take(&s->n_mat, nw);
    if (!s->sizing) {
        float *w = s->mat + o->up_w;
        memset(w, 0, sizeof(float) * nw);
        for (int r = 0; r < u; r++)
            for (int oc = 0; oc < nm; oc++) {
                size_t col = (size_t)(r / G) * nm * G + (size_t)oc * G + (size_t)(r % G);
                for (int jj = 0; jj < J; jj++) {
                    int tap = r + (J - 1 - jj) * u;
                    if (tap >= K)
                        continue;
                    for (int i = 0; i < nm; i++)
                        w[(col * J + jj) * nm_p + i] = m->up_w[((size_t)tap * nm + oc) * nm + i];
                }
            }
    }
    flt_copy(s, &o->up_b, m->up_b, (size_t)nm);
    flt_copy(s, &o->window, m->window, (size_t)c->filter_length);
    flt_copy(s, &o->bias_spec, m->bias_spec, (size_t)c->filter_length / 2 + 1);
    for (int k = 0; k < c->n_flows; k++)
        stage_flow(s, c, &m->flow[k], &o->flow[k]);
}

int waveglow_gpu_model_create(const waveglow_model_t *m, int device, ops_dtype_t dt,
                              waveglow_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": dtype %d", (int)dt);
    const waveglow_config_t *c = &m->cfg;
    if (c->n_group > 256)
        return err_set(err, HARK_ERR_UNSUPPORTED, WHAT ": n_group %d (at most 256)", c->n_group);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    waveglow_gpu_model_t *g = hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    g->m = m;
    g->device = device;
    g->dt = dt;
    g->nm_p = (c->n_mels + 7) & ~7;
    g->J = conv1d_transpose_taps(c->up_kernel, c->up_stride);
    g->frame_mult = 1;
    if (dt != OPS_F32 && c->wn_channels % 8 == 0) {
        int dmax = 1 << (c->wn_layers - 1), s = c->up_stride / c->n_group, a = s, b = dmax;
        while (b) { /* gcd */
            int r = a % b;
            a = b;
            b = r;
        }
        if (dmax / a <= 64)
            g->frame_mult = dmax / a;
    }
    offs_t *o = hark_calloc(1, sizeof *o);
    if (!o) {
        hark_free(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    o->g = g;
    int rc = weight_stage_upload(stage_all, o, dt, &g->dmat, &g->dflt, &g->bytes, NULL, WHAT, err);
    if (rc) {
        hark_free(o);
        waveglow_gpu_model_destroy(g);
        return rc;
    }
    size_t es = ops_dtype_size(dt);
    const char *mat = g->dmat;
    const float *flt = g->dflt;
    g->up_w = mat + o->up_w * es;
    g->up_b = flt + o->up_b;
    g->window = flt + o->window;
    g->bias_spec = flt + o->bias_spec;
    for (int k = 0; k < c->n_flows; k++) {
        gflow_t *f = &g->flow[k];
        const oflow_t *of = &o->flow[k];
        f->ch = m->flow[k].ch;
        for (int i = 0; i < c->wn_layers; i++) {
            f->w_in[i] = mat + of->w_in[i] * es;
            f->cond_w[i] = mat + of->cond_w[i] * es;
            f->rs_w[i] = mat + of->rs_w[i] * es;
            f->gate_b[i] = flt + of->gate_b[i];
            f->hb[i] = i ? flt + of->hb[i] : NULL;
        }
        f->start_w = flt + of->start_w;
        f->start_b = flt + of->start_b;
        f->end_w = flt + of->end_w;
        f->end_b = flt + of->end_b;
        f->w_inv = flt + of->w_inv;
    }
    hark_free(o);
    *out = g;
    return HARK_OK;
}

/* ---- the worker ----------------------------------------------------------------------------- */

struct waveglow_gpu_worker {
    const waveglow_gpu_model_t *g;
    const waveglow_config_t *c;
    ops_dtype_t dt;
    int max_batch, max_frames, fp_max, nf_max; /* nf_max: STFT frames per item */
    long long lp_max;
    cudaStream_t stream;
    ops_cuda_t *ops;
    cufftHandle fwd, inv;
    int have_fwd, have_inv;
    void *mem;
    size_t bytes;
    float *mel; /* (B, n_mels, fp_max) the host run's mel */
    void *xp, *cond, *acts;
    float *acc, *hs, *a, *wo, *zin;
    char *par;   /* device parameters: lens of WN rows, frames, samples (B ints each), seeds (B),
                    sigma, strength */
    char *h_par; /* pinned, as par */
    size_t par_bytes;
    float *h_mel, *h_z, *h_audio; /* pinned */
    float *h_tmp;                 /* host (G · lp_max): one noise draw */
    float strength;
    int graphs;
    graph_cache_t *gc;
};

static int *par_lens(char *p, int B, int which) /* 0: WN rows, 1: frames, 2: samples */
{
    return (int *)(void *)(p + (size_t)which * B * sizeof(int));
}

static uint64_t *par_seeds(char *p, int B)
{
    return (uint64_t *)(void *)(p + al((size_t)3 * B * sizeof(int)));
}

static float *par_f(char *p, int B, int which) /* 0: sigma, 1: strength */
{
    return (float *)(void *)((char *)par_seeds(p, B) + (size_t)B * sizeof(uint64_t)) + which;
}

void waveglow_gpu_worker_destroy(waveglow_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    graph_cache_destroy(w->gc);
    if (w->have_fwd)
        cufftDestroy(w->fwd);
    if (w->have_inv)
        cufftDestroy(w->inv);
    ops_cuda_destroy(w->ops);
    cudaFree(w->mem);
    cudaFreeHost(w->h_par);
    cudaFreeHost(w->h_mel);
    cudaFreeHost(w->h_z);
    cudaFreeHost(w->h_audio);
    hark_free(w->h_tmp);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

size_t waveglow_gpu_worker_bytes(const waveglow_gpu_worker_t *w)
{
    return w->bytes;
}

void waveglow_gpu_set_graphs(waveglow_gpu_worker_t *w, int on)
{
    if (!on)
        graph_cache_clear(w->gc);
    w->graphs = on != 0;
}

int waveglow_gpu_set_denoise(waveglow_gpu_worker_t *w, float strength, hark_err_t *err)
{
    if (!(strength >= 0.0f) || !isfinite(strength))
        return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": denoiser strength %g", strength);
    w->strength = strength;
    return HARK_OK;
}

void *waveglow_gpu_stream(const waveglow_gpu_worker_t *w)
{
    return w->stream;
}

static int fpad(const waveglow_gpu_model_t *g, int F)
{
    return (F + g->frame_mult - 1) / g->frame_mult * g->frame_mult;
}

static size_t mx(size_t a, size_t b)
{
    return a > b ? a : b;
}

int waveglow_gpu_worker_create(const waveglow_gpu_model_t *g, int max_batch, int max_frames,
                               waveglow_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const waveglow_config_t *c = &g->m->cfg;
    if (max_batch < 1 || max_batch > CUDA_MAX_LENS || max_frames < 1 || max_frames > MAX_FRAMES)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       WHAT ": max_batch %d (1..%d), max_frames %d (1..%d)", max_batch,
                       CUDA_MAX_LENS, max_frames, MAX_FRAMES);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    waveglow_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->c = c;
    w->dt = g->dt;
    w->max_batch = max_batch;
    w->max_frames = max_frames;
    w->fp_max = fpad(g, max_frames);
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    int G = c->n_group, C = c->wn_channels, nc = c->n_mels * G, N = c->filter_length;
    int pad_max = (1 << (c->wn_layers - 1)) * (c->wn_kernel - 1) / 2;
    w->lp_max = (long long)w->fp_max * c->up_stride / G;
    size_t B = (size_t)max_batch, es = ops_dtype_size(g->dt), lp = (size_t)w->lp_max;
    size_t rows = B * lp, samples = (size_t)w->fp_max * c->up_stride;
    w->nf_max = (int)(samples / (size_t)c->hop) + 1;
    size_t n_fr = B * w->nf_max * (size_t)N, n_spec = B * w->nf_max * (size_t)(N / 2 + 1) * 2;
    size_t n_mel = B * c->n_mels * (size_t)w->fp_max;
    size_t n_xp = mx(B * (g->J - 1 + (size_t)w->fp_max) * g->nm_p, B * (lp + 2 * pad_max) * C);
    size_t n_acc = mx(mx(rows * 2 * C, rows * nc), n_fr), n_hs = mx(rows * 2 * C, n_spec);
    w->par_bytes = al(3 * B * sizeof(int)) + B * sizeof(uint64_t) + 2 * sizeof(float);
    size_t total = al(n_mel * 4) + al(n_xp * es) + al(n_acc * 4) + al(rows * nc * es) +
                   al(n_hs * 4) + al(rows * C * es) + 3 * al(rows * G * 4) + al(w->par_bytes);
    int rc = HARK_OK;
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_par, w->par_bytes)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_mel, n_mel * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_z, rows * G * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_audio, rows * G * 4)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream / pinned buffers");
        goto fail;
    }
    memset(w->h_par, 0, w->par_bytes);
    if (!(w->h_tmp = hark_malloc(sizeof(float) * G * lp)) ||
        !(w->gc = graph_cache_create(GRAPH_SLOTS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)) != HARK_OK)
        goto fail;
    cufftResult fr;
    if ((fr = cufftPlan1d(&w->fwd, N, CUFFT_R2C, w->nf_max)) != CUFFT_SUCCESS) {
        rc = fft_err(err, fr, "forward plan");
        goto fail;
    }
    w->have_fwd = 1;
    if ((fr = cufftPlan1d(&w->inv, N, CUFFT_C2R, w->nf_max)) != CUFFT_SUCCESS) {
        rc = fft_err(err, fr, "inverse plan");
        goto fail;
    }
    w->have_inv = 1;
    if ((fr = cufftSetStream(w->fwd, w->stream)) != CUFFT_SUCCESS ||
        (fr = cufftSetStream(w->inv, w->stream)) != CUFFT_SUCCESS) {
        rc = fft_err(err, fr, "set stream");
        goto fail;
    }
    size_t ws_f = 0, ws_i = 0;
    cufftGetSize(w->fwd, &ws_f);
    cufftGetSize(w->inv, &ws_i);
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM, WHAT ": %zu MiB of scratch for batch %d x %d frames: %s",
                     total >> 20, max_batch, max_frames, cudaGetErrorString(e));
        goto fail;
    }
    w->bytes = total + ops_cuda_workspace_bytes() + ws_f + ws_i + w->par_bytes + n_mel * 4 +
               2 * rows * G * 4;
    char *p = w->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)p, p += al(nbytes))
    TAKE(w->mel, float *, n_mel * 4);
    TAKE(w->xp, void *, n_xp *es);
    TAKE(w->acc, float *, n_acc * 4);
    TAKE(w->cond, void *, rows *nc *es);
    TAKE(w->hs, float *, n_hs * 4);
    TAKE(w->acts, void *, rows *C *es);
    TAKE(w->a, float *, rows *G * 4);
    TAKE(w->wo, float *, rows *G * 4);
    TAKE(w->zin, float *, rows *G * 4);
    TAKE(w->par, char *, w->par_bytes);
#undef TAKE
    HARK_ASSERT((size_t)(p - (char *)w->mem) == total);
    /* every buffer starts finite: the denoiser's FFTs run over whole frame blocks */
    if ((e = cudaMemsetAsync(w->mem, 0, total, w->stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "scratch clear");
        goto fail;
    }
    *out = w;
    return HARK_OK;
fail:
    waveglow_gpu_worker_destroy(w);
    return rc;
}

/* ---- the forward ---------------------------------------------------------------------------- */

typedef struct {
    const waveglow_opts_t *o; /* stage callback, or NULL */
    const int *n_frames;      /* host */
    int batch;
} dump_t;

#define RUN(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)) != HARK_OK)                                                                 \
            return rc;                                                                             \
    } while (0)

/* copies n floats of the device to host scratch (synchronising) */
static int fetch(waveglow_gpu_worker_t *w, float **h, const float *d, size_t n, hark_err_t *err)
{
    *h = hark_malloc(sizeof(float) * (n ? n : 1));
    if (!*h)
        return err_set(err, HARK_ERR_NOMEM, "out of memory for a stage dump");
    cudaError_t e = cudaMemcpyAsync(*h, d, n * 4, cudaMemcpyDeviceToHost, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess) {
        hark_free(*h);
        *h = NULL;
        return cuda_err(err, e, "stage dump");
    }
    return HARK_OK;
}

/* "upsampled" from the conditioning (rows, nc) of the GEMM type: each item's (n_mels, T·stride) */
static int dump_up(waveglow_gpu_worker_t *w, const dump_t *d, int lp, hark_err_t *err)
{
    const waveglow_config_t *c = w->c;
    int G = c->n_group, nm = c->n_mels, nc = nm * G, rc;
    size_t n = (size_t)d->batch * lp * nc;
    const float *src = w->cond;
    if (w->dt != OPS_F32) {
        RUN(cuda_cast(w->acc, OPS_F32, w->cond, w->dt, n, w->stream, err));
        src = w->acc;
    }
    float *h;
    RUN(fetch(w, &h, src, n, err));
    for (int b = 0; b < d->batch && !rc; b++) {
        size_t len = (size_t)d->n_frames[b] * c->up_stride;
        float *o = hark_malloc(sizeof(float) * nm * len);
        if (!o) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory for a stage dump");
            break;
        }
        for (int m = 0; m < nm; m++)
            for (size_t p = 0; p < len; p++)
                o[(size_t)m * len + p] = h[((size_t)b * lp + p / G) * nc + (size_t)m * G + p % G];
        d->o->stage(d->o->stage_user, "upsampled", o, nm, (int)len);
        hark_free(o);
    }
    hark_free(h);
    return rc;
}

/* columns [c0, c0 + ch) of buf (batch, lp, ld) as each item's (ch, L_b) */
static int dump_cols(waveglow_gpu_worker_t *w, const dump_t *d, const char *name, const float *buf,
                     int lp, int ld, int c0, int ch, hark_err_t *err)
{
    const waveglow_config_t *c = w->c;
    float *h;
    int rc;
    RUN(fetch(w, &h, buf, (size_t)d->batch * lp * ld, err));
    for (int b = 0; b < d->batch && !rc; b++) {
        int L = (int)((long long)d->n_frames[b] * c->up_stride / c->n_group);
        float *o = hark_malloc(sizeof(float) * ch * (size_t)L);
        if (!o) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory for a stage dump");
            break;
        }
        for (int q = 0; q < ch; q++)
            for (int t = 0; t < L; t++)
                o[(size_t)q * L + t] = h[((size_t)b * lp + t) * ld + c0 + q];
        d->o->stage(d->o->stage_user, name, o, ch, L);
        hark_free(o);
    }
    hark_free(h);
    return rc;
}

/* one flow k on the audio state, cond ready */
static int enqueue_flow(waveglow_gpu_worker_t *w, int k, int batch, int lp, const dump_t *d,
                        hark_err_t *err)
{
    const waveglow_gpu_model_t *g = w->g;
    const waveglow_config_t *c = w->c;
    const gflow_t *f = &g->flow[k];
    const ops_dtype_t dt = w->dt;
    cudaStream_t st = w->stream;
    int G = c->n_group, C = c->wn_channels, K = c->wn_kernel, nc = c->n_mels * G;
    int ch = f->ch, half = ch / 2, off = G - ch, rc;
    long long rows = (long long)batch * lp;
    const int *lens = par_lens(w->par, w->max_batch, 0);
    char nm[48];
    int dumping = d && d->o && d->o->stage;
    if (dumping) {
        snprintf(nm, sizeof nm, "flow%d_wn_input", k);
        RUN(dump_cols(w, d, nm, w->a, lp, G, off, half, err));
    }
    RUN(cuda_wg_start(w->hs, w->a, f->start_w, f->start_b, rows, G, off, half, C, st, err));
    for (int i = 0; i < c->wn_layers; i++) {
        int dil = 1 << i, pad = dil * (K - 1) / 2, last = i == c->wn_layers - 1;
        RUN(cuda_conv1d_pad_mask_act(w->xp, dt, w->hs, OPS_F32, f->hb[i], 1.0f, lens, batch, lp, C,
                                     2 * C, C, pad, pad, st, err));
        RUN(cuda_conv1d(w->acc, 0.0f, w->xp, f->w_in[i], dt, batch, lp + 2 * pad, C, 2 * C, K, 1,
                        dil, w->ops, err));
        RUN(cuda_gemm(w->acc, OPS_F32, w->cond, f->cond_w[i], dt, (int)rows, 2 * C, nc, nc, nc,
                      2 * C, 1, 1.0f, 1.0f, 1, 0, 0, 0, w->ops, err));
        RUN(cuda_wg_gate(w->acts, dt, w->acc, f->gate_b[i], rows, C, st, err));
        RUN(cuda_gemm(w->hs + (last ? C : 0), OPS_F32, w->acts, f->rs_w[i], dt, (int)rows,
                      last ? C : 2 * C, C, C, C, 2 * C, 1, 1.0f, 1.0f, 1, 0, 0, 0, w->ops, err));
    }
    RUN(cuda_wg_flow_tail(w->a, dumping ? w->wo : NULL, w->hs, 2 * C, f->end_w, f->end_b, f->w_inv,
                          lens, batch, lp, G, off, ch, C, st, err));
    if (dumping) {
        snprintf(nm, sizeof nm, "flow%d_wn_output", k);
        RUN(dump_cols(w, d, nm, w->wo, lp, ch, 0, ch, err));
        snprintf(nm, sizeof nm, "flow%d_after_convinv", k);
        RUN(dump_cols(w, d, nm, w->a, lp, G, off, ch, err));
    }
    return HARK_OK;
}

/* the denoiser on x (batch, ldx) in place, the samples of par's lengths */
static int enqueue_denoise(waveglow_gpu_worker_t *w, float *x, long long ldx, int batch,
                           hark_err_t *err)
{
    const waveglow_gpu_model_t *g = w->g;
    const waveglow_config_t *c = w->c;
    int N = c->filter_length, nb = N / 2 + 1, nf = w->nf_max, rc;
    const int *n = par_lens(w->par, w->max_batch, 2);
    cudaStream_t st = w->stream;
    float *fr = w->acc, *spec = w->hs;
    RUN(cuda_wg_stft_frames(fr, x, ldx, n, g->window, batch, nf, N, c->hop, st, err));
    for (int b = 0; b < batch; b++) {
        cufftResult r = cufftExecR2C(w->fwd, fr + (size_t)b * nf * N,
                                     (cufftComplex *)(void *)(spec + (size_t)b * nf * nb * 2));
        if (r != CUFFT_SUCCESS)
            return fft_err(err, r, "R2C");
    }
    RUN(cuda_wg_spec_denoise(spec, g->bias_spec, par_f(w->par, w->max_batch, 1),
                             (long long)batch * nf, nb, st, err));
    for (int b = 0; b < batch; b++) {
        cufftResult r =
            cufftExecC2R(w->inv, (cufftComplex *)(void *)(spec + (size_t)b * nf * nb * 2),
                         fr + (size_t)b * nf * N);
        if (r != CUFFT_SUCCESS)
            return fft_err(err, r, "C2R");
    }
    return cuda_wg_ola(x, ldx, fr, n, g->window, batch, nf, N, c->hop, st, err);
}

/* mel: the device mel (batch, n_mels, ld) or NULL (the host run's, staged) */
static int enqueue_forward(waveglow_gpu_worker_t *w, const float *mel, int ld, int batch, int F,
                           int hook, int denoise, const dump_t *d, hark_err_t *err)
{
    const waveglow_gpu_model_t *g = w->g;
    const waveglow_config_t *c = w->c;
    const ops_dtype_t dt = w->dt;
    cudaStream_t st = w->stream;
    int B = w->max_batch, G = c->n_group, nm = c->n_mels, nc = nm * G, rc;
    int lp = (int)((long long)F * c->up_stride / G);
    long long rows = (long long)batch * lp;
    cudaError_t e = cudaMemcpyAsync(w->par, w->h_par, w->par_bytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess && !mel)
        e = cudaMemcpyAsync(w->mel, w->h_mel, (size_t)batch * nm * F * sizeof(float),
                            cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess && hook)
        e = cudaMemcpyAsync(w->zin, w->h_z, (size_t)rows * G * sizeof(float),
                            cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        return cuda_err(err, e, "uploads");
    if (!mel) {
        mel = w->mel;
        ld = F;
    }
    /* the upsampler: the masked mel, the polyphase GEMM straight into the grouped layout, bias */
    int J = g->J;
    RUN(cuda_wg_mel_pad(w->xp, dt, mel, par_lens(w->par, B, 1), batch, ld, nm, g->nm_p, F, J - 1,
                        st, err));
    RUN(cuda_conv1d(w->acc, 0.0f, w->xp, g->up_w, dt, batch, J - 1 + F, g->nm_p, c->up_stride * nm,
                    J, 1, 1, w->ops, err));
    RUN(cuda_wg_cond_bias(w->cond, dt, w->acc, g->up_b, rows * nc, nc, G, st, err));
    if (d && d->o && d->o->stage)
        RUN(dump_up(w, d, lp, err));
    /* the noise, every draw in place, sigma-scaled */
    int ch_last = g->flow[c->n_flows - 1].ch;
    RUN(cuda_wg_noise(w->a, hook ? w->zin : NULL, par_seeds(w->par, B), par_f(w->par, B, 0),
                      par_lens(w->par, B, 0), batch, lp, G, ch_last, c->n_early_size, st, err));
    for (int k = c->n_flows - 1; k >= 0; k--)
        RUN(enqueue_flow(w, k, batch, lp, d, err));
    if (denoise)
        RUN(enqueue_denoise(w, w->a, (long long)lp * G, batch, err));
    e = cudaMemcpyAsync(w->h_audio, w->a, (size_t)rows * G * sizeof(float), cudaMemcpyDeviceToHost,
                        st);
    return e == cudaSuccess ? HARK_OK : cuda_err(err, e, "audio copy");
}

typedef struct {
    waveglow_gpu_worker_t *w;
    const float *mel;
    int ld, batch, F, hook, denoise;
} fwd_t;

static int enqueue_run(void *user, hark_err_t *err)
{
    fwd_t *r = user;
    return enqueue_forward(r->w, r->mel, r->ld, r->batch, r->F, r->hook, r->denoise, NULL, err);
}

/* fills the parameters, the noise hook's values; runs (through a graph when no stage); copies the
 * audio out */
static int run_common(waveglow_gpu_worker_t *w, const float *d_mel, int ld, const int *n_frames,
                      int batch, const waveglow_opts_t *o, const uint64_t *seeds,
                      float *const *audio, hark_err_t *err)
{
    const waveglow_config_t *c = w->c;
    int B = w->max_batch, G = c->n_group, u = c->up_stride, F = 0;
    for (int b = 0; b < batch; b++)
        F = n_frames[b] > F ? n_frames[b] : F;
    F = fpad(w->g, F);
    int lp = (int)((long long)F * u / G), denoise = w->strength > 0.0f;
    if (denoise)
        for (int b = 0; b < batch; b++)
            if ((long long)n_frames[b] * u <= c->filter_length / 2)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               WHAT ": item %d: %lld samples is too short for the denoiser", b,
                               (long long)n_frames[b] * u);
    waveglow_opts_t o0 = {.sigma = -1};
    if (!o)
        o = &o0;
    cudaSetDevice(w->g->device);
    /* the previous run is complete (runs are synchronous): the pinned buffers are free */
    memset(w->h_par, 0, w->par_bytes);
    for (int b = 0; b < batch; b++) {
        par_lens(w->h_par, B, 0)[b] = (int)((long long)n_frames[b] * u / G);
        par_lens(w->h_par, B, 1)[b] = n_frames[b];
        par_lens(w->h_par, B, 2)[b] = n_frames[b] * u;
        par_seeds(w->h_par, B)[b] = seeds ? seeds[b] : o->seed;
    }
    *par_f(w->h_par, B, 0) = o->sigma >= 0 ? o->sigma : c->sigma;
    *par_f(w->h_par, B, 1) = w->strength;
    int hook = o->noise != NULL;
    if (hook) {
        int ch_last = w->g->flow[c->n_flows - 1].ch, e = c->n_early_size;
        int n_draws = 1 + (e > 0 ? (G - ch_last) / e : 0);
        memset(w->h_z, 0, sizeof(float) * (size_t)batch * lp * G);
        for (int b = 0; b < batch; b++) {
            int L = par_lens(w->h_par, B, 0)[b];
            for (int dr = 0; dr < n_draws; dr++) {
                int ch = dr ? e : ch_last, c0 = dr ? G - ch_last - dr * e : G - ch_last;
                o->noise(o->noise_user, dr, w->h_tmp, ch, L);
                for (int q = 0; q < ch; q++)
                    for (int t = 0; t < L; t++)
                        w->h_z[((size_t)b * lp + t) * G + c0 + q] = w->h_tmp[(size_t)q * L + t];
            }
        }
    }
    int rc;
    if (o->stage) {
        dump_t d = {o, n_frames, batch};
        rc = enqueue_forward(w, d_mel, ld, batch, F, hook, denoise, &d, err);
    } else {
        fwd_t r = {w, d_mel, ld, batch, F, hook, denoise};
        graph_key_t key = {{batch, F, (long long)(intptr_t)d_mel, ld, hook, denoise}};
        rc = w->graphs ? graph_cache_run(w->gc, &key, enqueue_run, &r, WHAT, err)
                       : enqueue_run(&r, err);
    }
    if (!rc) {
        cudaError_t e = cudaStreamSynchronize(w->stream);
        if (e != cudaSuccess)
            rc = cuda_err(err, e, "forward");
    }
    if (rc)
        return rc;
    size_t ld_s = (size_t)lp * G;
    for (int b = 0; b < batch; b++) {
        size_t n = (size_t)n_frames[b] * u, keep = n;
        if (denoise)
            keep = n / (size_t)c->hop * (size_t)c->hop;
        memcpy(audio[b], w->h_audio + (size_t)b * ld_s, sizeof(float) * keep);
        memset(audio[b] + keep, 0, sizeof(float) * (n - keep));
    }
    return HARK_OK;
}

static int check_batch(waveglow_gpu_worker_t *w, const int *n_frames, int batch, int ld,
                       hark_err_t *err)
{
    if (batch < 1 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, WHAT ": batch of %d, the worker takes %d", batch,
                       w->max_batch);
    for (int b = 0; b < batch; b++) {
        if (n_frames[b] < 1)
            return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": item %d: the mel has no frames", b);
        if (n_frames[b] > w->max_frames)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           WHAT ": item %d: %d mel frames, the worker takes %d", b, n_frames[b],
                           w->max_frames);
        if (ld > 0 && n_frames[b] > ld)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           WHAT ": item %d: %d frames past the %d of d_mel", b, n_frames[b], ld);
    }
    return HARK_OK;
}

int waveglow_gpu_run(waveglow_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                     int batch, const waveglow_opts_t *o, const uint64_t *seeds,
                     float *const *audio, hark_err_t *err)
{
    int rc = check_batch(w, n_frames, batch, 0, err), nm = w->c->n_mels;
    if (rc)
        return rc;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < (size_t)nm * n_frames[b]; i++)
            if (!isfinite(mel[b][i]))
                return err_set(err, HARK_ERR_INVALID_ARG,
                               WHAT ": item %d: mel value %zu is NaN or infinite", b, i);
    int F = 0;
    for (int b = 0; b < batch; b++)
        F = n_frames[b] > F ? n_frames[b] : F;
    F = fpad(w->g, F);
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < nm; i++) {
            float *dst = w->h_mel + ((size_t)b * nm + i) * F;
            memcpy(dst, mel[b] + (size_t)i * n_frames[b], sizeof(float) * n_frames[b]);
            memset(dst + n_frames[b], 0, sizeof(float) * (size_t)(F - n_frames[b]));
        }
    return run_common(w, NULL, 0, n_frames, batch, o, seeds, audio, err);
}

int waveglow_gpu_run_device(waveglow_gpu_worker_t *w, const float *d_mel, int ld_frames,
                            const int *n_frames, int batch, const waveglow_opts_t *o,
                            const uint64_t *seeds, float *const *audio, hark_err_t *err)
{
    if (!d_mel || ld_frames < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": no device mel (ld %d)", ld_frames);
    int rc = check_batch(w, n_frames, batch, ld_frames, err);
    return rc ? rc : run_common(w, d_mel, ld_frames, n_frames, batch, o, seeds, audio, err);
}

int waveglow_gpu_denoise(waveglow_gpu_worker_t *w, const float *const *audio, const size_t *n,
                         int batch, float strength, float *const *out, size_t *n_out,
                         hark_err_t *err)
{
    const waveglow_config_t *c = w->c;
    int B = w->max_batch, rc;
    size_t ld = (size_t)w->fp_max * c->up_stride;
    if (batch < 1 || batch > B)
        return err_set(err, HARK_ERR_TOO_LARGE, WHAT ": batch of %d, the worker takes %d", batch,
                       B);
    if (!(strength >= 0.0f) || !isfinite(strength))
        return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": denoiser strength %g", strength);
    for (int b = 0; b < batch; b++) {
        n_out[b] = 0;
        if (n[b] <= (size_t)c->filter_length / 2)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           WHAT ": item %d: %zu samples is too short for the denoiser", b, n[b]);
        if (n[b] > ld)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           WHAT ": item %d: %zu samples, the worker takes %zu", b, n[b], ld);
        for (size_t i = 0; i < n[b]; i++)
            if (!isfinite(audio[b][i]))
                return err_set(err, HARK_ERR_INVALID_ARG, WHAT ": item %d: sample %zu is NaN", b,
                               i);
    }
    cudaSetDevice(w->g->device);
    memset(w->h_par, 0, w->par_bytes);
    for (int b = 0; b < batch; b++) {
        par_lens(w->h_par, B, 2)[b] = (int)n[b];
        memcpy(w->h_audio + (size_t)b * ld, audio[b], sizeof(float) * n[b]);
    }
    *par_f(w->h_par, B, 1) = strength;
    cudaStream_t st = w->stream;
    cudaError_t e = cudaMemcpyAsync(w->par, w->h_par, w->par_bytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(w->a, w->h_audio, (size_t)batch * ld * 4, cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        return cuda_err(err, e, "uploads");
    if ((rc = enqueue_denoise(w, w->a, (long long)ld, batch, err)) != HARK_OK)
        return rc;
    if ((e = cudaMemcpyAsync(w->h_audio, w->a, (size_t)batch * ld * 4, cudaMemcpyDeviceToHost,
                             st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(st)) != cudaSuccess)
        return cuda_err(err, e, "denoise");
    for (int b = 0; b < batch; b++) {
        n_out[b] = n[b] / (size_t)c->hop * (size_t)c->hop;
        memcpy(out[b], w->h_audio + (size_t)b * ld, sizeof(float) * n_out[b]);
    }
    return HARK_OK;
}

#undef RUN

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "waveglow: built without CUDA");
}

int waveglow_gpu_model_create(const waveglow_model_t *m, int device, ops_dtype_t dt,
                              waveglow_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void waveglow_gpu_model_destroy(waveglow_gpu_model_t *g) {}
size_t waveglow_gpu_model_bytes(const waveglow_gpu_model_t *g)
{
    return 0;
}
const waveglow_model_t *waveglow_gpu_model_cpu(const waveglow_gpu_model_t *g)
{
    return NULL;
}
int waveglow_gpu_worker_create(const waveglow_gpu_model_t *g, int max_batch, int max_frames,
                               waveglow_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void waveglow_gpu_worker_destroy(waveglow_gpu_worker_t *w) {}
size_t waveglow_gpu_worker_bytes(const waveglow_gpu_worker_t *w)
{
    return 0;
}
void waveglow_gpu_set_graphs(waveglow_gpu_worker_t *w, int on) {}
int waveglow_gpu_set_denoise(waveglow_gpu_worker_t *w, float strength, hark_err_t *err)
{
    return no_device(err);
}
int waveglow_gpu_run(waveglow_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                     int batch, const waveglow_opts_t *o, const uint64_t *seeds,
                     float *const *audio, hark_err_t *err)
{
    return no_device(err);
}
int waveglow_gpu_run_device(waveglow_gpu_worker_t *w, const float *d_mel, int ld_frames,
                            const int *n_frames, int batch, const waveglow_opts_t *o,
                            const uint64_t *seeds, float *const *audio, hark_err_t *err)
{
    return no_device(err);
}
int waveglow_gpu_denoise(waveglow_gpu_worker_t *w, const float *const *audio, const size_t *n,
                         int batch, float strength, float *const *out, size_t *n_out,
                         hark_err_t *err)
{
    return no_device(err);
}
void *waveglow_gpu_stream(const waveglow_gpu_worker_t *w)
{
    return NULL;
}

#endif
