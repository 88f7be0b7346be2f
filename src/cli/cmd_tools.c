/* cmd_tools.c — `hark bench` and `hark inspect`: each finds the family of the model it is given
 * (model.json's "family", or the family that knows a --synthetic name) and hands it the command
 * line; what is timed or printed is the family's (the WeNet family's under src/model/wenet/).
 * Tests: tests/cli/test_cli.c */
#include "cli/cli.h"

#include "core/error.h"
#include "hark.h"
#include "model/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void list_families(FILE *f, int bench)
{
    for (const family_t *const *p = family_list(); *p; p++) {
        if (!(bench ? (*p)->bench : (*p)->inspect))
            continue;
        fprintf(f, "  %s", (*p)->name);
        if (bench && (*p)->bench_synthetic) {
            fprintf(f, " (--synthetic");
            for (const char *const *s = (*p)->bench_synthetic; *s; s++)
                fprintf(f, " %s", *s);
            fprintf(f, ")");
        }
        fprintf(f, "\n");
    }
}

/* dir: a model-repository entry (DIR/<version>/model.json), one of its version folders, or a
 * repository holding one model; *dir becomes the entry (the families read its highest version) */
static const family_t *family_for_dir(const char *cmd, char **dir)
{
    static char entry[4096];
    const family_t *f = NULL;
    hark_err_t err = {0};
    int version = 0;
    int rc = family_resolve_dir(*dir, entry, sizeof entry, &version, &err);
    if (!rc && version > 0 && version != family_latest_version(entry))
        fprintf(stderr, "hark %s: note: %s is version %d; %s reads the highest, %d\n", cmd, *dir,
                version, cmd, family_latest_version(entry));
    if (!rc)
        rc = family_of_dir(entry, 0, &f, &err);
    if (rc) {
        fprintf(stderr, "hark %s: %s\n", cmd, err.msg);
        return NULL;
    }
    *dir = entry;
    return f;
}

int cli_bench(int argc, char **argv)
{
    const char *synthetic = NULL;
    char **dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: hark bench --model DIR | --synthetic NAME [options of the family]\n"
                   "Times a model's engine; the options are the family's (hark bench --model "
                   "DIR --help).\nFamilies with a benchmark:\n");
            list_families(stdout, 1);
            for (const family_t *const *p = family_list(); *p; p++)
                if ((*p)->bench) {
                    printf("\n%s:\n", (*p)->name);
                    fflush(stdout);
                    (*p)->bench(argc, argv);
                }
            return 0;
        }
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            dir_arg = &argv[++i];
        else if (!strcmp(argv[i], "--synthetic") && i + 1 < argc)
            synthetic = argv[++i];
    }
    const family_t *f = NULL;
    if (dir_arg && !synthetic) {
        if (!(f = family_for_dir("bench", dir_arg)))
            return 1;
    } else if (synthetic) {
        for (const family_t *const *p = family_list(); *p && !f; p++)
            for (const char *const *s = (*p)->bench_synthetic; s && *s; s++)
                if (!strcmp(*s, synthetic))
                    f = *p;
        if (!f) {
            fprintf(stderr, "hark bench: --synthetic %s: no family knows it; the known ones:\n",
                    synthetic);
            list_families(stderr, 1);
            return 2;
        }
    } else {
        fprintf(stderr, "hark bench: give --model DIR or --synthetic NAME (hark bench --help)\n");
        return 2;
    }
    if (!f->bench) {
        fprintf(stderr, "hark bench: the %s family has no benchmark\n", f->name);
        return 2;
    }
    return f->bench(argc, argv);
}

int cli_inspect(int argc, char **argv)
{
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *o = argc == 2 ? stdout : stderr;
        fprintf(o,
                "usage: hark inspect MODEL_DIR\n\n"
                "Prints a converted model's architecture, tensor and parameter counts and "
                "file size.\nMODEL_DIR is a model-repository entry (its highest version folder is "
                "read), a version folder, or a repository holding one model. Families that can be "
                "inspected:\n");
        list_families(o, 0);
        return argc == 2 ? 0 : 2;
    }
    const family_t *f = family_for_dir("inspect", &argv[1]);
    if (!f)
        return 1;
    if (!f->inspect) {
        fprintf(stderr, "hark inspect: the %s family cannot be inspected\n", f->name);
        return 1;
    }
    return f->inspect(argc, argv);
}
