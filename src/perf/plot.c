/* plot.c — draws perf rows with cairo: stacked average-latency bars (ms, left axis), a throughput
 * line (infer/s, right axis), shared "nice" tick steps, legend, title and summary subtitle.
 * Tests: tests/perf/test_plot.c */
#include "perf/plot.h"

#include "core/alloc.h"
#include "hark.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
/* cairo draws text through fontconfig, which keeps its parsed configuration (some of it
 * unreachable: a fontconfig leak while loading its XML files) and the patterns behind cairo's
 * toy-font cache until the process exits; constant in size however many plots are drawn. Without
 * this, LeakSanitizer fails every ASan process that drew a plot (tests, `hark perf --plot`).
 * Only blocks allocated by fontconfig itself are ignored. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libfontconfig.so\n";
}
#endif

enum { SEG_QUEUE, SEG_INPUT, SEG_INFER, SEG_OUTPUT, SEG_REST, SEG_COUNT };

/* Stacked bottom to top in this order; the same colour (0xRRGGBB) for a part in every figure. */
static const char *const seg_names[SEG_COUNT] = {"server queue", "server compute input",
                                                 "server compute infer", "server compute output",
                                                 "client + network"};
static const uint32_t seg_colors[SEG_COUNT] = {0xE15759, 0xF28E2B, 0x4E79A7, 0x76B7B2, 0xBAB0AC};
static const uint32_t tput_color = 0x2CA02C;
static const uint32_t ink = 0x333333;
static const uint32_t ink_soft = 0x555555;
static const uint32_t grid_color = 0xE4E4E4;
static const uint32_t nostats_fill = 0xEEEEEE;
static const uint32_t nostats_line = 0x9A9A9A;

#define FONT "sans-serif"
#define TITLE_PT 22.0
#define SUBTITLE_PT 14.0
#define LABEL_PT 14.0
#define TICK_PT 12.5
#define LEGEND_PT 13.0

/* One load level as drawn. */
typedef struct {
    double seg_ms[SEG_COUNT]; /* heights of the stacked parts, ms, each >= 0 */
    double top_ms;            /* sum of seg_ms: max(avg latency, server parts) */
    double tput;              /* inferences/s, >= 0 */
    int has_stats;            /* 0: the server reported no statistics for this level */
} bar_t;

/* A value the plot can use: finite and positive, else 0 (-1 means "not reported"). */
static double clean(double v)
{
    return isfinite(v) && v > 0 ? v : 0;
}

static void bar_from_row(const perf_row_t *r, bar_t *b)
{
    const double parts_us[4] = {r->server_queue_us, r->server_compute_input_us,
                                r->server_compute_infer_us, r->server_compute_output_us};
    double server_ms = 0;
    b->has_stats = 0;
    for (int i = 0; i < 4; i++) {
        if (isfinite(parts_us[i]) && parts_us[i] >= 0)
            b->has_stats = 1;
        b->seg_ms[i] = clean(parts_us[i]) / 1000.0;
        server_ms += b->seg_ms[i];
    }
    double avg_ms = clean(r->latency_avg_us) / 1000.0;
    b->seg_ms[SEG_REST] = avg_ms > server_ms ? avg_ms - server_ms : 0;
    b->top_ms = server_ms + b->seg_ms[SEG_REST];
    b->tput = clean(r->throughput_infer_per_sec);
}

/* The load level's x value: concurrency, or the request rate in request-rate mode. */
static double row_load(const perf_row_t *r)
{
    return r->concurrency > 0 ? (double)r->concurrency : clean(r->request_rate);
}

/* ---- numbers ------------------------------------------------------------------------------ */

/* Smallest step of the form {1, 2, 2.5, 5} x 10^e that is >= raw. */
static double nice_ceil(double raw)
{
    if (!(raw > 0) || !isfinite(raw))
        return 1;
    static const double mant[] = {1, 2, 2.5, 5, 10};
    double p = pow(10, floor(log10(raw)));
    for (size_t i = 0; i < sizeof mant / sizeof mant[0]; i++)
        if (mant[i] * p >= raw * (1 - 1e-9))
            return mant[i] * p;
    return 10 * p;
}

/* Both axes get `*ticks` intervals so that their grid lines coincide; each gets its own nice step.
 * Picks the interval count (4..8) that leaves the least empty space above the data. */
static void choose_axes(double max_l, double max_r, int *ticks, double *step_l, double *step_r)
{
    double best = -1;
    for (int k = 4; k <= 8; k++) {
        double sl = nice_ceil(max_l / k), sr = nice_ceil(max_r / k);
        double score = max_l / (sl * k) + max_r / (sr * k) - 0.015 * fabs(k - 5.5);
        if (score > best) {
            best = score;
            *ticks = k;
            *step_l = sl;
            *step_r = sr;
        }
    }
}

/* Decimal places that show every multiple of `step` exactly (2.5 -> 1, 0.25 -> 2, 50 -> 0). */
static int step_decimals(double step)
{
    int e = (int)floor(log10(step) + 1e-9);
    double mant = step / pow(10, e);
    int d = -e + (fabs(mant - 2.5) < 1e-6 ? 1 : 0);
    return d > 0 ? d : 0;
}

/* "%.*f" with thousands separators in the integer part: 12345.6 -> "12,345.6". */
static void fmt_grouped(char *out, size_t cap, double v, int decimals)
{
    char raw[64];
    snprintf(raw, sizeof raw, "%.*f", decimals, v);
    const char *s = raw;
    size_t o = 0;
    if (*s == '-' && o + 1 < cap)
        out[o++] = *s++;
    size_t int_len = strcspn(s, ".");
    for (size_t i = 0; s[i] && o + 1 < cap; i++) {
        if (i > 0 && i < int_len && (int_len - i) % 3 == 0 && int_len > 3) {
            out[o++] = ',';
            if (o + 1 >= cap)
                break;
        }
        out[o++] = s[i];
    }
    out[o] = 0;
}

/* A measured value with about three significant digits: 0.123, 4.56, 78.9, 1,234. */
static void fmt_value(char *out, size_t cap, double v)
{
    double a = fabs(v);
    int d = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    if (a == 0)
        d = 0;
    fmt_grouped(out, cap, v, d);
}

/* The x tick label of a level; `mixed`: some levels are concurrency, some request rate. */
static void fmt_load(char *out, size_t cap, const perf_row_t *r, int mixed)
{
    if (r->concurrency > 0) {
        snprintf(out, cap, "%d", r->concurrency);
        return;
    }
    char num[48];
    snprintf(num, sizeof num, "%.6g", clean(r->request_rate));
    snprintf(out, cap, "%s%s", num, mixed ? "/s" : "");
}

/* The load level in words: "concurrency 8" or "150 req/s". */
static void fmt_load_long(char *out, size_t cap, const perf_row_t *r)
{
    if (r->concurrency > 0)
        snprintf(out, cap, "concurrency %d", r->concurrency);
    else
        snprintf(out, cap, "%.6g req/s", clean(r->request_rate));
}

/* Copies `src` as valid, printable UTF-8 (cairo rejects invalid UTF-8 and would put the whole
 * drawing into an error state): invalid bytes become '?', control characters a space. */
static void utf8_clean(char *dst, size_t cap, const char *src)
{
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)src;
    while (*s && o + 1 < cap) {
        unsigned c = *s;
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0;
        for (size_t i = 1; ok && i < len; i++)
            ok = (s[i] & 0xC0) == 0x80;
        if (ok && len > 1) { /* no overlong forms, surrogates or code points past U+10FFFF */
            uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
            for (size_t i = 1; i < len; i++)
                cp = cp << 6 | (s[i] & 0x3Fu);
            static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
            ok = cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (!ok) {
            dst[o++] = '?';
            s++;
        } else if (len == 1) {
            dst[o++] = c < 0x20 || c == 0x7F ? ' ' : (char)c;
            s++;
        } else {
            if (o + len >= cap)
                break;
            memcpy(dst + o, s, len);
            o += len;
            s += len;
        }
    }
    dst[o] = 0;
}

/* ---- text ----------------------------------------------------------------------------------- */

static void set_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

static void set_rgb(cairo_t *cr, uint32_t rgb)
{
    cairo_set_source_rgb(cr, (rgb >> 16 & 0xff) / 255.0, (rgb >> 8 & 0xff) / 255.0,
                         (rgb & 0xff) / 255.0);
}

static double text_width(cairo_t *cr, const char *s)
{
    cairo_text_extents_t te;
    cairo_text_extents(cr, s, &te);
    return te.x_advance;
}

/* Draws `s` with its anchor at (x, y): ax 0/0.5/1 = left/centre/right; ay 0/0.5/1 =
 * top/middle/bottom of the font's ascent..descent box (so rows of labels share a baseline). */
static void draw_text(cairo_t *cr, const char *s, double x, double y, double ax, double ay)
{
    cairo_font_extents_t fe;
    cairo_font_extents(cr, &fe);
    double h = fe.ascent + fe.descent;
    cairo_move_to(cr, x - ax * text_width(cr, s), y - ay * h + fe.ascent);
    cairo_show_text(cr, s);
}

/* Sets the font to `size` or smaller (down to `min_size`) so that `s` fits in `max_w`; if it still
 * does not, cuts `s` (in place, at a UTF-8 character boundary) and ends it with "...". */
static void fit_text(cairo_t *cr, char *s, double size, double min_size, int bold, double max_w)
{
    set_font(cr, size, bold);
    double w = text_width(cr, s);
    if (w <= max_w)
        return;
    size = fmax(min_size, size * max_w / w);
    set_font(cr, size, bold);
    size_t len = strlen(s);
    while (len > 0 && text_width(cr, s) > max_w) {
        do
            len--;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80);
        if (len >= 3) {
            s[len] = 0;
            size_t cut = len - 3;
            while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
                cut--;
            memcpy(s + cut, "...", 4);
            len = cut + 3;
        } else {
            s[len] = 0;
        }
    }
}

/* ---- the figure ----------------------------------------------------------------------------- */

/* Lines of 1 px look sharp when they lie on pixel centres. */
static double px(double v)
{
    return floor(v) + 0.5;
}

/* The "no server statistics" bar: light grey with diagonal hatching and a grey outline. */
static void fill_no_stats(cairo_t *cr, double x, double y, double w, double h)
{
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    set_rgb(cr, nostats_fill);
    cairo_fill_preserve(cr);
    cairo_clip(cr);
    set_rgb(cr, nostats_line);
    cairo_set_line_width(cr, 1.2);
    int lines = (int)ceil((w + h) / 7); /* 45-degree lines 7 px apart, across w + h */
    for (int k = 0; k < lines; k++) {
        double d = -h + 7.0 * k;
        cairo_move_to(cr, x + d, y + h);
        cairo_line_to(cr, x + d + h, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
    cairo_set_line_width(cr, 1);
    cairo_rectangle(cr, x + 0.5, y + 0.5, w - 1, h - 1);
    set_rgb(cr, nostats_line);
    cairo_stroke(cr);
}

enum { LEG_NOSTATS = SEG_COUNT, LEG_TPUT, LEG_COUNT };

/* Swatch (14 px square, or a 26 px line with a marker) of legend entry `i` from x. */
static void draw_legend_entry(cairo_t *cr, int i, double x, double y_mid)
{
    if (i < SEG_COUNT) {
        cairo_rectangle(cr, x, y_mid - 7, 14, 14);
        set_rgb(cr, seg_colors[i]);
        cairo_fill(cr);
    } else if (i == LEG_NOSTATS) {
        fill_no_stats(cr, x, y_mid - 7, 14, 14);
    } else {
        cairo_set_line_width(cr, 2.5);
        set_rgb(cr, tput_color);
        cairo_move_to(cr, x, y_mid);
        cairo_line_to(cr, x + 26, y_mid);
        cairo_stroke(cr);
        cairo_arc(cr, x + 13, y_mid, 4.5, 0, 2 * M_PI);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_set_line_width(cr, 1.5);
        cairo_stroke(cr);
    }
}

static double legend_swatch_w(int i)
{
    return (i == LEG_TPUT ? 26 : 14) + 7;
}

/* Draws the legend in one row (two if it does not fit), centred, from y `top`; the "no server
 * statistics" entry only when some level has such a bar. Returns the y below it. */
static double draw_legend(cairo_t *cr, double width, double top, int any_no_stats)
{
    int ids[LEG_COUNT], count = 0;
    const char *names[LEG_COUNT];
    for (int i = 0; i < SEG_COUNT; i++)
        names[i] = seg_names[i];
    names[LEG_NOSTATS] = "avg latency, no server statistics";
    names[LEG_TPUT] = "throughput (right axis)";
    for (int i = 0; i < LEG_COUNT; i++)
        if (i != LEG_NOSTATS || any_no_stats)
            ids[count++] = i;
    const double gap = 26, row_h = 22;
    set_font(cr, LEGEND_PT, 0);
    double w[LEG_COUNT] = {0}, total = 0;
    for (int k = 0; k < count; k++) {
        w[k] = legend_swatch_w(ids[k]) + text_width(cr, names[ids[k]]);
        total += w[k] + (k ? gap : 0);
    }
    int rows = total > width - 60 ? 2 : 1;
    int per_row = (count + rows - 1) / rows;
    for (int r = 0; r < rows; r++) {
        int first = r * per_row, last = first + per_row < count ? first + per_row : count;
        double row_w = 0;
        for (int k = first; k < last; k++)
            row_w += w[k] + (k > first ? gap : 0);
        double x = floor((width - row_w) / 2), y_mid = top + row_h * r + row_h / 2;
        for (int k = first; k < last; k++) {
            draw_legend_entry(cr, ids[k], x, y_mid);
            set_rgb(cr, ink);
            draw_text(cr, names[ids[k]], x + legend_swatch_w(ids[k]), y_mid, 0, 0.5);
            x += w[k] + gap;
        }
    }
    return top + row_h * rows;
}

/* The subtitle: p99 at the highest load, peak throughput (and its real-time factor), and a note
 * when some levels came without server statistics. */
static void make_subtitle(char *out, size_t cap, const perf_row_t *rows, const bar_t *bars, int n)
{
    int hi = 0, peak = 0, no_stats = 0;
    for (int i = 0; i < n; i++) {
        if (row_load(&rows[i]) >= row_load(&rows[hi]))
            hi = i;
        if (bars[i].tput > bars[peak].tput)
            peak = i;
        no_stats += !bars[i].has_stats;
    }
    char p99[48], tput[48], hi_load[48], peak_load[48], rtf[64] = "", note[96] = "";
    fmt_value(p99, sizeof p99, clean(rows[hi].latency_p99_us) / 1000.0);
    fmt_value(tput, sizeof tput, bars[peak].tput);
    fmt_load_long(hi_load, sizeof hi_load, &rows[hi]);
    fmt_load_long(peak_load, sizeof peak_load, &rows[peak]);
    double speed = clean(rows[peak].rtf);
    if (speed > 0) {
        char sp[48];
        fmt_value(sp, sizeof sp, speed);
        snprintf(rtf, sizeof rtf, ", %s\xC3\x97 real time", sp);
    }
    if (no_stats)
        snprintf(note, sizeof note, "; no server statistics at %d load level%s", no_stats,
                 no_stats > 1 ? "s" : "");
    snprintf(out, cap, "p99 at the highest load (%s): %s ms; peak throughput: %s infer/s (%s%s)%s",
             hi_load, p99, tput, peak_load, rtf, note);
}

static void draw_figure(cairo_t *cr, const perf_row_t *rows, const bar_t *bars, int n,
                        const char *title_in)
{
    const double W = PERF_PLOT_WIDTH, H = PERF_PLOT_HEIGHT;
    int n_conc = 0;
    double max_l = 0, max_r = 0;
    for (int i = 0; i < n; i++) {
        n_conc += rows[i].concurrency > 0;
        max_l = fmax(max_l, bars[i].top_ms);
        max_r = fmax(max_r, bars[i].tput);
    }
    int mixed = n_conc > 0 && n_conc < n;

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_BUTT);

    /* title and subtitle */
    char title[512], sub[512];
    utf8_clean(title, sizeof title, title_in && *title_in ? title_in : "hark perf");
    make_subtitle(sub, sizeof sub, rows, bars, n);
    fit_text(cr, title, TITLE_PT, 15, 1, W - 40);
    set_rgb(cr, ink);
    draw_text(cr, title, W / 2, 16, 0.5, 0);
    fit_text(cr, sub, SUBTITLE_PT, 10, 0, W - 40);
    set_rgb(cr, ink_soft);
    draw_text(cr, sub, W / 2, 50, 0.5, 0);
    int any_no_stats = 0;
    for (int i = 0; i < n; i++)
        any_no_stats |= !bars[i].has_stats;
    double legend_bottom = draw_legend(cr, W, 78, any_no_stats);

    /* axes: shared interval count, own steps; headroom so markers and bar tops stay inside */
    int ticks = 5;
    double step_l = 1, step_r = 1;
    choose_axes(max_l > 0 ? max_l * 1.03 : 1, max_r > 0 ? max_r * 1.06 : 1, &ticks, &step_l,
                &step_r);
    int dec_l = step_decimals(step_l), dec_r = step_decimals(step_r);
    char lab[64];
    double lw_l = 0, lw_r = 0;
    set_font(cr, TICK_PT, 0);
    for (int k = 0; k <= ticks; k++) {
        fmt_grouped(lab, sizeof lab, k * step_l, dec_l);
        lw_l = fmax(lw_l, text_width(cr, lab));
        fmt_grouped(lab, sizeof lab, k * step_r, dec_r);
        lw_r = fmax(lw_r, text_width(cr, lab));
    }
    const double axis_title_w = 22; /* a rotated LABEL_PT line */
    double left = floor(20 + axis_title_w + 12 + lw_l + 10);
    double right = floor(W - (20 + axis_title_w + 12 + lw_r + 10));
    double top = floor(legend_bottom + 22), bottom = H - 78;
    double plot_w = right - left, plot_h = bottom - top;
    double y_top_l = ticks * step_l, y_top_r = ticks * step_r;

    /* grid lines and tick labels on both sides */
    cairo_set_line_width(cr, 1);
    for (int k = 0; k <= ticks; k++) {
        double y = px(bottom - plot_h * k / ticks);
        if (k > 0) {
            set_rgb(cr, grid_color);
            cairo_move_to(cr, left, y);
            cairo_line_to(cr, right, y);
            cairo_stroke(cr);
        }
        set_rgb(cr, ink);
        cairo_move_to(cr, left - 5, y);
        cairo_line_to(cr, left, y);
        cairo_move_to(cr, right, y);
        cairo_line_to(cr, right + 5, y);
        cairo_stroke(cr);
        set_font(cr, TICK_PT, 0);
        fmt_grouped(lab, sizeof lab, k * step_l, dec_l);
        draw_text(cr, lab, left - 9, y, 1, 0.5);
        set_rgb(cr, tput_color);
        fmt_grouped(lab, sizeof lab, k * step_r, dec_r);
        draw_text(cr, lab, right + 9, y, 0, 0.5);
    }

    /* bars: bottom to top in segment order, a thin white line between parts */
    double slot = plot_w / n;
    double bar_w = fmin(slot * 0.62, 96);
    for (int i = 0; i < n; i++) {
        double x0 = left + slot * (i + 0.5) - bar_w / 2, acc = 0;
        for (int s = 0; s < SEG_COUNT; s++) {
            double h = bars[i].seg_ms[s];
            if (h <= 0)
                continue;
            double y0 = bottom - plot_h * acc / y_top_l;
            double y1 = bottom - plot_h * (acc + h) / y_top_l;
            acc += h;
            if (!bars[i].has_stats) { /* the whole bar is SEG_REST: do not call it client time */
                fill_no_stats(cr, x0, y1, bar_w, y0 - y1);
                continue;
            }
            cairo_rectangle(cr, x0, y1, bar_w, y0 - y1);
            set_rgb(cr, seg_colors[s]);
            cairo_fill(cr);
            if (acc < bars[i].top_ms && y0 - y1 >= 1) {
                cairo_set_source_rgb(cr, 1, 1, 1);
                cairo_set_line_width(cr, 1);
                cairo_move_to(cr, x0, y1);
                cairo_line_to(cr, x0 + bar_w, y1);
                cairo_stroke(cr);
            }
        }
    }

    /* frame: left, right and bottom axes */
    set_rgb(cr, ink);
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, px(left), top);
    cairo_line_to(cr, px(left), px(bottom));
    cairo_line_to(cr, px(right), px(bottom));
    cairo_line_to(cr, px(right), top);
    cairo_stroke(cr);

    /* throughput: line with markers, over the bars */
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    set_rgb(cr, tput_color);
    cairo_set_line_width(cr, 2.5);
    for (int i = 0; i < n; i++) {
        double x = left + slot * (i + 0.5), y = bottom - plot_h * bars[i].tput / y_top_r;
        if (i == 0)
            cairo_move_to(cr, x, y);
        else
            cairo_line_to(cr, x, y);
    }
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        double x = left + slot * (i + 0.5), y = bottom - plot_h * bars[i].tput / y_top_r;
        cairo_new_sub_path(cr);
        cairo_arc(cr, x, y, 5, 0, 2 * M_PI);
        set_rgb(cr, tput_color);
        cairo_fill_preserve(cr);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_set_line_width(cr, 1.5);
        cairo_stroke(cr);
    }

    /* x tick labels: every `every`-th level so that neighbours never touch */
    set_font(cr, TICK_PT, 0);
    double max_xw = 0;
    for (int i = 0; i < n; i++) {
        fmt_load(lab, sizeof lab, &rows[i], mixed);
        max_xw = fmax(max_xw, text_width(cr, lab));
    }
    int every = (int)ceil((max_xw + 10) / slot);
    if (every < 1)
        every = 1;
    for (int i = 0; i < n; i += every) {
        double x = left + slot * (i + 0.5);
        set_rgb(cr, ink);
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, px(x), bottom);
        cairo_line_to(cr, px(x), bottom + 5);
        cairo_stroke(cr);
        fmt_load(lab, sizeof lab, &rows[i], mixed);
        draw_text(cr, lab, x, bottom + 9, 0.5, 0);
    }

    /* axis titles */
    set_font(cr, LABEL_PT, 0);
    set_rgb(cr, ink);
    const char *x_title = n_conc == n   ? "Concurrency (requests in flight)"
                          : n_conc == 0 ? "Request rate (requests/s)"
                                        : "Concurrency, or request rate (requests/s)";
    draw_text(cr, x_title, left + plot_w / 2, H - 20, 0.5, 1);
    cairo_save(cr);
    cairo_translate(cr, 20, top + plot_h / 2);
    cairo_rotate(cr, -M_PI / 2);
    draw_text(cr, "Average latency (ms)", 0, 0, 0.5, 0);
    cairo_restore(cr);
    cairo_save(cr);
    cairo_translate(cr, W - 20, top + plot_h / 2);
    cairo_rotate(cr, -M_PI / 2);
    set_rgb(cr, tput_color);
    draw_text(cr, "Throughput (infer/s)", 0, 0, 0.5, 1);
    cairo_restore(cr);
}

/* ---- output ---------------------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} membuf_t;

static cairo_status_t membuf_write(void *closure, const unsigned char *data, unsigned int len)
{
    membuf_t *b = closure;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + len)
            cap *= 2;
        char *p = hark_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return CAIRO_STATUS_WRITE_ERROR;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return CAIRO_STATUS_SUCCESS;
}

static cairo_status_t file_write(void *closure, const unsigned char *data, unsigned int len)
{
    return fwrite(data, 1, len, closure) == len ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

/* XML text with &, <, >, " escaped. */
static int fput_xml(FILE *f, const char *s)
{
    for (; *s; s++) {
        const char *e = *s == '&'   ? "&amp;"
                        : *s == '<' ? "&lt;"
                        : *s == '>' ? "&gt;"
                        : *s == '"' ? "&quot;"
                                    : NULL;
        if (e ? fputs(e, f) < 0 : fputc(*s, f) == EOF)
            return -1;
    }
    return 0;
}

/* Writes cairo's SVG with <title> and <desc> inserted right after the <svg ...> start tag. */
static int write_svg_file(FILE *f, const membuf_t *b, const char *title, const char *desc)
{
    size_t at = 0;
    const char *svg = memmem(b->p, b->len, "<svg", 4);
    if (svg) {
        const char *gt = memchr(svg, '>', b->len - (size_t)(svg - b->p));
        if (gt)
            at = (size_t)(gt + 1 - b->p);
    }
    if (fwrite(b->p, 1, at, f) != at)
        return -1;
    if (at) {
        if (fputs("\n<title>", f) < 0 || fput_xml(f, title) || fputs("</title>\n<desc>", f) < 0 ||
            fput_xml(f, desc) || fputs("</desc>", f) < 0)
            return -1;
    }
    return fwrite(b->p + at, 1, b->len - at, f) == b->len - at ? 0 : -1;
}

static int cairo_fail(hark_err_t *err, const char *path, cairo_status_t st)
{
    if (st == CAIRO_STATUS_NO_MEMORY)
        return err_set(err, HARK_ERR_NOMEM, "perf plot %s: out of memory", path);
    return err_set(err, HARK_ERR_INTERNAL, "perf plot %s: cairo: %s", path,
                   cairo_status_to_string(st));
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcasecmp(s + n - m, suffix) == 0;
}

int perf_plot(const char *path, const perf_row_t *rows, int n, const char *title, hark_err_t *err)
{
    if (!path || !rows || n < 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "perf plot: no load levels to draw");
    int svg = ends_with(path, ".svg");
    if (!svg && !ends_with(path, ".png"))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "perf plot %s: unknown picture format (the name must end in .png or .svg)",
                       path);

    int rc = HARK_OK;
    FILE *f = NULL;
    cairo_surface_t *surf = NULL;
    cairo_t *cr = NULL;
    membuf_t mem = {0};
    int created = 0;
    char clean_title[512], desc[512];
    bar_t *bars = hark_calloc((size_t)n, sizeof *bars);
    if (!bars) {
        rc = err_set(err, HARK_ERR_NOMEM, "perf plot %s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++)
        bar_from_row(&rows[i], &bars[i]);

    /* open first: an unwritable path fails before any drawing */
    f = fopen(path, "wb");
    if (!f) {
        rc = err_set(err, HARK_ERR_IO, "perf plot: cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    created = 1;

    if (svg) {
        surf = cairo_svg_surface_create_for_stream(membuf_write, &mem, PERF_PLOT_WIDTH,
                                                   PERF_PLOT_HEIGHT);
        if (cairo_surface_status(surf) == CAIRO_STATUS_SUCCESS)
            cairo_svg_surface_set_document_unit(surf, CAIRO_SVG_UNIT_PX);
    } else {
        surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, PERF_PLOT_WIDTH, PERF_PLOT_HEIGHT);
    }
    if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) {
        rc = cairo_fail(err, path, cairo_surface_status(surf));
        goto done;
    }
    cr = cairo_create(surf);
    draw_figure(cr, rows, bars, n, title);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        rc = cairo_fail(err, path, cairo_status(cr));
        goto done;
    }
    cairo_destroy(cr);
    cr = NULL;

    if (svg) {
        cairo_surface_finish(surf); /* flushes the document through membuf_write */
        if (mem.oom) {
            rc = err_set(err, HARK_ERR_NOMEM, "perf plot %s: out of memory", path);
            goto done;
        }
        if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) {
            rc = cairo_fail(err, path, cairo_surface_status(surf));
            goto done;
        }
        utf8_clean(clean_title, sizeof clean_title, title && *title ? title : "hark perf");
        make_subtitle(desc, sizeof desc, rows, bars, n);
        if (write_svg_file(f, &mem, clean_title, desc) != 0) {
            rc = err_set(err, HARK_ERR_IO, "perf plot: cannot write %s: %s", path, strerror(errno));
            goto done;
        }
    } else {
        cairo_status_t st = cairo_surface_write_to_png_stream(surf, file_write, f);
        if (st != CAIRO_STATUS_SUCCESS) {
            rc = st == CAIRO_STATUS_NO_MEMORY
                     ? cairo_fail(err, path, st)
                     : err_set(err, HARK_ERR_IO, "perf plot: cannot write %s: %s", path,
                               strerror(errno));
            goto done;
        }
    }
    int close_rc = fclose(f);
    f = NULL;
    if (close_rc != 0)
        rc = err_set(err, HARK_ERR_IO, "perf plot: cannot write %s: %s", path, strerror(errno));

done:
    if (cr)
        cairo_destroy(cr);
    if (surf)
        cairo_surface_destroy(surf);
    if (f)
        fclose(f);
    if (rc != HARK_OK && created)
        unlink(path); /* never leave a half-written picture behind */
    hark_free(mem.p);
    hark_free(bars);
    return rc;
}
