/* Buffers that cross comm: the one rule for every transfer of backend memory between ranks
 * (docs/architecture.md, "Buffers that cross comm"; docs/backend.md; docs/gpu.md, "NCCL"). comm
 * sits below the backend and takes plain pointers; whether those may be the backend's own memory
 * is the backend's to say, once, by its ops->host_alloc (be_ops.h), and which group carries them
 * is xfer_comm's:
 *  - direct (host_alloc NULL: cpu, whose memory is host memory; a device backend under --comm
 *    nccl, whose host_alloc xfer_init leaves out): a view is the device pointer itself and
 *    nothing is copied; a device backend's buffers go to the group's NCCL twin (xfer_comm);
 *  - staged (host_alloc set): a view is a pinned host mirror of the device range (host_alloc'd on
 *    first use, kept until the device allocation is freed); a send view is filled D2H before comm
 *    reads it, and xfer_recv_done copies a receive's mirror H2D once comm has completed it.
 * Every caller that hands backend memory to comm goes through a view on the group xfer_comm
 * names (non-blocking transfers: data parallelism's buckets, the pipeline's stage transfers) or
 * one of the blocking collectives below (tensor parallelism, the MoE token exchange, evaluation
 * and generation), which take the group and pick the twin themselves. Host memory (the trainer's
 * sums, token ids on the host) goes to the group itself, as it is. Private to the backend's
 * callers. */
#ifndef TRIDENT_XFER_H
#define TRIDENT_XFER_H

#include <stddef.h>

#include "trident/comm.h"
#include "trident/parallel_state.h"
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

/* The group that carries this backend's memory between the ranks of c: c's NCCL twin when the
 * backend is a direct device backend (--comm nccl), else c. Dies (a bug) when such a backend
 * finds no twin on c: comm would be handed device pointers it cannot read. */
const comm *xfer_comm(const backend *be, const comm *c);

/* The blocking collectives of comm.h over backend memory, on xfer_comm(be, c): views, the call,
 * the receive done. */
void xfer_allreduce(const backend *be, const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
void xfer_allgather(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t);
void xfer_reduce_scatter(const backend *be, const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                         comm_op op);
void xfer_alltoallv(const backend *be, const comm *c, const void *send, const size_t *scounts, const size_t *sdispls,
                    void *recv, const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag);

/* comm_allgather of `count` elements of backend memory (send) into HOST memory (recv, size x count
 * elements) over c: the send's view on the group (direct host backend, staged), or, on a direct
 * device backend, a host copy of send gathered over the group itself. */
void xfer_allgather_to_host(const backend *be, const comm *c, const void *send, void *recv, size_t count,
                            comm_dtype t);

/* ---- --comm: which communicator carries device buffers (docs/gpu.md, "NCCL") ---- */
/* Why NCCL cannot carry device buffers, or XFER_NCCL_OK. */
typedef enum {
    XFER_NCCL_OK,
    XFER_NCCL_NO_CUDA,    /* this trident was built without CUDA */
    XFER_NCCL_CPU,        /* the backend is cpu: its buffers are host memory */
    XFER_NCCL_NO_LIB,     /* libnccl.so.2 does not open */
    XFER_NCCL_NO_GPU,     /* no GPU is visible */
    XFER_NCCL_SHARED_GPU, /* more ranks on this host than visible GPUs: NCCL refuses two ranks on one */
} xfer_nccl_why;
/* The rule, pure: whether NCCL can carry the buffers of `backend` (a resolved name: cpu or cuda)
 * for a rank built with CUDA or not, libnccl loadable or not, `local_size` ranks on its host and
 * `devices` visible GPUs. */
xfer_nccl_why xfer_nccl_rule(const char *backend, int cuda_built, int nccl_loadable, int local_size, int devices);
/* What --comm `flag` runs given `worst`, the largest reason over the ranks: "nccl" or "mpi"; auto is
 * nccl when worst is XFER_NCCL_OK, else mpi; NULL for nccl when worst is not OK (refused). */
const char *xfer_comm_choice(const char *flag, xfer_nccl_why worst);
/* One line (out, len bytes) saying why NCCL cannot carry device buffers here, for `why`, with this
 * rank's numbers and the loader's reason (lib_why). */
void xfer_nccl_why_text(xfer_nccl_why why, int local_size, int devices, const char *lib_why, char *out, size_t len);
/* The ranks on this host: the launcher's local size (OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE,
 * MPI_LOCALNRANKS, PMI_LOCAL_SIZE); 1 when started alone or none says. */
int xfer_local_size(void);
/* Resolves --comm (flag: auto, mpi or nccl) for the run's backend (resolved: "cpu" or "cuda"), whether
 * this trident has CUDA and the GPUs this process sees (be_comm_choose in registry.c finds them).
 * Collective over world: every rank finds the same answer (the largest reason over the ranks).
 * --comm nccl where NCCL cannot work exits 2 on every rank, rank 0 printing one line naming why.
 * Call before be_create: under nccl, the device backends it then makes are direct (xfer_init).
 * Returns 1 for nccl. */
int xfer_comm_choose(const char *flag, const char *backend, int cuda, int devices, const comm *world);
/* After be_create and ps_init under nccl: every group of ps gets its NCCL twin on be's queue
 * (ps_make_twins); a no-op otherwise. On a device backend, logs (world rank 0) which communicator
 * carries device buffers. Collective over the world. */
void xfer_comm_attach(const backend *be, ps_state *ps);
/* What xfer_comm_choose chose: 1 nccl, 0 mpi. */
int xfer_comm_nccl(void);

/* ---- the backend's side (registry.c, backend.h) ---- */
/* be_create: a backend with host_alloc gets its staging state (be->xfer); else none. Under --comm
 * nccl (xfer_comm_choose) a device backend is made direct first: host_alloc and host_free left out. */
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
