/* bench_loopback.c — the floor under `hark serve`'s per-request overhead on this host: a blocking
 * client sends a request body of the bench's size (default 320,000 bytes: 5 s of 16 kHz float32)
 * over loopback TCP to a thread that reads it whole and answers 64 bytes — what `hark perf` and
 * the server do per request, minus HTTP, parsing, queues and inference. Prints one JSON line:
 * round trip avg/p50/p99 in microseconds, and CPU microseconds per request on each side.
 * Usage: build/bench/bench_loopback [--bytes N] [--requests N]   (run by bench/serve_bench.sh) */
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static size_t g_bytes = 320000;
static int g_requests = 2000;
static double g_server_cpu;

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *server_main(void *arg)
{
    int fd = accept(*(int *)arg, NULL, NULL);
    char *buf = malloc(g_bytes), reply[64] = {0};
    double c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (int r = 0; fd >= 0 && buf && r < g_requests + 100; r++) {
        for (size_t got = 0; got < g_bytes;) {
            ssize_t n = read(fd, buf + got, g_bytes - got);
            if (n <= 0)
                goto out;
            got += (size_t)n;
        }
        if (write(fd, reply, sizeof reply) != (ssize_t)sizeof reply)
            break;
        if (r == 99) /* after the warm-up */
            c0 = now(CLOCK_THREAD_CPUTIME_ID);
    }
    g_server_cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes"))
            g_bytes = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--requests"))
            g_requests = atoi(argv[i + 1]);
    }
    if (g_bytes < 1 || g_requests < 10) {
        fprintf(stderr, "usage: bench_loopback [--bytes N>0] [--requests N>=10]\n");
        return 2;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        perror("bench_loopback: listen");
        return 1;
    }
    pthread_t th;
    pthread_create(&th, NULL, server_main, &ls);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        perror("bench_loopback: connect");
        return 1;
    }
    char *body = malloc(g_bytes), reply[64];
    double *lat = malloc(sizeof(double) * (size_t)g_requests), c0 = 0, sum = 0;
    if (!body || !lat)
        return 1;
    memset(body, 0x3c, g_bytes);
    for (int r = 0; r < g_requests + 100; r++) {
        if (r == 100)
            c0 = now(CLOCK_THREAD_CPUTIME_ID);
        double t0 = now(CLOCK_MONOTONIC);
        for (size_t sent = 0; sent < g_bytes;) {
            ssize_t n = write(fd, body + sent, g_bytes - sent);
            if (n <= 0) {
                perror("bench_loopback: write");
                return 1;
            }
            sent += (size_t)n;
        }
        for (size_t got = 0; got < sizeof reply;) {
            ssize_t n = read(fd, reply + got, sizeof reply - got);
            if (n <= 0) {
                perror("bench_loopback: read");
                return 1;
            }
            got += (size_t)n;
        }
        if (r >= 100) {
            lat[r - 100] = (now(CLOCK_MONOTONIC) - t0) * 1e6;
            sum += lat[r - 100];
        }
    }
    double client_cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    close(fd);
    pthread_join(th, NULL);
    close(ls);
    qsort(lat, (size_t)g_requests, sizeof(double), cmp);
    printf("{\"bench\": \"loopback\", \"bytes\": %zu, \"requests\": %d, \"rtt_avg_us\": %.1f, "
           "\"rtt_p50_us\": %.1f, \"rtt_p99_us\": %.1f, \"client_cpu_us\": %.1f, "
           "\"server_cpu_us\": %.1f}\n",
           g_bytes, g_requests, sum / g_requests, lat[g_requests / 2],
           lat[(size_t)(g_requests * 0.99)], client_cpu / g_requests * 1e6,
           g_server_cpu / g_requests * 1e6);
    free(body);
    free(lat);
    return 0;
}
