/* The builder the blocks lay themselves out with: see builder.h. The tensor table (names,
 * shapes, tensor-parallel slices, buffer offsets in registration order), the parameters'
 * layout-invariant initialisation, and the carving of activations from an arena. */
#include "builder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/check.h"
#include "trident/philox.h"

uint64_t model_stream(int layer, int kind) { return ((uint64_t)(layer < 0 ? 0xffff : layer) << 8) | (uint64_t)kind; }

void model_add_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                      const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay)
{
    TD_ASSERT(shard_dim < 0 || ((shard_dim == 0 ? d0 : d1) / blocks) % tb->tp == 0);
    if (tb->n == tb->cap) {
        tb->cap = tb->cap ? 2 * tb->cap : 64;
        tb->table = td_xrealloc(tb->table, (size_t)tb->cap * sizeof *tb->table);
        tb->slots = td_xrealloc(tb->slots, (size_t)tb->cap * sizeof *tb->slots);
    }
    gpt_tensor_info *t = &tb->table[tb->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shard_dim = shard_dim;
    t->shard_blocks = blocks;
    t->no_decay = no_decay;
    t->frozen = tb->freeze;
    t->tp_replicated = shard_dim < 0;
    size_t numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    if (shard_dim >= 0) {
        int64_t block = (shard_dim == 0 ? d0 : d1) / blocks;
        t->shard_len = block / tb->tp;
        t->shard_start = t->shard_len * tb->tp_rank;
        numel = numel / (size_t)tb->tp;
    }
    t->numel = numel;
    t->offset = tb->numel;
    tb->numel += numel;
    tb->slots[tb->n] = (tensor_slot){param, grad, init, stream};
    tb->n++;
}

void model_add_expert_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                             const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay)
{
    int ep = tb->ep > 1 ? tb->ep : 1, whole = tb->cfg->moe_etp1 && tb->tp > 1;
    /* --expert-tensor-parallel-size 1: the experts whole, split over tp x ep ranks (tp rank major) */
    int groups = whole ? tb->tp * ep : ep, group = whole ? tb->tp_rank * ep + tb->ep_rank : tb->ep_rank;
    TD_ASSERT(d0 % groups == 0 && (whole || shard_dim != 0 || blocks % ep == 0));
    model_add_tensor(tb, param, grad, init, stream, name, d0, d1, whole ? -1 : shard_dim, blocks, no_decay);
    gpt_tensor_info *t = &tb->table[tb->n - 1];
    t->expert = 1;
    if (whole) t->tp_replicated = 0; /* each tp rank its own experts */
    if (groups == 1) return;
    size_t numel = t->numel / (size_t)groups; /* this rank's experts: whole blocks of a dim-0 split */
    tb->numel -= t->numel - numel;
    t->numel = numel;
    t->nrows = d0 / groups;
    t->row0 = t->nrows * group;
}

void model_add_adapter(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                       const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks)
{
    int freeze = tb->freeze;
    tb->freeze = 0;
    model_add_tensor(tb, param, grad, init == INIT_NORMAL ? INIT_LORA_A : init, stream, name, d0, d1, shard_dim,
                     blocks, 0);
    tb->freeze = freeze;
}

void model_add_expert_adapter(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                              const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks)
{
    int freeze = tb->freeze;
    tb->freeze = 0;
    model_add_expert_tensor(tb, param, grad, init == INIT_NORMAL ? INIT_LORA_A : init, stream, name, d0, d1, shard_dim,
                            blocks, 0);
    tb->freeze = freeze;
}

size_t model_table_order(table_builder *tb)
{
    size_t at = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < tb->n; i++) {
            gpt_tensor_info *t = &tb->table[i];
            if (t->frozen != pass) continue;
            t->offset = at;
            at += t->numel;
        }
    TD_ASSERT(at == tb->numel);
    size_t trained = 0;
    for (int i = 0; i < tb->n; i++)
        if (!tb->table[i].frozen) trained += tb->table[i].numel;
    return trained;
}

void model_table_point(const table_builder *tb, float *params, float *grads)
{
    for (int i = 0; i < tb->n; i++) {
        *tb->slots[i].param = params + tb->table[i].offset;
        *tb->slots[i].grad = grads && !tb->table[i].frozen ? grads + tb->table[i].offset : NULL;
    }
}

/* Fills this rank's slice of logical tensor t from the normal stream (seed, stream): element
 * (i, j) of the logical tensor is draw number i * cols + j, whatever the layout. */
static void init_normal_slice(float *dst, const gpt_tensor_info *t, uint64_t seed, uint64_t stream, float std)
{
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1, r0, r1;
    gpt_tensor_rows(t, &r0, &r1);
    if (t->shard_dim < 0) {
        td_philox_fill_normal(dst, (uint64_t)((r1 - r0) * cols), seed, stream, (uint64_t)(r0 * cols), 0.0f, std);
    } else if (t->shard_dim == 0) {
        int64_t block = rows / t->shard_blocks, local = 0;
        for (int b = 0; b < t->shard_blocks; b++) {
            if (b * block < r0 || b * block >= r1) continue; /* another expert-parallel rank's */
            /* the block's rows are consecutive draws and consecutive rows of dst: one fill */
            int64_t lrow = b * block + t->shard_start;
            td_philox_fill_normal(dst + local * cols, (uint64_t)(t->shard_len * cols), seed, stream,
                                  (uint64_t)(lrow * cols), 0.0f, std);
            local += t->shard_len;
        }
    } else {
        for (int64_t r = r0; r < r1; r++)
            td_philox_fill_normal(dst + (r - r0) * t->shard_len, (uint64_t)t->shard_len, seed, stream,
                                  (uint64_t)(r * cols + t->shard_start), 0.0f, std);
    }
}

/* LoRA's A: this rank's slice of logical tensor t (r, in) uniform in +-1/sqrt(in) (kaiming_uniform_
 * with a = sqrt(5)), element (i, j) draw number i * in + j of the stream, whatever the layout (an
 * experts' stack (E r, in): this rank's experts' rows, r0 to r1). */
static void init_uniform_slice(float *dst, const gpt_tensor_info *t, uint64_t seed, uint64_t stream)
{
    int64_t cols = t->shape[1], r0, r1;
    int64_t c0 = t->shard_dim == 1 ? t->shard_start : 0, w = t->shard_dim == 1 ? t->shard_len : cols;
    float bound = 1.0f / sqrtf((float)cols);
    TD_ASSERT(t->ndim == 2 && t->shard_dim != 0);
    gpt_tensor_rows(t, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t j = 0; j < w; j++)
            dst[(r - r0) * w + j] =
                bound * (2.0f * td_philox_uniform(seed, stream, (uint64_t)(r * cols + c0 + j)) - 1.0f);
}

void model_table_init(const table_builder *tb, const backend *be, float *params)
{
    const gpt_config *c = tb->cfg;
    float std_out = c->init_std / sqrtf(2.0f * (float)c->num_layers);
    /* one tensor at a time through a host buffer of the largest: no second copy of the model */
    size_t most = 1;
    for (int i = 0; i < tb->n; i++)
        if (tb->table[i].numel > most) most = tb->table[i].numel;
    float *dst = td_xmalloc(most * sizeof(float));
    for (int i = 0; i < tb->n; i++) {
        const gpt_tensor_info *t = &tb->table[i];
        switch (tb->slots[i].init) {
        case INIT_NORMAL: init_normal_slice(dst, t, c->seed, tb->slots[i].stream, c->init_std); break;
        case INIT_NORMAL_OUT: init_normal_slice(dst, t, c->seed, tb->slots[i].stream, std_out); break;
        case INIT_ONES:
            for (size_t k = 0; k < t->numel; k++) dst[k] = 1.0f;
            break;
        case INIT_ZEROS: memset(dst, 0, t->numel * sizeof(float)); break;
        case INIT_LORA_A: init_uniform_slice(dst, t, c->seed, tb->slots[i].stream); break;
        }
        be_memcpy(be, params + t->offset, dst, t->numel * sizeof(float), BE_H2D);
    }
    free(dst);
}

void *model_carve(carver *cv, size_t bytes, const char *what)
{
    cv->bytes += (bytes + 63) & ~(size_t)63;
    cv->raw += bytes;
    return cv->ar ? td_arena_alloc(cv->ar, bytes, what) : NULL;
}

void model_carve_kept(carver *cv, kept_buf *k, int64_t count, int lowp, const char *what)
{
    k->dt = lowp ? cv->kept_dt : BE_F32;
    k->stage = cv->kept_stage;
    k->p = model_carve(cv, (size_t)count * be_dtype_size(k->dt), what);
}
