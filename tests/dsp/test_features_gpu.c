/* GPU tests for src/dsp/features.cu against the CPU reference (feat_compute): a padded batch of
 * awkward lengths (0, shorter than a frame, odd sizes, real speech) for all three front ends;
 * pad rows must be zero and each item must equal its single-utterance CPU result. */
#include "test.h"

#ifdef HARK_CUDA
#include "audio/audio.h"
#include "dsp/features.h"
#include "dsp/features_gpu.h"
#include "hark.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static void gpu_vs_cpu(test_ctx_t *t, feat_kind_t kind, feat_tts_variant_t variant, double tol)
{
    feat_opts_t o;
    feat_default_opts(&o, kind);
    o.tts_variant = variant;
    feat_plan_t *p;
    CHECK_OK(feat_plan_create(&o, &p, NULL));
    enum { B = 7 };
    int lens[B] = {0, 399, 400, 1237, 4801, 16000, 33333};
    size_t stride = 33333 + 11;
    unsigned seed = 99;
    float *pcm = calloc((size_t)B * stride, sizeof(float));
    /* real speech where available, else noise + a chirp */
    audio_t a = {0};
    audio_opts_t ao = {.target_rate = o.sample_rate};
    const char *jfk = test_shared("audio/en/wav/jfk.wav");
    int have_real = jfk && audio_decode_file(jfk, &ao, &a, NULL) == HARK_OK && a.n > 40000;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < lens[b]; i++)
            pcm[(size_t)b * stride + i] =
                have_real ? a.samples[i + 1000 * b]
                          : 0.3f * sinf(1e-4f * i * i) + 0.01f * test_randf(&seed);
    for (size_t i = 0; i < (size_t)B * stride; i++) /* garbage beyond each length */
        if ((long)(i % stride) >= lens[i / stride])
            pcm[i] = 1e6f;
    int t_max = 0;
    for (int b = 0; b < B; b++)
        if (feat_num_frames(p, (size_t)lens[b]) > t_max)
            t_max = feat_num_frames(p, (size_t)lens[b]);
    t_max += 3;
    int D = feat_dim(p);
    float *d_pcm, *d_out;
    int *d_lens, *d_frames;
    CHECK(cudaMalloc((void **)&d_pcm, sizeof(float) * B * stride) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_out, sizeof(float) * B * t_max * D) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_lens, sizeof(int) * B) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_frames, sizeof(int) * B) == cudaSuccess);
    CHECK(cudaMemcpy(d_pcm, pcm, sizeof(float) * B * stride, cudaMemcpyHostToDevice) ==
          cudaSuccess);
    CHECK(cudaMemcpy(d_lens, lens, sizeof(int) * B, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaMemset(d_out, 0x7f, sizeof(float) * B * t_max * D) == cudaSuccess); /* poison */
    feat_gpu_t *g;
    hark_err_t e = {0};
    CHECKF(feat_gpu_create(p, &g, &e) == HARK_OK, "%s", e.msg);
    CHECKF(feat_gpu_compute(g, d_out, d_frames, d_pcm, stride, d_lens, B, t_max, NULL, &e) ==
               HARK_OK,
           "%s", e.msg);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    float *out = malloc(sizeof(float) * B * t_max * D);
    int frames[B];
    CHECK(cudaMemcpy(out, d_out, sizeof(float) * B * t_max * D, cudaMemcpyDeviceToHost) ==
          cudaSuccess);
    CHECK(cudaMemcpy(frames, d_frames, sizeof(int) * B, cudaMemcpyDeviceToHost) == cudaSuccess);
    double worst = 0;
    for (int b = 0; b < B; b++) {
        int T = feat_num_frames(p, (size_t)lens[b]);
        CHECK_EQ_INT(frames[b], T);
        float *ref = malloc(sizeof(float) * (size_t)(T + 1) * D);
        CHECK_OK(feat_compute(p, pcm + (size_t)b * stride, (size_t)lens[b], ref, NULL));
        double err = test_max_abs_diff(out + (size_t)b * t_max * D, ref, (size_t)T * D);
        if (err > worst)
            worst = err;
        for (size_t i = (size_t)T * D; i < (size_t)t_max * D; i++)
            CHECKF(out[(size_t)b * t_max * D + i] == 0.0f, "item %d: pad not zeroed", b);
        free(ref);
        CHECKF(err <= tol, "%s item %d (n=%d): gpu vs cpu max abs %.3g > %.1g",
               feat_kind_name(kind), b, lens[b], err, tol);
    }
    printf("    %s: gpu vs cpu max abs error %.3g (%s input)\n", feat_kind_name(kind), worst,
           have_real ? "speech" : "synthetic");
    feat_gpu_destroy(g);
    cudaFree(d_pcm);
    cudaFree(d_out);
    cudaFree(d_lens);
    cudaFree(d_frames);
    free(out);
    free(pcm);
    audio_free(&a);
    feat_plan_destroy(p);
}

/* Same operations in the same order; only logf (GPU: <= 1 ulp) and double reductions differ. */
GPU_TEST(gpu_fbank_matches_cpu)
{
    gpu_vs_cpu(t, FEAT_FBANK, TTS_MEL_HIFIGAN, 1e-4);
}

GPU_TEST(gpu_nemo_mel_matches_cpu)
{
    gpu_vs_cpu(t, FEAT_NEMO_MEL, TTS_MEL_HIFIGAN, 1e-4);
}

GPU_TEST(gpu_tts_mel_matches_cpu)
{
    gpu_vs_cpu(t, FEAT_TTS_MEL, TTS_MEL_HIFIGAN, 1e-4);
    if (!test_failed(t))
        gpu_vs_cpu(t, FEAT_TTS_MEL, TTS_MEL_TACOTRON2, 1e-4);
}
#endif
