/* synth_weights.h — generated (random but deterministic) weights for the model builders, so a
 * configuration can be benchmarked or tested without a checkpoint: a conformer_tensor_fn that
 * makes each tensor on demand, seeded by its name (asking twice gives the same values).
 * Used by `hark bench --synthetic` and the model tests. Tests: tests/model/wenet/test_conformer.c
 */
#ifndef HARK_MODEL_SYNTH_WEIGHTS_H
#define HARK_MODEL_SYNTH_WEIGHTS_H

#include "core/error.h"

#include <stdint.h>

typedef struct {
    unsigned seed;       /* set by the caller */
    const char *missing; /* optional: a tensor name to refuse (error-path tests) */
    float **bufs;        /* owned tensors, released by synth_weights_free */
    int n, cap;
} synth_weights_t;

/* conformer_tensor_fn: user = synth_weights_t. Matrices ~ uniform with std 1/sqrt(fan_in),
 * norm weights near 1, running variances / CMVN istd in [0.75, 1.25], other vectors small. */
int synth_weights_get(void *user, const char *name, int ndim, const int64_t *shape,
                      const float **data, hark_err_t *err);
void synth_weights_free(synth_weights_t *w); /* keeps the seed; the struct can be reused */

#endif
