/* listen.c — listening sockets with SO_REUSEPORT groups. Tests: tests/net/test_http_server.c,
 * tests/net/test_http2.c */
#include "net/listen.h"

#include "hark.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

int net_resolve(const char *host, int port, struct sockaddr_storage *ss, const char *who,
                hark_err_t *err)
{
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return HARK_OK;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return HARK_OK;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_INET; /* "localhost" means 127.0.0.1 first */
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0) {
        hints.ai_family = AF_UNSPEC;
        rc = getaddrinfo(host, NULL, &hints, &res);
    }
    if (rc != 0 || !res)
        return err_set(err, HARK_ERR_INVALID_ARG, "%s: cannot resolve host '%s': %s", who, host,
                       gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    if (ss->ss_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return HARK_OK;
}

int net_listen(const char *host, int port, int reuse, const char *who, int *fd_out, int *bound_port,
               hark_err_t *err)
{
    *fd_out = -1;
    struct sockaddr_storage ss;
    int rc = net_resolve(host, port, &ss, who, err);
    if (rc != HARK_OK)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    const char *what = "socket";
    int ok = fd >= 0;
    socklen_t alen =
        ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (ok && reuse == NET_REUSE_FIRST && port) {
        /* a port shared between our loops must not be one another process listens on, with
         * SO_REUSEPORT or without: a plain bind finds out (then the real one takes it) */
        int probe = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        what = "bind";
        ok = probe >= 0;
        if (ok) {
            setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            ok = bind(probe, (const struct sockaddr *)&ss, alen) == 0;
            int e = errno;
            close(probe);
            errno = e;
        }
    }
    if (ok) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (reuse)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        what = "bind";
        ok = bind(fd, (const struct sockaddr *)&ss, alen) == 0;
    }
    if (ok) {
        what = "listen";
        ok = listen(fd, 511) == 0;
    }
    struct sockaddr_storage b;
    socklen_t blen = sizeof b;
    if (ok) {
        what = "getsockname";
        ok = getsockname(fd, (struct sockaddr *)&b, &blen) == 0;
    }
    if (!ok) {
        err_set(err, HARK_ERR_IO, "%s: %s %s port %d: %s", who, what, host, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return HARK_ERR_IO;
    }
    *bound_port = ntohs(b.ss_family == AF_INET ? ((struct sockaddr_in *)&b)->sin_port
                                               : ((struct sockaddr_in6 *)&b)->sin6_port);
    *fd_out = fd;
    return HARK_OK;
}
