/* icefall_zipformer.c — the zipformer recipe's Zipformer2 encoder on the CPU (non-causal), as
 * icefall runs it in eval mode (balancers, whitening, dropout and the training-time masks are
 * identities there): encoder_embed (Conv2dSubsampling: three convs with SwooshR, ConvNeXt, a
 * linear layer, BiasNorm), the stacks at their own frame rates (SimpleDownsample, the
 * Zipformer2EncoderLayers with their CompactRelPositionalEncoding, SimpleUpsample and the
 * out_combiner bypass; channels truncated or zero-padded between stacks), the full-width output
 * taken from the most recent stack holding each channel, and downsample_output. A layer computes
 * its attention weights once (RelPositionMultiheadAttentionWeights) and uses them three times:
 * head 0 in NonlinAttention, every head in self_attn1 and self_attn2. model.json's encoder section
 * and the weights come from tools/convert_icefall.py --recipe zipformer (docs/model-format.md).
 * Tests: tests/model/icefall/test_icefall_zipformer.c */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ZF_EMBED_CH 128 /* layer3_channels of Conv2dSubsampling */
#define ZF_NX_HID 384   /* ConvNeXt hidden channels (3 x 128) */
#define ZF_NX_K 7       /* ConvNeXt depthwise kernel (7 x 7) */

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
    if (cJSON_IsTrue(causal))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: encoder.causal true: the causal (streaming) zipformer is not "
                       "implemented yet",
                       path);
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

static int zget(safetensors_t *st, const float **out, hark_err_t *err, int ndim,
                const int64_t *shape, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int zget(safetensors_t *st, const float **out, hark_err_t *err, int ndim,
                const int64_t *shape, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int rc = st_get_f32(st, name, ndim, shape, out, err);
    if (rc)
        return rc;
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    for (size_t i = 0; i < n; i++)
        if (!isfinite((*out)[i]))
            return err_set(err, HARK_ERR_FORMAT, "model weights: tensor '%s' holds %s at %zu", name,
                           isnan((*out)[i]) ? "NaN" : "an infinite value", i);
    return HARK_OK;
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define W(ptr, nd, shape, ...) (rc = rc ? rc : zget(st, &(ptr), err, nd, shape, __VA_ARGS__))

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
        W(L->cv_dw_w[i], 3, SH(D, 1, k), "%s.conv_module%d.depthwise_conv.weight", p, i + 1);
        W(L->cv_dw_b[i], 1, SH(D), "%s.conv_module%d.depthwise_conv.bias", p, i + 1);
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

static int embed_frames(int t_in)
{
    return t_in < 9 ? 0 : (t_in - 7) / 2;
}

typedef struct {
    /* persistent over the pass */
    float *cur;  /* (Te, M) the running activations, row stride M */
    float *outs; /* every stack's output (Te, dim[i]), one after the other */
    float *full; /* (Te, M) the full-width output before downsample_output */
    /* encoder_embed (overlaps the stack buffers) */
    float *xin, *a0, *a1, *a2f, *col, *a2, *xt, *dw, *hid, *y;
    /* a stack (sized for the largest) */
    float *xs, *orig, *ly, *proj, *sc, *pe, *pp, *bd, *ctx, *g, *dwo;
} zf_bufs_t;

/* Lays the buffers of a pass over t_in feature frames out in a (a->base NULL: only measures). */
static void zf_layout(const icefall_model_t *m, int t_in, arena_t *a, zf_bufs_t *b)
{
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    const size_t T = (size_t)t_in, F = (size_t)c->feature_dim, Te = (size_t)embed_frames(t_in);
    const size_t M = (size_t)c->d, T1 = (T - 3) / 2, W1 = (F - 3) / 2 + 1, W2f = W1 - 2;
    const size_t W2 = ((F - 1) / 2 - 1) / 2;
    size_t sum_dims = 0;
    for (int i = 0; i < z->n_stacks; i++)
        sum_dims += (size_t)z->dim[i];
    b->cur = take(a, Te * M);
    b->outs = take(a, Te * sum_dims);
    b->full = take(a, Te * M);
    const size_t mark = a->off;
    /* encoder_embed */
    size_t c0 = conv2d_col_floats(1, 8, 3, 3, (int)F), c1 = conv2d_col_floats(8, 32, 3, 3, (int)W1),
           c2 = conv2d_col_floats(32, 128, 3, 3, (int)W2f);
    b->xin = take(a, T * (F + 2));
    b->a0 = take(a, (T - 2) * 8 * F);
    b->a1 = take(a, T1 * 32 * W1);
    b->a2f = take(a, (T1 - 2) * ZF_EMBED_CH * W2f);
    b->col = take(a, c0 > c1 ? (c0 > c2 ? c0 : c2) : (c1 > c2 ? c1 : c2));
    b->a2 = take(a, Te * ZF_EMBED_CH * W2);
    b->xt = take(a, Te * ZF_EMBED_CH * W2);
    b->dw = take(a, Te * ZF_EMBED_CH * W2);
    b->hid = take(a, Te * ZF_NX_HID * W2);
    b->y = take(a, Te * (ZF_EMBED_CH * W2 > M ? ZF_EMBED_CH * W2 : M));
    /* the stacks: one set of buffers sized for the largest need */
    a->off = mark;
    size_t xs = 0, proj = 0, sc = 0, pe = 0, pp = 0, bd = 0, ctx = 0;
    for (int i = 0; i < z->n_stacks; i++) {
        const size_t ds = (size_t)z->ds[i], Td = (Te + ds - 1) / ds, D = (size_t)z->dim[i];
        const size_t H = (size_t)z->heads[i], P = Td ? 2 * Td - 1 : 1, hidn = 3 * D / 4;
        size_t wproj = (2 * (size_t)z->qdim[i] + (size_t)z->pdim[i]) * H;
        size_t f3 = (size_t)z->ff[i] * 5 / 4;
        wproj = wproj > 3 * hidn ? wproj : 3 * hidn;
        wproj = wproj > 2 * D ? wproj : 2 * D;
        wproj = wproj > f3 ? wproj : f3;
        wproj = wproj > H * (size_t)z->vdim[i] ? wproj : H * (size_t)z->vdim[i];
        size_t wctx = H * (size_t)z->vdim[i] > D ? H * (size_t)z->vdim[i] : D;
#define UP(v, x) v = (x) > v ? (x) : v
        UP(xs, Td * D);
        UP(proj, Td * wproj);
        UP(sc, H * Td * Td);
        UP(pe, P * (size_t)z->pos_dim);
        UP(pp, P * H * (size_t)z->pdim[i]);
        UP(bd, Td * P);
        UP(ctx, Td * wctx);
#undef UP
    }
    b->xs = take(a, xs);
    b->orig = take(a, xs);
    b->ly = take(a, xs);
    b->g = take(a, xs);
    b->dwo = take(a, xs);
    b->proj = take(a, proj);
    b->sc = take(a, sc);
    b->pe = take(a, pe);
    b->pp = take(a, pp);
    b->bd = take(a, bd);
    b->ctx = take(a, ctx);
}

size_t icefall_zf_scratch_floats(const icefall_model_t *m, int t_in)
{
    arena_t a = {0};
    zf_bufs_t b;
    zf_layout(m, t_in, &a, &b);
    return a.top + 16;
}

/* ---- activations and norms ------------------------------------------------------------------ */

/* k2's swoosh forward (SwooshL / SwooshR modules): log1p(exp(x - shift)) (x - shift where that
 * overflows) - 0.08 x - offset */
static void swoosh_k2(float *x, size_t n, float shift, float offset)
{
    for (size_t i = 0; i < n; i++) {
        float xo = x[i] - shift, l = log1pf(expf(xo));
        if (isinf(l))
            l = xo;
        x[i] = l - 0.08f * x[i] - offset;
    }
}

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

#define SWOOSH_L 4.0f, 0.035f
#define SWOOSH_R 1.0f, 0.313261687f

/* BiasNorm: y = x * mean_c((x - b)^2)^-0.5 * scale, rows of d with stride ld, in place */
static void bias_norm(float *x, int n, int d, int ld, const float *b, float scale)
{
    for (int r = 0; r < n; r++) {
        float *xr = x + (size_t)r * ld;
        double s = 0;
        for (int j = 0; j < d; j++) {
            float v = xr[j] - b[j];
            s += (double)v * v;
        }
        float sc = scale / sqrtf((float)(s / d));
        for (int j = 0; j < d; j++)
            xr[j] *= sc;
    }
}

/* CompactRelPositionalEncoding: row r is relative offset r - (T - 1), r < 2T - 1; float32 as
 * icefall computes its table */
static void compact_pos_emb(float *pe, int T, int E)
{
    const float cl = (float)sqrt((double)E), lcl = (float)log(sqrt((double)E));
    const float ls = (float)(E / (2.0 * M_PI));
    for (int r = 0; r < 2 * T - 1; r++) {
        float x = (float)(r - (T - 1)), sg = x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f);
        float xc = cl * sg * (logf(fabsf(x) + cl) - lcl);
        float xa = atanf(xc / ls);
        float *o = pe + (size_t)r * E;
        for (int k = 0; 2 * k < E; k++) {
            float arg = xa * (float)(k + 1);
            o[2 * k] = cosf(arg);
            o[2 * k + 1] = sinf(arg);
        }
        o[E - 1] = 1.0f;
    }
}

/* ---- one layer ------------------------------------------------------------------------------ */

static void add_to(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* x = orig + (x - orig) * scale, rows of d */
static void bypass(float *x, const float *orig, const float *scale, int n, int d)
{
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) {
            size_t i = (size_t)t * d + j;
            x[i] = orig[i] + (x[i] - orig[i]) * scale[j];
        }
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

/* ConvolutionModule (non-causal): y = out(SwooshR(depthwise(a * sigmoid(s)))), (a, s) = in(x) */
static void zf_conv_module(zf_bufs_t *b, const icefall_zf_layer_t *L, int i, const float *x,
                           float *y, int T, int D, int k)
{
    linear_ref(b->proj, x, L->cv_in_w[i], L->cv_in_b[i], T, D, 2 * D);
    glu_ref(b->g, b->proj, T, D);
    depthwise_conv1d_ref(b->dwo, b->g, NULL, L->cv_dw_w[i], L->cv_dw_b[i], T, D, k, (k - 1) / 2, T);
    swoosh_lin(b->dwo, (size_t)T * D, SWOOSH_R);
    linear_ref(y, b->dwo, L->cv_out_w[i], L->cv_out_b[i], T, D, D);
}

/* SelfAttention i: y = out(concat_h(attn_h v_h)), v = in(x) */
static void zf_self_attn(zf_bufs_t *b, const icefall_zf_layer_t *L, int i, const float *x, float *y,
                         int T, int D, int H, int vd)
{
    const int hv = H * vd;
    linear_ref(b->proj, x, L->sa_in_w[i], L->sa_in_b[i], T, D, hv);
    for (int h = 0; h < H; h++)
        matmul_ref(b->ctx + (size_t)h * vd, b->sc + (size_t)h * T * T, b->proj + (size_t)h * vd, T,
                   vd, T, T, hv, hv, 0, 1.0f, 0.0f);
    linear_ref(y, b->ctx, L->sa_out_w[i], L->sa_out_b[i], T, hv, D);
}

/* NonlinAttention with head 0's weights: y = out((attn_0 (xx * tanh(s))) * yy), (s, xx, yy) =
 * in(x) */
static void zf_nonlin_attn(zf_bufs_t *b, const icefall_zf_layer_t *L, const float *x, float *y,
                           int T, int D)
{
    const int hid = 3 * D / 4;
    linear_ref(b->proj, x, L->na_in_w, L->na_in_b, T, D, 3 * hid);
    for (int t = 0; t < T; t++) {
        const float *p = b->proj + (size_t)t * 3 * hid;
        float *o = b->ctx + (size_t)t * hid;
        for (int j = 0; j < hid; j++)
            o[j] = p[hid + j] * tanhf(p[j]);
    }
    matmul_ref(b->g, b->sc, b->ctx, T, hid, T, T, hid, hid, 0, 1.0f, 0.0f);
    for (int t = 0; t < T; t++) {
        const float *p = b->proj + (size_t)t * 3 * hid + 2 * hid;
        float *o = b->g + (size_t)t * hid;
        for (int j = 0; j < hid; j++)
            o[j] *= p[j];
    }
    linear_ref(y, b->g, L->na_out_w, L->na_out_b, T, hid, D);
}

/* RelPositionMultiheadAttentionWeights: sc (H, T, T) softmax over keys of
 * q_h[i] . k_h[j] + p_h[i] . linear_pos(pe)_h[(T - 1) - i + j] */
static void zf_attn_weights(zf_bufs_t *b, const icefall_zipformer_config_t *z, int s,
                            const icefall_zf_layer_t *L, const float *x, int T)
{
    const int D = z->dim[s], H = z->heads[s], qd = z->qdim[s], pd = z->pdim[s];
    const int A = (2 * qd + pd) * H, P = 2 * T - 1;
    linear_ref(b->proj, x, L->aw_in_w, L->aw_in_b, T, D, A);
    linear_ref(b->pp, b->pe, L->aw_pos_w, NULL, P, z->pos_dim, H * pd);
    for (int h = 0; h < H; h++) {
        float *sc = b->sc + (size_t)h * T * T;
        matmul_ref(sc, b->proj + (size_t)h * qd, b->proj + (size_t)(H * qd + h * qd), T, T, qd, A,
                   A, T, 1, 1.0f, 0.0f);
        matmul_ref(b->bd, b->proj + (size_t)(2 * H * qd + h * pd), b->pp + (size_t)h * pd, T, P, pd,
                   A, H * pd, P, 1, 1.0f, 0.0f);
        for (int i = 0; i < T; i++) {
            float *row = sc + (size_t)i * T;
            const float *bd = b->bd + (size_t)i * P + (T - 1 - i);
            for (int j = 0; j < T; j++)
                row[j] += bd[j];
        }
        softmax_masked_ref(sc, NULL, NULL, T, T, T);
    }
}

/* Zipformer2EncoderLayer on x (T, D) in place */
static void zf_layer(zf_bufs_t *b, const icefall_zipformer_config_t *z, int s,
                     const icefall_zf_layer_t *L, float *x, int T)
{
    const int D = z->dim[s], H = z->heads[s], vd = z->vdim[s], k = z->kernel[s];
    const size_t n = (size_t)T * D;
    float *y = b->ly;
    memcpy(b->orig, x, sizeof(float) * n);
    zf_attn_weights(b, z, s, L, x, T);
    zf_feed_forward(b, L, 0, x, y, T, D);
    add_to(x, y, n);
    zf_nonlin_attn(b, L, x, y, T, D);
    add_to(x, y, n);
    zf_self_attn(b, L, 0, x, y, T, D, H, vd);
    add_to(x, y, n);
    zf_conv_module(b, L, 0, x, y, T, D, k);
    add_to(x, y, n);
    zf_feed_forward(b, L, 1, x, y, T, D);
    add_to(x, y, n);
    bypass(x, b->orig, L->bypass_mid, T, D);
    zf_self_attn(b, L, 1, x, y, T, D, H, vd);
    add_to(x, y, n);
    zf_conv_module(b, L, 1, x, y, T, D, k);
    add_to(x, y, n);
    zf_feed_forward(b, L, 2, x, y, T, D);
    add_to(x, y, n);
    bias_norm(x, T, D, D, L->norm_bias, L->norm_scale);
    bypass(x, b->orig, L->bypass, T, D);
}

/* ---- encoder_embed -------------------------------------------------------------------------- */

/* Conv2dSubsampling + ConvNeXt + out + BiasNorm: feats (T, F) -> cur (Te, embed_dim), stride M */
static void zf_embed(const icefall_model_t *m, zf_bufs_t *b, const float *feats, int T, int M)
{
    const icefall_zf_t *f = &m->zf;
    const int F = m->cfg.feature_dim, W1 = (F - 3) / 2 + 1, W2f = W1 - 2, W2 = (W2f + 1) / 2;
    const int T1 = (T - 3) / 2, Te = embed_frames(T), C = ZF_EMBED_CH, d0 = m->cfg.zf.embed_dim;
    /* conv 1 -> 8, kernel 3, padding (0, 1): only the frequency axis is padded */
    memset(b->xin, 0, sizeof(float) * (size_t)T * (F + 2));
    for (int t = 0; t < T; t++)
        memcpy(b->xin + (size_t)t * (F + 2) + 1, feats + (size_t)t * F, sizeof(float) * F);
    conv2d_ref(b->a0, b->col, b->xin, f->conv_w[0], f->conv_b[0], 1, T, F + 2, 8, 3, 3, 1);
    swoosh_k2(b->a0, (size_t)(T - 2) * 8 * F, SWOOSH_R);
    conv2d_ref(b->a1, b->col, b->a0, f->conv_w[1], f->conv_b[1], 8, T - 2, F, 32, 3, 3, 2);
    swoosh_k2(b->a1, (size_t)T1 * 32 * W1, SWOOSH_R);
    /* stride (1, 2): stride 1, then every other frequency column */
    conv2d_ref(b->a2f, b->col, b->a1, f->conv_w[2], f->conv_b[2], 32, T1, W1, C, 3, 3, 1);
    for (int t = 0; t < Te; t++)
        for (int ch = 0; ch < C; ch++) {
            const float *src = b->a2f + ((size_t)t * C + ch) * W2f;
            float *dst = b->xt; /* (Te, W2, C): position-major for the ConvNeXt */
            for (int q = 0; q < W2; q++)
                dst[((size_t)t * W2 + q) * C + ch] = src[2 * q];
        }
    swoosh_k2(b->xt, (size_t)Te * W2 * C, SWOOSH_R);
    /* ConvNeXt: depthwise 7x7 (padding 3, zeros past both edges), 1x1 C -> 3C, SwooshL,
     * 1x1 3C -> C, residual */
    const int R = ZF_NX_K / 2;
    for (int t = 0; t < Te; t++)
        for (int q = 0; q < W2; q++) {
            float *o = b->dw + ((size_t)t * W2 + q) * C;
            for (int ch = 0; ch < C; ch++)
                o[ch] = f->nx_dw_b[ch];
            for (int i = 0; i < ZF_NX_K; i++) {
                int tt = t + i - R;
                if (tt < 0 || tt >= Te)
                    continue;
                for (int j = 0; j < ZF_NX_K; j++) {
                    int qq = q + j - R;
                    if (qq < 0 || qq >= W2)
                        continue;
                    const float *in = b->xt + ((size_t)tt * W2 + qq) * C;
                    const float *w = f->nx_dw_w + (size_t)i * ZF_NX_K + j;
                    for (int ch = 0; ch < C; ch++)
                        o[ch] += w[(size_t)ch * ZF_NX_K * ZF_NX_K] * in[ch];
                }
            }
        }
    const int np = Te * W2;
    linear_ref(b->hid, b->dw, f->nx_pw1_w, f->nx_pw1_b, np, C, ZF_NX_HID);
    swoosh_k2(b->hid, (size_t)np * ZF_NX_HID, SWOOSH_L);
    linear_ref(b->y, b->hid, f->nx_pw2_w, f->nx_pw2_b, np, ZF_NX_HID, C);
    add_to(b->xt, b->y, (size_t)np * C);
    /* (Te, W2, C) -> (Te, C, W2): channel-major rows, as icefall flattens (c, f) */
    for (int t = 0; t < Te; t++)
        for (int q = 0; q < W2; q++)
            for (int ch = 0; ch < C; ch++)
                b->a2[((size_t)t * C + ch) * W2 + q] = b->xt[((size_t)t * W2 + q) * C + ch];
    linear_ref(b->y, b->a2, f->out_w, f->out_b, Te, C * W2, d0);
    bias_norm(b->y, Te, d0, d0, f->norm_bias, f->norm_scale);
    for (int t = 0; t < Te; t++)
        memcpy(b->cur + (size_t)t * M, b->y + (size_t)t * d0, sizeof(float) * d0);
}

/* ---- the encoder ---------------------------------------------------------------------------- */

int icefall_zf_encode(icefall_worker_t *w, const float *feats, int t_in, float *enc, int *len_out,
                      icefall_stage_fn stage, void *user, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_config_t *c = &m->cfg;
    const icefall_zipformer_config_t *z = &c->zf;
    if (t_in < 9)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall: %d feature frames: the zipformer needs at least 9", t_in);
    arena_t a = {.base = w->scratch};
    zf_bufs_t b;
    zf_layout(m, t_in, &a, &b);
    const int M = c->d, Te = embed_frames(t_in);
    zf_embed(m, &b, feats, t_in, M);
    if (stage) {
        for (int t = 0; t < Te; t++)
            memcpy(b.y + (size_t)t * z->embed_dim, b.cur + (size_t)t * M,
                   sizeof(float) * z->embed_dim);
        stage(user, "encoder_embed_out", b.y, Te, z->embed_dim);
    }
    int cur_dim = z->embed_dim;
    float *outs = b.outs;
    float *souts[ICEFALL_ZF_MAX_STACKS];
    for (int s = 0; s < z->n_stacks; s++) {
        const icefall_zf_stack_t *S = &m->zf.stacks[s];
        const int D = z->dim[s], ds = z->ds[s], Td = (Te + ds - 1) / ds;
        /* convert_num_channels: truncate, or append zero channels */
        for (int t = 0; t < Te && D > cur_dim; t++)
            memset(b.cur + (size_t)t * M + cur_dim, 0, sizeof(float) * (size_t)(D - cur_dim));
        cur_dim = D;
        /* SimpleDownsample: softmax(bias)-weighted sum of ds frames, the last frame repeated */
        for (int t = 0; t < Td; t++) {
            float *o = b.xs + (size_t)t * D;
            if (ds == 1) {
                memcpy(o, b.cur + (size_t)t * M, sizeof(float) * D);
                continue;
            }
            for (int j = 0; j < D; j++)
                o[j] = 0.0f;
            for (int k = 0; k < ds; k++) {
                int src = t * ds + k < Te ? t * ds + k : Te - 1;
                const float *in = b.cur + (size_t)src * M;
                for (int j = 0; j < D; j++)
                    o[j] += in[j] * S->ds_w[k];
            }
        }
        compact_pos_emb(b.pe, Td, z->pos_dim);
        for (int l = 0; l < z->num_layers[s]; l++)
            zf_layer(&b, z, s, &S->layers[l], b.xs, Td);
        /* SimpleUpsample (each frame repeated ds times, cut to Te) and out_combiner */
        for (int t = 0; t < Te; t++) {
            float *o = b.cur + (size_t)t * M;
            const float *u = b.xs + (size_t)(t / ds) * D;
            if (ds == 1)
                memcpy(o, u, sizeof(float) * D);
            else
                for (int j = 0; j < D; j++)
                    o[j] = o[j] + (u[j] - o[j]) * S->combiner[j];
            memcpy(outs + (size_t)t * D, o, sizeof(float) * D);
        }
        souts[s] = outs;
        if (stage) {
            char name[32];
            snprintf(name, sizeof name, "stack%d_out", s);
            stage(user, name, outs, Te, D);
        }
        outs += (size_t)Te * D;
    }
    /* _get_full_dim_output: the last stack's channels, then each higher channel from the most
     * recent stack that has it */
    int have = z->dim[z->n_stacks - 1];
    for (int t = 0; t < Te; t++)
        memcpy(b.full + (size_t)t * M, souts[z->n_stacks - 1] + (size_t)t * have,
               sizeof(float) * have);
    for (int s = z->n_stacks - 2; s >= 0; s--) {
        const int D = z->dim[s];
        if (D <= have)
            continue;
        for (int t = 0; t < Te; t++)
            memcpy(b.full + (size_t)t * M + have, souts[s] + (size_t)t * D + have,
                   sizeof(float) * (size_t)(D - have));
        have = D;
    }
    /* downsample_output: factor 2, the last frame repeated */
    const int To = (Te + 1) / 2;
    const float *dw = m->zf.out_ds_w;
    for (int t = 0; t < To; t++) {
        const float *x0 = b.full + (size_t)(2 * t) * M;
        const float *x1 = b.full + (size_t)(2 * t + 1 < Te ? 2 * t + 1 : Te - 1) * M;
        float *o = enc + (size_t)t * M;
        for (int j = 0; j < M; j++)
            o[j] = x0[j] * dw[0] + x1[j] * dw[1];
    }
    if (len_out)
        *len_out = To;
    return HARK_OK;
}
