/* registry.c — the list of model families, and which one a model directory holds (the "family"
 * key of DIR/<version>/model.json). Tests: tests/model/test_family.c */
#include "model/family.h"

#include "core/alloc.h"
#include "hark.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const family_t wenet_family;
extern const family_t jasper_family;
extern const family_t fastspeech_family;
extern const family_t silero_vad_family;
extern const family_t tacotron2_family;
extern const family_t icefall_transducer_family;

#define MAX_TEST_FAMILIES 8
#define DEFAULT_FAMILY "wenet_u2" /* models converted before model.json named its family */

/* built-in families first, then the tests' (NULL-terminated) */
#define N_BUILTIN 6
static const family_t *families[N_BUILTIN + MAX_TEST_FAMILIES + 1] = {&wenet_family,
                                                                      &jasper_family,
                                                                      &fastspeech_family,
                                                                      &tacotron2_family,
                                                                      &icefall_transducer_family,
                                                                      &silero_vad_family};
static int n_families = N_BUILTIN;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

void family_register_test(const family_t *f)
{
    pthread_mutex_lock(&reg_lock);
    int dup = 0;
    for (int i = 0; i < n_families; i++)
        dup |= families[i] == f;
    if (!dup && n_families < N_BUILTIN + MAX_TEST_FAMILIES)
        families[n_families++] = f;
    pthread_mutex_unlock(&reg_lock);
}

const family_t *const *family_list(void)
{
    return families;
}

const family_t *family_find(const char *name)
{
    for (int i = 0; name && families[i]; i++)
        if (!strcmp(families[i]->name, name))
            return families[i];
    return NULL;
}

int family_of_dir(const char *dir, int version, const family_t **out, hark_err_t *err)
{
    char path[4200];
    cJSON *j = NULL;
    int rc = family_open_model_json(dir, version, path, sizeof path, &j, err);
    if (rc)
        return rc;
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(j, "family");
    if (fam && !cJSON_IsString(fam)) {
        cJSON_Delete(j);
        return err_set(err, HARK_ERR_FORMAT, "%s: \"family\" must be a string", path);
    }
    const char *name = fam ? fam->valuestring : DEFAULT_FAMILY;
    const family_t *fm = family_find(name);
    if (!fm) {
        char known[256] = "";
        size_t off = 0;
        for (int i = 0; families[i] && off < sizeof known; i++)
            off += (size_t)snprintf(known + off, sizeof known - off, "%s%s", i ? ", " : "",
                                    families[i]->name);
        rc = err_set(err, HARK_ERR_NOT_FOUND, "%s: family \"%.100s\" is not one hark knows (%s)",
                     path, name, known);
    } else {
        *out = fm;
    }
    cJSON_Delete(j);
    return rc;
}
