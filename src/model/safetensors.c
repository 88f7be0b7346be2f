/* safetensors.c — mmap'ed, validated, read-only safetensors files (zero-copy tensor views).
 * Every check happens in st_open, so a tensor returned later is always in bounds and aligned.
 * Tests: tests/model/test_safetensors.c */
#include "model/safetensors.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers over 100 MB; so do we (a corrupt length field
 * must not make us parse gigabytes). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

struct safetensors {
    char *path;
    void *map; /* whole file, PROT_READ */
    size_t map_len;
    const uint8_t *data; /* start of the byte buffer (after the header) */
    size_t data_len;
    st_tensor_t *tensors; /* (n) in header order */
    size_t n;
    size_t *by_name; /* (n) indices into tensors, sorted by name, for st_find */
    char **meta;     /* (2 * n_meta) key, value, key, value, ... */
    size_t n_meta;
    float **wide; /* (n) float32 copies of F16 / BF16 tensors, made by st_get_f32 */
    pthread_mutex_t wide_lock;
};

static const struct {
    const char *name;
    st_dtype_t t;
    size_t size;
} dtypes[] = {
    {"F32", ST_F32, 4}, {"F16", ST_F16, 2},   {"BF16", ST_BF16, 2}, {"F64", ST_F64, 8},
    {"I64", ST_I64, 8}, {"I32", ST_I32, 4},   {"I16", ST_I16, 2},   {"I8", ST_I8, 1},
    {"U8", ST_U8, 1},   {"BOOL", ST_BOOL, 1},
};

size_t st_dtype_size(st_dtype_t t)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].t == t)
            return dtypes[i].size;
    return 0;
}

const char *st_dtype_name(st_dtype_t t)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (dtypes[i].t == t)
            return dtypes[i].name;
    return "?";
}

static int dtype_parse(const char *s, st_dtype_t *t)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(dtypes[i].name, s)) {
            *t = dtypes[i].t;
            return 0;
        }
    return -1;
}

void st_close(safetensors_t *st)
{
    if (!st)
        return;
    if (st->tensors)
        for (size_t i = 0; i < st->n; i++)
            hark_free((char *)st->tensors[i].name);
    if (st->meta)
        for (size_t i = 0; i < 2 * st->n_meta; i++)
            hark_free(st->meta[i]);
    hark_free(st->meta);
    if (st->wide)
        for (size_t i = 0; i < st->n; i++)
            hark_free(st->wide[i]);
    hark_free(st->wide);
    pthread_mutex_destroy(&st->wide_lock);
    hark_free(st->tensors);
    hark_free(st->by_name);
    if (st->map)
        munmap(st->map, st->map_len);
    hark_free(st->path);
    hark_free(st);
}

size_t st_count(const safetensors_t *st)
{
    return st->n;
}

const st_tensor_t *st_at(const safetensors_t *st, size_t i)
{
    return i < st->n ? &st->tensors[i] : NULL;
}

const st_tensor_t *st_find(const safetensors_t *st, const char *name)
{
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor_t *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (!c)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *st_metadata(const safetensors_t *st, const char *key)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[2 * i], key))
            return st->meta[2 * i + 1];
    return NULL;
}

/* A JSON number that is an exact integer in [0, 2^53]; -1 otherwise. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

/* qsort_r comparators over index arrays (ctx: the tensor table / the begin offsets). */
static int cmp_by_name(const void *a, const void *b, void *ctx)
{
    const st_tensor_t *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int cmp_by_offset(const void *a, const void *b, void *ctx)
{
    const uint64_t *begin = ctx;
    uint64_t x = begin[*(const size_t *)a], y = begin[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

/* Parses one tensor entry into *t (name already set); begin/end are offsets into the data. */
static int parse_tensor(safetensors_t *st, const cJSON *e, st_tensor_t *t, uint64_t *begin,
                        hark_err_t *err)
{
    const char *p = st->path, *nm = t->name;
    if (!cJSON_IsObject(e))
        return err_set(err, HARK_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", p,
                       nm);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: tensor '%s': needs a string 'dtype', an array 'shape' and an array "
                       "'data_offsets'",
                       p, nm);
    if (dtype_parse(jd->valuestring, &t->dtype))
        return err_set(err, HARK_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%s'", p, nm,
                       jd->valuestring);
    int nd = cJSON_GetArraySize(js);
    if (nd > ST_MAX_DIMS)
        return err_set(err, HARK_ERR_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", p, nm,
                       nd, ST_MAX_DIMS);
    t->ndim = nd;
    size_t count = 1;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, js)
    {
        uint64_t v;
        if (json_uint(d, &v) || v > (uint64_t)INT64_MAX)
            return err_set(err, HARK_ERR_FORMAT,
                           "%s: tensor '%s': shape[%d] is not a non-negative integer", p, nm, i);
        t->shape[i++] = (int64_t)v;
        if (__builtin_mul_overflow(count, (size_t)v, &count))
            return err_set(err, HARK_ERR_FORMAT, "%s: tensor '%s': shape overflows", p, nm);
    }
    t->count = count;
    uint64_t b, en;
    if (cJSON_GetArraySize(jo) != 2 || json_uint(cJSON_GetArrayItem(jo, 0), &b) ||
        json_uint(cJSON_GetArrayItem(jo, 1), &en))
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets must be two non-negative integers", p, nm);
    if (b > en || en > st->data_len)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] out of range (data is %zu "
                       "bytes)",
                       p, nm, (unsigned long long)b, (unsigned long long)en, st->data_len);
    size_t esz = st_dtype_size(t->dtype), want;
    if (__builtin_mul_overflow(count, esz, &want) || want != en - b)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets span %llu bytes but shape and dtype %s "
                       "need %zu",
                       p, nm, (unsigned long long)(en - b), jd->valuestring, count * esz);
    size_t file_off = (size_t)(st->data - (const uint8_t *)st->map) + (size_t)b;
    if (file_off % esz)
        return err_set(err, HARK_ERR_FORMAT,
                       "%s: tensor '%s': data at file offset %zu is not %zu-byte aligned; "
                       "rewrite the file with a converter that pads the header",
                       p, nm, file_off, esz);
    t->data = st->data + b;
    t->nbytes = want;
    *begin = b;
    return HARK_OK;
}

static int parse_metadata(safetensors_t *st, const cJSON *m, hark_err_t *err)
{
    if (!cJSON_IsObject(m))
        return err_set(err, HARK_ERR_FORMAT, "%s: __metadata__ is not an object", st->path);
    size_t n = (size_t)cJSON_GetArraySize(m);
    if (!n)
        return HARK_OK;
    st->meta = hark_calloc(2 * n, sizeof *st->meta);
    if (!st->meta)
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", st->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, m)
    {
        if (!cJSON_IsString(e))
            return err_set(err, HARK_ERR_FORMAT, "%s: __metadata__ '%s' is not a string", st->path,
                           e->string);
        char *k = hark_strdup(e->string), *v = hark_strdup(e->valuestring);
        st->meta[2 * st->n_meta] = k;
        st->meta[2 * st->n_meta + 1] = v;
        st->n_meta++;
        if (!k || !v)
            return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", st->path);
    }
    return HARK_OK;
}

static int parse_header(safetensors_t *st, const char *hdr, size_t len, hark_err_t *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, len, &end, 0);
    uint64_t *begin = NULL;
    int rc = HARK_OK;
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= hdr && at <= hdr + len ? (size_t)(at - hdr) : 0;
        rc = err_set(err, HARK_ERR_FORMAT, "%s: header is not valid JSON (near byte %zu)", st->path,
                     off);
        goto out;
    }
    for (const char *q = end; q && q < hdr + len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r' && *q != 0) {
            rc =
                err_set(err, HARK_ERR_FORMAT, "%s: trailing bytes after the JSON header", st->path);
            goto out;
        }
    if (!cJSON_IsObject(root)) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: header is not a JSON object", st->path);
        goto out;
    }
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) n += strcmp(e->string, "__metadata__") != 0;
    st->tensors = hark_calloc(n ? n : 1, sizeof *st->tensors);
    st->by_name = hark_calloc(n ? n : 1, sizeof *st->by_name);
    begin = hark_calloc(n ? n : 1, sizeof *begin);
    if (!st->tensors || !st->by_name || !begin) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", st->path);
        goto out;
    }
    cJSON_ArrayForEach(e, root)
    {
        if (!strcmp(e->string, "__metadata__")) {
            if ((rc = parse_metadata(st, e, err)))
                goto out;
            continue;
        }
        st_tensor_t *t = &st->tensors[st->n];
        if (!(t->name = hark_strdup(e->string))) {
            rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", st->path);
            goto out;
        }
        st->by_name[st->n] = st->n;
        st->n++;
        if ((rc = parse_tensor(st, e, t, &begin[st->n - 1], err)))
            goto out;
    }
    /* Duplicate names, then overlapping byte ranges (zero-sized tensors overlap nothing). */
    qsort_r(st->by_name, st->n, sizeof *st->by_name, cmp_by_name, st->tensors);
    for (size_t i = 1; i < st->n; i++)
        if (!strcmp(st->tensors[st->by_name[i]].name, st->tensors[st->by_name[i - 1]].name)) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s: tensor '%s' appears twice", st->path,
                         st->tensors[st->by_name[i]].name);
            goto out;
        }
    size_t *ord = hark_calloc(st->n ? st->n : 1, sizeof *ord);
    if (!ord) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", st->path);
        goto out;
    }
    for (size_t i = 0; i < st->n; i++)
        ord[i] = i;
    qsort_r(ord, st->n, sizeof *ord, cmp_by_offset, begin);
    uint64_t prev_end = 0;
    size_t prev = 0;
    for (size_t i = 0; i < st->n; i++) {
        const st_tensor_t *t = &st->tensors[ord[i]];
        if (!t->nbytes)
            continue;
        if (begin[ord[i]] < prev_end) {
            rc = err_set(err, HARK_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", st->path,
                         st->tensors[prev].name, t->name);
            break;
        }
        prev_end = begin[ord[i]] + t->nbytes;
        prev = ord[i];
    }
    hark_free(ord);
out:
    hark_free(begin);
    cJSON_Delete(root);
    return rc;
}

int st_open(const char *path, safetensors_t **out, hark_err_t *err)
{
    *out = NULL;
    int rc = HARK_OK, fd = -1;
    safetensors_t *st = hark_calloc(1, sizeof *st);
    if (st)
        pthread_mutex_init(&st->wide_lock, NULL);
    if (!st || !(st->path = hark_strdup(path))) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        rc = err_set(err, HARK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = err_set(err, HARK_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < 8) {
        rc = err_set(err, HARK_ERR_FORMAT,
                     "%s: %lld bytes, too short for a safetensors file (8-byte header length)",
                     path, (long long)sb.st_size);
        goto fail;
    }
    st->map_len = (size_t)sb.st_size;
    st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        rc = err_set(err, HARK_ERR_IO, "%s: cannot mmap: %s", path, strerror(errno));
        goto fail;
    }
    const uint8_t *b = st->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    if (hlen > st->map_len - 8 || hlen > ST_MAX_HEADER) {
        rc = err_set(err, HARK_ERR_FORMAT,
                     "%s: header length %llu runs past the end of the file (%zu bytes) or "
                     "exceeds %u",
                     path, (unsigned long long)hlen, st->map_len, ST_MAX_HEADER);
        goto fail;
    }
    if (hlen < 2) {
        rc = err_set(err, HARK_ERR_FORMAT, "%s: header length %llu is too short for JSON", path,
                     (unsigned long long)hlen);
        goto fail;
    }
    st->data = b + 8 + hlen;
    st->data_len = st->map_len - 8 - (size_t)hlen;
    if ((rc = parse_header(st, (const char *)b + 8, (size_t)hlen, err)))
        goto fail;
    close(fd);
    *out = st;
    return HARK_OK;
fail:
    if (fd >= 0)
        close(fd);
    st_close(st);
    return rc;
}

/* A float32 view of a 16-bit tensor: widened once (exactly), kept until st_close. */
static int widen(safetensors_t *st, const st_tensor_t *t, const float **data, hark_err_t *err)
{
    size_t i = (size_t)(t - st->tensors);
    pthread_mutex_lock(&st->wide_lock);
    int rc = HARK_OK;
    if (!st->wide && !(st->wide = hark_calloc(st->n, sizeof *st->wide)))
        rc = err_set(err, HARK_ERR_NOMEM, "model weights: out of memory");
    if (!rc && !st->wide[i]) {
        float *w = hark_malloc((t->count ? t->count : 1) * sizeof *w);
        if (!w) {
            rc = err_set(err, HARK_ERR_NOMEM,
                         "model weights: tensor '%s': out of memory (%zu "
                         "values)",
                         t->name, t->count);
        } else {
            const uint8_t *p = t->data;
            for (size_t k = 0; k < t->count; k++) {
                uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8); /* little-endian */
                w[k] = t->dtype == ST_F16 ? dtype_half_to_float(h) : dtype_bf16_to_float(h);
            }
            st->wide[i] = w;
        }
    }
    if (!rc)
        *data = st->wide[i];
    pthread_mutex_unlock(&st->wide_lock);
    return rc;
}

/* conformer_tensor_fn-shaped lookup: a tensor of exactly `shape` as float32 (F32 in place; F16
 * and BF16, the converters' --dtype float16 / bfloat16, widened once); errors name it. */
int st_get_f32(void *user, const char *name, int ndim, const int64_t *shape, const float **data,
               hark_err_t *err)
{
    safetensors_t *st = user;
    const st_tensor_t *t = st_find(st, name);
    if (!t)
        return err_set(err, HARK_ERR_NOT_FOUND, "model weights: tensor '%s' is missing", name);
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "model weights: tensor '%s' is %s, expected F32 (or F16 / BF16)", name,
                       st_dtype_name(t->dtype));
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same) {
        char got[96] = "", exp[96] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "",
                     (long long)t->shape[i]);
        for (int i = 0; i < ndim; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? "," : "",
                     (long long)shape[i]);
        return err_set(err, HARK_ERR_FORMAT,
                       "model weights: tensor '%s' has shape [%s], expected [%s]", name, got, exp);
    }
    if (t->dtype != ST_F32)
        return widen(st, t, data, err);
    *data = (const float *)t->data;
    return HARK_OK;
}

int st_get_f32_finite(safetensors_t *st, const char *name, int ndim, int64_t d0, int64_t d1,
                      int64_t d2, const float **data, hark_err_t *err)
{
    int64_t shape[3] = {d0, d1, d2};
    int rc = st_get_f32(st, name, ndim, shape, data, err);
    if (rc)
        return rc;
    size_t n = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1) * (size_t)(ndim > 2 ? d2 : 1);
    for (size_t i = 0; i < n; i++)
        if (!isfinite((*data)[i]))
            return err_set(err, HARK_ERR_FORMAT, "tensor %s: holds NaN or infinite values", name);
    return HARK_OK;
}
