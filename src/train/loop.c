/* The training loop: one iteration is zeroed grads, the schedule over the micro-batches, the
 * data-parallel gradient reduction, the unscaled grad norm, the loss scale's update, AdamW at the
 * schedule's learning rate, then the metrics record, evaluation every --eval-interval and the
 * checkpoint and exit conditions; after the last one the final save, --dump-params and the
 * end-of-run reports. See train_impl.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train_impl.h"
#include "trident/check.h"
#include "trident/debug.h"
#include "trident/timer.h"

void run_loop(run_state *r, ckpt_progress prog, int resume, double t_begin)
{
    const td_args *a = r->a;
    char msg[4096];
    int64_t overflow_test_iter = td_debug_get()->overflow_iter > 0 ? td_debug_get()->overflow_iter : -1;
    const gpt_config *c = &r->model.chunks[0]->cfg;
    double flops_iter = gpt_flops_per_iteration(c, r->gbs, 0);
    int64_t consumed = prog.consumed_train, valid_consumed = prog.consumed_valid, last_saved = -1;
    int64_t last_iter = prog.iteration, stopped = 0;
    double t_start = td_now();

    for (int64_t iter = prog.iteration + 1; iter <= r->train_iters && !stopped; iter++) {
        double t0 = td_now(), c0 = ps_comm_seconds(r->ps), pp0 = r->batches.it.transfer_s;
        double x0[PS_GROUPS], f0[PS_GROUPS];
        ps_comm_times(r->ps, x0, f0);
        bd_begin_iteration(&r->report.bd);
        bd_start(&r->report.bd, BD_OPTIMIZER);
        for (int k = 0; k < r->model.nchunks; k++) be_zero(r->model.be, r->model.chunks[k]->grads, r->model.chunks[k]->numel);
        be_lowp_invalidate(r->model.be); /* the last step (or a load) changed the weights */
        bd_stop(&r->report.bd, BD_OPTIMIZER);
        r->batches.consumed = consumed;
        double scale = r->optim.scaled ? r->optim.scaler.scale : 1.0;
        r->batches.it.loss_scale = run_batches_loss_scale(r, scale);
        run_batches_begin(r, GPTDS_TRAIN);
        double loss_sum = pp_run(r->model.schedule, &r->batches.it);
        dp_finish_grads(r->model.dp, r->model.nchunks);
        run_batches_block_stats(r);
        bd_start(&r->report.bd, BD_OPTIMIZER);
        if (iter == overflow_test_iter) run_inject_overflow(r);
        double norm = opt_unscaled_grad_norm(r->optim.opt, scale);
        int found_inf = !isfinite(norm);
        if (found_inf && !r->optim.scaled)
            td_fatal(1, "iteration %lld: the gradient norm is %g (NaN or Inf); %s", (long long)iter, norm,
                     resume && iter == prog.iteration + 1
                         ? "the first iteration from the loaded checkpoint: check its weights (a NaN or a value "
                           "that overflows), then --lr and the data"
                         : "lower --lr or check the data");
        if (r->optim.scaled) opt_loss_scaler_update(&r->optim.scaler, found_inf);
        r->optim.skipped += found_inf;
        int64_t step = iter - r->optim.skipped; /* Adam steps and the schedule count only the steps taken */
        double lr = opt_lr_at(&r->optim.lr, found_inf ? step + 1 : step);
        bd_start(&r->report.bd, BD_ADAMW);
        if (opt_adamw_step_scaled(r->optim.opt, lr, norm, a->clip_grad, scale, step))
            for (int k = 0; k < r->model.nchunks; k++) dp_start_param_gather(r->model.dp[k]);
        bd_stop(&r->report.bd, BD_ADAMW);
        bd_stop(&r->report.bd, BD_OPTIMIZER);
        consumed += r->gbs;
        comm_allreduce(r->ps->dpcp_group, &loss_sum, 1, COMM_F64, COMM_SUM); /* cp: each its tokens' */
        comm_bcast(r->ps->pp_group, &loss_sum, 1, COMM_F64, r->ps->pp - 1);
        double loss = run_batches_loss(r, loss_sum);
        be_sync(r->model.be);
        bd_end_iteration(&r->report.bd);
        double dt = td_now() - t0;

        met_record rec = {0};
        rec.iteration = iter;
        rec.consumed_samples = consumed;
        rec.lm_loss = loss;
        rec.lr = lr;
        rec.grad_norm = norm;
        rec.loss_scale = scale;
        rec.skipped = found_inf;
        rec.skipped_total = r->optim.skipped;
        rec.elapsed_ms = dt * 1e3;
        rec.comm_ms = (ps_comm_seconds(r->ps) - c0) * 1e3;
        rec.pp_ms = (r->batches.it.transfer_s - pp0) * 1e3;
        double x1[PS_GROUPS], f1[PS_GROUPS];
        ps_comm_times(r->ps, x1, f1);
        for (int g = 0; g < PS_GROUPS; g++) {
            rec.exposed_ms[g] = (x1[g] - x0[g]) * 1e3;
            rec.inflight_ms[g] = (f1[g] - f0[g]) * 1e3;
        }
        rec.tokens_per_s = (double)r->gbs * c->seq / dt;
        rec.model_tflops_per_rank = flops_iter / dt / r->ps->world_size / 1e12;
        rec.mfu = run_mfu_of(r, rec.model_tflops_per_rank, iter);
        rec.val_loss = NAN;
        run_batches_metrics(r, &rec);
        if (r->batches.eval && (iter % a->eval_interval == 0 || iter == r->train_iters)) {
            rec.val_loss = run_evaluate(r, GPTDS_VALID, valid_consumed, a->eval_iters);
            valid_consumed += a->eval_iters * r->gbs;
        }
        if (!isfinite(loss)) {
            snprintf(msg, sizeof msg, "the loss is %g (a NaN or Inf in the forward pass, which no loss scale "
                     "changes)", loss);
            run_stop_diverged(a, iter, last_saved, msg);
        }
        if (r->optim.scaled && opt_loss_scaler_diverged(&r->optim.scaler)) {
            snprintf(msg, sizeof msg, "the gradients overflowed in %d steps in a row with the loss scale at its %s %g "
                     "(%lld steps skipped in all; a smaller %s may help)", OPT_DIVERGED_OVERFLOWS,
                     r->optim.scaler.dynamic ? "minimum (--min-loss-scale)" : "constant value (--loss-scale)",
                     r->optim.scaler.scale, (long long)r->optim.skipped, r->optim.scaler.dynamic ? "--min-loss-scale" : "--loss-scale");
            run_stop_diverged(a, iter, last_saved, msg);
        }
        rec.time_left_s = (td_now() - t_start) / (double)(iter - prog.iteration) * (double)(r->train_iters - iter);
        if (r->report.reporter) {
            met_write(r->report.metrics, &rec);
            tb_log_iteration(r->report.tb, &rec, r->optim.scaled, a->tensorboard_log_interval);
            if (iter % a->log_interval == 0 || iter == 1 || iter == r->train_iters || isfinite(rec.val_loss))
                met_print(&rec, r->train_iters, r->gbs);
        }
        last_iter = iter;
        ckpt_progress now = run_progress_now(r, iter, consumed, valid_consumed);
        stopped = run_after_iteration(r, &now, t_begin, &last_saved);
    }
    r->report.rss_peak = (double)run_peak_rss();
    if (a->save && last_iter > 0 && last_iter != last_saved) { /* also a loaded one: re-saves it as laid out now */
        ckpt_progress now = run_progress_now(r, last_iter, consumed, valid_consumed);
        run_save_checkpoint(r, &now);
    }
    if (a->dump_params) run_dump_params(r, a->dump_params);
    if (r->report.reporter) {
        double total = td_now() - t_start;
        long long ran = (long long)(last_iter - prog.iteration);
        char from[96] = "";
        if (prog.iteration > 0 && ran > 0)
            snprintf(from, sizeof from, " (%lld to %lld, resumed from iteration %lld)", (long long)prog.iteration + 1,
                     (long long)last_iter, (long long)prog.iteration);
        TD_INFO("done: %lld iteration%s%s in %.1f s%s; peak memory (RSS) %.1f MiB", ran, td_plural(ran), from, total,
                ran == 0 && resume ? " (none trained: the checkpoint was already there)" : "",
                (double)run_peak_rss() / (1024.0 * 1024.0));
        tb_scalar(r->report.tb, "peak-memory-mib", last_iter, r->report.rss_peak / (1024.0 * 1024.0));
        tb_flush(r->report.tb);
        run_print_breakdown(r);
    }
    run_report_memory(r);
}
