/* GPT model of one pipeline stage: see include/model/trident/gpt.h. A stage is the embedding block
 * (first stage), a range of layers (layer.c, composed of the blocks in norm.c, attention.c,
 * mlp.c), and the final norm, LM head and vocab-parallel loss (last stage).
 * Buffers are laid out in reverse backprop order (head, final norm, layers last to first,
 * positions, words), so gradient buckets close in the order the backward produces them. */
#include "model_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/philox.h"
#include "tensor_parallel.h"

int gpt_padded_vocab(int vocab, int divisible_by, int tp)
{
    int64_t m = (int64_t)divisible_by * tp;
    return (int)((vocab + m - 1) / m * m);
}

double gpt_flops_per_iteration(const gpt_config *c, int64_t batch, int full_recompute)
{
    /* Megatron's num_floating_point_operations: 12 = 3 passes x 2 (multiply-add) x 2 (the
     * QK^T and AV products), with grouped queries, head sizes and gated MLPs; full
     * recomputation runs the layers' forward again (16), not the logits. */
    double s = c->seq, l = c->num_layers, h = c->hidden, V = c->padded_vocab;
    double qratio = (double)gpt_q_width(c) / h, groups = (double)gpt_groups(c) / c->heads;
    double layers = (1.0 + groups + s / h) * qratio + (double)c->ffn / h * (c->swiglu ? 1.5 : 1.0);
    double logits = V / (2.0 * l * h);
    return (double)batch * s * l * h * h * ((full_recompute ? 16.0 : 12.0) * layers + 12.0 * logits);
}

int gpt_rotary_dims(const gpt_config *c)
{
    if (c->pos != GPT_POS_ROPE) return 0;
    double pct = c->rotary_percent > 0 ? c->rotary_percent : 1.0;
    int r = (int)(gpt_head_dim(c) * pct);
    return r - r % 2;
}

/* ---- the tensor table ---- */

uint64_t model_stream(int layer, int kind) { return ((uint64_t)(layer < 0 ? 0xffff : layer) << 8) | (uint64_t)kind; }

void model_add_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                      const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay)
{
    gpt_model *m = tb->m;
    TD_ASSERT(shard_dim < 0 || ((shard_dim == 0 ? d0 : d1) / blocks) % tb->tp == 0);
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
        t->shard_len = block / tb->tp;
        t->shard_start = t->shard_len * tb->tp_rank;
        numel = numel / (size_t)tb->tp;
    }
    t->numel = numel;
    t->offset = m->numel;
    m->numel += numel;
    tb->slots[m->ntensors] = (tensor_slot){param, grad, init, stream};
    m->ntensors++;
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
    /* one tensor at a time through a host buffer of the largest: no second copy of the model */
    size_t most = 1;
    for (int i = 0; i < m->ntensors; i++)
        if (m->table[i].numel > most) most = m->table[i].numel;
    float *dst = td_xmalloc(most * sizeof(float));
    for (int i = 0; i < m->ntensors; i++) {
        const gpt_tensor_info *t = &m->table[i];
        switch (slots[i].init) {
        case INIT_NORMAL: init_normal_slice(dst, t, c->seed, slots[i].stream, c->init_std); break;
        case INIT_NORMAL_OUT: init_normal_slice(dst, t, c->seed, slots[i].stream, std_out); break;
        case INIT_ONES:
            for (size_t k = 0; k < t->numel; k++) dst[k] = 1.0f;
            break;
        case INIT_ZEROS: memset(dst, 0, t->numel * sizeof(float)); break;
        }
        be_memcpy(m->be, m->params + t->offset, dst, t->numel * sizeof(float), BE_H2D);
    }
    free(dst);
}

/* ---- activations ---- */

void *model_carve(carver *cv, size_t bytes, const char *what)
{
    cv->bytes += (bytes + 63) & ~(size_t)63;
    return cv->ar ? td_arena_alloc(cv->ar, bytes, what) : NULL;
}

void model_carve_kept(carver *cv, const gpt_model *m, kept_buf *k, int64_t count, int lowp, const char *what)
{
    k->dt = lowp ? m->be->gemm_dtype : BE_F32;
    k->p = model_carve(cv, (size_t)count * be_dtype_size(k->dt), what);
}

float *model_kept_stage(const gpt_model *m, const kept_buf *k)
{
    return k->dt == BE_F32 ? k->p : m->scratch->lp_stage;
}

void model_kept_done(const gpt_model *m, const kept_buf *k, size_t n)
{
    if (k->dt != BE_F32) be_convert(m->be, k->p, k->dt, m->scratch->lp_stage, BE_F32, n);
}

/* One micro-batch's activations (ar NULL: only counts the bytes); with recomputation, some
 * point into `shared`. */
static size_t acts_layout(gpt_model *m, gpt_acts *a, const layer_acts *shared, td_arena *ar)
{
    carver cv = {ar, 0, 0};
    int64_t BT = (int64_t)m->mbs * m->cfg.seq, h = m->cfg.hidden;
    CARVE(&cv, a->ids, int32_t, BT);
    CARVE(&cv, a->targets, int32_t, BT);
    CARVE(&cv, a->input, float, (int64_t)m->mbs * m->seq_l * h);
    if (gpt_is_bert(&m->cfg)) CARVE(&cv, a->types, int32_t, (int64_t)m->mbs * m->seq_l);
    recompute_layers_carve(&cv, m, a->layers, shared);
    if (m->last) {
        norm_acts_carve(&cv, m, &a->lnf);
        CARVE(&cv, a->logits, float, BT * m->vocab_l);
        CARVE(&cv, a->losses, float, BT);
        CARVE(&cv, a->maxv, float, BT);
        CARVE(&cv, a->sumexp, float, BT);
        CARVE(&cv, a->tlogit, float, BT);
        if (gpt_is_bert(&m->cfg)) bert_head_acts_carve(&cv, m, a->bert);
    }
    return cv.bytes;
}

static size_t scratch_layout(gpt_model *m, struct gpt_scratch *s, td_arena *ar)
{
    carver cv = {ar, 0, 0};
    int64_t BT = (int64_t)m->mbs * m->cfg.seq, h = m->cfg.hidden;
    CARVE(&cv, s->branch, float, BT * h);
    CARVE(&cv, s->dres, float, BT * h);
    CARVE(&cv, s->dln, float, BT * h);
    CARVE(&cv, s->dtmp, float, BT * h);
    int gqa = gpt_gqa(&m->cfg);
    CARVE(&cv, s->dqkv, float, BT * (gqa ? m->q_l : 3 * m->q_l));
    if (gqa) CARVE(&cv, s->dkv, float, BT * 2 * m->kv_l);
    CARVE(&cv, s->datty, float, BT * m->q_l);
    CARVE(&cv, s->dfch, float, BT * (m->cfg.swiglu ? 2 : 1) * m->ffn_l);
    CARVE(&cv, s->dfch_gelu, float, BT * m->ffn_l);
    CARVE(&cv, s->dloss, float, BT);
    if (m->sp) {
        int64_t BTl = (int64_t)m->mbs * m->seq_l;
        CARVE(&cv, s->gath, float, BT * h);
        CARVE(&cv, s->dgath, float, BT * h);
        CARVE(&cv, s->sptmp, float, BT * h);
        CARVE(&cv, s->branch_l, float, BTl * h);
        CARVE(&cv, s->dln_l, float, BTl * h);
    }
    if (m->be->gemm_dtype != BE_F32) {
        int64_t w = h > m->q_l ? h : m->q_l;
        CARVE(&cv, s->lp_stage, float, BT * (w > m->ffn_l ? w : m->ffn_l));
    }
    if (gpt_is_bert(&m->cfg) && m->last) {
        CARVE(&cv, s->dcls, float, (int64_t)m->mbs * h);
        CARVE(&cv, s->dpool, float, (int64_t)m->mbs * h);
    }
    return cv.bytes;
}

/* The last stage's output layer: the untied output weight, or the copy of the word embedding
 * that a tied model keeps on its last stage (same stream, so it starts equal). */
static void head_tensor(table_builder *tb, gpt_model *m)
{
    int64_t h = m->cfg.hidden, V = m->cfg.padded_vocab;
    int untied = m->cfg.untied;
    model_add_tensor(tb, &m->p.head_w, &m->g.head_w, INIT_NORMAL, model_stream(-1, untied ? 5 : 1),
                     untied ? "output_layer.weight" : "embedding.word.weight", V, h, 0, 1, 0);
    if (!untied) m->table[m->ntensors - 1].embedding_copy = 1;
}

/* The whole model's logical tensors in the canonical order (see gpt_canonical_offset), built
 * as a one-rank table into m (no buffers). */
void gpt_logical_table(const gpt_config *cfg, gpt_model *m)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->tp = 1;
    table_builder tb = {m, NULL, 0, 1, 0};
    gpt_layer p, g;
    float *w, *dw;
    model_add_tensor(&tb, &w, &dw, INIT_NORMAL, 0, "embedding.word.weight", cfg->padded_vocab, cfg->hidden, 0, 1, 0);
    if (cfg->pos == GPT_POS_LEARNED)
        model_add_tensor(&tb, &w, &dw, INIT_NORMAL, 0, "embedding.position.weight", cfg->max_pos, cfg->hidden, -1, 1,
                         0);
    if (gpt_is_bert(cfg))
        model_add_tensor(&tb, &w, &dw, INIT_NORMAL, 0, "embedding.tokentype.weight", GPT_BERT_TOKENTYPES, cfg->hidden,
                         -1, 1, 0);
    for (int l = 0; l < cfg->num_layers; l++) layer_tensors(&tb, l, &p, &g);
    norm_tensors(&tb, -1, 3, "final_norm", &m->p.lnf, &m->g.lnf);
    if (cfg->untied) head_tensor(&tb, m);
    if (gpt_is_bert(cfg)) bert_head_tensors(&tb, m);
    free(tb.slots);
}

gpt_model *gpt_create(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                      int mbs, int max_inflight)
{
    return gpt_create_recompute(cfg, ps, be, layer0, nlayers, mbs, max_inflight, NULL);
}

gpt_model *gpt_create_recompute(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                                int mbs, int max_inflight, const gpt_recompute *rc)
{
    gpt_model *m = td_xcalloc(1, sizeof *m);
    if (rc) m->rc = *rc;
    m->cfg = *cfg;
    m->ps = ps;
    m->be = be;
    m->layer0 = layer0;
    m->nlayers = nlayers;
    /* by pipeline position as well as by layers: a stage of an uneven split may hold no layer */
    m->first = layer0 == 0 && ps->pp_rank == 0;
    m->last = layer0 + nlayers == cfg->num_layers && ps->pp_rank == ps->pp - 1;
    m->tp = ps->tp;
    TD_ASSERT(cfg->heads % m->tp == 0 && gpt_groups(cfg) % m->tp == 0 && cfg->heads % gpt_groups(cfg) == 0 &&
              cfg->ffn % m->tp == 0 && cfg->padded_vocab % m->tp == 0);
    m->heads_l = cfg->heads / m->tp;
    m->groups_l = gpt_groups(cfg) / m->tp;
    m->q_l = m->heads_l * gpt_head_dim(cfg);
    m->kv_l = m->groups_l * gpt_head_dim(cfg);
    m->ffn_l = cfg->ffn / m->tp;
    m->vocab_l = cfg->padded_vocab / m->tp;
    m->vstart = m->vocab_l * ps->tp_rank;
    m->mbs = mbs;
    m->sp = ps->sequence_parallel;
    TD_ASSERT(!m->sp || cfg->seq % m->tp == 0);
    m->seq_l = m->sp ? cfg->seq / m->tp : cfg->seq;
    m->max_inflight = max_inflight;

    /* the tensor table, in reverse backprop order */
    table_builder tb = {m, NULL, 0, m->tp, ps->tp_rank};
    m->p.layers = td_xcalloc((size_t)nlayers, sizeof(gpt_layer));
    m->g.layers = td_xcalloc((size_t)nlayers, sizeof(gpt_layer));
    if (m->last) {
        if (cfg->untied || !m->first) head_tensor(&tb, m);
        if (gpt_is_bert(cfg)) bert_head_tensors(&tb, m);
        norm_tensors(&tb, -1, 3, "final_norm", &m->p.lnf, &m->g.lnf);
    }
    for (int l = nlayers - 1; l >= 0; l--) layer_tensors(&tb, layer0 + l, &m->p.layers[l], &m->g.layers[l]);
    if (m->first) embedding_tensors(&tb, m);

    m->params = be_alloc(be, m->numel * sizeof(float));
    m->grads = be_alloc(be, m->numel * sizeof(float));
    be_zero(be, m->grads, m->numel);
    for (int i = 0; i < m->ntensors; i++) {
        *tb.slots[i].param = m->params + m->table[i].offset;
        *tb.slots[i].grad = m->grads + m->table[i].offset;
    }
    if (m->last && m->first && !cfg->untied) {
        m->p.head_w = m->p.wte;
        m->g.head_w = m->g.wte;
    }
    init_params(m, tb.slots);
    free(tb.slots);

    /* activations: max_inflight slots, what recomputation shares among them and the shared
     * scratch, carved from one arena */
    layer_acts *shared = td_xcalloc((size_t)(nlayers ? nlayers : 1), sizeof(layer_acts));
    m->slots = td_xcalloc((size_t)max_inflight, sizeof(gpt_acts));
    m->scratch = td_xcalloc(1, sizeof *m->scratch);
    m->scratch->host = td_xmalloc((size_t)mbs * cfg->seq * sizeof(float));
    for (int i = 0; i < max_inflight; i++) {
        gpt_acts *a = &m->slots[i];
        a->layers = td_xcalloc((size_t)nlayers, sizeof(layer_acts));
        a->sample = td_xcalloc((size_t)mbs, sizeof(int64_t));
        if (gpt_is_bert(cfg)) {
            a->klen = td_xcalloc((size_t)mbs, sizeof(int32_t));
            a->sop = td_xcalloc((size_t)mbs, sizeof(int32_t));
            a->labels = td_xcalloc((size_t)mbs * cfg->seq, sizeof(int32_t));
            a->bert = td_xcalloc(1, bert_head_acts_size());
        }
    }
    if (gpt_is_bert(cfg) && m->last) {
        size_t big = 3 * (size_t)mbs * cfg->seq, hh = 2 * (size_t)mbs * cfg->hidden;
        m->scratch->host_big = td_xmalloc((big > hh ? big : hh) * sizeof(float));
    }
    m->acts_bytes = acts_layout(m, &m->slots[0], shared, NULL);
    m->rc_bytes = recompute_shared_layout(m, shared, NULL);
    size_t total = m->acts_bytes * (size_t)max_inflight + m->rc_bytes + scratch_layout(m, m->scratch, NULL) + 64;
    td_arena_wrap(&m->arena, be_alloc(be, total), total);
    recompute_shared_layout(m, shared, &m->arena);
    for (int i = 0; i < max_inflight; i++) acts_layout(m, &m->slots[i], shared, &m->arena);
    scratch_layout(m, m->scratch, &m->arena);
    free(shared);
    return m;
}

void gpt_free(gpt_model *m)
{
    if (!m) return;
    be_dfree(m->be, m->arena.base);
    for (int i = 0; i < m->max_inflight; i++) {
        gpt_acts *a = &m->slots[i];
        free(a->layers);
        free(a->sample);
        free(a->klen);
        free(a->sop);
        free(a->labels);
        free(a->bert);
    }
    free(m->slots);
    free(m->scratch->host);
    free(m->scratch->host_big);
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

be_drop model_drop(const gpt_model *m, const gpt_acts *a, float p, int site, int unit0)
{
    be_drop d = {p, m->cfg.seed, a->sample, site, 0, unit0};
    return d;
}

/* Where layer l's parameters begin in the buffer (l = -1: the embeddings): the end of layer
 * l + 1's, whose last tensor is ln1.weight; the top layer's reach down to 0 (the head). */
static size_t layer_start(const gpt_model *m, int l)
{
    if (l + 1 >= m->nlayers) return 0;
    return (size_t)(m->p.layers[l + 1].ln1.w - m->params) + (size_t)m->cfg.hidden;
}

/* BERT's inputs into the slot: the lengths and labels (host), this rank's positions' token types. */
static void bert_inputs(gpt_model *m, gpt_acts *a, const gpt_bert_batch *bert, const int32_t *targets, int B)
{
    TD_ASSERT(bert && bert->lengths);
    int T = m->cfg.seq, Tl = m->seq_l, pos0 = model_pos0(m);
    memcpy(a->klen, bert->lengths, (size_t)B * sizeof(int32_t));
    a->mlm_weight = bert->mlm_weight;
    a->sop_weight = bert->sop_weight;
    if (m->last) {
        memcpy(a->sop, bert->sop, (size_t)B * sizeof(int32_t));
        memcpy(a->labels, targets, (size_t)B * T * sizeof(int32_t));
    }
    if (m->first) /* row by row: under sequence parallelism a slice of each sample */
        for (int b = 0; b < B; b++)
            be_memcpy(m->be, a->types + (size_t)b * Tl, bert->types + (size_t)b * T + pos0, (size_t)Tl * sizeof(int32_t),
                      BE_H2D);
}

float *gpt_forward(gpt_model *m, gpt_acts *a, const int32_t *ids, const float *input, const int32_t *targets,
                   const gpt_bert_batch *bert, const int64_t *sample, int B, int training, double *loss_sum)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    int T = m->cfg.seq, BT = B * T, h = m->cfg.hidden;
    TD_ASSERT(B >= 1 && B <= m->mbs);
    a->B = B;
    a->training = training;
    memcpy(a->sample, sample, (size_t)B * sizeof(int64_t));
    if (gpt_is_bert(&m->cfg)) bert_inputs(m, a, bert, targets, B);

    if (m->params_needed) m->params_needed(m->params_needed_user, layer_start(m, -1));
    if (m->first) {
        be_memcpy(be, a->ids, ids, (size_t)BT * sizeof(int32_t), BE_H2D);
        be_drop d = model_drop(m, a, training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
        embedding_fwd(m, a->input, a->ids, a->types, B, &d);
    } else if (input != a->input) {
        be_copy(be, a->input, input, (size_t)B * m->seq_l * h);
    }
    const float *x = a->input;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->params_needed) m->params_needed(m->params_needed_user, layer_start(m, l));
        layer_fwd(m, a, l, x);
        x = a->layers[l].out;
    }
    if (!m->last) return (float *)x;

    be_memcpy(be, a->targets, targets, (size_t)BT * sizeof(int32_t), BE_H2D);
    norm_fwd(m, &a->lnf, &m->p.lnf, x, B * m->seq_l);
    if (gpt_is_bert(&m->cfg)) {
        double loss = bert_heads_fwd(m, a, x);
        if (loss_sum) *loss_sum = loss;
        return NULL;
    }
    tp_column_linear_fwd(be, tp, a->logits, model_sp_input(m, &a->lnf.out, B), m->p.head_w, NULL, BT, h, m->vocab_l);
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

void gpt_bert_stats(const gpt_acts *a, double stats[GPT_BERT_NSTATS])
{
    for (int i = 0; i < GPT_BERT_NSTATS; i++) stats[i] += a->stats[i];
}

/* ---- backward ---- */

/* Sequence parallelism: each tp rank's norm saw only its positions, so in the iteration's last
 * backward (grads_final) the accumulated weight and bias grads are summed over the group, before
 * data parallelism takes them (Megatron's all-reduce of the sequence-parallel grads). */
static void sp_sum_norm_grads(const gpt_model *m, norm_params *g)
{
    if (!m->sp || !m->grads_final) return;
    comm_allreduce(m->ps->tp_group, g->w, (size_t)m->cfg.hidden, COMM_F32, COMM_SUM);
    if (g->b) comm_allreduce(m->ps->tp_group, g->b, (size_t)m->cfg.hidden, COMM_F32, COMM_SUM);
}

/* ... and so for BERT's LM-head transform, which runs on this rank's positions. */
static void sp_sum_bert_grads(const gpt_model *m)
{
    if (!m->sp || !m->grads_final) return;
    size_t h = (size_t)m->cfg.hidden;
    norm_params g = m->g.lm_norm;
    sp_sum_norm_grads(m, &g);
    comm_allreduce(m->ps->tp_group, m->g.lm_dense_w, h * h, COMM_F32, COMM_SUM);
    comm_allreduce(m->ps->tp_group, m->g.lm_dense_b, h, COMM_F32, COMM_SUM);
}

float *gpt_backward(gpt_model *m, gpt_acts *a, const float *doutput, float loss_scale)
{
    const backend *be = m->be;
    const comm *tp = m->ps->tp_group;
    struct gpt_scratch *s = m->scratch;
    int B = a->B, T = m->cfg.seq, BT = B * T, BTl = B * m->seq_l, h = m->cfg.hidden;

    if (m->last && gpt_is_bert(&m->cfg)) {
        bert_heads_bwd(m, a, m->nlayers ? a->layers[m->nlayers - 1].out : a->input, loss_scale);
        sp_sum_bert_grads(m);
        sp_sum_norm_grads(m, &m->g.lnf);
    } else if (m->last) {
        for (int i = 0; i < BT; i++) s->host[i] = loss_scale;
        be_memcpy(be, s->dloss, s->host, (size_t)BT * sizeof(float), BE_H2D);
        be_ce_bwd(be, a->logits, a->maxv, a->sumexp, a->targets, s->dloss, BT, m->vocab_l,
                  be_vocab_real(m->cfg.vocab, m->vstart, m->vocab_l), m->vstart);
        tp_column_linear_bwd(be, model_tp_reduce(m), s->dln, m->g.head_w, NULL, a->logits,
                             model_sp_input(m, &a->lnf.out, B), m->p.head_w, BT, h, m->vocab_l);
        const float *x = m->nlayers ? a->layers[m->nlayers - 1].out : a->input;
        be_zero(be, s->dres, (size_t)BTl * h);
        norm_bwd(m, s->dres, &m->g.lnf, model_sp_norm_grad(m, B), x, &m->p.lnf, &a->lnf, BTl);
        sp_sum_norm_grads(m, &m->g.lnf);
    } else {
        be_copy(be, s->dres, doutput, (size_t)BTl * h);
    }
    for (int l = m->nlayers - 1; l >= 0; l--) {
        recompute_before_bwd(m, a, l);
        layer_bwd(m, a, l, l ? a->layers[l - 1].out : a->input);
        sp_sum_norm_grads(m, &m->g.layers[l].ln1);
        sp_sum_norm_grads(m, &m->g.layers[l].ln2);
        /* layer l's last tensor in the buffer is ln1.weight: everything up to its end is final */
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, (size_t)(m->g.layers[l].ln1.w - m->grads) + (size_t)h);
    }
    if (!m->first) {
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
        return s->dres;
    }

    be_drop d = model_drop(m, a, a->training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
    embedding_bwd(m, s->dres, a->ids, a->types, B, &d);
    if (m->sp && m->grads_final && m->g.wpe)
        comm_allreduce(tp, m->g.wpe, (size_t)m->cfg.max_pos * h, COMM_F32, COMM_SUM);
    if (m->sp && m->grads_final && m->g.tte)
        comm_allreduce(tp, m->g.tte, (size_t)GPT_BERT_TOKENTYPES * h, COMM_F32, COMM_SUM);
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
    return NULL;
}
