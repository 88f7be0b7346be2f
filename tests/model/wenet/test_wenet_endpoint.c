/* Tests for endpointing in src/model/wenet/wenet_stream.c (WeNet's CTC rules, continuous
 * decoding) with the golden U2++ model: jfk, 3 s of digital silence, then LJ001-0002, as one
 * stream. */
#include "test.h"

#include "audio/audio.h"
#include "core/alloc.h"
#include "hark.h"
#include "model/family.h"
#include "model/wenet/wenet_asr.h"
#include "model/silero/silero_vad.h"
#include "model/wenet/wenet_stream.h"
#include "support/golden_model.h"
#include "support/golden_silero.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    wenet_asr_t *asr;
    audio_t jfk, lj;
} efx_t;

static int efx_open(efx_t *fx, char *why, size_t nwhy)
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
    audio_opts_t ao = {.target_rate = 16000};
    snprintf(path, sizeof path, "%s/wavs/jfk.wav", test_shared(GOLDEN_WENET));
    if (audio_decode_file(path, &ao, &fx->jfk, &err))
        return snprintf(why, nwhy, "%.200s: %.250s", path, err.msg), -1;
    snprintf(path, sizeof path, "%s/wavs/LJ001-0002.wav", test_shared(GOLDEN_WENET));
    if (audio_decode_file(path, &ao, &fx->lj, &err))
        return snprintf(why, nwhy, "%.200s: %.250s", path, err.msg), -1;
    return 0;
}

static void efx_close(efx_t *fx)
{
    audio_free(&fx->jfk);
    audio_free(&fx->lj);
    wenet_asr_destroy(fx->asr);
}

#define OPEN_EFX(fx)                                                                               \
    char why_[512];                                                                                \
    int st_ = efx_open(&fx, why_, sizeof why_);                                                    \
    if (st_ == 1)                                                                                  \
        SKIP(why_);                                                                                \
    if (st_ < 0) {                                                                                 \
        efx_close(&fx);                                                                            \
        CHECKF(0, "%s", why_);                                                                     \
    }

enum { MAX_SEG = 32, CHUNK = 16 };

typedef struct {
    int *tokens[MAX_SEG];
    int n_tokens[MAX_SEG];
    int end_frame[MAX_SEG]; /* encoder frames when the segment ended */
    int rule[MAX_SEG];      /* 0: the input's end */
    int n;
    float *enc; /* the stream's whole encoder output (T, D) */
    int T;
} segs_t;

static void segs_free(segs_t *g)
{
    for (int i = 0; i < g->n; i++)
        hark_free(g->tokens[i]);
    hark_free(g->enc);
}

/* feeds pcm in 0.64 s pieces, stepping when ready; at each endpoint takes the segment's final
 * result and goes on (continuous decoding); at the end the last segment's; keeps the encoder
 * output */
static int run_stream(wenet_stream_pool_t *p, const wenet_decode_opts_t *o, const float *pcm,
                      size_t n, int D, segs_t *g, hark_err_t *err)
{
    memset(g, 0, sizeof *g);
    wenet_stream_t *s;
    int rc = wenet_stream_open(p, o, &s, err), done = 0;
    for (size_t at = 0; !rc && !done;) {
        size_t m = n - at < 10240 ? n - at : 10240;
        rc = m ? wenet_stream_accept(s, pcm + at, m, err) : wenet_stream_input_done(s, err);
        at += m;
        while (!rc) {
            while (!rc && wenet_stream_ready(s))
                rc = wenet_stream_step(p, &s, 1, err);
            int ep = rc ? 0 : wenet_stream_endpoint(s);
            if (rc || (!ep && !wenet_stream_finished(s)))
                break;
            wenet_result_t r;
            if (g->n == MAX_SEG || (rc = wenet_stream_final(s, &r, err)))
                return rc ? rc : -1;
            g->tokens[g->n] = hark_malloc(sizeof(int) * (size_t)(r.best.n_tokens + 1));
            memcpy(g->tokens[g->n], r.best.tokens, sizeof(int) * (size_t)r.best.n_tokens);
            g->n_tokens[g->n] = r.best.n_tokens;
            wenet_stream_encoder_out(s, &g->end_frame[g->n]);
            g->rule[g->n++] = ep;
            wenet_result_free(&r);
            if (!ep) {
                done = 1;
                break;
            }
            rc = wenet_stream_next_segment(s, err);
        }
    }
    const float *e = wenet_stream_encoder_out(s, &g->T);
    g->enc = hark_malloc(sizeof(float) * (size_t)(g->T ? g->T : 1) * D);
    memcpy(g->enc, e, sizeof(float) * (size_t)g->T * D);
    wenet_stream_close(s);
    return rc;
}

/* What the stream must have done, recomputed from its encoder output (which endpointing does
 * not change: the encoder's caches go on across segments): the CTC log-probs of every frame,
 * WeNet's rules over every full chunk (not the input's last, shorter one), a segment's
 * "decoded something" from its greedy path, and each segment's greedy tokens. Checks g against
 * it. */
static void check_segments(test_ctx_t *t, const wenet_asr_t *asr, const wenet_decode_opts_t *o,
                           const segs_t *g)
{
    const wenet_config_t *cfg = wenet_asr_config(asr);
    const int V = cfg->vocab_size, T = g->T;
    float *lp = hark_malloc(sizeof(float) * (size_t)(T ? T : 1) * V);
    int *arg = hark_malloc(sizeof(int) * (size_t)(T ? T : 1));
    CHECK(lp && arg);
    hark_err_t err = {0};
    conformer_opts_t co = conformer_default_opts();
    CHECK_OK(conformer_ctc_log_probs(wenet_asr_encoder(asr), &co, lp, g->enc, &T, 1, T, &err));
    for (int f = 0; f < T; f++) {
        arg[f] = 0;
        for (int v = 1; v < V; v++)
            if (lp[(size_t)f * V + v] > lp[(size_t)f * V + arg[f]])
                arg[f] = v;
    }
    ctc_endpoint_t e;
    ctc_endpoint_reset(&e);
    int seg = 0, start = 0, tokens = 0;
    for (int t0 = 0; t0 < T; t0 += CHUNK) {
        int rows = T - t0 < CHUNK ? T - t0 : CHUNK;
        for (int f = t0; f < t0 + rows; f++)
            tokens += arg[f] != cfg->blank && (f == start || arg[f] != arg[f - 1]);
        int rule = rows == CHUNK ? ctc_endpoint_detect(&e, &o->endpoint, lp + (size_t)t0 * V, rows,
                                                       V, wenet_asr_frame_ms(asr), tokens > 0)
                                 : 0;
        if (!rule && t0 + rows < T)
            continue;
        CHECKF(seg < g->n, "segment %d (frames %d .. %d, rule %d) missing: the stream has %d", seg,
               start, t0 + rows, rule, g->n);
        CHECKF(g->end_frame[seg] == t0 + rows && g->rule[seg] == rule,
               "segment %d ends at frame %d by rule %d, expected %d by rule %d", seg,
               g->end_frame[seg], g->rule[seg], t0 + rows, rule);
        if (o->method == DECODE_CTC_GREEDY) { /* its tokens: the greedy path over its frames */
            int k = 0, ok = 1;
            for (int f = start; f < t0 + rows; f++)
                if (arg[f] != cfg->blank && (f == start || arg[f] != arg[f - 1]))
                    ok &= k < g->n_tokens[seg] && g->tokens[seg][k++] == arg[f];
            CHECKF(ok && k == g->n_tokens[seg], "segment %d: not the greedy path of its frames",
                   seg);
        }
        seg++;
        start = t0 + rows;
        tokens = 0;
        ctc_endpoint_reset(&e);
    }
    CHECK_EQ_INT(g->n, seg);
    hark_free(lp);
    hark_free(arg);
}

/* One stream of jfk, 3 s of low noise, then LJ001-0002, with endpointing and continuous
 * decoding: every segment boundary and rule where WeNet's rules put them on the stream's own
 * CTC output, each greedy segment the greedy path of its frames, rescoring segmented the same
 * way; without endpointing, or with rules that never hold, one segment. A tighter rule (500 ms)
 * gives at least as many segments, at the places the rules say. */
TEST(wenet_stream_endpoint_continuous)
{
    efx_t fx;
    OPEN_EFX(fx);
    hark_err_t err = {0};
    size_t gap = 3 * 16000, n = fx.jfk.n + gap + fx.lj.n;
    float *pcm = hark_calloc(n, sizeof(float));
    CHECK(pcm != NULL);
    memcpy(pcm, fx.jfk.samples, fx.jfk.n * sizeof(float));
    unsigned seed = 11;
    for (size_t i = 0; i < gap; i++) {
        seed = seed * 1664525u + 1013904223u;
        pcm[fx.jfk.n + i] = 1e-3f * ((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
    }
    memcpy(pcm + fx.jfk.n + gap, fx.lj.samples, fx.lj.n * sizeof(float));
    const int D = wenet_asr_config(fx.asr)->d_model;
    wenet_stream_pool_t *p;
    CHECK_OK(wenet_stream_pool_create(fx.asr, 2, 40.0, CHUNK, &p, &err));
    int greedy_segments = 0;
    for (int m = 0; m < 3; m += 2) { /* greedy, attention rescoring */
        wenet_decode_opts_t o = wenet_default_opts(fx.asr);
        o.method = (wenet_method_t)m;
        o.chunk_size = CHUNK;
        segs_t none, both, tight;
        CHECKF(run_stream(p, &o, pcm, n, D, &none, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(none.n, 1);
        o.endpointing = 1;
        o.continuous_decoding = 1;
        CHECKF(run_stream(p, &o, pcm, n, D, &both, &err) == 0, "%s", err.msg);
        CHECKF(both.T == none.T && !memcmp(both.enc, none.enc, sizeof(float) * (size_t)both.T * D),
               "endpointing changed the encoder output");
        check_segments(t, fx.asr, &o, &both);
        o.endpoint.rule[1].min_trailing_silence = 500;
        CHECKF(run_stream(p, &o, pcm, n, D, &tight, &err) == 0, "%s", err.msg);
        check_segments(t, fx.asr, &o, &tight);
        printf("    %s: %d segments at 1000 ms of silence after speech, %d at 500 ms\n",
               wenet_method_name(o.method), both.n, tight.n);
        CHECKF(both.n >= 2 && tight.n >= both.n, "%d / %d segments", both.n, tight.n);
        segs_t loose; /* rules that never hold: one segment */
        for (int i = 0; i < CTC_ENDPOINT_RULES; i++)
            o.endpoint.rule[i].min_trailing_silence = o.endpoint.rule[i].min_utterance_length =
                1 << 30;
        CHECKF(run_stream(p, &o, pcm, n, D, &loose, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(loose.n, 1);
        segs_free(&loose);
        if (m == 0)
            greedy_segments = both.n;
        else
            CHECK_EQ_INT(both.n, greedy_segments);
        segs_free(&none), segs_free(&both), segs_free(&tight);
    }
    /* no endpoint: next_segment refuses; bad rules are refused at open */
    wenet_decode_opts_t o = wenet_default_opts(fx.asr);
    o.chunk_size = CHUNK;
    o.endpointing = 1;
    wenet_stream_t *s;
    CHECK_OK(wenet_stream_open(p, &o, &s, &err));
    CHECK_EQ_INT(wenet_stream_next_segment(s, &err), HARK_ERR_INVALID_ARG);
    wenet_stream_close(s);
    o.endpoint.blank_threshold = 1.5f;
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s, &err), HARK_ERR_INVALID_ARG);
    o.endpoint.blank_threshold = 0.8f;
    o.endpoint.rule[2].min_utterance_length = -1;
    CHECK_EQ_INT(wenet_stream_open(p, &o, &s, &err), HARK_ERR_INVALID_ARG);
    hark_free(pcm);
    wenet_stream_pool_destroy(p);
    efx_close(&fx);
}

/* ---- through the family table -------------------------------------------------------------- */

typedef struct {
    int n_segment, n_done, status, sane;
    double last_end_s;
    char error[256];
} seg_got_t;

static void seg_emit(family_item_t *it, const family_event_t *ev)
{
    seg_got_t *g = it->user;
    if (ev->kind == FAMILY_EV_SEGMENT) {
        g->n_segment++;
        g->sane &= ev->asr != NULL && ev->seg_start_s >= g->last_end_s - 1e-9 &&
                   ev->seg_end_s > ev->seg_start_s;
        g->last_end_s = ev->seg_end_s;
    }
    if (ev->kind == FAMILY_EV_DONE) {
        g->n_done++;
        g->status = ev->status;
        if (ev->error)
            snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
}

/* The same stream through the wenet_u2 family: request parameters endpointing and
 * continuous_decoding give SEGMENT events (each with the segment's final result, in order, not
 * overlapping) as many as the engine's endpoints, and a DONE per item (the options are the
 * first item's: later items carry none, as a sequence's later requests); without
 * continuous_decoding one SEGMENT (the stream ends there), and the items after the endpoint
 * still get their DONE; bad
 * parameter values are refused. */
TEST(wenet_stream_endpoint_family)
{
    efx_t fx;
    OPEN_EFX(fx);
    const family_t *f = family_find("wenet_u2");
    CHECK(f && f->stream_open);
    char path[1024], why[256];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    family_model_t *m;
    hark_err_t err = {0};
    family_load_opts_t lo = {.device = -1};
    CHECKF(f->load(path, &lo, NULL, &m, &err) == HARK_OK, "%s", err.msg);
    family_worker_opts_t wo = {.max_batch = 1, .max_seconds = 40.0, .max_sequences = 1};
    family_worker_t *w;
    CHECKF(f->worker_create(m, &wo, &w, &err) == HARK_OK, "%s", err.msg);
    size_t n = fx.jfk.n + 16000 * 3 + fx.lj.n;
    float *pcm = hark_calloc(n, sizeof(float));
    CHECK(pcm != NULL);
    memcpy(pcm, fx.jfk.samples, fx.jfk.n * sizeof(float));
    memcpy(pcm + n - fx.lj.n, fx.lj.samples, fx.lj.n * sizeof(float));
    char opts[512], later[512]; /* a sequence's later requests carry no options: not read */
    CHECK(f->opts_size <= sizeof opts);
    family_params_t none = {NULL, 0};
    CHECKF(f->parse_opts(m, NULL, &none, later, &err) == HARK_OK, "%s", err.msg);
    for (int cont = 1; cont >= 0; cont--) {
        family_param_t rp[3] = {{"endpointing", "true"},
                                {"continuous_decoding", cont ? "true" : "false"},
                                {"decoding_method", "ctc_greedy_search"}};
        family_params_t rq = {rp, 3};
        CHECKF(f->parse_opts(m, NULL, &rq, opts, &err) == HARK_OK, "%s", err.msg);
        void *st;
        CHECKF(f->stream_open(w, &st, &err) == HARK_OK, "%s", err.msg);
        seg_got_t g = {.sane = 1};
        int items = 0;
        for (size_t at = 0; at < n; items++) {
            size_t k = n - at < 10240 ? n - at : 10240;
            family_item_t it = {.opts = at ? later : opts,
                                .pcm = pcm + at,
                                .n = k,
                                .emit = seg_emit,
                                .user = &g,
                                .stream = st,
                                .stream_end = at + k == n};
            family_item_t *list[1] = {&it};
            at += k;
            CHECKF(f->execute(w, list, 1, NULL, &err) == HARK_OK, "%s", err.msg);
            CHECKF(g.status == HARK_OK, "%s", g.error);
        }
        f->stream_close(w, st);
        printf("    continuous_decoding %d: %d SEGMENT events over %d items\n", cont, g.n_segment,
               items);
        CHECK_EQ_INT(g.n_done, items);
        CHECK(g.sane);
        if (cont)
            CHECK(g.n_segment >= 2);
        else
            CHECK_EQ_INT(g.n_segment, 1);
    }
    static const char *const bad[][2] = {{"endpointing", "yes"},
                                         {"endpoint_blank_threshold", "2"},
                                         {"endpoint_silence_after_speech_ms", "-5"},
                                         {"continuous_decoding", "1"}};
    for (int i = 0; i < 4; i++) {
        family_param_t rp[1] = {{bad[i][0], bad[i][1]}};
        family_params_t rq = {rp, 1};
        CHECKF(f->parse_opts(m, NULL, &rq, opts, &err) == HARK_ERR_INVALID_ARG, "%s=%s accepted",
               bad[i][0], bad[i][1]);
        CHECKF(strstr(err.msg, bad[i][0]) != NULL, "%s", err.msg);
    }
    hark_free(pcm);
    f->worker_destroy(w);
    f->unload(m);
    efx_close(&fx);
}

/* ---- the VAD rule (config.pbtxt endpoint_vad_model) ---------------------------------------- */

typedef struct {
    int n_segment, n_done, status;
    double end_s[MAX_SEG];
    char error[256];
} vad_got_t;

static void vad_emit(family_item_t *it, const family_event_t *ev)
{
    vad_got_t *g = it->user;
    if (ev->kind == FAMILY_EV_SEGMENT && g->n_segment < MAX_SEG)
        g->end_s[g->n_segment++] = ev->seg_end_s;
    if (ev->kind == FAMILY_EV_DONE) {
        g->n_done++;
        g->status = ev->status;
        if (ev->error)
            snprintf(g->error, sizeof g->error, "%s", ev->error);
    }
}

/* one stream of pcm through the family, 0.64 s per item; the events into g */
static int vad_stream(test_ctx_t *t, const family_t *f, family_model_t *m, const float *pcm,
                      size_t n, vad_got_t *g)
{
    hark_err_t err = {0};
    family_worker_opts_t wo = {.max_batch = 1, .max_seconds = 40.0, .max_sequences = 1};
    family_worker_t *w;
    if (f->worker_create(m, &wo, &w, &err) != HARK_OK)
        return test_fail(t, __FILE__, __LINE__, "%s", err.msg), -1;
    char opts[512], later[512];
    /* WeNet's CTC rules out of reach: the VAD's is the only one that can fire */
    family_param_t rp[6] = {{"endpointing", "true"},
                            {"continuous_decoding", "true"},
                            {"decoding_method", "ctc_greedy_search"},
                            {"endpoint_silence_no_speech_ms", "1000000000"},
                            {"endpoint_silence_after_speech_ms", "1000000000"},
                            {"endpoint_max_utterance_ms", "1000000000"}};
    family_params_t rq = {rp, 6}, none = {NULL, 0};
    void *st = NULL;
    int rc = f->parse_opts(m, NULL, &rq, opts, &err);
    if (rc == HARK_OK)
        rc = f->parse_opts(m, NULL, &none, later, &err);
    if (rc == HARK_OK)
        rc = f->stream_open(w, &st, &err);
    for (size_t at = 0; rc == HARK_OK && at < n;) {
        size_t k = n - at < 10240 ? n - at : 10240;
        family_item_t it = {.opts = at ? later : opts,
                            .pcm = pcm + at,
                            .n = k,
                            .emit = vad_emit,
                            .user = g,
                            .stream = st,
                            .stream_end = at + k == n};
        family_item_t *list[1] = {&it};
        at += k;
        rc = f->execute(w, list, 1, NULL, &err);
        if (rc == HARK_OK && g->status != HARK_OK)
            rc = g->status, snprintf(err.msg, sizeof err.msg, "%s", g->error);
    }
    f->stream_close(w, st);
    f->worker_destroy(w);
    if (rc != HARK_OK)
        test_fail(t, __FILE__, __LINE__, "%s", err.msg);
    return rc == HARK_OK ? 0 : -1;
}

/* jfk, 3 s of silence, LJ001-0002 with WeNet's rules out of reach: without endpoint_vad_model no
 * endpoint; with the real Silero VAD every SEGMENT ends at one of the speech ends Silero VAD
 * itself finds in that audio (silero_vad_stream with the same rules), no later than the VAD can
 * know it (the 0.5 s of silence) plus an item (0.64 s: the VAD hears audio an item at a time) and
 * a chunk (0.64 s: the encoder's step) after it, each end at most once, one of them in the silence;
 * bad endpoint_vad_* values fail the load. */
TEST(wenet_stream_endpoint_vad_rule)
{
    efx_t fx;
    OPEN_EFX(fx);
    char why[512];
    const char *vad = golden_silero_model(why, sizeof why);
    if (!vad) {
        efx_close(&fx);
        SKIP(why);
    }
    const family_t *f = family_find("wenet_u2");
    char path[1024];
    snprintf(path, sizeof path, "%s/m", golden_wenet_model_dir(why, sizeof why));
    size_t n = fx.jfk.n + 16000 * 3 + fx.lj.n;
    float *pcm = hark_calloc(n, sizeof(float));
    CHECK(pcm != NULL);
    memcpy(pcm, fx.jfk.samples, fx.jfk.n * sizeof(float));
    memcpy(pcm + n - fx.lj.n, fx.lj.samples, fx.lj.n * sizeof(float));
    hark_err_t err = {0};
    family_load_opts_t lo = {.device = -1};
    family_model_t *m;
    /* without the VAD: nothing ends the segment */
    CHECKF(f->load(path, &lo, NULL, &m, &err) == HARK_OK, "%s", err.msg);
    vad_got_t g0 = {0};
    CHECK(vad_stream(t, f, m, pcm, n, &g0) == 0);
    f->unload(m);
    CHECK_EQ_INT(g0.n_segment, 0);
    /* with it */
    family_param_t cp[2] = {{"endpoint_vad_model", vad}, {"endpoint_vad_silence_ms", "500"}};
    family_params_t cfg = {cp, 2};
    CHECKF(f->load(path, &lo, &cfg, &m, &err) == HARK_OK, "%s", err.msg);
    vad_got_t g = {0};
    CHECK(vad_stream(t, f, m, pcm, n, &g) == 0);
    f->unload(m);
    /* Silero VAD's own speech ends on that audio, same rules */
    silero_vad_t *sv;
    CHECKF(silero_vad_load(vad, 0, &sv, &err) == HARK_OK, "%s", err.msg);
    silero_seg_opts_t so;
    silero_seg_default_opts(&so);
    so.min_silence_duration_ms = 500;
    silero_vad_stream_t *vs;
    CHECK(silero_vad_stream_create(sv, 16000, &so, &vs, &err) == HARK_OK);
    CHECK(silero_vad_stream_feed(vs, pcm, n, &err) == HARK_OK);
    CHECK(silero_vad_stream_finish(vs, &err) == HARK_OK);
    silero_segment_t segs[MAX_SEG];
    size_t nv = silero_vad_stream_pop(vs, segs, MAX_SEG);
    silero_vad_stream_destroy(vs);
    silero_vad_destroy(sv);
    printf("    %zu VAD segments; %d SEGMENT events at", nv, g.n_segment);
    for (int i = 0; i < g.n_segment; i++)
        printf(" %.2f", g.end_s[i]);
    printf(" s\n");
    CHECK(g.n_segment >= 1 && (size_t)g.n_segment <= nv);
    int in_gap = 0, used[MAX_SEG] = {0};
    double gap0 = (double)fx.jfk.n / 16000, gap1 = gap0 + 3.0;
    for (int i = 0; i < g.n_segment; i++) {
        int match = -1;
        for (size_t k = 0; k < nv && match < 0; k++) {
            double e = (double)segs[k].end / 16000;
            if (!used[k] && g.end_s[i] >= e - 1e-9 && g.end_s[i] <= e + 1.78 + 1e-9)
                match = (int)k;
        }
        CHECKF(match >= 0, "SEGMENT %d at %.2f s follows no VAD speech end", i, g.end_s[i]);
        used[match] = 1;
        in_gap |= g.end_s[i] > gap0 && g.end_s[i] < gap1;
    }
    CHECK(in_gap);
    static const char *const bad[][2] = {{"endpoint_vad_model", "/nonexistent-vad"},
                                         {"endpoint_vad_threshold", "1.5"},
                                         {"endpoint_vad_silence_ms", "-1"}};
    for (int i = 0; i < 3; i++) {
        family_param_t bp[2] = {{"endpoint_vad_model", vad}, {bad[i][0], bad[i][1]}};
        family_params_t bc = {bp, 2};
        CHECKF(f->load(path, &lo, &bc, &m, &err) != HARK_OK, "%s=%s accepted", bad[i][0],
               bad[i][1]);
        CHECKF(strstr(err.msg, bad[i][0]) != NULL, "%s", err.msg);
    }
    hark_free(pcm);
    efx_close(&fx);
}
