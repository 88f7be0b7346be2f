/* make_corpus.c — writes the seed corpus of tests/fuzz/fuzz_audio_decode.c with libsndfile:
 * small valid files of every accepted format and a few broken ones. Built and run by
 * tests/fuzz/make_corpus.sh; replayed by tests/audio/test_audio.c (audio_fuzz_corpus_replay). */
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static void put(const char *name, const void *b, size_t n)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n) {
        perror(p);
        exit(1);
    }
    fclose(f);
}

/* Writes `frames` of a two-tone signal; returns the file's bytes (malloc'd) or NULL. */
static unsigned char *gen(const char *name, int format, int rate, int ch, int frames, size_t *len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    SF_INFO info = {.samplerate = rate, .channels = ch, .format = format};
    SNDFILE *sf = sf_open(p, SFM_WRITE, &info);
    if (!sf) {
        fprintf(stderr, "skip %s: %s\n", name, sf_strerror(NULL));
        return NULL;
    }
    float *x = malloc(sizeof(float) * (size_t)(frames * ch + 1));
    for (int i = 0; i < frames; i++)
        for (int c = 0; c < ch; c++)
            x[i * ch + c] = (float)(0.4 * sin(2 * M_PI * 440 * i / rate) +
                                    0.2 * sin(2 * M_PI * (1000 + 500 * c) * i / rate));
    sf_writef_float(sf, x, frames);
    sf_close(sf);
    free(x);
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len)
        exit(1);
    fclose(f);
    return b;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_corpus DIR\n");
        return 2;
    }
    dir = argv[1];
    size_t n;
    unsigned char *b;
    /* valid files, each well under 20 KB */
    free(gen("wav_pcm16_mono_16k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, 800, &n));
    free(gen("wav_pcm16_stereo_44k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, 441, &n));
    free(gen("wav_pcm24_22k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 22050, 1, 441, &n));
    free(gen("wav_pcm32_48k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_32, 48000, 1, 480, &n));
    free(gen("wav_u8_8k.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_U8, 8000, 1, 800, &n));
    free(gen("wav_ulaw_8k.wav", SF_FORMAT_WAV | SF_FORMAT_ULAW, 8000, 1, 800, &n));
    free(gen("wav_alaw_8k.wav", SF_FORMAT_WAV | SF_FORMAT_ALAW, 8000, 1, 800, &n));
    free(gen("wav_float_8k.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 8000, 1, 400, &n));
    free(gen("wav_double_16k.wav", SF_FORMAT_WAV | SF_FORMAT_DOUBLE, 16000, 1, 200, &n));
    free(gen("wavex_pcm16_3ch.wav", SF_FORMAT_WAVEX | SF_FORMAT_PCM_16, 16000, 3, 200, &n));
    free(
        gen("rifx_pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16 | SF_ENDIAN_BIG, 16000, 1, 200, &n));
    free(gen("rf64_pcm16.wav", SF_FORMAT_RF64 | SF_FORMAT_PCM_16, 16000, 1, 200, &n));
    free(gen("wav_empty.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, 0, &n));
    free(gen("flac_16_mono_16k.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, 4000, &n));
    free(gen("flac_24_stereo_48k.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 48000, 2, 1000, &n));
    free(gen("ogg_vorbis_16k.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, 1600, &n));
    free(gen("ogg_vorbis_stereo_44k.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 44100, 2, 2000, &n));
    free(gen("ogg_opus_48k.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, 1, 4800, &n));
    free(gen("mp3_16k.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, 1, 4000, &n));
    free(gen("mp3_44k_stereo.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 44100, 2, 4410, &n));

    /* broken files: each must fail cleanly */
    if ((b = gen("bad_trunc_wav.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, 400, &n))) {
        put("bad_trunc_wav.wav", b, n / 2);
        b[22] = 0; /* zero channels */
        put("bad_zero_channels.wav", b, n);
        b[22] = 1;
        b[24] = 0xF4, b[25] = 0x01, b[26] = 0, b[27] = 0; /* 500 Hz */
        put("bad_rate_500.wav", b, n);
        free(b);
    }
    if ((b = gen("bad_trunc.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, 4000, &n))) {
        put("bad_trunc.flac", b, n / 2);
        free(b);
    }
    if ((b = gen("bad_trunc.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 16000, 1, 1600, &n))) {
        put("bad_trunc.ogg", b, n * 2 / 3);
        free(b);
    }
    if ((b = gen("bad_trunc.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 16000, 1, 4000, &n))) {
        put("bad_trunc.mp3", b, n / 3);
        free(b);
    }
    if ((b = gen("bad_nan.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 8000, 1, 100, &n))) {
        static const unsigned char qnan[4] = {0, 0, 0xC0, 0x7F};
        memcpy(b + n - 40, qnan, 4);
        put("bad_nan.wav", b, n);
        free(b);
    }
    put("bad_empty.bin", "", 0);
    put("bad_text.bin", "not audio, just some text\n", 26);
    put("bad_riff_only.wav", "RIFF\x24\0\0\0WAVEfmt ", 16);
    return 0;
}
