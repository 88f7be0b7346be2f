/* ctc_endpoint.c — WeNet's CTC endpoint rules (ctc_endpoint.h). */
#include "search/ctc_endpoint.h"

#include <math.h>

void ctc_endpoint_default(ctc_endpoint_config_t *c, int blank)
{
    *c = (ctc_endpoint_config_t){.blank = blank,
                                 .blank_threshold = 0.8f,
                                 .rule = {{0, 5000, 0}, {1, 1000, 0}, {0, 0, 20000}}};
}

void ctc_endpoint_reset(ctc_endpoint_t *e)
{
    e->frames = 0;
    e->trailing_blank = 0;
}

int ctc_endpoint_detect(ctc_endpoint_t *e, const ctc_endpoint_config_t *c, const float *logp,
                        int rows, int V, int frame_ms, int decoded_something)
{
    return ctc_endpoint_detect_blank(e, c, logp + c->blank, V, rows, frame_ms, decoded_something);
}

int ctc_endpoint_detect_blank(ctc_endpoint_t *e, const ctc_endpoint_config_t *c,
                              const float *blank_lp, long stride, int rows, int frame_ms,
                              int decoded_something)
{
    for (int t = 0; t < rows; t++) {
        e->frames++;
        if (expf(blank_lp[(long)t * stride]) > c->blank_threshold)
            e->trailing_blank++;
        else
            e->trailing_blank = 0;
    }
    return endpoint_rules_check(c->rule, (long)e->frames * frame_ms,
                                (long)e->trailing_blank * frame_ms, decoded_something);
}

int endpoint_rules_check(const ctc_endpoint_rule_t rule[CTC_ENDPOINT_RULES], long length_ms,
                         long silence_ms, int decoded_something)
{
    for (int i = 0; i < CTC_ENDPOINT_RULES; i++) {
        const ctc_endpoint_rule_t *r = &rule[i];
        if ((decoded_something || !r->must_decode) && silence_ms >= r->min_trailing_silence &&
            length_ms >= r->min_utterance_length)
            return i + 1;
    }
    return 0;
}

void endpoint_rules_transducer_default(ctc_endpoint_rule_t rule[CTC_ENDPOINT_RULES])
{
    rule[0] = (ctc_endpoint_rule_t){0, 2400, 0};
    rule[1] = (ctc_endpoint_rule_t){1, 1200, 0};
    rule[2] = (ctc_endpoint_rule_t){0, 0, 20000};
}
