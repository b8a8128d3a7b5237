/* The trainer: see include/train/trident/trainer.h. trainer_run holds the run together: the flags
 * against the checkpoint and the rules, the --save lock, the signals, the set-up of each unit
 * (model, data, optimizer, reporting: train_impl.h), the --load, then the loop (loop.c). */
#include "trident/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared_fs.h"
#include "train_impl.h"
#include "trident/check.h"
#include "trident/timer.h"

int trainer_validate(const td_args *a, int world_size, char *msg, size_t msglen)
{
    return run_validate(a, world_size, msg, msglen);
}

long long trainer_peak_rss(void) { return run_peak_rss(); }

/* The sizes of the run: global batch, micro-batches per iteration, iterations; the reporter. */
static void setup_shape(run_state *r)
{
    const td_args *a = r->a;
    const ps_state *ps = r->ps;
    r->report.reporter = ps->tp_rank == 0 && ps->cp_rank == 0 && ps->dp_rank == 0 && ps_is_last_stage(ps);
    r->gbs = a->global_batch_size ? a->global_batch_size : a->micro_batch_size * ps->dp;
    r->num_micro = r->gbs / (a->micro_batch_size * ps->dp);
    r->train_iters = td_args_given(a, "--train-iters") ? a->train_iters : a->train_samples / r->gbs;
    if (r->train_iters < 1)
        td_usage_error("--train-samples %lld is less than one global batch (%d)", (long long)a->train_samples,
                       r->gbs);
}

/* Sets up every unit of the run, in the order that keeps the memory measurements honest: the
 * GEMM peak and the resident memory before the data and the model, the heap trimmed before
 * the memory prediction. */
static void setup(run_state *r, const td_args *a, comm *world)
{
    memset(r, 0, sizeof *r);
    r->a = a;
    run_model_grid(r, world);
    run_report_peak(r);
    gpt_config c = run_model_config(a, r->ps);
    run_report_rss_start(r);
    setup_shape(r);
    run_batches_open(r, &c, world);
    opt_shard shards[PS_MAX_CHUNKS];
    int distributed = run_model_build(r, &c, shards);
    run_optim_create(r, shards, distributed);
    run_trim_heap(); /* the initialization's host buffer of the largest tensor (the embedding's) */
    run_predict_memory(r, &c, r->model.slots);
    run_optim_schedule(r);
    bd_init(&r->report.bd, r->model.be, r->ps);
    run_batches_iteration(r, &c);
    run_report_start(r, &c);
    run_optim_describe(r);
    run_report_open(r);
}

static void teardown(run_state *r)
{
    run_report_close(r);
    run_batches_close(r);
    opt_adamw_free(r->optim.opt);
    run_model_free(r);
}

int trainer_run(const td_args *a, comm *world)
{
    double t_begin = td_now();
    td_args eff; /* the seed and the model settings may come from the checkpoint */
    td_args_copy(&eff, a);
    ckpt_meta meta;
    int resume = run_resume_find(&eff, world, &meta), rank = comm_rank(world);
    char msg[4096];
    /* every rank finds the same problem before allocating; rank 0 prints it, all exit 2 */
    if (run_lora_load_args(&eff, &meta, resume, rank == 0, msg, sizeof msg) ||
        (resume && ckpt_args_reconcile(&eff, &meta, run_tokenizer_vocab(&eff, world), eff.tensor_model_parallel_size, rank == 0,
                                       msg, sizeof msg)) ||
        trainer_validate(&eff, comm_size(world), msg, sizeof msg)) {
        if (rank == 0) fprintf(stderr, "error: trident train: %s\n", msg);
        if (resume) ckpt_meta_free(&meta);
        td_args_free(&eff);
        return TD_EXIT_USAGE;
    }
    if (eff.save && run_lock_save_dir(eff.save, world)) {
        if (resume) ckpt_meta_free(&meta);
        td_args_free(&eff);
        return 1;
    }
    if (eff.save) sfs_check_save_dir(world, eff.save); /* one folder for all ranks, never a node-local one */
    if (eff.save) {
        int64_t start = resume && !eff.finetune ? meta.progress.iteration : 0;
        int bad = rank == 0 && ckpt_check_save_dir(eff.save, start, resume ? meta.dir : NULL, msg, sizeof msg);
        run_fail_if_any(world, bad, msg);
    }
    if (eff.exit_signal_handler) run_ckpt_signals(&eff, rank);
    run_state r;
    setup(&r, &eff, world);
    a = &eff;
    ckpt_progress prog = {.seed = (uint64_t)eff.seed};
    if (resume) {
        if (r.ps->world_rank == 0) run_resume_note_changes(a, &meta, r.gbs);
        prog = run_resume_load(&r, &meta);
        if (a->lora_load) run_lora_load(&r);
        ckpt_meta_free(&meta);
        r.optim.skipped = prog.skipped;
        memcpy(r.ckpt.run_id, prog.run_id, sizeof r.ckpt.run_id);
        if (prog.has_loss_scale && r.optim.scaled && r.optim.scaler.dynamic && !a->finetune) {
            r.optim.scaler.scale = prog.loss_scale;
            r.optim.scaler.growth_tracker = prog.growth_tracker;
            r.optim.scaler.hysteresis_tracker = prog.hysteresis_tracker;
        }
    }
    if (!r.ckpt.run_id[0]) { /* a run from scratch, a --finetune, or a checkpoint from before run ids */
        if (rank == 0) ckpt_new_run_id(r.ckpt.run_id);
        comm_bcast(world, r.ckpt.run_id, sizeof r.ckpt.run_id, COMM_U8, 0);
    }
    if (resume && prog.iteration >= r.train_iters && r.report.reporter)
        TD_INFO("note: the checkpoint is at iteration %lld, already at or past --train-iters %lld%s: nothing to "
                "train; raise --train-iters to continue", (long long)prog.iteration, (long long)r.train_iters,
                td_args_given(a, "--train-iters") ? "" : " (--train-samples / --global-batch-size)");
    run_loop(&r, prog, resume, t_begin);
    teardown(&r);
    td_args_free(&eff);
    return 0;
}
