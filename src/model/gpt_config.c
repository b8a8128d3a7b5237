/* The table of model settings a checkpoint stores: see GPT_CONFIG_KEYS in include/trident/gpt.h.
 * A setting added to gpt_config is added here once; meta.json, `checkpoint info` and the
 * checks of the flags against a loaded checkpoint follow. */
#include <stddef.h>

#include "trident/gpt.h"

#define INT(key, flag, kind, field, lo, hi) {key, flag, kind, 0, offsetof(gpt_config, field), lo, hi}
#define FLT(key, flag, kind, field, lo, hi) {key, flag, kind, 1, offsetof(gpt_config, field), lo, hi}

const gpt_config_key GPT_CONFIG_KEYS[] = {
    INT("num_layers", "--num-layers", GPT_KEY_ARCH, num_layers, 1, 1 << 16),
    INT("hidden_size", "--hidden-size", GPT_KEY_ARCH, hidden, 1, 1 << 20),
    INT("num_attention_heads", "--num-attention-heads", GPT_KEY_ARCH, heads, 1, 1 << 16),
    INT("ffn_hidden_size", "--ffn-hidden-size", GPT_KEY_ARCH, ffn, 1, 1 << 24),
    INT("max_position_embeddings", "--max-position-embeddings", GPT_KEY_ARCH, max_pos, 1, 1 << 24),
    INT("vocab_size", "--vocab-file", GPT_KEY_VOCAB, vocab, 1, 1 << 30),
    INT("padded_vocab_size", "--make-vocab-size-divisible-by", GPT_KEY_PADDING, padded_vocab, 1, 1 << 30),
    INT("seq_length", "--seq-length", GPT_KEY_RUN, seq, 1, 1 << 24),
    FLT("init_method_std", "--init-method-std", GPT_KEY_RECORD, init_std, 0, 10),
    FLT("hidden_dropout", "--hidden-dropout", GPT_KEY_RECORD, hidden_dropout, 0, 1),
    FLT("attention_dropout", "--attention-dropout", GPT_KEY_RECORD, attn_dropout, 0, 1),
};
const int GPT_NCONFIG_KEYS = (int)(sizeof GPT_CONFIG_KEYS / sizeof GPT_CONFIG_KEYS[0]);

double gpt_config_get(const gpt_config *c, const gpt_config_key *k)
{
    const char *p = (const char *)c + k->offset;
    return k->is_float ? (double)*(const float *)p : (double)*(const int *)p;
}

void gpt_config_set(gpt_config *c, const gpt_config_key *k, double v)
{
    char *p = (char *)c + k->offset;
    if (k->is_float) *(float *)p = (float)v;
    else *(int *)p = (int)v;
}
