/* A world of one without MPI, for a process started alone (no mpirun, orted, PMIx or PMI around
 * it: comm_world_init in mpi.c decides). MPI_Init in such a process is the most expensive thing a
 * short command does: with Open MPI's defaults it starts an orted of its own, 0.37 s of wall and
 * 0.11 s of CPU, and 18 ms even as an isolated singleton (the test suite's setting). Every group of
 * a world of one has one rank, and comm.c answers a group of one without calling its
 * implementation (a collective copies or returns, a non-blocking one returns no request), so these
 * collective entries are only reached if a caller breaks that rule, and still do what a group of
 * one means. Messages to itself match as MPI's do (below). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "trident/check.h"

static const struct comm_ops SOLO_OPS;

comm *comm_solo_new(void)
{
    comm *c = td_xcalloc(1, sizeof *c);
    c->ops = &SOLO_OPS;
    c->rank = 0;
    c->size = 1;
    return c;
}

int comm_is_solo(const comm *c) { return c->ops == &SOLO_OPS; }

static comm *solo_split(const comm *c, int color, int key)
{
    (void)c, (void)color, (void)key;
    return comm_solo_new();
}

static void solo_free(comm *c)
{
    TD_CHECK(!c->impl, "this is a bug in trident; please report it",
             "the %s group of a world of one freed with a message to itself never matched", c->name);
    free(c);
}

/* A world of one has no peer to take down and no launcher to tell: the process ends. */
static void solo_abort(const comm *c, int code)
{
    (void)c;
    fflush(stdout);
    fflush(stderr);
    exit(code);
}

static void solo_barrier(const comm *c) { (void)c; }

static void solo_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    (void)c, (void)buf, (void)count, (void)t, (void)root;
}

static void solo_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    (void)c, (void)buf, (void)count, (void)t, (void)op;
}

static void solo_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    (void)c;
    if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
}

static void solo_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    (void)c, (void)op;
    if (send != recv) memmove(recv, send, count * comm_dtype_size(t));
}

/* Messages to itself (rank 0 to rank 0: a ring of one, as MPI allows): a send and a receive of the
 * same tag match in the order they were posted, the data copied when the second of the pair is
 * posted. A peer other than 0 cannot exist; a wait on a message never matched would wait forever. */
typedef struct solo_req {
    comm_req base;
    int is_send, tag;
    void *buf; /* the receive's buffer, or the send's (const while it waits) */
    size_t bytes;
    struct solo_req *next; /* the comm's unmatched messages, oldest first */
} solo_req;

static void __attribute__((noreturn)) no_peer(const comm *c, const char *call, int peer)
{
    td_die(__FILE__, __LINE__, call, "this is a bug in trident; please report it",
           "rank 0 of the %s group, a world of one started without mpirun, has no peer %d", c->name, peer);
}

static comm_req *post(const comm *c, int is_send, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    if (peer != 0) no_peer(c, is_send ? "comm_isend" : "comm_irecv", peer);
    solo_req *q = td_xcalloc(1, sizeof *q);
    q->base.c = c;
    q->is_send = is_send, q->tag = tag, q->buf = buf, q->bytes = count * comm_dtype_size(t);
    solo_req **pp = (solo_req **)&((comm *)c)->impl;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->is_send != is_send && (*pp)->tag == tag) { /* the oldest of the other kind */
            solo_req *m = *pp, *send = is_send ? q : m, *recv = is_send ? m : q;
            TD_CHECK(send->bytes <= recv->bytes, "this is a bug in trident; please report it",
                     "a message of %zu bytes to itself, into a receive of %zu (tag %d, %s group)", send->bytes,
                     recv->bytes, tag, c->name);
            memcpy(recv->buf, send->buf, send->bytes);
            *pp = m->next;
            m->next = NULL; /* both complete: comm.c's test and wait see it (matched) */
            return &q->base;
        }
    *pp = q;
    return &q->base;
}

static comm_req *solo_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    return post(c, 1, (void *)buf, count, t, peer, tag);
}

static comm_req *solo_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    return post(c, 0, buf, count, t, peer, tag);
}

static comm_req *solo_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    (void)c, (void)buf, (void)count, (void)t, (void)op;
    return NULL;
}

static comm_req *solo_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                      comm_op op)
{
    solo_reduce_scatter(c, send, recv, count, t, op);
    return NULL;
}

static comm_req *solo_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    (void)c, (void)buf, (void)counts, (void)displs, (void)t;
    return NULL;
}

static comm_req *solo_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts,
                                       comm_dtype t, comm_op op)
{
    solo_reduce_scatter(c, send, recv, counts[0], t, op);
    return NULL;
}

static int matched(const comm_req *r)
{
    for (const solo_req *q = r->c->impl; q; q = q->next)
        if (&q->base == r) return 0;
    return 1;
}

static void solo_wait(comm_req *r)
{
    const solo_req *q = (const solo_req *)r;
    TD_CHECK(matched(r), "this is a bug in trident; please report it",
             "a world of one waits for a %s of tag %d to itself that was never posted (%s group): it would wait "
             "forever", q->is_send ? "receive matching its send" : "send matching its receive", q->tag, r->c->name);
    free(r);
}

static int solo_test(comm_req *r) { return matched(r); }

static const struct comm_ops SOLO_OPS = {
    .name = "solo",
    .split = solo_split,
    .free = solo_free,
    .abort = solo_abort,
    .barrier = solo_barrier,
    .bcast = solo_bcast,
    .allreduce = solo_allreduce,
    .allgather = solo_allgather,
    .reduce_scatter = solo_reduce_scatter,
    .isend = solo_isend,
    .irecv = solo_irecv,
    .iallreduce = solo_iallreduce,
    .ireduce_scatter = solo_ireduce_scatter,
    .iallgatherv = solo_iallgatherv,
    .ireduce_scatterv = solo_ireduce_scatterv,
    .wait = solo_wait,
    .test = solo_test,
};
