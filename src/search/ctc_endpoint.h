/* ctc_endpoint.h — WeNet's CTC endpoint rules for streams: a frame whose blank probability
 * exceeds blank_threshold is silence; an endpoint is detected when any rule holds for the
 * trailing silence and the utterance length so far (in ms of encoder frames), a rule that
 * needs speech only once the search has decoded something. WeNet's defaults (runtime
 * decoder/ctc_endpoint.h): rule 1, 5000 ms of silence even with nothing decoded; rule 2, 1000 ms
 * of silence after speech; rule 3, an utterance of 20000 ms whatever else. The rules themselves
 * (endpoint_rules_check) serve the transducer streams too (icefall_stream.c), whose silence is
 * the frames on which the search emitted nothing (sherpa-onnx's rules, with its defaults
 * endpoint_rules_transducer_default).
 * Pure host code. Tests: tests/search/test_ctc_endpoint.c */
#ifndef HARK_SEARCH_CTC_ENDPOINT_H
#define HARK_SEARCH_CTC_ENDPOINT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctc_endpoint_rule {
    int must_decode;          /* holds only after something was decoded */
    int min_trailing_silence; /* ms */
    int min_utterance_length; /* ms */
} ctc_endpoint_rule_t;

enum { CTC_ENDPOINT_RULES = 3 };

typedef struct {
    int blank;
    float blank_threshold; /* a frame is silence when exp(logp[blank]) > this */
    ctc_endpoint_rule_t rule[CTC_ENDPOINT_RULES];
} ctc_endpoint_config_t;

/* The rules alone: the number (1 ..) of the first rule that holds for a segment of length_ms
 * whose last silence_ms were silence (decoded_something: the search has output a token in it),
 * or 0. A rule holds when its must_decode is met and both its times are reached. */
int endpoint_rules_check(const ctc_endpoint_rule_t rule[CTC_ENDPOINT_RULES], long length_ms,
                         long silence_ms, int decoded_something);

/* sherpa-onnx's transducer defaults (endpoint.h): rule 1, 2400 ms of silence with nothing
 * decoded; rule 2, 1200 ms of silence after speech; rule 3, 20000 ms. */
void endpoint_rules_transducer_default(ctc_endpoint_rule_t rule[CTC_ENDPOINT_RULES]);

/* WeNet's defaults for a model whose blank is `blank`. */
void ctc_endpoint_default(ctc_endpoint_config_t *c, int blank);

/* The state of one stream's detector: zero it (or ctc_endpoint_reset) at the stream's start and
 * after each endpoint. */
typedef struct {
    int frames;         /* encoder frames seen */
    int trailing_blank; /* of which the last ones that were silence */
} ctc_endpoint_t;

void ctc_endpoint_reset(ctc_endpoint_t *e);

/* Takes the next rows (rows, V) of a stream's CTC log-probs; frame_ms: the encoder frame shift.
 * Returns the number (1 ..) of the first rule that holds, or 0. */
int ctc_endpoint_detect(ctc_endpoint_t *e, const ctc_endpoint_config_t *c, const float *logp,
                        int rows, int V, int frame_ms, int decoded_something);
/* The same from the blank's log-probs alone: blank_lp[t · stride] for the rows' t (the rules read
 * nothing else of a frame). */
int ctc_endpoint_detect_blank(ctc_endpoint_t *e, const ctc_endpoint_config_t *c,
                              const float *blank_lp, long stride, int rows, int frame_ms,
                              int decoded_something);

#ifdef __cplusplus
}
#endif
#endif
