/* icefall_impl.h — the icefall model and worker structures, shared by icefall.c (loading, the
 * encoder, decoder and joiner) and icefall_search.c (searches, end to end). Not a public header.
 * Tests: tests/model/icefall/test_icefall.c */
#ifndef HARK_MODEL_ICEFALL_IMPL_H
#define HARK_MODEL_ICEFALL_IMPL_H

#include "model/icefall/icefall.h"

#include <stdint.h>

struct safetensors;

/* One ConformerEncoderLayer; every pointer a view into the safetensors mapping, effective
 * values (the stored log-scales folded in by the converter). */
typedef struct {
    const float *ffm_w1, *ffm_b1, *ffm_w2, *ffm_b2; /* (ff, d), (ff), (d, ff), (d) */
    const float *in_w, *in_b;                       /* (3d, d), (3d): q, k, v rows */
    const float *out_w, *out_b;                     /* (d, d), (d) */
    const float *pos_w;                             /* (d, d) linear_pos, no bias */
    const float *bu, *bv;                           /* (nhead, d / nhead) */
    const float *pw1_w, *pw1_b;                     /* (2d, d, 1), (2d) */
    const float *dw_w, *dw_b;                       /* (d, 1, kernel), (d) */
    const float *pw2_w, *pw2_b;                     /* (d, d, 1), (d) */
    const float *ff_w1, *ff_b1, *ff_w2, *ff_b2;     /* as the macaron's */
    float eps;                                      /* norm_final: exp(log eps) */
} icefall_layer_t;

/* One Zipformer2EncoderLayer (effective weights, views into the mapping). D = encoder_dim, H
 * heads, A = (2 qd + pd) H the attention weights' in_proj rows, hid = 3 D / 4. */
typedef struct {
    const float *bypass, *bypass_mid;                     /* (D) bypass_scale of each */
    const float *aw_in_w, *aw_in_b;                       /* (A, D), (A): q, k, p rows */
    const float *aw_pos_w;                                /* (H pd, pos_dim) linear_pos */
    const float *sa_in_w[2], *sa_in_b[2];                 /* (H vd, D), (H vd) */
    const float *sa_out_w[2], *sa_out_b[2];               /* (D, H vd), (D) */
    const float *ff_in_w[3], *ff_in_b[3];                 /* (f, D), (f) */
    const float *ff_out_w[3], *ff_out_b[3];               /* (D, f), (D) */
    int ff_dim[3];                                        /* ff * 3 / 4, ff, ff * 5 / 4 */
    const float *na_in_w, *na_in_b, *na_out_w, *na_out_b; /* (3 hid, D), (D, hid) */
    const float *cv_in_w[2], *cv_in_b[2];                 /* (2D, D), (2D) */
    const float *cv_dw_w[2], *cv_dw_b[2];                 /* (D, 1, k), (D); non-causal */
    const float *cv_cc_w[2], *cv_cc_b[2];                 /* causal_conv (D, 1, k/2+1), (D) */
    const float *cv_ck_w[2], *cv_ck_b[2];                 /* chunkwise_conv (D, 1, k), (D) */
    const float *cv_ck_scale[2];                          /* chunkwise_conv_scale (2, D, k) */
    const float *cv_out_w[2], *cv_out_b[2];               /* (D, D), (D) */
    const float *norm_bias;                               /* (D) BiasNorm */
    float norm_scale;                                     /* exp(log_scale) */
} icefall_zf_layer_t;

typedef struct {
    const float *ds_w;     /* (ds) softmax(SimpleDownsample bias); NULL when ds == 1 */
    const float *combiner; /* (D) out_combiner bypass_scale; NULL when ds == 1 */
    icefall_zf_layer_t *layers;
} icefall_zf_stack_t;

typedef struct {
    const float *conv_w[3], *conv_b[3]; /* encoder_embed.conv.{0,4,7} */
    const float *nx_dw_w, *nx_dw_b;     /* ConvNeXt (128, 1, 7, 7), (128) */
    const float *nx_pw1_w, *nx_pw1_b;   /* (384, 128, 1, 1), (384) */
    const float *nx_pw2_w, *nx_pw2_b;   /* (128, 384, 1, 1), (128) */
    const float *out_w, *out_b;         /* (d0, 128 * 19), (d0) */
    const float *norm_bias;             /* (d0) */
    float norm_scale;
    icefall_zf_stack_t stacks[ICEFALL_ZF_MAX_STACKS];
    icefall_zf_layer_t *layers; /* every stack's, in order (owned) */
    const float *out_ds_w;      /* (2) downsample_output */
} icefall_zf_t;

/* icefall_zipformer.c */
#define ZF_EMBED_CH 128         /* layer3_channels of Conv2dSubsampling */
#define ZF_NX_HID 384           /* ConvNeXt hidden channels (3 x 128) */
#define ZF_NX_K 7               /* ConvNeXt depthwise kernel (7 x 7) */
#define ZF_NX_PAD (ZF_NX_K / 2) /* the ConvNeXt's left context kept between chunks (frames) */
int icefall_zf_embed_frames(int t_in); /* encoder_embed's conv frames of t_in feature frames */
/* stack i's widest rows (floats) of the in_proj outputs, of the attention / gate contexts and of a
 * cache concatenated with new rows (keys, values, NonlinAttention inputs): the CPU and GPU
 * encoders' buffers */
void icefall_zf_stack_widths(const icefall_zipformer_config_t *z, int i, size_t *proj, size_t *ctx,
                             size_t *kv);
struct cJSON;
int icefall_zf_config_parse(const char *path, const struct cJSON *enc, icefall_config_t *c,
                            hark_err_t *err);
int icefall_zf_load_weights(icefall_model_t *m, struct safetensors *st, hark_err_t *err);
/* *out = the F32 tensor named by fmt, ... after checking its shape (ndim sizes) and that every
 * value is finite (HARK_ERR_FORMAT naming the tensor and the first NaN / infinite index): both
 * encoders' weight look-ups (icefall.c). */
int icefall_weights_get(struct safetensors *st, const float **out, hark_err_t *err, int ndim,
                        const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void icefall_zf_free(icefall_model_t *m);
size_t icefall_zf_scratch_floats(const icefall_model_t *m, int t_in); /* with 1 stream's step */
size_t icefall_zf_stream_scratch_floats(const icefall_model_t *m, int n_streams); /* one step */
/* the worker's lo/hi entries: a pass over t_in frames, a step of n_streams */
int icefall_zf_key_rows(const icefall_model_t *m, int t_in, int n_streams);
int icefall_zf_encode(icefall_worker_t *w, const float *feats, int t_in, float *enc, int *len_out,
                      icefall_stage_fn stage, void *user, hark_err_t *err);

/* icefall.c: the Conformer's relative positions for T' = tp frames, pe (2 tp - 1, d): row r is
 * position tp - 1 - r (RelPositionalEncoding); tmp: (tp, d) scratch. icefall_encode's table, and
 * the GPU worker's (icefall_gpu.c). */
void icefall_rel_pos_table(float *pe, float *tmp, int tp, int d);

/* icefall_search.c: the checks of one utterance's audio before its features (icefall_run's,
 * icefall_gpu_run's): every sample finite, at least icefall_min_frames feature frames, at most
 * max_t_in (max_seconds names the limit in the message); *frames its feature frames.
 * HARK_ERR_INVALID_ARG, HARK_ERR_TOO_LARGE. */
int icefall_audio_frames(const icefall_model_t *m, const float *pcm, size_t n, int max_t_in,
                         double max_seconds, int *frames, hark_err_t *err);

/* icefall_search.c: the searches' state carried across chunks of one utterance (a stream's; the
 * offline searches run them over the whole utterance). Times are encoder frames from t0 on. */
typedef struct {
    int *ctx;                  /* (context_size) the last tokens, oldest first */
    float *dp;                 /* (joiner_dim) decoder_proj of ctx */
    float *dec, *hid, *logits; /* scratch: (decoder_dim), (joiner_dim), (vocab) */
    icefall_hyp_t hyp;         /* tokens so far (room for cap) */
    int cap;
} icefall_greedy_t;
int icefall_greedy_init(const icefall_model_t *m, icefall_greedy_t *g, hark_err_t *err);
void icefall_greedy_reset(const icefall_model_t *m, icefall_greedy_t *g); /* a new utterance */
/* greedy_search (streaming_beam_search.py's: one symbol per frame) over ep (T, joiner_dim) */
int icefall_greedy_advance(const icefall_model_t *m, icefall_greedy_t *g, const float *ep, int T,
                           int t0, hark_err_t *err);
void icefall_greedy_free(icefall_greedy_t *g); /* NULL-safe */

typedef struct {
    int *ys;    /* (n_ys) context_size initial entries, then the tokens */
    int *times; /* (n_ys - context_size) */
    int n_ys;
    float log_prob;
} bhyp_t;

typedef struct {
    int beam, cs, cap;              /* cap: room of every hypothesis's ys / times */
    int na;                         /* hypotheses in A */
    bhyp_t *A, *B;                  /* (beam) the beam, and the next frame's */
    int *store;                     /* (4 beam cap) their ys and times */
    int *ctx, *top;                 /* scratch: (beam, context_size), (beam) */
    float *dec, *dp, *e, *hid, *lp; /* (beam, decoder_dim / joiner_dim x 3 / vocab) */
    float *topv, *hyp_lp;           /* (beam) x 2 */
} icefall_beam_t;
/* HARK_ERR_INVALID_ARG (beam < 1), HARK_ERR_NOMEM; cap: tokens expected (grows as needed) */
int icefall_beam_init(const icefall_model_t *m, int beam, int cap, icefall_beam_t *b,
                      hark_err_t *err);
/* the hypotheses alone, without the scratch of icefall_beam_advance (for icefall_beam_take) */
int icefall_beam_init_hyps(const icefall_model_t *m, int beam, int cap, icefall_beam_t *b,
                           hark_err_t *err);
void icefall_beam_reset(const icefall_model_t *m, icefall_beam_t *b); /* a new utterance */
/* modified_beam_search's frames (the same in beam_search.py and streaming_beam_search.py) */
int icefall_beam_advance(const icefall_model_t *m, icefall_beam_t *b, const float *ep, int T,
                         int t0, hark_err_t *err);
/* one frame's step from its top k (beam_topk_ref's val / idx, nk of them, idx = hypothesis · V +
 * token): each pick extends its hypothesis by the token (blank: none, time t), picks with the same
 * sequence merge by logaddexp, in the order of the picks; the result becomes A. Room for one more
 * token in every hypothesis (cap) is the caller's. */
void icefall_beam_take(icefall_beam_t *b, int blank, const float *val, const int *idx, int nk,
                       int V, int t);
/* the index in A of the best hypothesis: log_prob / len(ys), the first on ties */
int icefall_beam_best(const icefall_beam_t *b);
/* as icefall_modified_beam_search returns them, for the frames so far */
int icefall_beam_result(const icefall_beam_t *b, icefall_hyp_t *best, icefall_hyp_t **nbest,
                        int *n_nbest, hark_err_t *err);
void icefall_beam_free(icefall_beam_t *b); /* NULL-safe */

/* icefall_fast_beam.c: icefall_fast_beam_search, also giving the size of the lattice k2 would
 * build (stats may be NULL): its states (every frame's and the final state) and arcs (the arcs
 * into the kept states of frames 0 .. T-2 and the last frame's final arcs), so that a test can
 * check that every frame pruned as k2's did, and min_margin: the smallest gap, over the frames,
 * between a score and a pruning decision it took part in (a first-pass arc into a kept state
 * and the cut, the last kept state or context by rank and the first dropped, any of them and
 * best - beam; capped at 1e-3 for the arcs), below which another implementation's rounding may
 * prune differently; zeros (margin +inf) for T == 0. */
typedef struct {
    long states, arcs;
    double min_margin;
} icefall_fast_beam_stats_t;
int icefall_fast_beam_search_ex(const icefall_model_t *m, const float *ep, int T,
                                const icefall_fast_beam_opts_t *opts, icefall_hyp_t *best,
                                icefall_fast_beam_stats_t *stats, hark_err_t *err);

struct icefall_model {
    icefall_config_t cfg;
    icefall_zf_t zf; /* encoder_type ICEFALL_ZIPFORMER */
    struct safetensors *st;
    units_t *units;
    feat_plan_t *feat;
    int w1, w2; /* frequency widths after the 2nd and 3rd subsampling convs (39, 19 for 80) */
    const float *conv0_w, *conv0_b; /* (8, 1, 3, 3), (8) */
    const float *conv1_w, *conv1_b; /* (32, 8, 3, 3), (32) */
    const float *conv2_w, *conv2_b; /* (128, 32, 3, 3), (128) */
    const float *embed_w, *embed_b; /* (d, 128 * w2), (d) */
    float embed_eps;
    icefall_layer_t *layers;              /* (n_layers) */
    const float *dec_emb;                 /* (vocab, decoder_dim) */
    const float *dec_conv;                /* (decoder_dim, dec_group_size, context_size) */
    const float *enc_proj_w, *enc_proj_b; /* (joiner_dim, d), (joiner_dim) */
    const float *dec_proj_w, *dec_proj_b; /* (joiner_dim, decoder_dim), (joiner_dim) */
    const float *out_w, *out_b;           /* (vocab, joiner_dim), (vocab) */
};

struct icefall_worker {
    const icefall_model_t *m;
    double max_seconds;
    int max_t_in;   /* feature frames the scratch holds */
    float *scratch; /* one block for the encoder's activations (enc_sizes) */
    size_t n_scratch;
    int *lo, *hi; /* (n_lohi) key ranges of the attention's softmax */
    int n_lohi;
    /* streams stepped together (icefall_worker_reserve_streams; 1 from creation) and the batched
     * stream driver's lists (icefall_stream_feed), max_streams entries each */
    int max_streams;
    icefall_zf_stream_t **b_zs;
    const float **b_in;
    float **b_out;
    int *b_job;
    int *b_slot;                        /* (max_streams) the steps' GPU slots */
    struct icefall_zf_gpu_worker *zgpu; /* the zipformer's encoder on a GPU, or NULL (lent) */
    struct parallel *par;               /* stream threads (icefall_worker_set_stream_threads) */
    float *feats; /* (max_t_in, feature_dim) icefall_run's features of one utterance */
    float *enc;   /* (T'max, d) icefall_run's encoder output of one utterance */
};

#endif
