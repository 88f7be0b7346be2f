/* Tests for src/model/tacotron2/ and tools/convert_tacotron2.py against DLE Tacotron2's goldens
 * (../shared/data/golden/tts/tacotron2, README there): for each of the 3 sentences, the ids from
 * hark's text front end (DLE's Tacotron2 variant), then every stage (embedding, encoder,
 * processed memory), every one of the 40 decoder steps (prenet output, both LSTM cells,
 * attention weights and their sum, context, mel frame, gate) with the recorded prenet masks,
 * the mel before and after the postnet and the alignments; a batch of the three equal to the
 * single runs; the seeded generator; bad model files and input.
 * Tolerance: max |diff| <= 1e-4 · max |golden| per stage (and per decoder step); ids exact. */
#include "test.h"

#include "core/alloc.h"
#include "hark.h"
#include "model/tacotron2/tacotron2.h"
#include "model/tacotron2/t2_golden.h"
#include "support/golden_model.h"
#include "support/golden_tts.h"
#include "text/tts_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

TEST(tacotron2_ids)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    for (int si = 0; si < 3; si++) {
        tts_text_t tt = {0};
        char why[512];
        int rc = t2g_sentence_ids(si, &tt, why, sizeof why);
        tts_text_free(&tt);
        CHECKF(rc == 0, "%s", why);
    }
}

TEST(tacotron2_stages_every_step)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    tacotron2_model_t *m = NULL;
    LOAD_MODEL(m);
    t2g_masks_t mk = {0};
    int row_sentence[1];
    mk.row_sentence = row_sentence;
    CHECK(t2g_masks_load(&mk) == 0);
    int bad = 0;
    char first[400] = "";
    for (int si = 0; si < 3; si++) {
        tts_text_t tt = {0};
        char why[512];
        if (t2g_sentence_ids(si, &tt, why, sizeof why) != 0) {
            tts_text_free(&tt);
            t2g_masks_free(&mk);
            tacotron2_destroy(m);
            CHECKF(0, "%s", why);
        }
        row_sentence[0] = si;
        t2g_caps_t cs = {.want_row = 0};
        tacotron2_opts_t o = {
            .mask = t2g_on_mask, .mask_user = &mk, .stage = t2g_on_stage, .stage_user = &cs};
        const int *idp = tt.ids;
        tacotron2_result_t r = {0};
        hark_err_t err = {0};
        int rc = tacotron2_infer(m, &idp, &tt.n, 1, &o, &r, &err);
        if (rc != HARK_OK) {
            bad++;
            snprintf(first, sizeof first, "s%d: infer: %.300s", si, err.msg);
        } else {
            for (size_t k = 0; k < sizeof T2G_CHECKS / sizeof T2G_CHECKS[0]; k++) {
                double e =
                    t2g_compare(si, T2G_CHECKS[k].file, t2g_cap_find(&cs, T2G_CHECKS[k].stage),
                                T2G_CHECKS[k].per_step);
                printf("    s%d/%-26s max rel diff %.3g%s\n", si, T2G_CHECKS[k].file, e,
                       T2G_CHECKS[k].per_step ? " (worst step)" : "");
                if (!(e <= TOL_REL) && !bad++)
                    snprintf(first, sizeof first, "s%d/%s: %.3g", si, T2G_CHECKS[k].file, e);
            }
            /* infer()'s own outputs: the mel and the alignments (1, 40, N) */
            npy_array_t g = {0};
            char rel[96];
            snprintf(rel, sizeof rel, "tacotron2/s%d/alignments.npy", si);
            double e = INFINITY;
            if (golden_tts_npy(&g, rel) == HARK_OK && g.count == (size_t)r.n_frames * r.n_ids)
                e = test_max_abs_diff(r.alignments, g.data, g.count) / t2g_max_abs(g.data, g.count);
            npy_free(&g);
            snprintf(rel, sizeof rel, "tacotron2/s%d/mel_postnet.npy", si);
            double e2 = INFINITY;
            if (golden_tts_npy(&g, rel) == HARK_OK && g.count == (size_t)r.n_frames * 80)
                e2 = test_max_abs_diff(r.mel, g.data, g.count) / t2g_max_abs(g.data, g.count);
            npy_free(&g);
            printf("    s%d/alignments, mel (result) max rel diff %.3g, %.3g\n", si, e, e2);
            if (!(e <= TOL_REL && e2 <= TOL_REL) && !bad++)
                snprintf(first, sizeof first, "s%d: result alignments %.3g / mel %.3g", si, e, e2);
            if (r.n_frames != N_STEPS && !bad++)
                snprintf(first, sizeof first, "s%d: %d steps (want %d)", si, r.n_frames, N_STEPS);
        }
        tacotron2_result_free(&r);
        t2g_caps_free(&cs);
        tts_text_free(&tt);
    }
    t2g_masks_free(&mk);
    tacotron2_destroy(m);
    CHECKF(bad == 0, "%d checks over tolerance; first %s", bad, first);
}

/* The three sentences in one batch (rows of different lengths): each row's mel is its single
 * run's (the recorded masks follow the row's sentence, not its position). */
TEST(tacotron2_batch_rows_independent)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    tacotron2_model_t *m = NULL;
    LOAD_MODEL(m);
    t2g_masks_t mk = {0};
    int row_sentence[3] = {2, 0, 1};
    mk.row_sentence = row_sentence;
    CHECK(t2g_masks_load(&mk) == 0);
    tts_text_t tt[3] = {{0}};
    const int *ids[3];
    int n[3];
    char why[512];
    int ok = 1;
    for (int b = 0; b < 3 && ok; b++) {
        ok = t2g_sentence_ids(row_sentence[b], &tt[b], why, sizeof why) == 0;
        ids[b] = tt[b].ids;
        n[b] = tt[b].n;
    }
    tacotron2_result_t r[3] = {{0}};
    hark_err_t err = {0};
    tacotron2_opts_t o = {.mask = t2g_on_mask, .mask_user = &mk};
    int rc = ok ? tacotron2_infer(m, ids, n, 3, &o, r, &err) : -1;
    double worst = 0;
    for (int b = 0; b < 3 && rc == HARK_OK; b++) {
        char rel[96];
        snprintf(rel, sizeof rel, "tacotron2/s%d/mel_postnet.npy", row_sentence[b]);
        npy_array_t g = {0};
        double e = INFINITY;
        if (golden_tts_npy(&g, rel) == HARK_OK && g.count == (size_t)r[b].n_frames * 80)
            e = test_max_abs_diff(r[b].mel, g.data, g.count) / t2g_max_abs(g.data, g.count);
        npy_free(&g);
        worst = fmax(worst, e);
    }
    for (int b = 0; b < 3; b++) {
        tacotron2_result_free(&r[b]);
        tts_text_free(&tt[b]);
    }
    t2g_masks_free(&mk);
    tacotron2_destroy(m);
    CHECKF(ok, "%s", why);
    CHECKF(rc == HARK_OK, "infer: %s", err.msg);
    printf("    batch of 3: worst mel rel diff %.3g\n", worst);
    CHECKF(worst <= TOL_REL, "batched mel differs from the golden: %.3g", worst);
}

/* Early stopping: with a gate threshold that fires, each row stops on its own step, and a
 * row's result does not depend on the rows beside it; the seeded generator is reproducible. */
TEST(tacotron2_early_stop_and_seed)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    tacotron2_model_t *m = NULL;
    LOAD_MODEL(m);
    tts_text_t tt[2] = {{0}};
    hark_err_t err = {0};
    CHECK(tts_text_to_ids_variant("Hello there.", TTS_TEXT_DLE_TACOTRON2, &tt[0], &err) == 0);
    CHECK(tts_text_to_ids_variant("A longer sentence, with a comma.", TTS_TEXT_DLE_TACOTRON2,
                                  &tt[1], &err) == 0);
    const int *ids[2] = {tt[0].ids, tt[1].ids};
    int n[2] = {tt[0].n, tt[1].n};
    uint64_t seeds[2] = {7, 11};
    tacotron2_opts_t o = {.seeds = seeds, .max_decoder_steps = 60, .early_stopping = 1};
    tacotron2_result_t rb[2] = {{0}}, r0 = {0}, r1 = {0}, again = {0};
    int rc = tacotron2_infer(m, ids, n, 2, &o, rb, &err);
    tacotron2_opts_t o0 = o, o1 = o;
    o0.seeds = &seeds[0];
    o1.seeds = &seeds[1];
    if (!rc)
        rc = tacotron2_infer(m, &ids[0], &n[0], 1, &o0, &r0, &err);
    if (!rc)
        rc = tacotron2_infer(m, &ids[1], &n[1], 1, &o1, &r1, &err);
    if (!rc)
        rc = tacotron2_infer(m, &ids[1], &n[1], 1, &o1, &again, &err);
    int same_len = !rc && rb[0].n_frames == r0.n_frames && rb[1].n_frames == r1.n_frames &&
                   again.n_frames == r1.n_frames;
    double d0 = same_len ? test_max_abs_diff(rb[0].mel, r0.mel, (size_t)r0.n_frames * 80) : 1;
    double d1 = same_len ? test_max_abs_diff(rb[1].mel, r1.mel, (size_t)r1.n_frames * 80) : 1;
    double dr = same_len ? test_max_abs_diff(again.mel, r1.mel, (size_t)r1.n_frames * 80) : 1;
    int f0 = r0.n_frames, f1 = r1.n_frames, l0 = r0.mel_length;
    for (int b = 0; b < 2; b++) {
        tacotron2_result_free(&rb[b]);
        tts_text_free(&tt[b]);
    }
    tacotron2_result_free(&r0);
    tacotron2_result_free(&r1);
    tacotron2_result_free(&again);
    tacotron2_destroy(m);
    CHECKF(rc == HARK_OK, "infer: %s", err.msg);
    printf("    frames %d / %d (mel_length %d); batch vs single %.3g / %.3g; rerun %.3g\n", f0, f1,
           l0, d0, d1, dr);
    CHECK(same_len);
    CHECK(f0 >= 1 && f0 <= 60 && f1 >= 1 && f1 <= 60);
    CHECK(l0 == f0 || l0 == f0 - 1);
    CHECK(dr == 0);
    CHECKF(d0 <= 1e-5 && d1 <= 1e-5, "batch rows differ from single runs: %.3g / %.3g", d0, d1);
}

TEST(tacotron2_bad_input_and_files)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    tacotron2_model_t *m = NULL;
    LOAD_MODEL(m);
    hark_err_t err = {0};
    int bad_id = 148, n1 = 1, n0 = 0;
    const int *ids = &bad_id;
    tacotron2_result_t r = {0};
    CHECK_EQ_INT(tacotron2_infer(m, &ids, &n1, 1, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "148") != NULL);
    CHECK_EQ_INT(tacotron2_infer(m, &ids, &n0, 1, NULL, &r, &err), HARK_ERR_INVALID_ARG);
    CHECK(r.mel == NULL);
    tacotron2_destroy(m);

    /* a missing directory, a truncated safetensors file, a model.json of another family */
    CHECK(tacotron2_load("/nonexistent/t2", 1, &m, &err) != HARK_OK);
    CHECK(m == NULL);
    char why[512];
    const char *dir = t2g_model_dir(why, sizeof why);
    CHECK(dir != NULL);
    const char *tmp = test_tmpdir(t);
    char cmd[2400], p[700];
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/m' '%s/t2' && truncate -s 100000 '%s/t2/1/model.safetensors'", dir, tmp,
             tmp);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/t2", tmp);
    CHECK_EQ_INT(tacotron2_load(p, 1, &m, &err), HARK_ERR_FORMAT);
    printf("    truncated: %s\n", err.msg);
    snprintf(cmd, sizeof cmd,
             "cp '%s/m/1/model.safetensors' '%s/t2/1/' && sed -i 's/\"tacotron2\"/\"waveglow\"/' "
             "'%s/t2/1/model.json'",
             dir, tmp, tmp);
    CHECK(system(cmd) == 0);
    CHECK_EQ_INT(tacotron2_load(p, 1, &m, &err), HARK_ERR_FORMAT);
    CHECK(strstr(err.msg, "family") != NULL);
    snprintf(cmd, sizeof cmd,
             "sed -i 's/\"waveglow\"/\"tacotron2\"/; s/\"prenet_dim\": 128/\"prenet_dim\": 96/' "
             "'%s/t2/1/model.json'",
             tmp);
    CHECK(system(cmd) == 0);
    CHECK_EQ_INT(tacotron2_load(p, 1, &m, &err), HARK_ERR_FORMAT);
    printf("    wrong shape: %s\n", err.msg);
    CHECK(strstr(err.msg, "prenet") != NULL);
    CHECK(m == NULL);
}

/* The converter refuses a checkpoint with a tensor missing, naming it. */
TEST(tacotron2_convert_rejects_missing_tensor)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with torch is missing");
    const char *tmp = test_tmpdir(t);
    const char *ck = test_shared(GOLDEN_TTS "/tacotron2/checkpoint_Tacotron2_0.pt");
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import torch; c = torch.load('%s'); "
             "del c['state_dict']['decoder.gate_layer.linear_layer.bias']; "
             "torch.save(c, '%s/bad.pt')\" && /usr/bin/python3 tools/convert_tacotron2.py "
             "--checkpoint '%s/bad.pt' --output '%s/out' >'%s/log' 2>&1",
             ck, tmp, tmp, tmp, tmp);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "grep -q 'gate_layer.linear_layer.bias: missing' '%s/log'", tmp);
    CHECK(system(cmd) == 0);
    char p[600];
    snprintf(p, sizeof p, "%s/out", tmp);
    struct stat st;
    CHECK(stat(p, &st) != 0); /* nothing half-written */
}

/* Every row stops on its own gate: with gate_threshold 0.4918 and early stopping, DLE's
 * recorded gates (sigmoid 0.47-0.49) fire first at step 11 (s1) and 15 (s2), never for s0 (40
 * steps) — 2.9e-4 away from the threshold at the closest. In one batch each row runs exactly
 * its own steps, its alignments equal the golden's over them, and its mel equals its single run. */
TEST(tacotron2_batch_rows_stop_on_own_gate)
{
    NEED_SHARED(GOLDEN_TTS "/tacotron2");
    char why[512];
    const char *dir = t2g_model_dir(why, sizeof why);
    if (!dir) {
        if (strstr(why, "python3"))
            SKIP(why);
        CHECKF(0, "%s", why);
    }
    const char *tmp = test_tmpdir(t);
    char cmd[2400], p[700];
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/m' '%s/t2' && sed -i 's/\"gate_threshold\": 0.5/\"gate_threshold\": "
             "0.4918/; s/\"decoder_no_early_stopping\": true/\"decoder_no_early_stopping\": "
             "false/' '%s/t2/1/model.json' && grep -q '0.4918' '%s/t2/1/model.json' && grep -q "
             "'stopping\": false' '%s/t2/1/model.json'",
             dir, tmp, tmp, tmp, tmp);
    CHECK(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/t2", tmp);
    tacotron2_model_t *m = NULL;
    hark_err_t err = {0};
    CHECKF(tacotron2_load(p, 1, &m, &err) == HARK_OK, "%s", err.msg);
    t2g_masks_t mk = {0};
    int row_sentence[3] = {0, 1, 2};
    mk.row_sentence = row_sentence;
    CHECK(t2g_masks_load(&mk) == 0);
    tts_text_t tt[3] = {{0}};
    const int *ids[3];
    int n[3], ok = 1;
    for (int b = 0; b < 3 && ok; b++) {
        ok = t2g_sentence_ids(b, &tt[b], why, sizeof why) == 0;
        ids[b] = tt[b].ids;
        n[b] = tt[b].n;
    }
    tacotron2_opts_t o = {.mask = t2g_on_mask, .mask_user = &mk};
    tacotron2_result_t r[3] = {{0}}, single[3] = {{0}};
    int rc = ok ? tacotron2_infer(m, ids, n, 3, &o, r, &err) : -1;
    int frames[3] = {0}, lens[3] = {0};
    double ea = 0, es = 0;
    for (int b = 0; b < 3 && rc == HARK_OK; b++) {
        frames[b] = r[b].n_frames;
        lens[b] = r[b].mel_length;
        npy_array_t g = {0};
        char rel[96];
        snprintf(rel, sizeof rel, "tacotron2/s%d/alignments.npy", b);
        if (golden_tts_npy(&g, rel) == HARK_OK && g.count == (size_t)N_STEPS * r[b].n_ids) {
            for (int s = 0; s < r[b].n_frames; s++) {
                const float *gs = (const float *)g.data + (size_t)s * r[b].n_ids;
                ea = fmax(ea, test_max_abs_diff(r[b].alignments + (size_t)s * r[b].n_ids, gs,
                                                (size_t)r[b].n_ids) /
                                  t2g_max_abs(gs, (size_t)r[b].n_ids));
            }
        } else
            ea = INFINITY;
        npy_free(&g);
        row_sentence[0] = b; /* the single run reads sentence b's masks as its row 0 */
        rc = tacotron2_infer(m, &ids[b], &n[b], 1, &o, &single[b], &err);
        row_sentence[0] = 0;
        if (!rc && single[b].n_frames == r[b].n_frames)
            es = fmax(es, test_max_abs_diff(single[b].mel, r[b].mel, (size_t)r[b].n_frames * 80));
        else
            es = INFINITY;
    }
    for (int b = 0; b < 3; b++) {
        tacotron2_result_free(&r[b]);
        tacotron2_result_free(&single[b]);
        tts_text_free(&tt[b]);
    }
    t2g_masks_free(&mk);
    tacotron2_destroy(m);
    CHECKF(ok, "%s", why);
    CHECKF(rc == HARK_OK, "infer: %s", err.msg);
    printf("    steps %d / %d / %d, mel_lengths %d / %d / %d; alignments (worst step) %.3g; "
           "batch vs single %.3g\n",
           frames[0], frames[1], frames[2], lens[0], lens[1], lens[2], ea, es);
    CHECK(frames[0] == 40 && frames[1] == 12 && frames[2] == 16);
    CHECK(lens[0] == 40 && lens[1] == 11 && lens[2] == 15);
    CHECK(ea <= TOL_REL);
    CHECK(es <= 1e-5);
}
