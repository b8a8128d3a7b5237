/* Communication overlapped with the backend's queue. A transfer of backend memory (a data-parallel
 * bucket's reduction, a pipeline stage's send) starts once the event recorded after its last
 * kernel has passed (be_event_query; at once on cpu, whose kernels are done when they return),
 * and requests in flight move on between kernels (comm_progress): ov_progress, the backend's
 * progress hook (be_set_progress) once ov_attach made it so, runs after every kernel, polls what
 * waits for an event (ov_add) and advances comm. */
#ifndef TRIDENT_OVERLAP_H
#define TRIDENT_OVERLAP_H

struct backend;

/* Makes ov_progress be's progress hook (idempotent): the one field of a backend its callers set
 * through the const pointer a model holds. */
void ov_attach(const struct backend *be);
/* fn(ctx, 0) runs at every pass of ov_progress, before comm_progress, until ov_remove: it starts
 * what of its owner's has become ready (events passed). fn(ctx, 1) (ov_flush) starts all of it,
 * after a sync of the queue if need be. Adding a pair present already does nothing. */
void ov_add(void (*fn)(void *ctx, int force), void *ctx);
void ov_remove(void (*fn)(void *ctx, int force), void *ctx);
/* One pass: every added fn, then comm_progress. Not re-entered (a start that runs kernels). */
void ov_progress(void *unused);
/* Starts everything still waiting for its event. Called before a rank blocks on a peer (a stage
 * receive, a send's wait): a transfer left waiting for the host's next kernel would never start
 * while the rank is blocked, and the peer it waits for may be waiting on that very transfer. */
void ov_flush(void);

#endif
