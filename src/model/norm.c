/* Norm block (LayerNorm or RMSNorm), replicated over tensor parallelism: see model_impl.h. */
#include "model_impl.h"

#include <stdio.h>

void norm_tensors(table_builder *tb, int layer, int kind, const char *prefix, norm_params *p, norm_params *g)
{
    int64_t h = tb->m->cfg.hidden;
    char n[64];
    if (tb->m->cfg.norm == GPT_NORM_LAYERNORM) {
        snprintf(n, sizeof n, "%s.bias", prefix);
        model_add_tensor(tb, &p->b, &g->b, INIT_ZEROS, model_stream(layer, kind), n, h, 0, -1, 1, 1);
    }
    snprintf(n, sizeof n, "%s.weight", prefix);
    model_add_tensor(tb, &p->w, &g->w, INIT_ONES, model_stream(layer, kind + 1), n, h, 0, -1, 1, 1);
}

void norm_acts_carve(carver *cv, const gpt_model *m, norm_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->seq_l; /* this rank's positions under sequence parallelism */
    model_carve_kept(cv, m, &a->out, BT * m->cfg.hidden, !m->sp, "norm out");
    if (m->cfg.norm == GPT_NORM_LAYERNORM) CARVE(cv, a->mean, float, BT);
    CARVE(cv, a->rstd, float, BT);
}

void norm_fwd(const gpt_model *m, norm_acts *a, const norm_params *p, const float *x, int BT)
{
    const gpt_config *c = &m->cfg;
    float *out = model_kept_stage(m, &a->out);
    if (c->norm == GPT_NORM_RMSNORM)
        be_rmsnorm_fwd(m->be, out, a->rstd, x, p->w, BT, c->hidden, gpt_norm_eps(c));
    else
        be_layernorm_fwd(m->be, out, a->mean, a->rstd, x, p->w, p->b, BT, c->hidden, gpt_norm_eps(c));
    model_kept_done(m, &a->out, (size_t)BT * c->hidden);
}

void norm_bwd(const gpt_model *m, float *dx, norm_params *g, const float *dout, const float *x, const norm_params *p,
              const norm_acts *a, int BT)
{
    if (m->cfg.norm == GPT_NORM_RMSNORM)
        be_rmsnorm_bwd(m->be, dx, g->w, dout, x, p->w, a->rstd, BT, m->cfg.hidden);
    else
        be_layernorm_bwd(m->be, dx, g->w, g->b, dout, x, p->w, a->mean, a->rstd, BT, m->cfg.hidden);
}
