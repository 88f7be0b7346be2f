/* Tests for src/core/npy.c: round trip, dtype conversion, rejection of bad files. */
#include "test.h"

#include "core/npy.h"
#include "hark.h"

#include <stdio.h>
#include <string.h>

TEST(npy_roundtrip)
{
    char path[512];
    snprintf(path, sizeof path, "%s/a.npy", test_tmpdir(t));
    float v[6] = {1, -2, 3.5f, 4, 5, 6e-7f};
    int64_t shape[2] = {2, 3};
    CHECK_OK(npy_save_f32(path, v, 2, shape));
    npy_array_t a;
    CHECK_OK(npy_load(path, &a));
    CHECK(a.dtype == NPY_F32 && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3);
    CHECK(memcmp(a.data, v, sizeof v) == 0);
    npy_free(&a);
    int64_t iv[3] = {7, -1, 1LL << 40};
    int64_t s1 = 3;
    CHECK_OK(npy_save(path, NPY_I64, iv, 1, &s1));
    CHECK_OK(npy_load_f32(path, &a));
    CHECK(a.ndim == 1 && a.shape[0] == 3);
    CHECK(((float *)a.data)[1] == -1.0f);
    npy_free(&a);
}

TEST(npy_rejects_garbage)
{
    char path[512];
    snprintf(path, sizeof path, "%s/b.npy", test_tmpdir(t));
    FILE *f = fopen(path, "wb");
    fputs("not numpy at all", f);
    fclose(f);
    npy_array_t a;
    char log[2048];
    test_stderr_begin(t); /* the errors npy_load logs are expected: checked here, not shown */
    CHECK(npy_load(path, &a) == HARK_ERR_FORMAT);
    CHECK(npy_load("/nonexistent/x.npy", &a) == HARK_ERR_IO);
    test_stderr_end(t, log, sizeof log);
    CHECKF(strstr(log, "b.npy: not an npy file") && strstr(log, "cannot open /nonexistent/x.npy"),
           "logged: %s", log);
}
