/* Communication overlapped with the backend's queue: see include/parallel/trident/overlap.h. */
#include "trident/overlap.h"

#include "backend.h"

#include "trident/check.h"
#include "trident/comm.h"

#define OV_MAX 16 /* owners waiting at once: the chunks' data parallelism and one pipeline run */

static struct {
    void (*fn)(void *, int);
    void *ctx;
} g_wait[OV_MAX];
static int g_n, g_in;

void ov_attach(const backend *be) { be_set_progress((backend *)be, ov_progress, NULL); }

void ov_add(void (*fn)(void *ctx, int force), void *ctx)
{
    for (int i = 0; i < g_n; i++)
        if (g_wait[i].fn == fn && g_wait[i].ctx == ctx) return;
    TD_ASSERT(g_n < OV_MAX);
    g_wait[g_n].fn = fn;
    g_wait[g_n++].ctx = ctx;
}

void ov_remove(void (*fn)(void *ctx, int force), void *ctx)
{
    for (int i = 0; i < g_n; i++)
        if (g_wait[i].fn == fn && g_wait[i].ctx == ctx) {
            for (int j = i + 1; j < g_n; j++) g_wait[j - 1] = g_wait[j];
            g_n--;
            return;
        }
}

/* fn(ctx, force) of every owner waiting now (an fn may remove itself). */
static void poll_all(int force)
{
    if (g_in || !g_n) return;
    g_in = 1;
    int n = g_n;
    void (*fn[OV_MAX])(void *, int);
    void *ctx[OV_MAX];
    for (int i = 0; i < n; i++) fn[i] = g_wait[i].fn, ctx[i] = g_wait[i].ctx;
    for (int i = 0; i < n; i++) fn[i](ctx[i], force);
    g_in = 0;
}

void ov_progress(void *unused)
{
    (void)unused;
    if (g_in) return;
    poll_all(0);
    comm_progress();
}

void ov_flush(void) { poll_all(1); }
