/* Tests for src/api/kserve.c: requests as tritonclient (Python), perf_analyzer (C++) and WeNet's
 * client send them, malformed requests and their messages, responses parsed back, metadata and
 * statistics JSON, out-of-memory paths. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "api/kserve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* body = json + blobs; returns its length */
static size_t make_body(uint8_t *out, const char *json, const void *const *blobs,
                        const size_t *sizes, int n)
{
    size_t len = strlen(json);
    memcpy(out, json, len);
    for (int i = 0; i < n; i++) {
        memcpy(out + len, blobs[i], sizes[i]);
        len += sizes[i];
    }
    return len;
}

#define NO_HEADER ((size_t)-1)

TEST(kserve_python_json_request)
{
    /* tritonclient.http with binary_data=False: json.dumps spacing, no id, no header length */
    static const char body[] =
        "{\"inputs\": [{\"name\": \"WAV\", \"shape\": [1, 4], \"datatype\": \"FP32\", "
        "\"data\": [0.5, -0.25, 1e-3, 0]}, {\"name\": \"WAV_LENS\", \"shape\": [1, 1], "
        "\"datatype\": \"INT32\", \"data\": [[4]]}], \"outputs\": [{\"name\": \"TRANSCRIPTS\", "
        "\"parameters\": {\"binary_data\": false}}], \"parameters\": {\"sequence_id\": 7, "
        "\"sequence_start\": true, \"sequence_end\": false, \"priority\": 1, \"timeout\": 5000, "
        "\"decoding_method\": \"ctc_greedy_search\", \"beam_size\": \"4\", \"ctc_weight\": 0.5, "
        "\"reverse_weight\": \"0.3\", \"custom\": {\"anything\": [1, null]}}}";
    kserve_request_t r;
    hark_err_t err = {0};
    CHECKF(kserve_parse_request((const uint8_t *)body, sizeof body - 1, NO_HEADER, &r, &err) ==
               HARK_OK,
           "%s", err.msg);
    CHECK(!r.has_id && !strcmp(r.id, ""));
    CHECK(r.has_sequence_id && r.sequence_id == 7 && !r.sequence_id_str);
    CHECK(r.sequence_start == 1 && r.sequence_end == 0);
    CHECK(r.has_priority && r.priority == 1 && r.has_timeout && r.timeout_us == 5000);
    /* a model's options are left in the raw object, as sent, for its family */
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(r.parameters, "decoding_method");
    const cJSON *bs = cJSON_GetObjectItemCaseSensitive(r.parameters, "beam_size");
    const cJSON *cw = cJSON_GetObjectItemCaseSensitive(r.parameters, "ctc_weight");
    CHECK(cJSON_IsString(dm) && !strcmp(dm->valuestring, "ctc_greedy_search"));
    CHECK(cJSON_IsString(bs) && !strcmp(bs->valuestring, "4"));
    CHECK(cJSON_IsNumber(cw) && cw->valuedouble == 0.5);
    CHECK(r.parameters != NULL);
    CHECK_EQ_INT(r.n_inputs, 2);
    const kserve_tensor_t *wav = kserve_request_input(&r, "WAV");
    CHECK(wav && wav->dtype == KSERVE_FP32 && wav->ndim == 2 && wav->shape[1] == 4 &&
          wav->count == 4 && wav->size == 16 && !wav->binary);
    float f[4];
    CHECK_OK(kserve_tensor_to_f32(wav, f, &err));
    CHECK(f[0] == 0.5f && f[1] == -0.25f && f[2] == 1e-3f && f[3] == 0);
    const kserve_tensor_t *lens = kserve_request_input(&r, "WAV_LENS");
    CHECK(lens && lens->dtype == KSERVE_INT32 && lens->count == 1);
    const int32_t *lv = kserve_tensor_data(&r, lens);
    CHECK(lv && lv[0] == 4);
    CHECK_EQ_INT(r.n_outputs, 1);
    CHECK(!strcmp(r.outputs[0].name, "TRANSCRIPTS") && r.outputs[0].binary_data == 0);
    CHECK(r.binary_data_output == 0);
    kserve_request_free(&r);
    kserve_request_free(&r);
}

TEST(kserve_perf_analyzer_binary_request)
{
    /* perf_analyzer's C++ client: "id": "", binary inputs, Inference-Header-Content-Length
     * always present; the FP32 blob lands at an odd offset (unaligned). */
    float wav[5] = {0.1f, -0.2f, 0.3f, 0.0f, 1.0f};
    int32_t lens = 5;
    const char *json = "{\"id\":\"\",\"inputs\":[{\"name\":\"WAV\",\"shape\":[1,5],"
                       "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":20}},"
                       "{\"name\":\"WAV_LENS\",\"shape\":[1,1],\"datatype\":\"INT32\","
                       "\"parameters\":{\"binary_data_size\":4}}],\"outputs\":[{\"name\":"
                       "\"TRANSCRIPTS\",\"parameters\":{\"binary_data\":true}}]}";
    uint8_t body[512];
    const void *blobs[] = {wav, &lens};
    size_t sizes[] = {sizeof wav, sizeof lens};
    size_t n = make_body(body, json, blobs, sizes, 2);
    /* the header value as the HTTP layer sees it */
    char hv[32];
    snprintf(hv, sizeof hv, "%zu", strlen(json));
    size_t hl;
    hark_err_t err = {0};
    CHECK_OK(kserve_parse_header_length(hv, strlen(hv), n, &hl, &err));
    CHECK(hl == strlen(json));
    kserve_request_t r;
    CHECKF(kserve_parse_request(body, n, hl, &r, &err) == HARK_OK, "%s", err.msg);
    CHECK(r.has_id && !strcmp(r.id, ""));
    const kserve_tensor_t *w = &r.inputs[0];
    CHECK(w->binary && w->data == body + hl && w->size == 20 && w->count == 5);
    const float *wf = kserve_tensor_data(&r, w);
    CHECK(wf && ((uintptr_t)wf % 4) == 0 && !memcmp(wf, wav, sizeof wav));
    const int32_t *lv = kserve_tensor_data(&r, &r.inputs[1]);
    CHECK(lv && lv[0] == 5);
    CHECK(r.outputs[0].binary_data == 1);
    kserve_request_free(&r);

    /* a pure-JSON body with the header (the C++ client sends it anyway) */
    static const char js[] = "{\"id\":\"42\",\"inputs\":[{\"name\":\"X\",\"shape\":[2],"
                             "\"datatype\":\"INT64\",\"data\":[1,-2]}]}";
    CHECK_OK(kserve_parse_request((const uint8_t *)js, sizeof js - 1, sizeof js - 1, &r, &err));
    CHECK(r.has_id && !strcmp(r.id, "42") && r.inputs[0].count == 2);
    const int64_t *iv = kserve_tensor_data(&r, &r.inputs[0]);
    CHECK(iv[0] == 1 && iv[1] == -2);
    kserve_request_free(&r);
}

TEST(kserve_wenet_client_request)
{
    /* WeNet's client.py through tritonclient.http: WAV FP32 [1, N] and WAV_LENS INT32 [1, 1],
     * binary by default, TRANSCRIPTS asked for as binary; a string sequence id. */
    enum { N = 1601 };
    static float wav[N];
    unsigned st = 1;
    for (int i = 0; i < N; i++)
        wav[i] = test_randf(&st);
    int32_t lens = N;
    char json[600];
    snprintf(json, sizeof json,
             "{\"inputs\": [{\"name\": \"WAV\", \"shape\": [1, %d], \"datatype\": \"FP32\", "
             "\"parameters\": {\"binary_data_size\": %zu}}, {\"name\": \"WAV_LENS\", \"shape\": "
             "[1, 1], \"datatype\": \"INT32\", \"parameters\": {\"binary_data_size\": 4}}], "
             "\"outputs\": [{\"name\": \"TRANSCRIPTS\", \"parameters\": {\"binary_data\": "
             "true}}], \"parameters\": {\"sequence_id\": \"utt-0001\"}}",
             N, sizeof wav);
    static uint8_t body[sizeof wav + 1024];
    const void *blobs[] = {wav, &lens};
    size_t sizes[] = {sizeof wav, 4};
    size_t n = make_body(body, json, blobs, sizes, 2);
    kserve_request_t r;
    hark_err_t err = {0};
    CHECKF(kserve_parse_request(body, n, strlen(json), &r, &err) == HARK_OK, "%s", err.msg);
    CHECK(r.has_sequence_id && r.sequence_id_str && !strcmp(r.sequence_id_str, "utt-0001"));
    static float out[N];
    CHECK_OK(kserve_tensor_to_f32(&r.inputs[0], out, &err));
    CHECK(!memcmp(out, wav, sizeof wav));
    /* NaN in the audio (perf_analyzer's random bytes) is refused by name */
    float nan = NAN;
    memcpy(body + strlen(json) + 4 * 77, &nan, 4);
    CHECK(kserve_tensor_to_f32(&r.inputs[0], out, &err) == HARK_ERR_INVALID_ARG);
    CHECKF(strstr(err.msg, "tensor 'WAV': element 77 is NaN"), "%s", err.msg);

    /* the response WeNet expects: TRANSCRIPTS as BYTES, binary, [1, 1] */
    const char *text = "\xe4\xbd\xa0\xe5\xa5\xbd hello";
    size_t bs;
    uint8_t *packed = kserve_bytes_pack(&text, NULL, 1, &bs);
    int64_t shape[2] = {1, 1};
    kserve_output_t o = {"TRANSCRIPTS", KSERVE_BYTES, 2, shape, packed, bs};
    kserve_response_t resp;
    CHECK_OK(kserve_build_response(&r, "wenet", "1", &o, 1, &resp, &err));
    CHECK(resp.binary && resp.len == resp.header_len + bs);
    kserve_parsed_response_t pr;
    CHECKF(kserve_parse_response(resp.body, resp.len, resp.header_len, &pr, &err) == HARK_OK, "%s",
           err.msg);
    CHECK(!strcmp(pr.model_name, "wenet") && !strcmp(pr.model_version, "1"));
    CHECK(pr.n_outputs == 1 && pr.outputs[0].binary && pr.outputs[0].dtype == KSERVE_BYTES);
    size_t pos = 0, el;
    const uint8_t *e;
    CHECK(kserve_bytes_next(&pr.outputs[0], &pos, &e, &el) && el == strlen(text) &&
          !memcmp(e, text, el));
    CHECK(!kserve_bytes_next(&pr.outputs[0], &pos, &e, &el));
    kserve_parsed_response_free(&pr);
    kserve_response_free(&resp);
    hark_free(packed);
    kserve_request_free(&r);
}

TEST(kserve_bytes_input)
{
    /* AUDIO as BYTES: two elements (a WAV file's bytes, with NULs) in binary, and JSON strings */
    const char *el[2] = {"RIFF\0\0\0\0WAVE", "xy"};
    size_t ls[2] = {12, 2};
    size_t bs;
    uint8_t *packed = kserve_bytes_pack(el, ls, 2, &bs);
    CHECK(packed && bs == 4 + 12 + 4 + 2);
    char json[300];
    snprintf(json, sizeof json,
             "{\"inputs\":[{\"name\":\"AUDIO\",\"shape\":[2],\"datatype\":\"BYTES\","
             "\"parameters\":{\"binary_data_size\":%zu}}]}",
             bs);
    uint8_t body[512];
    const void *blobs[] = {packed};
    size_t n = make_body(body, json, blobs, &bs, 1);
    kserve_request_t r;
    hark_err_t err = {0};
    CHECKF(kserve_parse_request(body, n, strlen(json), &r, &err) == HARK_OK, "%s", err.msg);
    size_t pos = 0, l;
    const uint8_t *e;
    CHECK(kserve_bytes_next(&r.inputs[0], &pos, &e, &l) && l == 12 && !memcmp(e, el[0], 12));
    CHECK(kserve_bytes_next(&r.inputs[0], &pos, &e, &l) && l == 2 && !memcmp(e, "xy", 2));
    CHECK(!kserve_bytes_next(&r.inputs[0], &pos, &e, &l));
    CHECK(kserve_tensor_data(&r, &r.inputs[0]) == NULL);
    kserve_request_free(&r);
    hark_free(packed);

    static const char js[] = "{\"inputs\":[{\"name\":\"AUDIO\",\"shape\":[1,2],\"datatype\":"
                             "\"BYTES\",\"data\":[[\"h\\u00e9\",\"\"]]}]}";
    CHECKF(kserve_parse_request((const uint8_t *)js, sizeof js - 1, NO_HEADER, &r, &err) == HARK_OK,
           "%s", err.msg);
    CHECK(r.inputs[0].size == 4 + 3 + 4);
    pos = 0;
    CHECK(kserve_bytes_next(&r.inputs[0], &pos, &e, &l) && l == 3 && !memcmp(e, "h\xc3\xa9", 3));
    CHECK(kserve_bytes_next(&r.inputs[0], &pos, &e, &l) && l == 0);
    kserve_request_free(&r);
}

typedef struct {
    const char *json;
    const char *blob; /* appended after the JSON (may hold NULs: blob_len) */
    size_t blob_len;
    int header; /* 1: pass the JSON length as the header length */
    int status;
    const char *msg;
} bad_req_t;

TEST(kserve_malformed_requests)
{
    static const bad_req_t cases[] = {
        {"", NULL, 0, 0, HARK_ERR_INVALID_ARG, "empty request body"},
        {"{\"inputs\":[", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "malformed JSON in the request header near byte"},
        {"[1]", NULL, 0, 0, HARK_ERR_INVALID_ARG, "the request header must be a JSON object"},
        {"{} x", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "unexpected bytes after the JSON request header at byte 3 (binary data needs an "
         "Inference-Header-Content-Length header)"},
        {"{}", NULL, 0, 0, HARK_ERR_INVALID_ARG, "request needs an 'inputs' array"},
        {"{\"inputs\":[{\"name\":\"\xff\"}]}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "the JSON request header is not valid UTF-8 at byte 20"},
        {"{\"id\":5,\"inputs\":[]}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "request 'id' must be a string"},
        {"{\"inputs\":[{\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}", NULL, 0, 0,
         HARK_ERR_INVALID_ARG, "inputs[0] needs a non-empty string 'name'"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FLOAT\",\"data\":[1]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "input 'X': unknown datatype 'FLOAT'"},
        {"{\"inputs\":[{\"name\":\"X\",\"datatype\":\"FP32\",\"data\":[1]}]}", NULL, 0, 0,
         HARK_ERR_INVALID_ARG, "input 'X' needs a 'shape' array"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1,-3],\"datatype\":\"FP32\",\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X': shape[1] = -3 is negative"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1.5],\"datatype\":\"FP32\",\"data\":[1]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "input 'X': shape[0] must be an integer"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[4294967296,4294967296],\"datatype\":\"FP32\","
         "\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X': shape has more than 2^63 elements"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[3037000499,3037000499],\"datatype\":\"FP64\","
         "\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X': shape is too large for this machine"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[2,2],\"datatype\":\"FP32\",\"data\":[1,2,3]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X': 'data' has 3 elements, shape says 4"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[2],\"datatype\":\"INT32\",\"data\":[1,\"2\"]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X': data[1] must be a number for INT32"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[200]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "input 'X': data[0] = 200 is out of range for INT8"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT32\",\"data\":[1.5]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "data[0] = 1.5 is not an integer for INT32"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"UINT64\",\"data\":"
         "[18446744073709551615]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "send it as binary data"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"BOOL\",\"data\":[1]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "data[0] must be true or false for BOOL"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[1]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "data[0] must be a string for BYTES"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP16\",\"data\":[1]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "FP16 cannot be sent as JSON data"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[{}]}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "'data' may only hold (nested arrays of) scalars"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\"}]}", NULL, 0, 0,
         HARK_ERR_INVALID_ARG, "input 'X' has neither 'data' nor parameters.binary_data_size"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1],"
         "\"parameters\":{\"binary_data_size\":4}}]}",
         "abcd", 4, 1, HARK_ERR_INVALID_ARG,
         "input 'X' has both 'data' and parameters.binary_data_size"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"binary_data_size\":4}}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X' has binary_data_size but there is no Inference-Header-Content-Length"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[2],\"datatype\":\"FP32\",\"parameters\":"
         "{\"binary_data_size\":8}}]}",
         "abcd", 4, 1, HARK_ERR_INVALID_ARG,
         "input 'X': binary_data_size 8 but only 4 bytes of binary data remain"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[2],\"datatype\":\"FP32\",\"parameters\":"
         "{\"binary_data_size\":4}}]}",
         "abcd", 4, 1, HARK_ERR_INVALID_ARG,
         "input 'X': binary_data_size 4 does not match shape × FP32 = 8 bytes"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"binary_data_size\":4}}]}",
         "abcdEF", 6, 1, HARK_ERR_INVALID_ARG,
         "2 bytes after the JSON header are not claimed by any binary_data_size"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"binary_data_size\":-4}}]}",
         "abcd", 4, 1, HARK_ERR_INVALID_ARG,
         "input 'X': binary_data_size must be a non-negative integer"},
        {"{\"inputs\":[{\"name\":\"S\",\"shape\":[2],\"datatype\":\"BYTES\",\"parameters\":"
         "{\"binary_data_size\":6}}]}",
         "\x01\0\0\0a\0", 6, 1, HARK_ERR_INVALID_ARG,
         "input 'S': BYTES element 1 at byte 5: truncated 4-byte length"},
        {"{\"inputs\":[{\"name\":\"S\",\"shape\":[1],\"datatype\":\"BYTES\",\"parameters\":"
         "{\"binary_data_size\":6}}]}",
         "\x09\0\0\0ab", 6, 1, HARK_ERR_INVALID_ARG,
         "input 'S': BYTES element 0 at byte 0 runs past binary_data_size 6"},
        {"{\"inputs\":[{\"name\":\"S\",\"shape\":[2],\"datatype\":\"BYTES\",\"parameters\":"
         "{\"binary_data_size\":5}}]}",
         "\x01\0\0\0a", 5, 1, HARK_ERR_INVALID_ARG,
         "input 'S': 1 BYTES elements in the binary data, shape says 2"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]},"
         "{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG, "input 'X' is given twice"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"shared_memory_region\":\"r\"}}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X': parameters.shared_memory_region needs parameters.shared_memory_byte_size"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4},\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X' must set only one of 'data', parameters.binary_data_size and "
         "parameters.shared_memory_region"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4,"
         "\"shared_memory_offset\":-8}}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X': parameters.shared_memory_offset must be a non-negative integer"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"shared_memory_byte_size\":4},\"data\":[1]}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X': parameters.shared_memory_byte_size without parameters.shared_memory_region"},
        {"{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"FP32\",\"parameters\":"
         "{\"shared_memory_region\":\"\",\"shared_memory_byte_size\":4}}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "input 'X': parameters.shared_memory_region must be a non-empty string"},
        {"{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"shared_memory_region\":"
         "\"r\",\"shared_memory_byte_size\":8,\"binary_data\":true}}]}",
         NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "output 'Y' cannot set both parameters.shared_memory_region and binary_data: true"},
        {"{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"classification\":3}}]}",
         NULL, 0, 0, HARK_ERR_UNSUPPORTED,
         "output 'Y': the classification extension is not supported"},
        {"{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"binary_data\":1}}]}", NULL,
         0, 0, HARK_ERR_INVALID_ARG, "output 'Y': parameters.binary_data must be true or false"},
        {"{\"inputs\":[],\"outputs\":[{\"name\":\"Y\"},{\"name\":\"Y\"}]}", NULL, 0, 0,
         HARK_ERR_INVALID_ARG, "output 'Y' is requested twice"},
        {"{\"inputs\":[],\"outputs\":[{}]}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "outputs[0] needs a non-empty string 'name'"},
        {"{\"inputs\":[],\"parameters\":[]}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "request 'parameters' must be an object"},
        {"{\"inputs\":[],\"parameters\":{\"sequence_id\":-1}}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "parameters.sequence_id must be a non-negative integer or a string"},
        {"{\"inputs\":[],\"parameters\":{\"sequence_start\":1}}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "parameters.sequence_start must be true or false"},
        {"{\"inputs\":[],\"parameters\":{\"priority\":1.5}}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "parameters.priority must be a non-negative integer"},
        {"{\"inputs\":[],\"parameters\":{\"timeout\":\"x\"}}", NULL, 0, 0, HARK_ERR_INVALID_ARG,
         "parameters.timeout must be a non-negative integer (microseconds)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t body[1024];
        size_t jl = strlen(cases[i].json);
        memcpy(body, cases[i].json, jl);
        if (cases[i].blob)
            memcpy(body + jl, cases[i].blob, cases[i].blob_len);
        kserve_request_t r;
        hark_err_t err = {0};
        int rc = kserve_parse_request(body, jl + cases[i].blob_len,
                                      cases[i].header ? jl : NO_HEADER, &r, &err);
        CHECKF(rc == cases[i].status && strstr(err.msg, cases[i].msg),
               "case %zu: rc %d '%s', expected %d '%s'", i, rc, err.msg, cases[i].status,
               cases[i].msg);
        CHECK(r.json == NULL && r.inputs == NULL);
    }
    /* header length values */
    size_t hl;
    hark_err_t err = {0};
    CHECK(kserve_parse_header_length("12a", 3, 100, &hl, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "Inference-Header-Content-Length '12a' is not a decimal number"));
    CHECK(kserve_parse_header_length("101", 3, 100, &hl, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "Inference-Header-Content-Length 101 exceeds the body length 100"));
    CHECK(kserve_parse_header_length(" ", 1, 100, &hl, &err) == HARK_ERR_INVALID_ARG);
    CHECK(kserve_parse_header_length("99999999999999999999999", 23, 100, &hl, &err) ==
          HARK_ERR_INVALID_ARG);
    CHECK(kserve_parse_header_length(" 100 ", 5, 100, &hl, &err) == HARK_OK && hl == 100);
    kserve_request_t r;
    CHECK(kserve_parse_request((const uint8_t *)"{}", 2, 0, &r, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "Inference-Header-Content-Length is 0"));
    CHECK(kserve_parse_request((const uint8_t *)"{}", 2, 3, &r, &err) == HARK_ERR_INVALID_ARG);
}

TEST(kserve_response_json_and_binary)
{
    float logits[6] = {0.5f, -1.25f, 3e-8f, NAN, 2.0f, 0.1f};
    int64_t lshape[2] = {2, 3};
    int64_t ids[3] = {1, -9007199254740993LL, INT64_MAX};
    int64_t ishape[1] = {3};
    const char *txt[2] = {"ok \"quoted\"\n", "bad \xff utf8"};
    size_t bs;
    uint8_t *packed = kserve_bytes_pack(txt, NULL, 2, &bs);
    int64_t tshape[1] = {2};
    uint8_t flags[2] = {1, 0};
    int64_t fshape[1] = {2};
    kserve_output_t outs[4] = {{"LOGITS", KSERVE_FP32, 2, lshape, logits, sizeof logits},
                               {"IDS", KSERVE_INT64, 1, ishape, ids, sizeof ids},
                               {"TEXT", KSERVE_BYTES, 1, tshape, packed, bs},
                               {"FLAGS", KSERVE_BOOL, 1, fshape, flags, 2}};
    hark_err_t err = {0};
    /* no request: every output as JSON */
    kserve_response_t resp;
    CHECK_OK(kserve_build_response(NULL, "m", "3", outs, 4, &resp, &err));
    CHECK(!resp.binary && resp.len == resp.header_len);
    cJSON *j = cJSON_ParseWithLength((const char *)resp.body, resp.len);
    CHECKF(j, "%.*s", (int)resp.len, resp.body);
    CHECK(!strcmp(cJSON_GetObjectItem(j, "model_version")->valuestring, "3"));
    CHECK(!cJSON_GetObjectItem(j, "id"));
    const cJSON *o2 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "outputs"), 2);
    CHECK(!strcmp(cJSON_GetObjectItem(o2, "datatype")->valuestring, "BYTES"));
    CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(o2, "data"), 0)->valuestring,
                  "ok \"quoted\"\n"));
    CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(o2, "data"), 1)->valuestring,
                  "bad \xef\xbf\xbd utf8"));
    cJSON_Delete(j);
    CHECKF(strstr((const char *)resp.body, "[1,-9007199254740993,9223372036854775807]"), "%s",
           resp.body); /* int64 exact */
    CHECK(strstr((const char *)resp.body, "\"data\":[0.5,-1.25,2.99999989e-08,null,2,"
                                          "0.100000001]"));
    CHECK(strstr((const char *)resp.body, "\"data\":[true,false]"));
    /* parsing it back: int64 beyond 2^53 cannot travel exactly through JSON numbers */
    kserve_parsed_response_t pr;
    CHECK(kserve_parse_response(resp.body, resp.len, NO_HEADER, &pr, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "output 'IDS': data[1] = -9007199254740992 is out of range for INT64 "
                          "in JSON (|v| > 2^53 is inexact; send it as binary data)"));
    kserve_response_free(&resp);
    /* without them, our own JSON response parses back to the same tensors */
    kserve_output_t some[3] = {outs[0], outs[2], outs[3]};
    CHECK_OK(kserve_build_response(NULL, "m", "3", some, 3, &resp, &err));
    CHECKF(kserve_parse_response(resp.body, resp.len, NO_HEADER, &pr, &err) == HARK_OK, "%s",
           err.msg);
    CHECK(pr.n_outputs == 3 && pr.outputs[0].count == 6 && !pr.outputs[0].binary);
    float back[6];
    CHECK(kserve_tensor_to_f32(&pr.outputs[0], back, &err) == HARK_ERR_INVALID_ARG); /* the NaN */
    CHECK(strstr(err.msg, "tensor 'LOGITS': element 3 is NaN"));
    // cppcheck-suppress invalidPointerCast ; JSON data lives in the arena, aligned floats
    const float *bf = (const float *)pr.outputs[0].data;
    CHECK(bf[0] == 0.5f && bf[1] == -1.25f && bf[2] == 3e-8f && bf[4] == 2.0f && bf[5] == 0.1f);
    CHECK(pr.outputs[1].dtype == KSERVE_BYTES && pr.outputs[1].count == 2);
    CHECK(pr.outputs[2].dtype == KSERVE_BOOL && !memcmp(pr.outputs[2].data, flags, 2));
    kserve_parsed_response_free(&pr);
    kserve_response_free(&resp);

    /* request asks LOGITS binary, TEXT default, binary_data_output true → both binary; FLAGS
     * JSON */
    static const char rq[] =
        "{\"id\":\"r1\",\"inputs\":[],\"parameters\":{\"binary_data_output\":true},"
        "\"outputs\":[{\"name\":\"TEXT\"},{\"name\":\"FLAGS\",\"parameters\":{\"binary_data\":"
        "false}},{\"name\":\"LOGITS\",\"parameters\":{\"binary_data\":true}}]}";
    kserve_request_t r;
    CHECK_OK(kserve_parse_request((const uint8_t *)rq, sizeof rq - 1, NO_HEADER, &r, &err));
    CHECK_OK(kserve_build_response(&r, "m", "3", outs, 4, &resp, &err));
    CHECK(resp.binary && resp.len == resp.header_len + bs + sizeof logits);
    CHECK(!memcmp(resp.body + resp.header_len, packed, bs)); /* blobs in outputs[] order */
    CHECKF(kserve_parse_response(resp.body, resp.len, resp.header_len, &pr, &err) == HARK_OK, "%s",
           err.msg);
    CHECK(!strcmp(pr.id, "r1") && pr.n_outputs == 3);
    CHECK(!strcmp(pr.outputs[0].name, "TEXT") && pr.outputs[0].binary && pr.outputs[0].size == bs &&
          !memcmp(pr.outputs[0].data, packed, bs));
    CHECK(!strcmp(pr.outputs[1].name, "FLAGS") && !pr.outputs[1].binary &&
          pr.outputs[1].count == 2 && !memcmp(pr.outputs[1].data, flags, 2));
    CHECK(!strcmp(pr.outputs[2].name, "LOGITS") && pr.outputs[2].binary &&
          pr.outputs[2].ndim == 2 && pr.outputs[2].shape[1] == 3 &&
          !memcmp(pr.outputs[2].data, logits, sizeof logits));
    kserve_parsed_response_free(&pr);
    kserve_response_free(&resp);
    kserve_request_free(&r);

    /* unknown requested output; malformed output descriptor */
    static const char rq2[] = "{\"inputs\":[],\"outputs\":[{\"name\":\"NOPE\"}]}";
    CHECK_OK(kserve_parse_request((const uint8_t *)rq2, sizeof rq2 - 1, NO_HEADER, &r, &err));
    CHECK(kserve_build_response(&r, "m", "1", outs, 4, &resp, &err) == HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "unknown output 'NOPE' requested") && resp.body == NULL);
    kserve_request_free(&r);
    kserve_output_t badout = {"LOGITS", KSERVE_FP32, 2, lshape, logits, 20};
    CHECK(kserve_build_response(NULL, "m", "1", &badout, 1, &resp, &err) == HARK_ERR_INTERNAL);
    CHECK(strstr(err.msg, "output 'LOGITS': 20 bytes for shape with 6 FP32 elements"));
    hark_free(packed);
}

/* perf_analyzer parses every field of the statistics as a number; versions are strings. */
/* Triton's shared memory parameters: inputs and outputs named in regions are taken with their
 * offsets and sizes (no data until the service reads them), and the response names the region
 * an output went to instead of carrying its data. */
TEST(kserve_shared_memory_request_and_response)
{
    const char *body =
        "{\"inputs\":[{\"name\":\"WAV\",\"shape\":[1,3],\"datatype\":\"FP32\","
        "\"parameters\":{\"shared_memory_region\":\"in0\",\"shared_memory_offset\":"
        "16,\"shared_memory_byte_size\":12}},{\"name\":\"L\",\"shape\":[1],"
        "\"datatype\":\"INT32\",\"data\":[3]}],\"outputs\":[{\"name\":\"T\","
        "\"parameters\":{\"shared_memory_region\":\"out0\",\"shared_memory_byte_size\""
        ":64,\"shared_memory_offset\":8}},{\"name\":\"U\"}]}";
    kserve_request_t r;
    hark_err_t err = {0};
    CHECK_OK(kserve_parse_request((const uint8_t *)body, strlen(body), (size_t)-1, &r, &err));
    CHECK_EQ_INT(r.n_inputs, 2);
    CHECK(r.inputs[0].shm_region && !strcmp(r.inputs[0].shm_region, "in0"));
    CHECK(r.inputs[0].shm_offset == 16 && r.inputs[0].shm_byte_size == 12);
    CHECK(r.inputs[0].data == NULL && r.inputs[0].size == 0);
    CHECK(r.inputs[1].shm_region == NULL && r.inputs[1].size == 4);
    CHECK(r.outputs[0].shm_region && !strcmp(r.outputs[0].shm_region, "out0"));
    CHECK(r.outputs[0].shm_offset == 8 && r.outputs[0].shm_byte_size == 64);
    CHECK(r.outputs[1].shm_region == NULL);
    /* the service wrote 9 bytes of T into out0: the response names it; U comes as data */
    r.outputs[0].shm_written = 9;
    const char *txt[1] = {"hello"};
    size_t len;
    uint8_t *packed = kserve_bytes_pack(txt, NULL, 1, &len);
    int64_t shape[2] = {1, 1};
    int32_t u = 7;
    kserve_output_t outs[2] = {{"T", KSERVE_BYTES, 2, shape, packed, len},
                               {"U", KSERVE_INT32, 1, shape, (const uint8_t *)&u, 4}};
    kserve_response_t resp;
    CHECK_OK(kserve_build_response(&r, "m", "1", outs, 2, &resp, &err));
    CHECK(!resp.binary);
    CHECKF(strstr((const char *)resp.body,
                  "{\"name\":\"T\",\"datatype\":\"BYTES\",\"shape\":[1,1],\"parameters\":{"
                  "\"shared_memory_region\":\"out0\",\"shared_memory_byte_size\":9,"
                  "\"shared_memory_offset\":8}}") != NULL,
           "%s", (const char *)resp.body);
    CHECK(strstr((const char *)resp.body, "hello") == NULL);
    CHECK(strstr((const char *)resp.body, "{\"name\":\"U\",\"datatype\":\"INT32\",\"shape\":[1],"
                                          "\"data\":[7]}") != NULL);
    /* the client side reads it back: T has no data, its region named */
    kserve_parsed_response_t pr;
    CHECK_OK(kserve_parse_response(resp.body, resp.len, (size_t)-1, &pr, &err));
    CHECK(pr.n_outputs == 2 && pr.outputs[0].shm_region &&
          !strcmp(pr.outputs[0].shm_region, "out0") && pr.outputs[0].shm_byte_size == 9);
    kserve_parsed_response_free(&pr);
    kserve_response_free(&resp);
    hark_free(packed);
    kserve_request_free(&r);
}

TEST(kserve_stats_json)
{
    kserve_batch_stats_t bst[2] = {{1, {10, 100}, {10, 1000}, {10, 50}},
                                   {8, {2, 30}, {2, 400}, {2, 20}}};
    kserve_model_stats_t s = {.name = "wenet",
                              .version = "1",
                              .last_inference = 1700000000123ULL,
                              .inference_count = 26,
                              .execution_count = 12,
                              .success = {26, 123456789},
                              .fail = {1, 5},
                              .queue = {26, 1000},
                              .compute_input = {12, 2000},
                              .compute_infer = {12, UINT64_MAX},
                              .compute_output = {12, 4000},
                              .n_batch_stats = 2,
                              .batch_stats = bst};
    char *js = kserve_stats_json(&s, 1);
    CHECK(js);
    cJSON *j = cJSON_Parse(js);
    CHECK(j);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "model_stats"), 0);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(m, "version")));
    CHECK(!strcmp(cJSON_GetObjectItem(m, "name")->valuestring, "wenet"));
    static const char *const top[] = {"last_inference", "inference_count", "execution_count"};
    for (int i = 0; i < 3; i++)
        CHECKF(cJSON_IsNumber(cJSON_GetObjectItem(m, top[i])), "%s", top[i]);
    CHECK(cJSON_GetObjectItem(m, "inference_count")->valuedouble == 26);
    static const char *const st[] = {"success",       "fail",          "queue",
                                     "compute_input", "compute_infer", "compute_output",
                                     "cache_hit",     "cache_miss"};
    const cJSON *is = cJSON_GetObjectItem(m, "inference_stats");
    for (int i = 0; i < 8; i++) {
        const cJSON *d = cJSON_GetObjectItem(is, st[i]);
        CHECKF(cJSON_IsNumber(cJSON_GetObjectItem(d, "count")) &&
                   cJSON_IsNumber(cJSON_GetObjectItem(d, "ns")),
               "%s", st[i]);
    }
    CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(is, "queue"), "count")->valuedouble == 26);
    CHECK(strstr(js, "\"compute_infer\":{\"count\":12,\"ns\":18446744073709551615}")); /* exact */
    const cJSON *b = cJSON_GetObjectItem(m, "batch_stats");
    CHECK(cJSON_GetArraySize(b) == 2);
    CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 1), "batch_size")->valuedouble == 8);
    CHECK(cJSON_IsNumber(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(b, 1), "compute_infer"), "ns")));
    cJSON_Delete(j);
    hark_free(js);
    js = kserve_stats_json(NULL, 0);
    CHECK(js && !strcmp(js, "{\"model_stats\":[]}"));
    hark_free(js);
}

TEST(kserve_metadata_json)
{
    static const char *const ext[] = {
        "classification",      "sequence",           "model_repository", "schedule_policy",
        "model_configuration", "binary_tensor_data", "statistics"};
    char *js = kserve_server_metadata_json("hark", HARK_VERSION, ext, 7);
    cJSON *j = cJSON_Parse(js);
    CHECK(j && !strcmp(cJSON_GetObjectItem(j, "name")->valuestring, "hark"));
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(j, "extensions")) == 7);
    CHECK(!strcmp(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "extensions"), 6)->valuestring,
                  "statistics"));
    cJSON_Delete(j);
    hark_free(js);

    int64_t wav_dims[1] = {-1}, one[1] = {1};
    kserve_tensor_meta_t in[2] = {{"WAV", "FP32", 1, wav_dims}, {"WAV_LENS", "INT32", 1, one}};
    kserve_tensor_meta_t out[1] = {{"TRANSCRIPTS", "BYTES", 1, one}};
    const char *versions[1] = {"1"};
    kserve_model_meta_t m = {"wenet", versions, 1, "hark", 64, in, out, 2, 1};
    js = kserve_model_metadata_json(&m);
    CHECKF(js && !strcmp(js, "{\"name\":\"wenet\",\"versions\":[\"1\"],\"platform\":\"hark\","
                             "\"inputs\":[{\"name\":\"WAV\",\"datatype\":\"FP32\",\"shape\":"
                             "[-1,-1]},{\"name\":\"WAV_LENS\",\"datatype\":\"INT32\",\"shape\":"
                             "[-1,1]}],\"outputs\":[{\"name\":\"TRANSCRIPTS\",\"datatype\":"
                             "\"BYTES\",\"shape\":[-1,1]}]}"),
           "%s", js);
    hark_free(js);
    m.max_batch_size = 0;
    js = kserve_model_metadata_json(&m);
    CHECK(js && strstr(js, "\"name\":\"WAV_LENS\",\"datatype\":\"INT32\",\"shape\":[1]"));
    hark_free(js);
    js = kserve_error_json("input 'X': \"bad\"");
    CHECK(js && !strcmp(js, "{\"error\":\"input 'X': \\\"bad\\\"\"}"));
    hark_free(js);
}

TEST(kserve_dtypes)
{
    static const char *const names[] = {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64",
                                        "INT8", "INT16", "INT32",  "INT64",  "FP16",
                                        "FP32", "FP64",  "BYTES",  "BF16"};
    static const size_t sizes[] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 0, 2};
    for (int i = 0; i < 14; i++) {
        kserve_dtype_t dt = kserve_dtype_parse(names[i]);
        CHECK(dt != KSERVE_INVALID && !strcmp(kserve_dtype_name(dt), names[i]));
        CHECK(kserve_dtype_size(dt) == sizes[i]);
    }
    CHECK(kserve_dtype_parse("fp32") == KSERVE_INVALID);
    /* FP16 / BF16 binary inputs convert to float */
    uint16_t h[3] = {0x3c00, 0xc000, 0x0001}; /* 1, -2, smallest subnormal */
    kserve_tensor_t th = {.name = "H",
                          .dtype = KSERVE_FP16,
                          .ndim = 1,
                          .shape = {3},
                          .count = 3,
                          .data = (const uint8_t *)h,
                          .size = 6,
                          .binary = 1};
    float f[3];
    hark_err_t err = {0};
    CHECK_OK(kserve_tensor_to_f32(&th, f, &err));
    CHECK(f[0] == 1.0f && f[1] == -2.0f && f[2] == ldexpf(1, -24));
    uint16_t bf[1] = {0x4040}; /* 3.0 */
    kserve_tensor_t tb = {.name = "B",
                          .dtype = KSERVE_BF16,
                          .ndim = 1,
                          .shape = {1},
                          .count = 1,
                          .data = (const uint8_t *)bf,
                          .size = 2,
                          .binary = 1};
    CHECK_OK(kserve_tensor_to_f32(&tb, f, &err));
    CHECK(f[0] == 3.0f);
}

/* Every allocation failure while parsing and answering is reported, never crashes or leaks. */
TEST(kserve_out_of_memory)
{
    static const char rq[] =
        "{\"id\":\"x\",\"inputs\":[{\"name\":\"A\",\"shape\":[2],\"datatype\":\"FP32\",\"data\":"
        "[1,2]},{\"name\":\"B\",\"shape\":[1],\"datatype\":\"BYTES\",\"data\":[\"s\"]}],"
        "\"outputs\":[{\"name\":\"A\"},{\"name\":\"B\",\"parameters\":{\"binary_data\":true}}]}";
    int done = 0;
    for (long n = 1; n < 200 && !done; n++) {
        kserve_request_t r;
        kserve_response_t resp = {0};
        hark_err_t err = {0};
        alloc_fail_after(n);
        int rc = kserve_parse_request((const uint8_t *)rq, sizeof rq - 1, NO_HEADER, &r, &err);
        if (rc == HARK_OK) {
            kserve_output_t outs[2] = {
                {"A", KSERVE_FP32, 1, r.inputs[0].shape, r.inputs[0].data, r.inputs[0].size},
                {"B", KSERVE_BYTES, 1, r.inputs[1].shape, r.inputs[1].data, r.inputs[1].size}};
            rc = kserve_build_response(&r, "m", "1", outs, 2, &resp, &err);
            kserve_request_free(&r);
        }
        alloc_fail_reset();
        if (rc == HARK_OK) {
            done = 1;
            kserve_response_free(&resp);
        } else {
            CHECKF(rc == HARK_ERR_NOMEM && strstr(err.msg, "out of memory"), "n=%ld: %d %s", n, rc,
                   err.msg);
        }
    }
    CHECK(done);
}

/* The block-wise finiteness scan agrees with isfinite() for one bad value at every position near
 * block edges and the tail, at unaligned starts, for every kind of non-finite value; finite
 * extremes (largest, denormals, -0) pass. */
TEST(kserve_f32_find_nonfinite_positions)
{
    enum { N = 1100 };
    float *buf = malloc(sizeof(float) * (N + 4));
    const float bad[4] = {NAN, -NAN, INFINITY, -INFINITY};
    const float good[4] = {3.4028235e38f, -3.4028235e38f, 1e-45f, -0.0f};
    size_t lens[] = {0, 1, 7, 255, 256, 257, 511, 512, 513, 1000, N};
    for (int start = 0; start < 3; start++) {
        float *x = buf + start; /* also unaligned for vectors */
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li];
            for (size_t i = 0; i < n; i++)
                x[i] = good[i % 4] * (i % 3 ? 1.0f : 0.5f);
            CHECKF(kserve_f32_find_nonfinite(x, n) == n, "n %zu start %d", n, start);
            for (size_t pos = 0; pos < n; pos += (pos + 40 < n && pos > 40 ? 37 : 1)) {
                float keep = x[pos];
                x[pos] = bad[pos % 4];
                size_t got = kserve_f32_find_nonfinite(x, n);
                CHECKF(got == pos, "n %zu start %d: bad at %zu, found %zu", n, start, pos, got);
                x[pos] = keep;
            }
            if (n > 3) { /* two bad values: the first one is reported */
                x[n - 1] = INFINITY;
                x[n / 2] = NAN;
                CHECK_EQ_INT(kserve_f32_find_nonfinite(x, n), n / 2 < n - 1 ? n / 2 : n - 1);
            }
        }
    }
    free(buf);
}
