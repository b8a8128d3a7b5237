/* Private to src/model: the block seam (after Megatron-Core's ModuleSpec). A block kind is one
 * const block_ops: its tensors, its activations, forward, backward, what selective
 * recomputation redoes, and generation's decode step. A layer is slots (gpt.h: input norm,
 * attention, pre-MLP norm, MLP), each holding a kind's ops and its parameters behind an opaque
 * pointer; layer_spec.c fills them from the config through one table. Training (layer.c) and
 * generation (infer.c) call a kind only through its ops. A new kind is a file defining its ops
 * (static functions behind them) and a row of that table. */
#ifndef TRIDENT_MODEL_BLOCK_H
#define TRIDENT_MODEL_BLOCK_H

#include "builder.h"
#include "trident/comm.h"

/* What a block's forward and backward are given besides its tensors and activations. */
typedef struct block_io {
    gpt_model *m;          /* the stage's sizes, backend, groups and shared scratch (read only) */
    int B;                 /* samples in the micro-batch */
    const int32_t *klen;   /* (B) device: each sample's keys before its padding; NULL: causal */
    const be_drop *drop;   /* the block's own dropout (attention probabilities); NULL: none */
    void *scratch;         /* the kind's backward scratch (shared by the slots and layers of the stage it fills) */
    const int32_t *seg;    /* (B, s) device: packed documents' starts (be_ops.h); NULL: none */
    const int32_t *pos;    /* (B, s) device: token positions for rope; NULL: 0..s-1 */
    be_drop lora;          /* LoRA's dropout of the layer's adapters (p 0: none); module i's site is site + i */
} block_io;

typedef struct block_ops {
    const char *name;
    size_t params_size;    /* bytes of the kind's parameter struct (slot->p and slot->g) */
    size_t acts_size;      /* bytes of its activation struct */
    size_t scratch_size;   /* bytes of its scratch struct (0: none) */
    /* Registers the tensors "<prefix>.<name>" of global layer `layer` (-1: outside the layers),
     * with Philox streams (layer, stream0 + k), in reverse of the order the backward finishes
     * them, pointing p's and g's fields at them. */
    void (*tensors)(table_builder *tb, int layer, int stream0, const char *prefix, void *p, void *g);
    /* Carves (cv->ar NULL: counts) one micro-batch's activations into a; under cv->selective
     * leaves out what recompute redoes. */
    void (*acts)(carver *cv, const gpt_model *m, void *a);
    /* Carves its backward scratch (scratch_size 0: NULL). */
    void (*scratch)(carver *cv, const gpt_model *m, void *s);
    /* out (B s, h) from x: for norms x is fp32 (B, seq_l, h) and the output is kept in the
     * activations (output below; out unused); other kinds write their branch output before
     * the output bias, which the layer adds with dropout. */
    void (*fwd)(const block_io *io, void *a, const void *p, float *out, be_in x);
    /* From dout, the gradient of the output (before the output bias for branch kinds): the
     * parameter gradients accumulate into g; dx accumulates (norms) or is overwritten
     * (branches) with the input's gradient. */
    void (*bwd)(const block_io *io, float *dx, void *g, const float *dout, const void *a, const void *p, be_in x);
    /* Selective recomputation: carves what it does not keep (NULL: keeps everything), and
     * redoes it from what it kept before the backward. */
    void (*recompute_acts)(carver *cv, const gpt_model *m, void *a);
    void (*recompute)(const block_io *io, void *a);
    /* A norm's output, kept in its activations; NULL for branch kinds. */
    const kept_buf *(*output)(const void *a);
    /* The bias the layer adds to a branch's output with dropout (NULL: none). */
    const float *(*out_bias)(const void *p);
    /* Runs on this rank's positions only under sequence parallelism: its gradients are summed
     * over the tensor-parallel group at the end of the iteration. */
    int seq_local;
    /* Its statistics (block_stats.c; nstat 0: none), named, in the order of a layer's numbers
     * (stat_list: a number, or one per expert; summed over the iteration's training micro-batches
     * and the ranks, or derived by metrics from those sums). stats adds a micro-batch's forward's
     * into out, the layer's numbers (block_stat_index's positions). */
    const struct block_stat *stat_list;
    int nstat;
    void (*stats)(const void *a, double *out);
    /* The iteration's report from the sums of its layers over the global batch (sums: (nlayers,
     * block_stat_count) as block_stats.c gathers them, its derived numbers written there): its
     * metrics into out (returns how many, at most max), its lists into arr (*narr counts them,
     * at most GPT_MAX_ARRAYS), pointing into sums. */
    int (*metrics)(const gpt_config *c, double *sums, int nlayers, const gpt_stats_scope *s, gpt_metric *out,
                   int max, gpt_metric_array *arr, int *narr);
    /* What the kind does with its layer's sums over the global batch before the optimizer step
     * (NULL: nothing): the MoE block's expert bias moves against the load. */
    void (*stats_apply)(const gpt_config *c, const void *params, const double *sums);

    /* Generation (infer.c: gpt_kv_create, gpt_infer): new positions of io->B rows against what
     * earlier steps left. decode NULL: the kind cannot generate (gpt_kv_create refuses a model
     * holding it, naming the kind). Each slot of the stage has its own decode state (decode_size
     * bytes, 0: none; decode_state carves into it, cv->ar NULL: counts, what the slot keeps from
     * step to step for B rows of up to cap positions: the attention's keys and values); each kind
     * in the stage its step scratch (decode_scratch_size bytes, 0: none; decode_scratch carves
     * the temporaries of a step of up to `rows` = B nmax positions), shared by its slots and
     * handed over as io->scratch. All of it lives in one backend allocation infer.c owns. */
    size_t decode_size;
    void (*decode_state)(carver *cv, const gpt_model *m, int B, int cap, void *st);
    size_t decode_scratch_size;
    void (*decode_scratch)(carver *cv, const gpt_model *m, int rows, void *s);
    /* Positions [pos, pos + n) of each of io->B rows, x (B n, h) fp32 row-major by row then
     * position, as fwd: a norm writes its output into out (B n, h); a branch kind writes its
     * output before out_bias (the layer adds that, with no dropout), all-reduced over the
     * tensor-parallel group (generation has no sequence parallelism); a kind with state reads the
     * [0, pos) its earlier steps stored for the same rows and stores [pos, pos + n). */
    void (*decode)(const block_io *io, void *st, const void *p, float *out, be_in x, int pos, int n);
} block_ops;

/* A statistic of a block kind: what each of its layers reports of an iteration, by name. */
typedef struct block_stat {
    const char *name;   /* "z_loss" */
    int per_expert;     /* one number per expert (c->num_experts) rather than one */
    int derived;        /* written by the kind's metrics from the others (not summed by the forwards) */
} block_stat;
/* How many numbers a layer of kind ops reports (0: none), and where statistic `name` starts in
 * them (-1: the kind has none of that name). */
int block_stat_count(const block_ops *ops, const gpt_config *c);
int block_stat_index(const block_ops *ops, const gpt_config *c, const char *name);

#define GPT_SCRATCH_KINDS 8
/* Forward temporaries and backward gradients of the stage, shared by every block and every
 * micro-batch (a kind's own backward buffers are its slot's scratch). */
struct gpt_scratch {
    float *branch;   /* (BT, h): row-linear output before bias-dropout-add */
    float *dres;     /* (BT, h): gradient flowing down the residual stream */
    float *dln;      /* (BT, h): gradient of a norm output */
    float *dtmp;     /* (BT, h): gradient of a branch before dropout; a block's second input gradient */
    float *dloss;    /* (BT) */
    float *host;     /* (BT) host memory: losses and d(loss) on their way across */
    /* sequence parallelism only (NULL otherwise): */
    float *gath;     /* (BT, h): a norm output gathered along the sequence */
    float *dgath;    /* (BT, h): a branch's output gradient gathered along the sequence */
    float *sptmp;    /* (BT, h): the collectives' rank-major staging */
    float *branch_l; /* (BT/t, h): a branch output reduce-scattered to this rank's positions */
    float *dln_l;    /* (BT/t, h): a norm output's gradient, likewise */
    /* mixed precision only (NULL otherwise): */
    float *lp_stage; /* (BT, max(h, nd/t, f/t)): a kept GEMM input in fp32 on its way in */
    /* each kind's own scratch among the stage's layer slots (one per kind, shared by the slots and
     * layers it fills: a mixed stage has both MLP kinds'); model_kind_scratch finds it */
    struct { const struct block_ops *ops; void *s; } kind[GPT_SCRATCH_KINDS];
    int nkinds;
    void *head;      /* the head's (last stage) */
    float *head_host;/* host memory for the head's work */
};

/* The scratch of kind ops in the stage (NULL: the kind has none). */
static inline void *model_kind_scratch(const gpt_model *m, const block_ops *ops)
{
    for (int i = 0; i < m->scratch->nkinds; i++)
        if (m->scratch->kind[i].ops == ops) return m->scratch->kind[i].s;
    return NULL;
}

/* The group a block's row-parallel forward and column-parallel backward all-reduce over: NULL
 * under sequence parallelism, whose reduce-scatter the layer does instead. */
static inline const comm *model_tp_reduce(const gpt_model *m) { return m->sp ? NULL : m->ps->tp_group; }
/* The first position a sample holds outside the tensor-parallel regions: tp_rank * seq_l under
 * sequence parallelism, else 0. */
static inline int model_pos0(const gpt_model *m) { return m->sp ? m->ps->tp_rank * m->seq_l : 0; }
/* LoRA's dropout sites (model_impl.h has the others'): GPT_LORA_NMODULES a layer, after every
 * layer's three; then the routed experts' (gate, up, down: 3 a layer), after every layer's dense ones. */
static inline int site_lora(const gpt_model *m, int layer) { return 1 + 3 * m->cfg.num_layers + GPT_LORA_NMODULES * layer; }
static inline int site_lora_experts(const gpt_model *m, int layer) { return site_lora(m, m->cfg.num_layers) + 3 * layer; }

/* ---- the kinds (one file each) ---- */
extern const block_ops layernorm_ops, rmsnorm_ops;  /* norm.c */
extern const block_ops attention_ops;               /* attention.c: multi-head or grouped-query, rotary or not */
extern const block_ops mlp_ops;                      /* mlp.c: its activation the config's (act, glu) */
extern const block_ops moe_ops;                      /* moe.c: the mixture-of-experts MLP */
/* moe.c: the expert bias of a layer's MoE parameters moved against its load (tokens (E)). */
void moe_update_expert_bias(const gpt_config *c, const void *params, const double *tokens);

/* Their parameter structs, TP-local shapes (read by the kind, and by tools that know it). */
typedef struct norm_params {
    float *w, *b;         /* (h), (h); b NULL for RMSNorm */
} norm_params;
typedef struct attn_params {
    float *qkv_w;         /* (3nd/t, h): rows [q of local heads | k | v]; with grouped-query
                           * attention the queries only, (nd/t, h) */
    float *qkv_b;         /* (3nd/t), or (nd/t); NULL without a QKV bias */
    float *kv_w;          /* grouped-query attention: (2gd/t, h), rows [k of local groups | v] */
    float *kv_b;          /* (2gd/t) or NULL */
    float *proj_w;        /* (h, nd/t) */
    float *proj_b;        /* (h) or NULL */
    /* LoRA (lora.h), by GPT_LORA_Q..GPT_LORA_O, NULL where not a target: q, k, v A (r, h) whole and
     * B (nd/t or gd/t, r) the local heads' rows; o A (r, nd/t) the local columns and B (h, r) whole */
    float *lora_a[4], *lora_b[4];
} attn_params;
typedef struct mlp_params {
    float *fc_w;          /* (f/t, h); gated: (2f/t, h), rows [gate | up] of the local slice */
    float *fc_b;          /* (f/t) or (2f/t); NULL without biases */
    float *fc2_w;         /* (h, f/t) */
    float *fc2_b;         /* (h) or NULL */
    /* LoRA (lora.h), by GPT_LORA_GATE + i, NULL where not a target: gate and up A (r, h) whole and
     * B (f/t, r) the local rows; down A (r, f/t) the local columns and B (h, r) whole */
    float *lora_a[3], *lora_b[3];
} mlp_params;

typedef struct moe_params {
    float *router_w;      /* (E, h) */
    float *fc_w;          /* (E bF, h): expert e's rows [e bF, (e + 1) bF), bF = F, or 2F gated */
    float *fc_b;          /* (E bF) or NULL */
    float *fc2_w;         /* (E h, F) */
    float *fc2_b;         /* (E h) or NULL */
    /* the shared expert (NULL without one): an MLP of hidden size S on every token, its output
     * times sigmoid(gate_w . x) with the gate */
    float *sh_fc_w;       /* (bS, h) */
    float *sh_fc_b;       /* (bS) or NULL */
    float *sh_fc2_w;      /* (h, S) */
    float *sh_fc2_b;      /* (h) or NULL */
    float *sh_gate_w;     /* (1, h) or NULL */
    float *expert_bias;   /* (E) with --moe-router-enable-expert-bias, else NULL: no gradient (the trainer
                           * moves it against the load, gpt_moe_update_expert_bias), no decay */
    /* LoRA on the experts (lora.h), by GPT_LORA_GATE + i, NULL where not a target, stacked over the
     * experts as fc and fc2 are: gate and up A (E r, h) each expert's whole, B (E F, r) each split
     * by rows over tp; down A (E r, F) each split by columns over tp, B (E h, r) whole */
    float *lora_a[3], *lora_b[3];
    /* LoRA on the shared expert, by GPT_LORA_GATE + i, NULL where not a target (or no shared
     * expert): as the dense MLP's (mlp_params) on its width S */
    float *sh_lora_a[3], *sh_lora_b[3];
} moe_params;

/* ---- slots ---- */

/* The kind of slot `slot` of global layer `layer` (the MLP slot's: the MoE block or the dense MLP,
 * by --moe-layer-freq), or of a norm anywhere (the final norm, a head's), for the config: the
 * layer spec table (layer_spec.c). */
const block_ops *layer_spec_ops(const gpt_config *c, int layer, int slot);
const block_ops *layer_spec_norm(const gpt_config *c);
/* A slot of kind ops: its parameter structs allocated (block_slot_free frees them). */
void block_slot_init(block_slot *s, const block_ops *ops);
void block_slot_free(block_slot *s);
/* Registers the slot's tensors, recording their range in the table. */
void block_slot_tensors(block_slot *s, table_builder *tb, int layer, int stream0, const char *prefix);

#endif
