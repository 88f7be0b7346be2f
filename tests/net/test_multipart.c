/* Tests for src/net/multipart.c: what curl and the OpenAI SDK send, binary file content that
 * contains partial delimiters, quoted names, and every malformed case. */
#include "test.h"

#include "hark.h"
#include "net/multipart.h"

#include <string.h>

TEST(multipart_boundary_from_content_type)
{
    char b[80];
    hark_err_t e = {0};
    CHECK_OK(multipart_boundary("multipart/form-data; boundary=------------------------abc123", b,
                                sizeof b, &e));
    CHECK(strcmp(b, "------------------------abc123") == 0);
    CHECK_OK(multipart_boundary("multipart/form-data; charset=utf-8; boundary=\"q u\"", b, sizeof b,
                                &e));
    CHECK(strcmp(b, "q u") == 0);
    CHECK_EQ_INT(multipart_boundary("application/json", b, sizeof b, &e), HARK_ERR_INVALID_ARG);
    CHECK_EQ_INT(multipart_boundary("multipart/form-data", b, sizeof b, &e), HARK_ERR_INVALID_ARG);
    CHECK(strstr(e.msg, "boundary") != NULL);
}

TEST(multipart_parse_curl_style)
{
    /* a file whose bytes contain CR LF and "--XYZ" not at a line start, and a text field */
    static const char body[] =
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
        "Content-Type: audio/wav\r\n\r\n"
        "RIFF\r\n--XY\0Z--XYZ tail\r\n"
        "--XYZ\r\n"
        "Content-Disposition: form-data; name=model\r\n\r\n"
        "whisper-1\r\n"
        "--XYZ\r\n"
        "content-disposition: form-data; name=\"response_format\"\r\n\r\n"
        "\r\n"
        "--XYZ--\r\n";
    multipart_t m;
    hark_err_t e = {0};
    CHECKF(multipart_parse(body, sizeof body - 1, "XYZ", &m, &e) == HARK_OK, "%s", e.msg);
    CHECK_EQ_INT(m.n, 3);
    const multipart_part_t *f = multipart_get(&m, "file");
    CHECK(f && !strcmp(f->filename, "a b.wav") && !strcmp(f->content_type, "audio/wav"));
    CHECK_EQ_INT(f->len, 22);
    CHECK(memcmp(f->data, "RIFF\r\n--XY\0Z--XYZ tail", 22) == 0);
    const multipart_part_t *mo = multipart_get(&m, "model");
    CHECK(mo && mo->len == 9 && memcmp(mo->data, "whisper-1", 9) == 0);
    const multipart_part_t *rf = multipart_get(&m, "response_format");
    CHECK(rf && rf->len == 0);
    CHECK(multipart_get(&m, "prompt") == NULL);
}

TEST(multipart_rejects_malformed)
{
    multipart_t m;
    hark_err_t e = {0};
    static const char *bad[] = {
        "no boundary at all",
        "--XYZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nvalue without close",
        "--XYZ\r\nContent-Disposition: form-data; name=\"a\"",
        "--XYZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XYZ--",
        "--XYZ\r\nContent-Disposition: form-data; name=\"a\r\n\r\nx\r\n--XYZ--",
        "--XYZjunk\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = multipart_parse(bad[i], strlen(bad[i]), "XYZ", &m, &e);
        CHECKF(rc == HARK_ERR_FORMAT, "case %zu: rc %d", i, rc);
    }
    char many[8192] = "";
    for (int i = 0; i < MULTIPART_MAX_PARTS + 1; i++)
        strcat(many, "--B\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n");
    strcat(many, "--B--");
    CHECK_EQ_INT(multipart_parse(many, strlen(many), "B", &m, &e), HARK_ERR_TOO_LARGE);
}
