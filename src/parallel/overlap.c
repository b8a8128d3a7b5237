/* Communication overlapped with the backend's queue: see include/parallel/trident/overlap.h. */
#include "trident/overlap.h"

#include "backend.h"

#include "trident/check.h"
#include "trident/comm.h"

#define OV_MAX 16 /* owners waiting at once: the chunks' data parallelism and one pipeline run */

static struct {
    void (*fn)(void *);
    void *ctx;
} g_wait[OV_MAX];
static int g_n, g_in;

void ov_attach(const backend *be) { be_set_progress((backend *)be, ov_progress, NULL); }

void ov_add(void (*fn)(void *ctx), void *ctx)
{
    for (int i = 0; i < g_n; i++)
        if (g_wait[i].fn == fn && g_wait[i].ctx == ctx) return;
    TD_ASSERT(g_n < OV_MAX);
    g_wait[g_n].fn = fn;
    g_wait[g_n++].ctx = ctx;
}

void ov_remove(void (*fn)(void *ctx), void *ctx)
{
    for (int i = 0; i < g_n; i++)
        if (g_wait[i].fn == fn && g_wait[i].ctx == ctx) {
            for (int j = i + 1; j < g_n; j++) g_wait[j - 1] = g_wait[j];
            g_n--;
            return;
        }
}

void ov_progress(void *unused)
{
    (void)unused;
    if (g_in) return;
    if (g_n) {
        g_in = 1;
        int n = g_n;
        void (*fn[OV_MAX])(void *);
        void *ctx[OV_MAX];
        for (int i = 0; i < n; i++) fn[i] = g_wait[i].fn, ctx[i] = g_wait[i].ctx; /* an fn may remove itself */
        for (int i = 0; i < n; i++) fn[i](ctx[i]);
        g_in = 0;
    }
    comm_progress();
}
