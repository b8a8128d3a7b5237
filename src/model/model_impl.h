/* Private to src/model: how a block registers its tensors in the stage's table and carves its
 * activations from the stage's arena, and the scratch every block's backward shares. Each block
 * (embedding.c, norm.c, attention.c, mlp.c) owns its tensors' logical shapes, tensor-parallel
 * split, initialisation streams and activation sizes; layer.c composes them into a transformer
 * layer; gpt.c builds a pipeline stage from layers and owns the buffers. */
#ifndef TRIDENT_MODEL_IMPL_H
#define TRIDENT_MODEL_IMPL_H

#include "trident/gpt.h"

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
    int tp, tp_rank; /* the slices taken: tp 1 gives the logical (whole) tensors */
} table_builder;

/* Philox stream of a logical tensor: (global layer, or -1 outside the layers; kind). */
uint64_t model_stream(int layer, int kind);
/* Appends logical tensor `name` of shape (d0, d1) (d1 = 0: a vector) to the table. shard_dim:
 * the dimension split over tp (-1 replicated), as `blocks` equal blocks each split (3 for
 * q|k|v). The buffers do not exist yet: *param and *grad are pointed at them later. */
void model_add_tensor(table_builder *tb, float **param, float **grad, enum init_kind init, uint64_t stream,
                      const char *name, int64_t d0, int64_t d1, int shard_dim, int blocks, int no_decay);

/* ---- activations ---- */

/* Carves buffers from an arena, or (ar == NULL) only counts their bytes. */
typedef struct {
    td_arena *ar;
    size_t bytes;
    int skip_attn_core; /* selective recomputation: attn_acts_carve leaves atty and lse NULL */
} carver;
void *model_carve(carver *cv, size_t bytes, const char *what);
#define CARVE(cv, ptr, type, count) ((ptr) = (type *)model_carve((cv), (size_t)(count) * sizeof(type), #ptr))

/* ---- kept GEMM inputs ----
 * The activations a micro-batch keeps only to feed GEMMs again in the backward (the norms'
 * outputs, the attention core's output, the MLP activation's output) are kept in the GEMMs'
 * dtype under mixed precision (--bf16, --fp16: half the bytes, and the GEMMs read them as they
 * are), in fp32 otherwise. Under sequence parallelism the norms' outputs stay fp32: they are
 * gathered along the sequence before their GEMMs (and hold s/t of it). A producer writes fp32
 * where model_kept_stage says, then model_kept_done rounds that into the kept buffer. */
typedef struct {
    void *p;
    be_dtype dt;
} kept_buf;
/* Carves `count` elements; lowp: may be kept in the GEMMs' dtype. */
void model_carve_kept(carver *cv, const gpt_model *m, kept_buf *k, int64_t count, int lowp, const char *what);
float *model_kept_stage(const gpt_model *m, const kept_buf *k);
void model_kept_done(const gpt_model *m, const kept_buf *k, size_t n);
static inline be_in model_kept_in(const kept_buf *k)
{
    be_in x = {k->p, k->dt};
    return x;
}

/* Forward temporaries and backward gradients, shared by every micro-batch of the stage. */
struct gpt_scratch {
    float *branch;   /* (BT, h): row-linear output before bias-dropout-add */
    float *dres;     /* (BT, h): gradient flowing down the residual stream */
    float *dln;      /* (BT, h): gradient of a norm output */
    float *dtmp;     /* (BT, h): gradient of a branch before dropout */
    float *dqkv;     /* (BT, 3nd/t); grouped-query attention: the queries', (BT, nd/t) */
    float *dkv;      /* grouped-query attention: (BT, 2gd/t) */
    float *datty;    /* (BT, nd/t) */
    float *dfch;     /* (BT, f/t), SwiGLU (BT, 2f/t) */
    float *dfch_gelu;/* (BT, f/t) */
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
    /* BERT's last stage only (NULL otherwise): */
    float *dcls, *dpool; /* (mbs, h): gradients of the pooler's input and output */
    float *host_big;     /* host memory, max(3 BT, 2 mbs h): the heads' host work */
};

/* ---- blocks: tensors, activations, forward, backward (backward accumulates into grads) ---- */

/* Norm: LayerNorm, out = (x - mean) * rstd * w + b, or RMSNorm, out = x * rstd * w, over the
 * hidden size; replicated over tp. */
typedef struct {
    kept_buf out;             /* (BT, h) */
    float *mean, *rstd;       /* (BT) LayerNorm only, (BT) */
} norm_acts;
/* Adds bias (stream kind; LayerNorm only) and weight (kind + 1) as "<prefix>.bias"/".weight". */
void norm_tensors(table_builder *tb, int layer, int kind, const char *prefix, norm_params *p, norm_params *g);
void norm_acts_carve(carver *cv, const gpt_model *m, norm_acts *a);
void norm_fwd(const gpt_model *m, norm_acts *a, const norm_params *p, const float *x, int BT);
/* dx += d(norm input) from dout; grads of w and b accumulate. */
void norm_bwd(const gpt_model *m, float *dx, norm_params *g, const float *dout, const float *x, const norm_params *p,
              const norm_acts *a, int BT);

/* Attention: QKV column-parallel (h -> (n + 2g)d/t), rotary positions, causal attention on the
 * n/t local heads, output projection row-parallel (nd/t -> h). The output bias is added by the
 * layer (with dropout). */
typedef struct {
    float *q;    /* (BT, 3nd/t): [q | k | v] of the local heads, rotated; grouped-query
                  * attention: the queries only (BT, nd/t) */
    float *kv;   /* grouped-query attention: (BT, 2gd/t) [k | v] of the local groups */
    kept_buf atty; /* (BT, nd/t) */
    float *lse;    /* (B, n/t, s) */
} attn_acts;
void attn_tensors(table_builder *tb, int layer, attn_params *p, attn_params *g);
void attn_acts_carve(carver *cv, const gpt_model *m, attn_acts *a);
/* out (BT, h): the projection of the attention of x (BT, h), before the output bias. */
/* klen (B) host: BERT's bidirectional attention over each sample's unpadded keys; NULL: causal. */
void attn_fwd(gpt_model *m, attn_acts *a, const attn_params *p, float *out, be_in x, int B, const int32_t *klen,
              const be_drop *d_att);
/* The attention core alone: atty and lse from the kept (rotated) q, k, v. */
void attn_core_fwd(gpt_model *m, const attn_acts *a, int B, const int32_t *klen, const be_drop *d_att);
/* From dbranch (BT, h), the gradient of the block output after its bias: the bias, weight
 * grads and dx (BT, h, overwritten). */
void attn_bwd(gpt_model *m, float *dx, attn_params *g, const float *dbranch, const attn_acts *a, const attn_params *p,
              be_in x, int B, const int32_t *klen, const be_drop *d_att);

/* MLP: fc column-parallel (h -> f/t) with bias and GeLU, or (h -> 2f/t, gate and up) with
 * SwiGLU; fc2 row-parallel (f/t -> h); the fc2 bias is added by the layer (with dropout). */
typedef struct {
    float *fch;      /* (BT, f/t): fc output before bias and GeLU; SwiGLU (BT, 2f/t) [gate | up] */
    kept_buf fch_gelu; /* (BT, f/t): the activation's output */
} mlp_acts;
void mlp_tensors(table_builder *tb, int layer, mlp_params *p, mlp_params *g);
void mlp_acts_carve(carver *cv, const gpt_model *m, mlp_acts *a);
void mlp_fwd(gpt_model *m, mlp_acts *a, const mlp_params *p, float *out, be_in x, int BT);
void mlp_bwd(gpt_model *m, float *dx, mlp_params *g, const float *dbranch, const mlp_acts *a, const mlp_params *p,
             be_in x, int BT);

/* Embedding: word (vocab-parallel) plus learned absolute positions (when the model has them)
 * plus token types (BERT: types (B, seq_l), this rank's positions), then dropout. */
void embedding_tensors(table_builder *tb, gpt_model *m);
void embedding_fwd(gpt_model *m, float *out, const int32_t *ids, const int32_t *types, int B, const be_drop *d);
/* From dout (BT, h; overwritten by the dropout backward). */
void embedding_bwd(gpt_model *m, float *dout, const int32_t *ids, const int32_t *types, int B, const be_drop *d);

/* A transformer layer: x + attention(norm(x)), then + MLP(norm(.)), each branch with bias,
 * dropout and residual add; the place where recomputation and sequence parallelism hook in. */
typedef struct {
    norm_acts ln1;
    attn_acts attn;
    float *res2; /* (BT, h): x + attention branch */
    norm_acts ln2;
    mlp_acts mlp;
    float *out;  /* (BT, h): the layer output */
} layer_acts;
void layer_tensors(table_builder *tb, int layer, gpt_layer *p, gpt_layer *g);
void layer_acts_carve(carver *cv, const gpt_model *m, layer_acts *a);
/* l: the stage-local layer of the micro-batch in `acts` (its size, samples, dropout on/off). */
void layer_fwd(gpt_model *m, gpt_acts *acts, int l, const float *x);
/* On entry m->scratch->dres holds d(layer output); on exit d(layer input). */
void layer_bwd(gpt_model *m, gpt_acts *acts, int l, const float *x);
/* Re-runs layer l's attention core (its dropout included) into its atty and lse. */
void layer_attn_core_fwd(gpt_model *m, gpt_acts *acts, int l);

/* Saved activations of one micro-batch on the stage (TP-local shapes, BT = B*s). */
struct gpt_acts {
    int in_use;
    int B;                 /* samples in this micro-batch */
    int training;          /* dropout on */
    int64_t *sample;       /* (mbs) host: global sample index of each row */
    int32_t *ids;          /* (mbs, s): first stage */
    int32_t *targets;      /* (mbs, s): last stage */
    float *input;          /* (BT, h): stage input (embedding output on the first stage) */
    layer_acts *layers;    /* nlayers */
    norm_acts lnf;         /* last stage: the final norm */
    float *logits;         /* last stage: (BT, V/t); the backward overwrites it with dlogits */
    float *losses, *maxv, *sumexp, *tlogit; /* last stage: (BT) each */
    /* BERT (NULL otherwise): */
    int32_t *types;        /* (mbs, seq_l) first stage: this rank's positions' token types */
    int32_t *klen;         /* (mbs) host: tokens before the padding */
    int32_t *sop;          /* (mbs) host: sentence-order labels */
    int32_t *labels;       /* (mbs, s) host, last stage: the targets (masked-LM labels, -1: none) */
    float mlm_weight, sop_weight;
    struct bert_head_acts *bert; /* last stage: the heads' activations */
    double stats[GPT_BERT_NSTATS]; /* last stage: the forward's sums */
};

/* ---- BERT's heads (bert.c): last stage, after the final norm ---- */

/* The last stage's BERT tensors in buffer order (the output bias, the LM head's norm and dense
 * transform, then the binary head and the pooler); the tied decoder weight is the GPT head's. */
void bert_head_tensors(table_builder *tb, gpt_model *m);
/* Carves (ar NULL: counts) a micro-batch's head activations into *a (calloc'ed by the caller). */
void bert_head_acts_carve(carver *cv, const gpt_model *m, struct bert_head_acts *a);
size_t bert_head_acts_size(void);
/* The heads and losses of the micro-batch in acts, from the final norm's output (kept in
 * acts->lnf) and its input x; fills acts->losses and acts->stats. Returns the weighted loss. */
double bert_heads_fwd(gpt_model *m, gpt_acts *acts, const float *x);
/* Their backward: s->dres (B, seq_l, h) written with the gradient of the final norm's input x;
 * the heads' and the final norm's weight gradients accumulate. */
void bert_heads_bwd(gpt_model *m, gpt_acts *acts, const float *x, float loss_scale);

/* ---- activation recomputation (recompute.c) ---- */

/* Carves (ar NULL: counts) the activations shared by every micro-batch: the layers a full
 * recomputation re-runs, or selective recomputation's attention core output and lse. `shared`
 * holds the stage's layers (calloc'ed, nlayers). Returns the bytes. */
size_t recompute_shared_layout(gpt_model *m, layer_acts *shared, td_arena *ar);
/* Carves one micro-batch's layer activations: what it keeps, the rest pointed at `shared`. */
void recompute_layers_carve(carver *cv, const gpt_model *m, layer_acts *layers, const layer_acts *shared);
/* Before layer l's backward: re-runs what the micro-batch in `acts` did not keep of it. */
void recompute_before_bwd(gpt_model *m, gpt_acts *acts, int l);

/* ---- dropout: a site id per call site, 0 the embedding, then three per layer ---- */
be_drop model_drop(const gpt_model *m, const gpt_acts *a, float p, int site, int unit0);
/* The first position a sample holds outside the tensor-parallel regions: tp_rank * seq_l under
 * sequence parallelism, else 0. */
static inline int model_pos0(const gpt_model *m) { return m->sp ? m->ps->tp_rank * m->seq_l : 0; }
/* The group a block's row-parallel forward and column-parallel backward all-reduce over: NULL
 * under sequence parallelism, whose reduce-scatter the layer does instead. */
static inline const comm *model_tp_reduce(const gpt_model *m) { return m->sp ? NULL : m->ps->tp_group; }
/* Sequence parallelism's f (layer.c): a block's input, the norm output x (B, seq_l, h) gathered
 * along the sequence into scratch; x itself without it. */
be_in model_sp_input(gpt_model *m, const kept_buf *x, int B);
/* ... and f's backward: the norm output's gradient from the block's unreduced input gradient in
 * scratch->dln, reduce-scattered to this rank's positions; scratch->dln itself without it. */
const float *model_sp_norm_grad(gpt_model *m, int B);
static inline int site_embedding(void) { return 0; }
static inline int site_attn_probs(int layer) { return 1 + 3 * layer; }
static inline int site_attn_out(int layer) { return 2 + 3 * layer; }
static inline int site_mlp_out(int layer) { return 3 + 3 * layer; }

#endif
