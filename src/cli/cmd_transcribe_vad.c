/* cmd_transcribe_vad.c — `hark transcribe --vad DIR`: long audio in bounded memory. Each file is
 * read block by block (audio_reader), segmented by a Silero VAD stream as it comes
 * (silero_vad_stream: silero-vad's get_speech_timestamps rules, with max_speech_duration_s so no
 * segment outgrows the model), and only the audio a segment still to come may need is kept.
 * (The cutting is silero_cut, shared with the server's long-form requests.)
 * Segments are recognised in batches of --batch-size, across files (short files fill a batch
 * together), and each file's text is stitched in order with each segment's start and end (text:
 * 'FILE TEXT'; json: per file text, duration_s and segments [{start, end, text, words}] with
 * times in seconds from the file's start; srt/vtt: cues from the words at their file times).
 * Progress on stderr: a bar with the audio done, the real-time factor and the ETA on a terminal, a
 * line every 30 s otherwise. Tests: tests/cli/test_cli_transcribe_vad.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "eval/scp.h"
#include "hark.h"
#include "model/silero/silero_cut.h"
#include "text/words.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    int file;             /* index of its file */
} seg_t;

/* what one file collects: its segments' texts and words in order */
typedef struct {
    char *text;
    size_t len, cap;
    int word_sep;
    cJSON *segs; /* json */
    word_time_t *words;
    int n_words, cap_words;
    double duration_s;
    int queued;    /* its segments waiting in the queue */
    int read_done; /* all its audio read and segmented */
    int failed;
} file_out_t;

/* the run: the segment queue shared by the files, recognised `batch` at a time, so short files
 * fill batches together; a file is written once it is read and none of its segments waits */
typedef struct {
    hark_model_t *model;
    const hark_asr_opts_t *o;
    const silero_vad_t *vad;
    const silero_seg_opts_t *so;
    int rate, batch, json, subtitles;
    const char *format;
    const char **files;
    int nfiles, next_out, failures;
    file_out_t *fo; /* (nfiles) */
    seg_t *q;       /* (batch) */
    int nq;
    cJSON *out;
    decode_item_t *items; /* --wavscp: each file's text into its item instead of stdout */
    decode_done_fn done;
    void *user;
    int n_done;
} run_t;

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

/* one recognised segment into its file's output */
static int add_result(file_out_t *fo, const hark_asr_result_t *r, int i, const seg_t *sg, int rate)
{
    double t0 = (double)sg->start / rate, t1 = (double)sg->end / rate;
    const char *text = hark_asr_result_text(r, i);
    fo->word_sep = hark_asr_result_word_sep(r, i);
    if (append_text(fo, text, fo->word_sep))
        return -1;
    int nw = hark_asr_result_word_count(r, i), off_ms = (int)(t0 * 1000.0 + 0.5);
    cJSON *jw = NULL;
    if (fo->segs) {
        cJSON *js = cJSON_CreateObject();
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
            if (!p)
                return -1;
            fo->words = p;
            fo->cap_words = cap;
        }
        fo->words[fo->n_words++] = (word_time_t){strdup(w ? w : ""), s0 + off_ms, s1 + off_ms};
    }
    return 0;
}

/* recognises the queue in one call and hands each result to its file; frees the audio. A
 * failed call fails every file with a segment in it. */
static void flush_queue(run_t *R)
{
    int n = R->nq;
    if (n == 0)
        return;
    const float **pcm = calloc((size_t)n, sizeof *pcm);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    hark_asr_result_t *r = NULL;
    int rc = pcm && lens ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        pcm[i] = R->q[i].pcm;
        lens[i] = (size_t)(R->q[i].end - R->q[i].start);
    }
    if (!rc && hark_recognize(R->model, pcm, lens, n, R->rate, R->o, &r)) {
        fprintf(stderr, "hark transcribe: %s\n", hark_last_error());
        rc = -1;
    }
    for (int i = 0; i < n; i++) {
        file_out_t *fo = &R->fo[R->q[i].file];
        if (!fo->failed && (rc || add_result(fo, r, i, &R->q[i], R->rate))) {
            if (!rc)
                fprintf(stderr, "hark transcribe: %s: out of memory\n", R->files[R->q[i].file]);
            fo->failed = 1;
        }
        fo->queued--;
        hark_free(R->q[i].pcm);
        R->q[i].pcm = NULL;
    }
    R->nq = 0;
    hark_asr_result_destroy(r);
    free(pcm);
    free(lens);
}

static void free_out(file_out_t *fo)
{
    for (int i = 0; i < fo->n_words; i++)
        free(fo->words[i].text);
    free(fo->words);
    free(fo->text);
    cJSON_Delete(fo->segs);
    fo->words = NULL;
    fo->n_words = fo->cap_words = 0;
    fo->text = NULL;
    fo->len = fo->cap = 0;
    fo->segs = NULL;
}

/* writes the files that are complete, in order */
/* --wavscp: file f's text (or its failure) into its item, then the caller's callback */
static void item_done(run_t *R, int f, const file_out_t *fo)
{
    decode_item_t *it = &R->items[f];
    it->seconds = fo->duration_s;
    if (!fo->failed) {
        it->result.best.text = hark_strdup(fo->text ? fo->text : "");
        it->result.duration_s = fo->duration_s;
        it->result.word_sep = fo->word_sep;
    }
    if (fo->failed || !it->result.best.text) {
        R->failures++;
        it->status = fo->failed ? HARK_ERR_IO : HARK_ERR_NOMEM;
        it->error = hark_strdup(fo->failed ? "cannot read, segment or recognise it (the reason "
                                             "is above)"
                                           : "out of memory");
    }
    R->n_done++;
    if (R->done)
        R->done(R->user, it, R->n_done, R->nfiles);
}

static void write_ready(run_t *R)
{
    hark_err_t err = {0};
    while (R->next_out < R->nfiles && R->fo[R->next_out].read_done &&
           R->fo[R->next_out].queued == 0) {
        file_out_t *fo = &R->fo[R->next_out];
        const char *path = cli_file_name(R->files[R->next_out]);
        R->next_out++;
        if (R->items) {
            item_done(R, R->next_out - 1, fo);
            free_out(fo);
            continue;
        }
        if (fo->failed) {
            R->failures++;
            if (R->json) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "file", path);
                cJSON_AddStringToObject(e, "error", "cannot read or recognise the file");
                cJSON_AddItemToArray(R->out, e);
            }
        } else if (R->json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "file", path);
            cJSON_AddStringToObject(j, "text", fo->text ? fo->text : "");
            cJSON_AddNumberToObject(j, "duration_s", fo->duration_s);
            cJSON_AddItemToObject(j, "segments", fo->segs);
            fo->segs = NULL;
            cJSON_AddItemToArray(R->out, j);
        } else if (R->subtitles) {
            units_style_t st = fo->word_sep ? UNITS_STYLE_BPE : UNITS_STYLE_CHAR;
            if (subtitle_write(stdout, !strcmp(R->format, "vtt") ? SUBTITLE_VTT : SUBTITLE_SRT,
                               fo->words, fo->n_words, st, NULL, (int)(fo->duration_s * 1000.0),
                               &err)) {
                fprintf(stderr, "hark transcribe: %s: %s\n", path, err.msg);
                R->failures++;
            }
        } else {
            printf("%s %s\n", path, fo->text ? fo->text : "");
            fflush(stdout);
        }
        free_out(fo);
    }
}

/* drops file f's segments from the queue (it failed) */
static void unqueue_file(run_t *R, int f)
{
    int k = 0;
    for (int i = 0; i < R->nq; i++) {
        if (R->q[i].file == f) {
            hark_free(R->q[i].pcm);
            R->fo[f].queued--;
        } else {
            R->q[k++] = R->q[i];
        }
    }
    R->nq = k;
}

typedef struct {
    run_t *R;
    int f;
    progress_t pg;
} one_file_t;

/* a VAD segment of file f into the queue (recognised as the queue fills) */
static int queue_segment(void *user, long long start, long long end, const float *pcm,
                         hark_err_t *err)
{
    one_file_t *u = user;
    run_t *R = u->R;
    size_t len = (size_t)(end - start);
    float *x = hark_malloc((len ? len : 1) * sizeof *x);
    if (!x)
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", cli_file_name(R->files[u->f]));
    memcpy(x, pcm, len * sizeof *x);
    R->q[R->nq++] = (seg_t){start, end, x, u->f};
    R->fo[u->f].queued++;
    if (R->nq == R->batch) {
        flush_queue(R);
        write_ready(R); /* files before this one may be complete now */
    }
    return HARK_OK;
}

static void file_progress(void *user, size_t samples)
{
    one_file_t *u = user;
    progress_update(&u->pg, (double)samples / u->R->rate, 0);
}

/* file f: read, segment (silero_cut), queue its segments */
static void vad_one_file(run_t *R, int f)
{
    const char *path = R->files[f];
    file_out_t *fo = &R->fo[f];
    audio_reader_t *rd = NULL;
    hark_err_t err = {0};
    size_t n = 0;
    one_file_t u = {.R = R, .f = f};
    silero_cut_opts_t co = {.vad = R->vad, .seg = *R->so};
    char spool[64] = "";
    int rc = HARK_OK;
    if (scp_is_command(path)) { /* a wav.scp "command |": its output, spooled to a file */
        void *raw = NULL;
        size_t nraw = 0;
        int fd = -1;
        snprintf(spool, sizeof spool, "/tmp/hark-vad-XXXXXX");
        rc = scp_run_command(path, &raw, &nraw, (size_t)1 << 31, &err);
        if (!rc && ((fd = mkstemp(spool)) < 0 || write(fd, raw, nraw) != (ssize_t)nraw))
            rc = err_set(&err, HARK_ERR_IO, "cannot spool the output of \"%.200s\" to %s: %s", path,
                         spool, strerror(errno));
        if (fd >= 0)
            close(fd);
        else
            spool[0] = 0;
        hark_free(raw);
    }
    if (!rc)
        rc = audio_reader_open(spool[0] ? spool : path, R->rate, &rd, &err);
    if (!rc) {
        u.pg = (progress_t){.path = cli_file_name(path),
                            .total_s = audio_reader_duration(rd),
                            .t0 = clock_now_ns(),
                            .tty = !R->items && isatty(2)};
        u.pg.last = u.pg.t0;
        rc = silero_cut(rd, &co, queue_segment, file_progress, &u, &n, &err);
    }
    if (rc) {
        fprintf(stderr, "hark transcribe: %s\n", err.msg);
        fo->failed = 1;
        unqueue_file(R, f);
    } else {
        progress_update(&u.pg, (double)n / R->rate, 1);
    }
    fo->duration_s = (double)n / R->rate;
    fo->read_done = 1;
    audio_reader_close(rd);
    if (spool[0])
        unlink(spool);
}

static int vad_run(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                   const silero_seg_opts_t *so, int batch, const char *format, const char **files,
                   int nfiles, decode_item_t *items, decode_done_fn done, void *user)
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
    hark_asr_opts_t o = *opts;
    run_t R = {.model = model,
               .o = &o,
               .vad = vad,
               .so = so,
               .rate = rate,
               .batch = batch,
               .format = format,
               .files = files,
               .nfiles = nfiles,
               .items = items,
               .done = done,
               .user = user};
    R.json = !strcmp(format, "json");
    R.subtitles = !strcmp(format, "srt") || !strcmp(format, "vtt");
    o.want_words = R.json || R.subtitles;
    R.fo = calloc((size_t)(nfiles > 0 ? nfiles : 1), sizeof *R.fo);
    R.q = calloc((size_t)batch, sizeof *R.q);
    R.out = R.json ? cJSON_CreateArray() : NULL;
    if (!R.fo || !R.q) {
        fprintf(stderr, "hark transcribe: out of memory\n");
        free(R.fo);
        free(R.q);
        cJSON_Delete(R.out);
        silero_vad_destroy(vad);
        return 1;
    }
    for (int f = 0; f < nfiles; f++) {
        R.fo[f].segs = R.json ? cJSON_CreateArray() : NULL;
        vad_one_file(&R, f);
        write_ready(&R);
    }
    flush_queue(&R);
    write_ready(&R);
    if (R.json) {
        char *s = cJSON_Print(R.out);
        if (s)
            printf("%s\n", s);
        free(s);
        cJSON_Delete(R.out);
    }
    for (int f = 0; f < nfiles; f++)
        free_out(&R.fo[f]);
    free(R.fo);
    free(R.q);
    silero_vad_destroy(vad);
    return R.failures ? 1 : 0;
}

int transcribe_vad_files(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                         const silero_seg_opts_t *so, int batch, const char *format,
                         const char **files, int nfiles)
{
    return vad_run(model, opts, vad_dir, so, batch, format, files, nfiles, NULL, NULL, NULL);
}

int transcribe_vad_items(hark_model_t *model, const hark_asr_opts_t *opts, const char *vad_dir,
                         const silero_seg_opts_t *so, int batch, decode_item_t *items, int n,
                         decode_done_fn done, void *user)
{
    const char **files = hark_calloc((size_t)(n > 0 ? n : 1), sizeof *files);
    if (!files) {
        fprintf(stderr, "hark transcribe: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++)
        files[i] = items[i].path;
    int st = vad_run(model, opts, vad_dir, so, batch, "text", files, n, items, done, user);
    hark_free(files);
    return st;
}
