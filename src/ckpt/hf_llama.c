/* Hugging Face Llama (LlamaForCausalLM; MistralForCausalLM reads the same) interchange: the
 * family table of hf_impl.h, and the Llama-shaped decoder's pieces, config.json keys and checks
 * (hf_llama_*) that Mixtral (hf_mixtral.c) and Qwen2-MoE (hf_qwen2moe.c) build on.
 *
 * trident                          transformers LlamaForCausalLM
 * embedding.word.weight (Vp, h)    model.embed_tokens.weight (V, h)       padded rows dropped / added
 * layers.N.ln1.weight              model.layers.N.input_layernorm.weight
 * layers.N.attn.qkv.weight (3nd,h) model.layers.N.self_attn.{q,k,v}_proj.weight, rows [q | k | v]
 *   or, with grouped-query attention,
 * layers.N.attn.q.weight (nd, h)   ...self_attn.q_proj.weight
 * layers.N.attn.kv.weight (2gd, h) ...self_attn.{k,v}_proj.weight, rows [k | v]
 * layers.N.attn.proj.weight        ...self_attn.o_proj.weight
 * layers.N.ln2.weight              ...post_attention_layernorm.weight
 * layers.N.mlp.fc.weight (2f, h)   ...mlp.{gate,up}_proj.weight, rows [gate | up]
 * layers.N.mlp.fc2.weight          ...mlp.down_proj.weight
 * final_norm.weight                model.norm.weight
 * output_layer.weight (Vp, h)      lm_head.weight (V, h)  (tie_word_embeddings: not stored)
 * Both rotate q and k by Hugging Face's rotate-half (dims i and i + d/2 of each head paired), so
 * the q and k rows keep their order: no permutation either way. Weights are (out, in) on both
 * sides: nothing is transposed. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

int hf_llama_pieces(const gpt_config *c, const char *name, hf_piece *out)
{
    int64_t nd = gpt_q_width(c), gd = gpt_kv_width(c), f = c->ffn;
    if (strcmp(name, "embedding.word.weight") == 0) return hf_piece_of(out, 0, -1, "model.embed_tokens.weight", 0);
    if (strcmp(name, "output_layer.weight") == 0) return hf_piece_of(out, 0, -1, "lm_head.weight", 0);
    if (strcmp(name, "final_norm.weight") == 0) return hf_piece_of(out, 0, -1, "model.norm.weight", 0);
    int l, k = 0;
    if (sscanf(name, "layers.%d.%n", &l, &k) != 1 || k == 0) return 0;
    const char *t = name + k;
    if (strcmp(t, "ln1.weight") == 0) return hf_piece_of(out, 0, -1, "model.layers.%d.input_layernorm.weight", l);
    if (strcmp(t, "ln2.weight") == 0) return hf_piece_of(out, 0, -1, "model.layers.%d.post_attention_layernorm.weight", l);
    if (strcmp(t, "attn.proj.weight") == 0) return hf_piece_of(out, 0, -1, "model.layers.%d.self_attn.o_proj.weight", l);
    if (strcmp(t, "mlp.fc2.weight") == 0) return hf_piece_of(out, 0, -1, "model.layers.%d.mlp.down_proj.weight", l);
    if (strcmp(t, "mlp.fc.weight") == 0) {
        hf_piece_of(&out[0], 0, f, "model.layers.%d.mlp.gate_proj.weight", l);
        return 1 + hf_piece_of(&out[1], f, f, "model.layers.%d.mlp.up_proj.weight", l);
    }
    int bias = strstr(t, ".bias") != NULL;
    const char *qn = bias ? "model.layers.%d.self_attn.q_proj.bias" : "model.layers.%d.self_attn.q_proj.weight";
    const char *kn = bias ? "model.layers.%d.self_attn.k_proj.bias" : "model.layers.%d.self_attn.k_proj.weight";
    const char *vn = bias ? "model.layers.%d.self_attn.v_proj.bias" : "model.layers.%d.self_attn.v_proj.weight";
    if (strcmp(t, "attn.qkv.weight") == 0 || strcmp(t, "attn.qkv.bias") == 0) {
        hf_piece_of(&out[0], 0, nd, qn, l);
        hf_piece_of(&out[1], nd, nd, kn, l);
        return 2 + hf_piece_of(&out[2], 2 * nd, nd, vn, l);
    }
    if (strcmp(t, "attn.q.weight") == 0 || strcmp(t, "attn.q.bias") == 0) return hf_piece_of(out, 0, -1, qn, l);
    if (strcmp(t, "attn.kv.weight") == 0 || strcmp(t, "attn.kv.bias") == 0) {
        hf_piece_of(&out[0], 0, gd, kn, l);
        return 1 + hf_piece_of(&out[1], gd, gd, vn, l);
    }
    return 0;
}

/* rope_scaling as transformers reads it: null, or the rope_type and its parameters resolved. */
static void add_rope_scaling(cJSON *o, const gpt_config *c)
{
    static const char *const names[] = {"default", "linear", "llama3", "yarn"};
    if (c->rope_scaling == GPT_ROPE_NONE) {
        cJSON_AddNullToObject(o, "rope_scaling");
        return;
    }
    cJSON *rs = cJSON_AddObjectToObject(o, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", names[c->rope_scaling]);
    cJSON_AddNumberToObject(rs, "factor", ckpt_float_value(c->rope_factor));
    if (c->rope_scaling == GPT_ROPE_LLAMA3) {
        cJSON_AddNumberToObject(rs, "low_freq_factor", ckpt_float_value(c->rope_low_freq > 0 ? c->rope_low_freq : 1));
        cJSON_AddNumberToObject(rs, "high_freq_factor", ckpt_float_value(c->rope_high_freq > 0 ? c->rope_high_freq : 4));
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                c->rope_orig_max_pos > 0 ? c->rope_orig_max_pos : 8192);
    } else if (c->rope_scaling == GPT_ROPE_YARN) {
        double f = c->rope_factor;
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                c->rope_orig_max_pos > 0 ? c->rope_orig_max_pos : c->max_pos);
        cJSON_AddNumberToObject(rs, "beta_fast", ckpt_float_value(c->yarn_beta_fast > 0 ? c->yarn_beta_fast : 32));
        cJSON_AddNumberToObject(rs, "beta_slow", ckpt_float_value(c->yarn_beta_slow > 0 ? c->yarn_beta_slow : 1));
        cJSON_AddNumberToObject(rs, "attention_factor", c->yarn_attn_factor > 0 ? ckpt_float_value(c->yarn_attn_factor)
                                                        : f <= 1                ? 1.0
                                                                                : 0.1 * log(f) + 1.0);
    }
}

cJSON *hf_llama_config(const gpt_config *c, const char *arch, const char *model_type)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(arch));
    cJSON_AddStringToObject(o, "model_type", model_type);
    cJSON_AddStringToObject(o, "hidden_act", TD_ACTS[c->act].hf); /* gated: act(gate) * up */
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", gpt_groups(c));
    cJSON_AddNumberToObject(o, "head_dim", gpt_head_dim(c));
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_pos);
    cJSON_AddNumberToObject(o, "rms_norm_eps", ckpt_float_value(gpt_norm_eps(c)));
    cJSON_AddNumberToObject(o, "rope_theta", ckpt_float_value(gpt_rotary_base(c)));
    add_rope_scaling(o, c);
    cJSON_AddNumberToObject(o, "attention_dropout", ckpt_float_value(c->attn_dropout));
    cJSON_AddBoolToObject(o, "tie_word_embeddings", !c->untied);
    cJSON_AddNumberToObject(o, "initializer_range", ckpt_float_value(c->init_std));
    cJSON_AddBoolToObject(o, "use_cache", 1);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    return o;
}

static cJSON *llama_config(const gpt_config *c)
{
    cJSON *o = hf_llama_config(c, "LlamaForCausalLM", "llama");
    cJSON_AddNumberToObject(o, "intermediate_size", c->ffn);
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddBoolToObject(o, "mlp_bias", 0);
    cJSON_AddNumberToObject(o, "pretraining_tp", 1);
    return o;
}

const char *hf_llama_mismatch(const gpt_config *c)
{
    if (c->norm != GPT_NORM_RMSNORM) return "LayerNorm";
    if (c->pos != GPT_POS_ROPE) return "no rotary positions";
    if (gpt_rotary_dims(c) != gpt_head_dim(c)) return "rotary on part of each head";
    if (!c->glu) return "an ungated MLP"; /* LlamaMLP is act(gate_proj) * up_proj */
    return NULL;
}

static const char *llama_mismatch(const gpt_config *c)
{
    const char *w = hf_llama_mismatch(c);
    if (w) return w;
    if (gpt_has_bias(c) || c->add_qkv_bias) return "biases";
    if (gpt_moe(c)) return "a mixture of experts";
    return NULL;
}

/* YaRN's default attention factor of a scale (transformers' get_mscale). */
static double yarn_mscale(double scale, double m)
{
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* c's rope scaling from rs (rope_scaling, or transformers 5's rope_parameters): rope_type (or the
 * older "type") default, linear, llama3 or yarn, with its parameters. */
static int read_rope_scaling(const cJSON *rs, const char *path, gpt_config *c, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(type)) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "default";
    if (strcmp(t, "default") == 0) return 0;
    c->rope_scaling = strcmp(t, "linear") == 0   ? GPT_ROPE_LINEAR
                      : strcmp(t, "llama3") == 0 ? GPT_ROPE_LLAMA3
                      : strcmp(t, "yarn") == 0   ? GPT_ROPE_YARN
                                                 : GPT_ROPE_NONE;
    if (!c->rope_scaling)
        FAIL("%s: rope_scaling's rope_type '%s' is not one trident computes (default, linear, llama3, yarn)", path, t);
    int orig = 0;
    const cJSON *om = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
    if (om && (hf_json_int(rs, "original_max_position_embeddings", -1, &orig) || orig < 1))
        FAIL("%s: rope_scaling's original_max_position_embeddings must be a positive integer", path);
    double f = hf_json_num(rs, "factor", 0.0);
    if (!(f > 0) && c->rope_scaling == GPT_ROPE_YARN && orig > 0) f = (double)c->max_pos / orig; /* transformers 5 */
    if (!(f > 0)) FAIL("%s: rope_scaling (%s) needs a positive factor", path, t);
    c->rope_factor = (float)f;
    c->rope_orig_max_pos = orig;
    if (c->rope_scaling == GPT_ROPE_LLAMA3) {
        double lo = hf_json_num(rs, "low_freq_factor", 1.0), hi = hf_json_num(rs, "high_freq_factor", 4.0);
        if (!(lo > 0 && hi > lo))
            FAIL("%s: rope_scaling (llama3) needs 0 < low_freq_factor < high_freq_factor, not %g and %g", path, lo, hi);
        c->rope_low_freq = (float)lo, c->rope_high_freq = (float)hi;
    } else if (c->rope_scaling == GPT_ROPE_YARN) {
        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
        if (cJSON_IsFalse(tr))
            FAIL("%s: rope_scaling (yarn) has truncate false; trident rounds YaRN's correction range as the default", path);
        double fast = hf_json_num(rs, "beta_fast", 32.0), slow = hf_json_num(rs, "beta_slow", 1.0);
        if (!(fast > 0 && slow > 0)) FAIL("%s: rope_scaling (yarn) needs positive beta_fast and beta_slow", path);
        c->yarn_beta_fast = (float)fast, c->yarn_beta_slow = (float)slow;
        double af = hf_json_num(rs, "attention_factor", 0.0), ms = hf_json_num(rs, "mscale", 0.0),
               msa = hf_json_num(rs, "mscale_all_dim", 0.0);
        if (!(af > 0)) af = ms > 0 && msa > 0 ? yarn_mscale(f, ms) / yarn_mscale(f, msa) : yarn_mscale(f, 1.0);
        c->yarn_attn_factor = (float)af;
    }
    return 0;
}

/* c's rotary base (rope_theta, or transformers 5's rope_parameters' rope_theta) and rope scaling
 * (rope_scaling or rope_parameters); -1 with err for an unknown rope_type. */
static int read_rope(const cJSON *o, const char *path, double theta, gpt_config *c, char *err, size_t errlen)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) {
        if (!cJSON_IsObject(rs)) FAIL("%s: rope_scaling must be an object or null", path);
        if (read_rope_scaling(rs, path, c, err, errlen)) return -1;
    }
    theta = hf_json_num(o, "rope_theta", theta);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(o, "rope_parameters");
    if (cJSON_IsObject(rp)) {
        if (read_rope_scaling(rp, path, c, err, errlen)) return -1;
        theta = hf_json_num(rp, "rope_theta", theta);
    }
    c->rotary_base = (float)theta;
    if (!(c->rotary_base > 1)) FAIL("%s: rope_theta must be larger than 1", path);
    return 0;
}

int hf_llama_read_decoder(const cJSON *o, const char *path, gpt_config *c, double eps, double theta, char *err,
                          size_t errlen)
{
    int groups, head_dim;
    if (hf_json_int(o, "hidden_size", -1, &c->hidden) || hf_json_int(o, "num_hidden_layers", -1, &c->num_layers) ||
        hf_json_int(o, "num_attention_heads", -1, &c->heads) || hf_json_int(o, "vocab_size", -1, &c->vocab) ||
        hf_json_int(o, "max_position_embeddings", -1, &c->max_pos) ||
        hf_json_int(o, "num_key_value_heads", c->heads, &groups) ||
        hf_json_int(o, "head_dim", c->hidden % c->heads ? -1 : c->hidden / c->heads, &head_dim))
        FAIL("%s: hidden_size, num_hidden_layers, num_attention_heads, max_position_embeddings and vocab_size must "
             "be positive integers (num_key_value_heads and head_dim too, when given)", path);
    if (c->heads % groups)
        FAIL("%s: num_attention_heads %d is not divisible by num_key_value_heads %d", path, c->heads, groups);
    if (head_dim % 2) FAIL("%s: head_dim %d is odd; rotary positions need an even head size", path, head_dim);
    c->query_groups = groups == c->heads ? 0 : groups;
    c->kv_channels = head_dim;
    /* the gate's function: hidden_act, or Gemma's hidden_activation (gelu_pytorch_tanh: GeGLU) */
    const char *act_key = cJSON_GetObjectItemCaseSensitive(o, "hidden_act") ? "hidden_act" : "hidden_activation";
    if (hf_json_act(o, act_key, "silu", path, &c->act, err, errlen)) return -1;
    if (fabs(hf_json_num(o, "partial_rotary_factor", 1.0) - 1.0) > 1e-12)
        FAIL("%s: partial_rotary_factor is not 1; trident converts models that rotate whole heads", path);
    c->pos = GPT_POS_ROPE;
    if (read_rope(o, path, theta, c, err, errlen)) return -1;
    c->norm = GPT_NORM_RMSNORM;
    c->norm_eps = (float)hf_json_num(o, "rms_norm_eps", eps);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) FAIL("%s: rms_norm_eps must be in (0, 1)", path);
    c->glu = 1;
    c->disable_bias = 1;
    c->untied = !hf_json_bool(o, "tie_word_embeddings", 0);
    c->attn_dropout = (float)hf_json_num(o, "attention_dropout", 0.0);
    return 0;
}

int hf_llama_full_window(const cJSON *o, const char *path, const gpt_config *c, char *err, size_t errlen)
{
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(o, "sliding_window");
    if (cJSON_IsNumber(sw) && sw->valuedouble < c->max_pos)
        FAIL("%s: sliding_window %g is shorter than max_position_embeddings %d; trident attends to the whole "
             "causal window", path, sw->valuedouble, c->max_pos);
    return 0;
}

static int llama_read_config(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen)
{
    if (hf_llama_read_decoder(o, path, c, 1e-6, 10000.0, err, errlen)) return -1;
    if (hf_json_int(o, "intermediate_size", -1, &c->ffn)) FAIL("%s: intermediate_size must be a positive integer", path);
    if (hf_json_bool(o, "attention_bias", 0) || hf_json_bool(o, "mlp_bias", 0))
        FAIL("%s: attention_bias or mlp_bias is true; trident converts Llama models without biases", path);
    if (hf_json_num(o, "pretraining_tp", 1) != 1) FAIL("%s: pretraining_tp must be 1", path);
    return hf_llama_full_window(o, path, c, err, errlen);
}

const hf_family HF_LLAMA = {"llama", "LlamaForCausalLM", GPT_KIND_DECODER, hf_llama_pieces, llama_config, llama_mismatch,
                            llama_read_config, "mistral", NULL};
