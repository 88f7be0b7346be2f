/* Tests for silero_cut (src/model/silero/silero_cut.c) without a VAD: fixed windows with
 * overlap over an in-memory WAV read through audio_reader_open_memory — each piece's span and
 * samples, the last-window rule, --max-audio-seconds, bad options. The VAD path is tested through
 * `hark transcribe --vad` (tests/cli/test_cli_transcribe_vad.c) and the server
 * (tests/server/test_server_long.py). */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/silero/silero_cut.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* a 16 kHz mono 16-bit WAV of n samples, sample i = (i * 7919) % 65536 - 32768 */
static uint8_t *make_wav(size_t n, size_t *len)
{
    *len = 44 + 2 * n;
    uint8_t *b = calloc(1, *len);
    uint32_t v;
    memcpy(b, "RIFF", 4);
    v = (uint32_t)(*len - 8);
    memcpy(b + 4, &v, 4);
    memcpy(b + 8, "WAVEfmt ", 8);
    v = 16;
    memcpy(b + 16, &v, 4);
    uint16_t fmt[2] = {1, 1};
    memcpy(b + 20, fmt, 4);
    v = 16000;
    memcpy(b + 24, &v, 4);
    v = 32000;
    memcpy(b + 28, &v, 4);
    uint16_t ba[2] = {2, 16};
    memcpy(b + 32, ba, 4);
    memcpy(b + 36, "data", 4);
    v = (uint32_t)(2 * n);
    memcpy(b + 40, &v, 4);
    for (size_t i = 0; i < n; i++) {
        int16_t s = (int16_t)((long)(i * 7919 % 65536) - 32768);
        memcpy(b + 44 + 2 * i, &s, 2);
    }
    return b;
}

typedef struct {
    long long start[16], end[16];
    int n, bad;
} pieces_t;

static int on_piece(void *user, long long s, long long e, const float *pcm, hark_err_t *err)
{
    pieces_t *p = user;
    if (p->n == 16)
        return err_set(err, HARK_ERR_INTERNAL, "too many pieces");
    p->start[p->n] = s;
    p->end[p->n++] = e;
    for (long long i = s; i < e; i++)
        if (pcm[i - s] != (float)((long)(i * 7919 % 65536) - 32768) / 32768.0f)
            p->bad++;
    return HARK_OK;
}

static int cut(size_t n, const silero_cut_opts_t *o, pieces_t *p, hark_err_t *err)
{
    size_t len;
    uint8_t *wav = make_wav(n, &len);
    audio_reader_t *rd = NULL;
    size_t got = 0;
    memset(p, 0, sizeof *p);
    int rc = audio_reader_open_memory(wav, len, 16000, &rd, err);
    if (!rc)
        rc = silero_cut(rd, o, on_piece, NULL, p, &got, err);
    if (!rc && got != n)
        rc = err_set(err, HARK_ERR_INTERNAL, "read %zu samples of %zu", got, n);
    audio_reader_close(rd);
    free(wav);
    return rc;
}

TEST(silero_cut_windows)
{
    hark_err_t err = {0};
    pieces_t p;
    silero_cut_opts_t o = {.window_s = 1.0, .overlap_s = 0.25};
    /* 3.3 s: windows of 16000 every 12000, the last cut at the end */
    CHECK_OK(cut(52800, &o, &p, &err));
    long long want[][2] = {
        {0, 16000}, {12000, 28000}, {24000, 40000}, {36000, 52000}, {48000, 52800}};
    CHECK_EQ_INT(p.n, 5);
    for (int i = 0; i < p.n && i < 5; i++)
        CHECK(p.start[i] == want[i][0] && p.end[i] == want[i][1]);
    CHECK_EQ_INT(p.bad, 0);
    /* the end exactly at a window's end: no last window inside it */
    CHECK_OK(cut(52000, &o, &p, &err));
    CHECK_EQ_INT(p.n, 4);
    CHECK(p.end[3] == 52000);
    /* shorter than a window: one piece, all of it */
    CHECK_OK(cut(5000, &o, &p, &err));
    CHECK(p.n == 1 && p.start[0] == 0 && p.end[0] == 5000 && p.bad == 0);
    /* no overlap */
    o.overlap_s = 0;
    CHECK_OK(cut(40000, &o, &p, &err));
    CHECK(p.n == 3 && p.start[1] == 16000 && p.start[2] == 32000 && p.end[2] == 40000);
}

TEST(silero_cut_limits)
{
    hark_err_t err = {0};
    pieces_t p;
    silero_cut_opts_t o = {.window_s = 1.0, .overlap_s = 0.25, .max_seconds = 2.0};
    CHECK_EQ_INT(cut(48000, &o, &p, &err), HARK_ERR_TOO_LARGE);
    CHECK(strstr(err.msg, "max-audio-seconds") != NULL);
    CHECK_OK(cut(32000, &o, &p, &err));
    o = (silero_cut_opts_t){.window_s = 1.0, .overlap_s = 1.0};
    CHECK_EQ_INT(cut(100, &o, &p, &err), HARK_ERR_INVALID_ARG);
    o = (silero_cut_opts_t){.window_s = 0};
    CHECK_EQ_INT(cut(100, &o, &p, &err), HARK_ERR_INVALID_ARG);
}
