/* gpu.c — CUDA device discovery.  Without HARK_CUDA every query reports "no device". */
#include "gpu/gpu.h"

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>

int gpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}
#else
int gpu_device_count(void)
{
    return 0;
}
#endif
