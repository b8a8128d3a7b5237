/* MPI communicator: the comm vtable over MPI. The world starts with MPI_Init (a lone process
 * is a world of one without mpirun) and errors return to us so they can be reported with the
 * failed call and the rank before the job is aborted. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_impl.h"
#include "trident/check.h"
#include "trident/timer.h"

typedef struct {
    MPI_Comm mc;
    int owns; /* free with MPI_Comm_free */
} mpi_state;

typedef struct {
    struct comm_req base;
    MPI_Request req;
    const char *call; /* the MPI call that started it, for a timeout message */
    int peer;         /* point-to-point peer in the group, or -1 */
    int *counts;      /* the v-collectives' counts and displacements, kept until completion */
} mpi_req;

static const struct comm_ops MPI_OPS;
static MPI_Comm g_world = MPI_COMM_NULL;

#define MC(c) (((mpi_state *)(c)->impl)->mc)

static void check_mpi(int rc, const char *call, const char *file, int line)
{
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    td_die(file, line, call, "a peer rank may have died; see the first error above", "%s", msg);
}
#define TD_CHECK_MPI(call) check_mpi((call), #call, __FILE__, __LINE__)

static MPI_Datatype mpi_type(comm_dtype t)
{
    switch (t) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_I32: return MPI_INT32_T;
    case COMM_I64: return MPI_INT64_T;
    case COMM_U8: return MPI_UINT8_T;
    }
    return MPI_BYTE;
}

static MPI_Op mpi_op(comm_op op)
{
    switch (op) {
    case COMM_SUM: return MPI_SUM;
    case COMM_MAX: return MPI_MAX;
    case COMM_MIN: return MPI_MIN;
    }
    return MPI_SUM;
}

/* MPI counts are int: large buffers are rejected loudly rather than truncated. */
static int icount(size_t n)
{
    if (n > (size_t)INT32_MAX)
        td_die(__FILE__, __LINE__, "icount", "use a smaller --ddp-bucket-size",
               "message of %zu elements exceeds MPI's int count", n);
    return (int)n;
}

static comm *wrap(MPI_Comm mc, int owns)
{
    comm *c = td_xcalloc(1, sizeof *c);
    mpi_state *s = td_xcalloc(1, sizeof *s);
    s->mc = mc;
    s->owns = owns;
    c->ops = &MPI_OPS;
    c->impl = s;
    TD_CHECK_MPI(MPI_Comm_rank(mc, &c->rank));
    TD_CHECK_MPI(MPI_Comm_size(mc, &c->size));
    return c;
}

static void abort_hook(int code)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && g_world != MPI_COMM_NULL) {
        int size = 1;
        MPI_Comm_size(g_world, &size);
        if (size > 1) MPI_Abort(g_world, code);
    }
    exit(code);
}

static void on_signal(int sig)
{
    /* A crash or kill on one rank takes the job down instead of leaving peers waiting. */
    const char msg[] = "fatal signal: aborting the job\n";
    ssize_t rc = write(2, msg, sizeof msg - 1);
    (void)rc;
    signal(sig, SIG_DFL);
    if (g_world != MPI_COMM_NULL) MPI_Abort(g_world, 128 + sig);
    raise(sig);
}

comm *comm_world_init(int *argc, char ***argv)
{
    int provided = 0;
    TD_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    g_world = MPI_COMM_WORLD;
    comm *w = wrap(MPI_COMM_WORLD, 0);
    comm_set_name(w, "world");
    td_log_set_rank(w->size > 1 ? w->rank : -1);
    td_set_abort_hook(abort_hook);
    if (w->size > 1) {
        signal(SIGSEGV, on_signal);
        signal(SIGBUS, on_signal);
        signal(SIGFPE, on_signal);
        signal(SIGILL, on_signal);
    }
    return w;
}

void comm_world_finalize(comm *world)
{
    td_set_abort_hook(NULL);
    free(world->impl);
    free(world);
    MPI_Finalize();
    g_world = MPI_COMM_NULL;
}

static comm *mpi_split(const comm *c, int color, int key)
{
    MPI_Comm out;
    TD_CHECK_MPI(MPI_Comm_split(MC(c), color, key, &out));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
    return wrap(out, 1);
}

static void mpi_free(comm *c)
{
    mpi_state *s = c->impl;
    if (s->owns) MPI_Comm_free(&s->mc);
    free(s);
    free(c);
}

static void mpi_abort(const comm *c, int code)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MC(c), code);
    exit(code);
}

/* World rank of `peer` in c, for messages. */
static int world_rank_of(const comm *c, int peer)
{
    MPI_Group g, w;
    int out = -1;
    if (MPI_Comm_group(MC(c), &g) != MPI_SUCCESS) return -1;
    if (MPI_Comm_group(MPI_COMM_WORLD, &w) == MPI_SUCCESS) {
        MPI_Group_translate_ranks(g, 1, &peer, w, &out);
        MPI_Group_free(&w);
    }
    MPI_Group_free(&g);
    return out;
}

/* Completes *req, polling so that a wait longer than the timeout ends the job with a message
 * naming this rank, the call, the group and the peer instead of hanging. The first
 * millisecond spins; after that each poll yields the core (oversubscribed ranks need it). */
static void bounded_wait(const comm *c, MPI_Request *req, const char *call, int peer, const char *file, int line)
{
    double limit = comm_timeout(), t0 = td_now(), now = t0;
    for (long spins = 0;; spins++) {
        int done = 0;
        check_mpi(MPI_Test(req, &done, MPI_STATUS_IGNORE), call, file, line);
        if (done) return;
        if ((spins & 63) != 63) continue;
        now = td_now();
        if (now - t0 > 1e-3) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        if (limit > 0 && now - t0 > limit) break;
    }
    char who[96] = "";
    if (peer >= 0) snprintf(who, sizeof who, " with peer %d (world rank %d)", peer, world_rank_of(c, peer));
    td_die(file, line, call, "a rank is stopped, hung or dead, or a step is slower than the limit: "
           "raise --distributed-timeout-minutes if it is legitimately slow",
           "no progress for %.1f s (--distributed-timeout-minutes %g) on the %s group (rank %d of %d)%s",
           now - t0, limit / 60, c->name[0] ? c->name : "world", c->rank, c->size, who);
}
#define WAIT(c, req, call) bounded_wait((c), (req), (call), -1, __FILE__, __LINE__)

static void mpi_barrier(const comm *c)
{
    MPI_Request q;
    TD_CHECK_MPI(MPI_Ibarrier(MC(c), &q));
    WAIT(c, &q, "MPI_Barrier");
}

static void mpi_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    MPI_Request q;
    TD_CHECK_MPI(MPI_Ibcast(buf, icount(count), mpi_type(t), root, MC(c), &q));
    WAIT(c, &q, "MPI_Bcast");
}

static void mpi_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    MPI_Request q;
    TD_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(count), mpi_type(t), mpi_op(op), MC(c), &q));
    WAIT(c, &q, "MPI_Allreduce");
}

static void mpi_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    const char *rb = recv;
    const void *sb = send;
    if ((const char *)send == rb + (size_t)c->rank * count * comm_dtype_size(t)) sb = MPI_IN_PLACE;
    MPI_Request q;
    TD_CHECK_MPI(MPI_Iallgather(sb, icount(count), mpi_type(t), recv, icount(count), mpi_type(t), MC(c), &q));
    WAIT(c, &q, "MPI_Allgather");
}

static void mpi_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    MPI_Request q;
    TD_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, icount(count), mpi_type(t), mpi_op(op), MC(c), &q));
    WAIT(c, &q, "MPI_Reduce_scatter_block");
}

static comm_req *new_req(const comm *c, const char *call, int peer)
{
    mpi_req *r = td_xcalloc(1, sizeof *r);
    r->base.c = c;
    r->call = call;
    r->peer = peer;
    return &r->base;
}

static comm_req *mpi_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    comm_req *r = new_req(c, "MPI_Isend", peer);
    TD_CHECK_MPI(MPI_Isend(buf, icount(count), mpi_type(t), peer, tag, MC(c), &((mpi_req *)r)->req));
    return r;
}

static comm_req *mpi_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    comm_req *r = new_req(c, "MPI_Irecv", peer);
    TD_CHECK_MPI(MPI_Irecv(buf, icount(count), mpi_type(t), peer, tag, MC(c), &((mpi_req *)r)->req));
    return r;
}

static comm_req *mpi_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    comm_req *r = new_req(c, "MPI_Iallreduce", -1);
    TD_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(count), mpi_type(t), mpi_op(op), MC(c),
                                &((mpi_req *)r)->req));
    return r;
}

static comm_req *mpi_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                     comm_op op)
{
    comm_req *r = new_req(c, "MPI_Ireduce_scatter_block", -1);
    TD_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, icount(count), mpi_type(t), mpi_op(op), MC(c),
                                           &((mpi_req *)r)->req));
    return r;
}

/* The int counts (and displacements) of a v-collective, held by the request. */
static int *icounts(mpi_req *q, int n, const size_t *counts, const size_t *displs)
{
    q->counts = td_xmalloc((size_t)(displs ? 2 * n : n) * sizeof(int));
    for (int i = 0; i < n; i++) {
        q->counts[i] = icount(counts[i]);
        if (displs) q->counts[n + i] = icount(displs[i]);
    }
    return q->counts;
}

static comm_req *mpi_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    comm_req *r = new_req(c, "MPI_Iallgatherv", -1);
    mpi_req *q = (mpi_req *)r;
    int *cd = icounts(q, c->size, counts, displs);
    TD_CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cd, cd + c->size, mpi_type(t), MC(c),
                                 &q->req));
    return r;
}

static comm_req *mpi_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                      comm_op op)
{
    comm_req *r = new_req(c, "MPI_Ireduce_scatter", -1);
    mpi_req *q = (mpi_req *)r;
    int *cn = icounts(q, c->size, counts, NULL);
    TD_CHECK_MPI(MPI_Ireduce_scatter(send, recv, cn, mpi_type(t), mpi_op(op), MC(c), &q->req));
    return r;
}

static void mpi_wait(comm_req *r)
{
    mpi_req *q = (mpi_req *)r;
    bounded_wait(r->c, &q->req, q->call, q->peer, __FILE__, __LINE__);
    free(q->counts);
    free(r);
}

static const struct comm_ops MPI_OPS = {
    .name = "mpi",
    .split = mpi_split,
    .free = mpi_free,
    .abort = mpi_abort,
    .barrier = mpi_barrier,
    .bcast = mpi_bcast,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .reduce_scatter = mpi_reduce_scatter,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .iallreduce = mpi_iallreduce,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iallgatherv = mpi_iallgatherv,
    .ireduce_scatterv = mpi_ireduce_scatterv,
    .wait = mpi_wait,
};
