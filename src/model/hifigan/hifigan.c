/* hifigan.c — the HiFi-GAN generator on the CPU (hifigan.h): model.json, weights re-laid out per
 * kernel tap, Conv1d as one sgemm per tap over a zero-padded channel-major buffer (the leaky
 * ReLU fused into the padding copy), ConvTranspose1d as one sgemm and an overlap-add, the MRF
 * mean over resblocks, and the vocoder's own log-mel through dsp/features (tts-mel, hifigan).
 * Tests: tests/model/hifigan/test_hifigan.c */
#include "model/hifigan/hifigan.h"
#include "model/hifigan/hifigan_impl.h"

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

#define LRELU_SLOPE HIFIGAN_LRELU_SLOPE
#define LRELU_SLOPE_POST HIFIGAN_LRELU_SLOPE_POST
#define MAX_FRAMES 1000000
#define MAXZ(a, b) ((a) > (b) ? (a) : (b))

typedef hg_conv_t conv_t;

/* ---- model.json ----------------------------------------------------------------------------- */

static int json_int(const char *path, const cJSON *o, const char *key, long lo, long hi, int *out,
                    hark_err_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return err_set(err, HARK_ERR_FORMAT, "%s: %s must be an integer in [%ld, %ld]", path, key,
                       lo, hi);
    *out = (int)v->valuedouble;
    return HARK_OK;
}

static int json_ints(const char *path, const cJSON *arr, const char *what, int max, long lo,
                     long hi, int *out, int *n, hark_err_t *err)
{
    int cnt = cJSON_GetArraySize(arr);
    if (!cJSON_IsArray(arr) || cnt < 1 || cnt > max)
        return err_set(err, HARK_ERR_FORMAT, "%s: %s must be a list of 1 to %d integers", path,
                       what, max);
    for (int i = 0; i < cnt; i++) {
        const cJSON *v = cJSON_GetArrayItem(arr, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
            v->valuedouble > hi)
            return err_set(err, HARK_ERR_FORMAT, "%s: %s[%d] must be an integer in [%ld, %ld]",
                           path, what, i, lo, hi);
        out[i] = (int)v->valuedouble;
    }
    *n = cnt;
    return HARK_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

static int parse_config(const char *path, const cJSON *j, hifigan_config_t *c, hark_err_t *err)
{
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(j, "family");
    if (!cJSON_IsString(fam) || strcmp(fam->valuestring, "hifigan") != 0)
        return err_set(err, HARK_ERR_FORMAT, "%s: family must be \"hifigan\"", path);
    int ver;
    TRY(json_int(path, j, "format_version", 1, 1, &ver, err));
    const cJSON *rb = cJSON_GetObjectItemCaseSensitive(j, "resblock");
    if (!cJSON_IsString(rb) || (strcmp(rb->valuestring, "1") && strcmp(rb->valuestring, "2")))
        return err_set(err, HARK_ERR_FORMAT, "%s: resblock must be \"1\" or \"2\"", path);
    c->resblock = rb->valuestring[0] - '0';
    c->n_dil = c->resblock == 1 ? 3 : 2;
    TRY(json_int(path, j, "num_mels", 1, 1024, &c->num_mels, err));
    TRY(json_int(path, j, "upsample_initial_channel", 2, 1 << 14, &c->ch0, err));
    int n2;
    TRY(json_ints(path, cJSON_GetObjectItemCaseSensitive(j, "upsample_rates"), "upsample_rates",
                  HIFIGAN_MAX_UPS, 1, 64, c->up_rate, &c->n_ups, err));
    TRY(json_ints(path, cJSON_GetObjectItemCaseSensitive(j, "upsample_kernel_sizes"),
                  "upsample_kernel_sizes", HIFIGAN_MAX_UPS, 1, 256, c->up_kernel, &n2, err));
    if (n2 != c->n_ups)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: upsample_rates (%d) and upsample_kernel_sizes (%d) differ in length",
                       path, c->n_ups, n2);
    for (int i = 0; i < c->n_ups; i++)
        if (c->up_kernel[i] < c->up_rate[i] || (c->up_kernel[i] - c->up_rate[i]) % 2)
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "%s: upsample stage %d: kernel %d and rate %d (kernel - rate must be "
                           "even and >= 0)",
                           path, i, c->up_kernel[i], c->up_rate[i]);
    if (c->ch0 % (1 << c->n_ups))
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: upsample_initial_channel %d does not halve %d times", path, c->ch0,
                       c->n_ups);
    TRY(json_ints(path, cJSON_GetObjectItemCaseSensitive(j, "resblock_kernel_sizes"),
                  "resblock_kernel_sizes", HIFIGAN_MAX_KERNELS, 1, 255, c->rb_kernel, &c->n_kernels,
                  err));
    const cJSON *dl = cJSON_GetObjectItemCaseSensitive(j, "resblock_dilation_sizes");
    if (!cJSON_IsArray(dl) || cJSON_GetArraySize(dl) != c->n_kernels)
        return err_set(err, HARK_ERR_FORMAT, "%s: resblock_dilation_sizes must hold %d lists", path,
                       c->n_kernels);
    for (int k = 0; k < c->n_kernels; k++) {
        if (c->rb_kernel[k] % 2 == 0)
            return err_set(err, HARK_ERR_UNSUPPORTED, "%s: resblock kernel %d: only odd kernels",
                           path, c->rb_kernel[k]);
        char what[48];
        snprintf(what, sizeof what, "resblock_dilation_sizes[%d]", k);
        TRY(json_ints(path, cJSON_GetArrayItem(dl, k), what, HIFIGAN_MAX_DIL, 1, 1024, c->rb_dil[k],
                      &n2, err));
        if (n2 != c->n_dil)
            return err_set(err, HARK_ERR_FORMAT, "%s: %s must hold %d dilations (ResBlock%d)", path,
                           what, c->n_dil, c->resblock);
    }
    TRY(json_int(path, j, "sampling_rate", 1000, 192000, &c->sample_rate, err));
    TRY(json_int(path, j, "n_fft", 16, 1 << 16, &c->n_fft, err));
    TRY(json_int(path, j, "hop_size", 1, 1 << 16, &c->hop, err));
    TRY(json_int(path, j, "win_size", 1, 1 << 16, &c->win_size, err));
    const cJSON *fmin = cJSON_GetObjectItemCaseSensitive(j, "fmin");
    const cJSON *fmax = cJSON_GetObjectItemCaseSensitive(j, "fmax");
    c->fmin = cJSON_IsNumber(fmin) ? fmin->valuedouble : 0;
    c->fmax = cJSON_IsNumber(fmax) ? fmax->valuedouble : c->sample_rate / 2.0;
    return HARK_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

typedef struct {
    safetensors_t *st;
    float *next; /* bump pointer into the model's block */
    hark_err_t *err;
} wload_t;

static int get_tensor(wload_t *L, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                      const float **data)
{
    TRY(st_get_f32_finite(L->st, name, ndim, d0, d1, d2, data, L->err));
    return HARK_OK;
}

/* Conv1d `prefix` (cout, cin, k): w -> (k, cout, cin). */
static int load_conv(wload_t *L, const char *prefix, conv_t *c, int cin, int cout, int k, int dil)
{
    char name[96];
    const float *w, *b;
    snprintf(name, sizeof name, "%s.weight", prefix);
    TRY(get_tensor(L, name, 3, cout, cin, k, &w));
    snprintf(name, sizeof name, "%s.bias", prefix);
    TRY(get_tensor(L, name, 1, cout, 0, 0, &b));
    *c = (conv_t){cin, cout, k, dil, dil * (k - 1) / 2, 1, L->next, NULL};
    L->next += (size_t)k * cout * cin;
    for (int o = 0; o < cout; o++)
        for (int i = 0; i < cin; i++)
            for (int t = 0; t < k; t++)
                c->w[((size_t)t * cout + o) * cin + i] = w[((size_t)o * cin + i) * k + t];
    c->b = L->next;
    L->next += cout;
    memcpy(c->b, b, sizeof(float) * (size_t)cout);
    return HARK_OK;
}

/* ConvTranspose1d `prefix` (cin, cout, k): w -> (k · cout, cin). */
static int load_convt(wload_t *L, const char *prefix, conv_t *c, int cin, int cout, int k,
                      int stride)
{
    char name[96];
    const float *w, *b;
    snprintf(name, sizeof name, "%s.weight", prefix);
    TRY(get_tensor(L, name, 3, cin, cout, k, &w));
    snprintf(name, sizeof name, "%s.bias", prefix);
    TRY(get_tensor(L, name, 1, cout, 0, 0, &b));
    *c = (conv_t){cin, cout, k, 1, (k - stride) / 2, stride, L->next, NULL};
    L->next += (size_t)k * cout * cin;
    for (int i = 0; i < cin; i++)
        for (int o = 0; o < cout; o++)
            for (int t = 0; t < k; t++)
                c->w[((size_t)t * cout + o) * cin + i] = w[((size_t)i * cout + o) * k + t];
    c->b = L->next;
    L->next += cout;
    memcpy(c->b, b, sizeof(float) * (size_t)cout);
    return HARK_OK;
}

static size_t weight_floats(const hifigan_config_t *c)
{
    size_t n = (size_t)c->ch0 * (c->num_mels * 7 + 1);
    for (int i = 0; i < c->n_ups; i++) {
        size_t cin = (size_t)(c->ch0 >> i), cout = (size_t)(c->ch0 >> (i + 1));
        n += cin * cout * (size_t)c->up_kernel[i] + cout;
        for (int j = 0; j < c->n_kernels; j++)
            n += (size_t)(c->resblock == 1 ? 2 : 1) * (size_t)c->n_dil *
                 (cout * cout * (size_t)c->rb_kernel[j] + cout);
    }
    n += (size_t)(c->ch0 >> c->n_ups) * 7 + 1;
    return n;
}

int hifigan_load(const char *dir, int version, hifigan_model_t **out, hark_err_t *err)
{
    *out = NULL;
    char path[1200];
    cJSON *j = NULL;
    TRY(family_open_model_json(dir, version, path, sizeof path, &j, err));
    hifigan_model_t *m = hark_calloc(1, sizeof *m);
    int rc = m ? parse_config(path, j, &m->cfg, err)
               : err_set(err, HARK_ERR_NOMEM, "out of memory loading %s", dir);
    cJSON_Delete(j);
    if (rc)
        goto fail;
    const hifigan_config_t *c = &m->cfg;
    m->block = hark_malloc(sizeof(float) * weight_floats(c));
    if (!m->block) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %s's weights", dir);
        goto fail;
    }
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    wload_t L = {NULL, m->block, err};
    if ((rc = st_open(path, &L.st, err)))
        goto fail;
    rc = load_conv(&L, "conv_pre", &m->conv_pre, c->num_mels, c->ch0, 7, 1);
    for (int i = 0; i < c->n_ups && !rc; i++) {
        int cin = c->ch0 >> i, cout = c->ch0 >> (i + 1);
        char pre[64];
        snprintf(pre, sizeof pre, "ups.%d", i);
        rc = load_convt(&L, pre, &m->ups[i], cin, cout, c->up_kernel[i], c->up_rate[i]);
        for (int k = 0; k < c->n_kernels && !rc; k++)
            for (int half = 0; half < (c->resblock == 1 ? 2 : 1) && !rc; half++)
                for (int d = 0; d < c->n_dil && !rc; d++) {
                    const char *nm = c->resblock == 2 ? "convs" : half ? "convs2" : "convs1";
                    snprintf(pre, sizeof pre, "resblocks.%d.%s.%d", i * c->n_kernels + k, nm, d);
                    rc = load_conv(&L, pre, &m->rb[i][k][half][d], cout, cout, c->rb_kernel[k],
                                   half ? 1 : c->rb_dil[k][d]);
                }
    }
    if (!rc)
        rc = load_conv(&L, "conv_post", &m->conv_post, c->ch0 >> c->n_ups, 1, 7, 1);
    if (!rc) { /* every tensor was looked up by name; an extra one means another model */
        size_t expect = 4 + (size_t)c->n_ups * (2 + (size_t)c->n_kernels * c->n_dil * 2 *
                                                        (c->resblock == 1 ? 2 : 1));
        if (st_count(L.st) != expect)
            rc = err_set(err, HARK_ERR_FORMAT,
                         "%s: %zu tensors, but this config has %zu: the model.json does not "
                         "describe these weights",
                         path, st_count(L.st), expect);
    }
    st_close(L.st);
    if (rc)
        goto fail;
    *out = m;
    return HARK_OK;
fail:
    hifigan_destroy(m);
    return rc;
}

void hifigan_destroy(hifigan_model_t *m)
{
    if (!m)
        return;
    feat_plan_destroy(m->mel_plan);
    hark_free(m->block);
    hark_free(m);
}

const hifigan_config_t *hifigan_config(const hifigan_model_t *m)
{
    return &m->cfg;
}

static int ups_len(const conv_t *c, int t)
{
    return (t - 1) * c->stride - 2 * c->pad + c->k;
}

size_t hifigan_samples(const hifigan_model_t *m, int n_frames)
{
    int t = n_frames;
    for (int i = 0; i < m->cfg.n_ups; i++)
        t = ups_len(&m->ups[i], t);
    return (size_t)t;
}

int hifigan_context_frames(const hifigan_model_t *m)
{
    const hifigan_config_t *c = &m->cfg;
    double r = 3;    /* conv_pre, kernel 7, at the frame rate */
    double rate = 1; /* samples per frame at the current stage */
    for (int i = 0; i < c->n_ups; i++) {
        /* a transposed convolution reads inputs within ceil(kernel / rate) + 1 of an output */
        r += (double)((c->up_kernel[i] + c->up_rate[i] - 1) / c->up_rate[i] + 1) / rate;
        rate *= c->up_rate[i];
        int worst = 0; /* the fused resblocks run side by side: the widest counts */
        for (int k = 0; k < c->n_kernels; k++) {
            int h = (c->rb_kernel[k] - 1) / 2, w = 0;
            for (int d = 0; d < c->n_dil; d++)
                w += h * c->rb_dil[k][d] + (c->resblock == 1 ? h : 0);
            worst = w > worst ? w : worst;
        }
        r += worst / rate;
    }
    r += 3 / rate; /* conv_post, kernel 7 */
    return (int)ceil(r) + 1;
}

/* ---- forward -------------------------------------------------------------------------------- */

static inline float lrelu(float x, float s)
{
    return x > 0 ? x : x * s;
}

/* xp (cin, t + 2·pad) = [0 | act(x) | 0], act = leaky ReLU with slope (slope < 0: identity). */
static void pad_act(float *xp, const float *x, int cin, int t, int pad, float slope)
{
    int ld = t + 2 * pad;
    for (int i = 0; i < cin; i++) {
        float *row = xp + (size_t)i * ld;
        const float *src = x + (size_t)i * t;
        memset(row, 0, sizeof(float) * (size_t)pad);
        if (slope < 0)
            memcpy(row + pad, src, sizeof(float) * (size_t)t);
        else
            for (int s = 0; s < t; s++)
                row[pad + s] = lrelu(src[s], slope);
        memset(row + pad + t, 0, sizeof(float) * (size_t)pad);
    }
}

/* y (cout, t) = b + Σ_tap w_tap · xp[:, tap·dil : tap·dil + t]; xp from pad_act with c->pad. */
static void conv1d(float *y, const float *xp, const conv_t *c, int t)
{
    int ld = t + 2 * c->pad;
    for (int o = 0; o < c->cout; o++)
        for (int s = 0; s < t; s++)
            y[(size_t)o * t + s] = c->b[o];
    for (int tap = 0; tap < c->k; tap++)
        matmul_ref(y, c->w + (size_t)tap * c->cout * c->cin, xp + (size_t)tap * c->dil, c->cout, t,
                   c->cin, c->cin, ld, t, 0, 1.0f, 1.0f);
}

/* y (cout, ups_len) = ConvTranspose1d(x (cin, t)); z scratch (k · cout, t). */
static void conv_transpose1d(float *y, float *z, const float *x, const conv_t *c, int t)
{
    int len = ups_len(c, t);
    matmul_ref(z, c->w, x, c->k * c->cout, t, c->cin, c->cin, t, t, 0, 1.0f, 0.0f);
    for (int o = 0; o < c->cout; o++) {
        float *row = y + (size_t)o * len;
        for (int s = 0; s < len; s++)
            row[s] = 0;
        for (int tap = 0; tap < c->k; tap++) {
            const float *zr = z + ((size_t)tap * c->cout + o) * t;
            for (int s = 0; s < t; s++) {
                int p = s * c->stride + tap - c->pad;
                if (p >= 0 && p < len)
                    row[p] += zr[s];
            }
        }
        for (int s = 0; s < len; s++)
            row[s] += c->b[o];
    }
}

int hifigan_forward(const hifigan_model_t *m, const float *mel, int n_frames, float *audio,
                    hifigan_stage_fn stage, void *user, hark_err_t *err)
{
    const hifigan_config_t *c = &m->cfg;
    if (n_frames < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "hifigan: the mel has no frames");
    if (n_frames > MAX_FRAMES)
        return err_set(err, HARK_ERR_TOO_LARGE, "hifigan: %d mel frames is over the limit of %d",
                       n_frames, MAX_FRAMES);
    for (size_t i = 0; i < (size_t)c->num_mels * n_frames; i++)
        if (!isfinite(mel[i]))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "hifigan: mel value %zu (bin %zu, frame %zu) is NaN or infinite", i,
                           i / (size_t)n_frames, i % (size_t)n_frames);
    /* sizes: the largest activation (channels × time) over the stages, with padding room */
    size_t t = (size_t)n_frames, big = (size_t)c->ch0 * (t + 8), zbig = 0;
    int max_pad = 3;
    for (int i = 0; i < c->n_ups; i++) {
        zbig = MAXZ(zbig, (size_t)m->ups[i].k * (size_t)m->ups[i].cout * t);
        t = (size_t)ups_len(&m->ups[i], (int)t);
        for (int k = 0; k < c->n_kernels; k++)
            for (int d = 0; d < c->n_dil; d++)
                if (m->rb[i][k][0][d].pad > max_pad)
                    max_pad = m->rb[i][k][0][d].pad;
        big = MAXZ(big, (size_t)(c->ch0 >> (i + 1)) * t);
    }
    size_t padded = big + (size_t)c->ch0 * 2 * (size_t)max_pad;
    float *x = hark_malloc(sizeof(float) * big), *xs = hark_malloc(sizeof(float) * big);
    float *r = hark_malloc(sizeof(float) * big), *tmp = hark_malloc(sizeof(float) * big);
    float *xp = hark_malloc(sizeof(float) * padded), *z = hark_malloc(sizeof(float) * zbig);
    int rc = HARK_OK;
    if (!x || !xs || !r || !tmp || !xp || !z) {
        rc = err_set(err, HARK_ERR_NOMEM, "hifigan: out of memory for %d frames", n_frames);
        goto done;
    }
    int len = n_frames;
    pad_act(xp, mel, c->num_mels, len, m->conv_pre.pad, -1);
    conv1d(x, xp, &m->conv_pre, len);
    if (stage)
        stage(user, "conv_pre", x, c->ch0, len);
    for (int i = 0; i < c->n_ups; i++) {
        const conv_t *u = &m->ups[i];
        int ch = u->cout;
        for (size_t q = 0; q < (size_t)u->cin * len; q++)
            tmp[q] = lrelu(x[q], LRELU_SLOPE);
        conv_transpose1d(x, z, tmp, u, len);
        len = ups_len(u, len);
        size_t n = (size_t)ch * len;
        char nm[32];
        if (stage) {
            snprintf(nm, sizeof nm, "ups%d", i);
            stage(user, nm, x, ch, len);
        }
        for (int k = 0; k < c->n_kernels; k++) {
            memcpy(r, x, sizeof(float) * n);
            for (int d = 0; d < c->n_dil; d++) {
                const conv_t *c1 = &m->rb[i][k][0][d];
                pad_act(xp, r, ch, len, c1->pad, LRELU_SLOPE);
                conv1d(tmp, xp, c1, len);
                if (c->resblock == 1) {
                    const conv_t *c2 = &m->rb[i][k][1][d];
                    pad_act(xp, tmp, ch, len, c2->pad, LRELU_SLOPE);
                    conv1d(tmp, xp, c2, len);
                }
                for (size_t q = 0; q < n; q++)
                    r[q] = tmp[q] + r[q];
            }
            if (stage && i == 0) {
                snprintf(nm, sizeof nm, "resblock%d", k);
                stage(user, nm, r, ch, len);
            }
            if (k == 0)
                memcpy(xs, r, sizeof(float) * n);
            else
                for (size_t q = 0; q < n; q++)
                    xs[q] += r[q];
        }
        for (size_t q = 0; q < n; q++)
            x[q] = xs[q] / (float)c->n_kernels;
        if (stage) {
            snprintf(nm, sizeof nm, "mrf%d", i);
            stage(user, nm, x, ch, len);
        }
    }
    pad_act(xp, x, m->conv_post.cin, len, m->conv_post.pad, LRELU_SLOPE_POST);
    conv1d(audio, xp, &m->conv_post, len);
    if (stage)
        stage(user, "conv_post", audio, 1, len);
    for (int s = 0; s < len; s++)
        audio[s] = tanhf(audio[s]);
done:
    hark_free(x);
    hark_free(xs);
    hark_free(r);
    hark_free(tmp);
    hark_free(xp);
    hark_free(z);
    return rc;
}

/* ---- mel ------------------------------------------------------------------------------------ */

int hifigan_mel(const hifigan_model_t *mc, const float *x, size_t n, float **mel, int *n_frames,
                hark_err_t *err)
{
    hifigan_model_t *m = (hifigan_model_t *)mc; /* the plan is made once, lazily */
    const hifigan_config_t *c = &m->cfg;
    *mel = NULL;
    *n_frames = 0;
    if (c->sample_rate != 22050 || c->n_fft != 1024 || c->hop != 256 || c->win_size != 1024 ||
        c->num_mels != 80 || c->fmin != 0 || c->fmax != 8000)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "hifigan: only the 22050 Hz / n_fft 1024 / hop 256 / 80 mels / 0-8000 Hz "
                       "mel recipe is implemented");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_set(err, HARK_ERR_INVALID_ARG, "hifigan: sample %zu is NaN or infinite", i);
    feat_plan_t *p = __atomic_load_n(&m->mel_plan, __ATOMIC_ACQUIRE);
    if (!p) {
        feat_opts_t o;
        feat_default_opts(&o, FEAT_TTS_MEL);
        o.tts_variant = TTS_MEL_HIFIGAN;
        TRY(feat_plan_create(&o, &p, err));
        feat_plan_t *expected = NULL;
        if (!__atomic_compare_exchange_n(&m->mel_plan, &expected, p, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            feat_plan_destroy(p);
            p = expected;
        }
    }
    int nf = feat_num_frames(p, n);
    if (nf < 1 || n <= (size_t)p->pad_left)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "hifigan: %zu samples is too short for one mel frame", n);
    float *tm = hark_malloc(sizeof(float) * (size_t)nf * 80);
    float *out = hark_malloc(sizeof(float) * (size_t)nf * 80);
    int rc = tm && out ? feat_compute(p, x, n, tm, err)
                       : err_set(err, HARK_ERR_NOMEM, "hifigan: out of memory for the mel");
    if (!rc) {
        for (int f = 0; f < nf; f++)
            for (int b = 0; b < 80; b++)
                out[(size_t)b * nf + f] = tm[(size_t)f * 80 + b];
        *mel = out;
        *n_frames = nf;
        out = NULL;
    }
    hark_free(tm);
    hark_free(out);
    return rc;
}
