/* req_params.c — see req_params.h */
#include "api/req_params.h"

#include "core/alloc.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

static int grow(req_params_t *o, int n, hark_err_t *err)
{
    family_param_t *p = hark_realloc(o->p, (size_t)(o->n + n + 1) * sizeof *p);
    if (p)
        o->p = p;
    char **s = hark_realloc(o->strs, (size_t)(o->n + n + 1) * 2 * sizeof *s);
    if (s)
        o->strs = s;
    return p && s ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "out of memory");
}

static int add(req_params_t *o, const char *key, const char *value, hark_err_t *err)
{
    int k = o->n;
    o->strs[2 * k] = hark_strdup(key);
    o->strs[2 * k + 1] = hark_strdup(value ? value : "");
    if (!o->strs[2 * k] || !o->strs[2 * k + 1]) {
        hark_free(o->strs[2 * k]);
        hark_free(o->strs[2 * k + 1]);
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    }
    o->p[k] = (family_param_t){o->strs[2 * k], o->strs[2 * k + 1]};
    o->n++;
    return HARK_OK;
}

int req_params_from_json(req_params_t *o, const cJSON *obj, hark_err_t *err)
{
    int n = 0;
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next)
        n++;
    if (!n)
        return HARK_OK;
    int rc = grow(o, n, err);
    for (const cJSON *c = obj->child; c && !rc; c = c->next) {
        char num[64];
        const char *v = NULL;
        if (cJSON_IsString(c)) {
            v = c->valuestring;
        } else if (cJSON_IsBool(c)) {
            v = cJSON_IsTrue(c) ? "true" : "false";
        } else if (cJSON_IsNumber(c)) {
            double d = c->valuedouble;
            if (d == floor(d) && fabs(d) < 9e15)
                snprintf(num, sizeof num, "%.0f", d);
            else
                snprintf(num, sizeof num, "%.17g", d);
            v = num;
        }
        if (v && c->string)
            rc = add(o, c->string, v, err);
    }
    return rc;
}

int req_params_copy(req_params_t *o, const family_params_t *p, hark_err_t *err)
{
    if (!p || p->n <= 0)
        return HARK_OK;
    int rc = grow(o, p->n, err);
    for (int k = 0; k < p->n && !rc; k++)
        rc = add(o, p->p[k].key, p->p[k].value, err);
    return rc;
}

family_params_t req_params_view(const req_params_t *o)
{
    return (family_params_t){o->p, o->n};
}

void req_params_free(req_params_t *o)
{
    if (!o)
        return;
    for (int i = 0; i < 2 * o->n; i++)
        hark_free(o->strs[i]);
    hark_free(o->strs);
    hark_free(o->p);
    *o = (req_params_t){0};
}
