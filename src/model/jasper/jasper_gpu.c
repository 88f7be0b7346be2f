/* jasper_gpu.c — Jasper / QuartzNet on the GPU (jasper_gpu.h); the CPU reference is jasper.c.
 * Tests: tests/model/jasper/test_jasper_gpu.c
 *
 * The batch stays padded: (batch, T, C) time-major buffers, C rounded up to a multiple of 8 (the
 * extra channels have zero weights and biases, so they stay 0 through ReLU / hardtanh). Every
 * conv reads its input through the mask of its utterance's length, as DLE's MaskedConv1d: a
 * non-separable conv from a zero-padded, masked copy (cuda_conv1d_pad_mask) by an implicit GEMM
 * over all taps (16-bit, dilation 1) or one GEMM per tap; a separable one through the depthwise
 * kernel (masked input and output) and a pointwise GEMM. Sub-blocks whose output is ReLU'd at once
 * fuse bias + ReLU into the GEMM (16-bit); the others accumulate in FP32 — the last sub-block of a
 * residual block with every pane's 1x1 GEMM added into the same accumulator — and then one pass
 * applies the summed biases and the activation. A block's output is masked in place once made
 * (its later readers, the panes, read it masked) except the last block's, which the unmasked CTC
 * head reads on every frame as DLE does. Lengths reach the kernels through a device table, one row
 * per length "level" (the features, the model input, and after each strided conv), copied from a
 * pinned host buffer inside the recorded graph.
 */
#include "model/jasper/jasper_gpu.h"

#include "model/jasper/jasper_impl.h"

#include <math.h>

/* multiply-adds of the convs and the head (2 · this = FLOPs), on the real channel counts */
double jasper_macs(const jasper_model_t *m, int t_in)
{
    const jasper_config_t *c = &m->cfg;
    double macs = 0;
    int t = t_in;
    for (int l = 0; l < c->n_blocks; l++) {
        const jasper_block_cfg_t *b = &c->blocks[l];
        int t0 = t;
        for (int r = 0; r < b->repeat; r++) {
            const jconv_t *cv = &m->layers[l].sub[r];
            int pad = (cv->k / 2) * cv->dil;
            t = (t + 2 * pad - cv->dil * (cv->k - 1) - 1) / cv->stride + 1;
            macs += (double)t * cv->cout * cv->cin * cv->kw;
            if (cv->dw)
                macs += (double)t * cv->cin * cv->k;
        }
        for (int p = 0; p < b->n_panes; p++)
            macs += (double)t0 * b->filters * b->pane_ch[p];
    }
    return macs + (double)t * m->vocab * m->enc_dim;
}

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "dsp/features_gpu.h"
#include "dsp/frontend_gpu.h"
#include "gpu/gpu_arch.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "hark.h"
#include "ops/conv1d.h"

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GRAPH_SLOTS 32
#define MAX_LEVELS (2 + JASPER_MAX_BLOCKS * 4)

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "jasper (gpu): %s: %s", what, cudaGetErrorString(e));
}

static int pad8(int c)
{
    return (c + 7) & ~7;
}

static size_t al(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

typedef struct {
    int cin, cout, cin_p, cout_p, k, stride, dil, pad;
    const void *w;   /* dt: (cout_p, k, cin_p) non-separable; (cout_p, cin_p) pointwise */
    const float *dw; /* (k, cin_p) depthwise taps, or NULL */
    const float *b;  /* (cout_p) folded bias; the last sub-block's includes every pane's bias */
    const void *b_h; /* the same in dt (cuBLASLt's fused bias is the output's type) */
    int lvl_in;      /* the length level of its input */
} gconv_t;

typedef struct {
    gconv_t *sub; /* (repeat) */
    gconv_t *res; /* (n_panes) 1x1, b unused */
    /* cat_block's blocks (16-bit): [pane | last pointwise] (cout_p, kcat = pane cin_p + last
     * cin_p), one GEMM over the pane input and the last depthwise output side by side; else NULL */
    const void *wcat;
    int kcat;
} gblock_t;

struct jasper_gpu_model {
    const jasper_model_t *m;
    int device;
    ops_dtype_t dt;
    gblock_t blocks[JASPER_MAX_BLOCKS];
    gconv_t *convs;
    int n_levels; /* rows of the length table */
    int blk_lvl_out[JASPER_MAX_BLOCKS];
    int f_p, enc_p, vocab, vocab_p; /* vocab_p: rounded up to 8, zero rows (aligned GEMM rows) */
    const void *dec_w;              /* dt (vocab_p, enc_p) */
    const float *dec_b;             /* (vocab_p) */
    feat_gpu_t *fgpu;
    void *dmat, *dflt; /* the dt block of matrices, the float block */
    size_t bytes;
};

int jasper_gpu_model_device(const jasper_gpu_model_t *g)
{
    return g->device;
}

size_t jasper_gpu_model_bytes(const jasper_gpu_model_t *g)
{
    return g->bytes;
}

void jasper_gpu_model_destroy(jasper_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    feat_gpu_destroy(g->fgpu);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g->convs);
    hark_free(g);
}

/* one conv's device layout from the folded CPU conv; pane_b: biases added into b (or NULL) */
static void stage_conv(weight_stage_t *s, gconv_t *g, const jconv_t *c, const jconv_t *panes,
                       int n_panes, size_t *off_w, size_t *off_dw, size_t *off_b, size_t *off_bh)
{
    g->cin = c->cin;
    g->cout = c->cout;
    g->cin_p = pad8(c->cin);
    g->cout_p = pad8(c->cout);
    g->k = c->k;
    g->stride = c->stride;
    g->dil = c->dil;
    g->pad = c->pad;
    size_t nw = (size_t)g->cout_p * c->kw * g->cin_p;
    *off_w = weight_stage_take(&s->n_mat, nw);
    *off_dw = c->dw ? weight_stage_take(&s->n_flt, (size_t)c->k * g->cin_p) : (size_t)-1;
    *off_b = weight_stage_take(&s->n_flt, (size_t)g->cout_p);
    *off_bh = weight_stage_take(&s->n_mat, (size_t)g->cout_p);
    if (s->sizing)
        return;
    float *w = s->mat + *off_w;
    memset(w, 0, sizeof(float) * nw);
    for (int o = 0; o < c->cout; o++) /* (kw, cout, cin) -> (cout_p, kw, cin_p) */
        for (int j = 0; j < c->kw; j++)
            for (int i = 0; i < c->cin; i++)
                w[((size_t)o * c->kw + j) * g->cin_p + i] =
                    c->w[((size_t)j * c->cout + o) * c->cin + i];
    if (c->dw) {
        float *d = s->flt + *off_dw;
        memset(d, 0, sizeof(float) * (size_t)c->k * g->cin_p);
        for (int j = 0; j < c->k; j++)
            for (int i = 0; i < c->cin; i++)
                d[(size_t)j * g->cin_p + i] = c->dw[(size_t)j * c->cin + i];
    }
    float *b = s->flt + *off_b;
    memset(b, 0, sizeof(float) * (size_t)g->cout_p);
    for (int o = 0; o < c->cout; o++) {
        double v = c->b[o];
        for (int p = 0; p < n_panes; p++)
            v += panes[p].b[o];
        b[o] = (float)v;
    }
    memcpy(s->mat + *off_bh, b, sizeof(float) * (size_t)g->cout_p);
}

/* offsets of every view, then (second pass) the host images */
typedef struct {
    size_t w, dw, b, bh;
} goff_t;

/* Whether block l's residual runs as one GEMM over [pane input | last depthwise output] (16-bit,
 * ReLU, one pane, a separable last sub-block, no stride inside the block; no dense block in the
 * model, whose later panes would read this block's output unmasked): QuartzNet's blocks. Else the
 * pointwise GEMM and the pane's accumulate in FP32 and a pass applies bias and activation. */
static int cat_block(const jasper_model_t *m, int l, ops_dtype_t dt)
{
    const jasper_config_t *c = &m->cfg;
    const jasper_block_cfg_t *b = &c->blocks[l];
    if (dt == OPS_F32 || c->act != JASPER_ACT_RELU || b->n_panes != 1 ||
        !m->layers[l].sub[b->repeat - 1].dw || m->layers[l].res[0].kw != 1)
        return 0;
    for (int i = 0; i < c->n_blocks; i++)
        if (c->blocks[i].dense)
            return 0;
    for (int r = 0; r < b->repeat; r++)
        if (m->layers[l].sub[r].stride != 1)
            return 0;
    return 1;
}

static void stage_all(weight_stage_t *s, jasper_gpu_model_t *g, goff_t *offs, size_t *cat,
                      size_t *dec_w, size_t *dec_b)
{
    const jasper_model_t *m = g->m;
    const jasper_config_t *c = &m->cfg;
    int i = 0;
    for (int l = 0; l < c->n_blocks; l++) {
        const jasper_block_cfg_t *b = &c->blocks[l];
        const jlayer_t *L = &m->layers[l];
        for (int r = 0; r < b->repeat; r++, i++) {
            int last = r == b->repeat - 1;
            stage_conv(s, &g->convs[i], &L->sub[r], L->res, last ? b->n_panes : 0, &offs[i].w,
                       &offs[i].dw, &offs[i].b, &offs[i].bh);
        }
        for (int p = 0; p < b->n_panes; p++, i++)
            stage_conv(s, &g->convs[i], &L->res[p], NULL, 0, &offs[i].w, &offs[i].dw, &offs[i].b,
                       &offs[i].bh);
        cat[l] = (size_t)-1;
        if (!cat_block(m, l, g->dt))
            continue;
        /* [pane | last pointwise] from the two images just staged (rows cout_p) */
        const gconv_t *gl = &g->convs[i - 2], *gp = &g->convs[i - 1];
        const size_t kc = (size_t)gp->cin_p + (size_t)gl->cin_p;
        cat[l] = weight_stage_take(&s->n_mat, (size_t)gl->cout_p * kc);
        if (s->sizing)
            continue;
        float *d = s->mat + cat[l];
        const float *wp = s->mat + offs[i - 1].w, *wl = s->mat + offs[i - 2].w;
        for (int o = 0; o < gl->cout_p; o++) {
            memcpy(d + o * kc, wp + (size_t)o * gp->cin_p, sizeof(float) * (size_t)gp->cin_p);
            memcpy(d + o * kc + gp->cin_p, wl + (size_t)o * gl->cin_p,
                   sizeof(float) * (size_t)gl->cin_p);
        }
    }
    size_t nw = (size_t)g->vocab_p * g->enc_p;
    *dec_w = weight_stage_take(&s->n_mat, nw);
    *dec_b = weight_stage_take(&s->n_flt, (size_t)g->vocab_p);
    if (s->sizing)
        return;
    float *w = s->mat + *dec_w;
    memset(w, 0, sizeof(float) * nw);
    memset(s->flt + *dec_b, 0, sizeof(float) * (size_t)g->vocab_p);
    for (int v = 0; v < m->vocab; v++)
        memcpy(w + (size_t)v * g->enc_p, m->dec_w + (size_t)v * m->enc_dim,
               sizeof(float) * (size_t)m->enc_dim);
    memcpy(s->flt + *dec_b, m->dec_b, sizeof(float) * (size_t)m->vocab);
}

typedef struct {
    jasper_gpu_model_t *g;
    goff_t *offs;
    size_t *cat, *dec_w, *dec_b;
} fill_t;

static void fill(weight_stage_t *s, void *user)
{
    fill_t *f = user;
    stage_all(s, f->g, f->offs, f->cat, f->dec_w, f->dec_b);
}

int jasper_gpu_model_create(const jasper_model_t *m, int device, ops_dtype_t dt,
                            jasper_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    const jasper_config_t *c = &m->cfg;
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "jasper (gpu): element type %d", (int)dt);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    jasper_gpu_model_t *g = hark_calloc(1, sizeof *g);
    size_t n_convs = 0;
    for (int l = 0; l < c->n_blocks; l++)
        n_convs += (size_t)c->blocks[l].repeat + (size_t)c->blocks[l].n_panes;
    if (!g || !(g->convs = hark_calloc(n_convs, sizeof *g->convs))) {
        hark_free(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    g->f_p = pad8(c->n_filt);
    g->enc_p = pad8(m->enc_dim);
    g->vocab = m->vocab;
    g->vocab_p = pad8(m->vocab);
    /* views into convs; length levels: 0 the features, 1 the model input, +1 per strided conv;
     * a pane must read a tensor of its block's input length (no strided block in between) */
    int lvl = 1, xs_lvl[JASPER_MAX_BLOCKS + 1], n_xs = 1, i = 0, rc = HARK_OK;
    xs_lvl[0] = 1;
    for (int l = 0; l < c->n_blocks; l++) {
        const jasper_block_cfg_t *b = &c->blocks[l];
        g->blocks[l].sub = &g->convs[i];
        i += b->repeat;
        g->blocks[l].res = &g->convs[i];
        i += b->n_panes;
        for (int p = 0; p < b->n_panes; p++)
            if (p >= n_xs || xs_lvl[p] != lvl)
                rc = err_set(err, HARK_ERR_UNSUPPORTED,
                             "jasper (gpu): block %d's residual pane %d reads a tensor of another "
                             "length than the block's input",
                             l, p);
        for (int r = 0; r < b->repeat; r++) {
            g->blocks[l].sub[r].lvl_in = lvl;
            if (b->stride > 1)
                lvl++;
        }
        for (int p = 0; p < b->n_panes; p++)
            g->blocks[l].res[p].lvl_in = g->blocks[l].sub[0].lvl_in;
        g->blk_lvl_out[l] = lvl;
        if (b->dense)
            xs_lvl[n_xs++] = lvl;
        else
            xs_lvl[0] = lvl, n_xs = 1;
    }
    g->n_levels = lvl + 1;
    if (rc || g->n_levels > MAX_LEVELS) {
        if (!rc)
            rc = err_set(err, HARK_ERR_UNSUPPORTED, "jasper (gpu): %d strided convs", lvl - 1);
        jasper_gpu_model_destroy(g);
        return rc;
    }
    /* the weights: sizes, host images, one upload each, the matrices cast to dt */
    goff_t *offs = hark_calloc(n_convs, sizeof *offs);
    size_t dec_w = 0, dec_b = 0, es = ops_dtype_size(dt), cat[JASPER_MAX_BLOCKS];
    if (!offs) {
        jasper_gpu_model_destroy(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    fill_t fl = {g, offs, cat, &dec_w, &dec_b};
    if ((rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, NULL,
                                  "jasper (gpu)", err)))
        goto done;
    for (size_t k = 0; k < n_convs; k++) {
        gconv_t *gc = &g->convs[k];
        gc->w = (const char *)g->dmat + offs[k].w * es;
        gc->dw = offs[k].dw == (size_t)-1 ? NULL : (const float *)g->dflt + offs[k].dw;
        gc->b = (const float *)g->dflt + offs[k].b;
        gc->b_h = (const char *)g->dmat + offs[k].bh * es;
    }
    for (int l = 0; l < c->n_blocks; l++) {
        gblock_t *gb = &g->blocks[l];
        if (cat[l] == (size_t)-1)
            continue;
        const gconv_t *gl = &gb->sub[c->blocks[l].repeat - 1];
        gb->wcat = (const char *)g->dmat + cat[l] * es;
        gb->kcat = gb->res[0].cin_p + gl->cin_p;
    }
    g->dec_w = (const char *)g->dmat + dec_w * es;
    g->dec_b = (const float *)g->dflt + dec_b;
    rc = feat_gpu_create(m->feat, &g->fgpu, err);
done:
    hark_free(offs);
    if (rc) {
        jasper_gpu_model_destroy(g);
        return rc;
    }
    *out = g;
    return HARK_OK;
}

/* ---- workers -------------------------------------------------------------------------------- */

struct jasper_gpu_worker {
    const jasper_gpu_model_t *g;
    const jasper_model_t *m;
    ops_dtype_t dt;
    int h16;
    int max_batch, max_t_in, max_t_out;
    size_t max_samples;
    cudaStream_t stream;
    ops_cuda_t *ops;
    frontend_gpu_t *fe;
    void *mem;
    size_t bytes;
    void *x0;                      /* (B, T_in, f_p) dt: the model input */
    void *outs[JASPER_MAX_BLOCKS]; /* (B, T_l, C_l) dt each block's output */
    void *tmp[2];                  /* (B, T, C) dt: sub-block outputs */
    void *pad;                     /* (B, T + 2 pad, C) dt: a conv's masked, zero-padded input */
    void *dwb; /* (B, T, C) dt: a depthwise conv's output; (B, T, kcat): a cat block's GEMM input */
    float *acc;    /* (B, T, C) float: the accumulator */
    float *logits; /* (B · T_out, vocab_p) */
    float *logp;   /* (B · T_out, V): only for jasper_gpu_run_opts_t.logp */
    int *d_ids;    /* (B · T_out) */
    float *d_best; /* (B · T_out) */
    int *d_lens;   /* (n_levels, max_batch) */
    int *h_lens;   /* pinned, as d_lens */
    int *h_ids;    /* pinned (B · T_out) */
    float *h_best; /* pinned (B · T_out) */
    cudaEvent_t lens_ev;
    int graphs;
    graph_cache_t *gc; /* GRAPH_SLOTS forwards by (batch, t_in, want_logp, feats) */
    /* the shape of the last encode, for the copy-back */
    int last_batch, last_t_out;
};

void jasper_gpu_worker_destroy(jasper_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    graph_cache_destroy(w->gc);
    frontend_gpu_destroy(w->fe);
    ops_cuda_destroy(w->ops);
    cudaFree(w->mem);
    cudaFreeHost(w->h_lens);
    cudaFreeHost(w->h_ids);
    cudaFreeHost(w->h_best);
    if (w->lens_ev)
        cudaEventDestroy(w->lens_ev);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

void jasper_gpu_set_graphs(jasper_gpu_worker_t *w, int on)
{
    if (!on)
        graph_cache_clear(w->gc);
    w->graphs = on != 0;
}

size_t jasper_gpu_worker_bytes(const jasper_gpu_worker_t *w)
{
    return w->bytes;
}

const char *jasper_gpu_path_name(const jasper_gpu_worker_t *w)
{
    return gpu_path_name((gpu_path_t)ops_cuda_path(w->ops));
}

int jasper_gpu_worker_create(const jasper_gpu_model_t *g, int max_batch, double max_seconds,
                             jasper_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const jasper_model_t *m = g->m;
    const jasper_config_t *c = &m->cfg;
    if (max_batch < 1 || max_batch > CUDA_MAX_LENS || !(max_seconds > 0) || max_seconds > 24 * 3600)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "jasper (gpu): max_batch %d (1..%d), max_seconds %g", max_batch,
                       CUDA_MAX_LENS, max_seconds);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    jasper_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->m = m;
    w->dt = g->dt;
    w->h16 = g->dt != OPS_F32;
    w->max_batch = max_batch;
    w->max_samples = (size_t)ceil(max_seconds * c->sample_rate);
    w->max_t_in = jasper_frames_in(m, w->max_samples);
    w->max_t_out = jasper_frames_out(m, w->max_t_in);
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    /* sizes (elements) for the largest input */
    size_t B = (size_t)max_batch, es = ops_dtype_size(g->dt);
    size_t n_out[JASPER_MAX_BLOCKS], n_tmp = 0, n_pad = 0, n_dwb = 0;
    int t = w->max_t_in;
    for (int l = 0; l < c->n_blocks; l++) {
        const gblock_t *gb = &g->blocks[l];
        if (gb->wcat && (size_t)t * gb->kcat > n_dwb)
            n_dwb = (size_t)t * gb->kcat;
        for (int r = 0; r < c->blocks[l].repeat; r++) {
            const gconv_t *gc = &gb->sub[r];
            size_t padded = (size_t)(t + 2 * gc->pad) * gc->cin_p;
            n_pad = padded > n_pad ? padded : n_pad;
            if ((size_t)t * gc->cin_p > n_tmp)
                n_tmp = (size_t)t * gc->cin_p;
            t = conv1d_len(t, gc->k, gc->stride, gc->dil);
            if ((size_t)t * gc->cout_p > n_tmp)
                n_tmp = (size_t)t * gc->cout_p;
        }
        n_out[l] = (size_t)t * gb->sub[c->blocks[l].repeat - 1].cout_p;
    }
    n_dwb = n_dwb > n_tmp ? n_dwb : n_tmp;
    size_t rows_out = B * (size_t)w->max_t_out, V = (size_t)g->vocab_p;
    size_t total = al(B * w->max_t_in * g->f_p * es) + 2 * al(B * n_tmp * es) + al(B * n_pad * es) +
                   al(B * n_dwb * es) + al(B * n_tmp * 4) + 2 * al(rows_out * V * 4) +
                   2 * al(rows_out * 4) + al((size_t)g->n_levels * B * 4);
    for (int l = 0; l < c->n_blocks; l++)
        total += al(B * n_out[l] * es);
    int rc = HARK_OK;
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&w->lens_ev, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_lens, (size_t)g->n_levels * B * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_ids, rows_out * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_best, rows_out * 4)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream / pinned buffers");
        goto fail;
    }
    if (!(w->gc = graph_cache_create(GRAPH_SLOTS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)) != HARK_OK)
        goto fail;
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "jasper (gpu): %zu MiB of scratch for batch %d x %.1f s: %s", total >> 20,
                     max_batch, max_seconds, cudaGetErrorString(e));
        goto fail;
    }
    w->bytes = total + ops_cuda_workspace_bytes();
    char *p = w->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)p, p += al(nbytes))
    TAKE(w->x0, void *, B * w->max_t_in * g->f_p * es);
    for (int l = 0; l < c->n_blocks; l++)
        TAKE(w->outs[l], void *, B *n_out[l] * es);
    TAKE(w->tmp[0], void *, B *n_tmp *es);
    TAKE(w->tmp[1], void *, B *n_tmp *es);
    TAKE(w->pad, void *, B *n_pad *es);
    TAKE(w->dwb, void *, B *n_dwb *es);
    TAKE(w->acc, float *, B *n_tmp * 4);
    TAKE(w->logits, float *, rows_out *V * 4);
    TAKE(w->logp, float *, rows_out *V * 4);
    TAKE(w->d_ids, int *, rows_out * 4);
    TAKE(w->d_best, float *, rows_out * 4);
    TAKE(w->d_lens, int *, (size_t)g->n_levels *B * 4);
#undef TAKE
    HARK_ASSERT((size_t)(p - (char *)w->mem) == total);
    rc = frontend_gpu_create(m->feat, g->fgpu, max_batch, w->max_samples,
                             w->max_t_in - c->pad_leading, g->device, &w->fe, err);
    if (rc)
        goto fail;
    *out = w;
    return HARK_OK;
fail:
    jasper_gpu_worker_destroy(w);
    return rc;
}

/* ---- the forward ---------------------------------------------------------------------------- */

static const int *lens_of(const jasper_gpu_worker_t *w, int lvl)
{
    return w->d_lens + (size_t)lvl * w->max_batch;
}

/* acc (rows, cout_p) = beta · acc + x (rows, cin_p) · wᵀ */
static int pointwise(jasper_gpu_worker_t *w, float *acc, float beta, const void *x,
                     const gconv_t *gc, int rows, hark_err_t *err)
{
    if (w->h16) {
        cuda_epi_t e = {.mode = CUDA_EPI_RESID32,
                        .out = acc,
                        .ldo = gc->cout_p,
                        .alpha = 1.0f,
                        .beta = beta,
                        .dt = w->dt};
        return cuda_hgemm(&e, x, gc->cin_p, gc->w, rows, gc->cout_p, gc->cin_p, w->ops, err);
    }
    return cuda_gemm(acc, OPS_F32, x, gc->w, OPS_F32, rows, gc->cout_p, gc->cin_p, gc->cin_p,
                     gc->cin_p, gc->cout_p, 1, 1.0f, beta, 1, 0, 0, 0, w->ops, err);
}

/* the 16-bit epilogue dst (rows, cout_p) = ReLU(acc + b) of a sub-block's GEMM */
static cuda_epi_t relu_epi(const jasper_gpu_worker_t *w, const gconv_t *gc, void *dst)
{
    cuda_epi_t e = {.mode = CUDA_EPI_F16,
                    .act = CUDA_ACT_RELU,
                    .bias = gc->b,
                    .bias_h = gc->b_h,
                    .out = dst,
                    .ldo = gc->cout_p,
                    .alpha = 1.0f,
                    .dt = w->dt};
    return e;
}

/* a cat block's last sub-block: dst (B, t, cout_p) = ReLU([pane_x | depthwise(x)] · wcatᵀ + b),
 * both halves masked, side by side in dwb */
static int sub_block_cat(jasper_gpu_worker_t *w, void *dst, const void *x, int t, const gconv_t *gc,
                         const gblock_t *gb, const void *pane_x, int batch, hark_err_t *err)
{
    const int masks = w->m->cfg.conv_masks, pp = gb->res[0].cin_p;
    /* the pane's input first: its copy zeroes the rest of each row, which the depthwise fills */
    int rc = cuda_conv1d_pad_mask(w->dwb, w->dt, pane_x, w->dt,
                                  masks ? lens_of(w, gb->res[0].lvl_in) : NULL, batch, t, pp, pp,
                                  gb->kcat, 0, 0, w->stream, err);
    if (!rc)
        rc = cuda_conv1d_depthwise((char *)w->dwb + (size_t)pp * ops_dtype_size(w->dt), x, w->dt,
                                   gc->dw, masks ? lens_of(w, gc->lvl_in) : NULL, batch, t,
                                   gc->cin_p, gc->k, 1, gc->dil, gb->kcat, w->stream, err);
    if (rc)
        return rc;
    cuda_epi_t e = relu_epi(w, gc, dst);
    return cuda_hgemm(&e, w->dwb, gb->kcat, gb->wcat, batch * t, gc->cout_p, gb->kcat, w->ops, err);
}

/* one sub-block: dst (B, t_out, cout_p) = act(conv(x (B, t, cin_p)) [+ panes] + b); x_masked: x
 * is zero past each utterance's length already (a block's input) */
static int sub_block(jasper_gpu_worker_t *w, void *dst, const void *x, int x_masked, int t,
                     const gconv_t *gc, const gconv_t *panes, void *const *pane_in, int n_panes,
                     int batch, hark_err_t *err)
{
    const jasper_config_t *c = &w->m->cfg;
    const int t_out = conv1d_len(t, gc->k, gc->stride, gc->dil), rows = batch * t_out;
    const int masks = c->conv_masks;
    const int *lens = masks ? lens_of(w, gc->lvl_in) : NULL;
    const conv1d_act_t act = c->act == JASPER_ACT_RELU ? CONV1D_ACT_RELU : CONV1D_ACT_HARDTANH;
    /* bias + ReLU in the GEMM's epilogue (16-bit, nothing to add first) */
    const int fuse = w->h16 && act == CONV1D_ACT_RELU && n_panes == 0;
    int rc;
    if (gc->dw) { /* depthwise (masked in and out), then the pointwise GEMM */
        if ((rc = cuda_conv1d_depthwise(w->dwb, x, w->dt, gc->dw, lens, batch, t, gc->cin_p, gc->k,
                                        gc->stride, gc->dil, gc->cin_p, w->stream, err)))
            return rc;
        if (fuse) {
            cuda_epi_t e = relu_epi(w, gc, dst);
            return cuda_hgemm(&e, w->dwb, gc->cin_p, gc->w, rows, gc->cout_p, gc->cin_p, w->ops,
                              err);
        }
        rc = pointwise(w, w->acc, 0.0f, w->dwb, gc, rows, err);
    } else if (fuse && gc->k == 1 && gc->stride == 1 && (x_masked || !masks)) {
        /* a 1x1 conv of a masked input (QuartzNet's C3): a plain GEMM, no padded copy */
        cuda_epi_t e = relu_epi(w, gc, dst);
        return cuda_hgemm(&e, x, gc->cin_p, gc->w, rows, gc->cout_p, gc->cin_p, w->ops, err);
    } else {
        const int tp = t + 2 * gc->pad;
        if ((rc = cuda_conv1d_pad_mask(w->pad, w->dt, x, w->dt, lens, batch, t, gc->cin_p,
                                       gc->cin_p, gc->cin_p, gc->pad, gc->pad, w->stream, err)))
            return rc;
        if (fuse && gc->dil == 1) {
            cuda_epi_t e = relu_epi(w, gc, dst);
            return cuda_hconv2d(&e, w->pad, gc->w, batch, gc->cin_p, tp, 1, gc->cout_p, gc->k, 1,
                                gc->stride, w->ops, err);
        }
        rc = cuda_conv1d(w->acc, 0.0f, w->pad, gc->w, w->dt, batch, tp, gc->cin_p, gc->cout_p,
                         gc->k, gc->stride, gc->dil, w->ops, err);
    }
    /* the panes: 1x1 convs of the block's earlier outputs (masked in place when made) */
    for (int p = 0; p < n_panes && !rc; p++)
        rc = pointwise(w, w->acc, 1.0f, pane_in[p], &panes[p], rows, err);
    if (!rc)
        rc = cuda_conv1d_act(dst, w->dt, w->acc, gc->b, rows, gc->cout_p, act, w->stream, err);
    return rc;
}

/* everything after the lengths upload: model input, blocks, head, argmax */
static int enqueue_forward(jasper_gpu_worker_t *w, const float *d_feats, int batch, int t_in,
                           int want_logp, hark_err_t *err)
{
    const jasper_gpu_model_t *g = w->g;
    const jasper_model_t *m = w->m;
    const jasper_config_t *c = &m->cfg;
    const int P = c->pad_leading;
    int rc = cuda_conv1d_pad_mask(w->x0, w->dt, d_feats, OPS_F32, lens_of(w, 0), batch, t_in - P,
                                  c->n_filt, c->n_filt, g->f_p, P, 0, w->stream, err);
    void *xs[JASPER_MAX_BLOCKS + 1];
    int n_xs = 1, t = t_in;
    xs[0] = w->x0;
    const void *x = w->x0;
    int x_masked = 1; /* the block input is zero past the lengths (the model input is) */
    for (int l = 0; l < c->n_blocks && !rc; l++) {
        const jasper_block_cfg_t *b = &c->blocks[l];
        const gblock_t *gb = &g->blocks[l];
        int tc = t;
        for (int r = 0; r < b->repeat && !rc; r++) {
            int last = r == b->repeat - 1;
            void *dst = last ? w->outs[l] : w->tmp[r % 2];
            const gconv_t *gc = &gb->sub[r];
            if (last && gb->wcat)
                rc = sub_block_cat(w, dst, x, tc, gc, gb, xs[0], batch, err);
            else
                rc = sub_block(w, dst, x, r == 0 && x_masked, tc, gc, gb->res, xs,
                               last ? b->n_panes : 0, batch, err);
            tc = conv1d_len(tc, gc->k, gc->stride, gc->dil);
            x = dst;
        }
        int cout_p = gb->sub[b->repeat - 1].cout_p;
        /* the panes read it masked (a cat block's pane copy masks it itself) */
        x_masked = !c->conv_masks;
        if (!rc && l < c->n_blocks - 1 && c->conv_masks && !gb->wcat) {
            rc = cuda_conv1d_pad_mask(w->outs[l], w->dt, w->outs[l], w->dt,
                                      lens_of(w, g->blk_lvl_out[l]), batch, tc, cout_p, cout_p,
                                      cout_p, 0, 0, w->stream, err);
            x_masked = 1;
        }
        if (b->dense)
            xs[n_xs++] = w->outs[l];
        else
            xs[0] = w->outs[l], n_xs = 1;
        t = tc;
    }
    if (rc)
        return rc;
    /* CTC head on every frame (unmasked, as DLE), then log-softmax + argmax per frame over the
     * first V of each row's Vp logits */
    const int rows = batch * t, V = m->vocab, Vp = g->vocab_p;
    if (w->h16) {
        cuda_epi_t e = {.mode = CUDA_EPI_F32,
                        .bias = g->dec_b,
                        .out = w->logits,
                        .ldo = Vp,
                        .alpha = 1.0f,
                        .dt = w->dt};
        rc = cuda_hgemm(&e, x, g->enc_p, g->dec_w, rows, Vp, g->enc_p, w->ops, err);
    } else {
        rc = cuda_gemm(w->logits, OPS_F32, x, g->dec_w, OPS_F32, rows, Vp, g->enc_p, g->enc_p,
                       g->enc_p, Vp, 1, 1.0f, 0.0f, 1, 0, 0, 0, w->ops, err);
        if (!rc)
            rc = cuda_bias_act(w->logits, OPS_F32, w->logits, g->dec_b, rows, Vp, CUDA_ACT_NONE,
                               w->stream, err);
    }
    if (!rc)
        rc = cuda_ctc_log_softmax_argmax(w->d_ids, w->d_best, want_logp ? w->logp : NULL, w->logits,
                                         Vp, NULL, 0, rows, V, w->stream, err);
    return rc;
}

static int enqueue_all(jasper_gpu_worker_t *w, const float *d_feats, int batch, int t_in,
                       int want_logp, hark_err_t *err)
{
    cudaError_t e =
        cudaMemcpyAsync(w->d_lens, w->h_lens, (size_t)w->g->n_levels * w->max_batch * sizeof(int),
                        cudaMemcpyHostToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "lengths upload");
    return enqueue_forward(w, d_feats, batch, t_in, want_logp, err);
}

typedef struct {
    jasper_gpu_worker_t *w;
    const float *d_feats;
    int batch, t_in, want_logp;
} run_t;

static int enqueue_run(void *user, hark_err_t *err)
{
    run_t *r = user;
    return enqueue_all(r->w, r->d_feats, r->batch, r->t_in, r->want_logp, err);
}

/* host lengths of every level (the previous forward's copy of them has run) */
static int set_lens(jasper_gpu_worker_t *w, const int *feat_lens, int batch, hark_err_t *err)
{
    const jasper_config_t *c = &w->m->cfg;
    cudaError_t e = cudaEventSynchronize(w->lens_ev);
    if (e != cudaSuccess)
        return cuda_err(err, e, "lengths event");
    int B = w->max_batch;
    memset(w->h_lens, 0, (size_t)w->g->n_levels * B * sizeof(int));
    for (int b = 0; b < batch; b++) {
        int len = feat_lens[b] + c->pad_leading, lvl = 1;
        w->h_lens[b] = feat_lens[b];
        w->h_lens[B + b] = len;
        for (int l = 0; l < c->n_blocks; l++) {
            const gblock_t *gb = &w->g->blocks[l];
            for (int r = 0; r < c->blocks[l].repeat; r++) {
                const gconv_t *gc = &gb->sub[r];
                if (gc->stride > 1) {
                    len = conv1d_len(len, gc->k, gc->stride, gc->dil);
                    w->h_lens[(size_t)++lvl * B + b] = len;
                }
            }
        }
    }
    return HARK_OK;
}

static int encode(jasper_gpu_worker_t *w, const float *d_feats, const int *feat_lens, int batch,
                  int t_in, int want_logp, hark_err_t *err)
{
    if (batch < 1 || batch > w->max_batch || t_in < 1 || t_in > w->max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "jasper (gpu): batch %d x %d frames: the worker holds %d x %d", batch, t_in,
                       w->max_batch, w->max_t_in);
    cudaSetDevice(w->g->device);
    int rc = set_lens(w, feat_lens, batch, err);
    if (rc)
        return rc;
    run_t r = {w, d_feats, batch, t_in, want_logp};
    graph_key_t key = {{batch, t_in, want_logp, (long long)(intptr_t)d_feats}};
    rc = w->graphs ? graph_cache_run(w->gc, &key, enqueue_run, &r, "jasper (gpu)", err)
                   : enqueue_run(&r, err);
    cudaError_t e;
    if (!rc && (e = cudaEventRecord(w->lens_ev, w->stream)) != cudaSuccess)
        rc = cuda_err(err, e, "lengths event");
    w->last_batch = batch;
    w->last_t_out = jasper_frames_out(w->m, t_in);
    return rc;
}

int jasper_gpu_encode(jasper_gpu_worker_t *w, const float *d_feats, const int *feat_lens, int batch,
                      int t_in, hark_err_t *err)
{
    return encode(w, d_feats, feat_lens, batch, t_in, 0, err);
}

int jasper_gpu_sync(jasper_gpu_worker_t *w, hark_err_t *err)
{
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e != cudaSuccess ? cuda_err(err, e, "forward") : HARK_OK;
}

int jasper_gpu_run(jasper_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                   const jasper_gpu_run_opts_t *o, jasper_result_t *res, hark_err_t *err)
{
    const jasper_model_t *m = w->m;
    const jasper_config_t *c = &m->cfg;
    if (batch < 1 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "jasper (gpu): batch of %d, the worker takes %d",
                       batch, w->max_batch);
    for (int b = 0; b < batch; b++)
        memset(&res[b], 0, sizeof res[b]);
    size_t n_max = 0, min = jasper_min_samples(m);
    int feat_lens[CUDA_MAX_LENS];
    for (int b = 0; b < batch; b++) {
        if (n[b] == 0)
            return err_set(err, HARK_ERR_INVALID_ARG, "item %d: empty audio", b);
        if (n[b] < min)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "item %d: audio of %zu samples is too short: the STFT needs at least "
                           "%zu (%.1f ms)",
                           b, n[b], min, 1000.0 * (double)min / c->sample_rate);
        if (n[b] > w->max_samples)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "item %d: audio of %.2f s is longer than the worker's maximum", b,
                           (double)n[b] / c->sample_rate);
        for (size_t i = 0; i < n[b]; i++)
            if (!isfinite(pcm[b][i]))
                return err_set(err, HARK_ERR_INVALID_ARG, "item %d: sample %zu is %s", b, i,
                               isnan(pcm[b][i]) ? "NaN" : "infinite");
        n_max = n[b] > n_max ? n[b] : n_max;
        feat_lens[b] = feat_num_frames(m->feat, n[b]);
    }
    const int t_in = jasper_frames_in(m, n_max), T = jasper_frames_out(m, t_in), V = m->vocab;
    cudaSetDevice(w->g->device);
    float *d_feats = NULL;
    const int *d_nlens = NULL;
    int rc = frontend_gpu_run(w->fe, pcm, n, batch, t_in - c->pad_leading, w->stream, &d_feats,
                              &d_nlens, err);
    if (rc)
        return rc;
    int want_logp = o && o->logp;
    rc = encode(w, d_feats, feat_lens, batch, t_in, want_logp, err);
    size_t rows = (size_t)batch * T;
    cudaError_t e = cudaSuccess;
    if (!rc &&
        ((e = cudaMemcpyAsync(w->h_ids, w->d_ids, rows * sizeof(int), cudaMemcpyDeviceToHost,
                              w->stream)) != cudaSuccess ||
         (e = cudaMemcpyAsync(w->h_best, w->d_best, rows * sizeof(float), cudaMemcpyDeviceToHost,
                              w->stream)) != cudaSuccess ||
         (want_logp && (e = cudaMemcpyAsync(o->logp, w->logp, rows * V * sizeof(float),
                                            cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess)))
        rc = cuda_err(err, e, "results copy");
    if (!rc)
        rc = jasper_gpu_sync(w, err);
    if (rc)
        return frontend_gpu_wait_failed(w->fe, w->stream, rc);
    for (int b = 0; b < batch && !rc; b++) {
        int tb = jasper_frames_out(m, jasper_frames_in(m, n[b]));
        int len_out = jasper_len_out(m, feat_lens[b] + c->pad_leading);
        rc = jasper_decode(m, w->h_ids + (size_t)b * T, w->h_best + (size_t)b * T, tb, len_out,
                           o && o->valid_frames_only, &res[b], err);
    }
    if (rc)
        for (int b = 0; b < batch; b++)
            jasper_result_free(&res[b]);
    return rc;
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "jasper: built without CUDA");
}

int jasper_gpu_model_create(const jasper_model_t *m, int device, ops_dtype_t dt,
                            jasper_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void jasper_gpu_model_destroy(jasper_gpu_model_t *g) {}
size_t jasper_gpu_model_bytes(const jasper_gpu_model_t *g)
{
    return 0;
}
int jasper_gpu_model_device(const jasper_gpu_model_t *g)
{
    return -1;
}
int jasper_gpu_worker_create(const jasper_gpu_model_t *g, int max_batch, double max_seconds,
                             jasper_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void jasper_gpu_worker_destroy(jasper_gpu_worker_t *w) {}
size_t jasper_gpu_worker_bytes(const jasper_gpu_worker_t *w)
{
    return 0;
}
const char *jasper_gpu_path_name(const jasper_gpu_worker_t *w)
{
    return "cpu";
}
void jasper_gpu_set_graphs(jasper_gpu_worker_t *w, int on) {}
int jasper_gpu_run(jasper_gpu_worker_t *w, const float *const *pcm, const size_t *n, int batch,
                   const jasper_gpu_run_opts_t *o, jasper_result_t *res, hark_err_t *err)
{
    return no_device(err);
}
int jasper_gpu_encode(jasper_gpu_worker_t *w, const float *d_feats, const int *feat_lens, int batch,
                      int t_in, hark_err_t *err)
{
    return no_device(err);
}
int jasper_gpu_sync(jasper_gpu_worker_t *w, hark_err_t *err)
{
    return no_device(err);
}

#endif
