/* The choice of a family's batch source, once at set-up: see batch_source_open in
 * include/train/trident/batch_source.h. */
#include "trident/batch_source.h"

#include <stdlib.h>

#include "train_impl.h"
#include "trident/bert_source.h"
#include "trident/check.h"
#include "trident/gpt_source.h"
#include "trident/sft_source.h"

/* The EOD id packed documents split at: the tokenizer's (every rank reads it, once a process:
 * run_tokenizer_facts; only packed runs pay for that). Ends the job with one line when there is none. */
static int32_t packing_eod(const td_args *a)
{
    char err[512];
    int eod = -1;
    if (run_tokenizer_facts(a, NULL, &eod, err, sizeof err)) td_fatal(1, "%s", err);
    if (eod < 0)
        td_fatal(2, "--reset-attention-mask, --reset-position-ids and --eod-mask-loss split documents at the "
                    "tokenizer's end-of-document token, and this tokenizer has none: leave them out");
    return eod;
}

batch_source *batch_source_open(const gptds_config *dc, const td_args *a, const gpt_config *c, int mbs, int num_micro,
                                int dp, int dp_rank, comm *world)
{
    batch_source *s = td_xcalloc(1, sizeof *s);
    s->num_micro = num_micro;
    s->micro = td_xcalloc((size_t)num_micro, sizeof *s->micro);
    if (gpt_tokentypes(c)) { /* an encoder: masked sentence pairs with token types */
        s->ops = &bert_source_ops;
        s->self = bert_source_open(dc, a, c, mbs, num_micro, dp, dp_rank, world);
    } else if (a->sft) { /* one fine-tuning sample a row, the loss over its answer */
        s->ops = &sft_source_ops;
        char err[512];
        int eod = -1;
        if (run_tokenizer_facts(a, NULL, &eod, err, sizeof err)) td_fatal(1, "%s", err);
        int32_t pad = eod >= 0 ? eod : 0;
        sft_trunc how = SFT_TRUNC_RIGHT;
        sft_parse_truncation(a->sft_truncation_method, &how);
        s->self = sft_source_open(dc, c, !a->no_answer_only_loss, how, a->reset_attention_mask, a->reset_position_ids, pad,
                                  mbs, num_micro, dp, dp_rank, comm_rank(world) == 0);
    } else {
        s->ops = &gpt_source_ops;
        gpt_packing pk = {a->reset_attention_mask, a->reset_position_ids, a->eod_mask_loss, -1};
        if (gpt_packing_on(&pk)) pk.eod = packing_eod(a);
        s->self = gpt_source_open(dc, c, &pk, mbs, num_micro, dp, dp_rank, world);
    }
    return s;
}

