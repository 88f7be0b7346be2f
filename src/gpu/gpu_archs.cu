/* gpu_archs.cu — what this build's CUDA objects hold: the architecture list the Makefile compiled
 * them for (CUDA_ARCHS, CUDA_PTX) and a probe that the driver finds code for a device.
 * Used by gpu.c; tests: tests/gpu/test_gpu_arch.c. */
#include <cuda_runtime.h>

#ifndef HARK_CUDA_ARCH_LIST /* set by the Makefile for this file: "sm_80+...+compute_90" */
#error "HARK_CUDA_ARCH_LIST is not defined: build with the Makefile (CUDA_ARCHS=...)"
#endif
#define ARCH_STR_(...) #__VA_ARGS__
#define ARCH_STR(...) ARCH_STR_(__VA_ARGS__)

extern "C" const char *gpu_compiled_archs(void)
{
    return ARCH_STR(HARK_CUDA_ARCH_LIST);
}

__global__ void gpu_probe_kernel(int *out)
{
    if (out)
        *out = 1;
}

/* whether the driver has code for the current device in this binary: cudaSuccess with the
 * version of the image it picked (binary: major · 10 + minor of the cubin, or of the PTX JIT) */
extern "C" int gpu_probe_current(int *binary_version, int *ptx_version)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, gpu_probe_kernel);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return (int)e;
    }
    *binary_version = a.binaryVersion;
    *ptx_version = a.ptxVersion;
    return 0;
}
