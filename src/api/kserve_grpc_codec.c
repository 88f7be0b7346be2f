/* kserve_grpc_codec.c — the socket-free half of KServe v2 over gRPC: framing, grpc-timeout,
 * status mapping, protobuf ↔ kserve conversions (see kserve_grpc.h).
 * Tests: tests/api/test_kserve_grpc.c; fuzz: tests/fuzz/fuzz_grpc.c */
#include "api/kserve_grpc.h"

#include "core/alloc.h"
#include "hark.h"
#include "grpc_service.pb-c.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int grpc_status_of(int st)
{
    switch (st) {
    case HARK_OK:
        return GRPC_STATUS_OK;
    case HARK_ERR_INVALID_ARG:
    case HARK_ERR_TOO_LARGE:
    case HARK_ERR_FORMAT:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case HARK_ERR_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case HARK_ERR_UNAVAILABLE:
    case HARK_ERR_CLOSED:
    case HARK_ERR_AGAIN: /* a full queue: Triton's UNAVAILABLE, which its clients retry */
        return GRPC_STATUS_UNAVAILABLE;
    case HARK_ERR_EXHAUSTED:
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case HARK_ERR_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case HARK_ERR_CANCELLED:
        return GRPC_STATUS_CANCELLED;
    case HARK_ERR_UNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

int grpc_parse_timeout(const char *v, size_t n, uint64_t *ns)
{
    /* TimeoutValue: 1 to 8 ASCII digits; TimeoutUnit: H M S m u n */
    if (n < 2 || n > 9)
        return HARK_ERR_INVALID_ARG;
    uint64_t x = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return HARK_ERR_INVALID_ARG;
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    uint64_t mul;
    switch (v[n - 1]) {
    case 'H':
        mul = 3600000000000ull;
        break;
    case 'M':
        mul = 60000000000ull;
        break;
    case 'S':
        mul = 1000000000ull;
        break;
    case 'm':
        mul = 1000000ull;
        break;
    case 'u':
        mul = 1000ull;
        break;
    case 'n':
        mul = 1;
        break;
    default:
        return HARK_ERR_INVALID_ARG;
    }
    *ns = x > UINT64_MAX / mul ? UINT64_MAX : x * mul;
    return HARK_OK;
}

size_t grpc_percent_encode(const char *msg, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (!cap)
        return 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            if (o + 1 >= cap)
                break;
            out[o++] = (char)*p;
        } else {
            if (o + 3 >= cap)
                break;
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = 0;
    return o;
}

int grpc_frame_next(const uint8_t *buf, size_t len, size_t max, const uint8_t **msg,
                    size_t *msg_len, size_t *consumed, hark_err_t *err)
{
    if (len < GRPC_PREFIX)
        return 0;
    if (buf[0] > 1)
        return err_set(err, HARK_ERR_INVALID_ARG, "gRPC message flag byte %u is neither 0 nor 1",
                       buf[0]);
    if (buf[0] == 1)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "compressed gRPC messages are not supported (send grpc-encoding identity)");
    size_t n = (size_t)buf[1] << 24 | (size_t)buf[2] << 16 | (size_t)buf[3] << 8 | buf[4];
    if (n > max)
        return err_set(err, HARK_ERR_TOO_LARGE,
                       "gRPC message of %zu bytes exceeds the server's limit of %zu bytes", n, max);
    if (len - GRPC_PREFIX < n)
        return 0;
    *msg = buf + GRPC_PREFIX;
    *msg_len = n;
    *consumed = GRPC_PREFIX + n;
    return 1;
}

uint8_t *grpc_frame_pack(const ProtobufCMessage *m, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n > UINT32_MAX)
        return NULL;
    uint8_t *b = hark_malloc(GRPC_PREFIX + n);
    if (!b)
        return NULL;
    b[0] = 0;
    b[1] = (uint8_t)(n >> 24);
    b[2] = (uint8_t)(n >> 16);
    b[3] = (uint8_t)(n >> 8);
    b[4] = (uint8_t)n;
    protobuf_c_message_pack(m, b + GRPC_PREFIX);
    *len = GRPC_PREFIX + n;
    return b;
}

/* ---- ModelInferRequest → kserve_request_t -------------------------------------------------- */

static int bad(hark_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(hark_err_t *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = HARK_ERR_INVALID_ARG;
    }
    return HARK_ERR_INVALID_ARG;
}

static int nomem(hark_err_t *err)
{
    return err_set(err, HARK_ERR_NOMEM, "out of memory while converting the gRPC request");
}

/* one InferParameter as a JSON value (NULL: no value set, or out of memory: *oom) */
static cJSON *param_json(const Inference__InferParameter *p, int *oom)
{
    cJSON *v = NULL;
    if (!p)
        return NULL;
    switch (p->parameter_choice_case) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
        v = cJSON_CreateBool(p->bool_param);
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        v = cJSON_CreateNumber((double)p->int64_param);
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
        v = cJSON_CreateNumber((double)p->uint64_param);
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
        v = cJSON_CreateNumber(p->double_param);
        break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        v = cJSON_CreateString(p->string_param ? p->string_param : "");
        break;
    default:
        return NULL;
    }
    if (!v)
        *oom = 1;
    return v;
}

/* typed `contents` → raw little-endian bytes (BYTES: packed elements) in the arena */
static int contents_to_raw(const Inference__InferTensorContents *c, kserve_tensor_t *t, arena_t *a,
                           hark_err_t *err)
{
    size_t n;
    size_t esz = kserve_dtype_size(t->dtype);
    const char *nm = t->name;
#define NEED(field)                                                                                \
    do {                                                                                           \
        n = c->n_##field;                                                                          \
        if ((int64_t)n != t->count)                                                                \
            return bad(err,                                                                        \
                       "input '%s': contents." #field " has %zu elements, shape says %" PRId64,    \
                       nm, n, t->count);                                                           \
    } while (0)
    uint8_t *out = NULL;
    if (t->dtype != KSERVE_BYTES) {
        if (!(out = arena_alloc(a, (size_t)t->count * esz + 1, 16)))
            return nomem(err);
    }
    switch (t->dtype) {
    case KSERVE_BOOL:
        NEED(bool_contents);
        for (size_t i = 0; i < n; i++)
            out[i] = c->bool_contents[i] ? 1 : 0;
        break;
    case KSERVE_INT8:
    case KSERVE_INT16:
    case KSERVE_INT32:
        NEED(int_contents);
        for (size_t i = 0; i < n; i++) {
            int32_t v = c->int_contents[i];
            if (t->dtype == KSERVE_INT8) {
                int8_t x = (int8_t)v;
                memcpy(out + i, &x, 1);
            } else if (t->dtype == KSERVE_INT16) {
                int16_t x = (int16_t)v;
                memcpy(out + 2 * i, &x, 2);
            } else {
                memcpy(out + 4 * i, &v, 4);
            }
        }
        break;
    case KSERVE_INT64:
        NEED(int64_contents);
        if (n) /* an empty repeated field has a NULL array */
            memcpy(out, c->int64_contents, n * 8);
        break;
    case KSERVE_UINT8:
    case KSERVE_UINT16:
    case KSERVE_UINT32:
        NEED(uint_contents);
        for (size_t i = 0; i < n; i++) {
            uint32_t v = c->uint_contents[i];
            if (t->dtype == KSERVE_UINT8) {
                out[i] = (uint8_t)v;
            } else if (t->dtype == KSERVE_UINT16) {
                uint16_t x = (uint16_t)v;
                memcpy(out + 2 * i, &x, 2);
            } else {
                memcpy(out + 4 * i, &v, 4);
            }
        }
        break;
    case KSERVE_UINT64:
        NEED(uint64_contents);
        if (n) /* an empty repeated field has a NULL array */
            memcpy(out, c->uint64_contents, n * 8);
        break;
    case KSERVE_FP32:
        NEED(fp32_contents);
        if (n) /* an empty repeated field has a NULL array */
            memcpy(out, c->fp32_contents, n * 4);
        break;
    case KSERVE_FP64:
        NEED(fp64_contents);
        if (n) /* an empty repeated field has a NULL array */
            memcpy(out, c->fp64_contents, n * 8);
        break;
    case KSERVE_BYTES: {
        NEED(bytes_contents);
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            if (c->bytes_contents[i].len > UINT32_MAX)
                return bad(err, "input '%s': a BYTES element is over 4 GiB", nm);
            total += 4 + c->bytes_contents[i].len;
        }
        if (!(out = arena_alloc(a, total + 1, 16)))
            return nomem(err);
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t l = (uint32_t)c->bytes_contents[i].len;
            memcpy(out + pos, &l, 4);
            if (l)
                memcpy(out + pos + 4, c->bytes_contents[i].data, l);
            pos += 4 + l;
        }
        t->data = out;
        t->size = total;
        return HARK_OK;
    }
    default:
        return bad(err, "input '%s': %s data must be sent in raw_input_contents", nm,
                   kserve_dtype_name(t->dtype));
    }
#undef NEED
    t->data = out;
    t->size = (size_t)t->count * esz;
    return HARK_OK;
}

/* the value of parameter `name` in a parameters map (entries of any of the generated map types),
 * the last one given; NULL when absent */
#define FIND_PARAM(list, n, name, out)                                                             \
    do {                                                                                           \
        (out) = NULL;                                                                              \
        for (size_t k_ = 0; k_ < (n); k_++)                                                        \
            if ((list)[k_] && (list)[k_]->key && !strcmp((list)[k_]->key, (name)))                 \
                (out) = (list)[k_]->value;                                                         \
    } while (0)

static int pb_u64(const Inference__InferParameter *p, uint64_t *v)
{
    if (p && p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
        p->int64_param >= 0) {
        *v = (uint64_t)p->int64_param;
        return 0;
    }
    if (p &&
        p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM) {
        *v = p->uint64_param;
        return 0;
    }
    return -1;
}

/* Triton's shared memory parameters of an input or output (as kserve.c reads them from JSON):
 * *region NULL when there are none */
static int shm_from_pb(const Inference__InferParameter *r, const Inference__InferParameter *o,
                       const Inference__InferParameter *b, const char *what, const char *nm,
                       const char **region, uint64_t *offset, uint64_t *size, hark_err_t *err)
{
    *region = NULL;
    *offset = *size = 0;
    if (!r) {
        if (o || b)
            return bad(err, "%s '%s': shared_memory_%s without shared_memory_region", what, nm,
                       o ? "offset" : "byte_size");
        return HARK_OK;
    }
    if (r->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM ||
        !r->string_param || !r->string_param[0])
        return bad(err, "%s '%s': shared_memory_region must be a non-empty string_param", what, nm);
    if (!b)
        return bad(err, "%s '%s': shared_memory_region needs shared_memory_byte_size", what, nm);
    if (pb_u64(b, size))
        return bad(err, "%s '%s': shared_memory_byte_size must be a non-negative int64_param", what,
                   nm);
    if (o && pb_u64(o, offset))
        return bad(err, "%s '%s': shared_memory_offset must be a non-negative int64_param", what,
                   nm);
    *region = r->string_param;
    return HARK_OK;
}

static int request_from_pb(const Inference__ModelInferRequest *pb, kserve_request_t *r,
                           hark_err_t *err)
{
    r->id = pb->id ? pb->id : "";
    r->has_id = r->id[0] != 0;
    /* parameters → a JSON object, read by the same code as the HTTP path */
    cJSON *params = NULL;
    if (pb->n_parameters) {
        if (!(params = cJSON_CreateObject()))
            return nomem(err);
        r->json = params;
        for (size_t i = 0; i < pb->n_parameters; i++) {
            const Inference__ModelInferRequest__ParametersEntry *e = pb->parameters[i];
            int oom = 0;
            if (!e || !e->key)
                continue;
            cJSON *v = param_json(e->value, &oom);
            if (oom)
                return nomem(err);
            if (!v)
                continue;
            cJSON_DeleteItemFromObjectCaseSensitive(params, e->key); /* the last one wins */
            if (!cJSON_AddItemToObject(params, e->key, v)) {
                cJSON_Delete(v);
                return nomem(err);
            }
        }
    }
    int rc = kserve_request_finish_params(r, params, err);
    if (rc)
        return rc;
    /* an integer sequence_id exactly (the JSON number above holds 53 bits) */
    for (size_t i = 0; r->has_sequence_id && !r->sequence_id_str && i < pb->n_parameters; i++) {
        const Inference__ModelInferRequest__ParametersEntry *e = pb->parameters[i];
        if (!e || !e->key || !e->value || strcmp(e->key, "sequence_id"))
            continue;
        if (e->value->parameter_choice_case ==
            INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
            r->sequence_id = (uint64_t)e->value->int64_param; /* >= 0: checked above */
        else if (e->value->parameter_choice_case ==
                 INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
            r->sequence_id = e->value->uint64_param;
    }
    r->binary_data_output = 1; /* gRPC outputs are always raw */
    size_t n = pb->n_inputs, n_shm = 0, raw_at = 0;
    for (size_t i = 0; i < n; i++) {
        const Inference__InferParameter *reg = NULL;
        if (pb->inputs[i])
            FIND_PARAM(pb->inputs[i]->parameters, pb->inputs[i]->n_parameters,
                       "shared_memory_region", reg);
        n_shm += reg != NULL;
    }
    if (pb->n_raw_input_contents && pb->n_raw_input_contents != n - n_shm)
        return bad(err,
                   "%zu raw_input_contents for %zu inputs not in shared memory (one per input, "
                   "in order)",
                   pb->n_raw_input_contents, n - n_shm);
    if (n > 100000)
        return bad(err, "too many inputs (%zu)", n);
    r->inputs = arena_calloc(&r->arena, n ? n : 1, sizeof *r->inputs);
    if (!r->inputs)
        return nomem(err);
    for (size_t i = 0; i < n; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = pb->inputs[i];
        kserve_tensor_t *t = &r->inputs[i];
        if (!in || !in->name || !in->name[0])
            return bad(err, "inputs[%zu] needs a non-empty name", i);
        t->name = in->name;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r->inputs[j].name, t->name))
                return bad(err, "input '%s' is given twice", t->name);
        const Inference__InferParameter *pr, *po, *pbs;
        FIND_PARAM(in->parameters, in->n_parameters, "shared_memory_region", pr);
        FIND_PARAM(in->parameters, in->n_parameters, "shared_memory_offset", po);
        FIND_PARAM(in->parameters, in->n_parameters, "shared_memory_byte_size", pbs);
        if ((rc = shm_from_pb(pr, po, pbs, "input", t->name, &t->shm_region, &t->shm_offset,
                              &t->shm_byte_size, err)))
            return rc;
        t->dtype = kserve_dtype_parse(in->datatype ? in->datatype : "");
        if (t->dtype == KSERVE_INVALID)
            return bad(
                err,
                "input '%s': unknown datatype '%.40s' (expected BOOL, UINT8, UINT16, UINT32, "
                "UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES or BF16)",
                t->name, in->datatype ? in->datatype : "");
        if (in->n_shape > KSERVE_MAX_DIMS)
            return bad(err, "input '%s': shape has %zu dimensions, at most %d are supported",
                       t->name, in->n_shape, KSERVE_MAX_DIMS);
        t->ndim = (int)in->n_shape;
        t->count = 1;
        for (size_t k = 0; k < in->n_shape; k++) {
            int64_t d = in->shape[k];
            if (d < 0)
                return bad(err, "input '%s': shape[%zu] = %" PRId64 " is negative", t->name, k, d);
            t->shape[k] = d;
            if (d && t->count > INT64_MAX / d)
                return bad(err, "input '%s': shape has more than 2^63 elements", t->name);
            t->count *= d;
        }
        t->binary = 1;
        if (t->shm_region) {
            if (in->contents)
                return bad(err, "unexpected 'contents' for input '%s' in shared memory", t->name);
            t->data = NULL; /* read from the region by the service */
            t->size = 0;
            r->n_inputs = (int)i + 1;
            continue;
        }
        if (pb->n_raw_input_contents) {
            if (in->contents)
                return bad(err, "input '%s' has both contents and raw_input_contents", t->name);
            t->data = pb->raw_input_contents[raw_at].data;
            t->size = pb->raw_input_contents[raw_at++].len;
            if (!t->data)
                t->data = (const uint8_t *)"";
        } else if (in->contents) {
            if ((rc = contents_to_raw(in->contents, t, &r->arena, err)))
                return rc;
        } else if (t->count == 0) {
            t->data = (const uint8_t *)"";
            t->size = 0;
        } else {
            return bad(err, "input '%s' has no data (neither raw_input_contents nor contents)",
                       t->name);
        }
        if ((rc = kserve_tensor_check(t, "input", err)))
            return rc;
        r->n_inputs = (int)i + 1;
    }
    size_t no = pb->n_outputs;
    if (no > 100000)
        return bad(err, "too many outputs (%zu)", no);
    r->outputs = arena_calloc(&r->arena, no ? no : 1, sizeof *r->outputs);
    if (!r->outputs)
        return nomem(err);
    for (size_t i = 0; i < no; i++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor *o = pb->outputs[i];
        if (!o || !o->name || !o->name[0])
            return bad(err, "outputs[%zu] needs a non-empty name", i);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r->outputs[j].name, o->name))
                return bad(err, "output '%s' is requested twice", o->name);
        const Inference__InferParameter *pr, *po, *pbs;
        FIND_PARAM(o->parameters, o->n_parameters, "shared_memory_region", pr);
        FIND_PARAM(o->parameters, o->n_parameters, "shared_memory_offset", po);
        FIND_PARAM(o->parameters, o->n_parameters, "shared_memory_byte_size", pbs);
        kserve_output_req_t *q = &r->outputs[i];
        if ((rc = shm_from_pb(pr, po, pbs, "output", o->name, &q->shm_region, &q->shm_offset,
                              &q->shm_byte_size, err)))
            return rc;
        r->outputs[i].name = o->name;
        r->outputs[i].binary_data = 1;
        r->n_outputs = (int)i + 1;
    }
    return HARK_OK;
}

int kserve_grpc_request_from_pb(const Inference__ModelInferRequest *pb, kserve_request_t *req,
                                hark_err_t *err)
{
    memset(req, 0, sizeof *req);
    arena_init(&req->arena, 4096);
    int rc = request_from_pb(pb, req, err);
    if (rc)
        kserve_request_free(req);
    return rc;
}

/* ---- outputs → ModelInferResponse ----------------------------------------------------------- */

int kserve_grpc_infer_frame(const kserve_grpc_infer_answer_t *a, uint8_t **frame, size_t *len,
                            hark_err_t *err)
{
    *frame = NULL;
    int n = a->n_outs;
    const kserve_output_t **sel = NULL;
    Inference__ModelInferResponse__InferOutputTensor *ot = NULL, **otp = NULL;
    ProtobufCBinaryData *raw = NULL;
    /* an output in shared memory: its parameters (region, byte size, offset) */
    Inference__InferParameter *pv = NULL;
    Inference__ModelInferResponse__InferOutputTensor__ParametersEntry *pe = NULL, **pep = NULL;
    int rc = HARK_OK;
    if (a->req && a->req->n_outputs)
        n = a->req->n_outputs;
    size_t cnt = n > 0 ? (size_t)n : 1;
    sel = hark_calloc(cnt, sizeof *sel);
    ot = hark_calloc(cnt, sizeof *ot);
    otp = hark_calloc(cnt, sizeof *otp);
    raw = hark_calloc(cnt, sizeof *raw);
    pv = hark_calloc(3 * cnt, sizeof *pv);
    pe = hark_calloc(3 * cnt, sizeof *pe);
    pep = hark_calloc(3 * cnt, sizeof *pep);
    if (!sel || !ot || !otp || !raw || !pv || !pe || !pep) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (a->req && a->req->n_outputs) {
            const char *want = a->req->outputs[i].name;
            for (int k = 0; k < a->n_outs && !sel[i]; k++)
                if (!strcmp(a->outs[k].name, want))
                    sel[i] = &a->outs[k];
            if (!sel[i]) {
                rc = err_set(err, HARK_ERR_INVALID_ARG, "unknown output '%s' requested", want);
                goto out;
            }
        } else {
            sel[i] = &a->outs[i];
        }
        const kserve_output_t *o = sel[i];
        inference__model_infer_response__infer_output_tensor__init(&ot[i]);
        ot[i].name = (char *)o->name;
        ot[i].datatype = (char *)kserve_dtype_name(o->dtype);
        ot[i].n_shape = (size_t)o->ndim;
        ot[i].shape = (int64_t *)o->shape;
        otp[i] = &ot[i];
        raw[i].data = (uint8_t *)o->data;
        raw[i].len = o->size;
        const kserve_output_req_t *q = a->req && a->req->n_outputs ? &a->req->outputs[i] : NULL;
        if (q && q->shm_region) { /* the data went into the region: empty contents, as Triton */
            raw[i].data = NULL;
            raw[i].len = 0;
            size_t at = 3 * (size_t)i, k = 0;
            const char *keys[] = {"shared_memory_region", "shared_memory_byte_size",
                                  "shared_memory_offset"};
            for (; k < (q->shm_offset ? 3u : 2u); k++) {
                inference__infer_parameter__init(&pv[at + k]);
                inference__model_infer_response__infer_output_tensor__parameters_entry__init(
                    &pe[at + k]);
                pe[at + k].key = (char *)keys[k];
                pe[at + k].value = &pv[at + k];
                pep[at + k] = &pe[at + k];
                if (k == 0) {
                    pv[at].parameter_choice_case =
                        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
                    pv[at].string_param = (char *)q->shm_region;
                } else {
                    pv[at + k].parameter_choice_case =
                        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
                    pv[at + k].int64_param = (int64_t)(k == 1 ? q->shm_written : q->shm_offset);
                }
            }
            ot[i].n_parameters = k;
            ot[i].parameters = &pep[at];
        }
    }
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    r.model_name = (char *)(a->model ? a->model : "");
    r.model_version = (char *)(a->version ? a->version : "");
    r.id = (char *)(a->id ? a->id : "");
    r.n_outputs = (size_t)n;
    r.outputs = otp;
    r.n_raw_output_contents = (size_t)n;
    r.raw_output_contents = raw;
    Inference__InferParameter fin = INFERENCE__INFER_PARAMETER__INIT;
    Inference__ModelInferResponse__ParametersEntry fe =
        INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    Inference__ModelInferResponse__ParametersEntry *fep = &fe;
    if (a->stream && a->final_response) {
        fin.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
        fin.bool_param = 1;
        fe.key = "triton_final_response";
        fe.value = &fin;
        r.n_parameters = 1;
        r.parameters = &fep;
    }
    if (a->stream) {
        Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
        s.infer_response = &r;
        *frame = grpc_frame_pack(&s.base, len);
    } else {
        *frame = grpc_frame_pack(&r.base, len);
    }
    if (!*frame)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory packing the response");
out:
    hark_free(sel);
    hark_free(ot);
    hark_free(otp);
    hark_free(raw);
    hark_free(pv);
    hark_free(pe);
    hark_free(pep);
    return rc;
}

uint8_t *kserve_grpc_stream_error_frame(const char *msg, const char *model, const char *id,
                                        size_t *len)
{
    Inference__ModelInferResponse r = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    r.model_name = (char *)(model ? model : "");
    r.id = (char *)(id ? id : "");
    Inference__ModelStreamInferResponse s = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    s.error_message = (char *)(msg && msg[0] ? msg : "error");
    s.infer_response = &r;
    return grpc_frame_pack(&s.base, len);
}

/* ---- JSON → protobuf (by the descriptors) --------------------------------------------------- */

static size_t scalar_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

static int from_json_msg(const ProtobufCMessageDescriptor *d, const cJSON *j, arena_t *a,
                         ProtobufCMessage **out, int depth, hark_err_t *err);

/* one value of field f from JSON v into dst */
static int field_value(const ProtobufCFieldDescriptor *f, const cJSON *v, arena_t *a, void *dst,
                       int depth, hark_err_t *err)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL:
        if (!cJSON_IsBool(v))
            goto type;
        *(protobuf_c_boolean *)dst = cJSON_IsTrue(v);
        return HARK_OK;
    case PROTOBUF_C_TYPE_STRING: {
        if (!cJSON_IsString(v))
            goto type;
        char *s = arena_strndup(a, v->valuestring, strlen(v->valuestring));
        if (!s)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        *(char **)dst = s;
        return HARK_OK;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        if (!cJSON_IsString(v))
            goto type;
        size_t l = strlen(v->valuestring);
        char *s = arena_strndup(a, v->valuestring, l);
        if (!s)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        ((ProtobufCBinaryData *)dst)->data = (uint8_t *)s;
        ((ProtobufCBinaryData *)dst)->len = l;
        return HARK_OK;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        if (cJSON_IsString(v)) {
            const ProtobufCEnumValue *ev =
                protobuf_c_enum_descriptor_get_value_by_name(ed, v->valuestring);
            if (!ev)
                return err_set(err, HARK_ERR_INVALID_ARG, "field '%s': unknown value '%.40s'",
                               f->name, v->valuestring);
            *(int32_t *)dst = ev->value;
            return HARK_OK;
        }
        if (!cJSON_IsNumber(v))
            goto type;
        *(int32_t *)dst = (int32_t)v->valuedouble;
        return HARK_OK;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        return from_json_msg(f->descriptor, v, a, (ProtobufCMessage **)dst, depth + 1, err);
    default:
        break;
    }
    /* numbers (or numeric strings, as JSON writers emit 64-bit integers) */
    double x;
    if (cJSON_IsNumber(v)) {
        x = v->valuedouble;
    } else if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        x = strtod(v->valuestring, &end);
        if (*end)
            goto type;
    } else if (cJSON_IsBool(v)) {
        x = cJSON_IsTrue(v);
    } else {
        goto type;
    }
    if (isnan(x))
        goto type;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        *(int32_t *)dst = x <= INT32_MIN ? INT32_MIN : x >= INT32_MAX ? INT32_MAX : (int32_t)x;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        *(uint32_t *)dst = x <= 0 ? 0 : x >= UINT32_MAX ? UINT32_MAX : (uint32_t)x;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        *(int64_t *)dst = x <= -9.2e18 ? INT64_MIN : x >= 9.2e18 ? INT64_MAX : (int64_t)x;
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        *(uint64_t *)dst = x <= 0 ? 0 : x >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)x;
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        *(float *)dst = (float)x;
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        *(double *)dst = x;
        break;
    default:
        goto type;
    }
    return HARK_OK;
type:
    return err_set(err, HARK_ERR_INVALID_ARG, "field '%s': JSON value of the wrong type", f->name);
}

static int is_map_entry(const ProtobufCFieldDescriptor *f)
{
    if (f->type != PROTOBUF_C_TYPE_MESSAGE || f->label != PROTOBUF_C_LABEL_REPEATED)
        return 0;
    const ProtobufCMessageDescriptor *ed = f->descriptor;
    return ed->n_fields == 2 && !strcmp(ed->fields[0].name, "key") &&
           !strcmp(ed->fields[1].name, "value");
}

static int from_json_msg(const ProtobufCMessageDescriptor *d, const cJSON *j, arena_t *a,
                         ProtobufCMessage **out, int depth, hark_err_t *err)
{
    if (depth > 32)
        return err_set(err, HARK_ERR_INVALID_ARG, "JSON nested too deeply");
    if (!cJSON_IsObject(j))
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: expected a JSON object", d->short_name);
    ProtobufCMessage *m = arena_alloc(a, d->sizeof_message, 16);
    if (!m)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    d->message_init(m);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, f->name);
        if (!v || cJSON_IsNull(v))
            continue;
        char *base = (char *)m;
        int rc;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t es = scalar_size(f->type);
            size_t n = 0;
            const cJSON *e;
            if (is_map_entry(f) && cJSON_IsObject(v)) {
                n = (size_t)cJSON_GetArraySize(v);
                void **arr = arena_calloc(a, n ? n : 1, sizeof(void *));
                if (!arr)
                    return err_set(err, HARK_ERR_NOMEM, "out of memory");
                const ProtobufCMessageDescriptor *ed = f->descriptor;
                size_t k = 0;
                cJSON_ArrayForEach(e, v)
                {
                    ProtobufCMessage *em = arena_alloc(a, ed->sizeof_message, 16);
                    if (!em)
                        return err_set(err, HARK_ERR_NOMEM, "out of memory");
                    ed->message_init(em);
                    cJSON key = {0};
                    key.type = cJSON_String;
                    key.valuestring = e->string;
                    if ((rc = field_value(&ed->fields[0], &key, a,
                                          (char *)em + ed->fields[0].offset, depth, err)) ||
                        (rc = field_value(&ed->fields[1], e, a, (char *)em + ed->fields[1].offset,
                                          depth, err)))
                        return rc;
                    arr[k++] = em;
                }
                *(size_t *)(base + f->quantifier_offset) = k;
                *(void **)(base + f->offset) = arr;
                continue;
            }
            if (!cJSON_IsArray(v))
                return err_set(err, HARK_ERR_INVALID_ARG, "field '%s': expected a JSON array",
                               f->name);
            n = (size_t)cJSON_GetArraySize(v);
            char *arr = arena_calloc(a, n ? n : 1, es);
            if (!arr)
                return err_set(err, HARK_ERR_NOMEM, "out of memory");
            size_t k = 0;
            cJSON_ArrayForEach(e, v)
            {
                if ((rc = field_value(f, e, a, arr + k * es, depth, err)))
                    return rc;
                k++;
            }
            *(size_t *)(base + f->quantifier_offset) = k;
            *(void **)(base + f->offset) = arr;
            continue;
        }
        if ((rc = field_value(f, v, a, base + f->offset, depth, err)))
            return rc;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            *(uint32_t *)(base + f->quantifier_offset) = f->id;
        else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
                 f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
            *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    }
    *out = m;
    return HARK_OK;
}

int pb_from_json(const ProtobufCMessageDescriptor *d, const cJSON *j, arena_t *a,
                 ProtobufCMessage **out, hark_err_t *err)
{
    return from_json_msg(d, j, a, out, 0, err);
}

/* The service's settings or region list as the JSON form of its protobuf message (for
 * pb_from_json): log settings {k: v} → {"settings": {k: {"bool_param" | "uint32_param" |
 * "string_param": v}}}; trace settings {k: "v" | ["v", ...]} → {"settings": {k: {"value":
 * [...]}}}; regions [{"name", ...}] → {"regions": {name: {...}}}. NULL when out of memory. */
static cJSON *settings_map(kserve_grpc_doc_t kind, const cJSON *j)
{
    int regions = kind == KSERVE_GRPC_SHM_STATUS || kind == KSERVE_GRPC_CUDA_SHM_STATUS;
    cJSON *root = cJSON_CreateObject();
    cJSON *map = root ? cJSON_AddObjectToObject(root, regions ? "regions" : "settings") : NULL;
    if (!map) {
        cJSON_Delete(root);
        return NULL;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, j)
    {
        cJSON *e = NULL;
        const char *key = v->string;
        if (regions) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "name");
            key = cJSON_IsString(nm) ? nm->valuestring : NULL;
            e = cJSON_Duplicate(v, 1);
        } else if (kind == KSERVE_GRPC_LOG_SETTINGS) {
            e = cJSON_CreateObject();
            cJSON *x = cJSON_IsBool(v)     ? cJSON_CreateBool(cJSON_IsTrue(v))
                       : cJSON_IsNumber(v) ? cJSON_CreateNumber(v->valuedouble)
                       : cJSON_IsString(v) ? cJSON_CreateString(v->valuestring)
                                           : NULL;
            if (e && x)
                cJSON_AddItemToObject(e,
                                      cJSON_IsBool(v)     ? "bool_param"
                                      : cJSON_IsNumber(v) ? "uint32_param"
                                                          : "string_param",
                                      x);
            else
                cJSON_Delete(x);
        } else {
            e = cJSON_CreateObject();
            cJSON *a = e ? cJSON_AddArrayToObject(e, "value") : NULL;
            if (a && cJSON_IsString(v))
                cJSON_AddItemToArray(a, cJSON_CreateString(v->valuestring));
            const cJSON *x, *arr = cJSON_IsArray(v) ? v : NULL;
            cJSON_ArrayForEach(x, arr)
            {
                if (a && cJSON_IsString(x))
                    cJSON_AddItemToArray(a, cJSON_CreateString(x->valuestring));
            }
        }
        if (!e || !key || !cJSON_AddItemToObject(map, key, e)) {
            cJSON_Delete(e);
            if (!key)
                continue;
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

int kserve_grpc_log_update(const Inference__LogSettingsRequest *q, cJSON **update, hark_err_t *err)
{
    *update = NULL;
    if (!q->n_settings)
        return HARK_OK;
    cJSON *u = cJSON_CreateObject();
    if (!u)
        return nomem(err);
    for (size_t i = 0; i < q->n_settings; i++) {
        const Inference__LogSettingsRequest__SettingsEntry *e = q->settings[i];
        if (!e || !e->key)
            continue;
        const Inference__LogSettingsRequest__SettingValue *v = e->value;
        cJSON *x;
        switch (v ? v->parameter_choice_case
                  : INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE__NOT_SET) {
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
            x = cJSON_CreateBool(v->bool_param);
            break;
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
            x = cJSON_CreateNumber(v->uint32_param);
            break;
        case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
            x = cJSON_CreateString(v->string_param ? v->string_param : "");
            break;
        default:
            x = cJSON_CreateNull();
            break;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(u, e->key); /* the last one wins */
        if (!x || !cJSON_AddItemToObject(u, e->key, x)) {
            cJSON_Delete(x);
            cJSON_Delete(u);
            return nomem(err);
        }
    }
    *update = u;
    return HARK_OK;
}

int kserve_grpc_trace_update(const Inference__TraceSettingRequest *q, cJSON **update,
                             hark_err_t *err)
{
    *update = NULL;
    if (!q->n_settings)
        return HARK_OK;
    cJSON *u = cJSON_CreateObject();
    if (!u)
        return nomem(err);
    for (size_t i = 0; i < q->n_settings; i++) {
        const Inference__TraceSettingRequest__SettingsEntry *e = q->settings[i];
        if (!e || !e->key)
            continue;
        size_t n = e->value ? e->value->n_value : 0;
        cJSON *x = NULL;
        if (!n) {
            x = cJSON_CreateNull(); /* Triton: no value clears the setting */
        } else if (!strcmp(e->key, "trace_level")) {
            x = cJSON_CreateArray();
            for (size_t k = 0; x && k < n; k++)
                cJSON_AddItemToArray(
                    x, cJSON_CreateString(e->value->value[k] ? e->value->value[k] : ""));
        } else if (n == 1) {
            x = cJSON_CreateString(e->value->value[0] ? e->value->value[0] : "");
        } else {
            cJSON_Delete(u);
            return bad(err, "trace setting '%.100s' takes one value, got %zu", e->key, n);
        }
        cJSON_DeleteItemFromObjectCaseSensitive(u, e->key);
        if (!x || !cJSON_AddItemToObject(u, e->key, x)) {
            cJSON_Delete(x);
            cJSON_Delete(u);
            return nomem(err);
        }
    }
    *update = u;
    return HARK_OK;
}

int kserve_grpc_json_frame(kserve_grpc_doc_t kind, const char *json, uint8_t **frame, size_t *len,
                           hark_err_t *err)
{
    *frame = NULL;
    cJSON *j = cJSON_Parse(json ? json : "");
    if (!j)
        return err_set(err, HARK_ERR_INTERNAL, "the service returned malformed JSON");
    cJSON *wrap = NULL;
    const ProtobufCMessageDescriptor *d = NULL;
    const char *wrap_key = NULL;
    switch (kind) {
    case KSERVE_GRPC_SERVER_METADATA:
        d = &inference__server_metadata_response__descriptor;
        break;
    case KSERVE_GRPC_MODEL_METADATA:
        d = &inference__model_metadata_response__descriptor;
        break;
    case KSERVE_GRPC_MODEL_CONFIG:
        d = &inference__model_config_response__descriptor;
        wrap_key = "config";
        break;
    case KSERVE_GRPC_MODEL_STATS:
        d = &inference__model_statistics_response__descriptor;
        break;
    case KSERVE_GRPC_REPOSITORY_INDEX:
        d = &inference__repository_index_response__descriptor;
        wrap_key = "models";
        break;
    case KSERVE_GRPC_LOG_SETTINGS:
    case KSERVE_GRPC_TRACE_SETTING:
    case KSERVE_GRPC_SHM_STATUS:
    case KSERVE_GRPC_CUDA_SHM_STATUS: {
        d = kind == KSERVE_GRPC_LOG_SETTINGS    ? &inference__log_settings_response__descriptor
            : kind == KSERVE_GRPC_TRACE_SETTING ? &inference__trace_setting_response__descriptor
            : kind == KSERVE_GRPC_SHM_STATUS
                ? &inference__system_shared_memory_status_response__descriptor
                : &inference__cuda_shared_memory_status_response__descriptor;
        cJSON *m = settings_map(kind, j);
        cJSON_Delete(j);
        if (!m)
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        j = m;
        break;
    }
    }
    const cJSON *src = j;
    if (wrap_key) {
        if (!(wrap = cJSON_CreateObject())) {
            cJSON_Delete(j);
            return err_set(err, HARK_ERR_NOMEM, "out of memory");
        }
        cJSON_AddItemReferenceToObject(wrap, wrap_key, j);
        src = wrap;
    }
    arena_t a;
    arena_init(&a, 4096);
    ProtobufCMessage *m = NULL;
    int rc = pb_from_json(d, src, &a, &m, err);
    if (rc == HARK_ERR_INVALID_ARG) { /* the service wrote something hark cannot encode */
        err_prefix(err, HARK_ERR_INTERNAL, "converting the service's JSON to protobuf");
        if (err)
            err->status = HARK_ERR_INTERNAL;
        rc = HARK_ERR_INTERNAL;
    }
    if (!rc && !(*frame = grpc_frame_pack(m, len)))
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    arena_free(&a);
    cJSON_Delete(wrap);
    cJSON_Delete(j);
    return rc;
}

/* ---- client side ---------------------------------------------------------------------------- */

int kserve_grpc_pack_request(const char *model, const char *version, const uint8_t *body,
                             size_t len, size_t header_len, uint8_t **msg, size_t *msg_len,
                             hark_err_t *err)
{
    *msg = NULL;
    kserve_request_t r;
    int rc = kserve_parse_request(body, len, header_len, &r, err);
    if (rc)
        return rc;
    size_t ni = (size_t)r.n_inputs, no = (size_t)r.n_outputs;
    size_t np = r.parameters ? (size_t)cJSON_GetArraySize(r.parameters) : 0;
    Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
    Inference__ModelInferRequest__InferInputTensor *in = hark_calloc(ni + 1, sizeof *in);
    Inference__ModelInferRequest__InferInputTensor **inp = hark_calloc(ni + 1, sizeof *inp);
    ProtobufCBinaryData *raw = hark_calloc(ni + 1, sizeof *raw);
    int64_t *shapes = hark_calloc(ni * KSERVE_MAX_DIMS + 1, sizeof *shapes);
    Inference__ModelInferRequest__InferRequestedOutputTensor *out =
        hark_calloc(no + 1, sizeof *out);
    Inference__ModelInferRequest__InferRequestedOutputTensor **outp =
        hark_calloc(no + 1, sizeof *outp);
    Inference__InferParameter *pv = hark_calloc(np + 1, sizeof *pv);
    Inference__ModelInferRequest__ParametersEntry *pe = hark_calloc(np + 1, sizeof *pe);
    Inference__ModelInferRequest__ParametersEntry **pep = hark_calloc(np + 1, sizeof *pep);
    if (!in || !inp || !raw || !shapes || !out || !outp || !pv || !pe || !pep) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    q.model_name = (char *)model;
    q.model_version = (char *)(version ? version : "");
    q.id = (char *)(r.has_id ? r.id : "");
    for (size_t i = 0; i < ni; i++) {
        const kserve_tensor_t *t = &r.inputs[i];
        inference__model_infer_request__infer_input_tensor__init(&in[i]);
        in[i].name = (char *)t->name;
        in[i].datatype = (char *)kserve_dtype_name(t->dtype);
        in[i].n_shape = (size_t)t->ndim;
        in[i].shape = shapes + i * KSERVE_MAX_DIMS;
        memcpy(in[i].shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
        inp[i] = &in[i];
        raw[i].data = (uint8_t *)t->data;
        raw[i].len = t->size;
    }
    q.n_inputs = q.n_raw_input_contents = ni;
    q.inputs = inp;
    q.raw_input_contents = raw;
    for (size_t i = 0; i < no; i++) {
        inference__model_infer_request__infer_requested_output_tensor__init(&out[i]);
        out[i].name = (char *)r.outputs[i].name;
        outp[i] = &out[i];
    }
    q.n_outputs = no;
    q.outputs = outp;
    size_t k = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, r.parameters)
    {
        inference__infer_parameter__init(&pv[k]);
        if (cJSON_IsBool(p)) {
            pv[k].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
            pv[k].bool_param = cJSON_IsTrue(p);
        } else if (cJSON_IsString(p)) {
            pv[k].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
            pv[k].string_param = p->valuestring;
        } else if (cJSON_IsNumber(p) && p->valuedouble == floor(p->valuedouble) &&
                   fabs(p->valuedouble) < 9e15) {
            pv[k].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
            pv[k].int64_param = (int64_t)p->valuedouble;
        } else if (cJSON_IsNumber(p)) {
            pv[k].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
            pv[k].double_param = p->valuedouble;
        } else {
            continue; /* binary_data_output and the like have no gRPC meaning */
        }
        if (!strcmp(p->string, "binary_data_output"))
            continue;
        inference__model_infer_request__parameters_entry__init(&pe[k]);
        pe[k].key = p->string;
        pe[k].value = &pv[k];
        pep[k] = &pe[k];
        k++;
    }
    q.n_parameters = k;
    q.parameters = pep;
    *msg_len = protobuf_c_message_get_packed_size(&q.base);
    if (!(*msg = hark_malloc(*msg_len + 1))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    protobuf_c_message_pack(&q.base, *msg);
done:
    hark_free(in);
    hark_free(inp);
    hark_free(raw);
    hark_free(shapes);
    hark_free(out);
    hark_free(outp);
    hark_free(pv);
    hark_free(pe);
    hark_free(pep);
    kserve_request_free(&r);
    return rc;
}

int kserve_grpc_parse_response(const uint8_t *msg, size_t len, kserve_parsed_response_t *out,
                               hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    arena_init(&out->arena, 4096);
    Inference__ModelInferResponse *r = inference__model_infer_response__unpack(NULL, len, msg);
    if (!r) {
        arena_free(&out->arena);
        return err_set(err, HARK_ERR_FORMAT, "malformed ModelInferResponse message");
    }
    int rc = HARK_OK;
    arena_t *a = &out->arena;
#define DUP(s) arena_strndup(a, (s) ? (s) : "", strlen((s) ? (s) : ""))
    out->model_name = DUP(r->model_name);
    out->model_version = DUP(r->model_version);
    out->id = DUP(r->id);
#undef DUP
    size_t n = r->n_outputs;
    if (r->n_raw_output_contents != n) {
        rc = err_set(err, HARK_ERR_FORMAT, "%zu outputs but %zu raw_output_contents", n,
                     r->n_raw_output_contents);
        goto done;
    }
    out->outputs = arena_calloc(a, n ? n : 1, sizeof *out->outputs);
    if (!out->outputs || !out->model_name || !out->model_version || !out->id) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        kserve_tensor_t *t = &out->outputs[i];
        const Inference__ModelInferResponse__InferOutputTensor *o = r->outputs[i];
        t->name = arena_strndup(a, o->name ? o->name : "", strlen(o->name ? o->name : ""));
        t->dtype = kserve_dtype_parse(o->datatype ? o->datatype : "");
        if (!t->name || t->dtype == KSERVE_INVALID || o->n_shape > KSERVE_MAX_DIMS) {
            rc = err_set(err, HARK_ERR_FORMAT, "output %zu: bad name, datatype or shape", i);
            goto done;
        }
        t->ndim = (int)o->n_shape;
        t->count = 1;
        for (size_t k = 0; k < o->n_shape; k++) {
            if (o->shape[k] < 0 || (o->shape[k] && t->count > INT64_MAX / o->shape[k])) {
                rc = err_set(err, HARK_ERR_FORMAT, "output '%s': bad shape", t->name);
                goto done;
            }
            t->shape[k] = o->shape[k];
            t->count *= o->shape[k];
        }
        uint8_t *d = arena_alloc(a, r->raw_output_contents[i].len + 1, 16);
        if (!d) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto done;
        }
        if (r->raw_output_contents[i].len)
            memcpy(d, r->raw_output_contents[i].data, r->raw_output_contents[i].len);
        t->data = d;
        t->size = r->raw_output_contents[i].len;
        t->binary = 1;
        if ((rc = kserve_tensor_check(t, "output", err)))
            goto done;
        out->n_outputs = (int)i + 1;
    }
done:
    inference__model_infer_response__free_unpacked(r, NULL);
    if (rc)
        kserve_parsed_response_free(out);
    return rc;
}
