/* The optimizer. Owns AdamW over the models' flat buffers (the moments, laid out as the
 * parameters; weight decay by each tensor's no_decay), the global gradient norm, the
 * learning-rate schedule (Megatron's OptimizerParamScheduler: linear warm-up, then constant,
 * linear or cosine decay to min-lr) and the clip factor. The AdamW arithmetic is a backend
 * kernel. */
#ifndef TRIDENT_OPTIM_H
#define TRIDENT_OPTIM_H

#include <stdint.h>

#include "backend/backend.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"

#define OPT_MAX_CHUNKS 16 /* model chunks (virtual stages) of one rank */

typedef struct {
    double beta1, beta2, eps, weight_decay;
} opt_adamw_hparams;

/* AdamW over the model chunks of one rank. */
typedef struct opt_adamw {
    const backend *be;
    const ps_state *ps;
    int nchunks;
    gpt_model *chunks[OPT_MAX_CHUNKS];
    float *m[OPT_MAX_CHUNKS], *v[OPT_MAX_CHUNKS]; /* moments per chunk, numel floats, zeroed */
    opt_adamw_hparams hp;
} opt_adamw;

opt_adamw *opt_adamw_create(const backend *be, const ps_state *ps, gpt_model *const *chunks, int nchunks,
                            const opt_adamw_hparams *hp);
void opt_adamw_free(opt_adamw *o);
/* The global gradient norm of the chunks' (reduced) grads: every logical parameter counted once
 * over tp, pp and dp (replicated tensors on tp rank 0, the last stage's embedding copy left
 * out), summed over the model-parallel group. Collective over it. */
double opt_grad_norm(const opt_adamw *o);
/* One AdamW step at `lr` on grads scaled by gscale (clipping); step counts from 1. */
void opt_adamw_step(opt_adamw *o, double lr, double gscale, int64_t step);

typedef enum { OPT_DECAY_CONSTANT, OPT_DECAY_LINEAR, OPT_DECAY_COSINE } opt_decay_style;

typedef struct {
    double max_lr, min_lr;
    int64_t warmup_iters; /* linear from 0 to max_lr over these */
    int64_t decay_iters;  /* decay ends here (counted from 0, warm-up included) */
    opt_decay_style style;
} opt_lr_schedule;

/* Parses "constant" | "linear" | "cosine"; returns -1 for anything else. */
int opt_decay_style_parse(const char *s, opt_decay_style *out);
/* Learning rate for iteration `iter` (1-based: the lr used by the iter-th optimizer step). */
double opt_lr_at(const opt_lr_schedule *s, int64_t iter);
/* Factor to multiply gradients by so their global norm is at most max_norm (1 when max_norm
 * is 0 or the norm is already small enough). */
double opt_clip_factor(double grad_norm, double max_norm);

#endif
