/* fuzz_model_config.c — libFuzzer target: arbitrary text through model_config_parse (the
 * protobuf text-format parser and the ModelConfig checks), then the JSON writer.
 * Build: `make fuzz-kserve`; seeds: tests/fuzz/corpus_model_config. Tests:
 * tests/server/test_model_config.c */
#include "core/alloc.h"
#include "hark.h"
#include "server/model_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void quiet(void *user, const char *msg)
{
    if (!msg[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    model_config_opts_t opts = {quiet, NULL};
    model_config_t c;
    hark_err_t err = {0};
    int rc = model_config_parse(text, size, "fuzz.pbtxt", &opts, &c, &err);
    if (rc == HARK_OK) {
        if (c.max_batch_size < 0 || c.n_instance_groups < 1)
            abort();
        for (int i = 0; i < c.dynamic_batching.n_preferred; i++)
            if (c.dynamic_batching.preferred_batch_size[i] > c.max_batch_size)
                abort();
        char *js = model_config_to_json(&c);
        if (!js)
            abort();
        hark_free(js);
        model_config_free(&c);
    } else {
        if (err.status != rc || strncmp(err.msg, "fuzz.pbtxt:", 11) || c.arena.head)
            abort();
    }
    free(text);
    return 0;
}
