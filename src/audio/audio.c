/* audio.c — decoding with libsndfile over hark's own virtual I/O (a memory slice or a file
 * descriptor): container sniffing, WAV truncation check, limits, mono mixdown, resampling; whole
 * files (audio_decode_*) or block by block (audio_reader_*, for audio of any length).
 * Tests: tests/audio/test_audio.c; fuzz target: tests/fuzz/fuzz_audio_decode.c */
#include "audio/audio.h"

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AUDIO_MAX_CHANNELS 256
#define CHUNK_SAMPLES 16384          /* interleaved floats per sf_readf_float call */
#define PREALLOC_UNTRUSTED (1 << 20) /* frames we preallocate on a header's word alone */
#define FRAMES_CAP ((sf_count_t)1 << 62)

/* A readable byte source: a memory slice {base, len, pos} or a regular file {fd, len, pos}. */
typedef struct {
    const unsigned char *base; /* memory source; NULL for a file */
    int fd;                    /* file source; -1 for memory */
    sf_count_t len, pos;
    int io_errno; /* first read error of a file source, 0 if none */
} audio_src_t;

/* Reads up to n bytes at offset off without moving pos; returns the count (0 at or past EOF). */
static sf_count_t src_pread(audio_src_t *s, sf_count_t off, void *buf, sf_count_t n)
{
    if (n <= 0 || off < 0 || off >= s->len)
        return 0;
    if (n > s->len - off)
        n = s->len - off;
    if (s->base) {
        memcpy(buf, s->base + off, (size_t)n);
        return n;
    }
    sf_count_t got = 0;
    while (got < n) {
        ssize_t r = pread(s->fd, (char *)buf + got, (size_t)(n - got), (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && !s->io_errno)
            s->io_errno = errno;
        if (r <= 0)
            break;
        got += r;
    }
    return got;
}

static sf_count_t vio_get_filelen(void *user)
{
    return ((audio_src_t *)user)->len;
}

static sf_count_t vio_seek(sf_count_t offset, int whence, void *user)
{
    audio_src_t *s = user;
    sf_count_t base;
    switch (whence) {
    case SEEK_SET:
        base = 0;
        break;
    case SEEK_CUR:
        base = s->pos;
        break;
    case SEEK_END:
        base = s->len;
        break;
    default:
        return -1;
    }
    /* defensive: offsets come from untrusted headers; refuse overflow and negative positions */
    if ((offset > 0 && base > INT64_MAX - offset) || base + offset < 0)
        return -1;
    s->pos = base + offset;
    return s->pos;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *user)
{
    audio_src_t *s = user;
    sf_count_t r = src_pread(s, s->pos, ptr, count);
    s->pos += r;
    return r;
}

static sf_count_t vio_write(const void *ptr, sf_count_t count, void *user)
{
    return 0; /* read-only */
}

static sf_count_t vio_tell(void *user)
{
    return ((audio_src_t *)user)->pos;
}

/* 1 if the first bytes look like a container we accept (WAV, FLAC, Ogg, MPEG audio). Sniffing
 * first keeps libsndfile's other header parsers away from untrusted input. */
static int sniff_known(const unsigned char *b, sf_count_t n)
{
    if (n >= 4 && (!memcmp(b, "RIFF", 4) || !memcmp(b, "RIFX", 4) || !memcmp(b, "RF64", 4) ||
                   !memcmp(b, "fLaC", 4) || !memcmp(b, "OggS", 4)))
        return 1;
    if (n >= 3 && !memcmp(b, "ID3", 3))
        return 1;
    return n >= 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0; /* MPEG audio frame sync */
}

static uint32_t rd32(const unsigned char *p, int big_endian)
{
    if (big_endian)
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* libsndfile silently shortens a RIFF 'data' chunk that runs past the end of the input; we call
 * that truncation. Walks the chunk list; returns HARK_ERR_FORMAT only when the 'data' chunk
 * declares more bytes than are present (0 and 0xFFFFFFFF mean "size unknown" to streaming
 * writers and pass). Anything it cannot follow passes: libsndfile already accepted the file. */
static int wav_check_data(audio_src_t *s, const char *name, hark_err_t *e)
{
    unsigned char h[12];
    if (src_pread(s, 0, h, 12) < 12 || memcmp(h + 8, "WAVE", 4))
        return HARK_OK;
    int be;
    if (!memcmp(h, "RIFF", 4))
        be = 0;
    else if (!memcmp(h, "RIFX", 4))
        be = 1;
    else
        return HARK_OK; /* RF64 keeps its sizes in ds64; libsndfile checks those */
    sf_count_t off = 12;
    for (int i = 0; i < 1000; i++) {
        if (src_pread(s, off, h, 8) < 8)
            return HARK_OK;
        uint32_t size = rd32(h + 4, be);
        if (!memcmp(h, "data", 4)) {
            sf_count_t avail = s->len - off - 8;
            if (size != 0 && size != 0xFFFFFFFFu && (sf_count_t)size > avail)
                return err_set(e, HARK_ERR_FORMAT,
                               "%s: truncated WAV: 'data' chunk declares %u bytes, only %lld "
                               "present",
                               name, size, (long long)avail);
            return HARK_OK;
        }
        off += 8 + (sf_count_t)size + (size & 1);
    }
    return HARK_OK;
}

static uint32_t ogg_crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
    /* Ogg's CRC-32: polynomial 0x04C11DB7, MSB first, initial value 0, no final xor */
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint32_t)p[i] << 24;
        for (int k = 0; k < 8; k++)
            crc = crc & 0x80000000u ? crc << 1 ^ 0x04C11DB7u : crc << 1;
    }
    return crc;
}

/* Ogg pages must tile the input exactly and carry correct checksums. Checked before libsndfile
 * sees the stream: libsndfile 1.2 with libvorbis leaks the vorbis_info (5.7 KB) whenever Vorbis
 * header parsing fails, so damaged streams are refused here. */
static int ogg_check_pages(audio_src_t *s, const char *name, hark_err_t *e)
{
    unsigned char h[27 + 255], body[4096];
    sf_count_t off = 0;
    while (off < s->len) {
        int ok = src_pread(s, off, h, 27) == 27 && !memcmp(h, "OggS", 4) && h[4] == 0;
        int nseg = ok ? h[26] : 0;
        sf_count_t size = 27 + nseg;
        ok = ok && src_pread(s, off + 27, h + 27, nseg) == nseg;
        for (int i = 0; ok && i < nseg; i++)
            size += h[27 + i];
        if (!ok || size > s->len - off)
            return err_set(e, HARK_ERR_FORMAT, "%s: truncated or corrupt Ogg page at byte %lld",
                           name, (long long)off);
        uint32_t want = rd32(h + 22, 0);
        memset(h + 22, 0, 4);
        uint32_t crc = ogg_crc_update(0, h, (size_t)(27 + nseg));
        for (sf_count_t done = 27 + nseg; done < size;) {
            sf_count_t k =
                size - done < (sf_count_t)sizeof body ? size - done : (sf_count_t)sizeof body;
            if (src_pread(s, off + done, body, k) != k)
                return err_set(e, HARK_ERR_IO, "%s: read failed", name);
            crc = ogg_crc_update(crc, body, (size_t)k);
            done += k;
        }
        if (crc != want)
            return err_set(e, HARK_ERR_FORMAT, "%s: corrupt Ogg page at byte %lld (bad checksum)",
                           name, (long long)off);
        off += size;
    }
    return HARK_OK;
}

/* Refuses codecs and shapes hark does not take; SF_INFO comes from an untrusted header. */
static int check_info(const SF_INFO *info, const char *name, hark_err_t *e)
{
    int major = info->format & SF_FORMAT_TYPEMASK, sub = info->format & SF_FORMAT_SUBMASK;
    int ok_sub;
    switch (major) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64:
        ok_sub = sub == SF_FORMAT_PCM_U8 || sub == SF_FORMAT_PCM_16 || sub == SF_FORMAT_PCM_24 ||
                 sub == SF_FORMAT_PCM_32 || sub == SF_FORMAT_FLOAT || sub == SF_FORMAT_DOUBLE ||
                 sub == SF_FORMAT_ULAW || sub == SF_FORMAT_ALAW;
        break;
    case SF_FORMAT_FLAC:
        ok_sub = sub == SF_FORMAT_PCM_S8 || sub == SF_FORMAT_PCM_16 || sub == SF_FORMAT_PCM_24;
        break;
    case SF_FORMAT_OGG:
        ok_sub = sub == SF_FORMAT_VORBIS || sub == SF_FORMAT_OPUS;
        break;
    case SF_FORMAT_MPEG:
        ok_sub = sub == SF_FORMAT_MPEG_LAYER_I || sub == SF_FORMAT_MPEG_LAYER_II ||
                 sub == SF_FORMAT_MPEG_LAYER_III;
        break;
    default:
        return err_set(e, HARK_ERR_UNSUPPORTED,
                       "%s: container 0x%06x is not supported (WAV, FLAC, Ogg or MP3 only)", name,
                       major);
    }
    if (!ok_sub)
        return err_set(e, HARK_ERR_UNSUPPORTED,
                       "%s: codec 0x%04x in container 0x%06x is not supported", name, sub, major);
    if (info->channels <= 0)
        return err_set(e, HARK_ERR_FORMAT, "%s: header declares %d channels", name, info->channels);
    if (info->channels > AUDIO_MAX_CHANNELS)
        return err_set(e, HARK_ERR_UNSUPPORTED, "%s: %d channels (at most %d supported)", name,
                       info->channels, AUDIO_MAX_CHANNELS);
    if (info->samplerate < AUDIO_MIN_RATE || info->samplerate > AUDIO_MAX_RATE)
        return err_set(e, HARK_ERR_UNSUPPORTED,
                       "%s: sample rate %d Hz is outside the supported %d..%d Hz", name,
                       info->samplerate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    return HARK_OK;
}

static int opts_resolve(const audio_opts_t *opts, int *target, double *max_s, hark_err_t *e)
{
    audio_opts_t o = opts ? *opts : (audio_opts_t){0};
    if (o.target_rate != 0 && (o.target_rate < AUDIO_MIN_RATE || o.target_rate > AUDIO_MAX_RATE))
        return err_set(e, HARK_ERR_INVALID_ARG, "target rate %d Hz is outside %d..%d Hz",
                       o.target_rate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    if (!(o.max_seconds >= 0) || isinf(o.max_seconds))
        return err_set(e, HARK_ERR_INVALID_ARG, "max_seconds %g must be finite and >= 0",
                       o.max_seconds);
    *target = o.target_rate;
    *max_s = o.max_seconds > 0 ? o.max_seconds : AUDIO_DEFAULT_MAX_SECONDS;
    return HARK_OK;
}

/* Grows *buf (floats) to hold at least `need`, doubling, never beyond `limit`. */
static int grow(float **buf, size_t *cap, size_t need, size_t limit)
{
    if (need <= *cap)
        return HARK_OK;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c = c > SIZE_MAX / 2 ? SIZE_MAX : c * 2;
    if (c > limit)
        c = limit >= need ? limit : need;
    if (c > SIZE_MAX / sizeof(float))
        return HARK_ERR_NOMEM;
    float *p = hark_realloc(*buf, c * sizeof(float));
    if (!p)
        return HARK_ERR_NOMEM;
    *buf = p;
    *cap = c;
    return HARK_OK;
}

/* Reads every frame of an open file into a new mono buffer: checks finiteness, enforces
 * max_frames while reading, averages channels and clamps to [-1, 1]. */
/* Float audio at int16 scale (samples in the thousands, as some tools write float WAVs) is clipped
 * to [-1, 1] and would be recognised as noise: said on the log, the first few times only (a
 * server may be sent many such files). */
static void warn_clipped(const char *name, size_t clipped, size_t n, float peak)
{
    static atomic_int warned;
    if (clipped * 100 < n || peak < 2.0f || atomic_fetch_add(&warned, 1) >= 8)
        return;
    LOG_WARN("%s: %zu of %zu samples lie outside [-1, 1] (peak %.0f) and were clipped: float "
             "audio at int16 scale? hark reads float samples in [-1, 1] (divide by 32768)",
             name, clipped, n, (double)peak);
}

static int read_mono(SNDFILE *sf, const SF_INFO *info, sf_count_t max_frames, const char *name,
                     float **mono_out, size_t *n_out, hark_err_t *e)
{
    int ch = info->channels, rc = HARK_OK;
    size_t clipped = 0;
    float peak = 0;
    sf_count_t chunk_frames = CHUNK_SAMPLES / ch;
    float *chunk = hark_malloc(sizeof(float) * (size_t)(chunk_frames * ch));
    float *mono = NULL;
    size_t n = 0, cap = 0;
    if (!chunk) {
        rc = err_set(e, HARK_ERR_NOMEM, "%s: out of memory for the decode buffer", name);
        goto out;
    }
    int major = info->format & SF_FORMAT_TYPEMASK;
    int wav = major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64;
    if (info->frames > 0 && info->frames != SF_COUNT_MAX) {
        /* WAV frame counts are bounded by the bytes present; other headers may lie */
        sf_count_t pre = info->frames;
        if (!wav && pre > PREALLOC_UNTRUSTED)
            pre = PREALLOC_UNTRUSTED;
        if (pre > max_frames)
            pre = max_frames;
        if (pre > 0 && grow(&mono, &cap, (size_t)pre, (size_t)max_frames)) {
            rc = err_set(e, HARK_ERR_NOMEM, "%s: out of memory for %lld samples", name,
                         (long long)pre);
            goto out;
        }
    }
    for (;;) {
        sf_count_t want = chunk_frames;
        if (want > max_frames - (sf_count_t)n + 1)
            want = max_frames - (sf_count_t)n + 1; /* one frame past the limit is enough */
        sf_count_t got = sf_readf_float(sf, chunk, want);
        if (got <= 0)
            break;
        for (sf_count_t i = 0; i < got * ch; i++) {
            if (!isfinite(chunk[i])) {
                sf_count_t frame = (sf_count_t)n + i / ch;
                rc = err_set(e, HARK_ERR_FORMAT, "%s: sample %s at frame %lld (%.3f s), channel %d",
                             name, isnan(chunk[i]) ? "NaN" : "Inf", (long long)frame,
                             (double)frame / info->samplerate, (int)(i % ch));
                goto out;
            }
        }
        if ((sf_count_t)n + got > max_frames) {
            rc = err_set(e, HARK_ERR_TOO_LARGE, "%s: longer than the limit of %.2f s", name,
                         (double)max_frames / info->samplerate);
            goto out;
        }
        if (grow(&mono, &cap, n + (size_t)got, (size_t)max_frames)) {
            rc = err_set(e, HARK_ERR_NOMEM, "%s: out of memory after %zu samples", name, n);
            goto out;
        }
        for (sf_count_t f = 0; f < got; f++) {
            const float *fr = chunk + f * ch;
            double sum = 0; /* exact for 2 channels of <= 24-bit PCM */
            for (int c = 0; c < ch; c++)
                sum += fr[c];
            float v = ch == 1 ? fr[0] : (float)(sum / ch);
            if (v > 1.0f || v < -1.0f) {
                clipped++;
                peak = fabsf(v) > peak ? fabsf(v) : peak;
            }
            mono[n + (size_t)f] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
        }
        n += (size_t)got;
    }
    warn_clipped(name, clipped, n, peak);
out:
    hark_free(chunk);
    if (rc) {
        hark_free(mono);
        return rc;
    }
    *mono_out = mono;
    *n_out = n;
    return HARK_OK;
}

/* The shared decode path of audio_decode_file and audio_decode_memory. */
static int decode_src(audio_src_t *src, const char *name, const audio_opts_t *opts, audio_t *out,
                      hark_err_t *e)
{
    int target = 0, rc;
    double max_s = 0;
    if ((rc = opts_resolve(opts, &target, &max_s, e)))
        return rc;
    if (src->len == 0)
        return err_set(e, HARK_ERR_FORMAT, "%s: empty input (0 bytes)", name);
    unsigned char head[4];
    sf_count_t hn = src_pread(src, 0, head, sizeof head);
    if (src->io_errno)
        return err_set(e, HARK_ERR_IO, "%s: read failed: %s", name, strerror(src->io_errno));
    if (!sniff_known(head, hn)) {
        if (hn < 4)
            return err_set(e, HARK_ERR_FORMAT, "%s: %lld bytes are too few to be audio", name,
                           (long long)hn);
        return err_set(e, HARK_ERR_FORMAT,
                       "%s: unknown container (starts with %02x %02x %02x %02x); expected WAV, "
                       "FLAC, Ogg or MP3",
                       name, head[0], head[1], head[2], head[3]);
    }

    if (!memcmp(head, "OggS", 4) && (rc = ogg_check_pages(src, name, e)))
        return rc;

    SF_VIRTUAL_IO vio = {vio_get_filelen, vio_seek, vio_read, vio_write, vio_tell};
    SF_INFO info = {0};
    float *mono = NULL, *rs = NULL;
    size_t n = 0;
    src->pos = 0;
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &info, src);
    if (!sf) {
        if (src->io_errno)
            return err_set(e, HARK_ERR_IO, "%s: read failed: %s", name, strerror(src->io_errno));
        /* sf_strerror(NULL) reads libsndfile's global last error: under concurrency the detail
         * may belong to another thread's failure; the status is still right */
        const char *why = sf_strerror(NULL);
        if (strstr(why, "regular file")) /* libsndfile's word for "no MPEG frames found" */
            why = "no decodable audio frames found";
        return err_set(e, HARK_ERR_FORMAT, "%s: cannot decode: %s", name, why);
    }
    if ((rc = check_info(&info, name, e)))
        goto done;
    double mf = floor(max_s * info.samplerate);
    sf_count_t max_frames = mf >= (double)FRAMES_CAP ? FRAMES_CAP : (sf_count_t)mf;
    int major = info.format & SF_FORMAT_TYPEMASK;
    int frames_known = info.frames > 0 && info.frames != SF_COUNT_MAX;
    if (frames_known && info.frames > max_frames) {
        rc = err_set(e, HARK_ERR_TOO_LARGE, "%s: %.2f s of audio exceeds the limit of %.2f s", name,
                     (double)info.frames / info.samplerate, max_s);
        goto done;
    }
    if ((major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) && (rc = wav_check_data(src, name, e)))
        goto done;
    if ((rc = read_mono(sf, &info, max_frames, name, &mono, &n, e)))
        goto done;
    if (src->io_errno) {
        rc = err_set(e, HARK_ERR_IO, "%s: read failed: %s", name, strerror(src->io_errno));
        goto done;
    }
    /* MP3 frame counts are estimates (or absent), and a cut MP3 is a shorter stream of whole
     * frames; for the other formats a short read means damage */
    if (major != SF_FORMAT_MPEG && frames_known && (sf_count_t)n < info.frames) {
        rc = err_set(e, HARK_ERR_FORMAT,
                     "%s: truncated or corrupt: header declares %lld frames, decoded %zu", name,
                     (long long)info.frames, n);
        goto done;
    }
    int rate = info.samplerate;
    if (target && target != rate && n > 0) {
        size_t rn;
        if ((rc = audio_resample(mono, n, rate, target, &rs, &rn, e))) {
            err_prefix(e, rc, "%s", name);
            goto done;
        }
        for (size_t i = 0; i < rn; i++)
            rs[i] = rs[i] > 1.0f ? 1.0f : rs[i] < -1.0f ? -1.0f : rs[i];
        hark_free(mono);
        mono = rs;
        rs = NULL;
        n = rn;
    }
    if (target)
        rate = target;
    *out = (audio_t){.samples = n ? mono : NULL,
                     .n = n,
                     .rate = rate,
                     .source_rate = info.samplerate,
                     .source_channels = info.channels,
                     .source_format = major};
    if (!n)
        hark_free(mono);
    mono = NULL;
done:
    sf_close(sf);
    hark_free(mono);
    hark_free(rs);
    return rc;
}

/* Runs decode_src with a local error record so that failures are logged once, here. */
static int decode_logged(audio_src_t *src, const char *name, const audio_opts_t *opts, audio_t *out,
                         hark_err_t *err)
{
    hark_err_t e = {0};
    int rc = decode_src(src, name, opts, out, &e);
    if (rc) {
        LOG_DEBUG("audio: %s", e.msg);
        if (err)
            *err = e;
    }
    return rc;
}

int audio_decode_memory(const void *data, size_t len, const audio_opts_t *opts, audio_t *out,
                        hark_err_t *err)
{
    if (!out)
        return err_set(err, HARK_ERR_INVALID_ARG, "audio_decode_memory: out is NULL");
    *out = (audio_t){0};
    if (!data && len)
        return err_set(err, HARK_ERR_INVALID_ARG, "audio_decode_memory: data is NULL");
    if ((uint64_t)len > (uint64_t)INT64_MAX)
        return err_set(err, HARK_ERR_TOO_LARGE, "audio buffer: %zu bytes", len);
    audio_src_t src = {.base = data ? data : (const void *)"", .fd = -1, .len = (sf_count_t)len};
    char name[64];
    snprintf(name, sizeof name, "audio buffer (%zu bytes)", len);
    return decode_logged(&src, name, opts, out, err);
}

int audio_decode_file(const char *path, const audio_opts_t *opts, audio_t *out, hark_err_t *err)
{
    if (!out || !path)
        return err_set(err, HARK_ERR_INVALID_ARG, "audio_decode_file: %s is NULL",
                       out ? "path" : "out");
    *out = (audio_t){0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, HARK_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    int rc;
    if (fstat(fd, &st) != 0)
        rc = err_set(err, HARK_ERR_IO, "%s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = err_set(err, HARK_ERR_IO, "%s: not a regular file", path);
    else {
        audio_src_t src = {.base = NULL, .fd = fd, .len = (sf_count_t)st.st_size};
        rc = decode_logged(&src, path, opts, out, err);
    }
    close(fd);
    return rc;
}

void audio_free(audio_t *a)
{
    if (!a)
        return;
    hark_free(a->samples);
    *a = (audio_t){0};
}

/* ---- block reader --------------------------------------------------------------------------- */

struct audio_reader {
    audio_src_t src;
    SNDFILE *sf;
    SF_INFO info;
    char *name;
    int rate;     /* output rate */
    soxr_t soxr;  /* NULL: the file's rate is the output rate */
    float *chunk; /* (CHUNK_SAMPLES) interleaved frames */
    float *mono;  /* (chunk frames) mixed down, waiting for the resampler */
    size_t mono_n, mono_pos;
    float *rs; /* (rs_cap) resampled, not yet handed out */
    size_t rs_cap, rs_n, rs_pos;
    sf_count_t frames_read;
    int eof, flushed;
};

/* The reader over r->src (set up by the caller; path names it in messages): sniffing,
 * container checks, libsndfile and the resampler. */
static int reader_start(audio_reader_t *r, const char *path, int target_rate, hark_err_t *err)
{
    int rc = HARK_OK;
    unsigned char head[4];
    if (r->src.len == 0) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: empty input (0 bytes)", path);
        goto fail;
    }
    sf_count_t hn = src_pread(&r->src, 0, head, sizeof head);
    if (!sniff_known(head, hn)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: unknown container; expected WAV, FLAC, Ogg or MP3",
                     path);
        goto fail;
    }
    if (!memcmp(head, "OggS", 4) && (rc = ogg_check_pages(&r->src, path, err)))
        goto fail;
    SF_VIRTUAL_IO vio = {vio_get_filelen, vio_seek, vio_read, vio_write, vio_tell};
    r->src.pos = 0;
    if (!(r->sf = sf_open_virtual(&vio, SFM_READ, &r->info, &r->src))) {
        rc = err_set(err, r->src.io_errno ? HARK_ERR_IO : HARK_ERR_FORMAT, "%s: cannot decode",
                     path);
        goto fail;
    }
    if ((rc = check_info(&r->info, path, err)))
        goto fail;
    int major = r->info.format & SF_FORMAT_TYPEMASK;
    if ((major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) &&
        (rc = wav_check_data(&r->src, path, err)))
        goto fail;
    r->rate = target_rate ? target_rate : r->info.samplerate;
    r->chunk = hark_malloc(sizeof(float) * CHUNK_SAMPLES);
    r->mono = hark_malloc(sizeof(float) * CHUNK_SAMPLES);
    if (!r->chunk || !r->mono) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (r->rate != r->info.samplerate) {
        soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
        soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
        soxr_error_t se = NULL;
        r->soxr = soxr_create(r->info.samplerate, r->rate, 1, &se, &io, &q, NULL);
        r->rs_cap = (size_t)((double)CHUNK_SAMPLES * r->rate / r->info.samplerate) + 64;
        r->rs = hark_malloc(sizeof(float) * r->rs_cap);
        if (!r->soxr || se || !r->rs) {
            rc = err_set(err, r->rs ? HARK_ERR_INTERNAL : HARK_ERR_NOMEM,
                         "%s: resampler %d -> %d Hz: %s", path, r->info.samplerate, r->rate,
                         se ? se : "out of memory");
            goto fail;
        }
    }
    return HARK_OK;
fail:
    return rc;
}

static int reader_new(int target_rate, audio_reader_t **out, hark_err_t *err)
{
    *out = NULL;
    if (target_rate != 0 && (target_rate < AUDIO_MIN_RATE || target_rate > AUDIO_MAX_RATE))
        return err_set(err, HARK_ERR_INVALID_ARG, "target rate %d Hz is outside %d..%d Hz",
                       target_rate, AUDIO_MIN_RATE, AUDIO_MAX_RATE);
    if (!(*out = hark_calloc(1, sizeof **out)))
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    (*out)->src.fd = -1;
    return HARK_OK;
}

int audio_reader_open(const char *path, int target_rate, audio_reader_t **out, hark_err_t *err)
{
    audio_reader_t *r = NULL;
    int rc = reader_new(target_rate, &r, err);
    if (rc)
        return rc;
    struct stat st;
    if (!(r->name = strdup(path))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((r->src.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = err_set(err, HARK_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(r->src.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(err, HARK_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    r->src.len = (sf_count_t)st.st_size;
    if ((rc = reader_start(r, path, target_rate, err)))
        goto fail;
    *out = r;
    return HARK_OK;
fail:
    audio_reader_close(r);
    return rc;
}

int audio_reader_open_memory(const void *data, size_t len, int target_rate, audio_reader_t **out,
                             hark_err_t *err)
{
    audio_reader_t *r = NULL;
    int rc = reader_new(target_rate, &r, err);
    if (rc)
        return rc;
    char name[64];
    snprintf(name, sizeof name, "audio buffer (%zu bytes)", len);
    r->src.base = data ? data : (const void *)"";
    r->src.len = (sf_count_t)len;
    if (!(r->name = strdup(name))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = reader_start(r, name, target_rate, err)))
        goto fail;
    *out = r;
    return HARK_OK;
fail:
    audio_reader_close(r);
    return rc;
}

int audio_reader_rate(const audio_reader_t *r)
{
    return r->rate;
}

double audio_reader_duration(const audio_reader_t *r)
{
    sf_count_t f = r->info.frames;
    return f > 0 && f != SF_COUNT_MAX ? (double)f / r->info.samplerate : 0.0;
}

/* the next chunk of the file, mixed down into r->mono (r->mono_n = 0 at the end) */
static int reader_fill(audio_reader_t *r, hark_err_t *err)
{
    int ch = r->info.channels;
    r->mono_n = r->mono_pos = 0;
    if (r->eof)
        return HARK_OK;
    sf_count_t got = sf_readf_float(r->sf, r->chunk, CHUNK_SAMPLES / ch);
    if (r->src.io_errno)
        return err_set(err, HARK_ERR_IO, "%s: read failed: %s", r->name, strerror(r->src.io_errno));
    if (got <= 0) {
        r->eof = 1;
        int major = r->info.format & SF_FORMAT_TYPEMASK;
        if (major != SF_FORMAT_MPEG && r->info.frames > 0 && r->info.frames != SF_COUNT_MAX &&
            r->frames_read < r->info.frames)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: truncated or corrupt: header declares %lld frames, decoded %lld",
                           r->name, (long long)r->info.frames, (long long)r->frames_read);
        return HARK_OK;
    }
    for (sf_count_t f = 0; f < got; f++) {
        const float *fr = r->chunk + f * ch;
        double sum = 0;
        for (int c = 0; c < ch; c++) {
            if (!isfinite(fr[c]))
                return err_set(err, HARK_ERR_FORMAT, "%s: sample %s at frame %lld, channel %d",
                               r->name, isnan(fr[c]) ? "NaN" : "Inf",
                               (long long)(r->frames_read + f), c);
            sum += fr[c];
        }
        float v = ch == 1 ? fr[0] : (float)(sum / ch);
        r->mono[f] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
    }
    r->frames_read += got;
    r->mono_n = (size_t)got;
    return HARK_OK;
}

int audio_reader_read(audio_reader_t *r, float *out, size_t max, size_t *n, hark_err_t *err)
{
    *n = 0;
    int rc;
    while (*n < max) {
        if (!r->soxr) {
            if (r->mono_pos == r->mono_n) {
                if ((rc = reader_fill(r, err)))
                    return rc;
                if (!r->mono_n)
                    break;
            }
            size_t k = r->mono_n - r->mono_pos < max - *n ? r->mono_n - r->mono_pos : max - *n;
            memcpy(out + *n, r->mono + r->mono_pos, k * sizeof *out);
            r->mono_pos += k;
            *n += k;
            continue;
        }
        if (r->rs_pos < r->rs_n) {
            size_t k = r->rs_n - r->rs_pos < max - *n ? r->rs_n - r->rs_pos : max - *n;
            for (size_t i = 0; i < k; i++) { /* resampler overshoot is clamped, as decode does */
                float v = r->rs[r->rs_pos + i];
                out[*n + i] = v > 1.0f ? 1.0f : v < -1.0f ? -1.0f : v;
            }
            r->rs_pos += k;
            *n += k;
            continue;
        }
        if (r->flushed)
            break;
        if (r->mono_pos == r->mono_n && (rc = reader_fill(r, err)))
            return rc;
        size_t idone = 0, odone = 0;
        soxr_error_t se;
        if (r->mono_n > r->mono_pos)
            se = soxr_process(r->soxr, r->mono + r->mono_pos, r->mono_n - r->mono_pos, &idone,
                              r->rs, r->rs_cap, &odone);
        else /* the end: drain what the filter holds */
            se = soxr_process(r->soxr, NULL, 0, NULL, r->rs, r->rs_cap, &odone);
        if (se)
            return err_set(err, HARK_ERR_INTERNAL, "%s: libsoxr: %s", r->name, se);
        r->mono_pos += idone;
        r->rs_n = odone;
        r->rs_pos = 0;
        if (r->mono_n == 0 && odone == 0)
            r->flushed = 1;
    }
    return HARK_OK;
}

void audio_reader_close(audio_reader_t *r)
{
    if (!r)
        return;
    if (r->sf)
        sf_close(r->sf);
    if (r->src.fd >= 0)
        close(r->src.fd);
    if (r->soxr)
        soxr_delete(r->soxr);
    hark_free(r->chunk);
    hark_free(r->mono);
    hark_free(r->rs);
    free(r->name);
    hark_free(r);
}
