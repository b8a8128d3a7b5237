/* The model's configuration: the architecture (gpt_config) with its derived sizes, the flags it
 * comes from, the table of settings a checkpoint stores (meta.json's "model" section) and the
 * whole model's logical tensors (names, shapes, the canonical flat layout). No model is built
 * here: the stage that holds one is include/model/trident/gpt.h. */
#ifndef TRIDENT_GPT_CONFIG_H
#define TRIDENT_GPT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "trident/activation.h"

typedef enum { GPT_NORM_LAYERNORM, GPT_NORM_RMSNORM } gpt_norm;
typedef enum { GPT_POS_LEARNED, GPT_POS_ROPE, GPT_POS_NONE } gpt_pos;
/* rope scaling (Hugging Face's rope_type): none, linear (positions / factor), llama3 (Llama 3.1's
 * per-wavelength rule), yarn (NTK-by-parts ramp and attention factor) */
typedef enum { GPT_ROPE_NONE, GPT_ROPE_LINEAR, GPT_ROPE_LLAMA3, GPT_ROPE_YARN } gpt_rope_scaling;
#define GPT_ROPE_CHOICES "none|linear|llama3|yarn"
/* The model's kind: a causal decoder with a next-token loss (GPT, Llama), or a bidirectional
 * encoder (token-type embeddings for sentence pairs, a padding mask, the masked-LM head with its
 * dense + GeLU + norm transform and output bias; the pooler and the sentence-order head when
 * binary_head). Numbered as --model's choices (TD_MODEL_CHOICES in trident/args.h): meta.json's
 * "model" writes the choice of that index. */
typedef enum { GPT_KIND_DECODER, GPT_KIND_ENCODER } gpt_kind;

/* --moe-layer-freq as a list ("[1,0,1,1]"): at most this many layers. */
#define GPT_MOE_LIST_WORDS 16
#define GPT_MOE_LIST_MAX_LAYERS (64 * GPT_MOE_LIST_WORDS)
#define GPT_MOE_FREQ_LIST (-1)

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
    int rope_scaling;    /* gpt_rope_scaling */
    float rope_factor;   /* the scaling's factor (linear, llama3, yarn) */
    float rope_low_freq; /* llama3 low_freq_factor; 0: 1 */
    float rope_high_freq;/* llama3 high_freq_factor; 0: 4 */
    int rope_orig_max_pos;  /* original_max_position_embeddings; 0: 8192 (llama3), max_pos (yarn) */
    float yarn_beta_fast;   /* 0: 32 */
    float yarn_beta_slow;   /* 0: 1 */
    float yarn_attn_factor; /* the factor of cos and sin; 0: 0.1 ln(factor) + 1 (1 when factor <= 1) */
    int act;             /* the MLP's activation function (td_act, trident/activation.h); 0: GeLU tanh */
    int glu;             /* gated linear unit: fc holds [gate | up], the MLP is act(gate) * up (SwiGLU: silu) */
    int disable_bias;    /* no biases in the linear layers (Llama) */
    int add_qkv_bias;    /* ... except the QKV projection's (Qwen) */
    int untied;          /* the output layer is its own tensor, not the word embedding */
    float init_std;      /* normal init std; output projections std / sqrt(2 L) */
    float hidden_dropout;
    float attn_dropout;
    uint64_t seed;
    gpt_kind kind;       /* a causal decoder (0) or a bidirectional encoder */
    int binary_head;     /* an encoder's pooler and sentence-order head */
    /* mixture of experts in the MLP slot (src/model/moe.c; 0 experts: the dense MLP) */
    int num_experts;     /* E */
    int moe_ffn;         /* each expert's hidden size; 0: ffn */
    int moe_topk;        /* k experts a token */
    int moe_score;       /* the router's score function: 0 softmax, 1 sigmoid (BE_MOE_*) */
    int moe_pre_softmax; /* softmax over all experts before the top-k */
    float moe_topk_scale;/* the weights' scaling factor; 0: none */
    float moe_aux_coeff; /* Switch Transformer's load-balancing loss (0: none) */
    int moe_seq_aux;     /* ... over each sequence, averaged over the micro-batch's (seq_aux_loss) */
    float moe_z_coeff;   /* ST-MoE's router z-loss (0: none) */
    int moe_shared_ffn;  /* the shared expert's hidden size, run on every token (0: none; Qwen-MoE) */
    int moe_shared_gate; /* its output times sigmoid(w . x), w (1, h) (Qwen's shared_expert_gate) */
    int moe_expert_bias; /* DeepSeek-V3's aux-loss-free balancing: a per-expert bias on the scores
                          * for the choice only, moved against each iteration's load */
    float moe_bias_rate; /* ... by this much an iteration (--moe-router-bias-update-rate) */
    float moe_capacity;  /* an expert takes at most ceil(T k / E x this) of a micro-batch's T tokens (0: dropless) */
    int moe_drop_position; /* over it, drop the latest tokens (1) or the lowest weights (0) */
    int moe_pad;         /* with capacity: every expert runs on exactly its capacity of rows, padded with zeros */
    int moe_allgather;   /* under expert parallelism, the allgather token dispatcher (else alltoall); a
                          * layout setting, not in meta.json */
    int moe_grouped;     /* --moe-grouped-gemm: the experts' GEMMs in one grouped call (not in meta.json) */
    int moe_etp1;        /* --expert-tensor-parallel-size 1 under tp > 1: each expert whole, the experts split
                          * over the tp ranks (and ep) instead (a layout setting, not in meta.json) */
    /* which layers are MoE (--moe-layer-freq; the others hold the dense MLP of --ffn-hidden-size):
     * N > 0, layer i iff i % N == 0 (0: 1, every layer); GPT_MOE_FREQ_LIST: the list in moe_layer_bits */
    int moe_layer_freq;
    uint64_t moe_layer_bits[GPT_MOE_LIST_WORDS]; /* bit i (word i / 64): layer i is MoE; GPT_MOE_FREQ_LIST only */
    /* LoRA (src/model/lora.h, docs/finetune.md): adapters on the target modules, everything else frozen */
    int lora_rank;       /* r; 0: no adapters, everything trains */
    float lora_alpha;    /* the adapters' output scaled by lora_alpha / r */
    float lora_dropout;  /* on the adapters' input */
    int lora_targets;    /* bit i: the i-th of GPT_LORA_* (the Hugging Face module names) */
} gpt_config;

/* The modules LoRA may target, by their Hugging Face (Llama) names: the bits of lora_targets. */
enum { GPT_LORA_Q, GPT_LORA_K, GPT_LORA_V, GPT_LORA_O, GPT_LORA_GATE, GPT_LORA_UP, GPT_LORA_DOWN, GPT_LORA_NMODULES };
static inline int gpt_lora(const gpt_config *c) { return c->lora_rank > 0; }
static inline int gpt_lora_on(const gpt_config *c, int module) { return c->lora_rank > 0 && (c->lora_targets >> module & 1); }
static inline float gpt_lora_scaling(const gpt_config *c) { return c->lora_alpha / (float)c->lora_rank; }

/* The resolved values of the fields whose zero means a default. */
static inline int gpt_groups(const gpt_config *c) { return c->query_groups ? c->query_groups : c->heads; }
static inline int gpt_head_dim(const gpt_config *c) { return c->kv_channels ? c->kv_channels : c->hidden / c->heads; }
static inline float gpt_norm_eps(const gpt_config *c) { return c->norm_eps > 0 ? c->norm_eps : 1e-5f; }
static inline float gpt_rotary_base(const gpt_config *c) { return c->rotary_base > 0 ? c->rotary_base : 10000.0f; }
/* Rotated dims of each head (d * rotary_percent, even); 0 without rotary positions. */
int gpt_rotary_dims(const gpt_config *c);
/* The rotary frequencies of c in double: writes inv[i] for i < gpt_rotary_dims(c) / 2 (base and
 * rope scaling applied as Hugging Face's rope_type computes them) and returns the factor cos and
 * sin are multiplied by (YaRN's attention factor; 1 otherwise). */
double gpt_rope_freqs(const gpt_config *c, double *inv);
/* The query projection's width n*d, and one key or value projection's g*d. */
static inline int gpt_q_width(const gpt_config *c) { return c->heads * gpt_head_dim(c); }
static inline int gpt_kv_width(const gpt_config *c) { return gpt_groups(c) * gpt_head_dim(c); }
/* Grouped-query attention keeps q and kv as two tensors; multi-head attention one fused qkv. */
static inline int gpt_gqa(const gpt_config *c) { return gpt_groups(c) != c->heads; }
static inline int gpt_has_bias(const gpt_config *c) { return !c->disable_bias; }
/* The blocks of the MLP's fc layer (and of each expert's): [gate | up] when gated, else one. */
static inline int gpt_fc_blocks(const gpt_config *c) { return c->glu ? 2 : 1; }
static inline int gpt_moe(const gpt_config *c) { return c->num_experts > 0; }
/* Whether global layer `layer` holds the MoE block (the others the dense MLP); 0 in a dense model. */
static inline int gpt_moe_layer(const gpt_config *c, int layer)
{
    if (c->num_experts <= 0 || layer < 0 || layer >= c->num_layers) return 0;
    if (c->moe_layer_freq == GPT_MOE_FREQ_LIST) return (int)(c->moe_layer_bits[layer / 64] >> (layer % 64) & 1);
    return layer % (c->moe_layer_freq > 0 ? c->moe_layer_freq : 1) == 0;
}
/* The MoE layers among [layer0, layer0 + n) (of the whole model: gpt_moe_layers(c, 0, L)). */
int gpt_moe_layers(const gpt_config *c, int layer0, int n);
/* Parses --moe-layer-freq's text for a model of num_layers layers into c's moe_layer_freq and
 * moe_layer_bits: an integer N >= 1, or a Python list of 0 and 1 of length num_layers, written out
 * ("[1,0,1,1]") or as Megatron's list expressions ("([1]*1+[0]*1)*2": lists, +, * by an integer,
 * parentheses). 0, or -1 with one line naming the flag and the rule in msg (c unchanged). */
int gpt_moe_layer_freq_parse(gpt_config *c, const char *text, int num_layers, char *msg, size_t msglen);
/* The MoE layers of c as the list Megatron's moe_layer_freq resolves to: "[1, 0, 1, 0]". */
void gpt_moe_layer_freq_str(const gpt_config *c, char *out, size_t len);
/* Whether a and b have the same MoE layers. */
int gpt_moe_layers_equal(const gpt_config *a, const gpt_config *b);
static inline int gpt_moe_ffn(const gpt_config *c) { return c->moe_ffn > 0 ? c->moe_ffn : c->ffn; }
static inline int gpt_has_qkv_bias(const gpt_config *c) { return !c->disable_bias || c->add_qkv_bias; }
/* An encoder's token types (segments A and B of a sentence pair). */
#define GPT_ENCODER_TOKENTYPES 2
/* What the kind means for the model, by name: attention over every unpadded position instead
 * of the causal mask, the rows of the token-type embedding (0: none), and the masked-LM head
 * (its transform and output bias; the pooler and the sentence-order head when binary_head)
 * instead of the next-token one. */
static inline int gpt_bidirectional(const gpt_config *c) { return c->kind == GPT_KIND_ENCODER; }
static inline int gpt_tokentypes(const gpt_config *c)
{
    return c->kind == GPT_KIND_ENCODER ? GPT_ENCODER_TOKENTYPES : 0;
}
static inline int gpt_masked_lm(const gpt_config *c) { return c->kind == GPT_KIND_ENCODER; }

struct td_args;
/* The architecture from the flags (vocabulary left 0: the tokenizer gives it). */
void gpt_config_from_args(gpt_config *c, const struct td_args *a);
/* The encoder's settings of the flags beyond its kind (the binary head), from the encoder
 * family's own file; gpt_config_from_args calls it for an encoder. */
void gpt_encoder_from_args(gpt_config *c, const struct td_args *a);
/* The encoder family's names: meta.json's key and the flag of binary_head, and the name
 * gpt_config_describe prints. */
extern const char GPT_BINARY_HEAD_KEY[], GPT_BINARY_HEAD_FLAG[], GPT_ENCODER_NAME[];
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
    const char *also;    /* other flags that set it ("--swiglu|--squared-relu"), or NULL */
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

/* Offset (in elements) of logical tensor `name` in the canonical flat layout of the whole model:
 * word embedding, position embedding, layers 0..L-1 (each in table order), final norm, output
 * layer (untied) — every tensor at its logical shape. -1 for an unknown name. Total size:
 * gpt_num_params. */
int64_t gpt_canonical_offset(const gpt_config *cfg, const char *name);
/* Parameters of the logical model (every tensor counted once, padded vocab included). */
int64_t gpt_num_params(const gpt_config *cfg);
/* Model FLOPs of one iteration of `batch` samples (Megatron's formula, padded vocab). Under LoRA
 * the frozen weights' GEMMs (the layers' linears, the output layer) count 2 passes, not 3 (their
 * backward computes the input's gradient only: 4N a token rather than 6N), the attention core's
 * products 3, and the adapters' GEMMs 3 passes of 2 r (in + out) a token per adapted module. */
double gpt_flops_per_iteration(const gpt_config *cfg, int64_t batch, int full_recompute);
/* Under LoRA, the sum over the adapted modules of in + out a token goes through, averaged over the
 * layers (the adapters' A (r, in) and B (out, r) take 2 r times it in multiply-adds a token; a MoE
 * layer's MLP modules count its k experts' adapters); 0 without. */
double gpt_lora_widths(const gpt_config *cfg);

#endif
