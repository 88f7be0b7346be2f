/* Tests for the GPU CTC argmax (cuda_ctc_log_softmax_argmax, ops/ops_cuda.h) against
 * ctc_argmax_ref on awkward sizes, with exact ties, NaN and -inf rows. */
#include "test.h"

#include "search/ctc_gpu.h"

#include <stdlib.h>
#include <string.h>

TEST(ctc_argmax_ref_ties_and_nan)
{
    float x[2][4] = {{1, 3, 3, 2}, {NAN, -INFINITY, 5, NAN}};
    int out[2];
    ctc_argmax_ref(out, &x[0][0], 2, 4);
    CHECK(out[0] == 1 && out[1] == 2);
}

#ifdef HARK_CUDA
#include "ops/ops_cuda.h"

#include <cuda_runtime_api.h>
GPU_TEST(gpu_ctc_argmax_matches_ref)
{
    static const int shapes[][2] = {{1, 1}, {7, 33}, {257, 5002}, {1000, 31}, {3, 4097}};
    unsigned seed = 5;
    for (int s = 0; s < 5; s++) {
        int rows = shapes[s][0], V = shapes[s][1];
        float *x = malloc(sizeof(float) * (size_t)rows * V);
        for (size_t i = 0; i < (size_t)rows * V; i++)
            x[i] = (float)(test_rand(&seed) % 97); /* many exact ties */
        if (rows > 2) {
            x[V] = NAN; /* a NaN at the start of row 1 */
            for (int k = 0; k < V; k++)
                x[2 * (size_t)V + k] = -INFINITY;
        }
        int *ref = malloc(sizeof(int) * rows), *got = malloc(sizeof(int) * rows), *d_out;
        float *d_x;
        ctc_argmax_ref(ref, x, rows, V);
        CHECK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)rows * V) == cudaSuccess);
        CHECK(cudaMalloc((void **)&d_out, sizeof(int) * rows) == cudaSuccess);
        CHECK(cudaMemcpy(d_x, x, sizeof(float) * (size_t)rows * V, cudaMemcpyHostToDevice) ==
              cudaSuccess);
        CHECK(cudaMemset(d_out, 0xff, sizeof(int) * rows) == cudaSuccess);
        hark_err_t e = {0};
        CHECK_OK(
            cuda_ctc_log_softmax_argmax(d_out, NULL, NULL, d_x, V, NULL, 0, rows, V, NULL, &e));
        CHECK(cudaMemcpy(got, d_out, sizeof(int) * rows, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int r = 0; r < rows; r++)
            CHECKF(got[r] == ref[r], "rows %d V %d: row %d gpu %d ref %d", rows, V, r, got[r],
                   ref[r]);
        cudaFree(d_x);
        cudaFree(d_out);
        free(x);
        free(ref);
        free(got);
    }
}
#endif
