/* The optimizer. Owns AdamW over the models' flat buffers (the moments of the elements it
 * steps: the whole buffers, or with the distributed optimizer this rank's shard; weight decay
 * by each tensor's no_decay), the global gradient norm, the
 * learning-rate schedule (Megatron's OptimizerParamScheduler: linear warm-up, then constant,
 * linear or cosine decay to min-lr) and the clip factor. The AdamW arithmetic is a backend
 * kernel. */
#ifndef TRIDENT_OPTIM_H
#define TRIDENT_OPTIM_H

#include <stdint.h>

#include "trident/data_parallel.h"
#include "trident/gpt.h"
#include "trident/parallel_state.h"

typedef struct {
    double beta1, beta2, eps, weight_decay;
} opt_adamw_hparams;

/* What the optimizer steps of one chunk: the ranges of its buffers (data_parallel's shard: the
 * whole buffer, or this rank's pieces of every bucket with the distributed optimizer) and where
 * their reduced gradients are (range k's at grads + ranges[k].shard). */
typedef struct {
    const dp_range *ranges;
    int nranges;
    const float *grads;
} opt_shard;

/* AdamW over the model chunks of one rank, holding moments only for the elements it steps. */
typedef struct opt_adamw {
    const struct backend *be;
    const ps_state *ps;
    int nchunks;
    int sharded;                                  /* the shards split the buffers over dp */
    gpt_model *chunks[PS_MAX_CHUNKS];
    opt_shard shard[PS_MAX_CHUNKS];
    size_t state_numel[PS_MAX_CHUNKS];           /* elements stepped per chunk (the moments' length) */
    float *m[PS_MAX_CHUNKS], *v[PS_MAX_CHUNKS]; /* moments per chunk in shard order, zeroed; laid
                                                   * out as the parameters when not sharded */
    opt_adamw_hparams hp;
    int check_all_finite; /* the grad norm is Inf when any stepped gradient is not finite, also one
                           * it does not count (loss scaling: an overflow must skip the step) */
} opt_adamw;

/* shards: one per chunk; `sharded`: they split the chunk over the data-parallel group (the
 * distributed optimizer), so the grad norm sums over it too. */
opt_adamw *opt_adamw_create(const struct backend *be, const ps_state *ps, gpt_model *const *chunks, int nchunks,
                            const opt_shard *shards, int sharded, const opt_adamw_hparams *hp);
void opt_adamw_free(opt_adamw *o);
/* Elements of optimizer state this rank holds (both moments), for memory accounting. */
size_t opt_adamw_state_numel(const opt_adamw *o);
/* The global gradient norm of the chunks' (reduced) grads: every logical parameter counted once
 * over tp, pp and dp (replicated tensors on tp rank 0, the last stage's embedding copy left
 * out, a sharded element on its owner), summed over the model-parallel group (and over dp when
 * sharded). Collective over them. */
double opt_grad_norm(const opt_adamw *o);
/* One AdamW step at `lr` on grads scaled by gscale (clipping) over the shards; step counts
 * from 1. Weight decay per element from the tensor it lies in (no_decay). */
void opt_adamw_step(opt_adamw *o, double lr, double gscale, int64_t step);

/* Loss-scaled gradients (the backward started from d(loss) * scale; scale 1 without one): the
 * global norm of the gradients with the scale divided out (opt_grad_norm / scale). Not finite
 * when any gradient overflowed. Collective as opt_grad_norm. */
double opt_unscaled_grad_norm(const opt_adamw *o, double scale);
/* One AdamW step on loss-scaled gradients: divides the scale out and clips to max_norm (0: no
 * clipping) by `norm`, their unscaled norm. When norm is not finite (an overflow) steps nothing
 * and returns 0 (the step is skipped); 1 when it stepped. */
int opt_adamw_step_scaled(opt_adamw *o, double lr, double norm, double max_norm, double scale, int64_t step);

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

/* ---- loss scaling for --fp16 (and a constant --loss-scale): Megatron's grad scalers ----
 * The backward starts from d(loss) * scale, so small fp16 gradients do not flush to zero; the
 * optimizer divides it out. A step whose gradients hold an Inf or NaN (an fp16 overflow; found by
 * the grad norm, which every rank of the model-parallel group shares) is skipped. The dynamic
 * scaler then counts down `hysteresis` overflows before halving the scale (not below min_scale),
 * and doubles it after `window` steps in a row without one (resetting the count-down).
 * OPT_DIVERGED_OVERFLOWS overflows in a row with the scale at its floor (min_scale, or the
 * constant scale) are a divergence: the skipped steps leave the weights as they are, so nothing
 * would change but the batch; the trainer stops. */
#define OPT_DIVERGED_OVERFLOWS 10
typedef struct {
    int dynamic;             /* 0: constant scale (--loss-scale) */
    double scale, min_scale;
    int64_t window;          /* --loss-scale-window */
    int hysteresis;          /* --hysteresis */
    int64_t growth_tracker;  /* steps since the last overflow or growth */
    int hysteresis_tracker;  /* overflows left before the next halving */
    int64_t floor_overflows; /* overflows in a row with the scale already at its floor */
} opt_loss_scaler;

void opt_loss_scaler_init(opt_loss_scaler *s, int dynamic, double scale, double min_scale, int64_t window,
                          int hysteresis);
/* After a step's gradients: found_inf says they overflowed (the step is skipped). */
void opt_loss_scaler_update(opt_loss_scaler *s, int found_inf);
/* Nonzero once OPT_DIVERGED_OVERFLOWS updates in a row overflowed with the scale at its floor. */
int opt_loss_scaler_diverged(const opt_loss_scaler *s);

#endif
