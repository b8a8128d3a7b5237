/* The data unit of a training run: the datasets (GPT's, or BERT's batches), the batch source
 * the schedule calls for each micro-batch, the schedule's iteration and its buffers, and
 * evaluation on the validation split. Every family-specific piece of the trainer's data path is
 * here. See train_impl.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"
#include "trident/check.h"

static void next_batch(void *user, int m, int32_t *ids, int32_t *targets, gpt_bert_batch *bert, int64_t *sample)
{
    batch_source *b = user;
    (void)bert;
    bd_start(b->bd, BD_DATA);
    gptds_micro_batch(b->ds, b->split, b->consumed, m, b->mbs, b->dp, b->dp_rank, b->buf);
    int S = b->seq;
    for (int j = 0; j < b->mbs; j++) {
        const int32_t *row = b->buf + (size_t)j * (S + 1);
        memcpy(ids + (size_t)j * S, row, (size_t)S * sizeof(int32_t));
        memcpy(targets + (size_t)j * S, row + 1, (size_t)S * sizeof(int32_t));
        sample[j] = b->consumed + (int64_t)m * b->mbs * b->dp + (int64_t)b->dp_rank * b->mbs + j;
    }
    bd_stop(b->bd, BD_DATA);
}

/* BERT: builds this rank's micro-batches of the iteration at r->batches.src.consumed (timed as data). */
void run_bert_begin(run_state *r, gptds_split s)
{
    if (!r->batches.bert) return;
    bd_start(&r->report.bd, BD_DATA);
    bert_source_begin(r->batches.bert, s, r->batches.src.consumed, r->ps->dp_group);
    bd_stop(&r->report.bd, BD_DATA);
}

/* Mean token loss over `iters` global batches of split s starting at sample `consumed`. */
double run_evaluate(run_state *r, gptds_split s, int64_t consumed, int64_t iters)
{
    double total = 0;
    run_wait_params(r);
    be_lowp_invalidate(r->model.be); /* evaluation follows a step */
    r->batches.src.split = s;
    r->batches.it.training = 0;
    for (int64_t i = 0; i < iters; i++) {
        r->batches.src.consumed = consumed + i * r->gbs;
        run_bert_begin(r, s);
        total += pp_run(r->model.schedule, &r->batches.it);
    }
    r->batches.it.training = 1;
    r->batches.src.split = GPTDS_TRAIN;
    memset(r->batches.it.bert_stats, 0, sizeof r->batches.it.bert_stats); /* the training iterations' sums are their own */
    comm_allreduce(r->ps->dp_group, &total, 1, COMM_F64, COMM_SUM);
    /* the loss lives on the last stage: share it with every rank */
    comm_bcast(r->ps->pp_group, &total, 1, COMM_F64, r->ps->pp - 1);
    /* BERT's batches are weighted to the mean already */
    return total / ((double)iters * (r->batches.bert ? 1.0 : (double)r->gbs * r->a->seq_length));
}

/* BERT: the iteration's masked-LM and sentence-order means and accuracies, from the last stage's
 * sums (zeroed for the next iteration). */
void run_bert_metrics(run_state *r, met_record *rec)
{
    double *st = r->batches.it.bert_stats;
    comm_allreduce(r->ps->dp_group, st, GPT_BERT_NSTATS, COMM_F64, COMM_SUM);
    comm_bcast(r->ps->pp_group, st, GPT_BERT_NSTATS, COMM_F64, r->ps->pp - 1);
    double tokens = st[GPT_BERT_MLM_TOKENS] > 0 ? st[GPT_BERT_MLM_TOKENS] : 1, n = st[GPT_BERT_SOP_SAMPLES];
    rec->bert = 1;
    rec->lm_loss = st[GPT_BERT_MLM_LOSS] / tokens;
    rec->lm_acc = st[GPT_BERT_MLM_CORRECT] / tokens;
    rec->sop_loss = n > 0 ? st[GPT_BERT_SOP_LOSS] / n : NAN;
    rec->sop_acc = n > 0 ? st[GPT_BERT_SOP_CORRECT] / n : NAN;
    memset(st, 0, GPT_BERT_NSTATS * sizeof(double));
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
    if (gpt_is_bert(c)) {
        r->batches.bert = bert_source_open(&dc, a, c, a->micro_batch_size, r->num_micro, ps->dp, ps->dp_rank, world);
    } else {
        if (ps->world_rank == 0) r->batches.data = gptds_open(&dc);
        comm_barrier(world);
        if (ps->world_rank != 0) r->batches.data = gptds_open(&dc);
    }
    gptds_config_free(&dc);
    r->batches.eval = a->eval_iters > 0 && (r->batches.bert ? bert_source_num_samples(r->batches.bert, GPTDS_VALID)
                                                            : gptds_num_samples(r->batches.data, GPTDS_VALID)) > 0;
    if (a->eval_iters > 0 && !r->batches.eval && ps->world_rank == 0)
        td_warn("--split %s leaves no validation documents: no validation runs", a->split);
}

void run_batches_iteration(run_state *r, const gpt_config *c)
{
    const td_args *a = r->a;
    ps_state *ps = r->ps;
    size_t tokens = (size_t)a->micro_batch_size * c->seq;
    r->batches.src = (batch_source){r->batches.data, GPTDS_TRAIN, 0, a->micro_batch_size, ps->dp, ps->dp_rank, c->seq,
                                    td_xmalloc((size_t)a->micro_batch_size * (c->seq + 1) * sizeof(int32_t)),
                                    &r->report.bd};
    r->batches.it = (pp_iteration){.ps = ps,
                                   .chunks = r->model.chunks,
                                   .nchunks = r->model.nchunks,
                                   .num_micro = r->num_micro,
                                   .mbs = a->micro_batch_size,
                                   .loss_scale = (float)(1.0 / ((double)r->gbs * c->seq)),
                                   .training = 1,
                                   .batch = r->batches.bert ? bert_source_batch : next_batch,
                                   .user = r->batches.bert ? (void *)r->batches.bert : (void *)&r->batches.src,
                                   .ids = td_xmalloc(tokens * sizeof(int32_t)),
                                   .targets = td_xmalloc(tokens * sizeof(int32_t)),
                                   .sample = td_xmalloc((size_t)a->micro_batch_size * sizeof(int64_t)),
                                   .grad_in = be_alloc(r->model.be, tokens * c->hidden * sizeof(float))};

    if (r->batches.bert) {
        r->batches.it.bert.types = td_xmalloc(tokens * sizeof(int32_t));
        r->batches.it.bert.lengths = td_xmalloc((size_t)a->micro_batch_size * sizeof(int32_t));
        r->batches.it.bert.sop = td_xmalloc((size_t)a->micro_batch_size * sizeof(int32_t));
    }
}

void run_batches_close(run_state *r)
{
    free(r->batches.src.buf);
    free(r->batches.it.ids);
    free(r->batches.it.targets);
    free(r->batches.it.sample);
    be_dfree(r->model.be, r->batches.it.grad_in);
    gptds_close(r->batches.data);
    bert_source_close(r->batches.bert);
    free((void *)r->batches.it.bert.types);
    free((void *)r->batches.it.bert.lengths);
    free((void *)r->batches.it.bert.sop);
}

float run_batches_loss_scale(const run_state *r, double scale)
{
    const gpt_config *c = &r->model.chunks[0]->cfg;
    return (float)(r->batches.bert ? scale : scale / ((double)r->gbs * c->seq));
}

double run_batches_loss(const run_state *r, double loss_sum)
{
    const gpt_config *c = &r->model.chunks[0]->cfg;
    return r->batches.bert ? loss_sum : loss_sum / ((double)r->gbs * c->seq);
}

void run_batches_metrics(run_state *r, met_record *rec)
{
    if (r->batches.bert) run_bert_metrics(r, rec);
}
