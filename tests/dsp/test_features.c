/* Tests for src/dsp/features.c and cmvn.c: Kaldi fbank against WeNet's golden features, frame
 * counts, NeMo and TTS log-mel against tools/ref_features.py, bad options, OOM paths, and the
 * fbank of a stream (feat_compute_frames on the recent samples) = the whole signal's. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "dsp/cmvn.h"
#include "dsp/features.h"
#include "hark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *golden_utts[] = {"librispeech-1995-1837-0001", "jfk",
                                    "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                    "cards-001"};
#define GOLDEN "golden/wenet_u2pp_conformer_small"

TEST(fbank_matches_wenet_golden)
{
    NEED_SHARED(GOLDEN);
    feat_opts_t o;
    feat_default_opts(&o, FEAT_FBANK);
    feat_plan_t *p;
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    cmvn_t cmvn;
    CHECK_OK(cmvn_load_json(test_shared(GOLDEN "/global_cmvn"), &cmvn, NULL));
    double worst = 0, worst_cmvn = 0;
    for (int u = 0; u < 5; u++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/goldens/%s/waveform.npy", test_shared(GOLDEN),
                 golden_utts[u]);
        npy_array_t wav, ref, ref_cmvn;
        CHECK_OK(npy_load_f32(path, &wav));
        snprintf(path, sizeof path, "%s/goldens/%s/fbank.npy", test_shared(GOLDEN), golden_utts[u]);
        CHECK_OK(npy_load_f32(path, &ref));
        snprintf(path, sizeof path, "%s/goldens/%s/feats_cmvn.npy", test_shared(GOLDEN),
                 golden_utts[u]);
        CHECK_OK(npy_load_f32(path, &ref_cmvn));
        float *x = wav.data;
        for (size_t i = 0; i < wav.count; i++)
            x[i] /= 32768.0f; /* the golden waveform is in int16 units */
        int T = feat_num_frames(p, wav.count);
        CHECK_EQ_INT(T, ref.shape[0]);
        CHECK_EQ_INT(feat_dim(p), ref.shape[1]);
        float *f = malloc(sizeof(float) * (size_t)T * 80);
        CHECK_OK(feat_compute(p, x, wav.count, f, NULL));
        double e = test_max_abs_diff(f, ref.data, (size_t)T * 80);
        if (e > worst)
            worst = e;
        cmvn_apply(&cmvn, f, (size_t)T);
        double ec = test_max_abs_diff(f, ref_cmvn.data, (size_t)T * 80);
        if (ec > worst_cmvn)
            worst_cmvn = ec;
        free(f);
        npy_free(&wav);
        npy_free(&ref);
        npy_free(&ref_cmvn);
        printf("    %s: %.3g\n", golden_utts[u], e);
        (void)0;
        CHECKF(ec <= 1e-3, "%s: fbank+cmvn max abs error %.3g > 1e-3", golden_utts[u], ec);
    }
    printf("    fbank vs WeNet golden: max abs error %.3g (after CMVN %.3g)\n", worst, worst_cmvn);
    cmvn_free(&cmvn);
    feat_plan_destroy(p);
}

TEST(cmvn_matches_golden_buffers)
{
    NEED_SHARED(GOLDEN);
    cmvn_t c;
    CHECK_OK(cmvn_load_json(test_shared(GOLDEN "/global_cmvn"), &c, NULL));
    npy_array_t m, s;
    CHECK_OK(npy_load_f32(test_shared(GOLDEN "/goldens/cmvn_mean.npy"), &m));
    CHECK_OK(npy_load_f32(test_shared(GOLDEN "/goldens/cmvn_istd.npy"), &s));
    CHECK_EQ_INT(c.dim, m.count);
    CHECK(test_max_abs_diff(c.mean, m.data, m.count) == 0.0);
    CHECK(test_max_abs_diff(c.istd, s.data, s.count) == 0.0);
    npy_free(&m);
    npy_free(&s);
    cmvn_free(&c);
}

TEST(cmvn_rejects_bad_json)
{
    cmvn_t c;
    hark_err_t e = {0};
    CHECK_EQ_INT(cmvn_parse_json("{", 1, "x", &c, &e), HARK_ERR_FORMAT);
    const char *t1 = "{\"mean_stat\": [1, 2], \"var_stat\": [1], \"frame_num\": 3}";
    CHECK_EQ_INT(cmvn_parse_json(t1, strlen(t1), "x", &c, &e), HARK_ERR_FORMAT);
    CHECK(strstr(e.msg, "var_stat") != NULL);
    const char *t2 = "{\"mean_stat\": [1, 2], \"var_stat\": [5, 6], \"frame_num\": 0}";
    CHECK_EQ_INT(cmvn_parse_json(t2, strlen(t2), "x", &c, &e), HARK_ERR_FORMAT);
    const char *t3 = "{\"mean_stat\": [2, 4], \"var_stat\": [8, 20], \"frame_num\": 2}";
    CHECK_OK(cmvn_parse_json(t3, strlen(t3), "x", &c, &e));
    CHECK(c.mean[0] == 1.0f && c.mean[1] == 2.0f);
    CHECK(fabsf(c.istd[0] - 1.0f / sqrtf(3.0f)) < 1e-6f &&
          fabsf(c.istd[1] - 1.0f / sqrtf(6.0f)) < 1e-6f);
    cmvn_free(&c);
    CHECK_EQ_INT(cmvn_load_json("/nonexistent", &c, &e), HARK_ERR_IO);
}

TEST(feature_frame_counts)
{
    feat_opts_t o;
    feat_plan_t *p;
    feat_default_opts(&o, FEAT_FBANK);
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    CHECK_EQ_INT(feat_num_frames(p, 0), 0);
    CHECK_EQ_INT(feat_num_frames(p, 399), 0);
    CHECK_EQ_INT(feat_num_frames(p, 400), 1);
    CHECK_EQ_INT(feat_num_frames(p, 16000), 98);
    feat_plan_destroy(p);
    feat_default_opts(&o, FEAT_NEMO_MEL);
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    CHECK_EQ_INT(feat_num_frames(p, 16000), 100);
    CHECK_EQ_INT(feat_num_frames(p, 16001), 101);
    CHECK_EQ_INT(feat_num_frames(p, 1), 1);
    feat_plan_destroy(p);
    feat_default_opts(&o, FEAT_TTS_MEL);
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    CHECK_EQ_INT(feat_num_frames(p, 22050), 86); /* 1 + (22050 + 768 - 1024) / 256 */
    CHECK_EQ_INT(feat_num_frames(p, 255), 0);
    CHECK_EQ_INT(feat_num_frames(p, 256), 1);
    feat_plan_destroy(p);
}

/* A stream's fbank as a streaming front end computes it (src/model/icefall/icefall_stream.c):
 * samples arrive in pieces, the final frames are computed on the samples kept since the next
 * frame's window, the rest at the end (reflected there). Every frame must equal feat_compute's
 * over the whole signal, bit for bit, for every variant and for signals shorter than a window. */
TEST(fbank_stream_equals_whole)
{
    static const feat_fbank_variant_t variants[] = {FBANK_WENET, FBANK_ICEFALL, FBANK_SHERPA};
    static const size_t totals[] = {1, 150, 399, 400, 401, 560, 16000, 23457};
    static const size_t pieces[] = {1, 7, 160, 1234, 4000};
    unsigned seed = 11;
    float *x = hark_malloc(sizeof(float) * 23457);
    for (int i = 0; i < 23457; i++)
        x[i] =
            0.4f * sinf(0.021f * (float)i) * sinf(0.0011f * (float)i) + 0.03f * test_randf(&seed);
    float *whole = hark_malloc(sizeof(float) * 160 * 80);
    float *got = hark_malloc(sizeof(float) * 160 * 80);
    int checked = 0;
    for (int v = 0; v < 3; v++) {
        feat_opts_t o;
        feat_plan_t *p;
        feat_default_opts(&o, FEAT_FBANK);
        o.fbank_variant = variants[v];
        CHECK_OK(feat_plan_create(&o, &p, NULL));
        for (int ti = 0; ti < 8; ti++) {
            const size_t n = totals[ti];
            const int T = feat_num_frames(p, n);
            CHECK_OK(feat_compute(p, x, n, whole, NULL));
            for (int pi = 0; pi < 5; pi++) {
                /* the stream keeps samples [base, have) */
                size_t have = 0, base = 0;
                int done = 0;
                while (have < n) {
                    size_t k = pieces[pi] < n - have ? pieces[pi] : n - have;
                    have += k;
                    int fin = feat_frames_final(p, have);
                    CHECK(fin <= feat_num_frames(p, have));
                    if (fin > done) {
                        CHECK_OK(feat_compute_frames(p, x + base, base, have - base, have, done,
                                                     fin - done, got + (size_t)done * 80, NULL));
                        done = fin;
                    }
                    long keep = (long)done * p->hop - p->pad_left; /* the next frame's window */
                    base = keep > 0 ? (size_t)keep : 0;
                }
                CHECK_OK(feat_compute_frames(p, x + base, base, have - base, n, done, T - done,
                                             got + (size_t)done * 80, NULL));
                CHECKF(T == 0 || test_max_abs_diff(got, whole, (size_t)T * 80) == 0,
                       "variant %d, %zu samples in pieces of %zu: the stream's fbank differs by "
                       "%g",
                       v, n, pieces[pi], test_max_abs_diff(got, whole, (size_t)T * 80));
                checked++;
            }
        }
        /* a frame reading a sample that is not held, frames past the signal's */
        hark_err_t e = {0};
        CHECK_EQ_INT(feat_compute_frames(p, x + 1000, 1000, 2000, 3000, 0, 1, got, &e),
                     HARK_ERR_INVALID_ARG);
        CHECK(strstr(e.msg, "held") != NULL);
        CHECK_EQ_INT(feat_compute_frames(p, x, 0, 3000, 3000, 0, 40, got, &e),
                     HARK_ERR_INVALID_ARG);
        feat_plan_destroy(p);
    }
    printf("  %d streams of 3 fbank variants: every frame equal to the whole signal's\n", checked);
    feat_opts_t o;
    feat_plan_t *p;
    feat_default_opts(&o, FEAT_NEMO_MEL);
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    CHECK_EQ_INT(feat_compute_frames(p, x, 0, 4000, 4000, 0, 1, got, NULL), HARK_ERR_UNSUPPORTED);
    feat_plan_destroy(p);
    hark_free(x);
    hark_free(whole);
    hark_free(got);
}

TEST(feature_bad_options_and_oom)
{
    feat_opts_t o;
    feat_plan_t *p;
    hark_err_t e = {0};
    feat_default_opts(&o, FEAT_FBANK);
    o.num_mel_bins = 0;
    CHECK_EQ_INT(feat_plan_create(&o, &p, &e), HARK_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "num_mel_bins") != NULL);
    feat_default_opts(&o, FEAT_FBANK);
    o.sample_rate = 5;
    CHECK_EQ_INT(feat_plan_create(&o, &p, &e), HARK_ERR_INVALID_ARG);
    feat_default_opts(&o, FEAT_NEMO_MEL);
    for (long k = 1; k < 12; k++) { /* every allocation of plan + compute may fail cleanly */
        alloc_fail_after(k);
        int rc = feat_plan_create(&o, &p, NULL);
        if (rc == HARK_OK) {
            float x[4000], y[26 * 64];
            for (int i = 0; i < 4000; i++)
                x[i] = 0.1f * sinf(0.05f * i);
            rc = feat_compute(p, x, 4000, y, NULL);
            feat_plan_destroy(p);
        }
        alloc_fail_reset();
        CHECK(rc == HARK_OK || rc == HARK_ERR_NOMEM);
    }
}

TEST(fbank_silence_hits_floor)
{
    feat_opts_t o;
    feat_plan_t *p;
    feat_default_opts(&o, FEAT_FBANK);
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    float x[1600] = {0}, y[8 * 80];
    CHECK_OK(feat_compute(p, x, 1600, y, NULL));
    for (int i = 0; i < 8 * 80; i++)
        CHECK(fabsf(y[i] - logf(1.1920929e-07f)) < 1e-6f);
    feat_plan_destroy(p);
}

/* ---- NeMo and TTS log-mel against tools/ref_features.py (the original code's arithmetic in
 * PyTorch). Needs /usr/bin/python3 with torch + torchaudio; both sides get the same samples. */

#include "audio/audio.h"
#include "core/npy.h"

static int have_torch(void)
{
    return system("/usr/bin/python3 -c 'import torch, torchaudio' >/dev/null 2>&1") == 0;
}

/* Runs the reference on `x` and compares with feat_compute; returns max abs error or -1. */
static double compare_with_reference(test_ctx_t *t, feat_kind_t kind, const char *extra,
                                     const float *x, size_t n, int *frames)
{
    char in[512], out[512], cmd[2048];
    snprintf(in, sizeof in, "%s/in.npy", test_tmpdir(t));
    snprintf(out, sizeof out, "%s/ref.npy", test_tmpdir(t));
    int64_t shape = (int64_t)n;
    if (npy_save_f32(in, x, 1, &shape))
        return -1;
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/ref_features.py --kind %s %s %s %s 2>&1",
             feat_kind_name(kind), extra, in, out);
    if (system(cmd) != 0)
        return -1;
    npy_array_t ref;
    if (npy_load_f32(out, &ref))
        return -1;
    feat_opts_t o;
    feat_default_opts(&o, kind);
    if (strstr(extra, "tacotron2"))
        o.tts_variant = TTS_MEL_TACOTRON2;
    feat_plan_t *p;
    if (feat_plan_create(&o, &p, NULL))
        return -1;
    int T = feat_num_frames(p, n);
    *frames = T;
    double e = -1;
    if (ref.ndim == 2 && ref.shape[0] == T && ref.shape[1] == feat_dim(p)) {
        float *f = malloc(sizeof(float) * (size_t)T * (size_t)feat_dim(p) + 4);
        if (feat_compute(p, x, n, f, NULL) == HARK_OK)
            e = test_max_abs_diff(f, ref.data, (size_t)T * (size_t)feat_dim(p));
        free(f);
    } else {
        printf("    shape mismatch: reference (%lld, %lld), hark (%d, %d)\n",
               (long long)ref.shape[0], ref.ndim > 1 ? (long long)ref.shape[1] : -1LL, T,
               feat_dim(p));
    }
    npy_free(&ref);
    feat_plan_destroy(p);
    return e;
}

/* tol: on real speech; tol_short: on the short cuts (quiet bins are rarer there). */
static void reference_case(test_ctx_t *t, feat_kind_t kind, const char *extra, int rate, double tol,
                           double tol_short)
{
    if (!have_torch())
        SKIP("/usr/bin/python3 with torch and torchaudio is absent");
    NEED_SHARED("audio/en/wav/jfk.wav");
    audio_opts_t ao = {.target_rate = rate};
    audio_t a;
    CHECK_OK(audio_decode_file(test_shared("audio/en/wav/jfk.wav"), &ao, &a, NULL));
    /* real speech, plus awkward lengths of a synthetic signal */
    size_t lens[3] = {a.n, 4801, 1237};
    for (int c = 0; c < 3; c++) {
        int T = 0;
        double e = compare_with_reference(t, kind, extra, a.samples, lens[c], &T);
        printf("    %s %s: n=%zu T=%d max abs error %.3g\n", feat_kind_name(kind), extra, lens[c],
               T, e);
        double lim = c == 0 ? tol : tol_short;
        CHECKF(e >= 0 && e <= lim, "%s %s n=%zu: max abs error %.3g > %.1g", feat_kind_name(kind),
               extra, lens[c], e, lim);
    }
    audio_free(&a);
}

TEST(nemo_mel_matches_reference)
{
    reference_case(t, FEAT_NEMO_MEL, "", 16000, 1e-4, 1e-4);
}

TEST(tts_mel_hifigan_matches_reference)
{
    reference_case(t, FEAT_TTS_MEL, "--variant hifigan", 22050, 1e-4, 1e-4);
}

/* DLE's Tacotron2 computes its STFT as a float32 conv1d with a DFT basis, whose summation order
 * belongs to the convolution backend (oneDNN here, cuDNN on a GPU), not to an FFT; on the quietest
 * bins of real speech that rounding alone is ~1e-3 in log-mel. hark computes the same transform
 * with the FFT; on real speech the bound is therefore 2e-3, on the short cuts 1e-4. */
TEST(tts_mel_tacotron2_matches_reference)
{
    reference_case(t, FEAT_TTS_MEL, "--variant tacotron2", 22050, 2e-3, 1e-4);
}
