/* Integration tests of `hark vad` through the built binary with the real Silero VAD
 * (../shared/data/models/silero-vad, converted once per version): --format json on all of
 * ../shared/data/audio/en gives every window's probability within 1e-4 of ONNX Runtime's and
 * silero-vad's segments (references from tools/silero_vad_reference.sh; skipped when absent);
 * the text format lists the same segments; options and errors give the documented exit
 * statuses. */
#include "test.h"

#include "model/safetensors.h"
#include "support/golden_silero.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOL_PROB 1e-4

/* Runs cmd; stdout into a malloc'ed *out (stderr to tmp/err). Returns the exit status. */
static int run_cmd(test_ctx_t *t, const char *cmd, char **out)
{
    char full[16384], path[512];
    const char *tmp = test_tmpdir(t);
    snprintf(path, sizeof path, "%s/out", tmp);
    snprintf(full, sizeof full, "%s >'%s' 2>'%s/err'", cmd, path, tmp);
    int st = system(full);
    FILE *f = fopen(path, "rb");
    *out = NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        *out = malloc((size_t)n + 1);
        size_t got = *out ? fread(*out, 1, (size_t)n, f) : 0;
        if (*out)
            (*out)[got] = 0;
        fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    cJSON *j = NULL;
    if (b) {
        b[got] = 0;
        j = cJSON_Parse(b);
    }
    free(b);
    return j;
}

static cJSON *ref_json(const char *name)
{
    char path[700];
    const char *env = getenv("HARK_SILERO_REF");
    if (env && *env)
        snprintf(path, sizeof path, "%s/%s", env, name);
    else
        snprintf(path, sizeof path, "/tmp/hark-test-cache-%u/silero_vad_ref/%s", (unsigned)getuid(),
                 name);
    return read_json(path);
}

static const cJSON *by_file(const cJSON *files, const char *base)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, files)
    {
        const char *f = cJSON_GetStringValue(cJSON_GetObjectItem(e, "file"));
        const char *slash = f ? strrchr(f, '/') : NULL;
        if (f && !strcmp(slash ? slash + 1 : f, base))
            return e;
    }
    return NULL;
}

TEST(cli_vad_json_matches_reference)
{
    char why[600];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    cJSON *probs = ref_json("probs_16000.json"), *segs = ref_json("segments_16000.json");
    if (!probs || !segs) {
        cJSON_Delete(probs);
        cJSON_Delete(segs);
        SKIP("the Silero VAD references are absent (bash tools/silero_vad_reference.sh)");
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --format json --batch-size 7 '%s'/*.wav",
             test_hark_bin(), m, test_shared("audio/en/wav"));
    char *out;
    int st = run_cmd(t, cmd, &out);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *rf = cJSON_GetObjectItem(probs, "files");
    const cJSON *sf = cJSON_GetObjectItem(segs, "files");
    int ok = st == 0 && cJSON_GetArraySize(j) == cJSON_GetArraySize(rf);
    double worst = 0;
    char msg[600];
    snprintf(msg, sizeof msg, "exit %d, %d files in the output, %d in the reference", st,
             cJSON_GetArraySize(j), cJSON_GetArraySize(rf));
    const cJSON *e;
    cJSON_ArrayForEach(e, rf)
    {
        if (!ok)
            break;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "file"));
        const cJSON *h = by_file(j, name), *s = by_file(sf, name);
        const cJSON *hp = cJSON_GetObjectItem(h, "probs"), *rp = cJSON_GetObjectItem(e, "probs");
        if (!h || !s || cJSON_GetArraySize(hp) != cJSON_GetArraySize(rp)) {
            snprintf(msg, sizeof msg, "%s: missing, or %d windows (reference %d)", name,
                     cJSON_GetArraySize(hp), cJSON_GetArraySize(rp));
            ok = 0;
            break;
        }
        for (int k = 0; k < cJSON_GetArraySize(rp); k++) {
            double d = fabs(cJSON_GetArrayItem(hp, k)->valuedouble -
                            cJSON_GetArrayItem(rp, k)->valuedouble);
            worst = d > worst ? d : worst;
        }
        const cJSON *hs = cJSON_GetObjectItem(h, "segments"),
                    *rs = cJSON_GetObjectItem(s, "segments");
        if (cJSON_GetArraySize(hs) != cJSON_GetArraySize(rs)) {
            snprintf(msg, sizeof msg, "%s: %d segments, the reference %d", name,
                     cJSON_GetArraySize(hs), cJSON_GetArraySize(rs));
            ok = 0;
        }
        for (int k = 0; ok && k < cJSON_GetArraySize(rs); k++) {
            const cJSON *a = cJSON_GetArrayItem(hs, k), *b = cJSON_GetArrayItem(rs, k);
            long long hs0 = llround(cJSON_GetObjectItem(a, "start")->valuedouble * 16000);
            long long he0 = llround(cJSON_GetObjectItem(a, "end")->valuedouble * 16000);
            if (hs0 != (long long)cJSON_GetArrayItem(b, 0)->valuedouble ||
                he0 != (long long)cJSON_GetArrayItem(b, 1)->valuedouble) {
                snprintf(msg, sizeof msg, "%s: segment %d [%lld, %lld], the reference [%.0f, %.0f]",
                         name, k, hs0, he0, cJSON_GetArrayItem(b, 0)->valuedouble,
                         cJSON_GetArrayItem(b, 1)->valuedouble);
                ok = 0;
            }
        }
    }
    printf("  hark vad --format json: max |prob - onnxruntime| = %.3g\n", worst);
    cJSON_Delete(j);
    cJSON_Delete(probs);
    cJSON_Delete(segs);
    CHECKF(ok, "%s", msg);
    CHECKF(worst <= TOL_PROB, "max |diff| %.3g > %.0e", worst, TOL_PROB);
}

TEST(cli_vad_text_and_options)
{
    char why[600];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    const char *wav = test_shared("audio/en/wav/jfk.wav");
    CHECK(wav != NULL);
    char cmd[4096], *out;
    /* text: one "FILE START END" line per segment of the JSON output */
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --format json '%s'", test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    cJSON *j = cJSON_Parse(out);
    free(out);
    const cJSON *segs = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "segments");
    int n_json = cJSON_GetArraySize(segs);
    int n_probs = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "probs"));
    double first_start = cJSON_GetObjectItem(cJSON_GetArrayItem(segs, 0), "start")->valuedouble;
    cJSON_Delete(j);
    CHECK(n_json >= 1);
    CHECK_EQ_INT(n_probs, (176000 + 511) / 512);
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' '%s'", test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    int lines = 0;
    double s0 = -1, e0 = -1;
    char name[1024];
    for (char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
        if (lines == 0)
            CHECK(sscanf(p, "%1023s %lf %lf", name, &s0, &e0) == 3);
        lines++;
    }
    free(out);
    CHECK_EQ_INT(lines, n_json);
    CHECK(fabs(s0 - first_start) < 0.0006);
    /* a higher threshold and a long padding change the segments; a short max duration splits */
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --max-speech-duration-s 1 --format json '%s'",
             test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    j = cJSON_Parse(out);
    free(out);
    segs = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "segments");
    int n_split = cJSON_GetArraySize(segs);
    const cJSON *e;
    int all_short = 1;
    cJSON_ArrayForEach(e, segs)
    {
        double len = cJSON_GetObjectItem(e, "end")->valuedouble -
                     cJSON_GetObjectItem(e, "start")->valuedouble;
        all_short &= len <= 1.0 + 1e-9;
    }
    cJSON_Delete(j);
    CHECKF(n_split > n_json, "%d segments with a 1 s limit, %d without", n_split, n_json);
    CHECK(all_short);
    /* --sample-rate 8000: the 8 kHz network on the resampled audio, 256-sample windows */
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --sample-rate 8000 --format json '%s'",
             test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    j = cJSON_Parse(out);
    free(out);
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "sample_rate")->valuedouble, 8000);
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "probs")),
                 (88000 + 255) / 256);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "segments")) >= 1);
    cJSON_Delete(j);
}

TEST(cli_vad_errors)
{
    char why[600];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    char cmd[4096], *out;
    const char *wav = test_shared("audio/en/wav/jfk.wav");
    snprintf(cmd, sizeof cmd, "'%s' vad '%s'", test_hark_bin(), wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2); /* no --model */
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --threshold 1.5 '%s'", test_hark_bin(), m,
             wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --sample-rate 22050 '%s'", test_hark_bin(), m,
             wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' vad --model /nonexistent '%s'", test_hark_bin(), wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1);
    free(out);
    /* a missing file fails that file only: the others still get their segments */
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --format json /nonexistent.wav '%s'",
             test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    free(out);
    CHECK_EQ_INT(cJSON_GetArraySize(j), 2);
    int ok = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "error") != NULL &&
             cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "segments")) >= 1;
    cJSON_Delete(j);
    CHECK(ok);
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --device tpu '%s'", test_hark_bin(), m, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    if (!test_have_gpu()) { /* a GPU that is not there: a clear error before any output */
        snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --device cuda:0 '%s'", test_hark_bin(), m,
                 wav);
        CHECK_EQ_INT(run_cmd(t, cmd, &out), 1);
        CHECK(out && !*out);
        free(out);
    }
}

/* --device cuda:0 against the CPU on all the shared audio at both rates, 5 files per batch (so
 * the GPU's batches hold files of different lengths that end in different chunks): the same
 * segments, every window's probability within 1e-5 (both FP32; silero_vad_gpu.cu's tests). */
GPU_TEST(cli_vad_gpu_matches_cpu)
{
    if (!test_have_gpu())
        SKIP("no usable GPU");
    char why[600];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    for (int pass = 0; pass < 2; pass++) {
        const char *rate = pass ? "8000" : "16000";
        char cmd[4096], *out[2] = {0};
        for (int dev = 0; dev < 2; dev++) {
            snprintf(cmd, sizeof cmd,
                     "'%s' vad --model '%s' --format json --batch-size 5 --sample-rate %s "
                     "--device %s '%s'/*.wav",
                     test_hark_bin(), m, rate, dev ? "cuda:0" : "cpu", test_shared("audio/en/wav"));
            CHECK_EQ_INT(run_cmd(t, cmd, &out[dev]), 0);
        }
        cJSON *c = out[0] ? cJSON_Parse(out[0]) : NULL, *g = out[1] ? cJSON_Parse(out[1]) : NULL;
        free(out[0]);
        free(out[1]);
        int n = cJSON_GetArraySize(c), same = n > 0 && n == cJSON_GetArraySize(g);
        double worst = 0;
        for (int i = 0; same && i < n; i++) {
            const cJSON *a = cJSON_GetArrayItem(c, i), *b = cJSON_GetArrayItem(g, i);
            char *sa = cJSON_PrintUnformatted(cJSON_GetObjectItem(a, "segments"));
            char *sb = cJSON_PrintUnformatted(cJSON_GetObjectItem(b, "segments"));
            same = sa && sb && !strcmp(sa, sb);
            free(sa);
            free(sb);
            const cJSON *pa = cJSON_GetObjectItem(a, "probs"),
                        *pb = cJSON_GetObjectItem(b, "probs");
            same = same && cJSON_GetArraySize(pa) == cJSON_GetArraySize(pb);
            for (int k = 0; same && k < cJSON_GetArraySize(pa); k++) {
                double d = fabs(cJSON_GetArrayItem(pa, k)->valuedouble -
                                cJSON_GetArrayItem(pb, k)->valuedouble);
                worst = d > worst ? d : worst;
            }
        }
        cJSON_Delete(c);
        cJSON_Delete(g);
        fprintf(stderr, "hark vad --device cuda:0 at %s Hz: %d files, max |gpu - cpu| %.3g\n", rate,
                n, worst);
        CHECK(same);
        CHECK(worst <= 1e-5);
    }
}

/* `hark inspect` on a Silero VAD: both networks, and the parameter total of the file */
TEST(cli_vad_inspect)
{
    char why[600];
    const char *m = golden_silero_model(why, sizeof why);
    if (!m)
        SKIP(why);
    char path[700], cmd[1400], *out;
    snprintf(path, sizeof path, "%s/1/model.safetensors", m);
    safetensors_t *st = NULL;
    CHECK_OK(st_open(path, &st, NULL));
    unsigned long long total = 0;
    for (size_t i = 0; i < st_count(st); i++)
        total += st_at(st, i)->count;
    st_close(st);
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s'", test_hark_bin(), m);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    char want[64];
    snprintf(want, sizeof want, "parameters           %llu\n", total);
    int ok = out && strstr(out, "16000 Hz: window") && strstr(out, "8000 Hz: window") &&
             strstr(out, want);
    free(out);
    CHECKF(ok, "expected both rates and '%s'", want);
}
