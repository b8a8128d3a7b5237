/* Pipeline schedules. Owns the order in which a stage runs the forward and backward passes of
 * an iteration's micro-batches and the stage-to-stage transfers between them: none (gradient
 * accumulation on one stage), GPipe, 1F1B and interleaved 1F1B, chosen by pp_run. */
#ifndef TRIDENT_PIPELINE_H
#define TRIDENT_PIPELINE_H

#include <stdint.h>

#include "trident/gpt.h"

typedef enum { PP_SCHEDULE_NONE, PP_SCHEDULE_GPIPE, PP_SCHEDULE_1F1B, PP_SCHEDULE_INTERLEAVED } pp_schedule;

/* Supplies micro-batch m (0-based) of the current iteration on this rank: ids and targets
 * (mbs, s) and the global sample index of each row (mbs). Called on the stages that need them
 * (ids on the first, targets on the last); both may be filled every time. */
typedef void (*pp_batch_fn)(void *user, int m, int32_t *ids, int32_t *targets, int64_t *sample);

typedef struct pp_iteration {
    gpt_model *model;
    int num_micro;        /* micro-batches per iteration on this data-parallel rank */
    int mbs;
    float loss_scale;     /* d(loss)/d(token loss): 1 / tokens of the global batch */
    int training;         /* 0: forward only (evaluation) */
    pp_batch_fn batch;
    void *user;
    /* scratch the schedule uses for one micro-batch's inputs (host): */
    int32_t *ids, *targets; /* (mbs, s) */
    int64_t *sample;        /* (mbs) */
} pp_iteration;

/* Runs one iteration's micro-batches with `schedule`; gradients accumulate into the model's
 * buffer. Returns the sum of the token losses on the last stage (0 elsewhere). */
double pp_run(pp_schedule schedule, pp_iteration *it);

#endif
