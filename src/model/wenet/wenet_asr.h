/* wenet_asr.h — the WeNet U2/U2++ recognizer: a converted model directory (docs/model-format.md)
 * loaded once, and a padded batch of PCM turned into text: fbank -> CMVN -> Conformer -> CTC ->
 * greedy | prefix beam | attention rescoring -> text, tokens, times, n-best.
 * `hark transcribe` and the server use this. Tests: tests/model/wenet/test_wenet_asr.c
 *
 * Ownership. A wenet_asr_t is immutable after wenet_asr_load and may be shared by threads (it
 * owns the weight mapping, the models, the unit list and the feature plan). A wenet_worker_t is
 * one thread's mutable scratch, all of it allocated by wenet_worker_create for its (max_batch,
 * max_seconds): on a GPU also its compute stream, its front end (dsp/frontend_gpu.h: the copy
 * stream of the overlapped upload, staging and device PCM, device features), the
 * prefix beam search's scratch for beam 10 and attention rescoring's decoder scratch for
 * max_batch utterances x 10 candidates x 4 tokens a second of the longest utterance
 * (wenet_asr.c says why). wenet_recognize then neither allocates nor waits for the GPU before
 * its results are ready, except in two cases, each logged at info level when it happens and its
 * larger scratch kept for later requests (wenet_worker_scratch counts them): a prefix beam wider
 * than any before, and rescoring candidates past the decoder's reservation. Results are
 * snapshots the caller releases with wenet_result_free. PCM buffers are lent for the call only
 * (a GPU worker may DMA from page-locked ones; the call returns only after those copies ended).
 */
#ifndef HARK_MODEL_WENET_ASR_H
#define HARK_MODEL_WENET_ASR_H

#include "core/error.h"
#include "dsp/frontend_gpu.h"
#include "model/wenet/conformer.h"
#include "search/ctc_endpoint.h"
#include "model/wenet/wenet_config.h"
#include "search/ctc.h"

#include <stddef.h>

typedef enum {
    DECODE_CTC_GREEDY = 0,
    DECODE_CTC_PREFIX_BEAM = 1,
    DECODE_ATTENTION_RESCORING = 2,
} wenet_method_t;

/* "ctc_greedy_search" | "ctc_prefix_beam_search" | "attention_rescoring" (WeNet's names). */
int wenet_parse_method(const char *name, wenet_method_t *out);
const char *wenet_method_name(wenet_method_t m);

#define WENET_MAX_BEAM 1000 /* the widest beam a model (config.pbtxt, the CLI) may ask for */

typedef struct {
    wenet_method_t method;
    int beam_size;           /* prefix beam / rescoring candidates, [1, WENET_MAX_BEAM] */
    float ctc_weight;        /* attention rescoring */
    float reverse_weight;    /* attention rescoring, bitransformer only */
    int nbest;               /* hypotheses to return for beam methods (1..beam_size) */
    int n_threads;           /* OpenBLAS threads; <= 0 leaves the setting alone */
    int cpu_search;          /* GPU models: 1 runs the prefix beam search on the CPU (the whole
                                log-prob matrix crosses to the host); 0: on the GPU when
                                beam_size <= CTC_GPU_MAX_BEAM (ctc_beam_gpu.h), else on the CPU */
    int cpu_decoder;         /* GPU models: 1 scores attention rescoring's candidates with the CPU
                                decoder (decoder.h; the encoder output crosses to the host);
                                0: all utterances' candidates at once on the GPU (decoder_gpu.h) */
    int chunk_size;          /* WeNet's decoding_chunk_size: <= 0 full context (offline); > 0 the
                                chunk mask offline (conformer_opts_t), the chunk of a stream */
    int left_chunks;         /* num_decoding_left_chunks with a chunk: -1 all, >= 0 that many */
    int endpointing;         /* streams: WeNet's CTC endpoint rules (endpoint) on */
    int continuous_decoding; /* streams: after an endpoint, the next segment goes on with a fresh
                                search (the encoder's caches kept: wenet_stream_next_segment) */
    ctc_endpoint_config_t endpoint; /* the rules; wenet_default_opts: WeNet's (ctc_endpoint.h) */
    conformer_debug_fn debug;       /* optional: every encoder stage of every utterance */
    void *debug_user;
} wenet_decode_opts_t;

typedef struct wenet_asr wenet_asr_t;
typedef struct wenet_worker wenet_worker_t;

/* Defaults: attention rescoring when the model has a decoder (else prefix beam), beam 10, the
 * model's ctc_weight / reverse_weight, nbest 1, full context (chunk_size 0, left_chunks -1);
 * endpointing off, with WeNet's rules ready (ctc_endpoint_default). */
wenet_decode_opts_t wenet_default_opts(const wenet_asr_t *asr);

/* Loads DIR (the model-repository entry: DIR/1/model.json, model.safetensors, units.txt) for
 * the CPU. Errors name the file and what is wrong (missing tensor, unit table not matching the
 * vocabulary, unsupported option). */
int wenet_asr_load(const char *model_dir, wenet_asr_t **out, hark_err_t *err);

typedef enum { WENET_FP32 = 1, WENET_FP16 = 2, WENET_BF16 = 3 } wenet_precision_t;
/* "fp32", "fp16", "bf16" -> the precision; 0 for anything else */
wenet_precision_t wenet_precision_parse(const char *name);
const char *wenet_precision_name(wenet_precision_t p);
typedef struct {
    int device;                  /* -1: CPU; >= 0: that CUDA device */
    wenet_precision_t precision; /* FP32; GPU only: FP16 or BF16 GEMMs, FP32 accumulation */
    int version;                 /* model version directory DIR/<version>/; 0 means 1 */
} wenet_load_opts_t;

/* The same, on the device the options name: features, encoder, CTC and the CTC searches run on
 * the GPU (prefix beam up to CTC_GPU_MAX_BEAM), and the attention decoder too where its kernels
 * fit (decoder_gpu.h; else on the CPU). HARK_ERR_NO_DEVICE without CUDA or without that device. */
int wenet_asr_load_opts(const char *model_dir, const wenet_load_opts_t *lo, wenet_asr_t **out,
                        hark_err_t *err);
int wenet_asr_device(const wenet_asr_t *asr); /* -1: CPU */
void wenet_asr_destroy(wenet_asr_t *asr);     /* accepts NULL */
const wenet_config_t *wenet_asr_config(const wenet_asr_t *asr);
int wenet_asr_sample_rate(const wenet_asr_t *asr);
/* Encoder frame duration in milliseconds (subsampling rate x frame shift). */
int wenet_asr_frame_ms(const wenet_asr_t *asr);
struct units;
/* The unit list and its detokenization style (for word timings and subtitles). */
const struct units *wenet_asr_units(const wenet_asr_t *asr, int *style);
/* The model's CMVN (mean, istd of input_dim) or NULL when it has none. */
int wenet_asr_cmvn(const wenet_asr_t *asr, const float **mean, const float **istd);

/* Scratch for batches of up to max_batch utterances of up to max_seconds each (see Ownership).
 * HARK_ERR_INVALID_ARG; HARK_ERR_NOMEM; HARK_ERR_CUDA naming the buffer that did not fit. */
int wenet_worker_create(const wenet_asr_t *asr, int max_batch, double max_seconds,
                        wenet_worker_t **out, hark_err_t *err);
void wenet_worker_destroy(wenet_worker_t *w); /* accepts NULL */

/* A GPU worker's scratch (all 0 for a CPU worker). */
typedef struct {
    int beam;                /* the widest beam the prefix beam scratch holds (10 at creation) */
    int beam_grows;          /* requests that re-created it for a wider beam */
    size_t decoder_rows;     /* attention rescoring's decoder scratch: rows (Σ len + 1) ... */
    size_t decoder_enc_rows; /* ... and encoder rows it holds */
    size_t decoder_bytes;
    int decoder_grows; /* requests that grew it past what it held */
} wenet_worker_scratch_t;
void wenet_worker_scratch(const wenet_worker_t *w, wenet_worker_scratch_t *out);

/* A GPU worker uploads a batch's PCM through its front end (dsp/frontend_gpu.h) on a copy stream
 * in chunks of consecutive utterances (frontend_upload_split), and computes each chunk's features
 * while the next one uploads. chunks: 0 for the default (WENET_UPLOAD_CHUNKS), 1 for one upload
 * and then the features, at most WENET_UPLOAD_MAX_CHUNKS (a batch of fewer utterances uses one
 * per utterance). Results do not depend on it (features are per utterance); for tests and
 * benchmarks. CPU workers check it and ignore it (frontend_gpu_set_chunks).
 * HARK_ERR_INVALID_ARG outside [0, WENET_UPLOAD_MAX_CHUNKS]. */
#define WENET_UPLOAD_CHUNKS FRONTEND_UPLOAD_CHUNKS
#define WENET_UPLOAD_MAX_CHUNKS FRONTEND_UPLOAD_MAX_CHUNKS
int wenet_worker_set_upload_chunks(wenet_worker_t *w, int chunks, hark_err_t *err);

/* GPU workers of one model take turns on the device (off by default): a worker's features,
 * encoder and CTC wait on the device for the work another worker issued before, while its
 * upload and host work overlap that work; off, its batches run beside the others' and share
 * the SMs. Results do not depend on it. CPU workers ignore it. */
void wenet_worker_set_turns(wenet_worker_t *w, int on);

/* A GPU worker computes a batch of more than 8 utterances padded to the next multiple of 8
 * (entries of no samples), so that the few shapes a server's varying batch sizes come to keep
 * their recorded CUDA graphs (on by default). Results do not depend on it; for tests and
 * benchmarks. CPU workers ignore it. */
void wenet_worker_set_batch_buckets(wenet_worker_t *w, int on);

typedef struct {
    char *text;
    int *tokens; /* (n_tokens) */
    int *times;  /* (n_tokens) encoder frame of each token (x wenet_asr_frame_ms for ms) */
    int n_tokens;
    double score; /* greedy: sum of best log-probs; beam: logadd(s, ns); rescoring: final score */
} wenet_hyp_t;

typedef struct {
    wenet_hyp_t best;
    wenet_hyp_t *nbest; /* (n_nbest) beam methods: the CTC n-best in WeNet's order */
    int n_nbest;
    double confidence; /* attention rescoring: WeNet's confidence; else 0 */
    int frames;        /* fbank frames of the utterance */
} wenet_result_t;

/* Recognizes `batch` utterances (pcm[b]: n[b] samples in [-1, 1] at the model's rate) as one
 * padded batch; results[b] is filled for every b on success. Empty or too-short audio gives an
 * empty transcript. HARK_ERR_TOO_LARGE past the worker's limits; on error no result needs
 * freeing. */
int wenet_recognize(wenet_worker_t *w, const wenet_decode_opts_t *opts, const float *const *pcm,
                    const size_t *n, int batch, wenet_result_t *results, hark_err_t *err);
void wenet_result_free(wenet_result_t *r);

/* HARK_OK, or HARK_ERR_INVALID_ARG / HARK_ERR_UNSUPPORTED naming the option this model cannot
 * decode with (wenet_recognize and streams check their options with it). */
int wenet_check_opts(const wenet_asr_t *asr, const wenet_decode_opts_t *opts, hark_err_t *err);

/* ---- for the engine's own modules (wenet_stream.c) ------------------------------------------ */
const conformer_model_t *wenet_asr_encoder(const wenet_asr_t *asr);
/* The encoder on the device (NULL for a CPU model), its conformer_gpu precision flag in *prec
 * and its CUDA device in *device. */
const struct conformer_gpu_model *wenet_asr_gpu_encoder(const wenet_asr_t *asr, int *prec,
                                                        int *device);
const struct feat_plan *wenet_asr_fbank(const wenet_asr_t *asr);
/* The result of a CTC search's n-best (taken: *nb is released) for the options' method: greedy
 * (nb from ctc_greedy_search), prefix beam, or attention rescoring of nb's candidates over the
 * encoder output enc (T, D). r is zeroed first; on error nothing needs freeing. */
int wenet_result_from_ctc(const wenet_asr_t *asr, const wenet_decode_opts_t *opts, ctc_nbest_t *nb,
                          const float *enc, int T, wenet_result_t *r, hark_err_t *err);

/* Where a GPU worker's time goes. After wenet_worker_profile(w, 1) each wenet_recognize on the
 * GPU path records CUDA events between its stages (graphs stay on) and host clock readings, and
 * adds their times (ms) to totals that wenet_worker_profile_read returns with the number of calls
 * since profiling was turned on. GPU stages: the PCM upload, features, encoder (forward), CTC
 * (head + argmax or log-softmax + search), download of the results, and the attention decoder
 * of GPU rescoring (which runs after the wait, inside "host after"); host: issuing the work
 * (entry until everything is enqueued), waiting for the GPU, what follows the GPU (decoding,
 * detokenization), and the whole call. HARK_ERR_UNSUPPORTED for a CPU worker. */
enum {
    WENET_PROF_UPLOAD,
    WENET_PROF_FEATURES,
    WENET_PROF_ENCODER,
    WENET_PROF_CTC,
    WENET_PROF_DOWNLOAD,
    WENET_PROF_DECODER, /* attention rescoring's decoder on the GPU (part of host after) */
    WENET_PROF_HOST_ISSUE,
    WENET_PROF_HOST_WAIT,
    WENET_PROF_HOST_AFTER,
    WENET_PROF_WALL,
    WENET_PROF_STAGES
};
const char *wenet_prof_stage_name(int stage);
int wenet_worker_profile(wenet_worker_t *w, int on, hark_err_t *err);
int wenet_worker_profile_read(const wenet_worker_t *w, double ms[WENET_PROF_STAGES], int *calls);

#endif
