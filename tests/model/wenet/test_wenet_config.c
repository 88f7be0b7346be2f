/* Tests for src/model/wenet/wenet_config.c: a valid model.json, each invalid or unsupported field
 * refused with a message naming it, and WeNet's subsampled-length formulas. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/wenet/wenet_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The golden model's model.json, as tools/convert_wenet.py writes it. */
static const char *GOOD =
    "{\"format_version\": 1, \"family\": \"wenet_u2\","
    " \"frontend\": {\"num_mel_bins\": 80, \"sample_rate\": 16000, \"frame_length_ms\": 25,"
    "  \"frame_shift_ms\": 10, \"cmvn\": true},"
    " \"encoder\": {\"type\": \"conformer\", \"input_dim\": 80, \"d_model\": 256, \"n_heads\": 4,"
    "  \"ffn_dim\": 1024, \"n_blocks\": 3, \"input_layer\": \"conv2d\", \"pos_enc\": \"rel_pos\","
    "  \"macaron_style\": true, \"use_cnn_module\": true, \"cnn_module_kernel\": 15,"
    "  \"causal\": true, \"cnn_module_norm\": \"layer_norm\", \"activation\": \"swish\","
    "  \"normalize_before\": true, \"max_len\": 5000, \"static_chunk_size\": 0,"
    "  \"use_dynamic_chunk\": true},"
    " \"decoder\": {\"type\": \"bitransformer\", \"n_heads\": 4, \"ffn_dim\": 1024,"
    "  \"n_blocks\": 1, \"r_n_blocks\": 1, \"normalize_before\": true},"
    " \"vocab\": {\"size\": 5002, \"sos\": 5001, \"eos\": 5001, \"blank\": 0},"
    " \"decoding\": {\"ctc_weight\": 0.5, \"reverse_weight\": 0.3}}";

static const char *write_json(test_ctx_t *t, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/model.json", test_tmpdir(t));
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

TEST(wenet_config_valid)
{
    wenet_config_t c;
    hark_err_t err = {0};
    CHECKF(wenet_config_load(write_json(t, GOOD), &c, &err) == HARK_OK, "%s", err.msg);
    CHECK(c.num_mel_bins == 80 && c.sample_rate == 16000 && c.frame_length_ms == 25 &&
          c.frame_shift_ms == 10 && c.has_cmvn == 1);
    CHECK(c.input_dim == 80 && c.d_model == 256 && c.n_heads == 4 && c.ffn_dim == 1024 &&
          c.n_blocks == 3);
    CHECK(c.subsample == SUBSAMPLE_CONV2D && c.pos == POS_REL && c.macaron && c.use_cnn_module);
    CHECK(c.cnn_kernel == 15 && c.causal && c.cnn_norm == CNN_NORM_LAYER);
    CHECK(c.activation == ACT_SWISH && c.normalize_before && c.max_len == 5000);
    CHECK(c.static_chunk_size == 0 && c.use_dynamic_chunk == 1);
    CHECK(c.decoder == DECODER_BITRANSFORMER && c.dec_heads == 4 && c.dec_ffn_dim == 1024 &&
          c.dec_blocks == 1 && c.dec_r_blocks == 1 && c.dec_normalize_before);
    CHECK(c.vocab_size == 5002 && c.sos == 5001 && c.eos == 5001 && c.blank == 0);
    CHECK(c.ctc_weight == 0.5f && c.reverse_weight == 0.3f);
}

TEST(wenet_config_model_dir)
{
    /* DIR/1/model.json is found from DIR */
    char d[512], p[600];
    snprintf(d, sizeof d, "%s/m", test_tmpdir(t));
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/1", d);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/1/model.json", d);
    FILE *f = fopen(p, "w");
    fputs(GOOD, f);
    fclose(f);
    wenet_config_t c;
    hark_err_t err = {0};
    CHECKF(wenet_config_load(d, &c, &err) == HARK_OK, "%s", err.msg);
    CHECK(c.d_model == 256);
    snprintf(p, sizeof p, "%s/1", d);
    CHECKF(wenet_config_load(p, &c, &err) == HARK_OK, "%s", err.msg);
    snprintf(p, sizeof p, "%s/absent", d);
    CHECK(wenet_config_load(p, &c, &err) == HARK_ERR_IO);
    CHECK(strstr(err.msg, "absent") != NULL);
}

/* Applies one edit to the good config: sets `sec.key` (sec "" = top level) to the JSON `value`,
 * or deletes it when value is NULL; expects failure with `needle` in the message. */
static int refuse(test_ctx_t *t, const char *sec, const char *key, const char *value,
                  const char *needle)
{
    cJSON *root = cJSON_Parse(GOOD);
    cJSON *obj = *sec ? cJSON_GetObjectItemCaseSensitive(root, sec) : root;
    if (value && cJSON_GetObjectItemCaseSensitive(obj, key))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, key, cJSON_Parse(value));
    else if (value)
        cJSON_AddItemToObject(obj, key, cJSON_Parse(value));
    else
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    const char *p = write_json(t, text);
    free(text);
    wenet_config_t c;
    hark_err_t err = {0};
    int rc = wenet_config_load(p, &c, &err);
    if (rc == HARK_OK) {
        test_fail(t, __FILE__, __LINE__, "%s.%s = %s accepted", sec, key, value ? value : "(none)");
        return 0;
    }
    if (!strstr(err.msg, needle)) {
        test_fail(t, __FILE__, __LINE__, "%s.%s = %s: message '%s' lacks '%s'", sec, key,
                  value ? value : "(none)", err.msg, needle);
        return 0;
    }
    return 1;
}

TEST(wenet_config_refuses_unsupported)
{
    CHECK(refuse(t, "encoder", "cnn_module_norm", "\"rms_norm\"",
                 "encoder.cnn_module_norm: 'rms_norm' is not supported"));
    CHECK(refuse(t, "encoder", "type", "\"transformer\"", "encoder.type: 'transformer'"));
    CHECK(refuse(t, "encoder", "input_layer", "\"conv2d2\"", "encoder.input_layer: 'conv2d2'"));
    CHECK(refuse(t, "encoder", "pos_enc", "\"rope_pos\"", "encoder.pos_enc: 'rope_pos'"));
    CHECK(refuse(t, "encoder", "activation", "\"hardtanh\"", "encoder.activation: 'hardtanh'"));
    CHECK(refuse(t, "decoder", "type", "\"sanm_decoder\"", "decoder.type: 'sanm_decoder'"));
    CHECK(refuse(t, "", "family", "\"whisper\"", "family: 'whisper'"));
    CHECK(refuse(t, "", "format_version", "2", "format_version: 2 is not supported"));
    CHECK(refuse(t, "encoder", "layer_norm_type", "\"rms_norm\"",
                 "encoder.layer_norm_type: unknown field"));
    CHECK(refuse(t, "decoder", "tie_word_embedding", "true",
                 "decoder.tie_word_embedding: unknown field"));
    CHECK(refuse(t, "", "extra", "{}", "extra: unknown field"));
    CHECK(refuse(t, "vocab", "bos", "1", "vocab.bos: unknown field"));
}

TEST(wenet_config_refuses_invalid)
{
    /* missing and mistyped fields */
    CHECK(refuse(t, "encoder", "d_model", NULL, "encoder.d_model: missing"));
    CHECK(refuse(t, "", "decoding", NULL, "decoding: missing"));
    CHECK(refuse(t, "", "encoder", "[]", "encoder: must be an object"));
    CHECK(refuse(t, "encoder", "d_model", "\"256\"", "encoder.d_model: must be an integer"));
    CHECK(refuse(t, "encoder", "d_model", "256.5", "encoder.d_model: must be an integer"));
    CHECK(refuse(t, "encoder", "d_model", "1e300", "encoder.d_model: must be an integer"));
    CHECK(refuse(t, "encoder", "causal", "1", "encoder.causal: must be true or false"));
    CHECK(refuse(t, "encoder", "activation", "3", "encoder.activation: must be a string"));
    CHECK(refuse(t, "decoding", "ctc_weight", "\"0.5\"", "decoding.ctc_weight: must be a number"));
    /* ranges */
    CHECK(refuse(t, "encoder", "n_blocks", "0", "encoder.n_blocks: 0 is out of range"));
    CHECK(refuse(t, "encoder", "d_model", "-4", "encoder.d_model: -4 is out of range"));
    CHECK(refuse(t, "frontend", "sample_rate", "0", "frontend.sample_rate"));
    CHECK(refuse(t, "encoder", "static_chunk_size", "-1", "encoder.static_chunk_size"));
    CHECK(refuse(t, "vocab", "sos", "5002", "vocab.sos: 5002 is out of range"));
    CHECK(refuse(t, "vocab", "blank", "-1", "vocab.blank"));
    CHECK(refuse(t, "decoding", "ctc_weight", "1.5", "decoding.ctc_weight: 1.5 is out of range"));
    CHECK(refuse(t, "decoding", "reverse_weight", "1.0", "decoding.reverse_weight"));
    /* rules across fields */
    CHECK(refuse(t, "encoder", "n_heads", "3", "encoder.n_heads: 3 does not divide"));
    CHECK(refuse(t, "decoder", "n_heads", "5", "decoder.n_heads: 5 does not divide"));
    CHECK(refuse(t, "encoder", "input_dim", "40", "encoder.input_dim: 40 differs"));
    CHECK(refuse(t, "frontend", "num_mel_bins", "5", "encoder.input_dim"));
    CHECK(refuse(t, "decoder", "type", "\"transformer\"", "decoder.r_n_blocks"));
    /* an even kernel is refused for a symmetric (non-causal) conv module only */
    {
        cJSON *root = cJSON_Parse(GOOD);
        cJSON *enc = cJSON_GetObjectItemCaseSensitive(root, "encoder");
        cJSON_ReplaceItemInObjectCaseSensitive(enc, "causal", cJSON_CreateFalse());
        cJSON_ReplaceItemInObjectCaseSensitive(enc, "cnn_module_kernel", cJSON_CreateNumber(8));
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        wenet_config_t c;
        hark_err_t err = {0};
        int rc = wenet_config_load(write_json(t, text), &c, &err);
        free(text);
        CHECK(rc == HARK_ERR_INVALID_ARG);
        CHECKF(strstr(err.msg, "encoder.cnn_module_kernel: 8 must be odd"), "%s", err.msg);
    }
}

/* Edits that are valid must be accepted. */
TEST(wenet_config_variants_accepted)
{
    static const char *edits[][3] = {
        {"encoder", "input_layer", "\"conv2d6\""}, {"encoder", "input_layer", "\"conv2d8\""},
        {"encoder", "pos_enc", "\"abs_pos\""},     {"encoder", "cnn_module_norm", "\"batch_norm\""},
        {"encoder", "activation", "\"gelu\""},     {"encoder", "activation", "\"relu\""},
        {"encoder", "cnn_module_kernel", "8"}, /* even kernel is fine when causal */
        {"encoder", "normalize_before", "false"},  {"encoder", "static_chunk_size", "16"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        cJSON *root = cJSON_Parse(GOOD);
        cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, edits[i][0]),
                                               edits[i][1], cJSON_Parse(edits[i][2]));
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        wenet_config_t c;
        hark_err_t err = {0};
        int rc = wenet_config_load(write_json(t, text), &c, &err);
        free(text);
        CHECKF(rc == HARK_OK, "%s.%s=%s: %s", edits[i][0], edits[i][1], edits[i][2], err.msg);
    }
    /* a transformer decoder (r_n_blocks 0, reverse_weight 0) and no decoder at all */
    cJSON *root = cJSON_Parse(GOOD);
    cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    cJSON_ReplaceItemInObjectCaseSensitive(dec, "type", cJSON_CreateString("transformer"));
    cJSON_ReplaceItemInObjectCaseSensitive(dec, "r_n_blocks", cJSON_CreateNumber(0));
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "decoding"),
                                           "reverse_weight", cJSON_CreateNumber(0));
    char *text = cJSON_PrintUnformatted(root);
    wenet_config_t c;
    hark_err_t err = {0};
    int rc = wenet_config_load(write_json(t, text), &c, &err);
    free(text);
    CHECKF(rc == HARK_OK && c.decoder == DECODER_TRANSFORMER, "%s", err.msg);
    cJSON_ReplaceItemInObjectCaseSensitive(dec, "type", cJSON_CreateString("none"));
    cJSON_ReplaceItemInObjectCaseSensitive(dec, "n_blocks", cJSON_CreateNumber(0));
    text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    rc = wenet_config_load(write_json(t, text), &c, &err);
    free(text);
    CHECKF(rc == HARK_OK && c.decoder == DECODER_NONE, "%s", err.msg);
}

TEST(wenet_config_rejects_garbage)
{
    wenet_config_t c;
    hark_err_t err = {0};
    CHECK(wenet_config_load(write_json(t, "{\"format_version\": 1,"), &c, &err) == HARK_ERR_FORMAT);
    CHECK(strstr(err.msg, "not valid JSON") != NULL);
    CHECK(wenet_config_load(write_json(t, "[]"), &c, &err) == HARK_ERR_FORMAT);
    CHECK(wenet_config_load(write_json(t, ""), &c, &err) == HARK_ERR_FORMAT);
}

TEST(wenet_config_out_of_memory)
{
    const char *p = write_json(t, GOOD);
    int ok = 0, fails = 0;
    for (long n = 1; n < 50 && !ok; n++) {
        wenet_config_t c;
        hark_err_t err = {0};
        alloc_fail_after(n);
        int rc = wenet_config_load(p, &c, &err);
        alloc_fail_reset();
        CHECKF(rc == HARK_OK || rc == HARK_ERR_NOMEM, "n=%ld rc=%d %s", n, rc, err.msg);
        ok = rc == HARK_OK;
        fails += rc == HARK_ERR_NOMEM;
    }
    CHECK(ok && fails >= 1);
}

TEST(wenet_subsampled_len_formulas)
{
    wenet_config_t c = {0};
    c.subsample = SUBSAMPLE_CONV2D;
    /* the golden utterances' T -> T' (README) */
    static const int golden[][2] = {{871, 217}, {1098, 273}, {297, 73}, {188, 46}, {108, 26}};
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(wenet_subsampled_len(&c, golden[i][0]), golden[i][1]);
    /* each layer against its formula with Python floor division, and at the edge: right_context
     * + 1 frames give the first output frame */
    static const wenet_subsample_t kinds[] = {SUBSAMPLE_CONV2D, SUBSAMPLE_CONV2D6,
                                              SUBSAMPLE_CONV2D8};
    static const int rc[] = {6, 10, 14};
    for (int k = 0; k < 3; k++) {
        c.subsample = kinds[k];
        CHECK_EQ_INT(wenet_right_context(&c), rc[k]);
        CHECK_EQ_INT(wenet_subsampled_len(&c, rc[k]), 0);
        CHECK_EQ_INT(wenet_subsampled_len(&c, rc[k] + 1), 1);
        CHECK_EQ_INT(wenet_subsampled_len(&c, 0), 0);
        CHECK_EQ_INT(wenet_subsampled_len(&c, -5), 0);
        for (int T = 1; T < 3000; T++) {
            int a = (T - 1) / 2, want;
            if (kinds[k] == SUBSAMPLE_CONV2D)
                want = a >= 1 ? (a - 1) / 2 : 0;
            else if (kinds[k] == SUBSAMPLE_CONV2D6)
                want = a >= 2 ? (a - 2) / 3 : 0;
            else
                want = a >= 1 && (a - 1) / 2 >= 1 ? ((a - 1) / 2 - 1) / 2 : 0;
            CHECKF(wenet_subsampled_len(&c, T) == want, "rate %d T %d: %d vs %d", kinds[k], T,
                   wenet_subsampled_len(&c, T), want);
            /* streaming: T' output frames need (T'-1)*rate + right_context + 1 input frames */
            int tp = wenet_subsampled_len(&c, T);
            CHECK(tp == 0 || (tp - 1) * (int)kinds[k] + rc[k] + 1 <= T);
            CHECK(tp * (int)kinds[k] + rc[k] + 1 > T);
        }
    }
    /* spot values */
    c.subsample = SUBSAMPLE_CONV2D6;
    CHECK_EQ_INT(wenet_subsampled_len(&c, 100), 15);
    c.subsample = SUBSAMPLE_CONV2D8;
    CHECK_EQ_INT(wenet_subsampled_len(&c, 100), 11);
}
