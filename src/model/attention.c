/* Attention block under tensor parallelism (after Megatron): the QKV projection column-parallel
 * (each rank computes the queries of its n/t heads and the keys and values of its g/t groups),
 * rotary positions on the local heads when the model has them, the core (causal, or
 * bidirectional over each sample's unpadded keys, or causal within each packed document)
 * (query head i reads key/value group i / (n/g)),
 * output projection row-parallel; the output bias is added by the layer (with dropout).
 * Multi-head attention keeps one fused qkv weight ([q | k | v] blocks, GPT-2's layout);
 * grouped-query attention a q and a kv weight. Selective recomputation keeps q, k, v and
 * redoes the core. Generation's step (decode) keeps each layer's keys and values in a cache and
 * attends the new positions to all of them (be_attention_kv_fwd). See block.h. */
#include "block.h"

#include <stdio.h>

#include "context_parallel.h"
#include "lora.h"
#include "tensor_parallel.h"

/* The rotary frequencies of c for the backend: the plain ones rounded as Hugging Face rounds them,
 * or gpt_rope_freqs' (rope scaling) rounded to float. */
static void rope_of(const gpt_config *c, be_rope *r)
{
    int rot = gpt_rotary_dims(c);
    TD_CHECK(rot / 2 <= BE_ROPE_MAX_HALF, "at most 512 rotated dims a head", "rotary dims %d", rot);
    if (c->rope_scaling == GPT_ROPE_NONE) {
        be_rope_plain(r, rot, gpt_rotary_base(c));
        return;
    }
    double inv[BE_ROPE_MAX_HALF];
    r->scale = (float)gpt_rope_freqs(c, inv);
    for (int i = 0; i < rot / 2; i++) r->inv_freq[i] = (float)inv[i];
}

typedef struct {
    float *q;      /* (BT, 3nd/t): [q | k | v] of the local heads, rotated; grouped-query
                    * attention: the queries only (BT, nd/t) */
    float *kv;     /* grouped-query attention: (BT, 2gd/t) [k | v] of the local groups */
    kept_buf atty; /* (BT, nd/t) */
    float *lse;    /* (B, n/t, s) */
    float *su[4];  /* LoRA's (BT, r) of q, k, v, o (GPT_LORA_*), where targeted */
} attn_acts;

typedef struct {
    float *dqkv;   /* (BT, 3nd/t); grouped-query attention: the queries', (BT, nd/t) */
    float *dkv;    /* grouped-query attention: (BT, 2gd/t) */
    float *datty;  /* (BT, nd/t) */
    lora_scratch lora;
    /* context parallelism (cp C > 1): the core's operands over every token with a C-th of the local
     * heads, (B, seq, ./C) = (BT, .) floats, BT this rank's tokens: q (and kv) as a->q (a->kv),
     * the core's output or its gradient (BT, nd/t), their gradients as dqkv (dkv); the
     * all-to-all's send and receive buffers */
    float *cp_q, *cp_kv, *cp_o, *cp_dq, *cp_dkv, *cp_send, *cp_recv;
    /* all_gather: every rank's key/value rows (C, BT, kv row) as this rank's (the fused [q | k | v]
     * rows, or [k | v]), their gradients, a block's output (BT, nd/t) and lse and the backward's D
     * (B, n/t, seq_c) */
    float *cp_g, *cp_dg, *cp_lse, *cp_D;
    /* p2p: cp_g and cp_dg hold two key/value blocks (the one attended, the one arriving) and two
     * of their gradients' accumulators */
} attn_scratch;

static void tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *pv, void *gv)
{
    attn_params *p = pv, *g = gv;
    const gpt_config *c = tb->cfg;
    int64_t h = c->hidden, q = gpt_q_width(c), kv = gpt_kv_width(c);
    int qkv_bias = gpt_has_qkv_bias(c);
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                                    \
    do {                                                                                                       \
        snprintf(n, sizeof n, "%s.%s", prefix, label);                                                         \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, stream0 + (kind)), n, d0, d1, sd, \
                         blocks, nd);                                                                          \
    } while (0)
    /* reverse of the order the backward finishes them */
    if (gpt_has_bias(c)) T(proj_b, INIT_ZEROS, 0, h, 0, -1, 1, 1, "proj.bias");
    T(proj_w, INIT_NORMAL_OUT, 1, h, q, 1, 1, 0, "proj.weight");
    if (gpt_gqa(c)) {
        if (qkv_bias) T(kv_b, INIT_ZEROS, 6, 2 * kv, 0, 0, 2, 1, "kv.bias");
        T(kv_w, INIT_NORMAL, 7, 2 * kv, h, 0, 2, 0, "kv.weight");
        if (qkv_bias) T(qkv_b, INIT_ZEROS, 2, q, 0, 0, 1, 1, "q.bias");
        T(qkv_w, INIT_NORMAL, 3, q, h, 0, 1, 0, "q.weight");
    } else {
        if (qkv_bias) T(qkv_b, INIT_ZEROS, 2, 3 * q, 0, 0, 3, 1, "qkv.bias");
        T(qkv_w, INIT_NORMAL, 3, 3 * q, h, 0, 3, 0, "qkv.weight");
    }
#undef T
    /* LoRA: q, k, v on the column-parallel projections, o on the row-parallel one */
    static const char *const mods[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int i = 3; i >= 0; i--) {
        if (!gpt_lora_on(c, GPT_LORA_Q + i)) continue;
        int r = c->lora_rank;
        int64_t w = i == 0 ? q : kv;
        snprintf(n, sizeof n, "%s.%s.lora_A.weight", prefix, mods[i]);
        model_add_adapter(tb, &p->lora_a[i], &g->lora_a[i], INIT_NORMAL, model_stream(layer, 32 + 2 * i), n, r,
                          i < 3 ? h : q, i < 3 ? -1 : 1, 1);
        snprintf(n, sizeof n, "%s.%s.lora_B.weight", prefix, mods[i]);
        model_add_adapter(tb, &p->lora_b[i], &g->lora_b[i], INIT_ZEROS, model_stream(layer, 33 + 2 * i), n,
                          i < 3 ? w : h, r, i < 3 ? 0 : -1, 1);
    }
}

/* LoRA's column modules (q, k, v): where module i's output lies in the fused outputs. */
typedef struct {
    float *out; /* the fused buffer (a->q or a->kv, or their gradients) */
    int off, w, ld;
} lora_place;

static lora_place place_of(const gpt_model *m, int i, float *q, float *kv)
{
    lora_place pl;
    if (gpt_gqa(&m->cfg)) {
        pl.out = i == 0 ? q : kv;
        pl.ld = i == 0 ? m->q_l : 2 * m->kv_l;
        pl.off = i == 2 ? m->kv_l : 0;
        pl.w = i == 0 ? m->q_l : m->kv_l;
    } else {
        pl.out = q;
        pl.ld = 3 * m->q_l;
        pl.off = i * m->q_l;
        pl.w = m->q_l;
    }
    return pl;
}

static lora_dims lora_dims_of(const gpt_model *m, int B, int T, int in, int out)
{
    lora_dims d = {B, T, in, out, m->cfg.lora_rank, gpt_lora_scaling(&m->cfg)};
    return d;
}

/* Where the caller sums the branch's output and input gradient over tp afterwards (sequence
 * parallelism's reduce-scatters): the adapters' whole terms are added on its rank 0 only. */
static const comm *lora_later(const gpt_model *m) { return m->sp ? m->ps->tp_group : NULL; }

/* Module i's dropout: the layer's, at its own site; the row-parallel o reads the local columns. */
static be_drop lora_drop(const gpt_model *m, const block_io *io, int i)
{
    be_drop d = io->lora;
    d.site += GPT_LORA_Q + i;
    if (i == 3) d.unit0 = m->ps->tp_rank * m->q_l;
    return d;
}

/* The LoRA scratch of this kind: the widest fused output and input over `rows` rows. */
static void lora_scratch_carve(carver *cv, const gpt_model *m, int64_t rows, lora_scratch *ls)
{
    if (!gpt_lora(&m->cfg)) return;
    int gqa = gpt_gqa(&m->cfg), r = m->cfg.lora_rank, h = m->cfg.hidden;
    int64_t ld = gqa ? (m->q_l > 2 * m->kv_l ? m->q_l : 2 * m->kv_l) : 3 * m->q_l;
    if (ld < h) ld = h;
    int64_t in = h > m->q_l ? h : m->q_l;
    float **f[LORA_SCRATCH_FIELDS] = {&ls->bw, &ls->dbw, &ls->tmp, &ls->xd, &ls->du, &ls->xf};
    for (int k = 0; k < LORA_SCRATCH_FIELDS; k++) CARVE(cv, *f[k], float, lora_scratch_floats(rows, ld, in, r, k));
}

/* The q, k, v adapters' forward into the fused outputs q (and kv) from x (rows = B T). */
static void lora_qkv_fwd(const gpt_model *m, const block_io *io, const attn_params *p, float *const su[3],
                         const lora_scratch *ls, float *q, float *kv, const float *x, int B, int T)
{
    lora_dims d = lora_dims_of(m, B, T, m->cfg.hidden, 0);
    for (int i = 0; i < 3; i++) {
        if (!p->lora_a[i]) continue;
        lora_place pl = place_of(m, i, q, kv);
        be_drop dr = lora_drop(m, io, i);
        lora_fused_fwd(m->be, pl.out, su[i], ls, x, p->lora_a[i], p->lora_b[i], pl.off, pl.w, pl.ld, &dr, &d);
    }
}

/* What selective recomputation redoes: the core's output and log-sum-exp. */
static void core_acts(carver *cv, const gpt_model *m, void *av)
{
    attn_acts *a = av;
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    model_carve_kept(cv, &a->atty, BT * m->q_l, 1, "atty");
    CARVE(cv, a->lse, float, (int64_t)m->mbs * m->heads_l * m->seq_c);
}

static void acts(carver *cv, const gpt_model *m, void *av)
{
    attn_acts *a = av;
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    int gqa = gpt_gqa(&m->cfg);
    CARVE(cv, a->q, float, BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) CARVE(cv, a->kv, float, BT * 2 * m->kv_l);
    for (int i = 0; i < 4; i++)
        if (gpt_lora_on(&m->cfg, GPT_LORA_Q + i)) CARVE(cv, a->su[i], float, BT * m->cfg.lora_rank);
    if (!cv->selective) core_acts(cv, m, a);
}

static void scratch(carver *cv, const gpt_model *m, void *sv)
{
    attn_scratch *s = sv;
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    int gqa = gpt_gqa(&m->cfg);
    CARVE(cv, s->dqkv, float, BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) CARVE(cv, s->dkv, float, BT * 2 * m->kv_l);
    CARVE(cv, s->datty, float, BT * m->q_l);
    lora_scratch_carve(cv, m, BT, &s->lora);
    if (m->cp > 1 && m->ps->cp_comm != PS_CP_A2A) {
        int64_t wkv = gqa ? 2 * m->kv_l : 3 * m->q_l, nl = (int64_t)m->mbs * m->heads_l * m->seq_c;
        int blocks = m->ps->cp_comm == PS_CP_P2P ? 2 : m->cp;
        CARVE(cv, s->cp_g, float, blocks * BT * wkv);
        CARVE(cv, s->cp_dg, float, blocks * BT * wkv);
        CARVE(cv, s->cp_o, float, BT * m->q_l);
        CARVE(cv, s->cp_lse, float, nl);
        CARVE(cv, s->cp_D, float, nl);
    } else if (m->cp > 1) {
        int64_t wq = gqa ? m->q_l : 3 * m->q_l, wmax = wq > 2 * m->kv_l ? wq : 2 * m->kv_l;
        CARVE(cv, s->cp_q, float, BT * wq);
        CARVE(cv, s->cp_dq, float, BT * wq);
        if (gqa) CARVE(cv, s->cp_kv, float, BT * 2 * m->kv_l);
        if (gqa) CARVE(cv, s->cp_dkv, float, BT * 2 * m->kv_l);
        CARVE(cv, s->cp_o, float, BT * m->q_l);
        CARVE(cv, s->cp_send, float, BT * wmax);
        CARVE(cv, s->cp_recv, float, BT * wmax);
    }
}

/* Where q, k and v sit in a buffer pair laid out as the activations (or their gradients). */
typedef struct {
    float *q, *k, *v;
    int ldq, ldkv;
} qkv_view;

/* ... with a C-th of the heads (context parallelism's gathered operands; C = 1: the layout itself). */
static qkv_view view_part(const gpt_model *m, float *q, float *kv, int C)
{
    qkv_view w;
    int ql = m->q_l / C, kvl = m->kv_l / C;
    w.q = q;
    if (gpt_gqa(&m->cfg)) {
        w.k = kv;
        w.v = kv + kvl;
        w.ldq = ql;
        w.ldkv = 2 * kvl;
    } else {
        w.k = q + ql;
        w.v = q + 2 * ql;
        w.ldq = w.ldkv = 3 * ql;
    }
    return w;
}

static qkv_view view_of(const gpt_model *m, float *q, float *kv) { return view_part(m, q, kv, 1); }

/* Context parallelism: this rank's tokens' q, k, v (rotated) to every token's, of a C-th of the
 * heads, in s->cp_q (and s->cp_kv). */
static void cp_gather_qkv(const gpt_model *m, attn_scratch *s, const float *q, const float *kv, int B)
{
    const comm *cp = m->ps->cp_group;
    int S = m->cfg.seq;
    if (gpt_gqa(&m->cfg)) {
        cp_a2a_to_heads(m->be, cp, s->cp_q, q, s->cp_send, s->cp_recv, B, S, 1, m->q_l);
        cp_a2a_to_heads(m->be, cp, s->cp_kv, kv, s->cp_send, s->cp_recv, B, S, 2, m->kv_l);
    } else {
        cp_a2a_to_heads(m->be, cp, s->cp_q, q, s->cp_send, s->cp_recv, B, S, 3, m->q_l);
    }
}

/* The attention probabilities' dropout on the gathered core: rows are the sequence's positions
 * from 0, the heads this rank's C-th of the local ones. */
static be_drop cp_core_drop(const gpt_model *m, const be_drop *d)
{
    be_drop dr = {0};
    if (!d) return dr;
    dr = *d;
    dr.pos0 = dr.cp_chunk = dr.cp_c0 = dr.cp_c1 = 0;
    dr.unit0 += m->cp_rank * (m->heads_l / m->cp);
    return dr;
}

/* all_gather: the key/value rows every rank holds, (C, B, seq_c, ld), k at koff and v at voff of
 * a row: the fused [q | k | v] rows, or grouped-query attention's [k | v]. */
typedef struct {
    const float *src;
    int ld, koff, voff;
} kv_rows;

static kv_rows kv_rows_of(const gpt_model *m, const attn_acts *a)
{
    if (gpt_gqa(&m->cfg)) return (kv_rows){a->kv, 2 * m->kv_l, 0, m->kv_l};
    return (kv_rows){a->q, 3 * m->q_l, m->q_l, 2 * m->q_l};
}

/* The attention probabilities' dropout as attention_fwd gets it on the whole sequence (the block
 * calls key each element by its global row and key). */
static be_drop whole_drop(const be_drop *d)
{
    be_drop dr = *d;
    dr.pos0 = dr.cp_chunk = dr.cp_c0 = dr.cp_c1 = 0;
    return dr;
}

/* The core under context parallelism, all_gather: every rank's keys and values gathered, this
 * rank's queries against each rank's block (block entries at global positions: causal, klen and
 * seg as on the whole sequence), the blocks' outputs merged exactly by their lse. */
static void ag_core_fwd(const block_io *io, attn_acts *a)
{
    const gpt_model *m = io->m;
    const backend *be = m->be;
    attn_scratch *s = io->scratch;
    int B = io->B, Tl = m->seq_c, d = gpt_head_dim(&m->cfg);
    kv_rows kv = kv_rows_of(m, a);
    size_t n = (size_t)B * Tl * kv.ld;
    be_drop dr = io->drop ? whole_drop(io->drop) : (be_drop){0};
    qkv_view w = view_of(m, a->q, a->kv);
    xfer_allgather(be, m->ps->cp_group, kv.src, s->cp_g, n, COMM_F32);
    float *out = kept_stage(&a->atty);
    const int32_t *qpos = m->cp_pos + (size_t)m->cp_rank * Tl;
    for (int j = 0; j < m->cp; j++) {
        const float *g = s->cp_g + j * n;
        be_attention_block_fwd(be, j ? s->cp_o : out, j ? s->cp_lse : a->lse, w.q, g + kv.koff, g + kv.voff, w.ldq,
                               kv.ld, B, Tl, Tl, m->cfg.seq, qpos, m->cp_pos + (size_t)j * Tl, m->heads_l, m->groups_l,
                               d, io->klen, io->seg, io->drop ? &dr : NULL);
        if (j) be_attention_merge(be, out, a->lse, s->cp_o, s->cp_lse, B, Tl, m->heads_l, d);
    }
    kept_done(be, &a->atty, (size_t)B * Tl * m->q_l);
}

/* Its backward: D from the merged output, each block's gradients (dq here, dk and dv into the
 * gathered buffer at the block's owner's place), the gathered gradients reduce-scattered back to
 * their owners. Without grouped-query attention dq lands in this rank's own place of the fused
 * gathered rows, whose q columns every other rank leaves 0: the reduce-scatter brings it home. */
static void ag_core_bwd(const block_io *io, const attn_acts *a)
{
    const gpt_model *m = io->m;
    const backend *be = m->be;
    attn_scratch *s = io->scratch;
    int B = io->B, Tl = m->seq_c, d = gpt_head_dim(&m->cfg), gqa = gpt_gqa(&m->cfg);
    kv_rows kv = kv_rows_of(m, a);
    size_t n = (size_t)B * Tl * kv.ld;
    be_drop dr = io->drop ? whole_drop(io->drop) : (be_drop){0};
    qkv_view w = view_of(m, a->q, a->kv);
    be_in out = kept_in(&a->atty); /* kept in the GEMMs' dtype under mixed precision: widened */
    if (out.dt != BE_F32) be_convert(be, s->cp_o, BE_F32, out.p, out.dt, (size_t)B * Tl * m->q_l);
    be_attention_delta(be, s->cp_D, s->datty, out.dt != BE_F32 ? s->cp_o : out.p, B, Tl, m->heads_l, d);
    xfer_allgather(be, m->ps->cp_group, kv.src, s->cp_g, n, COMM_F32);
    be_zero(be, s->cp_dg, (size_t)m->cp * n);
    float *dq = gqa ? s->dqkv : s->cp_dg + (size_t)m->cp_rank * n;
    const int32_t *qpos = m->cp_pos + (size_t)m->cp_rank * Tl;
    for (int j = 0; j < m->cp; j++) {
        const float *g = s->cp_g + j * n;
        float *dg = s->cp_dg + j * n;
        be_attention_block_bwd(be, dq, dg + kv.koff, dg + kv.voff, s->datty, w.q, g + kv.koff, g + kv.voff, a->lse,
                               s->cp_D, w.ldq, kv.ld, B, Tl, Tl, m->cfg.seq, qpos, m->cp_pos + (size_t)j * Tl,
                               m->heads_l, m->groups_l, d, io->klen, io->seg, io->drop ? &dr : NULL);
    }
    xfer_reduce_scatter(be, m->ps->cp_group, s->cp_dg, gqa ? s->dkv : s->dqkv, n, COMM_F32, COMM_SUM);
}

enum { CP_TAG_RING = 0x4360 }; /* + step (forward), + C + 2 step (+1) backward */

/* The core under context parallelism, p2p: the key/value blocks go round the ring, each step's
 * transfer posted before the attention of the block at hand (block j = rank - step mod C), the
 * blocks' outputs merged exactly by their lse. */
static void p2p_core_fwd(const block_io *io, attn_acts *a)
{
    const gpt_model *m = io->m;
    const backend *be = m->be;
    attn_scratch *s = io->scratch;
    int B = io->B, Tl = m->seq_c, d = gpt_head_dim(&m->cfg), C = m->cp, r = m->cp_rank;
    kv_rows kv = kv_rows_of(m, a);
    size_t n = (size_t)B * Tl * kv.ld;
    be_drop dr = io->drop ? whole_drop(io->drop) : (be_drop){0};
    qkv_view w = view_of(m, a->q, a->kv);
    float *out = kept_stage(&a->atty);
    const int32_t *qpos = m->cp_pos + (size_t)r * Tl;
    const float *cur = kv.src;
    for (int step = 0; step < C; step++) {
        float *next = s->cp_g + (size_t)(step % 2) * n;
        cp_ring_req q;
        if (step < C - 1) cp_ring_start(be, m->ps->cp_group, cur, next, n, CP_TAG_RING + step, &q);
        int j = (r - step + C) % C;
        be_attention_block_fwd(be, step ? s->cp_o : out, step ? s->cp_lse : a->lse, w.q, cur + kv.koff,
                               cur + kv.voff, w.ldq, kv.ld, B, Tl, Tl, m->cfg.seq, qpos, m->cp_pos + (size_t)j * Tl,
                               m->heads_l, m->groups_l, d, io->klen, io->seg, io->drop ? &dr : NULL);
        if (step) be_attention_merge(be, out, a->lse, s->cp_o, s->cp_lse, B, Tl, m->heads_l, d);
        if (step < C - 1) cp_ring_wait(be, &q);
        cur = next;
    }
    kept_done(be, &a->atty, (size_t)B * Tl * m->q_l);
}

/* Its backward: D once; the key/value blocks go round again with their dk, dv accumulators, each
 * rank adding its queries' part (dq stays here); after C steps each accumulator is one hop from
 * its block's owner: a last step sends it home, added into this rank's gradients. */
static void p2p_core_bwd(const block_io *io, const attn_acts *a)
{
    const gpt_model *m = io->m;
    const backend *be = m->be;
    attn_scratch *s = io->scratch;
    int B = io->B, Tl = m->seq_c, d = gpt_head_dim(&m->cfg), C = m->cp, r = m->cp_rank, gqa = gpt_gqa(&m->cfg);
    kv_rows kv = kv_rows_of(m, a);
    size_t n = (size_t)B * Tl * kv.ld;
    be_drop dr = io->drop ? whole_drop(io->drop) : (be_drop){0};
    qkv_view w = view_of(m, a->q, a->kv);
    be_in out = kept_in(&a->atty); /* kept in the GEMMs' dtype under mixed precision: widened */
    if (out.dt != BE_F32) be_convert(be, s->cp_o, BE_F32, out.p, out.dt, (size_t)B * Tl * m->q_l);
    be_attention_delta(be, s->cp_D, s->datty, out.dt != BE_F32 ? s->cp_o : out.p, B, Tl, m->heads_l, d);
    const int32_t *qpos = m->cp_pos + (size_t)r * Tl;
    const float *cur = kv.src;
    float *acc = s->cp_dg; /* the gradients of the block at hand: this rank's own first */
    be_zero(be, acc, n);
    for (int step = 0; step < C; step++) {
        int j = (r - step + C) % C;
        be_attention_block_bwd(be, s->dqkv, acc + kv.koff, acc + kv.voff, s->datty, w.q, cur + kv.koff, cur + kv.voff,
                               a->lse, s->cp_D, w.ldq, kv.ld, B, Tl, Tl, m->cfg.seq, qpos, m->cp_pos + (size_t)j * Tl,
                               m->heads_l, m->groups_l, d, io->klen, io->seg, io->drop ? &dr : NULL);
        float *nacc = s->cp_dg + (size_t)((step + 1) % 2) * n, *next = s->cp_g + (size_t)(step % 2) * n;
        cp_ring_req qa, qk;
        cp_ring_start(be, m->ps->cp_group, acc, nacc, n, CP_TAG_RING + C + 2 * step, &qa);
        if (step < C - 1) cp_ring_start(be, m->ps->cp_group, cur, next, n, CP_TAG_RING + C + 2 * step + 1, &qk);
        cp_ring_wait(be, &qa);
        if (step < C - 1) cp_ring_wait(be, &qk);
        acc = nacc, cur = next;
    }
    /* acc: this rank's own block's dk, dv from every rank (0 in the q columns of the fused rows) */
    if (gqa) be_copy(be, s->dkv, acc, n);
    else be_add(be, s->dqkv, s->dqkv, acc, n);
}

/* The core under context parallelism (a2a): on every token with a C-th of the heads (causal,
 * klen and seg read the whole sequence as without), its output back to this rank's tokens; lse
 * is kept in the gathered layout (B, n/t/C, seq). */
static void cp_core_fwd(const block_io *io, attn_acts *a)
{
    const gpt_model *m = io->m;
    attn_scratch *s = io->scratch;
    int C = m->cp, B = io->B, S = m->cfg.seq;
    be_drop dr = cp_core_drop(m, io->drop);
    cp_gather_qkv(m, s, a->q, a->kv, B);
    qkv_view w = view_part(m, s->cp_q, s->cp_kv, C);
    be_attention_fwd_seg(m->be, s->cp_o, a->lse, w.q, w.k, w.v, w.ldq, w.ldkv, B, S, m->heads_l / C,
                         m->groups_l / C, gpt_head_dim(&m->cfg), io->klen, io->seg, io->drop ? &dr : NULL);
    cp_a2a_to_seq(m->be, m->ps->cp_group, kept_stage(&a->atty), s->cp_o, s->cp_send, s->cp_recv, B, S, 1, m->q_l);
    kept_done(m->be, &a->atty, (size_t)B * m->seq_c * m->q_l);
}

/* Its backward: s->datty (this rank's tokens) to the gradients of this rank's tokens' q, k, v in
 * s->dqkv (and s->dkv), q, k, v gathered again. */
static void cp_core_bwd(const block_io *io, const attn_acts *a)
{
    const gpt_model *m = io->m;
    attn_scratch *s = io->scratch;
    const comm *cp = m->ps->cp_group;
    int C = m->cp, B = io->B, S = m->cfg.seq, gqa = gpt_gqa(&m->cfg);
    size_t BT = (size_t)B * m->seq_c;
    be_drop dr = cp_core_drop(m, io->drop);
    cp_gather_qkv(m, s, a->q, a->kv, B);
    cp_a2a_to_heads(m->be, cp, s->cp_o, s->datty, s->cp_send, s->cp_recv, B, S, 1, m->q_l);
    be_zero(m->be, s->cp_dq, BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) be_zero(m->be, s->cp_dkv, BT * 2 * m->kv_l);
    qkv_view w = view_part(m, s->cp_q, s->cp_kv, C), dw = view_part(m, s->cp_dq, s->cp_dkv, C);
    be_attention_bwd_seg(m->be, dw.q, dw.k, dw.v, s->cp_o, w.q, w.k, w.v, a->lse, w.ldq, w.ldkv, B, S,
                         m->heads_l / C, m->groups_l / C, gpt_head_dim(&m->cfg), io->klen, io->seg,
                         io->drop ? &dr : NULL);
    if (gqa) {
        cp_a2a_to_seq(m->be, cp, s->dqkv, s->cp_dq, s->cp_send, s->cp_recv, B, S, 1, m->q_l);
        cp_a2a_to_seq(m->be, cp, s->dkv, s->cp_dkv, s->cp_send, s->cp_recv, B, S, 2, m->kv_l);
    } else {
        cp_a2a_to_seq(m->be, cp, s->dqkv, s->cp_dq, s->cp_send, s->cp_recv, B, S, 3, m->q_l);
    }
}

/* The attention core alone: atty and lse from the kept (rotated) q, k, v. */
static void core_fwd(const block_io *io, void *av)
{
    const gpt_model *m = io->m;
    attn_acts *a = av;
    if (m->cp > 1) {
        if (m->ps->cp_comm == PS_CP_ALL_GATHER) ag_core_fwd(io, a);
        else if (m->ps->cp_comm == PS_CP_P2P) p2p_core_fwd(io, a);
        else cp_core_fwd(io, a);
        return;
    }
    qkv_view w = view_of(m, a->q, a->kv);
    be_out o = kept_out(m->be, &a->atty);
    be_attention_fwd_to(m->be, o, a->lse, w.q, w.k, w.v, w.ldq, w.ldkv, io->B, m->seq_c, m->heads_l, m->groups_l,
                        gpt_head_dim(&m->cfg), io->klen, io->seg, io->drop);
    kept_written(m->be, &a->atty, o, (size_t)io->B * m->seq_c * m->q_l);
}

static void fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    const gpt_config *c = &m->cfg;
    const attn_params *p = pv;
    attn_acts *a = av;
    const comm *tp = model_tp_reduce(m);
    int B = io->B, T = m->seq_c, BT = B * T, h = c->hidden, d = gpt_head_dim(c), rot = gpt_rotary_dims(c);
    int gqa = gpt_gqa(c);
    tp_column_linear_fwd(m->be, tp, a->q, x, p->qkv_w, p->qkv_b, BT, h, gqa ? m->q_l : 3 * m->q_l);
    if (gqa) tp_column_linear_fwd(m->be, tp, a->kv, x, p->kv_w, p->kv_b, BT, h, 2 * m->kv_l);
    attn_scratch *s = io->scratch;
    if (gpt_lora(c)) {
        lora_qkv_fwd(m, io, p, a->su, &s->lora, a->q, a->kv, lora_input(m->be, s->lora.xf, x, (size_t)BT * h), B, T);
    }
    qkv_view w = view_of(m, a->q, a->kv);
    if (rot) {
        be_rope r;
        rope_of(c, &r);
        be_rope_fwd_freq(m->be, w.q, B, T, w.ldq, m->heads_l, d, rot, &r, 0, io->pos);
        be_rope_fwd_freq(m->be, w.k, B, T, w.ldkv, m->groups_l, d, rot, &r, 0, io->pos);
    }
    core_fwd(io, a);
    tp_row_linear_fwd(m->be, tp, out, kept_in(&a->atty), p->proj_w, BT, m->q_l, h);
    if (p->lora_a[3]) {
        lora_dims ld = lora_dims_of(m, B, T, m->q_l, h);
        be_drop dr = lora_drop(m, io, 3);
        const float *atty = lora_input(m->be, s->lora.xf, kept_in(&a->atty), (size_t)BT * m->q_l);
        lora_row_fwd(m->be, m->ps->tp_group, lora_later(m), out, a->su[3], s->lora.xd, s->lora.tmp, atty,
                     p->lora_a[3], p->lora_b[3], &dr, &ld);
    }
}

static void bwd(const block_io *io, float *dx, void *gv, const float *dbranch, const void *av, const void *pv,
                be_in x)
{
    const gpt_model *m = io->m;
    const gpt_config *c = &m->cfg;
    const backend *be = m->be;
    const attn_params *p = pv;
    attn_params *g = gv;
    const attn_acts *a = av;
    attn_scratch *s = io->scratch;
    const comm *tp = model_tp_reduce(m);
    int B = io->B, T = m->seq_c, BT = B * T, h = c->hidden, d = gpt_head_dim(c), rot = gpt_rotary_dims(c);
    int gqa = gpt_gqa(c);
    if (g->proj_b) be_bias_bwd(be, g->proj_b, dbranch, BT, h);
    be_zero(be, s->datty, (size_t)BT * m->q_l);
    tp_row_linear_bwd(be, tp, s->datty, g->proj_w, dbranch, kept_in(&a->atty), p->proj_w, BT, m->q_l, h);
    if (p->lora_a[3]) { /* before dbranch's buffer is reused below */
        lora_dims ld = lora_dims_of(m, B, T, m->q_l, h);
        be_drop dr = lora_drop(m, io, 3);
        const float *atty = lora_input(be, s->lora.xf, kept_in(&a->atty), (size_t)BT * m->q_l);
        if (dr.p != 0.0f) be_dropout_fwd(be, s->lora.xd, atty, B, T, m->q_l, &dr); /* the forward's mask again */
        lora_row_bwd(be, s->datty, g->lora_a[3], g->lora_b[3], s->lora.du, s->lora.tmp, dbranch, atty, s->lora.xd,
                     a->su[3], p->lora_a[3], p->lora_b[3], &dr, &ld);
    }
    be_zero(be, s->dqkv, (size_t)BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) be_zero(be, s->dkv, (size_t)BT * 2 * m->kv_l);
    qkv_view w = view_of(m, a->q, a->kv), dw = view_of(m, s->dqkv, s->dkv);
    if (m->cp > 1 && m->ps->cp_comm == PS_CP_ALL_GATHER)
        ag_core_bwd(io, a);
    else if (m->cp > 1 && m->ps->cp_comm == PS_CP_P2P)
        p2p_core_bwd(io, a);
    else if (m->cp > 1)
        cp_core_bwd(io, a);
    else
        be_attention_bwd_out(be, dw.q, dw.k, dw.v, s->datty, kept_in(&a->atty), w.q, w.k, w.v, a->lse, w.ldq,
                             w.ldkv, B, T, m->heads_l, m->groups_l, d, io->klen, io->seg, io->drop);
    if (rot) {
        /* back through the rotation: the gradients of the projections' outputs */
        be_rope r;
        rope_of(c, &r);
        be_rope_bwd_freq(be, dw.q, B, T, dw.ldq, m->heads_l, d, rot, &r, 0, io->pos);
        be_rope_bwd_freq(be, dw.k, B, T, dw.ldkv, m->groups_l, d, rot, &r, 0, io->pos);
    }
    if (!gqa) {
        tp_column_linear_bwd(be, tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, p->qkv_w, BT, h, 3 * m->q_l);
    } else {
        /* two column-parallel projections of the same input: their input gradients add up */
        float *dx2 = m->scratch->dtmp;
        tp_column_linear_bwd(be, tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, p->qkv_w, BT, h, m->q_l);
        tp_column_linear_bwd(be, tp, dx2, g->kv_w, g->kv_b, s->dkv, x, p->kv_w, BT, h, 2 * m->kv_l);
        be_add(be, dx, dx, dx2, (size_t)BT * h);
    }
    lora_dims ld = lora_dims_of(m, B, T, h, 0);
    const float *xf = gpt_lora(c) ? lora_input(be, s->lora.xf, x, (size_t)BT * h) : NULL;
    for (int i = 0; i < 3; i++) { /* the adapters' input gradient, whole (summed over tp): after dx's reduction */
        if (!p->lora_a[i]) continue;
        lora_place pl = place_of(m, i, s->dqkv, s->dkv);
        be_drop dr = lora_drop(m, io, i);
        lora_fused_bwd(be, m->ps->tp_group, lora_later(m), dx, g->lora_a[i], g->lora_b[i], &s->lora, pl.out, xf,
                       a->su[i], p->lora_a[i], p->lora_b[i], pl.off, pl.w, pl.ld, &dr, &ld);
    }
}

static const float *out_bias(const void *p) { return ((const attn_params *)p)->proj_b; }

/* ---- generation's step: the new positions' keys and values appended to the layer's cache ---- */

typedef struct {
    float *k, *v; /* (B, cap, kv width): the keys (rotated) and values of every position so far */
    int cap;
} attn_decode_state;

typedef struct {
    float *q;     /* (rows, 3nd/t) [q | k | v], grouped-query attention (rows, nd/t) */
    float *kv;    /* grouped-query attention: (rows, 2gd/t) */
    float *atty;  /* (rows, nd/t) */
    float *su[4]; /* LoRA: (rows, r) */
    lora_scratch lora;
} attn_decode_scratch;

/* Width of a position's key (or value) row on this rank. */
static int kv_width(const gpt_model *m) { return gpt_gqa(&m->cfg) ? m->kv_l : m->q_l; }

static void decode_state(carver *cv, const gpt_model *m, int B, int cap, void *sv)
{
    attn_decode_state *st = sv;
    st->cap = cap;
    CARVE(cv, st->k, float, (int64_t)B * cap * kv_width(m));
    CARVE(cv, st->v, float, (int64_t)B * cap * kv_width(m));
}

static void decode_scratch(carver *cv, const gpt_model *m, int rows, void *sv)
{
    attn_decode_scratch *s = sv;
    int gqa = gpt_gqa(&m->cfg);
    CARVE(cv, s->q, float, (int64_t)rows * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) CARVE(cv, s->kv, float, (int64_t)rows * 2 * m->kv_l);
    CARVE(cv, s->atty, float, (int64_t)rows * m->q_l);
    if (gpt_lora(&m->cfg)) {
        for (int i = 0; i < 4; i++) CARVE(cv, s->su[i], float, (int64_t)rows * m->cfg.lora_rank);
        lora_scratch_carve(cv, m, rows, &s->lora);
    }
}

static void decode(const block_io *io, void *sv, const void *pv, float *out, be_in x, int pos, int n)
{
    const gpt_model *m = io->m;
    const gpt_config *c = &m->cfg;
    const backend *be = m->be;
    const attn_params *p = pv;
    attn_decode_state *st = sv;
    attn_decode_scratch *s = io->scratch;
    const comm *tp = m->ps->tp_group; /* generation has no sequence parallelism */
    int B = io->B, rows = B * n, h = c->hidden, d = gpt_head_dim(c), rot = gpt_rotary_dims(c), gqa = gpt_gqa(c);
    int kvw = kv_width(m);
    tp_column_linear_fwd(be, tp, s->q, x, p->qkv_w, p->qkv_b, rows, h, gqa ? m->q_l : 3 * m->q_l);
    if (gqa) tp_column_linear_fwd(be, tp, s->kv, x, p->kv_w, p->kv_b, rows, h, 2 * m->kv_l);
    if (gpt_lora(c)) {
        lora_qkv_fwd(m, io, p, s->su, &s->lora, s->q, s->kv, lora_input(be, s->lora.xf, x, (size_t)rows * h), B, n);
    }
    qkv_view w = view_of(m, s->q, s->kv);
    if (rot) { /* from the step's first position */
        be_rope r;
        rope_of(c, &r);
        be_rope_fwd_freq(be, w.q, B, n, w.ldq, m->heads_l, d, rot, &r, pos, NULL);
        be_rope_fwd_freq(be, w.k, B, n, w.ldkv, m->groups_l, d, rot, &r, pos, NULL);
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            size_t src = ((size_t)b * n + i) * w.ldkv, dst = ((size_t)b * st->cap + pos + i) * kvw;
            be_memcpy(be, st->k + dst, w.k + src, (size_t)kvw * sizeof(float), BE_D2D);
            be_memcpy(be, st->v + dst, w.v + src, (size_t)kvw * sizeof(float), BE_D2D);
        }
    be_attention_kv_fwd(be, s->atty, w.q, st->k, st->v, w.ldq, B, n, pos, st->cap, m->heads_l, m->groups_l, d);
    tp_row_linear_fwd(be, tp, out, be_f32(s->atty), p->proj_w, rows, m->q_l, h);
    if (p->lora_a[3]) {
        lora_dims ld = lora_dims_of(m, B, n, m->q_l, h);
        lora_row_fwd(be, tp, NULL, out, s->su[3], NULL, s->lora.tmp, s->atty, p->lora_a[3], p->lora_b[3], NULL, &ld);
    }
}

const block_ops attention_ops = {
    .name = "attention", .params_size = sizeof(attn_params), .acts_size = sizeof(attn_acts),
    .scratch_size = sizeof(attn_scratch), .tensors = tensors, .acts = acts, .scratch = scratch, .fwd = fwd,
    .bwd = bwd, .recompute_acts = core_acts, .recompute = core_fwd, .out_bias = out_bias,
    .decode_size = sizeof(attn_decode_state), .decode_state = decode_state,
    .decode_scratch_size = sizeof(attn_decode_scratch), .decode_scratch = decode_scratch, .decode = decode,
};
