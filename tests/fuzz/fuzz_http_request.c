/* fuzz_http_request.c — libFuzzer target: arbitrary bytes through the socket-free HTTP request
 * parser of src/net/http_server_parse.c, fed in pieces whose sizes the input's first byte picks.
 * Build: `make fuzz-http`; seeds: tests/fuzz/corpus_http/ (also replayed by tests/net). */
#include "net/http_server.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_request(const http_req_t *r, size_t max_body)
{
    if (!r->method_name || !r->url || !r->path || !r->query || !r->body)
        abort();
    if (strlen(r->path) != r->path_len || strlen(r->query) != r->query_len)
        abort();
    if (r->body_len > max_body || r->body[r->body_len] != 0)
        abort();
    for (size_t i = 0; i < r->nheaders; i++) {
        const http_header_t *h = &r->headers[i];
        if (strlen(h->name) != h->name_len || strlen(h->value) != h->value_len)
            abort();
        /* lookup is case-insensitive and finds the first header of that name */
        const char *v = http_req_header(r, h->name);
        if (!v)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* small limits so that the limit paths are reached too */
    http_reqparser_opts_t o = {.max_body = 4096, .max_header = 2048};
    size_t step = (size_t)(data[0] % 64); /* 0: everything in one feed */
    const char *p = (const char *)data + 1;
    size_t n = size - 1, off = 0;
    http_reqparser_t *ps = http_reqparser_create(&o);
    if (!ps)
        return 0;
    int dead = 0, eof_sent = 0;
    while (!dead && (off < n || !eof_sent)) {
        size_t end = step && off + step < n ? off + step : n;
        if (off == n)
            eof_sent = 1; /* the peer closes */
        size_t pos = off;
        for (;;) {
            size_t used = 0;
            int rc = http_reqparser_feed(ps, p + pos, end - pos, &used);
            if (used > end - pos)
                abort();
            pos += used;
            if (rc == HTTP_PARSE_REQUEST) {
                http_req_t *r = http_reqparser_take(ps);
                if (!r)
                    abort();
                check_request(r, o.max_body);
                int up = r->upgrade;
                http_req_free(r);
                if (up) {
                    dead = 1;
                    break;
                }
                continue;
            }
            if (rc == HTTP_PARSE_ERROR) {
                const char *msg = NULL;
                int st = http_reqparser_error(ps, &msg);
                if (st < 400 || st > 599 || !msg || !*msg)
                    abort();
                dead = 1;
            } else if (pos != end) {
                abort(); /* MORE means every byte was taken */
            }
            break;
        }
        off = end;
    }
    http_reqparser_destroy(ps);
    return 0;
}
