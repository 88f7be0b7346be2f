/* libFuzzer target for src/net/multipart.c: the first line of the input is the boundary, the
 * rest the body. Build: make fuzz-multipart. */
#include "net/multipart.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size < 72 ? size : 72);
    if (!nl || nl == data)
        return 0;
    char boundary[80];
    size_t bl = (size_t)(nl - data);
    memcpy(boundary, data, bl);
    boundary[bl] = 0;
    static multipart_t m;
    multipart_parse((const char *)nl + 1, size - bl - 1, boundary, &m, NULL);
    for (int i = 0; i < m.n; i++) /* touch every slice */
        if (m.parts[i].len)
            (void)*(volatile const char *)(m.parts[i].data + m.parts[i].len - 1);
    return 0;
}
