/* Tests of src/eval: WER/CER counts on hand-checked examples (Kaldi compute-wer's tie-breaking,
 * empty references and hypotheses, UTF-8 characters), the scoring normalisation, wav.scp / text
 * parsing, word times and SRT / WebVTT cues. Every expected value here was worked out by hand. */
#include "test.h"

#include "core/alloc.h"
#include "eval/scp.h"
#include "eval/wer.h"
#include "text/words.h"
#include "hark.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_COUNTS(c, s, d, i, n)                                                                \
    do {                                                                                           \
        CHECKF((c).sub == (s) && (c).del == (d) && (c).ins == (i) && (c).ref == (n),               \
               "got S %ld D %ld I %ld N %ld, want S %d D %d I %d N %d", (c).sub, (c).del, (c).ins, \
               (c).ref, (s), (d), (i), (n));                                                       \
    } while (0)

TEST(wer_words_hand_checked)
{
    wer_counts_t c;
    CHECK_OK(wer_words("A B C", "A B C", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 0, 3);
    CHECK(wer_rate(&c) == 0.0);
    /* SAT -> SIT, the second THE deleted */
    CHECK_OK(wer_words("THE CAT SAT ON THE MAT", "THE CAT SIT ON MAT", &c, NULL));
    CHECK_COUNTS(c, 1, 1, 0, 6);
    CHECK(fabs(wer_rate(&c) - 2.0 / 6.0) < 1e-12);
    /* an inserted word at the front and a deleted one inside beat three substitutions */
    CHECK_OK(wer_words("A B C D", "X A B D", &c, NULL));
    CHECK_COUNTS(c, 0, 1, 1, 4);
    /* WAS -> IS, ORGANCOMBC inserted, NOW deleted */
    CHECK_OK(wer_words("TASTE WAS EARLIEST HAPPEN NOW", "TASTE IS EARLIEST ORGANCOMBC HAPPEN", &c,
                       NULL));
    CHECK_COUNTS(c, 1, 1, 1, 5);
    /* whitespace of any kind separates words */
    CHECK_OK(wer_words("  A\tB\n", "A B", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 0, 2);
}

TEST(wer_kaldi_tie_breaking)
{
    wer_counts_t c;
    /* "A B" vs "B A": two substitutions or a deletion plus an insertion both cost 2; Kaldi's
     * recursion (substitution only when strictly cheaper, then deletion when strictly cheaper
     * than insertion) ends in D 1, I 1 -- worked through cell by cell in docs/scoring.md */
    CHECK_OK(wer_words("A B", "B A", &c, NULL));
    CHECK_COUNTS(c, 0, 1, 1, 2);
    /* "A" vs "B C": S 1 + I 1 either way round */
    CHECK_OK(wer_words("A", "B C", &c, NULL));
    CHECK_COUNTS(c, 1, 0, 1, 1);
    /* "A B" vs "C": substitution of one and deletion of the other */
    CHECK_OK(wer_words("A B", "C", &c, NULL));
    CHECK_COUNTS(c, 1, 1, 0, 2);
}

TEST(wer_empty_reference_and_hypothesis)
{
    wer_counts_t c;
    CHECK_OK(wer_words("", "", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 0, 0);
    CHECK(wer_rate(&c) == 0.0);
    /* empty reference: every hypothesis word is an insertion; rate = I / max(N, 1) */
    CHECK_OK(wer_words("", "ONE TWO THREE", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 3, 0);
    CHECK(wer_rate(&c) == 3.0);
    /* empty hypothesis: every reference word is a deletion */
    CHECK_OK(wer_words("ONE TWO", "   ", &c, NULL));
    CHECK_COUNTS(c, 0, 2, 0, 2);
    CHECK(wer_rate(&c) == 1.0);
    CHECK_OK(wer_chars("", "AB", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 2, 0);
    CHECK_OK(wer_chars("AB C", "", &c, NULL));
    CHECK_COUNTS(c, 0, 3, 0, 3);
    /* corpus totals */
    wer_counts_t acc = {0}, a = {1, 2, 3, 10}, b = {0, 1, 0, 0};
    wer_add(&acc, &a);
    wer_add(&acc, &b);
    CHECK_COUNTS(acc, 1, 3, 3, 10);
    CHECK_EQ_INT(wer_errors(&acc), 7);
    CHECK(fabs(wer_rate(&acc) - 0.7) < 1e-12);
}

TEST(wer_chars_utf8)
{
    wer_counts_t c;
    /* 气 deleted, 啊 inserted (three substitutions would cost 3) */
    CHECK_OK(wer_chars("今天天气很好", "今天天很好啊", &c, NULL));
    CHECK_COUNTS(c, 0, 1, 1, 6);
    /* one code point each, whatever its byte length: é (2 bytes), 😀 (4 bytes) */
    CHECK_OK(wer_chars("héllo😀", "hello😀", &c, NULL));
    CHECK_COUNTS(c, 1, 0, 0, 6);
    /* spaces are not characters: a word boundary moved costs nothing */
    CHECK_OK(wer_chars("AB C", "A BC", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 0, 3);
    /* an ideographic space separates too; an invalid byte is one character */
    CHECK_OK(wer_chars("你\xe3\x80\x80好", "你好\xff", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 1, 2);
    /* words of Chinese text without spaces: one word */
    CHECK_OK(wer_words("今天天气很好", "今天天气很好", &c, NULL));
    CHECK_COUNTS(c, 0, 0, 0, 1);
}

/* the returned count is a true minimum edit distance, and the split is consistent:
 * nhyp = nref - D + I, for random sequences over a small alphabet */
TEST(wer_align_random_against_full_matrix)
{
    unsigned st = 7;
    for (int iter = 0; iter < 300; iter++) {
        size_t nr = test_rand(&st) % 13, nh = test_rand(&st) % 13;
        uint32_t r[13], h[13];
        for (size_t i = 0; i < nr; i++)
            r[i] = test_rand(&st) % 3;
        for (size_t i = 0; i < nh; i++)
            h[i] = test_rand(&st) % 3;
        int d[14][14];
        for (size_t i = 0; i <= nr; i++)
            for (size_t j = 0; j <= nh; j++) {
                if (!i || !j) {
                    d[i][j] = (int)(i + j);
                    continue;
                }
                int s = d[i - 1][j - 1] + (r[i - 1] != h[j - 1]);
                int a = d[i - 1][j] + 1, b = d[i][j - 1] + 1;
                d[i][j] = s < a ? (s < b ? s : b) : (a < b ? a : b);
            }
        wer_counts_t c;
        CHECK_OK(wer_align(r, nr, h, nh, &c, NULL));
        CHECKF(wer_errors(&c) == d[nr][nh], "iter %d: %ld vs %d", iter, wer_errors(&c), d[nr][nh]);
        CHECK_EQ_INT((long)nh, (long)nr - c.del + c.ins);
        CHECK_EQ_INT(c.ref, (long)nr);
    }
}

/* many distinct words: the interning table must keep them apart (and equal words together) */
TEST(wer_words_many_distinct)
{
    char *ref = hark_malloc(20000), *hyp = hark_malloc(20000);
    CHECK(ref && hyp);
    size_t lr = 0, lh = 0;
    for (int i = 0; i < 1000; i++) {
        lr += (size_t)sprintf(ref + lr, "W%d ", i);
        lh += (size_t)sprintf(hyp + lh, "W%d ", i % 100 == 0 ? i + 1 : i);
    }
    wer_counts_t c;
    int rc = wer_words(ref, hyp, &c, NULL);
    hark_free(ref);
    hark_free(hyp);
    CHECK_OK(rc);
    CHECK_COUNTS(c, 10, 0, 0, 1000);
}

static int norm_is(test_ctx_t *t, const char *in, const char *want)
{
    char *out = NULL;
    if (wer_normalize(in, &out, NULL) || !out) {
        test_fail(t, __FILE__, __LINE__, "normalize failed on '%s'", in);
        return 0;
    }
    int ok = !strcmp(out, want);
    if (!ok)
        test_fail(t, __FILE__, __LINE__, "normalize('%s') = '%s', want '%s'", in, out, want);
    hark_free(out);
    return ok;
}

TEST(wer_normalize_rules)
{
    static const char *cases[][2] = {
        {"Hello, World!", "HELLO WORLD"},
        {"  leading   and\ttrailing \r\n", "LEADING AND TRAILING"},
        {"don't stop", "DON'T STOP"},
        {"don\xe2\x80\x99t", "DON'T"}, /* ’ inside a word is an apostrophe */
        {"'quoted' and \xe2\x80\x9c"
         "curly\xe2\x80\x9d",
         "QUOTED AND CURLY"},
        {"the students' books", "THE STUDENTS BOOKS"}, /* not inside a word */
        {"rock'n'roll", "ROCK'N'ROLL"},
        {"well-known  fact", "WELL KNOWN FACT"},
        {"yes\xe2\x80\x94no", "YES NO"}, /* em dash */
        {"It costs 3.50, or 1,000.", "IT COSTS 3.50 OR 1,000"},
        {"U.S.A. 2nd", "USA 2ND"},
        {"\xc3\x87"
         "a va? Tr\xc3\xa8s bien.",
         "\xc3\x87"
         "A VA TR\xc3\xa8S BIEN"}, /* Ça, è as-is */
        {"\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82", /* 你好，世界。
                                                                                      */
         "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c"},
        {"\xc2\xbfQu\xc3\xa9?", "QU\xc3\xa9"}, /* ¿ dropped */
        {"a\xff"
         "b",
         "A\xff"
         "B"}, /* an invalid byte is kept */
        {"?!...", ""},
        {"", ""},
        {"<unk> [noise]", "UNK NOISE"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!norm_is(t, cases[i][0], cases[i][1]))
            return;
    /* the same rules on both sides: case and punctuation differences cost nothing */
    char *r = NULL, *h = NULL;
    CHECK_OK(wer_normalize("Well-known, isn't it?", &r, NULL));
    CHECK_OK(wer_normalize("WELL KNOWN ISN'T IT", &h, NULL));
    wer_counts_t c;
    CHECK_OK(wer_words(r, h, &c, NULL));
    hark_free(r);
    hark_free(h);
    CHECK_COUNTS(c, 0, 0, 0, 4);
}

static const char *write_file(test_ctx_t *t, const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(t), name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

TEST(scp_parse_and_find)
{
    const char *p = write_file(t, "text",
                               "# comment\n"
                               "utt2 HELLO  WORLD\r\n"
                               "\n"
                               "utt1\tGOOD BYE \n"
                               "silence\n"
                               "  utt3 x\n");
    scp_t s;
    hark_err_t err = {0};
    CHECKF(scp_load(p, 0, &s, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(s.n, 4);
    CHECK(!strcmp(s.e[0].id, "utt2") && !strcmp(s.e[0].value, "HELLO  WORLD"));
    CHECK_EQ_INT(s.e[0].line, 2);
    CHECK(!strcmp(s.e[1].id, "utt1") && !strcmp(s.e[1].value, "GOOD BYE"));
    CHECK(!strcmp(s.e[2].id, "silence") && !strcmp(s.e[2].value, ""));
    const scp_entry_t *e = scp_find(&s, "utt3");
    CHECK(e && !strcmp(e->value, "x") && e->line == 6);
    CHECK(scp_find(&s, "utt1") == &s.e[1]);
    CHECK(scp_find(&s, "nope") == NULL);
    scp_free(&s);
    scp_free(&s); /* twice is fine */
    /* wav.scp: an id without a path is an error naming file and line */
    CHECK_EQ_INT(scp_load(p, 1, &s, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, ":5:") && strstr(err.msg, "silence"), "%s", err.msg);
    CHECK(s.n == 0 && s.e == NULL);
    p = write_file(t, "dup", "a x\nb y\na z\n");
    CHECK_EQ_INT(scp_load(p, 1, &s, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "duplicate") && strstr(err.msg, ":3:") && strstr(err.msg, "line 1"),
           "%s", err.msg);
    CHECK_EQ_INT(scp_load("/nonexistent/wav.scp", 1, &s, &err), HARK_ERR_IO);
    CHECKF(strstr(err.msg, "/nonexistent/wav.scp") != NULL, "%s", err.msg);
    p = write_file(t, "empty", "");
    CHECK_OK(scp_load(p, 1, &s, &err));
    CHECK(s.n == 0 && scp_find(&s, "a") == NULL);
    scp_free(&s);
}

/* a small BPE unit list: ▁HE LLO ▁WORLD ▁ X <unk> */
static units_t *bpe_units(test_ctx_t *t)
{
    const char *p = write_file(t, "units.txt",
                               "<blank> 0\n<unk> 1\n\xe2\x96\x81HE 2\nLLO 3\n\xe2\x96\x81WORLD 4\n"
                               "\xe2\x96\x81 5\nX 6\n<sos/eos> 7\n");
    units_t *u = NULL;
    if (units_load(p, &u, NULL))
        return NULL;
    return u;
}

TEST(words_from_bpe_tokens_and_srt)
{
    units_t *u = bpe_units(t);
    CHECK(u != NULL);
    CHECK_EQ_INT(units_guess_style(u), UNITS_STYLE_BPE);
    /* ▁HE LLO | ▁WORLD | ▁ X  at frames 1 2 | 5 | 20 21, 40 ms a frame */
    int tok[] = {2, 3, 4, 5, 6}, tim[] = {1, 2, 5, 20, 21};
    word_time_t *w = NULL;
    int nw = 0;
    CHECK_OK(words_from_tokens(u, UNITS_STYLE_BPE, tok, tim, 5, 40, &w, &nw, NULL));
    CHECK_EQ_INT(nw, 3);
    CHECK(!strcmp(w[0].text, "HELLO") && w[0].start_ms == 40 && w[0].end_ms == 120);
    CHECK(!strcmp(w[1].text, "WORLD") && w[1].start_ms == 200 && w[1].end_ms == 240);
    CHECK(!strcmp(w[2].text, "X") && w[2].start_ms == 800 && w[2].end_ms == 880);
    /* the 560 ms pause before X starts a second cue; the first holds until 740 ms (its end +
     * 500 ms, before X starts); the last until the end of the audio (1000 ms) */
    cue_t cues[3];
    CHECK_EQ_INT(cues_build(w, nw, NULL, 1000, cues), 2);
    CHECK(cues[0].first == 0 && cues[0].count == 2 && cues[0].start_ms == 40 &&
          cues[0].end_ms == 740);
    CHECK(cues[1].first == 2 && cues[1].count == 1 && cues[1].start_ms == 800 &&
          cues[1].end_ms == 1000);
    /* at most two words a cue, no hold */
    cue_opts_t o = {.max_words = 2, .pause_ms = 10000, .hold_ms = -1};
    CHECK_EQ_INT(cues_build(w, nw, &o, 0, cues), 2);
    CHECK(cues[0].count == 2 && cues[0].end_ms == 240 && cues[1].end_ms == 880);
    char path[512];
    snprintf(path, sizeof path, "%s/out.srt", test_tmpdir(t));
    FILE *f = fopen(path, "w+");
    CHECK(f != NULL);
    CHECK_OK(subtitle_write(f, SUBTITLE_SRT, w, nw, UNITS_STYLE_BPE, NULL, 3723004, NULL));
    rewind(f);
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    CHECKF(!strcmp(buf, "1\n00:00:00,040 --> 00:00:00,740\nHELLO WORLD\n\n"
                        "2\n00:00:00,800 --> 00:00:01,380\nX\n\n"),
           "%s", buf);
    words_free(w, nw);
    /* tokens with no text at all give no word; a bad id is an error */
    int lone[] = {5}, bad[] = {2, 99}, t0[] = {0, 1};
    CHECK_OK(words_from_tokens(u, UNITS_STYLE_BPE, lone, t0, 1, 40, &w, &nw, NULL));
    CHECK(nw == 0 && w == NULL);
    CHECK_EQ_INT(words_from_tokens(u, UNITS_STYLE_BPE, bad, t0, 2, 40, &w, &nw, NULL),
                 HARK_ERR_INVALID_ARG);
    CHECK_OK(words_from_tokens(u, UNITS_STYLE_BPE, NULL, NULL, 0, 40, &w, &nw, NULL));
    CHECK(nw == 0 && w == NULL);
    units_destroy(u);
}

TEST(words_char_units_and_vtt)
{
    const char *p = write_file(t, "cunits.txt",
                               "<blank> 0\n<unk> 1\n\xe4\xbd\xa0 2\n\xe5\xa5\xbd 3\n<sos/eos> 4\n");
    units_t *u = NULL;
    CHECK_OK(units_load(p, &u, NULL));
    CHECK_EQ_INT(units_guess_style(u), UNITS_STYLE_CHAR);
    int tok[] = {2, 3, 1}, tim[] = {0, 3, 4};
    word_time_t *w = NULL;
    int nw = 0;
    CHECK_OK(words_from_tokens(u, UNITS_STYLE_CHAR, tok, tim, 3, 60, &w, &nw, NULL));
    CHECK_EQ_INT(nw, 3); /* every character its own word */
    CHECK(!strcmp(w[2].text, "<unk>") && w[2].start_ms == 240 && w[2].end_ms == 300);
    char path[512];
    snprintf(path, sizeof path, "%s/out.vtt", test_tmpdir(t));
    FILE *f = fopen(path, "w+");
    CHECK(f != NULL);
    CHECK_OK(subtitle_write(f, SUBTITLE_VTT, w, nw, UNITS_STYLE_CHAR, NULL, 0, NULL));
    rewind(f);
    char buf[512] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* joined without spaces; "<unk>" escaped; 3723.004 s would print as 01:02:03.004 */
    CHECKF(!strcmp(buf, "WEBVTT\n\n00:00:00.000 --> 00:00:00.800\n"
                        "\xe4\xbd\xa0\xe5\xa5\xbd&lt;unk&gt;\n\n"),
           "%s", buf);
    /* hours, minutes, seconds and milliseconds in the time stamps */
    word_time_t late = {"LATE", 3723004, 3723104};
    f = fopen(path, "w+");
    CHECK(f != NULL);
    cue_opts_t o = {.hold_ms = -1};
    CHECK_OK(subtitle_write(f, SUBTITLE_SRT, &late, 1, UNITS_STYLE_BPE, &o, 0, NULL));
    rewind(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    CHECKF(!strcmp(buf, "1\n01:02:03,004 --> 01:02:03,104\nLATE\n\n"), "%s", buf);
    words_free(w, nw);
    units_destroy(u);
}
