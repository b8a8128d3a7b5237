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
#include <sys/types.h>

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

/* ---- a dead peer ends the job in seconds ----
 * When a rank dies or exits non-zero (MPI_Abort too), Open MPI 4.1's mpirun (and each orted,
 * for its node) sends the other ranks SIGCONT, sleeps odls_base_sigkill_timeout seconds, sends
 * SIGTERM, sleeps as long again and sends SIGKILL: whatever the ranks do, the job ends after
 * twice the timeout (119 s under the documented 60). Its sleep(3) returns early on a signal
 * with the unslept whole seconds, which it sleeps again: each SIGCHLD it receives shortens it
 * by about a second. So a rank that fails, or finds a peer on its node dead (it polls while it
 * waits on a communication) and says so, leaves a child sending its launcher SIGCHLD every
 * 10 ms (kick_launcher). Each rank watches the peers of its own node only (/proc), and only those it
 * could see at start (same pid namespace, same start time); the ranks of other nodes (whose
 * TCP transport does not report the loss: the wait just goes on) hear of it from the first
 * rank that found it, on a communicator of its own ("rank r is gone"). */
typedef struct {
    int32_t pid;
    int64_t start; /* start time, clock ticks after boot (/proc/PID/stat field 22): tells a reused pid */
    char host[64];
} peer_id;
static peer_id *g_peers;          /* by world rank */
static unsigned char *g_watched;  /* the peers this rank can see die */
static int g_npeers;
static MPI_Comm g_alarm = MPI_COMM_NULL;           /* a copy of the world for "rank r is gone" */
static MPI_Request g_alarm_req = MPI_REQUEST_NULL; /* the receive of one, always posted */
static int32_t g_alarm_in; /* the rank it names; npeers * code + r: rank r ended with code, saying why */
#define ALARM_TAG 7

/* Start time and state letter of process pid from /proc; -1 when there is none. */
static int64_t proc_start(int pid, char *state)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!s || s[1] != ' ') return -1;
    *state = s[2];
    for (int field = 3; field < 22; field++) {
        s = strchr(s + 1, ' ');
        if (!s) return -1;
    }
    return atoll(s + 1);
}

/* Every rank's pid, start time and host; which peers of this node this rank can watch. */
static void watch_init(MPI_Comm world, int rank, int size)
{
    peer_id me = {.pid = (int32_t)getpid()};
    char st;
    me.start = proc_start(me.pid, &st);
    if (gethostname(me.host, sizeof me.host - 1) != 0) strcpy(me.host, "?");
    g_peers = td_xcalloc((size_t)size, sizeof *g_peers);
    g_watched = td_xcalloc((size_t)size, 1);
    g_npeers = size;
    TD_CHECK_MPI(MPI_Allgather(&me, sizeof me, MPI_BYTE, g_peers, sizeof me, MPI_BYTE, world));
    for (int r = 0; r < size; r++)
        g_watched[r] = r != rank && me.start >= 0 && strcmp(g_peers[r].host, me.host) == 0 &&
                       proc_start(g_peers[r].pid, &st) == g_peers[r].start;
    /* test hook: only this world rank watches, as if every other rank were on another node */
    const char *only = getenv("TRIDENT_TEST_WATCH_ONLY_RANK");
    if (only && *only && atoi(only) != rank) memset(g_watched, 0, (size_t)size);
    TD_CHECK_MPI(MPI_Comm_dup(world, &g_alarm));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(g_alarm, MPI_ERRORS_RETURN));
    TD_CHECK_MPI(MPI_Irecv(&g_alarm_in, 1, MPI_INT32_T, MPI_ANY_SOURCE, ALARM_TAG, g_alarm, &g_alarm_req));
}

/* Withdraws the alarm's receive (before MPI_Finalize). */
static void watch_close(void)
{
    if (g_alarm_req != MPI_REQUEST_NULL) {
        MPI_Cancel(&g_alarm_req);
        MPI_Wait(&g_alarm_req, MPI_STATUS_IGNORE);
    }
    if (g_alarm != MPI_COMM_NULL) MPI_Comm_free(&g_alarm);
    free(g_peers);
    free(g_watched);
    g_peers = NULL;
    g_watched = NULL;
    g_npeers = 0;
}

/* The world rank of a watched peer that is gone (exited, killed, a zombie) or of one another
 * rank says is gone (*heard 1), or -1. */
static int dead_peer(int *heard)
{
    *heard = 0;
    int done = 0;
    if (g_alarm_req != MPI_REQUEST_NULL && MPI_Test(&g_alarm_req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done &&
        g_alarm_in >= 0) {
        *heard = g_alarm_in < g_npeers ? 1 : 2 + g_alarm_in / g_npeers; /* 2 + code: an error it reported */
        return g_alarm_in % g_npeers;
    }
    for (int r = 0; r < g_npeers; r++) {
        if (!g_watched[r]) continue;
        char st = '?';
        int64_t start = proc_start(g_peers[r].pid, &st);
        if (start != g_peers[r].start || st == 'Z' || st == 'X') return r;
    }
    return -1;
}

/* Seconds mpirun waits before each of its SIGTERM and SIGKILL (odls_base_sigkill_timeout). */
static double launcher_kill_timeout(void)
{
    const char *v = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    return v && *v ? atof(v) : 1;
}

static int g_kick_launcher; /* started by Open MPI's mpirun or orted: kick_launcher works */
static long g_kick_polls;   /* its 10 ms polls: twice the launcher's timeout, and 5 s */
static long g_max_fd;       /* the files its child closes */
static volatile sig_atomic_t g_launcher_ending; /* SIGCONT came: how mpirun starts ending a job */

static void on_sigcont(int sig)
{
    (void)sig;
    g_launcher_ending = 1;
}

/* Whether Open MPI's mpirun or orted started this process: read before MPI_Init, which in a
 * process started alone starts an orted of its own and sets the same variables. */
static int under_open_mpi_launcher(void)
{
    static int launched = -1;
    if (launched < 0) launched = getenv("OMPI_MCA_orte_hnp_uri") != NULL;
    return launched;
}

/* Arms kick_launcher (outside signal handlers: it reads the environment). */
static void kick_setup(void)
{
    g_kick_launcher = under_open_mpi_launcher();
    g_kick_polls = (long)((2 * launcher_kill_timeout() + 5) * 100);
    g_max_fd = sysconf(_SC_OPEN_MAX);
    if (g_max_fd <= 0 || g_max_fd > 65536) g_max_fd = 65536;
}

/* Under Open MPI's launcher, leaves behind a process that cuts the launcher's sleeps short
 * (above) while this rank ends: it holds none of the rank's files (the launcher waits for
 * their end), ignores SIGTERM and sends SIGCHLD every 10 ms until the launcher is gone, its
 * SIGKILL comes, or twice its timeout has passed. Async-signal-safe. */
static void kick_launcher(void)
{
    if (!g_kick_launcher) return;
    pid_t launcher = getppid();
    if (fork() != 0) return; /* the rank, or no child */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (int fd = 0; fd < g_max_fd; fd++) close(fd);
    for (long i = 0; i < g_kick_polls && kill(launcher, SIGCHLD) == 0; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    _exit(0);
}

/* Sends `note` on the alarm communicator to every rank but this one and `skip`, waiting `wait`
 * seconds at most for the messages to leave. */
static void tell_peers(int32_t note, int me, int skip, double wait)
{
    MPI_Request *q = td_xcalloc((size_t)g_npeers, sizeof *q);
    for (int p = 0; p < g_npeers; p++) {
        q[p] = MPI_REQUEST_NULL;
        if (p != skip && p != me && MPI_Isend(&note, 1, MPI_INT32_T, p, ALARM_TAG, g_alarm, &q[p]) != MPI_SUCCESS)
            q[p] = MPI_REQUEST_NULL;
    }
    double t0 = td_now();
    for (int done = 0; !done && td_now() - t0 < wait;) {
        if (MPI_Testall(g_npeers, q, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        struct timespec ts = {0, 1000000};
        if (!done) nanosleep(&ts, NULL);
    }
    free(q);
}

/* Tells every other living rank that rank r is gone, waiting a second at most. */
static void raise_alarm(int r, int me) { tell_peers(r, me, r, 1.0); }

/* Says which peer is gone, passes the word on if this rank found it, and ends this rank (the
 * launcher is ending the job already). */
static void __attribute__((noreturn)) lost_peer(int r, int heard)
{
    fflush(stdout);
    if (heard >= 2) { /* rank r ended on an error it reported: end quietly with its code */
        kick_launcher();
        _exit(heard - 2);
    }
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    fprintf(stderr, "[rank %d] error: world rank %d (pid %d on %s) is gone (killed or crashed): ending the job%s; "
                    "its own output or the launcher's says why\n",
            me, r, (int)g_peers[r].pid, g_peers[r].host, heard ? " (heard from a rank of its node)" : "");
    fflush(stderr);
    if (!heard) raise_alarm(r, me);
    kick_launcher();
    if (!g_kick_launcher) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static void abort_hook(int code)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized && g_world != MPI_COMM_NULL) {
        int size = 1;
        MPI_Comm_size(g_world, &size);
        if (size > 1) {
            kick_launcher();
            MPI_Abort(g_world, code);
        }
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
    kick_launcher();
    if (g_world != MPI_COMM_NULL) MPI_Abort(g_world, 128 + sig);
    raise(sig);
}

static MPI_Comm g_usage_comm = MPI_COMM_NULL; /* comm_usage_exit's barrier, once the world exists */

comm *comm_world_init(int *argc, char ***argv)
{
    int provided = 0;
    under_open_mpi_launcher();
    TD_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    TD_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    g_world = MPI_COMM_WORLD;
    /* comm_usage_exit's barrier on a communicator of its own: on the world's it could match a
     * collective of a rank still running (rank 0 ending while the others wait in a barrier) */
    TD_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &g_usage_comm));
    comm *w = wrap(MPI_COMM_WORLD, 0);
    comm_set_name(w, "world");
    td_log_set_rank(w->size > 1 ? w->rank : -1);
    td_set_abort_hook(abort_hook);
    if (w->size > 1) {
        signal(SIGSEGV, on_signal);
        signal(SIGBUS, on_signal);
        signal(SIGFPE, on_signal);
        signal(SIGILL, on_signal);
        watch_init(MPI_COMM_WORLD, w->rank, w->size);
    }
    kick_setup();
    if (g_kick_launcher) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigcont;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGCONT, &sa, NULL);
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
    under_open_mpi_launcher();
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
    watch_close();
    MPI_Finalize();
    comm_exit(code);
}

/* Tells every other rank that this one ends with `code` after saying why (so that they end
 * quietly rather than report it lost), waiting 0.2 s at most for the messages to leave. */
static void announce_exit(int code)
{
    int inited = 0, finalized = 0, me = -1;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized || g_alarm == MPI_COMM_NULL || code <= 0 || code > 255) return;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    tell_peers(g_npeers * code + me, me, -1, 0.2);
}

void comm_exit(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (code != 0) announce_exit(code);
    kick_setup();
    if (code != 0 || g_launcher_ending) kick_launcher(); /* e.g. exiting after a save on SIGTERM */
    exit(code);
}

void comm_world_finalize(comm *world)
{
    /* mpirun is ending the job (e.g. the ranks saved on its SIGTERM): MPI_Finalize needs it,
     * asleep, so it would return only at the SIGKILL, twice the timeout after the SIGTERM */
    if (g_launcher_ending) {
        fflush(stdout);
        fflush(stderr);
        kick_launcher();
    }
    td_set_abort_hook(NULL);
    watch_close();
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
    kick_launcher();
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
 * naming this rank, the call, the group and the peer instead of hanging, and a wait on a dead
 * peer ends it at once (checked every half second). The first millisecond spins; after that
 * each poll yields the core (oversubscribed ranks need it) for a twentieth of the time waited so
 * far (20 us to 1 ms), so a long wait wakes rarely and ends at most 5% (or 1 ms) late. */
static void bounded_wait(const comm *c, MPI_Request *req, const char *call, int peer, const char *file, int line)
{
    double limit = comm_timeout(), t0 = td_now(), now = t0, next_watch = t0 + 0.5;
    for (long spins = 0;; spins++) {
        int done = 0;
        check_mpi(MPI_Test(req, &done, MPI_STATUS_IGNORE), call, file, line);
        if (done) return;
        if ((spins & 63) != 63) continue;
        now = td_now();
        if (now - t0 > 1e-3) { /* sleep a twentieth of the wait so far, 20 us to 1 ms: at most 5% late */
            double s = (now - t0) / 20;
            struct timespec ts = {0, (long)(1e9 * (s < 2e-5 ? 2e-5 : s > 1e-3 ? 1e-3 : s))};
            nanosleep(&ts, NULL);
        }
        if (now > next_watch) {
            next_watch = now + 0.5;
            int heard, dead = dead_peer(&heard);
            if (dead >= 0) lost_peer(dead, heard);
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
