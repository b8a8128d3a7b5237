/* How an MPI job ends when a rank, a node or the network fails (mpi_fault.c): the peers a rank
 * watches, the word passed between ranks, the roll call that names the ranks and hosts lost
 * when a wait times out, and the launcher's end. Private to src/comm (mpi.c). */
#ifndef TRIDENT_MPI_FAULT_H
#define TRIDENT_MPI_FAULT_H

#include <mpi.h>

/* Every rank's pid, start time and host, gathered over `world` (collective); the watch of this
 * node's peers; the communicator the word travels on. */
void fault_init(MPI_Comm world, int rank, int size);

/* Withdraws the posted receives and frees the state (before MPI_Finalize). */
void fault_close(void);

/* Called while a rank waits: ends this rank (noreturn) when a watched peer is gone or another
 * rank says one is, or when another rank's wait timed out (the roll call, below). `full` also
 * reads /proc for the watched peers (every half second is enough). */
void fault_poll(int full);

/* The host of world rank r ("?" when unknown), for messages. */
const char *fault_host_of(int r);

/* Ends the job: the launcher's watcher (failed), an exit of this rank if MPI_Abort does not
 * return within the launcher's grace, MPI_Abort. Async-signal-safe as far as MPI_Abort is. */
void fault_abort(MPI_Comm c, int code) __attribute__((noreturn));

/* A wait timed out or failed: asks every rank whether it is there (a roll call of a few seconds, which
 * the others answer from their own waits), then the lowest rank that answered prints one line:
 * `what` (the wait that timed out) and the ranks that did not answer, by host; it tells the
 * others, which end quietly, and the job ends. Does not return. */
void fault_timed_out(const char *file, int line, const char *call, const char *what) __attribute__((noreturn));

/* Under Open MPI's mpirun or orted: arms fault_kick_launcher (outside signal handlers). */
void fault_kick_setup(void);

/* Leaves behind a process that hastens the launcher's end of the job while this rank ends and,
 * when `failed`, ends a launcher that is still there after its own grace (one waiting on a node
 * it cannot reach). Async-signal-safe. */
void fault_kick_launcher(int failed);

/* Whether the launcher has started ending the job (its SIGCONT came). */
int fault_launcher_ending(void);

/* Tells every other rank that this one ends with `code` after saying why, so they end quietly. */
void fault_announce_exit(int code);

/* Ends this process with `code` if it is still there `seconds` from now (an abort that does not
 * return). Async-signal-safe. */
void fault_exit_after(int code, unsigned seconds);

#endif
