/* metrics.h — Prometheus text exposition of hark's metrics: Triton's names where they exist
 * (nv_inference_*, nv_gpu_utilization, nv_gpu_memory_used_bytes) plus speech ones (audio seconds,
 * real-time factor, batch-size histogram, padding fraction). GPU figures come from NVML, loaded
 * at run time when the driver provides it (absent: those lines are left out).
 * Tests: tests/api/test_metrics.c */
#ifndef HARK_SERVER_METRICS_H
#define HARK_SERVER_METRICS_H

#include "sched/instance.h"

#include <stddef.h>

typedef struct {
    const char *name;    /* model name */
    const char *version; /* "1" */
    served_stats_t stats;
} metrics_model_t;

/* Renders the exposition into a hark_malloc'ed NUL-terminated string (*out, *len). */
int metrics_render(const metrics_model_t *models, int n, char **out, size_t *len);

#endif
