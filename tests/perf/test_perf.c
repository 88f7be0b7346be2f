/* test_perf.c — tests of the pure parts of src/perf/perf.c: nearest-rank percentiles, the
 * stability check, statistics parsing and deltas, and the CSV writer. */
#include "test.h"

#include "hark.h"
#include "perf/perf.h"

#include <stdlib.h>
#include <string.h>

TEST(perf_percentile_nearest_rank)
{
    double v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    CHECK(perf_percentile(v, 10, 50) == 5);
    CHECK(perf_percentile(v, 10, 90) == 9);
    CHECK(perf_percentile(v, 10, 95) == 10);
    CHECK(perf_percentile(v, 10, 99) == 10);
    CHECK(perf_percentile(v, 10, 10) == 1);
    CHECK(perf_percentile(v, 10, 11) == 2);
    CHECK(perf_percentile(v, 10, 0) == 1);
    CHECK(perf_percentile(v, 10, 100) == 10);
    double one = 42;
    CHECK(perf_percentile(&one, 1, 50) == 42 && perf_percentile(&one, 1, 99) == 42);
    CHECK(perf_percentile(NULL, 0, 50) == 0);
    /* 200 samples 1..200: p99 is the 198th */
    double *w = malloc(200 * sizeof *w);
    for (int i = 0; i < 200; i++)
        w[i] = i + 1;
    CHECK(perf_percentile(w, 200, 99) == 198);
    CHECK(perf_percentile(w, 200, 50) == 100);
    CHECK(perf_percentile(w, 200, 90) == 180);
    free(w);
}

TEST(perf_stability_check)
{
    double a[5] = {50, 200, 100, 105, 95};
    CHECK(perf_stable(a, 5, 3, 0.1));  /* mean 100: all within 10% */
    CHECK(!perf_stable(a, 4, 3, 0.1)); /* 200, 100, 105 */
    CHECK(!perf_stable(a, 2, 3, 0.1)); /* too few windows */
    double b[3] = {100, 100, 111.5};   /* mean 103.8: 111.5 is 7.4% off */
    CHECK(perf_stable(b, 3, 3, 0.1));
    CHECK(!perf_stable(b, 3, 3, 0.05));
    double z[3] = {0, 0, 0}, z2[3] = {0, 0, 1};
    CHECK(perf_stable(z, 3, 3, 0.1));
    CHECK(!perf_stable(z2, 3, 3, 0.1));
    double nan3[3] = {1, 1, 0.0 / 0.0};
    CHECK(!perf_stable(nan3, 3, 3, 0.1));
}

TEST(perf_stats_parse_and_delta)
{
    const char *j0 = "{\"model_stats\":[{\"name\":\"m\",\"version\":\"1\",\"inference_count\":4,"
                     "\"inference_stats\":{\"success\":{\"count\":4,\"ns\":9},"
                     "\"queue\":{\"count\":4,\"ns\":4000},\"compute_input\":{\"count\":4,\"ns\":0},"
                     "\"compute_infer\":{\"count\":4,\"ns\":40000},"
                     "\"compute_output\":{\"count\":4,\"ns\":400}}}]}";
    const char *j1 = "{\"model_stats\":[{\"inference_count\":\"14\",\"inference_stats\":{"
                     "\"queue\":{\"count\":14,\"ns\":24000},\"compute_input\":{\"count\":4,"
                     "\"ns\":0},\"compute_infer\":{\"count\":14,\"ns\":140000},"
                     "\"compute_output\":{\"count\":14,\"ns\":\"1400\"}}}]}";
    perf_server_stats_t a, b;
    hark_err_t err = {0};
    CHECKF(perf_parse_stats(j0, strlen(j0), &a, &err) == 0, "%s", err.msg);
    CHECKF(perf_parse_stats(j1, strlen(j1), &b, &err) == 0, "%s", err.msg);
    CHECK(a.inference_count == 4 && a.success_count == 4 && b.inference_count == 14);
    double us[4];
    perf_stats_delta(&a, &b, us);
    CHECK(fabs(us[0] - 2.0) < 1e-9);  /* 20000 ns / 10 */
    CHECK(us[1] == -1);               /* count did not grow */
    CHECK(fabs(us[2] - 10.0) < 1e-9); /* 100000 ns / 10 */
    CHECK(fabs(us[3] - 0.1) < 1e-9);
    const char *bad = "{\"model_stats\":[{\"inference_stats\":{\"queue\":{\"count\":1}}}]}";
    CHECK_EQ_INT(perf_parse_stats(bad, strlen(bad), &a, &err), HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "queue") != NULL, "%s", err.msg);
    CHECK_EQ_INT(perf_parse_stats("nope", 4, &a, &err), HARK_ERR_FORMAT);
}

TEST(perf_csv_writer)
{
    perf_row_t r[2];
    memset(r, 0, sizeof r);
    r[0].concurrency = 1;
    r[0].batch = 2;
    r[0].throughput_infer_per_sec = 12.5;
    r[0].throughput_audio_sec_per_sec = r[0].rtf = 30.25;
    r[0].latency_avg_us = 1000;
    r[0].latency_p50_us = 900;
    r[0].latency_p90_us = 1500;
    r[0].latency_p95_us = 1600;
    r[0].latency_p99_us = 2000;
    r[0].server_queue_us = 10;
    r[0].server_compute_infer_us = 800;
    r[0].server_compute_input_us = r[0].server_compute_output_us = -1;
    r[0].requests = 25;
    r[0].window_s = 4;
    r[0].stable = 1;
    r[0].trials = 3;
    r[1] = r[0];
    r[1].concurrency = 0;
    r[1].request_rate = 7.5;
    r[1].stable = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/o.csv", test_tmpdir(t));
    FILE *f = fopen(path, "w");
    CHECK_OK(perf_csv_write(f, r, 2));
    fclose(f);
    f = fopen(path, "r");
    char line[3][1024];
    for (int i = 0; i < 3; i++)
        CHECK(fgets(line[i], sizeof line[i], f) != NULL);
    CHECK(fgets(line[0] + 512, 16, f) == NULL); /* exactly 3 lines */
    fclose(f);
    CHECK(!strncmp(line[0], PERF_CSV_HEADER, strlen(PERF_CSV_HEADER)));
    static const char *cols[] = {"concurrency",
                                 "throughput_infer_per_sec",
                                 "throughput_audio_sec_per_sec",
                                 "latency_avg_us",
                                 "latency_p50_us",
                                 "latency_p90_us",
                                 "latency_p95_us",
                                 "latency_p99_us",
                                 "server_queue_us",
                                 "server_compute_infer_us",
                                 "rtf",
                                 "request_rate"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        CHECKF(strstr(line[0], cols[i]) != NULL, "missing column %s", cols[i]);
    int ncols = 1;
    for (const char *p = line[0]; *p; p++)
        ncols += *p == ',';
    for (int l = 1; l < 3; l++) {
        int n = 1;
        for (const char *p = line[l]; *p; p++)
            n += *p == ',';
        CHECK_EQ_INT(n, ncols);
    }
    CHECKF(!strncmp(line[1],
                    "1,0.000,2,12.500,30.250,1000.0,900.0,1500.0,1600.0,2000.0,10.0,-1.0,"
                    "800.0,-1.0,30.250,25,0,4.000,1,3",
                    80),
           "%s", line[1]);
    CHECKF(!strncmp(line[2], "0,7.500,2,", 10), "%s", line[2]);
}
