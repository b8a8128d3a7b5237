/* Private to src/model: the stage's pieces. The embedding and the head are small vtables like
 * the blocks' (block.h); a layer (layer.c) runs the slots of gpt_layer through their ops;
 * recompute.c decides what a micro-batch keeps; gpt.c builds a stage and runs it. */
#ifndef TRIDENT_MODEL_IMPL_H
#define TRIDENT_MODEL_IMPL_H

#include "block.h"

/* A carver of the stage's activations: kept GEMM inputs in the backend's GEMM dtype. */
static inline carver model_carver(const gpt_model *m, td_arena *ar)
{
    carver cv = {ar, 0, 0, m->be->gemm_dtype, m->scratch ? m->scratch->lp_stage : NULL, 0};
    return cv;
}

/* ---- the embedding (embedding.c): first stage ---- */

/* Word (vocab-parallel) plus learned absolute positions (when the model has them) plus token
 * types (when it has them: types (B, seq_l), this rank's positions), then dropout. */
typedef struct embedding_ops {
    /* canonical: the whole model's logical order (words, positions, token types), else the
     * buffer's (the reverse). */
    void (*tensors)(table_builder *tb, gpt_tensors *p, gpt_tensors *g, int canonical);
    /* pos (B, seq_l) device: this rank's positions' learned-position rows; NULL: pos0 + t */
    void (*fwd)(gpt_model *m, float *out, const int32_t *ids, const int32_t *types, const int32_t *pos, int B,
                const be_drop *d);
    /* From dout (B, seq_l, h; overwritten by the dropout backward). */
    void (*bwd)(gpt_model *m, float *dout, const int32_t *ids, const int32_t *types, const int32_t *pos, int B,
                const be_drop *d);
} embedding_ops;
extern const embedding_ops embedding_block;

/* ---- a transformer layer (layer.c) ---- */

/* The layer's two residual halves (training's layer.c and generation's infer.c walk them alike):
 * x + branch(norm(x)), the norm slot before each branch slot. */
enum { LAYER_HALF_ATTN, LAYER_HALF_MLP, LAYER_NHALVES };
static inline int layer_norm_slot(int half) { return half == LAYER_HALF_ATTN ? GPT_SLOT_INPUT_NORM : GPT_SLOT_PRE_MLP_NORM; }
static inline int layer_branch_slot(int half) { return half == LAYER_HALF_ATTN ? GPT_SLOT_ATTENTION : GPT_SLOT_MLP; }

/* x + attention(norm(x)), then + MLP(norm(.)), each branch with bias, dropout and residual add;
 * the place where recomputation and sequence parallelism hook in. */
typedef struct {
    void *slot[GPT_LAYER_NSLOTS]; /* each slot's activations (its kind's struct) */
    float *res2; /* (BT, h): x + attention branch */
    float *out;  /* (BT, h): the layer output */
} layer_acts;
/* The slots' kinds of global layer `layer` from the config, their parameter structs allocated. */
void layer_init(gpt_layer *L, const gpt_config *c, int layer);
void layer_free(gpt_layer *L);
void layer_tensors(table_builder *tb, int layer, gpt_layer *L);
/* The slots' activation structs (calloc'ed; layer_acts_free frees them). */
void layer_acts_alloc(const gpt_layer *L, layer_acts *a);
void layer_acts_free(const gpt_layer *L, layer_acts *a);
void layer_acts_carve(carver *cv, const gpt_model *m, const gpt_layer *L, layer_acts *a);
/* Copies src's activation pointers into dst (both allocated for L's kinds). */
void layer_acts_share(const gpt_layer *L, layer_acts *dst, const layer_acts *src);
/* l: the stage-local layer of the micro-batch in `acts` (its size, samples, dropout on/off). */
void layer_fwd(gpt_model *m, gpt_acts *acts, int l, const float *x);
/* On entry m->scratch->dres holds d(layer output); on exit d(layer input). */
void layer_bwd(gpt_model *m, gpt_acts *acts, int l, const float *x);
/* Re-runs what selective recomputation did not keep of layer l (the slots' recompute). */
void layer_recompute(gpt_model *m, gpt_acts *acts, int l);

/* ---- the head (head_lm.c, and a family's own file): last stage, after the final norm ---- */

#define HEAD_MAX_STATS GPT_MAX_STATS
typedef struct head_ops {
    const char *name;
    size_t params_size, acts_size;
    /* Registers the head's tensors in buffer order. output: the output layer is registered too
     * (untied, or the last stage's copy of the word embedding), into m->p.head_w. */
    void (*tensors)(table_builder *tb, gpt_model *m, int output);
    /* Carves (ar NULL: counts) a micro-batch's head activations into a. */
    void (*acts)(carver *cv, const gpt_model *m, void *a);
    void (*acts_free)(void *a); /* what acts allocated besides the arena (NULL: nothing) */
    /* Its backward scratch in the arena (into m->scratch->head) and the floats of host memory
     * it needs (m->scratch->head_host); NULL / 0: none. */
    void (*scratch)(carver *cv, const gpt_model *m, void *s);
    size_t scratch_size;
    size_t (*host_floats)(const gpt_model *m);
    /* The head and its losses of the micro-batch in acts, from the final norm's output (kept in
     * acts->lnf) and its input x: fills acts->losses and acts->stats; *loss (not NULL): the
     * micro-batch's loss (the sum the trainer normalises). */
    void (*fwd)(gpt_model *m, gpt_acts *acts, const float *x, double *loss);
    /* A head that can keep its losses on the device: with m->defer_losses set, fwd leaves *loss
     * as it is and keeps the micro-batch's, and take_losses adds those kept since its last call
     * into *loss, in their order (gpt_losses_take). NULL: fwd always fills *loss. */
    void (*take_losses)(gpt_model *m, double *loss);
    /* Its backward down to and through the final norm: s->dres (B, seq_l, h) written with the
     * gradient of x; the head's and the final norm's gradients accumulate. */
    void (*bwd)(gpt_model *m, gpt_acts *acts, const float *x, float loss_scale);
    /* Under sequence parallelism, in the iteration's last backward: sums over the tensor-
     * parallel group the gradients of its tensors that ran on this rank's positions. */
    void (*sp_sum)(const gpt_model *m);
    int nstats;                            /* the sums its forward measures, for the iteration's means */
    const char *stat_names[HEAD_MAX_STATS];
    /* The iteration's report from the sums over the global batch: see gpt_head_metrics. */
    int (*metrics)(const double *stats, double *loss, gpt_metric *out);
    /* What a loss summed over the micro-batches is divided by (gpt_head_loss_divisor). */
    double (*loss_divisor)(const gpt_config *c, int64_t global_batch);
    const char *loss_name; /* the validation line's name of the loss (NULL: "lm loss", with its perplexity) */
    int transform;         /* a dense h -> h transform on every position before the decoder */
} head_ops;
extern const head_ops lm_head_ops;   /* head_lm.c: the LM head and the next-token loss (GPT, Llama) */
extern const head_ops mlm_sop_head_ops; /* the masked-LM and sentence-order heads (the encoder family's file) */
/* The head of a config (layer_spec.c). */
const head_ops *model_head_of(const gpt_config *c);

/* Saved activations of one micro-batch on the stage (TP-local shapes, BT = B*s). */
struct gpt_acts {
    int in_use;
    int B;                 /* samples in this micro-batch */
    int training;          /* dropout on */
    int64_t *sample;       /* (mbs) device: global sample index of each row (dropout keys) */
    int32_t *ids;          /* (mbs, s): first stage */
    int32_t *targets;      /* (mbs, s): last stage */
    float *input;          /* (BT, h): stage input (embedding output on the first stage) */
    layer_acts *layers;    /* nlayers */
    void *lnf;             /* last stage: the final norm's activations */
    float *logits;         /* last stage: (BT, V/t); the backward overwrites it with dlogits (fp32),
                            * or, logits_dt 16-bit (head_lm.c), leaves it */
    be_dtype logits_dt;    /* the dtype the head wrote logits in: fp32, or a training step's gemm dtype */
    float *losses, *maxv, *sumexp, *tlogit; /* last stage: (BT) each */
    void *head;            /* last stage: the head's activations */
    double stats[HEAD_MAX_STATS]; /* last stage: the head's sums of this micro-batch */
    /* optional inputs (NULL when the batch has none): */
    int32_t *types;        /* (mbs, seq_l) first stage: this rank's positions' token types */
    int32_t *lengths;      /* (mbs) device, bidirectional models: tokens before the padding */
    const int32_t *klen;   /* what the attention reads: lengths, or NULL (causal) */
    int32_t *sample_labels;/* (mbs) host: per-sample labels, last stage */
    int32_t *targets_host; /* (mbs, s) host, last stage: the targets (-1: no loss there) */
    /* packed documents: device copies (allocated on the first batch that has them, outside the
     * arena: mbs * s ints each) and what the kernels read (NULL when the batch has none) */
    int32_t *seg_buf, *pos_buf, *posl_buf;
    const int32_t *seg;    /* (mbs, s): each token's document start (attention); context parallelism
                            * other than a2a: this rank's rows' only, (mbs, seq_c) */
    const int32_t *pos;    /* (mbs, s): each token's position (rope) */
    const int32_t *pos_l;  /* (mbs, seq_l) first stage: this rank's positions' (learned positions) */
    const float *loss_mask;/* (mbs, s) host, last stage: the batch's (valid for the iteration); NULL: all count */
    /* context parallelism (m->cp > 1; NULL without): host staging of a batch field's rows cut to this
     * rank's chunks, and the loss mask so cut (valid while the slot is) */
    int32_t *cp_host;      /* (mbs, seq_c) */
    float *cp_mask;        /* (mbs, seq_c) */
    float token_weight, sample_weight; /* what one token's and one sample's loss count */
};

/* gpt_forward's part, training only (block_stats.c): the micro-batch's statistics of the stage's
 * layer l added into the stage's sums (m->layer_stats). */
void model_block_stats_add(gpt_model *m, const gpt_acts *a, int l);

/* ---- activation recomputation (recompute.c) ---- */

/* Carves (ar NULL: counts) the activations shared by every micro-batch: the layers a full
 * recomputation re-runs, or what selective recomputation redoes. `shared` holds the stage's
 * layers (allocated, nlayers). Returns the bytes. */
size_t recompute_shared_layout(gpt_model *m, layer_acts *shared, td_arena *ar);
/* Carves one micro-batch's layer activations: what it keeps, the rest pointed at `shared`. */
void recompute_layers_carve(carver *cv, const gpt_model *m, layer_acts *layers, const layer_acts *shared);
/* Before layer l's backward: re-runs what the micro-batch in `acts` did not keep of it. */
void recompute_before_bwd(gpt_model *m, gpt_acts *acts, int l);

/* ---- shared by the stage's pieces (stage_io.c) ---- */

/* Dropout: a site id per call site, 0 the embedding, then three per layer. */
be_drop model_drop(const gpt_model *m, const gpt_acts *a, float p, int site, int unit0);
/* Sequence parallelism's f: a block's input, the norm output x (B, seq_l, h) gathered along the
 * sequence into scratch; x itself without it. */
be_in model_sp_input(gpt_model *m, const kept_buf *x, int B);
/* ... and f's backward: the norm output's gradient from the block's unreduced input gradient in
 * scratch->dln, reduce-scattered to this rank's positions; scratch->dln itself without it. */
const float *model_sp_norm_grad(gpt_model *m, int B);
/* Under sequence parallelism, in the iteration's last backward (grads_final): the gradients of
 * a seq_local slot summed over the tensor-parallel group. */
void model_sp_sum_slot(const gpt_model *m, const block_slot *s);
/* ... and of one tensor of n elements. */
void model_sp_sum(const gpt_model *m, float *g, size_t n);
/* The slot's activation and io for the micro-batch in acts. */
block_io model_io(gpt_model *m, const gpt_acts *acts, void *scratch, const be_drop *drop);
static inline int site_embedding(void) { return 0; }
static inline int site_attn_probs(int layer) { return 1 + 3 * layer; }
static inline int site_attn_out(int layer) { return 2 + 3 * layer; }
static inline int site_mlp_out(int layer) { return 3 + 3 * layer; }

#endif
