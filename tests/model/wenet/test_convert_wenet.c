/* Tests for tools/convert_wenet.py (run with /usr/bin/python3 on the golden checkpoint), the model
 * directory it writes (read back with st_open + wenet_config_load), and `hark inspect`. */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GOLDEN "golden/wenet_u2pp_conformer_small"
#define PY "/usr/bin/python3"
#define CONVERTER "tools/convert_wenet.py"

static int have_python(void)
{
    return access(PY, X_OK) == 0 && access(CONVERTER, R_OK) == 0 &&
           system(PY " -c 'import torch, yaml, numpy' >/dev/null 2>&1") == 0;
}

#define NEED_CONVERTER()                                                                           \
    do {                                                                                           \
        NEED_SHARED(GOLDEN "/final.pt");                                                           \
        if (!have_python())                                                                        \
            SKIP(PY " with torch, yaml and numpy (or " CONVERTER ") is absent");                   \
    } while (0)

/* Runs the converter; stdout+stderr go to `log`. Returns the exit status (or -1). */
static int convert(const char *yaml, const char *units, const char *out, const char *log)
{
    const char *g = test_shared(GOLDEN);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             PY " " CONVERTER " --checkpoint '%s/final.pt' --config '%s' --units '%s' "
                "--cmvn '%s/global_cmvn' --output '%s' >'%s' 2>&1",
             g, yaml, units, g, out, log);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Reads a whole small text file (caller frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

TEST(convert_wenet_golden)
{
    NEED_CONVERTER();
    const char *g = test_shared(GOLDEN);
    char out[512], log[600], yaml[600], units[600], p[700];
    snprintf(out, sizeof out, "%s/wenet_small", test_tmpdir(t));
    snprintf(log, sizeof log, "%s/convert.log", test_tmpdir(t));
    snprintf(yaml, sizeof yaml, "%s/train.yaml", g);
    snprintf(units, sizeof units, "%s/units.txt", g);
    int rc = convert(yaml, units, out, log);
    if (rc != 0) {
        char *s = slurp(log);
        test_fail(t, __FILE__, __LINE__, "converter exited %d: %s", rc, s ? s : "");
        free(s);
        return;
    }

    /* config.pbtxt */
    snprintf(p, sizeof p, "%s/config.pbtxt", out);
    char *pb = slurp(p);
    CHECK(pb);
    int pb_ok = strstr(pb, "name: \"wenet_small\"") && strstr(pb, "backend: \"hark\"") &&
                strstr(pb, "max_batch_size: 64") && strstr(pb, "TYPE_STRING") &&
                strstr(pb, "string_value: \"wenet_u2\"") &&
                strstr(pb, "string_value: \"attention_rescoring\"") &&
                strstr(pb, "preferred_batch_size: [ 32, 64 ]") && strstr(pb, "KIND_GPU");
    free(pb);
    CHECK(pb_ok);

    /* model.json */
    wenet_config_t c;
    hark_err_t err = {0};
    CHECKF(wenet_config_load(out, &c, &err) == HARK_OK, "%s", err.msg);
    CHECK(c.d_model == 256 && c.n_heads == 4 && c.ffn_dim == 1024 && c.n_blocks == 3);
    CHECK(c.subsample == SUBSAMPLE_CONV2D && c.pos == POS_REL && c.causal && c.cnn_kernel == 15);
    CHECK(c.cnn_norm == CNN_NORM_LAYER && c.activation == ACT_SWISH && c.macaron);
    CHECK(c.decoder == DECODER_BITRANSFORMER && c.dec_blocks == 1 && c.dec_r_blocks == 1);
    CHECK(c.vocab_size == 5002 && c.sos == 5001 && c.eos == 5001 && c.blank == 0);
    CHECK(c.has_cmvn && c.max_len == 5000 && c.use_dynamic_chunk && c.static_chunk_size == 0);
    CHECK(c.ctc_weight == 0.5f && c.reverse_weight == 0.3f);

    /* model.safetensors against state_dict_index.json */
    safetensors_t *st = NULL;
    snprintf(p, sizeof p, "%s/1/model.safetensors", out);
    CHECKF(st_open(p, &st, &err) == HARK_OK, "%s", err.msg);
    CHECK(!strcmp(st_metadata(st, "format"), "hark"));
    CHECK(!strcmp(st_metadata(st, "family"), "wenet_u2"));
    CHECK(st_metadata(st, "converter_version") != NULL);
    snprintf(p, sizeof p, "%s/state_dict_index.json", g);
    char *idx_text = slurp(p);
    cJSON *idx = cJSON_Parse(idx_text);
    free(idx_text);
    CHECK(cJSON_IsArray(idx));
    size_t kept = 0, dropped = 0;
    const cJSON *e;
    int bad = 0;
    cJSON_ArrayForEach(e, idx)
    {
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        const cJSON *shape = cJSON_GetObjectItem(e, "shape");
        const st_tensor_t *tt = st_find(st, name);
        if (ends_with(name, ".pe") || ends_with(name, ".num_batches_tracked")) {
            dropped++;
            if (tt) {
                test_fail(t, __FILE__, __LINE__, "%s should have been dropped", name);
                bad = 1;
            }
            continue;
        }
        kept++;
        int ok = tt && tt->dtype == ST_F32 && tt->ndim == cJSON_GetArraySize(shape);
        for (int d = 0; ok && d < tt->ndim; d++)
            ok = tt->shape[d] == (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
        if (!ok) {
            test_fail(t, __FILE__, __LINE__, "tensor %s missing or wrong shape/dtype", name);
            bad = 1;
        }
    }
    cJSON_Delete(idx);
    CHECK(!bad);
    CHECK_EQ_INT(dropped, 3); /* three pe tables; layer_norm conv modules have no BN counters */
    CHECK_EQ_INT(st_count(st), kept);

    /* CMVN: bit-exact with the golden mean/istd */
    static const char *cm[2][2] = {{"encoder.global_cmvn.mean", "/goldens/cmvn_mean.npy"},
                                   {"encoder.global_cmvn.istd", "/goldens/cmvn_istd.npy"}};
    for (int i = 0; i < 2; i++) {
        npy_array_t a;
        snprintf(p, sizeof p, "%s%s", g, cm[i][1]);
        CHECK_OK(npy_load_f32(p, &a));
        const st_tensor_t *tt = st_find(st, cm[i][0]);
        int same = tt && tt->count == a.count && !memcmp(tt->data, a.data, a.count * 4);
        npy_free(&a);
        CHECKF(same, "%s differs from %s", cm[i][0], cm[i][1]);
    }

    /* Tensor contents: float64 sums of every tensor, computed by torch from final.pt. */
    snprintf(p, sizeof p, "%s/sums.txt", test_tmpdir(t));
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             PY " -c \"import torch,sys\n"
                "sd=torch.load(sys.argv[1],map_location='cpu')\n"
                "for k,v in sd.items(): print(k, repr(v.double().sum().item()), "
                "repr(v.double().abs().max().item() if v.numel() else 0.0))\" "
                "'%s/final.pt' > '%s'",
             g, p);
    CHECK(system(cmd) == 0);
    FILE *f = fopen(p, "r");
    CHECK(f);
    char name[256];
    double sum, amax;
    size_t checked = 0;
    while (fscanf(f, "%255s %lf %lf", name, &sum, &amax) == 3) {
        const st_tensor_t *tt = st_find(st, name);
        if (!tt)
            continue;
        const float *v = tt->data;
        double s = 0, m = 0;
        for (size_t i = 0; i < tt->count; i++) {
            s += v[i];
            m = fabs(v[i]) > m ? fabs(v[i]) : m;
        }
        if (m != amax || fabs(s - sum) > 1e-9 * (1 + fabs(sum))) {
            test_fail(t, __FILE__, __LINE__, "%s: sum %.17g vs %.17g, max %.9g vs %.9g", name, s,
                      sum, m, amax);
            bad = 1;
        }
        checked++;
    }
    fclose(f);
    CHECK(!bad);
    CHECK_EQ_INT(checked, kept);
    st_close(st);

    /* hark inspect */
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' 2>&1", test_hark_bin(), out);
    FILE *pp = popen(cmd, "r");
    CHECK(pp);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, pp);
    buf[n] = 0;
    int st_rc = pclose(pp);
    CHECKF(WIFEXITED(st_rc) && WEXITSTATUS(st_rc) == 0, "hark inspect failed: %s", buf);
    CHECKF(strstr(buf, "15,118,750") && strstr(buf, "tensors              185") &&
               strstr(buf, "bitransformer") && strstr(buf, "layer_norm") &&
               strstr(buf, "5002 units"),
           "unexpected inspect output:\n%s", buf);
}

/* Writes the golden train.yaml with `from` replaced by `to` into the tmpdir; returns its path. */
static const char *edited_yaml(test_ctx_t *t, const char *from, const char *to)
{
    static char path[600];
    char src[600];
    snprintf(src, sizeof src, "%s/train.yaml", test_shared(GOLDEN));
    char *y = slurp(src);
    if (!y)
        return NULL;
    char *at = strstr(y, from);
    snprintf(path, sizeof path, "%s/edited.yaml", test_tmpdir(t));
    FILE *f = fopen(path, "w");
    if (at) {
        fwrite(y, 1, (size_t)(at - y), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    }
    fclose(f);
    free(y);
    return at ? path : NULL;
}

/* Converts with an edited yaml/units and expects failure with every needle in the output. */
static int refused(test_ctx_t *t, const char *yaml, const char *units, const char *n1,
                   const char *n2)
{
    char out[512], log[600];
    snprintf(out, sizeof out, "%s/refused", test_tmpdir(t));
    snprintf(log, sizeof log, "%s/refused.log", test_tmpdir(t));
    int rc = convert(yaml, units, out, log);
    char *s = slurp(log);
    int ok = rc != 0 && s && strstr(s, n1) && (!n2 || strstr(s, n2)) && access(out, F_OK) != 0;
    if (!ok)
        test_fail(t, __FILE__, __LINE__,
                  "rc %d, wanted failure naming '%s'%s%s (and no output "
                  "dir); got: %s",
                  rc, n1, n2 ? " and " : "", n2 ? n2 : "", s ? s : "");
    free(s);
    return ok;
}

TEST(convert_wenet_refuses_by_name)
{
    NEED_CONVERTER();
    char units[600];
    snprintf(units, sizeof units, "%s/units.txt", test_shared(GOLDEN));
    const char *y;
    /* options hark does not implement: refused from the yaml alone, naming the option */
    CHECK((y = edited_yaml(t, "cnn_module_norm: layer_norm", "cnn_module_norm: rms_norm")));
    CHECK(refused(t, y, units, "cnn_module_norm", "'rms_norm' is not supported"));
    CHECK((y = edited_yaml(t, "encoder: conformer", "encoder: squeezeformer")));
    CHECK(refused(t, y, units, "encoder: 'squeezeformer' is not supported", NULL));
    CHECK((y = edited_yaml(t, "  causal: true", "  causal: true\n  n_kv_head: 1\n  head_dim: 64")));
    CHECK(refused(t, y, units, "encoder_conf.n_kv_head", NULL));
    CHECK((y = edited_yaml(t, "  causal: true", "  causal: true\n  query_bias: false")));
    CHECK(refused(t, y, units, "encoder_conf.query_bias", NULL));
    CHECK(
        (y = edited_yaml(t, "  r_num_blocks: 1", "  r_num_blocks: 1\n  tie_word_embedding: true")));
    CHECK(refused(t, y, units, "decoder_conf.tie_word_embedding", NULL));
    CHECK((y = edited_yaml(t, "  causal: true", "  causal: true\n  some_new_option: 3")));
    CHECK(refused(t, y, units, "encoder_conf.some_new_option: unknown option", NULL));
    /* a yaml that does not describe the checkpoint: the tensor, expected and actual shape */
    CHECK((y = edited_yaml(t, "  linear_units: 1024\n  normalize_before",
                           "  linear_units: 2048\n  normalize_before")));
    CHECK(refused(t, y, units,
                  "encoder.encoders.0.feed_forward.w_1.weight: expected shape [2048, 256]",
                  "[1024, 256]"));
    /* a unit table that does not match the vocabulary */
    char bad_units[600], yaml[600];
    snprintf(bad_units, sizeof bad_units, "%s/units_bad.txt", test_tmpdir(t));
    FILE *f = fopen(bad_units, "w");
    fputs("<blank> 0\n<unk> 1\nX 3\n", f);
    fclose(f);
    snprintf(yaml, sizeof yaml, "%s/train.yaml", test_shared(GOLDEN));
    CHECK(refused(t, yaml, bad_units, "units_bad.txt:3", "expected 2"));
    f = fopen(bad_units, "w");
    fputs("<blank> 0\n<unk> 1\n", f);
    fclose(f);
    CHECK(refused(t, yaml, bad_units, "2 units", "5002"));
}
