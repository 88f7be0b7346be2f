/* cmd_perf.c — `hark perf`: perf_analyzer-style load generation against a hark or Triton server
 * (KServe v2 HTTP): option parsing, request bodies from audio files or JSON, summary, CSV, plot.
 * The engine is src/perf/perf.c. Tests: tests/cli/test_cli_perf.c, tests/perf/test_perf.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "hark.h"
#include "net/http_client.h"
#include "api/kserve.h"
#include "perf/perf.h"
#include "perf/plot.h"
#include "perf/stream_perf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

static void perf_usage(FILE *f)
{
    static const char *const text[] = {
        "usage: hark perf -m MODEL [-u host:port|http://host:port[/prefix]] [options]",
        "Load generation against a KServe v2 HTTP server (hark serve, or Triton), in the manner",
        "of Triton's perf_analyzer. Only the given address is contacted.",
        "  -m, --model-name M          model to load (required)",
        "  -x, --model-version V       version (default: the server's choice)",
        "  -u, --url ADDR              server (default localhost:8000)",
        "  -i, --protocol http|grpc    KServe v2 over HTTP (default) or gRPC (-u host:8001)",
        "  --concurrency-range A:B:S   closed loop: A, A+S, ... <= B requests in flight, each on",
        "                              its own connection and thread (default 1:1:1)",
        "  --request-rate-range A:B:S  open loop instead: requests/s per level; arrivals follow",
        "  --request-distribution D    constant (default) or poisson; sent by --max-threads",
        "                              threads (a request waits when all are busy)",
        "  -b, --batch-size N          inferences per request (default 1)",
        "  -p, --measurement-interval MS  window length (default 5000)",
        "  -s, --stability-percentage P   last 3 windows within +-P% (default 10) in throughput",
        "                              and latency",
        "  -r, --max-trials N          windows per level before giving up: 'unstable' (default 10)",
        "  --percentile N              latency used by the stability check (default: average)",
        "  --input-data FILE           audio file (sent decoded as WAV FP32 [B,N] + WAV_LENS",
        "                              INT32 [B,1], or as AUDIO BYTES [B] with --audio-bytes), or",
        "                              a .json KServe v2 infer request sent as is; repeatable,",
        "                              used round-robin. Default: 1 s of synthetic noise.",
        "  --audio-bytes               send audio files encoded (AUDIO input; hark only)",
        "  --sample-rate HZ            rate of the WAV input (default 16000)",
        "  --decoding-method M, --beam-size N   request parameters (hark)",
        "  -a, --async                 accepted for compatibility: concurrency = connections",
        "  --max-threads N             threads (default 64); caps --concurrency-range too",
        "  --max-requests N            whole-run cap (default 100000)",
        "  --max-seconds S             whole-run cap (default 300)",
        "  --timeout-ms MS             per request (default 60000)",
        "  -f FILE                     CSV, one row per level",
        "  --plot FILE.png|FILE.svg    latency breakdown and throughput per level",
        "  --streaming                 sequences instead (a streaming model): every stream is",
        "                              a thread and a connection sending the audio file chunk by",
        "                              chunk with sequence_id/start/end; --concurrency-range",
        "                              counts streams; -p is each level's measured time (default",
        "                              10000); reports chunk latency percentiles, time to the",
        "                              final result after END, and whether the level is",
        "                              sustained in real time (default input: 8 s of noise)",
        "  --chunk-ms MS               audio per chunk (default 640, WeNet's Triton client)",
        "  --pace realtime|fast        chunks when their audio would have been spoken (default;",
        "                              latency counted from then) or as fast as answers come",
        "  --latency-limit-ms MS       sustained: p99 chunk latency within this (default 200)",
        "Throughput counts inferences and audio seconds per wall second (the latter is the",
        "real-time factor reported as 'rtf': 10 = ten times faster than real time). Server times",
        "come from the model's statistics endpoint. Exit: 0 ok, 1 failure, 2 bad usage.",
    };
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++)
        fprintf(f, "%s\n", text[i]);
}

/* "A", "A:B" or "A:B:S" */
static int parse_range(const char *s, double v[3])
{
    char *end;
    v[0] = strtod(s, &end);
    v[1] = v[0];
    v[2] = 0;
    for (int i = 1; i < 3 && *end == ':'; i++)
        v[i] = strtod(end + 1, &end);
    return *end || v[0] <= 0 || v[1] < v[0] || v[2] < 0 ? -1 : 0;
}

static uint8_t *read_all(const char *path, size_t *n, hark_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, HARK_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = hark_malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap)
            break;
        uint8_t *b2 = hark_realloc(buf, cap * 2);
        if (!b2) {
            hark_free(buf);
            buf = NULL;
            break;
        }
        buf = b2;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        hark_free(buf);
        err_set(err, bad ? HARK_ERR_IO : HARK_ERR_NOMEM, "%s: cannot read", path);
        return NULL;
    }
    *n = len;
    return buf;
}

typedef struct {
    const char *path;
    float *pcm; /* decoded at the sample rate (WAV mode) */
    size_t n;
    uint8_t *raw; /* the file (bytes mode) */
    size_t raw_len;
    double seconds;
} clip_t;

/* a .json input: the body as is; batch and seconds read from its tensors */
static int json_input(const char *path, int rate, perf_input_t *in, uint8_t **owned,
                      hark_err_t *err)
{
    size_t n;
    uint8_t *b = read_all(path, &n, err);
    if (!b)
        return err->status;
    kserve_request_t kr;
    memset(&kr, 0, sizeof kr);
    int rc = kserve_parse_request(b, n, (size_t)-1, &kr, err);
    if (rc) {
        hark_free(b);
        return err_prefix(err, rc, "%s", path);
    }
    in->body = b;
    in->len = n;
    in->header_len = -1;
    in->batch = 1;
    in->audio_s = 0;
    const kserve_tensor_t *wav = kserve_request_input(&kr, "WAV");
    const kserve_tensor_t *lens = kserve_request_input(&kr, "WAV_LENS");
    const kserve_tensor_t *au = kserve_request_input(&kr, "AUDIO");
    if (wav && wav->ndim >= 1) {
        in->batch = wav->ndim == 2 ? (int)wav->shape[0] : 1;
        const int32_t *lv =
            lens && lens->dtype == KSERVE_INT32 ? kserve_tensor_data(&kr, lens) : NULL;
        double samples = 0;
        for (int i = 0; lv && i < lens->count; i++)
            samples += lv[i];
        in->audio_s = (lv ? samples : (double)wav->count) / rate;
    } else if (au && au->dtype == KSERVE_BYTES) {
        in->batch = (int)au->count;
        size_t pos = 0, el_len;
        const uint8_t *el;
        while (kserve_bytes_next(au, &pos, &el, &el_len)) {
            audio_opts_t ao = {0};
            audio_t a;
            if (!audio_decode_memory(el, el_len, &ao, &a, NULL)) {
                in->audio_s += a.rate ? (double)a.n / a.rate : 0;
                audio_free(&a);
            }
        }
    }
    kserve_request_free(&kr);
    *owned = b;
    return HARK_OK;
}

/* request i of audio clips: clips i, i+1, ... (batch of them, round-robin) */
static int audio_input(const clip_t *clips, int nclips, int first, int batch, int bytes_mode,
                       const kserve_param_t *params, int nparams, perf_input_t *in, uint8_t **owned,
                       hark_err_t *err)
{
    kserve_output_t t[2];
    memset(t, 0, sizeof t);
    int64_t shape0[2], shape1[2];
    const char *outs[1] = {"TRANSCRIPTS"};
    void *buf0 = NULL, *buf1 = NULL;
    int rc;
    double secs = 0;
    if (bytes_mode) {
        const char **strs = hark_calloc((size_t)batch, sizeof *strs);
        size_t *lens = hark_calloc((size_t)batch, sizeof *lens);
        size_t size = 0;
        for (int b = 0; strs && lens && b < batch; b++) {
            const clip_t *c = &clips[(first + b) % nclips];
            strs[b] = (const char *)c->raw;
            lens[b] = c->raw_len;
            secs += c->seconds;
        }
        buf0 = strs && lens ? kserve_bytes_pack(strs, lens, batch, &size) : NULL;
        hark_free(strs);
        hark_free(lens);
        if (!buf0)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        shape0[0] = batch;
        t[0] = (kserve_output_t){"AUDIO", KSERVE_BYTES, 1, shape0, buf0, size};
    } else {
        size_t N = 0;
        for (int b = 0; b < batch; b++) {
            const clip_t *c = &clips[(first + b) % nclips];
            N = c->n > N ? c->n : N;
        }
        float *x = hark_calloc((size_t)batch * (N ? N : 1), sizeof(float));
        int32_t *l = hark_calloc((size_t)batch, sizeof(int32_t));
        if (!x || !l || N > INT32_MAX) {
            hark_free(x);
            hark_free(l);
            return err_set(err, HARK_ERR_NOMEM, "out of memory (or a clip over 2^31 samples)");
        }
        for (int b = 0; b < batch; b++) {
            const clip_t *c = &clips[(first + b) % nclips];
            if (c->n)
                memcpy(x + (size_t)b * N, c->pcm, sizeof(float) * c->n);
            l[b] = (int32_t)c->n;
            secs += c->seconds;
        }
        buf0 = x;
        buf1 = l;
        shape0[0] = batch;
        shape0[1] = (int64_t)N;
        shape1[0] = batch;
        shape1[1] = 1;
        t[0] = (kserve_output_t){"WAV", KSERVE_FP32, 2, shape0, x, sizeof(float) * batch * N};
        t[1] = (kserve_output_t){"WAV_LENS", KSERVE_INT32, 2, shape1, l, sizeof(int32_t) * batch};
    }
    kserve_request_spec_t spec = {.inputs = t,
                                  .n_inputs = bytes_mode ? 1 : 2,
                                  .outputs = outs,
                                  .n_outputs = 1,
                                  .params = params,
                                  .n_params = nparams};
    kserve_response_t body;
    rc = kserve_build_request(&spec, &body, err);
    hark_free(buf0);
    hark_free(buf1);
    if (rc)
        return rc;
    in->body = body.body;
    in->len = body.len;
    in->header_len = (long)body.header_len;
    in->batch = batch;
    in->audio_s = secs;
    *owned = body.body;
    return HARK_OK;
}

typedef struct {
    const char *model, *version, *url, *protocol, *csv, *plot, *dist, *method;
    const char *conc_range, *rate_range, *pace;
    double chunk_ms, limit_ms;
    int streaming;
    double batch, window, stab, trials, percentile, max_threads, max_req, max_sec, timeout, beam,
        rate_hz, seed;
    int bytes_mode;
} perf_args_t;

/* the levels stream_perf_run will measure (its defaults applied) */
static int stream_levels(const stream_perf_opts_t *so)
{
    int a = so->streams_start > 0 ? so->streams_start : 1;
    int step = so->streams_step > 0 ? so->streams_step : 1;
    return so->streams_end >= a ? (so->streams_end - a) / step + 1 : 1;
}

/* --streaming: the levels of streams, their report, CSV and plot; the exit status */
static int run_streaming(const perf_args_t *A, const http_url_t *url, const clip_t *clip,
                         double window_ms, const double cr[3])
{
    stream_perf_opts_t so = {.host = url->host,
                             .port = url->port,
                             .prefix = url->prefix,
                             .grpc = !strcmp(A->protocol, "grpc"),
                             .model = A->model,
                             .pcm = clip->pcm,
                             .n = clip->n,
                             .rate = (int)A->rate_hz,
                             .chunk_ms = (int)A->chunk_ms,
                             .fast = !strcmp(A->pace, "fast"),
                             .streams_start = (int)cr[0],
                             .streams_end = (int)cr[1],
                             .streams_step = (int)cr[2],
                             .window_ms = (unsigned)window_ms,
                             .latency_limit_ms = A->limit_ms,
                             .timeout_ms = (unsigned)A->timeout,
                             .log = stdout};
    /* a socket per stream: the soft limit on descriptors goes up to the hard one */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    printf(
        "*** Streaming Measurement Settings ***\n  Server: %s:%d%s (%s)  Model: %s\n"
        "  Audio: %s, %.2f s, in chunks of %d ms, %s\n"
        "  Streams: %d to %d step %d; %u ms measured per level after two chunks of warm-up\n"
        "  Expected time: about %.0f s (%d level%s)\n\n",
        url->host, url->port, url->prefix, A->protocol, A->model,
        clip->path ? clip->path : "synthetic noise", clip->seconds, so.chunk_ms,
        so.fast ? "as fast as answers come" : "at real-time pace", so.streams_start, so.streams_end,
        so.streams_step ? so.streams_step : 1, so.window_ms,
        stream_levels(&so) *
            ((so.window_ms ? so.window_ms : 10000) + 2.0 * (so.chunk_ms > 0 ? so.chunk_ms : 640)) *
            1e-3,
        stream_levels(&so), stream_levels(&so) == 1 ? "" : "s");
    fflush(stdout);
    stream_perf_row_t *rows = NULL;
    int n = 0, status = 0;
    hark_err_t err = {0};
    if (stream_perf_run(&so, &rows, &n, &err)) {
        fprintf(stderr, "hark perf: %s\n", err.msg);
        status = 1;
    }
    int best = -1;
    for (int i = 0; i < n; i++)
        if (rows[i].sustained)
            best = rows[i].row.concurrency;
    if (n && !so.fast)
        printf("Most streams sustained in real time (p99 chunk latency <= %.0f ms, no errors): "
               "%s%d\n",
               so.latency_limit_ms, best < 0 ? "none of the levels; lowest tried " : "",
               best < 0 ? rows[0].row.concurrency : best);
    if (A->csv && n) {
        FILE *f = fopen(A->csv, "w");
        if (!f || stream_perf_csv_write(f, rows, n) | fclose(f)) {
            fprintf(stderr, "hark perf: cannot write %s: %s\n", A->csv, strerror(errno));
            status = 1;
        }
    }
    if (A->plot && n) {
        perf_row_t *pr = hark_calloc((size_t)n, sizeof *pr);
        char title[300];
        snprintf(title, sizeof title, "hark perf --streaming: %s, %d ms chunks (x: streams)",
                 A->model, so.chunk_ms);
        for (int i = 0; pr && i < n; i++)
            pr[i] = rows[i].row;
        if (!pr || perf_plot(A->plot, pr, n, title, &err)) {
            fprintf(stderr, "hark perf: --plot %s\n", pr ? err.msg : "out of memory");
            status = 1;
        }
        hark_free(pr);
    }
    hark_free(rows);
    return status;
}

int cli_perf(int argc, char **argv)
{
    perf_args_t A = {.url = "localhost:8000",
                     .protocol = "http",
                     .dist = "constant",
                     .batch = 1,
                     .window = 5000,
                     .stab = 10,
                     .trials = 10,
                     .max_threads = 64,
                     .max_req = 100000,
                     .max_sec = 300,
                     .timeout = 60000,
                     .beam = -1,
                     .rate_hz = 16000,
                     .pace = "realtime",
                     .chunk_ms = 640,
                     .limit_ms = 200};
    int window_given = 0;
    const char **files = hark_calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    if (!files)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **str = NULL;
        double *num = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            perf_usage(stdout);
            hark_free(files);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model-name") || !strcmp(a, "--model"))
            str = &A.model;
        else if (!strcmp(a, "-x") || !strcmp(a, "--model-version"))
            str = &A.version;
        else if (!strcmp(a, "-u") || !strcmp(a, "--url"))
            str = &A.url;
        else if (!strcmp(a, "-i") || !strcmp(a, "--protocol"))
            str = &A.protocol;
        else if (!strcmp(a, "--concurrency-range"))
            str = &A.conc_range;
        else if (!strcmp(a, "--request-rate-range"))
            str = &A.rate_range;
        else if (!strcmp(a, "--request-distribution"))
            str = &A.dist;
        else if (!strcmp(a, "-f") || !strcmp(a, "--latency-report-file"))
            str = &A.csv;
        else if (!strcmp(a, "--plot"))
            str = &A.plot;
        else if (!strcmp(a, "--decoding-method"))
            str = &A.method;
        else if (!strcmp(a, "--input-data")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "hark perf: %s needs a value\n", a);
                hark_free(files);
                return 2;
            }
            files[nfiles++] = argv[++i];
            continue;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size"))
            num = &A.batch;
        else if (!strcmp(a, "-p") || !strcmp(a, "--measurement-interval"))
            num = &A.window, window_given = 1;
        else if (!strcmp(a, "-s") || !strcmp(a, "--stability-percentage"))
            num = &A.stab;
        else if (!strcmp(a, "-r") || !strcmp(a, "--max-trials"))
            num = &A.trials;
        else if (!strcmp(a, "--percentile"))
            num = &A.percentile;
        else if (!strcmp(a, "--max-threads"))
            num = &A.max_threads;
        else if (!strcmp(a, "--max-requests"))
            num = &A.max_req;
        else if (!strcmp(a, "--max-seconds"))
            num = &A.max_sec;
        else if (!strcmp(a, "--timeout-ms"))
            num = &A.timeout;
        else if (!strcmp(a, "--beam-size"))
            num = &A.beam;
        else if (!strcmp(a, "--sample-rate"))
            num = &A.rate_hz;
        else if (!strcmp(a, "--seed"))
            num = &A.seed;
        else if (!strcmp(a, "-a") || !strcmp(a, "--async") || !strcmp(a, "--sync"))
            continue; /* concurrency = connections, each with one request in flight */
        else if (!strcmp(a, "--audio-bytes")) {
            A.bytes_mode = 1;
            continue;
        } else if (!strcmp(a, "--streaming")) {
            A.streaming = 1;
            continue;
        } else if (!strcmp(a, "--pace"))
            str = &A.pace;
        else if (!strcmp(a, "--chunk-ms"))
            num = &A.chunk_ms;
        else if (!strcmp(a, "--latency-limit-ms"))
            num = &A.limit_ms;
        else {
            fprintf(stderr, "hark perf: unknown option or argument '%s'\n", a);
            perf_usage(stderr);
            hark_free(files);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "hark perf: %s needs a value\n", a);
            hark_free(files);
            return 2;
        }
        const char *v = argv[++i];
        if (str) {
            *str = v;
        } else {
            char *end;
            *num = strtod(v, &end);
            if (*end || !(*num >= 0)) {
                fprintf(stderr, "hark perf: %s needs a non-negative number, got '%s'\n", a, v);
                hark_free(files);
                return 2;
            }
        }
    }
    perf_opts_t o = {0};
    double cr[3] = {1, 1, 1}, rr[3] = {0, 0, 0};
    const char *bad = NULL;
    if (!A.model)
        bad = "needs -m MODEL";
    else if (strcmp(A.protocol, "http") != 0 && strcmp(A.protocol, "grpc") != 0)
        bad = "-i: the protocol is http or grpc";
    else if (A.conc_range && A.rate_range)
        bad = "takes --concurrency-range or --request-rate-range, not both";
    else if (A.conc_range && parse_range(A.conc_range, cr))
        bad = "--concurrency-range wants START[:END[:STEP]] with 0 < START <= END";
    else if (A.rate_range && parse_range(A.rate_range, rr))
        bad = "--request-rate-range wants START[:END[:STEP]] with 0 < START <= END";
    else if (strcmp(A.dist, "constant") && strcmp(A.dist, "poisson"))
        bad = "--request-distribution must be constant or poisson";
    else if (A.batch < 1 || A.batch > 4096 || A.window < 10 || A.trials < 3 || A.stab <= 0 ||
             A.percentile > 100 || A.rate_hz < 1000)
        bad = "needs -b >= 1, -p >= 10, -r >= 3, -s > 0, --percentile <= 100, --sample-rate "
              ">= 1000";
    else if (A.bytes_mode && !nfiles)
        bad = "--audio-bytes needs --input-data audio files";
    else if (A.streaming && (A.rate_range || A.bytes_mode || A.batch != 1))
        bad = "--streaming sends WAV chunks of one stream per request: no --request-rate-range, "
              "--audio-bytes or -b";
    else if (strcmp(A.pace, "realtime") && strcmp(A.pace, "fast"))
        bad = "--pace is realtime or fast";
    else if (A.streaming && (A.chunk_ms < 10 || A.chunk_ms > 60000 || A.limit_ms <= 0))
        bad = "--chunk-ms must be in [10, 60000] and --latency-limit-ms > 0";
    if (bad) {
        fprintf(stderr, "hark perf: %s\n", bad);
        perf_usage(stderr);
        hark_free(files);
        return 2;
    }
    hark_err_t err = {0};
    http_url_t url;
    if (http_url_parse(A.url, &url, &err)) {
        fprintf(stderr, "hark perf: -u %s\n", err.msg);
        hark_free(files);
        return 2;
    }
    /* the request bodies */
    int status = 0, n_rows = 0, nclips = 0, ninputs = 0;
    const int rate = (int)A.rate_hz, batch = (int)A.batch;
    clip_t *clips = hark_calloc((size_t)(nfiles ? nfiles : 1), sizeof *clips);
    perf_input_t *inputs = hark_calloc((size_t)(nfiles ? nfiles : 1), sizeof *inputs);
    uint8_t **owned = hark_calloc((size_t)(nfiles ? nfiles : 1), sizeof *owned);
    perf_row_t *rows = NULL;
    kserve_param_t params[2];
    int nparams = 0;
    if (A.method)
        params[nparams++] = (kserve_param_t){.name = "decoding_method", .str = A.method};
    if (A.beam >= 0)
        params[nparams++] = (kserve_param_t){.name = "beam_size", .num = (double)(int)A.beam};
    if (!clips || !inputs || !owned) {
        fprintf(stderr, "hark perf: out of memory\n");
        status = 1;
        goto done;
    }
    for (int i = 0; i < nfiles; i++) {
        size_t L = strlen(files[i]);
        if (L > 5 && !strcasecmp(files[i] + L - 5, ".json")) {
            if (json_input(files[i], rate, &inputs[ninputs], &owned[ninputs], &err)) {
                fprintf(stderr, "hark perf: --input-data %s\n", err.msg);
                status = 1;
                goto done;
            }
            ninputs++;
            continue;
        }
        clip_t *c = &clips[nclips];
        audio_opts_t ao = {.target_rate = rate};
        audio_t au;
        if (audio_decode_file(files[i], &ao, &au, &err)) {
            fprintf(stderr, "hark perf: --input-data %s\n", err.msg);
            status = 1;
            goto done;
        }
        c->path = files[i];
        c->pcm = au.samples;
        c->n = au.n;
        c->seconds = (double)au.n / rate;
        if (A.bytes_mode && !(c->raw = read_all(files[i], &c->raw_len, &err))) {
            fprintf(stderr, "hark perf: --input-data %s\n", err.msg);
            status = 1;
            nclips++;
            goto done;
        }
        nclips++;
    }
    if (A.streaming && ninputs) {
        fprintf(stderr, "hark perf: --streaming sends audio files, not JSON requests\n");
        status = 1;
        goto done;
    }
    if (!nfiles) { /* 1 s (streaming: 8 s) of quiet deterministic noise */
        clips[0].n = (size_t)rate * (A.streaming ? 8 : 1);
        clips[0].pcm = hark_malloc(sizeof(float) * clips[0].n);
        clips[0].seconds = (double)clips[0].n / rate;
        unsigned s = 1;
        for (size_t k = 0; clips[0].pcm && k < clips[0].n; k++) {
            s = s * 1664525u + 1013904223u;
            clips[0].pcm[k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.02f;
        }
        nclips = clips[0].pcm ? 1 : 0;
        if (!nclips) {
            fprintf(stderr, "hark perf: out of memory\n");
            status = 1;
            goto done;
        }
    }
    if (A.streaming) {
        status = run_streaming(&A, &url, &clips[0], window_given ? A.window : 10000, cr);
        goto done;
    }
    for (int i = 0; i < nclips; i++, ninputs++)
        if (audio_input(clips, nclips, i, batch, A.bytes_mode, params, nparams, &inputs[ninputs],
                        &owned[ninputs], &err)) {
            fprintf(stderr, "hark perf: %s\n", err.msg);
            status = 1;
            goto done;
        }
    o.host = url.host;
    o.port = url.port;
    o.prefix = url.prefix;
    o.grpc = !strcmp(A.protocol, "grpc");
    o.model = A.model;
    o.version = A.version;
    o.inputs = inputs;
    o.n_inputs = ninputs;
    o.conc_start = (int)cr[0];
    o.conc_end = (int)cr[1];
    o.conc_step = (int)cr[2];
    o.rate_start = A.rate_range ? rr[0] : 0;
    o.rate_end = rr[1];
    o.rate_step = rr[2];
    o.poisson = !strcmp(A.dist, "poisson");
    o.window_ms = (unsigned)A.window;
    o.threshold = A.stab / 100.0;
    o.max_trials = (int)A.trials;
    o.percentile = A.percentile;
    o.max_threads = (int)A.max_threads;
    o.max_requests = (int64_t)A.max_req;
    o.max_seconds = A.max_sec;
    o.timeout_ms = (unsigned)A.timeout;
    o.seed = (unsigned)A.seed;
    o.log = stdout;
    printf("*** Measurement Settings ***\n  Server: %s:%d%s  Model: %s\n  Batch size: %d\n"
           "  Inputs: %d request bod%s (%s)\n"
           "  Measurement window: %u msec; stable when the last 3 windows are within %g%% "
           "(throughput and %s latency), at most %d windows per level\n"
           "  Caps: %lld requests, %g s\n",
           url.host, url.port, url.prefix, A.model, batch, ninputs, ninputs == 1 ? "y" : "ies",
           nfiles ? (A.bytes_mode ? "AUDIO bytes" : "WAV + WAV_LENS, or JSON as given")
                  : "1 s synthetic noise as WAV + WAV_LENS",
           o.window_ms, A.stab, A.percentile > 0 ? "the chosen percentile" : "average",
           o.max_trials, (long long)o.max_requests, o.max_seconds);
    int levels;
    double lo_s, hi_s;
    perf_estimate(&o, &levels, &lo_s, &hi_s);
    printf("  Expected time: %d level%s of 3 to %d windows each: %.0f s to %.0f s%s\n\n", levels,
           levels == 1 ? "" : "s", o.max_trials > 0 ? o.max_trials : 10, lo_s, hi_s,
           hi_s >= (o.max_seconds > 0 ? o.max_seconds : 300) ? " (the --max-seconds cap)" : "");
    fflush(stdout);
    int rc = perf_run(&o, &rows, &n_rows, &err);
    if (rc) {
        fprintf(stderr, "hark perf: %s\n", err.msg);
        status = 1;
    }
    if (n_rows) {
        printf("Summary (latencies are client-side; Queue/Infer are the server's averages; "
               "Audio-s/s is the real-time factor as a speed)\n");
        perf_print_table(stdout, rows, n_rows);
    }
    if (A.csv && n_rows) {
        FILE *f = fopen(A.csv, "w");
        if (!f || perf_csv_write(f, rows, n_rows) | fclose(f)) {
            fprintf(stderr, "hark perf: cannot write %s: %s\n", A.csv, strerror(errno));
            status = 1;
        }
    }
    if (A.plot && n_rows) {
        char title[300];
        snprintf(title, sizeof title, "hark perf: %s at %s:%d (batch %d)", A.model, url.host,
                 url.port, batch);
        if (perf_plot(A.plot, rows, n_rows, title, &err)) {
            fprintf(stderr, "hark perf: --plot %s\n", err.msg);
            status = 1;
        }
    }
done:
    for (int i = 0; clips && i < (nfiles ? nfiles : 1); i++) {
        hark_free(clips[i].pcm);
        hark_free(clips[i].raw);
    }
    for (int i = 0; owned && i < ninputs; i++)
        hark_free(owned[i]);
    hark_free(owned);
    hark_free(inputs);
    hark_free(clips);
    hark_free(rows);
    hark_free(files);
    return status;
}
