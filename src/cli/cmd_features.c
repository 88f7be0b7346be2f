/* cmd_features.c — `hark features FILE --kind fbank|nemo-mel|tts-mel ... --npy OUT.npy`:
 * decodes one audio file, resamples it to the front end's rate and writes (frames, bins) float32.
 * Tests: tests/cli/test_cli_features.c */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/npy.h"
#include "dsp/cmvn.h"
#include "dsp/features.h"
#include "hark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void features_usage(FILE *f)
{
    fprintf(
        f,
        "usage: hark features FILE --kind fbank|nemo-mel|tts-mel --npy OUT.npy\n"
        "                        [--num-mel-bins N] [--cmvn global_cmvn.json]\n"
        "                        [--variant wenet|icefall|sherpa|hifigan|tacotron2]\n"
        "                        [--dither D]\n\n"
        "Computes the features of one audio file (WAV, FLAC, OGG/Vorbis, MP3; any rate,\n"
        "resampled to the front end's rate: 16 kHz for fbank and nemo-mel, 22.05 kHz for\n"
        "tts-mel) and writes them as a float32 .npy of shape (frames, bins).\n"
        "  fbank     Kaldi fbank (80 bins, 25/10 ms, povey) as WeNet (default) computes it;\n"
        "            --variant icefall: snip_edges false, input in [-1, 1), high_freq -400\n"
        "            (icefall pretrained.py); sherpa: the same with high_freq 0 (sherpa triton)\n"
        "  nemo-mel  Jasper/NeMo log-mel (n_fft 512, hann 320/160, 64 bins, normalised)\n"
        "  tts-mel   HiFi-GAN (default) or Tacotron2 log-mel (n_fft 1024, hop 256, 80 bins)\n"
        "  --cmvn    apply WeNet's JSON global CMVN after the features\n");
}

int cli_features(int argc, char **argv)
{
    const char *in = NULL, *npy = NULL, *cmvn_path = NULL, *kind_name = "fbank";
    int mel_bins = 0;
    feat_tts_variant_t variant = TTS_MEL_HIFIGAN;
    feat_fbank_variant_t fbank_variant = FBANK_WENET;
    const char *variant_name = NULL;
    float dither = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            features_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--kind") && has_val) {
            kind_name = argv[++i];
        } else if (!strcmp(a, "--npy") && has_val) {
            npy = argv[++i];
        } else if (!strcmp(a, "--cmvn") && has_val) {
            cmvn_path = argv[++i];
        } else if (!strcmp(a, "--num-mel-bins") && has_val) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 512) {
                fprintf(stderr, "hark features: --num-mel-bins must be 1..512\n");
                return 2;
            }
            mel_bins = (int)v;
        } else if (!strcmp(a, "--variant") && has_val) {
            const char *v = variant_name = argv[++i];
            if (!strcmp(v, "hifigan"))
                variant = TTS_MEL_HIFIGAN;
            else if (!strcmp(v, "tacotron2"))
                variant = TTS_MEL_TACOTRON2;
            else if (!strcmp(v, "wenet"))
                fbank_variant = FBANK_WENET;
            else if (!strcmp(v, "icefall"))
                fbank_variant = FBANK_ICEFALL;
            else if (!strcmp(v, "sherpa"))
                fbank_variant = FBANK_SHERPA;
            else {
                fprintf(stderr,
                        "hark features: unknown --variant '%s' "
                        "(wenet|icefall|sherpa for fbank, hifigan|tacotron2 for tts-mel)\n",
                        v);
                return 2;
            }
        } else if (!strcmp(a, "--dither") && has_val) {
            dither = strtof(argv[++i], NULL);
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hark features: unknown or incomplete option '%s'\n", a);
            features_usage(stderr);
            return 2;
        } else if (!in) {
            in = a;
        } else {
            fprintf(stderr, "hark features: one input file only\n");
            return 2;
        }
    }
    if (!in || !npy) {
        features_usage(stderr);
        return 2;
    }
    feat_opts_t o;
    feat_kind_t kind;
    if (feat_parse_kind(kind_name, &kind)) {
        fprintf(stderr, "hark features: unknown --kind '%s' (fbank|nemo-mel|tts-mel)\n", kind_name);
        return 2;
    }
    feat_default_opts(&o, kind);
    if (mel_bins)
        o.num_mel_bins = mel_bins;
    int is_fbank_variant =
        variant_name && (!strcmp(variant_name, "wenet") || !strcmp(variant_name, "icefall") ||
                         !strcmp(variant_name, "sherpa"));
    if (is_fbank_variant && kind != FEAT_FBANK) {
        fprintf(stderr, "hark features: --variant %s applies to --kind fbank only\n", variant_name);
        return 2;
    }
    o.tts_variant = variant;
    o.fbank_variant = fbank_variant;
    o.dither = dither;

    int rc = 1;
    hark_err_t err = {0};
    feat_plan_t *plan = NULL;
    audio_t audio = {0};
    cmvn_t cmvn = {0};
    float *feats = NULL;
    if (feat_plan_create(&o, &plan, &err))
        goto fail;
    audio_opts_t ao = {.target_rate = o.sample_rate};
    if (audio_decode_file(in, &ao, &audio, &err))
        goto fail;
    if (cmvn_path) {
        if (cmvn_load_json(cmvn_path, &cmvn, &err))
            goto fail;
        if (cmvn.dim != feat_dim(plan)) {
            err_set(&err, HARK_ERR_INVALID_ARG, "%s has %d dimensions but the features have %d",
                    cmvn_path, cmvn.dim, feat_dim(plan));
            goto fail;
        }
    }
    int T = feat_num_frames(plan, audio.n);
    feats = hark_malloc(sizeof(float) * (size_t)(T ? T : 1) * (size_t)feat_dim(plan));
    if (!feats) {
        err_set(&err, HARK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (feat_compute(plan, audio.samples, audio.n, feats, &err))
        goto fail;
    if (cmvn_path)
        cmvn_apply(&cmvn, feats, (size_t)T);
    int64_t shape[2] = {T, feat_dim(plan)};
    if (npy_save_f32(npy, feats, 2, shape)) {
        err_set(&err, HARK_ERR_IO, "cannot write %s", npy);
        goto fail;
    }
    fprintf(stderr, "%s: %zu samples at %d Hz -> %d frames x %d %s features -> %s\n", in, audio.n,
            audio.rate, T, feat_dim(plan), feat_kind_name(kind), npy);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hark features: %s\n", err.msg[0] ? err.msg : hark_status_str(err.status));
done:
    hark_free(feats);
    cmvn_free(&cmvn);
    audio_free(&audio);
    feat_plan_destroy(plan);
    return rc;
}
