/* words.c — word timings from token timestamps, subtitle cues, SRT / WebVTT output.
 * Tests: tests/eval/test_wer.c */
#include "text/words.h"

#include "core/alloc.h"
#include "hark.h"

#include <string.h>

#define WORD_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's word-start mark */

void words_free(word_time_t *w, int n)
{
    if (!w)
        return;
    for (int i = 0; i < n; i++)
        hark_free(w[i].text);
    hark_free(w);
}

int words_from_tokens(const units_t *u, units_style_t style, const int *tokens, const int *times,
                      int n, int frame_ms, word_time_t **out, int *nout, hark_err_t *err)
{
    *out = NULL;
    *nout = 0;
    if (n <= 0)
        return HARK_OK;
    word_time_t *w = hark_calloc((size_t)n, sizeof *w);
    if (!w)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int nw = 0, rc = HARK_OK;
    for (int s = 0; s < n;) {
        int e = s + 1;
        if (style == UNITS_STYLE_BPE)
            for (; e < n; e++) {
                const char *tok = units_token(u, tokens[e]);
                if (!tok) {
                    rc = err_set(err, HARK_ERR_INVALID_ARG, "token %d: id %d is not a unit", e,
                                 tokens[e]);
                    goto fail;
                }
                if (!strncmp(tok, WORD_MARK, 3))
                    break;
            }
        char *text = NULL;
        if ((rc = units_detokenize(u, style, tokens + s, e - s, &text, err)))
            goto fail;
        if (!text[0]) {
            hark_free(text);
        } else {
            w[nw].text = text;
            w[nw].start_ms = times[s] * frame_ms;
            w[nw].end_ms = (times[e - 1] + 1) * frame_ms;
            nw++;
        }
        s = e;
    }
    if (!nw) {
        hark_free(w);
        w = NULL;
    }
    *out = w;
    *nout = nw;
    return HARK_OK;
fail:
    words_free(w, nw);
    return rc;
}

int cues_build(const word_time_t *w, int n, const cue_opts_t *o, int duration_ms, cue_t *cues)
{
    int max_words = o && o->max_words > 0 ? o->max_words : 7;
    int pause = o && o->pause_ms > 0 ? o->pause_ms : 500;
    int hold = !o || !o->hold_ms ? 500 : o->hold_ms < 0 ? 0 : o->hold_ms;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        cue_t *c = nc ? &cues[nc - 1] : NULL;
        if (!c || c->count >= max_words || w[i].start_ms - w[i - 1].end_ms > pause) {
            cues[nc++] = (cue_t){i, 1, w[i].start_ms, w[i].end_ms};
            continue;
        }
        c->count++;
        if (w[i].end_ms > c->end_ms)
            c->end_ms = w[i].end_ms;
    }
    for (int k = 0; k < nc; k++) {
        int end = cues[k].end_ms + hold;
        int limit = k + 1 < nc ? cues[k + 1].start_ms : duration_ms > 0 ? duration_ms : end;
        if (end > limit)
            end = limit;
        if (end > cues[k].end_ms)
            cues[k].end_ms = end;
    }
    return nc;
}

/* WebVTT cue text may not hold a raw '&', '<' or '>' (a "<unk>" unit would read as a tag). */
static void put_text(FILE *f, const char *s, subtitle_format_t fmt)
{
    for (; *s; s++) {
        if (fmt == SUBTITLE_VTT && *s == '&')
            fputs("&amp;", f);
        else if (fmt == SUBTITLE_VTT && *s == '<')
            fputs("&lt;", f);
        else if (fmt == SUBTITLE_VTT && *s == '>')
            fputs("&gt;", f);
        else
            fputc(*s, f);
    }
}

static void put_time(FILE *f, int ms, char frac_sep)
{
    if (ms < 0)
        ms = 0;
    fprintf(f, "%02d:%02d:%02d%c%03d", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, frac_sep,
            ms % 1000);
}

int subtitle_write(FILE *f, subtitle_format_t fmt, const word_time_t *w, int n, units_style_t style,
                   const cue_opts_t *o, int duration_ms, hark_err_t *err)
{
    cue_t *cues = hark_malloc(sizeof(cue_t) * (size_t)(n ? n : 1));
    if (!cues)
        return err_set(err, HARK_ERR_NOMEM, "out of memory");
    int nc = cues_build(w, n, o, duration_ms, cues);
    char sep = fmt == SUBTITLE_SRT ? ',' : '.';
    if (fmt == SUBTITLE_VTT)
        fputs("WEBVTT\n\n", f);
    for (int k = 0; k < nc; k++) {
        if (fmt == SUBTITLE_SRT)
            fprintf(f, "%d\n", k + 1);
        put_time(f, cues[k].start_ms, sep);
        fputs(" --> ", f);
        put_time(f, cues[k].end_ms, sep);
        fputc('\n', f);
        for (int i = cues[k].first; i < cues[k].first + cues[k].count; i++) {
            if (i > cues[k].first && style == UNITS_STYLE_BPE)
                fputc(' ', f);
            put_text(f, w[i].text, fmt);
        }
        fputs("\n\n", f);
    }
    hark_free(cues);
    if (ferror(f))
        return err_set(err, HARK_ERR_IO, "cannot write the subtitles");
    return HARK_OK;
}
