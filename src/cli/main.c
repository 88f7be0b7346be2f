/* main.c — the hark command line: dispatches to subcommands (features, ...).
 * Tests: tests/cli/ (integration, through the built binary). */
#include "cli/cli.h"
#include "core/log.h"
#include "hark.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"bench", cli_bench, "engine-only speed of a model (real-time factor, latency, memory)"},
    {"features", cli_features, "compute speech features of an audio file (.npy output)"},
    {"transcribe", cli_transcribe, "recognize audio files with a converted model (text/JSON)"},
    {"inspect", cli_inspect, "print a converted model's architecture and sizes"},
};

static void usage(FILE *f)
{
    fprintf(f, "hark %s — speech inference server\n\nusage: hark <command> [options]\n\ncommands:\n",
            hark_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'hark <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
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
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "hark: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
