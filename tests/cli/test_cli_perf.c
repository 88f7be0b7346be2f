/* test_cli_perf.c — integration tests of `hark perf` and `hark transcribe --url` against a real
 * `hark serve` (golden WeNet model, loopback, ephemeral port): CSV structure and sanity
 * (monotone percentiles, counts that add up, server times present), and remote transcripts equal
 * to local ones. Never asserts speed. Skips when the golden model cannot be had. */
#include "test.h"

#include "hark.h"
#include "net/http_client.h"
#include "support/golden_model.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int run_cmd(test_ctx_t *t, const char *cmd, const char *name, char *out, size_t nout)
{
    char full[8192], path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(t), name);
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, path);
    int st = system(full);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, nout - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Starts `hark serve` on the repository; returns its pid and port (0 on failure, why in msg). */
static pid_t serve_start(const char *repo, const char *log, int *port, char *msg, size_t nmsg)
{
    int fds[2];
    if (pipe(fds))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        FILE *lf = fopen(log, "w");
        if (lf)
            dup2(fileno(lf), 2);
        close(fds[0]);
        execl(test_hark_bin(), test_hark_bin(), "serve", "--model-repository", repo, "--http-port",
              "0", "--metrics-port", "0", "--grpc-port", "-1", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[1024];
    size_t n = 0;
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    while (n < sizeof line - 1 && poll(&p, 1, 60000) > 0) {
        ssize_t r = read(fds[0], line + n, 1);
        if (r <= 0 || line[n] == '\n')
            break;
        n++;
    }
    line[n] = 0;
    close(fds[0]); /* the server's later stdout writes go nowhere (it ignores SIGPIPE or logs) */
    const char *u = strstr(line, "http://127.0.0.1:");
    *port = u ? atoi(u + 17) : 0;
    if (!*port) {
        snprintf(msg, nmsg, "no startup line from hark serve: '%.200s'", line);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return 0;
    }
    return pid;
}

static void serve_stop(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int wait_ready(int port)
{
    http_client_opts_t o = {.timeout_ms = 2000, .connect_timeout_ms = 1000};
    http_client_t *c;
    if (http_client_create("127.0.0.1", port, &o, &c, NULL))
        return -1;
    int ok = 0;
    for (int i = 0; i < 600 && !ok; i++) {
        http_response_t r;
        ok = !http_client_request(c, "GET", "/v2/health/ready", NULL, 0, NULL, 0, &r, NULL) &&
             r.status == 200;
        if (!ok) {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
    }
    http_client_destroy(c);
    return ok ? 0 : -1;
}

/* splits a CSV line in place; returns the number of fields */
static int split(char *s, char **f, int max)
{
    int n = 0;
    s[strcspn(s, "\r\n")] = 0;
    while (n < max) {
        f[n++] = s;
        char *c = strchr(s, ',');
        if (!c)
            break;
        *c = 0;
        s = c + 1;
    }
    return n;
}

static int col(char **hdr, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(hdr[i], name))
            return i;
    return -1;
}

TEST(cli_perf_and_transcribe_url_against_hark_serve)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    NEED_SHARED(GOLDEN_WENET "/wavs/cards-001.wav");
    const char *tmp = test_tmpdir(t);
    char cmd[8192], out[65536], repo[600], log[600], wav[1024], wav2[1024];
    snprintf(repo, sizeof repo, "%s/repo", tmp);
    snprintf(log, sizeof log, "%s/serve.log", tmp);
    snprintf(wav, sizeof wav, "%s/wavs/cards-001.wav", test_shared(GOLDEN_WENET));
    snprintf(wav2, sizeof wav2, "%s/wavs/jfk.wav", test_shared(GOLDEN_WENET));
    /* the copy's config.pbtxt names its folder (Triton's rule, which hark serve follows) */
    snprintf(
        cmd, sizeof cmd,
        "mkdir -p %s && cp -r %s/m %s/wenet && sed -i '0,/^name: /s/^name: .*/name: \"wenet\"/' "
        "%s/wenet/config.pbtxt",
        repo, dir, repo, repo);
    CHECK(system(cmd) == 0);
    int port = 0;
    pid_t pid = serve_start(repo, log, &port, why, sizeof why);
    CHECKF(pid > 0, "%s", why);
    if (wait_ready(port)) {
        serve_stop(pid);
        CHECKF(0, "hark serve not ready within 60 s (log %s)", log);
    }
    char csv[600];
    snprintf(csv, sizeof csv, "%s/out.csv", tmp);
    snprintf(cmd, sizeof cmd,
             "%s perf -m wenet -u 127.0.0.1:%d --concurrency-range 1:2:1 -p 1000 --max-seconds 20 "
             "-f %s --input-data %s",
             test_hark_bin(), port, csv, wav);
    int rc = run_cmd(t, cmd, "perf.out", out, sizeof out);
    /* the remote and local transcripts (same decoding method on both sides) */
    char remote[8192], local[8192];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --url http://127.0.0.1:%d -m wenet --decoding-method ctc_greedy_search "
             "%s %s",
             test_hark_bin(), port, wav, wav2);
    int rrc = run_cmd(t, cmd, "remote.out", remote, sizeof remote);
    char rerr[4096];
    snprintf(cmd, sizeof cmd,
             "%s transcribe --url 127.0.0.1:%d -m wenet --decoding-method viterbi %s",
             test_hark_bin(), port, wav);
    int erc = run_cmd(t, cmd, "remote_err.out", rerr, sizeof rerr);
    serve_stop(pid);
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --decoding-method ctc_greedy_search %s %s 2>/dev/null",
             test_hark_bin(), dir, wav, wav2);
    int lrc = run_cmd(t, cmd, "local.out", local, sizeof local);

    CHECKF(rc == 0, "hark perf failed (%d):\n%s", rc, out);
    CHECKF(strstr(out, "Request concurrency: 1") && strstr(out, "Request concurrency: 2") &&
               strstr(out, "Concurrency") && strstr(out, "Infer/s"),
           "%s", out);
    FILE *f = fopen(csv, "r");
    CHECK(f != NULL);
    char lines[3][2048];
    int nl = 0;
    while (nl < 3 && fgets(lines[nl], sizeof lines[nl], f))
        nl++;
    fclose(f);
    CHECKF(nl == 3, "%d CSV lines", nl);
    char *h[64];
    int nh = split(lines[0], h, 64);
    int c_conc = col(h, nh, "concurrency"), c_thr = col(h, nh, "throughput_infer_per_sec"),
        c_aud = col(h, nh, "throughput_audio_sec_per_sec"), c_avg = col(h, nh, "latency_avg_us"),
        c_p50 = col(h, nh, "latency_p50_us"), c_p90 = col(h, nh, "latency_p90_us"),
        c_p95 = col(h, nh, "latency_p95_us"), c_p99 = col(h, nh, "latency_p99_us"),
        c_q = col(h, nh, "server_queue_us"), c_inf = col(h, nh, "server_compute_infer_us"),
        c_rtf = col(h, nh, "rtf"), c_req = col(h, nh, "requests"), c_err = col(h, nh, "errors"),
        c_win = col(h, nh, "window_s"), c_b = col(h, nh, "batch");
    CHECK(c_conc >= 0 && c_thr >= 0 && c_aud >= 0 && c_avg >= 0 && c_p50 >= 0 && c_p90 >= 0 &&
          c_p95 >= 0 && c_p99 >= 0 && c_q >= 0 && c_inf >= 0 && c_rtf >= 0 && c_req >= 0 &&
          c_err >= 0 && c_win >= 0 && c_b >= 0);
    for (int l = 1; l < 3; l++) {
        char *v[64];
        CHECK_EQ_INT(split(lines[l], v, 64), nh);
        double x[64];
        for (int i = 0; i < nh; i++)
            x[i] = atof(v[i]);
        CHECK_EQ_INT(x[c_conc], l);
        CHECK(x[c_req] >= 1 && x[c_err] == 0 && x[c_win] > 0 && x[c_b] == 1);
        CHECKF(x[c_p50] > 0 && x[c_p50] <= x[c_p90] && x[c_p90] <= x[c_p95] && x[c_p95] <= x[c_p99],
               "percentiles %g %g %g %g", x[c_p50], x[c_p90], x[c_p95], x[c_p99]);
        CHECK(x[c_avg] > 0 && x[c_avg] <= x[c_p99] * 1.0001);
        /* throughput x window = completed inferences (up to the CSV's rounding) */
        double done = x[c_thr] * x[c_win];
        CHECKF(fabs(done - x[c_req]) <= 0.01 * x[c_req] + 0.01, "%g x %g vs %g requests", x[c_thr],
               x[c_win], x[c_req]);
        /* every request carries the same clip: audio throughput / infer throughput = its length */
        CHECK(x[c_aud] > 0 && x[c_rtf] > 0 && fabs(x[c_rtf] - x[c_aud]) <= 0.001 * x[c_aud]);
        CHECKF(x[c_q] >= 0 && x[c_inf] > 0, "server times %g %g", x[c_q], x[c_inf]);
        CHECK(x[c_inf] <= x[c_avg] * 1.05); /* the server's part fits in the client's latency */
    }
    CHECKF(rrc == 0 && lrc == 0, "remote %d: %s\nlocal %d: %s", rrc, remote, lrc, local);
    CHECKF(!strcmp(remote, local), "remote:\n%s\nlocal:\n%s", remote, local);
    CHECK(strstr(remote, "cards-001.wav ") != NULL);
    CHECKF(erc == 1 && strstr(rerr, "HTTP 400") && strstr(rerr, "viterbi"), "%d: %s", erc, rerr);
}

TEST(cli_perf_usage_errors)
{
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s perf", test_hark_bin());
    CHECK(run_cmd(t, cmd, "a", out, sizeof out) == 2);
    CHECK(strstr(out, "-m MODEL") != NULL);
    snprintf(cmd, sizeof cmd, "%s perf -m x --concurrency-range 3:1", test_hark_bin());
    CHECK(run_cmd(t, cmd, "b", out, sizeof out) == 2);
    snprintf(cmd, sizeof cmd, "%s perf -m x -i udp", test_hark_bin()); /* http or grpc */
    CHECK(run_cmd(t, cmd, "c", out, sizeof out) == 2);
    CHECK(strstr(out, "http or grpc") != NULL);
    /* gRPC, nothing listening: exit 1 with a connect error */
    snprintf(cmd, sizeof cmd, "%s perf -m x -i grpc -u 127.0.0.1:1 -p 100 --max-seconds 5",
             test_hark_bin());
    CHECK(run_cmd(t, cmd, "e", out, sizeof out) == 1);
    CHECKF(strstr(out, "connect") != NULL, "%s", out);
    /* nothing listening on the port: exit 1 with a connect error, quickly */
    snprintf(cmd, sizeof cmd, "%s perf -m x -u 127.0.0.1:1 -p 100 --max-seconds 5",
             test_hark_bin());
    CHECK(run_cmd(t, cmd, "d", out, sizeof out) == 1);
    CHECKF(strstr(out, "connect") != NULL, "%s", out);
    /* the settings say how long the sweep will take (issue 23): 4 levels of 3 to 10 windows of
     * 2 s; capped by --max-seconds */
    snprintf(cmd, sizeof cmd, "%s perf -m x -u 127.0.0.1:1 --concurrency-range 1:4 -p 2000",
             test_hark_bin());
    CHECK(run_cmd(t, cmd, "g", out, sizeof out) == 1);
    CHECKF(strstr(out, "Expected time: 4 levels of 3 to 10 windows each: 24 s to 80 s\n"), "%s",
           out);
    snprintf(cmd, sizeof cmd,
             "%s perf -m x -u 127.0.0.1:1 --concurrency-range 1:64:8 -p 5000 --max-seconds 100",
             test_hark_bin());
    CHECK(run_cmd(t, cmd, "h", out, sizeof out) == 1);
    CHECKF(strstr(out, "Expected time: 8 levels of 3 to 10 windows each: 100 s to 100 s (the "
                       "--max-seconds cap)"),
           "%s", out);
    /* --streaming: its own option checks; nothing listening is exit 1 naming the connection */
    snprintf(cmd, sizeof cmd, "%s perf -m x --streaming -b 4", test_hark_bin());
    CHECK(run_cmd(t, cmd, "f", out, sizeof out) == 2);
    CHECKF(strstr(out, "--streaming") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s perf -m x --streaming --pace slow", test_hark_bin());
    CHECK(run_cmd(t, cmd, "g", out, sizeof out) == 2);
    snprintf(cmd, sizeof cmd, "%s perf -m x --streaming --chunk-ms 5", test_hark_bin());
    CHECK(run_cmd(t, cmd, "h", out, sizeof out) == 2);
    snprintf(cmd, sizeof cmd, "%s perf -m x --streaming -u 127.0.0.1:1 -p 200 --chunk-ms 100",
             test_hark_bin());
    CHECK(run_cmd(t, cmd, "i", out, sizeof out) == 1);
    CHECKF(strstr(out, "connect") != NULL, "%s", out);
}
