/* silero_cut.c — long audio into pieces: VAD segments or fixed windows, in bounded memory (see
 * silero_cut.h). Tests: tests/model/silero/test_silero_cut.c */
#include "model/silero/silero_cut.h"

#include "core/alloc.h"
#include "hark.h"

#include <string.h>

#define BLOCK_SAMPLES 16000

typedef struct {
    float *buf; /* audio from start on: what pieces still to come may need */
    long long start;
    size_t n, cap;
} keep_t;

/* hands [s, e) to cb: it must lie in what is kept */
static int piece(const keep_t *k, long long s, long long e, silero_cut_fn cb, void *user,
                 hark_err_t *err)
{
    if (s < k->start || e > k->start + (long long)k->n || e < s)
        return err_set(err, HARK_ERR_INTERNAL,
                       "a piece [%lld, %lld) outside the audio kept [%lld, %lld) (a bug)", s, e,
                       k->start, k->start + (long long)k->n);
    return cb(user, s, e, k->buf + (s - k->start), err);
}

int silero_cut(audio_reader_t *rd, const silero_cut_opts_t *o, silero_cut_fn cb,
               silero_cut_progress_fn progress, void *user, size_t *n_samples, hark_err_t *err)
{
    const int rate = audio_reader_rate(rd);
    silero_vad_stream_t *vs = NULL;
    keep_t k = {0};
    long long W = 0, H = 0, next = 0; /* windows: length, hop, the next one's index */
    int rc = HARK_OK, done = 0;
    if (n_samples)
        *n_samples = 0;
    if (o->vad) {
        if ((rc = silero_vad_stream_create(o->vad, rate, &o->seg, &vs, err)))
            return rc;
    } else {
        W = (long long)(o->window_s * rate + 0.5);
        H = W - (long long)(o->overlap_s * rate + 0.5);
        if (W < 1 || H < 1 || H > W)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "windows of %g s with %g s overlap: the overlap must be in [0, window)",
                           o->window_s, o->overlap_s);
    }
    size_t total = 0;
    while (!rc && !done) {
        if (k.n + BLOCK_SAMPLES > k.cap) {
            size_t cap = 2 * (k.n + BLOCK_SAMPLES);
            float *p = hark_realloc(k.buf, cap * sizeof *p);
            if (!p) {
                rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
                break;
            }
            k.buf = p;
            k.cap = cap;
        }
        size_t got = 0;
        if ((rc = audio_reader_read(rd, k.buf + k.n, BLOCK_SAMPLES, &got, err)))
            break;
        k.n += got;
        total += got;
        done = got == 0;
        if (o->max_seconds > 0 && (double)total > o->max_seconds * rate) {
            rc = err_set(err, HARK_ERR_TOO_LARGE,
                         "audio longer than %g s (the server's --max-audio-seconds)",
                         o->max_seconds);
            break;
        }
        long long keep;
        if (vs) {
            if ((rc = got ? silero_vad_stream_feed(vs, k.buf + k.n - got, got, err)
                          : silero_vad_stream_finish(vs, err)))
                break;
            silero_segment_t s;
            while (!rc && silero_vad_stream_pop(vs, &s, 1))
                rc = piece(&k, s.start, s.end, cb, user, err);
            keep = silero_vad_stream_keep_from(vs);
        } else {
            long long end = k.start + (long long)k.n;
            while (!rc && next * H + W <= end) {
                rc = piece(&k, next * H, next * H + W, cb, user, err);
                next++;
            }
            /* the end: the rest, unless it lies wholly inside the window before */
            if (!rc && done && next * H < end && (next == 0 || end > (next - 1) * H + W))
                rc = piece(&k, next * H, end, cb, user, err);
            keep = next * H;
        }
        if (progress)
            progress(user, total);
        /* drop what no piece still to come can cover; move the rest down now and then */
        if (keep > k.start && keep - k.start > (long long)(k.n / 2)) {
            size_t drop = (size_t)(keep - k.start) < k.n ? (size_t)(keep - k.start) : k.n;
            memmove(k.buf, k.buf + drop, (k.n - drop) * sizeof *k.buf);
            k.n -= drop;
            k.start += (long long)drop;
        }
    }
    if (n_samples)
        *n_samples = total;
    hark_free(k.buf);
    silero_vad_stream_destroy(vs);
    return rc;
}
