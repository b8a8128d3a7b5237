/* Pipeline schedules. Owns the order in which a rank runs the forward and backward passes of
 * an iteration's micro-batches over its model chunks, and the stage-to-stage transfers between
 * them (paired non-blocking send/recv on the pipeline group): none (gradient accumulation on
 * one stage), GPipe, 1F1B and interleaved 1F1B, chosen by pp_run. */
#ifndef TRIDENT_PIPELINE_H
#define TRIDENT_PIPELINE_H

#include <stdint.h>

#include "trident/gpt.h"
#include <stddef.h>

#include "trident/parallel_state.h"

/* Bookkeeping limits of a schedule (checked by the trainer's config validation). */
#define PP_MAX_CHUNKS 16 /* model chunks (virtual stages) per rank */
#define PP_MAX_SLOTS 64  /* micro-batches in flight per chunk */

typedef enum { PP_SCHEDULE_NONE, PP_SCHEDULE_GPIPE, PP_SCHEDULE_1F1B, PP_SCHEDULE_INTERLEAVED } pp_schedule;

/* Parses "auto" | "gpipe" | "1f1b" | "interleaved" for a run with `pp` stages and `vp` chunks
 * per rank ("auto": none for one stage, interleaved with vp > 1, else 1F1B). -1 if unknown. */
int pp_schedule_parse(const char *s, int pp, int vp, pp_schedule *out);
const char *pp_schedule_name(pp_schedule s);

/* Supplies micro-batch m (0-based) of the current iteration on this rank: ids and targets
 * (mbs, s) and the global sample index of each row (mbs). */
typedef void (*pp_batch_fn)(void *user, int m, int32_t *ids, int32_t *targets, int64_t *sample);

typedef struct pp_iteration {
    const ps_state *ps;
    gpt_model **chunks;   /* nchunks model chunks of this rank: chunk c is virtual stage c*pp + pp_rank */
    int nchunks;
    int num_micro;        /* micro-batches per iteration on this data-parallel rank */
    int mbs;
    float loss_scale;     /* d(loss)/d(token loss): 1 / tokens of the global batch */
    int training;         /* 0: forward only (evaluation) */
    pp_batch_fn batch;
    void *user;
    /* host scratch for one micro-batch's inputs: */
    int32_t *ids, *targets; /* (mbs, s) */
    int64_t *sample;        /* (mbs) */
    float *grad_in;         /* (mbs, s, h) backend memory: a received output gradient */
} pp_iteration;

/* Activation slots each chunk needs for `schedule` (pass as gpt_create's max_inflight). */
/* The layers of pipeline stage `stage` of pp (no virtual stages): [*layer0, *layer0 + *n). By
 * default L/pp each; `first` >= 0 gives the first stage that many and `last` >= 0 the last stage
 * (Megatron's --decoder-first/last-pipeline-num-layers; -1: not given; 0: the stage holds only
 * the embedding, or only the output layer and the loss), the other stages sharing the rest
 * evenly. Returns 0, or -1 with one line in msg when the split is impossible (a middle stage
 * with no layer, or a rest the middle stages cannot share evenly). */
int pp_stage_layers(int L, int pp, int first, int last, int stage, int *layer0, int *n, char *msg, size_t msglen);
int pp_slots_needed(pp_schedule schedule, int pp, int pp_rank, int nchunks, int num_micro);

/* Runs one iteration's micro-batches with `schedule`; gradients accumulate into the chunks'
 * buffers (each chunk's grads_final is set during its last micro-batch's backward). Returns
 * the sum of the token losses computed on this rank (nonzero only on the last
 * stage). Every send has completed when it returns. */
double pp_run(pp_schedule schedule, pp_iteration *it);

#endif
