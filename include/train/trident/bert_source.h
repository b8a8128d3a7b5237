/* The trainer's BERT batches. Owns opening the BERT dataset from train's flags (its tokenizer's
 * special tokens and "##" pieces), building the micro-batches of an iteration on this
 * data-parallel rank once, counting the masked tokens of the whole global batch (one all-reduce
 * over the data-parallel group) so that every micro-batch carries the weights that make the loss
 * the mean over the global batch in every layout, and handing the micro-batches to the pipeline
 * (a pp_batch_fn). */
#ifndef TRIDENT_BERT_SOURCE_H
#define TRIDENT_BERT_SOURCE_H

#include <stdint.h>

#include "trident/args.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/gpt_dataset.h"

typedef struct bert_source bert_source;

/* Opens the one sentence-level dataset of dc (the trainer's data config from train's flags: path,
 * split, caches, samples wanted, vocabulary) with the tokenizer and BERT flags of `a`, on every
 * rank (world rank 0 first, so the others load its caches). Ends the job with one line on a bad
 * tokenizer or dataset. */
bert_source *bert_source_open(const gptds_config *dc, const td_args *a, const gpt_config *c, int mbs, int num_micro,
                              int dp, int dp_rank, comm *world);
void bert_source_close(bert_source *s);
int64_t bert_source_num_samples(const bert_source *s, gptds_split split);

/* Builds this rank's micro-batches of the iteration starting at sample `consumed` of `split` and
 * the weights (1 / masked tokens, 1 / samples of the global batch; collective over dp_group). */
void bert_source_begin(bert_source *s, gptds_split split, int64_t consumed, const comm *dp_group);
/* pp_batch_fn: micro-batch m of the iteration begun (user: the bert_source). */
void bert_source_batch(void *user, int m, int32_t *ids, int32_t *targets, gpt_bert_batch *bert, int64_t *sample);

#endif
