/* The model unit of a training run: the rank grid, the backend, the model's configuration (its
 * vocabulary read from the tokenizer) and this rank's chunks with their data parallelism. See
 * train_impl.h. */
#include <string.h>

#include "train_impl.h"
#include "xfer.h"
#include "trident/check.h"

gpt_config run_model_config(const td_args *a, const ps_state *ps)
{
    return ckpt_config_of_args(a, run_tokenizer_vocab(a, ps->world), ps->tp);
}

/* Completes every parameter all-gather in flight (distributed optimizer): before anything
 * reads the parameters outside a forward. */
void run_wait_params(run_state *r)
{
    for (int c = 0; c < r->model.nchunks; c++) dp_wait_params(r->model.dp[c]);
}

void run_model_grid(run_state *r, comm *world)
{
    const td_args *a = r->a;
    be_comm_choose(a->comm ? a->comm : "auto", a->backend, world); /* --comm nccl that cannot work: exit 2 here */
    r->ps = ps_init_cp(world, a->tensor_model_parallel_size, a->context_parallel_size, a->pipeline_model_parallel_size);
    ps_state *ps = r->ps;
    ps_init_experts(ps, a->num_experts > 0 ? a->expert_model_parallel_size : 1);
    /* Megatron turns sequence parallelism off on one tensor-parallel rank */
    ps->sequence_parallel = a->sequence_parallel && ps->tp > 1;
    ps->cp_comm = strcmp(a->cp_comm_type, "all_gather") == 0 ? PS_CP_ALL_GATHER
                  : strcmp(a->cp_comm_type, "p2p") == 0      ? PS_CP_P2P
                                                             : PS_CP_A2A;
    if (a->sequence_parallel && ps->tp == 1 && ps->world_rank == 0)
        TD_INFO("--sequence-parallel does nothing without tensor parallelism: off");
    r->model.be = be_create(a->backend, 0);
    xfer_comm_attach(r->model.be, ps); /* --comm nccl: every group's NCCL twin */
    be_set_tf32(r->model.be, a->tf32);
    if (a->bf16 || a->fp16) be_set_gemm_dtype(r->model.be, a->bf16 ? BE_BF16 : BE_F16);
}

/* The recomputation the flags ask for. */
static gpt_recompute recompute_of(const td_args *a)
{
    gpt_recompute rc = {GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_UNIFORM, 0};
    if (a->recompute_granularity) {
        int full = strcmp(a->recompute_granularity, "full") == 0;
        rc.granularity = full ? GPT_RECOMPUTE_FULL : GPT_RECOMPUTE_SELECTIVE;
        if (full && strcmp(a->recompute_method, "block") == 0) rc.method = GPT_RECOMPUTE_BLOCK;
        if (full) rc.num_layers = a->recompute_num_layers;
    }
    return rc;
}

int run_model_build(run_state *r, const gpt_config *c, opt_shard shards[PS_MAX_CHUNKS])
{
    const td_args *a = r->a;
    ps_state *ps = r->ps;
    /* the model chunks of this rank: chunk k is virtual stage k * pp + pp_rank */
    pp_split split = run_split(a, ps->pp);
    r->model.nchunks = split.vp;
    TD_ASSERT(pp_schedule_parse(a->pipeline_schedule, ps->pp, r->model.nchunks, &r->model.schedule) == 0);
    int slots = pp_slots_needed(r->model.schedule, ps->pp, ps->pp_rank, r->model.nchunks, r->num_micro);
    r->model.slots = slots;
    gpt_recompute rc = recompute_of(a);
    /* on one data-parallel rank the distributed optimizer is the plain one (no second grad buffer) */
    int distributed = a->use_distributed_optimizer && ps->dpcp > 1;
    dp_config dpc = {(size_t)a->ddp_bucket_size, a->overlap_grad_reduce, distributed, a->overlap_param_gather};
    for (int k = 0; k < r->model.nchunks; k++) {
        int layer0, n;
        pp_split_layers(&split, k * ps->pp + ps->pp_rank, &layer0, &n);
        gpt_model *m = gpt_create_recompute(c, ps, r->model.be, layer0, n, a->micro_batch_size, slots, &rc);
        r->model.chunks[k] = m;
        be_lowp_register(r->model.be, m->params, m->numel_all);
        r->model.dp[k] = dp_attach(m, ps, &dpc);
        shards[k].ranges = dp_shard(r->model.dp[k], &shards[k].nranges, &shards[k].grads);
        r->model.shard_ranges[k] = shards[k].ranges;
        r->model.nshard_ranges[k] = shards[k].nranges;
    }
    char line[320];
    dp_choose_collectives(ps, a->dp_collectives, r->model.chunks[0]->numel, (size_t)a->ddp_bucket_size, distributed,
                          line, sizeof line); /* collective */
    if (ps->world_rank == 0 && line[0]) TD_INFO("%s", line);
    return distributed;
}

void run_model_free(run_state *r)
{
    for (int k = 0; k < r->model.nchunks; k++) {
        dp_detach(r->model.dp[k]);
        gpt_free(r->model.chunks[k]);
    }
    be_free(r->model.be);
    ps_free(r->ps);
}
