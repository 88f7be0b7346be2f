/* t2_golden.h — shared by the Tacotron 2 tests (CPU and GPU): DLE's three golden sentences, the
 * converted golden checkpoint, the recorded prenet masks, stage capture and the per-stage
 * comparison with the goldens (tolerance: max |diff| <= T2G_TOL_REL · max |golden|).
 * Tests: tests/model/tacotron2/test_tacotron2.c, test_tacotron2_gpu.c */
#ifndef HARK_TESTS_T2_GOLDEN_H
#define HARK_TESTS_T2_GOLDEN_H

#include "support/golden_model.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <stddef.h>
#include <stdint.h>

#define TOL_REL 1e-4
#define N_STEPS 40

extern const char *const T2G_SENTENCES[3];

/* The converted golden checkpoint ("<dir>/m"), or NULL with why. */
const char *t2g_model_dir(char *why, size_t nwhy);

#define LOAD_MODEL(m)                                                                              \
    do {                                                                                           \
        char why_[512];                                                                            \
        const char *dir_ = t2g_model_dir(why_, sizeof why_);                                       \
        if (!dir_) {                                                                               \
            if (!test_shared(GOLDEN_TTS))                                                          \
                SKIP(why_);                                                                        \
            if (strstr(why_, "python3"))                                                           \
                SKIP(why_);                                                                        \
            CHECKF(0, "conversion: %s", why_);                                                     \
        }                                                                                          \
        char p_[600];                                                                              \
        snprintf(p_, sizeof p_, "%s/m", dir_);                                                     \
        hark_err_t e_ = {0};                                                                       \
        CHECKF(tacotron2_load(p_, 1, &m, &e_) == HARK_OK, "load: %s", e_.msg);                     \
    } while (0)

double t2g_max_abs(const float *a, size_t n);

/* ---- recorded masks ---- */
typedef struct {
    npy_array_t a[3]; /* prenet_masks (40, 2, 1, P) uint8 of each sentence */
    const int *row_sentence;
} t2g_masks_t;
void t2g_on_mask(void *user, int row, int step, int layer, uint8_t *keep, int n);
int t2g_masks_load(t2g_masks_t *mk);
void t2g_masks_free(t2g_masks_t *mk);

/* ---- stage capture ---- */
#define T2G_N_CAP 24
typedef struct {
    char name[40];
    float *data; /* per-step names: (N_STEPS, size); others: size */
    size_t size;
    int steps;
} t2g_cap_t;

typedef struct {
    t2g_cap_t c[T2G_N_CAP];
    int n;
    int want_row;
} t2g_caps_t;
void t2g_on_stage(void *user, int row, const char *name, int step, const float *data, int rows,
                  int cols);
void t2g_caps_free(t2g_caps_t *cs);
const t2g_cap_t *t2g_cap_find(const t2g_caps_t *cs, const char *name);
/* One golden file against a capture: whole-array relative diff, and for per-step captures the
 * worst per-step relative diff. Returns the diff (INFINITY on a shape mismatch). */
double t2g_compare(int si, const char *file, const t2g_cap_t *c, int per_step);

typedef struct {
    const char *stage, *file;
    int per_step;
} t2g_check_t;
extern const t2g_check_t T2G_CHECKS[16];

/* ids of sentence si through hark's front end, checked against the golden (exact). */
int t2g_sentence_ids(int si, tts_text_t *tt, char *why, size_t nwhy);

#endif
