/* npy.c — NumPy .npy files.  Tests: tests/core/test_npy.c */
#include "core/npy.h"

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_descr(npy_dtype_t t)
{
    switch (t) {
    case NPY_F32:
        return "<f4";
    case NPY_F64:
        return "<f8";
    case NPY_I32:
        return "<i4";
    case NPY_I64:
        return "<i8";
    case NPY_U8:
        return "|u1";
    }
    return "?";
}

static size_t dtype_size(npy_dtype_t t)
{
    switch (t) {
    case NPY_F32:
    case NPY_I32:
        return 4;
    case NPY_F64:
    case NPY_I64:
        return 8;
    case NPY_U8:
        return 1;
    }
    return 0;
}

int npy_save(const char *path, npy_dtype_t dtype, const void *data, int ndim, const int64_t *shape)
{
    char hdr[512];
    char shp[256] = "";
    size_t count = 1;
    int n = 0;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(shp + n, sizeof shp - (size_t)n, "%lld%s", (long long)shape[i],
                      ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
        count *= (size_t)shape[i];
    }
    int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                       dtype_descr(dtype), shp);
    int total = 10 + len + 1;
    int pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) {
        LOG_ERROR("cannot write %s", path);
        return HARK_ERR_IO;
    }
    unsigned short hlen = (unsigned short)(len + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xff, f);
    fputc(hlen >> 8, f);
    fwrite(hdr, 1, (size_t)len, f);
    for (int i = 0; i < pad; i++)
        fputc(' ', f);
    fputc('\n', f);
    size_t wrote = count ? fwrite(data, dtype_size(dtype), count, f) : 0;
    int bad = fclose(f) != 0 || wrote != count;
    if (bad) {
        LOG_ERROR("short write to %s", path);
        return HARK_ERR_IO;
    }
    return HARK_OK;
}

int npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape)
{
    return npy_save(path, NPY_F32, data, ndim, shape);
}

static int parse_header(const char *path, const char *h, npy_array_t *out)
{
    const char *d = strstr(h, "'descr':");
    const char *fo = strstr(h, "'fortran_order':");
    const char *sh = strstr(h, "'shape':");
    if (!d || !fo || !sh) {
        LOG_ERROR("%s: malformed npy header", path);
        return HARK_ERR_FORMAT;
    }
    d = strchr(d + 8, '\'');
    if (!d)
        return HARK_ERR_FORMAT;
    d++;
    static const struct {
        const char *s;
        npy_dtype_t t;
    } map[] = {{"<f4", NPY_F32}, {"<f8", NPY_F64}, {"<i4", NPY_I32},
               {"<i8", NPY_I64}, {"|u1", NPY_U8},  {"|b1", NPY_U8}};
    int found = 0;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        if (strncmp(d, map[i].s, 3) == 0) {
            out->dtype = map[i].t;
            found = 1;
        }
    }
    if (!found) {
        LOG_ERROR("%s: unsupported npy dtype '%.4s'", path, d);
        return HARK_ERR_UNSUPPORTED;
    }
    if (strncmp(fo + 16, " True", 5) == 0) {
        LOG_ERROR("%s: fortran-order npy is not supported", path);
        return HARK_ERR_UNSUPPORTED;
    }
    const char *p = strchr(sh, '(');
    if (!p)
        return HARK_ERR_FORMAT;
    p++;
    out->ndim = 0;
    out->count = 1;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == ')')
            break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || out->ndim == NPY_MAX_DIMS) {
            LOG_ERROR("%s: bad npy shape", path);
            return HARK_ERR_FORMAT;
        }
        out->shape[out->ndim++] = v;
        out->count *= (size_t)v;
        p = end;
    }
    return HARK_OK;
}

int npy_load(const char *path, npy_array_t *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) {
        LOG_ERROR("cannot open %s", path);
        return HARK_ERR_IO;
    }
    int rc = HARK_ERR_FORMAT;
    unsigned char pre[12];
    char *hdr = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        LOG_ERROR("%s: not an npy file", path);
        goto done;
    }
    size_t hlen = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] >= 2) {
        if (fread(pre + 10, 1, 2, f) != 2)
            goto done;
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    if (hlen > (1u << 20))
        goto done;
    hdr = hark_malloc(hlen + 1);
    if (!hdr) {
        rc = HARK_ERR_NOMEM;
        goto done;
    }
    if (fread(hdr, 1, hlen, f) != hlen)
        goto done;
    hdr[hlen] = 0;
    rc = parse_header(path, hdr, out);
    if (rc)
        goto done;
    size_t bytes = out->count * dtype_size(out->dtype);
    out->data = hark_malloc(bytes);
    if (!out->data) {
        rc = HARK_ERR_NOMEM;
        goto done;
    }
    if (fread(out->data, 1, bytes, f) != bytes) {
        LOG_ERROR("%s: truncated npy data", path);
        rc = HARK_ERR_FORMAT;
        goto done;
    }
    rc = HARK_OK;
done:
    hark_free(hdr);
    fclose(f);
    if (rc)
        npy_free(out);
    return rc;
}

int npy_load_f32(const char *path, npy_array_t *out)
{
    int rc = npy_load(path, out);
    if (rc || out->dtype == NPY_F32)
        return rc;
    float *v = hark_malloc(out->count * sizeof(float) + 1);
    if (!v) {
        npy_free(out);
        return HARK_ERR_NOMEM;
    }
    for (size_t i = 0; i < out->count; i++) {
        switch (out->dtype) {
        case NPY_F64:
            v[i] = (float)((double *)out->data)[i];
            break;
        case NPY_I32:
            v[i] = (float)((int32_t *)out->data)[i];
            break;
        case NPY_I64:
            v[i] = (float)((int64_t *)out->data)[i];
            break;
        default:
            v[i] = (float)((uint8_t *)out->data)[i];
            break;
        }
    }
    hark_free(out->data);
    out->data = v;
    out->dtype = NPY_F32;
    return HARK_OK;
}

void npy_free(npy_array_t *a)
{
    if (!a)
        return;
    hark_free(a->data);
    a->data = NULL;
    a->count = 0;
}
