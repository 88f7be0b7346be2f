/* cmd_speak.c — `hark speak` (text -> FastSpeech or Tacotron 2 mel -> HiFi-GAN or WaveGlow
 * (+ denoiser) audio -> WAV) and `hark vocode`
 * (a mel .npy, or a WAV resynthesised through the vocoder's own mel recipe -> WAV), on the CPU, or
 * with --device cuda[:N] (--precision fp32 | fp16 | bf16) FastSpeech + HiFi-GAN on the GPU
 * (fastspeech_gpu.h, hifigan_gpu.h).
 * WAVs are 16-bit PCM as hifi-gan's inference.py writes them (samples · 32768 truncated toward
 * zero; the one value tanh can reach, +1.0, is kept at 32767).
 * Tests: tests/cli/test_cli_speak.c */
#include "audio/audio.h"
#include "model/family.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/fastspeech/fastspeech.h"
#include "model/fastspeech/fastspeech_gpu.h"
#include "model/hifigan/hifigan.h"
#include "model/hifigan/hifigan_gpu.h"
#include "model/tacotron2/tacotron2.h"
#include "model/tacotron2/tacotron2_gpu.h"
#include "model/waveglow/waveglow_gpu.h"
#include "model/waveglow/waveglow.h"
#include "server/model_config.h"
#include "text/tts_text.h"

#include <errno.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int write_wav(const char *path, const float *x, size_t n, int rate)
{
    SF_INFO info = {.samplerate = rate, .channels = 1, .format = SF_FORMAT_WAV | SF_FORMAT_PCM_16};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) {
        fprintf(stderr, "hark: cannot write %s: %s\n", path, sf_strerror(NULL));
        return -1;
    }
    short buf[4096];
    size_t done = 0;
    int rc = 0;
    while (done < n && !rc) {
        size_t k = n - done < 4096 ? n - done : 4096;
        for (size_t i = 0; i < k; i++) {
            float v = x[done + i] * 32768.0f;
            buf[i] = v >= 32767.0f ? 32767 : v <= -32768.0f ? -32768 : (short)v;
        }
        if (sf_write_short(f, buf, (sf_count_t)k) != (sf_count_t)k)
            rc = -1;
        done += k;
    }
    if (sf_close(f) || rc) {
        fprintf(stderr, "hark: cannot write %s\n", path);
        return -1;
    }
    return 0;
}

/* model.json's "family" of DIR's highest version (a small scan: the file is ours) into fam */
static int model_family(const char *dir, char *fam, size_t n)
{
    char path[1200];
    family_version_path(dir, 0, "model.json", path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = 0;
    const char *p = strstr(buf, "\"family\"");
    if (!p || !(p = strchr(p + 8, '"')))
        return -1;
    const char *e = strchr(p + 1, '"');
    if (!e || (size_t)(e - p - 1) >= n)
        return -1;
    memcpy(fam, p + 1, (size_t)(e - p - 1));
    fam[e - p - 1] = 0;
    return 0;
}

/* the vocoder a TTS model names in config.pbtxt (model_config_vocoder_dir) */
static int resolve_vocoder(const char *model_dir, char *out, size_t n)
{
    hark_err_t err = {0};
    if (model_config_vocoder_dir(model_dir, out, n, &err) == HARK_OK)
        return 0;
    fprintf(stderr, "hark speak: %s%s\n", err.msg,
            err.status == HARK_ERR_NOT_FOUND ? ": give --vocoder DIR" : "");
    return -1;
}

/* --dump-dir: every stage as DIR/<name>.npy */
typedef struct {
    const char *dir;
    int failed;
} dump_t;

static void dump_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    dump_t *d = user;
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.npy", d->dir, name);
    int64_t shape[2] = {rows, cols};
    if (npy_save_f32(path, data, 2, shape))
        d->failed = 1;
}

/* --device cpu | cuda | cuda:N and --precision -> *dev (-1: CPU) and *dt; -1 on a bad pair */
static int check_device(const char *cmd, const char *device, const char *precision, int *dev,
                        ops_dtype_t *dt)
{
    *dev = -1;
    *dt = OPS_F32;
    if (!strcmp(device, "cuda")) {
        *dev = 0;
    } else if (!strncmp(device, "cuda:", 5)) {
        char *e;
        long v = strtol(device + 5, &e, 10);
        if (*e || e == device + 5 || v < 0 || v > 64) {
            fprintf(stderr, "hark %s: --device %s: expected cpu, cuda or cuda:N\n", cmd, device);
            return -1;
        }
        *dev = (int)v;
    } else if (strcmp(device, "cpu") != 0) {
        fprintf(stderr, "hark %s: --device %s: expected cpu, cuda or cuda:N\n", cmd, device);
        return -1;
    }
    if (!strcmp(precision, "fp16"))
        *dt = OPS_F16;
    else if (!strcmp(precision, "bf16"))
        *dt = OPS_BF16;
    else if (strcmp(precision, "fp32") != 0) {
        fprintf(stderr, "hark %s: --precision %s: expected fp32, fp16 or bf16\n", cmd, precision);
        return -1;
    }
    if (*dev < 0 && *dt != OPS_F32) {
        fprintf(stderr, "hark %s: --precision %s: the CPU path computes in fp32 only\n", cmd,
                precision);
        return -1;
    }
    return 0;
}

/* the GPU engines of --device cuda */
typedef struct {
    fastspeech_gpu_model_t *gfs;
    fastspeech_gpu_worker_t *wfs;
    hifigan_gpu_model_t *ghg;
    hifigan_gpu_worker_t *whg;
    tacotron2_gpu_model_t *gt2; /* Tacotron 2 + WaveGlow */
    tacotron2_gpu_worker_t *wt2;
    waveglow_gpu_model_t *gwg;
    waveglow_gpu_worker_t *wwg;
} gpu_t;

static void gpu_free(gpu_t *g)
{
    waveglow_gpu_worker_destroy(g->wwg);
    waveglow_gpu_model_destroy(g->gwg);
    tacotron2_gpu_worker_destroy(g->wt2);
    tacotron2_gpu_model_destroy(g->gt2);
    hifigan_gpu_worker_destroy(g->whg);
    hifigan_gpu_model_destroy(g->ghg);
    fastspeech_gpu_worker_destroy(g->wfs);
    fastspeech_gpu_model_destroy(g->gfs);
    memset(g, 0, sizeof *g);
}

/* fs (or NULL) and hg uploaded to dev in dt, workers for one item of max_frames mel frames */
static int gpu_open(const char *cmd, gpu_t *g, const fastspeech_model_t *fs,
                    const hifigan_model_t *hg, int dev, ops_dtype_t dt, int max_frames)
{
    hark_err_t err = {0};
    int rc = HARK_OK;
    if (fs) {
        int n = fastspeech_config(fs)->max_seq_len;
        rc = fastspeech_gpu_model_create(fs, dev, dt, &g->gfs, &err);
        if (!rc)
            rc = fastspeech_gpu_worker_create(g->gfs, 1, n, n, &g->wfs, &err);
    }
    if (!rc)
        rc = hifigan_gpu_model_create(hg, dev, dt, &g->ghg, &err);
    if (!rc)
        rc = hifigan_gpu_worker_create(g->ghg, 1, max_frames, &g->whg, &err);
    if (rc) {
        fprintf(stderr, "hark %s: --device cuda:%d: %s\n", cmd, dev, err.msg);
        gpu_free(g);
        return -1;
    }
    return 0;
}

/* Tacotron 2 and WaveGlow uploaded to dev in dt, workers for one text of up to max_steps decoder
 * steps */
static int gpu_open_t2(gpu_t *g, const tacotron2_model_t *t2, const waveglow_model_t *wg, int dev,
                       ops_dtype_t dt, int max_steps)
{
    hark_err_t err = {0};
    int steps = max_steps > 0 ? max_steps : tacotron2_config(t2)->max_decoder_steps;
    int rc = dt == OPS_BF16 ? err_set(&err, HARK_ERR_UNSUPPORTED,
                                      "Tacotron 2 runs in fp32 or fp16 (--precision)")
                            : tacotron2_gpu_model_create(t2, dev, dt, &g->gt2, &err);
    if (!rc)
        rc = tacotron2_gpu_worker_create(g->gt2, 1, 4096, steps, &g->wt2, &err);
    if (!rc)
        rc = waveglow_gpu_model_create(wg, dev, dt, &g->gwg, &err);
    if (!rc)
        rc = waveglow_gpu_worker_create(g->gwg, 1, steps, &g->wwg, &err);
    if (rc) {
        fprintf(stderr, "hark speak: --device cuda:%d: %s\n", dev, err.msg);
        gpu_free(g);
        return -1;
    }
    return 0;
}

/* the GPU engines' per-item stages into --dump-dir */
static void dump_gpu_stage(void *user, int item, const char *name, const float *data, int rows,
                           int cols)
{
    dump_stage(user, name, data, rows, cols);
}

/* mel (n_mels, T) -> WAV through the vocoder */
static int vocode_to_wav(const hifigan_model_t *voc, const gpu_t *gpu, const float *mel, int nf,
                         const char *out, const char *dump_dir)
{
    size_t n = hifigan_samples(voc, nf);
    float *audio = hark_malloc(sizeof(float) * n);
    if (!audio) {
        fprintf(stderr, "hark: out of memory for %zu samples\n", n);
        return -1;
    }
    dump_t d = {dump_dir, 0};
    hark_err_t err = {0};
    int rc;
    if (gpu && gpu->whg) {
        const float *mels[1] = {mel};
        float *outs[1] = {audio};
        rc = hifigan_gpu_run(gpu->whg, mels, &nf, 1, outs, dump_dir ? dump_gpu_stage : NULL, &d,
                             &err);
    } else {
        rc = hifigan_forward(voc, mel, nf, audio, dump_dir ? dump_stage : NULL, &d, &err);
    }
    if (rc)
        fprintf(stderr, "hark: %s\n", err.msg);
    else if (dump_dir) {
        char path[1200];
        snprintf(path, sizeof path, "%s/audio.npy", dump_dir);
        int64_t shape[1] = {(int64_t)n};
        if (npy_save_f32(path, audio, 1, shape) || d.failed)
            fprintf(stderr, "hark: cannot write every stage into %s\n", dump_dir), rc = -1;
    }
    if (!rc)
        rc = write_wav(out, audio, n, hifigan_config(voc)->sample_rate);
    hark_free(audio);
    return rc ? -1 : 0;
}

static void speak_usage(FILE *f)
{
    fprintf(f, "usage: hark speak --model DIR [--vocoder DIR] \"TEXT\" -o OUT.wav\n"
               "       hark speak --model DIR [--vocoder DIR] --text-file FILE --output-dir DIR\n"
               "                  [--alpha A] [--seed N] [--sigma S] [--denoiser-strength X]\n"
               "                  [--max-decoder-steps N] [--device cpu|cuda[:N]]\n"
               "                  [--precision fp32|fp16|bf16]\n"
               "                  [--dump-dir D]\n\n"
               "Synthesises English text with a FastSpeech (tools/convert_fastspeech.py) or\n"
               "Tacotron 2 model (tools/convert_tacotron2.py) and a HiFi-GAN\n"
               "(tools/convert_hifigan.py) or WaveGlow vocoder (tools/convert_waveglow.py; by\n"
               "default the one the model's config.pbtxt names in parameters `vocoder`).\n"
               "--text-file writes one WAV per line (KEY<TAB>TEXT lines give KEY.wav, other lines\n"
               "NNNN.wav by line number). --alpha scales FastSpeech's durations (1: as trained).\n"
               "Tacotron 2 keeps its prenet dropout on at inference, as DLE does: --seed N makes\n"
               "the output reproducible (it seeds WaveGlow's noise too; default 0). WaveGlow:\n"
               "--sigma (default the model's, 0.9) and --denoiser-strength (default the model's,\n"
               "0.01; 0 turns the denoiser off); its audio is peak-normalised as DLE's\n"
               "inference.py does. --dump-dir writes the ids and every stage as .npy (one\n"
               "sub-directory per line with --text-file). --device cuda[:N] runs FastSpeech +\n"
               "HiFi-GAN (--precision fp32, fp16 or bf16) or Tacotron 2 + WaveGlow (fp32 or\n"
               "fp16) on that GPU. Without --model: the bundled demo voice (models/demo-en-tts,\n"
               "trained by hark on synthetic speech; see its README.md).\n");
}

/* the loaded pipeline: one acoustic model, one vocoder, and the options */
typedef struct {
    fastspeech_model_t *fs;
    tacotron2_model_t *t2;
    hifigan_model_t *hg;
    waveglow_model_t *wg;
    float alpha, sigma, strength; /* sigma, strength < 0: the model's */
    uint64_t seed;
    int max_steps;
    gpu_t gpu; /* --device cuda: FastSpeech + HiFi-GAN, or Tacotron 2 + WaveGlow */
} pipe_t;

static int pipe_mels(const pipe_t *p)
{
    return p->fs ? fastspeech_config(p->fs)->n_mels : tacotron2_config(p->t2)->n_mels;
}

static int vocoder_mels(const pipe_t *p)
{
    return p->hg ? hifigan_config(p->hg)->num_mels : waveglow_config(p->wg)->n_mels;
}

/* Tacotron 2 stages for --dump-dir: those outside the decoder loop as they come; the per-step
 * ones gathered and written after the loop as dec_<name>.npy (steps, 1, cols), the goldens'
 * layout (mel_frame: dec_mel_frames) */
#define T2_STEP_NAMES 12
typedef struct {
    dump_t *d;
    struct {
        char name[40];
        float *data; /* (steps, cols) */
        int cols, steps, cap;
    } s[T2_STEP_NAMES];
    int n;
} t2dump_t;

static void dump_t2_stage(void *user, int row, const char *name, int step, const float *data,
                          int rows, int cols)
{
    t2dump_t *td = user;
    if (step < 0) {
        dump_stage(td->d, name, data, rows, cols);
        return;
    }
    int k = 0;
    while (k < td->n && strcmp(td->s[k].name, name))
        k++;
    if (k == td->n) {
        if (td->n == T2_STEP_NAMES) {
            td->d->failed = 1;
            return;
        }
        snprintf(td->s[k].name, sizeof td->s[k].name, "%s", name);
        td->s[k].cols = rows * cols;
        td->n++;
    }
    if (rows * cols != td->s[k].cols || step != td->s[k].steps) {
        td->d->failed = 1;
        return;
    }
    if (td->s[k].steps == td->s[k].cap) {
        int cap = td->s[k].cap ? 2 * td->s[k].cap : 64;
        float *q = hark_realloc(td->s[k].data, sizeof(float) * (size_t)cap * td->s[k].cols);
        if (!q) {
            td->d->failed = 1;
            return;
        }
        td->s[k].data = q;
        td->s[k].cap = cap;
    }
    memcpy(td->s[k].data + (size_t)step * td->s[k].cols, data,
           sizeof(float) * (size_t)td->s[k].cols);
    td->s[k].steps++;
}

static void t2dump_finish(t2dump_t *td)
{
    for (int k = 0; k < td->n; k++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/dec_%s.npy", td->d->dir,
                 strcmp(td->s[k].name, "mel_frame") ? td->s[k].name : "mel_frames");
        int64_t shape[3] = {td->s[k].steps, 1, td->s[k].cols};
        if (npy_save_f32(path, td->s[k].data, 3, shape))
            td->d->failed = 1;
        hark_free(td->s[k].data);
    }
    td->n = 0;
}

/* mel (n_mels, T) -> WAV through WaveGlow (+ the denoiser), cut to keep samples (0: all) and
 * peak-normalised, as DLE's inference.py writes Tacotron 2 + WaveGlow output */
static int waveglow_to_wav(const pipe_t *p, const float *mel, int nf, size_t keep, const char *out,
                           const char *dump_dir)
{
    const waveglow_config_t *c = waveglow_config(p->wg);
    size_t n = waveglow_samples(p->wg, nf);
    float *audio = hark_malloc(sizeof(float) * n);
    if (!audio) {
        fprintf(stderr, "hark: out of memory for %zu samples\n", n);
        return -1;
    }
    dump_t d = {dump_dir, 0};
    hark_err_t err = {0};
    waveglow_opts_t o = {.sigma = p->sigma,
                         .seed = p->seed ^ 0x5741564547ull,
                         .stage = dump_dir ? dump_stage : NULL,
                         .stage_user = &d};
    float *const outs[1] = {audio};
    int rc = p->gpu.wwg ? waveglow_gpu_run(p->gpu.wwg, &mel, &nf, 1, &o, NULL, outs, &err)
                        : waveglow_infer(p->wg, mel, nf, &o, audio, &err);
    float strength = p->strength >= 0 ? p->strength : c->denoiser_strength;
    if (!rc && dump_dir) {
        char path[1200];
        snprintf(path, sizeof path, "%s/audio.npy", dump_dir);
        int64_t shape[1] = {(int64_t)n};
        if (npy_save_f32(path, audio, 1, shape))
            d.failed = 1;
    }
    if (!rc && strength > 0) {
        size_t n_out = 0;
        const float *const ins[1] = {audio};
        rc = p->gpu.wwg ? waveglow_gpu_denoise(p->gpu.wwg, ins, &n, 1, strength, outs, &n_out, &err)
                        : waveglow_denoise(p->wg, audio, n, strength, audio, &n_out, &err);
        n = n_out;
        if (!rc && dump_dir) {
            char path[1200];
            snprintf(path, sizeof path, "%s/audio_denoised.npy", dump_dir);
            int64_t shape[1] = {(int64_t)n};
            if (npy_save_f32(path, audio, 1, shape))
                d.failed = 1;
        }
    }
    if (rc)
        fprintf(stderr, "hark: %s\n", err.msg);
    if (!rc && keep && keep < n)
        n = keep;
    if (!rc) {
        float peak = 0;
        for (size_t i = 0; i < n; i++)
            peak = fmaxf(peak, fabsf(audio[i]));
        if (peak > 0)
            for (size_t i = 0; i < n; i++)
                audio[i] /= peak;
        if (d.failed) {
            fprintf(stderr, "hark: cannot write every stage into %s\n", dump_dir);
            rc = -1;
        }
    }
    if (!rc)
        rc = write_wav(out, audio, n, c->sample_rate);
    hark_free(audio);
    return rc ? -1 : 0;
}

/* ids -> mel (n_mels, *nf) channel-major (hark_malloc'ed) and the samples to keep (0: all) */
static int acoustic(const pipe_t *p, const tts_text_t *tt, float **mel_out, int *nf_out,
                    size_t *keep, dump_t *d)
{
    hark_err_t err = {0};
    *keep = 0;
    if (p->t2) {
        t2dump_t td = {.d = d};
        tacotron2_opts_t o = {.seed = p->seed,
                              .max_decoder_steps = p->max_steps,
                              .stage = d->dir ? dump_t2_stage : NULL,
                              .stage_user = &td};
        const int *ids = tt->ids;
        tacotron2_result_t r = {0};
        int rc = p->gpu.wt2
                     ? tacotron2_gpu_run(p->gpu.wt2, &ids, &tt->n, 1, &o, &r, NULL, NULL, &err)
                     : tacotron2_infer(p->t2, &ids, &tt->n, 1, &o, &r, &err);
        t2dump_finish(&td);
        if (rc) {
            fprintf(stderr, "hark speak: %s\n", err.msg);
            return -1;
        }
        if (d->dir) {
            dump_stage(d, "alignments", r.alignments, r.n_frames, r.n_ids);
            float ml = (float)r.mel_length;
            dump_stage(d, "mel_lengths", &ml, 1, 1);
        }
        if (r.mel_length == r.n_frames)
            fprintf(stderr,
                    "hark speak: the gate never fired in %d decoder steps (raise "
                    "--max-decoder-steps?)\n",
                    r.n_frames);
        /* DLE's inference.py cuts the audio to mel_lengths · hop */
        *keep =
            (size_t)(r.mel_length > 0 ? r.mel_length : 1) * (size_t)tacotron2_config(p->t2)->hop;
        *mel_out = r.mel;
        *nf_out = r.n_frames;
        r.mel = NULL;
        tacotron2_result_free(&r);
        return 0;
    }
    float *mel = NULL;
    int nf = 0, nm = pipe_mels(p);
    if (p->gpu.wfs) {
        const int *ids[1] = {tt->ids};
        float alpha[1] = {p->alpha};
        fastspeech_gpu_opts_t go = {alpha, d->dir ? dump_gpu_stage : NULL, d};
        const float *d_mel = NULL;
        int T = 0;
        if (fastspeech_gpu_run(p->gpu.wfs, ids, &tt->n, 1, &go, &nf, &T, &d_mel, &err) ||
            !(mel = hark_malloc(sizeof(float) * (size_t)nf * nm)) ||
            fastspeech_gpu_mel_to_host(p->gpu.wfs, 0, mel, &err)) {
            fprintf(stderr, "hark speak: %s\n", mel || err.msg[0] ? err.msg : "out of memory");
            hark_free(mel);
            return -1;
        }
    } else {
        fastspeech_opts_t o = {p->alpha, 0, 0, d->dir ? dump_stage : NULL, d};
        if (fastspeech_forward(p->fs, tt->ids, tt->n, &o, &mel, &nf, &err)) {
            fprintf(stderr, "hark speak: %s\n", err.msg);
            return -1;
        }
    }
    float *mt = hark_malloc(sizeof(float) * (size_t)nf * nm);
    if (!mt) {
        hark_free(mel);
        fprintf(stderr, "hark speak: out of memory\n");
        return -1;
    }
    for (int t = 0; t < nf; t++) /* (T, n_mels) -> (n_mels, T), as DLE's inferencer transposes */
        for (int b = 0; b < nm; b++)
            mt[(size_t)b * nf + t] = mel[(size_t)t * nm + b];
    hark_free(mel);
    *mel_out = mt;
    *nf_out = nf;
    return 0;
}

static int speak_one(const pipe_t *p, const char *text, const char *out, const char *dump_dir)
{
    tts_text_t tt;
    hark_err_t err = {0};
    if (tts_text_to_ids_variant(text, p->t2 ? TTS_TEXT_DLE_TACOTRON2 : TTS_TEXT_FASTSPEECH, &tt,
                                &err)) {
        fprintf(stderr, "hark speak: %s\n", err.msg);
        return -1;
    }
    dump_t d = {dump_dir, 0};
    if (dump_dir) {
        mkdir(dump_dir, 0755);
        char path[1200];
        snprintf(path, sizeof path, "%s/ids.npy", dump_dir);
        int64_t shape[1] = {tt.n};
        if (npy_save(path, NPY_I32, tt.ids, 1, shape))
            d.failed = 1;
    }
    float *mel = NULL;
    int nf = 0;
    size_t keep = 0;
    int rc = acoustic(p, &tt, &mel, &nf, &keep, &d);
    tts_text_free(&tt);
    if (rc)
        return -1;
    if (d.failed)
        fprintf(stderr, "hark speak: cannot write every stage into %s\n", dump_dir);
    rc = p->hg ? vocode_to_wav(p->hg, &p->gpu, mel, nf, out, dump_dir)
               : waveglow_to_wav(p, mel, nf, keep, out, dump_dir);
    hark_free(mel);
    return rc || d.failed ? -1 : 0;
}

int cli_speak(int argc, char **argv)
{
    const char *model = NULL, *vocoder = NULL, *text = NULL, *text_file = NULL, *out = NULL,
               *out_dir = NULL, *device = "cpu", *precision = "fp32", *dump = NULL;
    float alpha = 1.0f, sigma = -1.0f, strength = -1.0f;
    uint64_t seed = 0;
    int max_steps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        char *e;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            speak_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && has)
            model = argv[++i];
        else if (!strcmp(a, "--vocoder") && has)
            vocoder = argv[++i];
        else if (!strcmp(a, "--text-file") && has)
            text_file = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has)
            out = argv[++i];
        else if (!strcmp(a, "--output-dir") && has)
            out_dir = argv[++i];
        else if (!strcmp(a, "--device") && has)
            device = argv[++i];
        else if (!strcmp(a, "--precision") && has)
            precision = argv[++i];
        else if (!strcmp(a, "--dump-dir") && has)
            dump = argv[++i];
        else if (!strcmp(a, "--seed") && has) {
            errno = 0;
            unsigned long long v = strtoull(argv[++i], &e, 10);
            if (*e || errno || argv[i][0] == '-' || !argv[i][0]) {
                fprintf(stderr, "hark speak: --seed must be a non-negative integer\n");
                return 2;
            }
            seed = v;
        } else if (!strcmp(a, "--sigma") && has) {
            sigma = strtof(argv[++i], &e);
            if (*e || !(sigma >= 0.0f && sigma <= 10.0f)) {
                fprintf(stderr, "hark speak: --sigma must be a number in [0, 10]\n");
                return 2;
            }
        } else if (!strcmp(a, "--denoiser-strength") && has) {
            strength = strtof(argv[++i], &e);
            if (*e || !(strength >= 0.0f && strength <= 10.0f)) {
                fprintf(stderr, "hark speak: --denoiser-strength must be a number in [0, 10]\n");
                return 2;
            }
        } else if (!strcmp(a, "--max-decoder-steps") && has) {
            long v = strtol(argv[++i], &e, 10);
            if (*e || v < 1 || v > 1000000) {
                fprintf(stderr, "hark speak: --max-decoder-steps must be in [1, 1000000]\n");
                return 2;
            }
            max_steps = (int)v;
        } else if (!strcmp(a, "--alpha") && has) {
            alpha = strtof(argv[++i], &e);
            if (*e || !(alpha > 0.05f && alpha <= 20.0f)) {
                fprintf(stderr, "hark speak: --alpha must be a number in (0.05, 20]\n");
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hark speak: unknown or incomplete option '%s'\n", a);
            speak_usage(stderr);
            return 2;
        } else if (!text)
            text = a;
        else {
            fprintf(stderr, "hark speak: give the text as one argument (quote it)\n");
            return 2;
        }
    }
    char demo[4096];
    if (!model && (text || text_file) &&
        cli_demo_entry(CLI_DEMO_TTS, "speak", "demo voice", demo, sizeof demo) == 0)
        model = demo;
    if (!model || (!text == !text_file) || (text && !out) || (text_file && !out_dir)) {
        speak_usage(stderr);
        return 2;
    }
    int dev;
    ops_dtype_t dt;
    if (check_device("speak", device, precision, &dev, &dt))
        return 2;
    char fam[64], vfam[64], vdir[1200];
    if (model_family(model, fam, sizeof fam) ||
        (strcmp(fam, "fastspeech") != 0 && strcmp(fam, "tacotron2") != 0)) {
        fprintf(stderr,
                "hark speak: %s/1/model.json is not a FastSpeech or Tacotron 2 model "
                "(tools/convert_fastspeech.py, tools/convert_tacotron2.py)\n",
                model);
        return 1;
    }
    if (!vocoder) {
        if (resolve_vocoder(model, vdir, sizeof vdir))
            return 1;
        vocoder = vdir;
    }
    if (model_family(vocoder, vfam, sizeof vfam) ||
        (strcmp(vfam, "hifigan") != 0 && strcmp(vfam, "waveglow") != 0)) {
        fprintf(stderr,
                "hark speak: %s/1/model.json is not a HiFi-GAN or WaveGlow vocoder "
                "(tools/convert_hifigan.py, tools/convert_waveglow.py)\n",
                vocoder);
        return 1;
    }
    int t2wg = !strcmp(fam, "tacotron2") && !strcmp(vfam, "waveglow");
    if (dev >= 0 && !t2wg && (strcmp(fam, "fastspeech") || strcmp(vfam, "hifigan"))) {
        fprintf(stderr,
                "hark speak: --device %s: the GPU paths are FastSpeech + HiFi-GAN and Tacotron 2 "
                "+ WaveGlow\n",
                device);
        return 2;
    }
    pipe_t pipe = {
        .alpha = alpha, .sigma = sigma, .strength = strength, .seed = seed, .max_steps = max_steps};
    hark_err_t err = {0};
    int lrc = !strcmp(fam, "fastspeech") ? fastspeech_load(model, 1, &pipe.fs, &err)
                                         : tacotron2_load(model, 1, &pipe.t2, &err);
    if (!lrc)
        lrc = !strcmp(vfam, "hifigan") ? hifigan_load(vocoder, 1, &pipe.hg, &err)
                                       : waveglow_load(vocoder, 1, &pipe.wg, &err);
    if (!lrc && pipe_mels(&pipe) != vocoder_mels(&pipe)) {
        fprintf(stderr, "hark speak: the model makes %d mel bins, the vocoder reads %d\n",
                pipe_mels(&pipe), vocoder_mels(&pipe));
        lrc = -1;
    } else if (lrc)
        fprintf(stderr, "hark speak: %s\n", err.msg);
    if (!lrc && dev >= 0)
        lrc = t2wg ? gpu_open_t2(&pipe.gpu, pipe.t2, pipe.wg, dev, dt, max_steps)
                   : gpu_open("speak", &pipe.gpu, pipe.fs, pipe.hg, dev, dt,
                              fastspeech_config(pipe.fs)->max_seq_len);
    if (lrc) {
        fastspeech_destroy(pipe.fs);
        tacotron2_destroy(pipe.t2);
        hifigan_destroy(pipe.hg);
        waveglow_destroy(pipe.wg);
        return 1;
    }
    int status = 0;
    if (text) {
        status = speak_one(&pipe, text, out, dump) ? 1 : 0;
    } else {
        FILE *f = fopen(text_file, "r");
        if (!f) {
            fprintf(stderr, "hark speak: cannot open %s: %s\n", text_file, strerror(errno));
            status = 1;
        } else {
            mkdir(out_dir, 0755);
            char *line = NULL;
            size_t cap = 0;
            ssize_t len;
            int ln = 0, n_ok = 0, n_bad = 0;
            while ((len = getline(&line, &cap, f)) >= 0) {
                ln++;
                while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                    line[--len] = 0;
                char name[256];
                const char *body = line;
                char *tab = strchr(line, '\t');
                snprintf(name, sizeof name, "%04d", ln);
                if (tab && tab > line && tab - line < 200) {
                    int ok = 1;
                    for (char *p = line; p < tab; p++)
                        ok &= (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                              (*p >= 'A' && *p <= 'Z') || *p == '-' || *p == '_' || *p == '.';
                    if (ok && line[0] != '.') {
                        snprintf(name, sizeof name, "%.*s", (int)(tab - line), line);
                        body = tab + 1;
                    }
                }
                char wav[1400], dd[1400];
                snprintf(wav, sizeof wav, "%s/%s.wav", out_dir, name);
                if (dump) {
                    mkdir(dump, 0755);
                    snprintf(dd, sizeof dd, "%s/%s", dump, name);
                }
                fprintf(stderr, "line %d -> %s\n", ln, wav);
                if (speak_one(&pipe, body, wav, dump ? dd : NULL))
                    n_bad++;
                else
                    n_ok++;
            }
            free(line);
            fclose(f);
            fprintf(stderr, "hark speak: %d WAVs written, %d lines failed\n", n_ok, n_bad);
            status = n_bad ? 1 : 0;
        }
    }
    gpu_free(&pipe.gpu);
    fastspeech_destroy(pipe.fs);
    tacotron2_destroy(pipe.t2);
    hifigan_destroy(pipe.hg);
    waveglow_destroy(pipe.wg);
    return status;
}

static void vocode_usage(FILE *f)
{
    fprintf(
        f,
        "usage: hark vocode --model VOCODER_DIR (--mel MEL.npy | --wav IN.wav) -o OUT.wav\n"
        "                   [--device cpu|cuda[:N]] [--precision fp32|fp16|bf16] [--dump-dir D]\n\n"
        "Runs a HiFi-GAN vocoder (tools/convert_hifigan.py) on a log-mel (.npy of shape\n"
        "(1, n_mels, T) or (n_mels, T), as hifi-gan's inference_e2e.py reads) or resynthesises\n"
        "an audio file through the vocoder's own mel recipe (resampled to its rate).\n");
}

int cli_vocode(int argc, char **argv)
{
    const char *model = NULL, *mel_path = NULL, *wav = NULL, *out = NULL, *device = "cpu",
               *precision = "fp32", *dump = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            vocode_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--model") && has)
            model = argv[++i];
        else if (!strcmp(a, "--mel") && has)
            mel_path = argv[++i];
        else if (!strcmp(a, "--wav") && has)
            wav = argv[++i];
        else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && has)
            out = argv[++i];
        else if (!strcmp(a, "--device") && has)
            device = argv[++i];
        else if (!strcmp(a, "--precision") && has)
            precision = argv[++i];
        else if (!strcmp(a, "--dump-dir") && has)
            dump = argv[++i];
        else {
            fprintf(stderr, "hark vocode: unknown or incomplete option '%s'\n", a);
            vocode_usage(stderr);
            return 2;
        }
    }
    if (!model || !out || (!mel_path == !wav)) {
        vocode_usage(stderr);
        return 2;
    }
    int dev;
    ops_dtype_t dt;
    if (check_device("vocode", device, precision, &dev, &dt))
        return 2;
    gpu_t gpu = {0};
    hifigan_model_t *voc = NULL;
    hark_err_t err = {0};
    if (hifigan_load(model, 1, &voc, &err)) {
        fprintf(stderr, "hark vocode: %s\n", err.msg);
        return 1;
    }
    const hifigan_config_t *c = hifigan_config(voc);
    float *mel = NULL;
    int nf = 0, status = 1;
    npy_array_t a = {0};
    audio_t au = {0};
    if (dump)
        mkdir(dump, 0755);
    if (mel_path) {
        if (npy_load_f32(mel_path, &a)) {
            fprintf(stderr, "hark vocode: cannot read %s as a .npy array\n", mel_path);
            goto done;
        }
        int ok = (a.ndim == 3 && a.shape[0] == 1 && a.shape[1] == c->num_mels) ||
                 (a.ndim == 2 && a.shape[0] == c->num_mels);
        if (!ok || a.shape[a.ndim - 1] < 1 || a.shape[a.ndim - 1] > 1000000) {
            fprintf(stderr, "hark vocode: %s: expected a mel of shape (1, %d, T) or (%d, T)\n",
                    mel_path, c->num_mels, c->num_mels);
            goto done;
        }
        nf = (int)a.shape[a.ndim - 1];
        mel = a.data;
    } else {
        audio_opts_t ao = {.target_rate = c->sample_rate};
        if (audio_decode_file(wav, &ao, &au, &err) ||
            hifigan_mel(voc, au.samples, au.n, &mel, &nf, &err)) {
            fprintf(stderr, "hark vocode: %s\n", err.msg);
            goto done;
        }
        if (dump) {
            char path[1200];
            snprintf(path, sizeof path, "%s/mel.npy", dump);
            int64_t shape[3] = {1, c->num_mels, nf};
            npy_save_f32(path, mel, 3, shape);
        }
    }
    if (dev >= 0 && gpu_open("vocode", &gpu, NULL, voc, dev, dt, nf))
        goto done;
    status = vocode_to_wav(voc, &gpu, mel, nf, out, dump) ? 1 : 0;
done:
    gpu_free(&gpu);
    if (mel != a.data)
        hark_free(mel);
    npy_free(&a);
    audio_free(&au);
    hifigan_destroy(voc);
    return status;
}
