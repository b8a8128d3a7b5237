/* Hierarchical collectives over a flat group: see include/comm/trident/comm_hier.h. A
 * non-blocking collective is a chain of stages on the node and rail groups, one request to its
 * caller; a stage starts when the one before it has completed, found so by a wait or a test of
 * this request or by any later call on the view. Every group sees its collectives started in the
 * same order on all its ranks (MPI's rule): a stage on a group starts only after every earlier
 * request's stages on that group have started, so the order is (request, stage) whatever the
 * timing. */
#include "trident/comm_hier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_impl.h"
#include "trident/check.h"
#include "trident/debug.h"

#define HOST_LEN 64
#define MAX_STAGES 3

enum hier_kind { H_ALLREDUCE, H_REDUCE_SCATTERV, H_ALLGATHERV };

typedef struct hier_req hier_req;

typedef struct {
    const comm *flat;    /* not owned */
    comm *node, *node_ag;/* this rank's host: reductions, and gathers (two groups, so that a bucket's
                          * reduction need not wait for the gather of the bucket before it) */
    comm *rail;          /* local rank my_local of every host, ordered by host */
    int nodes, k;        /* hosts, ranks per host */
    int my_node, my_local;
    int *rank_at;        /* (nodes * k): flat rank of local rank l on host n at [n * k + l] */
    hier_req *head;      /* requests not yet waited, in start order */
} hier_state;

struct hier_req {
    struct comm_req base;
    enum hier_kind kind;
    int nstages, next;   /* stages [0, next) started */
    comm *on[MAX_STAGES];/* the group of each stage */
    comm_req *cur;       /* the stage in flight, or NULL */
    int done;
    comm_dtype t;
    comm_op op;
    size_t esz;
    char *buf;           /* allreduce, all-gather: the caller's buffer; reduce-scatter: its recv */
    char *pack;          /* host-major layout: reduce-scatter's and all-gather's packed pieces */
    char *scratch;       /* this rank's sum after the node stage */
    size_t *ncounts, *ndispls; /* (k) each local rank's part within the host */
    size_t *rcounts, *rdispls; /* (nodes) each host's piece of this rail, within the rail's part */
    size_t *counts, *displs;   /* (size) the caller's pieces (all-gather: unpacked at the end) */
    hier_req *later;
};

static const struct comm_ops HIER_OPS;

#define STATE(c) ((hier_state *)(c)->impl)

void comm_host_name(int world_rank, int world_size, char *out, size_t len)
{
    long n = td_debug_get()->fake_hosts;
    if (n > 0) {
        snprintf(out, len, "test-host-%ld", (long)world_rank * n / (world_size > 0 ? world_size : 1));
        return;
    }
    if (gethostname(out, len - 1) != 0) snprintf(out, len, "?");
    out[len - 1] = '\0';
}

/* ---- stages ---- */

static void start_stage(hier_state *s, hier_req *q, int i)
{
    char *mine = q->pack ? q->pack + q->ndispls[s->my_local] * q->esz : NULL;
    switch (q->kind) {
    case H_ALLREDUCE:
        if (i == 0) q->cur = comm_ireduce_scatterv(s->node, q->buf, q->scratch, q->ncounts, q->t, q->op);
        else if (i == 1) q->cur = comm_iallreduce(s->rail, q->scratch, q->ncounts[s->my_local], q->t, q->op);
        else {
            memcpy(q->buf + q->ndispls[s->my_local] * q->esz, q->scratch, q->ncounts[s->my_local] * q->esz);
            q->cur = comm_iallgatherv(s->node_ag, q->buf, q->ncounts, q->ndispls, q->t);
        }
        break;
    case H_REDUCE_SCATTERV:
        if (i == 0) q->cur = comm_ireduce_scatterv(s->node, q->pack, q->scratch, q->ncounts, q->t, q->op);
        else q->cur = comm_ireduce_scatterv(s->rail, q->scratch, q->buf, q->rcounts, q->t, q->op);
        break;
    case H_ALLGATHERV:
        if (i == 0) q->cur = comm_iallgatherv(s->rail, mine, q->rcounts, q->rdispls, q->t);
        else q->cur = comm_iallgatherv(s->node_ag, q->pack, q->ncounts, q->ndispls, q->t);
        break;
    }
}

/* The packed layout: local rank l's part holds the pieces of the rail l ranks, host by host. */
static void pack_each(hier_state *s, hier_req *q, int unpack)
{
    size_t at = 0;
    for (int l = 0; l < s->k; l++)
        for (int n = 0; n < s->nodes; n++) {
            int r = s->rank_at[n * s->k + l];
            char *user = q->buf + q->displs[r] * q->esz, *packed = q->pack + at * q->esz;
            if (unpack) memcpy(user, packed, q->counts[r] * q->esz);
            else memcpy(packed, user, q->counts[r] * q->esz);
            at += q->counts[r];
        }
}

static void finish(hier_state *s, hier_req *q)
{
    if (q->kind == H_ALLGATHERV) pack_each(s, q, 1);
}

/* Some request before q has a stage on g still to start. */
static int blocked(const hier_state *s, const hier_req *q, const comm *g)
{
    for (const hier_req *e = s->head; e && e != q; e = e->later)
        for (int i = e->next; i < e->nstages; i++)
            if (e->on[i] == g) return 1;
    return 0;
}

/* Advances every request as far as it can without blocking; with a target, first completes
 * every request up to and including it (blocking). */
static void progress(hier_state *s, const hier_req *target)
{
    int blocking = target != NULL;
    for (hier_req *q = s->head; q; q = q->later) {
        while (!q->done) {
            if (q->cur) {
                if (!blocking && !comm_test(q->cur)) break;
                comm_wait(q->cur);
                q->cur = NULL;
            }
            if (q->next == q->nstages) {
                finish(s, q);
                q->done = 1;
                break;
            }
            if (blocked(s, q, q->on[q->next])) break;
            start_stage(s, q, q->next++);
        }
        if (q == target) blocking = 0;
    }
}

static hier_req *new_req(const comm *c, enum hier_kind kind, comm_dtype t, comm_op op)
{
    hier_state *s = STATE(c);
    hier_req *q = td_xcalloc(1, sizeof *q);
    q->base.c = c;
    q->kind = kind;
    q->t = t;
    q->op = op;
    q->esz = comm_dtype_size(t);
    q->ncounts = td_xcalloc((size_t)s->k, sizeof(size_t));
    q->ndispls = td_xcalloc((size_t)s->k, sizeof(size_t));
    q->rcounts = td_xcalloc((size_t)s->nodes, sizeof(size_t));
    q->rdispls = td_xcalloc((size_t)s->nodes, sizeof(size_t));
    return q;
}

/* Queues q behind the requests in flight and starts what can start. */
static comm_req *launch(hier_state *s, hier_req *q)
{
    hier_req **tail = &s->head;
    while (*tail) tail = &(*tail)->later;
    *tail = q;
    progress(s, NULL);
    return &q->base;
}

/* The node and rail counts of pieces `counts` (flat rank order), and the packed buffer. */
static void plan_pieces(hier_state *s, hier_req *q, int size, const size_t *counts, const size_t *displs)
{
    q->counts = td_xmalloc((size_t)size * sizeof(size_t));
    q->displs = td_xmalloc((size_t)size * sizeof(size_t));
    size_t total = 0;
    for (int r = 0; r < size; r++) {
        q->counts[r] = counts[r];
        q->displs[r] = displs ? displs[r] : total;
        total += counts[r];
    }
    for (int l = 0; l < s->k; l++) {
        q->ndispls[l] = l ? q->ndispls[l - 1] + q->ncounts[l - 1] : 0;
        for (int n = 0; n < s->nodes; n++) q->ncounts[l] += counts[s->rank_at[n * s->k + l]];
    }
    for (int n = 0; n < s->nodes; n++) {
        q->rcounts[n] = counts[s->rank_at[n * s->k + s->my_local]];
        q->rdispls[n] = n ? q->rdispls[n - 1] + q->rcounts[n - 1] : 0;
    }
    q->pack = td_xmalloc((total ? total : 1) * q->esz);
}

static comm_req *hier_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    hier_state *s = STATE(c);
    hier_req *q = new_req(c, H_ALLREDUCE, t, op);
    q->buf = buf;
    size_t each = count / (size_t)s->k, extra = count % (size_t)s->k;
    for (int l = 0; l < s->k; l++) {
        q->ncounts[l] = each + ((size_t)l < extra);
        q->ndispls[l] = l ? q->ndispls[l - 1] + q->ncounts[l - 1] : 0;
    }
    q->scratch = td_xmalloc((q->ncounts[0] ? q->ncounts[0] : 1) * q->esz);
    q->nstages = 3;
    q->on[0] = s->node, q->on[1] = s->rail, q->on[2] = s->node_ag;
    return launch(s, q);
}

static comm_req *hier_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                       comm_op op)
{
    hier_state *s = STATE(c);
    hier_req *q = new_req(c, H_REDUCE_SCATTERV, t, op);
    plan_pieces(s, q, c->size, counts, NULL);
    q->buf = (char *)send; /* packed from the caller's send buffer now */
    pack_each(s, q, 0);
    q->buf = recv;
    q->scratch = td_xmalloc((q->ncounts[s->my_local] ? q->ncounts[s->my_local] : 1) * q->esz);
    q->nstages = 2;
    q->on[0] = s->node, q->on[1] = s->rail;
    return launch(s, q);
}

static comm_req *hier_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t)
{
    hier_state *s = STATE(c);
    hier_req *q = new_req(c, H_ALLGATHERV, t, COMM_SUM);
    plan_pieces(s, q, c->size, counts, displs);
    q->buf = buf;
    memcpy(q->pack + (q->ndispls[s->my_local] + q->rdispls[s->my_node]) * q->esz, q->buf + q->displs[c->rank] * q->esz,
           q->counts[c->rank] * q->esz);
    q->nstages = 2;
    q->on[0] = s->rail, q->on[1] = s->node_ag;
    return launch(s, q);
}

static comm_req *hier_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                                      comm_op op)
{
    size_t *counts = td_xmalloc((size_t)c->size * sizeof(size_t));
    for (int r = 0; r < c->size; r++) counts[r] = count;
    comm_req *q = hier_ireduce_scatterv(c, send, recv, counts, t, op);
    free(counts);
    return q;
}

static void hier_wait(comm_req *r)
{
    hier_req *q = (hier_req *)r;
    hier_state *s = STATE(r->c);
    progress(s, q);
    TD_ASSERT(q->done);
    hier_req **at = &s->head;
    while (*at != q) at = &(*at)->later;
    *at = q->later;
    free(q->pack), free(q->scratch), free(q->counts), free(q->displs);
    free(q->ncounts), free(q->ndispls), free(q->rcounts), free(q->rdispls);
    free(q);
}

static int hier_test(comm_req *r)
{
    progress(STATE(r->c), NULL);
    return ((hier_req *)r)->done;
}

/* ---- blocking calls: a request waited at once ---- */

static void hier_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op)
{
    hier_wait(hier_iallreduce(c, buf, count, t, op));
}

static void hier_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t)
{
    size_t esz = comm_dtype_size(t);
    char *mine = (char *)recv + (size_t)c->rank * count * esz;
    if ((const char *)send != mine) memmove(mine, send, count * esz);
    size_t *cd = td_xmalloc(2 * (size_t)c->size * sizeof(size_t));
    for (int r = 0; r < c->size; r++) cd[r] = count, cd[c->size + r] = (size_t)r * count;
    comm_req *q = hier_iallgatherv(c, recv, cd, cd + c->size, t);
    free(cd);
    hier_wait(q);
}

static void hier_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op)
{
    hier_wait(hier_ireduce_scatter(c, send, recv, count, t, op));
}

/* ---- the rest goes to the flat group ---- */

static comm *hier_split(const comm *c, int color, int key)
{
    const comm *f = STATE(c)->flat;
    return f->ops->split(f, color, key);
}

static void hier_free(comm *c)
{
    hier_state *s = STATE(c);
    TD_ASSERT(s->head == NULL);
    comm_free(s->node);
    comm_free(s->node_ag);
    comm_free(s->rail);
    free(s->rank_at);
    free(s);
    free(c);
}

static void hier_abort(const comm *c, int code) { STATE(c)->flat->ops->abort(STATE(c)->flat, code); }
static void hier_barrier(const comm *c) { STATE(c)->flat->ops->barrier(STATE(c)->flat); }

static void hier_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root)
{
    STATE(c)->flat->ops->bcast(STATE(c)->flat, buf, count, t, root);
}

static comm_req *hier_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    const comm *f = STATE(c)->flat; /* the ops, not comm_isend: the caller's comm_isend tracks the request */
    return f->ops->isend(f, buf, count, t, peer, tag);
}

static comm_req *hier_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    const comm *f = STATE(c)->flat;
    return f->ops->irecv(f, buf, count, t, peer, tag);
}

static const struct comm_ops HIER_OPS = {
    .name = "hierarchical",
    .split = hier_split,
    .free = hier_free,
    .abort = hier_abort,
    .barrier = hier_barrier,
    .bcast = hier_bcast,
    .allreduce = hier_allreduce,
    .allgather = hier_allgather,
    .reduce_scatter = hier_reduce_scatter,
    .isend = hier_isend,
    .irecv = hier_irecv,
    .iallreduce = hier_iallreduce,
    .ireduce_scatter = hier_ireduce_scatter,
    .iallgatherv = hier_iallgatherv,
    .ireduce_scatterv = hier_ireduce_scatterv,
    .wait = hier_wait,
    .test = hier_test,
};

/* ---- construction ---- */

comm *comm_hier_create(const comm *flat, const char *host)
{
    if (flat->twin) return NULL; /* NCCL carries its buffers: NCCL's own rings and trees (docs/gpu.md) */
    int size = comm_size(flat), me = comm_rank(flat);
    char mine[HOST_LEN] = {0};
    snprintf(mine, sizeof mine, "%s", host);
    char *hosts = td_xcalloc((size_t)size, HOST_LEN);
    comm_allgather(flat, mine, hosts, HOST_LEN, COMM_U8);
    /* hosts numbered in order of first appearance; local ranks in flat rank order */
    int *node_of = td_xmalloc((size_t)size * sizeof(int)), *local_of = td_xmalloc((size_t)size * sizeof(int));
    int nodes = 0;
    for (int r = 0; r < size; r++) {
        node_of[r] = -1, local_of[r] = 0;
        for (int q = 0; q < r; q++)
            if (strcmp(hosts + (size_t)q * HOST_LEN, hosts + (size_t)r * HOST_LEN) == 0) {
                if (node_of[r] < 0) node_of[r] = node_of[q];
                local_of[r]++;
            }
        if (node_of[r] < 0) node_of[r] = nodes++;
    }
    free(hosts);
    int k = size / nodes, even = size % nodes == 0;
    for (int r = 0; r < size && even; r++) even = local_of[r] < k;
    if (nodes < 2 || k < 2 || !even) {
        free(node_of), free(local_of);
        return NULL;
    }
    hier_state *s = td_xcalloc(1, sizeof *s);
    s->flat = flat;
    s->nodes = nodes, s->k = k;
    s->my_node = node_of[me], s->my_local = local_of[me];
    s->rank_at = td_xmalloc((size_t)size * sizeof(int));
    for (int r = 0; r < size; r++) s->rank_at[node_of[r] * k + local_of[r]] = r;
    free(node_of), free(local_of);
    s->node = comm_split(flat, s->my_node, me);
    s->node_ag = comm_split(flat, s->my_node, me);
    s->rail = comm_split(flat, s->my_local, s->my_node);
    char name[32];
    snprintf(name, sizeof name, "%.20s in-node", comm_name(flat));
    comm_set_name(s->node, name);
    comm_set_name(s->node_ag, name);
    snprintf(name, sizeof name, "%.20s rail", comm_name(flat));
    comm_set_name(s->rail, name);
    comm *c = td_xcalloc(1, sizeof *c);
    c->ops = &HIER_OPS;
    c->rank = me, c->size = size;
    c->impl = s;
    comm_set_name(c, comm_name(flat));
    return c;
}

void comm_hier_shape(const comm *c, int *nodes, int *per_node)
{
    if (c->ops != &HIER_OPS) {
        *nodes = 1, *per_node = c->size;
        return;
    }
    *nodes = STATE(c)->nodes, *per_node = STATE(c)->k;
}
