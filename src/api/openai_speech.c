/* openai_speech.c — OpenAI's POST /v1/audio/speech over HTTP: {model, input, voice,
 * response_format, speed, stream_format} synthesized by service_speak. WAV and PCM (and every
 * format under stream_format "sse") leave as chunked transfer while the model produces audio:
 * the first bytes go before the sentence is finished; FLAC, MP3 and Opus are sent whole with a
 * Content-Length. The models hark serves have one voice each: OpenAI's voice names, "default"
 * and the model's own name select it, anything else is a 400. Tests:
 * tests/server/test_server_tts.py */
#include "api/http_api.h"

#include "api/service.h"
#include "audio/encode.h"
#include "core/alloc.h"
#include "core/base64.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT_CHARS 4096 /* OpenAI's limit */

typedef struct {
    http_req_t *http;
    audio_enc_format_t format;
    int sse;
    int started; /* the 200 and its headers left (streamed answers) */
    int gone;    /* the client went away, or a chunk could not be encoded */
    audio_enc_t *enc;
    unsigned char *whole; /* formats sent whole: the file */
    size_t whole_n;
    char speed[32];
} speech_ctx_t;

/* OpenAI's built-in voice names: each selects the model's one voice */
static int voice_ok(const char *v, const char *model)
{
    static const char *names[] = {"alloy", "ash",  "ballad",  "coral", "echo",  "fable", "nova",
                                  "onyx",  "sage", "shimmer", "verse", "marin", "cedar", "default"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(v, names[i]))
            return 1;
    return model && !strcmp(v, model);
}

static void sse_event(speech_ctx_t *c, const char *json)
{
    char head[] = "data: ";
    http_respond_chunk(c->http, head, sizeof head - 1);
    http_respond_chunk(c->http, json, strlen(json));
    http_respond_chunk(c->http, "\n\n", 2);
}

/* the encoder's bytes (instance thread) */
static int enc_write(void *user, const void *data, size_t len)
{
    speech_ctx_t *c = user;
    if (http_req_cancelled(c->http))
        return 1;
    if (c->sse) {
        static const char pre[] = "{\"type\":\"speech.audio.delta\",\"audio\":\"";
        char *ev = hark_malloc(sizeof pre + base64_len(len) + 4);
        if (!ev)
            return 1;
        memcpy(ev, pre, sizeof pre - 1);
        size_t k = sizeof pre - 1;
        k += base64_encode(data, len, ev + k);
        memcpy(ev + k, "\"}", 3);
        sse_event(c, ev);
        hark_free(ev);
        return 0;
    }
    if (audio_enc_streams(c->format))
        return http_respond_chunk(c->http, data, len) != HARK_OK;
    unsigned char *w = hark_realloc(c->whole, c->whole_n + len); /* once, at close */
    if (!w)
        return 1;
    memcpy(w + c->whole_n, data, len);
    c->whole = w;
    c->whole_n += len;
    return 0;
}

static int start(speech_ctx_t *c, int rate)
{
    hark_err_t err = {0};
    int streamed = c->sse || audio_enc_streams(c->format);
    if (streamed) /* the head goes first: a WAV header is written at open */
        http_respond_start(c->http, 200,
                           c->sse ? "text/event-stream" : audio_enc_content_type(c->format));
    c->started = streamed;
    if (audio_enc_open(c->format, rate, enc_write, c, &c->enc, &err)) {
        c->gone = 1;
        if (streamed)
            http_respond_end(c->http);
        else
            http_api_respond_error(c->http, err.status, err.msg);
        return -1;
    }
    c->started = 1;
    return 0;
}

static void on_audio(void *user, const float *pcm, size_t n, int rate)
{
    speech_ctx_t *c = user;
    if (c->gone || (!c->enc && start(c, rate)))
        return;
    hark_err_t err = {0};
    if (audio_enc_write(c->enc, pcm, n, &err))
        c->gone = 1; /* the client left (or out of memory): the rest is dropped */
}

static void on_done(void *user, int status, const char *error)
{
    speech_ctx_t *c = user;
    http_req_t *req = c->http;
    if (!c->enc && !c->gone) { /* no audio came */
        if (status) {
            http_api_respond_error(req, status, error);
            goto out;
        }
        start(c, 24000); /* an empty file */
    }
    if (!c->enc)
        goto out; /* start() failed and answered */
    hark_err_t err = {0};
    int rc = status;
    if (!rc && !c->gone) {
        if ((rc = audio_enc_close(c->enc, &err)))
            error = err.msg;
    } else {
        audio_enc_abort(c->enc);
        if (!rc) {
            rc = HARK_ERR_CANCELLED;
            error = "the audio could not be delivered";
        }
    }
    c->enc = NULL;
    if (c->sse) {
        cJSON *j = cJSON_CreateObject();
        if (rc) {
            cJSON_AddStringToObject(j, "type", "error");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(j, "error"), "message",
                                    error ? error : hark_status_str(rc));
        } else {
            cJSON_AddStringToObject(j, "type", "speech.audio.done");
        }
        char *s = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        if (s && !http_req_cancelled(req))
            sse_event(c, s);
        free(s);
        http_respond_end(req);
    } else if (audio_enc_streams(c->format)) {
        http_respond_end(req); /* an error after audio left: the stream just ends short */
    } else if (rc) {
        http_api_respond_error(req, rc, error);
    } else {
        http_respond_owned(req, 200, audio_enc_content_type(c->format), c->whole, c->whole_n,
                           hark_free, c->whole);
        c->whole = NULL;
    }
out:
    hark_free(c->whole);
    hark_free(c);
}

void openai_speech(const http_api_ctx_t *hc, http_req_t *req)
{
    cJSON *j = cJSON_ParseWithLength(req->body, req->body_len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        http_respond_error(req, 400,
                           "the body must be a JSON object: {\"model\", \"input\", "
                           "\"voice\", \"response_format\", \"speed\"}");
        return;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *voice = cJSON_GetObjectItemCaseSensitive(j, "voice");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "response_format");
    const cJSON *speed = cJSON_GetObjectItemCaseSensitive(j, "speed");
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(j, "stream_format");
    const char *bad = NULL;
    char msg[256];
    hark_err_t err = {0};
    speech_ctx_t *c = hark_calloc(1, sizeof *c);
    size_t chars = 0;
    if (cJSON_IsString(input))
        for (const unsigned char *p = (const unsigned char *)input->valuestring; *p; p++)
            chars += (*p & 0xC0) != 0x80;
    if (!c)
        bad = "out of memory";
    else if (model && !cJSON_IsString(model))
        bad = "'model' must be a string";
    else if (!cJSON_IsString(input) || !input->valuestring[0])
        bad = "'input' (the text to speak) must be a non-empty string";
    else if (chars > MAX_INPUT_CHARS)
        bad = (snprintf(msg, sizeof msg, "'input' has %zu characters; at most %d", chars,
                        MAX_INPUT_CHARS),
               msg);
    else if (voice &&
             (!cJSON_IsString(voice) ||
              !voice_ok(voice->valuestring, cJSON_IsString(model) ? model->valuestring : NULL)))
        bad = (snprintf(msg, sizeof msg,
                        "voice '%s' is not supported: hark's models have one voice each (OpenAI's "
                        "voice names, \"default\" or the model's name select it)",
                        cJSON_IsString(voice) ? voice->valuestring : "?"),
               msg);
    else if (fmt &&
             (!cJSON_IsString(fmt) || audio_enc_format_parse(fmt->valuestring, &c->format, &err)))
        bad = cJSON_IsString(fmt) ? err.msg : "'response_format' must be a string";
    else if (speed && (!cJSON_IsNumber(speed) || !(speed->valuedouble >= 0.25) ||
                       !(speed->valuedouble <= 4.0)))
        bad = "'speed' must be a number in [0.25, 4.0]";
    else if (sf && (!cJSON_IsString(sf) ||
                    (strcmp(sf->valuestring, "audio") && strcmp(sf->valuestring, "sse"))))
        bad = "'stream_format' must be \"audio\" or \"sse\"";
    if (bad) {
        http_respond_error(req, c ? 400 : 500, "%s", bad);
        hark_free(c);
        cJSON_Delete(j);
        return;
    }
    if (!fmt)
        c->format = AUDIO_ENC_MP3; /* OpenAI's default */
    c->http = req;
    c->sse = sf && !strcmp(sf->valuestring, "sse");
    family_param_t p[1];
    int np = 0;
    if (speed) {
        snprintf(c->speed, sizeof c->speed, "%.9g", speed->valuedouble);
        p[np++] = (family_param_t){"speed", c->speed};
    }
    service_speak_t in = {.model = cJSON_IsString(model) ? model->valuestring : "",
                          .text = input->valuestring,
                          .params = {p, np},
                          .cancelled = http_req_cancelled_flag(req),
                          .audio = on_audio,
                          .done = on_done,
                          .user = c};
    service_speak(hc->s, &in); /* copies the text and the options before it returns */
    cJSON_Delete(j);
}
