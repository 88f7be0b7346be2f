/* Tests for src/model/safetensors.c: a round trip through files written here, and every kind of
 * malformed file (truncated, bad header length, bad JSON, unknown dtype, bad offsets). */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

/* Writes a safetensors file: u64 LE length of `header` (padded with spaces to a multiple of 8
 * unless raw_len is given), the header, then `data`. raw_len != 0 overrides the length field. */
static void write_st(const char *path, const char *header, const void *data, size_t data_len,
                     uint64_t raw_len)
{
    size_t hl = strlen(header), pad = (8 - hl % 8) % 8;
    uint64_t len = raw_len ? raw_len : hl + pad;
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(len >> (8 * i));
    FILE *f = fopen(path, "wb");
    fwrite(lb, 1, 8, f);
    fwrite(header, 1, hl, f);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', f);
    if (data_len)
        fwrite(data, 1, data_len, f);
    fclose(f);
}

static const char *tmpfile_in(test_ctx_t *t, const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(t), name);
    return path;
}

#define GOOD_HEADER                                                                                \
    "{\"__metadata__\":{\"format\":\"hark\",\"family\":\"test\"},"                                 \
    "\"b.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"                    \
    "\"a.ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]},"                        \
    "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,4],\"data_offsets\":[40,40]},"                      \
    "\"c.half\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[40,48]}}"

static unsigned char good_data[48];

static void fill_good_data(void)
{
    float w[6] = {1, -2, 3.5f, 4, 5, 6e-7f};
    int64_t ids[2] = {7, -1};
    memcpy(good_data, w, sizeof w);
    memcpy(good_data + 24, ids, sizeof ids);
    for (int i = 40; i < 48; i++)
        good_data[i] = (unsigned char)i;
}

TEST(st_roundtrip)
{
    fill_good_data();
    const char *p = tmpfile_in(t, "good.safetensors");
    write_st(p, GOOD_HEADER, good_data, sizeof good_data, 0);
    safetensors_t *st = NULL;
    hark_err_t err = {0};
    CHECKF(st_open(p, &st, &err) == HARK_OK, "%s", err.msg);
    CHECK_EQ_INT(st_count(st), 4);
    /* header order is kept */
    CHECK(!strcmp(st_at(st, 0)->name, "b.weight"));
    CHECK(!strcmp(st_at(st, 3)->name, "c.half"));
    CHECK(st_at(st, 4) == NULL);
    const st_tensor_t *w = st_find(st, "b.weight");
    CHECK(w && w->dtype == ST_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3);
    CHECK(w->count == 6 && w->nbytes == 24);
    CHECK(((uintptr_t)w->data % 4) == 0);
    CHECK(memcmp(w->data, good_data, 24) == 0);
    const st_tensor_t *ids = st_find(st, "a.ids");
    CHECK(ids && ids->dtype == ST_I64 && ((const int64_t *)ids->data)[1] == -1);
    const st_tensor_t *e = st_find(st, "empty");
    CHECK(e && e->count == 0 && e->nbytes == 0 && e->ndim == 2);
    CHECK(st_find(st, "c.half") && st_find(st, "c.half")->dtype == ST_F16);
    CHECK(st_find(st, "nope") == NULL);
    CHECK(st_find(st, "") == NULL);
    CHECK(!strcmp(st_metadata(st, "format"), "hark"));
    CHECK(!strcmp(st_metadata(st, "family"), "test"));
    CHECK(st_metadata(st, "missing") == NULL);
    st_close(st);
    st_close(NULL);
}

/* F16 / BF16 weights (the converters' --dtype float16 / bfloat16) come out of st_get_f32 as
 * exact float32 values; other types are refused by name */
TEST(st_get_f32_widens_16_bit)
{
    /* F16: 1, -2, 65504 (max), 2^-24 (smallest subnormal), -0, inf; BF16: 1.5, -3.0e38ish */
    static const char hdr[] = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
                              "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[16,24]}}";
    unsigned char d[24] = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80, 0x00, 0x7c,
                           0xc0, 0x3f, 0x61, 0xff, 1,    0,    0,    0,    0,    0,    0,    0};
    const char *p = tmpfile_in(t, "half.safetensors");
    write_st(p, hdr, d, sizeof d, 0);
    safetensors_t *st = NULL;
    hark_err_t err = {0};
    CHECKF(st_open(p, &st, &err) == HARK_OK, "%s", err.msg);
    const float *h = NULL, *h2 = NULL, *b = NULL;
    int64_t s23[2] = {2, 3}, s2[1] = {2}, s1[1] = {1}, s32[2] = {3, 2};
    CHECKF(st_get_f32(st, "h", 2, s23, &h, &err) == HARK_OK, "%s", err.msg);
    CHECK(h[0] == 1.0f && h[1] == -2.0f && h[2] == 65504.0f && h[3] == ldexpf(1.0f, -24));
    CHECK(h[4] == 0.0f && signbit(h[4]) && isinf(h[5]) && h[5] > 0);
    CHECK(st_get_f32(st, "h", 2, s23, &h2, &err) == HARK_OK && h2 == h); /* widened once */
    CHECKF(st_get_f32(st, "b", 1, s2, &b, &err) == HARK_OK, "%s", err.msg);
    CHECK(b[0] == 1.5f && b[1] < -2.9e38f && b[1] > -3.0e38f);
    CHECK(st_get_f32(st, "h", 2, s32, &h2, &err) == HARK_ERR_FORMAT);
    CHECK(strstr(err.msg, "'h'") && strstr(err.msg, "[2,3]"));
    CHECK(st_get_f32(st, "i", 1, s1, &h2, &err) == HARK_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "'i'") && strstr(err.msg, "I64"));
    CHECK(st_get_f32_finite(st, "h", 2, 2, 3, 0, &h2, &err) == HARK_ERR_FORMAT); /* the inf */
    st_close(st);
}

TEST(st_dtypes)
{
    CHECK_EQ_INT(st_dtype_size(ST_F32), 4);
    CHECK_EQ_INT(st_dtype_size(ST_BF16), 2);
    CHECK_EQ_INT(st_dtype_size(ST_F64), 8);
    CHECK_EQ_INT(st_dtype_size(ST_BOOL), 1);
    CHECK(!strcmp(st_dtype_name(ST_I32), "I32"));
    CHECK(!strcmp(st_dtype_name(ST_U8), "U8"));
    /* every dtype name parses back */
    static const char *names[] = {"F32", "F16", "BF16", "F64", "I64",
                                  "I32", "I16", "I8",   "U8",  "BOOL"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char hdr[160];
        /* a scalar spans one element */
        size_t sz =
            !strcmp(names[i], "F64") || !strcmp(names[i], "I64")                                ? 8
            : !strcmp(names[i], "F32") || !strcmp(names[i], "I32")                              ? 4
            : !strcmp(names[i], "F16") || !strcmp(names[i], "BF16") || !strcmp(names[i], "I16") ? 2
                                                                                                : 1;
        snprintf(hdr, sizeof hdr,
                 "{\"x\":{\"dtype\":\"%s\",\"shape\":[],\"data_offsets\":[0,%zu]}}", names[i], sz);
        const char *p = tmpfile_in(t, "d.safetensors");
        unsigned char d[8] = {0};
        write_st(p, hdr, d, sizeof d, 0);
        safetensors_t *st = NULL;
        hark_err_t err = {0};
        CHECKF(st_open(p, &st, &err) == HARK_OK, "%s: %s", names[i], err.msg);
        const st_tensor_t *x = st_find(st, "x");
        CHECK(x && x->ndim == 0 && x->count == 1 && x->nbytes == sz);
        CHECK(!strcmp(st_dtype_name(x->dtype), names[i]));
        CHECK_EQ_INT(st_dtype_size(x->dtype), sz);
        st_close(st);
    }
}

/* Opens `p` expecting failure with `status` and `needle` in the message. */
static int expect_fail(test_ctx_t *t, const char *p, int status, const char *needle)
{
    safetensors_t *st = (safetensors_t *)(uintptr_t)1;
    hark_err_t err = {0};
    int rc = st_open(p, &st, &err);
    if (rc != status) {
        test_fail(t, __FILE__, __LINE__, "status %d (want %d) for '%s': %s", rc, status, needle,
                  err.msg);
        return 0;
    }
    if (st != NULL) {
        test_fail(t, __FILE__, __LINE__, "*out not NULL on failure");
        return 0;
    }
    if (!strstr(err.msg, needle) || !strstr(err.msg, p)) {
        test_fail(t, __FILE__, __LINE__, "message '%s' lacks '%s' or the path", err.msg, needle);
        return 0;
    }
    return 1;
}

/* Writes `header` + `len` bytes of data and expects HARK_ERR_FORMAT naming `needle`. */
static int bad_header(test_ctx_t *t, const char *header, size_t len, const char *needle)
{
    static unsigned char data[64];
    const char *p = tmpfile_in(t, "bad.safetensors");
    write_st(p, header, data, len, 0);
    return expect_fail(t, p, HARK_ERR_FORMAT, needle);
}

TEST(st_rejects_truncated)
{
    fill_good_data();
    const char *p = tmpfile_in(t, "t.safetensors");
    /* empty file and 5-byte file */
    FILE *f = fopen(p, "wb");
    fclose(f);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "too short"));
    f = fopen(p, "wb");
    fwrite("\x10\0\0\0\0", 1, 5, f);
    fclose(f);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "too short"));
    /* header cut off: the length field promises more than the file holds */
    write_st(p, "{\"a\":", NULL, 0, 400);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "header length 400"));
    /* data cut off: last tensor's offsets run past the end */
    write_st(p, GOOD_HEADER, good_data, sizeof good_data - 3, 0);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "c.half"));
    /* missing file */
    CHECK(expect_fail(t, tmpfile_in(t, "absent.safetensors"), HARK_ERR_IO, "cannot open"));
    /* a directory */
    CHECK(expect_fail(t, test_tmpdir(t), HARK_ERR_IO, "not a regular file"));
}

TEST(st_rejects_huge_header_length)
{
    const char *p = tmpfile_in(t, "h.safetensors");
    write_st(p, "{}", NULL, 0, 1ULL << 62);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "header length"));
    write_st(p, "{}", NULL, 0, UINT64_MAX);
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "header length"));
    write_st(p, "{}", NULL, 0, 1); /* too short to be JSON */
    CHECK(expect_fail(t, p, HARK_ERR_FORMAT, "too short"));
}

TEST(st_rejects_bad_json)
{
    CHECK(bad_header(t, "{\"a\": {\"dtype\": \"F32\", ", 0, "not valid JSON"));
    CHECK(bad_header(t, "not json at all", 0, "not valid JSON"));
    CHECK(bad_header(t, "[1, 2, 3]", 0, "not a JSON object"));
    CHECK(bad_header(t, "{} garbage", 0, "trailing bytes"));
    CHECK(bad_header(t, "{\"a\": 3}", 0, "'a'"));
    CHECK(bad_header(t, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "data_offsets"));
    CHECK(bad_header(t, "{\"a\": {\"dtype\": 5, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                     "dtype"));
    CHECK(bad_header(t, "{\"__metadata__\": {\"k\": 3}}", 0, "__metadata__ 'k'"));
    CHECK(bad_header(t, "{\"__metadata__\": [\"k\"]}", 0, "__metadata__"));
    CHECK(bad_header(t,
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                     8, "appears twice"));
}

TEST(st_rejects_unknown_dtype)
{
    CHECK(bad_header(t,
                     "{\"w\": {\"dtype\": \"F8_E4M3\", \"shape\": [4], \"data_offsets\": [0, 4]}}",
                     4, "unknown dtype 'F8_E4M3'"));
    CHECK(bad_header(t, "{\"w\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
                     4, "unknown dtype 'f32'"));
}

TEST(st_rejects_bad_offsets_and_shapes)
{
    /* out of range */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
                     "out of range"));
    /* begin > end */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
                     "out of range"));
    /* negative / fractional / missing offsets */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
                     "data_offsets"));
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", 8,
                     "data_offsets"));
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8,
                     "data_offsets"));
    /* overlapping */
    CHECK(bad_header(t,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     16, "overlap"));
    CHECK(bad_header(t,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                     16, "overlap"));
    /* span does not match shape x dtype */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16,
                     "need 12"));
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16,
                     "need 8"));
    /* bad shapes */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8,
                     "shape[0]"));
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8,
                     "shape[1]"));
    CHECK(bad_header(t,
                     "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                     "\"data_offsets\":[0,1]}}",
                     8, "9 dimensions"));
    CHECK(bad_header(t,
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                     "\"data_offsets\":[0,4]}}",
                     8, "overflow"));
    /* misaligned F32 data (offset 2 within an 8-aligned buffer) */
    CHECK(bad_header(t, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8,
                     "aligned"));
}

TEST(st_gaps_and_unaligned_bytes_are_fine)
{
    /* a gap between tensors is harmless; U8 data needs no alignment */
    unsigned char d[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const char *p = tmpfile_in(t, "g.safetensors");
    write_st(p,
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[1,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             d, sizeof d, 0);
    safetensors_t *st = NULL;
    hark_err_t err = {0};
    CHECKF(st_open(p, &st, &err) == HARK_OK, "%s", err.msg);
    CHECK(((const unsigned char *)st_find(st, "a")->data)[0] == 2);
    CHECK(((const unsigned char *)st_find(st, "b")->data)[0] == 9);
    st_close(st);
}

TEST(st_out_of_memory_paths)
{
    fill_good_data();
    const char *p = tmpfile_in(t, "oom.safetensors");
    write_st(p, GOOD_HEADER, good_data, sizeof good_data, 0);
    int ok = 0, fails = 0;
    for (long n = 1; n < 200 && !ok; n++) {
        safetensors_t *st = NULL;
        hark_err_t err = {0};
        alloc_fail_after(n);
        int rc = st_open(p, &st, &err);
        alloc_fail_reset();
        CHECKF(rc == HARK_OK || rc == HARK_ERR_NOMEM, "n=%ld: rc %d: %s", n, rc, err.msg);
        if (rc == HARK_OK) {
            ok = 1;
            CHECK(st_count(st) == 4);
        } else {
            CHECK(st == NULL);
            fails++;
        }
        st_close(st);
    }
    CHECK(ok && fails >= 8); /* st, path, tables, each name and metadata string */
}
