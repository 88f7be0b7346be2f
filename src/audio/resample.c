/* resample.c — mono float32 resampling with libsoxr (one shot, high quality) and validation of
 * raw PCM tensors.  Tests: tests/audio/test_audio.c */
#include "audio/audio.h"

#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <soxr.h>
#include <stdint.h>
#include <string.h>

int audio_resample(const float *in, size_t n, int in_rate, int out_rate, float **out, size_t *out_n,
                   hark_err_t *err)
{
    if (!out || !out_n || (!in && n))
        return err_set(err, HARK_ERR_INVALID_ARG, "audio_resample: NULL argument");
    *out = NULL;
    *out_n = 0;
    if (in_rate < AUDIO_MIN_RATE || in_rate > AUDIO_MAX_RATE || out_rate < AUDIO_MIN_RATE ||
        out_rate > AUDIO_MAX_RATE)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "resample %d -> %d Hz: rates must lie in %d..%d Hz", in_rate, out_rate,
                       AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    if (n == 0)
        return HARK_OK;
    /* room for ceil(n * out / in) + 1 samples */
    if ((uint64_t)n > (UINT64_MAX - (uint64_t)in_rate) / (uint64_t)out_rate)
        return err_set(err, HARK_ERR_TOO_LARGE, "resample: %zu samples is too many", n);
    uint64_t cap = ((uint64_t)n * (uint64_t)out_rate + (uint64_t)in_rate - 1) / (uint64_t)in_rate;
    cap += 1;
    if (cap > SIZE_MAX / sizeof(float))
        return err_set(err, HARK_ERR_TOO_LARGE, "resample: %zu samples is too many", n);
    float *buf = hark_malloc((size_t)cap * sizeof(float));
    if (!buf)
        return err_set(err, HARK_ERR_NOMEM, "resample: out of memory for %llu samples",
                       (unsigned long long)cap);
    if (in_rate == out_rate) {
        memcpy(buf, in, n * sizeof(float));
        *out = buf;
        *out_n = n;
        return HARK_OK;
    }
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    size_t done = 0;
    soxr_error_t se =
        soxr_oneshot(in_rate, out_rate, 1, in, n, NULL, buf, (size_t)cap, &done, &io, &q, NULL);
    if (se) {
        hark_free(buf);
        return err_set(err, HARK_ERR_INTERNAL, "resample %d -> %d Hz: libsoxr: %s", in_rate,
                       out_rate, se);
    }
    if (done == 0) {
        hark_free(buf);
        buf = NULL;
    }
    *out = buf;
    *out_n = done;
    return HARK_OK;
}

int audio_check_pcm(const float *x, size_t n, hark_err_t *err)
{
    if (!x && n)
        return err_set(err, HARK_ERR_INVALID_ARG, "audio_check_pcm: samples are NULL");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "audio sample %zu of %zu is %s; samples must be finite", i, n,
                           isnan(x[i]) ? "NaN"
                           : x[i] > 0  ? "+Inf"
                                       : "-Inf");
    return HARK_OK;
}
