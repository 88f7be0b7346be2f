/* silero_segments.c — speech segments from Silero VAD's window probabilities by the rules of
 * silero-vad's get_speech_timestamps (utils_vad.py): hysteresis between threshold and
 * neg_threshold, a segment ends after min_silence_duration_ms below neg_threshold, segments of
 * min_speech_duration_ms or less are dropped, segments past max_speech_duration_s are split at
 * the longest (or the last) silence seen in them or cut, then padded by speech_pad_ms each side
 * (half the gap when two are closer than twice that). Sample arithmetic in double, as Python's.
 * Tests: tests/model/silero/test_silero_vad.c (against silero-vad's own function's output, and
 * hand-made probabilities for each rule). */
#include "model/silero/silero_vad.h"

#include "hark.h"

#include <math.h>
#include <stdlib.h>

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
    silero_segment_t *v;
    size_t n, cap;
} seg_list_t;

static int push(seg_list_t *l, long long start, long long end)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        silero_segment_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return HARK_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (silero_segment_t){start, end};
    return HARK_OK;
}

typedef struct {
    long long end, dur;
} sil_t;

int silero_segments(const float *probs, size_t n_probs, size_t n_samples, int sample_rate,
                    int window, const silero_seg_opts_t *o, silero_segment_t **segs, size_t *n_segs,
                    hark_err_t *err)
{
    *segs = NULL;
    *n_segs = 0;
    if (sample_rate <= 0 || window <= 0 || !(o->threshold >= 0.0 && o->threshold <= 1.0) ||
        o->min_speech_duration_ms < 0 || o->min_silence_duration_ms < 0 || o->speech_pad_ms < 0 ||
        o->min_silence_at_max_speech_ms < 0 || isnan(o->max_speech_duration_s) ||
        isnan(o->neg_threshold))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "VAD options: threshold must be in [0, 1] and durations >= 0");
    const double sr = sample_rate;
    const double min_speech = sr * o->min_speech_duration_ms / 1000.0;
    const double pad = sr * o->speech_pad_ms / 1000.0;
    const double max_speech = o->max_speech_duration_s > 0.0
                                  ? sr * o->max_speech_duration_s - window - 2.0 * pad
                                  : INFINITY;
    const double min_silence = sr * o->min_silence_duration_ms / 1000.0;
    const double min_sil_at_max = sr * o->min_silence_at_max_speech_ms / 1000.0;
    const double thr = o->threshold;
    const double neg = o->neg_threshold >= 0.0 ? o->neg_threshold : fmax(thr - 0.15, 0.01);
    const int use_max = o->use_max_poss_sil_at_max_speech;

    seg_list_t out = {0};
    sil_t *ends = NULL; /* possible_ends: silences inside the current segment */
    size_t n_ends = 0, cap_ends = 0;
    int rc = HARK_OK, triggered = 0, have_cur = 0;
    long long cur_start = 0, temp_end = 0, prev_end = 0, next_start = 0;

    for (size_t i = 0; i < n_probs && rc == HARK_OK; i++) {
        const double p = probs[i];
        const long long cur = (long long)window * (long long)i;
        if (p >= thr && temp_end) { /* speech is back: note the silence, if long enough */
            long long dur = cur - temp_end;
            if ((double)dur > min_sil_at_max) {
                if (n_ends == cap_ends) {
                    size_t cap = cap_ends ? 2 * cap_ends : 16;
                    sil_t *e = realloc(ends, cap * sizeof *e);
                    if (!e) {
                        rc = HARK_ERR_NOMEM;
                        break;
                    }
                    ends = e;
                    cap_ends = cap;
                }
                ends[n_ends++] = (sil_t){temp_end, dur};
            }
            temp_end = 0;
            if (next_start < prev_end)
                next_start = cur;
        }
        if (p >= thr && !triggered) {
            triggered = 1;
            have_cur = 1;
            cur_start = cur;
            continue;
        }
        if (triggered && (double)(cur - cur_start) > max_speech) {
            if (use_max && n_ends) {
                size_t best = 0; /* the first of the longest */
                for (size_t k = 1; k < n_ends; k++)
                    if (ends[k].dur > ends[best].dur)
                        best = k;
                prev_end = ends[best].end;
                long long dur = ends[best].dur;
                if ((rc = push(&out, cur_start, prev_end)))
                    break;
                have_cur = 0;
                next_start = prev_end + dur;
                if (next_start < prev_end + cur) {
                    have_cur = 1;
                    cur_start = next_start;
                } else {
                    triggered = 0;
                }
                prev_end = next_start = temp_end = 0;
                n_ends = 0;
            } else if (prev_end) {
                if ((rc = push(&out, cur_start, prev_end)))
                    break;
                have_cur = 0;
                if (next_start < prev_end) {
                    triggered = 0;
                } else {
                    have_cur = 1;
                    cur_start = next_start;
                }
                prev_end = next_start = temp_end = 0;
                n_ends = 0;
            } else {
                if ((rc = push(&out, cur_start, cur)))
                    break;
                have_cur = 0;
                prev_end = next_start = temp_end = 0;
                triggered = 0;
                n_ends = 0;
                continue;
            }
        }
        if (p < neg && triggered) {
            if (!temp_end)
                temp_end = cur;
            long long sil_now = cur - temp_end;
            if (!use_max && (double)sil_now > min_sil_at_max)
                prev_end = temp_end;
            if ((double)sil_now < min_silence)
                continue;
            if ((double)(temp_end - cur_start) > min_speech &&
                (rc = push(&out, cur_start, temp_end)))
                break;
            have_cur = 0;
            prev_end = next_start = temp_end = 0;
            triggered = 0;
            n_ends = 0;
        }
    }
    free(ends);
    const long long len = (long long)n_samples;
    if (rc == HARK_OK && have_cur && (double)(len - cur_start) > min_speech)
        rc = push(&out, cur_start, len);
    if (rc != HARK_OK) {
        free(out.v);
        return err_set(err, HARK_ERR_NOMEM, "out of memory for VAD segments");
    }
    for (size_t i = 0; i < out.n; i++) { /* padding, in silero's order (it edits the next start) */
        silero_segment_t *s = &out.v[i];
        if (i == 0)
            s->start = (long long)fmax(0.0, (double)s->start - pad);
        if (i + 1 < out.n) {
            silero_segment_t *nx = &out.v[i + 1];
            long long gap = nx->start - s->end;
            if ((double)gap < 2.0 * pad) {
                long long half = gap >= 0 ? gap / 2 : -((-gap + 1) / 2); /* Python's // */
                s->end += half;
                nx->start = nx->start - half > 0 ? nx->start - half : 0;
            } else {
                s->end = (long long)fmin((double)len, (double)s->end + pad);
                nx->start = (long long)fmax(0.0, (double)nx->start - pad);
            }
        } else {
            s->end = (long long)fmin((double)len, (double)s->end + pad);
        }
    }
    *segs = out.v;
    *n_segs = out.n;
    return HARK_OK;
}
