/* fastspeech_tools.h — the fastspeech family's command-line tools: `hark bench`
 * (fastspeech_bench.c). Tests: tests/model/fastspeech/test_fastspeech_family.c */
#ifndef HARK_MODEL_FASTSPEECH_TOOLS_H
#define HARK_MODEL_FASTSPEECH_TOOLS_H

/* `hark bench` for the family (argv[0] the subcommand); the process exit status. */
int fastspeech_bench_main(int argc, char **argv);

#endif
