/* openai.c — OpenAI's POST /v1/audio/transcriptions over HTTP: a multipart upload recognised by
 * service_transcribe, answered as json, text, srt, vtt or verbose_json (segments are the subtitle
 * cues; words with timestamp_granularities[]=word), or with stream=true as server-sent events
 * (transcript.text.delta per word, then transcript.text.done; the recognition itself is
 * offline, so the deltas come together at its end). Errors are OpenAI's error object.
 * Tests: tests/server/test_server.py */
#include "api/http_api.h"

#include "api/service.h"
#include "core/alloc.h"
#include "hark.h"
#include "net/multipart.h"
#include "text/words.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    http_req_t *http;
    char format[32];
    char language[32];
    int want_words;
    int stream; /* stream=true: server-sent events */
} openai_ctx_t;

static void respond_cjson(http_req_t *req, cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    http_respond_owned(req, 200, "application/json", s, strlen(s), free, s);
}

void openai_error(http_req_t *req, int status, const char *param, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (status == 503)
        http_res_header(req, "Retry-After", "1");
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type",
                            status == 429   ? "rate_limit_exceeded"
                            : status >= 500 ? "server_error"
                                            : "invalid_request_error");
    if (param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (status == 404)
        cJSON_AddStringToObject(e, "code", "model_not_found");
    else
        cJSON_AddNullToObject(e, "code");
    char *s = j && e ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    http_respond_owned(req, status, "application/json", s, strlen(s), free, s);
}

void openai_error_rc(http_req_t *req, int rc, const char *msg)
{
    openai_error(req, service_status_http(rc), NULL, "%s",
                 msg && msg[0] ? msg : hark_status_str(rc));
}

/* one of verbose_json's segments, as OpenAI shapes them */
static void add_segment(cJSON *segs, int id, double start, double end, const char *text)
{
    cJSON *sg = cJSON_CreateObject();
    cJSON_AddNumberToObject(sg, "id", id);
    cJSON_AddNumberToObject(sg, "seek", 0);
    cJSON_AddNumberToObject(sg, "start", start);
    cJSON_AddNumberToObject(sg, "end", end);
    cJSON_AddStringToObject(sg, "text", text);
    cJSON_AddItemToObject(sg, "tokens", cJSON_CreateArray());
    cJSON_AddNumberToObject(sg, "temperature", 0);
    cJSON_AddNumberToObject(sg, "avg_logprob", 0);
    cJSON_AddNumberToObject(sg, "compression_ratio", 0);
    cJSON_AddNumberToObject(sg, "no_speech_prob", 0);
    cJSON_AddItemToArray(segs, sg);
}

/* segments: a long request's pieces (VAD segments or windows) when given, else the subtitle cues
 * of the words */
static void verbose_json(openai_ctx_t *c, const asr_result_t *r, const word_time_t *w, int nw,
                         double duration, const service_segment_t *lsegs, int n_lsegs)
{
    const char *text = r->best.text ? r->best.text : "";
    int dur_ms = (int)(duration * 1000);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "task", "transcribe");
    cJSON_AddStringToObject(j, "language", c->language[0] ? c->language : "english");
    cJSON_AddNumberToObject(j, "duration", duration);
    cJSON_AddStringToObject(j, "text", text);
    cue_t *cues = lsegs ? NULL : hark_calloc((size_t)(nw ? nw : 1), sizeof *cues);
    int nc = cues ? cues_build(w, nw, NULL, dur_ms, cues) : 0;
    cJSON *segs = cJSON_AddArrayToObject(j, "segments");
    for (int i = 0; i < n_lsegs; i++)
        add_segment(segs, i, lsegs[i].start_s, lsegs[i].end_s, lsegs[i].text);
    for (int i = 0; i < nc; i++) {
        char line[4096] = "";
        size_t off = 0;
        for (int k = 0; k < cues[i].count; k++)
            off += (size_t)snprintf(line + off, off < sizeof line ? sizeof line - off : 0, "%s%s",
                                    k && r->word_sep ? " " : "", w[cues[i].first + k].text);
        add_segment(segs, i, cues[i].start_ms / 1000.0, cues[i].end_ms / 1000.0, line);
    }
    if (c->want_words) {
        cJSON *ws = cJSON_AddArrayToObject(j, "words");
        for (int i = 0; i < nw; i++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "word", w[i].text);
            cJSON_AddNumberToObject(x, "start", w[i].start_ms / 1000.0);
            cJSON_AddNumberToObject(x, "end", w[i].end_ms / 1000.0);
            cJSON_AddItemToArray(ws, x);
        }
    }
    hark_free(cues);
    respond_cjson(c->http, j);
}

static void sse(http_req_t *req, cJSON *j)
{
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!s)
        return;
    http_respond_chunk(req, "data: ", 6);
    http_respond_chunk(req, s, strlen(s));
    http_respond_chunk(req, "\n\n", 2);
    free(s);
}

/* stream=true: a delta per word (the whole text when there are no words), then done */
static void stream_events(http_req_t *req, const asr_result_t *r)
{
    const char *text = r->best.text ? r->best.text : "";
    http_respond_start(req, 200, "text/event-stream");
    for (int i = 0; i < (r->n_words ? r->n_words : 1); i++) {
        char buf[512];
        if (r->n_words)
            snprintf(buf, sizeof buf, "%s%s", i && r->word_sep ? " " : "", r->words[i].text);
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "type", "transcript.text.delta");
        cJSON_AddStringToObject(j, "delta", r->n_words ? buf : text);
        sse(req, j);
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", "transcript.text.done");
    cJSON_AddStringToObject(j, "text", text);
    sse(req, j);
    http_respond_end(req);
}

/* the service's answer (inference thread): the response goes to the connection's loop */
static void transcribed(void *user, int status, const char *error, asr_result_t *r, double duration,
                        const service_segment_t *segs, int n_segs)
{
    openai_ctx_t *c = user;
    http_req_t *req = c->http;
    if (status) {
        openai_error_rc(req, status, error);
        goto done;
    }
    const char *text = r->best.text ? r->best.text : "";
    if (c->stream) {
        stream_events(req, r);
        goto done;
    }
    if (!strcmp(c->format, "text")) {
        http_respond(req, 200, "text/plain; charset=utf-8", text, strlen(text));
        goto done;
    }
    if (!strcmp(c->format, "json")) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "text", text);
        respond_cjson(req, j);
        goto done;
    }
    /* the words as the subtitle writer takes them (texts lent by the result) */
    int nw = r->n_words;
    word_time_t *w = hark_calloc((size_t)(nw ? nw : 1), sizeof *w);
    if (!w) {
        http_respond_error(req, 500, "out of memory");
        goto done;
    }
    for (int i = 0; i < nw; i++)
        w[i] = (word_time_t){r->words[i].text, r->words[i].start_ms, r->words[i].end_ms};
    if (!strcmp(c->format, "srt") || !strcmp(c->format, "vtt")) {
        char *buf = NULL;
        size_t len = 0;
        hark_err_t err = {0};
        FILE *f = open_memstream(&buf, &len);
        int rc = f ? subtitle_write(f, !strcmp(c->format, "srt") ? SUBTITLE_SRT : SUBTITLE_VTT, w,
                                    nw, r->word_sep ? UNITS_STYLE_BPE : UNITS_STYLE_CHAR, NULL,
                                    (int)(duration * 1000), &err)
                   : HARK_ERR_NOMEM;
        if (f)
            fclose(f);
        if (rc)
            openai_error(req, 500, NULL, "%s", err.msg[0] ? err.msg : "out of memory");
        else
            http_respond(req, 200, !strcmp(c->format, "srt") ? "application/x-subrip" : "text/vtt",
                         buf, len);
        free(buf);
    } else {
        verbose_json(c, r, w, nw, duration, segs, n_segs);
    }
    hark_free(w);
done:
    hark_free(c);
}

/* POST /v1/audio/translations: hark's recognisers transcribe in the language they were trained
 * on and none translates; a clear 400 in OpenAI's error object, naming the model and the route
 * that works, instead of a 404 that reads like a typo. */
void openai_translations(const http_api_ctx_t *hc, http_req_t *req)
{
    hark_err_t err = {0};
    char boundary[80], name[128] = "";
    multipart_t mp;
    if (!multipart_boundary(http_req_header(req, "Content-Type"), boundary, sizeof boundary,
                            &err) &&
        !multipart_parse(req->body, req->body_len, boundary, &mp, &err)) {
        const multipart_part_t *p = multipart_get(&mp, "model");
        if (p && p->len)
            snprintf(name, sizeof name, "%.*s", (int)(p->len < 127 ? p->len : 127), p->data);
    }
    openai_error(req, 400, "model",
                 "model '%s' cannot translate: hark's speech recognisers transcribe the language "
                 "they were trained on; use POST /v1/audio/transcriptions",
                 name[0] ? name : "(none given)");
}

/* ISO 639-1 codes and the English names OpenAI's verbose_json uses, for the languages a hark
 * model may declare (config.pbtxt parameter "language") */
static const char *const LANGS[][2] = {
    {"en", "english"},    {"zh", "chinese"}, {"de", "german"},   {"es", "spanish"},
    {"fr", "french"},     {"it", "italian"}, {"ja", "japanese"}, {"ko", "korean"},
    {"pt", "portuguese"}, {"ru", "russian"}, {"nl", "dutch"},    {"ar", "arabic"},
    {"hi", "hindi"},
};

/* "en", "EN", "english" -> the LANGS row; -1 when unknown */
static int lang_index(const char *s)
{
    for (size_t i = 0; i < sizeof LANGS / sizeof LANGS[0]; i++)
        if (!strcasecmp(s, LANGS[i][0]) || !strcasecmp(s, LANGS[i][1]))
            return (int)i;
    return -1;
}

void openai_transcriptions(const http_api_ctx_t *hc, http_req_t *req)
{
    hark_err_t err = {0};
    char boundary[80];
    multipart_t mp;
    if (multipart_boundary(http_req_header(req, "Content-Type"), boundary, sizeof boundary, &err) ||
        multipart_parse(req->body, req->body_len, boundary, &mp, &err)) {
        openai_error(req, 400, NULL, "%s", err.msg);
        return;
    }
    const multipart_part_t *file = multipart_get(&mp, "file");
    if (!file) {
        openai_error(req, 400, "file", "missing the 'file' part");
        return;
    }
    openai_ctx_t *c = hark_calloc(1, sizeof *c);
    if (!c) {
        http_respond_error(req, 500, "out of memory");
        return;
    }
    c->http = req;
    snprintf(c->format, sizeof c->format, "json");
    char name[128] = "";
    const multipart_part_t *p;
    if ((p = multipart_get(&mp, "response_format")) && p->len)
        snprintf(c->format, sizeof c->format, "%.*s", (int)(p->len < 31 ? p->len : 31), p->data);
    if (strcmp(c->format, "json") && strcmp(c->format, "text") && strcmp(c->format, "srt") &&
        strcmp(c->format, "vtt") && strcmp(c->format, "verbose_json")) {
        openai_error(req, 400, "response_format",
                     "response_format '%s' is not one of json, text, srt, vtt, verbose_json",
                     c->format);
        hark_free(c);
        return;
    }
    if ((p = multipart_get(&mp, "model")) && p->len)
        snprintf(name, sizeof name, "%.*s", (int)(p->len < 127 ? p->len : 127), p->data);
    if ((p = multipart_get(&mp, "language")) && p->len)
        snprintf(c->language, sizeof c->language, "%.*s", (int)(p->len < 31 ? p->len : 31),
                 p->data);
    /* the model's own language (config.pbtxt parameter "language"): a request for another one
     * is refused, not answered in the model's language under the name asked for */
    char model_lang[32];
    service_asr_language(hc->s, name, model_lang, sizeof model_lang);
    if (model_lang[0] && c->language[0]) {
        int want = lang_index(c->language), have = lang_index(model_lang);
        if (want < 0 ? strcasecmp(c->language, model_lang) != 0 : want != have) {
            openai_error(req, 400, "language",
                         "language '%s': this model recognises %s only (its config.pbtxt "
                         "parameter language is \"%s\"); leave language out or ask for %s",
                         c->language, have >= 0 ? LANGS[have][1] : model_lang, model_lang,
                         model_lang);
            hark_free(c);
            return;
        }
    }
    if (model_lang[0]) /* verbose_json names the language recognised, as OpenAI's does */
        snprintf(c->language, sizeof c->language, "%s",
                 lang_index(model_lang) >= 0 ? LANGS[lang_index(model_lang)][1] : model_lang);
    for (int i = 0; i < mp.n; i++)
        if (!strcmp(mp.parts[i].name, "timestamp_granularities[]") && mp.parts[i].len == 4 &&
            !memcmp(mp.parts[i].data, "word", 4))
            c->want_words = 1;
    if ((p = multipart_get(&mp, "stream")) && p->len == 4 && !memcmp(p->data, "true", 4))
        c->stream = 1;
    int need_words = c->stream || (strcmp(c->format, "json") && strcmp(c->format, "text"));
    service_transcribe_t in = {.model = name,
                               .audio = (const uint8_t *)file->data,
                               .len = file->len,
                               .want_words = need_words,
                               .loop = hc->loop,
                               .cancelled = http_req_cancelled_flag(req),
                               .done = transcribed,
                               .user = c};
    service_transcribe(hc->s, &in);
}
