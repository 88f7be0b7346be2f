/* main.c — the hark command line: dispatches to subcommands (features, ...).
 * Tests: tests/cli/ (integration, through the built binary). */
#include "cli/cli.h"
#include "core/log.h"
#include "gpu/gpu.h"
#include "hark.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *openblas_get_corename(void);

/* Debian's OpenBLAS 0.3.21 picks its oldest x86 kernels ("Prescott", SSE3) on CPUs whose CPUID
 * model it does not know — virtual machines that report a generic Xeon — which makes every GEMM
 * 4-5x slower although the CPU has AVX-512. OpenBLAS reads OPENBLAS_CORETYPE when it is loaded,
 * before main, so hark sets it from the CPU's features and re-executes itself once. */
static void blas_coretype_fixup(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE") || getenv("HARK_NO_BLAS_FIXUP"))
        return;
    const char *core = openblas_get_corename();
    if (!core || strcmp(core, "Prescott") != 0)
        return;
    const char *want = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        want = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        want = "Haswell";
    if (!want)
        return;
    setenv("OPENBLAS_CORETYPE", want, 1);
    execv("/proc/self/exe", argv); /* on failure, carry on with the slow kernels */
}

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"bench", cli_bench, "engine-only speed of a model (real-time factor, latency, memory)"},
    {"features", cli_features, "compute speech features of an audio file (.npy output)"},
    {"serve", cli_serve, "serve a model repository (KServe v2 HTTP, OpenAI audio API, metrics)"},
    {"transcribe", cli_transcribe, "recognize audio files with a converted model (text/JSON)"},
    {"inspect", cli_inspect, "print a converted model's architecture and sizes"},
    {"perf", cli_perf, "load-test a KServe v2 server (perf_analyzer style: throughput, latency)"},
    {"speak", cli_speak, "synthesise speech from text (FastSpeech + HiFi-GAN, WAV output)"},
    {"vocode", cli_vocode, "run a vocoder on a mel .npy, or resynthesise a WAV through it"},
    {"vad", cli_vad,
     "speech segments of audio files (Silero VAD; text or JSON with probabilities)"},
};

static void usage(FILE *f)
{
    fprintf(f,
            "hark %s — speech inference server\n\nusage: hark <command> [options]\n\ncommands:\n",
            hark_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'hark <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    blas_coretype_fixup(argv);
    /* a peer that resets a connection must cost an EPIPE on that write, not the process (the
     * server's loops and the clients of perf/transcribe --url write sockets with writev) */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("hark %s\n", hark_version());
        gpu_print_report(stdout); /* the CUDA archs built in, each GPU's path (issue 24) */
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "hark: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
