/* The model of one pipeline stage. Owns the parameter and gradient buffers with their tensor
 * table, the activations of the micro-batches in flight, and the forward and backward passes of
 * a stage: a range of layers, the first stage adding the embedding, the last the final norm and
 * the head with its loss, written for tensor parallelism. A layer is slots filled with blocks
 * (src/model/layer_spec.c); the builder (src/model/builder.c) lays their tensors and activations
 * out. The configuration is include/model/trident/gpt_config.h. */
#ifndef TRIDENT_GPT_H
#define TRIDENT_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "trident/arena.h"
#include "trident/gpt_config.h"
#include "trident/parallel_state.h"

struct backend;

/* A block in its place: the kind's operations (private to src/model: model/block.h) and the
 * kind's parameter and gradient pointers over the buffers, a struct only the kind reads (the
 * slot holds it opaquely, so a layer holds any kind). [t0, t1): its tensors in the table. */
struct block_ops;
typedef struct block_slot {
    const struct block_ops *ops;
    void *p, *g;
    int t0, t1;
} block_slot;

/* The slots of a transformer layer (Megatron-Core's TransformerLayerSubmodules), in forward
 * order; which kind fills each comes from the config (src/model/layer_spec.c). */
enum { GPT_SLOT_INPUT_NORM, GPT_SLOT_ATTENTION, GPT_SLOT_PRE_MLP_NORM, GPT_SLOT_MLP, GPT_LAYER_NSLOTS };
typedef struct gpt_layer {
    block_slot slot[GPT_LAYER_NSLOTS];
} gpt_layer;

/* Pointers to the stage's tensors outside the blocks (parameters, or their gradients),
 * TP-local shapes. */
typedef struct gpt_tensors {
    float *wte;           /* (V/t, h) word embedding: first stage; also the head's weight when
                           * the first stage is the last */
    float *wpe;           /* (max_pos, h): first stage, learned positions only */
    float *tte;           /* (types, h): first stage, token types only */
    float *head_w;        /* (V/t, h): last stage. Tied: == wte on a one-stage model, else a copy
                           * kept equal to it; untied: the output layer, its own tensor */
} gpt_tensors;

/* One entry of the tensor table: a logical tensor and the slice of it this rank holds. */
typedef struct gpt_tensor_info {
    char name[64];        /* logical name, e.g. "layers.3.attn.qkv.weight" */
    size_t offset;        /* element offset in the parameter and gradient buffers */
    size_t numel;         /* local elements */
    int ndim;
    int64_t shape[2];     /* logical (full) shape */
    int shard_dim;        /* dimension split over tp, or -1 when replicated */
    int shard_blocks;     /* shard_dim is `shard_blocks` equal blocks (3 for q|k|v), each split
                           * over tp; this rank holds [start, start + len) of every block */
    int64_t shard_start;  /* first index within a block held here */
    int64_t shard_len;    /* indices held per block */
    int no_decay;         /* biases and norms: no weight decay */
    int tp_replicated;    /* identical on every TP rank: count once in the grad norm */
    int embedding_copy;   /* the last stage's copy of the word embedding */
    int expert;           /* a MoE layer's experts: split over the expert-parallel group (row0, nrows: this
                           * rank's experts' rows), summed over the expert-data-parallel group */
    int64_t row0, nrows;  /* expert parallelism: only rows [row0, row0 + nrows) of dim 0 held (whole blocks
                           * of a dim-0 split; nrows 0: every row, the split's) */
    int frozen;           /* LoRA's frozen base: not trained, no gradient and no optimizer state; laid out
                           * after every trained tensor (offset >= the model's numel) */
} gpt_tensor_info;

/* The rows of dim 0 tensor t holds at all: [*r0, *r1) (its tensor-parallel blocks among them). */
static inline void gpt_tensor_rows(const gpt_tensor_info *t, int64_t *r0, int64_t *r1)
{
    *r0 = t->nrows ? t->row0 : 0;
    *r1 = t->nrows ? t->row0 + t->nrows : t->shape[0];
}

/* Saved activations of one micro-batch on this stage (in the arena). */
typedef struct gpt_acts gpt_acts;

/* Activation recomputation (Megatron's --recompute-granularity/-method/-num-layers): what a
 * stage keeps of each micro-batch and re-runs in its backward. Full: a recomputed layer keeps
 * only its input; its forward runs again (into one set of activations per stage, shared by the
 * micro-batches) just before its backward. Uniform: the stage's layers in groups of num_layers,
 * only each group's input kept; block: the stage's first num_layers layers, one at a time, the
 * rest keep everything. Selective: every layer keeps all but the attention core's output and
 * log-sum-exp, recomputed from the kept q, k, v before the attention backward. The gradients are
 * bitwise those without recomputation. */
typedef enum { GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_FULL, GPT_RECOMPUTE_SELECTIVE } gpt_recompute_granularity;
typedef enum { GPT_RECOMPUTE_UNIFORM, GPT_RECOMPUTE_BLOCK } gpt_recompute_method;
typedef struct gpt_recompute {
    gpt_recompute_granularity granularity;
    gpt_recompute_method method; /* full only */
    int num_layers;              /* full only: layers per group (uniform), recomputed layers (block) */
} gpt_recompute;

typedef struct gpt_model {
    gpt_config cfg;
    const ps_state *ps;
    const struct backend *be;
    int layer0, nlayers;     /* global layers [layer0, layer0 + nlayers) on this stage */
    int first, last;         /* this stage has the embeddings / the head */
    int tp, heads_l, groups_l, ffn_l, vocab_l, vstart; /* TP-local sizes */
    int q_l, kv_l;           /* TP-local widths of the queries (n/t heads) and of keys or values */
    int mbs;                 /* micro-batch size the arena was sized for */
    float loss_scale;        /* the running backward's d(loss)/d(token loss) (gpt_backward's): the
                              * MoE blocks' own losses scale their gradients with it */
    int sp;                  /* sequence parallel (ps->sequence_parallel): outside the tensor-
                              * parallel regions (norms, dropout, residuals, the stage input and
                              * output) a sample holds seq_l = seq / tp positions, this rank's */
    int seq_l;               /* seq_c / tp with sp, else seq_c */
    int cp, cp_rank;         /* context parallelism (ps->cp, ps->cp_rank; 1 and 0 without) */
    int seq_c;               /* positions of a sample this rank's layers hold: seq / cp, the chunks cp_rank
                              * and 2 cp - 1 - cp_rank of the 2 cp equal chunks of the sequence (seq without
                              * cp); every activation but the attention core's is (B, seq_c or seq_l, .) */
    int32_t *cp_pos;         /* (cp, seq_c) device: each cp rank's positions (all_gather's block calls); NULL
                              * without cp or under a2a */

    float *params, *grads;   /* one buffer each, laid out by the table: params numel_all floats, grads
                              * numel (the trained tensors come first; LoRA's frozen base after them) */
    size_t numel;            /* the trained elements: the gradients, the optimizer's state, the buckets */
    size_t numel_all;        /* every parameter (numel without LoRA) */
    gpt_tensors p, g;        /* pointer tables over params and grads */
    gpt_layer *layers;       /* nlayers: the blocks in their slots (parameters and gradients) */
    block_slot lnf;          /* last stage: the final norm */
    const struct head_ops *head; /* last stage: the head and its loss (src/model/head_*.c) */
    void *head_p, *head_g;   /* ... its own tensors (the head kind's struct) */
    gpt_tensor_info *table;  /* ntensors entries, in buffer order (reverse backprop order) */
    int ntensors;

    td_arena arena;          /* activations of the micro-batches in flight + backward scratch,
                              * carved once at create (backend memory) */
    size_t acts_bytes;       /* bytes of one micro-batch's activations */
    gpt_recompute rc;        /* activation recomputation */
    size_t rc_bytes;         /* bytes of the activations recomputation shares across micro-batches */
    char *rc_base;           /* where they begin in the arena */
    int max_inflight;
    gpt_acts *slots;         /* max_inflight activation sets */
    struct gpt_scratch *scratch; /* forward temporaries and backward gradients, shared */

    /* Called by gpt_backward each time a prefix of the gradient buffer has received its last
     * contribution of this micro-batch: grads[0, prefix_end) are final (the buffer is in reverse
     * backprop order). NULL: not called. Data parallelism uses it to start bucket reductions. */
    void (*grads_ready)(void *user, size_t prefix_end);
    void *grads_ready_user;
    /* Set by the schedule around the backward of the iteration's last micro-batch on this
     * chunk: the gradients become final as it runs (a grads_ready hook may act on them). */
    int grads_final;
    /* Called by gpt_forward before it reads parameters [from, numel) (the embedding first, then
     * each layer; the buffer is in reverse forward order). NULL: not called. Data parallelism
     * uses it to wait for a parameter all-gather still in flight. */
    void (*params_needed)(void *user, size_t from);
    void *params_needed_user;
    double *layer_stats;     /* the blocks' statistics over the training micro-batches since the
                              * last gpt_block_stats_take, (nlayers, the kind's count); NULL: none yet */
    int defer_losses;        /* last stage: gpt_forward may keep a micro-batch's loss on the device
                              * for gpt_losses_take instead of reading it at once (set by a schedule
                              * that takes them) */
} gpt_model;

/* Builds the stage of `ps` owning layers [layer0, layer0 + nlayers), allocates its buffers
 * and an arena for `max_inflight` micro-batches of `mbs` samples, and initialises the
 * parameters from (seed, logical tensor, element) so every layout starts from the same model. */
gpt_model *gpt_create(const gpt_config *cfg, const ps_state *ps, const struct backend *be, int layer0, int nlayers,
                      int mbs, int max_inflight);
/* gpt_create with activation recomputation (rc NULL: none): the arena keeps less of each
 * micro-batch (acts_bytes) plus rc_bytes shared by all of them. */
gpt_model *gpt_create_recompute(const gpt_config *cfg, const ps_state *ps, const struct backend *be, int layer0,
                                int nlayers, int mbs, int max_inflight, const gpt_recompute *rc);
/* gpt_create for inference from a checkpoint (generate, serve, eval): no gradient buffer
 * (grads and the g table NULL) and no initial draws; the parameters hold nothing until the
 * checkpoint fills every one of them (ckpt_load fails on a tensor it lacks). */
gpt_model *gpt_create_for_checkpoint(const gpt_config *cfg, const ps_state *ps, const struct backend *be, int layer0,
                                     int nlayers, int mbs, int max_inflight);
/* "none", "selective", "full uniform 2", "full block 3". */
void gpt_recompute_describe(const gpt_recompute *rc, char *out, size_t len);
void gpt_free(gpt_model *m);

/* Parameters (elements) of a stage of layers [layer0, layer0 + nlayers) (first: with the embedding, last: with the
 * final norm and the head) on one of tp tensor-parallel ranks: the table gpt_create registers
 * (the padded vocabulary taken up to a multiple of tp, as a run pads it). */
int64_t gpt_stage_numel(const gpt_config *cfg, int tp, int ep, int layer0, int nlayers, int first, int last);
/* ... of them, the trained ones (all without LoRA; with it the adapters): the gradients' and the
 * optimizer state's elements. */
int64_t gpt_stage_trained_numel(const gpt_config *cfg, int tp, int ep, int layer0, int nlayers, int first, int last);
/* Whether the head transforms every position (dense h -> h) before the decoder: for a cost model. */
int gpt_head_transform(const gpt_config *c);
/* The stage's layout in bytes, as gpt_create carves it (the same functions, counting; each
 * buffer unrounded), for a config on tp tensor-parallel ranks (sp: sequence parallel) and cp
 * context-parallel ones (each holding seq / cp positions of a sample; 1: none; cp_comm: PS_CP_*) with
 * micro-batches of mbs samples, kept GEMM inputs in a 2-byte dtype when lowp: the one
 * description the memory prediction reads (the padded vocabulary taken up to a multiple of tp).
 * The layer's figures are those of global layer `layer` (its MLP the dense one or the MoE block,
 * by --moe-layer-freq), the scratch that of a stage holding that layer alone. */
typedef struct gpt_layout_bytes {
    double inputs;          /* one micro-batch: ids, targets (device) and the stage input */
    double types;           /* ... the first stage's token types (0: the model has none) */
    double layer;           /* ... one layer, everything kept */
    double layer_selective; /* ... one layer under selective recomputation */
    double layer_redo;      /* what selective recomputation redoes of a layer (one shared set) */
    double head;            /* ... last stage: final norm, logits, per-token losses, the head's */
    double scratch;         /* the backward scratch of a stage with layers, shared (not the head's) */
    double scratch_mlp;     /* ... of it, the MLP slot's kind's (a stage holding both MLP kinds has both) */
    double scratch_head;    /* the head's scratch (last stage) */
    double host;            /* host memory of the scratch: the losses' staging */
    double host_head;       /* ... and the head's host work (last stage) */
} gpt_layout_bytes;
void gpt_layout_bytes_of(const gpt_config *cfg, int tp, int cp, int cp_comm, int ep, int sp, int mbs, int lowp,
                         int layer, gpt_layout_bytes *out);

/* Takes a free activation slot for one micro-batch (dies if all max_inflight are in use);
 * gpt_acts_release returns it after its backward (or after a forward-only pass). */
gpt_acts *gpt_acts_acquire(gpt_model *m);
void gpt_acts_release(gpt_model *m, gpt_acts *a);
/* The slot's stage-input buffer (mbs, s, h): a pipeline may receive the previous stage's output
 * straight into it (then pass it as gpt_forward's input), and once gpt_backward has returned it
 * is free to hold the outgoing input gradient until the slot is released. */
float *gpt_acts_input(gpt_acts *a);
/* The parameters (grad 0) or gradients of logical tensor `name` on this rank (its slice), or
 * NULL when the stage does not hold it. */
float *gpt_param(const gpt_model *m, const char *name, int grad);
/* Last stage, after gpt_forward: the micro-batch's per-token losses (B, s) and its logits over this
 * rank's vocabulary slice (B, s, V/t), in backend memory (the logits until gpt_backward turns
 * them into their gradient). For evaluation and tools. */
const float *gpt_acts_losses(const gpt_acts *a);
const float *gpt_acts_logits(const gpt_acts *a);

/* One micro-batch's inputs (host memory), named by what they are, not by a model family: the
 * batch source fills them, the schedule carries them, the stage reads what its config needs.
 * The weights say what one token's and one sample's loss count in the iteration's loss, so that
 * the sum over micro-batches and data-parallel ranks is the loss whatever the layout. */
typedef struct gpt_batch {
    int B;                   /* samples, <= the stage's mbs */
    const int32_t *ids;      /* (B, s): first stage */
    const int32_t *targets;  /* (B, s): last stage; -1: no loss at that position (when the head
                              * reads only some) */
    const int64_t *sample;   /* (B) global sample indices: every stage (dropout keys) */
    const int32_t *types;    /* (B, s) token types, first stage; NULL: the model has none */
    const int32_t *lengths;  /* (B) tokens before the padding, in [1, s]: every stage of a
                              * bidirectional model (attention); NULL: causal */
    const int32_t *labels;   /* (B) per-sample labels, last stage; NULL: none */
    /* packed documents (Megatron's --reset-attention-mask, --reset-position-ids, --eod-mask-loss):
     * each NULL when off */
    const int32_t *seg;      /* (B, s) every stage of a causal model: the first position of the
                              * document token t belongs to (attention reads keys [seg, t]) */
    const int32_t *pos;      /* (B, s) every stage: token t's position (learned or rotary) */
    const float *loss_mask;  /* (B, s) last stage: 1 where the token's loss counts, 0 where not;
                              * the loss is token_weight * sum(mask * loss) */
    float token_weight;      /* what one token's loss counts (a head that weights its loss) */
    float sample_weight;     /* what one sample's loss counts */
} gpt_batch;

/* The head's sums of a micro-batch's forward (for the iteration's means): at most GPT_MAX_STATS,
 * named by the head. */
#define GPT_MAX_STATS 8
int gpt_head_nstats(const gpt_config *c);
const char *gpt_head_stat_name(const gpt_config *c, int i);
/* Last stage, after gpt_forward: adds the micro-batch's sums into stats (gpt_head_nstats). */
void gpt_head_stats(const gpt_acts *a, double *stats);

/* A metric an iteration reports beside its loss. */
typedef struct gpt_metric {
    const char *key;   /* in metrics.jsonl: "lm_acc" */
    const char *label; /* in the log line: "lm acc" */
    const char *fmt;   /* its number in the log line: "%.4f" */
    double value;
} gpt_metric;
/* A list of numbers an iteration reports (metrics.jsonl only): element (i, j) at
 * values[i * stride + j]. */
typedef struct gpt_metric_array {
    const char *key;       /* "tokens_per_expert" */
    const char *fmt;       /* each number: "%.0f" */
    int rows, cols, stride;
    int nested;            /* rows lists of cols numbers; 0: one flat list of rows x cols */
    const double *values;
} gpt_metric_array;
#define GPT_MAX_ARRAYS 4
/* What an iteration's sums cover: the global batch's micro-batches (over data parallelism) and samples. */
typedef struct gpt_stats_scope {
    double micro_batches;
    double samples;
} gpt_stats_scope;

/* The blocks' statistics: what a block kind's layers measure in the training forwards, each
 * named by the kind (src/model/block.h's block_stat; the MoE block's: docs/moe.md), for the
 * model's layers of that kind in order (the dense layers of --moe-layer-freq have none).
 * gpt_block_stats_size: the numbers of the whole model's (0: no kind has statistics).
 * gpt_block_stat_index: where statistic `name` of the row-th layer with statistics starts in
 * them (a per-expert one: its first expert's), -1: none of that name. */
size_t gpt_block_stats_size(const gpt_config *c);
long gpt_block_stat_index(const gpt_config *c, int row, const char *name);
/* Adds the stage's sums since the last call into sums (gpt_block_stats_size numbers, the whole
 * model's: the trainer sums them over the stages and the data-parallel ranks), and clears the stage's. */
void gpt_block_stats_take(gpt_model *m, double *sums);
/* With sums over the global batch, before the optimizer step: what each kind of the stage does
 * with its layers' (the MoE block with --moe-router-enable-expert-bias: its expert bias moves
 * against the load). Every rank alike. */
void gpt_block_stats_apply(gpt_model *m, const double *sums);
/* The iteration's report of the blocks from sums over the global batch: their metrics into out
 * (returns how many, at most max) and their lists into arr (*narr counts them), which point into
 * sums (the derived numbers written there). */
int gpt_block_metrics(const gpt_config *c, double *sums, const gpt_stats_scope *s, gpt_metric *out, int max,
                      gpt_metric_array *arr, int *narr);
/* --moe-router-enable-expert-bias: moves each of the stage's MoE layers' expert bias against the
 * iteration's load, tokens (MoE layers, E) over the global batch for the whole model's MoE layers
 * in order (what gpt_block_stats_apply does with the MoE block's "tokens"). Nothing without the bias. */
void gpt_moe_update_expert_bias(gpt_model *m, const double *tokens);

/* What the head reports of an iteration from its sums over the global batch (stats, as
 * gpt_head_stats adds them): *loss the iteration's loss (overwritten only by a head whose sums
 * hold it), and its metrics into out (at most GPT_MAX_STATS); returns how many. */
int gpt_head_metrics(const gpt_config *c, const double *stats, double *loss, gpt_metric *out);
/* How a loss summed over micro-batches becomes the iteration's mean: divided by what (the
 * tokens of the global batch for a next-token loss; 1 for a head whose batches carry their
 * weights), and the validation line's name of it (NULL: "lm loss", with its perplexity). */
double gpt_head_loss_divisor(const gpt_config *c, int64_t global_batch);
const char *gpt_head_loss_name(const gpt_config *c);

/* Stage forward of one micro-batch `in` (in->B <= mbs samples). First stage: reads in->ids,
 * else `input` (B, s, h), the previous stage's output. Not last stage: returns the output
 * (B, s, h) in the activations (send it on). Last stage: computes the head's losses of
 * in->targets and returns NULL; *loss_sum (when not NULL) gets the micro-batch's loss (the sum
 * of its token losses, or the weighted sum for a head that weights them), or, with
 * m->defer_losses, is left for gpt_losses_take.
 * training = 0 turns dropout off. */
float *gpt_forward(gpt_model *m, gpt_acts *a, const gpt_batch *in, const float *input, int training,
                   double *loss_sum);
/* Last stage: adds into *loss_sum the losses of the micro-batches whose gpt_forward kept them
 * (m->defer_losses, and a head that keeps them: the LM head), in their forward order, and
 * forgets them: one read of device memory for up to 8 micro-batches, where reading each at its
 * forward would make the host wait for the device between every forward and its backward. The
 * sum is the one the forwards would have added. Nothing kept: nothing added. */
void gpt_losses_take(gpt_model *m, double *loss_sum);
/* Stage backward of the micro-batch in `a`. Last stage: seeds d(loss) = loss_scale per token
 * (e.g. 1 / tokens in the global batch; a weighting head: times the batch's weights). Else
 * `doutput` (B, s, h) is the gradient of this stage's output. Gradients accumulate into
 * m->grads. Not first stage: returns the gradient of the stage input (B, s, h) (send it back);
 * first stage: NULL. */
float *gpt_backward(gpt_model *m, gpt_acts *a, const float *doutput, float loss_scale);

/* ---- generation (src/model/infer.c): the incremental forward with a key/value cache ---- */
typedef struct gpt_kv_cache gpt_kv_cache;
/* A cache for B rows of up to `cap` positions of this stage's layers, and the buffers of steps of
 * up to `nmax` new positions a row: each slot's decode state and each block kind's step scratch
 * (their decode entries), in backend memory. Ends the job, naming it, when a block kind of the
 * stage has no decode step, or under sequence parallelism. */
gpt_kv_cache *gpt_kv_create(gpt_model *m, int B, int cap, int nmax);
void gpt_kv_free(gpt_model *m, gpt_kv_cache *c);
/* Runs positions [pos, pos + n) of every row through the stage, appending their keys and values
 * to the cache, which must hold [0, pos) of the same rows (pos = 0 starts over). First stage:
 * ids (B, n) host; other stages: input (B, n, h), the previous stage's output. Not last stage:
 * returns this stage's output (B, n, h) to send on. Last stage: writes logits (B, vocab) (host,
 * the real vocabulary gathered over tensor parallelism) of each row's last new position and
 * returns NULL. Dropout is off. Collective over the tensor-parallel group. */
float *gpt_infer(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n,
                 float *logits);

/* What gpt_infer_each hands over: logits (count, vocab) (host) of rows [r0, r0 + count) of a step
 * of B rows of n positions, row b's position pos + i being row b n + i. */
typedef void (*gpt_logits_fn)(void *user, int r0, int count, const float *logits);
/* gpt_infer, but the last stage hands the logits of every new position (not only each row's last)
 * to fn, in row order, a chunk of rows at a time (about 16M logits, at least B rows), and returns NULL; other stages return their output
 * as gpt_infer does. Collective over the tensor-parallel group. */
float *gpt_infer_each(gpt_model *m, gpt_kv_cache *c, const int32_t *ids, const float *input, int pos, int n,
                      gpt_logits_fn fn, void *user);

/* The whole model's logical tensors as a one-rank table in m->table / m->ntensors (no buffers;
 * free(m->table) after): the canonical order below. */
void gpt_logical_table(const gpt_config *cfg, gpt_model *m);
/* Writes this rank's slices of the parameters into `fd` (a file of gpt_num_params floats in the
 * canonical layout) at their logical positions. Replicated tensors and the last stage's copy of
 * the word embedding are written by one owner only. Every rank of a model replica writes; the
 * union is the whole model. Returns 0, or -1 with errno set. */
int gpt_write_canonical(const gpt_model *m, int fd, int writer);


#endif
