/* Tests for tools/convert_jasper.py (run with /usr/bin/python3 on DLE's J1 golden checkpoint): the
 * model directory it writes, --triton-dle, --no-ema, and refusals by name (unsupported yaml
 * options, a corrupt checkpoint, a wrongly shaped or non-finite tensor). */
#include "test.h"

#include "hark.h"
#include "model/family.h"
#include "model/jasper/jasper.h"
#include "model/safetensors.h"
#include "support/golden_jasper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define PY "/usr/bin/python3"
#define CONVERTER "tools/convert_jasper.py"

static int have_python(void)
{
    return access(PY, X_OK) == 0 && access(CONVERTER, R_OK) == 0 &&
           system(PY " -c 'import torch, yaml, numpy' >/dev/null 2>&1") == 0;
}

#define NEED_CONVERTER()                                                                           \
    do {                                                                                           \
        NEED_SHARED(GOLDEN_JASPER "/" GOLDEN_JASPER_CKPT);                                         \
        if (!have_python())                                                                        \
            SKIP(PY " with torch, yaml and numpy (or " CONVERTER ") is absent");                   \
    } while (0)

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    if (s)
        s[got] = 0;
    fclose(f);
    return s;
}

/* Runs the converter (extra: more options); stdout+stderr into *log (caller frees). Returns the
 * exit status. */
static int convert(const char *ckpt, const char *yaml, const char *out, const char *extra,
                   const char *tmp, char **log)
{
    char cmd[4096], logp[600];
    snprintf(logp, sizeof logp, "%s/convert.log", tmp);
    snprintf(cmd, sizeof cmd,
             PY " " CONVERTER " --checkpoint '%s' --config '%s' --output '%s' %s "
                ">'%s' 2>&1",
             ckpt, yaml, out, extra ? extra : "", logp);
    int st = system(cmd);
    *log = slurp(logp);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(convert_jasper_golden)
{
    NEED_CONVERTER();
    const char *g = test_shared(GOLDEN_JASPER), *tmp = test_tmpdir(t);
    char ckpt[600], yaml[600], out[600], p[800], *log = NULL;
    snprintf(ckpt, sizeof ckpt, "%s/" GOLDEN_JASPER_CKPT, g);
    snprintf(yaml, sizeof yaml, "%s/" GOLDEN_JASPER_YAML, g);
    snprintf(out, sizeof out, "%s/jasper-ts-trace-ensemble", tmp);
    int rc = convert(ckpt, yaml, out, "--triton-dle --max-batch-size 8", tmp, &log);
    CHECKF(rc == 0, "converter failed: %s", log ? log : "");
    CHECK(log && strstr(log, "ema_state_dict"));
    free(log);
    snprintf(p, sizeof p, "%s/config.pbtxt", out);
    char *cfg = slurp(p);
    CHECK(cfg);
    CHECK(strstr(cfg, "\"AUDIO_SIGNAL\"") && strstr(cfg, "\"NUM_SAMPLES\"") &&
          strstr(cfg, "\"TRANSCRIPT\"") && strstr(cfg, "max_batch_size: 8") &&
          strstr(cfg, "string_value: \"jasper\"") && strstr(cfg, "KIND_CPU"));
    free(cfg);
    /* the directory loads: family from model.json, every tensor present with its shape */
    const family_t *f = NULL;
    hark_err_t err = {0};
    CHECK_OK(family_of_dir(out, 1, &f, &err));
    CHECK(f && !strcmp(f->name, "jasper"));
    jasper_model_t *m = NULL;
    CHECK_OK(jasper_load(out, 1, &m, &err));
    const jasper_config_t *c = jasper_config(m);
    CHECK_EQ_INT(c->arch, JASPER_ARCH_JASPER);
    CHECK_EQ_INT(c->n_blocks, 13);
    CHECK_EQ_INT(c->pad_leading, 16);
    CHECK_EQ_INT(c->pad_align, 16);
    CHECK_EQ_INT(c->n_labels, 28);
    CHECK_EQ_INT(c->blocks[10].n_panes, 10); /* dense residual: every earlier block's output */
    CHECK_EQ_INT(c->blocks[11].dilation, 2);
    CHECK(c->conv_masks);
    jasper_destroy(m);
    safetensors_t *st = NULL;
    snprintf(p, sizeof p, "%s/1/model.safetensors", out);
    CHECK_OK(st_open(p, &st, &err));
    CHECK(st_find(st, "encoder.layers.10.res.9.1.running_var") != NULL);
    CHECK(st_find(st, "encoder.layers.0.conv.1.num_batches_tracked") == NULL);
    CHECK(!strcmp(st_metadata(st, "state_dict"), "ema_state_dict"));
    st_close(st);
    /* --no-ema and --pad-leading */
    rc = convert(ckpt, yaml, out, "--no-ema --pad-leading 0", tmp, &log);
    CHECKF(rc == 0, "converter failed: %s", log ? log : "");
    free(log);
    CHECK_OK(jasper_load(out, 1, &m, &err));
    CHECK_EQ_INT(jasper_config(m)->pad_leading, 0);
    jasper_destroy(m);
}

/* A copy of the golden yaml with `from` replaced by `to` (first occurrence). */
static int yaml_variant(const char *tmp, const char *from, const char *to, char *out, size_t n)
{
    char src[600];
    snprintf(src, sizeof src, "%s/" GOLDEN_JASPER_YAML, test_shared(GOLDEN_JASPER));
    char *y = slurp(src);
    char *at = y ? strstr(y, from) : NULL;
    if (!at) {
        free(y);
        return -1;
    }
    snprintf(out, n, "%s/variant.yaml", tmp);
    FILE *f = fopen(out, "wb");
    if (!f) {
        free(y);
        return -1;
    }
    fwrite(y, 1, (size_t)(at - y), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(y);
    return 0;
}

TEST(convert_jasper_refuses_by_name)
{
    NEED_CONVERTER();
    const char *g = test_shared(GOLDEN_JASPER), *tmp = test_tmpdir(t);
    char ckpt[600], yaml[600], out[600], *log = NULL;
    snprintf(ckpt, sizeof ckpt, "%s/" GOLDEN_JASPER_CKPT, g);
    snprintf(out, sizeof out, "%s/out", tmp);
    static const struct {
        const char *from, *to, *want;
    } cases[] = {
        {"    window: hann\n", "    window: hamming\n", "filterbank_features.window"},
        {"    frame_splicing: &frame_splicing 1\n", "    frame_splicing: &frame_splicing 3\n",
         "frame_splicing"},
        {"    activation: relu\n", "    activation: selu\n", "encoder.activation"},
        {"      residual_dense: true\n", "      residual_dense: true\n      groups: 2\n",
         "encoder.blocks[1].groups"},
        {"      kernel_size: [11]\n      stride: [2]\n",
         "      kernel_size: [12]\n      stride: [2]\n", "encoder.blocks[0].kernel_size"},
        {"      filters: 32\n      repeat: 1\n",
         "      filters: 32\n      repeat: 1\n      "
         "separable: true\n",
         "encoder.blocks[0].separable"},
        {"      dropout: 0.2\n      residual: false\n",
         "      dropout: 0.2\n      residual: false\n      bogus: 1\n", "encoder.blocks[0].bogus"},
        /* a width the checkpoint does not have: the tensor is named with both shapes */
        {"      filters: 32\n      repeat: 1\n", "      filters: 40\n      repeat: 1\n",
         "tensor encoder.layers.0.conv.0.weight: expected shape [40, 64, 11]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECKF(yaml_variant(tmp, cases[i].from, cases[i].to, yaml, sizeof yaml) == 0,
               "case %zu: the golden yaml lacks the text to replace", i);
        int rc = convert(ckpt, yaml, out, NULL, tmp, &log);
        CHECKF(rc == 1 && log && strstr(log, cases[i].want), "case %zu (%s): rc %d, log: %s", i,
               cases[i].want, rc, log ? log : "");
        free(log);
        CHECK(access(out, F_OK) != 0); /* nothing written */
    }
    /* a corrupt checkpoint */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.pt", tmp);
    FILE *f = fopen(bad, "wb");
    CHECK(f);
    fputs("this is not a torch checkpoint", f);
    fclose(f);
    snprintf(yaml, sizeof yaml, "%s/" GOLDEN_JASPER_YAML, g);
    int rc = convert(bad, yaml, out, NULL, tmp, &log);
    CHECKF(rc == 1 && log && strstr(log, "cannot load checkpoint"), "rc %d: %s", rc,
           log ? log : "");
    free(log);
    /* a checkpoint with a NaN weight and one with a tensor missing */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch; c = torch.load('%s', map_location='cpu'); "
                "sd = c['ema_state_dict']; sd['decoder.layers.0.bias'][3] = float('nan'); "
                "torch.save(c, '%s/nan.pt'); del sd['encoder.layers.3.res.1.0.weight']; "
                "torch.save(c, '%s/missing.pt')\"",
             ckpt, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(bad, sizeof bad, "%s/nan.pt", tmp);
    rc = convert(bad, yaml, out, NULL, tmp, &log);
    CHECKF(rc == 1 && log && strstr(log, "decoder.layers.0.bias: holds NaN"), "rc %d: %s", rc,
           log ? log : "");
    free(log);
    snprintf(bad, sizeof bad, "%s/missing.pt", tmp);
    rc = convert(bad, yaml, out, NULL, tmp, &log);
    CHECKF(rc == 1 && log && strstr(log, "encoder.layers.3.res.1.0.weight: missing"), "rc %d: %s",
           rc, log ? log : "");
    free(log);
    CHECK(access(out, F_OK) != 0);
}
