/* kserve.c — KServe v2 / Triton HTTP codec: infer request parsing with the binary-tensor
 * extension, response building (JSON or binary), metadata and statistics JSON.
 * Tests: tests/api/test_kserve.c; fuzz: tests/fuzz/fuzz_kserve_request.c */
#include "api/kserve.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integers in JSON `data` arrive through cJSON's double: beyond 2^53 they are no longer exact,
 * so 64-bit values that large must come as binary data. */
#define JSON_INT_LIMIT 9007199254740991.0 /* 2^53 - 1: the largest exactly-known integer */

kserve_dtype_t kserve_dtype_parse(const char *name)
{
    return dtype_from_kserve(name);
}

const char *kserve_dtype_name(kserve_dtype_t t)
{
    return dtype_kserve_name(t);
}

size_t kserve_dtype_size(kserve_dtype_t t)
{
    return dtype_size(t);
}

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
    return err_set(err, HARK_ERR_NOMEM, "out of memory while parsing the request");
}

int kserve_parse_header_length(const char *value, size_t n, size_t body_len, size_t *out,
                               hark_err_t *err)
{
    while (n && (*value == ' ' || *value == '\t'))
        value++, n--;
    while (n && (value[n - 1] == ' ' || value[n - 1] == '\t'))
        n--;
    if (!n)
        return bad(err, "Inference-Header-Content-Length is empty");
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (value[i] < '0' || value[i] > '9')
            return bad(err, "Inference-Header-Content-Length '%.*s' is not a decimal number",
                       (int)(n < 40 ? n : 40), value);
        if (v > (UINT64_MAX - 9) / 10)
            return bad(err, "Inference-Header-Content-Length is too large");
        v = v * 10 + (uint64_t)(value[i] - '0');
    }
    if (v > body_len)
        return bad(err, "Inference-Header-Content-Length %" PRIu64 " exceeds the body length %zu",
                   v, body_len);
    *out = (size_t)v;
    return HARK_OK;
}

/* ---- BYTES elements ------------------------------------------------------------------------ */
/* Checks that [data, data+size) is exactly `count` elements of (uint32 LE length, bytes). */
static int bytes_check(const uint8_t *data, size_t size, int64_t count, int64_t *got, size_t *at)
{
    size_t pos = 0;
    int64_t k = 0;
    while (pos < size) {
        if (size - pos < 4) {
            *got = k;
            *at = pos;
            return -1; /* truncated length prefix */
        }
        uint32_t l;
        memcpy(&l, data + pos, 4);
        if (l > size - pos - 4) {
            *got = k;
            *at = pos;
            return -2; /* element runs past the end */
        }
        pos += 4 + (size_t)l;
        k++;
    }
    *got = k;
    *at = pos;
    return k == count ? 0 : -3;
}

int kserve_bytes_next(const kserve_tensor_t *t, size_t *pos, const uint8_t **elem, size_t *len)
{
    if (t->dtype != KSERVE_BYTES || *pos >= t->size || t->size - *pos < 4)
        return 0;
    uint32_t l;
    memcpy(&l, t->data + *pos, 4);
    if (l > t->size - *pos - 4)
        return 0;
    *elem = t->data + *pos + 4;
    *len = l;
    *pos += 4 + (size_t)l;
    return 1;
}

uint8_t *kserve_bytes_pack(const char *const *strs, const size_t *lens, int n, size_t *size)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : strlen(strs[i]);
        if (l > UINT32_MAX || total > SIZE_MAX - 4 - l)
            return NULL;
        total += 4 + l;
    }
    uint8_t *b = hark_malloc(total ? total : 1);
    if (!b)
        return NULL;
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        uint32_t l = (uint32_t)(lens ? lens[i] : strlen(strs[i]));
        memcpy(b + pos, &l, 4);
        if (l)
            memcpy(b + pos + 4, strs[i], l);
        pos += 4 + l;
    }
    *size = total;
    return b;
}

static size_t utf8_len(const uint8_t *s, size_t n);

/* ---- tensors ------------------------------------------------------------------------------ */
typedef struct {
    arena_t *arena;
    hark_err_t *err;
    const char *what;               /* "input" or "output" */
    const uint8_t *blob, *blob_end; /* binary section still unclaimed; blob NULL: no header */
} tctx_t;

/* Counts the scalars of a (possibly nested) JSON array; -1 if a leaf is itself an object. */
static int flat_count(const cJSON *a, int64_t *n)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (cJSON_IsArray(e)) {
            if (flat_count(e, n))
                return -1;
        } else if (cJSON_IsObject(e)) {
            return -1;
        } else {
            (*n)++;
        }
    }
    return 0;
}

typedef struct {
    kserve_dtype_t dt;
    uint8_t *out;
    size_t pos;
    int64_t index;
    const char *name;
    tctx_t *c;
} fill_t;

static int fill_one(fill_t *f, const cJSON *v)
{
    tctx_t *c = f->c;
    double d = v->valuedouble;
    const char *dn = kserve_dtype_name(f->dt);
    if (f->dt == KSERVE_BOOL) {
        if (!cJSON_IsBool(v))
            return bad(c->err, "%s '%s': data[%" PRId64 "] must be true or false for BOOL", c->what,
                       f->name, f->index);
        f->out[f->pos++] = cJSON_IsTrue(v) ? 1 : 0;
        return HARK_OK;
    }
    if (f->dt == KSERVE_BYTES) {
        if (!cJSON_IsString(v))
            return bad(c->err, "%s '%s': data[%" PRId64 "] must be a string for BYTES", c->what,
                       f->name, f->index);
        uint32_t l = (uint32_t)strlen(v->valuestring);
        memcpy(f->out + f->pos, &l, 4);
        memcpy(f->out + f->pos + 4, v->valuestring, l);
        f->pos += 4 + (size_t)l;
        return HARK_OK;
    }
    if (cJSON_IsNull(v) && (f->dt == KSERVE_FP32 || f->dt == KSERVE_FP64))
        d = NAN; /* how kserve_build_response writes NaN/Inf; consumers check finiteness */
    else if (!cJSON_IsNumber(v))
        return bad(c->err, "%s '%s': data[%" PRId64 "] must be a number for %s", c->what, f->name,
                   f->index, dn);
    if (f->dt == KSERVE_FP32) {
        float x = (float)d;
        memcpy(f->out + f->pos, &x, 4);
        f->pos += 4;
        return HARK_OK;
    }
    if (f->dt == KSERVE_FP64) {
        memcpy(f->out + f->pos, &d, 8);
        f->pos += 8;
        return HARK_OK;
    }
    /* integers */
    static const double lo[] = {[KSERVE_UINT8] = 0,
                                [KSERVE_UINT16] = 0,
                                [KSERVE_UINT32] = 0,
                                [KSERVE_UINT64] = 0,
                                [KSERVE_INT8] = -128,
                                [KSERVE_INT16] = -32768,
                                [KSERVE_INT32] = -2147483648.0,
                                [KSERVE_INT64] = -JSON_INT_LIMIT};
    static const double hi[] = {[KSERVE_UINT8] = 255,
                                [KSERVE_UINT16] = 65535,
                                [KSERVE_UINT32] = 4294967295.0,
                                [KSERVE_UINT64] = JSON_INT_LIMIT,
                                [KSERVE_INT8] = 127,
                                [KSERVE_INT16] = 32767,
                                [KSERVE_INT32] = 2147483647.0,
                                [KSERVE_INT64] = JSON_INT_LIMIT};
    if (d != floor(d))
        return bad(c->err, "%s '%s': data[%" PRId64 "] = %g is not an integer for %s", c->what,
                   f->name, f->index, d, dn);
    if (!(d >= lo[f->dt] && d <= hi[f->dt]))
        return bad(c->err, "%s '%s': data[%" PRId64 "] = %.17g is out of range for %s%s", c->what,
                   f->name, f->index, d, dn,
                   f->dt == KSERVE_INT64 || f->dt == KSERVE_UINT64
                       ? " in JSON (|v| > 2^53 is inexact; send it as binary data)"
                       : "");
    size_t sz = dtype_size(f->dt);
    if (f->dt >= KSERVE_INT8) {
        int64_t x = (int64_t)d;
        memcpy(f->out + f->pos, &x, sz); /* little-endian: low bytes first */
    } else {
        uint64_t x = (uint64_t)d;
        memcpy(f->out + f->pos, &x, sz);
    }
    f->pos += sz;
    return HARK_OK;
}

static int fill_rec(fill_t *f, const cJSON *a)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        int rc = cJSON_IsArray(e) ? fill_rec(f, e) : fill_one(f, e);
        if (rc)
            return rc;
        if (!cJSON_IsArray(e))
            f->index++;
    }
    return HARK_OK;
}

static size_t bytes_json_size(const cJSON *a)
{
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        if (cJSON_IsArray(e))
            n += bytes_json_size(e);
        else if (cJSON_IsString(e))
            n += 4 + strlen(e->valuestring);
    }
    return n;
}

static int get_u64(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d))
        return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Triton's shared memory parameters of an input or output (`params` may be NULL): *region NULL
 * when there are none; else the region's name, the byte size (required) and the offset (0 when
 * absent). HARK_OK or HARK_ERR_INVALID_ARG naming the parameter. */
static int shm_params(const cJSON *params, const char *what, const char *nm, const char **region,
                      uint64_t *offset, uint64_t *size, hark_err_t *err)
{
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_region");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_offset");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(params, "shared_memory_byte_size");
    *region = NULL;
    *offset = *size = 0;
    if (!r) {
        if (o || b)
            return bad(err,
                       "%s '%s': parameters.shared_memory_%s without "
                       "parameters.shared_memory_region",
                       what, nm, o ? "offset" : "byte_size");
        return HARK_OK;
    }
    if (!cJSON_IsString(r) || !r->valuestring[0])
        return bad(err, "%s '%s': parameters.shared_memory_region must be a non-empty string", what,
                   nm);
    if (!b)
        return bad(err,
                   "%s '%s': parameters.shared_memory_region needs "
                   "parameters.shared_memory_byte_size",
                   what, nm);
    if (get_u64(b, size))
        return bad(err,
                   "%s '%s': parameters.shared_memory_byte_size must be a non-negative integer",
                   what, nm);
    if (o && get_u64(o, offset))
        return bad(err, "%s '%s': parameters.shared_memory_offset must be a non-negative integer",
                   what, nm);
    *region = r->valuestring;
    return HARK_OK;
}

/* One entry of inputs[] (request) or outputs[] (response). */
static int parse_tensor(tctx_t *c, const cJSON *j, int idx, kserve_tensor_t *t)
{
    if (!cJSON_IsObject(j))
        return bad(c->err, "%ss[%d] must be an object", c->what, idx);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0])
        return bad(c->err, "%ss[%d] needs a non-empty string 'name'", c->what, idx);
    const char *nm = t->name = name->valuestring;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "datatype");
    if (!cJSON_IsString(dt))
        return bad(c->err, "%s '%s' needs a string 'datatype'", c->what, nm);
    t->dtype = kserve_dtype_parse(dt->valuestring);
    if (t->dtype == KSERVE_INVALID)
        return bad(c->err,
                   "%s '%s': unknown datatype '%.40s' (expected BOOL, UINT8, UINT16, UINT32, "
                   "UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BYTES or BF16)",
                   c->what, nm, dt->valuestring);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    if (!cJSON_IsArray(shape))
        return bad(c->err, "%s '%s' needs a 'shape' array", c->what, nm);
    int nd = cJSON_GetArraySize(shape);
    if (nd > KSERVE_MAX_DIMS)
        return bad(c->err, "%s '%s': shape has %d dimensions, at most %d are supported", c->what,
                   nm, nd, KSERVE_MAX_DIMS);
    t->ndim = nd;
    t->count = 1;
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, shape)
    {
        uint64_t d;
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            return bad(c->err, "%s '%s': shape[%d] must be an integer", c->what, nm, k);
        if (e->valuedouble < 0)
            return bad(c->err, "%s '%s': shape[%d] = %.0f is negative", c->what, nm, k,
                       e->valuedouble);
        if (get_u64(e, &d) || d > (uint64_t)INT64_MAX)
            return bad(c->err, "%s '%s': shape[%d] is too large", c->what, nm, k);
        t->shape[k++] = (int64_t)d;
        if (d && (uint64_t)t->count > (uint64_t)INT64_MAX / d)
            return bad(c->err, "%s '%s': shape has more than 2^63 elements", c->what, nm);
        t->count *= (int64_t)d;
    }
    size_t esz = dtype_size(t->dtype);
    if (esz && (uint64_t)t->count > SIZE_MAX / esz)
        return bad(c->err, "%s '%s': shape is too large for this machine", c->what, nm);

    const cJSON *params = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (params && !cJSON_IsObject(params))
        return bad(c->err, "%s '%s': 'parameters' must be an object", c->what, nm);
    const cJSON *bds = cJSON_GetObjectItemCaseSensitive(params, "binary_data_size");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    int rc =
        shm_params(params, c->what, nm, &t->shm_region, &t->shm_offset, &t->shm_byte_size, c->err);
    if (rc)
        return rc;
    if (t->shm_region) {
        if (data || bds)
            return bad(c->err,
                       "%s '%s' must set only one of 'data', parameters.binary_data_size and "
                       "parameters.shared_memory_region",
                       c->what, nm);
        t->data = NULL; /* read from the region by the service */
        t->size = 0;
        return HARK_OK;
    }
    if (bds && data)
        return bad(c->err, "%s '%s' has both 'data' and parameters.binary_data_size", c->what, nm);
    if (bds) {
        uint64_t n;
        if (get_u64(bds, &n))
            return bad(c->err, "%s '%s': binary_data_size must be a non-negative integer", c->what,
                       nm);
        if (!c->blob)
            return bad(c->err,
                       "%s '%s' has binary_data_size but there is no "
                       "Inference-Header-Content-Length header saying where the JSON ends",
                       c->what, nm);
        size_t left = (size_t)(c->blob_end - c->blob);
        if (n > left)
            return bad(c->err,
                       "%s '%s': binary_data_size %" PRIu64 " but only %zu bytes of binary data "
                       "remain",
                       c->what, nm, n, left);
        t->data = c->blob;
        t->size = (size_t)n;
        t->binary = 1;
        c->blob += n;
        if (t->dtype == KSERVE_BYTES) {
            int64_t got;
            size_t at;
            int r = bytes_check(t->data, t->size, t->count, &got, &at);
            if (r == -1)
                return bad(c->err,
                           "%s '%s': BYTES element %" PRId64 " at byte %zu: truncated 4-byte "
                           "length",
                           c->what, nm, got, at);
            if (r == -2)
                return bad(c->err,
                           "%s '%s': BYTES element %" PRId64 " at byte %zu runs past "
                           "binary_data_size %zu",
                           c->what, nm, got, at, t->size);
            if (r == -3)
                return bad(c->err,
                           "%s '%s': %" PRId64 " BYTES elements in the binary data, shape says "
                           "%" PRId64,
                           c->what, nm, got, t->count);
        } else if ((uint64_t)t->count * esz != n) {
            return bad(c->err,
                       "%s '%s': binary_data_size %" PRIu64 " does not match shape × %s = %" PRIu64
                       " bytes",
                       c->what, nm, n, kserve_dtype_name(t->dtype), (uint64_t)t->count * esz);
        }
        return HARK_OK;
    }
    if (!data)
        return bad(c->err, "%s '%s' has neither 'data' nor parameters.binary_data_size", c->what,
                   nm);
    if (t->dtype == KSERVE_FP16 || t->dtype == KSERVE_BF16)
        return bad(c->err, "%s '%s': %s cannot be sent as JSON data; use the binary extension",
                   c->what, nm, kserve_dtype_name(t->dtype));
    int64_t n = 0;
    if (cJSON_IsArray(data)) {
        if (flat_count(data, &n))
            return bad(c->err, "%s '%s': 'data' may only hold (nested arrays of) scalars", c->what,
                       nm);
    } else if (!cJSON_IsObject(data) && !cJSON_IsNull(data)) {
        n = 1; /* a bare scalar for a single element */
    } else {
        return bad(c->err, "%s '%s': 'data' must be an array", c->what, nm);
    }
    if (n != t->count)
        return bad(c->err, "%s '%s': 'data' has %" PRId64 " elements, shape says %" PRId64, c->what,
                   nm, n, t->count);
    size_t size;
    if (t->dtype == KSERVE_BYTES) {
        if (cJSON_IsArray(data)) {
            size = bytes_json_size(data);
        } else {
            size = cJSON_IsString(data) ? 4 + strlen(data->valuestring) : 0;
        }
    } else {
        size = (size_t)t->count * esz;
    }
    uint8_t *out = arena_alloc(c->arena, size ? size : 1, 16);
    if (!out)
        return nomem(c->err);
    fill_t f = {t->dtype, out, 0, 0, nm, c};
    rc = cJSON_IsArray(data) ? fill_rec(&f, data) : fill_one(&f, data);
    if (rc)
        return rc;
    t->data = out;
    t->size = f.pos;
    t->binary = 0;
    return HARK_OK;
}

/* Parses the JSON header of a request or response; sets c->blob/blob_end. */
static int parse_header(const uint8_t *body, size_t body_len, size_t header_len, cJSON **root,
                        tctx_t *c, const char *kind)
{
    size_t jl = body_len;
    c->blob = c->blob_end = NULL;
    if (header_len != (size_t)-1) {
        if (header_len > body_len)
            return bad(c->err, "Inference-Header-Content-Length %zu exceeds the body length %zu",
                       header_len, body_len);
        if (header_len == 0)
            return bad(c->err, "Inference-Header-Content-Length is 0: the %s has no JSON header",
                       kind);
        jl = header_len;
        c->blob = body + header_len;
        c->blob_end = body + body_len;
    }
    if (!jl)
        return bad(c->err, "empty %s body", kind);
    /* JSON text is UTF-8 (RFC 8259); names and ids must survive being echoed back unchanged */
    for (size_t i = 0; i < jl;) {
        size_t l = body[i] < 0x80 ? 1 : utf8_len(body + i, jl - i);
        if (!l)
            return bad(c->err, "the JSON %s header is not valid UTF-8 at byte %zu", kind, i);
        i += l;
    }
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts((const char *)body, jl, &end, 0);
    if (!*root) {
        size_t at = end && end >= (const char *)body ? (size_t)(end - (const char *)body) : 0;
        return bad(c->err, "malformed JSON in the %s header near byte %zu", kind, at);
    }
    for (const char *p = end; p < (const char *)body + jl; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            cJSON_Delete(*root);
            *root = NULL;
            return bad(c->err, "unexpected bytes after the JSON %s header at byte %zu%s", kind,
                       (size_t)(p - (const char *)body),
                       header_len == (size_t)-1 ? " (binary data needs an "
                                                  "Inference-Header-Content-Length header)"
                                                : "");
        }
    if (!cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return bad(c->err, "the %s header must be a JSON object", kind);
    }
    return HARK_OK;
}

static int check_blobs_used(tctx_t *c)
{
    if (c->blob && c->blob != c->blob_end)
        return bad(c->err,
                   "%zu bytes after the JSON header are not claimed by any binary_data_size",
                   (size_t)(c->blob_end - c->blob));
    return HARK_OK;
}

int kserve_request_finish_params(kserve_request_t *r, const cJSON *p, hark_err_t *err)
{
    if (!p)
        return HARK_OK;
    if (!cJSON_IsObject(p))
        return bad(err, "request 'parameters' must be an object");
    r->parameters = p;
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "sequence_id"))) {
        r->has_sequence_id = 1;
        if (cJSON_IsString(v))
            r->sequence_id_str = v->valuestring;
        else if (get_u64(v, &r->sequence_id))
            return bad(err, "parameters.sequence_id must be a non-negative integer or a string");
    }
    static const char *const bools[] = {"sequence_start", "sequence_end", "binary_data_output"};
    int *bool_out[] = {&r->sequence_start, &r->sequence_end, &r->binary_data_output};
    for (int i = 0; i < 3; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(p, bools[i]))) {
            if (!cJSON_IsBool(v))
                return bad(err, "parameters.%s must be true or false", bools[i]);
            *bool_out[i] = cJSON_IsTrue(v);
        }
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "priority"))) {
        if (get_u64(v, &r->priority))
            return bad(err, "parameters.priority must be a non-negative integer");
        r->has_priority = 1;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(p, "timeout"))) {
        if (get_u64(v, &r->timeout_us))
            return bad(err, "parameters.timeout must be a non-negative integer (microseconds)");
        r->has_timeout = 1;
    }
    return HARK_OK;
}

static int parse_request_impl(const uint8_t *body, size_t body_len, size_t header_len,
                              kserve_request_t *r, hark_err_t *err)
{
    tctx_t c = {&r->arena, err, "input", NULL, NULL};
    cJSON *root = NULL;
    int rc = parse_header(body, body_len, header_len, &root, &c, "request");
    if (rc)
        return rc;
    r->json = root;
    r->id = "";
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id) {
        if (!cJSON_IsString(id))
            return bad(err, "request 'id' must be a string");
        r->id = id->valuestring;
        r->has_id = 1;
    }
    if ((rc = kserve_request_finish_params(r, cJSON_GetObjectItemCaseSensitive(root, "parameters"),
                                           err)))
        return rc;
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsArray(ins))
        return bad(err, "request needs an 'inputs' array");
    int n = cJSON_GetArraySize(ins);
    r->inputs = arena_calloc(&r->arena, n ? (size_t)n : 1, sizeof *r->inputs);
    if (!r->inputs)
        return nomem(err);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ins)
    {
        if ((rc = parse_tensor(&c, e, i, &r->inputs[i])))
            return rc;
        for (int j = 0; j < i; j++)
            if (!strcmp(r->inputs[j].name, r->inputs[i].name))
                return bad(err, "input '%s' is given twice", r->inputs[i].name);
        r->n_inputs = ++i;
    }
    if ((rc = check_blobs_used(&c)))
        return rc;
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    if (outs && !cJSON_IsArray(outs))
        return bad(err, "request 'outputs' must be an array");
    n = cJSON_GetArraySize(outs);
    r->outputs = arena_calloc(&r->arena, n ? (size_t)n : 1, sizeof *r->outputs);
    if (!r->outputs)
        return nomem(err);
    i = 0;
    cJSON_ArrayForEach(e, outs)
    {
        kserve_output_req_t *o = &r->outputs[i];
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (!cJSON_IsObject(e) || !cJSON_IsString(nm) || !nm->valuestring[0])
            return bad(err, "outputs[%d] needs a non-empty string 'name'", i);
        o->name = nm->valuestring;
        for (int j = 0; j < i; j++)
            if (!strcmp(r->outputs[j].name, o->name))
                return bad(err, "output '%s' is requested twice", o->name);
        o->binary_data = -1;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "parameters");
        if (p && !cJSON_IsObject(p))
            return bad(err, "output '%s': 'parameters' must be an object", o->name);
        if ((rc = shm_params(p, "output", o->name, &o->shm_region, &o->shm_offset,
                             &o->shm_byte_size, err)))
            return rc;
        const cJSON *cc = cJSON_GetObjectItemCaseSensitive(p, "classification");
        if (cc && !(cJSON_IsNumber(cc) && cc->valuedouble == 0))
            return err_set(err, HARK_ERR_UNSUPPORTED,
                           "output '%s': the classification extension is not supported by hark",
                           o->name);
        const cJSON *bd = cJSON_GetObjectItemCaseSensitive(p, "binary_data");
        if (bd) {
            if (!cJSON_IsBool(bd))
                return bad(err, "output '%s': parameters.binary_data must be true or false",
                           o->name);
            o->binary_data = cJSON_IsTrue(bd);
        }
        if (o->shm_region && o->binary_data == 1)
            return bad(err,
                       "output '%s' cannot set both parameters.shared_memory_region and "
                       "binary_data: true",
                       o->name);
        r->n_outputs = ++i;
    }
    return HARK_OK;
}

int kserve_parse_request(const uint8_t *body, size_t body_len, size_t header_len,
                         kserve_request_t *req, hark_err_t *err)
{
    memset(req, 0, sizeof *req);
    arena_init(&req->arena, 4096);
    int rc = parse_request_impl(body, body_len, header_len, req, err);
    if (rc)
        kserve_request_free(req);
    return rc;
}

int kserve_tensor_check(const kserve_tensor_t *t, const char *what, hark_err_t *err)
{
    if (t->dtype == KSERVE_BYTES) {
        int64_t got;
        size_t at;
        int r = bytes_check(t->data, t->size, t->count, &got, &at);
        if (r == -1 || r == -2)
            return bad(err, "%s '%s': BYTES element %" PRId64 " at byte %zu is truncated", what,
                       t->name, got, at);
        if (r == -3)
            return bad(err, "%s '%s': %" PRId64 " BYTES elements in the data, shape says %" PRId64,
                       what, t->name, got, t->count);
        return HARK_OK;
    }
    size_t esz = kserve_dtype_size(t->dtype);
    if (!esz)
        return bad(err, "%s '%s': invalid datatype", what, t->name);
    if ((uint64_t)t->count > SIZE_MAX / esz || (size_t)t->count * esz != t->size)
        return bad(err, "%s '%s': %zu bytes of data do not match shape × %s = %" PRIu64 " bytes",
                   what, t->name, t->size, kserve_dtype_name(t->dtype), (uint64_t)t->count * esz);
    return HARK_OK;
}

void kserve_request_free(kserve_request_t *req)
{
    if (!req)
        return;
    cJSON_Delete(req->json);
    arena_free(&req->arena);
    memset(req, 0, sizeof *req);
}

const kserve_tensor_t *kserve_request_input(const kserve_request_t *req, const char *name)
{
    for (int i = 0; i < req->n_inputs; i++)
        if (!strcmp(req->inputs[i].name, name))
            return &req->inputs[i];
    return NULL;
}

const void *kserve_tensor_data(kserve_request_t *req, const kserve_tensor_t *t)
{
    static const uint64_t empty[1];
    size_t esz = kserve_dtype_size(t->dtype);
    if (!esz)
        return NULL;
    if (!t->size)
        return empty;
    if ((uintptr_t)t->data % esz == 0)
        return t->data;
    void *p = arena_alloc(&req->arena, t->size, 16);
    if (p)
        memcpy(p, t->data, t->size);
    return p;
}

/* AVX2 where the CPU has it (twice the SSE2 speed), chosen once at load time */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
size_t
kserve_f32_find_nonfinite(const float *x, size_t n)
{
    enum { BLOCK = 256 };             /* a fixed trip count: the inner loop vectorises at -O2 */
    const uint32_t EXP = 0x7f800000u; /* all exponent bits set: Inf or NaN */
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        uint32_t bad_bits = 0;
        for (size_t j = 0; j < BLOCK; j++) {
            uint32_t u;
            memcpy(&u, x + i + j, sizeof u);
            bad_bits |= (u & EXP) == EXP;
        }
        if (bad_bits)
            break; /* the scalar loop below finds which */
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        if ((u & EXP) == EXP)
            return i;
    }
    return n;
}

/* Element i of a fixed-size tensor as a double (unaligned-safe). */
static double elem_double(kserve_dtype_t dt, const uint8_t *p)
{
    switch (dt) {
    case KSERVE_BOOL:
        return *p ? 1 : 0;
    case KSERVE_UINT8:
        return *p;
    case KSERVE_INT8:
        return (int8_t)*p;
    case KSERVE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case KSERVE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case KSERVE_UINT32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case KSERVE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case KSERVE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case KSERVE_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case KSERVE_FP16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return dtype_half_to_float(v);
    }
    case KSERVE_BF16: {
        uint16_t v;
        memcpy(&v, p, 2);
        uint32_t b = (uint32_t)v << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case KSERVE_FP32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    case KSERVE_FP64: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    case KSERVE_BYTES:
    case KSERVE_INVALID:
        break;
    }
    return 0;
}

int kserve_tensor_to_f32(const kserve_tensor_t *t, float *dst, hark_err_t *err)
{
    size_t esz = kserve_dtype_size(t->dtype);
    if (!esz)
        return bad(err, "tensor '%s': %s cannot be read as numbers", t->name,
                   kserve_dtype_name(t->dtype));
    if (t->dtype == KSERVE_FP32) {
        memcpy(dst, t->data, t->size);
        for (int64_t i = 0; i < t->count; i++)
            if (!isfinite(dst[i]))
                return bad(err, "tensor '%s': element %" PRId64 " is %s; audio must be finite",
                           t->name, i, isnan(dst[i]) ? "NaN" : "infinite");
        return HARK_OK;
    }
    for (int64_t i = 0; i < t->count; i++) {
        double v = elem_double(t->dtype, t->data + (size_t)i * esz);
        dst[i] = (float)v;
        if (!isfinite(dst[i]))
            return bad(err, "tensor '%s': element %" PRId64 " is not a finite float", t->name, i);
    }
    return HARK_OK;
}

/* ---- responses ---------------------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *q = hark_realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static size_t utf8_len(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    size_t l;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        l = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        l = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        l = 4, cp = c & 0x07;
    else
        return 0;
    if (l > n)
        return 0;
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (l == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return l;
}

static void sb_json_string(sbuf_t *b, const uint8_t *s, size_t n)
{
    sb_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
            i++;
        } else if (c < 0x20) {
            sb_printf(b, "\\u%04x", c);
            i++;
        } else {
            size_t l = utf8_len(s + i, n - i);
            if (!l) {
                sb_put(b, "\xef\xbf\xbd", 3); /* U+FFFD */
                i++;
            } else {
                sb_put(b, (const char *)s + i, l);
                i += l;
            }
        }
    }
    sb_put(b, "\"", 1);
}

/* JSON `data` array text for one output. */
static void sb_data(sbuf_t *b, const kserve_output_t *o, int64_t count)
{
    const uint8_t *p = o->data;
    size_t esz = kserve_dtype_size(o->dtype);
    sb_put(b, "[", 1);
    if (o->dtype == KSERVE_BYTES) {
        kserve_tensor_t t = {.dtype = KSERVE_BYTES, .data = p, .size = o->size};
        size_t pos = 0, l;
        const uint8_t *e;
        for (int first = 1; kserve_bytes_next(&t, &pos, &e, &l); first = 0) {
            if (!first)
                sb_put(b, ",", 1);
            sb_json_string(b, e, l);
        }
    } else {
        for (int64_t i = 0; i < count && !b->oom; i++) {
            const uint8_t *q = p + (size_t)i * esz;
            if (i)
                sb_put(b, ",", 1);
            switch (o->dtype) {
            case KSERVE_BOOL:
                sb_put(b, *q ? "true" : "false", *q ? 4 : 5);
                break;
            case KSERVE_UINT64: {
                uint64_t v;
                memcpy(&v, q, 8);
                sb_printf(b, "%" PRIu64, v);
                break;
            }
            case KSERVE_INT64: {
                int64_t v;
                memcpy(&v, q, 8);
                sb_printf(b, "%" PRId64, v);
                break;
            }
            case KSERVE_FP64:
            case KSERVE_FP32:
            case KSERVE_FP16:
            case KSERVE_BF16: {
                double v = elem_double(o->dtype, q);
                if (!isfinite(v))
                    sb_put(b, "null", 4); /* JSON has no NaN/Inf */
                else
                    sb_printf(b, o->dtype == KSERVE_FP64 ? "%.17g" : "%.9g", v);
                break;
            }
            default:
                sb_printf(b, "%.0f", elem_double(o->dtype, q));
                break;
            }
        }
    }
    sb_put(b, "]", 1);
}

/* Checks a tensor descriptor (an output to send, or an input of a client request): `kind` names
 * it in messages, `status` is returned on failure. */
static int check_tensor(const kserve_output_t *o, int64_t *count, const char *kind, int status,
                        hark_err_t *err)
{
    if (!o->name || !o->name[0] || o->dtype <= KSERVE_INVALID || o->dtype > KSERVE_BF16 ||
        o->ndim < 0 || o->ndim > KSERVE_MAX_DIMS || (o->ndim && !o->shape) || (o->size && !o->data))
        return err_set(err, status, "%s '%s': malformed descriptor", kind, o->name ? o->name : "?");
    int64_t n = 1;
    for (int i = 0; i < o->ndim; i++) {
        if (o->shape[i] < 0 || (o->shape[i] && n > INT64_MAX / o->shape[i]))
            return err_set(err, status, "%s '%s': bad shape", kind, o->name);
        n *= o->shape[i];
    }
    size_t esz = kserve_dtype_size(o->dtype);
    if (o->dtype == KSERVE_BYTES) {
        int64_t got;
        size_t at;
        if (bytes_check(o->data, o->size, n, &got, &at))
            return err_set(err, status, "%s '%s': %zu bytes are not %" PRId64 " BYTES elements",
                           kind, o->name, o->size, n);
    } else if ((uint64_t)n > SIZE_MAX / esz || (size_t)n * esz != o->size) {
        return err_set(err, status, "%s '%s': %zu bytes for shape with %" PRId64 " %s elements",
                       kind, o->name, o->size, n, kserve_dtype_name(o->dtype));
    }
    *count = n;
    return HARK_OK;
}

static int check_output(const kserve_output_t *o, int64_t *count, hark_err_t *err)
{
    return check_tensor(o, count, "output", HARK_ERR_INTERNAL, err);
}

int kserve_build_response(const kserve_request_t *req, const char *model_name,
                          const char *model_version, const kserve_output_t *outs, int n_outs,
                          kserve_response_t *resp, hark_err_t *err)
{
    memset(resp, 0, sizeof *resp);
    int n_sel = req && req->n_outputs ? req->n_outputs : n_outs;
    const kserve_output_t **sel = hark_calloc(n_sel ? (size_t)n_sel : 1, sizeof *sel);
    int *bin = hark_calloc(n_sel ? (size_t)n_sel : 1, sizeof *bin);
    int64_t *cnt = hark_calloc(n_sel ? (size_t)n_sel : 1, sizeof *cnt);
    sbuf_t b = {0};
    int rc = HARK_OK;
    if (!sel || !bin || !cnt) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory building the response");
        goto done;
    }
    int dflt = req ? req->binary_data_output : 0;
    for (int i = 0; i < n_sel; i++) {
        if (req && req->n_outputs) {
            const kserve_output_req_t *r = &req->outputs[i];
            for (int j = 0; j < n_outs && !sel[i]; j++)
                if (outs[j].name && !strcmp(outs[j].name, r->name))
                    sel[i] = &outs[j];
            if (!sel[i]) {
                rc = bad(err, "unknown output '%s' requested", r->name);
                goto done;
            }
            bin[i] = r->shm_region ? 0 : r->binary_data >= 0 ? r->binary_data : dflt;
        } else {
            sel[i] = &outs[i];
            bin[i] = dflt;
        }
        if ((rc = check_output(sel[i], &cnt[i], err)))
            goto done;
    }
    /* the JSON header */
    sb_put(&b, "{\"model_name\":", 14);
    sb_json_string(&b, (const uint8_t *)model_name, strlen(model_name));
    sb_put(&b, ",\"model_version\":", 17);
    sb_json_string(&b, (const uint8_t *)model_version, strlen(model_version));
    if (req && req->has_id) {
        sb_put(&b, ",\"id\":", 6);
        sb_json_string(&b, (const uint8_t *)req->id, strlen(req->id));
    }
    sb_put(&b, ",\"outputs\":[", 12);
    size_t blobs = 0;
    for (int i = 0; i < n_sel; i++) {
        const kserve_output_t *o = sel[i];
        sb_put(&b, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
        sb_json_string(&b, (const uint8_t *)o->name, strlen(o->name));
        sb_printf(&b, ",\"datatype\":\"%s\",\"shape\":[", kserve_dtype_name(o->dtype));
        for (int k = 0; k < o->ndim; k++)
            sb_printf(&b, k ? ",%" PRId64 : "%" PRId64, o->shape[k]);
        sb_put(&b, "]", 1);
        const kserve_output_req_t *rq = req && req->n_outputs ? &req->outputs[i] : NULL;
        if (rq && rq->shm_region) { /* the data went into the client's region */
            sb_put(&b, ",\"parameters\":{\"shared_memory_region\":", 38);
            sb_json_string(&b, (const uint8_t *)rq->shm_region, strlen(rq->shm_region));
            sb_printf(&b, ",\"shared_memory_byte_size\":%" PRIu64, rq->shm_written);
            if (rq->shm_offset)
                sb_printf(&b, ",\"shared_memory_offset\":%" PRIu64, rq->shm_offset);
            sb_put(&b, "}}", 2);
        } else if (bin[i]) {
            sb_printf(&b, ",\"parameters\":{\"binary_data_size\":%zu}}", o->size);
            blobs += o->size;
            resp->binary = 1;
        } else {
            sb_put(&b, ",\"data\":", 8);
            sb_data(&b, o, cnt[i]);
            sb_put(&b, "}", 1);
        }
    }
    sb_put(&b, "]}", 2);
    if (b.oom || blobs > SIZE_MAX - b.len - 1) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory building the response");
        goto done;
    }
    resp->header_len = b.len;
    resp->len = b.len + blobs;
    if (blobs) {
        uint8_t *body = hark_realloc(b.p, resp->len + 1);
        if (!body) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory building the response");
            goto done;
        }
        b.p = (char *)body;
        size_t pos = b.len;
        for (int i = 0; i < n_sel; i++)
            if (bin[i] && sel[i]->size) {
                memcpy(body + pos, sel[i]->data, sel[i]->size);
                pos += sel[i]->size;
            }
    }
    resp->body = (uint8_t *)b.p;
    b.p = NULL;
done:
    hark_free(b.p);
    hark_free(sel);
    hark_free(bin);
    hark_free(cnt);
    if (rc)
        memset(resp, 0, sizeof *resp);
    return rc;
}

void kserve_response_free(kserve_response_t *resp)
{
    if (!resp)
        return;
    hark_free(resp->body);
    memset(resp, 0, sizeof *resp);
}

/* ---- client side: infer requests ---------------------------------------------------------- */

int kserve_build_request(const kserve_request_spec_t *spec, kserve_response_t *out, hark_err_t *err)
{
    memset(out, 0, sizeof *out);
    sbuf_t b = {0};
    int rc = HARK_OK;
    size_t blobs = 0;
    for (int i = 0; i < spec->n_inputs; i++) {
        int64_t cnt;
        if ((rc = check_tensor(&spec->inputs[i], &cnt, "input", HARK_ERR_INVALID_ARG, err)))
            return rc;
        if (spec->inputs[i].size > SIZE_MAX / 2 - blobs)
            return err_set(err, HARK_ERR_NOMEM, "input '%s' too large", spec->inputs[i].name);
        blobs += spec->inputs[i].size;
    }
    for (int i = 0; i < spec->n_params; i++) {
        const kserve_param_t *p = &spec->params[i];
        if (!p->name || !p->name[0] || (!p->str && !isfinite(p->num)))
            return err_set(err, HARK_ERR_INVALID_ARG, "parameter '%s': %s", p->name ? p->name : "",
                           p->name && p->name[0] ? "not a finite number" : "no name");
    }
    for (int i = 0; i < spec->n_outputs; i++)
        if (!spec->outputs[i] || !spec->outputs[i][0])
            return err_set(err, HARK_ERR_INVALID_ARG, "output %d has no name", i);
    sb_put(&b, "{", 1);
    if (spec->id) {
        sb_put(&b, "\"id\":", 5);
        sb_json_string(&b, (const uint8_t *)spec->id, strlen(spec->id));
        sb_put(&b, ",", 1);
    }
    sb_put(&b, "\"inputs\":[", 10);
    for (int i = 0; i < spec->n_inputs; i++) {
        const kserve_output_t *t = &spec->inputs[i];
        sb_put(&b, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
        sb_json_string(&b, (const uint8_t *)t->name, strlen(t->name));
        sb_printf(&b, ",\"datatype\":\"%s\",\"shape\":[", kserve_dtype_name(t->dtype));
        for (int k = 0; k < t->ndim; k++)
            sb_printf(&b, k ? ",%" PRId64 : "%" PRId64, t->shape[k]);
        sb_printf(&b, "],\"parameters\":{\"binary_data_size\":%zu}}", t->size);
    }
    sb_put(&b, "]", 1);
    if (spec->n_outputs) {
        sb_put(&b, ",\"outputs\":[", 12);
        for (int i = 0; i < spec->n_outputs; i++) {
            sb_put(&b, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
            sb_json_string(&b, (const uint8_t *)spec->outputs[i], strlen(spec->outputs[i]));
            sb_put(&b, ",\"parameters\":{\"binary_data\":true}}", 35);
        }
        sb_put(&b, "]", 1);
    }
    if (spec->n_params) {
        sb_put(&b, ",\"parameters\":{", 15);
        for (int i = 0; i < spec->n_params; i++) {
            const kserve_param_t *p = &spec->params[i];
            if (i)
                sb_put(&b, ",", 1);
            sb_json_string(&b, (const uint8_t *)p->name, strlen(p->name));
            sb_put(&b, ":", 1);
            if (p->str)
                sb_json_string(&b, (const uint8_t *)p->str, strlen(p->str));
            else if (p->boolean)
                sb_printf(&b, "%s", p->num != 0 ? "true" : "false");
            else if (p->num == floor(p->num) && fabs(p->num) < 9e15)
                sb_printf(&b, "%.0f", p->num);
            else
                sb_printf(&b, "%.17g", p->num);
        }
        sb_put(&b, "}", 1);
    }
    sb_put(&b, "}", 1);
    if (b.oom) {
        hark_free(b.p);
        return err_set(err, HARK_ERR_NOMEM, "out of memory building the request");
    }
    uint8_t *body = hark_realloc(b.p, b.len + blobs + 1);
    if (!body) {
        hark_free(b.p);
        return err_set(err, HARK_ERR_NOMEM, "out of memory building the request");
    }
    size_t pos = b.len;
    for (int i = 0; i < spec->n_inputs; i++)
        if (spec->inputs[i].size) {
            memcpy(body + pos, spec->inputs[i].data, spec->inputs[i].size);
            pos += spec->inputs[i].size;
        }
    out->body = body;
    out->header_len = b.len;
    out->len = b.len + blobs;
    out->binary = 1;
    return rc;
}

static int parse_response_impl(const uint8_t *body, size_t body_len, size_t header_len,
                               kserve_parsed_response_t *r, hark_err_t *err)
{
    tctx_t c = {&r->arena, err, "output", NULL, NULL};
    cJSON *root = NULL;
    int rc = parse_header(body, body_len, header_len, &root, &c, "response");
    if (rc)
        return rc;
    r->json = root;
    const char *keys[] = {"model_name", "model_version", "id"};
    const char **vals[] = {&r->model_name, &r->model_version, &r->id};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
        if (v && !cJSON_IsString(v))
            return bad(err, "response '%s' must be a string", keys[i]);
        *vals[i] = v ? v->valuestring : "";
    }
    const cJSON *outs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    if (!cJSON_IsArray(outs))
        return bad(err, "response needs an 'outputs' array");
    int n = cJSON_GetArraySize(outs);
    r->outputs = arena_calloc(&r->arena, n ? (size_t)n : 1, sizeof *r->outputs);
    if (!r->outputs)
        return nomem(err);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, outs)
    {
        if ((rc = parse_tensor(&c, e, i, &r->outputs[i])))
            return rc;
        r->n_outputs = ++i;
    }
    return check_blobs_used(&c);
}

int kserve_parse_response(const uint8_t *body, size_t body_len, size_t header_len,
                          kserve_parsed_response_t *resp, hark_err_t *err)
{
    memset(resp, 0, sizeof *resp);
    arena_init(&resp->arena, 4096);
    int rc = parse_response_impl(body, body_len, header_len, resp, err);
    if (rc)
        kserve_parsed_response_free(resp);
    return rc;
}

void kserve_parsed_response_free(kserve_parsed_response_t *resp)
{
    if (!resp)
        return;
    cJSON_Delete(resp->json);
    arena_free(&resp->arena);
    memset(resp, 0, sizeof *resp);
}

/* ---- metadata and statistics -------------------------------------------------------------- */
static char *print_json(cJSON *o)
{
    if (!o)
        return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        return NULL;
    char *r = hark_strdup(s);
    cJSON_free(s);
    return r;
}

#define ADD(obj, key, item)                                                                        \
    do {                                                                                           \
        cJSON *it_ = (item);                                                                       \
        if (!it_ || !cJSON_AddItemToObject((obj), (key), it_)) {                                   \
            cJSON_Delete(it_);                                                                     \
            goto oom;                                                                              \
        }                                                                                          \
    } while (0)
#define PUSH(arr, item)                                                                            \
    do {                                                                                           \
        cJSON *it_ = (item);                                                                       \
        if (!it_ || !cJSON_AddItemToArray((arr), it_)) {                                           \
            cJSON_Delete(it_);                                                                     \
            goto oom;                                                                              \
        }                                                                                          \
    } while (0)

/* An exact unsigned 64-bit JSON integer (cJSON numbers are doubles). */
static cJSON *u64_json(uint64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return cJSON_CreateRaw(s);
}

char *kserve_error_json(const char *msg)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    ADD(o, "error", cJSON_CreateString(msg ? msg : ""));
    return print_json(o);
oom:
    cJSON_Delete(o);
    return NULL;
}

char *kserve_server_metadata_json(const char *name, const char *version,
                                  const char *const *extensions, int n_extensions)
{
    cJSON *o = cJSON_CreateObject(), *x;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(name));
    ADD(o, "version", cJSON_CreateString(version));
    ADD(o, "extensions", x = cJSON_CreateArray());
    for (int i = 0; i < n_extensions; i++)
        PUSH(x, cJSON_CreateString(extensions[i]));
    return print_json(o);
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *tensor_meta(const kserve_tensor_meta_t *t, int batched)
{
    cJSON *o = cJSON_CreateObject(), *s;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(t->name));
    ADD(o, "datatype", cJSON_CreateString(t->datatype));
    ADD(o, "shape", s = cJSON_CreateArray());
    if (batched)
        PUSH(s, cJSON_CreateNumber(-1));
    for (int i = 0; i < t->ndim; i++)
        PUSH(s, cJSON_CreateNumber((double)t->dims[i]));
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

char *kserve_model_metadata_json(const kserve_model_meta_t *m)
{
    cJSON *o = cJSON_CreateObject(), *x;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(m->name));
    ADD(o, "versions", x = cJSON_CreateArray());
    for (int i = 0; i < m->n_versions; i++)
        PUSH(x, cJSON_CreateString(m->versions[i]));
    ADD(o, "platform", cJSON_CreateString(m->platform ? m->platform : ""));
    ADD(o, "inputs", x = cJSON_CreateArray());
    for (int i = 0; i < m->n_inputs; i++)
        PUSH(x, tensor_meta(&m->inputs[i], m->max_batch_size > 0));
    ADD(o, "outputs", x = cJSON_CreateArray());
    for (int i = 0; i < m->n_outputs; i++)
        PUSH(x, tensor_meta(&m->outputs[i], m->max_batch_size > 0));
    return print_json(o);
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *duration_json(const kserve_duration_t *d)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    ADD(o, "count", u64_json(d->count));
    ADD(o, "ns", u64_json(d->ns));
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *model_stats_json(const kserve_model_stats_t *s)
{
    cJSON *o = cJSON_CreateObject(), *x, *y;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(s->name));
    ADD(o, "version", cJSON_CreateString(s->version ? s->version : ""));
    ADD(o, "last_inference", u64_json(s->last_inference));
    ADD(o, "inference_count", u64_json(s->inference_count));
    ADD(o, "execution_count", u64_json(s->execution_count));
    ADD(o, "inference_stats", x = cJSON_CreateObject());
    ADD(x, "success", duration_json(&s->success));
    ADD(x, "fail", duration_json(&s->fail));
    ADD(x, "queue", duration_json(&s->queue));
    ADD(x, "compute_input", duration_json(&s->compute_input));
    ADD(x, "compute_infer", duration_json(&s->compute_infer));
    ADD(x, "compute_output", duration_json(&s->compute_output));
    ADD(x, "cache_hit", duration_json(&s->cache_hit));
    ADD(x, "cache_miss", duration_json(&s->cache_miss));
    ADD(o, "response_stats", cJSON_CreateObject());
    ADD(o, "batch_stats", x = cJSON_CreateArray());
    for (int i = 0; i < s->n_batch_stats; i++) {
        const kserve_batch_stats_t *b = &s->batch_stats[i];
        PUSH(x, y = cJSON_CreateObject());
        ADD(y, "batch_size", u64_json(b->batch_size));
        ADD(y, "compute_input", duration_json(&b->compute_input));
        ADD(y, "compute_infer", duration_json(&b->compute_infer));
        ADD(y, "compute_output", duration_json(&b->compute_output));
    }
    ADD(o, "memory_usage", cJSON_CreateArray());
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

char *kserve_stats_json(const kserve_model_stats_t *stats, int n)
{
    cJSON *o = cJSON_CreateObject(), *x;
    if (!o)
        return NULL;
    ADD(o, "model_stats", x = cJSON_CreateArray());
    for (int i = 0; i < n; i++)
        PUSH(x, model_stats_json(&stats[i]));
    return print_json(o);
oom:
    cJSON_Delete(o);
    return NULL;
}
