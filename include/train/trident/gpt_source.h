/* GPT's batch source (batch_source_ops, include/train/trident/batch_source.h): this data-parallel
 * rank's micro-batches of an iteration read as windows of seq + 1 tokens of the GPT dataset. */
#ifndef TRIDENT_GPT_SOURCE_H
#define TRIDENT_GPT_SOURCE_H

#include "trident/batch_source.h"

extern const batch_source_ops gpt_source_ops;
/* Opens the GPT dataset of dc on every rank (world rank 0 first, so the others load its caches)
 * with the buffers of num_micro micro-batches of mbs samples of c->seq tokens. */
void *gpt_source_open(const gptds_config *dc, const gpt_config *c, int mbs, int num_micro, int dp, int dp_rank,
                      comm *world);

#endif
