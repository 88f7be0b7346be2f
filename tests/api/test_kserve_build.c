/* test_kserve_build.c — tests of kserve_build_request (src/api/kserve.c, client side): the bodies
 * it builds parse back with kserve_parse_request to the same tensors, outputs and parameters. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "api/kserve.h"

#include <cjson/cJSON.h>
#include <string.h>

TEST(kserve_build_request_round_trip_wav)
{
    float wav[2 * 5] = {0.5f, -0.25f, 0.125f, 0, 0, 1, 2, 3, 4, 5};
    int32_t lens[2] = {3, 5};
    int64_t s0[2] = {2, 5}, s1[2] = {2, 1};
    kserve_output_t in[2] = {{"WAV", KSERVE_FP32, 2, s0, wav, sizeof wav},
                             {"WAV_LENS", KSERVE_INT32, 2, s1, lens, sizeof lens}};
    const char *outs[1] = {"TRANSCRIPTS"};
    kserve_param_t par[3] = {{.name = "decoding_method", .str = "ctc_prefix_beam_search"},
                             {.name = "beam_size", .num = 7},
                             {.name = "ctc_weight", .num = 0.25}};
    kserve_request_spec_t spec = {.id = "req \"1\"",
                                  .inputs = in,
                                  .n_inputs = 2,
                                  .outputs = outs,
                                  .n_outputs = 1,
                                  .params = par,
                                  .n_params = 3};
    kserve_response_t body;
    hark_err_t err = {0};
    CHECKF(kserve_build_request(&spec, &body, &err) == 0, "%s", err.msg);
    CHECK(body.binary && body.header_len < body.len);
    CHECK_EQ_INT(body.len - body.header_len, sizeof wav + sizeof lens);
    kserve_request_t r;
    CHECKF(kserve_parse_request(body.body, body.len, body.header_len, &r, &err) == 0, "%s",
           err.msg);
    CHECK(r.has_id && !strcmp(r.id, "req \"1\""));
    CHECK_EQ_INT(r.n_inputs, 2);
    const kserve_tensor_t *w = kserve_request_input(&r, "WAV");
    CHECK(w && w->binary && w->dtype == KSERVE_FP32 && w->ndim == 2 && w->shape[0] == 2 &&
          w->shape[1] == 5 && w->size == sizeof wav && !memcmp(w->data, wav, sizeof wav));
    const kserve_tensor_t *l = kserve_request_input(&r, "WAV_LENS");
    CHECK(l && l->dtype == KSERVE_INT32 && l->count == 2);
    const int32_t *lv = kserve_tensor_data(&r, l);
    CHECK(lv[0] == 3 && lv[1] == 5);
    CHECK(r.n_outputs == 1 && !strcmp(r.outputs[0].name, "TRANSCRIPTS") &&
          r.outputs[0].binary_data == 1);
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(r.parameters, "decoding_method");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(r.parameters, "beam_size");
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(r.parameters, "ctc_weight");
    CHECK(cJSON_IsString(dm) && !strcmp(dm->valuestring, "ctc_prefix_beam_search"));
    CHECK(cJSON_IsNumber(bs) && bs->valuedouble == 7);
    CHECK(cJSON_IsNumber(cw) && cw->valuedouble == 0.25);
    kserve_request_free(&r);
    kserve_response_free(&body);
}

TEST(kserve_build_request_round_trip_audio_bytes_and_errors)
{
    const char *strs[2] = {"RIFF\0\x01\x02", ""};
    size_t lens[2] = {7, 0}, size;
    uint8_t *packed = kserve_bytes_pack(strs, lens, 2, &size);
    int64_t shape[1] = {2};
    kserve_output_t in = {"AUDIO", KSERVE_BYTES, 1, shape, packed, size};
    kserve_request_spec_t spec = {.inputs = &in, .n_inputs = 1};
    kserve_response_t body;
    hark_err_t err = {0};
    CHECKF(kserve_build_request(&spec, &body, &err) == 0, "%s", err.msg);
    kserve_request_t r;
    CHECKF(kserve_parse_request(body.body, body.len, body.header_len, &r, &err) == 0, "%s",
           err.msg);
    CHECK(!r.has_id && r.n_outputs == 0 && !r.parameters);
    const kserve_tensor_t *a = kserve_request_input(&r, "AUDIO");
    CHECK(a && a->dtype == KSERVE_BYTES && a->count == 2);
    size_t pos = 0, n;
    const uint8_t *el;
    CHECK(kserve_bytes_next(a, &pos, &el, &n) && n == 7 && !memcmp(el, "RIFF\0\x01\x02", 7));
    CHECK(kserve_bytes_next(a, &pos, &el, &n) && n == 0);
    CHECK(!kserve_bytes_next(a, &pos, &el, &n));
    kserve_request_free(&r);
    kserve_response_free(&body);
    /* a size that does not match the shape names the input */
    shape[0] = 3;
    CHECK_EQ_INT(kserve_build_request(&spec, &body, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "input 'AUDIO'") != NULL, "%s", err.msg);
    shape[0] = 2;
    kserve_param_t bad = {.name = "beam_size", .num = 1.0 / 0.0};
    spec.params = &bad;
    spec.n_params = 1;
    CHECK_EQ_INT(kserve_build_request(&spec, &body, &err), HARK_ERR_INVALID_ARG);
    CHECK(body.body == NULL);
    hark_free(packed);
}
