/* t2_golden.c — t2_golden.h.
 * Tests: tests/model/tacotron2/test_tacotron2.c, test_tacotron2_gpu.c */
#include "model/tacotron2/t2_golden.h"

#include "test.h"

#include "core/alloc.h"
#include "hark.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const T2G_SENTENCES[3] = {
    "Printing, in the only sense with which we are at present concerned, differs from most if "
    "not from all the arts.",
    "Dr. Smith paid $12.50 for 3 books on Jan. 2nd, 1999 \xe2\x80\x94 at 4:30 p.m.!",
    "Turn left on {HH AW1 S T AH0 N} Street, said Mrs. M\xc3\xbcller; OK?"};

/* The converted golden checkpoint ("<dir>/m"), or NULL with why. */
const char *t2g_model_dir(char *why, size_t nwhy)
{
    return golden_tts_checkpoint("tacotron2", "convert_tacotron2.py",
                                 "tacotron2/checkpoint_Tacotron2_0.pt", why, nwhy);
}

double t2g_max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* ---- recorded masks ------------------------------------------------------------------------- */

void t2g_on_mask(void *user, int row, int step, int layer, uint8_t *keep, int n)
{
    t2g_masks_t *mk = user;
    const npy_array_t *a = &mk->a[mk->row_sentence[row]];
    if (step >= a->shape[0] || n != a->shape[3]) { /* beyond the recording: keep all */
        memset(keep, 1, (size_t)n);
        return;
    }
    memcpy(keep, (const uint8_t *)a->data + ((size_t)step * 2 + layer) * n, (size_t)n);
}

int t2g_masks_load(t2g_masks_t *mk)
{
    for (int s = 0; s < 3; s++) {
        char rel[128];
        snprintf(rel, sizeof rel, GOLDEN_TTS "/tacotron2/s%d/prenet_masks.npy", s);
        const char *p = test_shared(rel);
        if (!p || npy_load(p, &mk->a[s]) != HARK_OK || mk->a[s].dtype != NPY_U8 ||
            mk->a[s].ndim != 4)
            return -1;
    }
    return 0;
}

void t2g_masks_free(t2g_masks_t *mk)
{
    for (int s = 0; s < 3; s++)
        npy_free(&mk->a[s]);
}

/* ---- stage capture -------------------------------------------------------------------------- */

void t2g_on_stage(void *user, int row, const char *name, int step, const float *data, int rows,
                  int cols)
{
    t2g_caps_t *cs = user;
    if (row != cs->want_row)
        return;
    t2g_cap_t *c = NULL;
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].name, name))
            c = &cs->c[i];
    size_t sz = (size_t)rows * cols;
    if (!c) {
        if (cs->n == T2G_N_CAP)
            return;
        c = &cs->c[cs->n++];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->size = sz;
        c->data = calloc(sz * (step >= 0 ? N_STEPS : 1), sizeof(float));
    }
    if (sz != c->size || step >= N_STEPS || !c->data)
        return;
    memcpy(c->data + (size_t)(step >= 0 ? step : 0) * sz, data, sizeof(float) * sz);
    if (step + 1 > c->steps)
        c->steps = step + 1;
}

void t2g_caps_free(t2g_caps_t *cs)
{
    for (int i = 0; i < cs->n; i++)
        free(cs->c[i].data);
    cs->n = 0;
}

const t2g_cap_t *t2g_cap_find(const t2g_caps_t *cs, const char *name)
{
    for (int i = 0; i < cs->n; i++)
        if (!strcmp(cs->c[i].name, name))
            return &cs->c[i];
    return NULL;
}

/* One golden file against a capture: whole-array relative diff, and for per-step captures the
 * worst per-step relative diff. Returns the diff (INFINITY on a shape mismatch). */
double t2g_compare(int si, const char *file, const t2g_cap_t *c, int per_step)
{
    char rel[160];
    snprintf(rel, sizeof rel, "tacotron2/s%d/%s.npy", si, file);
    npy_array_t g = {0};
    if (!c || golden_tts_npy(&g, rel) != HARK_OK)
        return INFINITY;
    double e = INFINITY;
    size_t n = c->size * (per_step ? N_STEPS : 1);
    if (g.count == n && (!per_step || c->steps == N_STEPS)) {
        e = 0;
        if (per_step)
            for (int s = 0; s < N_STEPS; s++) {
                const float *gs = (const float *)g.data + (size_t)s * c->size;
                double d = test_max_abs_diff(c->data + (size_t)s * c->size, gs, c->size) /
                           fmax(t2g_max_abs(gs, c->size), 1e-30);
                e = fmax(e, d);
            }
        else
            e = test_max_abs_diff(c->data, g.data, n) / fmax(t2g_max_abs(g.data, n), 1e-30);
    }
    npy_free(&g);
    return e;
}

const t2g_check_t T2G_CHECKS[] = {
    {"embedded", "embedded", 0},
    {"encoder_out", "encoder_out", 0},
    {"processed_memory", "processed_memory", 0},
    {"prenet_out", "dec_prenet_out", 1},
    {"attention_hidden", "dec_attention_hidden", 1},
    {"attention_cell", "dec_attention_cell", 1},
    {"attention_weights", "dec_attention_weights", 1},
    {"attention_weights_cum", "dec_attention_weights_cum", 1},
    {"attention_context", "dec_attention_context", 1},
    {"decoder_hidden", "dec_decoder_hidden", 1},
    {"decoder_cell", "dec_decoder_cell", 1},
    {"mel_frame", "dec_mel_frames", 1},
    {"gate", "dec_gate", 1},
    {"mel_decoder", "mel_decoder", 0},
    {"postnet_residual", "postnet_residual", 0},
    {"mel_postnet", "mel_postnet", 0},
};

/* ids of sentence si through hark's front end, checked against the golden (exact). */
int t2g_sentence_ids(int si, tts_text_t *tt, char *why, size_t nwhy)
{
    hark_err_t err = {0};
    if (tts_text_to_ids_variant(T2G_SENTENCES[si], TTS_TEXT_DLE_TACOTRON2, tt, &err) != HARK_OK) {
        snprintf(why, nwhy, "text: %.400s", err.msg);
        return -1;
    }
    char rel[64];
    snprintf(rel, sizeof rel, "tacotron2/s%d/ids.npy", si);
    npy_array_t gi = {0};
    int ok = golden_tts_npy(&gi, rel) == HARK_OK && gi.count == (size_t)tt->n;
    for (int i = 0; ok && i < tt->n; i++)
        ok = tt->ids[i] == (int)((float *)gi.data)[i];
    if (!ok)
        snprintf(why, nwhy, "s%d: hark's %d ids differ from the golden's %zu (cleaned: %s)", si,
                 tt->n, gi.count, tt->cleaned);
    npy_free(&gi);
    return ok ? 0 : -1;
}
