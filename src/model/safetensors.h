/* safetensors.h — read-only, mmap'ed safetensors files (zero-copy tensor views).
 * Format: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
 * data_offsets}, "__metadata__": {str: str}}, then the raw tensor bytes.
 * Tests: tests/model/test_safetensors.c */
#ifndef HARK_MODEL_SAFETENSORS_H
#define HARK_MODEL_SAFETENSORS_H

#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

typedef enum {
    ST_F32,
    ST_F16,
    ST_BF16,
    ST_F64,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL
} st_dtype_t;

typedef struct {
    const char *name; /* owned by the file object */
    st_dtype_t dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t count;     /* product of shape */
    const void *data; /* points into the mapping; valid until st_close */
    size_t nbytes;
} st_tensor_t;

typedef struct safetensors safetensors_t;

/* Maps `path`. Rejects (HARK_ERR_FORMAT, message naming the file and the problem) a short file,
 * a header length past the end, malformed JSON, unknown dtypes, offsets out of range or
 * overlapping, shape/byte-size mismatches. */
int st_open(const char *path, safetensors_t **out, hark_err_t *err);
void st_close(safetensors_t *st); /* accepts NULL */
size_t st_count(const safetensors_t *st);
const st_tensor_t *st_at(const safetensors_t *st, size_t i);
const st_tensor_t *st_find(const safetensors_t *st, const char *name); /* NULL if absent */
/* Value of a "__metadata__" key, or NULL. */
const char *st_metadata(const safetensors_t *st, const char *key);
size_t st_dtype_size(st_dtype_t t);
/* Weight lookup for the model builders (user = the safetensors_t): sets *data to the F32 tensor
 * `name` after checking it has exactly `shape`; HARK_ERR_NOT_FOUND / HARK_ERR_UNSUPPORTED /
 * HARK_ERR_FORMAT with a message naming the tensor (and both shapes). */
int st_get_f32(void *user, const char *name, int ndim, const int64_t *shape, const float **data,
               hark_err_t *err);
const char *st_dtype_name(st_dtype_t t);
/* st_get_f32 with the shape given as ndim (1..3) sizes, and every value checked finite
 * (HARK_ERR_FORMAT "tensor NAME: holds NaN or infinite values"). */
int st_get_f32_finite(safetensors_t *st, const char *name, int ndim, int64_t d0, int64_t d1,
                      int64_t d2, const float **data, hark_err_t *err);

#endif
