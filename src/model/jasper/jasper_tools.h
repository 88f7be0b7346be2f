/* jasper_tools.h — the jasper family's command-line tools: `hark bench` (jasper_bench.c).
 * Tests: tests/model/jasper/test_jasper_family.c */
#ifndef HARK_MODEL_JASPER_TOOLS_H
#define HARK_MODEL_JASPER_TOOLS_H

#include "model/jasper/jasper.h"

/* `hark bench` for the family (argv[0] the subcommand); the process exit status. */
int jasper_bench_main(int argc, char **argv);

/* The names --synthetic takes, NULL-terminated. */
extern const char *const jasper_synthetic_names[];

/* DLE's full-width config `name` (jasper10x5dr, quartznet15x5: the yamls under DLE's configs/)
 * into c (labels lent: static); -1 for another name. */
int jasper_synthetic_config(const char *name, jasper_config_t *c);

#endif
