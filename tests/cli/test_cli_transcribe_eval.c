/* Integration tests of `hark transcribe --wavscp/--trans` (concurrent list decoding, WER/CER,
 * hyp.txt / ref.txt / summary.json, failures counted) and of --format srt|vtt|json word times,
 * on the golden WeNet wavs with the model's own greedy outputs (results.json) as references. */
#include "test.h"

#include "support/golden_model.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define NUTT 5
static const char *const utts[NUTT] = {"librispeech-1995-1837-0001", "jfk",
                                       "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                       "cards-001"};

/* Runs cmd, stdout into <tmp>/out and stderr into <tmp>/err; returns the exit status. */
static int run(test_ctx_t *t, const char *cmd, char *out, size_t nout, char *err, size_t nerr)
{
    char full[16384], po[512], pe[512];
    snprintf(po, sizeof po, "%s/out", test_tmpdir(t));
    snprintf(pe, sizeof pe, "%s/err", test_tmpdir(t));
    snprintf(full, sizeof full, "%s >%s 2>%s", cmd, po, pe);
    int st = system(full);
    const char *paths[2] = {po, pe};
    char *bufs[2] = {out, err};
    size_t sizes[2] = {nout, nerr};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(paths[k], "r");
        size_t n = f ? fread(bufs[k], 1, sizes[k] - 1, f) : 0;
        bufs[k][n] = 0;
        if (f)
            fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* The model's greedy text of each golden utterance, from results.json (the caller frees). */
static int greedy_texts(char *texts[NUTT])
{
    char *js = slurp(test_shared(GOLDEN_WENET "/results.json"));
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    int ok = root != NULL;
    for (int i = 0; i < NUTT; i++) {
        cJSON *o = cJSON_GetObjectItem(root, utts[i]);
        o = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "full"), "ctc_greedy_search");
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, "text"));
        texts[i] = s ? strdup(s) : NULL;
        ok = ok && texts[i];
    }
    cJSON_Delete(root);
    return ok;
}

static int count_words(const char *s)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        n += *p != ' ' && (p == s || p[-1] == ' ');
    return n;
}

static int count_nonspace(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s != ' ';
    return n;
}

/* Writes <tmp>/<name>: wav.scp lines (relative "wavs/<id>.wav") or references. */
static void write_list(test_ctx_t *t, const char *name, const char *const *lines, int n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(t), name);
    FILE *f = fopen(path, "w");
    for (int i = 0; f && i < n; i++)
        fprintf(f, "%s\n", lines[i]);
    if (f)
        fclose(f);
}

static double json_num(cJSON *o, const char *key)
{
    cJSON *v = cJSON_GetObjectItem(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* Builds the list files: wav.scp (plus `extra_wav`) and trans.txt (greedy outputs, with
 * cards-001 replaced by `cards_ref` when given). */
static int setup_lists(test_ctx_t *t, char *texts[NUTT], const char *cards_ref,
                       const char *extra_wav)
{
    if (!greedy_texts(texts))
        return 0;
    char wl[NUTT + 1][256], tl[NUTT][2048];
    const char *wp[NUTT + 1], *tp[NUTT];
    for (int i = 0; i < NUTT; i++) {
        snprintf(wl[i], sizeof wl[i], "%s wavs/%s.wav", utts[i], utts[i]);
        snprintf(tl[i], sizeof tl[i], "%s %s", utts[i],
                 cards_ref && !strcmp(utts[i], "cards-001") ? cards_ref : texts[i]);
        wp[i] = wl[i];
        tp[i] = tl[i];
    }
    int nw = NUTT;
    if (extra_wav) {
        snprintf(wl[NUTT], sizeof wl[NUTT], "%s", extra_wav);
        wp[nw++] = wl[NUTT];
    }
    write_list(t, "wav.scp", wp, nw);
    write_list(t, "trans.txt", tp, NUTT);
    return 1;
}

TEST(cli_eval_wer_zero_on_own_outputs)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char *texts[NUTT] = {0};
    CHECK(setup_lists(t, texts, NULL, NULL));
    int words = 0, chars = 0;
    for (int i = 0; i < NUTT; i++) {
        words += count_words(texts[i]);
        chars += count_nonspace(texts[i]);
    }
    const char *tmp = test_tmpdir(t);
    char cmd[8192], out[8192], err[8192], want[256];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --wavscp %s/wav.scp "
             "--data-dir %s --trans %s/trans.txt --output-dir %s/res/x --jobs 2 --batch-size 2",
             test_hark_bin(), dir, tmp, test_shared(GOLDEN_WENET), tmp, tmp);
    CHECKF(run(t, cmd, out, sizeof out, err, sizeof err) == 0, "%s%s", out, err);
    snprintf(want, sizeof want,
             "WER 0.00%% [S 0, D 0, I 0 / %d words]\nCER 0.00%% [S 0, D 0, I 0 / %d chars]\n",
             words, chars);
    CHECKF(strstr(out, want) == out, "%s\nwant %s", out, want);
    CHECKF(!strstr(err, "\r"), "no progress bar when stderr is not a terminal: %s", err);
    /* summary.json: exactly the documented keys */
    char path[1024];
    snprintf(path, sizeof path, "%s/res/x/summary.json", tmp);
    char *js = slurp(path);
    cJSON *s = js ? cJSON_Parse(js) : NULL;
    free(js);
    CHECK(s != NULL);
    static const char *keys[] = {"wer",        "cer",           "substitutions", "deletions",
                                 "insertions", "ref_words",     "ref_chars",     "utterances",
                                 "failed",     "audio_seconds", "wall_seconds",  "rtfx"};
    CHECK_EQ_INT(cJSON_GetArraySize(s), 12);
    for (int k = 0; k < 12; k++)
        CHECKF(cJSON_GetObjectItem(s, keys[k]) != NULL, "missing %s", keys[k]);
    CHECK(json_num(s, "wer") == 0 && json_num(s, "cer") == 0 && json_num(s, "failed") == 0);
    CHECK(json_num(s, "ref_words") == words && json_num(s, "ref_chars") == chars);
    CHECK(json_num(s, "utterances") == NUTT);
    /* the audio and the speed (issue 23): the summary line says the same */
    double audio = json_num(s, "audio_seconds"), wall = json_num(s, "wall_seconds");
    CHECKF(audio > 1 && wall > 0 && fabs(json_num(s, "rtfx") - audio / wall) < 1e-6 * audio / wall,
           "audio %g s, wall %g s", audio, wall);
    CHECKF(strstr(out, " s of audio in ") && strstr(out, "x real time\n"), "%s", out);
    cJSON_Delete(s);
    /* hyp.txt and ref.txt: "<id> <text>" per utterance in wav.scp order, identical here */
    snprintf(path, sizeof path, "%s/res/x/hyp.txt", tmp);
    char *hyp = slurp(path);
    snprintf(path, sizeof path, "%s/res/x/ref.txt", tmp);
    char *ref = slurp(path);
    CHECK(hyp && ref);
    int same = !strcmp(hyp, ref);
    char line[4096];
    snprintf(line, sizeof line, "%s %s\n%s %s\n", utts[0], texts[0], utts[1], texts[1]);
    int starts = strncmp(hyp, line, strlen(line)) == 0;
    free(hyp);
    free(ref);
    CHECK(same);
    CHECK(starts);
    snprintf(path, sizeof path, "%s/res/x/per_utt.tsv", tmp);
    char *pu = slurp(path);
    CHECK(pu && strstr(pu, "cards-001\t11\t0\t0\t0\t0.0000\t"));
    free(pu);
    for (int i = 0; i < NUTT; i++)
        free(texts[i]);
}

TEST(cli_eval_counts_errors_and_failures)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    /* The greedy output for cards-001 is
     *   TASTE IS EARLIEST WRITER THOUGHTCOMB PASS LEADER REFRESHCOMB ORGANCOMBC ABSENT HAPPEN
     * against this reference (11 words after normalisation: lower case, punctuation, a hyphen)
     *   TASTE WAS EARLIEST WRITER THOUGHTCOMB PASS LEADER REFRESHCOMB ABSENT HAPPEN NOW
     * costs WAS->IS (S), ORGANCOMBC (I), NOW (D): 3 errors (three substitutions for the last
     * three words would cost one more). Characters: WAS -> IS is S 1 + D 1 (W->I, A gone), the
     * 10 letters of ORGANCOMBC are inserted and the 3 of NOW deleted: S 1, D 4, I 10. */
    char *texts[NUTT] = {0};
    CHECK(setup_lists(t, texts,
                      "taste was earliest writer thoughtcomb, pass leader \"refreshcomb\" "
                      "absent-happen now.",
                      "missing wavs/no-such-file.wav"));
    int words = 0;
    for (int i = 0; i < NUTT; i++)
        words += count_words(texts[i]);
    const char *tmp = test_tmpdir(t);
    char cmd[8192], out[8192], err[8192], want[256];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --wavscp %s/wav.scp "
             "--data-dir %s --trans %s/trans.txt --output-dir %s/res --format json --jobs 3",
             test_hark_bin(), dir, tmp, test_shared(GOLDEN_WENET), tmp, tmp);
    CHECKF(run(t, cmd, out, sizeof out, err, sizeof err) == 1, "%s%s", out, err);
    CHECKF(strstr(err, "missing") && strstr(err, "no-such-file.wav"), "%s", err);
    cJSON *s = cJSON_Parse(out);
    CHECKF(s != NULL, "%s", out);
    CHECK(json_num(s, "substitutions") == 1 && json_num(s, "deletions") == 1 &&
          json_num(s, "insertions") == 1);
    CHECK(json_num(s, "ref_words") == words); /* 11 words replaced by 11 words */
    CHECK(fabs(json_num(s, "wer") - 3.0 / words) < 1e-12);
    CHECK(json_num(s, "failed") == 1 && json_num(s, "utterances") == NUTT);
    CHECK(json_num(s, "cer") > 0);
    cJSON_Delete(s);
    char path[1024];
    snprintf(path, sizeof path, "%s/res/ref.txt", tmp);
    char *ref = slurp(path);
    CHECK(ref && strstr(ref, "\ncards-001 TASTE WAS EARLIEST WRITER THOUGHTCOMB PASS LEADER "
                             "REFRESHCOMB ABSENT HAPPEN NOW\n"));
    free(ref);
    snprintf(path, sizeof path, "%s/res/per_utt.tsv", tmp);
    char *pu = slurp(path);
    CHECK(pu && strstr(pu, "\ncards-001\t11\t1\t1\t1\t0.2727\t"));
    CHECK(!strstr(pu, "missing"));
    free(pu);
    /* the text form of the same run */
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --wavscp %s/wav.scp "
             "--data-dir %s --trans %s/trans.txt --jobs 1",
             test_hark_bin(), dir, tmp, test_shared(GOLDEN_WENET), tmp);
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 1);
    snprintf(want, sizeof want, "WER %.2f%% [S 1, D 1, I 1 / %d words]\n", 300.0 / words, words);
    CHECKF(strstr(out, want) == out, "%s\nwant %s", out, want);
    int chars = count_nonspace("TASTE WAS EARLIEST WRITER THOUGHTCOMB PASS LEADER REFRESHCOMB "
                               "ABSENT HAPPEN NOW") -
                count_nonspace(texts[4]);
    for (int i = 0; i < NUTT; i++)
        chars += count_nonspace(texts[i]);
    snprintf(want, sizeof want, "\nCER %.2f%% [S 1, D 4, I 10 / %d chars]\n", 1500.0 / chars,
             chars);
    CHECKF(strstr(out, want), "%s\nwant %s", out, want);
    CHECKF(strstr(out, "5 utterances scored, 1 failed"), "%s", out);
    for (int i = 0; i < NUTT; i++)
        free(texts[i]);
}

TEST(cli_eval_corrupt_file_and_missing_reference)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *tmp = test_tmpdir(t);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/corrupt.wav", tmp);
    FILE *f = fopen(bad, "w");
    CHECK(f != NULL);
    fputs("RIFF\x24\x00\x00\x00WAVEfmt garbage", f);
    fclose(f);
    /* absolute paths in wav.scp; no --data-dir: relative ones would resolve next to wav.scp */
    char l0[1024], l1[1024], l2[1024];
    snprintf(l0, sizeof l0, "jfk %s/wavs/jfk.wav", test_shared(GOLDEN_WENET));
    snprintf(l1, sizeof l1, "broken %s", bad);
    snprintf(l2, sizeof l2, "noref %s/wavs/cards-001.wav", test_shared(GOLDEN_WENET));
    const char *wl[] = {l0, l1, l2};
    write_list(t, "wav.scp", wl, 3);
    const char *tl[] = {"jfk and so my fellow americans", "broken x"};
    write_list(t, "trans.txt", tl, 2);
    char cmd[8192], out[8192], err[8192];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --wavscp %s/wav.scp "
             "--trans %s/trans.txt --output-dir %s/o",
             test_hark_bin(), dir, tmp, tmp, tmp);
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 1);
    CHECKF(strstr(err, "broken") && strstr(err, "corrupt.wav") && strstr(err, "noref") &&
               strstr(err, "no reference"),
           "%s", err);
    CHECKF(strstr(out, "1 utterances scored, 2 failed"), "%s", out);
    char path[1024];
    snprintf(path, sizeof path, "%s/o/summary.json", tmp);
    char *js = slurp(path);
    cJSON *s = js ? cJSON_Parse(js) : NULL;
    free(js);
    CHECK(s != NULL);
    CHECK(json_num(s, "failed") == 2 && json_num(s, "utterances") == 1);
    CHECK(json_num(s, "ref_words") == 5); /* "and so my fellow americans" */
    cJSON_Delete(s);
    /* without --trans: every decoded utterance is printed, nothing is scored */
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --wavscp %s/wav.scp",
             test_hark_bin(), dir, tmp);
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 1);
    CHECKF(strstr(out, "jfk TRAVELLERLAC SUSTAIN") && strstr(out, "noref TASTE IS") &&
               !strstr(out, "WER"),
           "%s", out);
}

TEST(cli_eval_usage_errors)
{
    char cmd[4096], out[8192], err[8192];
    const char *tmp = test_tmpdir(t);
    /* options that only go with --wavscp, formats that need one FILE, lists that do not parse */
    snprintf(cmd, sizeof cmd, "%s transcribe --model m --trans x a.wav", test_hark_bin());
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    CHECKF(strstr(err, "--wavscp"), "%s", err);
    snprintf(cmd, sizeof cmd, "%s transcribe --model m --format srt a.wav b.wav", test_hark_bin());
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    CHECKF(strstr(err, "one FILE"), "%s", err);
    snprintf(cmd, sizeof cmd, "%s transcribe --model m --format srt --wavscp x", test_hark_bin());
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    snprintf(cmd, sizeof cmd, "%s transcribe --model m --format xml a.wav", test_hark_bin());
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    snprintf(cmd, sizeof cmd, "%s transcribe --model m --jobs", test_hark_bin());
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    const char *dup[] = {"a x.wav", "a y.wav"};
    write_list(t, "wav.scp", dup, 2);
    snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --wavscp %s/wav.scp", test_hark_bin(),
             dir, tmp);
    CHECK(run(t, cmd, out, sizeof out, err, sizeof err) == 2);
    CHECKF(strstr(err, "duplicate id 'a'"), "%s", err);
}

/* Checks SRT or WebVTT text: numbered (SRT) cues with ordered, well-formed times whose words,
 * joined by spaces, give back `text`. */
static int check_subtitles(test_ctx_t *t, const char *s, int vtt, const char *text)
{
    char joined[8192] = "";
    const char *p = s;
    if (vtt) {
        if (strncmp(p, "WEBVTT\n\n", 8)) {
            test_fail(t, __FILE__, __LINE__, "no WEBVTT header: %s", s);
            return 0;
        }
        p += 8;
    }
    int k = 0, last_end = -1;
    while (*p) {
        k++;
        int idx, h0, m0, s0, ms0, h1, m1, s1, ms1, used = 0;
        if (!vtt) {
            if (sscanf(p, "%d\n%n", &idx, &used) != 1 || idx != k) {
                test_fail(t, __FILE__, __LINE__, "cue %d: bad number: %.40s", k, p);
                return 0;
            }
            p += used;
        }
        char sep = vtt ? '.' : ',', fmt[128];
        snprintf(fmt, sizeof fmt, "%%2d:%%2d:%%2d%c%%3d --> %%2d:%%2d:%%2d%c%%3d\n%%n", sep, sep);
        if (sscanf(p, fmt, &h0, &m0, &s0, &ms0, &h1, &m1, &s1, &ms1, &used) != 8 || used != 30) {
            test_fail(t, __FILE__, __LINE__, "cue %d: bad times: %.40s", k, p);
            return 0;
        }
        p += used;
        int a = ((h0 * 60 + m0) * 60 + s0) * 1000 + ms0,
            b = ((h1 * 60 + m1) * 60 + s1) * 1000 + ms1;
        if (!(a < b) || a < last_end) {
            test_fail(t, __FILE__, __LINE__, "cue %d: times %d..%d after %d", k, a, b, last_end);
            return 0;
        }
        last_end = b;
        const char *nl = strstr(p, "\n\n");
        if (!nl || nl == p) {
            test_fail(t, __FILE__, __LINE__, "cue %d: no text or blank line", k);
            return 0;
        }
        if (joined[0])
            strcat(joined, " ");
        strncat(joined, p, (size_t)(nl - p));
        p = nl + 2;
    }
    if (strcmp(joined, text)) {
        test_fail(t, __FILE__, __LINE__, "cue text '%s' != '%s'", joined, text);
        return 0;
    }
    return k;
}

TEST(cli_transcribe_srt_vtt_json_words)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char *texts[NUTT] = {0};
    CHECK(greedy_texts(texts));
    char cmd[8192], out[16384], err[8192];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --format srt "
             "%s/wavs/jfk.wav",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    CHECKF(run(t, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    /* jfk: 19 words, no more than 7 a cue */
    int n = check_subtitles(t, out, 0, texts[1]);
    CHECKF(n >= 3 && n <= 19, "%d cues", n);
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --format vtt "
             "%s/wavs/cards-001.wav",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    CHECKF(run(t, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    CHECK(check_subtitles(t, out, 1, texts[4]) >= 2); /* 11 words */
    /* JSON: per-word start/end, in order, matching the text */
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search --format json "
             "%s/wavs/jfk.wav",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    CHECKF(run(t, cmd, out, sizeof out, err, sizeof err) == 0, "%s", err);
    cJSON *j = cJSON_Parse(out);
    CHECK(j != NULL);
    cJSON *words = cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "words");
    CHECK_EQ_INT(cJSON_GetArraySize(words), count_words(texts[1]));
    char joined[4096] = "";
    double last = -1;
    for (int i = 0; i < cJSON_GetArraySize(words); i++) {
        cJSON *w = cJSON_GetArrayItem(words, i);
        double s = json_num(w, "start_ms"), e = json_num(w, "end_ms");
        CHECKF(s >= last && e > s, "word %d: %g..%g after %g", i, s, e, last);
        last = e;
        if (i)
            strcat(joined, " ");
        strcat(joined, cJSON_GetStringValue(cJSON_GetObjectItem(w, "word")));
    }
    CHECKF(!strcmp(joined, texts[1]), "%s", joined);
    cJSON_Delete(j);
    for (int i = 0; i < NUTT; i++)
        free(texts[i]);
}
