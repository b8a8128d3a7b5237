/* The table of model settings a checkpoint stores: see GPT_CONFIG_KEYS in include/model/trident/gpt.h.
 * A setting added to gpt_config is added here once; meta.json, `checkpoint info` and the
 * checks of the flags against a loaded checkpoint follow. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "trident/args.h"
#include "trident/gpt.h"

#define INT(key, flag, kind, field, lo, hi) {key, flag, kind, 0, offsetof(gpt_config, field), lo, hi, NULL, NULL, 0, NULL}
#define FLT(key, flag, kind, field, lo, hi) {key, flag, kind, 1, offsetof(gpt_config, field), lo, hi, NULL, NULL, 0, NULL}
/* an int whose 0 means the flag's default, or that needs a switch when not 0 */
#define OPT(key, flag, field, hi, enable) \
    {key, flag, GPT_KEY_ARCH, 0, offsetof(gpt_config, field), 0, hi, NULL, enable, 1, NULL}
#define FLT0(key, flag, field, hi) {key, flag, GPT_KEY_ARCH, 1, offsetof(gpt_config, field), 0, hi, NULL, NULL, 1, NULL}
#define ENUM(key, flag, field, choices, n) \
    {key, flag, GPT_KEY_ARCH, 0, offsetof(gpt_config, field), 0, (n) - 1, choices, NULL, 0, NULL}

const gpt_config_key GPT_CONFIG_KEYS[] = {
    INT("num_layers", "--num-layers", GPT_KEY_ARCH, num_layers, 1, 1 << 16),
    INT("hidden_size", "--hidden-size", GPT_KEY_ARCH, hidden, 1, 1 << 20),
    INT("num_attention_heads", "--num-attention-heads", GPT_KEY_ARCH, heads, 1, 1 << 16),
    OPT("num_query_groups", "--num-query-groups", query_groups, 1 << 16, "--group-query-attention"),
    OPT("kv_channels", "--kv-channels", kv_channels, 1 << 20, NULL),
    INT("ffn_hidden_size", "--ffn-hidden-size", GPT_KEY_ARCH, ffn, 1, 1 << 24),
    INT("max_position_embeddings", "--max-position-embeddings", GPT_KEY_ARCH, max_pos, 1, 1 << 24),
    ENUM("normalization", "--normalization", norm, "LayerNorm|RMSNorm", 2),
    FLT0("norm_epsilon", "--norm-epsilon", norm_eps, 1),
    ENUM("position_embedding_type", "--position-embedding-type", pos, "learned_absolute|rope|none", 3),
    FLT0("rotary_base", "--rotary-base", rotary_base, 1e12),
    FLT0("rotary_percent", "--rotary-percent", rotary_percent, 1),
    ENUM("rope_scaling_type", "--rope-scaling-type", rope_scaling, GPT_ROPE_CHOICES, 4),
    FLT0("rope_scaling_factor", "--rope-scaling-factor", rope_factor, 1e6),
    FLT0("rope_low_freq_factor", "--rope-low-freq-factor", rope_low_freq, 1e6),
    FLT0("rope_high_freq_factor", "--rope-high-freq-factor", rope_high_freq, 1e6),
    OPT("original_max_position_embeddings", "--original-max-position-embeddings", rope_orig_max_pos, 1 << 24, NULL),
    FLT0("yarn_beta_fast", "--yarn-beta-fast", yarn_beta_fast, 1e6),
    FLT0("yarn_beta_slow", "--yarn-beta-slow", yarn_beta_slow, 1e6),
    FLT0("yarn_attention_factor", "--yarn-attention-factor", yarn_attn_factor, 1e6),
    {"activation_func", "--activation-func", GPT_KEY_ARCH, 0, offsetof(gpt_config, act), 0, TD_ACT_COUNT - 1,
     TD_ACT_CHOICES, NULL, 0, TD_ACT_SWITCHES},
    {"gated_linear_unit", "--gated-linear-unit", GPT_KEY_ARCH, 0, offsetof(gpt_config, glu), 0, 1, NULL, NULL, 0,
     "--swiglu"},
    INT("disable_bias_linear", "--disable-bias-linear", GPT_KEY_ARCH, disable_bias, 0, 1),
    INT("add_qkv_bias", "--add-qkv-bias", GPT_KEY_ARCH, add_qkv_bias, 0, 1),
    INT("untie_embeddings_and_output_weights", "--untie-embeddings-and-output-weights", GPT_KEY_ARCH, untied, 0, 1),
    ENUM("model", "--model", kind, TD_MODEL_CHOICES, 2),
    INT(GPT_BINARY_HEAD_KEY, GPT_BINARY_HEAD_FLAG, GPT_KEY_ARCH, binary_head, 0, 1),
    INT("num_experts", "--num-experts", GPT_KEY_ARCH, num_experts, 0, 1024),
    OPT("moe_ffn_hidden_size", "--moe-ffn-hidden-size", moe_ffn, 1 << 24, NULL),
    OPT("moe_router_topk", "--moe-router-topk", moe_topk, 1024, NULL), /* 0 in a dense model */
    ENUM("moe_router_score_function", "--moe-router-score-function", moe_score, "softmax|sigmoid", 2),
    INT("moe_router_pre_softmax", "--moe-router-pre-softmax", GPT_KEY_ARCH, moe_pre_softmax, 0, 1),
    FLT0("moe_router_topk_scaling_factor", "--moe-router-topk-scaling-factor", moe_topk_scale, 1e6),
    FLT("moe_aux_loss_coeff", "--moe-aux-loss-coeff", GPT_KEY_RECORD, moe_aux_coeff, 0, 1e6),
    {"moe_router_load_balancing_type", "--moe-router-load-balancing-type", GPT_KEY_RECORD, 0,
     offsetof(gpt_config, moe_seq_aux), 0, 1, "aux_loss|seq_aux_loss", NULL, 0, NULL},
    FLT("moe_z_loss_coeff", "--moe-z-loss-coeff", GPT_KEY_RECORD, moe_z_coeff, 0, 1e6),
    INT("moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", GPT_KEY_ARCH, moe_shared_ffn, 0, 1 << 24),
    INT("moe_shared_expert_gate", "--moe-shared-expert-gate", GPT_KEY_ARCH, moe_shared_gate, 0, 1),
    INT("moe_router_enable_expert_bias", "--moe-router-enable-expert-bias", GPT_KEY_ARCH, moe_expert_bias, 0, 1),
    FLT("moe_router_bias_update_rate", "--moe-router-bias-update-rate", GPT_KEY_RECORD, moe_bias_rate, 0, 1),
    FLT("moe_expert_capacity_factor", "--moe-expert-capacity-factor", GPT_KEY_RECORD, moe_capacity, 0, 1e6),
    {"moe_token_drop_policy", "--moe-token-drop-policy", GPT_KEY_RECORD, 0, offsetof(gpt_config, moe_drop_position), 0, 1,
     "probs|position", NULL, 0, NULL},
    INT("moe_pad_expert_input_to_capacity", "--moe-pad-expert-input-to-capacity", GPT_KEY_RECORD, moe_pad, 0, 1),
    INT("vocab_size", "--vocab-file", GPT_KEY_VOCAB, vocab, 1, 1 << 30),
    INT("padded_vocab_size", "--make-vocab-size-divisible-by", GPT_KEY_PADDING, padded_vocab, 1, 1 << 30),
    INT("seq_length", "--seq-length", GPT_KEY_RUN, seq, 1, 1 << 24),
    FLT("init_method_std", "--init-method-std", GPT_KEY_RECORD, init_std, 0, 10),
    FLT("hidden_dropout", "--hidden-dropout", GPT_KEY_RECORD, hidden_dropout, 0, 1),
    FLT("attention_dropout", "--attention-dropout", GPT_KEY_RECORD, attn_dropout, 0, 1),
    /* LoRA: the rank and the targets fix the adapters' shapes; alpha and dropout are taken on resume */
    INT("lora_rank", "--lora-rank", GPT_KEY_ARCH, lora_rank, 0, 1 << 16),
    OPT("lora_target_modules", "--lora-target-modules", lora_targets, 127, NULL),
    FLT0("lora_alpha", "--lora-alpha", lora_alpha, 1e6),
    FLT("lora_dropout", "--lora-dropout", GPT_KEY_RUN, lora_dropout, 0, 1),
};
const int GPT_NCONFIG_KEYS = (int)(sizeof GPT_CONFIG_KEYS / sizeof GPT_CONFIG_KEYS[0]);

double gpt_config_get(const gpt_config *c, const gpt_config_key *k)
{
    const char *p = (const char *)c + k->offset;
    if (k->is_float) return (double)*(const float *)p;
    if (k->choices) return (double)*(const gpt_norm *)p; /* enums are int-sized */
    return (double)*(const int *)p;
}

void gpt_config_set(gpt_config *c, const gpt_config_key *k, double v)
{
    char *p = (char *)c + k->offset;
    if (k->is_float) *(float *)p = (float)v;
    else if (k->choices) *(gpt_norm *)p = (gpt_norm)(int)v;
    else *(int *)p = (int)v;
}

void gpt_config_value_str(const gpt_config *c, const gpt_config_key *k, char *out, size_t len)
{
    double v = gpt_config_get(c, k);
    if (k->choices) {
        const char *s = k->choices;
        for (int i = 0; i < (int)v && s; i++) {
            s = strchr(s, '|');
            if (s) s++;
        }
        snprintf(out, len, "%.*s", s ? (int)strcspn(s, "|") : 1, s ? s : "?");
    } else if (k->is_float) {
        snprintf(out, len, "%g", v);
    } else {
        snprintf(out, len, "%.0f", v);
    }
}
