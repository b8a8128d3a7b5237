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

/* Runs one iteration's micro-batches with `schedule`; gradients accumulate into the chunks'
 * buffers (each chunk's grads_final is set during its last micro-batch's backward). Returns
 * the sum of the micro-batches' losses computed on this rank (gpt_forward's loss_sum; nonzero
 * only on the last stage). Every send has completed when it returns. */
double pp_run(pp_schedule schedule, pp_iteration *it);

#endif
