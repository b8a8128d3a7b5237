/* Data parallelism. Owns every collective over the data-parallel group for a model chunk's
 * buffers, attached to the chunk once: the gradient buffer cut into buckets (--ddp-bucket-size
 * elements) in its own order (reverse backprop); per bucket an all-reduce (plain optimizer) or
 * a reduce-scatter into this rank's shard (--use-distributed-optimizer), started as soon as
 * the bucket's gradients are final during the backward of the iteration's last micro-batch
 * (--overlap-grad-reduce) or else at the finish; the finish also sums the tied word
 * embedding's two copies over the embedding group (Megatron's finalize_model_grads). With the
 * distributed optimizer, the all-gather of the updated parameters, per bucket, waited for
 * before the forward first reads them (--overlap-param-gather) or at once.
 *
 * Sharding: each bucket is split over the dp ranks (rank r owns piece r of every bucket, the
 * pieces differing by at most one element, no padding), so a bucket's reduce-scatter can start
 * the moment the bucket closes. A rank's shard is its pieces in bucket order.
 *
 * Expert parallelism (ps->ep > 1): the experts' tensors differ between the ranks of an
 * expert-parallel group, so each run of them is bucketed apart and reduced (and sharded, and
 * gathered) over the expert-data-parallel group only, as Megatron's expert buffers are. */
#ifndef TRIDENT_DATA_PARALLEL_H
#define TRIDENT_DATA_PARALLEL_H

#include <stddef.h>

#include "trident/gpt.h"
#include "trident/parallel_state.h"

typedef struct dp_chunk dp_chunk;

typedef struct {
    size_t bucket_elems;      /* --ddp-bucket-size; 0: one bucket */
    int overlap_grad_reduce;  /* start buckets during the last micro-batch's backward */
    int distributed;          /* --use-distributed-optimizer: reduce-scatter, shard, all-gather */
    int overlap_param_gather; /* wait for each bucket's gather only before the forward reads it */
} dp_config;

/* One range of a rank's shard: chunk buffer elements [lo, lo + n), at `shard` in its shard. */
typedef struct {
    size_t lo, n, shard;
} dp_range;

/* Bucket b of a run of numel elements cut into buckets of `bucket` (0: one): [*lo, *hi). */
int dp_bucket_count(size_t numel, size_t bucket);
void dp_bucket_bounds(size_t numel, size_t bucket, int b, size_t *lo, size_t *hi);
/* Rank r's piece of n elements split over dp ranks: [*start, *start + *count) (the first
 * n % dp ranks one element more). */
void dp_piece(size_t n, int dp, int r, size_t *start, size_t *count);

/* Attaches data parallelism to chunk m (installs m's gradient and parameter hooks as the
 * config asks). Allocates the shard gradient buffer when distributed. */
dp_chunk *dp_attach(gpt_model *m, const ps_state *ps, const dp_config *cfg);
void dp_detach(dp_chunk *d);
/* The ranges of the buffers this rank steps: with the distributed optimizer its pieces of
 * every bucket, else the whole buffer (one range). *grads: where their reduced gradients are
 * (the shard buffer, or m->grads). */
const dp_range *dp_shard(const dp_chunk *d, int *nranges, const float **grads);
/* After the iteration's backwards: the gradients of this rank's shard (dp_shard) hold the sum
 * over the data-parallel group and, for a tied embedding split over stages, over both copies.
 * Collective over dp and the embedding group; every chunk of the rank at once. */
void dp_finish_grads(dp_chunk *const *d, int n);
/* Distributed optimizer, after the step: starts the all-gather of every bucket's updated
 * parameters; waits for them unless --overlap-param-gather. No-op otherwise. */
void dp_start_param_gather(dp_chunk *d);
/* Completes every all-gather in flight: the parameters are whole (before anything reads them
 * outside a forward: evaluation, saving, dumping, the end of the run). */
void dp_wait_params(dp_chunk *d);
int dp_num_buckets(const dp_chunk *d);

/* --dp-collectives (flat|hierarchical|auto), before dp_attach; collective over the world. When the
 * buckets' group (dp x cp: the dp group without context parallelism) spans two hosts or more with
 * as many of its ranks on each, two at least
 * (comm_hier_create), "hierarchical" sets ps->dp_hier and "auto" times one bucket of
 * min(bucket_elems, numel) elements (all-reduce; with `distributed` reduce-scatter and all-gather)
 * both ways on the dp group and keeps the faster, writing one line with both times to `line` (""
 * when there was nothing to choose). Returns whether the buckets go hierarchical. */
int dp_choose_collectives(ps_state *ps, const char *mode, size_t numel, size_t bucket_elems, int distributed,
                          char *line, size_t len);

#endif
