/* Tests for src/api/kserve_grpc_codec.c: gRPC framing, grpc-timeout, grpc-message encoding,
 * status mapping, ModelInferRequest → kserve_request_t (raw and typed contents, parameters as
 * the HTTP path reads them, malformed requests), outputs → ModelInferResponse (raw contents by
 * position, requested output order, stream wrapper with triton_final_response), and the
 * service's JSON documents → protobuf (config, stats, index). */
#include "test.h"

#include "api/kserve_grpc.h"
#include "core/alloc.h"
#include "grpc_service.pb-c.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

TEST(grpc_status_mapping)
{
    CHECK_EQ_INT(grpc_status_of(HARK_OK), GRPC_STATUS_OK);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_INVALID_ARG), GRPC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_TOO_LARGE), GRPC_STATUS_INVALID_ARGUMENT);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_NOT_FOUND), GRPC_STATUS_NOT_FOUND);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_UNAVAILABLE), GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_AGAIN), GRPC_STATUS_UNAVAILABLE);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_TIMEOUT), GRPC_STATUS_DEADLINE_EXCEEDED);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_CANCELLED), GRPC_STATUS_CANCELLED);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_NOMEM), GRPC_STATUS_INTERNAL);
    CHECK_EQ_INT(grpc_status_of(HARK_ERR_CUDA), GRPC_STATUS_INTERNAL);
}

TEST(grpc_timeout_parse)
{
    uint64_t ns = 0;
    CHECK_OK(grpc_parse_timeout("5S", 2, &ns));
    CHECK_EQ_INT(ns, 5000000000ll);
    CHECK_OK(grpc_parse_timeout("250m", 4, &ns));
    CHECK_EQ_INT(ns, 250000000ll);
    CHECK_OK(grpc_parse_timeout("7u", 2, &ns));
    CHECK_EQ_INT(ns, 7000);
    CHECK_OK(grpc_parse_timeout("3n", 2, &ns));
    CHECK_EQ_INT(ns, 3);
    CHECK_OK(grpc_parse_timeout("2M", 2, &ns));
    CHECK_EQ_INT(ns, 120000000000ll);
    CHECK_OK(grpc_parse_timeout("99999999H", 9, &ns)); /* 8 digits, saturating */
    CHECK(ns > 0);
    CHECK(grpc_parse_timeout("S", 1, &ns) != 0);
    CHECK(grpc_parse_timeout("5", 1, &ns) != 0);
    CHECK(grpc_parse_timeout("5s", 2, &ns) != 0);
    CHECK(grpc_parse_timeout("123456789S", 10, &ns) != 0); /* 9 digits */
    CHECK(grpc_parse_timeout("-5S", 3, &ns) != 0);
}

TEST(grpc_message_percent_encoding)
{
    char out[64];
    grpc_percent_encode("bad input 'WAV': 100%\n\xc3\xa9", out, sizeof out);
    CHECK(!strcmp(out, "bad input 'WAV': 100%25%0A%C3%A9"));
    size_t n = grpc_percent_encode("%%%%%%", out, 8); /* only whole escapes */
    CHECK_EQ_INT(n, 6);
    CHECK(!strcmp(out, "%25%25"));
}

TEST(grpc_framing)
{
    Inference__ModelReadyRequest r = INFERENCE__MODEL_READY_REQUEST__INIT;
    r.name = "wenet";
    size_t len;
    uint8_t *f = grpc_frame_pack(&r.base, &len);
    CHECK(f);
    CHECK_EQ_INT(len, 5 + 7);
    CHECK_EQ_INT(f[0], 0);
    CHECK_EQ_INT(f[4], 7);
    const uint8_t *msg;
    size_t ml, used;
    hark_err_t err;
    for (size_t k = 0; k < len; k++) /* every prefix of the frame: need more */
        CHECK_EQ_INT(grpc_frame_next(f, k, 100, &msg, &ml, &used, &err), 0);
    CHECK_EQ_INT(grpc_frame_next(f, len, 100, &msg, &ml, &used, &err), 1);
    CHECK_EQ_INT(ml, 7);
    CHECK_EQ_INT(used, len);
    Inference__ModelReadyRequest *back = inference__model_ready_request__unpack(NULL, ml, msg);
    CHECK(back && !strcmp(back->name, "wenet"));
    inference__model_ready_request__free_unpacked(back, NULL);
    CHECK_EQ_INT(grpc_frame_next(f, len, 6, &msg, &ml, &used, &err), HARK_ERR_TOO_LARGE);
    f[0] = 1;
    CHECK_EQ_INT(grpc_frame_next(f, len, 100, &msg, &ml, &used, &err), HARK_ERR_UNSUPPORTED);
    f[0] = 7;
    CHECK_EQ_INT(grpc_frame_next(f, len, 100, &msg, &ml, &used, &err), HARK_ERR_INVALID_ARG);
    hark_free(f);
    /* INT32_MAX-sized declared length is refused by the limit, not allocated */
    uint8_t big[5] = {0, 0x7f, 0xff, 0xff, 0xff};
    CHECK_EQ_INT(grpc_frame_next(big, 5, 64u << 20, &msg, &ml, &used, &err), HARK_ERR_TOO_LARGE);
}

/* a request as tritonclient / perf_analyzer send it: raw contents, typed parameters */
static Inference__ModelInferRequest *make_request(void)
{
    static float wav[2][3] = {{0.1f, 0.2f, 0.3f}, {0.4f, 0.5f, 0.6f}};
    static int32_t lens[2] = {3, 2};
    static int64_t s_wav[2] = {2, 3}, s_lens[2] = {2, 1};
    static Inference__ModelInferRequest__InferInputTensor in[2], *inp[2];
    static Inference__InferParameter pv[5];
    static Inference__ModelInferRequest__ParametersEntry pe[5], *pep[5];
    static ProtobufCBinaryData raw[2];
    static Inference__ModelInferRequest__InferRequestedOutputTensor out, *outp;
    static Inference__ModelInferRequest r;
    inference__model_infer_request__init(&r);
    s_wav[0] = 2, s_wav[1] = 3, s_lens[0] = 2, s_lens[1] = 1; /* tests change them */
    r.model_name = "wenet";
    r.id = "req-1";
    for (int i = 0; i < 2; i++) {
        inference__model_infer_request__infer_input_tensor__init(&in[i]);
        inp[i] = &in[i];
    }
    in[0].name = "WAV";
    in[0].datatype = "FP32";
    in[0].n_shape = 2;
    in[0].shape = s_wav;
    in[1].name = "WAV_LENS";
    in[1].datatype = "INT32";
    in[1].n_shape = 2;
    in[1].shape = s_lens;
    raw[0] = (ProtobufCBinaryData){sizeof wav, (uint8_t *)wav};
    raw[1] = (ProtobufCBinaryData){sizeof lens, (uint8_t *)lens};
    r.n_inputs = 2;
    r.inputs = inp;
    r.n_raw_input_contents = 2;
    r.raw_input_contents = raw;
    const char *keys[5] = {"sequence_id", "sequence_start", "priority", "decoding_method",
                           "ctc_weight"};
    for (int i = 0; i < 5; i++) {
        inference__infer_parameter__init(&pv[i]);
        inference__model_infer_request__parameters_entry__init(&pe[i]);
        pe[i].key = (char *)keys[i];
        pe[i].value = &pv[i];
        pep[i] = &pe[i];
    }
    pv[0].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    pv[0].int64_param = 42;
    pv[1].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM;
    pv[1].bool_param = 1;
    pv[2].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    pv[2].uint64_param = 3;
    pv[3].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    pv[3].string_param = "attention_rescoring";
    pv[4].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM;
    pv[4].double_param = 0.25;
    r.n_parameters = 5;
    r.parameters = pep;
    inference__model_infer_request__infer_requested_output_tensor__init(&out);
    out.name = "TRANSCRIPTS";
    outp = &out;
    r.n_outputs = 1;
    r.outputs = &outp;
    return &r;
}

TEST(grpc_request_from_pb_raw)
{
    Inference__ModelInferRequest *pb = make_request();
    kserve_request_t req;
    hark_err_t err = {0};
    CHECKF(kserve_grpc_request_from_pb(pb, &req, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(req.n_inputs, 2);
    CHECK(!strcmp(req.inputs[0].name, "WAV"));
    CHECK_EQ_INT(req.inputs[0].dtype, KSERVE_FP32);
    CHECK_EQ_INT(req.inputs[0].count, 6);
    CHECK_EQ_INT(req.inputs[0].size, 24);
    CHECK_EQ_INT(req.inputs[1].shape[0], 2);
    CHECK(req.has_id && !strcmp(req.id, "req-1"));
    CHECK(req.has_sequence_id && req.sequence_id == 42 && !req.sequence_id_str);
    CHECK(req.sequence_start && !req.sequence_end);
    CHECK(req.has_priority && req.priority == 3);
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(req.parameters, "decoding_method");
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(req.parameters, "ctc_weight");
    CHECK(cJSON_IsString(dm) && !strcmp(dm->valuestring, "attention_rescoring"));
    CHECK(cJSON_IsNumber(cw) && cw->valuedouble == 0.25);
    CHECK_EQ_INT(req.n_outputs, 1);
    CHECK(!strcmp(req.outputs[0].name, "TRANSCRIPTS"));
    float x[6];
    CHECK_OK(kserve_tensor_to_f32(&req.inputs[0], x, &err));
    CHECK(x[4] == 0.5f);
    kserve_request_free(&req);
}

TEST(grpc_request_from_pb_contents)
{
    Inference__ModelInferRequest *pb = make_request();
    float f[6] = {1, 2, 3, 4, 5, 6};
    int32_t l[2] = {3, 2};
    Inference__InferTensorContents c0 = INFERENCE__INFER_TENSOR_CONTENTS__INIT,
                                   c1 = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c0.n_fp32_contents = 6;
    c0.fp32_contents = f;
    c1.n_int_contents = 2;
    c1.int_contents = l;
    pb->inputs[0]->contents = &c0;
    pb->inputs[1]->contents = &c1;
    pb->n_raw_input_contents = 0;
    kserve_request_t req;
    hark_err_t err = {0};
    CHECKF(kserve_grpc_request_from_pb(pb, &req, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(req.inputs[1].size, 8);
    CHECK(!memcmp(req.inputs[1].data, l, 8));
    CHECK(!memcmp(req.inputs[0].data, f, 24));
    kserve_request_free(&req);
    c0.n_fp32_contents = 5; /* shape says 6 */
    CHECK(kserve_grpc_request_from_pb(pb, &req, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "WAV"));
}

TEST(grpc_request_from_pb_errors)
{
    kserve_request_t req;
    hark_err_t err = {0};
    Inference__ModelInferRequest *pb = make_request();
    pb->raw_input_contents[0].len = 20; /* shape × FP32 is 24 */
    CHECK_EQ_INT(kserve_grpc_request_from_pb(pb, &req, &err), HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "WAV") && strstr(err.msg, "24"), "%s", err.msg);
    pb = make_request();
    pb->inputs[0]->datatype = "FP33";
    CHECK_EQ_INT(kserve_grpc_request_from_pb(pb, &req, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "FP33"));
    pb = make_request();
    pb->inputs[0]->shape[0] = -2;
    CHECK_EQ_INT(kserve_grpc_request_from_pb(pb, &req, &err), HARK_ERR_INVALID_ARG);
    pb = make_request();
    pb->n_raw_input_contents = 1; /* one per input */
    CHECK_EQ_INT(kserve_grpc_request_from_pb(pb, &req, &err), HARK_ERR_INVALID_ARG);
    pb = make_request();
    pb->parameters[1]->value->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM; /* sequence_start as string */
    pb->parameters[1]->value->string_param = "yes";
    CHECK_EQ_INT(kserve_grpc_request_from_pb(pb, &req, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "sequence_start"));
    pb = make_request(); /* sequence_id as a string is fine */
    pb->parameters[0]->value->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    pb->parameters[0]->value->string_param = "corr-7";
    CHECK_OK(kserve_grpc_request_from_pb(pb, &req, &err));
    CHECK(req.sequence_id_str && !strcmp(req.sequence_id_str, "corr-7"));
    kserve_request_free(&req);
    pb = make_request(); /* an integer id past 2^53 is kept exactly, int64 or uint64 */
    pb->parameters[0]->value->int64_param = (1ll << 53) + 1;
    CHECK_OK(kserve_grpc_request_from_pb(pb, &req, &err));
    CHECK(req.sequence_id == (1ull << 53) + 1 && !req.sequence_id_str);
    kserve_request_free(&req);
    pb = make_request();
    pb->parameters[0]->value->parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    pb->parameters[0]->value->uint64_param = (1ull << 62) + 3;
    CHECK_OK(kserve_grpc_request_from_pb(pb, &req, &err));
    CHECK(req.sequence_id == (1ull << 62) + 3);
    kserve_request_free(&req);
    /* allocation failures: every one fails cleanly */
    for (long n = 1; n < 40; n++) {
        pb = make_request();
        alloc_fail_after(n);
        int rc = kserve_grpc_request_from_pb(pb, &req, &err);
        alloc_fail_reset();
        if (rc == HARK_OK) {
            kserve_request_free(&req);
            break;
        }
        CHECK(rc == HARK_ERR_NOMEM || rc == HARK_ERR_INVALID_ARG);
    }
}

TEST(grpc_response_frame)
{
    const char *strs[2] = {"hello", "world!"};
    size_t lens[2] = {5, 6}, bsz;
    uint8_t *b = kserve_bytes_pack(strs, lens, 2, &bsz);
    CHECK(b);
    int64_t shape_t[2] = {2, 1}, shape_l[1] = {2};
    int32_t lv[2] = {7, 9};
    kserve_output_t outs[2] = {{"LENS", KSERVE_INT32, 1, shape_l, lv, 8},
                               {"TRANSCRIPTS", KSERVE_BYTES, 2, shape_t, b, bsz}};
    /* the request asks for TRANSCRIPTS only */
    kserve_output_req_t want[1] = {{.name = "TRANSCRIPTS", .binary_data = 1}};
    kserve_request_t req = {0};
    req.outputs = want;
    req.n_outputs = 1;
    kserve_grpc_infer_answer_t a = {
        .model = "wenet", .version = "1", .id = "x", .req = &req, .outs = outs, .n_outs = 2};
    uint8_t *f;
    size_t len;
    hark_err_t err;
    CHECK_OK(kserve_grpc_infer_frame(&a, &f, &len, &err));
    Inference__ModelInferResponse *r =
        inference__model_infer_response__unpack(NULL, len - 5, f + 5);
    CHECK(r);
    CHECK(!strcmp(r->model_name, "wenet") && !strcmp(r->model_version, "1") && !strcmp(r->id, "x"));
    CHECK_EQ_INT(r->n_outputs, 1);
    CHECK_EQ_INT(r->n_raw_output_contents, 1);
    CHECK(!strcmp(r->outputs[0]->name, "TRANSCRIPTS") && !strcmp(r->outputs[0]->datatype, "BYTES"));
    CHECK_EQ_INT(r->outputs[0]->n_shape, 2);
    CHECK_EQ_INT(r->raw_output_contents[0].len, bsz);
    CHECK(!memcmp(r->raw_output_contents[0].data, "\x05\0\0\0hello", 9));
    inference__model_infer_response__free_unpacked(r, NULL);
    hark_free(f);
    /* all outputs, in the stream wrapper with the final flag */
    a.req = NULL;
    a.stream = a.final_response = 1;
    CHECK_OK(kserve_grpc_infer_frame(&a, &f, &len, &err));
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, len - 5, f + 5);
    CHECK(s && s->infer_response);
    CHECK_EQ_INT(s->infer_response->n_outputs, 2);
    CHECK_EQ_INT(s->infer_response->n_raw_output_contents, 2);
    CHECK(!strcmp(s->infer_response->outputs[0]->name, "LENS"));
    CHECK_EQ_INT(s->infer_response->n_parameters, 1);
    CHECK(!strcmp(s->infer_response->parameters[0]->key, "triton_final_response"));
    CHECK(s->infer_response->parameters[0]->value->bool_param);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    hark_free(f);
    /* an unknown requested output */
    want[0].name = "NOPE";
    a.req = &req;
    CHECK_EQ_INT(kserve_grpc_infer_frame(&a, &f, &len, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "NOPE"));
    hark_free(b);
    f = kserve_grpc_stream_error_frame("queue full", "wenet", "id9", &len);
    s = inference__model_stream_infer_response__unpack(NULL, len - 5, f + 5);
    CHECK(s && !strcmp(s->error_message, "queue full") && !strcmp(s->infer_response->id, "id9"));
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    hark_free(f);
}

TEST(grpc_json_documents)
{
    const char *cfg =
        "{\"name\":\"wenet\",\"platform\":\"hark\",\"backend\":\"hark\",\"max_batch_size\":64,"
        "\"input\":[{\"name\":\"WAV\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]},"
        "{\"name\":\"WAV_LENS\",\"data_type\":\"TYPE_INT32\",\"dims\":[1]}],"
        "\"output\":[{\"name\":\"TRANSCRIPTS\",\"data_type\":\"TYPE_STRING\",\"dims\":[1]}],"
        "\"instance_group\":[{\"count\":2,\"kind\":\"KIND_GPU\",\"gpus\":[0]}],"
        "\"sequence_batching\":{},\"parameters\":{\"family\":{\"string_value\":\"wenet\"}},"
        "\"model_transaction_policy\":{\"decoupled\":true},\"response_cache\":{\"enable\":false},"
        "\"unknown_field\":{\"x\":1}}";
    uint8_t *f;
    size_t len;
    hark_err_t err;
    CHECKF(kserve_grpc_json_frame(KSERVE_GRPC_MODEL_CONFIG, cfg, &f, &len, &err) == 0, "%s",
           err.msg);
    Inference__ModelConfigResponse *r =
        inference__model_config_response__unpack(NULL, len - 5, f + 5);
    CHECK(r && r->config);
    Inference__ModelConfig *c = r->config;
    CHECK_EQ_INT(c->max_batch_size, 64);
    CHECK_EQ_INT(c->n_input, 2);
    CHECK_EQ_INT(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_INT32);
    CHECK_EQ_INT(c->input[0]->dims[0], -1);
    CHECK_EQ_INT(c->output[0]->data_type, INFERENCE__DATA_TYPE__TYPE_STRING);
    CHECK_EQ_INT(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU);
    CHECK_EQ_INT(c->instance_group[0]->count, 2);
    CHECK_EQ_INT(c->scheduling_choice_case,
                 INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING);
    CHECK(c->model_transaction_policy && c->model_transaction_policy->decoupled);
    CHECK(c->response_cache && !c->response_cache->enable);
    CHECK_EQ_INT(c->n_parameters, 1);
    CHECK(!strcmp(c->parameters[0]->key, "family") &&
          !strcmp(c->parameters[0]->value->string_value, "wenet"));
    inference__model_config_response__free_unpacked(r, NULL);
    hark_free(f);

    const char *st = "{\"model_stats\":[{\"name\":\"wenet\",\"version\":\"1\",\"last_inference\":"
                     "1700000000000,\"inference_count\":5,\"execution_count\":2,"
                     "\"inference_stats\":{\"success\":{\"count\":5,\"ns\":123456789},"
                     "\"queue\":{\"count\":5,\"ns\":1000}},\"batch_stats\":[{\"batch_size\":3,"
                     "\"compute_infer\":{\"count\":1,\"ns\":77}}]}]}";
    CHECK_OK(kserve_grpc_json_frame(KSERVE_GRPC_MODEL_STATS, st, &f, &len, &err));
    Inference__ModelStatisticsResponse *s =
        inference__model_statistics_response__unpack(NULL, len - 5, f + 5);
    CHECK(s && s->n_model_stats == 1);
    CHECK(s->model_stats[0]->last_inference == 1700000000000ull);
    CHECK(s->model_stats[0]->inference_stats->success->ns == 123456789);
    CHECK(s->model_stats[0]->batch_stats[0]->compute_infer->ns == 77);
    inference__model_statistics_response__free_unpacked(s, NULL);
    hark_free(f);

    CHECK_OK(kserve_grpc_json_frame(KSERVE_GRPC_REPOSITORY_INDEX,
                                    "[{\"name\":\"a\",\"version\":\"1\",\"state\":\"READY\"},"
                                    "{\"name\":\"b\",\"state\":\"UNAVAILABLE\",\"reason\":\"x\"}]",
                                    &f, &len, &err));
    Inference__RepositoryIndexResponse *ix =
        inference__repository_index_response__unpack(NULL, len - 5, f + 5);
    CHECK(ix && ix->n_models == 2 && !strcmp(ix->models[1]->reason, "x"));
    inference__repository_index_response__free_unpacked(ix, NULL);
    hark_free(f);
    /* a JSON type that cannot fit: INTERNAL, naming the field */
    CHECK_EQ_INT(kserve_grpc_json_frame(KSERVE_GRPC_SERVER_METADATA, "{\"extensions\":\"x\"}", &f,
                                        &len, &err),
                 HARK_ERR_INTERNAL);
    CHECK(strstr(err.msg, "extensions"));
    CHECK_EQ_INT(kserve_grpc_json_frame(KSERVE_GRPC_SERVER_METADATA, "{", &f, &len, &err),
                 HARK_ERR_INTERNAL);
}

/* Triton's shared memory parameters over gRPC: an input in a region takes no raw_input_contents
 * (the others keep theirs, in order), requested outputs carry their regions, and the response
 * names the region of an output written there (empty raw contents, as Triton). */
TEST(grpc_shared_memory_request_and_response)
{
    Inference__InferParameter reg = INFERENCE__INFER_PARAMETER__INIT,
                              size = INFERENCE__INFER_PARAMETER__INIT,
                              off = INFERENCE__INFER_PARAMETER__INIT;
    reg.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    reg.string_param = "in0";
    size.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM;
    size.int64_param = 24;
    off.parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
    off.uint64_param = 4096;
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry e[3], *ep[3];
    const char *keys[3] = {"shared_memory_region", "shared_memory_byte_size",
                           "shared_memory_offset"};
    Inference__InferParameter *vals[3] = {&reg, &size, &off};
    for (int i = 0; i < 3; i++) {
        inference__model_infer_request__infer_input_tensor__parameters_entry__init(&e[i]);
        e[i].key = (char *)keys[i];
        e[i].value = vals[i];
        ep[i] = &e[i];
    }
    Inference__ModelInferRequest__InferInputTensor in[2], *inp[2] = {&in[0], &in[1]};
    int64_t shp0[2] = {1, 6}, shp1[1] = {1};
    for (int i = 0; i < 2; i++)
        inference__model_infer_request__infer_input_tensor__init(&in[i]);
    in[0].name = "WAV";
    in[0].datatype = "FP32";
    in[0].n_shape = 2;
    in[0].shape = shp0;
    in[0].n_parameters = 3;
    in[0].parameters = ep;
    in[1].name = "WAV_LENS";
    in[1].datatype = "INT32";
    in[1].n_shape = 1;
    in[1].shape = shp1;
    int32_t six = 6;
    ProtobufCBinaryData raw = {4, (uint8_t *)&six};
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry oe[2], *oep[2];
    for (int i = 0; i < 2; i++) {
        inference__model_infer_request__infer_requested_output_tensor__parameters_entry__init(
            &oe[i]);
        oe[i].key = (char *)keys[i];
        oe[i].value = vals[i];
        oep[i] = &oe[i];
    }
    Inference__ModelInferRequest__InferRequestedOutputTensor out, *outp = &out;
    inference__model_infer_request__infer_requested_output_tensor__init(&out);
    out.name = "TRANSCRIPTS";
    out.n_parameters = 2;
    out.parameters = oep;
    Inference__ModelInferRequest r = INFERENCE__MODEL_INFER_REQUEST__INIT;
    r.model_name = "m";
    r.n_inputs = 2;
    r.inputs = inp;
    r.n_raw_input_contents = 1; /* WAV_LENS only */
    r.raw_input_contents = &raw;
    r.n_outputs = 1;
    r.outputs = &outp;
    kserve_request_t req;
    hark_err_t err = {0};
    CHECKF(kserve_grpc_request_from_pb(&r, &req, &err) == 0, "%s", err.msg);
    CHECK(req.inputs[0].shm_region && !strcmp(req.inputs[0].shm_region, "in0"));
    CHECK(req.inputs[0].shm_byte_size == 24 && req.inputs[0].shm_offset == 4096);
    CHECK(req.inputs[0].data == NULL);
    CHECK(req.inputs[1].shm_region == NULL && req.inputs[1].size == 4);
    CHECK(req.outputs[0].shm_region && req.outputs[0].shm_byte_size == 24);
    /* the response: TRANSCRIPTS went to in0 (9 bytes) */
    req.outputs[0].shm_written = 9;
    const char *strs[1] = {"hello"};
    size_t bsz;
    uint8_t *b = kserve_bytes_pack(strs, NULL, 1, &bsz);
    int64_t one[2] = {1, 1};
    kserve_output_t o = {"TRANSCRIPTS", KSERVE_BYTES, 2, one, b, bsz};
    kserve_grpc_infer_answer_t a = {
        .model = "m", .version = "1", .req = &req, .outs = &o, .n_outs = 1};
    uint8_t *f;
    size_t len;
    CHECK_OK(kserve_grpc_infer_frame(&a, &f, &len, &err));
    Inference__ModelInferResponse *resp =
        inference__model_infer_response__unpack(NULL, len - 5, f + 5);
    CHECK(resp && resp->n_outputs == 1 && resp->n_raw_output_contents == 1);
    CHECK_EQ_INT(resp->raw_output_contents[0].len, 0);
    CHECK_EQ_INT(resp->outputs[0]->n_parameters, 2);
    CHECK(!strcmp(resp->outputs[0]->parameters[0]->key, "shared_memory_region") &&
          !strcmp(resp->outputs[0]->parameters[0]->value->string_param, "in0"));
    CHECK(!strcmp(resp->outputs[0]->parameters[1]->key, "shared_memory_byte_size") &&
          resp->outputs[0]->parameters[1]->value->int64_param == 9);
    inference__model_infer_response__free_unpacked(resp, NULL);
    hark_free(f);
    hark_free(b);
    kserve_request_free(&req);
    /* raw_input_contents must then count the inputs not in shared memory */
    r.n_raw_input_contents = 2;
    ProtobufCBinaryData two[2] = {raw, raw};
    r.raw_input_contents = two;
    CHECK_EQ_INT(kserve_grpc_request_from_pb(&r, &req, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "2 raw_input_contents for 1 inputs not in shared memory"));
    /* a region without its byte size */
    r.n_raw_input_contents = 1;
    in[0].n_parameters = 1;
    CHECK_EQ_INT(kserve_grpc_request_from_pb(&r, &req, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "input 'WAV': shared_memory_region needs shared_memory_byte_size"));
}

/* LogSettings / TraceSetting requests as the service's JSON updates, and the service's settings
 * and region lists as their responses */
TEST(grpc_settings_and_regions)
{
    Inference__LogSettingsRequest__SettingValue v[3];
    Inference__LogSettingsRequest__SettingsEntry e[3], *ep[3];
    const char *keys[3] = {"log_info", "log_verbose_level", "log_format"};
    for (int i = 0; i < 3; i++) {
        inference__log_settings_request__setting_value__init(&v[i]);
        inference__log_settings_request__settings_entry__init(&e[i]);
        e[i].key = (char *)keys[i];
        e[i].value = &v[i];
        ep[i] = &e[i];
    }
    v[0].parameter_choice_case =
        INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
    v[0].bool_param = 0;
    v[1].parameter_choice_case =
        INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
    v[1].uint32_param = 2;
    v[2].parameter_choice_case =
        INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
    v[2].string_param = "ISO8601";
    Inference__LogSettingsRequest lq = INFERENCE__LOG_SETTINGS_REQUEST__INIT;
    cJSON *u = NULL;
    hark_err_t err = {0};
    CHECK_OK(kserve_grpc_log_update(&lq, &u, &err));
    CHECK(u == NULL); /* nothing set: a query */
    lq.n_settings = 3;
    lq.settings = ep;
    CHECK_OK(kserve_grpc_log_update(&lq, &u, &err));
    char *txt = cJSON_PrintUnformatted(u);
    CHECKF(!strcmp(txt, "{\"log_info\":false,\"log_verbose_level\":2,\"log_format\":\"ISO8601\"}"),
           "%s", txt);
    cJSON_free(txt);
    cJSON_Delete(u);

    char *lv[2] = {"TIMESTAMPS", "TENSORS"}, *rate[1] = {"10"};
    Inference__TraceSettingRequest__SettingValue tv[3];
    Inference__TraceSettingRequest__SettingsEntry te[3], *tep[3];
    const char *tkeys[3] = {"trace_level", "trace_rate", "trace_count"};
    for (int i = 0; i < 3; i++) {
        inference__trace_setting_request__setting_value__init(&tv[i]);
        inference__trace_setting_request__settings_entry__init(&te[i]);
        te[i].key = (char *)tkeys[i];
        te[i].value = &tv[i];
        tep[i] = &te[i];
    }
    tv[0].n_value = 2;
    tv[0].value = lv;
    tv[1].n_value = 1;
    tv[1].value = rate; /* trace_count: no value, cleared */
    Inference__TraceSettingRequest tq = INFERENCE__TRACE_SETTING_REQUEST__INIT;
    tq.n_settings = 3;
    tq.settings = tep;
    CHECK_OK(kserve_grpc_trace_update(&tq, &u, &err));
    txt = cJSON_PrintUnformatted(u);
    CHECKF(!strcmp(txt, "{\"trace_level\":[\"TIMESTAMPS\",\"TENSORS\"],\"trace_rate\":\"10\","
                        "\"trace_count\":null}"),
           "%s", txt);
    cJSON_free(txt);
    cJSON_Delete(u);
    tv[1].n_value = 2;
    tv[1].value = lv;
    CHECK_EQ_INT(kserve_grpc_trace_update(&tq, &u, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "trace setting 'trace_rate' takes one value, got 2"));

    uint8_t *f;
    size_t len;
    CHECK_OK(kserve_grpc_json_frame(KSERVE_GRPC_LOG_SETTINGS,
                                    "{\"log_file\":\"\",\"log_info\":true,\"log_verbose_level\":3}",
                                    &f, &len, &err));
    Inference__LogSettingsResponse *lr =
        inference__log_settings_response__unpack(NULL, len - 5, f + 5);
    CHECK(lr && lr->n_settings == 3);
    for (size_t i = 0; lr && i < lr->n_settings; i++) {
        const Inference__LogSettingsResponse__SettingValue *x = lr->settings[i]->value;
        if (!strcmp(lr->settings[i]->key, "log_info"))
            CHECK(
                x->parameter_choice_case ==
                    INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM &&
                x->bool_param);
        else if (!strcmp(lr->settings[i]->key, "log_verbose_level"))
            CHECK(x->uint32_param == 3);
        else
            CHECK(!strcmp(lr->settings[i]->key, "log_file") && !strcmp(x->string_param, ""));
    }
    inference__log_settings_response__free_unpacked(lr, NULL);
    hark_free(f);
    CHECK_OK(kserve_grpc_json_frame(KSERVE_GRPC_TRACE_SETTING,
                                    "{\"trace_level\":[\"OFF\"],\"trace_rate\":\"1000\"}", &f, &len,
                                    &err));
    Inference__TraceSettingResponse *tr =
        inference__trace_setting_response__unpack(NULL, len - 5, f + 5);
    CHECK(tr && tr->n_settings == 2 && !strcmp(tr->settings[0]->key, "trace_level") &&
          tr->settings[0]->value->n_value == 1 &&
          !strcmp(tr->settings[0]->value->value[0], "OFF") &&
          !strcmp(tr->settings[1]->value->value[0], "1000"));
    inference__trace_setting_response__free_unpacked(tr, NULL);
    hark_free(f);
    CHECK_OK(kserve_grpc_json_frame(
        KSERVE_GRPC_SHM_STATUS, "[{\"name\":\"a\",\"key\":\"/ka\",\"offset\":8,\"byte_size\":64}]",
        &f, &len, &err));
    Inference__SystemSharedMemoryStatusResponse *sr =
        inference__system_shared_memory_status_response__unpack(NULL, len - 5, f + 5);
    CHECK(sr && sr->n_regions == 1 && !strcmp(sr->regions[0]->key, "a"));
    CHECK(sr && !strcmp(sr->regions[0]->value->key, "/ka") && sr->regions[0]->value->offset == 8 &&
          sr->regions[0]->value->byte_size == 64 && !strcmp(sr->regions[0]->value->name, "a"));
    inference__system_shared_memory_status_response__free_unpacked(sr, NULL);
    hark_free(f);
}
