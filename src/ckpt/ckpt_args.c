/* The model flags against a loaded checkpoint: see ckpt_args_reconcile in
 * include/trident/checkpoint.h. Driven by GPT_CONFIG_KEYS, so a setting added there is checked. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_fs.h"
#include "trident/check.h"
#include "trident/checkpoint.h"

gpt_config ckpt_config_of_args(const td_args *a, int vocab, int tp)
{
    gpt_config c = {0};
    c.num_layers = a->num_layers;
    c.hidden = a->hidden_size;
    c.heads = a->num_attention_heads;
    c.ffn = a->ffn_hidden_size ? a->ffn_hidden_size : 4 * a->hidden_size;
    c.seq = a->seq_length;
    c.max_pos = a->max_position_embeddings ? a->max_position_embeddings : a->seq_length;
    c.vocab = vocab;
    c.padded_vocab = vocab > 0 ? gpt_padded_vocab(vocab, a->make_vocab_size_divisible_by, tp) : 0;
    c.init_std = (float)a->init_method_std;
    c.hidden_dropout = (float)a->hidden_dropout;
    c.attn_dropout = (float)a->attention_dropout;
    c.seed = (uint64_t)a->seed;
    return c;
}

static void value_str(char *out, size_t len, const gpt_config_key *k, double v)
{
    if (k->is_float) snprintf(out, len, "%g", v);
    else snprintf(out, len, "%.0f", v);
}

static void append(char *buf, size_t len, const char *s)
{
    size_t n = strlen(buf);
    if (n + 1 < len) snprintf(buf + n, len - n, "%s%s", n ? ", " : "", s);
}

#define FAIL(...)                                                                        \
    do {                                                                                 \
        snprintf(msg, msglen, __VA_ARGS__);                                              \
        return -1;                                                                       \
    } while (0)

int ckpt_args_reconcile(td_args *a, const ckpt_meta *m, int vocab, int tp, int log, char *msg, size_t msglen)
{
    const gpt_config run = ckpt_config_of_args(a, vocab, tp), *ck = &m->model;
    const int use = a->use_checkpoint_args;
    char mpath[4200], taken[2048] = "", arch[1024] = "";
    ckf_join(mpath, sizeof mpath, m->dir, "meta.json");
    for (int i = 0; i < GPT_NCONFIG_KEYS; i++) {
        const gpt_config_key *k = &GPT_CONFIG_KEYS[i];
        double cv = gpt_config_get(ck, k), rv = gpt_config_get(&run, k);
        int given = td_args_given(a, k->flag);
        char cs[32], rs[32], item[160];
        value_str(cs, sizeof cs, k, cv);
        value_str(rs, sizeof rs, k, rv);
        if (k->kind == GPT_KEY_ARCH) {
            snprintf(item, sizeof item, "%s %s", k->key, cs);
            append(arch, sizeof arch, item);
        }
        switch (k->kind) {
        case GPT_KEY_VOCAB:
            if (vocab > 0 && rv != cv)
                FAIL("--vocab-file %s has %s tokens but the checkpoint's vocab_size is %s (%s): use the tokenizer it "
                     "was trained with", a->vocab_file, rs, cs, mpath);
            break;
        case GPT_KEY_ARCH:
        case GPT_KEY_RUN:
            if (given && !use) {
                if (rv != cv && k->kind == GPT_KEY_ARCH)
                    FAIL("%s %s differs from the checkpoint's %s %s (%s): give %s %s, leave the flag out, or add "
                         "--use-checkpoint-args", k->flag, rs, k->key, cs, mpath, k->flag, cs);
                break;
            }
            if (td_args_set_number(a, k->flag, cv))
                FAIL("the checkpoint's %s %s (%s) is outside the range %s takes: the checkpoint is corrupt", k->key,
                     cs, mpath, k->flag);
            if (rv != cv) {
                if (given) snprintf(item, sizeof item, "%s %s (not %s %s)", k->key, cs, k->flag, rs);
                else snprintf(item, sizeof item, "%s %s", k->key, cs);
                append(taken, sizeof taken, item);
            }
            break;
        case GPT_KEY_PADDING:
            if ((!given || use) && vocab > 0 && (int)cv % tp == 0 && (int)cv >= vocab &&
                td_args_set_number(a, k->flag, cv / tp) == 0) {
                if (rv != cv) {
                    snprintf(item, sizeof item, "%s %s (--make-vocab-size-divisible-by %.0f)", k->key, cs, cv / tp);
                    append(taken, sizeof taken, item);
                }
            } else if (vocab > 0 && rv != cv && log) {
                TD_INFO("note: the padded vocabulary is %s in this run but %s in the checkpoint (%s): padded rows are "
                        "%s, and they take part in the softmax, so the run does not continue exactly; give "
                        "--make-vocab-size-divisible-by %.0f to keep it", rs, cs, mpath,
                        rv > cv ? "added as copies of its last row" : "dropped", (int)cv % tp ? 0.0 : cv / tp);
            }
            break;
        default:
            break;
        }
    }
    if (log && use) TD_INFO("architecture from the checkpoint's meta.json (--use-checkpoint-args): %s (%s)", arch, mpath);
    if (log && taken[0]) TD_INFO("from the checkpoint's meta.json (%s): %s", mpath, taken);
    return 0;
}
