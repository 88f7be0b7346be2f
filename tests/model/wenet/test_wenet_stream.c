/* Tests for src/model/wenet/wenet_stream.c, chunk-by-chunk streaming, against WeNet's goldens
 * (../shared/data/golden/wenet_u2pp_conformer_small, README note 4): incremental features equal
 * the offline ones; per-chunk encoder output and caches; the streaming results of every decoding
 * method (chunk 16, left -1 and 4); a stream alone = the same stream batched with others at other
 * offsets and chunk settings; the chunk-mask offline path = the goldens' masked results = the
 * stream's; bad input. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "core/npy.h"
#include "dsp/features.h"
#include "hark.h"
#include "model/family.h"
#include "model/wenet/wenet_asr.h"
#include "model/wenet/wenet_stream.h"
#include "support/golden_model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4 /* ‖a − ref‖ / ‖ref‖ against WeNet, as tests/model/wenet/test_conformer.c */

static const char *utts[] = {"librispeech-1995-1837-0001", "jfk",
                             "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                             "cards-001"};
enum { NU = 5 };
static const int lefts[2] = {-1, 4};

typedef struct {
    wenet_asr_t *asr;
    cJSON *results;
    audio_t audio[NU];
} fixture_t;

static int fixture_open(fixture_t *fx, char *why, size_t nwhy)
{
    memset(fx, 0, sizeof *fx);
    const char *dir = golden_wenet_model_dir(why, nwhy);
    if (!dir)
        return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/m", dir);
    hark_err_t err = {0};
    if (wenet_asr_load(path, &fx->asr, &err)) {
        snprintf(why, nwhy, "load failed: %.400s", err.msg);
        return -1;
    }
    fx->results = golden_wenet_results();
    for (int u = 0; u < NU; u++) {
        snprintf(path, sizeof path, "%s/wavs/%s.wav", test_shared(GOLDEN_WENET), utts[u]);
        audio_opts_t ao = {.target_rate = 16000};
        if (audio_decode_file(path, &ao, &fx->audio[u], &err)) {
            snprintf(why, nwhy, "%.200s: %.250s", path, err.msg);
            return -1;
        }
    }
    if (!fx->results) {
        snprintf(why, nwhy, "results.json missing or unreadable");
        return -1;
    }
    return 0;
}

static void fixture_close(fixture_t *fx)
{
    for (int u = 0; u < NU; u++)
        audio_free(&fx->audio[u]);
    cJSON_Delete(fx->results);
    wenet_asr_destroy(fx->asr);
}

#define OPEN_FIXTURE(fx)                                                                           \
    char why_[512];                                                                                \
    int st_ = fixture_open(&fx, why_, sizeof why_);                                                \
    if (st_ == 1)                                                                                  \
        SKIP(why_);                                                                                \
    CHECKF(st_ == 0, "%s", why_)

static cJSON *golden(fixture_t *fx, int u, const char *mode, const char *method, const char *key)
{
    cJSON *m = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(fx->results, utts[u]), mode), method);
    return cJSON_GetObjectItem(m, key);
}

static int same_tokens(const cJSON *arr, const int *tok, int n)
{
    if (!arr || cJSON_GetArraySize(arr) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (cJSON_GetArrayItem(arr, i)->valueint != tok[i])
            return 0;
    return 1;
}

static int same_hyp(const wenet_hyp_t *a, const wenet_hyp_t *b)
{
    return a->n_tokens == b->n_tokens &&
           !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n_tokens) &&
           !memcmp(a->times, b->times, sizeof(int) * (size_t)a->n_tokens) &&
           !strcmp(a->text, b->text);
}

static wenet_decode_opts_t stream_opts(const wenet_asr_t *asr, int method, int chunk, int left)
{
    wenet_decode_opts_t o = wenet_default_opts(asr);
    o.method = (wenet_method_t)method;
    o.beam_size = 10;
    o.nbest = method == DECODE_CTC_GREEDY ? 1 : 10;
    o.chunk_size = chunk;
    o.left_chunks = left;
    return o;
}

/* Feeds pcm in pieces of varying sizes, stepping the stream alone whenever a chunk is ready; then
 * ends the input and steps the rest. on_chunk (may be NULL) sees the stream after each chunk. */
typedef void (*chunk_fn)(void *user, const wenet_stream_t *s);
static int feed_alone(wenet_stream_pool_t *p, wenet_stream_t *s, const float *pcm, size_t n,
                      chunk_fn on_chunk, void *user, hark_err_t *err)
{
    static const size_t pieces[] = {137, 2000, 4001, 555, 1, 9000};
    size_t at = 0;
    int rc = HARK_OK;
    for (int k = 0; at < n && !rc; k++) {
        size_t m = pieces[k % 6] < n - at ? pieces[k % 6] : n - at;
        rc = wenet_stream_accept(s, pcm + at, m, err);
        at += m;
        while (!rc && wenet_stream_ready(s)) {
            rc = wenet_stream_step(p, &s, 1, err);
            if (!rc && on_chunk)
                on_chunk(user, s);
        }
    }
    if (!rc)
        rc = wenet_stream_input_done(s, err);
    while (!rc && wenet_stream_ready(s)) {
        rc = wenet_stream_step(p, &s, 1, err);
        if (!rc && on_chunk)
            on_chunk(user, s);
    }
    return rc;
}

/* ---- features, encoder output and caches against WeNet's forward_chunk_by_chunk ------------- */

typedef struct {
    int left;
    test_ctx_t *t;
    double worst;
    int checked, failed;
    const wenet_config_t *cfg;
} cache_check_t;

/* After chunks 0 and 1 of LJ001-0002: the caches vs stream_chunk16_left*_chunk{0,1}_*.npy, in
 * WeNet's layouts: att (L, H, t, 2dk) = [K|V], cnn (L, 1, D, K-1). */
static void check_caches(void *user, const wenet_stream_t *s)
{
    cache_check_t *c = user;
    int k = wenet_stream_chunks(s) - 1;
    if (k > 1 || c->failed)
        return;
    const wenet_config_t *cfg = c->cfg;
    int d = cfg->d_model, h = cfg->n_heads, dk = d / h, lc = cfg->cnn_kernel - 1;
    for (int kind = 0; kind < 2; kind++) {
        char file[96];
        snprintf(file, sizeof file, "stream_chunk16_left%d_chunk%d_%s_cache_out.npy", c->left, k,
                 kind ? "cnn" : "att");
        npy_array_t ref;
        if (golden_wenet_npy(&ref, "LJ001-0002", file)) {
            fprintf(stderr, "    cannot read %s\n", file);
            c->failed = 1;
            return;
        }
        size_t per = ref.count / (size_t)cfg->n_blocks;
        float *got = hark_malloc(sizeof(float) * (per ? per : 1));
        for (int l = 0; l < cfg->n_blocks; l++) {
            const float *kk, *vv, *cnn;
            int ct = conformer_stream_cache(wenet_stream_encoder(s), l, &kk, &vv, &cnn);
            size_t want = kind ? (size_t)d * lc : (size_t)h * ct * 2 * dk;
            if (want != per) {
                fprintf(stderr, "    %s layer %d: %zu values vs %zu\n", file, l, want, per);
                c->failed = 1;
                break;
            }
            if (kind)
                for (int ch = 0; ch < d; ch++)
                    for (int j = 0; j < lc; j++)
                        got[(size_t)ch * lc + j] = cnn[(size_t)j * d + ch];
            else
                for (int hh = 0; hh < h; hh++)
                    for (int t2 = 0; t2 < ct; t2++)
                        for (int i = 0; i < dk; i++) {
                            got[((size_t)hh * ct + t2) * 2 * dk + i] =
                                kk[(size_t)t2 * d + hh * dk + i];
                            got[((size_t)hh * ct + t2) * 2 * dk + dk + i] =
                                vv[(size_t)t2 * d + hh * dk + i];
                        }
            double e = test_rel_rms(got, (const float *)ref.data + l * per, per);
            c->worst = e > c->worst ? e : c->worst;
            c->checked++;
        }
        hark_free(got);
        npy_free(&ref);
    }
}

TEST(wenet_stream_golden_encoder_and_caches)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    wenet_stream_pool_t *p;
    CHECKF(wenet_stream_pool_create(fx.asr, 1, 12.0, 16, &p, &err) == HARK_OK, "%s", err.msg);
    const wenet_config_t *cfg = wenet_asr_config(fx.asr);
    const feat_plan_t *fb = wenet_asr_fbank(fx.asr);
    double worst_enc = 0, worst_cache = 0;
    for (int u = 0; u < NU; u++) {
        const audio_t *a = &fx.audio[u];
        for (int li = 0; li < 2; li++) {
            wenet_decode_opts_t o = stream_opts(fx.asr, DECODE_CTC_PREFIX_BEAM, 16, lefts[li]);
            wenet_stream_t *s;
            CHECKF(wenet_stream_open(p, &o, &s, &err) == HARK_OK, "%s", err.msg);
            int lj = !strcmp(utts[u], "LJ001-0002");
            cache_check_t cc = {.left = lefts[li], .t = t, .cfg = cfg};
            CHECKF(feed_alone(p, s, a->samples, a->n, lj ? check_caches : NULL, &cc, &err) ==
                       HARK_OK,
                   "%s: %s", utts[u], err.msg);
            CHECK(wenet_stream_finished(s));
            /* the incremental features are the offline ones, bit for bit */
            int T = 0;
            const float *feats = wenet_stream_features(s, &T);
            int Toff = feat_num_frames(fb, a->n);
            CHECK_EQ_INT(T, Toff);
            float *off = hark_malloc(sizeof(float) * (size_t)Toff * cfg->input_dim);
            CHECK_OK(feat_compute(fb, a->samples, a->n, off, &err));
            CHECKF(memcmp(off, feats, sizeof(float) * (size_t)T * cfg->input_dim) == 0,
                   "%s: streamed fbank differs from the offline fbank", utts[u]);
            hark_free(off);
            /* the encoder output of every chunk, concatenated */
            char file[64];
            snprintf(file, sizeof file, "enc_chunk16_left%d_stream.npy", lefts[li]);
            npy_array_t ref;
            CHECK_OK(golden_wenet_npy(&ref, utts[u], file));
            int rows = 0;
            const float *enc = wenet_stream_encoder_out(s, &rows);
            CHECKF((size_t)rows * cfg->d_model == ref.count, "%s %s: %d frames vs %lld", utts[u],
                   file, rows, (long long)ref.shape[0]);
            double e = test_rel_rms(enc, ref.data, ref.count);
            worst_enc = e > worst_enc ? e : worst_enc;
            CHECKF(e <= REL_TOL, "%s %s: rel %g", utts[u], file, e);
            npy_free(&ref);
            if (lj) {
                CHECKF(!cc.failed && cc.checked == 2 * 2 * cfg->n_blocks,
                       "LJ001-0002 caches: %d checked", cc.checked);
                CHECKF(cc.worst <= REL_TOL, "LJ001-0002 left %d caches: rel %g", lefts[li],
                       cc.worst);
                worst_cache = cc.worst > worst_cache ? cc.worst : worst_cache;
            }
            wenet_stream_close(s);
        }
    }
    printf("    encoder output rel %.3g, caches rel %.3g (tolerance %g)\n", worst_enc, worst_cache,
           REL_TOL);
    CHECK_EQ_INT(wenet_stream_pool_free_slots(p), 1);
    wenet_stream_pool_destroy(p);
    fixture_close(&fx);
}

/* ---- streaming results of every decoding method ---------------------------------------------- */

/* r vs results.json[utt][mode][method]; worst n-best / rescoring score differences updated. */
static void check_result(test_ctx_t *t, fixture_t *fx, int u, const char *mode, int m,
                         const wenet_result_t *r, double *worst_nb, double *worst_resc)
{
    const char *mname = wenet_method_name((wenet_method_t)m);
    CHECKF(same_tokens(golden(fx, u, mode, mname, "tokens"), r->best.tokens, r->best.n_tokens),
           "%s %s %s: tokens differ from WeNet's", utts[u], mode, mname);
    cJSON *gt = golden(fx, u, mode, mname, "text");
    if (gt) /* the prefix beam's entry has no text of its own: its n-best text */
        CHECKF(!strcmp(gt->valuestring, r->best.text), "%s %s %s: '%s' vs WeNet '%s'", utts[u],
               mode, mname, r->best.text, gt->valuestring);
    if (m == DECODE_CTC_PREFIX_BEAM) {
        cJSON *nb = golden(fx, u, mode, mname, "nbest");
        cJSON *sc = golden(fx, u, mode, mname, "nbest_scores");
        cJSON *tx = golden(fx, u, mode, mname, "nbest_text");
        CHECK_EQ_INT(r->n_nbest, cJSON_GetArraySize(nb));
        for (int i = 0; i < r->n_nbest; i++) {
            CHECKF(same_tokens(cJSON_GetArrayItem(nb, i), r->nbest[i].tokens, r->nbest[i].n_tokens),
                   "%s %s: n-best %d differs", utts[u], mode, i);
            if (tx)
                CHECKF(!strcmp(cJSON_GetArrayItem(tx, i)->valuestring, r->nbest[i].text),
                       "%s %s: n-best %d text", utts[u], mode, i);
            double d = fabs(r->nbest[i].score - cJSON_GetArrayItem(sc, i)->valuedouble);
            *worst_nb = d > *worst_nb ? d : *worst_nb;
        }
    }
    if (m == DECODE_ATTENTION_RESCORING) {
        double d = fabs(r->best.score - golden(fx, u, mode, mname, "score")->valuedouble);
        *worst_resc = d > *worst_resc ? d : *worst_resc;
        double gc = golden(fx, u, mode, mname, "confidence")->valuedouble;
        CHECKF(fabs(r->confidence - gc) < 1e-3, "%s %s: confidence %.6f vs %.6f", utts[u], mode,
               r->confidence, gc);
    }
}

TEST(wenet_stream_golden_all_methods)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    wenet_stream_pool_t *p;
    CHECKF(wenet_stream_pool_create(fx.asr, 2, 12.0, 16, &p, &err) == HARK_OK, "%s", err.msg);
    double worst_nb = 0, worst_resc = 0;
    for (int u = 0; u < NU; u++)
        for (int li = 0; li < 2; li++)
            for (int m = 0; m < 3; m++) {
                char mode[48];
                snprintf(mode, sizeof mode, "stream_chunk16_left%d", lefts[li]);
                wenet_decode_opts_t o = stream_opts(fx.asr, m, 16, lefts[li]);
                wenet_stream_t *s;
                CHECKF(wenet_stream_open(p, &o, &s, &err) == HARK_OK, "%s", err.msg);
                CHECKF(feed_alone(p, s, fx.audio[u].samples, fx.audio[u].n, NULL, NULL, &err) ==
                           HARK_OK,
                       "%s", err.msg);
                wenet_result_t r;
                CHECKF(wenet_stream_final(s, &r, &err) == HARK_OK, "%s", err.msg);
                check_result(t, &fx, u, mode, m, &r, &worst_nb, &worst_resc);
                if (test_failed(t))
                    return;
                wenet_result_free(&r);
                wenet_stream_close(s);
            }
    printf("    streaming n-best scores: max abs diff %.3g; rescoring score: %.3g\n", worst_nb,
           worst_resc);
    CHECKF(worst_nb <= 1e-3, "n-best scores differ by %.3g > 1e-3", worst_nb);
    CHECKF(worst_resc <= 1e-2, "rescoring scores differ by %.3g", worst_resc);
    wenet_stream_pool_destroy(p);
    fixture_close(&fx);
}

/* Partial results grow with the audio and end as the final CTC result. */
TEST(wenet_stream_partials)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    wenet_stream_pool_t *p;
    CHECKF(wenet_stream_pool_create(fx.asr, 1, 12.0, 16, &p, &err) == HARK_OK, "%s", err.msg);
    for (int m = 0; m < 3; m++) {
        wenet_decode_opts_t o = stream_opts(fx.asr, m, 16, -1);
        wenet_stream_t *s;
        CHECK_OK(wenet_stream_open(p, &o, &s, &err));
        const audio_t *a = &fx.audio[1];
        wenet_result_t r;
        CHECK_OK(wenet_stream_partial(s, &r, &err)); /* nothing yet: empty */
        CHECK(r.best.n_tokens == 0 && r.best.text && !r.best.text[0]);
        wenet_result_free(&r);
        CHECK_EQ_INT(wenet_stream_final(s, &r, &err), HARK_ERR_AGAIN);
        int partials = 0, last_frames = 0;
        for (size_t at = 0; at < a->n; at += 8000) {
            size_t k = a->n - at < 8000 ? a->n - at : 8000;
            CHECK_OK(wenet_stream_accept(s, a->samples + at, k, &err));
            while (wenet_stream_ready(s))
                CHECK_OK(wenet_stream_step(p, &s, 1, &err));
            CHECK_OK(wenet_stream_partial(s, &r, &err));
            CHECK(r.frames >= last_frames);
            last_frames = r.frames;
            partials += r.best.n_tokens > 0;
            wenet_result_free(&r);
        }
        CHECK(partials > 5);
        CHECK_OK(wenet_stream_input_done(s, &err));
        if (wenet_stream_ready(s)) /* the last chunks are not through yet */
            CHECK_EQ_INT(wenet_stream_final(s, &r, &err), HARK_ERR_AGAIN);
        while (wenet_stream_ready(s))
            CHECK_OK(wenet_stream_step(p, &s, 1, &err));
        wenet_result_t pr, fr;
        CHECK_OK(wenet_stream_partial(s, &pr, &err));
        CHECK_OK(wenet_stream_final(s, &fr, &err));
        double ws = 0, wr = 0;
        if (m != DECODE_ATTENTION_RESCORING)
            CHECK(same_hyp(&pr.best, &fr.best));
        else /* the last partial is the CTC prefix beam's best */
            check_result(t, &fx, 1, "stream_chunk16_left-1", DECODE_CTC_PREFIX_BEAM, &pr, &ws, &wr);
        check_result(t, &fx, 1, "stream_chunk16_left-1", m, &fr, &ws, &wr);
        wenet_result_free(&pr);
        wenet_result_free(&fr);
        wenet_stream_close(s);
    }
    wenet_stream_pool_destroy(p);
    fixture_close(&fx);
}

/* ---- batched at other offsets = alone ----------------------------------------------------------
 */

/* Five streams, each with its own chunk size and left context, starting at different times and
 * fed 0.1 s a tick: every tick all the streams with a chunk ready run in one batched step (so a
 * step mixes streams at different offsets, window lengths and cache sizes). Each stream's encoder
 * output and results equal those of the same stream run alone. */
TEST(wenet_stream_batched_equals_alone)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    static const int chunk[NU] = {16, 16, 8, 4, 12}, left[NU] = {-1, 4, 2, -1, 0};
    static const int method[NU] = {2, 1, 0, 2, 1}, start[NU] = {0, 7, 3, 11, 5};
    wenet_stream_pool_t *p, *p1;
    CHECKF(wenet_stream_pool_create(fx.asr, NU, 12.0, 16, &p, &err) == HARK_OK, "%s", err.msg);
    CHECK_OK(wenet_stream_pool_create(fx.asr, 1, 12.0, 16, &p1, &err));
    /* pass 1: every ready stream in one forward; pass 2: forwards of at most 2 streams (a pool
     * holds more streams than one forward takes: wenet_stream_step runs them in turn); pass 3:
     * one forward, the streams' searches spread over 3 threads */
    parallel_t *par = NULL;
    CHECK_OK(parallel_create(3, &par, &err));
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1)
            CHECK_OK(wenet_stream_pool_set_step(p, 2, &err));
        if (pass == 2) {
            CHECK_OK(wenet_stream_pool_set_step(p, NU, &err));
            wenet_stream_pool_set_parallel(p, par);
        }
        wenet_stream_t *s[NU];
        size_t at[NU] = {0};
        for (int u = 0; u < NU; u++) {
            wenet_decode_opts_t o = stream_opts(fx.asr, method[u], chunk[u], left[u]);
            CHECK_OK(wenet_stream_open(p, &o, &s[u], &err));
        }
        int steps = 0, mixed = 0;
        for (int tick = 0;; tick++) {
            int active = 0;
            for (int u = 0; u < NU; u++) {
                if (tick < start[u] || wenet_stream_finished(s[u]))
                    continue;
                active++;
                const audio_t *a = &fx.audio[u];
                size_t k = a->n - at[u] < 1600 ? a->n - at[u] : 1600;
                if (k)
                    CHECK_OK(wenet_stream_accept(s[u], a->samples + at[u], k, &err));
                at[u] += k;
                if (at[u] == a->n)
                    CHECK_OK(wenet_stream_input_done(s[u], &err));
            }
            for (;;) {
                wenet_stream_t *ready[NU];
                int n = 0;
                for (int u = 0; u < NU; u++)
                    if (wenet_stream_ready(s[u]))
                        ready[n++] = s[u];
                if (!n)
                    break;
                CHECKF(wenet_stream_step(p, ready, n, &err) == HARK_OK, "%s", err.msg);
                steps++;
                mixed += n > 1;
            }
            if (!active && tick > 20)
                break;
        }
        printf("    %d batched steps, %d with several streams\n", steps, mixed);
        CHECK(mixed > 10);
        double worst = 0, worst_score = 0;
        for (int u = 0; u < NU; u++) {
            CHECK(wenet_stream_finished(s[u]));
            wenet_decode_opts_t o = stream_opts(fx.asr, method[u], chunk[u], left[u]);
            wenet_stream_t *one;
            CHECK_OK(wenet_stream_open(p1, &o, &one, &err));
            CHECK_OK(feed_alone(p1, one, fx.audio[u].samples, fx.audio[u].n, NULL, NULL, &err));
            int ra = 0, rb = 0;
            const float *ea = wenet_stream_encoder_out(one, &ra),
                        *eb = wenet_stream_encoder_out(s[u], &rb);
            CHECK_EQ_INT(ra, rb);
            double e = test_max_abs_diff(ea, eb, (size_t)ra * wenet_asr_config(fx.asr)->d_model);
            worst = e > worst ? e : worst;
            wenet_result_t r1, r2;
            CHECK_OK(wenet_stream_final(one, &r1, &err));
            CHECK_OK(wenet_stream_final(s[u], &r2, &err));
            CHECKF(same_hyp(&r1.best, &r2.best) && r1.n_nbest == r2.n_nbest,
                   "%s: batched '%s' vs alone '%s'", utts[u], r2.best.text, r1.best.text);
            for (int i = 0; i < r1.n_nbest; i++) {
                CHECKF(same_hyp(&r1.nbest[i], &r2.nbest[i]), "%s: n-best %d differs", utts[u], i);
                double d = fabs(r1.nbest[i].score - r2.nbest[i].score);
                worst_score = d > worst_score ? d : worst_score;
            }
            wenet_result_free(&r1);
            wenet_result_free(&r2);
            wenet_stream_close(one);
            wenet_stream_close(s[u]);
        }
        printf("    batched vs alone: encoder output max abs diff %.3g, n-best scores %.3g\n",
               worst, worst_score);
        CHECKF(worst <= 1e-5, "batched differs from alone by %g", worst);
        CHECKF(worst_score <= 1e-4, "batched n-best scores differ from alone by %g", worst_score);
    }
    wenet_stream_pool_destroy(p1);
    wenet_stream_pool_destroy(p);
    parallel_destroy(par);
    fixture_close(&fx);
}

/* ---- the chunk mask offline = the goldens' masked mode = streaming -----------------------------
 */

TEST(wenet_stream_chunk_mask_offline_equals_stream)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    wenet_worker_t *w;
    CHECK_OK(wenet_worker_create(fx.asr, NU, 12.0, &w, &err));
    wenet_stream_pool_t *p;
    CHECK_OK(wenet_stream_pool_create(fx.asr, 1, 12.0, 16, &p, &err));
    const float *pcm[NU];
    size_t n[NU];
    for (int u = 0; u < NU; u++)
        pcm[u] = fx.audio[u].samples, n[u] = fx.audio[u].n;
    double wn = 0, wr = 0;
    for (int li = 0; li < 2; li++)
        for (int m = 0; m < 3; m++) {
            wenet_decode_opts_t o = stream_opts(fx.asr, m, 16, lefts[li]);
            wenet_result_t r[NU];
            CHECKF(wenet_recognize(w, &o, pcm, n, NU, r, &err) == HARK_OK, "%s", err.msg);
            char mode[48];
            snprintf(mode, sizeof mode, "masked_chunk16_left%d", lefts[li]);
            for (int u = 0; u < NU; u++) {
                check_result(t, &fx, u, mode, m, &r[u], &wn, &wr);
                if (test_failed(t))
                    return;
                wenet_stream_t *s;
                CHECK_OK(wenet_stream_open(p, &o, &s, &err));
                CHECK_OK(feed_alone(p, s, pcm[u], n[u], NULL, NULL, &err));
                wenet_result_t sr;
                CHECK_OK(wenet_stream_final(s, &sr, &err));
                CHECKF(sr.best.n_tokens == r[u].best.n_tokens &&
                           !memcmp(sr.best.tokens, r[u].best.tokens,
                                   sizeof(int) * (size_t)sr.best.n_tokens) &&
                           !strcmp(sr.best.text, r[u].best.text),
                       "%s left %d %s: stream '%s' vs chunk mask '%s'", utts[u], lefts[li],
                       wenet_method_name(o.method), sr.best.text, r[u].best.text);
                wenet_result_free(&sr);
                wenet_stream_close(s);
                wenet_result_free(&r[u]);
            }
        }
    printf("    masked: n-best scores max abs diff %.3g; rescoring %.3g\n", wn, wr);
    CHECK(wn <= 1e-3 && wr <= 1e-2);
    wenet_stream_pool_destroy(p);
    wenet_worker_destroy(w);
    fixture_close(&fx);
}

/* ---- bad input
 * ----------------------------------------------------------------------------------- */

TEST(wenet_stream_bad_input)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    wenet_stream_pool_t *p;
    CHECK_EQ_INT(wenet_stream_pool_create(fx.asr, 0, 1.0, 16, &p, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(wenet_stream_pool_create(fx.asr, 2, 0.0, 16, &p, &err), HARK_ERR_INVALID_ARG);
    CHECK_OK(wenet_stream_pool_create(fx.asr, 2, 1.0, 16, &p, &err));
    wenet_decode_opts_t o = stream_opts(fx.asr, DECODE_ATTENTION_RESCORING, 16, -1);
    wenet_stream_t *s[3];
    /* options */
    o.chunk_size = 0;
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s[0], &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "decoding_chunk_size") != NULL);
    o.chunk_size = 17; /* past the pool's max_chunk */
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s[0], &err), HARK_ERR_INVALID_ARG);
    o.chunk_size = 16;
    o.left_chunks = -2;
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s[0], &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "num_decoding_left_chunks") != NULL);
    o.left_chunks = -1;
    o.beam_size = 0;
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s[0], &err), HARK_ERR_INVALID_ARG);
    o.beam_size = 10;
    /* pool exhausted */
    CHECK_OK(wenet_stream_open(p, &o, &s[0], &err));
    CHECK_OK(wenet_stream_open(p, &o, &s[1], &err));
    CHECK_EQ_INT(wenet_stream_pool_free_slots(p), 0);
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s[2], &err), HARK_ERR_TOO_LARGE);
    CHECK(strstr(err.msg, "all 2 stream slots") != NULL);
    /* past max_seconds: refused whole, the stream goes on */
    const audio_t *a = &fx.audio[0];
    CHECK_EQ_INT(wenet_stream_accept(s[0], a->samples, 16000 * 2, &err), HARK_ERR_TOO_LARGE);
    CHECK(strstr(err.msg, "1.0 s") != NULL);
    CHECK_OK(wenet_stream_accept(s[0], a->samples, 12000, &err)); /* 73 frames: a chunk */
    /* a stream without a ready chunk, twice in one step, of another pool */
    CHECK_EQ_INT(wenet_stream_step(p, &s[1], 1, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "no chunk ready") != NULL);
    CHECK(wenet_stream_ready(s[0]));
    wenet_stream_t *twice[2] = {s[0], s[0]};
    CHECK_EQ_INT(wenet_stream_step(p, twice, 2, &err), HARK_ERR_INVALID_ARG);
    wenet_stream_pool_t *q;
    CHECK_OK(wenet_stream_pool_create(fx.asr, 1, 1.0, 16, &q, &err));
    CHECK_EQ_INT(wenet_stream_step(q, &s[0], 1, &err), HARK_ERR_INVALID_ARG);
    wenet_stream_pool_destroy(q);
    CHECK_OK(wenet_stream_step(p, &s[0], 1, &err));
    /* after the input ends, and after close */
    CHECK_OK(wenet_stream_input_done(s[0], &err));
    CHECK_EQ_INT(wenet_stream_accept(s[0], a->samples, 100, &err), HARK_ERR_CLOSED);
    wenet_stream_close(s[1]);
    wenet_stream_close(s[1]); /* twice: a no-op */
    CHECK_EQ_INT(wenet_stream_pool_free_slots(p), 1);
    CHECK_EQ_INT(wenet_stream_accept(s[1], a->samples, 100, &err), HARK_ERR_CLOSED);
    CHECK_EQ_INT(wenet_stream_input_done(s[1], &err), HARK_ERR_CLOSED);
    CHECK_EQ_INT(wenet_stream_step(p, &s[1], 1, &err), HARK_ERR_CLOSED);
    wenet_result_t r;
    CHECK_EQ_INT(wenet_stream_final(s[1], &r, &err), HARK_ERR_CLOSED);
    CHECK_EQ_INT(wenet_stream_partial(s[1], &r, &err), HARK_ERR_CLOSED);
    CHECK(!wenet_stream_ready(s[1]) && !wenet_stream_finished(s[1]));
    /* empty and too-short streams end with an empty result */
    CHECK_OK(wenet_stream_open(p, &o, &s[1], &err));
    CHECK_OK(wenet_stream_accept(s[1], a->samples, 1000, &err));
    CHECK_OK(wenet_stream_input_done(s[1], &err));
    CHECK(wenet_stream_finished(s[1]));
    CHECK_OK(wenet_stream_final(s[1], &r, &err));
    CHECK(r.best.n_tokens == 0 && r.best.text && !r.best.text[0]);
    wenet_result_free(&r);
    /* the pool closes what is left open */
    wenet_stream_pool_destroy(p);
    fixture_close(&fx);
}

/* ---- the family table: stream_open / stream_close and execute over stream items ---------------
 */

typedef struct {
    int n_partial, n_done, status;
    char error[256];
    asr_result_t r; /* the last result seen */
} fam_got_t;

static void fam_emit(family_item_t *it, const family_event_t *ev)
{
    fam_got_t *g = it->user;
    if (ev->kind == FAMILY_EV_PARTIAL)
        g->n_partial++;
    if (ev->kind == FAMILY_EV_DONE) {
        g->n_done++;
        g->status = ev->status;
        if (ev->error)
            snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
    if (ev->asr) {
        asr_result_free(&g->r);
        asr_result_take(&g->r, ev->asr);
    }
}

/* Three streams (config.pbtxt: chunk 16, left 4, 3 stream threads; one request overrides left
 * to -1, one decodes greedily) fed in rounds of items at staggered offsets, with an offline item
 * (chunk mask given by the request) in the same executes: every stream's final result is WeNet's
 * streaming result, the offline one WeNet's masked result; a fourth stream finds no slot; closed
 * slots open again. */
TEST(wenet_stream_family)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    const family_t *f = family_find("wenet_u2");
    CHECK(f && f->stream_open && f->stream_close);
    char path[1024], why[256];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    /* the streams' host work on 3 threads (stream_threads; 1, the default, elsewhere) */
    family_param_t cp[3] = {
        {"decoding_chunk_size", "16"}, {"num_decoding_left_chunks", "4"}, {"stream_threads", "0"}};
    family_params_t cfg = {cp, 3};
    family_model_t *m;
    hark_err_t err = {0};
    family_load_opts_t lo = {.device = -1};
    CHECK_EQ_INT(f->load(path, &lo, &cfg, &m, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "stream_threads") != NULL, "%s", err.msg);
    cp[2].value = "3";
    CHECKF(f->load(path, &lo, &cfg, &m, &err) == HARK_OK, "%s", err.msg);
    family_worker_opts_t wo = {.max_batch = 2, .max_seconds = 12.0, .max_sequences = 3};
    family_worker_t *w;
    CHECKF(f->worker_create(m, &wo, &w, &err) == HARK_OK, "%s", err.msg);
    /* streams: utterance, request parameters, golden mode and method */
    static const int su[3] = {0, 1, 3};
    static const char *const req[3][4] = {{NULL},
                                          {"num_decoding_left_chunks", "-1", NULL},
                                          {"decoding_method", "ctc_greedy_search", NULL}};
    static const char *const mode[3] = {"stream_chunk16_left4", "stream_chunk16_left-1",
                                        "stream_chunk16_left4"};
    static const int meth[3] = {DECODE_ATTENTION_RESCORING, DECODE_ATTENTION_RESCORING,
                                DECODE_CTC_GREEDY};
    char opts[3][512], oopts[512];
    CHECK(f->opts_size <= sizeof opts[0]);
    void *st[3];
    for (int i = 0; i < 3; i++) {
        family_param_t rp[2];
        int nr = 0;
        for (; req[i][2 * nr]; nr++)
            rp[nr] = (family_param_t){req[i][2 * nr], req[i][2 * nr + 1]};
        family_params_t rq = {rp, nr};
        CHECKF(f->parse_opts(m, &cfg, &rq, opts[i], &err) == HARK_OK, "%s", err.msg);
        CHECKF(f->stream_open(w, &st[i], &err) == HARK_OK, "%s", err.msg);
    }
    void *extra;
    CHECK_EQ_INT(f->stream_open(w, &extra, &err), HARK_ERR_TOO_LARGE);
    CHECK(strstr(err.msg, "stream slots") != NULL);
    family_param_t op[2] = {{"decoding_chunk_size", "16"}, {"num_decoding_left_chunks", "-1"}};
    family_params_t oreq = {op, 2};
    CHECK_OK(f->parse_opts(m, NULL, &oreq, oopts, &err));
    size_t at[3] = {0};
    fam_got_t got[3], og;
    memset(got, 0, sizeof got);
    memset(&og, 0, sizeof og);
    int finals = 0;
    for (int round = 0; finals < 3; round++) {
        family_item_t it[4], *list[4];
        int n = 0;
        for (int i = 0; i < 3; i++) {
            const audio_t *a = &fx.audio[su[i]];
            if (round < 2 * i || at[i] > a->n)
                continue; /* not started yet, or ended */
            size_t k = a->n - at[i] < 4000 ? a->n - at[i] : 4000;
            it[n] = (family_item_t){.opts = opts[i],
                                    .pcm = a->samples + at[i],
                                    .n = k,
                                    .emit = fam_emit,
                                    .user = &got[i],
                                    .stream = st[i],
                                    .stream_end = at[i] + k == a->n};
            at[i] += k + (at[i] + k == a->n); /* past the end once ended */
            finals += it[n].stream_end;
            list[n] = &it[n];
            n++;
        }
        if (round == 3) { /* an offline item among the stream items */
            it[n] = (family_item_t){.opts = oopts,
                                    .pcm = fx.audio[2].samples,
                                    .n = fx.audio[2].n,
                                    .emit = fam_emit,
                                    .user = &og};
            list[n] = &it[n];
            n++;
        }
        int before[3];
        for (int i = 0; i < 3; i++)
            before[i] = got[i].n_done;
        CHECKF(f->execute(w, list, n, NULL, &err) == HARK_OK, "%s", err.msg);
        for (int i = 0; i < 3; i++)
            CHECKF(got[i].status == HARK_OK, "stream %d: %s", i, got[i].error);
        for (int j = 0; j < n; j++)
            CHECK_EQ_INT(((fam_got_t *)list[j]->user)->n_done,
                         (list[j]->user == &og ? 0 : before[(fam_got_t *)list[j]->user - got]) + 1);
    }
    for (int i = 0; i < 3; i++) {
        int u = su[i];
        const char *mname = wenet_method_name((wenet_method_t)meth[i]);
        CHECKF(got[i].n_partial > 3, "stream %d: %d partials", i, got[i].n_partial);
        CHECKF(same_tokens(golden(&fx, u, mode[i], mname, "tokens"), got[i].r.best.tokens,
                           got[i].r.best.n_tokens),
               "stream %d (%s %s %s): '%s'", i, utts[u], mode[i], mname, got[i].r.best.text);
        CHECK(!strcmp(golden(&fx, u, mode[i], mname, "text")->valuestring, got[i].r.best.text));
        CHECK(fabs(got[i].r.duration_s - (double)fx.audio[u].n / 16000) < 1e-9);
        asr_result_free(&got[i].r);
        f->stream_close(w, st[i]);
    }
    CHECKF(og.status == HARK_OK && og.n_done == 1, "offline: %s", og.error);
    CHECK(same_tokens(golden(&fx, 2, "masked_chunk16_left-1", "attention_rescoring", "tokens"),
                      og.r.best.tokens, og.r.best.n_tokens));
    asr_result_free(&og.r);
    /* the slots are free again; an unused stream closes cleanly */
    CHECK_OK(f->stream_open(w, &extra, &err));
    f->stream_close(w, extra);
    f->stream_close(w, NULL);
    /* a request chunk past what the worker's streams take */
    family_param_t bp[1] = {{"decoding_chunk_size", "65"}};
    family_params_t breq = {bp, 1};
    CHECK_EQ_INT(f->parse_opts(m, &cfg, &breq, oopts, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "decoding_chunk_size") != NULL);
    f->worker_destroy(w);
    f->unload(m);
    fixture_close(&fx);
}

/* ---- a GPU-loaded model: the streams step on the device --------------------------------------
 * FP32: every method gives the golden streaming result; FP16: the golden greedy tokens; both:
 * three streams batched at other offsets give what each gives alone. */
GPU_TEST(wenet_stream_gpu_golden)
{
    fixture_t fx;
    OPEN_FIXTURE(fx);
    hark_err_t err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why_, sizeof why_));
    static const wenet_precision_t precs[2] = {WENET_FP32, WENET_FP16};
    for (int pi = 0; pi < 2; pi++) {
        wenet_load_opts_t lo = {.device = 0, .precision = precs[pi]};
        wenet_asr_t *asr = NULL;
        CHECKF(wenet_asr_load_opts(path, &lo, &asr, &err) == HARK_OK, "%s", err.msg);
        wenet_stream_pool_t *p;
        CHECKF(wenet_stream_pool_create(asr, 3, 12.0, 16, &p, &err) == HARK_OK, "%s", err.msg);
        double worst_nb = 0, worst_resc = 0;
        wenet_result_t alone[NU][2];
        memset(alone, 0, sizeof alone);
        int m_of = pi == 0 ? DECODE_ATTENTION_RESCORING : DECODE_CTC_GREEDY;
        for (int u = 0; u < NU; u++)
            for (int li = 0; li < 2; li++)
                for (int m = 0; m < 3; m++) {
                    if (pi == 1 && m != DECODE_CTC_GREEDY)
                        continue;
                    char mode[48];
                    snprintf(mode, sizeof mode, "stream_chunk16_left%d", lefts[li]);
                    wenet_decode_opts_t o = stream_opts(asr, m, 16, lefts[li]);
                    wenet_stream_t *s;
                    CHECKF(wenet_stream_open(p, &o, &s, &err) == HARK_OK, "%s", err.msg);
                    CHECKF(feed_alone(p, s, fx.audio[u].samples, fx.audio[u].n, NULL, NULL, &err) ==
                               HARK_OK,
                           "%s", err.msg);
                    CHECK(wenet_stream_encoder(s) == NULL);
                    wenet_result_t r;
                    CHECKF(wenet_stream_final(s, &r, &err) == HARK_OK, "%s", err.msg);
                    if (pi == 0)
                        check_result(t, &fx, u, mode, m, &r, &worst_nb, &worst_resc);
                    else {
                        const cJSON *gt =
                            golden(&fx, u, mode, wenet_method_name(DECODE_CTC_GREEDY), "tokens");
                        if (!same_tokens(gt, r.best.tokens, r.best.n_tokens)) {
                            int ng = cJSON_GetArraySize(gt), k = 0;
                            while (k < ng && k < r.best.n_tokens &&
                                   cJSON_GetArrayItem(gt, k)->valueint == r.best.tokens[k])
                                k++;
                            printf("    fp16 %s %s: %d golden tokens, %d here, first difference at "
                                   "token %d (golden %d, here %d, frame %d); text '%s'\n",
                                   utts[u], mode, ng, r.best.n_tokens, k,
                                   k < ng ? cJSON_GetArrayItem(gt, k)->valueint : -1,
                                   k < r.best.n_tokens ? r.best.tokens[k] : -1,
                                   k < r.best.n_tokens ? r.best.times[k] : -1, r.best.text);
                        }
                        CHECKF(same_tokens(gt, r.best.tokens, r.best.n_tokens),
                               "fp16 %s %s: greedy tokens differ", utts[u], mode);
                    }
                    if (test_failed(t))
                        return;
                    if (m == m_of)
                        alone[u][li] = r;
                    else
                        wenet_result_free(&r);
                    wenet_stream_close(s);
                }
        if (pi == 0) {
            printf("    gpu fp32 streaming n-best scores: max abs diff %.3g; rescoring %.3g\n",
                   worst_nb, worst_resc);
            CHECKF(worst_nb <= 1e-3, "n-best scores differ by %.3g > 1e-3", worst_nb);
            CHECKF(worst_resc <= 1e-2, "rescoring scores differ by %.3g", worst_resc);
        }
        /* three streams, joined at other times, stepped together whenever ready */
        static const int su[3] = {0, 1, 3}, sl[3] = {1, 0, 1}, delay[3] = {0, 3, 7};
        wenet_stream_t *ss[3];
        size_t at[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            wenet_decode_opts_t o = stream_opts(asr, m_of, 16, lefts[sl[k]]);
            CHECKF(wenet_stream_open(p, &o, &ss[k], &err) == HARK_OK, "%s", err.msg);
        }
        int batched = 0;
        for (int round = 0;; round++) {
            int busy = 0;
            for (int k = 0; k < 3; k++) {
                const audio_t *a = &fx.audio[su[k]];
                if (round < delay[k] || wenet_stream_finished(ss[k]))
                    continue;
                busy = 1;
                size_t n = 3200 < a->n - at[k] ? 3200 : a->n - at[k];
                if (n)
                    CHECK_OK(wenet_stream_accept(ss[k], a->samples + at[k], n, &err));
                at[k] += n;
                if (at[k] == a->n)
                    CHECK_OK(wenet_stream_input_done(ss[k], &err));
            }
            wenet_stream_t *ready[3];
            int nr = 0;
            for (int k = 0; k < 3; k++)
                if (wenet_stream_ready(ss[k]))
                    ready[nr++] = ss[k];
            if (nr)
                CHECKF(wenet_stream_step(p, ready, nr, &err) == HARK_OK, "%s", err.msg);
            batched += nr > 1;
            if (!busy && !nr)
                break;
        }
        CHECK(batched > 3);
        for (int k = 0; k < 3; k++) {
            wenet_result_t r;
            CHECKF(wenet_stream_final(ss[k], &r, &err) == HARK_OK, "%s", err.msg);
            const wenet_result_t *a = &alone[su[k]][sl[k]];
            CHECKF(r.best.n_tokens == a->best.n_tokens &&
                       !memcmp(r.best.tokens, a->best.tokens, sizeof(int) * r.best.n_tokens),
                   "%s stream %d: batched tokens differ from alone",
                   wenet_precision_name(precs[pi]), k);
            wenet_result_free(&r);
            wenet_stream_close(ss[k]);
        }
        for (int u = 0; u < NU; u++)
            for (int li = 0; li < 2; li++)
                wenet_result_free(&alone[u][li]);
        wenet_stream_pool_destroy(p);
        wenet_asr_destroy(asr);
    }
    fixture_close(&fx);
}
