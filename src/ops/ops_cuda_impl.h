/* ops_cuda_impl.h — the GEMM context shared by ops_cuda.cu (cuBLAS) and gemm_f16.cu (the mma.sync
 * kernels and their cuBLASLt alternative). Internal to src/ops; C++ only. */
#ifndef HARK_OPS_OPS_CUDA_IMPL_H
#define HARK_OPS_OPS_CUDA_IMPL_H

#include "ops/ops_cuda.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define LT_PLANS 64 /* prepared cuBLASLt matmuls per context */

/* one prepared cuBLASLt matmul: descriptors and the heuristic's algorithm for a shape */
struct lt_plan {
    unsigned long long used; /* 0: free */
    int m, n, k, mode, act, has_bias, ok;
    long long lda, ldo;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

struct ops_cuda {
    cublasHandle_t h;
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace; /* shared by cuBLAS and cuBLASLt: both run in order on `stream` */
    int backend;     /* ops_gemm_backend_t */
    int last;        /* the backend the last cuda_hgemm ran on */
    int sm;          /* compute capability of the stream's device, major · 10 + minor */
    unsigned long long tick;
    struct lt_plan plans[LT_PLANS];
};

#define OPS_WORKSPACE_BYTES ((size_t)32 << 20)

#endif
