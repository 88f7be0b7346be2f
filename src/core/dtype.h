/* dtype.h — the one table of tensor element types: Triton's DataType numbering, the KServe v2
 * names ("FP32", "BYTES"), the config.pbtxt names ("TYPE_FP32", "TYPE_STRING") and element sizes.
 * The KServe codec (api/kserve.h), config.pbtxt (server/model_config.h) and gRPC all use it.
 * Tests: tests/core/test_core.c */
#ifndef HARK_CORE_DTYPE_H
#define HARK_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum { /* values as in Triton's model_config.proto DataType */
               DTYPE_INVALID = 0,
               DTYPE_BOOL,
               DTYPE_UINT8,
               DTYPE_UINT16,
               DTYPE_UINT32,
               DTYPE_UINT64,
               DTYPE_INT8,
               DTYPE_INT16,
               DTYPE_INT32,
               DTYPE_INT64,
               DTYPE_FP16,
               DTYPE_FP32,
               DTYPE_FP64,
               DTYPE_BYTES, /* TYPE_STRING in config.pbtxt */
               DTYPE_BF16,
} dtype_t;
#define DTYPE_COUNT 15

/* "FP32" -> DTYPE_FP32; DTYPE_INVALID for an unknown name. */
dtype_t dtype_from_kserve(const char *name);
const char *dtype_kserve_name(dtype_t t); /* "INVALID" out of range */
const char *dtype_config_name(dtype_t t); /* "TYPE_INVALID" out of range */
/* Bytes per element; 0 for BYTES (variable) and INVALID. */
size_t dtype_size(dtype_t t);
/* The config.pbtxt names in enum order, NULL-terminated (for the schema's enum check). */
extern const char *const dtype_config_names[];
/* IEEE binary16 / bfloat16 bits -> float (exact: every value is representable). */
float dtype_half_to_float(uint16_t h);
float dtype_bf16_to_float(uint16_t h);

#endif
