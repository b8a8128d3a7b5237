/* Ring collectives for large messages (src/comm/ring.c), private to src/comm. Open MPI 4.1's
 * non-blocking collectives (libnbc) reduce a large in-place all-reduce to one rank and broadcast
 * it back (binomial), and a reduce-scatter to rank 0 and scatter it: every byte crosses the root's
 * link twice or p times. A ring sends (p-1)/p of the buffer through each rank's link each way,
 * the least any all-reduce can. mpi.c starts one for a large enough message; the steps are
 * point-to-point messages on a communicator of their own, each waited with the bounded wait. */
#ifndef TRIDENT_COMM_RING_H
#define TRIDENT_COMM_RING_H

#include <stddef.h>

#include "comm_impl.h"

typedef struct ring_op ring_op;

/* Whether a collective of `bytes` in all (summed over the ranks' parts), of type t and op, on
 * `size` ranks goes through the ring: sums of f32 or f64 of at least ring_min_bytes() on two
 * ranks or more. The same on every rank of a group (it depends on nothing rank-specific). */
int ring_applies(size_t bytes, comm_dtype t, comm_op op, int size);
/* The smallest message the ring takes: TRIDENT_RING_MIN_BYTES when set at the first call (0:
 * every sum; tests use it), else 256 KiB. */
size_t ring_min_bytes(void);

/* Start a ring collective over p2p (a communicator of the group's ranks used for nothing else;
 * its name names the group in timeout messages). Every rank of the group starts the same ring
 * collectives in the same order, each with its own tag (ring collectives in flight together on
 * one group must differ in it). The buffers stay the caller's until ring_wait returns.
 *   all-reduce: buf (count elements) summed in place;
 *   reduce-scatter: send holds every rank's part (counts[i] elements for rank i, consecutive),
 *     recv gets this rank's part of the sum;
 *   all-gather: buf holds part i at displs[i] (counts[i] elements); this rank's part is filled
 *     in, the others are received in place. */
ring_op *ring_allreduce(const comm *p2p, void *buf, size_t count, comm_dtype t, int tag);
ring_op *ring_reduce_scatterv(const comm *p2p, const void *send, void *recv, const size_t *counts, comm_dtype t, int tag);
ring_op *ring_allgatherv(const comm *p2p, void *buf, const size_t *counts, const size_t *displs, comm_dtype t, int tag);
/* Advances op without blocking (each step whose messages arrived: its sum, the next step's
 * messages started); 1 once complete. */
int ring_test(ring_op *op);
/* Completes op (each step's messages waited with the bounded wait) and frees it. */
void ring_wait(ring_op *op);

#endif
