/* cli_stdin.c — `-` as an audio file on the command line: standard input (a pipe, any length) is
 * spooled to a temporary file, which the block reader and the decoders then read like any other
 * (memory stays bounded; the disk holds the audio), and the output names it `-`.
 * Tests: tests/cli/test_cli_transcribe_vad.c */
#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char spool[4096];

static void remove_spool(void)
{
    if (spool[0])
        unlink(spool);
}

const char *cli_spool_stdin(void)
{
    if (spool[0])
        return spool;
    const char *dir = getenv("TMPDIR");
    snprintf(spool, sizeof spool, "%s/hark-stdin-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(spool);
    if (fd < 0) {
        fprintf(stderr, "hark: cannot create %s for standard input: %s\n", spool, strerror(errno));
        spool[0] = 0;
        return NULL;
    }
    atexit(remove_spool);
    static char buf[1 << 16];
    for (;;) {
        ssize_t n = read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, "hark: reading standard input: %s\n", strerror(errno));
            close(fd);
            return NULL;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                fprintf(stderr, "hark: spooling standard input to %s: %s\n", spool,
                        strerror(errno));
                close(fd);
                return NULL;
            }
            off += w;
        }
    }
    if (close(fd) != 0) {
        fprintf(stderr, "hark: spooling standard input to %s: %s\n", spool, strerror(errno));
        return NULL;
    }
    return spool;
}

const char *cli_file_name(const char *path)
{
    return spool[0] && path && !strcmp(path, spool) ? "-" : path;
}
