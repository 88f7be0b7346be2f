/* fuzz_kserve_request.c — libFuzzer target: arbitrary bodies through kserve_parse_request, then
 * every accepted request echoed back through kserve_build_response/kserve_parse_response.
 * Build: `make fuzz-kserve`; seeds: tests/fuzz/corpus_kserve (input: 2-byte LE header length,
 * 0xffff = no Inference-Header-Content-Length, then the body). Tests: tests/api/test_kserve.c */
#include "core/alloc.h"
#include "hark.h"
#include "api/kserve.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t hl = (size_t)data[0] | (size_t)data[1] << 8;
    if (hl == 0xffff)
        hl = (size_t)-1;
    /* a private copy of exactly the body, so ASan sees any read past its end */
    size_t n = size - 2;
    uint8_t *body = malloc(n ? n : 1);
    memcpy(body, data + 2, n);
    kserve_request_t r;
    hark_err_t err = {0};
    int rc = kserve_parse_request(body, n, hl, &r, &err);
    if (rc != HARK_OK) {
        if (err.status != rc || !err.msg[0] || r.json || r.inputs)
            abort();
        if (rc != HARK_ERR_INVALID_ARG && rc != HARK_ERR_UNSUPPORTED && rc != HARK_ERR_NOMEM)
            abort();
        free(body);
        return 0;
    }
    kserve_output_t *outs = calloc((size_t)r.n_inputs + 1, sizeof *outs);
    for (int i = 0; i < r.n_inputs; i++) {
        const kserve_tensor_t *t = &r.inputs[i];
        size_t esz = kserve_dtype_size(t->dtype);
        if (t->dtype == KSERVE_BYTES) {
            size_t pos = 0, l;
            const uint8_t *e;
            int64_t k = 0;
            while (kserve_bytes_next(t, &pos, &e, &l))
                k++;
            if (k != t->count || pos != t->size)
                abort();
        } else {
            if ((size_t)t->count * esz != t->size)
                abort();
            const void *p = kserve_tensor_data(&r, t);
            if (!p || (uintptr_t)p % esz)
                abort();
            if (t->count <= 4096) {
                float *f = malloc((size_t)t->count * sizeof(float) + 1);
                kserve_tensor_to_f32(t, f, &err);
                free(f);
            }
        }
        outs[i] = (kserve_output_t){t->name, t->dtype, t->ndim, t->shape, t->data, t->size};
    }
    /* echo: the request's outputs[] name inputs or the build fails cleanly */
    kserve_response_t resp;
    rc = kserve_build_response(&r, "m", "1", outs, r.n_inputs, &resp, &err);
    if (rc == HARK_OK) {
        kserve_parsed_response_t pr;
        int prc = kserve_parse_response(resp.body, resp.len,
                                        resp.binary ? resp.header_len : (size_t)-1, &pr, &err);
        if (prc == HARK_OK) {
            for (int i = 0; i < pr.n_outputs; i++) {
                const kserve_tensor_t *o = &pr.outputs[i];
                const kserve_tensor_t *in = kserve_request_input(&r, o->name);
                if (!in || in->dtype != o->dtype || in->count != o->count)
                    abort();
                /* binary travels byte-exact; JSON only for exact types; a BOOL byte other than
                 * 0 or 1 (binary input) is true, and comes back through JSON as 1 */
                if ((o->binary || o->dtype == KSERVE_INT32 || o->dtype == KSERVE_UINT8) &&
                    (o->size != in->size || memcmp(o->data, in->data, in->size)))
                    abort();
                if (!o->binary && o->dtype == KSERVE_BOOL) {
                    const uint8_t *a = o->data, *b = in->data;
                    if (o->size != in->size)
                        abort();
                    for (size_t k = 0; k < o->size; k++)
                        if (!a[k] != !b[k])
                            abort();
                }
            }
            kserve_parsed_response_free(&pr);
        } else if (prc != HARK_ERR_INVALID_ARG) {
            abort(); /* JSON-inexact values (big int64) are the only expected refusals */
        }
        kserve_response_free(&resp);
    } else if (rc != HARK_ERR_INVALID_ARG && rc != HARK_ERR_NOMEM) {
        abort();
    }
    free(outs);
    kserve_request_free(&r);
    free(body);
    return 0;
}
