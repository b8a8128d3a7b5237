/* Private to src/model: the builder the blocks lay themselves out with, without knowing the
 * stage. A block registers its tensors in a table (logical shapes, tensor-parallel split, the
 * Philox stream of their initialisation) and carves its activations and scratch from an arena
 * (or only counts their bytes: the memory prediction and the stage's sizing count with the same
 * functions the carving runs). The stage (gpt.c) owns the buffers and points the registered
 * pointers at them; the blocks never call the stage. */
#ifndef TRIDENT_MODEL_BUILDER_H
#define TRIDENT_MODEL_BUILDER_H

#include "backend.h"
#include "trident/gpt.h"

/* ---- the tensor table ---- */

enum init_kind { INIT_NORMAL, INIT_NORMAL_OUT, INIT_ONES, INIT_ZEROS, INIT_LORA_A };

typedef struct {
    float **param, **grad; /* where to point once the buffers exist */
    enum init_kind init;
    uint64_t stream;       /* Philox stream of the logical tensor */
} tensor_slot;

typedef struct table_builder {
    const gpt_config *cfg;
    int tp, tp_rank;         /* the slices taken: tp 1 gives the logical (whole) tensors */
    gpt_tensor_info *table;  /* n entries, in buffer order */
    tensor_slot *slots;      /* n entries */
    int n, cap;
    size_t numel;            /* elements registered so far */
    int ep, ep_rank;         /* expert parallelism: the experts' slices taken (0 or 1: all of them) */
    int freeze;              /* LoRA: the tensors registered are frozen (model_add_adapter's are not) */
} table_builder;

/* Philox stream of a logical tensor: (global layer, or -1 outside the layers; kind). */
uint64_t model_stream(int layer, int kind);
/* Appends logical tensor `name` of shape (d0, d1) (d1 = 0: a vector) to the table. shard_dim:
 * the dimension split over tp (-1 replicated), as `blocks` equal blocks each split (3 for
 * q|k|v). The buffers do not exist yet: *param and *grad are pointed at them by
 * model_table_point. */
void model_add_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                      const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay);
/* The same for a MoE layer's stacked experts, (d0, d1) with d0 = experts x rows of each: split by
 * whole experts over the expert-parallel group (dim 0, contiguous), or under tensor parallelism
 * (without ep) each expert split as the dense MLP's tensor is (shard_dim, blocks: the experts'
 * blocks), or replicated (shard_dim -1). */
void model_add_expert_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                             const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay);
/* A LoRA adapter's tensor (trained while the base is frozen), otherwise as model_add_tensor;
 * INIT_NORMAL draws it uniform in +-1/sqrt(d1) (PEFT's kaiming_uniform_(a=sqrt(5)) of lora_A). */
void model_add_adapter(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                       const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks);
/* A LoRA adapter's tensor stacked over the experts (d0 = experts x rows of each), trained, split
 * as model_add_expert_tensor splits the experts' own tensors. */
void model_add_expert_adapter(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                              const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks);
/* Lays the table out once every tensor is registered: the trained tensors first, in registration
 * order, then the frozen ones. Returns the trained elements (tb->numel stays the total). */
size_t model_table_order(table_builder *tb);
/* Points every registered pointer at its place in params and grads (grads NULL: the gradient
 * pointers NULL; a frozen tensor's always NULL). */
void model_table_point(const table_builder *tb, float *params, float *grads);
/* Initialises the parameters (backend memory) from (seed, logical tensor, element), one tensor
 * at a time through a host buffer. */
void model_table_init(const table_builder *tb, const struct backend *be, float *params);

/* ---- activations ---- */

/* Carves buffers from an arena, or (ar == NULL) only counts their bytes (each rounded to the
 * arena's 64-byte alignment). */
typedef struct carver {
    td_arena *ar;
    size_t bytes;
    int selective;     /* selective recomputation: a block leaves out what its recompute redoes */
    be_dtype kept_dt;  /* the dtype kept GEMM inputs may be kept in (the backend's GEMM dtype) */
    float *kept_stage; /* fp32 staging of a kept input in kept_dt (the stage's shared scratch) */
    size_t raw;        /* the bytes asked for, unrounded (the memory prediction's count) */
} carver;
void *model_carve(carver *cv, size_t bytes, const char *what);
#define CARVE(cv, ptr, type, count) ((ptr) = (type *)model_carve((cv), (size_t)(count) * sizeof(type), #ptr))

/* ---- kept GEMM inputs ----
 * The activations a micro-batch keeps only to feed GEMMs again in the backward (the norms'
 * outputs, the attention core's output, the MLP activation's output) are kept in the GEMMs'
 * dtype under mixed precision (--bf16, --fp16: half the bytes, and the GEMMs read them as they
 * are), in fp32 otherwise. Under sequence parallelism the norms' outputs stay fp32: they are
 * gathered along the sequence before their GEMMs (and hold s/t of it). A producer that is one
 * backend entry writes where kept_out says (the kept buffer itself when the backend writes its
 * dtype, be_acts_in; else the fp32 stage) and calls kept_written; one that takes several steps
 * writes fp32 where kept_stage says, then kept_done rounds that into the kept buffer. */
typedef struct {
    void *p;
    be_dtype dt;
    float *stage; /* fp32 staging when dt is not fp32 */
} kept_buf;
/* Carves `count` elements; lowp: may be kept in the GEMMs' dtype. */
void model_carve_kept(carver *cv, kept_buf *k, int64_t count, int lowp, const char *what);
static inline float *kept_stage(const kept_buf *k) { return k->dt == BE_F32 ? (float *)k->p : k->stage; }
static inline void kept_done(const struct backend *be, const kept_buf *k, size_t n)
{
    if (k->dt != BE_F32) be_convert(be, k->p, k->dt, k->stage, BE_F32, n);
}
static inline be_out kept_out(const struct backend *be, const kept_buf *k)
{
    be_out o = {k->p, k->dt};
    if (!be_acts_in(be, k->dt)) o.p = kept_stage(k), o.dt = BE_F32;
    return o;
}
/* After a producer wrote o = kept_out(be, k): rounds the stage in when o was it. */
static inline void kept_written(const struct backend *be, const kept_buf *k, be_out o, size_t n)
{
    if (o.p != k->p) kept_done(be, k, n);
}
static inline be_in kept_in(const kept_buf *k)
{
    be_in x = {k->p, k->dt};
    return x;
}

#endif
