/* SFT's batch source (train --sft): one sample of PREFIX_sft_document per sequence, its first
 * seq + 1 tokens (a longer sample is cut at the right, as Megatron-Bridge's chat collate cuts
 * input_ids and loss_mask to max_seq_length; such samples are counted and reported), padded after
 * its end; the loss over the targets that are the answer's (the _answer_mask sidecar), or every
 * target of the sample with answer_only 0, as the mean over the global batch's counted targets.
 * Samples of a split are its documents in an order shuffled per epoch by the seed, the same on
 * every rank and layout. Packed (pack_seg: --reset-attention-mask, pack_pos:
 * --reset-position-ids): a row holds the samples of a seeded order taken in turn while they fit
 * seq + 1 tokens (each cut to seq + 1), attention and positions restarting at each, no target
 * counted across two samples; the rows ("samples" to the trainer) are shuffled per epoch. */
#ifndef TRIDENT_SFT_SOURCE_H
#define TRIDENT_SFT_SOURCE_H

#include <stdint.h>

#include "trident/batch_source.h"
#include "trident/gpt.h"
#include "trident/gpt_dataset.h"
#include "trident/sft.h"

extern const batch_source_ops sft_source_ops;

/* Opens dc->paths[0] (exactly one dataset, no blend) and its mask sidecar, split by dc->split.
 * pad: the id padding and past-the-end targets carry (never counted); how: the truncation of a
 * sample longer than seq + 1 (sft_truncate). Ends the job with one line
 * on a missing or mismatched sidecar, a blend, or an empty training split. */
void *sft_source_open(const gptds_config *dc, const gpt_config *c, int answer_only, sft_trunc how, int pack_seg,
                      int pack_pos, int32_t pad, int mbs, int num_micro, int dp, int dp_rank, int log);

#endif
