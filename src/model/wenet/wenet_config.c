/* wenet_config.c — reads and validates model.json of a converted WeNet U2/U2++ model; the schema
 * is in docs/model-format.md. Unknown or unsupported fields are refused by name.
 * Tests: tests/model/wenet/test_wenet_config.c */
#include "model/wenet/wenet_config.h"
#include "model/family.h"

#include "core/alloc.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define WENET_FORMAT_VERSION 1

typedef struct {
    const char *path; /* for messages */
    hark_err_t *err;
} ctx_t;

static int bad(ctx_t *c, int status, const char *sec, const char *key, const char *what)
{
    return err_set(c->err, status, "%s: %s%s%s: %s", c->path, sec, *sec ? "." : "", key, what);
}

/* Refuses any field of `obj` not named in `known` (NULL-terminated). */
static int check_known(ctx_t *c, const cJSON *obj, const char *sec, const char *const *known)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, obj)
    {
        int ok = 0;
        for (const char *const *k = known; *k && !ok; k++)
            ok = !strcmp(*k, e->string);
        if (!ok)
            return bad(c, HARK_ERR_UNSUPPORTED, sec, e->string,
                       "unknown field (written by a newer converter?); refusing it rather than "
                       "ignoring something that may change the model");
    }
    return HARK_OK;
}

static const cJSON *field(ctx_t *c, const cJSON *obj, const char *sec, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j)
        bad(c, HARK_ERR_FORMAT, sec, key, "missing");
    return j;
}

static int get_int(ctx_t *c, const cJSON *obj, const char *sec, const char *key, long lo, long hi,
                   int *out)
{
    const cJSON *j = field(c, obj, sec, key);
    if (!j)
        return HARK_ERR_FORMAT;
    char msg[160];
    if (!cJSON_IsNumber(j) || !(j->valuedouble > -1e15 && j->valuedouble < 1e15) ||
        j->valuedouble != (double)(long)j->valuedouble)
        return bad(c, HARK_ERR_FORMAT, sec, key, "must be an integer");
    long v = (long)j->valuedouble;
    if (v < lo || v > hi) {
        snprintf(msg, sizeof msg, "%ld is out of range [%ld, %ld]", v, lo, hi);
        return bad(c, HARK_ERR_INVALID_ARG, sec, key, msg);
    }
    *out = (int)v;
    return HARK_OK;
}

static int get_bool(ctx_t *c, const cJSON *obj, const char *sec, const char *key, int *out)
{
    const cJSON *j = field(c, obj, sec, key);
    if (!j)
        return HARK_ERR_FORMAT;
    if (!cJSON_IsBool(j))
        return bad(c, HARK_ERR_FORMAT, sec, key, "must be true or false");
    *out = cJSON_IsTrue(j);
    return HARK_OK;
}

static int get_float(ctx_t *c, const cJSON *obj, const char *sec, const char *key, double lo,
                     double hi, int hi_open, float *out)
{
    const cJSON *j = field(c, obj, sec, key);
    if (!j)
        return HARK_ERR_FORMAT;
    if (!cJSON_IsNumber(j))
        return bad(c, HARK_ERR_FORMAT, sec, key, "must be a number");
    double v = j->valuedouble;
    if (!(v >= lo && (hi_open ? v < hi : v <= hi))) {
        char msg[160];
        snprintf(msg, sizeof msg, "%g is out of range [%g, %g%s", v, lo, hi, hi_open ? ")" : "]");
        return bad(c, HARK_ERR_INVALID_ARG, sec, key, msg);
    }
    *out = (float)v;
    return HARK_OK;
}

/* A string field whose value must be one of names[i]; stores vals[i]. */
static int get_enum(ctx_t *c, const cJSON *obj, const char *sec, const char *key,
                    const char *const *names, const int *vals, int n, int *out)
{
    const cJSON *j = field(c, obj, sec, key);
    if (!j)
        return HARK_ERR_FORMAT;
    if (!cJSON_IsString(j))
        return bad(c, HARK_ERR_FORMAT, sec, key, "must be a string");
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], j->valuestring)) {
            *out = vals[i];
            return HARK_OK;
        }
    char msg[300];
    int o = snprintf(msg, sizeof msg, "'%.60s' is not supported (hark supports", j->valuestring);
    for (int i = 0; i < n && o > 0 && (size_t)o < sizeof msg; i++)
        o += snprintf(msg + o, sizeof msg - (size_t)o, "%s '%s'", i ? "," : "", names[i]);
    if (o > 0 && (size_t)o < sizeof msg)
        snprintf(msg + o, sizeof msg - (size_t)o, ")");
    return bad(c, HARK_ERR_UNSUPPORTED, sec, key, msg);
}

static const cJSON *section(ctx_t *c, const cJSON *root, const char *name)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!cJSON_IsObject(s)) {
        bad(c, HARK_ERR_FORMAT, "", name, s ? "must be an object" : "missing");
        return NULL;
    }
    return s;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)))                                                                            \
            return rc;                                                                             \
    } while (0)
#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int parse_frontend(ctx_t *c, const cJSON *s, wenet_config_t *cfg)
{
    static const char *const known[] = {"num_mel_bins",   "sample_rate", "frame_length_ms",
                                        "frame_shift_ms", "cmvn",        NULL};
    int rc;
    TRY(check_known(c, s, "frontend", known));
    TRY(get_int(c, s, "frontend", "num_mel_bins", 1, 1024, &cfg->num_mel_bins));
    TRY(get_int(c, s, "frontend", "sample_rate", 1000, 384000, &cfg->sample_rate));
    TRY(get_int(c, s, "frontend", "frame_length_ms", 1, 1000, &cfg->frame_length_ms));
    TRY(get_int(c, s, "frontend", "frame_shift_ms", 1, 1000, &cfg->frame_shift_ms));
    TRY(get_bool(c, s, "frontend", "cmvn", &cfg->has_cmvn));
    return HARK_OK;
}

static int parse_encoder(ctx_t *c, const cJSON *s, wenet_config_t *cfg)
{
    static const char *const known[] = {"type",
                                        "input_dim",
                                        "d_model",
                                        "n_heads",
                                        "ffn_dim",
                                        "n_blocks",
                                        "input_layer",
                                        "pos_enc",
                                        "macaron_style",
                                        "use_cnn_module",
                                        "cnn_module_kernel",
                                        "causal",
                                        "cnn_module_norm",
                                        "activation",
                                        "normalize_before",
                                        "max_len",
                                        "static_chunk_size",
                                        "use_dynamic_chunk",
                                        NULL};
    static const char *const types[] = {"conformer"};
    static const int type_vals[] = {0};
    static const char *const layers[] = {"conv2d", "conv2d6", "conv2d8"};
    static const int layer_vals[] = {SUBSAMPLE_CONV2D, SUBSAMPLE_CONV2D6, SUBSAMPLE_CONV2D8};
    static const char *const poss[] = {"rel_pos", "abs_pos"};
    static const int pos_vals[] = {POS_REL, POS_ABS};
    static const char *const norms[] = {"batch_norm", "layer_norm"};
    static const int norm_vals[] = {CNN_NORM_BATCH, CNN_NORM_LAYER};
    static const char *const acts[] = {"swish", "relu", "gelu"};
    static const int act_vals[] = {ACT_SWISH, ACT_RELU, ACT_GELU};
    const char *S = "encoder";
    int rc, type, v;
    TRY(check_known(c, s, S, known));
    TRY(get_enum(c, s, S, "type", types, type_vals, N(types), &type));
    TRY(get_int(c, s, S, "input_dim", 1, 1024, &cfg->input_dim));
    TRY(get_int(c, s, S, "d_model", 1, 65536, &cfg->d_model));
    TRY(get_int(c, s, S, "n_heads", 1, 1024, &cfg->n_heads));
    TRY(get_int(c, s, S, "ffn_dim", 1, 1 << 20, &cfg->ffn_dim));
    TRY(get_int(c, s, S, "n_blocks", 1, 1000, &cfg->n_blocks));
    TRY(get_enum(c, s, S, "input_layer", layers, layer_vals, N(layers), &v));
    cfg->subsample = (wenet_subsample_t)v;
    TRY(get_enum(c, s, S, "pos_enc", poss, pos_vals, N(poss), &v));
    cfg->pos = (wenet_pos_t)v;
    TRY(get_bool(c, s, S, "macaron_style", &cfg->macaron));
    TRY(get_bool(c, s, S, "use_cnn_module", &cfg->use_cnn_module));
    TRY(get_int(c, s, S, "cnn_module_kernel", 1, 1023, &cfg->cnn_kernel));
    TRY(get_bool(c, s, S, "causal", &cfg->causal));
    TRY(get_enum(c, s, S, "cnn_module_norm", norms, norm_vals, N(norms), &v));
    cfg->cnn_norm = (wenet_cnn_norm_t)v;
    TRY(get_enum(c, s, S, "activation", acts, act_vals, N(acts), &v));
    cfg->activation = (wenet_act_t)v;
    TRY(get_bool(c, s, S, "normalize_before", &cfg->normalize_before));
    TRY(get_int(c, s, S, "max_len", 1, 10000000, &cfg->max_len));
    TRY(get_int(c, s, S, "static_chunk_size", 0, 1 << 20, &cfg->static_chunk_size));
    TRY(get_bool(c, s, S, "use_dynamic_chunk", &cfg->use_dynamic_chunk));
    return HARK_OK;
}

static int parse_decoder(ctx_t *c, const cJSON *s, wenet_config_t *cfg)
{
    static const char *const known[] = {"type",       "n_heads",          "ffn_dim", "n_blocks",
                                        "r_n_blocks", "normalize_before", NULL};
    static const char *const types[] = {"none", "transformer", "bitransformer"};
    static const int type_vals[] = {DECODER_NONE, DECODER_TRANSFORMER, DECODER_BITRANSFORMER};
    const char *S = "decoder";
    int rc, v;
    TRY(check_known(c, s, S, known));
    TRY(get_enum(c, s, S, "type", types, type_vals, N(types), &v));
    cfg->decoder = (wenet_decoder_t)v;
    int none = cfg->decoder == DECODER_NONE;
    TRY(get_int(c, s, S, "n_heads", none ? 0 : 1, 1024, &cfg->dec_heads));
    TRY(get_int(c, s, S, "ffn_dim", none ? 0 : 1, 1 << 20, &cfg->dec_ffn_dim));
    TRY(get_int(c, s, S, "n_blocks", 0, 1000, &cfg->dec_blocks));
    TRY(get_int(c, s, S, "r_n_blocks", 0, 1000, &cfg->dec_r_blocks));
    TRY(get_bool(c, s, S, "normalize_before", &cfg->dec_normalize_before));
    return HARK_OK;
}

static int parse_root(ctx_t *c, const cJSON *root, wenet_config_t *cfg)
{
    static const char *const known[] = {"format_version", "family", "frontend", "encoder",
                                        "decoder",        "vocab",  "decoding", NULL};
    static const char *const fams[] = {"wenet_u2"};
    static const int fam_vals[] = {0};
    int rc, v;
    char msg[200];
    if (!cJSON_IsObject(root))
        return err_set(c->err, HARK_ERR_FORMAT, "%s: not a JSON object", c->path);
    TRY(check_known(c, root, "", known));
    TRY(get_int(c, root, "", "format_version", 1, 1000, &v));
    if (v != WENET_FORMAT_VERSION) {
        snprintf(msg, sizeof msg,
                 "%d is not supported (hark reads version %d; reconvert the model)", v,
                 WENET_FORMAT_VERSION);
        return bad(c, HARK_ERR_UNSUPPORTED, "", "format_version", msg);
    }
    TRY(get_enum(c, root, "", "family", fams, fam_vals, N(fams), &v));

    const cJSON *s;
    if (!(s = section(c, root, "frontend")))
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    TRY(parse_frontend(c, s, cfg));
    if (!(s = section(c, root, "encoder")))
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    TRY(parse_encoder(c, s, cfg));
    if (!(s = section(c, root, "decoder")))
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    TRY(parse_decoder(c, s, cfg));

    if (!(s = section(c, root, "vocab")))
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    static const char *const vknown[] = {"size", "sos", "eos", "blank", NULL};
    TRY(check_known(c, s, "vocab", vknown));
    TRY(get_int(c, s, "vocab", "size", 1, 1 << 24, &cfg->vocab_size));
    TRY(get_int(c, s, "vocab", "sos", 0, cfg->vocab_size - 1, &cfg->sos));
    TRY(get_int(c, s, "vocab", "eos", 0, cfg->vocab_size - 1, &cfg->eos));
    TRY(get_int(c, s, "vocab", "blank", 0, cfg->vocab_size - 1, &cfg->blank));

    if (!(s = section(c, root, "decoding")))
        return c->err ? c->err->status : HARK_ERR_FORMAT;
    static const char *const dknown[] = {"ctc_weight", "reverse_weight", NULL};
    TRY(check_known(c, s, "decoding", dknown));
    TRY(get_float(c, s, "decoding", "ctc_weight", 0.0, 1.0, 0, &cfg->ctc_weight));
    TRY(get_float(c, s, "decoding", "reverse_weight", 0.0, 1.0, 1, &cfg->reverse_weight));
    return HARK_OK;
}

/* Rules that involve more than one field. */
static int cross_check(ctx_t *c, wenet_config_t *cfg)
{
    char msg[200];
    if (cfg->input_dim != cfg->num_mel_bins) {
        snprintf(msg, sizeof msg, "%d differs from frontend.num_mel_bins %d", cfg->input_dim,
                 cfg->num_mel_bins);
        return bad(c, HARK_ERR_INVALID_ARG, "encoder", "input_dim", msg);
    }
    if (cfg->d_model % cfg->n_heads) {
        snprintf(msg, sizeof msg, "%d does not divide encoder.d_model %d", cfg->n_heads,
                 cfg->d_model);
        return bad(c, HARK_ERR_INVALID_ARG, "encoder", "n_heads", msg);
    }
    if (cfg->use_cnn_module && !cfg->causal && cfg->cnn_kernel % 2 == 0) {
        snprintf(msg, sizeof msg, "%d must be odd for a non-causal convolution module",
                 cfg->cnn_kernel);
        return bad(c, HARK_ERR_INVALID_ARG, "encoder", "cnn_module_kernel", msg);
    }
    /* The subsampling output must keep at least one feature column. */
    int f = cfg->input_dim;
    f = cfg->subsample == SUBSAMPLE_CONV2D6   ? ((f - 1) / 2 - 2) / 3
        : cfg->subsample == SUBSAMPLE_CONV2D8 ? (((f - 1) / 2 - 1) / 2 - 1) / 2
                                              : ((f - 1) / 2 - 1) / 2;
    if (f < 1) {
        snprintf(msg, sizeof msg, "%d is too small for input_layer conv2d%s", cfg->input_dim,
                 cfg->subsample == SUBSAMPLE_CONV2D ? ""
                 : cfg->subsample == 6              ? "6"
                                                    : "8");
        return bad(c, HARK_ERR_INVALID_ARG, "encoder", "input_dim", msg);
    }
    if (cfg->decoder == DECODER_NONE) {
        if (cfg->dec_blocks || cfg->dec_r_blocks)
            return bad(c, HARK_ERR_INVALID_ARG, "decoder", "n_blocks",
                       "must be 0 when decoder.type is 'none'");
    } else {
        if (cfg->d_model % cfg->dec_heads) {
            snprintf(msg, sizeof msg, "%d does not divide encoder.d_model %d", cfg->dec_heads,
                     cfg->d_model);
            return bad(c, HARK_ERR_INVALID_ARG, "decoder", "n_heads", msg);
        }
        if (cfg->decoder == DECODER_TRANSFORMER && cfg->dec_r_blocks)
            return bad(c, HARK_ERR_INVALID_ARG, "decoder", "r_n_blocks",
                       "must be 0 for a 'transformer' (left-to-right only) decoder");
    }
    if (cfg->decoder != DECODER_BITRANSFORMER && cfg->reverse_weight != 0.0f)
        return bad(c, HARK_ERR_INVALID_ARG, "decoding", "reverse_weight",
                   "must be 0 without a 'bitransformer' decoder");
    return HARK_OK;
}

/* Resolves a model directory (DIR or DIR/1) or a direct path into the model.json path. */
static void resolve(const char *path, char *out, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        family_version_path(path, 0, "model.json", out, n);
        if (stat(out, &sb) == 0)
            return;
        snprintf(out, n, "%s/model.json", path);
        return;
    }
    snprintf(out, n, "%s", path);
}

int wenet_config_load(const char *path, wenet_config_t *cfg, hark_err_t *err)
{
    char file[4096];
    resolve(path, file, sizeof file);
    ctx_t c = {file, err};
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(file, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open: %s", file, strerror(errno));
    char *buf = NULL;
    cJSON *root = NULL;
    int rc = HARK_OK;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len < 0 || len > (16L << 20) || fseek(f, 0, SEEK_SET) != 0) {
        rc = err_set(err, HARK_ERR_IO, "%s: cannot read (or larger than 16 MiB)", file);
        goto out;
    }
    if (!(buf = hark_malloc((size_t)len + 1))) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", file);
        goto out;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
        rc = err_set(err, HARK_ERR_IO, "%s: short read", file);
        goto out;
    }
    buf[len] = 0;
    if (!(root = cJSON_ParseWithLength(buf, (size_t)len))) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= buf && at <= buf + len ? (long)(at - buf) : 0;
        rc = err_set(err, HARK_ERR_FORMAT, "%s: not valid JSON (near byte %ld)", file, off);
        goto out;
    }
    if ((rc = parse_root(&c, root, cfg)) || (rc = cross_check(&c, cfg)))
        goto out;
out:
    cJSON_Delete(root);
    hark_free(buf);
    fclose(f);
    return rc;
}

int wenet_subsampled_len(const wenet_config_t *cfg, int frames)
{
    /* Python floor division on possibly negative values, then clamp at 0. */
#define FDIV(a, b) ((a) >= 0 ? (a) / (b) : -((-(a) + (b)-1) / (b)))
    long t = FDIV((long)frames - 1, 2);
    switch (cfg->subsample) {
    case SUBSAMPLE_CONV2D6:
        t = FDIV(t - 2, 3);
        break;
    case SUBSAMPLE_CONV2D8:
        t = FDIV(t - 1, 2);
        t = FDIV(t - 1, 2);
        break;
    default:
        t = FDIV(t - 1, 2);
        break;
    }
#undef FDIV
    return t > 0 ? (int)t : 0;
}

int wenet_right_context(const wenet_config_t *cfg)
{
    return cfg->subsample == SUBSAMPLE_CONV2D6 ? 10 : cfg->subsample == SUBSAMPLE_CONV2D8 ? 14 : 6;
}
