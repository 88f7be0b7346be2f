/* jasper.c — the Jasper / QuartzNet CPU path (jasper.h): model.json, weights with batch norm
 * folded into the convs, DLE's padded model input, masked 1-D convs as one sgemm per kernel tap
 * (time-major rows, so a tap is a shifted view of the zero-padded input), depthwise convs, the
 * dense / single-pane residuals, the CTC head and DLE's greedy decoding.
 * Tests: tests/model/jasper/test_jasper.c */
#include "model/jasper/jasper.h"
#include "model/jasper/jasper_impl.h"

#include "core/alloc.h"
#include "model/family.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_EPS 1e-3 /* DLE's BatchNorm1d(eps=1e-3) */

/* ---- model.json ----------------------------------------------------------------------------- */

typedef struct {
    const char *path;
    hark_err_t *err;
} jctx_t;

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

static int get_bool(jctx_t *c, const cJSON *o, const char *sec, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsBool(v))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s must be true or false", c->path, sec,
                       key);
    *out = cJSON_IsTrue(v);
    return HARK_OK;
}

static const char *get_str(jctx_t *c, const cJSON *o, const char *sec, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) {
        err_set(c->err, HARK_ERR_FORMAT, "%s: %s.%s must be a string", c->path, sec, key);
        return NULL;
    }
    return v->valuestring;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int parse_block(jctx_t *c, const cJSON *b, int i, jasper_block_cfg_t *bc)
{
    char sec[48];
    snprintf(sec, sizeof sec, "encoder.blocks[%d]", i);
    if (!cJSON_IsObject(b))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: %s must be an object", c->path, sec);
    TRY(get_int(c, b, sec, "filters", 1, 1 << 16, &bc->filters));
    TRY(get_int(c, b, sec, "repeat", 1, 64, &bc->repeat));
    TRY(get_int(c, b, sec, "kernel", 1, 1023, &bc->kernel));
    TRY(get_int(c, b, sec, "stride", 1, 8, &bc->stride));
    TRY(get_int(c, b, sec, "dilation", 1, 64, &bc->dilation));
    TRY(get_bool(c, b, sec, "separable", &bc->separable));
    TRY(get_bool(c, b, sec, "dense", &bc->dense));
    if (bc->kernel % 2 == 0)
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: %s.kernel %d: only odd kernels", c->path,
                       sec, bc->kernel);
    if (bc->stride > 1 && bc->dilation > 1)
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: %s: stride and dilation both > 1",
                       c->path, sec);
    const cJSON *panes = cJSON_GetObjectItemCaseSensitive(b, "residual_panes");
    if (!cJSON_IsArray(panes) || cJSON_GetArraySize(panes) > JASPER_MAX_PANES)
        return err_set(c->err, HARK_ERR_FORMAT,
                       "%s: %s.residual_panes must be a list of at most %d", c->path, sec,
                       JASPER_MAX_PANES);
    bc->n_panes = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, panes)
    {
        if (!cJSON_IsNumber(p) || p->valuedouble < 1 || p->valuedouble > (1 << 16) ||
            p->valuedouble != floor(p->valuedouble))
            return err_set(c->err, HARK_ERR_FORMAT, "%s: %s.residual_panes: channel counts only",
                           c->path, sec);
        bc->pane_ch[bc->n_panes++] = (int)p->valuedouble;
    }
    if (bc->n_panes && bc->stride != 1)
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: %s: a residual block with stride %d",
                       c->path, sec, bc->stride);
    return HARK_OK;
}

static int parse_root(jctx_t *c, const cJSON *root, jasper_config_t *cfg)
{
    if (!cJSON_IsObject(root))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: not a JSON object", c->path);
    int ver = 0;
    TRY(get_int(c, root, "model", "format_version", 1, 1, &ver));
    const char *arch = get_str(c, root, "model", "arch");
    if (!arch)
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    if (!strcmp(arch, "jasper"))
        cfg->arch = JASPER_ARCH_JASPER;
    else if (!strcmp(arch, "quartznet"))
        cfg->arch = JASPER_ARCH_QUARTZNET;
    else
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: arch \"%.60s\" (jasper or quartznet)",
                       c->path, arch);
    const cJSON *fe = cJSON_GetObjectItemCaseSensitive(root, "features");
    if (!cJSON_IsObject(fe))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: features must be an object", c->path);
    const char *kind = get_str(c, fe, "features", "kind");
    if (!kind)
        return HARK_ERR_FORMAT;
    if (strcmp(kind, "nemo-mel"))
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: features.kind \"%.60s\" (nemo-mel)",
                       c->path, kind);
    TRY(get_int(c, fe, "features", "sample_rate", 8000, 48000, &cfg->sample_rate));
    TRY(get_int(c, fe, "features", "n_filt", 1, 512, &cfg->n_filt));
    TRY(get_int(c, fe, "features", "pad_align", 0, 1024, &cfg->pad_align));
    int n_fft = 0, win = 0, hop = 0;
    TRY(get_int(c, fe, "features", "n_fft", 1, 1 << 16, &n_fft));
    TRY(get_int(c, fe, "features", "win_length", 1, 1 << 16, &win));
    TRY(get_int(c, fe, "features", "hop_length", 1, 1 << 16, &hop));
    /* nemo-mel derives these from the rate: refuse a file that says otherwise */
    int want_win = (int)(cfg->sample_rate * 0.02), want_hop = (int)(cfg->sample_rate * 0.01);
    int want_fft = 1;
    while (want_fft < want_win)
        want_fft <<= 1;
    if (win != want_win || hop != want_hop || n_fft != want_fft)
        return err_set(c->err, HARK_ERR_UNSUPPORTED,
                       "%s: features win_length %d / hop_length %d / n_fft %d: nemo-mel at %d Hz "
                       "uses %d / %d / %d",
                       c->path, win, hop, n_fft, cfg->sample_rate, want_win, want_hop, want_fft);
    TRY(get_int(c, root, "model", "pad_leading", 0, 1024, &cfg->pad_leading));
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(root, "encoder");
    if (!cJSON_IsObject(enc))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: encoder must be an object", c->path);
    TRY(get_int(c, enc, "encoder", "in_feats", 1, 512, &cfg->in_feats));
    if (cfg->in_feats != cfg->n_filt)
        return err_set(c->err, HARK_ERR_FORMAT, "%s: encoder.in_feats %d != features.n_filt %d",
                       c->path, cfg->in_feats, cfg->n_filt);
    const char *act = get_str(c, enc, "encoder", "activation");
    if (!act)
        return HARK_ERR_FORMAT;
    if (!strcmp(act, "relu"))
        cfg->act = JASPER_ACT_RELU;
    else if (!strcmp(act, "hardtanh"))
        cfg->act = JASPER_ACT_HARDTANH;
    else
        return err_set(c->err, HARK_ERR_UNSUPPORTED, "%s: encoder.activation \"%.60s\"", c->path,
                       act);
    TRY(get_bool(c, enc, "encoder", "use_conv_masks", &cfg->conv_masks));
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(enc, "blocks");
    int nb = cJSON_IsArray(blocks) ? cJSON_GetArraySize(blocks) : -1;
    if (nb < 1 || nb > JASPER_MAX_BLOCKS)
        return err_set(c->err, HARK_ERR_FORMAT, "%s: encoder.blocks must be a list of 1..%d",
                       c->path, JASPER_MAX_BLOCKS);
    cfg->n_blocks = nb;
    cfg->stride = 1;
    /* the list each block receives (DLE's xs): channels of its panes */
    int xs[JASPER_MAX_BLOCKS + 1], n_xs = 1, cin = cfg->in_feats;
    xs[0] = cfg->in_feats;
    for (int i = 0; i < nb; i++) {
        jasper_block_cfg_t *bc = &cfg->blocks[i];
        TRY(parse_block(c, cJSON_GetArrayItem(blocks, i), i, bc));
        for (int p = 0; p < bc->n_panes; p++)
            if (p >= n_xs || xs[p] != bc->pane_ch[p])
                return err_set(c->err, HARK_ERR_FORMAT,
                               "%s: encoder.blocks[%d]: residual pane %d has %d channels, the "
                               "block's input list %s",
                               c->path, i, p, bc->pane_ch[p],
                               p >= n_xs ? "is shorter" : "differs there");
        if (bc->dense && !bc->n_panes)
            return err_set(c->err, HARK_ERR_FORMAT, "%s: encoder.blocks[%d]: dense without panes",
                           c->path, i);
        if (bc->dense)
            xs[n_xs++] = bc->filters;
        else
            xs[0] = bc->filters, n_xs = 1;
        cfg->stride *= bc->stride;
        cin = bc->filters;
    }
    (void)cin;
    const cJSON *labels = cJSON_GetObjectItemCaseSensitive(root, "labels");
    int nl = cJSON_IsArray(labels) ? cJSON_GetArraySize(labels) : -1;
    if (nl < 1 || nl > 65535)
        return err_set(c->err, HARK_ERR_FORMAT, "%s: labels must be a non-empty list", c->path);
    int blank = 0;
    TRY(get_int(c, root, "model", "blank", 0, 65535, &blank));
    if (blank != nl)
        return err_set(c->err, HARK_ERR_UNSUPPORTED,
                       "%s: blank %d: hark expects DLE's blank after the %d labels", c->path, blank,
                       nl);
    if (!(cfg->labels = hark_calloc((size_t)nl, sizeof *cfg->labels)))
        return err_set(c->err, HARK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nl; i++) {
        const cJSON *s = cJSON_GetArrayItem(labels, i);
        if (!cJSON_IsString(s))
            return err_set(c->err, HARK_ERR_FORMAT, "%s: labels[%d] must be a string", c->path, i);
        if (!(cfg->labels[i] = hark_strdup(s->valuestring)))
            return err_set(c->err, HARK_ERR_NOMEM, "out of memory");
        cfg->n_labels = i + 1;
    }
    return HARK_OK;
}

int jasper_config_load(const char *path, jasper_config_t *cfg, hark_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = NULL;
    int rc = family_read_model_json(path, &root, err);
    if (rc)
        return rc;
    jctx_t c = {path, err};
    rc = parse_root(&c, root, cfg);
    cJSON_Delete(root);
    if (rc)
        jasper_config_free(cfg);
    return rc;
}

void jasper_config_free(jasper_config_t *cfg)
{
    if (!cfg)
        return;
    for (int i = 0; i < cfg->n_labels; i++)
        hark_free(cfg->labels[i]);
    hark_free(cfg->labels);
    cfg->labels = NULL;
    cfg->n_labels = 0;
}

/* ---- model ---------------------------------------------------------------------------------- */

const jasper_config_t *jasper_config(const jasper_model_t *m)
{
    return &m->cfg;
}

int jasper_vocab(const jasper_model_t *m)
{
    return m->vocab;
}

static int finite_tensor(const char *name, const float *x, size_t n, hark_err_t *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_set(err, HARK_ERR_FORMAT, "tensor %s: element %zu is not finite", name, i);
    return HARK_OK;
}

/* batch norm `prefix` -> scale, shift (cout) */
static int load_bn(jasper_tensor_fn get, void *st, const char *prefix, int c, double *scale,
                   double *shift, hark_err_t *err)
{
    static const char *const nm[4] = {"weight", "bias", "running_mean", "running_var"};
    const float *t[4];
    int64_t shape[1] = {c};
    char name[160];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, nm[i]);
        TRY(get(st, name, 1, shape, &t[i], err));
        TRY(finite_tensor(name, t[i], (size_t)c, err));
    }
    for (int o = 0; o < c; o++) {
        if (t[3][o] < 0)
            return err_set(err, HARK_ERR_FORMAT, "tensor %s.running_var: element %d is negative",
                           prefix, o);
        /* eval BatchNorm1d: (x - mean) / sqrt(var + eps) * gamma + beta */
        scale[o] = (double)t[0][o] / sqrt((double)t[3][o] + BN_EPS);
        shift[o] = (double)t[1][o] - (double)t[2][o] * scale[o];
    }
    return HARK_OK;
}

/* conv weight `name` (cout, cin, k) with batch norm `bn` folded -> c->w (k, cout, cin), c->b */
static int load_conv(jasper_tensor_fn get, void *st, const char *name, const char *bn, jconv_t *c,
                     double *scale, double *shift, hark_err_t *err)
{
    const float *w;
    int64_t shape[3] = {c->cout, c->cin, c->kw};
    TRY(get(st, name, 3, shape, &w, err));
    TRY(finite_tensor(name, w, (size_t)c->cout * c->cin * c->kw, err));
    TRY(load_bn(get, st, bn, c->cout, scale, shift, err));
    for (int o = 0; o < c->cout; o++) {
        c->b[o] = (float)shift[o];
        for (int i = 0; i < c->cin; i++)
            for (int j = 0; j < c->kw; j++)
                c->w[((size_t)j * c->cout + o) * c->cin + i] =
                    (float)((double)w[((size_t)o * c->cin + i) * c->kw + j] * scale[o]);
    }
    return HARK_OK;
}

static int load_weights(jasper_model_t *m, jasper_tensor_fn get, void *st, hark_err_t *err)
{
    const jasper_config_t *cfg = &m->cfg;
    const char *mod = cfg->arch == JASPER_ARCH_JASPER ? "conv" : "mconv";
    /* sizes first: one block for every folded weight */
    size_t n_convs = 0, n_floats = 0;
    int cin = cfg->in_feats, cmax = cfg->in_feats;
    for (int l = 0; l < cfg->n_blocks; l++) {
        const jasper_block_cfg_t *b = &cfg->blocks[l];
        for (int r = 0; r < b->repeat; r++) {
            int ci = r ? b->filters : cin;
            n_convs++;
            n_floats += (size_t)b->filters * ci * (b->separable ? 1 : b->kernel) + b->filters;
            if (b->separable)
                n_floats += (size_t)ci * b->kernel;
        }
        for (int p = 0; p < b->n_panes; p++) {
            n_convs++;
            n_floats += (size_t)b->filters * b->pane_ch[p] + b->filters;
        }
        cin = b->filters;
        if (cin > cmax)
            cmax = cin;
    }
    m->enc_dim = cin;
    m->convs = hark_calloc(n_convs, sizeof *m->convs);
    m->wmem = hark_malloc(sizeof(float) * n_floats);
    double *scale = hark_malloc(sizeof(double) * (size_t)cmax);
    double *shift = hark_malloc(sizeof(double) * (size_t)cmax);
    int rc = HARK_OK;
    if (!m->convs || !m->wmem || !scale || !shift) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for the weights");
        goto done;
    }
    float *wp = m->wmem;
    jconv_t *cp = m->convs;
    cin = cfg->in_feats;
    char name[160], bn[160];
    for (int l = 0; l < cfg->n_blocks && !rc; l++) {
        const jasper_block_cfg_t *b = &cfg->blocks[l];
        jlayer_t *L = &m->layers[l];
        L->sub = cp;
        int step = b->separable ? 5 : 4;
        for (int r = 0; r < b->repeat && !rc; r++, cp++) {
            jconv_t *c = cp;
            c->cin = r ? b->filters : cin;
            c->cout = b->filters;
            c->k = b->kernel;
            c->stride = b->stride;
            c->dil = b->dilation;
            c->pad = (b->kernel / 2) * b->dilation;
            c->kw = b->separable ? 1 : b->kernel;
            if (b->separable) {
                c->dw = wp;
                wp += (size_t)c->cin * c->k;
                const float *dw;
                int64_t shape[3] = {c->cin, 1, c->k};
                snprintf(name, sizeof name, "encoder.layers.%d.%s.%d.weight", l, mod, step * r);
                if ((rc = get(st, name, 3, shape, &dw, err)) ||
                    (rc = finite_tensor(name, dw, (size_t)c->cin * c->k, err)))
                    break;
                for (int i = 0; i < c->cin; i++)
                    for (int j = 0; j < c->k; j++)
                        c->dw[(size_t)j * c->cin + i] = dw[(size_t)i * c->k + j];
            }
            c->w = wp;
            wp += (size_t)c->cout * c->cin * c->kw;
            c->b = wp;
            wp += c->cout;
            int wi = step * r + (b->separable ? 1 : 0);
            snprintf(name, sizeof name, "encoder.layers.%d.%s.%d.weight", l, mod, wi);
            snprintf(bn, sizeof bn, "encoder.layers.%d.%s.%d", l, mod, wi + 1);
            rc = load_conv(get, st, name, bn, c, scale, shift, err);
        }
        L->res = cp;
        for (int p = 0; p < b->n_panes && !rc; p++, cp++) {
            jconv_t *c = cp;
            *c = (jconv_t){.cin = b->pane_ch[p],
                           .cout = b->filters,
                           .k = 1,
                           .stride = 1,
                           .dil = 1,
                           .pad = 0,
                           .kw = 1};
            c->w = wp;
            wp += (size_t)c->cout * c->cin;
            c->b = wp;
            wp += c->cout;
            snprintf(name, sizeof name, "encoder.layers.%d.res.%d.0.weight", l, p);
            snprintf(bn, sizeof bn, "encoder.layers.%d.res.%d.1", l, p);
            rc = load_conv(get, st, name, bn, c, scale, shift, err);
        }
        cin = b->filters;
    }
    if (!rc) {
        const float *dw, *db;
        int64_t ws[3] = {m->vocab, m->enc_dim, 1}, bs[1] = {m->vocab};
        if (!(rc = get(st, "decoder.layers.0.weight", 3, ws, &dw, err)) &&
            !(rc = get(st, "decoder.layers.0.bias", 1, bs, &db, err)) &&
            !(rc = finite_tensor("decoder.layers.0.weight", dw, (size_t)m->vocab * m->enc_dim,
                                 err)) &&
            !(rc = finite_tensor("decoder.layers.0.bias", db, (size_t)m->vocab, err))) {
            float *d = hark_malloc(sizeof(float) * ((size_t)m->vocab * m->enc_dim + m->vocab));
            if (!d) {
                rc = err_set(err, HARK_ERR_NOMEM, "out of memory for the weights");
            } else {
                memcpy(d, dw, sizeof(float) * (size_t)m->vocab * m->enc_dim);
                memcpy(d + (size_t)m->vocab * m->enc_dim, db, sizeof(float) * (size_t)m->vocab);
                m->dec_w = d;
                m->dec_b = d + (size_t)m->vocab * m->enc_dim;
            }
        }
    }
done:
    hark_free(scale);
    hark_free(shift);
    return rc;
}

int jasper_load(const char *dir, int version, jasper_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[4200];
    jasper_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    family_version_path(dir, version, "model.json", path, sizeof path);
    int rc = jasper_config_load(path, &m->cfg, err);
    if (rc) {
        hark_free(m);
        return rc;
    }
    m->vocab = m->cfg.n_labels + 1;
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_NEMO_MEL);
    fo.sample_rate = m->cfg.sample_rate;
    fo.num_mel_bins = m->cfg.n_filt;
    safetensors_t *st = NULL;
    if (!(rc = feat_plan_create(&fo, &m->feat, err))) {
        family_version_path(dir, version, "model.safetensors", path, sizeof path);
        if (!(rc = st_open(path, &st, err)))
            rc = load_weights(m, st_get_f32, st, err);
        if (rc && st)
            err_prefix(err, rc, "%s", path);
    }
    st_close(st); /* the folded weights are copies */
    if (rc) {
        jasper_destroy(m);
        return rc;
    }
    *out = m;
    return HARK_OK;
}

int jasper_create(const jasper_config_t *cfg, jasper_tensor_fn get, void *user,
                  jasper_model_t **out, hark_err_t *err)
{
    *out = NULL;
    if (cfg->n_blocks < 1 || cfg->n_blocks > JASPER_MAX_BLOCKS || cfg->n_labels < 1 ||
        !cfg->labels || cfg->in_feats != cfg->n_filt)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "jasper: a config of %d blocks, %d labels, in_feats %d, n_filt %d",
                       cfg->n_blocks, cfg->n_labels, cfg->in_feats, cfg->n_filt);
    jasper_model_t *m = hark_calloc(1, sizeof *m);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    m->cfg = *cfg;
    m->cfg.labels = hark_calloc((size_t)cfg->n_labels, sizeof *m->cfg.labels);
    int rc = m->cfg.labels ? HARK_OK : HARK_ERR_NOMEM;
    for (int i = 0; i < cfg->n_labels && !rc; i++)
        if (!(m->cfg.labels[i] = hark_strdup(cfg->labels[i])))
            rc = HARK_ERR_NOMEM;
    if (rc) {
        if (!m->cfg.labels)
            m->cfg.n_labels = 0;
        jasper_destroy(m);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    m->cfg.stride = 1;
    for (int l = 0; l < cfg->n_blocks; l++) /* as jasper_config_load counts it */
        m->cfg.stride *= cfg->blocks[l].stride;
    m->vocab = m->cfg.n_labels + 1;
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_NEMO_MEL);
    fo.sample_rate = m->cfg.sample_rate;
    fo.num_mel_bins = m->cfg.n_filt;
    if (!(rc = feat_plan_create(&fo, &m->feat, err)))
        rc = load_weights(m, get, user, err);
    if (rc) {
        jasper_destroy(m);
        return rc;
    }
    *out = m;
    return HARK_OK;
}

void jasper_destroy(jasper_model_t *m)
{
    if (!m)
        return;
    feat_plan_destroy(m->feat);
    hark_free(m->convs);
    hark_free(m->wmem);
    hark_free((void *)m->dec_w);
    jasper_config_free(&m->cfg);
    hark_free(m);
}

/* ---- sizes ---------------------------------------------------------------------------------- */

static int conv_len(int len, int k, int stride, int dil)
{
    int pad = (k / 2) * dil;
    return (len + 2 * pad - dil * (k - 1) - 1) / stride + 1; /* non-negative: floor */
}

int jasper_frames_in(const jasper_model_t *m, size_t n_sig)
{
    const feat_plan_t *p = m->feat;
    size_t t = 1 + n_sig / (size_t)p->hop; /* torch.stft, center=True */
    size_t a = (size_t)m->cfg.pad_align;
    if (a > 0 && t % a)
        t += a - t % a;
    t += (size_t)m->cfg.pad_leading;
    return t > (size_t)1 << 30 ? 1 << 30 : (int)t;
}

int jasper_frames_out(const jasper_model_t *m, int t_in)
{
    for (int l = 0; l < m->cfg.n_blocks; l++) {
        const jasper_block_cfg_t *b = &m->cfg.blocks[l];
        for (int r = 0; r < b->repeat; r++)
            t_in = conv_len(t_in, b->kernel, b->stride, b->dilation);
    }
    return t_in;
}

int jasper_len_out(const jasper_model_t *m, int len_in)
{
    return jasper_frames_out(m, len_in);
}

size_t jasper_min_samples(const jasper_model_t *m)
{
    return (size_t)m->feat->n_fft / 2 + 1;
}

int jasper_frame_ms(const jasper_model_t *m, int t)
{
    const feat_plan_t *p = m->feat;
    long f = (long)t * m->cfg.stride - m->cfg.pad_leading;
    if (f < 0)
        f = 0;
    return (int)(f * p->hop * 1000L / m->cfg.sample_rate);
}

/* ---- workers -------------------------------------------------------------------------------- */

struct jasper_worker {
    const jasper_model_t *m;
    int max_t_in;
    float **outs;  /* (n_blocks) each block's output (T_l, filters_l) */
    float *tmp[2]; /* inside a block */
    float *pad;    /* a conv's zero-padded, masked input */
    float *dwbuf;  /* a depthwise conv's output */
    float *feats;  /* (max_t_in, n_filt) */
    float *logp;   /* (max_t_out, vocab) */
    void *mem;
};

void jasper_worker_destroy(jasper_worker_t *w)
{
    if (!w)
        return;
    hark_free(w->mem);
    hark_free(w->outs);
    hark_free(w);
}

int jasper_worker_create(const jasper_model_t *m, double max_seconds, jasper_worker_t **out,
                         hark_err_t *err)
{
    *out = NULL;
    if (!(max_seconds > 0) || max_seconds > 24 * 3600)
        return err_set(err, HARK_ERR_INVALID_ARG, "max_seconds %g is out of range", max_seconds);
    const jasper_config_t *cfg = &m->cfg;
    size_t max_n = (size_t)ceil(max_seconds * cfg->sample_rate);
    int t_in = jasper_frames_in(m, max_n);
    /* floats of each buffer, for the largest input */
    size_t n_out = 0, n_tmp = 0, n_pad = 0, n_dw = 0;
    int t = t_in, cin = cfg->in_feats;
    size_t *off = hark_calloc((size_t)cfg->n_blocks, sizeof *off);
    if (!off)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int l = 0; l < cfg->n_blocks; l++) {
        const jasper_block_cfg_t *b = &cfg->blocks[l];
        int tl = t;
        for (int r = 0; r < b->repeat; r++) {
            int ci = r ? b->filters : cin;
            size_t padded = (size_t)(tl + 2 * (b->kernel / 2) * b->dilation) * ci;
            if (padded > n_pad)
                n_pad = padded;
            tl = conv_len(tl, b->kernel, b->stride, b->dilation);
            if ((size_t)tl * ci > n_dw)
                n_dw = (size_t)tl * ci;
            if ((size_t)tl * b->filters > n_tmp)
                n_tmp = (size_t)tl * b->filters;
        }
        for (int p = 0; p < b->n_panes; p++) /* a pane's masked copy */
            if ((size_t)t * b->pane_ch[p] > n_pad)
                n_pad = (size_t)t * b->pane_ch[p];
        off[l] = n_out;
        n_out += (size_t)tl * b->filters;
        t = tl;
        cin = b->filters;
    }
    size_t n_feats = (size_t)t_in * cfg->n_filt, n_logp = (size_t)t * m->vocab;
    size_t total = n_out + 2 * n_tmp + n_pad + n_dw + n_feats + n_logp;
    jasper_worker_t *w = hark_calloc(1, sizeof *w);
    if (w) {
        w->outs = hark_calloc((size_t)cfg->n_blocks, sizeof *w->outs);
        w->mem = hark_malloc(sizeof(float) * total);
    }
    if (!w || !w->outs || !w->mem) {
        hark_free(off);
        jasper_worker_destroy(w);
        return err_set(err, HARK_ERR_NOMEM, "out of memory for a worker of %.1f s (%zu MB)",
                       max_seconds, total * sizeof(float) >> 20);
    }
    float *p = w->mem;
    for (int l = 0; l < cfg->n_blocks; l++)
        w->outs[l] = p + off[l];
    p += n_out;
    w->tmp[0] = p, p += n_tmp;
    w->tmp[1] = p, p += n_tmp;
    w->pad = p, p += n_pad;
    w->dwbuf = p, p += n_dw;
    w->feats = p, p += n_feats;
    w->logp = p;
    hark_free(off);
    w->m = m;
    w->max_t_in = t_in;
    *out = w;
    return HARK_OK;
}

/* ---- front end ------------------------------------------------------------------------------ */

int jasper_features(const jasper_model_t *m, const float *x, size_t n_sig, size_t n_valid,
                    float *feats, int *t_in, int *len_in, hark_err_t *err)
{
    size_t min = jasper_min_samples(m);
    if (n_valid == 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "empty audio");
    if (n_valid < min || n_sig < n_valid)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "audio of %zu samples is too short: the STFT needs at least %zu (%.1f ms)",
                       n_valid, min, 1000.0 * (double)min / m->cfg.sample_rate);
    const int F = m->cfg.n_filt, T = jasper_frames_in(m, n_sig), P = m->cfg.pad_leading;
    int L = feat_num_frames(m->feat, n_valid);
    memset(feats, 0, sizeof(float) * (size_t)T * F);
    int rc = feat_compute_padded(m->feat, x, n_sig, n_valid, feats + (size_t)P * F, err);
    if (rc)
        return rc;
    *t_in = T;
    *len_in = L + P;
    return HARK_OK;
}

/* ---- encoder -------------------------------------------------------------------------------- */

static void activate(float *x, size_t n, jasper_act_t act)
{
    if (act == JASPER_ACT_RELU) {
        relu_ref(x, x, n);
    } else {
        for (size_t i = 0; i < n; i++) /* nn.Hardtanh(): clamp to [-1, 1] */
            x[i] = x[i] < -1.0f ? -1.0f : x[i] > 1.0f ? 1.0f : x[i];
    }
}

/* The input rows [0, t) of x (t, c) into pad (t + 2 pad, c): zero padding at both ends, rows at
 * or past `valid` zeroed (the masked conv). Returns pad. */
static const float *padded_input(float *pad, const float *x, int t, int c, int p, int valid)
{
    int v = valid < t ? valid : t;
    memset(pad, 0, sizeof(float) * (size_t)p * c);
    memcpy(pad + (size_t)p * c, x, sizeof(float) * (size_t)v * c);
    memset(pad + (size_t)(p + v) * c, 0, sizeof(float) * (size_t)(t - v + p) * c);
    return pad;
}

/* out (t_out, cout) (+)= conv(x (t, cin), masked at `valid`); accumulate: add to out. */
static int conv_apply(jasper_worker_t *w, float *out, const float *x, int t, int valid,
                      const jconv_t *c, int accumulate)
{
    int t_out = conv_len(t, c->k, c->stride, c->dil);
    const float *src = x;
    int cin = c->cin;
    if (c->dw) { /* depthwise (k taps, stride, dilation) into dwbuf, then the pointwise GEMM */
        const float *in = padded_input(w->pad, x, t, cin, c->pad, valid);
        float *d = w->dwbuf;
        for (int s = 0; s < t_out; s++) {
            float *o = d + (size_t)s * cin;
            memset(o, 0, sizeof(float) * (size_t)cin);
            for (int j = 0; j < c->k; j++) {
                const float *r = in + ((size_t)s * c->stride + (size_t)j * c->dil) * cin;
                const float *tap = c->dw + (size_t)j * cin;
                for (int i = 0; i < cin; i++)
                    o[i] += tap[i] * r[i];
            }
        }
        /* the pointwise conv is masked too, with the length after the depthwise conv */
        int v2 = w->m->cfg.conv_masks ? conv_len(valid, c->k, c->stride, c->dil) : t_out;
        if (v2 < t_out)
            memset(d + (size_t)v2 * cin, 0, sizeof(float) * (size_t)(t_out - v2) * cin);
        src = d;
    } else if (c->pad > 0 || valid < t || c->stride > 1) {
        src = padded_input(w->pad, x, t, cin, c->pad, valid);
    }
    for (int s = 0; s < t_out; s++) {
        float *o = out + (size_t)s * c->cout;
        if (accumulate)
            for (int i = 0; i < c->cout; i++)
                o[i] += c->b[i];
        else
            memcpy(o, c->b, sizeof(float) * (size_t)c->cout);
    }
    /* tap j reads rows s * stride + j * dil of the padded input: a strided view (lda) */
    int step = c->dw ? 1 : c->stride;
    for (int j = 0; j < c->kw; j++)
        matmul_ref(out, src + (size_t)j * c->dil * cin, c->w + (size_t)j * c->cout * cin, t_out,
                   c->cout, cin, step * cin, cin, c->cout, 1, 1.0f, 1.0f);
    return t_out;
}

int jasper_forward(jasper_worker_t *w, const float *feats, int t_in, int len_in, float *logp,
                   int *len_out, jasper_stage_fn stage, void *user, hark_err_t *err)
{
    const jasper_model_t *m = w->m;
    const jasper_config_t *cfg = &m->cfg;
    if (t_in < 1 || t_in > w->max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE, "%d input frames: the worker holds %d", t_in,
                       w->max_t_in);
    if (len_in < 1 || len_in > t_in)
        return err_set(err, HARK_ERR_INVALID_ARG, "valid length %d of %d frames", len_in, t_in);
    if (stage)
        stage(user, "model_input", feats, t_in, cfg->n_filt);
    const int masks = cfg->conv_masks;
    /* the list each block receives: pointers, frames, valid length, channels */
    const float *xs[JASPER_MAX_BLOCKS + 1];
    int n_xs = 1, t = t_in, len = len_in;
    xs[0] = feats;
    for (int l = 0; l < cfg->n_blocks; l++) {
        const jasper_block_cfg_t *b = &cfg->blocks[l];
        const jlayer_t *L = &m->layers[l];
        const float *x = xs[n_xs - 1];
        int tc = t, lc = len;
        for (int r = 0; r < b->repeat; r++) {
            float *dst = r == b->repeat - 1 ? w->outs[l] : w->tmp[r % 2];
            const jconv_t *c = &L->sub[r];
            int tn = conv_apply(w, dst, x, tc, masks ? lc : tc, c, 0);
            lc = conv_len(lc, c->k, c->stride, c->dil);
            tc = tn;
            if (r < b->repeat - 1)
                activate(dst, (size_t)tc * b->filters, cfg->act);
            x = dst;
        }
        for (int p = 0; p < b->n_panes; p++) /* masked with the block's input length */
            conv_apply(w, w->outs[l], xs[p], t, masks ? len : t, &L->res[p], 1);
        activate(w->outs[l], (size_t)tc * b->filters, cfg->act);
        if (stage) {
            char name[32];
            snprintf(name, sizeof name, "block%02d_out", l);
            stage(user, name, w->outs[l], tc, b->filters);
        }
        if (b->dense)
            xs[n_xs++] = w->outs[l];
        else
            xs[0] = w->outs[l], n_xs = 1;
        t = tc;
        len = lc;
    }
    /* CTC head: a plain (unmasked) 1x1 conv with bias, then log_softmax over the vocabulary */
    linear_ref(logp, xs[n_xs - 1], m->dec_w, m->dec_b, t, m->enc_dim, m->vocab);
    if (stage)
        stage(user, "logits", logp, t, m->vocab);
    log_softmax_ref(logp, logp, t, m->vocab);
    if (stage)
        stage(user, "log_probs", logp, t, m->vocab);
    *len_out = len;
    return HARK_OK;
}

/* ---- one utterance -------------------------------------------------------------------------- */

void jasper_result_free(jasper_result_t *r)
{
    if (!r)
        return;
    hark_free(r->frame_ids);
    hark_free(r->tokens);
    hark_free(r->times);
    hark_free(r->text);
    memset(r, 0, sizeof *r);
}

int jasper_run(jasper_worker_t *w, const float *x, size_t n, const jasper_run_opts_t *o,
               jasper_result_t *res, hark_err_t *err)
{
    const jasper_model_t *m = w->m;
    memset(res, 0, sizeof *res);
    if (n == 0)
        return err_set(err, HARK_ERR_INVALID_ARG, "empty audio");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "sample %zu of the audio is %s", i,
                           isnan(x[i]) ? "NaN" : "infinite");
    int t_in = jasper_frames_in(m, n);
    if (t_in > w->max_t_in)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "audio of %.2f s is longer than the worker's maximum (%d frames)",
                       (double)n / m->cfg.sample_rate, w->max_t_in);
    int len_in = 0, len_out = 0;
    int rc = jasper_features(m, x, n, n, w->feats, &t_in, &len_in, err);
    if (!rc)
        rc = jasper_forward(w, w->feats, t_in, len_in, w->logp, &len_out, o ? o->stage : NULL,
                            o ? o->stage_user : NULL, err);
    if (rc)
        return rc;
    const int V = m->vocab;
    const int T = jasper_frames_out(m, t_in);
    int *ids = hark_malloc(sizeof(int) * (size_t)(T ? T : 1));
    float *best = hark_malloc(sizeof(float) * (size_t)(T ? T : 1));
    if (!ids || !best) {
        hark_free(ids);
        hark_free(best);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    for (int s = 0; s < T; s++) { /* argmax per frame, the first index on ties */
        const float *row = w->logp + (size_t)s * V;
        int b = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[b])
                b = v;
        ids[s] = b;
        best[s] = row[b];
    }
    rc = jasper_decode(m, ids, best, T, len_out, o && o->valid_frames_only, res, err);
    hark_free(ids);
    hark_free(best);
    return rc;
}

int jasper_decode(const jasper_model_t *m, const int *ids, const float *best, int T, int len_out,
                  int valid_frames_only, jasper_result_t *res, hark_err_t *err)
{
    const int blank = m->cfg.n_labels;
    const int n_dec = valid_frames_only ? (len_out < T ? len_out : T) : T;
    memset(res, 0, sizeof *res);
    res->n_frames = T;
    res->len_out = len_out;
    res->frame_ids = hark_malloc(sizeof(int) * (size_t)(T ? T : 1));
    res->tokens = hark_malloc(sizeof(int) * (size_t)(n_dec ? n_dec : 1));
    res->times = hark_malloc(sizeof(int) * (size_t)(n_dec ? n_dec : 1));
    if (!res->frame_ids || !res->tokens || !res->times) {
        jasper_result_free(res);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    /* DLE's collapse: emit a label when it is not the blank and differs from the previous
     * frame's id, or that id was the blank */
    size_t text_len = 0;
    int prev = blank;
    for (int s = 0; s < T; s++) {
        int id = ids[s];
        res->frame_ids[s] = id;
        if (s >= n_dec)
            continue;
        res->score += best[s];
        if (id != blank && (id != prev || prev == blank)) {
            res->tokens[res->n_tokens] = id;
            res->times[res->n_tokens++] = s;
            text_len += strlen(m->cfg.labels[id]);
        }
        prev = id;
    }
    if (!(res->text = hark_malloc(text_len + 1))) {
        jasper_result_free(res);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    size_t pos = 0;
    for (int i = 0; i < res->n_tokens; i++) {
        size_t k = strlen(m->cfg.labels[res->tokens[i]]);
        memcpy(res->text + pos, m->cfg.labels[res->tokens[i]], k);
        pos += k;
    }
    res->text[pos] = 0;
    return HARK_OK;
}
