/* Configurations the T1 goldens do not cover, against icefall's own code:
 * tools/icefall_reference.py builds a seeded pruned_transducer_stateless3 of other sizes (heads,
 * head dim, layers, decoder and joiner widths, context size 3) and records its fbank, encoder
 * output, greedy and modified-beam tokens and timestamps; hark converts the checkpoint and must
 * give the same. Needs an icefall source tree ($HARK_ICEFALL_SRC, see the script), ../shared (a
 * wav, tokens.txt, the import shims) and /usr/bin/python3 with torch and torchaudio; skips
 * otherwise. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "support/golden_icefall.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOL_ENC 2e-5 /* measured 2.1e-6 from the waveform (hark's fbank included) */

TEST(icefall_other_configs_vs_icefall)
{
    const char *src = NULL, *why;
    char shims[1024];
    if ((why = golden_icefall_ref_missing(&src, shims, sizeof shims)))
        SKIP(why);
    NEED_SHARED(GOLDEN_ICEFALL);
    const char *g = test_shared(GOLDEN_ICEFALL);
    /* icefall_reference.py's flags, convert_icefall.py's (the recipe's spelling), the wav */
    static const struct {
        const char *flags, *conv, *wav;
    } cfgs[] = {
        {"--encoder-dim 192 --nhead 6 --dim-feedforward 384 --num-encoder-layers 2 "
         "--decoder-dim 96 --joiner-dim 128 --context-size 3",
         "--context-size 3", "jfk.wav"},
        {"--encoder-dim 144 --nhead 4 --dim-feedforward 576 --num-encoder-layers 4 "
         "--decoder-dim 64 --joiner-dim 80 --context-size 2 --seed 11 --blank-shift 5",
         "", "librivox-sense_and_sensibility_01_austen_64kb-0890.wav"},
        {"--encoder-dim 128 --nhead 2 --dim-feedforward 256 --num-encoder-layers 2 "
         "--decoder-dim 64 --joiner-dim 64 --context-size 2 --seed 13 --blank-shift 5 "
         "--causal-convolution",
         "--causal-convolution True", "lj-LJ001-0013.wav"},
        {"--encoder-dim 128 --nhead 2 --dim-feedforward 256 --num-encoder-layers 2 "
         "--decoder-dim 64 --joiner-dim 64 --context-size 2 --seed 13 --blank-shift 5 "
         "--causal-convolution --simulate-streaming --decode-chunk-size 8 --left-context 16",
         "--causal-convolution True --simulate-streaming True --decode-chunk-size 8 "
         "--left-context 16",
         "jfk.wav"},
    };
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        char out[700], wav[1024], cmd[6000];
        snprintf(out, sizeof out, "%s/cfg%zu", test_tmpdir(t), c);
        snprintf(wav, sizeof wav, "%s/wavs/%s", g, cfgs[c].wav);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/icefall_reference.py --icefall-root '%s' --shims '%s' "
                 "--wav '%s' --out '%s' %s > '%s/ref.log' 2>&1",
                 src, shims, wav, out, cfgs[c].flags, test_tmpdir(t));
        CHECKF(system(cmd) == 0, "icefall_reference.py failed (see %s/ref.log)", test_tmpdir(t));
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 tools/convert_icefall.py --recipe pruned_transducer_stateless3 "
                 "--checkpoint '%s/pretrained.pt' --tokens '%s/tokens.txt' --output '%s/m' %s "
                 "> /dev/null",
                 out, g, out, cfgs[c].conv);
        CHECKF(system(cmd) == 0, "convert_icefall.py failed on config %zu", c);
        char path[800];
        snprintf(path, sizeof path, "%s/m", out);
        hark_err_t err = {0};
        icefall_model_t *m = NULL;
        icefall_worker_t *w = NULL;
        CHECK_OK(icefall_load(path, 1, &m, &err));
        CHECK_OK(icefall_worker_create(m, 12, &w, &err));
        snprintf(path, sizeof path, "%s/ref.json", out);
        cJSON *ref = test_read_json(path);
        CHECK(ref != NULL);
        /* from the waveform: hark's fbank, encoder, projection */
        npy_array_t pcm = {0}, want = {0};
        const char *utt_dir = strstr(cfgs[c].wav, ".wav");
        char utt[256];
        snprintf(utt, sizeof utt, "%.*s", (int)(utt_dir - cfgs[c].wav), cfgs[c].wav);
        CHECK_OK(golden_icefall_npy(&pcm, utt, "waveform.npy"));
        snprintf(path, sizeof path, "%s/encoder_out.npy", out);
        CHECK_OK(npy_load_f32(path, &want));
        const icefall_config_t *cf = icefall_config(m);
        int T = icefall_num_frames(m, pcm.count), len = 0;
        float *fb = hark_malloc(sizeof(float) * (size_t)T * cf->feature_dim);
        float *enc = hark_malloc(sizeof(float) * (size_t)icefall_frames_out(T) * cf->d);
        CHECK_OK(feat_compute(icefall_feat_plan(m), pcm.data, pcm.count, fb, &err));
        CHECK_OK(icefall_encode(w, fb, T, T, enc, &len, NULL, NULL, &err));
        CHECK_EQ_INT((size_t)len * cf->d, want.count);
        double md = test_max_abs_diff(enc, want.data, want.count);
        printf("  config %zu (d %d, %d heads, %d layers, context %d%s): encoder_out max |diff| "
               "%.2e\n",
               c, cf->d, cf->nhead, cf->n_layers, cf->context_size,
               cf->chunk_size ? ", causal conv, simulated streaming"
               : cf->causal   ? ", causal conv"
                              : "",
               md);
        CHECKF(md <= TOL_ENC, "config %zu: encoder_out max |diff| %.3g", c, md);
        float *ep = hark_malloc(sizeof(float) * (size_t)len * cf->joiner_dim);
        icefall_encoder_proj(m, enc, len, ep);
        icefall_hyp_t gh, bh;
        CHECK_OK(icefall_greedy_search(m, (const float *const *)&ep, &len, 1, &gh, &err));
        CHECK_OK(icefall_modified_beam_search(m, ep, len, 4, &bh, NULL, NULL, &err));
        const cJSON *gs = cJSON_GetObjectItemCaseSensitive(ref, "greedy_search");
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(ref, "modified_beam_search");
        printf("  config %zu: greedy %d tokens, modified_beam_search %d\n", c, gh.n, bh.n);
        CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(gs, "tokens"), gh.tokens,
                                      gh.n) &&
                   golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(gs, "timestamps"),
                                          gh.times, gh.n),
               "config %zu: greedy tokens/timestamps differ from icefall's", c);
        CHECKF(golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(ms, "tokens"), bh.tokens,
                                      bh.n) &&
                   golden_json_ints_equal(cJSON_GetObjectItemCaseSensitive(ms, "timestamps"),
                                          bh.times, bh.n),
               "config %zu: modified_beam_search tokens/timestamps differ from icefall's", c);
        icefall_hyp_free(&gh);
        icefall_hyp_free(&bh);
        hark_free(ep);
        hark_free(fb);
        hark_free(enc);
        npy_free(&pcm);
        npy_free(&want);
        cJSON_Delete(ref);
        icefall_worker_destroy(w);
        icefall_destroy(m);
    }
}
