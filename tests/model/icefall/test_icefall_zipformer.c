/* The zipformer recipe (Zipformer2, non-causal) on the CPU.
 * - icefall_zipformer_generated: a checkpoint of random values with the recipe's tensor names
 *   (zipformer_random_ckpt.py, no icefall needed) converted by tools/convert_icefall.py, loaded,
 *   run; a batch gives each utterance what it gets alone (greedy batched, modified beam search);
 *   the length rules and refusals. Needs /usr/bin/python3 with torch and numpy; skips otherwise.
 * - icefall_zipformer_vs_icefall: tools/icefall_zipformer_reference.py builds icefall's own
 *   zipformer (train.get_model with the recipe's flags, seeded weights) for three configurations
 *   (a small one, the recipe's default sizes, one with 4 stacks whose widths go down and up again
 *   and single-value flags) and records encoder_embed, every stack's output, the encoder output,
 *   greedy and modified-beam tokens; hark converts the checkpoint and must give the same. Needs
 *   an icefall source tree ($HARK_ICEFALL_SRC, see the script), ../shared (the wavs, tokens.txt,
 *   the import shims) and /usr/bin/python3 with torch, torchaudio and packaging; skips otherwise.
 */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "support/golden_icefall.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* float32 against float32: max |diff| over max |ref|; measured <= 1.3e-6 (from icefall's fbank)
 * and <= 1.0e-6 (from the waveform, hark's fbank) */
#define TOL_REL 1e-4

static double rel_diff(const float *a, const float *ref, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    return test_max_abs_diff(a, ref, n) / (mx > 0 ? mx : 1);
}

static int hyps_equal(const icefall_hyp_t *a, const icefall_hyp_t *b)
{
    return a->n == b->n && !memcmp(a->tokens, b->tokens, sizeof(int) * (size_t)a->n) &&
           !memcmp(a->times, b->times, sizeof(int) * (size_t)a->n);
}

/* ---- a generated model ---------------------------------------------------------------------- */

#define GEN_FLAGS                                                                                  \
    "--num-encoder-layers 1,2,1,1 --downsampling-factor 1,2,4,2 --feedforward-dim 64 "             \
    "--num-heads 2 --encoder-dim 32,48,32,40 --encoder-unmasked-dim 32 --query-head-dim 8 "        \
    "--value-head-dim 4 --pos-head-dim 2 --pos-dim 16 --cnn-module-kernel 7,15,7,7 "               \
    "--decoder-dim 32 --joiner-dim 48"
#define GEN_CAUSAL "--causal True --chunk-size 8 --left-context-frames 16"

TEST(icefall_zipformer_generated)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    const char *tmp = test_tmpdir(t);
    char tok[600], cmd[4096], dir[600], log[4096];
    snprintf(tok, sizeof tok, "%s/tokens.txt", tmp);
    FILE *f = fopen(tok, "w");
    CHECK(f != NULL);
    fprintf(f, "<blk> 0\n<sos/eos> 1\n<unk> 2\n");
    for (int i = 3; i < 500; i++)
        fprintf(f, "%sw%d %d\n", i % 3 ? "" : "\xe2\x96\x81", i, i);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 tests/model/icefall/zipformer_random_ckpt.py '%s/r.pt' " GEN_FLAGS
             " && /usr/bin/python3 tools/convert_icefall.py --recipe zipformer --checkpoint "
             "'%s/r.pt' --tokens '%s' --output '%s/m' " GEN_FLAGS,
             tmp, tmp, tok, tmp);
    CHECKF(test_run_cmd(t, cmd, log, sizeof log) == 0, "conversion failed: %s", log);
    snprintf(dir, sizeof dir, "%s/m", tmp);
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    const icefall_config_t *c = icefall_config(m);
    CHECK_EQ_INT(c->encoder_type, ICEFALL_ZIPFORMER);
    CHECK_EQ_INT(c->zf.n_stacks, 4);
    CHECK_EQ_INT(c->d, 48);
    CHECK_EQ_INT(c->n_layers, 5);
    CHECK_EQ_INT(c->dec_group_size, 4);
    CHECK_EQ_INT(icefall_min_frames(m), 9);
    CHECK_EQ_INT(icefall_model_frames_out(m, 8), 0);
    CHECK_EQ_INT(icefall_model_frames_out(m, 9), 1);
    CHECK_EQ_INT(icefall_model_frames_out(m, 12), 1);
    CHECK_EQ_INT(icefall_model_frames_out(m, 13), 2);
    CHECK_EQ_INT(icefall_model_frames_out(m, 100), 23);
    CHECK_OK(icefall_worker_create(m, 4, &w, &err));

    /* three utterances of different lengths (the shortest at the encoder's minimum) */
    enum { B = 3 };
    const size_t lens[B] = {9 * 160 - 80, 23456, 40001};
    float *pcm[B];
    unsigned seed = 5;
    for (int b = 0; b < B; b++) {
        pcm[b] = hark_malloc(sizeof(float) * lens[b]);
        for (size_t i = 0; i < lens[b]; i++)
            pcm[b][i] = 0.3f * sinf(0.013f * (float)i * (1.0f + 0.3f * (float)b)) *
                            sinf(0.0007f * (float)i) +
                        0.05f * test_randf(&seed);
    }
    for (int meth = 0; meth < 2; meth++) {
        icefall_run_opts_t o = {.method = meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY};
        icefall_result_t all[B], one;
        CHECK_OK(icefall_run(w, (const float *const *)pcm, lens, B, &o, all, &err));
        int total = 0;
        for (int b = 0; b < B; b++) {
            CHECK_OK(icefall_run(w, (const float *const *)&pcm[b], &lens[b], 1, &o, &one, &err));
            CHECK_EQ_INT(all[b].n_frames,
                         icefall_model_frames_out(m, icefall_num_frames(m, lens[b])));
            CHECKF(hyps_equal(&all[b].best, &one.best),
                   "%s: utterance %d alone gives other tokens than in the batch",
                   icefall_method_name(o.method), b);
            CHECK(!strcmp(all[b].text, one.text));
            total += all[b].best.n;
            icefall_result_free(&one);
        }
        printf("  %s: %d, %d, %d tokens from %d, %d, %d frames\n", icefall_method_name(o.method),
               all[0].best.n, all[1].best.n, all[2].best.n, all[0].n_frames, all[1].n_frames,
               all[2].n_frames);
        CHECKF(total > 0, "%s emitted nothing", icefall_method_name(o.method));
        for (int b = 0; b < B; b++)
            icefall_result_free(&all[b]);
    }
    /* too short: 8 feature frames */
    icefall_result_t r;
    size_t short_n = 8 * 160 - 80;
    icefall_run_opts_t g = {.method = ICEFALL_GREEDY};
    CHECK_EQ_INT(icefall_run(w, (const float *const *)&pcm[1], &short_n, 1, &g, &r, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "at least 9 feature frames") != NULL);
    /* a padded row is refused (icefall's padded rows depend on the padding) */
    float *feats = hark_calloc((size_t)40 * c->feature_dim, sizeof(float));
    float *enc = hark_malloc(sizeof(float) * 16 * (size_t)c->d);
    int len = 0;
    CHECK_EQ_INT(icefall_encode(w, feats, 40, 30, enc, &len, NULL, NULL, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK_OK(icefall_encode(w, feats, 40, 40, enc, &len, NULL, NULL, &err));
    CHECK_EQ_INT(len, icefall_model_frames_out(m, 40));
    for (int i = 0; i < len * c->d; i++)
        CHECK(isfinite(enc[i]));
    hark_free(feats);
    hark_free(enc);
    for (int b = 0; b < B; b++)
        hark_free(pcm[b]);
    icefall_worker_destroy(w);
    icefall_destroy(m);

    /* the causal model: the full utterance with its chunk mask, and chunk by chunk; they agree
     * but for the last frames (the stream sees the tail padding) */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 tests/model/icefall/zipformer_random_ckpt.py '%s/c.pt' " GEN_FLAGS
             " " GEN_CAUSAL " && /usr/bin/python3 tools/convert_icefall.py --recipe zipformer "
             "--checkpoint '%s/c.pt' --tokens '%s' --output '%s/mc' " GEN_FLAGS " " GEN_CAUSAL,
             tmp, tmp, tok, tmp);
    CHECKF(test_run_cmd(t, cmd, log, sizeof log) == 0, "causal conversion failed: %s", log);
    snprintf(dir, sizeof dir, "%s/mc", tmp);
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    c = icefall_config(m);
    CHECK(c->zf.causal && c->zf.chunk == 8 && c->zf.left_chunks == 2 && c->zf.left_frames == 16);
    CHECK_EQ_INT(icefall_zf_stream_step_frames(m), 29);
    CHECK_OK(icefall_worker_create(m, 4, &w, &err));
    const int T = 197; /* 95 frames at 50 Hz: 11 chunks of 8 and a partial one */
    feats = hark_malloc(sizeof(float) * (size_t)T * c->feature_dim);
    for (int i = 0; i < T * c->feature_dim; i++)
        feats[i] = 2.0f * test_randf(&seed) - 4.0f;
    enc = hark_malloc(sizeof(float) * (size_t)icefall_model_frames_out(m, T) * c->d);
    CHECK_OK(icefall_encode(w, feats, T, T, enc, &len, NULL, NULL, &err));
    float *se = NULL;
    int slen = 0;
    CHECK_OK(icefall_zf_stream_encode(w, feats, T, &se, &slen, &err));
    /* (197 + 43) / 16 steps of 4 frames */
    CHECK_EQ_INT(slen, 60);
    CHECK(slen >= len);
    const int cmp = len - 6;
    double d = rel_diff(se, enc, (size_t)cmp * c->d), dl = rel_diff(se, enc, (size_t)len * c->d);
    printf("  causal: the first %d of %d frames chunk by chunk vs the whole utterance %.2e (with "
           "the last ones %.2e)\n",
           cmp, len, d, dl);
    CHECKF(d <= 1e-5, "causal: streaming differs from the chunk-masked utterance by %.3g", d);
    CHECKF(dl > 1e-5, "causal: the tail padding made no difference (%.3g)", dl);
    /* a fresh stream again from its start: the same */
    icefall_zf_stream_t *zs = NULL;
    CHECK_OK(icefall_zf_stream_create(m, &zs, &err));
    float *buf = hark_malloc(sizeof(float) * 29 * (size_t)c->feature_dim);
    float *one = hark_malloc(sizeof(float) * 4 * (size_t)c->d);
    for (int rep = 0; rep < 2; rep++) {
        icefall_zf_stream_reset(zs);
        for (int st = 0; st < 3; st++) {
            memcpy(buf, feats + (size_t)st * 16 * c->feature_dim,
                   sizeof(float) * 29 * (size_t)c->feature_dim);
            CHECK_OK(icefall_zf_stream_step(w, zs, buf, one, &err));
            CHECK(test_max_abs_diff(one, se + (size_t)st * 4 * c->d, (size_t)4 * c->d) == 0);
        }
    }
    icefall_zf_stream_destroy(zs);
    hark_free(buf);
    hark_free(one);
    hark_free(se);
    hark_free(feats);
    hark_free(enc);
    icefall_worker_destroy(w);
    /* the non-causal model cannot stream */
    snprintf(dir, sizeof dir, "%s/m", tmp);
    icefall_model_t *nc = NULL;
    CHECK_OK(icefall_load(dir, 1, &nc, &err));
    CHECK_EQ_INT(icefall_zf_stream_create(nc, &zs, &err), HARK_ERR_UNSUPPORTED);
    icefall_destroy(nc);
    icefall_destroy(m);
    /* a causal model.json with a list of chunk sizes is refused */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]; j=json.load(open(p)); "
             "j['encoder']['chunk_size']=[8,16]; json.dump(j,open(p,'w'))\" '%s/mc/1/model.json'",
             tmp);
    CHECK_EQ_INT(system(cmd), 0);
    snprintf(dir, sizeof dir, "%s/mc", tmp);
    CHECK(icefall_load(dir, 1, &m, &err) == HARK_ERR_FORMAT);
    CHECK(strstr(err.msg, "one chunk size") != NULL);
}

/* ---- against icefall's own code ------------------------------------------------------------- */

static void compare_npy(test_ctx_t *t, const char *dir, const char *name, const float *mine,
                        int rows, int cols, int cfg, double *worst)
{
    char path[800];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    npy_array_t ref = {0};
    CHECKF(npy_load_f32(path, &ref) == 0, "%s: cannot read", path);
    CHECKF(ref.count == (size_t)rows * cols, "config %d %s: %d x %d, icefall has %zu values", cfg,
           name, rows, cols, ref.count);
    double d = rel_diff(mine, ref.data, ref.count);
    *worst = d > *worst ? d : *worst;
    CHECKF(d <= TOL_REL, "config %d %s: max |diff| / max |ref| %.3g", cfg, name, d);
    npy_free(&ref);
}

typedef struct {
    test_ctx_t *t;
    const char *dir;
    int cfg, n;
    double worst;
} stage_cmp_t;

static void on_stage(void *user, const char *name, const float *data, int rows, int cols)
{
    stage_cmp_t *s = user;
    if (strcmp(name, "encoder_embed_out") && strncmp(name, "stack", 5))
        return;
    compare_npy(s->t, s->dir, name, data, rows, cols, s->cfg, &s->worst);
    s->n++;
}

TEST(icefall_zipformer_vs_icefall)
{
    const char *src = NULL, *why;
    char shims[1024];
    if ((why = golden_icefall_ref_missing(&src, shims, sizeof shims)))
        SKIP(why);
    NEED_SHARED(GOLDEN_ICEFALL);
    const char *g = test_shared(GOLDEN_ICEFALL);
    /* the recipe's model flags (the reference script and the converter take the same), the wav */
    static const struct {
        const char *flags, *utt;
        int stream; /* also chunk by chunk (icefall's streaming_decode.py) */
    } cfgs[] = {
        {"--num-encoder-layers 1,1,2,1,1,1 --downsampling-factor 1,2,4,8,4,2 "
         "--feedforward-dim 96,128,192,256,192,128 --num-heads 2,2,4,4,2,2 "
         "--encoder-dim 48,64,96,128,96,64 --encoder-unmasked-dim 32,32,48,48,48,32 "
         "--query-head-dim 8 --value-head-dim 6 --pos-head-dim 2 --pos-dim 32 "
         "--cnn-module-kernel 31,15,15,7,15,31 --decoder-dim 128 --joiner-dim 160",
         "jfk", 0},
        {"", "lj-LJ001-0013", 0}, /* the recipe's defaults: 65 M parameters */
        {"--num-encoder-layers 1 --downsampling-factor 1,2,4,2 --feedforward-dim 128 "
         "--num-heads 3 --encoder-dim 64,96,64,80 --encoder-unmasked-dim 48 --query-head-dim 12 "
         "--value-head-dim 8 --pos-head-dim 3 --pos-dim 24 --cnn-module-kernel 15 "
         "--decoder-dim 64 --joiner-dim 96 --context-size 3",
         "librivox-sense_and_sensibility_01_austen_64kb-0890", 0},
        /* causal, full utterance with the chunk mask: chunks of 16 frames, 4 to the left */
        {"--num-encoder-layers 1,1,2,1,1,1 --downsampling-factor 1,2,4,8,4,2 "
         "--feedforward-dim 96,128,192,256,192,128 --num-heads 2,2,4,4,2,2 "
         "--encoder-dim 48,64,96,128,96,64 --encoder-unmasked-dim 32,32,48,48,48,32 "
         "--query-head-dim 8 --value-head-dim 6 --pos-head-dim 2 --pos-dim 32 "
         "--cnn-module-kernel 31,15,15,7,15,31 --decoder-dim 128 --joiner-dim 160 "
         "--causal True --chunk-size 16 --left-context-frames 64",
         "jfk", 1},
        /* causal, chunks of 8 frames (2 at the 4x stack: shorter than its kernel), every chunk to
         * the left */
        {"--num-encoder-layers 1 --downsampling-factor 1,2,4,2 --feedforward-dim 128 "
         "--num-heads 3 --encoder-dim 64,96,64,80 --encoder-unmasked-dim 48 --query-head-dim 12 "
         "--value-head-dim 8 --pos-head-dim 3 --pos-dim 24 --cnn-module-kernel 15 "
         "--decoder-dim 64 --joiner-dim 96 --causal True --chunk-size 8 "
         "--left-context-frames -1",
         "lj-LJ001-0013", 0},
        /* the recipe's default sizes, causal: chunks of 32 frames, 128 to the left */
        {"--causal True --chunk-size 32 --left-context-frames 128", "lj-LJ001-0013", 1},
    };
    for (int c = 0; c < (int)(sizeof cfgs / sizeof *cfgs); c++) {
        char out[700], cmd[6000], path[800];
        snprintf(out, sizeof out, "%s/cfg%d", test_tmpdir(t), c);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/icefall_zipformer_reference.py --icefall-root '%s' "
                 "--shims '%s' --wav '%s/wavs/%s.wav' --out '%s' %s %s > '%s/ref.log' 2>&1",
                 src, shims, g, cfgs[c].utt, out, cfgs[c].flags,
                 cfgs[c].stream ? "--streaming" : "", test_tmpdir(t));
        CHECKF(system(cmd) == 0, "icefall_zipformer_reference.py failed (see %s/ref.log)",
               test_tmpdir(t));
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/convert_icefall.py --recipe zipformer --checkpoint "
                 "'%s/pretrained.pt' --tokens '%s/tokens.txt' --output '%s/m' %s > /dev/null",
                 out, g, out, cfgs[c].flags);
        CHECKF(system(cmd) == 0, "convert_icefall.py failed on config %d", c);
        snprintf(path, sizeof path, "%s/m", out);
        hark_err_t err = {0};
        icefall_model_t *m = NULL;
        icefall_worker_t *w = NULL;
        CHECK_OK(icefall_load(path, 1, &m, &err));
        CHECK_OK(icefall_worker_create(m, 12, &w, &err));
        const icefall_config_t *cf = icefall_config(m);
        snprintf(path, sizeof path, "%s/ref.json", out);
        cJSON *ref = test_read_json(path);
        CHECK(ref != NULL);

        /* the encoder alone, from icefall's fbank: every stage */
        npy_array_t fb = {0}, pcm = {0};
        snprintf(path, sizeof path, "%s/fbank.npy", out);
        CHECK_OK(npy_load_f32(path, &fb));
        int T = (int)fb.shape[0], Tp = icefall_model_frames_out(m, T), len = 0;
        float *enc = hark_malloc(sizeof(float) * (size_t)Tp * cf->d);
        stage_cmp_t sc = {.t = t, .dir = out, .cfg = c};
        CHECK_OK(icefall_encode(w, fb.data, T, T, enc, &len, on_stage, &sc, &err));
        CHECK_EQ_INT(sc.n, 1 + cf->zf.n_stacks);
        CHECK_EQ_INT(len, cJSON_GetObjectItemCaseSensitive(ref, "encoder_out_len")->valueint);
        double worst_enc = 0;
        compare_npy(t, out, "encoder_out", enc, len, cf->d, c, &worst_enc);

        /* end to end from the waveform: hark's fbank, encoder, projection, searches */
        CHECK_OK(golden_icefall_npy(&pcm, cfgs[c].utt, "waveform.npy"));
        int T2 = icefall_num_frames(m, pcm.count);
        CHECK_EQ_INT(T2, T);
        float *fb2 = hark_malloc(sizeof(float) * (size_t)T2 * cf->feature_dim);
        CHECK_OK(feat_compute(icefall_feat_plan(m), pcm.data, pcm.count, fb2, &err));
        CHECK_OK(icefall_encode(w, fb2, T2, T2, enc, &len, NULL, NULL, &err));
        double worst_wav = 0;
        compare_npy(t, out, "encoder_out", enc, len, cf->d, c, &worst_wav);
        float *ep = hark_malloc(sizeof(float) * (size_t)len * cf->joiner_dim);
        icefall_encoder_proj(m, enc, len, ep);
        icefall_hyp_t gh, bh;
        CHECK_OK(icefall_greedy_search(m, (const float *const *)&ep, &len, 1, &gh, &err));
        CHECK_OK(icefall_modified_beam_search(m, ep, len, 4, &bh, NULL, NULL, &err));
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(ref, "greedy_search");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(ref, "modified_beam_search");
        printf("  config %d (%d stacks, %d layers, output dim %d, context %d): stages <= %.2e, "
               "encoder_out %.2e (icefall's fbank) %.2e (the waveform), greedy %d tokens, "
               "modified_beam_search %d (icefall's min top1-top2 margin %.4f)\n",
               c, cf->zf.n_stacks, cf->n_layers, cf->d, cf->context_size, sc.worst, worst_enc,
               worst_wav, gh.n, bh.n,
               cJSON_GetObjectItemCaseSensitive(gs, "min_top1_top2_margin")->valuedouble);
        CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(gs, "tokens"), gh.tokens,
                                      gh.n) &&
                   golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(gs, "timestamps"),
                                          gh.times, gh.n),
               "config %d: greedy tokens/timestamps differ from icefall's", c);
        CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(ms, "tokens"), bh.tokens,
                                      bh.n) &&
                   golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(ms, "timestamps"),
                                          bh.times, bh.n),
               "config %d: modified_beam_search tokens/timestamps differ from icefall's", c);
        CHECKF(gh.n > 0, "config %d: greedy emitted nothing", c);
        /* `hark transcribe --decoding-method` on the wav gives the text of icefall's tokens */
        for (int k = 0; k < 2; k++) {
            const icefall_hyp_t *h = k ? &bh : &gh;
            char *text = NULL, want[8192], got[8192] = "";
            CHECK_OK(icefall_text(m, h, &text, &err));
            snprintf(want, sizeof want, "%s/wavs/%s.wav %s\n", g, cfgs[c].utt, text);
            hark_free(text);
            snprintf(cmd, sizeof cmd,
                     "%s transcribe --model '%s/m' --decoding-method %s '%s/wavs/%s.wav' 2>&1",
                     test_hark_bin(), out, k ? "modified_beam_search" : "greedy_search", g,
                     cfgs[c].utt);
            CHECK_EQ_INT(test_run_cmd(t, cmd, got, sizeof got), 0);
            CHECKF(!strcmp(got, want), "config %d, hark transcribe:\n  got  %s  want %s", c, got,
                   want);
        }
        if (cfgs[c].stream) {
            /* chunk by chunk from icefall's fbank: every chunk's output, then greedy search over
             * them (icefall's streaming greedy search continues its hypothesis across chunks) */
            float *se = NULL;
            int slen = 0;
            CHECK_OK(icefall_zf_stream_encode(w, fb.data, T, &se, &slen, &err));
            double worst_st = 0;
            compare_npy(t, out, "stream_encoder_out", se, slen, cf->d, c, &worst_st);
            float *sp = hark_malloc(sizeof(float) * (size_t)slen * cf->joiner_dim);
            icefall_encoder_proj(m, se, slen, sp);
            icefall_hyp_t sh;
            CHECK_OK(icefall_greedy_search(m, (const float *const *)&sp, &slen, 1, &sh, &err));
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(ref, "streaming");
            printf("  config %d streaming: %d chunks, encoder_out %.2e, greedy %d tokens\n", c,
                   cJSON_GetObjectItemCaseSensitive(st, "num_chunks")->valueint, worst_st, sh.n);
            CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(st, "greedy_tokens"),
                                          sh.tokens, sh.n),
                   "config %d: streaming greedy tokens differ from icefall's", c);
            icefall_hyp_free(&sh);
            hark_free(sp);
            hark_free(se);
        }
        icefall_hyp_free(&gh);
        icefall_hyp_free(&bh);
        hark_free(ep);
        hark_free(fb2);
        hark_free(enc);
        npy_free(&fb);
        npy_free(&pcm);
        cJSON_Delete(ref);
        icefall_worker_destroy(w);
        icefall_destroy(m);
    }
}
