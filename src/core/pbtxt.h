/* pbtxt.h — protobuf text format (config.pbtxt and friends) read into a generic tree; the Triton
 * schema on top of it is server/model_config.h. Tests: tests/server/test_model_config.c;
 * fuzz: tests/fuzz/fuzz_model_config.c */
#ifndef HARK_CORE_PBTXT_H
#define HARK_CORE_PBTXT_H

#include "core/arena.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

/* Why a parser of our own: none of hark's C dependencies reads protobuf *text* format (protobuf-c
 * only handles the binary wire format and has no descriptors for Triton's ModelConfig anyway), so
 * a compact tokenizer + recursive-descent parser (~400 lines) is cheaper than linking C++
 * libprotobuf. It accepts the text format as protoc writes and Triton reads it: `#` comments,
 * `field: value`, `field { ... }`, `field: { ... }`, `field < ... >`, `field: [a, b]` lists,
 * `field [ {..}, {..} ]`, `,`/`;` separators, single/double quoted strings with C escapes
 * (adjacent literals concatenate), decimal/hex/octal ints, floats, identifiers (enums, bools).
 *
 * Ownership: every node and string lives in the arena passed to pbtxt_parse; nothing is freed
 * separately. */

/* ---- generic protobuf text-format tree ----------------------------------------------------- */
typedef enum {
    PBTXT_MESSAGE, /* `{ ... }`: child = first field */
    PBTXT_LIST,    /* `[ a, b ]`: child = first element (elements carry the list's name) */
    PBTXT_STRING,  /* str/len: the decoded bytes (NUL-terminated; may contain NULs) */
    PBTXT_NUMBER,  /* str: token text incl. a leading '-' ("-1", "0x1f", "2.5e3", "-inf") */
    PBTXT_IDENT,   /* str: identifier (enum value, true/false, inf, nan) */
} pbtxt_kind_t;

typedef struct pbtxt_node {
    pbtxt_kind_t kind;
    const char *name; /* field name; "" for the root */
    int line, col;    /* 1-based position of the field name (or of a list element) */
    int vline, vcol;  /* position of the value (for a list element: the element) */
    const char *str;  /* STRING / NUMBER / IDENT */
    size_t len;
    struct pbtxt_node *child; /* MESSAGE / LIST */
    struct pbtxt_node *next;  /* next field of the same message / next list element */
} pbtxt_node_t;

/* Parses `len` bytes of text format into a tree allocated in `arena`. `path` only names the
 * file in messages ("path:line:col: expected ':' or '{' after field name 'x'").
 * Returns HARK_OK with *root a PBTXT_MESSAGE, or HARK_ERR_FORMAT. Nesting is limited to 64. */
int pbtxt_parse(const char *text, size_t len, const char *path, arena_t *arena, pbtxt_node_t **root,
                hark_err_t *err);

/* Scalar conversions; each returns 0 on success, -1 if the node does not hold that type.
 * Integers accept decimal, 0x hex and 0-prefixed octal; bools accept true/false/True/False/t/f
 * and 0/1. */
int pbtxt_to_i64(const pbtxt_node_t *n, int64_t *out);
int pbtxt_to_u64(const pbtxt_node_t *n, uint64_t *out);
int pbtxt_to_double(const pbtxt_node_t *n, double *out);
int pbtxt_to_bool(const pbtxt_node_t *n, int *out);

#endif
