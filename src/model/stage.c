/* A pipeline stage of the model: see include/model/trident/gpt.h. A stage is the embedding (first
 * stage), a range of layers (layer.c: slots filled with blocks), and the final norm and the head
 * with its loss (last stage). It owns the buffers: parameters and gradients laid out by the
 * builder's table in reverse backprop order (head, final norm, layers last to first, positions,
 * words), so gradient buckets close in the order the backward produces them; and one arena of
 * activations. It reaches the blocks only through their ops. */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "tensor_parallel.h"

/* A micro-batch's inputs on the device (what kernels read) and the stage input: the ids and
 * targets, the input (B, seq_l, h), the first stage's token types, the sample indices (dropout
 * keys) and, for bidirectional attention, the lengths. */
static void inputs_carve(carver *cv, const gpt_model *m, gpt_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->seq_c, h = m->cfg.hidden;
    CARVE(cv, a->ids, int32_t, BT);
    CARVE(cv, a->targets, int32_t, BT);
    CARVE(cv, a->input, float, (int64_t)m->mbs * m->seq_l * h);
    if (m->first && gpt_tokentypes(&m->cfg)) CARVE(cv, a->types, int32_t, (int64_t)m->mbs * m->seq_l);
    CARVE(cv, a->sample, int64_t, m->mbs);
    if (gpt_bidirectional(&m->cfg)) CARVE(cv, a->lengths, int32_t, m->mbs);
}

/* The last stage's: the final norm, the logits and per-token losses every head computes, the
 * head's own. */
static void head_carve(carver *cv, const gpt_model *m, gpt_acts *a)
{
    int64_t BT = (int64_t)m->mbs * m->seq_c;
    m->lnf.ops->acts(cv, m, a->lnf);
    CARVE(cv, a->logits, float, BT * m->vocab_l);
    CARVE(cv, a->losses, float, BT);
    CARVE(cv, a->maxv, float, BT);
    CARVE(cv, a->sumexp, float, BT);
    CARVE(cv, a->tlogit, float, BT);
    m->head->acts(cv, m, a->head);
}

/* One micro-batch's activations (ar NULL: only counts the bytes); with recomputation, some
 * point into `shared`. */
static size_t acts_layout(gpt_model *m, gpt_acts *a, const layer_acts *shared, td_arena *ar)
{
    carver cv = model_carver(m, ar);
    inputs_carve(&cv, m, a);
    recompute_layers_carve(&cv, m, a->layers, shared);
    if (m->last) head_carve(&cv, m, a);
    return cv.bytes;
}

/* The shared scratch, each layer slot's kind's and the head's (cv: the stage's carver). */
static void scratch_carve(carver *cv, const gpt_model *m, struct gpt_scratch *s)
{
    int64_t BT = (int64_t)m->mbs * m->seq_c, h = m->cfg.hidden;
    if (cv->kept_dt != BE_F32) { /* first: the kept buffers carved after it point at it */
        int64_t w = h > m->q_l ? h : m->q_l;
        CARVE(cv, s->lp_stage, float, BT * (w > m->ffn_l ? w : m->ffn_l));
    }
    CARVE(cv, s->branch, float, BT * h);
    CARVE(cv, s->dres, float, BT * h);
    CARVE(cv, s->dln, float, BT * h);
    CARVE(cv, s->dtmp, float, BT * h);
    for (int i = 0; i < s->nkinds; i++) s->kind[i].ops->scratch(cv, m, s->kind[i].s);
    CARVE(cv, s->dloss, float, BT);
    if (m->sp) {
        int64_t BTl = (int64_t)m->mbs * m->seq_l;
        CARVE(cv, s->gath, float, BT * h);
        CARVE(cv, s->dgath, float, BT * h);
        CARVE(cv, s->sptmp, float, BT * h);
        CARVE(cv, s->branch_l, float, BTl * h);
        CARVE(cv, s->dln_l, float, BTl * h);
    }
    if (m->last && m->head->scratch) m->head->scratch(cv, m, s->head);
}

static size_t scratch_layout(gpt_model *m, struct gpt_scratch *s, td_arena *ar)
{
    carver cv = model_carver(m, ar);
    scratch_carve(&cv, m, s);
    return cv.bytes;
}

/* Host memory of the scratch: the losses' staging and the head's host work. */
static size_t scratch_host_floats(const gpt_model *m)
{
    size_t n = (size_t)m->mbs * m->seq_c;
    if (m->last && m->head->host_floats) n += m->head->host_floats(m);
    return n;
}

/* The stage's slots and head: kinds from the config (each layer's by its global index), parameter
 * structs allocated. */
static void slots_init(gpt_model *m)
{
    m->layers = td_xcalloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof(gpt_layer));
    for (int l = 0; l < m->nlayers; l++) layer_init(&m->layers[l], &m->cfg, m->layer0 + l);
    block_slot_init(&m->lnf, layer_spec_norm(&m->cfg));
    m->head = model_head_of(&m->cfg);
    m->head_p = td_xcalloc(1, m->head->params_size ? m->head->params_size : 1);
    m->head_g = td_xcalloc(1, m->head->params_size ? m->head->params_size : 1);
}

static void slots_free(gpt_model *m)
{
    for (int l = 0; l < m->nlayers; l++) layer_free(&m->layers[l]);
    free(m->layers);
    block_slot_free(&m->lnf);
    free(m->head_p);
    free(m->head_g);
}

/* Takes the builder's table into m. */
static void take_table(gpt_model *m, table_builder *tb)
{
    m->table = tb->table;
    m->ntensors = tb->n;
    m->numel = m->numel_all = tb->numel;
}

void gpt_logical_table(const gpt_config *cfg, gpt_model *m)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->tp = 1;
    m->nlayers = cfg->num_layers;
    slots_init(m);
    table_builder tb = {cfg, 1, 0, NULL, NULL, 0, 0, 0, 1, 0, gpt_lora(cfg)};
    embedding_block.tensors(&tb, &m->p, &m->g, 1); /* GPT-2's order: word, position (then token types) */
    for (int l = 0; l < cfg->num_layers; l++) layer_tensors(&tb, l, &m->layers[l]);
    block_slot_tensors(&m->lnf, &tb, -1, 3, "final_norm");
    m->head->tensors(&tb, m, cfg->untied);
    take_table(m, &tb);
    free(tb.slots);
    slots_free(m);
    m->layers = NULL;
}

gpt_model *gpt_create(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                      int mbs, int max_inflight)
{
    return gpt_create_recompute(cfg, ps, be, layer0, nlayers, mbs, max_inflight, NULL);
}

/* The sizes of the stage on this rank (checked by gpt_create). */
static void stage_sizes(gpt_model *m, const gpt_config *cfg, const ps_state *ps)
{
    m->tp = ps->tp;
    m->heads_l = cfg->heads / m->tp;
    m->groups_l = gpt_groups(cfg) / m->tp;
    m->q_l = m->heads_l * gpt_head_dim(cfg);
    m->kv_l = m->groups_l * gpt_head_dim(cfg);
    m->ffn_l = cfg->ffn / m->tp;
    m->vocab_l = cfg->padded_vocab / m->tp;
    m->vstart = m->vocab_l * ps->tp_rank;
    m->sp = ps->sequence_parallel;
    m->cp = ps->cp > 1 ? ps->cp : 1;
    m->cp_rank = m->cp > 1 ? ps->cp_rank : 0;
    m->seq_c = cfg->seq / m->cp;
    m->seq_l = m->sp ? m->seq_c / m->tp : m->seq_c;
}

/* The stage's tensors into tb in reverse backprop order. */
static void stage_register(gpt_model *m, table_builder *tb)
{
    const gpt_config *cfg = &m->cfg;
    if (m->last) {
        m->head->tensors(tb, m, cfg->untied || !m->first);
        block_slot_tensors(&m->lnf, tb, -1, 3, "final_norm");
    }
    for (int l = m->nlayers - 1; l >= 0; l--) layer_tensors(tb, m->layer0 + l, &m->layers[l]);
    if (m->first) embedding_block.tensors(tb, &m->p, &m->g, 0);
}

/* The tensor table in reverse backprop order, the buffers, the parameters initialised; for a
 * checkpoint to fill (for_checkpoint): the parameters only, left as allocated. */
static void stage_tensors(gpt_model *m, int for_checkpoint)
{
    const gpt_config *cfg = &m->cfg;
    table_builder tb = {cfg, m->tp, m->ps->tp_rank, NULL, NULL, 0, 0, 0, m->ps->ep, m->ps->ep_rank, gpt_lora(cfg)};
    stage_register(m, &tb);
    size_t trained = model_table_order(&tb);
    take_table(m, &tb);
    m->numel = trained;
    m->params = be_alloc(m->be, m->numel_all * sizeof(float));
    if (!for_checkpoint) {
        m->grads = be_alloc(m->be, m->numel * sizeof(float));
        be_zero(m->be, m->grads, m->numel);
    }
    model_table_point(&tb, m->params, m->grads);
    if (m->last && m->first && !cfg->untied) {
        m->p.head_w = m->p.wte;
        m->g.head_w = m->g.wte;
    }
    if (!for_checkpoint) model_table_init(&tb, m->be, m->params);
    free(tb.slots);
}

/* One activation slot's host-side structs. */
static void acts_alloc(gpt_model *m, gpt_acts *a)
{
    int mbs = m->mbs;
    a->layers = td_xcalloc((size_t)(m->nlayers ? m->nlayers : 1), sizeof(layer_acts));
    for (int l = 0; l < m->nlayers; l++) layer_acts_alloc(&m->layers[l], &a->layers[l]);
    a->lnf = td_xcalloc(1, m->lnf.ops->acts_size);
    a->head = td_xcalloc(1, m->head->acts_size ? m->head->acts_size : 1);
    a->sample_labels = td_xcalloc((size_t)mbs, sizeof(int32_t));
    a->targets_host = td_xcalloc((size_t)mbs * m->seq_c, sizeof(int32_t));
    if (m->cp > 1) {
        a->cp_host = td_xcalloc((size_t)mbs * m->seq_c, sizeof(int32_t));
        a->cp_mask = td_xcalloc((size_t)mbs * m->seq_c, sizeof(float));
    }
}

static void acts_free(gpt_model *m, gpt_acts *a)
{
    for (int l = 0; l < m->nlayers; l++) layer_acts_free(&m->layers[l], &a->layers[l]);
    free(a->layers);
    free(a->lnf);
    if (m->head->acts_free) m->head->acts_free(a->head);
    free(a->head);
    free(a->sample_labels);
    free(a->targets_host);
    free(a->cp_host);
    free(a->cp_mask);
    int32_t *packed[3] = {a->seg_buf, a->pos_buf, a->posl_buf};
    for (int i = 0; i < 3; i++)
        if (packed[i]) be_dfree(m->be, packed[i]);
}

/* The kinds' scratch structs (the buffers are carved): one for each kind with a scratch among the
 * stage's layer slots, in the order the layers and their slots first use them. */
static void scratch_alloc(const gpt_model *m, struct gpt_scratch *s)
{
    for (int l = 0; l < m->nlayers; l++)
        for (int k = 0; k < GPT_LAYER_NSLOTS; k++) {
            const block_ops *ops = m->layers[l].slot[k].ops;
            int known = 0;
            for (int i = 0; i < s->nkinds; i++) known |= s->kind[i].ops == ops;
            if (known || !ops->scratch_size) continue;
            TD_ASSERT(s->nkinds < GPT_SCRATCH_KINDS);
            s->kind[s->nkinds].ops = ops;
            s->kind[s->nkinds++].s = td_xcalloc(1, ops->scratch_size);
        }
    if (m->last && m->head->scratch_size) s->head = td_xcalloc(1, m->head->scratch_size);
}

static void scratch_free(struct gpt_scratch *s)
{
    for (int i = 0; i < s->nkinds; i++) free(s->kind[i].s);
    s->nkinds = 0;
    free(s->head);
}

/* The arena: max_inflight activation slots, what recomputation shares among them and the shared
 * scratch (first: the kept buffers carved after it stage through it). */
static void stage_acts(gpt_model *m)
{
    int nl = m->nlayers ? m->nlayers : 1;
    layer_acts *shared = td_xcalloc((size_t)nl, sizeof(layer_acts));
    for (int l = 0; l < m->nlayers; l++) layer_acts_alloc(&m->layers[l], &shared[l]);
    m->slots = td_xcalloc((size_t)m->max_inflight, sizeof(gpt_acts));
    m->scratch = td_xcalloc(1, sizeof *m->scratch);
    struct gpt_scratch *s = m->scratch;
    s->host = td_xmalloc((size_t)m->mbs * m->seq_c * sizeof(float));
    scratch_alloc(m, s);
    if (m->last && m->head->host_floats) s->head_host = td_xmalloc(m->head->host_floats(m) * sizeof(float));
    for (int i = 0; i < m->max_inflight; i++) acts_alloc(m, &m->slots[i]);

    size_t scratch_bytes = scratch_layout(m, s, NULL);
    m->acts_bytes = acts_layout(m, &m->slots[0], shared, NULL);
    m->rc_bytes = recompute_shared_layout(m, shared, NULL);
    size_t total = m->acts_bytes * (size_t)m->max_inflight + m->rc_bytes + scratch_bytes + 64;
    td_arena_wrap(&m->arena, be_alloc(m->be, total), total);
    scratch_layout(m, s, &m->arena);
    recompute_shared_layout(m, shared, &m->arena);
    for (int i = 0; i < m->max_inflight; i++) acts_layout(m, &m->slots[i], shared, &m->arena);
    for (int l = 0; l < m->nlayers; l++) layer_acts_free(&m->layers[l], &shared[l]);
    free(shared);
}

static gpt_model *stage_create(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                               int mbs, int max_inflight, const gpt_recompute *rc, int for_checkpoint)
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
    m->mbs = mbs;
    m->max_inflight = max_inflight;
    TD_ASSERT(cfg->heads % ps->tp == 0 && gpt_groups(cfg) % ps->tp == 0 && cfg->heads % gpt_groups(cfg) == 0 &&
              cfg->ffn % ps->tp == 0 && cfg->padded_vocab % ps->tp == 0);
    TD_ASSERT(ps->cp <= 1 || cfg->seq % (2 * ps->cp) == 0);
    TD_ASSERT(!ps->sequence_parallel || cfg->seq / (ps->cp > 1 ? ps->cp : 1) % ps->tp == 0);
    stage_sizes(m, cfg, ps);
    if (m->cp > 1 && ps->cp_comm != PS_CP_A2A) { /* every cp rank's positions, for the attention's block calls */
        int32_t *pos = td_xmalloc((size_t)m->cp * m->seq_c * sizeof(int32_t));
        for (int r = 0; r < m->cp; r++)
            for (int t = 0, L = m->seq_c / 2; t < m->seq_c; t++)
                pos[(size_t)r * m->seq_c + t] = (t < L ? r : 2 * m->cp - 1 - r) * L + t % L;
        m->cp_pos = be_alloc(be, (size_t)m->cp * m->seq_c * sizeof(int32_t));
        be_memcpy(be, m->cp_pos, pos, (size_t)m->cp * m->seq_c * sizeof(int32_t), BE_H2D);
        free(pos);
    }
    slots_init(m);
    stage_tensors(m, for_checkpoint);
    stage_acts(m);
    return m;
}

gpt_model *gpt_create_recompute(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                                int mbs, int max_inflight, const gpt_recompute *rc)
{
    return stage_create(cfg, ps, be, layer0, nlayers, mbs, max_inflight, rc, 0);
}

gpt_model *gpt_create_for_checkpoint(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0,
                                     int nlayers, int mbs, int max_inflight)
{
    return stage_create(cfg, ps, be, layer0, nlayers, mbs, max_inflight, NULL, 1);
}

void gpt_free(gpt_model *m)
{
    if (!m) return;
    free(m->layer_stats);
    be_dfree(m->be, m->arena.base);
    for (int i = 0; i < m->max_inflight; i++) acts_free(m, &m->slots[i]);
    free(m->slots);
    struct gpt_scratch *s = m->scratch;
    scratch_free(s);
    free(s->host);
    free(s->head_host);
    free(s);
    be_dfree(m->be, m->params);
    be_dfree(m->be, m->grads);
    if (m->cp_pos) be_dfree(m->be, m->cp_pos);
    slots_free(m);
    free(m->table);
    free(m);
}

int gpt_head_transform(const gpt_config *c) { return model_head_of(c)->transform; }

/* A config to count a stage of tp ranks with: its padded vocabulary a multiple of tp, as a run
 * pads it (a plan may ask about a vocabulary padded for one rank). */
static gpt_config counted(const gpt_config *cfg, int tp)
{
    gpt_config c = *cfg;
    c.padded_vocab = (c.padded_vocab + tp - 1) / tp * tp;
    return c;
}

/* The stage's parameters (trained: the trained ones only). */
static int64_t stage_numel(const gpt_config *config, int tp, int ep, int layer0, int nlayers, int first, int last,
                           int trained)
{
    gpt_config cf = counted(config, tp);
    const gpt_config *cfg = &cf;
    ps_state ps = {0};
    ps.tp = tp, ps.pp = 1, ps.ep = ep;
    gpt_model m = {0};
    m.cfg = *cfg, m.ps = &ps, m.layer0 = layer0, m.nlayers = nlayers, m.first = first, m.last = last;
    stage_sizes(&m, cfg, &ps);
    slots_init(&m);
    table_builder tb = {cfg, tp, 0, NULL, NULL, 0, 0, 0, ep, 0, gpt_lora(cfg)};
    stage_register(&m, &tb);
    size_t n = trained ? model_table_order(&tb) : tb.numel;
    free(tb.table);
    free(tb.slots);
    slots_free(&m);
    return (int64_t)n;
}

int64_t gpt_stage_numel(const gpt_config *config, int tp, int ep, int layer0, int nlayers, int first, int last)
{
    return stage_numel(config, tp, ep, layer0, nlayers, first, last, 0);
}

int64_t gpt_stage_trained_numel(const gpt_config *config, int tp, int ep, int layer0, int nlayers, int first,
                                int last)
{
    return stage_numel(config, tp, ep, layer0, nlayers, first, last, 1);
}

void gpt_layout_bytes_of(const gpt_config *config, int tp, int cp, int cp_comm, int ep, int sp, int mbs, int lowp,
                         int layer, gpt_layout_bytes *out)
{
    gpt_config cf = counted(config, tp);
    const gpt_config *cfg = &cf;
    ps_state ps = {0};
    ps.tp = tp, ps.pp = 1, ps.ep = ep, ps.sequence_parallel = sp, ps.cp = cp, ps.cp_comm = cp_comm;
    gpt_model m = {0};
    struct gpt_scratch s = {0};
    m.cfg = *cfg, m.ps = &ps, m.mbs = mbs, m.layer0 = layer, m.nlayers = 1, m.first = m.last = 1, m.scratch = &s;
    stage_sizes(&m, cfg, &ps);
    slots_init(&m);
    scratch_alloc(&m, &s);
    gpt_acts a = {0};
    acts_alloc(&m, &a);
    const gpt_layer *L = &m.layers[0];
    carver base = {NULL, 0, 0, lowp ? BE_BF16 : BE_F32, NULL, 0}, cv;
    cv = base, inputs_carve(&cv, &m, &a), out->inputs = (double)cv.raw;
    out->types = gpt_tokentypes(cfg) ? (double)mbs * m.seq_l * sizeof(int32_t) : 0;
    out->inputs -= out->types;
    cv = base, layer_acts_carve(&cv, &m, L, &a.layers[0]), out->layer = (double)cv.raw;
    cv = base, cv.selective = 1, layer_acts_carve(&cv, &m, L, &a.layers[0]), out->layer_selective = (double)cv.raw;
    out->layer_redo = out->layer - out->layer_selective;
    cv = base, head_carve(&cv, &m, &a), out->head = (double)cv.raw;
    cv = base, scratch_carve(&cv, &m, &s), out->scratch = (double)cv.raw;
    out->scratch_head = 0;
    if (m.head->scratch) {
        cv = base, m.head->scratch(&cv, &m, s.head);
        out->scratch_head = (double)cv.raw;
    }
    out->scratch -= out->scratch_head;
    out->scratch_mlp = 0;
    if (L->slot[GPT_SLOT_MLP].ops->scratch) {
        cv = base, L->slot[GPT_SLOT_MLP].ops->scratch(&cv, &m, model_kind_scratch(&m, L->slot[GPT_SLOT_MLP].ops));
        out->scratch_mlp = (double)cv.raw;
    }
    out->host = (double)(mbs * (size_t)m.seq_c) * sizeof(float);
    out->host_head = (double)(scratch_host_floats(&m) - mbs * (size_t)m.seq_c) * sizeof(float);
    acts_free(&m, &a);
    scratch_free(&s);
    slots_free(&m);
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

float *gpt_param(const gpt_model *m, const char *name, int grad)
{
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->table[i].name, name) == 0) {
            if (grad && (m->table[i].frozen || !m->grads)) return NULL;
            return (grad ? m->grads : m->params) + m->table[i].offset;
        }
    return NULL;
}

/* ---- forward ---- */

/* Where layer l's parameters begin in the buffer (l = -1: the embeddings): the end of layer
 * l + 1's tensors; the top layer's reach down to 0 (the head). */
/* The end of the trained tensors among the table's first n: the frozen ones lie past them all. */
static size_t trained_end(const gpt_model *m, int n)
{
    for (int i = n - 1; i >= 0; i--)
        if (!m->table[i].frozen) return m->table[i].offset + m->table[i].numel;
    return 0;
}

static size_t layer_start(const gpt_model *m, int l)
{
    if (l + 1 >= m->nlayers) return 0;
    const gpt_layer *L = &m->layers[l + 1];
    int last = 0;
    for (int k = 0; k < GPT_LAYER_NSLOTS; k++)
        if (L->slot[k].t1 > last) last = L->slot[k].t1;
    return trained_end(m, last);
}

/* A device buffer of the slot's mbs * n ints, allocated on first use. */
static int32_t *slot_ints(const gpt_model *m, int32_t **buf, int n)
{
    if (!*buf) *buf = be_alloc(m->be, (size_t)m->mbs * n * sizeof(int32_t));
    return *buf;
}

/* Context parallelism: the rows (B, seq) of a batch field of esize-byte elements cut to this
 * rank's two chunks, (B, seq_c), into dst (host); src itself without cp. */
static const void *cp_rows(const gpt_model *m, void *dst, const void *src, int B, size_t esize)
{
    if (m->cp == 1) return src;
    size_t S = (size_t)m->cfg.seq, T = (size_t)m->seq_c, L = T / 2;
    int chunk[2] = {m->cp_rank, 2 * m->cp - 1 - m->cp_rank};
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 2; i++)
            memcpy((char *)dst + (b * T + i * L) * esize, (const char *)src + (b * S + (size_t)chunk[i] * L) * esize,
                   L * esize);
    return dst;
}

/* Context parallelism: the global positions of this rank's tokens, (B, seq_c), into dst. */
static const int32_t *cp_positions(const gpt_model *m, int32_t *dst, int B)
{
    int T = m->seq_c, L = T / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) dst[(size_t)b * T + t] = (t < L ? m->cp_rank : 2 * m->cp - 1 - m->cp_rank) * L + t % L;
    return dst;
}

/* Packed documents: the whole sequence's document starts on every stage (the attention of
 * every layer reads all positions: sequence parallel, context parallel or not), the positions of
 * this rank's tokens on every stage (rope) and its slice of them on the first stage (learned
 * positions), the loss mask on the last. Context parallelism gives every batch positions: its
 * tokens' are not 0, 1, ... */
static void take_packed(gpt_model *m, gpt_acts *a, const gpt_batch *in)
{
    int B = in->B, S = m->cfg.seq, T = m->seq_c, Tl = m->seq_l, pos0 = model_pos0(m);
    TD_CHECK(!in->seg || !gpt_bidirectional(&m->cfg), "pack documents only for a causal model",
             "a bidirectional model's micro-batch has document starts (seg)");
    a->seg = a->pos = a->pos_l = NULL;
    a->loss_mask = m->last && in->loss_mask ? cp_rows(m, a->cp_mask, in->loss_mask, B, sizeof(float)) : NULL;
    if (in->seg && m->cp_pos) { /* block calls: the document starts of this rank's rows */
        a->seg = slot_ints(m, &a->seg_buf, S);
        be_memcpy(m->be, a->seg_buf, cp_rows(m, a->cp_host, in->seg, B, sizeof(int32_t)), (size_t)B * T * sizeof(int32_t),
                  BE_H2D);
    } else if (in->seg) {
        a->seg = slot_ints(m, &a->seg_buf, S);
        be_memcpy(m->be, a->seg_buf, in->seg, (size_t)B * S * sizeof(int32_t), BE_H2D);
    }
    const int32_t *pos = in->pos ? cp_rows(m, a->cp_host, in->pos, B, sizeof(int32_t))
                         : m->cp > 1 ? cp_positions(m, a->cp_host, B) : NULL;
    if (!pos) return;
    a->pos = slot_ints(m, &a->pos_buf, T);
    be_memcpy(m->be, a->pos_buf, pos, (size_t)B * T * sizeof(int32_t), BE_H2D);
    if (!m->first || !m->p.wpe) return;
    if (Tl == T) {
        a->pos_l = a->pos;
        return;
    }
    a->pos_l = slot_ints(m, &a->posl_buf, Tl);
    for (int b = 0; b < B; b++)
        be_memcpy(m->be, a->posl_buf + (size_t)b * Tl, pos + (size_t)b * T + pos0, (size_t)Tl * sizeof(int32_t),
                  BE_H2D);
}

/* The batch's inputs into the slot, once per micro-batch: on the device what kernels read (the
 * sample indices, the lengths of a bidirectional model, this rank's positions' token types; the
 * ids and targets where they are read), in host memory what the head reads there (per-sample
 * labels, targets, weights). */
static void take_inputs(gpt_model *m, gpt_acts *a, const gpt_batch *in)
{
    const backend *be = m->be;
    int B = in->B, T = m->seq_c, Tl = m->seq_l, pos0 = model_pos0(m);
    be_memcpy(be, a->sample, in->sample, (size_t)B * sizeof(int64_t), BE_H2D);
    a->token_weight = in->token_weight;
    a->sample_weight = in->sample_weight;
    a->klen = NULL; /* causal */
    if (a->lengths) {
        be_memcpy(be, a->lengths, in->lengths, (size_t)B * sizeof(int32_t), BE_H2D);
        a->klen = a->lengths;
    }
    if (m->last && in->labels) memcpy(a->sample_labels, in->labels, (size_t)B * sizeof(int32_t));
    if (m->last)
        memcpy(a->targets_host, cp_rows(m, a->cp_host, in->targets, B, sizeof(int32_t)), (size_t)B * T * sizeof(int32_t));
    if (m->first && a->types) { /* row by row: under sequence parallelism a slice of each sample */
        const int32_t *types = cp_rows(m, a->cp_host, in->types, B, sizeof(int32_t));
        for (int b = 0; b < B; b++)
            be_memcpy(m->be, a->types + (size_t)b * Tl, types + (size_t)b * T + pos0, (size_t)Tl * sizeof(int32_t),
                      BE_H2D);
    }
    take_packed(m, a, in);
}

float *gpt_forward(gpt_model *m, gpt_acts *a, const gpt_batch *in, const float *input, int training, double *loss_sum)
{
    const backend *be = m->be;
    int B = in->B, T = m->seq_c, BT = B * T, h = m->cfg.hidden;
    TD_ASSERT(B >= 1 && B <= m->mbs);
    TD_CHECK(!gpt_bidirectional(&m->cfg) || in->lengths, "give the batch its lengths",
             "a bidirectional model's micro-batch has no lengths (tokens before the padding)");
    TD_CHECK(!(m->first && a->types) || in->types, "give the batch its token types",
             "the model has token-type embeddings but its micro-batch has no token types");
    a->B = B;
    a->training = training;
    take_inputs(m, a, in);

    if (m->params_needed) m->params_needed(m->params_needed_user, layer_start(m, -1));
    if (m->first) {
        be_memcpy(be, a->ids, cp_rows(m, a->cp_host, in->ids, B, sizeof(int32_t)), (size_t)BT * sizeof(int32_t), BE_H2D);
        be_drop d = model_drop(m, a, training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
        embedding_block.fwd(m, a->input, a->ids, a->types, a->pos_l, B, &d);
    } else if (input != a->input) {
        be_copy(be, a->input, input, (size_t)B * m->seq_l * h);
    }
    const float *x = a->input;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->params_needed) m->params_needed(m->params_needed_user, layer_start(m, l));
        layer_fwd(m, a, l, x);
        x = a->layers[l].out;
        if (training) model_block_stats_add(m, a, l);
    }
    if (!m->last) return (float *)x;

    be_memcpy(be, a->targets, a->targets_host, (size_t)BT * sizeof(int32_t), BE_H2D); /* this rank's */
    block_io io = model_io(m, a, NULL, NULL);
    m->lnf.ops->fwd(&io, a->lnf, m->lnf.p, NULL, be_f32(x));
    m->head->fwd(m, a, x, loss_sum);
    return NULL;
}

void gpt_losses_take(gpt_model *m, double *loss_sum)
{
    if (m->last && m->head->take_losses) m->head->take_losses(m, loss_sum);
}

int gpt_head_nstats(const gpt_config *c) { return model_head_of(c)->nstats; }

void gpt_moe_update_expert_bias(gpt_model *m, const double *tokens)
{
    if (!gpt_moe(&m->cfg) || !m->cfg.moe_expert_bias) return;
    for (int l = 0, moe = gpt_moe_layers(&m->cfg, 0, m->layer0); l < m->nlayers; l++)
        if (gpt_moe_layer(&m->cfg, m->layer0 + l))
            moe_update_expert_bias(&m->cfg, m->layers[l].slot[GPT_SLOT_MLP].p, tokens + (size_t)moe++ * m->cfg.num_experts);
}
const char *gpt_head_stat_name(const gpt_config *c, int i) { return model_head_of(c)->stat_names[i]; }

void gpt_head_stats(const gpt_acts *a, double *stats)
{
    for (int i = 0; i < HEAD_MAX_STATS; i++) stats[i] += a->stats[i];
}

int gpt_head_metrics(const gpt_config *c, const double *stats, double *loss, gpt_metric *out)
{
    const head_ops *h = model_head_of(c);
    return h->metrics ? h->metrics(stats, loss, out) : 0;
}

double gpt_head_loss_divisor(const gpt_config *c, int64_t global_batch)
{
    return model_head_of(c)->loss_divisor(c, global_batch);
}

const char *gpt_head_loss_name(const gpt_config *c) { return model_head_of(c)->loss_name; }

/* ---- backward ---- */

float *gpt_backward(gpt_model *m, gpt_acts *a, const float *doutput, float loss_scale)
{
    m->loss_scale = loss_scale;
    const backend *be = m->be;
    struct gpt_scratch *s = m->scratch;
    int B = a->B, BTl = B * m->seq_l, h = m->cfg.hidden;

    if (m->last) {
        m->head->bwd(m, a, m->nlayers ? a->layers[m->nlayers - 1].out : a->input, loss_scale);
        if (m->head->sp_sum) m->head->sp_sum(m);
        model_sp_sum_slot(m, &m->lnf);
        /* the head's and the final norm's gradients, first in the buffer, are final: their buckets
         * (an untied output layer's is as large as the word embedding's) reduce behind the layers */
        if (m->grads_ready && m->lnf.t1 > 0)
            m->grads_ready(m->grads_ready_user, trained_end(m, m->lnf.t1));
    } else {
        be_copy(be, s->dres, doutput, (size_t)BTl * h);
    }
    for (int l = m->nlayers - 1; l >= 0; l--) {
        recompute_before_bwd(m, a, l);
        layer_bwd(m, a, l, l ? a->layers[l - 1].out : a->input);
        for (int k = 0; k < GPT_LAYER_NSLOTS; k++) model_sp_sum_slot(m, &m->layers[l].slot[k]);
        /* everything up to the end of layer l's tensors is final */
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, layer_start(m, l - 1));
    }
    if (!m->first) {
        if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
        return s->dres;
    }

    be_drop d = model_drop(m, a, a->training ? m->cfg.hidden_dropout : 0.0f, site_embedding(), 0);
    embedding_block.bwd(m, s->dres, a->ids, a->types, a->pos_l, B, &d);
    if (m->g.wpe) model_sp_sum(m, m->g.wpe, (size_t)m->cfg.max_pos * h);
    if (m->g.tte) model_sp_sum(m, m->g.tte, (size_t)gpt_tokentypes(&m->cfg) * h);
    if (m->grads_ready) m->grads_ready(m->grads_ready_user, m->numel);
    return NULL;
}
