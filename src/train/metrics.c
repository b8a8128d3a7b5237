/* Training metrics: see include/trident/metrics.h. */
#include "trident/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trident/check.h"

struct met_writer {
    FILE *f;
};

met_writer *met_open(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f) td_fatal(1, "cannot open --metrics-file %s: %s", path, td_strerror(errno));
    met_writer *w = td_xcalloc(1, sizeof *w);
    w->f = f;
    return w;
}

void met_write(met_writer *w, const met_record *r)
{
    if (!w) return;
    fprintf(w->f,
            "{\"iteration\": %lld, \"consumed_samples\": %lld, \"lm_loss\": %.17g, \"lr\": %.17g, \"grad_norm\": %.17g, "
            "\"loss_scale\": %.9g, \"skipped\": %d, \"tokens_per_s\": %.6g, \"model_tflops_per_rank\": %.6g, "
            "\"mfu\": %.6g, \"elapsed_ms\": %.6g, \"comm_ms\": %.6g",
            (long long)r->iteration, (long long)r->consumed_samples, r->lm_loss, r->lr, r->grad_norm, r->loss_scale,
            r->skipped, r->tokens_per_s, r->model_tflops_per_rank, r->mfu, r->elapsed_ms, r->comm_ms);
    if (r->bert) {
        fprintf(w->f, ", \"lm_acc\": %.17g", r->lm_acc);
        if (!isnan(r->sop_loss)) fprintf(w->f, ", \"sop_loss\": %.17g, \"sop_acc\": %.17g", r->sop_loss, r->sop_acc);
    }
    if (!isnan(r->val_loss))
        fprintf(w->f, ", \"val_loss\": %.17g, \"val_ppl\": %.17g", r->val_loss, exp(r->val_loss));
    fprintf(w->f, "}\n");
    fflush(w->f);
}

void met_close(met_writer *w)
{
    if (!w) return;
    fclose(w->f);
    free(w);
}

void met_print(const met_record *r, int64_t train_iters, int global_batch)
{
    char bert[160] = "";
    if (r->bert && !isnan(r->sop_loss))
        snprintf(bert, sizeof bert, "lm acc: %.4f | sop loss: %.6E | sop acc: %.4f | ", r->lm_acc, r->sop_loss,
                 r->sop_acc);
    else if (r->bert)
        snprintf(bert, sizeof bert, "lm acc: %.4f | ", r->lm_acc);
    printf(" iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "learning rate: %.6E | global batch size: %5d | lm loss: %.6E | %sloss scale: %.1f | grad norm: %.3f | "
           "tokens/s: %.0f | TFLOP/s/rank: %.3f | MFU: %.1f%% | comm (ms): %.1f | number of skipped iterations: %lld |\n",
           (long long)r->iteration, (long long)train_iters, (long long)r->consumed_samples, r->elapsed_ms, r->lr,
           global_batch, r->lm_loss, bert, r->loss_scale, r->grad_norm, r->tokens_per_s, r->model_tflops_per_rank,
           100.0 * r->mfu, r->comm_ms, (long long)r->skipped_total);
    if (!isnan(r->val_loss))
        printf(r->bert ? " validation loss at iteration %lld | lm + sop loss value: %.6E |\n"
                       : " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n",
               (long long)r->iteration, r->val_loss, exp(r->val_loss));
    fflush(stdout);
}
