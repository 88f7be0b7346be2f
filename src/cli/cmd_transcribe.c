/* cmd_transcribe.c — `hark transcribe --model DIR FILE...`: offline recognition of audio files
 * with a converted model of any family, through the public C API (include/hark.h) like any
 * embedding program (text, JSON with word times, SRT, WebVTT), --dump-dir to write every stage
 * as .npy (hark_asr_opts_t.dump_dir, a debug hook WeNet's family implements on the CPU), and
 * `--wavscp LIST --trans REF` to decode a whole list concurrently and score it (WER/CER,
 * docs/scoring.md); with `--url http://host:port -m MODEL` the same through a KServe v2 server
 * (hark serve or Triton) instead of a local model.
 * Tests: tests/cli/test_cli.c, test_cli_transcribe_eval.c, test_cli_perf.c (--url) */
#include "audio/audio.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "eval/decode_list.h"
#include "eval/scp.h"
#include "eval/wer.h"
#include "text/words.h"
#include "hark.h"
#include "net/grpc_client.h"
#include "net/http_client.h"
#include "api/kserve.h"
#include "api/kserve_grpc.h"
#include "text/units.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "hark transcribe: FILE: why", FILE said once: a message that starts with the path already (the
 * audio reader's do) is printed as it is */
static void file_error(const char *path, const char *msg)
{
    size_t l = strlen(path);
    if (!strncmp(msg, path, l) && msg[l] == ':')
        msg += l + (msg[l + 1] == ' ' ? 2 : 1);
    fprintf(stderr, "hark transcribe: %s: %s\n", cli_file_name(path), msg);
}

static void transcribe_usage(FILE *f)
{
    static const char *const text[] = {
        "usage: hark transcribe --model DIR [--device cpu|cuda:N] [--precision fp32|fp16|bf16]",
        "    (or --url http://host:port -m MODEL to ask a server)",
        "    [--decoding-method ctc_greedy_search|ctc_prefix_beam_search|attention_rescoring "
        "(WeNet)",
        "                      |greedy_search|modified_beam_search|fast_beam_search (icefall",
        "                      transducers)]",
        "    [--beam-size 10] [--ctc-weight W] [--reverse-weight W] [--nbest N] [--threads N]",
        "    [--chunk-size N [--left-chunks N]]",
        "    [--format text|json|srt|vtt] [--dump-dir D] FILE...",
        "    [--vad DIR [--vad-threshold T] [--vad-max-speech-s S] [--batch-size B]]",
        "  or: hark transcribe [--model DIR] [decoding options] --wavscp wav.scp [--trans text]",
        "    [--data-dir D] [--output-dir OUT] [--jobs N] [--batch-size B] [--format text|json]",
        "Recognizes each audio file (WAV/FLAC/OGG/MP3, any rate) with a model converted by",
        "tools/convert_wenet.py (without --model: the bundled demo recogniser, models/demo-en-asr,",
        "a small model trained on synthetic speech). Defaults come from the model "
        "(attention_rescoring when it has",
        "a decoder, its ctc_weight and reverse_weight). Text output: one 'FILE TEXT' line each;",
        "JSON adds tokens, times and words with start/end; srt and vtt (one FILE) give subtitle",
        "cues from the token times.",
        "--chunk-size N decodes a chunk-trained model (WeNet U2/U2++) with its chunk attention",
        "mask of N encoder frames (decoding_chunk_size; --left-chunks: num_decoding_left_chunks,",
        "-1 all, the default), which gives the streaming result of the same chunk settings.",
        "--wavscp decodes a Kaldi-style list ('<id> <path>' lines; relative paths are taken",
        "from --data-dir, else from the list's folder; '<id> command |' runs the command there",
        "and reads its output) with --jobs threads (default: one per",
        "core), --batch-size utterances per call, and with --trans ('<id> <words>' lines)",
        "prints WER and CER after the normalisation of docs/scoring.md. --output-dir gets",
        "hyp.txt, ref.txt (the scored, normalised texts), per_utt.tsv and summary.json.",
        "With --url http://host:port[/prefix] (or host:port) and -m/--model NAME, files are sent",
        "to that KServe v2 server (hark serve, Triton) as AUDIO bytes, --jobs connections at a",
        "time for --wavscp (--url grpc://host:port, or -i grpc: over KServe v2 gRPC, port 8001),",
        "with the decoding options as request parameters; --format text|json.",
        "--vad DIR segments long audio with a Silero VAD model (tools/convert_silero_vad.py):",
        "files of any length are read in blocks, cut by silero-vad's get_speech_timestamps",
        "rules (--vad-threshold 0.5, --vad-min-silence-ms 100, --vad-speech-pad-ms 30,",
        "--vad-max-speech-s 20: longer speech is split), the segments recognised --batch-size",
        "(8) at a time; json gives per file text, duration_s and segments with start/end in",
        "seconds, text and words; srt/vtt cues carry the times in the file. With --wavscp each",
        "entry is cut so and scored as a whole (its segments' texts joined).",
        "FILE - reads standard input (any length: spooled to $TMPDIR, not to memory).",
        "--streaming (with --url) sends each file as a sequence of --chunk-ms (640) chunks of",
        "16 kHz WAV to a model served under sequence_batching, as WeNet's streaming client does,",
        "and prints the partial results as they come (stderr); --format json adds 'partials'.",
        "Exit status: 0 all decoded (and scored), 1 something failed, 2 bad usage or lists.",
    };
    for (size_t i = 0; i < sizeof text / sizeof text[0]; i++)
        fprintf(f, "%s\n", text[i]);
}

/* words of utterance 0 with their times, or NULL when there are none */
static cJSON *words_json(const hark_asr_result_t *r)
{
    int nw = hark_asr_result_word_count(r, 0);
    if (nw <= 0)
        return NULL;
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < nw; i++) {
        int s0 = 0, s1 = 0;
        const char *w = hark_asr_result_word(r, 0, i, &s0, &s1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "word", w);
        cJSON_AddNumberToObject(o, "start_ms", s0);
        cJSON_AddNumberToObject(o, "end_ms", s1);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* hypothesis k of utterance 0's n-best, or its best (k < 0) */
static cJSON *hyp_json(const hark_asr_result_t *r, int k)
{
    const int *tok = NULL, *tms = NULL;
    double score = 0;
    const char *text;
    int nt;
    if (k < 0) {
        text = hark_asr_result_text(r, 0);
        nt = hark_asr_result_tokens(r, 0, &tok, &tms);
        score = hark_asr_result_score(r, 0);
    } else {
        text = hark_asr_result_nbest_text(r, 0, k, &score);
        nt = hark_asr_result_nbest_tokens(r, 0, k, &tok, &tms);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", text ? text : "");
    cJSON_AddItemToObject(o, "tokens", cJSON_CreateIntArray(tok, nt));
    cJSON *times = cJSON_AddArrayToObject(o, "times_ms");
    for (int i = 0; i < nt; i++)
        cJSON_AddItemToArray(times, cJSON_CreateNumber(tms[i]));
    cJSON *words = k < 0 ? words_json(r) : NULL;
    if (words)
        cJSON_AddItemToObject(o, "words", words);
    cJSON_AddNumberToObject(o, "score", score);
    return o;
}

/* utterance 0's words as subtitles */
static int write_subtitles(const hark_asr_result_t *r, subtitle_format_t fmt, hark_err_t *err)
{
    int nw = hark_asr_result_word_count(r, 0);
    word_time_t *w = hark_calloc((size_t)(nw > 0 ? nw : 1), sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nw; i++) /* lent from the result for the call */
        w[i].text = (char *)hark_asr_result_word(r, 0, i, &w[i].start_ms, &w[i].end_ms);
    units_style_t st = hark_asr_result_word_sep(r, 0) ? UNITS_STYLE_BPE : UNITS_STYLE_CHAR;
    int dur_ms = (int)(hark_asr_result_duration(r, 0) * 1000.0);
    int rc = subtitle_write(stdout, fmt, w, nw, st, NULL, dur_ms, err);
    hark_free(w);
    return rc;
}

typedef struct {
    const char *model, *device, *precision, *format, *method, *dump, *url, *iface;
    const char *wavscp, *trans, *data_dir, *out_dir, *vad;
    double beam, ctc_w, rev_w, nbest, threads, jobs, batch, chunk, left, chunk_ms;
    double vad_thr, vad_max_s, vad_min_sil, vad_pad;
    int streaming;
} transcribe_args_t;

/* ---- FILE... mode --------------------------------------------------------------------------- */

static int transcribe_files(hark_model_t *model, hark_asr_opts_t o, const transcribe_args_t *A,
                            const char **files, int nfiles)
{
    const char *format = A->format;
    hark_err_t err = {0};
    subtitle_format_t sfmt = !strcmp(format, "vtt") ? SUBTITLE_VTT : SUBTITLE_SRT;
    int subtitles = !strcmp(format, "srt") || !strcmp(format, "vtt");
    o.want_words = subtitles || !strcmp(format, "json");
    const int rate = hark_model_sample_rate(model);
    int failures = 0;
    cJSON *out = cJSON_CreateArray();
    char dump[4096];
    for (int f = 0; f < nfiles; f++) {
        float *pcm = NULL;
        size_t n = 0;
        hark_asr_result_t *r = NULL;
        err.msg[0] = 0;
        int rc = hark_decode_audio_file(files[f], rate, &pcm, &n, NULL);
        if (!rc && A->dump) { /* DIR/<file name without extension>/<stage>.npy */
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s", files[f]);
            char *base = basename(tmp), *dot = strrchr(base, '.');
            if (dot)
                *dot = 0;
            snprintf(dump, sizeof dump, "%s/%s", A->dump, base);
            o.dump_dir = dump;
        }
        if (!rc) {
            const float *batch[1] = {pcm};
            rc = hark_recognize(model, batch, &n, 1, rate, &o, &r);
        }
        if (rc)
            err_set(&err, rc, "%s", hark_last_error());
        if (!rc && subtitles)
            rc = write_subtitles(r, sfmt, &err);
        if (rc) {
            failures++;
            file_error(files[f], err.msg[0] ? err.msg : hark_status_str(rc));
            if (!strcmp(format, "json")) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "file", cli_file_name(files[f]));
                cJSON_AddStringToObject(e, "error", err.msg[0] ? err.msg : hark_status_str(rc));
                cJSON_AddItemToArray(out, e);
            }
        } else if (!strcmp(format, "text")) {
            printf("%s %s\n", cli_file_name(files[f]), hark_asr_result_text(r, 0));
            fflush(stdout);
        } else if (!strcmp(format, "json")) {
            cJSON *j = hyp_json(r, -1);
            cJSON_AddStringToObject(j, "file", cli_file_name(files[f]));
            if (A->method)
                cJSON_AddStringToObject(j, "decoding_method", A->method);
            cJSON_AddNumberToObject(j, "duration_s", hark_asr_result_duration(r, 0));
            double conf = hark_asr_result_confidence(r, 0);
            if (conf != 0 || (A->method && !strcmp(A->method, "attention_rescoring")))
                cJSON_AddNumberToObject(j, "confidence", conf);
            int nb = hark_asr_result_nbest_count(r, 0);
            if (nb > 0) {
                cJSON *a = cJSON_AddArrayToObject(j, "nbest");
                for (int i = 0; i < nb; i++)
                    cJSON_AddItemToArray(a, hyp_json(r, i));
            }
            cJSON_AddItemToArray(out, j);
        }
        hark_asr_result_destroy(r);
        hark_pcm_free(pcm);
    }
    if (!strcmp(format, "json")) {
        char *s = cJSON_Print(out);
        if (s) {
            printf("%s\n", s);
            free(s);
        }
    }
    cJSON_Delete(out);
    return failures ? 1 : 0;
}

/* ---- --url: through a KServe v2 server ------------------------------------------------------- */

#define STREAM_RATE                                                                                \
    16000 /* --streaming sends 16 kHz chunks, as WeNet's and sherpa's clients do                   \
           */

typedef struct {
    http_url_t url;
    int grpc;          /* KServe v2 over gRPC (grpc://, -i grpc) */
    const char *model; /* for gRPC requests */
    char path[1024];   /* prefix/v2/models/<m>/infer */
    kserve_param_t params[6];
    int n_params;
} remote_t;

static int remote_init(remote_t *R, const transcribe_args_t *A, hark_err_t *err)
{
    memset(R, 0, sizeof *R);
    const char *u = A->url;
    R->grpc = A->iface && !strcmp(A->iface, "grpc");
    if (!strncmp(u, "grpc://", 7)) {
        R->grpc = 1;
        u += 7;
    }
    int rc = http_url_parse(u, &R->url, err);
    if (rc)
        return rc;
    if (R->grpc && !strchr(u, ':'))
        R->url.port = 8001; /* the gRPC default */
    R->model = A->model;
    snprintf(R->path, sizeof R->path, "%s/v2/models/%s/infer", R->url.prefix, A->model);
    if (A->method)
        R->params[R->n_params++] = (kserve_param_t){.name = "decoding_method", .str = A->method};
    if (A->beam >= 0)
        R->params[R->n_params++] = (kserve_param_t){.name = "beam_size", .num = (int)A->beam};
    if (A->ctc_w >= 0)
        R->params[R->n_params++] = (kserve_param_t){.name = "ctc_weight", .num = A->ctc_w};
    if (A->rev_w >= 0)
        R->params[R->n_params++] = (kserve_param_t){.name = "reverse_weight", .num = A->rev_w};
    if (A->chunk > 0)
        R->params[R->n_params++] =
            (kserve_param_t){.name = "decoding_chunk_size", .num = (int)A->chunk};
    if (A->left >= -1)
        R->params[R->n_params++] =
            (kserve_param_t){.name = "num_decoding_left_chunks", .num = (int)A->left};
    return HARK_OK;
}

static uint8_t *slurp(const char *path, size_t *n, hark_err_t *err)
{
    if (scp_is_command(path)) { /* a wav.scp "command |" entry */
        void *data = NULL;
        return scp_run_command(path, &data, n, (size_t)1 << 31, err) ? NULL : data;
    }
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = hark_malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
        fclose(f);
        *n = (size_t)len;
        return buf;
    }
    err_set(err, HARK_ERR_IO, "%s", f ? "cannot read" : strerror(errno));
    hark_free(buf);
    if (f)
        fclose(f);
    return NULL;
}

/* one connection to the server: HTTP/1.1 or gRPC */
typedef struct {
    http_client_t *http;
    grpc_client_t *grpc;
} remote_conn_t;

static int remote_connect(const remote_t *R, remote_conn_t *c, hark_err_t *err)
{
    memset(c, 0, sizeof *c);
    if (R->grpc)
        return grpc_client_create(R->url.host, R->url.port, 0, &c->grpc, err);
    return http_client_create(R->url.host, R->url.port, NULL, &c->http, err);
}

static void remote_close(remote_conn_t *c)
{
    http_client_destroy(c->http);
    grpc_client_destroy(c->grpc);
}

/* the request body as ModelInfer over gRPC; *pr gets the response */
static int remote_grpc_infer(grpc_client_t *c, const remote_t *R, const kserve_response_t *body,
                             kserve_parsed_response_t *pr, hark_err_t *err)
{
    uint8_t *msg = NULL, *resp = NULL;
    size_t len = 0, rlen = 0;
    int st = 0;
    char gmsg[512];
    int rc = kserve_grpc_pack_request(R->model, NULL, body->body, body->len, body->header_len, &msg,
                                      &len, err);
    if (rc)
        return rc;
    rc = grpc_client_call(c, "/inference.GRPCInferenceService/ModelInfer", msg, len, &resp, &rlen,
                          &st, gmsg, sizeof gmsg, err);
    hark_free(msg);
    if (rc)
        return rc;
    if (st) {
        hark_free(resp);
        return err_set(err, HARK_ERR_IO, "gRPC status %d: %.400s", st, gmsg);
    }
    rc = kserve_grpc_parse_response(resp, rlen, pr, err);
    hark_free(resp);
    return rc;
}

/* Sends one request; *text (hark_malloc) gets TRANSCRIPTS[0]. Server errors come back as
 * HARK_ERR_IO with "HTTP <status>: <its error message>" (gRPC: "gRPC status <code>: ..."). */
static int remote_infer_text(remote_conn_t *conn, const remote_t *R,
                             const kserve_request_spec_t *spec, char **text, hark_err_t *err)
{
    *text = NULL;
    kserve_response_t body;
    int rc = kserve_build_request(spec, &body, err);
    if (rc)
        return rc;
    kserve_parsed_response_t pr;
    if (conn->grpc) {
        rc = remote_grpc_infer(conn->grpc, R, &body, &pr, err);
        kserve_response_free(&body);
        if (rc)
            return rc;
        goto parsed;
    }
    char hl[32];
    snprintf(hl, sizeof hl, "%zu", body.header_len);
    http_kv_t hdr[2] = {{"Content-Type", "application/octet-stream"},
                        {"Inference-Header-Content-Length", hl}};
    http_response_t resp;
    rc = http_client_request(conn->http, "POST", R->path, hdr, 2, body.body, body.len, &resp, err);
    kserve_response_free(&body);
    if (rc)
        return rc;
    if (resp.status != 200) {
        cJSON *j = cJSON_ParseWithLength((const char *)resp.body, resp.body_len);
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        rc = err_set(err, HARK_ERR_IO, "HTTP %d: %.400s", resp.status,
                     cJSON_IsString(e) ? e->valuestring : (const char *)resp.body);
        cJSON_Delete(j);
        return rc;
    }
    size_t hlen = (size_t)-1;
    const char *h = http_response_header(&resp, "Inference-Header-Content-Length");
    if (h && (rc = kserve_parse_header_length(h, strlen(h), resp.body_len, &hlen, err)))
        return rc;
    if ((rc = kserve_parse_response(resp.body, resp.body_len, hlen, &pr, err)))
        return err_prefix(err, rc, "the server's response");
parsed:;
    const kserve_tensor_t *t = NULL;
    for (int i = 0; i < pr.n_outputs; i++)
        if (!strcmp(pr.outputs[i].name, "TRANSCRIPTS"))
            t = &pr.outputs[i];
    size_t pos = 0, el_len;
    const uint8_t *el;
    if (!t || t->dtype != KSERVE_BYTES || !kserve_bytes_next(t, &pos, &el, &el_len)) {
        rc = err_set(err, HARK_ERR_FORMAT, "the server's response has no TRANSCRIPTS text");
    } else if (!(*text = hark_malloc(el_len + 1))) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory");
    } else {
        memcpy(*text, el, el_len);
        (*text)[el_len] = 0;
    }
    kserve_parsed_response_free(&pr);
    return rc;
}

/* Sends one file as AUDIO [1]; *text (hark_malloc) gets TRANSCRIPTS[0]. */
static int remote_transcribe(remote_conn_t *conn, const remote_t *R, const char *path, char **text,
                             hark_err_t *err)
{
    *text = NULL;
    size_t n = 0;
    uint8_t *raw = slurp(path, &n, err);
    if (!raw)
        return HARK_ERR_IO;
    const char *strs[1] = {(const char *)raw};
    size_t packed_len;
    uint8_t *packed = kserve_bytes_pack(strs, &n, 1, &packed_len);
    hark_free(raw);
    if (!packed)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int64_t shape[1] = {1};
    kserve_output_t in = {"AUDIO", KSERVE_BYTES, 1, shape, packed, packed_len};
    const char *outs[1] = {"TRANSCRIPTS"};
    kserve_request_spec_t spec = {.inputs = &in,
                                  .n_inputs = 1,
                                  .outputs = outs,
                                  .n_outputs = 1,
                                  .params = R->params,
                                  .n_params = R->n_params};
    int rc = remote_infer_text(conn, R, &spec, text, err);
    hark_free(packed);
    return rc;
}

/* --streaming: one file as a sequence of chunks (WAV [1, chunk] + WAV_LENS, sequence_id /
 * sequence_start / sequence_end, as WeNet's streaming client sends them) to a model served
 * under sequence_batching; partial results printed as they come (a line rewritten on a
 * terminal, "partial: ..." lines otherwise, on stderr); *text gets the final one and, when
 * partials is not NULL, each partial is added to it. */
static int remote_stream(remote_conn_t *conn, const remote_t *R, const char *path, int chunk_ms,
                         uint64_t seq_id, cJSON *partials, char **text, hark_err_t *err)
{
    *text = NULL;
    audio_opts_t ao = {.target_rate = STREAM_RATE};
    audio_t au;
    int rc = audio_decode_file(path, &ao, &au, err);
    if (rc)
        return rc;
    size_t chunk = (size_t)STREAM_RATE * (size_t)chunk_ms / 1000,
           nchunks = (au.n + chunk - 1) / chunk;
    if (!nchunks)
        nchunks = 1; /* an empty file is one empty chunk: START and END at once */
    int tty = isatty(2);
    kserve_param_t params[12];
    int np = 0;
    for (int i = 0; i < R->n_params && np < 9; i++)
        params[np++] = R->params[i];
    params[np++] = (kserve_param_t){.name = "sequence_id", .num = (double)seq_id};
    kserve_param_t *start = &params[np++], *end = &params[np++];
    for (size_t i = 0; i < nchunks && !rc; i++) {
        size_t off = i * chunk, m = off < au.n ? (au.n - off < chunk ? au.n - off : chunk) : 0;
        int32_t len = (int32_t)m;
        int64_t s_wav[2] = {1, (int64_t)m}, s_len[2] = {1, 1};
        kserve_output_t in[2] = {
            {"WAV", KSERVE_FP32, 2, s_wav, (const uint8_t *)(au.samples + off), m * sizeof(float)},
            {"WAV_LENS", KSERVE_INT32, 2, s_len, (const uint8_t *)&len, sizeof len}};
        *start = (kserve_param_t){.name = "sequence_start", .num = i == 0, .boolean = 1};
        *end = (kserve_param_t){.name = "sequence_end", .num = i + 1 == nchunks, .boolean = 1};
        const char *outs[1] = {"TRANSCRIPTS"};
        kserve_request_spec_t spec = {.inputs = in,
                                      .n_inputs = 2,
                                      .outputs = outs,
                                      .n_outputs = 1,
                                      .params = params,
                                      .n_params = np};
        char *t = NULL;
        if ((rc = remote_infer_text(conn, R, &spec, &t, err)))
            break;
        if (i + 1 < nchunks) {
            if (tty)
                fprintf(stderr, "\r\033[K%s", t);
            else
                fprintf(stderr, "partial: %s\n", t);
            if (partials)
                cJSON_AddItemToArray(partials, cJSON_CreateString(t));
            hark_free(t);
        } else {
            *text = t;
        }
    }
    if (tty)
        fprintf(stderr, "\r\033[K");
    audio_free(&au);
    return rc;
}

static int remote_files(const transcribe_args_t *A, const char **files, int nfiles)
{
    remote_t R;
    hark_err_t err = {0};
    remote_conn_t conn = {0}, *c = &conn;
    if (remote_init(&R, A, &err) || remote_connect(&R, c, &err)) {
        fprintf(stderr, "hark transcribe: --url %s\n", err.msg);
        return 2;
    }
    int json = !strcmp(A->format, "json"), failures = 0;
    cJSON *out = cJSON_CreateArray();
    for (int f = 0; f < nfiles; f++) {
        char *text = NULL;
        err.msg[0] = 0;
        cJSON *partials = json && A->streaming ? cJSON_CreateArray() : NULL;
        int rc = A->streaming ? remote_stream(c, &R, files[f], (int)A->chunk_ms,
                                              ((uint64_t)getpid() << 24) + (uint64_t)f + 1,
                                              partials, &text, &err)
                              : remote_transcribe(c, &R, files[f], &text, &err);
        if (rc) {
            failures++;
            file_error(files[f], err.msg[0] ? err.msg : hark_status_str(rc));
        }
        if (json) {
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "file", cli_file_name(files[f]));
            if (rc)
                cJSON_AddStringToObject(j, "error", err.msg[0] ? err.msg : hark_status_str(rc));
            else
                cJSON_AddStringToObject(j, "text", text);
            if (A->method)
                cJSON_AddStringToObject(j, "decoding_method", A->method);
            if (partials)
                cJSON_AddItemToObject(j, "partials", partials);
            cJSON_AddItemToArray(out, j);
        } else if (!rc) {
            printf("%s %s\n", cli_file_name(files[f]), text);
            fflush(stdout);
        }
        hark_free(text);
    }
    if (json) {
        char *s = cJSON_Print(out);
        if (s) {
            printf("%s\n", s);
            free(s);
        }
    }
    cJSON_Delete(out);
    remote_close(c);
    return failures ? 1 : 0;
}

typedef struct {
    const remote_t *R;
    decode_item_t *items;
    int n, next, done;
    pthread_mutex_t mu;
    decode_done_fn cb;
    void *user;
} remote_pool_t;

static void *remote_worker(void *arg)
{
    remote_pool_t *p = arg;
    remote_conn_t conn, *c = &conn;
    hark_err_t cerr = {0};
    int crc = remote_connect(p->R, c, &cerr);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int i = p->next < p->n ? p->next++ : -1;
        pthread_mutex_unlock(&p->mu);
        if (i < 0)
            break;
        decode_item_t *it = &p->items[i];
        hark_err_t err = cerr;
        char *text = NULL;
        int rc = crc ? crc : remote_transcribe(c, p->R, it->path, &text, &err);
        it->status = rc;
        if (rc)
            it->error = hark_strdup(err.msg[0] ? err.msg : hark_status_str(rc));
        else
            it->result.best.text = text;
        pthread_mutex_lock(&p->mu);
        p->done++;
        if (p->cb)
            p->cb(p->user, it, p->done, p->n);
        pthread_mutex_unlock(&p->mu);
    }
    remote_close(c);
    return NULL;
}

/* decode_list_run's counterpart through the server: `jobs` connections */
static int remote_decode_list(const remote_t *R, decode_item_t *items, int n, int jobs,
                              decode_done_fn cb, void *user)
{
    remote_pool_t p = {.R = R, .items = items, .n = n, .cb = cb, .user = user};
    pthread_mutex_init(&p.mu, NULL);
    if (jobs > n)
        jobs = n > 0 ? n : 1;
    pthread_t *th = hark_calloc((size_t)jobs, sizeof *th);
    int started = 0;
    for (; th && started < jobs; started++)
        if (pthread_create(&th[started], NULL, remote_worker, &p) != 0)
            break;
    if (!started) /* no thread (or no memory for them): one connection on this thread */
        remote_worker(&p);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    hark_free(th);
    pthread_mutex_destroy(&p.mu);
    return HARK_OK;
}

/* ---- --wavscp mode -------------------------------------------------------------------------- */

typedef struct {
    const scp_t *wav;
    const decode_item_t *items; /* (wav->n) */
    int tty;
    double t0;
    int failed;
    double audio_s;          /* audio decoded so far, seconds */
    unsigned char *finished; /* (wav->n) 1 once an item's callback ran */
    int next_out;            /* stream_text: the first item not printed yet */
    int stream_text;         /* print 'ID TEXT' on stdout as soon as the items before are done */
} progress_t;

/* "[#####     ] 12/40, 8.1 s, ETA 19 s, 14.2x real time" (stderr, a terminal only) */
static void progress_bar(progress_t *pg, int done, int total)
{
    const int width = 30;
    int fill = total ? (int)((long long)done * width / total) : width;
    double el = clock_now_s() - pg->t0;
    fprintf(stderr, "\r\033[K[%.*s%*s] %d/%d", fill, "##############################", width - fill,
            "", done, total);
    if (pg->failed)
        fprintf(stderr, ", %d failed", pg->failed);
    fprintf(stderr, ", %.1f s", el);
    if (done > 0 && done < total)
        fprintf(stderr, ", ETA %.0f s", el / done * (total - done));
    if (pg->audio_s > 0 && el > 0)
        fprintf(stderr, ", %.1fx real time", pg->audio_s / el);
    fflush(stderr);
}

/* stream_text: the finished items at the head of the list, in the list's order */
static void progress_flush_text(progress_t *pg)
{
    int printed = 0;
    while (pg->next_out < pg->wav->n && pg->finished[pg->next_out]) {
        const decode_item_t *it = &pg->items[pg->next_out];
        if (!it->status) {
            if (!printed++ && pg->tty)
                fprintf(stderr, "\r\033[K"); /* the bar may share the terminal */
            printf("%s %s\n", pg->wav->e[pg->next_out].id,
                   it->result.best.text ? it->result.best.text : "");
        }
        pg->next_out++;
    }
    if (printed)
        fflush(stdout);
}

/* pool callback (serialised): report a failure at once, redraw the bar on a terminal */
static void on_done(void *user, const decode_item_t *it, int done, int total)
{
    progress_t *pg = user;
    pg->audio_s += it->seconds;
    if (pg->finished)
        pg->finished[it - pg->items] = 1;
    if (it->status) {
        pg->failed++;
        const scp_entry_t *e = &pg->wav->e[it - pg->items];
        const char *msg = it->error ? it->error : hark_status_str(it->status);
        int named = strstr(msg, it->path) != NULL; /* audio errors name the file already */
        fprintf(stderr, "%shark transcribe: %s: %s%s%s\n", pg->tty ? "\r\033[K" : "", e->id,
                named ? "" : it->path, named ? "" : ": ", msg);
    }
    if (pg->stream_text)
        progress_flush_text(pg);
    if (pg->tty)
        progress_bar(pg, done, total);
}

static int mkdir_p(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static FILE *open_out(const char *dir, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        fprintf(stderr, "hark transcribe: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *dir, const char *name)
{
    if (!f)
        return 0;
    int bad = ferror(f) | fclose(f);
    if (bad)
        fprintf(stderr, "hark transcribe: error writing %s/%s\n", dir, name);
    return bad;
}

static void add_summary(cJSON *j, const wer_counts_t *wc, const wer_counts_t *cc, int scored,
                        int utts, int failed, int have_ref)
{
    if (have_ref) {
        cJSON_AddNumberToObject(j, "wer", wer_rate(wc));
        cJSON_AddNumberToObject(j, "cer", wer_rate(cc));
    } else {
        cJSON_AddNullToObject(j, "wer");
        cJSON_AddNullToObject(j, "cer");
    }
    cJSON_AddNumberToObject(j, "substitutions", (double)wc->sub);
    cJSON_AddNumberToObject(j, "deletions", (double)wc->del);
    cJSON_AddNumberToObject(j, "insertions", (double)wc->ins);
    cJSON_AddNumberToObject(j, "ref_words", (double)wc->ref);
    cJSON_AddNumberToObject(j, "ref_chars", (double)cc->ref);
    cJSON_AddNumberToObject(j, "utterances", have_ref ? scored : utts);
    cJSON_AddNumberToObject(j, "failed", failed);
}

/* --vad's segment rules: silero-vad's defaults, segments of at most 20 s, the options given */
static void vad_seg_opts(const transcribe_args_t *A, silero_seg_opts_t *so)
{
    silero_seg_default_opts(so);
    so->max_speech_duration_s = A->vad_max_s >= 0 ? A->vad_max_s : 20.0;
    if (A->vad_thr >= 0)
        so->threshold = A->vad_thr;
    if (A->vad_min_sil >= 0)
        so->min_silence_duration_ms = (int)A->vad_min_sil;
    if (A->vad_pad >= 0)
        so->speech_pad_ms = (int)A->vad_pad;
}

static int transcribe_list(hark_model_t *model, const hark_asr_opts_t *o,
                           const transcribe_args_t *A)
{
    scp_t wav = {0}, ref = {0};
    hark_err_t err = {0};
    decode_item_t *items = NULL;
    char **paths = NULL;
    FILE *fh = NULL, *fr = NULL, *fu = NULL;
    int status = 0, failed = 0, scored = 0, decoded = 0;
    unsigned char *pg_finished = NULL;
    wer_counts_t wc = {0}, cc = {0};
    if (scp_load(A->wavscp, 1, &wav, &err) || (A->trans && scp_load(A->trans, 0, &ref, &err))) {
        fprintf(stderr, "hark transcribe: %s\n", err.msg);
        status = 2;
        goto done;
    }
    char base[4096];
    if (A->data_dir) {
        snprintf(base, sizeof base, "%s", A->data_dir);
    } else {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", A->wavscp);
        snprintf(base, sizeof base, "%s", dirname(tmp));
    }
    items = hark_calloc((size_t)(wav.n ? wav.n : 1), sizeof *items);
    paths = hark_calloc((size_t)(wav.n ? wav.n : 1), sizeof *paths);
    if (!items || !paths) {
        fprintf(stderr, "hark transcribe: out of memory for %d utterances\n", wav.n);
        status = 1;
        goto done;
    }
    for (int i = 0; i < wav.n; i++) {
        const char *v = wav.e[i].value;
        size_t len = 4 * strlen(base) + strlen(v) + 16;
        if (!(paths[i] = hark_malloc(len))) {
            fprintf(stderr, "hark transcribe: out of memory\n");
            status = 1;
            goto done;
        }
        if (scp_is_command(v)) { /* Kaldi's "command |": run in the folder relative paths use */
            size_t k = (size_t)snprintf(paths[i], len, "cd '");
            for (const char *c = base; *c; c++) { /* quoted for the shell */
                if (*c == '\'')
                    k += (size_t)snprintf(paths[i] + k, len - k, "'\\''");
                else
                    paths[i][k++] = *c;
            }
            snprintf(paths[i] + k, len - k, "' && %s", v);
        } else {
            snprintf(paths[i], len, "%s%s%s", v[0] == '/' ? "" : base, v[0] == '/' ? "" : "/", v);
        }
        items[i].path = paths[i];
    }
    if (A->out_dir && mkdir_p(A->out_dir)) {
        fprintf(stderr, "hark transcribe: cannot create %s: %s\n", A->out_dir, strerror(errno));
        status = 1;
        goto done;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = A->jobs > 0 ? (int)A->jobs : (int)(cores > 0 ? cores : 1);
    progress_t pg = {.wav = &wav, .items = items, .tty = isatty(2), .t0 = clock_now_s()};
    /* without --trans, text lines come out as the list is decoded (in its order), not at the end */
    pg.finished = pg_finished = hark_calloc((size_t)(wav.n ? wav.n : 1), 1);
    pg.stream_text = !A->trans && !strcmp(A->format, "text") && pg.finished;
    if (!model) { /* --url: the server decodes, over `jobs` connections */
        remote_t R;
        if (remote_init(&R, A, &err) ||
            remote_decode_list(&R, items, wav.n, A->jobs > 0 ? (int)A->jobs : 4, on_done, &pg)) {
            fprintf(stderr, "%shark transcribe: %s\n", pg.tty ? "\r\033[K" : "", err.msg);
            status = 1;
            goto done;
        }
    } else if (A->vad) { /* each entry cut by the VAD, the segments batched across entries */
        silero_seg_opts_t so;
        vad_seg_opts(A, &so);
        transcribe_vad_items(model, o, A->vad, &so, A->batch > 0 ? (int)A->batch : 8, items, wav.n,
                             on_done, &pg);
    } else {
        /* BLAS threads were set at load (hark_model_opts_t.n_threads) */
        decode_list_opts_t lo = {.jobs = jobs,
                                 .batch = A->batch > 0                    ? (int)A->batch
                                          : hark_model_device(model) >= 0 ? 8
                                                                          : 1,
                                 .done = on_done,
                                 .user = &pg};
        if (decode_list_run(model, o, items, wav.n, &lo, &err)) {
            fprintf(stderr, "%shark transcribe: %s\n", pg.tty ? "\r\033[K" : "", err.msg);
            status = 1;
            goto done;
        }
    }
    double wall = clock_now_s() - pg.t0;
    if (pg.tty)
        fprintf(stderr, "\n");
    if (A->out_dir) {
        fh = open_out(A->out_dir, "hyp.txt");
        if (A->trans) {
            fr = open_out(A->out_dir, "ref.txt");
            fu = open_out(A->out_dir, "per_utt.tsv");
            if (fu)
                fprintf(fu, "id\tref_words\tsub\tdel\tins\twer\tref_chars\tchar_sub\tchar_del"
                            "\tchar_ins\tcer\n");
        }
        if (!fh || (A->trans && (!fr || !fu)))
            status = 1;
    }
    for (int i = 0; i < wav.n; i++) {
        const char *id = wav.e[i].id;
        const decode_item_t *it = &items[i];
        if (it->status) {
            failed++;
            continue;
        }
        decoded++;
        const char *hyp = it->result.best.text ? it->result.best.text : "";
        if (!A->trans) {
            if (fh)
                fprintf(fh, "%s %s\n", id, hyp);
            if (!strcmp(A->format, "text") && !pg.stream_text)
                printf("%s %s\n", id, hyp);
            continue;
        }
        const scp_entry_t *r = scp_find(&ref, id);
        if (!r) {
            fprintf(stderr, "hark transcribe: %s: no reference in %s\n", id, A->trans);
            failed++;
            continue;
        }
        char *nr = NULL, *nh = NULL;
        wer_counts_t uw, uc;
        if (wer_normalize(r->value, &nr, &err) || wer_normalize(hyp, &nh, &err) ||
            wer_words(nr, nh, &uw, &err) || wer_chars(nr, nh, &uc, &err)) {
            fprintf(stderr, "hark transcribe: %s: %s\n", id, err.msg);
            failed++;
        } else {
            scored++;
            wer_add(&wc, &uw);
            wer_add(&cc, &uc);
            if (fh)
                fprintf(fh, "%s %s\n", id, nh);
            if (fr)
                fprintf(fr, "%s %s\n", id, nr);
            if (fu)
                fprintf(fu, "%s\t%ld\t%ld\t%ld\t%ld\t%.4f\t%ld\t%ld\t%ld\t%ld\t%.4f\n", id, uw.ref,
                        uw.sub, uw.del, uw.ins, wer_rate(&uw), uc.ref, uc.sub, uc.del, uc.ins,
                        wer_rate(&uc));
        }
        hark_free(nr);
        hark_free(nh);
    }
    cJSON *sum = cJSON_CreateObject();
    add_summary(sum, &wc, &cc, scored, decoded, failed, A->trans != NULL);
    /* how much audio and how fast (0 audio seconds through --url: the server read the files) */
    cJSON_AddNumberToObject(sum, "audio_seconds", pg.audio_s);
    cJSON_AddNumberToObject(sum, "wall_seconds", wall);
    if (pg.audio_s > 0 && wall > 0)
        cJSON_AddNumberToObject(sum, "rtfx", pg.audio_s / wall);
    char speed[160];
    if (pg.audio_s > 0 && wall > 0)
        snprintf(speed, sizeof speed, "%.1f s of audio in %.1f s: %.1fx real time", pg.audio_s,
                 wall, pg.audio_s / wall);
    else
        snprintf(speed, sizeof speed, "%d utterances in %.1f s", decoded + failed, wall);
    if (A->out_dir) {
        FILE *fs = open_out(A->out_dir, "summary.json");
        char *s = cJSON_Print(sum);
        if (fs && s)
            fprintf(fs, "%s\n", s);
        free(s);
        if (!fs || close_out(fs, A->out_dir, "summary.json"))
            status = 1;
    }
    if (!strcmp(A->format, "json")) {
        char *s = cJSON_Print(sum);
        if (s)
            printf("%s\n", s);
        free(s);
    } else if (A->trans) {
        printf("WER %.2f%% [S %ld, D %ld, I %ld / %ld words]\n", 100.0 * wer_rate(&wc), wc.sub,
               wc.del, wc.ins, wc.ref);
        printf("CER %.2f%% [S %ld, D %ld, I %ld / %ld chars]\n", 100.0 * wer_rate(&cc), cc.sub,
               cc.del, cc.ins, cc.ref);
        printf("%d utterances scored, %d failed\n", scored, failed);
        printf("%s\n", speed);
    } else {
        fprintf(stderr, "hark transcribe: %d decoded, %d failed; %s\n", decoded, failed, speed);
    }
    cJSON_Delete(sum);
    if (failed)
        status = status ? status : 1;
done:
    if (close_out(fh, A->out_dir, "hyp.txt") | close_out(fr, A->out_dir, "ref.txt") |
        close_out(fu, A->out_dir, "per_utt.tsv"))
        status = status ? status : 1;
    for (int i = 0; items && i < wav.n; i++)
        decode_item_free(&items[i]);
    for (int i = 0; paths && i < wav.n; i++)
        hark_free(paths[i]);
    hark_free(items);
    hark_free(paths);
    hark_free(pg_finished);
    scp_free(&wav);
    scp_free(&ref);
    return status;
}

int cli_transcribe(int argc, char **argv)
{
    transcribe_args_t A = {.chunk_ms = 640,
                           .device = "cpu",
                           .precision = "fp32",
                           .format = "text",
                           .beam = -1,
                           .ctc_w = -1,
                           .rev_w = -1,
                           .nbest = -1,
                           .left = -2,
                           .vad_thr = -1,
                           .vad_max_s = -1,
                           .vad_min_sil = -1,
                           .vad_pad = -1};
    const char **files = hark_calloc((size_t)argc, sizeof *files);
    int nfiles = 0, status = 0;
    if (!files)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int v = i + 1 < argc;
        double *num = NULL;
        const char **str = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            transcribe_usage(stdout);
            hark_free(files);
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "-m"))
            str = &A.model;
        else if (!strcmp(a, "--url"))
            str = &A.url;
        else if (!strcmp(a, "--streaming")) {
            A.streaming = 1;
            continue;
        } else if (!strcmp(a, "--chunk-ms"))
            num = &A.chunk_ms;
        else if (!strcmp(a, "-i") || !strcmp(a, "--protocol"))
            str = &A.iface;
        else if (!strcmp(a, "--device"))
            str = &A.device;
        else if (!strcmp(a, "--precision"))
            str = &A.precision;
        else if (!strcmp(a, "--format"))
            str = &A.format;
        else if (!strcmp(a, "--decoding-method"))
            str = &A.method;
        else if (!strcmp(a, "--dump-dir"))
            str = &A.dump;
        else if (!strcmp(a, "--wavscp"))
            str = &A.wavscp;
        else if (!strcmp(a, "--trans"))
            str = &A.trans;
        else if (!strcmp(a, "--data-dir"))
            str = &A.data_dir;
        else if (!strcmp(a, "--output-dir"))
            str = &A.out_dir;
        else if (!strcmp(a, "--vad"))
            str = &A.vad;
        else if (!strcmp(a, "--vad-threshold"))
            num = &A.vad_thr;
        else if (!strcmp(a, "--vad-max-speech-s"))
            num = &A.vad_max_s;
        else if (!strcmp(a, "--vad-min-silence-ms"))
            num = &A.vad_min_sil;
        else if (!strcmp(a, "--vad-speech-pad-ms"))
            num = &A.vad_pad;
        else if (!strcmp(a, "--beam-size"))
            num = &A.beam;
        else if (!strcmp(a, "--ctc-weight"))
            num = &A.ctc_w;
        else if (!strcmp(a, "--reverse-weight"))
            num = &A.rev_w;
        else if (!strcmp(a, "--nbest"))
            num = &A.nbest;
        else if (!strcmp(a, "--chunk-size"))
            num = &A.chunk;
        else if (!strcmp(a, "--left-chunks"))
            num = &A.left;
        else if (!strcmp(a, "--threads"))
            num = &A.threads;
        else if (!strcmp(a, "--jobs"))
            num = &A.jobs;
        else if (!strcmp(a, "--batch-size"))
            num = &A.batch;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "hark transcribe: unknown option '%s'\n", a);
            transcribe_usage(stderr);
            hark_free(files);
            return 2;
        } else
            files[nfiles++] = a;
        if (str) {
            if (!v) {
                fprintf(stderr, "hark transcribe: %s needs a value\n", a);
                hark_free(files);
                return 2;
            }
            *str = argv[++i];
        }
        if (num) {
            char *end = NULL;
            if (!v || (*num = strtod(argv[++i], &end), *end) || *num < (num == &A.left ? -1 : 0)) {
                fprintf(stderr, "hark transcribe: %s needs a non-negative number\n", a);
                hark_free(files);
                return 2;
            }
        }
    }
    char demo[4096];
    if (!A.model && !A.url && (nfiles || A.wavscp) &&
        cli_demo_entry(CLI_DEMO_ASR, "transcribe", "demo recogniser", demo, sizeof demo) == 0)
        A.model = demo;
    const char *fmt = A.format, *bad = NULL;
    int subtitles = !strcmp(fmt, "srt") || !strcmp(fmt, "vtt");
    if (!A.model || (!nfiles && !A.wavscp))
        bad = "needs --model (with --url: -m MODEL) and FILE... or --wavscp";
    else if (strcmp(fmt, "text") && strcmp(fmt, "json") && !subtitles)
        bad = "--format must be text, json, srt or vtt";
    else if (A.wavscp && nfiles)
        bad = "takes FILE... or --wavscp, not both";
    else if (A.wavscp && (subtitles || A.dump))
        bad = "--wavscp takes --format text or json, and no --dump-dir";
    else if (A.vad && (A.url || A.dump))
        bad = "--vad takes FILE... or --wavscp (no --url or --dump-dir)";
    else if (!A.vad && (A.vad_thr >= 0 || A.vad_max_s >= 0 || A.vad_min_sil >= 0 || A.vad_pad >= 0))
        bad = "--vad-* options go with --vad";
    else if (A.vad && A.vad_thr > 1)
        bad = "--vad-threshold must be in [0, 1]";
    else if (A.vad && A.vad_max_s >= 0 && A.vad_max_s < 0.5)
        bad = "--vad-max-speech-s must be at least 0.5";
    else if (!A.wavscp &&
             (A.trans || A.data_dir || A.out_dir || A.jobs > 0 || (A.batch > 0 && !A.vad)))
        bad = "--trans, --data-dir, --output-dir, --jobs and --batch-size go with --wavscp "
              "(--batch-size with --vad too)";
    else if (A.nbest > 1 && (strcmp(fmt, "json") || A.wavscp))
        bad = "--nbest N lists the alternatives in --format json, for FILE... (text output, "
              "subtitles and --wavscp give the best hypothesis only)";
    else if (subtitles && nfiles != 1)
        bad = "--format srt|vtt takes one FILE";
    else if (A.url && (subtitles || A.dump || A.nbest >= 0 || A.batch > 0))
        bad = "--url takes --format text or json, and no --dump-dir, --nbest or --batch-size";
    else if (A.iface && (!A.url || (strcmp(A.iface, "grpc") && strcmp(A.iface, "http"))))
        bad = "-i takes http or grpc, with --url";
    else if (A.streaming && (!A.url || A.wavscp))
        bad = "--streaming sends FILE... chunk by chunk to a server's streaming model: it needs "
              "--url and -m";
    else if (A.chunk_ms < 10 || A.chunk_ms > 60000)
        bad = "--chunk-ms must be in [10, 60000]";
    for (int i = 0, seen = 0; !bad && i < nfiles; i++) /* `-`: standard input */
        if (!strcmp(files[i], "-") && seen++)
            bad = "standard input (-) can be given once";
    if (bad) {
        fprintf(stderr, "hark transcribe: %s\n", bad);
        transcribe_usage(stderr);
        hark_free(files);
        return 2;
    }
    for (int i = 0; i < nfiles; i++)
        if (!strcmp(files[i], "-") && !(files[i] = cli_spool_stdin())) {
            hark_free(files);
            return 1;
        }
    if (A.url) { /* the server has the model: -m names it */
        if (A.wavscp) {
            hark_asr_opts_t none = {0};
            status = transcribe_list(NULL, &none, &A);
        } else {
            status = remote_files(&A, files, nfiles);
        }
        hark_free(files);
        return status;
    }
    if (strcmp(A.device, "cpu") && strcmp(A.device, "cuda") && strncmp(A.device, "cuda:", 5)) {
        fprintf(stderr, "hark transcribe: --device must be cpu or cuda:N\n");
        hark_free(files);
        return 2;
    }
    if (strcmp(A.precision, "fp32") && strcmp(A.precision, "fp16") && strcmp(A.precision, "bf16")) {
        fprintf(stderr, "hark transcribe: --precision must be fp32, fp16 or bf16\n");
        hark_free(files);
        return 2;
    }
    if (A.dump && strcmp(A.device, "cpu")) {
        fprintf(stderr, "hark transcribe: --dump-dir needs --device cpu (the GPU path keeps its "
                        "stages on the device)\n");
        hark_free(files);
        return 2;
    }
    /* BLAS threads (CPU): --threads; for a list, else the cores shared among the jobs */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = A.jobs > 0 ? (int)A.jobs : (int)(cores > 0 ? cores : 1);
    hark_model_opts_t mo = {.device = A.device, .precision = A.precision};
    mo.n_threads = A.threads > 0 ? (int)A.threads
                   : A.wavscp    ? (int)(cores / jobs > 1 ? cores / jobs : 1)
                                 : 0;
    hark_model_t *model = NULL;
    if (hark_model_load(A.model, &mo, &model)) {
        fprintf(stderr, "hark transcribe: %s\n", hark_last_error());
        hark_free(files);
        return 1;
    }
    hark_asr_opts_t o = {.decoding_method = A.method};
    if (A.beam >= 0)
        o.beam_size = (int)A.beam;
    if (A.ctc_w >= 0)
        o.ctc_weight = A.ctc_w > 0 ? A.ctc_w : HARK_WEIGHT_ZERO;
    if (A.rev_w >= 0)
        o.reverse_weight = A.rev_w > 0 ? A.rev_w : HARK_WEIGHT_ZERO;
    /* --nbest N, else the whole beam (greedy search has no n-best); a list scores the best only */
    o.nbest = A.wavscp ? 1 : A.nbest >= 0 ? (int)A.nbest : HARK_NBEST_ALL;
    if (A.chunk > 0)
        o.decoding_chunk_size = (int)A.chunk;
    if (A.left >= -1)
        o.num_decoding_left_chunks = A.left == 0 ? HARK_LEFT_CHUNKS_ZERO : (int)A.left;
    hark_asr_result_t *none = NULL; /* the options checked once, on no audio */
    if (hark_recognize(model, NULL, NULL, 0, 0, &o, &none)) {
        fprintf(stderr, "hark transcribe: %s\n", hark_last_error());
        status = 2;
        goto done;
    }
    hark_asr_result_destroy(none);
    if (A.wavscp) {
        status = transcribe_list(model, &o, &A);
    } else if (A.vad) {
        silero_seg_opts_t so;
        vad_seg_opts(&A, &so);
        status = transcribe_vad_files(model, &o, A.vad, &so, A.batch > 0 ? (int)A.batch : 8,
                                      A.format, files, nfiles);
    } else {
        status = transcribe_files(model, o, &A, files, nfiles);
    }
done:
    hark_model_destroy(model);
    hark_free(files);
    return status;
}
