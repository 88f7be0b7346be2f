/* base64.h — RFC 4648 base64 (standard alphabet, '=' padding): the WebSocket handshake's accept
 * key and OpenAI's streamed audio deltas. Tests: tests/core/test_base64.c */
#ifndef HARK_CORE_BASE64_H
#define HARK_CORE_BASE64_H

#include <stddef.h>
#include <stdint.h>

/* Characters base64_encode writes for n bytes, without the NUL. */
static inline size_t base64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}
/* Writes base64_len(n) characters and a NUL into out; returns base64_len(n). */
size_t base64_encode(const uint8_t *in, size_t n, char *out);

#endif
