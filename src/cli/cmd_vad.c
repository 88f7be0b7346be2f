/* cmd_vad.c — `hark vad`: speech segments of audio files with a Silero VAD model
 * (tools/convert_silero_vad.py), the files of a group stepped together as one batch; text (one
 * "FILE START END" line per segment, seconds) or JSON (per file: file, sample_rate, duration_s,
 * segments [{start, end}] in seconds, probs: every window's probability).
 * Tests: tests/cli/test_cli_vad.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void vad_usage(FILE *f)
{
    fprintf(
        f, "usage: hark vad --model DIR [--threshold 0.5] [--neg-threshold X]\n"
           "                [--min-speech-duration-ms 250] [--max-speech-duration-s S]\n"
           "                [--min-silence-duration-ms 100] [--speech-pad-ms 30]\n"
           "                [--sample-rate auto|16000|8000] [--batch-size 32] [--threads N]\n"
           "                [--format text|json] FILE...\n\n"
           "Finds the speech in audio files with a Silero VAD model (tools/convert_silero_vad.py)\n"
           "by silero-vad's get_speech_timestamps rules; the options are its parameters\n"
           "(--neg-threshold: default threshold - 0.15; --max-speech-duration-s: default no\n"
           "limit). --sample-rate auto runs a file at its own rate when the model has a network\n"
           "for it, else resampled to the model's first rate (16000). Up to --batch-size files\n"
           "are read and run together. Text: one line per segment, FILE START END in seconds.\n"
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
    audio_t a;        /* the decoded file */
    float *resampled; /* hark_free; when the model runs it at another rate */
    const float *pcm; /* a.samples or resampled */
    size_t n;
    int rate;
    float *probs;
    size_t n_win;
    int failed;
} vad_file_t;

/* decodes f at the rate the model runs it: `want` (> 0), or its own when the model has it */
static int load_file(const silero_vad_t *m, int want, vad_file_t *f)
{
    audio_opts_t o = {.target_rate = want, .max_seconds = 1e9};
    audio_t a = {0};
    hark_err_t err = {0};
    if (audio_decode_file(f->path, &o, &a, &err) != HARK_OK) {
        fprintf(stderr, "hark vad: %s\n", err.msg);
        return -1;
    }
    if (!want && !silero_vad_rate(m, a.rate)) {
        int rates[4];
        silero_vad_rates(m, rates);
        if (audio_resample(a.samples, a.n, a.rate, rates[0], &f->resampled, &f->n, &err) !=
            HARK_OK) {
            fprintf(stderr, "hark vad: %s: %s\n", f->path, err.msg);
            audio_free(&a);
            return -1;
        }
        audio_free(&a);
        f->pcm = f->resampled;
        f->rate = rates[0];
        return 0;
    }
    f->a = a;
    f->pcm = a.samples;
    f->n = a.n;
    f->rate = a.rate;
    return 0;
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
    int want_rate = 0, batch = 32, threads = 0;
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
            if (parse_num(a, argv[++i], 1, 4096, &v))
                goto usage_err;
            batch = (int)v;
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
    int json = !strcmp(format, "json"), failures = 0;
    if (json)
        printf("[");
    int first = 1;
    vad_file_t *g = calloc((size_t)batch, sizeof *g);
    const float **pcm = calloc((size_t)batch, sizeof *pcm);
    size_t *n = calloc((size_t)batch, sizeof *n);
    float **probs = calloc((size_t)batch, sizeof *probs);
    int *idx = calloc((size_t)batch, sizeof *idx);
    if (!g || !pcm || !n || !probs || !idx) {
        fprintf(stderr, "hark vad: out of memory\n");
        failures = nfiles;
        nfiles = 0;
    }
    for (int g0 = 0; g0 < nfiles; g0 += batch) {
        int gn = nfiles - g0 < batch ? nfiles - g0 : batch;
        memset(g, 0, (size_t)gn * sizeof *g);
        for (int i = 0; i < gn; i++) {
            g[i].path = files[g0 + i];
            g[i].failed = load_file(m, want_rate, &g[i]) != 0;
            if (!g[i].failed) {
                g[i].n_win = silero_vad_n_windows(silero_vad_rate(m, g[i].rate), g[i].n);
                g[i].probs = malloc((g[i].n_win + 1) * sizeof(float));
                if (!g[i].probs) {
                    fprintf(stderr, "hark vad: %s: out of memory\n", g[i].path);
                    g[i].failed = 1;
                }
            }
        }
        /* one batch per sample rate of the group */
        for (int i = 0; i < gn; i++) {
            if (g[i].failed)
                continue;
            int seen = 0;
            for (int k = 0; k < i && !seen; k++)
                seen = !g[k].failed && g[k].rate == g[i].rate;
            if (seen)
                continue;
            int bn = 0;
            for (int k = i; k < gn; k++)
                if (!g[k].failed && g[k].rate == g[i].rate) {
                    pcm[bn] = g[k].pcm;
                    n[bn] = g[k].n;
                    probs[bn] = g[k].probs;
                    idx[bn++] = k;
                }
            if (silero_vad_probs(m, g[i].rate, pcm, n, bn, 0, probs, &err) != HARK_OK) {
                fprintf(stderr, "hark vad: %s\n", err.msg);
                for (int k = 0; k < bn; k++)
                    g[idx[k]].failed = 1;
            }
        }
        for (int i = 0; i < gn; i++) {
            vad_file_t *f = &g[i];
            silero_segment_t *s = NULL;
            size_t ns = 0;
            if (!f->failed &&
                silero_segments(f->probs, f->n_win, f->n, f->rate,
                                silero_vad_rate(m, f->rate)->window, &so, &s, &ns, &err)) {
                fprintf(stderr, "hark vad: %s: %s\n", f->path, err.msg);
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
            audio_free(&f->a);
            hark_free(f->resampled);
            free(f->probs);
        }
    }
    if (json)
        printf("\n]\n");
    free(g);
    free(pcm);
    free(n);
    free(probs);
    free(idx);
    silero_vad_destroy(m);
    free(files);
    return failures ? 1 : 0;
usage_err:
    vad_usage(stderr);
    free(files);
    return 2;
}
