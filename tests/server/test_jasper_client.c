/* Runs tests/server/test_jasper_client.py: NVIDIA DeepLearningExamples' own Triton client,
 * triton/jasper-client.py, unmodified against a real `hark serve` with DLE's J1 golden Jasper
 * converted by tools/convert_jasper.py --triton-dle, tritonclient built from its sources by
 * tools/tritonclient_from_source.sh; its transcripts must equal `hark transcribe`'s.
 * Skips unless $HARK_DLE_SRC (a DeepLearningExamples tree: its root, PyTorch/SpeechRecognition or
 * the Jasper folder), $HARK_TRITONCLIENT_SRC (a triton-inference-server/client tree) and
 * $HARK_TRITON_COMMON_SRC (a triton-inference-server/common tree) are set, ../shared holds the J1
 * set and the audio, and /usr/bin/python3 has what the client and the converter import
 * (tools/install-deps.sh --dev). docs/serving.md, "DLE's jasper-client.py against hark". */
#include "test.h"

#include "support/golden_jasper.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CLIENT_MODULES                                                                             \
    "numpy, soundfile, pyaudio, inflect, grpc, grpc_tools.protoc, google.protobuf, packaging, "    \
    "rapidjson, gevent, geventhttpclient, requests, torch, yaml"

/* the source tree an environment variable names, or NULL with a reason */
static const char *env_tree(const char *var, const char *what, char *why, size_t nwhy)
{
    const char *v = getenv(var);
    if (!v || !*v)
        snprintf(why, nwhy, "$%s (%s) is not set", var, what);
    return v && *v ? v : NULL;
}

TEST(serve_jasper_dle_client)
{
    char why[512];
    const char *dle = env_tree("HARK_DLE_SRC", "a DeepLearningExamples tree", why, sizeof why);
    if (!dle)
        SKIP(why);
    const char *client =
        env_tree("HARK_TRITONCLIENT_SRC", "a triton-inference-server/client tree", why, sizeof why);
    if (!client)
        SKIP(why);
    const char *common = env_tree("HARK_TRITON_COMMON_SRC", "a triton-inference-server/common tree",
                                  why, sizeof why);
    if (!common)
        SKIP(why);
    /* DLE's Jasper folder: the repository root, PyTorch/SpeechRecognition or the folder itself */
    const char *forms[3] = {"%s/PyTorch/SpeechRecognition/Jasper", "%s/Jasper", "%s"};
    char jasper[PATH_MAX] = "", base[1024], probe[1100];
    for (int i = 0; i < 3 && !*jasper; i++) {
        snprintf(base, sizeof base, forms[i], dle);
        snprintf(probe, sizeof probe, "%s/triton/jasper-client.py", base);
        if (access(probe, R_OK) != 0 || !realpath(base, jasper))
            *jasper = 0;
    }
    if (!*jasper) /* the tree serves the jasper_dle tests too, which need no triton/ */
        SKIP("$HARK_DLE_SRC holds no Jasper/triton/jasper-client.py");
    if (!test_shared(GOLDEN_JASPER "/" GOLDEN_JASPER_CKPT))
        SKIP("../shared/data/" GOLDEN_JASPER " is absent");
    if (!test_shared("audio/en/wav/jfk.wav"))
        SKIP("../shared/data/audio/en/wav is absent");
    if (system("/usr/bin/python3 -c 'import " CLIENT_MODULES "' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 lacks one of " CLIENT_MODULES " (tools/install-deps.sh --dev)");
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 tests/server/test_jasper_client.py '%s' '%s' '%s' '%s' '%s' '%s'",
             test_hark_bin(), test_shared(GOLDEN_JASPER), test_shared("audio/en/wav"), jasper,
             client, common);
    int st = system(cmd);
    CHECKF(st == 0, "tests/server/test_jasper_client.py failed (status %d)", st);
}
