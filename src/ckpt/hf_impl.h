/* Private to src/ckpt: the Hugging Face families hf.c converts, one file each (hf_gpt2.c,
 * hf_llama.c, ...) defining one row, listed in hf_families.c. A family maps each trident logical tensor to one or more transformers tensors
 * ("pieces": row ranges, possibly stored transposed), writes and reads config.json, and says
 * whether a trident architecture is one it computes exactly. */
#ifndef TRIDENT_HF_IMPL_H
#define TRIDENT_HF_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "trident/gpt.h"

typedef struct {
    char hf[128];     /* the transformers tensor name */
    int64_t row0;     /* first row of the trident tensor it holds */
    int64_t rows;     /* rows it holds; -1: all (the real vocabulary for the embedding and output) */
    int transpose;    /* stored [in, out] (GPT-2's Conv1D) */
} hf_piece;

typedef struct hf_family {
    const char *model_type, *arch; /* "gpt2", "GPT2LMHeadModel" */
    gpt_kind kind;                 /* the trident models it holds (--model) */
    /* The pieces of trident tensor `name` (0: it has no counterpart), into out, which has room
     * for hf_max_pieces(c). */
    int (*pieces)(const gpt_config *c, const char *name, hf_piece *out);
    cJSON *(*config)(const gpt_config *c);
    /* NULL when the family computes exactly what trident's config does, else what differs. */
    const char *(*mismatch)(const gpt_config *c);
    /* Fills the architecture of c from config.json (o, read from path); -1 with one line in err. */
    int (*read_config)(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen);
    const char *alias; /* another model_type read the same way ("mistral"), or NULL */
    /* 1 for a tensor of the family's files that carries no parameter of its own (a buffer, a
     * tied copy), which import passes over; NULL: none beyond the common ones (hf.c). */
    int (*ignorable)(const char *name);
} hf_family;

/* Every family, in the order export tries them (the first whose architecture matches); NULL
 * ends the list (hf_families.c). */
extern const hf_family *const hf_families[];
/* The family a trident model converts to (the first of hf_families whose architecture matches),
 * or NULL with the reasons in err. */
const hf_family *hf_family_of_model(const gpt_config *c, char *err, size_t errlen);

/* The most pieces one trident tensor of c maps to: 3 (q, k, v), or 2 per expert for a stack
 * of E experts' [gate | up] rows. */
int hf_max_pieces(const gpt_config *c);
/* The pieces of a stack of E experts' matrices in layer `layer`: expert e's rows are nfmt blocks
 * of `rows` rows, block j the transformers tensor fmts[j] names with (layer, e) (two %d).
 * Returns E * nfmt. */
/* One piece: rows [row0, row0 + rows) (-1: all) of the Hugging Face tensor fmt names for layer. Returns 1. */
int hf_piece_of(hf_piece *p, int64_t row0, int64_t rows, const char *fmt, int layer);
int hf_expert_pieces(hf_piece *out, int layer, int E, int64_t rows, const char *const *fmts, int nfmt);

/* The Llama-shaped decoders (hf_llama.c; Mixtral and Qwen2-MoE build on them): */
/* the pieces of the tensors every such decoder has (embedding, norms, attention with or without
 * q/k/v biases, the dense MLP, head), 0 for another; */
int hf_llama_pieces(const gpt_config *c, const char *name, hf_piece *out);
/* what of c no such decoder computes (LayerNorm, learned positions, partial rotary, GeLU), or NULL; */
const char *hf_llama_mismatch(const gpt_config *c);
/* config.json's keys they share (sizes, heads, rotary, norm, tying, dropout), without the MLP's
 * sizes or the biases; */
cJSON *hf_llama_config(const gpt_config *c, const char *arch, const char *model_type);
/* reads those keys into c (rms_norm_eps and rope_theta defaulting to eps and theta when absent;
 * rope_parameters as transformers 5 writes it) and sets what they imply (RMSNorm, rotary,
 * SwiGLU, no biases); -1 with one line in err. */
int hf_llama_read_decoder(const cJSON *o, const char *path, gpt_config *c, double eps, double theta, char *err,
                          size_t errlen);
/* -1 with err when config.json's sliding_window (a number) is shorter than max_pos (trident
 * attends over the whole causal window). */
int hf_llama_full_window(const cJSON *o, const char *path, const gpt_config *c, char *err, size_t errlen);

/* The mixtures of experts (hf_mixtral.c, shared with hf_qwen2moe.c): what of c's routing neither
 * Mixtral nor Qwen2-MoE computes (no experts, a sigmoid router, scaled weights, an expert bias),
 * or NULL; and the checks of the experts read into c (num_experts against trident's 1024, top-k
 * against the experts; experts_key names the count's key), router_aux_loss_coef into
 * moe_aux_coeff: -1 with one line in err. */
const char *hf_moe_routing_mismatch(const gpt_config *c);
int hf_moe_read_experts(const cJSON *o, const char *path, const char *experts_key, gpt_config *c, char *err,
                        size_t errlen);

/* config.json values: a positive integer (def when absent or null; def < 0: required), a
 * number, a boolean. hf_json_int returns -1 when the value is not a positive integer. */
int hf_json_int(const cJSON *o, const char *key, int def, int *v);
double hf_json_num(const cJSON *o, const char *key, double def);
int hf_json_bool(const cJSON *o, const char *key, int def);
/* The activation function config.json names under key (Hugging Face's hidden_act, GPT-2's
 * activation_function; dflt when absent or null) into *act (td_act, trident/activation.h); -1
 * with one line in err for a name trident does not compute. */
int hf_json_act(const cJSON *o, const char *key, const char *dflt, const char *path, int *act, char *err,
                size_t errlen);

#endif
