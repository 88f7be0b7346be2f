/* icefall_zf_gpu.c — the Zipformer2 encoder on the GPU (icefall_zf_gpu.h). The passes
 * mirror icefall_zipformer.c op for op: n streams' rows one after another (a whole utterance: one
 * stream without caches), the row-wise layers over every row together, the attention's GEMMs
 * batched over heads and streams, each stream's left context gathered from its pool slot in front
 * of its new rows (cuda_zf_cache_concat) and the slot updated from that (cuda_zf_cache_store).
 * The 16-bit models differ only in the projections (`lin`): their weights are stored in dt, their
 * float inputs rounded to dt, cuBLAS multiplies with FP32 accumulation and the output is float;
 * every other op, the residual stream and the caches stay float. */
#include "model/icefall/icefall_zf_gpu.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall_impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "ops/ops_cuda.h"
#include "ops/zipformer_ops.h"

#include <cuda_runtime_api.h>

/* one layer's weights on the device: the host struct's pointers rebased */
struct icefall_zf_gpu {
    const icefall_model_t *m;
    int device;
    ops_dtype_t dt; /* the projections' weights (dmat) */
    void *dmat, *dflt;
    size_t bytes;
    icefall_zf_t zf;            /* device views (conv_w, ..., stacks[s].layers into `layers`) */
    icefall_zf_layer_t *layers; /* (n_layers) device views; the projection matrices (the fields
                                   filled by put_mat) point at dt values in dmat */
};

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "icefall zipformer (gpu): %s: %s", what,
                   cudaGetErrorString(e));
}

/* ---- weights -------------------------------------------------------------------------------- */

#define OFF(x) ((const float *)(uintptr_t)(x))
/* while staging, a view is its offset + 1 (0 stays NULL), MAT_TAG set for the matrix block */
#define MAT_TAG ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1))

/* src's n floats into the float block (mat 0) or the matrix block stored in the model's dt */
static const float *put_in(weight_stage_t *s, const float *src, size_t n, int mat)
{
    if (!src)
        return NULL;
    size_t at = weight_stage_take(mat ? &s->n_mat : &s->n_flt, n);
    if (!s->sizing)
        memcpy((mat ? s->mat : s->flt) + at, src, n * sizeof(float));
    return OFF(mat ? (at + 1) | MAT_TAG : at + 1);
}

static const float *put(weight_stage_t *s, const float *src, size_t n)
{
    return put_in(s, src, n, 0);
}

/* a projection's matrix */
static const float *put_mat(weight_stage_t *s, const float *src, size_t n)
{
    return put_in(s, src, n, 1);
}

typedef struct {
    icefall_zf_gpu_t *g;
} zfill_t;

static void fill(weight_stage_t *s, void *user)
{
    icefall_zf_gpu_t *g = ((zfill_t *)user)->g;
    const icefall_model_t *m = g->m;
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    const icefall_zf_t *h = &m->zf;
    icefall_zf_t *d = &g->zf;
    static const int co[3] = {8, 32, 128}, ci[3] = {1, 8, 32};
    const int fw = ((c->feature_dim - 1) / 2 - 1) / 2, d0 = z->embed_dim;
    for (int i = 0; i < 3; i++) {
        d->conv_w[i] = put(s, h->conv_w[i], (size_t)co[i] * ci[i] * 9);
        d->conv_b[i] = put(s, h->conv_b[i], (size_t)co[i]);
    }
    d->nx_dw_w = put(s, h->nx_dw_w, (size_t)ZF_EMBED_CH * ZF_NX_K * ZF_NX_K);
    d->nx_dw_b = put(s, h->nx_dw_b, ZF_EMBED_CH);
    d->nx_pw1_w = put_mat(s, h->nx_pw1_w, (size_t)ZF_NX_HID * ZF_EMBED_CH);
    d->nx_pw1_b = put(s, h->nx_pw1_b, ZF_NX_HID);
    d->nx_pw2_w = put_mat(s, h->nx_pw2_w, (size_t)ZF_EMBED_CH * ZF_NX_HID);
    d->nx_pw2_b = put(s, h->nx_pw2_b, ZF_EMBED_CH);
    d->out_w = put_mat(s, h->out_w, (size_t)d0 * ZF_EMBED_CH * fw);
    d->out_b = put(s, h->out_b, (size_t)d0);
    d->norm_bias = put(s, h->norm_bias, (size_t)d0);
    d->norm_scale = h->norm_scale;
    d->out_ds_w = put(s, h->out_ds_w, 2);
    int li = 0;
    for (int st = 0; st < z->n_stacks; st++) {
        const size_t D = (size_t)z->dim[st], H = (size_t)z->heads[st], qd = (size_t)z->qdim[st];
        const size_t vd = (size_t)z->vdim[st], pd = (size_t)z->pdim[st], k = (size_t)z->kernel[st];
        const size_t hid = 3 * D / 4, A = (2 * qd + pd) * H;
        d->stacks[st].ds_w = put(s, h->stacks[st].ds_w, (size_t)z->ds[st]);
        d->stacks[st].combiner = put(s, h->stacks[st].combiner, D);
        for (int l = 0; l < z->num_layers[st]; l++, li++) {
            const icefall_zf_layer_t *L = &m->zf.layers[li];
            icefall_zf_layer_t *G = &g->layers[li];
            *G = *L;
            G->bypass = put(s, L->bypass, D);
            G->bypass_mid = put(s, L->bypass_mid, D);
            G->aw_in_w = put_mat(s, L->aw_in_w, A * D);
            G->aw_in_b = put(s, L->aw_in_b, A);
            G->aw_pos_w = put_mat(s, L->aw_pos_w, H * pd * (size_t)z->pos_dim);
            for (int i = 0; i < 2; i++) {
                G->sa_in_w[i] = put_mat(s, L->sa_in_w[i], H * vd * D);
                G->sa_in_b[i] = put(s, L->sa_in_b[i], H * vd);
                G->sa_out_w[i] = put_mat(s, L->sa_out_w[i], D * H * vd);
                G->sa_out_b[i] = put(s, L->sa_out_b[i], D);
                G->cv_in_w[i] = put_mat(s, L->cv_in_w[i], 2 * D * D);
                G->cv_in_b[i] = put(s, L->cv_in_b[i], 2 * D);
                G->cv_dw_w[i] = put(s, L->cv_dw_w[i], D * k);
                G->cv_dw_b[i] = put(s, L->cv_dw_b[i], D);
                G->cv_cc_w[i] = put(s, L->cv_cc_w[i], D * (k / 2 + 1));
                G->cv_cc_b[i] = put(s, L->cv_cc_b[i], D);
                G->cv_ck_w[i] = put(s, L->cv_ck_w[i], D * k);
                G->cv_ck_b[i] = put(s, L->cv_ck_b[i], D);
                G->cv_ck_scale[i] = put(s, L->cv_ck_scale[i], 2 * D * k);
                G->cv_out_w[i] = put_mat(s, L->cv_out_w[i], D * D);
                G->cv_out_b[i] = put(s, L->cv_out_b[i], D);
            }
            for (int i = 0; i < 3; i++) {
                const size_t f = (size_t)L->ff_dim[i];
                G->ff_in_w[i] = put_mat(s, L->ff_in_w[i], f * D);
                G->ff_in_b[i] = put(s, L->ff_in_b[i], f);
                G->ff_out_w[i] = put_mat(s, L->ff_out_w[i], D * f);
                G->ff_out_b[i] = put(s, L->ff_out_b[i], D);
            }
            G->na_in_w = put_mat(s, L->na_in_w, 3 * hid * D);
            G->na_in_b = put(s, L->na_in_b, 3 * hid);
            G->na_out_w = put_mat(s, L->na_out_w, D * hid);
            G->na_out_b = put(s, L->na_out_b, D);
            G->norm_bias = put(s, L->norm_bias, D);
        }
    }
}

static void rb(const icefall_zf_gpu_t *g, const float **p)
{
    const uintptr_t v = (uintptr_t)*p;
    if (!v)
        return;
    if (v & MAT_TAG)
        *p = (const float *)((const char *)g->dmat + ((v & ~MAT_TAG) - 1) * ops_dtype_size(g->dt));
    else
        *p = (const float *)g->dflt + (v - 1);
}

static void rebase(icefall_zf_gpu_t *g)
{
    const icefall_zipformer_config_t *z = &g->m->cfg.zf;
    icefall_zf_t *d = &g->zf;
    for (int i = 0; i < 3; i++) {
        rb(g, &d->conv_w[i]);
        rb(g, &d->conv_b[i]);
    }
    const float **v[] = {&d->nx_dw_w,  &d->nx_dw_b, &d->nx_pw1_w, &d->nx_pw1_b,  &d->nx_pw2_w,
                         &d->nx_pw2_b, &d->out_w,   &d->out_b,    &d->norm_bias, &d->out_ds_w};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        rb(g, v[i]);
    int li = 0;
    for (int s = 0; s < z->n_stacks; s++) {
        rb(g, &d->stacks[s].ds_w);
        rb(g, &d->stacks[s].combiner);
        d->stacks[s].layers = &g->layers[li];
        for (int l = 0; l < z->num_layers[s]; l++, li++) {
            icefall_zf_layer_t *G = &g->layers[li];
            const float **p[] = {&G->bypass,   &G->bypass_mid, &G->aw_in_w, &G->aw_in_b,
                                 &G->aw_pos_w, &G->na_in_w,    &G->na_in_b, &G->na_out_w,
                                 &G->na_out_b, &G->norm_bias};
            for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
                rb(g, p[i]);
            for (int i = 0; i < 2; i++) {
                const float **q[] = {&G->sa_in_w[i],     &G->sa_in_b[i],  &G->sa_out_w[i],
                                     &G->sa_out_b[i],    &G->cv_in_w[i],  &G->cv_in_b[i],
                                     &G->cv_dw_w[i],     &G->cv_dw_b[i],  &G->cv_cc_w[i],
                                     &G->cv_cc_b[i],     &G->cv_ck_w[i],  &G->cv_ck_b[i],
                                     &G->cv_ck_scale[i], &G->cv_out_w[i], &G->cv_out_b[i]};
                for (size_t j = 0; j < sizeof q / sizeof q[0]; j++)
                    rb(g, q[j]);
            }
            for (int i = 0; i < 3; i++) {
                rb(g, &G->ff_in_w[i]);
                rb(g, &G->ff_in_b[i]);
                rb(g, &G->ff_out_w[i]);
                rb(g, &G->ff_out_b[i]);
            }
        }
    }
}

int icefall_zf_gpu_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                          icefall_zf_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    if (m->cfg.encoder_type != ICEFALL_ZIPFORMER)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall zipformer (gpu): the model is not a zipformer");
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall zipformer (gpu): element type %d",
                       (int)dt);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    icefall_zf_gpu_t *g = hark_calloc(1, sizeof *g);
    if (!g || !(g->layers = hark_calloc((size_t)m->cfg.n_layers, sizeof *g->layers))) {
        hark_free(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    zfill_t fl = {g};
    int rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, NULL,
                                 "icefall zipformer (gpu)", err);
    if (rc) {
        icefall_zf_gpu_destroy(g);
        return rc;
    }
    rebase(g);
    *out = g;
    return HARK_OK;
}

void icefall_zf_gpu_destroy(icefall_zf_gpu_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g->layers);
    hark_free(g);
}

size_t icefall_zf_gpu_bytes(const icefall_zf_gpu_t *g)
{
    return g ? g->bytes : 0;
}

ops_dtype_t icefall_zf_gpu_dtype(const icefall_zf_gpu_t *g)
{
    return g ? g->dt : OPS_F32;
}

/* ---- workers -------------------------------------------------------------------------------- */

/* where one layer's caches sit in a slot (floats) */
typedef struct {
    long long key, nl, val[2], conv[2];
} zcache_t;

typedef struct {
    /* encoder_embed */
    float *feats, *xin, *a0, *a1, *a2f, *ext, *dw, *hid, *y, *a2, *emb;
    void *conv_scratch;
    size_t conv_bytes;
    /* the stacks */
    float *cur, *outs, *full, *enc;
    float *xs, *orig, *ly, *g, *dwo, *proj, *sc, *bd, *pe, *pp, *ctx, *kv, *cext;
    void *xh; /* a 16-bit model's projection input rounded to dt */
    int *lohi, *slots;
} zbufs_t;

struct icefall_zf_gpu_worker {
    const icefall_zf_gpu_t *g;
    const icefall_model_t *m;
    int max_t_in, max_streams, step_frames;
    cudaStream_t stream;
    ops_cuda_t *ops;
    void *mem;
    size_t bytes;
    zbufs_t b;
    float *pool; /* (max_streams, slot_floats) */
    size_t slot_floats;
    zcache_t *caches;  /* (n_layers) */
    float *pp_step;    /* streaming: each layer's projected positions, made once (step_positions) */
    long long *pp_off; /* (n_layers) each layer's rows in pp_step */
    int *processed;    /* (max_streams) host: 50 Hz frames each slot has encoded */
    int *h_lohi;       /* pinned: the step's key ranges and slots */
    float *h_io;       /* pinned: features in, encoder frames out */
    size_t n_io, n_lohi;
    graph_cache_t *gc; /* streaming steps of up to ZF_GRAPH_STREAMS streams, one graph each */
    int graphs;        /* record and replay them (HARK_NO_GRAPHS unset or "0") */
};

/* Steps of this many streams or fewer replay CUDA graphs (one per stream count, so the cache
 * never evicts): there launches are most of the step; bigger steps and whole utterances (a new
 * length each) run as they are enqueued */
#define ZF_GRAPH_STREAMS 128

static size_t al(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

#define embed_frames icefall_zf_embed_frames

/* sizes (floats) of the buffers of a pass over t_in frames of nb images (stream: with the left
 * contexts); each the max of *into and this pass's */
typedef struct {
    size_t feats, xin, a0, a1, a2f, ext, dw, hid, y, a2, emb, cur, outs, full, enc;
    size_t xs, proj, sc, bd, pe, pp, ctx, kv, cext, lohi, conv_rows;
    size_t xh; /* the largest projection input */
} zsizes_t;

#define UP(f, v)                                                                                   \
    do {                                                                                           \
        size_t v_ = (v);                                                                           \
        if (v_ > s->f)                                                                             \
            s->f = v_;                                                                             \
    } while (0)

static void pass_sizes(const icefall_model_t *m, int t_in, int nb, int stream, zsizes_t *s)
{
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    const size_t N = (size_t)nb, T = (size_t)t_in, F = (size_t)c->feature_dim;
    const size_t Tc = (size_t)embed_frames(t_in), R = ZF_NX_PAD, Te = stream ? Tc - R : Tc;
    const size_t T1 = (T - 3) / 2, W1 = (F - 3) / 2 + 1, W2f = W1 - 2, W2 = (W2f + 1) / 2;
    const size_t C = ZF_EMBED_CH, M = (size_t)c->d;
    UP(feats, N * T * F);
    UP(xin, N * T * (F + 2));
    UP(a0, N * (T - 2) * 8 * F);
    UP(a1, N * T1 * 32 * W1);
    UP(a2f, N * Tc * C * W2f);
    UP(ext, N * (Te + 2 * R) * W2 * C);
    UP(dw, N * Te * W2 * C);
    UP(hid, N * Te * W2 * ZF_NX_HID);
    UP(y, N * Te * W2 * C);
    UP(a2, N * Te * C * W2);
    UP(emb, N * Te * M);
    UP(cur, N * Te * M);
    UP(full, N * Te * M);
    UP(enc, N * ((Te + 1) / 2) * M);
    UP(conv_rows, N * T1);
    size_t sum = 0;
    for (int i = 0; i < z->n_stacks; i++) {
        const size_t ds = (size_t)z->ds[i], Td = (Te + ds - 1) / ds, D = (size_t)z->dim[i];
        const size_t Lc = stream ? (size_t)z->left_frames / ds : 0, K = Lc + Td;
        const size_t H = (size_t)z->heads[i], P = 2 * Td - 1 + Lc;
        const size_t lp = (size_t)z->kernel[i] / 2;
        size_t wproj, wctx, wkv;
        icefall_zf_stack_widths(z, i, &wproj, &wctx, &wkv);
        sum += N * Te * D;
        UP(xs, N * Td * D);
        UP(proj, N * Td * wproj);
        UP(sc, N * H * Td * K);
        UP(bd, N * H * Td * P);
        UP(pe, P * (size_t)z->pos_dim);
        UP(pp, P * H * (size_t)z->pdim[i]);
        UP(ctx, N * Td * wctx);
        UP(kv, N * K * wkv);
        UP(cext, N * (lp + Td) * D);
    }
    UP(outs, sum);
    UP(lohi, 2 * N * Te * (size_t)z->n_stacks + N);
    /* the inputs `lin` is given: the ConvNeXt's dw and hid, embed's a2, the stacks' xs, proj
     * (the feed-forwards' hidden rows), ctx (and g, the same size), dwo (xs's) and pe */
    const size_t in[] = {s->dw, s->hid, s->a2, s->xs, s->proj, s->ctx, s->pe};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        UP(xh, in[i]);
}
#undef UP

void icefall_zf_gpu_worker_destroy(icefall_zf_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    graph_cache_destroy(w->gc);
    ops_cuda_destroy(w->ops);
    cudaFree(w->mem);
    cudaFreeHost(w->h_lohi);
    cudaFreeHost(w->h_io);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w->caches);
    hark_free(w->pp_off);
    hark_free(w->processed);
    hark_free(w);
}

/* The floats of every layer's projected positions for a streaming step of step_frames (its
 * chunk, its left context: the same in every step), each layer's offset into off (or NULL) */
static size_t step_pos_floats(const icefall_model_t *m, int step_frames, long long *off)
{
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    const int Te = embed_frames(step_frames) - ZF_NX_PAD;
    size_t at = 0;
    int li = 0;
    for (int s = 0; s < z->n_stacks; s++) {
        const int ds = z->ds[s], Td = (Te + ds - 1) / ds, Lc = z->left_frames / ds;
        for (int l = 0; l < z->num_layers[s]; l++, li++) {
            if (off)
                off[li] = (long long)at;
            at += (size_t)(2 * Td - 1 + Lc) * z->heads[s] * z->pdim[s];
        }
    }
    return at;
}

static int step_positions(icefall_zf_gpu_worker_t *w, hark_err_t *err);

/* the slot layout: the ConvNeXt's frames, then per layer its key, nonlin, two value and two conv
 * caches (as icefall_zf_stream_create's) */
static size_t slot_layout(const icefall_model_t *m, zcache_t *caches)
{
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    const int W2 = ((c->feature_dim - 1) / 2 - 1) / 2;
    size_t at = (size_t)ZF_NX_PAD * W2 * ZF_EMBED_CH;
    int li = 0;
    for (int i = 0; i < z->n_stacks; i++) {
        const size_t Lc = (size_t)(z->left_frames / z->ds[i]), D = (size_t)z->dim[i];
        const size_t hq = (size_t)z->heads[i] * z->qdim[i], hv = (size_t)z->heads[i] * z->vdim[i];
        const size_t lp = (size_t)(z->kernel[i] / 2);
        for (int l = 0; l < z->num_layers[i]; l++, li++) {
            zcache_t *k = &caches[li];
            k->key = (long long)at;
            at += Lc * hq;
            k->nl = (long long)at;
            at += Lc * (3 * D / 4);
            for (int v = 0; v < 2; v++) {
                k->val[v] = (long long)at;
                at += Lc * hv;
            }
            for (int v = 0; v < 2; v++) {
                k->conv[v] = (long long)at;
                at += lp * D;
            }
        }
    }
    return at;
}

int icefall_zf_gpu_worker_create(const icefall_zf_gpu_t *g, int max_t_in, int max_streams,
                                 icefall_zf_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const icefall_model_t *m = g->m;
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    if (max_t_in < 9 || max_t_in > 1 << 20 || max_streams < 0 || max_streams > 4096)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall zipformer (gpu): max_t_in %d (9 ..), max_streams %d (0 .. 4096)",
                       max_t_in, max_streams);
    if (max_streams > 0 && !icefall_can_stream(m))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall zipformer (gpu): only a causal zipformer with one chunk size > 0 "
                       "and a left context > 0 (a multiple of every downsampling factor) streams");
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    icefall_zf_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->m = m;
    w->max_t_in = max_t_in;
    w->max_streams = max_streams;
    w->step_frames = max_streams > 0 ? 2 * z->chunk + 7 + 2 * ZF_NX_PAD : 0;
    int rc = HARK_OK;
    w->caches = hark_calloc((size_t)m->cfg.n_layers, sizeof *w->caches);
    w->processed = hark_calloc(max_streams > 0 ? (size_t)max_streams : 1, sizeof(int));
    if (!w->caches || !w->processed) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    w->slot_floats = max_streams > 0 ? slot_layout(m, w->caches) : 0;
    size_t pp_floats = 0;
    if (max_streams > 0) {
        if (!(w->pp_off = hark_calloc((size_t)m->cfg.n_layers, sizeof *w->pp_off))) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        pp_floats = step_pos_floats(m, w->step_frames, w->pp_off);
    }
    zsizes_t s = {0};
    pass_sizes(m, max_t_in, 1, 0, &s);
    if (max_streams > 0)
        pass_sizes(m, w->step_frames, max_streams, 1, &s);
    const int F = m->cfg.feature_dim, W1 = (F - 3) / 2 + 1;
    size_t r1 = cuda_conv2d_scratch_bytes(1, 8, 32, 3, 3, W1, OPS_F32),
           r2 = cuda_conv2d_scratch_bytes(1, 32, ZF_EMBED_CH, 3, 3, W1 - 2, OPS_F32);
    size_t row = r1 > r2 ? r1 : r2, rows = s.conv_rows, budget = (size_t)256 << 20;
    if (rows * row > budget)
        rows = budget / row > 0 ? budget / row : 1;
    zbufs_t *b = &w->b;
    b->conv_bytes = rows * row + 1024;
    struct {
        void **p;
        size_t n;
    } parts[] = {
        {(void **)&b->feats, s.feats * 4},
        {(void **)&b->xin, s.xin * 4},
        {(void **)&b->a0, s.a0 * 4},
        {(void **)&b->a1, s.a1 * 4},
        {(void **)&b->a2f, s.a2f * 4},
        {(void **)&b->ext, s.ext * 4},
        {(void **)&b->dw, s.dw * 4},
        {(void **)&b->hid, s.hid * 4},
        {(void **)&b->y, s.y * 4},
        {(void **)&b->a2, s.a2 * 4},
        {(void **)&b->emb, s.emb * 4},
        {&b->conv_scratch, b->conv_bytes},
        {(void **)&b->cur, s.cur * 4},
        {(void **)&b->outs, s.outs * 4},
        {(void **)&b->full, s.full * 4},
        {(void **)&b->enc, s.enc * 4},
        {(void **)&b->xs, s.xs * 4},
        {(void **)&b->orig, s.xs * 4},
        {(void **)&b->ly, s.xs * 4},
        {(void **)&b->g, s.ctx * 4},
        {(void **)&b->dwo, s.xs * 4},
        {(void **)&b->proj, s.proj * 4},
        {(void **)&b->sc, s.sc * 4},
        {(void **)&b->bd, s.bd * 4},
        {(void **)&b->pe, s.pe * 4},
        {(void **)&b->pp, s.pp * 4},
        {(void **)&b->ctx, s.ctx * 4},
        {(void **)&b->kv, s.kv * 4},
        {(void **)&b->cext, s.cext * 4},
        {(void **)&b->lohi, s.lohi * sizeof(int)},
        {&b->xh, g->dt == OPS_F32 ? 0 : s.xh * ops_dtype_size(g->dt)},
        {(void **)&w->pp_step, pp_floats * 4},
        {(void **)&w->pool, (size_t)max_streams * w->slot_floats * 4},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        total += al(parts[i].n);
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)))
        goto fail;
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    if (max_streams > 0 && !(w->gc = graph_cache_create(ZF_GRAPH_STREAMS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "icefall zipformer (gpu): %.0f MB of device memory for %d frames and %d "
                     "streams: %s",
                     (double)total / 1048576.0, max_t_in, max_streams, cudaGetErrorString(e));
        cudaGetLastError();
        goto fail;
    }
    w->bytes = total;
    char *p = w->mem;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = parts[i].n ? p : NULL;
        p += al(parts[i].n);
    }
    w->n_lohi = s.lohi;
    w->n_io = s.feats > s.enc ? s.feats : s.enc;
    if ((e = cudaMallocHost((void **)&w->h_lohi, w->n_lohi * sizeof(int))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_io, w->n_io * sizeof(float))) != cudaSuccess) {
        rc = cuda_err(err, e, "pinned buffers");
        goto fail;
    }
    if (w->pool &&
        (e = cudaMemsetAsync(w->pool, 0, (size_t)max_streams * w->slot_floats * sizeof(float),
                             w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream pool");
        goto fail;
    }
    if (max_streams > 0 && (rc = step_positions(w, err)))
        goto fail;
    if ((e = cudaStreamSynchronize(w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream pool");
        goto fail;
    }
    *out = w;
    return HARK_OK;
fail:
    icefall_zf_gpu_worker_destroy(w);
    return rc;
}

size_t icefall_zf_gpu_worker_bytes(const icefall_zf_gpu_worker_t *w)
{
    return w ? w->bytes : 0;
}

size_t icefall_zf_gpu_slot_floats(const icefall_zf_gpu_worker_t *w)
{
    return w ? w->slot_floats : 0;
}

int icefall_zf_gpu_max_frames(const icefall_zf_gpu_worker_t *w)
{
    return w ? w->max_t_in : 0;
}

int icefall_zf_gpu_max_streams(const icefall_zf_gpu_worker_t *w)
{
    return w ? w->max_streams : 0;
}

const icefall_model_t *icefall_zf_gpu_worker_model(const icefall_zf_gpu_worker_t *w)
{
    return w ? w->m : NULL;
}

void icefall_zf_gpu_set_graphs(icefall_zf_gpu_worker_t *w, int on)
{
    if (!w)
        return;
    if (!on)
        graph_cache_clear(w->gc);
    w->graphs = on != 0;
}

/* ---- the forward ---------------------------------------------------------------------------- */

/* one pass: nb streams (or one utterance) */
typedef struct {
    icefall_zf_gpu_worker_t *w;
    const icefall_zipformer_config_t *z;
    int nb;
    const int *slots; /* device: each stream's slot; NULL: a whole utterance, no caches */
    hark_err_t *err;
} zpass_t;

/* y (n, out) = act(x (n, in) · wtᵀ + b), float in and out; wt in the model's dt (16-bit: x is
 * rounded to dt first, the GEMM accumulates in FP32) */
static int lin(const zpass_t *P, float *y, const float *x, const float *wt, const float *b, int n,
               int in, int out, cuda_act_t act)
{
    icefall_zf_gpu_worker_t *w = P->w;
    const ops_dtype_t dt = w->g->dt;
    if (dt == OPS_F32)
        return cuda_linear(y, x, wt, OPS_F32, b, n, in, out, act, w->ops, P->err);
    int rc = cuda_cast(w->b.xh, dt, x, OPS_F32, (size_t)n * in, w->stream, P->err);
    return rc ? rc : cuda_linear(y, w->b.xh, wt, dt, b, n, in, out, act, w->ops, P->err);
}

/* x (n, d) += y */
static int add(const zpass_t *P, float *x, const float *y, int n, int d)
{
    return cuda_residual_layer_norm(x, NULL, OPS_F32, x, y, NULL, 1.0f, NULL, 0, NULL, NULL, 0, 0,
                                    n, d, 0.0f, P->w->stream, P->err);
}

/* c = a · op(b) for nb streams x `heads` heads: (stream, head) matrices at a + j sa + h ha, ...;
 * one strided-batched call per head (batched over streams) or per stream (over heads), whichever
 * is fewer */
static int bgemm(const zpass_t *P, float *c, const float *a, const float *b, int m, int n, int k,
                 int lda, int ldb, int ldc, int trans_b, int heads, long long sa, long long sb,
                 long long scs, long long ha, long long hb, long long hc)
{
    ops_cuda_t *o = P->w->ops;
    int rc = HARK_OK;
    if (heads <= P->nb) {
        for (int h = 0; h < heads && !rc; h++)
            rc = cuda_gemm(c + h * hc, OPS_F32, a + h * ha, b + h * hb, OPS_F32, m, n, k, lda, ldb,
                           ldc, trans_b, 1.0f, 0.0f, P->nb, sa, sb, scs, o, P->err);
    } else {
        for (int j = 0; j < P->nb && !rc; j++)
            rc = cuda_gemm(c + j * scs, OPS_F32, a + j * sa, b + j * sb, OPS_F32, m, n, k, lda, ldb,
                           ldc, trans_b, 1.0f, 0.0f, heads, ha, hb, hc, o, P->err);
    }
    return rc;
}

/* the rows of stream j's cache `off` (lc rows of wd) in front of its t new rows x (ldx) into kv
 * (nb, lc + t, wd), the cache then the last lc rows; without slots: kv = x (returned as is) */
static const float *with_cache(const zpass_t *P, float *kv, long long off, const float *x, int ldx,
                               int lc, int t, int wd, int *rc)
{
    icefall_zf_gpu_worker_t *w = P->w;
    if (!P->slots || lc == 0 || *rc)
        return x;
    *rc = cuda_zf_cache_concat(kv, w->pool, P->slots, (long long)w->slot_floats, off, x, ldx, P->nb,
                               lc, t, wd, w->stream, P->err);
    if (!*rc)
        *rc = cuda_zf_cache_store(w->pool, P->slots, (long long)w->slot_floats, off, kv, lc + t, t,
                                  P->nb, lc, wd, w->stream, P->err);
    return kv;
}

typedef struct {
    int s, T, Lc, C, li;
    const int *lo, *hi; /* device, (nb T) or NULL */
} zlayer_ctx_t;

static int attn_weights(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L,
                        const float *x)
{
    zbufs_t *b = &P->w->b;
    const icefall_zipformer_config_t *z = P->z;
    const int s = X->s, T = X->T, Lc = X->Lc, K = Lc + T, D = z->dim[s], H = z->heads[s];
    const int qd = z->qdim[s], pd = z->pdim[s], hq = H * qd, A = 2 * hq + H * pd;
    const int Pn = 2 * T - 1 + Lc, n = P->nb * T;
    int rc = lin(P, b->proj, x, L->aw_in_w, L->aw_in_b, n, D, A, CUDA_ACT_NONE);
    /* the positions' projection: a stream step's was made with the worker (step_positions) */
    const float *pp = P->slots ? P->w->pp_step + P->w->pp_off[X->li] : b->pp;
    if (!rc && !P->slots)
        rc = lin(P, b->pp, b->pe, L->aw_pos_w, NULL, Pn, z->pos_dim, H * pd, CUDA_ACT_NONE);
    const float *keys =
        with_cache(P, b->kv, P->w->caches[X->li].key, b->proj + hq, A, Lc, T, hq, &rc);
    const int ldk = keys == b->kv ? hq : A;
    const long long sk = keys == b->kv ? (long long)K * hq : (long long)T * A;
    if (!rc)
        rc = bgemm(P, b->sc, b->proj, keys, T, K, qd, A, ldk, K, 1, H, (long long)T * A, sk,
                   (long long)H * T * K, qd, qd, (long long)T * K);
    if (!rc)
        rc = bgemm(P, b->bd, b->proj + 2 * hq, pp, T, Pn, pd, A, H * pd, Pn, 1, H, (long long)T * A,
                   0, (long long)H * T * Pn, pd, pd, (long long)T * Pn);
    if (!rc)
        rc = cuda_zf_rel_softmax(b->sc, b->bd, X->lo, X->hi, P->nb, H, T, K, Pn, P->w->stream,
                                 P->err);
    return rc;
}

static int feed_forward(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L, int i,
                        float *x)
{
    zbufs_t *b = &P->w->b;
    const int D = P->z->dim[X->s], f = L->ff_dim[i], n = P->nb * X->T;
    int rc = lin(P, b->proj, x, L->ff_in_w[i], L->ff_in_b[i], n, D, f, CUDA_ACT_SWOOSHL);
    if (!rc)
        rc = lin(P, b->ly, b->proj, L->ff_out_w[i], L->ff_out_b[i], n, f, D, CUDA_ACT_NONE);
    return rc ? rc : add(P, x, b->ly, n, D);
}

static int nonlin_attn(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L,
                       float *x)
{
    zbufs_t *b = &P->w->b;
    const int s = X->s, T = X->T, K = X->Lc + T, D = P->z->dim[s], H = P->z->heads[s];
    const int hid = 3 * D / 4, n = P->nb * T;
    int rc = lin(P, b->proj, x, L->na_in_w, L->na_in_b, n, D, 3 * hid, CUDA_ACT_NONE);
    if (!rc)
        rc = cuda_zf_gate(b->ctx, b->proj + hid, 3 * hid, b->proj, 3 * hid, n, hid, 1, P->w->stream,
                          P->err);
    const float *xx = with_cache(P, b->kv, P->w->caches[X->li].nl, b->ctx, hid, X->Lc, T, hid, &rc);
    if (!rc)
        rc = cuda_gemm(b->g, OPS_F32, b->sc, xx, OPS_F32, T, hid, K, K, hid, hid, 0, 1.0f, 0.0f,
                       P->nb, (long long)H * T * K, (long long)K * hid, (long long)T * hid,
                       P->w->ops, P->err);
    if (!rc)
        rc = cuda_zf_gate(b->g, b->g, hid, b->proj + 2 * hid, 3 * hid, n, hid, 0, P->w->stream,
                          P->err);
    if (!rc)
        rc = lin(P, b->ly, b->g, L->na_out_w, L->na_out_b, n, hid, D, CUDA_ACT_NONE);
    return rc ? rc : add(P, x, b->ly, n, D);
}

static int self_attn(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L, int i,
                     float *x)
{
    zbufs_t *b = &P->w->b;
    const int s = X->s, T = X->T, K = X->Lc + T, D = P->z->dim[s], H = P->z->heads[s];
    const int vd = P->z->vdim[s], hv = H * vd, n = P->nb * T;
    int rc = lin(P, b->proj, x, L->sa_in_w[i], L->sa_in_b[i], n, D, hv, CUDA_ACT_NONE);
    const float *v =
        with_cache(P, b->kv, P->w->caches[X->li].val[i], b->proj, hv, X->Lc, T, hv, &rc);
    if (!rc)
        rc = bgemm(P, b->ctx, b->sc, v, T, vd, K, K, hv, hv, 0, H, (long long)H * T * K,
                   (long long)K * hv, (long long)T * hv, (long long)T * K, vd, vd);
    if (!rc)
        rc = lin(P, b->ly, b->ctx, L->sa_out_w[i], L->sa_out_b[i], n, hv, D, CUDA_ACT_NONE);
    return rc ? rc : add(P, x, b->ly, n, D);
}

static int conv_module(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L, int i,
                       float *x)
{
    icefall_zf_gpu_worker_t *w = P->w;
    zbufs_t *b = &w->b;
    const int s = X->s, T = X->T, D = P->z->dim[s], k = P->z->kernel[s], lp = k / 2;
    const int n = P->nb * T;
    int rc = lin(P, b->proj, x, L->cv_in_w[i], L->cv_in_b[i], n, D, 2 * D, CUDA_ACT_NONE);
    if (!rc)
        rc = cuda_glu(b->g, OPS_F32, b->proj, NULL, n, D, w->stream, P->err);
    if (rc)
        return rc;
    if (!P->z->causal) {
        rc = cuda_depthwise_conv_norm_act(b->dwo, OPS_F32, b->g, NULL, L->cv_dw_w[i], L->cv_dw_b[i],
                                          NULL, P->nb, T, D, k, (k - 1) / 2, CUDA_NORM_NONE, NULL,
                                          NULL, NULL, NULL, 0.0f, CUDA_ACT_SWOOSHR, w->stream,
                                          P->err);
    } else {
        /* [left context; g] per stream: the slot's last inputs, or zeros */
        const float *pool = P->slots ? w->pool : NULL;
        rc = cuda_zf_cache_concat(b->cext, pool, P->slots, (long long)w->slot_floats,
                                  w->caches[X->li].conv[i], b->g, D, P->nb, lp, T, D, w->stream,
                                  P->err);
        if (!rc && P->slots && lp > 0)
            rc = cuda_zf_cache_store(w->pool, P->slots, (long long)w->slot_floats,
                                     w->caches[X->li].conv[i], b->cext, lp + T, T, P->nb, lp, D,
                                     w->stream, P->err);
        if (!rc)
            rc = cuda_zf_chunk_conv(b->dwo, b->cext, L->cv_cc_w[i], L->cv_cc_b[i], L->cv_ck_w[i],
                                    L->cv_ck_b[i], L->cv_ck_scale[i], P->nb, T, D, k, X->C,
                                    CUDA_ACT_SWOOSHR, w->stream, P->err);
    }
    if (!rc)
        rc = lin(P, b->ly, b->dwo, L->cv_out_w[i], L->cv_out_b[i], n, D, D, CUDA_ACT_NONE);
    return rc ? rc : add(P, x, b->ly, n, D);
}

static int layer(const zpass_t *P, const zlayer_ctx_t *X, const icefall_zf_layer_t *L, float *x)
{
    icefall_zf_gpu_worker_t *w = P->w;
    zbufs_t *b = &w->b;
    const int D = P->z->dim[X->s], n = P->nb * X->T;
    cudaError_t e = cudaMemcpyAsync(b->orig, x, sizeof(float) * (size_t)n * D,
                                    cudaMemcpyDeviceToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(P->err, e, "copy");
    int rc = attn_weights(P, X, L, x);
    if (!rc)
        rc = feed_forward(P, X, L, 0, x);
    if (!rc)
        rc = nonlin_attn(P, X, L, x);
    if (!rc)
        rc = self_attn(P, X, L, 0, x);
    if (!rc)
        rc = conv_module(P, X, L, 0, x);
    if (!rc)
        rc = feed_forward(P, X, L, 1, x);
    if (!rc)
        rc = cuda_zf_bypass(x, b->orig, L->bypass_mid, n, D, w->stream, P->err);
    if (!rc)
        rc = self_attn(P, X, L, 1, x);
    if (!rc)
        rc = conv_module(P, X, L, 1, x);
    if (!rc)
        rc = feed_forward(P, X, L, 2, x);
    if (!rc)
        rc = cuda_bias_norm(x, NULL, OPS_F32, x, n, D, L->norm_bias, L->norm_scale, w->stream,
                            P->err);
    if (!rc)
        rc = cuda_zf_bypass(x, b->orig, L->bypass, n, D, w->stream, P->err);
    return rc;
}

/* encoder_embed of nb images of t_in frames (b->feats) into b->cur (Te rows of each, stride M) */
static int embed(const zpass_t *P, int t_in, int Te)
{
    icefall_zf_gpu_worker_t *w = P->w;
    const icefall_zf_gpu_t *g = w->g;
    const icefall_zf_t *f = &g->zf;
    zbufs_t *b = &w->b;
    const int nb = P->nb, F = w->m->cfg.feature_dim, W1 = (F - 3) / 2 + 1, W2f = W1 - 2;
    const int W2 = (W2f + 1) / 2, T1 = (t_in - 3) / 2, Tc = embed_frames(t_in), C = ZF_EMBED_CH;
    const int R = ZF_NX_PAD, M = w->m->cfg.d, d0 = P->z->embed_dim;
    const int ext_rows = P->slots ? R + Tc : R + Tc + R;
    cudaError_t e =
        cudaMemsetAsync(b->xin, 0, sizeof(float) * (size_t)nb * t_in * (F + 2), w->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy2DAsync(b->xin + 1, sizeof(float) * (F + 2), b->feats, sizeof(float) * F,
                              sizeof(float) * F, (size_t)nb * t_in, cudaMemcpyDeviceToDevice,
                              w->stream);
    if (e != cudaSuccess)
        return cuda_err(P->err, e, "features");
    int rc = cuda_conv2d(b->a0, b->conv_scratch, b->conv_bytes, b->xin, f->conv_w[0], f->conv_w[0],
                         f->conv_b[0], OPS_F32, nb, 1, t_in, F + 2, 8, 3, 3, 1, CUDA_ACT_SWOOSHR,
                         w->ops, P->err);
    if (!rc)
        rc = cuda_conv2d(b->a1, b->conv_scratch, b->conv_bytes, b->a0, f->conv_w[1], f->conv_w[1],
                         f->conv_b[1], OPS_F32, nb, 8, t_in - 2, F, 32, 3, 3, 2, CUDA_ACT_SWOOSHR,
                         w->ops, P->err);
    if (!rc)
        rc = cuda_conv2d(b->a2f, b->conv_scratch, b->conv_bytes, b->a1, f->conv_w[2], f->conv_w[2],
                         f->conv_b[2], OPS_F32, nb, 32, T1, W1, C, 3, 3, 1, CUDA_ACT_SWOOSHR,
                         w->ops, P->err);
    if (!rc)
        rc = cuda_zf_embed_ext(b->ext, b->a2f, P->slots ? w->pool : NULL, P->slots,
                               (long long)w->slot_floats, 0, nb, Tc, C, W2f, R, P->slots ? 0 : R,
                               w->stream, P->err);
    if (!rc && P->slots) /* cat(cache, x)[Te : Te + R] */
        rc = cuda_zf_cache_store(w->pool, P->slots, (long long)w->slot_floats, 0, b->ext, ext_rows,
                                 Te, nb, R, W2 * C, w->stream, P->err);
    if (!rc)
        rc = cuda_zf_convnext_dw(b->dw, b->ext, f->nx_dw_w, f->nx_dw_b, nb, Te, W2, C, ZF_NX_K,
                                 w->stream, P->err);
    const int np = nb * Te * W2;
    if (!rc)
        rc = lin(P, b->hid, b->dw, f->nx_pw1_w, f->nx_pw1_b, np, C, ZF_NX_HID, CUDA_ACT_SWOOSHL);
    if (!rc)
        rc = lin(P, b->y, b->hid, f->nx_pw2_w, f->nx_pw2_b, np, ZF_NX_HID, C, CUDA_ACT_NONE);
    if (!rc)
        rc = cuda_zf_convnext_out(b->a2, b->y, b->ext, ext_rows, R, nb, Te, W2, C, w->stream,
                                  P->err);
    if (!rc)
        rc = lin(P, b->emb, b->a2, f->out_w, f->out_b, nb * Te, C * W2, d0, CUDA_ACT_NONE);
    if (!rc)
        rc = cuda_bias_norm(b->emb, NULL, OPS_F32, b->emb, nb * Te, d0, f->norm_bias, f->norm_scale,
                            w->stream, P->err);
    if (rc)
        return rc;
    e = cudaMemcpy2DAsync(b->cur, sizeof(float) * M, b->emb, sizeof(float) * d0, sizeof(float) * d0,
                          (size_t)nb * Te, cudaMemcpyDeviceToDevice, w->stream);
    return e == cudaSuccess ? HARK_OK : cuda_err(P->err, e, "embed rows");
}

/* The stacks, the full-width output and downsample_output over b->cur (nb streams' Te rows) into
 * b->enc ((Te + 1) / 2 rows per stream); lohi: device key ranges (2 · n_stacks · nb Te) */
static int stacks(const zpass_t *P, int Te)
{
    icefall_zf_gpu_worker_t *w = P->w;
    const icefall_zipformer_config_t *z = P->z;
    zbufs_t *b = &w->b;
    const int M = w->m->cfg.d, nb = P->nb, R = nb * Te;
    int cur_dim = z->embed_dim, li = 0, rc = HARK_OK;
    float *outs = b->outs, *souts[ICEFALL_ZF_MAX_STACKS];
    cudaError_t e;
    for (int s = 0; s < z->n_stacks && !rc; s++) {
        const icefall_zf_stack_t *S = &w->g->zf.stacks[s];
        const int D = z->dim[s], ds = z->ds[s], Td = (Te + ds - 1) / ds;
        if (D > cur_dim && (e = cudaMemset2DAsync(b->cur + cur_dim, sizeof(float) * M, 0,
                                                  sizeof(float) * (size_t)(D - cur_dim), (size_t)R,
                                                  w->stream)) != cudaSuccess)
            return cuda_err(P->err, e, "channels");
        cur_dim = D;
        rc = cuda_zf_downsample(b->xs, b->cur, M, S->ds_w, nb, Te, ds, D, w->stream, P->err);
        zlayer_ctx_t X = {.s = s, .T = Td, .Lc = 0, .C = -1};
        const int *lohi = b->lohi + (size_t)2 * s * nb * Te;
        if (P->slots) {
            X.Lc = z->left_frames / ds;
            X.C = Td;
            X.lo = lohi;
            X.hi = lohi + (size_t)nb * Td;
        } else if (z->causal && z->chunk > 0) {
            X.C = z->chunk / ds;
            X.lo = lohi;
            X.hi = lohi + (size_t)nb * Td;
        }
        if (!rc && !P->slots)
            rc = cuda_zf_pos_emb(b->pe, Td, X.Lc, z->pos_dim, w->stream, P->err);
        for (int l = 0; l < z->num_layers[s] && !rc; l++, li++) {
            X.li = li;
            rc = layer(P, &X, &S->layers[l], b->xs);
        }
        if (!rc)
            rc = cuda_zf_upsample_combine(b->cur, M, outs, b->xs, S->combiner, nb, Te, ds, D,
                                          w->stream, P->err);
        souts[s] = outs;
        outs += (size_t)R * D;
    }
    if (rc)
        return rc;
    int have = z->dim[z->n_stacks - 1];
    e = cudaMemcpy2DAsync(b->full, sizeof(float) * M, souts[z->n_stacks - 1], sizeof(float) * have,
                          sizeof(float) * have, (size_t)R, cudaMemcpyDeviceToDevice, w->stream);
    for (int s = z->n_stacks - 2; s >= 0 && e == cudaSuccess; s--) {
        const int D = z->dim[s];
        if (D <= have)
            continue;
        e = cudaMemcpy2DAsync(b->full + have, sizeof(float) * M, souts[s] + have, sizeof(float) * D,
                              sizeof(float) * (size_t)(D - have), (size_t)R,
                              cudaMemcpyDeviceToDevice, w->stream);
        have = D;
    }
    if (e != cudaSuccess)
        return cuda_err(P->err, e, "full-width output");
    return cuda_zf_downsample(b->enc, b->full, M, w->g->zf.out_ds_w, nb, Te, 2, M, w->stream,
                              P->err);
}

/* Each layer's projected positions of a streaming step into pp_step: the positional table of the
 * step's chunk and left context, through the layer's linear_pos (as a step would make them) */
static int step_positions(icefall_zf_gpu_worker_t *w, hark_err_t *err)
{
    const icefall_zipformer_config_t *z = &w->m->cfg.zf;
    const int Te = embed_frames(w->step_frames) - ZF_NX_PAD;
    const zpass_t P = {.w = w, .z = z, .nb = 1, .slots = NULL, .err = err};
    int li = 0, rc = HARK_OK;
    for (int s = 0; s < z->n_stacks && !rc; s++) {
        const int ds = z->ds[s], Td = (Te + ds - 1) / ds, Lc = z->left_frames / ds;
        rc = cuda_zf_pos_emb(w->b.pe, Td, Lc, z->pos_dim, w->stream, err);
        for (int l = 0; l < z->num_layers[s] && !rc; l++, li++)
            rc = lin(&P, w->pp_step + w->pp_off[li], w->b.pe, w->g->zf.stacks[s].layers[l].aw_pos_w,
                     NULL, 2 * Td - 1 + Lc, z->pos_dim, z->heads[s] * z->pdim[s], CUDA_ACT_NONE);
    }
    return rc;
}

/* The key ranges of every stack into h_lohi (then uploaded with the slots): streams (processed
 * counts of slots) or a whole utterance's chunk mask */
static void key_ranges(icefall_zf_gpu_worker_t *w, const int *slots, int nb, int Te)
{
    const icefall_zipformer_config_t *z = &w->m->cfg.zf;
    for (int s = 0; s < z->n_stacks; s++) {
        const int ds = z->ds[s], Td = (Te + ds - 1) / ds;
        int *lo = w->h_lohi + (size_t)2 * s * nb * Te, *hi = lo + (size_t)nb * Td;
        if (slots) {
            const int Lc = z->left_frames / ds;
            for (int j = 0; j < nb; j++) {
                const int un = z->left_frames - w->processed[slots[j]];
                const int klo = un > 0 ? (un + ds - 1) / ds : 0;
                for (int t = 0; t < Td; t++) {
                    lo[j * Td + t] = klo;
                    hi[j * Td + t] = Lc + Td;
                }
            }
        } else if (z->causal && z->chunk > 0) {
            const int C = z->chunk / ds;
            for (int t = 0; t < Td; t++) {
                const int c = t / C, first = z->left_chunks < 0 ? 0 : c - z->left_chunks;
                lo[t] = first > 0 ? first * C : 0;
                hi[t] = (c + 1) * C < Td ? (c + 1) * C : Td;
            }
        }
    }
}

typedef struct {
    zpass_t P;
    int t_in, Te;
} zrun_t;

/* a pass's device work, from the uploaded features to b->enc (graph_enqueue_fn) */
static int enqueue_pass(void *user, hark_err_t *err)
{
    zrun_t *r = user;
    r->P.err = err;
    int rc = embed(&r->P, r->t_in, r->Te);
    return rc ? rc : stacks(&r->P, r->Te);
}

/* feats (nb images of t_in frames, host, h_io already holding them) -> enc rows in h_io */
static int run_pass(icefall_zf_gpu_worker_t *w, const int *slots, int nb, int t_in, hark_err_t *err)
{
    const icefall_zipformer_config_t *z = &w->m->cfg.zf;
    const int F = w->m->cfg.feature_dim, M = w->m->cfg.d;
    const int Tc = embed_frames(t_in), Te = slots ? Tc - ZF_NX_PAD : Tc, To = (Te + 1) / 2;
    zbufs_t *b = &w->b;
    key_ranges(w, slots, nb, Te);
    const size_t n_lohi = (size_t)2 * z->n_stacks * nb * Te;
    if (slots)
        memcpy(w->h_lohi + n_lohi, slots, sizeof(int) * (size_t)nb);
    cudaError_t e = cudaMemcpyAsync(b->feats, w->h_io, sizeof(float) * (size_t)nb * t_in * F,
                                    cudaMemcpyHostToDevice, w->stream);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(b->lohi, w->h_lohi, sizeof(int) * (n_lohi + (slots ? nb : 0)),
                            cudaMemcpyHostToDevice, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "upload");
    zrun_t r = {.P = {.w = w, .z = z, .nb = nb, .slots = slots ? b->lohi + n_lohi : NULL},
                .t_in = t_in,
                .Te = Te};
    /* everything the pass enqueues is fixed by (nb, t_in, streaming): the buffers are the
     * worker's, the key ranges and slots device data uploaded above */
    const graph_key_t key = {{nb, t_in, slots != NULL}};
    int rc = w->graphs && slots && nb <= ZF_GRAPH_STREAMS
                 ? graph_cache_run(w->gc, &key, enqueue_pass, &r, "icefall zipformer (gpu)", err)
                 : enqueue_pass(&r, err);
    if (rc) {
        cudaStreamSynchronize(w->stream);
        return rc;
    }
    e = cudaMemcpyAsync(w->h_io, b->enc, sizeof(float) * (size_t)nb * To * M,
                        cudaMemcpyDeviceToHost, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? HARK_OK : cuda_err(err, e, "encoder output");
}

int icefall_zf_gpu_encode(icefall_zf_gpu_worker_t *w, const float *feats, int t_in, float *enc,
                          int *len_out, hark_err_t *err)
{
    const int F = w->m->cfg.feature_dim, M = w->m->cfg.d;
    if (t_in < 9 || t_in > w->max_t_in)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall zipformer (gpu): %d feature frames: the worker takes 9 to %d", t_in,
                       w->max_t_in);
    cudaError_t e = cudaSetDevice(w->g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    memcpy(w->h_io, feats, sizeof(float) * (size_t)t_in * F);
    int rc = run_pass(w, NULL, 1, t_in, err);
    if (rc)
        return rc;
    const int To = (embed_frames(t_in) + 1) / 2;
    memcpy(enc, w->h_io, sizeof(float) * (size_t)To * M);
    if (len_out)
        *len_out = To;
    return HARK_OK;
}

int icefall_zf_gpu_slot_reset(icefall_zf_gpu_worker_t *w, int slot, hark_err_t *err)
{
    if (slot < 0 || slot >= w->max_streams)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall zipformer (gpu): slot %d (the worker has %d)", slot,
                       w->max_streams);
    cudaError_t e = cudaSetDevice(w->g->device);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(w->pool + (size_t)slot * w->slot_floats, 0,
                            sizeof(float) * w->slot_floats, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "slot reset");
    w->processed[slot] = 0;
    return HARK_OK;
}

int icefall_zf_gpu_step(icefall_zf_gpu_worker_t *w, const int *slots, const float *const *feats,
                        float *const *enc, int n, hark_err_t *err)
{
    const int F = w->m->cfg.feature_dim, M = w->m->cfg.d, t_in = w->step_frames;
    if (n < 1 || n > w->max_streams)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall zipformer (gpu): %d streams in one step: the worker steps 1 to %d",
                       n, w->max_streams);
    for (int j = 0; j < n; j++) {
        if (slots[j] < 0 || slots[j] >= w->max_streams)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "icefall zipformer (gpu): slot %d (the worker has %d)", slots[j],
                           w->max_streams);
        for (int i = 0; i < j; i++)
            if (slots[i] == slots[j])
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "icefall zipformer (gpu): slot %d twice in one step", slots[j]);
    }
    cudaError_t e = cudaSetDevice(w->g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    for (int j = 0; j < n; j++)
        memcpy(w->h_io + (size_t)j * t_in * F, feats[j], sizeof(float) * (size_t)t_in * F);
    int rc = run_pass(w, slots, n, t_in, err);
    if (rc)
        return rc;
    const int Te = embed_frames(t_in) - ZF_NX_PAD, To = (Te + 1) / 2;
    for (int j = 0; j < n; j++) {
        memcpy(enc[j], w->h_io + (size_t)j * To * M, sizeof(float) * (size_t)To * M);
        w->processed[slots[j]] += Te;
    }
    return HARK_OK;
}

#else /* !HARK_CUDA */

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "icefall zipformer (gpu): built without CUDA");
}

int icefall_zf_gpu_create(const icefall_model_t *m, int device, ops_dtype_t dt,
                          icefall_zf_gpu_t **out, hark_err_t *err)
{
    (void)m;
    (void)device;
    (void)dt;
    *out = NULL;
    return no_device(err);
}
void icefall_zf_gpu_destroy(icefall_zf_gpu_t *g)
{
    (void)g;
}
size_t icefall_zf_gpu_bytes(const icefall_zf_gpu_t *g)
{
    (void)g;
    return 0;
}
ops_dtype_t icefall_zf_gpu_dtype(const icefall_zf_gpu_t *g)
{
    (void)g;
    return OPS_F32;
}
void icefall_zf_gpu_set_graphs(icefall_zf_gpu_worker_t *w, int on)
{
    (void)w;
    (void)on;
}
int icefall_zf_gpu_worker_create(const icefall_zf_gpu_t *g, int max_t_in, int max_streams,
                                 icefall_zf_gpu_worker_t **out, hark_err_t *err)
{
    (void)g;
    (void)max_t_in;
    (void)max_streams;
    *out = NULL;
    return no_device(err);
}
void icefall_zf_gpu_worker_destroy(icefall_zf_gpu_worker_t *w)
{
    (void)w;
}
size_t icefall_zf_gpu_worker_bytes(const icefall_zf_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
size_t icefall_zf_gpu_slot_floats(const icefall_zf_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
int icefall_zf_gpu_max_frames(const icefall_zf_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
int icefall_zf_gpu_max_streams(const icefall_zf_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
const icefall_model_t *icefall_zf_gpu_worker_model(const icefall_zf_gpu_worker_t *w)
{
    (void)w;
    return NULL;
}
int icefall_zf_gpu_encode(icefall_zf_gpu_worker_t *w, const float *feats, int t_in, float *enc,
                          int *len_out, hark_err_t *err)
{
    (void)w;
    (void)feats;
    (void)t_in;
    (void)enc;
    (void)len_out;
    return no_device(err);
}
int icefall_zf_gpu_slot_reset(icefall_zf_gpu_worker_t *w, int slot, hark_err_t *err)
{
    (void)w;
    (void)slot;
    return no_device(err);
}
int icefall_zf_gpu_step(icefall_zf_gpu_worker_t *w, const int *slots, const float *const *feats,
                        float *const *enc, int n, hark_err_t *err)
{
    (void)w;
    (void)slots;
    (void)feats;
    (void)enc;
    (void)n;
    return no_device(err);
}

#endif
