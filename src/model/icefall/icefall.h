/* icefall.h — icefall's pruned stateless transducers on the CPU: pruned_transducer_stateless3
 * (Conformer encoder with Conv2dSubsampling, BasicNorm, rel-pos attention and the convolution
 * module; stateless decoder; joiner) and the zipformer recipe (Zipformer2 encoder, non-causal or
 * causal: with its chunk mask over the whole utterance, or chunk by chunk in a stream:
 * icefall_zipformer.c), icefall's fbank,
 * greedy search (greedy_search_batch: at most one symbol per frame, with timestamps) and modified
 * beam search, BPE pieces joined as icefall's pretrained.py does. The model files are those of
 * tools/convert_icefall.py, whose weights are already the effective ones (docs/model-format.md,
 * "icefall transducers"). Tests: tests/model/icefall/test_icefall.c (every stage against icefall's
 * T1 goldens), tests/model/icefall/test_icefall_zipformer.c (the zipformer against icefall's own
 * code)
 *
 * A GPU path goes beside this one as icefall_gpu.c (as src/model/jasper/jasper_gpu.c does), with
 * these functions as its CPU reference: icefall_encode on a padded row (t_in > len_in) is what a
 * padded batch row must give; the decoder, joiner and searches are separate so that the joiner
 * and greedy search can move to the device while modified beam search keeps this bookkeeping.
 *
 * OWNERSHIP AND THREADS
 * - icefall_model_t: made by icefall_load, immutable afterwards (the weights are views into the
 *   mmap'ed safetensors file), shared by any number of workers; icefall_destroy once no worker is
 *   left.
 * - icefall_worker_t: one thread's encoder scratch, sized at creation for (max_seconds).
 *   icefall_encode uses it; the searches allocate their own (small) state per call.
 * - results (icefall_hyp_t) own their arrays: icefall_hyp_free.
 */
#ifndef HARK_MODEL_ICEFALL_H
#define HARK_MODEL_ICEFALL_H

#include "core/error.h"
#include "dsp/features.h"
#include "search/ctc_endpoint.h"
#include "text/units.h"

#include <stddef.h>

typedef enum { ICEFALL_CONFORMER = 0, ICEFALL_ZIPFORMER = 1 } icefall_encoder_type_t;

#define ICEFALL_ZF_MAX_STACKS 16

/* The zipformer recipe's Zipformer2 encoder, one entry per stack (icefall's per-stack tuples
 * expanded). */
typedef struct {
    int n_stacks;
    int num_layers[ICEFALL_ZF_MAX_STACKS];
    int ds[ICEFALL_ZF_MAX_STACKS]; /* downsampling_factor (1: the embed's 50 Hz) */
    int ff[ICEFALL_ZF_MAX_STACKS]; /* feedforward_dim (feed_forward2; 1 and 3 take 3/4, 5/4) */
    int heads[ICEFALL_ZF_MAX_STACKS];
    int dim[ICEFALL_ZF_MAX_STACKS];  /* encoder_dim */
    int qdim[ICEFALL_ZF_MAX_STACKS]; /* query_head_dim (= key) */
    int vdim[ICEFALL_ZF_MAX_STACKS]; /* value_head_dim */
    int pdim[ICEFALL_ZF_MAX_STACKS]; /* pos_head_dim */
    int kernel[ICEFALL_ZF_MAX_STACKS];
    int pos_dim;
    int embed_dim; /* encoder_dim[0]: encoder_embed's output */
    /* causal (--causal True): ChunkCausalDepthwiseConv1d convolutions and, with chunk > 0,
     * chunk-masked attention: a frame at 50 Hz in chunk c = t / chunk sees chunks [c - left_chunks,
     * c] (left_chunks -1: every chunk to the left) */
    int causal;
    int chunk;       /* --chunk-size (frames at 50 Hz); -1: no chunking */
    int left_chunks; /* --left-context-frames / chunk (at least 1); -1: unlimited */
    int left_frames; /* --left-context-frames */
} icefall_zipformer_config_t;

/* fast_beam_search's options, as icefall's --beam, --max-contexts, --max-states (its
 * pretrained.py's defaults 4, 4, 8) */
typedef struct {
    double beam;      /* >= 0, finite: a state or context below the frame's best - beam goes */
    int max_contexts; /* 1 .. ICEFALL_FAST_BEAM_MAX_ITEMS distinct decoder contexts per frame */
    int max_states;   /* 1 .. ICEFALL_FAST_BEAM_MAX_ITEMS states per frame */
} icefall_fast_beam_opts_t;
#define ICEFALL_FAST_BEAM_MAX_ITEMS 1024
/* HARK_ERR_INVALID_ARG naming the option out of range */
int icefall_fast_beam_check(const icefall_fast_beam_opts_t *o, hark_err_t *err);

typedef struct {
    int encoder_type; /* icefall_encoder_type_t (model.json's recipe) */
    /* encoder (Conformer; for the zipformer d is max(encoder_dim), the encoder output's width, and
     * n_layers the layers of all stacks; nhead, ff and kernel are unused) */
    int feature_dim;        /* 80 fbank bins */
    int subsampling_factor; /* 4 */
    int d;                  /* encoder_dim */
    int nhead;
    int ff; /* dim_feedforward */
    int n_layers;
    int kernel; /* cnn_module_kernel (odd) */
    int causal; /* causal_convolution: the depthwise conv sees kernel - 1 frames of left context
                   and none of right (else (kernel - 1) / 2 on each side) */
    icefall_zipformer_config_t zf; /* encoder_type ICEFALL_ZIPFORMER */
    /* decoder and joiner */
    int decoder_dim;
    int context_size;   /* >= 2 */
    int dec_group_size; /* channels per group of the decoder conv: 1 (depthwise, conformer), 4
                           (zipformer) */
    int vocab;
    int blank_id;
    int joiner_dim;
    /* front end */
    int sample_rate;
    feat_fbank_variant_t fbank; /* FBANK_ICEFALL (high_freq -400) or FBANK_SHERPA (0) */
    float pad_value;            /* batch padding of the features: log(1e-10) */
    /* pretrained.py --simulate-streaming: attention of query frame i limited to the chunks
     * [max((i / chunk - left_chunks) * chunk, 0), (i / chunk + 1) * chunk) of encoder frames */
    int chunk_size;  /* decode_chunk_size; 0: full attention (offline) */
    int left_chunks; /* left_context / decode_chunk_size; -1: every chunk to the left */
    /* defaults of the decoding options */
    int method;                         /* icefall_method_t */
    int beam_size;                      /* modified_beam_search */
    icefall_fast_beam_opts_t fast_beam; /* fast_beam_search (model.json's beam, max_contexts,
                                           max_states; 4, 4, 8 when absent) */
} icefall_config_t;

typedef enum {
    ICEFALL_GREEDY = 0,
    ICEFALL_MODIFIED_BEAM = 1,
    ICEFALL_FAST_BEAM = 2
} icefall_method_t;
/* "greedy_search" | "modified_beam_search" | "fast_beam_search" -> *out; -1 when unknown. */
int icefall_method_parse(const char *name, icefall_method_t *out);
const char *icefall_method_name(icefall_method_t m);

typedef struct icefall_model icefall_model_t;
typedef struct icefall_worker icefall_worker_t;

/* Loads DIR/<version>/model.json, model.safetensors and tokens.txt (version 0 means 1): every
 * tensor's name and shape is checked against model.json, every value must be finite.
 * HARK_ERR_IO (a missing file, named), HARK_ERR_FORMAT (naming the field, the tensor and both
 * shapes), HARK_ERR_UNSUPPORTED (a recipe or option hark lacks), HARK_ERR_NOMEM. */
int icefall_load(const char *dir, int version, icefall_model_t **out, hark_err_t *err);
void icefall_destroy(icefall_model_t *m); /* accepts NULL */
const icefall_config_t *icefall_config(const icefall_model_t *m);
const units_t *icefall_units(const icefall_model_t *m);
const feat_plan_t *icefall_feat_plan(const icefall_model_t *m);

/* Conformer encoder frames of t_in feature frames: ((t_in - 1) / 2 - 1) / 2 (0 when t_in < 7; the
 * encoder needs at least 7 feature frames, i.e. 1040 samples at 16 kHz). */
int icefall_frames_out(int t_in);
/* The model's encoder frames of t_in feature frames: the Conformer's above; the zipformer's
 * ((t_in - 7) / 2 + 1) / 2 (encoder_embed, then the output downsampling by 2), 0 when t_in < 9. */
int icefall_model_frames_out(const icefall_model_t *m, int t_in);
/* The fewest feature frames the model's encoder takes: 7 (Conformer) or 9 (zipformer). */
int icefall_min_frames(const icefall_model_t *m);
/* Feature frames of n samples (snip_edges=false: (n + 80) / 160). */
int icefall_num_frames(const icefall_model_t *m, size_t n);
/* Milliseconds from the start of the audio to encoder frame t (t x 4 x 10 ms). */
int icefall_frame_ms(const icefall_model_t *m, int t);

/* Intermediate stages for tests and --dump-dir: name, (rows, cols) row-major, lent. */
typedef void (*icefall_stage_fn)(void *user, const char *name, const float *data, int rows,
                                 int cols);

int icefall_worker_create(const icefall_model_t *m, double max_seconds, icefall_worker_t **out,
                          hark_err_t *err);
void icefall_worker_destroy(icefall_worker_t *w); /* accepts NULL */
/* Room in the worker for n_streams streams stepped together (icefall_zf_stream_step_batch,
 * icefall_stream_feed), sized once (a worker starts with 1); n_streams below the current room
 * changes nothing. HARK_ERR_NOMEM leaves the worker as it was; HARK_ERR_UNSUPPORTED: a model that
 * cannot stream; HARK_ERR_INVALID_ARG: n_streams < 1. */
int icefall_worker_reserve_streams(icefall_worker_t *w, int n_streams, hark_err_t *err);
/* Feature frames the worker's scratch holds (its max_seconds). */
int icefall_worker_max_frames(const icefall_worker_t *w);
/* A zipformer's encoder for this worker on a GPU (icefall_zf_gpu.h; gw lent, it must outlive the
 * worker's use of it; NULL: back to the CPU): icefall_encode (without stages) and the streams'
 * steps (icefall_stream_feed: each stream in its slot of gw, icefall_stream_set_slot) run there,
 * and reserving streams no longer grows the CPU scratch. HARK_ERR_INVALID_ARG: gw takes fewer
 * frames than the worker or is another model's; HARK_ERR_UNSUPPORTED: not a zipformer. */
struct icefall_zf_gpu_worker;
/* Threads (1..64, the caller counting as one; 1 by default) sharing the per-stream host work of
 * icefall_stream_feed: each stream's front end and its search after a step; more than 1 also sets
 * OpenBLAS to one thread per call, process-wide (ops_set_threads(1)): the searches' small GEMMs
 * run one per thread. HARK_ERR_INVALID_ARG, HARK_ERR_NOMEM, HARK_ERR_INTERNAL. */
int icefall_worker_set_stream_threads(icefall_worker_t *w, int threads, hark_err_t *err);
int icefall_worker_use_gpu(icefall_worker_t *w, struct icefall_zf_gpu_worker *gw, hark_err_t *err);

/* The Conformer encoder on one row: feats (t_in, feature_dim), of which the first len_in frames
 * are the utterance and the rest padding as the caller filled it (icefall pads a batch with
 * log(1e-10); the first conv then sees those values, not zeros) -> enc (icefall_frames_out(t_in),
 * d); *len_out = icefall_frames_out(len_in) frames are valid (the attention's keys and the
 * convolution module's input are masked past it, as icefall's key-padding mask does).
 * HARK_ERR_TOO_LARGE (t_in past the worker's max_seconds), HARK_ERR_INVALID_ARG (fewer than 7
 * valid frames). stage may be NULL; it gets embed_conv_out (T', 128*W channel-major),
 * embed_linear_out, embed_out, pos_emb (2T'-1, d), layer0's feed_forward_macaron, self_attn,
 * conv_module, feed_forward (each before its residual add), norm_final, and layer{i}_out.
 * A zipformer model runs one utterance at its own length only (t_in == len_in, else
 * HARK_ERR_INVALID_ARG: icefall's padded batch rows depend on the padding) and needs 9 frames;
 * its stages are encoder_embed_out (T_embed, encoder_dim[0]) and stack{i}_out (T_embed,
 * encoder_dim[i]: each stack's output at the embed's frame rate, after its bypass). */
int icefall_encode(icefall_worker_t *w, const float *feats, int t_in, int len_in, float *enc,
                   int *len_out, icefall_stage_fn stage, void *user, hark_err_t *err);

/* The causal zipformer chunk by chunk, as icefall's streaming_forward (streaming_decode.py) runs
 * it: a model converted with --causal True, one --chunk-size c > 0 and one --left-context-frames
 * l > 0 (a multiple of every downsampling factor; else HARK_ERR_UNSUPPORTED). A stream holds every
 * layer's left context (l / ds frames of keys, NonlinAttention inputs, values; the conv modules'
 * k / 2 inputs), the ConvNeXt's 3 frames and the processed count; it starts as zeros (icefall's
 * get_init_states). Each step takes icefall_zf_stream_step_frames = 2c + 13 feature frames (the
 * next 2c and 13 of lookahead; the caller pads a short one with log(1e-10)) and gives c / 2
 * encoder frames (enc (c / 2, d)); the next step starts 2c frames later. A stream belongs to one
 * thread at a time; the step uses the worker's scratch. */
typedef struct icefall_zf_stream icefall_zf_stream_t;
int icefall_can_stream(const icefall_model_t *m); /* 1: a causal zipformer as above */
int icefall_zf_stream_create(const icefall_model_t *m, icefall_zf_stream_t **out, hark_err_t *err);
void icefall_zf_stream_reset(icefall_zf_stream_t *s);   /* back to the initial (zero) state */
void icefall_zf_stream_destroy(icefall_zf_stream_t *s); /* accepts NULL */
int icefall_zf_stream_step_frames(const icefall_model_t *m);
int icefall_zf_stream_step(icefall_worker_t *w, icefall_zf_stream_t *s, const float *feats,
                           float *enc, hark_err_t *err);
/* One step of n streams together (each with its own caches and processed count, as icefall's
 * streaming_forward runs a batch of stacked states): the row-wise parts (the linear layers, norms,
 * activations) over the n streams' rows at once; encoder_embed, the attention over each stream's
 * own left context (the keys before its processed frames masked) and the causal convolutions over
 * its own caches, stream by stream. feats[j], enc[j] as icefall_zf_stream_step's for stream j;
 * each stream gets what stepping it alone gives it (up to the GEMMs' summation order).
 * HARK_ERR_INVALID_ARG: n outside [1, the worker's max streams], a stream twice or of another
 * model (no stream changed). icefall_zf_stream_step is this with n = 1. */
int icefall_zf_stream_step_batch(icefall_worker_t *w, icefall_zf_stream_t *const *s,
                                 const float *const *feats, float *const *enc, int n,
                                 hark_err_t *err);
/* A whole utterance the streaming way, as icefall's streaming_decode.py decodes one stream: the
 * features (t_in, feature_dim) get 13 + 30 frames of log(1e-10) appended, then steps every 2c
 * frames until they are used up. *enc (hark_malloc'ed, *len_out = steps x c / 2 frames of d):
 * the steps' outputs one after the other; they equal icefall_encode's chunk-masked output but for
 * the last frames (the tail padding). */
int icefall_zf_stream_encode(icefall_worker_t *w, const float *feats, int t_in, float **enc,
                             int *len_out, hark_err_t *err);

/* Joiner pieces. n rows each; outputs row-major.
 * encoder_proj: enc (n, d) -> out (n, joiner_dim).
 * decoder: ctx (n, context_size) token ids, oldest first, -1 = none (a zero embedding) -> out
 *   (n, decoder_dim) (embedding, depthwise conv over the context, ReLU).
 * decoder_proj: dec (n, decoder_dim) -> out (n, joiner_dim).
 * joiner: logits (n, vocab) = output_linear(tanh(ep + dp)); hidden: (n, joiner_dim) scratch. */
void icefall_encoder_proj(const icefall_model_t *m, const float *enc, int n, float *out);
void icefall_decoder(const icefall_model_t *m, const int *ctx, int n, float *out);
void icefall_decoder_proj(const icefall_model_t *m, const float *dec, int n, float *out);
void icefall_joiner(const icefall_model_t *m, const float *ep, const float *dp, int n,
                    float *hidden, float *logits);

/* One hypothesis: tokens with the encoder frame that emitted each. */
typedef struct {
    int *tokens; /* (n) */
    int *times;  /* (n) encoder frames */
    int n;
    double score; /* greedy: sum of the emitted tokens' raw logits; beam: the log-probability;
                     fast beam: the lattice path's score */
} icefall_hyp_t;
void icefall_hyp_free(icefall_hyp_t *h); /* frees what h owns and zeroes it; NULL-safe */

/* icefall's greedy_search_batch over B utterances: ep[b] (lens[b], joiner_dim) encoder_proj
 * outputs; context [-1]*(cs-1) + [blank] at the start; per frame the joiner's argmax (first index
 * on ties), a non-blank appended (<unk> is an ordinary token, as in icefall) and its decoder
 * output recomputed; at most one symbol per frame. out (B) receives the hypotheses.
 * HARK_ERR_NOMEM (out left empty). */
int icefall_greedy_search(const icefall_model_t *m, const float *const *ep, const int *lens, int B,
                          icefall_hyp_t *out, hark_err_t *err);

/* icefall's modified_beam_search (one symbol per frame) on one utterance: ep (T, joiner_dim).
 * best gets the hypothesis of the largest log_prob / len(ys) (len counting the context_size
 * initial entries, as icefall does); nbest (when not NULL) gets the final beam in icefall's order
 * (*n_nbest entries, caller frees each and the array with hark_free). HARK_ERR_INVALID_ARG
 * (beam < 1), HARK_ERR_NOMEM. */
int icefall_modified_beam_search(const icefall_model_t *m, const float *ep, int T, int beam,
                                 icefall_hyp_t *best, icefall_hyp_t **nbest, int *n_nbest,
                                 hark_err_t *err);

/* icefall's fast_beam_search_one_best with k2.trivial_graph(vocab - 1) on one utterance: ep (T,
 * joiner_dim), as k2's RnntDecodingStreams decode it (icefall_fast_beam.c says how): states of
 * (decoder context, trivial-graph state) starting from the context [blank] * context_size, one
 * symbol per frame, Viterbi (max) scores, per frame the first-pass beam, then max_states, then
 * max_contexts; the one best path of the lattice as k2.shortest_path finds it, its non-blank
 * labels with their frames (the last frame emits nothing: k2 ends the lattice there). opts NULL:
 * the model's (icefall_config's fast_beam). best->score: the path's score (the log-probs of its
 * arcs over frames 0 .. T-2), -inf with no tokens when no final arc survived the last frame's
 * pruning (k2's empty lattice); T == 0 gives no tokens, score 0. HARK_ERR_INVALID_ARG (options),
 * HARK_ERR_UNSUPPORTED (vocab ^ context_size past 2^62), HARK_ERR_NOMEM. */
int icefall_fast_beam_search(const icefall_model_t *m, const float *ep, int T,
                             const icefall_fast_beam_opts_t *opts, icefall_hyp_t *best,
                             hark_err_t *err);

/* Text of a hypothesis: the pieces joined, U+2581 -> ' ', stripped (pretrained.py's
 * token_ids_to_words); *text from hark_malloc. */
int icefall_text(const icefall_model_t *m, const icefall_hyp_t *h, char **text, hark_err_t *err);

/* End to end over B utterances: features and encoder each at its own length (the result of an
 * utterance does not depend on its batch), then the search (greedy batched over all B). */
typedef struct {
    icefall_method_t method;
    int beam_size;                      /* modified_beam_search; 0: the model's default */
    icefall_fast_beam_opts_t fast_beam; /* fast_beam_search; max_states 0: the model's */
    icefall_stage_fn stage;             /* B == 1 only; NULL: none */
    void *stage_user;
} icefall_run_opts_t;

typedef struct {
    icefall_hyp_t best;
    icefall_hyp_t *nbest; /* (n_nbest) modified_beam_search's final beam; NULL for the others */
    int n_nbest;
    char *text;
    int n_frames; /* encoder frames */
} icefall_result_t;
void icefall_result_free(icefall_result_t *r); /* NULL-safe */

/* pcm[b] (n[b] samples in [-1, 1] at the model's rate, finite) -> res[b] (zeroed first).
 * HARK_ERR_INVALID_ARG (too short: fewer than 7 feature frames, or not finite),
 * HARK_ERR_TOO_LARGE (longer than the worker's max_seconds), HARK_ERR_NOMEM; on error every
 * res[b] is left empty. */
int icefall_run(icefall_worker_t *w, const float *const *pcm, const size_t *n, int B,
                const icefall_run_opts_t *o, icefall_result_t *res, hark_err_t *err);

/* A stream of audio recognised as it comes (icefall_stream.c), as icefall's streaming_decode.py
 * decodes one DecodeStream: the causal zipformer of icefall_zf_stream_* (a model that cannot
 * stream: HARK_ERR_UNSUPPORTED at create). The fbank is computed as the samples arrive, each frame
 * once its window is complete (feat_compute_frames: every frame equals the fbank of the whole
 * audio); every 2c frames with 13 more available run one encoder step and the search over its
 * c / 2 frames (greedy_search or modified_beam_search of streaming_beam_search.py, their decoder
 * context / hypotheses kept); at the end the last frames (reflected at the audio's end) and 13 + 30
 * frames of log(1e-10) (DecodeStream's tail padding) run the remaining steps. A stream's memory is
 * sized at create (encoder caches, a second of samples, the frames of one step and a second),
 * except its hypotheses, which grow with the tokens; the steps use the worker's scratch.
 * A stream belongs to one thread at a time. */
typedef struct icefall_stream icefall_stream_t;
int icefall_stream_create(const icefall_model_t *m, icefall_stream_t **out, hark_err_t *err);
void icefall_stream_destroy(icefall_stream_t *s); /* accepts NULL */
/* A new utterance decoded with method and beam (modified_beam_search: 1..64; 0: the model's):
 * HARK_ERR_INVALID_ARG, HARK_ERR_NOMEM. Must precede accept. */
int icefall_stream_start(icefall_stream_t *s, icefall_method_t method, int beam, hark_err_t *err);
/* The stream's encoder caches in slot `slot` of the GPU encoder of the worker that feeds it
 * (icefall_worker_use_gpu; the slot reset at each start); -1 (the default): its own, on the CPU.
 * A slot belongs to one stream at a time. */
void icefall_stream_set_slot(icefall_stream_t *s, int slot);
/* The next n samples (in [-1, 1] at the model's rate, finite: HARK_ERR_INVALID_ARG otherwise);
 * runs every step they complete. After input_done: HARK_ERR_CLOSED. */
int icefall_stream_accept(icefall_worker_t *w, icefall_stream_t *s, const float *pcm, size_t n,
                          hark_err_t *err);
/* The audio has ended: the remaining steps (see above). Twice: HARK_ERR_CLOSED. */
int icefall_stream_input_done(icefall_worker_t *w, icefall_stream_t *s, hark_err_t *err);
/* Several streams fed at once, each as accept(pcm, n) then, with input_done, input_done would
 * feed it alone: rounds of every stream's front end up to its next complete step, those steps as
 * one icefall_zf_stream_step_batch, then each stream's search (and endpoint rules) on its own
 * output, while any stream has a step ready. Each stream gets exactly what feeding it alone gives
 * it (up to the GEMMs' summation order in its encoder output). n at most the worker's streams
 * (icefall_worker_reserve_streams), each stream once. status / err per feed: accept's and
 * input_done's errors; a feed that fails stops there, the others go on. Returns the first
 * feed's non-zero status, or HARK_OK. */
typedef struct {
    icefall_stream_t *s;
    const float *pcm; /* (n) samples, as accept's */
    size_t n;
    int input_done; /* then the audio has ended */
    int status;     /* out: HARK_OK or the error, described in err */
    hark_err_t err;
} icefall_stream_feed_t;
int icefall_stream_feed(icefall_worker_t *w, icefall_stream_feed_t *f, int n);
/* The result so far (partial) or, after input_done, the final one (with endpointing: of the
 * current segment, or of the segment the stream stopped at): best (greedy: its tokens;
 * beam: the best of the beam by log_prob / len, icefall's decoding_result), nbest (beam: the
 * beam), text, n_frames (encoder frames so far). res is zeroed first; HARK_ERR_NOMEM. */
int icefall_stream_result(const icefall_stream_t *s, icefall_result_t *res, hark_err_t *err);
/* Endpointing (off after start; sherpa-onnx's transducer endpoints): after each encoder step
 * the rules (search/ctc_endpoint.h, endpoint_rules_check; rule NULL: sherpa-onnx's defaults) on
 * the current segment, its length and trailing silence in encoder frames x
 * icefall_frame_ms(m, 1), silence being the last frames on which the search emitted no token
 * (greedy: its hypothesis; beam: the best by log_prob / len, as the result picks it), "decoded
 * something" a token in the segment. Not during input_done's tail padding steps. At an endpoint
 * the segment's result (as icefall_stream_result gives it, times in encoder frames from the
 * stream's start) is queued (icefall_stream_pop_segment) and: continuous, the search starts
 * afresh (greedy: the decoder context back to blanks; beam: a fresh beam) while the encoder's
 * caches and the fbank go on; not continuous, the stream stops there (icefall_stream_stopped:
 * later audio is counted but not decoded, no tail is run, and the result stays the segment's).
 * HARK_ERR_INVALID_ARG (before start, negative times), HARK_ERR_NOMEM at a step. */
int icefall_stream_set_endpointing(icefall_stream_t *s, const ctc_endpoint_rule_t *rule,
                                   int continuous, hark_err_t *err);
typedef struct {
    icefall_result_t res;       /* the segment's final result */
    int rule;                   /* the rule (1 ..) that ended it */
    int start_frame, end_frame; /* its encoder frames [start_frame, end_frame) */
} icefall_segment_t;
/* The oldest queued segment into *seg (the caller frees seg->res): 1, or 0 when none is. */
int icefall_stream_pop_segment(icefall_stream_t *s, icefall_segment_t *seg);
int icefall_stream_segments(const icefall_stream_t *s);   /* segments ended by endpoints so far */
int icefall_stream_stopped(const icefall_stream_t *s);    /* an endpoint without continuous */
int icefall_stream_steps(const icefall_stream_t *s);      /* encoder steps run so far */
size_t icefall_stream_samples(const icefall_stream_t *s); /* samples accepted so far */
int icefall_stream_ended(const icefall_stream_t *s);      /* input_done was called */

#endif
