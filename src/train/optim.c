/* The optimizer unit of a training run: AdamW over the chunks' shards, the learning-rate
 * schedule and the loss scale. See train_impl.h. */
#include <math.h>
#include <string.h>

#include "train_impl.h"
#include "trident/check.h"

/* --debug-overflow-iteration N (trident/debug.h): at iteration N the last rank finds an Inf in one of
 * the gradients it steps, as an fp16 overflow would leave there; every rank must skip the step. */
void run_inject_overflow(run_state *r)
{
    if (r->ps->world_rank != r->ps->world_size - 1) return;
    for (int k = 0; k < r->model.nchunks; k++)
        if (r->optim.opt->shard[k].nranges > 0) {
            float *g = (float *)r->optim.opt->shard[k].grads + r->optim.opt->shard[k].ranges[0].shard;
            *g = INFINITY;
            return;
        }
}


void run_optim_create(run_state *r, const opt_shard shards[PS_MAX_CHUNKS], int distributed)
{
    const td_args *a = r->a;
    r->optim.scaled = a->fp16 || td_args_given(a, "--loss-scale");
    opt_adamw_hparams hp = {a->adam_beta1, a->adam_beta2, a->adam_eps, a->weight_decay};
    r->optim.opt = opt_adamw_create(r->model.be, r->ps, r->model.chunks, r->model.nchunks, shards, distributed, &hp);
    r->optim.opt->check_all_finite = r->optim.scaled;
}

void run_optim_schedule(run_state *r)
{
    const td_args *a = r->a;
    if (td_args_given(a, "--loss-scale"))
        opt_loss_scaler_init(&r->optim.scaler, 0, a->loss_scale, a->loss_scale, 1, 1);
    else
        opt_loss_scaler_init(&r->optim.scaler, 1, a->initial_loss_scale, a->min_loss_scale, a->loss_scale_window,
                             a->hysteresis);
    opt_decay_style style;
    if (opt_decay_style_parse(a->lr_decay_style, &style)) td_usage_error("--lr-decay-style %s", a->lr_decay_style);
    opt_lr_schedule *lr = &r->optim.lr;
    lr->max_lr = a->lr;
    lr->min_lr = a->min_lr;
    lr->style = style;
    lr->decay_iters = td_args_given(a, "--lr-decay-iters") ? a->lr_decay_iters : r->train_iters;
    lr->warmup_iters = td_args_given(a, "--lr-warmup-fraction") ? (int64_t)(a->lr_warmup_fraction * (double)lr->decay_iters)
                                                                : a->lr_warmup_iters;
}

void run_optim_describe(run_state *r)
{
    const td_args *a = r->a;
    const ps_state *ps = r->ps;
    /* the optimizer state of the first rank of each stage (its dp peers' differ by at most one
     * element a bucket) */
    if (ps->dp_rank == 0 && ps->tp_rank == 0) {
        size_t numel = 0;
        for (int k = 0; k < r->model.nchunks; k++) numel += r->model.chunks[k]->numel;
        size_t st = opt_adamw_state_numel(r->optim.opt);
        TD_INFO("optimizer: AdamW %s (%d bucket%s per chunk); state on this rank %.2f MB: both moments of %zu of its "
                "%zu parameters", r->optim.opt->sharded ? "distributed over dp" : a->use_distributed_optimizer ? "on one dp rank (the "
                "distributed optimizer is the plain one)" : "replicated over dp",
                dp_num_buckets(r->model.dp[0]), dp_num_buckets(r->model.dp[0]) > 1 ? "s" : "", (double)st * sizeof(float) / 1e6,
                st / 2, numel);
    }
}
