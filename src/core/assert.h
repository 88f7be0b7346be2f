/* assert.h — always-on invariant checks for programmer errors (never for bad input).
 * Tests: tests/core/test_core.c (death test) */
#ifndef HARK_CORE_ASSERT_H
#define HARK_CORE_ASSERT_H

_Noreturn void hark_assert_fail(const char *expr, const char *file, int line);
#define HARK_ASSERT(e) ((e) ? (void)0 : hark_assert_fail(#e, __FILE__, __LINE__))

#endif
