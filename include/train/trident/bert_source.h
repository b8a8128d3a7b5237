/* The trainer's BERT batches. Owns opening the BERT dataset from train's flags (its tokenizer's
 * special tokens and "##" pieces), building the micro-batches of an iteration on this
 * data-parallel rank once, counting the masked tokens of the whole global batch (one all-reduce
 * over the data-parallel group) so that every micro-batch carries the weights that make the loss
 * the mean over the global batch in every layout: a batch source (include/train/trident/batch_source.h). */
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
/* BERT's batch source (batch_source_ops on a bert_source: see batch_source.h): begin builds this
 * rank's micro-batches of the iteration and their weights (1 / masked tokens, 1 / samples of
 * the global batch; collective over dp_group). */
struct batch_source_ops;
extern const struct batch_source_ops bert_source_ops;

#endif
