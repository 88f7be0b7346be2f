/* transcribe.c — the smallest program over libhark: load a model directory, read an audio file,
 * print its transcript. Build: cc transcribe.c $(pkg-config --cflags --libs hark)
 * Run: ./transcribe MODEL_DIR FILE.wav [decoding_method]
 * Tested by tests/capi/test_install.c (built here and against an installed hark). */
#include <hark.h>

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR FILE.wav [decoding_method]\n", argv[0]);
        return 2;
    }
    hark_model_t *model = NULL;
    hark_model_opts_t mo = {0}; /* zeroed: CPU, fp32, the model's first version */
    if (hark_model_load(argv[1], &mo, &model) != HARK_OK) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], hark_last_error());
        return 1;
    }
    float *pcm = NULL;
    size_t n = 0;
    int rate = hark_model_sample_rate(model);
    if (hark_decode_audio_file(argv[2], rate, &pcm, &n, NULL) != HARK_OK) {
        fprintf(stderr, "cannot read %s: %s\n", argv[2], hark_last_error());
        hark_model_destroy(model);
        return 1;
    }
    hark_asr_opts_t opts = {0}; /* zeroed: the model's decoding defaults */
    opts.decoding_method = argc > 3 ? argv[3] : NULL;
    const float *batch[1] = {pcm};
    hark_asr_result_t *result = NULL;
    int status = 0;
    if (hark_recognize(model, batch, &n, 1, rate, &opts, &result) != HARK_OK) {
        fprintf(stderr, "cannot recognize %s: %s\n", argv[2], hark_last_error());
        status = 1;
    } else {
        printf("%s\n", hark_asr_result_text(result, 0));
    }
    hark_asr_result_destroy(result);
    hark_pcm_free(pcm);
    hark_model_destroy(model);
    return status;
}
