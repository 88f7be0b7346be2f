/* features.c — CPU front ends (Kaldi fbank, NeMo/Jasper log-mel, HiFi-GAN/Tacotron2 log-mel)
 * as one framed-spectrum pipeline configured per kind; FFTs through FFTW (single precision).
 * Tests: tests/dsp/test_features.c */
#include "dsp/features.h"
#include "dsp/window_torch.h"

#include "core/alloc.h"
#include "hark.h"

#include <fftw3.h>
#include <sleef.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* FFTW's planner is not thread-safe; plans are made once per feat_plan under this lock. */
static pthread_mutex_t fftw_planner_lock = PTHREAD_MUTEX_INITIALIZER;

void feat_default_opts(feat_opts_t *o, feat_kind_t kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->sample_rate = kind == FEAT_TTS_MEL ? 22050 : 16000;
    o->num_mel_bins = kind == FEAT_NEMO_MEL ? 64 : 80;
    o->dither_seed = 1;
}

static const char *const kind_names[] = {"fbank", "nemo-mel", "tts-mel"};

int feat_parse_kind(const char *name, feat_kind_t *out)
{
    for (int i = 0; i < 3; i++) {
        if (!strcmp(name, kind_names[i])) {
            *out = (feat_kind_t)i;
            return 0;
        }
    }
    return -1;
}

const char *feat_kind_name(feat_kind_t kind)
{
    return (unsigned)kind < 3 ? kind_names[kind] : "?";
}

/* ---- mel filterbanks ---------------------------------------------------------------------- */

/* Kaldi mel banks as torchaudio.compliance.kaldi.get_mel_banks builds them: mel = 1127 ln(1+f/700),
 * triangles between low_freq and high_freq, computed in float32 like the original. The Nyquist
 * bin gets no weight. */
static void mel_kaldi(float *mel, int n_mels, int n_fft, float rate, float low, float high)
{
    int n_half = n_fft / 2, n_bins = n_half + 1;
    double mel_low = 1127.0 * log(1.0 + low / 700.0), mel_high = 1127.0 * log(1.0 + high / 700.0);
    float delta = (float)((mel_high - mel_low) / (n_mels + 1));
    float bin_width = rate / (float)n_fft;
    for (int m = 0; m < n_mels; m++) {
        float left = (float)mel_low + (float)m * delta;
        float center = (float)mel_low + ((float)m + 1.0f) * delta;
        float right = (float)mel_low + ((float)m + 2.0f) * delta;
        for (int k = 0; k < n_bins; k++) {
            float w = 0;
            if (k < n_half) {
                float f = bin_width * (float)k;
                float mk = 1127.0f * logf(1.0f + f / 700.0f);
                float up = (mk - left) / (center - left), down = (right - mk) / (right - center);
                w = fmaxf(0.0f, fminf(up, down));
            }
            mel[(size_t)m * n_bins + k] = w;
        }
    }
}

/* Slaney-style mel scale (librosa's default, htk=False). */
static double hz_to_mel_slaney(double f)
{
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = log(6.4) / 27.0;
    return f >= min_log_hz ? min_log_mel + log(f / min_log_hz) / logstep : f / f_sp;
}

static double mel_to_hz_slaney(double m)
{
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
    const double logstep = log(6.4) / 27.0;
    return m >= min_log_mel ? min_log_hz * exp(logstep * (m - min_log_mel)) : f_sp * m;
}

/* librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=False, norm='slaney'): triangles on the
 * Slaney mel scale, each scaled to unit area (2 / bandwidth); computed in double, stored float. */
static int mel_slaney(float *mel, int n_mels, int n_fft, double rate, double f_lo, double f_hi)
{
    int n_bins = n_fft / 2 + 1;
    double *pts = hark_malloc(sizeof(double) * (size_t)(n_mels + 2));
    if (!pts)
        return HARK_ERR_NOMEM;
    double mlo = hz_to_mel_slaney(f_lo), mhi = hz_to_mel_slaney(f_hi);
    for (int i = 0; i < n_mels + 2; i++)
        pts[i] = mel_to_hz_slaney(mlo + (mhi - mlo) * i / (n_mels + 1));
    for (int m = 0; m < n_mels; m++) {
        double enorm = 2.0 / (pts[m + 2] - pts[m]);
        for (int k = 0; k < n_bins; k++) {
            double f = rate / 2.0 * k / (n_bins - 1);
            double lower = (f - pts[m]) / (pts[m + 1] - pts[m]);
            double upper = (pts[m + 2] - f) / (pts[m + 2] - pts[m + 1]);
            double w = fmax(0.0, fmin(lower, upper));
            mel[(size_t)m * n_bins + k] = (float)(w * enorm);
        }
    }
    hark_free(pts);
    return HARK_OK;
}

/* hann(n)^power exactly as torch builds it: a symmetric window of n points, or a periodic one
 * (the first n of n+1), with SLEEF's AVX2 cosf/powf where the CPU has them (what torch's AVX2
 * kernels use), else SLEEF's scalar routines. */
static int torch_window(float *w, int n, int periodic, float power)
{
    int m = n + (periodic ? 1 : 0);
    float *tmp = hark_malloc(sizeof(float) * (size_t)m);
    if (!tmp)
        return HARK_ERR_NOMEM;
    if (m == 1) {
        tmp[0] = 1.0f;
    } else if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                 window_torch_hann_pow_avx2(tmp, m, power) == 0)) {
        float step = (float)(2.0 * M_PI / (double)(m - 1));
        for (int i = 0; i < m; i++) {
            float h = Sleef_cosf_u10((float)i * step) * -0.5f + 0.5f;
            tmp[i] = power != 1.0f ? Sleef_powf_u10(h, power) : h;
        }
    }
    memcpy(w, tmp, sizeof(float) * (size_t)n);
    hark_free(tmp);
    return HARK_OK;
}

/* ---- plan --------------------------------------------------------------------------------- */

int feat_plan_create(const feat_opts_t *opts, feat_plan_t **out, hark_err_t *err)
{
    *out = NULL;
    if (opts->sample_rate < 1000 || opts->sample_rate > 384000)
        return err_set(err, HARK_ERR_INVALID_ARG, "features: sample rate %d Hz is out of range",
                       opts->sample_rate);
    if (opts->num_mel_bins < 1 || opts->num_mel_bins > 512)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "features: num_mel_bins %d is out of range [1, 512]", opts->num_mel_bins);
    if (!(opts->dither >= 0.0f))
        return err_set(err, HARK_ERR_INVALID_ARG, "features: dither must be >= 0");
    feat_plan_t *p = hark_calloc(1, sizeof *p);
    if (!p)
        return err_set(err, HARK_ERR_NOMEM, "features: out of memory");
    p->opts = *opts;
    p->n_mels = opts->num_mel_bins;
    double rate = opts->sample_rate;
    switch (opts->kind) {
    case FEAT_FBANK: /* kaldi.fbank, 25 ms / 10 ms, povey window, 512-point FFT */
        if ((unsigned)opts->fbank_variant > FBANK_SHERPA) {
            hark_free(p);
            return err_set(err, HARK_ERR_INVALID_ARG, "features: unknown fbank variant %d",
                           (int)opts->fbank_variant);
        }
        p->win_length = (int)(rate * 0.025);
        p->hop = (int)(rate * 0.010);
        for (p->n_fft = 1; p->n_fft < p->win_length; p->n_fft <<= 1)
            ;
        p->frame_span = p->win_length;
        if (opts->fbank_variant == FBANK_WENET) { /* snip edges, int16 range */
            p->pad = FEAT_PAD_NONE;
            p->input_scale = 32768.0f;
        } else { /* snip_edges=false: frame t centred on sample hop * t + hop / 2 */
            p->pad = FEAT_PAD_KALDI;
            p->pad_left = p->win_length / 2 - p->hop / 2;
            p->input_scale = 1.0f;
        }
        p->frame_dc_preemph = 1;
        p->preemph = 0.97f;
        p->log_mode = FEAT_LOG_MAX;
        p->log_eps = 1.1920928955078125e-07f; /* float32 epsilon */
        break;
    case FEAT_NEMO_MEL: /* Jasper FilterbankFeatures: 20 ms hann / 10 ms, n_fft 512, centred stft */
        p->win_length = (int)(rate * 0.02);
        p->hop = (int)(rate * 0.01);
        for (p->n_fft = 1; p->n_fft < p->win_length; p->n_fft <<= 1)
            ;
        p->frame_span = p->n_fft;
        p->win_offset = (p->n_fft - p->win_length) / 2;
        p->pad = FEAT_PAD_REFLECT;
        p->pad_left = p->n_fft / 2;
        p->input_scale = 1.0f;
        p->signal_preemph = 1;
        p->preemph = 0.97f;
        p->log_mode = FEAT_LOG_ADD;
        p->log_eps = 1e-20f;
        p->normalize = 1;
        break;
    case FEAT_TTS_MEL: /* HiFi-GAN / Tacotron2: n_fft 1024, hop 256, win 1024, 0..8 kHz */
        p->win_length = 1024;
        p->hop = 256;
        p->n_fft = 1024;
        p->frame_span = p->n_fft;
        p->pad = FEAT_PAD_REFLECT;
        p->pad_left =
            opts->tts_variant == TTS_MEL_TACOTRON2 ? p->n_fft / 2 : (p->n_fft - p->hop) / 2;
        p->input_scale = 1.0f;
        p->magnitude = 1;
        p->mag_eps = opts->tts_variant == TTS_MEL_TACOTRON2 ? 0.0f : 1e-9f;
        p->log_mode = FEAT_LOG_MAX;
        p->log_eps = 1e-5f;
        break;
    default:
        hark_free(p);
        return err_set(err, HARK_ERR_INVALID_ARG, "features: unknown kind %d", (int)opts->kind);
    }
    p->n_bins = p->n_fft / 2 + 1;
    p->window = hark_malloc(sizeof(float) * (size_t)p->win_length);
    p->mel = hark_malloc(sizeof(float) * (size_t)p->n_mels * (size_t)p->n_bins);
    p->mel_lo = hark_malloc(sizeof(int) * (size_t)p->n_mels);
    p->mel_hi = hark_malloc(sizeof(int) * (size_t)p->n_mels);
    if (!p->window || !p->mel || !p->mel_lo || !p->mel_hi)
        goto nomem;
    int W = p->win_length;
    /* windows exactly as torch computes them (see torch_window) */
    if (opts->kind == FEAT_FBANK)
        torch_window(p->window, W, 0, 0.85f); /* povey: symmetric hann ^ 0.85 */
    else if (opts->kind == FEAT_NEMO_MEL)
        torch_window(p->window, W, 0, 1.0f); /* torch.hann_window(periodic=False) */
    else
        torch_window(p->window, W, 1, 1.0f); /* periodic hann (torch default, scipy fftbins) */
    if (opts->kind == FEAT_FBANK) {
        /* Kaldi's high_freq <= 0 is an offset from Nyquist: icefall's -400 */
        float high = (float)rate / 2 + (opts->fbank_variant == FBANK_ICEFALL ? -400.0f : 0.0f);
        mel_kaldi(p->mel, p->n_mels, p->n_fft, (float)rate, 20.0f, high);
    } else {
        double fmax = opts->kind == FEAT_TTS_MEL ? 8000.0 : rate / 2;
        if (fmax > rate / 2)
            fmax = rate / 2;
        if (mel_slaney(p->mel, p->n_mels, p->n_fft, rate, 0.0, fmax))
            goto nomem;
    }
    for (int m = 0; m < p->n_mels; m++) {
        const float *row = p->mel + (size_t)m * p->n_bins;
        int lo = 0, hi = p->n_bins;
        while (lo < hi && row[lo] == 0.0f)
            lo++;
        while (hi > lo && row[hi - 1] == 0.0f)
            hi--;
        p->mel_lo[m] = lo;
        p->mel_hi[m] = hi;
    }
    p->torch_fft = (p->n_fft & (p->n_fft - 1)) == 0; /* powers of two: torch's order */
    if (p->torch_fft) {
        if (rfft_plan_init(&p->rfft, p->n_fft))
            goto nomem;
        *out = p;
        return HARK_OK;
    }
    pthread_mutex_lock(&fftw_planner_lock);
    float *in = fftwf_malloc(sizeof(float) * (size_t)p->n_fft);
    fftwf_complex *spec = fftwf_malloc(sizeof(fftwf_complex) * (size_t)p->n_bins);
    if (in && spec)
        p->fft_plan = fftwf_plan_dft_r2c_1d(p->n_fft, in, spec, FFTW_ESTIMATE);
    fftwf_free(in);
    fftwf_free(spec);
    pthread_mutex_unlock(&fftw_planner_lock);
    if (!p->fft_plan)
        goto nomem;
    *out = p;
    return HARK_OK;
nomem:
    feat_plan_destroy(p);
    return err_set(err, HARK_ERR_NOMEM, "features: out of memory");
}

void feat_plan_destroy(feat_plan_t *p)
{
    if (!p)
        return;
    if (p->fft_plan) {
        pthread_mutex_lock(&fftw_planner_lock);
        fftwf_destroy_plan((fftwf_plan)p->fft_plan);
        pthread_mutex_unlock(&fftw_planner_lock);
    }
    rfft_plan_free(&p->rfft);
    hark_free(p->window);
    hark_free(p->mel);
    hark_free(p->mel_lo);
    hark_free(p->mel_hi);
    hark_free(p);
}

int feat_num_frames(const feat_plan_t *p, size_t n)
{
    if (n == 0)
        return 0;
    switch (p->opts.kind) {
    case FEAT_FBANK:
        if (p->pad == FEAT_PAD_KALDI) /* snip_edges=false */
            return (int)((n + (size_t)p->hop / 2) / (size_t)p->hop);
        return n < (size_t)p->win_length ? 0
                                         : (int)(1 + (n - (size_t)p->win_length) / (size_t)p->hop);
    case FEAT_NEMO_MEL: /* valid frames: ceil(n / hop) (Jasper get_seq_len) */
        return (int)((n + (size_t)p->hop - 1) / (size_t)p->hop);
    case FEAT_TTS_MEL: {
        size_t padded = n + 2 * (size_t)p->pad_left;
        return padded < (size_t)p->n_fft ? 0
                                         : (int)(1 + (padded - (size_t)p->n_fft) / (size_t)p->hop);
    }
    }
    return 0;
}

/* ---- compute ------------------------------------------------------------------------------ */

/* Kaldi's ExtractWindow reflection (snip_edges=false): the edge sample is repeated. */
static inline long reflect_index_kaldi(long i, long n)
{
    while (i < 0 || i >= n)
        i = i < 0 ? -i - 1 : 2 * n - 1 - i;
    return i;
}

/* torch's 'reflect' padding (edge sample not repeated), folded again for very short signals. */
static inline long reflect_index(long i, long n)
{
    if (n == 1)
        return 0;
    while (i < 0 || i >= n) {
        if (i < 0)
            i = -i;
        if (i >= n)
            i = 2 * (n - 1) - i;
    }
    return i;
}

static double gauss(unsigned long long *s)
{
    /* xorshift64* + Box-Muller; deterministic per seed */
    double u[2];
    for (int k = 0; k < 2; k++) {
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        u[k] = ((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
    }
    if (u[0] < 1e-300)
        u[0] = 1e-300;
    return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

/* Power (or magnitude) spectrum, mel filterbank and log for RFFT_LANES frames at once, lanes
 * innermost so the loops become SIMD while every lane keeps the single-frame operation order.
 * specl: lane-interleaved spectra; pwl: scratch of n_bins * RFFT_LANES; out: (nv, n_mels). */
__attribute__((target_clones("avx2", "default"))) static void
mel_lanes(const feat_plan_t *restrict p, float *restrict out, int nv, const float *restrict specl,
          float *restrict pwl)
{
    enum { L = RFFT_LANES };
    for (int k = 0; k < p->n_bins; k++) {
        const float *re = specl + (size_t)2 * k * L, *im = re + L;
        float *pk = pwl + (size_t)k * L;
        if (p->magnitude) {
#pragma GCC ivdep
            for (int l = 0; l < L; l++)
                pk[l] = sqrtf(re[l] * re[l] + im[l] * im[l] + p->mag_eps);
        } else {
#pragma GCC ivdep
            for (int l = 0; l < L; l++) { /* torch: abs() then pow(2) */
                float a = sqrtf(re[l] * re[l] + im[l] * im[l]);
                pk[l] = a * a;
            }
        }
    }
    for (int m = 0; m < p->n_mels; m++) {
        const float *row = p->mel + (size_t)m * p->n_bins;
        float acc[L] = {0};
        for (int k = p->mel_lo[m]; k < p->mel_hi[m]; k++)
#pragma GCC ivdep
            for (int l = 0; l < L; l++)
                acc[l] += row[k] * pwl[(size_t)k * L + l];
        for (int l = 0; l < nv; l++)
            out[(size_t)l * p->n_mels + m] = p->log_mode == FEAT_LOG_MAX
                                                 ? logf(acc[l] > p->log_eps ? acc[l] : p->log_eps)
                                                 : logf(acc[l] + p->log_eps);
    }
}

int feat_compute(const feat_plan_t *p, const float *x, size_t n, float *out, hark_err_t *err)
{
    return feat_compute_padded(p, x, n, n, out, err);
}

/* One call's scratch of the framing and FFT stages */
typedef struct {
    float *frame, *buf, *pw, *xl, *specl;
    fftwf_complex *spec;
} frame_scratch_t;

static void scratch_free(frame_scratch_t *s)
{
    hark_free(s->frame);
    fftwf_free(s->buf);
    fftwf_free(s->spec);
    hark_free(s->pw);
    hark_free(s->xl);
}

static int scratch_alloc(const feat_plan_t *p, frame_scratch_t *s)
{
    memset(s, 0, sizeof *s);
    s->frame = hark_malloc(sizeof(float) * (size_t)p->frame_span);
    s->buf = fftwf_malloc(sizeof(float) * (size_t)p->n_fft);
    s->spec = fftwf_malloc(sizeof(fftwf_complex) * (size_t)p->n_bins);
    s->pw = hark_malloc(sizeof(float) * (size_t)p->n_bins);
    /* RFFT_LANES frames at a time: input + work (2 * n_fft * L), spectra (2 * n_bins * L) */
    s->xl = hark_malloc(sizeof(float) * (size_t)RFFT_LANES *
                        (2 * (size_t)p->n_fft + 2 * (size_t)p->n_bins));
    s->specl = s->xl ? s->xl + (size_t)2 * p->n_fft * RFFT_LANES : NULL;
    if (!s->frame || !s->buf || !s->spec || !s->pw || !s->xl) {
        scratch_free(s);
        return HARK_ERR_NOMEM;
    }
    return HARK_OK;
}

/* Frames [t_begin, t_end) of a signal of n samples (reflection and framing over n) of which sig
 * holds the samples from `base` on, each taken times scale -> out (t_end - t_begin, n_mels); every
 * sample a frame reads must be held (the callers make sure). */
static void run_frames(const feat_plan_t *p, const float *sig, long base, long n, float scale,
                       int t_begin, int t_end, float *out, unsigned long long *rng,
                       frame_scratch_t *sc)
{
    float *frame = sc->frame, *buf = sc->buf, *pw = sc->pw, *xl = sc->xl, *specl = sc->specl;
    fftwf_complex *spec = sc->spec;
    const int S = p->frame_span, W = p->win_length, L = RFFT_LANES, NF = p->n_fft;
    const int T = t_end - t_begin;
    for (int t0 = 0; t0 < T; t0 += L) {
        /* frames t0 .. t0+L-1 (from t_begin) are windowed into lane l of xl (lane-interleaved) */
        for (int l = 0; l < L; l++) {
            int t = t0 + l;
            if (t >= T) {
                for (int j = 0; j < NF; j++)
                    xl[(size_t)j * L + l] = 0.0f;
                continue;
            }
            long start = (long)(t_begin + t) * p->hop - p->pad_left;
            if (p->pad == FEAT_PAD_NONE) {
                for (int j = 0; j < S; j++)
                    frame[j] = sig[start + j - base] * scale;
            } else if (p->pad == FEAT_PAD_KALDI) {
                for (int j = 0; j < S; j++)
                    frame[j] = sig[reflect_index_kaldi(start + j, n) - base] * scale;
            } else {
                for (int j = 0; j < S; j++)
                    frame[j] = sig[reflect_index(start + j, n) - base] * scale;
            }
            if (p->frame_dc_preemph) {
                if (p->opts.dither > 0)
                    for (int j = 0; j < S; j++)
                        frame[j] += (float)(p->opts.dither * gauss(rng));
                double sum = 0; /* torch's float mean is accurate to the last bit; so is this */
                for (int j = 0; j < S; j++)
                    sum += frame[j];
                float mean = (float)(sum / S);
                for (int j = 0; j < S; j++)
                    frame[j] -= mean;
                for (int j = S - 1; j > 0; j--)
                    frame[j] -= p->preemph * frame[j - 1];
                frame[0] -= p->preemph * frame[0];
            }
            const float *fsrc = frame + (S == W ? 0 : p->win_offset);
            float *col = xl + l; /* lane l, stride L */
            const int off = p->win_offset;
            for (int j = 0; j < off; j++)
                col[(size_t)j * L] = 0.0f;
            for (int j = 0; j < W; j++)
                col[(size_t)(off + j) * L] = fsrc[j] * p->window[j];
            for (int j = off + W; j < NF; j++)
                col[(size_t)j * L] = 0.0f;
        }
        if (p->torch_fft) {
            rfft_forward_lanes(&p->rfft, xl, xl + (size_t)NF * L, specl);
            int nv = T - t0 < L ? T - t0 : L;
            mel_lanes(p, out + (size_t)t0 * p->n_mels, nv, specl, xl /* free after the FFT */);
            continue;
        }
        for (int l = 0; l < L && t0 + l < T; l++) { /* FFTW path (non power-of-two sizes) */
            int t = t0 + l;
            for (int j = 0; j < NF; j++)
                buf[j] = xl[(size_t)j * L + l];
            fftwf_execute_dft_r2c((fftwf_plan)p->fft_plan, buf, spec);
            for (int k = 0; k < p->n_bins; k++) {
                float re = spec[k][0], im = spec[k][1];
                float pk = re * re + im * im;
                pw[k] = p->magnitude ? sqrtf(pk + p->mag_eps) : pk;
            }
            float *o = out + (size_t)t * p->n_mels;
            for (int m = 0; m < p->n_mels; m++) {
                const float *row = p->mel + (size_t)m * p->n_bins;
                float acc = 0;
                for (int k = p->mel_lo[m]; k < p->mel_hi[m]; k++)
                    acc += row[k] * pw[k];
                o[m] = p->log_mode == FEAT_LOG_MAX ? logf(acc > p->log_eps ? acc : p->log_eps)
                                                   : logf(acc + p->log_eps);
            }
        }
    }
}

int feat_compute_padded(const feat_plan_t *p, const float *x, size_t n, size_t n_valid, float *out,
                        hark_err_t *err)
{
    if (n_valid > n)
        return err_set(err, HARK_ERR_INVALID_ARG, "features: %zu valid samples of a %zu-sample row",
                       n_valid, n);
    int T = feat_num_frames(p, n_valid);
    if (T == 0)
        return HARK_OK;
    unsigned long long rng = 0x9E3779B97F4A7C15ull ^ p->opts.dither_seed;
    float *sig = hark_malloc(sizeof(float) * n);
    frame_scratch_t sc;
    if (!sig || scratch_alloc(p, &sc)) {
        hark_free(sig);
        return err_set(err, HARK_ERR_NOMEM, "features: out of memory");
    }
    /* signal-level stages: scale, (nemo) dither and pre-emphasis */
    for (size_t i = 0; i < n; i++)
        sig[i] = x[i] * p->input_scale;
    if (p->signal_preemph) {
        if (p->opts.dither > 0)
            for (size_t i = 0; i < n; i++)
                sig[i] += (float)(p->opts.dither * gauss(&rng));
        for (size_t i = n - 1; i > 0; i--)
            sig[i] -= p->preemph * sig[i - 1];
    }
    run_frames(p, sig, 0, (long)n, 1.0f, 0, T, out, &rng, &sc);
    if (p->normalize) { /* per feature over the T valid frames; unbiased std + 1e-5 */
        for (int m = 0; m < p->n_mels; m++) {
            double sum = 0, sq = 0;
            for (int t = 0; t < T; t++)
                sum += out[(size_t)t * p->n_mels + m];
            double mean = sum / T;
            for (int t = 0; t < T; t++) {
                double d = out[(size_t)t * p->n_mels + m] - mean;
                sq += d * d;
            }
            double sd = T > 1 ? sqrt(sq / (T - 1)) : 0.0;
            float fm = (float)mean, fs = (float)sd + 1e-5f;
            for (int t = 0; t < T; t++)
                out[(size_t)t * p->n_mels + m] = (out[(size_t)t * p->n_mels + m] - fm) / fs;
        }
    }
    hark_free(sig);
    scratch_free(&sc);
    return HARK_OK;
}

int feat_frames_final(const feat_plan_t *p, size_t n)
{
    if (p->opts.kind != FEAT_FBANK)
        return 0;
    /* frame t reads [t hop - pad_left, t hop - pad_left + span) (reflected at the start) */
    long last = ((long)n + p->pad_left - p->frame_span);
    return last < 0 ? 0 : (int)(last / p->hop + 1);
}

int feat_compute_frames(const feat_plan_t *p, const float *x, size_t base, size_t held,
                        size_t n_total, int t0, int nt, float *out, hark_err_t *err)
{
    if (p->opts.kind != FEAT_FBANK || p->opts.dither > 0)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "features: frame ranges are for the Kaldi fbank without dither");
    if (nt <= 0)
        return HARK_OK;
    if (t0 < 0 || base + held > n_total || t0 + nt > feat_num_frames(p, n_total))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "features: frames [%d, %d) of a %zu-sample signal (samples [%zu, %zu) held)",
                       t0, t0 + nt, n_total, base, base + held);
    /* the samples the frames read: each frame's window, reflected into [0, n_total) */
    long lo = (long)t0 * p->hop - p->pad_left, hi = (long)(t0 + nt - 1) * p->hop - p->pad_left;
    hi += p->frame_span;
    lo = lo < 0 ? 0 : lo;
    hi = hi > (long)n_total ? (long)n_total : hi; /* past the end: reflected back inside */
    if (lo < (long)base || hi > (long)(base + held))
        return err_set(
            err, HARK_ERR_INVALID_ARG,
            "features: frames [%d, %d) read samples [%ld, %ld), only [%zu, %zu) are held", t0,
            t0 + nt, lo, hi, base, base + held);
    frame_scratch_t sc;
    if (scratch_alloc(p, &sc))
        return err_set(err, HARK_ERR_NOMEM, "features: out of memory");
    unsigned long long rng = 0;
    run_frames(p, x, (long)base, (long)n_total, p->input_scale, t0, t0 + nt, out, &rng, &sc);
    scratch_free(&sc);
    return HARK_OK;
}
