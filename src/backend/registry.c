/* The backends of this binary, by name: be_create and be_free. The one file that names an
 * implementation's constructor: adding a backend is its folder, a row of BACKENDS and its
 * sources in CMakeLists.txt (docs/backend.md). "auto" stands for cuda where it is built and a GPU
 * is visible, else cpu. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/debug.h"
#include "backend.h"
#include "xfer.h"
#include "cpu/cpu.h"
#ifdef TRIDENT_HAVE_CUDA
#include "cuda/cuda.h"
#endif

typedef struct {
    const char *name;
    backend *(*create)(int nthreads_or_device);
} be_entry;

static const be_entry BACKENDS[] = {
    {"cpu", be_cpu},
#ifdef TRIDENT_HAVE_CUDA
    {"cuda", be_cuda},
#endif
};
enum { BE_NBACKENDS = (int)(sizeof BACKENDS / sizeof BACKENDS[0]) };

int be_have_cuda(void)
{
#ifdef TRIDENT_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int be_backend_devices(const char *name)
{
    if (!name) return 0;
    if (strcmp(name, "cpu") == 0) return 1;
#ifdef TRIDENT_HAVE_CUDA
    if (strcmp(name, "cuda") == 0) return cuda_device_count();
#endif
    return 0;
}

const char *be_auto_name(const char *name)
{
    if (!name || strcmp(name, "auto") != 0) return name;
    return be_auto_choice(be_have_cuda(), be_backend_devices("cuda"));
}

int be_comm_choose(const char *flag, const char *backend_flag, const struct comm *world)
{
    const char *backend = be_auto_name(backend_flag);
    int cuda = be_have_cuda();
    int devices = cuda && strcmp(backend, "cuda") == 0 ? be_backend_devices("cuda") : 0;
    return xfer_comm_choose(flag, backend, cuda, devices, world);
}

void be_set_tf32(backend *be, int on)
{
#ifdef TRIDENT_HAVE_CUDA
    if (be && strcmp(be->ops->name, "cuda") == 0) cuda_set_tf32(be, on);
#else
    (void)be;
    (void)on;
#endif
}

int be_backend_known(const char *name)
{
    if (name && strcmp(name, "auto") == 0) return 1;
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

/* --debug-comm-staged: a backend's own entries, but comm staged through host memory as a device
 * backend without a CUDA-aware MPI stages it, and events that pass late as a device queue's do (an
 * event has passed once a later one was recorded, or after a sync), so every transfer's staging
 * path (xfer.h) and every start deferred to its event (trident/overlap.h) runs, and is checked
 * against the direct path, on cpu. */
static const struct be_ops *g_staged_inner;
static intptr_t g_recorded, g_synced; /* events recorded (ids 1..); all up to g_synced have passed */
static void staged_event_record(const backend *be, be_event *ev)
{
    g_staged_inner->event_record(be, ev);
    ev->h = (void *)++g_recorded;
}
static double staged_event_elapsed(const backend *be, be_event *start, be_event *end)
{
    start->h = end->h = NULL;
    return g_staged_inner->event_elapsed(be, start, end);
}
static int staged_event_query(const backend *be, const be_event *ev)
{
    (void)be;
    intptr_t id = (intptr_t)ev->h;
    return id < g_recorded || id <= g_synced;
}
static void staged_sync(const backend *be)
{
    g_staged_inner->sync(be);
    g_synced = g_recorded;
}
static void *staged_host_alloc(const backend *be, size_t bytes)
{
    (void)be;
    void *p = NULL;
    TD_CHECK(posix_memalign(&p, 64, bytes ? bytes : 1) == 0, "free memory", "%zu bytes of staging", bytes);
    return p;
}
static void staged_host_free(const backend *be, void *p)
{
    (void)be;
    free(p);
}
static void stage_comm(backend *be)
{
    static struct be_ops staged;
    g_staged_inner = be->ops;
    staged = *be->ops;
    staged.host_alloc = staged_host_alloc;
    staged.host_free = staged_host_free;
    if (!staged.event_query && !be->queue) { /* late events stand in for a queue only where none is */
        staged.event_record = staged_event_record;
        staged.event_elapsed = staged_event_elapsed;
        staged.event_query = staged_event_query;
        staged.sync = staged_sync;
    }
    be->ops = &staged;
}

backend *be_create(const char *name, int nthreads_or_device)
{
    if (name && strcmp(name, "auto") == 0) {
        name = be_auto_name(name);
        if (strcmp(name, "cpu") != 0) nthreads_or_device = 0; /* a thread count is no device: this rank's */
    }
    for (int i = 0; i < BE_NBACKENDS; i++)
        if (name && strcmp(name, BACKENDS[i].name) == 0) {
            backend *be = BACKENDS[i].create(nthreads_or_device);
            const char *missing = be_ops_missing(be->ops);
            TD_CHECK(missing == NULL, "fill every entry BE_OP_ENTRIES does not mark optional (docs/backend.md)",
                     "backend %s leaves its required entry %s NULL", BACKENDS[i].name, missing);
            if (td_debug_get()->comm_staged && !be->ops->host_alloc) stage_comm(be);
            xfer_init(be);
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
    xfer_free(be);
    if (be->ops->destroy) be->ops->destroy(be);
    free(be);
}
