/* family.c — what every family shares: task names, parameter look-ups, ASR result ownership.
 * Tests: tests/model/test_family.c */
#include "model/family.h"

#include "core/alloc.h"
#include "hark.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *family_task_name(family_task_t t)
{
    switch (t) {
    case FAMILY_TASK_ASR: return "asr";
    case FAMILY_TASK_TTS: return "tts";
    case FAMILY_TASK_VAD: return "vad";
    }
    return "unknown";
}

const char *family_param(const family_params_t *params, const char *key)
{
    if (!params)
        return NULL;
    for (int i = params->n - 1; i >= 0; i--)
        if (!strcmp(params->p[i].key, key))
            return params->p[i].value;
    return NULL;
}

int family_param_int(const family_params_t *params, const char *key, long lo, long hi, int *out,
                     hark_err_t *err)
{
    const char *v = family_param(params, key);
    if (!v)
        return HARK_ERR_NOT_FOUND;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi)
        return err_set(err, HARK_ERR_INVALID_ARG, "parameter '%s' = '%s' is not an integer in [%ld, %ld]",
                       key, v, lo, hi);
    *out = (int)x;
    return HARK_OK;
}

int family_param_double(const family_params_t *params, const char *key, double *out,
                        hark_err_t *err)
{
    const char *v = family_param(params, key);
    if (!v)
        return HARK_ERR_NOT_FOUND;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || x != x)
        return err_set(err, HARK_ERR_INVALID_ARG, "parameter '%s' = '%s' is not a number", key, v);
    *out = x;
    return HARK_OK;
}

static void hyp_free(asr_hyp_t *h)
{
    hark_free(h->text);
    hark_free(h->tokens);
    hark_free(h->times_ms);
    memset(h, 0, sizeof *h);
}

void asr_result_free(asr_result_t *r)
{
    if (!r)
        return;
    hyp_free(&r->best);
    for (int i = 0; i < r->n_nbest; i++)
        hyp_free(&r->nbest[i]);
    hark_free(r->nbest);
    for (int i = 0; i < r->n_words; i++)
        hark_free(r->words[i].text);
    hark_free(r->words);
    memset(r, 0, sizeof *r);
}

void asr_result_take(asr_result_t *dst, asr_result_t *src)
{
    *dst = *src;
    memset(src, 0, sizeof *src);
}

static int hyp_copy(asr_hyp_t *d, const asr_hyp_t *s)
{
    *d = *s;
    d->text = NULL;
    d->tokens = d->times_ms = NULL;
    if (s->text && !(d->text = hark_strdup(s->text)))
        return HARK_ERR_NOMEM;
    if (s->n_tokens > 0) {
        size_t b = (size_t)s->n_tokens * sizeof(int);
        if (!(d->tokens = hark_malloc(b)) || !(d->times_ms = hark_malloc(b)))
            return HARK_ERR_NOMEM;
        memcpy(d->tokens, s->tokens, b);
        if (s->times_ms)
            memcpy(d->times_ms, s->times_ms, b);
        else
            memset(d->times_ms, 0, b);
    }
    return HARK_OK;
}

int asr_result_copy(asr_result_t *dst, const asr_result_t *src)
{
    memset(dst, 0, sizeof *dst);
    asr_result_t r = *src;
    r.nbest = NULL;
    r.words = NULL;
    r.n_nbest = r.n_words = 0;
    memset(&r.best, 0, sizeof r.best);
    if (hyp_copy(&r.best, &src->best))
        goto nomem;
    if (src->n_nbest > 0) {
        if (!(r.nbest = hark_calloc((size_t)src->n_nbest, sizeof *r.nbest)))
            goto nomem;
        for (; r.n_nbest < src->n_nbest; r.n_nbest++)
            if (hyp_copy(&r.nbest[r.n_nbest], &src->nbest[r.n_nbest])) {
                r.n_nbest++;
                goto nomem;
            }
    }
    if (src->n_words > 0) {
        if (!(r.words = hark_calloc((size_t)src->n_words, sizeof *r.words)))
            goto nomem;
        for (; r.n_words < src->n_words; r.n_words++) {
            r.words[r.n_words] = src->words[r.n_words];
            if (!(r.words[r.n_words].text = hark_strdup(src->words[r.n_words].text))) {
                r.n_words++;
                goto nomem;
            }
        }
    }
    *dst = r;
    return HARK_OK;
nomem:
    asr_result_free(&r);
    return HARK_ERR_NOMEM;
}
