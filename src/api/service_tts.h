/* service_tts.h — the synthesis side of the service (service_tts.c), called by service.c's
 * service_infer for a model of task TTS. Internal to src/api. */
#ifndef HARK_API_SERVICE_TTS_H
#define HARK_API_SERVICE_TTS_H

#include "api/service.h"

/* The seed's Triton contract (DLE tacotron2waveglow): INPUT (BYTES, one text per batch item) ->
 * OUTPUT (FP32 [batch, samples], shorter rows zero-padded) and OUTPUT_LENGTH (INT32 [batch, 1]).
 * model/version: the served model's names; max_batch: its config's max_batch_size. Takes the
 * request as service_infer does; done is called exactly once. */
void service_tts_infer(server_t *s, const service_infer_t *in, const char *model,
                       const char *version, int max_batch);

#endif
