/* encode.c — see encode.h. WAV and PCM are written here (a 44-byte header and 16-bit samples:
 * nothing for a library to do); resampling by libsoxr, streamed; FLAC, MP3 and Opus by libsndfile
 * over virtual I/O into memory. */
#include "audio/encode.h"

#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdint.h>
#include <string.h>

#define OPENAI_PCM_RATE 24000

struct audio_enc {
    audio_enc_format_t f;
    int in_rate, out_rate;
    audio_enc_write_fn write;
    void *user;
    soxr_t sox; /* in_rate != out_rate */
    float *rs;  /* resampled block */
    size_t rs_cap;
    unsigned char *out; /* 16-bit samples of one block */
    size_t out_cap;
    /* libsndfile formats: the file in memory */
    SNDFILE *sf;
    unsigned char *mem;
    size_t mem_len, mem_cap, mem_pos;
    int mem_failed;
};

int audio_enc_format_parse(const char *name, audio_enc_format_t *out, hark_err_t *err)
{
    static const char *names[] = {"wav", "pcm", "flac", "mp3", "opus"};
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, names[i])) {
            *out = (audio_enc_format_t)i;
            return HARK_OK;
        }
    return err_set(err, HARK_ERR_INVALID_ARG,
                   "response_format '%s' is not supported: use wav, pcm, flac, mp3 or opus",
                   name ? name : "");
}

const char *audio_enc_content_type(audio_enc_format_t f)
{
    switch (f) {
    case AUDIO_ENC_WAV:
        return "audio/wav";
    case AUDIO_ENC_PCM:
        return "audio/pcm";
    case AUDIO_ENC_FLAC:
        return "audio/flac";
    case AUDIO_ENC_MP3:
        return "audio/mpeg";
    case AUDIO_ENC_OPUS:
        return "audio/ogg";
    }
    return "application/octet-stream";
}

int audio_enc_streams(audio_enc_format_t f)
{
    return f == AUDIO_ENC_WAV || f == AUDIO_ENC_PCM;
}

int audio_enc_output_rate(audio_enc_format_t f, int in_rate)
{
    if (f == AUDIO_ENC_PCM)
        return OPENAI_PCM_RATE;
    if (f == AUDIO_ENC_OPUS && in_rate != 8000 && in_rate != 12000 && in_rate != 16000 &&
        in_rate != 24000 && in_rate != 48000)
        return OPENAI_PCM_RATE;
    return in_rate;
}

/* ---- libsndfile over memory ---------------------------------------------------------------- */

static sf_count_t vm_len(void *u)
{
    return (sf_count_t)((audio_enc_t *)u)->mem_len;
}

static sf_count_t vm_seek(sf_count_t off, int whence, void *u)
{
    audio_enc_t *e = u;
    sf_count_t base = whence == SEEK_SET   ? 0
                      : whence == SEEK_CUR ? (sf_count_t)e->mem_pos
                                           : (sf_count_t)e->mem_len;
    if (base + off < 0)
        return -1;
    e->mem_pos = (size_t)(base + off);
    return (sf_count_t)e->mem_pos;
}

static sf_count_t vm_read(void *ptr, sf_count_t count, void *u)
{
    audio_enc_t *e = u;
    size_t n = e->mem_pos < e->mem_len ? e->mem_len - e->mem_pos : 0;
    if ((size_t)count < n)
        n = (size_t)count;
    memcpy(ptr, e->mem + e->mem_pos, n);
    e->mem_pos += n;
    return (sf_count_t)n;
}

static sf_count_t vm_write(const void *ptr, sf_count_t count, void *u)
{
    audio_enc_t *e = u;
    size_t end = e->mem_pos + (size_t)count;
    if (end > e->mem_cap) {
        size_t cap = e->mem_cap ? e->mem_cap : 65536;
        while (cap < end)
            cap *= 2;
        unsigned char *m = hark_realloc(e->mem, cap);
        if (!m) {
            e->mem_failed = 1;
            return 0;
        }
        e->mem = m;
        e->mem_cap = cap;
    }
    if (e->mem_pos > e->mem_len) /* a seek past the end: the gap is zeros */
        memset(e->mem + e->mem_len, 0, e->mem_pos - e->mem_len);
    memcpy(e->mem + e->mem_pos, ptr, (size_t)count);
    e->mem_pos = end;
    if (end > e->mem_len)
        e->mem_len = end;
    return count;
}

static sf_count_t vm_tell(void *u)
{
    return (sf_count_t)((audio_enc_t *)u)->mem_pos;
}

/* ---- the encoder ----------------------------------------------------------------------------- */

static void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static int emit(audio_enc_t *e, const void *data, size_t len, hark_err_t *err)
{
    if (len && e->write(e->user, data, len))
        return err_set(err, HARK_ERR_CANCELLED, "the receiver of the audio went away");
    return HARK_OK;
}

void audio_enc_abort(audio_enc_t *e)
{
    if (!e)
        return;
    if (e->sf)
        sf_close(e->sf);
    if (e->sox)
        soxr_delete(e->sox);
    hark_free(e->rs);
    hark_free(e->out);
    hark_free(e->mem);
    hark_free(e);
}

int audio_enc_open(audio_enc_format_t f, int in_rate, audio_enc_write_fn write_fn, void *user,
                   audio_enc_t **out, hark_err_t *err)
{
    *out = NULL;
    if (in_rate < 1000 || in_rate > 384000)
        return err_set(err, HARK_ERR_INVALID_ARG, "audio encoder: sample rate %d Hz", in_rate);
    audio_enc_t *e = hark_calloc(1, sizeof *e);
    if (!e)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    e->f = f;
    e->in_rate = in_rate;
    e->out_rate = audio_enc_output_rate(f, in_rate);
    e->write = write_fn;
    e->user = user;
    int rc = HARK_OK;
    if (e->out_rate != in_rate) {
        soxr_error_t se = NULL;
        soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        e->sox = soxr_create(in_rate, e->out_rate, 1, &se, &io, &q, NULL);
        if (!e->sox)
            rc = err_set(err, HARK_ERR_INTERNAL, "resample %d -> %d Hz: libsoxr: %s", in_rate,
                         e->out_rate, se ? se : "cannot create");
    }
    if (!rc && f == AUDIO_ENC_WAV) {
        unsigned char h[44];
        memcpy(h, "RIFF", 4);
        put_le32(h + 4, 0xFFFFFFFFu); /* unknown: streamed */
        memcpy(h + 8, "WAVEfmt ", 8);
        put_le32(h + 16, 16);
        h[20] = 1, h[21] = 0; /* PCM */
        h[22] = 1, h[23] = 0; /* mono */
        put_le32(h + 24, (uint32_t)e->out_rate);
        put_le32(h + 28, (uint32_t)e->out_rate * 2);
        h[32] = 2, h[33] = 0;  /* block align */
        h[34] = 16, h[35] = 0; /* bits */
        memcpy(h + 36, "data", 4);
        put_le32(h + 40, 0xFFFFFFFFu);
        rc = emit(e, h, sizeof h, err);
    } else if (!rc && !audio_enc_streams(f)) {
        SF_INFO info = {.samplerate = e->out_rate, .channels = 1};
        info.format = f == AUDIO_ENC_FLAC  ? SF_FORMAT_FLAC | SF_FORMAT_PCM_16
                      : f == AUDIO_ENC_MP3 ? SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III
                                           : SF_FORMAT_OGG | SF_FORMAT_OPUS;
        SF_VIRTUAL_IO vio = {vm_len, vm_seek, vm_read, vm_write, vm_tell};
        if (!sf_format_check(&info))
            rc = err_set(err, HARK_ERR_UNSUPPORTED, "this libsndfile cannot write %s at %d Hz",
                         audio_enc_content_type(f), e->out_rate);
        else if (!(e->sf = sf_open_virtual(&vio, SFM_WRITE, &info, e)))
            rc = err_set(err, HARK_ERR_UNSUPPORTED, "libsndfile cannot write %s: %s",
                         audio_enc_content_type(f), sf_strerror(NULL));
    }
    if (rc) {
        audio_enc_abort(e);
        return rc;
    }
    *out = e;
    return HARK_OK;
}

/* n samples at out_rate to the output */
static int put(audio_enc_t *e, const float *x, size_t n, hark_err_t *err)
{
    if (!n)
        return HARK_OK;
    if (e->sf) { /* clipped first: libsndfile's FLAC writer refuses samples outside [-1, 1] */
        float c[2048];
        for (size_t i = 0; i < n;) {
            size_t k = n - i < 2048 ? n - i : 2048;
            for (size_t j = 0; j < k; j++)
                c[j] = x[i + j] > 1.0f ? 1.0f : x[i + j] < -1.0f ? -1.0f : x[i + j];
            if (sf_writef_float(e->sf, c, (sf_count_t)k) != (sf_count_t)k || e->mem_failed)
                return err_set(err, e->mem_failed ? HARK_ERR_NOMEM : HARK_ERR_INTERNAL,
                               "encoding %s: %s", audio_enc_content_type(e->f),
                               e->mem_failed ? "out of memory" : sf_strerror(e->sf));
            i += k;
        }
        return HARK_OK;
    }
    if (n * 2 > e->out_cap) { /* one block of bytes per call: one chunk on the wire */
        unsigned char *b = hark_realloc(e->out, n * 2);
        if (!b)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        e->out = b;
        e->out_cap = n * 2;
    }
    for (size_t j = 0; j < n; j++) {
        float v = x[j];
        v = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
        uint16_t s = (uint16_t)(int16_t)lrintf(v * 32767.0f);
        e->out[2 * j] = (unsigned char)(s & 0xff); /* little-endian on the wire */
        e->out[2 * j + 1] = (unsigned char)(s >> 8);
    }
    return emit(e, e->out, n * 2, err);
}

/* through the resampler (in NULL: flush) */
static int resample_put(audio_enc_t *e, const float *in, size_t n, hark_err_t *err)
{
    size_t want = (size_t)((double)n * e->out_rate / e->in_rate) + 1024;
    if (want > e->rs_cap) {
        float *b = hark_realloc(e->rs, want * sizeof *b);
        if (!b)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        e->rs = b;
        e->rs_cap = want;
    }
    for (;;) {
        size_t used = 0, got = 0;
        soxr_error_t se = soxr_process(e->sox, in, n, &used, e->rs, e->rs_cap, &got);
        if (se)
            return err_set(err, HARK_ERR_INTERNAL, "resample: libsoxr: %s", se);
        int rc = put(e, e->rs, got, err);
        if (rc)
            return rc;
        if (in) {
            in += used;
            n -= used;
            if (!n && got < e->rs_cap)
                return HARK_OK;
        } else if (got < e->rs_cap) {
            return HARK_OK; /* flushed */
        }
    }
}

int audio_enc_write(audio_enc_t *e, const float *pcm, size_t n, hark_err_t *err)
{
    if (!n)
        return HARK_OK;
    return e->sox ? resample_put(e, pcm, n, err) : put(e, pcm, n, err);
}

int audio_enc_close(audio_enc_t *e, hark_err_t *err)
{
    int rc = e->sox ? resample_put(e, NULL, 0, err) : HARK_OK;
    if (!rc && e->sf) {
        sf_write_sync(e->sf);
        int cr = sf_close(e->sf);
        e->sf = NULL;
        if (cr || e->mem_failed)
            rc = err_set(err, e->mem_failed ? HARK_ERR_NOMEM : HARK_ERR_INTERNAL,
                         "finishing %s: %s", audio_enc_content_type(e->f),
                         e->mem_failed ? "out of memory" : sf_error_number(cr));
        if (!rc)
            rc = emit(e, e->mem, e->mem_len, err);
    }
    audio_enc_abort(e);
    return rc;
}
