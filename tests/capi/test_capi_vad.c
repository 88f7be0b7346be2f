/* Tests for the public C API's voice activity detection (hark_detect_speech, include/hark.h)
 * with the real Silero VAD: a converted model loads as a "vad" model; segments of a batch of
 * utterances equal silero_vad_probs + silero_segments (seconds), with the defaults and with
 * options (max_speech_s, HARK_VAD_ZERO padding); empty audio has none; another input rate is
 * resampled; recognition on it and bad options are refused. */
#include "test.h"

#include "audio/audio.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "support/golden_silero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the engine's own segments of x with o, in seconds */
static int expected(const char *dir, const float *x, size_t n, const silero_seg_opts_t *o,
                    double *se, int max)
{
    silero_vad_t *m = NULL;
    if (silero_vad_load(dir, 1, &m, NULL))
        return -1;
    const silero_rate_t *r = silero_vad_rate(m, 16000);
    size_t nw = silero_vad_n_windows(r, n);
    float *p = malloc((nw + 1) * sizeof *p);
    silero_segment_t *s = NULL;
    size_t ns = 0;
    int rc = silero_vad_probs(m, 16000, &x, &n, 1, 0, &p, NULL) ||
             silero_segments(p, nw, n, 16000, r->window, o, &s, &ns, NULL);
    for (size_t k = 0; !rc && k < ns && (int)k < max; k++) {
        se[2 * k] = (double)s[k].start / 16000;
        se[2 * k + 1] = (double)s[k].end / 16000;
    }
    free(s);
    free(p);
    silero_vad_destroy(m);
    return rc ? -1 : (int)ns;
}

TEST(capi_detect_speech)
{
    char why[600];
    const char *dir = golden_silero_model(why, sizeof why);
    if (!dir)
        SKIP(why);
    NEED_SHARED("audio/en/wav/jfk.wav");
    hark_model_t *m = NULL;
    CHECKF(hark_model_load(dir, NULL, &m) == HARK_OK, "%s", hark_last_error());
    CHECK(!strcmp(hark_model_task(m), "vad"));
    CHECK(!strcmp(hark_model_family(m), "silero_vad"));
    CHECK_EQ_INT(hark_model_sample_rate(m), 16000);

    audio_t a = {0}, b = {0};
    CHECK_OK(audio_decode_file(test_shared("audio/en/wav/jfk.wav"), NULL, &a, NULL));
    CHECK_OK(audio_decode_file(test_shared("audio/en/wav/lj-LJ001-0001.wav"), NULL, &b, NULL));
    const float *pcm[3] = {a.samples, b.samples, NULL};
    size_t n[3] = {a.n, b.n, 0};
    int ok = 1;
    char msg[400] = "";
    for (int pass = 0; pass < 2 && ok; pass++) {
        hark_vad_opts_t o = {0};
        silero_seg_opts_t so;
        silero_seg_default_opts(&so);
        if (pass == 1) {
            o.max_speech_s = so.max_speech_duration_s = 1.0;
            o.speech_pad_ms = HARK_VAD_ZERO;
            so.speech_pad_ms = 0;
            o.threshold = so.threshold = 0.6;
        }
        hark_vad_result_t *r = NULL;
        if (hark_detect_speech(m, pcm, n, 3, 16000, &o, &r) != HARK_OK) {
            snprintf(msg, sizeof msg, "pass %d: %s", pass, hark_last_error());
            ok = 0;
            break;
        }
        ok = hark_vad_result_count(r) == 3;
        for (int i = 0; i < 3 && ok; i++) {
            double want[128];
            int nw = pcm[i] ? expected(dir, pcm[i], n[i], &so, want, 64) : 0;
            const double *got = NULL;
            int ng = hark_vad_result_segments(r, i, &got);
            ok = nw == ng && (ng == 0 || !memcmp(got, want, sizeof(double) * 2 * (size_t)ng));
            if (!ok)
                snprintf(msg, sizeof msg, "pass %d, utterance %d: %d segments, the engine %d", pass,
                         i, ng, nw);
        }
        printf("  pass %d: %d + %d segments\n", pass, hark_vad_result_segments(r, 0, NULL),
               hark_vad_result_segments(r, 1, NULL));
        hark_vad_result_destroy(r);
    }
    /* 8 kHz input is resampled to the model's 16 kHz */
    float *x8 = NULL;
    size_t n8 = 0;
    CHECK_OK(audio_resample(a.samples, a.n, 16000, 8000, &x8, &n8, NULL));
    const float *p8[1] = {x8};
    hark_vad_result_t *r8 = NULL;
    CHECK_OK(hark_detect_speech(m, p8, &n8, 1, 8000, NULL, &r8));
    int n_8k = hark_vad_result_segments(r8, 0, NULL);
    hark_vad_result_destroy(r8);
    free(x8);
    /* refusals */
    hark_vad_opts_t bad = {.threshold = 2};
    hark_vad_result_t *rb = NULL;
    int rc_bad = hark_detect_speech(m, pcm, n, 1, 0, &bad, &rb);
    hark_asr_result_t *ar = NULL;
    int rc_asr = hark_recognize(m, pcm, n, 1, 0, NULL, &ar);
    audio_free(&a);
    audio_free(&b);
    hark_model_destroy(m);
    CHECKF(ok, "%s", msg);
    CHECK(n_8k >= 1);
    CHECK_EQ_INT(rc_bad, HARK_ERR_INVALID_ARG);
    CHECK(rb == NULL);
    CHECK_EQ_INT(rc_asr, HARK_ERR_UNSUPPORTED);
}
