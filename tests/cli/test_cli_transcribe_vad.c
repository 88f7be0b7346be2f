/* Integration tests of `hark transcribe --vad DIR` through the built binary: three real
 * utterances of ../shared/data/audio/en joined with 2 s silences, the golden WeNet model
 * (../shared/data/golden/wenet_u2pp_conformer_small, random weights: its texts are arbitrary but
 * deterministic) and the real Silero VAD. The segments are `hark vad`'s with the same rules; each
 * segment's text is what `hark transcribe` gives for that slice of the audio alone; the file's
 * text is their texts in order; batching segments changes nothing; text and srt output agree;
 * option errors. */
#include "test.h"

#include "audio/audio.h"
#include "support/golden_model.h"
#include "support/golden_silero.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static int write_wav(const char *path, const float *x, size_t n)
{
    SF_INFO info = {.samplerate = 16000, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        short v = (short)lrintf(x[i] * 32768.0f); /* the samples are k / 32768: exact */
        rc = sf_write_short(f, &v, 1) != 1;
    }
    return sf_close(f) || rc ? -1 : 0;
}

/* tmp/long.wav: jfk, 2 s, LJ001-0001, 2 s, librispeech-1995-1837-0001, 2 s; its samples in *pcm */
static int make_long(test_ctx_t *t, char *path, size_t npath, float **pcm, size_t *n)
{
    const char *names[3] = {"jfk.wav", "lj-LJ001-0001.wav", "librispeech-1995-1837-0001.wav"};
    size_t cap = 0, len = 0;
    float *x = NULL;
    for (int i = 0; i < 3; i++) {
        char rel[200];
        snprintf(rel, sizeof rel, "audio/en/wav/%s", names[i]);
        audio_t a = {0};
        if (audio_decode_file(test_shared(rel), NULL, &a, NULL))
            return -1;
        cap = len + a.n + 32000;
        float *nx = realloc(x, cap * sizeof *x);
        if (!nx) {
            free(x);
            audio_free(&a);
            return -1;
        }
        x = nx;
        memcpy(x + len, a.samples, a.n * sizeof *x);
        memset(x + len + a.n, 0, 32000 * sizeof *x);
        len = cap;
        audio_free(&a);
    }
    snprintf(path, npath, "%s/long.wav", test_tmpdir(t));
    *pcm = x;
    *n = len;
    return write_wav(path, x, len);
}

#define SETUP()                                                                                    \
    char why[600], W[600], V[600], wav[600];                                                       \
    const char *v_ = golden_silero_model(why, sizeof why);                                         \
    if (!v_)                                                                                       \
        SKIP(why);                                                                                 \
    snprintf(V, sizeof V, "%s", v_);                                                               \
    const char *w_ = golden_wenet_model_dir(why, sizeof why);                                      \
    if (!w_)                                                                                       \
        SKIP(why);                                                                                 \
    snprintf(W, sizeof W, "%s/m", w_);                                                             \
    float *pcm = NULL;                                                                             \
    size_t n_pcm = 0;                                                                              \
    CHECK(make_long(t, wav, sizeof wav, &pcm, &n_pcm) == 0)

TEST(cli_transcribe_vad_segments_and_texts)
{
    SETUP();
    char cmd[8192], *out;
    /* the VAD's own segments with transcribe's default rules (max speech 20 s) */
    snprintf(cmd, sizeof cmd, "'%s' vad --model '%s' --max-speech-duration-s 20 --format json '%s'",
             test_hark_bin(), V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 0);
    cJSON *vj = cJSON_Parse(out);
    free(out);
    const cJSON *vsegs = cJSON_GetObjectItem(cJSON_GetArrayItem(vj, 0), "segments");
    int nv = cJSON_GetArraySize(vsegs);
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--batch-size 1 --format json '%s'",
             test_hark_bin(), W, V, wav);
    int st = run_cmd(t, cmd, &out);
    cJSON *tj = out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *f0 = cJSON_GetArrayItem(tj, 0);
    const cJSON *tsegs = cJSON_GetObjectItem(f0, "segments");
    int ok = st == 0 && nv >= 3 && cJSON_GetArraySize(tsegs) == nv;
    char msg[800];
    snprintf(msg, sizeof msg, "exit %d; %d VAD segments, %d transcribed", st, nv,
             cJSON_GetArraySize(tsegs));
    /* each segment: the VAD's span, and the text of its slice transcribed alone */
    char slices[8192] = "";
    size_t off = 0;
    for (int k = 0; ok && k < nv; k++) {
        const cJSON *a = cJSON_GetArrayItem(vsegs, k), *b = cJSON_GetArrayItem(tsegs, k);
        double s0 = cJSON_GetObjectItem(a, "start")->valuedouble;
        double e0 = cJSON_GetObjectItem(a, "end")->valuedouble;
        if (fabs(s0 - cJSON_GetObjectItem(b, "start")->valuedouble) > 1e-9 ||
            fabs(e0 - cJSON_GetObjectItem(b, "end")->valuedouble) > 1e-9) {
            snprintf(msg, sizeof msg, "segment %d: [%g, %g] transcribed, [%g, %g] from hark vad", k,
                     cJSON_GetObjectItem(b, "start")->valuedouble,
                     cJSON_GetObjectItem(b, "end")->valuedouble, s0, e0);
            ok = 0;
            break;
        }
        long long i0 = llround(s0 * 16000), i1 = llround(e0 * 16000);
        char p[700];
        snprintf(p, sizeof p, "%s/slice%02d.wav", test_tmpdir(t), k);
        ok = i0 >= 0 && i1 <= (long long)n_pcm && write_wav(p, pcm + i0, (size_t)(i1 - i0)) == 0;
        off += (size_t)snprintf(slices + off, sizeof slices - off, " '%s'", p);
    }
    if (ok) {
        snprintf(cmd, sizeof cmd,
                 "'%s' transcribe --model '%s' --decoding-method ctc_greedy_search "
                 "--format json%s",
                 test_hark_bin(), W, slices);
        ok = run_cmd(t, cmd, &out) == 0;
        cJSON *sj = out ? cJSON_Parse(out) : NULL;
        free(out);
        char joined[16384] = "";
        size_t jl = 0;
        for (int k = 0; ok && k < nv; k++) {
            const char *want =
                cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(sj, k), "text"));
            const char *got =
                cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(tsegs, k), "text"));
            if (!want || !got || strcmp(want, got)) {
                snprintf(msg, sizeof msg, "segment %d: '%.200s', its slice alone '%.200s'", k,
                         got ? got : "?", want ? want : "?");
                ok = 0;
            } else if (*got) {
                jl += (size_t)snprintf(joined + jl, sizeof joined - jl, "%s%s", jl ? " " : "", got);
            }
        }
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(f0, "text"));
        if (ok && (!text || strcmp(text, joined))) {
            snprintf(msg, sizeof msg, "file text '%.200s' is not its segments' '%.200s'",
                     text ? text : "?", joined);
            ok = 0;
        }
        double dur = cJSON_GetNumberValue(cJSON_GetObjectItem(f0, "duration_s"));
        if (ok && fabs(dur - (double)n_pcm / 16000) > 1e-9) {
            snprintf(msg, sizeof msg, "duration_s %g, the file has %g s", dur,
                     (double)n_pcm / 16000);
            ok = 0;
        }
        cJSON_Delete(sj);
    }
    printf("  %zu samples, %d segments\n", n_pcm, nv);
    cJSON_Delete(vj);
    cJSON_Delete(tj);
    free(pcm);
    CHECKF(ok, "%s", msg);
}

TEST(cli_transcribe_vad_batched_text_srt)
{
    SETUP();
    free(pcm);
    char cmd[8192], *one, *batched, *text, *srt;
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--batch-size 1 --format json '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &one), 0);
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--batch-size 4 --format json '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &batched), 0);
    cJSON *a = cJSON_Parse(one), *b = cJSON_Parse(batched);
    free(one);
    free(batched);
    const char *ta = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "text"));
    const char *tb = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 0), "text"));
    int same = ta && tb && !strcmp(ta, tb);
    char first[4096];
    snprintf(first, sizeof first, "%s %s\n", wav, ta ? ta : "");
    int n_seg = cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "segments"));
    double start0 = cJSON_GetNumberValue(cJSON_GetObjectItem(
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "segments"), 0), "start"));
    cJSON_Delete(a);
    cJSON_Delete(b);
    CHECKF(same, "batch 1 and batch 4 texts differ");
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &text), 0);
    int text_ok = !strcmp(text, first);
    free(text);
    CHECKF(text_ok, "the text format is not 'FILE TEXT' of the json text");
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--format srt '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &srt), 0);
    /* the first cue starts at the first segment's first word, which is not before the segment */
    int h, m, s, ms;
    const char *arrow = srt ? strstr(srt, " --> ") : NULL;
    int parsed = arrow && sscanf(arrow - 12, "%d:%d:%d,%d", &h, &m, &s, &ms) == 4;
    double cue0 = parsed ? h * 3600 + m * 60 + s + ms / 1000.0 : -1;
    int cues = 0;
    for (const char *p = srt; p && (p = strstr(p, " --> ")); p += 5)
        cues++;
    free(srt);
    CHECK(parsed);
    CHECKF(cue0 >= start0 - 0.0005, "first cue at %g s, first segment at %g s", cue0, start0);
    CHECKF(cues >= n_seg, "%d cues for %d segments", cues, n_seg);
}

TEST(cli_transcribe_vad_errors)
{
    SETUP();
    free(pcm);
    char cmd[8192], *out;
    snprintf(cmd, sizeof cmd, "'%s' transcribe --model '%s' --vad-threshold 0.3 '%s'",
             test_hark_bin(), W, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' transcribe --model '%s' --vad '%s' --vad-threshold 3 '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --url http://127.0.0.1:1 '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 2);
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' transcribe --model '%s' --vad /nonexistent '%s'",
             test_hark_bin(), W, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1);
    free(out);
    /* a missing file fails alone */
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--format json /nonexistent.wav '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    free(out);
    int ok = cJSON_GetArraySize(j) == 2 &&
             cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "error") != NULL &&
             cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "segments")) >= 3;
    cJSON_Delete(j);
    CHECK(ok);
}

/* several files: segments batched across files give each file what it gets alone, in order */
TEST(cli_transcribe_vad_across_files)
{
    SETUP();
    free(pcm);
    const char *a = test_shared("audio/en/wav/sb-spk1_snt1.wav");
    const char *b = test_shared("audio/en/wav/lj-LJ001-0013.wav");
    CHECK(a && b);
    char cmd[8192], *batched, *alone[3];
    const char *files[3] = {a, wav, b};
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--batch-size 5 --format json '%s' '%s' '%s'",
             test_hark_bin(), W, V, a, wav, b);
    CHECK_EQ_INT(run_cmd(t, cmd, &batched), 0);
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
                 "--batch-size 1 --format json '%s'",
                 test_hark_bin(), W, V, files[i]);
        CHECK_EQ_INT(run_cmd(t, cmd, &alone[i]), 0);
    }
    cJSON *j = cJSON_Parse(batched);
    free(batched);
    int ok = cJSON_GetArraySize(j) == 3;
    char msg[600] = "";
    for (int i = 0; i < 3; i++) {
        cJSON *one = cJSON_Parse(alone[i]);
        free(alone[i]);
        const cJSON *x = cJSON_GetArrayItem(j, i), *y = cJSON_GetArrayItem(one, 0);
        if (ok && !cJSON_Compare(x, y, 1)) {
            snprintf(msg, sizeof msg, "file %d (%s) differs batched across files", i, files[i]);
            ok = 0;
        }
        cJSON_Delete(one);
    }
    cJSON_Delete(j);
    CHECKF(ok, "%s", msg);
}

/* `-`: standard input from a pipe gives the file's own result, named "-" */
TEST(cli_transcribe_stdin)
{
    SETUP();
    free(pcm);
    char cmd[8192], *file_out, *pipe_out, *plain_file, *plain_pipe;
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &file_out), 0);
    snprintf(cmd, sizeof cmd,
             "cat '%s' | '%s' transcribe --model '%s' --vad '%s' --decoding-method "
             "ctc_greedy_search -",
             wav, test_hark_bin(), W, V);
    CHECK_EQ_INT(run_cmd(t, cmd, &pipe_out), 0);
    const char *jfk = test_shared("audio/en/wav/jfk.wav");
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --decoding-method ctc_greedy_search '%s'",
             test_hark_bin(), W, jfk);
    CHECK_EQ_INT(run_cmd(t, cmd, &plain_file), 0);
    snprintf(cmd, sizeof cmd,
             "cat '%s' | '%s' transcribe --model '%s' --decoding-method ctc_greedy_search -", jfk,
             test_hark_bin(), W);
    CHECK_EQ_INT(run_cmd(t, cmd, &plain_pipe), 0);
    /* same text after the name */
    int ok = !strncmp(pipe_out, "- ", 2) && !strcmp(pipe_out + 2, file_out + strlen(wav) + 1) &&
             !strncmp(plain_pipe, "- ", 2) && !strcmp(plain_pipe + 2, plain_file + strlen(jfk) + 1);
    free(file_out);
    free(pipe_out);
    free(plain_file);
    free(plain_pipe);
    CHECK(ok);
    snprintf(cmd, sizeof cmd, "'%s' transcribe --model '%s' - - < /dev/null", test_hark_bin(), W);
    CHECK_EQ_INT(run_cmd(t, cmd, &file_out), 2);
    free(file_out);
}

/* wav.scp "command |" entries (Kaldi): run in the list's folder, their output decoded; a failing
 * command fails its utterance alone */
TEST(cli_transcribe_wavscp_pipe)
{
    char why[600], W[600];
    const char *w_ = golden_wenet_model_dir(why, sizeof why);
    if (!w_)
        SKIP(why);
    snprintf(W, sizeof W, "%s/m", w_);
    NEED_SHARED("audio/en/wav/jfk.wav");
    const char *tmp = test_tmpdir(t);
    char cmd[8192], *out;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/d' && cp '%s' '%s/d/a b.wav' && printf 'u1 cat \"a b.wav\" |\\n"
             "u2 a b.wav\\nu3 false |\\n' > '%s/d/wav.scp'",
             tmp, test_shared("audio/en/wav/jfk.wav"), tmp, tmp);
    CHECK_OK(system(cmd));
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --decoding-method ctc_greedy_search "
             "--wavscp '%s/d/wav.scp'",
             test_hark_bin(), W, tmp);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1); /* u3 failed */
    char *u1 = out ? strstr(out, "u1 ") : NULL, *u2 = out ? strstr(out, "u2 ") : NULL;
    int ok = u1 && u2 && !strstr(out, "u3 ");
    if (ok) {
        char *e1 = strchr(u1, '\n'), *e2 = strchr(u2, '\n');
        ok = e1 && e2 && e1 - u1 == e2 - u2 && !strncmp(u1 + 3, u2 + 3, (size_t)(e1 - u1 - 3)) &&
             e1 - u1 > 4;
    }
    free(out);
    CHECK(ok);
}

/* --wavscp with --vad: each entry (a file, a "command |", one that fails) cut by the VAD and
 * scored whole: the file and the piped copy of the long test file give the text `hark transcribe
 * --vad` gives that file, the failing entry fails alone (exit 1), the summary scores the others */
TEST(cli_transcribe_vad_wavscp)
{
    SETUP();
    free(pcm);
    const char *tmp = test_tmpdir(t);
    char cmd[8192], *out, *one;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/d' && cp '%s' '%s/d/long.wav' && printf 'u1 cat long.wav |\\n"
             "u2 long.wav\\nu3 false |\\n' > '%s/d/wav.scp' && printf 'u1 A\\nu2 A\\nu3 A\\n' "
             "> '%s/d/text'",
             tmp, wav, tmp, tmp, tmp);
    CHECK_OK(system(cmd));
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--format json '%s'",
             test_hark_bin(), W, V, wav);
    CHECK_EQ_INT(run_cmd(t, cmd, &one), 0);
    cJSON *j = one ? cJSON_Parse(one) : NULL;
    free(one);
    const cJSON *tx = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "text");
    char want[4096];
    snprintf(want, sizeof want, "%s", cJSON_IsString(tx) ? tx->valuestring : "");
    cJSON_Delete(j);
    CHECK(want[0] != 0);
    snprintf(cmd, sizeof cmd,
             "'%s' transcribe --model '%s' --vad '%s' --decoding-method ctc_greedy_search "
             "--wavscp '%s/d/wav.scp' --trans '%s/d/text' --format json --output-dir '%s/o'",
             test_hark_bin(), W, V, tmp, tmp, tmp);
    CHECK_EQ_INT(run_cmd(t, cmd, &out), 1); /* u3 failed */
    j = out ? cJSON_Parse(out) : NULL;
    free(out);
    const cJSON *f = cJSON_GetObjectItem(j, "failed");
    int failed = cJSON_IsNumber(f) ? f->valueint : -1;
    cJSON_Delete(j);
    char path[700], line[8192];
    snprintf(path, sizeof path, "%s/o/hyp.txt", tmp);
    FILE *fh = fopen(path, "r");
    CHECK(fh != NULL);
    int got = 0, lines = 0;
    while (fgets(line, sizeof line, fh)) {
        line[strcspn(line, "\n")] = 0;
        lines++;
        got += (!strncmp(line, "u1 ", 3) || !strncmp(line, "u2 ", 3)) && !strcmp(line + 3, want);
    }
    fclose(fh);
    CHECK_EQ_INT(lines, 2);
    CHECK_EQ_INT(got, 2);
    CHECK_EQ_INT(failed, 1);
}
