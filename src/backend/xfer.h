/* Buffers that cross comm: the one rule for every transfer of backend memory between ranks
 * (docs/architecture.md, "Buffers that cross comm"; docs/backend.md). comm sits below the backend
 * and takes plain pointers; whether those may be the backend's own memory is the backend's to say,
 * once, by its ops->host_alloc (be_ops.h):
 *  - direct (host_alloc NULL: cpu, whose memory is host memory; a device backend over a CUDA-aware
 *    MPI or NCCL): a view is the device pointer itself and nothing is copied;
 *  - staged (host_alloc set): a view is a pinned host mirror of the device range (host_alloc'd on
 *    first use, kept until the device allocation is freed); a send view is filled D2H before comm
 *    reads it, and xfer_recv_done copies a receive's mirror H2D once comm has completed it.
 * Every caller that hands backend memory to comm goes through a view (non-blocking transfers:
 * data parallelism's buckets, the pipeline's stage transfers) or one of the blocking collectives
 * below (tensor parallelism, the MoE token exchange, evaluation and generation). Host memory (the
 * trainer's sums, token ids on the host) goes to comm as it is. Private to the backend's callers. */
#ifndef TRIDENT_XFER_H
#define TRIDENT_XFER_H

#include <stddef.h>

#include "trident/comm.h"
#include "be_ops.h"

/* 1 when comm reads and writes this backend's memory directly: every view is the pointer given. */
static inline int xfer_direct(const backend *be) { return be->xfer == NULL; }

/* What comm reads for a send of dev (`bytes` of backend memory): dev itself (direct), or its host
 * mirror holding the bytes (staged: copied D2H now, after the work queued before). The mirror
 * must not change until the send completes: the device range is not sent again before then. */
const void *xfer_send_view(const backend *be, const void *dev, size_t bytes);
/* What comm writes for a receive into dev: dev itself (direct) or its host mirror (staged: nothing
 * copied yet; xfer_recv_done copies it to dev once the receive has completed). */
void *xfer_recv_view(const backend *be, void *dev, size_t bytes);
/* An in-place collective's buffer (all-reduce, all-gather in place): the send view, to be
 * completed by xfer_recv_done. */
void *xfer_inout_view(const backend *be, void *dev, size_t bytes);
/* After the receive (or in-place collective) into dev's view completed: staged, dev = its mirror
 * (H2D); direct, nothing. */
void xfer_recv_done(const backend *be, void *dev, size_t bytes);

/* The blocking collectives of comm.h over backend memory: views, the call, the receive done. */
void xfer_allreduce(const backend *be, const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
void xfer_allgather(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t);
void xfer_reduce_scatter(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                         comm_op op);
void xfer_alltoallv(const backend *be, const comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                    void *recv, const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag);

/* ---- the backend's side (registry.c, backend.h) ---- */
/* be_create: a backend with host_alloc gets its staging state (be->xfer); else none. */
void xfer_init(backend *be);
/* be_free: every mirror and the state. */
void xfer_free(backend *be);
/* be_alloc / be_dfree on a staged backend: the device allocations, so that freeing one releases
 * the mirrors inside it. */
void xfer_note_alloc(const backend *be, void *p, size_t bytes);
void xfer_note_free(const backend *be, void *p);
/* Staging copies (D2H and H2D) made by this process so far, and their bytes; a direct backend
 * makes none. */
void xfer_copies(size_t *copies, size_t *bytes);

#endif
