/* Buffers that cross comm: see xfer.h. A staged backend's mirrors are host_alloc'd ranges, each
 * the host copy of one device range that crossed comm. A range is served by the first mirror
 * (oldest) that contains it, else a new one exactly its size, so a range keeps its mirror from
 * its view to its recv_done whatever is created meanwhile; freeing a device allocation releases
 * the mirrors inside it. */
#include "xfer.h"

#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "backend.h"

typedef struct {
    const char *dev; /* the device range [dev, dev + bytes) */
    size_t bytes;
    char *host;      /* its mirror, host_alloc'd */
} mirror;

typedef struct {
    const char *p;
    size_t bytes;
} dev_alloc;

struct xfer_state {
    mirror *m;
    int nm, capm;
    dev_alloc *a;
    int na, capa;
};

static size_t g_copies, g_bytes;

void xfer_copies(size_t *copies, size_t *bytes)
{
    *copies = g_copies;
    *bytes = g_bytes;
}

void xfer_init(backend *be)
{
    TD_CHECK(!be->ops->host_alloc == !be->ops->host_free, "fill host_alloc and host_free together (be_ops.h)",
             "backend %s fills only one of host_alloc and host_free", be->ops->name);
    be->xfer = be->ops->host_alloc ? td_xcalloc(1, sizeof *be->xfer) : NULL;
}

void xfer_free(backend *be)
{
    struct xfer_state *s = be->xfer;
    if (!s) return;
    for (int i = 0; i < s->nm; i++) be->ops->host_free(be, s->m[i].host);
    free(s->m);
    free(s->a);
    free(s);
    be->xfer = NULL;
}

void xfer_note_alloc(const backend *be, void *p, size_t bytes)
{
    struct xfer_state *s = be->xfer;
    if (s->na == s->capa) {
        s->capa = s->capa ? 2 * s->capa : 64;
        s->a = td_xrealloc(s->a, (size_t)s->capa * sizeof *s->a);
    }
    s->a[s->na++] = (dev_alloc){p, bytes};
}

void xfer_note_free(const backend *be, void *p)
{
    struct xfer_state *s = be->xfer;
    if (!p) return;
    size_t bytes = 1; /* an allocation not seen by be_alloc: the mirrors starting at p */
    for (int i = 0; i < s->na; i++)
        if (s->a[i].p == p) {
            bytes = s->a[i].bytes;
            s->a[i] = s->a[--s->na];
            break;
        }
    const char *lo = p, *hi = lo + bytes;
    int keep = 0;
    for (int i = 0; i < s->nm; i++) {
        if (s->m[i].dev >= lo && s->m[i].dev < hi) be->ops->host_free(be, s->m[i].host);
        else s->m[keep++] = s->m[i]; /* in creation order still */
    }
    s->nm = keep;
}

/* The mirror of [dev, dev + bytes): the oldest containing it, or a new one. */
static char *mirror_of(const backend *be, const void *dev, size_t bytes)
{
    struct xfer_state *s = be->xfer;
    const char *d = dev;
    for (int i = 0; i < s->nm; i++)
        if (s->m[i].dev <= d && d + bytes <= s->m[i].dev + s->m[i].bytes) return s->m[i].host + (d - s->m[i].dev);
    if (s->nm == s->capm) {
        s->capm = s->capm ? 2 * s->capm : 16;
        s->m = td_xrealloc(s->m, (size_t)s->capm * sizeof *s->m);
    }
    char *h = be->ops->host_alloc(be, bytes);
    s->m[s->nm++] = (mirror){d, bytes, h};
    return h;
}

const void *xfer_send_view(const backend *be, const void *dev, size_t bytes)
{
    if (xfer_direct(be) || !bytes) return dev;
    char *h = mirror_of(be, dev, bytes);
    be->ops->copy_bytes(be, h, dev, bytes, BE_D2H); /* after the kernels that wrote dev */
    g_copies++, g_bytes += bytes;
    return h;
}

void *xfer_recv_view(const backend *be, void *dev, size_t bytes)
{
    if (xfer_direct(be) || !bytes) return dev;
    return mirror_of(be, dev, bytes);
}

void *xfer_inout_view(const backend *be, void *dev, size_t bytes) { return (void *)xfer_send_view(be, dev, bytes); }

void xfer_recv_done(const backend *be, void *dev, size_t bytes)
{
    if (xfer_direct(be) || !bytes) return;
    be->ops->copy_bytes(be, dev, mirror_of(be, dev, bytes), bytes, BE_H2D);
    g_copies++, g_bytes += bytes;
}

void xfer_allreduce(const backend *be, const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (xfer_direct(be) || comm_size(c) == 1 || !count) {
        comm_allreduce(c, buf, count, t, op);
        return;
    }
    size_t bytes = count * comm_dtype_size(t);
    comm_allreduce(c, xfer_inout_view(be, buf, bytes), count, t, op);
    xfer_recv_done(be, buf, bytes);
}

void xfer_allgather(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    if (xfer_direct(be)) {
        comm_allgather(c, send, recv, count, t);
        return;
    }
    size_t bytes = count * comm_dtype_size(t), all = bytes * (size_t)comm_size(c);
    comm_allgather(c, xfer_send_view(be, send, bytes), xfer_recv_view(be, recv, all), count, t);
    xfer_recv_done(be, recv, all);
}

void xfer_reduce_scatter(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                         comm_op op)
{
    if (xfer_direct(be)) {
        comm_reduce_scatter(c, send, recv, count, t, op);
        return;
    }
    size_t bytes = count * comm_dtype_size(t), all = bytes * (size_t)comm_size(c);
    comm_reduce_scatter(c, xfer_send_view(be, send, all), xfer_recv_view(be, recv, bytes), count, t, op);
    xfer_recv_done(be, recv, bytes);
}

/* Elements from the start of a buffer to the end of its last part. */
static size_t extent(const size_t *counts, const size_t *displs, int n)
{
    size_t e = 0;
    for (int r = 0; r < n; r++)
        if (counts[r] && displs[r] + counts[r] > e) e = displs[r] + counts[r];
    return e;
}

void xfer_alltoallv(const backend *be, const comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                    void *recv, const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag)
{
    if (xfer_direct(be)) {
        comm_alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t, tag);
        return;
    }
    int n = comm_size(c);
    size_t es = comm_dtype_size(t), sb = extent(scounts, sdispls, n) * es, rb = extent(rcounts, rdispls, n) * es;
    const void *hs = xfer_send_view(be, send, sb);
    void *hr = xfer_recv_view(be, recv, rb);
    comm_alltoallv(c, hs, scounts, sdispls, hr, rcounts, rdispls, t, tag);
    for (int r = 0; r < n; r++) /* the parts received, not the gaps between them */
        if (rcounts[r]) {
            size_t at = rdispls[r] * es, bytes = rcounts[r] * es;
            be->ops->copy_bytes(be, (char *)recv + at, (char *)hr + at, bytes, BE_H2D);
            g_copies++, g_bytes += bytes;
        }
}
