/* fuzz_audio_decode.c — libFuzzer target: arbitrary bytes through audio_decode_memory (decode,
 * mixdown, resample to 16 kHz). Build: `make fuzz`; seeds: tests/fuzz/corpus (make_corpus.sh);
 * the seeds are also replayed by tests/audio/test_audio.c. */
#include "audio/audio.h"
#include "hark.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    audio_opts_t opts = {.target_rate = 16000, .max_seconds = 4};
    audio_t a;
    hark_err_t err = {0};
    int rc = audio_decode_memory(data, size, &opts, &a, &err);
    if (rc == HARK_OK) {
        if (a.rate != 16000 || (a.n && !a.samples) || a.n > 4 * 16000 + 16)
            abort();
        for (size_t i = 0; i < a.n; i++)
            if (!(a.samples[i] >= -1.0f && a.samples[i] <= 1.0f))
                abort();
        audio_free(&a);
    } else {
        /* a failure names itself and leaves nothing behind */
        if (err.status != rc || !err.msg[0] || a.samples || a.n)
            abort();
        if (rc != HARK_ERR_FORMAT && rc != HARK_ERR_UNSUPPORTED && rc != HARK_ERR_TOO_LARGE &&
            rc != HARK_ERR_NOMEM)
            abort();
    }
    return 0;
}
