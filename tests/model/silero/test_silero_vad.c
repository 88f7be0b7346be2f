/* Tests for src/model/silero/ and tools/convert_silero_vad.py: the real Silero VAD v6
 * (../shared/data/models/silero-vad/silero_vad.onnx, converted once per version) on the real
 * audio of ../shared/data/audio/en, at 16 kHz and 8 kHz (the 16 kHz files decimated by 2, as
 * tools/silero_vad_reference.js does), against ONNX Runtime's per-window probabilities and
 * silero-vad's get_speech_timestamps segments. Those references come from
 * tools/silero_vad_reference.sh (outside the repository: $HARK_SILERO_REF or
 * /tmp/hark-test-cache-<uid>/silero_vad_ref); tests needing them skip when absent.
 * Tolerance: every window's probability within 1e-4 of ONNX Runtime's (FP32 CPU both);
 * segments equal, in samples. The segment rules are also tested on hand-made probabilities. */
#include "test.h"

#include "audio/audio.h"
#include "hark.h"
#include "model/silero/silero_vad.h"
#include "support/golden_silero.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_PROB 1e-4
#define SILERO_ONNX "models/silero-vad/silero_vad.onnx"

/* The reference file `name` under the reference directory, parsed, or NULL (skip). */
static cJSON *ref_json(const char *name, char *why, size_t nwhy)
{
    char dir[400], path[700];
    const char *env = getenv("HARK_SILERO_REF");
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "/tmp/hark-test-cache-%u/silero_vad_ref", (unsigned)getuid());
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, nwhy, "%.420s is absent (bash tools/silero_vad_reference.sh makes it)", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    cJSON *j = NULL;
    if (buf && got == (size_t)len) {
        buf[len] = 0;
        j = cJSON_Parse(buf);
    }
    free(buf);
    if (!j)
        snprintf(why, nwhy, "%.500s: cannot parse", path);
    return j;
}

/* A file of the shared audio at `rate` (16000, or 8000 as every other sample). */
static float *load_audio(const char *name, int rate, size_t *n)
{
    char rel[300];
    snprintf(rel, sizeof rel, "audio/en/wav/%s", name);
    const char *p = test_shared(rel);
    audio_t a = {0};
    if (!p || audio_decode_file(p, &(audio_opts_t){0}, &a, NULL) != HARK_OK)
        return NULL;
    int step = a.rate / rate;
    if (a.rate % rate || step < 1) {
        audio_free(&a);
        return NULL;
    }
    *n = (a.n + (size_t)step - 1) / (size_t)step;
    float *x = malloc((*n ? *n : 1) * sizeof *x);
    for (size_t i = 0; x && i < *n; i++)
        x[i] = a.samples[i * (size_t)step];
    audio_free(&a);
    return x;
}

typedef struct {
    int n_files;
    char **name;
    float **pcm;
    size_t *n;
    float **probs; /* hark's */
    float **ref;   /* ONNX Runtime's */
    size_t *n_win;
} run_t;

static void run_free(run_t *r)
{
    for (int i = 0; i < r->n_files; i++) {
        free(r->name[i]);
        free(r->pcm[i]);
        free(r->probs[i]);
        free(r->ref[i]);
    }
    free(r->name);
    free(r->pcm);
    free(r->n);
    free(r->probs);
    free(r->ref);
    free(r->n_win);
    memset(r, 0, sizeof *r);
}

/* Loads the model, the reference probabilities at `rate`, the audio, and runs hark over all the
 * files batched (max_batch). 0 ok, 1 skip, -1 failure (why). */
static int run_rate(int rate, int max_batch, silero_vad_t **mp, run_t *r, char *why, size_t nwhy)
{
    memset(r, 0, sizeof *r);
    *mp = NULL;
    const char *dir = golden_silero_model(why, nwhy);
    if (!dir)
        return 1;
    char fname[64];
    snprintf(fname, sizeof fname, "probs_%d.json", rate);
    cJSON *j = ref_json(fname, why, nwhy);
    if (!j)
        return 1;
    hark_err_t err = {0};
    int ret = -1;
    if (silero_vad_load(dir, 1, mp, &err) != HARK_OK) {
        snprintf(why, nwhy, "silero_vad_load: %.400s", err.msg);
        goto out;
    }
    const silero_rate_t *sr = silero_vad_rate(*mp, rate);
    const cJSON *files = cJSON_GetObjectItem(j, "files");
    int nf = cJSON_GetArraySize(files);
    if (!sr || nf <= 0) {
        snprintf(why, nwhy, "no %d Hz network, or no files in the reference", rate);
        goto out;
    }
    r->name = calloc((size_t)nf, sizeof *r->name);
    r->pcm = calloc((size_t)nf, sizeof *r->pcm);
    r->n = calloc((size_t)nf, sizeof *r->n);
    r->probs = calloc((size_t)nf, sizeof *r->probs);
    r->ref = calloc((size_t)nf, sizeof *r->ref);
    r->n_win = calloc((size_t)nf, sizeof *r->n_win);
    r->n_files = nf;
    for (int i = 0; i < nf; i++) {
        const cJSON *e = cJSON_GetArrayItem(files, i);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "file"));
        const cJSON *pr = cJSON_GetObjectItem(e, "probs");
        r->name[i] = strdup(name ? name : "?");
        r->pcm[i] = load_audio(r->name[i], rate, &r->n[i]);
        if (!r->pcm[i]) {
            snprintf(why, nwhy, "%s: cannot read the audio", r->name[i]);
            goto out;
        }
        r->n_win[i] = silero_vad_n_windows(sr, r->n[i]);
        if ((size_t)cJSON_GetArraySize(pr) != r->n_win[i] ||
            (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "n_samples")) != r->n[i]) {
            snprintf(why, nwhy, "%s: the reference has %d windows of %.0f samples, hark %zu of %zu",
                     r->name[i], cJSON_GetArraySize(pr),
                     cJSON_GetNumberValue(cJSON_GetObjectItem(e, "n_samples")), r->n_win[i],
                     r->n[i]);
            goto out;
        }
        r->probs[i] = calloc(r->n_win[i] + 1, sizeof(float));
        r->ref[i] = calloc(r->n_win[i] + 1, sizeof(float));
        for (size_t k = 0; k < r->n_win[i]; k++)
            r->ref[i][k] = (float)cJSON_GetArrayItem(pr, (int)k)->valuedouble;
    }
    if (silero_vad_probs(*mp, rate, (const float *const *)r->pcm, r->n, nf, max_batch, r->probs,
                         &err) != HARK_OK) {
        snprintf(why, nwhy, "silero_vad_probs: %.400s", err.msg);
        goto out;
    }
    ret = 0;
out:
    cJSON_Delete(j);
    return ret;
}

static void check_probs(test_ctx_t *t, int rate, int max_batch)
{
    char why[600];
    silero_vad_t *m;
    run_t r;
    int rc = run_rate(rate, max_batch, &m, &r, why, sizeof why);
    if (rc == 1) {
        silero_vad_destroy(m);
        run_free(&r);
        SKIP(why);
    }
    if (rc < 0) {
        silero_vad_destroy(m);
        run_free(&r);
        CHECKF(0, "%s", why);
    }
    double worst = 0;
    size_t total = 0;
    const char *worst_file = "";
    for (int i = 0; i < r.n_files; i++) {
        double d = test_max_abs_diff(r.probs[i], r.ref[i], r.n_win[i]);
        total += r.n_win[i];
        if (d > worst) {
            worst = d;
            worst_file = r.name[i];
        }
    }
    printf("  %d Hz, batch %d: %d files, %zu windows, max |hark - onnxruntime| = %.3g (%s)\n", rate,
           max_batch, r.n_files, total, worst, worst_file);
    silero_vad_destroy(m);
    run_free(&r);
    CHECKF(worst <= TOL_PROB, "%d Hz: max |diff| %.3g > %.0e in %s", rate, worst, TOL_PROB,
           worst_file);
}

TEST(silero_vad_probs_16k_batched)
{
    check_probs(t, 16000, 0);
}
TEST(silero_vad_probs_8k_batched)
{
    check_probs(t, 8000, 0);
}
TEST(silero_vad_probs_16k_batch5)
{
    check_probs(t, 16000, 5);
}
TEST(silero_vad_probs_16k_single)
{
    check_probs(t, 16000, 1);
}

/* Segments at `rate` with the options of reference file `ref_name` from hark's probabilities and
 * from the reference probabilities: both equal the reference's. */
static void check_segments(test_ctx_t *t, int rate, const char *ref_name)
{
    char why[600];
    cJSON *j = ref_json(ref_name, why, sizeof why);
    if (!j)
        SKIP(why);
    silero_vad_t *m;
    run_t r;
    int rc = run_rate(rate, 0, &m, &r, why, sizeof why);
    if (rc != 0) {
        cJSON_Delete(j);
        silero_vad_destroy(m);
        run_free(&r);
        if (rc == 1)
            SKIP(why);
        CHECKF(0, "%s", why);
    }
    silero_seg_opts_t o;
    silero_seg_default_opts(&o);
    const cJSON *opts = cJSON_GetObjectItem(j, "options");
    o.threshold = cJSON_GetNumberValue(cJSON_GetObjectItem(opts, "threshold"));
    const cJSON *v = cJSON_GetObjectItem(opts, "neg_threshold");
    o.neg_threshold = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    o.min_speech_duration_ms =
        (int)cJSON_GetNumberValue(cJSON_GetObjectItem(opts, "min_speech_duration_ms"));
    v = cJSON_GetObjectItem(opts, "max_speech_duration_s");
    o.max_speech_duration_s = cJSON_IsNumber(v) ? v->valuedouble : 0.0;
    o.min_silence_duration_ms =
        (int)cJSON_GetNumberValue(cJSON_GetObjectItem(opts, "min_silence_duration_ms"));
    o.speech_pad_ms = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(opts, "speech_pad_ms"));
    const silero_rate_t *sr = silero_vad_rate(m, rate);
    const cJSON *files = cJSON_GetObjectItem(j, "files");
    int bad = 0, n_ref_total = 0;
    char msg[600] = "";
    for (int i = 0; i < r.n_files && !bad; i++) {
        const cJSON *e = cJSON_GetArrayItem(files, i);
        const cJSON *want = cJSON_GetObjectItem(e, "segments");
        if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "file")), r.name[i]) != 0) {
            snprintf(msg, sizeof msg, "file %d: %s in the segments, %s in the probs", i,
                     cJSON_GetStringValue(cJSON_GetObjectItem(e, "file")), r.name[i]);
            bad = 1;
            break;
        }
        n_ref_total += cJSON_GetArraySize(want);
        for (int which = 0; which < 2 && !bad; which++) {
            silero_segment_t *segs;
            size_t ns;
            hark_err_t err = {0};
            if (silero_segments(which ? r.probs[i] : r.ref[i], r.n_win[i], r.n[i], rate, sr->window,
                                &o, &segs, &ns, &err) != HARK_OK) {
                snprintf(msg, sizeof msg, "silero_segments: %.400s", err.msg);
                bad = 1;
                break;
            }
            int same = (int)ns == cJSON_GetArraySize(want);
            for (size_t k = 0; same && k < ns; k++) {
                const cJSON *w = cJSON_GetArrayItem(want, (int)k);
                same = segs[k].start == (long long)cJSON_GetArrayItem(w, 0)->valuedouble &&
                       segs[k].end == (long long)cJSON_GetArrayItem(w, 1)->valuedouble;
            }
            if (!same) {
                snprintf(msg, sizeof msg,
                         "%s (%s probabilities): %zu segments, the reference %d; first: "
                         "[%lld, %lld]",
                         r.name[i], which ? "hark's" : "onnxruntime's", ns,
                         cJSON_GetArraySize(want), ns ? segs[0].start : -1LL,
                         ns ? segs[0].end : -1LL);
                bad = 1;
            }
            free(segs);
        }
    }
    printf("  %s: %d files, %d segments\n", ref_name, r.n_files, n_ref_total);
    cJSON_Delete(j);
    silero_vad_destroy(m);
    run_free(&r);
    CHECKF(!bad, "%s", msg);
}

TEST(silero_vad_segments_16k)
{
    check_segments(t, 16000, "segments_16000.json");
}
TEST(silero_vad_segments_8k)
{
    check_segments(t, 8000, "segments_8000.json");
}
TEST(silero_vad_segments_16k_split)
{
    check_segments(t, 16000, "segments_16000_split.json");
}
TEST(silero_vad_segments_8k_split)
{
    check_segments(t, 8000, "segments_8000_split.json");
}

/* ---- the rules on hand-made probabilities (no shared data) -------------------------------- */

static void segs_of(test_ctx_t *t, const float *p, size_t n_p, size_t n_samples,
                    const silero_seg_opts_t *o, silero_segment_t **segs, size_t *ns)
{
    hark_err_t err = {0};
    int rc = silero_segments(p, n_p, n_samples, 16000, 512, o, segs, ns, &err);
    if (rc != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "silero_segments: %s", err.msg);
}

TEST(silero_segments_rules)
{
    silero_seg_opts_t o;
    silero_seg_default_opts(&o);
    silero_segment_t *s;
    size_t ns;
    float p[64];
    /* windows 10..39 speech (0.9), the rest silence (0.0): one segment, padded by 480 samples */
    for (int i = 0; i < 64; i++)
        p[i] = i >= 10 && i < 40 ? 0.9f : 0.0f;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK_EQ_INT(ns, 1);
    CHECK_EQ_INT(s[0].start, 10 * 512 - 480);
    /* silence from window 40 ends it there once >= 100 ms (1600 samples) long (window 44) */
    CHECK_EQ_INT(s[0].end, 40 * 512 + 480);
    free(s);
    /* a dip to 0.4 (between neg_threshold 0.35 and threshold 0.5) does not end speech */
    p[20] = 0.4f;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK_EQ_INT(ns, 1);
    free(s);
    /* a 2-window (64 ms) silence is shorter than min_silence: still one segment */
    p[20] = p[21] = 0.1f;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK_EQ_INT(ns, 1);
    free(s);
    /* a 6-window (192 ms) silence splits it; the gap 3072 > 2 · 480 keeps both paddings */
    for (int i = 18; i < 24; i++)
        p[i] = 0.1f;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK_EQ_INT(ns, 2);
    CHECK_EQ_INT(s[0].end, 18 * 512 + 480);
    CHECK_EQ_INT(s[1].start, 24 * 512 - 480);
    free(s);
    /* 6 windows = 3072 samples of speech are <= 250 ms (4000): dropped */
    for (int i = 0; i < 64; i++)
        p[i] = i >= 10 && i < 16 ? 0.9f : 0.0f;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK_EQ_INT(ns, 0);
    CHECK(s == NULL);
    /* speech to the end: the segment ends at the last sample */
    for (int i = 0; i < 64; i++)
        p[i] = i >= 40 ? 0.9f : 0.0f;
    segs_of(t, p, 64, 64 * 512 - 100, &o, &s, &ns);
    CHECK_EQ_INT(ns, 1);
    CHECK_EQ_INT(s[0].end, 64 * 512 - 100);
    free(s);
    /* max_speech_duration_s 1 s: 16000 - 512 - 960 = 14528 samples; continuous speech is cut
     * where it passes that (window 29: 29 · 512 = 14848 > 14528) and restarts there */
    for (int i = 0; i < 64; i++)
        p[i] = 0.9f;
    o.max_speech_duration_s = 1.0;
    segs_of(t, p, 64, 64 * 512, &o, &s, &ns);
    CHECK(ns >= 2);
    CHECK_EQ_INT(s[0].start, 0);
    /* the cut at 14848 lies 0 samples before the next start (window 30: the cut window itself
     * is not a start), gap 512 < 960: split evenly */
    CHECK_EQ_INT(s[0].end, 29 * 512 + 256);
    CHECK_EQ_INT(s[1].start, 30 * 512 - 256);
    free(s);
    /* bad options */
    o.threshold = 1.5;
    hark_err_t err = {0};
    CHECK_EQ_INT(silero_segments(p, 64, 64 * 512, 16000, 512, &o, &s, &ns, &err),
                 HARK_ERR_INVALID_ARG);
}

TEST(silero_vad_load_errors)
{
    char why[600];
    const char *dir = golden_silero_model(why, sizeof why);
    if (!dir)
        SKIP(why);
    silero_vad_t *m = NULL;
    hark_err_t err = {0};
    CHECK_EQ_INT(silero_vad_load("/nonexistent-dir", 1, &m, &err), HARK_ERR_IO);
    CHECK(m == NULL);
    CHECK_OK(silero_vad_load(dir, 1, &m, &err));
    int rates[4];
    CHECK_EQ_INT(silero_vad_rates(m, rates), 2);
    CHECK_EQ_INT(rates[0], 16000);
    CHECK_EQ_INT(rates[1], 8000);
    CHECK(silero_vad_rate(m, 22050) == NULL);
    float *pr = NULL;
    const float *pcm[1] = {NULL};
    size_t n[1] = {0};
    CHECK_EQ_INT(silero_vad_probs(m, 22050, pcm, n, 1, 0, &pr, &err), HARK_ERR_UNSUPPORTED);
    silero_vad_destroy(m);
    /* a model.json that does not describe the weights */
    char cmd[2000];
    const char *tmp = test_tmpdir(t);
    snprintf(cmd, sizeof cmd,
             "cp -r '%s' '%s/m' && sed -i 's/\"hidden\": 128/\"hidden\": 64/' '%s/m/1/model.json'",
             dir, tmp, tmp);
    CHECK_OK(system(cmd));
    char bad[700];
    snprintf(bad, sizeof bad, "%s/m", tmp);
    CHECK_EQ_INT(silero_vad_load(bad, 1, &m, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "hidden") != NULL, "message: %s", err.msg);
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/.' '%s/m' && sed -i 's/\"n_fft\": 256/\"n_fft\": 254/' "
             "'%s/m/1/model.json'",
             dir, tmp, tmp);
    CHECK_OK(system(cmd));
    CHECK(silero_vad_load(bad, 1, &m, &err) != HARK_OK);
    CHECK(m == NULL);
}

/* The converter refuses a file that is not Silero VAD's graph. */
TEST(convert_silero_vad_refuses)
{
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with numpy is missing");
    const char *tmp = test_tmpdir(t);
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "printf 'not onnx' > '%s/x.onnx' && /usr/bin/python3 tools/convert_silero_vad.py "
             "--onnx '%s/x.onnx' --output '%s/out' > '%s/log' 2>&1",
             tmp, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s/out", tmp);
    CHECK(access(cmd, F_OK) != 0);
    /* the real file cut short, and with bytes flipped in its graph: an error naming the file or
     * the node, never a traceback, nothing written */
    const char *onnx = test_shared(SILERO_ONNX);
    if (!onnx)
        SKIP("../shared/data/" SILERO_ONNX " is absent");
    snprintf(cmd, sizeof cmd,
             "head -c 1000000 '%s' > '%s/cut.onnx' && /usr/bin/python3 "
             "tools/convert_silero_vad.py --onnx '%s/cut.onnx' --output '%s/out' > '%s/log' 2>&1",
             onnx, tmp, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd,
             "grep -q 'convert_silero_vad: error' '%s/log' && ! grep -q Traceback '%s/log' && "
             "test ! -e '%s/out'",
             tmp, tmp, tmp);
    CHECK_OK(system(cmd));
}

/* The incremental segmenter in random chunks gives the batch segments, and hands each one out
 * soon after its end (bounded memory for long audio). */
static void check_stream(test_ctx_t *t, int rate, double max_speech_s)
{
    char why[600];
    silero_vad_t *m;
    run_t r;
    int rc = run_rate(rate, 0, &m, &r, why, sizeof why);
    if (rc != 0) {
        silero_vad_destroy(m);
        run_free(&r);
        if (rc == 1)
            SKIP(why);
        CHECKF(0, "%s", why);
    }
    silero_seg_opts_t o;
    silero_seg_default_opts(&o);
    o.max_speech_duration_s = max_speech_s;
    const silero_rate_t *sr = silero_vad_rate(m, rate);
    unsigned seed = 1234u + (unsigned)rate;
    int bad = 0, total = 0;
    char msg[600] = "";
    for (int i = 0; i < r.n_files && !bad; i++) {
        silero_segment_t *want, got[256];
        size_t n_want, n_got = 0;
        hark_err_t err = {0};
        CHECK_OK(silero_segments(r.probs[i], r.n_win[i], r.n[i], rate, sr->window, &o, &want,
                                 &n_want, &err));
        silero_seg_stream_t *s;
        CHECK_OK(silero_seg_stream_create(&o, rate, sr->window, &s, &err));
        double pad = (double)rate * o.speech_pad_ms / 1000.0;
        for (size_t k = 0; k < r.n_win[i] && !bad;) {
            size_t c = 1 + test_rand(&seed) % 17;
            c = c < r.n_win[i] - k ? c : r.n_win[i] - k;
            CHECK_OK(silero_seg_stream_push(s, r.probs[i] + k, c, &err));
            k += c;
            n_got += silero_seg_stream_pop(s, got + n_got, 256 - n_got);
            /* with max_speech_duration_s set, a segment is out once the audio is this far past
             * its end: whatever follows is found or dropped within max_speech (+ min_silence),
             * and a dropped candidate leaves a gap of min_silence. (Without it a candidate can
             * hover between the thresholds for any time, and silero-vad's padding waits.) */
            double lag = max_speech_s > 0
                             ? max_speech_s * rate + 3 * pad +
                                   rate * o.min_silence_duration_ms / 1000.0 + 3.0 * sr->window
                             : INFINITY;
            for (size_t q = n_got; q < n_want && !bad; q++)
                if ((double)want[q].end + lag < (double)k * sr->window) {
                    snprintf(msg, sizeof msg, "%s: segment %zu [%lld, %lld] still held at %zu",
                             r.name[i], q, want[q].start, want[q].end, k * sr->window);
                    bad = 1;
                }
        }
        CHECK_OK(silero_seg_stream_finish(s, r.n[i], &err));
        n_got += silero_seg_stream_pop(s, got + n_got, 256 - n_got);
        silero_seg_stream_destroy(s);
        if (!bad && n_got != n_want) {
            snprintf(msg, sizeof msg, "%s: %zu segments streamed, %zu in one go", r.name[i], n_got,
                     n_want);
            bad = 1;
        }
        for (size_t q = 0; !bad && q < n_want; q++)
            if (got[q].start != want[q].start || got[q].end != want[q].end) {
                snprintf(msg, sizeof msg, "%s: segment %zu [%lld, %lld] streamed, [%lld, %lld]",
                         r.name[i], q, got[q].start, got[q].end, want[q].start, want[q].end);
                bad = 1;
            }
        total += (int)n_want;
        free(want);
    }
    printf("  %d Hz, max speech %g s: %d segments streamed in random chunks\n", rate, max_speech_s,
           total);
    silero_vad_destroy(m);
    run_free(&r);
    CHECKF(!bad, "%s", msg);
}

TEST(silero_segments_stream_16k)
{
    check_stream(t, 16000, 0);
}
TEST(silero_segments_stream_16k_split)
{
    check_stream(t, 16000, 1.5);
}
TEST(silero_segments_stream_8k_split)
{
    check_stream(t, 8000, 2.0);
}

/* silero_vad_stream fed in random chunks: the segments of the batch path (batch 1, so the same
 * arithmetic), and keep_from never passes the start of a segment still to come. */
TEST(silero_vad_stream_matches_batch)
{
    char why[600];
    silero_vad_t *m;
    run_t r;
    int rc = run_rate(16000, 1, &m, &r, why, sizeof why);
    if (rc != 0) {
        silero_vad_destroy(m);
        run_free(&r);
        if (rc == 1)
            SKIP(why);
        CHECKF(0, "%s", why);
    }
    silero_seg_opts_t o;
    silero_seg_default_opts(&o);
    o.max_speech_duration_s = 2.0;
    unsigned seed = 99;
    int bad = 0, total = 0;
    char msg[600] = "";
    for (int i = 0; i < r.n_files && !bad; i++) {
        silero_segment_t *want, got[256];
        size_t n_want, n_got = 0;
        long long keep[256];
        hark_err_t err = {0};
        CHECK_OK(
            silero_segments(r.probs[i], r.n_win[i], r.n[i], 16000, 512, &o, &want, &n_want, &err));
        silero_vad_stream_t *s;
        CHECK_OK(silero_vad_stream_create(m, 16000, &o, &s, &err));
        long long keep_now = 0;
        for (size_t k = 0; k < r.n[i];) {
            size_t c = 1 + test_rand(&seed) % 3000;
            c = c < r.n[i] - k ? c : r.n[i] - k;
            CHECK_OK(silero_vad_stream_feed(s, r.pcm[i] + k, c, &err));
            k += c;
            size_t before = n_got;
            n_got += silero_vad_stream_pop(s, got + n_got, 256 - n_got);
            for (size_t q = before; q < n_got; q++)
                keep[q] = keep_now; /* what the caller kept when this segment came out */
            long long kf = silero_vad_stream_keep_from(s);
            if (kf < keep_now) {
                snprintf(msg, sizeof msg, "%s: keep_from went back from %lld to %lld", r.name[i],
                         keep_now, kf);
                bad = 1;
            }
            keep_now = kf;
        }
        CHECK_EQ_INT(silero_vad_stream_samples(s), r.n[i]);
        CHECK_OK(silero_vad_stream_finish(s, &err));
        size_t before = n_got;
        n_got += silero_vad_stream_pop(s, got + n_got, 256 - n_got);
        for (size_t q = before; q < n_got; q++)
            keep[q] = keep_now;
        silero_vad_stream_destroy(s);
        if (!bad && n_got != n_want) {
            snprintf(msg, sizeof msg, "%s: %zu segments streamed, %zu in one go", r.name[i], n_got,
                     n_want);
            bad = 1;
        }
        for (size_t q = 0; !bad && q < n_want; q++) {
            if (got[q].start != want[q].start || got[q].end != want[q].end) {
                snprintf(msg, sizeof msg, "%s: segment %zu [%lld, %lld] streamed, [%lld, %lld]",
                         r.name[i], q, got[q].start, got[q].end, want[q].start, want[q].end);
                bad = 1;
            } else if (keep[q] > got[q].start) {
                snprintf(msg, sizeof msg, "%s: segment %zu starts at %lld, audio kept from %lld",
                         r.name[i], q, got[q].start, keep[q]);
                bad = 1;
            }
        }
        total += (int)n_want;
        free(want);
    }
    printf("  %d segments from the audio fed in random chunks\n", total);
    silero_vad_destroy(m);
    run_free(&r);
    CHECKF(!bad, "%s", msg);
}
