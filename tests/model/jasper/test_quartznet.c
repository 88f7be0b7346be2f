/* QuartzNet on hark's CPU path (src/model/jasper/jasper.c) against tests/model/jasper/
 * quartznet_ref.py: a small seeded QuartzNet (separable blocks, stride-2 separable prologue,
 * kernel_size_factor, dilated separable epilogue) converted with tools/convert_jasper.py, and an
 * independent float64 torch implementation of DLE's description, with conv masks on and off. No
 * QuartzNet golden from DLE itself is shared (Q1 is held out); the Jasper goldens confirm the
 * shared description for the dense path. Tolerance: log-probs atol 1e-4 (float32 vs float64 over
 * 6 blocks; measured 9.5e-7), greedy ids equal wherever the reference's top two differ by > 1e-3.
 */
#include "test.h"

#include "core/npy.h"
#include "hark.h"
#include "model/jasper/jasper.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int meta_int(const char *path, const char *key)
{
    FILE *f = fopen(path, "rb");
    char buf[256] = "";
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    cJSON *j = cJSON_Parse(buf);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    int r = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(j);
    return r;
}

TEST(quartznet_matches_reference)
{
    if (access("/usr/bin/python3", X_OK) ||
        system("/usr/bin/python3 -c 'import torch, yaml, numpy' >/dev/null 2>&1"))
        SKIP("/usr/bin/python3 with torch, yaml and numpy is absent");
    const char *tmp = test_tmpdir(t);
    char cmd[1024], p[700];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 tests/model/jasper/quartznet_ref.py '%s' >'%s/ref.log' 2>&1", tmp,
             tmp);
    CHECKF(system(cmd) == 0, "quartznet_ref.py failed (see %s/ref.log)", tmp);
    npy_array_t in;
    snprintf(p, sizeof p, "%s/input.npy", tmp);
    CHECK_OK(npy_load_f32(p, &in));
    for (int masked = 1; masked >= 0; masked--) {
        const char *sub = masked ? "masked" : "nomask";
        char dir[700];
        snprintf(dir, sizeof dir, "%s/%s/m", tmp, sub);
        jasper_model_t *m = NULL;
        jasper_worker_t *w = NULL;
        hark_err_t err = {0};
        CHECK_OK(jasper_load(dir, 1, &m, &err));
        const jasper_config_t *c = jasper_config(m);
        CHECK_EQ_INT(c->arch, JASPER_ARCH_QUARTZNET);
        CHECK_EQ_INT(c->pad_leading, 0); /* QuartzNet's inference.py has none */
        CHECK_EQ_INT(c->blocks[3].kernel, 11);
        CHECK(c->blocks[1].separable && !c->blocks[5].separable && !c->blocks[1].dense);
        CHECK_EQ_INT(c->conv_masks, masked);
        CHECK_OK(jasper_worker_create(m, 2.0, &w, &err));
        npy_array_t ref;
        snprintf(p, sizeof p, "%s/%s/log_probs.npy", tmp, sub);
        CHECK_OK(npy_load_f32(p, &ref));
        snprintf(p, sizeof p, "%s/%s/meta.json", tmp, sub);
        int t_in = (int)in.shape[0], len_in = meta_int(p, "len_in"), V = jasper_vocab(m);
        int T = jasper_frames_out(m, t_in), len_out = 0;
        CHECK_EQ_INT(T, ref.shape[0]);
        float *lp = calloc((size_t)T * V, sizeof(float));
        CHECK_OK(jasper_forward(w, in.data, t_in, len_in, lp, &len_out, NULL, NULL, &err));
        CHECK_EQ_INT(len_out, meta_int(p, "len_out"));
        double d = test_max_abs_diff(lp, ref.data, (size_t)T * V);
        int id_diff = 0;
        const float *r = ref.data;
        for (int s = 0; s < T; s++) {
            int a = 0, b = 0;
            for (int v = 1; v < V; v++) {
                if (lp[(size_t)s * V + v] > lp[(size_t)s * V + a])
                    a = v;
                if (r[(size_t)s * V + v] > r[(size_t)s * V + b])
                    b = v;
            }
            float second = -INFINITY;
            for (int v = 0; v < V; v++)
                if (v != b && r[(size_t)s * V + v] > second)
                    second = r[(size_t)s * V + v];
            id_diff += a != b && r[(size_t)s * V + b] - second > 1e-3f;
        }
        printf("quartznet (%s): log_probs max|d| %.3g over %d frames, %d ids differ\n", sub, d, T,
               id_diff);
        CHECKF(d <= 1e-4, "%s: log_probs max |d| %.3g", sub, d);
        CHECK_EQ_INT(id_diff, 0);
        free(lp);
        npy_free(&ref);
        jasper_worker_destroy(w);
        jasper_destroy(m);
    }
    npy_free(&in);
}
