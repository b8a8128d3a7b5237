/* Communicators. Owns every message between ranks, behind a small vtable so the model and
 * parallel code never include MPI or NCCL headers. A group of one rank returns at once. */
#ifndef TRIDENT_COMM_H
#define TRIDENT_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { COMM_F32, COMM_F64, COMM_I32, COMM_I64, COMM_U8 } comm_dtype;
typedef enum { COMM_SUM, COMM_MAX, COMM_MIN } comm_op;

typedef struct comm comm;
typedef struct comm_req comm_req; /* an in-flight non-blocking operation */

/* The vtable an implementation (mpi.c, nccl.c) fills; see src/comm/comm_impl.h. */
struct comm_ops;

/* Initialises the process world (MPI_Init; works without mpirun for one rank), sets the log
 * rank and makes fatal errors abort the whole job. Call once, first. */
comm *comm_world_init(int *argc, char ***argv);
/* The OpenMP threads a rank should run when OMP_NUM_THREADS is unset: the cores this process may
 * use (affinity mask, cgroup quota; trident/cores.h) over the ranks of its host whose masks
 * overlap its own (counted by comm_world_init; 1 before it or alone), at least 1. 0 when
 * OMP_NUM_THREADS is set: OpenMP's choice, the user's. Two ranks unbound on two cores each ran
 * two threads before (OpenMP's default), 12x slower than one each. */
int comm_threads_per_rank(void);
/* Finalises the world (MPI_Finalize) and frees it. */
void comm_world_finalize(comm *world);
/* Ends this process with a config error's code (td_set_usage_hook) once every rank has reached
 * it: started by a launcher with more than one rank, it joins MPI (MPI_Init if not yet) and waits
 * at a barrier, so that no rank's exit makes the launcher end the job before rank 0 has printed
 * the error; then MPI_Finalize and exit(code). Rank 0 waits 2 s at most, then exits (an error
 * only it finds: its exit ends the job); the others 30 s, then MPI_Abort. */
void comm_usage_exit(int code) __attribute__((noreturn));
/* exit(code), after MPI_Finalize or without MPI. Among ranks started by Open MPI's mpirun, a
 * non-zero code makes mpirun end the job, which it does only after sleeping twice
 * odls_base_sigkill_timeout (as it does after passing on a SIGTERM, e.g. when the ranks exit
 * after their save): a child process left behind cuts these sleeps short. */
void comm_exit(int code) __attribute__((noreturn));
/* Ends every rank of the job with `code` (MPI_Abort). */
void comm_abort(const comm *c, int code) __attribute__((noreturn));

/* Longest a rank may wait in any one operation before it aborts the job, naming itself, the
 * operation, the group and the peer (Megatron's --distributed-timeout-minutes). 0: no limit. */
void comm_set_timeout(double seconds);
double comm_timeout(void);
/* Names the group in error messages ("tp", "pp", ...); a split starts with its parent's name. */
void comm_set_name(comm *c, const char *name);
const char *comm_name(const comm *c);

int comm_rank(const comm *c);
int comm_size(const comm *c);
/* Sub-communicator of the ranks that pass the same color, ordered by key (MPI_Comm_split). */
comm *comm_split(const comm *c, int color, int key);
void comm_free(comm *c);

void comm_barrier(const comm *c);
void comm_bcast(const comm *c, void *buf, size_t count, comm_dtype t, int root);
void comm_allreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
/* recv holds size * count elements: rank r's `send` lands at r * count. */
void comm_allgather(const comm *c, const void *send, void *recv, size_t count, comm_dtype t);
/* send holds size * count elements; rank r gets the sum of every rank's chunk r. */
void comm_reduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t, comm_op op);

/* Every rank sends scounts[r] elements at sdispls[r] of send to rank r and receives rcounts[r]
 * elements from rank r at rdispls[r] of recv (MPI_Alltoallv; size entries each; send and recv
 * must not overlap): point-to-point messages under `tag`, each waited with the bounded wait. */
void comm_alltoallv(const comm *c, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                    const size_t *rcounts, const size_t *rdispls, comm_dtype t, int tag);

/* Non-blocking operations; comm_wait completes and frees the request (NULL is a no-op). */
comm_req *comm_isend(const comm *c, const void *buf, size_t count, comm_dtype t, int peer, int tag);
comm_req *comm_irecv(const comm *c, void *buf, size_t count, comm_dtype t, int peer, int tag);
comm_req *comm_iallreduce(const comm *c, void *buf, size_t count, comm_dtype t, comm_op op);
comm_req *comm_ireduce_scatter(const comm *c, const void *send, void *recv, size_t count, comm_dtype t,
                               comm_op op);
/* In place over buf: rank r's counts[r] elements at displs[r] go to every rank (MPI_Iallgatherv).
 * counts and displs (size entries) are copied; buf must stay until the wait. */
comm_req *comm_iallgatherv(const comm *c, void *buf, const size_t *counts, const size_t *displs, comm_dtype t);
/* send holds the sum of counts (size entries, copied) elements, chunk r after chunks 0..r-1;
 * rank r gets the sum over the group of every rank's chunk r in recv (MPI_Ireduce_scatter). */
comm_req *comm_ireduce_scatterv(const comm *c, const void *send, void *recv, const size_t *counts, comm_dtype t,
                                comm_op op);
void comm_wait(comm_req *r);
/* Whether r has completed, advancing it without blocking (a staged collective starts its next
 * stage); r must still be waited, which then returns at once. NULL: 1. */
int comm_test(comm_req *r);
/* Seconds spent blocked in communication on this communicator since creation: the blocking
 * calls and the waits of requests not yet complete (a request comm_progress saw complete costs
 * its wait nothing). This is the communication that was exposed, not hidden behind compute. */
double comm_seconds(const comm *c); /* a group with an NCCL twin: the twin's seconds included */
/* Seconds since creation during which at least one communication of this communicator was in
 * flight: a blocking call, or a request from its start until comm_progress or its wait saw it
 * complete (a union of intervals, so requests in flight together count once). Never less than
 * comm_seconds; the difference is the communication hidden behind other work. */
double comm_busy_seconds(const comm *c);

/* The least time between two passes of comm_progress (seconds). */
#define COMM_PROGRESS_INTERVAL 1e-4
/* Advances every request started and not yet waited, on every communicator (an MPI_Test each):
 * non-blocking MPI over TCP moves only inside MPI calls, so a rank computing between a start
 * and its wait calls this between kernels (the backend does, after each one) for the transfer to
 * proceed meanwhile. At most one pass per COMM_PROGRESS_INTERVAL; nothing when no request is in
 * flight. Main thread only (MPI_THREAD_FUNNELED). Returns the requests not yet seen complete. */
int comm_progress(void);
/* hook(ctx) runs at the end of each pass of comm_progress (NULL: none), e.g. to start the next
 * stage of a chain of requests once the one before has completed (the pipeline's stage
 * transfers: a slice received, then its all-gather). Not re-entered. */
void comm_set_progress_hook(void (*hook)(void *ctx), void *ctx);

size_t comm_dtype_size(comm_dtype t);

/* ---- device twins: NCCL for buffers in device memory (docs/gpu.md, "NCCL") ----
 * A group's twin has its ranks, in its order, and its name; its buffers are device memory of the
 * rank's GPU. Whoever hands comm device memory picks the twin (xfer_comm, src/backend/xfer.h);
 * host memory keeps going to the group itself. */
/* 1 when this build can make twins here (built with CUDA and libnccl.so.2 opens with every
 * function trident calls); else 0 and the reason in why (len bytes). Never ends the process. */
int comm_nccl_loadable(char *why, size_t len);
/* Gives c its NCCL twin, ordered against `stream` (the backend's cudaStream_t: each operation
 * runs after the work enqueued there before it, and the work enqueued after a blocking call or a
 * request's wait runs after the operation). p2p: the group carries point-to-point messages of
 * device buffers (comm_isend, comm_irecv) between neighbours on the ring of its ranks: each
 * ordered pair of neighbours gets a channel of its own (a two-rank NCCL communicator, a stream at
 * each end), so that no message waits behind one to another peer or the other way; without,
 * messages share the twin's stream. Collective over c; a no-op when c has one. Every later comm_split of c makes its part's
 * twin too (with c's p2p). */
void comm_make_twin(comm *c, void *stream, int p2p);
/* The group device buffers of c's ranks cross: c's twin, or c when it has none. */
const comm *comm_device(const comm *c);
/* 1 if c's buffers are device memory (c is a twin). */
int comm_is_device(const comm *c);

#endif
