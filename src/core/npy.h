/* npy.h — NumPy .npy read/write (version 1.0/2.0 headers, C order, little-endian).
 * Tests: tests/core/test_npy.c */
#ifndef HARK_CORE_NPY_H
#define HARK_CORE_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8

typedef enum { NPY_F32, NPY_F64, NPY_I32, NPY_I64, NPY_U8 } npy_dtype_t;

typedef struct {
    npy_dtype_t dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t count; /* product of shape */
    void *data;   /* count elements of dtype; owned, release with npy_free */
} npy_array_t;

/* Writes a float32 array of the given shape. Returns HARK_OK or HARK_ERR_IO. */
int npy_save_f32(const char *path, const float *data, int ndim, const int64_t *shape);
int npy_save(const char *path, npy_dtype_t dtype, const void *data, int ndim, const int64_t *shape);
/* Reads any supported dtype. HARK_ERR_IO, HARK_ERR_FORMAT (names the problem in the log). */
int npy_load(const char *path, npy_array_t *out);
/* Reads and converts to float32 (from f32, f64, i32, i64). */
int npy_load_f32(const char *path, npy_array_t *out);
void npy_free(npy_array_t *a);

#endif
