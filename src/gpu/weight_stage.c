/* weight_stage.c — see weight_stage.h */
#include "gpu/weight_stage.h"

size_t weight_stage_take(size_t *n, size_t count)
{
    size_t at = *n;
    *n += (count + 63) & ~(size_t)63; /* 256-byte aligned views in either block */
    return at;
}

#ifdef HARK_CUDA
#include "core/alloc.h"
#include "core/assert.h"
#include "hark.h"

#include <cuda_runtime_api.h>

static int upload_err(hark_err_t *err, cudaError_t e, const char *what)
{
    cudaGetLastError();
    return err_set(err, HARK_ERR_CUDA, "%s: weights upload: %s", what, cudaGetErrorString(e));
}

int weight_stage_upload(weight_stage_fn fill, void *user, ops_dtype_t dt, void **dmat, void **dflt,
                        size_t *bytes, float **keep_flt, const char *what, hark_err_t *err)
{
    weight_stage_t s = {.sizing = 1};
    fill(&s, user);
    size_t n_mat = s.n_mat, n_flt = s.n_flt, es = ops_dtype_size(dt);
    *bytes = n_mat * es + n_flt * sizeof(float);
    s = (weight_stage_t){.mat = hark_malloc(sizeof(float) * (n_mat ? n_mat : 1)),
                         .flt = hark_malloc(sizeof(float) * (n_flt ? n_flt : 1))};
    void *tmp = NULL;
    int rc = HARK_OK;
    cudaError_t e;
    if (!s.mat || !s.flt) {
        rc = err_set(err, HARK_ERR_NOMEM, "%s: out of memory staging the weights", what);
        goto done;
    }
    fill(&s, user);
    HARK_ASSERT(s.n_mat == n_mat && s.n_flt == n_flt);
    if ((e = cudaMalloc(dmat, n_mat * es)) != cudaSuccess ||
        (e = cudaMalloc(dflt, n_flt * sizeof(float))) != cudaSuccess ||
        (e = cudaMemcpy(*dflt, s.flt, n_flt * sizeof(float), cudaMemcpyHostToDevice)) !=
            cudaSuccess) {
        rc = upload_err(err, e, what);
        goto done;
    }
    if (dt == OPS_F32) {
        e = cudaMemcpy(*dmat, s.mat, n_mat * sizeof(float), cudaMemcpyHostToDevice);
    } else if ((e = cudaMalloc(&tmp, n_mat * sizeof(float))) == cudaSuccess &&
               (e = cudaMemcpy(tmp, s.mat, n_mat * sizeof(float), cudaMemcpyHostToDevice)) ==
                   cudaSuccess) {
        if ((rc = cuda_cast(*dmat, dt, tmp, OPS_F32, n_mat, NULL, err)) != HARK_OK)
            goto done;
        e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess)
        rc = upload_err(err, e, what);
    if (rc == HARK_OK && keep_flt) {
        *keep_flt = s.flt;
        s.flt = NULL;
    }
done:
    cudaFree(tmp);
    hark_free(s.mat);
    hark_free(s.flt);
    return rc;
}
#endif
