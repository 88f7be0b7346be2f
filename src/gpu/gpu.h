/* gpu.h — CUDA device discovery and the GPU path each device takes (issue 24); compiles to stubs
 * without CUDA. Tests: tests/gpu/ (the path policy on the CPU, gpu_arch.h; the rest GPU-only). */
#ifndef HARK_GPU_GPU_H
#define HARK_GPU_GPU_H

#include "core/error.h"
#include "gpu/gpu_arch.h"

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the driver shows; 0 without CUDA, without a driver or without a
 * device. Some may be unusable by hark: gpu_device_path says which. */
int gpu_device_count(void);

/* The architectures this build holds code for, "sm_80+sm_86+sm_89+sm_90a+compute_90" (the
 * Makefile's CUDA_ARCHS and CUDA_PTX); "" without CUDA. */
const char *gpu_compiled_archs(void);

/* Device dev's compute capability (major · 10 + minor), its name into name[n] when name is not
 * NULL; 0 (name "") when it cannot be read. */
int gpu_device_cc(int dev, char *name, size_t n);

/* The path device dev takes: gpu_path_choose on its compute capability, HARK_GPU_ARCH and this
 * build, then a check that the driver finds code for it in this binary. Decided once per device
 * and process (thread-safe); the first call for an unusable device logs why, once, at WARN.
 * GPU_PATH_NONE with the reason in *err (may be NULL) when hark cannot use the device. */
gpu_path_t gpu_device_path(int dev, hark_err_t *err);
/* the same decision, never logged, *err holding the reason alone (hark --version prints it
 * after the device's name) */
gpu_path_t gpu_device_path_quiet(int dev, hark_err_t *err);

/* Number of devices with a path (gpu_device_path != NONE). */
int gpu_usable_count(void);

/* `hark --version`'s GPU lines: the architectures of this build, then per visible device its
 * name, compute capability and path (or why it is not used); "none" without a device or driver,
 * "not built" without CUDA. Never fails. */
void gpu_print_report(FILE *f);

#ifdef __cplusplus
}
#endif

#endif
