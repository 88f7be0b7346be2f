/* icefall_gen.c — generated zipformer models for the tests (icefall_gen.h). */
#include "support/icefall_gen.h"

#include "test.h"

#include "core/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int icefall_gen_model(const char *dir, const char *name, const char *flags,
                      const char *convert_flags, char *log, size_t nlog)
{
    return icefall_gen_model_ex(dir, name, flags, NULL, convert_flags, log, nlog);
}

/* script: the checkpoint maker under tests/model/icefall; recipe: the converter's --recipe;
 * model_flags go to both, ckpt_flags to the maker, convert_flags to the converter */
static int gen(const char *script, const char *recipe, const char *dir, const char *name,
               const char *model_flags, const char *ckpt_flags, const char *convert_flags,
               char *log, size_t nlog)
{
    char tok[1024], out[1100], cmd[8192];
    log[0] = 0;
    const char *py = test_python("torch, numpy");
    if (!py) {
        snprintf(log, nlog, "no python3 with torch and numpy");
        return -1;
    }
    snprintf(tok, sizeof tok, "%s/tokens.txt", dir);
    FILE *f = fopen(tok, "w");
    if (!f) {
        snprintf(log, nlog, "cannot write %s", tok);
        return -1;
    }
    fprintf(f, "<blk> 0\n<sos/eos> 1\n<unk> 2\n");
    for (int i = 3; i < 500; i++)
        fprintf(f, "%sw%d %d\n", i % 3 ? "" : "\xe2\x96\x81", i, i);
    fclose(f);
    snprintf(out, sizeof out, "%s/%s.log", dir, name);
    snprintf(cmd, sizeof cmd,
             "(%s tests/model/icefall/%s '%s/%s.pt' %s %s && "
             "%s tools/convert_icefall.py --recipe %s --checkpoint "
             "'%s/%s.pt' --tokens '%s' --output '%s/%s' %s %s) > '%s' 2>&1",
             py, script, dir, name, model_flags, ckpt_flags ? ckpt_flags : "", py, recipe, dir,
             name, tok, dir, name, model_flags, convert_flags ? convert_flags : "", out);
    int st = system(cmd);
    if (st == 0)
        return 0;
    f = fopen(out, "r");
    size_t k = f ? fread(log, 1, nlog - 1, f) : 0;
    log[k] = 0;
    if (f)
        fclose(f);
    return -1;
}

int icefall_gen_model_ex(const char *dir, const char *name, const char *flags,
                         const char *ckpt_flags, const char *convert_flags, char *log, size_t nlog)
{
    return gen("zipformer_random_ckpt.py", "zipformer", dir, name, flags, ckpt_flags, convert_flags,
               log, nlog);
}

int icefall_gen_conformer(const char *dir, const char *name, const char *ckpt_flags,
                          const char *convert_flags, char *log, size_t nlog)
{
    return gen("conformer_random_ckpt.py", "pruned_transducer_stateless3", dir, name, "",
               ckpt_flags, convert_flags, log, nlog);
}

float *icefall_gen_pcm(size_t n, unsigned seed)
{
    float *x = hark_malloc(sizeof(float) * (n ? n : 1));
    float fr = 0, amp = 0, nz = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 3200 == 0) {
            fr = 0.02f + 0.15f * (test_randf(&seed) + 1);
            amp = 0.25f * (test_randf(&seed) + 1);
            nz = 0.1f * (test_randf(&seed) + 1);
        }
        x[i] = amp * sinf(fr * (float)i) + nz * test_randf(&seed);
    }
    return x;
}

double icefall_gen_rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (isnan(e))
            return NAN;
        d = e > d ? e : d;
        mx = fabs((double)b[i]) > mx ? fabs((double)b[i]) : mx;
    }
    return mx > 0 ? d / mx : d;
}
