/* silero_vad.c — Silero VAD's network on the CPU: model loading and the batched window step.
 * Tests: tests/model/silero/test_silero_vad.c */
#include "model/silero/silero_vad.h"

#include "hark.h"
#include "model/family.h"
#include "model/safetensors.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RATES 4
#define H SILERO_HIDDEN

struct silero_vad {
    silero_rate_t rate[MAX_RATES];
    int n_rates;
    float *block; /* every re-laid weight */
};

#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_ != HARK_OK)                                                                        \
            return rc_;                                                                            \
    } while (0)

/* ---- loading ----------------------------------------------------------------------------------
 */

static int json_int(const cJSON *o, const char *key, int lo, int hi, int *out, const char *where,
                    hark_err_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble ||
        v->valuedouble < lo || v->valuedouble > hi)
        return err_set(err, HARK_ERR_FORMAT, "%s: %s must be an integer in [%d, %d]", where, key,
                       lo, hi);
    *out = (int)v->valuedouble;
    return HARK_OK;
}

static int check_keys(const cJSON *o, const char *const *keys, const char *where, hark_err_t *err)
{
    for (const cJSON *c = o->child; c; c = c->next) {
        int known = 0;
        for (int i = 0; keys[i] && !known; i++)
            known = strcmp(c->string, keys[i]) == 0;
        if (!known)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: unknown field \"%s\" (a newer converter? hark cannot know whether "
                           "it changes the math)",
                           where, c->string);
    }
    return HARK_OK;
}

static size_t rate_floats(const silero_rate_t *r)
{
    size_t n = (size_t)2 * r->n_bins * r->n_fft;
    for (int i = 0; i < SILERO_N_CONV; i++)
        n += (size_t)r->cout[i] * 3 * r->cin[i] + (size_t)r->cout[i];
    return n + (size_t)2 * 4 * H * H + 2 * 4 * H + H;
}

static int parse_rate(const cJSON *o, silero_rate_t *r, const char *mj, hark_err_t *err)
{
    static const char *const keys[] = {"sample_rate", "window", "context", "n_fft", "hop",
                                       "pad",         "frames", "encoder", NULL};
    static const char *const ckeys[] = {"cin", "cout", "kernel", "stride", "pad", NULL};
    char where[1300];
    snprintf(where, sizeof where, "%s: rates[]", mj);
    if (!cJSON_IsObject(o))
        return err_set(err, HARK_ERR_FORMAT, "%s: not an object", where);
    TRY(check_keys(o, keys, where, err));
    TRY(json_int(o, "sample_rate", 1000, 192000, &r->sample_rate, where, err));
    TRY(json_int(o, "window", 1, 1 << 16, &r->window, where, err));
    TRY(json_int(o, "context", 1, 1 << 16, &r->context, where, err));
    TRY(json_int(o, "n_fft", 2, 1 << 14, &r->n_fft, where, err));
    TRY(json_int(o, "hop", 1, 1 << 14, &r->hop, where, err));
    TRY(json_int(o, "pad", 0, 1 << 14, &r->pad, where, err));
    TRY(json_int(o, "frames", 1, 1 << 10, &r->frames, where, err));
    r->n_bins = r->n_fft / 2 + 1;
    int len = r->context + r->window + r->pad;
    if (r->pad >= r->context + r->window || len < r->n_fft ||
        (len - r->n_fft) / r->hop + 1 != r->frames)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: %d Hz: context %d + window %d + pad %d samples do not give %d frames "
                       "of %d (hop %d)",
                       where, r->sample_rate, r->context, r->window, r->pad, r->frames, r->n_fft,
                       r->hop);
    const cJSON *enc = cJSON_GetObjectItemCaseSensitive(o, "encoder");
    if (!cJSON_IsArray(enc) || cJSON_GetArraySize(enc) != SILERO_N_CONV)
        return err_set(err, HARK_ERR_FORMAT, "%s: encoder must list %d convolutions", where,
                       SILERO_N_CONV);
    int cin = r->n_bins, t = r->frames;
    for (int i = 0; i < SILERO_N_CONV; i++) {
        const cJSON *c = cJSON_GetArrayItem(enc, i);
        int k, pad, ci;
        snprintf(where, sizeof where, "%s: rates[%d Hz].encoder[%d]", mj, r->sample_rate, i);
        if (!cJSON_IsObject(c))
            return err_set(err, HARK_ERR_FORMAT, "%s: not an object", where);
        TRY(check_keys(c, ckeys, where, err));
        TRY(json_int(c, "cin", 1, 4096, &ci, where, err));
        TRY(json_int(c, "cout", 1, 4096, &r->cout[i], where, err));
        TRY(json_int(c, "kernel", 1, 64, &k, where, err));
        TRY(json_int(c, "stride", 1, 64, &r->stride[i], where, err));
        TRY(json_int(c, "pad", 0, 64, &pad, where, err));
        if (k != 3 || pad != 1)
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "%s: kernel %d, pad %d (hark implements kernel 3, pad 1)", where, k,
                           pad);
        if (ci != cin)
            return err_set(err, HARK_ERR_FORMAT, "%s: cin %d, but the input has %d channels", where,
                           ci, cin);
        r->cin[i] = cin;
        cin = r->cout[i];
        t = (t + 2 - 3) / r->stride[i] + 1;
    }
    if (t != 1 || cin != H)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "%s: the encoder ends with %d channels x %d frames (the LSTM takes %d x 1)",
                       where, cin, t, H);
    return HARK_OK;
}

typedef struct {
    safetensors_t *st;
    float *next;
    hark_err_t *err;
} wload_t;

static int get_tensor(wload_t *L, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                      const float **data)
{
    TRY(st_get_f32_finite(L->st, name, ndim, d0, d1, d2, data, L->err));
    return HARK_OK;
}

static float *take(wload_t *L, const float *src, size_t n)
{
    float *p = L->next;
    L->next += n;
    if (src)
        memcpy(p, src, n * sizeof *p);
    return p;
}

static int load_rate_weights(wload_t *L, silero_rate_t *r)
{
    char name[128];
    const float *w, *b;
    int sr = r->sample_rate;
    snprintf(name, sizeof name, "sr%d.stft.forward_basis_buffer", sr);
    TRY(get_tensor(L, name, 3, 2 * r->n_bins, 1, r->n_fft, &w));
    r->basis = take(L, w, (size_t)2 * r->n_bins * r->n_fft);
    for (int i = 0; i < SILERO_N_CONV; i++) {
        int ci = r->cin[i], co = r->cout[i];
        snprintf(name, sizeof name, "sr%d.encoder.%d.reparam_conv.weight", sr, i);
        TRY(get_tensor(L, name, 3, co, ci, 3, &w));
        snprintf(name, sizeof name, "sr%d.encoder.%d.reparam_conv.bias", sr, i);
        TRY(get_tensor(L, name, 1, co, 0, 0, &b));
        r->conv_w[i] = take(L, NULL, (size_t)co * 3 * ci);
        for (int o = 0; o < co; o++) /* (cout, cin, k) -> (cout, k, cin) */
            for (int c = 0; c < ci; c++)
                for (int j = 0; j < 3; j++)
                    r->conv_w[i][((size_t)o * 3 + j) * ci + c] = w[((size_t)o * ci + c) * 3 + j];
        r->conv_b[i] = take(L, b, (size_t)co);
    }
    static const char *const lstm[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    float **dst[4] = {&r->w_ih, &r->w_hh, &r->b_ih, &r->b_hh};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "sr%d.decoder.rnn.%s", sr, lstm[i]);
        TRY(get_tensor(L, name, i < 2 ? 2 : 1, 4 * H, H, 0, &w));
        *dst[i] = take(L, w, (size_t)4 * H * (i < 2 ? H : 1));
    }
    snprintf(name, sizeof name, "sr%d.decoder.decoder.2.weight", sr);
    TRY(get_tensor(L, name, 3, 1, H, 1, &w));
    r->out_w = take(L, w, H);
    snprintf(name, sizeof name, "sr%d.decoder.decoder.2.bias", sr);
    TRY(get_tensor(L, name, 1, 1, 0, 0, &b));
    r->out_b = b[0];
    return HARK_OK;
}

static size_t tensors_per_rate(void)
{
    return 1 + 2 * SILERO_N_CONV + 4 + 2;
}

int silero_vad_load(const char *dir, int version, silero_vad_t **out, hark_err_t *err)
{
    *out = NULL;
    char mj[1100], path[1100];
    cJSON *j = NULL;
    TRY(family_open_model_json(dir, version, mj, sizeof mj, &j, err));
    silero_vad_t *m = calloc(1, sizeof *m);
    wload_t L = {NULL, NULL, err};
    int rc = m ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "out of memory loading %s", dir);
    static const char *const keys[] = {"format_version", "family", "hidden", "rates", NULL};
    int fv = 0, hidden = 0;
    if (rc == HARK_OK)
        rc = check_keys(j, keys, mj, err);
    if (rc == HARK_OK)
        rc = json_int(j, "format_version", 1, 1, &fv, mj, err);
    if (rc == HARK_OK) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "family");
        if (!cJSON_IsString(f) || strcmp(f->valuestring, "silero_vad") != 0)
            rc = err_set(err, HARK_ERR_FORMAT, "%s: family must be \"silero_vad\"", mj);
    }
    if (rc == HARK_OK)
        rc = json_int(j, "hidden", H, H, &hidden, mj, err);
    const cJSON *rates = rc == HARK_OK ? cJSON_GetObjectItemCaseSensitive(j, "rates") : NULL;
    if (rc == HARK_OK && (!cJSON_IsArray(rates) || cJSON_GetArraySize(rates) < 1 ||
                          cJSON_GetArraySize(rates) > MAX_RATES))
        rc = err_set(err, HARK_ERR_FORMAT, "%s: rates must list 1 to %d sample rates", mj,
                     MAX_RATES);
    size_t floats = 0;
    for (int i = 0; rc == HARK_OK && i < cJSON_GetArraySize(rates); i++) {
        rc = parse_rate(cJSON_GetArrayItem(rates, i), &m->rate[i], mj, err);
        for (int k = 0; rc == HARK_OK && k < i; k++)
            if (m->rate[k].sample_rate == m->rate[i].sample_rate)
                rc = err_set(err, HARK_ERR_FORMAT, "%s: %d Hz is listed twice", mj,
                             m->rate[i].sample_rate);
        if (rc == HARK_OK) {
            floats += rate_floats(&m->rate[i]);
            m->n_rates = i + 1;
        }
    }
    cJSON_Delete(j);
    if (rc == HARK_OK && !(m->block = malloc(floats * sizeof(float))))
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %s's weights", dir);
    family_version_path(dir, version, "model.safetensors", path, sizeof path);
    if (rc == HARK_OK)
        rc = st_open(path, &L.st, err);
    L.next = m ? m->block : NULL;
    for (int i = 0; rc == HARK_OK && i < m->n_rates; i++)
        rc = load_rate_weights(&L, &m->rate[i]);
    if (rc == HARK_OK && st_count(L.st) != tensors_per_rate() * (size_t)m->n_rates)
        rc = err_set(err, HARK_ERR_FORMAT,
                     "%s: %zu tensors, but model.json's %d rates need %zu: the files do not "
                     "belong together",
                     path, st_count(L.st), m->n_rates, tensors_per_rate() * (size_t)m->n_rates);
    st_close(L.st);
    if (rc != HARK_OK) {
        silero_vad_destroy(m);
        return rc;
    }
    *out = m;
    return HARK_OK;
}

void silero_vad_destroy(silero_vad_t *m)
{
    if (!m)
        return;
    free(m->block);
    free(m);
}

const silero_rate_t *silero_vad_rate(const silero_vad_t *m, int sample_rate)
{
    for (int i = 0; i < m->n_rates; i++)
        if (m->rate[i].sample_rate == sample_rate)
            return &m->rate[i];
    return NULL;
}

int silero_vad_rates(const silero_vad_t *m, int *rates)
{
    for (int i = 0; i < m->n_rates; i++)
        rates[i] = m->rate[i].sample_rate;
    return m->n_rates;
}

/* ---- the step ---------------------------------------------------------------------------------
 */

size_t silero_vad_n_windows(const silero_rate_t *r, size_t n)
{
    return (n + (size_t)r->window - 1) / (size_t)r->window;
}

size_t silero_vad_state_floats(const silero_rate_t *r)
{
    return 2 * H + (size_t)r->context;
}

/* the widest activation (rows of B · frames) and im2col buffer of the encoder */
static void conv_sizes(const silero_rate_t *r, size_t *act, size_t *col)
{
    size_t a = (size_t)r->n_bins * r->frames, c = 0;
    int t = r->frames;
    for (int i = 0; i < SILERO_N_CONV; i++) {
        int t_out = (t + 2 - 3) / r->stride[i] + 1;
        size_t ci = (size_t)t_out * 3 * r->cin[i], ai = (size_t)t_out * r->cout[i];
        c = ci > c ? ci : c;
        a = ai > a ? ai : a;
        t = t_out;
    }
    *act = a;
    *col = c;
}

size_t silero_vad_scratch_floats(const silero_rate_t *r, int batch)
{
    size_t act, col;
    conv_sizes(r, &act, &col);
    size_t per = (size_t)(r->context + r->window + r->pad) + (size_t)r->frames * r->n_fft +
                 (size_t)r->frames * 2 * r->n_bins + 2 * act + col + 4 * H;
    return per * (size_t)batch;
}

static float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void silero_vad_step(const silero_rate_t *r, float *prob, float *state, const float *x, size_t ldx,
                     int batch, float *scratch)
{
    const int B = batch, T = r->frames, nb = r->n_bins, nf = r->n_fft;
    const int L = r->context + r->window, Lp = L + r->pad;
    const size_t sf = silero_vad_state_floats(r);
    size_t act_n, col_n;
    conv_sizes(r, &act_n, &col_n);
    float *xp = scratch;                         /* (B, Lp) context, window, reflection */
    float *frames = xp + (size_t)B * Lp;         /* (B · T, n_fft) */
    float *spec = frames + (size_t)B * T * nf;   /* (B · T, 2 · n_bins) */
    float *act0 = spec + (size_t)B * T * 2 * nb; /* (B, t, c) time-major, channels innermost */
    float *act1 = act0 + (size_t)B * act_n;
    float *col = act1 + (size_t)B * act_n;  /* (B · t_out, 3 · cin) */
    float *gates = col + (size_t)B * col_n; /* (B, 4H) */

    for (int b = 0; b < B; b++) {
        float *row = xp + (size_t)b * Lp, *st = state + (size_t)b * sf;
        memcpy(row, st + 2 * H, (size_t)r->context * sizeof *row);
        memcpy(row + r->context, x + (size_t)b * ldx, (size_t)r->window * sizeof *row);
        for (int j = 0; j < r->pad; j++) /* reflect: the edge sample is not repeated */
            row[L + j] = row[L - 2 - j];
        memcpy(st + 2 * H, row + L - r->context, (size_t)r->context * sizeof *row);
        for (int t = 0; t < T; t++)
            memcpy(frames + ((size_t)b * T + t) * nf, row + (size_t)t * r->hop,
                   (size_t)nf * sizeof *row);
    }
    /* the STFT as a conv: spec (B·T, 2·nb) = frames · basisᵀ; magnitude of (real, imag) */
    matmul_ref(spec, frames, r->basis, B * T, 2 * nb, nf, nf, nf, 2 * nb, 1, 1.0f, 0.0f);
    for (size_t i = 0; i < (size_t)B * T; i++) {
        const float *re = spec + i * 2 * nb, *im = re + nb;
        float *o = act0 + i * nb;
        for (int f = 0; f < nb; f++)
            o[f] = sqrtf(re[f] * re[f] + im[f] * im[f]);
    }
    /* encoder: im2col (taps j = 0..2 at s·stride + j - 1, zeros outside) -> GEMM + bias, ReLU */
    float *in = act0, *out = act1;
    int t = T;
    for (int i = 0; i < SILERO_N_CONV; i++) {
        int ci = r->cin[i], co = r->cout[i], t_out = (t + 2 - 3) / r->stride[i] + 1;
        for (int b = 0; b < B; b++)
            for (int s = 0; s < t_out; s++) {
                float *c = col + ((size_t)b * t_out + s) * 3 * ci;
                for (int j = 0; j < 3; j++) {
                    int src = s * r->stride[i] + j - 1;
                    if (src < 0 || src >= t)
                        memset(c + (size_t)j * ci, 0, (size_t)ci * sizeof *c);
                    else
                        memcpy(c + (size_t)j * ci, in + ((size_t)b * t + src) * ci,
                               (size_t)ci * sizeof *c);
                }
            }
        linear_ref(out, col, r->conv_w[i], r->conv_b[i], B * t_out, 3 * ci, co);
        relu_ref(out, out, (size_t)B * t_out * co);
        float *tmp = in;
        in = out;
        out = tmp;
        t = t_out;
    }
    /* in: (B, H) the LSTM cell's input. gates = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh */
    float *hbuf = out; /* (B, H) the previous h, gathered */
    for (int b = 0; b < B; b++)
        memcpy(hbuf + (size_t)b * H, state + (size_t)b * sf, H * sizeof *hbuf);
    linear_ref(gates, in, r->w_ih, r->b_ih, B, H, 4 * H);
    matmul_ref(gates, hbuf, r->w_hh, B, 4 * H, H, H, H, 4 * H, 1, 1.0f, 1.0f);
    for (int b = 0; b < B; b++) {
        float *g = gates + (size_t)b * 4 * H, *h = state + (size_t)b * sf, *c = h + H;
        float logit = 0.0f;
        for (int k = 0; k < H; k++) {
            float gi = sigmoidf(g[k] + r->b_hh[k]);
            float gf = sigmoidf(g[H + k] + r->b_hh[H + k]);
            float gg = tanhf(g[2 * H + k] + r->b_hh[2 * H + k]);
            float go = sigmoidf(g[3 * H + k] + r->b_hh[3 * H + k]);
            c[k] = gf * c[k] + gi * gg;
            h[k] = go * tanhf(c[k]);
            logit += (h[k] > 0.0f ? h[k] : 0.0f) * r->out_w[k];
        }
        prob[b] = sigmoidf(logit + r->out_b);
    }
}

/* ---- whole files ------------------------------------------------------------------------------
 */

typedef struct {
    int file;
    size_t n_win;
} order_t;

static int by_windows_desc(const void *a, const void *b)
{
    const order_t *x = a, *y = b;
    if (x->n_win != y->n_win)
        return x->n_win < y->n_win ? 1 : -1;
    return x->file - y->file;
}

int silero_vad_probs(const silero_vad_t *m, int sample_rate, const float *const *pcm,
                     const size_t *n, int n_files, int max_batch, float *const *probs,
                     hark_err_t *err)
{
    const silero_rate_t *r = silero_vad_rate(m, sample_rate);
    if (!r)
        return err_set(err, HARK_ERR_UNSUPPORTED, "the VAD model has no %d Hz network",
                       sample_rate);
    if (n_files <= 0)
        return HARK_OK;
    int B = max_batch > 0 && max_batch < n_files ? max_batch : n_files;
    size_t sf = silero_vad_state_floats(r), W = (size_t)r->window;
    order_t *ord = malloc((size_t)n_files * sizeof *ord);
    float *state = malloc((size_t)B * sf * sizeof(float));
    float *x = malloc((size_t)B * W * sizeof(float));
    float *p = malloc((size_t)B * sizeof(float));
    float *scratch = malloc(silero_vad_scratch_floats(r, B) * sizeof(float));
    int rc = HARK_OK;
    if (!ord || !state || !x || !p || !scratch) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for the VAD of %d files", n_files);
        goto done;
    }
    for (int i = 0; i < n_files; i++)
        ord[i] = (order_t){i, silero_vad_n_windows(r, n[i])};
    /* longest first: in each group the files still running are always a prefix */
    qsort(ord, (size_t)n_files, sizeof *ord, by_windows_desc);
    for (int g0 = 0; g0 < n_files; g0 += B) {
        int gn = n_files - g0 < B ? n_files - g0 : B;
        memset(state, 0, (size_t)gn * sf * sizeof(float));
        for (size_t k = 0; k < ord[g0].n_win; k++) {
            int active = 0;
            while (active < gn && ord[g0 + active].n_win > k)
                active++;
            for (int b = 0; b < active; b++) {
                int f = ord[g0 + b].file;
                size_t off = k * W, avail = n[f] - off < W ? n[f] - off : W;
                memcpy(x + (size_t)b * W, pcm[f] + off, avail * sizeof(float));
                memset(x + (size_t)b * W + avail, 0, (W - avail) * sizeof(float));
            }
            silero_vad_step(r, p, state, x, W, active, scratch);
            for (int b = 0; b < active; b++)
                probs[ord[g0 + b].file][k] = p[b];
        }
    }
done:
    free(ord);
    free(state);
    free(x);
    free(p);
    free(scratch);
    return rc;
}

/* ---- one stream --------------------------------------------------------------------------------
 */

struct silero_vad_stream {
    const silero_rate_t *r;
    silero_seg_stream_t *seg;
    float *state;   /* (silero_vad_state_floats) */
    float *scratch; /* (silero_vad_scratch_floats, batch 1) */
    float *win;     /* (window) the window being filled */
    size_t fill;    /* samples in win */
    size_t n;       /* samples fed */
    int finished;
};

int silero_vad_stream_create(const silero_vad_t *m, int sample_rate, const silero_seg_opts_t *o,
                             silero_vad_stream_t **out, hark_err_t *err)
{
    *out = NULL;
    const silero_rate_t *r = silero_vad_rate(m, sample_rate);
    if (!r)
        return err_set(err, HARK_ERR_UNSUPPORTED, "the VAD model has no %d Hz network",
                       sample_rate);
    silero_vad_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    s->r = r;
    int rc = silero_seg_stream_create(o, sample_rate, r->window, &s->seg, err);
    if (rc == HARK_OK) {
        s->state = calloc(silero_vad_state_floats(r), sizeof(float));
        s->scratch = malloc(silero_vad_scratch_floats(r, 1) * sizeof(float));
        s->win = malloc((size_t)r->window * sizeof(float));
        if (!s->state || !s->scratch || !s->win)
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    if (rc != HARK_OK) {
        silero_vad_stream_destroy(s);
        return rc;
    }
    *out = s;
    return HARK_OK;
}

void silero_vad_stream_destroy(silero_vad_stream_t *s)
{
    if (!s)
        return;
    silero_seg_stream_destroy(s->seg);
    free(s->state);
    free(s->scratch);
    free(s->win);
    free(s);
}

static int run_window(silero_vad_stream_t *s, hark_err_t *err)
{
    float p;
    silero_vad_step(s->r, &p, s->state, s->win, (size_t)s->r->window, 1, s->scratch);
    s->fill = 0;
    return silero_seg_stream_push(s->seg, &p, 1, err);
}

int silero_vad_stream_feed(silero_vad_stream_t *s, const float *pcm, size_t n, hark_err_t *err)
{
    if (s->finished)
        return err_set(err, HARK_ERR_INVALID_ARG, "VAD stream: fed after it ended");
    const size_t W = (size_t)s->r->window;
    while (n > 0) {
        size_t k = W - s->fill < n ? W - s->fill : n;
        memcpy(s->win + s->fill, pcm, k * sizeof *pcm);
        s->fill += k;
        s->n += k;
        pcm += k;
        n -= k;
        if (s->fill == W)
            TRY(run_window(s, err));
    }
    return HARK_OK;
}

int silero_vad_stream_finish(silero_vad_stream_t *s, hark_err_t *err)
{
    if (s->finished)
        return HARK_OK;
    if (s->fill > 0) {
        memset(s->win + s->fill, 0, ((size_t)s->r->window - s->fill) * sizeof(float));
        TRY(run_window(s, err));
    }
    s->finished = 1;
    return silero_seg_stream_finish(s->seg, s->n, err);
}

size_t silero_vad_stream_pop(silero_vad_stream_t *s, silero_segment_t *out, size_t max)
{
    return silero_seg_stream_pop(s->seg, out, max);
}

long long silero_vad_stream_keep_from(const silero_vad_stream_t *s)
{
    return silero_seg_stream_keep_from(s->seg);
}

size_t silero_vad_stream_samples(const silero_vad_stream_t *s)
{
    return s->n;
}
