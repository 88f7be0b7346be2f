/* Tests for src/perf/plot.c: PNG/SVG output of `hark perf --plot`, read back and inspected
 * (size, bar pixels by colour, SVG title/summary text), edge-case rows, and every error path. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "perf/plot.h"

#include <cairo.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One closed-loop level; latencies in ms, server parts in ms (-1: not reported). */
static perf_row_t row(int conc, double tput, double avg_ms, double p99_ms, double queue_ms,
                      double in_ms, double infer_ms, double out_ms)
{
    perf_row_t r;
    memset(&r, 0, sizeof r);
    r.concurrency = conc;
    r.batch = 1;
    r.stable = 1;
    r.throughput_infer_per_sec = tput;
    r.throughput_audio_sec_per_sec = tput * 5.0;
    r.rtf = tput * 5.0;
    r.latency_avg_us = avg_ms * 1000;
    r.latency_p50_us = avg_ms * 900;
    r.latency_p90_us = avg_ms * 1300;
    r.latency_p95_us = avg_ms * 1500;
    r.latency_p99_us = p99_ms * 1000;
    r.server_queue_us = queue_ms < 0 ? -1 : queue_ms * 1000;
    r.server_compute_input_us = in_ms < 0 ? -1 : in_ms * 1000;
    r.server_compute_infer_us = infer_ms < 0 ? -1 : infer_ms * 1000;
    r.server_compute_output_us = out_ms < 0 ? -1 : out_ms * 1000;
    return r;
}

/* Five levels; the queue (bottom part) is tall everywhere and throughput never near 0, so a
 * pixel row just above the x axis crosses each bar's queue part and nothing else. */
static int five_levels(perf_row_t *rows)
{
    rows[0] = row(1, 400, 20, 30, 6, 0.5, 10, 0.5);
    rows[1] = row(2, 750, 24, 40, 8, 0.5, 12, 0.5);
    rows[2] = row(4, 1200, 30, 55, 10, 0.6, 15, 0.6);
    rows[3] = row(8, 1480, 48, 90, 22, 0.6, 19, 0.7);
    rows[4] = row(16, 1500, 95, 180, 60, 0.7, 24, 0.8);
    return 5;
}

static char *path_in(test_ctx_t *t, const char *name)
{
    static char buf[4][512];
    static int slot;
    char *p = buf[slot++ % 4];
    snprintf(p, 512, "%s/%s", test_tmpdir(t), name);
    return p;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The whole file as a NUL-terminated string (caller frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

typedef struct {
    cairo_surface_t *s;
    int w, h, stride;
    const unsigned char *data;
} image_t;

static int image_load(image_t *im, const char *path)
{
    im->s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(im->s) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(im->s);
        return -1;
    }
    cairo_surface_flush(im->s);
    im->w = cairo_image_surface_get_width(im->s);
    im->h = cairo_image_surface_get_height(im->s);
    im->stride = cairo_image_surface_get_stride(im->s);
    im->data = cairo_image_surface_get_data(im->s);
    return 0;
}

static uint32_t pixel(const image_t *im, int x, int y)
{
    uint32_t v;
    memcpy(&v, im->data + (size_t)y * im->stride + (size_t)x * 4, 4);
    return v & 0xFFFFFF; /* RGB24 / ARGB32 native-endian words; alpha ignored */
}

/* Number of separate horizontal runs of exactly `rgb` on pixel row y. */
static int runs_of(const image_t *im, int y, uint32_t rgb)
{
    int runs = 0, in = 0;
    for (int x = 0; x < im->w; x++) {
        int hit = pixel(im, x, y) == rgb;
        runs += hit && !in;
        in = hit;
    }
    return runs;
}

static long count_of(const image_t *im, uint32_t rgb)
{
    long c = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++)
            c += pixel(im, x, y) == rgb;
    return c;
}

#define WHITE 0xFFFFFFu
#define QUEUE_RGB 0xE15759u             /* plot.c's "server queue" colour */
#define REST_RGB 0xBAB0ACu              /* plot.c's "client + network" colour */
#define BAR_ROW (PERF_PLOT_HEIGHT - 84) /* a few pixels above the x axis */

TEST(plot_png_five_levels_has_one_bar_per_level)
{
    perf_row_t rows[8];
    int n = five_levels(rows);
    const char *p = path_in(t, "five.png");
    hark_err_t err = {0};
    CHECKF(perf_plot(p, rows, n, "hark perf: conformer, 16 kHz", &err) == HARK_OK, "%s", err.msg);
    CHECK(file_size(p) > 1000);
    image_t im;
    CHECK_OK(image_load(&im, p));
    CHECK_EQ_INT(im.w, PERF_PLOT_WIDTH);
    CHECK_EQ_INT(im.h, PERF_PLOT_HEIGHT);
    CHECK_EQ_INT(pixel(&im, 2, 2), WHITE);
    CHECK_EQ_INT(pixel(&im, im.w - 3, im.h - 3), WHITE);
    int runs = runs_of(&im, BAR_ROW, QUEUE_RGB);
    long grey = count_of(&im, REST_RGB);
    cairo_surface_destroy(im.s);
    CHECK_EQ_INT(runs, n);
    CHECKF(grey > 2000, "client + network part barely drawn: %ld px", grey);
}

TEST(plot_svg_carries_title_and_summary)
{
    perf_row_t rows[8];
    int n = five_levels(rows);
    const char *p = path_in(t, "five.SVG");
    hark_err_t err = {0};
    CHECKF(perf_plot(p, rows, n, "Speech <ASR> & friends", &err) == HARK_OK, "%s", err.msg);
    char *s = slurp(p);
    CHECK(s != NULL);
    int ok_svg = strstr(s, "<svg") != NULL && strstr(s, "</svg>") != NULL;
    int ok_title = strstr(s, "<title>Speech &lt;ASR&gt; &amp; friends</title>") != NULL;
    int ok_p99 = strstr(s, "p99 at the highest load (concurrency 16): 180 ms") != NULL;
    int ok_peak = strstr(s, "peak throughput: 1,500 infer/s (concurrency 16") != NULL;
    int ok_px = strstr(s, "width=\"1200px\"") != NULL;
    free(s);
    CHECK(ok_svg);
    CHECK(ok_title);
    CHECK(ok_p99);
    CHECK(ok_peak);
    CHECK(ok_px);
}

TEST(plot_one_level)
{
    perf_row_t r = row(1, 35.5, 28.2, 31.0, 0.1, 0.3, 26, 0.4);
    const char *png = path_in(t, "one.png"), *svg = path_in(t, "one.svg");
    hark_err_t err = {0};
    CHECKF(perf_plot(png, &r, 1, NULL, &err) == HARK_OK, "%s", err.msg);
    CHECKF(perf_plot(svg, &r, 1, "", &err) == HARK_OK, "%s", err.msg);
    CHECK(file_size(svg) > 1000);
    image_t im;
    CHECK_OK(image_load(&im, png));
    /* the single bar sits in the middle of the plot; its infer part (26 of 28 ms) fills it */
    uint32_t mid = pixel(&im, PERF_PLOT_WIDTH / 2, PERF_PLOT_HEIGHT / 2 + 60);
    int w = im.w;
    cairo_surface_destroy(im.s);
    CHECK_EQ_INT(w, PERF_PLOT_WIDTH);
    CHECKF(mid != WHITE, "centre of the only bar is white");
    char *s = slurp(svg);
    CHECK(s != NULL);
    int ok = strstr(s, "<title>hark perf</title>") != NULL;
    free(s);
    CHECK(ok);
}

TEST(plot_zero_throughput_levels)
{
    perf_row_t rows[3] = {row(1, 0, 0, 0, 0, 0, 0, 0), row(2, 0, 12, 15, 1, 0, 9, 0),
                          row(4, 300, 14, 20, 2, 0, 10, 0)};
    hark_err_t err = {0};
    const char *p = path_in(t, "zero.png");
    CHECKF(perf_plot(p, rows, 3, "zero", &err) == HARK_OK, "%s", err.msg);
    CHECK(file_size(p) > 0);
    /* nothing measured at all: empty axes, still a valid picture */
    CHECKF(perf_plot(path_in(t, "all_zero.svg"), rows, 1, "zero", &err) == HARK_OK, "%s", err.msg);
    CHECKF(perf_plot(path_in(t, "all_zero.png"), rows, 1, "zero", &err) == HARK_OK, "%s", err.msg);
}

TEST(plot_server_parts_exceeding_latency_leave_no_client_part)
{
    /* server parts sum to 30 ms but the client saw 20 ms (clock skew, averaging windows) */
    perf_row_t over[2] = {row(1, 100, 20, 25, 10, 1, 18, 1), row(2, 180, 21, 26, 10, 1, 19, 1)};
    perf_row_t under[2] = {row(1, 100, 60, 65, 10, 1, 18, 1), row(2, 180, 61, 66, 10, 1, 19, 1)};
    hark_err_t err = {0};
    const char *po = path_in(t, "over.png"), *pu = path_in(t, "under.png");
    CHECKF(perf_plot(po, over, 2, "over", &err) == HARK_OK, "%s", err.msg);
    CHECKF(perf_plot(pu, under, 2, "under", &err) == HARK_OK, "%s", err.msg);
    image_t a, b;
    CHECK_OK(image_load(&a, po));
    long grey_over = count_of(&a, REST_RGB);
    cairo_surface_destroy(a.s);
    CHECK_OK(image_load(&b, pu));
    long grey_under = count_of(&b, REST_RGB);
    cairo_surface_destroy(b.s);
    /* only the legend swatch (14 x 14) is left when the rest is clamped at 0 */
    CHECKF(grey_over <= 14 * 14, "client + network drawn although clamped: %ld px", grey_over);
    CHECKF(grey_under > 10000, "client + network missing: %ld px", grey_under);
}

TEST(plot_missing_server_stats_and_request_rate_mode)
{
    perf_row_t rows[3] = {row(0, 48, 15, 20, -1, -1, -1, -1), row(0, 97, 16, 22, -1, -1, -1, -1),
                          row(0, 190, 25, 60, 3, 0.2, 12, 0.2)};
    rows[0].request_rate = 50;
    rows[1].request_rate = 100;
    rows[2].request_rate = 200;
    hark_err_t err = {0};
    const char *p = path_in(t, "rate.svg");
    CHECKF(perf_plot(p, rows, 3, "rate", &err) == HARK_OK, "%s", err.msg);
    const char *png = path_in(t, "rate.png");
    CHECKF(perf_plot(png, rows, 2, "rate", &err) == HARK_OK, "%s", err.msg);
    image_t im;
    CHECK_OK(image_load(&im, png));
    long grey = count_of(&im, REST_RGB);
    cairo_surface_destroy(im.s);
    /* without server statistics a bar is hatched, not passed off as client + network time */
    CHECKF(grey <= 14 * 14, "bars without statistics drawn as client + network: %ld px", grey);
    char *s = slurp(p);
    CHECK(s != NULL);
    int ok_rate = strstr(s, "p99 at the highest load (200 req/s): 60.0 ms") != NULL;
    int ok_note = strstr(s, "no server statistics at 2 load levels") != NULL;
    free(s);
    CHECK(ok_rate);
    CHECK(ok_note);
}

TEST(plot_many_levels_and_awkward_titles)
{
    perf_row_t rows[40];
    for (int i = 0; i < 40; i++) {
        rows[i] = row(0, 10.0 * i, 5 + i, 9 + i, 1, 0.1, 3, 0.1);
        rows[i].request_rate = 1234.5 + 100.25 * i;
    }
    char longt[1200];
    memset(longt, 'W', sizeof longt - 1);
    longt[sizeof longt - 1] = 0;
    const char *bad_utf8 = "bad \xff\xfe utf-8 \xe2\x82 and a\nnewline \xc3\xa9";
    hark_err_t err = {0};
    CHECKF(perf_plot(path_in(t, "many.png"), rows, 12, longt, &err) == HARK_OK, "%s", err.msg);
    CHECKF(perf_plot(path_in(t, "many40.png"), rows, 40, bad_utf8, &err) == HARK_OK, "%s", err.msg);
    const char *p = path_in(t, "bad.svg");
    CHECKF(perf_plot(p, rows, 12, bad_utf8, &err) == HARK_OK, "%s", err.msg);
    char *s = slurp(p);
    CHECK(s != NULL);
    int ok = strstr(s, "<title>bad ?? utf-8 ?? and a newline \xc3\xa9</title>") != NULL;
    free(s);
    CHECK(ok);
    /* non-finite numbers are drawn as 0, never reach cairo as NaN */
    rows[0].latency_avg_us = NAN;
    rows[1].throughput_infer_per_sec = INFINITY;
    rows[2].server_compute_infer_us = -INFINITY;
    CHECKF(perf_plot(path_in(t, "nan.png"), rows, 5, "nan", &err) == HARK_OK, "%s", err.msg);
}

TEST(plot_rejects_bad_arguments)
{
    perf_row_t rows[8];
    int n = five_levels(rows);
    hark_err_t err = {0};
    const char *jpg = path_in(t, "x.jpg");
    CHECK_EQ_INT(perf_plot(jpg, rows, n, "t", &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, ".png or .svg") != NULL);
    CHECK(access(jpg, F_OK) != 0);
    CHECK_EQ_INT(perf_plot(path_in(t, "png"), rows, n, "t", &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(perf_plot(path_in(t, ".png"), rows, n, "t", NULL), HARK_OK);
    CHECK_EQ_INT(perf_plot(path_in(t, "a.png"), rows, 0, "t", &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(perf_plot(path_in(t, "a.png"), NULL, 3, "t", &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(perf_plot(NULL, rows, n, "t", &err), HARK_ERR_INVALID_ARG);
}

TEST(plot_unwritable_path_is_io_error)
{
    perf_row_t rows[8];
    int n = five_levels(rows);
    hark_err_t err = {0};
    const char *missing = path_in(t, "no/such/dir/p.png");
    CHECK_EQ_INT(perf_plot(missing, rows, n, "t", &err), HARK_ERR_IO);
    CHECK(strstr(err.msg, missing) != NULL);
    const char *dir = path_in(t, "adir.svg"); /* a directory cannot be opened for writing */
    CHECK_OK(mkdir(dir, 0755));
    memset(&err, 0, sizeof err);
    CHECK_EQ_INT(perf_plot(dir, rows, n, "t", &err), HARK_ERR_IO);
    CHECK(strstr(err.msg, dir) != NULL);
    if (access("/dev/full", W_OK) == 0) { /* opens, then every write fails: ENOSPC */
        const char *full = path_in(t, "full.png");
        CHECK_OK(symlink("/dev/full", full));
        CHECK_EQ_INT(perf_plot(full, rows, n, "t", &err), HARK_ERR_IO);
        const char *fulls = path_in(t, "full.svg");
        CHECK_OK(symlink("/dev/full", fulls));
        CHECK_EQ_INT(perf_plot(fulls, rows, n, "t", &err), HARK_ERR_IO);
    }
}

TEST(plot_out_of_memory_paths)
{
    perf_row_t rows[8];
    int n = five_levels(rows);
    const char *names[2] = {"oom.png", "oom.svg"};
    for (int k = 0; k < 2; k++) {
        const char *p = path_in(t, names[k]);
        int saw_nomem = 0, rc = HARK_ERR_NOMEM;
        for (long fail = 1; fail < 64 && rc == HARK_ERR_NOMEM; fail++) {
            hark_err_t err = {0};
            alloc_fail_after(fail);
            rc = perf_plot(p, rows, n, "oom", &err);
            alloc_fail_reset();
            if (rc == HARK_ERR_NOMEM) {
                saw_nomem = 1;
                CHECKF(access(p, F_OK) != 0, "%s left behind after out of memory", p);
            }
        }
        CHECKF(saw_nomem, "%s: no allocation failure was exercised", names[k]);
        CHECK_EQ_INT(rc, HARK_OK);
        CHECK(file_size(p) > 0);
    }
}
