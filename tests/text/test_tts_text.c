/* Tests for src/text/tts_text.c (DLE FastSpeech's English front end): the golden sentences'
 * ids (../shared/data/golden/tts/fastspeech/s{0,1,2}/ids.npy), every line of a reference file made
 * by tools/tts_text_reference.py from the ORIGINAL Python (all 13,100 LJSpeech transcripts and
 * generated number / currency / abbreviation / brace lines; $HARK_TTS_TEXT_REF, default
 * /tmp/hark-tts-text-ref.tsv; skipped when absent), number words, and bad input. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

TEST(tts_text_golden_sentences)
{
    if (!test_shared("golden/tts/fastspeech"))
        SKIP("../shared/data/golden/tts/fastspeech is absent");
    for (int s = 0; s < 3; s++) {
        char rel[64];
        snprintf(rel, sizeof rel, "fastspeech/s%d/ids.npy", s);
        npy_array_t g = {0};
        CHECK(golden_tts_npy(&g, rel) == HARK_OK);
        tts_text_t tt;
        hark_err_t err = {0};
        int rc = tts_text_to_ids(SENTENCES[s], &tt, &err);
        int same = rc == HARK_OK && (size_t)tt.n == g.count;
        for (int i = 0; same && i < tt.n; i++)
            same = tt.ids[i] == (int)((float *)g.data)[i];
        printf("    s%d: %d ids (golden %zu) \"%s\"\n", s, tt.n, g.count,
               tt.cleaned ? tt.cleaned : "");
        tts_text_free(&tt);
        npy_free(&g);
        CHECKF(same, "sentence %d: ids differ from the golden (rc %d %s)", s, rc, err.msg);
    }
}

TEST(tts_text_cleaned_sentence)
{
    char *c = NULL;
    hark_err_t err = {0};
    CHECK(tts_text_clean(SENTENCES[1], strlen(SENTENCES[1]), &c, &err) == HARK_OK);
    int ok = !strcmp(c, "doctor smith paid twelve dollars, fifty cents for three books on jan. "
                        "second, nineteen ninety-nine -- at four:thirty p.m.!");
    printf("    %s\n", c);
    hark_free(c);
    CHECK(ok);
}

TEST(tts_text_number_words)
{
    static const struct {
        const char *in, *andword, *out;
    } cases[] = {
        {"0", "", "zero"},
        {"1", "", "one"},
        {"101", "", "one hundred one"},
        {"101", "and", "one hundred and one"},
        {"1001", "and", "one thousand and one"},
        {"5234", "", "five thousand, two hundred thirty-four"},
        {"1000000", "", "one million"},
        {"21st", "and", "twenty-first"},
        {"12th", "and", "twelfth"},
        {"100th", "and", "one hundredth"},
        {"0th", "and", "zeroth"},
        {"20th", "and", "twentieth"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *w = NULL;
        hark_err_t err = {0};
        CHECKF(tts_number_words(cases[i].in, cases[i].andword, &w, &err) == HARK_OK, "%s: %s",
               cases[i].in, err.msg);
        int ok = !strcmp(w, cases[i].out);
        char got[256];
        snprintf(got, sizeof got, "%s", w);
        hark_free(w);
        CHECKF(ok, "%s (andword '%s'): got '%s', want '%s'", cases[i].in, cases[i].andword, got,
               cases[i].out);
    }
}

/* \t, \n, \\ escapes of the reference file */
static void unescape(char *s)
{
    char *o = s;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) {
            s++;
            *o++ = *s == 't' ? '\t' : *s == 'n' ? '\n' : *s;
        } else {
            *o++ = *s;
        }
    }
    *o = 0;
}

/* Every line of a tools/tts_text_reference.py file against hark's ids with `variant`. */
static void check_reference_file(test_ctx_t *t, const char *path, tts_text_variant_t variant)
{
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    int n = 0, bad = 0;
    char first[600] = "";
    while (fgets(line, (int)cap, f)) {
        size_t l = strlen(line);
        if (l && line[l - 1] == '\n')
            line[--l] = 0;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2)
            continue;
        *t1 = *t2 = 0;
        const char *key = line, *ref = t1 + 1;
        char *text = t2 + 1;
        unescape(text);
        tts_text_t tt;
        hark_err_t err = {0};
        int rc = tts_text_to_ids_variant(text, variant, &tt, &err);
        int ok;
        if (!strncmp(ref, "ERROR", 5)) {
            ok = rc == HARK_ERR_UNSUPPORTED;
        } else if (rc == HARK_ERR_INVALID_ARG) { /* nothing speakable: no letter or phone */
            ok = 1;
            for (const char *p = ref; *p && ok;) {
                char *e;
                ok = strtol(p, &e, 10) < TTS_FIRST_LETTER && e != p;
                p = e;
                while (*p == ' ')
                    p++;
            }
        } else {
            ok = rc == HARK_OK;
            const char *p = ref;
            for (int i = 0; ok && i < tt.n; i++) {
                char *e;
                long v = strtol(p, &e, 10);
                ok = e != p && v == tt.ids[i];
                p = e;
            }
            while (ok && *p == ' ')
                p++;
            ok = ok && !*p;
        }
        if (!ok && !bad++)
            snprintf(first, sizeof first, "%.40s \"%.200s\": rc %d, cleaned \"%.200s\"", key, text,
                     rc, rc ? err.msg : tt.cleaned);
        if (!ok && bad <= 20)
            printf("    MISMATCH %s: \"%s\" -> \"%s\"\n", key, text, rc ? err.msg : tt.cleaned);
        tts_text_free(&tt);
        n++;
    }
    fclose(f);
    free(line);
    printf("    %d lines of %s, %d differ\n", n, path, bad);
    CHECKF(n > 0, "%s is empty", path);
    CHECKF(bad == 0, "%d of %d lines differ; first %s", bad, n, first);
}

TEST(tts_text_reference_file)
{
    const char *path = getenv("HARK_TTS_TEXT_REF");
    if (!path || !*path)
        path = "/tmp/hark-tts-text-ref.tsv";
    if (access(path, R_OK) != 0)
        SKIP("no reference ids (make them with tools/tts_text_reference.py --output "
             "/tmp/hark-tts-text-ref.tsv, or set HARK_TTS_TEXT_REF)");
    check_reference_file(t, path, TTS_TEXT_FASTSPEECH);
}

/* The demo voice's training ids (tools/demo_tts_data.py computes them in Python, since the GPU
 * machine it runs on has no hark): every sentence it keeps from the LJSpeech transcripts must get
 * the ids hark's front end gives the same text, or the voice would be trained on other input
 * than it is given. */
TEST(tts_text_demo_voice_ids)
{
    if (!test_shared("text/ljspeech_transcripts.tsv"))
        SKIP("../shared/data/text/ljspeech_transcripts.tsv is absent");
    const char *py = test_python("numpy");
    if (!py)
        SKIP("no python3 with numpy");
    char path[600], cmd[1400], out[4096];
    snprintf(path, sizeof path, "%s/ids.tsv", test_tmpdir(t));
    snprintf(cmd, sizeof cmd, "%s tools/demo_tts_data.py --ids-tsv '%s'", py, path);
    int st = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(st == 0, "%s: status %d: %s", cmd, st, out);
    unsigned n = 0;
    CHECKF(sscanf(strstr(out, ": ") ? strstr(out, ": ") + 2 : "", "%u", &n) == 1 && n > 11000,
           "too few sentences: %s", out);
    check_reference_file(t, path, TTS_TEXT_FASTSPEECH);
}

/* DLE Tacotron2's front end: the LJSpeech transcripts, the generated lines and every code point
 * of the transliteration ranges hark reproduces (tools/tts_text_reference.py --tacotron2
 * --synthetic --sweep). */
TEST(tts_text_reference_file_tacotron2)
{
    const char *path = getenv("HARK_TTS_TEXT_REF_TACOTRON2");
    if (!path || !*path)
        path = "/tmp/hark-tts-text-ref-tacotron2.tsv";
    if (access(path, R_OK) != 0)
        SKIP("no reference ids (make them with tools/tts_text_reference.py --tacotron2 --sweep "
             "--output /tmp/hark-tts-text-ref-tacotron2.tsv, or set "
             "HARK_TTS_TEXT_REF_TACOTRON2)");
    check_reference_file(t, path, TTS_TEXT_DLE_TACOTRON2);
}

TEST(tts_text_bad_input)
{
    tts_text_t tt;
    hark_err_t err = {0};
    CHECK(tts_text_to_ids("", &tt, &err) == HARK_ERR_INVALID_ARG && !tt.ids);
    CHECKF(strstr(err.msg, "speakable"), "%s", err.msg);
    CHECK(tts_text_to_ids("   \t ~~ ## {} {", &tt, &err) == HARK_ERR_INVALID_ARG);
    CHECK(tts_text_to_ids("caf\xc3", &tt, &err) == HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "UTF-8"), "%s", err.msg);
    CHECK(tts_text_to_ids("\xed\xa0\x80", &tt, &err) == HARK_ERR_INVALID_ARG); /* surrogate */
    CHECK(tts_text_to_ids("paid $,5", &tt, &err) == HARK_ERR_UNSUPPORTED);
    char big[80];
    memset(big, '7', 40);
    big[40] = 0;
    CHECK(tts_text_to_ids(big, &tt, &err) == HARK_ERR_UNSUPPORTED);
    CHECK(tts_text_to_ids("{AA1}", &tt, &err) == HARK_OK && tt.n == 1 && tt.ids[0] == 66);
    tts_text_free(&tt);
    CHECK(!strcmp(tts_symbol(11), " ") && !strcmp(tts_symbol(147), "@ZH") && !tts_symbol(148));
}

/* DLE Tacotron2's transliteration (its own unidecoder): umlauts as two letters, the em dash and
 * the ellipsis dropped, typographic quotes and dashes by their homoglyphs; the rest of the
 * pipeline is FastSpeech's. The golden sentences' ids are checked in
 * tests/model/tacotron2/test_tacotron2.c. */
TEST(tts_text_dle_tacotron2_transliteration)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"M\xc3\xbcller \xc3\x84rger \xc3\x9f", "mueller aerger ss"},
        {"a \xe2\x80\x94 b\xe2\x80\xa6", "a b"}, /* dropped; whitespace then collapsed */
        {"\xe2\x80\x9cit\xe2\x80\x99s\xe2\x80\x9d \xe2\x80\x93 ok", "\"it's\" - ok"},
        {"Dvo\xc5\x99\xc3\xa1k \xc5\x81\xc3\xb3"
         "d\xc5\xba \xc3\x85",
         "dvorak lodz a"},
        {"\xc2\xa9 \xc2\xbfx? \xe2\x82\xac"
         "5",
         " x? efive"}, /* © ¿ dropped, € -> E */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        hark_err_t err = {0};
        CHECK_OK(tts_text_clean_variant(cases[i].in, strlen(cases[i].in), TTS_TEXT_DLE_TACOTRON2,
                                        &out, &err));
        int ok = !strcmp(out, cases[i].want);
        if (!ok)
            printf("    %s -> '%s' (want '%s')\n", cases[i].in, out, cases[i].want);
        hark_free(out);
        CHECK(ok);
    }
    tts_text_t a = {0}, b = {0};
    hark_err_t err = {0};
    CHECK_OK(tts_text_to_ids_variant("M\xc3\xbcller", TTS_TEXT_DLE_TACOTRON2, &a, &err));
    CHECK_OK(tts_text_to_ids("M\xc3\xbcller", &b, &err));
    CHECK_EQ_INT(a.n, 7); /* mueller */
    CHECK_EQ_INT(b.n, 6); /* muller */
    tts_text_free(&a);
    tts_text_free(&b);
}
