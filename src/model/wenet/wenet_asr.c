/* wenet_asr.c — WeNet U2/U2++ recognition: features, encoder, CTC search, attention rescoring,
 * text. Tests: tests/model/wenet/test_wenet_asr.c */
#include "model/wenet/wenet_asr.h"

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "dsp/features.h"
#include "dsp/frontend_gpu.h"
#include "hark.h"
#include "model/family.h"
#include "model/wenet/decoder.h"
#include "model/safetensors.h"
#include "search/ctc.h"
#include "search/ctc_beam_gpu.h"
#include "search/rescore.h"
#include "text/units.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef HARK_CUDA
#include "dsp/features_gpu.h"
#include "model/wenet/conformer_gpu.h"
#include "model/wenet/decoder_gpu.h"
#include <cuda_runtime_api.h>
#endif

/* GPU scratch reserved at worker creation, so that requests within it allocate nothing:
 * the prefix beam search for WeNet's default beam ... */
#define WENET_RESERVE_BEAM 10
/* ... and attention rescoring's decoder for max_batch utterances x WENET_RESERVE_BEAM
 * candidates x (tokens + 1) rows, tokens = the worker's longest utterance at this rate. Speech
 * gives about 3-4 tokens a second (BPE pieces or characters); 4 is the top of that range. The
 * hard bound (a token per encoder frame: 25 a second at 40 ms) would reserve 6x more, gigabytes
 * for 64 x 60 s, for hypotheses that speech does not produce; and the reservation already
 * assumes every utterance of a full batch is as long as the worker allows, which few batches
 * are. A batch past it grows the scratch in the request (logged once, kept after). */
#define WENET_RESERVE_TOKENS_PER_S 4
/* ... and utterances counted at most this long: a full batch of 60 s utterances (the server's
 * default limit) is rare under length-aware batching, and would reserve ~2 GB per worker for a
 * U2++ decoder; LibriSpeech's longest utterances are ~35 s */
#define WENET_RESERVE_MAX_SECONDS 30.0

_Static_assert(WENET_RESERVE_BEAM <= CTC_GPU_MAX_BEAM, "the reserved beam must run on the GPU");

struct wenet_asr {
    wenet_config_t cfg;
    safetensors_t *st;
    conformer_model_t *enc;
    wenet_decoder_model_t *dec; /* NULL without an attention decoder */
    units_t *units;
    units_style_t style;
    feat_plan_t *fbank;
    const float *cmvn_mean, *cmvn_istd; /* (input_dim) or NULL */
    int device;                         /* -1: CPU */
    int precision;                      /* wenet_precision_t */
#ifdef HARK_CUDA
    conformer_gpu_model_t *gpu; /* encoder + CTC on the device */
    wenet_decoder_gpu_t *gdec;  /* the attention decoder on the device, or NULL */
    feat_gpu_t *fgpu;           /* fbank on the device */
    struct gpu_turns *turns;    /* the workers' turns on the device (below); mutable */
#endif
};

#ifdef HARK_CUDA
/* Turns on the GPU (wenet_worker_set_turns; config.pbtxt `gpu_turns`). Workers of one model on
 * one device (the server's instances) each have their own compute stream, and their batches run
 * side by side, sharing the SMs. Taking turns instead, a worker's compute stream waits (on the
 * device, not the host) for the work the previous worker issued, and only then runs its
 * features, encoder and CTC; its upload is not in the turn (it runs on the worker's copy stream
 * while the previous batch computes), nor is its host work (issuing, the results, the answers).
 * H100, 5 s utterances (docs/benchmarks.md): two workers of batch 64 give 16.4k utterances/s in
 * turns against 15.7k side by side, two of 32 the same 13.4k, three of 32 13.4k against 15.0k;
 * so it is off by default. `mu` orders the issuing: a worker holds it from the wait to the
 * record of its own `turn_ev`, which becomes `last`. */
struct gpu_turns {
    pthread_mutex_t mu;
    cudaEvent_t last; /* the end of the last issued turn (a worker's event), or NULL */
};
#endif

struct wenet_worker {
    const wenet_asr_t *asr;
    int max_batch, max_frames;
    conformer_state_t *state;
    float *feats; /* (max_batch, max_frames, input_dim) */
    int *lens;    /* (max_batch) */
    float *enc;   /* (max_batch, te_max, D) */
    int *enc_lens;
    float *logp; /* (max_batch, te_max, V) */
#ifdef HARK_CUDA
    /* GPU path: pinned host staging and device buffers, sized at creation */
    conformer_gpu_state_t *gstate;
    frontend_gpu_t *fe;   /* PCM upload (its copy stream, beside the compute stream) and features:
                             device features (max_batch, max_frames, input_dim) */
    size_t max_samples;   /* the longest utterance the worker takes, in samples */
    float *d_enc;         /* (max_batch, te_max, D) */
    float *d_logp;        /* (max_batch, te_max, V) */
    int *d_arg, *h_arg;   /* (max_batch, te_max) greedy path: per-frame argmax ... */
    float *d_max, *h_max; /* ... and its log-prob (h_*: pinned) */
    ctc_beam_gpu_t *beam; /* prefix beam search on the GPU: WENET_RESERVE_BEAM at creation, re-
                             created by a request for a wider beam (beam_grows counts those) */
    int beam_grows;
    int beam_limit; /* the widest beam the search kernel takes on this GPU (wider: the CPU) */
    wenet_decoder_gpu_state_t *gdec; /* attention rescoring on the GPU (with asr->gdec), its
                                        scratch reserved at creation (decoder_reserve) */
    int max_te;                      /* encoder frames of the longest utterance */
    /* wenet_worker_profile: events between the GPU stages, host clock readings, totals */
    int prof, prof_calls;
    cudaEvent_t ev[WENET_PROF_DOWNLOAD + 4]; /* the stages, then the decoder's two */
    double t_issued, t_synced; /* clock_now_s when all work was enqueued / the GPU was done */
    double prof_ms[WENET_PROF_STAGES];
    int turns;             /* takes turns with the model's other workers (wenet_worker_set_turns) */
    int batch_buckets;     /* pads a batch to gpu_batch_bucket (wenet_worker_set_batch_buckets) */
    const float **pad_pcm; /* (max_batch) the batch with its padding entries ... */
    size_t *pad_n;         /* ... of 0 samples */
    int turn_held;         /* holds asr->turns->mu (between turn_begin and turn_end) */
    cudaEvent_t turn_ev;   /* the end of this worker's last turn */
#endif
};

static const char *const method_names[] = {"ctc_greedy_search", "ctc_prefix_beam_search",
                                           "attention_rescoring"};

int wenet_parse_method(const char *name, wenet_method_t *out)
{
    for (int i = 0; i < 3; i++) {
        if (!strcmp(name, method_names[i])) {
            *out = (wenet_method_t)i;
            return 0;
        }
    }
    return -1;
}

const char *wenet_method_name(wenet_method_t m)
{
    return (unsigned)m < 3 ? method_names[m] : "?";
}

wenet_decode_opts_t wenet_default_opts(const wenet_asr_t *asr)
{
    wenet_decode_opts_t o;
    memset(&o, 0, sizeof o);
    o.method = asr && asr->dec ? DECODE_ATTENTION_RESCORING : DECODE_CTC_PREFIX_BEAM;
    o.beam_size = 10;
    o.ctc_weight = asr ? asr->cfg.ctc_weight : 0.5f;
    o.reverse_weight = asr ? asr->cfg.reverse_weight : 0.0f;
    o.nbest = 1;
    o.chunk_size = 0;
    o.left_chunks = -1;
    ctc_endpoint_default(&o.endpoint, asr ? asr->cfg.blank : 0);
    return o;
}

static const char *const precision_names[] = {NULL, "fp32", "fp16", "bf16"};

wenet_precision_t wenet_precision_parse(const char *name)
{
    for (int i = WENET_FP32; i <= WENET_BF16; i++)
        if (name && !strcmp(name, precision_names[i]))
            return (wenet_precision_t)i;
    return (wenet_precision_t)0;
}

const char *wenet_precision_name(wenet_precision_t p)
{
    return p >= WENET_FP32 && p <= WENET_BF16 ? precision_names[p] : NULL;
}

#ifdef HARK_CUDA
/* the conformer_gpu flag of a precision */
static int gpu_precision(wenet_precision_t p)
{
    return p == WENET_FP16   ? CONFORMER_GPU_FP16
           : p == WENET_BF16 ? CONFORMER_GPU_BF16
                             : CONFORMER_GPU_FP32;
}
#endif

int wenet_asr_load(const char *dir, wenet_asr_t **out, hark_err_t *err)
{
    wenet_load_opts_t lo = {.device = -1, .precision = WENET_FP32};
    return wenet_asr_load_opts(dir, &lo, out, err);
}

int wenet_asr_device(const wenet_asr_t *a)
{
    return a->device;
}

int wenet_asr_load_opts(const char *dir, const wenet_load_opts_t *lo, wenet_asr_t **out,
                        hark_err_t *err)
{
    *out = NULL;
#ifndef HARK_CUDA
    if (lo->device >= 0)
        return err_set(err, HARK_ERR_NO_DEVICE,
                       "cuda:%d requested, but hark was built without CUDA", lo->device);
#else
    if (lo->device >= 0) {
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || lo->device >= ndev) {
            cudaGetLastError();
            return err_set(err, HARK_ERR_NO_DEVICE, "cuda:%d: no such CUDA device (%d present)",
                           lo->device, ndev);
        }
        cudaSetDevice(lo->device);
    }
#endif
    if (!wenet_precision_name(lo->precision))
        return err_set(err, HARK_ERR_INVALID_ARG, "precision must be fp32, fp16 or bf16");
    if (lo->device < 0 && lo->precision != WENET_FP32)
        return err_set(err, HARK_ERR_UNSUPPORTED, "%s is GPU-only; the CPU path runs fp32",
                       wenet_precision_name(lo->precision));
    wenet_asr_t *a = hark_calloc(1, sizeof *a);
    if (!a)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    a->device = lo->device;
    a->precision = lo->precision;
    char path[4096];
    family_version_path(dir, lo->version, "model.json", path, sizeof path);
    int rc = wenet_config_load(path, &a->cfg, err);
    if (rc)
        goto fail;
    family_version_path(dir, lo->version, "model.safetensors", path, sizeof path);
    if ((rc = st_open(path, &a->st, err)))
        goto fail;
    if ((rc = conformer_model_create_st(&a->cfg, a->st, &a->enc, err)))
        goto fail;
    if (a->cfg.decoder != DECODER_NONE && (rc = wenet_decoder_create(&a->cfg, a->st, &a->dec, err)))
        goto fail;
    family_version_path(dir, lo->version, "units.txt", path, sizeof path);
    if ((rc = units_load(path, &a->units, err)))
        goto fail;
    if ((rc = units_check_vocab(a->units, a->cfg.vocab_size, err))) {
        err_prefix(err, rc, "%s", path);
        goto fail;
    }
    a->style = units_guess_style(a->units);
    if (a->cfg.has_cmvn) {
        const st_tensor_t *m = st_find(a->st, "encoder.global_cmvn.mean");
        const st_tensor_t *s = st_find(a->st, "encoder.global_cmvn.istd");
        if (!m || !s || m->dtype != ST_F32 || s->dtype != ST_F32 ||
            m->count != (size_t)a->cfg.input_dim || s->count != (size_t)a->cfg.input_dim) {
            rc = err_set(err, HARK_ERR_FORMAT,
                         "%s/%d/model.safetensors: encoder.global_cmvn.mean/istd "
                         "missing or not (%d,) float32",
                         dir, lo->version > 0 ? lo->version : 1, a->cfg.input_dim);
            goto fail;
        }
        a->cmvn_mean = m->data;
        a->cmvn_istd = s->data;
    }
    feat_opts_t fo;
    feat_default_opts(&fo, FEAT_FBANK);
    fo.sample_rate = a->cfg.sample_rate;
    fo.num_mel_bins = a->cfg.num_mel_bins;
    if ((rc = feat_plan_create(&fo, &a->fbank, err)))
        goto fail;
#ifdef HARK_CUDA
    if (a->device >= 0) {
        int prec = gpu_precision(a->precision);
        if ((rc = conformer_gpu_model_create_st(&a->cfg, a->st, prec, &a->gpu, err)) ||
            (rc = feat_gpu_create(a->fbank, &a->fgpu, err)))
            goto fail;
        if (!(a->turns = hark_calloc(1, sizeof *a->turns)) ||
            pthread_mutex_init(&a->turns->mu, NULL)) {
            hark_free(a->turns);
            a->turns = NULL;
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        /* the decoder on the GPU where its kernels fit (else rescoring stays on the CPU) */
        if (a->dec &&
            (rc = wenet_decoder_gpu_create(&a->cfg, st_get_f32, a->st, &a->gdec, err)) != HARK_OK) {
            if (rc != HARK_ERR_UNSUPPORTED)
                goto fail;
            rc = HARK_OK;
        }
    }
#endif
    *out = a;
    return HARK_OK;
fail:
    wenet_asr_destroy(a);
    return rc;
}

void wenet_asr_destroy(wenet_asr_t *a)
{
    if (!a)
        return;
#ifdef HARK_CUDA
    conformer_gpu_model_destroy(a->gpu);
    wenet_decoder_gpu_destroy(a->gdec);
    feat_gpu_destroy(a->fgpu);
    if (a->turns) { /* every worker is gone: none holds it or is its `last` */
        pthread_mutex_destroy(&a->turns->mu);
        hark_free(a->turns);
    }
#endif
    feat_plan_destroy(a->fbank);
    units_destroy(a->units);
    wenet_decoder_destroy(a->dec);
    conformer_model_destroy(a->enc);
    st_close(a->st);
    hark_free(a);
}

const wenet_config_t *wenet_asr_config(const wenet_asr_t *a)
{
    return &a->cfg;
}

int wenet_asr_sample_rate(const wenet_asr_t *a)
{
    return a->cfg.sample_rate;
}

int wenet_asr_frame_ms(const wenet_asr_t *a)
{
    return (int)a->cfg.subsample * a->cfg.frame_shift_ms;
}

const struct units *wenet_asr_units(const wenet_asr_t *a, int *style)
{
    *style = (int)a->style;
    return a->units;
}

int wenet_asr_cmvn(const wenet_asr_t *a, const float **mean, const float **istd)
{
    *mean = a->cmvn_mean;
    *istd = a->cmvn_istd;
    return a->cmvn_mean != NULL;
}

#ifdef HARK_CUDA
/* Reserves attention rescoring's GPU decoder scratch (see WENET_RESERVE_TOKENS_PER_S): rows for
 * max_batch utterances x WENET_RESERVE_BEAM candidates of up to `tokens` tokens (+ 1 row for
 * <sos>), tokens at most one per encoder frame and within the decoder's max_len; encoder rows
 * for the whole (max_batch, max_te) grid. */
static int decoder_reserve(wenet_worker_t *w, hark_err_t *err)
{
    const wenet_asr_t *a = w->asr;
    double seconds = (double)w->max_frames * a->cfg.frame_shift_ms / 1000.0;
    if (seconds > WENET_RESERVE_MAX_SECONDS)
        seconds = WENET_RESERVE_MAX_SECONDS;
    double want = ceil(seconds * WENET_RESERVE_TOKENS_PER_S);
    int tokens = want < w->max_te ? (int)want : w->max_te;
    if (tokens > a->cfg.max_len - 1)
        tokens = a->cfg.max_len - 1;
    if (tokens < 1)
        tokens = 1;
    size_t rows = (size_t)w->max_batch * WENET_RESERVE_BEAM * (size_t)(tokens + 1);
    size_t enc_rows = (size_t)w->max_batch * (size_t)w->max_te;
    int rc = wenet_decoder_gpu_state_reserve(w->gdec, rows, enc_rows, err);
    if (rc)
        return err_prefix(err, rc,
                          "worker: attention rescoring scratch for %d utterances x %d candidates "
                          "x %d tokens",
                          w->max_batch, WENET_RESERVE_BEAM, tokens);
    LOG_DEBUG("worker: attention rescoring scratch for %d utterances x %d candidates x %d tokens "
              "(%zu rows, %zu encoder rows): %.1f MiB",
              w->max_batch, WENET_RESERVE_BEAM, tokens, rows, enc_rows,
              (double)wenet_decoder_gpu_state_bytes(w->gdec, NULL, NULL) / (1 << 20));
    return HARK_OK;
}
#endif

int wenet_worker_create(const wenet_asr_t *a, int max_batch, double max_seconds,
                        wenet_worker_t **out, hark_err_t *err)
{
    *out = NULL;
    if (max_batch < 1 || max_batch > 512 || !(max_seconds > 0))
        return err_set(err, HARK_ERR_INVALID_ARG, "worker: max_batch %d, max_seconds %g", max_batch,
                       max_seconds);
    wenet_worker_t *w = hark_calloc(1, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    w->asr = a;
    w->max_batch = max_batch;
    w->max_frames = feat_num_frames(a->fbank, (size_t)(max_seconds * a->cfg.sample_rate) + 1);
    if (w->max_frames < 1)
        w->max_frames = 1;
    int te = conformer_out_len(a->enc, w->max_frames);
    if (te < 1)
        te = 1;
    size_t B = (size_t)max_batch;
    int rc = conformer_state_create(a->enc, max_batch, w->max_frames, &w->state, err);
    if (rc)
        goto fail;
    w->feats = hark_malloc(sizeof(float) * B * (size_t)w->max_frames * (size_t)a->cfg.input_dim);
    w->lens = hark_malloc(sizeof(int) * B);
    w->enc = hark_malloc(sizeof(float) * B * (size_t)te * (size_t)a->cfg.d_model);
    w->enc_lens = hark_malloc(sizeof(int) * B);
    w->logp = hark_malloc(sizeof(float) * B * (size_t)te * (size_t)a->cfg.vocab_size);
    if (!w->feats || !w->lens || !w->enc || !w->enc_lens || !w->logp) {
        rc = err_set(err, HARK_ERR_NOMEM, "worker: out of memory for %d x %.1f s", max_batch,
                     max_seconds);
        goto fail;
    }
#ifdef HARK_CUDA
    if (a->device >= 0) {
        cudaSetDevice(a->device);
        int prec = gpu_precision(a->precision);
        if ((rc = conformer_gpu_state_create(a->gpu, prec, max_batch, w->max_frames, &w->gstate,
                                             err)) ||
            (a->gdec && (rc = wenet_decoder_gpu_state_create(
                             a->gdec, conformer_gpu_stream(w->gstate), &w->gdec, err))))
            goto fail;
        w->max_samples = (size_t)(max_seconds * a->cfg.sample_rate) + 1;
        w->max_te = te;
        if ((rc = frontend_gpu_create(a->fbank, a->fgpu, max_batch, w->max_samples, w->max_frames,
                                      a->device, &w->fe, err))) {
            err_prefix(err, rc, "worker");
            goto fail;
        }
        cudaError_t e;
        if ((e = cudaEventCreateWithFlags(&w->turn_ev, cudaEventDisableTiming)) ||
            (e = cudaMalloc((void **)&w->d_enc,
                            sizeof(float) * B * (size_t)te * (size_t)a->cfg.d_model)) ||
            (e = cudaMalloc((void **)&w->d_logp,
                            sizeof(float) * B * (size_t)te * (size_t)a->cfg.vocab_size)) ||
            (e = cudaMalloc((void **)&w->d_arg, sizeof(int) * B * (size_t)te)) ||
            (e = cudaMalloc((void **)&w->d_max, sizeof(float) * B * (size_t)te)) ||
            (e = cudaMallocHost((void **)&w->h_arg, sizeof(int) * B * (size_t)te)) ||
            (e = cudaMallocHost((void **)&w->h_max, sizeof(float) * B * (size_t)te))) {
            rc = err_set(err, HARK_ERR_CUDA, "worker: device memory for %d x %.1f s: %s", max_batch,
                         max_seconds, cudaGetErrorString(e));
            goto fail;
        }
        /* the prefix beam search at WeNet's default beam (a request for a wider one grows it) */
        w->beam_limit = ctc_beam_gpu_beam_limit(a->device);
        if ((rc = ctc_beam_gpu_create(max_batch, te, a->cfg.vocab_size, WENET_RESERVE_BEAM,
                                      a->cfg.blank, &w->beam, err))) {
            err_prefix(err, rc, "worker: prefix beam scratch for %d x %.1f s, beam %d", max_batch,
                       max_seconds, WENET_RESERVE_BEAM);
            goto fail;
        }
        if (w->gdec && (rc = decoder_reserve(w, err)))
            goto fail;
        w->pad_pcm = hark_calloc(B, sizeof *w->pad_pcm);
        w->pad_n = hark_calloc(B, sizeof *w->pad_n);
        if (!w->pad_pcm || !w->pad_n) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        w->batch_buckets = 1;
    }
#endif
    *out = w;
    return HARK_OK;
fail:
    wenet_worker_destroy(w);
    return rc;
}

void wenet_worker_destroy(wenet_worker_t *w)
{
    if (!w)
        return;
#ifdef HARK_CUDA
    for (int i = 0; i < WENET_PROF_DOWNLOAD + 4; i++)
        if (w->ev[i])
            cudaEventDestroy(w->ev[i]);
    if (w->turn_ev) { /* no other worker may wait on it once it is gone */
        pthread_mutex_lock(&w->asr->turns->mu);
        if (w->asr->turns->last == w->turn_ev)
            w->asr->turns->last = NULL;
        pthread_mutex_unlock(&w->asr->turns->mu);
        cudaEventDestroy(w->turn_ev);
    }
    frontend_gpu_destroy(w->fe);
    wenet_decoder_gpu_state_destroy(w->gdec);
    conformer_gpu_state_destroy(w->gstate);
    ctc_beam_gpu_destroy(w->beam);
    cudaFree(w->d_enc);
    cudaFree(w->d_logp);
    cudaFree(w->d_arg);
    cudaFree(w->d_max);
    cudaFreeHost(w->h_arg);
    cudaFreeHost(w->h_max);
    hark_free(w->pad_pcm);
    hark_free(w->pad_n);
#endif
    conformer_state_destroy(w->state);
    hark_free(w->feats);
    hark_free(w->lens);
    hark_free(w->enc);
    hark_free(w->enc_lens);
    hark_free(w->logp);
    hark_free(w);
}

int wenet_worker_set_upload_chunks(wenet_worker_t *w, int chunks, hark_err_t *err)
{
#ifdef HARK_CUDA
    return frontend_gpu_set_chunks(w->fe, chunks, err); /* a CPU worker's is NULL: checked only */
#else
    (void)w;
    return frontend_gpu_set_chunks(NULL, chunks, err);
#endif
}

void wenet_worker_set_batch_buckets(wenet_worker_t *w, int on)
{
#ifdef HARK_CUDA
    w->batch_buckets = on && w->gstate;
#else
    (void)w, (void)on;
#endif
}

void wenet_worker_set_turns(wenet_worker_t *w, int on)
{
#ifdef HARK_CUDA
    w->turns = on && w->gstate;
#else
    (void)w, (void)on;
#endif
}

void wenet_worker_scratch(const wenet_worker_t *w, wenet_worker_scratch_t *out)
{
    memset(out, 0, sizeof *out);
#ifdef HARK_CUDA
    out->beam = ctc_beam_gpu_max_beam(w->beam);
    out->beam_grows = w->beam_grows;
    if (w->gdec) {
        out->decoder_bytes =
            wenet_decoder_gpu_state_bytes(w->gdec, &out->decoder_rows, &out->decoder_enc_rows);
        out->decoder_grows = wenet_decoder_gpu_state_grows(w->gdec);
    }
#else
    (void)w;
#endif
}

static void hyp_free(wenet_hyp_t *h)
{
    hark_free(h->text);
    hark_free(h->tokens);
    hark_free(h->times);
    memset(h, 0, sizeof *h);
}

void wenet_result_free(wenet_result_t *r)
{
    if (!r)
        return;
    hyp_free(&r->best);
    for (int i = 0; i < r->n_nbest; i++)
        hyp_free(&r->nbest[i]);
    hark_free(r->nbest);
    memset(r, 0, sizeof *r);
}

/* Copies hypothesis i of nb (tokens, times, score) and its text into h. */
static int hyp_from(const wenet_asr_t *a, const ctc_nbest_t *nb, int i, double score,
                    wenet_hyp_t *h, hark_err_t *err)
{
    int n = nb->lens[i];
    h->n_tokens = n;
    h->score = score;
    h->tokens = hark_malloc(sizeof(int) * (size_t)(n ? n : 1));
    h->times = hark_malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!h->tokens || !h->times)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    memcpy(h->tokens, nb->tokens[i], sizeof(int) * (size_t)n);
    memcpy(h->times, nb->times[i], sizeof(int) * (size_t)n);
    return units_detokenize(a->units, a->style, h->tokens, n, &h->text, err);
}

/* Rescoring (attention_rescoring) and the result for one utterance's prefix-beam n-best nb
 * (released here) and encoder output enc (T, D); with gfwd, the decoder's scores of the n
 * candidates are already known (gfwd, grev: the GPU decoder's) and enc is not read. */
static int decode_nbest(const wenet_asr_t *a, const wenet_decode_opts_t *o, ctc_nbest_t *nbp,
                        const float *enc, int T, const float *gfwd, const float *grev,
                        wenet_result_t *r, hark_err_t *err)
{
    ctc_nbest_t nb = *nbp;
    memset(nbp, 0, sizeof *nbp);
    int rc = HARK_OK;
    int best = 0;
    double best_score = nb.scores[0];
    float *fwd = NULL, *rev = NULL;
    if (o->method == DECODE_ATTENTION_RESCORING && T > 0) {
        fwd = hark_malloc(sizeof(float) * (size_t)nb.n);
        rev = hark_malloc(sizeof(float) * (size_t)nb.n);
        if (!fwd || !rev) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto done;
        }
        wenet_decoder_opts_t dopt = wenet_decoder_default_opts();
        dopt.n_threads = o->n_threads;
        if (gfwd) {
            memcpy(fwd, gfwd, sizeof(float) * (size_t)nb.n);
            memcpy(rev, grev, sizeof(float) * (size_t)nb.n);
        } else if ((rc = wenet_decoder_score(a->dec, &dopt, enc, T, nb.tokens, nb.lens, nb.n,
                                             o->reverse_weight, fwd, rev, err))) {
            goto done;
        }
        rescore_pick_t pick;
        int use_rev = wenet_decoder_has_right(a->dec) && o->reverse_weight > 0;
        if ((rc = rescore_select(nb.scores, fwd, use_rev ? rev : NULL, nb.lens, nb.n, o->ctc_weight,
                                 o->reverse_weight, NULL, NULL, NULL, &pick, err)))
            goto done;
        best = pick.best;
        best_score = pick.score;
        r->confidence = pick.confidence;
    }
    if ((rc = hyp_from(a, &nb, best, best_score, &r->best, err)))
        goto done;
    int k = o->nbest < nb.n ? o->nbest : nb.n;
    if (k > 0) {
        r->nbest = hark_calloc((size_t)k, sizeof *r->nbest);
        if (!r->nbest) {
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
            goto done;
        }
        r->n_nbest = k;
        for (int i = 0; i < k && !rc; i++)
            rc = hyp_from(a, &nb, i, nb.scores[i], &r->nbest[i], err);
    }
done:
    hark_free(fwd);
    hark_free(rev);
    ctc_nbest_free(&nb);
    return rc;
}

/* Search and rescoring for one utterance's log-probs lp (T, V) and encoder output enc (T, D). */
static int decode_one(const wenet_asr_t *a, const wenet_decode_opts_t *o, const float *lp,
                      const float *enc, int T, wenet_result_t *r, hark_err_t *err)
{
    const int V = a->cfg.vocab_size, blank = a->cfg.blank;
    ctc_nbest_t nb = {0};
    int rc;
    if (o->method == DECODE_CTC_GREEDY) {
        if ((rc = ctc_greedy_search(lp, T, V, blank, &nb, err)))
            return rc;
        rc = hyp_from(a, &nb, 0, nb.scores[0], &r->best, err);
        ctc_nbest_free(&nb);
        return rc;
    }
    if ((rc = ctc_prefix_beam_search(lp, T, V, o->beam_size, blank, &nb, err)))
        return rc;
    return decode_nbest(a, o, &nb, enc, T, NULL, NULL, r, err);
}

#ifdef HARK_CUDA
/* An error after the uploads were enqueued: they may read the caller's buffers (request bodies,
 * copied by DMA) until the copy stream drains, and the compute stream may still wait for them or
 * read what they wrote, so wait for both before the caller can free anything. */
static int upload_failed(wenet_worker_t *w, int rc)
{
    return frontend_gpu_wait_failed(w->fe, conformer_gpu_stream(w->gstate), rc);
}

/* padded lengths on the GPU are multiples of this (0.32 s of fbank) */
#define GPU_FRAME_BUCKET 32

/* The batch a GPU worker computes for `batch` utterances: itself up to 8, then the next multiple
 * of 8 (at most max), the rest padding entries of no samples. A server's batches take every size
 * its traffic happens to form, and each new (batch, frames) shape costs the encoder a direct run
 * and then a CUDA graph recording (milliseconds, on the latency of the requests in it) while the
 * worker keeps a few dozen recordings: 15 shapes up to 64 instead of 64 keep them replayed. */
static int gpu_batch_bucket(int batch, int max)
{
    int b = batch <= 8 ? batch : (batch + 7) / 8 * 8;
    return b < max ? b : max;
}

/* What encode_gpu leaves on the host besides the encoder lengths. */
enum {
    GPU_OUT_LOGP,   /* the log-probs in w->logp, for a search on the CPU */
    GPU_OUT_ARGMAX, /* the per-frame argmax and its log-prob (h_arg, h_max): greedy search */
    GPU_OUT_BEAM,   /* the prefix beam search's n-best lists, in w->beam */
};

/* Features, encoder and CTC (and the CTC search that `out` names) on the GPU for a padded batch;
 * for rescoring (want_enc) also the encoder output in w->enc, with the layout of the CPU path. */
/* the end of encode_gpu's work: waits for the stream; with profiling, the GPU stages' times */
static int gpu_done(wenet_worker_t *w, int te, int *te_out, hark_err_t *err)
{
    if (w->prof) {
        cudaEventRecord(w->ev[WENET_PROF_DOWNLOAD + 1],
                        (cudaStream_t)conformer_gpu_stream(w->gstate));
        w->t_issued = clock_now_s();
    }
    int rc = conformer_gpu_sync(w->gstate, err);
    if (rc)
        return upload_failed(w, rc); /* the copy stream too, whatever state the device is in */
    if (w->prof) {
        w->t_synced = clock_now_s();
        for (int i = 0; i <= WENET_PROF_DOWNLOAD; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, w->ev[i], w->ev[i + 1]) == cudaSuccess)
                w->prof_ms[i] += ms;
        }
    }
    *te_out = te;
    return HARK_OK;
}

/* A worker's turn (struct gpu_turns): its compute stream waits for the end of the last turn
 * issued; turn_end records the end of this one, after everything the turn enqueued. A failed
 * wait or record only costs the ordering, never a result. */
static void turn_begin(wenet_worker_t *w, cudaStream_t s)
{
    if (!w->turns)
        return;
    struct gpu_turns *t = w->asr->turns;
    pthread_mutex_lock(&t->mu);
    w->turn_held = 1;
    if (t->last && t->last != w->turn_ev && cudaStreamWaitEvent(s, t->last, 0) != cudaSuccess)
        cudaGetLastError();
}

static void turn_end(wenet_worker_t *w, cudaStream_t s)
{
    if (!w->turn_held)
        return;
    struct gpu_turns *t = w->asr->turns;
    if (cudaEventRecord(w->turn_ev, s) == cudaSuccess)
        t->last = w->turn_ev;
    else
        cudaGetLastError();
    w->turn_held = 0;
    pthread_mutex_unlock(&t->mu);
}

static int encode_gpu_turn(wenet_worker_t *w, const conformer_opts_t *co, const size_t *n,
                           const float *const *pcm, int batch, int t_max, int *te_out, int want_enc,
                           int out, int beam, hark_err_t *err);

static int encode_gpu(wenet_worker_t *w, const conformer_opts_t *co, const size_t *n,
                      const float *const *pcm, int batch, int t_max, int *te_out, int want_enc,
                      int out, int beam, hark_err_t *err)
{
    int rc = encode_gpu_turn(w, co, n, pcm, batch, t_max, te_out, want_enc, out, beam, err);
    turn_end(w, (cudaStream_t)conformer_gpu_stream(w->gstate)); /* when an error left it held */
    return rc;
}

/* encode_gpu's work, in the worker's turn from the features on; ends the turn before waiting */
static int encode_gpu_turn(wenet_worker_t *w, const conformer_opts_t *co, const size_t *n,
                           const float *const *pcm, int batch, int t_max, int *te_out, int want_enc,
                           int out, int beam, hark_err_t *err)
{
    const wenet_asr_t *a = w->asr;
    const int D = a->cfg.d_model, V = a->cfg.vocab_size;
    *te_out = 0;
    for (int b = 0; b < batch; b++)
        if (n[b] > w->max_samples)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "utterance %d is longer than the worker's limit", b);
    if (t_max == 0 || batch == 0) {
        for (int b = 0; b < batch; b++)
            w->enc_lens[b] = 0;
        return HARK_OK;
    }
    cudaSetDevice(a->device);
    cudaStream_t s = (cudaStream_t)conformer_gpu_stream(w->gstate);
    /* The stage profile with the overlapped upload: "upload" runs from the first copy to the end
     * of the last chunk's copies (both events on the front end's copy stream, recorded by
     * frontend_gpu_run: frontend_gpu_profile), so it includes the features of the chunks before
     * the last, computed beside it; "features" is the front end's work left after the last copy
     * (the last chunk's rows). Their sum is the front end's time on the GPU. */
#define PROF_MARK(i) (w->prof ? (void)cudaEventRecord(w->ev[i], s) : (void)0)
    /* padded length rounded up to a bucket, so that batches of similar shape replay one recorded
     * CUDA graph (the extra frames are padding: masked, and zeroed by the front end) */
    t_max = (t_max + GPU_FRAME_BUCKET - 1) / GPU_FRAME_BUCKET * GPU_FRAME_BUCKET;
    if (t_max > w->max_frames)
        t_max = w->max_frames;
    /* the upload overlapped with the features (frontend_gpu.h); no host wait until gpu_done,
     * which drains the compute stream and so the uploads before the next call */
    float *d_feats;
    const int *d_lens;
    turn_begin(w, s); /* the upload's copy stream does not wait: it runs in the previous turn */
    int rc = frontend_gpu_run(w->fe, pcm, n, batch, t_max, s, &d_feats, &d_lens, err);
    if (rc)
        return rc; /* the front end waited for both streams */
    PROF_MARK(2);
    cudaError_t e;
    if ((rc = conformer_gpu_forward(w->gstate, co, w->d_enc, w->enc_lens, d_feats, w->lens, batch,
                                    t_max, err)))
        return upload_failed(w, rc);
    PROF_MARK(3);
    int te = conformer_gpu_out_len(a->gpu, t_max);
    if (out == GPU_OUT_ARGMAX) { /* only the per-frame argmax and its log-prob cross to the host */
        size_t rows = (size_t)batch * te;
        if ((rc = conformer_gpu_ctc_argmax(w->gstate, w->d_arg, w->d_max, w->d_logp, 0, w->d_enc,
                                           w->enc_lens, batch, te, err)))
            return upload_failed(w, rc);
        PROF_MARK(4);
        if ((e = cudaMemcpyAsync(w->h_arg, w->d_arg, sizeof(int) * rows, cudaMemcpyDeviceToHost,
                                 s)) ||
            (e = cudaMemcpyAsync(w->h_max, w->d_max, sizeof(float) * rows, cudaMemcpyDeviceToHost,
                                 s)))
            return upload_failed(
                w, err_set(err, HARK_ERR_CUDA, "download: %s", cudaGetErrorString(e)));
        turn_end(w, s);
        return gpu_done(w, te, te_out, err);
    }
    if ((rc = conformer_gpu_ctc_log_probs(w->gstate, w->d_logp, w->d_enc, w->enc_lens, batch, te,
                                          err)))
        return upload_failed(w, rc);
    if (out == GPU_OUT_BEAM) { /* only the n-best lists cross */
        if ((rc = ctc_beam_gpu_run(w->beam, w->d_logp, w->enc_lens, batch, te, beam, s, err)))
            return upload_failed(w, rc);
        PROF_MARK(4); /* the search enqueues its n-best download itself */
    } else {
        PROF_MARK(4);
        if ((e = cudaMemcpyAsync(w->logp, w->d_logp, sizeof(float) * (size_t)batch * te * V,
                                 cudaMemcpyDeviceToHost, s)))
            return upload_failed(
                w, err_set(err, HARK_ERR_CUDA, "download: %s", cudaGetErrorString(e)));
    }
    if (want_enc && (e = cudaMemcpyAsync(w->enc, w->d_enc, sizeof(float) * (size_t)batch * te * D,
                                         cudaMemcpyDeviceToHost, s)))
        return upload_failed(w, err_set(err, HARK_ERR_CUDA, "download: %s", cudaGetErrorString(e)));
    turn_end(w, s);
    return gpu_done(w, te, te_out, err);
#undef PROF_MARK
}
#endif

#ifdef HARK_CUDA
/* Greedy search from the device's per-frame argmax: collapse repeats, drop blanks; times are the
 * first frame of each token's run and the score the sum of the frame maxima, as
 * ctc_greedy_search computes them from the full log-probs. */
static int greedy_from_argmax(const wenet_asr_t *a, const int *arg, const float *maxv, int T,
                              wenet_hyp_t *h, hark_err_t *err)
{
    memset(h, 0, sizeof *h);
    h->tokens = hark_malloc(sizeof(int) * (size_t)(T ? T : 1));
    h->times = hark_malloc(sizeof(int) * (size_t)(T ? T : 1));
    if (!h->tokens || !h->times)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    double score = 0;
    int prev = -1;
    for (int t = 0; t < T; t++) {
        score += maxv[t];
        int k = arg[t];
        if (k != prev && k != a->cfg.blank) {
            h->tokens[h->n_tokens] = k;
            h->times[h->n_tokens++] = t;
        }
        prev = k;
    }
    h->score = score;
    return units_detokenize(a->units, a->style, h->tokens, h->n_tokens, &h->text, err);
}
#endif

#ifdef HARK_CUDA
/* After a GPU prefix beam search: every utterance's n-best from the device, the attention
 * decoder's scores of all their candidates in one GPU pass when gpu_dec (else decode_nbest runs
 * the CPU decoder per utterance), then rescoring and the results. */
static int decode_gpu_nbest(wenet_worker_t *w, const wenet_decode_opts_t *o, int batch, int t_max,
                            int te, int gpu_dec, wenet_result_t *results, hark_err_t *err)
{
    const wenet_asr_t *a = w->asr;
    const int D = a->cfg.d_model;
    int B = batch > 0 ? batch : 1, rc = HARK_OK, total = 0;
    ctc_nbest_t *nbs = hark_calloc((size_t)B, sizeof *nbs);
    int *cn = hark_calloc((size_t)B, sizeof *cn), *coff = hark_calloc((size_t)B, sizeof *coff);
    if (!nbs || !cn || !coff)
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int b = 0; b < batch && !rc; b++) {
        if (t_max == 0) /* an empty batch: nothing ran on the GPU */
            rc = ctc_prefix_beam_search(NULL, 0, a->cfg.vocab_size, o->beam_size, a->cfg.blank,
                                        &nbs[b], err);
        else
            rc = ctc_beam_gpu_nbest(w->beam, b, &nbs[b], err);
        cn[b] = w->enc_lens[b] > 0 ? nbs[b].n : 0;
        coff[b] = total;
        total += cn[b];
    }
    const int **hy = NULL;
    int *ln = NULL;
    float *gf = NULL, *gr = NULL;
    if (!rc && gpu_dec && total > 0) {
        hy = hark_malloc(sizeof *hy * (size_t)total);
        ln = hark_malloc(sizeof *ln * (size_t)total);
        gf = hark_malloc(sizeof *gf * (size_t)total);
        gr = hark_malloc(sizeof *gr * (size_t)total);
        if (!hy || !ln || !gf || !gr)
            rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
        for (int b = 0; b < batch && !rc; b++)
            for (int i = 0; i < cn[b]; i++) {
                hy[coff[b] + i] = nbs[b].tokens[i];
                ln[coff[b] + i] = nbs[b].lens[i];
            }
        cudaStream_t st = (cudaStream_t)conformer_gpu_stream(w->gstate);
        if (w->prof)
            cudaEventRecord(w->ev[WENET_PROF_DOWNLOAD + 2], st);
        if (!rc) /* past the reservation this allocates, and the decoder logs it */
            rc =
                wenet_decoder_gpu_score(w->gdec, w->d_enc, te, w->enc_lens, batch, cn,
                                        (const int *const *)hy, ln, o->reverse_weight, gf, gr, err);
        float ms = 0;
        if (w->prof && !rc && cudaEventRecord(w->ev[WENET_PROF_DOWNLOAD + 3], st) == cudaSuccess &&
            cudaEventSynchronize(w->ev[WENET_PROF_DOWNLOAD + 3]) == cudaSuccess &&
            cudaEventElapsedTime(&ms, w->ev[WENET_PROF_DOWNLOAD + 2],
                                 w->ev[WENET_PROF_DOWNLOAD + 3]) == cudaSuccess)
            w->prof_ms[WENET_PROF_DECODER] += ms;
    }
    for (int b = 0; b < batch; b++) {
        if (rc) {
            ctc_nbest_free(&nbs[b]);
            continue;
        }
        int on_gpu = gpu_dec && cn[b] > 0;
        rc = decode_nbest(a, o, &nbs[b], w->enc + (size_t)b * te * D, w->enc_lens[b],
                          on_gpu ? gf + coff[b] : NULL, on_gpu ? gr + coff[b] : NULL, &results[b],
                          err);
    }
    if (rc)
        for (int b = 0; b < batch; b++)
            wenet_result_free(&results[b]);
    hark_free(nbs), hark_free(cn), hark_free(coff);
    hark_free(hy), hark_free(ln), hark_free(gf), hark_free(gr);
    return rc;
}
#endif

int wenet_check_opts(const wenet_asr_t *a, const wenet_decode_opts_t *o, hark_err_t *err)
{
    if ((unsigned)o->method > DECODE_ATTENTION_RESCORING)
        return err_set(err, HARK_ERR_INVALID_ARG, "decoding method %d is unknown", (int)o->method);
    if (o->beam_size < 1 || o->beam_size > WENET_MAX_BEAM)
        return err_range(err, "beam_size", 1, WENET_MAX_BEAM, o->beam_size);
    if (o->method == DECODE_ATTENTION_RESCORING && !a->dec)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "attention_rescoring needs an attention decoder; this model has none");
    if (!(o->reverse_weight >= 0 && o->reverse_weight <= 1) || !(o->ctc_weight >= 0))
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "reverse_weight must be in [0, 1] and ctc_weight >= 0");
    if (o->chunk_size > 0 && o->left_chunks < -1)
        return err_set(err, HARK_ERR_INVALID_ARG,
                       "num_decoding_left_chunks %d: expected -1 (all) or >= 0", o->left_chunks);
    const ctc_endpoint_config_t *ep = &o->endpoint;
    if (o->endpointing) {
        if (ep->blank != a->cfg.blank || !(ep->blank_threshold >= 0 && ep->blank_threshold <= 1))
            return err_set(err, HARK_ERR_INVALID_ARG,
                           "endpoint: blank %d (the model's is %d), blank threshold %g (0 .. 1)",
                           ep->blank, a->cfg.blank, ep->blank_threshold);
        for (int i = 0; i < CTC_ENDPOINT_RULES; i++)
            if (ep->rule[i].min_trailing_silence < 0 || ep->rule[i].min_utterance_length < 0)
                return err_set(err, HARK_ERR_INVALID_ARG, "endpoint rule %d: negative times",
                               i + 1);
    }
    return HARK_OK;
}

const conformer_model_t *wenet_asr_encoder(const wenet_asr_t *a)
{
    return a->enc;
}

const struct conformer_gpu_model *wenet_asr_gpu_encoder(const wenet_asr_t *a, int *prec,
                                                        int *device)
{
    *prec = 0;
    *device = a->device;
#ifdef HARK_CUDA
    if (a->device >= 0 && a->gpu) {
        *prec = gpu_precision(a->precision);
        return a->gpu;
    }
#endif
    return NULL;
}

const feat_plan_t *wenet_asr_fbank(const wenet_asr_t *a)
{
    return a->fbank;
}

int wenet_result_from_ctc(const wenet_asr_t *a, const wenet_decode_opts_t *o, ctc_nbest_t *nb,
                          const float *enc, int T, wenet_result_t *r, hark_err_t *err)
{
    memset(r, 0, sizeof *r);
    int rc;
    if (o->method != DECODE_CTC_GREEDY) {
        rc = decode_nbest(a, o, nb, enc, T, NULL, NULL, r, err);
    } else {
        rc = hyp_from(a, nb, 0, nb->scores[0], &r->best, err);
        ctc_nbest_free(nb);
    }
    if (rc)
        wenet_result_free(r);
    return rc;
}

static int recognize(wenet_worker_t *w, const wenet_decode_opts_t *opts, const float *const *pcm,
                     const size_t *n, int batch, wenet_result_t *results, hark_err_t *err);

#ifdef HARK_CUDA
/* The one allocation of the beam path inside a request: a beam wider than any before (the worker
 * holds WENET_RESERVE_BEAM from creation) gets new scratch for it, kept for later requests, and
 * the growth is logged. The new scratch is made before the old is freed: when it cannot be, the
 * request fails (HARK_ERR_CUDA) and the worker keeps serving the beams it has. */
static int grow_beam(wenet_worker_t *w, int beam, hark_err_t *err)
{
    const wenet_asr_t *a = w->asr;
    ctc_beam_gpu_t *g = NULL;
    cudaSetDevice(a->device);
    int rc = ctc_beam_gpu_create(w->max_batch, w->max_te, a->cfg.vocab_size, beam, a->cfg.blank, &g,
                                 err);
    if (rc)
        return err_prefix(err, rc, "prefix beam %d (the worker holds scratch for beam %d)", beam,
                          ctc_beam_gpu_max_beam(w->beam));
    LOG_INFO("worker: prefix beam scratch grown from beam %d to %d for %d x %d frames (allocated "
             "in the request; kept for later ones)",
             ctc_beam_gpu_max_beam(w->beam), beam, w->max_batch, w->max_te);
    ctc_beam_gpu_destroy(w->beam); /* the last call drained the stream: nothing uses it */
    w->beam = g;
    w->beam_grows++;
    return HARK_OK;
}
#endif

static const char *const prof_names[WENET_PROF_STAGES] = {
    "upload",  "features",   "encoder",   "ctc",        "download",
    "decoder", "host issue", "host wait", "host after", "wall"};

const char *wenet_prof_stage_name(int stage)
{
    return stage >= 0 && stage < WENET_PROF_STAGES ? prof_names[stage] : "?";
}

int wenet_worker_profile(wenet_worker_t *w, int on, hark_err_t *err)
{
#ifdef HARK_CUDA
    if (w->asr->device >= 0) {
        cudaSetDevice(w->asr->device);
        for (int i = 0; on && i < WENET_PROF_DOWNLOAD + 4; i++) {
            cudaError_t e = w->ev[i] ? cudaSuccess : cudaEventCreate(&w->ev[i]);
            if (e != cudaSuccess)
                return err_set(err, HARK_ERR_CUDA, "profile events: %s", cudaGetErrorString(e));
        }
        w->prof = on;
        frontend_gpu_profile(w->fe, on ? w->ev[0] : NULL, on ? w->ev[1] : NULL);
        w->prof_calls = 0;
        memset(w->prof_ms, 0, sizeof w->prof_ms);
        return HARK_OK;
    }
#endif
    (void)on;
    return err_set(err, HARK_ERR_UNSUPPORTED, "the stage profile is for GPU workers");
}

int wenet_worker_profile_read(const wenet_worker_t *w, double ms[WENET_PROF_STAGES], int *calls)
{
    memset(ms, 0, sizeof(double) * WENET_PROF_STAGES);
    *calls = 0;
#ifdef HARK_CUDA
    memcpy(ms, w->prof_ms, sizeof w->prof_ms);
    *calls = w->prof_calls;
#endif
    return HARK_OK;
}

int wenet_recognize(wenet_worker_t *w, const wenet_decode_opts_t *opts, const float *const *pcm,
                    const size_t *n, int batch, wenet_result_t *results, hark_err_t *err)
{
#ifdef HARK_CUDA
    if (w->prof) {
        double t0 = clock_now_s();
        w->t_synced = 0;
        int rc = recognize(w, opts, pcm, n, batch, results, err);
        double t1 = clock_now_s();
        if (!rc && w->t_synced > 0) { /* the GPU ran (not an empty batch) */
            w->prof_ms[WENET_PROF_HOST_ISSUE] += (w->t_issued - t0) * 1e3;
            w->prof_ms[WENET_PROF_HOST_WAIT] += (w->t_synced - w->t_issued) * 1e3;
            w->prof_ms[WENET_PROF_HOST_AFTER] += (t1 - w->t_synced) * 1e3;
            w->prof_ms[WENET_PROF_WALL] += (t1 - t0) * 1e3;
            w->prof_calls++;
        }
        return rc;
    }
#endif
    return recognize(w, opts, pcm, n, batch, results, err);
}

static int recognize(wenet_worker_t *w, const wenet_decode_opts_t *opts, const float *const *pcm,
                     const size_t *n, int batch, wenet_result_t *results, hark_err_t *err)
{
    const wenet_asr_t *a = w->asr;
    wenet_decode_opts_t o = opts ? *opts : wenet_default_opts(a);
    if (batch < 0 || batch > w->max_batch)
        return err_set(err, HARK_ERR_TOO_LARGE, "batch of %d exceeds the worker's %d", batch,
                       w->max_batch);
    int rc = wenet_check_opts(a, &o, err);
    if (rc)
        return rc;
    memset(results, 0, sizeof *results * (size_t)batch);
    const int D_in = a->cfg.input_dim, D = a->cfg.d_model, V = a->cfg.vocab_size;
    conformer_opts_t co = conformer_default_opts();
    co.n_threads = o.n_threads;
    co.debug = o.debug;
    co.debug_user = o.debug_user;
    co.chunk_size = o.chunk_size;
    co.left_chunks = o.left_chunks;
    int t_max = 0;
    for (int b = 0; b < batch; b++) {
        int T = feat_num_frames(a->fbank, n[b]);
        if (T > w->max_frames)
            return err_set(err, HARK_ERR_TOO_LARGE,
                           "utterance %d: %.1f s exceeds the worker's limit", b,
                           (double)n[b] / a->cfg.sample_rate);
        w->lens[b] = T;
        results[b].frames = T;
        if (T > t_max)
            t_max = T;
    }
    int te = 0;
#ifdef HARK_CUDA
    if (a->device >= 0) {
        int greedy = o.method == DECODE_CTC_GREEDY;
        int gpu_beam = !greedy && !o.cpu_search && o.beam_size <= CTC_GPU_MAX_BEAM &&
                       o.beam_size <= w->beam_limit;
        if (gpu_beam && ctc_beam_gpu_max_beam(w->beam) < o.beam_size &&
            (rc = grow_beam(w, o.beam_size, err)))
            return rc;
        int out = greedy ? GPU_OUT_ARGMAX : gpu_beam ? GPU_OUT_BEAM : GPU_OUT_LOGP;
        int rescore = o.method == DECODE_ATTENTION_RESCORING;
        /* rescoring on the GPU: the encoder output stays there */
        int gpu_dec = rescore && gpu_beam && w->gdec && !o.cpu_decoder;
        int gb = w->batch_buckets ? gpu_batch_bucket(batch, w->max_batch) : batch;
        const float *const *gpcm = pcm;
        const size_t *gn = n;
        if (gb > batch) { /* padding entries: no samples, no frames, no encoder frames */
            for (int b = 0; b < gb; b++) {
                w->pad_pcm[b] = b < batch ? pcm[b] : NULL;
                w->pad_n[b] = b < batch ? n[b] : 0;
                if (b >= batch)
                    w->lens[b] = 0;
            }
            gpcm = w->pad_pcm;
            gn = w->pad_n;
        }
        if ((rc = encode_gpu(w, &co, gn, gpcm, gb, t_max, &te, rescore && !gpu_dec, out,
                             o.beam_size, err)))
            return rc;
        if (gpu_beam)
            return decode_gpu_nbest(w, &o, batch, t_max, te, gpu_dec, results, err);
        if (greedy) {
            for (int b = 0; b < batch && !rc; b++)
                rc = greedy_from_argmax(a, w->h_arg + (size_t)b * te, w->h_max + (size_t)b * te,
                                        w->enc_lens[b], &results[b].best, err);
            if (rc)
                for (int b = 0; b < batch; b++)
                    wenet_result_free(&results[b]);
            return rc;
        }
        goto search;
    }
#endif
    for (int b = 0; b < batch && !rc; b++)
        rc = feat_compute(a->fbank, pcm[b], n[b], w->feats + (size_t)b * t_max * D_in, err);
    if (rc)
        return rc;
    if (t_max > 0 && batch > 0) {
        if ((rc = conformer_forward(w->state, &co, w->enc, w->enc_lens, w->feats, w->lens, batch,
                                    t_max, err)))
            return rc;
        te = conformer_out_len(a->enc, t_max);
        if ((rc = conformer_ctc_log_probs(a->enc, &co, w->logp, w->enc, w->enc_lens, batch, te,
                                          err)))
            return rc;
    } else {
        for (int b = 0; b < batch; b++)
            w->enc_lens[b] = 0;
    }
#ifdef HARK_CUDA
search:
#endif
    for (int b = 0; b < batch && !rc; b++)
        rc = decode_one(a, &o, w->logp + (size_t)b * te * V, w->enc + (size_t)b * te * D,
                        w->enc_lens[b], &results[b], err);
    if (rc)
        for (int b = 0; b < batch; b++)
            wenet_result_free(&results[b]);
    return rc;
}
