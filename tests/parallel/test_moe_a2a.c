/* The alltoall token dispatcher's counts (src/model/moe.c, expert parallelism), under
 * mpirun -np 2: one MoE block (ep 2, 4 experts, top-2, 2 a rank) forward and backward on inputs
 * drawn so the routing is uneven (rank 0's tokens lean to rank 1's experts), its expert-parallel
 * group replaced by a view that logs every point-to-point send and receive. Held against a
 * reference written here (the router's logits in double, each token's top-k, expert e on rank
 * e / 2), which knows every rank's input and the router:
 *  - the messages, in order: the count exchange (each peer's experts' rows, per expert: the
 *    payload), then rows to the experts' ranks, back, and the same two in the backward; each
 *    with its peer, tag and exact count, none missing and none more;
 *  - the rows sent to the experts are this rank's input rows of the tokens routed there,
 *    expert by expert, tokens in order (bit for bit);
 *  - a rank's rows for its own experts never cross the group (a local copy): the block's output
 *    and input gradient must equal those of the same block on one rank holding all 4 experts.
 * Prints "N passed, 0 failed" on rank 0; any mismatch aborts the job with its message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm_impl.h"
#include "model/model_impl.h"
#include "trident/check.h"
#include "trident/comm.h"
#include "trident/parallel_state.h"
#include "trident/philox.h"

enum { EP = 2, H = 8, E = 4, EL = E / EP, K = 2, SEQ = 8, MBS = 2, NT = MBS * SEQ };
enum { TAG_COUNTS = 41, TAG_ROWS = 42 }; /* moe.c's MOE_TAG_COUNTS and MOE_TAG_ROWS */

static int g_checks, g_rank;

#define EXPECT(cond, ...)                                                                \
    do {                                                                                 \
        g_checks++;                                                                      \
        if (!(cond)) td_fatal(1, __VA_ARGS__);                                           \
    } while (0)

/* ---- the recording view of a group ---- */
typedef struct {
    int send, peer, tag;
    comm_dtype t;
    size_t count; /* elements */
    void *data;   /* a send's payload, copied when it starts */
} msg;

#define LOG_MAX 64
static msg g_log[LOG_MAX];
static int g_nlog;
static const struct comm_ops *g_inner_ops;
static struct comm_ops g_view_ops;

static void log_msg(int send, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    EXPECT(g_nlog < LOG_MAX, "rank %d: more than %d messages on the expert-parallel group", g_rank, LOG_MAX);
    msg *g = &g_log[g_nlog++];
    *g = (msg){send, peer, tag, t, count, NULL};
    if (send) {
        g->data = td_xmalloc(count * comm_dtype_size(t) + 1);
        memcpy(g->data, buf, count * comm_dtype_size(t));
    }
}

static comm_req *view_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    log_msg(1, buf, count, t, peer, tag);
    return g_inner_ops->isend(c, buf, count, t, peer, tag);
}

static comm_req *view_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag)
{
    log_msg(0, buf, count, t, peer, tag);
    return g_inner_ops->irecv(c, buf, count, t, peer, tag);
}

/* A view of g whose sends and receives are logged: g's state (rank, size, the MPI communicator
 * behind impl) copied, g's table but for isend and irecv, which log and then do g's. */
static comm *recording_view(const comm *g)
{
    comm *v = td_xmalloc(sizeof *v);
    *v = *g;
    g_inner_ops = g->ops;
    g_view_ops = *g->ops;
    g_view_ops.isend = view_isend;
    g_view_ops.irecv = view_irecv;
    v->ops = &g_view_ops;
    return v;
}

/* ---- the model, the inputs and the reference ---- */
static gpt_config config(void)
{
    gpt_config c = {0};
    c.num_layers = 1, c.hidden = H, c.heads = 2, c.ffn = 16, c.seq = SEQ, c.max_pos = SEQ;
    c.vocab = 40, c.padded_vocab = 48, c.init_std = 0.4f, c.seed = 91;
    c.num_experts = E, c.moe_ffn = 6, c.moe_topk = K, c.moe_score = BE_MOE_SOFTMAX; /* alltoall: moe_allgather 0 */
    return c;
}

/* The router (E, h), the same on every rank, written over the model's: expert e reads mostly
 * element e of a token (2 on it, noise of 0.3 elsewhere). */
static void router(float *w)
{
    td_philox_fill_normal(w, (uint64_t)E * H, 7, 100, 0, 0.0f, 0.3f);
    for (int e = 0; e < E; e++) w[e * H + e] += 2.0f;
}

/* Rank r's input (NT, h): noise, plus 1.5 on the elements of the experts a token leans to. Rank
 * 0's tokens but every 8th lean to experts 2 and 3 (rank 1's), the others to 0 and 1; rank 1's
 * to expert t mod 4 only (noise picks the second). The reference decides what they choose. */
static void input(int r, float *x)
{
    td_philox_fill_normal(x, (uint64_t)NT * H, 7, (uint64_t)r, 0, 0.0f, 0.5f);
    for (int t = 0; t < NT; t++) {
        int a = r == 1 ? t % E : t % 8 ? 2 : 0;
        x[t * H + a] += 1.5f;
        if (r == 0) x[t * H + a + 1] += 1.5f;
    }
}

/* Rank r's choices (NT, k): each token's k largest logits x . w in double, the larger first;
 * returns the smallest gap between a chosen and an unchosen logit. */
static double ref_route(int r, int32_t *idx)
{
    float x[NT * H], w[E * H];
    input(r, x);
    router(w);
    double gap = INFINITY;
    for (int t = 0; t < NT; t++) {
        double lg[E];
        int chosen[E] = {0};
        for (int e = 0; e < E; e++) {
            lg[e] = 0;
            for (int i = 0; i < H; i++) lg[e] += (double)x[t * H + i] * (double)w[e * H + i];
        }
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!chosen[e] && (best < 0 || lg[e] > lg[best])) best = e;
            chosen[best] = 1, idx[t * K + j] = best;
        }
        for (int e = 0; e < E; e++)
            for (int f = 0; f < E; f++)
                if (chosen[e] && !chosen[f]) gap = fmin(gap, lg[e] - lg[f]);
    }
    return gap;
}

static const gpt_tensor_info *find(const gpt_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}

/* The block's forward of x into out and backward of dy into dx on model m (its router set). */
static void run_block(gpt_model *m, backend *be, const float *x, const float *dy, float *out, float *dx)
{
    const gpt_tensor_info *t = find(m, "layers.0.mlp.router.weight");
    EXPECT(t != NULL, "rank %d: no layers.0.mlp.router.weight", g_rank);
    router(m->params + t->offset);
    gpt_acts *acts = gpt_acts_acquire(m);
    acts->B = MBS;
    acts->training = 0;
    const block_slot *s = &m->layers[0].slot[GPT_SLOT_MLP];
    EXPECT(s->ops == &moe_ops, "rank %d: layer 0's MLP is not the MoE block", g_rank);
    block_io io = {.m = m, .B = MBS, .scratch = model_kind_scratch(m, s->ops)};
    void *av = acts->layers[0].slot[GPT_SLOT_MLP];
    m->loss_scale = 1.0f / NT;
    be_zero(be, m->grads, m->numel);
    s->ops->fwd(&io, av, s->p, out, be_f32(x));
    s->ops->bwd(&io, dx, s->g, dy, av, s->p, be_f32(x));
    gpt_acts_release(m, acts);
}

/* ---- the checks ---- */
static int g_at; /* the next logged message to compare */

/* The next message must be this one (none when count is 0: an empty part is not sent). */
static const msg *next(int send, int peer, int tag, comm_dtype t, size_t count, const char *what)
{
    if (count == 0) return NULL;
    EXPECT(g_at < g_nlog, "rank %d: %s: no message logged; want a %s of %zu %s rank %d", g_rank, what,
           send ? "send" : "receive", count, send ? "to" : "from", peer);
    const msg *g = &g_log[g_at++];
    EXPECT(g->send == send && g->peer == peer && g->tag == tag && g->t == t && g->count == count,
           "rank %d: %s: logged a %s of %zu (tag %d) %s rank %d; want a %s of %zu (tag %d) %s rank %d", g_rank, what,
           g->send ? "send" : "receive", g->count, g->tag, g->send ? "to" : "from", g->peer, send ? "send" : "receive",
           count, tag, send ? "to" : "from", peer);
    return g;
}

/* One alltoallv of rows with the peer: received `in` rows, sent `out` (of h floats). */
static const msg *rows_exchange(int peer, int in, int out, const char *what)
{
    next(0, peer, TAG_ROWS, COMM_F32, (size_t)in * H, what);
    return next(1, peer, TAG_ROWS, COMM_F32, (size_t)out * H, what);
}

static void check_messages(int me, const float *x)
{
    int peer = 1 - me;
    int32_t idx[EP][NT * K];
    int n[EP][E] = {{0}}, rows[EP][EP] = {{0}}; /* n[s][e]: rank s's rows for expert e; rows[s][q]: s's to q */
    for (int s = 0; s < EP; s++) {
        double gap = ref_route(s, idx[s]);
        EXPECT(gap > 1e-3, "rank %d: rank %d's input has a near tie (%g): the choice would be float noise", me, s, gap);
        for (int i = 0; i < NT * K; i++) n[s][idx[s][i]]++, rows[s][idx[s][i] / EL]++;
    }
    if (me == 0) {
        printf("reference rows (token, expert) by expert: rank 0 {%d %d | %d %d}, rank 1 {%d %d | %d %d}\n", n[0][0],
               n[0][1], n[0][2], n[0][3], n[1][0], n[1][1], n[1][2], n[1][3]);
        printf("rows rank -> rank: 0->0 %d, 0->1 %d, 1->0 %d, 1->1 %d; messages logged on rank 0: %d\n", rows[0][0],
               rows[0][1], rows[1][0], rows[1][1], g_nlog);
    }
    /* the case must be uneven: rank 0 sends most of its rows away, more than it gets */
    EXPECT(rows[0][1] >= 3 * rows[0][0] && rows[0][1] != rows[1][0] && rows[1][0] > 0 && rows[0][0] > 0,
           "rank %d: the routing is not uneven as the test needs: rows 0->0 %d, 0->1 %d, 1->0 %d", me, rows[0][0],
           rows[0][1], rows[1][0]);

    /* the count exchange: each of the peer's experts, the rows this rank sends it; and back */
    next(0, peer, TAG_COUNTS, COMM_I32, EL, "the count exchange");
    const msg *c = next(1, peer, TAG_COUNTS, COMM_I32, EL, "the count exchange");
    for (int j = 0; j < EL; j++) {
        int32_t got = ((const int32_t *)c->data)[j];
        EXPECT(got == n[me][peer * EL + j], "rank %d: the count exchange told rank %d %d rows for its expert %d; want %d",
               me, peer, got, peer * EL + j, n[me][peer * EL + j]);
    }
    /* the rows to the experts' ranks: this rank's input rows of the tokens routed there */
    const msg *g = rows_exchange(peer, rows[peer][me], rows[me][peer], "forward, rows to the experts");
    if (g) {
        const float *sent = g->data;
        int q = 0;
        for (int e = peer * EL; e < (peer + 1) * EL; e++)
            for (int i = 0; i < NT * K; i++)
                if (idx[me][i] == e) {
                    EXPECT(memcmp(sent + (size_t)q * H, x + (size_t)(i / K) * H, H * sizeof(float)) == 0,
                           "rank %d: row %d sent to rank %d is not token %d's input (expert %d)", me, q, peer, i / K, e);
                    q++;
                }
    }
    rows_exchange(peer, rows[me][peer], rows[peer][me], "forward, the experts' outputs back");
    rows_exchange(peer, rows[peer][me], rows[me][peer], "backward, output gradients to the experts");
    rows_exchange(peer, rows[me][peer], rows[peer][me], "backward, input gradients back");
    EXPECT(g_at == g_nlog, "rank %d: %d messages logged on the expert-parallel group; want %d", me, g_nlog, g_at);
}

/* out and dx of the ep block against the one-rank block's (a rank's own rows never cross) */
static void check_same(int me, const char *what, const float *got, const float *want)
{
    double big = 0, err = 0;
    for (int i = 0; i < NT * H; i++) big = fmax(big, fabs(want[i]));
    for (int i = 0; i < NT * H; i++) err = fmax(err, fabs(got[i] - want[i]) / big);
    EXPECT(big > 1e-3 && err < 1e-5, "rank %d: the ep 2 block's %s is off the one-rank block's by %.3g (largest %.3g)",
           me, what, err, big);
}

int main(int argc, char **argv)
{
    comm *world = comm_world_init(&argc, &argv);
    g_rank = comm_rank(world);
    if (comm_size(world) != EP) td_fatal(2, "test_moe_a2a runs on %d ranks (mpirun -np %d); got %d", EP, EP,
                                         comm_size(world));
    backend *be = be_create("cpu", 1);
    gpt_config c = config();
    float x[NT * H], dy[NT * H], out[NT * H], dx[NT * H], out1[NT * H], dx1[NT * H];
    input(g_rank, x);
    td_philox_fill_normal(dy, NT * H, 7, 200 + (uint64_t)g_rank, 0, 0.0f, 1.0f);

    /* ep 2: the two ranks' dp group is the expert-parallel group */
    ps_state *ps = ps_init(world, 1, 1);
    ps_init_experts(ps, EP);
    gpt_model *m = gpt_create(&c, ps, be, 0, 1, MBS, 1);
    comm *group = ps->ep_group;
    ps->ep_group = recording_view(group);
    run_block(m, be, x, dy, out, dx);
    free(ps->ep_group);
    ps->ep_group = group;
    check_messages(g_rank, x);

    /* the same block on this rank alone, all experts here */
    comm *self = comm_split(world, g_rank, 0);
    ps_state one;
    memset(&one, 0, sizeof one);
    one.world_size = one.tp = one.pp = one.dp = 1;
    one.world = one.tp_group = one.dp_group = one.pp_group = one.mp_group = self;
    gpt_model *m1 = gpt_create(&c, &one, be, 0, 1, MBS, 1);
    run_block(m1, be, x, dy, out1, dx1);
    check_same(g_rank, "output", out, out1);
    check_same(g_rank, "input gradient", dx, dx1);

    for (int i = 0; i < g_nlog; i++) free(g_log[i].data);
    gpt_free(m1);
    comm_free(self);
    gpt_free(m);
    ps_free(ps);
    be_free(be);
    comm_barrier(world);
    if (g_rank == 0) printf("%d passed, 0 failed\n", g_checks);
    comm_world_finalize(world);
    return 0;
}
