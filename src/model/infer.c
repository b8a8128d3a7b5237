/* Generation's forward: a stage's layers over new positions of every row, with each layer's keys
 * and values kept in a cache so that a step of one token attends to all the earlier ones without
 * running them again. The same blocks' weights and kernels as training (tensor-parallel GEMMs,
 * rotary positions from the step's first position, learned positions likewise), no dropout,
 * nothing kept for a backward. It reads the built-in kinds' parameters (block.h: norm_params,
 * attn_params, mlp_params); a new block kind needs its step here too, and gpt_kv_create refuses
 * a model with a kind it does not know. See gpt_kv_create in include/model/trident/gpt.h. */
#include "model_impl.h"

#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "tensor_parallel.h"

struct gpt_kv_cache {
    int B, cap, nmax;
    float **k, **v;        /* per local layer: (B, cap, kv width) in backend memory */
    int32_t *ids;          /* (B, nmax) */
    float *x, *ln, *branch; /* (B nmax, h) */
    float *q, *kv;         /* (B nmax, 3q or q), grouped-query attention (B nmax, 2 kv) */
    float *atty;           /* (B nmax, q) */
    float *fch, *act;      /* (B nmax, fc width), (B nmax, f/t) */
    float *last;           /* (B, h): each row's last new position */
    float *logits_l;       /* (B, V/t) */
    float *gathered;       /* host (tp, B, V/t) */
    moe_acts *moe;         /* a mixture of experts: the step's buffers for (B nmax) tokens */
};

/* Width of a layer's key (or value) rows on this rank, and of the fc output. */
static int kv_width(const gpt_model *m) { return gpt_gqa(&m->cfg) ? m->kv_l : m->q_l; }
static int fc_out(const gpt_model *m) { return gpt_fc_blocks(&m->cfg) * m->ffn_l; }

/* Whether the generation step knows the kinds in the stage's slots. */
static int kinds_known(const gpt_model *m)
{
    for (int l = 0; l < m->nlayers; l++) {
        const gpt_layer *L = &m->layers[l];
        const block_ops *mlp = L->slot[GPT_SLOT_MLP].ops;
        if (L->slot[GPT_SLOT_ATTENTION].ops != &attention_ops ||
            (mlp != &mlp_ops && mlp != &moe_ops))
            return 0;
    }
    return 1;
}

gpt_kv_cache *gpt_kv_create(gpt_model *m, int B, int cap, int nmax)
{
    TD_CHECK(kinds_known(m), "add the kind's step to src/model/infer.c",
             "generation has no step for a block kind of this model");
    TD_CHECK(!m->sp, "generate without --sequence-parallel", "the generation forward has no sequence parallelism");
    TD_CHECK(B >= 1 && nmax >= 1 && nmax <= cap, "", "kv cache of %d rows, %d positions, %d a step", B, cap, nmax);
    const backend *be = m->be;
    gpt_kv_cache *c = td_xcalloc(1, sizeof *c);
    c->B = B, c->cap = cap, c->nmax = nmax;
    size_t rows = (size_t)B * nmax, h = (size_t)m->cfg.hidden, kvw = (size_t)kv_width(m);
    c->k = td_xcalloc((size_t)m->nlayers + 1, sizeof *c->k);
    c->v = td_xcalloc((size_t)m->nlayers + 1, sizeof *c->v);
    for (int l = 0; l < m->nlayers; l++) {
        c->k[l] = be_alloc(be, (size_t)B * cap * kvw * sizeof(float));
        c->v[l] = be_alloc(be, (size_t)B * cap * kvw * sizeof(float));
    }
    int gqa = gpt_gqa(&m->cfg);
    c->ids = be_alloc(be, rows * sizeof(int32_t));
    c->x = be_alloc(be, rows * h * sizeof(float));
    c->ln = be_alloc(be, rows * h * sizeof(float));
    c->branch = be_alloc(be, rows * h * sizeof(float));
    c->q = be_alloc(be, rows * (size_t)(gqa ? m->q_l : 3 * m->q_l) * sizeof(float));
    if (gqa) c->kv = be_alloc(be, rows * 2 * (size_t)m->kv_l * sizeof(float));
    c->atty = be_alloc(be, rows * (size_t)m->q_l * sizeof(float));
    c->fch = be_alloc(be, rows * (size_t)fc_out(m) * sizeof(float));
    c->act = be_alloc(be, rows * (size_t)m->ffn_l * sizeof(float));
    c->last = be_alloc(be, (size_t)B * h * sizeof(float));
    c->logits_l = be_alloc(be, (size_t)B * m->vocab_l * sizeof(float));
    c->gathered = td_xmalloc((size_t)m->tp * B * m->vocab_l * sizeof(float));
    if (gpt_moe_layers(&m->cfg, m->layer0, m->nlayers) > 0) c->moe = moe_step_new(m, (int)rows); /* the stage holds a MoE layer */
    return c;
}

void gpt_kv_free(gpt_model *m, gpt_kv_cache *c)
{
    if (!c) return;
    const backend *be = m->be;
    for (int l = 0; l < m->nlayers; l++) {
        be_dfree(be, c->k[l]);
        be_dfree(be, c->v[l]);
    }
    float *bufs[] = {c->x, c->ln, c->branch, c->q, c->kv, c->atty, c->fch, c->act, c->last, c->logits_l};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be_dfree(be, bufs[i]);
    be_dfree(be, c->ids);
    moe_step_free(m, c->moe);
    free(c->gathered);
    free(c->k);
    free(c->v);
    free(c);
}

static void norm(const gpt_model *m, float *out, const float *x, const norm_params *p, int rows)
{
    const gpt_config *c = &m->cfg;
    if (c->norm == GPT_NORM_RMSNORM) be_rmsnorm_fwd(m->be, out, NULL, x, p->w, rows, c->hidden, gpt_norm_eps(c));
    else be_layernorm_fwd(m->be, out, NULL, NULL, x, p->w, p->b, rows, c->hidden, gpt_norm_eps(c));
}

/* Layer l over positions [pos, pos + n) of the B rows in c->x (updated in place). */
static void layer_step(gpt_model *m, gpt_kv_cache *c, int l, int pos, int n)
{
    const gpt_config *cf = &m->cfg;
    const gpt_layer *L = &m->layers[l];
    const norm_params *ln1 = L->slot[GPT_SLOT_INPUT_NORM].p, *ln2 = L->slot[GPT_SLOT_PRE_MLP_NORM].p;
    const attn_params *attn = L->slot[GPT_SLOT_ATTENTION].p;
    const mlp_params *mlp = L->slot[GPT_SLOT_MLP].p;
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    int B = c->B, rows = B * n, h = cf->hidden, d = gpt_head_dim(cf), rot = gpt_rotary_dims(cf), gqa = gpt_gqa(cf);
    int kvw = kv_width(m);

    /* attention: q, k, v of the new positions; k and v appended to the cache */
    norm(m, c->ln, c->x, ln1, rows);
    tp_column_linear_fwd(be, tp, c->q, be_f32(c->ln), attn->qkv_w, attn->qkv_b, rows, h,
                         gqa ? m->q_l : 3 * m->q_l);
    if (gqa) tp_column_linear_fwd(be, tp, c->kv, be_f32(c->ln), attn->kv_w, attn->kv_b, rows, h, 2 * m->kv_l);
    float *q = c->q, *k = gqa ? c->kv : c->q + m->q_l, *v = gqa ? c->kv + m->kv_l : c->q + 2 * m->q_l;
    int ldq = gqa ? m->q_l : 3 * m->q_l, ldkv = gqa ? 2 * m->kv_l : 3 * m->q_l;
    if (rot) {
        be_rope_fwd(be, q, B, n, ldq, m->heads_l, d, rot, gpt_rotary_base(cf), pos);
        be_rope_fwd(be, k, B, n, ldkv, m->groups_l, d, rot, gpt_rotary_base(cf), pos);
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            size_t src = ((size_t)b * n + i) * ldkv, dst = ((size_t)b * c->cap + pos + i) * kvw;
            be_memcpy(be, c->k[l] + dst, k + src, (size_t)kvw * sizeof(float), BE_D2D);
            be_memcpy(be, c->v[l] + dst, v + src, (size_t)kvw * sizeof(float), BE_D2D);
        }
    be_attention_kv_fwd(be, c->atty, q, c->k[l], c->v[l], ldq, B, n, pos, c->cap, m->heads_l, m->groups_l, d);
    tp_row_linear_fwd(be, tp, c->branch, be_f32(c->atty), attn->proj_w, rows, m->q_l, h);
    be_bias_dropout_add_fwd(be, c->x, c->x, c->branch, attn->proj_b, B, n, h, NULL);

    /* MLP */
    norm(m, c->ln, c->x, ln2, rows);
    if (L->slot[GPT_SLOT_MLP].ops == &moe_ops) { /* the experts' outputs carry their own biases */
        moe_step(m, L->slot[GPT_SLOT_MLP].p, c->moe, c->branch, c->ln, rows);
        be_bias_dropout_add_fwd(be, c->x, c->x, c->branch, NULL, B, n, h, NULL);
        return;
    }
    mlp_fc_act_fwd(m, tp, mlp, c->act, c->fch, be_f32(c->ln), rows);
    tp_row_linear_fwd(be, tp, c->branch, be_f32(c->act), mlp->fc2_w, rows, m->ffn_l, h);
    be_bias_dropout_add_fwd(be, c->x, c->x, c->branch, mlp->fc2_b, B, n, h, NULL);
}

float *gpt_infer(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n,
                 float *logits)
{
    TD_CHECK(n >= 1 && n <= c->nmax && pos >= 0 && pos + n <= c->cap, "", "generation step of positions [%d, %d) "
             "in a cache of %d (at most %d a step)", pos, pos + n, c->cap, c->nmax);
    const backend *be = m->be;
    int B = c->B, rows = B * n, h = m->cfg.hidden;
    if (m->first) {
        be_memcpy(be, c->ids, ids, (size_t)rows * sizeof(int32_t), BE_H2D);
        tp_embedding_fwd(be, m->ps->tp_group, c->x, c->ids, m->p.wte, rows, h, m->vstart, m->vocab_l);
        if (m->p.wpe) be_pos_embedding_fwd(be, c->x, m->p.wpe, B, n, h, pos);
    } else {
        be_copy(be, c->x, input, (size_t)rows * h);
    }
    for (int l = 0; l < m->nlayers; l++) layer_step(m, c, l, pos, n);
    if (!m->last) return c->x;

    /* the logits of each row's last new position, gathered over the vocabulary slices */
    for (int b = 0; b < B; b++) be_copy(be, c->last + (size_t)b * h, c->x + ((size_t)b * n + n - 1) * h, (size_t)h);
    norm(m, c->ln, c->last, m->lnf.p, B);
    tp_column_linear_fwd(be, m->ps->tp_group, c->logits_l, be_f32(c->ln), m->p.head_w, NULL, B, h, m->vocab_l);
    size_t slice = (size_t)B * m->vocab_l;
    if (m->tp > 1) {
        float *mine = td_xmalloc(slice * sizeof(float));
        be_memcpy(be, mine, c->logits_l, slice * sizeof(float), BE_D2H);
        comm_allgather(m->ps->tp_group, mine, c->gathered, slice, COMM_F32);
        free(mine);
    } else {
        be_memcpy(be, c->gathered, c->logits_l, slice * sizeof(float), BE_D2H);
    }
    int V = m->cfg.vocab;
    for (int b = 0; b < B; b++)
        for (int r = 0; r < m->tp; r++) {
            int v0 = r * m->vocab_l, nv = be_vocab_real(V, v0, m->vocab_l);
            if (nv > 0)
                memcpy(logits + (size_t)b * V + v0, c->gathered + (size_t)r * slice + (size_t)b * m->vocab_l,
                       (size_t)nv * sizeof(float));
        }
    return NULL;
}
