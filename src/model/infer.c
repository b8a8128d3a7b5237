/* Generation's forward: a stage's layers over new positions of every row, each slot through its
 * kind's decode step (block.h), which keeps what later steps need (the attention's keys and
 * values) so that a step of one token attends to all the earlier ones without running them again.
 * The same blocks' weights and kernels as training (tensor-parallel GEMMs, rotary positions from
 * the step's first position, learned positions likewise), no dropout, nothing kept for a backward.
 * This file knows the layer's shape (norm, branch, bias and residual add, twice), the embedding
 * and the LM head; no block kind. See gpt_kv_create in include/model/trident/gpt.h. */
#include "model_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "tensor_parallel.h"

#define KV_MAX_KINDS 8

struct gpt_kv_cache {
    int B, cap, nmax;
    void **state;          /* per slot (stage layer l's slot k at l GPT_LAYER_NSLOTS + k, then the final
                            * norm's): its kind's decode state (NULL: the kind has none) */
    struct { const block_ops *ops; void *s; } kind[KV_MAX_KINDS]; /* each kind's step scratch (s NULL: none) */
    int nkinds;
    void *arena;           /* backend memory the states and scratches are carved from */
    int32_t *ids;          /* (B, nmax) */
    float *x, *ln, *branch; /* (B nmax, h) */
    float *last;           /* (B, h): each row's last new position */
    float *logits_l;       /* (B, V/t) */
    float *gathered;       /* host (tp, B, V/t) */
};

/* The stage's slots in the cache's order: the layers' then the final norm's (last stage). */
static int nslots(const gpt_model *m) { return m->nlayers * GPT_LAYER_NSLOTS + (m->last ? 1 : 0); }
static const block_slot *slot_at(const gpt_model *m, int i)
{
    return i < m->nlayers * GPT_LAYER_NSLOTS ? &m->layers[i / GPT_LAYER_NSLOTS].slot[i % GPT_LAYER_NSLOTS]
                                             : &m->lnf;
}

/* The first slot of the stage whose kind has no decode step (-1: none). */
static int slot_without_decode(const gpt_model *m)
{
    for (int i = 0; i < nslots(m); i++)
        if (!slot_at(m, i)->ops->decode) return i;
    return -1;
}

/* Carves (cv->ar NULL: counts) every slot's decode state and each kind's step scratch. */
static void carve_decode(carver *cv, const gpt_model *m, gpt_kv_cache *c)
{
    for (int i = 0; i < nslots(m); i++) {
        const block_ops *ops = slot_at(m, i)->ops;
        if (c->state[i]) ops->decode_state(cv, m, c->B, c->cap, c->state[i]);
    }
    for (int k = 0; k < c->nkinds; k++)
        if (c->kind[k].s) c->kind[k].ops->decode_scratch(cv, m, c->B * c->nmax, c->kind[k].s);
}

/* The step scratch of kind ops (NULL: it has none). */
static void *kind_scratch(const gpt_kv_cache *c, const block_ops *ops)
{
    for (int k = 0; k < c->nkinds; k++)
        if (c->kind[k].ops == ops) return c->kind[k].s;
    return NULL;
}

gpt_kv_cache *gpt_kv_create(gpt_model *m, int B, int cap, int nmax)
{
    int bad = slot_without_decode(m);
    char where[64] = "";
    if (bad >= 0 && bad < m->nlayers * GPT_LAYER_NSLOTS)
        snprintf(where, sizeof where, "layer %d", m->layer0 + bad / GPT_LAYER_NSLOTS);
    else if (bad >= 0)
        snprintf(where, sizeof where, "the final norm");
    TD_CHECK(bad < 0, "give the kind a decode step (block_ops.decode, src/model/block.h)",
             "generation has no step for block kind \"%s\" (%s)", bad >= 0 ? slot_at(m, bad)->ops->name : "", where);
    TD_CHECK(!m->sp, "generate without --sequence-parallel", "the generation forward has no sequence parallelism");
    TD_CHECK(B >= 1 && nmax >= 1 && nmax <= cap, "", "kv cache of %d rows, %d positions, %d a step", B, cap, nmax);
    const backend *be = m->be;
    gpt_kv_cache *c = td_xcalloc(1, sizeof *c);
    c->B = B, c->cap = cap, c->nmax = nmax;
    size_t rows = (size_t)B * nmax, h = (size_t)m->cfg.hidden;
    /* the slots' states and the kinds' scratches (host structs), then their buffers in one allocation */
    c->state = td_xcalloc((size_t)nslots(m) + 1, sizeof *c->state);
    for (int i = 0; i < nslots(m); i++) {
        const block_ops *ops = slot_at(m, i)->ops;
        if (ops->decode_size) c->state[i] = td_xcalloc(1, ops->decode_size);
        int k = 0;
        while (k < c->nkinds && c->kind[k].ops != ops) k++;
        if (k < c->nkinds) continue;
        TD_CHECK(k < KV_MAX_KINDS, "raise KV_MAX_KINDS in src/model/infer.c", "more than %d block kinds in a stage",
                 KV_MAX_KINDS);
        c->kind[k].ops = ops;
        c->kind[k].s = ops->decode_scratch_size ? td_xcalloc(1, ops->decode_scratch_size) : NULL;
        c->nkinds++;
    }
    carver cv = {NULL, 0, 0, BE_F32, NULL, 0};
    carve_decode(&cv, m, c);
    td_arena ar;
    if (cv.bytes) {
        c->arena = be_alloc(be, cv.bytes);
        td_arena_wrap(&ar, c->arena, cv.bytes);
        cv = (carver){&ar, 0, 0, BE_F32, NULL, 0};
        carve_decode(&cv, m, c);
    }
    c->ids = be_alloc(be, rows * sizeof(int32_t));
    c->x = be_alloc(be, rows * h * sizeof(float));
    c->ln = be_alloc(be, rows * h * sizeof(float));
    c->branch = be_alloc(be, rows * h * sizeof(float));
    c->last = be_alloc(be, (size_t)B * h * sizeof(float));
    c->logits_l = be_alloc(be, (size_t)B * m->vocab_l * sizeof(float));
    c->gathered = td_xmalloc((size_t)m->tp * B * m->vocab_l * sizeof(float));
    return c;
}

void gpt_kv_free(gpt_model *m, gpt_kv_cache *c)
{
    if (!c) return;
    const backend *be = m->be;
    for (int i = 0; i < nslots(m); i++) free(c->state[i]);
    for (int k = 0; k < c->nkinds; k++) free(c->kind[k].s);
    if (c->arena) be_dfree(be, c->arena);
    float *bufs[] = {c->x, c->ln, c->branch, c->last, c->logits_l};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be_dfree(be, bufs[i]);
    be_dfree(be, c->ids);
    free(c->gathered);
    free(c->state);
    free(c);
}

/* Slot i's decode step on positions [pos, pos + n) of B rows: out from x. */
static void slot_decode(gpt_model *m, gpt_kv_cache *c, int i, int B, float *out, const float *x, int pos, int n)
{
    const block_slot *s = slot_at(m, i);
    block_io io = {.m = m, .B = B, .scratch = kind_scratch(c, s->ops)};
    s->ops->decode(&io, c->state[i], s->p, out, be_f32(x), pos, n);
}

/* Layer l over positions [pos, pos + n) of the B rows in c->x (updated in place): each half
 * x + (branch(norm(x)) + bias), as layer.c's forward without dropout. */
static void layer_step(gpt_model *m, gpt_kv_cache *c, int l, int pos, int n)
{
    int B = c->B;
    for (int half = LAYER_HALF_ATTN; half < LAYER_NHALVES; half++) {
        int nk = l * GPT_LAYER_NSLOTS + layer_norm_slot(half), bk = l * GPT_LAYER_NSLOTS + layer_branch_slot(half);
        const block_slot *b = slot_at(m, bk);
        slot_decode(m, c, nk, B, c->ln, c->x, pos, n);
        slot_decode(m, c, bk, B, c->branch, c->ln, pos, n);
        const float *bias = b->ops->out_bias ? b->ops->out_bias(b->p) : NULL;
        be_bias_dropout_add_fwd(m->be, c->x, c->x, c->branch, bias, B, n, m->cfg.hidden, NULL);
    }
}

/* Positions [pos, pos + n) of every row through the stage's layers, into c->x (B n, h). */
static void run_layers(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n)
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
}

/* Last stage: the logits (count, vocab) (host, the real vocabulary gathered over tensor
 * parallelism) of count hidden rows at x (backend), through the final norm (into ln, count rows)
 * and the head (logits_l: count rows of the vocabulary slice; gathered: host, tp of them). */
static void head_logits(gpt_model *m, gpt_kv_cache *c, const float *x, int count, int pos, float *ln, float *logits_l,
                        float *gathered, float *logits)
{
    const backend *be = m->be;
    int h = m->cfg.hidden;
    slot_decode(m, c, nslots(m) - 1, count, ln, x, pos, 1); /* the final norm */
    tp_column_linear_fwd(be, m->ps->tp_group, logits_l, be_f32(ln), m->p.head_w, NULL, count, h, m->vocab_l);
    size_t slice = (size_t)count * m->vocab_l;
    if (m->tp > 1) { /* into host memory: this slice as comm reads it (xfer.h), the others beside */
        xfer_allgather_to_host(be, m->ps->tp_group, logits_l, gathered, slice, COMM_F32);
    } else {
        be_memcpy(be, gathered, logits_l, slice * sizeof(float), BE_D2H);
    }
    int V = m->cfg.vocab;
    for (int b = 0; b < count; b++)
        for (int r = 0; r < m->tp; r++) {
            int v0 = r * m->vocab_l, nv = be_vocab_real(V, v0, m->vocab_l);
            if (nv > 0)
                memcpy(logits + (size_t)b * V + v0, gathered + (size_t)r * slice + (size_t)b * m->vocab_l,
                       (size_t)nv * sizeof(float));
        }
}

float *gpt_infer(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n,
                 float *logits)
{
    run_layers(m, c, ids, input, pos, n);
    if (!m->last) return c->x;
    /* the logits of each row's last new position */
    int B = c->B, h = m->cfg.hidden;
    for (int b = 0; b < B; b++) be_copy(m->be, c->last + (size_t)b * h, c->x + ((size_t)b * n + n - 1) * h, (size_t)h);
    head_logits(m, c, c->last, B, pos + n - 1, c->ln, c->logits_l, c->gathered, logits);
    return NULL;
}

float *gpt_infer_each(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n,
                      gpt_logits_fn fn, void *user)
{
    run_layers(m, c, ids, input, pos, n);
    if (!m->last) return c->x;
    /* every new position's logits (of the B n rows in c->x, row b's position pos + i at b n + i), in
     * chunks of about 16M logits (at least B rows), so that the head's GEMM is a large one */
    int B = c->B, h = m->cfg.hidden, rows = B * n;
    int chunk = (int)((16u << 20) / (unsigned)m->vocab_l);
    chunk = chunk < B ? B : chunk > rows ? rows : chunk;
    float *logits_l = be_alloc(m->be, (size_t)chunk * m->vocab_l * sizeof(float));
    float *gathered = td_xmalloc((size_t)m->tp * chunk * m->vocab_l * sizeof(float));
    float *logits = td_xmalloc((size_t)chunk * m->cfg.vocab * sizeof(float));
    for (int r0 = 0; r0 < rows; r0 += chunk) {
        int count = rows - r0 < chunk ? rows - r0 : chunk;
        head_logits(m, c, c->x + (size_t)r0 * h, count, pos, c->ln, logits_l, gathered, logits);
        fn(user, r0, count, logits);
    }
    be_dfree(m->be, logits_l);
    free(gathered), free(logits);
    return NULL;
}
