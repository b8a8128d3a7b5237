/* Communicator front end: dispatch through the vtable, with the one-rank fast paths and
 * timing in one place. See include/comm/trident/comm.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "trident/check.h"
#include "trident/timer.h"

size_t comm_dtype_size(comm_dtype t)
{
    switch (t) {
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    case COMM_I32: return 4;
    case COMM_I64: return 8;
    case COMM_U8: return 1;
    }
    return 0;
}

static double g_timeout = 600;

void comm_set_timeout(double seconds) { g_timeout = seconds > 0 ? seconds : 0; }
double comm_timeout(void) { return g_timeout; }
void comm_set_name(comm *c, const char *name)
{
    snprintf(c->name, sizeof c->name, "%s", name);
    if (c->twin) comm_set_name(c->twin, name);
}
const char *comm_name(const comm *c) { return c->name; }

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
double comm_seconds(const comm *c) { return c->seconds + (c->twin ? c->twin->seconds : 0); } /* its twin's too */

comm *comm_split(const comm *c, int color, int key)
{
    comm *s = c->ops->split(c, color, key);
    comm_set_name(s, c->name);
    if (c->twin) s->twin = c->twin->ops->twin_of(c->twin, s); /* collective over s */
    return s;
}
void comm_free(comm *c)
{
    if (!c) return;
    comm_free(c->twin);
    c->ops->free(c);
}

/* comm_nccl_loadable and comm_make_twin: nccl.c in a build with CUDA, nccl_none.c without. */

const comm *comm_device(const comm *c) { return c && c->twin ? c->twin : c; }
int comm_is_device(const comm *c) { return c && c->ops->device; }

void comm_abort(const comm *c, int code)
{
    c->ops->abort(c, code);
    __builtin_unreachable();
}

/* A communication of c begins or ends: busy grows by the time at least one was in flight. */
static void enter(const comm *c, double now)
{
    comm *m = (comm *)c;
    if (m->inflight++ == 0) m->since = now;
}
static void leave(const comm *c, double now)
{
    comm *m = (comm *)c;
    if (--m->inflight == 0) m->busy += now - m->since;
}

#define TIMED(c, call)                                                                   \
    do {                                                                                 \
        double t0_ = td_now();                                                           \
        enter((c), t0_);                                                                 \
        call;                                                                            \
        double t1_ = td_now();                                                           \
        ((comm *)(c))->seconds += t1_ - t0_;                                             \
        leave((c), t1_);                                                                 \
    } while (0)

/* The requests comm_progress advances: started here, not yet waited. A request that finds the
 * table full is not advanced before its wait (progress is an optimization, never needed). */
#define PENDING_MAX 1024
static comm_req *g_pending[PENDING_MAX];
static int g_npending, g_nactive; /* in the table; of them, not yet seen complete */
static double g_last_progress;

/* r was started at t0 (its start call blocked the rank until now: exposed) and is in flight. */
static comm_req *track(comm_req *r, double t0)
{
    comm *c = (comm *)r->c;
    enter(c, t0);
    c->seconds += td_now() - t0;
    if (g_npending < PENDING_MAX) {
        g_pending[g_npending++] = r;
        r->tracked = 1;
        g_nactive++;
    }
    return r;
}

static void untrack(comm_req *r)
{
    if (!r->tracked) return;
    for (int i = 0; i < g_npending; i++)
        if (g_pending[i] == r) {
            g_pending[i] = g_pending[--g_npending];
            break;
        }
    if (!r->done) g_nactive--;
}

/* r, in flight, was seen complete: its in-flight time ends now and its wait costs nothing. */
static void seen_done(comm_req *r)
{
    r->done = 1;
    if (r->tracked) g_nactive--;
    leave(r->c, td_now());
}

static void (*g_hook)(void *);
static void *g_hook_ctx;
static int g_in_hook;

void comm_set_progress_hook(void (*hook)(void *ctx), void *ctx)
{
    g_hook = hook;
    g_hook_ctx = ctx;
}

int comm_progress(void)
{
    if (g_nactive == 0 && !g_hook) return 0;
    double now = td_now();
    if (now - g_last_progress < COMM_PROGRESS_INTERVAL) return g_nactive;
    g_last_progress = now;
    for (int i = 0; i < g_npending; i++) {
        comm_req *r = g_pending[i];
        if (!r->done && r->c->ops->test(r)) seen_done(r);
    }
    if (g_hook && !g_in_hook) {
        g_in_hook = 1;
        g_hook(g_hook_ctx);
        g_in_hook = 0;
    }
    return g_nactive;
}

double comm_busy_seconds(const comm *c)
{
    double twin = c->twin ? comm_busy_seconds(c->twin) : 0; /* a group's device buffers are its twin's */
    return twin + (c->inflight ? c->busy + (td_now() - c->since) : c->busy);
}

/* A group of one answers at once, but a device twin's (its buffers are not the host's to touch, and
 * NCCL's own one-rank path is what the GPU test exercises). */
static int alone(const comm *c) { return c->size == 1 && !c->ops->device; }

void comm_barrier(const comm *c)
{
    if (!alone(c)) TIMED(c, c->ops->barrier(c));
}

void comm_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    if (!alone(c) && count) TIMED(c, c->ops->bcast(c, buf, count, t, root));
}

void comm_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (!alone(c) && count) TIMED(c, c->ops->allreduce(c, buf, count, t, op));
}

void comm_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    if (c->ops->device && !count) return;
    if (alone(c)) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return;
    }
    TIMED(c, c->ops->allgather(c, send, recv, count, t));
}

void comm_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    if (c->ops->device && !count) return;
    if (alone(c)) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return;
    }
    TIMED(c, c->ops->reduce_scatter(c, send, recv, count, t, op));
}

void comm_alltoallv(const comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                    const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag)
{
    if (c->ops->alltoallv) {
        TIMED(c, c->ops->alltoallv(c, send, scounts, sdispls, recv, rcounts, rdispls, t, tag));
        return;
    }
    size_t es = comm_dtype_size(t);
    int n = c->size, me = c->rank;
    memmove((char *)recv + rdispls[me] * es, (const char *)send + sdispls[me] * es, scounts[me] * es);
    if (n == 1) return;
    comm_req **q = td_xcalloc((size_t)2 * n, sizeof *q);
    for (int i = 1; i < n; i++) { /* receives first, from the ranks after this one around the ring */
        int r = (me + i) % n;
        if (rcounts[r]) q[r] = comm_irecv(c, (char *)recv + rdispls[r] * es, rcounts[r], t, r, tag);
    }
    for (int i = 1; i < n; i++) {
        int r = (me - i + n) % n;
        if (scounts[r]) q[n + r] = comm_isend(c, (const char *)send + sdispls[r] * es, scounts[r], t, r, tag);
    }
    for (int i = 0; i < 2 * n; i++) comm_wait(q[i]);
    free(q);
}

comm_req *comm_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    double t0 = td_now();
    return track(c->ops->isend(c, buf, count, t, peer, tag), t0);
}

comm_req *comm_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    double t0 = td_now();
    return track(c->ops->irecv(c, buf, count, t, peer, tag), t0);
}

comm_req *comm_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (alone(c) || !count) return NULL;
    double t0 = td_now();
    return track(c->ops->iallreduce(c, buf, count, t, op), t0);
}

comm_req *comm_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                               comm_op op)
{
    if (alone(c)) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return NULL;
    }
    double t0 = td_now();
    return track(c->ops->ireduce_scatter(c, send, recv, count, t, op), t0);
}

comm_req *comm_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    if (alone(c)) return NULL;
    double t0 = td_now();
    return track(c->ops->iallgatherv(c, buf, counts, displs, t), t0);
}

comm_req *comm_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                comm_op op)
{
    if (alone(c)) {
        if (send != recv) memmove(recv, send, counts[0] * comm_dtype_size(t));
        return NULL;
    }
    double t0 = td_now();
    return track(c->ops->ireduce_scatterv(c, send, recv, counts, t, op), t0);
}

int comm_test(comm_req *r)
{
    if (!r || r->done) return 1;
    if (!r->c->ops->test(r)) return 0;
    seen_done(r);
    return 1;
}

void comm_wait(comm_req *r)
{
    if (!r) return;
    const comm *c = r->c;
    untrack(r);
    if (r->done) { /* complete already: hidden, nothing to wait for */
        c->ops->wait(r);
        return;
    }
    double t0 = td_now();
    c->ops->wait(r);
    double t1 = td_now();
    ((comm *)c)->seconds += t1 - t0;
    leave(c, t1);
}
