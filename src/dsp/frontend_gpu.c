/* frontend_gpu.c — the overlapped upload and features of frontend_gpu.h (CUDA runtime API; the
 * feature kernels are features.cu's). Without HARK_CUDA: the split, and stubs.
 * Tests: tests/dsp/test_frontend_gpu.c */
#include "dsp/frontend_gpu.h"

#include "core/alloc.h"
#include "hark.h"

#include <string.h>

#ifdef HARK_CUDA
#include "dsp/features_gpu.h"
#include <cuda_runtime_api.h>
#endif

int frontend_upload_split(const size_t *n, int batch, int chunks, int *first)
{
    int k = chunks < batch ? chunks : batch;
    first[0] = 0;
    if (k < 1)
        return 0;
    size_t total = 0, cum = 0;
    for (int b = 0; b < batch; b++)
        total += n[b];
    int b = 0;
    for (int c = 1; c < k; c++) {
        /* run c - 1: at least one utterance, then on to the first boundary at or past c / k of
         * the samples, leaving one utterance at least for each later run */
        size_t target = total / (size_t)k * (size_t)c + total % (size_t)k * (size_t)c / (size_t)k;
        int last = batch - (k - c);
        cum += n[b++];
        while (b < last && cum < target)
            cum += n[b++];
        first[c] = b;
    }
    first[k] = batch;
    return k;
}

static int check_chunks(int chunks, hark_err_t *err)
{
    if (chunks < 0 || chunks > FRONTEND_UPLOAD_MAX_CHUNKS)
        return err_set(err, HARK_ERR_INVALID_ARG, "upload chunks %d: must be in [0, %d]", chunks,
                       FRONTEND_UPLOAD_MAX_CHUNKS);
    return HARK_OK;
}

#ifdef HARK_CUDA

struct frontend_gpu {
    const feat_plan_t *plan;   /* lent: the features' plan (frame counts, n_mels) */
    struct feat_gpu *feats;    /* the plan's constants on the device: lent, or owned ... */
    int own_feats;             /* ... when frontend_gpu_create made them */
    int device;                /* the CUDA device of everything here */
    int max_batch, max_frames; /* creation limits */
    size_t max_samples;        /* creation limit; also the row capacity of h_pcm / d_pcm */
    int n_mels;                /* feat_dim(plan) */
    int chunks;                /* chunks of each upload (frontend_gpu_set_chunks) */
    cudaStream_t copy;         /* the uploads, beside the caller's compute stream */
    cudaEvent_t up_ev[FRONTEND_UPLOAD_MAX_CHUNKS]; /* chunk c of the upload is on the device */
    cudaEvent_t prof_start, prof_upload_end;       /* lent (frontend_gpu_profile) or NULL */
    float *h_pcm, *d_pcm; /* (max_batch, max_samples): a run uses rows of its batch's longest
                             utterance, (batch, stride); h_pcm pinned, the staging of pageable
                             input */
    int *h_lens, *d_lens; /* (max_batch) samples (h_lens: pinned, the upload's source) */
    float *d_feats;       /* (max_batch, max_frames, n_mels); a run's are (batch, t_max, n_mels) */
};

int frontend_gpu_create(const feat_plan_t *plan, struct feat_gpu *feats, int max_batch,
                        size_t max_samples, int max_frames, int device, frontend_gpu_t **out,
                        hark_err_t *err)
{
    *out = NULL;
    if (max_batch < 1 || max_samples < 1 || max_frames < 1 || device < 0)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "GPU front end: max_batch %d, max_samples %zu, max_frames %d, cuda:%d",
                       max_batch, max_samples, max_frames, device);
    frontend_gpu_t *fe = hark_calloc(1, sizeof *fe);
    if (!fe)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    fe->plan = plan;
    fe->device = device;
    fe->max_batch = max_batch;
    fe->max_frames = max_frames;
    fe->max_samples = max_samples;
    fe->n_mels = feat_dim(plan);
    fe->chunks = FRONTEND_UPLOAD_CHUNKS;
    int rc = HARK_OK;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        rc = err_set(err, HARK_ERR_CUDA, "GPU front end: cuda:%d: %s", device,
                     cudaGetErrorString(e));
        goto fail;
    }
    if (feats) {
        fe->feats = feats;
    } else {
        if ((rc = feat_gpu_create(plan, &fe->feats, err)))
            goto fail;
        fe->own_feats = 1;
    }
    e = cudaStreamCreateWithFlags(&fe->copy, cudaStreamNonBlocking);
    for (int c = 0; c < FRONTEND_UPLOAD_MAX_CHUNKS && e == cudaSuccess; c++)
        e = cudaEventCreateWithFlags(&fe->up_ev[c], cudaEventDisableTiming);
    if (e != cudaSuccess) {
        rc = err_set(err, HARK_ERR_CUDA, "GPU front end: copy stream and its events: %s",
                     cudaGetErrorString(e));
        goto fail;
    }
    const size_t B = (size_t)max_batch;
    if ((e = cudaMallocHost((void **)&fe->h_pcm, sizeof(float) * B * max_samples)) ||
        (e = cudaMalloc((void **)&fe->d_pcm, sizeof(float) * B * max_samples)) ||
        (e = cudaMallocHost((void **)&fe->h_lens, sizeof(int) * B)) ||
        (e = cudaMalloc((void **)&fe->d_lens, sizeof(int) * B)) ||
        (e = cudaMalloc((void **)&fe->d_feats,
                        sizeof(float) * B * (size_t)max_frames * (size_t)fe->n_mels))) {
        rc = err_set(err, HARK_ERR_CUDA,
                     "GPU front end: memory for %d utterances x %zu samples, %d frames: %s",
                     max_batch, max_samples, max_frames, cudaGetErrorString(e));
        goto fail;
    }
    *out = fe;
    return HARK_OK;
fail:
    frontend_gpu_destroy(fe);
    return rc;
}

void frontend_gpu_destroy(frontend_gpu_t *fe)
{
    if (!fe)
        return;
    if (fe->copy)
        cudaStreamSynchronize(fe->copy);
    for (int c = 0; c < FRONTEND_UPLOAD_MAX_CHUNKS; c++)
        if (fe->up_ev[c])
            cudaEventDestroy(fe->up_ev[c]);
    if (fe->copy)
        cudaStreamDestroy(fe->copy);
    cudaFreeHost(fe->h_pcm);
    cudaFree(fe->d_pcm);
    cudaFreeHost(fe->h_lens);
    cudaFree(fe->d_lens);
    cudaFree(fe->d_feats);
    if (fe->own_feats)
        feat_gpu_destroy(fe->feats);
    hark_free(fe);
}

int frontend_gpu_set_chunks(frontend_gpu_t *fe, int chunks, hark_err_t *err)
{
    int rc = check_chunks(chunks, err);
    if (rc || !fe)
        return rc;
    fe->chunks = chunks ? chunks : FRONTEND_UPLOAD_CHUNKS;
    return HARK_OK;
}

void frontend_gpu_profile(frontend_gpu_t *fe, void *start, void *upload_end)
{
    fe->prof_start = (cudaEvent_t)start;
    fe->prof_upload_end = (cudaEvent_t)upload_end;
}

int frontend_gpu_wait_failed(frontend_gpu_t *fe, void *compute_stream, int rc)
{
    cudaStreamSynchronize(fe->copy);
    cudaStreamSynchronize((cudaStream_t)compute_stream);
    cudaGetLastError();
    return rc;
}

int frontend_gpu_run(frontend_gpu_t *fe, const float *const *pcm, const size_t *n, int batch,
                     int t_max, void *compute_stream, float **d_feats, const int **d_lens,
                     hark_err_t *err)
{
    *d_feats = fe->d_feats;
    *d_lens = fe->d_lens;
    if (batch < 0 || batch > fe->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "GPU front end: batch of %d exceeds its %d", batch,
                       fe->max_batch);
    if (t_max < 0 || t_max > fe->max_frames)
        return err_set(err, HARK_ERR_TOO_LARGE, "GPU front end: %d frames exceed its %d", t_max,
                       fe->max_frames);
    size_t stride = 1; /* the row length of this batch's device PCM: its longest utterance */
    for (int b = 0; b < batch; b++) {
        if (n[b] > fe->max_samples)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "GPU front end: utterance %d: %zu samples exceed its %zu", b, n[b],
                           fe->max_samples);
        if (t_max > 0 && feat_num_frames(fe->plan, n[b]) > t_max)
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "GPU front end: utterance %d has %d frames, more than t_max %d", b,
                           feat_num_frames(fe->plan, n[b]), t_max);
        if (n[b] > stride)
            stride = n[b];
    }
    if (batch == 0 || t_max == 0)
        return HARK_OK;
    cudaSetDevice(fe->device);
    cudaStream_t s = (cudaStream_t)compute_stream, cs = fe->copy;
    if (fe->prof_start)
        cudaEventRecord(fe->prof_start, cs);
    /* The lengths first (every chunk's features read them), then the utterances in chunks of
     * about equal bytes on the copy stream, each to its row of d_pcm, by DMA straight from
     * page-locked input (the server's request bodies) or through the pinned staging rows. The
     * compute stream waits for chunk c's event and computes its rows' features while chunk c + 1
     * uploads (features are per utterance: the chunking changes no value). The pinned h_lens /
     * h_pcm rows are free to rewrite because the caller waited for the previous run. */
    const int D = fe->n_mels;
    for (int b = 0; b < batch; b++)
        fe->h_lens[b] = (int)n[b];
    cudaError_t e = cudaMemcpyAsync(fe->d_lens, fe->h_lens, sizeof(int) * (size_t)batch,
                                    cudaMemcpyHostToDevice, cs);
    int first[FRONTEND_UPLOAD_MAX_CHUNKS + 1], rc = HARK_OK;
    int chunks = frontend_upload_split(n, batch, fe->chunks, first);
    for (int c = 0; c < chunks && e == cudaSuccess && rc == HARK_OK; c++) {
        int b0 = first[c], nb = first[c + 1] - first[c];
        for (int b = b0; b < b0 + nb && e == cudaSuccess; b++) {
            if (!n[b])
                continue;
            const float *src = pcm[b];
            struct cudaPointerAttributes at;
            if (cudaPointerGetAttributes(&at, src) != cudaSuccess) {
                cudaGetLastError();
                at.type = cudaMemoryTypeUnregistered;
            }
            if (at.type != cudaMemoryTypeHost) {
                memcpy(fe->h_pcm + (size_t)b * stride, pcm[b], sizeof(float) * n[b]);
                src = fe->h_pcm + (size_t)b * stride;
            }
            e = cudaMemcpyAsync(fe->d_pcm + (size_t)b * stride, src, sizeof(float) * n[b],
                                cudaMemcpyHostToDevice, cs);
        }
        /* the profile's end of the upload goes before the last chunk's event, so that the
         * compute stream's wait (and so the caller's) covers it */
        if (e == cudaSuccess && c == chunks - 1 && fe->prof_upload_end)
            e = cudaEventRecord(fe->prof_upload_end, cs);
        if (e == cudaSuccess)
            e = cudaEventRecord(fe->up_ev[c], cs);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(s, fe->up_ev[c], 0);
        if (e == cudaSuccess)
            rc = feat_gpu_compute(fe->feats, fe->d_feats + (size_t)b0 * t_max * D, NULL,
                                  fe->d_pcm + (size_t)b0 * stride, stride, fe->d_lens + b0, nb,
                                  t_max, s, err);
    }
    if (e != cudaSuccess)
        return frontend_gpu_wait_failed(
            fe, s, err_set(err, HARK_ERR_CUDA, "upload: %s", cudaGetErrorString(e)));
    if (rc)
        return frontend_gpu_wait_failed(fe, s, rc);
    return HARK_OK;
}

#else /* !HARK_CUDA */

int frontend_gpu_create(const feat_plan_t *plan, struct feat_gpu *feats, int max_batch,
                        size_t max_samples, int max_frames, int device, frontend_gpu_t **out,
                        hark_err_t *err)
{
    *out = NULL;
    return err_set(err, HARK_ERR_NO_DEVICE, "GPU front end: hark was built without CUDA");
}

void frontend_gpu_destroy(frontend_gpu_t *fe)
{
    (void)fe;
}

int frontend_gpu_set_chunks(frontend_gpu_t *fe, int chunks, hark_err_t *err)
{
    return check_chunks(chunks, err);
}

void frontend_gpu_profile(frontend_gpu_t *fe, void *start, void *upload_end) {}

int frontend_gpu_wait_failed(frontend_gpu_t *fe, void *compute_stream, int rc)
{
    return rc;
}

int frontend_gpu_run(frontend_gpu_t *fe, const float *const *pcm, const size_t *n, int batch,
                     int t_max, void *compute_stream, float **d_feats, const int **d_lens,
                     hark_err_t *err)
{
    *d_feats = NULL;
    *d_lens = NULL;
    return err_set(err, HARK_ERR_NO_DEVICE, "GPU front end: hark was built without CUDA");
}

#endif
