/* icefall.c — the pruned_transducer_stateless3 CPU path (icefall.h): model.json and the
 * effective weights (views into the mmap'ed safetensors), icefall's fbank, the Conformer encoder
 * (Conv2dSubsampling, BasicNorm, rel-pos attention with rel_shift, convolution module; sgemm
 * through ops.h) and the stateless decoder / joiner. The searches are in icefall_search.c.
 * Tests: tests/model/icefall/test_icefall.c */
#include "model/icefall/icefall.h"
#include "model/icefall/icefall_impl.h"
#include "model/icefall/icefall_zf_gpu.h"

#include "core/alloc.h"
#include "core/parallel.h"
#include "hark.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ICEFALL_MAX_LAYERS 64

/* ---- model.json ----------------------------------------------------------------------------- */

typedef struct {
    const char *path;
    hark_err_t *err;
} jctx_t;

static const cJSON *get_obj(jctx_t *c, const cJSON *o, const char *key, int *rc)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsObject(v))
        *rc = err_set(c->err, HARK_ERR_FORMAT, "%s: \"%s\" must be an object", c->path, key);
    return v;
}

static int get_int(jctx_t *c, const cJSON *o, const char *sec, const char *key, long lo, long hi,
                   int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v)
        return err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s is missing", c->path, sec, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s must be an integer in [%ld, %ld]",
                       c->path, sec, key, lo, hi);
    *out = (int)v->valuedouble;
    return HARK_OK;
}

static int get_num(jctx_t *c, const cJSON *o, const char *sec, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s must be a number", c->path, sec, key);
    *out = v->valuedouble;
    return HARK_OK;
}

static const char *get_str(jctx_t *c, const cJSON *o, const char *sec, const char *key, int *rc)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) {
        *rc = err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s must be a string", c->path, sec, key);
        return NULL;
    }
    return v->valuestring;
}

int icefall_method_parse(const char *name, icefall_method_t *out)
{
    if (!name)
        return -1;
    if (!strcmp(name, "greedy_search"))
        *out = ICEFALL_GREEDY;
    else if (!strcmp(name, "modified_beam_search"))
        *out = ICEFALL_MODIFIED_BEAM;
    else if (!strcmp(name, "fast_beam_search"))
        *out = ICEFALL_FAST_BEAM;
    else
        return -1;
    return 0;
}

const char *icefall_method_name(icefall_method_t m)
{
    return m == ICEFALL_MODIFIED_BEAM ? "modified_beam_search"
           : m == ICEFALL_FAST_BEAM   ? "fast_beam_search"
                                      : "greedy_search";
}

/* model.json's encoder section of a pruned_transducer_stateless3 model */
static int conformer_config_parse(jctx_t *x, const cJSON *e, icefall_config_t *c)
{
    const char *path = x->path;
    const cJSON *causal = cJSON_GetObjectItemCaseSensitive(e, "causal_convolution");
    if (causal && !cJSON_IsBool(causal))
        return err_set(x->err, HARK_ERR_FORMAT,
                       "%s: encoder.causal_convolution must be true or false", path);
    c->causal = cJSON_IsTrue(causal);
    int rc;
    if ((rc = get_int(x, e, "encoder", "feature_dim", 7, 1024, &c->feature_dim)) ||
        (rc = get_int(x, e, "encoder", "subsampling_factor", 4, 4, &c->subsampling_factor)) ||
        (rc = get_int(x, e, "encoder", "encoder_dim", 1, 8192, &c->d)) ||
        (rc = get_int(x, e, "encoder", "nhead", 1, 256, &c->nhead)) ||
        (rc = get_int(x, e, "encoder", "dim_feedforward", 1, 65536, &c->ff)) ||
        (rc =
             get_int(x, e, "encoder", "num_encoder_layers", 1, ICEFALL_MAX_LAYERS, &c->n_layers)) ||
        (rc = get_int(x, e, "encoder", "cnn_module_kernel", 1, 255, &c->kernel)))
        return rc;
    if (c->d % c->nhead || c->kernel % 2 == 0)
        return err_set(x->err, HARK_ERR_FORMAT,
                       "%s: encoder_dim %d must be a multiple of nhead %d and cnn_module_kernel %d "
                       "odd",
                       path, c->d, c->nhead, c->kernel);
    return HARK_OK;
}

static int config_parse(const char *path, icefall_config_t *c, hark_err_t *err)
{
    cJSON *root = NULL;
    int rc = family_read_model_json(path, &root, err);
    if (rc)
        return rc;
    jctx_t x = {path, err};
    memset(c, 0, sizeof *c);
    const char *recipe = get_str(&x, root, "model", "recipe", &rc);
    if (rc)
        goto done;
    if (!strcmp(recipe, "zipformer")) {
        c->encoder_type = ICEFALL_ZIPFORMER;
    } else if (strcmp(recipe, "pruned_transducer_stateless3")) {
        rc = err_set(err, HARK_ERR_UNSUPPORTED,
                     "%s: recipe \"%.100s\" is not one hark runs (pruned_transducer_stateless3, "
                     "zipformer)",
                     path, recipe);
        goto done;
    }
    const cJSON *e = get_obj(&x, root, "encoder", &rc);
    const cJSON *d = rc ? NULL : get_obj(&x, root, "decoder", &rc);
    const cJSON *j = rc ? NULL : get_obj(&x, root, "joiner", &rc);
    const cJSON *f = rc ? NULL : get_obj(&x, root, "features", &rc);
    const cJSON *dc = rc ? NULL : get_obj(&x, root, "decoding", &rc);
    if (rc)
        goto done;
    const char *etype = get_str(&x, e, "encoder", "type", &rc);
    if (rc)
        goto done;
    const char *want = c->encoder_type == ICEFALL_ZIPFORMER ? "zipformer2" : "conformer";
    if (strcmp(etype, want)) {
        rc = err_set(err, HARK_ERR_UNSUPPORTED, "%s: encoder.type \"%.100s\" is not %s", path,
                     etype, want);
        goto done;
    }
    if (c->encoder_type == ICEFALL_ZIPFORMER) {
        if ((rc = icefall_zf_config_parse(path, e, c, err)))
            goto done;
    } else if ((rc = conformer_config_parse(&x, e, c)))
        goto done;
    c->dec_group_size = c->encoder_type == ICEFALL_ZIPFORMER ? 4 : 1;
    const cJSON *grp = cJSON_GetObjectItemCaseSensitive(d, "conv_group_size");
    if (grp && (!cJSON_IsNumber(grp) || grp->valuedouble != c->dec_group_size)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: decoder.conv_group_size must be %d for this recipe",
                     path, c->dec_group_size);
        goto done;
    }
    if ((rc = get_int(&x, d, "decoder", "decoder_dim", 1, 65536, &c->decoder_dim)) ||
        (rc = get_int(&x, d, "decoder", "context_size", 2, 16, &c->context_size)) ||
        (rc = get_int(&x, d, "decoder", "vocab_size", 2, 1 << 20, &c->vocab)) ||
        (rc = get_int(&x, d, "decoder", "blank_id", 0, 0, &c->blank_id)) ||
        (rc = get_int(&x, j, "joiner", "joiner_dim", 1, 65536, &c->joiner_dim)) ||
        (rc = get_int(&x, f, "features", "sample_rate", 16000, 16000, &c->sample_rate)) ||
        (rc = get_int(&x, dc, "decoding", "beam_size", 1, 64, &c->beam_size)))
        goto done;
    if (c->decoder_dim % c->dec_group_size) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: decoder_dim %d must be a multiple of %d", path,
                     c->decoder_dim, c->dec_group_size);
        goto done;
    }
    int bins = 0, hf = 0;
    double pad = 0;
    const char *ftype = get_str(&x, f, "features", "type", &rc);
    if (rc || (rc = get_int(&x, f, "features", "num_mel_bins", 1, 1024, &bins)) ||
        (rc = get_int(&x, f, "features", "high_freq", -8000, 8000, &hf)) ||
        (rc = get_num(&x, f, "features", "pad_value", &pad)))
        goto done;
    if (strcmp(ftype, "kaldi-fbank") || bins != c->feature_dim || (hf != -400 && hf != 0) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "snip_edges"))) {
        rc = err_set(err, HARK_ERR_UNSUPPORTED,
                     "%s: features must be kaldi-fbank with num_mel_bins = feature_dim (%d), "
                     "snip_edges false and high_freq -400 (icefall) or 0 (sherpa)",
                     path, c->feature_dim);
        goto done;
    }
    c->fbank = hf == -400 ? FBANK_ICEFALL : FBANK_SHERPA;
    c->pad_value = (float)pad;
    const char *meth = get_str(&x, dc, "decoding", "method", &rc);
    if (rc)
        goto done;
    icefall_method_t mt;
    if (icefall_method_parse(meth, &mt)) {
        rc = err_set(err, HARK_ERR_UNSUPPORTED,
                     "%s: decoding.method \"%.100s\" is not greedy_search, "
                     "modified_beam_search or fast_beam_search",
                     path, meth);
        goto done;
    }
    c->method = (int)mt;
    /* fast_beam_search's beam, max_contexts, max_states (older models: pretrained.py's) */
    c->fast_beam = (icefall_fast_beam_opts_t){.beam = 4.0, .max_contexts = 4, .max_states = 8};
    if ((cJSON_GetObjectItemCaseSensitive(dc, "beam") &&
         (rc = get_num(&x, dc, "decoding", "beam", &c->fast_beam.beam))) ||
        (cJSON_GetObjectItemCaseSensitive(dc, "max_contexts") &&
         (rc = get_int(&x, dc, "decoding", "max_contexts", 1, ICEFALL_FAST_BEAM_MAX_ITEMS,
                       &c->fast_beam.max_contexts))) ||
        (cJSON_GetObjectItemCaseSensitive(dc, "max_states") &&
         (rc = get_int(&x, dc, "decoding", "max_states", 1, ICEFALL_FAST_BEAM_MAX_ITEMS,
                       &c->fast_beam.max_states))))
        goto done;
    if (!(c->fast_beam.beam >= 0) || !isfinite(c->fast_beam.beam)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: decoding.beam must be a finite number >= 0", path);
        goto done;
    }
    c->left_chunks = -1;
    if (c->encoder_type == ICEFALL_CONFORMER &&
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(dc, "simulate_streaming"))) {
        int cs = 0, lc = 0;
        if ((rc = get_int(&x, dc, "decoding", "decode_chunk_size", -1, 1 << 20, &cs)) ||
            (rc = get_int(&x, dc, "decoding", "left_context", -1, 1 << 20, &lc)))
            goto done;
        if (cs == 0 || (cs > 0 && lc >= 0 && lc % cs) || !c->causal) {
            rc = err_set(err, HARK_ERR_FORMAT,
                         "%s: simulate_streaming needs causal_convolution, decode_chunk_size >= 1 "
                         "(or < 0) and left_context a multiple of it",
                         path);
            goto done;
        }
        if (cs > 0) { /* icefall: a negative chunk size means full attention */
            c->chunk_size = cs;
            c->left_chunks = lc >= 0 ? lc / cs : -1;
        }
    }
done:
    cJSON_Delete(root);
    return rc;
}

/* ---- weights -------------------------------------------------------------------------------- */

int icefall_weights_get(safetensors_t *st, const float **out, hark_err_t *err, int ndim,
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

/* Chained look-ups: each runs only while rc is still HARK_OK. */
#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define W(ptr, nd, shape, ...)                                                                     \
    (rc = rc ? rc : icefall_weights_get(st, &(ptr), err, nd, shape, __VA_ARGS__))

static int load_weights(icefall_model_t *m, safetensors_t *st, hark_err_t *err)
{
    const icefall_config_t *c = &m->cfg;
    const int64_t d = c->d, ff = c->ff, k = c->kernel, h = c->nhead, D = c->decoder_dim,
                  J = c->joiner_dim, V = c->vocab, cs = c->context_size;
    int rc = HARK_OK;
    const float *eps = NULL;
    if (c->encoder_type == ICEFALL_ZIPFORMER) {
        if ((rc = icefall_zf_load_weights(m, st, err)))
            return rc;
        goto decoder;
    }
    const char *e = "encoder.encoder_embed";
    W(m->conv0_w, 4, SH(8, 1, 3, 3), "%s.conv.0.weight", e);
    W(m->conv0_b, 1, SH(8), "%s.conv.0.bias", e);
    W(m->conv1_w, 4, SH(32, 8, 3, 3), "%s.conv.3.weight", e);
    W(m->conv1_b, 1, SH(32), "%s.conv.3.bias", e);
    W(m->conv2_w, 4, SH(128, 32, 3, 3), "%s.conv.6.weight", e);
    W(m->conv2_b, 1, SH(128), "%s.conv.6.bias", e);
    W(m->embed_w, 2, SH(d, 128 * (int64_t)m->w2), "%s.out.weight", e);
    W(m->embed_b, 1, SH(d), "%s.out.bias", e);
    W(eps, 1, SH(1), "%s.out_norm.eps", e);
    if (rc)
        return rc;
    m->embed_eps = eps[0];
    for (int i = 0; i < c->n_layers; i++) {
        icefall_layer_t *L = &m->layers[i];
        const char *p = "encoder.encoder.layers";
        W(L->ffm_w1, 2, SH(ff, d), "%s.%d.feed_forward_macaron.0.weight", p, i);
        W(L->ffm_b1, 1, SH(ff), "%s.%d.feed_forward_macaron.0.bias", p, i);
        W(L->ffm_w2, 2, SH(d, ff), "%s.%d.feed_forward_macaron.4.weight", p, i);
        W(L->ffm_b2, 1, SH(d), "%s.%d.feed_forward_macaron.4.bias", p, i);
        W(L->in_w, 2, SH(3 * d, d), "%s.%d.self_attn.in_proj.weight", p, i);
        W(L->in_b, 1, SH(3 * d), "%s.%d.self_attn.in_proj.bias", p, i);
        W(L->out_w, 2, SH(d, d), "%s.%d.self_attn.out_proj.weight", p, i);
        W(L->out_b, 1, SH(d), "%s.%d.self_attn.out_proj.bias", p, i);
        W(L->pos_w, 2, SH(d, d), "%s.%d.self_attn.linear_pos.weight", p, i);
        W(L->bu, 2, SH(h, d / h), "%s.%d.self_attn.pos_bias_u", p, i);
        W(L->bv, 2, SH(h, d / h), "%s.%d.self_attn.pos_bias_v", p, i);
        W(L->pw1_w, 3, SH(2 * d, d, 1), "%s.%d.conv_module.pointwise_conv1.weight", p, i);
        W(L->pw1_b, 1, SH(2 * d), "%s.%d.conv_module.pointwise_conv1.bias", p, i);
        W(L->dw_w, 3, SH(d, 1, k), "%s.%d.conv_module.depthwise_conv.weight", p, i);
        W(L->dw_b, 1, SH(d), "%s.%d.conv_module.depthwise_conv.bias", p, i);
        W(L->pw2_w, 3, SH(d, d, 1), "%s.%d.conv_module.pointwise_conv2.weight", p, i);
        W(L->pw2_b, 1, SH(d), "%s.%d.conv_module.pointwise_conv2.bias", p, i);
        W(L->ff_w1, 2, SH(ff, d), "%s.%d.feed_forward.0.weight", p, i);
        W(L->ff_b1, 1, SH(ff), "%s.%d.feed_forward.0.bias", p, i);
        W(L->ff_w2, 2, SH(d, ff), "%s.%d.feed_forward.4.weight", p, i);
        W(L->ff_b2, 1, SH(d), "%s.%d.feed_forward.4.bias", p, i);
        W(eps, 1, SH(1), "%s.%d.norm_final.eps", p, i);
        if (rc)
            return rc;
        L->eps = eps[0];
    }
decoder:
    W(m->dec_emb, 2, SH(V, D), "decoder.embedding.weight");
    W(m->dec_conv, 3, SH(D, c->dec_group_size, cs), "decoder.conv.weight");
    W(m->enc_proj_w, 2, SH(J, d), "joiner.encoder_proj.weight");
    W(m->enc_proj_b, 1, SH(J), "joiner.encoder_proj.bias");
    W(m->dec_proj_w, 2, SH(J, D), "joiner.decoder_proj.weight");
    W(m->dec_proj_b, 1, SH(J), "joiner.decoder_proj.bias");
    W(m->out_w, 2, SH(V, J), "joiner.output_linear.weight");
    W(m->out_b, 1, SH(V), "joiner.output_linear.bias");
    return rc;
}
#undef W
#undef SH

int icefall_load(const char *dir, int version, icefall_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[4200];
    icefall_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    family_version_path(dir, version, "model.json", path, sizeof path);
    int rc = config_parse(path, &m->cfg, err);
    if (rc) {
        hark_free(m);
        return rc;
    }
    const icefall_config_t *c = &m->cfg;
    m->w1 = (c->feature_dim - 3) / 2 + 1;
    m->w2 = (m->w1 - 3) / 2 + 1;
    if (c->encoder_type == ICEFALL_CONFORMER &&
        !(m->layers = hark_calloc((size_t)c->n_layers, sizeof *m->layers))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    if ((rc = st_open(path, &m->st, err)))
        goto fail;
    if ((rc = load_weights(m, m->st, err))) {
        err_prefix(err, rc, "%s", path);
        goto fail;
    }
    family_version_path(dir, version, "tokens.txt", path, sizeof path);
    if ((rc = units_load(path, &m->units, err)) ||
        (rc = units_check_vocab(m->units, c->vocab, err))) {
        err_prefix(err, rc, "%s", path);
        goto fail;
    }
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_FBANK);
    fo.sample_rate = c->sample_rate;
    fo.num_mel_bins = c->feature_dim;
    fo.fbank_variant = c->fbank;
    if ((rc = feat_plan_create(&fo, &m->feat, err)))
        goto fail;
    *out = m;
    return HARK_OK;
fail:
    icefall_destroy(m);
    return rc;
}

void icefall_destroy(icefall_model_t *m)
{
    if (!m)
        return;
    feat_plan_destroy(m->feat);
    units_destroy(m->units);
    st_close(m->st);
    hark_free(m->layers);
    icefall_zf_free(m);
    hark_free(m);
}

const icefall_config_t *icefall_config(const icefall_model_t *m)
{
    return &m->cfg;
}

const units_t *icefall_units(const icefall_model_t *m)
{
    return m->units;
}

const feat_plan_t *icefall_feat_plan(const icefall_model_t *m)
{
    return m->feat;
}

int icefall_frames_out(int t_in)
{
    return t_in < 7 ? 0 : (((t_in - 1) >> 1) - 1) >> 1;
}

int icefall_model_frames_out(const icefall_model_t *m, int t_in)
{
    if (m->cfg.encoder_type == ICEFALL_ZIPFORMER)
        return t_in < 9 ? 0 : ((t_in - 7) / 2 + 1) / 2;
    return icefall_frames_out(t_in);
}

int icefall_min_frames(const icefall_model_t *m)
{
    return m->cfg.encoder_type == ICEFALL_ZIPFORMER ? 9 : 7;
}

int icefall_num_frames(const icefall_model_t *m, size_t n)
{
    return feat_num_frames(m->feat, n);
}

int icefall_frame_ms(const icefall_model_t *m, int t)
{
    return t * m->cfg.subsampling_factor * 10;
}

/* ---- worker --------------------------------------------------------------------------------- */

/* The scratch of an encoder pass over t_in feature frames (floats), and its layout. */
typedef struct {
    size_t xin, a0, a1, a2, col, x, y, h, g, pe, pp, qu, ctx; /* qu: the attention's scratch */
} enc_sizes_t;

static size_t enc_sizes(const icefall_model_t *m, int t_in, enc_sizes_t *s)
{
    const icefall_config_t *c = &m->cfg;
    size_t F = (size_t)c->feature_dim, T = (size_t)t_in, T1 = (size_t)((t_in - 1) / 2);
    size_t Tp = (size_t)icefall_frames_out(t_in), d = (size_t)c->d, dk = d / (size_t)c->nhead;
    size_t P = Tp ? 2 * Tp - 1 : 1;
    size_t hid = (size_t)c->ff > 3 * d ? (size_t)c->ff : 3 * d;
    size_t c0 = conv2d_col_floats(1, 8, 3, 3, (int)F), c1 = conv2d_col_floats(8, 32, 3, 3, m->w1),
           c2 = conv2d_col_floats(32, 128, 3, 3, m->w2);
    s->xin = (T + 2) * (F + 2);
    s->a0 = T * 8 * F;
    s->a1 = T1 * 32 * (size_t)m->w1;
    s->a2 = Tp * 128 * (size_t)m->w2;
    s->col = c0 > c1 ? (c0 > c2 ? c0 : c2) : (c1 > c2 ? c1 : c2);
    s->x = s->y = s->g = s->ctx = Tp * d;
    s->h = Tp * hid;
    s->pe = s->pp = P * d;
    s->qu = rel_attention_scratch_floats((int)Tp, (int)dk);
    return s->xin + s->a0 + s->a1 + s->a2 + s->col + 4 * s->x + s->h + 2 * s->pe + s->qu + 16 * 16;
}

int icefall_worker_create(const icefall_model_t *m, double max_seconds, icefall_worker_t **out,
                          hark_err_t *err)
{
    *out = NULL;
    if (!(max_seconds > 0) || max_seconds > 3600)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: max_seconds %g is out of (0, 3600]",
                       max_seconds);
    icefall_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->m = m;
    w->max_seconds = max_seconds;
    w->max_t_in = icefall_num_frames(m, (size_t)ceil(max_seconds * m->cfg.sample_rate));
    if (w->max_t_in < icefall_min_frames(m))
        w->max_t_in = icefall_min_frames(m);
    enc_sizes_t s;
    size_t n = m->cfg.encoder_type == ICEFALL_ZIPFORMER ? icefall_zf_scratch_floats(m, w->max_t_in)
                                                        : enc_sizes(m, w->max_t_in, &s);
    int tp = icefall_model_frames_out(m, w->max_t_in);
    /* key ranges: the Conformer's per encoder frame, the zipformer's per 50 Hz frame */
    int nlh =
        m->cfg.encoder_type == ICEFALL_ZIPFORMER ? icefall_zf_key_rows(m, w->max_t_in, 1) : tp;
    nlh = nlh > 0 ? nlh : 1;
    w->scratch = hark_malloc(sizeof(float) * n);
    w->n_scratch = n;
    w->lo = hark_malloc(sizeof(int) * (size_t)nlh);
    w->hi = hark_malloc(sizeof(int) * (size_t)nlh);
    w->n_lohi = nlh;
    w->feats = hark_malloc(sizeof(float) * (size_t)w->max_t_in * (size_t)m->cfg.feature_dim);
    w->enc = hark_malloc(sizeof(float) * (size_t)tp * (size_t)m->cfg.d);
    w->max_streams = 1;
    w->b_zs = hark_calloc(1, sizeof *w->b_zs);
    w->b_in = hark_calloc(1, sizeof *w->b_in);
    w->b_out = hark_calloc(1, sizeof *w->b_out);
    w->b_job = hark_calloc(1, sizeof *w->b_job);
    w->b_slot = hark_calloc(1, sizeof *w->b_slot);
    if (!w->scratch || !w->lo || !w->hi || !w->feats || !w->enc || !w->b_zs || !w->b_in ||
        !w->b_out || !w->b_job || !w->b_slot) {
        icefall_worker_destroy(w);
        return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory for %.1f s of scratch",
                       max_seconds);
    }
    *out = w;
    return HARK_OK;
}

void icefall_worker_destroy(icefall_worker_t *w)
{
    if (!w)
        return;
    hark_free(w->scratch);
    hark_free(w->lo);
    hark_free(w->hi);
    hark_free(w->feats);
    hark_free(w->enc);
    hark_free(w->b_zs);
    hark_free(w->b_in);
    hark_free(w->b_out);
    hark_free(w->b_job);
    hark_free(w->b_slot);
    parallel_destroy(w->par);
    hark_free(w);
}

int icefall_worker_reserve_streams(icefall_worker_t *w, int n_streams, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    if (n_streams < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: %d streams: at least 1", n_streams);
    if (!icefall_can_stream(m))
        return err_set(err, HARK_ERR_UNSUPPORTED, "icefall: this model cannot stream");
    if (n_streams <= w->max_streams)
        return HARK_OK;
    /* with the encoder on a GPU the steps need no CPU scratch */
    const size_t n = w->zgpu ? 0 : icefall_zf_stream_scratch_floats(m, n_streams);
    const int nlh = w->zgpu ? 0 : icefall_zf_key_rows(m, w->max_t_in, n_streams);
    float *scratch = n > w->n_scratch ? hark_malloc(sizeof(float) * n) : NULL;
    int *lo = nlh > w->n_lohi ? hark_malloc(sizeof(int) * (size_t)nlh) : NULL;
    int *hi = nlh > w->n_lohi ? hark_malloc(sizeof(int) * (size_t)nlh) : NULL;
    const size_t k = (size_t)n_streams;
    icefall_zf_stream_t **zs = hark_calloc(k, sizeof *zs);
    const float **in = hark_calloc(k, sizeof *in);
    float **out = hark_calloc(k, sizeof *out);
    int *job = hark_calloc(k, sizeof *job), *slot = hark_calloc(k, sizeof *slot);
    if ((n > w->n_scratch && !scratch) || (nlh > w->n_lohi && (!lo || !hi)) || !zs || !in || !out ||
        !job || !slot) {
        hark_free(slot);
        hark_free(scratch);
        hark_free(lo);
        hark_free(hi);
        hark_free(zs);
        hark_free(in);
        hark_free(out);
        hark_free(job);
        return err_set(err, HARK_ERR_NOMEM, "icefall: out of memory for %d streams' scratch",
                       n_streams);
    }
    if (scratch) {
        hark_free(w->scratch);
        w->scratch = scratch;
        w->n_scratch = n;
    }
    if (lo) {
        hark_free(w->lo);
        hark_free(w->hi);
        w->lo = lo;
        w->hi = hi;
        w->n_lohi = nlh;
    }
    hark_free(w->b_zs);
    hark_free(w->b_in);
    hark_free(w->b_out);
    hark_free(w->b_job);
    hark_free(w->b_slot);
    w->b_zs = zs;
    w->b_in = in;
    w->b_out = out;
    w->b_job = job;
    w->b_slot = slot;
    w->max_streams = n_streams;
    return HARK_OK;
}

int icefall_worker_set_stream_threads(icefall_worker_t *w, int threads, hark_err_t *err)
{
    if (threads < 1 || threads > PARALLEL_MAX_THREADS)
        return err_set(err, HARK_ERR_INVALID_ARG, "icefall: %d stream threads (1..%d)", threads,
                       PARALLEL_MAX_THREADS);
    parallel_t *p = NULL;
    int rc = threads > 1 ? parallel_create(threads, &p, err) : HARK_OK;
    if (rc)
        return rc;
    parallel_destroy(w->par);
    w->par = p;
    if (threads > 1)
        ops_set_threads(1);
    return HARK_OK;
}

int icefall_worker_max_frames(const icefall_worker_t *w)
{
    return w->max_t_in;
}

int icefall_worker_use_gpu(icefall_worker_t *w, icefall_zf_gpu_worker_t *gw, hark_err_t *err)
{
    if (gw && w->m->cfg.encoder_type != ICEFALL_ZIPFORMER)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "icefall: only the zipformer's encoder is attached to a GPU this way");
    if (gw &&
        (icefall_zf_gpu_worker_model(gw) != w->m || icefall_zf_gpu_max_frames(gw) < w->max_t_in))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall: the GPU encoder is another model's or takes fewer than the "
                       "worker's %d frames",
                       w->max_t_in);
    w->zgpu = gw;
    return HARK_OK;
}

/* ---- encoder -------------------------------------------------------------------------------- */

/* DoubleSwish(x) = x * sigmoid(x - 1), in place */
static void double_swish(float *x, size_t n)
{
    double_swish_ref(x, x, n);
}

/* BasicNorm: y = x * (mean_c(x^2) + eps)^-0.5 per row, in place */
static void basic_norm(float *x, int n, int d, float eps)
{
    basic_norm_ref(x, x, n, d, eps);
}

/* y (n, d) = W2 DoubleSwish(W1 x + b1) + b2 */
static void feed_forward(float *y, float *h, const float *x, const float *w1, const float *b1,
                         const float *w2, const float *b2, int n, int d, int ff)
{
    linear_ref(h, x, w1, b1, n, d, ff);
    double_swish(h, (size_t)n * ff);
    linear_ref(y, h, w2, b2, n, ff, d);
}

static void add_rows(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* Rel-pos multi-head attention (icefall RelPositionMultiheadAttention) over Tp frames of which
 * len are keys: y (Tp, d) = out_proj(attn); sc: rel_attention_scratch_floats(Tp, d / nhead) */
static void rel_attention(icefall_worker_t *w, const icefall_layer_t *L, float *y, const float *x,
                          const float *pe, int Tp, int len, float *qkv, float *pp, float *sc,
                          float *ctx)
{
    const icefall_config_t *c = &w->m->cfg;
    const int d = c->d, H = c->nhead, dk = d / H, P = 2 * Tp - 1;
    linear_ref(qkv, x, L->in_w, L->in_b, Tp, d, 3 * d);
    linear_ref(pp, pe, L->pos_w, NULL, P, d, d);
    /* keys: the valid frames; with simulated streaming only the query's chunk and left chunks */
    const int cs = c->chunk_size, nlc = c->left_chunks;
    for (int t = 0; t < Tp; t++) {
        int lo = 0, hi = len;
        if (cs > 0) {
            int end = (t / cs + 1) * cs;
            lo = nlc < 0 ? 0 : (t / cs - nlc) * cs;
            lo = lo > 0 ? lo : 0;
            hi = end < len ? end : len;
        }
        w->lo[t] = lo;
        w->hi[t] = hi;
    }
    rel_attention_ref(ctx, d, sc, qkv, 3 * d, pp, d, L->bu, L->bv, w->lo, w->hi, Tp, H, dk,
                      1.0f / sqrtf((float)dk));
    linear_ref(y, ctx, L->out_w, L->out_b, Tp, d, d);
}

/* ConvolutionModule: y = pw2(DoubleSwish(depthwise(GLU(pw1(x)) masked past len))) */
static void conv_module(const icefall_model_t *m, const icefall_layer_t *L, float *y,
                        const float *x, int Tp, int len, float *h, float *g)
{
    const int d = m->cfg.d, k = m->cfg.kernel;
    linear_ref(h, x, L->pw1_w, L->pw1_b, Tp, d, 2 * d);
    glu_ref(g, h, Tp, d);
    /* frames at or past len read as zeros: icefall's masked_fill of the padded frames; a causal
     * conv pads kernel - 1 zero frames on the left only */
    depthwise_conv1d_ref(h, g, NULL, L->dw_w, L->dw_b, Tp, d, k,
                         m->cfg.causal ? k - 1 : (k - 1) / 2, len);
    double_swish(h, (size_t)Tp * d);
    linear_ref(y, h, L->pw2_w, L->pw2_b, Tp, d, d);
}

void icefall_rel_pos_table(float *pe, float *tmp, int tp, int d)
{
    /* RelPositionalEncoding: row r is relative position tp - 1 - r; sin is odd, cos even */
    pos_enc_table_ref(tmp, tp, d); /* positions 0 .. tp-1 */
    for (int r = 0; r < 2 * tp - 1; r++) {
        int pos = tp - 1 - r, ap = pos < 0 ? -pos : pos;
        const float *src = tmp + (size_t)ap * d;
        float *dst = pe + (size_t)r * d;
        for (int j = 0; j < d; j++)
            dst[j] = (pos < 0 && j % 2 == 0) ? -src[j] : src[j];
    }
}

int icefall_encode(icefall_worker_t *w, const float *feats, int t_in, int len_in, float *enc,
                   int *len_out, icefall_stage_fn stage, void *user, hark_err_t *err)
{
    const icefall_model_t *m = w->m;
    const icefall_config_t *c = &m->cfg;
    if (c->encoder_type == ICEFALL_ZIPFORMER) {
        if (t_in != len_in)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "icefall: the zipformer encodes one utterance at its own length (%d "
                           "frames given, %d valid)",
                           t_in, len_in);
        if (t_in > w->max_t_in)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "icefall: %d feature frames exceed the worker's %d (max_seconds %.2f)",
                           t_in, w->max_t_in, w->max_seconds);
        if (w->zgpu && !stage)
            return icefall_zf_gpu_encode(w->zgpu, feats, t_in, enc, len_out, err);
        return icefall_zf_encode(w, feats, t_in, enc, len_out, stage, user, err);
    }
    if (len_in < 7 || t_in < len_in)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "icefall: %d feature frames (%d valid): the encoder needs at least 7", t_in,
                       len_in);
    if (t_in > w->max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "icefall: %d feature frames exceed the worker's %d (max_seconds %.2f)", t_in,
                       w->max_t_in, w->max_seconds);
    const int F = c->feature_dim, d = c->d, T1 = (t_in - 1) / 2, Tp = icefall_frames_out(t_in);
    const int len = icefall_frames_out(len_in), P = 2 * Tp - 1;
    enc_sizes_t s;
    enc_sizes(m, t_in, &s);
    float *p = w->scratch;
    float *xin = p, *a0 = xin + s.xin, *a1 = a0 + s.a0, *a2 = a1 + s.a1, *col = a2 + s.a2;
    float *x = col + s.col, *y = x + s.x, *g = y + s.y, *ctx = g + s.g, *h = ctx + s.ctx;
    float *pe = h + s.h, *pp = pe + s.pe, *qu = pp + s.pp; /* qu: the attention's scratch */

    /* Conv2dSubsampling: conv 1->8 (k3, pad 1), 8->32 (k3, s2), 32->128 (k3, s2), each
     * DoubleSwish; rows are time, each row channel-major (c, freq) */
    memset(xin, 0, sizeof(float) * s.xin);
    for (int t = 0; t < t_in; t++)
        memcpy(xin + (size_t)(t + 1) * (F + 2) + 1, feats + (size_t)t * F, sizeof(float) * F);
    conv2d_ref(a0, col, xin, m->conv0_w, m->conv0_b, 1, t_in + 2, F + 2, 8, 3, 3, 1);
    double_swish(a0, s.a0);
    conv2d_ref(a1, col, a0, m->conv1_w, m->conv1_b, 8, t_in, F, 32, 3, 3, 2);
    double_swish(a1, s.a1);
    conv2d_ref(a2, col, a1, m->conv2_w, m->conv2_b, 32, T1, m->w1, 128, 3, 3, 2);
    double_swish(a2, s.a2);
    if (stage)
        stage(user, "embed_conv_out", a2, Tp, 128 * m->w2);
    linear_ref(x, a2, m->embed_w, m->embed_b, Tp, 128 * m->w2, d);
    if (stage)
        stage(user, "embed_linear_out", x, Tp, d);
    basic_norm(x, Tp, d, m->embed_eps);
    if (stage)
        stage(user, "embed_out", x, Tp, d);

    icefall_rel_pos_table(pe, pp, Tp, d); /* pp: its scratch here, reused below */
    if (stage)
        stage(user, "pos_emb", pe, P, d);

    char name[64];
    const size_t nx = (size_t)Tp * d;
    for (int i = 0; i < c->n_layers; i++) {
        const icefall_layer_t *L = &m->layers[i];
        const icefall_stage_fn st0 = i == 0 ? stage : NULL;
        feed_forward(y, h, x, L->ffm_w1, L->ffm_b1, L->ffm_w2, L->ffm_b2, Tp, d, c->ff);
        if (st0)
            st0(user, "layer0_feed_forward_macaron", y, Tp, d);
        add_rows(x, y, nx);
        rel_attention(w, L, y, x, pe, Tp, len, h, pp, qu, ctx);
        if (st0)
            st0(user, "layer0_self_attn", y, Tp, d);
        add_rows(x, y, nx);
        conv_module(m, L, y, x, Tp, len, h, g);
        if (st0)
            st0(user, "layer0_conv_module", y, Tp, d);
        add_rows(x, y, nx);
        feed_forward(y, h, x, L->ff_w1, L->ff_b1, L->ff_w2, L->ff_b2, Tp, d, c->ff);
        if (st0)
            st0(user, "layer0_feed_forward", y, Tp, d);
        add_rows(x, y, nx);
        basic_norm(x, Tp, d, L->eps);
        if (st0)
            st0(user, "layer0_norm_final", x, Tp, d);
        if (stage) {
            snprintf(name, sizeof name, "layer%d_out", i);
            stage(user, name, x, Tp, d);
        }
    }
    memcpy(enc, x, sizeof(float) * nx);
    if (len_out)
        *len_out = len;
    return HARK_OK;
}

/* ---- decoder and joiner --------------------------------------------------------------------- */

void icefall_encoder_proj(const icefall_model_t *m, const float *enc, int n, float *out)
{
    linear_ref(out, enc, m->enc_proj_w, m->enc_proj_b, n, m->cfg.d, m->cfg.joiner_dim);
}

void icefall_decoder(const icefall_model_t *m, const int *ctx, int n, float *out)
{
    const int D = m->cfg.decoder_dim, cs = m->cfg.context_size, g = m->cfg.dec_group_size;
    for (int r = 0; r < n; r++) {
        float *o = out + (size_t)r * D;
        for (int ch = 0; ch < D; ch++)
            o[ch] = 0.0f;
        for (int k = 0; k < cs; k++) {
            int id = ctx[(size_t)r * cs + k];
            if (id < 0)
                continue; /* -1: a zero embedding */
            const float *e = m->dec_emb + (size_t)id * D;
            /* out[ch] += sum_j W[ch][j][k] e[g (ch / g) + j]: groups of g channels (g 1:
             * depthwise) */
            for (int ch = 0; ch < D; ch++) {
                const float *wc = m->dec_conv + (size_t)ch * g * cs + k;
                const float *ec = e + (ch / g) * g;
                for (int j = 0; j < g; j++)
                    o[ch] += wc[(size_t)j * cs] * ec[j];
            }
        }
        for (int ch = 0; ch < D; ch++)
            o[ch] = o[ch] > 0.0f ? o[ch] : 0.0f;
    }
}

void icefall_decoder_proj(const icefall_model_t *m, const float *dec, int n, float *out)
{
    linear_ref(out, dec, m->dec_proj_w, m->dec_proj_b, n, m->cfg.decoder_dim, m->cfg.joiner_dim);
}

void icefall_joiner(const icefall_model_t *m, const float *ep, const float *dp, int n,
                    float *hidden, float *logits)
{
    const size_t nj = (size_t)n * m->cfg.joiner_dim;
    for (size_t i = 0; i < nj; i++)
        hidden[i] = tanhf(ep[i] + dp[i]);
    linear_ref(logits, hidden, m->out_w, m->out_b, n, m->cfg.joiner_dim, m->cfg.vocab);
}
