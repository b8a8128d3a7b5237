/* The mixture-of-experts MLP block (after Megatron-Core's MoELayer with its TopKRouter and a
 * local token dispatcher): a router (h -> E logits, fp32, no bias) chooses each token's top-k
 * experts and their weights (be_moe_route_fwd); the tokens are copied into expert order
 * (be_moe_permute), each expert — an MLP like the dense one, GeLU or SwiGLU, of hidden size
 * --moe-ffn-hidden-size — runs on its rows, and the outputs are summed back weighted
 * (be_moe_unpermute). Dropless: every expert takes every token routed to it. The load-balancing
 * loss and the z-loss add their gradients to the router's logits in the backward, scaled as the
 * language-model loss is (a micro-batch's losses count as its share of the global batch).
 * The experts' weights are stacked: fc (E bF, h), expert e's rows [e bF, (e + 1) bF) (SwiGLU:
 * its [gate | up]); fc2 (E h, F). Today: one rank of tensor parallelism, fp32 GEMMs.
 * Under LoRA (--lora-target-modules gate_proj, up_proj, down_proj) each expert has its own
 * adapters, stacked and split as its weights, run on its own rows after its GEMMs; the router,
 * the experts and the shared expert stay frozen; the shared expert has the dense MLP's adapters
 * (moe_lora.c). --lora-dropout on the experts': moe_lora.c's expert_drop. */
#include "block.h"
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

#include "moe_impl.h"


/* The rows this rank's experts may take in a micro-batch of T tokens here (T cp over the
 * context-parallel ranks): without ep its own; with it each of the ep ranks sends at most
 * T min(k, El) (a token's k experts are distinct), or padded El capacities. */
static int64_t rows_max(const gpt_config *c, int ep, int64_t T, int cp)
{
    int64_t k = c->moe_topk, El = c->num_experts / ep;
    if (ep == 1 || c->moe_pad) return src_rows(c, T, cp);
    return ep * T * (k < El ? k : El);
}

static void tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *pv, void *gv)
{
    moe_params *p = pv, *g = gv;
    const gpt_config *c = tb->cfg;
    int64_t h = c->hidden, E = c->num_experts, F = gpt_moe_ffn(c), bF = gpt_fc_blocks(c) * F, b = gpt_fc_blocks(c);
    int bias = gpt_has_bias(c);
    char n[80];
#define T(field, init, kind, d0, d1, label)                                                                        \
    do {                                                                                                           \
        snprintf(n, sizeof n, "%s.%s", prefix, label);                                                             \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, stream0 + (kind)), n, d0, d1, -1, 1,  \
                         (d1) == 0);                                                                               \
    } while (0)
#define TS(field, init, kind, d0, d1, sd, blocks, label) /* split over tp as the dense MLP's */                   \
    do {                                                                                                           \
        snprintf(n, sizeof n, "%s.%s", prefix, label);                                                             \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, stream0 + (kind)), n, d0, d1, sd,     \
                         blocks, (d1) == 0);                                                                       \
    } while (0)
#define X(field, init, kind, d0, d1, sd, blocks, label) /* the experts': split over ep, or each over tp */      \
    do {                                                                                                           \
        snprintf(n, sizeof n, "%s.%s", prefix, label);                                                             \
        model_add_expert_tensor(tb, &p->field, &g->field, init, model_stream(layer, stream0 + (kind)), n, d0, d1,  \
                                sd, blocks, (d1) == 0);                                                            \
    } while (0)
    /* Under tensor parallelism each expert (and the shared expert) splits as the dense MLP does: fc
     * by columns (each expert's [gate | up] blocks), fc2 by rows of its input; the router, the
     * gate and fc2's biases are whole on every tp rank. Reverse of the order the backward finishes them. */
    if (bias) X(fc2_b, INIT_ZEROS, 0, E * h, 0, -1, 1, "experts.fc2.bias");
    X(fc2_w, INIT_NORMAL_OUT, 1, E * h, F, 1, 1, "experts.fc2.weight");
    if (bias) X(fc_b, INIT_ZEROS, 2, E * bF, 0, 0, (int)(E * b), "experts.fc.bias");
    X(fc_w, INIT_NORMAL, 3, E * bF, h, 0, (int)(E * b), "experts.fc.weight");
    /* LoRA on each expert, its adapters stacked and split as the expert's tensors: gate and up on
     * fc's blocks (up the whole fc ungated), down on fc2; the router stays frozen */
    static const char *const mods[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int i = 2; i >= 0; i--) {
        if (!gpt_lora_on(c, GPT_LORA_GATE + i)) continue;
        int r = c->lora_rank;
        snprintf(n, sizeof n, "%s.experts.%s.lora_A.weight", prefix, mods[i]);
        model_add_expert_adapter(tb, &p->lora_a[i], &g->lora_a[i], INIT_NORMAL, model_stream(layer, 40 + 2 * i), n,
                                 E * r, i < 2 ? h : F, i < 2 ? -1 : 1, 1);
        snprintf(n, sizeof n, "%s.experts.%s.lora_B.weight", prefix, mods[i]);
        model_add_expert_adapter(tb, &p->lora_b[i], &g->lora_b[i], INIT_ZEROS, model_stream(layer, 41 + 2 * i), n,
                                 E * (i < 2 ? F : h), r, i < 2 ? 0 : -1, i < 2 ? (int)E : 1);
    }
    T(router_w, INIT_NORMAL, 4, E, h, "router.weight");
    if (c->moe_expert_bias) T(expert_bias, INIT_ZEROS, 10, E, 0, "router.expert_bias");
    int64_t S = c->moe_shared_ffn, bS = gpt_fc_blocks(c) * S;
    if (S > 0) {
        if (bias) T(sh_fc2_b, INIT_ZEROS, 5, h, 0, "shared_expert.fc2.bias");
        TS(sh_fc2_w, INIT_NORMAL_OUT, 6, h, S, 1, 1, "shared_expert.fc2.weight");
        if (bias) TS(sh_fc_b, INIT_ZEROS, 7, bS, 0, 0, (int)b, "shared_expert.fc.bias");
        TS(sh_fc_w, INIT_NORMAL, 8, bS, h, 0, (int)b, "shared_expert.fc.weight");
        if (c->moe_shared_gate) T(sh_gate_w, INIT_NORMAL, 9, 1, h, "shared_expert.gate.weight");
        /* LoRA on the shared expert: the dense MLP's adapters (mlp.c) on its width S */
        for (int i = 2; i >= 0; i--) {
            if (!gpt_lora_on(c, GPT_LORA_GATE + i)) continue;
            int r = c->lora_rank;
            snprintf(n, sizeof n, "%s.shared_expert.%s.lora_A.weight", prefix, mods[i]);
            model_add_adapter(tb, &p->sh_lora_a[i], &g->sh_lora_a[i], INIT_NORMAL, model_stream(layer, 50 + 2 * i), n,
                              r, i < 2 ? h : S, i < 2 ? -1 : 1, 1);
            snprintf(n, sizeof n, "%s.shared_expert.%s.lora_B.weight", prefix, mods[i]);
            model_add_adapter(tb, &p->sh_lora_b[i], &g->sh_lora_b[i], INIT_ZEROS, model_stream(layer, 51 + 2 * i), n,
                              i < 2 ? S : h, r, i < 2 ? 0 : -1, 1);
        }
    }
#undef T
#undef TS
#undef X
}

/* Whether the experts carry adapters (--lora-target-modules with gate, up or down). */
static int experts_lora(const gpt_config *c)
{
    return gpt_lora_on(c, GPT_LORA_GATE) || gpt_lora_on(c, GPT_LORA_UP) || gpt_lora_on(c, GPT_LORA_DOWN);
}

/* The adapters' scratch for R rows of experts of width F (this rank's) and the shared expert's T
 * rows of width S: fp32 rows, so no widened input (xf); the dropped input (xd) with --lora-dropout. */
static void carve_lora_scratch(carver *cv, const gpt_config *c, int64_t R, int64_t F, int64_t T, int64_t S,
                               lora_scratch *ls)
{
    if (!experts_lora(c)) return;
    R = R > T ? R : T, F = F > S ? F : S;
    int64_t bF = gpt_fc_blocks(c) * F, in = F > c->hidden ? F : c->hidden;
    float **f[LORA_SCRATCH_FIELDS] = {&ls->bw, &ls->dbw, &ls->tmp, &ls->xd, &ls->du, &ls->xf};
    for (int q = 0; q < LORA_SCRATCH_FIELDS; q++)
        if (f[q] != &ls->xf && (f[q] != &ls->xd || c->lora_dropout > 0))
            CARVE(cv, *f[q], float, lora_scratch_floats(R, bF, in, c->lora_rank, q));
}

/* The buffers of T tokens' forward (and the backward's kept values), carved: a micro-batch's
 * activations (acts), or generation's step buffers (decode_scratch, with the adapters' scratch:
 * decode 1). */
/* tp: the split of each expert's width; stp: the shared expert's (the tp size); seq: a sample's
 * positions among the T (seq / cp under context parallelism, cp ranks holding the micro-batch). */
static void carve_tokens(carver *cv, const gpt_config *c, int ep, int tp, int stp, int seq, int cp, int64_t T,
                         moe_acts *a, int decode)
{
    int64_t E = c->num_experts, k = c->moe_topk, F = gpt_moe_ffn(c) / tp, R = rows_max(c, ep, T, cp);
    a->E = (int)E;
    CARVE(cv, a->logits, float, T * E);
    if (cv->kept_dt != BE_F32) CARVE(cv, a->x32, float, T * c->hidden); /* mixed precision: the input widened */
    CARVE(cv, a->idx, int32_t, T * k);
    CARVE(cv, a->probs, float, T * k);
    CARVE(cv, a->row, int32_t, T * k);
    CARVE(cv, a->count, int32_t, E);
    CARVE(cv, a->routed, int32_t, E);
    CARVE(cv, a->aux_count, int32_t, E);
    if (c->moe_seq_aux) CARVE(cv, a->seq_count, int32_t, (T / seq + 1) * E);
    if (c->moe_expert_bias) {
        CARVE(cv, a->aux_idx, int32_t, T * k);
        CARVE(cv, a->aux_probs, float, T * k);
    }
    CARVE(cv, a->xe, float, src_rows(c, T, cp) * c->hidden);
    CARVE(cv, a->he, float, R * gpt_fc_blocks(c) * F);
    CARVE(cv, a->ae, float, R * F);
    /* ye: the experts' outputs back at the source; with allgather they stay where computed */
    CARVE(cv, a->ye, float, (ep > 1 && c->moe_allgather ? R : src_rows(c, T, cp)) * c->hidden);
    CARVE(cv, a->lcount, int32_t, E / ep);
    if (c->moe_etp1 && stp > 1) CARVE(cv, a->rowm, int32_t, T * k);
    if (ep > 1) {
        CARVE(cv, a->rcount, int32_t, E);
        CARVE(cv, a->xl, float, R * c->hidden);
    }
    if (ep > 1 && c->moe_allgather) {
        CARVE(cv, a->grow, int32_t, ep * T * k);
        CARVE(cv, a->gprobs, float, ep * T * k);
    }
    for (int i = 0; i < 3; i++) /* LoRA on the experts: each target's low-rank activations, kept */
        if (gpt_lora_on(c, GPT_LORA_GATE + i)) CARVE(cv, a->su[i], float, R * c->lora_rank);
    if (experts_lora(c) && c->lora_dropout > 0) CARVE(cv, a->tok, int64_t, R);
    for (int i = 0; i < 3; i++) /* ... and the shared expert's */
        if (gpt_lora_on(c, GPT_LORA_GATE + i) && c->moe_shared_ffn > 0) CARVE(cv, a->sh_su[i], float, T * c->lora_rank);
    if (decode) carve_lora_scratch(cv, c, R, F, T, c->moe_shared_ffn / stp, &a->lora);
    int64_t S = c->moe_shared_ffn / stp;
    if (S > 0) {
        CARVE(cv, a->sh_he, float, T * gpt_fc_blocks(c) * S);
        CARVE(cv, a->sh_ae, float, T * S);
        CARVE(cv, a->sh_ye, float, T * c->hidden);
        CARVE(cv, a->sh_gy, float, T * c->hidden);
        CARVE(cv, a->sh_glog, float, T);
        CARVE(cv, a->sh_g, float, T);
        CARVE(cv, a->sh_idx, int32_t, T);
        CARVE(cv, a->ident, int32_t, T);
    }
}

static void acts(carver *cv, const gpt_model *m, void *av)
{
    carve_tokens(cv, &m->cfg, ep_of(m), expert_tp(m), m->tp, m->seq_c, m->cp, (int64_t)m->mbs * m->seq_c, av, 0);
}

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    moe_scratch *s = sv;
    const gpt_config *c = &m->cfg;
    int ep = ep_of(m);
    int64_t T = (int64_t)m->mbs * m->seq_c, E = c->num_experts, k = c->moe_topk, F = gpt_moe_ffn(c) / expert_tp(m);
    int64_t R = rows_max(c, ep, T, m->cp);
    CARVE(cv, s->dlogits, float, T * E);
    CARVE(cv, s->dprobs, float, T * k);
    CARVE(cv, s->dye, float, src_rows(c, T, m->cp) * c->hidden);
    CARVE(cv, s->dae, float, R * F);
    CARVE(cv, s->dhe, float, R * gpt_fc_blocks(c) * F);
    CARVE(cv, s->dxe, float, src_rows(c, T, m->cp) * c->hidden);
    if (ep > 1) {
        CARVE(cv, s->dyl, float, R * c->hidden);
        CARVE(cv, s->dxl, float, R * c->hidden);
        CARVE(cv, s->yl, float, R * c->hidden);
        CARVE(cv, s->xchg, float, R * c->hidden);
        if (c->moe_allgather) {
            CARVE(cv, s->gbuf, float, ep * T * c->hidden);
            CARVE(cv, s->gdprobs, float, ep * T * k);
        }
    }
    carve_lora_scratch(cv, c, R, F, T, c->moe_shared_ffn / m->tp, &s->lora);
    int64_t S = c->moe_shared_ffn / m->tp;
    if (S > 0) {
        CARVE(cv, s->sh_dye, float, T * c->hidden);
        CARVE(cv, s->sh_dae, float, T * S);
        CARVE(cv, s->sh_dhe, float, T * gpt_fc_blocks(c) * S);
        CARVE(cv, s->sh_dg, float, T);
        CARVE(cv, s->sh_dglog, float, T);
    }
}

/* One MLP of hidden width F (bF = F or 2F) on n rows: he = x W1^T + b1, ae = act(he), ye =
 * ae W2^T + b2; and its backward (dye given; dx accumulated, the weights' gradients too). */
static void mlp_fwd(const gpt_model *m, float *ye, float *ae, float *he, const float *x, const float *w1,
                    const float *b1, const float *w2, const float *b2, int n, int F)
{
    const gpt_config *c = &m->cfg;
    int h = c->hidden, bF = gpt_fc_blocks(c) * F;
    be_matmul_fwd(m->be, he, x, w1, b1, n, h, bF);
    be_act_fwd(m->be, c->act, c->glu, ae, he, n, F);
    be_matmul_fwd(m->be, ye, ae, w2, b2, n, F, h);
}

static void mlp_bwd(const gpt_model *m, float *dx, float *dw1, float *db1, float *dw2, float *db2, float *dae, float *dhe,
                    const float *dye, const float *x, const float *he, const float *ae, const float *w1,
                    const float *w2, int n, int F)
{
    const gpt_config *c = &m->cfg;
    int h = c->hidden, bF = gpt_fc_blocks(c) * F;
    be_zero(m->be, dae, (size_t)n * F);
    be_matmul_bwd(m->be, dae, dw2, db2, dye, ae, w2, n, F, h);
    be_zero(m->be, dhe, (size_t)n * bF);
    be_act_bwd(m->be, c->act, c->glu, dhe, dae, he, n, F);
    be_matmul_bwd(m->be, dx, dw1, db1, dhe, x, w1, n, h, bF);
}

/* Context parallelism: the ranks whose tokens make this rank's micro-batch (its samples' other
 * chunks), or NULL without (generation's model has none); and how many they are (1 without). */
static const comm *cp_group_of(const gpt_model *m) { return m->ps && m->cp > 1 ? m->ps->cp_group : NULL; }
static int cp_of(const gpt_model *m) { return cp_group_of(m) ? m->cp : 1; }

/* The position in its sample of position t of cp rank r's seq_c (Megatron's load balancing: the
 * rank holds chunks r and 2 cp - 1 - r of the 2 cp equal chunks of the sequence). */
static int cp_position(const gpt_model *m, int r, int t)
{
    int L = m->seq_c / 2;
    return m->cp > 1 ? (t < L ? r : 2 * m->cp - 1 - r) * L + t % L : t;
}

/* With --moe-expert-capacity-factor (Megatron's apply_router_token_dropping, without padding):
 * an expert takes at most cap = ceil(T k / E x factor) of a micro-batch's T tokens; over that,
 * the choices of the lowest weight (probs; ties to the later token) or of the latest tokens
 * (position) are dropped: their row -1, their weight 0. */
static int cmp_keep(const void *x, const void *y, void *ctx)
{
    const float *p = ctx;
    int i = *(const int *)x, j = *(const int *)y;
    return p[i] > p[j] ? -1 : p[i] < p[j] ? 1 : (i > j) - (i < j);
}

/* drop[i] = 1 for the choices (idx, probs: (T, k), tokens in the micro-batch's order) over their
 * expert's capacity cap, 0 for the others. */
static void capacity_drops(const gpt_config *c, const int32_t *idx, const float *probs, int T, int cap,
                           unsigned char *drop)
{
    int E = c->num_experts, k = c->moe_topk;
    int *mine = td_xmalloc((size_t)T * k * sizeof *mine);
    memset(drop, 0, (size_t)T * k);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int i = 0; i < T * k; i++)
            if (idx[i] == e) mine[n++] = i; /* in token order */
        if (n <= cap) continue;
        if (!c->moe_drop_position) qsort_r(mine, (size_t)n, sizeof *mine, cmp_keep, (void *)probs);
        for (int q = cap; q < n; q++) drop[mine[q]] = 1;
    }
    free(mine);
}

/* The capacity over this rank's T tokens of the micro-batch. Under context parallelism the
 * micro-batch's T cp tokens are the cp ranks' chunks: every rank gathers their choices (expert and
 * weight, T k each) over the cp group, puts them in the micro-batch's token order (sample by
 * sample, positions in order), decides the drops over all of them as one rank does, and keeps its
 * own. Host memory (the CPU backend's). Collective over cp. */
static void apply_capacity(const gpt_model *m, moe_acts *a, int T)
{
    const gpt_config *c = &m->cfg;
    const comm *cpg = cp_group_of(m);
    int k = c->moe_topk, cp = cp_of(m), sc = m->seq_c, seq = sc * cp, Tb = T * cp;
    size_t n = (size_t)T * k, N = n * cp;
    unsigned char *drop = td_xmalloc(N);
    if (!cpg) {
        capacity_drops(c, a->idx, a->probs, T, (int)capacity_of(c, T), drop);
        for (size_t i = 0; i < n; i++)
            if (drop[i]) a->row[i] = -1, a->probs[i] = 0, a->dropped++;
        free(drop);
        return;
    }
    int32_t *gi = td_xmalloc(2 * N * sizeof *gi), *bi = gi + N; /* gathered by rank; in the micro-batch's order */
    float *gp = td_xmalloc(2 * N * sizeof *gp), *bp = gp + N;
    xfer_allgather_to_host(m->be, cpg, a->idx, gi, n, COMM_I32);
    xfer_allgather_to_host(m->be, cpg, a->probs, gp, n, COMM_F32);
    for (int r = 0; r < cp; r++)
        for (int j = 0; j < T; j++) {
            size_t at = ((size_t)(j / sc) * seq + cp_position(m, r, j % sc)) * k, from = ((size_t)r * T + j) * k;
            memcpy(bi + at, gi + from, (size_t)k * sizeof *bi);
            memcpy(bp + at, gp + from, (size_t)k * sizeof *bp);
        }
    capacity_drops(c, bi, bp, Tb, (int)capacity_of(c, Tb), drop);
    for (int j = 0; j < T; j++)
        for (int q = 0; q < k; q++) {
            size_t i = (size_t)j * k + q;
            if (drop[((size_t)(j / sc) * seq + cp_position(m, m->cp_rank, j % sc)) * k + q])
                a->row[i] = -1, a->probs[i] = 0, a->dropped++;
        }
    free(gi);
    free(gp);
    free(drop);
}

/* The rows of each expert and each choice's row in expert order: expert by expert, tokens in
 * order within one (Megatron's permute). On the host: the CPU backend's memory is the host's. */
static void dispatch_map(const gpt_model *m, moe_acts *a, int T)
{
    const gpt_config *c = &m->cfg;
    int E = c->num_experts, k = c->moe_topk;
    int32_t *off = td_xcalloc((size_t)E + 1, sizeof *off);
    memset(a->count, 0, (size_t)E * sizeof *a->count);
    memset(a->routed, 0, (size_t)E * sizeof *a->routed);
    for (int i = 0; i < T * k; i++) a->routed[a->idx[i]]++, a->row[i] = 0;
    a->dropped = 0;
    if (c->moe_capacity > 0) apply_capacity(m, a, T);
    for (int i = 0; i < T * k; i++)
        if (a->row[i] >= 0) a->count[a->idx[i]]++;
    if (c->moe_pad) /* every expert the micro-batch's capacity of rows, the ones past its tokens here zeros */
        for (int e = 0; e < E; e++) a->count[e] = (int32_t)capacity_of(c, (int64_t)T * cp_of(m));
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + a->count[e];
    for (int i = 0; i < T * k; i++) /* in token order: each expert's rows keep it */
        if (a->row[i] >= 0) a->row[i] = off[a->idx[i]]++;
    free(off);
}

/* ---- expert parallelism: the alltoall token dispatcher (Megatron's MoEAlltoAllTokenDispatcher) ----
 * Rank r of the expert-parallel group holds experts [r El, (r + 1) El). A micro-batch's rows in
 * expert order (xe) are already grouped by the rank holding their expert: each group goes to that
 * rank, which orders what it receives expert by expert (each expert's rows by source rank, then
 * token), runs its experts, and sends each source its rows back in the order they came. */
#define MOE_TAG_COUNTS 41
#define MOE_TAG_ROWS 42

/* Each rank tells each other how many rows it sends each of its experts: a->rcount, a->lcount. */
static void exchange_counts(const gpt_model *m, moe_acts *a)
{
    int P = m->ps->ep, El = local_experts(m);
    size_t *cnt = td_xmalloc((size_t)2 * P * sizeof *cnt), *dsp = cnt + P;
    for (int r = 0; r < P; r++) cnt[r] = (size_t)El, dsp[r] = (size_t)r * El;
    xfer_alltoallv(m->be, m->ps->ep_group, a->count + expert_base(m), cnt, dsp, a->rcount, cnt, dsp, COMM_I32,
                   MOE_TAG_COUNTS);
    free(cnt);
    for (int j = 0; j < El; j++) {
        a->lcount[j] = 0;
        for (int r = 0; r < P; r++) a->lcount[j] += a->rcount[r * El + j];
    }
}

/* The rows of src sent to or received from each rank, in units of h floats: sent (to_experts)
 * the rows of its experts in a->count, received their a->rcount; back the other way. */
static void rank_rows(const gpt_model *m, const moe_acts *a, int P, int h, int sent, size_t *cnt, size_t *dsp)
{
    int El = local_experts(m), eb = expert_base(m);
    size_t at = 0;
    for (int r = 0; r < P; r++) {
        size_t n = 0;
        for (int j = 0; j < El; j++) n += (size_t)(sent ? a->count[eb + r * El + j] : a->rcount[r * El + j]);
        cnt[r] = n * (size_t)h, dsp[r] = at * (size_t)h;
        at += n;
    }
}

/* Rows by source rank (each source's expert by expert) <-> expert by expert (each expert's by
 * source rank): to_expert_major 1 the first into the second. */
static void reorder(const gpt_model *m, const moe_acts *a, float *dst, const float *src, int h, int to_expert_major)
{
    int P = m->ps->ep, El = local_experts(m);
    size_t *src_at = td_xmalloc((size_t)P * sizeof *src_at), at = 0, le = 0;
    for (int r = 0; r < P; r++) {
        src_at[r] = at;
        for (int j = 0; j < El; j++) at += (size_t)a->rcount[r * El + j];
    }
    for (int j = 0; j < El; j++)
        for (int r = 0; r < P; r++) {
            size_t n = (size_t)a->rcount[r * El + j], s = src_at[r];
            if (n) {
                const float *from = to_expert_major ? src + s * h : src + le * h;
                float *to = to_expert_major ? dst + le * h : dst + s * h;
                be_copy(m->be, to, from, n * (size_t)h);
            }
            src_at[r] += n, le += n;
        }
    free(src_at);
}

/* out = 1: xe-ordered rows (T k at most, this rank's tokens) to this rank's experts' rows
 * (expert-major), through xchg; out = 0: back. */
static void exchange(const gpt_model *m, const moe_acts *a, float *xchg, float *dst, const float *src, int h, int out)
{
    int P = m->ps->ep;
    size_t *v = td_xmalloc((size_t)4 * P * sizeof *v);
    rank_rows(m, a, P, h, out, v, v + P); /* sent */
    rank_rows(m, a, P, h, !out, v + 2 * P, v + 3 * P); /* received */
    if (!out) reorder(m, a, xchg, src, h, 0);
    xfer_alltoallv(m->be, m->ps->ep_group, out ? src : xchg, v, v + P, out ? xchg : dst, v + 2 * P, v + 3 * P,
                   COMM_F32, MOE_TAG_ROWS);
    if (out) reorder(m, a, dst, xchg, h, 1);
    free(v);
}
static void to_experts(const gpt_model *m, const moe_acts *a, float *xchg, float *dst, const float *src, int h)
{
    exchange(m, a, xchg, dst, src, h, 1);
}
static void from_experts(const gpt_model *m, const moe_acts *a, float *xchg, float *dst, const float *src, int h)
{
    exchange(m, a, xchg, dst, src, h, 0);
}

/* a->tok: the token of each of this rank's experts' rows (expert_drop), from the T tokens of the
 * micro-batch's samples `sample` (B = T / seq_c), each at its global position (context
 * parallelism: the rank's chunks cp_rank and 2 cp - 1 - cp_rank of the sequence); ob: this tp
 * rank's experts' first row in xe. The dispatchers' own maps, on the host (the CPU backend's
 * memory). */
static void expert_row_tokens(const gpt_model *m, moe_acts *a, moe_scratch *s, const int64_t *sample, int T,
                              size_t ob)
{
    const gpt_config *c = &m->cfg;
    int k = c->moe_topk, seq = c->seq, sc = m->seq_c, ep = ep_of(m), El = local_experts(m);
    size_t nl = 0;
    for (int e = 0; e < El; e++) nl += (size_t)a->lcount[e];
    memset(a->tok, 0, nl * sizeof *a->tok); /* padding rows (--moe-pad-expert-input-to-capacity): zero input */
    int64_t *tk = td_xmalloc((size_t)T * sizeof *tk);
    for (int j = 0; j < T; j++) {
        tk[j] = sample[j / sc] * seq + cp_position(m, m->cp_rank, j % sc);
    }
    if (ep > 1 && c->moe_allgather) { /* the group's tokens, as the rows were gathered (grow) */
        int64_t *g = td_xmalloc((size_t)ep * T * sizeof *g);
        comm_allgather(m->ps->ep_group, tk, g, (size_t)T, COMM_I64);
        for (int64_t i = 0; i < (int64_t)ep * T * k; i++)
            if (a->grow[i] >= 0) a->tok[a->grow[i]] = g[i / k];
        free(g);
    } else if (ep > 1) { /* each xe row's token, sent as the rows are (the int64s' bytes as float pairs: copied only) */
        int64_t *xt = td_xcalloc((size_t)src_rows(c, T, cp_of(m)), sizeof *xt);
        for (int i = 0; i < T * k; i++)
            if (a->row[i] >= 0) xt[a->row[i]] = tk[i / k];
        to_experts(m, a, s->xchg, (float *)a->tok, (const float *)(xt + ob), 2);
        free(xt);
    } else {
        for (int i = 0; i < T * k; i++)
            if (a->row[i] >= (int64_t)ob && (size_t)a->row[i] - ob < nl) a->tok[a->row[i] - ob] = tk[i / k];
    }
    free(tk);
}

/* ---- expert parallelism: the allgather token dispatcher (Megatron's MoEAllGatherTokenDispatcher) ----
 * Every rank of the group gets every rank's tokens and their choices, runs its experts on the
 * rows routed to them (the same order as alltoall's: expert by expert, each one's by source rank
 * then token), and sums its experts' weighted outputs for all the group's tokens; a reduce-scatter
 * leaves each rank its own tokens' sums. Backward: the outputs' gradients gathered, the weights'
 * and the inputs' partial gradients reduce-scattered. */
static void gather_dispatch(const gpt_model *m, moe_acts *a, moe_scratch *s, const float *xf, int T)
{
    const gpt_config *c = &m->cfg;
    int P = m->ps->ep, El = local_experts(m), e0 = expert_base(m) + m->ps->ep_rank * El, k = c->moe_topk;
    int E = c->num_experts, h = c->hidden;
    int G = P * T;
    xfer_allgather(m->be, m->ps->ep_group, xf, s->gbuf, (size_t)T * h, COMM_F32);
    xfer_allgather(m->be, m->ps->ep_group, a->probs, a->gprobs, (size_t)T * k, COMM_F32);
    int32_t *gidx = td_xmalloc((size_t)G * k * sizeof *gidx), *at = td_xcalloc((size_t)El * P, sizeof *at);
    xfer_allgather_to_host(m->be, m->ps->ep_group, a->idx, gidx, (size_t)T * k, COMM_I32);
    xfer_allgather(m->be, m->ps->ep_group, a->row, a->grow, (size_t)T * k, COMM_I32); /* -1: dropped at its source */
    /* host memory: the CPU backend's. rcount[src][j]: the rows of source src for local expert j */
    memset(a->rcount, 0, (size_t)E * sizeof *a->rcount);
    for (int i = 0; i < G * k; i++) {
        int j = gidx[i] - e0;
        if (j < 0 || j >= El || a->grow[i] < 0) a->grow[i] = -1;
        else a->rcount[(i / (T * k)) * El + j]++;
    }
    int32_t cap = c->moe_pad ? (int32_t)capacity_of(c, (int64_t)T * cp_of(m)) : 0;
    for (int j = 0, r0 = 0; j < El; j++) { /* each (expert, source) its first row */
        a->lcount[j] = 0;
        for (int src = 0; src < P; src++) {
            at[j * P + src] = r0 + a->lcount[j];
            a->lcount[j] += cap ? cap : a->rcount[src * El + j];
        }
        r0 += a->lcount[j];
    }
    for (int i = 0; i < G * k; i++)
        if (a->grow[i] >= 0) a->grow[i] = at[(gidx[i] - e0) * P + i / (T * k)]++;
    free(gidx);
    free(at);
    int nl = 0;
    for (int j = 0; j < El; j++) nl += a->lcount[j];
    if (c->moe_pad) be_zero(m->be, a->xl, (size_t)nl * h); /* the padding rows */
    be_moe_permute(m->be, a->xl, s->gbuf, a->grow, G, k, h);
}

/* The tokens whose choice float noise could flip: the k-th largest routing key (the logit; with
 * sigmoid scores and the expert bias, sigmoid(logit) + bias) within MOE_TIE of the (k+1)-th,
 * relative to the larger of 1 and its size. Another layout's rounding (1e-7 relative) could
 * choose otherwise for these only. Host memory: the CPU backend's. */
#define MOE_TIE 1e-5
static int count_near_ties(const moe_acts *a, const moe_params *p, const gpt_config *c, int T)
{
    int E = c->num_experts, k = c->moe_topk, n = 0;
    if (k >= E) return 0;
    unsigned char *chosen = td_xcalloc((size_t)E, 1);
    for (int t = 0; t < T; t++) {
        double kth = INFINITY, next = -INFINITY; /* the smallest chosen key, the largest left out */
        for (int j = 0; j < k; j++) chosen[a->idx[(size_t)t * k + j]] = 1;
        for (int e = 0; e < E; e++) {
            double l = a->logits[(size_t)t * E + e], key = l;
            if (p->expert_bias) key = 1.0 / (1.0 + exp(-l)) + p->expert_bias[e];
            if (chosen[e]) kth = key < kth ? key : kth;
            else next = key > next ? key : next;
        }
        for (int j = 0; j < k; j++) chosen[a->idx[(size_t)t * k + j]] = 0;
        if (kth - next < MOE_TIE * fmax(1.0, fabs(kth))) n++;
    }
    free(chosen);
    return n;
}

/* Whether the load-balancing loss is seq_aux_loss's, per sequence: T whole samples of seq_c
 * positions here (generation's steps count over all their tokens). */
static int per_sequence(const gpt_model *m, int T) { return m->cfg.moe_seq_aux && T % m->seq_c == 0; }

/* What the load-balancing loss counts (`ix`, (T, k)), over the micro-batch: aux_count (E), or
 * per sequence seq_count (B, E); under context parallelism summed over the cp ranks (each holds
 * some of every sample's positions), so that every rank's loss counts the whole micro-batch's
 * routing as one rank's would (Megatron sums its tokens per expert over tp x cp). Host memory:
 * the CPU backend's. Collective over cp. */
static void aux_counts(const gpt_model *m, moe_acts *a, const int32_t *ix, int T)
{
    const gpt_config *c = &m->cfg;
    int E = c->num_experts, k = c->moe_topk, s = m->seq_c;
    const comm *cpg = cp_group_of(m);
    if (!per_sequence(m, T)) {
        if (cpg) comm_allreduce(cpg, a->aux_count, (size_t)E, COMM_I32, COMM_SUM);
        return;
    }
    int B = T / s;
    memset(a->seq_count, 0, (size_t)B * E * sizeof *a->seq_count);
    for (int b = 0; b < B; b++)
        for (int i = b * s * k; i < (b + 1) * s * k; i++) a->seq_count[(size_t)b * E + ix[i]]++;
    if (cpg) comm_allreduce(cpg, a->seq_count, (size_t)B * E, COMM_I32, COMM_SUM);
}

/* The load-balancing loss of the T tokens, over all of them (aux_loss), or with seq_aux_loss the
 * mean over their sequences of each one's own (DeepSeek-V2/V3; Megatron's seq_aux_loss); counted
 * as aux_counts left them. Under context parallelism this rank's share: the terms of its own
 * tokens, normalised by the micro-batch's (or the sequence's) whole token count, so the cp ranks'
 * shares sum to the loss. dlogits (NULL: none) += dscale times its gradient. */
static double aux_loss(const gpt_model *m, moe_acts *a, float *dlogits, int T, double coeff, float dscale)
{
    const gpt_config *c = &m->cfg;
    int E = c->num_experts, k = c->moe_topk, s = m->seq_c, cp = cp_of(m);
    if (!per_sequence(m, T))
        return be_moe_aux_loss(m->be, dlogits, a->logits, a->aux_count, T, E, k, c->moe_score, coeff, (double)T * cp,
                               dscale);
    int B = T / s;
    double loss = 0;
    for (int b = 0; b < B; b++)
        loss += be_moe_aux_loss(m->be, dlogits ? dlogits + (size_t)b * s * E : NULL, a->logits + (size_t)b * s * E,
                                a->seq_count + (size_t)b * E, s, E, k, c->moe_score, coeff / B, (double)s * cp, dscale);
    return loss;
}

/* The forward of T tokens xf (T, h) into out (T, h), keeping in a what the backward needs (s:
 * the slot's scratch, for the exchange under expert parallelism; NULL without). ld: the layer's
 * LoRA dropout (NULL: none). */
static void forward(const gpt_model *m, moe_acts *a, moe_scratch *s, const moe_params *p, float *out, const float *xf,
                    int T, const be_drop *ld)
{
    const gpt_config *c = &m->cfg;
    /* under tensor parallelism every tp rank routes the same tokens alike and runs its slice of
     * every expert: the outputs are partial sums, summed over tp by the layer (sequence
     * parallelism's reduce-scatter) or here (all-reduce); fc2's biases on tp rank 0 only */
    int h = c->hidden, E = c->num_experts, k = c->moe_topk, F = gpt_moe_ffn(c) / expert_tp(m), bF = gpt_fc_blocks(c) * F;
    int first = m->ps->tp_rank == 0, bias_here = first || whole_experts(m); /* whole experts: each its own */
    int expert_lora = moe_has_expert_lora(p);
    const lora_scratch *ls = s ? &s->lora : &a->lora; /* a micro-batch's, or generation's step's */
    be_matmul_fwd(m->be, a->logits, xf, p->router_w, NULL, T, h, E);
    be_moe_route_fwd(m->be, a->idx, a->probs, a->logits, p->expert_bias, T, E, k, c->moe_score, c->moe_pre_softmax,
                     c->moe_topk_scale);
    dispatch_map(m, a, T);
    a->near_ties = count_near_ties(a, p, c, T);
    memcpy(a->aux_count, a->routed, (size_t)E * sizeof *a->aux_count);
    if (p->expert_bias) { /* the load-balancing loss counts the unbiased choice (host memory: the CPU backend's) */
        be_moe_route_fwd(m->be, a->aux_idx, a->aux_probs, a->logits, NULL, T, E, k, c->moe_score, c->moe_pre_softmax, 0);
        memset(a->aux_count, 0, (size_t)E * sizeof *a->aux_count);
        for (int i = 0; i < T * k; i++) a->aux_count[a->aux_idx[i]]++;
    }
    if (c->moe_pad) be_zero(m->be, a->xe, (size_t)src_rows(c, T, cp_of(m)) * h); /* the padding rows */
    be_moe_permute(m->be, a->xe, xf, a->row, T, k, h);
    int ep = ep_of(m), El = local_experts(m), eb = expert_base(m), Etp = whole_experts(m) ? E / m->tp : E;
    size_t ob = 0; /* the rows of this tp rank's experts start there (host memory: the CPU backend's) */
    for (int e = 0; e < eb; e++) ob += (size_t)a->count[e];
    if (a->rowm)
        for (int i = 0; i < T * k; i++) a->rowm[i] = a->idx[i] >= eb && a->idx[i] < eb + Etp ? a->row[i] : -1;
    const float *xl = a->xe + ob * h;
    float *yl = a->ye + ob * h;
    int gather = ep > 1 && c->moe_allgather;
    if (gather) { /* every token to every rank of the group */
        gather_dispatch(m, a, s, xf, T);
        xl = a->xl, yl = a->ye;
    } else if (ep > 1) { /* the rows to the ranks of their experts */
        exchange_counts(m, a);
        to_experts(m, a, s->xchg, a->xl, a->xe + ob * h, h);
        xl = a->xl, yl = s->yl;
    } else {
        memcpy(a->lcount, a->count + eb, (size_t)El * sizeof *a->lcount);
    }
    if (expert_lora && ld && ld->p != 0.0f) expert_row_tokens(m, a, s, ld->sample, T, ob);
    if (c->moe_grouped || expert_lora) { /* the experts' GEMMs, their adapters' terms added */
        int nl = 0;
        for (int e = 0; e < El; e++) nl += a->lcount[e];
        if (c->moe_grouped) {
            be_matmul_grouped_fwd(m->be, a->he, xl, p->fc_w, p->fc_b, a->lcount, El, h, bF);
        } else {
            for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++])
                if (a->lcount[e])
                    be_matmul_fwd(m->be, a->he + (size_t)r0 * bF, xl + (size_t)r0 * h, p->fc_w + (size_t)e * bF * h,
                                  p->fc_b ? p->fc_b + (size_t)e * bF : NULL, a->lcount[e], h, bF);
        }
        moe_expert_lora_fc_fwd(m, a, ls, p, a->he, xl, El, F, ld);
        be_act_fwd(m->be, c->act, c->glu, a->ae, a->he, nl, F);
        if (c->moe_grouped) {
            be_matmul_grouped_fwd(m->be, yl, a->ae, p->fc2_w, bias_here ? p->fc2_b : NULL, a->lcount, El, F, h);
        } else {
            for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++])
                if (a->lcount[e])
                    be_matmul_fwd(m->be, yl + (size_t)r0 * h, a->ae + (size_t)r0 * F, p->fc2_w + (size_t)e * h * F,
                                  p->fc2_b && bias_here ? p->fc2_b + (size_t)e * h : NULL, a->lcount[e], F, h);
        }
        moe_expert_lora_fc2_fwd(m, a, ls, p, yl, a->ae, El, F, ld);
    }
    for (int e = 0, r0 = 0; e < El && !c->moe_grouped && !expert_lora; r0 += a->lcount[e++]) { /* this rank's experts, e local */
        int n = a->lcount[e];
        if (n == 0) continue;
        mlp_fwd(m, yl + (size_t)r0 * h, a->ae + (size_t)r0 * F, a->he + (size_t)r0 * bF, xl + (size_t)r0 * h,
                p->fc_w + (size_t)e * bF * h, p->fc_b ? p->fc_b + (size_t)e * bF : NULL, p->fc2_w + (size_t)e * h * F,
                p->fc2_b && bias_here ? p->fc2_b + (size_t)e * h : NULL, n, F);
    }
    if (gather) { /* this rank's experts' share of every gathered token's output, summed over the group */
        be_moe_unpermute(m->be, s->gbuf, a->ye, a->grow, a->gprobs, ep * T, k, h);
        xfer_reduce_scatter(m->be, m->ps->ep_group, s->gbuf, out, (size_t)T * h, COMM_F32, COMM_SUM);
    } else {
        if (ep > 1) from_experts(m, a, s->xchg, a->ye + ob * h, yl, h); /* the outputs back, in xe's order */
        be_moe_unpermute(m->be, out, a->ye, rows_here(a), a->probs, T, k, h);
    }
    if (c->moe_shared_ffn > 0) { /* the shared expert on every token, gated or not, added */
        if (moe_has_shared_lora(p))
            moe_shared_lora_fwd(m, a, ls, p, xf, first ? p->sh_fc2_b : NULL, T, c->moe_shared_ffn / m->tp, ld);
        else
            mlp_fwd(m, a->sh_ye, a->sh_ae, a->sh_he, xf, p->sh_fc_w, p->sh_fc_b, p->sh_fc2_w,
                    first ? p->sh_fc2_b : NULL, T, c->moe_shared_ffn / m->tp);
        if (p->sh_gate_w) { /* sigmoid(w . x): a router of one expert, its weight not normalised */
            be_matmul_fwd(m->be, a->sh_glog, xf, p->sh_gate_w, NULL, T, h, 1);
            be_moe_route_fwd(m->be, a->sh_idx, a->sh_g, a->sh_glog, NULL, T, 1, 1, BE_MOE_SIGMOID, 0, 0);
            for (int t = 0; t < T; t++) a->ident[t] = t; /* host memory: the CPU backend's */
            be_moe_unpermute(m->be, a->sh_gy, a->sh_ye, a->ident, a->sh_g, T, 1, h);
            be_add(m->be, out, out, a->sh_gy, (size_t)T * h);
        } else {
            be_add(m->be, out, out, a->sh_ye, (size_t)T * h);
        }
    }
    if (m->tp > 1 && !m->sp) xfer_allreduce(m->be, m->ps->tp_group, out, (size_t)T * h, COMM_F32, COMM_SUM);
    /* the losses over this micro-batch's tokens, without their coefficients (as Megatron logs
     * them; measured whether they train or not); their gradients come in the backward */
    aux_counts(m, a, p->expert_bias ? a->aux_idx : a->idx, T);
    int cp = cp_of(m); /* the micro-batch's tokens: T on each of the cp ranks */
    a->aux = aux_loss(m, a, NULL, T, 1.0, 0);
    a->z = be_moe_z_loss(m->be, NULL, a->logits, T, E, 1.0, (double)T * cp, 0);
}

/* The block's input in fp32: as it is, or widened from the GEMMs' dtype (mixed precision keeps
 * the norm's output in it): the router and the dispatch read fp32, the GEMMs round it again. */
static const float *input_f32(const gpt_model *m, moe_acts *a, be_in x, int T)
{
    if (x.dt == BE_F32) return x.p;
    be_convert(m->be, a->x32, BE_F32, x.p, x.dt, (size_t)T * m->cfg.hidden);
    return a->x32;
}

static void fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    moe_acts *a = av;
    forward(io->m, a, io->scratch, pv, out, input_f32(io->m, a, x, io->B * io->m->seq_c), io->B * io->m->seq_c,
            &io->lora);
}

/* ---- generation's step: the forward of the new positions' tokens, nothing kept ---- */

/* The step's buffers: a micro-batch's carving for `rows` tokens (generation's carver is fp32: no
 * widened input). */
static void decode_scratch(carver *cv, const gpt_model *m, int rows, void *s)
{
    TD_ASSERT(ep_of(m) == 1); /* generation runs every expert on its one rank */
    carve_tokens(cv, &m->cfg, 1, expert_tp(m), m->tp, m->cfg.seq, 1, rows, s, 1);
}

static void decode(const block_io *io, void *st, const void *pv, float *out, be_in x, int pos, int n)
{
    (void)st, (void)pos;
    TD_ASSERT(x.dt == BE_F32);
    forward(io->m, io->scratch, NULL, pv, out, x.p, io->B * n, NULL);
}

/* Megatron's get_updated_expert_bias: each expert's bias moves by rate toward the experts under
 * the mean load, sign(mean - tokens[e]) (tokens: the iteration's, over the global batch). */
void moe_update_expert_bias(const gpt_config *c, const void *pv, const double *tokens)
{
    const moe_params *p = pv;
    int E = c->num_experts;
    double mean = 0;
    for (int e = 0; e < E; e++) mean += tokens[e] / E;
    for (int e = 0; e < E; e++) { /* host memory: the CPU backend's */
        double off = mean - tokens[e];
        p->expert_bias[e] += off > 0 ? c->moe_bias_rate : off < 0 ? -c->moe_bias_rate : 0.0f;
    }
}

/* Its statistics, a layer's numbers in this order: the load-balancing loss and the z-loss
 * without their coefficients (Megatron's logged values), the (token, expert) choices dropped over
 * capacity, the tokens routed to each expert, the tokens whose choice float noise could flip
 * (MOE_TIE), summed; then the busiest expert against the mean, derived from the tokens. */
static const block_stat moe_stats[] = {
    {"load_balancing_loss", 0, 0}, {"z_loss", 0, 0}, {"dropped", 0, 0},
    {"tokens", 1, 0},              {"near_ties", 0, 0}, {"load_max_mean", 0, 1},
};
enum { ST_AUX, ST_Z, ST_DROPPED, ST_TOKENS }; /* then near_ties at ST_TOKENS + E, load_max_mean next */

static void stats(const void *av, double *out)
{
    const moe_acts *a = av;
    out[ST_AUX] += a->aux;
    out[ST_Z] += a->z;
    out[ST_DROPPED] += a->dropped;
    for (int e = 0; e < a->E; e++) out[ST_TOKENS + e] += a->routed[e];
    out[ST_TOKENS + a->E] += a->near_ties;
}

/* The iteration's report: the two losses, a MoE layer's and a micro-batch's mean; each layer's
 * busiest expert against the mean, and the worst layer's; the share of the choices dropped over
 * capacity (with a capacity); the near ties over the layers; per layer the load and the tokens
 * routed to each expert. */
static int metrics(const gpt_config *c, double *sums, int L, const gpt_stats_scope *sc, gpt_metric *out, int max,
                   gpt_metric_array *arr, int *narr)
{
    int E = c->num_experts, n = E + 5, load = ST_TOKENS + E + 1;
    double aux = 0, z = 0, dropped = 0, near_ties = 0, worst = 0;
    for (int l = 0; l < L; l++) {
        double *s = sums + (size_t)l * n, total = 0, most = 0;
        aux += s[ST_AUX], z += s[ST_Z], dropped += s[ST_DROPPED];
        near_ties += s[ST_TOKENS + E];
        for (int e = 0; e < E; e++) total += s[ST_TOKENS + e], most = s[ST_TOKENS + e] > most ? s[ST_TOKENS + e] : most;
        s[load] = total > 0 ? most / (total / E) : 0;
        worst = s[load] > worst ? s[load] : worst;
    }
    TD_ASSERT(max >= 5 && *narr + 2 <= GPT_MAX_ARRAYS);
    int k = 0;
    out[k++] = (gpt_metric){"load_balancing_loss", "load balancing loss", "%.4f", aux / (L * sc->micro_batches)};
    out[k++] = (gpt_metric){"z_loss", "z loss", "%.4E", z / (L * sc->micro_batches)};
    out[k++] = (gpt_metric){"expert_load_max_mean", "expert load max/mean", "%.2f", worst};
    if (c->moe_capacity > 0)
        out[k++] = (gpt_metric){"dropped_tokens", "dropped", "%.4f", dropped / ((double)L * sc->samples * c->seq * c->moe_topk)};
    out[k++] = (gpt_metric){"router_near_ties", "near ties", "%.0f", near_ties};
    arr[(*narr)++] = (gpt_metric_array){"expert_load_max_mean_per_layer", "%.6g", L, 1, n, 0, sums + load};
    arr[(*narr)++] = (gpt_metric_array){"tokens_per_expert", "%.0f", L, E, n, 1, sums + ST_TOKENS};
    return k;
}

static void stats_apply(const gpt_config *c, const void *params, const double *sums)
{
    if (c->moe_expert_bias) moe_update_expert_bias(c, params, sums + ST_TOKENS);
}

static void bwd(const block_io *io, float *dx, void *gv, const float *dbranch, const void *av, const void *pv, be_in x)
{
    const gpt_model *m = io->m;
    const gpt_config *c = &m->cfg;
    const moe_params *p = pv;
    moe_params *g = gv;
    const moe_acts *a = av;
    moe_scratch *s = io->scratch;
    int T = io->B * m->seq_c, h = c->hidden, E = c->num_experts, k = c->moe_topk, F = gpt_moe_ffn(c) / expert_tp(m);
    int bF = gpt_fc_blocks(c) * F;
    const float *xf = x.dt == BE_F32 ? (const float *)x.p : a->x32; /* the forward widened it there */
    /* tensor parallelism: the experts' outputs were partial, so are the weights' gradients through
     * them (summed over tp); the router's and the gate's input gradients, the same on every tp
     * rank, count once (tp rank 0; the others' go to a spare buffer) */
    const comm *tpg = m->tp > 1 ? m->ps->tp_group : NULL;
    int ep = ep_of(m), El = local_experts(m), nl = 0, gather = ep > 1 && c->moe_allgather;
    for (int e = 0; e < El; e++) nl += a->lcount[e];
    size_t ob = 0; /* this tp rank's experts' rows (whole experts split over tp) */
    for (int e = 0; e < expert_base(m); e++) ob += (size_t)a->count[e];
    const float *dyl = s->dye + ob * h, *xl = a->xe + ob * h;
    float *dxl = s->dxe + ob * h;
    if (gather) { /* the group's outputs' gradients; the weights' back to their tokens' ranks */
        xfer_allgather(m->be, m->ps->ep_group, dbranch, s->gbuf, (size_t)T * h, COMM_F32);
        if (c->moe_pad) be_zero(m->be, s->dyl, (size_t)nl * h);
        be_moe_unpermute_bwd(m->be, s->dyl, s->gdprobs, s->gbuf, a->ye, a->grow, a->gprobs, ep * T, k, h);
        xfer_reduce_scatter(m->be, m->ps->ep_group, s->gdprobs, s->dprobs, (size_t)T * k, COMM_F32, COMM_SUM);
        if (tpg) xfer_allreduce(m->be, tpg, s->dprobs, (size_t)T * k, COMM_F32, COMM_SUM);
        dyl = s->dyl, dxl = s->dxl, xl = a->xl;
    } else {
        if (c->moe_pad) be_zero(m->be, s->dye, (size_t)src_rows(c, T, cp_of(m)) * h); /* no gradient into the padding */
        be_moe_unpermute_bwd(m->be, s->dye, s->dprobs, dbranch, a->ye, rows_here(a), a->probs, T, k, h);
        if (tpg) xfer_allreduce(m->be, tpg, s->dprobs, (size_t)T * k, COMM_F32, COMM_SUM);
        if (ep > 1) { /* the outputs' gradients to the ranks of their experts, as the rows went */
            to_experts(m, a, s->xchg, s->dyl, s->dye + ob * h, h);
            dyl = s->dyl, dxl = s->dxl, xl = a->xl;
        }
    }
    be_zero(m->be, dxl, (size_t)nl * h);
    int expert_lora = moe_has_expert_lora(p);
    if (c->moe_grouped || expert_lora) { /* the adapters' gradients after each GEMM's */
        be_zero(m->be, s->dae, (size_t)nl * F);
        if (c->moe_grouped) {
            be_matmul_grouped_bwd(m->be, s->dae, g->fc2_w, g->fc2_b, dyl, a->ae, p->fc2_w, a->lcount, El, F, h);
        } else {
            for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++])
                if (a->lcount[e])
                    be_matmul_bwd(m->be, s->dae + (size_t)r0 * F, g->fc2_w ? g->fc2_w + (size_t)e * h * F : NULL,
                                  g->fc2_b ? g->fc2_b + (size_t)e * h : NULL, dyl + (size_t)r0 * h,
                                  a->ae + (size_t)r0 * F, p->fc2_w + (size_t)e * h * F, a->lcount[e], F, h);
        }
        moe_expert_lora_fc2_bwd(m, a, &s->lora, p, g, s->dae, dyl, El, F, &io->lora);
        be_zero(m->be, s->dhe, (size_t)nl * bF);
        be_act_bwd(m->be, c->act, c->glu, s->dhe, s->dae, a->he, nl, F);
        if (c->moe_grouped) {
            be_matmul_grouped_bwd(m->be, dxl, g->fc_w, g->fc_b, s->dhe, xl, p->fc_w, a->lcount, El, h, bF);
        } else {
            for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++])
                if (a->lcount[e])
                    be_matmul_bwd(m->be, dxl + (size_t)r0 * h, g->fc_w ? g->fc_w + (size_t)e * bF * h : NULL,
                                  g->fc_b ? g->fc_b + (size_t)e * bF : NULL, s->dhe + (size_t)r0 * bF,
                                  xl + (size_t)r0 * h, p->fc_w + (size_t)e * bF * h, a->lcount[e], h, bF);
        }
        moe_expert_lora_fc_bwd(m, a, &s->lora, p, g, dxl, s->dhe, xl, El, F, &io->lora);
    }
    for (int e = 0, r0 = 0; e < El && !c->moe_grouped && !expert_lora; r0 += a->lcount[e++]) {
        int n = a->lcount[e];
        if (n == 0) continue;
        size_t rh = (size_t)r0 * h, rf = (size_t)r0 * F, rb = (size_t)r0 * bF;
        /* a gradient NULL: the experts frozen (LoRA on the attention) */
        mlp_bwd(m, dxl + rh, g->fc_w ? g->fc_w + (size_t)e * bF * h : NULL, g->fc_b ? g->fc_b + (size_t)e * bF : NULL,
                g->fc2_w ? g->fc2_w + (size_t)e * h * F : NULL, g->fc2_b ? g->fc2_b + (size_t)e * h : NULL,
                s->dae + rf, s->dhe + rb,
                dyl + rh, xl + rh, a->he + rb, a->ae + rf, p->fc_w + (size_t)e * bF * h,
                p->fc2_w + (size_t)e * h * F, n, F);
    }
    if (ep > 1 && !gather) from_experts(m, a, s->xchg, s->dxe + ob * h, s->dxl, h); /* the inputs' gradients back */
    /* the input's gradient is overwritten (a branch kind), then the router's adds to it */
    if (gather) { /* the group's inputs' partial gradients, summed to their ranks */
        be_zero(m->be, s->gbuf, (size_t)ep * T * h);
        be_moe_permute_bwd(m->be, s->gbuf, dxl, a->grow, ep * T, k, h);
        xfer_reduce_scatter(m->be, m->ps->ep_group, s->gbuf, dx, (size_t)T * h, COMM_F32, COMM_SUM);
    } else {
        be_zero(m->be, dx, (size_t)T * h);
        be_moe_permute_bwd(m->be, dx, s->dxe, rows_here(a), T, k, h);
    }
    float *dx_once = !tpg || m->ps->tp_rank == 0 ? dx : s->dye; /* s->dye: done with, T k >= T rows */
    if (c->moe_shared_ffn > 0) {
        const float *dsh = dbranch;
        if (p->sh_gate_w) { /* d(gated) -> d(shared output), and the gate's logit's gradient */
            be_moe_unpermute_bwd(m->be, s->sh_dye, s->sh_dg, dbranch, a->sh_ye, a->ident, a->sh_g, T, 1, h);
            if (tpg) xfer_allreduce(m->be, tpg, s->sh_dg, (size_t)T, COMM_F32, COMM_SUM);
            be_zero(m->be, s->sh_dglog, (size_t)T);
            be_moe_route_bwd(m->be, s->sh_dglog, s->sh_dg, a->sh_glog, a->sh_idx, T, 1, 1, BE_MOE_SIGMOID, 0, 0);
            be_matmul_bwd(m->be, dx_once, g->sh_gate_w, NULL, s->sh_dglog, xf, p->sh_gate_w, T, h, 1);
            dsh = s->sh_dye;
        }
        if (moe_has_shared_lora(p))
            moe_shared_lora_bwd(m, a, s, p, g, dx, dsh, xf, T, c->moe_shared_ffn / m->tp, &io->lora);
        else
            mlp_bwd(m, dx, g->sh_fc_w, g->sh_fc_b, g->sh_fc2_w, g->sh_fc2_b, s->sh_dae, s->sh_dhe, dsh, xf, a->sh_he,
                    a->sh_ae, p->sh_fc_w, p->sh_fc2_w, T, c->moe_shared_ffn / m->tp);
    }
    be_zero(m->be, s->dlogits, (size_t)T * E);
    be_moe_route_bwd(m->be, s->dlogits, s->dprobs, a->logits, a->idx, T, E, k, c->moe_score, c->moe_pre_softmax,
                     c->moe_topk_scale);
    /* each loss is this micro-batch's, counted as the language-model loss's tokens are: the
     * gradient of loss_scale per token, T tokens (T cp: the micro-batch's over its cp ranks, each
     * holding its share of the loss) */
    int cp = cp_of(m);
    float dscale = m->loss_scale * (float)T * (float)cp;
    if (c->moe_aux_coeff > 0) aux_loss(m, (moe_acts *)a, s->dlogits, T, c->moe_aux_coeff, dscale);
    if (c->moe_z_coeff > 0) be_moe_z_loss(m->be, s->dlogits, a->logits, T, E, c->moe_z_coeff, (double)T * cp, dscale);
    be_matmul_bwd(m->be, dx_once, g->router_w, NULL, s->dlogits, xf, p->router_w, T, h, E);
    if (tpg && !m->sp) xfer_allreduce(m->be, tpg, dx, (size_t)T * h, COMM_F32, COMM_SUM); /* f's backward */
}

const block_ops moe_ops = {
    .name = "MoE MLP", .params_size = sizeof(moe_params), .acts_size = sizeof(moe_acts),
    .scratch_size = sizeof(moe_scratch), .tensors = tensors, .acts = acts, .scratch = scratch, .fwd = fwd, .bwd = bwd,
    .stat_list = moe_stats, .nstat = sizeof moe_stats / sizeof moe_stats[0], .stats = stats, .metrics = metrics,
    .stats_apply = stats_apply, .decode_scratch_size = sizeof(moe_acts), .decode_scratch = decode_scratch,
    .decode = decode,
};
