/* Data parallelism. Owns the reduction of a model chunk's gradient buffer over the
 * data-parallel group: the buffer cut into buckets (--ddp-bucket-size elements) in its own
 * order (reverse backprop), each bucket's non-blocking all-reduce started as soon as its
 * gradients are final when overlapping (--overlap-grad-reduce), and one wait before the step. */
#ifndef TRIDENT_DATA_PARALLEL_H
#define TRIDENT_DATA_PARALLEL_H

#include <stddef.h>

#include "trident/comm.h"

typedef struct dp_buckets dp_buckets;

/* Buckets over grads (numel floats) of `bucket_elems` elements each (the last may be shorter). */
dp_buckets *dp_buckets_create(const comm *dp, float *grads, size_t numel, size_t bucket_elems);
void dp_buckets_free(dp_buckets *d);
/* Starts the all-reduce of every bucket lying wholly in grads[0, prefix_end) not yet started.
 * Matches gpt_model.grads_ready (user = the dp_buckets). */
void dp_buckets_ready(void *d, size_t prefix_end);
/* Starts the buckets not started yet and waits for all; the buffer then holds the sum over the
 * group. Resets for the next iteration. */
void dp_buckets_finish(dp_buckets *d);
int dp_buckets_count(const dp_buckets *d);

#endif
