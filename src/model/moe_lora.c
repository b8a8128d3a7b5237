/* LoRA on the MoE block (see moe.c's header): each routed expert's adapters on its own rows after
 * its GEMMs, and the shared expert's, the dense MLP's adapters on its width. */
#include "moe_impl.h"

#include <stdlib.h>
#include <string.h>

#include "trident/check.h"

/* ---- LoRA on the experts: each expert's adapters on its own rows, after its GEMMs ----
 * An expert split over tp is a column-parallel fc and a row-parallel fc2 (lora.h); its outputs
 * and input gradients are partial sums over tp, summed by the layer, so the whole LoRA terms are
 * added on tp rank 0. A whole expert (--expert-tensor-parallel-size 1) is one rank's. */
static const comm *expert_tp_group(const gpt_model *m) { return expert_tp(m) > 1 ? m->ps->tp_group : NULL; }
/* An expert's n rows run as n samples of one position (the dropout's key, below). */
static lora_dims expert_lora_dims(const gpt_model *m, int n, int in, int out)
{
    lora_dims d = {n, 1, in, out, m->cfg.lora_rank, gpt_lora_scaling(&m->cfg)};
    return d;
}

/* --lora-dropout on the experts: the mask of an adapter's input on an expert's row is drawn by the
 * row's token (its sample's dataset index and its position in the sequence), the layer's module
 * (sites past the dense adapters', site_lora_experts) and the expert's global index, never by
 * which rank holds the expert or in what order its rows came: every ep/tp layout draws the same
 * masks. The backend's dropout keys (sample, position, unit): here the expert's rows are its
 * samples, each keyed by its token tok = sample seq + position (a->tok; unique while the dataset
 * has under 2^40 / seq samples), the position is the expert's global index, the unit the input
 * channel (down's input split over tp: this rank's columns from tp_rank F). ld: the layer's LoRA
 * dropout (NULL or p 0: none). */
static be_drop expert_drop(const gpt_model *m, const moe_acts *a, const be_drop *ld, int i, int e, int r0, int F)
{
    be_drop d = {0};
    if (!ld || ld->p == 0.0f) return d;
    d = *ld;
    int layer = (ld->site - site_lora(m, 0)) / GPT_LORA_NMODULES;
    d.site = site_lora_experts(m, layer) + i;
    d.sample = a->tok + r0;
    d.pos0 = expert_base(m) + (ep_of(m) > 1 ? m->ps->ep_rank : 0) * local_experts(m) + e;
    d.unit0 = i == 2 && expert_tp(m) > 1 ? m->ps->tp_rank * F : 0;
    d.cp_chunk = d.cp_c0 = d.cp_c1 = 0; /* the position is the expert's; the token's is in tok */
    return d;
}

/* gate (i 0) and up (1): their fused block of [gate | up] (up the whole fc ungated) */
static int expert_lora_off(const gpt_model *m, int i, int F) { return m->cfg.glu && i == 1 ? F : 0; }

/* he (rows, bF) += gate's and up's terms; rows as lcount, expert by expert (e local). */
void moe_expert_lora_fc_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p, float *he,
                            const float *xl, int El, int F, const be_drop *ld)
{
    int h = m->cfg.hidden, r = m->cfg.lora_rank, bF = gpt_fc_blocks(&m->cfg) * F;
    for (int i = 0; i < 2; i++) {
        if (!p->lora_a[i]) continue;
        for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++]) {
            if (a->lcount[e] == 0) continue;
            lora_dims d = expert_lora_dims(m, a->lcount[e], h, 0);
            be_drop dr = expert_drop(m, a, ld, i, e, r0, F);
            lora_fused_fwd(m->be, he + (size_t)r0 * bF, a->su[i] + (size_t)r0 * r, ls, xl + (size_t)r0 * h,
                           p->lora_a[i] + (size_t)e * r * h, p->lora_b[i] + (size_t)e * F * r,
                           expert_lora_off(m, i, F), F, bF, &dr, &d);
        }
    }
}

/* yl (rows, h) += down's term of the activations ae (rows, F). */
void moe_expert_lora_fc2_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p,
                             float *yl, const float *ae, int El, int F, const be_drop *ld)
{
    int h = m->cfg.hidden, r = m->cfg.lora_rank;
    if (!p->lora_a[2]) return;
    const comm *tpg = expert_tp_group(m);
    for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++]) {
        if (a->lcount[e] == 0) continue;
        lora_dims d = expert_lora_dims(m, a->lcount[e], F, h);
        be_drop dr = expert_drop(m, a, ld, 2, e, r0, F);
        lora_row_fwd(m->be, tpg, tpg, yl + (size_t)r0 * h, a->su[2] + (size_t)r0 * r, ls->xd, ls->tmp,
                     ae + (size_t)r0 * F, p->lora_a[2] + (size_t)e * r * F, p->lora_b[2] + (size_t)e * h * r, &dr, &d);
    }
}

/* Down's backward: dA, dB accumulate; dae (rows, F) += its input gradient; dyl (rows, h) the
 * outputs' gradient, whole on every tp rank. */
void moe_expert_lora_fc2_bwd(const gpt_model *m, const moe_acts *a, const lora_scratch *ls, const moe_params *p,
                             moe_params *g, float *dae, const float *dyl, int El, int F, const be_drop *ld)
{
    int h = m->cfg.hidden, r = m->cfg.lora_rank;
    if (!p->lora_a[2]) return;
    for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++]) {
        if (a->lcount[e] == 0) continue;
        lora_dims d = expert_lora_dims(m, a->lcount[e], F, h);
        size_t ar = (size_t)e * r * F, br = (size_t)e * h * r;
        be_drop dr = expert_drop(m, a, ld, 2, e, r0, F);
        const float *xd = NULL;
        if (dr.p != 0.0f) /* the forward's mask again */
            be_dropout_fwd(m->be, ls->xd, a->ae + (size_t)r0 * F, d.B, d.T, F, &dr), xd = ls->xd;
        lora_row_bwd(m->be, dae + (size_t)r0 * F, g->lora_a[2] + ar, g->lora_b[2] + br, ls->du, ls->tmp,
                     dyl + (size_t)r0 * h, a->ae + (size_t)r0 * F, xd, a->su[2] + (size_t)r0 * r, p->lora_a[2] + ar,
                     p->lora_b[2] + br, &dr, &d);
    }
}

/* Gate's and up's backward from dhe (rows, bF): dA, dB accumulate; dxl (rows, h) += the input
 * gradient (on tp rank 0 of a split expert: the layer sums dxl's over tp). */
void moe_expert_lora_fc_bwd(const gpt_model *m, const moe_acts *a, const lora_scratch *ls, const moe_params *p,
                            moe_params *g, float *dxl, const float *dhe, const float *xl, int El, int F,
                            const be_drop *ld)
{
    int h = m->cfg.hidden, r = m->cfg.lora_rank, bF = gpt_fc_blocks(&m->cfg) * F;
    const comm *tpg = expert_tp_group(m);
    for (int i = 0; i < 2; i++) {
        if (!p->lora_a[i]) continue;
        for (int e = 0, r0 = 0; e < El; r0 += a->lcount[e++]) {
            if (a->lcount[e] == 0) continue;
            lora_dims d = expert_lora_dims(m, a->lcount[e], h, 0);
            size_t ar = (size_t)e * r * h, br = (size_t)e * F * r;
            be_drop dr = expert_drop(m, a, ld, i, e, r0, F);
            lora_fused_bwd(m->be, tpg, tpg, dxl + (size_t)r0 * h, g->lora_a[i] + ar, g->lora_b[i] + br, ls,
                           dhe + (size_t)r0 * bF, xl + (size_t)r0 * h, a->su[i] + (size_t)r0 * r, p->lora_a[i] + ar,
                           p->lora_b[i] + br, expert_lora_off(m, i, F), F, bF, &dr, &d);
        }
    }
}

/* ---- LoRA on the shared expert: the dense MLP's adapters (mlp.c) on its T rows ----
 * Its fc is column-parallel and its fc2 row-parallel over tp like the dense MLP's, but its output
 * and input gradient are partial sums the layer sums over tp, as the routed experts' are: the whole
 * terms are added on tp rank 0 (later: the tp group). The dropout is the dense MLP's (its sites,
 * the tokens' samples and positions: the block runs on the whole sequence). */
static const comm *shared_tp_group(const gpt_model *m) { return m->tp > 1 ? m->ps->tp_group : NULL; }
static lora_dims shared_lora_dims(const gpt_model *m, int T, int in, int out, const be_drop *ld)
{
    int s = m->seq_c, drop = ld && ld->p != 0.0f; /* with dropout T is B whole sequences */
    lora_dims d = {drop ? T / s : 1, drop ? s : T, in, out, m->cfg.lora_rank, gpt_lora_scaling(&m->cfg)};
    return d;
}
static be_drop shared_drop(const gpt_model *m, const be_drop *ld, int i, int S)
{
    be_drop d = {0};
    if (!ld || ld->p == 0.0f) return d;
    d = *ld;
    d.site += GPT_LORA_GATE + i;
    if (i == 2) d.unit0 = m->ps->tp_rank * S;
    return d;
}
int moe_has_shared_lora(const moe_params *p) { return p->sh_lora_a[0] || p->sh_lora_a[1] || p->sh_lora_a[2]; }

/* The shared expert's forward with its adapters: sh_ye (T, h) from xf (T, h); S this rank's width. */
void moe_shared_lora_fwd(const gpt_model *m, moe_acts *a, const lora_scratch *ls, const moe_params *p,
                         const float *xf, const float *b2, int T, int S, const be_drop *ld)
{
    const gpt_config *c = &m->cfg;
    int h = c->hidden, bS = gpt_fc_blocks(c) * S;
    const comm *tpg = shared_tp_group(m);
    be_matmul_fwd(m->be, a->sh_he, xf, p->sh_fc_w, p->sh_fc_b, T, h, bS);
    for (int i = 0; i < 2; i++) {
        if (!p->sh_lora_a[i]) continue;
        lora_dims d = shared_lora_dims(m, T, h, 0, ld);
        be_drop dr = shared_drop(m, ld, i, S);
        lora_fused_fwd(m->be, a->sh_he, a->sh_su[i], ls, xf, p->sh_lora_a[i], p->sh_lora_b[i],
                       c->glu && i == 1 ? S : 0, S, bS, &dr, &d);
    }
    be_act_fwd(m->be, c->act, c->glu, a->sh_ae, a->sh_he, T, S);
    be_matmul_fwd(m->be, a->sh_ye, a->sh_ae, p->sh_fc2_w, b2, T, S, h);
    if (p->sh_lora_a[2]) {
        lora_dims d = shared_lora_dims(m, T, S, h, ld);
        be_drop dr = shared_drop(m, ld, 2, S);
        lora_row_fwd(m->be, tpg, tpg, a->sh_ye, a->sh_su[2], ls->xd, ls->tmp, a->sh_ae, p->sh_lora_a[2],
                     p->sh_lora_b[2], &dr, &d);
    }
}

/* Its backward from dsh (T, h), whole on every tp rank: the adapters' gradients accumulate, dx
 * (T, h) accumulates the input gradient (the adapters' on tp rank 0). */
void moe_shared_lora_bwd(const gpt_model *m, const moe_acts *a, moe_scratch *s, const moe_params *p, moe_params *g,
                         float *dx, const float *dsh, const float *xf, int T, int S, const be_drop *ld)
{
    const gpt_config *c = &m->cfg;
    int h = c->hidden, bS = gpt_fc_blocks(c) * S;
    const comm *tpg = shared_tp_group(m);
    const lora_scratch *ls = &s->lora;
    be_zero(m->be, s->sh_dae, (size_t)T * S);
    be_matmul_bwd(m->be, s->sh_dae, g->sh_fc2_w, g->sh_fc2_b, dsh, a->sh_ae, p->sh_fc2_w, T, S, h);
    if (p->sh_lora_a[2]) {
        lora_dims d = shared_lora_dims(m, T, S, h, ld);
        be_drop dr = shared_drop(m, ld, 2, S);
        const float *xd = NULL;
        if (dr.p != 0.0f) /* the forward's mask again */
            be_dropout_fwd(m->be, ls->xd, a->sh_ae, d.B, d.T, S, &dr), xd = ls->xd;
        lora_row_bwd(m->be, s->sh_dae, g->sh_lora_a[2], g->sh_lora_b[2], ls->du, ls->tmp, dsh, a->sh_ae, xd,
                     a->sh_su[2], p->sh_lora_a[2], p->sh_lora_b[2], &dr, &d);
    }
    be_zero(m->be, s->sh_dhe, (size_t)T * bS);
    be_act_bwd(m->be, c->act, c->glu, s->sh_dhe, s->sh_dae, a->sh_he, T, S);
    be_matmul_bwd(m->be, dx, g->sh_fc_w, g->sh_fc_b, s->sh_dhe, xf, p->sh_fc_w, T, h, bS);
    for (int i = 0; i < 2; i++) {
        if (!p->sh_lora_a[i]) continue;
        lora_dims d = shared_lora_dims(m, T, h, 0, ld);
        be_drop dr = shared_drop(m, ld, i, S);
        lora_fused_bwd(m->be, tpg, tpg, dx, g->sh_lora_a[i], g->sh_lora_b[i], ls, s->sh_dhe, xf, a->sh_su[i],
                       p->sh_lora_a[i], p->sh_lora_b[i], c->glu && i == 1 ? S : 0, S, bS, &dr, &d);
    }
}

/* Whether the layer's experts carry adapters. */
int moe_has_expert_lora(const moe_params *p) { return p->lora_a[0] || p->lora_a[1] || p->lora_a[2]; }
