/* Hugging Face GPT-2 (GPT2LMHeadModel) interchange: the family row of hf_impl.h.
 *
 * trident                      transformers GPT2LMHeadModel
 * embedding.word.weight (Vp,h) transformer.wte.weight (V, h)      padded rows dropped / added
 * embedding.position.weight    transformer.wpe.weight (P, h)
 * layers.N.ln1.{weight,bias}   transformer.h.N.ln_1.{weight,bias}
 * layers.N.attn.qkv (3h, h)    transformer.h.N.attn.c_attn (h, 3h)  Conv1D: [in, out], transposed
 * layers.N.attn.proj (h, h)    transformer.h.N.attn.c_proj (h, h)   transposed
 * layers.N.ln2                 transformer.h.N.ln_2
 * layers.N.mlp.fc (f, h)       transformer.h.N.mlp.c_fc (h, f)      transposed
 * layers.N.mlp.fc2 (h, f)      transformer.h.N.mlp.c_proj (f, h)    transposed
 * final_norm                   transformer.ln_f
 * (head tied to wte)           lm_head.weight: not stored (tied)
 * Both lay q|k|v out as three blocks of h with the heads contiguous inside each, so c_attn's
 * columns are qkv's rows in the same order. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

/* GPT-2's pieces: every trident tensor is one GPT2LMHeadModel tensor (with "transformer."),
 * the Conv1D matrices stored transposed. */
static int gpt2_pieces(const gpt_config *c, const char *name, hf_piece *out)
{
    static const struct {
        const char *trident, *hf;
        int transpose;
    } LAYER[] = {
        {"ln1.weight", "ln_1.weight", 0},           {"ln1.bias", "ln_1.bias", 0},
        {"attn.qkv.weight", "attn.c_attn.weight", 1}, {"attn.qkv.bias", "attn.c_attn.bias", 0},
        {"attn.proj.weight", "attn.c_proj.weight", 1}, {"attn.proj.bias", "attn.c_proj.bias", 0},
        {"ln2.weight", "ln_2.weight", 0},           {"ln2.bias", "ln_2.bias", 0},
        {"mlp.fc.weight", "mlp.c_fc.weight", 1},    {"mlp.fc.bias", "mlp.c_fc.bias", 0},
        {"mlp.fc2.weight", "mlp.c_proj.weight", 1}, {"mlp.fc2.bias", "mlp.c_proj.bias", 0},
    };
    (void)c;
    hf_piece *p = out;
    memset(p, 0, sizeof *p);
    p->rows = -1;
    if (strcmp(name, "embedding.word.weight") == 0) return snprintf(p->hf, sizeof p->hf, "transformer.wte.weight"), 1;
    if (strcmp(name, "embedding.position.weight") == 0)
        return snprintf(p->hf, sizeof p->hf, "transformer.wpe.weight"), 1;
    if (strcmp(name, "final_norm.weight") == 0) return snprintf(p->hf, sizeof p->hf, "transformer.ln_f.weight"), 1;
    if (strcmp(name, "final_norm.bias") == 0) return snprintf(p->hf, sizeof p->hf, "transformer.ln_f.bias"), 1;
    int l, k = 0;
    if (sscanf(name, "layers.%d.%n", &l, &k) != 1 || k == 0) return 0;
    for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++)
        if (strcmp(name + k, LAYER[i].trident) == 0) {
            p->transpose = LAYER[i].transpose;
            snprintf(p->hf, sizeof p->hf, "transformer.h.%d.%s", l, LAYER[i].hf);
            return 1;
        }
    return 0;
}

static cJSON *gpt2_config(const gpt_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddStringToObject(o, "activation_function", TD_ACTS[c->act].hf);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "n_positions", c->max_pos);
    cJSON_AddNumberToObject(o, "n_ctx", c->max_pos);
    cJSON_AddNumberToObject(o, "n_embd", c->hidden);
    cJSON_AddNumberToObject(o, "n_layer", c->num_layers);
    cJSON_AddNumberToObject(o, "n_head", c->heads);
    if (c->ffn == 4 * c->hidden) cJSON_AddNullToObject(o, "n_inner");
    else cJSON_AddNumberToObject(o, "n_inner", c->ffn);
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", ckpt_float_value(gpt_norm_eps(c)));
    cJSON_AddNumberToObject(o, "initializer_range", ckpt_float_value(c->init_std));
    cJSON_AddNumberToObject(o, "embd_pdrop", ckpt_float_value(c->hidden_dropout));
    cJSON_AddNumberToObject(o, "resid_pdrop", ckpt_float_value(c->hidden_dropout));
    cJSON_AddNumberToObject(o, "attn_pdrop", ckpt_float_value(c->attn_dropout));
    cJSON_AddBoolToObject(o, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(o, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(o, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(o, "use_cache", 1);
    if (c->vocab == 50257) { /* GPT-2's BPE: <|endoftext|> */
        cJSON_AddNumberToObject(o, "bos_token_id", 50256);
        cJSON_AddNumberToObject(o, "eos_token_id", 50256);
    }
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    return o;
}

/* GPT-2's architecture exactly (what GPT2LMHeadModel computes), or a reason it is not. */
static const char *gpt2_mismatch(const gpt_config *c)
{
    if (c->norm != GPT_NORM_LAYERNORM) return "RMSNorm";
    if (c->pos != GPT_POS_LEARNED) return "no learned positions";
    if (c->glu) return td_act_label(c->act, c->glu); /* GPT2MLP is ungated */
    if (!gpt_has_bias(c)) return "no biases";
    if (c->untied) return "an untied output layer";
    if (gpt_gqa(c)) return "grouped-query attention";
    if (gpt_head_dim(c) * c->heads != c->hidden) return "a head size other than hidden / heads";
    if (gpt_moe(c)) return "a mixture of experts";
    return NULL;
}

/* The model of a GPT-2 config.json; -1 with err when it is not one trident computes exactly. */
static int gpt2_read_config(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen)
{
    int pos;
    if (hf_json_int(o, "n_embd", -1, &c->hidden) || hf_json_int(o, "n_layer", -1, &c->num_layers) ||
        hf_json_int(o, "n_head", -1, &c->heads) || hf_json_int(o, "vocab_size", -1, &c->vocab) ||
        hf_json_int(o, "n_ctx", 0, &pos) || hf_json_int(o, "n_positions", pos ? pos : -1, &c->max_pos) ||
        hf_json_int(o, "n_inner", 0, &c->ffn))
        FAIL("%s: n_embd, n_layer, n_head, n_positions and vocab_size must be positive integers (n_inner too, or "
             "null)", path);
    if (!c->ffn) c->ffn = 4 * c->hidden;
    if (c->hidden % c->heads) FAIL("%s: n_embd %d is not divisible by n_head %d", path, c->hidden, c->heads);
    if (hf_json_act(o, "activation_function", "gelu_new", path, &c->act, err, errlen)) return -1;
    c->norm_eps = (float)hf_json_num(o, "layer_norm_epsilon", 1e-5);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) FAIL("%s: layer_norm_epsilon must be in (0, 1)", path);
    if (!hf_json_bool(o, "scale_attn_weights", 1) || hf_json_bool(o, "scale_attn_by_inverse_layer_idx", 0))
        FAIL("%s: attention scaling other than 1/sqrt(head size) is not supported", path);
    c->hidden_dropout = (float)hf_json_num(o, "resid_pdrop", 0.1);
    c->attn_dropout = (float)hf_json_num(o, "attn_pdrop", 0.1);
    return 0;
}

const hf_family HF_GPT2 = {"gpt2", "GPT2LMHeadModel", GPT_KIND_DECODER, gpt2_pieces, gpt2_config, gpt2_mismatch,
                           gpt2_read_config, NULL, NULL};
