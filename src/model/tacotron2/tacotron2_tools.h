/* tacotron2_tools.h — the tacotron2 family's command-line tools: `hark bench`
 * (tacotron2_bench.c). Tests: tests/model/tacotron2/test_tacotron2_family.c */
#ifndef HARK_MODEL_TACOTRON2_TOOLS_H
#define HARK_MODEL_TACOTRON2_TOOLS_H

/* `hark bench` for the family (argv[0] the subcommand); the process exit status. */
int tacotron2_bench_main(int argc, char **argv);

#endif
