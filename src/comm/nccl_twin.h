/* The NCCL twin of a group (src/comm/nccl.c), private to src/comm: only in a build with CUDA
 * (TRIDENT_HAVE_CUDA); comm.c answers for a build without. docs/gpu.md, "NCCL". */
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
/* 1 if libnccl.so.2 opens and has every function nccl.c calls; else 0 and the reason in why
 * (len bytes). Never ends the process. */
int nccl_loadable(char *why, size_t len);

#endif
