/* gpu_arch.h — which GPU code path a device takes (issue 24): a pure policy over the device's
 * compute capability, HARK_GPU_ARCH and the architectures this build holds code for.
 * Tests: tests/gpu/test_gpu_arch.c (CPU). The device queries around it live in gpu.c. */
#ifndef HARK_GPU_GPU_ARCH_H
#define HARK_GPU_GPU_ARCH_H

#include "core/error.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The code paths of the CUDA ops (ops_cuda_t decides once, at ops_cuda_create):
 * HOPPER: sm_90 with the sm_90a code present: wgmma GEMMs, the fused wgmma FFN, and everything
 *         AMPERE has (cuBLASLt, the mma.sync kernels where they win).
 * AMPERE: any sm_80+ device: mma.sync / cp.async kernels, cuBLAS / cuBLASLt; never wgmma.
 * NONE:   hark cannot use the device (too old, no code for it in this build, no device). */
typedef enum { GPU_PATH_NONE = 0, GPU_PATH_AMPERE = 1, GPU_PATH_HOPPER = 2 } gpu_path_t;

/* HARK_GPU_ARCH: unset, "" or "auto": the best path the device and the build allow; "sm80",
 * "sm_80" or "ampere": the Ampere path on any usable device; "sm90", "sm_90", "sm90a", "sm_90a"
 * or "hopper": the Hopper path, refused where it cannot run (case is ignored). */
typedef enum { GPU_FORCE_AUTO = 0, GPU_FORCE_AMPERE, GPU_FORCE_HOPPER } gpu_force_t;

#define GPU_MIN_CC 80 /* Ampere: mma.sync m16n8k16 with BF16, cp.async */

/* "hopper", "ampere" or "cpu" (NONE) */
const char *gpu_path_name(gpu_path_t p);

/* Parses a HARK_GPU_ARCH value (NULL = unset). HARK_ERR_INVALID_ARG names an unknown value. */
int gpu_force_parse(const char *s, gpu_force_t *out, hark_err_t *err);

/* Architecture lists are names separated by any of " +,": "sm_XY" (a cubin; "sm_XYa" for an
 * arch-specific one, "sm_XYf" a family one) and "compute_XY" (PTX), as the Makefile's
 * HARK_CUDA_ARCH_LIST gives them ("sm_80+sm_86+sm_89+sm_90a+compute_90").
 * gpu_archs_runs_on: whether the list holds code the driver can run on compute capability cc
 * (major · 10 + minor): a cubin sm_XY with X the same major and Y <= the minor (sm_XYa: exactly
 * cc), or PTX compute_XY with XY <= cc (compute_XYa: exactly cc). Names it cannot read are
 * ignored. */
int gpu_archs_runs_on(const char *archs, int cc);
/* whether the list holds Hopper's wgmma code for cc: sm_90a or compute_90a, cc == 90 */
int gpu_archs_hopper(const char *archs, int cc);

/* The policy. cc: the device's compute capability (0 = no device or no driver); force: the
 * HARK_GPU_ARCH value (NULL = unset); archs: the build's list (NULL or "" = built without CUDA).
 * HARK_OK with *out the path; otherwise *out = GPU_PATH_NONE and a status with one line saying
 * why, for a user to act on: HARK_ERR_NO_DEVICE (no device, or no CUDA in this build),
 * HARK_ERR_UNSUPPORTED (older than sm_80; no code for the device in this build; the Hopper path
 * forced where it cannot run), HARK_ERR_INVALID_ARG (a bad HARK_GPU_ARCH). */
int gpu_path_choose(int cc, const char *force, const char *archs, gpu_path_t *out, hark_err_t *err);

/* The build's list written for people: "sm_80 sm_86 sm_89 sm_90a, PTX compute_90" ("none"
 * without CUDA). */
void gpu_archs_describe(const char *archs, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
