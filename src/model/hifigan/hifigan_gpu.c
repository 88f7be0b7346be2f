/* hifigan_gpu.c — the HiFi-GAN generator on the GPU (hifigan_gpu.h); the CPU reference is
 * hifigan.c. Tests: tests/model/hifigan/test_hifigan_gpu.c
 *
 * The batch stays padded: (batch, T_l, C_l) time-major buffers per level l (0: mel frames, l: after
 * upsampling stage l-1), channels rounded up to multiples of 8 with zero weights and biases (the
 * extra channels stay 0 through every leaky ReLU). Every conv reads a masked, zero-padded copy of
 * its input (cuda_conv1d_pad_mask_act: the rows past an item's length at that level read as zero,
 * as the one-shot CPU path's zero padding; the leaky ReLU and a pending bias fused in) and
 * accumulates in FP32 (cuda_conv1d: the implicit GEMM over all taps for 16-bit undilated convs,
 * one GEMM per tap otherwise). The resblocks add their convs straight into the residual stream r
 * (beta 1) and leave their biases pending: r holds the true value minus the sum of the biases of
 * the convs added so far (a per-channel vector made at load), which the next conv's input copy
 * (and the MRF sum) adds back — no bias pass over the largest tensors. The transposed convs run as
 * polyphase convs (conv1d.h) whose output is cropped with its bias into the stage's x.
 *
 * 16-bit stages of 32/64/128/256 channels run each resblock dilation as one fused unit
 * (cuda_conv1d_res) instead: the first unit of each resblock reads the polyphase output uncropped,
 * adding the upsampler's bias itself (no crop pass), and the stage's last unit writes the MRF mean
 * leaky-ReLU'd and rounded straight into the next upsampler's padded input (no mask pass; the
 * buffer is zeroed first, and the FP32 mean is kept only where a stage dump or conv_post reads it).
 */
#include "model/hifigan/hifigan_gpu.h"

#include "model/hifigan/hifigan_impl.h"

double hifigan_macs(const hifigan_model_t *m, int n_frames)
{
    const hifigan_config_t *c = &m->cfg;
    double t = n_frames, macs = t * c->num_mels * c->ch0 * 7;
    for (int i = 0; i < c->n_ups; i++) {
        const hg_conv_t *u = &m->ups[i];
        macs += t * u->cin * u->cout * u->k;
        t *= u->stride;
        for (int k = 0; k < c->n_kernels; k++)
            macs += t * (double)u->cout * u->cout * c->rb_kernel[k] * c->n_dil *
                    (c->resblock == 1 ? 2 : 1);
    }
    return macs + t * (c->ch0 >> c->n_ups) * 7;
}

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "core/dtype.h"
#include "gpu/gpu_arch.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "hark.h"
#include "ops/conv1d.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_SLOTS 16
#define MAX_FRAMES 1000000

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "hifigan (gpu): %s: %s", what, cudaGetErrorString(e));
}

static int pad8(int c)
{
    return (c + 7) & ~7;
}

static size_t al(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

/* a conv on the device: w (cout_p, k, cin_p) of dt; for an upsampling stage k = J polyphase taps,
 * cout_p = u · C_p (the phases), pad = the crop (torch's padding) and stride = u */
typedef struct {
    int cin_p, cout_p, k, dil, pad, stride;
    const void *w;
    const float *b; /* (cout_p) or (C_p) for a stage */
} gconv_t;

struct hifigan_gpu_model {
    const hifigan_model_t *m;
    int device;
    ops_dtype_t dt;
    int mel_p;
    int ch_p[HIFIGAN_MAX_UPS + 1]; /* padded channels per level */
    int frame_mult; /* 16-bit: batches run padded to a multiple of this many frames, so that every
                       level's length is a multiple of its dilations (cuda_conv1d's implicit GEMM
                       then takes the dilated convs too); 1 in FP32 */
    gconv_t pre, post;
    float post_b;
    gconv_t ups[HIFIGAN_MAX_UPS];
    gconv_t rb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][2][HIFIGAN_MAX_DIL];
    /* pending bias after conv d of resblock k of stage i (ResBlock2: Σ b of convs 0..d;
     * ResBlock1: Σ b of convs2 0..d), (C_p) */
    const float *pb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][HIFIGAN_MAX_DIL];
    float *h_pb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][HIFIGAN_MAX_DIL]; /* host copies (dumps) */
    float *h_flt; /* the host image of the float block (h_pb point into it) */
    void *dmat, *dflt;
    size_t bytes;
};

/* frames a batch of F runs padded to */
static int fpad(const hifigan_gpu_model_t *g, int F)
{
    return (F + g->frame_mult - 1) / g->frame_mult * g->frame_mult;
}

int hifigan_gpu_model_device(const hifigan_gpu_model_t *g)
{
    return g->device;
}

size_t hifigan_gpu_model_bytes(const hifigan_gpu_model_t *g)
{
    return g->bytes;
}

const hifigan_model_t *hifigan_gpu_model_cpu(const hifigan_gpu_model_t *g)
{
    return g->m;
}

void hifigan_gpu_model_destroy(hifigan_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g->h_flt);
    hark_free(g);
}

/* host images: matrices (float, cast to dt on the device) and floats; a sizing pass first */
typedef struct {
    size_t w, b;
} goff_t;

/* Conv1d: CPU (k, cout, cin) -> (cout_p, k, cin_p) */
static void stage_conv(weight_stage_t *s, gconv_t *g, goff_t *o, const hg_conv_t *c)
{
    g->cin_p = pad8(c->cin);
    g->cout_p = pad8(c->cout);
    g->k = c->k;
    g->dil = c->dil;
    g->pad = c->pad;
    g->stride = 1;
    size_t nw = (size_t)g->cout_p * c->k * g->cin_p;
    o->w = weight_stage_take(&s->n_mat, nw);
    o->b = weight_stage_take(&s->n_flt, (size_t)g->cout_p);
    if (s->sizing)
        return;
    float *w = s->mat + o->w, *b = s->flt + o->b;
    memset(w, 0, sizeof(float) * nw);
    for (int oc = 0; oc < c->cout; oc++)
        for (int j = 0; j < c->k; j++)
            for (int i = 0; i < c->cin; i++)
                w[((size_t)oc * c->k + j) * g->cin_p + i] =
                    c->w[((size_t)j * c->cout + oc) * c->cin + i];
    memset(b, 0, sizeof(float) * (size_t)g->cout_p);
    memcpy(b, c->b, sizeof(float) * (size_t)c->cout);
}

/* ConvTranspose1d: CPU (k · cout, cin) per tap -> the polyphase conv's (u · cout_p, J, cin_p) */
static void stage_convt(weight_stage_t *s, gconv_t *g, goff_t *o, const hg_conv_t *c)
{
    int cin_p = pad8(c->cin), cout_p = pad8(c->cout), u = c->stride;
    int J = conv1d_transpose_taps(c->k, u);
    g->cin_p = cin_p;
    g->cout_p = u * cout_p;
    g->k = J;
    g->dil = 1;
    g->pad = c->pad;
    g->stride = u;
    size_t nw = (size_t)u * cout_p * J * cin_p, nt = (size_t)c->cin * c->cout * c->k;
    o->w = weight_stage_take(&s->n_mat, nw);
    o->b = weight_stage_take(&s->n_flt, (size_t)cout_p);
    if (s->sizing)
        return;
    float *wt = hark_malloc(sizeof(float) * nt); /* back to torch's (cin, cout, k) */
    HARK_ASSERT(wt);
    for (int t = 0; t < c->k; t++)
        for (int oc = 0; oc < c->cout; oc++)
            for (int i = 0; i < c->cin; i++)
                wt[((size_t)i * c->cout + oc) * c->k + t] =
                    c->w[((size_t)t * c->cout + oc) * c->cin + i];
    conv1d_transpose_weights(s->mat + o->w, wt, c->cin, c->cout, c->k, u, cin_p, cout_p);
    hark_free(wt);
    float *b = s->flt + o->b;
    memset(b, 0, sizeof(float) * (size_t)cout_p);
    memcpy(b, c->b, sizeof(float) * (size_t)c->cout);
}

typedef struct {
    goff_t pre, post, ups[HIFIGAN_MAX_UPS];
    goff_t rb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][2][HIFIGAN_MAX_DIL];
    size_t pb[HIFIGAN_MAX_UPS][HIFIGAN_MAX_KERNELS][HIFIGAN_MAX_DIL];
} offs_t;

static void stage_all(weight_stage_t *s, hifigan_gpu_model_t *g, offs_t *o)
{
    const hifigan_model_t *m = g->m;
    const hifigan_config_t *c = &m->cfg;
    stage_conv(s, &g->pre, &o->pre, &m->conv_pre);
    for (int i = 0; i < c->n_ups; i++) {
        stage_convt(s, &g->ups[i], &o->ups[i], &m->ups[i]);
        int cout = m->ups[i].cout, cp = pad8(cout);
        for (int k = 0; k < c->n_kernels; k++) {
            double acc[4096];
            HARK_ASSERT(cout <= 4096);
            memset(acc, 0, sizeof(double) * (size_t)cout);
            for (int d = 0; d < c->n_dil; d++) {
                for (int h = 0; h < (c->resblock == 1 ? 2 : 1); h++)
                    stage_conv(s, &g->rb[i][k][h][d], &o->rb[i][k][h][d], &m->rb[i][k][h][d]);
                o->pb[i][k][d] = weight_stage_take(&s->n_flt, (size_t)cp);
                if (s->sizing)
                    continue;
                const hg_conv_t *last = &m->rb[i][k][c->resblock == 1 ? 1 : 0][d];
                float *pb = s->flt + o->pb[i][k][d];
                memset(pb, 0, sizeof(float) * (size_t)cp);
                for (int ch = 0; ch < cout; ch++)
                    pb[ch] = (float)(acc[ch] += last->b[ch]);
            }
        }
    }
    stage_conv(s, &g->post, &o->post, &m->conv_post);
}

typedef struct {
    hifigan_gpu_model_t *g;
    offs_t *o;
} fill_t;

static void fill(weight_stage_t *s, void *user)
{
    fill_t *f = user;
    stage_all(s, f->g, f->o);
}

int hifigan_gpu_model_create(const hifigan_model_t *m, int device, ops_dtype_t dt,
                             hifigan_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    const hifigan_config_t *c = &m->cfg;
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "hifigan (gpu): element type %d", (int)dt);
    if ((c->ch0 >> c->n_ups) > 4096 || c->ch0 > (1 << 14))
        return err_set(err, HARK_ERR_UNSUPPORTED, "hifigan (gpu): %d channels", c->ch0);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    hifigan_gpu_model_t *g = hark_calloc(1, sizeof *g);
    offs_t *o = hark_calloc(1, sizeof *o);
    if (!g || !o) {
        hark_free(g);
        hark_free(o);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    g->mel_p = pad8(c->num_mels);
    g->frame_mult = 1;
    if (dt != OPS_F32) {
        long mult = 1, P = 1;
        for (int i = 0; i < c->n_ups; i++) {
            P *= c->up_rate[i];
            for (int k = 0; k < c->n_kernels; k++)
                for (int d = 0; d < c->n_dil; d++) {
                    long dd = c->rb_dil[k][d], a = dd, b = P % dd;
                    while (b) { /* gcd(d, P) */
                        long r = a % b;
                        a = b;
                        b = r;
                    }
                    long need = dd / a, x = mult, y = need;
                    while (y) { /* lcm(mult, need) */
                        long r = x % y;
                        x = y;
                        y = r;
                    }
                    mult = mult / x * need;
                }
        }
        g->frame_mult = mult <= 64 ? (int)mult : 1; /* else the per-tap GEMMs */
    }
    for (int l = 0; l <= c->n_ups; l++)
        g->ch_p[l] = pad8(c->ch0 >> l);
    size_t es = ops_dtype_size(dt);
    int rc;
    fill_t fl = {g, o};
    if ((rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, &g->h_flt,
                                  "hifigan (gpu)", err)))
        goto done;
#define VIEW(gc, off)                                                                              \
    do {                                                                                           \
        (gc).w = (const char *)g->dmat + (off).w * es;                                             \
        (gc).b = (const float *)g->dflt + (off).b;                                                 \
    } while (0)
    VIEW(g->pre, o->pre);
    VIEW(g->post, o->post);
    g->post_b = m->conv_post.b[0];
    for (int i = 0; i < c->n_ups; i++) {
        VIEW(g->ups[i], o->ups[i]);
        for (int k = 0; k < c->n_kernels; k++)
            for (int d = 0; d < c->n_dil; d++) {
                for (int h = 0; h < (c->resblock == 1 ? 2 : 1); h++)
                    VIEW(g->rb[i][k][h][d], o->rb[i][k][h][d]);
                g->pb[i][k][d] = (const float *)g->dflt + o->pb[i][k][d];
                g->h_pb[i][k][d] = g->h_flt + o->pb[i][k][d];
            }
    }
#undef VIEW
done:
    hark_free(o);
    if (rc) {
        hifigan_gpu_model_destroy(g);
        return rc;
    }
    *out = g;
    return HARK_OK;
}

/* ---- workers -------------------------------------------------------------------------------- */

struct hifigan_gpu_worker {
    const hifigan_gpu_model_t *g;
    const hifigan_config_t *c;
    ops_dtype_t dt;
    int max_batch, max_frames;
    size_t max_samples; /* per item */
    cudaStream_t stream;
    ops_cuda_t *ops;
    void *mem;
    size_t bytes;
    float *mel;     /* (B, F, num_mels) the model input */
    void *xp;       /* dt: a conv's masked, activated, zero-padded input */
    float *x;       /* (B, T_l, C_p) a stage's upsampled output */
    float *r;       /* (B, T_l, C_p) a resblock's residual stream (and the polyphase output) */
    float *xs;      /* (B, T_l, C_p) conv_pre's output, then each stage's MRF mean */
    float *acc;     /* ResBlock1's inner conv, conv_post's (B, T, 8) */
    float *audio;   /* (B, T_L) */
    float *pre;     /* (B, T_L) conv_post before tanh (dumps) */
    int *d_lens;    /* (n_ups + 1, max_batch) */
    int *h_lens;    /* pinned, as d_lens */
    float *h_mel;   /* pinned, as mel */
    float *h_audio; /* pinned, as audio */
    int graphs;
    graph_cache_t *gc; /* GRAPH_SLOTS forwards by (batch, frames, device input, its address) */
    /* stage i's resblocks as fused units (cuda_conv1d_res: 16-bit, a channel count it takes) */
    int can_fuse[HIFIGAN_MAX_UPS];
    hifigan_fused_t fused;
    int res16; /* the fused units' residual between dilations in 16 bits */
    int prof;  /* events between the parts of the forward (no graphs while on) */
    cudaEvent_t ev[HIFIGAN_PROF_PARTS + 1];
};

void hifigan_gpu_worker_destroy(hifigan_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    for (int i = 0; i <= HIFIGAN_PROF_PARTS; i++)
        if (w->ev[i])
            cudaEventDestroy(w->ev[i]);
    graph_cache_destroy(w->gc);
    ops_cuda_destroy(w->ops);
    cudaFree(w->mem);
    cudaFreeHost(w->h_lens);
    cudaFreeHost(w->h_mel);
    cudaFreeHost(w->h_audio);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

void hifigan_gpu_set_graphs(hifigan_gpu_worker_t *w, int on)
{
    if (!on)
        graph_cache_clear(w->gc);
    w->graphs = on != 0;
}

void hifigan_gpu_set_fused(hifigan_gpu_worker_t *w, hifigan_fused_t mode)
{
    graph_cache_clear(w->gc);
    w->fused = mode;
}

void hifigan_gpu_set_res16(hifigan_gpu_worker_t *w, int on)
{
    graph_cache_clear(w->gc);
    w->res16 = on != 0;
}

int hifigan_gpu_fused_stages(const hifigan_gpu_worker_t *w)
{
    int n = 0;
    for (int i = 0; i < w->c->n_ups; i++)
        n += w->fused && w->can_fuse[i];
    return n;
}

int hifigan_gpu_set_profile(hifigan_gpu_worker_t *w, int on, hark_err_t *err)
{
    cudaSetDevice(w->g->device);
    for (int i = 0; on && i <= HIFIGAN_PROF_PARTS; i++)
        if (!w->ev[i]) {
            cudaError_t e = cudaEventCreate(&w->ev[i]);
            if (e != cudaSuccess)
                return cuda_err(err, e, "profile events");
        }
    w->prof = on != 0;
    return HARK_OK;
}

int hifigan_gpu_profile(hifigan_gpu_worker_t *w, char names[][16], float *ms, hark_err_t *err)
{
    int n = 2 + 2 * w->c->n_ups;
    if (!w->prof)
        return 0;
    cudaError_t e = cudaEventSynchronize(w->ev[n]);
    for (int i = 0; i < n && e == cudaSuccess; i++) {
        e = cudaEventElapsedTime(&ms[i], w->ev[i], w->ev[i + 1]);
        if (i == 0)
            snprintf(names[i], 16, "conv_pre");
        else if (i == n - 1)
            snprintf(names[i], 16, "conv_post");
        else
            snprintf(names[i], 16, "%s%d", i % 2 ? "ups" : "mrf", (i - 1) / 2);
    }
    if (e != cudaSuccess)
        return cuda_err(err, e, "profile");
    return n;
}

size_t hifigan_gpu_worker_bytes(const hifigan_gpu_worker_t *w)
{
    return w->bytes;
}

int hifigan_gpu_worker_max_frames(const hifigan_gpu_worker_t *w)
{
    return w->max_frames;
}

int hifigan_gpu_worker_max_batch(const hifigan_gpu_worker_t *w)
{
    return w->max_batch;
}

void *hifigan_gpu_stream(const hifigan_gpu_worker_t *w)
{
    return w->stream;
}

/* element counts per item for frames F: the largest activation, the polyphase output, the
 * padded conv input, the inner accumulator */
typedef struct {
    size_t act, poly, xp, acc, samples;
} sizes_t;

static sizes_t sizes_for(const hifigan_gpu_model_t *g, size_t F)
{
    const hifigan_config_t *c = &g->m->cfg;
    sizes_t z = {0};
    size_t T = F;
    z.act = T * (size_t)g->ch_p[0];
    z.xp = (T + 6) * (size_t)g->mel_p;
    for (int i = 0; i < c->n_ups; i++) {
        const gconv_t *u = &g->ups[i];
        size_t R = (size_t)conv1d_transpose_pad_r(u->pad, u->stride);
        size_t xp = (u->k - 1 + T + R) * (size_t)u->cin_p;
        z.xp = xp > z.xp ? xp : z.xp;
        size_t poly = (T + R) * (size_t)u->cout_p;
        z.poly = poly > z.poly ? poly : z.poly;
        T *= (size_t)u->stride;
        size_t act = T * (size_t)g->ch_p[i + 1];
        z.act = act > z.act ? act : z.act;
        for (int k = 0; k < c->n_kernels; k++)
            for (int d = 0; d < c->n_dil; d++)
                for (int h = 0; h < (c->resblock == 1 ? 2 : 1); h++) {
                    size_t p = (T + 2 * (size_t)g->rb[i][k][h][d].pad) * (size_t)g->ch_p[i + 1];
                    z.xp = p > z.xp ? p : z.xp;
                }
        z.acc = act > z.acc ? act : z.acc; /* ResBlock1's inner conv; the fused units' ping-pong */
    }
    size_t post = T * (size_t)g->post.cout_p, pxp = (T + 6) * (size_t)g->post.cin_p;
    z.acc = post > z.acc ? post : z.acc;
    z.xp = pxp > z.xp ? pxp : z.xp;
    z.samples = T;
    return z;
}

int hifigan_gpu_worker_create(const hifigan_gpu_model_t *g, int max_batch, int max_frames,
                              hifigan_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const hifigan_config_t *c = &g->m->cfg;
    if (max_batch < 1 || max_batch > CUDA_MAX_LENS || max_frames < 1 || max_frames > MAX_FRAMES)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hifigan (gpu): max_batch %d (1..%d), max_frames %d (1..%d)", max_batch,
                       CUDA_MAX_LENS, max_frames, MAX_FRAMES);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    hifigan_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->c = c;
    w->dt = g->dt;
    w->max_batch = max_batch;
    w->max_frames = max_frames;
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    size_t B = (size_t)max_batch, es = ops_dtype_size(g->dt);
    sizes_t z = sizes_for(g, (size_t)fpad(g, max_frames));
    w->max_samples = z.samples;
    size_t n_mel = B * (size_t)fpad(g, max_frames) * c->num_mels,
           n_lens = (size_t)(c->n_ups + 1) * B;
    size_t n_r = z.act > z.poly ? z.act : z.poly;
    size_t total = al(n_mel * 4) + al(B * z.xp * es) + 2 * al(B * z.act * 4) + al(B * n_r * 4) +
                   al(B * z.acc * 4) + 2 * al(B * z.samples * 4) + al(n_lens * 4);
    int rc = HARK_OK;
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_lens, n_lens * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_mel, n_mel * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_audio, B * z.samples * 4)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream / pinned buffers");
        goto fail;
    }
    if (!(w->gc = graph_cache_create(GRAPH_SLOTS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memset(w->h_lens, 0, n_lens * 4);
    w->fused = HIFIGAN_FUSED;
    w->res16 = 1;
    for (int i = 0; i < c->n_ups; i++) {
        int ok = g->dt != OPS_F32;
        for (int k = 0; k < c->n_kernels; k++)
            for (int d = 0; d < c->n_dil; d++) {
                const gconv_t *c1 = &g->rb[i][k][0][d];
                ok = ok && cuda_conv1d_res_fits(g->ch_p[i + 1], c1->k, c1->dil,
                                                c->resblock == 1 ? g->rb[i][k][1][d].k : 0);
            }
        w->can_fuse[i] = ok;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)) != HARK_OK)
        goto fail;
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "hifigan (gpu): %zu MiB of scratch for batch %d x %d frames: %s", total >> 20,
                     max_batch, max_frames, cudaGetErrorString(e));
        goto fail;
    }
    w->bytes = total + ops_cuda_workspace_bytes() + n_mel * 4 + B * z.samples * 4;
    char *p = w->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)p, p += al(nbytes))
    TAKE(w->mel, float *, n_mel * 4);
    TAKE(w->xp, void *, B *z.xp *es);
    TAKE(w->x, float *, B *z.act * 4);
    TAKE(w->xs, float *, B *z.act * 4);
    TAKE(w->r, float *, B *n_r * 4);
    TAKE(w->acc, float *, B *z.acc * 4);
    TAKE(w->audio, float *, B *z.samples * 4);
    TAKE(w->pre, float *, B *z.samples * 4);
    TAKE(w->d_lens, int *, n_lens * 4);
#undef TAKE
    HARK_ASSERT((size_t)(p - (char *)w->mem) == total);
    *out = w;
    return HARK_OK;
fail:
    hifigan_gpu_worker_destroy(w);
    return rc;
}

/* ---- the forward ---------------------------------------------------------------------------- */

typedef struct {
    hifigan_gpu_stage_fn fn;
    void *user;
    const int *n_frames; /* host */
    int batch;
} dump_t;

static const int *lens_of(const hifigan_gpu_worker_t *w, int lvl)
{
    return w->d_lens + (size_t)lvl * w->max_batch;
}

/* Stage dump (tests, --dump-dir): buf (batch, t, cp) on the device, + bias (host, or NULL) ->
 * each item's (ch, len) channel-major. Synchronises. */
static int dump(hifigan_gpu_worker_t *w, const dump_t *d, const char *name, const void *buf,
                ops_dtype_t bt, int t, int cp, int ch, int lvl_mult, const float *bias,
                hark_err_t *err)
{
    if (!d || !d->fn)
        return HARK_OK;
    size_t n = (size_t)d->batch * t * cp, es = ops_dtype_size(bt);
    float *h = hark_malloc(sizeof(float) * n), *o = hark_malloc(sizeof(float) * (size_t)t * ch);
    cudaError_t e = h && o ? cudaMemcpyAsync(h, buf, n * es, cudaMemcpyDeviceToHost, w->stream)
                           : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess) {
        hark_free(h);
        hark_free(o);
        return cuda_err(err, e, "stage dump");
    }
    if (bt != OPS_F32) /* 16-bit values, widened in place from the end */
        for (size_t i = n; i-- > 0;) {
            uint16_t v = ((const uint16_t *)h)[i];
            h[i] = bt == OPS_F16 ? dtype_half_to_float(v) : dtype_bf16_to_float(v);
        }
    for (int b = 0; b < d->batch; b++) {
        int len = d->n_frames[b] * lvl_mult;
        for (int s = 0; s < len; s++)
            for (int i = 0; i < ch; i++)
                o[(size_t)i * len + s] = h[((size_t)b * t + s) * cp + i] + (bias ? bias[i] : 0.0f);
        d->fn(d->user, b, name, o, ch, len);
    }
    hark_free(h);
    hark_free(o);
    return HARK_OK;
}

/* mel (batch, F, num_mels) on the device and the lengths table -> audio (batch, T_L) */
static int enqueue_forward(hifigan_gpu_worker_t *w, const float *mel, int batch, int F,
                           const dump_t *d, hark_err_t *err)
{
    const hifigan_gpu_model_t *g = w->g;
    const hifigan_config_t *c = w->c;
    const ops_dtype_t dt = w->dt;
    const float slope = HIFIGAN_LRELU_SLOPE;
    cudaStream_t st = w->stream;
    int rc;
#define RUN(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)) != HARK_OK)                                                                 \
            return rc;                                                                             \
    } while (0)
#define MARK(i)                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = w->prof ? cudaEventRecord(w->ev[i], st) : cudaSuccess;                    \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_err(err, e_, "profile event");                                             \
    } while (0)
    MARK(0);
    /* conv_pre */
    const gconv_t *pc = &g->pre;
    RUN(cuda_conv1d_pad_mask_act(w->xp, dt, mel, OPS_F32, NULL, 1.0f, lens_of(w, 0), batch, F,
                                 c->num_mels, c->num_mels, pc->cin_p, pc->pad, pc->pad, st, err));
    RUN(cuda_conv1d(w->xs, 0.0f, w->xp, pc->w, dt, batch, F + 2 * pc->pad, pc->cin_p, pc->cout_p,
                    pc->k, 1, 1, w->ops, err));
    RUN(cuda_conv1d_act(w->xs, OPS_F32, w->xs, pc->b, batch * F, pc->cout_p, CONV1D_ACT_NONE, st,
                        err));
    RUN(dump(w, d, "conv_pre", w->xs, OPS_F32, F, pc->cout_p, c->ch0, 1, NULL, err));
    MARK(1);
    int T = F, mult = 1;
    char nm[32];
    const int dumping = d && d->fn;
    int xp_ready = 0; /* the last fused unit already wrote this upsampler's padded input */
    /* the last stage's last fused unit writes conv_post's input (the MRF mean, leaky ReLU'd) in
     * 16 bits; the fused units' MRF sums in 16 bits (a dump reads them widened) */
    const int post16 = w->fused && w->can_fuse[c->n_ups - 1] && w->res16;
    const int sum16 = w->res16;
    for (int i = 0; i < c->n_ups; i++) {
        const gconv_t *u = &g->ups[i];
        const int cin_p = g->ch_p[i], cp = g->ch_p[i + 1], ch = c->ch0 >> (i + 1);
        const int R = conv1d_transpose_pad_r(u->pad, u->stride), nq = T + R;
        const int fuse = w->fused && w->can_fuse[i];
        /* leaky ReLU, the polyphase conv, the crop with the bias — the fused units read the
         * uncropped output with the bias themselves, and write the next upsampler's input */
        if (!xp_ready)
            RUN(cuda_conv1d_pad_mask_act(w->xp, dt, w->xs, OPS_F32, NULL, slope, lens_of(w, i),
                                         batch, T, cin_p, cin_p, cin_p, u->k - 1, R, st, err));
        RUN(cuda_conv1d(w->r, 0.0f, w->xp, u->w, dt, batch, u->k - 1 + nq, cin_p, u->cout_p, u->k,
                        1, 1, w->ops, err));
        const int Tn = T * u->stride;
        mult *= u->stride;
        const int x_direct = fuse && !dumping;
        if (!x_direct)
            RUN(cuda_conv1d_crop_bias(w->x, OPS_F32, w->r, u->b, batch, Tn, cp, cp,
                                      (long long)nq * u->cout_p, u->pad, st, err));
        snprintf(nm, sizeof nm, "ups%d", i);
        RUN(dump(w, d, nm, w->x, OPS_F32, Tn, cp, ch, mult, NULL, err));
        MARK(2 + 2 * i);
        const int *lens = lens_of(w, i + 1);
        const size_t n = (size_t)batch * Tn * cp;
        conv1d_res_ext_t x_ext = {0}, next_ext = {0};
        if (x_direct) {
            x_ext.x_ld_b = (long long)nq * u->cout_p;
            x_ext.x_bias = u->b;
        }
        xp_ready = fuse && i + 1 < c->n_ups;
        if (post16 && i + 1 == c->n_ups) { /* conv_post reads only the items' rows */
            next_ext.next = w->xp;
            next_ext.next_ld_b = (long long)Tn * cp;
            next_ext.next_slope = HIFIGAN_LRELU_SLOPE_POST;
            next_ext.no_sum_store = !dumping;
        } else if (xp_ready) { /* the next upsampler's input: zeros, then the items' rows */
            const gconv_t *un = &g->ups[i + 1];
            const int tpn = un->k - 1 + Tn + conv1d_transpose_pad_r(un->pad, un->stride);
            next_ext.next = w->xp;
            next_ext.next_ld_b = (long long)tpn * cp;
            next_ext.next_off = un->k - 1;
            next_ext.next_slope = slope;
            next_ext.no_sum_store = !dumping;
            cudaError_t e = cudaMemsetAsync(w->xp, 0, (size_t)batch * tpn * cp * 2, st);
            if (e != cudaSuccess)
                return cuda_err(err, e, "upsampler input");
        }
        for (int k = 0; fuse && k < c->n_kernels; k++) {
            /* each dilation one unit: x -> r -> acc -> r ..., the last into the MRF mean */
            const float *src = x_direct ? w->r + (size_t)u->pad * cp : w->x;
            float *dst = w->r;
            for (int dd = 0; dd < c->n_dil; dd++) {
                const gconv_t *c1 = &g->rb[i][k][0][dd];
                const gconv_t *c2 = c->resblock == 1 ? &g->rb[i][k][1][dd] : NULL;
                int last = dd == c->n_dil - 1, keep = !last || (dumping && i == 0);
                int final = last && k == c->n_kernels - 1;
                float div = final ? (float)c->n_kernels : 1.0f;
                /* the first unit reads the upsampler's output: keep it (r) until the last
                 * resblock has read it; the others alternate acc, x */
                dst = dd % 2 ? w->acc : x_direct ? w->x : w->r;
                conv1d_res_ext_t ext = final && next_ext.next ? next_ext : (conv1d_res_ext_t){0};
                if (dd == 0) {
                    ext.x_ld_b = x_ext.x_ld_b;
                    ext.x_bias = x_ext.x_bias;
                }
                /* the residual between dilations in 16 bits; a resblock's input (the upsampler's
                 * output) and its last unit's out (only kept for a dump) stay FP32 */
                ext.x16 = w->res16 && dd > 0;
                ext.out16 = w->res16 && !last;
                ext.sum16 = sum16;
                RUN(cuda_conv1d_res(
                    keep ? dst : NULL, last ? w->xs : NULL, src, c1->w, c1->b, c1->k, c1->dil,
                    c2 ? c2->w : NULL, c2 ? c2->b : NULL, c2 ? c2->k : 0, dt, slope, lens, batch,
                    Tn, cp, k == 0, div, &ext,
                    ops_cuda_path(w->ops) != GPU_PATH_HOPPER ? 0
                    : w->fused == HIFIGAN_FUSED_WGMMA_ALL    ? 2
                                                             : w->fused == HIFIGAN_FUSED,
                    st, err));
                src = dst;
            }
            if (i == 0) {
                snprintf(nm, sizeof nm, "resblock%d", k);
                RUN(dump(w, d, nm, dst, OPS_F32, Tn, cp, ch, mult, NULL, err));
            }
        }
        for (int k = 0; !(w->fused && w->can_fuse[i]) && k < c->n_kernels; k++) {
            cudaError_t e = cudaMemcpyAsync(w->r, w->x, n * 4, cudaMemcpyDeviceToDevice, st);
            if (e != cudaSuccess)
                return cuda_err(err, e, "resblock copy");
            for (int dd = 0; dd < c->n_dil; dd++) {
                const gconv_t *c1 = &g->rb[i][k][0][dd];
                const float *pend = dd ? g->pb[i][k][dd - 1] : NULL;
                RUN(cuda_conv1d_pad_mask_act(w->xp, dt, w->r, OPS_F32, pend, slope, lens, batch, Tn,
                                             cp, cp, cp, c1->pad, c1->pad, st, err));
                if (c->resblock == 1) {
                    const gconv_t *c2 = &g->rb[i][k][1][dd];
                    RUN(cuda_conv1d(w->acc, 0.0f, w->xp, c1->w, dt, batch, Tn + 2 * c1->pad, cp, cp,
                                    c1->k, 1, c1->dil, w->ops, err));
                    RUN(cuda_conv1d_pad_mask_act(w->xp, dt, w->acc, OPS_F32, c1->b, slope, lens,
                                                 batch, Tn, cp, cp, cp, c2->pad, c2->pad, st, err));
                    RUN(cuda_conv1d(w->r, 1.0f, w->xp, c2->w, dt, batch, Tn + 2 * c2->pad, cp, cp,
                                    c2->k, 1, c2->dil, w->ops, err));
                } else {
                    RUN(cuda_conv1d(w->r, 1.0f, w->xp, c1->w, dt, batch, Tn + 2 * c1->pad, cp, cp,
                                    c1->k, 1, c1->dil, w->ops, err));
                }
            }
            const float *pend = g->pb[i][k][c->n_dil - 1];
            if (i == 0) {
                snprintf(nm, sizeof nm, "resblock%d", k);
                RUN(dump(w, d, nm, w->r, OPS_F32, Tn, cp, ch, mult, g->h_pb[i][k][c->n_dil - 1],
                         err));
            }
            RUN(cuda_conv1d_sum(w->xs, w->r, pend, k == 0,
                                k == c->n_kernels - 1 ? (float)c->n_kernels : 1.0f, batch * Tn, cp,
                                st, err));
        }
        snprintf(nm, sizeof nm, "mrf%d", i);
        RUN(dump(w, d, nm, w->xs, fuse && sum16 ? dt : OPS_F32, Tn, cp, ch, mult, NULL, err));
        MARK(3 + 2 * i);
        T = Tn;
    }
    /* leaky ReLU (torch's default slope), conv_post, tanh: one kernel (post16: the last fused
     * unit applied the leaky ReLU) */
    const gconv_t *po = &g->post;
    RUN(cuda_conv1d_post_tanh(w->audio, d && d->fn ? w->pre : NULL, post16 ? w->xp : w->xs,
                              post16 ? dt : OPS_F32, po->w, dt, g->post_b,
                              post16 ? 1.0f : HIFIGAN_LRELU_SLOPE_POST, lens_of(w, c->n_ups), batch,
                              T, po->cin_p, po->k, st, err));
    RUN(dump(w, d, "conv_post", w->pre, OPS_F32, T, 1, 1, mult, NULL, err));
    MARK(2 + 2 * c->n_ups);
#undef MARK
#undef RUN
    return HARK_OK;
}

/* the host lengths of every level, for `batch` items of n_frames */
static void set_lens(hifigan_gpu_worker_t *w, const int *n_frames, int batch)
{
    const hifigan_config_t *c = w->c;
    int B = w->max_batch;
    memset(w->h_lens, 0, (size_t)(c->n_ups + 1) * B * sizeof(int));
    for (int b = 0; b < batch; b++) {
        int len = n_frames[b];
        w->h_lens[b] = len;
        for (int i = 0; i < c->n_ups; i++) {
            len *= c->up_rate[i];
            w->h_lens[(size_t)(i + 1) * B + b] = len;
        }
    }
}

/* uploads (lengths; the mel when from the host), the forward, the audio back when to the host */
static int enqueue_all(hifigan_gpu_worker_t *w, const float *mel, int dev, int batch, int F,
                       const dump_t *d, hark_err_t *err)
{
    const hifigan_config_t *c = w->c;
    cudaError_t e =
        cudaMemcpyAsync(w->d_lens, w->h_lens, (size_t)(c->n_ups + 1) * w->max_batch * sizeof(int),
                        cudaMemcpyHostToDevice, w->stream);
    if (e == cudaSuccess && !dev)
        e = cudaMemcpyAsync(w->mel, w->h_mel, (size_t)batch * F * c->num_mels * sizeof(float),
                            cudaMemcpyHostToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "uploads");
    int rc = enqueue_forward(w, dev ? mel : w->mel, batch, F, d, err);
    size_t ns = (size_t)batch * hifigan_samples(w->g->m, F);
    if (!rc && !dev &&
        (e = cudaMemcpyAsync(w->h_audio, w->audio, ns * sizeof(float), cudaMemcpyDeviceToHost,
                             w->stream)) != cudaSuccess)
        rc = cuda_err(err, e, "audio copy");
    return rc;
}

typedef struct {
    hifigan_gpu_worker_t *w;
    const float *mel;
    int dev, batch, F;
} run_t;

static int enqueue_run(void *user, hark_err_t *err)
{
    run_t *r = user;
    return enqueue_all(r->w, r->mel, r->dev, r->batch, r->F, NULL, err);
}

/* one forward, through a graph when the shape was seen before (no dumps) */
static int forward(hifigan_gpu_worker_t *w, const float *mel, int dev, int batch, int F,
                   const dump_t *d, hark_err_t *err)
{
    if ((d && d->fn) || w->prof)
        return enqueue_all(w, mel, dev, batch, F, d, err);
    run_t r = {w, mel, dev, batch, F};
    graph_key_t key = {{batch, F, dev, (long long)(intptr_t)mel}};
    return w->graphs ? graph_cache_run(w->gc, &key, enqueue_run, &r, "hifigan (gpu)", err)
                     : enqueue_run(&r, err);
}

static int check_batch(hifigan_gpu_worker_t *w, const int *n_frames, int batch, int *F,
                       hark_err_t *err)
{
    if (batch < 1 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "hifigan (gpu): batch of %d, the worker takes %d",
                       batch, w->max_batch);
    *F = 0;
    for (int b = 0; b < batch; b++) {
        if (n_frames[b] < 1)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "hifigan (gpu): item %d: the mel has no frames", b);
        if (n_frames[b] > w->max_frames)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "hifigan (gpu): item %d: %d mel frames, the worker takes %d", b,
                           n_frames[b], w->max_frames);
        *F = n_frames[b] > *F ? n_frames[b] : *F;
    }
    return HARK_OK;
}

int hifigan_gpu_sync(hifigan_gpu_worker_t *w, hark_err_t *err)
{
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e != cudaSuccess ? cuda_err(err, e, "forward") : HARK_OK;
}

int hifigan_gpu_run(hifigan_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                    int batch, float *const *audio, hifigan_gpu_stage_fn stage, void *user,
                    hark_err_t *err)
{
    const hifigan_config_t *c = w->c;
    int F = 0, nm = c->num_mels;
    int rc = check_batch(w, n_frames, batch, &F, err);
    if (rc)
        return rc;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < (size_t)nm * n_frames[b]; i++)
            if (!isfinite(mel[b][i]))
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "hifigan (gpu): item %d: mel value %zu is NaN or infinite", b, i);
    cudaSetDevice(w->g->device);
    F = fpad(w->g, F);
    /* the previous run's copies are done (runs are synchronous): refill the pinned staging */
    set_lens(w, n_frames, batch);
    for (int b = 0; b < batch; b++) {
        float *dst = w->h_mel + (size_t)b * F * nm;
        int nf = n_frames[b];
        for (int s = 0; s < nf; s++)
            for (int i = 0; i < nm; i++)
                dst[(size_t)s * nm + i] = mel[b][(size_t)i * nf + s];
        memset(dst + (size_t)nf * nm, 0, sizeof(float) * (size_t)(F - nf) * nm);
    }
    dump_t d = {stage, user, n_frames, batch};
    rc = forward(w, NULL, 0, batch, F, &d, err);
    if (!rc)
        rc = hifigan_gpu_sync(w, err);
    if (rc)
        return rc;
    size_t T = hifigan_samples(w->g->m, F);
    for (int b = 0; b < batch; b++)
        memcpy(audio[b], w->h_audio + (size_t)b * T,
               sizeof(float) * hifigan_samples(w->g->m, n_frames[b]));
    return HARK_OK;
}

int hifigan_gpu_run_device(hifigan_gpu_worker_t *w, const float *d_mel, int src_rows, int row0,
                           int t, const int *n_frames, int batch, const float **d_audio,
                           hark_err_t *err)
{
    const hifigan_config_t *c = w->c;
    *d_audio = NULL;
    if (batch < 1 || batch > w->max_batch || t < 1 || t > w->max_frames || row0 < 0 ||
        src_rows < row0 + t)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "hifigan (gpu): batch %d x %d frames at row %d of %d: the worker takes %d x "
                       "%d",
                       batch, t, row0, src_rows, w->max_batch, w->max_frames);
    int any = 0;
    for (int b = 0; b < batch; b++) {
        if (n_frames[b] < 0 || n_frames[b] > t)
            return err_set(err, HARK_ERR_INVALID_ARG, "hifigan (gpu): item %d: %d frames of %d", b,
                           n_frames[b], t);
        any |= n_frames[b] > 0;
    }
    if (!any)
        return err_set(err, HARK_ERR_INVALID_ARG, "hifigan (gpu): no item has frames");
    cudaSetDevice(w->g->device);
    /* the lengths table is read by the previous run's graph: wait for it */
    int rc = hifigan_gpu_sync(w, err);
    if (rc)
        return rc;
    set_lens(w, n_frames, batch);
    size_t row = (size_t)c->num_mels * sizeof(float);
    int tp = fpad(w->g, t); /* rows t..tp of each item are past every length: never read */
    cudaError_t e = cudaMemcpy2DAsync(w->mel, (size_t)tp * row, d_mel + (size_t)row0 * c->num_mels,
                                      (size_t)src_rows * row, (size_t)t * row, (size_t)batch,
                                      cudaMemcpyDeviceToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "mel window copy");
    rc = forward(w, w->mel, 1, batch, tp, NULL, err);
    *d_audio = rc ? NULL : w->audio;
    return rc;
}

int hifigan_gpu_audio_to_host(hifigan_gpu_worker_t *w, int batch, int t, float *host,
                              hark_err_t *err)
{
    size_t ns = hifigan_samples(w->g->m, t), ld = hifigan_samples(w->g->m, fpad(w->g, t));
    cudaError_t e = cudaMemcpyAsync(w->h_audio, w->audio, (size_t)batch * ld * sizeof(float),
                                    cudaMemcpyDeviceToHost, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "audio copy");
    for (int b = 0; b < batch; b++)
        memcpy(host + (size_t)b * ns, w->h_audio + (size_t)b * ld, ns * sizeof(float));
    return HARK_OK;
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "hifigan: built without CUDA");
}

int hifigan_gpu_model_create(const hifigan_model_t *m, int device, ops_dtype_t dt,
                             hifigan_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void hifigan_gpu_model_destroy(hifigan_gpu_model_t *g) {}
size_t hifigan_gpu_model_bytes(const hifigan_gpu_model_t *g)
{
    return 0;
}
int hifigan_gpu_model_device(const hifigan_gpu_model_t *g)
{
    return -1;
}
const hifigan_model_t *hifigan_gpu_model_cpu(const hifigan_gpu_model_t *g)
{
    return NULL;
}
int hifigan_gpu_worker_create(const hifigan_gpu_model_t *g, int max_batch, int max_frames,
                              hifigan_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void hifigan_gpu_worker_destroy(hifigan_gpu_worker_t *w) {}
size_t hifigan_gpu_worker_bytes(const hifigan_gpu_worker_t *w)
{
    return 0;
}
int hifigan_gpu_worker_max_frames(const hifigan_gpu_worker_t *w)
{
    return 0;
}
int hifigan_gpu_worker_max_batch(const hifigan_gpu_worker_t *w)
{
    return 0;
}
void hifigan_gpu_set_graphs(hifigan_gpu_worker_t *w, int on) {}
void hifigan_gpu_set_fused(hifigan_gpu_worker_t *w, hifigan_fused_t mode) {}
void hifigan_gpu_set_res16(hifigan_gpu_worker_t *w, int on) {}
int hifigan_gpu_fused_stages(const hifigan_gpu_worker_t *w)
{
    return 0;
}
int hifigan_gpu_set_profile(hifigan_gpu_worker_t *w, int on, hark_err_t *err)
{
    return no_device(err);
}
int hifigan_gpu_profile(hifigan_gpu_worker_t *w, char names[][16], float *ms, hark_err_t *err)
{
    return 0;
}
int hifigan_gpu_run(hifigan_gpu_worker_t *w, const float *const *mel, const int *n_frames,
                    int batch, float *const *audio, hifigan_gpu_stage_fn stage, void *user,
                    hark_err_t *err)
{
    return no_device(err);
}
int hifigan_gpu_run_device(hifigan_gpu_worker_t *w, const float *d_mel, int src_rows, int row0,
                           int t, const int *n_frames, int batch, const float **d_audio,
                           hark_err_t *err)
{
    *d_audio = NULL;
    return no_device(err);
}
int hifigan_gpu_audio_to_host(hifigan_gpu_worker_t *w, int batch, int t, float *host,
                              hark_err_t *err)
{
    return no_device(err);
}
int hifigan_gpu_sync(hifigan_gpu_worker_t *w, hark_err_t *err)
{
    return no_device(err);
}
void *hifigan_gpu_stream(const hifigan_gpu_worker_t *w)
{
    return NULL;
}

#endif
