/* Tests for src/server/shm.c: registering POSIX shared memory objects as Triton's system shared
 * memory regions, reads and writes inside a region's window, and the errors of bad windows,
 * unknown regions, shrunk objects and unregistered regions. */
#include "test.h"

#include "hark.h"
#include "server/shm.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* a fresh POSIX shared memory object of n bytes, filled 0, 1, 2, ... (mod 251) */
static int make_object(const char *key, size_t n)
{
    shm_unlink(key);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)(i % 251);
        if (pwrite(fd, &b, 1, (off_t)i) != 1)
            return -1;
    }
    return fd;
}

TEST(shm_register_read_write_unregister)
{
    char key[64];
    snprintf(key, sizeof key, "/hark-test-shm-%d", (int)getpid());
    int fd = make_object(key, 8192);
    if (fd < 0)
        SKIP("no POSIX shared memory here (shm_open)");
    shm_registry_t *r = shm_registry_create();
    hark_err_t err = {0};
    /* a window past the object's end, byte_size 0, a missing object: refused */
    CHECK_EQ_INT(shm_register(r, "a", key, 4096, 8192, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "is past the end of"));
    CHECK_EQ_INT(shm_register(r, "a", key, 0, 0, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(shm_register(r, "a", "/hark-test-no-such-object", 0, 16, &err),
                 HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "unable to open"));
    /* a window at an offset that is no page multiple */
    CHECK_OK(shm_register(r, "a", key, 100, 1000, &err));
    CHECK_EQ_INT(shm_register(r, "a", key, 0, 16, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "already in manager"));
    CHECK_OK(shm_register(r, "b", key, 0, 8192, &err));
    shm_region_info_t info[4];
    CHECK_EQ_INT(shm_status(r, NULL, info, 4, &err), 2);
    CHECK(!strcmp(info[0].name, "a") && info[0].offset == 100 && info[0].byte_size == 1000 &&
          !strcmp(info[0].key, key));
    CHECK_EQ_INT(shm_status(r, "b", info, 4, &err), 1);
    CHECK(!strcmp(info[0].name, "b"));
    CHECK_EQ_INT(shm_status(r, "c", info, 4, &err), HARK_ERR_NOT_FOUND);
    /* reads are relative to the window */
    unsigned char buf[16];
    CHECK_OK(shm_read(r, "a", 5, buf, 4, &err));
    CHECK(buf[0] == 105 && buf[3] == 108);
    CHECK_OK(shm_read(r, "a", 996, buf, 4, &err)); /* the last 4 bytes */
    CHECK_EQ_INT(shm_read(r, "a", 997, buf, 4, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "is past its end (1000 bytes)"));
    CHECK_EQ_INT(shm_read(r, "a", (uint64_t)-2, buf, 4, &err), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(shm_read(r, "zz", 0, buf, 4, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "unknown shared memory region 'zz'"));
    /* a write lands in the object, where the other region sees it */
    CHECK_OK(shm_write(r, "a", 0, "hark", 4, &err));
    CHECK_OK(shm_read(r, "b", 100, buf, 4, &err));
    CHECK(!memcmp(buf, "hark", 4));
    CHECK_EQ_INT(shm_write(r, "a", 998, "hark", 4, &err), HARK_ERR_INVALID_ARG);
    /* the client shrinks its object: a clear error, not a crash */
    CHECK(ftruncate(fd, 512) == 0);
    CHECK_EQ_INT(shm_read(r, "b", 1000, buf, 16, &err), HARK_ERR_INVALID_ARG);
    CHECK(strstr(err.msg, "shorter than the registered region"));
    CHECK_EQ_INT(shm_write(r, "b", 1000, buf, 16, &err), HARK_ERR_INVALID_ARG);
    /* unregister one, an unknown one (no error), then all */
    shm_unregister(r, "a");
    shm_unregister(r, "never-registered");
    CHECK_EQ_INT(shm_status(r, NULL, info, 4, &err), 1);
    CHECK_EQ_INT(shm_read(r, "a", 0, buf, 4, &err), HARK_ERR_INVALID_ARG);
    shm_unregister(r, NULL);
    CHECK_EQ_INT(shm_status(r, NULL, info, 4, &err), 0);
    CHECK_OK(shm_register(r, "a", key, 0, 16, &err)); /* closed again by destroy */
    shm_registry_destroy(r);
    close(fd);
    shm_unlink(key);
}
