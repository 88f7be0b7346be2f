/* Tests for src/model/wenet/conformer.c: the WeNet golden set stage by stage (subsampling, every
 * sub-module of every block, encoder output, CTC log-probs, greedy argmax), the padded batch, the
 * chunk mask, and synthetic non-causal / batch_norm / conv2d6 / conv2d8 / abs_pos / relu / gelu
 * models for batch-vs-single invariance. HARK_TEST_REPORT=1 prints the measured errors. */
#include "test.h"
#include "support/golden_model.h"
#include "model/synth_weights.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/wenet/conformer.h"
#include "model/safetensors.h"
#include "model/wenet/wenet_config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GSET "golden/wenet_u2pp_conformer_small"
#define REL_TOL 1e-4   /* ‖a − ref‖ / ‖ref‖ against WeNet */
#define BATCH_TOL 1e-5 /* batch row vs the same utterance alone */

static const char *const UTTS[5] = {"librispeech-1995-1837-0001", "jfk",
                                    "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                    "cards-001"};

static int report(void)
{
    const char *e = getenv("HARK_TEST_REPORT");
    return e && *e && strcmp(e, "0") != 0;
}

/* ---- the converted golden model ------------------------------------------------------------ */

typedef struct {
    wenet_config_t cfg;
    safetensors_t *st;
    conformer_model_t *m;
} golden_model_t;

/* 0 ok; 1 skip (reason in why); -1 failure (message in why). */
static int golden_open(golden_model_t *g, char *why, size_t nwhy)
{
    memset(g, 0, sizeof *g);
    int r = golden_wenet_open(&g->cfg, &g->st, why, nwhy);
    if (r)
        return r;
    hark_err_t err = {0};
    if (conformer_model_create_st(&g->cfg, g->st, &g->m, &err) != HARK_OK) {
        snprintf(why, nwhy, "conformer_model_create_st: %.400s", err.msg);
        return -1;
    }
    return 0;
}

static void golden_close(golden_model_t *g)
{
    conformer_model_destroy(g->m);
    st_close(g->st);
}

#define OPEN_GOLDEN(g)                                                                             \
    do {                                                                                           \
        char why_[600];                                                                            \
        int r_ = golden_open(&(g), why_, sizeof why_);                                             \
        if (r_ > 0)                                                                                \
            SKIP(why_);                                                                            \
        CHECKF(r_ == 0, "%s", why_);                                                               \
    } while (0)

static int load_golden(npy_array_t *a, const char *utt, const char *file)
{
    return golden_wenet_npy(a, utt, file);
}

/* ---- a debug hook that keeps a copy of every stage ----------------------------------------- */

typedef struct {
    char name[64];
    int layer, utt, rows, cols;
    float *data;
} stage_copy_t;

typedef struct {
    stage_copy_t s[128];
    int n;
} collector_t;

static void collect(void *user, const conformer_stage_t *st)
{
    collector_t *c = user;
    if (c->n >= 128)
        return;
    stage_copy_t *d = &c->s[c->n++];
    snprintf(d->name, sizeof d->name, "%s", st->name);
    d->layer = st->layer, d->utt = st->utt, d->rows = st->rows, d->cols = st->cols;
    size_t n = (size_t)st->rows * st->cols;
    d->data = hark_malloc((n ? n : 1) * sizeof(float));
    memcpy(d->data, st->data, n * sizeof(float));
}

static const stage_copy_t *find_stage(const collector_t *c, const char *name, int utt)
{
    for (int i = 0; i < c->n; i++)
        if (c->s[i].utt == utt && !strcmp(c->s[i].name, name))
            return &c->s[i];
    return NULL;
}

static void collector_free(collector_t *c)
{
    for (int i = 0; i < c->n; i++)
        hark_free(c->s[i].data);
    c->n = 0;
}

/* Runs one utterance (fbank (frames, in_dim)) alone; returns enc (t_out, D) and logp (t_out, V),
 * both hark_malloc'ed. */
static int run_single(const conformer_model_t *m, const conformer_opts_t *o, const float *feats,
                      int frames, float **enc, float **logp, int *t_out)
{
    hark_err_t err = {0};
    conformer_state_t *s = NULL;
    int rc = conformer_state_create(m, 1, frames, &s, &err);
    if (rc)
        return rc;
    const wenet_config_t *c = conformer_config(m);
    int to = conformer_out_len(m, frames), el = 0;
    *enc = hark_malloc(((size_t)to * c->d_model + 1) * sizeof(float));
    *logp = hark_malloc(((size_t)to * c->vocab_size + 1) * sizeof(float));
    rc = conformer_forward(s, o, *enc, &el, feats, &frames, 1, frames, &err);
    if (!rc)
        rc = conformer_ctc_log_probs(m, o, *logp, *enc, &el, 1, to, &err);
    if (rc)
        fprintf(stderr, "    run_single: %s\n", err.msg);
    *t_out = el;
    conformer_state_destroy(s);
    return rc;
}

static double rel_err(const float *a, const float *ref, size_t n)
{
    return test_rel_rms(a, ref, n);
}

/* ---- golden: stage by stage ------------------------------------------------------------------ */

TEST(conformer_golden_stages_lj001)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    const char *utt = "LJ001-0002";
    npy_array_t fb, layers, enc_ref, ctc_ref;
    CHECK_OK(load_golden(&fb, utt, "fbank.npy"));
    CHECK_OK(load_golden(&layers, utt, "enc_full_layer_outputs.npy"));
    CHECK_OK(load_golden(&enc_ref, utt, "enc_full.npy"));
    CHECK_OK(load_golden(&ctc_ref, utt, "ctc_logprobs_full.npy"));
    collector_t col = {.n = 0};
    conformer_opts_t o = conformer_default_opts();
    o.debug = collect;
    o.debug_user = &col;
    o.n_threads = 1;
    float *enc, *logp;
    int t_out, frames = (int)fb.shape[0], d = g.cfg.d_model;
    CHECK_OK(run_single(g.m, &o, fb.data, frames, &enc, &logp, &t_out));
    CHECK_EQ_INT(t_out, enc_ref.shape[0]);
    CHECK_EQ_INT(layers.shape[0], g.cfg.n_blocks + 1);

    /* subsampling conv stack: golden (D, T', F') vs ours (T', D·F') */
    npy_array_t conv_ref;
    CHECK_OK(load_golden(&conv_ref, utt, "debug_embed_conv_out.npy"));
    const stage_copy_t *sc = find_stage(&col, "embed_conv_out", 0);
    CHECK(sc && conv_ref.ndim == 3 && conv_ref.shape[0] == d && conv_ref.shape[1] == t_out);
    int fq = (int)conv_ref.shape[2];
    CHECK_EQ_INT(sc->cols, d * fq);
    float *tr = hark_malloc(conv_ref.count * sizeof(float));
    for (int c = 0; c < d; c++)
        for (int t2 = 0; t2 < t_out; t2++)
            for (int f = 0; f < fq; f++)
                tr[((size_t)t2 * d + c) * fq + f] =
                    ((float *)conv_ref.data)[((size_t)c * t_out + t2) * fq + f];
    double e = rel_err(sc->data, tr, conv_ref.count);
    if (report())
        fprintf(stderr, "    %-36s rel %.3g\n", "embed_conv_out", e);
    CHECKF(e <= REL_TOL, "embed_conv_out rel %g", e);
    hark_free(tr);
    npy_free(&conv_ref);

    /* layer_outputs[0] and every sub-module of every block */
    size_t per = (size_t)t_out * d;
    static const char *const subs[] = {
        "norm_ff_macaron", "feed_forward_macaron", "norm_mha", "self_attn",
        "norm_conv",       "conv_module",          "norm_ff",  "feed_forward",
        "norm_final"};
    const stage_copy_t *s0 = find_stage(&col, "embed_out", 0);
    CHECK(s0 && s0->rows == t_out && s0->cols == d);
    e = rel_err(s0->data, layers.data, per);
    if (report())
        fprintf(stderr, "    %-36s rel %.3g\n", "embed_out (layer_outputs[0])", e);
    CHECKF(e <= REL_TOL, "embed_out rel %g", e);
    for (int i = 0; i < g.cfg.n_blocks; i++) {
        for (size_t k = 0; k < sizeof subs / sizeof subs[0]; k++) {
            char name[96], file[128];
            snprintf(name, sizeof name, "layer%d_%s_out", i, subs[k]);
            snprintf(file, sizeof file, "debug_%s.npy", name);
            npy_array_t r;
            CHECK_OK(load_golden(&r, utt, file));
            const stage_copy_t *st = find_stage(&col, name, 0);
            CHECKF(st && r.count == (size_t)st->rows * st->cols, "stage %s missing or mis-sized",
                   name);
            e = rel_err(st->data, r.data, r.count);
            if (report())
                fprintf(stderr, "    %-36s rel %.3g  max %.3g\n", name, e,
                        test_max_abs_diff(st->data, r.data, r.count));
            CHECKF(e <= REL_TOL, "%s rel %g", name, e);
            npy_free(&r);
        }
        char name[64];
        snprintf(name, sizeof name, "layer%d_out", i);
        const stage_copy_t *st = find_stage(&col, name, 0);
        CHECK(st);
        e = rel_err(st->data, (float *)layers.data + (size_t)(i + 1) * per, per);
        if (report())
            fprintf(stderr, "    %-36s rel %.3g\n", name, e);
        CHECKF(e <= REL_TOL, "%s rel %g", name, e);
    }
    e = rel_err(enc, enc_ref.data, per);
    double ec = rel_err(logp, ctc_ref.data, ctc_ref.count);
    if (report())
        fprintf(stderr, "    %-36s rel %.3g\n    %-36s rel %.3g  max %.3g\n", "enc_out", e,
                "ctc_logprobs", ec, test_max_abs_diff(logp, ctc_ref.data, ctc_ref.count));
    CHECKF(e <= REL_TOL, "enc rel %g", e);
    CHECKF(ec <= REL_TOL, "ctc rel %g", ec);
    const stage_copy_t *sl = find_stage(&col, "ctc_logprobs", 0);
    CHECK(sl && sl->rows == t_out && sl->cols == g.cfg.vocab_size);

    /* the same from feats_cmvn.npy with the model's CMVN skipped */
    npy_array_t fc;
    CHECK_OK(load_golden(&fc, utt, "feats_cmvn.npy"));
    conformer_opts_t o2 = conformer_default_opts();
    o2.skip_cmvn = 1;
    float *enc2, *logp2;
    int t2;
    CHECK_OK(run_single(g.m, &o2, fc.data, frames, &enc2, &logp2, &t2));
    e = rel_err(enc2, enc_ref.data, per);
    if (report())
        fprintf(stderr, "    %-36s rel %.3g\n", "enc_out from feats_cmvn", e);
    CHECKF(e <= REL_TOL, "enc from feats_cmvn rel %g", e);

    hark_free(enc), hark_free(logp), hark_free(enc2), hark_free(logp2);
    npy_free(&fb), npy_free(&fc), npy_free(&layers), npy_free(&enc_ref), npy_free(&ctc_ref);
    collector_free(&col);
    golden_close(&g);
}

/* ---- golden: all utterances, layer outputs, encoder, CTC, greedy argmax ---------------------- */

static cJSON *load_results(void)
{
    return golden_wenet_results();
}

TEST(conformer_golden_all_utterances)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    cJSON *res = load_results();
    CHECK(res);
    int d = g.cfg.d_model, v = g.cfg.vocab_size;
    for (int u = 0; u < 5; u++) {
        npy_array_t fb, layers, enc_ref, ctc_ref;
        CHECK_OK(load_golden(&fb, UTTS[u], "fbank.npy"));
        CHECK_OK(load_golden(&layers, UTTS[u], "enc_full_layer_outputs.npy"));
        CHECK_OK(load_golden(&enc_ref, UTTS[u], "enc_full.npy"));
        CHECK_OK(load_golden(&ctc_ref, UTTS[u], "ctc_logprobs_full.npy"));
        collector_t col = {.n = 0};
        conformer_opts_t o = conformer_default_opts();
        o.debug = collect;
        o.debug_user = &col;
        float *enc, *logp;
        int t_out;
        CHECK_OK(run_single(g.m, &o, fb.data, (int)fb.shape[0], &enc, &logp, &t_out));
        CHECK_EQ_INT(t_out, enc_ref.shape[0]);
        CHECK_EQ_INT(t_out, wenet_subsampled_len(&g.cfg, (int)fb.shape[0]));
        size_t per = (size_t)t_out * d;
        double worst_layer = 0;
        for (int i = 0; i <= g.cfg.n_blocks; i++) {
            char name[32];
            if (i == 0)
                snprintf(name, sizeof name, "embed_out");
            else
                snprintf(name, sizeof name, "layer%d_out", i - 1);
            const stage_copy_t *st = find_stage(&col, name, 0);
            CHECK(st && (size_t)st->rows * st->cols == per);
            double e = rel_err(st->data, (float *)layers.data + (size_t)i * per, per);
            worst_layer = e > worst_layer ? e : worst_layer;
            CHECKF(e <= REL_TOL, "%s %s rel %g", UTTS[u], name, e);
        }
        double ee = rel_err(enc, enc_ref.data, per);
        double ec = rel_err(logp, ctc_ref.data, (size_t)t_out * v);
        double mc = test_max_abs_diff(logp, ctc_ref.data, (size_t)t_out * v);
        CHECKF(ee <= REL_TOL, "%s enc rel %g", UTTS[u], ee);
        CHECKF(ec <= REL_TOL, "%s ctc rel %g", UTTS[u], ec);
        /* greedy argmax identical to WeNet's frame_argmax */
        cJSON *fa = cJSON_GetObjectItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, UTTS[u]), "full"),
                                "ctc_greedy_search"),
            "frame_argmax");
        CHECKF(cJSON_IsArray(fa) && cJSON_GetArraySize(fa) == t_out, "%s frame_argmax", UTTS[u]);
        int mismatches = 0;
        for (int t2 = 0; t2 < t_out; t2++) {
            const float *row = logp + (size_t)t2 * v;
            int best = 0;
            for (int k = 1; k < v; k++)
                best = row[k] > row[best] ? k : best;
            mismatches += best != (int)cJSON_GetArrayItem(fa, t2)->valuedouble;
        }
        if (report())
            fprintf(stderr,
                    "    %-42s T'=%3d layers<=%.3g enc %.3g ctc %.3g (max %.3g) argmax "
                    "mismatches %d\n",
                    UTTS[u], t_out, worst_layer, ee, ec, mc, mismatches);
        CHECKF(mismatches == 0, "%s: %d frames differ from WeNet's greedy argmax", UTTS[u],
               mismatches);
        hark_free(enc), hark_free(logp);
        collector_free(&col);
        npy_free(&fb), npy_free(&layers), npy_free(&enc_ref), npy_free(&ctc_ref);
    }
    cJSON_Delete(res);
    golden_close(&g);
}

/* ---- golden: the padded batch ---------------------------------------------------------------- */

TEST(conformer_golden_padded_batch)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    /* WeNet's batch order (manifest.json batch.order): sorted by length */
    static const char *const order[5] = {"jfk", "librispeech-1995-1837-0001",
                                         "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                         "cards-001"};
    npy_array_t fp, fl;
    CHECK_OK(npy_load_f32(test_shared(GSET "/goldens/batch/feats_padded.npy"), &fp));
    CHECK_OK(npy_load_f32(test_shared(GSET "/goldens/batch/feats_lengths.npy"), &fl));
    CHECK(fp.ndim == 3 && fp.shape[0] == 5 && fl.count == 5);
    int batch = 5, t_max = (int)fp.shape[1], fd = (int)fp.shape[2], d = g.cfg.d_model,
        v = g.cfg.vocab_size;
    int lens[5], enc_lens[5];
    for (int b = 0; b < 5; b++)
        lens[b] = (int)((float *)fl.data)[b];
    hark_err_t err = {0};
    conformer_state_t *s = NULL;
    CHECK_OK(conformer_state_create(g.m, batch, t_max, &s, &err));
    int t_out = conformer_out_len(g.m, t_max);
    float *enc = hark_malloc((size_t)batch * t_out * d * sizeof(float));
    float *logp = hark_malloc((size_t)batch * t_out * v * sizeof(float));
    CHECK_OK(conformer_forward(s, NULL, enc, enc_lens, fp.data, lens, batch, t_max, &err));
    CHECK_OK(conformer_ctc_log_probs(g.m, NULL, logp, enc, enc_lens, batch, t_out, &err));
    for (int b = 0; b < batch; b++) {
        float *e1, *l1;
        int t1;
        CHECK_OK(run_single(g.m, NULL, (float *)fp.data + (size_t)b * t_max * fd, lens[b], &e1, &l1,
                            &t1));
        CHECK_EQ_INT(enc_lens[b], t1);
        const float *eb = enc + (size_t)b * t_out * d, *lb = logp + (size_t)b * t_out * v;
        double es = rel_err(eb, e1, (size_t)t1 * d), ls = rel_err(lb, l1, (size_t)t1 * v);
        npy_array_t ref;
        CHECK_OK(load_golden(&ref, order[b], "enc_full_batched.npy"));
        CHECK_EQ_INT(ref.shape[0], t1);
        double eg = rel_err(eb, ref.data, ref.count);
        int pad_zero = 1;
        for (size_t i = (size_t)t1 * d; i < (size_t)t_out * d; i++)
            pad_zero &= eb[i] == 0.0f;
        if (report())
            fprintf(stderr, "    batch row %d %-42s vs single enc %.3g ctc %.3g, vs WeNet %.3g\n",
                    b, order[b], es, ls, eg);
        CHECKF(es <= BATCH_TOL && ls <= BATCH_TOL, "row %d vs single: enc %g ctc %g", b, es, ls);
        CHECKF(eg <= REL_TOL, "row %d vs enc_full_batched: %g", b, eg);
        CHECKF(pad_zero, "row %d: padded frames are not zero", b);
        npy_free(&ref);
        hark_free(e1), hark_free(l1);
    }
    /* limits */
    CHECK(conformer_forward(s, NULL, enc, enc_lens, fp.data, lens, batch + 1, t_max, &err) ==
          HARK_ERR_TOO_LARGE);
    lens[2] = t_max + 1;
    CHECK(conformer_forward(s, NULL, enc, enc_lens, fp.data, lens, batch, t_max, &err) ==
          HARK_ERR_INVALID_ARG);
    hark_free(enc), hark_free(logp);
    conformer_state_destroy(s);
    npy_free(&fp), npy_free(&fl);
    golden_close(&g);
}

/* ---- golden: the chunk mask (masked mode, README note 5) ------------------------------------- */

TEST(conformer_golden_chunk_mask)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    static const int lefts[2] = {-1, 4};
    for (int u = 0; u < 5; u++) {
        npy_array_t fb;
        CHECK_OK(load_golden(&fb, UTTS[u], "fbank.npy"));
        for (int li = 0; li < 2; li++) {
            char file[64];
            snprintf(file, sizeof file, "enc_chunk16_left%d_masked.npy", lefts[li]);
            npy_array_t ref;
            CHECK_OK(load_golden(&ref, UTTS[u], file));
            conformer_opts_t o = conformer_default_opts();
            o.chunk_size = 16;
            o.left_chunks = lefts[li];
            float *enc, *logp;
            int t_out;
            CHECK_OK(run_single(g.m, &o, fb.data, (int)fb.shape[0], &enc, &logp, &t_out));
            CHECK(ref.count == (size_t)t_out * g.cfg.d_model);
            double e = rel_err(enc, ref.data, ref.count);
            if (report())
                fprintf(stderr, "    chunk16 left%-2d %-42s rel %.3g\n", lefts[li], UTTS[u], e);
            CHECKF(e <= REL_TOL, "%s %s rel %g", UTTS[u], file, e);
            hark_free(enc), hark_free(logp);
            npy_free(&ref);
        }
        npy_free(&fb);
    }
    golden_close(&g);
}

/* ---- golden: streaming, chunk by chunk with caches (README note 4) ----------------------------
 */

/* WeNet's forward_chunk_by_chunk: windows of (chunk-1)·rate + right_context + 1 fbank frames with
 * stride chunk·rate while cur < T - right_context; returns the concatenated output frames. */
static int stream_utterance(const conformer_model_t *m, conformer_stream_t *st, const float *fb,
                            int frames, int chunk, float *out, collector_t *cache_dump)
{
    const wenet_config_t *c = conformer_config(m);
    int rate = (int)c->subsample, rc = wenet_right_context(c);
    int window = (chunk - 1) * rate + rc + 1, stride = chunk * rate, total = 0;
    hark_err_t err = {0};
    conformer_state_t *s = NULL;
    if (conformer_state_create(m, 1, window, &s, &err))
        return -1;
    for (int cur = 0, k = 0; cur < frames - rc; cur += stride, k++) {
        int end = cur + window < frames ? cur + window : frames, n = 0;
        if (conformer_forward_chunk(s, st, NULL, out + (size_t)total * c->d_model, &n,
                                    fb + (size_t)cur * c->input_dim, end - cur, &err)) {
            fprintf(stderr, "    chunk %d: %s\n", k, err.msg);
            total = -1;
            break;
        }
        total += n;
        if (cache_dump &&
            k < 2) { /* WeNet layouts: att (L, H, t, 2dk) = [K|V], cnn (L, 1, D, K-1) */
            int lc = c->cnn_kernel - 1, d = c->d_model, h = c->n_heads, dk = d / h, ct = 0;
            for (int l = 0; l < c->n_blocks; l++) {
                const float *kk, *vv, *cnn;
                ct = conformer_stream_cache(st, l, &kk, &vv, &cnn);
                conformer_stage_t att = {"att", l, k, h * ct, 2 * dk, NULL};
                float *a = hark_malloc(sizeof(float) * (size_t)(h * ct * 2 * dk + 1));
                for (int hh = 0; hh < h; hh++)
                    for (int t2 = 0; t2 < ct; t2++)
                        for (int i = 0; i < dk; i++) {
                            a[((size_t)hh * ct + t2) * 2 * dk + i] =
                                kk[(size_t)t2 * d + hh * dk + i];
                            a[((size_t)hh * ct + t2) * 2 * dk + dk + i] =
                                vv[(size_t)t2 * d + hh * dk + i];
                        }
                att.data = a;
                collect(cache_dump, &att);
                hark_free(a);
                float *cv = hark_malloc(sizeof(float) * (size_t)d * lc);
                for (int ch = 0; ch < d; ch++)
                    for (int j = 0; j < lc; j++)
                        cv[(size_t)ch * lc + j] = cnn[(size_t)j * d + ch];
                conformer_stage_t cs = {"cnn", l, k, d, lc, cv};
                collect(cache_dump, &cs);
                hark_free(cv);
            }
        }
    }
    conformer_state_destroy(s);
    return total;
}

TEST(conformer_golden_streaming)
{
    NEED_SHARED(GSET);
    golden_model_t g;
    OPEN_GOLDEN(g);
    static const int lefts[2] = {-1, 4};
    int d = g.cfg.d_model;
    for (int u = 0; u < 5; u++) {
        npy_array_t fb;
        CHECK_OK(load_golden(&fb, UTTS[u], "fbank.npy"));
        int frames = (int)fb.shape[0];
        for (int li = 0; li < 2; li++) {
            char file[64];
            snprintf(file, sizeof file, "enc_chunk16_left%d_stream.npy", lefts[li]);
            npy_array_t ref;
            CHECK_OK(load_golden(&ref, UTTS[u], file));
            conformer_stream_t *st = NULL;
            hark_err_t err = {0};
            CHECK_OK(conformer_stream_create(g.m, lefts[li] < 0 ? -1 : 16 * lefts[li], &st, &err));
            float *out = hark_malloc(sizeof(float) * ((size_t)frames / 4 + 16) * d);
            int lj = !strcmp(UTTS[u], "LJ001-0002");
            collector_t caches = {.n = 0};
            int n = stream_utterance(g.m, st, fb.data, frames, 16, out, lj ? &caches : NULL);
            CHECKF((size_t)n * d == ref.count, "%s %s: %d frames vs %lld", UTTS[u], file, n,
                   (long long)ref.shape[0]);
            double e = test_rel_rms(out, ref.data, ref.count);
            if (report())
                fprintf(stderr, "    stream chunk16 left%-2d %-42s rel %.3g\n", lefts[li], UTTS[u],
                        e);
            CHECKF(e <= REL_TOL, "%s %s rel %g", UTTS[u], file, e);
            for (int k = 0; lj && k < 2; k++) {
                static const char *const kinds[2] = {"att", "cnn"};
                for (int kind = 0; kind < 2; kind++) {
                    char cf[96];
                    snprintf(cf, sizeof cf, "stream_chunk16_left%d_chunk%d_%s_cache_out.npy",
                             lefts[li], k, kinds[kind]);
                    npy_array_t cr;
                    CHECK_OK(load_golden(&cr, UTTS[u], cf));
                    size_t per = cr.count / (size_t)g.cfg.n_blocks, got = 0;
                    double worst = 0;
                    for (int l = 0; l < g.cfg.n_blocks; l++)
                        for (int i = 0; i < caches.n; i++) {
                            const stage_copy_t *sc = &caches.s[i];
                            if (sc->utt != k || sc->layer != l || strcmp(sc->name, kinds[kind]))
                                continue;
                            CHECKF((size_t)sc->rows * sc->cols == per, "%s layer %d size", cf, l);
                            double ce = test_rel_rms(sc->data, (float *)cr.data + l * per, per);
                            worst = ce > worst ? ce : worst;
                            got++;
                        }
                    if (report())
                        fprintf(stderr, "      %-52s rel %.3g\n", cf, worst);
                    CHECKF(got == (size_t)g.cfg.n_blocks && worst <= REL_TOL,
                           "%s: %zu layers, rel %g", cf, got, worst);
                    npy_free(&cr);
                }
            }
            /* a reset stream gives the same frames again */
            if (u == 4) {
                conformer_stream_reset(st);
                float *again = hark_malloc(sizeof(float) * ((size_t)frames / 4 + 16) * d);
                CHECK_EQ_INT(stream_utterance(g.m, st, fb.data, frames, 16, again, NULL), n);
                CHECK(test_max_abs_diff(again, out, (size_t)n * d) == 0.0);
                hark_free(again);
            }
            collector_free(&caches);
            hark_free(out);
            conformer_stream_destroy(st);
            npy_free(&ref);
        }
        npy_free(&fb);
    }
    golden_close(&g);
}

/* ---- synthetic configurations ---------------------------------------------------------------- */

/* generated weights: src/model/synth_weights.h */
typedef synth_weights_t bank_t;
#define bank_get synth_weights_get
#define bank_free synth_weights_free

static wenet_config_t synth_config(wenet_subsample_t sub, wenet_pos_t pos, int causal,
                                   wenet_cnn_norm_t norm, wenet_act_t act, int macaron,
                                   int normalize_before)
{
    wenet_config_t c;
    memset(&c, 0, sizeof c);
    c.num_mel_bins = c.input_dim = 23;
    c.has_cmvn = 1;
    c.d_model = 24;
    c.n_heads = 3;
    c.ffn_dim = 40;
    c.n_blocks = 2;
    c.subsample = sub;
    c.pos = pos;
    c.macaron = macaron;
    c.use_cnn_module = 1;
    c.cnn_kernel = 7;
    c.causal = causal;
    c.cnn_norm = norm;
    c.activation = act;
    c.normalize_before = normalize_before;
    c.max_len = 500;
    c.use_dynamic_chunk = 1;
    c.vocab_size = 13;
    return c;
}

/* Python's len(x[start::step]) for a length-n prefix, as WeNet slices the subsampled mask. */
static int slice_len(int n, int start, int step)
{
    return n > start ? (n - start + step - 1) / step : 0;
}

static int wenet_mask_len(wenet_subsample_t sub, int n)
{
    n = slice_len(n, 2, 2);
    if (sub == SUBSAMPLE_CONV2D6)
        return slice_len(n, 4, 3);
    n = slice_len(n, 2, 2);
    return sub == SUBSAMPLE_CONV2D8 ? slice_len(n, 2, 2) : n;
}

/* Batch of 4 with garbage in the padding vs each utterance alone. */
static int batch_vs_single(test_ctx_t *t, const wenet_config_t *cfg, const conformer_opts_t *o,
                           unsigned seed, double *worst)
{
    bank_t bank = {.seed = seed};
    conformer_model_t *m = NULL;
    hark_err_t err = {0};
    int ok = 0;
    float *feats = NULL, *enc = NULL, *logp = NULL;
    conformer_state_t *s = NULL;
    if (conformer_model_create(cfg, bank_get, &bank, &m, &err) != HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "model_create: %s", err.msg);
        goto done;
    }
    enum { B = 4, TMAX = 157 };
    int lens[B] = {113, TMAX, 31, 64}, enc_lens[B];
    int fd = cfg->input_dim, d = cfg->d_model, v = cfg->vocab_size;
    feats = hark_malloc(sizeof(float) * B * TMAX * fd);
    unsigned r = seed * 7 + 1;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < TMAX * fd; i++)
            feats[(size_t)b * TMAX * fd + i] =
                i < lens[b] * fd ? 2.0f * test_randf(&r) : 1e3f * (1.0f + test_randf(&r));
    int t_out = conformer_out_len(m, TMAX);
    enc = hark_malloc(sizeof(float) * B * t_out * d);
    logp = hark_malloc(sizeof(float) * B * t_out * v);
    if (conformer_state_create(m, B, TMAX, &s, &err) ||
        conformer_forward(s, o, enc, enc_lens, feats, lens, B, TMAX, &err) ||
        conformer_ctc_log_probs(m, o, logp, enc, enc_lens, B, t_out, &err)) {
        test_fail(t, __FILE__, __LINE__, "batched forward: %s", err.msg);
        goto done;
    }
    *worst = 0;
    for (int b = 0; b < B; b++) {
        float *e1 = NULL, *l1 = NULL;
        int t1 = 0;
        if (enc_lens[b] != wenet_mask_len(cfg->subsample, lens[b])) {
            test_fail(t, __FILE__, __LINE__, "utt %d: %d encoder frames, WeNet's mask gives %d", b,
                      enc_lens[b], wenet_mask_len(cfg->subsample, lens[b]));
            goto done;
        }
        if (run_single(m, o, feats + (size_t)b * TMAX * fd, lens[b], &e1, &l1, &t1) ||
            t1 != enc_lens[b] || t1 <= 0) {
            test_fail(t, __FILE__, __LINE__, "single run of utt %d (t1 %d)", b, t1);
            hark_free(e1), hark_free(l1);
            goto done;
        }
        double ee = test_rel_rms(enc + (size_t)b * t_out * d, e1, (size_t)t1 * d);
        double el = test_rel_rms(logp + (size_t)b * t_out * v, l1, (size_t)t1 * v);
        *worst = ee > *worst ? ee : *worst;
        *worst = el > *worst ? el : *worst;
        hark_free(e1), hark_free(l1);
    }
    ok = 1;
done:
    conformer_state_destroy(s);
    hark_free(feats), hark_free(enc), hark_free(logp);
    conformer_model_destroy(m);
    bank_free(&bank);
    return ok;
}

TEST(conformer_synthetic_batch_invariance)
{
    struct {
        const char *what;
        wenet_config_t cfg;
        int chunk, left;
    } cases[] = {
        {"conv2d6 abs_pos non-causal batch_norm relu",
         synth_config(SUBSAMPLE_CONV2D6, POS_ABS, 0, CNN_NORM_BATCH, ACT_RELU, 1, 1), -1, -1},
        {"conv2d8 rel_pos non-causal batch_norm gelu",
         synth_config(SUBSAMPLE_CONV2D8, POS_REL, 0, CNN_NORM_BATCH, ACT_GELU, 1, 1), -1, -1},
        {"conv2d rel_pos non-causal layer_norm swish, no macaron, post-norm",
         synth_config(SUBSAMPLE_CONV2D, POS_REL, 0, CNN_NORM_LAYER, ACT_SWISH, 0, 0), -1, -1},
        {"conv2d abs_pos causal batch_norm gelu, chunk 4 left 1",
         synth_config(SUBSAMPLE_CONV2D, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1), 4, 1},
        {"conv2d6 rel_pos non-causal layer_norm relu, chunk 5 all left",
         synth_config(SUBSAMPLE_CONV2D6, POS_REL, 0, CNN_NORM_LAYER, ACT_RELU, 1, 1), 5, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conformer_opts_t o = conformer_default_opts();
        o.chunk_size = cases[i].chunk;
        o.left_chunks = cases[i].left;
        double worst = -1;
        if (!batch_vs_single(t, &cases[i].cfg, &o, 100 + (unsigned)i, &worst))
            return;
        if (report())
            fprintf(stderr, "    %-66s batch vs single %.3g\n", cases[i].what, worst);
        CHECKF(worst <= BATCH_TOL, "%s: batch vs single rel %g", cases[i].what, worst);
    }
}

TEST(conformer_out_len_follows_wenet)
{
    static const wenet_subsample_t subs[3] = {SUBSAMPLE_CONV2D, SUBSAMPLE_CONV2D6,
                                              SUBSAMPLE_CONV2D8};
    for (int k = 0; k < 3; k++) {
        wenet_config_t c = synth_config(subs[k], POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1);
        c.n_blocks = 0;
        bank_t bank = {.seed = 1};
        conformer_model_t *m = NULL;
        hark_err_t err = {0};
        CHECK_OK(conformer_model_create(&c, bank_get, &bank, &m, &err));
        for (int n = 0; n <= 300; n++) {
            int want = wenet_mask_len(subs[k], n);
            CHECKF(conformer_out_len(m, n) == want, "sub %d n %d: %d vs %d", (int)subs[k], n,
                   conformer_out_len(m, n), want);
            CHECKF(wenet_subsampled_len(&c, n) == want, "wenet_subsampled_len sub %d n %d",
                   (int)subs[k], n);
        }
        conformer_model_destroy(m);
        bank_free(&bank);
    }
}

TEST(conformer_errors_and_oom)
{
    wenet_config_t c = synth_config(SUBSAMPLE_CONV2D8, POS_REL, 0, CNN_NORM_BATCH, ACT_GELU, 1, 1);
    bank_t bank = {.seed = 3, .missing = "encoder.encoders.1.conv_module.norm.running_var"};
    conformer_model_t *m = NULL;
    hark_err_t err = {0};
    CHECK(conformer_model_create(&c, bank_get, &bank, &m, &err) == HARK_ERR_NOT_FOUND);
    CHECK(m == NULL && strstr(err.msg, "encoders.1.conv_module.norm.running_var"));
    bank_free(&bank);
    wenet_config_t bad = c;
    bad.n_heads = 5;
    CHECK(conformer_model_create(&bad, bank_get, &bank, &m, &err) == HARK_ERR_INVALID_ARG);
    bad = c;
    bad.cnn_kernel = 6;
    CHECK(conformer_model_create(&bad, bank_get, &bank, &m, &err) == HARK_ERR_INVALID_ARG);
    bank.missing = NULL;
    /* every allocation of model and state creation may fail: no leak, no crash, NOMEM */
    for (long n = 1; n < 20; n++) {
        bank_free(&bank);
        alloc_fail_after(n);
        int rc = conformer_model_create(&c, bank_get, &bank, &m, &err);
        conformer_state_t *s = NULL;
        int rc2 = rc == HARK_OK ? conformer_state_create(m, 2, 50, &s, &err) : rc;
        alloc_fail_reset();
        CHECK(rc == HARK_OK || rc == HARK_ERR_NOMEM);
        CHECK(rc2 == HARK_OK || rc2 == HARK_ERR_NOMEM);
        conformer_state_destroy(s);
        conformer_model_destroy(m);
        m = NULL;
        if (rc2 == HARK_OK)
            break;
    }
    bank_free(&bank);
    /* stream creation and its first chunk (which sizes the caches) under failing allocations */
    wenet_config_t cc = synth_config(SUBSAMPLE_CONV2D, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1);
    CHECK_OK(conformer_model_create(&cc, bank_get, &bank, &m, &err));
    conformer_state_t *cs = NULL;
    CHECK_OK(conformer_state_create(m, 1, 31, &cs, &err));
    float chunk[31 * 23] = {0}, cout[8 * 24];
    for (long n = 1; n < 12; n++) {
        conformer_stream_t *st = NULL;
        int got = 0;
        alloc_fail_after(n);
        int rc = conformer_stream_create(m, 8, &st, &err);
        int rc2 =
            rc == HARK_OK ? conformer_forward_chunk(cs, st, NULL, cout, &got, chunk, 31, &err) : rc;
        alloc_fail_reset();
        CHECK(rc == HARK_OK || rc == HARK_ERR_NOMEM);
        CHECK(rc2 == HARK_OK || rc2 == HARK_ERR_NOMEM);
        CHECK(rc2 != HARK_OK || got == 7);
        conformer_stream_destroy(st);
        if (rc2 == HARK_OK)
            break;
    }
    conformer_state_destroy(cs);
    conformer_model_destroy(m);
    bank_free(&bank);
    /* a state too small for the request */
    CHECK_OK(conformer_model_create(&c, bank_get, &bank, &m, &err));
    conformer_state_t *s = NULL;
    CHECK_OK(conformer_state_create(m, 1, 40, &s, &err));
    float feats[41 * 23] = {0}, enc[64 * 24];
    int lens[1] = {41}, el[1];
    CHECK(conformer_forward(s, NULL, enc, el, feats, lens, 1, 41, &err) == HARK_ERR_TOO_LARGE);
    lens[0] = 10; /* too short for conv2d8: zero encoder frames, still fine */
    CHECK_OK(conformer_forward(s, NULL, enc, el, feats, lens, 1, 40, &err));
    CHECK_EQ_INT(el[0], 0);
    conformer_state_destroy(s);
    conformer_model_destroy(m);
    bank_free(&bank);
}

/* ---- WeNet's own ConformerEncoder on the configurations the golden set lacks ---------------- */

/* Runs only with HARK_WENET_SRC=<a WeNet source tree> (e.g. github:wenet-e2e/wenet fetched outside
 * the repository): builds five random WeNet encoders (conv2d6/abs_pos/batch_norm/relu/non-causal,
 * conv2d8/rel_pos/batch_norm/gelu/non-causal, post-norm without macaron, causal abs_pos,
 * no conv module), converts them with tools/convert_wenet.py and compares hark (single, chunk
 * mask, padded batch) with WeNet's single-utterance outputs. The script imports the wenet
 * package without its __init__ and stubs the unused whisper/librosa/langid imports. */
static const char WENET_REF_PY[] =
    "# usage: wenet_ref.py WENET_SRC GOLDEN_DIR OUT_DIR  (written by "
    "tests/model/wenet/test_conformer.c)\n"
    "import sys, types, os, shutil\n"
    "W, G, out_root = sys.argv[1], sys.argv[2], sys.argv[3]\n"
    "sys.path.insert(0, W)\n"
    "pkg = types.ModuleType('wenet'); pkg.__path__ = [W + '/wenet']; sys.modules['wenet'] = pkg\n"
    "for name in ['librosa', 'langid']:\n"
    "    sys.modules[name] = types.ModuleType(name)\n"
    "w = types.ModuleType('whisper'); wt = types.ModuleType('whisper.tokenizer'); wt.LANGUAGES = "
    "{}; w.tokenizer = wt\n"
    "sys.modules['whisper'] = w; sys.modules['whisper.tokenizer'] = wt\n"
    "import numpy as np, torch, yaml\n"
    "from wenet.models.transformer.encoder import ConformerEncoder\n"
    "from wenet.models.transformer.cmvn import GlobalCMVN\n"
    "from wenet.utils.cmvn import load_cmvn\n"
    "torch.set_num_threads(1)\n"
    "UTTS = ['sense_and_sensibility_01_austen_64kb-0880', 'LJ001-0002', 'cards-001']\n"
    "V = 37\n"
    "CASES = {\n"
    " 'A_conv2d6_abs_bn_relu_noncausal': dict(input_layer='conv2d6', pos_enc_layer_type='abs_pos', "
    "selfattention_layer_type='selfattn', causal=False, cnn_module_norm='batch_norm', "
    "activation_type='relu', cnn_module_kernel=15),\n"
    " 'B_conv2d8_rel_bn_gelu_noncausal': dict(input_layer='conv2d8', pos_enc_layer_type='rel_pos', "
    "selfattention_layer_type='rel_selfattn', causal=False, cnn_module_norm='batch_norm', "
    "activation_type='gelu', cnn_module_kernel=31),\n"
    " 'C_conv2d_rel_ln_swish_nomacaron_postnorm': dict(input_layer='conv2d', "
    "pos_enc_layer_type='rel_pos', selfattention_layer_type='rel_selfattn', causal=False, "
    "cnn_module_norm='layer_norm', activation_type='swish', cnn_module_kernel=7, "
    "macaron_style=False, normalize_before=False),\n"
    " 'D_conv2d_abs_bn_swish_causal': dict(input_layer='conv2d', pos_enc_layer_type='abs_pos', "
    "selfattention_layer_type='selfattn', causal=True, cnn_module_norm='batch_norm', "
    "activation_type='swish', cnn_module_kernel=15),\n"
    " 'E_conv2d6_rel_nocnn_relu': dict(input_layer='conv2d6', pos_enc_layer_type='rel_pos', "
    "selfattention_layer_type='rel_selfattn', use_cnn_module=False, activation_type='relu'),\n"
    "}\n"
    "mean, istd = load_cmvn(G + '/global_cmvn', True)\n"
    "for ci, (name, extra) in enumerate(CASES.items()):\n"
    "    conf = dict(output_size=144, attention_heads=4, linear_units=288, num_blocks=2, "
    "dropout_rate=0.0,\n"
    "                positional_dropout_rate=0.0, attention_dropout_rate=0.0, "
    "normalize_before=True,\n"
    "                macaron_style=True, use_cnn_module=True, use_dynamic_chunk=True)\n"
    "    conf.update(extra)\n"
    "    g = torch.Generator().manual_seed(1000 + ci)\n"
    "    cmvn = GlobalCMVN(torch.from_numpy(mean).float(), torch.from_numpy(istd).float())\n"
    "    enc = ConformerEncoder(80, global_cmvn=cmvn, **conf)\n"
    "    ctc = torch.nn.Linear(144, V)\n"
    "    with torch.no_grad():\n"
    "        for k, p in list(enc.named_parameters()) + [('ctc.' + k, p) for k, p in "
    "ctc.named_parameters()]:\n"
    "            if 'norm' in k and k.endswith('weight') and p.dim() == 1:\n"
    "                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))\n"
    "            elif p.dim() == 1 or 'pos_bias' in k:\n"
    "                p.copy_(0.05 * torch.randn(p.shape, generator=g))\n"
    "            else:\n"
    "                fan_in = p[0].numel()\n"
    "                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)\n"
    "        for k, b in enc.named_buffers():\n"
    "            if k.endswith('running_mean'):\n"
    "                b.copy_(0.2 * torch.randn(b.shape, generator=g))\n"
    "            elif k.endswith('running_var'):\n"
    "                b.copy_(0.5 + torch.rand(b.shape, generator=g))\n"
    "    enc.eval()\n"
    "    d = os.path.join(out_root, name); os.makedirs(d, exist_ok=True)\n"
    "    sd = {'encoder.' + k: v for k, v in enc.state_dict().items()}\n"
    "    sd.update({'ctc.ctc_lo.' + k: v for k, v in ctc.state_dict().items()})\n"
    "    torch.save(sd, os.path.join(d, 'final.pt'))\n"
    "    y = {'encoder': 'conformer', 'encoder_conf': conf, 'decoder': None, 'input_dim': 80,\n"
    "         'output_dim': V, 'vocab_size': V, 'model': 'asr_model', 'cmvn': 'global_cmvn',\n"
    "         'cmvn_conf': {'cmvn_file': 'global_cmvn', 'is_json_cmvn': True},\n"
    "         'model_conf': {'ctc_weight': 1.0, 'reverse_weight': 0.0},\n"
    "         'dataset_conf': {'fbank_conf': {'num_mel_bins': 80, 'frame_length': 25, "
    "'frame_shift': 10}},\n"
    "         'tokenizer_conf': {'special_tokens': {'<blank>': 0, '<unk>': 1, '<sos>': V - 1, "
    "'<eos>': V - 1}}}\n"
    "    yaml.safe_dump(y, open(os.path.join(d, 'train.yaml'), 'w'))\n"
    "    with open(os.path.join(d, 'units.txt'), 'w') as f:\n"
    "        f.write('<blank> 0\\n<unk> 1\\n' + ''.join(f'tok{i} {i}\\n' for i in range(2, V - 1)) "
    "+ f'<sos/eos> {V-1}\\n')\n"
    "    shutil.copy(G + '/global_cmvn', os.path.join(d, 'global_cmvn'))\n"
    "    with torch.no_grad():\n"
    "        for i, u in enumerate(UTTS):\n"
    "            fb = torch.from_numpy(np.load(f'{G}/goldens/{u}/fbank.npy')).unsqueeze(0)\n"
    "            lens = torch.tensor([fb.shape[1]])\n"
    "            for mode, (cs, left) in {'full': (-1, -1), 'chunk4_left2': (4, 2)}.items():\n"
    "                xs, _ = enc(fb, lens, cs, left)\n"
    "                np.save(os.path.join(d, f'enc_{mode}_{i}.npy'), xs[0].numpy())\n"
    "                if mode == 'full':\n"
    "                    np.save(os.path.join(d, f'ctc_{mode}_{i}.npy'), "
    "torch.log_softmax(ctc(xs), -1)[0].numpy())\n"
    "            np.save(os.path.join(d, f'fbank_{i}.npy'), fb[0].numpy())\n"
    "    print('CASE', name)\n";

static int load_case(npy_array_t *a, const char *dir, const char *fmt, int i)
{
    char name[64], path[1200];
    snprintf(name, sizeof name, fmt, i);
    snprintf(path, sizeof path, "%.1000s/%s", dir, name);
    return npy_load_f32(path, a);
}

TEST(conformer_matches_wenet_encoder_other_configs)
{
    const char *wsrc = getenv("HARK_WENET_SRC");
    if (!wsrc || !*wsrc)
        SKIP("set HARK_WENET_SRC to a WeNet source tree to compare other configurations");
    NEED_SHARED(GSET);
    if (system("/usr/bin/python3 -c 'import torch, yaml, numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with torch, yaml and numpy is missing");
    const char *tmp = test_tmpdir(t);
    char path[1024], cmd[4096];
    snprintf(path, sizeof path, "%s/wenet_ref.py", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs(WENET_REF_PY, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s '%s' '%s' %s/cases > %s/cases.txt 2>%s/gen.log",
             path, wsrc, test_shared(GSET), tmp, tmp, tmp);
    CHECKF(system(cmd) == 0, "wenet_ref.py failed (see %s/gen.log with HARK_KEEP_TMP=1)", tmp);
    snprintf(path, sizeof path, "%s/cases.txt", tmp);
    f = fopen(path, "r");
    CHECK(f);
    char name[128];
    int n_cases = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "CASE %127s", name) != 1)
            continue; /* WeNet's import chatter */
        char dir[512];
        snprintf(dir, sizeof dir, "%.300s/cases/%.127s", tmp, name);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/convert_wenet.py --checkpoint %s/final.pt --config "
                 "%s/train.yaml --units %s/units.txt --cmvn %s/global_cmvn --output %s/m "
                 ">/dev/null 2>&1",
                 dir, dir, dir, dir, dir);
        CHECKF(system(cmd) == 0, "%s: convert_wenet.py failed", name);
        wenet_config_t cfg;
        safetensors_t *st = NULL;
        conformer_model_t *m = NULL;
        hark_err_t err = {0};
        snprintf(path, sizeof path, "%.512s/m/1/model.json", dir);
        CHECKF(wenet_config_load(path, &cfg, &err) == HARK_OK, "%s: %s", name, err.msg);
        snprintf(path, sizeof path, "%.512s/m/1/model.safetensors", dir);
        CHECKF(st_open(path, &st, &err) == HARK_OK, "%s: %s", name, err.msg);
        CHECKF(conformer_model_create_st(&cfg, st, &m, &err) == HARK_OK, "%s: %s", name, err.msg);
        enum { NU = 3 };
        npy_array_t fb[NU];
        int lens[NU], t_max = 0, d = cfg.d_model, el[NU];
        for (int i = 0; i < NU; i++) {
            CHECK_OK(load_case(&fb[i], dir, "fbank_%d.npy", i));
            lens[i] = (int)fb[i].shape[0];
            t_max = lens[i] > t_max ? lens[i] : t_max;
        }
        double worst = 0;
        for (int i = 0; i < NU; i++) {
            for (int mode = 0; mode < 2; mode++) {
                conformer_opts_t o = conformer_default_opts();
                if (mode)
                    o.chunk_size = 4, o.left_chunks = 2;
                float *enc, *logp;
                int t1;
                CHECK_OK(run_single(m, &o, fb[i].data, lens[i], &enc, &logp, &t1));
                npy_array_t r, rc;
                CHECK_OK(
                    load_case(&r, dir, mode ? "enc_chunk4_left2_%d.npy" : "enc_full_%d.npy", i));
                CHECKF(r.count == (size_t)t1 * d, "%s utt %d: %d frames vs WeNet's %lld", name, i,
                       t1, (long long)r.shape[0]);
                double e = test_rel_rms(enc, r.data, r.count);
                worst = e > worst ? e : worst;
                if (!mode) {
                    CHECK_OK(load_case(&rc, dir, "ctc_full_%d.npy", i));
                    e = test_rel_rms(logp, rc.data, rc.count);
                    worst = e > worst ? e : worst;
                    npy_free(&rc);
                }
                npy_free(&r);
                hark_free(enc), hark_free(logp);
            }
        }
        /* the padded batch against WeNet's single-utterance output (non-causal included) */
        conformer_state_t *s = NULL;
        CHECK_OK(conformer_state_create(m, NU, t_max, &s, &err));
        int t_out = conformer_out_len(m, t_max);
        float *feats = hark_calloc((size_t)NU * t_max * 80, sizeof(float));
        float *enc = hark_malloc((size_t)NU * t_out * d * sizeof(float));
        for (int i = 0; i < NU; i++)
            memcpy(feats + (size_t)i * t_max * 80, fb[i].data,
                   (size_t)lens[i] * 80 * sizeof(float));
        CHECK_OK(conformer_forward(s, NULL, enc, el, feats, lens, NU, t_max, &err));
        for (int i = 0; i < NU; i++) {
            npy_array_t r;
            CHECK_OK(load_case(&r, dir, "enc_full_%d.npy", i));
            double e = test_rel_rms(enc + (size_t)i * t_out * d, r.data, r.count);
            worst = e > worst ? e : worst;
            npy_free(&r);
            npy_free(&fb[i]);
        }
        if (report())
            fprintf(stderr, "    %-44s worst rel %.3g (full, chunk4/left2, ctc, padded batch)\n",
                    name, worst);
        CHECKF(worst <= REL_TOL, "%s: rel %g", name, worst);
        hark_free(feats), hark_free(enc);
        conformer_state_destroy(s);
        conformer_model_destroy(m);
        st_close(st);
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases == 5);
}

/* Streaming equals the chunk mask for causal models (WeNet's "streaming equals masked"), here on
 * configurations the golden set lacks: conv2d8 / conv2d6, abs_pos, batch_norm. */
TEST(conformer_synthetic_streaming_equals_chunk_mask)
{
    struct {
        wenet_config_t cfg;
        int chunk, left;
    } cases[] = {
        {synth_config(SUBSAMPLE_CONV2D8, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1), 3, 2},
        {synth_config(SUBSAMPLE_CONV2D6, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1), 4, -1},
        {synth_config(SUBSAMPLE_CONV2D, POS_REL, 1, CNN_NORM_BATCH, ACT_RELU, 0, 0), 5, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const wenet_config_t *c = &cases[ci].cfg;
        bank_t bank = {.seed = 500 + (unsigned)ci};
        conformer_model_t *m = NULL;
        hark_err_t err = {0};
        CHECK_OK(conformer_model_create(c, bank_get, &bank, &m, &err));
        int frames = 211, d = c->d_model;
        unsigned r = 9;
        float *fb = hark_malloc(sizeof(float) * frames * c->input_dim);
        for (int i = 0; i < frames * c->input_dim; i++)
            fb[i] = 2.0f * test_randf(&r);
        conformer_opts_t o = conformer_default_opts();
        o.chunk_size = cases[ci].chunk;
        o.left_chunks = cases[ci].left;
        float *full, *logp;
        int n_full;
        CHECK_OK(run_single(m, &o, fb, frames, &full, &logp, &n_full));
        conformer_stream_t *st = NULL;
        int cache = cases[ci].left < 0 ? -1 : cases[ci].chunk * cases[ci].left;
        CHECK_OK(conformer_stream_create(m, cache, &st, &err));
        float *out = hark_malloc(sizeof(float) * ((size_t)n_full + 8) * d);
        int n = stream_utterance(m, st, fb, frames, cases[ci].chunk, out, NULL);
        CHECKF(n == n_full, "case %zu: %d streamed frames vs %d", ci, n, n_full);
        double e = test_rel_rms(out, full, (size_t)n * d);
        if (report())
            fprintf(stderr, "    case %zu (sub %d, chunk %d, left %d): stream vs chunk mask %.3g\n",
                    ci, (int)c->subsample, cases[ci].chunk, cases[ci].left, e);
        CHECKF(e <= BATCH_TOL, "case %zu: stream vs chunk mask rel %g", ci, e);
        hark_free(out), hark_free(full), hark_free(logp), hark_free(fb);
        conformer_stream_destroy(st);
        conformer_model_destroy(m);
        bank_free(&bank);
    }
}

/* conformer_forward_chunks: three streams of one synthetic model, each with its own chunk size and
 * left context and started at a different chunk, stepped together whenever they have a chunk (one
 * batched forward of chunks at different offsets and cache sizes, short last chunks included):
 * every stream's output equals conformer_forward_chunk alone, on configurations the golden set
 * lacks (conv2d8 / conv2d6, abs_pos, batch_norm, a symmetric non-causal conv, post-norm). */
TEST(conformer_synthetic_batched_chunks_equal_alone)
{
    wenet_config_t cfgs[] = {
        synth_config(SUBSAMPLE_CONV2D8, POS_ABS, 1, CNN_NORM_BATCH, ACT_GELU, 1, 1),
        synth_config(SUBSAMPLE_CONV2D6, POS_REL, 1, CNN_NORM_LAYER, ACT_SWISH, 1, 1),
        synth_config(SUBSAMPLE_CONV2D, POS_REL, 0, CNN_NORM_BATCH, ACT_RELU, 0, 0),
    };
    enum { NS = 3 };
    static const int chunk[NS] = {4, 3, 5}, left[NS] = {-1, 2, 0}, start[NS] = {0, 2, 1};
    static const int frames[NS] = {211, 173, 97};
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        const wenet_config_t *c = &cfgs[ci];
        bank_t bank = {.seed = 900 + (unsigned)ci};
        conformer_model_t *m = NULL;
        hark_err_t err = {0};
        CHECK_OK(conformer_model_create(c, bank_get, &bank, &m, &err));
        int rate = (int)c->subsample, rc = wenet_right_context(c), d = c->d_model;
        float *fb[NS], *alone[NS], *batched[NS];
        int n_alone[NS], n_b[NS] = {0}, cur[NS] = {0};
        conformer_stream_t *sb[NS];
        unsigned r = 17;
        int max_window = 0;
        for (int s = 0; s < NS; s++) {
            int w = (chunk[s] - 1) * rate + rc + 1;
            max_window = w > max_window ? w : max_window;
            fb[s] = hark_malloc(sizeof(float) * frames[s] * c->input_dim);
            for (int i = 0; i < frames[s] * c->input_dim; i++)
                fb[s][i] = 2.0f * test_randf(&r);
            alone[s] = hark_malloc(sizeof(float) * ((size_t)frames[s] / rate + 8) * d);
            batched[s] = hark_malloc(sizeof(float) * ((size_t)frames[s] / rate + 8) * d);
            conformer_stream_t *st = NULL;
            int cache = left[s] < 0 ? -1 : chunk[s] * left[s];
            CHECK_OK(conformer_stream_create(m, cache, &st, &err));
            n_alone[s] = stream_utterance(m, st, fb[s], frames[s], chunk[s], alone[s], NULL);
            CHECK(n_alone[s] > 0);
            conformer_stream_destroy(st);
            CHECK_OK(conformer_stream_create(m, -1, &sb[s], &err));
            CHECK_OK(conformer_stream_reserve(sb[s], n_alone[s] + 1, &err));
            conformer_stream_set_cache(sb[s], cache);
        }
        conformer_state_t *state = NULL;
        CHECK_OK(conformer_state_create(m, NS, max_window, &state, &err));
        float *enc = hark_malloc(sizeof(float) * (size_t)NS * max_window * d);
        int mixed = 0;
        for (int step = 0;; step++) {
            conformer_stream_t *sts[NS];
            const float *f[NS];
            int fr[NS], who[NS], n = 0, n_out[NS];
            for (int s = 0; s < NS; s++) {
                if (step < start[s] || cur[s] >= frames[s] - rc)
                    continue;
                int w = (chunk[s] - 1) * rate + rc + 1;
                fr[n] = cur[s] + w < frames[s] ? w : frames[s] - cur[s];
                f[n] = fb[s] + (size_t)cur[s] * c->input_dim;
                sts[n] = sb[s];
                who[n++] = s;
                cur[s] += chunk[s] * rate;
            }
            if (!n)
                break;
            mixed += n > 1;
            CHECKF(conformer_forward_chunks(state, sts, NULL, enc, n_out, f, fr, n, &err) ==
                       HARK_OK,
                   "%s", err.msg);
            const float *e = enc;
            for (int j = 0; j < n; j++) {
                int s = who[j];
                memcpy(batched[s] + (size_t)n_b[s] * d, e, sizeof(float) * (size_t)n_out[j] * d);
                n_b[s] += n_out[j];
                e += (size_t)n_out[j] * d;
            }
        }
        CHECK(mixed > 3);
        for (int s = 0; s < NS; s++) {
            CHECK_EQ_INT(n_b[s], n_alone[s]);
            CHECK_EQ_INT(conformer_stream_offset(sb[s]), n_alone[s]);
            double e = test_rel_rms(batched[s], alone[s], (size_t)n_b[s] * d);
            if (report())
                fprintf(stderr, "    case %zu stream %d: batched vs alone %.3g\n", ci, s, e);
            CHECKF(e <= BATCH_TOL, "case %zu stream %d: batched vs alone rel %g", ci, s, e);
            hark_free(fb[s]), hark_free(alone[s]), hark_free(batched[s]);
            conformer_stream_destroy(sb[s]);
        }
        /* a stream reserved for fewer frames refuses to grow */
        conformer_stream_t *small = NULL;
        CHECK_OK(conformer_stream_create(m, -1, &small, &err));
        CHECK_OK(conformer_stream_reserve(small, 1, &err));
        float feats[64 * 80] = {0};
        const float *fp = feats;
        int fr = (2 - 1) * rate + rc + 1, n_out = 0;
        CHECK(fr * c->input_dim <= 64 * 80);
        conformer_stream_t *one = small;
        CHECK_EQ_INT(conformer_forward_chunks(state, &one, NULL, enc, &n_out, &fp, &fr, 1, &err),
                     HARK_ERR_TOO_LARGE);
        CHECK(strstr(err.msg, "reserved") != NULL);
        conformer_stream_destroy(small);
        hark_free(enc);
        conformer_state_destroy(state);
        conformer_model_destroy(m);
        bank_free(&bank);
    }
}
