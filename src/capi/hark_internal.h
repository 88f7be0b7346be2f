/* hark_internal.h — what hark's own modules (src/eval/decode_list.c) may reach beyond the public
 * include/hark.h: the family-level result inside a hark_asr_result_t. Not installed.
 * Tests: tests/capi/test_capi.c */
#ifndef HARK_CAPI_INTERNAL_H
#define HARK_CAPI_INTERNAL_H

#include "hark.h"
#include "model/family.h"

/* Moves result i out of r into *dst (r keeps an empty result there). HARK_ERR_INVALID_ARG when
 * i is out of range. */
int hark_asr_result_move(hark_asr_result_t *r, int i, asr_result_t *dst);

#endif
