/* gpu.c — CUDA device discovery and each device's GPU path (gpu.h). Without HARK_CUDA every query
 * reports "no device". Tests: tests/gpu/test_gpu_arch.c */
#include "gpu/gpu.h"

#include "core/log.h"
#include "hark.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HARK_CUDA
#include <cuda_runtime_api.h>

int gpu_probe_current(int *binary_version, int *ptx_version); /* gpu_archs.cu */

int gpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int gpu_device_cc(int dev, char *name, size_t n)
{
    if (name && n)
        name[0] = 0;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (name && n) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
            snprintf(name, n, "%s", p.name);
        cudaGetLastError();
    }
    return major * 10 + minor;
}

#define MAX_DEV 64
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int known, logged;
    gpu_path_t path;
    hark_err_t why; /* the reason alone, when path is NONE */
    char name[128];
} dev_path[MAX_DEV];

static gpu_path_t decide(int dev, hark_err_t *why)
{
    int cc = gpu_device_cc(dev, NULL, 0);
    gpu_path_t p;
    if (gpu_path_choose(cc, getenv("HARK_GPU_ARCH"), gpu_compiled_archs(), &p, why) != HARK_OK)
        return GPU_PATH_NONE;
    /* the driver must find code for it too (a driver older than this CUDA's PTX, say) */
    int cur = -1, bin = 0, ptx = 0;
    cudaGetDevice(&cur);
    int e = cudaSetDevice(dev) == cudaSuccess ? gpu_probe_current(&bin, &ptx)
                                              : (int)cudaErrorInvalidDevice;
    if (cur >= 0 && cur != dev)
        cudaSetDevice(cur);
    cudaGetLastError();
    if (e) {
        err_set(why, HARK_ERR_UNSUPPORTED, "the driver finds no code for it in this binary: %s",
                cudaGetErrorString((cudaError_t)e));
        return GPU_PATH_NONE;
    }
    return p;
}

/* full: *err names the device ("GPU 0 (Tesla T4) cannot be used: <reason>"), else the reason */
static gpu_path_t lookup(int dev, int log, int full, hark_err_t *err)
{
    int n = gpu_device_count();
    if (dev < 0 || dev >= n || dev >= MAX_DEV) {
        err_set(err, HARK_ERR_NO_DEVICE, "cuda:%d: no such CUDA device (%d present)", dev, n);
        return GPU_PATH_NONE;
    }
    pthread_mutex_lock(&path_lock);
    if (!dev_path[dev].known) {
        dev_path[dev].why.status = 0;
        dev_path[dev].why.msg[0] = 0;
        gpu_device_cc(dev, dev_path[dev].name, sizeof dev_path[dev].name);
        dev_path[dev].path = decide(dev, &dev_path[dev].why);
        if (dev_path[dev].path == GPU_PATH_NONE && !dev_path[dev].why.status)
            dev_path[dev].why.status = HARK_ERR_UNSUPPORTED;
        dev_path[dev].known = 1;
    }
    gpu_path_t p = dev_path[dev].path;
    if (p == GPU_PATH_NONE) {
        hark_err_t full_err;
        err_set(&full_err, dev_path[dev].why.status, "GPU %d (%s) cannot be used: %s", dev,
                dev_path[dev].name[0] ? dev_path[dev].name : "?", dev_path[dev].why.msg);
        if (log && !dev_path[dev].logged) {
            dev_path[dev].logged = 1;
            LOG_WARN("%s", full_err.msg);
        }
        if (err)
            *err = full ? full_err : dev_path[dev].why;
    }
    pthread_mutex_unlock(&path_lock);
    return p;
}

gpu_path_t gpu_device_path(int dev, hark_err_t *err)
{
    return lookup(dev, 1, 1, err);
}

gpu_path_t gpu_device_path_quiet(int dev, hark_err_t *err)
{
    return lookup(dev, 0, 0, err);
}

int gpu_usable_count(void)
{
    int n = gpu_device_count(), k = 0;
    for (int d = 0; d < n; d++)
        k += gpu_device_path(d, NULL) != GPU_PATH_NONE;
    return k;
}
#else
int gpu_device_count(void)
{
    return 0;
}

const char *gpu_compiled_archs(void)
{
    return "";
}

int gpu_device_cc(int dev, char *name, size_t n)
{
    if (name && n)
        name[0] = 0;
    return 0;
}

gpu_path_t gpu_device_path(int dev, hark_err_t *err)
{
    err_set(err, HARK_ERR_NO_DEVICE, "hark was built without CUDA");
    return GPU_PATH_NONE;
}

gpu_path_t gpu_device_path_quiet(int dev, hark_err_t *err)
{
    return gpu_device_path(dev, err);
}

int gpu_usable_count(void)
{
    return 0;
}
#endif

void gpu_print_report(FILE *f)
{
    char list[256];
    const char *archs = gpu_compiled_archs();
    if (!archs[0]) {
        fprintf(f, "cuda: not built (CPU only)\n");
        return;
    }
    gpu_archs_describe(archs, list, sizeof list);
    const char *force = getenv("HARK_GPU_ARCH");
    fprintf(f, "cuda: code for %s%s%s%s\n", list, force && *force ? " (HARK_GPU_ARCH=" : "",
            force && *force ? force : "", force && *force ? ")" : "");
    int n = gpu_device_count();
    if (n == 0)
        fprintf(f, "gpu: none (no CUDA device or driver): CPU only\n");
    for (int d = 0; d < n; d++) {
        char name[256];
        int cc = gpu_device_cc(d, name, sizeof name);
        hark_err_t why = {0};
        gpu_path_t p = gpu_device_path_quiet(d, &why);
        if (p != GPU_PATH_NONE)
            fprintf(f, "gpu %d: %s (sm_%d): %s path\n", d, name, cc, gpu_path_name(p));
        else
            fprintf(f, "gpu %d: %s (sm_%d): not used: %s\n", d, name, cc, why.msg);
    }
}
