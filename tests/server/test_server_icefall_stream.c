/* Runs tests/server/test_server_icefall_stream.py: a real `hark serve` with a small generated
 * causal zipformer (support/icefall_gen.h) converted with --streaming 2, served under sherpa's
 * streaming contract (sequence_batching, WAV/WAV_LENS chunks -> TRANSCRIPTS) and driven as
 * sherpa's Triton client does; the expected texts come from the engine's own stream
 * (icefall_stream_*) on the same samples; a second model whose joiner emits nothing on quiet audio
 * (support/icefall_gen.h's --blank-bias 12) is served beside it for WebSocket endpointing, its
 * expected segments the engine's stream's with endpointing on. Skips without /usr/bin/python3
 * (torch, numpy) or a python with grpcio, grpc_tools and requests. */
#include "test.h"

#include "core/alloc.h"
#include "core/npy.h"
#include "hark.h"
#include "model/icefall/icefall.h"
#include "support/icefall_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PCM 60321       /* 3.77 s */
#define N_EP (10 * 16000) /* endpointing: 1.6 s of tones, 2 s quiet, 1.2 s, 4 s quiet, 1.2 s */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

TEST(serve_icefall_streaming)
{
    const char *py = test_python("torch, numpy");
    if (!py || strcmp(py, "/usr/bin/python3"))
        SKIP("/usr/bin/python3 with torch and numpy is absent");
    const char *gpy = test_python("grpc, grpc_tools.protoc, requests, numpy");
    if (!gpy)
        SKIP("no python3 with grpcio, grpc_tools, requests and numpy (python3-grpcio, "
             "python3-grpc-tools)");
    const char *tmp = test_tmpdir(t);
    char log[4096], dir[700], path[800], cmd[4096];
    CHECKF(icefall_gen_model(tmp, "ms", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL, "--streaming 2",
                             log, sizeof log) == 0,
           "conversion failed: %s", log);
    snprintf(dir, sizeof dir, "%s/ms", tmp);
    /* the samples: int16 values (the WebSocket path sends 16-bit PCM) */
    float *x = hark_malloc(sizeof(float) * N_PCM);
    unsigned seed = 3;
    float fr = 0, amp = 0, nz = 0; /* 0.2 s segments of a tone and noise, each its own */
    for (int i = 0; i < N_PCM; i++) {
        if (i % 3200 == 0) {
            fr = 0.02f + 0.15f * (test_randf(&seed) + 1);
            amp = 0.25f * (test_randf(&seed) + 1);
            nz = 0.1f * (test_randf(&seed) + 1);
        }
        float v = amp * sinf(fr * (float)i) + nz * test_randf(&seed);
        x[i] = roundf(v * 32767.0f) / 32768.0f;
    }
    snprintf(path, sizeof path, "%s/pcm.npy", tmp);
    int64_t shape[1] = {N_PCM};
    CHECK_OK(npy_save_f32(path, x, 1, shape));
    /* the expected texts: the engine's stream over all of it */
    hark_err_t err = {0};
    icefall_model_t *m = NULL;
    icefall_worker_t *w = NULL;
    icefall_stream_t *s = NULL;
    CHECK_OK(icefall_load(dir, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &w, &err));
    CHECK_OK(icefall_stream_create(m, &s, &err));
    snprintf(path, sizeof path, "%s/expected.json", tmp);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputc('{', f);
    char *texts[2] = {NULL, NULL};
    int distinct = 0;
    for (int meth = 0; meth < 2; meth++) {
        icefall_result_t r;
        CHECK_OK(icefall_stream_start(s, meth ? ICEFALL_MODIFIED_BEAM : ICEFALL_GREEDY, 4, &err));
        CHECK_OK(icefall_stream_accept(w, s, x, N_PCM, &err));
        CHECK_OK(icefall_stream_input_done(w, s, &err));
        CHECK_OK(icefall_stream_result(s, &r, &err));
        CHECKF(r.best.n > 3, "the generated model emits %d tokens", r.best.n);
        for (int i = 0; !meth && i < r.best.n; i++) {
            int seen = 0;
            for (int j = 0; j < i && !seen; j++)
                seen = r.best.tokens[j] == r.best.tokens[i];
            distinct += !seen;
        }
        texts[meth] = hark_strdup(r.text);
        fprintf(f, "%s\"%s\": ", meth ? ", " : "", meth ? "modified_beam_search" : "greedy_search");
        json_str(f, r.text);
        icefall_result_free(&r);
    }
    fputs("}\n", f);
    fclose(f);
    /* a text that tells greedy from beam and has a few distinct pieces */
    CHECKF(distinct >= 4 && texts[0] && texts[1] && strcmp(texts[0], texts[1]),
           "the expected texts are too plain (%d distinct tokens): '%s' / '%s'", distinct,
           texts[0] ? texts[0] : "", texts[1] ? texts[1] : "");
    hark_free(texts[0]);
    hark_free(texts[1]);
    icefall_stream_destroy(s);
    icefall_worker_destroy(w);
    icefall_destroy(m);
    hark_free(x);

    /* endpointing: the quiet-blank model, speech with quiet stretches, the engine's segments */
    CHECKF(icefall_gen_model_ex(tmp, "ms_ep", ICEFALL_GEN_FLAGS " " ICEFALL_GEN_CAUSAL,
                                "--blank-bias 12", "--streaming 2", log, sizeof log) == 0,
           "conversion failed: %s", log);
    snprintf(path, sizeof path, "%s/ms_ep", tmp);
    CHECK_OK(icefall_load(path, 1, &m, &err));
    CHECK_OK(icefall_worker_create(m, 1, &w, &err));
    CHECK_OK(icefall_stream_create(m, &s, &err));
    x = hark_malloc(sizeof(float) * N_EP);
    static const int quiet[4][2] = {{25600, 57600}, {76800, 140800}, {160000, 160000}, {0, 0}};
    for (int i = 0; i < N_EP; i++) {
        int q = 0;
        for (int k = 0; k < 3; k++)
            q |= i >= quiet[k][0] && i < quiet[k][1];
        if (i % 3200 == 0) {
            fr = 0.02f + 0.15f * (test_randf(&seed) + 1);
            amp = 0.25f * (test_randf(&seed) + 1);
            nz = 0.1f * (test_randf(&seed) + 1);
        }
        float v =
            q ? 1e-4f * test_randf(&seed) : amp * sinf(fr * (float)i) + nz * test_randf(&seed);
        x[i] = roundf(v * 32767.0f) / 32768.0f;
    }
    snprintf(path, sizeof path, "%s/pcm_ep.npy", tmp);
    int64_t shape_ep[1] = {N_EP};
    CHECK_OK(npy_save_f32(path, x, 1, shape_ep));
    CHECK_OK(icefall_stream_start(s, ICEFALL_GREEDY, 0, &err));
    CHECK_OK(icefall_stream_set_endpointing(s, NULL, 1, &err));
    CHECK_OK(icefall_stream_accept(w, s, x, N_EP, &err));
    CHECK_OK(icefall_stream_input_done(w, s, &err));
    snprintf(path, sizeof path, "%s/expected_ep.json", tmp);
    f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"segments\": [", f);
    icefall_segment_t sg;
    int n_seg = 0, n_said = 0;
    while (icefall_stream_pop_segment(s, &sg)) {
        fputs(n_seg++ ? ", " : "", f);
        json_str(f, sg.res.text);
        n_said += sg.res.text[0] != 0;
        icefall_result_free(&sg.res);
    }
    icefall_result_t r;
    CHECK_OK(icefall_stream_result(s, &r, &err));
    fputs(", ", f);
    json_str(f, r.text);
    fputs("]}\n", f);
    fclose(f);
    icefall_result_free(&r);
    CHECKF(n_seg >= 2 && n_said >= 2, "the endpointing audio gives %d segments, %d with text",
           n_seg, n_said);
    icefall_stream_destroy(s);
    icefall_worker_destroy(w);
    icefall_destroy(m);
    hark_free(x);
    snprintf(cmd, sizeof cmd, "%s tests/server/test_server_icefall_stream.py %s '%s' '%s'", gpy,
             test_hark_bin(), dir, tmp); /* DATA_DIR/ms_ep: the endpointing model */
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_server_icefall_stream.py failed (status %d)", st);
}
