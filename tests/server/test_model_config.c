/* Tests for src/server/model_config.c: the text-format parser, the config tools/convert_wenet.py
 * writes, a WeNet-Triton-style config full of ignored fields, every error with its file:line,
 * the GET …/config JSON, out-of-memory paths. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "server/model_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Exactly what tools/convert_wenet.py's config_pbtxt() writes for a U2++ model with
 * ctc_weight 0.3 and reverse_weight 0.5. */
static const char CONVERT_WENET_PBTXT[] =
    "name: \"wenet_u2pp\"\n"
    "backend: \"hark\"\n"
    "max_batch_size: 64\n"
    "input [\n"
    "  {\n"
    "    name: \"WAV\"\n"
    "    data_type: TYPE_FP32\n"
    "    dims: [ -1 ]\n"
    "  },\n"
    "  {\n"
    "    name: \"WAV_LENS\"\n"
    "    data_type: TYPE_INT32\n"
    "    dims: [ 1 ]\n"
    "  }\n"
    "]\n"
    "output [\n"
    "  {\n"
    "    name: \"TRANSCRIPTS\"\n"
    "    data_type: TYPE_STRING\n"
    "    dims: [ 1 ]\n"
    "  }\n"
    "]\n"
    "dynamic_batching {\n"
    "  preferred_batch_size: [ 16, 32 ]\n"
    "  max_queue_delay_microseconds: 2000\n"
    "}\n"
    "instance_group [\n"
    "  {\n"
    "    count: 1\n"
    "    kind: KIND_GPU\n"
    "  }\n"
    "]\n"
    "parameters { key: \"family\" value { string_value: \"wenet_u2\" } }\n"
    "parameters { key: \"decoding_method\" value { string_value: \"attention_rescoring\" } }\n"
    "parameters { key: \"beam_size\" value { string_value: \"10\" } }\n"
    "parameters { key: \"ctc_weight\" value { string_value: \"0.3\" } }\n"
    "parameters { key: \"reverse_weight\" value { string_value: \"0.5\" } }\n";

/* Shaped like wenet/runtime/gpu/model_repo/attention_rescoring/config.pbtxt (Python backend),
 * plus the Triton sections such repos carry that hark does not use. */
static const char WENET_TRITON_PBTXT[] =
    "# attention rescoring, WeNet Triton model repo style\n"
    "name: \"attention_rescoring\"\n"
    "backend: \"python\"\n"
    "max_batch_size: 64\n"
    "\n"
    "parameters [\n"
    "  {\n"
    "    key: \"vocabulary\",\n"
    "    value: { string_value: \"/ws/onnx_model/units.txt\"}\n"
    "  },\n"
    "  {\n"
    "    key: \"bidecoder\",\n"
    "    value: { string_value: \"1\"}\n"
    "  },\n"
    "  {\n"
    "    key: \"lm_path\"\n"
    "    value: { string_value: \"None\"}\n"
    "  },\n"
    "  {\n"
    "   key: \"FORCE_CPU_ONLY_INPUT_TENSORS\"\n"
    "   value: {string_value:\"no\"}\n"
    "  }\n"
    "]\n"
    "\n"
    "input [\n"
    "  {\n"
    "    name: \"encoder_out\"\n"
    "    data_type: TYPE_FP16\n"
    "    dims: [-1, 256] # [-1, feature_size]\n"
    "  },\n"
    "  {\n"
    "    name: \"encoder_out_lens\"\n"
    "    data_type: TYPE_INT32\n"
    "    dims: [1]\n"
    "    reshape: { shape: [ ] }\n"
    "  },\n"
    "  {\n"
    "    name: \"batch_log_probs\"\n"
    "    data_type: TYPE_FP16\n"
    "    dims: [-1, 10]\n"
    "  },\n"
    "  {\n"
    "    name: \"batch_log_probs_idx\"\n"
    "    data_type: TYPE_INT64\n"
    "    dims: [-1, 10]\n"
    "  }\n"
    "]\n"
    "\n"
    "output [\n"
    "  {\n"
    "    name: \"OUTPUT0\"\n"
    "    data_type: TYPE_STRING\n"
    "    dims: [1]\n"
    "  }\n"
    "]\n"
    "\n"
    "dynamic_batching {\n"
    "    preferred_batch_size: [ 16, 32 ]\n"
    "    max_queue_delay_microseconds: 1000\n"
    "    priority_levels: 2\n"
    "    default_priority_level: 1\n"
    "    default_queue_policy { max_queue_size: 256 timeout_action: DELAY\n"
    "                           default_timeout_microseconds: 5000000 "
    "allow_timeout_override: true }\n"
    "    priority_queue_policy { key: 2 value { max_queue_size: 16 } }\n"
    "  }\n"
    "instance_group [\n"
    "    {\n"
    "      count: 2\n"
    "      kind: KIND_CPU\n"
    "    },\n"
    "    { name: \"gpu_pair\" count: 1 kind: KIND_GPU gpus: [ 0, 1 ]\n"
    "      rate_limiter { resources [ { name: \"R1\" count: 4 } ] } }\n"
    "]\n"
    "optimization { execution_accelerators {\n"
    "  gpu_execution_accelerator : [ {\n"
    "    name : \"tensorrt\"\n"
    "    parameters { key: \"precision_mode\" value: \"FP16\" }\n"
    "    parameters { key: \"max_workspace_size_bytes\" value: \"1073741824\" }\n"
    "  }]\n"
    "}}\n"
    "model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"encoder_out\" value: {\n"
    "  data_type: TYPE_FP16 dims: [ 10, 256 ] zero_data: true } } } ]\n"
    "version_policy: { specific { versions: [1, 3] } }\n"
    "model_transaction_policy { decoupled: False }\n"
    "response_cache { enable: true }\n"
    "default_model_filename: \"model.py\"\n";

typedef struct {
    int n;
    char lines[16][200];
} notices_t;

static void collect_notice(void *user, const char *msg)
{
    notices_t *ns = user;
    if (ns->n < 16)
        snprintf(ns->lines[ns->n], sizeof ns->lines[0], "%s", msg);
    ns->n++;
}

static int has_notice(const notices_t *ns, const char *needle)
{
    for (int i = 0; i < ns->n && i < 16; i++)
        if (strstr(ns->lines[i], needle))
            return 1;
    return 0;
}

TEST(pbtxt_syntax)
{
    static const char txt[] = "a: 'x\\ty' \"\\101\\x42\\u00e9\" # comment\n"
                              "b: -0x10; c: 017, d: 2.5e3f e: -inf\n"
                              "m < n: 1 > l: [] k: [1, -2, 3] s: { t: true }\n";
    arena_t a;
    arena_init(&a, 0);
    pbtxt_node_t *root;
    hark_err_t err = {0};
    CHECKF(pbtxt_parse(txt, sizeof txt - 1, "t.pbtxt", &a, &root, &err) == HARK_OK, "%s", err.msg);
    pbtxt_node_t *n = root->child;
    CHECK(n && !strcmp(n->name, "a") && n->kind == PBTXT_STRING);
    // cppcheck-suppress nullPointerRedundantCheck ; CHECK returns when n is NULL
    CHECKF(n->len == 7, "len %zu", n->len);
    // cppcheck-suppress nullPointerRedundantCheck ; CHECK returns when n is NULL
    CHECK(!memcmp(n->str, "x\tyAB\xc3\xa9", 7));
    int64_t i;
    double d;
    // cppcheck-suppress nullPointerRedundantCheck ; CHECK returns when n is NULL
    n = n->next;
    CHECK(!strcmp(n->name, "b") && !pbtxt_to_i64(n, &i) && i == -16 && n->line == 2);
    n = n->next;
    CHECK(!strcmp(n->name, "c") && !pbtxt_to_i64(n, &i) && i == 15);
    n = n->next;
    CHECK(!strcmp(n->name, "d") && pbtxt_to_i64(n, &i) && !pbtxt_to_double(n, &d) && d == 2500);
    n = n->next;
    CHECK(!strcmp(n->name, "e") && !pbtxt_to_double(n, &d) && isinf(d) && d < 0);
    n = n->next;
    CHECK(!strcmp(n->name, "m") && n->kind == PBTXT_MESSAGE && n->child && n->line == 3 &&
          n->col == 1);
    n = n->next;
    CHECK(!strcmp(n->name, "l") && n->kind == PBTXT_LIST && !n->child);
    n = n->next;
    CHECK(!strcmp(n->name, "k") && n->kind == PBTXT_LIST);
    CHECK(!pbtxt_to_i64(n->child->next, &i) && i == -2 && !strcmp(n->child->next->name, "k"));
    n = n->next;
    int b;
    CHECK(!strcmp(n->name, "s") && !pbtxt_to_bool(n->child, &b) && b == 1);
    CHECK(n->next == NULL);
    uint64_t u;
    pbtxt_node_t big = {.kind = PBTXT_NUMBER, .str = "18446744073709551616", .len = 20};
    CHECK(pbtxt_to_u64(&big, &u) == -1);
    big.str = "18446744073709551615";
    CHECK(pbtxt_to_u64(&big, &u) == 0 && u == UINT64_MAX);
    big.str = "-9223372036854775808";
    CHECK(pbtxt_to_i64(&big, &i) == 0 && i == INT64_MIN);
    arena_free(&a);
}

TEST(model_config_convert_wenet)
{
    notices_t ns = {0};
    model_config_opts_t opts = {collect_notice, &ns};
    model_config_t c;
    hark_err_t err = {0};
    CHECKF(model_config_parse(CONVERT_WENET_PBTXT, sizeof CONVERT_WENET_PBTXT - 1, "config.pbtxt",
                              &opts, &c, &err) == HARK_OK,
           "%s", err.msg);
    CHECK_EQ_INT(ns.n, 0);
    CHECK(!strcmp(c.name, "wenet_u2pp") && !strcmp(c.backend, "hark") && !c.platform[0]);
    CHECK(c.family && !strcmp(c.family, "wenet_u2"));
    CHECK_EQ_INT(c.max_batch_size, 64);
    CHECK_EQ_INT(c.n_inputs, 2);
    CHECK(!strcmp(c.inputs[0].name, "WAV") && c.inputs[0].data_type == MODEL_TYPE_FP32 &&
          c.inputs[0].ndims == 1 && c.inputs[0].dims[0] == -1);
    CHECK(!strcmp(c.inputs[1].name, "WAV_LENS") && c.inputs[1].data_type == MODEL_TYPE_INT32 &&
          c.inputs[1].dims[0] == 1);
    CHECK_EQ_INT(c.n_outputs, 1);
    CHECK(!strcmp(c.outputs[0].name, "TRANSCRIPTS") && c.outputs[0].data_type == MODEL_TYPE_STRING);
    CHECK(model_config_output(&c, "TRANSCRIPTS") == &c.outputs[0]);
    CHECK(model_config_input(&c, "nope") == NULL);
    CHECK(c.dynamic_batching.present && c.dynamic_batching.n_preferred == 2 &&
          c.dynamic_batching.preferred_batch_size[0] == 16 &&
          c.dynamic_batching.preferred_batch_size[1] == 32 &&
          c.dynamic_batching.max_queue_delay_microseconds == 2000);
    CHECK_EQ_INT(c.n_instance_groups, 1);
    CHECK(c.instance_groups[0].count == 1 && c.instance_groups[0].kind == MODEL_KIND_GPU &&
          c.instance_groups[0].n_gpus == 0 && !strcmp(c.instance_groups[0].name, "wenet_u2pp_0"));
    CHECK_EQ_INT(c.n_params, 5);
    CHECK(!strcmp(model_config_param(&c, "decoding_method"), "attention_rescoring"));
    CHECK(!strcmp(model_config_param(&c, "beam_size"), "10"));
    CHECK(!strcmp(model_config_param(&c, "ctc_weight"), "0.3"));
    CHECK(!strcmp(model_config_param(&c, "reverse_weight"), "0.5"));
    CHECK(model_config_param(&c, "missing") == NULL);
    CHECK(c.version_policy == MODEL_VERSIONS_LATEST && c.latest_num_versions == 1);
    CHECK(!c.sequence_batching && !c.decoupled && !c.response_cache);
    model_config_free(&c);
    model_config_free(&c); /* harmless twice */
}

TEST(model_config_wenet_triton_ignored_fields)
{
    notices_t ns = {0};
    model_config_opts_t opts = {collect_notice, &ns};
    model_config_t c;
    hark_err_t err = {0};
    CHECKF(model_config_parse(WENET_TRITON_PBTXT, sizeof WENET_TRITON_PBTXT - 1,
                              "repo/attention_rescoring/config.pbtxt", &opts, &c, &err) == HARK_OK,
           "%s", err.msg);
    CHECK(!strcmp(c.backend, "python") && c.family == NULL);
    CHECK_EQ_INT(c.n_params, 4);
    CHECK(!strcmp(model_config_param(&c, "vocabulary"), "/ws/onnx_model/units.txt"));
    CHECK(!strcmp(model_config_param(&c, "FORCE_CPU_ONLY_INPUT_TENSORS"), "no"));
    CHECK_EQ_INT(c.n_inputs, 4);
    CHECK(c.inputs[0].data_type == MODEL_TYPE_FP16 && c.inputs[0].ndims == 2 &&
          c.inputs[0].dims[0] == -1 && c.inputs[0].dims[1] == 256);
    CHECK(c.inputs[3].data_type == MODEL_TYPE_INT64);
    const model_dynamic_batching_t *d = &c.dynamic_batching;
    CHECK(d->present && d->max_queue_delay_microseconds == 1000 && d->priority_levels == 2 &&
          d->default_priority_level == 1);
    CHECK(d->default_queue_policy.max_queue_size == 256 &&
          d->default_queue_policy.timeout_action == MODEL_TIMEOUT_DELAY &&
          d->default_queue_policy.default_timeout_microseconds == 5000000 &&
          d->default_queue_policy.allow_timeout_override == 1);
    CHECK_EQ_INT(c.n_instance_groups, 2);
    CHECK(c.instance_groups[0].count == 2 && c.instance_groups[0].kind == MODEL_KIND_CPU &&
          !strcmp(c.instance_groups[0].name, "attention_rescoring_0"));
    CHECK(!strcmp(c.instance_groups[1].name, "gpu_pair") && c.instance_groups[1].n_gpus == 2 &&
          c.instance_groups[1].gpus[1] == 1);
    CHECK(c.version_policy == MODEL_VERSIONS_SPECIFIC && c.n_specific_versions == 2 &&
          c.specific_versions[1] == 3);
    CHECK(!c.decoupled && c.response_cache == 1);
    /* each ignored field reported once, with file:line */
    CHECKF(has_notice(&ns, "repo/attention_rescoring/config.pbtxt:74: ignoring field "
                           "'optimization'"),
           "notices: %d, first '%s'", ns.n, ns.lines[0]);
    CHECK(has_notice(&ns, "ignoring field 'input.reshape'"));
    CHECK(has_notice(&ns, "ignoring field 'dynamic_batching.priority_queue_policy'"));
    CHECK(has_notice(&ns, "ignoring field 'instance_group.rate_limiter'"));
    CHECK(has_notice(&ns, "ignoring field 'model_warmup'"));
    CHECK(has_notice(&ns, "ignoring field 'default_model_filename'"));
    CHECK_EQ_INT(ns.n, 6);
    model_config_free(&c);
}

TEST(model_config_streaming_sequence_batching)
{
    static const char txt[] = "name: \"streaming_wenet\"\n"
                              "platform: \"wenet_u2\"\n"
                              "max_batch_size: 512\n"
                              "sequence_batching{\n"
                              "    max_sequence_idle_microseconds: 5000000\n"
                              "    oldest {\n"
                              "      max_candidate_sequences: 1024\n"
                              "      preferred_batch_size: [32, 64, 128, 256]\n"
                              "    }\n"
                              "    control_input [\n"
                              "        {\n"
                              "            name: \"START\",\n"
                              "            control [\n"
                              "                {\n"
                              "                    kind: CONTROL_SEQUENCE_START\n"
                              "                    fp32_false_true: [0, 1]\n"
                              "                }\n"
                              "            ]\n"
                              "        }\n"
                              "    ]\n"
                              "}\n"
                              "model_transaction_policy { decoupled: true }\n"
                              "version_policy { all { } }\n";
    notices_t ns = {0};
    model_config_opts_t opts = {collect_notice, &ns};
    model_config_t c;
    hark_err_t err = {0};
    CHECKF(model_config_parse(txt, sizeof txt - 1, "s.pbtxt", &opts, &c, &err) == HARK_OK, "%s",
           err.msg);
    CHECK(c.sequence_batching && c.max_sequence_idle_microseconds == 5000000);
    CHECK(!c.dynamic_batching.present && c.decoupled);
    CHECK(c.family && !strcmp(c.family, "wenet_u2"));
    CHECK(c.version_policy == MODEL_VERSIONS_ALL);
    CHECK(c.n_instance_groups == 1 && c.instance_groups[0].kind == MODEL_KIND_AUTO &&
          c.instance_groups[0].count == 1);
    /* oldest and the control inputs are read; the FP32 control values are Triton's tensors */
    CHECK(c.seq.oldest && c.seq.max_candidate_sequences == 1024);
    CHECK(c.seq.n_preferred == 4 && c.seq.preferred_batch_size[0] == 32 &&
          c.seq.preferred_batch_size[3] == 256);
    CHECK(c.seq.n_controls == 1 && !strcmp(c.seq.controls[0].name, "START") &&
          c.seq.controls[0].kind == MODEL_CONTROL_START);
    CHECK(has_notice(&ns,
                     "ignoring field 'sequence_batching.control_input.control.fp32_false_true'"));
    CHECK_EQ_INT(ns.n, 1);
    char *js = model_config_to_json(&c);
    cJSON *j = cJSON_Parse(js);
    hark_free(js);
    cJSON *sb = cJSON_GetObjectItemCaseSensitive(j, "sequence_batching");
    cJSON *old = cJSON_GetObjectItemCaseSensitive(sb, "oldest");
    CHECK(old &&
          cJSON_GetObjectItemCaseSensitive(old, "max_candidate_sequences")->valueint == 1024);
    cJSON *ci = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(sb, "control_input"), 0);
    CHECK(ci && !strcmp(cJSON_GetObjectItemCaseSensitive(ci, "name")->valuestring, "START"));
    CHECK(
        !strcmp(cJSON_GetObjectItemCaseSensitive(
                    cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(ci, "control"), 0), "kind")
                    ->valuestring,
                "CONTROL_SEQUENCE_START"));
    cJSON_Delete(j);
    model_config_free(&c);

    /* direct { } (Triton's default strategy) */
    static const char d[] = "max_batch_size: 4 sequence_batching { max_sequence_idle_microseconds: "
                            "7 direct { max_queue_delay_microseconds: 100 } }";
    CHECKF(model_config_parse(d, sizeof d - 1, "d.pbtxt", NULL, &c, &err) == HARK_OK, "%s",
           err.msg);
    CHECK(!c.seq.oldest && c.seq.max_queue_delay_microseconds == 100 &&
          c.max_sequence_idle_microseconds == 7);
    model_config_free(&c);
}

typedef struct {
    const char *text;
    int status;
    const char *msg; /* substring of the error, incl. file:line */
} bad_case_t;

TEST(model_config_errors)
{
    static const bad_case_t cases[] = {
        {"name: \"m\"\nmax_batch: 8\n", HARK_ERR_FORMAT,
         "c.pbtxt:2:1: unknown field 'max_batch' (not a field of Triton's ModelConfig)"},
        {"dynamic_batching {\n  max_delay: 10\n}\n", HARK_ERR_FORMAT,
         "c.pbtxt:2:3: unknown field 'dynamic_batching.max_delay'"},
        {"max_batch_size: \"8\"\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:17: field 'max_batch_size': expected an integer, got a string"},
        {"max_batch_size: -1\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:1:1: field 'max_batch_size': must be >= 0, got -1"},
        {"max_batch_size: 99999999999\n", HARK_ERR_FORMAT, "(out of range)"},
        {"max_batch_size: 4\ninstance_group [\n  { count: -2 kind: KIND_GPU }\n]\n",
         HARK_ERR_INVALID_ARG, "c.pbtxt:3:5: field 'instance_group.count': must be >= 1"},
        {"instance_group [\n  { count: 0 kind: KIND_CPU }\n]\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:2:5: field 'instance_group.count': must be >= 1 (leave it out for one "
         "instance), got 0"},
        {"max_batch_size: 8\ndynamic_batching { preferred_batch_size: [4, 16] }\n",
         HARK_ERR_INVALID_ARG,
         "c.pbtxt:2:46: field 'dynamic_batching.preferred_batch_size': 16 exceeds "
         "max_batch_size 8"},
        {"dynamic_batching { preferred_batch_size: 0 }\n", HARK_ERR_INVALID_ARG,
         "field 'dynamic_batching.preferred_batch_size': must be >= 1, got 0"},
        {"instance_group { kind: KIND_TPU }\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:24: field 'instance_group.kind': unknown value 'KIND_TPU' (one of "
         "KIND_AUTO, KIND_GPU, KIND_CPU, KIND_MODEL)"},
        {"input { name: \"x\" data_type: TYPE_FLOAT dims: 1 }\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:30: field 'input.data_type': unknown value 'TYPE_FLOAT'"},
        {"input { name: \"x\" dims: 1 }\n", HARK_ERR_INVALID_ARG,
         "field 'input.data_type': input 'x' needs a data_type"},
        {"input { data_type: TYPE_FP32 dims: 1 }\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:1:1: field 'input.name': every input needs a non-empty name"},
        {"input { name: \"x\" data_type: TYPE_FP32 dims: [1, 0] }\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:1:50: field 'input.dims': input 'x': dimension 0 must be >= 1"},
        {"input { name: \"x\" data_type: TYPE_FP32 }\ninput { name: \"x\" data_type: TYPE_FP32 "
         "}\n",
         HARK_ERR_INVALID_ARG,
         "c.pbtxt:2:9: field 'input.name': 'x' is declared twice (first "
         "at line 1)"},
        {"max_batch_size: 1\nmax_batch_size: 2\n", HARK_ERR_FORMAT,
         "c.pbtxt:2:1: field 'max_batch_size': given twice (first at line 1)"},
        {"max_batch_size: [1, 2]\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:1: field 'max_batch_size': is not a repeated field"},
        {"max_batch_size: 2\nsequence_batching { oldest { } }\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:2:21: field 'sequence_batching.oldest.max_candidate_sequences': must be given"},
        {"max_batch_size: 2\nsequence_batching { direct { } oldest { max_candidate_sequences: 1 } }"
         "\n",
         HARK_ERR_FORMAT, "field 'sequence_batching.oldest': cannot be combined with 'direct'"},
        {"max_batch_size: 2\nsequence_batching { oldest { max_candidate_sequences: 2 "
         "preferred_batch_size: [4, 2] } }\n",
         HARK_ERR_INVALID_ARG, "preferred_batch_size': must be >= 1 and ascending, got 2"},
        {"max_batch_size: 2\nsequence_batching { control_input { name: \"S\" } }\n",
         HARK_ERR_INVALID_ARG, "'S' needs a control with a kind"},
        {"max_batch_size: 2\ndynamic_batching { }\nsequence_batching { }\n", HARK_ERR_FORMAT,
         "c.pbtxt:3:1: field 'sequence_batching': cannot be combined with 'dynamic_batching' "
         "(line 2)"},
        {"instance_group [ { kind: KIND_CPU gpus: [0] } ]\n", HARK_ERR_INVALID_ARG,
         "field 'instance_group.gpus': a KIND_CPU group cannot list gpus"},
        {"instance_group [ { gpus: [-1] } ]\n", HARK_ERR_INVALID_ARG,
         "field 'instance_group.gpus': device id must be >= 0, got -1"},
        {"parameters { key: \"a\" value { string_value: \"1\" } }\n"
         "parameters { key: \"a\" value { string_value: \"2\" } }\n",
         HARK_ERR_INVALID_ARG, "c.pbtxt:2:14: field 'parameters.key': 'a' is given twice"},
        {"parameters { key: \"a\" value { string: \"1\" } }\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:31: unknown field 'parameters.value.string'"},
        {"backend: \"hark\"\n", HARK_ERR_INVALID_ARG,
         "c.pbtxt:1:1: field 'backend': backend \"hark\" needs parameters"},
        {"dynamic_batching { max_queue_delay_microseconds: -5 }\n", HARK_ERR_INVALID_ARG,
         "field 'dynamic_batching.max_queue_delay_microseconds': must be >= 0, got -5"},
        {"dynamic_batching { priority_levels: 3 }\n", HARK_ERR_INVALID_ARG,
         "field 'dynamic_batching.default_priority_level': 0 is not a level in [1, "
         "priority_levels=3]"},
        {"dynamic_batching { preserve_ordering: yes }\n", HARK_ERR_FORMAT,
         "field 'dynamic_batching.preserve_ordering': expected true or false, got 'yes'"},
        {"response_cache: true\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:17: field 'response_cache': expected a message { ... }, got 'true'"},
        {"name { }\n", HARK_ERR_FORMAT, "field 'name': expected a quoted string, got a message"},
        {"version_policy { latest { num_versions: 0 } }\n", HARK_ERR_INVALID_ARG,
         "field 'version_policy.latest.num_versions': must be >= 1"},
        {"version_policy { latest { } all { } }\n", HARK_ERR_FORMAT,
         "field 'version_policy': give only one of latest, all, specific"},
        {"version_policy { specific { versions: 0 } }\n", HARK_ERR_INVALID_ARG,
         "field 'version_policy.specific.versions': must be >= 1, got 0"},
        /* syntax */
        {"name: \"abc\n", HARK_ERR_FORMAT, "c.pbtxt:1:7: unterminated string"},
        {"name: \"a\\qb\"\n", HARK_ERR_FORMAT, "c.pbtxt:1:7: unknown escape '\\q' in string"},
        {"dynamic_batching {\n  max_queue_delay_microseconds: 1\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:18: this block is never closed (missing '}')"},
        {"max_batch_size 8\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:16: expected ':' or '{' after field name 'max_batch_size', got '8'"},
        {"max_batch_size: 8 }\n", HARK_ERR_FORMAT, "c.pbtxt:1:19: expected a field name, got '}'"},
        {"input [ { name: \"a\" } \n", HARK_ERR_FORMAT,
         "c.pbtxt:1:7: '[' of field 'input' is never closed"},
        {"max_batch_size: 1x\n", HARK_ERR_FORMAT, "c.pbtxt:1:17: malformed number '1x'"},
        {"max_batch_size: 08\n", HARK_ERR_FORMAT, "malformed number '08'"},
        {"max_batch_size: $\n", HARK_ERR_FORMAT, "c.pbtxt:1:17: unexpected character '$'"},
        {"max_batch_size: - x\n", HARK_ERR_FORMAT,
         "c.pbtxt:1:17: expected a number after '-' for field 'max_batch_size'"},
        {"name:\n", HARK_ERR_FORMAT,
         "c.pbtxt:2:1: expected a value for field 'name', got end of file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config_t c;
        hark_err_t err = {0};
        notices_t ns = {0};
        model_config_opts_t opts = {collect_notice, &ns};
        int rc =
            model_config_parse(cases[i].text, strlen(cases[i].text), "c.pbtxt", &opts, &c, &err);
        CHECKF(rc == cases[i].status && strstr(err.msg, cases[i].msg),
               "case %zu: rc %d, message '%s', expected %d '%s'", i, rc, err.msg, cases[i].status,
               cases[i].msg);
        CHECK(c.inputs == NULL && c.arena.head == NULL);
    }
}

TEST(model_config_deep_nesting)
{
    char txt[1200];
    size_t n = 0;
    n += (size_t)snprintf(txt + n, sizeof txt - n, "optimization ");
    for (int i = 0; i < 100; i++)
        n += (size_t)snprintf(txt + n, sizeof txt - n, "{ a ");
    model_config_t c;
    hark_err_t err = {0};
    CHECK(model_config_parse(txt, n, "deep.pbtxt", NULL, &c, &err) == HARK_ERR_FORMAT);
    CHECKF(strstr(err.msg, "deep.pbtxt:1:") && strstr(err.msg, "nested more than 64 deep"), "%s",
           err.msg);
}

TEST(model_config_load_file)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/my_model", test_tmpdir(t));
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(path, sizeof path, "%s/config.pbtxt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f);
    fputs("platform: \"wenet_u2\"\nmax_batch_size: 2\ninstance_group { count: 3 }\n", f);
    fclose(f);
    model_config_t c;
    hark_err_t err = {0};
    CHECKF(model_config_load(path, NULL, &c, &err) == HARK_OK, "%s", err.msg);
    CHECK(!strcmp(c.name, "my_model") && !strcmp(c.instance_groups[0].name, "my_model_0"));
    CHECK(c.instance_groups[0].count == 3);
    model_config_free(&c);
    snprintf(path, sizeof path, "%s/absent.pbtxt", dir);
    CHECK(model_config_load(path, NULL, &c, &err) == HARK_ERR_IO);
    CHECK(strstr(err.msg, "absent.pbtxt: cannot open"));
}

TEST(model_config_json)
{
    model_config_t c;
    hark_err_t err = {0};
    CHECK_OK(model_config_parse(CONVERT_WENET_PBTXT, sizeof CONVERT_WENET_PBTXT - 1, NULL, NULL, &c,
                                &err));
    char *js = model_config_to_json(&c);
    CHECK(js);
    cJSON *j = cJSON_Parse(js);
    hark_free(js);
    CHECK(j);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "max_batch_size");
    CHECK(cJSON_IsNumber(v) && v->valueint == 64);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(j, "name")->valuestring, "wenet_u2pp"));
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(j, "backend")->valuestring, "hark"));
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    CHECK(cJSON_GetArraySize(in) == 2);
    const cJSON *in0 = cJSON_GetArrayItem(in, 0);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(in0, "name")->valuestring, "WAV"));
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(in0, "data_type")->valuestring, "TYPE_FP32"));
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(in0, "dims");
    CHECK(cJSON_GetArraySize(dims) == 1 && cJSON_GetArrayItem(dims, 0)->valueint == -1);
    const cJSON *out0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "output"), 0);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(out0, "data_type")->valuestring, "TYPE_STRING"));
    const cJSON *db = cJSON_GetObjectItemCaseSensitive(j, "dynamic_batching");
    CHECK(db &&
          cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(db, "preferred_batch_size")) == 2);
    CHECK(cJSON_GetObjectItemCaseSensitive(db, "max_queue_delay_microseconds")->valueint == 2000);
    CHECK(!cJSON_GetObjectItemCaseSensitive(j, "sequence_batching"));
    const cJSON *ig = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "instance_group"), 0);
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(ig, "kind")->valuestring, "KIND_GPU"));
    CHECK(cJSON_GetObjectItemCaseSensitive(ig, "count")->valueint == 1);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(p, "family"),
                                                   "string_value")
                      ->valuestring,
                  "wenet_u2"));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "model_transaction_policy"), "decoupled")));
    CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "response_cache"), "enable")));
    CHECK(cJSON_GetObjectItemCaseSensitive(
              cJSON_GetObjectItemCaseSensitive(
                  cJSON_GetObjectItemCaseSensitive(j, "version_policy"), "latest"),
              "num_versions")
              ->valueint == 1);
    cJSON_Delete(j);
    model_config_free(&c);

    /* streaming shape: sequence_batching present, decoupled true */
    static const char txt[] = "name: \"s\" max_batch_size: 0 sequence_batching { } "
                              "model_transaction_policy { decoupled: true } "
                              "response_cache { enable: 1 }";
    CHECK_OK(model_config_parse(txt, sizeof txt - 1, NULL, NULL, &c, &err));
    js = model_config_to_json(&c);
    j = cJSON_Parse(js);
    hark_free(js);
    CHECK(j);
    CHECK(cJSON_GetObjectItemCaseSensitive(j, "max_batch_size")->valueint == 0);
    CHECK(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "sequence_batching"),
                                           "max_sequence_idle_microseconds")
              ->valuedouble == 1000000);
    CHECK(!cJSON_GetObjectItemCaseSensitive(j, "dynamic_batching"));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "model_transaction_policy"), "decoupled")));
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(j, "response_cache"), "enable")));
    cJSON_Delete(j);
    model_config_free(&c);
}

TEST(model_config_data_types)
{
    CHECK(!strcmp(model_data_type_name(MODEL_TYPE_STRING), "TYPE_STRING"));
    CHECK(!strcmp(model_data_type_kserve(MODEL_TYPE_STRING), "BYTES"));
    CHECK(!strcmp(model_data_type_kserve(MODEL_TYPE_FP32), "FP32"));
    CHECK(!strcmp(model_data_type_kserve(MODEL_TYPE_BF16), "BF16"));
    CHECK(model_data_type_size(MODEL_TYPE_INT64) == 8 &&
          model_data_type_size(MODEL_TYPE_FP16) == 2);
    CHECK(model_data_type_size(MODEL_TYPE_STRING) == 0);
}

/* Every allocation failure is reported as out of memory and leaks nothing (ASan run). */
TEST(model_config_out_of_memory)
{
    int ok = 0;
    for (long n = 1; n < 400 && !ok; n++) {
        model_config_t c;
        hark_err_t err = {0};
        alloc_fail_after(n);
        int rc =
            model_config_parse(WENET_TRITON_PBTXT, sizeof WENET_TRITON_PBTXT - 1, "x",
                               &(model_config_opts_t){collect_notice, &(notices_t){0}}, &c, &err);
        char *js = rc == HARK_OK ? model_config_to_json(&c) : NULL;
        alloc_fail_reset();
        if (rc == HARK_OK) {
            hark_free(js);
            model_config_free(&c);
            ok = js != NULL;
        } else {
            CHECKF(rc == HARK_ERR_NOMEM && strstr(err.msg, "out of memory"), "n=%ld: %d %s", n, rc,
                   err.msg);
        }
    }
    CHECK(ok);
}
