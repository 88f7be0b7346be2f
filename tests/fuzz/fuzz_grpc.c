/* fuzz_grpc.c — libFuzzer target for the gRPC stack without sockets: the input is what a client
 * sends after the HTTP/2 connection preface (frames: SETTINGS, HEADERS with HPACK, DATA with
 * gRPC-framed protobuf), fed in pieces to a socket-free http2 server running the
 * GRPCInferenceService handlers over a stub service (grpc_stub_service.c).
 * Seeds: tests/fuzz/corpus_grpc/ (captured from grpcio clients). Build: make fuzz-grpc */
#include "api/kserve_grpc.h"
#include "net/http2.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

http2_server_t *kserve_grpc_http2(kserve_grpc_t *g);

static size_t g_written;
static void sink(void *user, const uint8_t *d, size_t n)
{
    g_written += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    kserve_grpc_t *g = NULL;
    kserve_grpc_opts_t o = {.max_message = 1 << 16, .max_streams = 16};
    if (kserve_grpc_create(NULL, NULL, &o, &g, NULL)) {
        kserve_grpc_destroy(g);
        return 0;
    }
    http2_server_t *h2 = kserve_grpc_http2(g);
    http2_conn_t *c = http2_conn_open(h2, sink, NULL);
    if (c && http2_conn_feed(c, (const uint8_t *)preface, sizeof preface - 1) == 0) {
        /* the first byte picks a split size so that frame boundaries fall anywhere */
        size_t step = size ? (size_t)data[0] % 64 + 1 : 1;
        for (size_t off = size ? 1 : 0; off < size; off += step) {
            size_t n = size - off < step ? size - off : step;
            if (http2_conn_feed(c, data + off, n))
                break;
            http2_server_poll(h2);
        }
    }
    http2_conn_close(c);
    kserve_grpc_destroy(g);
    return 0;
}
