/* Tests for src/search/ctc_endpoint.c: WeNet's three CTC endpoint rules on synthetic log-probs
 * (frames of blank probability 0.9 = silence, 0.5 = speech), at 40 ms a frame. */
#include "test.h"

#include "search/ctc_endpoint.h"

#include <math.h>

enum { V = 3, BLANK = 0, MS = 40 };

/* rows of log-probs: blank probability pb, the rest on token 1 */
static void rows(float *lp, int n, float pb)
{
    for (int t = 0; t < n; t++) {
        lp[t * V + BLANK] = logf(pb);
        lp[t * V + 1] = logf(1 - pb);
        lp[t * V + 2] = -1e30f;
    }
}

TEST(ctc_endpoint_rules)
{
    ctc_endpoint_config_t c;
    ctc_endpoint_default(&c, BLANK);
    CHECK(c.blank_threshold == 0.8f && c.rule[0].min_trailing_silence == 5000 &&
          c.rule[1].must_decode && c.rule[1].min_trailing_silence == 1000 &&
          c.rule[2].min_utterance_length == 20000);
    float sil[25 * V], sp[25 * V];
    rows(sil, 25, 0.9f);
    rows(sp, 25, 0.5f);
    ctc_endpoint_t e;
    /* rule 2: 1000 ms of silence after speech = 25 frames; 24 are not enough */
    ctc_endpoint_reset(&e);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 10, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 24, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 1, V, MS, 1), 2);
    /* the same silence with nothing decoded: only rule 1, at 5000 ms (125 frames) */
    ctc_endpoint_reset(&e);
    for (int k = 0; k < 4; k++)
        CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 25, V, MS, 0), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 24, V, MS, 0), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 1, V, MS, 0), 1);
    /* the blank's column alone (strided, or packed as the GPU's top-k step gives it) */
    float col[25];
    for (int i = 0; i < 25; i++)
        col[i] = sil[i * V + BLANK];
    ctc_endpoint_reset(&e);
    CHECK_EQ_INT(ctc_endpoint_detect_blank(&e, &c, sp + BLANK, V, 10, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect_blank(&e, &c, col, 1, 24, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect_blank(&e, &c, col, 1, 1, MS, 1), 2);
    /* speech resets the trailing silence */
    ctc_endpoint_reset(&e);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 20, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 1, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sil, 24, V, MS, 1), 0);
    CHECK_EQ_INT(e.trailing_blank, 24);
    /* rule 3: 20000 ms of speech (500 frames) whatever else */
    ctc_endpoint_reset(&e);
    for (int k = 0; k < 19; k++)
        CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 25, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 24, V, MS, 1), 0);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 1, V, MS, 1), 3);
    /* the threshold is strict: a blank probability of exactly it is speech */
    c.blank_threshold = 0.5f;
    ctc_endpoint_reset(&e);
    CHECK_EQ_INT(ctc_endpoint_detect(&e, &c, sp, 25, V, MS, 1), 0);
    CHECK_EQ_INT(e.trailing_blank, 0);
}

/* The rules alone (endpoint_rules_check) with sherpa-onnx's transducer defaults, as an icefall
 * stream counts them: 40 ms encoder frames, silence = trailing frames without a token. */
TEST(endpoint_rules_transducer)
{
    ctc_endpoint_rule_t r[CTC_ENDPOINT_RULES];
    endpoint_rules_transducer_default(r);
    CHECK(!r[0].must_decode && r[0].min_trailing_silence == 2400 && r[1].must_decode &&
          r[1].min_trailing_silence == 1200 && r[2].min_utterance_length == 20000);
    /* rule 1: 2400 ms = 60 frames of silence, nothing decoded; 59 are not enough */
    CHECK_EQ_INT(endpoint_rules_check(r, 59L * MS, 59L * MS, 0), 0);
    CHECK_EQ_INT(endpoint_rules_check(r, 60L * MS, 60L * MS, 0), 1);
    /* rule 2: 1200 ms = 30 frames after a token; with nothing decoded it does not hold */
    CHECK_EQ_INT(endpoint_rules_check(r, 100L * MS, 29L * MS, 1), 0);
    CHECK_EQ_INT(endpoint_rules_check(r, 100L * MS, 30L * MS, 1), 2);
    CHECK_EQ_INT(endpoint_rules_check(r, 100L * MS, 30L * MS, 0), 0);
    /* rule 1 wins over rule 2 when both hold */
    CHECK_EQ_INT(endpoint_rules_check(r, 100L * MS, 60L * MS, 1), 1);
    /* rule 3: 500 frames whatever else */
    CHECK_EQ_INT(endpoint_rules_check(r, 499L * MS, 0, 1), 0);
    CHECK_EQ_INT(endpoint_rules_check(r, 500L * MS, 0, 1), 3);
    CHECK_EQ_INT(endpoint_rules_check(r, 500L * MS, 0, 0), 3);
}
