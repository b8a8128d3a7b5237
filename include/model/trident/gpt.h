/* The GPT model of one pipeline stage. Owns the parameter and gradient buffers with their
 * tensor table, layout-invariant initialisation, and the forward and backward passes of a
 * stage (a range of layers; the first stage adds the embeddings, the last the final norm, the
 * tied LM head and the loss), written for tensor parallelism. The layers are composed of
 * blocks (src/model/: embedding, norm, attention, mlp, layer). */
#ifndef TRIDENT_GPT_H
#define TRIDENT_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "trident/arena.h"
#include "trident/parallel_state.h"

typedef enum { GPT_NORM_LAYERNORM, GPT_NORM_RMSNORM } gpt_norm;
typedef enum { GPT_POS_LEARNED, GPT_POS_ROPE, GPT_POS_NONE } gpt_pos;
/* The model family: a causal decoder with a next-token loss (GPT, Llama), or Megatron-BERT's
 * bidirectional encoder (token-type embeddings, a padding mask, the masked-LM head with its
 * dense + GeLU + norm transform and output bias, the pooler and the sentence-order head). */
typedef enum { GPT_FAMILY_GPT, GPT_FAMILY_BERT } gpt_family;

/* A zero field means GPT-2's choice, so a zeroed config with the sizes set is GPT-2. */
typedef struct gpt_config {
    int num_layers;      /* L, the whole model */
    int hidden;          /* h */
    int heads;           /* n: query heads */
    int query_groups;    /* g: key/value heads; 0: n (multi-head attention) */
    int kv_channels;     /* d: head size; 0: h / n */
    int ffn;             /* f, 4h by default */
    int seq;             /* s: tokens per sample */
    int max_pos;         /* learned positions (>= seq) */
    int vocab;           /* real vocabulary (50257) */
    int padded_vocab;    /* vocab padded to a multiple of make_vocab_size_divisible_by * tp */
    gpt_norm norm;       /* LayerNorm (GPT-2) or RMSNorm (Llama) */
    float norm_eps;      /* 0: 1e-5 */
    gpt_pos pos;         /* learned absolute positions (GPT-2), rotary (Llama) or none */
    float rotary_base;   /* theta; 0: 10000 */
    float rotary_percent;/* fraction of each head's dims rotated; 0: all */
    int swiglu;          /* MLP: SwiGLU (gate and up projections) instead of GeLU */
    int disable_bias;    /* no biases in the linear layers (Llama) */
    int add_qkv_bias;    /* ... except the QKV projection's (Qwen) */
    int untied;          /* the output layer is its own tensor, not the word embedding */
    float init_std;      /* normal init std; output projections std / sqrt(2 L) */
    float hidden_dropout;
    float attn_dropout;
    uint64_t seed;
    gpt_family family;   /* GPT (0) or BERT */
    int binary_head;     /* BERT: the pooler and the sentence-order head (--bert-binary-head) */
} gpt_config;

/* The resolved values of the fields whose zero means a default. */
static inline int gpt_groups(const gpt_config *c) { return c->query_groups ? c->query_groups : c->heads; }
static inline int gpt_head_dim(const gpt_config *c) { return c->kv_channels ? c->kv_channels : c->hidden / c->heads; }
static inline float gpt_norm_eps(const gpt_config *c) { return c->norm_eps > 0 ? c->norm_eps : 1e-5f; }
static inline float gpt_rotary_base(const gpt_config *c) { return c->rotary_base > 0 ? c->rotary_base : 10000.0f; }
/* Rotated dims of each head (d * rotary_percent, even); 0 without rotary positions. */
int gpt_rotary_dims(const gpt_config *c);
/* The query projection's width n*d, and one key or value projection's g*d. */
static inline int gpt_q_width(const gpt_config *c) { return c->heads * gpt_head_dim(c); }
static inline int gpt_kv_width(const gpt_config *c) { return gpt_groups(c) * gpt_head_dim(c); }
/* Grouped-query attention keeps q and kv as two tensors; multi-head attention one fused qkv. */
static inline int gpt_gqa(const gpt_config *c) { return gpt_groups(c) != c->heads; }
static inline int gpt_has_bias(const gpt_config *c) { return !c->disable_bias; }
static inline int gpt_has_qkv_bias(const gpt_config *c) { return !c->disable_bias || c->add_qkv_bias; }
static inline int gpt_is_bert(const gpt_config *c) { return c->family == GPT_FAMILY_BERT; }
/* BERT's token types (segments A and B). */
#define GPT_BERT_TOKENTYPES 2

struct td_args;
/* The architecture from the flags (vocabulary left 0: the tokenizer gives it). */
void gpt_config_from_args(gpt_config *c, const struct td_args *a);
/* Checks the architecture flags for `tp` tensor-parallel ranks: 0, or -1 with one line naming
 * the flags and the rule in msg. */
int gpt_config_validate(const struct td_args *a, int tp, char *msg, size_t msglen);

/* Writes the fields whose zero means a default as 0 when they hold that default, so two configs
 * of the same model compare equal field by field. */
void gpt_config_normalize(gpt_config *c);
/* The inverse: writes each of those fields as the value it means (query groups n, head size
 * h / n, epsilon 1e-5, rotary base 10000, rotary percent 1), for printing. */
void gpt_config_resolve(gpt_config *c);
/* One line naming the architecture: "12 layers, hidden 768, 12 heads in 4 query groups of 64, ...". */
void gpt_config_describe(const gpt_config *c, char *out, size_t len);

/* Megatron's padding: the smallest multiple of divisible_by * tp that is >= vocab. */
int gpt_padded_vocab(int vocab, int divisible_by, int tp);

/* The model settings a checkpoint stores, in one table (meta.json's "model" section, under
 * Megatron's argument names): written and read by the checkpoint code, shown by `trident
 * checkpoint info`, held against the flags by the trainer. */
typedef enum {
    GPT_KEY_ARCH,    /* fixes tensor shapes: the flag must agree, or the value comes from the checkpoint */
    GPT_KEY_VOCAB,   /* the tokenizer's vocabulary (--vocab-file): must agree */
    GPT_KEY_PADDING, /* the padded vocabulary: may differ (rows are copied or dropped on load) */
    GPT_KEY_RUN,     /* a run setting (sequence length): taken from the checkpoint when its flag is not given */
    GPT_KEY_RECORD,  /* recorded for reference only (init, dropout) */
} gpt_key_kind;

typedef struct gpt_config_key {
    const char *key;     /* in meta.json and Megatron's args */
    const char *flag;    /* the flag of `trident train` that sets it */
    gpt_key_kind kind;
    int is_float;        /* a float field of gpt_config, else an int (or enum) one */
    size_t offset;       /* of the field in gpt_config */
    double lo, hi;       /* valid range */
    const char *choices; /* an enum: "LayerNorm|RMSNorm", the value its index, written as the name */
    const char *enable;  /* a switch the flag needs (--group-query-attention), set when the value is not 0 */
    int zero_default;    /* 0 means the flag's default (--kv-channels: h / n): the flag is left unset */
} gpt_config_key;

extern const gpt_config_key GPT_CONFIG_KEYS[];
extern const int GPT_NCONFIG_KEYS;
double gpt_config_get(const gpt_config *c, const gpt_config_key *k);
void gpt_config_set(gpt_config *c, const gpt_config_key *k, double v);

/* The GPT_CONFIG_KEYS key a dimension of size n of logical tensor `name` comes from (for
 * messages). */
const char *gpt_logical_dim_key(const gpt_config *c, const char *name, int64_t n);
/* The value of key k as text: a number, or an enum's name. */
void gpt_config_value_str(const gpt_config *c, const gpt_config_key *k, char *out, size_t len);

/* Logical tensor i of the whole model in canonical order (see gpt_canonical_offset): writes its
 * name, its logical shape ((d0) with shape[1] = 0, or (d0, d1)) and, when keys is not NULL, the
 * GPT_CONFIG_KEYS key each dimension comes from; returns its ndim, 0 when i is past the last
 * (GPT-2 has 4 + 12 L). */
int gpt_logical_tensor(const gpt_config *cfg, int i, char *name, size_t len, int64_t shape[2], const char *keys[2]);

/* Pointers to the tensors of each block (parameters, or their gradients), TP-local shapes. */
typedef struct norm_params {
    float *w, *b;         /* (h), (h) */
} norm_params;
typedef struct attn_params {
    float *qkv_w;         /* (3nd/t, h): rows [q of local heads | k | v]; with grouped-query
                           * attention the queries only, (nd/t, h) */
    float *qkv_b;         /* (3nd/t), or (nd/t); NULL without a QKV bias */
    float *kv_w;          /* grouped-query attention: (2gd/t, h), rows [k of local groups | v] */
    float *kv_b;          /* (2gd/t) or NULL */
    float *proj_w;        /* (h, nd/t) */
    float *proj_b;        /* (h) or NULL */
} attn_params;
typedef struct mlp_params {
    float *fc_w;          /* (f/t, h); SwiGLU: (2f/t, h), rows [gate | up] of the local slice */
    float *fc_b;          /* (f/t) or (2f/t); NULL without biases */
    float *fc2_w;         /* (h, f/t) */
    float *fc2_b;         /* (h) or NULL */
} mlp_params;

/* One transformer layer: norm, attention, norm, MLP. */
typedef struct gpt_layer {
    norm_params ln1;
    attn_params attn;
    norm_params ln2;
    mlp_params mlp;
} gpt_layer;

/* Pointers to a stage's tensors. */
typedef struct gpt_tensors {
    gpt_layer *layers;    /* nlayers of them */
    float *wte;           /* (V/t, h) word embedding: first stage; also the head's weight when
                           * the first stage is the last */
    float *wpe;           /* (max_pos, h): first stage */
    norm_params lnf;      /* (h): last stage, the final norm */
    float *head_w;        /* (V/t, h): last stage. Tied: == wte on a one-stage model, else a copy
                           * kept equal to it; untied: the output layer, its own tensor */
    /* BERT only (NULL otherwise): */
    float *tte;           /* (2, h) token-type embedding: first stage */
    float *lm_dense_w, *lm_dense_b; /* (h, h), (h): the LM head's transform, last stage */
    norm_params lm_norm;  /* (h): ... its norm */
    float *lm_bias;       /* (V/t): the output bias of the tied decoder */
    float *pool_w, *pool_b; /* (h, h), (h): the pooler, with the binary head */
    float *bin_w, *bin_b; /* (2, h), (2): the sentence-order head */
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
} gpt_tensor_info;

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
    const backend *be;
    int layer0, nlayers;     /* global layers [layer0, layer0 + nlayers) on this stage */
    int first, last;         /* this stage has the embeddings / the head */
    int tp, heads_l, groups_l, ffn_l, vocab_l, vstart; /* TP-local sizes */
    int q_l, kv_l;           /* TP-local widths of the queries (n/t heads) and of keys or values */
    int mbs;                 /* micro-batch size the arena was sized for */
    int sp;                  /* sequence parallel (ps->sequence_parallel): outside the tensor-
                              * parallel regions (norms, dropout, residuals, the stage input and
                              * output) a sample holds seq_l = seq / tp positions, this rank's */
    int seq_l;               /* seq / tp with sp, else seq */

    float *params, *grads;   /* one buffer each, numel floats, laid out by the table */
    size_t numel;
    gpt_tensors p, g;        /* pointer tables over params and grads */
    gpt_tensor_info *table;  /* ntensors entries, in buffer order (reverse backprop order) */
    int ntensors;

    td_arena arena;          /* activations of the micro-batches in flight + backward scratch,
                              * carved once at create (backend memory) */
    size_t acts_bytes;       /* bytes of one micro-batch's activations */
    gpt_recompute rc;        /* activation recomputation */
    size_t rc_bytes;         /* bytes of the activations recomputation shares across micro-batches */
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
} gpt_model;

/* Builds the stage of `ps` owning layers [layer0, layer0 + nlayers), allocates its buffers
 * and an arena for `max_inflight` micro-batches of `mbs` samples, and initialises the
 * parameters from (seed, logical tensor, element) so every layout starts from the same model. */
gpt_model *gpt_create(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                      int mbs, int max_inflight);
/* gpt_create with activation recomputation (rc NULL: none): the arena keeps less of each
 * micro-batch (acts_bytes) plus rc_bytes shared by all of them. */
gpt_model *gpt_create_recompute(const gpt_config *cfg, const ps_state *ps, const backend *be, int layer0, int nlayers,
                                int mbs, int max_inflight, const gpt_recompute *rc);
/* "none", "selective", "full uniform 2", "full block 3". */
void gpt_recompute_describe(const gpt_recompute *rc, char *out, size_t len);
void gpt_free(gpt_model *m);

/* Takes a free activation slot for one micro-batch (dies if all max_inflight are in use);
 * gpt_acts_release returns it after its backward (or after a forward-only pass). */
gpt_acts *gpt_acts_acquire(gpt_model *m);
void gpt_acts_release(gpt_model *m, gpt_acts *a);
/* The slot's stage-input buffer (mbs, s, h): a pipeline may receive the previous stage's output
 * straight into it (then pass it as gpt_forward's input), and once gpt_backward has returned it
 * is free to hold the outgoing input gradient until the slot is released. */
float *gpt_acts_input(gpt_acts *a);
/* Last stage, after gpt_forward: the micro-batch's per-token losses (B, s) and its logits over this
 * rank's vocabulary slice (B, s, V/t), in backend memory (the logits until gpt_backward turns
 * them into their gradient). For evaluation and tools. */
const float *gpt_acts_losses(const gpt_acts *a);
const float *gpt_acts_logits(const gpt_acts *a);

/* BERT's inputs beside the tokens (host memory). The targets are the masked-LM labels: the
 * original token at a masked position, -1 elsewhere (no loss there). The loss of an iteration is
 * the mean masked-LM loss over the masked tokens of the global batch plus the mean sentence-order
 * loss over its samples; the weights say what one token's and one sample's loss count, so that
 * the sum over micro-batches and data-parallel ranks is that mean whatever the layout. */
typedef struct gpt_bert_batch {
    const int32_t *types;   /* (B, s) token types 0 or 1: first stage */
    const int32_t *lengths; /* (B) tokens before the padding, in [1, s]: every stage (attention) */
    const int32_t *sop;     /* (B) sentence-order labels 0 or 1 (1: swapped): last stage */
    float mlm_weight;       /* 1 / masked tokens of the global batch */
    float sop_weight;       /* 1 / samples of the global batch */
} gpt_bert_batch;

/* What a BERT last stage's forward measured of a micro-batch (sums, for the iteration's means). */
enum { GPT_BERT_MLM_LOSS, GPT_BERT_MLM_TOKENS, GPT_BERT_MLM_CORRECT, GPT_BERT_SOP_LOSS, GPT_BERT_SOP_SAMPLES,
       GPT_BERT_SOP_CORRECT, GPT_BERT_NSTATS };

/* Stage forward of one micro-batch of B <= mbs samples. First stage: reads `ids` (B, s), else
 * `input` (B, s, h), the previous stage's output. Not last stage: returns the output (B, s, h)
 * in the activations (send it on). Last stage: computes the losses of `targets` (B, s) and
 * returns NULL; *loss_sum gets the sum of the B*s token losses (GPT) or the weighted loss of the
 * micro-batch (BERT: masked-LM and sentence-order losses times their weights).
 * bert: BERT's inputs (NULL for GPT). sample (B): global sample indices (for dropout);
 * training = 0 turns dropout off. */
float *gpt_forward(gpt_model *m, gpt_acts *a, const int32_t *ids, const float *input, const int32_t *targets,
                   const gpt_bert_batch *bert, const int64_t *sample, int B, int training, double *loss_sum);
/* BERT, last stage, after gpt_forward: adds the micro-batch's GPT_BERT_* sums into stats. */
void gpt_bert_stats(const gpt_acts *a, double stats[GPT_BERT_NSTATS]);
/* Stage backward of the micro-batch in `a`. Last stage: seeds d(loss) = loss_scale per token
 * (e.g. 1 / tokens in the global batch; BERT: loss_scale times the batch's weights). Else
 * `doutput` (B, s, h) is the gradient of this stage's output. Gradients accumulate into
 * m->grads. Not first stage: returns the gradient of the stage input (B, s, h) (send it back);
 * first stage: NULL. */
float *gpt_backward(gpt_model *m, gpt_acts *a, const float *doutput, float loss_scale);

/* ---- generation (src/model/infer.c): the incremental forward with a key/value cache ---- */
typedef struct gpt_kv_cache gpt_kv_cache;
/* A cache for B rows of up to `cap` positions of this stage's layers, and the buffers of steps of
 * up to `nmax` new positions a row. */
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

/* The whole model's logical tensors as a one-rank table in m->table / m->ntensors (no buffers;
 * free(m->table) after): the canonical order below. */
void gpt_logical_table(const gpt_config *cfg, gpt_model *m);
/* Offset (in elements) of logical tensor `name` in the canonical flat layout of the whole model:
 * word embedding, position embedding, layers 0..L-1 (each in table order), final norm, output
 * layer (untied) — every tensor at its logical shape. -1 for an unknown name. Total size:
 * gpt_num_params. */
int64_t gpt_canonical_offset(const gpt_config *cfg, const char *name);
/* Writes this rank's slices of the parameters into `fd` (a file of gpt_num_params floats in the
 * canonical layout) at their logical positions. Replicated tensors and the last stage's copy of
 * the word embedding are written by one owner only. Every rank of a model replica writes; the
 * union is the whole model. Returns 0, or -1 with errno set. */
int gpt_write_canonical(const gpt_model *m, int fd, int writer);

/* Parameters of the logical model (every tensor counted once, padded vocab included). */
int64_t gpt_num_params(const gpt_config *cfg);
/* Model FLOPs of one iteration of `batch` samples (Megatron's formula, padded vocab). */
double gpt_flops_per_iteration(const gpt_config *cfg, int64_t batch, int full_recompute);

#endif
