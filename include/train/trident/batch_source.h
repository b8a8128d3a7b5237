/* Batch sources. Owns where an iteration's micro-batches come from: a model family's source,
 * chosen once at set-up, fills this data-parallel rank's num_micro micro-batches (gpt_batch,
 * include/model/trident/gpt.h) before the schedule runs, so a micro-batch's route from the schedule
 * down to the kernels never calls back up for its data. GPT's source reads token windows of the
 * GPT dataset (ids and next-token targets); the encoder's builds masked sentence pairs with
 * token types, lengths, sentence-order labels and the loss weights of the global batch. */
#ifndef TRIDENT_BATCH_SOURCE_H
#define TRIDENT_BATCH_SOURCE_H

#include <stdint.h>

#include "trident/args.h"
#include "trident/comm.h"
#include "trident/gpt.h"
#include "trident/gpt_dataset.h"

typedef struct batch_source batch_source;

/* What a family's source implements. */
typedef struct batch_source_ops {
    const char *name;
    /* Builds this rank's micro-batches of the iteration starting at sample `consumed` of `split`
     * into micro[0, num_micro) (buffers the source owns, valid until the next begin); may be
     * collective over dp_group. */
    void (*begin)(void *self, gptds_split split, int64_t consumed, const comm *dp_group, gpt_batch *micro);
    int64_t (*num_samples)(const void *self, gptds_split split);
    void (*close)(void *self);
    /* Optional (NULL: none): the metrics of the last training iteration begun, global over the
     * data-parallel ranks, into out[0, max); returns how many. */
    int (*metrics)(const void *self, gpt_metric *out, int max);
} batch_source_ops;

struct batch_source {
    const batch_source_ops *ops;
    void *self;
    int num_micro;
    gpt_batch *micro; /* num_micro: the iteration begun */
};

/* The source of the config's family over the datasets of dc (the trainer's data config from
 * train's flags), for micro-batches of mbs samples, num_micro an iteration, on data-parallel
 * rank dp_rank of dp. Every rank opens it (world rank 0 first, so the others load its caches).
 * Ends the job with one line on a bad tokenizer or dataset. */
batch_source *batch_source_open(const gptds_config *dc, const td_args *a, const gpt_config *c, int mbs, int num_micro,
                                int dp, int dp_rank, comm *world);
/* Builds the iteration's micro-batches into s->micro (collective over dp_group). */
void batch_source_begin(batch_source *s, gptds_split split, int64_t consumed, const comm *dp_group);
int64_t batch_source_num_samples(const batch_source *s, gptds_split split);
void batch_source_close(batch_source *s);
/* The source's metrics of the last training iteration (ops->metrics; 0 when it has none). */
int batch_source_metrics(const batch_source *s, gpt_metric *out, int max);

/* The global sample index of row j of micro-batch m of the iteration at `consumed` on dp_rank:
 * the data-parallel ranks take consecutive blocks of mbs rows. */
static inline int64_t batch_sample_index(int64_t consumed, int m, int j, int mbs, int dp, int dp_rank)
{
    return consumed + (int64_t)m * mbs * dp + (int64_t)dp_rank * mbs + j;
}

#endif
