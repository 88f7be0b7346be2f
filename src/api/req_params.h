/* req_params.h — a request's options as the family reads them (family_params_t), with owned
 * strings: from a KServe request's "parameters" object or copied from a caller's list. Shared by
 * the service's recognition and synthesis jobs. Tests: tests/server/test_server.py (parameters
 * reach the families), tests/api/test_req_params.c */
#ifndef HARK_API_REQ_PARAMS_H
#define HARK_API_REQ_PARAMS_H

#include "core/error.h"
#include "model/family.h"

struct cJSON;

typedef struct {
    family_param_t *p; /* (n) keys and values point into strs */
    char **strs;       /* (2 n) owned */
    int n;
} req_params_t;

/* Adds the members of a JSON object (strings as they are, numbers as written — integers without
 * a fraction —, booleans "true"/"false"; objects, arrays and nulls are not options and are left
 * out). obj may be NULL. HARK_ERR_NOMEM. */
int req_params_from_json(req_params_t *o, const struct cJSON *obj, hark_err_t *err);
/* Copies a list (p may be NULL). HARK_ERR_NOMEM. */
int req_params_copy(req_params_t *o, const family_params_t *p, hark_err_t *err);
/* The list as the family takes it (lent from o). */
family_params_t req_params_view(const req_params_t *o);
void req_params_free(req_params_t *o); /* zeroes; NULL-safe */

#endif
