/* ctc_argmax_ref.c — CPU reference of the per-frame CTC argmax (cuda_ctc_log_softmax_argmax).
 * Tests: tests/search/test_ctc_gpu.c */
#include "search/ctc_gpu.h"

#include <math.h>
#include <stddef.h>

void ctc_argmax_ref(int *out, const float *x, int rows, int V)
{
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * V;
        int bi = 0;
        float bv = -INFINITY;
        int have = 0;
        for (int k = 0; k < V; k++) {
            if (row[k] != row[k])
                continue;
            if (!have || row[k] > bv) {
                bv = row[k];
                bi = k;
                have = 1;
            }
        }
        out[r] = bi;
    }
}
