/* The NCCL twin of a group (src/comm/nccl.c), private to src/comm: only in a build with CUDA
 * (TRIDENT_HAVE_CUDA); nccl_none.c answers for a build without. docs/gpu.md, "NCCL". */
#ifndef TRIDENT_NCCL_TWIN_H
#define TRIDENT_NCCL_TWIN_H

#include <stddef.h>

#include "comm_impl.h"

/* The device twin of c: an NCCL communicator over c's ranks (rank 0 of c asks NCCL for an id,
 * comm_bcast sends it over c, every rank joins with ncclCommInitRank), whose buffers are device
 * memory of the current CUDA device, ordered after the work on `stream` (the backend's
 * cudaStream_t) and before what is enqueued there after the call. p2p (groups that carry
 * point-to-point messages: the pipeline's, context parallelism's ring), beyond one rank: a
 * channel (a two-rank communicator and a stream at each end) for each ordered pair of neighbours
 * on the ring of c's ranks (nccl.c says why). Collective over c. Opens libnccl.so.2 the first time (one line naming the library
 * and what to install when it cannot). */
comm *nccl_twin_new(const comm *c, void *stream, int p2p);
/* The stream a twin orders its work against (the one it was made with), and its p2p. */
void *nccl_twin_stream(const comm *twin);
int nccl_twin_p2p(const comm *twin);
/* The channels of a p2p twin over n ranks (0 for one rank): channel 2i carries rank i's messages
 * to rank i + 1, channel 2i + 1 those of i + 1 to i (ranks modulo n; with two ranks only the first
 * two, the rest would repeat them); channel k goes from *from to *to. */
int nccl_channels(int n);
void nccl_channel_ends(int n, int k, int *from, int *to);
/* The lane rank `me` of n sends (is_send) a message to `peer` on, or receives one from it: 1 to
 * me + 1, 2 from me - 1, 3 to me - 1, 4 from me + 1 (3 and 4 only beyond two ranks); 0 none (to
 * itself, or no neighbour: the twin's own communicator). nccl_channel_lane: the lane of channel
 * k at rank me, 0 when me is neither end. */
int nccl_lane(int n, int me, int is_send, int peer);
int nccl_channel_lane(int n, int k, int me);
/* 1 if libnccl.so.2 opens and has every function nccl.c calls; else 0 and the reason in why
 * (len bytes). Never ends the process. */
int nccl_loadable(char *why, size_t len);

#endif
