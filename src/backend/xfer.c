/* Buffers that cross comm: see xfer.h. A staged backend's mirrors are host_alloc'd ranges, each
 * the host copy of one device range that crossed comm. A range is served by the first mirror
 * (oldest) that contains it, else a new one exactly its size, so a range keeps its mirror from
 * its view to its recv_done whatever is created meanwhile; freeing a device allocation releases
 * the mirrors inside it. */
#include "xfer.h"

#include <stdint.h>
#include <stdio.h>
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

static int g_nccl; /* --comm chose nccl (xfer_comm_choose) */
static char g_mpi_why[768]; /* why --comm auto took mpi on a device backend */

void xfer_init(backend *be)
{
    TD_CHECK(!be->ops->host_alloc == !be->ops->host_free, "fill host_alloc and host_free together (be_ops.h)",
             "backend %s fills only one of host_alloc and host_free", be->ops->name);
    if (g_nccl && be->device >= 0 && be->ops->host_alloc) { /* NCCL reads the device memory itself */
        static struct be_ops direct;
        direct = *be->ops;
        direct.host_alloc = NULL;
        direct.host_free = NULL;
        be->ops = &direct;
    }
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
        comm_allreduce(xfer_comm(be, c), buf, count, t, op);
        return;
    }
    size_t bytes = count * comm_dtype_size(t);
    comm_allreduce(c, xfer_inout_view(be, buf, bytes), count, t, op);
    xfer_recv_done(be, buf, bytes);
}

void xfer_allgather(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    if (xfer_direct(be)) {
        comm_allgather(xfer_comm(be, c), send, recv, count, t);
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
        comm_reduce_scatter(xfer_comm(be, c), send, recv, count, t, op);
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
        comm_alltoallv(xfer_comm(be, c), send, scounts, sdispls, recv, rcounts, rdispls, t, tag);
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

/* ---- the group that carries backend memory ---- */

int xfer_comm_nccl(void) { return g_nccl; }

const comm *xfer_comm(const backend *be, const comm *c)
{
    if (!xfer_direct(be) || be->device < 0) return c; /* staged, or host memory */
    const comm *d = comm_device(c);
    TD_CHECK(comm_is_device(d), "this is a bug in trident; please report it",
             "the %s group has no NCCL twin, but backend %s hands comm device memory (--comm nccl: "
             "xfer_comm_attach before the first transfer)", comm_name(c), be->ops->name);
    return d;
}

void xfer_allgather_to_host(const backend *be, const comm *c, const void *send, void *recv, size_t count,
                            comm_dtype t)
{
    if (!xfer_direct(be) || be->device < 0) {
        comm_allgather(c, xfer_send_view(be, send, count * comm_dtype_size(t)), recv, count, t);
        return;
    }
    size_t bytes = count * comm_dtype_size(t);
    void *h = td_xmalloc(bytes ? bytes : 1);
    be->ops->copy_bytes(be, h, send, bytes, BE_D2H); /* after the kernels that wrote send */
    comm_allgather(c, h, recv, count, t);
    free(h);
}

/* ---- --comm ---- */

xfer_nccl_why xfer_nccl_rule(const char *backend, int cuda_built, int nccl_loadable, int local_size, int devices)
{
    if (!cuda_built) return XFER_NCCL_NO_CUDA;
    if (strcmp(backend, "cuda") != 0) return XFER_NCCL_CPU;
    if (!nccl_loadable) return XFER_NCCL_NO_LIB;
    if (devices < 1) return XFER_NCCL_NO_GPU;
    if (local_size > devices) return XFER_NCCL_SHARED_GPU;
    return XFER_NCCL_OK;
}

const char *xfer_comm_choice(const char *flag, xfer_nccl_why worst)
{
    if (strcmp(flag, "mpi") == 0) return "mpi";
    if (strcmp(flag, "nccl") == 0) return worst == XFER_NCCL_OK ? "nccl" : NULL;
    return worst == XFER_NCCL_OK ? "nccl" : "mpi";
}

void xfer_nccl_why_text(xfer_nccl_why why, int local_size, int devices, const char *lib_why, char *out, size_t len)
{
    switch (why) {
    case XFER_NCCL_OK: snprintf(out, len, "NCCL can carry device buffers"); break;
    case XFER_NCCL_NO_CUDA:
        snprintf(out, len, "this trident was built without CUDA: build it where nvcc is (docs/gpu.md), or use --comm mpi");
        break;
    case XFER_NCCL_CPU:
        snprintf(out, len, "the cpu backend's buffers are host memory, which NCCL does not carry: use --backend cuda, "
                           "or --comm mpi");
        break;
    case XFER_NCCL_NO_LIB: snprintf(out, len, "%s", lib_why && *lib_why ? lib_why : "libnccl.so.2 does not open"); break;
    case XFER_NCCL_NO_GPU:
        snprintf(out, len, "no GPU is visible here (CUDA_VISIBLE_DEVICES, the driver): run where each rank has a GPU, "
                           "or use --comm mpi");
        break;
    case XFER_NCCL_SHARED_GPU:
        snprintf(out, len, "%d ranks on a host with %d visible GPU%s: NCCL refuses two ranks on one GPU; start at most "
                 "%d rank%s a host, or use --comm mpi", local_size, devices, devices == 1 ? "" : "s", devices,
                 devices == 1 ? "" : "s");
        break;
    }
}

int xfer_local_size(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS",
                                 "PMI_LOCAL_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long n = strtol(v, &end, 10);
        if (*end == 0 && n >= 1 && n < (1L << 30)) return (int)n;
    }
    return 1;
}

int xfer_comm_choose(const char *flag, const char *backend, int cuda, int devices, const comm *world)
{
    g_nccl = 0;
    if (strcmp(flag, "mpi") == 0) return 0;
    int lib = 0, local = xfer_local_size();
    char lib_why[512] = "";
    if (cuda && strcmp(backend, "cuda") == 0) lib = comm_nccl_loadable(lib_why, sizeof lib_why);
    else devices = 0;
    int32_t worst = (int32_t)xfer_nccl_rule(backend, cuda, lib, local, devices);
    comm_allreduce(world, &worst, 1, COMM_I32, COMM_MAX); /* host memory: the same answer on every rank */
    const char *choice = xfer_comm_choice(flag, (xfer_nccl_why)worst);
    if (!choice) { /* every rank is here: the numbers of the host that refuses (most ranks, fewest GPUs) */
        int32_t most = local, fewest = devices;
        comm_allreduce(world, &most, 1, COMM_I32, COMM_MAX);
        comm_allreduce(world, &fewest, 1, COMM_I32, COMM_MIN);
        char why[768];
        xfer_nccl_why_text((xfer_nccl_why)worst, most, fewest, lib_why, why, sizeof why);
        td_usage_error("--comm nccl: %s", why);
    }
    g_nccl = strcmp(choice, "nccl") == 0;
    g_mpi_why[0] = '\0';
    if (!g_nccl && worst != XFER_NCCL_CPU && worst != XFER_NCCL_NO_CUDA)
        xfer_nccl_why_text((xfer_nccl_why)worst, local, devices, lib_why, g_mpi_why, sizeof g_mpi_why);
    return g_nccl;
}

void xfer_comm_attach(const backend *be, ps_state *ps)
{
    if (g_nccl && be->device >= 0) {
        TD_CHECK(xfer_direct(be), "this is a bug in trident; please report it",
                 "--comm nccl, but backend %s stages its transfers (xfer_comm_choose after be_create?)", be->ops->name);
        ps_make_twins(ps, be->queue);
    }
    if (ps->world_rank != 0 || be->device < 0) return; /* host memory: MPI, as always */
    if (g_nccl) TD_INFO("comm: device buffers cross NCCL (one NCCL communicator a group, no host copies)");
    else TD_INFO("comm: device buffers cross MPI through pinned host copies (staged)%s%s", g_mpi_why[0] ? ": " : "",
                 g_mpi_why);
}
