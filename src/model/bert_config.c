/* Megatron-BERT's part of the model config: what --model bert sets beyond the encoder kind (the
 * binary head), and BERT's names for the settings only it has (meta.json's key, the flag, the
 * name `describe` prints). The flag rules of --model bert are td_args_check_model's (args.c). */
#include <string.h>

#include "trident/args.h"
#include "trident/gpt.h"

const char GPT_BINARY_HEAD_KEY[] = "bert_binary_head";
const char GPT_BINARY_HEAD_FLAG[] = "--bert-binary-head";
const char GPT_ENCODER_NAME[] = "BERT";

void gpt_encoder_from_args(gpt_config *c, const td_args *a)
{
    c->binary_head = a->bert_binary_head && !a->bert_no_binary_head;
}
