/* cmd_transcribe.c — `hark transcribe --model DIR FILE...`: offline recognition of audio files
 * with a converted WeNet model, text or JSON output, and --dump-dir to write every stage as .npy
 * (features after CMVN, each encoder block, encoder output, CTC log-probs) for finding the layer
 * that differs from the original. Tests: tests/cli/test_cli_transcribe.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/npy.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/wenet_asr.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void transcribe_usage(FILE *f)
{
    fprintf(f,
            "usage: hark transcribe --model DIR [--device cpu|cuda:N] [--precision fp32|fp16]\n"
            "         [--decoding-method ctc_greedy_search|ctc_prefix_beam_search|attention_rescoring]\n"
            "         [--beam-size 10] [--ctc-weight W] [--reverse-weight W] [--nbest N]\n"
            "         [--format text|json] [--dump-dir D] [--threads N] FILE...\n"
            "Recognizes each audio file (WAV/FLAC/OGG/MP3, any rate) with a model converted by\n"
            "tools/convert_wenet.py. Defaults come from the model (attention_rescoring when it has\n"
            "a decoder, its ctc_weight and reverse_weight). Text output: one 'FILE TEXT' line each.\n");
}

struct dump_ctx {
    char dir[4096];
    int failed;
};

static void dump_stage(void *user, const conformer_stage_t *s)
{
    struct dump_ctx *d = user;
    char path[4300];
    snprintf(path, sizeof path, "%s/%s.npy", d->dir, s->name);
    int64_t shape[2] = {s->rows, s->cols};
    if (npy_save_f32(path, s->data, 2, shape))
        d->failed = 1;
}

/* features after CMVN, as the encoder sees them */
static int dump_features(const wenet_asr_t *asr, const audio_t *au, const char *dir, hark_err_t *err)
{
    const wenet_config_t *c = wenet_asr_config(asr);
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_FBANK);
    fo.sample_rate = c->sample_rate;
    fo.num_mel_bins = c->num_mel_bins;
    feat_plan_t *p;
    int rc = feat_plan_create(&fo, &p, err);
    if (rc)
        return rc;
    int T = feat_num_frames(p, au->n), D = feat_dim(p);
    float *f = hark_malloc(sizeof(float) * (size_t)(T ? T : 1) * (size_t)D);
    if (!f)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    else
        rc = feat_compute(p, au->samples, au->n, f, err);
    const float *mean, *istd;
    if (!rc && wenet_asr_cmvn(asr, &mean, &istd))
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                f[(size_t)t * D + i] = (f[(size_t)t * D + i] - mean[i]) * istd[i];
    char path[4300];
    snprintf(path, sizeof path, "%s/feats_cmvn.npy", dir);
    int64_t shape[2] = {T, D};
    if (!rc && npy_save_f32(path, f, 2, shape))
        rc = err_set(err, HARK_ERR_IO, "cannot write %s", path);
    hark_free(f);
    feat_plan_destroy(p);
    return rc;
}

static cJSON *hyp_json(const wenet_hyp_t *h, int frame_ms)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", h->text ? h->text : "");
    cJSON_AddItemToObject(o, "tokens", cJSON_CreateIntArray(h->tokens, h->n_tokens));
    cJSON *times = cJSON_AddArrayToObject(o, "times_ms");
    for (int i = 0; i < h->n_tokens; i++)
        cJSON_AddItemToArray(times, cJSON_CreateNumber((double)h->times[i] * frame_ms));
    cJSON_AddNumberToObject(o, "score", h->score);
    return o;
}

int cli_transcribe(int argc, char **argv)
{
    const char *model = NULL, *device = "cpu", *precision = "fp32", *format = "text";
    const char *method = NULL, *dump = NULL;
    double beam = -1, ctc_w = -1, rev_w = -1, nbest = -1, threads = 0;
    const char **files = hark_calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    if (!files)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int v = i + 1 < argc;
        double *num = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            transcribe_usage(stdout);
            hark_free(files);
            return 0;
        } else if (!strcmp(a, "--model") && v)
            model = argv[++i];
        else if (!strcmp(a, "--device") && v)
            device = argv[++i];
        else if (!strcmp(a, "--precision") && v)
            precision = argv[++i];
        else if (!strcmp(a, "--format") && v)
            format = argv[++i];
        else if (!strcmp(a, "--decoding-method") && v)
            method = argv[++i];
        else if (!strcmp(a, "--dump-dir") && v)
            dump = argv[++i];
        else if (!strcmp(a, "--beam-size"))
            num = &beam;
        else if (!strcmp(a, "--ctc-weight"))
            num = &ctc_w;
        else if (!strcmp(a, "--reverse-weight"))
            num = &rev_w;
        else if (!strcmp(a, "--nbest"))
            num = &nbest;
        else if (!strcmp(a, "--threads"))
            num = &threads;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hark transcribe: unknown or incomplete option '%s'\n", a);
            transcribe_usage(stderr);
            hark_free(files);
            return 2;
        } else
            files[nfiles++] = a;
        if (num) {
            char *end = NULL;
            if (!v || (*num = strtod(argv[++i], &end), *end) || *num < 0) {
                fprintf(stderr, "hark transcribe: %s needs a non-negative number\n", a);
                hark_free(files);
                return 2;
            }
        }
    }
    if (!model || !nfiles || (strcmp(format, "text") && strcmp(format, "json"))) {
        transcribe_usage(stderr);
        hark_free(files);
        return 2;
    }
    wenet_load_opts_t lo = {.device = -1, .precision = WENET_FP32};
    if (!strncmp(device, "cuda", 4)) {
        lo.device = device[4] == ':' ? atoi(device + 5) : 0;
    } else if (strcmp(device, "cpu") != 0) {
        fprintf(stderr, "hark transcribe: --device must be cpu or cuda:N\n");
        hark_free(files);
        return 2;
    }
    if (!strcmp(precision, "fp16"))
        lo.precision = WENET_FP16;
    else if (strcmp(precision, "fp32") != 0) {
        fprintf(stderr, "hark transcribe: --precision must be fp32 or fp16\n");
        hark_free(files);
        return 2;
    }
    if (dump && lo.device >= 0) {
        fprintf(stderr, "hark transcribe: --dump-dir needs --device cpu (the GPU path keeps its "
                        "stages on the device)\n");
        hark_free(files);
        return 2;
    }
    hark_err_t err = {0};
    wenet_asr_t *asr = NULL;
    wenet_worker_t *w = NULL;
    int failures = 0;
    if (wenet_asr_load_opts(model, &lo, &asr, &err)) {
        fprintf(stderr, "hark transcribe: %s\n", err.msg);
        hark_free(files);
        return 1;
    }
    wenet_decode_opts_t o = wenet_default_opts(asr);
    if (method && wenet_parse_method(method, &o.method)) {
        fprintf(stderr, "hark transcribe: unknown --decoding-method '%s'\n", method);
        failures = -1;
        goto done;
    }
    if (beam >= 0)
        o.beam_size = (int)beam;
    if (ctc_w >= 0)
        o.ctc_weight = (float)ctc_w;
    if (rev_w >= 0)
        o.reverse_weight = (float)rev_w;
    if (nbest >= 0)
        o.nbest = (int)nbest;
    else if (o.method != DECODE_CTC_GREEDY)
        o.nbest = o.beam_size;
    o.n_threads = (int)threads;
    const int frame_ms = wenet_asr_frame_ms(asr);
    cJSON *out = cJSON_CreateArray();
    struct dump_ctx dctx = {0};
    for (int f = 0; f < nfiles; f++) {
        audio_t au = {0};
        audio_opts_t ao = {.target_rate = wenet_asr_sample_rate(asr)};
        wenet_result_t r = {0};
        err.msg[0] = 0;
        int rc = audio_decode_file(files[f], &ao, &au, &err);
        if (!rc && (!w || (double)au.n / ao.target_rate > 600.0)) {
            wenet_worker_destroy(w);
            w = NULL;
            double secs = (double)au.n / ao.target_rate + 1.0;
            rc = wenet_worker_create(asr, 1, secs > 600 ? secs : 600, &w, &err);
        }
        if (!rc && dump) {
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s", files[f]);
            char *base = basename(tmp), *dot = strrchr(base, '.');
            if (dot)
                *dot = 0;
            snprintf(dctx.dir, sizeof dctx.dir, "%s/%s", dump, base);
            mkdir(dump, 0755);
            if (mkdir(dctx.dir, 0755) && errno != EEXIST)
                rc = err_set(&err, HARK_ERR_IO, "cannot create %s", dctx.dir);
            if (!rc)
                rc = dump_features(asr, &au, dctx.dir, &err);
            o.debug = dump_stage;
            o.debug_user = &dctx;
        }
        if (!rc) {
            const float *pcm = au.samples;
            rc = wenet_recognize(w, &o, &pcm, &au.n, 1, &r, &err);
        }
        if (!rc && dctx.failed)
            rc = err_set(&err, HARK_ERR_IO, "could not write every stage under %s", dctx.dir);
        if (rc) {
            failures++;
            fprintf(stderr, "hark transcribe: %s: %s\n", files[f],
                    err.msg[0] ? err.msg : hark_status_str(rc));
            if (!strcmp(format, "json")) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "file", files[f]);
                cJSON_AddStringToObject(e, "error", err.msg[0] ? err.msg : hark_status_str(rc));
                cJSON_AddItemToArray(out, e);
            }
        } else if (!strcmp(format, "text")) {
            printf("%s %s\n", files[f], r.best.text);
            fflush(stdout);
        } else {
            cJSON *j = hyp_json(&r.best, frame_ms);
            cJSON_AddStringToObject(j, "file", files[f]);
            cJSON_AddStringToObject(j, "decoding_method", wenet_method_name(o.method));
            cJSON_AddNumberToObject(j, "duration_s", (double)au.n / ao.target_rate);
            if (o.method == DECODE_ATTENTION_RESCORING)
                cJSON_AddNumberToObject(j, "confidence", r.confidence);
            if (o.method != DECODE_CTC_GREEDY) {
                cJSON *nb = cJSON_AddArrayToObject(j, "nbest");
                for (int i = 0; i < r.n_nbest; i++)
                    cJSON_AddItemToArray(nb, hyp_json(&r.nbest[i], frame_ms));
            }
            cJSON_AddItemToArray(out, j);
        }
        wenet_result_free(&r);
        audio_free(&au);
    }
    if (!strcmp(format, "json")) {
        char *s = cJSON_Print(out);
        if (s) {
            printf("%s\n", s);
            free(s);
        }
    }
    cJSON_Delete(out);
done:
    wenet_worker_destroy(w);
    wenet_asr_destroy(asr);
    hark_free(files);
    return failures ? 1 : 0;
}
