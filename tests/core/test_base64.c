/* Tests for src/core/base64.c: RFC 4648's test vectors, and every padding case over bytes of
 * every value. */
#include "test.h"

#include "core/base64.h"

#include <string.h>

TEST(base64_rfc4648_vectors)
{
    static const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *out[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char buf[16];
        size_t n = base64_encode((const uint8_t *)in[i], strlen(in[i]), buf);
        CHECKF(n == strlen(out[i]) && !strcmp(buf, out[i]), "\"%s\" -> \"%s\"", in[i], buf);
        CHECK(base64_len(strlen(in[i])) == n);
    }
    uint8_t all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    char b[400];
    CHECK(base64_encode(all, 3, b) == 4 && !strcmp(b, "//79"));
    CHECK(base64_encode(all + 253, 3, b) == 4 && !strcmp(b, "AgEA"));
}
