/* Hugging Face Mixtral (MixtralForCausalLM) interchange: the family row of hf_impl.h. A Llama
 * (hf_llama.c: embedding, norms, attention, head) whose every MLP is a mixture of experts.
 *
 * trident                                  transformers MixtralForCausalLM (model.layers.N.)
 * layers.N.mlp.router.weight (E, h)        block_sparse_moe.gate.weight (E, h)
 * layers.N.mlp.experts.fc.weight (E 2F, h) block_sparse_moe.experts.e.{w1,w3}.weight (F, h): expert
 *                                          e's rows [e 2F, e 2F + F) are w1 (gate), the next F w3 (up)
 * layers.N.mlp.experts.fc2.weight (E h, F) block_sparse_moe.experts.e.w2.weight (h, F): rows [e h, (e+1) h)
 *
 * Routing: transformers takes the softmax over all E logits, its k largest, and divides them by
 * their sum; that is the softmax over the k chosen logits, trident's default (the same choice:
 * the softmax is monotone). Each expert is silu(w1 x) * (w3 x) into w2, trident's SwiGLU expert
 * without biases. */
#include <stdio.h>
#include <string.h>

#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

static int mixtral_pieces(const gpt_config *c, const char *name, hf_piece *out)
{
    static const char *const FC[] = {"model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
                                     "model.layers.%d.block_sparse_moe.experts.%d.w3.weight"};
    static const char *const FC2[] = {"model.layers.%d.block_sparse_moe.experts.%d.w2.weight"};
    int l, k = 0;
    if (sscanf(name, "layers.%d.mlp.%n", &l, &k) == 1 && k > 0) {
        const char *t = name + k;
        if (strcmp(t, "router.weight") == 0) {
            memset(out, 0, sizeof *out);
            snprintf(out->hf, sizeof out->hf, "model.layers.%d.block_sparse_moe.gate.weight", l);
            out->rows = -1;
            return 1;
        }
        if (strcmp(t, "experts.fc.weight") == 0) return hf_expert_pieces(out, l, c->num_experts, gpt_moe_ffn(c), FC, 2);
        if (strcmp(t, "experts.fc2.weight") == 0) return hf_expert_pieces(out, l, c->num_experts, c->hidden, FC2, 1);
        return 0; /* a dense MLP, a shared expert: not Mixtral's */
    }
    return hf_llama_pieces(c, name, out);
}

static cJSON *mixtral_config(const gpt_config *c)
{
    cJSON *o = hf_llama_config(c, "MixtralForCausalLM", "mixtral");
    cJSON_AddNumberToObject(o, "intermediate_size", gpt_moe_ffn(c));
    cJSON_AddNumberToObject(o, "num_local_experts", c->num_experts);
    cJSON_AddNumberToObject(o, "num_experts_per_tok", c->moe_topk);
    cJSON_AddNumberToObject(o, "router_aux_loss_coef", ckpt_float_value(c->moe_aux_coeff));
    cJSON_AddNumberToObject(o, "router_jitter_noise", 0);
    cJSON_AddBoolToObject(o, "output_router_logits", 0);
    cJSON_AddNullToObject(o, "sliding_window");
    return o;
}

/* What of a mixture of experts c neither Mixtral nor Qwen2-MoE routes as trident does, or NULL. */
const char *hf_moe_routing_mismatch(const gpt_config *c)
{
    if (!gpt_moe(c)) return "no experts";
    if (c->moe_score != 0) return "a sigmoid router";
    if (c->moe_topk_scale != 0 && c->moe_topk_scale != 1) return "scaled expert weights (--moe-router-topk-scaling-factor)";
    if (c->moe_expert_bias) return "an expert bias";
    return NULL;
}

static const char *mixtral_mismatch(const gpt_config *c)
{
    const char *w = hf_llama_mismatch(c);
    if (!w) w = hf_moe_routing_mismatch(c);
    if (w) return w;
    if (gpt_has_qkv_bias(c)) return "biases";
    if (c->moe_pre_softmax) return "weights not renormalised over the chosen experts (--moe-router-pre-softmax)";
    if (c->moe_shared_ffn > 0) return "a shared expert";
    return NULL;
}

int hf_moe_read_experts(const cJSON *o, const char *path, const char *experts_key, gpt_config *c, char *err,
                        size_t errlen)
{
    if (c->num_experts > 1024)
        FAIL("%s: %s %d is more than the 1024 experts trident holds", path, experts_key, c->num_experts);
    if (c->moe_topk > c->num_experts)
        FAIL("%s: num_experts_per_tok %d is more than the %d experts (%s)", path, c->moe_topk, c->num_experts,
             experts_key);
    c->moe_aux_coeff = (float)hf_json_num(o, "router_aux_loss_coef", 0.001);
    if (!(c->moe_aux_coeff >= 0)) FAIL("%s: router_aux_loss_coef must not be negative", path);
    return 0;
}

/* transformers' MixtralConfig defaults where config.json leaves a key out: 8 experts, top 2,
 * rms_norm_eps 1e-5, rope_theta 1e6. */
static int mixtral_read_config(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen)
{
    if (hf_llama_read_decoder(o, path, c, 1e-5, 1e6, err, errlen)) return -1;
    if (hf_json_int(o, "intermediate_size", -1, &c->ffn) || hf_json_int(o, "num_local_experts", 8, &c->num_experts) ||
        hf_json_int(o, "num_experts_per_tok", 2, &c->moe_topk))
        FAIL("%s: intermediate_size, num_local_experts and num_experts_per_tok must be positive integers", path);
    if (hf_moe_read_experts(o, path, "num_local_experts", c, err, errlen)) return -1;
    c->moe_ffn = c->ffn; /* the flags agree whether a run gives --moe-ffn-hidden-size or not */
    if (hf_json_num(o, "router_jitter_noise", 0) != 0)
        FAIL("%s: router_jitter_noise is %g; trident routes without jitter (set it to 0 to convert)", path,
             hf_json_num(o, "router_jitter_noise", 0));
    return hf_llama_full_window(o, path, c, err, errlen);
}

const hf_family HF_MIXTRAL = {"mixtral", "MixtralForCausalLM", GPT_KIND_DECODER, mixtral_pieces, mixtral_config,
                              mixtral_mismatch, mixtral_read_config, NULL, NULL};
