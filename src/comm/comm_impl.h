/* The communicator vtable behind include/comm/trident/comm.h. One implementation per file
 * (mpi.c; solo.c, a world of one without MPI; hier.c, a view of a flat group; nccl.c, the
 * device twin of a group). Private to src/comm. */
#ifndef TRIDENT_COMM_IMPL_H
#define TRIDENT_COMM_IMPL_H

#include "trident/comm.h"

struct comm_ops {
    const char *name;
    int device; /* 1: buffers are device memory (nccl.c): comm.c never touches them on the host, and
                 * a group of one goes through the implementation too (no host memmove) */
    comm *(*split)(const comm *c, int color, int key);
    void (*free)(comm *c);
    void (*abort)(const comm *c, int code);
    void (*barrier)(const comm *c);
    void (*bcast)(const comm *c, void *buf, size_t count, comm_dtype t, int root);
    void (*allreduce)(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
    void (*allgather)(const comm *c, const void *send, void *recv, size_t count, comm_dtype t);
    void (*reduce_scatter)(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op);
    /* optional: comm_alltoallv itself (NULL: comm.c's point-to-point messages) */
    void (*alltoallv)(const comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                      const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag);
    comm_req *(*isend)(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag);
    comm_req *(*irecv)(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag);
    comm_req *(*iallreduce)(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
    comm_req *(*ireduce_scatter)(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                 comm_op op);
    comm_req *(*iallgatherv)(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t);
    comm_req *(*ireduce_scatterv)(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                  comm_op op);
    void (*wait)(comm_req *r);
    int (*test)(comm_req *r); /* 1 once complete (the request stays until wait); 0 if not yet, or on an error wait reports */
    /* device twins (nccl.c): a twin of `group` made as `twin` was (its stream and kind); comm_split of
     * a twinned group twins the part with it. Collective over group. NULL elsewhere. */
    comm *(*twin_of)(const comm *twin, const comm *group);
};

struct comm {
    const struct comm_ops *ops;
    int rank, size;
    double seconds; /* time blocked in this communicator (exposed) */
    double busy;    /* time with at least one of its communications in flight (see comm_busy_seconds) */
    double since;   /* td_now() when inflight last rose from 0 */
    int inflight;   /* blocking calls and requests not yet seen complete */
    char name[32];  /* the group's name in messages: "tp", "pp", "dp", ... */
    void *impl;     /* implementation state */
    comm *twin;     /* the device twin (nccl.c: comm_make_twin), owned; NULL: none */
};

/* Every implementation's request starts with this, so comm_wait can dispatch. */
struct comm_req {
    const comm *c;
    int done;      /* seen complete by comm_progress or comm_test: the wait only frees it */
    int tracked;   /* in comm.c's table of requests comm_progress advances */
};

/* A world of one without MPI (solo.c), and whether c is one of its groups. */
comm *comm_solo_new(void);
int comm_is_solo(const comm *c);

#endif
