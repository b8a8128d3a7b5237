/* Norm blocks, replicated over tensor parallelism, on this rank's positions: LayerNorm,
 * out = (x - mean) * rstd * w + b, and RMSNorm, out = x * rstd * w, over the hidden size. Two
 * kinds (layernorm_ops, rmsnorm_ops) of one parameter struct, norm_params (block.h). */
#include "block.h"

#include <stdio.h>

typedef struct {
    kept_buf out;       /* (BT, h) */
    float *mean, *rstd; /* (BT) LayerNorm only, (BT) */
} norm_acts;

static void tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *pv, void *gv, int bias)
{
    norm_params *p = pv, *g = gv;
    int64_t h = tb->cfg->hidden;
    char n[64];
    if (bias) {
        snprintf(n, sizeof n, "%s.bias", prefix);
        model_add_tensor(tb, &p->b, &g->b, INIT_ZEROS, model_stream(layer, stream0), n, h, 0, -1, 1, 1);
    }
    snprintf(n, sizeof n, "%s.weight", prefix);
    model_add_tensor(tb, &p->w, &g->w, INIT_ONES, model_stream(layer, stream0 + 1), n, h, 0, -1, 1, 1);
}

static void ln_tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *p, void *g)
{
    tensors(tb, layer, stream0, prefix, p, g, 1);
}

static void rms_tensors(table_builder *tb, int layer, int stream0, const char *prefix, void *p, void *g)
{
    tensors(tb, layer, stream0, prefix, p, g, 0);
}

static void acts(carver *cv, const gpt_model *m, norm_acts *a, int mean)
{
    int64_t BT = (int64_t)m->mbs * m->seq_l; /* this rank's positions under sequence parallelism */
    model_carve_kept(cv, &a->out, BT * m->cfg.hidden, !m->sp, "norm out");
    if (mean) CARVE(cv, a->mean, float, BT);
    CARVE(cv, a->rstd, float, BT);
}

static void ln_acts(carver *cv, const gpt_model *m, void *a) { acts(cv, m, a, 1); }
static void rms_acts(carver *cv, const gpt_model *m, void *a) { acts(cv, m, a, 0); }

static void ln_fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    norm_acts *a = av;
    int BT = io->B * m->seq_l, h = m->cfg.hidden;
    (void)out;
    be_out o = kept_out(m->be, &a->out);
    be_layernorm_fwd_to(m->be, o, a->mean, a->rstd, x.p, p->w, p->b, BT, h, gpt_norm_eps(&m->cfg));
    kept_written(m->be, &a->out, o, (size_t)BT * h);
}

static void rms_fwd(const block_io *io, void *av, const void *pv, float *out, be_in x)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    norm_acts *a = av;
    int BT = io->B * m->seq_l, h = m->cfg.hidden;
    (void)out;
    be_out o = kept_out(m->be, &a->out);
    be_rmsnorm_fwd_to(m->be, o, a->rstd, x.p, p->w, BT, h, gpt_norm_eps(&m->cfg));
    kept_written(m->be, &a->out, o, (size_t)BT * h);
}

static void ln_bwd(const block_io *io, float *dx, void *gv, const float *dout, const void *av, const void *pv,
                   be_in x)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    norm_params *g = gv;
    const norm_acts *a = av;
    be_layernorm_bwd(m->be, dx, g->w, g->b, dout, x.p, p->w, a->mean, a->rstd, io->B * m->seq_l, m->cfg.hidden);
}

static void rms_bwd(const block_io *io, float *dx, void *gv, const float *dout, const void *av, const void *pv,
                    be_in x)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    norm_params *g = gv;
    const norm_acts *a = av;
    be_rmsnorm_bwd(m->be, dx, g->w, dout, x.p, p->w, a->rstd, io->B * m->seq_l, m->cfg.hidden);
}

static const kept_buf *output(const void *a) { return &((const norm_acts *)a)->out; }

/* Generation's step: the output of io->B n rows into out, nothing kept. */
static void ln_decode(const block_io *io, void *st, const void *pv, float *out, be_in x, int pos, int n)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    (void)st, (void)pos;
    be_layernorm_fwd(m->be, out, NULL, NULL, x.p, p->w, p->b, io->B * n, m->cfg.hidden, gpt_norm_eps(&m->cfg));
}

static void rms_decode(const block_io *io, void *st, const void *pv, float *out, be_in x, int pos, int n)
{
    const gpt_model *m = io->m;
    const norm_params *p = pv;
    (void)st, (void)pos;
    be_rmsnorm_fwd(m->be, out, NULL, x.p, p->w, io->B * n, m->cfg.hidden, gpt_norm_eps(&m->cfg));
}

const block_ops layernorm_ops = {
    .name = "LayerNorm", .params_size = sizeof(norm_params), .acts_size = sizeof(norm_acts),
    .tensors = ln_tensors, .acts = ln_acts, .fwd = ln_fwd, .bwd = ln_bwd, .output = output, .seq_local = 1,
    .decode = ln_decode,
};

const block_ops rmsnorm_ops = {
    .name = "RMSNorm", .params_size = sizeof(norm_params), .acts_size = sizeof(norm_acts),
    .tensors = rms_tensors, .acts = rms_acts, .fwd = rms_fwd, .bwd = rms_bwd, .output = output, .seq_local = 1,
    .decode = rms_decode,
};
