/* GPT's batch source (batch_source_ops, include/train/trident/batch_source.h): this data-parallel
 * rank's micro-batches of an iteration read as windows of seq + 1 tokens of the GPT dataset. */
#ifndef TRIDENT_GPT_SOURCE_H
#define TRIDENT_GPT_SOURCE_H

#include "trident/batch_source.h"

extern const batch_source_ops gpt_source_ops;

/* Packed documents, Megatron's flags (get_ltor_masks_and_position_ids): each 0 or 1. */
typedef struct gpt_packing {
    int reset_attention_mask; /* attention stays inside each document */
    int reset_position_ids;   /* positions restart at 0 after each EOD */
    int eod_mask_loss;        /* no loss where the input token is EOD */
    int32_t eod;              /* the tokenizer's EOD id */
} gpt_packing;
static inline int gpt_packing_on(const gpt_packing *p)
{
    return p && (p->reset_attention_mask || p->reset_position_ids || p->eod_mask_loss);
}

/* One sample's packing from its input ids (S of them): seg[t] = the first position of t's
 * document (1 + the last EOD before t, 0 if none; an EOD belongs to the document it ends),
 * pos[t] = t - seg[t], mask[t] = 0 where ids[t] is EOD, else 1. Returns the counted tokens
 * (the ones of mask). Any of seg, pos, mask may be NULL. */
int gpt_packing_row(const int32_t *ids, int S, int32_t eod, int32_t *seg, int32_t *pos, float *mask);

/* Opens the GPT dataset of dc on every rank (world rank 0 first, so the others load its caches)
 * with the buffers of num_micro micro-batches of mbs samples of c->seq tokens; pk (NULL: none)
 * the packed documents' flags: each micro-batch then carries its document starts, positions and
 * loss mask, and the token weight that makes the loss the mean over the counted tokens of the
 * global batch (one all-reduce over the data-parallel group an iteration). */
void *gpt_source_open(const gptds_config *dc, const gpt_config *c, const gpt_packing *pk, int mbs, int num_micro,
                      int dp, int dp_rank, comm *world);

#endif
