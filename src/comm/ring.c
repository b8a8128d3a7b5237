/* Ring collectives (see ring.h): reduce-scatter and all-gather in p - 1 steps each, an all-reduce
 * as the one then the other. The buffer is cut into p parts; in step s of the reduce-scatter,
 * rank r sends its partial sum of part r-1-s to rank r+1 and adds what rank r-1 sends (part
 * r-2-s) to its own; after p - 1 steps rank r holds the whole sum of part r. In step s of the
 * all-gather it sends part r-s and receives part r-1-s in place. Every rank adds the same terms
 * in the same order for a part, and the all-gather copies the one result, so every rank ends
 * with the same bits. */
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "trident/check.h"

enum { RS, AG, DONE };

struct ring_op {
    const comm *p2p;
    int rank, size, tag;
    comm_dtype t;
    size_t esize;
    char *buf;         /* all-reduce and all-gather: the buffer, in place */
    const char *send;  /* reduce-scatter: every rank's part, read only */
    char *recv;        /* reduce-scatter: this rank's part of the sum */
    size_t *off, *cnt; /* part i: cnt[i] elements at off[i] (in buf or send) */
    int phase, last, step;
    comm_req *sq, *rq; /* the step's send and receive */
    char *rtmp, *stmp; /* the part received; reduce-scatter: the partial sum sent */
};

static size_t g_min_bytes;
static int g_min_read;

size_t ring_min_bytes(void)
{
    if (!g_min_read) {
        const char *v = getenv("TRIDENT_RING_MIN_BYTES");
        g_min_bytes = v && *v ? (size_t)strtoull(v, NULL, 10) : (size_t)256 << 10;
        g_min_read = 1;
    }
    return g_min_bytes;
}

int ring_applies(size_t bytes, comm_dtype t, comm_op op, int size)
{
    return size >= 2 && op == COMM_SUM && (t == COMM_F32 || t == COMM_F64) && bytes >= ring_min_bytes() && bytes > 0;
}

static int part(const ring_op *o, int k) { return ((k % o->size) + o->size) % o->size; }

/* dst[i] = a[i] + b[i] for n elements of o's type */
static void add(const ring_op *o, void *dst, const void *a, const void *b, size_t n)
{
    if (o->t == COMM_F32) {
        float *d = dst;
        const float *x = a, *y = b;
        for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
    } else {
        double *d = dst;
        const double *x = a, *y = b;
        for (size_t i = 0; i < n; i++) d[i] = x[i] + y[i];
    }
}

static void start_step(ring_op *o)
{
    const comm *c = o->p2p;
    int r = o->rank, right = part(o, r + 1), left = part(o, r - 1), s = o->step;
    int a = o->phase == RS ? part(o, r - 1 - s) : part(o, r - s);
    int b = o->phase == RS ? part(o, r - 2 - s) : part(o, r - 1 - s);
    const char *src;
    if (o->phase == AG || o->buf) src = o->buf + o->off[a] * o->esize;
    else src = s == 0 ? o->send + o->off[a] * o->esize : o->stmp;
    char *dst = o->phase == RS ? o->rtmp : o->buf + o->off[b] * o->esize;
    o->rq = c->ops->irecv(c, dst, o->cnt[b], o->t, left, o->tag);
    o->sq = c->ops->isend(c, src, o->cnt[a], o->t, right, o->tag);
}

/* The step's messages are complete (or are waited here): its sum, then the next step. */
static void finish_step(ring_op *o)
{
    const comm *c = o->p2p;
    c->ops->wait(o->rq);
    c->ops->wait(o->sq);
    o->rq = o->sq = NULL;
    if (o->phase == RS) {
        int b = part(o, o->rank - 2 - o->step);
        size_t n = o->cnt[b], at = o->off[b] * o->esize;
        if (o->buf) add(o, o->buf + at, o->buf + at, o->rtmp, n);
        else if (o->step < o->size - 2) add(o, o->stmp, o->send + at, o->rtmp, n); /* part b is sent next */
        else add(o, o->recv, o->send + at, o->rtmp, n);                            /* b == rank: the result */
    }
    if (++o->step == o->size - 1) {
        o->step = 0;
        o->phase = o->phase == o->last ? DONE : o->phase + 1;
    }
    if (o->phase != DONE) start_step(o);
}

static ring_op *new_op(const comm *p2p, comm_dtype t, int tag, int first, int last, const size_t *counts,
                       const size_t *displs)
{
    ring_op *o = td_xcalloc(1, sizeof *o);
    o->p2p = p2p;
    o->rank = p2p->rank;
    o->size = p2p->size;
    o->tag = tag;
    o->t = t;
    o->esize = comm_dtype_size(t);
    o->phase = first;
    o->last = last;
    o->off = td_xmalloc(2 * (size_t)o->size * sizeof *o->off);
    o->cnt = o->off + o->size;
    size_t most = 0, at = 0;
    for (int i = 0; i < o->size; i++) {
        o->cnt[i] = counts[i];
        o->off[i] = displs ? displs[i] : at;
        at += counts[i];
        if (counts[i] > most) most = counts[i];
    }
    if (first == RS) o->rtmp = td_xmalloc(most * o->esize + 1);
    if (first == RS && last == RS) o->stmp = td_xmalloc(most * o->esize + 1); /* reduce-scatter: the partial sums sent */
    return o;
}

ring_op *ring_allreduce(const comm *p2p, void *buf, size_t count, comm_dtype t, int tag)
{
    size_t *counts = td_xmalloc((size_t)p2p->size * sizeof *counts);
    for (int i = 0; i < p2p->size; i++) counts[i] = count / (size_t)p2p->size + ((size_t)i < count % (size_t)p2p->size);
    ring_op *o = new_op(p2p, t, tag, RS, AG, counts, NULL);
    free(counts);
    o->buf = buf;
    start_step(o);
    return o;
}

ring_op *ring_reduce_scatterv(const comm *p2p, const void *send, void *recv, const size_t *counts, comm_dtype t, int tag)
{
    ring_op *o = new_op(p2p, t, tag, RS, RS, counts, NULL);
    o->send = send;
    o->recv = recv;
    start_step(o);
    return o;
}

ring_op *ring_allgatherv(const comm *p2p, void *buf, const size_t *counts, const size_t *displs, comm_dtype t, int tag)
{
    ring_op *o = new_op(p2p, t, tag, AG, AG, counts, displs);
    o->buf = buf;
    start_step(o);
    return o;
}

int ring_test(ring_op *o)
{
    const comm *c = o->p2p;
    while (o->phase != DONE) {
        if (!c->ops->test(o->rq) || !c->ops->test(o->sq)) return 0;
        finish_step(o);
    }
    return 1;
}

void ring_wait(ring_op *o)
{
    while (o->phase != DONE) finish_step(o);
    free(o->off);
    free(o->rtmp);
    free(o->stmp);
    free(o);
}
