/* The data unit of a training run: the family's batch source (include/train/trident/batch_source.h),
 * chosen once, which fills an iteration's micro-batches before the schedule runs; the schedule's
 * iteration; evaluation on the validation split; and the loss's normalisation and the head's
 * figures, which the model's head says (gpt_head_*). No family is named here. See train_impl.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "trident/check.h"

static const gpt_config *config_of(const run_state *r) { return &r->model.chunks[0]->cfg; }

void run_batches_begin(run_state *r, gptds_split s)
{
    bd_start(&r->report.bd, BD_DATA);
    batch_source_begin(r->batches.source, s, r->batches.consumed, r->ps->dp_group);
    bd_stop(&r->report.bd, BD_DATA);
}

/* Mean loss over `iters` global batches of split s starting at sample `consumed`. */
double run_evaluate(run_state *r, gptds_split s, int64_t consumed, int64_t iters)
{
    double total = 0;
    run_wait_params(r);
    be_lowp_invalidate(r->model.be); /* evaluation follows a step */
    r->batches.it.training = 0;
    for (int64_t i = 0; i < iters; i++) {
        r->batches.consumed = consumed + i * r->gbs;
        run_batches_begin(r, s);
        total += pp_run(r->model.schedule, &r->batches.it);
    }
    r->batches.it.training = 1;
    memset(r->batches.it.stats, 0, sizeof r->batches.it.stats); /* the training iterations' sums are their own */
    comm_allreduce(r->ps->dpcp_group, &total, 1, COMM_F64, COMM_SUM); /* each cp rank: its tokens' */
    /* the loss lives on the last stage: share it with every rank */
    comm_bcast(r->ps->pp_group, &total, 1, COMM_F64, r->ps->pp - 1);
    return total / ((double)iters * gpt_head_loss_divisor(config_of(r), r->gbs));
}

void run_batches_open(run_state *r, const gpt_config *c, comm *world)
{
    const td_args *a = r->a;
    ps_state *ps = r->ps;
    /* data: every rank reads; rank 0 builds the index caches first so the others load them */
    int64_t want[GPTDS_NSPLITS];
    gptds_target_samples(r->train_iters, 0, a->eval_interval, a->eval_iters, r->gbs, want);
    gptds_config dc;
    gptds_config_from_args(&dc, a, want);
    char vsrc[1100];
    if (a->tokenizer_model) snprintf(vsrc, sizeof vsrc, "--tokenizer-model %s", a->tokenizer_model);
    else snprintf(vsrc, sizeof vsrc, "--vocab-file %s", a->vocab_file);
    dc.vocab_size = c->vocab;
    dc.vocab_source = vsrc;
    r->batches.source = batch_source_open(&dc, a, c, a->micro_batch_size, r->num_micro, ps->dp, ps->dp_rank, world);
    gptds_config_free(&dc);
    r->batches.eval = a->eval_iters > 0 && batch_source_num_samples(r->batches.source, GPTDS_VALID) > 0;
    if (a->eval_iters > 0 && !r->batches.eval && ps->world_rank == 0)
        td_warn("--split %s leaves no validation documents: no validation runs", a->split);
}

void run_batches_iteration(run_state *r, const gpt_config *c)
{
    const td_args *a = r->a;
    size_t tokens = (size_t)a->micro_batch_size * c->seq;
    r->batches.it = (pp_iteration){.ps = r->ps,
                                   .chunks = r->model.chunks,
                                   .nchunks = r->model.nchunks,
                                   .num_micro = r->num_micro,
                                   .mbs = a->micro_batch_size,
                                   .loss_scale = (float)(1.0 / gpt_head_loss_divisor(c, r->gbs)),
                                   .training = 1,
                                   .scatter_gather = pp_scatter_gather_applies(r->ps, !a->no_scatter_gather_tensors_in_pipeline),
                                   .micro = r->batches.source->micro,
                                   .grad_in = be_alloc(r->model.be, tokens * c->hidden * sizeof(float))};
    if (r->ps->pp > 1)
        for (int k = 0; k < 2; k++) r->batches.it.prefetch[k] = be_alloc(r->model.be, tokens * c->hidden * sizeof(float));
}

void run_batches_close(run_state *r)
{
    be_dfree(r->model.be, r->batches.it.grad_in);
    free(r->batches.block_sums);
    for (int k = 0; k < 2; k++)
        if (r->batches.it.prefetch[k]) be_dfree(r->model.be, r->batches.it.prefetch[k]);
    batch_source_close(r->batches.source);
}

float run_batches_loss_scale(const run_state *r, double scale)
{
    return (float)(scale / gpt_head_loss_divisor(config_of(r), r->gbs));
}

double run_batches_loss(const run_state *r, double loss_sum)
{
    return loss_sum / gpt_head_loss_divisor(config_of(r), r->gbs);
}

/* The blocks' statistics of the iteration: each stage's layers' sums summed over the
 * data-parallel ranks, then gathered over the pipeline by a sum (each stage holds its own
 * layers'), so that every rank holds the whole model's; then what each kind does with them
 * before the optimizer step, on every rank alike. */
void run_batches_block_stats(run_state *r)
{
    size_t n = gpt_block_stats_size(config_of(r));
    if (n == 0) return;
    if (!r->batches.block_sums) r->batches.block_sums = td_xcalloc(n, sizeof(double));
    double *sums = r->batches.block_sums;
    memset(sums, 0, n * sizeof(double));
    for (int k = 0; k < r->model.nchunks; k++) gpt_block_stats_take(r->model.chunks[k], sums);
    comm_allreduce(r->ps->dpcp_group, sums, n, COMM_F64, COMM_SUM);
    if (r->ps->pp > 1) comm_allreduce(r->ps->pp_group, sums, n, COMM_F64, COMM_SUM);
    for (int k = 0; k < r->model.nchunks; k++) gpt_block_stats_apply(r->model.chunks[k], sums);
}

/* ... and their metrics, by the kinds' names: after the head's in the log line, their lists in
 * metrics.jsonl. */
static void block_metrics(run_state *r, met_record *rec)
{
    if (!r->batches.block_sums) return;
    gpt_stats_scope sc = {.micro_batches = (double)r->num_micro * r->ps->dp, .samples = (double)r->gbs};
    rec->nextra += gpt_block_metrics(config_of(r), r->batches.block_sums, &sc, rec->extra + rec->nextra,
                                     GPT_MAX_STATS - rec->nextra, rec->arrays, &rec->narrays);
}

void run_batches_metrics(run_state *r, met_record *rec)
{
    const gpt_config *c = config_of(r);
    int n = gpt_head_nstats(c);
    rec->val_name = gpt_head_loss_name(c);
    if (n > 0) {
        double *st = r->batches.it.stats;
        comm_allreduce(r->ps->dpcp_group, st, (size_t)n, COMM_F64, COMM_SUM);
        comm_bcast(r->ps->pp_group, st, (size_t)n, COMM_F64, r->ps->pp - 1);
        rec->nextra = gpt_head_metrics(c, st, &rec->lm_loss, rec->extra);
        memset(st, 0, (size_t)n * sizeof(double));
    }
    block_metrics(r, rec);
    rec->nextra += batch_source_metrics(r->batches.source, rec->extra + rec->nextra, GPT_MAX_STATS - rec->nextra);
}
