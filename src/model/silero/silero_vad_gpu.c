/* silero_vad_gpu.c — see silero_vad_gpu.h: the weights uploaded through gpu/weight_stage, the
 * kernel's shared-memory plan, and whole files in one launch. */
#include "model/silero/silero_vad_gpu.h"

#include "hark.h"

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "gpu/gpu.h"
#include "gpu/weight_stage.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

struct silero_vad_gpu {
    silero_gpu_net_t net;
    int device;
    int window, context;
    void *wblk; /* every weight (one block, FP32) */
    void *fblk; /* weight_stage's float block (empty here) */
    /* silero_vad_gpu_probs' buffers, grown as needed */
    void *buf;
    size_t buf_bytes;
    void *hbuf;
    size_t hbuf_bytes;
};

typedef struct {
    const silero_rate_t *r;
    size_t basis, conv_w[SILERO_N_CONV], conv_b[SILERO_N_CONV], w_ih, w_hh, b_ih, b_hh, out_w;
} layout_t;

static void put(weight_stage_t *s, size_t *at, const float *src, size_t n)
{
    *at = weight_stage_take(&s->n_mat, n);
    if (!s->sizing)
        memcpy(s->mat + *at, src, n * sizeof(float));
}

static void fill(weight_stage_t *s, void *user)
{
    layout_t *l = user;
    const silero_rate_t *r = l->r;
    const size_t H4 = 4 * SILERO_HIDDEN;
    put(s, &l->basis, r->basis, (size_t)2 * r->n_bins * r->n_fft);
    for (int i = 0; i < SILERO_N_CONV; i++) {
        put(s, &l->conv_w[i], r->conv_w[i], (size_t)r->cout[i] * 3 * r->cin[i]);
        put(s, &l->conv_b[i], r->conv_b[i], (size_t)r->cout[i]);
    }
    put(s, &l->w_ih, r->w_ih, H4 * SILERO_HIDDEN);
    put(s, &l->w_hh, r->w_hh, H4 * SILERO_HIDDEN);
    put(s, &l->b_ih, r->b_ih, H4);
    put(s, &l->b_hh, r->b_hh, H4);
    put(s, &l->out_w, r->out_w, SILERO_HIDDEN);
}

static int imax(int a, int b)
{
    return a > b ? a : b;
}

int silero_vad_gpu_create(const silero_rate_t *r, int device, silero_vad_gpu_t **out,
                          hark_err_t *err)
{
    *out = NULL;
    /* the kernel's limits: frames, and an encoder ending in one frame of H channels */
    int t = r->frames, act = r->n_bins * r->frames, ok = t >= 1 && t <= SILERO_GPU_MAX_FRAMES;
    for (int i = 0; i < SILERO_N_CONV && ok; i++) {
        int t_out = (t - 1) / r->stride[i] + 1;
        ok = r->stride[i] >= 1 && (i == 0 ? r->cin[0] == r->n_bins : r->cin[i] == r->cout[i - 1]);
        act = imax(act, imax(t * r->cin[i], t_out * r->cout[i]));
        t = t_out;
    }
    if (!ok || t != 1 || r->cout[SILERO_N_CONV - 1] != SILERO_HIDDEN ||
        r->n_fft + (r->frames - 1) * r->hop > r->context + r->window + r->pad ||
        r->pad > r->window || r->context > r->window)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "silero VAD on the GPU: this network's sizes (%d frames, %d Hz) are not "
                       "supported by the kernel",
                       r->frames, r->sample_rate);
    if (gpu_device_path(device, err) == GPU_PATH_NONE)
        return HARK_ERR_UNSUPPORTED;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "silero VAD on cuda:%d: %s", device,
                       cudaGetErrorString(e));
    silero_vad_gpu_t *g = hark_calloc(1, sizeof *g);
    if (!g)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    g->device = device;
    layout_t l = {.r = r};
    size_t bytes = 0;
    int rc =
        weight_stage_upload(fill, &l, OPS_F32, &g->wblk, &g->fblk, &bytes, NULL, "silero VAD", err);
    if (rc != HARK_OK) {
        silero_vad_gpu_destroy(g);
        return rc;
    }
    const float *w = g->wblk;
    silero_gpu_net_t *n = &g->net;
    n->window = r->window;
    n->context = r->context;
    n->n_fft = r->n_fft;
    n->hop = r->hop;
    n->pad = r->pad;
    n->frames = r->frames;
    n->n_bins = r->n_bins;
    n->basis = w + l.basis;
    for (int i = 0; i < SILERO_N_CONV; i++) {
        n->cin[i] = r->cin[i];
        n->cout[i] = r->cout[i];
        n->stride[i] = r->stride[i];
        n->conv_w[i] = w + l.conv_w[i];
        n->conv_b[i] = w + l.conv_b[i];
    }
    n->w_ih = w + l.w_ih;
    n->w_hh = w + l.w_hh;
    n->b_ih = w + l.b_ih;
    n->b_hh = w + l.b_hh;
    n->out_w = w + l.out_w;
    n->out_b = r->out_b;
    /* R1: the spectrum, the widest activation, the gates and the output terms; R2: the padded
     * window, the widest activation (odd layers write R1, even ones R2) */
    n->r1 = imax(imax(2 * r->n_bins * r->frames, act), 5 * SILERO_HIDDEN);
    n->r2 = imax(imax(r->context + r->window + r->pad, act), SILERO_HIDDEN);
    n->r1 = (n->r1 + 3) & ~3;
    n->r2 = (n->r2 + 3) & ~3;
    g->window = r->window;
    g->context = r->context;
    *out = g;
    return HARK_OK;
}

void silero_vad_gpu_destroy(silero_vad_gpu_t *g)
{
    if (!g)
        return;
    cudaFree(g->wblk);
    cudaFree(g->fblk);
    cudaFree(g->buf);
    cudaFreeHost(g->hbuf);
    hark_free(g);
}

const silero_gpu_net_t *silero_vad_gpu_net(const silero_vad_gpu_t *g)
{
    return &g->net;
}

typedef struct {
    int file;
    long long n_win;
} order_t;

static int by_windows_desc(const void *a, const void *b)
{
    const order_t *x = a, *y = b;
    if (x->n_win != y->n_win)
        return x->n_win < y->n_win ? 1 : -1;
    return x->file - y->file;
}

static size_t al(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

int silero_vad_gpu_probs(silero_vad_gpu_t *g, const float *const *pcm, const size_t *n, int n_files,
                         float *const *probs, hark_err_t *err)
{
    if (n_files <= 0)
        return HARK_OK;
    cudaSetDevice(g->device);
    const size_t W = (size_t)g->window, sf = 2 * SILERO_HIDDEN + (size_t)g->context;
    order_t *ord = hark_malloc((size_t)n_files * sizeof *ord);
    if (!ord)
        return err_set(err, HARK_ERR_NOMEM, "out of memory for the VAD of %d files", n_files);
    size_t tot_x = 0, tot_p = 0;
    for (int i = 0; i < n_files; i++) {
        ord[i] = (order_t){i, (long long)((n[i] + W - 1) / W)};
        tot_x += n[i];
        tot_p += (size_t)ord[i].n_win;
    }
    /* longest first: the streams of a block end close together */
    qsort(ord, (size_t)n_files, sizeof *ord, by_windows_desc);
    size_t F = (size_t)n_files;
    size_t b_x = al(tot_x * 4), b_p = al(tot_p * 4), b_st = al(F * sf * 4), b_o = al(F * 8);
    size_t b_w = al(F * 4), dev_bytes = b_x + b_p + b_st + 3 * b_o + b_w;
    size_t host_bytes = 3 * b_o + b_w + b_p; /* offsets, window counts, probabilities back */
    int rc = HARK_OK;
    cudaError_t e = cudaSuccess;
    if (dev_bytes > g->buf_bytes) {
        cudaFree(g->buf);
        g->buf = NULL;
        g->buf_bytes = 0;
        if ((e = cudaMalloc(&g->buf, dev_bytes)) != cudaSuccess)
            goto cuda_fail;
        g->buf_bytes = dev_bytes;
    }
    if (host_bytes > g->hbuf_bytes) {
        cudaFreeHost(g->hbuf);
        g->hbuf = NULL;
        g->hbuf_bytes = 0;
        if ((e = cudaMallocHost(&g->hbuf, host_bytes)) != cudaSuccess)
            goto cuda_fail;
        g->hbuf_bytes = host_bytes;
    }
    char *d = g->buf, *h = g->hbuf;
    float *d_x = (float *)d, *d_p = (float *)(d + b_x), *d_st = (float *)(d + b_x + b_p);
    char *d_meta = d + b_x + b_p + b_st; /* x_off, n_samples, p_off, n_win: as on the host */
    long long *h_xo = (long long *)h, *h_n = (long long *)(h + b_o),
              *h_po = (long long *)(h + 2 * b_o);
    int *h_nw = (int *)(h + 3 * b_o);
    float *h_p = (float *)(h + 3 * b_o + b_w);
    size_t ox = 0, op = 0;
    for (size_t k = 0; k < F; k++) {
        int f = ord[k].file;
        h_xo[k] = (long long)ox;
        h_n[k] = (long long)n[f];
        h_po[k] = (long long)op;
        h_nw[k] = (int)ord[k].n_win;
        if (n[f] &&
            (e = cudaMemcpy(d_x + ox, pcm[f], n[f] * 4, cudaMemcpyHostToDevice)) != cudaSuccess)
            goto cuda_fail;
        ox += n[f];
        op += (size_t)ord[k].n_win;
    }
    if ((e = cudaMemcpy(d_meta, h, 3 * b_o + b_w, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaMemset(d_st, 0, F * sf * 4)) != cudaSuccess)
        goto cuda_fail;
    rc = cuda_silero_vad(d_p, d_st, d_x, (const long long *)d_meta,
                         (const long long *)(d_meta + b_o), (const long long *)(d_meta + 2 * b_o),
                         (const int *)(d_meta + 3 * b_o), n_files, &g->net, NULL, err);
    if (rc != HARK_OK)
        goto done;
    if ((e = cudaMemcpy(h_p, d_p, tot_p * 4, cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto cuda_fail;
    for (size_t k = 0; k < F; k++)
        memcpy(probs[ord[k].file], h_p + h_po[k], (size_t)ord[k].n_win * 4);
    goto done;
cuda_fail:
    rc = err_set(err, HARK_ERR_CUDA, "cuda: silero VAD of %d files: %s", n_files,
                 cudaGetErrorString(e));
done:
    hark_free(ord);
    return rc;
}

struct silero_vad_gpu_batch {
    silero_vad_gpu_t *g;
    int max_streams, max_windows;
    void *dev;  /* x, probs, state, x_off / n_samples / p_off, n_win */
    void *host; /* the same but the state, page-locked */
    size_t b_x, b_p, b_o, b_w, b_st;
};

int silero_vad_gpu_batch_create(silero_vad_gpu_t *g, int max_streams, int max_windows,
                                silero_vad_gpu_batch_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_streams < 1 || max_windows < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "silero VAD batch: %d streams of %d windows",
                       max_streams, max_windows);
    silero_vad_gpu_batch_t *b = hark_calloc(1, sizeof *b);
    if (!b)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    b->g = g;
    b->max_streams = max_streams;
    b->max_windows = max_windows;
    size_t S_ = (size_t)max_streams, nw = S_ * (size_t)max_windows;
    b->b_x = al(nw * (size_t)g->window * 4);
    b->b_p = al(nw * 4);
    b->b_o = al(S_ * 8);
    b->b_w = al(S_ * 4);
    b->b_st = al(S_ * (2 * SILERO_HIDDEN + (size_t)g->context) * 4);
    size_t host = b->b_x + b->b_p + 3 * b->b_o + b->b_w;
    cudaSetDevice(g->device);
    cudaError_t e = cudaMalloc(&b->dev, host + b->b_st);
    if (e == cudaSuccess)
        e = cudaMallocHost(&b->host, host);
    if (e == cudaSuccess)
        e = cudaMemset((char *)b->dev + host, 0, b->b_st);
    if (e != cudaSuccess) {
        silero_vad_gpu_batch_destroy(b);
        return err_set(err, HARK_ERR_CUDA, "cuda: silero VAD batch of %d streams: %s", max_streams,
                       cudaGetErrorString(e));
    }
    *out = b;
    return HARK_OK;
}

void silero_vad_gpu_batch_destroy(silero_vad_gpu_batch_t *b)
{
    if (!b)
        return;
    cudaFree(b->dev);
    cudaFreeHost(b->host);
    hark_free(b);
}

float *silero_vad_gpu_batch_input(silero_vad_gpu_batch_t *b)
{
    return (float *)b->host;
}

const float *silero_vad_gpu_batch_probs(const silero_vad_gpu_batch_t *b)
{
    return (const float *)((const char *)b->host + b->b_x);
}

int silero_vad_gpu_batch_run(silero_vad_gpu_batch_t *b, const int *n_win, int n, hark_err_t *err)
{
    if (n < 0 || n > b->max_streams)
        return err_set(err, HARK_ERR_INVALID_ARG, "silero VAD batch: %d streams of at most %d", n,
                       b->max_streams);
    const long long W = b->g->window, MW = b->max_windows;
    /* layout, host and device alike: x, probs, x_off, n_samples, p_off, n_win (state: device) */
    char *h = b->host, *d = b->dev;
    long long *xo = (long long *)(h + b->b_x + b->b_p), *ns = xo + (b->b_o / 8),
              *po = ns + (b->b_o / 8);
    int *nw = (int *)(h + b->b_x + b->b_p + 3 * b->b_o);
    long long most = 0;
    for (int s = 0; s < n; s++) {
        if (n_win[s] < 0 || n_win[s] > MW)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "silero VAD batch: %d windows of at most %lld", n_win[s], MW);
        xo[s] = s * MW * W;
        ns[s] = n_win[s] * W;
        po[s] = s * MW;
        nw[s] = n_win[s];
        most = n_win[s] > most ? n_win[s] : most;
    }
    if (!n || !most)
        return HARK_OK;
    cudaSetDevice(b->g->device);
    size_t meta = 3 * b->b_o + b->b_w, x_bytes = (size_t)((n - 1) * MW * W + most * W) * 4;
    cudaError_t e = cudaMemcpy(d, h, x_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(d + b->b_x + b->b_p, h + b->b_x + b->b_p, meta, cudaMemcpyHostToDevice);
    if (e != cudaSuccess)
        return err_set(err, HARK_ERR_CUDA, "cuda: silero VAD batch: %s", cudaGetErrorString(e));
    char *dm = d + b->b_x + b->b_p;
    int rc = cuda_silero_vad((float *)(d + b->b_x), (float *)(dm + meta), (const float *)d,
                             (const long long *)dm, (const long long *)(dm + b->b_o),
                             (const long long *)(dm + 2 * b->b_o), (const int *)(dm + 3 * b->b_o),
                             n, &b->g->net, NULL, err);
    if (rc != HARK_OK)
        return rc;
    e = cudaMemcpy(h + b->b_x, d + b->b_x, (size_t)n * (size_t)MW * 4, cudaMemcpyDeviceToHost);
    return e == cudaSuccess
               ? HARK_OK
               : err_set(err, HARK_ERR_CUDA, "cuda: silero VAD batch: %s", cudaGetErrorString(e));
}

#else /* no CUDA */

int silero_vad_gpu_create(const silero_rate_t *r, int device, silero_vad_gpu_t **out,
                          hark_err_t *err)
{
    (void)r;
    (void)device;
    *out = NULL;
    return err_set(err, HARK_ERR_UNSUPPORTED, "silero VAD on the GPU: hark was built without CUDA");
}

void silero_vad_gpu_destroy(silero_vad_gpu_t *g)
{
    (void)g;
}

const silero_gpu_net_t *silero_vad_gpu_net(const silero_vad_gpu_t *g)
{
    (void)g;
    return NULL;
}

int silero_vad_gpu_probs(silero_vad_gpu_t *g, const float *const *pcm, const size_t *n, int n_files,
                         float *const *probs, hark_err_t *err)
{
    (void)g;
    (void)pcm;
    (void)n;
    (void)n_files;
    (void)probs;
    return err_set(err, HARK_ERR_UNSUPPORTED, "silero VAD on the GPU: hark was built without CUDA");
}

int silero_vad_gpu_batch_create(silero_vad_gpu_t *g, int max_streams, int max_windows,
                                silero_vad_gpu_batch_t **out, hark_err_t *err)
{
    (void)g;
    (void)max_streams;
    (void)max_windows;
    *out = NULL;
    return err_set(err, HARK_ERR_UNSUPPORTED, "silero VAD on the GPU: hark was built without CUDA");
}

void silero_vad_gpu_batch_destroy(silero_vad_gpu_batch_t *b)
{
    (void)b;
}

float *silero_vad_gpu_batch_input(silero_vad_gpu_batch_t *b)
{
    (void)b;
    return NULL;
}

int silero_vad_gpu_batch_run(silero_vad_gpu_batch_t *b, const int *n_win, int n, hark_err_t *err)
{
    (void)b;
    (void)n_win;
    (void)n;
    return err_set(err, HARK_ERR_UNSUPPORTED, "silero VAD on the GPU: hark was built without CUDA");
}

const float *silero_vad_gpu_batch_probs(const silero_vad_gpu_batch_t *b)
{
    (void)b;
    return NULL;
}

#endif
