/* Context parallelism inside a layer (Megatron's --context-parallel-size, load-balanced): each
 * sample's sequence of S positions is cut into 2C equal chunks and cp rank i holds chunks i and
 * 2C - 1 - i, (B, S/C, .), in every layer but the attention core. Ulysses' all-to-all
 * (--cp-comm-type a2a) turns this rank's tokens with every local head into every token with a
 * C-th of the heads around the core, and back. Every map returns at once when the group is one
 * rank. */
#ifndef TRIDENT_CONTEXT_PARALLEL_H
#define TRIDENT_CONTEXT_PARALLEL_H

#include "backend.h"
#include "trident/comm.h"

/* full (B, S, P w / C) written = every token of the group in sequence order, with this rank's C-th
 * of each of the P parts: columns [cp_rank w/C, (cp_rank + 1) w/C) of each part, part p at
 * p w / C; from local (B, S/C, P w), this rank's two chunks with their P parts of width w each
 * (the parts are a fused [q | k | v], or [k | v]; w / C a whole number of heads). send and recv:
 * B S P w / C floats each of scratch. Collective over cp. */
void cp_a2a_to_heads(const backend *be, const comm *cp, float *full, const float *local, float *send, float *recv,
                     int B, int S, int P, int w);
/* The inverse: local (B, S/C, P w) written from every rank's full (B, S, P w / C). */
void cp_a2a_to_seq(const backend *be, const comm *cp, float *local, const float *full, float *send, float *recv,
                   int B, int S, int P, int w);

/* The ring of --cp-comm-type p2p: n floats of send to the next cp rank ((rank + 1) mod C) and n
 * into recv from the previous one, started (send and recv: backend memory, not overlapping; send
 * not written until cp_ring_wait). Every wait is comm's bounded one. */
typedef struct {
    comm_req *send, *recv;
    float *dst;
    size_t bytes;
} cp_ring_req;
void cp_ring_start(const backend *be, const comm *cp, const float *send, float *recv, size_t n, int tag,
                   cp_ring_req *q);
/* Completes the step: recv holds the previous rank's floats. */
void cp_ring_wait(const backend *be, cp_ring_req *q);

#endif
