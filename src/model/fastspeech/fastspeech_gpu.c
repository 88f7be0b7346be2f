/* fastspeech_gpu.c — DLE FastSpeech on the GPU (fastspeech_gpu.h); the CPU reference is
 * fastspeech.c. Tests: tests/model/fastspeech/test_fastspeech_gpu.c
 *
 * Two phases per batch, each over a padded (batch, t, d) time-major buffer with per-item lengths:
 *   1. symbols: embedding + positions (cuda_embed_pos from host-made index rows), the encoder's FFT
 *      blocks, the duration predictor (FP32) -> its raw output back to the host, where the CPU
 *      path's own rule rounds the durations and the frame counts size phase 2;
 *   2. frames: the length regulator as a gather of encoder rows + mel-side positions (pad rows read
 *      an all-zero row kept after the encoder's), the mel-side FFT blocks, the mel linear.
 * The fused QKV weight's rows are re-ordered at load from DLE's head-major [h][q|k|v] to
 * [q | k | v] (head h at h·64 in each third), the layout the attention kernels read. FP32 runs the
 * attention as cuda_segment_attention (each row over its own sentence's keys); 16-bit as
 * cuda_flash_attention with the lengths. A block's rows past a sentence's length are computed
 * (finite) but never read as keys or conv inputs.
 */
#include "model/fastspeech/fastspeech_gpu.h"

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "hark.h"
#include "model/fastspeech/fastspeech_impl.h"
#include "ops/conv1d.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_EPS FASTSPEECH_LN_EPS
#define DK 64
#define FS_GRAPH_SLOTS 16

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "fastspeech (gpu): %s: %s", what, cudaGetErrorString(e));
}

static size_t al(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

static int maxi(int a, int b)
{
    return a > b ? a : b;
}

typedef struct {
    int cin, cout, k, pad;
    const void *w;  /* (cout, k, cin): dt (FFT blocks) or float (duration predictor) */
    const float *b; /* (cout) */
} gconv_t;

typedef struct {
    int heads, filter;
    const void *qkv_w;  /* dt (3 · H · 64, d), rows [q | k | v] */
    const float *qkv_b; /* (3 · H · 64), same order */
    const void *fc_w;   /* dt (d, H · 64) */
    const float *fc_b, *ln1_g, *ln1_b, *ln2_g, *ln2_b;
    gconv_t c1, c2;
} glayer_t;

struct fastspeech_gpu_model {
    const fastspeech_model_t *m;
    int device;
    ops_dtype_t dt;
    const float *emb, *pos_enc, *pos_dec;
    glayer_t *enc, *dec;
    gconv_t dp1, dp2; /* float */
    const float *dp_ln1_g, *dp_ln1_b, *dp_ln2_g, *dp_ln2_b, *dp_w, *dp_b;
    const void *mel_w; /* dt (n_mels, d) */
    const float *mel_b;
    void *dmat, *dflt;
    size_t bytes;
};

size_t fastspeech_gpu_model_bytes(const fastspeech_gpu_model_t *g)
{
    return g->bytes;
}

const fastspeech_model_t *fastspeech_gpu_model_cpu(const fastspeech_gpu_model_t *g)
{
    return g->m;
}

void fastspeech_gpu_model_destroy(fastspeech_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    hark_free(g->enc);
    hark_free(g->dec);
    hark_free(g);
}

/* host images of the two blocks; a sizing pass first. Views are recorded as offsets and turned
 * into device pointers after the upload. */
static size_t put_flt(weight_stage_t *s, const float *src, size_t n)
{
    size_t at = weight_stage_take(&s->n_flt, n);
    if (!s->sizing)
        memcpy(s->flt + at, src, n * sizeof(float));
    return at;
}

/* CPU conv (k, cout, cin) -> (cout, k, cin) into the mat (dt) or float block */
static size_t put_conv(weight_stage_t *s, const conv_t *c, int to_float)
{
    size_t n = (size_t)c->cout * c->k * c->cin;
    size_t at = to_float ? weight_stage_take(&s->n_flt, n) : weight_stage_take(&s->n_mat, n);
    if (s->sizing)
        return at;
    float *w = (to_float ? s->flt : s->mat) + at;
    for (int o = 0; o < c->cout; o++)
        for (int j = 0; j < c->k; j++)
            memcpy(w + ((size_t)o * c->k + j) * c->cin, c->w + ((size_t)j * c->cout + o) * c->cin,
                   sizeof(float) * (size_t)c->cin);
    return at;
}

typedef struct {
    size_t qkv_w, qkv_b, fc_w, fc_b, ln1_g, ln1_b, ln2_g, ln2_b, c1_w, c1_b, c2_w, c2_b;
} layer_off_t;

typedef struct {
    size_t emb, pos_enc, pos_dec, dp1_w, dp1_b, dp2_w, dp2_b, dp_ln1_g, dp_ln1_b, dp_ln2_g,
        dp_ln2_b, dp_w, dp_b, mel_w, mel_b;
    layer_off_t *enc, *dec;
} offs_t;

static void stage_layer(weight_stage_t *s, const fft_layer_t *l, int d, layer_off_t *o)
{
    int H = l->heads, n = 3 * H * DK;
    o->qkv_w = weight_stage_take(&s->n_mat, (size_t)n * d);
    o->qkv_b = weight_stage_take(&s->n_flt, (size_t)n);
    if (!s->sizing) /* DLE row h·192 + part·64 + j -> part·H·64 + h·64 + j */
        for (int h = 0; h < H; h++)
            for (int part = 0; part < 3; part++)
                for (int j = 0; j < DK; j++) {
                    int src = h * 192 + part * DK + j, dst = part * H * DK + h * DK + j;
                    memcpy(s->mat + o->qkv_w + (size_t)dst * d, l->qkv_w + (size_t)src * d,
                           sizeof(float) * (size_t)d);
                    s->flt[o->qkv_b + dst] = l->qkv_b[src];
                }
    o->fc_w = weight_stage_take(&s->n_mat, (size_t)d * H * DK);
    if (!s->sizing)
        memcpy(s->mat + o->fc_w, l->fc_w, sizeof(float) * (size_t)d * H * DK);
    o->fc_b = put_flt(s, l->fc_b, (size_t)d);
    o->ln1_g = put_flt(s, l->ln1_g, (size_t)d);
    o->ln1_b = put_flt(s, l->ln1_b, (size_t)d);
    o->ln2_g = put_flt(s, l->ln2_g, (size_t)d);
    o->ln2_b = put_flt(s, l->ln2_b, (size_t)d);
    o->c1_w = put_conv(s, &l->c1, 0);
    o->c1_b = put_flt(s, l->c1.b, (size_t)l->c1.cout);
    o->c2_w = put_conv(s, &l->c2, 0);
    o->c2_b = put_flt(s, l->c2.b, (size_t)l->c2.cout);
}

static void stage_all(weight_stage_t *s, const fastspeech_model_t *m, offs_t *o)
{
    const fastspeech_config_t *c = &m->cfg;
    int d = c->d_model;
    o->emb = put_flt(s, m->emb, (size_t)c->n_symbols * d);
    o->pos_enc = put_flt(s, m->pos_enc, (size_t)(c->max_seq_len + 1) * d);
    o->pos_dec = put_flt(s, m->pos_dec, (size_t)(c->max_seq_len + 1) * d);
    for (int l = 0; l < c->enc_layers; l++)
        stage_layer(s, &m->enc[l], d, &o->enc[l]);
    for (int l = 0; l < c->dec_layers; l++)
        stage_layer(s, &m->dec[l], d, &o->dec[l]);
    o->dp1_w = put_conv(s, &m->dp1, 1);
    o->dp1_b = put_flt(s, m->dp1.b, (size_t)m->dp1.cout);
    o->dp2_w = put_conv(s, &m->dp2, 1);
    o->dp2_b = put_flt(s, m->dp2.b, (size_t)m->dp2.cout);
    o->dp_ln1_g = put_flt(s, m->dp_ln1_g, (size_t)c->dp_filter);
    o->dp_ln1_b = put_flt(s, m->dp_ln1_b, (size_t)c->dp_filter);
    o->dp_ln2_g = put_flt(s, m->dp_ln2_g, (size_t)c->dp_filter);
    o->dp_ln2_b = put_flt(s, m->dp_ln2_b, (size_t)c->dp_filter);
    o->dp_w = put_flt(s, m->dp_w, (size_t)c->dp_filter);
    o->dp_b = put_flt(s, m->dp_b, 1);
    o->mel_w = weight_stage_take(&s->n_mat, (size_t)c->n_mels * d);
    if (!s->sizing)
        memcpy(s->mat + o->mel_w, m->mel_w, sizeof(float) * (size_t)c->n_mels * d);
    o->mel_b = put_flt(s, m->mel_b, (size_t)c->n_mels);
}

typedef struct {
    const fastspeech_model_t *m;
    offs_t *o;
} fill_t;

static void fill(weight_stage_t *s, void *user)
{
    fill_t *f = user;
    stage_all(s, f->m, f->o);
}

static int conv_ok(const conv_t *c)
{
    return c->k == 2 * c->pad + 1;
}

int fastspeech_gpu_model_create(const fastspeech_model_t *m, int device, ops_dtype_t dt,
                                fastspeech_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    const fastspeech_config_t *c = &m->cfg;
    if (dt != OPS_F32 && dt != OPS_F16 && dt != OPS_BF16)
        return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech (gpu): element type %d", (int)dt);
    if (dt != OPS_F32 && (c->d_model % 8 || c->enc_filter % 8 || c->dec_filter % 8))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "fastspeech (gpu): 16-bit needs d_model (%d) and the FFT filters (%d, %d) "
                       "to be multiples of 8",
                       c->d_model, c->enc_filter, c->dec_filter);
    if (c->d_model > CUDA_ROWS_NORM_MAX_D)
        return err_set(err, HARK_ERR_UNSUPPORTED, "fastspeech (gpu): d_model %d over %d",
                       c->d_model, CUDA_ROWS_NORM_MAX_D);
    int ok = conv_ok(&m->dp1) && conv_ok(&m->dp2);
    for (int l = 0; l < c->enc_layers; l++)
        ok = ok && conv_ok(&m->enc[l].c1) && conv_ok(&m->enc[l].c2);
    for (int l = 0; l < c->dec_layers; l++)
        ok = ok && conv_ok(&m->dec[l].c1) && conv_ok(&m->dec[l].c2);
    if (!ok)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "fastspeech (gpu): a conv whose kernel is not 2 · padding + 1");
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    fastspeech_gpu_model_t *g = hark_calloc(1, sizeof *g);
    offs_t o = {0};
    if (g) {
        g->enc = hark_calloc((size_t)c->enc_layers, sizeof *g->enc);
        g->dec = hark_calloc((size_t)c->dec_layers, sizeof *g->dec);
        o.enc = hark_calloc((size_t)c->enc_layers, sizeof *o.enc);
        o.dec = hark_calloc((size_t)c->dec_layers, sizeof *o.dec);
    }
    if (!g || !g->enc || !g->dec || !o.enc || !o.dec) {
        hark_free(o.enc);
        hark_free(o.dec);
        fastspeech_gpu_model_destroy(g);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    size_t es = ops_dtype_size(dt);
    int rc;
    fill_t fl = {m, &o};
    if ((rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, NULL,
                                  "fastspeech (gpu)", err)))
        goto done;
#define MAT(off) ((const void *)((const char *)g->dmat + (off)*es))
#define FLT(off) ((const float *)g->dflt + (off))
    g->emb = FLT(o.emb);
    g->pos_enc = FLT(o.pos_enc);
    g->pos_dec = FLT(o.pos_dec);
    for (int side = 0; side < 2; side++) {
        int n = side ? c->dec_layers : c->enc_layers;
        for (int l = 0; l < n; l++) {
            const fft_layer_t *src = side ? &m->dec[l] : &m->enc[l];
            const layer_off_t *lo = side ? &o.dec[l] : &o.enc[l];
            glayer_t *gl = side ? &g->dec[l] : &g->enc[l];
            gl->heads = src->heads;
            gl->filter = src->filter;
            gl->qkv_w = MAT(lo->qkv_w);
            gl->qkv_b = FLT(lo->qkv_b);
            gl->fc_w = MAT(lo->fc_w);
            gl->fc_b = FLT(lo->fc_b);
            gl->ln1_g = FLT(lo->ln1_g);
            gl->ln1_b = FLT(lo->ln1_b);
            gl->ln2_g = FLT(lo->ln2_g);
            gl->ln2_b = FLT(lo->ln2_b);
            gl->c1 = (gconv_t){src->c1.cin, src->c1.cout,  src->c1.k,
                               src->c1.pad, MAT(lo->c1_w), FLT(lo->c1_b)};
            gl->c2 = (gconv_t){src->c2.cin, src->c2.cout,  src->c2.k,
                               src->c2.pad, MAT(lo->c2_w), FLT(lo->c2_b)};
        }
    }
    g->dp1 = (gconv_t){m->dp1.cin, m->dp1.cout, m->dp1.k, m->dp1.pad, FLT(o.dp1_w), FLT(o.dp1_b)};
    g->dp2 = (gconv_t){m->dp2.cin, m->dp2.cout, m->dp2.k, m->dp2.pad, FLT(o.dp2_w), FLT(o.dp2_b)};
    g->dp_ln1_g = FLT(o.dp_ln1_g);
    g->dp_ln1_b = FLT(o.dp_ln1_b);
    g->dp_ln2_g = FLT(o.dp_ln2_g);
    g->dp_ln2_b = FLT(o.dp_ln2_b);
    g->dp_w = FLT(o.dp_w);
    g->dp_b = FLT(o.dp_b);
    g->mel_w = MAT(o.mel_w);
    g->mel_b = FLT(o.mel_b);
#undef MAT
#undef FLT
done:
    hark_free(o.enc);
    hark_free(o.dec);
    if (rc) {
        fastspeech_gpu_model_destroy(g);
        return rc;
    }
    *out = g;
    return HARK_OK;
}

/* ---- workers -------------------------------------------------------------------------------- */

struct fastspeech_gpu_worker {
    const fastspeech_gpu_model_t *g;
    const fastspeech_config_t *c;
    ops_dtype_t dt;
    int h16;
    int max_batch, max_symbols, max_frames;
    cudaStream_t stream;
    ops_cuda_t *ops;
    void *mem;
    size_t bytes;
    float *enc;    /* (B · Nmax + 1, d): the encoder's stream; its last row stays 0 */
    float *x;      /* (B · Tmax, d): the mel side's stream */
    void *xh;      /* dt (rows, d): the stream's 16-bit copy (16-bit only) */
    void *qkv;     /* (rows, 3 · H · 64) float or dt */
    void *ctx;     /* (rows, H · 64) float or dt */
    float *a;      /* (rows, max(d, filter, dp_filter)) */
    float *acc;    /* (rows, max(d, filter, dp_filter)) */
    void *h;       /* (rows, max(filter, dp_filter)) float or dt */
    void *xp;      /* padded conv input: (B, t + 2 pad, max(d, filter, dp_filter)) float */
    float *dlog;   /* (B · Nmax) */
    float *mel;    /* (B · Tmax, n_mels) */
    int *d_idx;    /* tok, pos, kbeg, klen (4, B · max(Nmax, Tmax)); lens (2, B) */
    int *h_idx;    /* pinned, as d_idx */
    float *h_dlog; /* pinned (B · Nmax) */
    int rows_cap;
    int graphs;
    graph_cache_t *gc; /* FS_GRAPH_SLOTS phases by (phase, batch, t) */
    /* the last run */
    int last_batch, last_t;
    int last_frames[CUDA_MAX_LENS];
};

void fastspeech_gpu_worker_destroy(fastspeech_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    graph_cache_destroy(w->gc);
    ops_cuda_destroy(w->ops);
    cudaFree(w->mem);
    cudaFreeHost(w->h_idx);
    cudaFreeHost(w->h_dlog);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

size_t fastspeech_gpu_worker_bytes(const fastspeech_gpu_worker_t *w)
{
    return w->bytes;
}

int fastspeech_gpu_worker_max_frames(const fastspeech_gpu_worker_t *w)
{
    return w->max_frames;
}

static int max_heads(const fastspeech_config_t *c)
{
    return maxi(c->enc_heads, c->dec_heads);
}

static int max_width(const fastspeech_config_t *c)
{
    return maxi(maxi(c->d_model, c->dp_filter), maxi(c->enc_filter, c->dec_filter));
}

static int max_pad(const fastspeech_model_t *m)
{
    int p = maxi(m->dp1.pad, m->dp2.pad);
    for (int l = 0; l < m->cfg.enc_layers; l++)
        p = maxi(p, maxi(m->enc[l].c1.pad, m->enc[l].c2.pad));
    for (int l = 0; l < m->cfg.dec_layers; l++)
        p = maxi(p, maxi(m->dec[l].c1.pad, m->dec[l].c2.pad));
    return p;
}

int fastspeech_gpu_worker_create(const fastspeech_gpu_model_t *g, int max_batch, int max_symbols,
                                 int max_frames, fastspeech_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const fastspeech_config_t *c = &g->m->cfg;
    if (max_batch < 1 || max_batch > CUDA_MAX_LENS || max_symbols < 1 ||
        max_symbols > c->max_seq_len || max_frames < 1 || max_frames > c->max_seq_len)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "fastspeech (gpu): max_batch %d (1..%d), max_symbols %d, max_frames %d "
                       "(1..%d)",
                       max_batch, CUDA_MAX_LENS, max_symbols, max_frames, c->max_seq_len);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    fastspeech_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->c = c;
    w->dt = g->dt;
    w->h16 = g->dt != OPS_F32;
    w->max_batch = max_batch;
    w->max_symbols = max_symbols;
    w->max_frames = max_frames;
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    size_t B = (size_t)max_batch, d = (size_t)c->d_model, H = (size_t)max_heads(c);
    size_t tmax = (size_t)maxi(max_symbols, max_frames), rows = B * tmax;
    size_t W = (size_t)max_width(c), P = (size_t)max_pad(g->m);
    size_t n_idx = 4 * rows + 2 * B;
    w->rows_cap = (int)rows;
    size_t total = al((B * max_symbols + 1) * d * 4) + al(B * max_frames * d * 4) +
                   al(rows * d * 2) + al(rows * 3 * H * DK * 4) + al(rows * H * DK * 4) +
                   2 * al(rows * W * 4) + al(rows * W * 4) + al(B * (tmax + 2 * P) * W * 4) +
                   al(B * max_symbols * 4) + al(B * max_frames * (size_t)c->n_mels * 4) +
                   al(n_idx * 4);
    int rc = HARK_OK;
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_idx, n_idx * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_dlog, B * max_symbols * 4)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream / pinned buffers");
        goto fail;
    }
    if (!(w->gc = graph_cache_create(FS_GRAPH_SLOTS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)) != HARK_OK)
        goto fail;
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "fastspeech (gpu): %zu MiB of scratch for batch %d x %d symbols / %d frames: "
                     "%s",
                     total >> 20, max_batch, max_symbols, max_frames, cudaGetErrorString(e));
        goto fail;
    }
    w->bytes = total + ops_cuda_workspace_bytes();
    char *p = w->mem;
#define TAKE(dst, type, nbytes) (dst = (type)(void *)p, p += al(nbytes))
    TAKE(w->enc, float *, (B * max_symbols + 1) * d * 4);
    TAKE(w->x, float *, B *max_frames *d * 4);
    TAKE(w->xh, void *, rows *d * 2);
    TAKE(w->qkv, void *, rows * 3 * H * DK * 4);
    TAKE(w->ctx, void *, rows *H *DK * 4);
    TAKE(w->a, float *, rows *W * 4);
    TAKE(w->acc, float *, rows *W * 4);
    TAKE(w->h, void *, rows *W * 4);
    TAKE(w->xp, void *, B *(tmax + 2 * P) * W * 4);
    TAKE(w->dlog, float *, B *max_symbols * 4);
    TAKE(w->mel, float *, B *max_frames *(size_t)c->n_mels * 4);
    TAKE(w->d_idx, int *, n_idx * 4);
#undef TAKE
    HARK_ASSERT((size_t)(p - (char *)w->mem) == total);
    *out = w;
    return HARK_OK;
fail:
    fastspeech_gpu_worker_destroy(w);
    return rc;
}

/* ---- the forward ---------------------------------------------------------------------------- */

typedef struct {
    fastspeech_gpu_worker_t *w;
    int batch, t, rows;
    const int *lens;        /* device (batch) */
    const int *kbeg, *klen; /* device (rows): FP32 attention */
    const int *h_lens;      /* host (batch) */
    fastspeech_gpu_stage_fn stage;
    void *user;
    hark_err_t *err;
} fwd_t;

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* stage dump: buf (batch, t, ld) float on the device -> each item's (len, cols) (synchronises) */
static int dump(const fwd_t *F, const char *name, const float *buf, int t, int ld, int cols,
                const int *lens_host)
{
    if (!F->stage)
        return HARK_OK;
    fastspeech_gpu_worker_t *w = F->w;
    size_t n = (size_t)F->batch * t * ld;
    float *h = hark_malloc(n * sizeof(float)), *o = hark_malloc((size_t)t * cols * sizeof(float));
    cudaError_t e = h && o ? cudaMemcpyAsync(h, buf, n * 4, cudaMemcpyDeviceToHost, w->stream)
                           : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    if (e == cudaSuccess)
        for (int b = 0; b < F->batch; b++) {
            int len = lens_host[b];
            for (int r = 0; r < len; r++)
                memcpy(o + (size_t)r * cols, h + ((size_t)b * t + r) * ld,
                       sizeof(float) * (size_t)cols);
            F->stage(F->user, b, name, o, len, cols);
        }
    hark_free(h);
    hark_free(o);
    return e == cudaSuccess ? HARK_OK : cuda_err(F->err, e, "stage dump");
}

/* y (rows, cout) float = conv(in masked to lens, zero-padded) (no bias); in of in_t */
static int conv(const fwd_t *F, float *y, const void *in, ops_dtype_t in_t, const gconv_t *c,
                ops_dtype_t dt, const float *bias_act_b, void *act_out, ops_dtype_t act_t)
{
    fastspeech_gpu_worker_t *w = F->w;
    TRY(cuda_conv1d_pad_mask(w->xp, dt, in, in_t, F->lens, F->batch, F->t, c->cin, c->cin, c->cin,
                             c->pad, c->pad, w->stream, F->err));
    TRY(cuda_conv1d(y, 0.0f, w->xp, c->w, dt, F->batch, F->t + 2 * c->pad, c->cin, c->cout, c->k, 1,
                    1, w->ops, F->err));
    if (act_out) /* bias + ReLU */
        TRY(cuda_conv1d_act(act_out, act_t, y, bias_act_b, F->rows, c->cout, CONV1D_ACT_RELU,
                            w->stream, F->err));
    return HARK_OK;
}

/* one post-LN FFT block on x (rows, d) float (and, 16-bit, its copy xh on entry and exit) */
static int fft_block(const fwd_t *F, float *x, const glayer_t *l, const char *side, int idx)
{
    fastspeech_gpu_worker_t *w = F->w;
    const int d = w->c->d_model, H = l->heads, hd = H * DK, n3 = 3 * hd, rows = F->rows;
    const ops_dtype_t dt = w->dt;
    char nm[48];
    if (!w->h16) {
        float *qkv = w->qkv, *ctx = w->ctx;
        TRY(cuda_linear(qkv, x, l->qkv_w, OPS_F32, l->qkv_b, rows, d, n3, CUDA_ACT_NONE, w->ops,
                        F->err));
        TRY(cuda_segment_attention(ctx, qkv, n3, qkv + hd, qkv + 2 * hd, n3, F->kbeg, F->klen, rows,
                                   H, DK, 0.125f, w->stream, F->err));
        TRY(cuda_linear(w->acc, ctx, l->fc_w, OPS_F32, NULL, rows, hd, d, CUDA_ACT_NONE, w->ops,
                        F->err));
        TRY(cuda_residual_layer_norm(w->a, NULL, OPS_F32, x, w->acc, l->fc_b, 1.0f, NULL, 0,
                                     l->ln1_g, l->ln1_b, 1, 1, rows, d, LN_EPS, w->stream, F->err));
        snprintf(nm, sizeof nm, "%s_layer%d_attn_ln", side, idx);
        TRY(dump(F, nm, w->a, F->t, d, d, F->h_lens));
        TRY(conv(F, w->acc, w->a, OPS_F32, &l->c1, OPS_F32, l->c1.b, w->h, OPS_F32));
        TRY(conv(F, w->acc, w->h, OPS_F32, &l->c2, OPS_F32, NULL, NULL, OPS_F32));
        TRY(cuda_residual_layer_norm(x, NULL, OPS_F32, w->a, w->acc, l->c2.b, 1.0f, NULL, 0,
                                     l->ln2_g, l->ln2_b, 1, 1, rows, d, LN_EPS, w->stream, F->err));
    } else {
        /* qkv (half) = xh · Wᵀ + b; flash attention; x = LN1(x + ctx · fcᵀ + b) with its half copy
         */
        cuda_epi_t e = {.mode = CUDA_EPI_F16,
                        .bias = l->qkv_b,
                        .out = w->qkv,
                        .ldo = n3,
                        .alpha = 1.0f,
                        .dt = dt};
        TRY(cuda_hgemm(&e, w->xh, d, l->qkv_w, rows, n3, d, w->ops, F->err));
        size_t es = ops_dtype_size(dt);
        const char *q = w->qkv;
        TRY(cuda_flash_attention(w->ctx, dt, hd, q, q + (size_t)hd * es, q + (size_t)2 * hd * es,
                                 n3, NULL, 0, NULL, NULL, F->lens, 0, -1, F->batch, F->t, H, DK,
                                 0.125f, w->stream, F->err));
        cuda_row_norms_t n1 = {1, l->ln1_g, l->ln1_b, NULL, NULL, 1, 0, w->xh, LN_EPS};
        cuda_epi_t r = {.mode = CUDA_EPI_RESID32,
                        .bias = l->fc_b,
                        .out = x,
                        .ldo = d,
                        .alpha = 1.0f,
                        .beta = 1.0f,
                        .norm = &n1,
                        .dt = dt};
        TRY(cuda_hgemm(&r, w->ctx, hd, l->fc_w, rows, d, hd, w->ops, F->err));
        snprintf(nm, sizeof nm, "%s_layer%d_attn_ln", side, idx);
        TRY(dump(F, nm, x, F->t, d, d, F->h_lens));
        /* FFN: conv1 + bias + ReLU into half (one implicit GEMM), conv2 + bias added into x,
         * then LN2 with its half copy */
        const gconv_t *c1 = &l->c1, *c2 = &l->c2;
        TRY(cuda_conv1d_pad_mask(w->xp, dt, w->xh, dt, F->lens, F->batch, F->t, d, d, d, c1->pad,
                                 c1->pad, w->stream, F->err));
        cuda_epi_t e1 = {.mode = CUDA_EPI_F16,
                         .act = CUDA_ACT_RELU,
                         .bias = c1->b,
                         .out = w->h,
                         .ldo = c1->cout,
                         .alpha = 1.0f,
                         .dt = dt};
        TRY(cuda_hconv2d(&e1, w->xp, c1->w, F->batch, d, F->t + 2 * c1->pad, 1, c1->cout, c1->k, 1,
                         1, w->ops, F->err));
        TRY(cuda_conv1d_pad_mask(w->xp, dt, w->h, dt, F->lens, F->batch, F->t, c2->cin, c2->cin,
                                 c2->cin, c2->pad, c2->pad, w->stream, F->err));
        cuda_epi_t e2 = {.mode = CUDA_EPI_RESID32,
                         .bias = c2->b,
                         .out = x,
                         .ldo = d,
                         .alpha = 1.0f,
                         .beta = 1.0f,
                         .dt = dt};
        TRY(cuda_hconv2d(&e2, w->xp, c2->w, F->batch, c2->cin, F->t + 2 * c2->pad, 1, d, c2->k, 1,
                         1, w->ops, F->err));
        TRY(cuda_rows_norm(x, 1, w->xh, dt, NULL, x, l->ln2_g, l->ln2_b, 1, NULL, NULL, 0, NULL, 0,
                           rows, d, LN_EPS, w->stream, F->err));
    }
    snprintf(nm, sizeof nm, "%s_layer%d_out", side, idx);
    return dump(F, nm, x, F->t, d, d, F->h_lens);
}

/* host index rows: tok, pos, kbeg, klen (each rows_cap) then lens (batch) */
static int *idx_tok(fastspeech_gpu_worker_t *w, int *base)
{
    return base;
}
static int *idx_pos(fastspeech_gpu_worker_t *w, int *base)
{
    return base + w->rows_cap;
}
static int *idx_kbeg(fastspeech_gpu_worker_t *w, int *base)
{
    return base + 2 * (size_t)w->rows_cap;
}
static int *idx_klen(fastspeech_gpu_worker_t *w, int *base)
{
    return base + 3 * (size_t)w->rows_cap;
}
static int *idx_lens(fastspeech_gpu_worker_t *w, int *base)
{
    return base + 4 * (size_t)w->rows_cap;
}

static int upload_idx(fastspeech_gpu_worker_t *w, hark_err_t *err)
{
    cudaError_t e = cudaMemcpyAsync(w->d_idx, w->h_idx,
                                    (4 * (size_t)w->rows_cap + 2 * (size_t)w->max_batch) * 4,
                                    cudaMemcpyHostToDevice, w->stream);
    return e == cudaSuccess ? HARK_OK : cuda_err(err, e, "index upload");
}

/* fill the FP32 attention's per-row key runs for (batch, t) with lengths lens */
static void set_runs(fastspeech_gpu_worker_t *w, const int *lens, int batch, int t)
{
    int *kb = idx_kbeg(w, w->h_idx), *kl = idx_klen(w, w->h_idx), *ln = idx_lens(w, w->h_idx);
    for (int b = 0; b < batch; b++) {
        ln[b] = lens[b];
        for (int r = 0; r < t; r++) {
            kb[(size_t)b * t + r] = b * t;
            kl[(size_t)b * t + r] = r < lens[b] ? lens[b] : 0;
        }
    }
}

static fwd_t fwd_for(fastspeech_gpu_worker_t *w, int batch, int t, const int *h_lens,
                     const fastspeech_gpu_opts_t *o, hark_err_t *err)
{
    fwd_t F = {w,
               batch,
               t,
               batch * t,
               idx_lens(w, w->d_idx),
               idx_kbeg(w, w->d_idx),
               idx_klen(w, w->d_idx),
               h_lens,
               o ? o->stage : NULL,
               o ? o->stage_user : NULL,
               err};
    return F;
}

/* phase 1 on the stream: the index upload, embedding + positions, the encoder, the duration
 * predictor, its output into the pinned h_dlog (not waited for) */
static int enqueue_phase1(fastspeech_gpu_worker_t *w, const fwd_t *F)
{
    const fastspeech_gpu_model_t *g = w->g;
    const fastspeech_config_t *c = w->c;
    const int d = c->d_model, fd = c->dp_filter;
    hark_err_t *err = F->err;
    cudaError_t e;
    TRY(upload_idx(w, err));
    float *x = w->enc;
    TRY(cuda_embed_pos(x, g->emb, g->pos_enc, idx_tok(w, w->d_idx), idx_pos(w, w->d_idx), F->rows,
                       d, 1.0f, w->stream, err));
    TRY(dump(F, "enc_add_pos_enc", x, F->t, d, d, F->h_lens));
    if (w->h16)
        TRY(cuda_cast(w->xh, w->dt, x, OPS_F32, (size_t)F->rows * d, w->stream, err));
    for (int l = 0; l < c->enc_layers; l++)
        TRY(fft_block(F, x, &g->enc[l], "enc", l));
    TRY(dump(F, "encoder_out", x, F->t, d, d, F->h_lens));
    /* the zero row the length regulator's padding reads */
    if ((e = cudaMemsetAsync(x + (size_t)F->rows * d, 0, (size_t)d * 4, w->stream)) != cudaSuccess)
        return cuda_err(err, e, "memset");
    /* duration predictor, FP32: conv, ReLU, LN, conv, ReLU, LN, linear */
    TRY(conv(F, w->acc, x, OPS_F32, &g->dp1, OPS_F32, g->dp1.b, w->h, OPS_F32));
    TRY(cuda_layer_norm(w->a, OPS_F32, w->h, g->dp_ln1_g, g->dp_ln1_b, F->rows, fd, LN_EPS,
                        w->stream, err));
    TRY(conv(F, w->acc, w->a, OPS_F32, &g->dp2, OPS_F32, g->dp2.b, w->h, OPS_F32));
    TRY(cuda_layer_norm(w->a, OPS_F32, w->h, g->dp_ln2_g, g->dp_ln2_b, F->rows, fd, LN_EPS,
                        w->stream, err));
    TRY(cuda_linear(w->dlog, w->a, g->dp_w, OPS_F32, g->dp_b, F->rows, fd, 1, CUDA_ACT_NONE, w->ops,
                    err));
    if ((e = cudaMemcpyAsync(w->h_dlog, w->dlog, (size_t)F->rows * 4, cudaMemcpyDeviceToHost,
                             w->stream)) != cudaSuccess)
        return cuda_err(err, e, "durations");
    return HARK_OK;
}

/* phase 2 on the stream: the index upload, the length regulator's gather + positions, the mel
 * side, the mel linear (not waited for) */
static int enqueue_phase2(fastspeech_gpu_worker_t *w, const fwd_t *F)
{
    const fastspeech_gpu_model_t *g = w->g;
    const fastspeech_config_t *c = w->c;
    const int d = c->d_model;
    hark_err_t *err = F->err;
    TRY(upload_idx(w, err));
    float *x = w->x;
    TRY(cuda_embed_pos(x, w->enc, g->pos_dec, idx_tok(w, w->d_idx), idx_pos(w, w->d_idx), F->rows,
                       d, 1.0f, w->stream, err));
    TRY(dump(F, "mel_side_add_pos_enc", x, F->t, d, d, F->h_lens));
    if (w->h16)
        TRY(cuda_cast(w->xh, w->dt, x, OPS_F32, (size_t)F->rows * d, w->stream, err));
    for (int l = 0; l < c->dec_layers; l++)
        TRY(fft_block(F, x, &g->dec[l], "dec", l));
    TRY(dump(F, "decoder_out", x, F->t, d, d, F->h_lens));
    if (w->h16) {
        cuda_epi_t em = {.mode = CUDA_EPI_F32,
                         .bias = g->mel_b,
                         .out = w->mel,
                         .ldo = c->n_mels,
                         .alpha = 1.0f,
                         .dt = w->dt};
        TRY(cuda_hgemm(&em, w->xh, d, g->mel_w, F->rows, c->n_mels, d, w->ops, err));
    } else {
        TRY(cuda_linear(w->mel, x, g->mel_w, OPS_F32, g->mel_b, F->rows, d, c->n_mels,
                        CUDA_ACT_NONE, w->ops, err));
    }
    TRY(dump(F, "mel", w->mel, F->t, c->n_mels, c->n_mels, F->h_lens));
    return HARK_OK;
}

static int enqueue_phase(fastspeech_gpu_worker_t *w, int phase, const fwd_t *F)
{
    return phase == 1 ? enqueue_phase1(w, F) : enqueue_phase2(w, F);
}

typedef struct {
    fastspeech_gpu_worker_t *w;
    int phase;
    const fwd_t *F;
} run_t;

static int enqueue_run(void *user, hark_err_t *err)
{
    run_t *r = user; /* the phase reports into F->err, the err given */
    (void)err;
    return enqueue_phase(r->w, r->phase, r->F);
}

/* one phase, replayed from a graph when its shape (phase, batch, t) was seen before (no stage
 * dumps: those synchronise) */
static int run_phase(fastspeech_gpu_worker_t *w, int phase, const fwd_t *F)
{
    if (F->stage || !w->graphs)
        return enqueue_phase(w, phase, F);
    run_t r = {w, phase, F};
    graph_key_t key = {{phase, F->batch, F->t}};
    return graph_cache_run(w->gc, &key, enqueue_run, &r, "fastspeech (gpu)", F->err);
}

int fastspeech_gpu_run(fastspeech_gpu_worker_t *w, const int *const *ids, const int *n, int batch,
                       const fastspeech_gpu_opts_t *o, int *n_frames, int *t_max,
                       const float **d_mel, hark_err_t *err)
{
    const fastspeech_gpu_model_t *g = w->g;
    const fastspeech_config_t *c = w->c;
    *d_mel = NULL;
    *t_max = 0;
    if (batch < 1 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "fastspeech (gpu): batch of %d, the worker takes %d", batch, w->max_batch);
    int N = 0;
    for (int b = 0; b < batch; b++) {
        if (n[b] < 1)
            return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech (gpu): item %d: no symbols", b);
        if (n[b] > w->max_symbols)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "fastspeech (gpu): item %d: %d symbols, the worker takes %d", b, n[b],
                           w->max_symbols);
        for (int i = 0; i < n[b]; i++)
            if (ids[b][i] < 1 || ids[b][i] >= c->n_symbols)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "fastspeech (gpu): item %d: symbol id %d at %d is out of range "
                               "[1, %d)",
                               b, ids[b][i], i, c->n_symbols);
        float al_b = o && o->alpha && o->alpha[b] > 0 ? o->alpha[b] : 1.0f;
        if (!(al_b <= 100))
            return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech (gpu): alpha %g", al_b);
        N = n[b] > N ? n[b] : N;
    }
    cudaSetDevice(g->device);
    cudaError_t e;
    /* ---- phase 1: symbols -> encoder -> duration predictor ---- */
    int *tok = idx_tok(w, w->h_idx), *pos = idx_pos(w, w->h_idx);
    for (int b = 0; b < batch; b++)
        for (int r = 0; r < N; r++) {
            tok[(size_t)b * N + r] = r < n[b] ? ids[b][r] : 0;
            pos[(size_t)b * N + r] = r < n[b] ? r + 1 : 0;
        }
    set_runs(w, n, batch, N);
    fwd_t F = fwd_for(w, batch, N, n, o, err);
    TRY(run_phase(w, 1, &F));
    if ((e = cudaStreamSynchronize(w->stream)) != cudaSuccess)
        return cuda_err(err, e, "durations");
    /* the durations, by the CPU path's rule; the frame counts */
    int *rep = hark_malloc(sizeof(int) * (size_t)batch * N);
    float *dfl = hark_malloc(sizeof(float) * (size_t)N * 3);
    if (!rep || !dfl) {
        hark_free(rep);
        hark_free(dfl);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    int T = 0, rc = HARK_OK;
    for (int b = 0; b < batch && !rc; b++) {
        float alpha = o && o->alpha && o->alpha[b] > 0 ? o->alpha[b] : 1.0f;
        const float *dl = w->h_dlog + (size_t)b * N;
        long total = fastspeech_round_durations(dl, n[b], alpha, dfl, rep + (size_t)b * N);
        if (F.stage) {
            float *drd = dfl + 2 * (size_t)N;
            for (int r = 0; r < n[b]; r++)
                drd[r] = (float)rep[(size_t)b * N + r];
            F.stage(F.user, b, "dur_log", dl, 1, n[b]);
            F.stage(F.user, b, "dur_float", dfl, 1, n[b]);
            F.stage(F.user, b, "dur_rounded", drd, 1, n[b]);
        }
        if (total == 0)
            rc = err_set(err, HARK_ERR_INVALID_ARG,
                         "fastspeech (gpu): item %d: every duration rounds to 0 (alpha %g): no "
                         "frames to synthesise",
                         b, alpha);
        n_frames[b] = (int)(total > c->max_seq_len ? c->max_seq_len : total); /* the CPU's cut */
        if (!rc && n_frames[b] > w->max_frames)
            rc = err_set(err, HARK_ERR_TOO_LARGE,
                         "fastspeech (gpu): item %d: %d mel frames, the worker takes %d", b,
                         n_frames[b], w->max_frames);
        T = n_frames[b] > T ? n_frames[b] : T;
    }
    hark_free(dfl);
    if (rc) {
        hark_free(rep);
        return rc;
    }
    /* ---- phase 2: length regulator (gather) -> mel side -> mel linear ---- */
    for (int b = 0; b < batch; b++) {
        int f = 0, pad_row = batch * N;
        for (int r = 0; r < n[b] && f < n_frames[b]; r++)
            for (int k = 0; k < rep[(size_t)b * N + r] && f < n_frames[b]; k++, f++) {
                tok[(size_t)b * T + f] = b * N + r;
                pos[(size_t)b * T + f] = f + 1;
            }
        for (; f < T; f++) {
            tok[(size_t)b * T + f] = pad_row;
            pos[(size_t)b * T + f] = 0;
        }
    }
    hark_free(rep);
    set_runs(w, n_frames, batch, T);
    F = fwd_for(w, batch, T, n_frames, o, err);
    TRY(run_phase(w, 2, &F));
    if ((e = cudaStreamSynchronize(w->stream)) != cudaSuccess)
        return cuda_err(err, e, "forward");
    w->last_batch = batch;
    w->last_t = T;
    for (int b = 0; b < batch; b++)
        w->last_frames[b] = n_frames[b];
    *t_max = T;
    *d_mel = w->mel;
    return HARK_OK;
}

int fastspeech_gpu_mel_to_host(fastspeech_gpu_worker_t *w, int b, float *out, hark_err_t *err)
{
    if (b < 0 || b >= w->last_batch)
        return err_set(err, HARK_ERR_INVALID_ARG, "fastspeech (gpu): item %d of %d", b,
                       w->last_batch);
    int nm = w->c->n_mels;
    cudaError_t e =
        cudaMemcpy(out, w->mel + (size_t)b * w->last_t * nm,
                   sizeof(float) * (size_t)w->last_frames[b] * nm, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? HARK_OK : cuda_err(err, e, "mel copy");
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "fastspeech: built without CUDA");
}

int fastspeech_gpu_model_create(const fastspeech_model_t *m, int device, ops_dtype_t dt,
                                fastspeech_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void fastspeech_gpu_model_destroy(fastspeech_gpu_model_t *g) {}
size_t fastspeech_gpu_model_bytes(const fastspeech_gpu_model_t *g)
{
    return 0;
}
const fastspeech_model_t *fastspeech_gpu_model_cpu(const fastspeech_gpu_model_t *g)
{
    return NULL;
}
int fastspeech_gpu_worker_create(const fastspeech_gpu_model_t *g, int max_batch, int max_symbols,
                                 int max_frames, fastspeech_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_device(err);
}
void fastspeech_gpu_worker_destroy(fastspeech_gpu_worker_t *w) {}
size_t fastspeech_gpu_worker_bytes(const fastspeech_gpu_worker_t *w)
{
    return 0;
}
int fastspeech_gpu_worker_max_frames(const fastspeech_gpu_worker_t *w)
{
    return 0;
}
int fastspeech_gpu_run(fastspeech_gpu_worker_t *w, const int *const *ids, const int *n, int batch,
                       const fastspeech_gpu_opts_t *o, int *n_frames, int *t_max,
                       const float **d_mel, hark_err_t *err)
{
    *d_mel = NULL;
    return no_device(err);
}
int fastspeech_gpu_mel_to_host(fastspeech_gpu_worker_t *w, int b, float *out, hark_err_t *err)
{
    return no_device(err);
}

#endif
