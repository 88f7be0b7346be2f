/* Tests for the GPU CTC argmax (cuda_ctc_log_softmax_argmax, ops/ops_cuda.h) against
 * ctc_argmax_ref on awkward sizes, with exact ties, NaN and -inf rows. */
#include "test.h"

#include "hark.h"
#include "search/ctc.h"
#include "search/ctc_gpu.h"

#include <math.h>
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

/* each row's top k on the GPU against ctc_row_topk (the order the prefix beam search takes):
 * awkward widths, k from 1 to 32, many exact ties (small integers), rows of -inf, the blank's
 * column */
GPU_TEST(gpu_ctc_topk_matches_ref)
{
    static const int shapes[][3] = {{1, 1, 1},   {7, 33, 5},    {300, 5002, 10}, {37, 4097, 32},
                                    {9, 29, 29}, {100, 257, 1}, {64, 5002, 32}};
    unsigned seed = 77;
    for (int s = 0; s < 7; s++) {
        int rows = shapes[s][0], V = shapes[s][1], k = shapes[s][2], blank = V / 3;
        float *x = malloc(sizeof(float) * (size_t)rows * V),
              *val = malloc(sizeof(float) * rows * k), *rv = malloc(sizeof(float) * k),
              *bl = malloc(sizeof(float) * rows);
        int *idx = malloc(sizeof(int) * (size_t)rows * k), *ri = malloc(sizeof(int) * k);
        for (size_t i = 0; i < (size_t)rows * V; i++)
            x[i] = -(float)(test_rand(&seed) % 23); /* many exact ties */
        if (rows > 2)
            for (int j = 0; j < V; j++)
                x[2 * (size_t)V + j] = -INFINITY;
        float *d_x;
        int *d_idx;
        float *d_val, *d_bl;
        CHECK(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)rows * V) == cudaSuccess);
        CHECK(cudaMalloc((void **)&d_idx, sizeof(int) * (size_t)rows * k) == cudaSuccess);
        CHECK(cudaMalloc((void **)&d_val, sizeof(float) * (size_t)rows * k) == cudaSuccess);
        CHECK(cudaMalloc((void **)&d_bl, sizeof(float) * rows) == cudaSuccess);
        CHECK(cudaMemcpy(d_x, x, sizeof(float) * (size_t)rows * V, cudaMemcpyHostToDevice) ==
              cudaSuccess);
        hark_err_t e = {0};
        CHECK_OK(cuda_ctc_topk(d_idx, d_val, d_bl, d_x, rows, V, k, blank, NULL, &e));
        CHECK(cudaMemcpy(idx, d_idx, sizeof(int) * (size_t)rows * k, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
        CHECK(cudaMemcpy(val, d_val, sizeof(float) * (size_t)rows * k, cudaMemcpyDeviceToHost) ==
              cudaSuccess);
        CHECK(cudaMemcpy(bl, d_bl, sizeof(float) * rows, cudaMemcpyDeviceToHost) == cudaSuccess);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            ctc_row_topk(x + (size_t)r * V, V, k, ri, rv);
            for (int j = 0; j < k; j++)
                bad += idx[(size_t)r * k + j] != ri[j] ||
                       memcmp(&val[(size_t)r * k + j], &rv[j], sizeof(float)) != 0;
            bad += memcmp(&bl[r], &x[(size_t)r * V + blank], sizeof(float)) != 0;
        }
        CHECKF(bad == 0, "rows %d V %d k %d: %d entries differ from ctc_row_topk", rows, V, k, bad);
        CHECK_EQ_INT(cuda_ctc_topk(d_idx, d_val, NULL, d_x, rows, V, 33, 0, NULL, &e),
                     HARK_ERR_INVALID_ARG);
        cudaFree(d_x), cudaFree(d_idx), cudaFree(d_val), cudaFree(d_bl);
        free(x), free(val), free(rv), free(bl), free(idx), free(ri);
    }
}
#endif
