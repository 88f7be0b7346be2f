/* service_impl.h — what the service's recognition jobs (service.c) and synthesis jobs
 * (service_tts.c) share: the tally of a request's items (the last completion answers) and the
 * queueing of the items through the model's family. Internal to src/api. */
#ifndef HARK_API_SERVICE_IMPL_H
#define HARK_API_SERVICE_IMPL_H

#include "api/req_params.h"
#include "api/service.h"
#include "sched/instance.h"

#include <pthread.h>

/* The items of one request in flight: the first failure is the request's. */
typedef struct {
    pthread_mutex_t lock;
    int remaining; /* items not yet completed */
    int status;    /* first failure */
    char error[512];
} svc_tally_t;

void svc_tally_init(svc_tally_t *t);
void svc_tally_destroy(svc_tally_t *t);
/* One item done (or `n` items that will never run, with status): 1 when it was the last. */
int svc_tally_done(svc_tally_t *t, int n, int status, const char *error);
/* The request's failure before any item was queued (no lock needed: nothing runs yet). */
void svc_tally_fail(svc_tally_t *t, int status, const char *error);

/* Finds the model (it may have been unloaded since the request arrived), parses the request's
 * options through its family into *opts (hark_calloc'd, the caller's), and queues the request's n
 * items, all or none (served_model_submit_many: one place in the model's queue): item(i) fills
 * item i (everything but fi.opts, set here) and returns it. Sequence models take ctl (n == 1).
 * Returns HARK_OK when all were queued (then the last completion answers, and the caller may be
 * gone already), else the status with err set and nothing queued (the caller answers). */
typedef served_request_t *(*svc_item_fn)(void *user, int i, void *opts);
int svc_queue(server_t *s, const char *model, const char *version, const req_params_t *params,
              int n, const served_seq_ctl_t *ctl, svc_item_fn item, void *user, void **opts,
              hark_err_t *err);

/* Shared memory (service_ext.c): reads the request's inputs that lie in shared memory regions
 * into its arena, checks the regions of the outputs it wants there, and makes *out a copy of *in
 * whose done first writes those outputs into their regions. HARK_OK, or the request's error
 * (nothing changed that the caller must undo; the caller answers). */
int svc_shm_prepare(server_t *s, const service_infer_t *in, service_infer_t *out, hark_err_t *err);

#endif
