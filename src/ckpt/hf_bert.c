/* Hugging Face Megatron-BERT (MegatronBertForPreTraining; MegatronBertForMaskedLM without the
 * sentence-order head) interchange: the family table of hf_impl.h. Megatron-BERT's layer order
 * is trident's (a norm before attention and before the MLP, one after the last layer), so every
 * tensor maps to one or three (q, k, v) of transformers' MegatronBert, (out, in) on both sides.
 *
 * trident                            transformers MegatronBertForPreTraining
 * embedding.word.weight (Vp, h)      bert.embeddings.word_embeddings.weight (V, h)   padded rows dropped
 * embedding.position.weight          bert.embeddings.position_embeddings.weight
 * embedding.tokentype.weight (2, h)  bert.embeddings.token_type_embeddings.weight
 * layers.N.ln1                       bert.encoder.layer.N.attention.ln
 * layers.N.attn.qkv (3h, h), [q|k|v] bert.encoder.layer.N.attention.self.{query,key,value}
 * layers.N.attn.proj                 bert.encoder.layer.N.attention.output.dense
 * layers.N.ln2                       bert.encoder.layer.N.ln
 * layers.N.mlp.fc                    bert.encoder.layer.N.intermediate.dense
 * layers.N.mlp.fc2                   bert.encoder.layer.N.output.dense
 * final_norm                         bert.encoder.ln
 * pooler.dense                       bert.pooler.dense
 * lm_head.dense, lm_head.norm        cls.predictions.transform.dense, .LayerNorm
 * lm_head.bias (Vp)                  cls.predictions.bias (V)   (decoder.weight and .bias are tied)
 * binary_head                        cls.seq_relationship
 * hidden_act is the model's activation (td_act's Hugging Face name): "gelu_new" for trident's
 * default tanh GeLU, "gelu" for the exact erf GeLU Megatron's BERT uses (--activation-func
 * gelu_erf); it applies to the MLP and to the masked-LM transform alike. */
#include <stdio.h>
#include <string.h>

#include "ckpt_impl.h"
#include "hf_impl.h"

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(err, errlen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

static int piece(hf_piece *p, int64_t row0, int64_t rows, const char *name, int layer, const char *suffix)
{
    memset(p, 0, sizeof *p);
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%s.%s", name, suffix);
    snprintf(p->hf, sizeof p->hf, fmt, layer);
    p->row0 = row0;
    p->rows = rows;
    return 1;
}

/* trident's name without its last part (".weight", ".bias") -> transformers' module. */
static const char *const FIXED[][2] = {
    {"embedding.word", "bert.embeddings.word_embeddings"},
    {"embedding.position", "bert.embeddings.position_embeddings"},
    {"embedding.tokentype", "bert.embeddings.token_type_embeddings"},
    {"final_norm", "bert.encoder.ln"},
    {"pooler.dense", "bert.pooler.dense"},
    {"lm_head.dense", "cls.predictions.transform.dense"},
    {"lm_head.norm", "cls.predictions.transform.LayerNorm"},
    {"binary_head", "cls.seq_relationship"},
};
static const char *const LAYER[][2] = {
    {"ln1", "bert.encoder.layer.%d.attention.ln"},
    {"attn.proj", "bert.encoder.layer.%d.attention.output.dense"},
    {"ln2", "bert.encoder.layer.%d.ln"},
    {"mlp.fc", "bert.encoder.layer.%d.intermediate.dense"},
    {"mlp.fc2", "bert.encoder.layer.%d.output.dense"},
};

static int bert_pieces(const gpt_config *c, const char *name, hf_piece *out)
{
    if (strcmp(name, "lm_head.bias") == 0) return piece(out, 0, -1, "cls.predictions", 0, "bias");
    const char *dot = strrchr(name, '.');
    if (!dot) return 0;
    char mod[96];
    snprintf(mod, sizeof mod, "%.*s", (int)(dot - name), name);
    const char *suffix = dot + 1;
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++)
        if (strcmp(mod, FIXED[i][0]) == 0) return piece(out, 0, -1, FIXED[i][1], 0, suffix);
    int l, k = 0;
    if (sscanf(mod, "layers.%d.%n", &l, &k) != 1 || k == 0) return 0;
    const char *t = mod + k;
    for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++)
        if (strcmp(t, LAYER[i][0]) == 0) return piece(out, 0, -1, LAYER[i][1], l, suffix);
    if (strcmp(t, "attn.qkv") != 0) return 0;
    int64_t h = c->hidden;
    piece(&out[0], 0, h, "bert.encoder.layer.%d.attention.self.query", l, suffix);
    piece(&out[1], h, h, "bert.encoder.layer.%d.attention.self.key", l, suffix);
    return 2 + piece(&out[2], 2 * h, h, "bert.encoder.layer.%d.attention.self.value", l, suffix);
}

static cJSON *bert_config(const gpt_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(c->binary_head ? "MegatronBertForPreTraining"
                                                                 : "MegatronBertForMaskedLM"));
    cJSON_AddStringToObject(o, "model_type", "megatron-bert");
    cJSON_AddStringToObject(o, "hidden_act", TD_ACTS[c->act].hf);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab);
    cJSON_AddNumberToObject(o, "hidden_size", c->hidden);
    cJSON_AddNumberToObject(o, "intermediate_size", c->ffn);
    cJSON_AddNumberToObject(o, "num_hidden_layers", c->num_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", c->heads);
    cJSON_AddNumberToObject(o, "max_position_embeddings", c->max_pos);
    cJSON_AddNumberToObject(o, "type_vocab_size", GPT_ENCODER_TOKENTYPES);
    cJSON_AddNumberToObject(o, "layer_norm_eps", ckpt_float_value(gpt_norm_eps(c)));
    cJSON_AddNumberToObject(o, "hidden_dropout_prob", ckpt_float_value(c->hidden_dropout));
    cJSON_AddNumberToObject(o, "attention_probs_dropout_prob", ckpt_float_value(c->attn_dropout));
    cJSON_AddNumberToObject(o, "initializer_range", ckpt_float_value(c->init_std));
    cJSON_AddStringToObject(o, "position_embedding_type", "absolute");
    cJSON_AddNumberToObject(o, "pad_token_id", 0);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    return o;
}

static const char *bert_mismatch(const gpt_config *c)
{
    if (gpt_head_dim(c) * c->heads != c->hidden) return "a head size other than hidden / heads";
    if (gpt_moe(c)) return "a mixture of experts";
    if (c->glu) return td_act_label(c->act, c->glu); /* MegatronBertIntermediate is ungated */
    return NULL;
}

static int bert_read_config(const cJSON *o, const char *path, gpt_config *c, char *err, size_t errlen)
{
    if (hf_json_int(o, "hidden_size", -1, &c->hidden) || hf_json_int(o, "num_hidden_layers", -1, &c->num_layers) ||
        hf_json_int(o, "num_attention_heads", -1, &c->heads) || hf_json_int(o, "vocab_size", -1, &c->vocab) ||
        hf_json_int(o, "intermediate_size", -1, &c->ffn) ||
        hf_json_int(o, "max_position_embeddings", -1, &c->max_pos))
        FAIL("%s: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, max_position_embeddings "
             "and vocab_size must be positive integers", path);
    if (c->hidden % c->heads)
        FAIL("%s: hidden_size %d is not divisible by num_attention_heads %d", path, c->hidden, c->heads);
    if (hf_json_act(o, "hidden_act", "gelu", path, &c->act, err, errlen)) return -1;
    if (hf_json_num(o, "type_vocab_size", 2) != GPT_ENCODER_TOKENTYPES) FAIL("%s: type_vocab_size must be 2", path);
    const cJSON *pe = cJSON_GetObjectItemCaseSensitive(o, "position_embedding_type");
    if (cJSON_IsString(pe) && strcmp(pe->valuestring, "absolute") != 0)
        FAIL("%s: position_embedding_type '%s'; trident's BERT has absolute positions", path, pe->valuestring);
    c->norm_eps = (float)hf_json_num(o, "layer_norm_eps", 1e-12);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) FAIL("%s: layer_norm_eps must be in (0, 1)", path);
    c->kind = GPT_KIND_ENCODER;
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "architectures"), 0);
    c->binary_head = !(cJSON_IsString(arch) && strcmp(arch->valuestring, "MegatronBertForMaskedLM") == 0);
    c->hidden_dropout = (float)hf_json_num(o, "hidden_dropout_prob", 0.1);
    c->attn_dropout = (float)hf_json_num(o, "attention_probs_dropout_prob", 0.1);
    return 0;
}

/* Buffers and tied copies of MegatronBertForPreTraining that carry no parameters of their own. */
static int bert_ignorable(const char *name)
{
    return strcmp(name, "bert.embeddings.position_ids") == 0 || strncmp(name, "cls.predictions.decoder.", 24) == 0;
}

const hf_family HF_BERT = {"megatron-bert", "MegatronBertForPreTraining", GPT_KIND_ENCODER, bert_pieces, bert_config,
                           bert_mismatch, bert_read_config, NULL, bert_ignorable};
