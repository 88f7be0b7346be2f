/* model_config.c — the schema of Triton's ModelConfig over the generic text-format tree
 * (core/pbtxt.h): fields hark reads, fields it ignores, validation, mapping and JSON output.
 * Tests: tests/server/test_model_config.c; fuzz: tests/fuzz/fuzz_model_config.c */
#include "server/model_config.h"

#include "core/alloc.h"
#include "core/log.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ============================================================================================
 * Schema of Triton's ModelConfig (common/protobuf/model_config.proto)
 * ========================================================================================== */
typedef enum {
    F_STRING,
    F_INT32,
    F_UINT32,
    F_INT64,
    F_UINT64,
    F_BOOL,
    F_ENUM,
    F_MSG,
    F_IGNORED
} ftype_t;

typedef struct field_s {
    const char *name;
    ftype_t type;
    int repeated;
    const void
        *sub; /* F_MSG: const field_t * (NULL-name terminated); F_ENUM: const char *const * */
} field_t;

#define DATA_TYPES dtype_config_names
static const char *const KINDS[] = {"KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL", NULL};
static const char *const TIMEOUT_ACTIONS[] = {"REJECT", "DELAY", NULL};
static const char *const FORMATS[] = {"FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW", NULL};

#define END                                                                                        \
    {                                                                                              \
        NULL, F_IGNORED, 0, NULL                                                                   \
    }
static const field_t F_RESHAPE[] = {{"shape", F_INT64, 1, NULL}, END};
static const field_t F_INPUT[] = {{"name", F_STRING, 0, NULL},
                                  {"data_type", F_ENUM, 0, DATA_TYPES},
                                  {"format", F_ENUM, 0, FORMATS},
                                  {"dims", F_INT64, 1, NULL},
                                  {"reshape", F_MSG, 0, F_RESHAPE},
                                  {"is_shape_tensor", F_IGNORED, 0, NULL},
                                  {"allow_ragged_batch", F_IGNORED, 0, NULL},
                                  {"optional", F_IGNORED, 0, NULL},
                                  {"is_non_linear_format_io", F_IGNORED, 0, NULL},
                                  END};
static const field_t F_OUTPUT[] = {{"name", F_STRING, 0, NULL},
                                   {"data_type", F_ENUM, 0, DATA_TYPES},
                                   {"dims", F_INT64, 1, NULL},
                                   {"reshape", F_MSG, 0, F_RESHAPE},
                                   {"label_filename", F_IGNORED, 0, NULL},
                                   {"is_shape_tensor", F_IGNORED, 0, NULL},
                                   {"is_non_linear_format_io", F_IGNORED, 0, NULL},
                                   END};
static const field_t F_QUEUE_POLICY[] = {{"timeout_action", F_ENUM, 0, TIMEOUT_ACTIONS},
                                         {"default_timeout_microseconds", F_UINT64, 0, NULL},
                                         {"allow_timeout_override", F_BOOL, 0, NULL},
                                         {"max_queue_size", F_UINT32, 0, NULL},
                                         END};
static const field_t F_DYNAMIC[] = {{"preferred_batch_size", F_INT32, 1, NULL},
                                    {"max_queue_delay_microseconds", F_UINT64, 0, NULL},
                                    {"preserve_ordering", F_BOOL, 0, NULL},
                                    {"priority_levels", F_UINT64, 0, NULL},
                                    {"default_priority_level", F_UINT64, 0, NULL},
                                    {"default_queue_policy", F_MSG, 0, F_QUEUE_POLICY},
                                    {"priority_queue_policy", F_IGNORED, 1, NULL},
                                    END};
static const char *const CONTROL_KINDS[] = {"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY",
                                            "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_CORRID",
                                            NULL};
static const field_t F_CONTROL[] = {
    {"kind", F_ENUM, 0, CONTROL_KINDS},      {"int32_false_true", F_INT32, 1, NULL},
    {"fp32_false_true", F_IGNORED, 1, NULL}, {"bool_false_true", F_IGNORED, 1, NULL},
    {"data_type", F_ENUM, 0, DATA_TYPES},    END};
static const field_t F_CONTROL_INPUT[] = {
    {"name", F_STRING, 0, NULL}, {"control", F_MSG, 1, F_CONTROL}, END};
static const field_t F_SEQ_DIRECT[] = {{"max_queue_delay_microseconds", F_UINT64, 0, NULL},
                                       {"minimum_slot_utilization", F_IGNORED, 0, NULL},
                                       END};
static const field_t F_SEQ_OLDEST[] = {{"max_candidate_sequences", F_INT32, 0, NULL},
                                       {"preferred_batch_size", F_INT32, 1, NULL},
                                       {"max_queue_delay_microseconds", F_UINT64, 0, NULL},
                                       {"preserve_ordering", F_BOOL, 0, NULL},
                                       END};
static const field_t F_SEQUENCE[] = {{"max_sequence_idle_microseconds", F_UINT64, 0, NULL},
                                     {"control_input", F_MSG, 1, F_CONTROL_INPUT},
                                     {"state", F_IGNORED, 1, NULL},
                                     {"direct", F_MSG, 0, F_SEQ_DIRECT},
                                     {"oldest", F_MSG, 0, F_SEQ_OLDEST},
                                     {"iterative_sequence", F_IGNORED, 0, NULL},
                                     END};
static const field_t F_INSTANCE[] = {
    {"name", F_STRING, 0, NULL},          {"kind", F_ENUM, 0, KINDS},
    {"count", F_INT32, 0, NULL},          {"gpus", F_INT32, 1, NULL},
    {"rate_limiter", F_IGNORED, 0, NULL}, {"secondary_devices", F_IGNORED, 1, NULL},
    {"profile", F_IGNORED, 1, NULL},      {"passive", F_IGNORED, 0, NULL},
    {"host_policy", F_IGNORED, 0, NULL},  END};
static const field_t F_PARAM_VALUE[] = {{"string_value", F_STRING, 0, NULL}, END};
static const field_t F_PARAM[] = {
    {"key", F_STRING, 0, NULL}, {"value", F_MSG, 0, F_PARAM_VALUE}, END};
static const field_t F_LATEST[] = {{"num_versions", F_UINT32, 0, NULL}, END};
static const field_t F_ALL[] = {END};
static const field_t F_SPECIFIC[] = {{"versions", F_INT64, 1, NULL}, END};
static const field_t F_VERSION_POLICY[] = {{"latest", F_MSG, 0, F_LATEST},
                                           {"all", F_MSG, 0, F_ALL},
                                           {"specific", F_MSG, 0, F_SPECIFIC},
                                           END};
static const field_t F_TRANSACTION[] = {{"decoupled", F_BOOL, 0, NULL}, END};
static const field_t F_CACHE[] = {{"enable", F_BOOL, 0, NULL}, END};
static const field_t F_CONFIG[] = {{"name", F_STRING, 0, NULL},
                                   {"platform", F_STRING, 0, NULL},
                                   {"backend", F_STRING, 0, NULL},
                                   {"runtime", F_IGNORED, 0, NULL},
                                   {"version_policy", F_MSG, 0, F_VERSION_POLICY},
                                   {"max_batch_size", F_INT32, 0, NULL},
                                   {"input", F_MSG, 1, F_INPUT},
                                   {"output", F_MSG, 1, F_OUTPUT},
                                   {"batch_input", F_IGNORED, 1, NULL},
                                   {"batch_output", F_IGNORED, 1, NULL},
                                   {"optimization", F_IGNORED, 0, NULL},
                                   {"dynamic_batching", F_MSG, 0, F_DYNAMIC},
                                   {"sequence_batching", F_MSG, 0, F_SEQUENCE},
                                   {"ensemble_scheduling", F_IGNORED, 0, NULL},
                                   {"instance_group", F_MSG, 1, F_INSTANCE},
                                   {"default_model_filename", F_IGNORED, 0, NULL},
                                   {"cc_model_filenames", F_IGNORED, 1, NULL},
                                   {"metric_tags", F_IGNORED, 1, NULL},
                                   {"parameters", F_MSG, 1, F_PARAM},
                                   {"model_warmup", F_IGNORED, 1, NULL},
                                   {"model_operations", F_IGNORED, 0, NULL},
                                   {"model_transaction_policy", F_MSG, 0, F_TRANSACTION},
                                   {"model_repository_agents", F_IGNORED, 0, NULL},
                                   {"response_cache", F_MSG, 0, F_CACHE},
                                   {"model_metrics", F_IGNORED, 0, NULL},
                                   END};
#undef END

/* ---- validation against the schema -------------------------------------------------------- */
#define MAX_NOTICES 64

typedef struct {
    const char *path;
    hark_err_t *err;
    const model_config_opts_t *opts;
    int n_noticed;
    char noticed[MAX_NOTICES][96];
} vctx_t;

static int verr(vctx_t *c, int status, const pbtxt_node_t *n, const char *field, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
static int verr(vctx_t *c, int status, const pbtxt_node_t *n, const char *field, const char *fmt,
                ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return err_set(c->err, status, "%s:%d:%d: field '%s': %s", c->path, n->line, n->col, field,
                   what);
}

static void notice(vctx_t *c, const pbtxt_node_t *n, const char *field)
{
    for (int i = 0; i < c->n_noticed; i++)
        if (!strcmp(c->noticed[i], field))
            return;
    if (c->n_noticed < MAX_NOTICES)
        snprintf(c->noticed[c->n_noticed++], sizeof c->noticed[0], "%s", field);
    char line[400];
    snprintf(line, sizeof line, "%s:%d: ignoring field '%s' (not used by hark)", c->path, n->line,
             field);
    if (c->opts && c->opts->notice)
        c->opts->notice(c->opts->user, line);
    else
        LOG_WARN("%s", line);
}

static const char *type_word(ftype_t t)
{
    switch (t) {
    case F_STRING:
        return "a quoted string";
    case F_INT32:
    case F_INT64:
        return "an integer";
    case F_UINT32:
    case F_UINT64:
        return "a non-negative integer";
    case F_BOOL:
        return "true or false";
    case F_ENUM:
        return "an enum value";
    case F_MSG:
        return "a message { ... }";
    case F_IGNORED:
        break;
    }
    return "a value";
}

static void value_desc(const pbtxt_node_t *v, char *buf, size_t cap)
{
    switch (v->kind) {
    case PBTXT_MESSAGE:
        snprintf(buf, cap, "a message");
        return;
    case PBTXT_LIST:
        snprintf(buf, cap, "a list");
        return;
    case PBTXT_STRING:
        snprintf(buf, cap, "a string");
        return;
    case PBTXT_NUMBER:
    case PBTXT_IDENT:
        snprintf(buf, cap, "'%.40s'", v->str);
        return;
    }
}

static int check_fields(vctx_t *c, const pbtxt_node_t *msg, const field_t *fields,
                        const char *prefix);

static int check_value(vctx_t *c, const pbtxt_node_t *node, const field_t *f, const char *full)
{
    pbtxt_node_t at = *node; /* messages point at the value, not the field name */
    at.line = node->vline;
    at.col = node->vcol;
    const pbtxt_node_t *v = &at;
    char got[64];
    value_desc(v, got, sizeof got);
    if (f->type == F_MSG) {
        if (v->kind != PBTXT_MESSAGE)
            return verr(c, HARK_ERR_FORMAT, v, full, "expected a message { ... }, got %s", got);
        return check_fields(c, node, f->sub, full);
    }
    if (v->kind == PBTXT_MESSAGE)
        return verr(c, HARK_ERR_FORMAT, v, full, "expected %s, got a message", type_word(f->type));
    int64_t i;
    uint64_t u;
    int b;
    int ok = 0;
    switch (f->type) {
    case F_STRING:
        ok = v->kind == PBTXT_STRING;
        break;
    case F_INT32:
        ok = !pbtxt_to_i64(v, &i) && i >= INT32_MIN && i <= INT32_MAX;
        break;
    case F_INT64:
        ok = !pbtxt_to_i64(v, &i);
        break;
    case F_UINT32:
        ok = !pbtxt_to_u64(v, &u) && u <= UINT32_MAX;
        break;
    case F_UINT64:
        ok = !pbtxt_to_u64(v, &u);
        break;
    case F_BOOL:
        ok = !pbtxt_to_bool(v, &b);
        break;
    case F_ENUM:
        if (v->kind == PBTXT_IDENT) {
            for (const char *const *e = f->sub; *e; e++)
                if (!strcmp(*e, v->str))
                    return HARK_OK;
            char list[200] = "";
            for (const char *const *e = f->sub; *e; e++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         e == f->sub ? "" : ", ", *e);
            return verr(c, HARK_ERR_FORMAT, v, full, "unknown value '%.40s' (one of %s)", v->str,
                        list);
        }
        break;
    case F_MSG:
    case F_IGNORED:
        ok = 1;
        break;
    }
    if (!ok) {
        if (v->kind == PBTXT_NUMBER && (f->type == F_UINT32 || f->type == F_UINT64) &&
            v->str[0] == '-')
            return verr(c, HARK_ERR_INVALID_ARG, v, full, "must be >= 0, got %.40s", v->str);
        return verr(c, HARK_ERR_FORMAT, v, full, "expected %s, got %s%s", type_word(f->type), got,
                    v->kind == PBTXT_NUMBER && f->type != F_STRING ? " (out of range)" : "");
    }
    return HARK_OK;
}

static int check_fields(vctx_t *c, const pbtxt_node_t *msg, const field_t *fields,
                        const char *prefix)
{
    for (const pbtxt_node_t *n = msg->child; n; n = n->next) {
        char full[160];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", n->name);
        const field_t *f = fields;
        while (f->name && strcmp(f->name, n->name))
            f++;
        if (!f->name)
            return err_set(c->err, HARK_ERR_FORMAT,
                           "%s:%d:%d: unknown field '%s' (not a field of Triton's %s)", c->path,
                           n->line, n->col, full, *prefix ? prefix : "ModelConfig");
        if (f->type == F_IGNORED) {
            notice(c, n, full);
            continue;
        }
        if (!f->repeated) {
            for (const pbtxt_node_t *p = msg->child; p != n; p = p->next)
                if (!strcmp(p->name, n->name))
                    return verr(c, HARK_ERR_FORMAT, n, full, "given twice (first at line %d)",
                                p->line);
            if (n->kind == PBTXT_LIST)
                return verr(c, HARK_ERR_FORMAT, n, full,
                            "is not a repeated field; a [ ... ] "
                            "list is not allowed");
        }
        int rc;
        if (n->kind == PBTXT_LIST) {
            for (const pbtxt_node_t *e = n->child; e; e = e->next)
                if ((rc = check_value(c, e, f, full)))
                    return rc;
        } else if ((rc = check_value(c, n, f, full))) {
            return rc;
        }
    }
    return HARK_OK;
}

/* ---- mapping the checked tree ------------------------------------------------------------ */
static const pbtxt_node_t *get(const pbtxt_node_t *msg, const char *name)
{
    for (const pbtxt_node_t *n = msg ? msg->child : NULL; n; n = n->next)
        if (!strcmp(n->name, name))
            return n;
    return NULL;
}

static int count_values(const pbtxt_node_t *msg, const char *name)
{
    int k = 0;
    for (const pbtxt_node_t *n = msg ? msg->child : NULL; n; n = n->next) {
        if (strcmp(n->name, name))
            continue;
        if (n->kind == PBTXT_LIST)
            for (const pbtxt_node_t *e = n->child; e; e = e->next)
                k++;
        else
            k++;
    }
    return k;
}

/* Collects the values of repeated field `name` into an array (arena). */
static int collect(arena_t *a, const pbtxt_node_t *msg, const char *name, const pbtxt_node_t ***out,
                   int *n)
{
    int k = count_values(msg, name);
    *n = k;
    *out = NULL;
    if (!k)
        return HARK_OK;
    const pbtxt_node_t **v = arena_alloc(a, (size_t)k * sizeof *v, 8);
    if (!v)
        return HARK_ERR_NOMEM;
    int i = 0;
    for (const pbtxt_node_t *f = msg->child; f; f = f->next) {
        if (strcmp(f->name, name))
            continue;
        if (f->kind == PBTXT_LIST)
            for (const pbtxt_node_t *e = f->child; e; e = e->next)
                v[i++] = e;
        else
            v[i++] = f;
    }
    *out = v;
    return HARK_OK;
}

static const char *get_str(const pbtxt_node_t *msg, const char *name)
{
    const pbtxt_node_t *n = get(msg, name);
    return n ? n->str : "";
}
static int64_t get_i64(const pbtxt_node_t *msg, const char *name, int64_t dflt)
{
    const pbtxt_node_t *n = get(msg, name);
    int64_t v = dflt;
    if (n)
        pbtxt_to_i64(n, &v);
    return v;
}
static uint64_t get_u64(const pbtxt_node_t *msg, const char *name, uint64_t dflt)
{
    const pbtxt_node_t *n = get(msg, name);
    uint64_t v = dflt;
    if (n)
        pbtxt_to_u64(n, &v);
    return v;
}
static int get_bool(const pbtxt_node_t *msg, const char *name)
{
    const pbtxt_node_t *n = get(msg, name);
    int v = 0;
    if (n)
        pbtxt_to_bool(n, &v);
    return v;
}
static int get_enum(const pbtxt_node_t *msg, const char *name, const char *const *values)
{
    const pbtxt_node_t *n = get(msg, name);
    if (!n)
        return 0;
    for (int i = 0; values[i]; i++)
        if (!strcmp(values[i], n->str))
            return i;
    return 0;
}

static char *dup_str(model_config_t *cfg, const char *s)
{
    return arena_strndup(&cfg->arena, s, strlen(s));
}

static int map_io(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root, const char *field,
                  model_io_t **out, int *n_out)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, field, &v, &n)))
        return rc;
    *n_out = n;
    *out = n ? arena_calloc(&cfg->arena, (size_t)n, sizeof **out) : NULL;
    if (n && !*out)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        model_io_t *io = &(*out)[i];
        char f[64];
        io->line = v[i]->line;
        io->name = dup_str(cfg, get_str(v[i], "name"));
        if (!io->name)
            return HARK_ERR_NOMEM;
        if (!io->name[0]) {
            snprintf(f, sizeof f, "%s.name", field);
            return verr(c, HARK_ERR_INVALID_ARG, v[i], f, "every %s needs a non-empty name", field);
        }
        for (int j = 0; j < i; j++)
            if (!strcmp((*out)[j].name, io->name)) {
                snprintf(f, sizeof f, "%s.name", field);
                return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "name"), f,
                            "'%s' is declared twice (first at line %d)", io->name, (*out)[j].line);
            }
        io->data_type = (model_data_type_t)get_enum(v[i], "data_type", DATA_TYPES);
        if (io->data_type == MODEL_TYPE_INVALID) {
            snprintf(f, sizeof f, "%s.data_type", field);
            const pbtxt_node_t *at = get(v[i], "data_type");
            return verr(c, HARK_ERR_INVALID_ARG, at ? at : v[i], f, "%s '%s' needs a data_type",
                        field, io->name);
        }
        const pbtxt_node_t **d;
        if ((rc = collect(&cfg->arena, v[i], "dims", &d, &io->ndims)))
            return rc;
        io->dims = io->ndims ? arena_alloc(&cfg->arena, (size_t)io->ndims * 8, 8) : NULL;
        if (io->ndims && !io->dims)
            return HARK_ERR_NOMEM;
        for (int k = 0; k < io->ndims; k++) {
            pbtxt_to_i64(d[k], &io->dims[k]);
            if (io->dims[k] < 1 && io->dims[k] != -1) {
                snprintf(f, sizeof f, "%s.dims", field);
                return verr(c, HARK_ERR_INVALID_ARG, d[k], f,
                            "%s '%s': dimension %" PRId64 " must be >= 1, or -1 for a variable "
                            "size",
                            field, io->name, io->dims[k]);
            }
        }
        if (get(v[i], "reshape")) {
            snprintf(f, sizeof f, "%s.reshape", field);
            notice(c, get(v[i], "reshape"), f);
        }
        if (get(v[i], "format")) {
            snprintf(f, sizeof f, "%s.format", field);
            notice(c, get(v[i], "format"), f);
        }
    }
    return HARK_OK;
}

static int map_dynamic(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *db)
{
    model_dynamic_batching_t *d = &cfg->dynamic_batching;
    d->present = 1;
    const pbtxt_node_t **v;
    int rc;
    if ((rc = collect(&cfg->arena, db, "preferred_batch_size", &v, &d->n_preferred)))
        return rc;
    d->preferred_batch_size =
        d->n_preferred ? arena_alloc(&cfg->arena, (size_t)d->n_preferred * 4, 4) : NULL;
    if (d->n_preferred && !d->preferred_batch_size)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < d->n_preferred; i++) {
        int64_t b;
        pbtxt_to_i64(v[i], &b);
        if (b < 1)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "dynamic_batching.preferred_batch_size",
                        "must be >= 1, got %" PRId64, b);
        if (b > cfg->max_batch_size)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "dynamic_batching.preferred_batch_size",
                        "%" PRId64 " exceeds max_batch_size %d", b, cfg->max_batch_size);
        d->preferred_batch_size[i] = (int32_t)b;
    }
    d->max_queue_delay_microseconds = get_u64(db, "max_queue_delay_microseconds", 0);
    d->preserve_ordering = get_bool(db, "preserve_ordering");
    d->priority_levels = get_u64(db, "priority_levels", 0);
    d->default_priority_level = get_u64(db, "default_priority_level", 0);
    /* as Triton: with priorities on, the default level must be one of them */
    const pbtxt_node_t *dp = get(db, "default_priority_level");
    if (d->priority_levels &&
        (d->default_priority_level < 1 || d->default_priority_level > d->priority_levels))
        return verr(c, HARK_ERR_INVALID_ARG, dp ? dp : db,
                    "dynamic_batching.default_priority_level",
                    "%" PRIu64 " is not a level in [1, priority_levels=%" PRIu64 "]",
                    d->default_priority_level, d->priority_levels);
    const pbtxt_node_t *qp = get(db, "default_queue_policy");
    if (qp) {
        model_queue_policy_t *q = &d->default_queue_policy;
        q->timeout_action = (model_timeout_action_t)get_enum(qp, "timeout_action", TIMEOUT_ACTIONS);
        q->default_timeout_microseconds = get_u64(qp, "default_timeout_microseconds", 0);
        q->allow_timeout_override = get_bool(qp, "allow_timeout_override");
        q->max_queue_size = (uint32_t)get_u64(qp, "max_queue_size", 0);
    }
    return HARK_OK;
}

/* sequence_batching: the strategy (direct, the default, or oldest), its batch sizes and delay,
 * and the control inputs (kept for the config document: hark passes sequence controls to the
 * scheduler, not as tensors) */
static int map_sequence(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *sb)
{
    model_sequence_batching_t *q = &cfg->seq;
    const pbtxt_node_t *direct = get(sb, "direct"), *oldest = get(sb, "oldest");
    if (direct && oldest)
        return verr(c, HARK_ERR_FORMAT, oldest, "sequence_batching.oldest",
                    "cannot be combined with 'direct' (line %d): Triton's strategy_choice is one "
                    "of direct, oldest",
                    direct->line);
    q->oldest = oldest != NULL;
    const pbtxt_node_t *st = oldest ? oldest : direct;
    q->max_queue_delay_microseconds = get_u64(st, "max_queue_delay_microseconds", 0);
    int rc;
    if (oldest) {
        const pbtxt_node_t *mc = get(oldest, "max_candidate_sequences");
        int64_t n = get_i64(oldest, "max_candidate_sequences", 0);
        if (!mc || n < 1)
            return verr(c, HARK_ERR_INVALID_ARG, mc ? mc : oldest,
                        "sequence_batching.oldest.max_candidate_sequences",
                        "must be given and >= 1, got %" PRId64, n);
        if (n > 4096)
            return verr(c, HARK_ERR_INVALID_ARG, mc,
                        "sequence_batching.oldest.max_candidate_sequences",
                        "%" PRId64 " exceeds hark's 4096", n);
        q->max_candidate_sequences = (int)n;
        const pbtxt_node_t **v;
        if ((rc = collect(&cfg->arena, oldest, "preferred_batch_size", &v, &q->n_preferred)))
            return rc;
        q->preferred_batch_size =
            q->n_preferred ? arena_alloc(&cfg->arena, (size_t)q->n_preferred * 4, 4) : NULL;
        if (q->n_preferred && !q->preferred_batch_size)
            return HARK_ERR_NOMEM;
        for (int i = 0; i < q->n_preferred; i++) {
            int64_t b;
            pbtxt_to_i64(v[i], &b);
            if (b < 1 || (i && b <= q->preferred_batch_size[i - 1]))
                return verr(c, HARK_ERR_INVALID_ARG, v[i],
                            "sequence_batching.oldest.preferred_batch_size",
                            "must be >= 1 and ascending, got %" PRId64, b);
            q->preferred_batch_size[i] = (int32_t)b;
        }
    }
    const pbtxt_node_t **ci;
    if ((rc = collect(&cfg->arena, sb, "control_input", &ci, &q->n_controls)))
        return rc;
    q->controls = q->n_controls
                      ? arena_calloc(&cfg->arena, (size_t)q->n_controls, sizeof *q->controls)
                      : NULL;
    if (q->n_controls && !q->controls)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < q->n_controls; i++) {
        model_seq_control_t *k = &q->controls[i];
        if (!(k->name = dup_str(cfg, get_str(ci[i], "name"))))
            return HARK_ERR_NOMEM;
        const pbtxt_node_t *ctl = get(ci[i], "control");
        if (ctl && ctl->kind == PBTXT_LIST)
            ctl = ctl->child;
        if (!ctl || !get(ctl, "kind"))
            return verr(c, HARK_ERR_INVALID_ARG, ci[i], "sequence_batching.control_input",
                        "'%s' needs a control with a kind", k->name);
        k->kind = (model_seq_control_kind_t)get_enum(ctl, "kind", CONTROL_KINDS);
        k->data_type = (model_data_type_t)get_enum(ctl, "data_type", DATA_TYPES);
    }
    return HARK_OK;
}

static int map_instance_groups(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, "instance_group", &v, &n)))
        return rc;
    cfg->n_instance_groups = n ? n : 1;
    cfg->instance_groups =
        arena_calloc(&cfg->arena, (size_t)cfg->n_instance_groups, sizeof *cfg->instance_groups);
    if (!cfg->instance_groups)
        return HARK_ERR_NOMEM;
    if (!n) { /* Triton's default: one instance, on a GPU when there is one */
        cfg->instance_groups[0].count = 1;
        cfg->instance_groups[0].kind = MODEL_KIND_AUTO;
        return HARK_OK;
    }
    for (int i = 0; i < n; i++) {
        model_instance_group_t *g = &cfg->instance_groups[i];
        g->name = get(v[i], "name") ? dup_str(cfg, get_str(v[i], "name")) : NULL;
        int64_t count = get_i64(v[i], "count", 1); /* absent: one instance */
        if (count < 1) /* count: 0 written out would run nothing: refused, not taken for 1 */
            return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "count"), "instance_group.count",
                        "must be >= 1 (leave it out for one instance), got %" PRId64, count);
        g->count = (int)count;
        g->kind = (model_kind_t)get_enum(v[i], "kind", KINDS);
        const pbtxt_node_t **gv;
        if ((rc = collect(&cfg->arena, v[i], "gpus", &gv, &g->n_gpus)))
            return rc;
        g->gpus = g->n_gpus ? arena_alloc(&cfg->arena, (size_t)g->n_gpus * 4, 4) : NULL;
        if (g->n_gpus && !g->gpus)
            return HARK_ERR_NOMEM;
        for (int k = 0; k < g->n_gpus; k++) {
            int64_t id;
            pbtxt_to_i64(gv[k], &id);
            if (id < 0)
                return verr(c, HARK_ERR_INVALID_ARG, gv[k], "instance_group.gpus",
                            "device id must be >= 0, got %" PRId64, id);
            g->gpus[k] = (int32_t)id;
        }
        if (g->n_gpus && g->kind == MODEL_KIND_CPU)
            return verr(c, HARK_ERR_INVALID_ARG, get(v[i], "gpus"), "instance_group.gpus",
                        "a KIND_CPU group cannot list gpus");
    }
    return HARK_OK;
}

static int map_params(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root)
{
    const pbtxt_node_t **v;
    int n, rc;
    if ((rc = collect(&cfg->arena, root, "parameters", &v, &n)))
        return rc;
    cfg->n_params = n;
    cfg->params = n ? arena_calloc(&cfg->arena, (size_t)n, sizeof *cfg->params) : NULL;
    if (n && !cfg->params)
        return HARK_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        const pbtxt_node_t *key = get(v[i], "key");
        if (!key || !key->len)
            return verr(c, HARK_ERR_INVALID_ARG, v[i], "parameters.key",
                        "every parameter needs a non-empty key");
        if (strlen(key->str) != key->len)
            return verr(c, HARK_ERR_INVALID_ARG, key, "parameters.key", "contains a NUL byte");
        for (int j = 0; j < i; j++)
            if (!strcmp(cfg->params[j].key, key->str))
                return verr(c, HARK_ERR_INVALID_ARG, key, "parameters.key",
                            "'%.60s' is given twice (first at line %d)", key->str, v[j]->line);
        cfg->params[i].key = dup_str(cfg, key->str);
        cfg->params[i].value = dup_str(cfg, get_str(get(v[i], "value"), "string_value"));
        if (!cfg->params[i].key || !cfg->params[i].value)
            return HARK_ERR_NOMEM;
    }
    return HARK_OK;
}

static int map_version_policy(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *vp)
{
    cfg->version_policy = MODEL_VERSIONS_LATEST;
    cfg->latest_num_versions = 1;
    if (!vp)
        return HARK_OK;
    int k = !!get(vp, "latest") + !!get(vp, "all") + !!get(vp, "specific");
    if (k > 1)
        return verr(c, HARK_ERR_FORMAT, vp, "version_policy",
                    "give only one of latest, all, specific");
    if (get(vp, "all")) {
        cfg->version_policy = MODEL_VERSIONS_ALL;
    } else if (get(vp, "specific")) {
        const pbtxt_node_t *sp = get(vp, "specific");
        const pbtxt_node_t **v;
        int rc;
        cfg->version_policy = MODEL_VERSIONS_SPECIFIC;
        if ((rc = collect(&cfg->arena, sp, "versions", &v, &cfg->n_specific_versions)))
            return rc;
        if (!cfg->n_specific_versions)
            return verr(c, HARK_ERR_INVALID_ARG, sp, "version_policy.specific.versions",
                        "list at least one version");
        cfg->specific_versions = arena_alloc(&cfg->arena, (size_t)cfg->n_specific_versions * 8, 8);
        if (!cfg->specific_versions)
            return HARK_ERR_NOMEM;
        for (int i = 0; i < cfg->n_specific_versions; i++) {
            pbtxt_to_i64(v[i], &cfg->specific_versions[i]);
            if (cfg->specific_versions[i] < 1)
                return verr(c, HARK_ERR_INVALID_ARG, v[i], "version_policy.specific.versions",
                            "must be >= 1, got %" PRId64, cfg->specific_versions[i]);
        }
    } else if (get(vp, "latest")) {
        const pbtxt_node_t *l = get(vp, "latest");
        uint64_t nv = get_u64(l, "num_versions", 0);
        if (nv < 1)
            return verr(c, HARK_ERR_INVALID_ARG,
                        get(l, "num_versions") ? get(l, "num_versions") : l,
                        "version_policy.latest.num_versions", "must be >= 1");
        cfg->latest_num_versions = (uint32_t)nv;
    }
    return HARK_OK;
}

static int map_config(vctx_t *c, model_config_t *cfg, const pbtxt_node_t *root,
                      const char *default_name)
{
    int rc;
    const pbtxt_node_t *mb = get(root, "max_batch_size");
    int64_t mbs = get_i64(root, "max_batch_size", 0);
    if (mbs < 0)
        return verr(c, HARK_ERR_INVALID_ARG, mb, "max_batch_size", "must be >= 0, got %" PRId64,
                    mbs);
    cfg->max_batch_size = (int)mbs;
    const char *name = get_str(root, "name");
    cfg->name = dup_str(cfg, name[0] ? name : default_name ? default_name : "");
    cfg->platform = dup_str(cfg, get_str(root, "platform"));
    cfg->backend = dup_str(cfg, get_str(root, "backend"));
    if (!cfg->name || !cfg->platform || !cfg->backend)
        return HARK_ERR_NOMEM;
    if ((rc = map_io(c, cfg, root, "input", &cfg->inputs, &cfg->n_inputs)) ||
        (rc = map_io(c, cfg, root, "output", &cfg->outputs, &cfg->n_outputs)))
        return rc;
    /* oneof scheduling_choice */
    const char *sched[] = {"dynamic_batching", "sequence_batching", "ensemble_scheduling"};
    const pbtxt_node_t *first = NULL;
    for (int i = 0; i < 3; i++) {
        const pbtxt_node_t *s = get(root, sched[i]);
        if (s && first)
            return verr(c, HARK_ERR_FORMAT, s, s->name,
                        "cannot be combined with '%s' (line %d): Triton's scheduling_choice is "
                        "one of dynamic_batching, sequence_batching, ensemble_scheduling",
                        first->name, first->line);
        if (s)
            first = s;
    }
    if (get(root, "dynamic_batching") && (rc = map_dynamic(c, cfg, get(root, "dynamic_batching"))))
        return rc;
    const pbtxt_node_t *sb = get(root, "sequence_batching");
    cfg->sequence_batching = sb != NULL;
    cfg->max_sequence_idle_microseconds = get_u64(sb, "max_sequence_idle_microseconds", 1000000);
    if (sb && (rc = map_sequence(c, cfg, sb)))
        return rc;
    if ((rc = map_instance_groups(c, cfg, root)) || (rc = map_params(c, cfg, root)) ||
        (rc = map_version_policy(c, cfg, get(root, "version_policy"))))
        return rc;
    cfg->decoupled = get_bool(get(root, "model_transaction_policy"), "decoupled");
    cfg->response_cache = get_bool(get(root, "response_cache"), "enable");

    /* the hark model family */
    const char *fam = model_config_param(cfg, "family");
    if (!strcmp(cfg->backend, "hark")) {
        if (!fam || !fam[0]) {
            const pbtxt_node_t *b = get(root, "backend");
            return verr(c, HARK_ERR_INVALID_ARG, b, "backend",
                        "backend \"hark\" needs parameters { key: \"family\" value { "
                        "string_value: \"<name>\" } } naming the model family (hark inspect --help "
                        "lists them)");
        }
        cfg->family = fam;
    } else if (!cfg->backend[0] && cfg->platform[0]) {
        cfg->family = cfg->platform;
    } else {
        cfg->family = NULL;
    }
    /* default instance group names, as Triton gives them */
    for (int i = 0; i < cfg->n_instance_groups; i++) {
        model_instance_group_t *g = &cfg->instance_groups[i];
        if (g->name && g->name[0])
            continue;
        char nm[300];
        snprintf(nm, sizeof nm, "%s_%d", cfg->name, i);
        if (!(g->name = dup_str(cfg, nm)))
            return HARK_ERR_NOMEM;
    }
    return HARK_OK;
}

static int parse_impl(const char *text, size_t len, const char *path, const char *default_name,
                      const model_config_opts_t *opts, model_config_t *cfg, hark_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!path)
        path = "config.pbtxt";
    arena_init(&cfg->arena, 16384);
    arena_t tree;
    arena_init(&tree, 16384);
    pbtxt_node_t *root;
    vctx_t *c = hark_calloc(1, sizeof *c); /* ~6 KiB of notice memory: keep it off the stack */
    int rc = c ? HARK_OK : HARK_ERR_NOMEM;
    if (rc == HARK_OK) {
        c->path = path;
        c->err = err;
        c->opts = opts;
        rc = pbtxt_parse(text, len, path, &tree, &root, err);
    }
    if (rc == HARK_OK)
        rc = check_fields(c, root, F_CONFIG, "");
    if (rc == HARK_OK)
        rc = map_config(c, cfg, root, default_name);
    if (rc == HARK_ERR_NOMEM && (!err || err->status != HARK_ERR_NOMEM))
        err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    hark_free(c);
    arena_free(&tree);
    if (rc) {
        arena_free(&cfg->arena);
        memset(cfg, 0, sizeof *cfg);
    }
    return rc;
}

int model_config_parse(const char *text, size_t len, const char *path,
                       const model_config_opts_t *opts, model_config_t *cfg, hark_err_t *err)
{
    return parse_impl(text, len, path, NULL, opts, cfg, err);
}

int model_config_load(const char *path, const model_config_opts_t *opts, model_config_t *cfg,
                      hark_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(err, HARK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const size_t max = 16u << 20;
    char *buf = hark_malloc(max + 1);
    if (!buf) {
        fclose(f);
        return err_set(err, HARK_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > max) {
        hark_free(buf);
        return bad ? err_set(err, HARK_ERR_IO, "%s: read error", path)
                   : err_set(err, HARK_ERR_TOO_LARGE, "%s: larger than 16 MiB", path);
    }
    /* the directory holding config.pbtxt names the model when the file does not */
    char dir[512] = "";
    const char *slash = strrchr(path, '/');
    if (slash) {
        const char *e = slash;
        while (e > path && e[-1] == '/')
            e--;
        const char *b = e;
        while (b > path && b[-1] != '/')
            b--;
        snprintf(dir, sizeof dir, "%.*s", (int)(e - b), b);
    }
    int rc = parse_impl(buf, n, path, dir[0] && strcmp(dir, ".") ? dir : NULL, opts, cfg, err);
    hark_free(buf);
    return rc;
}

void model_config_free(model_config_t *cfg)
{
    if (!cfg)
        return;
    arena_free(&cfg->arena);
    memset(cfg, 0, sizeof *cfg);
}

const char *model_config_param(const model_config_t *cfg, const char *key)
{
    for (int i = 0; i < cfg->n_params; i++)
        if (!strcmp(cfg->params[i].key, key))
            return cfg->params[i].value;
    return NULL;
}

static const model_io_t *find_io(const model_io_t *io, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(io[i].name, name))
            return &io[i];
    return NULL;
}
const model_io_t *model_config_input(const model_config_t *cfg, const char *name)
{
    return find_io(cfg->inputs, cfg->n_inputs, name);
}
const model_io_t *model_config_output(const model_config_t *cfg, const char *name)
{
    return find_io(cfg->outputs, cfg->n_outputs, name);
}

const char *model_data_type_name(model_data_type_t t)
{
    return dtype_config_name(t);
}
const char *model_data_type_kserve(model_data_type_t t)
{
    return dtype_kserve_name(t);
}
size_t model_data_type_size(model_data_type_t t)
{
    return dtype_size(t);
}

/* ============================================================================================
 * JSON (GET /v2/models/<m>/config)
 * ========================================================================================== */
static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

static cJSON *int32_array(const int32_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* cJSON builders return NULL on allocation failure; `ok` collects them. */
#define ADD(obj, key, item)                                                                        \
    do {                                                                                           \
        cJSON *it_ = (item);                                                                       \
        if (!it_ || !cJSON_AddItemToObject((obj), (key), it_)) {                                   \
            cJSON_Delete(it_);                                                                     \
            goto oom;                                                                              \
        }                                                                                          \
    } while (0)

static cJSON *io_json(const model_io_t *io, int is_input)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(io->name));
    ADD(o, "data_type", cJSON_CreateString(model_data_type_name(io->data_type)));
    if (is_input)
        ADD(o, "format", cJSON_CreateString("FORMAT_NONE"));
    ADD(o, "dims", int_array(io->dims, io->ndims));
    if (is_input) {
        ADD(o, "is_shape_tensor", cJSON_CreateFalse());
        ADD(o, "allow_ragged_batch", cJSON_CreateFalse());
        ADD(o, "optional", cJSON_CreateFalse());
    } else {
        ADD(o, "label_filename", cJSON_CreateString(""));
        ADD(o, "is_shape_tensor", cJSON_CreateFalse());
    }
    return o;
oom:
    cJSON_Delete(o);
    return NULL;
}

static cJSON *config_json(const model_config_t *cfg)
{
    cJSON *o = cJSON_CreateObject(), *x, *y;
    if (!o)
        return NULL;
    ADD(o, "name", cJSON_CreateString(cfg->name));
    ADD(o, "platform", cJSON_CreateString(cfg->platform));
    ADD(o, "backend", cJSON_CreateString(cfg->backend));
    ADD(o, "version_policy", x = cJSON_CreateObject());
    if (cfg->version_policy == MODEL_VERSIONS_ALL) {
        ADD(x, "all", cJSON_CreateObject());
    } else if (cfg->version_policy == MODEL_VERSIONS_SPECIFIC) {
        ADD(x, "specific", y = cJSON_CreateObject());
        ADD(y, "versions", int_array(cfg->specific_versions, cfg->n_specific_versions));
    } else {
        ADD(x, "latest", y = cJSON_CreateObject());
        ADD(y, "num_versions", cJSON_CreateNumber(cfg->latest_num_versions));
    }
    ADD(o, "max_batch_size", cJSON_CreateNumber(cfg->max_batch_size));
    ADD(o, "input", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_inputs; i++)
        if (!cJSON_AddItemToArray(x, io_json(&cfg->inputs[i], 1)))
            goto oom;
    ADD(o, "output", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_outputs; i++)
        if (!cJSON_AddItemToArray(x, io_json(&cfg->outputs[i], 0)))
            goto oom;
    ADD(o, "batch_input", cJSON_CreateArray());
    ADD(o, "batch_output", cJSON_CreateArray());
    if (cfg->dynamic_batching.present) {
        const model_dynamic_batching_t *d = &cfg->dynamic_batching;
        const model_queue_policy_t *q = &d->default_queue_policy;
        ADD(o, "dynamic_batching", x = cJSON_CreateObject());
        ADD(x, "preferred_batch_size", int32_array(d->preferred_batch_size, d->n_preferred));
        ADD(x, "max_queue_delay_microseconds",
            cJSON_CreateNumber((double)d->max_queue_delay_microseconds));
        ADD(x, "preserve_ordering", cJSON_CreateBool(d->preserve_ordering));
        ADD(x, "priority_levels", cJSON_CreateNumber((double)d->priority_levels));
        ADD(x, "default_priority_level", cJSON_CreateNumber((double)d->default_priority_level));
        ADD(x, "default_queue_policy", y = cJSON_CreateObject());
        ADD(y, "timeout_action", cJSON_CreateString(TIMEOUT_ACTIONS[q->timeout_action]));
        ADD(y, "default_timeout_microseconds",
            cJSON_CreateNumber((double)q->default_timeout_microseconds));
        ADD(y, "allow_timeout_override", cJSON_CreateBool(q->allow_timeout_override));
        ADD(y, "max_queue_size", cJSON_CreateNumber(q->max_queue_size));
        ADD(x, "priority_queue_policy", cJSON_CreateObject());
    }
    if (cfg->sequence_batching) {
        ADD(o, "sequence_batching", x = cJSON_CreateObject());
        ADD(x, "max_sequence_idle_microseconds",
            cJSON_CreateNumber((double)cfg->max_sequence_idle_microseconds));
        ADD(x, "control_input", y = cJSON_CreateArray());
        for (int i = 0; i < cfg->seq.n_controls; i++) {
            const model_seq_control_t *k = &cfg->seq.controls[i];
            cJSON *e = cJSON_CreateObject(), *ca, *ce;
            if (!cJSON_AddItemToArray(y, e))
                goto oom;
            ADD(e, "name", cJSON_CreateString(k->name));
            ADD(e, "control", ca = cJSON_CreateArray());
            if (!cJSON_AddItemToArray(ca, ce = cJSON_CreateObject()))
                goto oom;
            ADD(ce, "kind", cJSON_CreateString(CONTROL_KINDS[k->kind]));
            if (k->kind == MODEL_CONTROL_CORRID)
                ADD(ce, "data_type", cJSON_CreateString(DATA_TYPES[k->data_type]));
        }
        ADD(x, "state", cJSON_CreateArray());
        if (cfg->seq.oldest) {
            ADD(x, "oldest", y = cJSON_CreateObject());
            ADD(y, "max_candidate_sequences", cJSON_CreateNumber(cfg->seq.max_candidate_sequences));
            ADD(y, "preferred_batch_size",
                int32_array(cfg->seq.preferred_batch_size, cfg->seq.n_preferred));
        } else {
            ADD(x, "direct", y = cJSON_CreateObject());
        }
        ADD(y, "max_queue_delay_microseconds",
            cJSON_CreateNumber((double)cfg->seq.max_queue_delay_microseconds));
        ADD(x, "iterative_sequence", cJSON_CreateFalse());
    }
    ADD(o, "instance_group", x = cJSON_CreateArray());
    for (int i = 0; i < cfg->n_instance_groups; i++) {
        const model_instance_group_t *g = &cfg->instance_groups[i];
        y = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(x, y))
            goto oom_y;
        ADD(y, "name", cJSON_CreateString(g->name ? g->name : ""));
        ADD(y, "kind", cJSON_CreateString(KINDS[g->kind]));
        ADD(y, "count", cJSON_CreateNumber(g->count));
        ADD(y, "gpus", int32_array(g->gpus, g->n_gpus));
        ADD(y, "secondary_devices", cJSON_CreateArray());
        ADD(y, "profile", cJSON_CreateArray());
        ADD(y, "passive", cJSON_CreateFalse());
        ADD(y, "host_policy", cJSON_CreateString(""));
    }
    ADD(o, "default_model_filename", cJSON_CreateString(""));
    ADD(o, "cc_model_filenames", cJSON_CreateObject());
    ADD(o, "metric_tags", cJSON_CreateObject());
    ADD(o, "parameters", x = cJSON_CreateObject());
    for (int i = 0; i < cfg->n_params; i++) {
        ADD(x, cfg->params[i].key, y = cJSON_CreateObject());
        ADD(y, "string_value", cJSON_CreateString(cfg->params[i].value));
    }
    ADD(o, "model_warmup", cJSON_CreateArray());
    ADD(o, "model_transaction_policy", x = cJSON_CreateObject());
    ADD(x, "decoupled", cJSON_CreateBool(cfg->decoupled));
    ADD(o, "response_cache", x = cJSON_CreateObject());
    ADD(x, "enable", cJSON_CreateBool(cfg->response_cache));
    return o;
oom_y:
    cJSON_Delete(y);
oom:
    cJSON_Delete(o);
    return NULL;
}

char *model_config_to_json(const model_config_t *cfg)
{
    cJSON *o = config_json(cfg);
    if (!o)
        return NULL;
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        return NULL;
    char *r = hark_strdup(s);
    cJSON_free(s);
    return r;
}

int model_config_vocoder_dir(const char *model_dir, char *out, size_t n, hark_err_t *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.pbtxt", model_dir);
    model_config_t cfg = {0};
    int rc = model_config_load(path, NULL, &cfg, err);
    if (rc)
        return rc;
    const char *v = model_config_param(&cfg, "vocoder");
    if (!v || !*v)
        rc = err_set(err, HARK_ERR_NOT_FOUND,
                     "%s names no vocoder (parameters { key: \"vocoder\" })", path);
    else if (v[0] == '/')
        snprintf(out, n, "%s", v);
    else {
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s", model_dir);
        size_t l = strlen(tmp);
        while (l > 1 && tmp[l - 1] == '/')
            tmp[--l] = 0;
        char *slash = strrchr(tmp, '/');
        if (slash)
            *slash = 0;
        snprintf(out, n, "%s/%s", slash ? tmp : ".", v);
    }
    model_config_free(&cfg);
    return rc;
}
