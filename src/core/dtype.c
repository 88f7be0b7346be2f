/* dtype.c — the element type table. Tests: tests/core/test_core.c */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *kserve, *config;
    size_t size;
} T[DTYPE_COUNT] = {
    {"INVALID", "TYPE_INVALID", 0}, {"BOOL", "TYPE_BOOL", 1},     {"UINT8", "TYPE_UINT8", 1},
    {"UINT16", "TYPE_UINT16", 2},   {"UINT32", "TYPE_UINT32", 4}, {"UINT64", "TYPE_UINT64", 8},
    {"INT8", "TYPE_INT8", 1},       {"INT16", "TYPE_INT16", 2},   {"INT32", "TYPE_INT32", 4},
    {"INT64", "TYPE_INT64", 8},     {"FP16", "TYPE_FP16", 2},     {"FP32", "TYPE_FP32", 4},
    {"FP64", "TYPE_FP64", 8},       {"BYTES", "TYPE_STRING", 0},  {"BF16", "TYPE_BF16", 2},
};

const char *const dtype_config_names[DTYPE_COUNT + 1] = {
    "TYPE_INVALID", "TYPE_BOOL",   "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64",
    "TYPE_INT8",    "TYPE_INT16",  "TYPE_INT32", "TYPE_INT64",  "TYPE_FP16",   "TYPE_FP32",
    "TYPE_FP64",    "TYPE_STRING", "TYPE_BF16",  NULL};

dtype_t dtype_from_kserve(const char *name)
{
    for (int i = 1; i < DTYPE_COUNT; i++)
        if (!strcmp(T[i].kserve, name))
            return (dtype_t)i;
    return DTYPE_INVALID;
}

const char *dtype_kserve_name(dtype_t t)
{
    return (unsigned)t < DTYPE_COUNT ? T[t].kserve : "INVALID";
}

const char *dtype_config_name(dtype_t t)
{
    return (unsigned)t < DTYPE_COUNT ? T[t].config : "TYPE_INVALID";
}

size_t dtype_size(dtype_t t)
{
    return (unsigned)t < DTYPE_COUNT ? T[t].size : 0;
}

float dtype_half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) {
        if (!m) {
            bits = s;
        } else { /* subnormal */
            float f = ldexpf((float)m, -24);
            return s ? -f : f;
        }
    } else if (e == 31) {
        bits = s | 0x7f800000u | (m << 13);
    } else {
        bits = s | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float dtype_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
