/* cmd_features.c — `hark features`: placeholder until the features module lands. */
#include "cli/cli.h"

#include <stdio.h>

int cli_features(int argc, char **argv)
{
    fprintf(stderr, "hark features: not built yet\n");
    return 1;
}
