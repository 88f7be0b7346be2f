/* access.c — Triton's restricted API groups: parsing "apis:key=value" and checking a request's
 * header. Tests: tests/server/test_model_control.py */
#include "server/access.h"

#include "hark.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const char *const group_names[API_GROUPS] = {
    "health",           "metadata",   "inference", "shared-memory", "model-config",
    "model-repository", "statistics", "trace",     "logging"};

const char *access_group_name(api_group_t g)
{
    return (unsigned)g < API_GROUPS ? group_names[g] : "?";
}

int access_add(access_t *a, access_transport_t t, const char *spec, hark_err_t *err)
{
    const char *opt = t == ACCESS_GRPC ? "grpc-restricted-protocol" : "http-restricted-api";
    const char *what = t == ACCESS_GRPC ? "protocol" : "api";
    const char *colon = strchr(spec, ':'), *eq = colon ? strchr(colon + 1, '=') : NULL;
    if (!colon || !eq || colon == spec || eq == colon + 1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "--%s option format is '<%ss>:<key>=<value>'. Got %s", opt, what, spec);
    const char *key = colon + 1, *value = eq + 1;
    size_t kl = (size_t)(eq - key), vl = strlen(value);
    size_t pre = t == ACCESS_GRPC ? strlen(GRPC_RESTRICTED_PREFIX) : 0;
    if (pre + kl >= sizeof a->rule[0][0].header || vl >= sizeof a->rule[0][0].value)
        return err_set(err, HARK_ERR_INVALID_ARG, "--%s: key or value too long", opt);
    for (const char *p = spec; p < colon;) {
        const char *e = memchr(p, ',', (size_t)(colon - p));
        size_t len = e ? (size_t)(e - p) : (size_t)(colon - p);
        int g = 0;
        while (g < API_GROUPS &&
               !(strlen(group_names[g]) == len && !strncmp(group_names[g], p, len)))
            g++;
        if (g == API_GROUPS)
            return err_set(err, HARK_ERR_INVALID_ARG, "unknown restricted %s '%.*s' (one of: %s)",
                           what, (int)len, p,
                           "health, metadata, inference, shared-memory, model-config, "
                           "model-repository, statistics, trace, logging");
        if (a->rule[t][g].on)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "restricted %s '%s' can not be specified in multiple config groups",
                           what, group_names[g]);
        a->rule[t][g].on = 1;
        snprintf(a->rule[t][g].header, sizeof a->rule[t][g].header, "%s%.*s",
                 t == ACCESS_GRPC ? GRPC_RESTRICTED_PREFIX : "", (int)kl, key);
        if (t == ACCESS_GRPC) /* gRPC metadata keys are lower case on the wire */
            for (char *c = a->rule[t][g].header; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        snprintf(a->rule[t][g].value, sizeof a->rule[t][g].value, "%s", value);
        p += len + (e ? 1 : 0);
        if (!e)
            break;
    }
    return HARK_OK;
}

const char *access_header(const access_t *a, access_transport_t t, api_group_t g)
{
    return a && (unsigned)g < API_GROUPS && a->rule[t][g].on ? a->rule[t][g].header : NULL;
}

int access_allows(const access_t *a, access_transport_t t, api_group_t g, const char *got,
                  char *msg, size_t n)
{
    const char *h = access_header(a, t, g);
    if (!h || (got && !strcmp(got, a->rule[t][g].value)))
        return 1;
    snprintf(msg, n, "This %s is restricted, expecting header '%s'",
             t == ACCESS_GRPC ? "protocol" : "API", h);
    return 0;
}
