/* metrics.c — Prometheus text exposition (format 0.0.4) of the served models' counters and, via
 * NVML loaded with dlopen, the GPUs' utilization and memory. Tests: tests/api/test_metrics.c */
#include "api/metrics.h"

#include "core/alloc.h"
#include "hark.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf_t;

static void put(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf_t *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t nc = b->cap * 2 + (size_t)(n > 0 ? n : 0);
        char *np = hark_realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

/* ---- NVML through dlopen (the driver's libnvidia-ml.so.1; nothing at build time) ------------ */
typedef struct {
    unsigned gpu, memory;
} nvml_util_t;
typedef struct {
    unsigned long long total, free, used;
} nvml_mem_t;
static struct {
    int tried, ok;
    int (*init)(void);
    int (*count)(unsigned *);
    int (*handle)(unsigned, void **);
    int (*util)(void *, nvml_util_t *);
    int (*mem)(void *, nvml_mem_t *);
    int (*uuid)(void *, char *, unsigned);
} nvml;
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;

static int nvml_load(void)
{
    pthread_mutex_lock(&nvml_lock);
    if (!nvml.tried) {
        nvml.tried = 1;
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            *(void **)&nvml.init = dlsym(h, "nvmlInit_v2");
            *(void **)&nvml.count = dlsym(h, "nvmlDeviceGetCount_v2");
            *(void **)&nvml.handle = dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
            *(void **)&nvml.util = dlsym(h, "nvmlDeviceGetUtilizationRates");
            *(void **)&nvml.mem = dlsym(h, "nvmlDeviceGetMemoryInfo");
            *(void **)&nvml.uuid = dlsym(h, "nvmlDeviceGetUUID");
            nvml.ok = nvml.init && nvml.count && nvml.handle && nvml.util && nvml.mem &&
                      nvml.uuid && nvml.init() == 0;
        }
    }
    int ok = nvml.ok;
    pthread_mutex_unlock(&nvml_lock);
    return ok;
}

static void gpu_metrics(sbuf_t *b)
{
    unsigned n = 0;
    if (!nvml_load() || nvml.count(&n) != 0 || n == 0)
        return;
    put(b, "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n"
           "# TYPE nv_gpu_utilization gauge\n");
    char uuid[8][96];
    for (unsigned i = 0; i < n && i < 8; i++) {
        void *h;
        nvml_util_t u;
        uuid[i][0] = 0;
        if (nvml.handle(i, &h) == 0 && nvml.uuid(h, uuid[i], sizeof uuid[i]) == 0 &&
            nvml.util(h, &u) == 0)
            put(b, "nv_gpu_utilization{gpu_uuid=\"%s\"} %.2f\n", uuid[i], u.gpu / 100.0);
    }
    put(b, "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n"
           "# TYPE nv_gpu_memory_used_bytes gauge\n");
    for (unsigned i = 0; i < n && i < 8; i++) {
        void *h;
        nvml_mem_t m;
        if (uuid[i][0] && nvml.handle(i, &h) == 0 && nvml.mem(h, &m) == 0)
            put(b, "nv_gpu_memory_used_bytes{gpu_uuid=\"%s\"} %llu\n", uuid[i], m.used);
    }
}

int metrics_render(const metrics_model_t *mm, int n, char **out, size_t *len)
{
    sbuf_t b = {.cap = 4096};
    b.p = hark_malloc(b.cap);
    if (!b.p)
        return HARK_ERR_NOMEM;
    b.p[0] = 0;
#define COUNTER(metric, help, expr)                                                                \
    do {                                                                                           \
        put(&b, "# HELP " metric " " help "\n# TYPE " metric " counter\n");                        \
        for (int i = 0; i < n; i++) {                                                              \
            const served_stats_t *s = &mm[i].stats;                                                \
            (void)s;                                                                               \
            put(&b, metric "{model=\"%s\",version=\"%s\"} %llu\n", mm[i].name, mm[i].version,      \
                (unsigned long long)(expr));                                                       \
        }                                                                                          \
    } while (0)
    COUNTER("nv_inference_request_success",
            "Number of successful inference requests, all batch sizes", s->success);
    COUNTER("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
            s->failure);
    COUNTER("nv_inference_count",
            "Number of inferences performed (does not include cached requests)",
            s->inference_count);
    COUNTER("nv_inference_exec_count",
            "Number of model executions performed (does not include cached requests)",
            s->execution_count);
    COUNTER("nv_inference_request_duration_us",
            "Cumulative inference request duration in microseconds", s->request_ns / 1000);
    COUNTER("nv_inference_queue_duration_us",
            "Cumulative inference queuing duration in microseconds", s->queue_ns / 1000);
    COUNTER("nv_inference_compute_input_duration_us",
            "Cumulative compute input duration in microseconds", s->compute_input_ns / 1000);
    COUNTER("nv_inference_compute_infer_duration_us",
            "Cumulative compute inference duration in microseconds", s->compute_infer_ns / 1000);
    COUNTER("nv_inference_compute_output_duration_us",
            "Cumulative inference compute output duration in microseconds",
            s->compute_output_ns / 1000);
#undef COUNTER
    put(&b, "# HELP nv_inference_pending_request_count Instantaneous number of pending requests "
            "awaiting execution per-model.\n# TYPE nv_inference_pending_request_count gauge\n");
    for (int i = 0; i < n; i++)
        put(&b, "nv_inference_pending_request_count{model=\"%s\",version=\"%s\"} %llu\n",
            mm[i].name, mm[i].version, (unsigned long long)mm[i].stats.pending);
    put(&b, "# HELP hark_audio_seconds_total Seconds of audio recognized\n"
            "# TYPE hark_audio_seconds_total counter\n");
    for (int i = 0; i < n; i++)
        put(&b, "hark_audio_seconds_total{model=\"%s\",version=\"%s\"} %.3f\n", mm[i].name,
            mm[i].version, mm[i].stats.audio_seconds);
    put(&b, "# HELP hark_real_time_factor Audio seconds recognized per second of compute (RTFx) "
            "since start\n# TYPE hark_real_time_factor gauge\n");
    for (int i = 0; i < n; i++)
        put(&b, "hark_real_time_factor{model=\"%s\",version=\"%s\"} %.3f\n", mm[i].name,
            mm[i].version,
            mm[i].stats.compute_seconds > 0
                ? mm[i].stats.audio_seconds / mm[i].stats.compute_seconds
                : 0.0);
    put(&b,
        "# HELP hark_padding_fraction Fraction of batched samples that were padding since start\n"
        "# TYPE hark_padding_fraction gauge\n");
    for (int i = 0; i < n; i++)
        put(&b, "hark_padding_fraction{model=\"%s\",version=\"%s\"} %.4f\n", mm[i].name,
            mm[i].version,
            mm[i].stats.total_samples > 0 ? mm[i].stats.padded_samples / mm[i].stats.total_samples
                                          : 0.0);
    static const char *const le[10] = {"1", "2", "4", "8", "16", "32", "64", "128", "256", "+Inf"};
    put(&b,
        "# HELP hark_batch_size Requests per model execution\n# TYPE hark_batch_size histogram\n");
    for (int i = 0; i < n; i++) {
        unsigned long long cum = 0;
        for (int k = 0; k < 10; k++) {
            cum += mm[i].stats.batch_hist[k];
            put(&b, "hark_batch_size_bucket{model=\"%s\",version=\"%s\",le=\"%s\"} %llu\n",
                mm[i].name, mm[i].version, le[k], cum);
        }
        put(&b, "hark_batch_size_sum{model=\"%s\",version=\"%s\"} %llu\n", mm[i].name,
            mm[i].version, (unsigned long long)mm[i].stats.inference_count);
        put(&b, "hark_batch_size_count{model=\"%s\",version=\"%s\"} %llu\n", mm[i].name,
            mm[i].version, (unsigned long long)mm[i].stats.execution_count);
    }
    gpu_metrics(&b);
    if (b.oom) {
        hark_free(b.p);
        return HARK_ERR_NOMEM;
    }
    *out = b.p;
    *len = b.len;
    return HARK_OK;
}
