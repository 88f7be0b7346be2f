/* plot.h — the picture `hark perf --plot out.png|out.svg` draws: per load level a stacked bar of
 * average latency (server queue / compute input / infer / output / client + network) on the left
 * axis and throughput as a line on a right axis, as in Triton's speech examples.
 * Tests: tests/perf/test_plot.c */
#ifndef HARK_PERF_PLOT_H
#define HARK_PERF_PLOT_H

#include "core/error.h"
#include "perf/perf.h"

/* Size of the figure: pixels for PNG, points (1 pt = 1 CSS px) for SVG. */
#define PERF_PLOT_WIDTH 1200
#define PERF_PLOT_HEIGHT 700

/* Draws `n` load levels (n >= 1, in the order given: one bar each, left to right) to `path`:
 * PNG when it ends in ".png", SVG when ".svg" (case-insensitive). The x axis is the concurrency,
 * or the request rate where concurrency is 0. `title` may be NULL (a default is used). Server
 * parts that are negative (-1: no statistics) or not finite count as 0; the "client + network"
 * segment is latency_avg_us minus the server parts, clamped at 0. The SVG carries `title` and the
 * subtitle as <title>/<desc> text as well as drawn glyphs.
 *
 * Ownership: reads `rows` and `title` only; keeps nothing. The file is written completely or
 * removed. Returns HARK_OK; HARK_ERR_INVALID_ARG (no rows, or another extension);
 * HARK_ERR_IO (the file cannot be created or written; err names the path and the reason);
 * HARK_ERR_NOMEM; HARK_ERR_INTERNAL (cairo failed while drawing). */
int perf_plot(const char *path, const perf_row_t *rows, int n, const char *title, hark_err_t *err);

#endif
