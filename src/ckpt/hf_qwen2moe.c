/* Hugging Face Qwen2-MoE (Qwen2MoeForCausalLM) interchange: the family row of hf_impl.h. A Llama
 * (hf_llama.c) with q/k/v biases whose every MLP is a mixture of experts plus a shared expert
 * under a sigmoid gate.
 *
 * trident                                       transformers (model.layers.N.)
 * layers.N.attn.{qkv,q,kv}.bias                 self_attn.{q,k,v}_proj.bias (qkv_bias: --add-qkv-bias)
 * layers.N.mlp.router.weight (E, h)             mlp.gate.weight (E, h)
 * layers.N.mlp.experts.fc.weight (E 2F, h)      mlp.experts.e.{gate,up}_proj.weight (F, h): expert e's
 *                                               rows [e 2F, e 2F + F) gate, the next F up
 * layers.N.mlp.experts.fc2.weight (E h, F)      mlp.experts.e.down_proj.weight (h, F)
 * layers.N.mlp.shared_expert.fc.weight (2S, h)  mlp.shared_expert.{gate,up}_proj.weight (S, h)
 * layers.N.mlp.shared_expert.fc2.weight (h, S)  mlp.shared_expert.down_proj.weight
 * layers.N.mlp.shared_expert.gate.weight (1, h) mlp.shared_expert_gate.weight (1, h)
 *
 * Routing: the softmax over all E logits and its k largest; norm_topk_prob true divides them by
 * their sum (trident's default, the softmax over the k chosen logits), false keeps them as they
 * are (--moe-router-pre-softmax). The shared expert's output times sigmoid(shared_expert_gate
 * x) is added (--moe-shared-expert-gate). Every layer sparse: decoder_sparse_step 1, no
 * mlp_only_layers, no sliding windows. */
#include <stdio.h>
#include <string.h>

#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

static int qwen2moe_pieces(const gpt_config *c, const char *name, hf_piece *out)
{
    static const char *const FC[] = {"model.layers.%d.mlp.experts.%d.gate_proj.weight",
                                     "model.layers.%d.mlp.experts.%d.up_proj.weight"};
    static const char *const FC2[] = {"model.layers.%d.mlp.experts.%d.down_proj.weight"};
    int64_t S = c->moe_shared_ffn;
    int l, k = 0;
    if (sscanf(name, "layers.%d.mlp.%n", &l, &k) == 1 && k > 0) {
        const char *t = name + k;
        if (strcmp(t, "router.weight") == 0) return hf_piece_of(out, 0, -1, "model.layers.%d.mlp.gate.weight", l);
        if (strcmp(t, "experts.fc.weight") == 0) return hf_expert_pieces(out, l, c->num_experts, gpt_moe_ffn(c), FC, 2);
        if (strcmp(t, "experts.fc2.weight") == 0) return hf_expert_pieces(out, l, c->num_experts, c->hidden, FC2, 1);
        if (strcmp(t, "shared_expert.fc.weight") == 0) {
            hf_piece_of(&out[0], 0, S, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l);
            return 1 + hf_piece_of(&out[1], S, S, "model.layers.%d.mlp.shared_expert.up_proj.weight", l);
        }
        if (strcmp(t, "shared_expert.fc2.weight") == 0)
            return hf_piece_of(out, 0, -1, "model.layers.%d.mlp.shared_expert.down_proj.weight", l);
        if (strcmp(t, "shared_expert.gate.weight") == 0)
            return hf_piece_of(out, 0, -1, "model.layers.%d.mlp.shared_expert_gate.weight", l);
        return 0; /* a dense MLP: not a layer of this family */
    }
    return hf_llama_pieces(c, name, out);
}

static cJSON *qwen2moe_config(const gpt_config *c)
{
    cJSON *o = hf_llama_config(c, "Qwen2MoeForCausalLM", "qwen2_moe");
    cJSON_AddNumberToObject(o, "intermediate_size", c->ffn);
    cJSON_AddNumberToObject(o, "moe_intermediate_size", gpt_moe_ffn(c));
    cJSON_AddNumberToObject(o, "shared_expert_intermediate_size", c->moe_shared_ffn);
    cJSON_AddNumberToObject(o, "num_experts", c->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", c->moe_topk);
    cJSON_AddBoolToObject(o, "norm_topk_prob", !c->moe_pre_softmax);
    cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
    cJSON_AddItemToObject(o, "mlp_only_layers", cJSON_CreateArray());
    cJSON_AddBoolToObject(o, "qkv_bias", c->add_qkv_bias);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", ckpt_float_value(c->moe_aux_coeff));
    cJSON_AddBoolToObject(o, "output_router_logits", 0);
    cJSON_AddBoolToObject(o, "use_sliding_window", 0);
    cJSON_AddNullToObject(o, "sliding_window");
    cJSON_AddNumberToObject(o, "max_window_layers", c->num_layers);
    return o;
}

static const char *qwen2moe_mismatch(const gpt_config *c)
{
    const char *w = hf_llama_mismatch(c);
    if (!w) w = hf_moe_routing_mismatch(c);
    if (w) return w;
    if (gpt_has_bias(c)) return "biases beyond the q/k/v projections'";
    if (c->moe_shared_ffn == 0) return "no shared expert";
    if (!c->moe_shared_gate) return "a shared expert without its gate (--moe-shared-expert-gate)";
    return NULL;
}

/* 1 when config.json's key is absent, null or an empty list. */
static int empty_list(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return !j || cJSON_IsNull(j) || (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0);
}

/* Whether config.json's layer_types (transformers 5) names a layer "sliding_attention". */
static int sliding_layer(const cJSON *o)
{
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(o, "layer_types"), *t;
    cJSON_ArrayForEach(t, types) {
        if (cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0) return 1;
    }
    return 0;
}

/* transformers' Qwen2MoeConfig defaults where config.json leaves a key out: 60 experts of 1408,
 * top 4 not renormalised, a shared expert of 5632, rms_norm_eps 1e-6, rope_theta 10000, q/k/v
 * biases. */
static int qwen2moe_read_config(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen)
{
    int step;
    if (hf_llama_read_decoder(o, path, c, 1e-6, 10000.0, err, errlen)) return -1;
    if (hf_json_int(o, "intermediate_size", 5632, &c->ffn) || hf_json_int(o, "num_experts", 60, &c->num_experts) ||
        hf_json_int(o, "num_experts_per_tok", 4, &c->moe_topk) ||
        hf_json_int(o, "moe_intermediate_size", 1408, &c->moe_ffn) ||
        hf_json_int(o, "shared_expert_intermediate_size", 5632, &c->moe_shared_ffn) ||
        hf_json_int(o, "decoder_sparse_step", 1, &step))
        FAIL("%s: intermediate_size, num_experts, num_experts_per_tok, moe_intermediate_size, "
             "shared_expert_intermediate_size and decoder_sparse_step must be positive integers", path);
    if (hf_moe_read_experts(o, path, "num_experts", c, err, errlen)) return -1;
    if (step != 1)
        FAIL("%s: decoder_sparse_step is %d; trident converts Qwen2-MoE models whose every layer is sparse "
             "(decoder_sparse_step 1)", path, step);
    if (!empty_list(o, "mlp_only_layers"))
        FAIL("%s: mlp_only_layers is not empty; trident converts Qwen2-MoE models whose every layer is sparse "
             "(dense layers mixed in are not built yet)", path);
    if (hf_json_bool(o, "use_sliding_window", 0) || sliding_layer(o))
        FAIL("%s: use_sliding_window is true (or layer_types names a sliding_attention layer); trident attends "
             "to the whole causal window", path);
    if (hf_json_bool(o, "attention_bias", 0) || hf_json_bool(o, "mlp_bias", 0))
        FAIL("%s: attention_bias or mlp_bias is true; Qwen2-MoE has biases on q, k and v only (qkv_bias)", path);
    c->moe_pre_softmax = !hf_json_bool(o, "norm_topk_prob", 0);
    c->add_qkv_bias = hf_json_bool(o, "qkv_bias", 1);
    c->moe_shared_gate = 1;
    return 0;
}

const hf_family HF_QWEN2MOE = {"qwen2_moe", "Qwen2MoeForCausalLM", GPT_KIND_DECODER, qwen2moe_pieces, qwen2moe_config,
                               qwen2moe_mismatch, qwen2moe_read_config, NULL, NULL};
