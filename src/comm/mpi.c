/* MPI communicator: the comm vtable over MPI. The world starts with MPI_Init under a launcher
 * (a process started alone is solo.c's world of one, without MPI) and errors return to us so they
 * can be reported with the failed call and the rank before the job is aborted. */
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>

#include "comm_impl.h"
#include "mpi_fault.h"
#include "ring.h"
#include "trident/check.h"
#include "trident/cores.h"
#include "trident/timer.h"

typedef struct {
    MPI_Comm mc;
    int owns;     /* free with MPI_Comm_free */
    comm *ring;   /* the ring collectives' messages (ring.c): a duplicate of mc; NULL in that one */
    unsigned seq; /* ring collectives started: each one's tag */
} mpi_state;

typedef struct {
    struct comm_req base;
    MPI_Request req;
    const char *call; /* the MPI call that started it, for a timeout message */
    int peer;         /* point-to-point peer in the group, or -1 */
    int *counts;      /* the v-collectives' counts and displacements, kept until completion */
    ring_op *ring;    /* a ring collective instead of req (large sums: ring.h) */
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

/* c with its ring communicator: a duplicate of its MPI communicator, so that the ring's
 * point-to-point messages never match the group's own. */
static comm *with_ring(comm *c)
{
    MPI_Comm dup;
    TD_CHECK_MPI(MPI_Comm_dup(MC(c), &dup));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    ((mpi_state *)c->impl)->ring = wrap(dup, 1);
    return c;
}

/* The ring communicator of c (named as c in timeout messages) and the next tag, when the ring
 * takes a collective of `elems` elements in all of type t and op; else NULL. */
static const comm *ring_for(const comm *c, size_t elems, comm_dtype t, comm_op op, int *tag)
{
    if (!ring_applies(elems * comm_dtype_size(t), t, op, c->size)) return NULL;
    mpi_state *s = c->impl;
    memcpy(s->ring->name, c->name, sizeof c->name);
    *tag = (int)(s->seq++ & 0x7fff);
    return s->ring;
}

static size_t sum_counts(const size_t *counts, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    return total;
}

/* The world size the launcher announces before MPI_Init (Open MPI, MPICH/Intel MPI, Slurm);
 * 1 when started alone. */
static int launcher_size(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 1;
}

static void abort_hook(int code)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && g_world != MPI_COMM_NULL) {
        int size = 1;
        MPI_Comm_size(g_world, &size);
        if (size > 1) fault_abort(g_world, code);
    }
    comm_exit(code);
}

static void on_signal(int sig)
{
    /* A crash or kill on one rank takes the job down instead of leaving peers waiting. */
    const char msg[] = "fatal signal: aborting the job\n";
    ssize_t rc = write(2, msg, sizeof msg - 1);
    (void)rc;
    signal(sig, SIG_DFL);
    if (g_world != MPI_COMM_NULL) fault_abort(g_world, 128 + sig);
    raise(sig);
}

static MPI_Comm g_usage_comm = MPI_COMM_NULL; /* comm_usage_exit's barrier, once the world exists */
/* More ranks on this host than cores this process may run on (mpirun --oversubscribe, several ranks
 * sharing a GPU's host): a waiting rank then sleeps from its first polls instead of spinning for a
 * millisecond, since the rank it waits for may need this core (bounded_wait). */
static int g_oversubscribed;
/* The ranks on this host whose cores overlap this process's (itself included): 1 when the
 * launcher bound each rank to cores of its own, every rank of the host under --bind-to none. */
static int g_sharing = 1;

/* Counts the ranks of this host and those whose affinity masks overlap this process's. Collective
 * over the world. */
static void host_census(void)
{
    MPI_Comm host;
    int local = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) != MPI_SUCCESS) return;
    MPI_Comm_size(host, &local);
    cpu_set_t mine;
    CPU_ZERO(&mine);
    int have = sched_getaffinity(0, sizeof mine, &mine) == 0;
    if (!have)
        for (int c = 0; c < CPU_SETSIZE && c < sysconf(_SC_NPROCESSORS_ONLN); c++) CPU_SET(c, &mine);
    cpu_set_t *all = td_xcalloc((size_t)local, sizeof *all);
    if (MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, host) == MPI_SUCCESS) {
        g_sharing = 0;
        for (int r = 0; r < local; r++) {
            cpu_set_t both;
            CPU_AND(&both, &mine, &all[r]);
            g_sharing += CPU_COUNT(&both) > 0;
        }
        if (g_sharing < 1) g_sharing = 1;
    }
    free(all);
    MPI_Comm_free(&host);
    double cores = td_usable_cores();
    g_oversubscribed = cores > 0 && local > cores;
}

int comm_threads_per_rank(void)
{
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp && *omp) return 0; /* the user's: OpenMP reads it */
    int n = (int)(td_usable_cores() / g_sharing);
    return n > 0 ? n : 1;
}

/* Started without an MPI launcher: no mpirun or orted (Open MPI's variables), no PMIx or PMI
 * server (srun --mpi=pmix, MPICH's launchers), and not one of several Slurm tasks (srun without
 * --mpi=pmix: MPI_Init then says why each task would be a world of its own). */
static int started_alone(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_hnp_uri", "PMIX_RANK", "PMI_RANK",
                                 "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 0;
    return launcher_size() <= 1;
}

comm *comm_world_init(int *argc, char ***argv)
{
    if (started_alone()) { /* a world of one without MPI_Init (solo.c says what that saves) */
        comm *w = comm_solo_new();
        comm_set_name(w, "world");
        td_log_set_rank(-1);
        td_set_abort_hook(abort_hook);
        return w;
    }
    int provided = 0;
    fault_kick_setup(); /* before MPI_Init, which sets the variables it reads in a process started alone */
    TD_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    g_world = MPI_COMM_WORLD;
    /* comm_usage_exit's barrier on a communicator of its own: on the world's it could match a
     * collective of a rank still running (rank 0 ending while the others wait in a barrier) */
    TD_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &g_usage_comm));
    comm *w = with_ring(wrap(MPI_COMM_WORLD, 0));
    comm_set_name(w, "world");
    td_log_set_rank(w->size > 1 ? w->rank : -1);
    td_set_abort_hook(abort_hook);
    if (w->size > 1) {
        signal(SIGSEGV, on_signal);
        signal(SIGBUS, on_signal);
        signal(SIGFPE, on_signal);
        signal(SIGILL, on_signal);
        fault_init(MPI_COMM_WORLD, w->rank, w->size);
        host_census();
    }
    return w;
}

void comm_usage_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized || (!inited && launcher_size() <= 1)) comm_exit(code);
    td_set_abort_hook(NULL);
    fault_kick_setup();
    int provided;
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) exit(code);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request q;
    int done = 0, me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    /* rank 0 has printed the line: it waits briefly (an error only rank 0 finds, e.g. in the
     * dataset it alone opens, leaves the others in another call, and its exit ends them); the
     * others wait for rank 0's line, however late it comes */
    double t0 = td_now(), limit = me == 0 ? 2 : 30;
    MPI_Comm bc = g_usage_comm != MPI_COMM_NULL ? g_usage_comm : MPI_COMM_WORLD;
    if (MPI_Ibarrier(bc, &q) != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, code);
    while (!done && td_now() - t0 < limit) {
        if (MPI_Test(&q, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        struct timespec ts = {0, 1000000};
        if (!done) nanosleep(&ts, NULL);
    }
    if (!done && me == 0) comm_exit(code);   /* the launcher ends the others */
    if (!done) MPI_Abort(MPI_COMM_WORLD, code); /* a rank did not find the error: end them all */
    fault_close();
    MPI_Finalize();
    comm_exit(code);
}

void comm_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (code != 0) fault_announce_exit(code);
    fault_kick_setup();
    if (code != 0 || fault_launcher_ending()) fault_kick_launcher(code != 0); /* e.g. exiting after a save on SIGTERM */
    exit(code);
}

void comm_world_finalize(comm *world)
{
    /* mpirun is ending the job (e.g. the ranks saved on its SIGTERM): MPI_Finalize needs it,
     * asleep, so it would return only at the SIGKILL, twice the timeout after the SIGTERM */
    if (fault_launcher_ending()) {
        fflush(stdout);
        fflush(stderr);
        fault_kick_launcher(0);
    }
    td_set_abort_hook(NULL);
    if (comm_is_solo(world)) { /* never initialised MPI */
        comm_free(world);
        return;
    }
    comm_free(world->twin); /* NCCL's communicator before MPI's */
    world->twin = NULL;
    fault_close();
    mpi_state *s = world->impl;
    MPI_OPS.free(s->ring);
    free(s);
    free(world);
    MPI_Finalize();
    g_world = MPI_COMM_NULL;
}

static comm *mpi_split(const comm *c, int color, int key)
{
    MPI_Comm out;
    TD_CHECK_MPI(MPI_Comm_split(MC(c), color, key, &out));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
    return with_ring(wrap(out, 1));
}

static void mpi_free(comm *c)
{
    mpi_state *s = c->impl;
    if (s->ring) mpi_free(s->ring);
    if (s->owns) MPI_Comm_free(&s->mc);
    free(s);
    free(c);
}

static void mpi_abort(const comm *c, int code)
{
    fflush(stdout);
    fflush(stderr);
    fault_abort(MC(c), code);
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
 * naming this rank, the call, the group and the peer instead of hanging, and a wait on a dead
 * peer ends it at once (checked every half second). The first millisecond spins (none on an
 * oversubscribed host: the peer may need this core); after that each poll yields the core for a
 * twentieth of the time waited so far (20 us to 1 ms), so a long wait wakes rarely and ends at
 * most 5% (or 1 ms) late. */
static void bounded_wait(const comm *c, MPI_Request *req, const char *call, int peer, const char *file, int line)
{
    double limit = comm_timeout(), t0 = td_now(), now = t0, next_watch = t0 + 0.5;
    double spin = g_oversubscribed ? 0 : 1e-3;
    long every = g_oversubscribed ? 7 : 63; /* polls between looks at the clock, minus one */
    int rc = MPI_SUCCESS;
    for (long spins = 0;; spins++) {
        int done = 0;
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) break;
        if (done) return;
        if ((spins & every) != every) continue;
        now = td_now();
        if (now - t0 > spin) { /* sleep a twentieth of the wait so far, 20 us to 1 ms: at most 5% late */
            double s = (now - t0) / 20;
            struct timespec ts = {0, (long)(1e9 * (s < 2e-5 ? 2e-5 : s > 1e-3 ? 1e-3 : s))};
            nanosleep(&ts, NULL);
        }
        fault_poll(now > next_watch); /* a peer gone, or another rank's wait timed out: does not return */
        if (now > next_watch) next_watch = now + 0.5;
        if (limit > 0 && now - t0 > limit) break;
    }
    char who[160] = "", what[1024];
    if (peer >= 0) {
        int w = world_rank_of(c, peer);
        snprintf(who, sizeof who, " with peer %d (world rank %d on %s)", peer, w, fault_host_of(w));
    }
    const char *group = c->name[0] ? c->name : "world";
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        snprintf(what, sizeof what, "%s on the %s group (rank %d of %d)%s, in world rank %d on %s", msg, group, c->rank,
                 c->size, who, me, fault_host_of(me));
    } else
        snprintf(what, sizeof what, "no progress for %.1f s (--distributed-timeout-minutes %g) on the %s group (rank %d of %d)%s, "
                 "in world rank %d on %s", now - t0, limit / 60, group, c->rank, c->size, who, me, fault_host_of(me));
    fault_timed_out(file, line, call, what);
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
    int tag;
    const comm *rc = ring_for(c, count, t, op, &tag);
    if (rc) {
        ring_wait(ring_allreduce(rc, buf, count, t, tag));
        return;
    }
    MPI_Request q;
    TD_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(count), mpi_type(t), mpi_op(op), MC(c), &q));
    WAIT(c, &q, "MPI_Allreduce");
}

static void mpi_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    const char *rb = recv;
    const void *sb = send;
    size_t es = comm_dtype_size(t);
    int tag;
    const comm *rc = ring_for(c, count * (size_t)c->size, t, COMM_SUM, &tag);
    if (rc) {
        char *mine = (char *)recv + (size_t)c->rank * count * es;
        if (send != mine) memmove(mine, send, count * es);
        size_t *cd = td_xmalloc(2 * (size_t)c->size * sizeof *cd);
        for (int i = 0; i < c->size; i++) cd[i] = count, cd[c->size + i] = (size_t)i * count;
        ring_wait(ring_allgatherv(rc, recv, cd, cd + c->size, t, tag));
        free(cd);
        return;
    }
    if ((const char *)send == rb + (size_t)c->rank * count * es) sb = MPI_IN_PLACE;
    MPI_Request q;
    TD_CHECK_MPI(MPI_Iallgather(sb, icount(count), mpi_type(t), recv, icount(count), mpi_type(t), MC(c), &q));
    WAIT(c, &q, "MPI_Allgather");
}

/* A ring reduce-scatter of `count` elements a rank; NULL when the ring does not apply. */
static ring_op *ring_reduce_scatter_block(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                          comm_op op)
{
    int tag;
    const comm *rc = ring_for(c, count * (size_t)c->size, t, op, &tag);
    if (!rc) return NULL;
    size_t *cn = td_xmalloc((size_t)c->size * sizeof *cn);
    for (int i = 0; i < c->size; i++) cn[i] = count;
    ring_op *o = ring_reduce_scatterv(rc, send, recv, cn, t, tag);
    free(cn);
    return o;
}

static void mpi_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    ring_op *o = ring_reduce_scatter_block(c, send, recv, count, t, op);
    if (o) {
        ring_wait(o);
        return;
    }
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

/* A request of c that is the ring collective o. */
static comm_req *ring_req(const comm *c, const char *call, ring_op *o)
{
    comm_req *r = new_req(c, call, -1);
    ((mpi_req *)r)->ring = o;
    return r;
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
    int tag;
    const comm *rc = ring_for(c, count, t, op, &tag);
    if (rc) return ring_req(c, "ring all-reduce", ring_allreduce(rc, buf, count, t, tag));
    comm_req *r = new_req(c, "MPI_Iallreduce", -1);
    TD_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, buf, icount(count), mpi_type(t), mpi_op(op), MC(c),
                                &((mpi_req *)r)->req));
    return r;
}

static comm_req *mpi_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                     comm_op op)
{
    ring_op *o = ring_reduce_scatter_block(c, send, recv, count, t, op);
    if (o) return ring_req(c, "ring reduce-scatter", o);
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
    int tag;
    const comm *rc = ring_for(c, sum_counts(counts, c->size), t, COMM_SUM, &tag);
    if (rc) return ring_req(c, "ring all-gather", ring_allgatherv(rc, buf, counts, displs, t, tag));
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
    int tag;
    const comm *rc = ring_for(c, sum_counts(counts, c->size), t, op, &tag);
    if (rc) return ring_req(c, "ring reduce-scatter", ring_reduce_scatterv(rc, send, recv, counts, t, tag));
    comm_req *r = new_req(c, "MPI_Ireduce_scatter", -1);
    mpi_req *q = (mpi_req *)r;
    int *cn = icounts(q, c->size, counts, NULL);
    TD_CHECK_MPI(MPI_Ireduce_scatter(send, recv, cn, mpi_type(t), mpi_op(op), MC(c), &q->req));
    return r;
}

static void mpi_wait(comm_req *r)
{
    mpi_req *q = (mpi_req *)r;
    if (q->ring) ring_wait(q->ring);
    else bounded_wait(r->c, &q->req, q->call, q->peer, __FILE__, __LINE__);
    free(q->counts);
    free(r);
}

static int mpi_test(comm_req *r)
{
    int done = 0;
    if (((mpi_req *)r)->ring) return ring_test(((mpi_req *)r)->ring);
    if (MPI_Test(&((mpi_req *)r)->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0; /* its wait reports it */
    return done;
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
    .test = mpi_test,
};
