/* The model's architecture from the command line: see gpt_config_from_args in
 * include/model/trident/gpt.h. Defaults are GPT-2's; Megatron's flag names and rules. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/args.h"
#include "trident/check.h"
#include "trident/gpt.h"

/* Megatron's SwiGLU default, for any gated MLP: 8h/3 rounded down to a multiple of 64. */
static int swiglu_ffn(int h) { return (int)((4.0 * h * 2.0 / 3.0) / 64.0) * 64; }

static int default_ffn(const td_args *a)
{
    if (a->ffn_hidden_size) return a->ffn_hidden_size;
    return a->swiglu || a->gated_linear_unit ? swiglu_ffn(a->hidden_size) : 4 * a->hidden_size;
}

/* Each expert's hidden size: --moe-ffn-hidden-size, or the dense MLP's. */
static int gpt_moe_ffn_of(const td_args *a)
{
    return td_args_given(a, "--moe-ffn-hidden-size") ? a->moe_ffn_hidden_size : default_ffn(a);
}

void gpt_config_from_args(gpt_config *c, const td_args *a)
{
    memset(c, 0, sizeof *c);
    c->num_layers = a->num_layers;
    c->hidden = a->hidden_size;
    c->heads = a->num_attention_heads;
    c->query_groups = a->group_query_attention ? a->num_query_groups : 0;
    c->kv_channels = td_args_given(a, "--kv-channels") ? a->kv_channels : 0;
    c->ffn = default_ffn(a);
    c->seq = a->seq_length;
    c->max_pos = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
    c->norm = strcmp(a->normalization, "RMSNorm") == 0 ? GPT_NORM_RMSNORM : GPT_NORM_LAYERNORM;
    c->norm_eps = (float)a->norm_epsilon;
    c->pos = strcmp(a->position_embedding_type, "rope") == 0   ? GPT_POS_ROPE
             : strcmp(a->position_embedding_type, "none") == 0 ? GPT_POS_NONE
                                                                : GPT_POS_LEARNED;
    c->rotary_base = (float)a->rotary_base;
    c->rotary_percent = (float)a->rotary_percent;
    int megatron_yarn = a->rope_type && strcmp(a->rope_type, "yarn") == 0;
    c->rope_scaling = megatron_yarn                                     ? GPT_ROPE_YARN
                      : a->use_rope_scaling                             ? GPT_ROPE_LLAMA3
                      : strcmp(a->rope_scaling_type, "linear") == 0 ? GPT_ROPE_LINEAR
                      : strcmp(a->rope_scaling_type, "llama3") == 0 ? GPT_ROPE_LLAMA3
                      : strcmp(a->rope_scaling_type, "yarn") == 0   ? GPT_ROPE_YARN
                                                                      : GPT_ROPE_NONE;
    if (c->rope_scaling) {
        double f = td_args_given(a, "--rope-scaling-factor")     ? a->rope_scaling_factor
                   : td_args_given(a, "--rotary-scaling-factor") ? a->rotary_scaling_factor
                   : c->rope_scaling == GPT_ROPE_LLAMA3          ? 8.0
                                                                 : 0.0;
        c->rope_factor = (float)f;
        if (td_args_given(a, "--rope-low-freq-factor")) c->rope_low_freq = (float)a->rope_low_freq_factor;
        if (td_args_given(a, "--rope-high-freq-factor")) c->rope_high_freq = (float)a->rope_high_freq_factor;
        if (td_args_given(a, "--original-max-position-embeddings"))
            c->rope_orig_max_pos = a->original_max_position_embeddings;
        if (td_args_given(a, "--yarn-beta-fast")) c->yarn_beta_fast = (float)a->yarn_beta_fast;
        if (td_args_given(a, "--yarn-beta-slow")) c->yarn_beta_slow = (float)a->yarn_beta_slow;
        if (td_args_given(a, "--yarn-attention-factor")) c->yarn_attn_factor = (float)a->yarn_attention_factor;
        if (td_args_given(a, "--mscale") || td_args_given(a, "--mscale-all-dim")) {
            double ms = td_args_given(a, "--mscale") ? a->mscale : 1.0, all = a->mscale_all_dim, lf = log(f);
            c->yarn_attn_factor = (float)((f <= 1 ? 1.0 : 0.1 * ms * lf + 1) / (f <= 1 || all == 0 ? 1.0 : 0.1 * all * lf + 1));
        }
    }
    char amsg[256]; /* a conflict of the activation flags is gpt_config_validate's to report */
    if (td_act_of_args(a, &c->act, &c->glu, amsg, sizeof amsg)) c->act = TD_ACT_GELU, c->glu = 0;
    c->disable_bias = a->disable_bias_linear;
    c->add_qkv_bias = a->add_qkv_bias;
    c->untied = a->untie_embeddings_and_output_weights;
    c->init_std = (float)a->init_method_std;
    c->hidden_dropout = (float)a->hidden_dropout;
    c->attn_dropout = (float)a->attention_dropout;
    c->seed = (uint64_t)a->seed;
    c->kind = td_args_choice_index(a, "--model") == GPT_KIND_ENCODER ? GPT_KIND_ENCODER : GPT_KIND_DECODER;
    if (c->kind == GPT_KIND_ENCODER) gpt_encoder_from_args(c, a);
    if (a->lora_rank > 0) { /* a bad list is gpt_config_validate's to report: q_proj,v_proj until then */
        char msg[256];
        unsigned mask = 0;
        c->lora_rank = a->lora_rank;
        c->lora_alpha = (float)a->lora_alpha;
        c->lora_dropout = (float)a->lora_dropout;
        c->lora_targets = td_lora_modules_parse(a->lora_target_modules, &mask, msg, sizeof msg) ? 5 : (int)mask;
        if (!c->glu) c->lora_targets &= ~(1 << GPT_LORA_GATE); /* all-linear: an ungated MLP has no gate */
    }
    c->num_experts = a->num_experts;
    if (c->num_experts > 0) {
        c->moe_ffn = td_args_given(a, "--moe-ffn-hidden-size") ? a->moe_ffn_hidden_size : 0;
        c->moe_topk = a->moe_router_topk;
        c->moe_score = strcmp(a->moe_router_score_function, "sigmoid") == 0;
        c->moe_pre_softmax = a->moe_router_pre_softmax;
        c->moe_topk_scale = (float)a->moe_router_topk_scaling_factor;
        c->moe_aux_coeff = strcmp(a->moe_router_load_balancing_type, "none") != 0 ? (float)a->moe_aux_loss_coeff : 0;
        c->moe_seq_aux = strcmp(a->moe_router_load_balancing_type, "seq_aux_loss") == 0;
        c->moe_z_coeff = (float)a->moe_z_loss_coeff;
        c->moe_shared_ffn = a->moe_shared_expert_intermediate_size;
        c->moe_shared_gate = a->moe_shared_expert_gate;
        c->moe_expert_bias = a->moe_router_enable_expert_bias;
        c->moe_bias_rate = (float)a->moe_router_bias_update_rate;
        c->moe_capacity = (float)a->moe_expert_capacity_factor;
        c->moe_drop_position = strcmp(a->moe_token_drop_policy, "position") == 0;
        c->moe_pad = a->moe_pad_expert_input_to_capacity;
        c->moe_allgather = strcmp(a->moe_token_dispatcher_type, "allgather") == 0;
        c->moe_grouped = a->moe_grouped_gemm;
        c->moe_etp1 = td_args_given(a, "--expert-tensor-parallel-size") && a->expert_tensor_parallel_size == 1 &&
                      a->tensor_model_parallel_size > 1;
        char msg[256]; /* a bad value is gpt_config_validate's to report: every layer MoE until then */
        if (a->moe_layer_freq) gpt_moe_layer_freq_parse(c, a->moe_layer_freq, c->num_layers, msg, sizeof msg);
    }
}

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

/* The LoRA flags: what this build trains with adapters (docs/finetune.md). */
static int lora_validate(const td_args *a, int tp, char *msg, size_t msglen)
{
    static const char *const flags[] = {"--lora-alpha", "--lora-dropout", "--lora-target-modules"};
    if (a->lora_rank == 0) {
        for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
            if (td_args_given(a, flags[i])) FAIL("%s needs --lora-rank (the adapters' rank, 1 or more)", flags[i]);
        return 0;
    }
    unsigned mask;
    if (td_lora_modules_parse(a->lora_target_modules, &mask, msg, msglen)) return -1;
    int glu = 0, act;
    char amsg[256];
    if (td_act_of_args(a, &act, &glu, amsg, sizeof amsg) == 0 && !glu && (mask >> GPT_LORA_GATE & 1) &&
        strcmp(a->lora_target_modules, "all-linear") != 0)
        FAIL("--lora-target-modules gate_proj: the MLP is not gated (fc is up_proj, fc2 down_proj): leave gate_proj "
             "out or give --swiglu");
    if (!(a->lora_alpha > 0)) FAIL("--lora-alpha %g: the adapters' scaling alpha / rank needs alpha above 0", a->lora_alpha);
    (void)tp;
    return 0;
}

int gpt_config_validate(const td_args *a, int tp, char *msg, size_t msglen)
{
    int heads = a->num_attention_heads, kv = td_args_given(a, "--kv-channels");
    int rope = strcmp(a->position_embedding_type, "rope") == 0;
    if (!kv && a->hidden_size % heads)
        FAIL("--hidden-size %d is not divisible by --num-attention-heads %d (or give --kv-channels)", a->hidden_size,
             heads);
    int d = kv ? a->kv_channels : a->hidden_size / heads;
    if (td_args_given(a, "--num-query-groups") && !a->group_query_attention)
        FAIL("--num-query-groups needs --group-query-attention");
    if (a->group_query_attention) {
        int g = a->num_query_groups;
        if (heads % g)
            FAIL("--num-attention-heads %d is not divisible by --num-query-groups %d", heads, g);
        if (g % tp)
            FAIL("--num-query-groups %d is not divisible by --tensor-model-parallel-size %d", g, tp);
    }
    if (heads % tp)
        FAIL("--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d", heads, tp);
    if (!rope && (td_args_given(a, "--rotary-base") || td_args_given(a, "--rotary-percent")))
        FAIL("--rotary-base and --rotary-percent need --position-embedding-type rope");
    const char *stype = a->rope_scaling_type;
    if (a->rope_type && strcmp(a->rope_type, "yarn") == 0) {
        if (strcmp(stype, "none") != 0 && strcmp(stype, "yarn") != 0)
            FAIL("--rope-type yarn contradicts --rope-scaling-type %s", stype);
        stype = "yarn";
    }
    int scaled = a->use_rope_scaling || strcmp(stype, "none") != 0;
    if (a->use_rope_scaling && strcmp(stype, "none") != 0 && strcmp(stype, "llama3") != 0)
        FAIL("--use-rope-scaling is llama3 rope scaling; it contradicts --rope-scaling-type %s", stype);
    if (scaled && !rope) FAIL("rope scaling needs --position-embedding-type rope");
    if (td_args_given(a, "--rope-scaling-factor") && td_args_given(a, "--rotary-scaling-factor") &&
        a->rope_scaling_factor != a->rotary_scaling_factor)
        FAIL("--rope-scaling-factor %g and --rotary-scaling-factor %g are one setting; give one", a->rope_scaling_factor,
             a->rotary_scaling_factor);
    static const char *const scale_flags[] = {"--rope-scaling-factor", "--rotary-scaling-factor",
                                              "--rope-low-freq-factor", "--rope-high-freq-factor",
                                              "--original-max-position-embeddings", "--yarn-beta-fast",
                                              "--yarn-beta-slow", "--yarn-attention-factor",
                                              "--mscale", "--mscale-all-dim"};
    for (size_t i = 0; i < sizeof scale_flags / sizeof scale_flags[0]; i++)
        if (!scaled && td_args_given(a, scale_flags[i]))
            FAIL("%s needs rope scaling: --rope-scaling-type linear|llama3|yarn or --use-rope-scaling", scale_flags[i]);
    if (scaled && strcmp(stype, "llama3") != 0 && !a->use_rope_scaling &&
        (td_args_given(a, "--rope-low-freq-factor") || td_args_given(a, "--rope-high-freq-factor")))
        FAIL("--rope-low-freq-factor and --rope-high-freq-factor are llama3 rope scaling's; give --rope-scaling-type "
             "llama3");
    if (scaled && strcmp(stype, "yarn") != 0 &&
        (td_args_given(a, "--yarn-beta-fast") || td_args_given(a, "--yarn-beta-slow") ||
         td_args_given(a, "--yarn-attention-factor") || td_args_given(a, "--mscale") ||
         td_args_given(a, "--mscale-all-dim")))
        FAIL("--yarn-beta-fast, --yarn-beta-slow, --yarn-attention-factor, --mscale and --mscale-all-dim need "
             "--rope-scaling-type yarn");
    if (td_args_given(a, "--yarn-attention-factor") && (td_args_given(a, "--mscale") || td_args_given(a, "--mscale-all-dim")))
        FAIL("--yarn-attention-factor and --mscale/--mscale-all-dim set the same factor; give one");
    if (scaled && strcmp(stype, "llama3") != 0 && !a->use_rope_scaling &&
        !td_args_given(a, "--rope-scaling-factor") && !td_args_given(a, "--rotary-scaling-factor"))
        FAIL("--rope-scaling-type %s needs --rope-scaling-factor", stype);
    if (rope) {
        double r = d * a->rotary_percent;
        if (r != (double)(int)r || (int)r % 2 || r < 2)
            FAIL("--position-embedding-type rope rotates %g dims of each head (head size %d x --rotary-percent "
                 "%g): it needs a whole, even number",
                 r, d, a->rotary_percent);
    }
    int ffn = default_ffn(a);
    if (ffn < 1)
        FAIL("a gated MLP (--swiglu, --gated-linear-unit) with --hidden-size %d gives no MLP width (8h/3 rounded "
             "down to 64): give --ffn-hidden-size", a->hidden_size);
    int act, glu;
    if (td_act_of_args(a, &act, &glu, msg, msglen)) return -1;
    if (ffn % tp) FAIL("--ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d", ffn, tp);
    if (a->add_qkv_bias && !a->disable_bias_linear)
        FAIL("--add-qkv-bias needs --disable-bias-linear (without it every linear layer has a bias)");
    if (lora_validate(a, tp, msg, msglen)) return -1;
    if (a->num_experts == 0) {
        static const char *const moe_flags[] = {"--moe-ffn-hidden-size", "--moe-router-topk", "--moe-router-score-function",
                                                "--moe-router-pre-softmax", "--moe-router-topk-scaling-factor",
                                                "--moe-aux-loss-coeff", "--moe-z-loss-coeff",
                                                "--moe-shared-expert-intermediate-size", "--moe-shared-expert-gate",
                                                "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate",
                                                "--moe-expert-capacity-factor", "--moe-token-drop-policy",
                                                "--moe-pad-expert-input-to-capacity", "--expert-model-parallel-size",
                                                "--expert-tensor-parallel-size", "--moe-token-dispatcher-type", "--moe-layer-freq",
                                                "--moe-grouped-gemm"};
        for (size_t i = 0; i < sizeof moe_flags / sizeof *moe_flags; i++)
            if (td_args_given(a, moe_flags[i])) FAIL("%s needs --num-experts (a mixture of experts)", moe_flags[i]);
    } else {
        if (a->moe_router_topk > a->num_experts)
            FAIL("--moe-router-topk %d is more than --num-experts %d", a->moe_router_topk, a->num_experts);
        if (a->moe_router_enable_expert_bias && strcmp(a->moe_router_score_function, "sigmoid") != 0)
            FAIL("--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid (the bias moves the "
                 "sigmoid scores the choice ranks, as in DeepSeek-V3 and Megatron)");
        if (td_args_given(a, "--moe-router-bias-update-rate") && !a->moe_router_enable_expert_bias)
            FAIL("--moe-router-bias-update-rate needs --moe-router-enable-expert-bias");
        if (a->moe_pad_expert_input_to_capacity && !(a->moe_expert_capacity_factor > 0))
            FAIL("--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (the capacity it pads to)");
        if (td_args_given(a, "--moe-token-drop-policy") && !(a->moe_expert_capacity_factor > 0))
            FAIL("--moe-token-drop-policy needs --moe-expert-capacity-factor (dropless otherwise)");
        if (a->moe_shared_expert_gate && a->moe_shared_expert_intermediate_size == 0)
            FAIL("--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size (the shared expert it gates)");
        if (a->moe_router_pre_softmax && strcmp(a->moe_router_score_function, "softmax") != 0)
            FAIL("--moe-router-pre-softmax applies to --moe-router-score-function softmax only");
        if (a->model && strcmp(a->model, "gpt") != 0) FAIL("--num-experts: the mixture of experts is built for --model gpt");
        if (a->num_experts % a->expert_model_parallel_size)
            FAIL("--num-experts %d is not divisible by --expert-model-parallel-size %d (each rank of the group holds "
                 "as many experts)", a->num_experts, a->expert_model_parallel_size);
        if (td_args_given(a, "--expert-tensor-parallel-size") && a->expert_tensor_parallel_size != 1 && tp == 1)
            FAIL("--expert-tensor-parallel-size %d: with --tensor-model-parallel-size 1 it can only be 1 (each expert "
                 "whole); give 1 or leave the flag out%s (docs/moe.md)", a->expert_tensor_parallel_size,
                 a->expert_tensor_parallel_size > 1 ? ", or split the experts with --tensor-model-parallel-size of the "
                                                      "same size" : "");
        if (td_args_given(a, "--expert-tensor-parallel-size") && a->expert_tensor_parallel_size != tp &&
            a->expert_tensor_parallel_size != 1)
            FAIL("--expert-tensor-parallel-size %d: give the tensor-parallel size (%d, the default: each expert split as "
                 "the dense MLP) or 1 (each expert whole, the experts split over the tensor-parallel ranks) (docs/moe.md)",
                 a->expert_tensor_parallel_size, tp);
        gpt_config layers = {0};
        if (gpt_moe_layer_freq_parse(&layers, a->moe_layer_freq ? a->moe_layer_freq : "1", a->num_layers, msg, msglen))
            return -1;
        int etp1 = td_args_given(a, "--expert-tensor-parallel-size") && a->expert_tensor_parallel_size == 1;
        if (etp1 && a->num_experts % (tp * a->expert_model_parallel_size))
            FAIL("--num-experts %d is not divisible by --tensor-model-parallel-size %d x --expert-model-parallel-size %d "
                 "(with --expert-tensor-parallel-size 1 each rank holds as many whole experts)", a->num_experts, tp,
                 a->expert_model_parallel_size);
        if (!etp1 && gpt_moe_ffn_of(a) % tp)
            FAIL("--moe-ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d (each expert splits "
                 "over the tensor-parallel ranks as the dense MLP does)", gpt_moe_ffn_of(a), tp);
        if (a->moe_shared_expert_intermediate_size % tp)
            FAIL("--moe-shared-expert-intermediate-size %d is not divisible by --tensor-model-parallel-size %d",
                 a->moe_shared_expert_intermediate_size, tp);
    }
    return 0;
}

void gpt_config_describe(const gpt_config *c, char *out, size_t len)
{
    int g = gpt_groups(c), d = gpt_head_dim(c);
    char attn[96], pos[64];
    if (g != c->heads) snprintf(attn, sizeof attn, "%d heads in %d query groups", c->heads, g);
    else snprintf(attn, sizeof attn, "%d heads", c->heads);
    static const char *const scalings[] = {"", "linear", "llama3", "yarn"};
    if (c->pos == GPT_POS_ROPE && c->rope_scaling)
        snprintf(pos, sizeof pos, "rope (base %g, %d of %d dims, %s scaling x%g)", (double)gpt_rotary_base(c),
                 gpt_rotary_dims(c), d, scalings[c->rope_scaling], (double)c->rope_factor);
    else if (c->pos == GPT_POS_ROPE)
        snprintf(pos, sizeof pos, "rope (base %g, %d of %d dims)", (double)gpt_rotary_base(c), gpt_rotary_dims(c), d);
    else snprintf(pos, sizeof pos, "%s positions", c->pos == GPT_POS_NONE ? "no" : "learned");
    char kind[96] = "";
    if (c->kind == GPT_KIND_ENCODER)
        snprintf(kind, sizeof kind, "%s%s: ", GPT_ENCODER_NAME, c->binary_head ? " with the sentence-order head" : "");
    char mlp[240];
    snprintf(mlp, sizeof mlp, "%s %d", td_act_label(c->act, c->glu), c->ffn);
    if (gpt_moe(c)) {
        int moe_layers = gpt_moe_layers(c, 0, c->num_layers);
        char dense[64] = ""; /* --moe-layer-freq: the other layers' dense MLP */
        char shared[64] = "";
        if (moe_layers < c->num_layers)
            snprintf(dense, sizeof dense, " in %d of the layers (%s %d in the others)", moe_layers,
                     td_act_label(c->act, c->glu), c->ffn);
        if (c->moe_shared_ffn > 0)
            snprintf(shared, sizeof shared, " + a shared expert of %d%s", c->moe_shared_ffn, c->moe_shared_gate ? " (gated)" : "");
        snprintf(mlp, sizeof mlp, "mixture of %d %s experts of %d%s, top-%d by %s%s%s%s", c->num_experts,
                 td_act_label(c->act, c->glu), gpt_moe_ffn(c), dense, c->moe_topk, c->moe_score ? "sigmoid" : "softmax",
                 c->moe_score || !c->moe_pre_softmax ? "" : " (before the top-k)",
                 c->moe_aux_coeff > 0 || c->moe_z_coeff > 0 ? ", router losses" : "", shared);
    }
    snprintf(out, len, "%s%d layer%s, hidden %d, %s of %d, %s, %s (eps %g), %s, %s%s, %s", kind, c->num_layers,
             td_plural(c->num_layers), c->hidden,
             attn, d, mlp, c->norm == GPT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm",
             (double)gpt_norm_eps(c), pos, gpt_has_bias(c) ? "biases" : "no biases",
             !gpt_has_bias(c) && c->add_qkv_bias ? " but QKV's" : "", c->untied ? "untied output layer" : "tied embeddings");
}

void gpt_config_resolve(gpt_config *c)
{
    c->query_groups = gpt_groups(c);
    if (c->heads > 0) c->kv_channels = gpt_head_dim(c);
    c->norm_eps = gpt_norm_eps(c);
    c->rotary_base = gpt_rotary_base(c);
    if (!(c->rotary_percent > 0)) c->rotary_percent = 1.0f;
    if (c->num_experts > 0) c->moe_ffn = gpt_moe_ffn(c);
}

void gpt_config_normalize(gpt_config *c)
{
    if (c->heads > 0 && c->query_groups == c->heads) c->query_groups = 0;
    if (c->heads > 0 && c->hidden % c->heads == 0 && c->kv_channels == c->hidden / c->heads) c->kv_channels = 0;
    if (c->rotary_percent == 1.0f) c->rotary_percent = 0;
    if (c->rotary_base == 10000.0f) c->rotary_base = 0;
    if (c->norm_eps == 1e-5f) c->norm_eps = 0;
    if (c->moe_ffn == c->ffn) c->moe_ffn = 0; /* the experts' default: --ffn-hidden-size */
}

int gpt_padded_vocab(int vocab, int divisible_by, int tp)
{
    int64_t m = (int64_t)divisible_by * tp;
    return (int)((vocab + m - 1) / m * m);
}

double gpt_lora_widths(const gpt_config *c)
{
    if (!gpt_lora(c)) return 0;
    double h = c->hidden, q = gpt_q_width(c), kv = gpt_kv_width(c), f = c->ffn, l = c->num_layers;
    /* the MLP's modules: a MoE layer's token goes through its k experts' adapters and the shared
     * expert's (width S), a dense layer's through the MLP's; averaged over the layers */
    double moe = c->num_experts > 0 ? gpt_moe_layers(c, 0, c->num_layers) : 0, S = c->moe_shared_ffn;
    double mlp = (moe * (c->moe_topk * (h + (c->num_experts > 0 ? gpt_moe_ffn(c) : 0)) + (S > 0 ? h + S : 0)) +
                  (l - moe) * (h + f)) / l;
    const double in_out[GPT_LORA_NMODULES] = {h + q, h + kv, h + kv, q + h, mlp, mlp, mlp};
    double sum = 0;
    for (int m = 0; m < GPT_LORA_NMODULES; m++)
        if (gpt_lora_on(c, m)) sum += in_out[m];
    return sum;
}

double gpt_flops_per_iteration(const gpt_config *c, int64_t batch, int full_recompute)
{
    /* Megatron's num_floating_point_operations: 12 = 3 passes x 2 (multiply-add) x 2 (the
     * QK^T and AV products), with grouped queries, head sizes and gated MLPs; full
     * recomputation runs the layers' forward again (16), not the logits. */
    double s = c->seq, l = c->num_layers, h = c->hidden, V = c->padded_vocab;
    double qratio = (double)gpt_q_width(c) / h, groups = (double)gpt_groups(c) / c->heads;
    /* a mixture of experts: the k experts a token goes through in each MoE layer (Megatron
     * counts no router), the dense MLP in the others (--moe-layer-freq) */
    double moe = gpt_moe_layers(c, 0, c->num_layers);
    double ffn = (moe * ((double)c->moe_topk * gpt_moe_ffn(c) + c->moe_shared_ffn) + (l - moe) * c->ffn) / l;
    double weights = (1.0 + groups) * qratio + ffn / h * (c->glu ? 1.5 : 1.0), core = s / h * qratio;
    double logits = V / (2.0 * l * h);
    if (!gpt_lora(c))
        return (double)batch * s * l * h * h * ((full_recompute ? 16.0 : 12.0) * (weights + core) + 12.0 * logits);
    /* LoRA: a frozen weight's backward is its input's gradient alone, 2 of the 3 passes (8, not
     * 12; 12 with full recomputation, not 16), the output layer's too; the attention core's
     * products are activations' and keep all 3; the adapters (A (r, in), B (out, r)) are trained:
     * 2 r (in + out) a token and layer per pass, 3 passes (4 with full recomputation) */
    double adapters = 2.0 * c->lora_rank * gpt_lora_widths(c) / (h * h);
    return (double)batch * s * l * h * h *
           ((full_recompute ? 12.0 : 8.0) * weights + (full_recompute ? 16.0 : 12.0) * core + 8.0 * logits +
            (full_recompute ? 4.0 : 3.0) * adapters);
}

/* YaRN's dimension at which a frequency turns nrot times over the original context. */
static double yarn_dim(double nrot, int rot, double base, double ctx)
{
    return rot * log(ctx / (nrot * 2 * M_PI)) / (2 * log(base));
}

double gpt_rope_freqs(const gpt_config *c, double *inv)
{
    int rot = gpt_rotary_dims(c), r2 = rot / 2;
    double base = gpt_rotary_base(c), f = c->rope_factor, scale = 1.0;
    for (int i = 0; i < r2; i++) inv[i] = 1.0 / pow(base, (double)(2 * i) / rot);
    if (c->rope_scaling == GPT_ROPE_LINEAR) {
        for (int i = 0; i < r2; i++) inv[i] /= f;
    } else if (c->rope_scaling == GPT_ROPE_LLAMA3) {
        double lo = c->rope_low_freq > 0 ? c->rope_low_freq : 1.0, hi = c->rope_high_freq > 0 ? c->rope_high_freq : 4.0;
        double ctx = c->rope_orig_max_pos > 0 ? c->rope_orig_max_pos : 8192;
        for (int i = 0; i < r2; i++) {
            double wavelen = 2 * M_PI / inv[i];
            if (wavelen < ctx / hi) continue; /* high frequencies: kept */
            if (wavelen > ctx / lo) {         /* low: interpolated */
                inv[i] /= f;
                continue;
            }
            double smooth = (ctx / wavelen - lo) / (hi - lo); /* between: a blend */
            inv[i] = (1 - smooth) * inv[i] / f + smooth * inv[i];
        }
    } else if (c->rope_scaling == GPT_ROPE_YARN) {
        double ctx = c->rope_orig_max_pos > 0 ? c->rope_orig_max_pos : c->max_pos;
        double fast = c->yarn_beta_fast > 0 ? c->yarn_beta_fast : 32, slow = c->yarn_beta_slow > 0 ? c->yarn_beta_slow : 1;
        double low = fmax(floor(yarn_dim(fast, rot, base, ctx)), 0);
        double high = fmin(ceil(yarn_dim(slow, rot, base, ctx)), rot - 1);
        if (low == high) high += 0.001;
        for (int i = 0; i < r2; i++) {
            double ramp = fmin(fmax((i - low) / (high - low), 0), 1), extra = 1 - ramp;
            inv[i] = inv[i] / f * (1 - extra) + inv[i] * extra;
        }
        scale = c->yarn_attn_factor > 0 ? c->yarn_attn_factor : f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
    }
    return scale;
}

int gpt_rotary_dims(const gpt_config *c)
{
    if (c->pos != GPT_POS_ROPE) return 0;
    double pct = c->rotary_percent > 0 ? c->rotary_percent : 1.0;
    int r = (int)(gpt_head_dim(c) * pct);
    return r - r % 2;
}
