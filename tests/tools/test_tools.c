/* Tests for the set-up and build tooling (issue 23): the tools/ Python programs runnable as the
 * docs call them, tools/install-deps.sh's package sets, the Makefile's format-check,
 * bench/conformer.sh, bench/icefall.sh and bench/fuzz.sh refusing clearly what they cannot do,
 * bench/wenet_peer.py's batched streaming step against WeNet's forward_chunk, bench/icefall_peer.py
 * timing icefall's own searches and exporting a model hark loads (issue 17). Run from the
 * repository root. */
#include "test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every tools/X.py that is a program (it has a #! line) runs as `tools/X.py`: executable, and
 * started by the python3 of PATH, so that pyneed.py can say which one to use when it is wrong. */
TEST(tools_python_scripts_executable)
{
    DIR *d = opendir("tools");
    CHECK(d != NULL);
    struct dirent *e;
    int programs = 0;
    char bad[2048] = "";
    size_t nb = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".py"))
            continue;
        char path[512], first[256] = "";
        snprintf(path, sizeof path, "tools/%s", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f || !fgets(first, sizeof first, f))
            first[0] = 0;
        if (f)
            fclose(f);
        if (strncmp(first, "#!", 2))
            continue; /* a module (hark_entry.py, pyneed.py): imported, never run */
        programs++;
        struct stat st;
        int ok = stat(path, &st) == 0 && (st.st_mode & S_IXUSR) && (st.st_mode & S_IXOTH) &&
                 !strcmp(first, "#!/usr/bin/env python3\n");
        if (!ok)
            nb +=
                (size_t)snprintf(bad + nb, nb < sizeof bad ? sizeof bad - nb : 0, " %s", e->d_name);
        /* and it loads pyneed before anything outside the standard library */
        char cmd[1024], out[256];
        snprintf(cmd, sizeof cmd, "grep -q '^import pyneed' %s", path);
        if (test_run_cmd(t, cmd, out, sizeof out) != 0)
            nb += (size_t)snprintf(bad + nb, nb < sizeof bad ? sizeof bad - nb : 0,
                                   " %s(no pyneed)", e->d_name);
    }
    closedir(d);
    CHECK(programs >= 10);
    CHECKF(!bad[0], "not `#!/usr/bin/env python3` + chmod +x + pyneed:%s", bad);
}

/* A python3 without numpy (a fake numpy that fails to import, first on PYTHONPATH): the tool
 * says which python3 and which package, instead of a ModuleNotFoundError traceback. */
TEST(tools_python_missing_module_message)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        SKIP("/usr/bin/python3 is absent");
    const char *tmp = test_tmpdir(t);
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s/numpy", tmp);
    CHECK(mkdir(cmd, 0755) == 0);
    snprintf(cmd, sizeof cmd, "%s/numpy/__init__.py", tmp);
    FILE *f = fopen(cmd, "w");
    CHECK(f != NULL);
    fputs("raise ModuleNotFoundError('No module named numpy', name='numpy')\n", f);
    fclose(f);
    static const char *const tools[] = {"convert_wenet.py", "convert_fastspeech.py",
                                        "convert_hifigan.py", "ref_features.py"};
    /* is the python3 of PATH Debian's? */
    char which[1024] = "";
    test_run_cmd(t, "readlink -f \"$(command -v python3)\"", which, sizeof which);
    int debian = !strcmp(which, "/usr/bin/python3\n") || !strncmp(which, "/usr/bin/python3.", 17);
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        /* as the docs call it: tools/X.py, through its #! line */
        snprintf(cmd, sizeof cmd, "PYTHONPATH=%s tools/%s --help", tmp, tools[i]);
        int rc = test_run_cmd(t, cmd, out, sizeof out);
        CHECKF(rc == 1, "%s: exit %d: %s", tools[i], rc, out);
        CHECKF(!strstr(out, "Traceback"), "%s: %s", tools[i], out);
        CHECKF(strstr(out, "'numpy'") && strstr(out, "python3-numpy") &&
                   strstr(out, "install-deps.sh --dev"),
               "%s: %s", tools[i], out);
        if (!debian) {
            char want[256];
            snprintf(want, sizeof want, "/usr/bin/python3 tools/%s", tools[i]);
            CHECKF(strstr(out, want), "%s: not told to use Debian's python3: %s", tools[i], out);
        }
        /* run by Debian's python3: which package to install */
        snprintf(cmd, sizeof cmd, "PYTHONPATH=%s /usr/bin/python3 tools/%s --help", tmp, tools[i]);
        rc = test_run_cmd(t, cmd, out, sizeof out);
        CHECKF(rc == 1 && !strstr(out, "Traceback") && strstr(out, "install python3-numpy"),
               "%s: exit %d: %s", tools[i], rc, out);
    }
    /* the same message for a module imported late, inside a function, goes through the hook */
    char cwd[1024];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(cmd, sizeof cmd,
             "cd %s && /usr/bin/python3 -c 'import sys; sys.argv=[\"x.py\"]; "
             "sys.path.insert(0, \"%s/tools\"); import pyneed; import torch_absent_module'",
             tmp, cwd);
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 1 && strstr(out, "x.py: Python module 'torch_absent_module' is missing"),
           "exit %d: %s", rc, out);
}

/* --runtime ⊂ --build ⊂ --dev; running hark needs no compiler, header, Python or browser; the
 * default is --dev (what CI and `make test` need); an unknown option is refused. */
TEST(install_deps_sets)
{
    char cmd[512], rt[4096], bd[4096], dv[8192], def[8192];
    CHECK(test_run_cmd(t, "bash tools/install-deps.sh --runtime --print", rt, sizeof rt) == 0);
    CHECK(test_run_cmd(t, "bash tools/install-deps.sh --build --print", bd, sizeof bd) == 0);
    CHECK(test_run_cmd(t, "bash tools/install-deps.sh --dev --print", dv, sizeof dv) == 0);
    CHECK(test_run_cmd(t, "bash tools/install-deps.sh --print", def, sizeof def) == 0);
    CHECKF(!strcmp(dv, def), "default is not --dev:\n%s", def);
    static const char *const not_runtime[] = {"-dev\n", "build-essential", "python3", "torch",
                                              "clang",  "cppcheck",        "chromium"};
    for (size_t i = 0; i < sizeof not_runtime / sizeof not_runtime[0]; i++)
        CHECKF(!strstr(rt, not_runtime[i]), "--runtime has %s:\n%s", not_runtime[i], rt);
    CHECKF(strstr(bd, "build-essential\n") && strstr(bd, "libuv1-dev\n") &&
               strstr(bd, "protobuf-c-compiler\n") && !strstr(bd, "torch") && !strstr(bd, "clang"),
           "%s", bd);
    CHECKF(strstr(dv, "python3-torch\n") && strstr(dv, "clang-format\n") &&
               strstr(dv, "cppcheck\n") && strstr(dv, "chromium\n") &&
               strstr(dv, "python3-grpcio\n"),
           "%s", dv);
    /* every package of a smaller set is in the larger one */
    char *save = NULL, *copy = strdup(bd);
    for (char *p = strtok_r(rt, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
        char line[128];
        snprintf(line, sizeof line, "\n%s\n", p);
        char wrapped[4100];
        snprintf(wrapped, sizeof wrapped, "\n%s", copy);
        CHECKF(strstr(wrapped, line), "%s is in --runtime, not in --build", p);
    }
    free(copy);
    save = NULL;
    for (char *p = strtok_r(bd, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
        char line[128], wrapped[8200];
        snprintf(line, sizeof line, "\n%s\n", p);
        snprintf(wrapped, sizeof wrapped, "\n%s", dv);
        CHECKF(strstr(wrapped, line), "%s is in --build, not in --dev", p);
    }
    /* the names exist in the archive (when apt's lists are there to tell) */
    if (access("/usr/bin/apt-cache", X_OK) == 0) {
        snprintf(cmd, sizeof cmd,
                 "apt-cache show --no-all-versions "
                 "$(bash tools/install-deps.sh --print) >/dev/null");
        int st = test_run_cmd(t, cmd, def, sizeof def);
        CHECKF(st == 0 && !strstr(def, "Unable to locate"), "exit %d: %s", st, def);
    }
    /* neither root nor sudo: told to run it as root, before anything runs (as root it calls
     * apt-get itself, with sudo otherwise: README's command works verbatim either way) */
    if (geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0 &&
        test_run_cmd(t, "command -v sudo", def, sizeof def) != 0) {
        int st = test_run_cmd(t,
                              "setpriv --reuid=65534 --regid=65534 --clear-groups bash "
                              "tools/install-deps.sh --runtime",
                              def, sizeof def);
        CHECKF(st == 1 && strstr(def, "not root and sudo is absent: run it as root"), "exit %d: %s",
               st, def);
    }
    int rc = test_run_cmd(t, "bash tools/install-deps.sh --gpu", def, sizeof def);
    CHECKF(rc == 2 && strstr(def, "unknown option '--gpu'") &&
               strstr(def, "--runtime|--build|--dev"),
           "exit %d: %s", rc, def);
}

/* `make format-check`: clang-format --dry-run -Werror over the sources `make format` rewrites,
 * generated protobuf-c code left out; a file off the style fails it, by name. */
TEST(make_format_check)
{
    char out[65536];
    if (access("Makefile", R_OK) != 0)
        SKIP("not run from the repository root");
    CHECK(test_run_cmd(t, "make -s -n format-check", out, sizeof out) == 0);
    CHECKF(strstr(out, "--dry-run -Werror") && strstr(out, "src/core/log.c") &&
               strstr(out, "include/hark.h") && strstr(out, "tests/runner.c") &&
               strstr(out, "bench/bench_features.c") && !strstr(out, "pb-c"),
           "%s", out);
    if (test_run_cmd(t, "command -v clang-format", out, sizeof out) != 0)
        SKIP("clang-format is absent (tools/install-deps.sh --dev installs it)");
    /* the rule itself, on a folder holding one formatted and one unformatted file */
    const char *tmp = test_tmpdir(t);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cp .clang-format %s/ && printf 'int f(void)\\n{\\n    return 0;\\n}\\n' > %s/good.c "
             "&& printf 'int  g( void ){return 1;}\\n' > %s/bad.c && make -s format-check "
             "FORMAT_SRCS='%s/good.c'",
             tmp, tmp, tmp, tmp);
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 0, "exit %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "make -s format-check FORMAT_SRCS='%s/good.c %s/bad.c'", tmp, tmp);
    rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc != 0 && strstr(out, "bad.c") && !strstr(out, "good.c:"), "exit %d: %s", rc, out);
}

/* bench/conformer.sh without WeNet's sources says how to fill .ext/ (and runs nothing). */
TEST(bench_conformer_without_wenet)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "WENET_EXT=%s/ext bash bench/conformer.sh cpu 1", test_tmpdir(t));
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "git clone") && strstr(out, "wenet-e2e/wenet") &&
               strstr(out, "pytorch-peer/shims"),
           "exit %d: %s", rc, out);
}

/* bench/wenet_peer.py's batched streaming step (WeNet's own modules, B streams' caches stacked
 * on the batch dimension) gives every stream what WeNet's forward_chunk gives it alone: 3 streams
 * of different features, a small generated encoder on the CPU, every chunk's encoder output and
 * CTC log-probs and the last caches within 2e-5 (FP32), with all left context and with 2 left
 * chunks. Skips without WeNet's package and the shims in .ext/ (WENET_EXT names another folder)
 * or without /usr/bin/python3's torch. */
TEST(bench_wenet_peer_batched_chunk_matches_forward_chunk)
{
    const char *ext = getenv("WENET_EXT") ? getenv("WENET_EXT") : ".ext";
    char path[512];
    snprintf(path, sizeof path, "%s/wenet/__init__.py", ext);
    if (access(path, R_OK) != 0)
        SKIP("WeNet's package is not in .ext/wenet (bench/conformer.sh says how to fill .ext/)");
    snprintf(path, sizeof path, "%s/shims", ext);
    if (access(path, R_OK) != 0)
        SKIP("the import shims are not in .ext/shims (bench/conformer.sh says how to fill it)");
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 with torch is absent");
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 bench/wenet_peer.py chunk --check --small --device cpu "
             "--seconds 2.5 --threads 1 --wenet %s --shims %s/shims",
             ext, ext);
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "ok: largest difference") && strstr(out, "\"left_chunks\": -1") &&
               strstr(out, "\"left_chunks\": 2"),
           "exit %d: %s", rc, out);
}

/* bench/icefall.sh without icefall's sources says how to fill .ext/ (and runs nothing). */
TEST(bench_icefall_without_sources)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "ICEFALL_EXT=%s/ext bash bench/icefall.sh cpu 1", test_tmpdir(t));
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 2 && strstr(out, "bench/icefall.sh --prepare-ext") && strstr(out, "icefall-shims"),
           "exit %d: %s", rc, out);
}

/* Why bench/icefall_peer.py cannot run here (into why), or 0 when it can: icefall's files and
 * the shims in ICEFALL_EXT (default .ext; bench/icefall.sh --prepare-ext fills it) and
 * /usr/bin/python3's torch. */
static int icefall_peer_missing(char *why, size_t n, const char **ext)
{
    *ext = getenv("ICEFALL_EXT") ? getenv("ICEFALL_EXT") : ".ext";
    char path[512];
    snprintf(path, sizeof path,
             "%s/icefall/egs/librispeech/ASR/pruned_transducer_stateless3/train.py", *ext);
    if (access(path, R_OK) != 0) {
        snprintf(why, n, "icefall's sources are not in %s/icefall (bench/icefall.sh --prepare-ext)",
                 *ext);
        return 1;
    }
    snprintf(path, sizeof path, "%s/icefall-shims/icefall_shims.py", *ext);
    if (access(path, R_OK) != 0) {
        snprintf(why, n, "the shims are not in %s/icefall-shims (bench/icefall.sh --prepare-ext)",
                 *ext);
        return 1;
    }
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        snprintf(why, n, "/usr/bin/python3 with torch is absent");
        return 1;
    }
    return 0;
}

/* The mean tokens per utterance of the row of batch `batch` in bench/icefall_peer.py's output,
 * or -1 when there is no such row with a time. */
static double icefall_peer_row_tokens(const char *out, int batch)
{
    char key[32];
    snprintf(key, sizeof key, "\"batch\": %d,", batch);
    const char *r = strstr(out, key);
    if (!r)
        return -1;
    const char *end = strchr(r, '\n');
    const char *ms = strstr(r, "\"ms\": "), *tok = strstr(r, "\"tokens\": ");
    if (!ms || !tok || (end && (ms > end || tok > end)))
        return -1;
    return atof(tok + strlen("\"tokens\": "));
}

/* bench/icefall_peer.py times icefall's own code on the CPU (a small model): model.encoder ->
 * greedy_search_batch, and -> modified_beam_search with the shims' k2 ragged bookkeeping; a row
 * per batch, the searches emitting tokens from the generated weights. Skips without icefall's
 * files and the shims in .ext/ (ICEFALL_EXT names another folder) or /usr/bin/python3's torch. */
TEST(bench_icefall_peer_times_icefall_searches)
{
    char why[512];
    const char *ext;
    if (icefall_peer_missing(why, sizeof why, &ext))
        SKIP(why);
    static const char *const methods[] = {"greedy_search", "modified_beam_search"};
    for (int k = 0; k < 2; k++) {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 bench/icefall_peer.py time --small --device cpu --batches 1,2 "
                 "--seconds 2 --modes fp32 --min-time 0 --warmup 1 --threads 1 --method %s "
                 "--icefall-root %s/icefall --shims %s/icefall-shims 2>/dev/null",
                 methods[k], ext, ext);
        int rc = test_run_cmd(t, cmd, out, sizeof out);
        double tokens = icefall_peer_row_tokens(out, 2);
        CHECKF(rc == 0 && strstr(out, methods[k]) && icefall_peer_row_tokens(out, 1) > 0 &&
                   tokens > 0,
               "%s: exit %d, batch 2 tokens %g: %s", methods[k], rc, tokens, out);
    }
}

/* bench/icefall_peer.py export (a small model) + tools/convert_icefall.py give a model directory
 * hark transcribes with. */
TEST(bench_icefall_peer_export_converts)
{
    char why[512];
    const char *ext;
    if (icefall_peer_missing(why, sizeof why, &ext))
        SKIP(why);
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0)
        SKIP("/usr/bin/python3 without numpy (tools/convert_icefall.py)");
    const char *d = test_tmpdir(t);
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd,
             "(/usr/bin/python3 bench/icefall_peer.py export --small --out %s "
             "--icefall-root %s/icefall --shims %s/icefall-shims && "
             "/usr/bin/python3 tools/convert_icefall.py --recipe pruned_transducer_stateless3 "
             "--checkpoint %s/pretrained.pt --tokens %s/tokens.txt --output %s/model)",
             d, ext, ext, d, d, d);
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "2 layers, d 64, vocab 500"), "exit %d: %s", rc, out);
    /* 1.5 s of a chirp, 16 kHz mono */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import math, struct, wave; w = wave.open('%s/a.wav', 'wb'); "
             "w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); "
             "w.writeframes(b''.join(struct.pack('<h', int(8000 * math.sin(i * (0.05 + i * "
             "1e-6)))) for i in range(24000)))\"",
             d);
    rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc == 0, "exit %d: %s", rc, out);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s transcribe --model %s/model --decoding-method %s %s/a.wav",
                 test_hark_bin(), d, k ? "modified_beam_search" : "greedy_search", d);
        rc = test_run_cmd(t, cmd, out, sizeof out);
        char want[600];
        snprintf(want, sizeof want, "%s/a.wav ", d);
        CHECKF(rc == 0 && !strncmp(out, want, strlen(want)), "exit %d: %s", rc, out);
    }
}

/* bench/fuzz.sh refuses an unknown target before fuzzing anything. */
TEST(bench_fuzz_unknown_target)
{
    if (access("/usr/bin/clang", X_OK) != 0)
        SKIP("clang is absent");
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "FUZZ_OUT=%s FUZZ_SECONDS=1 bash bench/fuzz.sh fuzz_nothing",
             test_tmpdir(t));
    int rc = test_run_cmd(t, cmd, out, sizeof out);
    CHECKF(rc != 0 && strstr(out, "fuzz_nothing"), "exit %d: %s", rc, out);
}
