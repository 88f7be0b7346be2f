/* status.c — human-readable names for hark_status_t.
 * Tests: tests/core/test_core.c */
#include "hark.h"

const char *hark_status_str(int status)
{
    switch ((hark_status_t)status) {
    case HARK_OK:
        return "ok";
    case HARK_ERR_INVALID_ARG:
        return "invalid argument";
    case HARK_ERR_NOMEM:
        return "out of memory";
    case HARK_ERR_IO:
        return "i/o error";
    case HARK_ERR_FORMAT:
        return "bad or unknown format";
    case HARK_ERR_UNSUPPORTED:
        return "unsupported";
    case HARK_ERR_TOO_LARGE:
        return "too large";
    case HARK_ERR_CUDA:
        return "cuda error";
    case HARK_ERR_NOT_FOUND:
        return "not found";
    case HARK_ERR_AGAIN:
        return "try again";
    case HARK_ERR_TIMEOUT:
        return "timed out";
    case HARK_ERR_CLOSED:
        return "closed";
    case HARK_ERR_NO_DEVICE:
        return "no gpu device";
    case HARK_ERR_INTERNAL:
        return "internal error";
    case HARK_ERR_CANCELLED:
        return "cancelled";
    case HARK_ERR_UNAVAILABLE:
        return "unavailable";
    case HARK_ERR_EXHAUSTED:
        return "resource exhausted";
    }
    return "unknown status";
}

const char *hark_version(void)
{
    return HARK_VERSION;
}
