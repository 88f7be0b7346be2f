/* Tests for src/audio/encode.c: streamed WAV (header and 16-bit samples), OpenAI's 24 kHz PCM
 * through the streaming resampler (against the one-shot resampler), FLAC/MP3/Opus decoded back
 * by audio_decode_memory, a receiver that goes away, unknown formats. */
#include "test.h"

#include "audio/audio.h"
#include "audio/encode.h"
#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    unsigned char *b;
    size_t n, cap;
    int calls, stop_after;
} sink_t;

static int sink_write(void *u, const void *data, size_t len)
{
    sink_t *s = u;
    if (s->stop_after && s->calls >= s->stop_after)
        return 1;
    s->calls++;
    if (s->n + len > s->cap) {
        s->cap = (s->n + len) * 2;
        s->b = hark_realloc(s->b, s->cap);
    }
    memcpy(s->b + s->n, data, len);
    s->n += len;
    return 0;
}

/* a chirp with a quiet start, in [-0.9, 0.9] plus two clipped samples */
static float *signal(size_t n, int rate)
{
    float *x = hark_malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / rate;
        x[i] = (float)(0.9 * sin(2 * 3.14159265358979 * (200 + 400 * t) * t) *
                       (i < 100 ? i / 100.0 : 1));
    }
    x[n / 3] = 1.5f;
    x[n / 2] = -2.0f;
    return x;
}

/* encodes x in blocks of `block` samples */
static int encode(audio_enc_format_t f, const float *x, size_t n, int rate, size_t block, sink_t *s,
                  hark_err_t *err)
{
    audio_enc_t *e = NULL;
    int rc = audio_enc_open(f, rate, sink_write, s, &e, err);
    for (size_t i = 0; !rc && i < n; i += block)
        rc = audio_enc_write(e, x + i, n - i < block ? n - i : block, err);
    if (rc) {
        audio_enc_abort(e);
        return rc;
    }
    return audio_enc_close(e, err);
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

TEST(encode_wav_streamed)
{
    size_t n = 22050 + 333;
    float *x = signal(n, 22050);
    sink_t s = {0};
    hark_err_t err = {0};
    CHECK_OK(encode(AUDIO_ENC_WAV, x, n, 22050, 1000, &s, &err));
    CHECK(s.n == 44 + 2 * n);
    CHECK(!memcmp(s.b, "RIFF", 4) && !memcmp(s.b + 8, "WAVEfmt ", 8) &&
          !memcmp(s.b + 36, "data", 4));
    CHECK(le32(s.b + 4) == 0xFFFFFFFFu && le32(s.b + 40) == 0xFFFFFFFFu);
    CHECK(le32(s.b + 24) == 22050 && le32(s.b + 28) == 44100);
    CHECK(s.calls > 10); /* bytes left block by block */
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        int16_t v = (int16_t)(s.b[44 + 2 * i] | s.b[45 + 2 * i] << 8);
        float c = x[i] > 1 ? 1 : x[i] < -1 ? -1 : x[i];
        bad += v != (int16_t)lrintf(c * 32767.0f);
    }
    CHECK_EQ_INT(bad, 0);
    hark_free(s.b);
    hark_free(x);
}

TEST(encode_pcm_24k_equals_one_shot_resampling)
{
    size_t n = 3 * 22050 + 71;
    float *x = signal(n, 22050);
    for (size_t i = 0; i < n; i++) /* keep it inside [-1, 1]: resampling overshoot aside */
        x[i] *= 0.5f;
    sink_t s = {0};
    hark_err_t err = {0};
    CHECK_OK(encode(AUDIO_ENC_PCM, x, n, 22050, 4096, &s, &err));
    float *ref = NULL;
    size_t nref = 0;
    CHECK_OK(audio_resample(x, n, 22050, 24000, &ref, &nref, &err));
    size_t m = s.n / 2;
    CHECKF(m + 2 >= nref && m <= nref + 2, "%zu samples, one-shot %zu", m, nref);
    double worst = 0;
    for (size_t i = 0; i < m && i < nref; i++) {
        int16_t v = (int16_t)(s.b[2 * i] | s.b[2 * i + 1] << 8);
        double d = fabs(v / 32767.0 - ref[i]);
        worst = d > worst ? d : worst;
    }
    CHECKF(worst <= 2.0 / 32767, "max |streamed - one-shot| = %g", worst);
    CHECK(audio_enc_output_rate(AUDIO_ENC_PCM, 22050) == 24000);
    hark_free(ref);
    hark_free(s.b);
    hark_free(x);
}

/* a libsndfile format decoded back: length, and closeness to the source (at out_rate) */
static void roundtrip(test_ctx_t *t, audio_enc_format_t f, double tol_rms, const char *what)
{
    int rate = 22050;
    size_t n = 2 * rate + 500;
    float *x = signal(n, rate);
    sink_t s = {0};
    hark_err_t err = {0};
    int rc = encode(f, x, n, rate, 3000, &s, &err);
    if (rc == HARK_ERR_UNSUPPORTED) {
        hark_free(x);
        hark_free(s.b);
        SKIP(err.msg);
    }
    CHECKF(rc == HARK_OK, "%s: %s", what, err.msg);
    CHECK(s.calls == 1); /* whole, at close */
    int out_rate = audio_enc_output_rate(f, rate);
    audio_t a = {0};
    audio_opts_t ao = {.target_rate = out_rate};
    CHECKF(audio_decode_memory(s.b, s.n, &ao, &a, &err) == HARK_OK, "%s decodes: %s", what,
           err.msg);
    float *ref = NULL;
    size_t nref = 0;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 1 ? 1 : x[i] < -1 ? -1 : x[i];
    CHECK_OK(audio_resample(x, n, rate, out_rate, &ref, &nref, &err));
    /* codecs add a delay (MP3's encoder, Opus's pre-skip handled by the decoder): find the best
     * alignment within 3000 samples, then the RMS error */
    double best = 1e9;
    for (int lag = 0; lag < 3000; lag += 1) {
        double e2 = 0;
        size_t cnt = 0;
        for (size_t i = 2000; i + lag < a.n && i < nref - 2000; i += 7) {
            double d = a.samples[i + lag] - ref[i];
            e2 += d * d;
            cnt++;
        }
        if (cnt && sqrt(e2 / cnt) < best)
            best = sqrt(e2 / cnt);
    }
    CHECKF(best <= tol_rms, "%s: rms error %g", what, best);
    CHECKF(a.n + 4000 >= nref && a.n <= nref + 4000, "%s: %zu samples decoded, %zu sent", what, a.n,
           nref);
    audio_free(&a);
    hark_free(ref);
    hark_free(s.b);
    hark_free(x);
}

TEST(encode_flac_roundtrip)
{
    roundtrip(t, AUDIO_ENC_FLAC, 1e-4, "flac");
}

TEST(encode_mp3_roundtrip)
{
    roundtrip(t, AUDIO_ENC_MP3, 0.05, "mp3");
}

TEST(encode_opus_roundtrip)
{
    roundtrip(t, AUDIO_ENC_OPUS, 0.05, "opus");
}

TEST(encode_errors)
{
    audio_enc_format_t f;
    hark_err_t err = {0};
    CHECK(audio_enc_format_parse("aac", &f, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "aac") && strstr(err.msg, "opus"));
    CHECK(audio_enc_format_parse("wav", &f, &err) == HARK_OK && f == AUDIO_ENC_WAV);
    audio_enc_t *e = NULL;
    CHECK(audio_enc_open(AUDIO_ENC_WAV, 0, sink_write, NULL, &e, &err) == HARK_ERR_INVALID_ARG);
    CHECK(e == NULL);
    /* the receiver goes away after the header: the next block fails, nothing leaks */
    size_t n = 10000;
    float *x = signal(n, 16000);
    sink_t s = {.stop_after = 1};
    CHECK(encode(AUDIO_ENC_WAV, x, n, 16000, 4000, &s, &err) == HARK_ERR_CANCELLED);
    CHECK(s.n == 44);
    hark_free(s.b);
    hark_free(x);
}
