/* Attention block under tensor parallelism (after Megatron): the QKV projection column-parallel
 * (each rank computes the queries of its n/t heads and the keys and values of its g/t groups),
 * rotary positions on the local heads, the core (causal, or BERT's bidirectional one over each
 * sample's unpadded keys) (query head i reads key/value group
 * i / (n/g)), output projection row-parallel. Multi-head attention keeps one fused qkv weight
 * ([q | k | v] blocks, GPT-2's layout); grouped-query attention a q and a kv weight. */
#include "model_impl.h"

#include <stdio.h>

#include "tensor_parallel.h"

void attn_tensors(table_builder *tb, int layer, attn_params *p, attn_params *g)
{
    const gpt_config *c = &tb->m->cfg;
    int64_t h = c->hidden, q = gpt_q_width(c), kv = gpt_kv_width(c);
    int qkv_bias = gpt_has_qkv_bias(c);
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                                   \
    do {                                                                                                      \
        snprintf(n, sizeof n, "layers.%d.attn.%s", layer, label);                                             \
        model_add_tensor(tb, &p->field, &g->field, init, model_stream(layer, kind), n, d0, d1, sd, blocks, nd); \
    } while (0)
    /* reverse of the order the backward finishes them */
    if (gpt_has_bias(c)) T(proj_b, INIT_ZEROS, 7, h, 0, -1, 1, 1, "proj.bias");
    T(proj_w, INIT_NORMAL_OUT, 8, h, q, 1, 1, 0, "proj.weight");
    if (gpt_gqa(c)) {
        if (qkv_bias) T(kv_b, INIT_ZEROS, 13, 2 * kv, 0, 0, 2, 1, "kv.bias");
        T(kv_w, INIT_NORMAL, 14, 2 * kv, h, 0, 2, 0, "kv.weight");
        if (qkv_bias) T(qkv_b, INIT_ZEROS, 9, q, 0, 0, 1, 1, "q.bias");
        T(qkv_w, INIT_NORMAL, 10, q, h, 0, 1, 0, "q.weight");
    } else {
        if (qkv_bias) T(qkv_b, INIT_ZEROS, 9, 3 * q, 0, 0, 3, 1, "qkv.bias");
        T(qkv_w, INIT_NORMAL, 10, 3 * q, h, 0, 3, 0, "qkv.weight");
    }
#undef T
}

void attn_acts_carve(carver *cv, const gpt_model *m, attn_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->cfg.seq;
    int gqa = gpt_gqa(&m->cfg);
    CARVE(cv, a->q, float, BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) CARVE(cv, a->kv, float, BT * 2 * m->kv_l);
    if (cv->skip_attn_core) return;
    model_carve_kept(cv, m, &a->atty, BT * m->q_l, 1, "atty");
    CARVE(cv, a->lse, float, (int64_t)m->mbs * m->heads_l * m->cfg.seq);
}

/* Where q, k and v sit in a buffer pair laid out as the activations (or their gradients). */
typedef struct {
    float *q, *k, *v;
    int ldq, ldkv;
} qkv_view;

static qkv_view view_of(const gpt_model *m, float *q, float *kv)
{
    qkv_view w;
    w.q = q;
    if (gpt_gqa(&m->cfg)) {
        w.k = kv;
        w.v = kv + m->kv_l;
        w.ldq = m->q_l;
        w.ldkv = 2 * m->kv_l;
    } else {
        w.k = q + m->q_l;
        w.v = q + 2 * m->q_l;
        w.ldq = w.ldkv = 3 * m->q_l;
    }
    return w;
}

void attn_core_fwd(gpt_model *m, const attn_acts *a, int B, const int32_t *klen, const be_drop *d_att)
{
    qkv_view w = view_of(m, a->q, a->kv);
    be_attention_fwd_masked(m->be, model_kept_stage(m, &a->atty), a->lse, w.q, w.k, w.v, w.ldq, w.ldkv, B,
                            m->cfg.seq, m->heads_l, m->groups_l, gpt_head_dim(&m->cfg), klen, d_att);
    model_kept_done(m, &a->atty, (size_t)B * m->cfg.seq * m->q_l);
}

void attn_fwd(gpt_model *m, attn_acts *a, const attn_params *p, float *out, be_in x, int B, const int32_t *klen,
              const be_drop *d_att)
{
    const gpt_config *c = &m->cfg;
    const comm *tp = model_tp_reduce(m);
    int T = c->seq, BT = B * T, h = c->hidden, d = gpt_head_dim(c), rot = gpt_rotary_dims(c);
    int gqa = gpt_gqa(c);
    tp_column_linear_fwd(m->be, tp, a->q, x, p->qkv_w, p->qkv_b, BT, h, gqa ? m->q_l : 3 * m->q_l);
    if (gqa) tp_column_linear_fwd(m->be, tp, a->kv, x, p->kv_w, p->kv_b, BT, h, 2 * m->kv_l);
    qkv_view w = view_of(m, a->q, a->kv);
    if (rot) {
        be_rope_fwd(m->be, w.q, B, T, w.ldq, m->heads_l, d, rot, gpt_rotary_base(c), 0);
        be_rope_fwd(m->be, w.k, B, T, w.ldkv, m->groups_l, d, rot, gpt_rotary_base(c), 0);
    }
    attn_core_fwd(m, a, B, klen, d_att);
    tp_row_linear_fwd(m->be, tp, out, model_kept_in(&a->atty), p->proj_w, BT, m->q_l, h);
}

void attn_bwd(gpt_model *m, float *dx, attn_params *g, const float *dbranch, const attn_acts *a, const attn_params *p,
              be_in x, int B, const int32_t *klen, const be_drop *d_att)
{
    const gpt_config *c = &m->cfg;
    const backend *be = m->be;
    const comm *tp = model_tp_reduce(m);
    struct gpt_scratch *s = m->scratch;
    int T = c->seq, BT = B * T, h = c->hidden, d = gpt_head_dim(c), rot = gpt_rotary_dims(c);
    int gqa = gpt_gqa(c);
    if (g->proj_b) be_bias_bwd(be, g->proj_b, dbranch, BT, h);
    be_zero(be, s->datty, (size_t)BT * m->q_l);
    tp_row_linear_bwd(be, tp, s->datty, g->proj_w, dbranch, model_kept_in(&a->atty), p->proj_w, BT, m->q_l, h);
    be_zero(be, s->dqkv, (size_t)BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) be_zero(be, s->dkv, (size_t)BT * 2 * m->kv_l);
    qkv_view w = view_of(m, a->q, a->kv), dw = view_of(m, s->dqkv, s->dkv);
    be_attention_bwd_masked(be, dw.q, dw.k, dw.v, s->datty, w.q, w.k, w.v, a->lse, w.ldq, w.ldkv, B, T, m->heads_l,
                            m->groups_l, d, klen, d_att);
    if (rot) {
        /* back through the rotation: the gradients of the projections' outputs */
        be_rope_bwd(be, dw.q, B, T, dw.ldq, m->heads_l, d, rot, gpt_rotary_base(c), 0);
        be_rope_bwd(be, dw.k, B, T, dw.ldkv, m->groups_l, d, rot, gpt_rotary_base(c), 0);
    }
    if (!gqa) {
        tp_column_linear_bwd(be, tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, p->qkv_w, BT, h, 3 * m->q_l);
        return;
    }
    /* two column-parallel projections of the same input: their input gradients add up */
    tp_column_linear_bwd(be, tp, dx, g->qkv_w, g->qkv_b, s->dqkv, x, p->qkv_w, BT, h, m->q_l);
    tp_column_linear_bwd(be, tp, s->dtmp, g->kv_w, g->kv_b, s->dkv, x, p->kv_w, BT, h, 2 * m->kv_l);
    be_add(be, dx, dx, s->dtmp, (size_t)BT * h);
}
