/* GPT model of one pipeline stage: see include/trident/gpt.h.
 *
 * One transformer layer under TP (t ranks), after Megatron:
 *   x ─ LN1 ─ f ─ QKV (column) ─ attention on n/t heads ─ proj (row) ─ g ─ +bias, dropout, +x
 *     ─ LN2 ─ f ─ fc (column) ─ bias+GeLU ─ fc2 (row) ─ g ─ +bias, dropout, +x
 * Buffers are laid out in reverse backprop order (head, final norm, layers last to first,
 * positions, words), so gradient buckets close in the order the backward produces them. */
#include "trident/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/philox.h"
#include "trident/tensor_parallel.h"

/* Saved activations of one layer for one micro-batch (TP-local shapes, BT = B*s). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (BT, h), (BT), (BT) */
    float *qkv;                       /* (BT, 3h/t) */
    float *atty;                      /* (BT, h/t) */
    float *lse;                       /* (B, n/t, s) */
    float *res2;                      /* (BT, h): x + attention branch */
    float *ln2, *ln2_mean, *ln2_rstd; /* (BT, h), (BT), (BT) */
    float *fch;                       /* (BT, f/t): fc output before bias and GeLU */
    float *fch_gelu;                  /* (BT, f/t) */
    float *out;                       /* (BT, h): res2 + MLP branch, the layer output */
} layer_acts;

struct gpt_acts {
    int in_use;
    int B;                 /* samples in this micro-batch */
    int training;          /* dropout on */
    int64_t *sample;       /* (mbs) host: global sample index of each row */
    int32_t *ids;          /* (mbs, s): first stage */
    int32_t *targets;      /* (mbs, s): last stage */
    float *input;          /* (BT, h): stage input (embedding output on the first stage) */
    layer_acts *layers;    /* nlayers */
    float *lnf, *lnf_mean, *lnf_rstd; /* last stage: (BT, h), (BT), (BT) */
    float *logits;         /* last stage: (BT, V/t); the backward overwrites it with dlogits */
    float *losses, *maxv, *sumexp, *tlogit; /* last stage: (BT) each */
};

/* Forward temporaries and backward gradients, shared by every micro-batch of the stage. */
struct gpt_scratch {
    float *branch;   /* (BT, h): row-linear output before bias-dropout-add */
    float *dres;     /* (BT, h): gradient flowing down the residual stream */
    float *dln;      /* (BT, h): gradient of a layernorm output */
    float *dtmp;     /* (BT, h): gradient of a branch before dropout */
    float *dqkv;     /* (BT, 3h/t) */
    float *datty;    /* (BT, h/t) */
    float *dfch;     /* (BT, f/t) */
    float *dfch_gelu;/* (BT, f/t) */
    float *dloss;    /* (BT) */
    float *host;     /* (BT) host memory: losses and d(loss) on their way across */
};

int gpt_padded_vocab(int vocab, int divisible_by, int tp)
{
    int64_t m = (int64_t)divisible_by * tp;
    return (int)((vocab + m - 1) / m * m);
}

int64_t gpt_num_params(const gpt_config *c)
{
    int64_t h = c->hidden, f = c->ffn;
    int64_t layer = 2 * h + 3 * h * h + 3 * h + h * h + h + 2 * h + f * h + f + h * f + h;
    return (int64_t)c->padded_vocab * h + (int64_t)c->max_pos * h + c->num_layers * layer + 2 * h;
}

double gpt_flops_per_iteration(const gpt_config *c, int64_t batch, int full_recompute)
{
    double s = c->seq, l = c->num_layers, h = c->hidden, V = c->padded_vocab;
    double k = full_recompute ? 96.0 : 72.0;
    double vterm = full_recompute ? V / (16.0 * l * h) : V / (12.0 * l * h);
    return k * (double)batch * s * l * h * h * (1.0 + s / (6.0 * h) + vterm);
}

/* ---- the tensor table ---- */

enum init_kind { INIT_NORMAL, INIT_NORMAL_OUT, INIT_ONES, INIT_ZEROS };

typedef struct {
    float **param, **grad; /* where to point once the buffers exist */
    enum init_kind init;
    uint64_t stream;       /* Philox stream of the logical tensor */
} tensor_slot;

typedef struct {
    gpt_model *m;
    tensor_slot *slots;
    int cap;
} table_builder;

/* Philox stream of a logical tensor: (global layer or 0xffff, kind). */
static uint64_t stream_of(int layer, int kind) { return ((uint64_t)(layer < 0 ? 0xffff : layer) << 8) | (uint64_t)kind; }

static void add_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                       const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay)
{
    gpt_model *m = tb->m;
    if (m->ntensors == tb->cap) {
        tb->cap = tb->cap ? 2 * tb->cap : 64;
        m->table = td_xrealloc(m->table, (size_t)tb->cap * sizeof *m->table);
        tb->slots = td_xrealloc(tb->slots, (size_t)tb->cap * sizeof *tb->slots);
    }
    gpt_tensor_info *t = &m->table[m->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shard_dim = shard_dim;
    t->shard_blocks = blocks;
    t->no_decay = no_decay;
    t->tp_replicated = shard_dim < 0;
    size_t numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    if (shard_dim >= 0) {
        int64_t block = (shard_dim == 0 ? d0 : d1) / blocks;
        t->shard_len = block / m->tp;
        t->shard_start = t->shard_len * m->ps->tp_rank;
        numel = numel / (size_t)m->tp;
    }
    t->numel = numel;
    t->offset = m->numel;
    m->numel += numel;
    tb->slots[m->ntensors] = (tensor_slot){param, grad, init, stream};
    m->ntensors++;
}

static void add_layer(table_builder *tb, int l, gpt_layer *p, gpt_layer *g)
{
    const gpt_config *c = &tb->m->cfg;
    int64_t h = c->hidden, f = c->ffn;
    char n[64];
#define T(field, init, kind, d0, d1, sd, blocks, nd, label)                                        \
    do {                                                                                           \
        snprintf(n, sizeof n, "layers.%d.%s", l, label);                                           \
        add_tensor(tb, &p->field, &g->field, init, stream_of(l, kind), n, d0, d1, sd, blocks, nd); \
    } while (0)
    /* reverse of the order the backward finishes them */
    T(fc2_b, INIT_ZEROS, 1, h, 0, -1, 1, 1, "mlp.fc2.bias");
    T(fc2_w, INIT_NORMAL_OUT, 2, h, f, 1, 1, 0, "mlp.fc2.weight");
    T(fc_b, INIT_ZEROS, 3, f, 0, 0, 1, 1, "mlp.fc.bias");
    T(fc_w, INIT_NORMAL, 4, f, h, 0, 1, 0, "mlp.fc.weight");
    T(ln2_b, INIT_ZEROS, 5, h, 0, -1, 1, 1, "ln2.bias");
    T(ln2_w, INIT_ONES, 6, h, 0, -1, 1, 1, "ln2.weight");
    T(proj_b, INIT_ZEROS, 7, h, 0, -1, 1, 1, "attn.proj.bias");
    T(proj_w, INIT_NORMAL_OUT, 8, h, h, 1, 1, 0, "attn.proj.weight");
    T(qkv_b, INIT_ZEROS, 9, 3 * h, 0, 0, 3, 1, "attn.qkv.bias");
    T(qkv_w, INIT_NORMAL, 10, 3 * h, h, 0, 3, 0, "attn.qkv.weight");
    T(ln1_b, INIT_ZEROS, 11, h, 0, -1, 1, 1, "ln1.bias");
    T(ln1_w, INIT_ONES, 12, h, 0, -1, 1, 1, "ln1.weight");
#undef T
}

/* Fills this rank's slice of logical tensor t from the normal stream (seed, stream): element
 * (i, j) of the logical tensor is draw number i * cols + j, whatever the layout. */
static void init_normal_slice(float *dst, const gpt_tensor_info *t, uint64_t seed, uint64_t stream, float std)
{
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    if (t->shard_dim < 0) {
        td_philox_fill_normal(dst, (uint64_t)(rows * cols), seed, stream, 0, 0.0f, std);
    } else if (t->shard_dim == 0) {
        int64_t block = rows / t->shard_blocks;
        for (int b = 0; b < t->shard_blocks; b++)
            for (int64_t r = 0; r < t->shard_len; r++) {
                int64_t lrow = b * block + t->shard_start + r, local = b * t->shard_len + r;
                td_philox_fill_normal(dst + local * cols, (uint64_t)cols, seed, stream, (uint64_t)(lrow * cols),
                                      0.0f, std);
            }
    } else {
        for (int64_t r = 0; r < rows; r++)
            td_philox_fill_normal(dst + r * t->shard_len, (uint64_t)t->shard_len, seed, stream,
                                  (uint64_t)(r * cols + t->shard_start), 0.0f, std);
    }
}

static void init_params(gpt_model *m, const tensor_slot *slots)
{
    const gpt_config *c = &m->cfg;
    float std_out = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    float *host = td_xmalloc(m->numel * sizeof(float));
    for (int i = 0; i < m->ntensors; i++) {
        const gpt_tensor_info *t = &m->table[i];
        float *dst = host + t->offset;
        switch (slots[i].init) {
        case INIT_NORMAL: init_normal_slice(dst, t, c->seed, slots[i].stream, c->init_std); break;
        case INIT_NORMAL_OUT: init_normal_slice(dst, t, c->seed, slots[i].stream, std_out); break;
        case INIT_ONES:
            for (size_t k = 0; k < t->numel; k++) dst[k] = 1.0f;
            break;
        case INIT_ZEROS: memset(dst, 0, t->numel * sizeof(float)); break;
        }
    }
    be_memcpy(m->be, m->params, host, m->numel * sizeof(float), BE_H2D);
    free(host);
}

/* ---- activations ---- */

static size_t acts_layout(gpt_model *m, gpt_acts *a, td_arena *ar)
{
    /* With ar == NULL only counts bytes; else carves a's buffers from ar. */
    size_t bytes = 0;
    int64_t BT = (int64_t)m->mbs * m->cfg.seq, h = m->cfg.hidden;
#define CARVE(ptr, type, count)                                                      \
    do {                                                                             \
        size_t n_ = ((size_t)(count) * sizeof(type) + 63) & ~(size_t)63;            \
        bytes += n_;                                                                 \
        if (ar) (ptr) = (type *)td_arena_alloc(ar, (size_t)(count) * sizeof(type), #ptr); \
    } while (0)
    CARVE(a->ids, int32_t, BT);
    CARVE(a->targets, int32_t, BT);
    CARVE(a->input, float, BT * h);
    for (int l = 0; l < m->nlayers; l++) {
        layer_acts *la = &a->layers[l];
        CARVE(la->ln1, float, BT * h);
        CARVE(la->ln1_mean, float, BT);
        CARVE(la->ln1_rstd, float, BT);
        CARVE(la->qkv, float, BT * 3 * m->hidden_l);
        CARVE(la->atty, float, BT * m->hidden_l);
        CARVE(la->lse, float, (int64_t)m->mbs * m->heads_l * m->cfg.seq);
        CARVE(la->res2, float, BT * h);
        CARVE(la->ln2, float, BT * h);
        CARVE(la->ln2_mean, float, BT);
        CARVE(la->ln2_rstd, float, BT);
        CARVE(la->fch, float, BT * m->ffn_l);
        CARVE(la->fch_gelu, float, BT * m->ffn_l);
        CARVE(la->out, float, BT * h);
    }
    if (m->last) {
        CARVE(a->lnf, float, BT * h);
        CARVE(a->lnf_mean, float, BT);
        CARVE(a->lnf_rstd, float, BT);
        CARVE(a->logits, float, BT * m->vocab_l);
        CARVE(a->losses, float, BT);
        CARVE(a->maxv, float, BT);
        CARVE(a->sumexp, float, BT);
        CARVE(a->tlogit, float, BT);
    }
    return bytes;
}

static size_t scratch_layout(gpt_model *m, struct gpt_scratch *s, td_arena *ar)
{
    size_t bytes = 0;
    int64_t BT = (int64_t)m->mbs * m->cfg.seq, h = m->cfg.hidden;
    CARVE(s->branch, float, BT * h);
    CARVE(s->dres, float, BT * h);
    CARVE(s->dln, float, BT * h);
    CARVE(s->dtmp, float, BT * h);
    CARVE(s->dqkv, float, BT * 3 * m->hidden_l);
    CARVE(s->datty, float, BT * m->hidden_l);
    CARVE(s->dfch, float, BT * m->ffn_l);
    CARVE(s->dfch_gelu, float, BT * m->ffn_l);
    CARVE(s->dloss, float, BT);
#undef CARVE
    return bytes;
}

gpt_model *gpt_create(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                      int mbs, int max_inflight)
{
    gpt_model *m = td_xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    m->ps = ps;
    m->be = be;
    m->layer0 = layer0;
    m->nlayers = nlayers;
    m->first = layer0 == 0;
    m->last = layer0 + nlayers == cfg->num_layers;
    m->tp = ps->tp;
    TD_ASSERT(cfg->heads % m->tp == 0 && cfg->ffn % m->tp == 0 && cfg->padded_vocab % m->tp == 0);
    m->heads_l = cfg->heads / m->tp;
    m->hidden_l = cfg->hidden / m->tp;
    m->ffn_l = cfg->ffn / m->tp;
    m->vocab_l = cfg->padded_vocab / m->tp;
    m->vstart = m->vocab_l * ps->tp_rank;
    m->mbs = mbs;
    m->max_inflight = max_inflight;

    /* the tensor table, in reverse backprop order */
    table_builder tb = {m, NULL, 0};
    int64_t h = cfg->hidden, V = cfg->padded_vocab;
    m->p.layers = td_xcalloc((size_t)nlayers, sizeof(gpt_layer));
    m->g.layers = td_xcalloc((size_t)nlayers, sizeof(gpt_layer));
    if (m->last) {
        if (!m->first)
            add_tensor(&tb, &m->p.head_w, &m->g.head_w, INIT_NORMAL, stream_of(-1, 1), "embedding.word.weight", V, h,
                       0, 1, 0);
        add_tensor(&tb, &m->p.lnf_b, &m->g.lnf_b, INIT_ZEROS, stream_of(-1, 3), "final_norm.bias", h, 0, -1, 1, 1);
        add_tensor(&tb, &m->p.lnf_w, &m->g.lnf_w, INIT_ONES, stream_of(-1, 4), "final_norm.weight", h, 0, -1, 1, 1);
        if (!m->first) m->table[0].embedding_copy = 1;
    }
    for (int l = nlayers - 1; l >= 0; l--) add_layer(&tb, layer0 + l, &m->p.layers[l], &m->g.layers[l]);
    if (m->first) {
        add_tensor(&tb, &m->p.wpe, &m->g.wpe, INIT_NORMAL, stream_of(-1, 2), "embedding.position.weight",
                   cfg->max_pos, h, -1, 1, 0);
        add_tensor(&tb, &m->p.wte, &m->g.wte, INIT_NORMAL, stream_of(-1, 1), "embedding.word.weight", V, h, 0, 1,
                   0);
    }

    m->params = be_alloc(be, m->numel * sizeof(float));
    m->grads = be_alloc(be, m->numel * sizeof(float));
    be_zero(be, m->grads, m->numel);
    for (int i = 0; i < m->ntensors; i++) {
        *tb.slots[i].param = m->params + m->table[i].offset;
        *tb.slots[i].grad = m->grads + m->table[i].offset;
    }
    if (m->last && m->first) {
        m->p.head_w = m->p.wte;
        m->g.head_w = m->g.wte;
    }
    init_params(m, tb.slots);
    free(tb.slots);

    /* activations: max_inflight slots and the shared scratch, carved from one arena */
    m->slots = td_xcalloc((size_t)max_inflight, sizeof(gpt_acts));
    m->scratch = td_xcalloc(1, sizeof *m->scratch);
    m->scratch->host = td_xmalloc((size_t)mbs * cfg->seq * sizeof(float));
    for (int i = 0; i < max_inflight; i++) {
        m->slots[i].layers = td_xcalloc((size_t)nlayers, sizeof(layer_acts));
        m->slots[i].sample = td_xcalloc((size_t)mbs, sizeof(int64_t));
    }
    m->acts_bytes = acts_layout(m, &m->slots[0], NULL);
    size_t total = m->acts_bytes * (size_t)max_inflight + scratch_layout(m, m->scratch, NULL) + 64;
    td_arena_wrap(&m->arena, be_alloc(be, total), total);
    for (int i = 0; i < max_inflight; i++) acts_layout(m, &m->slots[i], &m->arena);
    scratch_layout(m, m->scratch, &m->arena);
    return m;
}

void gpt_free(gpt_model *m)
{
    if (!m) return;
    be_dfree(m->be, m->arena.base);
    for (int i = 0; i < m->max_inflight; i++) {
        free(m->slots[i].layers);
        free(m->slots[i].sample);
    }
    free(m->slots);
    free(m->scratch->host);
    free(m->scratch);
    be_dfree(m->be, m->params);
    be_dfree(m->be, m->grads);
    free(m->p.layers);
    free(m->g.layers);
    free(m->table);
    free(m);
}

gpt_acts *gpt_acts_acquire(gpt_model *m)
{
    for (int i = 0; i < m->max_inflight; i++)
        if (!m->slots[i].in_use) {
            m->slots[i].in_use = 1;
            return &m->slots[i];
        }
    td_die(__FILE__, __LINE__, "gpt_acts_acquire", "this is a bug in the pipeline schedule",
           "all %d activation slots are in use", m->max_inflight);
}

float *gpt_acts_input(gpt_acts *a) { return a->input; }
const float *gpt_acts_losses(const gpt_acts *a) { return a->losses; }
const float *gpt_acts_logits(const gpt_acts *a) { return a->logits; }

void gpt_acts_release(gpt_model *m, gpt_acts *a)
{
    (void)m;
    a->in_use = 0;
}

/* ---- forward ---- */

/* Dropout site ids: 0 the embedding, then three per layer. */
static int site_embedding(void) { return 0; }
static int site_attn_probs(int layer) { return 1 + 3 * layer; }
static int site_attn_out(int layer) { return 2 + 3 * layer; }
static int site_mlp_out(int layer) { return 3 + 3 * layer; }

static be_drop make_drop(const gpt_model *m, const gpt_acts *a, float p, int site, int unit0)
{
    be_drop d = {p, m->cfg.seed, a->sample, site, 0, unit0};
    return d;
}

static void layer_fwd(gpt_model *m, gpt_acts *a, int l, const float *x, int training)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    const gpt_layer *p = &m->p.layers[l];
    layer_acts *la = &a->layers[l];
    int B = a->B, T = m->cfg.seq, BT = B * T, h = m->cfg.hidden, L = m->layer0 + l;
    float ph = training ? m->cfg.hidden_dropout : 0.0f, pa = training ? m->cfg.attn_dropout : 0.0f;
    be_drop d_att = make_drop(m, a, pa, site_attn_probs(L), m->ps->tp_rank * m->heads_l);
    be_drop d_out = make_drop(m, a, ph, site_attn_out(L), 0);
    be_drop d_mlp = make_drop(m, a, ph, site_mlp_out(L), 0);
    float *branch = m->scratch->branch;

    be_layernorm_fwd(be, la->ln1, la->ln1_mean, la->ln1_rstd, x, p->ln1_w, p->ln1_b, BT, h);
    tp_column_linear_fwd(be, tp, la->qkv, la->ln1, p->qkv_w, p->qkv_b, BT, h, 3 * m->hidden_l);
    be_attention_fwd(be, la->atty, la->lse, la->qkv, B, T, m->heads_l, h / m->cfg.heads, &d_att);
    tp_row_linear_fwd(be, tp, branch, la->atty, p->proj_w, BT, m->hidden_l, h);
    be_bias_dropout_add_fwd(be, la->res2, x, branch, p->proj_b, B, T, h, &d_out);

    be_layernorm_fwd(be, la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p->ln2_w, p->ln2_b, BT, h);
    tp_column_linear_fwd(be, tp, la->fch, la->ln2, p->fc_w, NULL, BT, h, m->ffn_l);
    be_bias_gelu_fwd(be, la->fch_gelu, la->fch, p->fc_b, BT, m->ffn_l);
    tp_row_linear_fwd(be, tp, branch, la->fch_gelu, p->fc2_w, BT, m->ffn_l, h);
    be_bias_dropout_add_fwd(be, la->out, la->res2, branch, p->fc2_b, B, T, h, &d_mlp);
}

float *gpt_forward(gpt_model *m, gpt_acts *a, const int32_t *ids, const float *input, const int32_t *targets,
                   const int64_t *sample, int B, int training, double *loss_sum)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    int T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    TD_ASSERT(B >= 1 && B <= m->mbs);
    a->B = B;
    a->training = training;
    memcpy(a->sample, sample, (size_t)B * sizeof(int64_t));

    if (m->first) {
        be_memcpy(be, a->ids, ids, (size_t)BT * sizeof(int32_t), BE_H2D);
        tp_embedding_fwd(be, tp, a->input, a->ids, m->p.wte, BT, h, m->vstart, m->vocab_l);
        be_pos_embedding_fwd(be, a->input, m->p.wpe, B, T, h, 0);
        be_drop d = make_drop(m, a, training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
        be_dropout_fwd(be, a->input, a->input, B, T, h, &d);
    } else if (input != a->input) {
        be_copy(be, a->input, input, (size_t)BT * h);
    }
    const float *x = a->input;
    for (int l = 0; l < m->nlayers; l++) {
        layer_fwd(m, a, l, x, training);
        x = a->layers[l].out;
    }
    if (!m->last) return (float *)x;

    be_memcpy(be, a->targets, targets, (size_t)BT * sizeof(int32_t), BE_H2D);
    be_layernorm_fwd(be, a->lnf, a->lnf_mean, a->lnf_rstd, x, m->p.lnf_w, m->p.lnf_b, BT, h);
    tp_column_linear_fwd(be, tp, a->logits, a->lnf, m->p.head_w, NULL, BT, h, m->vocab_l);
    tp_cross_entropy_fwd(be, tp, a->losses, a->maxv, a->sumexp, a->tlogit, a->logits, a->targets, BT, m->vocab_l,
                         m->vstart, m->cfg.vocab);
    if (loss_sum) {
        float *host = m->scratch->host;
        be_memcpy(be, host, a->losses, (size_t)BT * sizeof(float), BE_D2H);
        double sum = 0;
        for (int i = 0; i < BT; i++) sum += host[i];
        *loss_sum = sum;
    }
    return NULL;
}

/* ---- backward ---- */

/* The gradient of a dropout's input from d, the gradient of its output: d itself when nothing is
 * dropped (no copy), else the masked copy written to tmp. */
static const float *dropout_grad(const backend *be, float *tmp, const float *d, int B, int T, int C,
                                 const be_drop *drop)
{
    if (drop->p == 0.0f) return d;
    be_dropout_bwd(be, tmp, d, B, T, C, drop);
    return tmp;
}

/* On entry s->dres holds d(layer output); on exit d(layer input). */
static void layer_bwd(gpt_model *m, gpt_acts *a, int l, const float *x)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    const gpt_layer *p = &m->p.layers[l];
    gpt_layer *g = &m->g.layers[l];
    const layer_acts *la = &a->layers[l];
    struct gpt_scratch *s = m->scratch;
    int B = a->B, T = m->cfg.seq, BT = B * T, h = m->cfg.hidden, L = m->layer0 + l;
    float ph = a->training ? m->cfg.hidden_dropout : 0.0f, pa = a->training ? m->cfg.attn_dropout : 0.0f;
    be_drop d_att = make_drop(m, a, pa, site_attn_probs(L), m->ps->tp_rank * m->heads_l);
    be_drop d_out = make_drop(m, a, ph, site_attn_out(L), 0);
    be_drop d_mlp = make_drop(m, a, ph, site_mlp_out(L), 0);

    /* MLP branch: out = res2 + dropout(fc2(gelu(fc(ln2(res2)) + b)) + b2) */
    const float *dbranch = dropout_grad(be, s->dtmp, s->dres, B, T, h, &d_mlp);
    be_bias_bwd(be, g->fc2_b, dbranch, BT, h);
    be_zero(be, s->dfch_gelu, (size_t)BT * m->ffn_l);
    tp_row_linear_bwd(be, tp, s->dfch_gelu, g->fc2_w, dbranch, la->fch_gelu, p->fc2_w, BT, m->ffn_l, h);
    be_zero(be, s->dfch, (size_t)BT * m->ffn_l);
    be_bias_gelu_bwd(be, s->dfch, g->fc_b, s->dfch_gelu, la->fch, p->fc_b, BT, m->ffn_l);
    tp_column_linear_bwd(be, tp, s->dln, g->fc_w, NULL, s->dfch, la->ln2, p->fc_w, BT, h, m->ffn_l);
    be_layernorm_bwd(be, s->dres, g->ln2_w, g->ln2_b, s->dln, la->res2, p->ln2_w, la->ln2_mean, la->ln2_rstd, BT, h);

    /* attention branch: res2 = x + dropout(proj(attn(qkv(ln1(x)))) + b) */
    dbranch = dropout_grad(be, s->dtmp, s->dres, B, T, h, &d_out);
    be_bias_bwd(be, g->proj_b, dbranch, BT, h);
    be_zero(be, s->datty, (size_t)BT * m->hidden_l);
    tp_row_linear_bwd(be, tp, s->datty, g->proj_w, dbranch, la->atty, p->proj_w, BT, m->hidden_l, h);
    be_zero(be, s->dqkv, (size_t)BT * 3 * m->hidden_l);
    be_attention_bwd(be, s->dqkv, s->datty, la->qkv, la->lse, B, T, m->heads_l, h / m->cfg.heads, &d_att);
    tp_column_linear_bwd(be, tp, s->dln, g->qkv_w, g->qkv_b, s->dqkv, la->ln1, p->qkv_w, BT, h, 3 * m->hidden_l);
    be_layernorm_bwd(be, s->dres, g->ln1_w, g->ln1_b, s->dln, x, p->ln1_w, la->ln1_mean, la->ln1_rstd, BT, h);
}

float *gpt_backward(gpt_model *m, gpt_acts *a, const float *doutput, float loss_scale)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    struct gpt_scratch *s = m->scratch;
    int B = a->B, T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;

    if (m->last) {
        for (int i = 0; i < BT; i++) s->host[i] = loss_scale;
        be_memcpy(be, s->dloss, s->host, (size_t)BT * sizeof(float), BE_H2D);
        be_ce_bwd(be, a->logits, a->maxv, a->sumexp, a->targets, s->dloss, BT, m->vocab_l,
                  be_vocab_real(m->cfg.vocab, m->vstart, m->vocab_l), m->vstart);
        tp_column_linear_bwd(be, tp, s->dln, m->g.head_w, NULL, a->logits, a->lnf, m->p.head_w, BT, h, m->vocab_l);
        const float *x = m->nlayers ? a->layers[m->nlayers - 1].out : a->input;
        be_zero(be, s->dres, (size_t)BT * h);
        be_layernorm_bwd(be, s->dres, m->g.lnf_w, m->g.lnf_b, s->dln, x, m->p.lnf_w, a->lnf_mean, a->lnf_rstd, BT, h);
    } else {
        be_copy(be, s->dres, doutput, (size_t)BT * h);
    }
    for (int l = m->nlayers - 1; l >= 0; l--) {
        layer_bwd(m, a, l, l ? a->layers[l - 1].out : a->input);
        /* layer l's last tensor in the buffer is ln1.weight: everything up to its end is final */
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, (size_t)(m->g.layers[l].ln1_w - m->grads) + (size_t)h);
    }
    if (!m->first) {
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
        return s->dres;
    }

    be_drop d = make_drop(m, a, a->training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
    be_dropout_bwd(be, s->dres, s->dres, B, T, h, &d);
    be_pos_embedding_bwd(be, m->g.wpe, s->dres, B, T, h, 0);
    be_embedding_bwd(be, m->g.wte, s->dres, a->ids, BT, h, m->vstart, m->vocab_l);
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
    return NULL;
}
