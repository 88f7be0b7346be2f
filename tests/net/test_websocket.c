/* Tests for src/net/websocket.c: the handshake's Sec-WebSocket-Accept (SHA-1 + base64) against
 * RFC 6455's example and values computed by Python's hashlib. The connections themselves are
 * driven end to end by tests/server/test_websocket.py. */
#include "test.h"

#include "net/websocket.h"

#include <string.h>

TEST(websocket_accept_key)
{
    char out[29];
    ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out); /* RFC 6455, section 1.3 */
    CHECK(!strcmp(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
    ws_accept_key("", out); /* 36 bytes: one SHA-1 block */
    CHECK(!strcmp(out, "Kfh9QIsMVZcl6xEPYxPHzW8SZ8w="));
    ws_accept_key("x3JJHMbDL1EzLkh9GBhXDw==", out);
    CHECK(!strcmp(out, "HSmrc0sMlYUkAGmm5OPpG2HaGWk="));
}
