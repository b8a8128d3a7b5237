/* The model flags against a loaded checkpoint: see ckpt_args_reconcile in
 * include/ckpt/trident/checkpoint.h. Driven by GPT_CONFIG_KEYS, so a setting added there is checked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt_fs.h"
#include "trident/check.h"
#include "trident/checkpoint.h"
#include "trident/dataset_reader.h"

gpt_config ckpt_config_of_args(const td_args *a, int vocab, int tp)
{
    gpt_config c;
    gpt_config_from_args(&c, a);
    c.vocab = vocab;
    c.padded_vocab = vocab > 0 ? gpt_padded_vocab(vocab, a->make_vocab_size_divisible_by, tp) : 0;
    return c;
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

/* --moe-layer-freq against the checkpoint's MoE layers (meta.json's moe_layer_freq, a list): once
 * the flags hold the checkpoint's other settings (its layers and experts), the flag's layers must
 * be its when given, else they are taken from it. */
static int moe_layers_reconcile(td_args *a, const gpt_config *ck, int vocab, int tp, const char *mpath, char *taken,
                                size_t takenlen, char *msg, size_t msglen)
{
    if (!gpt_moe(ck)) return 0;
    gpt_config run = ckpt_config_of_args(a, vocab, tp);
    char why[256];
    int parsed = !a->moe_layer_freq || gpt_moe_layer_freq_parse(&run, a->moe_layer_freq, ck->num_layers, why, sizeof why) == 0;
    if (parsed && gpt_moe_layers_equal(&run, ck)) return 0;
    char *list = td_xmalloc(8 * GPT_MOE_LIST_MAX_LAYERS + 8);
    gpt_moe_layer_freq_str(ck, list, 8 * GPT_MOE_LIST_MAX_LAYERS + 8);
    if (td_args_given(a, "--moe-layer-freq") && !a->use_checkpoint_args) {
        if (parsed) snprintf(msg, msglen, "--moe-layer-freq %s differs from the checkpoint's moe_layer_freq %s (%s): give "
                             "--moe-layer-freq \"%s\", leave the flag out, or add --use-checkpoint-args",
                             a->moe_layer_freq, list, mpath, list);
        else snprintf(msg, msglen, "%s", why);
        free(list);
        return parsed ? -1 : 0; /* a flag that does not parse is gpt_config_validate's to report */
    }
    td_args_set_string(a, "--moe-layer-freq", list);
    char item[200];
    snprintf(item, sizeof item, "moe_layer_freq %.160s", list);
    append(taken, takenlen, item);
    free(list);
    return 0;
}

/* The first of the '|'-separated flags in also that was given, copied into f; 0 when none was. */
static int also_given(const td_args *a, const char *also, char *f, size_t len)
{
    for (const char *p = also; p && *p;) {
        size_t n = strcspn(p, "|");
        snprintf(f, len, "%.*s", (int)n, p);
        if (td_args_given(a, f)) return 1;
        p += n + (p[n] == '|');
    }
    return 0;
}

int ckpt_args_reconcile(td_args *a, const ckpt_meta *m, int vocab, int tp, int log, char *msg, size_t msglen)
{
    gpt_config run = ckpt_config_of_args(a, vocab, tp), ckn = m->model, *ck = &ckn;
    gpt_config run_said = run, ck_said = ckn; /* in messages: the defaults as what they mean (128, not 0) */
    gpt_config_resolve(&run_said);
    gpt_config_resolve(&ck_said);
    gpt_config_normalize(&run);
    gpt_config_normalize(&ckn);
    const int use = a->use_checkpoint_args;
    char mpath[4200], taken[2048] = "", arch[1024] = "";
    ckf_join(mpath, sizeof mpath, m->dir, "meta.json");
    for (int i = 0; i < GPT_NCONFIG_KEYS; i++) {
        const gpt_config_key *k = &GPT_CONFIG_KEYS[i];
        /* --finetune --lora-rank R from a checkpoint without adapters: LoRA on that base, the
         * adapters new (ckpt_load leaves them initialised) */
        if (strncmp(k->key, "lora_", 5) == 0 && a->lora_rank > 0 && ck->lora_rank == 0) {
            if (a->finetune) continue;
            FAIL("--lora-rank %d: the checkpoint %s has no LoRA adapters: add --finetune to train new adapters on its "
                 "weights", a->lora_rank, mpath);
        }
        double cv = gpt_config_get(ck, k), rv = gpt_config_get(&run, k);
        char alias[64]; /* a switch that sets the key too (--swiglu: activation_func silu) */
        int given = td_args_given(a, k->flag) || also_given(a, k->also, alias, sizeof alias);
        const char *flag = td_args_given(a, k->flag) || !given ? k->flag : alias;
        char cs[32], rs[32], item[160];
        gpt_config_value_str(&ck_said, k, cs, sizeof cs);
        gpt_config_value_str(&run_said, k, rs, sizeof rs);
        if (k->kind == GPT_KEY_ARCH) {
            snprintf(item, sizeof item, "%s %s", k->key, cs);
            append(arch, sizeof arch, item);
        }
        switch (k->kind) {
        case GPT_KEY_VOCAB:
            if (vocab > 0 && rv != cv)
                FAIL("%s %s has %s tokens but the checkpoint's vocab_size is %s (%s): use the tokenizer it "
                     "was trained with", a->tokenizer_model ? "--tokenizer-model" : "--vocab-file",
                     a->tokenizer_model ? a->tokenizer_model : a->vocab_file, rs, cs, mpath);
            break;
        case GPT_KEY_ARCH:
        case GPT_KEY_RUN:
            if (given && !use) {
                /* a flag is held to the value it means (--moe-ffn-hidden-size 96 is the experts' size of a
                 * checkpoint whose moe_ffn is its ffn_hidden_size 96), as the message prints them */
                if (gpt_config_get(&run_said, k) != gpt_config_get(&ck_said, k) && k->kind == GPT_KEY_ARCH) {
                    char said[128];
                    if (flag == k->flag) snprintf(said, sizeof said, "%s %s", flag, rs);
                    else snprintf(said, sizeof said, "%s (%s %s)", flag, k->key, rs);
                    FAIL("%s differs from the checkpoint's %s %s (%s): give %s %s, leave the flag out, or add "
                         "--use-checkpoint-args", said, k->key, cs, mpath, k->flag, cs);
                }
                break;
            }
            /* 0 of a setting whose 0 means the default: the flag's default, and its switch off */
            if (k->zero_default && cv == 0) {
                if (k->enable) td_args_set_number(a, k->enable, 0);
            } else if (td_args_set_number(a, k->flag, cv) || (k->enable && td_args_set_number(a, k->enable, 1))) {
                FAIL("the checkpoint's %s %s (%s) is outside the range %s takes: the checkpoint is corrupt", k->key,
                     cs, mpath, k->flag);
            }
            /* the switches that set it too give way (--use-checkpoint-args over --swiglu) */
            for (const char *p = k->also; p && *p;) {
                size_t n = strcspn(p, "|");
                char f[64];
                snprintf(f, sizeof f, "%.*s", (int)n, p);
                td_args_set_number(a, f, 0);
                p += n + (p[n] == '|');
            }
            if (rv != cv) {
                if (given) snprintf(item, sizeof item, "%s %s (not %s %s)", k->key, cs, flag, rs);
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
    if (moe_layers_reconcile(a, ck, vocab, tp, mpath, taken, sizeof taken, msg, msglen)) return -1;
    if (log && use) TD_INFO("architecture from the checkpoint's meta.json (--use-checkpoint-args): %s (%s)", arch, mpath);
    if (log && taken[0]) TD_INFO("from the checkpoint's meta.json (%s): %s", mpath, taken);
    return 0;
}

/* Appends ", " (unless first) and fmt with v to buf. */
static void note_append(char *buf, size_t len, const char *fmt, const char *v)
{
    size_t n = strlen(buf);
    if (n + 2 < len) snprintf(buf + n, len - n, "%s", n ? ", " : "");
    n = strlen(buf);
    if (n + 1 < len) snprintf(buf + n, len - n, fmt, v);
}

int ckpt_args_eval_data(td_args *a, const ckpt_meta *m, char *taken, size_t takenlen, char *err, size_t errlen)
{
    cJSON *args = cJSON_Parse(m->args_json ? m->args_json : "{}");
    const cJSON *split = cJSON_GetObjectItemCaseSensitive(args, "split");
    const cJSON *path = cJSON_GetObjectItemCaseSensitive(args, "data_path");
    int rc = 0;
    taken[0] = 0;
    if (!td_args_given(a, "--data-path")) {
        int n = cJSON_IsArray(path) ? cJSON_GetArraySize(path) : 0;
        const cJSON *p0 = n == 1 ? cJSON_GetArrayItem(path, 0) : NULL;
        char file[4200];
        int why = cJSON_IsString(p0) ? dsr_probe(p0->valuestring, file, sizeof file) : 0;
        if (why) {
            snprintf(err, errlen, "--data-path PREFIX is needed: %.1000s/meta.json records the training run's %.1000s, "
                     "but %.1000s cannot be read here (%s; a path relative to where the training ran?)", m->dir,
                     p0->valuestring, file, td_strerror(why));
            rc = -1;
        } else if (cJSON_IsString(p0)) {
            for (int i = 0; i < a->data_path.n; i++) free(a->data_path.v[i]);
            a->data_path.v = td_xrealloc(a->data_path.v, sizeof *a->data_path.v);
            a->data_path.v[0] = td_xstrdup(p0->valuestring);
            a->data_path.n = 1;
            note_append(taken, takenlen, "--data-path %s", p0->valuestring);
        } else {
            snprintf(err, errlen, "--data-path PREFIX is needed: %s/meta.json records %s", m->dir,
                     n > 1 ? "a blend (eval scores one dataset prefix: give one of them)"
                           : "no data path of its own (a converted checkpoint, or written before)");
            rc = -1;
        }
    }
    if (rc == 0 && !td_args_given(a, "--split") && strcmp(a->split_name, "all") != 0 && cJSON_IsString(split)) {
        free(a->split);
        a->split = td_xstrdup(split->valuestring);
        note_append(taken, takenlen, "--split %s", split->valuestring);
    }
    const cJSON *how = cJSON_GetObjectItemCaseSensitive(args, "sft_truncation_method");
    if (rc == 0 && a->sft && !td_args_given(a, "--sft-truncation-method") && cJSON_IsString(how) &&
        (strcmp(how->valuestring, "left") == 0 || strcmp(how->valuestring, "right") == 0)) {
        free(a->sft_truncation_method);
        a->sft_truncation_method = td_xstrdup(how->valuestring);
        note_append(taken, takenlen, "--sft-truncation-method %s", how->valuestring);
    }
    if (rc == 0 && !td_args_given(a, "--seq-length")) {
        char s[32];
        snprintf(s, sizeof s, "%d", a->seq_length);
        note_append(taken, takenlen, "--seq-length %s", s);
    }
    cJSON_Delete(args);
    return rc;
}
