/* decoder_gpu.c — the attention decoder on the GPU (decoder_gpu.h): weights uploaded once, the
 * candidates of a batch stacked into one set of rows, the same sub-layers as decoder.c's
 * run_stack with cuBLAS FP32 GEMMs (TF32 off) and the ops of ops_cuda.h. In pre-norm models the
 * layer norm before each sub-layer is fused into the residual add of the one before it. */
#include "model/wenet/decoder_gpu.h"
#include "model/wenet/decoder_weights.h"

#ifdef HARK_CUDA

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"
#include "ops/ops.h"
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define LN_EPS 1e-5f
#define MAX_ALLOCS 1024
#define LOGIT_ROWS 2048 /* rows of the output layer per GEMM (the logits of a chunk) */

struct wenet_decoder_gpu {
    int d, h, dk, ffn, vocab, max_len, sos, eos, pre_norm, has_right;
    wdec_weights_t wt; /* device pointers (decoder_weights.h's layout, filled by upload_get) */
    float *pe;         /* (max_len, D) */
    void *allocs[MAX_ALLOCS];
    int n_allocs;
    size_t bytes;
};

struct wenet_decoder_gpu_state {
    const wenet_decoder_gpu_t *d;
    void *stream;
    ops_cuda_t *g;
    size_t cap_rows, cap_enc; /* scratch capacity: decoder rows, encoder rows */
    size_t bytes;             /* scratch held: device + pinned */
    int grows;                /* times wenet_decoder_gpu_score allocated (needed more) */
    float *x, *t, *q, *k, *v, *ctx, *o, *hid, *ke, *ve, *logits, *lp;
    int *ibuf;  /* device: tok_l, tok_r, pos, tgt_l, tgt_r, kb_self, kl_self, kb_src, kl_src */
    int *hibuf; /* pinned host staging of the same */
    float *hlp; /* pinned (2 · cap_rows) the gathered log-probs: left rows, then right */
};

static int cuda_err(hark_err_t *err, cudaError_t e, const char *what)
{
    return err_set(err, HARK_ERR_CUDA, "decoder (gpu): %s: %s", what, cudaGetErrorString(e));
}

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct {
    conformer_tensor_fn get; /* the caller's source */
    void *user;
    wenet_decoder_gpu_t *m;
} uploader_t;

/* a conformer_tensor_fn for wdec_load: the source's tensor, copied to the device; *data is the
 * device copy (freed with the model) */
static int upload_get(void *user, const char *name, int ndim, const int64_t *shape,
                      const float **data, hark_err_t *err)
{
    uploader_t *U = user;
    const float *host = NULL;
    int rc = U->get(U->user, name, ndim, shape, &host, err);
    if (rc != HARK_OK)
        return rc;
    if (U->m->n_allocs >= MAX_ALLOCS)
        return err_set(err, HARK_ERR_INTERNAL, "decoder (gpu): too many tensors");
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n * sizeof(float));
    if (e == cudaSuccess) {
        U->m->allocs[U->m->n_allocs++] = p;
        e = cudaMemcpy(p, host, n * sizeof(float), cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess)
        return cuda_err(err, e, name);
    U->m->bytes += n * sizeof(float);
    *data = p;
    return HARK_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != HARK_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

int wenet_decoder_gpu_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                             wenet_decoder_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    int rc = wdec_check_config(cfg, err);
    if (rc != HARK_OK)
        return rc;
    if (cfg->d_model / cfg->dec_heads > 128)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "decoder (gpu): head width %d (the GPU attention takes up to 128)",
                       cfg->d_model / cfg->dec_heads);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        cudaGetLastError();
        return err_set(err, HARK_ERR_NO_DEVICE, "decoder (gpu): no CUDA device");
    }
    wenet_decoder_gpu_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "decoder (gpu): out of memory");
    m->d = cfg->d_model;
    m->h = cfg->dec_heads;
    m->dk = m->d / m->h;
    m->ffn = cfg->dec_ffn_dim;
    m->vocab = cfg->vocab_size;
    m->max_len = cfg->max_len;
    m->sos = cfg->sos;
    m->eos = cfg->eos;
    m->pre_norm = cfg->dec_normalize_before;
    m->has_right = cfg->decoder == DECODER_BITRANSFORMER;
    uploader_t U = {get, user, m};
    rc = wdec_load(cfg, upload_get, &U, &m->wt, err);
    if (rc == HARK_OK) {
        size_t bytes = (size_t)m->max_len * m->d * sizeof(float);
        cudaError_t e = cudaMalloc((void **)&m->pe, bytes);
        if (e != cudaSuccess)
            rc = cuda_err(err, e, "positional table");
        else if ((rc = cuda_pos_enc(m->pe, m->max_len, m->d, NULL, err)) == HARK_OK &&
                 (e = cudaDeviceSynchronize()) != cudaSuccess)
            rc = cuda_err(err, e, "positional table");
        m->bytes += bytes;
    }
    if (rc != HARK_OK) {
        wenet_decoder_gpu_destroy(m);
        return rc;
    }
    *out = m;
    return HARK_OK;
}

void wenet_decoder_gpu_destroy(wenet_decoder_gpu_t *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n_allocs; i++)
        cudaFree(d->allocs[i]);
    cudaFree(d->pe);
    wdec_free(&d->wt);
    hark_free(d);
}

size_t wenet_decoder_gpu_bytes(const wenet_decoder_gpu_t *d)
{
    return d->bytes;
}

/* ---- state --------------------------------------------------------------------------------- */

enum { I_TOK_L, I_TOK_R, I_POS, I_TGT_L, I_TGT_R, I_KB_SELF, I_KL_SELF, I_KB_SRC, I_KL_SRC, I_N };

static void free_scratch(wenet_decoder_gpu_state_t *s)
{
    float **f[] = {&s->x, &s->t,   &s->q,  &s->k,  &s->v,      &s->ctx,
                   &s->o, &s->hid, &s->ke, &s->ve, &s->logits, &s->lp};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        cudaFree(*f[i]);
        *f[i] = NULL;
    }
    cudaFree(s->ibuf);
    cudaFreeHost(s->hibuf);
    cudaFreeHost(s->hlp);
    s->ibuf = s->hibuf = NULL;
    s->hlp = NULL;
    s->cap_rows = s->cap_enc = s->bytes = 0;
}

/* scratch for R decoder rows and E encoder rows (grown to the largest call, never shrunk); the
 * old scratch is freed first, so a failure leaves none (the next call allocates again) */
static int reserve(wenet_decoder_gpu_state_t *s, size_t R, size_t E, hark_err_t *err)
{
    if (R <= s->cap_rows && E <= s->cap_enc)
        return HARK_OK;
    if (R < s->cap_rows)
        R = s->cap_rows;
    if (E < s->cap_enc)
        E = s->cap_enc;
    cudaStreamSynchronize((cudaStream_t)s->stream); /* the old buffers may still be in use */
    free_scratch(s);
    const wenet_decoder_gpu_t *d = s->d;
    size_t D = (size_t)d->d, chunk = R < LOGIT_ROWS ? R : LOGIT_ROWS;
    struct {
        float **p;
        size_t n;
    } want[] = {{&s->x, R * D},
                {&s->t, R * D},
                {&s->q, R * D},
                {&s->k, R * D},
                {&s->v, R * D},
                {&s->ctx, R * D},
                {&s->o, R * D},
                {&s->hid, R * d->ffn},
                {&s->ke, E * D},
                {&s->ve, E * D},
                {&s->logits, chunk * d->vocab},
                {&s->lp, 2 * R}};
    cudaError_t e = cudaSuccess;
    size_t bytes = I_N * R * sizeof(int) * 2 + 2 * R * sizeof(float);
    for (size_t i = 0; i < sizeof want / sizeof want[0] && e == cudaSuccess; i++) {
        e = cudaMalloc((void **)want[i].p, want[i].n * sizeof(float) + 16);
        bytes += want[i].n * sizeof(float) + 16;
    }
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&s->ibuf, I_N * R * sizeof(int));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&s->hibuf, I_N * R * sizeof(int));
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&s->hlp, 2 * R * sizeof(float));
    if (e != cudaSuccess) {
        free_scratch(s);
        cudaGetLastError(); /* out of memory is not sticky: the state stays usable */
        return err_set(err, HARK_ERR_CUDA,
                       "decoder (gpu): scratch for %zu decoder rows and %zu encoder rows "
                       "(%.1f MiB): %s",
                       R, E, (double)bytes / (1 << 20), cudaGetErrorString(e));
    }
    s->cap_rows = R;
    s->cap_enc = E;
    s->bytes = bytes;
    return HARK_OK;
}

int wenet_decoder_gpu_state_reserve(wenet_decoder_gpu_state_t *s, size_t rows, size_t enc_rows,
                                    hark_err_t *err)
{
    if (rows > (size_t)1 << 28 || enc_rows > (size_t)1 << 28)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "decoder (gpu): reserve %zu decoder rows, %zu encoder rows", rows, enc_rows);
    return reserve(s, rows, enc_rows, err);
}

int wenet_decoder_gpu_state_grows(const wenet_decoder_gpu_state_t *s)
{
    return s->grows;
}

size_t wenet_decoder_gpu_state_bytes(const wenet_decoder_gpu_state_t *s, size_t *rows,
                                     size_t *enc_rows)
{
    if (rows)
        *rows = s->cap_rows;
    if (enc_rows)
        *enc_rows = s->cap_enc;
    return s->bytes;
}

int wenet_decoder_gpu_state_create(const wenet_decoder_gpu_t *d, void *stream,
                                   wenet_decoder_gpu_state_t **out, hark_err_t *err)
{
    *out = NULL;
    wenet_decoder_gpu_state_t *s = hark_calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "decoder (gpu): out of memory");
    s->d = d;
    s->stream = stream;
    int rc = ops_cuda_create(stream, &s->g, err);
    if (rc != HARK_OK) {
        hark_free(s);
        return rc;
    }
    *out = s;
    return HARK_OK;
}

void wenet_decoder_gpu_state_destroy(wenet_decoder_gpu_state_t *s)
{
    if (!s)
        return;
    cudaStreamSynchronize((cudaStream_t)s->stream);
    free_scratch(s);
    ops_cuda_destroy(s->g);
    hark_free(s);
}

/* ---- scoring ------------------------------------------------------------------------------- */

/* x = x + o, then (pre-norm) t = LN(x; next) or (post-norm) x = LN(x; cur) */
static int residual(wenet_decoder_gpu_state_t *s, int R, const wdec_norm_t *cur,
                    const wdec_norm_t *next, hark_err_t *err)
{
    const wenet_decoder_gpu_t *d = s->d;
    if (d->pre_norm)
        return cuda_residual_layer_norm(s->x, s->t, OPS_F32, s->x, s->o, NULL, 1.0f, NULL, 0,
                                        next->g, next->b, 1, 0, R, d->d, LN_EPS, s->stream, err);
    return cuda_residual_layer_norm(s->x, NULL, OPS_F32, s->x, s->o, NULL, 1.0f, NULL, 0, cur->g,
                                    cur->b, 1, 1, R, d->d, LN_EPS, s->stream, err);
}

/* Enqueues one stack over the R rows whose inputs are at tok (device); the gathered log-prob of
 * each row's target lands in lp (device, R). Encoder rows E (ke/ve projected from d_enc). */
static int run_stack(wenet_decoder_gpu_state_t *s, const wdec_stack_t *st, const int *tok,
                     const int *tgt, const float *d_enc, int E, int R, float *lp, hark_err_t *err)
{
    const wenet_decoder_gpu_t *d = s->d;
    int D = d->d, H = d->h, dk = d->dk, F = d->ffn, V = d->vocab;
    const int *ib = s->ibuf;
    size_t Rz = (size_t)R; /* the index arrays' stride: this call's rows (see score) */
    const int *pos = ib + I_POS * Rz, *kbs = ib + I_KB_SELF * Rz, *kls = ib + I_KL_SELF * Rz;
    const int *kbe = ib + I_KB_SRC * Rz, *kle = ib + I_KL_SRC * Rz;
    float scale = 1.0f / sqrtf((float)dk);
    void *strm = s->stream;
    TRY(cuda_embed_pos(s->x, st->embed, d->pe, tok, pos, R, D, sqrtf((float)D), strm, err));
    /* the first sub-layer's input: LN(x) (pre-norm; after_norm when there are no blocks) */
    const wdec_norm_t *first = st->n_blocks ? &st->blocks[0].norm1 : &st->after_norm;
    if (d->pre_norm)
        TRY(cuda_layer_norm(s->t, OPS_F32, s->x, first->g, first->b, R, D, LN_EPS, strm, err));
    const float *in = d->pre_norm ? s->t : s->x;
    for (int b = 0; b < st->n_blocks; b++) {
        const wdec_block_t *bk = &st->blocks[b];
        const wdec_norm_t *next = b + 1 < st->n_blocks ? &st->blocks[b + 1].norm1 : &st->after_norm;
        /* causal self-attention over the candidate's own rows */
        TRY(cuda_linear(s->q, in, bk->sq.w, OPS_F32, bk->sq.b, R, D, D, CUDA_ACT_NONE, s->g, err));
        TRY(cuda_linear(s->k, in, bk->sk.w, OPS_F32, bk->sk.b, R, D, D, CUDA_ACT_NONE, s->g, err));
        TRY(cuda_linear(s->v, in, bk->sv.w, OPS_F32, bk->sv.b, R, D, D, CUDA_ACT_NONE, s->g, err));
        TRY(cuda_segment_attention(s->ctx, s->q, D, s->k, s->v, D, kbs, kls, R, H, dk, scale, strm,
                                   err));
        TRY(cuda_linear(s->o, s->ctx, bk->so.w, OPS_F32, bk->so.b, R, D, D, CUDA_ACT_NONE, s->g,
                        err));
        TRY(residual(s, R, &bk->norm1, &bk->norm2, err));
        /* source attention over the utterance's encoder frames */
        TRY(cuda_linear(s->q, in, bk->cq.w, OPS_F32, bk->cq.b, R, D, D, CUDA_ACT_NONE, s->g, err));
        TRY(cuda_linear(s->ke, d_enc, bk->ck.w, OPS_F32, bk->ck.b, E, D, D, CUDA_ACT_NONE, s->g,
                        err));
        TRY(cuda_linear(s->ve, d_enc, bk->cv.w, OPS_F32, bk->cv.b, E, D, D, CUDA_ACT_NONE, s->g,
                        err));
        TRY(cuda_segment_attention(s->ctx, s->q, D, s->ke, s->ve, D, kbe, kle, R, H, dk, scale,
                                   strm, err));
        TRY(cuda_linear(s->o, s->ctx, bk->co.w, OPS_F32, bk->co.b, R, D, D, CUDA_ACT_NONE, s->g,
                        err));
        TRY(residual(s, R, &bk->norm2, &bk->norm3, err));
        /* position-wise FFN with ReLU */
        TRY(cuda_linear(s->hid, in, bk->w1.w, OPS_F32, bk->w1.b, R, D, F, CUDA_ACT_RELU, s->g,
                        err));
        TRY(cuda_linear(s->o, s->hid, bk->w2.w, OPS_F32, bk->w2.b, R, F, D, CUDA_ACT_NONE, s->g,
                        err));
        TRY(residual(s, R, &bk->norm3, next, err));
    }
    /* output layer a chunk of rows at a time; only the targets' log-probs are kept (the bias
     * is added inside the gather: the logits are written and read once) */
    for (int r0 = 0; r0 < R; r0 += LOGIT_ROWS) {
        int n = R - r0 < LOGIT_ROWS ? R - r0 : LOGIT_ROWS;
        TRY(cuda_linear(s->logits, in + (size_t)r0 * D, st->out.w, OPS_F32, NULL, n, D, V,
                        CUDA_ACT_NONE, s->g, err));
        TRY(cuda_lse_gather(lp + r0, s->logits, V, st->out.b, tgt + r0, n, V, strm, err));
    }
    return HARK_OK;
}

/* candidate scores from the gathered log-probs, summed in float32 in WeNet's order: tokens in
 * hypothesis order (the right decoder's row len-1-j predicts token j), then <eos> at row len */
static void sum_scores(const float *lp, const int *off, const int *lens, int n, int right,
                       float *out)
{
    for (int i = 0; i < n; i++) {
        const float *c = lp + off[i];
        int len = lens[i];
        float sum = 0.0f;
        for (int j = 0; j < len; j++)
            sum += c[right ? len - 1 - j : j];
        sum += c[len];
        out[i] = sum;
    }
}

int wenet_decoder_gpu_score(wenet_decoder_gpu_state_t *s, const float *d_enc, int t_stride,
                            const int *enc_lens, int batch, const int *n, const int *const *hyps,
                            const int *lens, float reverse_weight, float *fwd, float *rev,
                            hark_err_t *err)
{
    const wenet_decoder_gpu_t *d = s->d;
    if (batch < 0 || t_stride < 0 || (batch > 0 && (!enc_lens || !n)))
        return err_set(err, HARK_ERR_INVALID_ARG, "decoder (gpu): bad arguments (batch %d)", batch);
    int total = 0, max_rows = 0;
    size_t R = 0;
    for (int b = 0; b < batch; b++) {
        if (n[b] < 0 || (n[b] > 0 && (enc_lens[b] < 1 || enc_lens[b] > t_stride)))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "decoder (gpu): utterance %d: %d candidates, %d frames (stride %d)", b,
                           n[b], enc_lens[b], t_stride);
        TRY(wdec_check_candidates(d->max_len, d->vocab, hyps, lens, total, n[b], &R, &max_rows,
                                  err));
        total += n[b];
    }
    int do_right = d->has_right && reverse_weight > 0.0f;
    if (rev)
        for (int i = 0; i < total; i++)
            rev[i] = 0.0f;
    if (total == 0)
        return HARK_OK;
    if (R > (size_t)1 << 28)
        return err_set(err, HARK_ERR_TOO_LARGE, "decoder (gpu): %zu decoder rows in one call", R);
    size_t E = (size_t)batch * t_stride;
    if (R > s->cap_rows || E > s->cap_enc) { /* beyond the reservation: allocates (counted) */
        size_t had = s->cap_rows;
        s->grows++;
        TRY(reserve(s, R, E, err));
        LOG_INFO("decoder (gpu): %zu candidate rows over %zu encoder rows grew the scratch past "
                 "the %zu rows it held (allocated in the call; %.1f MiB now, kept)",
                 R, E, had, (double)s->bytes / (1 << 20));
    }
    int *off = hark_malloc(sizeof(int) * (size_t)total);
    if (!off)
        return err_set(err, HARK_ERR_NOMEM, "decoder (gpu): out of memory");
    /* the rows: candidate i of utterance b owns len_i + 1 rows; <sos> + hyp (left),
     * <sos> + reversed(hyp) (right); each row's target is the next input, <eos> last. The I_N
     * index arrays are R apart (not the capacity apart), so that one copy of I_N · R ints
     * uploads them however large the reserved scratch */
    size_t Rz = R;
    int *h = s->hibuf, r = 0, c = 0;
    for (int b = 0; b < batch; b++)
        for (int k = 0; k < n[b]; k++, c++) {
            int len = lens[c];
            off[c] = r;
            for (int p = 0; p <= len; p++, r++) {
                h[I_TOK_L * Rz + r] = p ? hyps[c][p - 1] : d->sos;
                h[I_TOK_R * Rz + r] = p ? hyps[c][len - p] : d->sos;
                h[I_TGT_L * Rz + r] = p < len ? hyps[c][p] : d->eos;
                h[I_TGT_R * Rz + r] = p < len ? hyps[c][len - 1 - p] : d->eos;
                h[I_POS * Rz + r] = p;
                h[I_KB_SELF * Rz + r] = off[c];
                h[I_KL_SELF * Rz + r] = p + 1;
                h[I_KB_SRC * Rz + r] = b * t_stride;
                h[I_KL_SRC * Rz + r] = enc_lens[b];
            }
        }
    int rc = HARK_OK;
    cudaError_t e = cudaMemcpyAsync(s->ibuf, s->hibuf, sizeof(int) * I_N * Rz,
                                    cudaMemcpyHostToDevice, (cudaStream_t)s->stream);
    if (e != cudaSuccess)
        rc = cuda_err(err, e, "upload");
    /* both stacks, then one download and one wait */
    if (rc == HARK_OK)
        rc = run_stack(s, &d->wt.left, s->ibuf + I_TOK_L * Rz, s->ibuf + I_TGT_L * Rz, d_enc,
                       (int)E, (int)R, s->lp, err);
    if (rc == HARK_OK && do_right)
        rc = run_stack(s, &d->wt.right, s->ibuf + I_TOK_R * Rz, s->ibuf + I_TGT_R * Rz, d_enc,
                       (int)E, (int)R, s->lp + R, err);
    if (rc == HARK_OK &&
        ((e = cudaMemcpyAsync(s->hlp, s->lp, sizeof(float) * (do_right ? 2 : 1) * R,
                              cudaMemcpyDeviceToHost, (cudaStream_t)s->stream)) != cudaSuccess ||
         (e = cudaStreamSynchronize((cudaStream_t)s->stream)) != cudaSuccess))
        rc = cuda_err(err, e, "scores");
    if (rc == HARK_OK) {
        sum_scores(s->hlp, off, lens, total, 0, fwd);
        if (do_right && rev)
            sum_scores(s->hlp + R, off, lens, total, 1, rev);
    }
    hark_free(off);
    return rc;
}

#else /* !HARK_CUDA */

#include "hark.h"

static int no_cuda(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NO_DEVICE, "decoder (gpu): hark was built without CUDA");
}

int wenet_decoder_gpu_create(const wenet_config_t *cfg, conformer_tensor_fn get, void *user,
                             wenet_decoder_gpu_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

void wenet_decoder_gpu_destroy(wenet_decoder_gpu_t *d)
{
    (void)d;
}

size_t wenet_decoder_gpu_bytes(const wenet_decoder_gpu_t *d)
{
    (void)d;
    return 0;
}

int wenet_decoder_gpu_state_create(const wenet_decoder_gpu_t *d, void *stream,
                                   wenet_decoder_gpu_state_t **out, hark_err_t *err)
{
    *out = NULL;
    return no_cuda(err);
}

void wenet_decoder_gpu_state_destroy(wenet_decoder_gpu_state_t *s)
{
    (void)s;
}

int wenet_decoder_gpu_state_reserve(wenet_decoder_gpu_state_t *s, size_t rows, size_t enc_rows,
                                    hark_err_t *err)
{
    return no_cuda(err);
}

int wenet_decoder_gpu_state_grows(const wenet_decoder_gpu_state_t *s)
{
    (void)s;
    return 0;
}

size_t wenet_decoder_gpu_state_bytes(const wenet_decoder_gpu_state_t *s, size_t *rows,
                                     size_t *enc_rows)
{
    (void)s;
    if (rows)
        *rows = 0;
    if (enc_rows)
        *enc_rows = 0;
    return 0;
}

int wenet_decoder_gpu_score(wenet_decoder_gpu_state_t *s, const float *d_enc, int t_stride,
                            const int *enc_lens, int batch, const int *n, const int *const *hyps,
                            const int *lens, float reverse_weight, float *fwd, float *rev,
                            hark_err_t *err)
{
    return no_cuda(err);
}

#endif
