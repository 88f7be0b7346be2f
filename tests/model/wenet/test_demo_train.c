/* tools/train_demo.py's pieces (issue #22), through tests/model/wenet/demo_train_check.py: its
 * fbank equals hark's front end, its speed-perturbation resampler agrees with scipy's, its
 * edge-silence augmentation keeps the words, its per-utterance dither (--undithered-p) leaves a
 * 0's features undithered, its warped mel filters (--vtlp-p) put a tone where a tone alpha times
 * higher lies, a two-call CPU training run resumes, exports and converts into a model hark runs,
 * and a run started from the shipped model (--init) gives its tensors back. Skips when
 * /usr/bin/python3 lacks torch / scipy, or (training) WeNet's package is not in .ext. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#define PY "/usr/bin/python3"

static int run_check(test_ctx_t *t, const char *mode, const char *arg)
{
    (void)t;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, PY " tests/model/wenet/demo_train_check.py %s %s", mode,
             arg ? arg : "");
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define NEED_TORCH(mods)                                                                           \
    do {                                                                                           \
        if (system(PY " -c 'import " mods "' >/dev/null 2>&1") != 0)                               \
            SKIP(PY " with " mods " is absent");                                                   \
    } while (0)

TEST(demo_fbank_matches_hark_features)
{
    NEED_TORCH("torch, numpy");
    CHECK(run_check(t, "fbank", test_hark_bin()) == 0);
}

TEST(demo_speed_perturbation_matches_scipy)
{
    NEED_TORCH("torch, numpy, scipy");
    CHECK(run_check(t, "resample", NULL) == 0);
}

TEST(demo_edge_silence_keeps_the_words)
{
    NEED_TORCH("torch, numpy");
    CHECK(run_check(t, "edges", NULL) == 0);
}

TEST(demo_undithered_features_per_utterance)
{
    NEED_TORCH("torch, numpy");
    CHECK(run_check(t, "dither", NULL) == 0);
}

TEST(demo_vtlp_warps_the_mel_filters)
{
    NEED_TORCH("torch, numpy");
    CHECK(run_check(t, "vtlp", NULL) == 0);
}

TEST(demo_training_resumes_exports_and_converts)
{
    NEED_TORCH("torch, numpy, yaml, scipy");
    int rc = run_check(t, "train", test_hark_bin());
    if (rc == 77)
        SKIP("WeNet's package is not in .ext/wenet (tools/train_demo.py builds WeNet's classes)");
    CHECK(rc == 0);
}

TEST(demo_training_from_the_shipped_model)
{
    NEED_TORCH("torch, numpy, yaml, scipy");
    int rc = run_check(t, "init", test_hark_bin());
    if (rc == 77)
        SKIP("WeNet's package is not in .ext/wenet (tools/train_demo.py builds WeNet's classes)");
    CHECK(rc == 0);
}
