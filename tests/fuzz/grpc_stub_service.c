/* grpc_stub_service.c — a fixed, synchronous implementation of service.h for driving the gRPC
 * layer without a model repository: the fuzz target (fuzz_grpc.c) links it instead of the
 * server. Model "m" is ready; infer echoes its first input as output "OUT" and adds a BYTES
 * output "TRANSCRIPTS" = ["stub"]; model "busy" answers AGAIN, "slow" TIMEOUT. */
#include "api/service.h"
#include "server/server.h"
#include "core/alloc.h"
#include "hark.h"

#include <string.h>

static char *dup(const char *s)
{
    return hark_strdup(s);
}

int service_status_http(int status)
{
    return status ? 500 : 200;
}
int service_live(server_t *s)
{
    return 1;
}
int service_ready(server_t *s)
{
    return 1;
}
int service_model_ready(server_t *s, const char *model, const char *version, hark_err_t *err)
{
    return model && !strcmp(model, "m");
}
int service_server_metadata(server_t *s, char **json, hark_err_t *err)
{
    *json = dup("{\"name\":\"hark\",\"version\":\"0\",\"extensions\":[\"statistics\"]}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
static int need_m(const char *model, hark_err_t *err)
{
    if (model && model[0] && strcmp(model, "m"))
        return err_set(err, HARK_ERR_NOT_FOUND, "unknown model '%s'", model);
    return HARK_OK;
}
int service_model_metadata(server_t *s, const char *model, const char *version, char **json,
                           hark_err_t *err)
{
    int rc = need_m(model, err);
    if (rc)
        return rc;
    *json = dup("{\"name\":\"m\",\"versions\":[\"1\"],\"platform\":\"hark\",\"inputs\":[{\"name\":"
                "\"WAV\",\"datatype\":\"FP32\",\"shape\":[-1,-1]}],\"outputs\":[{\"name\":"
                "\"TRANSCRIPTS\",\"datatype\":\"BYTES\",\"shape\":[-1,1]}]}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
int service_model_config(server_t *s, const char *model, const char *version, char **json,
                         hark_err_t *err)
{
    int rc = need_m(model, err);
    if (rc)
        return rc;
    *json =
        dup("{\"name\":\"m\",\"platform\":\"hark\",\"backend\":\"hark\",\"max_batch_size\":8,"
            "\"input\":[{\"name\":\"WAV\",\"data_type\":\"TYPE_FP32\",\"dims\":[-1]}],"
            "\"output\":[{\"name\":\"TRANSCRIPTS\",\"data_type\":\"TYPE_STRING\",\"dims\":[1]}],"
            "\"instance_group\":[{\"count\":1,\"kind\":\"KIND_CPU\"}],"
            "\"dynamic_batching\":{\"max_queue_delay_microseconds\":1000},"
            "\"parameters\":{\"family\":{\"string_value\":\"wenet\"}},"
            "\"model_transaction_policy\":{\"decoupled\":false},"
            "\"response_cache\":{\"enable\":false}}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
int service_model_stats(server_t *s, const char *model, const char *version, char **json,
                        hark_err_t *err)
{
    int rc = need_m(model, err);
    if (rc)
        return rc;
    *json =
        dup("{\"model_stats\":[{\"name\":\"m\",\"version\":\"1\",\"last_inference\":0,"
            "\"inference_count\":3,\"execution_count\":2,\"inference_stats\":{\"success\":"
            "{\"count\":3,\"ns\":100},\"queue\":{\"count\":3,\"ns\":10}},\"batch_stats\":[]}]}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
int service_repository_index(server_t *s, int ready_only, char **json, hark_err_t *err)
{
    *json = dup("[{\"name\":\"m\",\"version\":\"1\",\"state\":\"READY\",\"reason\":\"\"}]");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
void service_repository_load(server_t *s, const char *model, int load, service_done_fn done,
                             void *user)
{
    if (strcmp(model, "m"))
        done(user, HARK_ERR_NOT_FOUND, "no such model");
    else
        done(user, HARK_OK, NULL);
}
void service_infer(server_t *s, const service_infer_t *in)
{
    kserve_request_t *r = in->req;
    int st = HARK_OK;
    const char *msg = NULL;
    if (need_m(in->model, NULL))
        st = HARK_ERR_NOT_FOUND, msg = "unknown model";
    else if (!in->model || !in->model[0])
        st = HARK_ERR_INVALID_ARG, msg = "model_name is required";
    else if (r->n_inputs < 1)
        st = HARK_ERR_INVALID_ARG, msg = "no input";
    else if (r->inputs[0].shm_region) /* the stub has no regions: as an unknown one */
        st = HARK_ERR_INVALID_ARG, msg = "unknown shared memory region";
    else if (in->cancelled && atomic_load(in->cancelled))
        st = HARK_ERR_CANCELLED, msg = "cancelled";
    if (st) {
        in->done(in->user, st, msg, in->model, "1", NULL, 0);
    } else {
        const kserve_tensor_t *t = &r->inputs[0];
        const char *strs[1] = {"stub"};
        size_t lens[1] = {4}, bsz;
        uint8_t *b = kserve_bytes_pack(strs, lens, 1, &bsz);
        int64_t one[2] = {1, 1};
        kserve_output_t outs[2] = {
            {"OUT", t->dtype, t->ndim, t->shape, t->data, t->size},
            {"TRANSCRIPTS", KSERVE_BYTES, 2, one, b, bsz},
        };
        in->done(in->user, HARK_OK, NULL, in->model, "1", outs, b ? 2 : 1);
        hark_free(b);
    }
    kserve_request_free(r);
    if (in->body_free)
        in->body_free(in->body_user);
}

/* Triton's extensions: fixed settings, one region "r" that any register names again */
int service_log_settings(server_t *s, const struct cJSON *update, char **json, hark_err_t *err)
{
    *json = dup("{\"log_file\":\"\",\"log_info\":true,\"log_warning\":true,\"log_error\":"
                "true,\"log_verbose_level\":0,\"log_format\":\"default\"}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
int service_trace_settings(server_t *s, const char *model, const struct cJSON *update, char **json,
                           hark_err_t *err)
{
    int rc = need_m(model, err);
    if (rc)
        return rc;
    *json = dup("{\"trace_level\":[\"OFF\"],\"trace_rate\":\"1000\",\"trace_count\":\"-1\","
                "\"log_frequency\":\"0\",\"trace_file\":\"\",\"trace_mode\":\"triton\"}");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
int service_shm_register(server_t *s, const char *name, const char *key, uint64_t offset,
                         uint64_t byte_size, hark_err_t *err)
{
    if (!name[0] || !byte_size)
        return err_set(err, HARK_ERR_INVALID_ARG, "bad region");
    return HARK_OK;
}
int service_shm_status(server_t *s, const char *name, char **json, hark_err_t *err)
{
    if (name && name[0] && strcmp(name, "r"))
        return err_set(err, HARK_ERR_NOT_FOUND, "unknown region");
    *json = dup("[{\"name\":\"r\",\"key\":\"/r\",\"offset\":0,\"byte_size\":64}]");
    return *json ? HARK_OK : err_set(err, HARK_ERR_NOMEM, "oom");
}
void service_shm_unregister(server_t *s, const char *name) {}

/* no restricted protocols here (access.c treats NULL as "everything open") */
const struct access *server_access(const server_t *s)
{
    return NULL;
}

/* no page-locked body pool here: large protobuf fields go to the heap */
struct pinned_pool *server_body_pool(server_t *s)
{
    return NULL;
}

/* sequences: nothing to end */
uint64_t service_new_owner(void)
{
    static uint64_t next = 1;
    return next++;
}

void service_abandon(server_t *s, uint64_t owner) {}
