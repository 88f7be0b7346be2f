/* cmd_vad.c — `hark vad`: speech segments of audio files with a Silero VAD model
 * (tools/convert_silero_vad.py), the files of a group read block by block and stepped together
 * window by window as one batch (memory: a window and a state per file, whatever the length),
 * segmented as they go (silero_seg_stream); text (one "FILE START END" line per segment,
 * seconds) or JSON (per file: file, sample_rate, duration_s, segments [{start, end}] in seconds,
 * probs: every window's probability).
 * Tests: tests/cli/test_cli_vad.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "model/silero/silero_vad_gpu.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void vad_usage(FILE *f)
{
    fprintf(
        f,
        "usage: hark vad --model DIR [--threshold 0.5] [--neg-threshold X]\n"
        "                [--min-speech-duration-ms 250] [--max-speech-duration-s S]\n"
        "                [--min-silence-duration-ms 100] [--speech-pad-ms 30]\n"
        "                [--sample-rate auto|16000|8000] [--batch-size 32] [--threads N]\n"
        "                [--device cpu|cuda:N] [--format text|json] FILE...\n\n"
        "Finds the speech in audio files with a Silero VAD model (tools/convert_silero_vad.py)\n"
        "by silero-vad's get_speech_timestamps rules; the options are its parameters\n"
        "(--neg-threshold: default threshold - 0.15; --max-speech-duration-s: default no\n"
        "limit). --sample-rate auto runs a file at its own rate when the model has a network\n"
        "for it, else resampled to the model's first rate (16000). Up to --batch-size (<= 256) "
        "files\n"
        "are read and run together; --device cuda:N runs them on that GPU, 4 s of each file per\n"
        "step (same probabilities within 1e-5). Text: one line per segment, FILE START END in\n"
        "seconds.\n"
        "JSON: an array with, per file, file, sample_rate, duration_s, segments [{start,\n"
        "end}] in seconds and probs (one per window of 512 samples at 16 kHz, 256 at 8 kHz).\n");
}

static int parse_num(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *e;
    double v = strtod(s, &e);
    if (!*s || *e || !(v >= lo && v <= hi)) {
        fprintf(stderr, "hark vad: %s must be a number in [%g, %g] (got '%s')\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct {
    const char *path;
    audio_reader_t *rd;
    int rate;
    size_t n; /* samples read */
    float *probs;
    size_t n_win, cap_win;
    silero_seg_stream_t *seg;
    int failed;
} vad_file_t;

/* opens f at the rate the model runs it: `want` (> 0), or its own when the model has it, else
 * the model's first */
static int open_file(const silero_vad_t *m, int want, const silero_seg_opts_t *so, vad_file_t *f)
{
    hark_err_t err = {0};
    int rc = audio_reader_open(f->path, want, &f->rd, &err);
    if (!rc && !silero_vad_rate(m, audio_reader_rate(f->rd))) {
        int rates[4];
        silero_vad_rates(m, rates);
        audio_reader_close(f->rd);
        f->rd = NULL;
        rc = audio_reader_open(f->path, rates[0], &f->rd, &err);
    }
    if (!rc) {
        f->rate = audio_reader_rate(f->rd);
        rc = silero_seg_stream_create(so, f->rate, silero_vad_rate(m, f->rate)->window, &f->seg,
                                      &err);
    }
    if (rc)
        fprintf(stderr, "hark vad: %s\n", err.msg);
    return rc ? -1 : 0;
}

static void close_file(vad_file_t *f)
{
    audio_reader_close(f->rd);
    silero_seg_stream_destroy(f->seg);
    free(f->probs);
    memset(f, 0, sizeof *f);
}

/* up to want samples of f into x (fewer only at its end or on a read error, which marks it
 * failed); counted in f->n */
static size_t read_samples(vad_file_t *f, float *x, size_t want)
{
    hark_err_t err = {0};
    size_t got = 0, k;
    while (got < want) {
        if (audio_reader_read(f->rd, x + got, want - got, &k, &err)) {
            fprintf(stderr, "hark vad: %s\n", err.msg);
            f->failed = 1;
            break;
        }
        if (!k)
            break;
        got += k;
    }
    f->n += got;
    return got;
}

/* the files g[idx[0..n)] (one rate, r) stepped together window by window, each read as it goes:
 * memory is a window and a state per file, and the probabilities */
static void run_lockstep(const silero_rate_t *r, vad_file_t *g, int *idx, int n)
{
    const size_t W = (size_t)r->window, sf = silero_vad_state_floats(r);
    float *state = calloc((size_t)n * sf, sizeof(float));
    float *x = malloc((size_t)n * W * sizeof(float));
    float *p = malloc((size_t)n * sizeof(float));
    float *scratch = malloc(silero_vad_scratch_floats(r, n) * sizeof(float));
    hark_err_t err = {0};
    if (!state || !x || !p || !scratch) {
        fprintf(stderr, "hark vad: out of memory\n");
        for (int i = 0; i < n; i++)
            g[idx[i]].failed = 1;
        n = 0;
    }
    while (n > 0) {
        int keep = 0;
        for (int b = 0; b < n; b++) { /* the next window of every file, dropping those at the end */
            vad_file_t *f = &g[idx[b]];
            size_t got = read_samples(f, x + (size_t)keep * W, W);
            if (!f->failed && got == 0 && silero_seg_stream_finish(f->seg, f->n, &err)) {
                fprintf(stderr, "hark vad: %s: %s\n", f->path, err.msg);
                f->failed = 1;
            }
            if (f->failed || got == 0)
                continue;
            memset(x + (size_t)keep * W + got, 0, (W - got) * sizeof(float));
            if (keep != b)
                memcpy(state + (size_t)keep * sf, state + (size_t)b * sf, sf * sizeof(float));
            idx[keep++] = idx[b];
        }
        n = keep;
        if (!n)
            break;
        silero_vad_step(r, p, state, x, W, n, scratch);
        for (int b = 0; b < n; b++) {
            vad_file_t *f = &g[idx[b]];
            if (f->n_win == f->cap_win) {
                size_t cap = f->cap_win ? 2 * f->cap_win : 1024;
                float *q = realloc(f->probs, cap * sizeof *q);
                if (!q) {
                    f->failed = 1;
                    continue;
                }
                f->probs = q;
                f->cap_win = cap;
            }
            f->probs[f->n_win++] = p[b];
            if (silero_seg_stream_push(f->seg, &p[b], 1, &err))
                f->failed = 1;
        }
    }
    free(state);
    free(x);
    free(p);
    free(scratch);
}

/* the same on the GPU: every file's next GPU_CHUNK windows per step (its state on the device), so
 * memory is a chunk per file whatever the length */
#define GPU_CHUNK 125 /* windows: 4 s at 16 kHz */
static void run_chunks_gpu(silero_vad_gpu_t *gm, const silero_rate_t *r, vad_file_t *g, int *idx,
                           int n)
{
    const size_t W = (size_t)r->window, row = GPU_CHUNK * W;
    silero_vad_gpu_batch_t *b = NULL;
    hark_err_t err = {0};
    int *nw = calloc((size_t)n, sizeof *nw), *live = calloc((size_t)n, sizeof *live);
    if (!nw || !live || silero_vad_gpu_batch_create(gm, n, GPU_CHUNK, &b, &err) != HARK_OK) {
        fprintf(stderr, "hark vad: %s\n", err.msg[0] ? err.msg : "out of memory");
        for (int i = 0; i < n; i++)
            g[idx[i]].failed = 1;
        n = 0;
    }
    for (int i = 0; i < n; i++)
        live[i] = 1; /* 1: reading, 2: its last chunk read, 0: ended (segments finished) */
    int any = n > 0;
    while (any) {
        float *in = silero_vad_gpu_batch_input(b);
        any = 0;
        for (int i = 0; i < n; i++) { /* streams keep their slots: an ended one runs 0 windows */
            vad_file_t *f = &g[idx[i]];
            nw[i] = 0;
            if (!live[i])
                continue;
            size_t got = read_samples(f, in + (size_t)i * row, row);
            if (f->failed) {
                live[i] = 0;
                continue;
            }
            nw[i] = (int)((got + W - 1) / W);
            memset(in + (size_t)i * row + got, 0, ((size_t)nw[i] * W - got) * sizeof(float));
            if (got < row)
                live[i] = 2;
            any = 1;
        }
        if (any && silero_vad_gpu_batch_run(b, nw, n, &err) != HARK_OK) {
            fprintf(stderr, "hark vad: %s\n", err.msg);
            for (int i = 0; i < n; i++)
                g[idx[i]].failed = 1;
            break;
        }
        const float *p = any ? silero_vad_gpu_batch_probs(b) : NULL;
        for (int i = 0; i < n; i++) {
            vad_file_t *f = &g[idx[i]];
            if (!live[i])
                continue;
            int last = live[i] == 2;
            if (nw[i] && f->n_win + (size_t)nw[i] > f->cap_win) {
                size_t cap = f->cap_win ? f->cap_win : 1024;
                while (cap < f->n_win + (size_t)nw[i])
                    cap *= 2;
                float *q = realloc(f->probs, cap * sizeof *q);
                if (!q) {
                    f->failed = 1;
                    live[i] = 0;
                    continue;
                }
                f->probs = q;
                f->cap_win = cap;
            }
            if (nw[i]) {
                memcpy(f->probs + f->n_win, p + (size_t)i * GPU_CHUNK,
                       (size_t)nw[i] * sizeof(float));
                f->n_win += (size_t)nw[i];
            }
            if ((nw[i] &&
                 silero_seg_stream_push(f->seg, p + (size_t)i * GPU_CHUNK, (size_t)nw[i], &err)) ||
                (last && silero_seg_stream_finish(f->seg, f->n, &err))) {
                fprintf(stderr, "hark vad: %s: %s\n", f->path, err.msg);
                f->failed = 1;
            }
            if (last || f->failed)
                live[i] = 0;
        }
    }
    silero_vad_gpu_batch_destroy(b);
    free(nw);
    free(live);
}

/* the file's segments so far (all of them once finished): malloc'ed, *ns of them */
static silero_segment_t *take_segments(vad_file_t *f, size_t *ns)
{
    size_t cap = 16;
    silero_segment_t *s = malloc(cap * sizeof *s);
    *ns = 0;
    while (s) {
        *ns += silero_seg_stream_pop(f->seg, s + *ns, cap - *ns);
        if (*ns < cap)
            break;
        silero_segment_t *t = realloc(s, 2 * cap * sizeof *t);
        if (!t) {
            free(s);
            return NULL;
        }
        s = t;
        cap *= 2;
    }
    return s;
}

static cJSON *file_json(const vad_file_t *f, const silero_segment_t *s, size_t ns)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "file", f->path);
    cJSON_AddNumberToObject(j, "sample_rate", f->rate);
    cJSON_AddNumberToObject(j, "duration_s", (double)f->n / f->rate);
    cJSON *segs = cJSON_AddArrayToObject(j, "segments");
    for (size_t i = 0; i < ns; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "start", (double)s[i].start / f->rate);
        cJSON_AddNumberToObject(e, "end", (double)s[i].end / f->rate);
        cJSON_AddItemToArray(segs, e);
    }
    cJSON *p = cJSON_AddArrayToObject(j, "probs");
    for (size_t i = 0; i < f->n_win; i++)
        cJSON_AddItemToArray(p, cJSON_CreateNumber(f->probs[i]));
    return j;
}

int cli_vad(int argc, char **argv)
{
    const char *model = NULL, *format = "text";
    silero_seg_opts_t so;
    silero_seg_default_opts(&so);
    int want_rate = 0, batch = 32, threads = 0, device = -1; /* -1: the CPU */
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    if (!files)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        double v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            vad_usage(stdout);
            free(files);
            return 0;
        } else if ((!strcmp(a, "--model") || !strcmp(a, "-m")) && has)
            model = argv[++i];
        else if (!strcmp(a, "--format") && has)
            format = argv[++i];
        else if (!strcmp(a, "--threshold") && has) {
            if (parse_num(a, argv[++i], 0, 1, &so.threshold))
                goto usage_err;
        } else if (!strcmp(a, "--neg-threshold") && has) {
            if (parse_num(a, argv[++i], 0, 1, &so.neg_threshold))
                goto usage_err;
        } else if (!strcmp(a, "--min-speech-duration-ms") && has) {
            if (parse_num(a, argv[++i], 0, 1e7, &v))
                goto usage_err;
            so.min_speech_duration_ms = (int)v;
        } else if (!strcmp(a, "--max-speech-duration-s") && has) {
            if (parse_num(a, argv[++i], 0.1, 1e7, &so.max_speech_duration_s))
                goto usage_err;
        } else if (!strcmp(a, "--min-silence-duration-ms") && has) {
            if (parse_num(a, argv[++i], 0, 1e7, &v))
                goto usage_err;
            so.min_silence_duration_ms = (int)v;
        } else if (!strcmp(a, "--speech-pad-ms") && has) {
            if (parse_num(a, argv[++i], 0, 1e6, &v))
                goto usage_err;
            so.speech_pad_ms = (int)v;
        } else if (!strcmp(a, "--sample-rate") && has) {
            const char *s = argv[++i];
            if (strcmp(s, "auto") != 0) {
                if (parse_num(a, s, AUDIO_MIN_RATE, AUDIO_MAX_RATE, &v))
                    goto usage_err;
                want_rate = (int)v;
            }
        } else if (!strcmp(a, "--batch-size") && has) {
            if (parse_num(a, argv[++i], 1, 256, &v)) /* files open at once */
                goto usage_err;
            batch = (int)v;
        } else if (!strcmp(a, "--device") && has) {
            const char *d = argv[++i];
            char *e = NULL;
            if (!strcmp(d, "cpu"))
                device = -1;
            else if (!strcmp(d, "cuda"))
                device = 0;
            else if (!strncmp(d, "cuda:", 5) && d[5] >= '0' && d[5] <= '9' &&
                     (device = (int)strtol(d + 5, &e, 10), !*e))
                ;
            else {
                fprintf(stderr, "hark vad: --device must be cpu or cuda:N (got '%s')\n", d);
                goto usage_err;
            }
        } else if (!strcmp(a, "--threads") && has) {
            if (parse_num(a, argv[++i], 1, 1024, &v))
                goto usage_err;
            threads = (int)v;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hark vad: unknown or incomplete option '%s'\n", a);
            goto usage_err;
        } else
            files[nfiles++] = a;
    }
    if (!model || !nfiles || (strcmp(format, "text") && strcmp(format, "json"))) {
        if (model && nfiles)
            fprintf(stderr, "hark vad: --format must be text or json\n");
        goto usage_err;
    }
    silero_vad_t *m = NULL;
    hark_err_t err = {0};
    if (silero_vad_load(model, 1, &m, &err) != HARK_OK) {
        fprintf(stderr, "hark vad: %s\n", err.msg);
        free(files);
        return 1;
    }
    if (want_rate && !silero_vad_rate(m, want_rate)) {
        fprintf(stderr, "hark vad: --sample-rate %d: the model has no network for it\n", want_rate);
        silero_vad_destroy(m);
        free(files);
        return 2;
    }
    if (threads)
        ops_set_threads(threads);
    silero_vad_gpu_t *gpu[4] = {0}; /* per rate, made when a batch at that rate needs it */
    int rates[4], n_rates = silero_vad_rates(m, rates);
    if (device >= 0) { /* every network up front: a GPU hark cannot use fails before any output */
        for (int i = 0; i < n_rates; i++)
            if (silero_vad_gpu_create(silero_vad_rate(m, rates[i]), device, &gpu[i], &err)) {
                fprintf(stderr, "hark vad: --device cuda:%d: %s\n", device, err.msg);
                for (int k = 0; k < i; k++)
                    silero_vad_gpu_destroy(gpu[k]);
                silero_vad_destroy(m);
                free(files);
                return 1;
            }
    }
    int json = !strcmp(format, "json"), failures = 0;
    if (json)
        printf("[");
    int first = 1;
    vad_file_t *g = calloc((size_t)batch, sizeof *g);
    int *idx = calloc((size_t)batch, sizeof *idx);
    if (!g || !idx) {
        fprintf(stderr, "hark vad: out of memory\n");
        failures = nfiles;
        nfiles = 0;
    }
    for (int g0 = 0; g0 < nfiles; g0 += batch) {
        int gn = nfiles - g0 < batch ? nfiles - g0 : batch;
        memset(g, 0, (size_t)gn * sizeof *g);
        for (int i = 0; i < gn; i++) {
            g[i].path = files[g0 + i];
            g[i].failed = open_file(m, want_rate, &so, &g[i]) != 0;
        }
        /* one batch per sample rate of the group */
        for (int i = 0; i < gn; i++) {
            int seen = g[i].failed;
            for (int k = 0; k < i && !seen; k++)
                seen = !g[k].failed && g[k].rate == g[i].rate;
            if (seen)
                continue;
            int bn = 0;
            for (int k = i; k < gn; k++)
                if (!g[k].failed && g[k].rate == g[i].rate)
                    idx[bn++] = k;
            int ri = 0;
            while (ri < n_rates - 1 && rates[ri] != g[i].rate)
                ri++;
            if (device >= 0)
                run_chunks_gpu(gpu[ri], silero_vad_rate(m, g[i].rate), g, idx, bn);
            else
                run_lockstep(silero_vad_rate(m, g[i].rate), g, idx, bn);
        }
        for (int i = 0; i < gn; i++) {
            vad_file_t *f = &g[i];
            size_t ns = 0;
            silero_segment_t *s = f->failed ? NULL : take_segments(f, &ns);
            if (!f->failed && !s) {
                fprintf(stderr, "hark vad: %s: out of memory\n", f->path);
                f->failed = 1;
            }
            if (f->failed) {
                failures++;
                if (json) {
                    cJSON *e = cJSON_CreateObject();
                    cJSON_AddStringToObject(e, "file", f->path);
                    cJSON_AddStringToObject(e, "error", "cannot read or process the file");
                    char *txt = cJSON_PrintUnformatted(e);
                    printf("%s\n%s", first ? "" : ",", txt ? txt : "{}");
                    free(txt);
                    cJSON_Delete(e);
                    first = 0;
                }
            } else if (json) {
                cJSON *j = file_json(f, s, ns);
                char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
                printf("%s\n%s", first ? "" : ",", txt ? txt : "{}");
                free(txt);
                cJSON_Delete(j);
                first = 0;
            } else {
                for (size_t k = 0; k < ns; k++)
                    printf("%s %.3f %.3f\n", f->path, (double)s[k].start / f->rate,
                           (double)s[k].end / f->rate);
            }
            fflush(stdout);
            free(s);
            close_file(f);
        }
    }
    if (json)
        printf("\n]\n");
    free(g);
    free(idx);
    for (int i = 0; i < n_rates; i++)
        silero_vad_gpu_destroy(gpu[i]);
    silero_vad_destroy(m);
    free(files);
    return failures ? 1 : 0;
usage_err:
    vad_usage(stderr);
    free(files);
    return 2;
}
