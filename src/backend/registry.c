/* The backends of this binary, by name: be_create and be_free. The one file that names an
 * implementation's constructor: adding a backend is its folder, a row of BACKENDS and its
 * sources in CMakeLists.txt (docs/backend.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "backend.h"
#include "cpu/cpu.h"

typedef struct {
    const char *name;
    backend *(*create)(int nthreads_or_device);
} be_entry;

static const be_entry BACKENDS[] = {
    {"cpu", be_cpu},
};
enum { BE_NBACKENDS = (int)(sizeof BACKENDS / sizeof BACKENDS[0]) };

int be_backend_known(const char *name)
{
    for (int i = 0; i < BE_NBACKENDS; i++)
        if (name && strcmp(name, BACKENDS[i].name) == 0) return 1;
    return 0;
}

const char *be_backend_names(void)
{
    static char names[256];
    if (!names[0])
        for (int i = 0; i < BE_NBACKENDS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", BACKENDS[i].name);
    return names;
}

backend *be_create(const char *name, int nthreads_or_device)
{
    for (int i = 0; i < BE_NBACKENDS; i++)
        if (name && strcmp(name, BACKENDS[i].name) == 0) {
            backend *be = BACKENDS[i].create(nthreads_or_device);
            const char *missing = be_ops_missing(be->ops);
            TD_CHECK(missing == NULL, "fill every entry BE_OP_ENTRIES does not mark optional (docs/backend.md)",
                     "backend %s leaves its required entry %s NULL", BACKENDS[i].name, missing);
            return be;
        }
    td_usage_error("--backend %s: not a backend of this binary (it has: %s)", name ? name : "(none)",
                   be_backend_names());
}

void be_free(backend *be)
{
    if (!be) return;
    be->ops->sync(be);
    be_lowp_free(be);
    if (be->ops->destroy) be->ops->destroy(be);
    free(be);
}
