/* The NCCL twin (src/comm/nccl.c) on device buffers: every comm call a twin answers, each against
 * the arithmetic worked here from every rank's inputs (a rank's values are a formula of its rank
 * and the index, so each rank knows all of them). At world size 1 (the one-GPU machine) the sums
 * are the rank's own values, so the checks are made to fail on what NCCL could get wrong there:
 * send and receive buffers apart, at odd offsets, odd counts, every receive buffer poisoned first
 * and its bytes past the end checked untouched, five dtypes. Runs at any world size where each
 * rank has a GPU of its own (mpirun -np N, N GPUs on the host); more ranks than GPUs on a host
 * are refused (exit 2, one line). Without CUDA in the build, libnccl or a GPU: exit 77, naming why. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/xfer.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/timer.h"

#define SKIP 77
#define POISON 0xAB

static const backend *g_be;
static int g_fails, g_checks, g_rank, g_size;

static void check(int ok, const char *what)
{
    g_checks++;
    if (!ok) {
        g_fails++;
        printf("FAIL rank %d: %s\n", g_rank, what);
    }
}

static const comm_dtype TYPES[] = {COMM_F32, COMM_F64, COMM_I32, COMM_I64, COMM_U8};
static const char *const TYPE_NAMES[] = {"f32", "f64", "i32", "i64", "u8"};

/* Rank r's value at index i, small enough that sums over a few ranks are exact in every dtype. */
static double value(int r, size_t i, int salt) { return (double)((i * 7 + (size_t)r * 13 + (size_t)salt * 3) % 23) + r % 7; }

static void put(void *buf, comm_dtype t, size_t i, double v)
{
    switch (t) {
    case COMM_F32: ((float *)buf)[i] = (float)v; break;
    case COMM_F64: ((double *)buf)[i] = v; break;
    case COMM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case COMM_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case COMM_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
}

static double get(const void *buf, comm_dtype t, size_t i)
{
    switch (t) {
    case COMM_F32: return ((const float *)buf)[i];
    case COMM_F64: return ((const double *)buf)[i];
    case COMM_I32: return ((const int32_t *)buf)[i];
    case COMM_I64: return (double)((const int64_t *)buf)[i];
    case COMM_U8: return ((const uint8_t *)buf)[i];
    }
    return 0;
}

/* A device buffer of n elements at an odd element offset into its allocation, with `pad` poisoned
 * elements after it; its host twin. */
typedef struct {
    char *alloc, *dev;
    size_t n, pad, es;
    comm_dtype t;
} dbuf;

static dbuf dnew(comm_dtype t, size_t n)
{
    dbuf b = {0};
    b.t = t, b.n = n, b.pad = 5, b.es = comm_dtype_size(t);
    size_t bytes = (3 + n + b.pad) * b.es;
    b.alloc = be_alloc(g_be, bytes);
    g_be->ops->set_bytes(g_be, b.alloc, POISON, bytes);
    b.dev = b.alloc + 3 * b.es;
    return b;
}

/* Fills the buffer from f(i) on the host and copies it up. */
static void dfill(dbuf *b, int r, int salt)
{
    char *h = td_xmalloc(b->n * b->es + 1);
    for (size_t i = 0; i < b->n; i++) put(h, b->t, i, value(r, i, salt));
    be_memcpy(g_be, b->dev, h, b->n * b->es, BE_H2D);
    free(h);
}

/* The buffer's elements (host copy, caller frees) and whether the padding is still poison. */
static char *dread(const dbuf *b, int *pad_ok)
{
    size_t bytes = (b->n + b->pad) * b->es;
    char *h = td_xmalloc(bytes);
    be_memcpy(g_be, h, b->dev, bytes, BE_D2H);
    *pad_ok = 1;
    for (size_t k = b->n * b->es; k < bytes; k++) *pad_ok &= (unsigned char)h[k] == POISON;
    return h;
}

static void dfree(dbuf *b) { be_dfree(g_be, b->alloc); }

/* Compares got[i] for i in [0, n) with want(i); names the first mismatch. */
static void expect(const char *what, const dbuf *b, double (*want)(size_t i, void *ctx), void *ctx)
{
    int pad_ok;
    char *h = dread(b, &pad_ok);
    char msg[256];
    size_t bad = b->n;
    for (size_t i = 0; i < b->n && bad == b->n; i++)
        if (get(h, b->t, i) != want(i, ctx)) bad = i;
    if (bad < b->n) snprintf(msg, sizeof msg, "%s: element %zu is %g, expected %g", what, bad, get(h, b->t, bad), want(bad, ctx));
    else snprintf(msg, sizeof msg, "%s", what);
    check(bad == b->n, msg);
    snprintf(msg, sizeof msg, "%s: the bytes past the end were written", what);
    check(pad_ok, msg);
    free(h);
}

typedef struct {
    int salt, root, op;
    size_t count;
    const size_t *counts, *displs;
} ctx_t;

static double want_sum(size_t i, void *c)
{
    ctx_t *x = c;
    double s = 0, m = -1e300;
    for (int r = 0; r < g_size; r++) {
        double v = value(r, i, x->salt);
        s += v;
        if (v > m) m = v;
    }
    return x->op == 1 ? m : s;
}
static double want_gather(size_t i, void *c)
{
    ctx_t *x = c;
    return value((int)(i / x->count), i % x->count, x->salt);
}
static double want_rs(size_t i, void *c)
{
    ctx_t *x = c;
    double s = 0;
    for (int r = 0; r < g_size; r++) s += value(r, (size_t)g_rank * x->count + i, x->salt);
    return s;
}
static double want_root(size_t i, void *c)
{
    ctx_t *x = c;
    return value(x->root, i, x->salt);
}

static void collectives(const comm *tw, comm_dtype t, const char *tn)
{
    char what[128];
    size_t n = 1001;
    int salt = (int)t + 1;
    /* all-reduce sum and max, in place, blocking and not */
    for (int op = 0; op < 2; op++) {
        dbuf b = dnew(t, n);
        dfill(&b, g_rank, salt);
        comm_allreduce(tw, b.dev, n, t, op ? COMM_MAX : COMM_SUM);
        ctx_t x = {salt, 0, op, n, NULL, NULL};
        snprintf(what, sizeof what, "allreduce %s %s", op ? "max" : "sum", tn);
        expect(what, &b, want_sum, &x);
        dfill(&b, g_rank, salt);
        comm_wait(comm_iallreduce(tw, b.dev, n, t, op ? COMM_MAX : COMM_SUM));
        snprintf(what, sizeof what, "iallreduce %s %s", op ? "max" : "sum", tn);
        expect(what, &b, want_sum, &x);
        dfree(&b);
    }
    /* all-gather: a send buffer apart from the receive */
    size_t c = 333;
    dbuf s = dnew(t, c), r = dnew(t, c * (size_t)g_size);
    dfill(&s, g_rank, salt);
    comm_allgather(tw, s.dev, r.dev, c, t);
    ctx_t xg = {salt, 0, 0, c, NULL, NULL};
    snprintf(what, sizeof what, "allgather %s", tn);
    expect(what, &r, want_gather, &xg);
    dfree(&s), dfree(&r);
    /* reduce-scatter, blocking and not */
    dbuf rs = dnew(t, c * (size_t)g_size), out = dnew(t, c);
    dfill(&rs, g_rank, salt);
    comm_reduce_scatter(tw, rs.dev, out.dev, c, t, COMM_SUM);
    ctx_t xr = {salt, 0, 0, c, NULL, NULL};
    snprintf(what, sizeof what, "reduce_scatter %s", tn);
    expect(what, &out, want_rs, &xr);
    g_be->ops->set_bytes(g_be, out.dev, POISON, c * out.es);
    comm_wait(comm_ireduce_scatter(tw, rs.dev, out.dev, c, t, COMM_SUM));
    snprintf(what, sizeof what, "ireduce_scatter %s", tn);
    expect(what, &out, want_rs, &xr);
    dfree(&rs), dfree(&out);
    /* broadcast from the last rank: the others poisoned */
    dbuf bc = dnew(t, n);
    int root = g_size - 1;
    if (g_rank == root) dfill(&bc, g_rank, salt);
    comm_bcast(tw, bc.dev, n, t, root);
    ctx_t xb = {salt, root, 0, n, NULL, NULL};
    snprintf(what, sizeof what, "bcast %s", tn);
    expect(what, &bc, want_root, &xb);
    dfree(&bc);
}

/* Messages around the ring (to itself at world size 1), both directions in flight together. */
static void point_to_point(const comm *tw)
{
    size_t n = 517;
    int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
    dbuf s = dnew(COMM_F32, n), r = dnew(COMM_F32, n);
    dfill(&s, g_rank, 9);
    comm_req *q[2];
    q[0] = comm_irecv(tw, r.dev, n, COMM_F32, prev, 4);
    q[1] = comm_isend(tw, s.dev, n, COMM_F32, next, 4);
    double t0 = td_now();
    while (!comm_test(q[0]) && td_now() - t0 < 30) {
    }
    check(comm_test(q[0]), "irecv: comm_test never saw it complete (30 s)");
    comm_wait(q[1]);
    comm_wait(q[0]);
    ctx_t x = {9, prev, 0, n, NULL, NULL};
    expect("isend/irecv around the ring", &r, want_root, &x);
    dfree(&s), dfree(&r);
}

/* all-to-all-v: rank a sends 1 + (a + b) % 3 + b elements to rank b, at gaps of 2 elements. */
static size_t a2a_count(int a, int b) { return 1 + (size_t)((a + b) % 3) + (size_t)b; }

static double want_a2a(size_t i, void *c)
{
    ctx_t *x = c;
    for (int r = 0; r < g_size; r++)
        if (i >= x->displs[r] && i < x->displs[r] + x->counts[r]) return value(r, i - x->displs[r] + 100 * (size_t)g_rank, 11);
    return NAN; /* a gap: left as it was */
}

static void alltoallv(const comm *tw)
{
    size_t *sc = td_xcalloc(4 * (size_t)g_size, sizeof(size_t)), *sd = sc + g_size, *rc = sd + g_size, *rd = rc + g_size;
    size_t st = 0, rt = 0;
    for (int b = 0; b < g_size; b++) {
        sc[b] = a2a_count(g_rank, b), sd[b] = st, st += sc[b] + 2;
        rc[b] = a2a_count(b, g_rank), rd[b] = rt, rt += rc[b] + 2;
    }
    dbuf s = dnew(COMM_F64, st), r = dnew(COMM_F64, rt);
    double *h = td_xcalloc(st, sizeof(double));
    for (int b = 0; b < g_size; b++)
        for (size_t i = 0; i < sc[b]; i++) h[sd[b] + i] = value(g_rank, i + 100 * (size_t)b, 11);
    be_memcpy(g_be, s.dev, h, st * sizeof(double), BE_H2D);
    comm_alltoallv(tw, s.dev, sc, sd, r.dev, rc, rd, COMM_F64, 6);
    int pad_ok;
    double *got = (double *)dread(&r, &pad_ok);
    ctx_t x = {11, 0, 0, 0, rc, rd};
    int ok = 1, gaps = 1;
    for (size_t i = 0; i < rt; i++) {
        double w = want_a2a(i, &x);
        unsigned char raw[8];
        memcpy(raw, &got[i], 8);
        if (w != w) gaps &= raw[0] == POISON && raw[7] == POISON;
        else ok &= got[i] == w;
    }
    check(ok, "alltoallv: a part received wrong");
    check(gaps && pad_ok, "alltoallv: a gap between the parts (or past the end) was written");
    free(got), free(h), free(sc);
    dfree(&s), dfree(&r);
}

/* all-gatherv in place and reduce-scatterv, with unequal counts (grouped broadcasts and reduces)
 * and equal ones (NCCL's all-gather and reduce-scatter). */
static void v_collectives(const comm *tw)
{
    for (int uneven = 0; uneven < 2; uneven++) {
        size_t *counts = td_xcalloc(2 * (size_t)g_size, sizeof(size_t)), *displs = counts + g_size, total = 0;
        for (int r = 0; r < g_size; r++) counts[r] = uneven ? 3 + (size_t)r * 5 : 64, displs[r] = total, total += counts[r];
        /* all-gatherv: this rank's part written at its place, the others poisoned */
        dbuf b = dnew(COMM_F32, total);
        float *h = td_xmalloc(total * sizeof(float));
        memset(h, POISON, total * sizeof(float));
        for (size_t i = 0; i < counts[g_rank]; i++) h[displs[g_rank] + i] = (float)value(g_rank, i, 5);
        be_memcpy(g_be, b.dev, h, total * sizeof(float), BE_H2D);
        comm_wait(comm_iallgatherv(tw, b.dev, counts, displs, COMM_F32));
        int pad_ok, ok = 1;
        float *got = (float *)dread(&b, &pad_ok);
        for (int r = 0; r < g_size; r++)
            for (size_t i = 0; i < counts[r]; i++) ok &= got[displs[r] + i] == (float)value(r, i, 5);
        check(ok && pad_ok, uneven ? "iallgatherv (uneven counts)" : "iallgatherv (even counts)");
        free(got), free(h);
        dfree(&b);
        /* reduce-scatterv: this rank's part of the sum */
        dbuf s = dnew(COMM_F32, total), o = dnew(COMM_F32, counts[g_rank]);
        dfill(&s, g_rank, 8);
        comm_wait(comm_ireduce_scatterv(tw, s.dev, o.dev, counts, COMM_F32, COMM_SUM));
        got = (float *)dread(&o, &pad_ok);
        ok = 1;
        for (size_t i = 0; i < counts[g_rank]; i++) {
            double w = 0;
            for (int r = 0; r < g_size; r++) w += value(r, displs[g_rank] + i, 8);
            ok &= got[i] == (float)w;
        }
        check(ok && pad_ok, uneven ? "ireduce_scatterv (uneven counts)" : "ireduce_scatterv (even counts)");
        free(got);
        dfree(&s), dfree(&o);
        free(counts);
    }
}

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    g_rank = comm_rank(world), g_size = comm_size(world);
    char why[1024];
    if (!be_have_cuda()) {
        printf("SKIP: this trident was built without CUDA\n");
        return SKIP;
    }
    int devices = be_backend_devices("cuda");
    if (devices < 1) {
        printf("SKIP: no GPU is visible\n");
        return SKIP;
    }
    if (!comm_nccl_loadable(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    if (xfer_local_size() > devices) {
        printf("REFUSED: %d ranks on this host and %d GPU%s: NCCL takes one GPU a rank; start at most %d\n",
               xfer_local_size(), devices, devices == 1 ? "" : "s", devices);
        return 2;
    }
    backend *be = be_create("cuda", 0);
    g_be = be;
    double t0 = td_now();
    comm_make_twin(world, be->queue, 1); /* with p2p: the directional communicators beyond one rank */
    const comm *tw = comm_device(world);
    check(comm_is_device(tw) && comm_size(tw) == g_size && comm_rank(tw) == g_rank, "the twin of the world");
    printf("twin of the world of %d made in %.2f s\n", g_size, td_now() - t0);
    for (size_t k = 0; k < sizeof TYPES / sizeof TYPES[0]; k++) collectives(tw, TYPES[k], TYPE_NAMES[k]);
    point_to_point(tw);
    alltoallv(tw);
    v_collectives(tw);
    comm_barrier(tw);
    /* a split of the world makes its part's twin too */
    comm *half = comm_split(world, g_rank % 2, g_rank);
    check(comm_is_device(comm_device(half)), "the split's twin");
    dbuf b = dnew(COMM_I32, 7);
    dfill(&b, g_rank, 2);
    comm_allreduce(comm_device(half), b.dev, 7, COMM_I32, COMM_SUM);
    int pad_ok;
    int32_t *got = (int32_t *)dread(&b, &pad_ok);
    int ok = pad_ok;
    for (size_t i = 0; i < 7; i++) {
        double w = 0;
        for (int r = g_rank % 2; r < g_size; r += 2) w += value(r, i, 2);
        ok &= got[i] == (int32_t)w;
    }
    check(ok, "allreduce on the split's twin");
    free(got);
    dfree(&b);
    comm_free(half);
    be_free(be);
    printf("%s: %d checks, %d failed (world of %d)\n", g_fails ? "FAIL" : "ok", g_checks, g_fails, g_size);
    comm_world_finalize(world);
    return g_fails ? 1 : 0;
}
