/* gpu.h — CUDA device discovery and error conversion; compiles to stubs without CUDA.
 * Tests: tests/gpu/ (GPU-only). */
#ifndef HARK_GPU_GPU_H
#define HARK_GPU_GPU_H

/* Number of usable CUDA devices; 0 without CUDA, without a driver or without a device. */
int gpu_device_count(void);

#endif
