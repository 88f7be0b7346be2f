/* tests for src/gpu/gpu_arch.c (the GPU path policy of issue 24, pure: runs on the CPU) and for
 * what the build says about itself: `hark --version`'s CUDA lines, and the cubins / PTX the
 * objects hold (cuobjdump; skipped where it is absent). */
#include "test.h"

#include "gpu/gpu.h"
#include "hark.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FULL "sm_80+sm_86+sm_89+sm_90a+compute_90"

/* the path for (cc, force, archs), or -status when refused; err's text into why[n] */
static int choose(int cc, const char *force, const char *archs, char *why, size_t n)
{
    hark_err_t err = {0};
    gpu_path_t p = GPU_PATH_HOPPER;
    int rc = gpu_path_choose(cc, force, archs, &p, &err);
    if (why)
        snprintf(why, n, "%s", err.msg);
    if (rc != HARK_OK)
        return p == GPU_PATH_NONE ? rc : 1000; /* a refusal must also clear the path */
    return (int)p;
}

TEST(gpu_path_policy_default_build)
{
    /* every data-centre part since Ampere has a path; only the H100/H200 the Hopper one */
    CHECK_EQ_INT(choose(80, NULL, FULL, NULL, 0), GPU_PATH_AMPERE);  /* A100 */
    CHECK_EQ_INT(choose(86, NULL, FULL, NULL, 0), GPU_PATH_AMPERE);  /* A10G, RTX 30xx */
    CHECK_EQ_INT(choose(87, NULL, FULL, NULL, 0), GPU_PATH_AMPERE);  /* Orin: the sm_86 cubin */
    CHECK_EQ_INT(choose(89, NULL, FULL, NULL, 0), GPU_PATH_AMPERE);  /* L4, L40S */
    CHECK_EQ_INT(choose(90, NULL, FULL, NULL, 0), GPU_PATH_HOPPER);  /* H100 */
    CHECK_EQ_INT(choose(100, NULL, FULL, NULL, 0), GPU_PATH_AMPERE); /* B200: compute_90 PTX */
    CHECK_EQ_INT(choose(120, NULL, FULL, NULL, 0), GPU_PATH_AMPERE); /* RTX 50xx: the PTX */
    /* unset, empty and "auto" are the same; case is ignored */
    CHECK_EQ_INT(choose(90, "", FULL, NULL, 0), GPU_PATH_HOPPER);
    CHECK_EQ_INT(choose(90, "AUTO", FULL, NULL, 0), GPU_PATH_HOPPER);
}

TEST(gpu_path_policy_forced)
{
    char why[512];
    /* the Ampere path forced on the H100, under each of its spellings */
    static const char *const amp[] = {"sm80", "sm_80", "ampere", "Ampere", "SM80"};
    for (size_t i = 0; i < sizeof amp / sizeof amp[0]; i++)
        CHECKF(choose(90, amp[i], FULL, why, sizeof why) == GPU_PATH_AMPERE, "%s: %s", amp[i], why);
    CHECK_EQ_INT(choose(80, "sm80", FULL, NULL, 0), GPU_PATH_AMPERE);
    /* Hopper asked for: granted on an H100 built with sm_90a ... */
    static const char *const hop[] = {"sm90", "sm_90", "sm90a", "sm_90a", "hopper"};
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        CHECKF(choose(90, hop[i], FULL, why, sizeof why) == GPU_PATH_HOPPER, "%s: %s", hop[i], why);
    /* ... refused, with a reason, on anything else: not a crash, not a silent Ampere path */
    CHECK_EQ_INT(choose(80, "hopper", FULL, why, sizeof why), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(why, "HARK_GPU_ARCH=hopper") && strstr(why, "8.0"), "%s", why);
    CHECK_EQ_INT(choose(89, "sm90", FULL, NULL, 0), HARK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(choose(100, "sm90", FULL, NULL, 0), HARK_ERR_UNSUPPORTED); /* no sm_100a code */
    /* an H100 with a build that lacks sm_90a (PTX only, or narrowed to the others) */
    CHECK_EQ_INT(choose(90, "hopper", "sm_80+sm_86+compute_90", why, sizeof why),
                 HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(why, "sm_90a"), "%s", why);
    /* unknown values are errors, named in the message */
    static const char *const bad[] = {"sm75", "volta", "sm_80x", "90", " sm80", "ampere,hopper"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(choose(90, bad[i], FULL, why, sizeof why), HARK_ERR_INVALID_ARG);
        CHECKF(strstr(why, "HARK_GPU_ARCH") && strstr(why, bad[i]), "%s", why);
    }
}

TEST(gpu_path_policy_refusals)
{
    char why[512];
    /* no device / no driver, and no CUDA in the build */
    CHECK_EQ_INT(choose(0, NULL, FULL, NULL, 0), HARK_ERR_NO_DEVICE);
    CHECK_EQ_INT(choose(-1, NULL, FULL, NULL, 0), HARK_ERR_NO_DEVICE);
    CHECK_EQ_INT(choose(90, NULL, "", NULL, 0), HARK_ERR_NO_DEVICE);
    CHECK_EQ_INT(choose(90, NULL, NULL, NULL, 0), HARK_ERR_NO_DEVICE);
    CHECK_EQ_INT(choose(90, NULL, "garbage+sm_+compute_", NULL, 0), HARK_ERR_NO_DEVICE);
    /* older than Ampere: T4, V100, P100 — even where a PTX would JIT for them */
    CHECK_EQ_INT(choose(75, NULL, FULL, why, sizeof why), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(why, "7.5") && strstr(why, "8.0"), "%s", why);
    CHECK_EQ_INT(choose(70, NULL, "compute_70", NULL, 0), HARK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(choose(60, "sm80", FULL, NULL, 0), HARK_ERR_UNSUPPORTED);
    /* a narrowed build without code for the device: refused, saying what to rebuild with */
    CHECK_EQ_INT(choose(80, NULL, "sm_90a", why, sizeof why), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(why, "8.0") && strstr(why, "sm_90a") && strstr(why, "CUDA_ARCHS"), "%s", why);
    CHECK_EQ_INT(choose(90, NULL, "sm_80+sm_86+sm_89", why, sizeof why), HARK_ERR_UNSUPPORTED);
    CHECKF(strstr(why, "90a"), "%s", why); /* cubins never cross a major version */
    CHECK_EQ_INT(choose(86, NULL, "sm_89", NULL, 0), HARK_ERR_UNSUPPORTED); /* only later minors */
    CHECK_EQ_INT(choose(100, NULL, "sm_80+sm_86+sm_89+sm_90a", NULL, 0), HARK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(choose(89, NULL, "compute_90", NULL, 0), HARK_ERR_UNSUPPORTED); /* PTX too new */
    /* arch-specific code runs on its own chip only, PTX included */
    CHECK_EQ_INT(choose(100, NULL, "sm_90a+compute_90a", NULL, 0), HARK_ERR_UNSUPPORTED);
    CHECK_EQ_INT(choose(90, NULL, "compute_90a", NULL, 0), GPU_PATH_HOPPER);
    /* narrowed to Hopper alone: the H100 takes either path, the others nothing */
    CHECK_EQ_INT(choose(90, NULL, "sm_90a", NULL, 0), GPU_PATH_HOPPER);
    CHECK_EQ_INT(choose(90, "sm80", "sm_90a", NULL, 0), GPU_PATH_AMPERE);
    /* an sm_90 (not 90a) cubin runs on the H100, but holds no wgmma code */
    CHECK_EQ_INT(choose(90, NULL, "sm_90", NULL, 0), GPU_PATH_AMPERE);
    /* separators and stray entries */
    CHECK_EQ_INT(choose(86, NULL, " sm_80, ,+junk+sm_9 +sm_90a ", NULL, 0), GPU_PATH_AMPERE);
    CHECK_EQ_INT(choose(86, NULL, "sm_80abc", NULL, 0), HARK_ERR_NO_DEVICE); /* nothing readable */
}

TEST(gpu_archs_describe_lists_cubins_then_ptx)
{
    char b[128];
    gpu_archs_describe(FULL, b, sizeof b);
    CHECKF(!strcmp(b, "sm_80 sm_86 sm_89 sm_90a, PTX compute_90"), "%s", b);
    gpu_archs_describe("compute_90+sm_90a", b, sizeof b);
    CHECKF(!strcmp(b, "sm_90a, PTX compute_90"), "%s", b);
    gpu_archs_describe("compute_89", b, sizeof b);
    CHECKF(!strcmp(b, "PTX compute_89"), "%s", b);
    gpu_archs_describe("", b, sizeof b);
    CHECKF(!strcmp(b, "none"), "%s", b);
    gpu_archs_describe(NULL, b, sizeof b);
    CHECKF(!strcmp(b, "none"), "%s", b);
    char tiny[8];
    memset(tiny, 'x', sizeof tiny);
    gpu_archs_describe(FULL, tiny, sizeof tiny); /* truncated, still terminated */
    CHECK(memchr(tiny, 0, sizeof tiny) != NULL);
    CHECK_EQ_INT(strcmp(gpu_path_name(GPU_PATH_HOPPER), "hopper"), 0);
    CHECK_EQ_INT(strcmp(gpu_path_name(GPU_PATH_AMPERE), "ampere"), 0);
    CHECK_EQ_INT(strcmp(gpu_path_name(GPU_PATH_NONE), "cpu"), 0);
}

/* `hark --version` names this build's CUDA architectures and each GPU's path, or says there is
 * no CUDA / no GPU; it works on a machine without either */
TEST(cli_version_lists_cuda_archs)
{
    char cmd[1024], out[8192], list[256];
    snprintf(cmd, sizeof cmd, "%s --version", test_hark_bin());
    CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s", out);
    CHECKF(!strncmp(out, "hark ", 5), "%s", out);
    const char *archs = gpu_compiled_archs();
    if (!archs[0]) {
        CHECKF(strstr(out, "cuda: not built"), "%s", out);
        return;
    }
    gpu_archs_describe(archs, list, sizeof list);
    CHECKF(strstr(out, list), "expected '%s' in:\n%s", list, out);
    int n = gpu_device_count();
    if (n == 0) {
        CHECKF(strstr(out, "gpu: none"), "%s", out);
        return;
    }
    for (int d = 0; d < n; d++) {
        char want[64];
        snprintf(want, sizeof want, "gpu %d: ", d);
        CHECKF(strstr(out, want), "%s", out);
    }
    hark_err_t err = {0};
    gpu_path_t p = gpu_device_path_quiet(0, &err);
    char want[64];
    snprintf(want, sizeof want, "%s path", gpu_path_name(p));
    CHECKF(p == GPU_PATH_NONE ? strstr(out, "not used") != NULL : strstr(out, want) != NULL, "%s",
           out);
}

/* the hark binary holds a cubin for each sm_ of the build's list and PTX for each compute_ (the
 * default build: sm_80, sm_86, sm_89, sm_90a and compute_90) of every CUDA object */
TEST(cuda_objects_hold_every_arch)
{
    const char *archs = gpu_compiled_archs();
    if (!archs[0])
        SKIP("built without CUDA");
    const char *home = getenv("CUDA_HOME");
    char tool[512], cmd[2048], out[65536], lib[512];
    snprintf(tool, sizeof tool, "%s/bin/cuobjdump", home ? home : "/usr/local/cuda");
    if (access(tool, X_OK) != 0) {
        snprintf(tool, sizeof tool, "cuobjdump");
        if (system("command -v cuobjdump >/dev/null 2>&1") != 0)
            SKIP("cuobjdump is absent (CUDA_HOME/bin, PATH)");
    }
    /* the hark binary (HARK_BIN): it links every CUDA object, and travels to the device */
    snprintf(lib, sizeof lib, "%s", test_hark_bin());
    if (access(lib, R_OK) != 0)
        SKIP("the hark binary is absent (HARK_BIN)");
    for (int ptx = 0; ptx < 2; ptx++) {
        snprintf(cmd, sizeof cmd, "%s %s %s", tool, ptx ? "--list-ptx" : "--list-elf", lib);
        CHECKF(test_run_cmd(t, cmd, out, sizeof out) == 0, "%s: %s", cmd, out);
        const char *p = archs;
        while (*p) {
            while (*p == '+')
                p++;
            const char *q = p;
            while (*q && *q != '+')
                q++;
            int is_ptx = !strncmp(p, "compute_", 8);
            if (q > p && is_ptx == ptx) {
                /* cuobjdump names a cubin "<obj>.sm_80.cubin", a PTX "<obj>.sm_90.ptx" */
                char want[64];
                const char *num = p + (is_ptx ? 8 : 3);
                snprintf(want, sizeof want, ".sm_%.*s.%s", (int)(q - num), num,
                         ptx ? "ptx" : "cubin");
                CHECKF(strstr(out, want), "no %s in %s --%s:\n%.2000s", want, lib,
                       ptx ? "list-ptx" : "list-elf", out);
            }
            p = q;
        }
    }
}
