/* Pipeline schedules. Owns the order in which a rank runs the forward and backward passes of
 * an iteration's micro-batches over its model chunks, and the stage-to-stage transfers between
 * them (paired non-blocking send/recv on the pipeline group): none (gradient accumulation on
 * one stage), GPipe, 1F1B and interleaved 1F1B, chosen by pp_run. */
#ifndef TRIDENT_PIPELINE_H
#define TRIDENT_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "trident/gpt.h"
#include "trident/parallel_state.h"

/* Bookkeeping limit of a schedule (checked by the trainer's config validation), beside
 * PS_MAX_CHUNKS (parallel_state.h), the model chunks per rank. */
#define PP_MAX_SLOTS 64  /* micro-batches in flight per chunk */

typedef enum { PP_SCHEDULE_NONE, PP_SCHEDULE_GPIPE, PP_SCHEDULE_1F1B, PP_SCHEDULE_INTERLEAVED } pp_schedule;

/* Parses "auto" | "gpipe" | "1f1b" | "interleaved" for a run with `pp` stages and `vp` chunks
 * per rank ("auto": none for one stage, interleaved with vp > 1, else 1F1B). -1 if unknown. */
int pp_schedule_parse(const char *s, int pp, int vp, pp_schedule *out);
const char *pp_schedule_name(pp_schedule s);

typedef struct pp_iteration {
    const ps_state *ps;
    gpt_model **chunks;   /* nchunks model chunks of this rank: chunk c is virtual stage c*pp + pp_rank */
    int nchunks;
    int num_micro;        /* micro-batches per iteration on this data-parallel rank */
    int mbs;
    float loss_scale;     /* d(loss)/d(token loss): e.g. 1 / tokens of the global batch */
    int training;         /* 0: forward only (evaluation) */
    /* The iteration's num_micro micro-batches on this rank, filled before pp_run (by the batch
     * source): the schedule hands micro-batch m to each chunk's stage as it is, never looking
     * inside. */
    const gpt_batch *micro;
    float *grad_in;       /* (mbs, s, h) backend memory: a received output gradient */
    /* (mbs, s, h) backend memory each, with pp > 1 (NULL: receives are posted when needed): where
     * the receive of the next step's input [0] or output gradient [1] lands, posted before the
     * step before it computes, so that the transfer moves while it does. */
    float *prefetch[2];
    /* Megatron's scatter/gather (pp_scatter_gather_applies): each tensor-parallel rank sends
     * 1/tp of every stage transfer and the receiver all-gathers it over its tp group. */
    int scatter_gather;
    /* Seconds this rank was blocked in stage transfers (receives, their all-gathers, waits on
     * sends: time the neighbour stage was still computing included), added to by pp_run. */
    double transfer_s;
    /* The head's sums of the last stage's forwards (gpt_head_stats), added to by pp_run. */
    double stats[GPT_MAX_STATS];
} pp_iteration;

/* How the decoder layers are split over the pipeline's virtual stages (vp per rank; virtual stage
 * vs = chunk * pp + pp_rank). By default L / (pp vp) each. Megatron's uneven splits:
 * --decoder-first/last-pipeline-num-layers (first, last >= 0; -1 not given; vp 1 only) give the
 * first or last stage that many (0: the stage holds only the embedding, or only the output layer
 * and the loss), the other stages sharing the rest evenly; --account-for-embedding/
 * loss-in-pipeline-split count the embedding, or the output layer and loss, as one layer of the
 * split: L + 1 (+ 1) shared evenly over the pp vp virtual stages, the first (last) holding one
 * decoder layer fewer. */
typedef struct pp_split {
    int L, pp, vp;
    int first, last;
    int embedding, loss;
} pp_split;

/* 0, or -1 with one line in msg naming the flags when the split is impossible (a middle stage
 * with no layer, a rest the stages cannot share evenly, both kinds of uneven split). */
int pp_split_check(const pp_split *s, char *msg, size_t msglen);
/* Virtual stage vs's layers [*layer0, *layer0 + *n) of a checked split. */
void pp_split_layers(const pp_split *s, int vs, int *layer0, int *n);
/* Activation slots each chunk needs for `schedule` (pass as gpt_create's max_inflight). */
int pp_slots_needed(pp_schedule schedule, int pp, int pp_rank, int nchunks, int num_micro);

/* Whether scatter/gather applies to the stage transfers: asked for (`wanted`, Megatron's
 * default; --no-scatter-gather-tensors-in-pipeline clears it), more than one stage and more than
 * one tensor-parallel rank, and no sequence parallelism (there each tp rank holds its own 1/tp of
 * the sequence already and sends only that). */
int pp_scatter_gather_applies(const ps_state *ps, int wanted);

/* The stage transfers move backend memory of `be` (buf), as the backend's rule says: handed to
 * comm directly, or staged through host memory (xfer.h: copied D2H when the send starts, H2D
 * when the receive is finished). */
/* One stage transfer of the n floats of buf to stage `peer` of the pipeline group with `tag`
 * (non-blocking; buf must not be sent again before comm_wait). With scatter_gather only this tp
 * rank's slice goes (pp_transfer_slice), to the peer with the same tp rank. buf holds what the
 * kernels enqueued before the call wrote. */
comm_req *pp_send(const ps_state *ps, const struct backend *be, int scatter_gather, const float *buf, size_t n, int peer,
                  int tag);
/* Receives the n floats pp_send sent from stage `peer` with `tag` into buf, blocking; with
 * scatter_gather this rank's slice arrives and an all-gather over the tp group (collective:
 * every tp rank of the stage receives the same transfer) rebuilds the whole of buf. */
void pp_recv(const ps_state *ps, const struct backend *be, int scatter_gather, float *buf, size_t n, int peer, int tag);
/* pp_recv in two halves: the receive (of this rank's slice, with scatter_gather) posted, and,
 * once it has completed, the all-gather that rebuilds buf (nothing without scatter_gather) and
 * buf written (staged: from its host mirror). */
comm_req *pp_recv_start(const ps_state *ps, const struct backend *be, int scatter_gather, float *buf, size_t n, int peer,
                        int tag);
void pp_recv_finish(const ps_state *ps, const struct backend *be, int scatter_gather, float *buf, size_t n);
/* The slice [*off, *off + *count) of an n-element transfer that tp rank r of t sends under
 * scatter/gather: t runs differing by at most one element, the first n % t one longer, so any
 * n works without padding (Megatron requires n divisible by t). */
void pp_transfer_slice(size_t n, int t, int r, size_t *off, size_t *count);

/* Runs one iteration's micro-batches with `schedule`; gradients accumulate into the chunks'
 * buffers (each chunk's grads_final is set during its last micro-batch's backward). Returns
 * the sum of the micro-batches' losses computed on this rank (gpt_forward's loss_sum; nonzero
 * only on the last stage). Every send has completed when it returns. */
double pp_run(pp_schedule schedule, pp_iteration *it);

#endif
