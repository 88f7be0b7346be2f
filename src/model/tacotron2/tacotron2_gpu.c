/* tacotron2_gpu.c — Tacotron 2 on the GPU (tacotron2_gpu.h): the weights re-laid out and uploaded
 * (the encoder's double block as it is; the decoder's matrices in the compute type, each LSTM's
 * W_ih | W_hh side by side, the projection's columns in the order of its input row, the prenet
 * as it is, the postnet with BatchNorm folded), the worker's scratch, and the run: encoder,
 * decoder steps in chunks (each chunk a CUDA graph once its shape repeats) with the gates checked
 * between chunks, postnet.
 * Tests: tests/model/tacotron2/test_tacotron2_gpu.c */
#include "model/tacotron2/tacotron2_gpu.h"

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/assert.h"
#include "gpu/graph_cache.h"
#include "gpu/weight_stage.h"
#include "hark.h"
#include "model/tacotron2/tacotron2_impl.h"
#include "model/tacotron2/tacotron2_kern.h"
#include "ops/conv1d.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 16      /* decoder steps between gate checks */
#define GRAPH_SLOTS 8 /* recorded chunks (by rows listed, steps, symbols) */
#define PROF_N 9      /* profiled parts: the 7 step kernels, the encoder, the postnet */

static const char *const PROF_NAMES[PROF_N] = {"prenet",     "attention_lstm", "query",
                                               "energies",   "attention",      "decoder_lstm",
                                               "projection", "encoder",        "postnet"};
#define MAX_BATCH 256
#define MAX_IDS 4096
#define MAX_STEPS 100000

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "tacotron2 (gpu): %s: %s", what, cudaGetErrorString(e));
}

static int kern(hark_err_t *err, int e, const char *what)
{
    return e ? cuda_err(err, (cudaError_t)e, what) : HARK_OK;
}

static int blas(hark_err_t *err, cublasStatus_t s, const char *what)
{
    return s == CUBLAS_STATUS_SUCCESS
               ? HARK_OK
               : err_set(err, HARK_ERR_CUDA, "tacotron2 (gpu): %s: cuBLAS status %d", what, (int)s);
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static size_t al(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

typedef struct {
    const void *w; /* (cout, k, cin) of dt, BatchNorm folded */
    const float *b;
    int cin, cout, k;
} gpost_t;

struct tacotron2_gpu_model {
    const tacotron2_model_t *m;
    int device;
    ops_dtype_t dt;
    void *dmat, *dflt;
    double *dd; /* the encoder's double block */
    size_t bytes;
    /* encoder (double, into dd) */
    const double *conv_w[MAX_CONVS], *conv_b[MAX_CONVS], *conv_scale[MAX_CONVS],
        *conv_shift[MAX_CONVS];
    const double *ih[2], *hh[2], *bih[2], *bhh[2], *memw;
    const float *emb;
    /* decoder */
    const void *att_w, *dec_w, *query_w, *proj_w, *pre0, *pre1;
    const float *att_b, *dec_b, *proj_b, *v, *loc_conv, *loc_dense;
    gpost_t post[MAX_CONVS];
    int lda, ldd, ldp; /* the input rows: P + E + AR, AR + E + DR, E + DR */
};

typedef struct {
    size_t att_w, dec_w, query_w, proj_w, pre0, pre1;
    size_t att_b, dec_b, proj_b, v, loc_conv, loc_dense, emb;
    size_t post_w[MAX_CONVS], post_b[MAX_CONVS];
} offs_t;

typedef struct {
    const tacotron2_model_t *m;
    offs_t *o;
} fill_t;

/* an LSTM's (4H, K) input row: W_ih's columns, then W_hh's; bias b_ih + b_hh */
static void stage_lstm(weight_stage_t *s, const lstm_t *l, size_t *ow, size_t *ob)
{
    int K = l->in + l->hid, G = 4 * l->hid;
    *ow = weight_stage_take(&s->n_mat, (size_t)G * K);
    *ob = weight_stage_take(&s->n_flt, (size_t)G);
    if (s->sizing)
        return;
    for (int r = 0; r < G; r++) {
        float *row = s->mat + *ow + (size_t)r * K;
        memcpy(row, l->w_ih + (size_t)r * l->in, sizeof(float) * (size_t)l->in);
        memcpy(row + l->in, l->w_hh + (size_t)r * l->hid, sizeof(float) * (size_t)l->hid);
        s->flt[*ob + r] = (float)((double)l->b_ih[r] + (double)l->b_hh[r]);
    }
}

static void stage_floats(weight_stage_t *s, size_t *off, const float *src, size_t n)
{
    *off = weight_stage_take(&s->n_flt, n);
    if (!s->sizing)
        memcpy(s->flt + *off, src, sizeof(float) * n);
}

static void fill(weight_stage_t *s, void *user)
{
    fill_t *f = user;
    const tacotron2_model_t *m = f->m;
    const tacotron2_config_t *c = &m->cfg;
    offs_t *o = f->o;
    int E = c->enc_dim, AR = c->att_rnn_dim, DR = c->dec_rnn_dim, nm = c->n_mels;
    int P = c->prenet_dim, A = c->att_dim;
    stage_lstm(s, &m->att_rnn, &o->att_w, &o->att_b);
    stage_lstm(s, &m->dec_rnn, &o->dec_w, &o->dec_b);
    o->query_w = weight_stage_take(&s->n_mat, (size_t)A * AR);
    if (!s->sizing)
        memcpy(s->mat + o->query_w, m->query_w, sizeof(float) * (size_t)A * AR);
    /* projection: the CPU's input row is [h_dec | context], the GPU's xp is [context | h_dec] */
    int K = DR + E;
    o->proj_w = weight_stage_take(&s->n_mat, (size_t)(nm + 1) * K);
    if (!s->sizing)
        for (int r = 0; r <= nm; r++) {
            const float *src = m->proj_w + (size_t)r * K;
            float *dst = s->mat + o->proj_w + (size_t)r * K;
            memcpy(dst, src + DR, sizeof(float) * (size_t)E);
            memcpy(dst + E, src, sizeof(float) * (size_t)DR);
        }
    stage_floats(s, &o->proj_b, m->proj_b, (size_t)nm + 1);
    o->pre0 = weight_stage_take(&s->n_mat, (size_t)nm * P);
    o->pre1 = weight_stage_take(&s->n_mat, (size_t)P * P);
    if (!s->sizing) {
        memcpy(s->mat + o->pre0, m->prenet0, sizeof(float) * (size_t)nm * P);
        memcpy(s->mat + o->pre1, m->prenet1, sizeof(float) * (size_t)P * P);
    }
    stage_floats(s, &o->v, m->v_w, (size_t)A);
    stage_floats(s, &o->loc_conv, m->loc_conv, (size_t)c->loc_filters * 2 * c->loc_kernel);
    stage_floats(s, &o->loc_dense, m->loc_dense, (size_t)A * c->loc_filters);
    stage_floats(s, &o->emb, m->emb, (size_t)c->n_symbols * c->emb_dim);
    for (int i = 0; i < c->postnet_convs; i++) {
        const convbn_t *cv = &m->post[i];
        size_t nw = (size_t)cv->cout * cv->k * cv->cin;
        o->post_w[i] = weight_stage_take(&s->n_mat, nw);
        o->post_b[i] = weight_stage_take(&s->n_flt, (size_t)cv->cout);
        if (s->sizing)
            continue;
        for (int oc = 0; oc < cv->cout; oc++) { /* BatchNorm (eval) folded into the conv */
            double sc = (double)cv->bn_g[oc] / sqrt((double)cv->bn_v[oc] + 1e-5);
            size_t row = (size_t)oc * cv->k * cv->cin;
            for (size_t q = 0; q < (size_t)cv->k * cv->cin; q++)
                s->mat[o->post_w[i] + row + q] = (float)(cv->w[row + q] * sc);
            s->flt[o->post_b[i] + oc] =
                (float)(((double)cv->b[oc] - cv->bn_m[oc]) * sc + cv->bn_b[oc]);
        }
    }
}

int tacotron2_gpu_model_device(const tacotron2_gpu_model_t *g)
{
    return g->device;
}

size_t tacotron2_gpu_model_bytes(const tacotron2_gpu_model_t *g)
{
    return g->bytes;
}

void tacotron2_gpu_model_destroy(tacotron2_gpu_model_t *g)
{
    if (!g)
        return;
    cudaSetDevice(g->device);
    cudaFree(g->dmat);
    cudaFree(g->dflt);
    cudaFree(g->dd);
    hark_free(g);
}

int tacotron2_gpu_model_create(const tacotron2_model_t *m, int device, ops_dtype_t dt,
                               tacotron2_gpu_model_t **out, hark_err_t *err)
{
    *out = NULL;
    const tacotron2_config_t *c = &m->cfg;
    if (dt != OPS_F32 && dt != OPS_F16)
        return err_set(err, HARK_ERR_INVALID_ARG, "tacotron2 (gpu): element type %d (fp32, fp16)",
                       (int)dt);
    if (c->loc_filters > 256 || (size_t)c->loc_filters * c->att_dim > 32768)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "tacotron2 (gpu): %d location filters x attention dim %d (the energies "
                       "kernel keeps at most 256 filters and 32768 of their weights on chip)",
                       c->loc_filters, c->att_dim);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    tacotron2_gpu_model_t *g = hark_calloc(1, sizeof *g);
    offs_t *o = hark_calloc(1, sizeof *o);
    if (!g || !o) {
        hark_free(g);
        hark_free(o);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    g->m = m;
    g->device = device;
    g->dt = dt;
    int E = c->enc_dim, AR = c->att_rnn_dim, DR = c->dec_rnn_dim, P = c->prenet_dim;
    g->lda = P + E + AR;
    g->ldd = AR + E + DR;
    g->ldp = E + DR;
    fill_t fl = {m, o};
    int rc = weight_stage_upload(fill, &fl, dt, &g->dmat, &g->dflt, &g->bytes, NULL,
                                 "tacotron2 (gpu)", err);
    if (!rc && (e = cudaMalloc((void **)&g->dd, sizeof(double) * m->dblock_n)) != cudaSuccess)
        rc = err_set(err, HARK_ERR_NOMEM, "tacotron2 (gpu): the encoder's weights: %s",
                     cudaGetErrorString(e));
    if (!rc && (e = cudaMemcpy(g->dd, m->dblock, sizeof(double) * m->dblock_n,
                               cudaMemcpyHostToDevice)) != cudaSuccess)
        rc = cuda_err(err, e, "upload");
    if (rc)
        goto done;
    g->bytes += sizeof(double) * m->dblock_n;
#define DD(p) ((const double *)g->dd + ((p)-m->dblock))
    for (int i = 0; i < c->enc_convs; i++) {
        g->conv_w[i] = DD(m->encd[i].w);
        g->conv_b[i] = DD(m->encd[i].b);
        g->conv_scale[i] = DD(m->encd[i].scale);
        g->conv_shift[i] = DD(m->encd[i].shift);
    }
    const lstmd_t *ld[2] = {&m->encd_fwd, &m->encd_bwd};
    for (int k = 0; k < 2; k++) {
        g->ih[k] = DD(ld[k]->w_ih);
        g->hh[k] = DD(ld[k]->w_hh);
        g->bih[k] = DD(ld[k]->b_ih);
        g->bhh[k] = DD(ld[k]->b_hh);
    }
    g->memw = DD(m->memory_wd);
#undef DD
    size_t es = ops_dtype_size(dt);
#define MAT(off) ((const void *)((const char *)g->dmat + (off)*es))
#define FLT(off) ((const float *)g->dflt + (off))
    g->att_w = MAT(o->att_w);
    g->dec_w = MAT(o->dec_w);
    g->query_w = MAT(o->query_w);
    g->proj_w = MAT(o->proj_w);
    g->pre0 = MAT(o->pre0);
    g->pre1 = MAT(o->pre1);
    g->att_b = FLT(o->att_b);
    g->dec_b = FLT(o->dec_b);
    g->proj_b = FLT(o->proj_b);
    g->v = FLT(o->v);
    g->loc_conv = FLT(o->loc_conv);
    g->loc_dense = FLT(o->loc_dense);
    g->emb = FLT(o->emb);
    for (int i = 0; i < c->postnet_convs; i++) {
        const convbn_t *cv = &m->post[i];
        g->post[i] = (gpost_t){MAT(o->post_w[i]), FLT(o->post_b[i]), cv->cin, cv->cout, cv->k};
    }
#undef MAT
#undef FLT
done:
    hark_free(o);
    if (rc) {
        tacotron2_gpu_model_destroy(g);
        return rc;
    }
    *out = g;
    return HARK_OK;
}

/* ---- workers -------------------------------------------------------------------------------- */

struct tacotron2_gpu_worker {
    const tacotron2_gpu_model_t *g;
    const tacotron2_config_t *c;
    int max_batch, max_ids, max_steps, wide; /* wide: the postnet's widest channel count */
    cudaStream_t stream;
    cublasHandle_t blas;
    ops_cuda_t *ops;
    void *mem;
    size_t bytes;
    /* encoder (double) */
    double *X, *Y, *XG[2], *H, *C, *enc;
    /* decoder */
    int *ids, *lens, *rows, *T;
    uint64_t *seeds;
    float *memory, *pmem, *w, *wcum, *energy, *align, *xa, *xd, *xp, *c_att, *c_dec, *pq;
    float *frames, *gates;
    /* postnet */
    void *post_x[2];
    float *post_acc, *mel, *res;
    int mel_ld;
    int *d_step; /* the chunk's first decoder step */
    int prof;    /* kernel times (tacotron2_gpu_set_profile) */
    cudaEvent_t ev[PROF_N + 1];
    double prof_ms[PROF_N];
    long prof_steps;
    int graphs; /* CUDA graphs of the decoder's chunks (HARK_NO_GRAPHS=1: off) */
    graph_cache_t *gc;
    /* pinned */
    int *h_ids, *h_int, *h_step;
    uint64_t *h_seeds;
    float *h_gates, *h_buf;
    size_t h_buf_n;
};

void tacotron2_gpu_worker_destroy(tacotron2_gpu_worker_t *w)
{
    if (!w)
        return;
    cudaSetDevice(w->g->device);
    if (w->stream)
        cudaStreamSynchronize(w->stream);
    cudaFree(w->mem);
    graph_cache_destroy(w->gc);
    for (int i = 0; i <= PROF_N; i++)
        if (w->ev[i])
            cudaEventDestroy(w->ev[i]);
    cudaFreeHost(w->h_ids);
    cudaFreeHost(w->h_step);
    cudaFreeHost(w->h_int);
    cudaFreeHost(w->h_seeds);
    cudaFreeHost(w->h_gates);
    cudaFreeHost(w->h_buf);
    ops_cuda_destroy(w->ops);
    if (w->blas)
        cublasDestroy(w->blas);
    if (w->stream)
        cudaStreamDestroy(w->stream);
    hark_free(w);
}

size_t tacotron2_gpu_worker_bytes(const tacotron2_gpu_worker_t *w)
{
    return w->bytes;
}
int tacotron2_gpu_worker_max_batch(const tacotron2_gpu_worker_t *w)
{
    return w->max_batch;
}
int tacotron2_gpu_worker_max_ids(const tacotron2_gpu_worker_t *w)
{
    return w->max_ids;
}
int tacotron2_gpu_worker_max_steps(const tacotron2_gpu_worker_t *w)
{
    return w->max_steps;
}
void *tacotron2_gpu_worker_stream(const tacotron2_gpu_worker_t *w)
{
    return w->stream;
}

void tacotron2_gpu_set_graphs(tacotron2_gpu_worker_t *w, int on)
{
    w->graphs = on;
    graph_cache_clear(w->gc);
}

int tacotron2_gpu_set_profile(tacotron2_gpu_worker_t *w, int on, hark_err_t *err)
{
    for (int i = 0; on && i <= PROF_N; i++)
        if (!w->ev[i]) {
            cudaError_t e = cudaEventCreate(&w->ev[i]);
            if (e != cudaSuccess)
                return cuda_err(err, e, "profile events");
        }
    w->prof = on;
    memset(w->prof_ms, 0, sizeof w->prof_ms);
    w->prof_steps = 0;
    return HARK_OK;
}

int tacotron2_gpu_profile(const tacotron2_gpu_worker_t *w, const char **names, double *ms, int cap)
{
    int n = 0;
    for (; n < PROF_N && n < cap; n++) {
        names[n] = PROF_NAMES[n];
        ms[n] = n < 7 ? (w->prof_steps ? w->prof_ms[n] / (double)w->prof_steps : 0) : w->prof_ms[n];
    }
    return n;
}

/* profiling: the event before part i (records nothing when off) */
static void mark(tacotron2_gpu_worker_t *w, int i)
{
    if (w->prof)
        cudaEventRecord(w->ev[i], w->stream);
}

/* profiling: adds the time from event a to event b to part i (waits for b) */
static void lap(tacotron2_gpu_worker_t *w, int a, int b, int i)
{
    float t = 0;
    if (w->prof && cudaEventSynchronize(w->ev[b]) == cudaSuccess &&
        cudaEventElapsedTime(&t, w->ev[a], w->ev[b]) == cudaSuccess)
        w->prof_ms[i] += t;
}

const float *tacotron2_gpu_mel(const tacotron2_gpu_worker_t *w, int *ld)
{
    *ld = w->mel_ld;
    return w->mel;
}

int tacotron2_gpu_worker_create(const tacotron2_gpu_model_t *g, int max_batch, int max_ids,
                                int max_steps, tacotron2_gpu_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    const tacotron2_config_t *c = &g->m->cfg;
    if (max_steps == 0)
        max_steps = c->max_decoder_steps;
    if (max_batch < 1 || max_batch > MAX_BATCH || max_ids < 1 || max_ids > MAX_IDS ||
        max_steps < 1 || max_steps > MAX_STEPS)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "tacotron2 (gpu): max_batch %d (1..%d), max_ids %d (1..%d), max_steps %d "
                       "(1..%d)",
                       max_batch, MAX_BATCH, max_ids, MAX_IDS, max_steps, MAX_STEPS);
    cudaError_t e = cudaSetDevice(g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    tacotron2_gpu_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->g = g;
    w->c = c;
    w->max_batch = max_batch;
    w->max_ids = max_ids;
    w->max_steps = max_steps;
    int E = c->enc_dim, AR = c->att_rnn_dim, DR = c->dec_rnn_dim, nm = c->n_mels;
    int A = c->att_dim, hid = E / 2, pad = (c->enc_kernel - 1) / 2;
    int ppad = (c->postnet_kernel - 1) / 2;
    w->wide = nm > c->postnet_dim ? nm : c->postnet_dim;
    size_t B = (size_t)max_batch, N = (size_t)max_ids, S = (size_t)max_steps;
    size_t Lp = N + 2 * (size_t)pad, es = ops_dtype_size(g->dt);
    size_t ycols = (size_t)(E > A ? E : A);
    size_t sz[] = {
        B * Lp * E * 8,                                    /* X */
        B * Lp * ycols * 8,                                /* Y */
        B * Lp * 4 * hid * 8,                              /* XG fwd */
        B * Lp * 4 * hid * 8,                              /* XG bwd */
        4 * B * hid * 8,                                   /* H */
        2 * B * hid * 8,                                   /* C */
        B * N * E * 8,                                     /* enc */
        B * N * 4,                                         /* ids */
        B * 4,                                             /* lens */
        B * 4,                                             /* rows */
        B * 4,                                             /* T */
        4,                                                 /* d_step */
        B * 8,                                             /* seeds */
        B * N * E * 4,                                     /* memory */
        B * N * A * 4,                                     /* pmem */
        B * N * 4,                                         /* w */
        B * N * 4,                                         /* wcum */
        B * N * 4,                                         /* energy */
        B * S * N * 4,                                     /* align */
        B * (size_t)g->lda * 4,                            /* xa */
        B * (size_t)g->ldd * 4,                            /* xd */
        B * (size_t)g->ldp * 4,                            /* xp */
        B * AR * 4,                                        /* c_att */
        B * DR * 4,                                        /* c_dec */
        B * A * 4,                                         /* pq */
        B * S * nm * 4,                                    /* frames */
        B * S * 4,                                         /* gates */
        B * (S + 2 * (size_t)ppad) * (size_t)w->wide * es, /* post_x[0] */
        B * (S + 2 * (size_t)ppad) * (size_t)w->wide * es, /* post_x[1] */
        B * S * (size_t)w->wide * 4,                       /* post_acc */
        B * nm * S * 4,                                    /* mel */
        B * nm * S * 4,                                    /* res */
    };
    size_t n_sz = sizeof sz / sizeof sz[0], total = 0;
    for (size_t i = 0; i < n_sz; i++)
        total += al(sz[i]);
    int rc = HARK_OK;
    w->h_buf_n = B * S * (N > (size_t)w->wide ? N : (size_t)w->wide);
    if (w->h_buf_n < B * N * (size_t)(E > A ? E : A))
        w->h_buf_n = B * N * (size_t)(E > A ? E : A);
    if ((e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_ids, B * N * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_int, 4 * B * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_step, sizeof(int))) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_seeds, B * 8)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_gates, B * CHUNK * 4)) != cudaSuccess ||
        (e = cudaMallocHost((void **)&w->h_buf, w->h_buf_n * 4)) != cudaSuccess) {
        rc = cuda_err(err, e, "stream / pinned buffers");
        goto fail;
    }
    const char *ng = getenv("HARK_NO_GRAPHS");
    w->graphs = !(ng && *ng && strcmp(ng, "0"));
    if (!(w->gc = graph_cache_create(GRAPH_SLOTS, w->stream))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (cublasCreate(&w->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(w->blas, w->stream) != CUBLAS_STATUS_SUCCESS) {
        w->blas = NULL;
        rc = err_set(err, HARK_ERR_CUDA, "tacotron2 (gpu): cuBLAS handle");
        goto fail;
    }
    if ((rc = ops_cuda_create(w->stream, &w->ops, err)) != HARK_OK)
        goto fail;
    if ((e = cudaMalloc(&w->mem, total)) != cudaSuccess) {
        rc = err_set(err, HARK_ERR_NOMEM,
                     "tacotron2 (gpu): %zu MiB of scratch for batch %d x %d symbols x %d steps: %s",
                     total >> 20, max_batch, max_ids, max_steps, cudaGetErrorString(e));
        goto fail;
    }
    w->bytes = total + ops_cuda_workspace_bytes();
    char *p = w->mem;
    size_t i = 0;
#define TAKE(dst, type) (dst = (type)(void *)p, p += al(sz[i++]))
    TAKE(w->X, double *);
    TAKE(w->Y, double *);
    TAKE(w->XG[0], double *);
    TAKE(w->XG[1], double *);
    TAKE(w->H, double *);
    TAKE(w->C, double *);
    TAKE(w->enc, double *);
    TAKE(w->ids, int *);
    TAKE(w->lens, int *);
    TAKE(w->rows, int *);
    TAKE(w->T, int *);
    TAKE(w->d_step, int *);
    TAKE(w->seeds, uint64_t *);
    TAKE(w->memory, float *);
    TAKE(w->pmem, float *);
    TAKE(w->w, float *);
    TAKE(w->wcum, float *);
    TAKE(w->energy, float *);
    TAKE(w->align, float *);
    TAKE(w->xa, float *);
    TAKE(w->xd, float *);
    TAKE(w->xp, float *);
    TAKE(w->c_att, float *);
    TAKE(w->c_dec, float *);
    TAKE(w->pq, float *);
    TAKE(w->frames, float *);
    TAKE(w->gates, float *);
    TAKE(w->post_x[0], void *);
    TAKE(w->post_x[1], void *);
    TAKE(w->post_acc, float *);
    TAKE(w->mel, float *);
    TAKE(w->res, float *);
#undef TAKE
    HARK_ASSERT(i == n_sz && (size_t)(p - (char *)w->mem) == total);
    *out = w;
    return HARK_OK;
fail:
    tacotron2_gpu_worker_destroy(w);
    return rc;
}

/* ---- the run -------------------------------------------------------------------------------- */

/* row-major C (m, n) = beta · C + A (m, k) · B (n, k)ᵀ, all double */
static int dgemm_nt(cublasHandle_t h, double *Cm, const double *Am, const double *Bm, int m, int n,
                    int k, int lda, int ldb, int ldc, double beta, hark_err_t *err)
{
    const double one = 1.0;
    return blas(
        err,
        cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, Bm, ldb, Am, lda, &beta, Cm, ldc),
        "dgemm");
}

typedef struct {
    tacotron2_gpu_worker_t *w;
    const tacotron2_opts_t *o;
    hark_err_t *err;
} run_t;

/* copies n floats of the device to the worker's pinned buffer and waits */
static int fetch(run_t *r, const float *d, size_t n, size_t ld_src, size_t cols, size_t rows)
{
    tacotron2_gpu_worker_t *w = r->w;
    cudaError_t e;
    HARK_ASSERT(rows * cols <= w->h_buf_n);
    (void)n;
    if (ld_src == cols)
        e = cudaMemcpyAsync(w->h_buf, d, sizeof(float) * rows * cols, cudaMemcpyDeviceToHost,
                            w->stream);
    else
        e = cudaMemcpy2DAsync(w->h_buf, sizeof(float) * cols, d, sizeof(float) * ld_src,
                              sizeof(float) * cols, rows, cudaMemcpyDeviceToHost, w->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? HARK_OK : cuda_err(r->err, e, "copy to the host");
}

static void stage(run_t *r, int b, const char *name, int step, const float *data, int rows,
                  int cols)
{
    r->o->stage(r->o->stage_user, b, name, step, data, rows, cols);
}

/* dumps d (rows, cols) row-major with row stride ld, or its transpose when tr */
static int dump(run_t *r, int b, const char *name, int step, const float *d, int rows, int cols,
                size_t ld, int tr)
{
    TRY(fetch(r, d, 0, ld, (size_t)cols, (size_t)rows));
    float *h = r->w->h_buf;
    if (!tr) {
        stage(r, b, name, step, h, rows, cols);
        return HARK_OK;
    }
    float *t = hark_malloc(sizeof(float) * (size_t)rows * cols);
    if (!t)
        return err_set(r->err, HARK_ERR_NOMEM, "tacotron2 (gpu): out of memory for a dump");
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            t[(size_t)j * rows + i] = h[(size_t)i * cols + j];
    stage(r, b, name, step, t, cols, rows);
    hark_free(t);
    return HARK_OK;
}

static int encode(run_t *r, int B, int nmax, const int *n_ids)
{
    tacotron2_gpu_worker_t *w = r->w;
    const tacotron2_gpu_model_t *g = w->g;
    const tacotron2_config_t *c = w->c;
    hark_err_t *err = r->err;
    int E = c->enc_dim, K = c->enc_kernel, pad = (K - 1) / 2, hid = E / 2, A = c->att_dim;
    int Lp = nmax + 2 * pad, rows = B * Lp;
    void *s = w->stream;
    TRY(kern(err, t2k_embed(w->X, g->emb, w->ids, w->lens, B, nmax, Lp, pad, E, s), "embed"));
    if (r->o->stage) {
        double *hx = hark_malloc(sizeof(double) * (size_t)rows * E);
        float *t = hark_malloc(sizeof(float) * (size_t)nmax * E);
        cudaError_t e = hx && t ? cudaMemcpyAsync(hx, w->X, sizeof(double) * (size_t)rows * E,
                                                  cudaMemcpyDeviceToHost, w->stream)
                                : cudaErrorMemoryAllocation;
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(w->stream);
        for (int b = 0; e == cudaSuccess && b < B; b++) {
            int n = n_ids[b];
            for (int q = 0; q < n; q++)
                for (int k = 0; k < E; k++)
                    t[(size_t)k * n + q] = (float)hx[((size_t)b * Lp + pad + q) * E + k];
            stage(r, b, "embedded", -1, t, E, n);
        }
        hark_free(hx);
        hark_free(t);
        if (e != cudaSuccess)
            return cuda_err(err, e, "embedded dump");
    }
    int out_rows = rows - 2 * pad;
    for (int i = 0; i < c->enc_convs; i++) {
        for (int tap = 0; tap < K; tap++)
            TRY(dgemm_nt(w->blas, w->Y, w->X + (size_t)tap * E, g->conv_w[i] + (size_t)tap * E * E,
                         out_rows, E, E, E, E, E, tap ? 1.0 : 0.0, err));
        TRY(kern(err,
                 t2k_conv_epi(w->X, w->Y, g->conv_b[i], g->conv_scale[i], g->conv_shift[i], w->lens,
                              B, Lp, pad, E, s),
                 "encoder conv"));
    }
    for (int d = 0; d < 2; d++) {
        TRY(kern(err, t2k_fill_rows(w->XG[d], g->bih[d], rows, 4 * hid, s), "lstm bias"));
        TRY(dgemm_nt(w->blas, w->XG[d], w->X, g->ih[d], rows, 4 * hid, E, E, E, 4 * hid, 1.0, err));
    }
    cudaError_t e = cudaMemsetAsync(w->H, 0, sizeof(double) * 4 * (size_t)B * hid, w->stream);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(w->C, 0, sizeof(double) * 2 * (size_t)B * hid, w->stream);
    if (e != cudaSuccess)
        return cuda_err(err, e, "memset");
    for (int t = 0; t < nmax; t++)
        TRY(kern(err,
                 t2k_enc_lstm_step(w->enc, w->H, w->C, w->XG[0], w->XG[1], g->hh[0], g->hh[1],
                                   g->bhh[0], g->bhh[1], w->lens, B, nmax, Lp, pad, hid, E, t, s),
                 "encoder lstm"));
    if (r->o->memory) { /* the caller's encoder output (tests): into enc, rounded as the own */
        double *hd = hark_malloc(sizeof(double) * (size_t)B * nmax * E);
        float *hf = hark_malloc(sizeof(float) * (size_t)nmax * E);
        cudaError_t ce = hd && hf
                             ? cudaMemcpyAsync(hd, w->enc, sizeof(double) * (size_t)B * nmax * E,
                                               cudaMemcpyDeviceToHost, w->stream)
                             : cudaErrorMemoryAllocation;
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(w->stream);
        for (int b = 0; ce == cudaSuccess && b < B; b++) {
            double *rowd = hd + (size_t)b * nmax * E;
            for (size_t q = 0; q < (size_t)n_ids[b] * E; q++)
                hf[q] = (float)rowd[q];
            r->o->memory(r->o->memory_user, b, hf, n_ids[b], E);
            for (size_t q = 0; q < (size_t)n_ids[b] * E; q++)
                rowd[q] = hf[q];
        }
        if (ce == cudaSuccess)
            ce = cudaMemcpyAsync(w->enc, hd, sizeof(double) * (size_t)B * nmax * E,
                                 cudaMemcpyHostToDevice, w->stream);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(w->stream);
        hark_free(hd);
        hark_free(hf);
        if (ce != cudaSuccess)
            return cuda_err(err, ce, "memory hook");
    }
    TRY(kern(err, t2k_round_memory(w->memory, w->enc, w->lens, B, nmax, E, s), "memory"));
    TRY(dgemm_nt(w->blas, w->Y, w->enc, g->memw, B * nmax, A, E, E, E, A, 0.0, err));
    TRY(kern(err, t2k_to_float(w->pmem, w->Y, (long long)B * nmax * A, s), "processed memory"));
    if (r->o->stage)
        for (int b = 0; b < B; b++) {
            TRY(dump(r, b, "encoder_out", -1, w->memory + (size_t)b * nmax * E, n_ids[b], E, E, 0));
            TRY(dump(r, b, "processed_memory", -1, w->pmem + (size_t)b * nmax * A, n_ids[b], A, A,
                     0));
        }
    return HARK_OK;
}

/* one decoder step over the na listed slots */
/* decoder step d_step + k over the na listed slots */
static int step_once(run_t *r, int k, int na, int nmax, const uint8_t *d_masks)
{
    tacotron2_gpu_worker_t *w = r->w;
    const tacotron2_gpu_model_t *g = w->g;
    const tacotron2_config_t *c = w->c;
    hark_err_t *err = r->err;
    int E = c->enc_dim, AR = c->att_rnn_dim, DR = c->dec_rnn_dim, nm = c->n_mels;
    int P = c->prenet_dim, A = c->att_dim, S = w->max_steps;
    int wt = g->dt == OPS_F16;
    int lda = g->lda, ldd = g->ldd, ldp = g->ldp;
    void *s = w->stream;
    mark(w, 0);
    TRY(kern(err,
             t2k_prenet(wt, g->pre0, g->pre1, w->frames, S, nm, P, w->d_step, k, w->rows, na, w->xa,
                        lda, w->seeds, d_masks, s),
             "prenet"));
    mark(w, 1);
    TRY(kern(err,
             t2k_lstm(wt, g->att_w, g->att_b, w->xa, lda, lda, AR, w->rows, na, w->c_att, w->xd,
                      ldd, NULL, 0, NULL, 0, 0, s),
             "attention lstm"));
    mark(w, 2);
    TRY(kern(err, t2k_gemv(wt, g->query_w, w->xd, ldd, AR, A, w->rows, na, w->pq, A, s), "query"));
    mark(w, 3);
    TRY(kern(err,
             t2k_energy(w->pq, w->pmem, w->w, w->wcum, g->loc_conv, g->loc_dense, g->v, w->rows, na,
                        w->lens, nmax, A, c->loc_filters, c->loc_kernel, w->energy, s),
             "energies"));
    mark(w, 4);
    TRY(kern(err,
             t2k_attend(w->energy, w->w, w->wcum, w->align, S, w->d_step, k, w->memory, w->rows, na,
                        w->lens, nmax, E, w->xa + P, lda, w->xd + AR, ldd, w->xp, ldp, s),
             "attention"));
    mark(w, 5);
    /* the decoder LSTM; its side job: h_att (xd[0, AR)) into xa for the next step */
    TRY(kern(err,
             t2k_lstm(wt, g->dec_w, g->dec_b, w->xd, ldd, ldd, DR, w->rows, na, w->c_dec, w->xp + E,
                      ldp, w->xd, ldd, w->xa + P + E, lda, AR, s),
             "decoder lstm"));
    mark(w, 6);
    /* projection; its side job: h_dec (xp[E, E + DR)) into xd for the next step */
    TRY(kern(err,
             t2k_project(wt, g->proj_w, g->proj_b, w->xp, ldp, ldp, nm, w->rows, na, w->frames,
                         w->gates, S, w->d_step, k, w->xp + E, ldp, w->xd + AR + E, ldd, DR, s),
             "projection"));
    if (w->prof) {
        mark(w, 7);
        for (int i = 0; i < 7; i++)
            lap(w, i, i + 1, i);
        w->prof_steps++;
    }
    return HARK_OK;
}

typedef struct {
    run_t *r;
    int n_run, na, nmax;
    const uint8_t *d_masks;
} chunk_t;

/* a chunk's steps (graph_cache's enqueue: recorded once per (rows, steps, symbols, masks)) */
static int enqueue_chunk(void *user, hark_err_t *err)
{
    chunk_t *ch = user;
    (void)err;
    for (int k = 0; k < ch->n_run; k++)
        TRY(step_once(ch->r, k, ch->na, ch->nmax, ch->d_masks));
    return HARK_OK;
}

static int dump_step(run_t *r, int step, const int *act, int na, const int *n_ids)
{
    tacotron2_gpu_worker_t *w = r->w;
    const tacotron2_gpu_model_t *g = w->g;
    const tacotron2_config_t *c = w->c;
    int E = c->enc_dim, AR = c->att_rnn_dim, DR = c->dec_rnn_dim, nm = c->n_mels;
    int P = c->prenet_dim, S = w->max_steps, nmax = w->mel_ld; /* mel_ld holds nmax here */
    for (int i = 0; i < na; i++) {
        int b = act[i], n = n_ids[b];
        size_t N = (size_t)nmax;
        TRY(dump(r, b, "prenet_out", step, w->xa + (size_t)b * g->lda, 1, P, P, 0));
        TRY(dump(r, b, "attention_hidden", step, w->xd + (size_t)b * g->ldd, 1, AR, AR, 0));
        TRY(dump(r, b, "attention_cell", step, w->c_att + (size_t)b * AR, 1, AR, AR, 0));
        TRY(dump(r, b, "attention_weights", step, w->w + b * N, 1, n, n, 0));
        TRY(dump(r, b, "attention_weights_cum", step, w->wcum + b * N, 1, n, n, 0));
        TRY(dump(r, b, "attention_context", step, w->xp + (size_t)b * g->ldp, 1, E, E, 0));
        TRY(dump(r, b, "decoder_hidden", step, w->xp + (size_t)b * g->ldp + E, 1, DR, DR, 0));
        TRY(dump(r, b, "decoder_cell", step, w->c_dec + (size_t)b * DR, 1, DR, DR, 0));
        const float *fr = w->frames + ((size_t)b * S + step) * nm;
        TRY(dump(r, b, "mel_frame", step, fr, 1, nm, nm, 0));
        TRY(dump(r, b, "gate", step, w->gates + (size_t)b * S + step, 1, 1, 1, 0));
    }
    return HARK_OK;
}

static int postnet(run_t *r, int B, const int *T, int Tmax)
{
    tacotron2_gpu_worker_t *w = r->w;
    const tacotron2_gpu_model_t *g = w->g;
    const tacotron2_config_t *c = w->c;
    hark_err_t *err = r->err;
    int nm = c->n_mels, pad = (c->postnet_kernel - 1) / 2, S = w->max_steps;
    int dt16 = g->dt == OPS_F16, dump_res = r->o->stage != NULL;
    void *s = w->stream;
    TRY(kern(err, t2k_post_input(w->post_x[0], dt16, w->frames, S, w->T, B, Tmax, pad, nm, s),
             "postnet input"));
    int cur = 0;
    for (int i = 0; i < c->postnet_convs; i++) {
        const gpost_t *p = &g->post[i];
        int last = i == c->postnet_convs - 1;
        TRY(cuda_conv1d(w->post_acc, 0.0f, w->post_x[cur], p->w, g->dt, B, Tmax + 2 * pad, p->cin,
                        p->cout, p->k, 1, 1, w->ops, err));
        TRY(kern(err,
                 t2k_post_epi(w->post_acc, p->b, p->cout, last, w->post_x[cur ^ 1], dt16, w->mel,
                              dump_res ? w->res : NULL, w->frames, S, w->T, B, Tmax, pad, s),
                 "postnet"));
        cur ^= 1;
    }
    w->mel_ld = Tmax;
    if (dump_res)
        for (int b = 0; b < B; b++) {
            size_t off = (size_t)b * nm * Tmax;
            /* mel_decoder: the frames (time-major) transposed */
            TRY(dump(r, b, "mel_decoder", -1, w->frames + (size_t)b * S * nm, T[b], nm, nm, 1));
            TRY(dump(r, b, "postnet_residual", -1, w->res + off, nm, T[b], Tmax, 0));
            TRY(dump(r, b, "mel_postnet", -1, w->mel + off, nm, T[b], Tmax, 0));
        }
    return HARK_OK;
}

static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

int tacotron2_gpu_run(tacotron2_gpu_worker_t *w, const int *const *ids, const int *n_ids, int batch,
                      const tacotron2_opts_t *opts, tacotron2_result_t *res, int *n_frames,
                      int *mel_length, hark_err_t *err)
{
    const tacotron2_config_t *c = w->c;
    tacotron2_opts_t o0 = {0};
    const tacotron2_opts_t *o = opts ? opts : &o0;
    if (batch < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "tacotron2: an empty batch");
    if (res)
        memset(res, 0, sizeof *res * (size_t)batch);
    if (batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "tacotron2 (gpu): batch %d (worker: %d)", batch,
                       w->max_batch);
    int nmax = 0;
    for (int b = 0; b < batch; b++) {
        if (n_ids[b] < 1)
            return err_set(err, HARK_ERR_INVALID_ARG, "tacotron2: row %d has no symbols", b);
        if (n_ids[b] > w->max_ids)
            return err_set(err, HARK_ERR_TOO_LARGE, "tacotron2 (gpu): row %d: %d symbols (max %d)",
                           b, n_ids[b], w->max_ids);
        for (int s = 0; s < n_ids[b]; s++)
            if (ids[b][s] < 0 || ids[b][s] >= c->n_symbols)
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "tacotron2: row %d: symbol id %d at %d is outside [0, %d)", b,
                               ids[b][s], s, c->n_symbols);
        nmax = n_ids[b] > nmax ? n_ids[b] : nmax;
    }
    int max_steps = o->max_decoder_steps > 0 ? o->max_decoder_steps : c->max_decoder_steps;
    if (max_steps > w->max_steps)
        return err_set(err, HARK_ERR_TOO_LARGE, "tacotron2 (gpu): %d decoder steps (worker: %d)",
                       max_steps, w->max_steps);
    int early = o->early_stopping ? o->early_stopping > 0 : !c->no_early_stopping;
    cudaError_t e = cudaSetDevice(w->g->device);
    if (e != cudaSuccess)
        return cuda_err(err, e, "set device");
    run_t r = {w, o, err};
    int B = batch, nm = c->n_mels, P = c->prenet_dim, S = w->max_steps;
    uint8_t *d_masks = NULL, *h_masks = NULL;
    int *steps = hark_calloc((size_t)B * 3, sizeof(int)), *mlen = steps + B, *act = mlen + B;
    int rc = HARK_OK;
    if (!steps)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    /* inputs */
    for (int b = 0; b < B; b++) {
        for (int s = 0; s < nmax; s++)
            w->h_ids[(size_t)b * nmax + s] = s < n_ids[b] ? ids[b][s] : 0;
        w->h_int[b] = n_ids[b];
        w->h_int[B + b] = b;
        w->h_seeds[b] = o->seeds ? o->seeds[b] : o->seed;
        act[b] = b;
        mlen[b] = -1;
    }
    if ((e = cudaMemcpyAsync(w->ids, w->h_ids, sizeof(int) * (size_t)B * nmax,
                             cudaMemcpyHostToDevice, w->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(w->lens, w->h_int, sizeof(int) * (size_t)B, cudaMemcpyHostToDevice,
                             w->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(w->rows, w->h_int + B, sizeof(int) * (size_t)B, cudaMemcpyHostToDevice,
                             w->stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(w->seeds, w->h_seeds, sizeof(uint64_t) * (size_t)B,
                             cudaMemcpyHostToDevice, w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "upload");
        goto done;
    }
    if (o->mask) { /* the recorded masks, every step a row may run (tests) */
        size_t n = (size_t)B * S * 2 * P;
        h_masks = hark_calloc(n, 1);
        if (!h_masks) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory for the prenet masks");
            goto done;
        }
        for (int b = 0; b < B; b++)
            for (int s = 0; s < max_steps; s++)
                for (int l = 0; l < 2; l++)
                    o->mask(o->mask_user, b, s, l, h_masks + (((size_t)b * S + s) * 2 + l) * P, P);
        if ((e = cudaMalloc((void **)&d_masks, n)) != cudaSuccess ||
            (e = cudaMemcpyAsync(d_masks, h_masks, n, cudaMemcpyHostToDevice, w->stream)) !=
                cudaSuccess) {
            rc = cuda_err(err, e, "prenet masks");
            goto done;
        }
    }
    mark(w, 8);
    if ((rc = encode(&r, B, nmax, n_ids)))
        goto done;
    mark(w, 9);
    lap(w, 8, 9, 7);
    /* the decoder's state starts at zero */
    {
        const tacotron2_gpu_model_t *g = w->g;
        size_t Bz = (size_t)B;
        struct {
            void *p;
            size_t n;
        } z[] = {{w->xa, Bz * g->lda},
                 {w->xd, Bz * g->ldd},
                 {w->xp, Bz * g->ldp},
                 {w->c_att, Bz * c->att_rnn_dim},
                 {w->c_dec, Bz * c->dec_rnn_dim},
                 {w->w, Bz * w->max_ids},
                 {w->wcum, Bz * w->max_ids}};
        for (size_t i = 0; i < sizeof z / sizeof z[0]; i++)
            if ((e = cudaMemsetAsync(z[i].p, 0, sizeof(float) * z[i].n, w->stream)) !=
                cudaSuccess) {
                rc = cuda_err(err, e, "memset");
                goto done;
            }
    }
    /* the decoder; stage dumps need each step's state, so they run a step at a time */
    w->mel_ld = nmax;
    int na = B, chunk = o->stage ? 1 : CHUNK;
    for (int s0 = 0; s0 < max_steps && na > 0; s0 += chunk) {
        int n_run = max_steps - s0 < chunk ? max_steps - s0 : chunk;
        /* the chunk's first step into d_step (the kernels index w, wcum, energy and align by
         * the batch's nmax) */
        *w->h_step = s0;
        if ((e = cudaMemcpyAsync(w->d_step, w->h_step, sizeof(int), cudaMemcpyHostToDevice,
                                 w->stream)) != cudaSuccess) {
            rc = cuda_err(err, e, "step");
            goto done;
        }
        if (o->stage) { /* one step, eager, dumped */
            if ((rc = step_once(&r, 0, na, nmax, d_masks)) ||
                (rc = dump_step(&r, s0, act, na, n_ids)))
                goto done;
        } else {
            chunk_t ch = {&r, n_run, na, nmax, d_masks};
            graph_key_t key = {{na, nmax, n_run, (long long)(uintptr_t)d_masks, B, 0, 0, 0}};
            if ((rc = w->graphs && !w->prof
                          ? graph_cache_run(w->gc, &key, enqueue_chunk, &ch, "tacotron2 (gpu)", err)
                          : enqueue_chunk(&ch, err)))
                goto done;
        }
        /* the gates of the chunk */
        for (int i = 0; i < na; i++)
            if ((e = cudaMemcpyAsync(w->h_gates + (size_t)i * chunk,
                                     w->gates + (size_t)act[i] * S + s0, sizeof(float) * n_run,
                                     cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess)
                break;
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(w->stream);
        if (e != cudaSuccess) {
            rc = cuda_err(err, e, "decoder");
            goto done;
        }
        int keep = 0;
        for (int i = 0; i < na; i++) {
            int b = act[i], done = 0;
            for (int j = 0; j < n_run && !done; j++) {
                steps[b] = s0 + j + 1;
                if (mlen[b] < 0 &&
                    !(sigmoidf(w->h_gates[(size_t)i * chunk + j]) <= c->gate_threshold))
                    mlen[b] = s0 + j;
                done = early && mlen[b] >= 0;
            }
            if (!done)
                act[keep++] = b;
        }
        if (keep != na && keep > 0) {
            memcpy(w->h_int + 2 * B, act, sizeof(int) * (size_t)keep);
            if ((e = cudaMemcpyAsync(w->rows, w->h_int + 2 * B, sizeof(int) * (size_t)keep,
                                     cudaMemcpyHostToDevice, w->stream)) != cudaSuccess ||
                (e = cudaStreamSynchronize(w->stream)) != cudaSuccess) {
                rc = cuda_err(err, e, "row list");
                goto done;
            }
        }
        na = keep;
    }
    int Tmax = 0;
    for (int b = 0; b < B; b++) {
        if (mlen[b] < 0)
            mlen[b] = steps[b];
        w->h_int[3 * B + b] = steps[b];
        Tmax = steps[b] > Tmax ? steps[b] : Tmax;
    }
    if ((e = cudaMemcpyAsync(w->T, w->h_int + 3 * B, sizeof(int) * (size_t)B,
                             cudaMemcpyHostToDevice, w->stream)) != cudaSuccess) {
        rc = cuda_err(err, e, "upload");
        goto done;
    }
    mark(w, 8);
    if ((rc = postnet(&r, B, steps, Tmax)))
        goto done;
    mark(w, 9);
    lap(w, 8, 9, 8);
    for (int b = 0; b < B; b++) {
        if (n_frames)
            n_frames[b] = steps[b];
        if (mel_length)
            mel_length[b] = mlen[b];
    }
    if (res) {
        for (int b = 0; b < B && !rc; b++) {
            tacotron2_result_t *out = &res[b];
            int T = steps[b], n = n_ids[b];
            out->mel = hark_malloc(sizeof(float) * (size_t)T * nm);
            out->alignments = hark_malloc(sizeof(float) * (size_t)T * n);
            if (!out->mel || !out->alignments) {
                rc = err_set(err, HARK_ERR_NOMEM, "tacotron2: out of memory for the results");
                break;
            }
            if ((e = cudaMemcpy2DAsync(out->mel, sizeof(float) * T, w->mel + (size_t)b * nm * Tmax,
                                       sizeof(float) * Tmax, sizeof(float) * T, nm,
                                       cudaMemcpyDeviceToHost, w->stream)) != cudaSuccess ||
                (e = cudaMemcpy2DAsync(out->alignments, sizeof(float) * n,
                                       w->align + (size_t)b * S * nmax, sizeof(float) * nmax,
                                       sizeof(float) * n, T, cudaMemcpyDeviceToHost, w->stream)) !=
                    cudaSuccess ||
                (e = cudaStreamSynchronize(w->stream)) != cudaSuccess) {
                rc = cuda_err(err, e, "results");
                break;
            }
            out->n_frames = T;
            out->mel_length = mlen[b];
            out->n_ids = n;
        }
    } else if ((e = cudaStreamSynchronize(w->stream)) != cudaSuccess)
        rc = cuda_err(err, e, "postnet");
done:
    if (rc && res)
        for (int b = 0; b < batch; b++)
            tacotron2_result_free(&res[b]);
    if (d_masks) {
        cudaStreamSynchronize(w->stream);
        cudaFree(d_masks);
    }
    hark_free(h_masks);
    hark_free(steps);
    return rc;
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_device(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "tacotron2: built without CUDA");
}

int tacotron2_gpu_model_create(const tacotron2_model_t *m, int device, ops_dtype_t dt,
                               tacotron2_gpu_model_t **out, hark_err_t *err)
{
    (void)m;
    (void)device;
    (void)dt;
    *out = NULL;
    return no_device(err);
}
void tacotron2_gpu_model_destroy(tacotron2_gpu_model_t *g)
{
    (void)g;
}
size_t tacotron2_gpu_model_bytes(const tacotron2_gpu_model_t *g)
{
    (void)g;
    return 0;
}
int tacotron2_gpu_model_device(const tacotron2_gpu_model_t *g)
{
    (void)g;
    return -1;
}
int tacotron2_gpu_worker_create(const tacotron2_gpu_model_t *g, int max_batch, int max_ids,
                                int max_steps, tacotron2_gpu_worker_t **out, hark_err_t *err)
{
    (void)g;
    (void)max_batch;
    (void)max_ids;
    (void)max_steps;
    *out = NULL;
    return no_device(err);
}
void tacotron2_gpu_worker_destroy(tacotron2_gpu_worker_t *w)
{
    (void)w;
}
size_t tacotron2_gpu_worker_bytes(const tacotron2_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
int tacotron2_gpu_worker_max_batch(const tacotron2_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
int tacotron2_gpu_worker_max_ids(const tacotron2_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
int tacotron2_gpu_worker_max_steps(const tacotron2_gpu_worker_t *w)
{
    (void)w;
    return 0;
}
void *tacotron2_gpu_worker_stream(const tacotron2_gpu_worker_t *w)
{
    (void)w;
    return NULL;
}
void tacotron2_gpu_set_graphs(tacotron2_gpu_worker_t *w, int on)
{
    (void)w;
    (void)on;
}
int tacotron2_gpu_set_profile(tacotron2_gpu_worker_t *w, int on, hark_err_t *err)
{
    (void)w;
    (void)on;
    return no_device(err);
}
int tacotron2_gpu_profile(const tacotron2_gpu_worker_t *w, const char **names, double *ms, int cap)
{
    (void)w;
    (void)names;
    (void)ms;
    (void)cap;
    return 0;
}
int tacotron2_gpu_run(tacotron2_gpu_worker_t *w, const int *const *ids, const int *n_ids, int batch,
                      const tacotron2_opts_t *o, tacotron2_result_t *res, int *n_frames,
                      int *mel_length, hark_err_t *err)
{
    (void)w;
    (void)ids;
    (void)n_ids;
    (void)batch;
    (void)o;
    (void)res;
    (void)n_frames;
    (void)mel_length;
    return no_device(err);
}
const float *tacotron2_gpu_mel(const tacotron2_gpu_worker_t *w, int *ld)
{
    (void)w;
    *ld = 0;
    return NULL;
}

#endif
