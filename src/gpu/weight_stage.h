/* weight_stage.h — a GPU model's weights as two device blocks: the matrices in the compute type
 * (dt; cast from float on the device) and the float vectors (biases, norms, small tables). The
 * engine's fill function lays its tensors out into host images twice: once only sizing (views
 * taken, nothing written), once writing; the views are offsets into the blocks, turned into
 * device pointers by the engine after the upload. Used by the Jasper, FastSpeech and HiFi-GAN GPU
 * engines. Only with HARK_CUDA; its tests are theirs (every GPU model test loads through it).
 *
 * OWNERSHIP AND THREADS: the blocks belong to the caller (cudaFree); reentrant. */
#ifndef HARK_GPU_WEIGHT_STAGE_H
#define HARK_GPU_WEIGHT_STAGE_H

#include "core/error.h"
#include "ops/ops_cuda.h"

#include <stddef.h>

typedef struct {
    float *mat, *flt;    /* the host images (NULL while sizing) */
    size_t n_mat, n_flt; /* floats taken so far in each */
    int sizing;          /* first pass: count only */
} weight_stage_t;

/* count floats at the end of a block of *n floats (256-byte aligned): the offset */
size_t weight_stage_take(size_t *n, size_t count);

/* lays the weights out (sizing when s->sizing, else writing into s->mat and s->flt) */
typedef void (*weight_stage_fn)(weight_stage_t *s, void *user);

/* Runs fill twice and uploads the images to the current device: *dmat (n_mat values of dt) and
 * *dflt (n_flt floats); *bytes their size on the device; *keep_flt (when not NULL) the host image
 * of the float block, the caller's to hark_free. `what` names the engine in errors. HARK_ERR_NOMEM,
 * HARK_ERR_CUDA (the blocks allocated so far stay in *dmat / *dflt for the caller to free). */
int weight_stage_upload(weight_stage_fn fill, void *user, ops_dtype_t dt, void **dmat, void **dflt,
                        size_t *bytes, float **keep_flt, const char *what, hark_err_t *err);

#endif
