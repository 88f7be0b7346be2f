/* silero_segments.c — speech segments from Silero VAD's window probabilities by the rules of
 * silero-vad's get_speech_timestamps (utils_vad.py): hysteresis between threshold and
 * neg_threshold, a segment ends after min_silence_duration_ms below neg_threshold, segments of
 * min_speech_duration_ms or less are dropped, segments past max_speech_duration_s are split at
 * the longest (or the last) silence seen in them or cut, then padded by speech_pad_ms each side
 * (half the gap when two are closer than twice that). Sample arithmetic in double, as Python's.
 *
 * Incremental: probabilities are fed as they come (silero_seg_stream_*), and a segment is handed
 * out as soon as nothing later can change it — its end padding needs the next segment's start,
 * or a proof that the next one starts at least 2 · pad later. The batch silero_segments runs the
 * same machine over all probabilities, so both give silero-vad's segments exactly.
 * Tests: tests/model/silero/test_silero_vad.c (against silero-vad's own function's output, the
 * stream against the batch in random chunkings, and hand-made probabilities for each rule). */
#include "model/silero/silero_vad.h"

#include "hark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void silero_seg_default_opts(silero_seg_opts_t *o)
{
    *o = (silero_seg_opts_t){.threshold = 0.5,
                             .neg_threshold = -1.0,
                             .min_speech_duration_ms = 250,
                             .max_speech_duration_s = 0.0,
                             .min_silence_duration_ms = 100,
                             .speech_pad_ms = 30,
                             .min_silence_at_max_speech_ms = 98,
                             .use_max_poss_sil_at_max_speech = 1};
}

typedef struct {
    long long end, dur;
} sil_t;

struct silero_seg_stream {
    /* the rules, in samples */
    double min_speech, pad, max_speech, min_silence, min_sil_at_max, thr, neg;
    int use_max, window;
    /* get_speech_timestamps' loop state */
    size_t i; /* windows seen */
    int triggered, have_cur;
    long long cur_start, temp_end, prev_end, next_start;
    sil_t *ends; /* possible_ends: silences inside the open segment */
    size_t n_ends, cap_ends;
    /* padding: the last segment found, its start padded, its end not yet */
    int have_pending, any_out, finished;
    silero_segment_t pending;
    /* the open segment is sure to be found (it is past min_speech), and was paired with the
     * pending one already: its padded start */
    int cur_paired;
    long long cur_padded_start;
    /* segments final and not yet taken */
    silero_segment_t *ready;
    size_t n_ready, head, cap_ready;
};

int silero_seg_stream_create(const silero_seg_opts_t *o, int sample_rate, int window,
                             silero_seg_stream_t **out, hark_err_t *err)
{
    *out = NULL;
    if (sample_rate <= 0 || window <= 0 || !(o->threshold >= 0.0 && o->threshold <= 1.0) ||
        o->min_speech_duration_ms < 0 || o->min_silence_duration_ms < 0 || o->speech_pad_ms < 0 ||
        o->min_silence_at_max_speech_ms < 0 || isnan(o->max_speech_duration_s) ||
        isnan(o->neg_threshold) || o->neg_threshold > 1.0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "VAD options: thresholds must be in [0, 1] and durations >= 0");
    silero_seg_stream_t *s = calloc(1, sizeof *s);
    if (!s)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    const double sr = sample_rate;
    s->min_speech = sr * o->min_speech_duration_ms / 1000.0;
    s->pad = sr * o->speech_pad_ms / 1000.0;
    s->max_speech = o->max_speech_duration_s > 0.0
                        ? sr * o->max_speech_duration_s - window - 2.0 * s->pad
                        : INFINITY;
    s->min_silence = sr * o->min_silence_duration_ms / 1000.0;
    s->min_sil_at_max = sr * o->min_silence_at_max_speech_ms / 1000.0;
    s->thr = o->threshold;
    s->neg = o->neg_threshold >= 0.0 ? o->neg_threshold : fmax(o->threshold - 0.15, 0.01);
    s->use_max = o->use_max_poss_sil_at_max_speech;
    s->window = window;
    *out = s;
    return HARK_OK;
}

void silero_seg_stream_destroy(silero_seg_stream_t *s)
{
    if (!s)
        return;
    free(s->ends);
    free(s->ready);
    free(s);
}

static int emit(silero_seg_stream_t *s, silero_segment_t seg)
{
    if (s->head > 0 && s->head == s->n_ready) /* all taken: start over */
        s->head = s->n_ready = 0;
    if (s->n_ready == s->cap_ready) {
        size_t cap = s->cap_ready ? 2 * s->cap_ready : 8;
        silero_segment_t *r = realloc(s->ready, cap * sizeof *r);
        if (!r)
            return HARK_ERR_NOMEM;
        s->ready = r;
        s->cap_ready = cap;
    }
    s->ready[s->n_ready++] = seg;
    s->any_out = 1;
    return HARK_OK;
}

/* a segment found (get_speech_timestamps' speeches.append): the padding pass of silero-vad,
 * pair by pair — the pending segment's end and this one's start depend only on their gap */
static long long pair(silero_seg_stream_t *s, long long start)
{
    long long gap = start - s->pending.end, padded;
    if ((double)gap < 2.0 * s->pad) {
        long long half = gap >= 0 ? gap / 2 : -((-gap + 1) / 2); /* Python's // */
        s->pending.end += half;
        padded = start - half > 0 ? start - half : 0;
    } else {
        s->pending.end = (long long)((double)s->pending.end + s->pad); /* < the next start */
        padded = (long long)fmax(0.0, (double)start - s->pad);
    }
    s->have_pending = 0;
    return padded;
}

static int found(silero_seg_stream_t *s, long long start, long long end)
{
    silero_segment_t seg = {start, end};
    if (s->cur_paired) { /* start is the open segment's, paired already */
        seg.start = s->cur_padded_start;
        s->cur_paired = 0;
    } else if (s->have_pending) {
        seg.start = pair(s, start);
        if (emit(s, s->pending))
            return HARK_ERR_NOMEM;
    } else {
        /* the first segment, or the previous one was handed out already (its gap >= 2 · pad) */
        seg.start = (long long)fmax(0.0, (double)start - s->pad);
    }
    s->pending = seg;
    s->have_pending = 1;
    return HARK_OK;
}

static int add_end(silero_seg_stream_t *s, long long end, long long dur)
{
    if (s->n_ends == s->cap_ends) {
        size_t cap = s->cap_ends ? 2 * s->cap_ends : 16;
        sil_t *e = realloc(s->ends, cap * sizeof *e);
        if (!e)
            return HARK_ERR_NOMEM;
        s->ends = e;
        s->cap_ends = cap;
    }
    s->ends[s->n_ends++] = (sil_t){end, dur};
    return HARK_OK;
}

/* one window of get_speech_timestamps' loop */
static int step(silero_seg_stream_t *s, double p)
{
    const long long cur = (long long)s->window * (long long)s->i++;
    if (p >= s->thr && s->temp_end) { /* speech is back: note the silence, if long enough */
        long long dur = cur - s->temp_end;
        if ((double)dur > s->min_sil_at_max && add_end(s, s->temp_end, dur))
            return HARK_ERR_NOMEM;
        s->temp_end = 0;
        if (s->next_start < s->prev_end)
            s->next_start = cur;
    }
    if (p >= s->thr && !s->triggered) {
        s->triggered = s->have_cur = 1;
        s->cur_start = cur;
        return HARK_OK;
    }
    if (s->triggered && (double)(cur - s->cur_start) > s->max_speech) {
        if (s->use_max && s->n_ends) {
            size_t best = 0; /* the first of the longest */
            for (size_t k = 1; k < s->n_ends; k++)
                if (s->ends[k].dur > s->ends[best].dur)
                    best = k;
            s->prev_end = s->ends[best].end;
            long long dur = s->ends[best].dur;
            if (found(s, s->cur_start, s->prev_end))
                return HARK_ERR_NOMEM;
            s->have_cur = 0;
            s->next_start = s->prev_end + dur;
            if (s->next_start < s->prev_end + cur) {
                s->have_cur = 1;
                s->cur_start = s->next_start;
            } else {
                s->triggered = 0;
            }
            s->prev_end = s->next_start = s->temp_end = 0;
            s->n_ends = 0;
        } else if (s->prev_end) {
            if (found(s, s->cur_start, s->prev_end))
                return HARK_ERR_NOMEM;
            s->have_cur = 0;
            if (s->next_start < s->prev_end) {
                s->triggered = 0;
            } else {
                s->have_cur = 1;
                s->cur_start = s->next_start;
            }
            s->prev_end = s->next_start = s->temp_end = 0;
            s->n_ends = 0;
        } else {
            if (found(s, s->cur_start, cur))
                return HARK_ERR_NOMEM;
            s->have_cur = 0;
            s->prev_end = s->next_start = s->temp_end = 0;
            s->triggered = 0;
            s->n_ends = 0;
            return HARK_OK;
        }
    }
    if (p < s->neg && s->triggered) {
        if (!s->temp_end)
            s->temp_end = cur;
        long long sil_now = cur - s->temp_end;
        if (!s->use_max && (double)sil_now > s->min_sil_at_max)
            s->prev_end = s->temp_end;
        if ((double)sil_now < s->min_silence)
            return HARK_OK;
        if ((double)(s->temp_end - s->cur_start) > s->min_speech &&
            found(s, s->cur_start, s->temp_end))
            return HARK_ERR_NOMEM;
        s->have_cur = 0;
        s->prev_end = s->next_start = s->temp_end = 0;
        s->triggered = 0;
        s->n_ends = 0;
    }
    return HARK_OK;
}

int silero_seg_stream_push(silero_seg_stream_t *s, const float *probs, size_t n, hark_err_t *err)
{
    if (s->finished)
        return err_set(err, HARK_ERR_INVALID_ARG, "VAD segments: the stream has ended");
    for (size_t k = 0; k < n; k++) {
        if (step(s, probs[k]))
            return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
        /* any later segment starts at or after `lo` (the open one's start, else a window still
         * to come; the last window seen is a conservative bound that lies inside the audio):
         * once that is 2 · pad past the pending end, its padding is that of a lone segment */
        /* the open segment will be found, with this start, once it is past min_speech (where
         * it is cut or split, it keeps its start): its gap to the pending one is known */
        long long last = (long long)s->window * (long long)(s->i - 1);
        if (s->have_pending && s->triggered && !s->cur_paired &&
            (double)((s->temp_end ? s->temp_end : last) - s->cur_start) > s->min_speech) {
            s->cur_padded_start = pair(s, s->cur_start);
            s->cur_paired = 1;
            if (emit(s, s->pending))
                return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
        }
        if (s->have_pending) {
            long long lo = s->triggered ? s->cur_start : last;
            if ((double)(lo - s->pending.end) >= 2.0 * s->pad) {
                s->pending.end = (long long)((double)s->pending.end + s->pad);
                s->have_pending = 0;
                if (emit(s, s->pending))
                    return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
            }
        }
    }
    return HARK_OK;
}

int silero_seg_stream_finish(silero_seg_stream_t *s, size_t n_samples, hark_err_t *err)
{
    if (s->finished)
        return HARK_OK;
    s->finished = 1;
    const long long len = (long long)n_samples;
    if (s->have_cur && (double)(len - s->cur_start) > s->min_speech && found(s, s->cur_start, len))
        return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
    if (s->have_pending) {
        s->pending.end = (long long)fmin((double)len, (double)s->pending.end + s->pad);
        s->have_pending = 0;
        if (emit(s, s->pending))
            return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
    }
    return HARK_OK;
}

long long silero_seg_stream_keep_from(const silero_seg_stream_t *s)
{
    double lo;
    if (s->head < s->n_ready)
        lo = (double)s->ready[s->head].start;
    else if (s->have_pending)
        lo = (double)s->pending.start;
    else if (s->have_cur) /* its padded start is start - pad, or less padding */
        lo = s->cur_paired ? (double)s->cur_padded_start : (double)s->cur_start - s->pad;
    else /* a segment yet to start starts at a window still to come */
        lo = (double)s->window * (double)s->i - s->pad;
    return lo > 0 ? (long long)lo : 0;
}

size_t silero_seg_stream_pop(silero_seg_stream_t *s, silero_segment_t *out, size_t max)
{
    size_t k = 0;
    while (k < max && s->head < s->n_ready)
        out[k++] = s->ready[s->head++];
    return k;
}

int silero_segments(const float *probs, size_t n_probs, size_t n_samples, int sample_rate,
                    int window, const silero_seg_opts_t *o, silero_segment_t **segs, size_t *n_segs,
                    hark_err_t *err)
{
    *segs = NULL;
    *n_segs = 0;
    silero_seg_stream_t *s = NULL;
    int rc = silero_seg_stream_create(o, sample_rate, window, &s, err);
    if (rc == HARK_OK)
        rc = silero_seg_stream_push(s, probs, n_probs, err);
    if (rc == HARK_OK)
        rc = silero_seg_stream_finish(s, n_samples, err);
    if (rc == HARK_OK && s->n_ready > s->head) {
        size_t n = s->n_ready - s->head;
        *segs = malloc(n * sizeof **segs);
        if (!*segs)
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
        else
            *n_segs = silero_seg_stream_pop(s, *segs, n);
    }
    silero_seg_stream_destroy(s);
    return rc;
}
