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
