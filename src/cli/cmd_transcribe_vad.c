/* cmd_transcribe_vad.c — `hark transcribe --vad DIR`: long audio in bounded memory. Each file is
 * read block by block (audio_reader), segmented by a Silero VAD stream as it comes
 * (silero_vad_stream: silero-vad's get_speech_timestamps rules, with max_speech_duration_s so no
 * segment outgrows the model), and only the audio a segment still to come may need is kept.
 * Segments are recognised in batches of --batch-size, and the text is stitched in order with each
 * segment's start and end (text: 'FILE TEXT'; json: per file text, duration_s and segments
 * [{start, end, text, words}] with times in seconds from the file's start; srt/vtt: cues from
 * the words at their times in the file). Progress on stderr: a bar with the audio done, the
 * real-time factor and the ETA on a terminal, a line every 30 s otherwise.
 * Tests: tests/cli/test_cli_transcribe_vad.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "text/words.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK_SAMPLES 16000
#define PROGRESS_TTY_NS 250000000ull   /* a terminal's bar: redrawn at most 4 times a second */
#define PROGRESS_LOG_NS 30000000000ull /* otherwise a line every 30 s */

/* progress of long work on stderr: a bar on a terminal, else a line now and then */
typedef struct {
    const char *path;
    double total_s; /* 0: unknown */
    uint64_t t0, last;
    int tty, drawn;
} progress_t;

static void fmt_time(char *b, size_t n, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress_update(progress_t *p, double done_s, int final)
{
    uint64_t now = clock_now_ns();
    if (!final && now - p->last < (p->tty ? PROGRESS_TTY_NS : PROGRESS_LOG_NS))
        return;
    if (final && !p->drawn)
        return; /* short work: nothing was shown, nothing to close */
    p->last = now;
    double el = (double)(now - p->t0) / 1e9, rtfx = el > 0 ? done_s / el : 0;
    char d[32], tot[32], eta[32] = "?";
    fmt_time(d, sizeof d, done_s);
    fmt_time(tot, sizeof tot, p->total_s);
    if (p->total_s > 0 && rtfx > 0)
        fmt_time(eta, sizeof eta, (p->total_s - done_s > 0 ? p->total_s - done_s : 0) / rtfx);
    if (p->tty) {
        char bar[21] = "";
        int fill = p->total_s > 0 ? (int)(20 * done_s / p->total_s) : 0;
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '#' : '-';
        bar[20] = 0;
        fprintf(stderr, "\r%s %s / %s [%s] RTFx %.1f ETA %s\033[K%s", p->path, d,
                p->total_s > 0 ? tot : "?", bar, rtfx, final ? "0:00" : eta, final ? "\n" : "");
    } else {
        fprintf(stderr, "hark transcribe: %s: %s of %s audio done, RTFx %.1f, ETA %s\n", p->path, d,
                p->total_s > 0 ? tot : "?", rtfx, final ? "0:00" : eta);
    }
    p->drawn = 1;
}

typedef struct {
    long long start, end; /* samples at the VAD's rate */
    float *pcm;           /* (end - start) */
} seg_t;

/* what one file collects: its segments' texts and words in order */
typedef struct {
    char *text;
    size_t len, cap;
    int word_sep;
    cJSON *segs; /* json */
    word_time_t *words;
    int n_words, cap_words;
} file_out_t;

static int append_text(file_out_t *fo, const char *t, int sep)
{
    size_t n = strlen(t);
    if (!n)
        return 0;
    if (fo->len + n + 2 > fo->cap) {
        size_t cap = 2 * (fo->len + n + 2);
        char *p = realloc(fo->text, cap);
        if (!p)
            return -1;
        fo->text = p;
        fo->cap = cap;
    }
    if (fo->len && sep)
        fo->text[fo->len++] = ' ';
    memcpy(fo->text + fo->len, t, n + 1);
    fo->len += n;
    return 0;
}

/* recognises q[0..n) and appends their results to fo; frees their audio */
static int flush_segments(hark_model_t *model, const hark_asr_opts_t *o, int rate, seg_t *q, int n,
                          file_out_t *fo, const char *path)
{
    if (n == 0)
        return 0;
    const float **pcm = calloc((size_t)n, sizeof *pcm);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = pcm && lens ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        pcm[i] = q[i].pcm;
        lens[i] = (size_t)(q[i].end - q[i].start);
    }
    hark_asr_result_t *r = NULL;
    if (!rc && hark_recognize(model, pcm, lens, n, rate, o, &r)) {
        fprintf(stderr, "hark transcribe: %s: %s\n", path, hark_last_error());
        rc = -1;
    }
    for (int i = 0; !rc && i < n; i++) {
        double t0 = (double)q[i].start / rate, t1 = (double)q[i].end / rate;
        const char *text = hark_asr_result_text(r, i);
        fo->word_sep = hark_asr_result_word_sep(r, i);
        if (append_text(fo, text, fo->word_sep)) {
            rc = -1;
            break;
        }
        int nw = hark_asr_result_word_count(r, i), off_ms = (int)(t0 * 1000.0 + 0.5);
        cJSON *js = NULL, *jw = NULL;
        if (fo->segs) {
            js = cJSON_CreateObject();
            cJSON_AddNumberToObject(js, "start", t0);
            cJSON_AddNumberToObject(js, "end", t1);
            cJSON_AddStringToObject(js, "text", text);
            if (nw > 0)
                jw = cJSON_AddArrayToObject(js, "words");
            cJSON_AddItemToArray(fo->segs, js);
        }
        for (int k = 0; k < nw; k++) {
            int s0 = 0, s1 = 0;
            const char *w = hark_asr_result_word(r, i, k, &s0, &s1);
            if (jw) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "word", w);
                cJSON_AddNumberToObject(e, "start", (s0 + off_ms) / 1000.0);
                cJSON_AddNumberToObject(e, "end", (s1 + off_ms) / 1000.0);
                cJSON_AddItemToArray(jw, e);
            }
            if (fo->n_words == fo->cap_words) {
                int cap = fo->cap_words ? 2 * fo->cap_words : 64;
                word_time_t *p = realloc(fo->words, (size_t)cap * sizeof *p);
                if (!p) {
                    rc = -1;
                    break;
                }
                fo->words = p;
                fo->cap_words = cap;
            }
            fo->words[fo->n_words++] = (word_time_t){strdup(w ? w : ""), s0 + off_ms, s1 + off_ms};
        }
    }
    hark_asr_result_destroy(r);
    for (int i = 0; i < n; i++) {
        hark_free(q[i].pcm);
        q[i].pcm = NULL;
    }
    free(pcm);
    free(lens);
    return rc;
}

/* one file: read, segment, recognise; fills fo and *duration_s */
static int vad_one_file(hark_model_t *model, const hark_asr_opts_t *o, const silero_vad_t *vad,
                        int rate, const silero_seg_opts_t *so, int batch, const char *path,
                        file_out_t *fo, double *duration_s)
{
    audio_reader_t *rd = NULL;
    silero_vad_stream_t *vs = NULL;
    hark_err_t err = {0};
    float *buf = NULL; /* audio from buf_start on, the part segments still to come may need */
    long long buf_start = 0;
    size_t buf_n = 0, buf_cap = 0;
    seg_t *q = calloc((size_t)batch, sizeof *q);
    int nq = 0, rc = 0, done = 0;
    if (!q || audio_reader_open(path, rate, &rd, &err) ||
        silero_vad_stream_create(vad, rate, so, &vs, &err)) {
        fprintf(stderr, "hark transcribe: %s\n", q ? err.msg : "out of memory");
        rc = -1;
    }
    progress_t pg = {.path = path,
                     .total_s = rd ? audio_reader_duration(rd) : 0,
                     .t0 = clock_now_ns(),
                     .tty = isatty(2)};
    pg.last = pg.t0;
    while (!rc && !done) {
        if (buf_n + BLOCK_SAMPLES > buf_cap) {
            size_t cap = 2 * (buf_n + BLOCK_SAMPLES);
            float *p = hark_realloc(buf, cap * sizeof *p);
            if (!p) {
                fprintf(stderr, "hark transcribe: %s: out of memory\n", path);
                rc = -1;
                break;
            }
            buf = p;
            buf_cap = cap;
        }
        size_t got = 0;
        if (audio_reader_read(rd, buf + buf_n, BLOCK_SAMPLES, &got, &err) ||
            (got ? silero_vad_stream_feed(vs, buf + buf_n, got, &err)
                 : silero_vad_stream_finish(vs, &err))) {
            fprintf(stderr, "hark transcribe: %s\n", err.msg);
            rc = -1;
            break;
        }
        buf_n += got;
        done = got == 0;
        silero_segment_t s;
        while (!rc && silero_vad_stream_pop(vs, &s, 1)) {
            size_t len = (size_t)(s.end - s.start);
            float *x = hark_malloc((len ? len : 1) * sizeof *x);
            if (!x || s.start < buf_start || s.end > buf_start + (long long)buf_n) {
                fprintf(stderr, "hark transcribe: %s: %s\n", path,
                        x ? "a VAD segment outside the audio kept (a bug)" : "out of memory");
                hark_free(x);
                rc = -1;
                break;
            }
            memcpy(x, buf + (s.start - buf_start), len * sizeof *x);
            q[nq++] = (seg_t){s.start, s.end, x};
            if (nq == batch) {
                rc = flush_segments(model, o, rate, q, nq, fo, path);
                nq = 0;
            }
        }
        progress_update(&pg, (double)silero_vad_stream_samples(vs) / rate, 0);
        /* drop what no segment still to come can cover; move the rest down now and then */
        long long keep = silero_vad_stream_keep_from(vs);
        if (keep - buf_start > (long long)(buf_n / 2) && keep > buf_start) {
            size_t drop = (size_t)(keep - buf_start) < buf_n ? (size_t)(keep - buf_start) : buf_n;
            memmove(buf, buf + drop, (buf_n - drop) * sizeof *buf);
            buf_n -= drop;
            buf_start += (long long)drop;
        }
    }
    if (!rc)
        rc = flush_segments(model, o, rate, q, nq, fo, path);
    if (!rc)
        progress_update(&pg, (double)silero_vad_stream_samples(vs) / rate, 1);
    else
        for (int i = 0; i < nq; i++)
            hark_free(q[i].pcm);
    *duration_s = vs ? (double)silero_vad_stream_samples(vs) / rate : 0;
    free(q);
    hark_free(buf);
    silero_vad_stream_destroy(vs);
    audio_reader_close(rd);
    return rc;
}

int transcribe_vad_files(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                         const silero_seg_opts_t *so, int batch, const char *format,
                         const char **files, int nfiles)
{
    silero_vad_t *vad = NULL;
    hark_err_t err = {0};
    if (silero_vad_load(vad_dir, 1, &vad, &err)) {
        fprintf(stderr, "hark transcribe: --vad %s\n", err.msg);
        return 1;
    }
    int rates[4], nr = silero_vad_rates(vad, rates), rate = rates[0];
    for (int i = 0; i < nr; i++)
        if (rates[i] == 16000)
            rate = 16000;
    int json = !strcmp(format, "json"),
        subtitles = !strcmp(format, "srt") || !strcmp(format, "vtt");
    hark_asr_opts_t o = *opts;
    o.want_words = json || subtitles;
    int failures = 0;
    cJSON *out = json ? cJSON_CreateArray() : NULL;
    for (int f = 0; f < nfiles; f++) {
        file_out_t fo = {0};
        fo.segs = json ? cJSON_CreateArray() : NULL;
        double dur = 0;
        int rc = vad_one_file(model, &o, vad, rate, so, batch, files[f], &fo, &dur);
        if (rc) {
            failures++;
            if (json) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "file", files[f]);
                cJSON_AddStringToObject(e, "error", "cannot read or recognise the file");
                cJSON_AddItemToArray(out, e);
            }
            cJSON_Delete(fo.segs);
        } else if (json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "file", files[f]);
            cJSON_AddStringToObject(j, "text", fo.text ? fo.text : "");
            cJSON_AddNumberToObject(j, "duration_s", dur);
            cJSON_AddItemToObject(j, "segments", fo.segs);
            cJSON_AddItemToArray(out, j);
        } else if (subtitles) {
            units_style_t st = fo.word_sep ? UNITS_STYLE_BPE : UNITS_STYLE_CHAR;
            if (subtitle_write(stdout, !strcmp(format, "vtt") ? SUBTITLE_VTT : SUBTITLE_SRT,
                               fo.words, fo.n_words, st, NULL, (int)(dur * 1000.0), &err)) {
                fprintf(stderr, "hark transcribe: %s: %s\n", files[f], err.msg);
                failures++;
            }
        } else {
            printf("%s %s\n", files[f], fo.text ? fo.text : "");
            fflush(stdout);
        }
        for (int i = 0; i < fo.n_words; i++)
            free(fo.words[i].text);
        free(fo.words);
        free(fo.text);
    }
    if (json) {
        char *s = cJSON_Print(out);
        if (s)
            printf("%s\n", s);
        free(s);
        cJSON_Delete(out);
    }
    silero_vad_destroy(vad);
    return failures ? 1 : 0;
}
