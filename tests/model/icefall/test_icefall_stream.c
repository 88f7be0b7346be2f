/* The causal zipformer streaming (src/model/icefall/icefall_stream.c and the family's streams in
 * icefall_family.c).
 * - icefall_stream_generated: a generated causal model (support/icefall_gen.h; no icefall
 *   needed): a stream fed at once or in pieces of 1, 7, 160, 1234, ... samples gives exactly the
 *   tokens and times of the searches over icefall_zf_stream_encode's frames of the whole audio
 *   (which test_icefall_zipformer.c checks against icefall's streaming_decode.py), greedy partial
 *   results only grow, modified beam search ends with the same beam; bad samples, audio after the
 *   end, short and empty streams.
 * - icefall_stream_family: the same through the family table: several streams interleaved in one
 *   execute (greedy and beam, odd pieces, an offline item beside them) give each what it gets
 *   alone, slots run out and come back, an item after the end fails, a model that cannot stream
 *   refuses stream slots; and through the C API (hark_stream_*).
 * - icefall_stream_batched: streams started at different times (so their processed lengths, and
 *   the keys their attention masks, differ) stepped together (icefall_zf_stream_step_batch) give
 *   each the encoder output of stepping it alone (within 1e-5 relative); fed together
 *   (icefall_stream_feed) in pieces of their own sizes, greedy and modified beam search, each the
 *   tokens, times and beam it gets fed alone, partial results after every round included; the
 *   worker's room, a stream twice, bad samples in one feed.
 * - icefall_stream_vs_icefall: tools/icefall_zipformer_reference.py decodes a wav with icefall's
 *   own streaming_decode.py (greedy_search and modified_beam_search); the family's stream of the
 *   same wav, fed in odd pieces, must give the same tokens. Needs $HARK_ICEFALL_SRC, ../shared and
 *   /usr/bin/python3 with torch, torchaudio and packaging; skips otherwise. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/family.h"
#include "model/icefall/icefall.h"
#include "support/golden_icefall.h"
#include "support/icefall_gen.h"

#define make_pcm icefall_gen_pcm
#define rel_diff icefall_gen_rel_diff

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int same_hyp(const int *ta, const int *ma, int na, const icefall_hyp_t *b)
{
    if (na != b->n)
        return 0;
    for (int i = 0; i < na; i++)
        if (ta[i] != b->tokens[i] || (ma && ma[i] != b->times[i]))
            return 0;
    return 1;
}

static int distinct_tokens(const icefall_hyp_t *h)
{
    int d = 0;
    for (int i = 0; i < h->n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = h->tokens[j] == h->tokens[i];
        d += !seen;
    }
    return d;
}

/* The reference of a stream: the searches over icefall_zf_stream_encode's frames of the whole
 * audio's fbank. */
typedef struct {
    icefall_hyp_t greedy, beam, *nbest;
    int n_nbest, frames;
} ref_t;

static int make_ref(icefall_worker_t *w, const icefall_model_t *m, const float *pcm, size_t n,
                    ref_t *r)
{
    const icefall_config_t *c = icefall_config(m);
    hark_err_t err = {0};
    memset(r, 0, sizeof *r);
    int T = icefall_num_frames(m, n);
    float *feats = hark_malloc(sizeof(float) * (size_t)(T > 0 ? T : 1) * c->feature_dim);
    float *se = NULL, *ep = NULL;
    int slen = 0;
    int rc = feat_compute(icefall_feat_plan(m), pcm, n, feats, &err);
    if (!rc)
        rc = icefall_zf_stream_encode(w, feats, T, &se, &slen, &err);
    if (!rc) {
        ep = hark_malloc(sizeof(float) * (size_t)slen * c->joiner_dim);
        icefall_encoder_proj(m, se, slen, ep);
        rc = icefall_greedy_search(m, (const float *const *)&ep, &slen, 1, &r->greedy, &err);
    }
    if (!rc)
        rc = icefall_modified_beam_search(m, ep, slen, 4, &r->beam, &r->nbest, &r->n_nbest, &err);
    r->frames = slen;
    hark_free(feats);
    hark_free(se);
    hark_free(ep);
    return rc;
}

static void ref_free(ref_t *r)
{
    icefall_hyp_free(&r->greedy);
    icefall_hyp_free(&r->beam);
    for (int i = 0; i < r->n_nbest; i++)
        icefall_hyp_free(&r->nbest[i]);
    hark_free(r->nbest);
}

static int gen_models(test_ctx_t *t, char *causal, char *noncausal, size_t n)
{
    char log[4096];
    const char *tmp = test_tmpdir(t);
    if (icefall_gen_model(tmp, "mc", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL, NULL, log,
                          sizeof log)) {
        printf("  conversion failed: %s\n", log);
        return -1;
    }
    snprintf(causal, n, "%s/mc", tmp);
    if (noncausal) {
        if (icefall_gen_model(tmp, "m", ICEFALL_GEN_FLAGS, NULL, log, sizeof log)) {
            printf("  conversion failed: %s\n", log);
            return -1;
        }
        snprintf(noncausal, n, "%s/m", tmp);
    }
    return 0;
}

#define N_PCM 52801 /* 3.3 s: 330 fbank frames, 24 steps of 16 frames with the tail */

TEST(icefall_stream_generated)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700];
    CHECK(gen_models(t, dir, NULL, sizeof dir) == 0);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK(icefall_can_stream(m));
    CHECK_OK(icefall_worker_create(m, 1, &w, &err)); /* a stream needs no longer scratch */
    float *pcm = make_pcm(N_PCM, 3);
    ref_t ref;
    CHECK_OK(make_ref(w, m, pcm, N_PCM, &ref));
    CHECK_EQ_INT(ref.frames, 24 * 4);
    CHECKF(distinct_tokens(&ref.greedy) >= 4 && distinct_tokens(&ref.beam) >= 4,
           "the references emit %d and %d distinct tokens", distinct_tokens(&ref.greedy),
           distinct_tokens(&ref.beam));
    icefall_stream_t *s = NULL;
    CHECK_OK(icefall_stream_create(m, &s, &err));
    icefall_result_t r;

    /* fed at once, and in pieces: the same tokens and times; greedy partials only grow */
    static const size_t pieces[] = {N_PCM, 1, 7, 160, 1234, 4001, 16000, 20000, 0};
    for (int meth = 0; meth < 2; meth++) {
        const icefall_hyp_t *want = meth ? &ref.beam : &ref.greedy;
        for (int pi = 0; pi < 9; pi++) {
            unsigned seed = 9 + pi;
            CHECK_OK(
                icefall_stream_start(s, meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY, 4, &err));
            int *prev = hark_malloc(sizeof(int) * 200), n_prev = 0, grew = 1;
            for (size_t at = 0; at < N_PCM;) {
                /* pieces[8]: random sizes of 1 .. 3000 */
                size_t k = pieces[pi] ? pieces[pi] : 1 + (size_t)((test_randf(&seed) + 1) * 1500);
                k = k < N_PCM - at ? k : N_PCM - at;
                CHECK_OK(icefall_stream_accept(w, s, pcm + at, k, &err));
                at += k;
                if (meth || (pieces[pi] < 160 && at % 1600)) /* every 0.1 s of the small pieces */
                    continue;
                CHECK_OK(icefall_stream_result(s, &r, &err));
                grew &= r.best.n >= n_prev && r.best.n <= 200 &&
                        (n_prev == 0 || !memcmp(prev, r.best.tokens, sizeof(int) * (size_t)n_prev));
                if (r.best.n > 0)
                    memcpy(prev, r.best.tokens,
                           sizeof(int) * (size_t)(r.best.n < 200 ? r.best.n : 200));
                n_prev = r.best.n;
                icefall_result_free(&r);
            }
            CHECKF(grew,
                   "pieces of %zu: a greedy partial result is not an extension of the "
                   "previous one",
                   pieces[pi]);
            CHECK(!icefall_stream_ended(s));
            CHECK_OK(icefall_stream_input_done(w, s, &err));
            CHECK_EQ_INT(icefall_stream_steps(s), 24);
            CHECK_OK(icefall_stream_result(s, &r, &err));
            CHECKF(same_hyp(r.best.tokens, r.best.times, r.best.n, want),
                   "%s in pieces of %zu: %d tokens, the whole audio's %d",
                   meth ? "modified_beam_search" : "greedy_search", pieces[pi], r.best.n, want->n);
            CHECK_EQ_INT(r.n_frames, ref.frames);
            if (meth) {
                CHECK_EQ_INT(r.n_nbest, ref.n_nbest);
                for (int i = 0; i < r.n_nbest && i < ref.n_nbest; i++)
                    CHECK(
                        same_hyp(r.nbest[i].tokens, r.nbest[i].times, r.nbest[i].n, &ref.nbest[i]));
            }
            icefall_result_free(&r);
            hark_free(prev);
        }
    }
    printf("  %d greedy and %d beam tokens (%d, %d distinct) from %d frames, equal fed at once and "
           "in 8 kinds of pieces\n",
           ref.greedy.n, ref.beam.n, distinct_tokens(&ref.greedy), distinct_tokens(&ref.beam),
           ref.frames);

    /* bad samples are refused before any is taken; audio after the end */
    CHECK_OK(icefall_stream_start(s, ICEFALL_GREEDY, 0, &err));
    CHECK_OK(icefall_stream_accept(w, s, pcm, 30000, &err));
    float bad[100];
    memcpy(bad, pcm + 30000, sizeof bad);
    bad[57] = NAN;
    CHECK_EQ_INT(icefall_stream_accept(w, s, bad, 100, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "sample 57") != NULL);
    CHECK_OK(icefall_stream_accept(w, s, pcm + 30000, N_PCM - 30000, &err));
    CHECK_OK(icefall_stream_input_done(w, s, &err));
    CHECK_OK(icefall_stream_result(s, &r, &err));
    CHECK(same_hyp(r.best.tokens, r.best.times, r.best.n, &ref.greedy));
    icefall_result_free(&r);
    CHECK_EQ_INT(icefall_stream_accept(w, s, pcm, 10, &err), HARK_ERR_CLOSED);
    CHECK_EQ_INT(icefall_stream_input_done(w, s, &err), HARK_ERR_CLOSED);
    CHECK_EQ_INT(icefall_stream_start(s, ICEFALL_MODIFIED_BEAM, 65, &err), HARK_ERR_INVALID_ARG);

    /* short and empty streams: the tail padding's steps only (43 or 44 frames: 3 steps) */
    static const size_t shorts[] = {0, 1, 100, 1000};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(icefall_stream_start(s, ICEFALL_GREEDY, 0, &err));
        CHECK_OK(icefall_stream_accept(w, s, pcm, shorts[i], &err));
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        CHECK_EQ_INT(icefall_stream_steps(s), (icefall_num_frames(m, shorts[i]) + 43 + 15) / 16);
        CHECK_OK(icefall_stream_result(s, &r, &err));
        CHECK(r.text != NULL);
        icefall_result_free(&r);
    }
    icefall_stream_destroy(s);
    ref_free(&ref);
    hark_free(pcm);
    icefall_worker_destroy(w);
    icefall_destroy(m);
}

/* ---- through the family --------------------------------------------------------------------- */

typedef struct {
    int status, n_partial, n_done, grew;
    char error[300];
    int prev[256], n_prev;
    asr_result_t final;
} sgot_t;

static void on_stream_emit(family_item_t *it, const family_event_t *ev)
{
    sgot_t *g = it->user;
    if (ev->kind == FAMILY_EV_PARTIAL && ev->asr) {
        const asr_hyp_t *h = &ev->asr->best;
        g->n_partial++;
        g->grew &= h->n_tokens >= g->n_prev && h->n_tokens <= 256 &&
                   (g->n_prev == 0 || !memcmp(g->prev, h->tokens, sizeof(int) * (size_t)g->n_prev));
        if (h->n_tokens <= 256 && h->n_tokens > 0)
            memcpy(g->prev, h->tokens, sizeof(int) * (size_t)h->n_tokens);
        g->n_prev = h->n_tokens;
    }
    if (ev->kind != FAMILY_EV_DONE)
        return;
    g->n_done++;
    g->status = ev->status;
    if (ev->error)
        snprintf(g->error, sizeof g->error, "%s", ev->error);
    if (ev->asr) {
        asr_result_free(&g->final);
        asr_result_take(&g->final, ev->asr);
    }
}

static int same_asr(const asr_hyp_t *a, const icefall_hyp_t *b, const icefall_model_t *m)
{
    if (a->n_tokens != b->n)
        return 0;
    for (int i = 0; i < b->n; i++)
        if (a->tokens[i] != b->tokens[i] || a->times_ms[i] != icefall_frame_ms(m, b->times[i]))
            return 0;
    return 1;
}

TEST(icefall_stream_family)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700], ncdir[700];
    CHECK(gen_models(t, dir, ncdir, sizeof dir) == 0);
    const family_t *f = family_find("icefall_transducer");
    CHECK(f && f->stream_open && f->stream_close && !f->streaming);
    hark_err_t err = {0};
    family_model_t *fm = NULL;
    family_load_opts_t cpu = {.device = -1};
    CHECK_OK(f->load(dir, &cpu, NULL, &fm, &err));

    /* the references, from the engine directly */
    icefall_model_t *m = NULL;
    icefall_worker_t *iw = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &iw, &err));
    enum { NS = 3 };
    const size_t lens[NS] = {N_PCM, 40000, 23457};
    float *pcm[NS];
    ref_t ref[NS];
    for (int i = 0; i < NS; i++) {
        pcm[i] = make_pcm(lens[i], 20 + (unsigned)i);
        CHECK_OK(make_ref(iw, m, pcm[i], lens[i], &ref[i]));
    }

    char o_greedy[256], o_beam[256];
    family_param_t pm = {"decoding_method", "modified_beam_search"};
    family_params_t req_m = {&pm, 1};
    CHECK_OK(f->parse_opts(fm, NULL, NULL, o_greedy, &err));
    CHECK_OK(f->parse_opts(fm, NULL, &req_m, o_beam, &err));
    family_worker_t *w = NULL;
    family_worker_opts_t wo = {.max_batch = 2, .max_seconds = 4, .max_sequences = NS};
    CHECK_OK(f->worker_create(fm, &wo, &w, &err));
    for (int round = 0; round < 2; round++) {
        /* three streams (greedy, beam, greedy) in pieces of 1234, 777 and 4000 samples, every
         * execute feeding all of them that have audio left, and an offline item beside them */
        void *st[NS];
        for (int i = 0; i < NS; i++)
            CHECK_OK(f->stream_open(w, &st[i], &err));
        void *extra = NULL;
        CHECK_EQ_INT(f->stream_open(w, &extra, &err), HARK_ERR_TOO_LARGE);
        CHECK(strstr(err.msg, "max_sequences") != NULL && extra == NULL);
        const size_t piece[NS] = {1234, 777, 4000};
        const char *opts[NS] = {o_greedy, o_beam, o_greedy};
        size_t at[NS] = {0};
        sgot_t g[NS];
        memset(g, 0, sizeof g);
        for (int i = 0; i < NS; i++)
            g[i].grew = 1;
        sgot_t off = {0};
        int busy = 1, execs = 0;
        while (busy) {
            family_item_t it[NS + 1];
            family_item_t *items[NS + 1];
            int n = 0;
            busy = 0;
            for (int i = 0; i < NS; i++) {
                if (at[i] > lens[i])
                    continue; /* ended */
                size_t k = lens[i] - at[i] < piece[i] ? lens[i] - at[i] : piece[i];
                /* the last piece ends the stream; stream 2 ends with an item of no audio */
                int end = i == 2 ? at[i] == lens[i] : at[i] + k == lens[i];
                it[n] = (family_item_t){.opts = opts[i],
                                        .pcm = pcm[i] + at[i],
                                        .n = k,
                                        .want_words = 1,
                                        .emit = on_stream_emit,
                                        .user = &g[i],
                                        .stream = st[i],
                                        .stream_end = end};
                items[n] = &it[n];
                n++;
                at[i] += k + (end ? 1 : 0);
                busy = 1;
            }
            if (execs == 3) { /* an offline item among the stream items */
                it[n] = (family_item_t){.opts = o_greedy,
                                        .pcm = pcm[2],
                                        .n = lens[2],
                                        .emit = on_stream_emit,
                                        .user = &off};
                items[n] = &it[n];
                n++;
            }
            if (n)
                CHECK_OK(f->execute(w, items, n, NULL, &err));
            execs++;
        }
        CHECK_EQ_INT(off.n_done, 1);
        CHECK_OK(off.status);
        for (int i = 0; i < NS; i++) {
            const icefall_hyp_t *want = opts[i] == o_beam ? &ref[i].beam : &ref[i].greedy;
            CHECKF(g[i].status == 0, "stream %d: %s", i, g[i].error);
            CHECKF(same_asr(&g[i].final.best, want, m),
                   "round %d stream %d (%s, pieces of %zu, interleaved): %d tokens, alone %d",
                   round, i, opts[i] == o_beam ? "beam" : "greedy", piece[i],
                   g[i].final.best.n_tokens, want->n);
            CHECK(g[i].final.n_words > 0 && g[i].final.best.text);
            CHECK(fabs(g[i].final.duration_s - lens[i] / 16000.0) < 1e-9);
            CHECK_EQ_INT(g[i].n_done, (int)((lens[i] + piece[i] - 1) / piece[i]) + (i == 2));
            CHECK_EQ_INT(g[i].n_partial, g[i].n_done - 1);
            if (opts[i] == o_greedy)
                CHECKF(g[i].grew, "stream %d: a partial result is not an extension of the last", i);
            if (opts[i] == o_beam)
                CHECK(g[i].final.n_nbest == ref[i].n_nbest);
        }
        if (round == 0)
            printf("  3 streams interleaved over %d executes: %d, %d, %d tokens as alone\n", execs,
                   g[0].final.best.n_tokens, g[1].final.best.n_tokens, g[2].final.best.n_tokens);
        /* an item after the end fails, the others' slots come back */
        sgot_t late = {0};
        family_item_t li = {.opts = o_greedy,
                            .pcm = pcm[0],
                            .n = 100,
                            .emit = on_stream_emit,
                            .user = &late,
                            .stream = st[0]};
        family_item_t *lp[1] = {&li};
        f->execute(w, lp, 1, NULL, &err);
        CHECK_EQ_INT(late.n_done, 1);
        CHECK_EQ_INT(late.status, HARK_ERR_CLOSED);
        CHECK(strstr(late.error, "already ended") != NULL);
        for (int i = 0; i < NS; i++) {
            f->stream_close(w, st[i]);
            asr_result_free(&g[i].final);
        }
        asr_result_free(&off.final);
    }
    f->worker_destroy(w);
    /* a worker without stream slots; a model that cannot stream */
    family_worker_opts_t wo0 = {.max_batch = 2, .max_seconds = 4};
    CHECK_OK(f->worker_create(fm, &wo0, &w, &err));
    void *st0 = NULL;
    CHECK_EQ_INT(f->stream_open(w, &st0, &err), HARK_ERR_UNSUPPORTED);
    f->worker_destroy(w);
    family_model_t *nc = NULL;
    CHECK_OK(f->load(ncdir, &cpu, NULL, &nc, &err));
    w = NULL;
    CHECK_EQ_INT(f->worker_create(nc, &wo, &w, &err), HARK_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "cannot stream") != NULL && w == NULL);
    f->unload(nc);
    f->unload(fm);
    /* the converter's --streaming is for a causal model with a chunk size and a left context */
    char log[4096];
    CHECK(icefall_gen_model(test_tmpdir(t), "nc_stream", ICEFALL_GEN_FLAGS, "--streaming 4", log,
                            sizeof log) != 0);
    CHECKF(strstr(log, "only a causal zipformer") != NULL, "converter: %s", log);

    /* the C API's streams */
    hark_model_t *hm = NULL;
    CHECK_OK(hark_model_load(dir, NULL, &hm));
    hark_stream_t *hs = NULL;
    CHECK_OK(hark_stream_create(hm, NULL, &hs));
    for (size_t at = 0; at < lens[1]; at += 3000)
        CHECK_OK(hark_stream_accept_waveform(hs, pcm[1] + at,
                                             lens[1] - at < 3000 ? lens[1] - at : 3000, 16000));
    CHECK_OK(hark_stream_accept_waveform(hs, NULL, 0, 16000));
    char *want_text = NULL;
    CHECK_OK(icefall_text(m, &ref[1].greedy, &want_text, &err));
    hark_asr_result_t *hr = NULL;
    CHECK_OK(hark_stream_result(hs, &hr));
    CHECKF(!strcmp(hark_asr_result_text(hr, 0), want_text), "C API stream: '%s', want '%s'",
           hark_asr_result_text(hr, 0), want_text);
    CHECK_EQ_INT(hark_stream_accept_waveform(hs, pcm[1], 10, 16000), HARK_ERR_CLOSED);
    hark_asr_result_destroy(hr);
    hark_free(want_text);
    hark_stream_destroy(hs);
    hark_model_destroy(hm);

    for (int i = 0; i < NS; i++) {
        ref_free(&ref[i]);
        hark_free(pcm[i]);
    }
    icefall_worker_destroy(iw);
    icefall_destroy(m);
}

/* ---- against icefall's streaming_decode.py --------------------------------------------------- */

/* ---- several streams stepped together -------------------------------------------------------- */

static int same_result(const icefall_result_t *a, const icefall_result_t *b)
{
    if (!same_hyp(a->best.tokens, a->best.times, a->best.n, &b->best) || a->n_nbest != b->n_nbest ||
        a->n_frames != b->n_frames)
        return 0;
    for (int i = 0; i < a->n_nbest; i++)
        if (!same_hyp(a->nbest[i].tokens, a->nbest[i].times, a->nbest[i].n, &b->nbest[i]))
            return 0;
    return 1;
}

#define NB 4

TEST(icefall_stream_batched)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    char dir[700];
    CHECK(gen_models(t, dir, NULL, sizeof dir) == 0);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w1 = NULL, *wb = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    const icefall_config_t *c = icefall_config(m);
    CHECK_OK(icefall_worker_create(m, 1, &w1, &err));
    CHECK_OK(icefall_worker_create(m, 1, &wb, &err));
    CHECK_EQ_INT(icefall_worker_reserve_streams(wb, 0, &err), HARK_ERR_INVALID_ARG);
    CHECK_OK(icefall_worker_reserve_streams(wb, NB, &err));
    CHECK_OK(icefall_worker_reserve_streams(wb, 2, &err)); /* less: nothing changes */
    const int F = c->feature_dim, M = c->d, n_in = icefall_zf_stream_step_frames(m);
    const int step = 2 * c->zf.chunk, per = c->zf.chunk / 2;
    const size_t lens[NB] = {N_PCM, 40000, 23457, 45000};
    float *pcm[NB], *feats[NB];
    int nsteps[NB];
    for (int j = 0; j < NB; j++) {
        pcm[j] = make_pcm(lens[j], 40 + (unsigned)j);
        int T = icefall_num_frames(m, lens[j]);
        feats[j] = hark_malloc(sizeof(float) * (size_t)T * F);
        CHECK_OK(feat_compute(icefall_feat_plan(m), pcm[j], lens[j], feats[j], &err));
        nsteps[j] = (T - n_in) / step + 1;
    }

    /* the encoder: stream j starts in round start[j]; stream 2 sits out every third round after
     * it starts; a round steps every other started stream with steps left together */
    {
        static const int start[NB] = {0, 1, 3, 6};
        icefall_zf_stream_t *a[NB], *b[NB];
        for (int j = 0; j < NB; j++) {
            CHECK_OK(icefall_zf_stream_create(m, &a[j], &err));
            CHECK_OK(icefall_zf_stream_create(m, &b[j], &err));
        }
        float *oa = hark_malloc(sizeof(float) * (size_t)per * M);
        float *ob[NB];
        for (int j = 0; j < NB; j++)
            ob[j] = hark_malloc(sizeof(float) * (size_t)per * M);
        int done[NB] = {0}, total = 0, batches[NB + 1] = {0};
        double worst = 0;
        for (int r = 0;; r++) {
            icefall_zf_stream_t *bs[NB];
            const float *in[NB];
            float *out[NB];
            int who[NB], n = 0, left = 0;
            for (int j = 0; j < NB; j++) {
                left += done[j] < nsteps[j];
                if (r < start[j] || done[j] >= nsteps[j] || (j == 2 && (r - start[j]) % 3 == 2))
                    continue;
                bs[n] = b[j];
                in[n] = feats[j] + (size_t)done[j] * step * F;
                out[n] = ob[n];
                who[n++] = j;
            }
            if (!left)
                break;
            if (!n)
                continue;
            CHECK_OK(icefall_zf_stream_step_batch(wb, bs, in, out, n, &err));
            batches[n]++;
            for (int k = 0; k < n; k++) {
                const int j = who[k];
                CHECK_OK(icefall_zf_stream_step(w1, a[j], in[k], oa, &err));
                double d = rel_diff(out[k], oa, (size_t)per * M);
                worst = d > worst ? d : worst;
                CHECKF(d <= 1e-5, "round %d, stream %d step %d (with %d others): %g relative", r, j,
                       done[j], n - 1, d);
                done[j]++;
                total++;
            }
        }
        printf("  %d encoder steps of 4 streams in batches of 1/2/3/4: %d/%d/%d/%d; batched vs "
               "alone at most %.3g relative\n",
               total, batches[1], batches[2], batches[3], batches[4], worst);
        CHECK(batches[3] > 0 && batches[4] > 0);
        /* the worker's room, a stream twice, a one-stream worker */
        icefall_zf_stream_t *five[NB + 1] = {b[0], b[1], b[2], b[3], b[0]};
        const float *in5[NB + 1] = {feats[0], feats[0], feats[0], feats[0], feats[0]};
        float *out5[NB + 1] = {ob[0], ob[1], ob[2], ob[3], oa};
        CHECK_EQ_INT(icefall_zf_stream_step_batch(wb, five, in5, out5, NB + 1, &err),
                     HARK_ERR_INVALID_ARG);
        icefall_zf_stream_t *dup[2] = {b[1], b[1]};
        CHECK_EQ_INT(icefall_zf_stream_step_batch(wb, dup, in5, out5, 2, &err),
                     HARK_ERR_INVALID_ARG);
        CHECK(strstr(err.msg, "again") != NULL);
        CHECK_EQ_INT(icefall_zf_stream_step_batch(w1, five, in5, out5, 2, &err),
                     HARK_ERR_INVALID_ARG);
        for (int j = 0; j < NB; j++) {
            icefall_zf_stream_destroy(a[j]);
            icefall_zf_stream_destroy(b[j]);
            hark_free(ob[j]);
        }
        hark_free(oa);
    }

    /* the streams: fed together in rounds (stream j from round start[j], pieces of its own size,
     * the last with input_done; in round 2 stream 2's piece has a NaN: refused, nothing taken)
     * on 3 stream threads, and each alone the same way: the same partial results every round,
     * the same final ones */
    CHECK_EQ_INT(icefall_worker_set_stream_threads(wb, 0, &err), HARK_ERR_INVALID_ARG);
    CHECK_OK(icefall_worker_set_stream_threads(wb, 3, &err));
    {
        static const int start[NB] = {0, 1, 2, 4};
        static const size_t piece[NB] = {2345, 4000, 777, 20000};
        icefall_stream_t *a[NB], *b[NB];
        size_t at[NB] = {0};
        int ended[NB] = {0}, rounds = 0, partials = 0;
        float bad[777];
        memcpy(bad, pcm[2], sizeof bad);
        bad[5] = NAN;
        for (int j = 0; j < NB; j++) {
            icefall_method_t me = j % 2 ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY;
            CHECK_OK(icefall_stream_create(m, &a[j], &err));
            CHECK_OK(icefall_stream_create(m, &b[j], &err));
            CHECK_OK(icefall_stream_start(a[j], me, 4, &err));
            CHECK_OK(icefall_stream_start(b[j], me, 4, &err));
        }
        for (int r = 0;; r++) {
            icefall_stream_feed_t fd[NB];
            int who[NB], n = 0, left = 0;
            for (int j = 0; j < NB; j++) {
                left += !ended[j];
                if (r < start[j] || ended[j])
                    continue;
                size_t k = lens[j] - at[j] < piece[j] ? lens[j] - at[j] : piece[j];
                int nan = j == 2 && r == 2;
                fd[n] = (icefall_stream_feed_t){.s = b[j],
                                                .pcm = nan ? bad : pcm[j] + at[j],
                                                .n = nan ? sizeof bad / sizeof *bad : k,
                                                .input_done = !nan && at[j] + k == lens[j]};
                who[n++] = j;
            }
            if (!left)
                break;
            if (!n)
                continue;
            int rc = icefall_stream_feed(wb, fd, n);
            CHECK_EQ_INT(rc, r == 2 ? HARK_ERR_INVALID_ARG : HARK_OK);
            rounds++;
            for (int k = 0; k < n; k++) {
                const int j = who[k];
                int rca = fd[k].pcm == bad
                              ? icefall_stream_accept(w1, a[j], bad, 777, &err)
                              : icefall_stream_accept(w1, a[j], fd[k].pcm, fd[k].n, &err);
                if (!rca && fd[k].input_done)
                    rca = icefall_stream_input_done(w1, a[j], &err);
                CHECK_EQ_INT(fd[k].status, rca);
                if (fd[k].pcm == bad) {
                    CHECK(strstr(fd[k].err.msg, "sample 5") != NULL);
                    continue;
                }
                at[j] += fd[k].n;
                ended[j] = fd[k].input_done;
                CHECK_EQ_INT(icefall_stream_steps(b[j]), icefall_stream_steps(a[j]));
                icefall_result_t ra, rb;
                CHECK_OK(icefall_stream_result(a[j], &ra, &err));
                CHECK_OK(icefall_stream_result(b[j], &rb, &err));
                CHECKF(same_result(&rb, &ra), "round %d stream %d (%s): %d tokens, alone %d", r, j,
                       j % 2 ? "beam" : "greedy", rb.best.n, ra.best.n);
                partials++;
                icefall_result_free(&ra);
                icefall_result_free(&rb);
            }
        }
        int toks[NB];
        for (int j = 0; j < NB; j++) {
            CHECK(icefall_stream_ended(b[j]));
            icefall_result_t rb;
            CHECK_OK(icefall_stream_result(b[j], &rb, &err));
            toks[j] = rb.best.n;
            CHECK(rb.best.n > 0);
            icefall_result_free(&rb);
        }
        printf("  4 streams (greedy, beam, greedy, beam) fed together over %d rounds: %d results "
               "as alone, finals of %d, %d, %d, %d tokens\n",
               rounds, partials, toks[0], toks[1], toks[2], toks[3]);
        /* more feeds than the worker's room; a stream twice; after the end */
        icefall_stream_feed_t two[2] = {{.s = a[0]}, {.s = a[0]}};
        CHECK_EQ_INT(icefall_stream_feed(w1, two, 2), HARK_ERR_INVALID_ARG);
        CHECK(strstr(two[0].err.msg, "room") != NULL);
        CHECK_EQ_INT(icefall_stream_start(a[0], ICEFALL_GREEDY, 0, &err), HARK_OK);
        CHECK_EQ_INT(icefall_stream_feed(wb, two, 2), HARK_ERR_INVALID_ARG);
        CHECK_OK(two[0].status);
        CHECK(strstr(two[1].err.msg, "again") != NULL);
        icefall_stream_feed_t late = {.s = b[1], .pcm = pcm[1], .n = 10};
        CHECK_EQ_INT(icefall_stream_feed(wb, &late, 1), HARK_ERR_CLOSED);
        for (int j = 0; j < NB; j++) {
            icefall_stream_destroy(a[j]);
            icefall_stream_destroy(b[j]);
        }
    }
    for (int j = 0; j < NB; j++) {
        hark_free(pcm[j]);
        hark_free(feats[j]);
    }
    icefall_worker_destroy(w1);
    icefall_worker_destroy(wb);
    icefall_destroy(m);
}

TEST(icefall_stream_vs_icefall)
{
    const char *src = NULL, *why;
    char shims[1024];
    if ((why = golden_icefall_ref_missing(&src, shims, sizeof shims)))
        SKIP(why);
    NEED_SHARED(GOLDEN_ICEFALL);
    const char *gd = test_shared(GOLDEN_ICEFALL);
    static const struct {
        const char *flags, *utt;
    } cfgs[] = {
        /* 6 stacks, chunks of 16 frames, 64 to the left */
        {"--num-encoder-layers 1,1,2,1,1,1 --downsampling-factor 1,2,4,8,4,2 "
         "--feedforward-dim 96,128,192,256,192,128 --num-heads 2,2,4,4,2,2 "
         "--encoder-dim 48,64,96,128,96,64 --encoder-unmasked-dim 32,32,48,48,48,32 "
         "--query-head-dim 8 --value-head-dim 6 --pos-head-dim 2 --pos-dim 32 "
         "--cnn-module-kernel 31,15,15,7,15,31 --decoder-dim 128 --joiner-dim 160 "
         "--causal True --chunk-size 16 --left-context-frames 64",
         "jfk"},
        /* 4 stacks, chunks of 8, 32 to the left, a decoder context of 3 */
        {"--num-encoder-layers 1 --downsampling-factor 1,2,4,2 --feedforward-dim 128 "
         "--num-heads 3 --encoder-dim 64,96,64,80 --encoder-unmasked-dim 48 --query-head-dim 12 "
         "--value-head-dim 8 --pos-head-dim 3 --pos-dim 24 --cnn-module-kernel 15 "
         "--decoder-dim 64 --joiner-dim 96 --context-size 3 --causal True --chunk-size 8 "
         "--left-context-frames 32",
         "lj-LJ001-0013"},
        /* the recipe's default sizes (65 M parameters), chunks of 32 frames, 128 to the left */
        {"--causal True --chunk-size 32 --left-context-frames 128",
         "librivox-sense_and_sensibility_01_austen_64kb-0890"},
    };
    const family_t *f = family_find("icefall_transducer");
    for (int c = 0; c < (int)(sizeof cfgs / sizeof *cfgs); c++) {
        char out[700], cmd[6000], path[800];
        snprintf(out, sizeof out, "%s/cfg%d", test_tmpdir(t), c);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/icefall_zipformer_reference.py --icefall-root '%s' "
                 "--shims '%s' --wav '%s/wavs/%s.wav' --out '%s' %s --streaming > '%s/ref%d.log' "
                 "2>&1",
                 src, shims, gd, cfgs[c].utt, out, cfgs[c].flags, test_tmpdir(t), c);
        CHECKF(system(cmd) == 0, "icefall_zipformer_reference.py failed (see %s/ref%d.log)",
               test_tmpdir(t), c);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/convert_icefall.py --recipe zipformer --checkpoint "
                 "'%s/pretrained.pt' --tokens '%s/tokens.txt' --output '%s/m' %s > /dev/null",
                 out, gd, out, cfgs[c].flags);
        CHECKF(system(cmd) == 0, "convert_icefall.py failed on config %d", c);
        snprintf(path, sizeof path, "%s/ref.json", out);
        cJSON *ref = test_read_json(path);
        CHECK(ref != NULL);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(ref, "streaming");
        npy_array_t pcm = {0};
        CHECK_OK(golden_icefall_npy(&pcm, cfgs[c].utt, "waveform.npy"));
        const float *x = pcm.data;

        snprintf(path, sizeof path, "%s/m", out);
        hark_err_t err = {0};
        family_model_t *fm = NULL;
        family_load_opts_t cpu = {.device = -1};
        CHECK_OK(f->load(path, &cpu, NULL, &fm, &err));
        char o[2][256];
        family_param_t pm = {"decoding_method", "modified_beam_search"};
        family_params_t req_m = {&pm, 1};
        CHECK_OK(f->parse_opts(fm, NULL, NULL, o[0], &err));
        CHECK_OK(f->parse_opts(fm, NULL, &req_m, o[1], &err));
        family_worker_t *w = NULL;
        family_worker_opts_t wo = {.max_batch = 1, .max_seconds = 2, .max_sequences = 2};
        CHECK_OK(f->worker_create(fm, &wo, &w, &err));
        /* both methods' streams interleaved: one sample, then pieces of 1234 */
        void *s[2];
        sgot_t g[2];
        memset(g, 0, sizeof g);
        for (int k = 0; k < 2; k++) {
            CHECK_OK(f->stream_open(w, &s[k], &err));
            g[k].grew = 1;
        }
        for (size_t at = 0, k = 1; at < pcm.count; at += k, k = 1234) {
            k = pcm.count - at < k ? pcm.count - at : k;
            family_item_t it[2];
            family_item_t *items[2] = {&it[0], &it[1]};
            for (int q = 0; q < 2; q++)
                it[q] = (family_item_t){.opts = o[q],
                                        .pcm = x + at,
                                        .n = k,
                                        .emit = on_stream_emit,
                                        .user = &g[q],
                                        .stream = s[q],
                                        .stream_end = at + k == pcm.count};
            CHECKF(f->execute(w, items, 2, NULL, &err) == HARK_OK, "at sample %zu: %s / %s", at,
                   g[0].error, g[1].error);
        }
        const asr_hyp_t *gh = &g[0].final.best, *bh = &g[1].final.best;
        printf(
            "  config %d (%s): icefall's streaming_decode.py %d chunks, greedy %d tokens, "
            "modified_beam_search %d; the family's streams %d and %d\n",
            c, cfgs[c].utt, cJSON_GetObjectItemCaseSensitive(st, "num_chunks")->valueint,
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "greedy_tokens")),
            cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(st, "modified_beam_search_tokens")),
            gh->n_tokens, bh->n_tokens);
        CHECKF(g[0].status == 0 && g[1].status == 0, "%s / %s", g[0].error, g[1].error);
        CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(st, "greedy_tokens"),
                                      gh->tokens, gh->n_tokens),
               "config %d: the stream's greedy tokens differ from icefall's streaming ones", c);
        CHECKF(golden_json_ints_equal(
                   cJSON_GetObjectItemCaseSensitive(st, "modified_beam_search_tokens"), bh->tokens,
                   bh->n_tokens),
               "config %d: the stream's modified_beam_search tokens differ from icefall's", c);
        CHECK(g[0].grew);
        for (int k = 0; k < 2; k++) {
            f->stream_close(w, s[k]);
            asr_result_free(&g[k].final);
        }
        f->worker_destroy(w);
        f->unload(fm);
        npy_free(&pcm);
        cJSON_Delete(ref);
    }
}
