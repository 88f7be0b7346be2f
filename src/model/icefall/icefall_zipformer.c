/* icefall_zipformer.c — the zipformer recipe's Zipformer2 encoder on the CPU, as icefall runs it
 * in eval mode (balancers, whitening, dropout and the training-time masks are
 * identities there): encoder_embed (Conv2dSubsampling: three convs with SwooshR, ConvNeXt, a
 * linear layer, BiasNorm), the stacks at their own frame rates (SimpleDownsample, the
 * Zipformer2EncoderLayers with their CompactRelPositionalEncoding, SimpleUpsample and the
 * out_combiner bypass; channels truncated or zero-padded between stacks), the full-width output
 * taken from the most recent stack holding each channel, and downsample_output. A layer computes
 * its attention weights once (RelPositionMultiheadAttentionWeights) and uses them three times:
 * head 0 in NonlinAttention, every head in self_attn1 and self_attn2. A causal model has
 * ChunkCausalDepthwiseConv1d convolutions and, over a whole utterance, the chunk mask of its
 * chunk size and left context (forward_encoder); chunk by chunk it keeps every layer's left
 * context in a stream (icefall_zf_stream_*, as streaming_forward), several streams' steps as one
 * batch (icefall_zf_stream_step_batch: the row-wise layers over every stream's rows together, the
 * attention and the causal convolutions per stream over its own caches and processed count, as
 * streaming_forward on stacked states with per-row processed_lens). model.json's encoder section
 * and the weights come from tools/convert_icefall.py --recipe zipformer (docs/model-format.md).
 * Tests: tests/model/icefall/test_icefall_zipformer.c, tests/model/icefall/test_icefall_stream.c
 * (icefall_stream_batched) */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/safetensors.h"
#include "ops/ops.h"
#include "ops/zipformer_ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- model.json ----------------------------------------------------------------------------- */

static int int_array(const char *path, const cJSON *e, const char *key, int n, long lo, long hi,
                     int *out, hark_err_t *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!cJSON_IsArray(a) || (n >= 0 && cJSON_GetArraySize(a) != n))
        return err_set(err, HARK_ERR_FORMAT, "%s: encoder.%s must be an array of %d integers", path,
                       key, n);
    for (int i = 0; i < cJSON_GetArraySize(a); i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
            v->valuedouble > hi)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: encoder.%s[%d] must be an integer in [%ld, %ld]", path, key, i, lo,
                           hi);
        out[i] = (int)v->valuedouble;
    }
    return HARK_OK;
}

static int int_field(const char *path, const cJSON *e, const char *key, long lo, long hi, int *out,
                     hark_err_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return err_set(err, HARK_ERR_FORMAT, "%s: encoder.%s must be an integer in [%ld, %ld]",
                       path, key, lo, hi);
    *out = (int)v->valuedouble;
    return HARK_OK;
}

int icefall_zf_config_parse(const char *path, const cJSON *e, icefall_config_t *c, hark_err_t *err)
{
    icefall_zipformer_config_t *z = &c->zf;
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(e, "downsampling_factor");
    int n = cJSON_IsArray(ds) ? cJSON_GetArraySize(ds) : 0;
    if (n < 1 || n > ICEFALL_ZF_MAX_STACKS)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: encoder.downsampling_factor must be an array of 1 to %d stacks", path,
                       ICEFALL_ZF_MAX_STACKS);
    z->n_stacks = n;
    int rc, odf = 0;
    if ((rc = int_array(path, e, "downsampling_factor", n, 1, 64, z->ds, err)) ||
        (rc = int_array(path, e, "num_encoder_layers", n, 1, 64, z->num_layers, err)) ||
        (rc = int_array(path, e, "feedforward_dim", n, 4, 65536, z->ff, err)) ||
        (rc = int_array(path, e, "num_heads", n, 1, 256, z->heads, err)) ||
        (rc = int_array(path, e, "encoder_dim", n, 4, 8192, z->dim, err)) ||
        (rc = int_array(path, e, "query_head_dim", n, 1, 1024, z->qdim, err)) ||
        (rc = int_array(path, e, "value_head_dim", n, 1, 1024, z->vdim, err)) ||
        (rc = int_array(path, e, "pos_head_dim", n, 1, 1024, z->pdim, err)) ||
        (rc = int_array(path, e, "cnn_module_kernel", n, 1, 255, z->kernel, err)) ||
        (rc = int_field(path, e, "pos_dim", 2, 4096, &z->pos_dim, err)) ||
        (rc = int_field(path, e, "feature_dim", 80, 80, &c->feature_dim, err)) ||
        (rc = int_field(path, e, "subsampling_factor", 4, 4, &c->subsampling_factor, err)) ||
        (rc = int_field(path, e, "output_downsampling_factor", 2, 2, &odf, err)))
        return rc;
    const cJSON *causal = cJSON_GetObjectItemCaseSensitive(e, "causal");
    if (!cJSON_IsBool(causal))
        return err_set(err, HARK_ERR_FORMAT, "%s: encoder.causal must be true or false", path);
    z->causal = cJSON_IsTrue(causal);
    z->chunk = -1;
    z->left_chunks = -1;
    z->left_frames = -1;
    if (z->causal) {
        int cs[1], lcf[1];
        if ((rc = int_array(path, e, "chunk_size", 1, -1, 1 << 20, cs, err)) ||
            (rc = int_array(path, e, "left_context_frames", 1, -1, 1 << 20, lcf, err)))
            return err_prefix(err, rc,
                              "a causal model decodes with one chunk size and one left "
                              "context");
        if (cs[0] == 0 || lcf[0] == 0)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: encoder.chunk_size and left_context_frames must be >= 1 or -1",
                           path);
        z->chunk = cs[0];
        z->left_frames = lcf[0];
        if (cs[0] > 0) {
            z->left_chunks = lcf[0] < 0 ? -1 : (lcf[0] / cs[0] > 0 ? lcf[0] / cs[0] : 1);
            for (int i = 0; i < n; i++)
                if (cs[0] % z->ds[i])
                    return err_set(err, HARK_ERR_FORMAT,
                                   "%s: encoder.chunk_size %d is not a multiple of stack %d's "
                                   "downsampling factor %d",
                                   path, cs[0], i, z->ds[i]);
        }
    }
    if (z->pos_dim % 2)
        return err_set(err, HARK_ERR_FORMAT, "%s: encoder.pos_dim %d must be even", path,
                       z->pos_dim);
    c->d = 0;
    c->n_layers = 0;
    for (int i = 0; i < n; i++) {
        if (z->kernel[i] % 2 == 0 || z->dim[i] % 4)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: stack %d: cnn_module_kernel %d must be odd and encoder_dim %d a "
                           "multiple of 4",
                           path, i, z->kernel[i], z->dim[i]);
        c->d = z->dim[i] > c->d ? z->dim[i] : c->d;
        c->n_layers += z->num_layers[i];
    }
    z->embed_dim = z->dim[0];
    return HARK_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define W(ptr, nd, shape, ...)                                                                     \
    (rc = rc ? rc : icefall_weights_get(st, &(ptr), err, nd, shape, __VA_ARGS__))

static int load_layer(safetensors_t *st, const icefall_zipformer_config_t *z, int s, const char *p,
                      icefall_zf_layer_t *L, hark_err_t *err)
{
    const int64_t D = z->dim[s], H = z->heads[s], qd = z->qdim[s], vd = z->vdim[s], pd = z->pdim[s],
                  k = z->kernel[s], hid = 3 * D / 4;
    int rc = HARK_OK;
    const float *sc = NULL;
    L->ff_dim[0] = z->ff[s] * 3 / 4;
    L->ff_dim[1] = z->ff[s];
    L->ff_dim[2] = z->ff[s] * 5 / 4;
    W(L->bypass, 1, SH(D), "%s.bypass.bypass_scale", p);
    W(L->bypass_mid, 1, SH(D), "%s.bypass_mid.bypass_scale", p);
    W(L->aw_in_w, 2, SH((2 * qd + pd) * H, D), "%s.self_attn_weights.in_proj.weight", p);
    W(L->aw_in_b, 1, SH((2 * qd + pd) * H), "%s.self_attn_weights.in_proj.bias", p);
    W(L->aw_pos_w, 2, SH(H * pd, z->pos_dim), "%s.self_attn_weights.linear_pos.weight", p);
    for (int i = 0; i < 2; i++) {
        W(L->sa_in_w[i], 2, SH(H * vd, D), "%s.self_attn%d.in_proj.weight", p, i + 1);
        W(L->sa_in_b[i], 1, SH(H * vd), "%s.self_attn%d.in_proj.bias", p, i + 1);
        W(L->sa_out_w[i], 2, SH(D, H * vd), "%s.self_attn%d.out_proj.weight", p, i + 1);
        W(L->sa_out_b[i], 1, SH(D), "%s.self_attn%d.out_proj.bias", p, i + 1);
        W(L->cv_in_w[i], 2, SH(2 * D, D), "%s.conv_module%d.in_proj.weight", p, i + 1);
        W(L->cv_in_b[i], 1, SH(2 * D), "%s.conv_module%d.in_proj.bias", p, i + 1);
        if (z->causal) {
            char nm[200];
            snprintf(nm, sizeof nm, "%s.conv_module%d.depthwise_conv", p, i + 1);
            W(L->cv_cc_w[i], 3, SH(D, 1, k / 2 + 1), "%s.causal_conv.weight", nm);
            W(L->cv_cc_b[i], 1, SH(D), "%s.causal_conv.bias", nm);
            W(L->cv_ck_w[i], 3, SH(D, 1, k), "%s.chunkwise_conv.weight", nm);
            W(L->cv_ck_b[i], 1, SH(D), "%s.chunkwise_conv.bias", nm);
            W(L->cv_ck_scale[i], 3, SH(2, D, k), "%s.chunkwise_conv_scale", nm);
        } else {
            W(L->cv_dw_w[i], 3, SH(D, 1, k), "%s.conv_module%d.depthwise_conv.weight", p, i + 1);
            W(L->cv_dw_b[i], 1, SH(D), "%s.conv_module%d.depthwise_conv.bias", p, i + 1);
        }
        W(L->cv_out_w[i], 2, SH(D, D), "%s.conv_module%d.out_proj.weight", p, i + 1);
        W(L->cv_out_b[i], 1, SH(D), "%s.conv_module%d.out_proj.bias", p, i + 1);
    }
    for (int i = 0; i < 3; i++) {
        const int64_t f = L->ff_dim[i];
        W(L->ff_in_w[i], 2, SH(f, D), "%s.feed_forward%d.in_proj.weight", p, i + 1);
        W(L->ff_in_b[i], 1, SH(f), "%s.feed_forward%d.in_proj.bias", p, i + 1);
        W(L->ff_out_w[i], 2, SH(D, f), "%s.feed_forward%d.out_proj.weight", p, i + 1);
        W(L->ff_out_b[i], 1, SH(D), "%s.feed_forward%d.out_proj.bias", p, i + 1);
    }
    W(L->na_in_w, 2, SH(3 * hid, D), "%s.nonlin_attention.in_proj.weight", p);
    W(L->na_in_b, 1, SH(3 * hid), "%s.nonlin_attention.in_proj.bias", p);
    W(L->na_out_w, 2, SH(D, hid), "%s.nonlin_attention.out_proj.weight", p);
    W(L->na_out_b, 1, SH(D), "%s.nonlin_attention.out_proj.bias", p);
    W(L->norm_bias, 1, SH(D), "%s.norm.bias", p);
    W(sc, 1, SH(1), "%s.norm.scale", p);
    if (!rc)
        L->norm_scale = sc[0];
    return rc;
}

int icefall_zf_load_weights(icefall_model_t *m, safetensors_t *st, hark_err_t *err)
{
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    icefall_zf_t *f = &m->zf;
    const int64_t d0 = z->embed_dim, fw = ((m->cfg.feature_dim - 1) / 2 - 1) / 2;
    int rc = HARK_OK;
    const float *sc = NULL;
    static const int conv_idx[3] = {0, 4, 7}, conv_co[3] = {8, 32, 128}, conv_ci[3] = {1, 8, 32};
    for (int i = 0; i < 3; i++) {
        W(f->conv_w[i], 4, SH(conv_co[i], conv_ci[i], 3, 3), "encoder_embed.conv.%d.weight",
          conv_idx[i]);
        W(f->conv_b[i], 1, SH(conv_co[i]), "encoder_embed.conv.%d.bias", conv_idx[i]);
    }
    const char *nx = "encoder_embed.convnext";
    W(f->nx_dw_w, 4, SH(ZF_EMBED_CH, 1, ZF_NX_K, ZF_NX_K), "%s.depthwise_conv.weight", nx);
    W(f->nx_dw_b, 1, SH(ZF_EMBED_CH), "%s.depthwise_conv.bias", nx);
    W(f->nx_pw1_w, 4, SH(ZF_NX_HID, ZF_EMBED_CH, 1, 1), "%s.pointwise_conv1.weight", nx);
    W(f->nx_pw1_b, 1, SH(ZF_NX_HID), "%s.pointwise_conv1.bias", nx);
    W(f->nx_pw2_w, 4, SH(ZF_EMBED_CH, ZF_NX_HID, 1, 1), "%s.pointwise_conv2.weight", nx);
    W(f->nx_pw2_b, 1, SH(ZF_EMBED_CH), "%s.pointwise_conv2.bias", nx);
    W(f->out_w, 2, SH(d0, ZF_EMBED_CH * fw), "encoder_embed.out.weight");
    W(f->out_b, 1, SH(d0), "encoder_embed.out.bias");
    W(f->norm_bias, 1, SH(d0), "encoder_embed.out_norm.bias");
    W(sc, 1, SH(1), "encoder_embed.out_norm.scale");
    W(f->out_ds_w, 1, SH(2), "encoder.downsample_output.weights");
    if (rc)
        return rc;
    f->norm_scale = sc[0];
    if (!(f->layers = hark_calloc((size_t)m->cfg.n_layers, sizeof *f->layers)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    icefall_zf_layer_t *L = f->layers;
    char p[160];
    for (int s = 0; s < z->n_stacks && !rc; s++) {
        icefall_zf_stack_t *S = &f->stacks[s];
        S->layers = L;
        if (z->ds[s] > 1) {
            W(S->ds_w, 1, SH(z->ds[s]), "encoder.encoders.%d.downsample.weights", s);
            W(S->combiner, 1, SH(z->dim[s]), "encoder.encoders.%d.out_combiner.bypass_scale", s);
        }
        for (int j = 0; j < z->num_layers[s] && !rc; j++, L++) {
            snprintf(p, sizeof p, "encoder.encoders.%d%s.layers.%d", s,
                     z->ds[s] > 1 ? ".encoder" : "", j);
            rc = load_layer(st, z, s, p, L, err);
        }
    }
    return rc;
}
#undef W
#undef SH

void icefall_zf_free(icefall_model_t *m)
{
    hark_free(m->zf.layers);
    m->zf.layers = NULL;
}

/* ---- scratch -------------------------------------------------------------------------------- */

/* A bump allocator over the worker's scratch; with base NULL it only measures. */
typedef struct {
    float *base;
    size_t off, top;
} arena_t;

static float *take(arena_t *a, size_t n)
{
    float *p = a->base ? a->base + a->off : NULL;
    a->off += (n + 15) & ~(size_t)15;
    if (a->off > a->top)
        a->top = a->off;
    return p;
}

void icefall_zf_stack_widths(const icefall_zipformer_config_t *z, int i, size_t *proj, size_t *ctx,
                             size_t *kv)
{
    const size_t D = (size_t)z->dim[i], H = (size_t)z->heads[i], hidn = 3 * D / 4;
    const size_t hq = H * (size_t)z->qdim[i], hv = H * (size_t)z->vdim[i];
    const size_t f3 = (size_t)z->ff[i] * 5 / 4;
    size_t w = 2 * hq + H * (size_t)z->pdim[i];
    w = w > 3 * hidn ? w : 3 * hidn;
    w = w > 2 * D ? w : 2 * D;
    w = w > f3 ? w : f3;
    *proj = w > hv ? w : hv;
    *ctx = hv > D ? hv : D; /* hidn < D */
    w = hq > hv ? hq : hv;
    *kv = w > hidn ? w : hidn;
}

/* encoder_embed's conv frames of t_in feature frames */
int icefall_zf_embed_frames(int t_in)
{
    return t_in < 9 ? 0 : (t_in - 7) / 2;
}

#define embed_frames icefall_zf_embed_frames

/* A stream's left context of one layer (icefall's cached_key, cached_nonlin_attn,
 * cached_val1/2, cached_conv1/2) */
typedef struct {
    float *key;     /* (Lc, H qd) */
    float *nl;      /* (Lc, hid) */
    float *val[2];  /* (Lc, H vd) */
    float *conv[2]; /* (k / 2, D) the conv modules' inputs */
} zf_layer_cache_t;

struct icefall_zf_stream {
    const icefall_model_t *m;
    float *mem;               /* every cache below, one block */
    float *nx;                /* (ZF_NX_PAD, W2, 128) the ConvNeXt's left context */
    zf_layer_cache_t *layers; /* (n_layers) */
    size_t n_mem;
    int processed; /* 50 Hz frames encoded so far (icefall's processed_lens) */
};

typedef struct {
    /* persistent over the pass */
    float *cur;  /* (Te, M) the running activations, row stride M */
    float *outs; /* every stack's output (Te, dim[i]), one after the other */
    float *full; /* (Te, M) the full-width output before downsample_output */
    /* encoder_embed (overlaps the stack buffers) */
    float *xin, *a0, *a1, *a2f, *col, *a2, *ext, *dw, *hid, *y;
    int *lo, *hi; /* (Te) the attention's key ranges; NULL: every key */
    /* a stack (sized for the largest) */
    float *xs, *orig, *ly, *proj, *sc, *pe, *pp, *bd, *ctx, *g, *dwo, *kv;
} zf_bufs_t;

/* Lays the buffers of a pass over t_in feature frames out in a (a->base NULL: only measures);
 * stream: a streaming step of nb streams together (the ConvNeXt's left context from each stream,
 * every layer's left context of left_frames / ds frames; the stacks' activations nb streams'
 * rows, encoder_embed's and the attention's per-stream buffers one stream's, reused) */
static void zf_layout(const icefall_model_t *m, int t_in, int stream, int nb, arena_t *a,
                      zf_bufs_t *b)
{
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    const size_t T = (size_t)t_in, F = (size_t)c->feature_dim, Tc = (size_t)embed_frames(t_in);
    const size_t Te = stream ? Tc - ZF_NX_PAD : Tc;
    const size_t M = (size_t)c->d, T1 = (T - 3) / 2, W1 = (F - 3) / 2 + 1, W2f = W1 - 2;
    const size_t W2 = ((F - 1) / 2 - 1) / 2, C = ZF_EMBED_CH;
    size_t sum_dims = 0;
    for (int i = 0; i < z->n_stacks; i++)
        sum_dims += (size_t)z->dim[i];
    const size_t N = (size_t)nb;
    b->cur = take(a, N * Te * M);
    b->outs = take(a, N * Te * sum_dims);
    b->full = take(a, N * Te * M);
    const size_t mark = a->off;
    /* encoder_embed */
    size_t c0 = conv2d_col_floats(1, 8, 3, 3, (int)F), c1 = conv2d_col_floats(8, 32, 3, 3, (int)W1),
           c2 = conv2d_col_floats(32, 128, 3, 3, (int)W2f);
    b->xin = take(a, T * (F + 2));
    b->a0 = take(a, (T - 2) * 8 * F);
    b->a1 = take(a, T1 * 32 * W1);
    b->a2f = take(a, (T1 - 2) * C * W2f);
    b->col = take(a, c0 > c1 ? (c0 > c2 ? c0 : c2) : (c1 > c2 ? c1 : c2));
    b->ext = take(a, (Te + 2 * ZF_NX_PAD) * C * W2);
    b->a2 = take(a, Te * C * W2);
    b->dw = take(a, Te * C * W2);
    b->hid = take(a, Te * ZF_NX_HID * W2);
    b->y = take(a, Te * (C * W2 > M ? C * W2 : M));
    /* the stacks: one set of buffers sized for the largest need */
    a->off = mark;
    size_t xs = 0, proj = 0, sc = 0, pe = 0, pp = 0, bd = 0, ctx = 0, kv = 0;
    for (int i = 0; i < z->n_stacks; i++) {
        const size_t ds = (size_t)z->ds[i], Td = (Te + ds - 1) / ds, D = (size_t)z->dim[i];
        const size_t Lc = stream ? (size_t)z->left_frames / ds : 0, K = Lc + Td;
        const size_t H = (size_t)z->heads[i], P = Td ? 2 * Td - 1 + Lc : 1;
        size_t wproj, wctx, wkv;
        icefall_zf_stack_widths(z, i, &wproj, &wctx, &wkv);
#define UP(v, x) v = (x) > v ? (x) : v
        UP(xs, Td * D);
        UP(proj, Td * wproj);
        UP(sc, H * Td * K);
        UP(pe, P * (size_t)z->pos_dim);
        UP(pp, P * H * (size_t)z->pdim[i]);
        UP(bd, Td * P);
        UP(ctx, Td * wctx);
        UP(kv, stream ? K * wkv : 1);
#undef UP
    }
    b->xs = take(a, N * xs);
    b->orig = take(a, N * xs);
    b->ly = take(a, N * xs);
    b->g = take(a, N * xs);
    b->dwo = take(a, N * xs);
    b->proj = take(a, N * proj);
    b->sc = take(a, N * sc);
    b->pe = take(a, pe);
    b->pp = take(a, pp);
    b->bd = take(a, bd);
    b->ctx = take(a, N * ctx);
    b->kv = take(a, kv);
}

/* Feature frames a streaming step takes: 2 chunk + 7 (encoder_embed) + 2 x 3 (the ConvNeXt's
 * lookahead) */
static int stream_step_frames(const icefall_zipformer_config_t *z)
{
    return 2 * z->chunk + 7 + 2 * ZF_NX_PAD;
}

static int can_stream(const icefall_zipformer_config_t *z)
{
    if (!z->causal || z->chunk <= 0 || z->left_frames <= 0)
        return 0;
    for (int i = 0; i < z->n_stacks; i++)
        if (z->left_frames % z->ds[i])
            return 0;
    return 1;
}

size_t icefall_zf_scratch_floats(const icefall_model_t *m, int t_in)
{
    arena_t a = {0};
    zf_bufs_t b;
    zf_layout(m, t_in, 0, 1, &a, &b);
    size_t n = a.top;
    if (can_stream(&m->cfg.zf)) {
        size_t ns = icefall_zf_stream_scratch_floats(m, 1);
        n = ns > n ? ns : n;
    }
    return n + 16;
}

size_t icefall_zf_stream_scratch_floats(const icefall_model_t *m, int n_streams)
{
    arena_t a = {0};
    zf_bufs_t b;
    zf_layout(m, stream_step_frames(&m->cfg.zf), 1, n_streams, &a, &b);
    return a.top + 16;
}

int icefall_zf_key_rows(const icefall_model_t *m, int t_in, int n_streams)
{
    int te = embed_frames(t_in), ch = m->cfg.zf.chunk * (n_streams > 1 ? n_streams : 1);
    return te > ch ? te : ch;
}

/* ---- activations and norms ------------------------------------------------------------------ */

/* scaling.py's SwooshLForward / SwooshRForward (inside ActivationDropoutAndLinear):
 * log(1 + exp(x - shift)), the same overflow rule */
static void swoosh_lin(float *x, size_t n, float shift, float offset)
{
    for (size_t i = 0; i < n; i++) {
        float xo = x[i] - shift, l = logf(1.0f + expf(xo));
        if (isinf(l))
            l = xo;
        x[i] = l - 0.08f * x[i] - offset;
    }
}

#define SWOOSH_L OPS_SWOOSHL_SHIFT, OPS_SWOOSHL_OFFSET
#define SWOOSH_R OPS_SWOOSHR_SHIFT, OPS_SWOOSHR_OFFSET

/* ---- one layer ------------------------------------------------------------------------------ */

static void add_to(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* kv (Lc + T, w) = [cache (Lc, w); new (T rows of w, row stride ld)]; the cache then keeps the
 * last Lc rows */
static void concat_left(float *kv, float *cache, const float *new_rows, int Lc, int T, int w,
                        int ld)
{
    memcpy(kv, cache, sizeof(float) * (size_t)Lc * w);
    for (int t = 0; t < T; t++)
        memcpy(kv + (size_t)(Lc + t) * w, new_rows + (size_t)t * ld, sizeof(float) * w);
    memcpy(cache, kv + (size_t)T * w, sizeof(float) * (size_t)Lc * w);
}

/* y = out(SwooshL(in(x))) */
static void zf_feed_forward(zf_bufs_t *b, const icefall_zf_layer_t *L, int i, const float *x,
                            float *y, int T, int D)
{
    const int f = L->ff_dim[i];
    linear_ref(b->proj, x, L->ff_in_w[i], L->ff_in_b[i], T, D, f);
    swoosh_lin(b->proj, (size_t)T * f, SWOOSH_L);
    linear_ref(y, b->proj, L->ff_out_w[i], L->ff_out_b[i], T, f, D);
}

/* The left context of layer li in stream j of a pass (NULL: a whole utterance, no streams) */
static zf_layer_cache_t *cache_of(icefall_zf_stream_t *const *st, int j, int li)
{
    return st ? &st[j]->layers[li] : NULL;
}

/* ConvolutionModule: y = out(SwooshR(depthwise(a * sigmoid(s)))), (a, s) = in(x); the depthwise
 * conv chunk-causal in a causal model (chunks of C frames; a stream's cache: its k/2 previous
 * inputs, updated); nb streams' T rows each */
static void zf_conv_module(zf_bufs_t *b, const icefall_zf_layer_t *L, int i, const float *x,
                           float *y, int T, int D, int k, int causal, int C, int nb,
                           icefall_zf_stream_t *const *st, int li)
{
    const int R = nb * T;
    linear_ref(b->proj, x, L->cv_in_w[i], L->cv_in_b[i], R, D, 2 * D);
    glu_ref(b->g, b->proj, R, D);
    for (int j = 0; j < nb; j++) {
        const float *g = b->g + (size_t)j * T * D;
        float *dwo = b->dwo + (size_t)j * T * D;
        if (!causal) {
            depthwise_conv1d_ref(dwo, g, NULL, L->cv_dw_w[i], L->cv_dw_b[i], T, D, k, (k - 1) / 2,
                                 T);
            continue;
        }
        zf_layer_cache_t *lc = cache_of(st, j, li);
        float *cache = lc ? lc->conv[i] : NULL;
        zf_chunk_conv_ref(dwo, b->proj, g, cache, L->cv_cc_w[i], L->cv_cc_b[i], L->cv_ck_w[i],
                          L->cv_ck_b[i], L->cv_ck_scale[i], T, D, k, C, OPS_ACT_NONE);
        const int lp = k / 2;
        if (cache && lp > 0) { /* the last lp inputs of [cache; g] */
            if (T >= lp) {
                memcpy(cache, g + (size_t)(T - lp) * D, sizeof(float) * (size_t)lp * D);
            } else {
                memmove(cache, cache + (size_t)T * D, sizeof(float) * (size_t)(lp - T) * D);
                memcpy(cache + (size_t)(lp - T) * D, g, sizeof(float) * (size_t)T * D);
            }
        }
    }
    swoosh_lin(b->dwo, (size_t)R * D, SWOOSH_R);
    linear_ref(y, b->dwo, L->cv_out_w[i], L->cv_out_b[i], R, D, D);
}

/* SelfAttention i: y = out(concat_h(attn_h v_h)), v = in(x) after the Lc cached values; x, y
 * (nb T, D): nb streams' T rows one after the other, each with its own weights and values */
static void zf_self_attn(zf_bufs_t *b, const icefall_zf_layer_t *L, int i, const float *x, float *y,
                         int T, int D, int H, int vd, int Lc, int nb,
                         icefall_zf_stream_t *const *st, int li)
{
    const int hv = H * vd, K = Lc + T;
    linear_ref(b->proj, x, L->sa_in_w[i], L->sa_in_b[i], nb * T, D, hv);
    for (int j = 0; j < nb; j++) {
        const float *v = b->proj + (size_t)j * T * hv;
        const float *sc = b->sc + (size_t)j * H * T * K;
        float *ctx = b->ctx + (size_t)j * T * hv;
        if (Lc > 0) {
            concat_left(b->kv, cache_of(st, j, li)->val[i], v, Lc, T, hv, hv);
            v = b->kv;
        }
        for (int h = 0; h < H; h++)
            matmul_ref(ctx + (size_t)h * vd, sc + (size_t)h * T * K, v + (size_t)h * vd, T, vd, K,
                       K, hv, hv, 0, 1.0f, 0.0f);
    }
    linear_ref(y, b->ctx, L->sa_out_w[i], L->sa_out_b[i], nb * T, hv, D);
}

/* NonlinAttention with head 0's weights: y = out((attn_0 (xx * tanh(s))) * yy), (s, xx, yy) =
 * in(x), after the Lc cached xx * tanh(s); nb streams' rows as zf_self_attn's */
static void zf_nonlin_attn(zf_bufs_t *b, const icefall_zf_layer_t *L, const float *x, float *y,
                           int T, int D, int H, int Lc, int nb, icefall_zf_stream_t *const *st,
                           int li)
{
    const int hid = 3 * D / 4, K = Lc + T, R = nb * T;
    linear_ref(b->proj, x, L->na_in_w, L->na_in_b, R, D, 3 * hid);
    zf_gate_ref(b->ctx, b->proj + hid, 3 * hid, b->proj, 3 * hid, R, hid, 1);
    for (int j = 0; j < nb; j++) {
        const float *xx = b->ctx + (size_t)j * T * hid;
        if (Lc > 0) {
            concat_left(b->kv, cache_of(st, j, li)->nl, xx, Lc, T, hid, hid);
            xx = b->kv;
        }
        matmul_ref(b->g + (size_t)j * T * hid, b->sc + (size_t)j * H * T * K, xx, T, hid, K, K, hid,
                   hid, 0, 1.0f, 0.0f);
    }
    zf_gate_ref(b->g, b->g, hid, b->proj + 2 * hid, 3 * hid, R, hid, 0);
    linear_ref(y, b->g, L->na_out_w, L->na_out_b, R, hid, D);
}

/* RelPositionMultiheadAttentionWeights: sc (nb, H, T, K = Lc + T) softmax over the keys
 * [lo, hi) (stream j's rows of b->lo / b->hi from j T on) of q_h[i] . k_h[j] + p_h[i] .
 * linear_pos(pe)_h[(T - 1) - i + j], the keys after the Lc cached ones of each stream */
static void zf_attn_weights(zf_bufs_t *b, const icefall_zipformer_config_t *z, int s,
                            const icefall_zf_layer_t *L, const float *x, int T, int Lc, int nb,
                            icefall_zf_stream_t *const *st, int li)
{
    const int D = z->dim[s], H = z->heads[s], qd = z->qdim[s], pd = z->pdim[s];
    const int hq = H * qd, A = 2 * hq + H * pd, P = 2 * T - 1 + Lc, K = Lc + T;
    linear_ref(b->proj, x, L->aw_in_w, L->aw_in_b, nb * T, D, A);
    linear_ref(b->pp, b->pe, L->aw_pos_w, NULL, P, z->pos_dim, H * pd);
    for (int j = 0; j < nb; j++) {
        const float *q = b->proj + (size_t)j * T * A, *keys = q + hq;
        int ldk = A;
        if (Lc > 0) {
            concat_left(b->kv, cache_of(st, j, li)->key, q + hq, Lc, T, hq, A);
            keys = b->kv;
            ldk = hq;
        }
        const int *lo = b->lo ? b->lo + (size_t)j * T : NULL;
        const int *hi = b->hi ? b->hi + (size_t)j * T : NULL;
        for (int h = 0; h < H; h++) {
            float *sc = b->sc + ((size_t)j * H + h) * T * K;
            matmul_ref(sc, q + (size_t)h * qd, keys + (size_t)h * qd, T, K, qd, A, ldk, K, 1, 1.0f,
                       0.0f);
            matmul_ref(b->bd, q + (size_t)(2 * hq + h * pd), b->pp + (size_t)h * pd, T, P, pd, A,
                       H * pd, P, 1, 1.0f, 0.0f);
            zf_rel_softmax_ref(sc, b->bd, lo, hi, T, K, P);
        }
    }
}

/* Zipformer2EncoderLayer (layer li of the model) on x (nb T, D) in place: nb streams' T rows each
 * (one utterance: nb 1, st NULL); C the conv modules' chunk (frames at the stack's rate); Lc the
 * streams' left context (0: the full utterance) */
static void zf_layer(zf_bufs_t *b, const icefall_zipformer_config_t *z, int s,
                     const icefall_zf_layer_t *L, float *x, int T, int C, int Lc, int nb,
                     icefall_zf_stream_t *const *st, int li)
{
    const int D = z->dim[s], H = z->heads[s], vd = z->vdim[s], k = z->kernel[s];
    const size_t n = (size_t)nb * T * D;
    float *y = b->ly;
    memcpy(b->orig, x, sizeof(float) * n);
    zf_attn_weights(b, z, s, L, x, T, Lc, nb, st, li);
    zf_feed_forward(b, L, 0, x, y, nb * T, D);
    add_to(x, y, n);
    zf_nonlin_attn(b, L, x, y, T, D, H, Lc, nb, st, li);
    add_to(x, y, n);
    zf_self_attn(b, L, 0, x, y, T, D, H, vd, Lc, nb, st, li);
    add_to(x, y, n);
    zf_conv_module(b, L, 0, x, y, T, D, k, z->causal, C, nb, st, li);
    add_to(x, y, n);
    zf_feed_forward(b, L, 1, x, y, nb * T, D);
    add_to(x, y, n);
    zf_bypass_ref(x, b->orig, L->bypass_mid, nb * T, D);
    zf_self_attn(b, L, 1, x, y, T, D, H, vd, Lc, nb, st, li);
    add_to(x, y, n);
    zf_conv_module(b, L, 1, x, y, T, D, k, z->causal, C, nb, st, li);
    add_to(x, y, n);
    zf_feed_forward(b, L, 2, x, y, nb * T, D);
    add_to(x, y, n);
    bias_norm_ref(x, nb * T, D, D, L->norm_bias, L->norm_scale);
    zf_bypass_ref(x, b->orig, L->bypass, nb * T, D);
}

/* ---- encoder_embed -------------------------------------------------------------------------- */

/* Conv2dSubsampling + ConvNeXt + out + BiasNorm: feats (t_in, F) -> cur (Te, embed_dim), row
 * stride M (b->cur, or a stream's rows of it); returns Te. The ConvNeXt's 7x7 depthwise conv sees 3
 * conv frames on each side: zeros past both ends of the utterance, or (nx: a stream's) the 3 frames
 * before from nx and the last 3 of this step's conv frames as lookahead (Te = conv frames - 3; nx
 * then keeps the 3 frames before the next step's first). */
static int zf_embed(const icefall_model_t *m, zf_bufs_t *b, const float *feats, int T, int M,
                    float *nx, float *cur)
{
    const icefall_zf_t *f = &m->zf;
    const int F = m->cfg.feature_dim, W1 = (F - 3) / 2 + 1, W2f = W1 - 2, W2 = (W2f + 1) / 2;
    const int T1 = (T - 3) / 2, Tc = embed_frames(T), C = ZF_EMBED_CH, d0 = m->cfg.zf.embed_dim;
    const int R = ZF_NX_PAD, Te = nx ? Tc - R : Tc;
    const size_t row = (size_t)W2 * C; /* one conv frame, position-major (W2, C) */
    /* conv 1 -> 8, kernel 3, padding (0, 1): only the frequency axis is padded */
    memset(b->xin, 0, sizeof(float) * (size_t)T * (F + 2));
    for (int t = 0; t < T; t++)
        memcpy(b->xin + (size_t)t * (F + 2) + 1, feats + (size_t)t * F, sizeof(float) * F);
    conv2d_ref(b->a0, b->col, b->xin, f->conv_w[0], f->conv_b[0], 1, T, F + 2, 8, 3, 3, 1);
    swoosh_ref(b->a0, b->a0, (size_t)(T - 2) * 8 * F, SWOOSH_R);
    conv2d_ref(b->a1, b->col, b->a0, f->conv_w[1], f->conv_b[1], 8, T - 2, F, 32, 3, 3, 2);
    swoosh_ref(b->a1, b->a1, (size_t)T1 * 32 * W1, SWOOSH_R);
    /* stride (1, 2): stride 1, then every other frequency column, into ext after R rows */
    conv2d_ref(b->a2f, b->col, b->a1, f->conv_w[2], f->conv_b[2], 32, T1, W1, C, 3, 3, 1);
    float *ext = b->ext; /* (Te + 2R) rows: R before, the conv frames, (full: R zero rows) */
    for (int t = 0; t < Tc; t++)
        for (int ch = 0; ch < C; ch++) {
            const float *src = b->a2f + ((size_t)t * C + ch) * W2f;
            float *dst = ext + (size_t)(R + t) * row;
            for (int q = 0; q < W2; q++)
                dst[(size_t)q * C + ch] = src[2 * q];
        }
    swoosh_ref(ext + (size_t)R * row, ext + (size_t)R * row, (size_t)Tc * row, SWOOSH_R);
    if (nx) {
        memcpy(ext, nx, sizeof(float) * R * row);
    } else {
        memset(ext, 0, sizeof(float) * R * row);
        memset(ext + (size_t)(R + Tc) * row, 0, sizeof(float) * R * row);
    }
    /* ConvNeXt: depthwise 7x7 (frequency padding 3), 1x1 C -> 3C, SwooshL, 1x1 3C -> C, plus the
     * input */
    zf_convnext_dw_ref(b->dw, ext, f->nx_dw_w, f->nx_dw_b, Te, W2, C, ZF_NX_K);
    const int np = Te * W2;
    linear_ref(b->hid, b->dw, f->nx_pw1_w, f->nx_pw1_b, np, C, ZF_NX_HID);
    swoosh_ref(b->hid, b->hid, (size_t)np * ZF_NX_HID, SWOOSH_L);
    linear_ref(b->y, b->hid, f->nx_pw2_w, f->nx_pw2_b, np, ZF_NX_HID, C);
    /* plus the input, (Te, W2, C) -> (Te, C, W2): channel-major rows, as icefall flattens (c, f) */
    zf_convnext_out_ref(b->a2, b->y, ext + (size_t)R * row, Te, W2, C);
    if (nx) /* cat(cache, x)[Te : Te + R] */
        memcpy(nx, ext + (size_t)Te * row, sizeof(float) * R * row);
    linear_ref(b->y, b->a2, f->out_w, f->out_b, Te, C * W2, d0);
    bias_norm_ref(b->y, Te, d0, d0, f->norm_bias, f->norm_scale);
    for (int t = 0; t < Te; t++)
        memcpy(cur + (size_t)t * M, b->y + (size_t)t * d0, sizeof(float) * d0);
    return Te;
}

/* ---- the encoder ---------------------------------------------------------------------------- */

/* The stacks, the full-width output and downsample_output over b->cur (nb streams' Te frames at
 * 50 Hz each, one after the other) -> enc[j] ((Te + 1) / 2, M) for stream j; returns that count.
 * st: a streaming step of nb streams (every layer's left context, the keys before each stream's
 * processed frames masked); NULL: one whole utterance (nb 1; a causal model's chunk mask). lo, hi:
 * (nb Te) scratch. */
static int zf_stacks(const icefall_model_t *m, zf_bufs_t *b, int *lo, int *hi, int Te, int nb,
                     icefall_zf_stream_t *const *st, float *const *enc, icefall_stage_fn stage,
                     void *user)
{
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    const int M = m->cfg.d, R = nb * Te;
    int cur_dim = z->embed_dim, li = 0;
    float *outs = b->outs;
    float *souts[ICEFALL_ZF_MAX_STACKS];
    for (int s = 0; s < z->n_stacks; s++) {
        const icefall_zf_stack_t *S = &m->zf.stacks[s];
        const int D = z->dim[s], ds = z->ds[s], Td = (Te + ds - 1) / ds;
        /* convert_num_channels: truncate, or append zero channels */
        for (int t = 0; t < R && D > cur_dim; t++)
            memset(b->cur + (size_t)t * M + cur_dim, 0, sizeof(float) * (size_t)(D - cur_dim));
        cur_dim = D;
        /* SimpleDownsample: softmax(bias)-weighted sum of ds frames, the last frame repeated */
        for (int j = 0; j < nb; j++)
            zf_downsample_ref(b->xs + (size_t)j * Td * D, b->cur + (size_t)j * Te * M, M, S->ds_w,
                              Te, ds, D);
        int Lc = 0, C = -1;
        b->lo = b->hi = NULL;
        if (st) {
            /* the left context: keys before each stream's processed frames are masked (icefall's
             * processed_mask[::ds], per batch row); the conv modules see this step as one chunk */
            Lc = z->left_frames / ds;
            b->lo = lo;
            b->hi = hi;
            for (int j = 0; j < nb; j++) {
                const int un = z->left_frames - st[j]->processed;
                const int klo = un > 0 ? (un + ds - 1) / ds : 0;
                for (int t = 0; t < Td; t++) {
                    lo[j * Td + t] = klo;
                    hi[j * Td + t] = Lc + Td;
                }
            }
            C = Td;
        } else if (z->causal && z->chunk > 0) {
            /* the chunk mask at this rate (attn_mask[::ds, ::ds]): frame t (50 Hz frame t ds)
             * of chunk c = t / (chunk / ds) sees the frames of chunks [c - left_chunks, c] */
            C = z->chunk / ds;
            b->lo = lo;
            b->hi = hi;
            for (int t = 0; t < Td; t++) {
                const int c = t / C, first = z->left_chunks < 0 ? 0 : c - z->left_chunks;
                lo[t] = first > 0 ? first * C : 0;
                hi[t] = (c + 1) * C < Td ? (c + 1) * C : Td;
            }
        }
        compact_pos_emb_ref(b->pe, Td, Lc, z->pos_dim);
        for (int l = 0; l < z->num_layers[s]; l++, li++)
            zf_layer(b, z, s, &S->layers[l], b->xs, Td, C, Lc, nb, st, li);
        /* SimpleUpsample (each frame repeated ds times, cut to Te) and out_combiner */
        for (int j = 0; j < nb; j++)
            zf_upsample_combine_ref(b->cur + (size_t)j * Te * M, M, outs + (size_t)j * Te * D,
                                    b->xs + (size_t)j * Td * D, S->combiner, Te, ds, D);
        souts[s] = outs;
        if (stage) {
            char name[32];
            snprintf(name, sizeof name, "stack%d_out", s);
            stage(user, name, outs, R, D);
        }
        outs += (size_t)R * D;
    }
    /* _get_full_dim_output: the last stack's channels, then each higher channel from the most
     * recent stack that has it */
    int have = z->dim[z->n_stacks - 1];
    for (int t = 0; t < R; t++)
        memcpy(b->full + (size_t)t * M, souts[z->n_stacks - 1] + (size_t)t * have,
               sizeof(float) * have);
    for (int s = z->n_stacks - 2; s >= 0; s--) {
        const int D = z->dim[s];
        if (D <= have)
            continue;
        for (int t = 0; t < R; t++)
            memcpy(b->full + (size_t)t * M + have, souts[s] + (size_t)t * D + have,
                   sizeof(float) * (size_t)(D - have));
        have = D;
    }
    /* downsample_output: factor 2, the last frame repeated */
    const int To = (Te + 1) / 2;
    for (int j = 0; j < nb; j++)
        zf_downsample_ref(enc[j], b->full + (size_t)j * Te * M, M, m->zf.out_ds_w, Te, 2, M);
    return To;
}

int icefall_zf_encode(icefall_worker_t *w, const float *feats, int t_in, float *enc, int *len_out,
                      icefall_stage_fn stage, void *user, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    if (t_in < 9)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall: %d feature frames: the zipformer needs at least 9", t_in);
    arena_t a = {.base = w->scratch};
    zf_bufs_t b;
    zf_layout(m, t_in, 0, 1, &a, &b);
    const int M = m->cfg.d, Te = zf_embed(m, &b, feats, t_in, M, NULL, b.cur);
    if (stage) {
        for (int t = 0; t < Te; t++)
            memcpy(b.y + (size_t)t * z->embed_dim, b.cur + (size_t)t * M,
                   sizeof(float) * z->embed_dim);
        stage(user, "encoder_embed_out", b.y, Te, z->embed_dim);
    }
    int To = zf_stacks(m, &b, w->lo, w->hi, Te, 1, NULL, &enc, stage, user);
    if (len_out)
        *len_out = To;
    return HARK_OK;
}

/* ---- streaming ------------------------------------------------------------------------------ */

int icefall_zf_stream_create(const icefall_model_t *m, icefall_zf_stream_t **out, hark_err_t *err)
{
    *out = NULL;
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    if (c->encoder_type != ICEFALL_ZIPFORMER || !can_stream(z))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall: only a causal zipformer with one chunk size > 0 and a left "
                       "context > 0 (a multiple of every downsampling factor) streams");
    icefall_zf_stream_t *s = hark_calloc(1, sizeof *s);
    if (!s || !(s->layers = hark_calloc((size_t)c->n_layers, sizeof *s->layers))) {
        hark_free(s);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    const int W2 = ((c->feature_dim - 1) / 2 - 1) / 2;
    size_t n = (size_t)ZF_NX_PAD * W2 * ZF_EMBED_CH;
    for (int pass = 0; pass < 2; pass++) {
        float *p = s->mem;
        if (pass == 1) {
            s->nx = p;
            p += n;
        }
        size_t used = n;
        zf_layer_cache_t *lc = s->layers;
        for (int i = 0; i < z->n_stacks; i++) {
            const size_t Lc = (size_t)(z->left_frames / z->ds[i]), D = (size_t)z->dim[i];
            const size_t hq = (size_t)z->heads[i] * z->qdim[i],
                         hv = (size_t)z->heads[i] * z->vdim[i];
            const size_t sizes[6] = {Lc * hq,
                                     Lc * (3 * D / 4),
                                     Lc * hv,
                                     Lc * hv,
                                     (size_t)(z->kernel[i] / 2) * D,
                                     (size_t)(z->kernel[i] / 2) * D};
            for (int l = 0; l < z->num_layers[i]; l++, lc++) {
                float **slot[6] = {&lc->key,    &lc->nl,      &lc->val[0],
                                   &lc->val[1], &lc->conv[0], &lc->conv[1]};
                for (int k = 0; k < 6; k++) {
                    if (pass == 1) {
                        *slot[k] = p;
                        p += sizes[k];
                    }
                    used += sizes[k];
                }
            }
        }
        if (pass == 0) {
            s->n_mem = used;
            if (!(s->mem = hark_calloc(used > 0 ? used : 1, sizeof(float)))) {
                icefall_zf_stream_destroy(s);
                return err_set(err, HARK_ERR_NOMEM, "out of memory");
            }
        }
    }
    *out = s;
    return HARK_OK;
}

void icefall_zf_stream_reset(icefall_zf_stream_t *s)
{
    memset(s->mem, 0, sizeof(float) * s->n_mem);
    s->processed = 0;
}

void icefall_zf_stream_destroy(icefall_zf_stream_t *s)
{
    if (!s)
        return;
    hark_free(s->mem);
    hark_free(s->layers);
    hark_free(s);
}

int icefall_can_stream(const icefall_model_t *m)
{
    return m->cfg.encoder_type == ICEFALL_ZIPFORMER && can_stream(&m->cfg.zf);
}

int icefall_zf_stream_step_frames(const icefall_model_t *m)
{
    return stream_step_frames(&m->cfg.zf);
}

int icefall_zf_stream_step_batch(icefall_worker_t *w, icefall_zf_stream_t *const *s,
                                 const float *const *feats, float *const *enc, int n,
                                 hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    if (n < 1 || n > w->max_streams)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall: %d streams in one step: the worker steps 1 to %d together", n,
                       w->max_streams);
    for (int j = 0; j < n; j++) {
        if (s[j]->m != m)
            return err_set(err, HARK_ERR_INVALID_ARG, "icefall: the stream is another model's");
        for (int i = 0; i < j; i++)
            if (s[i] == s[j])
                return err_set(err, HARK_ERR_INVALID_ARG,
                               "icefall: stream %d is stream %d again in one step", j, i);
    }
    arena_t a = {.base = w->scratch};
    zf_bufs_t b;
    const int t_in = stream_step_frames(&m->cfg.zf), M = m->cfg.d;
    zf_layout(m, t_in, 1, n, &a, &b);
    const int Te = embed_frames(t_in) - ZF_NX_PAD;
    for (int j = 0; j < n; j++) /* encoder_embed one stream at a time, into its rows of cur */
        zf_embed(m, &b, feats[j], t_in, M, s[j]->nx, b.cur + (size_t)j * Te * M);
    zf_stacks(m, &b, w->lo, w->hi, Te, n, s, enc, NULL, NULL);
    for (int j = 0; j < n; j++)
        s[j]->processed += Te;
    return HARK_OK;
}

int icefall_zf_stream_step(icefall_worker_t *w, icefall_zf_stream_t *s, const float *feats,
                           float *enc, hark_err_t *err)
{
    return icefall_zf_stream_step_batch(w, &s, &feats, &enc, 1, err);
}

int icefall_zf_stream_encode(icefall_worker_t *w, const float *feats, int t_in, float **enc,
                             int *len_out, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_zipformer_config_t *z = &m->cfg.zf;
    const int F = m->cfg.feature_dim, M = m->cfg.d;
    *enc = NULL;
    *len_out = 0;
    icefall_zf_stream_t *s = NULL;
    int rc = icefall_zf_stream_create(m, &s, err);
    if (rc)
        return rc;
    const int step = 2 * z->chunk, n_in = stream_step_frames(z), per = z->chunk / 2;
    const int total = t_in + n_in - step + 30; /* DecodeStream: 13 + tail_pad_len 30 frames */
    const int n_chunks = (total + step - 1) / step;
    float *buf = hark_malloc(sizeof(float) * (size_t)n_in * F);
    float *out = hark_malloc(sizeof(float) * (size_t)n_chunks * per * M);
    if (!buf || !out) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    const float pad = m->cfg.pad_value;
    for (int c = 0; c < n_chunks && !rc; c++) {
        for (int t = 0; t < n_in; t++) {
            int src = c * step + t;
            float *row = buf + (size_t)t * F;
            if (src < t_in)
                memcpy(row, feats + (size_t)src * F, sizeof(float) * F);
            else
                for (int j = 0; j < F; j++)
                    row[j] = pad;
        }
        rc = icefall_zf_stream_step(w, s, buf, out + (size_t)c * per * M, err);
    }
    if (!rc) {
        *enc = out;
        *len_out = n_chunks * per;
        out = NULL;
    }
done:
    hark_free(buf);
    hark_free(out);
    icefall_zf_stream_destroy(s);
    return rc;
}
