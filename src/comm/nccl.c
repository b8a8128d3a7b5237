/* NCCL communicator: the comm vtable over NCCL for buffers in device memory (docs/gpu.md, "NCCL").
 * Every twin is one NCCL communicator over the ranks of an MPI group (or a solo world of one),
 * bootstrapped over that group: rank 0 asks ncclGetUniqueId, comm_bcast carries the id, every
 * rank joins with ncclCommInitRankConfig. libnccl.so.2 is opened at run time (td_dynlib_open), so
 * the binary carries no NCCL and runs where there is none.
 *
 * Streams. Each twin has a stream of its own; an operation records an event on the backend's
 * stream, makes the twin's stream wait for it (so the data the kernels produced is there), runs
 * the NCCL call on the twin's stream and records an event after it; a blocking call then makes
 * the backend's stream wait for that event (the kernels that read the result run after it) and
 * returns without a host synchronisation; a request carries the event, its wait makes the
 * backend's stream wait for it, its test asks cudaEventQuery. The work queued on the backend's
 * stream between a request's start and its wait runs beside the transfer (data parallelism's
 * buckets behind the backward, the pipeline's stage transfers behind the next micro-batch), and
 * groups do not queue behind each other's transfers (tp's collectives beside dp's buckets). The
 * caller keeps MPI's rule: a buffer in flight is neither read, written nor freed before its wait.
 *
 * Point-to-point messages (isend, irecv) wait in a list until the first test or wait of the
 * twin, or its next collective, and then start together in one ncclGroupStart/End: NCCL
 * completes a send only once its receive runs, and two ranks that each send before receiving
 * would otherwise each wait behind their own send. A twin made for messages (p2p: the pp and cp
 * groups) sends those between neighbours on the ring of its ranks (the pipeline's stages, the
 * interleaved schedule's last-to-first, context parallelism's ring) on channels: a two-rank
 * communicator for each ordered pair of neighbours, with a stream of its own at each end. On one
 * in-order stream a receive posted ahead (the pipeline posts them early) would hold back the
 * sends behind it, and two neighbours could each wait for the other's send queued behind its own
 * receive (stage s receiving a gradient before sending an activation, stage s + 1 receiving that
 * activation before sending the gradient); on a channel a message waits only for the one before
 * it on the same way between the same two ranks, as MPI's would. NCCL matches the messages
 * between two ranks in the order they were posted: tags are not matched (the callers post in
 * the same order on both sides). The v-collectives are grouped NCCL calls: an all-gatherv one broadcast a rank, a
 * reduce-scatterv one reduce a rank, a plain all-gather or reduce-scatter when every rank has the
 * same count and the parts lie in rank order.
 *
 * Every host-side wait (the barrier, NCCL's own work in progress on a non-blocking
 * communicator) polls with the comm timeout and ncclCommGetAsyncError; on a timeout or an error
 * the communicator is aborted (ncclCommAbort) and the job ends with one line naming the call,
 * the group, this rank and host and NCCL's error text. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>

#include "nccl_twin.h"
#include "trident/check.h"
#include "trident/dynlib.h"
#include "trident/timer.h"

#define NCCL_SONAME "libnccl.so.2"
#define NCCL_FIX                                                                                               \
    "install NCCL for CUDA 13 (pip install nvidia-nccl-cu13, then put its nvidia/nccl/lib on LD_LIBRARY_PATH, " \
    "or the CUDA toolkit's libnccl2), or run with --comm mpi"

/* The functions of libnccl this file calls, each with the type of its declaration in nccl.h. */
static struct {
    __typeof__(ncclGetVersion) *ncclGetVersion;
    __typeof__(ncclGetUniqueId) *ncclGetUniqueId;
    __typeof__(ncclCommInitRankConfig) *ncclCommInitRankConfig;
    __typeof__(ncclCommFinalize) *ncclCommFinalize;
    __typeof__(ncclCommDestroy) *ncclCommDestroy;
    __typeof__(ncclCommAbort) *ncclCommAbort;
    __typeof__(ncclCommGetAsyncError) *ncclCommGetAsyncError;
    __typeof__(ncclGetErrorString) *ncclGetErrorString;
    __typeof__(ncclGetLastError) *ncclGetLastError;
    __typeof__(ncclAllReduce) *ncclAllReduce;
    __typeof__(ncclBroadcast) *ncclBroadcast;
    __typeof__(ncclReduce) *ncclReduce;
    __typeof__(ncclAllGather) *ncclAllGather;
    __typeof__(ncclReduceScatter) *ncclReduceScatter;
    __typeof__(ncclSend) *ncclSend;
    __typeof__(ncclRecv) *ncclRecv;
    __typeof__(ncclGroupStart) *ncclGroupStart;
    __typeof__(ncclGroupEnd) *ncclGroupEnd;
} L;

#define NCCL_NSYMS 18
static void nccl_syms(td_dynsym out[NCCL_NSYMS])
{
    const td_dynsym s[NCCL_NSYMS] = {
        TD_DYNSYM(L, ncclGetVersion),        TD_DYNSYM(L, ncclGetUniqueId),    TD_DYNSYM(L, ncclCommInitRankConfig),
        TD_DYNSYM(L, ncclCommFinalize),      TD_DYNSYM(L, ncclCommDestroy),    TD_DYNSYM(L, ncclCommAbort),
        TD_DYNSYM(L, ncclCommGetAsyncError), TD_DYNSYM(L, ncclGetErrorString), TD_DYNSYM(L, ncclGetLastError),
        TD_DYNSYM(L, ncclAllReduce),         TD_DYNSYM(L, ncclBroadcast),      TD_DYNSYM(L, ncclReduce),
        TD_DYNSYM(L, ncclAllGather),         TD_DYNSYM(L, ncclReduceScatter), TD_DYNSYM(L, ncclSend),
        TD_DYNSYM(L, ncclRecv),              TD_DYNSYM(L, ncclGroupStart),     TD_DYNSYM(L, ncclGroupEnd),
    };
    memcpy(out, s, sizeof s);
}

int nccl_loadable(char *why, size_t len)
{
    void *h = dlopen(NCCL_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        td_seterr(why, len, "%s does not open (%s): %s", NCCL_SONAME, e ? e : "not found", NCCL_FIX);
        return 0;
    }
    td_dynsym s[NCCL_NSYMS];
    nccl_syms(s);
    for (int i = 0; i < NCCL_NSYMS; i++)
        if (!dlsym(h, s[i].name)) {
            td_seterr(why, len, "%s has no %s (NCCL older than 2.19?): %s", NCCL_SONAME, s[i].name, NCCL_FIX);
            dlclose(h);
            return 0;
        }
    dlclose(h);
    return 1;
}

static void nccl_open(void)
{
    td_dynsym s[NCCL_NSYMS];
    nccl_syms(s);
    td_dynlib_open(NCCL_SONAME, "--comm nccl (device buffers between GPUs)", NCCL_FIX, s, NCCL_NSYMS);
}

/* A point-to-point message waiting for the twin's next group. */
typedef struct nccl_req nccl_req;
struct nccl_req {
    comm_req base;
    cudaEvent_t ev;      /* recorded on the twin's stream after the operation; NULL until started */
    int is_send, peer;
    void *buf;           /* a message's buffer (a send's is const while it waits) */
    size_t count;
    comm_dtype t;
    nccl_req *next;      /* the twin's messages not yet started, oldest first */
};

typedef struct {
    ncclComm_t nc;
    cudaStream_t s;      /* the twin's own stream */
    /* A twin made for point-to-point messages (comm_make_twin's p2p, groups of two ranks or more):
     * a channel for each ordered pair of neighbours on the ring of the group's ranks, a two-rank
     * communicator with a stream of its own at each end; this rank's ends, by lane (lane_of): to
     * rank + 1, from rank - 1, to rank - 1, from rank + 1 (the last two only beyond two ranks).
     * NULL otherwise, and other messages: on nc. */
    ncclComm_t ch[4];
    cudaStream_t chs[4];
    int p2p;
    cudaStream_t be;     /* the backend's stream the work is ordered against */
    cudaEvent_t ready;   /* recorded on be before each operation */
    cudaEvent_t done;    /* recorded on s after each blocking operation */
    int *scratch;        /* one device int: the barrier's all-reduce */
    nccl_req *queued;    /* point-to-point messages not yet started */
    const comm *group;   /* the group it twins (its name and ranks in messages) */
    char cname[5][64];   /* NCCL's names for its communicators (config.commName, kept while they
                          * live): "trident pp", "trident pp 2>3", ... */
} twin_state;

static const struct comm_ops NCCL_OPS;

#define TW(c) ((twin_state *)(c)->impl)

/* This rank's place in messages: "world rank W on HOST". */
static void where(char *out, size_t len)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    int r = td_log_rank();
    snprintf(out, len, "world rank %d on %s", r < 0 ? 0 : r, host);
}

/* Aborts c's NCCL communicator and ends the job: one line naming the call, the group, this rank
 * and NCCL's (or CUDA's) error text. */
static void __attribute__((noreturn)) fail(const comm *c, const char *call, const char *file, int line, const char *what)
{
    char me[320], last[512] = "";
    where(me, sizeof me);
    twin_state *s = TW(c);
    ncclComm_t *all[5] = {&s->nc, &s->ch[0], &s->ch[1], &s->ch[2], &s->ch[3]};
    for (int k = 0; k < 5; k++)
        if (*all[k]) {
            const char *l = L.ncclGetLastError ? L.ncclGetLastError(*all[k]) : NULL;
            if (l && *l && !last[0]) snprintf(last, sizeof last, " (%s)", l);
            L.ncclCommAbort(*all[k]);
            *all[k] = NULL;
        }
    td_die(file, line, call, "a peer rank or its GPU may have failed; see the first error above (NCCL_DEBUG=WARN says more)",
           "%s%s on the %s group's NCCL communicator (rank %d of %d), in %s", what, last,
           c->name[0] ? c->name : "world", c->rank, c->size, me);
}

static void sleep_a_little(double waited)
{
    double s = waited / 20; /* a twentieth of the wait so far, 20 us to 1 ms */
    struct timespec ts = {0, (long)(1e9 * (s < 2e-5 ? 2e-5 : s > 1e-3 ? 1e-3 : s))};
    nanosleep(&ts, NULL);
}

/* rc of an NCCL call on nc, one of c's communicators: success returns; ncclInProgress (the
 * communicator is non-blocking: NCCL is still connecting or enqueuing) polls
 * ncclCommGetAsyncError until it settles, within the comm timeout; anything else ends the job
 * naming `call`. */
static void settle(const comm *c, ncclComm_t nc, ncclResult_t rc, const char *call, const char *file, int line)
{
    double t0 = td_now(), limit = comm_timeout();
    while (rc == ncclInProgress) {
        double now = td_now();
        if (limit > 0 && now - t0 > limit) {
            char what[160];
            snprintf(what, sizeof what, "no progress for %.1f s (--distributed-timeout-minutes %g)", now - t0,
                     limit / 60);
            fail(c, call, file, line, what);
        }
        sleep_a_little(now - t0);
        ncclResult_t st = ncclInProgress;
        ncclResult_t q = L.ncclCommGetAsyncError(nc, &st);
        rc = q != ncclSuccess ? q : st;
    }
    if (rc != ncclSuccess) fail(c, call, file, line, L.ncclGetErrorString(rc));
}
#define NC(c, call) settle((c), TW(c)->nc, (call), #call, __FILE__, __LINE__)
#define NCON(c, nc, call) settle((c), (nc), (call), #call, __FILE__, __LINE__)

/* An asynchronous error on any of c's communicators (ncclSuccess: none). */
static ncclResult_t async_error(const comm *c)
{
    twin_state *s = TW(c);
    ncclComm_t all[5] = {s->nc, s->ch[0], s->ch[1], s->ch[2], s->ch[3]};
    for (int k = 0; k < 5; k++) {
        ncclResult_t st = ncclSuccess;
        if (all[k] && L.ncclCommGetAsyncError(all[k], &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
            return st;
    }
    return ncclSuccess;
}

static void cuda_ok(const comm *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (e != cudaSuccess) fail(c, call, file, line, cudaGetErrorString(e));
}
#define CU(c, call) cuda_ok((c), (call), #call, __FILE__, __LINE__)

/* Polls ev (recorded on the twin's stream) until it has passed, within the comm timeout, with
 * NCCL's asynchronous errors looked at meanwhile: the one host-side wait for device work. */
static void host_wait(const comm *c, cudaEvent_t ev, const char *call)
{
    double t0 = td_now(), limit = comm_timeout();
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) fail(c, call, __FILE__, __LINE__, cudaGetErrorString(e));
        (void)cudaGetLastError(); /* not ready is no error: clear it */
        ncclResult_t st = async_error(c);
        if (st != ncclSuccess) fail(c, call, __FILE__, __LINE__, L.ncclGetErrorString(st));
        double now = td_now();
        if (limit > 0 && now - t0 > limit) {
            char what[160];
            snprintf(what, sizeof what, "no progress for %.1f s (--distributed-timeout-minutes %g)", now - t0,
                     limit / 60);
            fail(c, call, __FILE__, __LINE__, what);
        }
        sleep_a_little(now - t0);
    }
}

static ncclDataType_t nc_type(comm_dtype t)
{
    switch (t) {
    case COMM_F32: return ncclFloat32;
    case COMM_F64: return ncclFloat64;
    case COMM_I32: return ncclInt32;
    case COMM_I64: return ncclInt64;
    case COMM_U8: return ncclUint8;
    }
    return ncclUint8;
}

static ncclRedOp_t nc_op(comm_op op)
{
    switch (op) {
    case COMM_SUM: return ncclSum;
    case COMM_MAX: return ncclMax;
    case COMM_MIN: return ncclMin;
    }
    return ncclSum;
}

static void start_queued(const comm *c);

/* Before an operation: the messages waiting start first (the order of posting is kept), then the
 * twin's stream waits for the backend's work so far. */
static void begin(const comm *c)
{
    start_queued(c);
    twin_state *s = TW(c);
    CU(c, cudaEventRecord(s->ready, s->be));
    CU(c, cudaStreamWaitEvent(s->s, s->ready, 0));
}

/* After a blocking operation: the backend's later work waits for it (no host wait). */
static void end_blocking(const comm *c)
{
    twin_state *s = TW(c);
    CU(c, cudaEventRecord(s->done, s->s));
    CU(c, cudaStreamWaitEvent(s->be, s->done, 0));
}

static nccl_req *new_req(const comm *c)
{
    nccl_req *q = td_xcalloc(1, sizeof *q);
    q->base.c = c;
    return q;
}

/* After a non-blocking operation on stream st: its request, holding an event after it. */
static comm_req *end_req_on(const comm *c, nccl_req *q, cudaStream_t st)
{
    CU(c, cudaEventCreateWithFlags(&q->ev, cudaEventDisableTiming));
    CU(c, cudaEventRecord(q->ev, st));
    return &q->base;
}
static comm_req *end_req(const comm *c, nccl_req *q) { return end_req_on(c, q, TW(c)->s); }

/* ---- the twin's life ---- */

/* Joins the NCCL communicator `id` names as rank `rank` of `n` into *slot (c's, so that a failure
 * aborts it); NCCL's name for it, kept in `name`, is `label`. */
static void join(comm *c, ncclUniqueId id, int n, int rank, ncclComm_t *slot, const char *label, char name[64])
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    int v = 0;
    if (L.ncclGetVersion(&v) == ncclSuccess && v > 0 && (unsigned)v < cfg.version)
        cfg.version = (unsigned)v; /* an older library reads the fields it knows */
    cfg.blocking = 0; /* calls return while NCCL connects: settle() waits with the timeout */
    snprintf(name, 64, "%s", label);
    cfg.commName = name;
    ncclResult_t rc = L.ncclCommInitRankConfig(slot, n, id, rank, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        *slot = NULL; /* nothing to abort */
        fail(c, "ncclCommInitRankConfig", __FILE__, __LINE__, L.ncclGetErrorString(rc));
    }
    NCON(c, *slot, rc);
}

/* ---- channels: the messages between ring neighbours of a p2p twin ---- */

int nccl_channels(int n) { return n < 2 ? 0 : n == 2 ? 2 : 2 * n; }

void nccl_channel_ends(int n, int k, int *from, int *to)
{
    int i = n == 2 ? k : k / 2, fwd = n == 2 || k % 2 == 0;
    *from = fwd ? i : (i + 1) % n;
    *to = fwd ? (i + 1) % n : i;
}

int nccl_lane(int n, int me, int is_send, int peer)
{
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    if (n < 2 || peer == me) return 0;
    if (is_send) return peer == next ? 1 : peer == prev && n > 2 ? 3 : 0;
    return peer == prev ? 2 : peer == next && n > 2 ? 4 : 0;
}

int nccl_channel_lane(int n, int k, int me)
{
    int from, to;
    nccl_channel_ends(n, k, &from, &to);
    if (me == from) return nccl_lane(n, me, 1, to);
    if (me == to) return nccl_lane(n, me, 0, from);
    return 0;
}

/* The channels of a p2p twin of g (g's size > 1; nccl_twin.h). The sender of each makes its id
 * and sends it to the receiver over g (MPI, bounded waits); then every rank joins its channels in
 * channel order, so that no two ranks wait for each other in a circle. */
static void make_channels(comm *c, const comm *g)
{
    twin_state *s = TW(c);
    int n = g->size, me = g->rank, nch = nccl_channels(n);
    ncclUniqueId *ids = td_xcalloc((size_t)nch, sizeof *ids);
    comm_req **q = td_xcalloc((size_t)nch, sizeof *q);
    for (int k = 0; k < nch; k++) {
        int from, to;
        nccl_channel_ends(n, k, &from, &to);
        if (me == from) {
            NCON(c, NULL, L.ncclGetUniqueId(&ids[k]));
            q[k] = comm_isend(g, &ids[k], sizeof ids[k], COMM_U8, to, 30000 + k);
        } else if (me == to) {
            q[k] = comm_irecv(g, &ids[k], sizeof ids[k], COMM_U8, from, 30000 + k);
        }
    }
    for (int k = 0; k < nch; k++) comm_wait(q[k]);
    for (int k = 0; k < nch; k++) {
        int from, to, l = nccl_channel_lane(n, k, me) - 1;
        if (l < 0) continue;
        nccl_channel_ends(n, k, &from, &to);
        char label[64];
        snprintf(label, sizeof label, "trident %.20s %d>%d", g->name[0] ? g->name : "world", from, to);
        CU(c, cudaStreamCreateWithFlags(&s->chs[l], cudaStreamNonBlocking));
        join(c, ids[k], 2, me == from ? 0 : 1, &s->ch[l], label, s->cname[1 + l]);
    }
    free(ids), free(q);
}

comm *nccl_twin_new(const comm *g, void *stream, int p2p)
{
    nccl_open();
    comm *c = td_xcalloc(1, sizeof *c);
    twin_state *s = td_xcalloc(1, sizeof *s);
    c->ops = &NCCL_OPS;
    c->rank = g->rank, c->size = g->size;
    c->impl = s;
    comm_set_name(c, g->name);
    s->group = g;
    s->be = (cudaStream_t)stream;
    CU(c, cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking));
    CU(c, cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
    CU(c, cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    CU(c, cudaMalloc((void **)&s->scratch, sizeof(int)));
    s->p2p = p2p;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (g->rank == 0) NCON(c, NULL, L.ncclGetUniqueId(&id));
    comm_bcast(g, &id, sizeof id, COMM_U8, 0); /* over MPI, bounded by its timeout */
    char label[64];
    snprintf(label, sizeof label, "trident %.20s", g->name[0] ? g->name : "world");
    join(c, id, g->size, g->rank, &s->nc, label, s->cname[0]);
    if (p2p && g->size > 1) make_channels(c, g);
    return c;
}

void *nccl_twin_stream(const comm *twin) { return TW(twin)->be; }
int nccl_twin_p2p(const comm *twin) { return TW(twin)->p2p; }

int comm_nccl_loadable(char *why, size_t len) { return nccl_loadable(why, len); }

void comm_make_twin(comm *c, void *stream, int p2p)
{
    if (c && !c->twin && !c->ops->device) c->twin = nccl_twin_new(c, stream, p2p);
}

static comm *nc_twin_of(const comm *twin, const comm *group)
{
    return nccl_twin_new(group, nccl_twin_stream(twin), nccl_twin_p2p(twin));
}

static comm *nc_split(const comm *c, int color, int key)
{
    (void)color, (void)key;
    td_die(__FILE__, __LINE__, "comm_split", "this is a bug in trident; please report it",
           "the %s group's NCCL twin was split: split the MPI group (its split gets a twin of its own)", c->name);
}

static void nc_free(comm *c)
{
    twin_state *s = TW(c);
    TD_CHECK(!s->queued, "this is a bug in trident; please report it",
             "the %s group's NCCL twin freed with a message posted and never waited", c->name);
    for (int l = 0; l < 4; l++) { /* the channels: their work has run (bounded), then they go */
        if (!s->ch[l]) continue;
        CU(c, cudaEventRecord(s->done, s->chs[l]));
        host_wait(c, s->done, "comm_free");
        NCON(c, s->ch[l], L.ncclCommFinalize(s->ch[l]));
        NCON(c, s->ch[l], L.ncclCommDestroy(s->ch[l]));
        s->ch[l] = NULL;
        cudaStreamDestroy(s->chs[l]);
    }
    CU(c, cudaEventRecord(s->done, s->s));
    host_wait(c, s->done, "comm_free"); /* the twin's work has run (bounded) */
    NC(c, L.ncclCommFinalize(s->nc));
    NC(c, L.ncclCommDestroy(s->nc));
    s->nc = NULL;
    cudaFree(s->scratch);
    cudaEventDestroy(s->ready);
    cudaEventDestroy(s->done);
    cudaStreamDestroy(s->s);
    free(s);
    free(c);
}

static void nc_abort(const comm *c, int code)
{
    twin_state *s = TW(c);
    ncclComm_t *all[5] = {&s->nc, &s->ch[0], &s->ch[1], &s->ch[2], &s->ch[3]};
    for (int k = 0; k < 5; k++)
        if (*all[k]) {
            L.ncclCommAbort(*all[k]);
            *all[k] = NULL;
        }
    comm_abort(s->group, code);
}

/* ---- collectives ---- */

static void nc_barrier(const comm *c)
{
    twin_state *s = TW(c);
    begin(c);
    NC(c, L.ncclAllReduce(s->scratch, s->scratch, 1, ncclInt32, ncclSum, s->nc, s->s));
    CU(c, cudaEventRecord(s->done, s->s));
    host_wait(c, s->done, "ncclAllReduce (barrier)");
}

static void nc_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    begin(c);
    NC(c, L.ncclBroadcast(buf, buf, count, nc_type(t), root, TW(c)->nc, TW(c)->s));
    end_blocking(c);
}

static void nc_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    begin(c);
    NC(c, L.ncclAllReduce(buf, buf, count, nc_type(t), nc_op(op), TW(c)->nc, TW(c)->s));
    end_blocking(c);
}

static void nc_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    begin(c);
    NC(c, L.ncclAllGather(send, recv, count, nc_type(t), TW(c)->nc, TW(c)->s));
    end_blocking(c);
}

static void nc_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    begin(c);
    NC(c, L.ncclReduceScatter(send, recv, count, nc_type(t), nc_op(op), TW(c)->nc, TW(c)->s));
    end_blocking(c);
}

/* Grouped sends and receives: every rank r with scounts[r] elements at sdispls[r] of send, from
 * every rank r rcounts[r] at rdispls[r] of recv, this rank itself included. */
static void nc_alltoallv(const comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                         const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag)
{
    (void)tag;
    twin_state *s = TW(c);
    size_t es = comm_dtype_size(t);
    begin(c);
    NC(c, L.ncclGroupStart());
    for (int r = 0; r < c->size; r++) {
        if (rcounts[r])
            NC(c, L.ncclRecv((char *)recv + rdispls[r] * es, rcounts[r], nc_type(t), r, s->nc, s->s));
        if (scounts[r])
            NC(c, L.ncclSend((const char *)send + sdispls[r] * es, scounts[r], nc_type(t), r, s->nc, s->s));
    }
    NC(c, L.ncclGroupEnd());
    end_blocking(c);
}

/* ---- non-blocking operations ---- */

/* Which of c's communicators carries message m: 0 the twin's own (every message without
 * channels, and those to itself or to a rank that is no neighbour), else 1 + the channel's lane:
 * 1 to rank + 1, 2 from rank - 1, 3 to rank - 1, 4 from rank + 1. Both ends of a message name
 * the same channel. */
static int lane_of(const comm *c, const nccl_req *m)
{
    return TW(c)->ch[0] ? nccl_lane(c->size, c->rank, m->is_send, m->peer) : 0;
}

/* The messages posted since the last start, each communicator's in one group on its stream, each
 * request given its event. On a channel's stream a rank's messages go one way to one peer only,
 * in the order both post them, so no message waits behind another to a different peer or in the
 * other direction: on one in-order stream a receive posted ahead (the pipeline posts them early)
 * would hold back the sends behind it, and two neighbours could each wait for the other's send
 * queued behind its own receive (stage s receiving a gradient before sending an activation,
 * stage s + 1 receiving that activation before sending the gradient). */
static void start_queued(const comm *c)
{
    twin_state *s = TW(c);
    nccl_req *q = s->queued;
    if (!q) return;
    s->queued = NULL;
    CU(c, cudaEventRecord(s->ready, s->be));
    for (int lane = 0; lane < 5; lane++) {
        ncclComm_t nc = lane == 0 ? s->nc : s->ch[lane - 1];
        cudaStream_t st = lane == 0 ? s->s : s->chs[lane - 1];
        int any = 0;
        for (nccl_req *m = q; m; m = m->next) any |= lane_of(c, m) == lane;
        if (!any) continue;
        CU(c, cudaStreamWaitEvent(st, s->ready, 0));
        NCON(c, nc, L.ncclGroupStart());
        for (nccl_req *m = q; m; m = m->next) {
            if (lane_of(c, m) != lane) continue;
            int peer = lane == 0 ? m->peer : lane == 1 || lane == 3 ? 1 : 0; /* in a channel: 0 sends, 1 receives */
            if (m->is_send) NCON(c, nc, L.ncclSend(m->buf, m->count, nc_type(m->t), peer, nc, st));
            else NCON(c, nc, L.ncclRecv(m->buf, m->count, nc_type(m->t), peer, nc, st));
        }
        NCON(c, nc, L.ncclGroupEnd());
        for (nccl_req *m = q; m; m = m->next)
            if (lane_of(c, m) == lane) end_req_on(c, m, st);
    }
    for (nccl_req *m = q, *n; m; m = n) {
        n = m->next;
        m->next = NULL;
    }
}

static comm_req *post(const comm *c, int is_send, void *buf, size_t count, comm_dtype t, int peer)
{
    if (peer < 0 || peer >= c->size)
        td_die(__FILE__, __LINE__, is_send ? "comm_isend" : "comm_irecv", "this is a bug in trident; please report it",
               "peer %d is not a rank of the %s group (%d ranks)", peer, c->name, c->size);
    nccl_req *q = new_req(c);
    q->is_send = is_send, q->peer = peer, q->buf = buf, q->count = count, q->t = t;
    nccl_req **pp = &TW(c)->queued;
    while (*pp) pp = &(*pp)->next;
    *pp = q;
    return &q->base;
}

static comm_req *nc_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    (void)tag;
    return post(c, 1, (void *)buf, count, t, peer);
}

static comm_req *nc_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    (void)tag;
    return post(c, 0, buf, count, t, peer);
}

static comm_req *nc_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    begin(c);
    NC(c, L.ncclAllReduce(buf, buf, count, nc_type(t), nc_op(op), TW(c)->nc, TW(c)->s));
    return end_req(c, new_req(c));
}

static comm_req *nc_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                    comm_op op)
{
    begin(c);
    NC(c, L.ncclReduceScatter(send, recv, count, nc_type(t), nc_op(op), TW(c)->nc, TW(c)->s));
    return end_req(c, new_req(c));
}

/* Whether every rank has counts[0] elements and, with displs, the parts lie in rank order. */
static int uniform(const size_t *counts, const size_t *displs, int n)
{
    for (int r = 0; r < n; r++)
        if (counts[r] != counts[0] || (displs && displs[r] != (size_t)r * counts[0])) return 0;
    return 1;
}

static comm_req *nc_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    twin_state *s = TW(c);
    size_t es = comm_dtype_size(t);
    char *b = buf;
    begin(c);
    if (uniform(counts, displs, c->size)) { /* NCCL's in-place all-gather: this rank's part at its place */
        NC(c, L.ncclAllGather(b + displs[c->rank] * es, b, counts[0], nc_type(t), s->nc, s->s));
    } else {
        NC(c, L.ncclGroupStart());
        for (int r = 0; r < c->size; r++)
            if (counts[r])
                NC(c, L.ncclBroadcast(b + displs[r] * es, b + displs[r] * es, counts[r], nc_type(t), r, s->nc, s->s));
        NC(c, L.ncclGroupEnd());
    }
    return end_req(c, new_req(c));
}

static comm_req *nc_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                     comm_op op)
{
    twin_state *s = TW(c);
    size_t es = comm_dtype_size(t);
    begin(c);
    if (uniform(counts, NULL, c->size)) {
        NC(c, L.ncclReduceScatter(send, recv, counts[0], nc_type(t), nc_op(op), s->nc, s->s));
    } else {
        NC(c, L.ncclGroupStart());
        size_t at = 0;
        for (int r = 0; r < c->size; r++) {
            if (counts[r])
                NC(c, L.ncclReduce((const char *)send + at * es, r == c->rank ? recv : NULL, counts[r], nc_type(t),
                                   nc_op(op), r, s->nc, s->s));
            at += counts[r];
        }
        NC(c, L.ncclGroupEnd());
    }
    return end_req(c, new_req(c));
}

/* The backend's stream waits for the request (no host wait): the kernels enqueued after the wait
 * run after the transfer. */
static void nc_wait(comm_req *r)
{
    nccl_req *q = (nccl_req *)r;
    const comm *c = r->c;
    if (!q->ev) start_queued(c);
    CU(c, cudaStreamWaitEvent(TW(c)->be, q->ev, 0));
    CU(c, cudaEventDestroy(q->ev)); /* released once it has passed */
    free(q);
}

static int nc_test(comm_req *r)
{
    nccl_req *q = (nccl_req *)r;
    const comm *c = r->c;
    if (!q->ev) start_queued(c);
    cudaError_t e = cudaEventQuery(q->ev);
    if (e == cudaSuccess) return 1;
    if (e != cudaErrorNotReady) fail(c, "cudaEventQuery", __FILE__, __LINE__, cudaGetErrorString(e));
    (void)cudaGetLastError();
    ncclResult_t st = async_error(c);
    if (st != ncclSuccess) fail(c, "ncclCommGetAsyncError", __FILE__, __LINE__, L.ncclGetErrorString(st));
    return 0;
}

static const struct comm_ops NCCL_OPS = {
    .name = "nccl",
    .device = 1,
    .split = nc_split,
    .free = nc_free,
    .abort = nc_abort,
    .barrier = nc_barrier,
    .bcast = nc_bcast,
    .allreduce = nc_allreduce,
    .allgather = nc_allgather,
    .reduce_scatter = nc_reduce_scatter,
    .alltoallv = nc_alltoallv,
    .isend = nc_isend,
    .irecv = nc_irecv,
    .iallreduce = nc_iallreduce,
    .ireduce_scatter = nc_ireduce_scatter,
    .iallgatherv = nc_iallgatherv,
    .ireduce_scatterv = nc_ireduce_scatterv,
    .wait = nc_wait,
    .test = nc_test,
    .twin_of = nc_twin_of,
};
