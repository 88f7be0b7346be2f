/* Tests for audio_reader_* (src/audio/audio.c): a file read block by block in random sizes is
 * audio_decode_file's result bit for bit — at the file's rate (16 kHz mono WAV, and a stereo
 * 44.1 kHz WAV mixed down) and resampled (streaming libsoxr gives its one-shot call's samples);
 * errors for a missing, empty or truncated file. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *read_all(test_ctx_t *t, const char *path, int rate, size_t *n, unsigned seed)
{
    audio_reader_t *r = NULL;
    hark_err_t err = {0};
    if (audio_reader_open(path, rate, &r, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "audio_reader_open: %s", err.msg);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0, got;
    float *x = malloc(cap * sizeof *x);
    for (;;) {
        size_t want = 1 + test_rand(&seed) % 5000;
        if (len + want > cap) {
            cap = 2 * (len + want);
            float *nx = realloc(x, cap * sizeof *x);
            if (!nx) {
                test_fail(t, __FILE__, __LINE__, "out of memory");
                free(x);
                audio_reader_close(r);
                return NULL;
            }
            x = nx;
        }
        if (audio_reader_read(r, x + len, want, &got, &err) != HARK_OK) {
            test_fail(t, __FILE__, __LINE__, "audio_reader_read: %s", err.msg);
            free(x);
            audio_reader_close(r);
            return NULL;
        }
        if (!got)
            break;
        len += got;
    }
    audio_reader_close(r);
    *n = len;
    return x;
}

static void compare(test_ctx_t *t, const char *path, int rate, double tol)
{
    audio_t a = {0};
    hark_err_t err = {0};
    CHECK_OK(audio_decode_file(path, &(audio_opts_t){.target_rate = rate}, &a, &err));
    size_t n = 0;
    float *x = read_all(t, path, rate, &n, 7u + (unsigned)rate);
    CHECK(x != NULL);
    double d = n == a.n ? test_max_abs_diff(x, a.samples, n) : INFINITY;
    printf("  %s at %d Hz: %zu samples (decode %zu), max |diff| %.3g\n", strrchr(path, '/') + 1,
           rate, n, a.n, d);
    free(x);
    audio_free(&a);
    CHECKF(d <= tol, "max |diff| %.3g > %.0e (or lengths differ)", d, tol);
}

TEST(audio_reader_matches_decode)
{
    NEED_SHARED("audio/en/wav/jfk.wav");
    const char *wav = test_shared("audio/en/wav/jfk.wav");
    compare(t, wav, 0, 0.0);
    compare(t, wav, 16000, 0.0);
    compare(t, wav, 8000, 0.0);
    /* stereo 44.1 kHz: mixed down, and resampled to 16 kHz */
    audio_t a = {0};
    CHECK_OK(audio_decode_file(wav, NULL, &a, NULL));
    char path[600];
    snprintf(path, sizeof path, "%s/st.wav", test_tmpdir(t));
    SF_INFO info = {.samplerate = 44100, .channels = 2, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    CHECK(f != NULL);
    for (size_t i = 0; i < a.n; i++) {
        short fr[2] = {(short)(a.samples[i] * 32767), (short)(-a.samples[i] * 16000)};
        sf_writef_short(f, fr, 1);
    }
    sf_close(f);
    audio_free(&a);
    compare(t, path, 0, 0.0);
    compare(t, path, 16000, 0.0);
}

TEST(audio_reader_errors)
{
    audio_reader_t *r = NULL;
    hark_err_t err = {0};
    CHECK_EQ_INT(audio_reader_open("/nonexistent.wav", 0, &r, &err), HARK_ERR_IO);
    CHECK(r == NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/empty.wav", test_tmpdir(t));
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK_EQ_INT(audio_reader_open(path, 0, &r, &err), HARK_ERR_FORMAT);
    CHECK_EQ_INT(audio_reader_open(path, 5, &r, &err), HARK_ERR_INVALID_ARG);
    NEED_SHARED("audio/en/wav/jfk.wav");
    /* a WAV cut in the middle of its data */
    snprintf(path, sizeof path, "%s/cut.wav", test_tmpdir(t));
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "head -c 100000 '%s' > '%s'", test_shared("audio/en/wav/jfk.wav"),
             path);
    CHECK_OK(system(cmd));
    int rc = audio_reader_open(path, 0, &r, &err);
    CHECK_EQ_INT(rc, HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "truncated") != NULL, "%s", err.msg);
}
