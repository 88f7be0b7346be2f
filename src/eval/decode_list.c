/* decode_list.c — a thread pool recognizing a list of files in batches of similar length through
 * hark_recognize (the model's pool gives each thread a worker). Tests:
 * tests/cli/test_cli_transcribe_eval.c */
#include "eval/decode_list.h"
#include "eval/scp.h"

#include "audio/audio.h"
#include "capi/hark_internal.h"
#include "core/alloc.h"
#include "hark.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    hark_model_t *m;
    hark_asr_opts_t opts;
    decode_item_t *items;
    int n, batch;
    const int *order; /* (n) item indices, largest file first */
    decode_done_fn done;
    void *user;
    pthread_mutex_t lock;
    int next;  /* next position in order[] to hand out */
    int ndone; /* items finished */
} pool_t;

void decode_item_free(decode_item_t *it)
{
    if (!it)
        return;
    asr_result_free(&it->result);
    hark_free(it->error);
    it->error = NULL;
    it->status = HARK_OK;
}

static void item_fail(decode_item_t *it, int rc, const hark_err_t *err)
{
    it->status = rc ? rc : HARK_ERR_INTERNAL;
    it->error = hark_strdup(err->msg[0] ? err->msg : hark_status_str(it->status));
}

static void finish(pool_t *p, decode_item_t *it)
{
    pthread_mutex_lock(&p->lock);
    p->ndone++;
    if (p->done)
        p->done(p->user, it, p->ndone, p->n);
    pthread_mutex_unlock(&p->lock);
}

static void *pool_thread(void *arg)
{
    pool_t *p = arg;
    const int B = p->batch;
    audio_t *au = hark_calloc((size_t)B, sizeof *au);
    const float **pcm = hark_calloc((size_t)B, sizeof *pcm);
    size_t *len = hark_calloc((size_t)B, sizeof *len);
    int *idx = hark_calloc((size_t)B, sizeof *idx);
    const int rate = hark_model_sample_rate(p->m);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int first = p->next, count = p->n - first < B ? p->n - first : B;
        p->next += count;
        pthread_mutex_unlock(&p->lock);
        if (count <= 0)
            break;
        if (!au || !pcm || !len || !idx) { /* this thread's buffers: fail its share */
            hark_err_t e = {0};
            err_set(&e, HARK_ERR_NOMEM, "out of memory");
            for (int k = 0; k < count; k++) {
                item_fail(&p->items[p->order[first + k]], HARK_ERR_NOMEM, &e);
                finish(p, &p->items[p->order[first + k]]);
            }
            continue;
        }
        /* read the batch's audio; unreadable files fail alone */
        int m = 0;
        double longest = 0;
        for (int k = 0; k < count; k++) {
            decode_item_t *it = &p->items[p->order[first + k]];
            hark_err_t e = {0};
            audio_opts_t ao = {.target_rate = rate};
            int rc;
            if (scp_is_command(it->path)) { /* Kaldi's "command |": its output is the audio */
                void *raw = NULL;
                size_t nraw = 0;
                rc = scp_run_command(it->path, &raw, &nraw, (size_t)1 << 31, &e);
                if (!rc)
                    rc = audio_decode_memory(raw, nraw, &ao, &au[m], &e);
                hark_free(raw);
            } else {
                rc = audio_decode_file(it->path, &ao, &au[m], &e);
            }
            if (rc) {
                item_fail(it, rc, &e);
                finish(p, it);
                continue;
            }
            it->seconds = (double)au[m].n / rate;
            if (it->seconds > longest)
                longest = it->seconds;
            idx[m] = p->order[first + k];
            pcm[m] = au[m].samples;
            len[m] = au[m].n;
            m++;
        }
        hark_asr_result_t *res = NULL;
        int rc = m ? hark_recognize(p->m, pcm, len, m, rate, &p->opts, &res) : HARK_OK;
        if (!rc) {
            for (int k = 0; k < m; k++) {
                hark_asr_result_move(res, k, &p->items[idx[k]].result);
                finish(p, &p->items[idx[k]]);
            }
        } else {
            /* one by one, so that whatever went wrong stays with the utterance that caused it */
            for (int k = 0; k < m; k++) {
                decode_item_t *it = &p->items[idx[k]];
                hark_asr_result_t *r1 = NULL;
                int rc1 = hark_recognize(p->m, &pcm[k], &len[k], 1, rate, &p->opts, &r1);
                if (rc1) {
                    hark_err_t e1 = {0};
                    err_set(&e1, rc1, "%s", hark_last_error());
                    item_fail(it, rc1, &e1);
                } else {
                    hark_asr_result_move(r1, 0, &it->result);
                }
                hark_asr_result_destroy(r1);
                finish(p, it);
            }
        }
        hark_asr_result_destroy(res);
        for (int k = 0; k < m; k++)
            audio_free(&au[k]);
    }
    hark_free(au);
    hark_free(pcm);
    hark_free(len);
    hark_free(idx);
    return NULL;
}

typedef struct {
    long long size;
    int i;
} by_size_t;

static int by_size_desc(const void *a, const void *b)
{
    const by_size_t *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

int decode_list_run(hark_model_t *m, const hark_asr_opts_t *opts, decode_item_t *items, int n,
                    const decode_list_opts_t *lo, hark_err_t *err)
{
    decode_list_opts_t d = lo ? *lo : (decode_list_opts_t){0};
    if (n <= 0)
        return HARK_OK;
    int jobs = d.jobs > 0 ? d.jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1)
        jobs = 1;
    int batch = d.batch > 0 ? d.batch : 1;
    if (jobs > (n + batch - 1) / batch)
        jobs = (n + batch - 1) / batch; /* no idle threads */
    if (opts && opts->dump_dir)
        return err_set(err, HARK_ERR_INVALID_ARG, "a list is decoded without dump_dir");
    pool_t p = {.m = m,
                .opts = opts ? *opts : (hark_asr_opts_t){0},
                .items = items,
                .n = n,
                .batch = batch,
                .done = d.done,
                .user = d.user};
    by_size_t *bs = hark_malloc(sizeof *bs * (size_t)n);
    int *order = hark_malloc(sizeof(int) * (size_t)n);
    pthread_t *th = hark_calloc((size_t)jobs, sizeof *th);
    int rc = HARK_OK, started = 0;
    if (!bs || !order || !th) {
        rc = err_set(err, HARK_ERR_NOMEM, "out of memory for %d files", n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        struct stat st;
        items[i].status = HARK_OK;
        items[i].error = NULL;
        items[i].seconds = 0;
        memset(&items[i].result, 0, sizeof items[i].result);
        bs[i] = (by_size_t){stat(items[i].path, &st) ? 0 : (long long)st.st_size, i};
    }
    qsort(bs, (size_t)n, sizeof *bs, by_size_desc);
    for (int i = 0; i < n; i++)
        order[i] = bs[i].i;
    p.order = order;
    pthread_mutex_init(&p.lock, NULL);
    for (; started < jobs; started++) {
        int e = pthread_create(&th[started], NULL, pool_thread, &p);
        if (e) {
            if (!started)
                rc =
                    err_set(err, HARK_ERR_INTERNAL, "cannot start a decoding thread (error %d)", e);
            break; /* the threads already running share the whole list */
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&p.lock);
done:
    hark_free(bs);
    hark_free(order);
    hark_free(th);
    return rc;
}
