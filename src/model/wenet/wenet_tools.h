/* wenet_tools.h — the WeNet family's command-line tools, reached through its family table
 * (family_t.bench / .inspect): `hark bench` (wenet_bench.c) and `hark inspect`
 * (wenet_inspect.c). Tests: tests/cli/test_cli.c, tests/model/wenet/test_convert_wenet.c */
#ifndef HARK_MODEL_WENET_TOOLS_H
#define HARK_MODEL_WENET_TOOLS_H

/* argv as given to `hark bench` / `hark inspect` (argv[0] the subcommand); exit status. */
int wenet_bench_main(int argc, char **argv);
int wenet_inspect_main(int argc, char **argv);
/* `hark bench --synthetic NAME` names this family knows, NULL-terminated. */
extern const char *const wenet_synthetic_models[];

#endif
