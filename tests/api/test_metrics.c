/* Tests for src/api/metrics.c: every Triton metric name and the speech metrics appear, with
 * HELP/TYPE lines, per-model labels, and a cumulative batch-size histogram. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "api/metrics.h"

#include <string.h>

TEST(metrics_render_names_and_values)
{
    metrics_model_t mm[2];
    memset(mm, 0, sizeof mm);
    mm[0].name = "wenet";
    mm[0].version = "1";
    mm[0].stats.success = 7;
    mm[0].stats.failure = 1;
    mm[0].stats.inference_count = 7;
    mm[0].stats.execution_count = 3;
    mm[0].stats.queue_ns = 5000000;
    mm[0].stats.batch_hist[0] = 1;
    mm[0].stats.batch_hist[2] = 2;
    mm[0].stats.audio_seconds = 70;
    mm[0].stats.compute_seconds = 0.7;
    mm[0].stats.padded_samples = 10;
    mm[0].stats.total_samples = 100;
    mm[1].name = "other";
    mm[1].version = "2";
    char *s;
    size_t n;
    CHECK_OK(metrics_render(mm, 2, &s, &n));
    CHECK(strlen(s) == n);
    static const char *const want[] = {
        "# TYPE nv_inference_request_success counter",
        "nv_inference_request_success{model=\"wenet\",version=\"1\"} 7",
        "nv_inference_request_failure{model=\"wenet\",version=\"1\"} 1",
        "nv_inference_count{model=\"wenet\",version=\"1\"} 7",
        "nv_inference_exec_count{model=\"wenet\",version=\"1\"} 3",
        "nv_inference_queue_duration_us{model=\"wenet\",version=\"1\"} 5000",
        "nv_inference_request_duration_us{model=\"other\",version=\"2\"} 0",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "# TYPE nv_inference_pending_request_count gauge",
        "hark_audio_seconds_total{model=\"wenet\",version=\"1\"} 70.000",
        "hark_real_time_factor{model=\"wenet\",version=\"1\"} 100.000",
        "hark_padding_fraction{model=\"wenet\",version=\"1\"} 0.1000",
        "hark_batch_size_bucket{model=\"wenet\",version=\"1\",le=\"1\"} 1",
        "hark_batch_size_bucket{model=\"wenet\",version=\"1\",le=\"4\"} 3",
        "hark_batch_size_bucket{model=\"wenet\",version=\"1\",le=\"+Inf\"} 3",
        "hark_batch_size_count{model=\"wenet\",version=\"1\"} 3"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECKF(strstr(s, want[i]) != NULL, "missing: %s", want[i]);
    hark_free(s);
}
