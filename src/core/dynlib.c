/* Libraries opened when first needed: see include/core/trident/dynlib.h. */
#include "trident/dynlib.h"

#include <dlfcn.h>
#include <pthread.h>

#include "trident/check.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void td_dynlib_open(const char *soname, const char *need, const char *fix, const td_dynsym *syms, int n)
{
    pthread_mutex_lock(&g_lock);
    int done = 1; /* every pointer set already: opened before */
    for (int i = 0; i < n && done; i++) done = *syms[i].fn != NULL;
    if (done) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    /* RTLD_LOCAL: its symbols serve this table only; RTLD_NOW: a missing one shows here, not mid-run */
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        pthread_mutex_unlock(&g_lock);
        td_fatal(1, "%s needs the shared library %s, which could not be opened (%s): %s", need, soname,
                 why ? why : "no reason given", fix);
    }
    for (int i = 0; i < n; i++) {
        dlerror();
        void *f = dlsym(lib, syms[i].name);
        if (!f) {
            const char *why = dlerror();
            pthread_mutex_unlock(&g_lock);
            td_fatal(1, "%s needs %s from %s, which does not export it (%s): %s", need, syms[i].name, soname,
                     why ? why : "no reason given", fix);
        }
        *syms[i].fn = f;
    }
    pthread_mutex_unlock(&g_lock);
}
