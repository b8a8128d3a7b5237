/* Communicator front end: dispatch through the vtable, with the one-rank fast paths and
 * timing in one place. See include/comm/trident/comm.h. */
#include <stdio.h>
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
void comm_set_name(comm *c, const char *name) { snprintf(c->name, sizeof c->name, "%s", name); }
const char *comm_name(const comm *c) { return c->name; }

int comm_rank(const comm *c) { return c->rank; }
int comm_size(const comm *c) { return c->size; }
double comm_seconds(const comm *c) { return c->seconds; }

comm *comm_split(const comm *c, int color, int key)
{
    comm *s = c->ops->split(c, color, key);
    comm_set_name(s, c->name);
    return s;
}
void comm_free(comm *c)
{
    if (c) c->ops->free(c);
}

void comm_abort(const comm *c, int code)
{
    c->ops->abort(c, code);
    __builtin_unreachable();
}

#define TIMED(c, call)                                                                   \
    do {                                                                                 \
        double t0_ = td_now();                                                           \
        call;                                                                            \
        ((comm *)(c))->seconds += td_now() - t0_;                                        \
    } while (0)

void comm_barrier(const comm *c)
{
    if (c->size > 1) TIMED(c, c->ops->barrier(c));
}

void comm_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    if (c->size > 1 && count) TIMED(c, c->ops->bcast(c, buf, count, t, root));
}

void comm_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (c->size > 1 && count) TIMED(c, c->ops->allreduce(c, buf, count, t, op));
}

void comm_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return;
    }
    TIMED(c, c->ops->allgather(c, send, recv, count, t));
}

void comm_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return;
    }
    TIMED(c, c->ops->reduce_scatter(c, send, recv, count, t, op));
}

comm_req *comm_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    return c->ops->isend(c, buf, count, t, peer, tag);
}

comm_req *comm_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    return c->ops->irecv(c, buf, count, t, peer, tag);
}

comm_req *comm_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    if (c->size == 1 || !count) return NULL;
    return c->ops->iallreduce(c, buf, count, t, op);
}

comm_req *comm_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                               comm_op op)
{
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
        return NULL;
    }
    return c->ops->ireduce_scatter(c, send, recv, count, t, op);
}

comm_req *comm_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    if (c->size == 1) return NULL;
    return c->ops->iallgatherv(c, buf, counts, displs, t);
}

comm_req *comm_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                comm_op op)
{
    if (c->size == 1) {
        if (send != recv) memmove(recv, send, counts[0] * comm_dtype_size(t));
        return NULL;
    }
    return c->ops->ireduce_scatterv(c, send, recv, counts, t, op);
}

int comm_test(comm_req *r)
{
    return r ? r->c->ops->test(r) : 1;
}

void comm_wait(comm_req *r)
{
    if (!r) return;
    const comm *c = r->c;
    TIMED(c, c->ops->wait(r));
}
