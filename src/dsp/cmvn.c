/* cmvn.c — WeNet JSON global CMVN.  Tests: tests/dsp/test_cmvn.c */
#include "dsp/cmvn.h"

#include "core/alloc.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int cmvn_parse_json(const char *text, size_t len, const char *name, cmvn_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    int rc = HARK_OK;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root)
        return err_set(err, HARK_ERR_FORMAT, "%s: not valid JSON", name);
    cJSON *ms = cJSON_GetObjectItemCaseSensitive(root, "mean_stat");
    cJSON *vs = cJSON_GetObjectItemCaseSensitive(root, "var_stat");
    cJSON *fn = cJSON_GetObjectItemCaseSensitive(root, "frame_num");
    if (!cJSON_IsArray(ms) || !cJSON_IsArray(vs) || !cJSON_IsNumber(fn)) {
        rc = err_set(err, HARK_ERR_FORMAT,
                     "%s: expected mean_stat, var_stat (arrays) and frame_num", name);
        goto done;
    }
    int dim = cJSON_GetArraySize(ms);
    double frames = fn->valuedouble;
    if (dim < 1 || dim != cJSON_GetArraySize(vs)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: mean_stat has %d values, var_stat %d", name, dim,
                     cJSON_GetArraySize(vs));
        goto done;
    }
    if (!(frames > 0)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: frame_num must be positive", name);
        goto done;
    }
    out->mean = hark_malloc(sizeof(float) * (size_t)dim);
    out->istd = hark_malloc(sizeof(float) * (size_t)dim);
    if (!out->mean || !out->istd) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    out->dim = dim;
    for (int i = 0; i < dim; i++) {
        cJSON *m = cJSON_GetArrayItem(ms, i), *v = cJSON_GetArrayItem(vs, i);
        if (!cJSON_IsNumber(m) || !cJSON_IsNumber(v)) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s: element %d is not a number", name, i);
            goto done;
        }
        double mean = m->valuedouble / frames;
        double var = v->valuedouble / frames - mean * mean;
        if (var < 1e-20)
            var = 1e-20;
        out->mean[i] = (float)mean;
        out->istd[i] = (float)(1.0 / sqrt(var));
    }
done:
    cJSON_Delete(root);
    if (rc)
        cmvn_free(out);
    return rc;
}

int cmvn_load_json(const char *path, cmvn_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = HARK_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= (64u << 20)) {
                rc = err_set(err, HARK_ERR_TOO_LARGE, "%s: larger than 64 MiB", path);
                break;
            }
            cap = cap ? cap * 2 : 65536;
            char *nb = hark_realloc(buf, cap);
            if (!nb) {
                rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (!rc)
        rc = cmvn_parse_json(buf, len, path, out, err);
    hark_free(buf);
    return rc;
}

void cmvn_apply(const cmvn_t *c, float *feats, size_t frames)
{
    for (size_t t = 0; t < frames; t++) {
        float *row = feats + t * (size_t)c->dim;
        for (int i = 0; i < c->dim; i++)
            row[i] = (row[i] - c->mean[i]) * c->istd[i];
    }
}

void cmvn_free(cmvn_t *c)
{
    if (!c)
        return;
    hark_free(c->mean);
    hark_free(c->istd);
    c->mean = c->istd = NULL;
    c->dim = 0;
}
