/* Training metrics: see include/train/trident/metrics.h. */
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

/* ", \"key\": x" with `digits` significant digits; JSON has no NaN or Infinity: null for them
 * (a skipped step's grad norm, a perplexity past the double range). */
static void put_num(FILE *f, const char *key, double x, int digits)
{
    if (isfinite(x)) fprintf(f, ", \"%s\": %.*g", key, digits, x);
    else fprintf(f, ", \"%s\": null", key);
}

/* ", \"key\": [...]": a flat list, or a list of rows' lists, each number in a's format. */
static void put_array(FILE *f, const gpt_metric_array *a)
{
    fprintf(f, ", \"%s\": [", a->key);
    for (int i = 0; i < a->rows; i++) {
        if (a->nested) fprintf(f, "%s[", i ? ", " : "");
        for (int j = 0; j < a->cols; j++) {
            if (i + j > 0 && (j > 0 || !a->nested)) fprintf(f, ", ");
            fprintf(f, a->fmt, a->values[(size_t)i * a->stride + j]);
        }
        if (a->nested) fprintf(f, "]");
    }
    fprintf(f, "]");
}

void met_write(met_writer *w, const met_record *r)
{
    if (!w) return;
    fprintf(w->f, "{\"iteration\": %lld, \"consumed_samples\": %lld", (long long)r->iteration,
            (long long)r->consumed_samples);
    put_num(w->f, "lm_loss", r->lm_loss, 17);
    put_num(w->f, "lr", r->lr, 17);
    put_num(w->f, "grad_norm", r->grad_norm, 17);
    put_num(w->f, "loss_scale", r->loss_scale, 9);
    fprintf(w->f, ", \"skipped\": %d", r->skipped);
    put_num(w->f, "tokens_per_s", r->tokens_per_s, 6);
    put_num(w->f, "model_tflops_per_rank", r->model_tflops_per_rank, 6);
    put_num(w->f, "mfu", r->mfu, 6);
    put_num(w->f, "elapsed_ms", r->elapsed_ms, 6);
    put_num(w->f, "comm_ms", r->comm_ms, 6);
    put_num(w->f, "pp_ms", r->pp_ms, 6);
    for (int g = 0; g < PS_GROUPS; g++) {
        char key[40];
        snprintf(key, sizeof key, "%s_exposed_ms", ps_group_name((ps_group)g));
        put_num(w->f, key, r->exposed_ms[g], 6);
        snprintf(key, sizeof key, "%s_inflight_ms", ps_group_name((ps_group)g));
        put_num(w->f, key, r->inflight_ms[g], 6);
    }
    for (int i = 0; i < r->nextra; i++) put_num(w->f, r->extra[i].key, r->extra[i].value, 17);
    for (int i = 0; i < r->narrays; i++) put_array(w->f, &r->arrays[i]);
    if (!isnan(r->val_loss)) {
        put_num(w->f, "val_loss", r->val_loss, 17);
        put_num(w->f, "val_ppl", exp(r->val_loss), 17);
    }
    fprintf(w->f, "}\n");
    fflush(w->f);
}

void met_close(met_writer *w)
{
    if (!w) return;
    fclose(w->f);
    free(w);
}

void met_format_duration(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, len, "?");
        return;
    }
    long long t = llround(s);
    snprintf(buf, len, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

void met_print(const met_record *r, int64_t train_iters, int global_batch)
{
    char left[48];
    met_format_duration(left, sizeof left, r->time_left_s);
    char extra[320] = "";
    size_t at = 0;
    for (int i = 0; i < r->nextra && at < sizeof extra; i++) {
        char num[64];
        snprintf(num, sizeof num, r->extra[i].fmt, r->extra[i].value);
        at += (size_t)snprintf(extra + at, sizeof extra - at, "%s: %s | ", r->extra[i].label, num);
    }
    printf(" iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "learning rate: %.6E | global batch size: %5d | lm loss: %.6E | %sloss scale: %.1f | grad norm: %.3f | "
           "tokens/s: %.0f | TFLOP/s/rank: %.3f | MFU: %.1f%% | comm (ms): %.1f | number of skipped iterations: %lld | "
           "time left: %s |\n",
           (long long)r->iteration, (long long)train_iters, (long long)r->consumed_samples, r->elapsed_ms, r->lr,
           global_batch, r->lm_loss, extra, r->loss_scale, r->grad_norm, r->tokens_per_s, r->model_tflops_per_rank,
           100.0 * r->mfu, r->comm_ms, (long long)r->skipped_total, left);
    if (!isnan(r->val_loss) && r->val_name)
        printf(" validation loss at iteration %lld | %s value: %.6E |\n", (long long)r->iteration, r->val_name,
               r->val_loss);
    else if (!isnan(r->val_loss))
        printf(" validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.6E |\n",
               (long long)r->iteration, r->val_loss, exp(r->val_loss));
    fflush(stdout);
}
