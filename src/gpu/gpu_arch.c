/* gpu_arch.c — the GPU path policy (gpu_arch.h): pure functions of a compute capability,
 * HARK_GPU_ARCH and the build's architecture list. Tests: tests/gpu/test_gpu_arch.c */
#include "gpu/gpu_arch.h"

#include "hark.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *gpu_path_name(gpu_path_t p)
{
    return p == GPU_PATH_HOPPER ? "hopper" : p == GPU_PATH_AMPERE ? "ampere" : "cpu";
}

int gpu_force_parse(const char *s, gpu_force_t *out, hark_err_t *err)
{
    static const char *const ampere[] = {"sm80", "sm_80", "ampere"};
    static const char *const hopper[] = {"sm90", "sm_90", "sm90a", "sm_90a", "hopper"};
    *out = GPU_FORCE_AUTO;
    if (!s || !*s || !strcasecmp(s, "auto"))
        return HARK_OK;
    for (size_t i = 0; i < sizeof ampere / sizeof ampere[0]; i++)
        if (!strcasecmp(s, ampere[i]))
            return *out = GPU_FORCE_AMPERE, HARK_OK;
    for (size_t i = 0; i < sizeof hopper / sizeof hopper[0]; i++)
        if (!strcasecmp(s, hopper[i]))
            return *out = GPU_FORCE_HOPPER, HARK_OK;
    return err_set(err, HARK_ERR_INVALID_ARG,
                   "HARK_GPU_ARCH=%.64s: expected auto, sm80 (ampere) or sm90 (hopper)", s);
}

/* one list entry: kind 'c' (cubin, sm_) or 'p' (PTX, compute_), its number (80, 90, 120) and
 * suffix ('a', 'f' or 0); 0 when the name is not one */
typedef struct {
    char kind;
    int num;
    char suffix;
} arch_name_t;

static int parse_name(const char *s, size_t len, arch_name_t *a)
{
    size_t p;
    if (len > 3 && !strncmp(s, "sm_", 3)) {
        a->kind = 'c';
        p = 3;
    } else if (len > 8 && !strncmp(s, "compute_", 8)) {
        a->kind = 'p';
        p = 8;
    } else {
        return 0;
    }
    int num = 0, digits = 0;
    while (p < len && isdigit((unsigned char)s[p]) && digits < 4) {
        num = num * 10 + (s[p++] - '0');
        digits++;
    }
    if (digits < 2 || num < 10)
        return 0;
    a->num = num;
    a->suffix = 0;
    if (p < len && (s[p] == 'a' || s[p] == 'f'))
        a->suffix = s[p++];
    return p == len;
}

/* the next entry of an arch list (separated by spaces, '+' or ','): its start; *end past it */
static const char *next_entry(const char *p, const char **end)
{
    while (*p && strchr(" +,", *p))
        p++;
    const char *q = p;
    while (*q && !strchr(" +,", *q))
        q++;
    *end = q;
    return p;
}

/* calls fn on every readable entry of the list until it returns nonzero; returns that */
static int each_arch(const char *archs, int (*fn)(const arch_name_t *, int), int cc)
{
    if (!archs)
        return 0;
    const char *q;
    for (const char *p = next_entry(archs, &q); *p; p = next_entry(q, &q)) {
        arch_name_t a;
        if (q > p && parse_name(p, (size_t)(q - p), &a)) {
            int r = fn(&a, cc);
            if (r)
                return r;
        }
    }
    return 0;
}

static int runs_on(const arch_name_t *a, int cc)
{
    if (a->suffix == 'a')
        return a->num == cc;
    if (a->kind == 'p')
        return a->num <= cc;
    /* a cubin runs on its major's later minors (a family cubin likewise) */
    return a->num / 10 == cc / 10 && a->num <= cc;
}

static int hopper_code(const arch_name_t *a, int cc)
{
    return cc == 90 && a->num == 90 && a->suffix == 'a';
}

static int any_entry(const arch_name_t *a, int cc)
{
    (void)a;
    (void)cc;
    return 1;
}

int gpu_archs_runs_on(const char *archs, int cc)
{
    return cc > 0 && each_arch(archs, runs_on, cc);
}

int gpu_archs_hopper(const char *archs, int cc)
{
    return each_arch(archs, hopper_code, cc);
}

void gpu_archs_describe(const char *archs, char *buf, size_t n)
{
    if (!n)
        return;
    buf[0] = 0;
    if (!each_arch(archs, any_entry, 0)) {
        snprintf(buf, n, "none");
        return;
    }
    size_t len = 0;
    for (int pass = 0; pass < 2; pass++) { /* cubins, then PTX */
        int first = 1;
        const char *q;
        for (const char *p = next_entry(archs, &q); *p; p = next_entry(q, &q)) {
            arch_name_t a;
            if (q > p && parse_name(p, (size_t)(q - p), &a) && (a.kind == 'p') == (pass == 1)) {
                const char *sep = first ? (pass == 1 ? (len ? ", PTX " : "PTX ") : "") : " ";
                int w = snprintf(buf + len, n - len, "%s%.*s", sep, (int)(q - p), p);
                if (w < 0 || (size_t)w >= n - len)
                    return; /* truncated */
                len += (size_t)w;
                first = 0;
            }
        }
    }
}

int gpu_path_choose(int cc, const char *force, const char *archs, gpu_path_t *out, hark_err_t *err)
{
    *out = GPU_PATH_NONE;
    gpu_force_t f;
    int rc = gpu_force_parse(force, &f, err);
    if (rc != HARK_OK)
        return rc;
    if (!archs || !each_arch(archs, any_entry, 0))
        return err_set(err, HARK_ERR_NO_DEVICE, "hark was built without CUDA");
    if (cc <= 0)
        return err_set(err, HARK_ERR_NO_DEVICE, "no CUDA device (or no driver)");
    char list[160];
    gpu_archs_describe(archs, list, sizeof list);
    if (cc < GPU_MIN_CC)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "compute capability %d.%d: hark's GPU code needs 8.0 (Ampere) or newer",
                       cc / 10, cc % 10);
    int hopper = gpu_archs_hopper(archs, cc);
    if (f == GPU_FORCE_HOPPER && !hopper)
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "HARK_GPU_ARCH=%s: the Hopper path needs an sm_90 GPU (this one is %d.%d) "
                       "and sm_90a code (this build: %s)",
                       force, cc / 10, cc % 10, list);
    if (!gpu_archs_runs_on(archs, cc))
        return err_set(err, HARK_ERR_UNSUPPORTED,
                       "this build has no code for compute capability %d.%d (it holds %s); "
                       "rebuild with CUDA_ARCHS including %d%s",
                       cc / 10, cc % 10, list, cc, cc == 90 ? "a" : "");
    *out = hopper && f != GPU_FORCE_AMPERE ? GPU_PATH_HOPPER : GPU_PATH_AMPERE;
    return HARK_OK;
}
