/* Integration tests of the hark binary: `hark features` and `hark transcribe` on real audio
 * (outputs compared with WeNet's golden data), and their error paths (exit status + message). */
#include "test.h"

#include "core/npy.h"
#include "support/golden_model.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TEST(cli_features_fbank_matches_golden)
{
    NEED_SHARED(GOLDEN_WENET "/wavs/jfk.wav");
    char cmd[4096], out[8192], npy[512];
    snprintf(npy, sizeof npy, "%s/f.npy", test_tmpdir(t));
    snprintf(cmd, sizeof cmd, "%s features %s/wavs/jfk.wav --kind fbank --cmvn %s/global_cmvn --npy %s",
             test_hark_bin(), test_shared(GOLDEN_WENET), test_shared(GOLDEN_WENET), npy);
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    npy_array_t a, ref;
    CHECK_OK(npy_load_f32(npy, &a));
    char rp[1024];
    snprintf(rp, sizeof rp, "%s/goldens/jfk/feats_cmvn.npy", test_shared(GOLDEN_WENET));
    CHECK_OK(npy_load_f32(rp, &ref));
    CHECK(a.ndim == 2 && a.shape[0] == ref.shape[0] && a.shape[1] == 80);
    CHECK(test_max_abs_diff(a.data, ref.data, a.count) <= 1e-4);
    npy_free(&a);
    npy_free(&ref);
}

TEST(cli_features_errors)
{
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s features /nonexistent.wav --kind fbank --npy /tmp/x.npy", test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 1);
    CHECKF(strstr(out, "/nonexistent.wav") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s features x.wav --kind mfcc --npy /tmp/x.npy", test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "mfcc") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s features", test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
}

TEST(cli_transcribe_golden_json_and_dump)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    char cmd[8192], out[65536], dump[512];
    snprintf(dump, sizeof dump, "%s/dump", test_tmpdir(t));
    snprintf(cmd, sizeof cmd,
             "%s transcribe --model %s/m --format json --decoding-method attention_rescoring "
             "--dump-dir %s %s/wavs/cards-001.wav",
             test_hark_bin(), dir, dump, test_shared(GOLDEN_WENET));
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "\"nbest\"") && strstr(out, "\"times_ms\"") && strstr(out, "\"confidence\""),
           "%s", out);
    /* the dumped stages equal WeNet's */
    static const char *pairs[][2] = {{"feats_cmvn.npy", "feats_cmvn.npy"},
                                     {"enc_out.npy", "enc_full.npy"},
                                     {"ctc_logprobs.npy", "ctc_logprobs_full.npy"}};
    for (int i = 0; i < 3; i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/cards-001/%s", dump, pairs[i][0]);
        snprintf(b, sizeof b, "%s/goldens/cards-001/%s", test_shared(GOLDEN_WENET), pairs[i][1]);
        npy_array_t x, y;
        CHECKF(npy_load_f32(a, &x) == 0, "missing %s", a);
        CHECK_OK(npy_load_f32(b, &y));
        CHECK_EQ_INT(x.count, y.count);
        double e = test_rel_rms(x.data, y.data, x.count);
        CHECKF(e <= 1e-4, "%s: rel rms %.3g", pairs[i][0], e);
        npy_free(&x);
        npy_free(&y);
    }
    snprintf(cmd, sizeof cmd, "ls %s/cards-001/layer0_out.npy %s/cards-001/embed_out.npy", dump, dump);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 0);
    /* text output; an unreadable file fails alone (exit 1), the good one is still decoded */
    snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --decoding-method ctc_greedy_search %s/wavs/cards-001.wav /nonexistent.wav",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 1);
    CHECKF(strstr(out, "cards-001.wav ") && strstr(out, "/nonexistent.wav"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s transcribe --model /nonexistent x.wav", test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 1);
    snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --decoding-method viterbi x.wav", test_hark_bin(), dir);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "viterbi") != NULL, "%s", out);
}

TEST(cli_bench_synthetic_and_errors)
{
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s bench --synthetic conformer-librispeech --batch 1 --seconds 1 --min-time 0",
             test_hark_bin());
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(strstr(out, "\"batch\": 1") && strstr(out, "\"rtfx\"") && strstr(out, "\"tflops\""), "%s", out);
    snprintf(cmd, sizeof cmd, "%s bench --synthetic conformer-tiny", test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "conformer-librispeech") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s bench --synthetic conformer-librispeech --compare-pytorch",
             test_hark_bin());
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "same weights") != NULL, "%s", out);
}

/* `hark transcribe --chunk-size 16 --left-chunks L`: the chunk mask offline, WeNet's masked (=
 * streaming) results for every utterance; a bad chunk size is refused by name. */
TEST(cli_transcribe_chunk_mask)
{
    char why[512];
    const char *dir = golden_wenet_model_dir(why, sizeof why);
    if (!dir)
        SKIP(why);
    struct cJSON *res = golden_wenet_results();
    CHECK(res != NULL);
    static const char *const utts[] = {"librispeech-1995-1837-0001", "jfk",
                                       "sense_and_sensibility_01_austen_64kb-0880", "LJ001-0002",
                                       "cards-001"};
    static const int lefts[2] = {-1, 4};
    char cmd[8192], out[65536];
    for (int li = 0; li < 2; li++) {
        int k = snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --chunk-size 16 --left-chunks %d",
                         test_hark_bin(), dir, lefts[li]);
        for (int u = 0; u < 5; u++)
            k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %s/wavs/%s.wav",
                          test_shared(GOLDEN_WENET), utts[u]);
        CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
        char mode[48];
        snprintf(mode, sizeof mode, "masked_chunk16_left%d", lefts[li]);
        for (int u = 0; u < 5; u++) {
            cJSON *r = cJSON_GetObjectItem(
                cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, utts[u]), mode),
                                    "attention_rescoring"),
                "text");
            char line[2048];
            snprintf(line, sizeof line, "%s.wav %s\n", utts[u], r->valuestring);
            CHECKF(strstr(out, line) != NULL, "left %d: no line '%s' in:\n%s", lefts[li], line, out);
        }
    }
    cJSON_Delete(res);
    snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --chunk-size 16 --left-chunks -3 x.wav",
             test_hark_bin(), dir);
    CHECK(test_run_cmd(t, cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "--left-chunks") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s transcribe --model %s/m --chunk-size 5000 %s/wavs/jfk.wav",
             test_hark_bin(), dir, test_shared(GOLDEN_WENET));
    CHECK(test_run_cmd(t, cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "decoding_chunk_size") != NULL, "%s", out);
}
